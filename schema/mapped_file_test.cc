#include "schema/mapped_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schema/mapped_file_testing.h"

namespace dynvm::schema {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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

TEST(MappedFileTest, FileBackedPagesAreTheWholePagesOfTheRanges) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  // Unaligned edges shrink to whole pages; less than a page inside is dropped; past the end is
  // clipped; overlapping and touching ranges merge; the order does not matter.
  const std::vector<FileRange> got = MappedFile::FileBackedPages({{10 * page + 1, 20 * page - 1},
                                                                  {page + 5, 2 * page + 3},
                                                                  {30 * page, 40 * page},
                                                                  {35 * page, 45 * page},
                                                                  {45 * page, 46 * page + 100},
                                                                  {60 * page, 70 * page}},
                                                                 50 * page + 7);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].begin, 11 * page);
  EXPECT_EQ(got[0].end, 19 * page);
  EXPECT_EQ(got[1].begin, 30 * page);
  EXPECT_EQ(got[1].end, 46 * page);
  EXPECT_TRUE(MappedFile::FileBackedPages({}, 100 * page).empty());
}

TEST(MappedFileTest, HugePageCopyLeavesFileBackedRangesInTheFilesMapping) {
  const size_t mb = size_t{1} << 20;
  const size_t size = 12 * mb + 333;
  std::vector<uint8_t> want;
  const std::string path = WritePattern("sparse", size, &want);
  // A table with unaligned edges in the middle, one that ends the file, one past its end.
  const std::vector<FileRange> sparse = {
      {3 * mb + 100, 7 * mb + 50}, {11 * mb, size}, {20 * mb, 21 * mb}};
  absl::StatusOr<std::shared_ptr<const MappedFile>> f = MappedFile::ReadIntoHugePages(path, sparse);
  ASSERT_TRUE(f.ok()) << f.status();
  const uint8_t* data = (*f)->bytes().data();
  ASSERT_EQ((*f)->bytes().size(), size);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % (2 << 20), 0u);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), (*f)->bytes().begin()));
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t mapped = (7 * mb - (3 * mb + page)) + mb;
  EXPECT_EQ((*f)->file_backed_bytes(), mapped);
  EXPECT_EQ((*f)->copied_bytes(), size - mapped);
  ASSERT_EQ((*f)->file_backed().size(), 2u);
  // The ranges' whole pages are the file's mapping, at their offsets in the one region; the
  // partial pages at their edges and the rest are the copy.
  const std::string name = absl::StrCat("mapped_file_test_", ::getpid(), "_sparse");
  for (size_t at : {3 * mb + page, 5 * mb, 7 * mb - 1, 11 * mb, 12 * mb - 1}) {
    EXPECT_THAT(MappingOf(data + at), HasSubstr(name)) << at;
  }
  for (size_t at : {size_t{0}, 3 * mb + 100, 7 * mb, 9 * mb, 12 * mb}) {
    EXPECT_THAT(MappingOf(data + at), Not(HasSubstr(name))) << at;
  }
  // Dropping pages changes no byte (the copy's are not dropped).
  (*f)->DropPages((*f)->bytes());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), (*f)->bytes().begin()));
  // Ranges of no whole page: all copied.
  absl::StatusOr<std::shared_ptr<const MappedFile>> g =
      MappedFile::ReadIntoHugePages(path, {{100, 200}});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->file_backed_bytes(), 0u);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), (*g)->bytes().begin()));
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
