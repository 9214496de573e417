// The per-site primitive cache the conv family shares (conv.cc, pool.cc). Internal.
#ifndef DYNVM_KERNELS_DNNL_CONV_COMMON_H_
#define DYNVM_KERNELS_DNNL_CONV_COMMON_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/status_macros.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/conv.h"

namespace dynvm::onednn {

// The primitives a site bound for one concrete shape. Reorders are bound only where the
// primitive's chosen layout differs from the tensor's plain one.
struct Entry {
  ShapeKey key;
  uint64_t last_use = 0;
  bool use_fallback = false;    // oneDNN has no primitive for this shape
  bool winograd = false;        // the convolution runs oneDNN's Winograd algorithm
  bool gemm = false;            // the convolution runs as im2col + one sgemm (w_reorder packs W)
  bool own_winograd = false;    // the convolution runs dynvm's Winograd F(2x2, 3x3) (winograd.h)
  bool reference_impl = false;  // oneDNN bound its reference implementation ("ref:any")
  bool one_pixel = false;       // one-pixel images as a GEMV / sgemm (ExecuteOnePixel)
  bool depthwise_1d = false;    // a plain depthwise Conv1d on dynvm's microkernel (depthwise.h)
  bool pointwise_1d = false;    // a pointwise Conv1d as one sgemm per image on the VM's threads
  bool conv1d_gemm = false;     // a Conv1d as im2col + sgemm rows on the VM's threads
  bool per_image = false;       // bound for one image of a batch split over the VM's threads
  // per_image: for each range of the split, its own handles (BoundPrimitive::Share) on main,
  // src_reorder, dst_reorder and sum_reorder.
  std::vector<std::array<BoundPrimitive, 4>> lanes;
  // A batch-1 convolution split by blocks of output rows over the VM's threads (conv.cc,
  // ExecuteRowBlocks): per block its first output row (row_starts[i], row_starts[i + 1]) and an
  // entry bound for it (its input rows and its own padding); row_blocks_bound: tried once
  // (empty when a block had only oneDNN's reference implementation).
  bool row_blocks_bound = false;
  std::vector<int64_t> row_starts;
  std::vector<std::unique_ptr<Entry>> row_blocks;
  BoundPrimitive main;
  BoundPrimitive src_reorder, w_reorder, dst_reorder, sum_reorder;
  dnnl::memory::desc w_packed;  // the weights layout the primitive takes (w_reorder bound)
  size_t src_bytes = 0, w_bytes = 0, dst_bytes = 0;  // workspace for reordered operands
  // A FusedConv with a depthwise stage: `main` is the 1x1 conv, with oneDNN's depthwise post-op
  // (dw_fused) or followed by `second`, the depthwise conv, through a buffer per thread.
  bool dw_fused = false;
  BoundPrimitive second, dw_reorder;
  dnnl::memory::desc dw_packed;  // the depthwise weights' layout (dw_reorder bound)
  size_t dw_bytes = 0;
  std::vector<float> zero_bias;   // the fused 1x1 conv's bias when it has none
  std::vector<float> out_scales;  // QLinearConv: the output scales bound into the primitive
  // QLinearConv with constant weights (constant_weights = 1): the weights in the primitive's
  // layout, reordered on the first run (from w_cache_src) and kept (qconv.cc).
  mutable std::vector<char> w_cache;
  mutable const void* w_cache_src = nullptr;
};

// A site's entries, least recently used evicted first (ConvCacheCapacity()).
struct SiteCache : KernelState {
  std::vector<std::unique_ptr<Entry>> entries;
  uint64_t tick = 0;
  int64_t binds = 0, evictions = 0;

  // The entry for `key`; a new (or recycled) one, with *fresh set, when there is none.
  Entry* Lookup(const ShapeKey& key, bool* fresh);
};

// Runs bind(engine) inside Guard for a fresh entry. Unimplemented (no primitive for the shape)
// marks the entry use_fallback; other errors are returned (the entry then never matches).
absl::Status BindEntry(Entry* e, absl::string_view what,
                       const std::function<void(const dnnl::engine&)>& bind);

// Whether oneDNN picked its reference (unoptimized) implementation for `pd`.
bool IsReferenceImpl(const dnnl::primitive_desc& pd);

// Binds a reorder from -> to (user scratchpad). REQUIRES: inside Guard.
void BindReorder(BoundPrimitive* r, const dnnl::engine& engine, const dnnl::memory::desc& from,
                 const dnnl::memory::desc& to);

// `bytes` rounded up to a cache line.
size_t Align(size_t bytes);

}  // namespace dynvm::onednn

#endif  // DYNVM_KERNELS_DNNL_CONV_COMMON_H_
