// Public API. Value types shared by every layer (the executable format, the allocator, the
// kernels, the compiler's IR and the VM). Their numeric values are part of the executable
// format.
#ifndef DYNVM_COMMON_TYPES_H_
#define DYNVM_COMMON_TYPES_H_

#include <cstdint>

namespace dynvm {

// Where memory lives and kernels run.
enum class Device : uint8_t { kCPU = 0, kCUDA = 1 };
inline constexpr int kNumDevices = 2;

// What an object register (or a kernel port, or a function parameter) holds.
enum class ObjectKind : uint8_t { kTensor = 0, kStorage = 1, kSequence = 2, kOptional = 3 };

}  // namespace dynvm

#endif  // DYNVM_COMMON_TYPES_H_
