// The oneDNN conv family (conv.cc, pool.cc): what tests and tools may ask of a site. Internal.
//
// Per-site primitive cache: every conv-family site keeps the primitives it bound for its last
// few concrete shapes (a least-recently-used list, ConvCacheCapacity() entries), so a model
// whose spatial size changes from run to run (an OCR line's width) rebinds only on a shape it
// has not seen recently, and a repeated shape runs without binding or allocating.
#ifndef DYNVM_KERNELS_DNNL_CONV_H_
#define DYNVM_KERNELS_DNNL_CONV_H_

#include <cstdint>

#include "kernels/kernel.h"

namespace dynvm::onednn {

// Entries per site: DYNVM_DNNL_PRIMITIVE_CACHE (1..1024) when set, else 16. Read once.
int ConvCacheCapacity();

struct ConvCacheStats {
  int entries = 0;          // shapes cached now
  int64_t binds = 0;        // primitives bound (cache misses)
  int64_t evictions = 0;    // entries dropped for a new shape
  int winograd = 0;         // cached convolutions on oneDNN's Winograd algorithm
  int gemm = 0;             // cached convolutions run as im2col + one GEMM
  int own_winograd = 0;     // cached convolutions on dynvm's Winograd F(2x2, 3x3)
  int reference_impls = 0;  // cached primitives on oneDNN's reference implementation
  int src_reorders = 0;     // cached convolutions that reorder their input
  int dst_reorders = 0;     // cached convolutions that reorder their output
  int dw_fused = 0;         // 1x1 + depthwise pairs on one primitive with a depthwise post-op
  int dw_separate = 0;      // 1x1 + depthwise pairs on two primitives
  int one_pixel = 0;        // convolutions of one-pixel images as a GEMV or one sgemm
  int depthwise_1d = 0;     // depthwise Conv1ds on dynvm's microkernel (cpu/depthwise.h)
  int pointwise_1d = 0;     // pointwise Conv1ds as sgemm on the VM's threads
  int conv1d_gemm = 0;      // other Conv1ds as im2col + sgemm on the VM's threads (2+ threads)
  int per_image = 0;        // primitives for one image of a batch split over the VM's threads
  int row_blocks = 0;       // primitives for a block of rows of one image split by rows
};

// The cache statistics of a conv-family site (its KernelContext's state); zeros when `state` is
// not one.
ConvCacheStats GetConvCacheStats(const KernelState* state);

}  // namespace dynvm::onednn

#endif  // DYNVM_KERNELS_DNNL_CONV_H_
