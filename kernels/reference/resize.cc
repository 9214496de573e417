// Reference kernel for Resize (opsets 11 and 13): nearest, linear and cubic interpolation over
// every dim, separably.
//
// Output size: `sizes`, or floor(input * scales). Each output coordinate x maps to an input
// coordinate by coordinate_transformation_mode (scale = output / input: the `scales` value, or
// sizes / input): half_pixel (x + 0.5) / scale - 0.5; pytorch_half_pixel the same, or 0 for
// an output of length 1; align_corners x * (in - 1) / (out - 1); asymmetric x / scale;
// tf_half_pixel_for_nn (x + 0.5) / scale; tf_crop_and_resize through the roi, with
// extrapolation_value outside the input. The neighbours of a coordinate c are taken around
// base = ceil(c) - 1 with ratio c - base in (0, 1]: two for nearest (picked by nearest_mode) and
// linear (weights 1 - ratio, ratio), four for cubic (Keys' kernel with cubic_coeff_a; with
// exclude_outside the weights of neighbours outside the input are dropped and the rest
// renormalized). Neighbour indices are clamped to the input (edge values). Sums in double.
#include "kernels/reference/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;

using Mode = ResizeMode;

absl::StatusOr<std::vector<double>> ReadFloats(const Tensor& t, absl::string_view what) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::kF32) {
      v.push_back(t.data<float>()[t.ElementOffset(i)]);
    } else if (t.dtype() == DType::kF64) {
      v.push_back(t.data<double>()[t.ElementOffset(i)]);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("Resize: ", what, " must be f32 or f64"));
    }
  }
  return v;
}

// Per output dim: for each output coordinate, the input indices and weights of its neighbours
// (outside: the coordinate maps outside the input in tf_crop_and_resize).
struct Taps {
  std::vector<ResizeTap> at;
};

Taps Plan(const ResizeAttrs& a, int64_t in, int64_t out, double scale, double roi_start,
          double roi_end) {
  Taps t;
  for (int64_t x = 0; x < out; ++x)
    t.at.push_back(ResizeTapAt(a, in, out, scale, roi_start, roi_end, x));
  return t;
}

// The output dims, the scale of every dim and the roi (2 * rank values) from the inputs, through
// `axes` (a dim not named keeps its size, scale 1 and the whole roi) and keep_aspect_ratio_policy.
absl::Status OutputSizes(const ResizeAttrs& a, const Tensor& x, const Tensor* roi_t,
                         const Tensor* scales_t, const Tensor* sizes_t,
                         std::vector<int64_t>* out_dims, std::vector<double>* scales,
                         std::vector<double>* roi) {
  const int r = x.rank();
  std::vector<int> axes;
  for (int64_t v : a.axes) {
    const int64_t ax = v < 0 ? v + r : v;
    if (ax < 0 || ax >= r || std::find(axes.begin(), axes.end(), ax) != axes.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Resize: axis ", v, " is out of range or repeated for rank ", r));
    }
    axes.push_back(static_cast<int>(ax));
  }
  if (a.axes.empty())
    for (int i = 0; i < r; ++i) axes.push_back(i);
  const size_t n = axes.size();
  out_dims->assign(x.dims().begin(), x.dims().end());
  scales->assign(r, 1.0);
  if (sizes_t != nullptr) {
    DYNVM_ASSIGN_OR_RETURN(Dims sizes, ReadInts(*sizes_t, "Resize", "sizes"));
    if (sizes.size() != n)
      return absl::InvalidArgumentError("Resize: sizes must have one value per resized dim");
    for (size_t k = 0; k < n; ++k) {
      if (sizes[k] < 0) return absl::InvalidArgumentError("Resize: negative size");
    }
    // not_larger / not_smaller: one scale for every resized dim, the smallest or largest ratio.
    double keep = a.keep_aspect == 1 ? std::numeric_limits<double>::infinity() : 0;
    for (size_t k = 0; k < n && a.keep_aspect != 0; ++k) {
      const double ratio =
          static_cast<double>(sizes[k]) / static_cast<double>(std::max<int64_t>(1, x.dim(axes[k])));
      keep = a.keep_aspect == 1 ? std::min(keep, ratio) : std::max(keep, ratio);
    }
    for (size_t k = 0; k < n; ++k) {
      const int i = axes[k];
      if (a.keep_aspect != 0) {
        (*scales)[i] = keep;
        (*out_dims)[i] =
            static_cast<int64_t>(std::floor(keep * static_cast<double>(x.dim(i)) + 0.5));
        continue;
      }
      (*out_dims)[i] = sizes[k];
      (*scales)[i] =
          x.dim(i) == 0 ? 1.0 : static_cast<double>(sizes[k]) / static_cast<double>(x.dim(i));
    }
  } else {
    DYNVM_ASSIGN_OR_RETURN(std::vector<double> s, ReadFloats(*scales_t, "scales"));
    if (s.size() != n)
      return absl::InvalidArgumentError("Resize: scales must have one value per resized dim");
    for (size_t k = 0; k < n; ++k) {
      if (!(s[k] > 0) || s[k] > 1e6)
        return absl::InvalidArgumentError("Resize: scales must be positive");
      const int i = axes[k];
      (*scales)[i] = static_cast<float>(s[k]);
      (*out_dims)[i] = static_cast<int64_t>(static_cast<double>(x.dim(i)) * (*scales)[i]);
    }
  }
  roi->assign(2 * r, 0.0);
  for (int i = 0; i < r; ++i) (*roi)[r + i] = 1.0;
  if (a.transform == "tf_crop_and_resize") {
    if (roi_t == nullptr || roi_t->numel() != static_cast<int64_t>(2 * n))
      return absl::InvalidArgumentError(
          "Resize: tf_crop_and_resize needs a roi of 2 values per resized dim");
    DYNVM_ASSIGN_OR_RETURN(std::vector<double> v, ReadFloats(*roi_t, "roi"));
    for (size_t k = 0; k < n; ++k) {
      (*roi)[axes[k]] = v[k];
      (*roi)[r + axes[k]] = v[n + k];
    }
  }
  return absl::OkStatus();
}

absl::Status RunResize(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const ResizeAttrs*>(attrs);
  if (in.empty() || in[0] == nullptr || out.empty() || out[0] == nullptr) {
    return absl::InvalidArgumentError("Resize: missing input or output");
  }
  const Tensor& x = *in[0];
  const int r = x.rank();
  DYNVM_ASSIGN_OR_RETURN(ResizeGeometry geo, PlanResize(a, in));
  const std::vector<int64_t>& out_dims = geo.out_dims;
  const std::vector<double>& scales = geo.scales;
  const std::vector<double>& roi = geo.roi;
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), out_dims, "Resize"));
  std::vector<Taps> taps;
  for (int i = 0; i < r; ++i)
    taps.push_back(Plan(a, x.dim(i), out_dims[i], scales[i], roi[i], roi[r + i]));
  int64_t total = 1;
  for (int64_t d : out_dims) total *= d;
  return DispatchNumeric(x.dtype(), "Resize", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (std::is_same_v<T, bool>) {
      return absl::UnimplementedError("Resize: dtype bool not supported");
    } else {
      const T* px = x.data<T>();
      T* py = out[0]->data<T>();
      std::vector<int64_t> o(r), k(r);
      for (int64_t oi = 0; oi < total; ++oi) {
        for (int64_t rem = oi, i = r - 1; i >= 0; --i) {
          o[i] = rem % out_dims[i];
          rem /= out_dims[i];
        }
        bool outside = false;
        int64_t combos = 1;
        for (int i = 0; i < r; ++i) {
          outside |= taps[i].at[o[i]].outside;
          combos *= taps[i].at[o[i]].count;
        }
        double acc = 0;
        if (outside) {
          acc = a.extrapolation;
        } else {
          for (int64_t ci = 0; ci < combos; ++ci) {
            double w = 1;
            int64_t off = 0;
            for (int64_t rem = ci, i = r - 1; i >= 0; --i) {
              const ResizeTap& t = taps[i].at[o[i]];
              const int64_t j = rem % t.count;
              rem /= t.count;
              w *= t.weight[j];
              off += t.index[j] * x.stride(i);
            }
            if (w == 0) continue;
            if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
              acc += w * static_cast<float>(px[off]);
            } else {
              acc += w * static_cast<double>(px[off]);
            }
          }
        }
        if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
          py[oi] = T(static_cast<float>(acc));
        } else if constexpr (std::is_integral_v<T>) {
          const double lo = static_cast<double>(std::numeric_limits<T>::min());
          const double hi = static_cast<double>(std::numeric_limits<T>::max());
          py[oi] = static_cast<T>(std::clamp(std::round(acc), lo, hi));
        } else {
          py[oi] = static_cast<T>(acc);
        }
      }
      return absl::OkStatus();
    }
  });
}

}  // namespace

ResizeTap ResizeTapAt(const ResizeAttrs& a, int64_t in, int64_t out, double scale, double roi_start,
                      double roi_end, int64_t x) {
  ResizeTap t;
  const double out_width = scale * static_cast<double>(in);
  const double xd = static_cast<double>(x);
  double c;
  if (a.transform == "align_corners") {
    c = out_width == 1 ? 0 : xd * static_cast<double>(in - 1) / (out_width - 1);
  } else if (a.transform == "asymmetric") {
    c = xd / scale;
  } else if (a.transform == "tf_crop_and_resize") {
    c = out_width == 1 ? (roi_end - roi_start) * static_cast<double>(in - 1) / 2
                       : xd * (roi_end - roi_start) * static_cast<double>(in - 1) / (out_width - 1);
    c += roi_start * static_cast<double>(in - 1);
    t.outside = c < 0 || c > static_cast<double>(in - 1);
  } else if (a.transform == "tf_half_pixel_for_nn") {
    c = (xd + 0.5) / scale;
  } else if (a.transform == "half_pixel_symmetric") {
    // Opset 19: half_pixel, shifted so the output stays centered when out / scale is not in.
    const double adjustment = static_cast<double>(out) / out_width;
    c = static_cast<double>(in) / 2 * (1 - adjustment) + (xd + 0.5) / scale - 0.5;
  } else if (a.transform == "pytorch_half_pixel") {
    // The operator's text: "length_resized > 1 ? ... : 0", the output's length (ONNX
    // Runtime too; ONNX's reference implementation takes -0.5 where scale x in is 1:
    // onnx/onnx#4275, where cubic differs; docs/differential.md).
    c = out == 1 ? 0 : (xd + 0.5) / scale - 0.5;
  } else {  // half_pixel
    c = (xd + 0.5) / scale - 0.5;
  }
  const double base = std::ceil(c) - 1;
  const double ratio = c - base;  // in (0, 1]
  double* w = t.weight;
  int64_t first;
  if (a.mode == Mode::kCubic) {
    const double A = a.cubic_a, r = ratio, s = 1 - ratio;
    w[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
    w[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
    w[2] = ((A + 2) * s - (A + 3)) * s * s + 1;
    w[3] = ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A;
    t.count = 4;
    first = static_cast<int64_t>(base) - 1;
  } else if (a.mode == Mode::kLinear) {
    w[0] = 1 - ratio;
    w[1] = ratio;
    t.count = 2;
    first = static_cast<int64_t>(base);
  } else {
    bool right;
    if (ratio == 1) {
      right = true;  // c is an integer: itself
    } else if (a.nearest == "round_prefer_ceil") {
      right = ratio >= 0.5;
    } else if (a.nearest == "floor") {
      right = false;
    } else if (a.nearest == "ceil") {
      right = true;
    } else {  // round_prefer_floor
      right = ratio > 0.5;
    }
    w[0] = right ? 0.0 : 1.0;
    w[1] = right ? 1.0 : 0.0;
    t.count = 2;
    first = static_cast<int64_t>(base);
  }
  for (int j = 0; j < t.count; ++j) t.index[j] = first + j;
  if (a.exclude_outside) {
    double sum = 0;
    for (int j = 0; j < t.count; ++j) {
      if (t.index[j] < 0 || t.index[j] >= in) w[j] = 0;
      sum += w[j];
    }
    if (sum != 0) {
      for (int j = 0; j < t.count; ++j) w[j] /= sum;
    }
  }
  for (int j = 0; j < t.count; ++j) t.index[j] = std::clamp<int64_t>(t.index[j], 0, in - 1);
  return t;
}

absl::StatusOr<ResizeGeometry> PlanResize(const ResizeAttrs& a, Inputs in) {
  if (in.empty() || in[0] == nullptr) return absl::InvalidArgumentError("Resize: missing input");
  const Tensor& x = *in[0];
  const Tensor* roi_t = in.size() > 1 ? in[1] : nullptr;
  const Tensor* scales_t = in.size() > 2 ? in[2] : nullptr;
  const Tensor* sizes_t = in.size() > 3 ? in[3] : nullptr;
  if (scales_t != nullptr && scales_t->numel() == 0) scales_t = nullptr;
  if (sizes_t != nullptr && sizes_t->numel() == 0) sizes_t = nullptr;
  if ((scales_t == nullptr) == (sizes_t == nullptr)) {
    return absl::InvalidArgumentError("Resize: exactly one of scales and sizes must be given");
  }
  ResizeGeometry g;
  DYNVM_RETURN_IF_ERROR(
      OutputSizes(a, x, roi_t, scales_t, sizes_t, &g.out_dims, &g.scales, &g.roi));
  return g;
}

absl::StatusOr<ResizeAttrs> ReadResizeAttrs(const KernelSpec& spec) {
  if (spec.inputs.empty() || spec.inputs.size() > 4 || spec.outputs.size() != 1) {
    return absl::InvalidArgumentError("Resize: expected 1..4 inputs and 1 output");
  }
  if (spec.Find("opset10") != nullptr) {
    return absl::UnimplementedError("Resize of opset 10 is not supported (opset 11 and later)");
  }
  ResizeAttrs a;
  DYNVM_ASSIGN_OR_RETURN(std::string mode, spec.GetString("mode", "nearest"));
  if (mode == "nearest") {
    a.mode = Mode::kNearest;
  } else if (mode == "linear") {
    a.mode = Mode::kLinear;
  } else if (mode == "cubic") {
    a.mode = Mode::kCubic;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("Resize: unknown mode '", mode, "'"));
  }
  absl::StatusOr<std::string> transform =
      spec.GetString("coordinate_transformation_mode", "half_pixel");
  if (!transform.ok()) return transform.status();
  static const char* kTransforms[] = {
      "half_pixel",           "pytorch_half_pixel", "align_corners",       "asymmetric",
      "tf_half_pixel_for_nn", "tf_crop_and_resize", "half_pixel_symmetric"};
  if (std::find(std::begin(kTransforms), std::end(kTransforms), *transform) ==
      std::end(kTransforms)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Resize: unknown coordinate_transformation_mode '", *transform, "'"));
  }
  a.transform = *transform;
  absl::StatusOr<std::string> nearest = spec.GetString("nearest_mode", "round_prefer_floor");
  if (!nearest.ok()) return nearest.status();
  if (*nearest != "round_prefer_floor" && *nearest != "round_prefer_ceil" && *nearest != "floor" &&
      *nearest != "ceil") {
    return absl::InvalidArgumentError(
        absl::StrCat("Resize: unknown nearest_mode '", *nearest, "'"));
  }
  a.nearest = *nearest;
  absl::StatusOr<float> cubic_a = spec.GetFloat("cubic_coeff_a", -0.75f);
  if (!cubic_a.ok()) return cubic_a.status();
  a.cubic_a = *cubic_a;
  DYNVM_ASSIGN_OR_RETURN(int64_t exclude, spec.GetInt("exclude_outside", 0));
  a.exclude_outside = exclude != 0;
  absl::StatusOr<float> extrapolation = spec.GetFloat("extrapolation_value", 0);
  if (!extrapolation.ok()) return extrapolation.status();
  a.extrapolation = *extrapolation;
  DYNVM_ASSIGN_OR_RETURN(int64_t antialias, spec.GetInt("antialias", 0));
  if (antialias != 0) {
    return absl::UnimplementedError("Resize: antialias (opset 18) is not supported");
  }
  DYNVM_ASSIGN_OR_RETURN(a.axes, spec.GetInts("axes"));
  DYNVM_ASSIGN_OR_RETURN(std::string keep, spec.GetString("keep_aspect_ratio_policy", "stretch"));
  if (keep == "not_larger") {
    a.keep_aspect = 1;
  } else if (keep == "not_smaller") {
    a.keep_aspect = 2;
  } else if (keep != "stretch") {
    return absl::InvalidArgumentError(
        absl::StrCat("Resize: unknown keep_aspect_ratio_policy '", keep, "'"));
  }
  return a;
}

void RegisterResizeKernels(KernelRegistry& r) {
  r.Register(KernelRegistration{
      "", "Resize", Device::kCPU, "reference", kReferencePriority,
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_ASSIGN_OR_RETURN(ResizeAttrs a, ReadResizeAttrs(spec));
        return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), &RunResize,
                                                std::make_shared<const ResizeAttrs>(std::move(a)));
      }});
}

}  // namespace dynvm::reference
