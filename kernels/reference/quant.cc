// Reference kernels for the integer matrix products of ONNX quantization: MatMulInteger and
// QLinearMatMul (numpy MatMul semantics: 1-D promotion, batch broadcasting).
//
// MatMulInteger: i32 (a - a_zero_point) x (b - b_zero_point), a and b u8 or i8, a_zero_point a
// scalar or one per row of a (M), b_zero_point a scalar or one per column of b (N). Products
// sum exactly in int64 and wrap to i32 as ONNX's int32 accumulation does.
// QLinearMatMul: the same product P, then y = saturate(round_half_even(P * a_scale * b_scale /
// y_scale) + y_zero_point) in y_zero_point's type; a_scale and a_zero_point per tensor or per
// row, b_scale and b_zero_point per tensor or per column. The requantization runs in double.
// Scales must be finite and positive and zero points in their type's range
// (kernels/quant_params.h): the check runs on every call, so non-constant parameters are caught
// at run time.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
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

// Element `linear` of an integer or floating-point tensor as double.
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

bool Is8Bit(DType d) { return d == DType::kU8 || d == DType::kI8; }

// One quantized operand of a product: its values, zero point (null: 0) and, for
// QLinearMatMul, its scale, each a scalar or one per row (a) or column (b).
struct Operand {
  const Tensor* x;
  const Tensor* zp;
  const Tensor* scale;
  const char* name;  // "a" or "b"
};

// Validates an operand's dtype and its parameters against `channels` (M for a, N for b).
absl::Status CheckOperand(absl::string_view op, const Operand& o, int64_t channels) {
  if (!Is8Bit(o.x->dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", o.name, " must be u8 or i8, not ", DTypeName(o.x->dtype())));
  }
  if (o.zp != nullptr) {
    const std::string what = absl::StrCat(op, ": ", o.name, "_zero_point");
    if (o.zp->rank() > 1 && o.zp->numel() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(what, " must be a scalar or 1-D"));
    }
    DYNVM_RETURN_IF_ERROR(CheckQuantLength(o.zp->numel(), channels, what));
    DYNVM_RETURN_IF_ERROR(CheckZeroPoint(*o.zp, o.x->dtype(), what));
  }
  if (o.scale != nullptr) {
    const std::string what = absl::StrCat(op, ": ", o.name, "_scale");
    if (o.scale->rank() > 1 && o.scale->numel() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(what, " must be a scalar or 1-D"));
    }
    DYNVM_RETURN_IF_ERROR(CheckQuantLength(o.scale->numel(), channels, what));
    DYNVM_RETURN_IF_ERROR(CheckQuantScale(*o.scale, what));
  }
  return absl::OkStatus();
}

// Value i of a per-tensor-or-per-channel parameter (0 when absent).
double Param(const Tensor* t, int64_t i) {
  if (t == nullptr) return 0;
  return Get(*t, t->numel() == 1 ? 0 : i);
}

// Row-major strides of a contiguous [batch..., rows, cols] operand, right-aligned to `nb`
// batch dims, 0 where the operand broadcasts.
Dims BatchStrides(absl::Span<const int64_t> batch, size_t nb, int64_t matrix) {
  Dims s(nb, 0);
  int64_t stride = matrix;
  for (size_t i = batch.size(); i-- > 0;) {
    if (batch[i] != 1) s[nb - batch.size() + i] = stride;
    stride *= batch[i];
  }
  return s;
}

// (a - a_zp) x (b - b_zp) with numpy MatMul shapes; calls emit(out_linear, row, col, product)
// once per output element in row-major order after allocating the output as `out_dtype`.
template <typename Emit>
absl::Status IntegerProduct(absl::string_view op, KernelContext& ctx, const Operand& a,
                            const Operand& b, Tensor* y, DType out_dtype, Emit&& emit) {
  const Tensor& ta = *a.x;
  const Tensor& tb = *b.x;
  if (ta.rank() == 0 || tb.rank() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": operands must have rank >= 1, got ",
                                                   ta.DebugString(), " and ", tb.DebugString()));
  }
  const int ra = ta.rank(), rb = tb.rank();
  const int64_t m = ra == 1 ? 1 : ta.dim(ra - 2);
  const int64_t k = ta.dim(ra - 1);
  const int64_t kb = rb == 1 ? tb.dim(0) : tb.dim(rb - 2);
  const int64_t n = rb == 1 ? 1 : tb.dim(rb - 1);
  if (k != kb) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": inner dimensions of ", ta.ShapeString(),
                                                   " and ", tb.ShapeString(), " differ"));
  }
  DYNVM_RETURN_IF_ERROR(CheckOperand(op, a, m));
  DYNVM_RETURN_IF_ERROR(CheckOperand(op, b, n));
  const absl::Span<const int64_t> batch_a = ta.dims().first(ra >= 2 ? ra - 2 : 0);
  const absl::Span<const int64_t> batch_b = tb.dims().first(rb >= 2 ? rb - 2 : 0);
  absl::StatusOr<Dims> batch = BroadcastShapes(batch_a, batch_b);
  if (!batch.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": batch dimensions of ", ta.ShapeString(),
                                                   " and ", tb.ShapeString(), " do not broadcast"));
  }
  Dims out_dims = *batch;
  if (ra > 1) out_dims.push_back(m);
  if (rb > 1) out_dims.push_back(n);
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, y, out_dtype, out_dims, op));
  if (y->numel() == 0) return absl::OkStatus();
  const Dims sa = BatchStrides(batch_a, batch->size(), m * k);
  const Dims sb = BatchStrides(batch_b, batch->size(), k * n);
  std::vector<double> av(static_cast<size_t>(k));
  int64_t out_linear = 0;
  ForEachOffset<2>(
      *batch, {absl::MakeConstSpan(sa), absl::MakeConstSpan(sb)}, [&](int64_t oa, int64_t ob) {
        for (int64_t i = 0; i < m; ++i) {
          const double za = Param(a.zp, i);
          for (int64_t p = 0; p < k; ++p) av[p] = Get(ta, oa + i * k + p) - za;
          for (int64_t j = 0; j < n; ++j) {
            const double zb = Param(b.zp, j);
            int64_t acc = 0;  // |terms| < 2^16: exact in int64
            for (int64_t p = 0; p < k; ++p) {
              acc +=
                  static_cast<int64_t>(av[p]) * static_cast<int64_t>(Get(tb, ob + p * n + j) - zb);
            }
            emit(out_linear++, i, j, acc);
          }
        }
      });
  return absl::OkStatus();
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

absl::Status RunMatMulInteger(const void*, KernelContext& ctx, Inputs in, Outputs out) {
  DYNVM_RETURN_IF_ERROR(Need(in, 2, out, "MatMulInteger"));
  const Operand a{in[0], in.size() > 2 ? in[2] : nullptr, nullptr, "a"};
  const Operand b{in[1], in.size() > 3 ? in[3] : nullptr, nullptr, "b"};
  Tensor* y = out[0];
  return IntegerProduct(
      "MatMulInteger", ctx, a, b, y, DType::kI32, [&](int64_t o, int64_t, int64_t, int64_t acc) {
        y->data<int32_t>()[o] = static_cast<int32_t>(static_cast<uint32_t>(acc));  // wraps
      });
}

absl::Status RunQLinearMatMul(const void*, KernelContext& ctx, Inputs in, Outputs out) {
  DYNVM_RETURN_IF_ERROR(Need(in, 8, out, "QLinearMatMul"));
  const Operand a{in[0], in[2], in[1], "a"};
  const Operand b{in[3], in[5], in[4], "b"};
  const Tensor& y_scale = *in[6];
  const Tensor& y_zp = *in[7];
  if (y_scale.numel() != 1 || y_zp.numel() != 1) {
    return absl::InvalidArgumentError("QLinearMatMul: y_scale and y_zero_point must be scalars");
  }
  if (!Is8Bit(y_zp.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "QLinearMatMul: y_zero_point must be u8 or i8, not ", DTypeName(y_zp.dtype())));
  }
  DYNVM_RETURN_IF_ERROR(CheckQuantScale(y_scale, "QLinearMatMul: y_scale"));
  const double ys = Get(y_scale, 0), yz = Get(y_zp, 0);
  const auto range = QuantRange(y_zp.dtype());
  const double lo = range.first, hi = range.second;
  Tensor* y = out[0];
  const bool u8 = y_zp.dtype() == DType::kU8;
  return IntegerProduct("QLinearMatMul", ctx, a, b, y, y_zp.dtype(),
                        [&](int64_t o, int64_t i, int64_t j, int64_t acc) {
                          const double s = Param(a.scale, i) * Param(b.scale, j) / ys;
                          const double q =
                              std::clamp(std::nearbyint(static_cast<double>(acc) * s) + yz, lo, hi);
                          if (u8) {
                            y->data<uint8_t>()[o] = static_cast<uint8_t>(q);
                          } else {
                            y->data<int8_t>()[o] = static_cast<int8_t>(q);
                          }
                        });
}

void Add(KernelRegistry& r, const char* op, size_t min_in, size_t max_in,
         FunctionKernel::RunFn run) {
  r.Register(KernelRegistration{
      "", op, Device::kCPU, "reference", kReferencePriority,
      [op, min_in, max_in, run](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        if (spec.inputs.size() < min_in || spec.inputs.size() > max_in ||
            spec.outputs.size() != 1) {
          return absl::InvalidArgumentError(
              absl::StrCat(op, ": expected ", min_in, "..", max_in, " inputs and 1 output"));
        }
        return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), run,
                                                std::make_shared<const int>(0));
      }});
}

}  // namespace

void RegisterQuantKernels(KernelRegistry& r) {
  Add(r, "MatMulInteger", 2, 4, &RunMatMulInteger);
  Add(r, "QLinearMatMul", 8, 8, &RunQLinearMatMul);
}

}  // namespace dynvm::reference
