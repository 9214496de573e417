#include "kernels/cuda/cuda_context.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/cuda_allocator.h"
#include "allocator/cuda_status.h"
#include "common/status_macros.h"
#include "kernels/cuda/common.h"
#include "kernels/cuda/cublas_status.h"

namespace dynvm {
namespace cuda {
namespace {

// Host-side strided copy of `dims` elements of `esize` bytes (staging for strided host tensors).
void HostStridedCopy(uint8_t* dst, absl::Span<const int64_t> dst_strides, const uint8_t* src,
                     absl::Span<const int64_t> src_strides, absl::Span<const int64_t> dims,
                     int64_t esize) {
  const Walk<2> w = MakeWalk<2>(dims, {dst_strides, src_strides});
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, od = 0, os = 0;
    for (int d = w.rank - 1; d >= 0; --d) {
      const int64_t idx = rest % w.dims[d];
      rest /= w.dims[d];
      od += idx * w.strides[0][d];
      os += idx * w.strides[1][d];
    }
    std::memcpy(dst + od * esize, src + os * esize, static_cast<size_t>(esize));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaContext>> CudaContext::Create(
    const DeviceContextOptions& options) {
  DYNVM_RETURN_IF_ERROR(DeviceAvailable());
  std::unique_ptr<CudaContext> c(new CudaContext());
  DYNVM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking));
  CudaAllocator::Options pool_options;
  pool_options.memory_limit = options.memory_limit;
  pool_options.system = {&DeviceMalloc, &DeviceFree};
  c->pool_ = std::make_shared<CudaAllocator>(std::move(pool_options));
  return c;
}

CudaContext::~CudaContext() {
  if (stream_ != nullptr) {
    // Errors cannot be reported from a destructor; a fault was reported by the run it hit.
    if (cudaStreamSynchronize(stream_) != cudaSuccess) cudaGetLastError();
  }
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr && cudaStreamDestroy(stream_) != cudaSuccess) cudaGetLastError();
}

absl::StatusOr<cublasHandle_t> CudaContext::cublas() {
  if (cublas_ == nullptr) {
    cublasHandle_t h = nullptr;
    DYNVM_CUBLAS_RETURN_IF_ERROR(cublasCreate(&h));
    if (absl::Status s = CublasStatus(cublasSetStream(h, stream_), "cublasSetStream"); !s.ok()) {
      cublasDestroy(h);
      return s;
    }
    // Full FP32 GEMMs (no TF32): results match the reference kernels to f32 tolerances.
    if (absl::Status s =
            CublasStatus(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
        !s.ok()) {
      cublasDestroy(h);
      return s;
    }
    cublas_ = h;
  }
  return cublas_;
}

absl::StatusOr<StorageRef> CudaContext::Temp(size_t bytes) {
  return Storage::Allocate(*pool_, bytes, pool_);
}

absl::Status CudaContext::Synchronize() {
  DYNVM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaContext::CopyToHost(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  DYNVM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream_));
  DYNVM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaContext::CopyFromHost(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  DYNVM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  // The host buffer may be reused as soon as this returns.
  DYNVM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaContext::Copy(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (n == 0) return absl::OkStatus();
  const bool src_dev = src.device() == Device::kCUDA;
  const bool dst_dev = dst.device() == Device::kCUDA;
  if (!src_dev && !dst_dev) {
    return absl::InvalidArgumentError("CudaContext::Copy: neither tensor is on the device");
  }
  const int64_t esize = DTypeSize(src.dtype());
  const size_t bytes = static_cast<size_t>(n * esize);
  if (src_dev && dst_dev) {
    if (src.is_contiguous() && dst.is_contiguous()) {
      DYNVM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), bytes,
                                                 cudaMemcpyDeviceToDevice, stream_));
      return absl::OkStatus();
    }
    return DeviceCopy(*this, src, dst);
  }
  if (!src_dev) {  // host -> device
    const void* host = src.raw_data();
    std::vector<uint8_t> staged;
    if (!src.is_contiguous()) {
      staged.resize(bytes);
      int64_t packed[Tensor::kMaxRank];
      ContiguousStrides(src.dims(), packed);
      HostStridedCopy(staged.data(), absl::Span<const int64_t>(packed, src.rank()),
                      static_cast<const uint8_t*>(src.raw_data()), src.strides(), src.dims(),
                      esize);
      host = staged.data();
    }
    if (dst.is_contiguous()) return CopyFromHost(dst.raw_data(), host, bytes);
    DYNVM_ASSIGN_OR_RETURN(StorageRef tmp, Temp(bytes));
    DYNVM_RETURN_IF_ERROR(CopyFromHost((tmp)->data(), host, bytes));
    DYNVM_ASSIGN_OR_RETURN(Tensor packed, Tensor::View(tmp, 0, src.dtype(), src.dims()));
    return DeviceCopy(*this, packed, dst);
  }
  // device -> host
  const void* device = src.raw_data();
  StorageRef tmp;
  if (!src.is_contiguous()) {
    DYNVM_ASSIGN_OR_RETURN(const void* d, ContiguousData(*this, src, &tmp));
    device = d;
  }
  if (dst.is_contiguous()) return CopyToHost(dst.raw_data(), device, bytes);
  std::vector<uint8_t> staged(bytes);
  DYNVM_RETURN_IF_ERROR(CopyToHost(staged.data(), device, bytes));
  int64_t packed[Tensor::kMaxRank];
  ContiguousStrides(dst.dims(), packed);
  HostStridedCopy(static_cast<uint8_t*>(dst.raw_data()), dst.strides(), staged.data(),
                  absl::Span<const int64_t>(packed, dst.rank()), dst.dims(), esize);
  return absl::OkStatus();
}

absl::StatusOr<StorageRef> CudaContext::UploadConstant(const void* host, size_t bytes) {
  void* p = nullptr;
  if (bytes > 0) {
    DYNVM_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
    // Complete before this returns: other VMs' streams read the copy with no ordering to this one.
    if (absl::Status s = CopyFromHost(p, host, bytes); !s.ok()) {
      cudaFree(p);
      return s;
    }
  }
  return Storage::Wrap(Storage::Kind::kConstant, p, bytes, Device::kCUDA, [p] {
    if (p != nullptr && cudaFree(p) != cudaSuccess) cudaGetLastError();
  });
}

}  // namespace cuda
}  // namespace dynvm
