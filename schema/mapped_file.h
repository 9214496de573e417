// Read-only bytes of an executable or weights file: an mmap of a file, or a buffer owned in
// memory (tests, fuzzers, files produced in-process).
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
  // Copies `bytes` into a 64-byte aligned buffer owned by the result.
  static std::shared_ptr<const MappedFile> FromBytes(absl::Span<const uint8_t> bytes);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  absl::Span<const uint8_t> bytes() const { return {data_, size_}; }
  // A hint that `range` (within bytes()) is not needed now: a mapped file's pages there leave
  // this process's resident memory (madvise MADV_DONTNEED), and are read from the file again if
  // touched; the bytes do not change. Does nothing for a buffer in memory.
  void DropPages(absl::Span<const uint8_t> range) const;
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::string path_;
};

absl::StatusOr<std::string> ReadFileToString(const std::string& path);
absl::Status WriteStringToFile(const std::string& path, absl::string_view data);

}  // namespace dynvm::schema

#endif  // DYNVM_SCHEMA_MAPPED_FILE_H_
