// cuBLAS errors as absl::Status: every cuBLAS call goes through DYNVM_CUBLAS_RETURN_IF_ERROR.
// Codes: an allocation failure -> ResourceExhausted; not initialized (no device, no driver) ->
// Unavailable; an invalid value -> InvalidArgument; not supported -> Unimplemented; anything
// else -> Internal. Internal header.
#ifndef DYNVM_KERNELS_CUDA_CUBLAS_STATUS_H_
#define DYNVM_KERNELS_CUDA_CUBLAS_STATUS_H_

#include <cublas_v2.h>

#include "absl/status/status.h"

namespace dynvm::cuda {

absl::Status CublasStatus(cublasStatus_t status, const char* what);

}  // namespace dynvm::cuda

#define DYNVM_CUBLAS_RETURN_IF_ERROR(expr)                             \
  do {                                                                 \
    const cublasStatus_t dynvm_cublas_status_ = (expr);                \
    if (dynvm_cublas_status_ != CUBLAS_STATUS_SUCCESS) {               \
      return ::dynvm::cuda::CublasStatus(dynvm_cublas_status_, #expr); \
    }                                                                  \
  } while (0)

#endif  // DYNVM_KERNELS_CUDA_CUBLAS_STATUS_H_
