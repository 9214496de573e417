// The semantics of the VM's non-trivial instructions as small functions, so the interpreter
// loop only decodes, calls and advances. Each checks what docs/isa.md lists as run-time checks.
#ifndef DYNVM_VM_OPS_H_
#define DYNVM_VM_OPS_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "allocator/allocator.h"
#include "kernels/kernel.h"
#include "kernels/tensor.h"

namespace dynvm::ops {

// Every function taking a DeviceContext reaches tensors on that device through it (nullptr:
// host tensors only; a device tensor then gives FailedPrecondition).

// dst[...] := src[...]. Same dtype and dims (checked); any strides; dst writable. Between the
// host and a device, or within a device, through `device` (docs/cuda.md).
absl::Status Copy(const Tensor& src, Tensor& dst, DeviceContext* device = nullptr);

// Element `index` of `t` in row-major order, converted. Bounds-checked. On a device tensor the
// element is copied to the host: the sync point of read_i/read_f/read_b.
absl::StatusOr<int64_t> ReadInt(const Tensor& t, int64_t index, DeviceContext* device = nullptr);
absl::StatusOr<double> ReadFloat(const Tensor& t, int64_t index, DeviceContext* device = nullptr);
absl::StatusOr<bool> ReadBool(const Tensor& t, int64_t index, DeviceContext* device = nullptr);
// t.flat[index] := v converted to t's dtype (from an i64, f64 or bool scalar register).
absl::Status WriteInt(Tensor& t, int64_t index, int64_t v, DeviceContext* device = nullptr);
absl::Status WriteFloat(Tensor& t, int64_t index, double v, DeviceContext* device = nullptr);

// alloc_tensor: a contiguous view of `storage` at `offset` bytes, a multiple of the element size.
absl::StatusOr<Tensor> ViewOf(const StorageRef& storage, int64_t offset, DType dtype,
                              absl::Span<const int64_t> dims);
// reshape: `src` with new dims of the same element count. A strided `src` only when the new dims
// insert or remove extent-1 dimensions (its other strides are kept); anything else is an error.
absl::StatusOr<Tensor> Reshape(const Tensor& src, absl::Span<const int64_t> dims);
// view: a strided view of src's storage at element offset `offset` from src's first element.
absl::StatusOr<Tensor> View(const Tensor& src, int64_t offset, absl::Span<const int64_t> dims,
                            absl::Span<const int64_t> strides);

// alloc_growable: a tensor with `dims` whose storage has room for `capacity` along `axis`.
// The storage holds `keep_alive` (the allocator's owner), so the tensor may outlive the VM.
absl::StatusOr<Tensor> AllocGrowable(Allocator& allocator, DType dtype, int axis, int64_t capacity,
                                     absl::Span<const int64_t> dims,
                                     std::shared_ptr<Allocator> keep_alive = nullptr);
// append: dst := concat(dst, src) along axis; in place when dst ends at its storage's
// frontier with room left, otherwise into a new storage of twice the needed capacity, from
// `allocator` (the pool of dst's device).
absl::Status Append(Allocator& allocator, Tensor& dst, const Tensor& src, int axis,
                    std::shared_ptr<Allocator> keep_alive = nullptr,
                    DeviceContext* device = nullptr);
// extend: dst := dst lengthened to `length` along axis (>= its extent there) over the same
// growable storage, the new rows left as they are for a kernel to write (an attention
// operator's present KV cache written in place over its past); in place when dst ends at its
// storage's frontier with room left, otherwise dst's rows are copied into a new storage of
// twice the needed capacity, as append does.
absl::Status Extend(Allocator& allocator, Tensor& dst, int axis, int64_t length,
                    std::shared_ptr<Allocator> keep_alive = nullptr,
                    DeviceContext* device = nullptr);

}  // namespace dynvm::ops

#endif  // DYNVM_VM_OPS_H_
