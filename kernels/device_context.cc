#include "kernels/device_context.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "allocator/cuda_module.h"
#include "common/status_macros.h"

namespace dynvm {
namespace {

std::mutex& OverrideMutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}
DeviceContextFactory& Override(Device device) {
  static DeviceContextFactory* overrides = new DeviceContextFactory[kNumDevices];
  return overrides[static_cast<int>(device)];
}

}  // namespace

void SetDeviceContextFactoryForTesting(Device device, DeviceContextFactory factory) {
  std::lock_guard<std::mutex> lock(OverrideMutex());
  Override(device) = std::move(factory);
}

absl::StatusOr<std::unique_ptr<DeviceContext>> CreateDeviceContext(
    Device device, const DeviceContextOptions& options) {
  if (static_cast<int>(device) < kNumDevices) {
    DeviceContextFactory factory;
    {
      std::lock_guard<std::mutex> lock(OverrideMutex());
      factory = Override(device);
    }
    if (factory) return factory(options);
  }
  switch (device) {
    case Device::kCPU:
      return absl::InvalidArgumentError("the CPU needs no device context");
    case Device::kCUDA:
      return CreateCudaContext(options);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown device ", static_cast<int>(device)));
}

absl::StatusOr<std::unique_ptr<DeviceContext>> CreateCudaContext(
    const DeviceContextOptions& options) {
  DYNVM_ASSIGN_OR_RETURN(const CudaModule* module, LoadCudaModule());
  return module->api->create_context(options);
}

}  // namespace dynvm
