// dynvm::QMatMul (weight-only quantized MatMul/Gemm, kernels/reference/qweights.cc) on the
// oneDNN backend: activation rows that choice::UseQGemv takes (a decode step, a few beams) run the
// direct int8/bf16 microkernels (kernels/cpu/qgemv.h: the weights are read once; from
// kMinParallelGemv multiply-adds the output rows are split across the VM's pool); more rows
// dequantize W once per call into the site's workspace and run dnnl_sgemm (the weights are then
// reused M times, so widening them once costs less than widening them per row).
//
// Tuning notes (moved here from docs/kernels.md with the code's move to kernels/cpu/; the
// figures are those of the records named):
//
// Kernels (kernels/cpu/qgemv.h, qmatmul.cc, rnn.cc). Up to kQuantSmallRows = 8 activation rows (a
// decode step, a few beams) run a direct kernel that reads each weight row once from memory,
// written over an output-row range [r0, r1) so that a thread pool can split N. The path is chosen
// once by the CPU (explicit intrinsics):
// - AVX-512: each weight is widened to f32 in registers (int8: sign-extend and convert, times the
//   row's scale after the sum; bf16: shift into the upper half of an f32), four output rows' FMA
//   chains side by side with the activation rows in L1; with one activation row sixteen output rows
//   side by side, summed by one transpose-and-add tree (16 lanes, masked tails).
// - AVX2+FMA (no VNNI, no AVX512_BF16): widening costs two or three instructions per 8 weights,
//   which is what the narrower bytes save once the weights are in cache (a 5 MB f32 LSTM sits in a
//   32 MB L3), so neither type is widened to f32. int8: each activation row is rounded once per
//   call to 16-bit fixed point, x ~ s * q with s = max_i |x[i]| / 32767 and integer |q| <= 32767;
//   16 weights at a time are sign-extended to int16 and multiplied with the rounded activations
//   into int32 pair sums (vpmaddwd: 16 multiply-adds in about three instructions); the sums are
//   scaled by s * scale[j] at the end. A pair sum is below 2^23 and a lane adds one per 16 columns,
//   so a lane cannot overflow int32 within 2048 columns: the lanes are converted to f32 before they
//   are summed, and longer rows are summed 2048 columns at a time. Activation rows go in groups of
//   four; a group with a row holding NaN or infinity, or whose largest magnitude is below 2^-100,
//   is not rounded (it runs the f32 widening kernel, so NaN and infinity propagate as in f32).
//   bf16: 16 weights are one 256-bit load of 8 32-bit pairs; the odd element of a pair is an f32
//   once the lower half is masked off, the even one once shifted up, and each activation row is
//   split once per call into even and odd columns, so no weight is shuffled or widened. Both run
//   eight output rows per block with one activation row (four with two, two with three or four),
//   sum the block with one transpose-and-add tree, and prefetch the weight rows two blocks ahead (a
//   decode step's weights come from L3, and rows of a few hundred bytes are too short for the
//   hardware prefetcher's streams to start).
// - Scalar: f32 accumulation over widened weights (the tests' fallback oracle).
//
// The AVX2 int8 path's rounding of the activations is the one change to the arithmetic: each output
// then differs from the f32 product of the same weights by at most (1/2 + 2^-7) * s * scale[j] *
// sum_i |q[j, i]| beyond f32 rounding (half a step of the row's 16-bit grid, plus the f32 rounding
// of x / s): relative to the row's largest activation about 2^-16 per unit of weight magnitude, 2^8
// times finer than the int8 weights' own grid. QGemvI8RoundsActivations() says whether the path in
// use rounds; kernels/cpu/qgemv_test.cc checks every path the CPU has against a double-precision
// product with that bound on random sizes (K 1-300, tails of 1-15 columns, 1-9 activation rows, row
// ranges, beta 0 and 1), on long rows at the int32 extremes (K 2047-6151, weights -128/127, every
// activation +-32767) and on rows outside the int16 range (NaN, infinity, 1e-33, zeros, one element
// 1e37 beside ones); the QMatMul kernel against the reference with the bound at the test's sizes,
// and the QLSTM/QGRU/QRNN kernels for one step from a zero state with the bound carried through the
// gates (1.5 times it; more steps feed the error through R, bounded end to end by the quality tests
// below).
//
// More rows (a prompt's input projection, a batch, a GPT that recomputes its prefix) dequantize the
// weight once per call into the site's workspace and run dnnl_sgemm: at M > 8 the weight is reused
// M times. On the AVX2 machine dnnl_sgemm runs about 41 multiply-adds per ns against 20-37 for the
// direct int8 kernel (one vpmaddwd per cycle is its ceiling, the same 16 multiply-adds per cycle as
// two FMAs), so it wins from M of about 9-16 on small weights (64x256); on a 1024x256 weight the
// per-call dequantization keeps the direct kernel ahead up to a few dozen rows (a throwaway
// harness; the threshold stays 8 for every size). The LSTM/GRU/RNN kernel takes the quantized W and
// R through the same path as f32 (its per-step GEMVs become the direct kernel). The reference
// kernels (kernels/reference/qweights.cc) dequantize and run the f32 reference.
//
// Speed on an AVX2 machine (AMD EPYC, AVX2+FMA, no AVX-512 or VNNI; 2 CPUs shared with other
// builds, load average 3.5-3.8; python3 tools/bench/quant_bench.py --build build/release --rounds 7
// --repeat 5, docs/results/qgemv-qweights-2026-11-28.txt: 128 new tokens, 1 thread, 7 interleaved
// rounds; medians of per-round ratios to f32 tokens/s, ranges in brackets), against the same
// benchmark before the AVX2 paths above (docs/results/avx2-final-qweights-2026-11-28.txt, build
// 86bf524, idle machine):
//
// - LSTM LM (below): int8 / f32 2.05x (1.80-2.57); bf16 / f32 1.66x (1.43-2.03); before: int8, bf16
//   1.14x, 0.99x
// - GPT with a KV cache, d 256 (gpt_kv_256): int8 / f32 3.62x (2.70-4.03); bf16 / f32 2.58x
//   (2.20-3.79); before: int8, bf16 2.78x, 1.81x
// - GPT with a KV cache, d 64 (gpt_kv): int8 / f32 1.01x (0.91-1.04); bf16 / f32 0.99x (0.96-1.01);
//   before: int8, bf16 0.89x, 0.91x
// - the same tiny GPT without a KV cache (gpt): int8 / f32 0.98x (0.85-1.09); bf16 / f32 0.96x
//   (0.70-1.14); before: int8, bf16 0.80x, 0.79x
//
// There the LSTM's int8 step spends about 60% of its time in the int8 GEMV (perf). The GEMVs alone
// (build/release/kernels/dnnl_qgemv_benchmark, docs/results/qgemv-gemv-benchmark-2026-11-28.txt,
// CPU time): the LSTM step's five weights take 105 us in f32, 46 us in int8 (2.26x) and 59 us in
// bf16 (1.79x) from L3; one 1024x256 weight from L2 21.0, 7.1 and 13.6 us. At the 2.45 GHz the CPU
// reports, the int8 kernel issues about 0.9 vpmaddwd (16 multiply-adds each) per cycle from L2 and
// 0.7 from L3, the bf16 kernel about one FMA per cycle, half its bound (its AND and shift compete
// with the FMAs for ports), so bf16 gains mostly what f32 loses to reading L3. Two general fixes
// lifted the GPT without a KV cache: an unfused dynvm::Gelu (a compile that quantizes weights keeps
// products as MatMul, so no Linear takes the activation) ran on the reference kernel when the
// memory plan gave it its input's buffer, and it stopped the last-position narrowing
// (compiler/narrow_rows.cc), so the last block ran for every position; both now hold for any
// unfused Gelu, GeluTanh or Silu. What remains there is dnnl_sgemm on the dequantized weights (M up
// to 132: the same arithmetic as f32, plus the per-call dequantization) and the unfused bias Add.
//
// On an AVX-512 machine (Intel Xeon; python3 tools/bench/quant_bench.py --rounds 15 --repeat 5,
// docs/results/int8gpt-decode-2026-11-25.txt: 128 new tokens, 1 thread, 15 interleaved rounds on
// the 2-core VM while other engineers' builds ran, load average 5.3-5.4; medians of per-round
// ratios to f32 tokens/s, ranges in brackets; the ranges are wide because of that load):
//
// - LSTM LM (vocab 1000, embedding 128, hidden 256, 2 layers): weights (f32) 3.4 MB; int8 / f32
//   3.09x (1.46-3.15); bf16 / f32 1.52x (0.75-2.09)
// - GPT with a KV cache, d 256, 4 heads, 4 layers, vocab 1024 (gpt_kv_256): weights (f32) 13.6 MB;
//   int8 / f32 1.84x (1.13-3.05); bf16 / f32 1.37x (0.95-1.72)
// - GPT with a KV cache, d 64, 2 layers, vocab 256 (gpt_kv): weights (f32) 0.46 MB; int8 / f32
//   0.96x (0.88-1.97); bf16 / f32 0.97x (0.48-1.97)
// - the same tiny GPT without a KV cache (gpt): weights (f32) 0.46 MB; int8 / f32 0.91x
//   (0.55-1.10); bf16 / f32 0.91x (0.57-1.27)
//
// The models: tools/bench/export_bench_models.py (lstm, gpt: the comparison benchmark's) and
// tools/bench/export_gpt_kv.py (the KV-cache decoders: the prompt runs once, then every step feeds
// one token and carries each layer's past keys and values through the Loop as one tensor that grows
// by a position per step; dynvm compiles and runs them as exported, f32 tokens equal to PyTorch's).
// Weight-only quantization pays where a step is bound by reading the weights: the LSTM's and the
// KV-cache GPT's steps are GEMVs (M = 1) over weights larger than L2, and int8 reads a quarter of
// the bytes, bf16 half. It does not pay where the weights stay in L1/L2 (the tiny GPT's products
// are 16-64 KB): on AVX-512, widening each weight element in registers (int8: a sign-extension on
// the shuffle port and a conversion; bf16: an extension and a shift) then costs more than loading
// f32 from cache; on AVX2 the int16 and even/odd kernels break even. Without a KV cache the GPT's
// products have up to 132 rows and are bound by arithmetic (oneDNN's sgemm on the dequantized
// weights, the same FLOPs as f32, plus the per-call dequantization: 2.6% of the run in perf), so
// quantized weights cannot beat f32 there without narrower arithmetic (VNNI or AVX512_BF16 on
// narrowed activations, which would no longer be weight-only). The default --quantize-min-bytes
// keeps weights under 16 KB in f32; whether quantization pays for a model depends on its total
// weight size against the caches, not only on each weight's size. The bench's random LSTM has top-2
// logit gaps as small as 0.004, so its quantized greedy tokens differ from f32's after some steps
// (the char LM's, above, do not); the GPTs' stay equal to f32's or nearly so (int8: 96/128 for
// gpt_kv_256).
//
// Earlier record (docs/results/qweights-decode-2026-11-25.txt, 11 rounds, load average 14-19,
// before the KV-cache GPTs): LSTM int8 2.67x, bf16 1.72x; GPT without KV cache 0.91x / 0.93x.
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
    if (choice::UseQGemv(m, n, k, i8)) {
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
