// The f32 GEMV microkernel: a row vector times a matrix, at batch 1 (a decode step), one thread.
// Portable, AVX2+FMA and AVX-512 implementations (isa.h).
#ifndef DYNVM_KERNELS_CPU_GEMV_H_
#define DYNVM_KERNELS_CPU_GEMV_H_

#include <cstdint>

namespace dynvm::cpu {

// y[j] = alpha * sum_i x[i] * B[i, j] + beta * y[j] for j < n, with B k x n given as
// 'T': the transpose of a row-major [n, k] matrix (a Linear layer's or an RNN's weight;
// B[i, j] = b[j * ldb + i]), or 'N': row-major (B[i, j] = b[i * ldb + j]). y is not read when
// beta is 0 (overlapping x or b gives unspecified values, never an access out of them). Streams
// B once: at these sizes the product is bound by reading the weights, and a GEMV that goes
// straight at them beats dnnl_sgemm's dispatch (kernels/dnnl/choice.h has the rule).
void Gemv(char trans, int64_t n, int64_t k, float alpha, const float* x, const float* b,
          int64_t ldb, float beta, float* y);

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_GEMV_H_
