// The .dvw weights file (constants stored apart from the executable), the content hash that
// names it, and zstd compression of a constant segment. docs/executable-format.md describes
// every byte.
//
// Thread safety: every function is thread-safe (no shared state).
#ifndef DYNVM_SCHEMA_WEIGHTS_H_
#define DYNVM_SCHEMA_WEIGHTS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dynvm::schema {

inline constexpr size_t kWeightsHeaderSize = 64;

// dvw-hash64 of `bytes`: four 64-bit lanes over 32-byte stripes, a byte-wise tail and a final
// avalanche (the exact definition is in docs/executable-format.md). An identity and an integrity
// check against accidents (a stale or swapped file), not a cryptographic hash.
uint64_t ContentHash(absl::Span<const uint8_t> bytes);

struct WeightsHeader {
  uint16_t major = 1;
  uint16_t minor = 0;
  uint64_t required_features = 0;  // only kFeatureCompressedConstants is meaningful here
  uint64_t content_hash = 0;       // ContentHash of the raw (decompressed) segment
  uint64_t data_offset = kWeightsHeaderSize;
  uint64_t stored_size = 0;  // bytes of data in the file
  uint64_t raw_size = 0;     // bytes after decompression (== stored_size if raw)
};

// A whole .dvw file: the header (with its checksum) followed by `stored` at data_offset.
// `h.stored_size` is set from `stored`.
std::string EncodeWeightsFile(WeightsHeader h, absl::string_view stored);

// Checks the header of a .dvw file: size, magic, major version, header size, unknown feature
// bits, the header checksum, reserved bytes, that the data lies inside the file (64-byte
// aligned), and that an uncompressed segment's raw size equals its stored size. O(1): the data
// itself is not read.
absl::StatusOr<WeightsHeader> ParseWeightsHeader(absl::Span<const uint8_t> file);

// zstd-compresses `raw` at `level` (1..22; 3 is zstd's default) into one frame that declares
// its content size and carries zstd's content checksum.
absl::StatusOr<std::string> CompressSegment(absl::string_view raw, int level);
// A compressed segment may expand at most this many times (plus 1 MiB): a bound on what a small
// hostile file can make a loader allocate. Real weights compress by a few percent.
inline constexpr uint64_t kMaxCompressionRatio = 1000;

// Checks, without decompressing, that `stored` begins a zstd frame that declares exactly
// `raw_size` bytes of content, and that raw_size is within kMaxCompressionRatio of the stored
// size (so a loader can refuse before it allocates `raw_size`).
absl::Status CheckCompressedSegment(absl::Span<const uint8_t> stored, uint64_t raw_size);
// Decompresses one zstd frame `stored` into exactly `raw_size` bytes at `out`. Refuses a frame
// that declares another size, is corrupt, or does not fill `raw_size` exactly.
absl::Status DecompressSegment(absl::Span<const uint8_t> stored, uint8_t* out, uint64_t raw_size);

}  // namespace dynvm::schema

#endif  // DYNVM_SCHEMA_WEIGHTS_H_
