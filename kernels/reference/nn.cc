// Reference kernels for convolution and normalization layers: Conv, ConvInteger, QLinearConv,
// ConvTranspose,
// BatchNormalization
// (inference and training mode), InstanceNormalization, LRN; and Shrink and EyeLike.
//
// Conv: X [N, C, D1..Dk], W [M, C/group, K1..Kk], optional B [M]; strides, dilations, pads or
// auto_pad (SAME_UPPER / SAME_LOWER / VALID) as for pooling; output size
// (D + pb + pe - ((K-1)*d + 1)) / s + 1. Sums accumulate in double.
// ConvTranspose: X [N, C, D...], W [C, M/group, K...]; input element i adds x * w[k] at output
// i * s + k * d - pb; output size s * (D - 1) + output_padding + (K-1)*d + 1 - pb - pe, or
// output_shape (or D * s for SAME_*), the padding then derived from it (the odd one at the end
// for SAME_UPPER, else at the beginning).
// BatchNormalization: y = scale * (x - mean) / sqrt(var + epsilon) + B per channel (axis 1);
// training_mode uses the batch's mean and (biased) variance and also returns
// running_mean = mean * momentum + batch_mean * (1 - momentum), likewise running_var (opset 6:
// is_test=0 is training mode; its saved mean and variance outputs are not supported).
// InstanceNormalization: the same with the mean and variance of each (n, c) plane.
// LRN: y = x / (bias + alpha / size * sum of x^2 over the channels c - floor((size-1)/2) ..
// c + ceil((size-1)/2))^beta.
// Shrink: x < -lambd: x + bias; x > lambd: x - bias; else 0. EyeLike: ones on diagonal k.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/channels_last.h"
#include "kernels/quant_params.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;

// Reads and writes elements as double through the dtype (floating point only).
template <typename T>
double Load(const Tensor& t, int64_t linear) {
  const T v = t.data<T>()[t.ElementOffset(linear)];
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(v);
  } else {
    return static_cast<double>(v);
  }
}

template <typename T>
void Store(Tensor& t, int64_t linear, double v) {  // t is contiguous
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    t.data<T>()[linear] = T(static_cast<float>(v));
  } else {
    t.data<T>()[linear] = static_cast<T>(v);
  }
}

template <typename T>
inline constexpr bool kIsFloatType =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Runs fn<T>() for a floating-point dtype; Unimplemented otherwise.
template <typename Fn>
absl::Status FloatDispatch(DType dtype, absl::string_view op, Fn&& fn) {
  return DispatchNumeric(dtype, op, [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!kIsFloatType<T>) {
      return absl::UnimplementedError(
          absl::StrCat(op, ": dtype ", DTypeName(dtype), " not supported"));
    } else {
      return fn(tag);
    }
  });
}

absl::Status Need(Inputs in, size_t n, Outputs out, absl::string_view op) {
  for (size_t i = 0; i < n; ++i) {
    if (i >= in.size() || in[i] == nullptr)
      return absl::InvalidArgumentError(absl::StrCat(op, ": input ", i, " is missing"));
  }
  if (out.empty() || out[0] == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(op, ": output 0 is missing"));
  return absl::OkStatus();
}

// ---- Conv ----

struct ConvAttrs {
  std::vector<int64_t> kernel, strides, pads, dilations;
  std::string auto_pad = "NOTSET";
  int64_t group = 1;
};

// Any numeric element as double, and back (rounded and saturated by the cast for integers).
double LoadAny(const Tensor& t, int64_t linear) {
  double v = 0;
  (void)DispatchNumeric(t.dtype(), "load", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (kIsFloatType<T>) {
      v = Load<T>(t, linear);
    } else {
      v = static_cast<double>(t.data<T>()[t.ElementOffset(linear)]);
    }
    return absl::OkStatus();
  });
  return v;
}

void StoreAny(Tensor& t, int64_t linear, double v) {
  (void)DispatchNumeric(t.dtype(), "store", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (kIsFloatType<T>) {
      Store<T>(t, linear, v);
    } else {
      t.data<T>()[linear] = static_cast<T>(v);
    }
    return absl::OkStatus();
  });
}

// Conv and ConvInteger: x and w read as double less their zero points (w's per output channel
// or one for all), the output written as `out_dtype`.
// `post`, when set, maps (output channel, sum) to the value stored (QLinearConv's
// requantization).
absl::Status ConvCore(const ConvAttrs& a, KernelContext& ctx, const Tensor& x, const Tensor& w,
                      const Tensor* b, Tensor* y, DType out_dtype, double x_zp, const Tensor* w_zp,
                      const std::function<double(int64_t, double)>& post = nullptr) {
  const int k = x.rank() - 2;
  if (k < 1 || w.rank() != x.rank()) {
    return absl::InvalidArgumentError(absl::StrCat("Conv: X ", x.DebugString(), " and W ",
                                                   w.DebugString(),
                                                   " must be [N, C, D...] and [M, C/group, K...]"));
  }
  const int64_t n = x.dim(0), c = x.dim(1), m = w.dim(0), g = a.group;
  if (g < 1 || c % g != 0 || m % g != 0 || w.dim(1) != c / g) {
    return absl::InvalidArgumentError(absl::StrCat("Conv: X ", x.DebugString(), " and W ",
                                                   w.DebugString(), " do not match group ", g));
  }
  if (b != nullptr && (b->rank() != 1 || b->dim(0) != m)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Conv: B must be [", m, "], got ", b->DebugString()));
  }
  if (!a.kernel.empty() && static_cast<int>(a.kernel.size()) != k) {
    return absl::InvalidArgumentError("Conv: kernel_shape does not match W");
  }
  std::vector<int64_t> in_d(k), kd(k), st(k, 1), dl(k, 1), pb(k, 0), pe(k, 0), od(k);
  for (int i = 0; i < k; ++i) {
    in_d[i] = x.dim(i + 2);
    kd[i] = w.dim(i + 2);
    if (!a.kernel.empty() && a.kernel[i] != kd[i])
      return absl::InvalidArgumentError("Conv: kernel_shape does not match W");
    if (!a.strides.empty()) st[i] = a.strides.at(i);
    if (!a.dilations.empty()) dl[i] = a.dilations.at(i);
    if (st[i] < 1 || dl[i] < 1)
      return absl::InvalidArgumentError("Conv: strides and dilations must be positive");
    const int64_t span = (kd[i] - 1) * dl[i] + 1;
    if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
      od[i] = (in_d[i] + st[i] - 1) / st[i];
      const int64_t total = std::max<int64_t>(0, (od[i] - 1) * st[i] + span - in_d[i]);
      pb[i] = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe[i] = total - pb[i];
    } else {
      if (a.auto_pad == "NOTSET" && !a.pads.empty()) {
        pb[i] = a.pads[i];
        pe[i] = a.pads[k + i];
        if (pb[i] < 0 || pe[i] < 0) return absl::InvalidArgumentError("Conv: negative pads");
      }
      const int64_t room = in_d[i] + pb[i] + pe[i] - span;
      if (room < 0)
        return absl::InvalidArgumentError("Conv: the kernel is larger than the padded input");
      od[i] = room / st[i] + 1;
    }
  }
  std::vector<int64_t> out_dims = {n, m};
  out_dims.insert(out_dims.end(), od.begin(), od.end());
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, y, out_dtype, out_dims, "Conv"));
  if (w_zp != nullptr && w_zp->numel() != 1 && w_zp->numel() != m) {
    return absl::InvalidArgumentError(
        "ConvInteger: w_zero_point must be a scalar or one per output channel");
  }
  int64_t out_plane = 1, kernel_size = 1, in_plane = 1;
  for (int i = 0; i < k; ++i) {
    out_plane *= od[i];
    kernel_size *= kd[i];
    in_plane *= in_d[i];
  }
  const int64_t cg = c / g, mg = m / g;
  {
    // Contiguous double copies of X and W.
    std::vector<double> xv(static_cast<size_t>(x.numel())), wv(static_cast<size_t>(w.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) xv[i] = LoadAny(x, i) - x_zp;
    const int64_t per_oc = m == 0 ? 0 : w.numel() / m;
    for (int64_t i = 0; i < w.numel(); ++i) {
      const double zp = w_zp == nullptr ? 0.0 : LoadAny(*w_zp, w_zp->numel() == 1 ? 0 : i / per_oc);
      wv[i] = LoadAny(w, i) - zp;
    }
    // Each kernel position's coordinates, decomposed once (not per multiply-add).
    std::vector<int64_t> o(k), ktab(static_cast<size_t>(kernel_size * k));
    for (int64_t ki = 0; ki < kernel_size; ++ki) {
      for (int64_t r = ki, i = k - 1; i >= 0; --i) {
        ktab[ki * k + i] = r % kd[i];
        r /= kd[i];
      }
    }
    for (int64_t bn = 0; bn < n; ++bn) {
      for (int64_t oc = 0; oc < m; ++oc) {
        const int64_t grp = oc / mg;
        const double bias = b != nullptr ? LoadAny(*b, oc) : 0.0;
        for (int64_t oi = 0; oi < out_plane; ++oi) {
          for (int64_t r = oi, i = k - 1; i >= 0; --i) {
            o[i] = r % od[i];
            r /= od[i];
          }
          double acc = bias;
          for (int64_t ic = 0; ic < cg; ++ic) {
            const double* xp = &xv[(bn * c + grp * cg + ic) * in_plane];
            const double* wp = &wv[(oc * cg + ic) * kernel_size];
            for (int64_t ki = 0; ki < kernel_size; ++ki) {
              const int64_t* kk = &ktab[ki * k];
              int64_t off = 0;
              bool inside = true;
              for (int i = 0; i < k && inside; ++i) {
                const int64_t p = o[i] * st[i] - pb[i] + kk[i] * dl[i];
                inside = p >= 0 && p < in_d[i];
                off = off * in_d[i] + p;
              }
              if (inside) acc += xp[off] * wp[ki];
            }
          }
          StoreAny(*y, (bn * m + oc) * out_plane + oi, post ? post(oc, acc) : acc);
        }
      }
    }
    return absl::OkStatus();
  }
}

absl::Status RunConv(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  DYNVM_RETURN_IF_ERROR(Need(in, 2, out, "Conv"));
  if (!IsFloat(in[0]->dtype()) || in[1]->dtype() != in[0]->dtype()) {
    return absl::UnimplementedError(
        absl::StrCat("Conv: dtype ", DTypeName(in[0]->dtype()), " not supported"));
  }
  return ConvCore(*static_cast<const ConvAttrs*>(attrs), ctx, *in[0], *in[1],
                  in.size() > 2 ? in[2] : nullptr, out[0], in[0]->dtype(), 0, nullptr);
}

// ConvInteger: (x - x_zero_point) * (w - w_zero_point) summed exactly (in double: integer
// products of 8-bit values stay exact), written as i32.
absl::Status RunConvInteger(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  DYNVM_RETURN_IF_ERROR(Need(in, 2, out, "ConvInteger"));
  for (int i = 0; i < 2; ++i) {
    if (in[i]->dtype() != DType::kU8 && in[i]->dtype() != DType::kI8) {
      return absl::UnimplementedError("ConvInteger: inputs must be u8 or i8");
    }
  }
  const Tensor* x_zp = in.size() > 2 ? in[2] : nullptr;
  const Tensor* w_zp = in.size() > 3 ? in[3] : nullptr;
  if (x_zp != nullptr && x_zp->numel() != 1)
    return absl::InvalidArgumentError("ConvInteger: x_zero_point must be a scalar");
  if (x_zp != nullptr)
    DYNVM_RETURN_IF_ERROR(CheckZeroPoint(*x_zp, in[0]->dtype(), "ConvInteger: x_zero_point"));
  if (w_zp != nullptr)
    DYNVM_RETURN_IF_ERROR(CheckZeroPoint(*w_zp, in[1]->dtype(), "ConvInteger: w_zero_point"));
  return ConvCore(*static_cast<const ConvAttrs*>(attrs), ctx, *in[0], *in[1], nullptr, out[0],
                  DType::kI32, x_zp != nullptr ? LoadAny(*x_zp, 0) : 0.0, w_zp);
}

// QLinearConv: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point[, B]:
// y = saturate(round_half_even((ConvInteger + B) * x_scale * w_scale / y_scale) + y_zero_point),
// w_scale and w_zero_point per tensor or per output channel, B i32 (requantized in double).
// "channels_last_in" / "channels_last_out" (kernels/channels_last.h): x / y hold channels-last
// data, converted from and to here.
struct QLinearConvAttrs : ConvAttrs {
  bool channels_last_in = false, channels_last_out = false;
};

absl::Status RunQLinearConv(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  DYNVM_RETURN_IF_ERROR(Need(in, 8, out, "QLinearConv"));
  const auto& qa = *static_cast<const QLinearConvAttrs*>(attrs);
  const Tensor &x_in = *in[0], &w = *in[3], &y_zp = *in[7];
  for (const Tensor* t : {&x_in, &w, &y_zp}) {
    if (t->dtype() != DType::kU8 && t->dtype() != DType::kI8) {
      return absl::InvalidArgumentError(absl::StrCat(
          "QLinearConv: x, w and y_zero_point must be u8 or i8, got ", t->DebugString()));
    }
  }
  const int64_t m = w.rank() >= 1 ? w.dim(0) : 0;
  for (auto [idx, name, channels] : {std::tuple<int, const char*, int64_t>{1, "x_scale", 1},
                                     {2, "x_zero_point", 1},
                                     {4, "w_scale", m},
                                     {5, "w_zero_point", m},
                                     {6, "y_scale", 1},
                                     {7, "y_zero_point", 1}}) {
    const std::string what = absl::StrCat("QLinearConv: ", name);
    const Tensor& t = *in[idx];
    if (t.rank() > 1) return absl::InvalidArgumentError(absl::StrCat(what, " must be 0-D or 1-D"));
    DYNVM_RETURN_IF_ERROR(CheckQuantLength(t.numel(), channels, what));
    if (idx == 1 || idx == 4 || idx == 6) {
      DYNVM_RETURN_IF_ERROR(CheckQuantScale(t, what));
    } else {
      DYNVM_RETURN_IF_ERROR(CheckZeroPoint(t,
                                           idx == 2   ? x_in.dtype()
                                           : idx == 5 ? w.dtype()
                                                      : y_zp.dtype(),
                                           what));
    }
  }
  const Tensor* bias = in.size() > 8 ? in[8] : nullptr;
  if (bias != nullptr && bias->dtype() != DType::kI32) {
    return absl::InvalidArgumentError(
        absl::StrCat("QLinearConv: B must be i32, got ", bias->DebugString()));
  }
  Tensor plain_x;
  if (qa.channels_last_in) {
    DYNVM_ASSIGN_OR_RETURN(plain_x, PermuteChannels8(x_in, false));
  }
  const Tensor& x = qa.channels_last_in ? plain_x : x_in;
  const Tensor& ws = *in[4];
  const double xs = LoadAny(*in[1], 0), ys = LoadAny(*in[6], 0), yz = LoadAny(y_zp, 0);
  const auto range = QuantRange(y_zp.dtype());
  const double lo = range.first, hi = range.second;
  auto post = [&](int64_t oc, double acc) {
    const double s = xs * LoadAny(ws, ws.numel() == 1 ? 0 : oc) / ys;
    return std::clamp(std::nearbyint(acc * s) + yz, lo, hi);
  };
  DYNVM_RETURN_IF_ERROR(
      ConvCore(qa, ctx, x, w, bias, out[0], y_zp.dtype(), LoadAny(*in[2], 0), in[5], post));
  if (!qa.channels_last_out) return absl::OkStatus();
  DYNVM_ASSIGN_OR_RETURN(Tensor cl, PermuteChannels8(*out[0], true));
  std::memcpy(out[0]->raw_data(), cl.raw_data(), static_cast<size_t>(cl.nbytes()));
  return absl::OkStatus();
}

// ---- ConvTranspose ----

struct ConvTransposeAttrs : ConvAttrs {
  std::vector<int64_t> output_padding, output_shape;
};

absl::Status RunConvTranspose(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const ConvTransposeAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(Need(in, 2, out, "ConvTranspose"));
  const Tensor& x = *in[0];
  const Tensor& w = *in[1];
  const Tensor* b = in.size() > 2 ? in[2] : nullptr;
  const int k = x.rank() - 2;
  const int64_t g = a.group;
  if (k < 1 || w.rank() != x.rank() || g < 1 || x.dim(1) != w.dim(0) || x.dim(1) % g != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ConvTranspose: X ", x.DebugString(), " and W ",
                                                   w.DebugString(),
                                                   " must be [N, C, D...] and [C, M/group, K...]"));
  }
  const int64_t n = x.dim(0), c = x.dim(1), mg = w.dim(1), m = mg * g, cg = c / g;
  if (b != nullptr && (b->rank() != 1 || b->dim(0) != m)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ConvTranspose: B must be [", m, "], got ", b->DebugString()));
  }
  auto at = [&](const std::vector<int64_t>& v, int i, int64_t def) {
    return v.empty() ? def : v.at(i);
  };
  std::vector<int64_t> in_d(k), kd(k), st(k), dl(k), pb(k), pe(k), od(k);
  for (int i = 0; i < k; ++i) {
    in_d[i] = x.dim(i + 2);
    kd[i] = w.dim(i + 2);
    if (!a.kernel.empty() && a.kernel.at(i) != kd[i])
      return absl::InvalidArgumentError("ConvTranspose: kernel_shape does not match W");
    st[i] = at(a.strides, i, 1);
    dl[i] = at(a.dilations, i, 1);
    if (st[i] < 1 || dl[i] < 1)
      return absl::InvalidArgumentError("ConvTranspose: strides and dilations must be positive");
    const int64_t span = (kd[i] - 1) * dl[i] + 1;
    const int64_t opad = at(a.output_padding, i, 0);
    const bool same = a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER";
    if (!a.output_shape.empty() || same) {
      od[i] = !a.output_shape.empty() ? a.output_shape.at(a.output_shape.size() - k + i)
                                      : in_d[i] * st[i];
      // Negative when output_shape asks for more than the kernel covers: the extra positions
      // (floor division) come at the end and stay zero (plus the bias).
      const int64_t total = st[i] * (in_d[i] - 1) + opad + span - od[i];
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      if (a.auto_pad == "SAME_UPPER") {
        pb[i] = half;
        pe[i] = total - half;
      } else {
        pb[i] = total - half;
        pe[i] = half;
      }
    } else {
      pb[i] = a.auto_pad == "NOTSET" ? at(a.pads, i, 0) : 0;
      pe[i] = a.auto_pad == "NOTSET" ? at(a.pads, k + i, 0) : 0;
      od[i] = st[i] * (in_d[i] - 1) + opad + span - pb[i] - pe[i];
    }
    if (od[i] < 0) return absl::InvalidArgumentError("ConvTranspose: negative output size");
  }
  std::vector<int64_t> out_dims = {n, m};
  out_dims.insert(out_dims.end(), od.begin(), od.end());
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), out_dims, "ConvTranspose"));
  int64_t out_plane = 1, kernel_size = 1, in_plane = 1;
  for (int i = 0; i < k; ++i) {
    out_plane *= od[i];
    kernel_size *= kd[i];
    in_plane *= in_d[i];
  }
  return FloatDispatch(x.dtype(), "ConvTranspose", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    std::vector<double> y(static_cast<size_t>(n * m * out_plane), 0.0);
    std::vector<int64_t> p(k), kk(k);
    for (int64_t bn = 0; bn < n; ++bn) {
      for (int64_t ic = 0; ic < c; ++ic) {
        const int64_t grp = ic / cg;
        for (int64_t ii = 0; ii < in_plane; ++ii) {
          for (int64_t r = ii, i = k - 1; i >= 0; --i) {
            p[i] = r % in_d[i];
            r /= in_d[i];
          }
          const double xv = Load<T>(x, (bn * c + ic) * in_plane + ii);
          for (int64_t ki = 0; ki < kernel_size; ++ki) {
            for (int64_t r = ki, i = k - 1; i >= 0; --i) {
              kk[i] = r % kd[i];
              r /= kd[i];
            }
            int64_t off = 0;
            bool inside = true;
            for (int i = 0; i < k && inside; ++i) {
              const int64_t o = p[i] * st[i] + kk[i] * dl[i] - pb[i];
              inside = o >= 0 && o < od[i];
              off = off * od[i] + o;
            }
            if (!inside) continue;
            for (int64_t oc = 0; oc < mg; ++oc) {
              const double wv = Load<T>(w, (ic * mg + oc) * kernel_size + ki);
              y[(bn * m + grp * mg + oc) * out_plane + off] += xv * wv;
            }
          }
        }
      }
    }
    for (int64_t i = 0; i < n * m * out_plane; ++i) {
      const double bias = b != nullptr ? Load<T>(*b, (i / out_plane) % m) : 0.0;
      Store<T>(*out[0], i, y[i] + bias);
    }
    return absl::OkStatus();
  });
}

// ---- BatchNormalization, InstanceNormalization ----

struct NormAttrs {
  float epsilon = 1e-5f;
  float momentum = 0.9f;
  bool training = false;
};

absl::Status RunBatchNorm(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const NormAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(Need(in, 5, out, "BatchNormalization"));
  const Tensor& x = *in[0];
  if (x.rank() < 2) return absl::InvalidArgumentError("BatchNormalization: X must be [N, C, ...]");
  const int64_t n = x.dim(0), c = x.dim(1), plane = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
  for (int i = 1; i < 5; ++i) {
    if (in[i]->rank() != 1 || in[i]->dim(0) != c || in[i]->dtype() != in[1]->dtype()) {
      return absl::InvalidArgumentError(absl::StrCat("BatchNormalization: input ", i, " must be [",
                                                     c, "], got ", in[i]->DebugString()));
    }
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), x.dims(), "BatchNormalization"));
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i] == nullptr) continue;
    if (!a.training)
      return absl::InvalidArgumentError(
          "BatchNormalization: running statistics need training_mode");
    const std::vector<int64_t> cdims = {c};
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[i], in[1]->dtype(), cdims, "BatchNormalization"));
  }
  return FloatDispatch(x.dtype(), "BatchNormalization", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    return FloatDispatch(in[1]->dtype(), "BatchNormalization", [&](auto* ptag) -> absl::Status {
      using P = std::remove_pointer_t<decltype(ptag)>;
      for (int64_t ch = 0; ch < c; ++ch) {
        double mean = Load<P>(*in[3], ch), var = Load<P>(*in[4], ch);
        if (a.training) {
          double sum = 0, sq = 0;
          for (int64_t b = 0; b < n; ++b) {
            for (int64_t i = 0; i < plane; ++i) sum += Load<T>(x, (b * c + ch) * plane + i);
          }
          const double count = static_cast<double>(n * plane);
          const double bm = count > 0 ? sum / count : 0;
          for (int64_t b = 0; b < n; ++b) {
            for (int64_t i = 0; i < plane; ++i) {
              const double dv = Load<T>(x, (b * c + ch) * plane + i) - bm;
              sq += dv * dv;
            }
          }
          const double bv = count > 0 ? sq / count : 0;
          if (out.size() > 1 && out[1] != nullptr)
            Store<P>(*out[1], ch, mean * a.momentum + bm * (1 - a.momentum));
          if (out.size() > 2 && out[2] != nullptr)
            Store<P>(*out[2], ch, var * a.momentum + bv * (1 - a.momentum));
          mean = bm;
          var = bv;
        }
        const double scale = Load<P>(*in[1], ch) / std::sqrt(var + a.epsilon),
                     bias = Load<P>(*in[2], ch);
        for (int64_t b = 0; b < n; ++b) {
          for (int64_t i = 0; i < plane; ++i) {
            const int64_t at = (b * c + ch) * plane + i;
            Store<T>(*out[0], at, (Load<T>(x, at) - mean) * scale + bias);
          }
        }
      }
      return absl::OkStatus();
    });
  });
}

absl::Status RunInstanceNorm(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const NormAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(Need(in, 3, out, "InstanceNormalization"));
  const Tensor& x = *in[0];
  if (x.rank() < 3)
    return absl::InvalidArgumentError("InstanceNormalization: X must be [N, C, D...]");
  const int64_t n = x.dim(0), c = x.dim(1), plane = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
  for (int i = 1; i < 3; ++i) {
    if (in[i]->rank() != 1 || in[i]->dim(0) != c || in[i]->dtype() != x.dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("InstanceNormalization: input ", i, " must be [", c, "]"));
    }
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), x.dims(), "InstanceNormalization"));
  return FloatDispatch(x.dtype(), "InstanceNormalization", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    for (int64_t p = 0; p < n * c; ++p) {
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < plane; ++i) sum += Load<T>(x, p * plane + i);
      const double mean = plane > 0 ? sum / static_cast<double>(plane) : 0;
      for (int64_t i = 0; i < plane; ++i) {
        const double dv = Load<T>(x, p * plane + i) - mean;
        sq += dv * dv;
      }
      const double var = plane > 0 ? sq / static_cast<double>(plane) : 0;
      const int64_t ch = p % c;
      const double scale = Load<T>(*in[1], ch) / std::sqrt(var + a.epsilon),
                   bias = Load<T>(*in[2], ch);
      for (int64_t i = 0; i < plane; ++i) {
        Store<T>(*out[0], p * plane + i, (Load<T>(x, p * plane + i) - mean) * scale + bias);
      }
    }
    return absl::OkStatus();
  });
}

// ---- GroupNormalization ----

// GroupNormalization (opsets 18, 21): the mean and variance of each (n, group) of C / num_groups
// channels, then scale and bias per channel (opset 21: [C]) or, with group_scale = 1 (opset 18,
// set at import), per group ([num_groups]). Sums in double (stash_type is always met).
struct GroupNormAttrs {
  float epsilon = 1e-5f;
  int64_t groups = 1;
  bool group_scale = false;
};

absl::Status RunGroupNorm(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const GroupNormAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(Need(in, 3, out, "GroupNormalization"));
  const Tensor& x = *in[0];
  if (x.rank() < 2) return absl::InvalidArgumentError("GroupNormalization: X must be [N, C, ...]");
  const int64_t n = x.dim(0), c = x.dim(1), plane = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
  if (c % a.groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GroupNormalization: ", c, " channels do not split into ", a.groups, " groups"));
  }
  const int64_t per = c / a.groups, params = a.group_scale ? a.groups : c;
  for (int i = 1; i < 3; ++i) {
    if (in[i]->rank() != 1 || in[i]->dim(0) != params || in[i]->dtype() != x.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat("GroupNormalization: input ", i, " must be ",
                                                     DTypeName(x.dtype()), "[", params, "]"));
    }
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), x.dims(), "GroupNormalization"));
  return FloatDispatch(x.dtype(), "GroupNormalization", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    const int64_t size = per * plane;
    for (int64_t g = 0; g < n * a.groups; ++g) {
      const int64_t base = g * size;
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < size; ++i) sum += Load<T>(x, base + i);
      const double mean = size > 0 ? sum / static_cast<double>(size) : 0;
      for (int64_t i = 0; i < size; ++i) {
        const double dv = Load<T>(x, base + i) - mean;
        sq += dv * dv;
      }
      const double inv = 1 / std::sqrt((size > 0 ? sq / static_cast<double>(size) : 0) + a.epsilon);
      for (int64_t i = 0; i < size; ++i) {
        const int64_t p = a.group_scale ? g % a.groups : (g % a.groups) * per + i / plane;
        Store<T>(*out[0], base + i,
                 (Load<T>(x, base + i) - mean) * inv * Load<T>(*in[1], p) + Load<T>(*in[2], p));
      }
    }
    return absl::OkStatus();
  });
}

// ---- RMSNormalization (opset 23) ----

// Y = X / sqrt(mean(X^2 over [axis, rank)) + epsilon) * scale, scale broadcasting (right-aligned)
// to the normalized dims. Sums in double (stash_type is always met).
struct RmsNormAttrs {
  int64_t axis = -1;
  float epsilon = 1e-5f;
};

// The element of `scale` each of the `inner` normalized elements reads.
absl::StatusOr<std::vector<int64_t>> BroadcastOffsets(const Tensor& scale, const Tensor& x,
                                                      int axis) {
  const int r = x.rank(), k = r - axis;
  if (scale.rank() > k) {
    return absl::InvalidArgumentError(absl::StrCat("RMSNormalization: scale ", scale.DebugString(),
                                                   " has more dims than the ", k,
                                                   " normalized ones"));
  }
  std::vector<int64_t> stride(k, 0);  // of scale, per normalized dim (0: broadcast)
  int64_t s = 1, inner = 1;
  for (int d = k - 1; d >= 0; --d) {
    const int sd = scale.rank() - (k - d);
    const int64_t n = x.dim(axis + d);
    inner *= n;
    if (sd < 0) continue;
    if (scale.dim(sd) != n && scale.dim(sd) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("RMSNormalization: scale ",
                                                     scale.DebugString(),
                                                     " does not broadcast to the normalized dims"));
    }
    stride[d] = scale.dim(sd) == 1 ? 0 : s;
    s *= scale.dim(sd);
  }
  std::vector<int64_t> off(inner);
  for (int64_t j = 0; j < inner; ++j) {
    int64_t rest = j, o = 0;
    for (int d = k - 1; d >= 0; --d) {
      const int64_t n = x.dim(axis + d);
      o += (rest % n) * stride[d];
      rest /= n;
    }
    off[j] = o;
  }
  return off;
}

absl::Status RunRmsNormalization(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const RmsNormAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(Need(in, 2, out, "RMSNormalization"));
  const Tensor& x = *in[0];
  const Tensor& scale = *in[1];
  const int r = x.rank();
  const int64_t axis = a.axis < 0 ? a.axis + r : a.axis;
  if (axis < 0 || axis >= r) {
    return absl::InvalidArgumentError(
        absl::StrCat("RMSNormalization: axis ", a.axis, " is out of range for rank ", r));
  }
  if (scale.dtype() != x.dtype()) {
    return absl::UnimplementedError("RMSNormalization: scale must have X's dtype");
  }
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> off,
                         BroadcastOffsets(scale, x, static_cast<int>(axis)));
  const int64_t inner = static_cast<int64_t>(off.size());
  const int64_t outer = inner == 0 ? 0 : x.numel() / inner;
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), x.dims(), "RMSNormalization"));
  return FloatDispatch(x.dtype(), "RMSNormalization", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    for (int64_t o = 0; o < outer; ++o) {
      double sq = 0;
      for (int64_t j = 0; j < inner; ++j) {
        const double v = Load<T>(x, o * inner + j);
        sq += v * v;
      }
      const double inv = 1 / std::sqrt(sq / static_cast<double>(inner) + a.epsilon);
      for (int64_t j = 0; j < inner; ++j) {
        Store<T>(*out[0], o * inner + j, Load<T>(x, o * inner + j) * inv * Load<T>(scale, off[j]));
      }
    }
    return absl::OkStatus();
  });
}

// ---- RotaryEmbedding (opset 23) ----

// X [B, H, S, D] or [B, S, H*D] (num_heads given); cos and sin [P, R/2] read at position_ids
// [B, S], or [B, S, R/2] without them. The first R = rotary_embedding_dim (0: D) features of each
// head rotate: pairs (i, i + R/2), or (2i, 2i + 1) with interleaved; the rest pass through.
struct RotaryAttrs {
  bool interleaved = false;
  int64_t num_heads = 0;
  int64_t rotary_dim = 0;
};

struct RotaryGeometry {
  int64_t b = 0, h = 0, s = 0, d = 0, r = 0;
  bool heads_first = true;  // 4-D [B, H, S, D]; else 3-D [B, S, H*D]
  // The element offset of (batch, head, position, feature) in X and Y.
  int64_t At(int64_t bi, int64_t hi, int64_t si, int64_t f) const {
    return heads_first ? ((bi * h + hi) * s + si) * d + f : ((bi * s + si) * h + hi) * d + f;
  }
};

absl::StatusOr<RotaryGeometry> RotaryShape(const RotaryAttrs& a, const Tensor& x) {
  RotaryGeometry g;
  if (x.rank() == 4) {
    g = {x.dim(0), x.dim(1), x.dim(2), x.dim(3), 0, true};
  } else if (x.rank() == 3 && a.num_heads > 0 && x.dim(2) % a.num_heads == 0) {
    g = {x.dim(0), a.num_heads, x.dim(1), x.dim(2) / a.num_heads, 0, false};
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "RotaryEmbedding: X must be [B, H, S, D], or [B, S, H*D] with num_heads dividing H*D; got ",
        x.DebugString(), " with num_heads ", a.num_heads));
  }
  g.r = a.rotary_dim == 0 ? g.d : a.rotary_dim;
  if (g.r % 2 != 0 || g.r > g.d) {
    return absl::InvalidArgumentError(absl::StrCat("RotaryEmbedding: rotary_embedding_dim ", g.r,
                                                   " must be even and at most ", g.d));
  }
  return g;
}

// The cache row of (batch, position): its element offset in cos and sin.
// The cache row offsets of each (batch, position), g.b g.s of them, into `rows`.
absl::Status RotaryRows(const RotaryGeometry& g, const Tensor& cos, const Tensor* pos,
                        int64_t* rows) {
  const int64_t half = g.r / 2;
  if (pos == nullptr) {
    if (cos.rank() != 3 || cos.dim(0) != g.b || cos.dim(1) != g.s || cos.dim(2) < half) {
      return absl::InvalidArgumentError(
          absl::StrCat("RotaryEmbedding: without position_ids the caches must be [", g.b, ", ", g.s,
                       ", >=", half, "], got ", cos.DebugString()));
    }
    for (int64_t i = 0; i < g.b * g.s; ++i) rows[i] = i * cos.dim(2);
    return absl::OkStatus();
  }
  if (cos.rank() != 2 || cos.dim(1) < half || pos->rank() != 2 || pos->dim(0) != g.b ||
      pos->dim(1) != g.s) {
    return absl::InvalidArgumentError(
        absl::StrCat("RotaryEmbedding: the caches must be [P, >=", half, "] and position_ids [",
                     g.b, ", ", g.s, "]; got ", cos.DebugString(), " and ", pos->DebugString()));
  }
  for (int64_t i = 0; i < g.b * g.s; ++i) {
    const auto p = static_cast<int64_t>(LoadAny(*pos, i));
    if (p < 0 || p >= cos.dim(0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("RotaryEmbedding: position ", p, " is outside the caches' ", cos.dim(0)));
    }
    rows[i] = p * cos.dim(1);
  }
  return absl::OkStatus();
}

absl::Status RunRotaryEmbedding(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const RotaryAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(Need(in, 3, out, "RotaryEmbedding"));
  const Tensor& x = *in[0];
  const Tensor& cos = *in[1];
  const Tensor& sin = *in[2];
  const Tensor* pos = in.size() > 3 ? in[3] : nullptr;
  DYNVM_ASSIGN_OR_RETURN(RotaryGeometry g, RotaryShape(a, x));
  if (cos.dtype() != x.dtype() || sin.dtype() != x.dtype() || cos.dims() != sin.dims()) {
    return absl::InvalidArgumentError("RotaryEmbedding: cos and sin must match, in X's dtype");
  }
  // The rows in the site's workspace: a decode step's call allocates nothing.
  DYNVM_ASSIGN_OR_RETURN(
      void* ws,
      ctx.Workspace(static_cast<size_t>(std::max<int64_t>(g.b * g.s, 1)) * sizeof(int64_t)));
  auto* rows = static_cast<int64_t*>(ws);
  DYNVM_RETURN_IF_ERROR(RotaryRows(g, cos, pos, rows));
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), x.dims(), "RotaryEmbedding"));
  const int64_t half = g.r / 2;
  return FloatDispatch(x.dtype(), "RotaryEmbedding", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    for (int64_t bi = 0; bi < g.b; ++bi) {
      for (int64_t hi = 0; hi < g.h; ++hi) {
        for (int64_t si = 0; si < g.s; ++si) {
          const int64_t row = rows[bi * g.s + si];
          for (int64_t i = 0; i < half; ++i) {
            const int64_t f1 = a.interleaved ? 2 * i : i, f2 = a.interleaved ? 2 * i + 1 : i + half;
            const double c = Load<T>(cos, row + i), sn = Load<T>(sin, row + i);
            const double x1 = Load<T>(x, g.At(bi, hi, si, f1)),
                         x2 = Load<T>(x, g.At(bi, hi, si, f2));
            Store<T>(*out[0], g.At(bi, hi, si, f1), c * x1 - sn * x2);
            Store<T>(*out[0], g.At(bi, hi, si, f2), sn * x1 + c * x2);
          }
          for (int64_t f = g.r; f < g.d; ++f) {
            Store<T>(*out[0], g.At(bi, hi, si, f), Load<T>(x, g.At(bi, hi, si, f)));
          }
        }
      }
    }
    return absl::OkStatus();
  });
}

// ---- AffineGrid (opset 20) ----

// theta [N, 2, 3] and size (N, C, H, W) -> grid [N, H, W, 2]; theta [N, 3, 4] and size
// (N, C, D, H, W) -> [N, D, H, W, 3]: theta times the normalized coordinates (x, y[, z], 1) of
// each output position, x along the last dim; -1 and 1 the centers of the corner pixels with
// align_corners, their outer edges without.
struct AffineGridAttrs {
  bool align_corners = false;
};

double AffineBase(int64_t i, int64_t n, bool align_corners) {
  if (align_corners) return n <= 1 ? 0.0 : -1.0 + 2.0 * static_cast<double>(i) / (n - 1);
  return (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(n) - 1.0;
}

absl::Status RunAffineGrid(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const AffineGridAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(Need(in, 2, out, "AffineGrid"));
  const Tensor& theta = *in[0];
  const Tensor& size_t_ = *in[1];
  const int64_t k = size_t_.numel() - 2;  // spatial dims: 2 or 3
  if ((k != 2 && k != 3) || theta.rank() != 3 || theta.dim(1) != k || theta.dim(2) != k + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AffineGrid: theta must be [N, 2, 3] with a size of 4 values or [N, 3, 4] with 5; got ",
        theta.DebugString(), " and ", size_t_.DebugString()));
  }
  std::vector<int64_t> size(size_t_.numel());
  for (int64_t i = 0; i < size_t_.numel(); ++i) size[i] = static_cast<int64_t>(LoadAny(size_t_, i));
  if (size[0] != theta.dim(0)) {
    return absl::InvalidArgumentError("AffineGrid: size[0] must be theta's batch");
  }
  Dims dims = {size[0]};
  int64_t points = 1;
  for (int64_t d = 0; d < k; ++d) {
    if (size[2 + d] < 0) return absl::InvalidArgumentError("AffineGrid: negative size");
    dims.push_back(size[2 + d]);
    points *= size[2 + d];
  }
  dims.push_back(k);
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], theta.dtype(), dims, "AffineGrid"));
  return FloatDispatch(theta.dtype(), "AffineGrid", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    for (int64_t n = 0; n < size[0]; ++n) {
      for (int64_t p = 0; p < points; ++p) {
        // The normalized coordinates, the last spatial dim first (x, y[, z]).
        double coord[4] = {0, 0, 0, 1};
        int64_t rest = p;
        for (int64_t d = k - 1; d >= 0; --d) {
          const int64_t extent = size[2 + d];
          coord[k - 1 - d] = AffineBase(rest % extent, extent, a.align_corners);
          rest /= extent;
        }
        for (int64_t row = 0; row < k; ++row) {
          double v = Load<T>(theta, (n * k + row) * (k + 1) + k);
          for (int64_t col = 0; col < k; ++col)
            v += Load<T>(theta, (n * k + row) * (k + 1) + col) * coord[col];
          Store<T>(*out[0], (n * points + p) * k + row, v);
        }
      }
    }
    return absl::OkStatus();
  });
}

// ---- LRN ----

struct LrnAttrs {
  float alpha = 1e-4f, beta = 0.75f, bias = 1.0f;
  int64_t size = 1;
};

absl::Status RunLrn(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const LrnAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(Need(in, 1, out, "LRN"));
  const Tensor& x = *in[0];
  if (x.rank() < 2) return absl::InvalidArgumentError("LRN: X must be [N, C, ...]");
  const int64_t n = x.dim(0), c = x.dim(1), plane = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), x.dims(), "LRN"));
  const int64_t before = (a.size - 1) / 2, after = a.size - 1 - before;
  return FloatDispatch(x.dtype(), "LRN", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t ch = 0; ch < c; ++ch) {
        for (int64_t i = 0; i < plane; ++i) {
          double sq = 0;
          for (int64_t j = std::max<int64_t>(0, ch - before); j <= std::min(c - 1, ch + after);
               ++j) {
            const double v = Load<T>(x, (b * c + j) * plane + i);
            sq += v * v;
          }
          const int64_t at = (b * c + ch) * plane + i;
          Store<T>(*out[0], at,
                   Load<T>(x, at) /
                       std::pow(a.bias + a.alpha / static_cast<double>(a.size) * sq, a.beta));
        }
      }
    }
    return absl::OkStatus();
  });
}

// ---- Shrink, EyeLike ----

struct ShrinkAttrs {
  float bias = 0, lambd = 0.5f;
};

absl::Status RunShrink(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const ShrinkAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(Need(in, 1, out, "Shrink"));
  const Tensor& x = *in[0];
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), x.dims(), "Shrink"));
  return DispatchNumeric(x.dtype(), "Shrink", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (std::is_same_v<T, bool>) {
      return absl::UnimplementedError("Shrink: dtype bool not supported");
    } else {
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double v = Load<T>(x, i);
        const double y = v < -a.lambd ? v + a.bias : v > a.lambd ? v - a.bias : 0.0;
        Store<T>(*out[0], i, y);
      }
      return absl::OkStatus();
    }
  });
}

struct EyeAttrs {
  int64_t k = 0;
  std::optional<DType> dtype;
};

absl::Status RunEyeLike(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const EyeAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(Need(in, 1, out, "EyeLike"));
  const Tensor& x = *in[0];
  if (x.rank() != 2)
    return absl::InvalidArgumentError(
        absl::StrCat("EyeLike: input must be 2-D, got ", x.DebugString()));
  const DType dtype = a.dtype.value_or(x.dtype());
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], dtype, x.dims(), "EyeLike"));
  return DispatchNumeric(dtype, "EyeLike", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    T* py = out[0]->data<T>();
    const int64_t rows = x.dim(0), cols = x.dim(1);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
          py[i * cols + j] = T(j - i == a.k ? 1.0f : 0.0f);
        } else {
          py[i * cols + j] = static_cast<T>(j - i == a.k ? 1 : 0);
        }
      }
    }
    return absl::OkStatus();
  });
}

// ---- registration ----

template <typename A>
void AddKernel(KernelRegistry& r, const char* op, size_t min_in, size_t max_in, size_t max_out,
               FunctionKernel::RunFn run,
               std::function<absl::StatusOr<A>(const KernelSpec&)> attrs) {
  r.Register(KernelRegistration{
      "", op, Device::kCPU, "reference", kReferencePriority,
      [op, min_in, max_in, max_out, run,
       attrs](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        if (spec.inputs.size() < min_in || spec.inputs.size() > max_in || spec.outputs.empty() ||
            spec.outputs.size() > max_out) {
          return absl::InvalidArgumentError(absl::StrCat(op, ": expected ", min_in, "..", max_in,
                                                         " inputs and 1..", max_out, " outputs"));
        }
        DYNVM_ASSIGN_OR_RETURN(A a, attrs(spec));
        return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), run,
                                                std::make_shared<const A>(std::move(a)));
      }});
}

absl::StatusOr<NormAttrs> GetNormAttrs(const KernelSpec& spec) {
  NormAttrs a;
  DYNVM_ASSIGN_OR_RETURN(float eps, spec.GetFloat("epsilon", 1e-5f));
  a.epsilon = eps;
  DYNVM_ASSIGN_OR_RETURN(float momentum, spec.GetFloat("momentum", 0.9f));
  a.momentum = momentum;
  absl::StatusOr<int64_t> spatial = spec.GetInt("spatial", 1);
  if (!spatial.ok()) return spatial.status();
  if (*spatial != 1)
    return absl::UnimplementedError(absl::StrCat(spec.op, ": spatial=0 is not supported"));
  absl::StatusOr<int64_t> training = spec.GetInt("training_mode", 0);
  if (!training.ok()) return training.status();
  a.training = *training != 0;
  // Opset 6: is_test=0 (the default there) is training mode.
  if (spec.Find("is_test") != nullptr) {
    absl::StatusOr<int64_t> is_test = spec.GetInt("is_test", 1);
    if (!is_test.ok()) return is_test.status();
    a.training = *is_test == 0;
  }
  return a;
}

// The attributes Conv, ConvInteger and ConvTranspose share, checked against each other.
absl::Status ReadConvAttrs(const KernelSpec& spec, const char* op, ConvAttrs& a) {
  for (auto [name, field] :
       {std::pair<const char*, std::vector<int64_t>*>{"kernel_shape", &a.kernel},
        {"strides", &a.strides},
        {"pads", &a.pads},
        {"dilations", &a.dilations}}) {
    DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> v, spec.GetInts(name));
    *field = v;
  }
  DYNVM_ASSIGN_OR_RETURN(std::string ap, spec.GetString("auto_pad", "NOTSET"));
  a.auto_pad = ap.empty() ? "NOTSET" : ap;
  if (a.auto_pad != "NOTSET" && a.auto_pad != "VALID" && a.auto_pad != "SAME_UPPER" &&
      a.auto_pad != "SAME_LOWER") {
    return absl::InvalidArgumentError(absl::StrCat(op, ": unknown auto_pad '", a.auto_pad, "'"));
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t group, spec.GetInt("group", 1));
  a.group = group;
  const size_t k = a.kernel.size();
  if (k != 0 && ((!a.strides.empty() && a.strides.size() != k) ||
                 (!a.dilations.empty() && a.dilations.size() != k) ||
                 (!a.pads.empty() && a.pads.size() != 2 * k))) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": strides, dilations and pads must match kernel_shape"));
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterNnKernels(KernelRegistry& r) {
  auto conv_attrs = [](const KernelSpec& spec) -> absl::StatusOr<ConvAttrs> {
    ConvAttrs a;
    DYNVM_RETURN_IF_ERROR(ReadConvAttrs(spec, "Conv", a));
    return a;
  };
  AddKernel<ConvAttrs>(r, "Conv", 2, 3, 1, &RunConv, conv_attrs);
  AddKernel<ConvAttrs>(r, "ConvInteger", 2, 4, 1, &RunConvInteger, conv_attrs);
  AddKernel<QLinearConvAttrs>(
      r, "QLinearConv", 8, 9, 1, &RunQLinearConv,
      [](const KernelSpec& spec) -> absl::StatusOr<QLinearConvAttrs> {
        QLinearConvAttrs a;
        DYNVM_RETURN_IF_ERROR(ReadConvAttrs(spec, "QLinearConv", a));
        DYNVM_ASSIGN_OR_RETURN(int64_t ci, spec.GetInt("channels_last_in", 0));
        DYNVM_ASSIGN_OR_RETURN(int64_t co, spec.GetInt("channels_last_out", 0));
        a.channels_last_in = ci != 0;
        a.channels_last_out = co != 0;
        return a;
      });
  AddKernel<ConvTransposeAttrs>(
      r, "ConvTranspose", 2, 3, 1, &RunConvTranspose,
      [](const KernelSpec& spec) -> absl::StatusOr<ConvTransposeAttrs> {
        ConvTransposeAttrs a;
        DYNVM_RETURN_IF_ERROR(ReadConvAttrs(spec, "ConvTranspose", a));
        for (auto [name, field] :
             {std::pair<const char*, std::vector<int64_t>*>{"output_padding", &a.output_padding},
              {"output_shape", &a.output_shape}}) {
          DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> v, spec.GetInts(name));
          *field = v;
        }
        const size_t k = a.kernel.size();
        if (k != 0 && !a.output_padding.empty() && a.output_padding.size() != k) {
          return absl::InvalidArgumentError(
              "ConvTranspose: output_padding must match kernel_shape");
        }
        if (!a.output_shape.empty() && k != 0 && a.output_shape.size() != k &&
            a.output_shape.size() != k + 2) {
          return absl::InvalidArgumentError("ConvTranspose: output_shape must match kernel_shape");
        }
        return a;
      });
  AddKernel<NormAttrs>(r, "BatchNormalization", 5, 5, 3, &RunBatchNorm, GetNormAttrs);
  AddKernel<NormAttrs>(r, "InstanceNormalization", 3, 3, 1, &RunInstanceNorm, GetNormAttrs);
  AddKernel<GroupNormAttrs>(
      r, "GroupNormalization", 3, 3, 1, &RunGroupNorm,
      [](const KernelSpec& spec) -> absl::StatusOr<GroupNormAttrs> {
        GroupNormAttrs a;
        DYNVM_ASSIGN_OR_RETURN(a.epsilon, spec.GetFloat("epsilon", 1e-5f));
        DYNVM_ASSIGN_OR_RETURN(a.groups, spec.GetInt("num_groups", 0));
        if (a.groups < 1) {
          return absl::InvalidArgumentError("GroupNormalization: num_groups must be positive");
        }
        DYNVM_ASSIGN_OR_RETURN(int64_t group_scale, spec.GetInt("group_scale", 0));
        a.group_scale = group_scale != 0;
        return a;
      });
  AddKernel<RmsNormAttrs>(r, "RMSNormalization", 2, 2, 1, &RunRmsNormalization,
                          [](const KernelSpec& spec) -> absl::StatusOr<RmsNormAttrs> {
                            RmsNormAttrs a;
                            DYNVM_ASSIGN_OR_RETURN(a.axis, spec.GetInt("axis", -1));
                            DYNVM_ASSIGN_OR_RETURN(a.epsilon, spec.GetFloat("epsilon", 1e-5f));
                            return a;
                          });
  AddKernel<RotaryAttrs>(r, "RotaryEmbedding", 3, 4, 1, &RunRotaryEmbedding,
                         [](const KernelSpec& spec) -> absl::StatusOr<RotaryAttrs> {
                           RotaryAttrs a;
                           DYNVM_ASSIGN_OR_RETURN(int64_t inter, spec.GetInt("interleaved", 0));
                           a.interleaved = inter != 0;
                           DYNVM_ASSIGN_OR_RETURN(a.num_heads, spec.GetInt("num_heads", 0));
                           DYNVM_ASSIGN_OR_RETURN(a.rotary_dim,
                                                  spec.GetInt("rotary_embedding_dim", 0));
                           if (a.num_heads < 0 || a.rotary_dim < 0) {
                             return absl::InvalidArgumentError(
                                 "RotaryEmbedding: num_heads and rotary_embedding_dim must not "
                                 "be negative");
                           }
                           return a;
                         });
  AddKernel<AffineGridAttrs>(r, "AffineGrid", 2, 2, 1, &RunAffineGrid,
                             [](const KernelSpec& spec) -> absl::StatusOr<AffineGridAttrs> {
                               AffineGridAttrs a;
                               DYNVM_ASSIGN_OR_RETURN(int64_t ac, spec.GetInt("align_corners", 0));
                               a.align_corners = ac != 0;
                               return a;
                             });
  AddKernel<LrnAttrs>(
      r, "LRN", 1, 1, 1, &RunLrn, [](const KernelSpec& spec) -> absl::StatusOr<LrnAttrs> {
        LrnAttrs a;
        for (auto [name, field] : {std::pair<const char*, float*>{"alpha", &a.alpha},
                                   {"beta", &a.beta},
                                   {"bias", &a.bias}}) {
          DYNVM_ASSIGN_OR_RETURN(float v, spec.GetFloat(name, *field));
          *field = v;
        }
        DYNVM_ASSIGN_OR_RETURN(int64_t size, spec.GetInt("size", 0));
        if (size < 1) return absl::InvalidArgumentError("LRN: size must be positive");
        a.size = size;
        return a;
      });
  AddKernel<ShrinkAttrs>(r, "Shrink", 1, 1, 1, &RunShrink,
                         [](const KernelSpec& spec) -> absl::StatusOr<ShrinkAttrs> {
                           ShrinkAttrs a;
                           DYNVM_ASSIGN_OR_RETURN(float bias, spec.GetFloat("bias", 0));
                           absl::StatusOr<float> lambd = spec.GetFloat("lambd", 0.5f);
                           if (!lambd.ok()) return lambd.status();
                           a.bias = bias;
                           a.lambd = *lambd;
                           return a;
                         });
  AddKernel<EyeAttrs>(r, "EyeLike", 1, 1, 1, &RunEyeLike,
                      [](const KernelSpec& spec) -> absl::StatusOr<EyeAttrs> {
                        EyeAttrs a;
                        DYNVM_ASSIGN_OR_RETURN(int64_t k, spec.GetInt("k", 0));
                        a.k = k;
                        if (spec.outputs[0].dtype != kAnyDType)
                          a.dtype = static_cast<DType>(spec.outputs[0].dtype);
                        return a;
                      });
}

}  // namespace dynvm::reference
