// Creating the per-VM context of a device backend (kernels/kernel.h, DeviceContext). Internal:
// the VM calls it on the first instruction that needs the device, never earlier, so a program
// that does not use a device never touches the device's runtime.
#ifndef DYNVM_KERNELS_DEVICE_CONTEXT_H_
#define DYNVM_KERNELS_DEVICE_CONTEXT_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace dynvm {

struct DeviceContextOptions {
  int64_t memory_limit = 0;  // bytes of the device pool; 0 = unlimited
};

// The context for `device`. Unimplemented "this build has no CUDA device support" or
// Unavailable ("the CUDA module ...", "no CUDA device available: ...") when the device cannot
// be used (see CudaDeviceAvailable in allocator/cuda_allocator.h); InvalidArgument for the
// CPU, which needs none.
absl::StatusOr<std::unique_ptr<DeviceContext>> CreateDeviceContext(
    Device device, const DeviceContextOptions& options = {});

// Tests: makes CreateDeviceContext(device) call `factory` instead (an empty function restores
// the backend's own), e.g. a host-memory stand-in that exercises the VM's device paths on a
// machine without a GPU. Not for production use; thread-safe.
using DeviceContextFactory =
    std::function<absl::StatusOr<std::unique_ptr<DeviceContext>>(const DeviceContextOptions&)>;
void SetDeviceContextFactoryForTesting(Device device, DeviceContextFactory factory);

// The CUDA backend's factory: the CUDA module's (allocator/cuda_module.h), loaded on this first
// use; the module's error (Unimplemented without CUDA in the build, Unavailable when the
// module or the device is missing) otherwise.
absl::StatusOr<std::unique_ptr<DeviceContext>> CreateCudaContext(
    const DeviceContextOptions& options);

}  // namespace dynvm

#endif  // DYNVM_KERNELS_DEVICE_CONTEXT_H_
