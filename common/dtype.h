// Public API. Element types of tensors.
//
// The numeric values are part of the executable format (docs/executable-format.md):
// never renumber, only append.
#ifndef DYNVM_COMMON_DTYPE_H_
#define DYNVM_COMMON_DTYPE_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace dynvm {

// X(enumerator, value, name, byte size)
#define DYNVM_DTYPES(X)   \
  X(kF32, 0, "f32", 4)    \
  X(kF64, 1, "f64", 8)    \
  X(kF16, 2, "f16", 2)    \
  X(kBF16, 3, "bf16", 2)  \
  X(kI8, 4, "i8", 1)      \
  X(kI16, 5, "i16", 2)    \
  X(kI32, 6, "i32", 4)    \
  X(kI64, 7, "i64", 8)    \
  X(kU8, 8, "u8", 1)      \
  X(kU16, 9, "u16", 2)    \
  X(kU32, 10, "u32", 4)   \
  X(kU64, 11, "u64", 8)   \
  X(kBool, 12, "bool", 1) \
  X(kString, 13, "string", 16)

enum class DType : uint8_t {
#define DYNVM_DTYPE_ENUM(e, v, n, s) e = v,
  DYNVM_DTYPES(DYNVM_DTYPE_ENUM)
#undef DYNVM_DTYPE_ENUM
};

inline constexpr int kNumDTypes = 14;
// Used in the format where a dtype is not known or not applicable.
inline constexpr uint8_t kAnyDType = 0xFF;

// Bytes per element. Strings are stored as `StringRef` (pointer + length, 16 bytes);
// see kernels/tensor.h.
constexpr int64_t DTypeSize(DType t) {
  switch (t) {
#define DYNVM_DTYPE_SIZE(e, v, n, s) \
  case DType::e:                     \
    return s;
    DYNVM_DTYPES(DYNVM_DTYPE_SIZE)
#undef DYNVM_DTYPE_SIZE
  }
  return 0;
}

constexpr absl::string_view DTypeName(DType t) {
  switch (t) {
#define DYNVM_DTYPE_NAME(e, v, n, s) \
  case DType::e:                     \
    return n;
    DYNVM_DTYPES(DYNVM_DTYPE_NAME)
#undef DYNVM_DTYPE_NAME
  }
  return "?";
}

constexpr bool IsValidDType(uint8_t v) { return v < kNumDTypes; }
constexpr bool IsFloat(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16;
}
constexpr bool IsSignedInt(DType t) {
  return t == DType::kI8 || t == DType::kI16 || t == DType::kI32 || t == DType::kI64;
}
constexpr bool IsUnsignedInt(DType t) {
  return t == DType::kU8 || t == DType::kU16 || t == DType::kU32 || t == DType::kU64;
}
constexpr bool IsInteger(DType t) { return IsSignedInt(t) || IsUnsignedInt(t); }

inline std::optional<DType> ParseDType(absl::string_view name) {
#define DYNVM_DTYPE_PARSE(e, v, n, s) \
  if (name == n) return DType::e;
  DYNVM_DTYPES(DYNVM_DTYPE_PARSE)
#undef DYNVM_DTYPE_PARSE
  return std::nullopt;
}

}  // namespace dynvm

#endif  // DYNVM_COMMON_DTYPE_H_
