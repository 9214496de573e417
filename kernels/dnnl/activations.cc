// dynvm's fused activations (domain "dynvm", made by the compiler's pattern rewrites:
// compiler/rewrite/activations.cc) as plain vectorized loops (f32, contiguous; anything else
// goes to the reference kernel, kernels/reference/dynvm_ops.cc):
//   Gelu(x)     = x/2 (1 + erf(x / sqrt 2))        cpu::GeluErf, in place too
//   GeluTanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   cpu::GeluTanh
//   Silu(x)     = x sigmoid(x)                     cpu::Silu (kernels/cpu/activation.h)
// A loop, not oneDNN's eltwise primitive: a decoder's activations change shape every step, and
// binding a primitive per shape (or the reference loop after kMaxPrimitiveBinds shapes) costs
// several times the work. Within 1e-6 relative of the reference; NaN gives NaN. Elements are
// split across the VM's pool from kMinParallelMathElements (parallel_loops.h).
#include <algorithm>
#include <cmath>

#include "common/status_macros.h"
#include "kernels/cpu/activation.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/parallel_loops.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

enum class Act { kGelu, kGeluTanh, kSilu };

class ActivationKernel final : public DnnlKernel {
 public:
  ActivationKernel(std::string name, Act act) : DnnlKernel(std::move(name)), act_(act) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "activation"));
    const Tensor& x = *in[0];
    if (x.dtype() != DType::kF32 || !x.is_contiguous()) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "activation"));
    const int64_t n = x.numel();
    const float* src = x.data<float>();
    float* dst = out[0]->data<float>();
    const Act act = act_;
    ParallelElements(
        ctx, n, [&](int64_t e0, int64_t e1) { Apply(act, e1 - e0, src + e0, dst + e0); },
        kMinParallelMathElements);
    return absl::OkStatus();
  }

 private:
  static void Apply(Act act, int64_t n, const float* src, float* dst) {
    switch (act) {
      case Act::kGelu:
        cpu::GeluErf(n, src, dst);  // y may be x (the plan runs it in place)
        break;
      case Act::kGeluTanh:
        cpu::GeluTanh(n, src, dst);
        break;
      case Act::kSilu:
        cpu::Silu(n, src, dst);
        break;
    }
  }

  Act act_;
};

void Add(KernelRegistry& r, const char* op, Act act) {
  r.Register(
      KernelRegistration{"dynvm", op, Device::kCPU, kBackend, kDnnlPriority,
                         [act](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                           DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 1, 1, 1));
                           DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
                           return std::make_unique<ActivationKernel>(KernelName(spec), act);
                         }});
}

}  // namespace

void RegisterActivationKernels(KernelRegistry& r) {
  Add(r, "Gelu", Act::kGelu);
  Add(r, "GeluTanh", Act::kGeluTanh);
  Add(r, "Silu", Act::kSilu);
}

}  // namespace dynvm::onednn
