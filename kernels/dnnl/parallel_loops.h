// The microkernels of kernels/cpu/ split over the VM's thread pool (ctx.ParallelFor), with the
// thresholds below which they run on one thread (docs/threads.md). Glue of the oneDNN backend:
// the loops themselves are kernels/cpu/'s.
#ifndef DYNVM_KERNELS_DNNL_PARALLEL_LOOPS_H_
#define DYNVM_KERNELS_DNNL_PARALLEL_LOOPS_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/kernel.h"

namespace dynvm::onednn {

// GEMVs of at least this many multiply-adds are split across the context's threads
// (docs/threads.md: measured with dnnl_benchmark's BM_Gemv sweep).
inline constexpr int64_t kMinParallelGemv = int64_t{1} << 15;

// cpu::Gemv on the context's threads: the outputs y[j0, j1) of each range, with the weight rows
// ('T') or columns ('N') they read; the same thread gets the same rows every call, so its slice
// of the weights stays in its core's cache. One thread below kMinParallelGemv.
void ParallelGemv(const KernelContext& ctx, char trans, int64_t n, int64_t k, float alpha,
                  const float* x, const float* b, int64_t ldb, float beta, float* y);

// Rows of cpu::SoftmaxRows / LogSoftmaxRows / LayerNormRows / RmsNormRows split across the
// context's threads when rows * n is at least kMinParallelRows elements (BM_SoftmaxSplit /
// BM_LayerNormSplit in dnnl_benchmark.cc: on the idle AVX2 EPYC 2 threads win from 1K elements of
// Softmax and 4K of LayerNorm).
inline constexpr int64_t kMinParallelRows = int64_t{1} << 12;
void ParallelSoftmaxRows(const KernelContext& ctx, int64_t rows, int64_t n, const float* x,
                         float* y);
void ParallelLogSoftmaxRows(const KernelContext& ctx, int64_t rows, int64_t n, const float* x,
                            float* y);
void ParallelLayerNormRows(const KernelContext& ctx, int64_t rows, int64_t n, const float* x,
                           const float* scale, const float* bias, float epsilon, float* y);
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

// cpu::BinaryRows split across the context's threads (by rows when b is one broadcast row, by
// elements otherwise).
void ParallelBinaryRows(const KernelContext& ctx, cpu::BinaryOp op, int64_t rows, int64_t n,
                        const float* a, const float* b, int64_t b_row_stride, float* y);

// y[r, j] = a[r, j] op b[r] over `rows` rows of `n`: b one scalar per row (a [N, 1, 1] operand
// broadcast over a [N, C, T] one), split across the context's threads by elements.
void ParallelBinaryRowScalars(const KernelContext& ctx, cpu::BinaryOp op, int64_t rows, int64_t n,
                              const float* a, const float* b, float* y);

}  // namespace dynvm::onednn

#endif  // DYNVM_KERNELS_DNNL_PARALLEL_LOOPS_H_
