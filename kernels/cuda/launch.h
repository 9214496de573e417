// The CUDA kernels' launch functions: the only interface between the nvcc-compiled .cu files and
// the rest of the backend (C++20 .cc files compiled by the host compiler). Plain types only, so
// this header needs nothing but the CUDA runtime's declarations. Each function queues its work
// on `stream` and returns the launch error (cudaGetLastError), or cudaSuccess; errors raised
// while the kernel runs surface at the next synchronization. Internal.
//
// Layouts: a Walk<N> describes N operands visited in the row-major order of `dims`, each with its
// own element strides (0 on a broadcast dim). Callers merge dims first (MergeDims in common.h),
// so most walks have rank 1 or 2.
#ifndef DYNVM_KERNELS_CUDA_LAUNCH_H_
#define DYNVM_KERNELS_CUDA_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dynvm::cuda {

inline constexpr int kMaxDims = 8;

template <int N>
struct Walk {
  int rank = 0;
  int64_t dims[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};
};

// Element types the kernels are instantiated for.
enum class ScalarType : int { kF32, kI32, kI64, kBool };

// ---- copy.cu ----

// dst[walk] := src[walk] (operand 0 dst, 1 src) for elements of `element_size` bytes (1, 2, 4
// or 8). Source strides may be 0 (a broadcast: Expand, Gemm's C).
cudaError_t StridedCopy(void* dst, const void* src, int element_size, const Walk<2>& walk,
                        int64_t n, cudaStream_t stream);
// dst[0..n) := the element whose bytes are `bits` (its low element_size bytes).
cudaError_t Fill(void* dst, int element_size, uint64_t bits, int64_t n, cudaStream_t stream);

// ---- elementwise.cu ----

enum class BinaryOp : int {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMax,
  kMin,  // arithmetic: output of the input type
  kEqual,
  kLess,
  kGreater,
  kLessOrEqual,
  kGreaterOrEqual,  // comparisons: bool output
  kAnd,
  kOr,
  kXor,  // bool inputs and output
};
// out[walk] := op(a[walk], b[walk]) (operands 0 out, 1 a, 2 b). Supported: f32 with every
// arithmetic op and comparison; i32/i64 with Add Sub Mul Max Min (wrapping) and comparisons;
// bool with Equal And Or Xor. Returns cudaErrorInvalidValue for another combination.
cudaError_t Binary(BinaryOp op, ScalarType type, void* out, const void* a, const void* b,
                   const Walk<3>& walk, int64_t n, cudaStream_t stream);

enum class UnaryOp : int {
  kNeg,
  kAbs,
  kExp,
  kLog,
  kSqrt,
  kTanh,
  kSigmoid,
  kRelu,
  kErf,
  kReciprocal,
  kFloor,
  kCeil,
  kSin,
  kCos,
  kNot,
};
// out[walk] := op(x[walk]) (operands 0 out, 1 x). f32 for every op but Not; Not on bool; Neg,
// Abs and Relu also on i32/i64.
cudaError_t Unary(UnaryOp op, ScalarType type, void* out, const void* x, const Walk<2>& walk,
                  int64_t n, cudaStream_t stream);

// out[walk] := cond[walk] ? a[walk] : b[walk] (operands 0 out, 1 cond (bool), 2 a, 3 b).
cudaError_t Where(void* out, const uint8_t* cond, const void* a, const void* b, int element_size,
                  const Walk<4>& walk, int64_t n, cudaStream_t stream);

// out[walk] := x[walk] converted (operands 0 out, 1 x). Float to integer truncates toward zero
// (saturating, NaN to 0); anything to bool is `!= 0`.
cudaError_t Cast(void* out, ScalarType to, const void* x, ScalarType from, const Walk<2>& walk,
                 int64_t n, cudaStream_t stream);

// ---- reduce.cu (contiguous operands, viewed as [outer, n, inner]) ----

// Softmax (or LogSoftmax) over the middle extent.
cudaError_t Softmax(float* y, const float* x, int64_t outer, int64_t n, int64_t inner, bool log,
                    cudaStream_t stream);
// Layer normalization of `rows` rows of `n`: y = (x - mean) * inv_std * scale + bias, with
// inv_std = 1 / sqrt(var + epsilon). scale, bias: [n] or null; mean, inv_std: [rows] or null.
cudaError_t LayerNorm(float* y, float* mean, float* inv_std, const float* x, const float* scale,
                      const float* bias, int64_t rows, int64_t n, float epsilon,
                      cudaStream_t stream);
// The index of the largest (max) or smallest (!max) value along the middle extent: NaN is
// larger than every number, ties pick the first index (the last with select_last).
cudaError_t ArgReduce(int64_t* out, const float* x, int64_t outer, int64_t n, int64_t inner,
                      bool max, bool select_last, cudaStream_t stream);

// ---- index.cu ----

// Gather along an axis: data [outer, axis_n, inner] (contiguous), indices [num] (contiguous
// i64, or i32 when indices_i32), out [outer, num, inner]. A negative index counts from the end;
// one outside [-axis_n, axis_n) sets *error_flag to 1 (device memory, cleared by the caller)
// and leaves its output rows unwritten.
cudaError_t Gather(void* out, const void* data, const void* indices, bool indices_i32,
                   int element_size, int64_t outer, int64_t axis_n, int64_t inner, int64_t num,
                   int* error_flag, cudaStream_t stream);

// One LSTM time step's gate math (ONNX gate order i, o, f, c; sigmoid, tanh, tanh):
//   gates [batch, 4H]: X*W^T + H*R^T (without biases); bias [8H] (Wb then Rb) or null;
//   c_prev [batch, H] or null (zeros); writes c_out and h_out [batch, H] and, when y is not
//   null, y [batch, H] (= h_out). c_out may alias c_prev.
cudaError_t LstmGates(const float* gates, const float* bias, const float* c_prev, float* h_out,
                      float* c_out, float* y, int64_t batch, int64_t hidden, cudaStream_t stream);

// dynvm::Sample on rows of logits (row r at logits + r * row_stride, contiguous within the
// row): greedy when temperature <= 0, else the smallest k with p_0 + ... + p_k > u * sum(p),
// p_k = exp((logit_k - max) / temperature) in double, u = PhiloxUniform(seed, step, r)
// (docs/sampling.md).
cudaError_t Sample(int64_t* out, const float* logits, int64_t rows, int64_t vocab,
                   int64_t row_stride, double temperature, uint64_t seed, uint64_t step,
                   cudaStream_t stream);

}  // namespace dynvm::cuda

#endif  // DYNVM_KERNELS_CUDA_LAUNCH_H_
