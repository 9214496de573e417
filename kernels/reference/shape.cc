// Reference kernels that reshape, permute and broadcast tensors or make tensors from shapes:
// Copy (dynvm), Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Expand, Tile, DepthToSpace,
// SpaceToDepth, Shape, Size, ConstantOfShape, Range. Each data-moving kernel describes its
// output as a strided view of its input and copies that view (CopyStrided), so every input
// stride pattern works the same way.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/status_macros.h"
#include "kernels/reference/data_movement.h"

namespace dynvm::reference {
namespace {

using InSpan = absl::Span<const Tensor* const>;
using OutSpan = absl::Span<Tensor* const>;

struct NoAttrs {};

// ---- Copy (dynvm): materializes a view ----

absl::Status RunCopy(const void*, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 1, out, 1, "Copy");
  if (!s.ok()) return s;
  return EmitReshaped(ctx, *in[0], in[0]->dims(), out[0], "Copy");
}

// ---- Reshape ----

struct ReshapeAttrs {
  bool allowzero = false;
  bool has_shape_attr = false;  // opset 1: the shape is an attribute
  std::vector<int64_t> shape;
};

absl::StatusOr<Dims> ReshapeDims(absl::Span<const int64_t> in_dims, absl::Span<const int64_t> shape,
                                 bool allowzero, int64_t numel) {
  if (shape.size() > Tensor::kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("Reshape: target rank ", shape.size(), " exceeds ", Tensor::kMaxRank));
  }
  Dims dims(shape.begin(), shape.end());
  int infer = -1;
  bool has_zero = false;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      if (infer >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("Reshape: shape ", DimsString(shape), " has more than one -1"));
      }
      infer = static_cast<int>(i);
      continue;
    }
    if (dims[i] == 0 && !allowzero) {
      if (i >= in_dims.size()) {
        return absl::InvalidArgumentError(absl::StrCat("Reshape: shape ", DimsString(shape),
                                                       " copies dim ", i, " of an input of shape ",
                                                       DimsString(in_dims)));
      }
      dims[i] = in_dims[i];
    } else if (dims[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Reshape: shape ", DimsString(shape), " has a negative dim"));
    }
    if (dims[i] == 0) has_zero = true;
    if (__builtin_mul_overflow(known, dims[i], &known)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Reshape: shape ", DimsString(shape), " overflows"));
    }
  }
  if (infer >= 0) {
    if (has_zero || known == 0) {
      return absl::InvalidArgumentError(absl::StrCat("Reshape: cannot infer the -1 of ",
                                                     DimsString(shape), " next to a zero dim"));
    }
    if (numel % known != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Reshape: cannot reshape ", DimsString(in_dims), " to ", DimsString(shape)));
    }
    dims[infer] = numel / known;
  } else if (known != numel) {
    return absl::InvalidArgumentError(absl::StrCat("Reshape: cannot reshape ", DimsString(in_dims),
                                                   " (", numel, " elements) to ",
                                                   DimsString(dims)));
  }
  return dims;
}

absl::Status RunReshape(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  const auto& attrs = *static_cast<const ReshapeAttrs*>(a);
  absl::Status s = CheckPorts(in, attrs.has_shape_attr ? 1 : 2, out, 1, "Reshape");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  Dims shape(attrs.shape.begin(), attrs.shape.end());
  if (!attrs.has_shape_attr) {
    DYNVM_ASSIGN_OR_RETURN(Dims v, ReadInts(*in[1], "Reshape", "shape"));
    if (in[1]->rank() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("Reshape: shape must be 1-D, got ", in[1]->DebugString()));
    }
    shape = std::move(v);
  }
  DYNVM_ASSIGN_OR_RETURN(Dims dims, ReshapeDims(x.dims(), shape, attrs.allowzero, x.numel()));
  return EmitReshaped(ctx, x, dims, out[0], "Reshape");
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateReshape(const KernelSpec& spec) {
  ReshapeAttrs attrs;
  attrs.has_shape_attr = spec.Find("shape") != nullptr && spec.inputs.size() == 1;
  absl::Status s = CheckSpec(spec, attrs.has_shape_attr ? 1 : 2, 2);
  if (!s.ok()) return s;
  DYNVM_ASSIGN_OR_RETURN(int64_t allowzero, spec.GetInt("allowzero", 0));
  if (allowzero != 0 && allowzero != 1) {
    return absl::InvalidArgumentError("Reshape: allowzero must be 0 or 1");
  }
  attrs.allowzero = allowzero == 1;
  if (attrs.has_shape_attr) {
    absl::StatusOr<std::vector<int64_t>> shape = spec.GetInts("shape");
    if (!shape.ok()) return shape.status();
    attrs.shape = *std::move(shape);
  }
  return MakeKernel(spec, RunReshape, std::move(attrs));
}

// ---- Flatten ----

struct AxisAttrs {
  int64_t axis = 0;
};

absl::Status RunFlatten(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 1, out, 1, "Flatten");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  const int64_t axis = static_cast<const AxisAttrs*>(a)->axis;
  const int rank = x.rank();
  if (axis < -rank || axis > rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("Flatten: axis ", axis, " is out of range for ", x.DebugString()));
  }
  const int split = static_cast<int>(axis < 0 ? axis + rank : axis);
  int64_t outer = 1;
  for (int i = 0; i < split; ++i) outer *= x.dim(i);
  int64_t inner = 1;
  for (int i = split; i < rank; ++i) inner *= x.dim(i);
  const int64_t dims[2] = {outer, inner};
  return EmitReshaped(ctx, x, dims, out[0], "Flatten");
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateFlatten(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, 1, 1);
  if (!s.ok()) return s;
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", 1));
  return MakeKernel(spec, RunFlatten, AxisAttrs{axis});
}

// ---- Squeeze / Unsqueeze ----

struct AxesAttrs {
  bool has_axes = false;  // the axes attribute (before opset 13)
  std::vector<int64_t> axes;
};

// The axes from the optional input `index` (opset 13) or else the attribute. `present` is false
// when neither gives them.
absl::StatusOr<Dims> AxesFrom(const AxesAttrs& attrs, InSpan in, size_t index, absl::string_view op,
                              bool* present) {
  const Tensor* t = OptionalInput(in, index);
  *present = true;
  if (t != nullptr) {
    if (t->rank() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": axes must be 1-D, got ", t->DebugString()));
    }
    return ReadInts(*t, op, "axes");
  }
  *present = attrs.has_axes;
  return Dims(attrs.axes.begin(), attrs.axes.end());
}

absl::Status RunSqueeze(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 1, out, 1, "Squeeze");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  bool present;
  DYNVM_ASSIGN_OR_RETURN(Dims axes,
                         AxesFrom(*static_cast<const AxesAttrs*>(a), in, 1, "Squeeze", &present));
  bool drop[Tensor::kMaxRank] = {};
  if (present && !axes.empty()) {  // empty axes squeeze every 1, like absent ones
    DYNVM_ASSIGN_OR_RETURN(AxisList norm, NormalizeAxes(axes, x.rank(), "Squeeze"));
    for (int ax : norm) {
      if (x.dim(ax) != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("Squeeze: dim ", ax, " of ", x.DebugString(), " is not 1"));
      }
      drop[ax] = true;
    }
  } else {
    for (int i = 0; i < x.rank(); ++i) drop[i] = x.dim(i) == 1;
  }
  int64_t dims[Tensor::kMaxRank];
  size_t n = 0;
  for (int i = 0; i < x.rank(); ++i) {
    if (!drop[i]) dims[n++] = x.dim(i);
  }
  return EmitReshaped(ctx, x, absl::MakeConstSpan(dims, n), out[0], "Squeeze");
}

absl::Status RunUnsqueeze(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 1, out, 1, "Unsqueeze");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  bool present;
  DYNVM_ASSIGN_OR_RETURN(Dims axes,
                         AxesFrom(*static_cast<const AxesAttrs*>(a), in, 1, "Unsqueeze", &present));
  if (!present) return absl::InvalidArgumentError("Unsqueeze: axes are required");
  const size_t out_rank = x.rank() + axes.size();
  if (out_rank > Tensor::kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("Unsqueeze: output rank ", out_rank, " exceeds ", Tensor::kMaxRank));
  }
  DYNVM_ASSIGN_OR_RETURN(AxisList norm,
                         NormalizeAxes(axes, static_cast<int>(out_rank), "Unsqueeze"));
  bool inserted[Tensor::kMaxRank] = {};
  for (int ax : norm) inserted[ax] = true;
  Dims dims;
  int next = 0;
  for (size_t i = 0; i < out_rank; ++i) dims.push_back(inserted[i] ? 1 : x.dim(next++));
  return EmitReshaped(ctx, x, dims, out[0], "Unsqueeze");
}

template <FunctionKernel::RunFn kRun>
absl::StatusOr<std::unique_ptr<Kernel>> CreateSqueezeLike(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, 1, 2);
  if (!s.ok()) return s;
  AxesAttrs attrs;
  attrs.has_axes = spec.Find("axes") != nullptr;
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> axes, spec.GetInts("axes"));
  attrs.axes = std::move(axes);
  return MakeKernel(spec, kRun, std::move(attrs));
}

// ---- Transpose ----

struct TransposeAttrs {
  bool has_perm = false;
  std::vector<int64_t> perm;
};

absl::Status RunTranspose(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 1, out, 1, "Transpose");
  if (!s.ok()) return s;
  const auto& attrs = *static_cast<const TransposeAttrs*>(a);
  const Tensor& x = *in[0];
  const int rank = x.rank();
  if (attrs.has_perm && attrs.perm.size() != static_cast<size_t>(rank)) {
    return absl::InvalidArgumentError(absl::StrCat("Transpose: perm ", DimsString(attrs.perm),
                                                   " does not fit ", x.DebugString()));
  }
  Dims dims(rank), strides(rank);
  for (int i = 0; i < rank; ++i) {
    const int p = attrs.has_perm ? static_cast<int>(attrs.perm[i]) : rank - 1 - i;
    dims[i] = x.dim(p);
    strides[i] = x.stride(p);
  }
  return EmitView(ctx, x, 0, dims, strides, dims, out[0], "Transpose");
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateTranspose(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, 1, 1);
  if (!s.ok()) return s;
  TransposeAttrs attrs;
  attrs.has_perm = spec.Find("perm") != nullptr;
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> perm, spec.GetInts("perm"));
  attrs.perm = std::move(perm);
  std::vector<bool> seen(attrs.perm.size());
  for (int64_t p : attrs.perm) {
    if (p < 0 || p >= static_cast<int64_t>(attrs.perm.size()) || seen[p]) {
      return absl::InvalidArgumentError(
          absl::StrCat("Transpose: perm ", DimsString(attrs.perm), " is not a permutation"));
    }
    seen[p] = true;
  }
  return MakeKernel(spec, RunTranspose, std::move(attrs));
}

// ---- Expand ----

absl::Status RunExpand(const void*, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 2, out, 1, "Expand");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  DYNVM_ASSIGN_OR_RETURN(Dims shape, ReadInts(*in[1], "Expand", "shape"));
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Expand: shape ", DimsString(shape), " has a negative dim"));
    }
  }
  absl::StatusOr<Dims> dims = BroadcastShapes(x.dims(), shape);
  if (!dims.ok())
    return absl::InvalidArgumentError(absl::StrCat("Expand: ", dims.status().message()));
  if (dims->size() > Tensor::kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("Expand: output rank ", dims->size(), " exceeds ", Tensor::kMaxRank));
  }
  const Dims strides = BroadcastStrides(x, *dims);
  return EmitView(ctx, x, 0, *dims, strides, *dims, out[0], "Expand");
}

// ---- Tile ----

absl::Status RunTile(const void*, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 2, out, 1, "Tile");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  DYNVM_ASSIGN_OR_RETURN(Dims repeats, ReadInts(*in[1], "Tile", "repeats"));
  if (repeats.size() != static_cast<size_t>(x.rank())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Tile: repeats ", DimsString(repeats), " do not match ", x.DebugString()));
  }
  // The output, viewed as [r0, d0, r1, d1, ...], reads x with stride 0 along each r.
  Dims out_dims(x.rank());
  ViewDims view_dims, view_strides;
  for (int i = 0; i < x.rank(); ++i) {
    const int64_t r = (repeats)[i];
    if (r < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Tile: repeats ", DimsString(repeats), " has a negative value"));
    }
    if (__builtin_mul_overflow(x.dim(i), r, &out_dims[i])) {
      return absl::InvalidArgumentError("Tile: output size overflows");
    }
    view_dims.push_back(r);
    view_dims.push_back(x.dim(i));
    view_strides.push_back(0);
    view_strides.push_back(x.stride(i));
  }
  return EmitView(ctx, x, 0, view_dims, view_strides, out_dims, out[0], "Tile");
}

// ---- DepthToSpace / SpaceToDepth ----

struct BlockAttrs {
  int64_t blocksize = 0;
  bool crd = false;  // DepthToSpace mode CRD (else DCR)
};

absl::StatusOr<BlockAttrs> ReadBlockAttrs(const KernelSpec& spec, bool with_mode) {
  absl::Status s = CheckSpec(spec, 1, 1);
  if (!s.ok()) return s;
  BlockAttrs attrs;
  if (spec.Find("blocksize") == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(spec.op, ": blocksize is required"));
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t bs, spec.GetInt("blocksize", 0));
  if (bs <= 0 || bs > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(spec.op, ": blocksize ", bs, " is invalid"));
  }
  attrs.blocksize = bs;
  if (with_mode) {
    DYNVM_ASSIGN_OR_RETURN(std::string mode, spec.GetString("mode", "DCR"));
    if (mode != "DCR" && mode != "CRD") {
      return absl::InvalidArgumentError(absl::StrCat(spec.op, ": unknown mode '", mode, "'"));
    }
    attrs.crd = mode == "CRD";
  }
  return attrs;
}

absl::Status RunDepthToSpace(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 1, out, 1, "DepthToSpace");
  if (!s.ok()) return s;
  const auto& attrs = *static_cast<const BlockAttrs*>(a);
  const Tensor& x = *in[0];
  const int64_t bs = attrs.blocksize;
  if (x.rank() != 4 || x.dim(1) % (bs * bs) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("DepthToSpace: input ", x.DebugString(),
                                                   " is not [N, C, H, W] with C divisible by ",
                                                   bs * bs));
  }
  const int64_t n = x.dim(0), c = x.dim(1) / (bs * bs), h = x.dim(2), w = x.dim(3);
  const int64_t sn = x.stride(0), sc = x.stride(1), sh = x.stride(2), sw = x.stride(3);
  // Output viewed as [N, C', H, b1, W, b2]; the channel read is b1 * bs * C' + b2 * C' + c
  // (DCR) or c * bs * bs + b1 * bs + b2 (CRD).
  const int64_t view_dims[6] = {n, c, h, bs, w, bs};
  int64_t view_strides[6];
  if (attrs.crd) {
    const int64_t v[6] = {sn, bs * bs * sc, sh, bs * sc, sw, sc};
    std::copy(v, v + 6, view_strides);
  } else {
    const int64_t v[6] = {sn, sc, sh, bs * c * sc, sw, c * sc};
    std::copy(v, v + 6, view_strides);
  }
  const int64_t out_dims[4] = {n, c, h * bs, w * bs};
  return EmitView(ctx, x, 0, view_dims, view_strides, out_dims, out[0], "DepthToSpace");
}

absl::Status RunSpaceToDepth(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 1, out, 1, "SpaceToDepth");
  if (!s.ok()) return s;
  const int64_t bs = static_cast<const BlockAttrs*>(a)->blocksize;
  const Tensor& x = *in[0];
  if (x.rank() != 4 || x.dim(2) % bs != 0 || x.dim(3) % bs != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SpaceToDepth: input ", x.DebugString(),
                     " is not [N, C, H, W] with H and W divisible by ", bs));
  }
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2) / bs, w = x.dim(3) / bs;
  const int64_t sn = x.stride(0), sc = x.stride(1), sh = x.stride(2), sw = x.stride(3);
  // Output viewed as [N, b1, b2, C, H', W']: out channel (b1 * bs + b2) * C + c.
  const int64_t view_dims[6] = {n, bs, bs, c, h, w};
  const int64_t view_strides[6] = {sn, sh, sw, sc, bs * sh, bs * sw};
  int64_t out_c;
  if (__builtin_mul_overflow(c, bs * bs, &out_c)) {
    return absl::InvalidArgumentError("SpaceToDepth: output size overflows");
  }
  const int64_t out_dims[4] = {n, out_c, h, w};
  return EmitView(ctx, x, 0, view_dims, view_strides, out_dims, out[0], "SpaceToDepth");
}

// ---- Shape / Size ----

struct ShapeAttrs {
  int64_t start = 0;
  bool has_end = false;
  int64_t end = 0;
};

absl::Status RunShape(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 1, out, 1, "Shape");
  if (!s.ok()) return s;
  const auto& attrs = *static_cast<const ShapeAttrs*>(a);
  const Tensor& x = *in[0];
  const int64_t rank = x.rank();
  auto clamp = [rank](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
  const int64_t start = clamp(attrs.start);
  const int64_t end = attrs.has_end ? clamp(attrs.end) : rank;
  const int64_t n = std::max<int64_t>(end - start, 0);
  const int64_t dims[1] = {n};
  s = PrepareDataOutput(ctx, out[0], DType::kI64, dims, "Shape");
  if (!s.ok()) return s;
  for (int64_t i = 0; i < n; ++i) out[0]->data<int64_t>()[i] = x.dim(static_cast<int>(start + i));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateShape(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, 1, 1, {});
  if (!s.ok()) return s;
  ShapeAttrs attrs;
  DYNVM_ASSIGN_OR_RETURN(int64_t start, spec.GetInt("start", 0));
  attrs.start = start;
  attrs.has_end = spec.Find("end") != nullptr;
  absl::StatusOr<int64_t> end = spec.GetInt("end", 0);
  if (!end.ok()) return end.status();
  attrs.end = *end;
  return MakeKernel(spec, RunShape, attrs);
}

absl::Status RunSize(const void*, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 1, out, 1, "Size");
  if (!s.ok()) return s;
  s = PrepareDataOutput(ctx, out[0], DType::kI64, {}, "Size");
  if (!s.ok()) return s;
  *out[0]->data<int64_t>() = in[0]->numel();
  return absl::OkStatus();
}

// ---- ConstantOfShape ----

struct ConstantAttrs {
  DType dtype = DType::kF32;
  uint64_t bits = 0;  // the value as an element of `dtype`, in the low DTypeSize bytes
};

absl::Status RunConstantOfShape(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 1, out, 1, "ConstantOfShape");
  if (!s.ok()) return s;
  const auto& attrs = *static_cast<const ConstantAttrs*>(a);
  DYNVM_ASSIGN_OR_RETURN(Dims shape, ReadInts(*in[0], "ConstantOfShape", "shape"));
  if (shape.size() > Tensor::kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("ConstantOfShape: rank ", shape.size(), " exceeds ", Tensor::kMaxRank));
  }
  absl::StatusOr<int64_t> numel = CheckedNumel(shape);
  if (!numel.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ConstantOfShape: shape ", DimsString(shape), ": ", numel.status().message()));
  }
  s = PrepareDataOutput(ctx, out[0], attrs.dtype, shape, "ConstantOfShape");
  if (!s.ok()) return s;
  return DispatchBySize(attrs.dtype, "ConstantOfShape", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    T v;
    std::memcpy(&v, &attrs.bits, sizeof(T));
    std::fill_n(out[0]->data<T>(), *numel, v);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateConstantOfShape(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, 1, 1, {});
  if (!s.ok()) return s;
  ConstantAttrs attrs;
  const AttrValue* value = spec.Find("value");
  if (value != nullptr && value->type != AttrValue::Type::kTensor) {
    return absl::InvalidArgumentError("ConstantOfShape: value must be a tensor attribute");
  }
  const Tensor* vt = value != nullptr ? &value->tensor : nullptr;
  if (vt != nullptr && (!vt->defined() || vt->numel() != 1 || vt->device() != Device::kCPU)) {
    return absl::InvalidArgumentError(
        "ConstantOfShape: value must be a one-element tensor on the CPU");
  }
  const DType value_dtype = vt != nullptr ? vt->dtype() : DType::kF32;
  attrs.dtype = spec.outputs[0].dtype_or(value_dtype);
  if (attrs.dtype == DType::kString || value_dtype == DType::kString) {
    return absl::UnimplementedError("ConstantOfShape: string tensors are not supported");
  }
  ScalarValue v;  // 0.0 when absent
  if (vt != nullptr) {
    s = DispatchNumeric(value_dtype, "ConstantOfShape", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      v = ScalarValue::From(*vt->data<T>());
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
  }
  s = DispatchNumeric(attrs.dtype, "ConstantOfShape", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T t = v.To<T>();
    std::memcpy(&attrs.bits, &t, sizeof(T));
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return MakeKernel(spec, RunConstantOfShape, attrs);
}

// ---- Range ----

template <typename T>
absl::Status RangeTyped(KernelContext& ctx, const Tensor& start_t, const Tensor& limit_t,
                        const Tensor& delta_t, Tensor* out) {
  if constexpr (std::is_same_v<T, bool>) {
    return absl::UnimplementedError("Range: bool is not supported");
  }
  const T start = *start_t.data<T>();
  const T limit = *limit_t.data<T>();
  const T delta = *delta_t.data<T>();
  int64_t n = 0;
  if constexpr (std::is_integral_v<T>) {
    if (delta == 0) return absl::InvalidArgumentError("Range: delta is 0");
    const __int128 diff = static_cast<__int128>(limit) - static_cast<__int128>(start);
    const __int128 d = delta;
    // ceil(diff / d) with truncating division.
    __int128 q = diff / d;
    if ((diff % d != 0) && ((diff > 0) == (d > 0))) ++q;
    n = q <= 0 ? 0 : q > INT64_MAX ? INT64_MAX : static_cast<int64_t>(q);
  } else {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;  // compute type
    const double s = static_cast<C>(start);
    const double l = static_cast<C>(limit);
    const double d = static_cast<C>(delta);
    const double count = std::ceil((l - s) / d);
    if (d == 0 || std::isnan(count) || count >= 9.2e18) {
      return absl::InvalidArgumentError(absl::StrCat("Range: start ", s, ", limit ", l,
                                                     " and delta ", d, " give no finite count"));
    }
    n = count <= 0 ? 0 : static_cast<int64_t>(count);
  }
  const int64_t dims[1] = {n};
  absl::Status st = PrepareDataOutput(ctx, out, start_t.dtype(), dims, "Range");
  if (!st.ok()) return st;
  T* o = out->data<T>();
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_integral_v<T>) {
      // start + i * delta lies in [start, limit), so it fits in T.
      o[i] = static_cast<T>(static_cast<__int128>(start) + static_cast<__int128>(i) * delta);
    } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
      o[i] = start + static_cast<T>(i) * delta;
    } else {
      o[i] = T(static_cast<float>(start) + static_cast<float>(i) * static_cast<float>(delta));
    }
  }
  return absl::OkStatus();
}

absl::Status RunRange(const void*, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 3, out, 1, "Range");
  if (!s.ok()) return s;
  for (int i = 0; i < 3; ++i) {
    if (in[i]->numel() != 1 || in[i]->dtype() != in[0]->dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Range: start, limit and delta must be scalars of one dtype, got ", in[0]->DebugString(),
          ", ", in[1]->DebugString(), ", ", in[2]->DebugString()));
    }
  }
  return DispatchNumeric(in[0]->dtype(), "Range", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return RangeTyped<T>(ctx, *in[0], *in[1], *in[2], out[0]);
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateRange(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, 3, 3);
  if (!s.ok()) return s;
  if (spec.inputs[0].dtype == static_cast<uint8_t>(DType::kBool)) {
    return absl::UnimplementedError("Range: bool is not supported");
  }
  return MakeKernel(spec, RunRange, NoAttrs{});
}

// A factory for kernels without attributes.
template <FunctionKernel::RunFn kRun, size_t kMinIn, size_t kMaxIn>
absl::StatusOr<std::unique_ptr<Kernel>> CreatePlain(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, kMinIn, kMaxIn);
  if (!s.ok()) return s;
  return MakeKernel(spec, kRun, NoAttrs{});
}

}  // namespace

void RegisterShapeKernels(KernelRegistry& r) {
  AddReferenceKernel(r, "dynvm", "Copy", CreatePlain<RunCopy, 1, 1>);
  AddReferenceKernel(r, "", "Reshape", CreateReshape);
  AddReferenceKernel(r, "", "Flatten", CreateFlatten);
  AddReferenceKernel(r, "", "Squeeze", CreateSqueezeLike<RunSqueeze>);
  AddReferenceKernel(r, "", "Unsqueeze", CreateSqueezeLike<RunUnsqueeze>);
  AddReferenceKernel(r, "", "Transpose", CreateTranspose);
  AddReferenceKernel(r, "", "Expand", CreatePlain<RunExpand, 2, 2>);
  AddReferenceKernel(r, "", "Tile", CreatePlain<RunTile, 2, 2>);
  AddReferenceKernel(
      r, "", "DepthToSpace", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_ASSIGN_OR_RETURN(BlockAttrs attrs, ReadBlockAttrs(spec, /*with_mode=*/true));
        return MakeKernel(spec, RunDepthToSpace, attrs);
      });
  AddReferenceKernel(
      r, "", "SpaceToDepth", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_ASSIGN_OR_RETURN(BlockAttrs attrs, ReadBlockAttrs(spec, /*with_mode=*/false));
        return MakeKernel(spec, RunSpaceToDepth, attrs);
      });
  AddReferenceKernel(r, "", "Shape", CreateShape);
  AddReferenceKernel(r, "", "Size",
                     [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                       absl::Status s = CheckSpec(spec, 1, 1, {});
                       if (!s.ok()) return s;
                       return MakeKernel(spec, RunSize, NoAttrs{});
                     });
  AddReferenceKernel(r, "", "ConstantOfShape", CreateConstantOfShape);
  AddReferenceKernel(r, "", "Range", CreateRange);
  RegisterSlicePadKernels(r);
  RegisterGatherScatterKernels(r);
}

}  // namespace dynvm::reference
