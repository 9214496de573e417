#include "kernels/strings.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "allocator/heap_allocator.h"
#include "common/status_macros.h"
#include "common/utf8.h"

namespace dynvm {

absl::Status ValidateStrings(const Tensor& t, absl::string_view what) {
  if (t.dtype() != DType::kString) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a string tensor"));
  }
  if (t.device() != Device::kCPU) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": string tensors live on the CPU"));
  }
  const StringRef* refs = t.data<StringRef>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const StringRef& s = refs[t.ElementOffset(i)];
    if (s.size < 0 || (s.size > 0 && s.data == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": string element ", i, " has an invalid pointer or size ", s.size));
    }
    if (int64_t bad = InvalidUtf8Offset(ToView(s)); bad >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": string element ", i, " is not valid UTF-8 (byte ", bad, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> MakeStringTensor(Allocator& allocator, std::shared_ptr<Allocator> keep_alive,
                                        absl::Span<const int64_t> dims,
                                        const std::function<absl::string_view(int64_t)>& get) {
  if (dims.size() > Tensor::kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", dims.size(), " exceeds ", Tensor::kMaxRank));
  }
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) {
      return absl::InvalidArgumentError("invalid string tensor shape");
    }
  }
  int64_t bytes;
  if (__builtin_mul_overflow(n, int64_t{sizeof(StringRef)}, &bytes)) {
    return absl::InvalidArgumentError("string tensor too large");
  }
  const int64_t table = bytes;
  for (int64_t i = 0; i < n; ++i) {
    if (__builtin_add_overflow(bytes, static_cast<int64_t>(get(i).size()), &bytes)) {
      return absl::InvalidArgumentError("string tensor too large");
    }
  }
  DYNVM_ASSIGN_OR_RETURN(
      StorageRef storage,
      Storage::Allocate(allocator, static_cast<size_t>(bytes), std::move(keep_alive)));
  auto* refs = reinterpret_cast<StringRef*>(storage->data());
  char* arena = reinterpret_cast<char*>(storage->data() + table);
  for (int64_t i = 0; i < n; ++i) {
    const absl::string_view s = get(i);
    if (!s.empty()) std::memcpy(arena, s.data(), s.size());
    refs[i] = {arena, static_cast<int64_t>(s.size())};
    arena += s.size();
  }
  return Tensor::View(std::move(storage), 0, DType::kString, dims);
}

absl::StatusOr<Tensor> CopyStrings(Allocator& allocator, std::shared_ptr<Allocator> keep_alive,
                                   const Tensor& src) {
  return MakeStringTensor(allocator, std::move(keep_alive), src.dims(),
                          [&](int64_t i) { return StringAt(src, i); });
}

absl::StatusOr<Tensor> StringTensor(absl::Span<const int64_t> dims,
                                    const std::vector<std::string>& values) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  if (n != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("StringTensor: ", values.size(), " values for ", n, " elements"));
  }
  return MakeStringTensor(HeapAllocator::Get(), nullptr, dims,
                          [&](int64_t i) { return absl::string_view(values[i]); });
}

}  // namespace dynvm
