// Helpers shared by the reference data-movement kernels (the "shape" family: shape.cc,
// slice_pad.cc, gather_scatter.cc): strided block copies, element-size dispatch, index reading
// and checking, exact scalar conversion. Internal.
#ifndef DYNVM_KERNELS_REFERENCE_DATA_MOVEMENT_H_
#define DYNVM_KERNELS_REFERENCE_DATA_MOVEMENT_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {

// Views built by data-movement kernels may have up to twice the tensor rank: Tile reads a
// [r0, d0, r1, d1, ...] view, DepthToSpace a 6-D split of a 4-D tensor.
inline constexpr int kMaxViewRank = 2 * Tensor::kMaxRank;
using ViewDims = absl::InlinedVector<int64_t, kMaxViewRank>;

// Copies the block `dims` from `src` (element strides `src_strides`) to `dst` (`dst_strides`),
// elements of `esize` bytes. Strides may be zero (broadcast reads) or negative (reversed
// reads). Size-1 dims are dropped and compatible neighbours merged, so a contiguous run is one
// memcpy. REQUIRES: dims.size() <= kMaxViewRank and equal to both strides' sizes; every
// addressed element lies inside its buffer; src and dst do not overlap.
void CopyStrided(int64_t esize, absl::Span<const int64_t> dims, const void* src,
                 absl::Span<const int64_t> src_strides, void* dst,
                 absl::Span<const int64_t> dst_strides);

// Copies the view (dims, strides) at `src` into contiguous `dst`.
void CopyToContiguous(int64_t esize, absl::Span<const int64_t> dims, const void* src,
                      absl::Span<const int64_t> src_strides, void* dst);
// Copies tensor `src` (any strides) into contiguous `dst`, which holds src.numel() elements.
void CopyToContiguous(const Tensor& src, void* dst);

// PrepareOutput for a shape computed from tensor data: first checks that it is a valid shape
// whose contiguous strides fit in int64 (a zero-element [0, 2^62, 2^62] has a product of 0 but
// overflowing strides), InvalidArgument naming op otherwise.
absl::Status PrepareDataOutput(KernelContext& ctx, Tensor* out, DType dtype,
                               absl::Span<const int64_t> dims, absl::string_view op);

// Copies of at least this many bytes split over the VM's pool when it has more than one thread
// (EmitView: Slice, Transpose, Expand, Tile...).
inline constexpr int64_t kMinParallelCopyBytes = int64_t{1} << 16;

// Prepares out (x's dtype, `out_dims`) and fills it with the view (view_dims, view_strides) of
// x's elements starting `offset` elements from x's data pointer.
absl::Status EmitView(KernelContext& ctx, const Tensor& x, int64_t offset,
                      absl::Span<const int64_t> view_dims, absl::Span<const int64_t> view_strides,
                      absl::Span<const int64_t> out_dims, Tensor* out, absl::string_view op);
// Prepares out (x's dtype, `out_dims`, the same element count) and fills it with x's elements in
// row-major order.
absl::Status EmitReshaped(KernelContext& ctx, const Tensor& x, absl::Span<const int64_t> out_dims,
                          Tensor* out, absl::string_view op);

// Calls fn with an unsigned integer tag of the element size of `dtype` (uint8_t ... uint64_t):
// kernels that only move elements copy bits. Unimplemented for strings.
template <typename Fn>
absl::Status DispatchBySize(DType dtype, absl::string_view op, Fn&& fn) {
  if (dtype != DType::kString) {
    switch (DTypeSize(dtype)) {
      case 1:
        return fn(static_cast<uint8_t*>(nullptr));
      case 2:
        return fn(static_cast<uint16_t*>(nullptr));
      case 4:
        return fn(static_cast<uint32_t*>(nullptr));
      case 8:
        return fn(static_cast<uint64_t*>(nullptr));
      default:
        break;
    }
  }
  return absl::UnimplementedError(absl::StrCat(op, ": dtype ", DTypeName(dtype), " not supported"));
}

// Run-time port check: at least `n_in` inputs and `n_out` outputs, the first of each present.
absl::Status CheckPorts(absl::Span<const Tensor* const> in, size_t n_in,
                        absl::Span<Tensor* const> out, size_t n_out, absl::string_view op);
// The input at `i`, or nullptr when absent or beyond the ports given.
inline const Tensor* OptionalInput(absl::Span<const Tensor* const> in, size_t i) {
  return i < in.size() ? in[i] : nullptr;
}

// Factory check: the spec has between min_in and max_in inputs and at least one output, and
// its data ports (inputs listed in `data_ports`) are not strings (Unimplemented).
absl::Status CheckSpec(const KernelSpec& spec, size_t min_in, size_t max_in,
                       std::initializer_list<size_t> data_ports = {0});

// Reads an i32 or i64 tensor of any rank and strides as int64 values in row-major order, into
// the invoke site's workspace (ctx.Workspace: valid until the site's next Workspace call), so
// a kernel run in steady state allocates nothing.
absl::StatusOr<absl::Span<int64_t>> ReadIndexTensor(KernelContext& ctx, const Tensor& t,
                                                    absl::string_view op, absl::string_view what);
// The values of an i32 or i64 index tensor in row-major order, to read only: a contiguous i64
// tensor's own data, without a copy (an index tensor may be as large as the data it addresses:
// PyTorch exports `x[:, 1:] += y` as a ScatterND listing every element), otherwise
// ReadIndexTensor's copy.
absl::StatusOr<absl::Span<const int64_t>> IndexValues(KernelContext& ctx, const Tensor& t,
                                                      absl::string_view op, absl::string_view what);

// Maps an index in [-dim, dim) to [0, dim); InvalidArgument naming op and index otherwise.
inline absl::StatusOr<int64_t> CheckIndex(int64_t index, int64_t dim, absl::string_view op) {
  const int64_t i = index < 0 ? index + dim : index;
  if (i < 0 || i >= dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": index ", index, " is out of range for a dimension of ", dim));
  }
  return i;
}

// Normalized axes of a tensor (no heap allocation up to Tensor::kMaxRank of them).
using AxisList = absl::InlinedVector<int, Tensor::kMaxRank>;

// Normalizes `axes` (each in [-rank, rank)) and rejects duplicates.
absl::StatusOr<AxisList> NormalizeAxes(absl::Span<const int64_t> axes, int rank,
                                       absl::string_view op);

// A numeric value held exactly: integers as int64 / uint64, floating point as double. Used to
// convert attribute values (a float attribute, a tensor attribute of another dtype) into a
// tensor's element type.
struct ScalarValue {
  enum class Kind { kSigned, kUnsigned, kFloat } kind = Kind::kFloat;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;

  template <typename T>
  static ScalarValue From(T v) {
    ScalarValue s;
    if constexpr (std::is_same_v<T, bool>) {
      s.kind = Kind::kUnsigned;
      s.u = v ? 1 : 0;
    } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      s.kind = Kind::kSigned;
      s.i = v;
    } else if constexpr (std::is_integral_v<T>) {
      s.kind = Kind::kUnsigned;
      s.u = v;
    } else if constexpr (std::is_same_v<T, double>) {
      s.f = v;
    } else {
      s.f = static_cast<float>(v);  // float, Half, BFloat16
    }
    return s;
  }
  // Converts to T like a C++ cast; a float out of T's integer range (or NaN) becomes 0.
  template <typename T>
  T To() const {
    if constexpr (std::is_same_v<T, bool>) {
      return kind == Kind::kSigned ? i != 0 : kind == Kind::kUnsigned ? u != 0 : f != 0;
    } else if constexpr (std::is_integral_v<T>) {
      if (kind == Kind::kSigned) return static_cast<T>(i);
      if (kind == Kind::kUnsigned) return static_cast<T>(u);
      if constexpr (std::is_signed_v<T>) {
        if (!(f >= -9.2233720368547758e18 && f < 9.2233720368547758e18)) return T{0};
        return static_cast<T>(static_cast<int64_t>(f));
      } else {
        if (!(f > -1.0 && f < 1.8446744073709552e19)) return T{0};
        return static_cast<T>(static_cast<uint64_t>(f));
      }
    } else {
      const double d = kind == Kind::kSigned     ? static_cast<double>(i)
                       : kind == Kind::kUnsigned ? static_cast<double>(u)
                                                 : f;
      if constexpr (std::is_same_v<T, double>) {
        return d;
      } else {
        return T(static_cast<float>(d));
      }
    }
  }
};

// Reads a one-element tensor of any numeric dtype (a depth, a count) as int64; floats are
// truncated. InvalidArgument for NaN, infinities and values outside int64.
absl::StatusOr<int64_t> ReadIntScalar(const Tensor& t, absl::string_view op,
                                      absl::string_view what);

// A reference kernel running `run` with a copy of `attrs`.
template <typename A>
std::unique_ptr<Kernel> MakeKernel(const KernelSpec& spec, FunctionKernel::RunFn run, A attrs) {
  return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), run,
                                          std::make_shared<const A>(std::move(attrs)));
}

// Registers `factory` as the reference CPU kernel of domain::op.
void AddReferenceKernel(KernelRegistry& r, absl::string_view domain, absl::string_view op,
                        KernelFactory factory);

// ---- Pad (slice_pad.cc), shared with the oneDNN backend's Pad (kernels/dnnl/pad.cc) ----

enum class PadMode { kConstant, kReflect, kEdge, kWrap };

struct PadAttrs {
  PadMode mode = PadMode::kConstant;
  bool has_pads = false;  // the pads attribute (before opset 11)
  std::vector<int64_t> pads;
  float value = 0;  // the value attribute (before opset 11)
};

// Pad's attributes (mode, pads/paddings, value) and arity, the errors its factory reports.
absl::StatusOr<PadAttrs> ParsePadAttrs(const KernelSpec& spec);

// What one Pad run does, from its inputs (pads, constant_value, axes) and attributes: the
// output dims, the begin pad of each axis (0 for axes not padded; negative crops) and the pad
// value as the bits of one element (constant mode). Every error Pad reports before it allocates
// its output, but the empty-dim one (a non-constant mode cannot pad an empty dim).
struct PadPlan {
  Dims dims;
  int64_t begin[Tensor::kMaxRank] = {};
  uint64_t value_bits = 0;
};
absl::StatusOr<PadPlan> PlanPad(const PadAttrs& attrs, absl::Span<const Tensor* const> in);

// The source index read for output coordinate `c` (already shifted by the begin pad) along an
// axis of `dim` > 0 elements, or -1 for the pad value (constant mode outside [0, dim)).
int64_t PadSource(PadMode mode, __int128 c, int64_t dim);

// The family's other registration functions, called by RegisterShapeKernels.
void RegisterSlicePadKernels(KernelRegistry& r);       // slice_pad.cc
void RegisterGatherScatterKernels(KernelRegistry& r);  // gather_scatter.cc

}  // namespace dynvm::reference

#endif  // DYNVM_KERNELS_REFERENCE_DATA_MOVEMENT_H_
