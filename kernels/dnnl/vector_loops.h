// Plain vectorized loops (cloned for AVX-512 and AVX2, picked by the CPU) for work where a
// oneDNN primitive costs more than it saves: small or shape-changing tensors, where binding a
// primitive per shape and executing it dominates (a decoder whose sequence grows every step).
// Internal to the oneDNN backend.
#ifndef DYNVM_KERNELS_DNNL_VECTOR_LOOPS_H_
#define DYNVM_KERNELS_DNNL_VECTOR_LOOPS_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "kernels/kernel.h"

namespace dynvm::onednn {

// Softmax over each of `rows` contiguous rows of `n` floats (x and y may be the same array),
// with the reference kernel's non-finite results: entries equal to -inf give exactly 0; a row
// holding NaN or +inf, or -inf only, is NaN throughout.
void SoftmaxRows(int64_t rows, int64_t n, const float* x, float* y);

// y = erf(x) for n floats, within 2e-7 absolute and 1e-6 relative (x and y may be the same
// array). NaN gives NaN; +-inf give +-1.
void ErfArray(int64_t n, const float* x, float* y);
// y = x/2 (1 + erf(x / sqrt 2)) (GELU, erf form) in one pass; y may be x.
void GeluErfArray(int64_t n, const float* x, float* y);

// Layer normalization of `rows` contiguous rows of `n` floats: (x - mean) / sqrt(var + eps),
// times scale[n] and plus bias[n] when given (either may be null).
void LayerNormRows(int64_t rows, int64_t n, const float* x, const float* scale, const float* bias,
                   float epsilon, float* y);

enum class BinaryOp { kAdd, kSub, kMul, kDiv };

// y[r, j] = a[r, j] op b[r * b_row_stride + j] over `rows` rows of `n` (b_row_stride n: the
// same shape; 0: b is one row broadcast to every row; -1: b is one scalar). Same IEEE results
// as the reference kernel (y may be a or b).
void BinaryRows(BinaryOp op, int64_t rows, int64_t n, const float* a, const float* b,
                int64_t b_row_stride, float* y);

// y[i] = cond[i] ? x[i] : y[i] over blocks: for each of `blocks` blocks of `n` outputs,
// cond[j] (bytes, 0 or 1) with cond advancing by cond_step per block (0: one block repeated);
// x and y likewise, with step -1 meaning one scalar.
void WhereBlocks(int64_t blocks, int64_t n, const uint8_t* cond, int64_t cond_step, const float* x,
                 int64_t x_step, const float* y, int64_t y_step, float* out);

// A row vector times a matrix, at batch 1 (a decode step's GEMV), on one thread:
// y[j] = alpha * sum_i x[i] * B[i, j] + beta * y[j] for j < n, with B k x n given as
// 'T': the transpose of a row-major [n, k] matrix (a Linear layer's or an RNN's weight;
// B[i, j] = b[j * ldb + i]), or 'N': row-major (B[i, j] = b[i * ldb + j]). y is not read when
// beta is 0 (overlapping x or b gives unspecified values, never an access out of them). Streams B
// once: at these sizes the product is bound by reading the weights, and a GEMV that goes straight
// at them beats dnnl_sgemm's dispatch.
void Gemv(char trans, int64_t n, int64_t k, float alpha, const float* x, const float* b,
          int64_t ldb, float beta, float* y);

// GEMVs of at least this many multiply-adds are split across the context's threads
// (docs/threads.md: measured with dnnl_benchmark's BM_Gemv sweep).
inline constexpr int64_t kMinParallelGemv = int64_t{1} << 15;

// Gemv on the context's threads (ctx.ParallelFor): the outputs y[j0, j1) of each range, with
// the weight rows ('T') or columns ('N') they read; the same thread gets the same rows every
// call, so its slice of the weights stays in its core's cache. One thread below
// kMinParallelGemv.
void ParallelGemv(const KernelContext& ctx, char trans, int64_t n, int64_t k, float alpha,
                  const float* x, const float* b, int64_t ldb, float beta, float* y);

// Rows of SoftmaxRows / LayerNormRows split across the context's threads when rows * n is at
// least kMinParallelRows elements (BM_SoftmaxSplit / BM_LayerNormSplit in dnnl_benchmark.cc: on
// the idle AVX2 EPYC 2 threads win from 1K elements of Softmax and 4K of LayerNorm).
inline constexpr int64_t kMinParallelRows = int64_t{1} << 12;
void ParallelSoftmaxRows(const KernelContext& ctx, int64_t rows, int64_t n, const float* x,
                         float* y);
void ParallelLayerNormRows(const KernelContext& ctx, int64_t rows, int64_t n, const float* x,
                           const float* scale, const float* bias, float epsilon, float* y);

// RMS normalization of `rows` contiguous rows of `n` floats: x / sqrt(mean(x^2) + eps), times
// scale[n] when given (may be null). x and y may be the same array.
void RmsNormRows(int64_t rows, int64_t n, const float* x, const float* scale, float epsilon,
                 float* y);
void ParallelRmsNormRows(const KernelContext& ctx, int64_t rows, int64_t n, const float* x,
                         const float* scale, float epsilon, float* y);

// Elementwise loops are split across the context's threads from this many elements: the cheap
// ones (BinaryRows, Relu, Abs, Neg, Sqrt, Where, the reductions) from kMinParallelElements, those
// of a polynomial per element (Erf, Gelu, GeluTanh, Silu) from kMinParallelMathElements. On the
// idle AVX2 EPYC (BM_BinarySplit, BM_ErfSplit in dnnl_benchmark.cc), with the operands in one
// core's cache, 2 threads lose to 1 on a broadcast Add up to 64K elements and win from 128K;
// on Erf they win from 1K. In a model's graph an Add's operands come from kernels split the
// same way, half in each core's cache: there 32K measured as fast as 128K or slightly faster
// (docs/threads.md), so the cheap loops keep 32K.
inline constexpr int64_t kMinParallelElements = int64_t{1} << 15;
inline constexpr int64_t kMinParallelMathElements = int64_t{1} << 12;

// fn(e0, e1) over [0, n) elements: ranges of whole 16-element blocks (a cache line of floats)
// on the context's threads, one thread below `min_elements`.
void ParallelElements(const KernelContext& ctx, int64_t n,
                      absl::FunctionRef<void(int64_t, int64_t)> fn,
                      int64_t min_elements = kMinParallelElements);

// BinaryRows split across the context's threads (by rows when b is one broadcast row, by
// elements otherwise).
void ParallelBinaryRows(const KernelContext& ctx, BinaryOp op, int64_t rows, int64_t n,
                        const float* a, const float* b, int64_t b_row_stride, float* y);

}  // namespace dynvm::onednn

#endif  // DYNVM_KERNELS_DNNL_VECTOR_LOOPS_H_
