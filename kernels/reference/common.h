// Helpers shared by the reference kernels: output preparation, dtype dispatch, strided and
// broadcast iteration. Internal.
#ifndef DYNVM_KERNELS_REFERENCE_COMMON_H_
#define DYNVM_KERNELS_REFERENCE_COMMON_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/half.h"
#include "kernels/kernel.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"

namespace dynvm::reference {

using Dims = absl::InlinedVector<int64_t, Tensor::kMaxRank>;

// Makes `out` hold a contiguous tensor of `dtype` and `dims`. A preallocated output (the
// compiler planned its shape) must already have exactly these dims, otherwise the planned and
// actual shapes disagree and the run fails with an error naming both; a dynamic output (not
// defined) is allocated from the VM's pool.
absl::Status PrepareOutput(KernelContext& ctx, Tensor* out, DType dtype,
                           absl::Span<const int64_t> dims, absl::string_view op);

// Numpy-style broadcast of two shapes; InvalidArgument naming both when incompatible.
absl::StatusOr<Dims> BroadcastShapes(absl::Span<const int64_t> a, absl::Span<const int64_t> b);
absl::StatusOr<Dims> BroadcastShapes(absl::Span<const absl::Span<const int64_t>> shapes);

// Strides (in elements) that read `t` as if broadcast to `out_dims` (stride 0 on broadcast
// dims, right-aligned). REQUIRES: t's shape broadcasts to out_dims.
Dims BroadcastStrides(const Tensor& t, absl::Span<const int64_t> out_dims);

// Calls fn(offset_0, ..., offset_{n-1}) for every index of `dims` in row-major order, where
// offset_k is the element offset under strides[k]. The innermost dimension runs as a tight
// loop. Works for rank 0 (one call) and empty shapes (no calls).
template <size_t N, typename Fn>
void ForEachOffset(absl::Span<const int64_t> dims,
                   const std::array<absl::Span<const int64_t>, N>& strides, Fn&& fn);

// Normalizes an axis in [-rank, rank) to [0, rank); InvalidArgument otherwise.
absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank, absl::string_view op);

// Reads a 1-D or 0-D integer tensor (i32 or i64) as int64 values (shape inputs, axes, k).
// Errors name "<op>: <what>". Up to Tensor::kMaxRank values need no heap allocation.
absl::StatusOr<Dims> ReadInts(const Tensor& t, absl::string_view op, absl::string_view what);

// Dispatch on a DType to a C++ element type. The callback is a generic lambda taking a
// pointer-typed tag: [&](auto* tag) { using T = std::remove_pointer_t<decltype(tag)>; ... }.
template <typename Fn>
absl::Status DispatchNumeric(DType dtype, absl::string_view op, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn(static_cast<float*>(nullptr));
    case DType::kF64:
      return fn(static_cast<double*>(nullptr));
    case DType::kF16:
      return fn(static_cast<Half*>(nullptr));
    case DType::kBF16:
      return fn(static_cast<BFloat16*>(nullptr));
    case DType::kI8:
      return fn(static_cast<int8_t*>(nullptr));
    case DType::kI16:
      return fn(static_cast<int16_t*>(nullptr));
    case DType::kI32:
      return fn(static_cast<int32_t*>(nullptr));
    case DType::kI64:
      return fn(static_cast<int64_t*>(nullptr));
    case DType::kU8:
      return fn(static_cast<uint8_t*>(nullptr));
    case DType::kU16:
      return fn(static_cast<uint16_t*>(nullptr));
    case DType::kU32:
      return fn(static_cast<uint32_t*>(nullptr));
    case DType::kU64:
      return fn(static_cast<uint64_t*>(nullptr));
    case DType::kBool:
      return fn(static_cast<bool*>(nullptr));
    default:
      return absl::UnimplementedError(
          absl::StrCat(op, ": dtype ", DTypeName(dtype), " not supported"));
  }
}

// A kernel implemented by a plain function (most reference kernels).
class FunctionKernel final : public Kernel {
 public:
  using RunFn = absl::Status (*)(const void* attrs, KernelContext& ctx,
                                 absl::Span<const Tensor* const> in, absl::Span<Tensor* const> out);
  FunctionKernel(std::string name, RunFn run, std::shared_ptr<const void> attrs)
      : name_(std::move(name)), run_(run), attrs_(std::move(attrs)) {}
  absl::Status Run(KernelContext& ctx, absl::Span<const Tensor* const> in,
                   absl::Span<Tensor* const> out) const override {
    return run_(attrs_.get(), ctx, in, out);
  }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  RunFn run_;
  std::shared_ptr<const void> attrs_;
};

// "op.dtype.ref", e.g. "matmul.f32.ref".
std::string ReferenceKernelName(const KernelSpec& spec);

// ---- implementation of the templates ----

template <size_t N, typename Fn>
void ForEachOffset(absl::Span<const int64_t> dims,
                   const std::array<absl::Span<const int64_t>, N>& strides, Fn&& fn) {
  const int rank = static_cast<int>(dims.size());
  for (int64_t d : dims) {
    if (d == 0) return;
  }
  std::array<int64_t, N> off{};
  if (rank == 0) {
    std::apply(fn, off);
    return;
  }
  int64_t idx[Tensor::kMaxRank] = {};
  const int inner = rank - 1;
  const int64_t n_inner = dims[inner];
  std::array<int64_t, N> inner_stride;
  for (size_t k = 0; k < N; ++k) inner_stride[k] = strides[k][inner];
  while (true) {
    std::array<int64_t, N> o = off;
    for (int64_t i = 0; i < n_inner; ++i) {
      std::apply(fn, o);
      for (size_t k = 0; k < N; ++k) o[k] += inner_stride[k];
    }
    int d = inner - 1;
    for (; d >= 0; --d) {
      ++idx[d];
      for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
      if (idx[d] < dims[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * dims[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace dynvm::reference

#endif  // DYNVM_KERNELS_REFERENCE_COMMON_H_
