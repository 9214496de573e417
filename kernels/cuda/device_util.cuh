// Device-side helpers shared by the .cu files: launch shapes and strided offsets. Internal.
#ifndef DYNVM_KERNELS_CUDA_DEVICE_UTIL_CUH_
#define DYNVM_KERNELS_CUDA_DEVICE_UTIL_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/launch.h"

namespace dynvm::cuda {

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements: enough to fill the device, never more than
// the loop needs.
inline unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 8192 ? 8192 : blocks));
}

// The element offsets of linear index i (row-major over walk.dims) in each operand.
template <int N>
__device__ __forceinline__ void Offsets(const Walk<N>& walk, int64_t i, int64_t (&off)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = walk.rank - 1; d >= 0; --d) {
    const int64_t extent = walk.dims[d];
    const int64_t idx = i % extent;
    i /= extent;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += idx * walk.strides[k][d];
  }
}

#define DYNVM_GRID_STRIDE_LOOP(i, n)                                                     \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

}  // namespace dynvm::cuda

#endif  // DYNVM_KERNELS_CUDA_DEVICE_UTIL_CUH_
