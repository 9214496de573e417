// CUDA runtime errors as absl::Status, at the boundary: every call into the CUDA runtime goes
// through DYNVM_CUDA_RETURN_IF_ERROR (or CudaStatus), so a CUDA failure is a Status, never an
// abort. Internal to the CUDA module (allocator/cuda_module.h; defined in cuda_status.cc).
//
// Codes: out of device memory -> ResourceExhausted; no device, no driver, or a driver too old
// for the runtime -> Unavailable; an invalid argument -> InvalidArgument; anything else (a
// kernel fault, a launch failure) -> Internal. The message names the failed call and CUDA's own
// error name and text.
#ifndef DYNVM_ALLOCATOR_CUDA_STATUS_H_
#define DYNVM_ALLOCATOR_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace dynvm {

// OK for cudaSuccess; otherwise a Status naming `what` (the call) and the error. Also clears the
// runtime's last-error slot, so a later cudaGetLastError does not report the same error again.
absl::Status CudaStatus(cudaError_t error, const char* what);

}  // namespace dynvm

#define DYNVM_CUDA_RETURN_IF_ERROR(expr)                    \
  do {                                                      \
    const cudaError_t dynvm_cuda_error_ = (expr);           \
    if (dynvm_cuda_error_ != cudaSuccess) {                 \
      return ::dynvm::CudaStatus(dynvm_cuda_error_, #expr); \
    }                                                       \
  } while (0)

#endif  // DYNVM_ALLOCATOR_CUDA_STATUS_H_
