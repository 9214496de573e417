// Reference kernels for the quantized elementwise operators the QDQ rewrites make
// (compiler/rewrite/qdq.cc) and ONNX Runtime's QOperator models hold:
//
// com.microsoft::QLinearAdd(A, A_scale, A_zero_point?, B, B_scale, B_zero_point?, C_scale,
// C_zero_point?) -> C: A + B, u8 or i8 (C of A's type), numpy broadcast, every scale and zero
// point per tensor. The arithmetic is ONNX Runtime's (MLAS's x86 kernel), in f32:
//   ra = A_scale / C_scale, rb = B_scale / C_scale (each rounded once),
//   k  = C_zero_point - (ra * A_zero_point + rb * B_zero_point) (each operation rounded),
//   C  = saturate(round_half_even(fma(A, ra, fma(B, rb, k)))).
// It differs from the exact value's rounding only within f32's rounding error of a tie (x.5),
// by one (qeltwise_test bounds that against a double-precision oracle).
//
// dynvm::Requantize(x, x_scale, x_zero_point, y_scale, y_zero_point) -> y, attribute relu:
// DequantizeLinear -> [Relu] -> QuantizeLinear of x (u8 or i8) into y_zero_point's type, per
// tensor, with exactly those kernels' f32 arithmetic: v = (x - x_zero_point) * x_scale (one
// rounding), max(v, 0) with relu, y = saturate(round_half_even(v / y_scale) + y_zero_point).
// The fused op gives the unfused program's bits (qeltwise_test).
//
// Requantize is elementwise, so it serves channels-last tensors (kernels/channels_last.h)
// unchanged. QLinearAdd with channels_last = 1 (set by compiler/conv_fusion.h on a residual
// Add between channels-last int8 convolutions) reads A and B and writes C as channels-last
// tensors [N, C, spatial...] stored [N, spatial..., C], broadcasting over the logical dims.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/quant_params.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;

bool Is8Bit(DType d) { return d == DType::kU8 || d == DType::kI8; }

// A per-tensor f32 scale, checked.
absl::StatusOr<float> Scale(const Tensor* t, absl::string_view what) {
  if (t == nullptr || t->dtype() != DType::kF32 || t->numel() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be one f32 value, got ",
                                                   t == nullptr ? "none" : t->DebugString()));
  }
  DYNVM_RETURN_IF_ERROR(CheckQuantScale(*t, what));
  return t->data<float>()[t->ElementOffset(0)];
}

// A per-tensor zero point of type `quant` (absent: 0), checked.
absl::StatusOr<int32_t> ZeroPoint(const Tensor* t, DType quant, absl::string_view what) {
  if (t == nullptr) return 0;
  if (t->dtype() != quant || t->numel() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be one ", DTypeName(quant), " value, got ", t->DebugString()));
  }
  DYNVM_RETURN_IF_ERROR(CheckZeroPoint(*t, quant, what));
  return quant == DType::kU8 ? static_cast<int32_t>(t->data<uint8_t>()[t->ElementOffset(0)])
                             : static_cast<int32_t>(t->data<int8_t>()[t->ElementOffset(0)]);
}

const Tensor* At(Inputs in, size_t i) { return i < in.size() ? in[i] : nullptr; }

template <typename T>
T Saturate(float r) {
  constexpr float lo = std::is_same_v<T, uint8_t> ? 0.0f : -128.0f;
  constexpr float hi = std::is_same_v<T, uint8_t> ? 255.0f : 127.0f;
  return static_cast<T>(std::max(lo, std::min(hi, r)));
}

// [N, C, spatial...] as [N, spatial..., C].
Dims ChannelsLastOrder(absl::Span<const int64_t> d) {
  Dims p(d.begin(), d.end());
  if (d.size() >= 3) {
    std::rotate(p.begin() + 1, p.begin() + 2, p.end());
  }
  return p;
}

// Strides (elements) reading a dense tensor of `dims` broadcast to `out` (both right-aligned,
// stride 0 on broadcast dims).
Dims DenseBroadcastStrides(absl::Span<const int64_t> dims, absl::Span<const int64_t> out) {
  Dims st(out.size(), 0);
  int64_t acc = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    const size_t o = out.size() - dims.size() + i;
    st[o] = dims[i] == 1 && out[o] != 1 ? 0 : acc;
    acc *= dims[i];
  }
  return st;
}

template <typename T>
void AddLoop(const Tensor& a, const Tensor& b, Tensor* c, float ra, float rb, float k,
             bool channels_last) {
  Dims sa, sb, sc, order;
  if (channels_last) {  // dense channels-last data: broadcast over the physical order
    order = ChannelsLastOrder(c->dims());
    sa = DenseBroadcastStrides(ChannelsLastOrder(a.dims()), order);
    sb = DenseBroadcastStrides(ChannelsLastOrder(b.dims()), order);
    sc = DenseBroadcastStrides(order, order);
  } else {
    order = Dims(c->dims().begin(), c->dims().end());
    sa = BroadcastStrides(a, c->dims());
    sb = BroadcastStrides(b, c->dims());
    sc = BroadcastStrides(*c, c->dims());
  }
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* pc = c->data<T>();
  ForEachOffset<3>(
      order, {absl::MakeConstSpan(sa), absl::MakeConstSpan(sb), absl::MakeConstSpan(sc)},
      [&](int64_t oa, int64_t ob, int64_t oc) {
        const float v =
            std::fma(static_cast<float>(pa[oa]), ra, std::fma(static_cast<float>(pb[ob]), rb, k));
        pc[oc] = Saturate<T>(std::nearbyint(v));
      });
}

struct QLinearAddAttrs {
  bool channels_last = false;
};

absl::Status RunQLinearAdd(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  constexpr absl::string_view kOp = "QLinearAdd";
  const bool channels_last = static_cast<const QLinearAddAttrs*>(attrs)->channels_last;
  const Tensor* a = At(in, 0);
  const Tensor* b = At(in, 3);
  if (a == nullptr || b == nullptr || !Is8Bit(a->dtype()) || b->dtype() != a->dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": A and B must both be u8 or both i8, got ", a == nullptr ? "none" : a->DebugString(),
        " and ", b == nullptr ? "none" : b->DebugString()));
  }
  const DType dt = a->dtype();
  DYNVM_ASSIGN_OR_RETURN(const float as, Scale(At(in, 1), "QLinearAdd: A_scale"));
  DYNVM_ASSIGN_OR_RETURN(const int32_t az, ZeroPoint(At(in, 2), dt, "QLinearAdd: A_zero_point"));
  DYNVM_ASSIGN_OR_RETURN(const float bs, Scale(At(in, 4), "QLinearAdd: B_scale"));
  DYNVM_ASSIGN_OR_RETURN(const int32_t bz, ZeroPoint(At(in, 5), dt, "QLinearAdd: B_zero_point"));
  DYNVM_ASSIGN_OR_RETURN(const float cs, Scale(At(in, 6), "QLinearAdd: C_scale"));
  DYNVM_ASSIGN_OR_RETURN(const int32_t cz, ZeroPoint(At(in, 7), dt, "QLinearAdd: C_zero_point"));
  DYNVM_ASSIGN_OR_RETURN(const Dims dims, BroadcastShapes(a->dims(), b->dims()));
  if (channels_last &&
      (a->rank() != b->rank() || a->rank() < 3 || !a->is_contiguous() || !b->is_contiguous())) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": channels-last A and B must be dense and of one rank of 3 or more, got ",
        a->DebugString(), " and ", b->DebugString()));
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], dt, dims, kOp));
  if (channels_last && !out[0]->is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": a channels-last C must be dense"));
  }
  float ra, rb, k;
  QLinearAddParams(as, az, bs, bz, cs, cz, &ra, &rb, &k);
  if (dt == DType::kU8) {
    AddLoop<uint8_t>(*a, *b, out[0], ra, rb, k, channels_last);
  } else {
    AddLoop<int8_t>(*a, *b, out[0], ra, rb, k, channels_last);
  }
  return absl::OkStatus();
}

struct RequantizeAttrs {
  bool relu = false;
};

template <typename X, typename Y>
void RequantizeLoop(const Tensor& x, Tensor* y, float xs, float xz, bool relu, float ys, float yz) {
  const X* px = x.data<X>();
  Y* py = y->data<Y>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    float v = (static_cast<float>(px[x.ElementOffset(i)]) - xz) * xs;
    if (relu) v = std::max(v, 0.0f);
    py[i] = Saturate<Y>(std::nearbyint(v / ys) + yz);
  }
}

absl::Status RunRequantize(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  constexpr absl::string_view kOp = "Requantize";
  const bool relu = static_cast<const RequantizeAttrs*>(attrs)->relu;
  const Tensor* x = At(in, 0);
  const Tensor* yzt = At(in, 4);
  if (x == nullptr || yzt == nullptr || !Is8Bit(x->dtype()) || !Is8Bit(yzt->dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": x and y_zero_point must be u8 or i8, got ",
                     x == nullptr ? "none" : x->DebugString(), " and ",
                     yzt == nullptr ? "none" : yzt->DebugString()));
  }
  DYNVM_ASSIGN_OR_RETURN(const float xs, Scale(At(in, 1), "Requantize: x_scale"));
  DYNVM_ASSIGN_OR_RETURN(const int32_t xz,
                         ZeroPoint(At(in, 2), x->dtype(), "Requantize: x_zero_point"));
  DYNVM_ASSIGN_OR_RETURN(const float ys, Scale(At(in, 3), "Requantize: y_scale"));
  DYNVM_ASSIGN_OR_RETURN(const int32_t yz,
                         ZeroPoint(yzt, yzt->dtype(), "Requantize: y_zero_point"));
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], yzt->dtype(), x->dims(), kOp));
  const float fxz = static_cast<float>(xz), fyz = static_cast<float>(yz);
  const bool xu = x->dtype() == DType::kU8, yu = yzt->dtype() == DType::kU8;
  if (xu && yu) RequantizeLoop<uint8_t, uint8_t>(*x, out[0], xs, fxz, relu, ys, fyz);
  if (xu && !yu) RequantizeLoop<uint8_t, int8_t>(*x, out[0], xs, fxz, relu, ys, fyz);
  if (!xu && yu) RequantizeLoop<int8_t, uint8_t>(*x, out[0], xs, fxz, relu, ys, fyz);
  if (!xu && !yu) RequantizeLoop<int8_t, int8_t>(*x, out[0], xs, fxz, relu, ys, fyz);
  return absl::OkStatus();
}

}  // namespace

void QLinearAddParams(float as, int32_t az, float bs, int32_t bz, float cs, int32_t cz, float* ra,
                      float* rb, float* k) {
  *ra = as / cs;
  *rb = bs / cs;
  // Each product and sum rounded apart (volatile: no contraction into an fma).
  volatile float pa = *ra * static_cast<float>(az);
  volatile float pb = *rb * static_cast<float>(bz);
  volatile float sum = pa + pb;
  *k = static_cast<float>(cz) - sum;
}

void RegisterQuantEltwiseKernels(KernelRegistry& r) {
  r.Register({"com.microsoft", "QLinearAdd", Device::kCPU, "reference", kReferencePriority,
              [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                if (spec.inputs.size() < 7 || spec.inputs.size() > 8 || spec.outputs.size() != 1) {
                  return absl::InvalidArgumentError("QLinearAdd takes 7 or 8 inputs, 1 output");
                }
                auto attrs = std::make_shared<QLinearAddAttrs>();
                DYNVM_ASSIGN_OR_RETURN(int64_t cl, spec.GetInt("channels_last", 0));
                attrs->channels_last = cl != 0;
                return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), &RunQLinearAdd,
                                                        std::move(attrs));
              }});
  r.Register({"dynvm", "Requantize", Device::kCPU, "reference", kReferencePriority,
              [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                if (spec.inputs.size() != 5 || spec.outputs.size() != 1) {
                  return absl::InvalidArgumentError("Requantize takes 5 inputs and has 1 output");
                }
                auto attrs = std::make_shared<RequantizeAttrs>();
                DYNVM_ASSIGN_OR_RETURN(int64_t relu, spec.GetInt("relu", 0));
                attrs->relu = relu != 0;
                return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), &RunRequantize,
                                                        std::move(attrs));
              }});
}

}  // namespace dynvm::reference
