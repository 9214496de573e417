// Products with weight-only quantized weights (vm-compile --quantize-weights; docs/kernels.md,
// "Weight-only quantization"): W is [N, K] row-major, one row per output channel, stored as
// symmetric int8 with one f32 scale per row (w[j, i] = scale[j] * q[j, i]) or as bf16.
// Activations stay f32 in and out; the AVX2 int8 path rounds them to 16 bits inside the call
// (QGemvI8RoundsActivations below), every other path accumulates in f32. Internal to the
// oneDNN backend.
//
// Each function computes the output rows [r0, r1) only (a thread pool may split N), reads
// every weight row of that range once from memory, and keeps the M activation rows in cache.
#ifndef DYNVM_KERNELS_DNNL_QGEMV_H_
#define DYNVM_KERNELS_DNNL_QGEMV_H_

#include <cstdint>

namespace dynvm::onednn {

// Activation rows up to which the direct kernels below run (a decode step, a few beams);
// beyond, the caller dequantizes W once into scratch and runs dnnl_sgemm.
inline constexpr int64_t kQuantSmallRows = 8;

// The vector path: kBest picks the widest the CPU has (decided once); the others force one
// (tests of the fallbacks; a path the CPU lacks must not be forced, see QGemvIsaSupported).
enum class QGemvIsa { kBest, kScalar, kAvx2, kAvx512 };
bool QGemvIsaSupported(QGemvIsa isa);

// y[m * ldy + j] = beta * y[m * ldy + j] + scale[j] * sum_i x[m * ldx + i] * q[j * ldw + i]
// for m < rows and r0 <= j < r1. y is not read when beta is 0. AVX-512, AVX2 or scalar,
// picked by the CPU at the first call.
void QGemvI8(int64_t rows, int64_t k, const float* x, int64_t ldx, const int8_t* q, int64_t ldw,
             const float* scale, int64_t r0, int64_t r1, float beta, float* y, int64_t ldy,
             QGemvIsa isa = QGemvIsa::kBest);

// The same with bf16 weights (bit patterns; w = the f32 whose upper half they are), no scale.
void QGemvBf16(int64_t rows, int64_t k, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
               int64_t r0, int64_t r1, float beta, float* y, int64_t ldy,
               QGemvIsa isa = QGemvIsa::kBest);

// Whether QGemvI8 on `isa` rounds each activation row to 16-bit fixed point (the AVX2 path:
// int16 activations times int8 weights in int32 sums, about 3x the widening kernel's speed).
// The row x[m, :] becomes q * s with s = max_i |x[m, i]| / kQGemvI16Max and integer |q| <=
// 32767, so each output then differs from the f32 product by at most
//   kQGemvI16Error * s * scale[j] * sum_i |q[j, i]|
// beyond f32 rounding (round to nearest: half a step, plus the rounding of x / s in f32). The
// rows go in groups of four; a group with a row holding NaN or infinity, or whose largest
// magnitude is below 2^-100, is not rounded (it runs the widening kernel: NaN and infinity
// propagate as in f32).
bool QGemvI8RoundsActivations(QGemvIsa isa = QGemvIsa::kBest);
inline constexpr float kQGemvI16Max = 32767.0f;
inline constexpr double kQGemvI16Error = 0.5 + 1.0 / 128;

// Rows [r0, r1) of the dequantized W into dst (row j at dst + (j - r0) * k).
void DequantizeRowsI8(int64_t k, const int8_t* q, int64_t ldw, const float* scale, int64_t r0,
                      int64_t r1, float* dst);
void DequantizeRowsBf16(int64_t k, const uint16_t* w, int64_t ldw, int64_t r0, int64_t r1,
                        float* dst);

// Which vector path QGemvI8/QGemvBf16 take on this CPU: "avx512", "avx2" or "scalar".
const char* QGemvPath();

}  // namespace dynvm::onednn

#endif  // DYNVM_KERNELS_DNNL_QGEMV_H_
