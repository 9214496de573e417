// Fast paths of ONNX's quantization operators on the oneDNN CPU backend (docs/kernels.md,
// "Quantized operators"); the reference kernels (kernels/reference/misc.cc, quant.cc) are their
// oracle and serve every run these do not take.
//
// QuantizeLinear (f32 -> u8/i8) and DequantizeLinear (u8/i8 -> f32): microkernels
// (kernels/cpu/quantize.h), per tensor or per axis, over contiguous tensors.
// They compute exactly what the reference does: x / scale divided in f32, rounded half to even,
// plus the zero point, saturated; (x - zp) * scale is exact before its one rounding to f32.
//
// MatMulInteger and QLinearMatMul: an integer GEMM (u8 or s8 a, s8 b, s32 accumulation, the
// zero points taken out exactly) for a contiguous [..., M, K] a (its batch folded into M) times a
// contiguous 2-D [K, N] b, with per-tensor zero points (or per-channel ones holding one repeated
// value, as symmetric weights' zeros do). A u8 b is shifted to s8 in the workspace, its zero
// point with it. M = 1 runs kernels/cpu/igemm.h's GEMV (b streamed once, no packing; oneDNN's
// integer GEMM packs b on every call, slower than f32 sgemm there), on any CPU. M >= 2 runs
// oneDNN's integer GEMM (dnnl_gemm_u8s8s32 / _s8s8s32, the zero points as its A and B offsets) on
// CPUs with VNNI (avx512_core_vnni, avx2_vnni), and the VNNI-free GEMM of igemm.h (s16 x s16
// vpmaddwd on operands packed less their zero points, on the pool) elsewhere: without VNNI oneDNN's
// u8 x s8 kernels may saturate in 16-bit intermediates. QLinearMatMul then requantizes each s32 row
// with a vector loop (b_scale per tensor or per column) in double, as the reference does, so
// results are identical.
//
// DynamicQuantizeLinear: cpu::MinMax for the parameters, then cpu::QuantizeU8 (the reference's
// bits; an infinity goes to the reference).
//
// DynamicQuantizeMatMul (com.microsoft; ONNX Runtime's quantize_dynamic form, fused by the
// dynquant_matmul rewrite): A f32 quantized to u8 as DynamicQuantizeLinear does (cpu::MinMax,
// cpu::QuantizeU8), the u8 x s8 product (a constant B, marked constant_weights by the compiler,
// packed once for cpu::U8S8Gemm's VPDPBUSD on CPUs with avx512_vnni; otherwise IntProduct, the
// same GEMMs as MatMulInteger), the zero points taken out exactly in s32 and the scaling and bias
// applied by cpu::ScaleAccRow: the unfused program's bits (DynQuantMatMulKernel below).
//
// ConvInteger and QLinearConv (CreateIm2ColConv, the fallback of qconv.cc's int8 convolution
// primitive, and all it serves on a CPU without VNNI): 1-D or 2-D, any group, explicit, VALID
// or SAME pads, s8 w; per batch item and group, im2col into s8 columns (a u8 x shifted by 128,
// padding holding the zero point), then the same integer GEMM (oneDNN's with VNNI, igemm.h's
// without, w packed once per run). Exact at every magnitude and takes non-zero weight zero
// points, but slower than oneDNN's f32 convolution (columns built and packed on every call).
//
// K is capped so that no s32 sum can overflow (the reference wraps). Anything else (per-row or
// differing per-column zero points, broadcast batches, 3-D convolutions, u8 conv weights) runs
// the reference.
//
// Every run checks the scales and zero points (kernels/quant_params.h) before using them; a bad
// one goes to the reference kernel, whose error names it.
//
// Tuning notes (moved here from docs/kernels.md with the code's move to kernels/cpu/; the
// figures are those of the records named):
//
// Fast paths (kernels/dnnl/quant.cc, registered on the dnnl backend; the reference kernels serve
// every run they do not take, counted as fallbacks):
//
// - QuantizeLinear: fast path vector loop (DYNVM_CLONES: AVX-512, AVX2, baseline); takes f32 x, f32
//   scale, u8/i8 output, per tensor or per axis, contiguous
// - DequantizeLinear: fast path vector loop; takes u8/i8 x, f32 scale, zp of x's type, per tensor
//   or per axis, contiguous
// - MatMulInteger: fast path M >= 2: oneDNN dnnl_gemm_u8s8s32 / dnnl_gemm_s8s8s32 with VNNI,
//   kernels/cpu/igemm.cc without (below); M = 1: igemm.cc's GEMV (any CPU); takes u8 or s8 a [...,
//   M, K] (batch folded into M), s8 b [K, N] (a u8 b is shifted to s8 in the workspace, its zero
//   point with it), per-tensor zero points (or per-column ones holding one repeated value), K <
//   33025
// - QLinearMatMul: fast path the same GEMM, then a vector loop requantizing each s32 row in double;
//   takes as MatMulInteger, f32 scales, b_scale per tensor or per column
// - ConvInteger, QLinearConv: fast path kernels/dnnl/qconv.cc: oneDNN's int8 convolution primitive
//   (u8/s8 src, s8 weights, s32 result; the x zero point as its run-time source zero point; layouts
//   of oneDNN's choosing, reorders in the workspace, bound per site and shape); QLinearConv's
//   bias and requantization inside the primitive, in f32 as ONNX Runtime's (qconv.cc; one step
//   off the double reference only at f32 rounding ties), u8/s8 y, channels-last in chains;
//   takes 1-3 spatial dims, any group, strides, dilations, explicit, VALID or SAME pads; s8 w
//   with zero point 0 (absent, or all zeros per channel); per-tensor x zero point; f32 scales,
//   w_scale per tensor or per output channel; ConvInteger: every sum below 2^24 in magnitude
// - (their fallback; everything on a CPU without VNNI): fast path kernels/dnnl/quant.cc: per batch
//   item and group, im2col into s8 columns (a u8 x shifted by 128, padding holding the zero point),
//   then dnnl_gemm_s8s8s32 with VNNI or igemm.cc's GEMM without (w packed once per run),
//   requantized the same way; takes 1-D or 2-D, any group, strides, dilations, explicit, VALID or
//   SAME pads, s8 w with a per-tensor (or repeated per-channel) zero point
//
// They compute exactly what the reference kernels do (the quantize loop divides in f32 and rounds
// half to even; the requantization multiplies in double), so kernels_dnnl_quant_test compares them
// bit for bit on varied shapes, rounding ties, u8/s8 activations, per-axis and per-column
// parameters, and asserts who served each case. oneDNN's integer GEMM and int8 convolution run only
// where oneDNN reports VNNI (avx512_core_vnni, avx2_vnni): without it their u8 x s8 kernels use
// vpmaddubsw, which saturates 16-bit intermediates. Elsewhere (AMD Zen 2/3, older Intel servers)
// the products run on kernels/cpu/igemm.cc, exact without VNNI: both operands are packed less
// their zero points as s16 (|value| <= 255), b in panels of 16 columns with K pairs interleaved,
// and an AVX2 micro-kernel (explicit intrinsics, chosen once by the microkernel level; a scalar
// path otherwise) keeps 4 rows x 16 columns of s32 sums in registers, each vpmaddwd adding two
// exact products per lane. It runs on the VM's pool (ctx.ParallelFor) at more than one thread for
// products of 4M multiply-adds and more (b's panels split, or a's rows when there are few panels).
// The M >= 2 MatMulInteger/QLinearMatMul products and all the 1-D/2-D integer convolutions
// (qconv.cc hands them to the im2col kernel) take it; 3-D integer convolutions still run the
// reference there. kernels_dnnl_igemm_test checks it (every path the CPU has) against a 64-bit
// scalar oracle over random M, K, N with ragged tails, u8 and s8 a, non-zero zero points,
// sub-ranges, and K at the cap with every term at +-255 * 255; kernels_dnnl_quant_test and
// kernels_dnnl_qconv_test require it to serve on a CPU without VNNI (the im2col kernel is also run
// on its own on any CPU). onnx_conformance_dnnl requires the dnnl kernels to bind for the
// quantize/dequantize, test_matmulinteger and test_qlinearmatmul_* cases. Not on the fast path yet:
// per-row zero points and per-column ones that differ, broadcast batches of b; convolutions with u8
// weights; a non-zero weight zero point on the primitive (oneDNN 2.6 has no weight zero points:
// those run the im2col fallback when 1-D or 2-D, else the reference).
//
// The int8 convolution primitive is exact: oneDNN's int8 kernels take the zero point out in
// integers but convert the s32 sum to f32 before storing it, exact below 2^24; the rounding is
// monotonic, so a stored magnitude below 2^24 is the exact sum. Every run checks the stored sums
// (one pass) and redoes a run holding one of 2^24 or more with the im2col fallback, which is exact
// at every magnitude (real layers' sums stay far below; the test builds one that does not). 3-D
// convolutions with padding and a non-zero x zero point also take the fallback: oneDNN 2.6.3 gets
// their padded border wrong (found by kernels_dnnl_qconv_test). kernels_dnnl_qconv_test compares
// the primitive with the reference kernel bit for bit over 60 random convolutions (1-3 spatial
// dims, groups, strides, pads, SAME, dilations, u8/i8 x and y, non-zero zero points, per-tensor and
// per-channel w scales, with and without bias) and asserts who served each.
//
// At M = 1 the int8 product is igemm.cc's GEMV over b, on any CPU (oneDNN's integer GEMM packs b on
// every call, which made it slower than the f32 sgemm there; the GEMV streams b once, two rows at a
// time widened to s16 and interleaved in registers for vpmaddwd). On a CPU with VNNI, measured by
// dnnl_quant_benchmark (docs/results/qops-int8-kernels-2026-11-25.txt; 1 thread, CPU time, K = N =
// 1024, load average ~15 from other builds): QLinearMatMul runs 2.1x (M = 1), 1.5x (M = 16) and
// 2.5x (M = 64) the speed of the f32 MatMul it replaces, and 70x (M = 1) to 330x (M = 16) the
// reference kernel's; QuantizeLinear 42x and DequantizeLinear 52x the reference loops (1M
// elements). QLinearConv on the int8 convolution primitive (/usr/bin/python3
// tools/bench/qconv_bench.py --rounds 7 --repeat 10, docs/results/qconv-int8-conv-2026-11-25.txt: 1
// thread, batch 1, medians of 7 interleaved rounds, load average 0.1) runs 3.72x the speed of
// oneDNN's f32 Conv at [1, 64, 56, 56] by 64 3x3, 3.40x at 128 x 28x28, 1.47x at 256 x 14x14, 2.96x
// at 128 x 56x56 stride 2 and 1.37x for a 1x1 1024 -> 256 at 14x14, but only 0.47x at 512 x 7x7
// 3x3: the weights are reordered (packed, with oneDNN's compensation) on every run, 2.4 MB there
// against 25k output pixels; packing constant weights once, as the f32 FusedConv does, is the next
// step. Against the im2col path QLinearConv took before: 11.8x, 6.3x, 1.6x, 0.33x, 4.6x, 1.2x. No
// comparison with ONNX Runtime's int8 kernels is recorded yet.
//
// On the development machine (AMD EPYC, AVX2 and FMA, no AVX-512, no VNNI), before igemm.cc every
// integer MatMul and convolution there ran the reference kernel. dnnl_quant_benchmark, the lead
// branch's build against this one's interleaved
// (docs/results/int8avx2-quant-benchmark-2026-11-28.txt: 1 thread, CPU time, K = N = 1024, two
// rounds, load average ~2): QLinearMatMul took 17-18 ms (M = 1), 233-287 ms (M = 16) and 1.15 s (M
// = 64) before and 68-80 us, 0.45-0.66 ms and 1.33-2.35 ms after (230x to 860x); that is 12x (M =
// 1), 1.6-2.2x (M = 16) and 1.6-2.9x (M = 64) the speed of the f32 MatMul in the same runs.
// QLinearConv [1, 64, 28, 28] by 64 3x3: 340 ms before, 1.13-1.43 ms after, 0.7-0.8x oneDNN's f32
// Conv (vpmaddwd does 16 products per instruction, as many as an f32 FMA, so without VNNI the int8
// convolution gains only memory, and pays for im2col and packing on every call).
// tools/bench/qdq_gemm_bench.py --rounds 5 --repeat 20
// (docs/results/int8avx2-qdq-gemm-bench-2026-11-28.txt): the fused QDQ Linear runs 1.38x (M = 1),
// 1.64x (M = 16) and 1.47x (M = 64) the speed of the unfused f32 program.
// tools/bench/qconv_bench.py --rounds 3 --repeat 10
// (docs/results/int8avx2-qconv-bench-2026-11-28.txt: both int8 forms on the im2col kernel here):
// QLinearConv runs 0.83x to 1.14x the f32 Conv's speed over its six ResNet-like shapes.
//
// QDQ fusion. The qdq_matmul rewrite (docs/compiler.md, "Pattern rewrites") turns
// DequantizeLinear(x), DequantizeLinear(w) -> MatMul -> QuantizeLinear, with per-channel weight
// scales, into one QLinearMatMul, which runs on the int8 GEMM above. qdq_gemm does the same for a
// Gemm (transA 0, alpha 1, beta 1, either transB; a transposed constant weight is folded once at
// compile time): without a bias it becomes QLinearMatMul; with an f32 bias, MatMulInteger on the
// int8 GEMM, then Cast, the product of the scales, the bias and QuantizeLinear as vector loops
// (rewrite_qdq_test: M 1/5, K 1/16/37, N 1/8/19, both transB, with and without bias, u8/i8 x,
// per-tensor and per-channel w, against the unfused program). A Linear layer in QDQ form (x u8 [M,
// 1024], w i8 [1024, 1024] per channel, transB 1, bias) runs 1.68x (M = 1), 1.62x (M = 16) and
// 2.35x (M = 64) the speed of the unfused DequantizeLinear + f32 Gemm + QuantizeLinear, with equal
// outputs (/usr/bin/python3 tools/bench/qdq_gemm_bench.py --rounds 11 --repeat 20,
// docs/results/int8gpt-qdq-gemm-2026-11-25.txt: 1 thread, medians of 11 interleaved rounds, load
// average 6.7 from other builds). qdq_conv does the same for a Conv (w per tensor or per output
// channel, axis 0; groups, strides, pads and dilations kept): without a bias it becomes
// QLinearConv, with an f32 bias (or the DequantizeLinear of an int32 one, which quantizers write)
// ConvInteger, then Cast, the per-channel product of the scales, the bias and QuantizeLinear, both
// on the int8 convolution above (rewrite_qdq_test ConvFusesAcrossShapes: 24 cases of groups
// 1/2/depthwise, 1x1 and 3x3 kernels, stride 2, pads, u8/i8 x, per-tensor and per-channel w, biases
// of both forms, within one quantization step of the unfused program; near misses: w per input
// channel, dequantized weights read elsewhere). No timing of the fused form against the unfused one
// is recorded; the int8 convolution's own speed is the table above. Not fused yet: QDQ chains whose
// output stays f32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/channels_last.h"
#include "kernels/cpu/igemm.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/u8s8_gemm.h"
#include "kernels/dnnl/choice.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/parallel_loops.h"
#include "kernels/dnnl/quant_common.h"
#include "kernels/quant_params.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

// n values from x at stride `stride` into y, a u8 x shifted by 128 to s8 (x ^ 0x80).
inline void CopyRowU8(int64_t n, const uint8_t* x, int64_t stride, int8_t* y) {
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int8_t>(x[i] ^ 0x80);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int8_t>(x[i * stride] ^ 0x80);
  }
}

inline void CopyRowS8(int64_t n, const int8_t* x, int64_t stride, int8_t* y) {
  if (stride == 1) {
    std::copy(x, x + n, y);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i * stride];
  }
}

// A zero point of type `t` holding one value (a scalar, or a per-channel vector of one
// repeated value: the zeros of a symmetric per-channel weight).
bool UniformZeroPoint(const Tensor& z, DType t) {
  if (z.dtype() != t || z.rank() > 1 || z.numel() < 1 || !z.is_contiguous()) return false;
  for (int64_t i = 1; i < z.numel(); ++i) {
    if (QuantParamAt(&z, i) != QuantParamAt(&z, 0)) return false;
  }
  return true;
}

// |(a - za)(b - zb)| <= 255 * 255 per term: K below this keeps every s32 sum exact.
inline constexpr int64_t kMaxExactK = cpu::kIGemmMaxK;

// c [m, n] (row stride ldc) = (a - za) x (b - zb) on the VNNI-free GEMM (igemm.h): a u8 or s8
// [m, k] (row stride lda), b s8 [k, n] (row stride n). pa holds IGemmPackedABytes(m, k) bytes
// (a packed there first when pack_a, else already packed: a and za are then unused), pb
// IGemmPackedBBytes(k, n). On the pool when the product is big enough: b's panels split among
// the threads, or a's rows when there are few panels.
void IntGemm(const KernelContext& ctx, int64_t m, int64_t k, int64_t n, const void* a, bool a_u8,
             int64_t lda, int32_t za, bool pack_a, int16_t* pa, const int8_t* b, int32_t zb,
             int16_t* pb, int32_t* c, int64_t ldc) {
  const int64_t panels = cpu::IGemmPanels(n);
  const int threads = ThreadsFor(ctx.num_threads(), m * n * k);
  if (threads == 1) {
    if (pack_a) cpu::IGemmPackA(k, a, a_u8, lda, za, 0, m, pa);
    cpu::IGemmPackB(k, n, b, n, zb, 0, panels, pb);
    cpu::IGemmCompute(k, n, pa, pb, 0, m, 0, panels, c, ldc);
    return;
  }
  if (pack_a) {
    ctx.ParallelFor(
        m, 4, [&](int64_t i0, int64_t i1) { cpu::IGemmPackA(k, a, a_u8, lda, za, i0, i1, pa); });
  }
  ctx.ParallelFor(panels, 1,
                  [&](int64_t p0, int64_t p1) { cpu::IGemmPackB(k, n, b, n, zb, p0, p1, pb); });
  if (panels >= 2 * threads || m < 8 * threads) {
    ctx.ParallelFor(panels, 1, [&](int64_t p0, int64_t p1) {
      cpu::IGemmCompute(k, n, pa, pb, 0, m, p0, p1, c, ldc);
    });
  } else {
    ctx.ParallelFor(m, 4, [&](int64_t i0, int64_t i1) {
      cpu::IGemmCompute(k, n, pa, pb, i0, i1, 0, panels, c, ldc);
    });
  }
}

// Offsets in a workspace: 64-byte steps.
inline size_t AlignUp(size_t bytes) { return (bytes + 63) & ~size_t{63}; }

// The scratch IntProduct needs: at M = 1, a less its zero point (s16); without VNNI (M >= 2),
// the packed operands of IntGemm.
size_t IntProductScratchBytes(int64_t m, int64_t k, int64_t n) {
  if (m == 1) return cpu::IGemmPackedABytes(1, k);
  if (choice::UseIGemm(m, n, k)) return cpu::IGemmPackedABytes(m, k) + cpu::IGemmPackedBBytes(k, n);
  return 0;
}

// acc [m, n] = (a - za) x (b - bo), exact: a u8 or s8 [m, k] (contiguous), b s8 [k, n], k below
// kMaxExactK. M = 1: igemm.h's GEMV (b streamed once); M >= 2: oneDNN's integer GEMM with VNNI,
// IntGemm without. `scratch` (64-byte aligned) holds IntProductScratchBytes(m, k, n).
absl::Status IntProduct(const KernelContext& ctx, const char* op, int64_t m, int64_t k, int64_t n,
                        const void* a, bool a_u8, int32_t za, const int8_t* b, int32_t bo,
                        int32_t* acc, uint8_t* scratch) {
  if (m == 1) {  // a less its zero point as s16, then b streamed once
    int16_t* pa = reinterpret_cast<int16_t*>(scratch);
    cpu::IGemmPackA(k, a, a_u8, k, za, 0, 1, pa);
    const int64_t grain = ThreadsFor(ctx.num_threads(), n * k) == 1 ? n : 64;
    ctx.ParallelFor(n, grain,
                    [&](int64_t j0, int64_t j1) { cpu::IGemv(k, pa, b, n, bo, j0, j1, acc); });
    return absl::OkStatus();
  }
  if (choice::UseIGemm(m, n, k)) {
    int16_t* pa = reinterpret_cast<int16_t*>(scratch);
    int16_t* pb = reinterpret_cast<int16_t*>(scratch + cpu::IGemmPackedABytes(m, k));
    IntGemm(ctx, m, k, n, a, a_u8, k, za, true, pa, b, bo, pb, acc, n);
    return absl::OkStatus();
  }
  SetThreads(ThreadsFor(ctx.num_threads(), m * n * k));
  ParkPoolForOpenMp(ctx);
  const int32_t co = 0;
  const dnnl_status_t st =
      a_u8 ? dnnl_gemm_u8s8s32('N', 'N', 'F', m, n, k, 1.0f, static_cast<const uint8_t*>(a), k,
                               static_cast<uint8_t>(za), b, n, static_cast<int8_t>(bo), 0.0f, acc,
                               n, &co)
           : dnnl_gemm_s8s8s32('N', 'N', 'F', m, n, k, 1.0f, static_cast<const int8_t*>(a), k,
                               static_cast<int8_t>(za), b, n, static_cast<int8_t>(bo), 0.0f, acc, n,
                               &co);
  return FromDnnl(st, op);
}

// With more than one thread, from kMinParallelMinMax elements (about 10 us of scanning) x's
// min and max are scanned on the pool in blocks of half that and combined: the same values as one
// scan (min and max do not depend on the order); a non-finite one in any block is still false.
constexpr int64_t kMinParallelMinMax = int64_t{1} << 16;

// DynamicQuantizeLinear's parameters of x [n]: the scale (max(0, max x) - min(0, min x)) / 255
// in f32 (the range rounded first) and the zero point round_half_even(-min / scale) clamped to
// u8, 0 when the scale is 0 (x all zeros). False when x holds an infinity (or a NaN the lanes
// kept): the reference kernel serves it.
bool DynamicQuantParams(const KernelContext& ctx, int64_t n, const float* x, float* scale,
                        float* zero_point) {
  float lo = 0, hi = 0;
  if (ctx.num_threads() > 1 && n >= kMinParallelMinMax) {
    constexpr int64_t kBlock = kMinParallelMinMax / 2;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    std::vector<float> los(static_cast<size_t>(blocks)), his(static_cast<size_t>(blocks));
    ctx.ParallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        cpu::MinMax(std::min(kBlock, n - b * kBlock), x + b * kBlock, &los[b], &his[b]);
      }
    });
    lo = los[0];
    hi = his[0];
    for (int64_t b = 0; b < blocks; ++b) {
      if (!std::isfinite(los[b]) || !std::isfinite(his[b])) return false;
      lo = std::min(lo, los[b]);
      hi = std::max(hi, his[b]);
    }
  } else {
    cpu::MinMax(n, x, &lo, &hi);
  }
  if (!std::isfinite(lo) || !std::isfinite(hi)) return false;
  lo = std::min(lo, 0.0f);
  hi = std::max(hi, 0.0f);
  *scale = (hi - lo) / 255.0f;
  *zero_point = *scale == 0 ? 0.0f : std::clamp(std::nearbyint(-lo / *scale), 0.0f, 255.0f);
  return true;
}

// ---- QuantizeLinear / DequantizeLinear ----

class QuantKernel final : public DnnlKernel {
 public:
  QuantKernel(std::string name, bool quantize, int64_t axis)
      : DnnlKernel(std::move(name)), quantize_(quantize), axis_(axis) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(
        CheckPresent(in, 2, out, quantize_ ? "QuantizeLinear" : "DequantizeLinear"));
    const Tensor& x = *in[0];
    const Tensor& scale = *in[1];
    const Tensor* zp = in.size() > 2 ? in[2] : nullptr;
    // The shapes and dtypes the loops take; anything else (and every bad parameter, whose
    // error the reference kernel reports) runs the reference.
    const DType q = quantize_ ? (zp != nullptr ? zp->dtype() : DType::kU8) : x.dtype();
    const bool types_ok = quantize_ ? x.dtype() == DType::kF32 && Is8Bit(q)
                                    : Is8Bit(x.dtype()) && (zp == nullptr || zp->dtype() == q);
    if (!types_ok || scale.dtype() != DType::kF32 || scale.rank() > 1 || !x.is_contiguous() ||
        !scale.is_contiguous() ||
        (zp != nullptr && (!zp->is_contiguous() || zp->numel() != scale.numel())) ||
        (out[0]->defined() && out[0]->dtype() != (quantize_ ? q : DType::kF32)) ||
        !CheckQuantScale(scale, "scale").ok()) {
      return RunFallback(ctx, in, out);
    }
    int64_t outer = 1, channels = 1, inner = x.numel();
    if (scale.numel() != 1) {
      const int64_t axis = axis_ < 0 ? axis_ + x.rank() : axis_;
      if (axis < 0 || axis >= x.rank() || x.dim(static_cast<int>(axis)) != scale.numel()) {
        return RunFallback(ctx, in, out);
      }
      channels = scale.numel();
      inner = 1;
      for (int d = static_cast<int>(axis) + 1; d < x.rank(); ++d) inner *= x.dim(d);
      outer = channels * inner == 0 ? 0 : x.numel() / (channels * inner);
    }
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], quantize_ ? q : DType::kF32,
                                                   x.dims(), "QuantizeLinear"));
    // Elements [i0, i1) of the flat tensor, row by row (a row: `inner` elements of one
    // channel). Elementwise, so the split does not change a bit.
    auto range = [&](int64_t i0, int64_t i1) {
      while (i0 < i1) {
        const int64_t row = i0 / inner, end = std::min(i1, (row + 1) * inner);
        const int64_t c = row % channels;
        const float s = QuantParamAt(&scale, c), z = QuantParamAt(zp, c);
        if (!quantize_) {
          float* y = out[0]->data<float>() + i0;
          if (q == DType::kU8) {
            cpu::DequantizeU8(end - i0, x.data<uint8_t>() + i0, s, z, y);
          } else {
            cpu::DequantizeI8(end - i0, x.data<int8_t>() + i0, s, z, y);
          }
        } else if (q == DType::kU8) {
          cpu::QuantizeU8(end - i0, x.data<float>() + i0, s, z, out[0]->data<uint8_t>() + i0);
        } else {
          cpu::QuantizeI8(end - i0, x.data<float>() + i0, s, z, out[0]->data<int8_t>() + i0);
        }
        i0 = end;
      }
    };
    const int64_t n = outer * channels * inner;
    if (n == 0) return absl::OkStatus();
    // From kMinParallelElements (a QDQ CNN's activations at 112x112 and up) in 16K blocks.
    constexpr int64_t kBlock = 16384;
    ctx.ParallelFor(n, n < kMinParallelElements ? n : kBlock, range);
    return absl::OkStatus();
  }

 private:
  bool quantize_;
  int64_t axis_;
};

// ---- MatMulInteger / QLinearMatMul ----

class IntMatMulKernel final : public DnnlKernel {
 public:
  IntMatMulKernel(std::string name, bool qlinear)
      : DnnlKernel(std::move(name)), qlinear_(qlinear) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    const char* op = qlinear_ ? "QLinearMatMul" : "MatMulInteger";
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, qlinear_ ? 8 : 2, out, op));
    auto at = [&](size_t i) -> const Tensor* { return i < in.size() ? in[i] : nullptr; };
    const Tensor& a = *in[0];
    const Tensor& b = *in[qlinear_ ? 3 : 1];
    const Tensor* za = at(2);
    const Tensor* zb = at(qlinear_ ? 5 : 3);
    if (!Usable(a, b, za, zb) || (qlinear_ && !UsableScales(in, b.dim(1)))) {
      return RunFallback(ctx, in, out);
    }
    const int64_t k = a.dim(a.rank() - 1), n = b.dim(1), m = a.numel() / k;
    reference::Dims dims(a.dims().begin(), a.dims().end());
    dims.back() = n;
    const DType out_dtype = qlinear_ ? in[7]->dtype() : DType::kI32;
    if (out[0]->defined() && out[0]->dtype() != out_dtype) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], out_dtype, dims, op));
    // Workspace: QLinearMatMul's n requantization factors and s32 product; a u8 b shifted to
    // s8; then IntProduct's scratch.
    const bool shift_b = b.dtype() == DType::kU8;
    const size_t scale_bytes = qlinear_ ? static_cast<size_t>(n) * sizeof(double) : 0;
    const size_t acc_bytes = qlinear_ ? static_cast<size_t>(m * n) * sizeof(int32_t) : 0;
    const size_t b_bytes = shift_b ? static_cast<size_t>(k * n) : 0;
    const size_t head = AlignUp(scale_bytes + acc_bytes + b_bytes);
    DYNVM_ASSIGN_OR_RETURN(
        void* ws, ctx.Workspace(std::max<size_t>(head + IntProductScratchBytes(m, k, n), 1)));
    uint8_t* base = static_cast<uint8_t*>(ws);
    double* scale = reinterpret_cast<double*>(base);
    int32_t* acc =
        qlinear_ ? reinterpret_cast<int32_t*>(base + scale_bytes) : out[0]->data<int32_t>();
    const int8_t* bs8 = b.data<int8_t>();
    int bo = static_cast<int>(QuantParamAt(zb, 0));
    if (shift_b) {  // (b - zb) = ((b - 128) - (zb - 128)): both fit s8
      int8_t* shifted = reinterpret_cast<int8_t*>(base + scale_bytes + acc_bytes);
      cpu::ShiftU8ToS8(k * n, b.data<uint8_t>(), shifted);
      bs8 = shifted;
      bo -= 128;
    }
    DYNVM_RETURN_IF_ERROR(IntProduct(ctx, op, m, k, n, a.raw_data(), a.dtype() == DType::kU8,
                                     static_cast<int32_t>(QuantParamAt(za, 0)), bs8, bo, acc,
                                     base + head));
    if (qlinear_) Requantize(in, m, n, acc, scale, *out[0]);
    return absl::OkStatus();
  }

 private:
  // a [..., M, K] and b [K, N] u8/s8, contiguous, with per-tensor zero points of their types.
  static bool Usable(const Tensor& a, const Tensor& b, const Tensor* za, const Tensor* zb) {
    if (!Is8Bit(a.dtype()) || !Is8Bit(b.dtype()) || a.rank() < 2 || b.rank() != 2 ||
        !a.is_contiguous() || !b.is_contiguous() || a.numel() == 0 || b.numel() == 0) {
      return false;
    }
    const int64_t k = a.dim(a.rank() - 1);
    if (k != b.dim(0) || k >= kMaxExactK) return false;
    for (auto [z, t] : {std::pair{za, a.dtype()}, std::pair{zb, b.dtype()}}) {
      if (z != nullptr && !UniformZeroPoint(*z, t)) return false;
    }
    return true;
  }

  // f32 scales: a_scale and y_scale per tensor, b_scale per tensor or per column; all valid.
  static bool UsableScales(Inputs in, int64_t n) {
    const Tensor &as = *in[1], &bs = *in[4], &ys = *in[6], &yz = *in[7];
    for (const Tensor* s : {&as, &bs, &ys}) {
      if (s->dtype() != DType::kF32 || s->rank() > 1 || !s->is_contiguous() ||
          !CheckQuantScale(*s, "scale").ok()) {
        return false;
      }
    }
    return as.numel() == 1 && ys.numel() == 1 && (bs.numel() == 1 || bs.numel() == n) &&
           yz.numel() == 1 && yz.rank() <= 1 && Is8Bit(yz.dtype());
  }

  // y = saturate(round_half_even(acc * a_scale * b_scale / y_scale) + y_zp), row by row;
  // `scale` has room for n factors.
  static void Requantize(Inputs in, int64_t m, int64_t n, const int32_t* acc, double* scale,
                         Tensor& y) {
    const double as = QuantParamAt(in[1], 0), ys = QuantParamAt(in[6], 0),
                 yz = QuantParamAt(in[7], 0);
    for (int64_t j = 0; j < n; ++j) scale[j] = as * QuantParamAt(in[4], j) / ys;
    for (int64_t i = 0; i < m; ++i) {
      if (y.dtype() == DType::kU8) {
        cpu::RequantizeU8(n, acc + i * n, scale, yz, y.data<uint8_t>() + i * n);
      } else {
        cpu::RequantizeI8(n, acc + i * n, scale, yz, y.data<int8_t>() + i * n);
      }
    }
  }

  bool qlinear_;
};

// ---- DynamicQuantizeMatMul (com.microsoft) ----

// Y = (quantize(A) - a_zp) (B - b_zp) a_scale b_scale (+ bias), A f32 [..., K] quantized to u8
// per tensor exactly as DynamicQuantizeLinear does (the scale (max(0, max A) - min(0, min A)) /
// 255 in f32, the zero point and every element rounded half to even), B u8 or s8 [K, N], b_scale
// and b_zero_point per tensor or per column, bias f32 [N]: the form ONNX Runtime's
// quantize_dynamic writes (DynamicQuantizeLinear, MatMulInteger, Cast, Mul, Add), fused by the
// dynquant_matmul rewrite. The product runs on IntProduct; a u8 B is shifted to s8 and the b
// zero points move with it, c_j = b_zp_j - shift. Equal c_j go to the GEMM as its b offset;
// differing ones are taken out afterwards, exactly, as c_j times the row sums of
// (quantize(A) - a_zp). The epilogue (cpu::ScaleAccRow) then computes f32(acc) * (a_scale *
// b_scale_j), the scales' product rounded to f32 first, and adds the bias: the bits of the
// unfused program and of the reference kernel.
// Packed copies of constant B (cpu::U8S8PackB: u8 shifted to s8, with its column sums), keyed
// by address and geometry (the executable's constant segment outlives the kernel and never
// changes). Shared by every VM running the kernel.
class PackedU8S8Cache {
 public:
  struct Entry {
    const void* source = nullptr;
    int64_t k = 0, n = 0;
    DType dtype = DType::kI8;
    std::unique_ptr<int8_t, void (*)(void*)> data{nullptr, &std::free};
    std::vector<int32_t> col_sums;
  };

  // The packed b, packing it on first use; nullptr when the cache is full or allocation fails
  // (the caller takes the unpacked GEMM).
  const Entry* Get(const Tensor& b) const {
    const int64_t k = b.dim(0), n = b.dim(1);
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : entries_) {
      if (e.source == b.raw_data() && e.k == k && e.n == n && e.dtype == b.dtype()) return &e;
    }
    const size_t bytes = AlignUp(cpu::U8S8PackedBBytes(k, n));
    if (entries_.size() >= kMaxEntries || bytes_ + bytes > kMaxBytes) return nullptr;
    Entry e;
    e.source = b.raw_data();
    e.k = k;
    e.n = n;
    e.dtype = b.dtype();
    e.data.reset(static_cast<int8_t*>(std::aligned_alloc(64, bytes)));
    if (e.data == nullptr) return nullptr;
    e.col_sums.resize(static_cast<size_t>(n));
    cpu::U8S8PackB(k, n, b.raw_data(), b.dtype() == DType::kU8, n, e.data.get(), e.col_sums.data());
    bytes_ += bytes;
    entries_.push_back(std::move(e));
    return &entries_.back();
  }

 private:
  static constexpr size_t kMaxEntries = 256;
  static constexpr size_t kMaxBytes = size_t{4} << 30;
  mutable std::mutex mu_;
  mutable std::deque<Entry> entries_;  // stable addresses
  mutable size_t bytes_ = 0;
};

class DynQuantMatMulKernel final : public DnnlKernel {
 public:
  DynQuantMatMulKernel(std::string name, bool constant_weights)
      : DnnlKernel(std::move(name)), constant_weights_(constant_weights) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 3, out, kOp));
    auto at = [&](size_t i) -> const Tensor* { return i < in.size() ? in[i] : nullptr; };
    const Tensor &a = *in[0], &b = *in[1], &bscale = *in[2];
    const Tensor *zb = at(3), *bias = at(4);
    if (!Usable(a, b, bscale, zb, bias) || (out[0]->defined() && out[0]->dtype() != DType::kF32)) {
      return RunFallback(ctx, in, out);
    }
    const int64_t k = b.dim(0), n = b.dim(1), m = a.numel() / k;
    const float* x = a.data<float>();
    float a_scale = 0, za = 0;
    if (!DynamicQuantParams(ctx, a.numel(), x, &a_scale, &za)) return RunFallback(ctx, in, out);
    reference::Dims dims(a.dims().begin(), a.dims().end());
    dims.back() = n;
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, dims, kOp));
    const PackedU8S8Cache::Entry* packed =
        constant_weights_ && cpu::U8S8GemmFast() && k < cpu::kU8S8MaxK ? packed_.Get(b) : nullptr;
    // Workspace: quantize(A) u8 [m, k]; unpacked, the s32 product [m, n]; the n scales,
    // zero-point corrections and column terms; the m row sums; unpacked, a u8 B shifted to s8
    // and IntProduct's scratch.
    const bool shift_b = packed == nullptr && b.dtype() == DType::kU8;
    const int64_t lda = packed != nullptr ? cpu::U8S8PaddedK(k) : k;  // padded with zeros
    const size_t acc_at = AlignUp(static_cast<size_t>(m * lda));
    const size_t acc_bytes = packed != nullptr ? 0 : static_cast<size_t>(m * n) * sizeof(int32_t);
    const size_t scale_at = acc_at + AlignUp(acc_bytes);
    const size_t zc_at = scale_at + AlignUp(static_cast<size_t>(n) * sizeof(float));
    const size_t col_at = zc_at + AlignUp(static_cast<size_t>(n) * sizeof(int32_t));
    const size_t rs_at = col_at + AlignUp(static_cast<size_t>(n) * sizeof(int32_t));
    const size_t b_at = rs_at + AlignUp(static_cast<size_t>(m) * sizeof(int32_t));
    const size_t scratch_at = b_at + AlignUp(shift_b ? static_cast<size_t>(k * n) : 0);
    DYNVM_ASSIGN_OR_RETURN(
        void* ws, ctx.Workspace(scratch_at + (packed ? 0 : IntProductScratchBytes(m, k, n))));
    uint8_t* base = static_cast<uint8_t*>(ws);
    Product p;
    p.m = m;
    p.k = k;
    p.n = n;
    p.lda = lda;
    p.q = base;
    p.acc = reinterpret_cast<int32_t*>(base + acc_at);
    p.scale = reinterpret_cast<float*>(base + scale_at);
    p.zc = reinterpret_cast<int32_t*>(base + zc_at);
    p.za = static_cast<int32_t>(za);
    ctx.ParallelFor(m, ThreadsFor(ctx.num_threads(), m * k) == 1 ? m : 8,
                    [&](int64_t r0, int64_t r1) { Quantize(x, a_scale, za, r0, r1, p); });
    // c_j = b_zp_j less B's shift (u8 B is stored less 128); scale_j = a_scale * b_scale_j.
    const int32_t shift = b.dtype() == DType::kU8 ? 128 : 0;
    // Typed loops (Usable: b_scale f32, b_zero_point of B's dtype, contiguous): at M = 1 these
    // O(N) loops through QuantParamAt's dtype switch took a quarter of a 1024 x 1024 call.
    const float* bs = bscale.data<float>();
    const int64_t bs_step = bscale.numel() > 1 ? 1 : 0;
    const int64_t zb_step = zb != nullptr && zb->numel() > 1 ? 1 : 0;
    if (zb == nullptr) {
      std::fill(p.zc, p.zc + n, -shift);
    } else if (zb->dtype() == DType::kU8) {
      const uint8_t* z = zb->data<uint8_t>();
      for (int64_t j = 0; j < n; ++j) p.zc[j] = static_cast<int32_t>(z[j * zb_step]) - shift;
    } else {
      const int8_t* z = zb->data<int8_t>();
      for (int64_t j = 0; j < n; ++j) p.zc[j] = static_cast<int32_t>(z[j * zb_step]) - shift;
    }
    bool uniform = true, zero = true;
    for (int64_t j = 0; j < n; ++j) {
      uniform &= p.zc[j] == p.zc[0];
      zero &= p.zc[j] == 0;
      p.scale[j] = a_scale * bs[j * bs_step];
    }
    const float* bias_data = bias != nullptr ? bias->data<float>() : nullptr;
    if (packed != nullptr) {  // the epilogue inside the GEMM's tiles
      RunPacked(ctx, *packed, reinterpret_cast<int32_t*>(base + col_at),
                zero ? nullptr : reinterpret_cast<int32_t*>(base + rs_at), bias_data,
                out[0]->data<float>(), p);
      return absl::OkStatus();
    }
    const int32_t* zc = nullptr;  // the correction the epilogue takes out, if any
    {
      const int8_t* bs8 = b.data<int8_t>();
      if (shift_b) {
        int8_t* shifted = reinterpret_cast<int8_t*>(base + b_at);
        cpu::ShiftU8ToS8(k * n, b.data<uint8_t>(), shifted);
        bs8 = shifted;
      }
      DYNVM_RETURN_IF_ERROR(IntProduct(ctx, kOp, m, k, n, p.q, true, p.za, bs8,
                                       uniform ? p.zc[0] : 0, p.acc, base + scratch_at));
      zc = uniform ? nullptr : p.zc;
    }
    Epilogue(ctx, p, zc, bias_data, out[0]->data<float>());
    return absl::OkStatus();
  }

 private:
  static constexpr const char* kOp = "DynamicQuantizeMatMul";

  // The operands in the workspace: quantize(A) [m, k], the s32 product [m, n], the n scales and
  // b zero points (less B's shift), the column terms (null: none), A's zero point.
  struct Product {
    int64_t m = 0, k = 0, n = 0, lda = 0;  // lda: q's row stride
    uint8_t* q = nullptr;
    int32_t* acc = nullptr;
    float* scale = nullptr;
    int32_t* zc = nullptr;
    int32_t* col = nullptr;
    int32_t za = 0;
  };

  // Rows [r0, r1) of x quantized into q (row stride lda, zeros after k): all zeros when the
  // scale is 0 (x is all zeros; DynamicQuantizeLinear's zero point is 0 then).
  static void Quantize(const float* x, float s, float z, int64_t r0, int64_t r1, const Product& p) {
    if (p.lda == p.k) {
      if (s == 0) {
        std::fill(p.q + r0 * p.k, p.q + r1 * p.k, uint8_t{0});
      } else {
        cpu::QuantizeU8((r1 - r0) * p.k, x + r0 * p.k, s, z, p.q + r0 * p.k);
      }
      return;
    }
    for (int64_t r = r0; r < r1; ++r) {
      uint8_t* qr = p.q + r * p.lda;
      if (s == 0) {
        std::fill(qr, qr + p.k, uint8_t{0});
      } else {
        cpu::QuantizeU8(p.k, x + r * p.k, s, z, qr);
      }
      std::fill(qr + p.k, qr + p.lda, uint8_t{0});
    }
  }

  // The packed product splits over the VM's threads from this many multiply-adds: at M = 1 (a
  // GEMV: one token's projections) B's 512 KB, about 10 us of streaming it from L3 on one core;
  // at M >= 6 about 5 us of VPDPBUSD. (From kMinParallelWork, 4M, until 2026-11-29: one token's
  // 1024 x 1024 projections ran on one thread at 2 threads, 0.051 ms for three of them where ONNX
  // Runtime's 2 threads took 0.052-0.056 ms.)
  static constexpr int64_t kMinSplitProduct = int64_t{1} << 19;

  // y = the product q x packed B through the epilogue, on cpu::U8S8GemmScaled (each tile's
  // sums scaled into y in registers: the bits of the s32 product then Epilogue, without the
  // product's round trip through memory), split over panels (or rows when there are few). The
  // column terms -a_zp * colsum_j go into `col` unless a_zp is 0; with `rs` (b zero points
  // that are not all 0) the row sums of (quantize(A) - a_zp) go there first.
  static void RunPacked(KernelContext& ctx, const PackedU8S8Cache::Entry& packed, int32_t* col,
                        int32_t* rs, const float* bias, float* y, const Product& p) {
    cpu::U8S8Scale e;
    if (p.za != 0) {
      for (int64_t j = 0; j < p.n; ++j) {
        col[j] = static_cast<int32_t>(static_cast<uint32_t>(-p.za) *
                                      static_cast<uint32_t>(packed.col_sums[j]));
      }
      e.col = col;
    }
    if (rs != nullptr) {
      ctx.ParallelFor(p.m, ThreadsFor(ctx.num_threads(), p.m * p.k) == 1 ? p.m : 8,
                      [&](int64_t r0, int64_t r1) {
                        for (int64_t r = r0; r < r1; ++r) {
                          const uint8_t* qr = p.q + r * p.lda;
                          int32_t sum = 0;
                          for (int64_t i = 0; i < p.k; ++i) sum += qr[i];
                          rs[r] = sum - static_cast<int32_t>(p.k) * p.za;
                        }
                      });
      e.zc = p.zc;
      e.rs = rs;
    }
    e.scale = p.scale;
    e.bias = bias;
    e.y = y;
    e.ldy = p.n;
    const int64_t panels = cpu::U8S8Panels(p.n);
    const int threads = p.m * p.n * p.k < kMinSplitProduct ? 1 : ctx.num_threads();
    const int8_t* b = packed.data.get();
    if (threads == 1) {
      cpu::U8S8GemmScaled(p.k, p.n, p.q, p.lda, b, 0, p.m, 0, panels, e);
    } else if (panels >= 4 * threads || p.m < 6 * threads) {
      // Chunks of panels (rows below) claimed by whichever thread is free: about two per thread,
      // so a thread whose core is busy holds up one chunk, not half the product (B is packed
      // once, so a chunk costs one call's setup).
      ctx.ParallelForDynamic(panels, std::max<int64_t>(4, panels / (2 * threads)),
                             [&](int, int64_t p0, int64_t p1) {
                               cpu::U8S8GemmScaled(p.k, p.n, p.q, p.lda, b, 0, p.m, p0, p1, e);
                             });
    } else {
      ctx.ParallelForDynamic(p.m, std::max<int64_t>(6, (p.m / (2 * threads) + 5) / 6 * 6),
                             [&](int, int64_t i0, int64_t i1) {
                               cpu::U8S8GemmScaled(p.k, p.n, p.q, p.lda, b, i0, i1, 0, panels, e);
                             });
    }
  }

  // y = f32(acc + col - zc * rowsum(q - a_zp)) * scale (+ bias), row by row.
  static void Epilogue(KernelContext& ctx, const Product& p, const int32_t* zc, const float* bias,
                       float* y) {
    ctx.ParallelFor(
        p.m, ThreadsFor(ctx.num_threads(), p.m * p.n) == 1 ? p.m : 4, [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            int32_t sum = 0;  // of (quantize(A) - a_zp) over the row, when needed
            if (zc != nullptr) {
              const uint8_t* qr = p.q + r * p.lda;
              for (int64_t i = 0; i < p.k; ++i) sum += qr[i];
              sum -= static_cast<int32_t>(p.k) * p.za;
            }
            cpu::ScaleAccRow(p.n, p.acc + r * p.n, p.col, zc, sum, p.scale, bias, y + r * p.n);
          }
        });
  }

  // A f32 [..., K], B u8/s8 [K, N] (K below kMaxExactK), contiguous; b_scale f32 of 1 or N valid
  // values; b_zero_point of B's type, 1 or N values; bias f32 [N].
  static bool Usable(const Tensor& a, const Tensor& b, const Tensor& bs, const Tensor* zb,
                     const Tensor* bias) {
    if (a.dtype() != DType::kF32 || !Is8Bit(b.dtype()) || a.rank() < 1 || b.rank() != 2 ||
        !a.is_contiguous() || !b.is_contiguous() || a.numel() == 0 || b.numel() == 0) {
      return false;
    }
    const int64_t k = b.dim(0), n = b.dim(1);
    if (a.dim(a.rank() - 1) != k || k >= kMaxExactK) return false;
    if (bs.dtype() != DType::kF32 || bs.rank() > 1 || !bs.is_contiguous() ||
        (bs.numel() != 1 && bs.numel() != n) || !CheckQuantScale(bs, "b_scale").ok()) {
      return false;
    }
    if (zb != nullptr && (zb->dtype() != b.dtype() || zb->rank() > 1 || !zb->is_contiguous() ||
                          (zb->numel() != 1 && zb->numel() != n))) {
      return false;
    }
    return bias == nullptr || (bias->dtype() == DType::kF32 && bias->rank() == 1 &&
                               bias->numel() == n && bias->is_contiguous());
  }

  bool constant_weights_;
  PackedU8S8Cache packed_;
};

// ---- DynamicQuantizeLinear ----

// y = the u8 quantization of f32 x with DynamicQuantizeLinear's per-tensor scale and zero point
// (DynamicQuantParams; cpu::QuantizeU8 on the pool by blocks of 16K elements): the reference
// kernel's bits. Anything else (another dtype, strides, infinities) is the reference's.
class DynQuantKernel final : public DnnlKernel {
 public:
  using DnnlKernel::DnnlKernel;

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (in.empty() || in[0] == nullptr || out.size() != 3 || out[0] == nullptr ||
        out[1] == nullptr || out[2] == nullptr) {
      return RunFallback(ctx, in, out);
    }
    const Tensor& x = *in[0];
    float scale = 0, zp = 0;
    if (x.dtype() != DType::kF32 || !x.is_contiguous() || x.numel() == 0 ||
        !DynamicQuantParams(ctx, x.numel(), x.data<float>(), &scale, &zp)) {
      return RunFallback(ctx, in, out);
    }
    constexpr const char* kOp = "DynamicQuantizeLinear";
    const std::vector<int64_t> scalar;
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kU8, x.dims(), kOp));
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[1], DType::kF32, scalar, kOp));
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[2], DType::kU8, scalar, kOp));
    out[1]->data<float>()[0] = scale;
    out[2]->data<uint8_t>()[0] = static_cast<uint8_t>(zp);
    const float* xd = x.data<float>();
    uint8_t* y = out[0]->data<uint8_t>();
    constexpr int64_t kBlock = 16384;
    ctx.ParallelFor(x.numel(), ThreadsFor(ctx.num_threads(), x.numel()) == 1 ? x.numel() : kBlock,
                    [&](int64_t i0, int64_t i1) {
                      if (scale == 0) {
                        std::fill(y + i0, y + i1, uint8_t{0});
                      } else {
                        cpu::QuantizeU8(i1 - i0, xd + i0, scale, zp, y + i0);
                      }
                    });
    return absl::OkStatus();
  }
};

// ---- ConvInteger / QLinearConv ----

// 1-D or 2-D, any group, explicit, VALID or SAME pads, s8 w with a per-tensor zero point (or one
// repeated value), u8/s8 x: per batch item and group, im2col into s8 columns (a u8 x shifted by
// 128, padding holding the zero point so it contributes nothing), then the group's W rows
// [M/G, C/G*KH*KW] x columns on the integer GEMM (oneDNN's with VNNI, IntGemm's without), and
// QLinearConv's requantization per output channel (bias added first), in double as the
// reference does.
struct ConvAttrs {
  std::vector<int64_t> kernel, strides, pads, dilations;
  std::string auto_pad;
  int64_t group = 1;
  // QLinearConv: x / y hold channels-last data (kernels/channels_last.h).
  bool channels_last_in = false, channels_last_out = false;
};

class IntConvKernel final : public DnnlKernel {
 public:
  IntConvKernel(std::string name, bool qlinear, ConvAttrs a)
      : DnnlKernel(std::move(name)), qlinear_(qlinear), a_(std::move(a)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    const char* op = qlinear_ ? "QLinearConv" : "ConvInteger";
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, qlinear_ ? 8 : 2, out, op));
    auto at = [&](size_t i) -> const Tensor* { return i < in.size() ? in[i] : nullptr; };
    const Tensor& x = *in[0];
    const Tensor& w = *in[qlinear_ ? 3 : 1];
    const Tensor* xz = at(2);
    const Tensor* wz = at(qlinear_ ? 5 : 3);
    const Tensor* bias = qlinear_ ? at(8) : nullptr;
    Geometry g;
    if (!Usable(x, w, xz, wz, bias, &g) || (qlinear_ && !UsableScales(in, g.m))) {
      return RunFallback(ctx, in, out);  // the reference takes the layout flags too
    }
    const DType out_dtype = qlinear_ ? in[7]->dtype() : DType::kI32;
    if (out[0]->defined() && out[0]->dtype() != out_dtype) return RunFallback(ctx, in, out);
    if (!a_.channels_last_in && !a_.channels_last_out) return RunPlain(ctx, in, g, out[0]);
    // Channels-last x or y: computed in the plain layout, converted on the way in and out.
    std::vector<const Tensor*> plain_in(in.begin(), in.end());
    Tensor px;
    if (a_.channels_last_in) {
      DYNVM_ASSIGN_OR_RETURN(px, PermuteChannels8(x, false));
      plain_in[0] = &px;
    }
    if (!a_.channels_last_out) return RunPlain(ctx, plain_in, g, out[0]);
    Tensor py;
    DYNVM_RETURN_IF_ERROR(RunPlain(ctx, plain_in, g, &py));
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], out_dtype, py.dims(), op));
    return PermuteChannels8(py, true, *out[0]);
  }

 private:
  struct Geometry {
    int64_t n, c, h, w, m, kh, kw, oh, ow, sh, sw, dh, dw, pt, pl, grp;
    int64_t cg() const { return c / grp; }
    int64_t mg() const { return m / grp; }
    int64_t k() const { return cg() * kh * kw; }  // one group's GEMM depth
  };

  // The convolution in the plain layout, the inputs checked usable (Run).
  absl::Status RunPlain(KernelContext& ctx, Inputs in, const Geometry& g, Tensor* y) const {
    const char* op = qlinear_ ? "QLinearConv" : "ConvInteger";
    const Tensor& w = *in[qlinear_ ? 3 : 1];
    const Tensor* wz = in.size() > (qlinear_ ? 5u : 3u) ? in[qlinear_ ? 5 : 3] : nullptr;
    const DType out_dtype = qlinear_ ? in[7]->dtype() : DType::kI32;
    Tensor* out[1] = {y};
    std::vector<int64_t> dims = {g.n, g.m, g.oh, g.ow};
    if (in[0]->rank() == 3) dims.erase(dims.begin() + 2);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], out_dtype, dims, op));
    const int64_t k = g.k(), p = g.oh * g.ow;
    const size_t scale_bytes = qlinear_ ? static_cast<size_t>(g.m) * sizeof(double) : 0;
    const size_t acc_bytes = qlinear_ ? static_cast<size_t>(g.m * p) * sizeof(int32_t) : 0;
    // Without VNNI: IntGemm's packed operands after the columns (2-byte aligned): all of w,
    // packed once per run, then one group's columns.
    const bool igemm = choice::UseIGemm(g.m, p, k);
    const size_t head = (scale_bytes + acc_bytes + static_cast<size_t>(k * p) + 1) & ~size_t{1};
    const size_t pa_bytes = igemm ? cpu::IGemmPackedABytes(g.m, k) : 0;
    const size_t pb_bytes = igemm ? cpu::IGemmPackedBBytes(k, p) : 0;
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(head + pa_bytes + pb_bytes));
    uint8_t* base = static_cast<uint8_t*>(ws);
    Buffers buf{reinterpret_cast<double*>(base), reinterpret_cast<int32_t*>(base + scale_bytes),
                reinterpret_cast<int8_t*>(base + scale_bytes + acc_bytes), nullptr, nullptr};
    if (igemm) {
      buf.pa = reinterpret_cast<int16_t*>(base + head);
      buf.pb = reinterpret_cast<int16_t*>(base + head + pa_bytes);
      const int32_t zw = static_cast<int32_t>(QuantParamAt(wz, 0));
      PackWeights(ctx, g.m, k, w.data<int8_t>(), zw, buf.pa);
    }
    if (qlinear_) {
      const double xs = QuantParamAt(in[1], 0), ys = QuantParamAt(in[6], 0);
      for (int64_t oc = 0; oc < g.m; ++oc) buf.scale[oc] = xs * QuantParamAt(in[4], oc) / ys;
    }
    SetThreads(ThreadsFor(ctx.num_threads(), g.m * p * k));
    for (int64_t b = 0; b < g.n; ++b) {
      DYNVM_RETURN_IF_ERROR(RunItem(ctx, in, b, g, igemm, buf, *out[0]));
    }
    return absl::OkStatus();
  }

  // The run's workspace: QLinearConv's per-channel factors and s32 sums, the columns, and
  // without VNNI the packed w and the packed columns.
  struct Buffers {
    double* scale;
    int32_t* acc;
    int8_t* col;
    int16_t* pa;
    int16_t* pb;
  };

  // Packs w [m, k] less its zero point (IntGemm's a operand), on the pool when big.
  static void PackWeights(const KernelContext& ctx, int64_t m, int64_t k, const int8_t* w,
                          int32_t zw, int16_t* pa) {
    ctx.ParallelFor(
        m, std::max<int64_t>(4, (1 << 16) / std::max<int64_t>(k, 1)),
        [&](int64_t i0, int64_t i1) { cpu::IGemmPackA(k, w, false, k, zw, i0, i1, pa); });
  }

  // Batch item b: every group's product, then QLinearConv's requantization.
  absl::Status RunItem(const KernelContext& ctx, Inputs in, int64_t b, const Geometry& g,
                       bool igemm, const Buffers& buf, Tensor& y) const {
    const Tensor& x = *in[0];
    const Tensor& w = *in[qlinear_ ? 3 : 1];
    const Tensor* wz = in.size() > (qlinear_ ? 5u : 3u) ? in[qlinear_ ? 5 : 3] : nullptr;
    const bool u8 = x.dtype() == DType::kU8;
    const int zx = static_cast<int>(QuantParamAt(in.size() > 2 ? in[2] : nullptr, 0));
    const int bo = u8 ? zx - 128 : zx;
    const int64_t k = g.k(), p = g.oh * g.ow, mg = g.mg();
    int32_t* c = qlinear_ ? buf.acc : y.data<int32_t>() + b * g.m * p;
    for (int64_t gi = 0; gi < g.grp; ++gi) {
      Im2Col(x, b, gi * g.cg(), g, u8, static_cast<int8_t>(bo), buf.col);
      int32_t* cgi = c + gi * mg * p;
      if (igemm) {
        IntGemm(ctx, mg, k, p, nullptr, false, k, 0, false, buf.pa + gi * mg * ((k + 1) & ~1),
                buf.col, bo, buf.pb, cgi, p);
        continue;
      }
      const int32_t co = 0;
      const dnnl_status_t st =
          dnnl_gemm_s8s8s32('N', 'N', 'F', mg, p, k, 1.0f, w.data<int8_t>() + gi * mg * k, k,
                            static_cast<int8_t>(QuantParamAt(wz, 0)), buf.col, p,
                            static_cast<int8_t>(bo), 0.0f, cgi, p, &co);
      DYNVM_RETURN_IF_ERROR(FromDnnl(st, qlinear_ ? "QLinearConv" : "ConvInteger"));
    }
    if (!qlinear_) return absl::OkStatus();
    const Tensor* bias = in.size() > 8 ? in[8] : nullptr;
    const double yz = QuantParamAt(in[7], 0);
    for (int64_t oc = 0; oc < g.m; ++oc) {
      const double bv = bias != nullptr ? bias->data<int32_t>()[oc] : 0;
      const int32_t* row = buf.acc + oc * p;
      const int64_t off = (b * g.m + oc) * p;
      if (y.dtype() == DType::kU8) {
        cpu::RequantizeU8Uniform(p, row, bv, buf.scale[oc], yz, y.data<uint8_t>() + off);
      } else {
        cpu::RequantizeI8Uniform(p, row, bv, buf.scale[oc], yz, y.data<int8_t>() + off);
      }
    }
    return absl::OkStatus();
  }

  bool Usable(const Tensor& x, const Tensor& w, const Tensor* xz, const Tensor* wz,
              const Tensor* bias, Geometry* g) const {
    const int r = x.rank();
    if (!Is8Bit(x.dtype()) || w.dtype() != DType::kI8 || (r != 3 && r != 4) || w.rank() != r ||
        !x.is_contiguous() || !w.is_contiguous() || a_.group < 1) {
      return false;
    }
    if ((xz != nullptr && !UniformZeroPoint(*xz, x.dtype())) ||
        (wz != nullptr && !UniformZeroPoint(*wz, w.dtype()))) {
      return false;
    }
    if (bias != nullptr && (bias->dtype() != DType::kI32 || bias->rank() != 1 ||
                            bias->dim(0) != w.dim(0) || !bias->is_contiguous())) {
      return false;
    }
    // A 1-D convolution is a 2-D one of height 1.
    const bool one_d = r == 3;
    *g = Geometry{};
    g->n = x.dim(0);
    g->c = x.dim(1);
    g->h = one_d ? 1 : x.dim(2);
    g->w = x.dim(r - 1);
    g->m = w.dim(0);
    g->kh = one_d ? 1 : w.dim(2);
    g->kw = w.dim(r - 1);
    g->grp = a_.group;
    if (g->n == 0 || g->m == 0 || g->c == 0 || g->c % g->grp != 0 || g->m % g->grp != 0 ||
        w.dim(1) != g->cg() || g->k() >= kMaxExactK) {
      return false;
    }
    return SpatialUsable(one_d, g);
  }

  // Strides, dilations and pads (explicit, VALID or SAME) of a 2-D (or, one_d, 1-D) geometry.
  bool SpatialUsable(bool one_d, Geometry* g) const {
    const size_t k = one_d ? 1 : 2;
    auto sized = [k](const std::vector<int64_t>& v, size_t want) {
      return v.empty() || v.size() == want;
    };
    if (!sized(a_.kernel, k) || !sized(a_.strides, k) || !sized(a_.dilations, k) ||
        !sized(a_.pads, 2 * k)) {
      return false;
    }
    if (!a_.kernel.empty() && (a_.kernel.back() != g->kw || (!one_d && a_.kernel[0] != g->kh))) {
      return false;
    }
    const bool same = a_.auto_pad == "SAME_UPPER" || a_.auto_pad == "SAME_LOWER";
    if (!same && a_.auto_pad != "VALID" && a_.auto_pad != "NOTSET" && !a_.auto_pad.empty()) {
      return false;
    }
    // Axis i of the attributes (0: height, absent in 1-D; 1: width).
    int64_t in[2] = {g->h, g->w}, kd[2] = {g->kh, g->kw}, st[2] = {1, 1}, dl[2] = {1, 1},
            lo[2] = {0, 0}, out[2] = {1, 1};
    for (int i = one_d ? 1 : 0; i < 2; ++i) {
      const size_t u = one_d ? 0 : static_cast<size_t>(i);
      st[i] = a_.strides.empty() ? 1 : a_.strides[u];
      dl[i] = a_.dilations.empty() ? 1 : a_.dilations[u];
      if (st[i] < 1 || dl[i] < 1 || in[i] < 1 || kd[i] < 1) return false;
      const int64_t ext = (kd[i] - 1) * dl[i] + 1;
      int64_t hi = 0;
      if (same) {
        const int64_t o = (in[i] + st[i] - 1) / st[i];
        const int64_t total = std::max<int64_t>(0, (o - 1) * st[i] + ext - in[i]);
        lo[i] = a_.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        hi = total - lo[i];
      } else if (a_.auto_pad != "VALID" && !a_.pads.empty()) {
        lo[i] = a_.pads[u];
        hi = a_.pads[u + k];
      }
      if (lo[i] < 0 || hi < 0 || in[i] + lo[i] + hi - ext < 0) return false;
      out[i] = (in[i] + lo[i] + hi - ext) / st[i] + 1;
    }
    g->sh = st[0];
    g->sw = st[1];
    g->dh = dl[0];
    g->dw = dl[1];
    g->pt = lo[0];
    g->pl = lo[1];
    g->oh = out[0];
    g->ow = out[1];
    return true;
  }

  static bool UsableScales(Inputs in, int64_t m) {
    const Tensor &xs = *in[1], &ws = *in[4], &ys = *in[6], &yz = *in[7];
    for (const Tensor* s : {&xs, &ws, &ys}) {
      if (s->dtype() != DType::kF32 || s->rank() > 1 || !s->is_contiguous() ||
          !CheckQuantScale(*s, "scale").ok()) {
        return false;
      }
    }
    return xs.numel() == 1 && ys.numel() == 1 && (ws.numel() == 1 || ws.numel() == m) &&
           yz.numel() == 1 && yz.rank() <= 1 && Is8Bit(yz.dtype());
  }

  // Columns [C/G*KH*KW, OH*OW] of batch b's channels [c0, c0 + C/G) as s8 (u8 x shifted by
  // 128); padding holds `pad`. Each output row's in-bounds span is found once, then copied.
  static void Im2Col(const Tensor& x, int64_t b, int64_t c0, const Geometry& g, bool u8, int8_t pad,
                     int8_t* col) {
    const int64_t p = g.oh * g.ow;
    for (int64_t ci = 0; ci < g.cg(); ++ci) {
      const int64_t plane = (b * g.c + c0 + ci) * g.h * g.w;
      for (int64_t ki = 0; ki < g.kh; ++ki) {
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          int8_t* dst = col + ((ci * g.kh + ki) * g.kw + kj) * p;
          // ox in [lo, hi) reads ix = ox * sw - pl + kj * dw inside [0, w).
          const int64_t shift = kj * g.dw - g.pl;
          const int64_t lo = std::min(g.ow, shift >= 0 ? 0 : (-shift + g.sw - 1) / g.sw);
          const int64_t hi =
              std::max(lo, std::min(g.ow, g.w - shift <= 0 ? 0 : (g.w - shift - 1) / g.sw + 1));
          for (int64_t oy = 0; oy < g.oh; ++oy) {
            const int64_t iy = oy * g.sh - g.pt + ki * g.dh;
            int8_t* row = dst + oy * g.ow;
            if (iy < 0 || iy >= g.h) {
              std::fill(row, row + g.ow, pad);
              continue;
            }
            std::fill(row, row + lo, pad);
            std::fill(row + hi, row + g.ow, pad);
            const int64_t src = plane + iy * g.w + shift;
            if (u8) {
              CopyRowU8(hi - lo, x.data<uint8_t>() + src + lo * g.sw, g.sw, row + lo);
            } else {
              CopyRowS8(hi - lo, x.data<int8_t>() + src + lo * g.sw, g.sw, row + lo);
            }
          }
        }
      }
    }
  }

  bool qlinear_;
  ConvAttrs a_;
};

void Add(KernelRegistry& r, const char* op, KernelFactory f) {
  r.Register(KernelRegistration{"", op, Device::kCPU, kBackend, kDnnlPriority, std::move(f)});
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateIm2ColConv(const KernelSpec& spec, bool qlinear) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, qlinear ? 8 : 2, qlinear ? 9 : 4, 1, 1));
  ConvAttrs a;
  DYNVM_ASSIGN_OR_RETURN(a.kernel, spec.GetInts("kernel_shape"));
  DYNVM_ASSIGN_OR_RETURN(a.strides, spec.GetInts("strides"));
  DYNVM_ASSIGN_OR_RETURN(a.pads, spec.GetInts("pads"));
  DYNVM_ASSIGN_OR_RETURN(a.dilations, spec.GetInts("dilations"));
  DYNVM_ASSIGN_OR_RETURN(a.auto_pad, spec.GetString("auto_pad", "NOTSET"));
  DYNVM_ASSIGN_OR_RETURN(a.group, spec.GetInt("group", 1));
  if (qlinear) {
    DYNVM_ASSIGN_OR_RETURN(int64_t ci, spec.GetInt("channels_last_in", 0));
    DYNVM_ASSIGN_OR_RETURN(int64_t co, spec.GetInt("channels_last_out", 0));
    a.channels_last_in = ci != 0;
    a.channels_last_out = co != 0;
  }
  return std::make_unique<IntConvKernel>(KernelName(spec, "im2col"), qlinear, std::move(a));
}

void RegisterQuantKernels(KernelRegistry& r) {
  // The im2col convolution: after qconv.cc's int8 convolution primitive in the chain.
  for (bool qlinear : {false, true}) {
    r.Register(KernelRegistration{
        "", qlinear ? "QLinearConv" : "ConvInteger", Device::kCPU, kBackend, kDnnlSecondPriority,
        [qlinear](const KernelSpec& spec) { return CreateIm2ColConv(spec, qlinear); }});
  }
  for (bool quantize : {true, false}) {
    Add(r, quantize ? "QuantizeLinear" : "DequantizeLinear",
        [quantize](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
          DYNVM_RETURN_IF_ERROR(CheckArity(spec, 2, 3, 1, 1));
          DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", 1));
          return std::make_unique<QuantKernel>(KernelName(spec), quantize, axis);
        });
  }
  for (bool qlinear : {false, true}) {
    Add(r, qlinear ? "QLinearMatMul" : "MatMulInteger",
        [qlinear](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
          DYNVM_RETURN_IF_ERROR(CheckArity(spec, qlinear ? 8 : 2, qlinear ? 8 : 4, 1, 1));
          return std::make_unique<IntMatMulKernel>(KernelName(spec), qlinear);
        });
  }
  Add(r, "DynamicQuantizeLinear",
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 1, 3, 3));
        return std::make_unique<DynQuantKernel>(KernelName(spec));
      });
  r.Register(KernelRegistration{
      "com.microsoft", "DynamicQuantizeMatMul", Device::kCPU, kBackend, kDnnlPriority,
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_RETURN_IF_ERROR(CheckArity(spec, 3, 5, 1, 1));
        DYNVM_ASSIGN_OR_RETURN(const int64_t constant_weights, spec.GetInt("constant_weights", 0));
        return std::make_unique<DynQuantMatMulKernel>(KernelName(spec), constant_weights != 0);
      }});
}

}  // namespace dynvm::onednn
