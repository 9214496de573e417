#include "kernels/reference/common.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace dynvm::reference {

absl::Status PrepareOutput(KernelContext& ctx, Tensor* out, DType dtype,
                           absl::Span<const int64_t> dims, absl::string_view op) {
  if (out->defined()) {
    if (out->dtype() != dtype || out->dims() != dims) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": output planned as ", out->DebugString(),
                                                     " but the inputs give ", DTypeName(dtype),
                                                     DimsString(dims)));
    }
    if (!out->is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": output view is not contiguous"));
    }
    return absl::OkStatus();
  }
  DYNVM_ASSIGN_OR_RETURN(Tensor t, ctx.AllocateOutput(dtype, dims));
  *out = std::move(t);
  return absl::OkStatus();
}

absl::StatusOr<Dims> BroadcastShapes(absl::Span<const int64_t> a, absl::Span<const int64_t> b) {
  const size_t rank = std::max(a.size(), b.size());
  Dims out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("shapes ", DimsString(a), " and ", DimsString(b), " do not broadcast"));
    }
  }
  return out;
}

absl::StatusOr<Dims> BroadcastShapes(absl::Span<const absl::Span<const int64_t>> shapes) {
  Dims out;
  for (absl::Span<const int64_t> s : shapes) {
    DYNVM_ASSIGN_OR_RETURN(Dims b, BroadcastShapes(out, s));
    out = std::move(b);
  }
  return out;
}

Dims BroadcastStrides(const Tensor& t, absl::Span<const int64_t> out_dims) {
  const size_t rank = out_dims.size();
  const size_t lead = rank - t.rank();
  Dims s(rank, 0);
  for (size_t i = lead; i < rank; ++i) {
    s[i] = t.dim(static_cast<int>(i - lead)) == 1 ? 0 : t.stride(static_cast<int>(i - lead));
  }
  return s;
}

absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank, absl::string_view op) {
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": axis ", axis, " is out of range for rank ", rank));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

absl::StatusOr<Dims> ReadInts(const Tensor& t, absl::string_view op, absl::string_view what) {
  if (t.rank() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", what, " must be a 0-D or 1-D tensor, got ", t.DebugString()));
  }
  if (t.device() != Device::kCPU) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " must be on the CPU"));
  }
  Dims v(static_cast<size_t>(t.numel()));
  const int64_t stride = t.rank() == 1 ? t.stride(0) : 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::kI64) {
      v[i] = t.data<int64_t>()[i * stride];
    } else if (t.dtype() == DType::kI32) {
      v[i] = t.data<int32_t>()[i * stride];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ", what, " must be i32 or i64, got ", DTypeName(t.dtype())));
    }
  }
  return v;
}

std::string ReferenceKernelName(const KernelSpec& spec) {
  std::string dtype = "any";
  if (!spec.outputs.empty() && spec.outputs[0].dtype != kAnyDType) {
    dtype = std::string(DTypeName(spec.output_dtype(0)));
  } else if (!spec.inputs.empty() && spec.inputs[0].dtype != kAnyDType) {
    dtype = std::string(DTypeName(spec.input_dtype(0)));
  }
  return absl::StrCat(absl::AsciiStrToLower(spec.op), ".", dtype, ".ref");
}

}  // namespace dynvm::reference
