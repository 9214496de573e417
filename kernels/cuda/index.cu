// Gather (embedding rows), the LSTM gate math of one time step, and dynvm::Sample.
#include <cmath>

#include "kernels/cuda/device_util.cuh"

namespace dynvm::cuda {
namespace {

// Threads check the indices (every one, even when the output is empty) and copy the output
// elements whose index is valid.
template <typename T, typename I>
__global__ void GatherKernel(T* out, const T* data, const I* indices, int64_t outer, int64_t axis_n,
                             int64_t inner, int64_t num, int* error_flag) {
  DYNVM_GRID_STRIDE_LOOP(j, num) {
    const int64_t idx = static_cast<int64_t>(indices[j]);
    if (idx < -axis_n || idx >= axis_n) *error_flag = 1;  // same value from every writer
  }
  DYNVM_GRID_STRIDE_LOOP(t, outer * num * inner) {
    const int64_t k = t % inner;
    const int64_t rest = t / inner;
    const int64_t j = rest % num;
    const int64_t o = rest / num;
    int64_t idx = static_cast<int64_t>(indices[j]);
    if (idx < 0) idx += axis_n;
    if (idx < 0 || idx >= axis_n) continue;
    out[t] = data[(o * axis_n + idx) * inner + k];
  }
}

__device__ __forceinline__ float Sigmoid(float x) {
  return x >= 0.0f ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
}

__global__ void LstmGatesKernel(const float* gates, const float* bias, const float* c_prev,
                                float* h_out, float* c_out, float* y, int64_t batch,
                                int64_t hidden) {
  DYNVM_GRID_STRIDE_LOOP(t, batch * hidden) {
    const int64_t b = t / hidden;
    const int64_t h = t % hidden;
    const float* g = gates + b * 4 * hidden;
    float pre[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      pre[q] = g[q * hidden + h];
      if (bias != nullptr) pre[q] += bias[q * hidden + h] + bias[4 * hidden + q * hidden + h];
    }
    const float i = Sigmoid(pre[0]);
    const float o = Sigmoid(pre[1]);
    const float f = Sigmoid(pre[2]);
    const float c_hat = tanhf(pre[3]);
    const float cp = c_prev != nullptr ? c_prev[t] : 0.0f;
    const float c = f * cp + i * c_hat;
    const float hv = o * tanhf(c);
    c_out[t] = c;
    h_out[t] = hv;
    if (y != nullptr) y[t] = hv;
  }
}

// Philox4x32-10, as kernels/reference/philox.h.
__device__ double PhiloxUniform(uint64_t seed, uint64_t step, uint64_t row) {
  uint32_t ctr[4] = {static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32),
                     static_cast<uint32_t>(row), static_cast<uint32_t>(row >> 32)};
  uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += 0x9E3779B9u;
      key[1] += 0xBB67AE85u;
    }
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * ctr[2];
    const uint32_t next[4] = {
        static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
        static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
    for (int k = 0; k < 4; ++k) ctr[k] = next[k];
  }
  const uint64_t bits = ((static_cast<uint64_t>(ctr[0]) << 32) | ctr[1]) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);  // 2^-53
}

constexpr int kSampleBlock = 256;
constexpr unsigned long long kNoPick = ~0ull;

__device__ __forceinline__ bool Greater(float a, float b) {  // NaN is the largest
  if (isnan(a)) return !isnan(b);
  if (isnan(b)) return false;
  return a > b;
}

// One block per row. The argmax is exact (ties: the lowest index); the sampled token is the
// smallest k whose prefix sum exceeds u * total, with the prefix sums formed per thread chunk.
__global__ void SampleKernel(int64_t* out, const float* logits, int64_t rows, int64_t vocab,
                             int64_t row_stride, double temperature, uint64_t seed, uint64_t step) {
  __shared__ float best_v[kSampleBlock];
  __shared__ int64_t best_i[kSampleBlock];
  __shared__ double chunk_sum[kSampleBlock];
  __shared__ double total;
  __shared__ unsigned long long pick;  // the smallest crossing index, or kNoPick
  const int tid = threadIdx.x;
  const int64_t chunk = (vocab + kSampleBlock - 1) / kSampleBlock;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* p = logits + r * row_stride;
    const int64_t begin = tid * chunk;
    const int64_t end = begin + chunk < vocab ? begin + chunk : vocab;
    // Argmax over this thread's chunk, then across the block (chunks are in index order).
    float bv = 0;
    int64_t bi = -1;
    for (int64_t k = begin; k < end; ++k) {
      if (bi < 0 || Greater(p[k], bv)) {
        bv = p[k];
        bi = k;
      }
    }
    best_v[tid] = bv;
    best_i[tid] = bi;
    __syncthreads();
    for (int s = kSampleBlock / 2; s > 0; s >>= 1) {
      if (tid < s) {
        const int64_t ai = best_i[tid], ci = best_i[tid + s];
        const float av = best_v[tid], cv = best_v[tid + s];
        const bool take = ci >= 0 && (ai < 0 || Greater(cv, av) || (!Greater(av, cv) && ci < ai));
        if (take) {
          best_v[tid] = cv;
          best_i[tid] = ci;
        }
      }
      __syncthreads();
    }
    const float max_v = best_v[0];
    const int64_t argmax = best_i[0];
    if (temperature <= 0 || isnan(max_v) || isinf(max_v)) {
      if (tid == 0) out[r] = argmax;
      __syncthreads();
      continue;
    }
    const double max = static_cast<double>(max_v);
    double local = 0;
    for (int64_t k = begin; k < end; ++k) {
      const double v = exp((static_cast<double>(p[k]) - max) / temperature);
      local += isnan(v) ? 0.0 : v;
    }
    chunk_sum[tid] = local;
    if (tid == 0) pick = kNoPick;
    __syncthreads();
    if (tid == 0) {  // exclusive prefix over the chunks, in order
      double acc = 0;
      for (int k = 0; k < kSampleBlock; ++k) {
        const double c = chunk_sum[k];
        chunk_sum[k] = acc;
        acc += c;
      }
      total = acc;
    }
    __syncthreads();
    const double u = PhiloxUniform(seed, step, static_cast<uint64_t>(r)) * total;
    double acc = chunk_sum[tid];
    if (acc <= u) {  // otherwise the prefix crossed u in an earlier chunk
      for (int64_t k = begin; k < end; ++k) {
        const double v = exp((static_cast<double>(p[k]) - max) / temperature);
        acc += isnan(v) ? 0.0 : v;
        if (acc > u) {
          atomicMin(&pick, static_cast<unsigned long long>(k));
          break;
        }
      }
    }
    __syncthreads();
    if (tid == 0) out[r] = pick == kNoPick ? argmax : static_cast<int64_t>(pick);
    __syncthreads();
  }
}

}  // namespace

cudaError_t Gather(void* out, const void* data, const void* indices, bool indices_i32,
                   int element_size, int64_t outer, int64_t axis_n, int64_t inner, int64_t num,
                   int* error_flag, cudaStream_t stream) {
  const int64_t n = outer * num * inner;
  if (num <= 0) return cudaSuccess;
  auto launch = [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (indices_i32) {
      GatherKernel<T, int32_t><<<GridFor(n > num ? n : num), kThreads, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(data), static_cast<const int32_t*>(indices),
          outer, axis_n, inner, num, error_flag);
    } else {
      GatherKernel<T, int64_t><<<GridFor(n > num ? n : num), kThreads, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(data), static_cast<const int64_t*>(indices),
          outer, axis_n, inner, num, error_flag);
    }
    return cudaGetLastError();
  };
  switch (element_size) {
    case 1:
      return launch(static_cast<uint8_t*>(nullptr));
    case 2:
      return launch(static_cast<uint16_t*>(nullptr));
    case 4:
      return launch(static_cast<uint32_t*>(nullptr));
    case 8:
      return launch(static_cast<uint64_t*>(nullptr));
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t LstmGates(const float* gates, const float* bias, const float* c_prev, float* h_out,
                      float* c_out, float* y, int64_t batch, int64_t hidden, cudaStream_t stream) {
  const int64_t n = batch * hidden;
  if (n <= 0) return cudaSuccess;
  LstmGatesKernel<<<GridFor(n), kThreads, 0, stream>>>(gates, bias, c_prev, h_out, c_out, y, batch,
                                                       hidden);
  return cudaGetLastError();
}

cudaError_t Sample(int64_t* out, const float* logits, int64_t rows, int64_t vocab,
                   int64_t row_stride, double temperature, uint64_t seed, uint64_t step,
                   cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(rows > 65535 ? 65535 : rows);
  SampleKernel<<<blocks, kSampleBlock, 0, stream>>>(out, logits, rows, vocab, row_stride,
                                                    temperature, seed, step);
  return cudaGetLastError();
}

}  // namespace dynvm::cuda
