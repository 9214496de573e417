// The CUDA backend's registration (backend "cuda", device kCUDA, priority 10) and cuBLAS status
// conversion. Factories only validate attributes and dtypes: loading an executable with CUDA
// kernels never touches the device; the first kernel run (through the VM's CudaContext) does.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/common.h"
#include "kernels/cuda/cublas_status.h"

namespace dynvm::cuda {

void RegisterCudaKernels(Registrations& r) {
  RegisterMatmulKernels(r);
  RegisterElementwiseKernels(r);
  RegisterReduceKernels(r);
  RegisterDataKernels(r);
  RegisterRnnKernels(r);
  RegisterSampleKernels(r);
}

absl::Status CublasStatus(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", cublasGetStatusName(status), " (",
                                           cublasGetStatusString(status), ")");
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(message);
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return absl::UnavailableError(message);
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::InvalidArgumentError(message);
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::UnimplementedError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace dynvm::cuda
