#include "schema/mapped_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dynvm::schema {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/mapped_file_test_", ::getpid(), "_", name);
}

// Writes `size` bytes of a pattern that differs at every offset (mod 251) to a new file.
std::string WritePattern(const std::string& name, size_t size, std::vector<uint8_t>* want) {
  want->resize(size);
  for (size_t i = 0; i < size; ++i) (*want)[i] = static_cast<uint8_t>((i * 7 + i / 251) % 251);
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(want->data()), static_cast<std::streamsize>(size));
  out.close();
  return path;
}

TEST(MappedFileTest, HugePageCopyHoldsTheFilesBytesFromA2MbBoundary) {
  // Empty, smaller than a page, odd-sized, one byte over 2 MB, several 2 MB pages and a tail.
  for (size_t size :
       {size_t{0}, size_t{1}, size_t{4097}, size_t{(2 << 20) + 1}, size_t{(5 << 20) + 333}}) {
    SCOPED_TRACE(size);
    std::vector<uint8_t> want;
    const std::string path = WritePattern(absl::StrCat(size), size, &want);
    absl::StatusOr<std::shared_ptr<const MappedFile>> f = MappedFile::ReadIntoHugePages(path);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_TRUE((*f)->in_huge_pages());
    EXPECT_EQ((*f)->path(), path);
    ASSERT_EQ((*f)->bytes().size(), size);
    if (size > 0) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>((*f)->bytes().data()) % (2 << 20), 0u);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), (*f)->bytes().begin()));
    }
    // The same bytes as the mapping of the file.
    absl::StatusOr<std::shared_ptr<const MappedFile>> m = MappedFile::Open(path);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_FALSE((*m)->in_huge_pages());
    EXPECT_TRUE(std::equal((*m)->bytes().begin(), (*m)->bytes().end(), (*f)->bytes().begin(),
                           (*f)->bytes().end()));
    std::remove(path.c_str());
  }
}

TEST(MappedFileTest, DropPagesLeavesAHugePageCopysBytes) {
  std::vector<uint8_t> want;
  const std::string path = WritePattern("drop", (4 << 20) + 5, &want);
  absl::StatusOr<std::shared_ptr<const MappedFile>> f = MappedFile::ReadIntoHugePages(path);
  ASSERT_TRUE(f.ok()) << f.status();
  (*f)->DropPages((*f)->bytes());  // MADV_DONTNEED here would zero anonymous memory
  EXPECT_TRUE(std::equal(want.begin(), want.end(), (*f)->bytes().begin()));
  std::remove(path.c_str());
}

TEST(MappedFileTest, HugePageCopyOfAMissingFileNamesIt) {
  const std::string path = TempPath("no_such_file.dvw");
  absl::StatusOr<std::shared_ptr<const MappedFile>> f = MappedFile::ReadIntoHugePages(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(f.status().message(), HasSubstr(path));
}

TEST(MappedFileTest, HugePageCopyOfADirectoryIsRefused) {
  absl::StatusOr<std::shared_ptr<const MappedFile>> f =
      MappedFile::ReadIntoHugePages(::testing::TempDir());
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("not a regular file"));
}

// Where THP is enabled (always or madvise), the copy is backed by huge pages: AnonHugePages of
// its mapping in /proc/self/smaps is more than 0. Skipped where THP is off.
TEST(MappedFileTest, HugePageCopyIsInHugePagesWhereThpIsOn) {
  const std::string thp = TransparentHugePagesSetting();
  if (thp.find("[always]") == std::string::npos && thp.find("[madvise]") == std::string::npos) {
    GTEST_SKIP() << "transparent huge pages: '" << thp << "'";
  }
  std::vector<uint8_t> want;
  const std::string path = WritePattern("thp", 8 << 20, &want);
  absl::StatusOr<std::shared_ptr<const MappedFile>> f = MappedFile::ReadIntoHugePages(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const uintptr_t begin = reinterpret_cast<uintptr_t>((*f)->bytes().data());
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_range = false;
  int64_t huge_kb = -1;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {
      in_range = lo <= begin && begin < hi;
      continue;
    }
    long kb = 0;
    if (in_range && std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kb) == 1) huge_kb = kb;
  }
  EXPECT_GT(huge_kb, 0) << "THP '" << thp << "'";
  std::remove(path.c_str());
}

TEST(MappedFileTest, TransparentHugePagesSettingIsTheSysfsLine) {
  const std::string thp = TransparentHugePagesSetting();
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  if (!in) {
    EXPECT_EQ(thp, "");
    return;
  }
  EXPECT_THAT(thp, HasSubstr("["));
  EXPECT_EQ(thp.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace dynvm::schema
