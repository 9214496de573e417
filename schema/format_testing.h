// Test-only helpers for .dvm files (not installed, not public API): used by the verifier's
// tests, the loader fuzzers (vm/fuzzing.h) and tests/hostile_executable_test.cc.
#ifndef DYNVM_SCHEMA_FORMAT_TESTING_H_
#define DYNVM_SCHEMA_FORMAT_TESTING_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "schema/format.h"

namespace dynvm::schema {

// Byte offsets in the header (docs/executable-format.md).
inline constexpr size_t kFlatbufferSizeOffset = 32;  // u64 flatbuffer_size
inline constexpr size_t kChecksumOffset = 64;        // u32 crc32

// Recomputes the checksum of the header and flatbuffer of `file` and stores it, so that a change
// behind the checksum reaches the checks after it (the flatbuffer and ISA verifiers). Leaves
// `file` as it is when it is shorter than a header or its flatbuffer_size runs past its end.
inline void Reseal(std::string& file) {
  if (file.size() < kHeaderSize) return;
  auto* b = reinterpret_cast<uint8_t*>(file.data());
  uint64_t fb_size = 0;
  for (int i = 0; i < 8; ++i)
    fb_size |= static_cast<uint64_t>(b[kFlatbufferSizeOffset + i]) << (8 * i);
  if (fb_size > file.size() - kHeaderSize) return;
  const uint32_t crc = ComputeChecksum({b, kHeaderSize}, {b + kHeaderSize, fb_size});
  for (int i = 0; i < 4; ++i) b[kChecksumOffset + i] = static_cast<uint8_t>(crc >> (8 * i));
}

}  // namespace dynvm::schema

#endif  // DYNVM_SCHEMA_FORMAT_TESTING_H_
