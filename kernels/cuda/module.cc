// The CUDA module's entry points (libdynvm_cuda.so; allocator/cuda_module.h). The module is
// linked with a version script that exports these two symbols and nothing else: the dynvm and
// abseil code it carries stays private to it.
#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/cuda_module.h"
#include "allocator/cuda_status.h"
#include "common/status_macros.h"
#include "kernels/cuda/common.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/registry.h"

namespace dynvm::cuda {

absl::Status DeviceAvailable() {
  // Asked once, on first use (the module is loaded only when the device is wanted).
  static const absl::Status* const status = [] {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return new absl::Status(absl::UnavailableError(absl::StrCat(
          "no CUDA device available: ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
          "); the CUDA device needs an NVIDIA GPU and its driver (libcuda.so)")));
    }
    if (count <= 0) {
      return new absl::Status(
          absl::UnavailableError("no CUDA device available: the runtime found no device"));
    }
    return new absl::Status();
  }();
  return *status;
}

absl::StatusOr<void*> DeviceMalloc(size_t bytes) {
  void* p = nullptr;
  DYNVM_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  return p;
}

void DeviceFree(void* p) {
  // Nothing to report to: at process exit the runtime may already be unloading.
  if (cudaFree(p) != cudaSuccess) cudaGetLastError();
}

namespace {

void KernelRegistrations(std::vector<KernelRegistration>* out) { RegisterCudaKernels(*out); }

absl::StatusOr<std::unique_ptr<DeviceContext>> CreateContext(const DeviceContextOptions& options) {
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<CudaContext> c, CudaContext::Create(options));
  return std::unique_ptr<DeviceContext>(std::move(c));
}

constexpr CudaModuleApi kApi = {
    .device_available = &DeviceAvailable,
    .allocate = &DeviceMalloc,
    .deallocate = &DeviceFree,
    .kernel_registrations = &KernelRegistrations,
    .create_context = &CreateContext,
};

}  // namespace
}  // namespace dynvm::cuda

extern "C" __attribute__((visibility("default"))) uint32_t dynvm_cuda_module_abi_version() {
  return dynvm::kCudaModuleAbiVersion;
}

extern "C" __attribute__((visibility("default"))) const dynvm::CudaModuleApi*
dynvm_cuda_module_api() {
  return &dynvm::cuda::kApi;
}
