// Pad on the oneDNN backend (no oneDNN call: a copy loop of its own): every mode (constant,
// reflect, edge, wrap), every dtype but strings, any rank, negative pads (cropping) and the
// axes input, with the reference kernel's semantics (kernels/reference/slice_pad.cc, which
// stays the oracle: kernels_dnnl_pad_test compares the two bit for bit).
//
// The trailing axes that are not padded are one element of E bytes (swin_t's channels-last
// window padding [1, H, W, C] -> [1, H', W', C]: rows of W' elements of C floats), at most
// kMaxElementBytes while an unpadded axis is left (so that a large copy still splits). Each output
// row along the last padded axis is then its source run copied by one memcpy, and its borders
// filled with the pad value (constant) or copied element by element from a small table of source
// indices (reflect, edge, wrap); a row whose outer coordinate pads (constant) is filled whole.
// Outputs of at least kMinParallelCopyBytes split into ranges of whole elements over the VM's
// pool (any range gives the same bytes). A strided input, a non-constant mode over an empty
// axis, a rank-0 input and every invalid run go to the reference kernel, which reports the
// errors.
//
// Measured (dnnl_benchmark --benchmark_filter=BM_Pad, docs/results/refhot-s11-2026-11-30.txt,
// reference -> this kernel at 1 thread): swin_t's [1, 16, 16, 96] -> [1, 21, 21, 96] 36.7 -> 2.9
// us, NCHW [1, 64, 56, 56] + 1 constant 173 -> 50 us (28 at 2 threads), reflect 142 -> 59 us.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/reference/data_movement.h"

namespace dynvm::onednn {
namespace {

using reference::PadMode;

// Fills `count` elements of `esize` bytes at dst with the element `bits`.
void FillElements(uint8_t* dst, int64_t count, int esize, uint64_t bits) {
  if (count <= 0) return;
  if (bits == 0 || esize == 1) {
    std::memset(dst, static_cast<int>(bits & 0xff), static_cast<size_t>(count * esize));
    return;
  }
  switch (esize) {
    case 2: {
      const uint16_t v = static_cast<uint16_t>(bits);
      std::fill_n(reinterpret_cast<uint16_t*>(dst), count, v);
      return;
    }
    case 4: {
      const uint32_t v = static_cast<uint32_t>(bits);
      std::fill_n(reinterpret_cast<uint32_t*>(dst), count, v);
      return;
    }
    default: {
      std::fill_n(reinterpret_cast<uint64_t*>(dst), count, bits);
      return;
    }
  }
}

// The largest element the trailing unpadded axes are merged into while an axis is left to split.
constexpr int64_t kMaxElementBytes = int64_t{1} << 14;

// One run's geometry after the trailing unpadded axes became one element of `ebytes` bytes:
// `rank` axes (the last one padded, or the only one), output dims `out`, input dims `in`, begin
// pads, input strides in bytes.
struct Geometry {
  int rank = 0;
  int64_t out[Tensor::kMaxRank] = {};
  int64_t in[Tensor::kMaxRank] = {};
  int64_t begin[Tensor::kMaxRank] = {};
  int64_t in_stride[Tensor::kMaxRank] = {};  // bytes
  int64_t ebytes = 0;                        // bytes of one element of the last axis
  int esize = 0;                             // bytes of one tensor element
  uint64_t value_bits = 0;
  bool constant = true;
  // The last axis: output coordinates [lo, hi) copy source [lo - begin, hi - begin); the rest
  // are borders.
  int64_t lo = 0, hi = 0;
  // Per outer axis, the source index of each output coordinate (-1: the pad value), at
  // outer_start[d]; for the last axis, the source index of each border coordinate (left border
  // first, then the right one), at border_start (empty in constant mode).
  std::vector<int64_t> table;
  int64_t outer_start[Tensor::kMaxRank] = {};
  int64_t border_start = 0;
};

Geometry MakeGeometry(const Tensor& x, const reference::PadPlan& plan, PadMode mode) {
  Geometry g;
  g.esize = static_cast<int>(DTypeSize(x.dtype()));
  g.value_bits = plan.value_bits;
  g.constant = mode == PadMode::kConstant;
  const int rank = x.rank();
  int last = rank - 1;  // the last padded axis (0 when none is)
  while (last > 0 && plan.begin[last] == 0 && plan.dims[last] == x.dim(last)) --last;
  g.ebytes = g.esize;
  for (int d = rank - 1; d > last; --d) g.ebytes *= x.dim(d);
  // Elements of at most kMaxElementBytes where the unpadded axes allow (an unpadded axis is a
  // padded one with pads of 0), so that the pool can split the output (a plain copy of
  // [1, 56, 56, 96] was one element).
  while (last < rank - 1 && g.ebytes > kMaxElementBytes) {
    ++last;
    g.ebytes /= x.dim(last);
  }
  g.rank = last + 1;
  int64_t stride = g.ebytes;
  for (int d = last; d >= 0; --d) {
    g.out[d] = plan.dims[d];
    g.in[d] = x.dim(d);
    g.begin[d] = plan.begin[d];
    g.in_stride[d] = stride;
    stride *= x.dim(d);
  }
  for (int d = 0; d < last; ++d) {
    g.outer_start[d] = static_cast<int64_t>(g.table.size());
    for (int64_t o = 0; o < g.out[d]; ++o) {
      g.table.push_back(
          g.in[d] == 0 ? -1 : reference::PadSource(mode, __int128{o} - g.begin[d], g.in[d]));
    }
  }
  const int64_t m = g.out[last];
  g.lo = std::clamp<int64_t>(g.begin[last], 0, m);
  g.hi = std::clamp<int64_t>(g.begin[last] + g.in[last], g.lo, m);
  g.border_start = static_cast<int64_t>(g.table.size());
  if (!g.constant) {
    for (int64_t o = 0; o < m; ++o) {
      if (o == g.lo) o = g.hi;
      if (o >= m) break;
      g.table.push_back(reference::PadSource(mode, __int128{o} - g.begin[last], g.in[last]));
    }
  }
  return g;
}

// Copies border coordinates [a, b) of the last axis (non-constant modes) from the row at `src`;
// `t` the border table entry of coordinate a.
void CopyBorder(const Geometry& g, const uint8_t* src, const int64_t* t, int64_t a, int64_t b,
                uint8_t* dst) {
  const int64_t e = g.ebytes;
  switch (e) {
    case 1:
      for (int64_t o = a; o < b; ++o) dst[o] = src[t[o - a]];
      return;
    case 2:
      for (int64_t o = a; o < b; ++o) std::memcpy(dst + 2 * o, src + 2 * t[o - a], 2);
      return;
    case 4:
      for (int64_t o = a; o < b; ++o) std::memcpy(dst + 4 * o, src + 4 * t[o - a], 4);
      return;
    case 8:
      for (int64_t o = a; o < b; ++o) std::memcpy(dst + 8 * o, src + 8 * t[o - a], 8);
      return;
    default:
      for (int64_t o = a; o < b; ++o) std::memcpy(dst + e * o, src + e * t[o - a], e);
  }
}

// Writes coordinates [a, b) of one output row (`row` its start). `src` the source row's start
// (the element of coordinate 0 of the last axis), or null when an outer coordinate pads.
void WriteRow(const Geometry& g, const uint8_t* src, int64_t a, int64_t b, uint8_t* row) {
  const int64_t e = g.ebytes;
  const int64_t per = e / g.esize;  // tensor elements per element
  if (src == nullptr) {
    FillElements(row + a * e, (b - a) * per, g.esize, g.value_bits);
    return;
  }
  const int64_t last = g.rank - 1;
  // Left border [a, min(b, lo)).
  const int64_t l1 = std::min(b, g.lo);
  if (a < l1) {
    if (g.constant) {
      FillElements(row + a * e, (l1 - a) * per, g.esize, g.value_bits);
    } else {
      CopyBorder(g, src, g.table.data() + g.border_start + a, a, l1, row);
    }
  }
  // The source run [max(a, lo), min(b, hi)).
  const int64_t m0 = std::max(a, g.lo), m1 = std::min(b, g.hi);
  if (m0 < m1) std::memcpy(row + m0 * e, src + (m0 - g.begin[last]) * e, (m1 - m0) * e);
  // Right border [max(a, hi), b).
  const int64_t r0 = std::max(a, g.hi);
  if (r0 < b) {
    if (g.constant) {
      FillElements(row + r0 * e, (b - r0) * per, g.esize, g.value_bits);
    } else {
      CopyBorder(g, src, g.table.data() + g.border_start + g.lo + (r0 - g.hi), r0, b, row);
    }
  }
}

// Writes output elements [u0, u1) (elements of the last axis, row-major over the outer axes).
void WriteRange(const Geometry& g, const uint8_t* x, uint8_t* y, int64_t u0, int64_t u1) {
  const int last = g.rank - 1;
  const int64_t m = g.out[last];
  int64_t row = u0 / m;
  int64_t a = u0 % m;
  int64_t idx[Tensor::kMaxRank] = {};
  for (int d = last - 1; d >= 0; --d) {
    idx[d] = row % g.out[d];
    row /= g.out[d];
  }
  int64_t u = u0;
  while (u < u1) {
    const int64_t b = std::min(m, a + (u1 - u));
    const uint8_t* src = x;
    for (int d = 0; d < last; ++d) {
      const int64_t s = g.table[g.outer_start[d] + idx[d]];
      if (s < 0) {
        src = nullptr;
        break;
      }
      src += s * g.in_stride[d];
    }
    WriteRow(g, src, a, b, y + (u - a) * g.ebytes);
    u += b - a;
    a = 0;
    for (int d = last - 1; d >= 0; --d) {
      if (++idx[d] < g.out[d]) break;
      idx[d] = 0;
    }
  }
}

class PadKernel final : public DnnlKernel {
 public:
  PadKernel(std::string name, reference::PadAttrs attrs)
      : DnnlKernel(std::move(name)), attrs_(std::move(attrs)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (in.empty() || in[0] == nullptr || out.size() != 1 || out[0] == nullptr) {
      return RunFallback(ctx, in, out);
    }
    const Tensor& x = *in[0];
    if (x.rank() == 0 || !x.is_contiguous() || x.dtype() == DType::kString) {
      return RunFallback(ctx, in, out);
    }
    absl::StatusOr<reference::PadPlan> plan = reference::PlanPad(attrs_, in);
    if (!plan.ok()) return RunFallback(ctx, in, out);  // reports the error
    if (attrs_.mode != PadMode::kConstant) {
      for (int64_t d : x.dims()) {
        if (d == 0) return RunFallback(ctx, in, out);  // an error, or an empty output
      }
    }
    DYNVM_RETURN_IF_ERROR(reference::PrepareDataOutput(ctx, out[0], x.dtype(), plan->dims, "Pad"));
    if (out[0]->numel() == 0) return absl::OkStatus();
    const Geometry g = MakeGeometry(x, *plan, attrs_.mode);
    const auto* xp = static_cast<const uint8_t*>(x.raw_data());
    auto* yp = static_cast<uint8_t*>(out[0]->raw_data());
    int64_t units = 1;
    for (int d = 0; d < g.rank; ++d) units *= g.out[d];
    const int64_t bytes = units * g.ebytes;
    if (bytes < reference::kMinParallelCopyBytes || ctx.num_threads() <= 1) {
      WriteRange(g, xp, yp, 0, units);
      return absl::OkStatus();
    }
    // Ranges of about kMinParallelCopyBytes / 2 bytes at the least.
    const int64_t grain = std::max<int64_t>(1, reference::kMinParallelCopyBytes / 2 / g.ebytes);
    ctx.ParallelFor(units, grain, [&](int64_t u0, int64_t u1) { WriteRange(g, xp, yp, u0, u1); });
    return absl::OkStatus();
  }

 private:
  reference::PadAttrs attrs_;
};

}  // namespace

void RegisterPadKernels(KernelRegistry& r) {
  r.Register(KernelRegistration{
      "", "Pad", Device::kCPU, kBackend, kDnnlPriority,
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_ASSIGN_OR_RETURN(reference::PadAttrs attrs, reference::ParsePadAttrs(spec));
        return std::make_unique<PadKernel>(KernelName(spec), std::move(attrs));
      }});
}

}  // namespace dynvm::onednn
