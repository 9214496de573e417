// Elementwise f32 microkernels without transcendental functions (those are in activation.h):
// binary ops over rows, Where, the NaN-exact unary ops, mask rows, the scans some oneDNN
// kernels make before a primitive, and the channels-last max over pooling taps. Pointer in,
// pointer out, one thread. Every level gives the same bits (the same IEEE operation per
// element). Portable, AVX2+FMA and AVX-512 implementations (isa.h).
#ifndef DYNVM_KERNELS_CPU_ELEMENTWISE_H_
#define DYNVM_KERNELS_CPU_ELEMENTWISE_H_

#include <cstdint>

namespace dynvm::cpu {

enum class BinaryOp { kAdd, kSub, kMul, kDiv };

// y[r, j] = a[r, j] op b[r * b_row_stride + j] over `rows` rows of `n` (b_row_stride n: the
// same shape; 0: b is one row broadcast to every row; -1: b is one scalar). Same IEEE results
// as the reference kernel (y may be a or b).
void BinaryRows(BinaryOp op, int64_t rows, int64_t n, const float* a, const float* b,
                int64_t b_row_stride, float* y);

// y[e] = a[offset of e in a] op b[offset of e in b] for the output elements e in [begin, end)
// (row-major order) of an output of `rank` dims (1 to 8), y dense: a and b are read at their
// element strides (0 along an axis they broadcast over; any other stride, a transposed or sliced
// view's). y points at the output's element 0. Rows of the last axis run a vector loop where a
// and b step by 0 or 1 there, a scalar loop otherwise. Same IEEE results as the reference
// kernel; y may be a or b where that operand has y's dense strides.
void BinaryStrided(BinaryOp op, int rank, const int64_t* dims, const float* a,
                   const int64_t* a_strides, const float* b, const int64_t* b_strides,
                   int64_t begin, int64_t end, float* y);

// out[j] = cond[j] ? x[j] : y[j] over blocks: for each of `blocks` blocks of `n` outputs,
// cond[j] (bytes, 0 or 1) with cond advancing by cond_step per block (0: one block repeated);
// x and y likewise, with step -1 meaning one scalar.
void WhereBlocks(int64_t blocks, int64_t n, const uint8_t* cond, int64_t cond_step, const float* x,
                 int64_t x_step, const float* y, int64_t y_step, float* out);

// Unary ops IEEE arithmetic gives exactly (NaN propagated): Relu (x < 0 ? 0 : x), LeakyRelu
// (x < 0 ? alpha x : x), Abs, Neg, Sqrt. y may be x.
enum class UnaryOp { kRelu, kLeakyRelu, kAbs, kNeg, kSqrt };
void Unary(UnaryOp op, float alpha, int64_t n, const float* x, float* y);

// y[j] += x[j] (a bias, an additive mask row).
void AddTo(int64_t n, const float* x, float* y);
// y[j] = m[j] == when ? fill : y[j] (a boolean mask row).
void FillWhere(int64_t n, const bool* m, bool when, float fill, float* y);

// Whether any of n f32 bit patterns is a NaN (an integer test: no floating-point compare).
bool AnyNaN(int64_t n, const uint32_t* bits);
// Whether any |v[i]| reaches `limit` (limit > 0; INT32_MIN counts as 2^31).
bool AnyAbsAtLeast(int64_t n, const int32_t* v, int32_t limit);

// One output pixel of a channels-last max pool: y[j] = the maximum over taps t of
// x[taps[t] + j] for j < c, NaN larger than every number (as the reference kernel). n_taps >= 1.
void MaxOverTaps(int64_t c, const float* x, const int64_t* taps, int64_t n_taps, float* y);

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_ELEMENTWISE_H_
