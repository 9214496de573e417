#include "schema/weights.h"

#include <zlib.h>
#include <zstd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "schema/format.h"

namespace dynvm::schema {
namespace {

enum : size_t {
  kOffMagic = 0,
  kOffMajor = 8,
  kOffMinor = 10,
  kOffHeaderSize = 12,
  kOffFeatures = 16,
  kOffHash = 24,
  kOffDataOffset = 32,
  kOffStoredSize = 40,
  kOffRawSize = 48,
  kOffCrc = 56,
  kOffReserved = 60,
};

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;

inline uint64_t Rotl(uint64_t v, int r) { return (v << r) | (v >> (64 - r)); }

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

template <typename T>
void Put(uint8_t* out, size_t off, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[off + i] = static_cast<uint8_t>(v >> (8 * i));
}
template <typename T>
T Get(const uint8_t* in, size_t off) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(in[off + i]) << (8 * i);
  return v;
}

uint32_t HeaderCrc(const uint8_t* header) {
  uint8_t copy[kWeightsHeaderSize];
  std::memcpy(copy, header, kWeightsHeaderSize);
  Put<uint32_t>(copy, kOffCrc, 0);
  return static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), copy, kWeightsHeaderSize));
}

}  // namespace

uint64_t ContentHash(absl::Span<const uint8_t> bytes) {
  uint64_t lane[4] = {kP1, kP2, kP3, kP1 ^ kP2};
  const uint8_t* p = bytes.data();
  const size_t n = bytes.size();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) lane[k] = Rotl(lane[k] + Load64(p + i + 8 * k) * kP2, 31) * kP1;
  }
  uint64_t h = Rotl(lane[0], 1) + Rotl(lane[1], 7) + Rotl(lane[2], 12) + Rotl(lane[3], 18);
  h ^= static_cast<uint64_t>(n) * kP3;
  for (; i < n; ++i) h = Rotl(h ^ p[i], 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

std::string EncodeWeightsFile(WeightsHeader h, absl::string_view stored) {
  h.data_offset = kWeightsHeaderSize;
  h.stored_size = stored.size();
  std::string out(kWeightsHeaderSize + stored.size(), '\0');
  auto* b = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(b + kOffMagic, kWeightsMagic, sizeof(kWeightsMagic));
  Put<uint16_t>(b, kOffMajor, h.major);
  Put<uint16_t>(b, kOffMinor, h.minor);
  Put<uint32_t>(b, kOffHeaderSize, kWeightsHeaderSize);
  Put<uint64_t>(b, kOffFeatures, h.required_features);
  Put<uint64_t>(b, kOffHash, h.content_hash);
  Put<uint64_t>(b, kOffDataOffset, h.data_offset);
  Put<uint64_t>(b, kOffStoredSize, h.stored_size);
  Put<uint64_t>(b, kOffRawSize, h.raw_size);
  Put<uint32_t>(b, kOffCrc, HeaderCrc(b));
  if (!stored.empty()) std::memcpy(b + kWeightsHeaderSize, stored.data(), stored.size());
  return out;
}

absl::StatusOr<WeightsHeader> ParseWeightsHeader(absl::Span<const uint8_t> file) {
  if (file.size() < kWeightsHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat("truncated weights file: ", file.size(),
                                                   " bytes, the header alone needs ",
                                                   kWeightsHeaderSize));
  }
  const uint8_t* b = file.data();
  if (std::memcmp(b, kWeightsMagic, sizeof(kWeightsMagic)) != 0) {
    return absl::InvalidArgumentError("not a dynvm weights file: wrong magic at byte 0");
  }
  WeightsHeader h;
  h.major = Get<uint16_t>(b, kOffMajor);
  h.minor = Get<uint16_t>(b, kOffMinor);
  if (h.major != kFormatMajor) {
    return absl::FailedPreconditionError(
        absl::StrCat("weights format version ", h.major, ".", h.minor,
                     " is not supported (this runtime reads ", kFormatMajor, ".x)"));
  }
  const uint32_t header_size = Get<uint32_t>(b, kOffHeaderSize);
  if (header_size != kWeightsHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat("weights header size field (byte 12) is ",
                                                   header_size, ", expected ", kWeightsHeaderSize));
  }
  h.required_features = Get<uint64_t>(b, kOffFeatures);
  const uint64_t unknown = h.required_features & ~uint64_t{kFeatureCompressedConstants};
  if (unknown != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "weights file requires features this runtime does not have: ", FeatureNames(unknown)));
  }
  const uint32_t crc = Get<uint32_t>(b, kOffCrc);
  if (crc != HeaderCrc(b)) {
    return absl::DataLossError(absl::StrCat("weights header checksum mismatch: header says ",
                                            absl::Hex(crc), ", its bytes give ",
                                            absl::Hex(HeaderCrc(b))));
  }
  for (size_t i = kOffReserved; i < kWeightsHeaderSize; ++i) {
    if (b[i] != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("reserved weights header byte ", i, " is not zero"));
    }
  }
  h.content_hash = Get<uint64_t>(b, kOffHash);
  h.data_offset = Get<uint64_t>(b, kOffDataOffset);
  h.stored_size = Get<uint64_t>(b, kOffStoredSize);
  h.raw_size = Get<uint64_t>(b, kOffRawSize);
  const uint64_t size = file.size();
  if (h.data_offset < kWeightsHeaderSize || h.data_offset % kConstantAlignment != 0 ||
      h.data_offset > size || h.stored_size > size - h.data_offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weights data at offset ", h.data_offset, " size ", h.stored_size,
        " does not lie inside the ", size, "-byte file after the header, 64-byte aligned"));
  }
  if (!(h.required_features & kFeatureCompressedConstants) && h.raw_size != h.stored_size) {
    return absl::InvalidArgumentError("uncompressed weights with a raw size unlike their size");
  }
  return h;
}

absl::StatusOr<std::string> CompressSegment(absl::string_view raw, int level) {
  if (level < 1 || level > ZSTD_maxCLevel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("compression level ", level, " is outside 1..", ZSTD_maxCLevel()));
  }
  std::string out(ZSTD_compressBound(raw.size()), '\0');
  // One frame that declares its content size and carries zstd's checksum of the content, so
  // damaged compressed bytes are caught when they are decompressed.
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  if (cctx == nullptr)
    return absl::ResourceExhaustedError("zstd: cannot create a compression context");
  size_t n = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  if (!ZSTD_isError(n)) n = ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  if (!ZSTD_isError(n)) n = ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
  if (!ZSTD_isError(n)) n = ZSTD_compress2(cctx, out.data(), out.size(), raw.data(), raw.size());
  ZSTD_freeCCtx(cctx);
  if (ZSTD_isError(n)) {
    return absl::InternalError(absl::StrCat("zstd compression failed: ", ZSTD_getErrorName(n)));
  }
  out.resize(n);
  return out;
}

absl::Status CheckCompressedSegment(absl::Span<const uint8_t> stored, uint64_t raw_size) {
  const unsigned long long declared = ZSTD_getFrameContentSize(stored.data(), stored.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR) {
    return absl::DataLossError("compressed constants: not a zstd frame");
  }
  if (declared == ZSTD_CONTENTSIZE_UNKNOWN) {
    return absl::DataLossError("compressed constants: the zstd frame does not declare its size");
  }
  if (declared != raw_size) {
    return absl::DataLossError(absl::StrCat("compressed constants: the frame holds ", declared,
                                            " bytes, the header says ", raw_size));
  }
  if (raw_size / kMaxCompressionRatio >
      stored.size() + (uint64_t{1} << 20) / kMaxCompressionRatio) {
    return absl::ResourceExhaustedError(
        absl::StrCat("compressed constants: ", stored.size(), " bytes would expand to ", raw_size,
                     ", more than ", kMaxCompressionRatio, " times (refused)"));
  }
  return absl::OkStatus();
}

absl::Status DecompressSegment(absl::Span<const uint8_t> stored, uint8_t* out, uint64_t raw_size) {
  DYNVM_RETURN_IF_ERROR(CheckCompressedSegment(stored, raw_size));
  const size_t n = ZSTD_decompress(out, raw_size, stored.data(), stored.size());
  if (ZSTD_isError(n)) {
    return absl::DataLossError(absl::StrCat("compressed constants: ", ZSTD_getErrorName(n)));
  }
  if (n != raw_size) {
    return absl::DataLossError(absl::StrCat("compressed constants: decompressed to ", n,
                                            " bytes, the header says ", raw_size));
  }
  return absl::OkStatus();
}

}  // namespace dynvm::schema
