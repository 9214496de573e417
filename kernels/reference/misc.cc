// Reference kernels for window functions (HannWindow, HammingWindow, BlackmanWindow), Det,
// linear quantization (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear) and
// NonMaxSuppression, Unique and Einsum.
//
// Windows: N = the size input; with periodic (the default) the period is N, else N - 1;
// Hann 0.5 - 0.5 cos(2 pi n / P), Hamming 25/46 - 21/46 cos(2 pi n / P), Blackman
// 0.42 - 0.5 cos(2 pi n / P) + 0.08 cos(4 pi n / P); output_datatype picks the element type.
// Det: [..., M, M] -> [...], by LU decomposition with partial pivoting in double.
// QuantizeLinear: y = saturate(round_half_even(x / scale) + zero_point) (u8 without a zero
// point, else the zero point's type); DequantizeLinear: (x - zero_point) * scale; scale and zero
// point are scalars or 1-D along `axis`. DynamicQuantizeLinear: u8 with scale
// (max(0, max x) - min(0, min x)) / 255 and zero point saturate(round(-min(0, min x) / scale)).
// NonMaxSuppression: per batch and class, boxes scoring above score_threshold in descending
// score order (ties: lower index first), each kept unless its IoU with a kept box exceeds
// iou_threshold, at most max_output_boxes_per_class; [batch, class, box] triples in that order.
// Unique: distinct elements (or slices along `axis`), ascending (lexicographic for slices) or in
// order of first occurrence; with the first index of each, each input's index into the result,
// and the counts.
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/quant_params.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;

// Element `linear` of any numeric tensor as double.
double Get(const Tensor& t, int64_t linear) {
  double v = 0;
  (void)DispatchNumeric(t.dtype(), "get", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T x = t.data<T>()[t.ElementOffset(linear)];
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      v = static_cast<float>(x);
    } else {
      v = static_cast<double>(x);
    }
    return absl::OkStatus();
  });
  return v;
}

// Stores v (already rounded and saturated for integer types) at `linear` of a contiguous tensor.
void Set(Tensor& t, int64_t linear, double v) {
  (void)DispatchNumeric(t.dtype(), "set", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      t.data<T>()[linear] = T(static_cast<float>(v));
    } else {
      t.data<T>()[linear] = static_cast<T>(v);
    }
    return absl::OkStatus();
  });
}

double RoundHalfEven(double v) { return std::nearbyint(v); }  // the default FP mode rounds to even

// ---- windows ----

enum class Window : uint8_t { kHann, kHamming, kBlackman };

struct WindowAttrs {
  Window kind = Window::kHann;
  DType dtype = DType::kF32;
  bool periodic = true;
};

absl::Status RunWindow(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const WindowAttrs*>(attrs);
  if (in.empty() || in[0] == nullptr || out.empty() || out[0] == nullptr) {
    return absl::InvalidArgumentError("window: missing input or output");
  }
  DYNVM_ASSIGN_OR_RETURN(Dims size, ReadInts(*in[0], "window", "size"));
  if (size.size() != 1 || (size)[0] < 0 || (size)[0] > (int64_t{1} << 32)) {
    return absl::InvalidArgumentError("window: size must be one non-negative integer");
  }
  const int64_t n = (size)[0];
  const std::vector<int64_t> dims = {n};
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], a.dtype, dims, "window"));
  const double period = a.periodic ? static_cast<double>(n) : static_cast<double>(n - 1);
  const double pi = 3.14159265358979323846;
  for (int64_t i = 0; i < n; ++i) {
    const double t = period == 0 ? 0 : 2 * pi * static_cast<double>(i) / period;
    double v;
    switch (a.kind) {
      case Window::kHann:
        v = 0.5 - 0.5 * std::cos(t);
        break;
      case Window::kHamming:
        v = 25.0 / 46 - 21.0 / 46 * std::cos(t);
        break;
      default:
        v = 0.42 - 0.5 * std::cos(t) + 0.08 * std::cos(2 * t);
        break;
    }
    Set(*out[0], i, IsFloat(a.dtype) ? v : std::trunc(v));
  }
  return absl::OkStatus();
}

// ---- Det ----

absl::Status RunDet(const void*, KernelContext& ctx, Inputs in, Outputs out) {
  if (in.empty() || in[0] == nullptr || out.empty() || out[0] == nullptr) {
    return absl::InvalidArgumentError("Det: missing input or output");
  }
  const Tensor& x = *in[0];
  if (x.rank() < 2 || x.dim(x.rank() - 1) != x.dim(x.rank() - 2) || !IsFloat(x.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Det: input must be [..., M, M] floats, got ", x.DebugString()));
  }
  const int64_t m = x.dim(x.rank() - 1);
  std::vector<int64_t> dims(x.dims().begin(), x.dims().end() - 2);
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), dims, "Det"));
  const int64_t count = m == 0 ? out[0]->numel() : x.numel() / (m * m);
  std::vector<double> a(static_cast<size_t>(m * m));
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t i = 0; i < m * m; ++i) a[i] = Get(x, b * m * m + i);
    double det = 1;
    for (int64_t col = 0; col < m && det != 0; ++col) {
      int64_t pivot = col;
      for (int64_t r = col + 1; r < m; ++r) {
        if (std::abs(a[r * m + col]) > std::abs(a[pivot * m + col])) pivot = r;
      }
      if (a[pivot * m + col] == 0) {
        det = 0;
        break;
      }
      if (pivot != col) {
        for (int64_t j = 0; j < m; ++j) std::swap(a[pivot * m + j], a[col * m + j]);
        det = -det;
      }
      det *= a[col * m + col];
      for (int64_t r = col + 1; r < m; ++r) {
        const double f = a[r * m + col] / a[col * m + col];
        for (int64_t j = col; j < m; ++j) a[r * m + j] -= f * a[col * m + j];
      }
    }
    Set(*out[0], b, det);
  }
  return absl::OkStatus();
}

// ---- quantization ----

struct QuantAttrs {
  int64_t axis = 1;
  bool quantize = true;
};

std::pair<double, double> Limits(DType d) {
  switch (d) {
    case DType::kU8:
      return {0, 255};
    case DType::kI8:
      return {-128, 127};
    case DType::kI32:
      return {static_cast<double>(std::numeric_limits<int32_t>::min()),
              static_cast<double>(std::numeric_limits<int32_t>::max())};
    default:
      return {-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  }
}

absl::Status RunQuant(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const QuantAttrs*>(attrs);
  const char* op = a.quantize ? "QuantizeLinear" : "DequantizeLinear";
  if (in.size() < 2 || in[0] == nullptr || in[1] == nullptr || out.empty() || out[0] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": missing input or output"));
  }
  const Tensor& x = *in[0];
  const Tensor& scale = *in[1];
  const Tensor* zp = in.size() > 2 ? in[2] : nullptr;
  if (scale.rank() > 1 || (zp != nullptr && zp->numel() != scale.numel())) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": scale and zero point must be scalars or 1-D of one size"));
  }
  int64_t axis = 0, inner = 1, channels = 1;
  if (scale.rank() == 1 && scale.numel() != 1) {
    DYNVM_ASSIGN_OR_RETURN(int ax, NormalizeAxis(a.axis, x.rank(), op));
    axis = ax;
    channels = x.dim(static_cast<int>(axis));
    DYNVM_RETURN_IF_ERROR(CheckQuantLength(scale.numel(), channels, absl::StrCat(op, ": scale")));
    for (int d = static_cast<int>(axis) + 1; d < x.rank(); ++d) inner *= x.dim(d);
  }
  DYNVM_RETURN_IF_ERROR(CheckQuantScale(scale, absl::StrCat(op, ": scale")));
  if (a.quantize && zp != nullptr && zp->dtype() != DType::kU8 && zp->dtype() != DType::kI8) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": zero point must be u8 or i8, not ", DTypeName(zp->dtype())));
  }
  if (!a.quantize && zp != nullptr) {
    DYNVM_RETURN_IF_ERROR(CheckZeroPoint(*zp, x.dtype(), absl::StrCat(op, ": zero point")));
  }
  DType out_dtype = a.quantize ? (zp != nullptr ? zp->dtype() : DType::kU8) : scale.dtype();
  if (out[0]->defined()) out_dtype = out[0]->dtype();
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], out_dtype, x.dims(), op));
  const auto [lo, hi] = Limits(out_dtype);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t ch = channels == 1 ? 0 : (i / inner) % channels;
    const double s = Get(scale, ch), z = zp != nullptr ? Get(*zp, ch) : 0.0;
    const double v = Get(x, i);
    if (a.quantize) {
      // f32 inputs divide in f32, as ONNX's reference does (the rounding can differ).
      const double q = x.dtype() == DType::kF32 && scale.dtype() == DType::kF32
                           ? static_cast<double>(static_cast<float>(v) / static_cast<float>(s))
                           : v / s;
      Set(*out[0], i, std::clamp(RoundHalfEven(q) + z, lo, hi));
    } else {
      Set(*out[0], i, (v - z) * s);
    }
  }
  return absl::OkStatus();
}

absl::Status RunDynamicQuant(const void*, KernelContext& ctx, Inputs in, Outputs out) {
  if (in.empty() || in[0] == nullptr || out.size() != 3 || out[0] == nullptr || out[1] == nullptr ||
      out[2] == nullptr) {
    return absl::InvalidArgumentError("DynamicQuantizeLinear: expected 1 input and 3 outputs");
  }
  const Tensor& x = *in[0];
  if (x.dtype() != DType::kF32)
    return absl::UnimplementedError("DynamicQuantizeLinear: f32 input only");
  const std::vector<int64_t> scalar;
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kU8, x.dims(), "DynamicQuantizeLinear"));
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[1], DType::kF32, scalar, "DynamicQuantizeLinear"));
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[2], DType::kU8, scalar, "DynamicQuantizeLinear"));
  double mn = 0, mx = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    mn = std::min(mn, Get(x, i));
    mx = std::max(mx, Get(x, i));
  }
  // As ONNX computes it: the range, the scale and the divisions in f32 (ONNX Runtime's kernel
  // and ONNX's reference alike; the range and its division rounded apart).
  const float range = static_cast<float>(mx) - static_cast<float>(mn);
  const float scale = range / 255.0f;
  // An infinite input makes the scale infinite and the divisions NaN (inf / inf, x + -inf): a
  // NaN saturates to 0 (a cast of NaN to u8 is undefined behaviour).
  auto saturate = [](double q) { return std::isnan(q) ? 0.0 : std::clamp(q, 0.0, 255.0); };
  const double z = scale == 0 ? 0 : saturate(RoundHalfEven(static_cast<float>(-mn) / scale));
  Set(*out[1], 0, scale);
  Set(*out[2], 0, z);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double q = scale == 0 ? z : RoundHalfEven(static_cast<float>(Get(x, i)) / scale) + z;
    Set(*out[0], i, saturate(q));
  }
  return absl::OkStatus();
}

// ---- NonMaxSuppression ----

struct NmsAttrs {
  bool center = false;  // center_point_box: [xc, yc, w, h] instead of two corners
};

absl::Status RunNms(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const NmsAttrs*>(attrs);
  if (in.size() < 2 || in[0] == nullptr || in[1] == nullptr || out.empty() || out[0] == nullptr) {
    return absl::InvalidArgumentError("NonMaxSuppression: missing input or output");
  }
  const Tensor& boxes = *in[0];
  const Tensor& scores = *in[1];
  if (boxes.rank() != 3 || boxes.dim(2) != 4 || scores.rank() != 3 ||
      scores.dim(0) != boxes.dim(0) || scores.dim(2) != boxes.dim(1)) {
    return absl::InvalidArgumentError(absl::StrCat("NonMaxSuppression: boxes ", boxes.DebugString(),
                                                   " and scores ", scores.DebugString(),
                                                   " must be [B, N, 4] and [B, C, N]"));
  }
  int64_t max_out = 0;
  double iou_threshold = 0, score_threshold = -std::numeric_limits<double>::infinity();
  if (in.size() > 2 && in[2] != nullptr && in[2]->numel() > 0) {
    // Read as the integer it is: through a double, INT64_MAX (PyTorch's export of
    // torchvision.ops.nms passes it as "no limit") rounds to 2^63, whose conversion back is
    // undefined (INT64_MIN on x86), and no box was kept.
    const Tensor& m = *in[2];
    if (m.dtype() != DType::kI64 && m.dtype() != DType::kI32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NonMaxSuppression: max_output_boxes_per_class must be i64, not ", DTypeName(m.dtype())));
    }
    max_out = m.dtype() == DType::kI64 ? m.data<int64_t>()[m.ElementOffset(0)]
                                       : m.data<int32_t>()[m.ElementOffset(0)];
  }
  if (in.size() > 3 && in[3] != nullptr && in[3]->numel() > 0) iou_threshold = Get(*in[3], 0);
  if (in.size() > 4 && in[4] != nullptr && in[4]->numel() > 0) score_threshold = Get(*in[4], 0);
  const int64_t nb = boxes.dim(0), n = boxes.dim(1), nc = scores.dim(1);
  // Corners [y1, x1, y2, x2] with y1 <= y2 and x1 <= x2.
  auto corners = [&](int64_t b, int64_t i) {
    std::array<double, 4> v;
    for (int k = 0; k < 4; ++k) v[k] = Get(boxes, (b * n + i) * 4 + k);
    if (a.center) {
      const double xc = v[0], yc = v[1], w = v[2], h = v[3];
      return std::array<double, 4>{yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2};
    }
    return std::array<double, 4>{std::min(v[0], v[2]), std::min(v[1], v[3]), std::max(v[0], v[2]),
                                 std::max(v[1], v[3])};
  };
  std::vector<int64_t> selected;  // triples
  for (int64_t b = 0; b < nb; ++b) {
    std::vector<std::array<double, 4>> box(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) box[i] = corners(b, i);
    for (int64_t c = 0; c < nc; ++c) {
      std::vector<std::pair<double, int64_t>> cand;
      for (int64_t i = 0; i < n; ++i) {
        const double sc = Get(scores, (b * nc + c) * n + i);
        if (sc > score_threshold) cand.emplace_back(sc, i);
      }
      std::stable_sort(cand.begin(), cand.end(),
                       [](const auto& x, const auto& y) { return x.first > y.first; });
      std::vector<int64_t> kept;
      for (const auto& [sc, i] : cand) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        bool keep = true;
        for (int64_t j : kept) {
          const auto& p = box[i];
          const auto& q = box[j];
          const double area_p = (p[2] - p[0]) * (p[3] - p[1]),
                       area_q = (q[2] - q[0]) * (q[3] - q[1]);
          const double ih = std::max(0.0, std::min(p[2], q[2]) - std::max(p[0], q[0]));
          const double iw = std::max(0.0, std::min(p[3], q[3]) - std::max(p[1], q[1]));
          const double inter = ih * iw;
          const double uni = area_p + area_q - inter;
          const double iou = area_p <= 0 || area_q <= 0 || uni <= 0 ? 0 : inter / uni;
          if (iou > iou_threshold) {
            keep = false;
            break;
          }
        }
        if (!keep) continue;
        kept.push_back(i);
        selected.insert(selected.end(), {b, c, i});
      }
    }
  }
  const std::vector<int64_t> dims = {static_cast<int64_t>(selected.size() / 3), 3};
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kI64, dims, "NonMaxSuppression"));
  std::copy(selected.begin(), selected.end(), out[0]->data<int64_t>());
  return absl::OkStatus();
}

// ---- Unique ----

struct UniqueAttrs {
  std::optional<int64_t> axis;
  bool sorted = true;
};

absl::Status RunUnique(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const UniqueAttrs*>(attrs);
  if (in.empty() || in[0] == nullptr || out.empty())
    return absl::InvalidArgumentError("Unique: missing input or output");
  const Tensor& x = *in[0];
  if (x.dtype() == DType::kString || x.dtype() == DType::kBool) {
    return absl::UnimplementedError(
        absl::StrCat("Unique: dtype ", DTypeName(x.dtype()), " not supported"));
  }
  // Slices along the axis (single elements without one), as doubles, row-major within a slice.
  int64_t axis = -1, count = x.numel(), inner = 1, outer = 1;
  if (a.axis) {
    DYNVM_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*a.axis, x.rank(), "Unique"));
    axis = ax;
    count = x.dim(static_cast<int>(axis));
    for (int d = 0; d < axis; ++d) outer *= x.dim(d);
    for (int d = static_cast<int>(axis) + 1; d < x.rank(); ++d) inner *= x.dim(d);
  }
  const int64_t width = a.axis ? outer * inner : 1;
  std::vector<std::vector<double>> slices(static_cast<size_t>(count),
                                          std::vector<double>(static_cast<size_t>(width)));
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (!a.axis) {
      slices[i][0] = Get(x, i);
      continue;
    }
    const int64_t o = i / (count * inner), k = (i / inner) % count, r = i % inner;
    slices[k][o * inner + r] = Get(x, i);
  }
  // Unique slices in first-occurrence order, then sorted if asked.
  std::vector<int64_t> first;  // per unique: its first slice
  std::vector<int64_t> unique_of(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    int64_t u = 0;
    while (u < static_cast<int64_t>(first.size()) && slices[first[u]] != slices[k]) ++u;
    if (u == static_cast<int64_t>(first.size())) first.push_back(k);
    unique_of[k] = u;
  }
  std::vector<int64_t> order(first.size());  // position -> first-occurrence unique id
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  if (a.sorted) {
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t p, int64_t q) { return slices[first[p]] < slices[first[q]]; });
  }
  std::vector<int64_t> position(order.size());
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<int64_t>(i);
  const int64_t nu = static_cast<int64_t>(order.size());
  std::vector<int64_t> y_dims = {nu};
  if (a.axis) {
    y_dims.assign(x.dims().begin(), x.dims().end());
    y_dims[axis] = nu;
  }
  if (out[0] != nullptr) {
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), y_dims, "Unique"));
    for (int64_t p = 0; p < nu; ++p) {
      const std::vector<double>& sl = slices[first[order[p]]];
      for (int64_t o = 0; o < (a.axis ? outer : 1); ++o) {
        for (int64_t r = 0; r < (a.axis ? inner : 1); ++r) {
          const int64_t at = a.axis ? (o * nu + p) * inner + r : p;
          Set(*out[0], at, sl[a.axis ? o * inner + r : 0]);
        }
      }
    }
  }
  const std::vector<int64_t> u_dims = {nu}, x_dims = {count};
  auto write = [&](size_t i, const std::vector<int64_t>& dims, auto value) -> absl::Status {
    if (out.size() <= i || out[i] == nullptr) return absl::OkStatus();
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[i], DType::kI64, dims, "Unique"));
    for (int64_t k = 0; k < dims[0]; ++k) out[i]->data<int64_t>()[k] = value(k);
    return absl::OkStatus();
  };
  std::vector<int64_t> counts(static_cast<size_t>(nu), 0);
  for (int64_t k = 0; k < count; ++k) ++counts[position[unique_of[k]]];
  DYNVM_RETURN_IF_ERROR(write(1, u_dims, [&](int64_t p) { return first[order[p]]; }));
  DYNVM_RETURN_IF_ERROR(write(2, x_dims, [&](int64_t k) { return position[unique_of[k]]; }));
  return write(3, u_dims, [&](int64_t p) { return counts[p]; });
}

// ---- Einsum ----

struct EinsumAttrs {
  std::string equation;
};

// Einsum by enumeration: every assignment of the equation's letters (the output's, then the
// summed ones) adds the product of the inputs' elements to the output element. "..." stands for
// the same leading dims in every term (right-aligned; a size-1 dim broadcasts). Without "->" the
// output is the letters that appear once, in alphabetical order (after the ellipsis dims).
absl::Status RunEinsum(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const EinsumAttrs*>(attrs);
  if (in.empty() || out.empty() || out[0] == nullptr)
    return absl::InvalidArgumentError("Einsum: missing input or output");
  std::string eq;
  for (char ch : a.equation) {
    if (ch != ' ') eq.push_back(ch);
  }
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(
        lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != in.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Einsum: '", a.equation, "' has ", terms.size(),
                                                   " terms for ", in.size(), " inputs"));
  }
  // Ellipsis dims become the letters '0'.. (below the alphabet, so they sort first).
  int ell = -1;
  std::vector<std::string> expanded(terms.size());
  for (size_t t = 0; t < terms.size(); ++t) {
    if (in[t] == nullptr) return absl::InvalidArgumentError("Einsum: missing input");
    const std::string& term = terms[t];
    const size_t dots = term.find("...");
    const int letters = static_cast<int>(term.size()) - (dots == std::string::npos ? 0 : 3);
    const int extra = in[t]->rank() - letters;
    if (extra < 0 || (dots == std::string::npos && extra != 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Einsum: term '", term, "' does not match ", in[t]->DebugString()));
    }
    if (dots != std::string::npos) {
      ell = std::max(ell, extra);
      std::string e;
      for (int i = 0; i < extra; ++i) e.push_back(static_cast<char>('0' + (ell - extra) + i));
      expanded[t] = term.substr(0, dots) + e + term.substr(dots + 3);
    } else {
      expanded[t] = term;
    }
  }
  // Sizes per letter.
  std::map<char, int64_t> size;
  for (size_t t = 0; t < terms.size(); ++t) {
    for (size_t i = 0; i < expanded[t].size(); ++i) {
      const char ch = expanded[t][i];
      if (!std::isalpha(static_cast<unsigned char>(ch)) &&
          !std::isdigit(static_cast<unsigned char>(ch))) {
        return absl::InvalidArgumentError(absl::StrCat("Einsum: bad equation '", a.equation, "'"));
      }
      const int64_t d = in[t]->dim(static_cast<int>(i));
      auto [it, inserted] = size.emplace(ch, d);
      if (!inserted && it->second != d) {
        if (it->second == 1 && std::isdigit(static_cast<unsigned char>(ch))) {
          it->second = d;
        } else if (!(d == 1 && std::isdigit(static_cast<unsigned char>(ch)))) {
          return absl::InvalidArgumentError(absl::StrCat("Einsum: '", std::string(1, ch),
                                                         "' has sizes ", it->second, " and ", d));
        }
      }
    }
  }
  std::string output;
  if (arrow != std::string::npos) {
    const std::string rhs = eq.substr(arrow + 2);
    const size_t dots = rhs.find("...");
    if (dots != std::string::npos) {
      std::string e;
      for (int i = 0; i < std::max(ell, 0); ++i) e.push_back(static_cast<char>('0' + i));
      output = rhs.substr(0, dots) + e + rhs.substr(dots + 3);
    } else {
      output = rhs;
    }
  } else {
    std::map<char, int> count;
    for (const std::string& e : expanded) {
      for (char ch : e) ++count[ch];
    }
    for (const auto& [ch, n] : count) {
      if (std::isdigit(static_cast<unsigned char>(ch)) || n == 1) output.push_back(ch);
    }
  }
  for (char ch : output) {
    if (!size.contains(ch))
      return absl::InvalidArgumentError(
          absl::StrCat("Einsum: output letter '", std::string(1, ch), "' is not an input's"));
  }
  std::string letters = output;
  for (const auto& [ch, d] : size) {
    if (output.find(ch) == std::string::npos) letters.push_back(ch);
  }
  std::vector<int64_t> out_dims;
  for (char ch : output) out_dims.push_back(size[ch]);
  const DType dtype = in[0]->dtype();
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], dtype, out_dims, "Einsum"));
  int64_t out_count = 1, sum_count = 1;
  for (char ch : output) out_count *= size[ch];
  for (size_t i = output.size(); i < letters.size(); ++i) sum_count *= size[letters[i]];
  // For each input: per letter position, the input's stride (0 for a broadcast size-1 dim).
  std::vector<std::vector<int64_t>> strides(in.size(), std::vector<int64_t>(letters.size(), 0));
  for (size_t t = 0; t < in.size(); ++t) {
    for (size_t i = 0; i < expanded[t].size(); ++i) {
      const size_t pos = letters.find(expanded[t][i]);
      if (in[t]->dim(static_cast<int>(i)) != 1 || size[expanded[t][i]] == 1)
        strides[t][pos] += in[t]->stride(static_cast<int>(i));
    }
  }
  std::vector<int64_t> idx(letters.size());
  for (int64_t o = 0; o < out_count; ++o) {
    double acc = 0;
    for (int64_t sidx = 0; sidx < sum_count; ++sidx) {
      int64_t r = o;
      for (int i = static_cast<int>(output.size()) - 1; i >= 0; --i) {
        idx[i] = r % size[letters[i]];
        r /= size[letters[i]];
      }
      r = sidx;
      for (int i = static_cast<int>(letters.size()) - 1; i >= static_cast<int>(output.size());
           --i) {
        idx[i] = r % size[letters[i]];
        r /= size[letters[i]];
      }
      double prod = 1;
      for (size_t t = 0; t < in.size(); ++t) {
        int64_t off = 0;
        for (size_t i = 0; i < letters.size(); ++i) off += idx[i] * strides[t][i];
        double v = 0;
        (void)DispatchNumeric(in[t]->dtype(), "Einsum", [&](auto* tag) -> absl::Status {
          using T = std::remove_pointer_t<decltype(tag)>;
          const T x = in[t]->data<T>()[off];
          if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
            v = static_cast<float>(x);
          } else {
            v = static_cast<double>(x);
          }
          return absl::OkStatus();
        });
        prod *= v;
      }
      acc += prod;
    }
    Set(*out[0], o, acc);
  }
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

void AddWindow(KernelRegistry& r, const char* op, Window kind) {
  Add(r, op, [op, kind](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() != 1 || spec.outputs.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": expected 1 input and 1 output"));
    }
    WindowAttrs a;
    a.kind = kind;
    DYNVM_ASSIGN_OR_RETURN(int64_t periodic, spec.GetInt("periodic", 1));
    a.periodic = periodic != 0;
    if (spec.outputs[0].dtype != kAnyDType) a.dtype = static_cast<DType>(spec.outputs[0].dtype);
    if (a.dtype == DType::kBool || a.dtype == DType::kString) {
      return absl::UnimplementedError(
          absl::StrCat(op, ": output type ", DTypeName(a.dtype), " not supported"));
    }
    return Make(spec, &RunWindow, a);
  });
}

}  // namespace

void RegisterMiscKernels(KernelRegistry& r) {
  AddWindow(r, "HannWindow", Window::kHann);
  AddWindow(r, "HammingWindow", Window::kHamming);
  AddWindow(r, "BlackmanWindow", Window::kBlackman);
  Add(r, "Det", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() != 1 || spec.outputs.size() != 1)
      return absl::InvalidArgumentError("Det: 1 input, 1 output");
    if (spec.inputs[0].dtype != kAnyDType && !IsFloat(static_cast<DType>(spec.inputs[0].dtype))) {
      return absl::UnimplementedError("Det: floating-point input only");
    }
    return Make(spec, &RunDet, QuantAttrs{});
  });
  for (bool quantize : {true, false}) {
    const char* op = quantize ? "QuantizeLinear" : "DequantizeLinear";
    Add(r, op, [op, quantize](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
      if (spec.inputs.size() < 2 || spec.inputs.size() > 3 || spec.outputs.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": expected 2..3 inputs and 1 output"));
      }
      QuantAttrs a;
      a.quantize = quantize;
      DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", 1));
      a.axis = axis;
      return Make(spec, &RunQuant, a);
    });
  }
  Add(r, "NonMaxSuppression",
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        if (spec.inputs.size() < 2 || spec.inputs.size() > 5 || spec.outputs.size() != 1) {
          return absl::InvalidArgumentError("NonMaxSuppression: expected 2..5 inputs and 1 output");
        }
        DYNVM_ASSIGN_OR_RETURN(int64_t center, spec.GetInt("center_point_box", 0));
        if (center != 0 && center != 1)
          return absl::InvalidArgumentError("NonMaxSuppression: center_point_box must be 0 or 1");
        NmsAttrs a;
        a.center = center == 1;
        return Make(spec, &RunNms, a);
      });
  Add(r, "Unique", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() != 1 || spec.outputs.empty() || spec.outputs.size() > 4) {
      return absl::InvalidArgumentError("Unique: expected 1 input and 1..4 outputs");
    }
    UniqueAttrs a;
    if (spec.Find("axis") != nullptr) {
      DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", 0));
      a.axis = axis;
    }
    DYNVM_ASSIGN_OR_RETURN(int64_t sorted, spec.GetInt("sorted", 1));
    a.sorted = sorted != 0;
    return Make(spec, &RunUnique, a);
  });
  Add(r, "Einsum", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.empty() || spec.outputs.size() != 1)
      return absl::InvalidArgumentError("Einsum: 1+ inputs, 1 output");
    for (const PortSpec& p : spec.inputs) {
      if (p.dtype != kAnyDType && (static_cast<DType>(p.dtype) == DType::kBool ||
                                   static_cast<DType>(p.dtype) == DType::kString)) {
        return absl::UnimplementedError("Einsum: numeric inputs only");
      }
    }
    EinsumAttrs a;
    DYNVM_ASSIGN_OR_RETURN(std::string eq, spec.GetString("equation", ""));
    if (eq.empty()) return absl::InvalidArgumentError("Einsum: equation is required");
    a.equation = eq;
    return Make(spec, &RunEinsum, a);
  });
  Add(r, "DynamicQuantizeLinear",
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        if (spec.inputs.size() != 1 || spec.outputs.size() != 3) {
          return absl::InvalidArgumentError(
              "DynamicQuantizeLinear: expected 1 input and 3 outputs");
        }
        return Make(spec, &RunDynamicQuant, QuantAttrs{});
      });
}

}  // namespace dynvm::reference
