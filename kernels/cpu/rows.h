// Row-wise f32 microkernels over contiguous rows: softmax and the normalizations. Pointer in,
// pointer out, one thread; kernels/dnnl/ splits rows over the VM's pool. Portable, AVX2+FMA and
// AVX-512 implementations (isa.h); the same results on every level where the arithmetic is
// the same (the AVX2 row max and sum keep the other levels' 16 lanes and order).
#ifndef DYNVM_KERNELS_CPU_ROWS_H_
#define DYNVM_KERNELS_CPU_ROWS_H_

#include <cstdint>

namespace dynvm::cpu {

// Softmax over each of `rows` contiguous rows of `n` floats (x and y may be the same array),
// with the reference kernel's non-finite results: entries equal to -inf give exactly 0; a row
// holding NaN or +inf, or -inf only, is NaN throughout. exp by FastExp (fast_math.h).
void SoftmaxRows(int64_t rows, int64_t n, const float* x, float* y);

// LogSoftmax over each of `rows` contiguous rows of `n` floats (x and y may be the same array):
// y = x - max - log(sum(exp(x - max))), the sum of FastExp's in float lanes (blocks added in
// double), the log and the subtractions in double as the reference kernel does. FastExp(0) is
// exactly 1 and the max contributes it, so sum >= 1: a row's only element gives exactly 0, and no
// value is above 0. Non-finite results as SoftmaxRows': -inf entries give -inf; a row holding NaN
// or +inf, or -inf only, is NaN throughout.
void LogSoftmaxRows(int64_t rows, int64_t n, const float* x, float* y);

// Layer normalization of `rows` contiguous rows of `n` floats: (x - mean) / sqrt(var + eps),
// times scale[n] and plus bias[n] when given (either may be null). x and y may be the same.
void LayerNormRows(int64_t rows, int64_t n, const float* x, const float* scale, const float* bias,
                   float epsilon, float* y);

// RMS normalization: x / sqrt(mean(x^2) + eps), times scale[n] when given (may be null).
void RmsNormRows(int64_t rows, int64_t n, const float* x, const float* scale, float epsilon,
                 float* y);

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_ROWS_H_
