// com.microsoft MatMulNBits with 4-bit weights on the oneDNN backend (kernels/cpu/q4gemv.h):
// up to kQuantSmallRows activation rows (a decode step, a few beams) run the direct 4-bit kernel
// (each weight read once; from kMinParallelGemv multiply-adds the output rows split across the
// VM's pool); more rows dequantize B chunk by chunk into packed panels and run dynvm's packed
// GEMM on each chunk (the same arithmetic, as ONNX Runtime's accuracy_level 0 does; Prefill
// below).
// accuracy_level 4 quantizes A to int8 per block and runs integer block products at any row
// count (RunInt8), ORT's CompInt8 arithmetic.
// Anything else (8-bit or f32 zero points, g_idx, strided or mistyped inputs, errors) goes to the
// reference kernel, which reports what is wrong.
#include <algorithm>

#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/packed_gemm.h"
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
  MatMulNBitsKernel(std::string name, int64_t k, int64_t n, int64_t block, bool int8_activations)
      : DnnlKernel(std::move(name)),
        k_(k),
        n_(n),
        block_(block),
        int8_activations_(int8_activations) {}

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
    if (int8_activations_) return RunInt8(ctx, w, m, pa, pb, py);
    if (m <= cpu::kQuantSmallRows) {
      auto gemv = [&](int64_t j0, int64_t j1) { cpu::QGemvQ4(m, pa, k_, w, pb, j0, j1, py, n_); };
      if (ctx.num_threads() > 1 && m * n_ * k_ >= kMinParallelGemv) {
        ctx.ParallelFor(n_, 16, gemv);
      } else {
        gemv(0, n_);
      }
      return absl::OkStatus();
    }
    return Prefill(ctx, w, m, pa, pb, py);
  }

 private:
  // accuracy_level 4, any row count: the rows of A quantized to int8 once (q4gemv.h), then the
  // integer-block kernel over the output rows split across the pool, all of A's rows in one call
  // (a prompt's rows run cpu::QGemvQ4Int8's blocked GEMM, which unpacks each weight panel once
  // per call and keeps its own tiles in L1 and L2).
  absl::Status RunInt8(KernelContext& ctx, const cpu::Q4Weights& w, int64_t m, const float* pa,
                       const float* pb, float* py) const {
    const int64_t row_bytes = cpu::Q8ActivationRowBytes(w);
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(static_cast<size_t>(m * row_bytes)));
    auto* xq = static_cast<uint8_t*>(ws);
    const bool parallel = ctx.num_threads() > 1 && m * n_ * k_ >= kMinParallelGemv;
    if (parallel && m > 1) {
      ctx.ParallelFor(m, 1, [&](int64_t r0, int64_t r1) {
        cpu::QuantizeActivationsQ8(r1 - r0, pa + r0 * k_, k_, w, xq + r0 * row_bytes);
      });
    } else {
      cpu::QuantizeActivationsQ8(m, pa, k_, w, xq);
    }
    auto gemv = [&](int64_t j0, int64_t j1) { cpu::QGemvQ4Int8(m, xq, w, pb, j0, j1, py, n_); };
    if (parallel) {
      ctx.ParallelFor(n_, 16, gemv);
    } else {
      gemv(0, n_);
    }
    return absl::OkStatus();
  }

  // More rows (a prompt): the weight dequantized straight into packed_gemm.h's panels of W^T
  // (cpu::DequantizeQ4ToPanels), one piece at a time (kChunkPanels panels over one depth block
  // of kDeepDepth of K) into the task's scratch, and multiplied by all of A's rows (packed once
  // per task) while the piece is in L2 (packed_gemm::MultiplyStreamed: depth blocks outermost, so
  // A's depth block stays in L2 too). The panels split over the pool in pairs (the AVX-512
  // kernel's two-panel tiles), so every weight, the 512-column K/V projections too, runs on every
  // thread. It replaced rows dequantized into a [4 MB, K] scratch for one dnnl_sgemm per chunk,
  // which packed A and the just-written B again per chunk and ran a weight of one chunk (N 512 at
  // K 2048) on one thread. Measured (Zen 4, 1 thread, K 2048 N 5632, 128 rows, vm-run medians,
  // unlocked): depth 1024 29.6-31 ms against 256 34 ms (C's passes; A of 128 x 256 fits L2
  // either way), chunks of 2, 8 and 16 panels within noise (K 5632: 2, 4, 8 all 29.4-30.4);
  // pieces of the whole K (depth innermost, chunk outermost) 45 ms: A came from L3 for each
  // chunk. The records: docs/results/int4-prefill-s11-2026-11-30.txt.
  absl::Status Prefill(KernelContext& ctx, const cpu::Q4Weights& w, int64_t m, const float* pa,
                       const float* pb, float* py) const {
    constexpr int64_t kChunkPanels = 8;  // a kColBlock: 512 KB of panels at the depth of 1024
    constexpr int64_t kPanel = cpu::packed_gemm::kPanel;
    const int64_t panels = (n_ + kPanel - 1) / kPanel, pairs = (panels + 1) / 2;
    const int64_t depth = std::min(k_, cpu::packed_gemm::kDeepDepth);
    const int64_t chunk_panels = std::min<int64_t>(kChunkPanels, pairs * 2);
    const int tasks =
        ctx.num_threads() > 1 && m * n_ * k_ >= kMinParallelGemm ? ctx.ParallelTasks(pairs, 1) : 1;
    const int64_t chunk_floats = chunk_panels * kPanel * depth;
    DYNVM_ASSIGN_OR_RETURN(
        void* ws, ctx.Workspace(static_cast<size_t>(tasks * chunk_floats) * sizeof(float)));
    float* scratch = static_cast<float*>(ws);
    auto run = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t p0 = std::min(panels, t * pairs / tasks * 2);
        const int64_t p1 = std::min(panels, (t + 1) * pairs / tasks * 2);
        if (p0 >= p1) continue;
        const int64_t c0 = p0 * kPanel, cols = std::min(n_, p1 * kPanel) - c0;
        float* wf = scratch + t * chunk_floats;
        auto produce = [&](int64_t j0, int64_t j1, int64_t i0, int64_t i1) {
          cpu::DequantizeQ4ToPanels(w, n_, p0 + j0 / kPanel, p0 + (j1 + kPanel - 1) / kPanel, i0,
                                    i1, wf);
          return static_cast<const float*>(wf);
        };
        auto epilogue = [&](int64_t r0, int64_t rows, int64_t j0, int64_t nc) {
          if (pb == nullptr) return;
          for (int64_t r = r0; r < r0 + rows; ++r) {
            float* y = py + r * n_ + c0 + j0;
            for (int64_t j = 0; j < nc; ++j) y[j] += pb[c0 + j0 + j];
          }
        };
        cpu::packed_gemm::MultiplyStreamed(0, m, cols, k_, pa, k_, chunk_panels * kPanel, produce,
                                           py + c0, n_, epilogue, depth);
      }
    };
    if (tasks > 1) {
      ctx.ParallelFor(tasks, 1, run);
    } else {
      run(0, 1);
    }
    return absl::OkStatus();
  }

  int64_t k_, n_, block_;
  bool int8_activations_;  // accuracy_level 4
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateMatMulNBits(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
  DYNVM_ASSIGN_OR_RETURN(int64_t k, spec.GetInt("K", -1));
  DYNVM_ASSIGN_OR_RETURN(int64_t n, spec.GetInt("N", -1));
  DYNVM_ASSIGN_OR_RETURN(int64_t bits, spec.GetInt("bits", 4));
  DYNVM_ASSIGN_OR_RETURN(int64_t block, spec.GetInt("block_size", -1));
  DYNVM_ASSIGN_OR_RETURN(int64_t accuracy, spec.GetInt("accuracy_level", 0));
  if (k <= 0 || n <= 0 || bits != 4 || block < 16 || block > 256 || (block & (block - 1)) != 0) {
    return absl::UnimplementedError(
        absl::StrCat("MatMulNBits: the oneDNN kernel runs bits 4, block ", "16..256 only (K ", k,
                     ", N ", n, ", bits ", bits, ", block_size ", block, ")"));
  }
  // ONNX Runtime runs accuracy_level 4 with int8 activations (CompInt8) and every other level in
  // f32 (levels 2 and 3 ask for f16 and bf16 arithmetic, which it does not use for f32 inputs).
  const bool int8 = accuracy == 4;
  return std::make_unique<MatMulNBitsKernel>(
      KernelName(spec, int8 ? cpu::QGemvQ4Int8Path() : cpu::QGemvQ4Path()), k, n, block, int8);
}

}  // namespace

void RegisterMatMulNBitsKernels(KernelRegistry& r) {
  r.Register(KernelRegistration{"com.microsoft", "MatMulNBits", Device::kCPU, kBackend,
                                kDnnlPriority, &CreateMatMulNBits});
}

}  // namespace dynvm::onednn
