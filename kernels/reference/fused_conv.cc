// The reference kernel of dynvm::FusedConv (made by compiler/conv_fusion.cc): ONNX Conv (the
// reference Conv kernel, in double), then an optional residual `sum` (fourth input, exactly the
// output's shape) added, then an optional "activation" (Relu, LeakyRelu with
// activation_alpha, Clip with activation_alpha = min and activation_beta = max, Sigmoid,
// HardSwish, SiLU = x * sigmoid(x), Tanh), each step rounded to f32 as the unfused ops would.
// NaN stays NaN through every activation. f32 only.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

enum class Act : uint8_t { kNone, kRelu, kLeakyRelu, kClip, kSigmoid, kHardSwish, kSiLU, kTanh };

float Apply(Act act, float x, float alpha, float beta) {
  switch (act) {
    case Act::kNone:
      return x;
    case Act::kRelu:
      return x < 0 ? 0.0f : x;
    case Act::kLeakyRelu:
      return x < 0 ? alpha * x : x;
    case Act::kClip:
      return x < alpha ? alpha : (x > beta ? beta : x);
    case Act::kSigmoid:
      return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
    case Act::kHardSwish: {
      const double v = static_cast<double>(x) / 6.0 + 0.5;
      return static_cast<float>(x * (v < 0 ? 0.0 : (v > 1 ? 1.0 : v)));
    }
    case Act::kSiLU: {
      const float s = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
      return x * s;
    }
    case Act::kTanh:
      return static_cast<float>(std::tanh(static_cast<double>(x)));
  }
  return x;
}

class FusedConvKernel final : public Kernel {
 public:
  FusedConvKernel(std::unique_ptr<Kernel> conv, Act act, float alpha, float beta)
      : conv_(std::move(conv)), act_(act), alpha_(alpha), beta_(beta) {}
  std::string name() const override { return "fusedconv.f32.ref"; }

  absl::Status Run(KernelContext& ctx, absl::Span<const Tensor* const> in,
                   absl::Span<Tensor* const> out) const override {
    const Tensor* sum = in.size() > 3 ? in[3] : nullptr;
    DYNVM_RETURN_IF_ERROR(conv_->Run(ctx, in.first(std::min<size_t>(in.size(), 3)), out));
    Tensor& y = *out[0];
    if (y.dtype() != DType::kF32) return absl::UnimplementedError("FusedConv: f32 only");
    float* py = y.data<float>();
    const int64_t n = y.numel();
    if (sum != nullptr) {
      if (sum->dtype() != DType::kF32 || sum->dims() != y.dims()) {
        return absl::InvalidArgumentError(absl::StrCat("FusedConv: the residual ",
                                                       sum->DebugString(), " must be the output's ",
                                                       y.DebugString()));
      }
      const float* ps = sum->data<float>();
      for (int64_t i = 0; i < n; ++i) py[i] += ps[sum->ElementOffset(i)];
    }
    if (act_ != Act::kNone) {
      for (int64_t i = 0; i < n; ++i) py[i] = Apply(act_, py[i], alpha_, beta_);
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Kernel> conv_;
  Act act_;
  float alpha_, beta_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateFusedConv(const KernelSpec& spec) {
  if (spec.inputs.size() < 2 || spec.inputs.size() > 4 || spec.outputs.size() != 1) {
    return absl::InvalidArgumentError("FusedConv takes 2..4 inputs and has 1 output");
  }
  if (spec.inputs[0].dtype != static_cast<uint8_t>(DType::kF32)) {
    return absl::UnimplementedError("FusedConv: f32 only");
  }
  DYNVM_ASSIGN_OR_RETURN(std::string name, spec.GetString("activation", ""));
  DYNVM_ASSIGN_OR_RETURN(float alpha, spec.GetFloat("activation_alpha", 0.0f));
  DYNVM_ASSIGN_OR_RETURN(float beta, spec.GetFloat("activation_beta", 0.0f));
  Act act = Act::kNone;
  if (name == "Relu") {
    act = Act::kRelu;
  } else if (name == "LeakyRelu") {
    act = Act::kLeakyRelu;
  } else if (name == "Clip") {
    act = Act::kClip;
  } else if (name == "Sigmoid") {
    act = Act::kSigmoid;
  } else if (name == "HardSwish") {
    act = Act::kHardSwish;
  } else if (name == "SiLU") {
    act = Act::kSiLU;
  } else if (name == "Tanh") {
    act = Act::kTanh;
  } else if (!name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("FusedConv: unknown activation '", name, "'"));
  }
  KernelSpec conv = spec;
  conv.op = "Conv";
  conv.domain = "";
  conv.inputs.resize(std::min<size_t>(spec.inputs.size(), 3));
  for (const char* a : {"activation", "activation_alpha", "activation_beta", "constant_weights"}) {
    conv.attrs.erase(a);
  }
  conv.backend = "reference";
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> k,
                         KernelRegistry::Global().Create(conv, BackendPolicy{{"reference"}}));
  return std::make_unique<FusedConvKernel>(std::move(k), act, alpha, beta);
}

}  // namespace

void RegisterFusedConvKernels(KernelRegistry& r) {
  r.Register(
      {"dynvm", "FusedConv", Device::kCPU, "reference", kReferencePriority, &CreateFusedConv});
}

}  // namespace dynvm::reference
