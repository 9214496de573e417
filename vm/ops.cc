#include "vm/ops.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "common/status_macros.h"
#include "kernels/reference/data_movement.h"

namespace dynvm::ops {
namespace {

// Byte offset of element `index` (row-major) of a strided tensor.
int64_t ByteOffset(const Tensor& t, int64_t index) {
  return t.ElementOffset(index) * DTypeSize(t.dtype());
}

// A tensor on a device is reached through the VM's context for that device.
absl::Status CheckDevice(const Tensor& t, DeviceContext* device, absl::string_view what) {
  if (t.device() == Device::kCPU) return absl::OkStatus();
  if (device == nullptr || device->device() != t.device()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": a ", DeviceName(t.device()),
                     " tensor, but the VM has no context for that device"));
  }
  return absl::OkStatus();
}

absl::Status CheckIndex(const Tensor& t, int64_t index, absl::string_view what,
                        DeviceContext* device) {
  DYNVM_RETURN_IF_ERROR(CheckDevice(t, device, what));
  if (index < 0 || index >= t.numel()) {
    return absl::OutOfRangeError(
        absl::StrCat(what, ": index ", index, " out of range for ", t.DebugString()));
  }
  return absl::OkStatus();
}

// The bytes of element `index` (at most 8; strings are refused by the callers' dtype checks):
// read in place on the host, copied from a device (the sync point of read_*).
absl::Status LoadElement(const Tensor& t, int64_t index, uint8_t* buf, DeviceContext* device) {
  const uint8_t* p = static_cast<const uint8_t*>(t.raw_data()) + ByteOffset(t, index);
  const size_t n = static_cast<size_t>(std::min<int64_t>(DTypeSize(t.dtype()), 8));
  if (t.device() == Device::kCPU) {
    std::memcpy(buf, p, n);
    return absl::OkStatus();
  }
  return device->CopyToHost(buf, p, n);
}

absl::Status StoreElement(Tensor& t, int64_t index, const uint8_t* buf, DeviceContext* device) {
  uint8_t* p = static_cast<uint8_t*>(t.raw_data()) + ByteOffset(t, index);
  const size_t n = static_cast<size_t>(DTypeSize(t.dtype()));
  if (t.device() == Device::kCPU) {
    std::memcpy(p, buf, n);
    return absl::OkStatus();
  }
  return device->CopyFromHost(p, buf, n);
}

template <typename T>
double ToDouble(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(v);
  } else {
    return static_cast<double>(v);
  }
}

absl::StatusOr<double> AsDouble(DType dtype, const uint8_t* p) {
  switch (dtype) {
    case DType::kF32:
      return ToDouble<float>(p);
    case DType::kF64:
      return ToDouble<double>(p);
    case DType::kF16:
      return ToDouble<Half>(p);
    case DType::kBF16:
      return ToDouble<BFloat16>(p);
    case DType::kI8:
      return ToDouble<int8_t>(p);
    case DType::kI16:
      return ToDouble<int16_t>(p);
    case DType::kI32:
      return ToDouble<int32_t>(p);
    case DType::kI64:
      return ToDouble<int64_t>(p);
    case DType::kU8:
      return ToDouble<uint8_t>(p);
    case DType::kU16:
      return ToDouble<uint16_t>(p);
    case DType::kU32:
      return ToDouble<uint32_t>(p);
    case DType::kU64:
      return ToDouble<uint64_t>(p);
    case DType::kBool:
      return static_cast<double>(*p != 0);
    case DType::kString:
      break;
  }
  return absl::InvalidArgumentError("read of a string element into a scalar register");
}

absl::StatusOr<double> LoadAsDouble(const Tensor& t, int64_t index, DeviceContext* device) {
  if (t.dtype() == DType::kString) return AsDouble(t.dtype(), nullptr);
  uint8_t buf[8];
  DYNVM_RETURN_IF_ERROR(LoadElement(t, index, buf, device));
  return AsDouble(t.dtype(), buf);
}

int64_t SaturatingToInt(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

template <typename T>
void StoreAs(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

absl::Status CheckWritable(const Tensor& t, absl::string_view what) {
  if (!t.storage()->writable()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": destination is read-only (a constant or a caller's buffer)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Copy(const Tensor& src, Tensor& dst, DeviceContext* device) {
  if (src.dims() != dst.dims()) {
    return absl::InvalidArgumentError(
        absl::StrCat("copy: shapes differ: ", src.DebugString(), " -> ", dst.DebugString()));
  }
  if (src.dtype() != dst.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("copy: dtypes differ: ", src.DebugString(), " -> ", dst.DebugString()));
  }
  DYNVM_RETURN_IF_ERROR(CheckWritable(dst, "copy"));
  if (src.device() != Device::kCPU || dst.device() != Device::kCPU) {
    DYNVM_RETURN_IF_ERROR(CheckDevice(src, device, "copy"));
    DYNVM_RETURN_IF_ERROR(CheckDevice(dst, device, "copy"));
    return device->Copy(src, dst);
  }
  const int64_t esize = DTypeSize(src.dtype());
  if (src.is_contiguous() && dst.is_contiguous()) {
    if (src.numel() > 0)
      std::memmove(dst.raw_data(), src.raw_data(), static_cast<size_t>(src.numel() * esize));
    return absl::OkStatus();
  }
  if (src.numel() == 0) return absl::OkStatus();
  // Strided (a slice, a transpose, a view of a growable storage within its capacity): the dims
  // coalesced, each contiguous run moved at once.
  reference::CopyStrided(esize, src.dims(), src.raw_data(), src.strides(), dst.raw_data(),
                         dst.strides());
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ReadInt(const Tensor& t, int64_t index, DeviceContext* device) {
  DYNVM_RETURN_IF_ERROR(CheckIndex(t, index, "read_i", device));
  if (t.dtype() == DType::kI64 || t.dtype() == DType::kU64) {
    uint8_t buf[8];
    DYNVM_RETURN_IF_ERROR(LoadElement(t, index, buf, device));
    int64_t v;
    std::memcpy(&v, buf, 8);  // u64 wraps to i64
    return v;
  }
  DYNVM_ASSIGN_OR_RETURN(double d, LoadAsDouble(t, index, device));
  return SaturatingToInt(d);
}

absl::StatusOr<double> ReadFloat(const Tensor& t, int64_t index, DeviceContext* device) {
  DYNVM_RETURN_IF_ERROR(CheckIndex(t, index, "read_f", device));
  return LoadAsDouble(t, index, device);
}

absl::StatusOr<bool> ReadBool(const Tensor& t, int64_t index, DeviceContext* device) {
  DYNVM_RETURN_IF_ERROR(CheckIndex(t, index, "read_b", device));
  DYNVM_ASSIGN_OR_RETURN(double d, LoadAsDouble(t, index, device));
  return d != 0;
}

absl::Status WriteInt(Tensor& t, int64_t index, int64_t v, DeviceContext* device) {
  DYNVM_RETURN_IF_ERROR(CheckIndex(t, index, "write", device));
  DYNVM_RETURN_IF_ERROR(CheckWritable(t, "write"));
  uint8_t buf[8];
  switch (t.dtype()) {
    case DType::kI64:
      StoreAs<int64_t>(buf, v);
      break;
    case DType::kU64:
      StoreAs<uint64_t>(buf, static_cast<uint64_t>(v));
      break;
    case DType::kI32:
      StoreAs<int32_t>(buf, static_cast<int32_t>(v));
      break;
    case DType::kU32:
      StoreAs<uint32_t>(buf, static_cast<uint32_t>(v));
      break;
    case DType::kI16:
      StoreAs<int16_t>(buf, static_cast<int16_t>(v));
      break;
    case DType::kU16:
      StoreAs<uint16_t>(buf, static_cast<uint16_t>(v));
      break;
    case DType::kI8:
      StoreAs<int8_t>(buf, static_cast<int8_t>(v));
      break;
    case DType::kU8:
      StoreAs<uint8_t>(buf, static_cast<uint8_t>(v));
      break;
    case DType::kBool:
      StoreAs<uint8_t>(buf, v != 0);
      break;
    default:
      return WriteFloat(t, index, static_cast<double>(v), device);
  }
  return StoreElement(t, index, buf, device);
}

absl::Status WriteFloat(Tensor& t, int64_t index, double v, DeviceContext* device) {
  DYNVM_RETURN_IF_ERROR(CheckIndex(t, index, "write", device));
  DYNVM_RETURN_IF_ERROR(CheckWritable(t, "write"));
  uint8_t buf[8];
  switch (t.dtype()) {
    case DType::kF32:
      StoreAs<float>(buf, static_cast<float>(v));
      break;
    case DType::kF64:
      StoreAs<double>(buf, v);
      break;
    case DType::kF16:
      StoreAs<uint16_t>(buf, Half(static_cast<float>(v)).bits);
      break;
    case DType::kBF16:
      StoreAs<uint16_t>(buf, BFloat16(static_cast<float>(v)).bits);
      break;
    case DType::kString:
      return absl::InvalidArgumentError("write of a scalar into a string tensor");
    default:
      return WriteInt(t, index, SaturatingToInt(v), device);
  }
  return StoreElement(t, index, buf, device);
}

absl::StatusOr<Tensor> ViewOf(const StorageRef& storage, int64_t offset, DType dtype,
                              absl::Span<const int64_t> dims) {
  // Kernels access elements as typed values (and devices may require it): an offset that is
  // not a multiple of the element size would misalign every element.
  if (offset % DTypeSize(dtype) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("alloc_tensor byte offset ", offset,
                                                   " is not a multiple of the ", DTypeSize(dtype),
                                                   "-byte ", DTypeName(dtype), " element size"));
  }
  return Tensor::View(storage, offset, dtype, dims);
}

namespace {

// When `dims` are src's dimensions with only extent-1 dimensions inserted or removed (what an
// Unsqueeze or a Squeeze does), the strides that view src's elements as `dims`: the extents
// other than 1 keep theirs; an extent-1 dimension takes the stride a contiguous layout would
// give it over the dimensions after it (it is never stepped). False otherwise.
bool UnitDimStrides(const Tensor& src, absl::Span<const int64_t> dims, int64_t* strides) {
  if (dims.size() > static_cast<size_t>(Tensor::kMaxRank)) return false;
  const absl::Span<const int64_t> sd = src.dims();
  const absl::Span<const int64_t> ss = src.strides();
  int j = src.rank() - 1;
  int64_t inner = 1;  // the stride of an extent-1 dimension here
  for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
    if (dims[i] == 1) {
      strides[i] = inner;
      continue;
    }
    while (j >= 0 && sd[j] == 1) --j;
    if (j < 0 || sd[j] != dims[i]) return false;
    strides[i] = ss[j];
    inner = ss[j] * dims[i];
    --j;
  }
  while (j >= 0 && sd[j] == 1) --j;
  return j < 0;
}

}  // namespace

absl::StatusOr<Tensor> Reshape(const Tensor& src, absl::Span<const int64_t> dims) {
  DYNVM_ASSIGN_OR_RETURN(int64_t n, CheckedNumel(dims));
  if (n != src.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("reshape of ", src.DebugString(), " to ",
                                                   DimsString(dims), ": element counts differ"));
  }
  if (!src.is_contiguous()) {
    int64_t strides[Tensor::kMaxRank];
    if (!UnitDimStrides(src, dims, strides)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reshape of a non-contiguous ", src.DebugString(), " to ", DimsString(dims),
          ": only inserting or removing dimensions of extent 1 keeps a strided layout"));
    }
    return Tensor::View(src.storage(), src.byte_offset(), src.dtype(), dims,
                        absl::Span<const int64_t>(strides, dims.size()));
  }
  return Tensor::View(src.storage(), src.byte_offset(), src.dtype(), dims);
}

absl::StatusOr<Tensor> View(const Tensor& src, int64_t offset, absl::Span<const int64_t> dims,
                            absl::Span<const int64_t> strides) {
  int64_t bytes;
  if (__builtin_mul_overflow(offset, DTypeSize(src.dtype()), &bytes) ||
      __builtin_add_overflow(bytes, src.byte_offset(), &bytes)) {
    return absl::OutOfRangeError("view offset overflows");
  }
  return Tensor::View(src.storage(), bytes, src.dtype(), dims, strides);
}

namespace {

// Strides of the capacity layout: row-major over dims with dims[axis] replaced by capacity.
void CapacityStrides(absl::Span<const int64_t> dims, int axis, int64_t capacity, int64_t* strides) {
  int64_t s = 1;
  for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= std::max<int64_t>(i == axis ? capacity : dims[i], 1);
  }
}

}  // namespace

absl::StatusOr<Tensor> AllocGrowable(Allocator& allocator, DType dtype, int axis, int64_t capacity,
                                     absl::Span<const int64_t> dims,
                                     std::shared_ptr<Allocator> keep_alive) {
  if (axis < 0 || axis >= static_cast<int>(dims.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("growth axis ", axis, " out of range for ", DimsString(dims)));
  }
  capacity = std::max(capacity, dims[axis]);
  int64_t cap_dims[Tensor::kMaxRank];
  std::copy(dims.begin(), dims.end(), cap_dims);
  cap_dims[axis] = capacity;
  DYNVM_ASSIGN_OR_RETURN(int64_t n, CheckedNumel(absl::Span<const int64_t>(cap_dims, dims.size())));
  int64_t bytes;
  if (__builtin_mul_overflow(n, DTypeSize(dtype), &bytes)) {
    return absl::InvalidArgumentError("growable tensor size overflows");
  }
  DYNVM_ASSIGN_OR_RETURN(StorageRef st, Storage::Allocate(allocator, static_cast<size_t>(bytes),
                                                          std::move(keep_alive)));
  (st)->grow_axis = axis;
  (st)->grow_capacity = capacity;
  (st)->frontier = dims[axis];
  int64_t strides[Tensor::kMaxRank];
  CapacityStrides(dims, axis, capacity, strides);
  return Tensor::View(std::move(st), 0, dtype, dims,
                      absl::Span<const int64_t>(strides, dims.size()));
}

absl::Status Extend(Allocator& allocator, Tensor& dst, int axis, int64_t new_len,
                    std::shared_ptr<Allocator> keep_alive, DeviceContext* device) {
  const int rank = dst.rank();
  if (axis < 0 || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("extend of ", dst.DebugString(), " along axis ", axis, ": axis out of range"));
  }
  const int64_t old_len = dst.dim(axis);
  if (new_len < old_len) {
    return absl::InvalidArgumentError(absl::StrCat("extend of ", dst.DebugString(), " along axis ",
                                                   axis, " to ", new_len, ": shorter than it is"));
  }
  Storage* st = dst.storage().get();
  bool in_place = st->writable() && st->device() == allocator.device() && st->grow_axis == axis &&
                  st->frontier == old_len && dst.byte_offset() == 0 && new_len <= st->grow_capacity;
  if (in_place) {
    int64_t strides[Tensor::kMaxRank];
    CapacityStrides(dst.dims(), axis, st->grow_capacity, strides);
    in_place = std::equal(strides, strides + rank, dst.strides().begin());
  }
  if (!in_place) {
    const int64_t capacity = std::max<int64_t>(
        new_len, 2 * std::max<int64_t>(old_len, st->grow_capacity > 0 && st->grow_axis == axis
                                                    ? st->grow_capacity
                                                    : old_len));
    DYNVM_ASSIGN_OR_RETURN(
        Tensor grown, AllocGrowable(allocator, dst.dtype(), axis, std::max<int64_t>(capacity, 4),
                                    dst.dims(), std::move(keep_alive)));
    DYNVM_RETURN_IF_ERROR(Copy(dst, grown, device));
    dst = std::move(grown);
    st = dst.storage().get();
  }
  int64_t dims[Tensor::kMaxRank];
  std::copy(dst.dims().begin(), dst.dims().end(), dims);
  dims[axis] = new_len;
  int64_t strides[Tensor::kMaxRank];
  std::copy(dst.strides().begin(), dst.strides().end(), strides);
  dst.SetView(absl::Span<const int64_t>(dims, rank), absl::Span<const int64_t>(strides, rank));
  st->frontier = new_len;
  return absl::OkStatus();
}

absl::Status Append(Allocator& allocator, Tensor& dst, const Tensor& src, int axis,
                    std::shared_ptr<Allocator> keep_alive, DeviceContext* device) {
  const int rank = dst.rank();
  if (src.rank() != rank || axis >= rank) {
    return absl::InvalidArgumentError(absl::StrCat("append of ", src.DebugString(), " to ",
                                                   dst.DebugString(), " along axis ", axis,
                                                   ": ranks differ or axis out of range"));
  }
  for (int i = 0; i < rank; ++i) {
    if (i != axis && src.dim(i) != dst.dim(i)) {
      return absl::InvalidArgumentError(absl::StrCat("append of ", src.DebugString(), " to ",
                                                     dst.DebugString(), " along axis ", axis,
                                                     ": other dims differ"));
    }
  }
  const int64_t k = src.dim(axis);
  const int64_t old_len = dst.dim(axis);
  int64_t new_len;
  if (__builtin_add_overflow(old_len, k, &new_len))
    return absl::InvalidArgumentError("append length overflows");
  DYNVM_RETURN_IF_ERROR(Extend(allocator, dst, axis, new_len, std::move(keep_alive), device));
  // Write src into the slice [old_len, new_len) along axis. An element with no values (a 0
  // among its dims) writes nothing: its offset may lie past the storage, which holds no bytes
  // then.
  if (src.numel() > 0) {
    int64_t dims[Tensor::kMaxRank];
    std::copy(dst.dims().begin(), dst.dims().end(), dims);
    dims[axis] = k;
    DYNVM_ASSIGN_OR_RETURN(
        Tensor slice,
        Tensor::View(dst.storage(),
                     dst.byte_offset() + old_len * dst.stride(axis) * DTypeSize(dst.dtype()),
                     dst.dtype(), absl::Span<const int64_t>(dims, rank), dst.strides()));
    DYNVM_RETURN_IF_ERROR(Copy(src, slice, device));
  }
  return absl::OkStatus();
}

}  // namespace dynvm::ops
