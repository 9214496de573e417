// dynvm::QMatMul (weight-only quantized MatMul/Gemm, kernels/reference/qweights.cc) on the
// oneDNN backend: activation rows that choice::UseQGemv takes (a decode step, a few beams) run the
// direct int8/bf16 microkernels (kernels/cpu/qgemv.h: the weights are read once; from
// kMinParallelGemv multiply-adds the output rows are split across the VM's pool); more rows
// dequantize W once per call into the site's workspace and run dnnl_sgemm (the weights are then
// reused M times, so widening them once costs less than widening them per row).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/qgemv.h"
#include "kernels/cpu/quantize.h"
#include "kernels/dnnl/choice.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/parallel_loops.h"
#include "kernels/reference/common.h"
#include "kernels/reference/qweights.h"

namespace dynvm::onednn {
namespace {

class QMatMulKernel final : public DnnlKernel {
 public:
  using DnnlKernel::DnnlKernel;

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, "QMatMul"));
    const Tensor& a = *in[0];
    const Tensor& w = *in[1];
    const Tensor* scale = in.size() > 2 ? in[2] : nullptr;
    if (!reference::CheckQuantizedWeight(w, scale, 2, "QMatMul").ok() || a.dtype() != DType::kF32 ||
        a.rank() < 1 || a.dim(a.rank() - 1) != w.dim(1) || !a.is_contiguous()) {
      return RunFallback(ctx, in, out);  // reports the error, or serves strided A
    }
    const int64_t n = w.dim(0), k = w.dim(1);
    reference::Dims dims(a.dims().begin(), a.dims().end());
    dims.back() = n;
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, dims, "QMatMul"));
    Tensor& y = *out[0];
    if (y.numel() == 0) return absl::OkStatus();
    const int64_t m = k == 0 ? y.numel() / n : a.numel() / k;
    float* py = y.data<float>();
    if (k == 0) {
      std::fill(py, py + m * n, 0.0f);
      return absl::OkStatus();
    }
    const float* pa = a.data<float>();
    const bool i8 = w.dtype() == DType::kI8;
    if (choice::UseQGemv(m, n, k)) {
      // Output rows [j0, j1): split across the VM's pool as rnn.cc splits its gates' GEMVs.
      auto gemv = [&](int64_t j0, int64_t j1) {
        if (i8) {
          cpu::QGemvI8(m, k, pa, k, w.data<int8_t>(), k, scale->data<float>(), j0, j1, 0.0f, py, n);
        } else {
          cpu::QGemvBf16(m, k, pa, k, static_cast<const uint16_t*>(w.raw_data()), k, j0, j1, 0.0f,
                         py, n);
        }
      };
      if (ctx.num_threads() > 1 && m * n * k >= kMinParallelGemv) {
        ctx.ParallelFor(n, 16, gemv);
      } else {
        gemv(0, n);
      }
      return absl::OkStatus();
    }
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(static_cast<size_t>(n * k) * sizeof(float)));
    float* wf = static_cast<float*>(ws);
    if (i8) {
      cpu::DequantizeRowsI8(k, w.data<int8_t>(), k, scale->data<float>(), 0, n, wf);
    } else {
      cpu::DequantizeRowsBf16(k, static_cast<const uint16_t*>(w.raw_data()), k, 0, n, wf);
    }
    SetThreads(ThreadsFor(ctx.num_threads(), m * n * k));
    return FromDnnl(dnnl_sgemm('N', 'T', m, n, k, 1.0f, pa, k, wf, k, 0.0f, py, n), "dnnl_sgemm");
  }
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateQMatMul(const KernelSpec& spec) {
  if (spec.inputs.empty() || spec.inputs[0].dtype != static_cast<uint8_t>(DType::kF32)) {
    return absl::UnimplementedError("QMatMul: the oneDNN kernel takes f32 activations only");
  }
  return std::make_unique<QMatMulKernel>(KernelName(spec, QuantizedWeightPath(spec)));
}

}  // namespace

void RegisterQuantizedWeightKernels(KernelRegistry& r) {
  r.Register(KernelRegistration{"dynvm", "QMatMul", Device::kCPU, kBackend, kDnnlPriority,
                                &CreateQMatMul});
}

}  // namespace dynvm::onednn
