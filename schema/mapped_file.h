// Read-only bytes of an executable or weights file: an mmap of a file, a copy of a file in
// anonymous memory advised into 2 MB pages (ReadIntoHugePages; parts of it may be left as the
// file's mapping inside the same region), or a buffer owned in memory (tests, fuzzers, files
// produced in-process).
//
// Thread safety: immutable after creation; safe to share.
#ifndef DYNVM_SCHEMA_MAPPED_FILE_H_
#define DYNVM_SCHEMA_MAPPED_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dynvm::schema {

// Bytes [begin, end) of a file.
struct FileRange {
  uint64_t begin = 0;
  uint64_t end = 0;
};

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
  //
  // `file_backed`: ranges read sparsely (an embedding table a token gathers one row of), left as
  // the file's read-only mapping (mmap MAP_FIXED over the region) instead of copied: every byte
  // keeps its address base + offset in the one region, the untouched pages of those ranges never
  // become resident. Only the whole 4 KB pages inside a range are left mapped; its partial pages
  // at the edges are copied (FileBackedPages says which).
  // Errors: the file cannot be opened, read or mapped, or the memory cannot be allocated (naming
  // the file and the size).
  static absl::StatusOr<std::shared_ptr<const MappedFile>> ReadIntoHugePages(
      const std::string& path, absl::Span<const FileRange> file_backed = {});
  // The whole pages of `ranges` within a file of `file_size` bytes, sorted and merged: what
  // ReadIntoHugePages leaves mapped.
  static std::vector<FileRange> FileBackedPages(absl::Span<const FileRange> ranges,
                                                uint64_t file_size);
  // Copies `bytes` into a 64-byte aligned buffer owned by the result.
  static std::shared_ptr<const MappedFile> FromBytes(absl::Span<const uint8_t> bytes);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  absl::Span<const uint8_t> bytes() const { return {data_, size_}; }
  // A hint that `range` (within bytes()) is not needed now: a mapped file's pages there leave
  // this process's resident memory (madvise MADV_DONTNEED), and are read from the file again if
  // touched; the bytes do not change. Does nothing for a buffer in memory or a copy in huge
  // pages, including its file-backed ranges (MADV_DONTNEED would zero anonymous memory; nothing
  // drops pages of a copy's file-backed ranges).
  void DropPages(absl::Span<const uint8_t> range) const;
  const std::string& path() const { return path_; }
  // Whether bytes() is a ReadIntoHugePages copy.
  bool in_huge_pages() const { return kind_ == Kind::kAnonymous; }
  // Bytes of the file held in private memory (a copy, or a buffer in memory), and bytes read
  // through the file's mapping (a mapped file; the file-backed ranges of a copy). They sum to
  // bytes().size().
  uint64_t copied_bytes() const { return size_ - file_backed_bytes(); }
  uint64_t file_backed_bytes() const;
  // A copy's file-backed ranges (offsets in the file; whole pages).
  const std::vector<FileRange>& file_backed() const { return file_backed_; }

  static constexpr size_t kHugePageBytes = size_t{2} << 20;

 private:
  enum class Kind { kHeap, kMapped, kAnonymous };
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapping_size_ = 0;  // kAnonymous: the bytes mapped at data_ (whole 2 MB pages)
  Kind kind_ = Kind::kHeap;
  std::string path_;
  std::vector<FileRange> file_backed_;  // kAnonymous: the ranges mapped from the file
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
