// The signal (DFT, STFT, MelWeightMatrix, the windows), vision (GridSample, RoiAlign, MaxUnpool,
// MeanVarianceNormalization, NonMaxSuppression) and random (Bernoulli, RandomUniform,
// RandomNormal, RandomUniformLike, RandomNormalLike) operators. Sizes that depend on input values
// (a DFT length, a frame count, a window's size, the boxes kept) are fresh symbols the kernel
// decides at run time. The random operators are impure: never constant-folded, deduplicated or
// hoisted.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/ops/names.h"
#include "compiler/ops/op_def.h"
#include "compiler/ops/shape_util.h"

namespace dynvm::compiler {
namespace {

using shapes::Axis;
using shapes::ConstInts;
using shapes::Numel;
using shapes::SameAsInput;
using Shape = std::vector<Dim>;

// The dtype named by attribute `name` (an ONNX TensorProto type), else `def`.
// Bernoulli's output may be any numeric type or bool; the other random ops' floating point.
absl::StatusOr<DType> AttrDType(InferContext& c, const char* name, DType def) {
  if (!c.HasAttr(name)) return def;
  DYNVM_ASSIGN_OR_RETURN(int64_t t, c.GetInt(name, 1));
  std::optional<DType> d = DTypeFromOnnx(t);
  const bool any = c.node().op == ops::kBernoulli;
  if (!d || *d == DType::kString || (!any && !IsFloat(*d))) {
    return c.Error(absl::StrCat(name, " ", t, " is not a supported output type"));
  }
  return *d;
}

// The first input's shape with the attribute-named dtype (the *Like ops, Bernoulli).
absl::Status LikeInput(InferContext& c) {
  if (!c.has_input(0)) return c.Error("missing input 0");
  DYNVM_ASSIGN_OR_RETURN(DType d, AttrDType(c, "dtype", c.input_dtype(0)));
  if (!IsFloat(d) && c.node().op != ops::kBernoulli) {
    return c.Error("the output must be floating point: set dtype");
  }
  if (c.input_shape(0)) {
    c.SetOutput(0, d, *c.input_shape(0));
  } else {
    c.SetOutputUnknown(0, d);
  }
  return absl::OkStatus();
}

absl::Status RandomFromShape(InferContext& c) {
  if (!c.HasAttr("shape")) return c.Error("the shape attribute is required");
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> shape, c.GetInts("shape"));
  Shape dims;
  for (int64_t d : shape) {
    if (d < 0) return c.Error(absl::StrCat("negative size ", d, " in shape"));
    dims.push_back(c.sym().Const(d));
  }
  DYNVM_ASSIGN_OR_RETURN(DType d, AttrDType(c, "dtype", DType::kF32));
  c.SetOutput(0, d, std::move(dims));
  return absl::OkStatus();
}

absl::Status GridSample(InferContext& c) {
  const Shape* x = c.input_shape(0);
  const Shape* g = c.input_shape(1);
  if (x == nullptr || g == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  if (x->size() != 4 || g->size() != 4) {
    return c.Error("GridSample supports 4-D X [N, C, H, W] and grid [N, H_out, W_out, 2]");
  }
  c.SetOutput(0, c.input_dtype(0), {(*x)[0], (*x)[1], (*g)[1], (*g)[2]});
  return absl::OkStatus();
}

absl::Status RoiAlign(InferContext& c) {
  const Shape* x = c.input_shape(0);
  const Shape* rois = c.input_shape(1);
  DYNVM_ASSIGN_OR_RETURN(int64_t oh, c.GetInt("output_height", 1));
  DYNVM_ASSIGN_OR_RETURN(int64_t ow, c.GetInt("output_width", 1));
  if (oh < 1 || ow < 1) return c.Error("output_height and output_width must be >= 1");
  if (x == nullptr || rois == nullptr) {
    c.SetOutputDynamic(0, c.input_dtype(0), 4);
    return absl::OkStatus();
  }
  if (x->size() != 4 || rois->size() != 2) return c.Error("needs X [N, C, H, W] and rois [R, 4]");
  c.SetOutput(0, c.input_dtype(0), {(*rois)[0], (*x)[1], c.sym().Const(oh), c.sym().Const(ow)});
  return absl::OkStatus();
}

absl::Status MaxUnpool(InferContext& c) {
  const Shape* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
  } else {
    c.SetOutputDynamic(0, c.input_dtype(0), static_cast<int>(x->size()));
  }
  return absl::OkStatus();
}

absl::Status Mvn(InferContext& c) {
  if (!c.has_input(0)) return c.Error("missing input 0");
  if (c.input_shape(0)) {
    c.SetOutput(0, c.input_dtype(0), *c.input_shape(0));
  } else {
    c.SetOutputUnknown(0, c.input_dtype(0));
  }
  return absl::OkStatus();
}

// DFT (opset 17): the input's shape with the last dim 2 (complex) and the transformed axis
// resized (dft_length, or half plus one when onesided).
absl::Status Dft(InferContext& c) {
  const Shape* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  const int rank = static_cast<int>(x->size());
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, c.GetInt("axis", 1));
  DYNVM_ASSIGN_OR_RETURN(int64_t onesided, c.GetInt("onesided", 0));
  if (rank < 2) return c.Error("DFT needs an input of rank >= 2 ([..., 1 or 2])");
  if (axis < -rank || axis >= rank - 1) {
    return c.Error(absl::StrCat("axis ", axis, " out of range for rank ", rank));
  }
  const int ax = static_cast<int>(axis < 0 ? axis + rank : axis);
  Shape out = *x;
  out[rank - 1] = c.sym().Const(2);
  Dim n = (*x)[ax];
  if (c.has_input(1)) {
    const std::vector<Dim>* len = c.content(1);
    if (len == nullptr || len->size() != 1) {
      // A dft_length known only at run time: the kernel sizes the output (a fresh symbol here
      // would be read before anything defines it).
      c.SetOutputDynamic(0, c.input_dtype(0), rank);
      return absl::OkStatus();
    }
    n = (*len)[0];
  }
  out[ax] =
      onesided != 0 ? c.sym().Add(c.sym().FloorDiv(n, c.sym().Const(2)), c.sym().Const(1)) : n;
  c.SetOutput(0, c.input_dtype(0), std::move(out));
  return absl::OkStatus();
}

absl::Status Stft(InferContext& c) {
  c.SetOutputDynamic(0, c.input_dtype(0), 4);
  return absl::OkStatus();
}

absl::Status MelWeightMatrix(InferContext& c) {
  DYNVM_ASSIGN_OR_RETURN(int64_t t, c.GetInt("output_datatype", 1));
  std::optional<DType> d = DTypeFromOnnx(t);
  if (!d || *d == DType::kString || *d == DType::kBool) {
    return c.Error(absl::StrCat("unsupported output_datatype ", t));
  }
  c.SetOutputDynamic(0, *d, 2);
  return absl::OkStatus();
}

// HannWindow, HammingWindow, BlackmanWindow: 1-D of the size the input holds.
absl::Status WindowOp(InferContext& c) {
  DYNVM_ASSIGN_OR_RETURN(int64_t t, c.GetInt("output_datatype", 1));
  std::optional<DType> d = DTypeFromOnnx(t);
  if (!d || *d == DType::kString) return c.Error(absl::StrCat("unsupported output_datatype ", t));
  c.SetOutputDynamic(0, *d, 1);
  return absl::OkStatus();
}

// NonMaxSuppression: [selected, 3] indices, `selected` decided by the kernel.
absl::Status NonMaxSuppressionShape(InferContext& c) {
  c.SetOutput(0, DType::kI64, {c.sym().Fresh("selected"), c.sym().Const(3)});
  if (c.has_output(0)) c.node().outputs[0]->dynamic = true;
  return absl::OkStatus();
}

// DFT from opset 20 takes its axis as an input (a scalar; default -2, the last signal axis)
// instead of an attribute (default 1): a constant axis becomes the attribute the kernel reads.
absl::Status LowerDft(LowerContext& c) {
  if (c.opset < 20) return absl::OkStatus();
  int64_t axis = -2;
  if (c.node.inputs.size() > 2 && c.node.inputs[2] != nullptr) {
    const Value* v = c.node.inputs[2];
    if (!v->constant || v->constant->numel() != 1 ||
        (v->constant->dtype() != DType::kI64 && v->constant->dtype() != DType::kI32)) {
      return absl::UnimplementedError(absl::StrCat(
          c.label, ": DFT (opset 20): the axis must be a constant one-element integer tensor"));
    }
    const Tensor& t = *v->constant;
    axis = t.dtype() == DType::kI64 ? t.data<int64_t>()[0] : t.data<int32_t>()[0];
    c.node.inputs.resize(2);
    while (!c.node.inputs.empty() && c.node.inputs.back() == nullptr) c.node.inputs.pop_back();
  }
  AttrValue a;
  a.type = AttrValue::Type::kInt;
  a.i = axis;
  c.node.attrs["axis"] = a;
  return absl::OkStatus();
}

// GridSample from opset 20 names its modes "linear" and "cubic" (opset 16: "bilinear",
// "bicubic"; the kernel's names) and takes N-D input (the kernel takes 4-D).
absl::Status LowerGridSample(LowerContext& c) {
  auto it = c.node.attrs.find("mode");
  if (c.opset < 20 || it == c.node.attrs.end()) return absl::OkStatus();
  if (it->second.s == "linear") it->second.s = "bilinear";
  if (it->second.s == "cubic") it->second.s = "bicubic";
  return absl::OkStatus();
}

}  // namespace

void DefineSignalOps(OpTable& t) {
  static constexpr OpRow kRows[] = {
      {"GridSample", 7, "16:2:3 20:2:3 22:2:3", "align_corners:i mode:s padding_mode:s", kPure,
       GridSample, LowerGridSample},
      {"RoiAlign", 7, "16:3:7 22:3:7",
       "coordinate_transformation_mode:s mode:s output_height:i output_width:i sampling_ratio:i "
       "spatial_scale:f",
       kPure, RoiAlign},
      {"MaxUnpool", 7, "9:2:3 11:3:3 22:3:3", "kernel_shape:I pads:I strides:I", kPure, MaxUnpool},
      {"MeanVarianceNormalization", 7, "9:1:1 13:1:1", "axes:I", kPure, Mvn},
      {"NonMaxSuppression", 7, "10:5:3 11:5:3", "center_point_box:i", kPure,
       NonMaxSuppressionShape},
      {"DFT", 7, "17:2:1 20:3:1", "axis:i@17-20 inverse:i onesided:i", kPure, Dft, LowerDft},
      {"STFT", 7, "17:4:3", "onesided:i", kPure, Stft},
      {"MelWeightMatrix", 7, "17:5:31", "output_datatype:i", kPure, MelWeightMatrix},
      {"HannWindow", 7, "17:1:1", "output_datatype:i periodic:i", kPure, WindowOp},
      {"HammingWindow", 7, "17:1:1", "output_datatype:i periodic:i", kPure, WindowOp},
      {"BlackmanWindow", 7, "17:1:1", "output_datatype:i periodic:i", kPure, WindowOp},
      {ops::kBernoulli, 7, "15:1:1 22:1:1", "dtype:i seed:f", 0, LikeInput},
      {"RandomUniformLike", 1, "1:1:1 22:1:1", "dtype:i high:f low:f seed:f", 0, LikeInput},
      {"RandomNormalLike", 1, "1:1:1 22:1:1", "dtype:i mean:f scale:f seed:f", 0, LikeInput},
      {"RandomUniform", 1, "1:0:0 22:0:0", "dtype:i high:f low:f seed:f shape:I", 0,
       RandomFromShape},
      {"RandomNormal", 1, "1:0:0 22:0:0", "dtype:i mean:f scale:f seed:f shape:I", 0,
       RandomFromShape},
  };
  t.Add("", kRows);
}

}  // namespace dynvm::compiler
