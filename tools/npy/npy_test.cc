#include "tools/npy/npy.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "allocator/storage.h"
#include "gtest/gtest.h"
#include "kernels/strings.h"
#include "schema/mapped_file.h"

namespace dynvm::npy {
namespace {

// Tests run from the repository root.
std::string TestdataPath(absl::string_view name) {
  return absl::StrCat("tools/npy/testdata/", name);
}

std::string TempPath(absl::string_view name) {
  return absl::StrCat(testing::TempDir(), "/npy_test_", name);
}

absl::Span<const uint8_t> AsBytes(absl::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string RawBytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.nbytes()));
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  std::vector<T> v(static_cast<size_t>(t.numel()));
  if (!v.empty()) std::memcpy(v.data(), t.raw_data(), v.size() * sizeof(T));
  return v;
}

std::vector<int64_t> Dims(const Tensor& t) { return {t.dims().begin(), t.dims().end()}; }

// Loads testdata/`name` with LoadNpy and with ParseNpy, checks that both agree, and returns the
// LoadNpy result (undefined on failure).
Tensor Load(absl::string_view name, bool* zero_copy = nullptr) {
  const std::string path = TestdataPath(name);
  bool zc = true;
  absl::StatusOr<Tensor> loaded = LoadNpy(path, &zc);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<std::string> bytes = schema::ReadFileToString(path);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  if (!loaded.ok() || !bytes.ok()) return Tensor();
  absl::StatusOr<Tensor> parsed = ParseNpy(AsBytes(*bytes));
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return Tensor();
  EXPECT_EQ(parsed->dtype(), loaded->dtype()) << name;
  EXPECT_EQ(Dims(*parsed), Dims(*loaded)) << name;
  EXPECT_EQ(RawBytes(*parsed), RawBytes(*loaded)) << name;
  EXPECT_TRUE(parsed->is_contiguous());
  EXPECT_TRUE(loaded->is_contiguous());
  EXPECT_EQ(parsed->storage()->kind(), Storage::Kind::kPool);
  EXPECT_EQ(loaded->storage()->kind(), zc ? Storage::Kind::kExternal : Storage::Kind::kPool);
  if (zero_copy != nullptr) *zero_copy = zc;
  return *std::move(loaded);
}

// The path of the file mapped at `p` according to /proc/self/maps, or "" when none is.
std::string MappedPathAt(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    in >> range >> perms >> offset >> dev >> inode >> path;
    const size_t dash = range.find('-');
    const uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (addr >= lo && addr < hi) return path;
  }
  return "";
}

// An .npy file with the given version and header text (not padded) followed by `data`.
std::string MakeNpy(int major, absl::string_view header, absl::string_view data = "",
                    int minor = 0) {
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back(static_cast<char>(minor));
  const size_t len_bytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < len_bytes; ++i) {
    out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xFF));
  }
  absl::StrAppend(&out, header, data);
  return out;
}

std::string SetByte(std::string s, size_t i, int value) {
  s[i] = static_cast<char>(value);
  return s;
}

std::string F4Header(absl::string_view shape) {
  return absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': ", shape, ", }");
}

// ---------------------------------------------------------------------------------------------
// Files written by NumPy (testdata/make_testdata.py), one per dtype.

TEST(NpyReadTest, F4) {
  Tensor t = Load("f4.npy");
  ASSERT_TRUE(t.defined());
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_EQ(Dims(t), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Values<float>(t), (std::vector<float>{1.5f, -2.25f, 0.0f, 1024.0f, -0.5f, 3.0e-3f}));
}

TEST(NpyReadTest, F8) {
  Tensor t = Load("f8.npy");
  ASSERT_TRUE(t.defined());
  EXPECT_EQ(t.dtype(), DType::kF64);
  EXPECT_EQ(Values<double>(t),
            (std::vector<double>{0.1, -1e300, std::numeric_limits<double>::infinity()}));
}

TEST(NpyReadTest, F2) {
  Tensor t = Load("f2.npy");
  ASSERT_TRUE(t.defined());
  EXPECT_EQ(t.dtype(), DType::kF16);
  EXPECT_EQ(Values<uint16_t>(t), (std::vector<uint16_t>{0x3C00, 0xC000, 0x3800, 0x7BFF}));
}

TEST(NpyReadTest, SignedIntegers) {
  Tensor i1 = Load("i1.npy");
  Tensor i2 = Load("i2.npy");
  Tensor i4 = Load("i4.npy");
  Tensor i8 = Load("i8.npy");
  ASSERT_TRUE(i1.defined() && i2.defined() && i4.defined() && i8.defined());
  EXPECT_EQ(i1.dtype(), DType::kI8);
  EXPECT_EQ(Values<int8_t>(i1), (std::vector<int8_t>{-128, -1, 0, 1, 127}));
  EXPECT_EQ(i2.dtype(), DType::kI16);
  EXPECT_EQ(Values<int16_t>(i2), (std::vector<int16_t>{-32768, -1, 0, 32767}));
  EXPECT_EQ(i4.dtype(), DType::kI32);
  EXPECT_EQ(Dims(i4), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Values<int32_t>(i4), (std::vector<int32_t>{INT32_MIN, 7, 0, INT32_MAX}));
  EXPECT_EQ(i8.dtype(), DType::kI64);
  EXPECT_EQ(Values<int64_t>(i8), (std::vector<int64_t>{INT64_MIN, -1, INT64_MAX}));
}

TEST(NpyReadTest, UnsignedIntegers) {
  Tensor u1 = Load("u1.npy");
  Tensor u2 = Load("u2.npy");
  Tensor u4 = Load("u4.npy");
  Tensor u8 = Load("u8.npy");
  ASSERT_TRUE(u1.defined() && u2.defined() && u4.defined() && u8.defined());
  EXPECT_EQ(u1.dtype(), DType::kU8);
  EXPECT_EQ(Values<uint8_t>(u1), (std::vector<uint8_t>{0, 1, 254, 255}));
  EXPECT_EQ(u2.dtype(), DType::kU16);
  EXPECT_EQ(Values<uint16_t>(u2), (std::vector<uint16_t>{0, 1, 65535}));
  EXPECT_EQ(u4.dtype(), DType::kU32);
  EXPECT_EQ(Values<uint32_t>(u4), (std::vector<uint32_t>{0, UINT32_MAX}));
  EXPECT_EQ(u8.dtype(), DType::kU64);
  EXPECT_EQ(Values<uint64_t>(u8),
            (std::vector<uint64_t>{0, UINT64_MAX, uint64_t{12345678901234567890u}}));
}

TEST(NpyReadTest, Bool) {
  Tensor t = Load("b1.npy");
  ASSERT_TRUE(t.defined());
  EXPECT_EQ(t.dtype(), DType::kBool);
  EXPECT_EQ(Values<uint8_t>(t), (std::vector<uint8_t>{1, 0, 1, 1}));
}

TEST(NpyReadTest, ZeroDimensionalScalar) {
  Tensor t = Load("scalar_f8.npy");
  ASSERT_TRUE(t.defined());
  EXPECT_EQ(t.rank(), 0);
  EXPECT_EQ(t.numel(), 1);
  EXPECT_EQ(Values<double>(t), (std::vector<double>{3.5}));
}

TEST(NpyReadTest, Empty) {
  Tensor t = Load("empty_f4.npy");
  ASSERT_TRUE(t.defined());
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_EQ(Dims(t), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(t.numel(), 0);
}

TEST(NpyReadTest, FortranOrderIsTransposedToCOrder) {
  bool zero_copy = true;
  Tensor t = Load("fortran_i4.npy", &zero_copy);
  ASSERT_TRUE(t.defined());
  EXPECT_FALSE(zero_copy);
  EXPECT_EQ(Dims(t), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Values<int32_t>(t), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));

  Tensor u = Load("fortran_u1.npy", &zero_copy);
  ASSERT_TRUE(u.defined());
  EXPECT_FALSE(zero_copy);
  EXPECT_EQ(Dims(u), (std::vector<int64_t>{2, 3, 4}));
  std::vector<uint8_t> expected(24);
  for (int i = 0; i < 24; ++i) expected[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Values<uint8_t>(u), expected);
}

TEST(NpyReadTest, BigEndianIsSwapped) {
  bool zero_copy = true;
  Tensor f4 = Load("be_f4.npy", &zero_copy);
  ASSERT_TRUE(f4.defined());
  EXPECT_FALSE(zero_copy);
  EXPECT_EQ(f4.dtype(), DType::kF32);
  EXPECT_EQ(Values<float>(f4), (std::vector<float>{1.5f, -2.25f, 1024.0f}));

  Tensor i8 = Load("be_i8.npy");
  ASSERT_TRUE(i8.defined());
  EXPECT_EQ(Values<int64_t>(i8), (std::vector<int64_t>{INT64_MIN, -2, 0x0102030405060708}));

  Tensor u2 = Load("be_u2.npy");
  ASSERT_TRUE(u2.defined());
  EXPECT_EQ(Values<uint16_t>(u2), (std::vector<uint16_t>{0x0102, 0xFFFE}));
}

TEST(NpyReadTest, BigEndianFortranOrder) {
  Tensor t = Load("be_fortran_f8.npy");
  ASSERT_TRUE(t.defined());
  EXPECT_EQ(Dims(t), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Values<double>(t), (std::vector<double>{0, 0.25, 0.5, 0.75, 1.0, 1.25}));
}

TEST(NpyReadTest, Versions2And3) {
  Tensor v2 = Load("v2_f4.npy");
  ASSERT_TRUE(v2.defined());
  EXPECT_EQ(Dims(v2), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Values<float>(v2), (std::vector<float>{1, 2, 3, 4}));
  Tensor v3 = Load("v3_i2.npy");
  ASSERT_TRUE(v3.defined());
  EXPECT_EQ(Values<int16_t>(v3), (std::vector<int16_t>{-3, 4, 5}));
}

TEST(NpyReadTest, Header) {
  absl::StatusOr<std::string> bytes = schema::ReadFileToString(TestdataPath("f4.npy"));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<NpyHeader> h = ParseNpyHeader(AsBytes(*bytes));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->major_version, 1);
  EXPECT_EQ(h->dtype, DType::kF32);
  EXPECT_FALSE(h->big_endian);
  EXPECT_FALSE(h->fortran_order);
  EXPECT_EQ(h->dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h->data_offset, 128);
  EXPECT_EQ(h->data_bytes, 24);
  // The header alone is enough.
  EXPECT_TRUE(ParseNpyHeader(AsBytes(absl::string_view(*bytes).substr(0, 128))).ok());

  absl::StatusOr<std::string> v3 = schema::ReadFileToString(TestdataPath("v3_i2.npy"));
  ASSERT_TRUE(v3.ok());
  h = ParseNpyHeader(AsBytes(*v3));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->major_version, 3);
  EXPECT_EQ(h->data_offset % 64, 0);
}

// ---------------------------------------------------------------------------------------------
// Zero-copy loading

TEST(NpyLoadTest, AlignedFileIsViewedInPlace) {
  const std::string path = TestdataPath("f4.npy");
  bool zero_copy = false;
  absl::StatusOr<Tensor> t = LoadNpy(path, &zero_copy);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(zero_copy);
  EXPECT_EQ(t->storage()->kind(), Storage::Kind::kExternal);
  EXPECT_FALSE(t->storage()->writable());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw_data()) % 64, 0u);
  const std::string mapped = MappedPathAt(t->raw_data());
  EXPECT_TRUE(absl::EndsWith(mapped, "/tools/npy/testdata/f4.npy")) << mapped;
  EXPECT_EQ(Values<float>(*t)[3], 1024.0f);

  // A view keeps the mapping alive; dropping the last one unmaps the file.
  const void* data = t->raw_data();
  absl::StatusOr<Tensor> view = Tensor::View(t->storage(), 4, DType::kF32, {5});
  ASSERT_TRUE(view.ok());
  *t = Tensor();
  EXPECT_EQ(view->data<float>()[0], -2.25f);
  EXPECT_EQ(MappedPathAt(data), mapped);
  *view = Tensor();
  EXPECT_EQ(MappedPathAt(data), "");
}

TEST(NpyLoadTest, EveryLittleEndianCOrderFileIsZeroCopy) {
  for (const char* name :
       {"f4.npy", "f8.npy", "f2.npy", "i1.npy", "i2.npy", "i4.npy", "i8.npy", "u1.npy", "u2.npy",
        "u4.npy", "u8.npy", "b1.npy", "scalar_f8.npy", "empty_f4.npy", "v2_f4.npy", "v3_i2.npy"}) {
    bool zero_copy = false;
    Tensor t = Load(name, &zero_copy);
    EXPECT_TRUE(t.defined()) << name;
    EXPECT_TRUE(zero_copy) << name;
  }
}

TEST(NpyLoadTest, UnalignedDataIsCopied) {
  // Older NumPy aligned the data to 16 bytes: here it starts at offset 80.
  std::string header = F4Header("(3,)");
  header.append(80 - 10 - header.size() - 1, ' ');
  header.push_back('\n');
  const float values[] = {1, 2, 3};
  const std::string file =
      MakeNpy(1, header, absl::string_view(reinterpret_cast<const char*>(values), 12));
  const std::string path = TempPath("unaligned.npy");
  ASSERT_TRUE(schema::WriteStringToFile(path, file).ok());
  bool zero_copy = true;
  absl::StatusOr<Tensor> t = LoadNpy(path, &zero_copy);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(zero_copy);
  EXPECT_EQ(t->storage()->kind(), Storage::Kind::kPool);
  EXPECT_EQ(Values<float>(*t), (std::vector<float>{1, 2, 3}));
  std::remove(path.c_str());
}

TEST(NpyLoadTest, NonCanonicalBoolsAreCopiedAndNormalized) {
  absl::StatusOr<std::string> file = schema::ReadFileToString(TestdataPath("b1.npy"));
  ASSERT_TRUE(file.ok());
  (*file)[file->size() - 1] = 7;  // NumPy reads any nonzero byte as True
  const std::string path = TempPath("bool7.npy");
  ASSERT_TRUE(schema::WriteStringToFile(path, *file).ok());
  bool zero_copy = true;
  absl::StatusOr<Tensor> t = LoadNpy(path, &zero_copy);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(zero_copy);
  EXPECT_EQ(Values<uint8_t>(*t), (std::vector<uint8_t>{1, 0, 1, 1}));
  absl::StatusOr<Tensor> parsed = ParseNpy(AsBytes(*file));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(Values<uint8_t>(*parsed), (std::vector<uint8_t>{1, 0, 1, 1}));
  std::remove(path.c_str());
}

TEST(NpyLoadTest, MissingFile) {
  bool zero_copy = true;
  absl::StatusOr<Tensor> t = LoadNpy(TempPath("does_not_exist.npy"), &zero_copy);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(zero_copy);
}

// ---------------------------------------------------------------------------------------------
// Writing

// EncodeNpy writes what numpy.save writes, byte for byte.
TEST(NpyWriteTest, MatchesNumPyByteForByte) {
  for (const char* name :
       {"f4.npy", "f8.npy", "f2.npy", "i1.npy", "i2.npy", "i4.npy", "i8.npy", "u1.npy", "u2.npy",
        "u4.npy", "u8.npy", "b1.npy", "scalar_f8.npy", "empty_f4.npy"}) {
    absl::StatusOr<std::string> file = schema::ReadFileToString(TestdataPath(name));
    ASSERT_TRUE(file.ok()) << name;
    absl::StatusOr<Tensor> t = ParseNpy(AsBytes(*file));
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    absl::StatusOr<std::string> encoded = EncodeNpy(*t);
    ASSERT_TRUE(encoded.ok()) << name << ": " << encoded.status();
    EXPECT_EQ(*encoded, *file) << name;
  }
}

class NpyRoundTripTest : public testing::TestWithParam<DType> {};

TEST_P(NpyRoundTripTest, EncodeThenParse) {
  const DType dtype = GetParam();
  const std::vector<std::vector<int64_t>> shapes = {{},     {0, 3},    {5},
                                                    {2, 3}, {3, 1, 2}, {1, 2, 1, 2, 1, 2, 1, 2}};
  for (const std::vector<int64_t>& dims : shapes) {
    absl::StatusOr<Tensor> t = Tensor::Empty(dtype, dims);
    ASSERT_TRUE(t.ok());
    auto* p = static_cast<uint8_t*>(t->raw_data());
    for (int64_t i = 0; i < t->nbytes(); ++i) p[i] = static_cast<uint8_t>(i * 37 + 11);
    if (dtype == DType::kBool) {
      for (int64_t i = 0; i < t->nbytes(); ++i) p[i] &= 1;
    }
    absl::StatusOr<std::string> encoded = EncodeNpy(*t);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    absl::StatusOr<NpyHeader> h = ParseNpyHeader(AsBytes(*encoded));
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->major_version, 1);
    EXPECT_EQ(h->data_offset % 64, 0);
    EXPECT_EQ(static_cast<int64_t>(encoded->size()), h->data_offset + t->nbytes());
    EXPECT_EQ((*encoded)[h->data_offset - 1], '\n');

    absl::StatusOr<Tensor> back = ParseNpy(AsBytes(*encoded));
    ASSERT_TRUE(back.ok()) << back.status();
    // bf16 travels as u16.
    EXPECT_EQ(back->dtype(), dtype == DType::kBF16 ? DType::kU16 : dtype);
    EXPECT_EQ(Dims(*back), dims);
    EXPECT_EQ(RawBytes(*back), RawBytes(*t));
    if (dtype == DType::kBF16) {
      absl::StatusOr<Tensor> bf = ReinterpretAs(*back, DType::kBF16);
      ASSERT_TRUE(bf.ok()) << bf.status();
      EXPECT_EQ(bf->dtype(), DType::kBF16);
      EXPECT_EQ(RawBytes(*bf), RawBytes(*t));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, NpyRoundTripTest,
                         testing::Values(DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                                         DType::kI8, DType::kI16, DType::kI32, DType::kI64,
                                         DType::kU8, DType::kU16, DType::kU32, DType::kU64,
                                         DType::kBool),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST(NpyWriteTest, StridedViews) {
  absl::StatusOr<Tensor> base = Tensor::Empty(DType::kI32, {3, 4});
  ASSERT_TRUE(base.ok());
  for (int i = 0; i < 12; ++i) base->data<int32_t>()[i] = i;

  struct Case {
    const char* name;
    int64_t offset;
    std::vector<int64_t> dims, strides;
    std::vector<int32_t> expected;
  };
  const Case cases[] = {
      {"transpose", 0, {4, 3}, {1, 4}, {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}},
      {"column", 4, {3}, {4}, {1, 5, 9}},
      {"reversed", 44, {4}, {-1}, {11, 10, 9, 8}},
      {"broadcast", 8, {2, 3}, {0, 1}, {2, 3, 4, 2, 3, 4}},
      {"every other", 0, {2, 2}, {8, 2}, {0, 2, 8, 10}},
      {"unit dim with odd stride", 4, {1, 3}, {1000, 1}, {1, 2, 3}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Tensor> view =
        Tensor::View(base->storage(), c.offset, DType::kI32, c.dims, c.strides);
    ASSERT_TRUE(view.ok()) << c.name << ": " << view.status();
    absl::StatusOr<std::string> encoded = EncodeNpy(*view);
    ASSERT_TRUE(encoded.ok()) << c.name << ": " << encoded.status();
    absl::StatusOr<Tensor> back = ParseNpy(AsBytes(*encoded));
    ASSERT_TRUE(back.ok()) << c.name << ": " << back.status();
    EXPECT_EQ(Dims(*back), c.dims) << c.name;
    EXPECT_EQ(Values<int32_t>(*back), c.expected) << c.name;
  }
}

TEST(NpyWriteTest, SaveThenLoad) {
  absl::StatusOr<Tensor> t =
      Tensor::FromVector<double>(DType::kF64, {2, 2}, std::vector<double>{1, -2, 3.5, 1e-9});
  ASSERT_TRUE(t.ok());
  const std::string path = TempPath("saved.npy");
  ASSERT_TRUE(SaveNpy(path, *t).ok());
  bool zero_copy = false;
  absl::StatusOr<Tensor> back = LoadNpy(path, &zero_copy);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(zero_copy);
  EXPECT_EQ(Values<double>(*back), (std::vector<double>{1, -2, 3.5, 1e-9}));
  std::remove(path.c_str());
}

// String arrays (docs/strings.md): NumPy's '<U' / '>U' read as UTF-8 string tensors, written
// back as '<U' byte for byte as numpy.save writes them.
std::vector<std::string> StringValues(const Tensor& t) {
  std::vector<std::string> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.emplace_back(StringAt(t, i));
  return v;
}

TEST(NpyStringTest, ReadsNumpyStrArrays) {
  absl::StatusOr<Tensor> t = LoadNpy(TestdataPath("str_u.npy"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype(), DType::kString);
  EXPECT_EQ(Dims(*t), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(StringValues(*t),
            (std::vector<std::string>{"a", "caf\xc3\xa9", "", "\xe2\x82\xac\xf0\x9f\x98\x80"}));
  // Big-endian, Fortran order: the same row-major values NumPy shows.
  absl::StatusOr<Tensor> be = LoadNpy(TestdataPath("be_fortran_str.npy"));
  ASSERT_TRUE(be.ok()) << be.status();
  EXPECT_EQ(Dims(*be), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(StringValues(*be), (std::vector<std::string>{"x", "yz", "", "\xc3\xa9", "w", "v"}));
}

TEST(NpyStringTest, WritesWhatNumpySaveWrites) {
  absl::StatusOr<Tensor> t = LoadNpy(TestdataPath("str_u.npy"));
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<std::string> bytes = EncodeNpy(*t);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::string> file = schema::ReadFileToString(TestdataPath("str_u.npy"));
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*bytes, *file);
  // An empty tensor and all-empty strings: width 1, as NumPy's '<U1' for [''].
  absl::StatusOr<Tensor> e = StringTensor({0, 2}, {});
  ASSERT_TRUE(e.ok());
  absl::StatusOr<Tensor> back = ParseNpy(AsBytes(*EncodeNpy(*e)));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(Dims(*back), (std::vector<int64_t>{0, 2}));
  absl::StatusOr<Tensor> blank = StringTensor({1}, {""});
  ASSERT_TRUE(blank.ok());
  EXPECT_NE(EncodeNpy(*blank)->find("'<U1'"), std::string::npos);
}

TEST(NpyWriteTest, Errors) {
  EXPECT_EQ(EncodeNpy(Tensor()).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Tensor> s = StringTensor({2}, {"ok", "a\xff"});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(EncodeNpy(*s).status().code(), absl::StatusCode::kInvalidArgument);  // not UTF-8
  absl::Status saved = SaveNpy(TempPath("no_such_dir/x.npy"), Tensor::Scalar(1));
  EXPECT_FALSE(saved.ok());
}

TEST(NpyMappedTest, WritesThroughTheMappingIntoTheFile) {
  const std::string path = TempPath("mapped.npy");
  absl::StatusOr<Tensor> t = CreateMappedNpy(path, DType::kF32, {2, 3});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw_data()) % 64, 0u);
  EXPECT_FALSE(t->storage()->writable());  // kExternal: SetOutputBuffer rebinds it writable
  for (int i = 0; i < 6; ++i) t->data<float>()[i] = 0.5f * static_cast<float>(i);
  *t = Tensor();  // unmaps
  // The file is what numpy.save writes for the same array.
  Tensor want = *Tensor::FromVector<float>(DType::kF32, {2, 3}, {0, 0.5f, 1, 1.5f, 2, 2.5f});
  absl::StatusOr<std::string> file = schema::ReadFileToString(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*file, *EncodeNpy(want));
  EXPECT_EQ(EncodeNpyHeader(DType::kF32, {2, 3})->size() % 64, 0u);
  EXPECT_FALSE(CreateMappedNpy(TempPath("no/such/dir.npy"), DType::kF32, {1}).ok());
  EXPECT_FALSE(CreateMappedNpy(path, DType::kString, {1}).ok());
  std::remove(path.c_str());
}

TEST(NpyReinterpretTest, U16AsBF16SharesTheBytes) {
  absl::StatusOr<Tensor> u =
      Tensor::FromVector<uint16_t>(DType::kU16, {3}, std::vector<uint16_t>{0x3F80, 0xC000, 0});
  ASSERT_TRUE(u.ok());
  absl::StatusOr<Tensor> bf = ReinterpretAs(*u, DType::kBF16);
  ASSERT_TRUE(bf.ok()) << bf.status();
  EXPECT_EQ(bf->dtype(), DType::kBF16);
  EXPECT_EQ(bf->raw_data(), u->raw_data());
  EXPECT_EQ(bf->storage().get(), u->storage().get());
  EXPECT_EQ(Dims(*bf), (std::vector<int64_t>{3}));

  // Strides are kept.
  absl::StatusOr<Tensor> rev = Tensor::View(u->storage(), 4, DType::kU16, {3}, {-1});
  ASSERT_TRUE(rev.ok());
  absl::StatusOr<Tensor> bf_rev = ReinterpretAs(*rev, DType::kBF16);
  ASSERT_TRUE(bf_rev.ok());
  EXPECT_EQ(bf_rev->stride(0), -1);

  EXPECT_FALSE(ReinterpretAs(*u, DType::kF32).ok());
  EXPECT_FALSE(ReinterpretAs(*u, DType::kString).ok());
  EXPECT_FALSE(ReinterpretAs(Tensor(), DType::kBF16).ok());
  absl::StatusOr<Tensor> u8 = Tensor::Empty(DType::kU8, {2});
  ASSERT_TRUE(u8.ok());
  EXPECT_FALSE(ReinterpretAs(*u8, DType::kBool).ok());
}

// ---------------------------------------------------------------------------------------------
// Header variants NumPy accepts and we do too

TEST(NpyParseTest, AcceptedHeaderVariants) {
  const std::string data("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // 1.0f, 2.0f
  const char* headers[] = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,)}",
      "{'shape': (2,), 'fortran_order': False, 'descr': '<f4'}",
      "{'shape':(2,),'fortran_order':False,'descr':'<f4'}",
      "  {\n 'descr' : '=f4' ,\t'fortran_order' : True , 'shape' : ( 2 , ) ,\n }  \n",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2L,), }",  // Python 2
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 1,), }",
  };
  for (const char* header : headers) {
    for (int major : {1, 2}) {
      // Data longer than needed is ignored.
      const std::string file = MakeNpy(major, header, data + "extra");
      absl::StatusOr<Tensor> t = ParseNpy(AsBytes(file));
      ASSERT_TRUE(t.ok()) << header << ": " << t.status();
      EXPECT_EQ(t->numel(), 2) << header;
      EXPECT_EQ(Values<float>(*t), (std::vector<float>{1.0f, 2.0f})) << header;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Malformed input: every case is an error that names the problem

struct BadCase {
  const char* name;
  std::string bytes;
  absl::StatusCode code;
  const char* message;  // a substring of the error message
};

// '<U0' string arrays (found by npy_fuzzer): no bytes per element, so the file's size bounds
// neither their element count nor their strides.
std::vector<BadCase> ZeroWidthStringCases() {
  constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
  return {
      // Found by npy_fuzzer: a '<U0' array stores no bytes, so its element count is not bounded
      // by the file's size (it asked for a vector of 7e17 strings).
      {"huge zero-width strings",
       MakeNpy(1, "{'descr': '>U0', 'fortran_order': False, 'shape': (3, 244444444444444442), }"),
       kInvalid, "more than 2^20 elements of width 0"},
      // Found by npy_fuzzer later: 2 x 211111111 empty strings passed the 2^30 cap and asked for
      // a 13 GiB table. A zero-width array is capped at 2^20 elements.
      {"many zero-width strings",
       MakeNpy(1, "{'descr': '<U0', 'fortran_order': False, 'shape': (2, 211111111), }"), kInvalid,
       "more than 2^20 elements of width 0"},
      // And an empty '<U0' array whose strides fit only at width 0 (written back as '<U1').
      {"empty zero-width strings with huge strides",
       MakeNpy(1,
               "{'descr': '<U0', 'fortran_order': False, 'shape': (0, 211111111110, "
               "21111111, 1), }"),
       kInvalid, "overflow 64 bits"},
  };
}

std::vector<BadCase> BadCases() {
  using absl::StatusCode;
  constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;
  const std::string data24(24, '\0');
  std::string v2_huge("\x93NUMPY\x02\x00\xff\xff\xff\xff{", 13);
  std::string v2_long("\x93NUMPY\x02\x00\x00\x01\x00\x00{'descr'", 19);  // claims 256 bytes
  std::vector<BadCase> cases = {
      {"empty", "", kInvalid, "truncated"},
      {"truncated magic", std::string("\x93NUM", 4), kInvalid, "truncated"},
      {"wrong magic", std::string("\x93NUMPZ\x01\x00\x10\x00", 10), kInvalid, "bad magic"},
      {"zip file", std::string("PK\x03\x04\x14\x00\x00\x00", 8), kInvalid, "bad magic"},
      {"text", "hello world, this is not numpy", kInvalid, "bad magic"},
      {"no header length", std::string("\x93NUMPY\x01\x00\x10", 9), kInvalid, "header length"},
      {"no v2 header length", std::string("\x93NUMPY\x02\x00\x10\x00", 10), kInvalid,
       "header length"},
      {"version 4.0", SetByte(MakeNpy(1, F4Header("(6,)"), data24), 6, 4),
       StatusCode::kUnimplemented, "version 4.0"},
      {"version 1.1", MakeNpy(1, F4Header("(6,)"), data24, 1), StatusCode::kUnimplemented,
       "version 1.1"},
      {"version 0.0", SetByte(MakeNpy(1, F4Header("(6,)"), data24), 6, 0),
       StatusCode::kUnimplemented, "version 0.0"},
      {"huge header length", v2_huge, kInvalid, "exceeds the limit"},
      {"header longer than file", v2_long, kInvalid, "truncated"},
      {"empty header", MakeNpy(1, ""), kInvalid, "expected '{'"},
      {"garbage header", MakeNpy(1, "garbage!"), kInvalid, "expected '{'"},
      {"nul in header", MakeNpy(1, std::string("{\0}", 3)), kInvalid, "quoted key"},
      {"unclosed dict", MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,)"),
       kInvalid, "expected ',' or '}'"},
      {"text after dict", MakeNpy(1, F4Header("(6,)") + " x", data24), kInvalid, "after the dict"},
      {"two dicts", MakeNpy(1, F4Header("(6,)") + F4Header("(6,)"), data24), kInvalid,
       "after the dict"},
      {"leading comma", MakeNpy(1, "{, 'descr': '<f4'}"), kInvalid, "quoted key"},
      {"double comma", MakeNpy(1, "{'descr': '<f4',, 'shape': (6,)}"), kInvalid, "quoted key"},
      {"missing colon", MakeNpy(1, "{'descr' '<f4'}"), kInvalid, "expected ':'"},
      {"unquoted key", MakeNpy(1, "{descr: '<f4'}"), kInvalid, "quoted key"},
      {"missing shape", MakeNpy(1, "{'descr': '<f4', 'fortran_order': False}"), kInvalid,
       "lacks the key 'shape'"},
      {"missing descr", MakeNpy(1, "{'fortran_order': False, 'shape': ()}"), kInvalid,
       "lacks the key 'descr'"},
      {"missing fortran_order", MakeNpy(1, "{'descr': '<f4', 'shape': ()}"), kInvalid,
       "lacks the key 'fortran_order'"},
      {"unknown key",
       MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'extra': 1}"), kInvalid,
       "unknown key 'extra'"},
      {"duplicate key",
       MakeNpy(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}"),
       kInvalid, "duplicate key 'descr'"},
      {"unterminated string", MakeNpy(1, "{'descr: '<f4'}"), kInvalid, "expected ':'"},
      {"string runs to end", MakeNpy(1, "{'descr"), kInvalid, "unterminated string"},
      {"escape in string", MakeNpy(1, "{'descr': '<f\\x34'}"), kInvalid, "escape"},
      {"fortran_order as int",
       MakeNpy(1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (6,)}", data24), kInvalid,
       "True or False"},
      {"fortran_order lowercase",
       MakeNpy(1, "{'descr': '<f4', 'fortran_order': false, 'shape': (6,)}", data24), kInvalid,
       "True or False"},
      {"fortran_order Truex",
       MakeNpy(1, "{'descr': '<f4', 'fortran_order': Truex, 'shape': (6,)}", data24), kInvalid,
       "True or False"},
      {"shape as list", MakeNpy(1, F4Header("[2, 3]"), data24), kInvalid, "tuple"},
      {"shape as int", MakeNpy(1, F4Header("6"), data24), kInvalid, "tuple"},
      {"shape (6) is not a tuple", MakeNpy(1, F4Header("(6)"), data24), kInvalid, "(n,)"},
      {"shape unclosed", MakeNpy(1, F4Header("(2, 3"), data24), kInvalid, "in shape"},
      {"shape comma only", MakeNpy(1, F4Header("(,)"), data24), kInvalid, "expected a dimension"},
      {"negative dim", MakeNpy(1, F4Header("(-1,)"), data24), kInvalid, "negative dimension"},
      {"plus sign", MakeNpy(1, F4Header("(+6,)"), data24), kInvalid, "expected a dimension"},
      {"leading zero", MakeNpy(1, F4Header("(06,)"), data24), kInvalid, "leading zero"},
      {"float dim", MakeNpy(1, F4Header("(6.0,)"), data24), kInvalid, "malformed dimension"},
      {"hex dim", MakeNpy(1, F4Header("(0x6,)"), data24), kInvalid, "malformed dimension"},
      {"underscore dim", MakeNpy(1, F4Header("(1_0,)"), data24), kInvalid, "malformed dimension"},
      {"L suffix in version 3", MakeNpy(3, F4Header("(6L,)"), data24), kInvalid,
       "malformed dimension"},
      {"dim beyond 64 bits", MakeNpy(1, F4Header("(99999999999999999999999,)")), kInvalid,
       "does not fit"},
      {"dim of 2^63", MakeNpy(1, F4Header("(9223372036854775808,)")), kInvalid, "does not fit"},
      {"element count overflows", MakeNpy(1, F4Header("(4294967296, 4294967296)")), kInvalid,
       "more than 2^63 elements"},
      {"byte count overflows", MakeNpy(1, F4Header("(4611686018427387904,)")), kInvalid,
       "more than 2^63 bytes"},
      // Found by npy_fuzzer: a zero-size shape whose strides overflow.
      {"empty shape with huge dims", MakeNpy(1, F4Header("(0, 4294967296, 4294967296)")), kInvalid,
       "strides of the empty shape"},
      {"empty shape with huge byte strides", MakeNpy(1, F4Header("(2147483648, 0, 2147483648)")),
       kInvalid, "strides of the empty shape"},
      {"huge shape, little data", MakeNpy(1, F4Header("(1000000000000,)"), data24), kInvalid,
       "data truncated"},
      {"rank 9", MakeNpy(1, F4Header("(1, 1, 1, 1, 1, 1, 1, 1, 1)")), kInvalid,
       "more than 8 dimensions"},
      {"data too short", MakeNpy(1, F4Header("(2, 3)"), data24.substr(0, 20)), kInvalid,
       "needs 24 bytes but only 20"},
      {"no data", MakeNpy(1, F4Header("()")), kInvalid, "needs 4 bytes but only 0"},
      {"object dtype",
       MakeNpy(1, "{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", data24), kInvalid,
       "object arrays"},
      {"unicode strings, a code point above U+10FFFF",
       MakeNpy(1, "{'descr': '<U1', 'fortran_order': False, 'shape': (1,), }",
               std::string("\x00\x00\x11\x00", 4)),
       kInvalid, "string element 0 holds 0x110000, which is not a Unicode scalar value"},
      {"unicode strings, a surrogate",
       MakeNpy(1, "{'descr': '<U2', 'fortran_order': False, 'shape': (1,), }",
               std::string("a\x00\x00\x00\x00\xd8\x00\x00", 8)),
       kInvalid, "holds 0xd800"},
      {"unicode strings, data too short",
       MakeNpy(1, "{'descr': '<U5', 'fortran_order': False, 'shape': (2,), }", data24), kInvalid,
       "needs 40 bytes but only 24"},
      {"unicode strings, bad width",
       MakeNpy(1, "{'descr': '<Ux', 'fortran_order': False, 'shape': (1,), }", data24), kInvalid,
       "bad string width"},
      {"byte strings",
       MakeNpy(1, "{'descr': '|S3', 'fortran_order': False, 'shape': (1,), }", data24),
       StatusCode::kUnimplemented, "string arrays"},
      {"structured dtype",
       MakeNpy(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", data24),
       StatusCode::kUnimplemented, "structured"},
      {"complex dtype",
       MakeNpy(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", data24), kInvalid,
       "unsupported descr '<c8'"},
      {"datetime dtype",
       MakeNpy(1, "{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (1,), }", data24),
       kInvalid, "unsupported descr"},
      {"descr without byte order",
       MakeNpy(1, "{'descr': 'f4', 'fortran_order': False, 'shape': (1,), }", data24), kInvalid,
       "byte-order prefix"},
      {"descr by name",
       MakeNpy(1, "{'descr': 'float32', 'fortran_order': False, 'shape': (1,), }", data24),
       kInvalid, "byte-order prefix"},
      {"'|' on a multi-byte type",
       MakeNpy(1, "{'descr': '|f4', 'fortran_order': False, 'shape': (1,), }", data24), kInvalid,
       "only valid for one-byte types"},
      {"empty descr", MakeNpy(1, "{'descr': '', 'fortran_order': False, 'shape': (1,), }"),
       kInvalid, "empty descr"},
      {"descr not a string",
       MakeNpy(1, "{'descr': 4, 'fortran_order': False, 'shape': (1,), }", data24), kInvalid,
       "quoted descr"},
      {"non-ascii descr",
       MakeNpy(3, "{'descr': '<f\xc3\xa9', 'fortran_order': False, 'shape': (1,), }", data24),
       kInvalid, "unsupported descr"},
  };
  for (BadCase& c : ZeroWidthStringCases()) cases.push_back(std::move(c));
  return cases;
}

TEST(NpyParseTest, MalformedInputsAreErrors) {
  for (const BadCase& c : BadCases()) {
    absl::StatusOr<Tensor> t = ParseNpy(AsBytes(c.bytes));
    ASSERT_FALSE(t.ok()) << c.name;
    EXPECT_EQ(t.status().code(), c.code) << c.name << ": " << t.status();
    EXPECT_TRUE(absl::string_view(t.status().message()).find(c.message) != absl::string_view::npos)
        << c.name << ": '" << t.status().message() << "' lacks '" << c.message << "'";
  }
}

TEST(NpyParseTest, MalformedFilesAreErrorsNamingThePath) {
  int i = 0;
  for (const BadCase& c : BadCases()) {
    const std::string path = TempPath(absl::StrCat("bad", i++, ".npy"));
    ASSERT_TRUE(schema::WriteStringToFile(path, c.bytes).ok());
    bool zero_copy = true;
    absl::StatusOr<Tensor> t = LoadNpy(path, &zero_copy);
    ASSERT_FALSE(t.ok()) << c.name;
    EXPECT_FALSE(zero_copy) << c.name;
    EXPECT_EQ(t.status().code(), c.code) << c.name << ": " << t.status();
    EXPECT_TRUE(absl::StartsWith(t.status().message(), path)) << t.status();
    std::remove(path.c_str());
  }
}

// Every prefix of a valid file is an error (except the complete file); none reads past the end.
TEST(NpyParseTest, EveryTruncationIsAnError) {
  for (const char* name : {"f4.npy", "v2_f4.npy", "v3_i2.npy", "scalar_f8.npy"}) {
    absl::StatusOr<std::string> file = schema::ReadFileToString(TestdataPath(name));
    ASSERT_TRUE(file.ok());
    for (size_t n = 0; n < file->size(); ++n) {
      // Copied so that AddressSanitizer sees the end of the buffer.
      const std::vector<uint8_t> prefix(file->begin(), file->begin() + n);
      EXPECT_FALSE(ParseNpy(prefix).ok()) << name << " cut to " << n << " bytes";
    }
    EXPECT_TRUE(ParseNpy(AsBytes(*file)).ok()) << name;
  }
}

// The fuzzer's corpus, through the fuzz target's logic in every build: each file parses, and
// survives an encode/parse round trip unchanged.
TEST(NpyParseTest, FuzzCorpusRoundTrips) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("tools/npy/fuzz_corpus")) {
    SCOPED_TRACE(e.path().string());
    absl::StatusOr<std::string> file = schema::ReadFileToString(e.path().string());
    ASSERT_TRUE(file.ok()) << file.status();
    const std::vector<uint8_t> bytes(file->begin(), file->end());
    absl::StatusOr<Tensor> t = ParseNpy(bytes);
    ASSERT_TRUE(t.ok()) << t.status();
    absl::StatusOr<std::string> encoded = EncodeNpy(*t);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    absl::StatusOr<Tensor> back = ParseNpy(AsBytes(*encoded));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->dtype(), t->dtype());
    EXPECT_EQ(back->dims(), t->dims());
    ASSERT_EQ(back->nbytes(), t->nbytes());
    if (t->dtype() == DType::kString) {
      EXPECT_EQ(StringValues(*back), StringValues(*t));
    } else if (t->nbytes() > 0) {
      EXPECT_EQ(std::memcmp(back->raw_data(), t->raw_data(), t->nbytes()), 0);
    }
    ++n;
  }
  EXPECT_GE(n, 9);
}

}  // namespace
}  // namespace dynvm::npy
