#include "schema/weights.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schema/format.h"
#include "schema/writer.h"

namespace dynvm::schema {
namespace {

using ::testing::HasSubstr;

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// The hash as docs/executable-format.md defines it, written from the text with plain loops and
// byte-at-a-time little-endian loads: an independent oracle for ContentHash.
uint64_t DocHash(const std::string& s) {
  const uint64_t p1 = 0x9E3779B185EBCA87ull, p2 = 0xC2B2AE3D27D4EB4Full, p3 = 0x165667B19E3779F9ull;
  auto rotl = [](uint64_t v, int r) { return (v << r) | (v >> (64 - r)); };
  uint64_t acc[4] = {p1, p2, p3, p1 ^ p2};
  const size_t stripes = s.size() / 32;
  for (size_t st = 0; st < stripes; ++st) {
    for (int lane = 0; lane < 4; ++lane) {
      uint64_t word = 0;
      for (int b = 7; b >= 0; --b)
        word = (word << 8) | static_cast<uint8_t>(s[st * 32 + lane * 8 + b]);
      acc[lane] = rotl(acc[lane] + word * p2, 31) * p1;
    }
  }
  uint64_t h = rotl(acc[0], 1) + rotl(acc[1], 7) + rotl(acc[2], 12) + rotl(acc[3], 18);
  h ^= s.size() * p3;
  for (size_t i = stripes * 32; i < s.size(); ++i)
    h = rotl(h ^ static_cast<uint8_t>(s[i]), 11) * p1;
  h = (h ^ (h >> 33)) * p2;
  h = (h ^ (h >> 29)) * p3;
  return h ^ (h >> 32);
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

TEST(ContentHashTest, MatchesTheDocumentedDefinition) {
  for (size_t n : {0, 1, 7, 31, 32, 33, 64, 100, 1000, 4096 + 5}) {
    const std::string s = RandomBytes(n, static_cast<uint32_t>(n));
    EXPECT_EQ(ContentHash(Bytes(s)), DocHash(s)) << n;
  }
}

TEST(ContentHashTest, EveryByteAndTheLengthMatter) {
  const std::string base = RandomBytes(200, 1);
  const uint64_t h = ContentHash(Bytes(base));
  for (size_t i = 0; i < base.size(); ++i) {
    std::string flipped = base;
    flipped[i] ^= 1;
    EXPECT_NE(ContentHash(Bytes(flipped)), h) << i;
  }
  // Zeros of different lengths differ.
  EXPECT_NE(ContentHash(Bytes(std::string(64, '\0'))), ContentHash(Bytes(std::string(96, '\0'))));
  EXPECT_NE(ContentHash(Bytes(std::string())), ContentHash(Bytes(std::string(1, '\0'))));
}

WeightsHeader SampleHeader(const std::string& data) {
  WeightsHeader h;
  h.content_hash = ContentHash(Bytes(data));
  h.raw_size = data.size();
  return h;
}

TEST(WeightsFileTest, RoundTrip) {
  const std::string data = RandomBytes(300, 2);
  const std::string file = EncodeWeightsFile(SampleHeader(data), data);
  ASSERT_EQ(file.size(), kWeightsHeaderSize + data.size());
  EXPECT_EQ(std::memcmp(file.data(), kWeightsMagic, 8), 0);
  absl::StatusOr<WeightsHeader> h = ParseWeightsHeader(Bytes(file));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->content_hash, DocHash(data));
  EXPECT_EQ(h->data_offset, 64u);
  EXPECT_EQ(h->stored_size, 300u);
  EXPECT_EQ(h->raw_size, 300u);
  EXPECT_EQ(h->required_features, 0u);
  EXPECT_EQ(file.substr(64), data);
}

TEST(WeightsFileTest, RefusesDamagedHeaders) {
  const std::string data = RandomBytes(128, 3);
  const std::string good = EncodeWeightsFile(SampleHeader(data), data);
  // Any flipped header byte is caught (by the magic, the version or the checksum).
  for (size_t i = 0; i < kWeightsHeaderSize; ++i) {
    std::string f = good;
    f[i] ^= 0x10;
    EXPECT_FALSE(ParseWeightsHeader(Bytes(f)).ok()) << i;
  }
  EXPECT_THAT(ParseWeightsHeader(Bytes(good.substr(0, 63))).status().message(),
              HasSubstr("truncated weights file: 63 bytes"));
  // Data cut short: the header is intact but the data does not fit.
  EXPECT_THAT(ParseWeightsHeader(Bytes(good.substr(0, 100))).status().message(),
              HasSubstr("does not lie inside the 100-byte file"));
  // An executable is not a weights file.
  std::string exe = good;
  std::memcpy(exe.data(), kMagic, 8);
  EXPECT_THAT(ParseWeightsHeader(Bytes(exe)).status().message(), HasSubstr("wrong magic"));
}

TEST(WeightsFileTest, OldRuntimeRefusesUnknownFeature) {
  const std::string data = RandomBytes(64, 4);
  WeightsHeader h = SampleHeader(data);
  h.required_features = uint64_t{1} << 20;
  absl::Status s = ParseWeightsHeader(Bytes(EncodeWeightsFile(h, data))).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("bit20"));
  // The compression bit is known; a raw size unlike the stored size needs it.
  h.required_features = 0;
  h.raw_size = 65;
  EXPECT_THAT(ParseWeightsHeader(Bytes(EncodeWeightsFile(h, data))).status().message(),
              HasSubstr("raw size unlike"));
}

TEST(CompressionTest, RoundTripAndRefusals) {
  std::string raw(100000, '\0');
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>((i / 100) % 7);
  absl::StatusOr<std::string> c = CompressSegment(raw, 3);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_LT(c->size(), raw.size() / 20);
  std::vector<uint8_t> out(raw.size());
  ASSERT_TRUE(DecompressSegment(Bytes(*c), out.data(), raw.size()).ok());
  EXPECT_EQ(std::memcmp(out.data(), raw.data(), raw.size()), 0);
  // A frame declaring another size, a corrupt frame, garbage.
  EXPECT_THAT(DecompressSegment(Bytes(*c), out.data(), raw.size() - 1).message(),
              HasSubstr("the frame holds"));
  std::string bad = *c;
  bad[bad.size() / 2] ^= 0x55;
  bad[bad.size() - 1] ^= 0x55;
  EXPECT_FALSE(DecompressSegment(Bytes(bad), out.data(), raw.size()).ok());
  EXPECT_THAT(DecompressSegment(Bytes(std::string("not zstd at all")), out.data(), 15).message(),
              HasSubstr("not a zstd frame"));
  // A frame that expands more than kMaxCompressionRatio times is refused before allocation.
  const std::string zeros(64 << 20, '\0');
  absl::StatusOr<std::string> bomb = CompressSegment(zeros, 3);
  ASSERT_TRUE(bomb.ok());
  ASSERT_LT(bomb->size(), 64u << 10);
  EXPECT_EQ(CheckCompressedSegment(Bytes(*bomb), zeros.size()).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(CheckCompressedSegment(Bytes(*c), raw.size()).ok());
  EXPECT_FALSE(CompressSegment(raw, 0).ok());
  EXPECT_FALSE(CompressSegment(raw, 99).ok());
}

// A one-function executable with two constants, serialized each way.
fb::ExecutableT SampleExecutable() {
  fb::ExecutableT exe;
  auto f = std::make_unique<fb::FunctionT>();
  f->name = "main";
  f->code = {0};  // not verified here
  exe.functions.push_back(std::move(f));
  for (int i = 0; i < 2; ++i) {
    auto c = std::make_unique<fb::ConstantT>();
    c->dtype = 0;
    c->shape = {250};
    c->is_weight = true;
    exe.constants.push_back(std::move(c));
  }
  return exe;
}

TEST(SerializeTest, ExternalWeightsFileHoldsTheSegment) {
  const std::string a(1000, 'a'), b(1000, 'b');
  std::vector<absl::string_view> data = {a, b};
  fb::ExecutableT inline_exe = SampleExecutable();
  absl::StatusOr<SerializedFiles> inline_files = SerializeExecutableFiles(inline_exe, data);
  ASSERT_TRUE(inline_files.ok()) << inline_files.status();
  EXPECT_TRUE(inline_files->weights.empty());
  absl::StatusOr<FileHeader> ih = ParseHeader(Bytes(inline_files->executable));
  ASSERT_TRUE(ih.ok()) << ih.status();
  const std::string segment =
      inline_files->executable.substr(ih->constants_offset, ih->constants_size);
  ASSERT_EQ(segment.size(), 1024u + 1000u);

  fb::ExecutableT exe = SampleExecutable();
  WriteOptions o;
  o.weights_file_name = "w.dvw";
  absl::StatusOr<SerializedFiles> files = SerializeExecutableFiles(exe, data, o);
  ASSERT_TRUE(files.ok()) << files.status();
  absl::StatusOr<FileHeader> h = ParseHeader(Bytes(files->executable));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->required_features, uint64_t{kFeatureExternalWeights});
  EXPECT_EQ(h->constants_size, 0u);
  EXPECT_LT(files->executable.size(), 1000u);
  absl::StatusOr<WeightsHeader> wh = ParseWeightsHeader(Bytes(files->weights));
  ASSERT_TRUE(wh.ok()) << wh.status();
  EXPECT_EQ(files->weights.substr(wh->data_offset), segment);
  EXPECT_EQ(wh->content_hash, DocHash(segment));
  const fb::Executable* fbe = fb::GetExecutable(files->executable.data() + h->flatbuffer_offset);
  ASSERT_NE(fbe->weights(), nullptr);
  EXPECT_EQ(fbe->weights()->file_name()->str(), "w.dvw");
  EXPECT_EQ(fbe->weights()->hash(), DocHash(segment));
  EXPECT_EQ(fbe->weights()->size(), segment.size());

  // Compressed: in the .dvw, with the bit in the .dvw header.
  fb::ExecutableT cexe = SampleExecutable();
  o.compress = true;
  files = SerializeExecutableFiles(cexe, data, o);
  ASSERT_TRUE(files.ok()) << files.status();
  wh = ParseWeightsHeader(Bytes(files->weights));
  ASSERT_TRUE(wh.ok()) << wh.status();
  EXPECT_EQ(wh->required_features, uint64_t{kFeatureCompressedConstants});
  EXPECT_EQ(wh->raw_size, segment.size());
  EXPECT_LT(wh->stored_size, 100u);
  std::string out(segment.size(), '\0');
  ASSERT_TRUE(DecompressSegment(Bytes(files->weights).subspan(64),
                                reinterpret_cast<uint8_t*>(out.data()), out.size())
                  .ok());
  EXPECT_EQ(out, segment);

  // Compressed inline.
  fb::ExecutableT iexe = SampleExecutable();
  WriteOptions io;
  io.compress = true;
  absl::StatusOr<std::string> one = SerializeExecutable(iexe, data, io);
  ASSERT_TRUE(one.ok()) << one.status();
  h = ParseHeader(Bytes(*one));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->required_features, uint64_t{kFeatureCompressedConstants});
  EXPECT_EQ(h->constants_raw_size, segment.size());
  EXPECT_LT(h->constants_size, 100u);
  // SerializeExecutable refuses to drop a weights file.
  fb::ExecutableT wexe = SampleExecutable();
  EXPECT_FALSE(SerializeExecutable(wexe, data, o).ok());
}

}  // namespace
}  // namespace dynvm::schema
