// Softmax/LogSoftmax, LayerNormalization and ArgMax/ArgMin. A row that is contiguous (inner ==
// 1) is reduced by one block; otherwise each thread reduces one column.
#include <cmath>

#include "kernels/cuda/device_util.cuh"

namespace dynvm::cuda {
namespace {

constexpr int kBlock = 256;  // a power of two: the tree reductions below rely on it

// NaN is larger than every number (the reference kernels' total order).
__device__ __forceinline__ bool TotalLess(float a, float b) {
  if (isnan(a)) return false;
  if (isnan(b)) return true;
  return a < b;
}

template <typename T, typename Op>
__device__ T BlockReduce(T v, Op op, T* smem) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) smem[threadIdx.x] = op(smem[threadIdx.x], smem[threadIdx.x + s]);
    __syncthreads();
  }
  const T r = smem[0];
  __syncthreads();
  return r;
}

struct MaxOp {
  // std::max semantics of the reference (a NaN operand on the right is skipped).
  __device__ float operator()(float a, float b) const { return a < b ? b : a; }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>(rows < 1 ? 1 : (rows > 65535 ? 65535 : rows));
}

__global__ void SoftmaxRows(float* y, const float* x, int64_t rows, int64_t n, bool log) {
  __shared__ float smem[kBlock];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* p = x + r * n;
    float* q = y + r * n;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += kBlock) m = MaxOp{}(m, p[i]);
    m = BlockReduce(m, MaxOp{}, smem);
    float s = 0;
    for (int64_t i = threadIdx.x; i < n; i += kBlock) s += expf(p[i] - m);
    s = BlockReduce(s, SumOp{}, smem);
    const float log_s = logf(s);
    for (int64_t i = threadIdx.x; i < n; i += kBlock) {
      q[i] = log ? p[i] - m - log_s : expf(p[i] - m) / s;
    }
  }
}

__global__ void SoftmaxColumns(float* y, const float* x, int64_t outer, int64_t n, int64_t inner,
                               bool log) {
  DYNVM_GRID_STRIDE_LOOP(t, outer * inner) {
    const int64_t base = (t / inner) * n * inner + t % inner;
    float m = -INFINITY;
    for (int64_t i = 0; i < n; ++i) m = MaxOp{}(m, x[base + i * inner]);
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += expf(x[base + i * inner] - m);
    const float log_s = logf(s);
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[base + i * inner];
      y[base + i * inner] = log ? v - m - log_s : expf(v - m) / s;
    }
  }
}

__global__ void LayerNormRows(float* y, float* mean_out, float* inv_out, const float* x,
                              const float* scale, const float* bias, int64_t rows, int64_t n,
                              float epsilon) {
  __shared__ float smem[kBlock];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* p = x + r * n;
    float* q = y + r * n;
    float s = 0;
    for (int64_t i = threadIdx.x; i < n; i += kBlock) s += p[i];
    const float mean = BlockReduce(s, SumOp{}, smem) / static_cast<float>(n);
    float sq = 0;
    for (int64_t i = threadIdx.x; i < n; i += kBlock) {
      const float d = p[i] - mean;
      sq += d * d;
    }
    const float var = BlockReduce(sq, SumOp{}, smem) / static_cast<float>(n);
    const float inv = 1.0f / sqrtf(var + epsilon);
    for (int64_t i = threadIdx.x; i < n; i += kBlock) {
      float v = (p[i] - mean) * inv;
      if (scale != nullptr) v *= scale[i];
      if (bias != nullptr) v += bias[i];
      q[i] = v;
    }
    if (threadIdx.x == 0) {
      if (mean_out != nullptr) mean_out[r] = mean;
      if (inv_out != nullptr) inv_out[r] = inv;
    }
  }
}

struct Best {
  float v;
  int64_t i;
};

// Whether candidate b replaces a: a better value, or an equal one at the preferred index.
__device__ __forceinline__ bool Replaces(const Best& a, const Best& b, bool max, bool select_last) {
  const bool better = max ? TotalLess(a.v, b.v) : TotalLess(b.v, a.v);
  const bool worse = max ? TotalLess(b.v, a.v) : TotalLess(a.v, b.v);
  if (better) return true;
  if (worse) return false;
  return select_last ? b.i > a.i : b.i < a.i;
}

__global__ void ArgRows(int64_t* out, const float* x, int64_t rows, int64_t n, bool max,
                        bool select_last) {
  __shared__ float sv[kBlock];
  __shared__ int64_t si[kBlock];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* p = x + r * n;
    Best best{0.0f, -1};
    for (int64_t i = threadIdx.x; i < n; i += kBlock) {
      const Best c{p[i], i};
      if (best.i < 0 || Replaces(best, c, max, select_last)) best = c;
    }
    sv[threadIdx.x] = best.v;
    si[threadIdx.x] = best.i;
    __syncthreads();
    for (int s = kBlock / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) {
        const Best a{sv[threadIdx.x], si[threadIdx.x]};
        const Best b{sv[threadIdx.x + s], si[threadIdx.x + s]};
        if (b.i >= 0 && (a.i < 0 || Replaces(a, b, max, select_last))) {
          sv[threadIdx.x] = b.v;
          si[threadIdx.x] = b.i;
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) out[r] = si[0] < 0 ? 0 : si[0];
    __syncthreads();
  }
}

__global__ void ArgColumns(int64_t* out, const float* x, int64_t outer, int64_t n, int64_t inner,
                           bool max, bool select_last) {
  DYNVM_GRID_STRIDE_LOOP(t, outer * inner) {
    const int64_t base = (t / inner) * n * inner + t % inner;
    Best best{x[base], 0};
    for (int64_t i = 1; i < n; ++i) {
      const Best c{x[base + i * inner], i};
      if (Replaces(best, c, max, select_last)) best = c;
    }
    out[t] = best.i;
  }
}

}  // namespace

cudaError_t Softmax(float* y, const float* x, int64_t outer, int64_t n, int64_t inner, bool log,
                    cudaStream_t stream) {
  if (outer <= 0 || n <= 0 || inner <= 0) return cudaSuccess;
  if (inner == 1) {
    SoftmaxRows<<<RowBlocks(outer), kBlock, 0, stream>>>(y, x, outer, n, log);
  } else {
    SoftmaxColumns<<<GridFor(outer * inner), kThreads, 0, stream>>>(y, x, outer, n, inner, log);
  }
  return cudaGetLastError();
}

cudaError_t LayerNorm(float* y, float* mean, float* inv_std, const float* x, const float* scale,
                      const float* bias, int64_t rows, int64_t n, float epsilon,
                      cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  LayerNormRows<<<RowBlocks(rows), kBlock, 0, stream>>>(y, mean, inv_std, x, scale, bias, rows, n,
                                                        epsilon);
  return cudaGetLastError();
}

cudaError_t ArgReduce(int64_t* out, const float* x, int64_t outer, int64_t n, int64_t inner,
                      bool max, bool select_last, cudaStream_t stream) {
  if (outer <= 0 || n <= 0 || inner <= 0) return cudaSuccess;
  if (inner == 1) {
    ArgRows<<<RowBlocks(outer), kBlock, 0, stream>>>(out, x, outer, n, max, select_last);
  } else {
    ArgColumns<<<GridFor(outer * inner), kThreads, 0, stream>>>(out, x, outer, n, inner, max,
                                                                select_last);
  }
  return cudaGetLastError();
}

}  // namespace dynvm::cuda
