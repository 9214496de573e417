// dynvm::Linear reference kernel (definition in linear.h): a double-accumulating loop over
// any strides.
#include "kernels/reference/linear.h"

#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {
constexpr int64_t kPanel = 16;  // kernels/cpu/packed_gemm.h
}  // namespace

absl::StatusOr<LinearAttrs> GetLinearAttrs(const KernelSpec& spec) {
  if (spec.inputs.size() < 2 || spec.inputs.size() > 3 || spec.outputs.size() != 1) {
    return absl::InvalidArgumentError("Linear takes (X, W[, B]) and has one output");
  }
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const uint8_t d = spec.inputs[i].dtype;
    if (d != static_cast<uint8_t>(DType::kF32) && d != kAnyDType) {
      return absl::UnimplementedError("Linear: X, W and B must be f32");
    }
  }
  LinearAttrs a;
  absl::StatusOr<int64_t> tb = spec.GetInt("trans_b", 0);
  absl::StatusOr<std::string> act = spec.GetString("activation", "");
  if (!tb.ok() || !act.ok() || (*tb != 0 && *tb != 1)) {
    return absl::InvalidArgumentError("Linear: trans_b must be 0 or 1 and activation a string");
  }
  a.trans_b = *tb == 1;
  absl::StatusOr<int64_t> packed_n = spec.GetInt("b_packed_n", -1);
  if (!packed_n.ok() || *packed_n < -1 || (*packed_n >= 0 && a.trans_b)) {
    return absl::InvalidArgumentError("Linear: b_packed_n must be N >= 0, with trans_b = 0");
  }
  a.packed_n = *packed_n;
  static constexpr std::pair<const char*, LinearAct> kActs[] = {
      {"", LinearAct::kNone},     {"Relu", LinearAct::kRelu},
      {"Tanh", LinearAct::kTanh}, {"Sigmoid", LinearAct::kSigmoid},
      {"Gelu", LinearAct::kGelu}, {"GeluTanh", LinearAct::kGeluTanh},
      {"Silu", LinearAct::kSilu}};
  for (const auto& entry : kActs) {
    if (*act == entry.first) {
      a.act = entry.second;
      return a;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("Linear: unknown activation '", *act, "'"));
}

absl::StatusOr<LinearGeometry> PrepareLinear(const LinearAttrs& a, KernelContext& ctx,
                                             absl::Span<const Tensor* const> in,
                                             absl::Span<Tensor* const> out) {
  if (in.size() < 2 || in[0] == nullptr || in[1] == nullptr || out.size() != 1 ||
      out[0] == nullptr) {
    return absl::InvalidArgumentError("Linear takes (X, W[, B]) and has one output");
  }
  const Tensor& x = *in[0];
  const Tensor& w = *in[1];
  const Tensor* b = in.size() > 2 ? in[2] : nullptr;
  if (x.dtype() != DType::kF32 || w.dtype() != DType::kF32 ||
      (b != nullptr && b->dtype() != DType::kF32)) {
    return absl::InvalidArgumentError("Linear: X, W and B must be f32");
  }
  const bool packed = a.packed_n >= 0;
  if (x.rank() < 1 || w.rank() != (packed ? 3 : 2)) {
    return absl::InvalidArgumentError(absl::StrCat("Linear: X must have rank >= 1 and W rank ",
                                                   packed ? "3 (b_packed_n)" : "2", ", got ",
                                                   x.rank(), " and ", w.rank()));
  }
  LinearGeometry g;
  g.k = x.dim(x.rank() - 1);
  if (packed) {
    g.n = a.packed_n;
    if (w.dim(0) != (g.n + kPanel - 1) / kPanel || w.dim(1) != g.k || w.dim(2) != kPanel) {
      return absl::InvalidArgumentError(
          absl::StrCat("Linear: a packed W of N = ", g.n, " and K = ", g.k, " must be [",
                       (g.n + kPanel - 1) / kPanel, ", K, 16], got ", w.ShapeString()));
    }
  } else {
    g.n = w.dim(a.trans_b ? 0 : 1);
    if (w.dim(a.trans_b ? 1 : 0) != g.k) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Linear: X's last dim ", g.k, " differs from W's K ", w.dim(a.trans_b ? 1 : 0)));
    }
  }
  if (b != nullptr && (b->rank() < 1 || b->dim(b->rank() - 1) != g.n || b->numel() != g.n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear: B must hold N = ", g.n, " values along its last axis"));
  }
  g.m = g.k == 0 ? 1 : x.numel() / g.k;
  Dims dims(x.dims().begin(), x.dims().end());
  dims.back() = g.n;
  if (x.numel() == 0) {
    g.m = 1;
    for (int i = 0; i + 1 < x.rank(); ++i) g.m *= x.dim(i);
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, dims, "Linear"));
  return g;
}

double LinearActivation(LinearAct act, double x) {
  switch (act) {
    case LinearAct::kNone:
      return x;
    case LinearAct::kRelu:
      return x > 0 ? x : (x != x ? x : 0.0);
    case LinearAct::kTanh:
      return std::tanh(x);
    case LinearAct::kSigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case LinearAct::kGelu:
      return 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752440));
    case LinearAct::kGeluTanh:
      return 0.5 * x * (1.0 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    case LinearAct::kSilu:
      return x / (1.0 + std::exp(-x));
  }
  return x;
}

namespace {

absl::Status RunLinear(const void* attrs, KernelContext& ctx, absl::Span<const Tensor* const> in,
                       absl::Span<Tensor* const> out) {
  const auto& a = *static_cast<const LinearAttrs*>(attrs);
  DYNVM_ASSIGN_OR_RETURN(LinearGeometry g, PrepareLinear(a, ctx, in, out));
  const Tensor& x = *in[0];
  const Tensor& w = *in[1];
  const Tensor* b = in.size() > 2 ? in[2] : nullptr;
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  float* py = out[0]->data<float>();
  // W[kk, j] at pw[kk * swk + j * swn], or in panels at [j / 16, kk, j % 16].
  const bool packed = a.packed_n >= 0;
  const int64_t swk = w.stride(packed ? 1 : a.trans_b ? 1 : 0);
  const int64_t swn = packed ? 0 : w.stride(a.trans_b ? 0 : 1);
  for (int64_t r = 0; r < g.m; ++r) {
    for (int64_t j = 0; j < g.n; ++j) {
      const float* col =
          packed ? pw + (j / kPanel) * w.stride(0) + (j % kPanel) * w.stride(2) : pw + j * swn;
      double acc = b != nullptr ? b->data<float>()[b->ElementOffset(j)] : 0.0;
      for (int64_t kk = 0; kk < g.k; ++kk) {
        const int64_t i = r * g.k + kk;
        const float xv = x.is_contiguous() ? px[i] : px[x.ElementOffset(i)];
        acc += static_cast<double>(xv) * col[kk * swk];
      }
      py[r * g.n + j] = static_cast<float>(LinearActivation(a.act, acc));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterLinearKernel(KernelRegistry& r) {
  r.Register({"dynvm", "Linear", Device::kCPU, "reference", kReferencePriority,
              [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                DYNVM_ASSIGN_OR_RETURN(LinearAttrs a, GetLinearAttrs(spec));
                return std::make_unique<FunctionKernel>("linear.f32.ref", &RunLinear,
                                                        std::make_shared<const LinearAttrs>(a));
              }});
}

}  // namespace dynvm::reference
