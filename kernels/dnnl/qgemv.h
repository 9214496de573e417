// Products with weight-only quantized weights (vm-compile --quantize-weights; docs/kernels.md,
// "Weight-only quantization"): W is [N, K] row-major, one row per output channel, stored as
// symmetric int8 with one f32 scale per row (w[j, i] = scale[j] * q[j, i]) or as bf16.
// Activations and accumulation stay f32. Internal to the oneDNN backend.
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

// Rows [r0, r1) of the dequantized W into dst (row j at dst + (j - r0) * k).
void DequantizeRowsI8(int64_t k, const int8_t* q, int64_t ldw, const float* scale, int64_t r0,
                      int64_t r1, float* dst);
void DequantizeRowsBf16(int64_t k, const uint16_t* w, int64_t ldw, int64_t r0, int64_t r1,
                        float* dst);

// Which vector path QGemvI8/QGemvBf16 take on this CPU: "avx512", "avx2" or "scalar".
const char* QGemvPath();

}  // namespace dynvm::onednn

#endif  // DYNVM_KERNELS_DNNL_QGEMV_H_
