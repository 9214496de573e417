// Public API. String tensors (docs/strings.md): a string tensor's elements are StringRefs
// (kernels/tensor.h) whose bytes are kept alive by the tensor's storage. Tensors made here hold
// their element table and their bytes in one storage from the given allocator (the VM's pool),
// so views of it (reshape, squeeze, a function output) keep the bytes alive, and dropping the
// last view frees both: nothing leaks when a run fails half-way.
#ifndef DYNVM_KERNELS_STRINGS_H_
#define DYNVM_KERNELS_STRINGS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "allocator/allocator.h"
#include "kernels/tensor.h"

namespace dynvm {

inline absl::string_view ToView(const StringRef& s) {
  return {s.data, static_cast<size_t>(s.size)};
}

// Element `linear` (row-major, any strides) of string tensor `t`.
inline absl::string_view StringAt(const Tensor& t, int64_t linear) {
  return ToView(t.data<StringRef>()[t.ElementOffset(linear)]);
}

// Checks every element of string tensor `t` (a caller's input): a non-negative size, a non-null
// pointer when the size is not zero, and valid UTF-8. InvalidArgument naming `what` and the
// element otherwise.
absl::Status ValidateStrings(const Tensor& t, absl::string_view what);

// A contiguous string tensor of `dims` whose element i is `get(i)` (called twice per element:
// once to size the storage, once to copy), in one storage from `allocator`.
absl::StatusOr<Tensor> MakeStringTensor(Allocator& allocator, std::shared_ptr<Allocator> keep_alive,
                                        absl::Span<const int64_t> dims,
                                        const std::function<absl::string_view(int64_t)>& get);

// A contiguous copy of string tensor `src` (any strides) with its own bytes.
absl::StatusOr<Tensor> CopyStrings(Allocator& allocator, std::shared_ptr<Allocator> keep_alive,
                                   const Tensor& src);

// A host string tensor over the process heap, for tests and tools.
absl::StatusOr<Tensor> StringTensor(absl::Span<const int64_t> dims,
                                    const std::vector<std::string>& values);

}  // namespace dynvm

#endif  // DYNVM_KERNELS_STRINGS_H_
