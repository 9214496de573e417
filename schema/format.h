// The .dvm file layout around the flatbuffer: header, checksum, feature bits, constant segment.
// docs/executable-format.md describes every byte.
//
// Thread safety: every function is thread-safe (no shared state).
#ifndef DYNVM_SCHEMA_FORMAT_H_
#define DYNVM_SCHEMA_FORMAT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dynvm::schema {

inline constexpr uint8_t kMagic[8] = {0x89, 'D', 'V', 'M', '\r', '\n', 0x1A, '\n'};
inline constexpr uint8_t kWeightsMagic[8] = {0x89, 'D', 'V', 'W', '\r', '\n', 0x1A, '\n'};
inline constexpr uint16_t kFormatMajor = 1;
inline constexpr uint16_t kFormatMinor = 0;
inline constexpr size_t kHeaderSize = 128;
inline constexpr size_t kConstantAlignment = 64;

// Required-feature bits: a file sets the bit of every feature it uses that a runtime must
// understand to run it correctly. A runtime refuses a file with a bit it does not know.
enum Feature : uint64_t {
  kFeatureSequences = 1ull << 0,            // sequence/optional registers and instructions
  kFeatureExternalWeights = 1ull << 1,      // constants live in a .dvw weights file
  kFeatureCompressedConstants = 1ull << 2,  // the constant segment is zstd-compressed
  kFeatureCudaDevice = 1ull << 3,           // storages or kernels on the CUDA device
  kFeatureStrings = 1ull << 4,              // string registers, ports or constants
};
inline constexpr uint64_t kKnownFeatures = kFeatureSequences | kFeatureExternalWeights |
                                           kFeatureCompressedConstants | kFeatureCudaDevice |
                                           kFeatureStrings;

struct FileHeader {
  uint16_t major = kFormatMajor;
  uint16_t minor = kFormatMinor;
  uint64_t required_features = 0;
  uint64_t flatbuffer_offset = 0;
  uint64_t flatbuffer_size = 0;
  uint64_t constants_offset = 0;
  uint64_t constants_size = 0;      // bytes stored in the file
  uint64_t constants_raw_size = 0;  // bytes after decompression (== constants_size if raw)
  uint32_t crc32 = 0;
};

// Serializes `h` into kHeaderSize bytes, with crc32 as given.
void EncodeHeader(const FileHeader& h, uint8_t* out);

// The CRC-32 (zlib) of a file: the header with its crc field zeroed, then the flatbuffer.
uint32_t ComputeChecksum(absl::Span<const uint8_t> header, absl::Span<const uint8_t> flatbuffer);

// Parses and checks the header of `file`: size, magic, major version, header size, feature
// bits, that the flatbuffer and constant segment lie inside the file and do not overlap, the
// reserved bytes, and the checksum. Errors say which check failed and where.
absl::StatusOr<FileHeader> ParseHeader(absl::Span<const uint8_t> file);

std::string FeatureNames(uint64_t bits);

}  // namespace dynvm::schema

#endif  // DYNVM_SCHEMA_FORMAT_H_
