// Strided copies (the `copy` instruction, Transpose, Concat, Expand, contiguous staging) and
// fills.
#include "kernels/cuda/device_util.cuh"

namespace dynvm::cuda {
namespace {

template <typename T>
__global__ void StridedCopyKernel(T* dst, const T* src, Walk<2> walk, int64_t n) {
  DYNVM_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    Offsets(walk, i, off);
    dst[off[0]] = src[off[1]];
  }
}

template <typename T>
__global__ void FillKernel(T* dst, T value, int64_t n) {
  DYNVM_GRID_STRIDE_LOOP(i, n) { dst[i] = value; }
}

// Element types by size: the copy moves bits, never converts.
template <typename Fn>
cudaError_t BySize(int element_size, Fn&& fn) {
  switch (element_size) {
    case 1:
      return fn(static_cast<uint8_t*>(nullptr));
    case 2:
      return fn(static_cast<uint16_t*>(nullptr));
    case 4:
      return fn(static_cast<uint32_t*>(nullptr));
    case 8:
      return fn(static_cast<uint64_t*>(nullptr));
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t StridedCopy(void* dst, const void* src, int element_size, const Walk<2>& walk,
                        int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return BySize(element_size, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    StridedCopyKernel<T><<<GridFor(n), kThreads, 0, stream>>>(static_cast<T*>(dst),
                                                              static_cast<const T*>(src), walk, n);
    return cudaGetLastError();
  });
}

cudaError_t Fill(void* dst, int element_size, uint64_t bits, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return BySize(element_size, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    FillKernel<T>
        <<<GridFor(n), kThreads, 0, stream>>>(static_cast<T*>(dst), static_cast<T>(bits), n);
    return cudaGetLastError();
  });
}

}  // namespace dynvm::cuda
