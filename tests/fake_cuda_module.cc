// A stand-in for the CUDA module (allocator/cuda_module.h) for cuda_module_test: the same entry
// points, with the right ABI version or (DYNVM_FAKE_WRONG_ABI) a wrong one. It has no device:
// every call says so, naming this fake so a test can tell which file was loaded.
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/cuda_module.h"
#include "kernels/device_context.h"
#include "kernels/kernel.h"

namespace {

constexpr char kNoDevice[] = "no CUDA device available: the fake dynvm CUDA module has none";

absl::Status DeviceAvailable() { return absl::UnavailableError(kNoDevice); }
absl::StatusOr<void*> Allocate(size_t) { return absl::UnavailableError(kNoDevice); }
void Deallocate(void*) {}
void KernelRegistrations(std::vector<dynvm::KernelRegistration>*) {}
absl::StatusOr<std::unique_ptr<dynvm::DeviceContext>> CreateContext(
    const dynvm::DeviceContextOptions&) {
  return absl::UnavailableError(kNoDevice);
}

constexpr dynvm::CudaModuleApi kApi = {&DeviceAvailable, &Allocate, &Deallocate,
                                       &KernelRegistrations, &CreateContext};

}  // namespace

extern "C" __attribute__((visibility("default"))) uint32_t dynvm_cuda_module_abi_version() {
#if defined(DYNVM_FAKE_WRONG_ABI)
  return dynvm::kCudaModuleAbiVersion + 1000;
#else
  return dynvm::kCudaModuleAbiVersion;
#endif
}

extern "C" __attribute__((visibility("default"))) const dynvm::CudaModuleApi*
dynvm_cuda_module_api() {
  return &kApi;
}
