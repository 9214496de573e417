// The CUDA backend's per-VM context (a DeviceContext, kernels/kernel.h): one stream on which
// every kernel, copy and cuBLAS call of the VM is queued, a cuBLAS handle bound to it (created
// on first use), and the VM's device pool (a CudaAllocator). Work on one stream runs in order,
// which is what makes returning a block to the pool while a kernel may still read it safe.
//
// Sync points (the host waits for the device): Copy to the host, CopyToHost (read_i/read_f/
// read_b of a device tensor), Synchronize (the end of every VM run), and the bounds flag of a
// device Gather. Copies from the host also wait, so the host buffer may change at once.
//
// Thread safety: thread-compatible, like the VM that owns it. Uses the current CUDA device of
// the calling thread (ordinal 0 unless the process chose another; CUDA_VISIBLE_DEVICES picks
// the GPU).
#ifndef DYNVM_KERNELS_CUDA_CUDA_CONTEXT_H_
#define DYNVM_KERNELS_CUDA_CUDA_CONTEXT_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/device_context.h"
#include "kernels/kernel.h"

namespace dynvm::cuda {

class CudaContext final : public DeviceContext {
 public:
  // Unavailable (DeviceAvailable, common.h) when there is no device to use.
  static absl::StatusOr<std::unique_ptr<CudaContext>> Create(const DeviceContextOptions& options);
  // Waits for queued work, then releases the stream and the cuBLAS handle. The pool lives on
  // while tensors from it do.
  ~CudaContext() override;

  Device device() const override { return Device::kCUDA; }
  Allocator& allocator() override { return *pool_; }
  const std::shared_ptr<Allocator>& allocator_ref() const override { return pool_; }
  absl::Status Copy(const Tensor& src, Tensor& dst) override;
  absl::Status CopyToHost(void* host_dst, const void* device_src, size_t bytes) override;
  absl::Status CopyFromHost(void* device_dst, const void* host_src, size_t bytes) override;
  absl::Status Synchronize() override;
  absl::StatusOr<StorageRef> UploadConstant(const void* host, size_t bytes) override;

  cudaStream_t stream() const { return stream_; }
  // The cuBLAS handle, bound to stream(); created on first use.
  absl::StatusOr<cublasHandle_t> cublas();
  // Scratch device memory from the pool, returned to it when the storage is dropped (safe
  // while work queued on stream() still uses it: later users queue behind it).
  absl::StatusOr<StorageRef> Temp(size_t bytes);

 private:
  CudaContext() = default;

  std::shared_ptr<Allocator> pool_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
};

}  // namespace dynvm::cuda

#endif  // DYNVM_KERNELS_CUDA_CUDA_CONTEXT_H_
