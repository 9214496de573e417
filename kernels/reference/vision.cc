// Reference kernels for MeanVarianceNormalization, MaxUnpool, RoiAlign and GridSample.
//
// MeanVarianceNormalization: (x - mean) / (sqrt(var) + 1e-9) over `axes` (default 0, 2, 3),
// in double.
// MaxUnpool: zeros of the inferred shape ((in - 1) * stride + kernel - pad_begin - pad_end per
// spatial dim), then y[I[k]] = x[k], where I holds indices into the whole flattened inferred
// shape (as MaxPool's Indices output does); a larger `output_shape` input pads that with zeros
// at the end of each spatial dim (as ONNX's test data expects). An index outside is an
// InvalidArgument.
// RoiAlign: per region of interest, an output_height x output_width grid of bins, each the
// average (mode avg) or maximum (mode max) of sampling_ratio^2 bilinear samples (adaptive,
// ceil(roi size / bins), when sampling_ratio is 0); coordinate_transformation_mode half_pixel
// shifts the scaled box by -0.5, output_half_pixel does not and makes boxes at least 1x1.
// Samples outside [-1, size] count as 0. The max mode takes the largest weighted corner as
// ONNX Runtime does.
// GridSample (4-D input): grid[n, h, w] = (x, y) in [-1, 1] is mapped to pixel coordinates
// (align_corners: -1 and 1 are the corner pixels' centres; else their outer edges); modes
// bilinear, nearest (round half to even) and bicubic (A = -0.75); padding zeros (outside
// pixels read 0), border (clamped) and reflection (mirrored at the borders), applied to the
// coordinate for bilinear and nearest and to each of the 16 taps for bicubic (as PyTorch).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/reference/common.h"
#include "kernels/reference/grid_sample.h"
#include "kernels/reference/reference.h"
#include "kernels/reference/roi_align.h"
#include "kernels/reference/signal_common.h"

namespace dynvm::reference {
namespace {

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;

// ---- MeanVarianceNormalization ----

struct MvnAttrs {
  std::vector<int64_t> axes;
};

absl::Status RunMvn(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const MvnAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(NeedIo(in, 1, out, "MeanVarianceNormalization"));
  const Tensor& x = *in[0];
  if (!IsFloat(x.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MeanVarianceNormalization: input must be floating point, got ", DTypeName(x.dtype())));
  }
  const int rank = x.rank();
  std::vector<bool> reduced(rank, false);
  for (int64_t axis : a.axes) {
    DYNVM_ASSIGN_OR_RETURN(int ax, NormalizeAxis(axis, rank, "MeanVarianceNormalization"));
    reduced[ax] = true;
  }
  DYNVM_RETURN_IF_ERROR(
      PrepareOutput(ctx, out[0], x.dtype(), x.dims(), "MeanVarianceNormalization"));
  const std::vector<double> v = ReadDoubles(x);
  // Group index of each element: its coordinates along the kept axes.
  std::vector<int64_t> group(v.size());
  int64_t groups = 1;
  for (int d = 0; d < rank; ++d) {
    if (!reduced[d]) groups *= x.dim(d);
  }
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t rem = static_cast<int64_t>(i), g = 0, mul = 1;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t c = rem % x.dim(d);
      rem /= x.dim(d);
      if (!reduced[d]) {
        g += c * mul;
        mul *= x.dim(d);
      }
    }
    group[i] = g;
  }
  std::vector<double> sum(groups, 0), sq(groups, 0), count(groups, 0);
  for (size_t i = 0; i < v.size(); ++i) {
    sum[group[i]] += v[i];
    count[group[i]] += 1;
  }
  for (int64_t g = 0; g < groups; ++g) sum[g] = count[g] > 0 ? sum[g] / count[g] : 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double d = v[i] - sum[group[i]];
    sq[group[i]] += d * d;
  }
  std::vector<double> y(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t g = group[i];
    y[i] = (v[i] - sum[g]) / (std::sqrt(sq[g] / count[g]) + 1e-9);
  }
  WriteDoubles(*out[0], y);
  return absl::OkStatus();
}

// ---- MaxUnpool ----

struct UnpoolAttrs {
  std::vector<int64_t> kernel, pads, strides;
};

absl::Status RunMaxUnpool(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const UnpoolAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(NeedIo(in, 2, out, "MaxUnpool"));
  const Tensor& x = *in[0];
  const Tensor& idx = *in[1];
  const int rank = x.rank();
  const int spatial = rank - 2;
  if (rank < 3 || static_cast<int>(a.kernel.size()) != spatial) {
    return absl::InvalidArgumentError(absl::StrCat("MaxUnpool: input ", x.DebugString(),
                                                   " needs rank 2 + ", a.kernel.size(),
                                                   " (kernel_shape's length)"));
  }
  if (!std::equal(x.dims().begin(), x.dims().end(), idx.dims().begin(), idx.dims().end())) {
    return absl::InvalidArgumentError(absl::StrCat("MaxUnpool: indices ", idx.DebugString(),
                                                   " must have the input's shape ",
                                                   x.DebugString()));
  }
  // The indices address the inferred shape (ONNX's test data); a larger output_shape pads it
  // with zeros at the end of each spatial dim.
  Dims inferred(x.dims().begin(), x.dims().begin() + 2);
  for (int i = 0; i < spatial; ++i) {
    const int64_t s = a.strides.empty() ? 1 : a.strides[i];
    const int64_t pb = a.pads.empty() ? 0 : a.pads[i];
    const int64_t pe = a.pads.empty() ? 0 : a.pads[i + spatial];
    const int64_t d = (x.dim(i + 2) - 1) * s + a.kernel[i] - pb - pe;
    if (d < 0) return absl::InvalidArgumentError("MaxUnpool: negative output size");
    inferred.push_back(d);
  }
  Dims dims = inferred;
  if (in.size() > 2 && in[2] != nullptr) {
    DYNVM_ASSIGN_OR_RETURN(dims, ReadInts(*in[2], "MaxUnpool", "output_shape"));
    if (static_cast<int>(dims.size()) != rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("MaxUnpool: output_shape has ", dims.size(), " values for rank ", rank));
    }
    for (int i = 0; i < rank; ++i) {
      if (dims[i] < inferred[i] || (i < 2 && dims[i] != inferred[i])) {
        return absl::InvalidArgumentError(absl::StrCat("MaxUnpool: output_shape dim ", i, " is ",
                                                       dims[i], ", the pooled input needs ",
                                                       inferred[i], (i < 2 ? "" : " or more")));
      }
    }
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), dims, "MaxUnpool"));
  int64_t total = 1;
  for (int64_t d : inferred) total *= d;
  std::vector<double> y(static_cast<size_t>(total), 0.0);
  const std::vector<double> v = ReadDoubles(x);
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> ind, ReadIndexValues(idx, "MaxUnpool"));
  for (size_t k = 0; k < v.size(); ++k) {
    if (ind[k] < 0 || ind[k] >= total) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MaxUnpool: index ", ind[k], " outside the unpooled output of ", total, " elements"));
    }
    y[ind[k]] = v[k];
  }
  if (std::equal(dims.begin(), dims.end(), inferred.begin(), inferred.end())) {
    WriteDoubles(*out[0], y);
    return absl::OkStatus();
  }
  std::vector<double> padded(static_cast<size_t>(out[0]->numel()), 0.0);
  for (int64_t k = 0; k < total; ++k) {  // k in the inferred shape -> its place in dims
    int64_t rem = k, o = 0, mul = 1;
    for (int d = rank - 1; d >= 0; --d) {
      o += (rem % inferred[d]) * mul;
      rem /= inferred[d];
      mul *= dims[d];
    }
    padded[o] = y[k];
  }
  y = std::move(padded);
  WriteDoubles(*out[0], y);
  return absl::OkStatus();
}

// ---- RoiAlign ----

// Bilinear sample of plane (H x W) at (y, x) with RoiAlign's border rules; the four corner
// weights times values are returned in `terms` (for the max mode).
double RoiSample(const double* plane, int64_t h, int64_t w, double y, double x, double terms[4]) {
  terms[0] = terms[1] = terms[2] = terms[3] = 0;
  // Outside [-1, size], or NaN (a box with a NaN coordinate): the sample adds nothing.
  if (!(y >= -1.0 && y <= static_cast<double>(h) && x >= -1.0 && x <= static_cast<double>(w))) {
    return 0;
  }
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x), y1, x1;
  if (y0 >= h - 1) {
    y0 = y1 = h - 1;
    y = static_cast<double>(y0);
  } else {
    y1 = y0 + 1;
  }
  if (x0 >= w - 1) {
    x0 = x1 = w - 1;
    x = static_cast<double>(x0);
  } else {
    x1 = x0 + 1;
  }
  const double ly = y - static_cast<double>(y0), lx = x - static_cast<double>(x0);
  const double hy = 1 - ly, hx = 1 - lx;
  terms[0] = hy * hx * plane[y0 * w + x0];
  terms[1] = hy * lx * plane[y0 * w + x1];
  terms[2] = ly * hx * plane[y1 * w + x0];
  terms[3] = ly * lx * plane[y1 * w + x1];
  return terms[0] + terms[1] + terms[2] + terms[3];
}

// Samples per bin along an axis of region k: sampling_ratio, or ceil(extent / bins) when it is
// 0. An extent that is NaN, zero or negative samples nothing (the bin is 0); one that needs more
// than 2^24 samples per bin (an infinite or absurd box) is refused.
absl::StatusOr<int64_t> RoiGridSize(int64_t sampling_ratio, double extent, int64_t bins,
                                    int64_t k) {
  if (sampling_ratio > 0) return sampling_ratio;
  const double v = std::ceil(extent / static_cast<double>(bins));
  if (!(v > 0)) return 0;
  if (v > static_cast<double>(int64_t{1} << 24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("RoiAlign: region ", k, " needs ", v, " samples per bin (at most 2^24)"));
  }
  return static_cast<int64_t>(v);
}

absl::Status RunRoiAlign(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const RoiAlignAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(NeedIo(in, 3, out, "RoiAlign"));
  const Tensor& x = *in[0];
  const Tensor& rois = *in[1];
  const Tensor& batch = *in[2];
  if (x.rank() != 4 || rois.rank() != 2 || rois.dim(1) != 4 || batch.rank() != 1 ||
      batch.dim(0) != rois.dim(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("RoiAlign: expected X [N, C, H, W], rois [R, 4] and batch_indices [R], got ",
                     x.DebugString(), ", ", rois.DebugString(), ", ", batch.DebugString()));
  }
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), r = rois.dim(0);
  const std::vector<int64_t> dims = {r, c, a.out_h, a.out_w};
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), dims, "RoiAlign"));
  const std::vector<double> xv = ReadDoubles(x);
  const std::vector<double> boxes = ReadDoubles(rois);
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> bi, ReadIndexValues(batch, "RoiAlign"));
  std::vector<double> y(static_cast<size_t>(r * c * a.out_h * a.out_w), 0.0);
  const double offset = a.half_pixel ? 0.5 : 0.0;
  for (int64_t k = 0; k < r; ++k) {
    if (bi[k] < 0 || bi[k] >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("RoiAlign: batch index ", bi[k], " outside [0, ", n, ")"));
    }
    const double* box = &boxes[k * 4];
    const double x0 = box[0] * a.spatial_scale - offset, y0 = box[1] * a.spatial_scale - offset;
    double rw = box[2] * a.spatial_scale - offset - x0;
    double rh = box[3] * a.spatial_scale - offset - y0;
    if (!a.half_pixel) {
      rw = std::max(rw, 1.0);
      rh = std::max(rh, 1.0);
    }
    const double bh = rh / static_cast<double>(a.out_h), bw = rw / static_cast<double>(a.out_w);
    DYNVM_ASSIGN_OR_RETURN(const int64_t gh, RoiGridSize(a.sampling_ratio, rh, a.out_h, k));
    DYNVM_ASSIGN_OR_RETURN(const int64_t gw, RoiGridSize(a.sampling_ratio, rw, a.out_w, k));
    const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
    for (int64_t ch = 0; ch < c; ++ch) {
      const double* plane = &xv[(bi[k] * c + ch) * h * w];
      for (int64_t ph = 0; ph < a.out_h; ++ph) {
        for (int64_t pw = 0; pw < a.out_w; ++pw) {
          double acc = 0, best = -std::numeric_limits<double>::infinity();
          bool any = false;
          for (int64_t iy = 0; iy < gh; ++iy) {
            const double yy = y0 + ph * bh + (iy + 0.5) * bh / static_cast<double>(gh);
            for (int64_t ix = 0; ix < gw; ++ix) {
              const double xx = x0 + pw * bw + (ix + 0.5) * bw / static_cast<double>(gw);
              double t[4];
              acc += RoiSample(plane, h, w, yy, xx, t);
              best = std::max({best, t[0], t[1], t[2], t[3]});
              any = true;
            }
          }
          y[((k * c + ch) * a.out_h + ph) * a.out_w + pw] =
              a.max_mode ? (any ? best : 0.0) : acc / count;
        }
      }
    }
  }
  WriteDoubles(*out[0], y);
  return absl::OkStatus();
}

// ---- GridSample ----

double Reflect(double v, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (v < lo) {
    const double d = lo - v;
    const double n = std::floor(d / range);
    const double r = d - n * range;
    return std::fmod(n, 2.0) == 0 ? lo + r : hi - r;
  }
  if (v > hi) {
    const double d = v - hi;
    const double n = std::floor(d / range);
    const double r = d - n * range;
    return std::fmod(n, 2.0) == 0 ? hi - r : lo + r;
  }
  return v;
}

struct GridPlane {
  const double* p;
  int64_t h, w;
  GsPad pad;
  double lo_x, hi_x, lo_y, hi_y;  // the reflection borders
  double At(int64_t r, int64_t c) const {
    switch (pad) {
      case GsPad::kZeros:
        return (r >= 0 && r < h && c >= 0 && c < w) ? p[r * w + c] : 0.0;
      case GsPad::kBorder:
        break;
      case GsPad::kReflection:
        c = static_cast<int64_t>(Reflect(static_cast<double>(c), lo_x, hi_x));
        r = static_cast<int64_t>(Reflect(static_cast<double>(r), lo_y, hi_y));
        break;
    }
    c = std::clamp<int64_t>(c, 0, w - 1);
    r = std::clamp<int64_t>(r, 0, h - 1);
    return p[r * w + c];
  }
};

void CubicCoeffs(double t, double c[4]) {
  constexpr double A = -0.75;
  t = std::abs(t);
  c[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
  c[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
  c[2] = ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1;
  c[3] = ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A;
}

double GridValue(const GridAttrs& a, const GridPlane& g, double x, double y) {
  if (GridSampleIsNaN(a.pad, x, y)) return std::numeric_limits<double>::quiet_NaN();
  const double lo_x = a.align_corners ? 0 : -0.5, hi_x = a.align_corners ? g.w - 1 : g.w - 0.5;
  const double lo_y = a.align_corners ? 0 : -0.5, hi_y = a.align_corners ? g.h - 1 : g.h - 0.5;
  if (a.mode == GsMode::kNearest) {
    x = std::nearbyint(x);
    y = std::nearbyint(y);
  }
  const double limit = 4.0 + static_cast<double>(std::max(g.w, g.h));
  if (a.mode == GsMode::kBicubic) {
    // Bicubic pads each of its 4 x 4 taps (GridPlane::At), not the coordinate (PyTorch's
    // grid_sample, which GridSample follows). The coordinate is brought in range for the
    // casts below without changing a tap: by clamping far outside (border: every tap is the
    // edge pixel either way) or by whole periods of the reflection (2 (hi - lo), an integer).
    if (a.pad == GsPad::kBorder) {
      x = std::clamp(x, -limit, limit);
      y = std::clamp(y, -limit, limit);
    } else if (a.pad == GsPad::kReflection) {
      const double px = 2 * (hi_x - lo_x), py = 2 * (hi_y - lo_y);
      if (px > 0) x = lo_x + std::fmod(x - lo_x, px) + (x < lo_x ? px : 0);
      if (py > 0) y = lo_y + std::fmod(y - lo_y, py) + (y < lo_y ? py : 0);
    }
  } else if (a.pad == GsPad::kBorder) {
    x = std::clamp(x, 0.0, static_cast<double>(g.w - 1));
    y = std::clamp(y, 0.0, static_cast<double>(g.h - 1));
  } else if (a.pad == GsPad::kReflection) {
    x = Reflect(x, lo_x, hi_x);
    y = Reflect(y, lo_y, hi_y);
  }
  // Far outside (zeros padding): every tap reads 0; also keeps the casts below in range.
  if (a.pad == GsPad::kZeros && (std::abs(x) > limit || std::abs(y) > limit)) return 0.0;
  switch (a.mode) {
    case GsMode::kNearest:
      return g.At(static_cast<int64_t>(y), static_cast<int64_t>(x));
    case GsMode::kBilinear: {
      const double fx = std::floor(x), fy = std::floor(y);
      const int64_t x1 = static_cast<int64_t>(fx), y1 = static_cast<int64_t>(fy);
      const double dx1 = x - fx, dx2 = 1 - dx1, dy1 = y - fy, dy2 = 1 - dy1;
      return dy2 * (dx2 * g.At(y1, x1) + dx1 * g.At(y1, x1 + 1)) +
             dy1 * (dx2 * g.At(y1 + 1, x1) + dx1 * g.At(y1 + 1, x1 + 1));
    }
    case GsMode::kBicubic: {
      const double fx = std::floor(x) - 1, fy = std::floor(y) - 1;
      const int64_t x0 = static_cast<int64_t>(fx), y0 = static_cast<int64_t>(fy);
      double cx[4], cy[4];
      CubicCoeffs(x - fx - 1, cx);
      CubicCoeffs(y - fy - 1, cy);
      double acc = 0;
      for (int i = 0; i < 4; ++i) {
        double row = 0;
        for (int j = 0; j < 4; ++j) row += cx[j] * g.At(y0 + i, x0 + j);
        acc += cy[i] * row;
      }
      return acc;
    }
  }
  return 0.0;
}

absl::Status RunGridSample(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const GridAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(NeedIo(in, 2, out, "GridSample"));
  const Tensor& x = *in[0];
  const Tensor& grid = *in[1];
  if (x.rank() != 4) {
    return absl::UnimplementedError(absl::StrCat(
        "GridSample: only 4-D input [N, C, H, W] is supported, got ", x.DebugString()));
  }
  if (grid.rank() != 4 || grid.dim(0) != x.dim(0) || grid.dim(3) != 2) {
    return absl::InvalidArgumentError(absl::StrCat("GridSample: grid ", grid.DebugString(),
                                                   " must be [N, H_out, W_out, 2] for input ",
                                                   x.DebugString()));
  }
  if (!IsFloat(x.dtype()) || !IsFloat(grid.dtype())) {
    return absl::InvalidArgumentError("GridSample: X and grid must be floating point");
  }
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  const int64_t oh = grid.dim(1), ow = grid.dim(2);
  const std::vector<int64_t> dims = {n, c, oh, ow};
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), dims, "GridSample"));
  const std::vector<double> xv = ReadDoubles(x);
  const std::vector<double> gv = ReadDoubles(grid);
  std::vector<double> y(static_cast<size_t>(n * c * oh * ow), 0.0);
  if (h == 0 || w == 0) {  // nothing to sample: zeros
    WriteDoubles(*out[0], y);
    return absl::OkStatus();
  }
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < c; ++ch) {
      GridPlane plane{&xv[(b * c + ch) * h * w], h, w, a.pad, 0, 0, 0, 0};
      plane.lo_x = a.align_corners ? 0 : -0.5;
      plane.hi_x = a.align_corners ? w - 1 : w - 0.5;
      plane.lo_y = a.align_corners ? 0 : -0.5;
      plane.hi_y = a.align_corners ? h - 1 : h - 0.5;
      for (int64_t i = 0; i < oh * ow; ++i) {
        const double gx = gv[(b * oh * ow + i) * 2], gy = gv[(b * oh * ow + i) * 2 + 1];
        const double px = a.align_corners ? (gx + 1) / 2 * (w - 1) : ((gx + 1) * w - 1) / 2;
        const double py = a.align_corners ? (gy + 1) / 2 * (h - 1) : ((gy + 1) * h - 1) / 2;
        y[(b * c + ch) * oh * ow + i] = GridValue(a, plane, px, py);
      }
    }
  }
  WriteDoubles(*out[0], y);
  return absl::OkStatus();
}

void Add(KernelRegistry& r, const char* op, KernelFactory f) {
  r.Register(
      KernelRegistration{"", op, Device::kCPU, "reference", kReferencePriority, std::move(f)});
}

template <typename A>
absl::StatusOr<std::unique_ptr<Kernel>> Make(const KernelSpec& spec, FunctionKernel::RunFn run,
                                             A attrs) {
  return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), run,
                                          std::make_shared<const A>(std::move(attrs)));
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeGridSample(const KernelSpec& spec) {
  DYNVM_ASSIGN_OR_RETURN(GridAttrs a, ReadGridSampleAttrs(spec));
  return Make(spec, &RunGridSample, a);
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeRoiAlign(const KernelSpec& spec) {
  if (spec.inputs.size() != 3 || spec.outputs.size() != 1) {
    return absl::InvalidArgumentError("RoiAlign: expected 3 inputs and 1 output");
  }
  DYNVM_ASSIGN_OR_RETURN(RoiAlignAttrs a, ReadRoiAlignAttrs(spec));
  return Make(spec, &RunRoiAlign, a);
}

}  // namespace

absl::StatusOr<GridAttrs> ReadGridSampleAttrs(const KernelSpec& spec) {
  if (spec.inputs.size() != 2 || spec.outputs.size() != 1) {
    return absl::InvalidArgumentError("GridSample: expected 2 inputs and 1 output");
  }
  GridAttrs a;
  DYNVM_ASSIGN_OR_RETURN(std::string mode, spec.GetString("mode", "bilinear"));
  DYNVM_ASSIGN_OR_RETURN(std::string pad, spec.GetString("padding_mode", "zeros"));
  DYNVM_ASSIGN_OR_RETURN(int64_t align, spec.GetInt("align_corners", 0));
  if (mode == "bilinear" || mode == "linear") {
    a.mode = GsMode::kBilinear;
  } else if (mode == "nearest") {
    a.mode = GsMode::kNearest;
  } else if (mode == "bicubic" || mode == "cubic") {
    a.mode = GsMode::kBicubic;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("GridSample: unknown mode '", mode, "'"));
  }
  if (pad == "zeros") {
    a.pad = GsPad::kZeros;
  } else if (pad == "border") {
    a.pad = GsPad::kBorder;
  } else if (pad == "reflection") {
    a.pad = GsPad::kReflection;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("GridSample: unknown padding_mode '", pad, "'"));
  }
  a.align_corners = align != 0;
  return a;
}

double GridReflect(double v, double lo, double hi) { return Reflect(v, lo, hi); }

void GridCubicCoeffs(double t, double c[4]) { CubicCoeffs(t, c); }

absl::StatusOr<RoiAlignAttrs> ReadRoiAlignAttrs(const KernelSpec& spec) {
  RoiAlignAttrs a;
  DYNVM_ASSIGN_OR_RETURN(std::string mode, spec.GetString("mode", "avg"));
  DYNVM_ASSIGN_OR_RETURN(std::string ctm,
                         spec.GetString("coordinate_transformation_mode", "half_pixel"));
  DYNVM_ASSIGN_OR_RETURN(a.out_h, spec.GetInt("output_height", 1));
  DYNVM_ASSIGN_OR_RETURN(a.out_w, spec.GetInt("output_width", 1));
  DYNVM_ASSIGN_OR_RETURN(a.sampling_ratio, spec.GetInt("sampling_ratio", 0));
  DYNVM_ASSIGN_OR_RETURN(a.spatial_scale, spec.GetFloat("spatial_scale", 1.0f));
  if (mode != "avg" && mode != "max") {
    return absl::InvalidArgumentError(absl::StrCat("RoiAlign: unknown mode '", mode, "'"));
  }
  if (ctm != "half_pixel" && ctm != "output_half_pixel") {
    return absl::InvalidArgumentError(
        absl::StrCat("RoiAlign: unknown coordinate_transformation_mode '", ctm, "'"));
  }
  if (a.out_h < 1 || a.out_w < 1 || a.sampling_ratio < 0 || a.out_h > (1 << 20) ||
      a.out_w > (1 << 20)) {
    return absl::InvalidArgumentError(
        "RoiAlign: output_height and output_width must be >= 1, sampling_ratio >= 0");
  }
  a.max_mode = mode == "max";
  a.half_pixel = ctm == "half_pixel";
  return a;
}

void RegisterVisionKernels(KernelRegistry& r) {
  Add(r, "MeanVarianceNormalization",
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        if (spec.inputs.size() != 1 || spec.outputs.size() != 1) {
          return absl::InvalidArgumentError(
              "MeanVarianceNormalization: expected 1 input and 1 output");
        }
        MvnAttrs a;
        DYNVM_ASSIGN_OR_RETURN(a.axes, spec.GetInts("axes", {0, 2, 3}));
        return Make(spec, &RunMvn, a);
      });
  Add(r, "MaxUnpool", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() < 2 || spec.inputs.size() > 3 || spec.outputs.size() != 1) {
      return absl::InvalidArgumentError("MaxUnpool: expected 2..3 inputs and 1 output");
    }
    UnpoolAttrs a;
    DYNVM_ASSIGN_OR_RETURN(a.kernel, spec.GetInts("kernel_shape"));
    DYNVM_ASSIGN_OR_RETURN(a.pads, spec.GetInts("pads"));
    DYNVM_ASSIGN_OR_RETURN(a.strides, spec.GetInts("strides"));
    const size_t k = a.kernel.size();
    if (k == 0 || (!a.pads.empty() && a.pads.size() != 2 * k) ||
        (!a.strides.empty() && a.strides.size() != k)) {
      return absl::InvalidArgumentError(
          "MaxUnpool: kernel_shape is required; pads needs 2 and strides 1 value per spatial dim");
    }
    for (size_t i = 0; i < k; ++i) {
      if (a.kernel[i] < 1 || (!a.strides.empty() && a.strides[i] < 1)) {
        return absl::InvalidArgumentError("MaxUnpool: kernel_shape and strides must be >= 1");
      }
    }
    return Make(spec, &RunMaxUnpool, a);
  });
  Add(r, "RoiAlign", MakeRoiAlign);
  Add(r, "GridSample", MakeGridSample);
}

}  // namespace dynvm::reference
