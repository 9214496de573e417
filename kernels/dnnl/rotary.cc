// dynvm::RotateHalf on the oneDNN backend (kernels/reference/dynvm_ops.cc has the definition):
// one cpu::RotateHalf per row of the output's last axis, x, cos and sin read at their broadcast
// strides (the row's offset into each), rows split over the VM's pool. Needs unit stride along
// the last axis of all three (a table of D values per position, as exports make them); anything
// else runs the reference kernel, which also reports bad shapes. dynvm::SwiGlu (silu(gate) * up)
// too: cpu::SiluMul in ranges over the pool.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/glu.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

using reference::Dims;

// Rows per range on the pool: about 16K values each.
constexpr int64_t kValuesPerRange = 16384;

class RotateHalfKernel final : public DnnlKernel {
 public:
  using DnnlKernel::DnnlKernel;

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (in.size() != 3 || in[0] == nullptr || in[1] == nullptr || in[2] == nullptr ||
        out.size() != 1 || out[0] == nullptr) {
      return RunFallback(ctx, in, out);
    }
    const Tensor& x = *in[0];
    const Tensor& c = *in[1];
    const Tensor& s = *in[2];
    const int rank = x.rank();
    if (rank == 0 || x.dtype() != DType::kF32 || c.dtype() != DType::kF32 ||
        s.dtype() != DType::kF32 || x.dim(rank - 1) % 2 != 0) {
      return RunFallback(ctx, in, out);  // reports the error, if any
    }
    absl::StatusOr<Dims> xc = reference::BroadcastShapes(x.dims(), c.dims());
    absl::StatusOr<Dims> od = xc.ok() ? reference::BroadcastShapes(*xc, s.dims()) : xc;
    if (!od.ok()) return RunFallback(ctx, in, out);  // reports the error
    const int orank = static_cast<int>(od->size());
    const int64_t d = (*od)[orank - 1];
    if (d != x.dim(rank - 1)) return RunFallback(ctx, in, out);
    const Dims xs = reference::BroadcastStrides(x, *od);
    const Dims cs = reference::BroadcastStrides(c, *od);
    const Dims ss = reference::BroadcastStrides(s, *od);
    if (d > 1 && (xs[orank - 1] != 1 || cs[orank - 1] != 1 || ss[orank - 1] != 1)) {
      return RunFallback(ctx, in, out);
    }
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, *od, "RotateHalf"));
    int64_t rows = d == 0 ? 0 : 1;
    for (int a = 0; a < orank - 1; ++a) rows *= (*od)[a];
    if (rows == 0) return absl::OkStatus();
    const float* xp = x.data<float>();
    const float* cp = c.data<float>();
    const float* sp = s.data<float>();
    float* y = out[0]->data<float>();
    const int64_t grain = std::max<int64_t>(1, kValuesPerRange / d);
    ctx.ParallelFor(rows, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        int64_t rem = r, xo = 0, co = 0, so = 0;
        for (int a = orank - 2; a >= 0; --a) {
          const int64_t i = rem % (*od)[a];
          rem /= (*od)[a];
          xo += i * xs[a];
          co += i * cs[a];
          so += i * ss[a];
        }
        cpu::RotateHalf(d / 2, cp + co, sp + so, xp + xo, y + r * d);
      }
    });
    return absl::OkStatus();
  }
};

// dynvm::SwiGlu: cpu::SiluMul over contiguous gate and up of one shape, split over the pool;
// a broadcast or a strided operand runs the reference kernel.
class SwiGluKernel final : public DnnlKernel {
 public:
  using DnnlKernel::DnnlKernel;

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (in.size() != 2 || in[0] == nullptr || in[1] == nullptr || out.size() != 1 ||
        out[0] == nullptr) {
      return RunFallback(ctx, in, out);
    }
    const Tensor& g = *in[0];
    const Tensor& u = *in[1];
    if (g.dtype() != DType::kF32 || u.dtype() != DType::kF32 || !g.is_contiguous() ||
        !u.is_contiguous() || g.dims() != u.dims()) {
      return RunFallback(ctx, in, out);
    }
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, g.dims(), "SwiGlu"));
    const float* gp = g.data<float>();
    const float* up = u.data<float>();
    float* y = out[0]->data<float>();
    ctx.ParallelFor(g.numel(), kValuesPerRange, [&](int64_t i0, int64_t i1) {
      cpu::SiluMul(i1 - i0, gp + i0, up + i0, y + i0);
    });
    return absl::OkStatus();
  }
};

}  // namespace

void RegisterRotaryKernels(KernelRegistry& r) {
  r.Register(
      KernelRegistration{"dynvm", "SwiGlu", Device::kCPU, kBackend, kDnnlPriority,
                         [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                           DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1}));
                           return std::make_unique<SwiGluKernel>(KernelName(spec));
                         }});
  r.Register(
      KernelRegistration{"dynvm", "RotateHalf", Device::kCPU, kBackend, kDnnlPriority,
                         [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                           DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1, 2}));
                           return std::make_unique<RotateHalfKernel>(KernelName(spec));
                         }});
}

}  // namespace dynvm::onednn
