// Plain vectorized loops (cloned for AVX-512 and AVX2, picked by the CPU) for work where a
// oneDNN primitive costs more than it saves: small or shape-changing tensors, where binding a
// primitive per shape and executing it dominates (a decoder whose sequence grows every step).
// Internal to the oneDNN backend.
#ifndef DYNVM_KERNELS_DNNL_VECTOR_LOOPS_H_
#define DYNVM_KERNELS_DNNL_VECTOR_LOOPS_H_

#include <cstdint>

namespace dynvm::onednn {

// Softmax over each of `rows` contiguous rows of `n` floats (x and y may be the same array).
// Entries equal to -inf give exactly 0. Returns false, writing nothing, when a row holds NaN
// or +inf or is -inf throughout (the reference kernel resolves those: NaN rows).
bool SoftmaxRows(int64_t rows, int64_t n, const float* x, float* y);

// y = erf(x) for n floats, within 2e-7 absolute and 1e-6 relative (x and y may be the same
// array). NaN gives NaN; +-inf give +-1.
void ErfArray(int64_t n, const float* x, float* y);

}  // namespace dynvm::onednn

#endif  // DYNVM_KERNELS_DNNL_VECTOR_LOOPS_H_
