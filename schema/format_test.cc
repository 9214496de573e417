// The .dvm file header: encode/parse round trip, and every check of ParseHeader refusing a
// hostile header with an error that names what was wrong.
#include "schema/format.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dynvm::schema {
namespace {

using ::testing::HasSubstr;

constexpr size_t kFbSize = 64;  // fake flatbuffer bytes: ParseHeader does not look inside
constexpr size_t kConstSize = 100;

// A well-formed file: header, kFbSize bytes of "flatbuffer", padding to 64, then a constant
// segment of kConstSize bytes. The checksum is correct.
struct TestFile {
  FileHeader header;
  std::vector<uint8_t> bytes;
};

void PutLe(std::vector<uint8_t>& b, size_t off, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b[off + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Recomputes the checksum of `b` (header + flatbuffer of `fb_size` bytes) and stores it.
void Reseal(std::vector<uint8_t>& b, size_t fb_size = kFbSize) {
  const uint32_t crc = ComputeChecksum({b.data(), kHeaderSize}, {b.data() + kHeaderSize, fb_size});
  PutLe(b, 64, crc, 4);
}

TestFile MakeFile() {
  TestFile f;
  f.header.required_features = kFeatureSequences;
  f.header.flatbuffer_offset = kHeaderSize;
  f.header.flatbuffer_size = kFbSize;
  f.header.constants_offset = 256;  // 128 + 64 = 192, aligned up to 256
  f.header.constants_size = kConstSize;
  f.header.constants_raw_size = kConstSize;
  f.bytes.assign(f.header.constants_offset + kConstSize, 0);
  for (size_t i = 0; i < kFbSize; ++i) f.bytes[kHeaderSize + i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t i = 0; i < kConstSize; ++i)
    f.bytes[f.header.constants_offset + i] = static_cast<uint8_t>(i);
  EncodeHeader(f.header, f.bytes.data());
  f.header.crc32 =
      ComputeChecksum({f.bytes.data(), kHeaderSize}, {f.bytes.data() + kHeaderSize, kFbSize});
  EncodeHeader(f.header, f.bytes.data());
  return f;
}

// Re-encodes `h` into `b` with a correct checksum, so only the field under test is wrong.
void Rewrite(std::vector<uint8_t>& b, const FileHeader& h) {
  EncodeHeader(h, b.data());
  const uint64_t fb =
      (h.flatbuffer_offset == kHeaderSize && h.flatbuffer_size <= b.size() - kHeaderSize)
          ? h.flatbuffer_size
          : kFbSize;
  Reseal(b, fb);
}

absl::Status Parse(const std::vector<uint8_t>& b) {
  return ParseHeader({b.data(), b.size()}).status();
}

TEST(FormatTest, EncodeParseRoundTrip) {
  TestFile f = MakeFile();
  absl::StatusOr<FileHeader> h = ParseHeader({f.bytes.data(), f.bytes.size()});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->major, kFormatMajor);
  EXPECT_EQ(h->minor, kFormatMinor);
  EXPECT_EQ(h->required_features, kFeatureSequences);
  EXPECT_EQ(h->flatbuffer_offset, kHeaderSize);
  EXPECT_EQ(h->flatbuffer_size, kFbSize);
  EXPECT_EQ(h->constants_offset, 256u);
  EXPECT_EQ(h->constants_size, kConstSize);
  EXPECT_EQ(h->constants_raw_size, kConstSize);
  EXPECT_EQ(h->crc32, f.header.crc32);
  // Re-encoding the parsed header gives the same bytes.
  std::vector<uint8_t> again(kHeaderSize);
  EncodeHeader(*h, again.data());
  EXPECT_EQ(0, std::memcmp(again.data(), f.bytes.data(), kHeaderSize));
  // The magic is at byte 0 and the header size field says 128.
  EXPECT_EQ(0, std::memcmp(f.bytes.data(), kMagic, sizeof(kMagic)));
  EXPECT_EQ(f.bytes[12], kHeaderSize);
}

TEST(FormatTest, MinorVersionIsAccepted) {
  TestFile f = MakeFile();
  f.header.minor = kFormatMinor + 7;
  Rewrite(f.bytes, f.header);
  absl::StatusOr<FileHeader> h = ParseHeader({f.bytes.data(), f.bytes.size()});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->minor, kFormatMinor + 7);
}

TEST(FormatTest, NoConstantSegmentIsAccepted) {
  TestFile f = MakeFile();
  f.header.constants_offset = 0;
  f.header.constants_size = 0;
  f.header.constants_raw_size = 0;
  f.bytes.resize(kHeaderSize + kFbSize);
  Rewrite(f.bytes, f.header);
  EXPECT_TRUE(Parse(f.bytes).ok()) << Parse(f.bytes);
}

TEST(FormatTest, RefusesFileShorterThanHeader) {
  TestFile f = MakeFile();
  for (size_t n : {size_t{0}, size_t{1}, size_t{8}, kHeaderSize - 1}) {
    std::vector<uint8_t> b(f.bytes.begin(), f.bytes.begin() + n);
    absl::Status s = Parse(b);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(s.message(), HasSubstr("truncated executable")) << n;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(n, " bytes"))) << n;
  }
}

TEST(FormatTest, RefusesWrongMagic) {
  for (size_t i = 0; i < sizeof(kMagic); ++i) {
    TestFile f = MakeFile();
    f.bytes[i] ^= 0x20;
    Reseal(f.bytes);
    EXPECT_THAT(Parse(f.bytes).message(), HasSubstr("wrong magic")) << i;
  }
  // A weights file is not an executable.
  TestFile f = MakeFile();
  std::memcpy(f.bytes.data(), kWeightsMagic, sizeof(kWeightsMagic));
  Reseal(f.bytes);
  EXPECT_THAT(Parse(f.bytes).message(), HasSubstr("wrong magic"));
}

TEST(FormatTest, RefusesUnsupportedMajorVersion) {
  for (uint16_t major : {uint16_t{0}, uint16_t{2}, uint16_t{0xFFFF}}) {
    TestFile f = MakeFile();
    f.header.major = major;
    Rewrite(f.bytes, f.header);
    absl::Status s = Parse(f.bytes);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << major;
    EXPECT_THAT(s.message(),
                HasSubstr(absl::StrCat("format version ", major, ".0 is not supported")));
  }
}

TEST(FormatTest, RefusesWrongHeaderSizeField) {
  for (uint32_t size : {0u, 64u, 127u, 129u, 256u, 0xFFFFFFFFu}) {
    TestFile f = MakeFile();
    PutLe(f.bytes, 12, size, 4);
    Reseal(f.bytes);
    absl::Status s = Parse(f.bytes);
    EXPECT_THAT(s.message(), HasSubstr("header size field (byte 12)")) << size;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(" is ", size, ", expected 128"))) << size;
  }
}

TEST(FormatTest, RefusesUnknownRequiredFeature) {
  TestFile f = MakeFile();
  f.header.required_features = kFeatureSequences | (uint64_t{1} << 9);
  Rewrite(f.bytes, f.header);
  absl::Status s = Parse(f.bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("requires features this runtime does not have: bit9"));
  // Only the unknown bits are named.
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("sequences")));

  f.header.required_features = uint64_t{1} << 63;
  Rewrite(f.bytes, f.header);
  EXPECT_THAT(Parse(f.bytes).message(), HasSubstr("bit63"));

  // Every known feature is accepted.
  f.header.required_features = kFeatureSequences | kFeatureCudaDevice;
  Rewrite(f.bytes, f.header);
  EXPECT_TRUE(Parse(f.bytes).ok()) << Parse(f.bytes);
}

TEST(FormatTest, FeatureNames) {
  EXPECT_EQ(FeatureNames(0), "");
  EXPECT_EQ(FeatureNames(kKnownFeatures),
            "sequences,external-weights,compressed-constants,cuda-device,strings");
  EXPECT_EQ(FeatureNames(kFeatureCudaDevice | (uint64_t{1} << 40)), "cuda-device,bit40");
}

TEST(FormatTest, RefusesNonzeroReservedByte) {
  for (size_t i : {size_t{68}, size_t{100}, kHeaderSize - 1}) {
    TestFile f = MakeFile();
    f.bytes[i] = 1;
    Reseal(f.bytes);
    EXPECT_THAT(Parse(f.bytes).message(),
                HasSubstr(absl::StrCat("reserved header byte ", i, " is not zero")));
  }
}

TEST(FormatTest, RefusesFlatbufferOutsideTheFile) {
  struct Case {
    uint64_t offset, size;
  };
  const uint64_t file_size = MakeFile().bytes.size();
  for (Case c : std::vector<Case>{{0, kFbSize},                 // over the header
                                  {64, kFbSize},                // inside the header
                                  {kHeaderSize + 8, kFbSize},   // not right after the header
                                  {kHeaderSize, file_size},     // past the end
                                  {kHeaderSize, ~uint64_t{0}},  // overflowing size
                                  {~uint64_t{0} - 4, 16},       // overflowing offset
                                  {kHeaderSize, 0},             // too small to hold a root
                                  {kHeaderSize, 7}}) {
    TestFile f = MakeFile();
    f.header.flatbuffer_offset = c.offset;
    f.header.flatbuffer_size = c.size;
    Rewrite(f.bytes, f.header);
    absl::Status s = Parse(f.bytes);
    EXPECT_THAT(s.message(),
                HasSubstr(absl::StrCat("flatbuffer at offset ", c.offset, " size ", c.size)))
        << c.offset << " " << c.size;
    EXPECT_THAT(s.message(), HasSubstr("does not lie inside"));
  }
}

TEST(FormatTest, RefusesConstantSegmentOutsideTheFile) {
  const uint64_t file_size = MakeFile().bytes.size();
  struct Case {
    uint64_t offset, size;
    const char* why;
  };
  for (Case c : std::vector<Case>{
           {file_size + 64, 0, "offset past the end"},
           {256, kConstSize + 1, "size past the end"},
           {256, ~uint64_t{0}, "size overflows"},
           {~uint64_t{0} & ~uint64_t{63}, kConstSize, "offset overflows"},
           {kHeaderSize, kConstSize, "overlaps the flatbuffer"},
           {0, kConstSize, "overlaps the header"},
           {192 - 64, 64, "starts inside the flatbuffer"},
           {200, 50, "misaligned"},
           {257, 10, "misaligned by one"},
       }) {
    TestFile f = MakeFile();
    f.header.constants_offset = c.offset;
    f.header.constants_size = c.size;
    f.header.constants_raw_size = c.size;
    Rewrite(f.bytes, f.header);
    absl::Status s = Parse(f.bytes);
    EXPECT_THAT(s.message(),
                HasSubstr(absl::StrCat("constant segment at offset ", c.offset, " size ", c.size)))
        << c.why;
    EXPECT_THAT(s.message(), HasSubstr("64-byte aligned")) << c.why;
  }
}

TEST(FormatTest, RefusesRawSizeUnlikeSizeWhenUncompressed) {
  TestFile f = MakeFile();
  f.header.constants_raw_size = kConstSize * 2;
  Rewrite(f.bytes, f.header);
  EXPECT_THAT(Parse(f.bytes).message(), HasSubstr("raw size unlike its size"));
  // With compressed constants the raw size may differ.
  f.header.required_features |= kFeatureCompressedConstants;
  Rewrite(f.bytes, f.header);
  EXPECT_TRUE(Parse(f.bytes).ok()) << Parse(f.bytes);
}

TEST(FormatTest, RefusesChecksumMismatch) {
  // A flipped bit in the flatbuffer, in a header field the checksum covers, or in the stored
  // checksum itself.
  for (size_t pos : {kHeaderSize, kHeaderSize + kFbSize - 1, size_t{10}, size_t{64}, size_t{67}}) {
    TestFile f = MakeFile();
    f.bytes[pos] ^= 0x01;
    absl::Status s = Parse(f.bytes);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << pos;
    EXPECT_THAT(s.message(), HasSubstr("checksum mismatch")) << pos;
  }
  // The constant segment is not covered: a flip there still parses (constants are checked by
  // range only; their bytes are data).
  TestFile f = MakeFile();
  f.bytes[f.header.constants_offset + 3] ^= 0xFF;
  EXPECT_TRUE(Parse(f.bytes).ok());
}

TEST(FormatTest, ChecksumIgnoresTheStoredCrcField) {
  TestFile f = MakeFile();
  std::vector<uint8_t> other = f.bytes;
  PutLe(other, 64, 0xDEADBEEF, 4);
  EXPECT_EQ(ComputeChecksum({f.bytes.data(), kHeaderSize}, {f.bytes.data() + kHeaderSize, kFbSize}),
            ComputeChecksum({other.data(), kHeaderSize}, {other.data() + kHeaderSize, kFbSize}));
}

}  // namespace
}  // namespace dynvm::schema
