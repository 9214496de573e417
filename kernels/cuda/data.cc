// Data movement on the device: Gather (bounds-checked on the device), Concat, Transpose,
// Expand, ConstantOfShape, and dynvm::Sample. Shapes and Sample's scalar parameters are read on
// the host (from a host tensor, or copied from the device: a sync point).
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/common.h"

namespace dynvm::cuda {
namespace {

using Dims = absl::InlinedVector<int64_t, Tensor::kMaxRank>;

absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank, absl::string_view op) {
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": axis ", axis, " is out of range for rank ", rank));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

bool Copyable(uint8_t dtype) {
  return dtype != kAnyDType && dtype != static_cast<uint8_t>(DType::kString);
}

// Integer values of a 0-D or 1-D i32/i64 tensor, on the host.
absl::StatusOr<std::vector<int64_t>> ReadInts(CudaContext& cc, const Tensor& t,
                                              absl::string_view what) {
  if (t.rank() > 1 || (t.dtype() != DType::kI64 && t.dtype() != DType::kI32)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be a 0-D or 1-D i32/i64 tensor, got ", t.DebugString()));
  }
  DYNVM_ASSIGN_OR_RETURN(Tensor h, ToHost(cc, t));
  std::vector<int64_t> v(static_cast<size_t>(h.numel()));
  const int64_t stride = h.rank() == 1 ? h.stride(0) : 0;
  for (int64_t i = 0; i < h.numel(); ++i) {
    v[i] = h.dtype() == DType::kI64 ? h.data<int64_t>()[i * stride] : h.data<int32_t>()[i * stride];
  }
  return v;
}

// ---- Gather ----

absl::Status RunGather(const int64_t& attr_axis, CudaContext& cc, KernelContext& ctx, Inputs in,
                       Outputs out) {
  if (in.size() != 2 || in[0] == nullptr || in[1] == nullptr || out.size() != 1 || !out[0]) {
    return absl::InvalidArgumentError("Gather takes 2 inputs and has 1 output");
  }
  const Tensor& x = *in[0];
  const Tensor& ind = *in[1];
  if (ind.dtype() != DType::kI64 && ind.dtype() != DType::kI32) {
    return absl::InvalidArgumentError("Gather: indices must be i32 or i64");
  }
  DYNVM_ASSIGN_OR_RETURN(int axis, NormalizeAxis(attr_axis, x.rank(), "Gather"));
  Dims dims(x.dims().begin(), x.dims().begin() + axis);
  dims.insert(dims.end(), ind.dims().begin(), ind.dims().end());
  dims.insert(dims.end(), x.dims().begin() + axis + 1, x.dims().end());
  DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, out[0], x.dtype(), dims, "Gather"));
  if (ind.numel() == 0) return absl::OkStatus();
  StorageRef keep_x, keep_i;
  DYNVM_ASSIGN_OR_RETURN(const void* px, ContiguousData(cc, x, &keep_x));
  absl::StatusOr<const void*> pi = ContiguousData(cc, ind, &keep_i);
  if (!pi.ok()) return pi.status();
  absl::StatusOr<void*> flag = ctx.DeviceWorkspace(sizeof(int));
  if (!flag.ok()) return flag.status();
  DYNVM_RETURN_IF_ERROR(LaunchStatus(cudaMemsetAsync(*flag, 0, sizeof(int), cc.stream()), "Gather",
                                     "cudaMemsetAsync"));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  DYNVM_RETURN_IF_ERROR(
      LaunchStatus(Gather(out[0]->raw_data(), px, *pi, ind.dtype() == DType::kI32,
                          static_cast<int>(DTypeSize(x.dtype())), outer, x.dim(axis), inner,
                          ind.numel(), static_cast<int*>(*flag), cc.stream()),
                   "Gather", "Gather"));
  int bad = 0;  // the bounds check's sync point
  DYNVM_RETURN_IF_ERROR(cc.CopyToHost(&bad, *flag, sizeof(int)));
  if (bad != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Gather: an index of ", ind.DebugString(),
                                                   " is out of range for axis ", axis, " of ",
                                                   x.DebugString()));
  }
  return absl::OkStatus();
}

// ---- Concat ----

absl::Status RunConcat(const int64_t& attr_axis, CudaContext& cc, KernelContext&, Inputs in,
                       Outputs out) {
  if (in.empty() || out.size() != 1 || out[0] == nullptr) {
    return absl::InvalidArgumentError("Concat takes inputs and has 1 output");
  }
  for (const Tensor* t : in) {
    if (t == nullptr) return absl::InvalidArgumentError("Concat: an input is absent");
  }
  const Tensor& first = *in[0];
  DYNVM_ASSIGN_OR_RETURN(int axis, NormalizeAxis(attr_axis, first.rank(), "Concat"));
  Dims dims(first.dims().begin(), first.dims().end());
  dims[axis] = 0;
  for (const Tensor* t : in) {
    bool ok = t->rank() == first.rank() && t->dtype() == first.dtype();
    for (int d = 0; ok && d < t->rank(); ++d) ok = d == axis || t->dim(d) == first.dim(d);
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Concat: ", t->DebugString(), " and ", first.DebugString(), " differ off axis ", axis));
    }
    dims[axis] += t->dim(axis);
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, out[0], first.dtype(), dims, "Concat"));
  const Tensor& y = *out[0];
  int64_t at = 0;
  for (const Tensor* t : in) {
    Dims part = dims;
    part[axis] = t->dim(axis);
    DYNVM_ASSIGN_OR_RETURN(
        Tensor slice,
        Tensor::View(y.storage(), y.byte_offset() + at * y.stride(axis) * DTypeSize(y.dtype()),
                     y.dtype(), part, y.strides()));
    DYNVM_RETURN_IF_ERROR(DeviceCopy(cc, *t, slice));
    at += t->dim(axis);
  }
  return absl::OkStatus();
}

// ---- Transpose ----

absl::Status RunTranspose(const std::vector<int64_t>& perm_attr, CudaContext& cc, KernelContext&,
                          Inputs in, Outputs out) {
  if (in.size() != 1 || in[0] == nullptr || out.size() != 1 || out[0] == nullptr) {
    return absl::InvalidArgumentError("Transpose takes 1 input and has 1 output");
  }
  const Tensor& x = *in[0];
  const int rank = x.rank();
  std::vector<int64_t> perm = perm_attr;
  if (perm.empty()) {
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  std::vector<bool> seen(rank, false);
  bool ok = static_cast<int>(perm.size()) == rank;
  for (size_t i = 0; ok && i < perm.size(); ++i) {
    ok = perm[i] >= 0 && perm[i] < rank && !seen[perm[i]];
    if (ok) seen[perm[i]] = true;
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("Transpose: perm is not a permutation of the dims of ", x.DebugString()));
  }
  Dims dims, strides;
  for (int64_t p : perm) {
    dims.push_back(x.dim(static_cast<int>(p)));
    strides.push_back(x.stride(static_cast<int>(p)));
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, out[0], x.dtype(), dims, "Transpose"));
  Tensor view = x;
  view.SetView(dims, strides);
  return DeviceCopy(cc, view, *out[0]);
}

// ---- Expand (shape on the host) ----

absl::Status RunExpand(const int&, CudaContext& cc, KernelContext&, Inputs in, Outputs out) {
  if (in.size() != 2 || in[0] == nullptr || in[1] == nullptr || out.size() != 1 || !out[0]) {
    return absl::InvalidArgumentError("Expand takes 2 inputs and has 1 output");
  }
  const Tensor& x = *in[0];
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ReadInts(cc, *in[1], "Expand: shape"));
  const size_t rank = std::max(shape.size(), static_cast<size_t>(x.rank()));
  if (rank > Tensor::kMaxRank) return absl::InvalidArgumentError("Expand: rank too large");
  Dims dims(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const size_t ls = rank - shape.size(), lx = rank - x.rank();
    const int64_t ds = i < ls ? 1 : (shape)[i - ls];
    const int64_t dx = i < lx ? 1 : x.dim(static_cast<int>(i - lx));
    if (ds != dx && ds != 1 && dx != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("Expand: ", x.ShapeString(), " does not broadcast to the shape"));
    }
    if (ds < 0) return absl::InvalidArgumentError("Expand: negative dim");
    dims[i] = dx == 1 ? ds : dx;
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, out[0], x.dtype(), dims, "Expand"));
  Tensor view = x;
  view.SetView(dims, BroadcastStrides(x, dims));
  return DeviceCopy(cc, view, *out[0]);
}

// ---- ConstantOfShape (shape on the host) ----

struct ConstantAttrs {
  DType dtype = DType::kF32;
  uint64_t bits = 0;  // the value's bytes
};

absl::Status RunConstantOfShape(const ConstantAttrs& ca, CudaContext& cc, KernelContext&, Inputs in,
                                Outputs out) {
  if (in.size() != 1 || in[0] == nullptr || out.size() != 1 || out[0] == nullptr) {
    return absl::InvalidArgumentError("ConstantOfShape takes 1 input and has 1 output");
  }
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                         ReadInts(cc, *in[0], "ConstantOfShape: shape"));
  if (shape.size() > Tensor::kMaxRank) {
    return absl::InvalidArgumentError("ConstantOfShape: rank too large");
  }
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("ConstantOfShape: negative dim");
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, out[0], ca.dtype, shape, "ConstantOfShape"));
  return LaunchStatus(Fill(out[0]->raw_data(), static_cast<int>(DTypeSize(ca.dtype)), ca.bits,
                           out[0]->numel(), cc.stream()),
                      "ConstantOfShape", "Fill");
}

// ---- dynvm::Sample ----

absl::StatusOr<double> ScalarDouble(CudaContext& cc, const Tensor& t, absl::string_view what) {
  if (t.numel() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Sample: ", what, " must have one element, got ", t.DebugString()));
  }
  DYNVM_ASSIGN_OR_RETURN(Tensor h, ToHost(cc, t));
  switch (h.dtype()) {
    case DType::kF32:
      return *h.data<float>();
    case DType::kF64:
      return *h.data<double>();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("Sample: ", what, " has dtype ", DTypeName(h.dtype())));
  }
}

absl::StatusOr<int64_t> ScalarInt(CudaContext& cc, const Tensor& t, absl::string_view what) {
  if (t.numel() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Sample: ", what, " must have one element, got ", t.DebugString()));
  }
  DYNVM_ASSIGN_OR_RETURN(Tensor h, ToHost(cc, t));
  if (h.dtype() == DType::kI64) return *h.data<int64_t>();
  if (h.dtype() == DType::kI32) return *h.data<int32_t>();
  return absl::InvalidArgumentError(absl::StrCat("Sample: ", what, " must be i64 or i32"));
}

absl::Status RunSample(const int&, CudaContext& cc, KernelContext&, Inputs in, Outputs out) {
  if (in.size() != 4 || !in[0] || !in[1] || !in[2] || !in[3] || out.size() != 1 || !out[0]) {
    return absl::InvalidArgumentError(
        "Sample takes (logits, temperature, seed, step) and has one output");
  }
  const Tensor& logits = *in[0];
  if (logits.rank() != 2 || logits.dim(1) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Sample: logits must be [batch, vocab] with vocab > 0, got ", logits.DebugString()));
  }
  DYNVM_ASSIGN_OR_RETURN(double temperature, ScalarDouble(cc, *in[1], "temperature"));
  DYNVM_ASSIGN_OR_RETURN(int64_t seed, ScalarInt(cc, *in[2], "seed"));
  absl::StatusOr<int64_t> step = ScalarInt(cc, *in[3], "step");
  if (!step.ok()) return step.status();
  const int64_t dims[1] = {logits.dim(0)};
  DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, out[0], DType::kI64, dims, "Sample"));
  // Rows must be contiguous within themselves; a row stride (a slice of a wider tensor) is fine.
  Tensor rows = logits;
  StorageRef keep;
  if (logits.stride(1) != 1 && logits.dim(1) > 1) {
    absl::StatusOr<const void*> packed = ContiguousData(cc, logits, &keep);
    if (!packed.ok()) return packed.status();
    absl::StatusOr<Tensor> v = Tensor::View(keep, 0, logits.dtype(), logits.dims());
    if (!v.ok()) return v.status();
    rows = *std::move(v);
  }
  const int64_t row_stride = rows.dim(0) > 1 ? rows.stride(0) : rows.dim(1);
  return LaunchStatus(
      Sample(out[0]->data<int64_t>(), rows.data<float>(), rows.dim(0), rows.dim(1), row_stride,
             temperature, static_cast<uint64_t>(seed), static_cast<uint64_t>(*step), cc.stream()),
      "Sample", "Sample");
}

}  // namespace

void RegisterDataKernels(Registrations& r) {
  Add(r, "Gather", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() != 2 || spec.outputs.size() != 1) {
      return absl::InvalidArgumentError("Gather takes 2 inputs and has 1 output");
    }
    if (!Copyable(spec.inputs[0].dtype)) {
      return absl::UnimplementedError("Gather (cuda): dtype not supported");
    }
    DYNVM_RETURN_IF_ERROR(RequireDType(spec, spec.inputs[1], {DType::kI64, DType::kI32}));
    DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", 0));
    return MakeKernel<int64_t>(KernelName("Gather", static_cast<DType>(spec.inputs[0].dtype)),
                               "Gather", &RunGather, axis);
  });
  Add(r, "Concat", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.empty() || spec.outputs.size() != 1) {
      return absl::InvalidArgumentError("Concat takes inputs and has 1 output");
    }
    for (const PortSpec& p : spec.inputs) {
      if (!Copyable(p.dtype) || p.kind != ObjectKind::kTensor) {
        return absl::UnimplementedError("Concat (cuda): tensors of a fixed dtype only");
      }
    }
    DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", 0));
    return MakeKernel<int64_t>(KernelName("Concat", static_cast<DType>(spec.inputs[0].dtype)),
                               "Concat", &RunConcat, axis);
  });
  Add(r, "Transpose", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() != 1 || spec.outputs.size() != 1 || !Copyable(spec.inputs[0].dtype)) {
      return absl::UnimplementedError("Transpose (cuda): one tensor of a fixed dtype");
    }
    DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> perm, spec.GetInts("perm"));
    return MakeKernel<std::vector<int64_t>>(
        KernelName("Transpose", static_cast<DType>(spec.inputs[0].dtype)), "Transpose",
        &RunTranspose, perm);
  });
  Add(r, "Expand", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() != 2 || spec.outputs.size() != 1 || !Copyable(spec.inputs[0].dtype)) {
      return absl::UnimplementedError("Expand (cuda): one tensor of a fixed dtype and a shape");
    }
    return MakeKernel<int>(KernelName("Expand", static_cast<DType>(spec.inputs[0].dtype)), "Expand",
                           &RunExpand, 0, /*host_inputs=*/0b10);
  });
  Add(r, "ConstantOfShape", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() != 1 || spec.outputs.size() != 1 || !Copyable(spec.outputs[0].dtype)) {
      return absl::UnimplementedError("ConstantOfShape (cuda): a fixed output dtype");
    }
    ConstantAttrs a;
    a.dtype = static_cast<DType>(spec.outputs[0].dtype);
    if (const AttrValue* v = spec.Find("value"); v != nullptr) {
      if (v->type != AttrValue::Type::kTensor || v->tensor.numel() != 1 ||
          v->tensor.dtype() != a.dtype || v->tensor.device() != Device::kCPU) {
        return absl::UnimplementedError("ConstantOfShape (cuda): value must be one host element");
      }
      std::memcpy(&a.bits, v->tensor.raw_data(), static_cast<size_t>(DTypeSize(a.dtype)));
    }
    return MakeKernel<ConstantAttrs>(KernelName("ConstantOfShape", a.dtype), "ConstantOfShape",
                                     &RunConstantOfShape, a, /*host_inputs=*/0b1);
  });
}

void RegisterSampleKernels(Registrations& r) {
  Add(
      r, "Sample",
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        if (spec.inputs.size() >= 7) {
          return absl::UnimplementedError(
              "Sample on CUDA: top_k, top_p and repetition_penalty are not implemented (the "
              "reference kernel has them)");
        }
        if (spec.inputs.size() != 4 || spec.outputs.size() != 1) {
          return absl::InvalidArgumentError("Sample takes 4 inputs and has 1 output");
        }
        DYNVM_RETURN_IF_ERROR(RequireDType(spec, spec.inputs[0], {DType::kF32}));
        return MakeKernel<int>(KernelName("Sample", DType::kF32), "Sample", &RunSample, 0,
                               /*host_inputs=*/0b1110);
      },
      "dynvm");
}

}  // namespace dynvm::cuda
