// Products with weight-only quantized weights (vm-compile --quantize-weights; docs/kernels.md,
// "Weight-only quantization"): W is [N, K] row-major, one row per output channel, stored as
// symmetric int8 with one f32 scale per row (w[j, i] = scale[j] * q[j, i]) or as bf16.
// Activations stay f32 in and out. Implementations (isa.h; qgemv.cc has the tuning notes):
//   int8: portable (f32 over widened weights), AVX2 (activations rounded to int16, VPMADDWD),
//         AVX-512 (widened to f32), AVX-512 VNNI (activations rounded to int16, VPDPWSSD);
//   bf16: portable, AVX2 (even/odd split, no widening), AVX-512 (widened), AVX-512 BF16
//         (activations split into two bf16 halves, VDPBF16PS).
//
// Each function computes the output rows [r0, r1) only (a thread pool may split N), reads
// every weight row of that range once from memory, and keeps the M activation rows in cache.
#ifndef DYNVM_KERNELS_CPU_QGEMV_H_
#define DYNVM_KERNELS_CPU_QGEMV_H_

#include <cstdint>

namespace dynvm::cpu {

// Activation rows up to which the direct kernels below run (a decode step, a few beams);
// beyond, the caller dequantizes W once into scratch and runs dnnl_sgemm (kernels/dnnl/choice.h).
inline constexpr int64_t kQuantSmallRows = 8;

// y[m * ldy + j] = beta * y[m * ldy + j] + scale[j] * sum_i x[m * ldx + i] * q[j * ldw + i]
// for m < rows and r0 <= j < r1. y is not read when beta is 0.
void QGemvI8(int64_t rows, int64_t k, const float* x, int64_t ldx, const int8_t* q, int64_t ldw,
             const float* scale, int64_t r0, int64_t r1, float beta, float* y, int64_t ldy);

// The same with bf16 weights (bit patterns; w = the f32 whose upper half they are), no scale.
void QGemvBf16(int64_t rows, int64_t k, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
               int64_t r0, int64_t r1, float beta, float* y, int64_t ldy);

// Whether QGemvI8 at the active level rounds each activation row to 16-bit fixed point (the
// AVX2 and AVX-512 VNNI paths: int16 activations times int8 weights in int32 sums). The row
// x[m, :] becomes q * s with s = max_i |x[m, i]| / kQGemvI16Max and integer |q| <= 32767, so
// each output then differs from the f32 product by at most
//   kQGemvI16Error * s * scale[j] * sum_i |q[j, i]|
// beyond f32 rounding (round to nearest: half a step, plus the rounding of x / s in f32). The
// rows go in groups of four; a group with a row holding NaN or infinity, or whose largest
// magnitude is below 2^-100, is not rounded (it runs the widening kernel: NaN and infinity
// propagate as in f32).
bool QGemvI8RoundsActivations();
inline constexpr float kQGemvI16Max = 32767.0f;
inline constexpr double kQGemvI16Error = 0.5 + 1.0 / 128;

// Whether QGemvBf16 at the active level splits each activation into two bf16 halves (the
// AVX-512 BF16 path, from two activation rows; one row runs the widening kernel): x = hi + lo with
// hi = bf16(x), lo = bf16(x - hi), |x - hi - lo| <= 2^-16 |x|, products summed with denormal inputs
// and results flushed to zero (VDPBF16PS). Each output then differs from the f32 product by at most
// kQGemvBf16SplitError * sum_i |x[i] w[j, i]| beyond f32 rounding, plus 2^-126 per term for the
// flushed denormals.
bool QGemvBf16SplitsActivations();
inline constexpr double kQGemvBf16SplitError = 1.0 / 65536;

// Which implementation QGemvI8 / QGemvBf16 run at the active level: "avx512_vnni", "avx512",
// "avx2" or "portable" (QGemvBf16: "avx512_bf16" for the split path).
const char* QGemvI8Path();
const char* QGemvBf16Path();

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_QGEMV_H_
