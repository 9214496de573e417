// Concat on the oneDNN backend: a copy loop of its own (no oneDNN call), every dtype but strings,
// with the reference kernel's semantics (kernels/reference/slice_pad.cc, the oracle:
// kernels_dnnl_concat_test compares the two bit for bit).
//
// With dense inputs, the output is `outer` rows (the product of the dims before the axis), each
// the inputs' blocks one after the other (input i's block: its dim on the axis times the dims
// after it, contiguous in the input). Rows of at most 256 bytes are copied input by input (a
// fixed-size move per block); longer rows block by block with memcpy. Outputs of at least
// kMinParallelCopyBytes split into ranges of bytes over the VM's pool (each range copies the parts
// of the blocks it covers, so one large block, a single batch's channel concat, splits too). A
// strided input, a missing input and every invalid run go to the reference kernel, which reports
// the errors (counted in fallback_runs()).
//
// Measured: docs/results/refkern-s12-2026-11-30.txt (dnnl_benchmark --benchmark_filter=BM_Concat).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "common/status_macros.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/reference/data_movement.h"

namespace dynvm::onednn {
namespace {

struct Block {
  const uint8_t* src;
  int64_t bytes;  // per output row
  int64_t at;     // its start in the output row
};

// Copies output bytes [b0, b1) (rows of `row` bytes made of `blocks`).
void CopyRange(absl::Span<const Block> blocks, int64_t row, uint8_t* y, int64_t b0, int64_t b1) {
  int64_t o = b0 / row;
  int64_t pos = b0 % row;
  int64_t b = b0;
  while (b < b1) {
    for (const Block& k : blocks) {
      if (b >= b1) return;
      const int64_t end = k.at + k.bytes;
      if (k.bytes == 0 || pos >= end) continue;
      const int64_t n = std::min(end - pos, b1 - b);
      std::memcpy(y + b, k.src + o * k.bytes + (pos - k.at), static_cast<size_t>(n));
      b += n;
      pos += n;
    }
    ++o;
    pos = 0;
  }
}

// Rows of at most kMaxSmallRowBytes are copied input by input, each block of a fixed small size
// a plain move per row (a memcpy call per block of 4 bytes was 5x the reference kernel's
// strided loop on RAFT's coordinate grids, [N, 9, 9, 1] pairs joined on the last axis).
constexpr int64_t kMaxSmallRowBytes = 256;

template <int64_t N>
void CopyColumn(const Block& k, int64_t row, uint8_t* y, int64_t o0, int64_t o1) {
  for (int64_t o = o0; o < o1; ++o) std::memcpy(y + o * row + k.at, k.src + o * N, N);
}

// Output rows [o0, o1) of small rows.
void CopySmallRows(absl::Span<const Block> blocks, int64_t row, uint8_t* y, int64_t o0,
                   int64_t o1) {
  for (const Block& k : blocks) {
    switch (k.bytes) {
      case 0:
        break;
      case 1:
        CopyColumn<1>(k, row, y, o0, o1);
        break;
      case 2:
        CopyColumn<2>(k, row, y, o0, o1);
        break;
      case 4:
        CopyColumn<4>(k, row, y, o0, o1);
        break;
      case 8:
        CopyColumn<8>(k, row, y, o0, o1);
        break;
      case 16:
        CopyColumn<16>(k, row, y, o0, o1);
        break;
      default:
        for (int64_t o = o0; o < o1; ++o) {
          std::memcpy(y + o * row + k.at, k.src + o * k.bytes, static_cast<size_t>(k.bytes));
        }
    }
  }
}

class ConcatKernel final : public DnnlKernel {
 public:
  ConcatKernel(std::string name, int64_t axis) : DnnlKernel(std::move(name)), axis_(axis) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (in.empty() || out.size() != 1 || out[0] == nullptr) return RunFallback(ctx, in, out);
    for (const Tensor* t : in) {
      if (t == nullptr || !t->is_contiguous()) return RunFallback(ctx, in, out);
    }
    const Tensor& first = *in[0];
    const int r = first.rank();
    const int64_t ax = axis_ < 0 ? axis_ + r : axis_;
    if (first.dtype() == DType::kString || ax < 0 || ax >= r) return RunFallback(ctx, in, out);
    reference::Dims dims(first.dims().begin(), first.dims().end());
    dims[ax] = 0;
    for (const Tensor* t : in) {
      if (t->rank() != r || t->dtype() != first.dtype()) return RunFallback(ctx, in, out);
      for (int d = 0; d < r; ++d) {
        if (d != ax && t->dim(d) != first.dim(d)) return RunFallback(ctx, in, out);
      }
      if (__builtin_add_overflow(dims[ax], t->dim(ax), &dims[ax])) {
        return RunFallback(ctx, in, out);
      }
    }
    DYNVM_RETURN_IF_ERROR(reference::PrepareDataOutput(ctx, out[0], first.dtype(), dims, "Concat"));
    if (out[0]->numel() == 0) return absl::OkStatus();
    int64_t outer = 1, inner = DTypeSize(first.dtype());
    for (int d = 0; d < ax; ++d) outer *= dims[d];
    for (int d = static_cast<int>(ax) + 1; d < r; ++d) inner *= dims[d];
    absl::InlinedVector<Block, 8> blocks;
    int64_t row = 0;
    for (const Tensor* t : in) {
      const int64_t bytes = t->dim(ax) * inner;
      blocks.push_back({static_cast<const uint8_t*>(t->raw_data()), bytes, row});
      row += bytes;
    }
    auto* y = static_cast<uint8_t*>(out[0]->raw_data());
    const int64_t total = outer * row;
    const bool split = total >= reference::kMinParallelCopyBytes && ctx.num_threads() > 1;
    if (row <= kMaxSmallRowBytes) {
      if (!split) {
        CopySmallRows(blocks, row, y, 0, outer);
      } else {
        ctx.ParallelFor(outer, reference::kMinParallelCopyBytes / 2 / row,
                        [&](int64_t o0, int64_t o1) { CopySmallRows(blocks, row, y, o0, o1); });
      }
      return absl::OkStatus();
    }
    if (!split) {
      CopyRange(blocks, row, y, 0, total);
      return absl::OkStatus();
    }
    // Ranges of whole cache lines, about kMinParallelCopyBytes / 2 at the least.
    constexpr int64_t kLine = 64;
    const int64_t lines = (total + kLine - 1) / kLine;
    ctx.ParallelFor(lines, reference::kMinParallelCopyBytes / 2 / kLine,
                    [&](int64_t l0, int64_t l1) {
                      CopyRange(blocks, row, y, l0 * kLine, std::min(total, l1 * kLine));
                    });
    return absl::OkStatus();
  }

 private:
  int64_t axis_;
};

}  // namespace

void RegisterConcatKernels(KernelRegistry& r) {
  r.Register(KernelRegistration{
      "", "Concat", Device::kCPU, kBackend, kDnnlPriority,
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        if (spec.inputs.empty() || spec.outputs.size() != 1 || spec.Find("axis") == nullptr) {
          return absl::InvalidArgumentError("Concat: expected inputs, 1 output and an axis");
        }
        DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", 0));
        return std::make_unique<ConcatKernel>(KernelName(spec), axis);
      }});
}

}  // namespace dynvm::onednn
