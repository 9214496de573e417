// f32 reduction microkernels over one contiguous block of axes, one thread. Portable,
// AVX2+FMA and AVX-512 implementations (isa.h), all with the same lanes and order.
#ifndef DYNVM_KERNELS_CPU_REDUCE_H_
#define DYNVM_KERNELS_CPU_REDUCE_H_

#include <cstdint>

namespace dynvm::cpu {

enum class ReduceOp { kSum, kSumSquare, kMax, kMin };

// y[r] = op over x[r * n, (r + 1) * n): 16 lanes of partial results, then the tail. kMax/kMin
// skip NaN (callers send inputs holding NaN elsewhere).
void ReduceRows(ReduceOp op, int64_t rows, int64_t n, const float* x, float* y);

// y[o, i] = op over j of x[o, j, i] for x [outer, reduce, inner]: a middle-axis reduction (a mean
// pool over a sequence), vectorized along the inner axis, each element in order of j.
void ReduceColumns(ReduceOp op, int64_t outer, int64_t reduce, int64_t inner, const float* x,
                   float* y);

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_REDUCE_H_
