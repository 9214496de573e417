// GridSample (4-D input) on the oneDNN backend: a loop of its own (no oneDNN call), bit for bit
// the reference kernel's result (kernels/reference/vision.cc, the oracle:
// kernels_dnnl_grid_sample_test compares the two over every mode).
//
// The reference kernel converts X and the grid to doubles and computes every output element
// from its grid point alone (GridValue: the point's pixel coordinate, its padding, its taps and
// their weights, then the weighted sum). This kernel does the same arithmetic, in the same
// order, once per grid point instead of once per output element: the point's taps (input
// offsets, or none where zeros padding reads 0) and weights go to a small record, and every
// channel of X is summed with them as the reference kernel sums (bilinear: two rows of two, then
// the rows; bicubic: four rows of four). Modes bilinear, nearest and bicubic; padding zeros,
// border and reflection; align_corners 0 and 1; X and the grid f32, f64, f16 or bf16, any
// strides. Rows of grid points (n, output row) split over the VM's pool from
// kMinParallelOutputs output elements. An input with no pixels, and every invalid run, go to the
// reference kernel (which reports the errors; counted in fallback_runs()).
//
// Measured: docs/results/refkern-s12-2026-11-30.txt (dnnl_benchmark
// --benchmark_filter=BM_GridSample).
#include "kernels/reference/grid_sample.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "common/status_macros.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

using reference::GridAttrs;
using reference::GsMode;
using reference::GsPad;

constexpr int64_t kMinParallelOutputs = int64_t{1} << 14;

template <typename T>
inline double Load(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(v);
  } else {
    return static_cast<double>(v);
  }
}

template <typename T>
inline T Store(double v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// One input plane's geometry (X's [H, W] strides in elements) and the attributes.
struct Plane {
  int64_t h, w, sh, sw;
  GsMode mode;
  GsPad pad;
  double lo_x, hi_x, lo_y, hi_y;  // the reflection borders
  double limit;                   // beyond it every tap is outside (or the edge)
};

// A grid point's taps: `kind` 0 NaN, 1 zero, 2 taps; offsets of the taps in X's plane (-1:
// reads 0), row-major (1 nearest, 2 x 2 bilinear, 4 x 4 bicubic), and the weights.
struct Taps {
  int kind = 2;
  int64_t off[16];
  double dx1, dx2, dy1, dy2;  // bilinear
  double cx[4], cy[4];        // bicubic
};

// The reference kernel's GridPlane::At: the offset of pixel (r, c) after the padding, -1 for 0.
inline int64_t TapOffset(const Plane& g, int64_t r, int64_t c) {
  switch (g.pad) {
    case GsPad::kZeros:
      return (r >= 0 && r < g.h && c >= 0 && c < g.w) ? r * g.sh + c * g.sw : -1;
    case GsPad::kBorder:
      break;
    case GsPad::kReflection:
      c = static_cast<int64_t>(reference::GridReflect(static_cast<double>(c), g.lo_x, g.hi_x));
      r = static_cast<int64_t>(reference::GridReflect(static_cast<double>(r), g.lo_y, g.hi_y));
      break;
  }
  c = std::clamp<int64_t>(c, 0, g.w - 1);
  r = std::clamp<int64_t>(r, 0, g.h - 1);
  return r * g.sh + c * g.sw;
}

// The reference kernel's GridValue up to the reads: pixel coordinate (x, y) to taps.
void MakeTaps(const Plane& g, double x, double y, Taps* t) {
  if (reference::GridSampleIsNaN(g.pad, x, y)) {
    t->kind = 0;
    return;
  }
  t->kind = 2;
  if (g.mode == GsMode::kNearest) {
    x = std::nearbyint(x);
    y = std::nearbyint(y);
  }
  if (g.mode == GsMode::kBicubic) {
    if (g.pad == GsPad::kBorder) {
      x = std::clamp(x, -g.limit, g.limit);
      y = std::clamp(y, -g.limit, g.limit);
    } else if (g.pad == GsPad::kReflection) {
      const double px = 2 * (g.hi_x - g.lo_x), py = 2 * (g.hi_y - g.lo_y);
      if (px > 0) x = g.lo_x + std::fmod(x - g.lo_x, px) + (x < g.lo_x ? px : 0);
      if (py > 0) y = g.lo_y + std::fmod(y - g.lo_y, py) + (y < g.lo_y ? py : 0);
    }
  } else if (g.pad == GsPad::kBorder) {
    x = std::clamp(x, 0.0, static_cast<double>(g.w - 1));
    y = std::clamp(y, 0.0, static_cast<double>(g.h - 1));
  } else if (g.pad == GsPad::kReflection) {
    x = reference::GridReflect(x, g.lo_x, g.hi_x);
    y = reference::GridReflect(y, g.lo_y, g.hi_y);
  }
  if (g.pad == GsPad::kZeros && (std::abs(x) > g.limit || std::abs(y) > g.limit)) {
    t->kind = 1;
    return;
  }
  switch (g.mode) {
    case GsMode::kNearest:
      t->off[0] = TapOffset(g, static_cast<int64_t>(y), static_cast<int64_t>(x));
      return;
    case GsMode::kBilinear: {
      const double fx = std::floor(x), fy = std::floor(y);
      const int64_t x1 = static_cast<int64_t>(fx), y1 = static_cast<int64_t>(fy);
      t->dx1 = x - fx;
      t->dx2 = 1 - t->dx1;
      t->dy1 = y - fy;
      t->dy2 = 1 - t->dy1;
      t->off[0] = TapOffset(g, y1, x1);
      t->off[1] = TapOffset(g, y1, x1 + 1);
      t->off[2] = TapOffset(g, y1 + 1, x1);
      t->off[3] = TapOffset(g, y1 + 1, x1 + 1);
      return;
    }
    case GsMode::kBicubic: {
      const double fx = std::floor(x) - 1, fy = std::floor(y) - 1;
      const int64_t x0 = static_cast<int64_t>(fx), y0 = static_cast<int64_t>(fy);
      reference::GridCubicCoeffs(x - fx - 1, t->cx);
      reference::GridCubicCoeffs(y - fy - 1, t->cy);
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) t->off[4 * i + j] = TapOffset(g, y0 + i, x0 + j);
      }
      return;
    }
  }
}

template <typename T>
inline double Read(const T* p, int64_t off) {
  return off < 0 ? 0.0 : Load<T>(p[off]);
}

// The value of one plane `p` at a grid point's taps, summed as the reference kernel sums.
template <typename T>
inline double Value(GsMode mode, const Taps& t, const T* p) {
  if (t.kind == 0) return std::numeric_limits<double>::quiet_NaN();
  if (t.kind == 1) return 0.0;
  switch (mode) {
    case GsMode::kNearest:
      return Read(p, t.off[0]);
    case GsMode::kBilinear:
      return t.dy2 * (t.dx2 * Read(p, t.off[0]) + t.dx1 * Read(p, t.off[1])) +
             t.dy1 * (t.dx2 * Read(p, t.off[2]) + t.dx1 * Read(p, t.off[3]));
    case GsMode::kBicubic: {
      double acc = 0;
      for (int i = 0; i < 4; ++i) {
        double row = 0;
        for (int j = 0; j < 4; ++j) row += t.cx[j] * Read(p, t.off[4 * i + j]);
        acc += t.cy[i] * row;
      }
      return acc;
    }
  }
  return 0.0;
}

struct Geometry {
  Plane plane;
  bool align_corners;
  int64_t n, c, oh, ow;
  int64_t xs_n, xs_c;              // X's strides
  int64_t gs_n, gs_h, gs_w, gs_k;  // the grid's strides
};

// Output rows [r0, r1) (r = n * oh + i).
template <typename T, typename G>
void SampleRows(const Geometry& g, const T* x, const G* grid, T* y, int64_t r0, int64_t r1) {
  const Plane& pl = g.plane;
  Taps t;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t n = r / g.oh, i = r % g.oh;
    const T* xn = x + n * g.xs_n;
    T* yr = y + (n * g.c * g.oh + i) * g.ow;
    for (int64_t j = 0; j < g.ow; ++j) {
      const G* gp = grid + n * g.gs_n + i * g.gs_h + j * g.gs_w;
      const double gx = Load<G>(gp[0]), gy = Load<G>(gp[g.gs_k]);
      const double px = g.align_corners ? (gx + 1) / 2 * (pl.w - 1) : ((gx + 1) * pl.w - 1) / 2;
      const double py = g.align_corners ? (gy + 1) / 2 * (pl.h - 1) : ((gy + 1) * pl.h - 1) / 2;
      MakeTaps(pl, px, py, &t);
      for (int64_t ch = 0; ch < g.c; ++ch) {
        yr[ch * g.oh * g.ow + j] = Store<T>(Value<T>(pl.mode, t, xn + ch * g.xs_c));
      }
    }
  }
}

// A tap of the bilinear loop: its offset (0 where zeros padding reads 0) and the mask its value
// is and-ed with (all ones, or zero for a 0 read), so that the reads take no branch: a grid
// point's taps fall inside or outside the input at random.
struct MaskedTap {
  int64_t off;
  uint64_t mask;
};

// TapOffset with the padding mode a template argument, masked.
template <GsPad PAD>
inline MaskedTap TapOf(const Plane& g, int64_t r, int64_t c) {
  if constexpr (PAD == GsPad::kZeros) {
    const bool in = (static_cast<uint64_t>(r) < static_cast<uint64_t>(g.h)) &
                    (static_cast<uint64_t>(c) < static_cast<uint64_t>(g.w));
    return {in ? r * g.sh + c * g.sw : 0, in ? ~uint64_t{0} : 0};
  } else {
    if constexpr (PAD == GsPad::kReflection) {
      c = static_cast<int64_t>(reference::GridReflect(static_cast<double>(c), g.lo_x, g.hi_x));
      r = static_cast<int64_t>(reference::GridReflect(static_cast<double>(r), g.lo_y, g.hi_y));
    }
    c = std::clamp<int64_t>(c, 0, g.w - 1);
    r = std::clamp<int64_t>(r, 0, g.h - 1);
    return {r * g.sh + c * g.sw, ~uint64_t{0}};
  }
}

// The value at a masked tap: the element as a double, or +0.0 (the reference kernel's 0.0).
template <typename T>
inline double ReadMasked(const T* p, MaskedTap t) {
  const double v = Load<T>(p[t.off]);
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  bits &= t.mask;
  double r;
  std::memcpy(&r, &bits, sizeof(r));
  return r;
}

// Bilinear with the padding mode a template argument and no tap record: the same arithmetic as
// MakeTaps and Value (raft_small's correlation lookups have one channel, so the per-point work
// is all of it; the generic path ran them slower than the reference kernel).
template <typename T, typename G, GsPad PAD>
__attribute__((noinline)) void BilinearRows(const Geometry& g, const T* x, const G* grid, T* y,
                                            int64_t r0, int64_t r1) {
  const Plane pl = g.plane;  // a local copy: its fields stay in registers
  const int64_t cs = g.oh * g.ow, c = g.c, xs_c = g.xs_c;
  // The reference kernel's w - 1, w and h - 1, h, as the doubles its expressions convert them to.
  const double w1 = static_cast<double>(pl.w - 1), wd = static_cast<double>(pl.w);
  const double h1 = static_cast<double>(pl.h - 1), hd = static_cast<double>(pl.h);
  const bool align = g.align_corners;
  int64_t n = r0 / g.oh, i = r0 % g.oh;
  for (int64_t r = r0; r < r1; ++r, ++i) {
    if (i == g.oh) {
      i = 0;
      ++n;
    }
    const T* xn = x + n * g.xs_n;
    T* yr = y + (n * c * g.oh + i) * g.ow;
    const G* gr = grid + n * g.gs_n + i * g.gs_h;
    for (int64_t j = 0; j < g.ow; ++j) {
      const G* gp = gr + j * g.gs_w;
      const double gx = Load<G>(gp[0]), gy = Load<G>(gp[g.gs_k]);
      double px = align ? (gx + 1) / 2 * w1 : ((gx + 1) * wd - 1) / 2;
      double py = align ? (gy + 1) / 2 * h1 : ((gy + 1) * hd - 1) / 2;
      T* yp = yr + j;
      if (reference::GridSampleIsNaN(PAD, px, py)) {
        for (int64_t ch = 0; ch < c; ++ch) {
          yp[ch * cs] = Store<T>(std::numeric_limits<double>::quiet_NaN());
        }
        continue;
      }
      if constexpr (PAD == GsPad::kBorder) {
        px = std::clamp(px, 0.0, static_cast<double>(pl.w - 1));
        py = std::clamp(py, 0.0, static_cast<double>(pl.h - 1));
      } else if constexpr (PAD == GsPad::kReflection) {
        px = reference::GridReflect(px, pl.lo_x, pl.hi_x);
        py = reference::GridReflect(py, pl.lo_y, pl.hi_y);
      } else {
        if (std::abs(px) > pl.limit || std::abs(py) > pl.limit) {
          for (int64_t ch = 0; ch < c; ++ch) yp[ch * cs] = Store<T>(0.0);
          continue;
        }
      }
      const double fx = std::floor(px), fy = std::floor(py);
      const int64_t x1 = static_cast<int64_t>(fx), y1 = static_cast<int64_t>(fy);
      const double dx1 = px - fx, dx2 = 1 - dx1, dy1 = py - fy, dy2 = 1 - dy1;
      const MaskedTap t00 = TapOf<PAD>(pl, y1, x1), t01 = TapOf<PAD>(pl, y1, x1 + 1);
      const MaskedTap t10 = TapOf<PAD>(pl, y1 + 1, x1), t11 = TapOf<PAD>(pl, y1 + 1, x1 + 1);
      auto value = [&](const T* p) {
        return Store<T>(dy2 * (dx2 * ReadMasked(p, t00) + dx1 * ReadMasked(p, t01)) +
                        dy1 * (dx2 * ReadMasked(p, t10) + dx1 * ReadMasked(p, t11)));
      };
      if (c == 1) {  // RAFT's correlation lookups: no channel loop to set up per point
        *yp = value(xn);
        continue;
      }
      for (int64_t ch = 0; ch < c; ++ch) yp[ch * cs] = value(xn + ch * xs_c);
    }
  }
}

// Output rows [r0, r1): bilinear on its own loop, the other modes through the tap record.
template <typename T, typename G>
void RunRows(const Geometry& g, const T* x, const G* grid, T* y, int64_t r0, int64_t r1) {
  if (g.plane.mode != GsMode::kBilinear) {
    SampleRows<T, G>(g, x, grid, y, r0, r1);
    return;
  }
  switch (g.plane.pad) {
    case GsPad::kZeros:
      BilinearRows<T, G, GsPad::kZeros>(g, x, grid, y, r0, r1);
      return;
    case GsPad::kBorder:
      BilinearRows<T, G, GsPad::kBorder>(g, x, grid, y, r0, r1);
      return;
    case GsPad::kReflection:
      BilinearRows<T, G, GsPad::kReflection>(g, x, grid, y, r0, r1);
      return;
  }
}

bool IsFloatType(DType d) {
  return d == DType::kF32 || d == DType::kF64 || d == DType::kF16 || d == DType::kBF16;
}

// Calls fn with a null pointer of the C++ type of float dtype d.
template <typename Fn>
void DispatchFloat(DType d, Fn&& fn) {
  switch (d) {
    case DType::kF64:
      fn(static_cast<double*>(nullptr));
      return;
    case DType::kF16:
      fn(static_cast<Half*>(nullptr));
      return;
    case DType::kBF16:
      fn(static_cast<BFloat16*>(nullptr));
      return;
    default:
      fn(static_cast<float*>(nullptr));
      return;
  }
}

class GridSampleKernel final : public DnnlKernel {
 public:
  GridSampleKernel(std::string name, GridAttrs attrs)
      : DnnlKernel(std::move(name)), attrs_(attrs) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (in.size() != 2 || in[0] == nullptr || in[1] == nullptr || out.size() != 1 ||
        out[0] == nullptr) {
      return RunFallback(ctx, in, out);
    }
    const Tensor& x = *in[0];
    const Tensor& grid = *in[1];
    if (x.rank() != 4 || grid.rank() != 4 || grid.dim(0) != x.dim(0) || grid.dim(3) != 2 ||
        !IsFloatType(x.dtype()) || !IsFloatType(grid.dtype()) || x.dim(2) == 0 || x.dim(3) == 0) {
      return RunFallback(ctx, in, out);  // reports the error, or writes zeros
    }
    Geometry g;
    g.n = x.dim(0);
    g.c = x.dim(1);
    g.oh = grid.dim(1);
    g.ow = grid.dim(2);
    g.align_corners = attrs_.align_corners;
    Plane& p = g.plane;
    p.h = x.dim(2);
    p.w = x.dim(3);
    p.sh = x.stride(2);
    p.sw = x.stride(3);
    p.mode = attrs_.mode;
    p.pad = attrs_.pad;
    p.lo_x = attrs_.align_corners ? 0 : -0.5;
    p.hi_x = attrs_.align_corners ? p.w - 1 : p.w - 0.5;
    p.lo_y = attrs_.align_corners ? 0 : -0.5;
    p.hi_y = attrs_.align_corners ? p.h - 1 : p.h - 0.5;
    p.limit = 4.0 + static_cast<double>(std::max(p.w, p.h));
    g.xs_n = x.stride(0);
    g.xs_c = x.stride(1);
    g.gs_n = grid.stride(0);
    g.gs_h = grid.stride(1);
    g.gs_w = grid.stride(2);
    g.gs_k = grid.stride(3);
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], x.dtype(), {g.n, g.c, g.oh, g.ow}, "GridSample"));
    const int64_t total = g.n * g.c * g.oh * g.ow;
    if (total == 0) return absl::OkStatus();
    const int64_t rows = g.n * g.oh;
    DispatchFloat(x.dtype(), [&](auto* xtag) {
      using T = std::remove_pointer_t<decltype(xtag)>;
      DispatchFloat(grid.dtype(), [&](auto* gtag) {
        using G = std::remove_pointer_t<decltype(gtag)>;
        const T* px = x.data<T>();
        const G* pg = grid.data<G>();
        T* py = out[0]->data<T>();
        if (ctx.num_threads() <= 1 || total < kMinParallelOutputs) {
          RunRows<T, G>(g, px, pg, py, 0, rows);
        } else {
          const int64_t grain = std::max<int64_t>(1, kMinParallelOutputs / 4 / (g.ow * g.c));
          ctx.ParallelFor(rows, grain,
                          [&](int64_t r0, int64_t r1) { RunRows<T, G>(g, px, pg, py, r0, r1); });
        }
      });
    });
    return absl::OkStatus();
  }

 private:
  GridAttrs attrs_;
};

}  // namespace

void RegisterGridSampleKernels(KernelRegistry& r) {
  r.Register(KernelRegistration{
      "", "GridSample", Device::kCPU, kBackend, kDnnlPriority,
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_ASSIGN_OR_RETURN(GridAttrs a, reference::ReadGridSampleAttrs(spec));
        return std::make_unique<GridSampleKernel>(KernelName(spec), a);
      }});
}

}  // namespace dynvm::onednn
