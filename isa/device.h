// Public API. Devices. The numeric values are part of the executable format.
#ifndef DYNVM_ISA_DEVICE_H_
#define DYNVM_ISA_DEVICE_H_

#include <cstdint>

namespace dynvm {

enum class Device : uint8_t { kCPU = 0, kCUDA = 1 };
inline constexpr int kNumDevices = 2;

}  // namespace dynvm

#endif  // DYNVM_ISA_DEVICE_H_
