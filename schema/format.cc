#include "schema/format.h"

#include <zlib.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dynvm::schema {
namespace {

// Field offsets inside the header.
enum : size_t {
  kOffMagic = 0,
  kOffMajor = 8,
  kOffMinor = 10,
  kOffHeaderSize = 12,
  kOffFeatures = 16,
  kOffFbOffset = 24,
  kOffFbSize = 32,
  kOffConstOffset = 40,
  kOffConstSize = 48,
  kOffConstRawSize = 56,
  kOffCrc = 64,
  kOffReserved = 68,
};

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

}  // namespace

void EncodeHeader(const FileHeader& h, uint8_t* out) {
  std::memset(out, 0, kHeaderSize);
  std::memcpy(out + kOffMagic, kMagic, sizeof(kMagic));
  Put<uint16_t>(out, kOffMajor, h.major);
  Put<uint16_t>(out, kOffMinor, h.minor);
  Put<uint32_t>(out, kOffHeaderSize, kHeaderSize);
  Put<uint64_t>(out, kOffFeatures, h.required_features);
  Put<uint64_t>(out, kOffFbOffset, h.flatbuffer_offset);
  Put<uint64_t>(out, kOffFbSize, h.flatbuffer_size);
  Put<uint64_t>(out, kOffConstOffset, h.constants_offset);
  Put<uint64_t>(out, kOffConstSize, h.constants_size);
  Put<uint64_t>(out, kOffConstRawSize, h.constants_raw_size);
  Put<uint32_t>(out, kOffCrc, h.crc32);
}

uint32_t ComputeChecksum(absl::Span<const uint8_t> header, absl::Span<const uint8_t> flatbuffer) {
  uint8_t copy[kHeaderSize];
  std::memcpy(copy, header.data(), kHeaderSize);
  Put<uint32_t>(copy, kOffCrc, 0);
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, copy, kHeaderSize);
  // zlib takes uInt lengths: feed large buffers in pieces.
  const uint8_t* p = flatbuffer.data();
  size_t left = flatbuffer.size();
  while (left > 0) {
    const uInt n = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    crc = crc32(crc, p, n);
    p += n;
    left -= n;
  }
  return static_cast<uint32_t>(crc);
}

std::string FeatureNames(uint64_t bits) {
  std::vector<std::string> names;
  if (bits & kFeatureSequences) names.push_back("sequences");
  if (bits & kFeatureExternalWeights) names.push_back("external-weights");
  if (bits & kFeatureCompressedConstants) names.push_back("compressed-constants");
  if (bits & kFeatureCudaDevice) names.push_back("cuda-device");
  if (bits & kFeatureStrings) names.push_back("strings");
  for (int i = 0; i < 64; ++i) {
    if (((bits >> i) & 1) && !((kKnownFeatures >> i) & 1)) names.push_back(absl::StrCat("bit", i));
  }
  return absl::StrJoin(names, ",");
}

absl::StatusOr<FileHeader> ParseHeader(absl::Span<const uint8_t> file) {
  if (file.size() < kHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat("truncated executable: ", file.size(),
                                                   " bytes, the header alone needs ", kHeaderSize));
  }
  const uint8_t* b = file.data();
  if (std::memcmp(b, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError("not a dynvm executable: wrong magic at byte 0");
  }
  FileHeader h;
  h.major = Get<uint16_t>(b, kOffMajor);
  h.minor = Get<uint16_t>(b, kOffMinor);
  if (h.major != kFormatMajor) {
    return absl::FailedPreconditionError(
        absl::StrCat("executable format version ", h.major, ".", h.minor,
                     " is not supported (this runtime reads ", kFormatMajor, ".x)"));
  }
  const uint32_t header_size = Get<uint32_t>(b, kOffHeaderSize);
  if (header_size != kHeaderSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("header size field (byte 12) is ", header_size, ", expected ", kHeaderSize));
  }
  h.required_features = Get<uint64_t>(b, kOffFeatures);
  if (uint64_t unknown = h.required_features & ~kKnownFeatures; unknown != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "executable requires features this runtime does not have: ", FeatureNames(unknown),
        " (format ", h.major, ".", h.minor, ")"));
  }
  for (size_t i = kOffReserved; i < kHeaderSize; ++i) {
    if (b[i] != 0) {
      return absl::InvalidArgumentError(absl::StrCat("reserved header byte ", i, " is not zero"));
    }
  }
  h.flatbuffer_offset = Get<uint64_t>(b, kOffFbOffset);
  h.flatbuffer_size = Get<uint64_t>(b, kOffFbSize);
  h.constants_offset = Get<uint64_t>(b, kOffConstOffset);
  h.constants_size = Get<uint64_t>(b, kOffConstSize);
  h.constants_raw_size = Get<uint64_t>(b, kOffConstRawSize);
  h.crc32 = Get<uint32_t>(b, kOffCrc);
  const uint64_t size = file.size();
  if (h.flatbuffer_offset != kHeaderSize || h.flatbuffer_size > size - kHeaderSize ||
      h.flatbuffer_size < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("flatbuffer at offset ", h.flatbuffer_offset, " size ", h.flatbuffer_size,
                     " does not lie inside the ", size, "-byte file after the header"));
  }
  const uint64_t fb_end = h.flatbuffer_offset + h.flatbuffer_size;
  if (h.constants_size > 0 || h.constants_offset != 0) {
    if (h.constants_offset < fb_end || h.constants_offset > size ||
        h.constants_size > size - h.constants_offset ||
        h.constants_offset % kConstantAlignment != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "constant segment at offset ", h.constants_offset, " size ", h.constants_size,
          " does not lie inside the ", size, "-byte file after the flatbuffer, 64-byte aligned"));
    }
  }
  const bool compressed = h.required_features & kFeatureCompressedConstants;
  if (!compressed && h.constants_raw_size != h.constants_size) {
    return absl::InvalidArgumentError(
        "uncompressed constant segment with a raw size unlike its size");
  }
  const uint32_t crc = ComputeChecksum(file.first(kHeaderSize),
                                       file.subspan(h.flatbuffer_offset, h.flatbuffer_size));
  if (crc != h.crc32) {
    return absl::DataLossError(absl::StrCat("checksum mismatch: header says ", absl::Hex(h.crc32),
                                            ", header and flatbuffer give ", absl::Hex(crc)));
  }
  return h;
}

}  // namespace dynvm::schema
