// Public API. A Tensor is a strided view into a Storage: dtype, dims, strides (in elements)
// and a data pointer inside the storage. Copying a Tensor copies the view, not the data, and
// keeps the storage alive.
//
// Thread safety: thread-compatible (const methods may be called concurrently).
#ifndef DYNVM_KERNELS_TENSOR_H_
#define DYNVM_KERNELS_TENSOR_H_

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "allocator/storage.h"
#include "common/dtype.h"

namespace dynvm {

// An element of a string tensor: bytes owned by the storage's string arena or a constant.
struct StringRef {
  const char* data;
  int64_t size;
};
static_assert(sizeof(StringRef) == 16);

class Tensor {
 public:
  static constexpr int kMaxRank = 8;

  Tensor() = default;

  // A contiguous tensor over fresh memory from `allocator` (contents uninitialized). Pass
  // `keep_alive` (the allocator's owner) when the tensor may outlive other references to the
  // allocator, e.g. a VM's pool whose tensors escape as outputs.
  static absl::StatusOr<Tensor> Allocate(Allocator& allocator, DType dtype,
                                         absl::Span<const int64_t> dims,
                                         std::shared_ptr<Allocator> keep_alive = nullptr);
  // A contiguous tensor on the CPU from the process heap, for host code and tests.
  static absl::StatusOr<Tensor> Empty(DType dtype, absl::Span<const int64_t> dims);
  static Tensor Scalar(float v);
  static Tensor ScalarI64(int64_t v);
  template <typename T>
  static absl::StatusOr<Tensor> FromVector(DType dtype, absl::Span<const int64_t> dims,
                                           absl::Span<const T> values);
  // A view over `storage` at `byte_offset`. Checks that the view lies inside the storage and
  // that the byte count does not overflow.
  static absl::StatusOr<Tensor> View(StorageRef storage, int64_t byte_offset, DType dtype,
                                     absl::Span<const int64_t> dims,
                                     absl::Span<const int64_t> strides = {});

  bool defined() const { return static_cast<bool>(storage_); }
  DType dtype() const { return dtype_; }
  int rank() const { return rank_; }
  absl::Span<const int64_t> dims() const { return {dims_, static_cast<size_t>(rank_)}; }
  absl::Span<const int64_t> strides() const { return {strides_, static_cast<size_t>(rank_)}; }
  int64_t dim(int i) const { return dims_[i]; }
  int64_t stride(int i) const { return strides_[i]; }
  int64_t numel() const { return numel_; }
  // The offset in elements (from data<T>()) of element `linear` in row-major order, whatever
  // the strides.
  int64_t ElementOffset(int64_t linear) const {
    int64_t offset = 0;
    for (int d = rank() - 1; d >= 0; --d) {
      const int64_t n = dim(d);
      offset += (linear % n) * stride(d);
      linear /= n;
    }
    return offset;
  }
  int64_t nbytes() const { return numel_ * DTypeSize(dtype_); }  // when contiguous
  bool is_contiguous() const { return contiguous_; }
  Device device() const { return storage_->device(); }
  const StorageRef& storage() const { return storage_; }
  int64_t byte_offset() const { return data_ - storage_->data(); }

  void* raw_data() const { return data_; }
  template <typename T>
  T* data() const {
    return reinterpret_cast<T*>(data_);
  }

  // Changes the dims of this view in place (same storage and offset, contiguous strides).
  // REQUIRES: the new extent fits in the storage (callers check).
  void SetContiguousDims(absl::Span<const int64_t> dims);
  // Sets dims and strides without checks. REQUIRES: the caller proved the view fits.
  void SetView(absl::Span<const int64_t> dims, absl::Span<const int64_t> strides);

  std::string DebugString() const;  // "f32[2,3]"
  std::string ShapeString() const;  // "[2,3]"

 private:
  void UpdateDerived();

  StorageRef storage_;
  uint8_t* data_ = nullptr;
  int64_t numel_ = 0;
  int64_t dims_[kMaxRank] = {};
  int64_t strides_[kMaxRank] = {};
  DType dtype_ = DType::kF32;
  int8_t rank_ = 0;
  bool contiguous_ = true;
};

// Product of dims, or an error when it overflows int64 or a dim is negative.
absl::StatusOr<int64_t> CheckedNumel(absl::Span<const int64_t> dims);
// Contiguous (row-major) strides for dims.
void ContiguousStrides(absl::Span<const int64_t> dims, int64_t* strides);
std::string DimsString(absl::Span<const int64_t> dims);

template <typename T>
absl::StatusOr<Tensor> Tensor::FromVector(DType dtype, absl::Span<const int64_t> dims,
                                          absl::Span<const T> values) {
  absl::StatusOr<Tensor> t = Empty(dtype, dims);
  if (!t.ok()) return t;
  if (static_cast<int64_t>(values.size()) != t->numel() ||
      sizeof(T) != static_cast<size_t>(DTypeSize(dtype))) {
    return absl::InvalidArgumentError("FromVector: value count or element size mismatch");
  }
  if (!values.empty()) std::memcpy(t->raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}

}  // namespace dynvm

#endif  // DYNVM_KERNELS_TENSOR_H_
