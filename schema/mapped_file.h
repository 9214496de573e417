// Read-only bytes of an executable or weights file: an mmap of a file, a copy of a file in
// anonymous memory advised into 2 MB pages (ReadIntoHugePages), or a buffer owned in memory
// (tests, fuzzers, files produced in-process).
//
// Thread safety: immutable after creation; safe to share.
#ifndef DYNVM_SCHEMA_MAPPED_FILE_H_
#define DYNVM_SCHEMA_MAPPED_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dynvm::schema {

class MappedFile {
 public:
  // Maps `path` read-only. Pages are read from disk only when touched.
  static absl::StatusOr<std::shared_ptr<const MappedFile>> Open(const std::string& path);
  // Reads `path` (pread, not through a mapping) into anonymous memory that starts on a 2 MB
  // boundary and was advised MADV_HUGEPAGE before it was touched, so that where transparent huge
  // pages are `always` or `madvise` the kernel backs it with 2 MB pages (fewer TLB misses: the
  // bytes stream faster than through a file mapping's 4 KB pages). Where the advice fails or THP
  // is `never` the copy is in ordinary pages: never an error because of THP. Costs a read of the
  // whole file at once and private memory (no page cache shared with other processes).
  // Errors: the file cannot be opened or read, or the memory cannot be allocated (naming the
  // file and the size).
  static absl::StatusOr<std::shared_ptr<const MappedFile>> ReadIntoHugePages(
      const std::string& path);
  // Copies `bytes` into a 64-byte aligned buffer owned by the result.
  static std::shared_ptr<const MappedFile> FromBytes(absl::Span<const uint8_t> bytes);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  absl::Span<const uint8_t> bytes() const { return {data_, size_}; }
  // A hint that `range` (within bytes()) is not needed now: a mapped file's pages there leave
  // this process's resident memory (madvise MADV_DONTNEED), and are read from the file again if
  // touched; the bytes do not change. Does nothing for a buffer in memory or a copy in huge
  // pages (MADV_DONTNEED would zero anonymous memory).
  void DropPages(absl::Span<const uint8_t> range) const;
  const std::string& path() const { return path_; }
  // Whether bytes() is a ReadIntoHugePages copy.
  bool in_huge_pages() const { return kind_ == Kind::kAnonymous; }

  static constexpr size_t kHugePageBytes = size_t{2} << 20;

 private:
  enum class Kind { kHeap, kMapped, kAnonymous };
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapping_size_ = 0;  // kAnonymous: the bytes mapped at data_ (whole 2 MB pages)
  Kind kind_ = Kind::kHeap;
  std::string path_;
};

// The text of /sys/kernel/mm/transparent_hugepage/enabled ("always [madvise] never"), without
// the newline; "" where it cannot be read (no THP support).
std::string TransparentHugePagesSetting();
// MemAvailable of /proc/meminfo in bytes; 0 where it cannot be read.
uint64_t MemAvailableBytes();

absl::StatusOr<std::string> ReadFileToString(const std::string& path);
absl::Status WriteStringToFile(const std::string& path, absl::string_view data);

}  // namespace dynvm::schema

#endif  // DYNVM_SCHEMA_MAPPED_FILE_H_
