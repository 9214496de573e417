// com.microsoft MatMulNBits with 4-bit weights on the oneDNN backend (kernels/cpu/q4gemv.h):
// up to kQuantSmallRows activation rows (a decode step, a few beams) run the direct 4-bit kernel
// (each weight read once; from kMinParallelGemv multiply-adds the output rows split across the
// VM's pool); more rows dequantize B once per call into the site's workspace and run dnnl_sgemm
// (the same arithmetic, as ONNX Runtime's accuracy_level 0 does). Anything else (8-bit or f32
// zero points, g_idx, strided or mistyped inputs, errors) goes to the reference kernel, which
// reports what is wrong.
#include <algorithm>
#include <cstring>

#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/q4gemv.h"
#include "kernels/cpu/qgemv.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/parallel_loops.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

bool Dense(const Tensor* t, DType dtype, int64_t numel) {
  return t != nullptr && t->dtype() == dtype && t->is_contiguous() && t->numel() == numel;
}

class MatMulNBitsKernel final : public DnnlKernel {
 public:
  MatMulNBitsKernel(std::string name, int64_t k, int64_t n, int64_t block)
      : DnnlKernel(std::move(name)), k_(k), n_(n), block_(block) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    auto at = [&](size_t i) -> const Tensor* { return i < in.size() ? in[i] : nullptr; };
    const Tensor* a = at(0);
    const int64_t blocks = (k_ + block_ - 1) / block_;
    const Tensor* zp = at(3);
    const Tensor* bias = at(5);
    if (out.size() != 1 || out[0] == nullptr || a == nullptr || a->dtype() != DType::kF32 ||
        !a->is_contiguous() || a->rank() < 1 || a->dim(a->rank() - 1) != k_ ||
        !Dense(at(1), DType::kU8, n_ * blocks * (block_ / 2)) ||
        !Dense(at(2), DType::kF32, n_ * blocks) ||
        (zp != nullptr && !Dense(zp, DType::kU8, n_ * ((blocks + 1) / 2))) || at(4) != nullptr ||
        (bias != nullptr && !Dense(bias, DType::kF32, n_))) {
      return RunFallback(ctx, in, out);  // reports the error, or serves the other layouts
    }
    cpu::Q4Weights w;
    w.k = k_;
    w.block = block_;
    w.packed = at(1)->data<uint8_t>();
    w.scales = at(2)->data<float>();
    w.zero_points = zp != nullptr ? zp->data<uint8_t>() : nullptr;
    const float* pb = bias != nullptr ? bias->data<float>() : nullptr;
    reference::Dims dims(a->dims().begin(), a->dims().end());
    dims.back() = n_;
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, dims, "MatMulNBits"));
    float* py = out[0]->data<float>();
    const int64_t m = a->numel() / k_;
    if (m == 0) return absl::OkStatus();
    const float* pa = a->data<float>();
    if (m <= cpu::kQuantSmallRows) {
      auto gemv = [&](int64_t j0, int64_t j1) { cpu::QGemvQ4(m, pa, k_, w, pb, j0, j1, py, n_); };
      if (ctx.num_threads() > 1 && m * n_ * k_ >= kMinParallelGemv) {
        ctx.ParallelFor(n_, 16, gemv);
      } else {
        gemv(0, n_);
      }
      return absl::OkStatus();
    }
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(static_cast<size_t>(n_ * k_) * sizeof(float)));
    float* wf = static_cast<float*>(ws);
    auto dequantize = [&](int64_t j0, int64_t j1) {
      cpu::DequantizeRowsQ4(w, j0, j1, wf + j0 * k_);
    };
    if (ctx.num_threads() > 1 && n_ * k_ >= kMinParallelGemv) {
      ctx.ParallelFor(n_, 16, dequantize);
    } else {
      dequantize(0, n_);
    }
    float beta = 0.0f;
    if (pb != nullptr) {
      for (int64_t i = 0; i < m; ++i) std::memcpy(py + i * n_, pb, n_ * sizeof(float));
      beta = 1.0f;
    }
    SetThreads(ThreadsFor(ctx.num_threads(), m * n_ * k_));
    return FromDnnl(dnnl_sgemm('N', 'T', m, n_, k_, 1.0f, pa, k_, wf, k_, beta, py, n_),
                    "dnnl_sgemm");
  }

 private:
  int64_t k_, n_, block_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateMatMulNBits(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
  DYNVM_ASSIGN_OR_RETURN(int64_t k, spec.GetInt("K", -1));
  DYNVM_ASSIGN_OR_RETURN(int64_t n, spec.GetInt("N", -1));
  DYNVM_ASSIGN_OR_RETURN(int64_t bits, spec.GetInt("bits", 4));
  DYNVM_ASSIGN_OR_RETURN(int64_t block, spec.GetInt("block_size", -1));
  if (k <= 0 || n <= 0 || bits != 4 || block < 16 || block > 256 || (block & (block - 1)) != 0) {
    return absl::UnimplementedError(
        absl::StrCat("MatMulNBits: the oneDNN kernel runs bits 4, block ", "16..256 only (K ", k,
                     ", N ", n, ", bits ", bits, ", block_size ", block, ")"));
  }
  return std::make_unique<MatMulNBitsKernel>(KernelName(spec, cpu::QGemvQ4Path()), k, n, block);
}

}  // namespace

void RegisterMatMulNBitsKernels(KernelRegistry& r) {
  r.Register(KernelRegistration{"com.microsoft", "MatMulNBits", Device::kCPU, kBackend,
                                kDnnlPriority, &CreateMatMulNBits});
}

}  // namespace dynvm::onednn
