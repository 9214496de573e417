// Reference kernels that cut, join and pad tensors along axes: Slice, Concat, Split, Pad,
// Trilu, ReverseSequence, Compress.
#include <algorithm>
#include <cstring>
#include <limits>

#include "common/status_macros.h"
#include "kernels/reference/data_movement.h"

namespace dynvm::reference {
namespace {

using InSpan = absl::Span<const Tensor* const>;
using OutSpan = absl::Span<Tensor* const>;

uint8_t* ElementPtr(const Tensor& t, int64_t offset) {
  return static_cast<uint8_t*>(t.raw_data()) + offset * DTypeSize(t.dtype());
}

// ---- Slice ----

struct SliceAttrs {
  bool attr_form = false;  // opset 1: starts, ends and axes are attributes
  bool has_axes = false;
  std::vector<int64_t> starts, ends, axes;
};

absl::StatusOr<Dims> Read1D(const Tensor& t, absl::string_view what) {
  if (t.rank() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Slice: ", what, " must be 1-D, got ", t.DebugString()));
  }
  return ReadInts(t, "Slice", what);
}

// The number of elements from `start` (inclusive) towards `end` (exclusive) by `step`, after
// ONNX's clamping. Updates start to the first element read.
int64_t SliceLength(int64_t dim, int64_t& start, int64_t end, int64_t step) {
  if (dim == 0) return 0;
  if (start < 0) start += dim;  // cannot overflow: dim > 0 and start < 0
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    return end > start ? 1 + (end - start - 1) / step : 0;
  }
  start = std::clamp<int64_t>(start, 0, dim - 1);
  end = std::clamp<int64_t>(end, -1, dim - 1);
  if (start <= end) return 0;
  const uint64_t magnitude = uint64_t{0} - static_cast<uint64_t>(step);  // |step|, even INT64_MIN
  return 1 + static_cast<int64_t>(static_cast<uint64_t>(start - end - 1) / magnitude);
}

absl::Status RunSlice(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  const auto& attrs = *static_cast<const SliceAttrs*>(a);
  absl::Status s = CheckPorts(in, attrs.attr_form ? 1 : 3, out, 1, "Slice");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  Dims starts(attrs.starts.begin(), attrs.starts.end()), ends(attrs.ends.begin(), attrs.ends.end()),
      axes(attrs.axes.begin(), attrs.axes.end()), steps;
  bool has_axes = attrs.has_axes;
  if (!attrs.attr_form) {
    absl::StatusOr<Dims> v = Read1D(*in[1], "starts");
    if (!v.ok()) return v.status();
    starts = *std::move(v);
    v = Read1D(*in[2], "ends");
    if (!v.ok()) return v.status();
    ends = *std::move(v);
    has_axes = OptionalInput(in, 3) != nullptr;
    if (has_axes) {
      v = Read1D(*in[3], "axes");
      if (!v.ok()) return v.status();
      axes = *std::move(v);
    }
    if (const Tensor* t = OptionalInput(in, 4); t != nullptr) {
      v = Read1D(*t, "steps");
      if (!v.ok()) return v.status();
      steps = *std::move(v);
    }
  }
  const size_t n = starts.size();
  if (!has_axes) {
    axes.resize(n);
    for (size_t i = 0; i < n; ++i) axes[i] = static_cast<int64_t>(i);
  }
  if (steps.empty()) steps.assign(n, 1);
  if (ends.size() != n || axes.size() != n || steps.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("Slice: starts, ends, axes and steps differ in length: ", n, ", ", ends.size(),
                     ", ", axes.size(), ", ", steps.size()));
  }
  DYNVM_ASSIGN_OR_RETURN(AxisList norm, NormalizeAxes(axes, x.rank(), "Slice"));
  Dims dims(x.dims().begin(), x.dims().end());
  Dims strides(x.strides().begin(), x.strides().end());
  int64_t offset = 0;
  bool empty = false;
  for (size_t i = 0; i < n; ++i) {
    const int ax = (norm)[i];
    if (steps[i] == 0) return absl::InvalidArgumentError("Slice: step is 0");
    int64_t start = starts[i];
    const int64_t len = SliceLength(x.dim(ax), start, ends[i], steps[i]);
    dims[ax] = len;
    if (len == 0) empty = true;
    if (len > 0) offset += start * x.stride(ax);
    // |step| * (len - 1) < dim, so the product fits whenever more than one element is read.
    strides[ax] = len > 1 ? x.stride(ax) * steps[i] : 0;
  }
  return EmitView(ctx, x, empty ? 0 : offset, dims, strides, dims, out[0], "Slice");
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSlice(const KernelSpec& spec) {
  SliceAttrs attrs;
  attrs.attr_form = spec.Find("starts") != nullptr;
  absl::Status s = attrs.attr_form ? CheckSpec(spec, 1, 1) : CheckSpec(spec, 3, 5);
  if (!s.ok()) return s;
  if (attrs.attr_form) {
    absl::StatusOr<std::vector<int64_t>> v = spec.GetInts("starts");
    if (!v.ok()) return v.status();
    attrs.starts = *std::move(v);
    v = spec.GetInts("ends");
    if (!v.ok()) return v.status();
    attrs.ends = *std::move(v);
    attrs.has_axes = spec.Find("axes") != nullptr;
    v = spec.GetInts("axes");
    if (!v.ok()) return v.status();
    attrs.axes = *std::move(v);
    if (attrs.ends.size() != attrs.starts.size() ||
        (attrs.has_axes && attrs.axes.size() != attrs.starts.size())) {
      return absl::InvalidArgumentError("Slice: starts, ends and axes differ in length");
    }
  }
  return MakeKernel(spec, RunSlice, std::move(attrs));
}

// ---- Concat ----

struct AxisAttrs {
  int64_t axis = 0;
};

absl::Status RunConcat(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, in.size(), out, 1, "Concat");
  if (!s.ok()) return s;
  if (in.empty()) return absl::InvalidArgumentError("Concat: no inputs");
  const Tensor& first = *in[0];
  DYNVM_ASSIGN_OR_RETURN(
      int ax, NormalizeAxis(static_cast<const AxisAttrs*>(a)->axis, first.rank(), "Concat"));
  Dims dims(first.dims().begin(), first.dims().end());
  dims[ax] = 0;
  for (const Tensor* t : in) {
    bool match = t->rank() == first.rank() && t->dtype() == first.dtype();
    for (int d = 0; match && d < first.rank(); ++d) {
      match = d == ax || t->dim(d) == first.dim(d);
    }
    if (!match) {
      return absl::InvalidArgumentError(absl::StrCat("Concat: inputs ", first.DebugString(),
                                                     " and ", t->DebugString(),
                                                     " differ outside axis ", ax));
    }
    if (__builtin_add_overflow(dims[ax], t->dim(ax), &dims[ax])) {
      return absl::InvalidArgumentError("Concat: output size overflows");
    }
  }
  s = PrepareDataOutput(ctx, out[0], first.dtype(), dims, "Concat");
  if (!s.ok()) return s;
  int64_t out_strides[Tensor::kMaxRank];
  ContiguousStrides(dims, out_strides);
  const absl::Span<const int64_t> dst_strides(out_strides, dims.size());
  const int64_t esize = DTypeSize(first.dtype());
  int64_t position = 0;
  for (const Tensor* t : in) {
    if (t->numel() > 0) {
      CopyStrided(esize, t->dims(), t->raw_data(), t->strides(),
                  ElementPtr(*out[0], position * out_strides[ax]), dst_strides);
    }
    position += t->dim(ax);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateConcat(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, 1, 1 << 20);
  if (!s.ok()) return s;
  if (spec.Find("axis") == nullptr) return absl::InvalidArgumentError("Concat: axis is required");
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", 0));
  return MakeKernel(spec, RunConcat, AxisAttrs{axis});
}

// ---- Split ----

struct SplitAttrs {
  int64_t axis = 0;
  bool has_split = false;  // the split attribute (before opset 13)
  std::vector<int64_t> split;
  int64_t num_outputs = 0;  // opset 18; 0 when absent
};

absl::Status RunSplit(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  const auto& attrs = *static_cast<const SplitAttrs*>(a);
  absl::Status s = CheckPorts(in, 1, out, 0, "Split");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  DYNVM_ASSIGN_OR_RETURN(int ax, NormalizeAxis(attrs.axis, x.rank(), "Split"));
  const int64_t dim = x.dim(ax);
  const int64_t n_out = static_cast<int64_t>(out.size());
  std::vector<int64_t> sizes;
  // An empty split input counts as absent, as some exporters write one.
  if (const Tensor* t = OptionalInput(in, 1); t != nullptr && t->numel() > 0) {
    DYNVM_ASSIGN_OR_RETURN(Dims v, ReadInts(*t, "Split", "split"));
    sizes.assign(v.begin(), v.end());
  } else if (attrs.has_split) {
    sizes = attrs.split;
  } else if (n_out > 0) {
    // Equal parts; with num_outputs (opset 18) the last one may be smaller.
    const int64_t chunk = dim / n_out + (dim % n_out != 0 ? 1 : 0);
    if (attrs.num_outputs == 0 && dim % n_out != 0) {
      return absl::InvalidArgumentError(absl::StrCat("Split: dim ", dim, " of ", x.DebugString(),
                                                     " does not split into ", n_out,
                                                     " equal parts"));
    }
    const int64_t last = dim - chunk * (n_out - 1);
    if (last < 0) {
      return absl::InvalidArgumentError(absl::StrCat("Split: dim ", dim, " of ", x.DebugString(),
                                                     " cannot make ", n_out, " chunks of ", chunk));
    }
    sizes.assign(n_out, chunk);
    sizes.back() = last;
  }
  int64_t total = 0;
  bool valid = static_cast<int64_t>(sizes.size()) == n_out;
  for (int64_t v : sizes) {
    if (v < 0 || __builtin_add_overflow(total, v, &total)) valid = false;
  }
  if (!valid || total != dim) {
    return absl::InvalidArgumentError(absl::StrCat("Split: sizes ", DimsString(sizes),
                                                   " do not split dim ", dim, " of ",
                                                   x.DebugString(), " into ", n_out, " outputs"));
  }
  Dims dims(x.dims().begin(), x.dims().end());
  int64_t position = 0;
  for (int64_t i = 0; i < n_out; ++i) {
    dims[ax] = sizes[i];
    if (out[i] != nullptr) {
      s = EmitView(ctx, x, sizes[i] > 0 ? position * x.stride(ax) : 0, dims, x.strides(), dims,
                   out[i], "Split");
      if (!s.ok()) return s;
    }
    position += sizes[i];
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSplit(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, 1, 2);
  if (!s.ok()) return s;
  SplitAttrs attrs;
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", 0));
  attrs.axis = axis;
  attrs.has_split = spec.Find("split") != nullptr;
  absl::StatusOr<std::vector<int64_t>> split = spec.GetInts("split");
  if (!split.ok()) return split.status();
  attrs.split = *std::move(split);
  absl::StatusOr<int64_t> num_outputs = spec.GetInt("num_outputs", 0);
  if (!num_outputs.ok()) return num_outputs.status();
  if (spec.Find("num_outputs") != nullptr &&
      (*num_outputs < 1 || *num_outputs != static_cast<int64_t>(spec.outputs.size()))) {
    return absl::InvalidArgumentError(absl::StrCat("Split: num_outputs ", *num_outputs,
                                                   " does not match the ", spec.outputs.size(),
                                                   " outputs"));
  }
  attrs.num_outputs = *num_outputs;
  return MakeKernel(spec, RunSplit, std::move(attrs));
}

// ---- Pad ----

// Marks an output coordinate that reads the pad value (offsets may be negative: strides can be).
constexpr int64_t kPadValue = std::numeric_limits<int64_t>::min();

}  // namespace

int64_t PadSource(PadMode mode, __int128 c, int64_t dim) {
  if (c >= 0 && c < dim) return static_cast<int64_t>(c);
  switch (mode) {
    case PadMode::kConstant:
      return -1;
    case PadMode::kEdge:
      return c < 0 ? 0 : dim - 1;
    case PadMode::kWrap: {
      __int128 m = c % dim;
      return static_cast<int64_t>(m < 0 ? m + dim : m);
    }
    case PadMode::kReflect: {
      if (dim == 1) return 0;
      const __int128 period = 2 * static_cast<__int128>(dim - 1);
      __int128 m = c % period;
      if (m < 0) m += period;
      return static_cast<int64_t>(m < dim ? m : period - m);
    }
  }
  return -1;
}

absl::StatusOr<PadPlan> PlanPad(const PadAttrs& attrs, InSpan in) {
  const Tensor& x = *in[0];
  const int rank = x.rank();
  absl::InlinedVector<int64_t, 2 * Tensor::kMaxRank> pads(attrs.pads.begin(), attrs.pads.end());
  if (const Tensor* t = OptionalInput(in, 1); t != nullptr) {
    DYNVM_ASSIGN_OR_RETURN(Dims v, ReadInts(*t, "Pad", "pads"));
    pads.assign(v.begin(), v.end());
  } else if (!attrs.has_pads) {
    return absl::InvalidArgumentError("Pad: pads are required");
  }
  AxisList axes;
  if (const Tensor* t = OptionalInput(in, 3); t != nullptr) {
    DYNVM_ASSIGN_OR_RETURN(Dims v, ReadInts(*t, "Pad", "axes"));
    DYNVM_ASSIGN_OR_RETURN(AxisList norm, NormalizeAxes(v, rank, "Pad"));
    axes = std::move(norm);
  } else {
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  }
  if (pads.size() != 2 * axes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Pad: pads ", DimsString(pads), " do not fit ", x.DebugString()));
  }
  PadPlan plan;
  plan.dims.assign(x.dims().begin(), x.dims().end());
  for (size_t i = 0; i < axes.size(); ++i) {
    const int ax = axes[i];
    plan.begin[ax] = pads[i];
    int64_t d;
    if (__builtin_add_overflow(x.dim(ax), pads[i], &d) ||
        __builtin_add_overflow(d, pads[i + axes.size()], &d) || d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Pad: pads ", DimsString(pads), " give a negative or huge dim for ", x.DebugString()));
    }
    plan.dims[ax] = d;
  }
  if (attrs.mode == PadMode::kConstant) {
    const Tensor* cv = OptionalInput(in, 2);
    if (cv != nullptr && cv->numel() > 0) {
      if (cv->numel() != 1 || cv->dtype() != x.dtype()) {
        return absl::InvalidArgumentError(
            absl::StrCat("Pad: constant_value must be one element of ", DTypeName(x.dtype()),
                         ", got ", cv->DebugString()));
      }
      std::memcpy(&plan.value_bits, cv->raw_data(), static_cast<size_t>(DTypeSize(x.dtype())));
    } else {
      absl::Status s = DispatchNumeric(x.dtype(), "Pad", [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        const T v = ScalarValue::From(attrs.value).template To<T>();
        std::memcpy(&plan.value_bits, &v, sizeof(T));
        return absl::OkStatus();
      });
      if (!s.ok()) return s;
    }
  }
  return plan;
}

namespace {

absl::Status RunPad(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  const auto& attrs = *static_cast<const PadAttrs*>(a);
  absl::Status s = CheckPorts(in, 1, out, 1, "Pad");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  const int rank = x.rank();
  DYNVM_ASSIGN_OR_RETURN(PadPlan plan, PlanPad(attrs, in));
  const Dims& dims = plan.dims;
  s = PrepareDataOutput(ctx, out[0], x.dtype(), dims, "Pad");
  if (!s.ok()) return s;
  if (out[0]->numel() == 0) return absl::OkStatus();
  if (rank == 0) {
    CopyToContiguous(x, out[0]->raw_data());
    return absl::OkStatus();
  }
  // Per axis, the element offset read for each output coordinate, or kPadValue.
  std::vector<int64_t> table_start(rank);
  std::vector<int64_t> table;
  for (int d = 0; d < rank; ++d) {
    if (x.dim(d) == 0 && attrs.mode != PadMode::kConstant) {
      return absl::InvalidArgumentError(absl::StrCat("Pad: cannot pad the empty dim ", d, " of ",
                                                     x.DebugString(), " in this mode"));
    }
    table_start[d] = static_cast<int64_t>(table.size());
    for (int64_t o = 0; o < dims[d]; ++o) {
      const int64_t src =
          x.dim(d) == 0 ? -1
                        : PadSource(attrs.mode, static_cast<__int128>(o) - plan.begin[d], x.dim(d));
      table.push_back(src < 0 ? kPadValue : src * x.stride(d));
    }
  }
  return DispatchBySize(x.dtype(), "Pad", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    T value;
    std::memcpy(&value, &plan.value_bits, sizeof(T));
    const T* src = x.data<T>();
    T* dst = out[0]->data<T>();
    const int inner = rank - 1;
    const int64_t* inner_table = table.data() + table_start[inner];
    const int64_t n_inner = dims[inner];
    int64_t idx[Tensor::kMaxRank] = {};
    while (true) {
      // The offset of the outer coordinates; the whole row is the pad value when any of them pads.
      int64_t base = 0;
      bool padded_row = false;
      for (int d = 0; d < inner; ++d) {
        const int64_t t = table[table_start[d] + idx[d]];
        if (t == kPadValue) {
          padded_row = true;
        } else {
          base += t;
        }
      }
      for (int64_t i = 0; i < n_inner; ++i) {
        const int64_t t = inner_table[i];
        dst[i] = padded_row || t == kPadValue ? value : src[base + t];
      }
      dst += n_inner;
      int d = inner - 1;
      for (; d >= 0; --d) {
        if (++idx[d] < dims[d]) break;
        idx[d] = 0;
      }
      if (d < 0) return absl::OkStatus();
    }
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreatePad(const KernelSpec& spec) {
  DYNVM_ASSIGN_OR_RETURN(PadAttrs attrs, ParsePadAttrs(spec));
  return MakeKernel(spec, RunPad, std::move(attrs));
}

}  // namespace

absl::StatusOr<PadAttrs> ParsePadAttrs(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, 1, 4);
  if (!s.ok()) return s;
  PadAttrs attrs;
  DYNVM_ASSIGN_OR_RETURN(std::string mode, spec.GetString("mode", "constant"));
  if (mode == "constant") {
    attrs.mode = PadMode::kConstant;
  } else if (mode == "reflect") {
    attrs.mode = PadMode::kReflect;
  } else if (mode == "edge") {
    attrs.mode = PadMode::kEdge;
  } else if (mode == "wrap") {
    attrs.mode = PadMode::kWrap;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("Pad: unknown mode '", mode, "'"));
  }
  // Opset 2..10 call the attribute "pads", opset 1 "paddings".
  const char* pads_name = spec.Find("pads") != nullptr ? "pads" : "paddings";
  attrs.has_pads = spec.Find(pads_name) != nullptr;
  absl::StatusOr<std::vector<int64_t>> pads = spec.GetInts(pads_name);
  if (!pads.ok()) return pads.status();
  attrs.pads = *std::move(pads);
  absl::StatusOr<float> value = spec.GetFloat("value", 0.0f);
  if (!value.ok()) return value.status();
  attrs.value = *value;
  return attrs;
}

namespace {

// ---- CenterCropPad (opset 18) ----

// Each of `axes` (default: all) cropped or zero-padded to its `shape` entry around the center: a
// crop starts at (dim - size) / 2, a pad puts (size - dim) / 2 before. Pad with the pads that make
// it (negative ones crop).
struct CenterCropPadAttrs {
  std::vector<int64_t> axes;
};

absl::Status RunCenterCropPad(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  const auto& attrs = *static_cast<const CenterCropPadAttrs*>(a);
  DYNVM_RETURN_IF_ERROR(CheckPorts(in, 2, out, 1, "CenterCropPad"));
  const Tensor& x = *in[0];
  const int rank = x.rank();
  DYNVM_ASSIGN_OR_RETURN(Dims shape, ReadInts(*in[1], "CenterCropPad", "shape"));
  AxisList axes;
  if (attrs.axes.empty()) {
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  } else {
    DYNVM_ASSIGN_OR_RETURN(axes, NormalizeAxes(attrs.axes, rank, "CenterCropPad"));
  }
  if (shape.size() != axes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("CenterCropPad: shape ", DimsString(shape),
                                                   " needs one value per axis (", axes.size(),
                                                   ") of ", x.DebugString()));
  }
  PadAttrs pad;
  pad.has_pads = true;
  pad.pads.assign(2 * rank, 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    if (shape[k] < 0) return absl::InvalidArgumentError("CenterCropPad: negative shape");
    const int ax = axes[k];
    const int64_t diff = shape[k] - x.dim(ax);
    const int64_t before = diff >= 0 ? diff / 2 : -((-diff) / 2);
    pad.pads[ax] = before;
    pad.pads[ax + rank] = diff - before;
  }
  const Tensor* just_x[] = {in[0]};
  return RunPad(&pad, ctx, absl::MakeConstSpan(just_x), out);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateCenterCropPad(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckSpec(spec, 2, 2));
  CenterCropPadAttrs attrs;
  DYNVM_ASSIGN_OR_RETURN(attrs.axes, spec.GetInts("axes"));
  return MakeKernel(spec, RunCenterCropPad, std::move(attrs));
}

// ---- Trilu ----

struct TriluAttrs {
  bool upper = true;
};

absl::Status RunTrilu(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 1, out, 1, "Trilu");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  if (x.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("Trilu: input ", x.DebugString(), " has rank below 2"));
  }
  int64_t k = 0;
  if (const Tensor* kt = OptionalInput(in, 1); kt != nullptr) {
    DYNVM_ASSIGN_OR_RETURN(Dims v, ReadInts(*kt, "Trilu", "k"));
    if (v.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("Trilu: k must have one element, got ", kt->DebugString()));
    }
    k = (v)[0];
  }
  s = EmitReshaped(ctx, x, x.dims(), out[0], "Trilu");
  if (!s.ok()) return s;
  const int64_t rows = x.dim(x.rank() - 2);
  const int64_t cols = x.dim(x.rank() - 1);
  if (rows == 0 || cols == 0) return absl::OkStatus();
  // Clamped so that row + k cannot overflow; any |k| >= rows + cols acts the same.
  k = std::clamp<int64_t>(k, -(rows + cols), rows + cols);
  const bool upper = static_cast<const TriluAttrs*>(a)->upper;
  const int64_t esize = DTypeSize(x.dtype());
  const int64_t matrices = x.numel() / (rows * cols);
  uint8_t* p = static_cast<uint8_t*>(out[0]->raw_data());
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t i = 0; i < rows; ++i, p += cols * esize) {
      // Zero the columns outside the kept triangle: upper keeps j >= i + k, lower j <= i + k.
      const int64_t lo = upper ? 0 : std::clamp<int64_t>(i + k + 1, 0, cols);
      const int64_t hi = upper ? std::clamp<int64_t>(i + k, 0, cols) : cols;
      if (hi > lo) std::memset(p + lo * esize, 0, static_cast<size_t>((hi - lo) * esize));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateTrilu(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, 1, 2);
  if (!s.ok()) return s;
  DYNVM_ASSIGN_OR_RETURN(int64_t upper, spec.GetInt("upper", 1));
  return MakeKernel(spec, RunTrilu, TriluAttrs{upper != 0});
}

// ---- ReverseSequence ----

struct ReverseSequenceAttrs {
  int batch_axis = 1;
  int time_axis = 0;
};

absl::Status RunReverseSequence(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  const auto& attrs = *static_cast<const ReverseSequenceAttrs*>(a);
  absl::Status s = CheckPorts(in, 2, out, 1, "ReverseSequence");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  if (x.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReverseSequence: input ", x.DebugString(), " has rank below 2"));
  }
  const int64_t batch = x.dim(attrs.batch_axis);
  const int64_t time = x.dim(attrs.time_axis);
  DYNVM_ASSIGN_OR_RETURN(Dims lens, ReadInts(*in[1], "ReverseSequence", "sequence_lens"));
  if (in[1]->rank() != 1 || static_cast<int64_t>(lens.size()) != batch) {
    return absl::InvalidArgumentError(absl::StrCat("ReverseSequence: sequence_lens ",
                                                   in[1]->DebugString(), " does not match ",
                                                   x.DebugString()));
  }
  for (int64_t len : lens) {
    if (len < 0 || len > time) {
      return absl::InvalidArgumentError(
          absl::StrCat("ReverseSequence: sequence length ", len, " is outside [0, ", time, "]"));
    }
  }
  s = PrepareDataOutput(ctx, out[0], x.dtype(), x.dims(), "ReverseSequence");
  if (!s.ok()) return s;
  int64_t out_strides[Tensor::kMaxRank];
  ContiguousStrides(x.dims(), out_strides);
  const absl::Span<const int64_t> slab_dims = x.dims().subspan(2);
  const absl::Span<const int64_t> slab_src = x.strides().subspan(2);
  const absl::Span<const int64_t> slab_dst(out_strides + 2, slab_dims.size());
  const int64_t esize = DTypeSize(x.dtype());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = (lens)[b];
    for (int64_t t = 0; t < time; ++t) {
      const int64_t src_t = t < len ? len - 1 - t : t;
      const int64_t src = b * x.stride(attrs.batch_axis) + src_t * x.stride(attrs.time_axis);
      const int64_t dst = b * out_strides[attrs.batch_axis] + t * out_strides[attrs.time_axis];
      CopyStrided(esize, slab_dims, ElementPtr(x, src), slab_src, ElementPtr(*out[0], dst),
                  slab_dst);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateReverseSequence(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, 2, 2);
  if (!s.ok()) return s;
  DYNVM_ASSIGN_OR_RETURN(int64_t batch_axis, spec.GetInt("batch_axis", 1));
  DYNVM_ASSIGN_OR_RETURN(int64_t time_axis, spec.GetInt("time_axis", 0));
  if ((batch_axis != 0 && batch_axis != 1) || (time_axis != 0 && time_axis != 1) ||
      batch_axis == time_axis) {
    return absl::InvalidArgumentError(
        "ReverseSequence: batch_axis and time_axis must be 0 and 1 in some order");
  }
  return MakeKernel(
      spec, RunReverseSequence,
      ReverseSequenceAttrs{static_cast<int>(batch_axis), static_cast<int>(time_axis)});
}

// ---- Compress ----

struct CompressAttrs {
  bool has_axis = false;
  int64_t axis = 0;
};

absl::Status RunCompress(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  const auto& attrs = *static_cast<const CompressAttrs*>(a);
  absl::Status s = CheckPorts(in, 2, out, 1, "Compress");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  const Tensor& cond = *in[1];
  if (cond.rank() != 1 || cond.dtype() != DType::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat("Compress: condition must be a 1-D bool tensor, got ", cond.DebugString()));
  }
  int ax = 0;
  int64_t dim = x.numel();
  if (attrs.has_axis) {
    DYNVM_ASSIGN_OR_RETURN(int n, NormalizeAxis(attrs.axis, x.rank(), "Compress"));
    ax = n;
    dim = x.dim(ax);
  }
  // Like numpy.compress: a shorter condition drops the rest; a longer one may only add falses.
  std::vector<int64_t> selected;
  const uint8_t* c = cond.data<uint8_t>();  // bytes: any nonzero byte is true
  for (int64_t i = 0; i < cond.dim(0); ++i) {
    if (!c[i * cond.stride(0)]) continue;
    if (i >= dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("Compress: condition selects index ", i, " beyond the size ", dim));
    }
    selected.push_back(i);
  }
  const int64_t esize = DTypeSize(x.dtype());
  const int64_t count = static_cast<int64_t>(selected.size());
  if (!attrs.has_axis) {
    const int64_t dims[1] = {count};
    s = PrepareDataOutput(ctx, out[0], x.dtype(), dims, "Compress");
    if (!s.ok()) return s;
    uint8_t* dst = static_cast<uint8_t*>(out[0]->raw_data());
    for (int64_t k = 0; k < count; ++k) {
      // Unravel the flat index over x's dims to find the element.
      int64_t rest = selected[k];
      int64_t offset = 0;
      for (int d = x.rank() - 1; d >= 0; --d) {
        offset += (rest % x.dim(d)) * x.stride(d);
        rest /= x.dim(d);
      }
      std::memmove(dst + k * esize, ElementPtr(x, offset), static_cast<size_t>(esize));
    }
    return absl::OkStatus();
  }
  Dims dims(x.dims().begin(), x.dims().end());
  dims[ax] = count;
  s = PrepareDataOutput(ctx, out[0], x.dtype(), dims, "Compress");
  if (!s.ok()) return s;
  int64_t out_strides[Tensor::kMaxRank];
  ContiguousStrides(dims, out_strides);
  Dims slab(dims);
  slab[ax] = 1;
  for (int64_t k = 0; k < count; ++k) {
    CopyStrided(esize, slab, ElementPtr(x, selected[k] * x.stride(ax)), x.strides(),
                ElementPtr(*out[0], k * out_strides[ax]),
                absl::MakeConstSpan(out_strides, dims.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateCompress(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, 2, 2);
  if (!s.ok()) return s;
  CompressAttrs attrs;
  attrs.has_axis = spec.Find("axis") != nullptr;
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", 0));
  attrs.axis = axis;
  return MakeKernel(spec, RunCompress, attrs);
}

}  // namespace

void RegisterSlicePadKernels(KernelRegistry& r) {
  AddReferenceKernel(r, "", "Slice", CreateSlice);
  AddReferenceKernel(r, "", "Concat", CreateConcat);
  AddReferenceKernel(r, "", "Split", CreateSplit);
  AddReferenceKernel(r, "", "Pad", CreatePad);
  AddReferenceKernel(r, "", "CenterCropPad", CreateCenterCropPad);
  AddReferenceKernel(r, "", "Trilu", CreateTrilu);
  AddReferenceKernel(r, "", "ReverseSequence", CreateReverseSequence);
  AddReferenceKernel(r, "", "Compress", CreateCompress);
}

}  // namespace dynvm::reference
