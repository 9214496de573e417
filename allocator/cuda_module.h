// The CUDA module (docs/cuda.md, "The CUDA module"). The CUDA device context, its allocator's
// system memory and the CUDA kernels live in a shared module, libdynvm_cuda.so, built when CUDA
// is enabled. The core libraries and the tools link no CUDA library: the module (and with it
// the CUDA runtime and cuBLAS) is loaded with dlopen the first time a program needs the CUDA
// device (a kernel-table entry on the device, CudaDeviceAvailable, a device context, compiling
// for the device), never at process start and never on the CPU path.
//
// Where it is looked for, in order (the first file that exists is loaded; no other is tried):
//   1. $DYNVM_CUDA_MODULE, when set: that file and nothing else;
//   2. next to the object that loads it (the executable, or a shared library that holds the
//      dynvm core, such as a Python extension);
//   3. in the installed library folder relative to it (bin/ -> lib/, as installed by CMake);
//   4. in lib/ one or two folders above it (the build tree keeps the module in <build>/lib).
// Its ABI version (kCudaModuleAbiVersion) is checked before anything else is called.
//
// Internal: used by allocator/cuda_allocator.cc, kernels/registry.cc, kernels/device_context.cc
// and the module itself (kernels/cuda/module.cc).
//
// Thread safety: thread-safe.
#ifndef DYNVM_ALLOCATOR_CUDA_MODULE_H_
#define DYNVM_ALLOCATOR_CUDA_MODULE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dynvm {

struct KernelRegistration;    // kernels/registry.h
class DeviceContext;          // kernels/kernel.h
struct DeviceContextOptions;  // kernels/device_context.h

// Bump whenever CudaModuleApi or a type that crosses it (Tensor, Storage, Allocator, KernelSpec,
// Kernel, KernelContext, DeviceContext, KernelRegistration) changes: a module from another build
// is then refused instead of misread.
inline constexpr uint32_t kCudaModuleAbiVersion = 2;
inline constexpr char kCudaModuleFileName[] = "libdynvm_cuda.so";
inline constexpr char kCudaModuleEnvVar[] = "DYNVM_CUDA_MODULE";
// The module's two entry points (extern "C"). The first is called before anything else:
//   uint32_t dynvm_cuda_module_abi_version(void);
//   const dynvm::CudaModuleApi* dynvm_cuda_module_api(void);
inline constexpr char kCudaModuleAbiSymbol[] = "dynvm_cuda_module_abi_version";
inline constexpr char kCudaModuleApiSymbol[] = "dynvm_cuda_module_api";

// What the module provides. Every function reports failure as a Status, never aborts.
struct CudaModuleApi {
  // OK when a CUDA device can be used; Unavailable "no CUDA device available: ..." otherwise
  // (no GPU, no driver, CUDA_VISIBLE_DEVICES empty). Asks the runtime once, then caches.
  absl::Status (*device_available)();
  // cudaMalloc / cudaFree on the current device (the CudaAllocator's system memory).
  absl::StatusOr<void*> (*allocate)(size_t bytes);
  void (*deallocate)(void* p);
  // Appends the CUDA kernels' registrations (backend "cuda", device kCUDA) to `out`.
  void (*kernel_registrations)(std::vector<KernelRegistration>* out);
  // A VM's device context (kernels/cuda/cuda_context.h).
  absl::StatusOr<std::unique_ptr<DeviceContext>> (*create_context)(
      const DeviceContextOptions& options);
};

struct CudaModule {
  std::string path;  // the file that was loaded
  const CudaModuleApi* api = nullptr;
};

// The process's module: searched for, loaded and checked on the first call, then cached (the
// answer, success or failure, is the same for the life of the process). Errors:
//   Unimplemented  "this build has no CUDA device support" (a build without DYNVM_WITH_CUDA);
//   Unavailable    the module was not found (the message lists where it looked and how to get
//                  it), could not be loaded (a missing CUDA runtime library: dlopen's reason),
//                  or has another ABI version.
absl::StatusOr<const CudaModule*> LoadCudaModule();

// The files LoadCudaModule tries, in order.
std::vector<std::string> CudaModuleCandidates();

// Loads the module at `path` and checks its ABI version: no search, no caching (tests). A file
// that loads stays loaded. Unavailable as LoadCudaModule.
absl::StatusOr<CudaModule> LoadCudaModuleFrom(const std::string& path);

}  // namespace dynvm

#endif  // DYNVM_ALLOCATOR_CUDA_MODULE_H_
