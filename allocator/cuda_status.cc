// Part of the CUDA module (libdynvm_cuda.so, kernels/CMakeLists.txt): the only code under
// allocator/ that calls the CUDA runtime.
#include "allocator/cuda_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace dynvm {

absl::Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // clears the slot (a sticky error stays: the context is lost then)
  const std::string message =
      absl::StrCat(what, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInitializationError:
    case cudaErrorCudartUnloading:
      return absl::UnavailableError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace dynvm
