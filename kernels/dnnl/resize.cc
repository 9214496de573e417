// Resize (opset 11 and later) on the oneDNN backend: a loop of its own (no oneDNN call) over the
// last three dims, bit for bit the reference kernel's result (kernels/reference/resize.cc, the
// oracle: kernels_dnnl_resize_test compares the two over every mode).
//
// The reference kernel sums, per output element, w * x over every combination of its
// neighbours on every dim (w the product of the dims' weights, last dim first; a combination of
// weight 0 skipped), in double, and converts the sum to the output dtype. This kernel takes the
// same taps (reference::ResizeTapAt, once per output coordinate of each dim, into a table of
// input offsets and weights) and adds the same products in the same order, row by row: for an
// output row (its coordinates on the outer dims fixed), each pair of taps of the two dims before
// the last adds its source row's terms into a row of double sums, the last dim's taps of each
// output element inner. Taps of weight 0 are dropped from the tables (their combinations are
// skipped by the reference kernel, since every weight is finite: a table with a weight that is
// not (a NaN roi, an infinite cubic_coeff_a) sends the run to the reference kernel), so nearest
// has one tap per coordinate, linear one or two, cubic up to four. Nearest with every weight 1
// is a gather (each output element the reference's 0 + 1 * x, so -0 becomes +0 as there; a last
// dim upsampled by a whole factor k repeats each source element k times), and an output row with
// the same source row as the one before it is a copy of that row. A source
// row's taps are gathered (as doubles) once for the output rows that read it, and the weighted
// sums run in cpu::ResizeAccumulate (kernels/cpu/resize.cc: vector code at each ISA level, no
// fused multiply-add; the tests run it at every level).
//
// Every mode (nearest, linear, cubic), coordinate transformation, nearest_mode,
// exclude_outside, extrapolation_value, `scales` or `sizes`, `axes` and keep_aspect_ratio_policy,
// every numeric dtype and strided inputs. The dims before the last three must keep their
// coordinates (each output coordinate its own input one with weight 1: not resized, in a mode
// that maps them to themselves); other runs (a fourth resized dim, tf_half_pixel_for_nn's linear
// blend of a kept dim), empty tensors, and every invalid run go to the reference kernel, which
// reports the errors (counted in fallback_runs()). Antialias and opset 10 are refused at create,
// as by the reference kernel. Output rows split over the VM's pool from kMinParallelOutputs.
//
// Measured: docs/results/refkern-s12-2026-11-30.txt (dnnl_benchmark --benchmark_filter=BM_Resize).
#include "kernels/reference/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "kernels/cpu/resize.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

using reference::ResizeAttrs;
using reference::ResizeGeometry;
using reference::ResizeTap;

// Outputs from which the rows split over the VM's pool.
constexpr int64_t kMinParallelOutputs = int64_t{1} << 14;

// One of the last three dims (a leading one of size 1 where the rank is less): per output
// coordinate `k` taps (input offsets in elements, weights; tap j of coordinate o at j * out + o),
// padded with weight-0 taps.
struct Axis {
  int64_t out = 1;
  int k = 1;
  std::vector<int64_t> offset;   // k * out
  std::vector<double> weight;    // k * out
  std::vector<uint8_t> outside;  // out: tf_crop_and_resize maps the coordinate outside
  bool any_outside = false;
  bool unit = true;  // one tap of weight 1 per coordinate
};

// The taps of a dim with their weight-0 ones dropped; false when a weight is not finite.
bool CompactTaps(const ResizeAttrs& a, const ResizeGeometry& g, const Tensor& x, int d,
                 std::vector<ResizeTap>* taps) {
  const int r = x.rank();
  const int64_t out = g.out_dims[d];
  taps->resize(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    ResizeTap t = reference::ResizeTapAt(a, x.dim(d), out, g.scales[d], g.roi[d], g.roi[r + d], o);
    ResizeTap c;
    c.outside = t.outside;
    for (int j = 0; j < t.count; ++j) {
      if (!std::isfinite(t.weight[j])) return false;
      if (t.weight[j] == 0) continue;
      c.index[c.count] = t.index[j];
      c.weight[c.count] = t.weight[j];
      ++c.count;
    }
    (*taps)[o] = c;
  }
  return true;
}

bool MakeAxis(const ResizeAttrs& a, const ResizeGeometry& g, const Tensor& x, int d, Axis* ax) {
  std::vector<ResizeTap> taps;
  if (!CompactTaps(a, g, x, d, &taps)) return false;
  ax->out = g.out_dims[d];
  int k = 1;
  for (const ResizeTap& t : taps) k = std::max(k, t.count);
  ax->k = k == 3 ? 4 : k;
  ax->offset.assign(static_cast<size_t>(ax->out * ax->k), 0);
  ax->weight.assign(static_cast<size_t>(ax->out * ax->k), 0.0);
  ax->outside.assign(static_cast<size_t>(ax->out), 0);
  for (int64_t o = 0; o < ax->out; ++o) {
    const ResizeTap& t = taps[o];
    for (int j = 0; j < t.count; ++j) {
      ax->offset[j * ax->out + o] = t.index[j] * x.stride(d);
      ax->weight[j * ax->out + o] = t.weight[j];
    }
    ax->outside[o] = t.outside ? 1 : 0;
    ax->any_outside |= t.outside;
    ax->unit &= t.count == 1 && t.weight[0] == 1.0 && !t.outside;
  }
  ax->unit &= ax->k == 1;
  return true;
}

// Whether every output coordinate of dim d is its own input coordinate with weight 1.
bool KeepsCoordinates(const ResizeAttrs& a, const ResizeGeometry& g, const Tensor& x, int d) {
  if (g.out_dims[d] != x.dim(d)) return false;
  std::vector<ResizeTap> taps;
  if (!CompactTaps(a, g, x, d, &taps)) return false;
  for (int64_t o = 0; o < g.out_dims[d]; ++o) {
    const ResizeTap& t = taps[o];
    if (t.outside || t.count != 1 || t.index[0] != o || t.weight[0] != 1.0) return false;
  }
  return true;
}

// A run's tables: the last three dims, and the outer dims (kept) flattened into planes.
struct Plan {
  Axis ax[3];
  int outer = 0;  // outer dims
  int64_t outer_dims[Tensor::kMaxRank] = {};
  int64_t outer_strides[Tensor::kMaxRank] = {};
  int64_t planes = 1;
  double extrapolation = 0;
  bool gather = false;  // every axis unit
  int64_t repeat = 0;   // a gather's last dim: each element `repeat` times, or 0

  int64_t PlaneOffset(int64_t p) const {
    int64_t off = 0;
    for (int d = outer - 1; d >= 0; --d) {
      off += (p % outer_dims[d]) * outer_strides[d];
      p /= outer_dims[d];
    }
    return off;
  }
};

// False: the run is the reference kernel's (see the header).
bool MakePlan(const ResizeAttrs& a, const ResizeGeometry& g, const Tensor& x, Plan* p) {
  const int r = x.rank();
  p->outer = std::max(0, r - 3);
  for (int d = 0; d < p->outer; ++d) {
    if (!KeepsCoordinates(a, g, x, d)) return false;
    p->outer_dims[d] = x.dim(d);
    p->outer_strides[d] = x.stride(d);
    p->planes *= x.dim(d);
  }
  for (int i = 0; i < 3; ++i) {
    const int d = r - 3 + i;
    if (d < 0) {
      p->ax[i].offset = {0};
      p->ax[i].weight = {1.0};
      p->ax[i].outside = {0};
      continue;
    }
    if (!MakeAxis(a, g, x, d, &p->ax[i])) return false;
  }
  p->extrapolation = a.extrapolation;
  p->gather = p->ax[0].unit && p->ax[1].unit && p->ax[2].unit;
  // A gather whose last dim repeats each of `in` contiguous elements `repeat` times (nearest
  // upsampling by a whole factor, or 1: that dim kept).
  const Axis& c = p->ax[2];
  const int64_t in = r >= 1 ? x.dim(r - 1) : 1, stride = r >= 1 ? x.stride(r - 1) : 1;
  if (p->gather && stride == 1 && in > 0 && c.out % in == 0) {
    const int64_t repeat = c.out / in;
    bool ok = true;
    for (int64_t o = 0; o < c.out && ok; ++o) ok = c.offset[o] == o / repeat;
    if (ok) p->repeat = repeat;
  }
  return true;
}

// The reference kernel's conversions: an input element to the double it multiplies, the sum to
// the output element.
template <typename T>
inline double Load(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(v);
  } else {
    return static_cast<double>(v);
  }
}

template <typename T>
inline T Store(double acc) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(acc));
  } else if constexpr (std::is_integral_v<T>) {
    const double lo = static_cast<double>(std::numeric_limits<T>::min());
    const double hi = static_cast<double>(std::numeric_limits<T>::max());
    return static_cast<T>(std::clamp(std::round(acc), lo, hi));
  } else {
    return static_cast<T>(acc);
  }
}

// A source row's elements at the last dim's taps, as the doubles the reference kernel multiplies
// (g[j * out + o]: tap j of output element o), for the last few source rows a range of output rows
// read: upsampling reads each source row for several output rows, and gathers it once.
template <typename T>
class GatheredRows {
 public:
  // `rows`: the source rows one output row reads (twice as many slots are kept).
  GatheredRows(const Axis& c, int rows) : c_(c), slots_(static_cast<size_t>(2 * rows)) {}

  const double* Get(const T* src) {
    for (Slot& s : slots_) {
      if (s.src == src) {
        s.used = ++clock_;
        return s.g.data();
      }
    }
    Slot* lru = &slots_[0];
    for (Slot& s : slots_) {
      if (s.used < lru->used) lru = &s;
    }
    lru->src = src;
    lru->used = ++clock_;
    lru->g.resize(static_cast<size_t>(c_.out * c_.k));
    const int64_t n = c_.out * c_.k;
    const int64_t* off = c_.offset.data();
    double* g = lru->g.data();
    for (int64_t i = 0; i < n; ++i) g[i] = Load<T>(src[off[i]]);
    return g;
  }

 private:
  struct Slot {
    const T* src = nullptr;
    uint64_t used = 0;
    std::vector<double> g;
  };
  const Axis& c_;
  std::vector<Slot> slots_;
  uint64_t clock_ = 0;
};

// Output rows [r0, r1) (a row: the last dim at fixed outer, a and b coordinates).
template <typename T>
void WeightedRows(const Plan& p, const T* x, T* y, int64_t r0, int64_t r1) {
  const Axis &a = p.ax[0], &b = p.ax[1], &c = p.ax[2];
  std::vector<double> acc(static_cast<size_t>(c.out));
  GatheredRows<T> rows(c, a.k * b.k);
  const T extra = Store<T>(p.extrapolation);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t ob = r % b.out, rest = r / b.out;
    const int64_t oa = rest % a.out, plane = rest / a.out;
    T* yr = y + r * c.out;
    if (a.outside[oa] || b.outside[ob]) {
      std::fill_n(yr, c.out, extra);
      continue;
    }
    const T* xp = x + p.PlaneOffset(plane);
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int ja = 0; ja < a.k; ++ja) {
      const double wa = a.weight[ja * a.out + oa];
      if (wa == 0) continue;  // a padding tap: every product 0
      for (int jb = 0; jb < b.k; ++jb) {
        const double wb = b.weight[jb * b.out + ob];
        if (wb == 0) continue;
        const T* src = xp + a.offset[ja * a.out + oa] + b.offset[jb * b.out + ob];
        cpu::ResizeAccumulate(c.out, c.k, c.weight.data(), rows.Get(src), wb, wa, acc.data());
      }
    }
    for (int64_t o = 0; o < c.out; ++o) yr[o] = c.outside[o] ? extra : Store<T>(acc[o]);
  }
}

// The reference kernel's result for an element of weight 1: its 0 + 1 * x, converted back.
template <typename T>
inline T Canonical(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v + 0.0f;  // (float)(0.0 + 1.0 * (double)v) for every v: -0 to +0, a NaN quieted alike
  } else {
    return Store<T>(0.0 + 1.0 * Load<T>(v));
  }
}

// Nearest with every weight 1: output rows [r0, r1) gathered, a row whose source row is the
// previous row's copied from it.
template <typename T>
void GatherRows(const Plan& p, const T* x, T* y, int64_t r0, int64_t r1) {
  const Axis &a = p.ax[0], &b = p.ax[1], &c = p.ax[2];
  const int64_t* off = c.offset.data();
  const T* prev = nullptr;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t ob = r % b.out, rest = r / b.out;
    const int64_t oa = rest % a.out, plane = rest / a.out;
    const T* src = x + p.PlaneOffset(plane) + a.offset[oa] + b.offset[ob];
    T* yr = y + r * c.out;
    if (src == prev) {
      std::memcpy(yr, yr - c.out, static_cast<size_t>(c.out) * sizeof(T));
      continue;
    }
    if (p.repeat == 1) {
      for (int64_t o = 0; o < c.out; ++o) yr[o] = Canonical<T>(src[o]);
    } else if (p.repeat == 2) {
      for (int64_t i = 0; i < c.out / 2; ++i) yr[2 * i] = yr[2 * i + 1] = Canonical<T>(src[i]);
    } else if (p.repeat > 1) {
      const int64_t k = p.repeat;
      for (int64_t i = 0; i < c.out / k; ++i) {
        const T v = Canonical<T>(src[i]);
        for (int64_t j = 0; j < k; ++j) yr[i * k + j] = v;
      }
    } else {
      for (int64_t o = 0; o < c.out; ++o) yr[o] = Canonical<T>(src[off[o]]);
    }
    prev = src;
  }
}

template <typename T>
void RunRows(const Plan& p, const T* x, T* y, int64_t r0, int64_t r1) {
  if (p.gather) {
    GatherRows<T>(p, x, y, r0, r1);
    return;
  }
  WeightedRows<T>(p, x, y, r0, r1);
}

class ResizeKernel final : public DnnlKernel {
 public:
  ResizeKernel(std::string name, ResizeAttrs attrs)
      : DnnlKernel(std::move(name)), attrs_(std::move(attrs)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (in.empty() || in[0] == nullptr || out.size() != 1 || out[0] == nullptr) {
      return RunFallback(ctx, in, out);
    }
    const Tensor& x = *in[0];
    if (x.dtype() == DType::kBool || x.dtype() == DType::kString || x.numel() == 0) {
      return RunFallback(ctx, in, out);
    }
    absl::StatusOr<ResizeGeometry> g = reference::PlanResize(attrs_, in);
    if (!g.ok()) return RunFallback(ctx, in, out);  // reports the error
    int64_t total = 1;
    for (int64_t d : g->out_dims) total *= d;
    Plan p;
    if (total == 0 || !MakePlan(attrs_, *g, x, &p)) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], x.dtype(), g->out_dims, "Resize"));
    const int64_t rows = p.planes * p.ax[0].out * p.ax[1].out;
    return reference::DispatchNumeric(x.dtype(), "Resize", [&](auto* tag) -> absl::Status {
      using T = std::remove_pointer_t<decltype(tag)>;
      if constexpr (!std::is_same_v<T, bool>) {
        const T* px = x.data<T>();
        T* py = out[0]->data<T>();
        if (ctx.num_threads() <= 1 || total < kMinParallelOutputs) {
          RunRows<T>(p, px, py, 0, rows);
        } else {
          const int64_t grain = std::max<int64_t>(1, kMinParallelOutputs / 4 / p.ax[2].out);
          ctx.ParallelFor(rows, grain,
                          [&](int64_t r0, int64_t r1) { RunRows<T>(p, px, py, r0, r1); });
        }
      }
      return absl::OkStatus();
    });
  }

 private:
  ResizeAttrs attrs_;
};

}  // namespace

void RegisterResizeKernels(KernelRegistry& r) {
  r.Register(
      KernelRegistration{"", "Resize", Device::kCPU, kBackend, kDnnlPriority,
                         [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                           DYNVM_ASSIGN_OR_RETURN(ResizeAttrs a, reference::ReadResizeAttrs(spec));
                           return std::make_unique<ResizeKernel>(KernelName(spec), std::move(a));
                         }});
}

}  // namespace dynvm::onednn
