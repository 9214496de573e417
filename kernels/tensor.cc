#include "kernels/tensor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allocator/heap_allocator.h"
#include "common/status_macros.h"

namespace dynvm {

absl::StatusOr<int64_t> CheckedNumel(absl::Span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("negative dimension ", d));
    if (__builtin_mul_overflow(n, d, &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("element count of ", DimsString(dims), " overflows 64 bits"));
    }
  }
  return n;
}

void ContiguousStrides(absl::Span<const int64_t> dims, int64_t* strides) {
  // Saturates instead of overflowing: an empty tensor may have huge other dims, and its
  // strides are never used to address memory.
  int64_t s = 1;
  for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    if (__builtin_mul_overflow(s, std::max<int64_t>(dims[i], 1), &s)) s = INT64_MAX;
  }
}

std::string DimsString(absl::Span<const int64_t> dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

absl::StatusOr<Tensor> Tensor::Allocate(Allocator& allocator, DType dtype,
                                        absl::Span<const int64_t> dims,
                                        std::shared_ptr<Allocator> keep_alive) {
  if (dims.size() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", dims.size(), " exceeds ", kMaxRank));
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t n, CheckedNumel(dims));
  int64_t bytes;
  if (__builtin_mul_overflow(n, DTypeSize(dtype), &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte size of ", DimsString(dims), " overflows"));
  }
  DYNVM_ASSIGN_OR_RETURN(StorageRef s, Storage::Allocate(allocator, static_cast<size_t>(bytes),
                                                         std::move(keep_alive)));
  Tensor t;
  t.storage_ = std::move(s);
  t.data_ = t.storage_->data();
  t.dtype_ = dtype;
  t.SetContiguousDims(dims);
  // String elements are pointers: a fresh string tensor holds empty strings, never garbage.
  if (dtype == DType::kString && t.device() == Device::kCPU && bytes > 0) {
    std::memset(t.data_, 0, static_cast<size_t>(bytes));
  }
  return t;
}

absl::StatusOr<Tensor> Tensor::Empty(DType dtype, absl::Span<const int64_t> dims) {
  return Allocate(HeapAllocator::Get(), dtype, dims);
}

Tensor Tensor::Scalar(float v) {
  Tensor t = *Empty(DType::kF32, {});
  *t.data<float>() = v;
  return t;
}

Tensor Tensor::ScalarI64(int64_t v) {
  Tensor t = *Empty(DType::kI64, {});
  *t.data<int64_t>() = v;
  return t;
}

absl::StatusOr<Tensor> Tensor::View(StorageRef storage, int64_t byte_offset, DType dtype,
                                    absl::Span<const int64_t> dims,
                                    absl::Span<const int64_t> strides) {
  if (!storage) return absl::InvalidArgumentError("view of an empty storage");
  if (dims.size() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", dims.size(), " exceeds ", kMaxRank));
  }
  if (!strides.empty() && strides.size() != dims.size()) {
    return absl::InvalidArgumentError("view: dims and strides differ in length");
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t n, CheckedNumel(dims));
  const int64_t esize = DTypeSize(dtype);
  const int64_t size = static_cast<int64_t>(storage->size());
  if (byte_offset < 0 || byte_offset > size) {
    return absl::OutOfRangeError(
        absl::StrCat("view offset ", byte_offset, " outside a storage of ", size, " bytes"));
  }
  int64_t contiguous[kMaxRank];
  if (strides.empty()) {
    ContiguousStrides(dims, contiguous);
    strides = absl::Span<const int64_t>(contiguous, dims.size());
  }
  if (n > 0) {
    // The lowest and highest element offsets the view can reach.
    int64_t lo = 0, hi = 0;
    for (size_t i = 0; i < dims.size(); ++i) {
      int64_t reach;
      if (__builtin_mul_overflow(dims[i] - 1, strides[i], &reach)) {
        return absl::OutOfRangeError("view extent overflows");
      }
      if (reach < 0) {
        if (__builtin_add_overflow(lo, reach, &lo))
          return absl::OutOfRangeError("view extent overflows");
      } else if (__builtin_add_overflow(hi, reach, &hi)) {
        return absl::OutOfRangeError("view extent overflows");
      }
    }
    int64_t lo_bytes, hi_bytes;
    if (__builtin_mul_overflow(lo, esize, &lo_bytes) ||
        __builtin_mul_overflow(hi + 1, esize, &hi_bytes) ||
        __builtin_add_overflow(hi_bytes, byte_offset, &hi_bytes)) {
      return absl::OutOfRangeError("view extent overflows");
    }
    if (byte_offset + lo_bytes < 0 || hi_bytes > size) {
      return absl::OutOfRangeError(absl::StrCat("view ", DTypeName(dtype), DimsString(dims),
                                                " at byte offset ", byte_offset,
                                                " does not fit in a storage of ", size, " bytes"));
    }
  }
  Tensor t;
  t.storage_ = std::move(storage);
  t.data_ = t.storage_->data() + byte_offset;
  t.dtype_ = dtype;
  t.SetView(dims, strides);
  return t;
}

void Tensor::SetContiguousDims(absl::Span<const int64_t> dims) {
  rank_ = static_cast<int8_t>(dims.size());
  std::copy(dims.begin(), dims.end(), dims_);
  ContiguousStrides(dims, strides_);
  int64_t n = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(n, d, &n)) n = INT64_MAX;
  }
  numel_ = n;
  contiguous_ = true;
}

void Tensor::SetView(absl::Span<const int64_t> dims, absl::Span<const int64_t> strides) {
  rank_ = static_cast<int8_t>(dims.size());
  std::copy(dims.begin(), dims.end(), dims_);
  std::copy(strides.begin(), strides.end(), strides_);
  UpdateDerived();
}

void Tensor::UpdateDerived() {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) {
    if (__builtin_mul_overflow(n, dims_[i], &n)) n = INT64_MAX;
  }
  numel_ = n;
  // Contiguous when strides are row-major for every dim larger than 1.
  int64_t expect = 1;
  contiguous_ = true;
  for (int i = rank_ - 1; i >= 0; --i) {
    if (dims_[i] != 1 && strides_[i] != expect) {
      contiguous_ = false;
      break;
    }
    if (__builtin_mul_overflow(expect, dims_[i], &expect)) expect = INT64_MAX;
  }
  if (n == 0) contiguous_ = true;
}

std::string Tensor::ShapeString() const { return DimsString(dims()); }

std::string Tensor::DebugString() const { return absl::StrCat(DTypeName(dtype_), ShapeString()); }

}  // namespace dynvm
