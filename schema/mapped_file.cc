#include "schema/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace dynvm::schema {
namespace {

// Opens `path` for reading (*fd) and returns its size; refuses anything but a regular file.
absl::StatusOr<size_t> OpenRegularFile(const std::string& path, int* fd) {
  *fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (*fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(*fd);
    *fd = -1;
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  return static_cast<size_t>(st.st_size);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const MappedFile>> MappedFile::Open(const std::string& path) {
  int fd = -1;
  DYNVM_ASSIGN_OR_RETURN(const size_t size, OpenRegularFile(path, &fd));
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = size;
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot map ", path, ": ", std::strerror(err)));
    }
    f->data_ = static_cast<const uint8_t*>(p);
    f->kind_ = Kind::kMapped;
  }
  ::close(fd);
  return std::shared_ptr<const MappedFile>(std::move(f));
}

namespace {

// Reads bytes [begin, end) of `fd` into out + begin.
absl::Status ReadRange(int fd, const std::string& path, uint8_t* out, uint64_t begin,
                       uint64_t end) {
  uint64_t done = begin;
  while (done < end) {
    const ssize_t n = ::pread(fd, out + done, end - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::DataLossError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat("cannot read ", path, ": it ended at byte ", done,
                                              " of ", end, " (changed while read)"));
    }
    done += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

// Maps the file's `ranges` (whole pages) over the region at `data`, then reads the rest.
absl::Status FillRegion(int fd, const std::string& path, uint8_t* data, uint64_t size,
                        absl::Span<const FileRange> ranges) {
  for (const FileRange& r : ranges) {
    void* p = ::mmap(data + r.begin, r.end - r.begin, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd,
                     static_cast<off_t>(r.begin));
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot map bytes [", r.begin, ", ", r.end,
                                                       ") of ", path, ": ", std::strerror(errno)));
    }
  }
  uint64_t at = 0;
  for (const FileRange& r : ranges) {
    DYNVM_RETURN_IF_ERROR(ReadRange(fd, path, data, at, r.begin));
    at = r.end;
  }
  return ReadRange(fd, path, data, at, size);
}

}  // namespace

std::vector<FileRange> MappedFile::FileBackedPages(absl::Span<const FileRange> ranges,
                                                   uint64_t file_size) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  std::vector<FileRange> pages;
  for (const FileRange& r : ranges) {
    const uint64_t end = std::min(r.end, file_size);
    if (r.begin >= end) continue;
    const FileRange inner{(r.begin + page - 1) / page * page, end / page * page};
    if (inner.end > inner.begin) pages.push_back(inner);
  }
  std::sort(pages.begin(), pages.end(),
            [](const FileRange& a, const FileRange& b) { return a.begin < b.begin; });
  std::vector<FileRange> merged;
  for (const FileRange& r : pages) {
    if (!merged.empty() && r.begin <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, r.end);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

uint64_t MappedFile::file_backed_bytes() const {
  if (kind_ == Kind::kMapped) return size_;
  uint64_t n = 0;
  for (const FileRange& r : file_backed_) n += r.end - r.begin;
  return n;
}

absl::StatusOr<std::shared_ptr<const MappedFile>> MappedFile::ReadIntoHugePages(
    const std::string& path, absl::Span<const FileRange> file_backed) {
  int fd = -1;
  DYNVM_ASSIGN_OR_RETURN(const size_t size, OpenRegularFile(path, &fd));
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = size;
  f->kind_ = Kind::kAnonymous;
  if (f->size_ == 0) {
    ::close(fd);
    return std::shared_ptr<const MappedFile>(std::move(f));
  }
  // Whole 2 MB pages from a 2 MB boundary: map one page more, then unmap the ends.
  const size_t len = (f->size_ + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = ::mmap(nullptr, len + kHugePageBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", f->size_,
                                                     " bytes of memory for a copy of ", path, ": ",
                                                     std::strerror(err)));
  }
  const uintptr_t raw = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (raw + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > raw) ::munmap(p, aligned - raw);
  const uintptr_t tail = raw + len + kHugePageBytes - (aligned + len);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + len), tail);
  uint8_t* data = reinterpret_cast<uint8_t*>(aligned);
  // Before the first touch, so the faults allocate 2 MB pages. Failure (THP off, an old kernel)
  // leaves ordinary pages.
  (void)::madvise(data, len, MADV_HUGEPAGE);
  f->data_ = data;
  f->mapping_size_ = len;
  f->file_backed_ = FileBackedPages(file_backed, f->size_);
  absl::Status read = FillRegion(fd, path, data, f->size_, f->file_backed_);
  ::close(fd);
  if (!read.ok()) return read;  // f's destructor unmaps the region, file-backed parts included
  ::mprotect(data, len, PROT_READ);
  return std::shared_ptr<const MappedFile>(std::move(f));
}

std::shared_ptr<const MappedFile> MappedFile::FromBytes(absl::Span<const uint8_t> bytes) {
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->size_ = bytes.size();
  void* p = std::aligned_alloc(64, (bytes.size() + 63) / 64 * 64 + 64);
  if (!bytes.empty()) std::memcpy(p, bytes.data(), bytes.size());
  f->data_ = static_cast<const uint8_t*>(p);
  f->path_ = "<memory>";
  return f;
}

void MappedFile::DropPages(absl::Span<const uint8_t> range) const {
  if (kind_ != Kind::kMapped || range.empty() || range.data() < data_ ||
      range.data() + range.size() > data_ + size_)
    return;
  // Whole pages inside the range only.
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(range.data()) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(range.data()) + range.size()) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (kind_ == Kind::kMapped) {
    ::munmap(const_cast<uint8_t*>(data_), size_);
  } else if (kind_ == Kind::kAnonymous) {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), mapping_size_);
  } else {
    std::free(const_cast<uint8_t*>(data_));
  }
}

std::string TransparentHugePagesSetting() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return line;
}

uint64_t MemAvailableBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t value = 0;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return value * 1024;  // the file counts kB
  }
  return 0;
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return ss.str();
}

absl::Status WriteStringToFile(const std::string& path, absl::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot create ", path));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace dynvm::schema
