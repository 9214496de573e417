// ONNX's linear quantization operators, with their compile-time checks: QuantizeLinear,
// DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger and
// QLinearConv.
//
// Output types: DynamicQuantizeLinear u8 with an f32 scale and u8 zero point (scalars);
// QuantizeLinear the zero point's type (u8 without one); DequantizeLinear the
// scale's; MatMulInteger and ConvInteger i32; QLinearMatMul and QLinearConv y_zero_point's.
// Shapes: MatMul's (of inputs a and b), Conv's rank.
//
// Checks (InvalidArgument naming the node), on whatever is known at compile time: a scale or
// zero point of rank above 1; a per-axis length that is neither 1 nor the axis's size (when
// both are constant); a constant scale that is zero, negative, NaN or infinite; a constant zero
// point outside its quantized type's range, or of a type the operator does not take. The
// kernels repeat the value checks at run time (kernels/quant_params.h), where the VM's error
// names the node too.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/ops/names.h"
#include "compiler/ops/op_def.h"
#include "compiler/ops/shape_util.h"
#include "kernels/quant_params.h"

namespace dynvm::compiler {
namespace {

using shapes::Axis;
using shapes::ConstInts;
using shapes::Numel;
using shapes::SameAsInput;
using Shape = std::vector<Dim>;

bool Is8Bit(DType d) { return d == DType::kU8 || d == DType::kI8; }

std::optional<int64_t> KnownNumel(const Shape* s) {
  if (s == nullptr) return std::nullopt;
  int64_t n = 1;
  for (Dim d : *s) {
    std::optional<int64_t> v = SymbolicContext::AsConst(d);
    if (!v) return std::nullopt;
    n *= *v;
  }
  return n;
}

// Dim `i` of input `in` (negative: from the end) when constant.
std::optional<int64_t> KnownDim(InferContext& c, size_t in, int i) {
  const Shape* s = c.input_shape(in);
  if (s == nullptr) return std::nullopt;
  const int rank = static_cast<int>(s->size());
  if (i < 0) i += rank;
  if (i < 0 || i >= rank) return std::nullopt;
  return SymbolicContext::AsConst((*s)[i]);
}

enum class Param { kScale, kZeroPoint };

// Checks input `idx` (named `name`), a scale or a zero point quantizing to `quant`, that applies
// per tensor or per channel of `channels` (nullopt: unknown).
absl::Status CheckParam(InferContext& c, size_t idx, absl::string_view name, Param kind,
                        DType quant, std::optional<int64_t> channels) {
  if (!c.has_input(idx)) return absl::OkStatus();
  const Shape* shape = c.input_shape(idx);
  std::optional<int64_t> numel = KnownNumel(shape);
  if (shape != nullptr && shape->size() > 1 && numel != 1) {
    return c.Error(absl::StrCat(name, " must be a scalar or 1-D, not rank ", shape->size()));
  }
  if (numel && channels) {
    absl::Status s = CheckQuantLength(*numel, *channels, name);
    if (!s.ok()) return c.Error(s.message());
  }
  const Tensor* value = c.constant_input(idx);
  if (kind == Param::kScale) {
    if (!IsFloat(c.input_dtype(idx))) {
      return c.Error(
          absl::StrCat(name, " must be floating point, not ", DTypeName(c.input_dtype(idx))));
    }
    if (value != nullptr) {
      absl::Status s = CheckQuantScale(*value, name);
      if (!s.ok()) return c.Error(s.message());
    }
  } else if (value != nullptr) {
    absl::Status s = CheckZeroPoint(*value, quant, name);
    if (!s.ok()) return c.Error(s.message());
  }
  return absl::OkStatus();
}

// The per-axis channel count of QuantizeLinear / DequantizeLinear's x.
std::optional<int64_t> AxisChannels(InferContext& c) {
  absl::StatusOr<int64_t> axis = c.GetInt("axis", 1);
  if (!axis.ok()) return std::nullopt;
  return KnownDim(c, 0, static_cast<int>(*axis));
}

// output_dtype (QuantizeLinear 21, DequantizeLinear 23): 0 or the type the op makes anyway.
absl::Status CheckOutputDtype(InferContext& c, DType out) {
  DYNVM_ASSIGN_OR_RETURN(int64_t want, c.GetInt("output_dtype", 0));
  if (want == 0 || DTypeFromOnnx(want) == out) return absl::OkStatus();
  return c.Error(absl::StrCat("output_dtype ", OnnxTypeName(want), " is not supported here (",
                              DTypeName(out), " is what the inputs make)"));
}

absl::Status QuantizeLinear(InferContext& c) {
  DType out = DType::kU8;
  if (c.has_input(2)) {
    out = c.input_dtype(2);
    if (!Is8Bit(out)) {
      return c.Error(absl::StrCat("y_zero_point must be u8 or i8, not ", DTypeName(out)));
    }
  }
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 1, "y_scale", Param::kScale, out, AxisChannels(c)));
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 2, "y_zero_point", Param::kZeroPoint, out, AxisChannels(c)));
  DYNVM_RETURN_IF_ERROR(CheckOutputDtype(c, out));
  if (c.input_shape(0)) {
    c.SetOutput(0, out, *c.input_shape(0));
  } else {
    c.SetOutputUnknown(0, out);
  }
  return absl::OkStatus();
}

absl::Status DequantizeLinear(InferContext& c) {
  const DType x = c.input_dtype(0);
  if (!Is8Bit(x) && x != DType::kI32) {
    return c.Error(absl::StrCat("x must be u8, i8 or i32, not ", DTypeName(x)));
  }
  if (c.has_input(2) && c.input_dtype(2) != x) {
    return c.Error(
        absl::StrCat("x_zero_point is ", DTypeName(c.input_dtype(2)), " but x is ", DTypeName(x)));
  }
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 1, "x_scale", Param::kScale, x, AxisChannels(c)));
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 2, "x_zero_point", Param::kZeroPoint, x, AxisChannels(c)));
  const DType out = c.input_dtype(1);
  DYNVM_RETURN_IF_ERROR(CheckOutputDtype(c, out));
  if (c.input_shape(0)) {
    c.SetOutput(0, out, *c.input_shape(0));
  } else {
    c.SetOutputUnknown(0, out);
  }
  return absl::OkStatus();
}

// MatMul's output shape for inputs `ia` x `ib` (numpy rules), as `dtype`.
absl::Status ProductShape(InferContext& c, size_t ia, size_t ib, DType dtype) {
  const Shape* a = c.input_shape(ia);
  const Shape* b = c.input_shape(ib);
  if (!a || !b) {
    c.SetOutputUnknown(0, dtype);
    return absl::OkStatus();
  }
  if (a->empty() || b->empty()) return c.Error("a and b must have rank >= 1");
  Shape sa = *a, sb = *b;
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), c.sym().Const(1));
  if (b1) sb.push_back(c.sym().Const(1));
  absl::StatusOr<Shape> batch =
      BroadcastShapes(c.sym(), Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2));
  if (!batch.ok()) return c.Error(batch.status().message());
  auto ka = SymbolicContext::AsConst(sa.back()), kb = SymbolicContext::AsConst(sb[sb.size() - 2]);
  if (ka && kb && *ka != *kb) {
    return c.Error(
        absl::StrCat("inner dims differ: ", ShapeToString(*a), " x ", ShapeToString(*b)));
  }
  Shape out = *batch;
  if (!a1) out.push_back(sa[sa.size() - 2]);
  if (!b1) out.push_back(sb.back());
  c.SetOutput(0, dtype, out);
  return absl::OkStatus();
}

// M (a's rows) and N (b's columns) when constant.
std::optional<int64_t> Rows(InferContext& c, size_t ia) {
  const Shape* a = c.input_shape(ia);
  if (a != nullptr && a->size() == 1) return 1;
  return KnownDim(c, ia, -2);
}
std::optional<int64_t> Cols(InferContext& c, size_t ib) {
  const Shape* b = c.input_shape(ib);
  if (b != nullptr && b->size() == 1) return 1;
  return KnownDim(c, ib, -1);
}

absl::Status CheckOperandTypes(InferContext& c,
                               std::initializer_list<std::pair<size_t, const char*>> ops) {
  for (auto [idx, name] : ops) {
    if (c.has_input(idx) && !Is8Bit(c.input_dtype(idx))) {
      return c.Error(absl::StrCat(name, " must be u8 or i8, not ", DTypeName(c.input_dtype(idx))));
    }
  }
  return absl::OkStatus();
}

absl::Status MatMulInteger(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(CheckOperandTypes(c, {{0, "a"}, {1, "b"}}));
  DYNVM_RETURN_IF_ERROR(
      CheckParam(c, 2, "a_zero_point", Param::kZeroPoint, c.input_dtype(0), Rows(c, 0)));
  DYNVM_RETURN_IF_ERROR(
      CheckParam(c, 3, "b_zero_point", Param::kZeroPoint, c.input_dtype(1), Cols(c, 1)));
  return ProductShape(c, 0, 1, DType::kI32);
}

absl::Status QLinearMatMul(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(CheckOperandTypes(c, {{0, "a"}, {3, "b"}, {7, "y_zero_point"}}));
  const DType a = c.input_dtype(0), b = c.input_dtype(3), y = c.input_dtype(7);
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 1, "a_scale", Param::kScale, a, Rows(c, 0)));
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 2, "a_zero_point", Param::kZeroPoint, a, Rows(c, 0)));
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 4, "b_scale", Param::kScale, b, Cols(c, 3)));
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 5, "b_zero_point", Param::kZeroPoint, b, Cols(c, 3)));
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 6, "y_scale", Param::kScale, y, 1));
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 7, "y_zero_point", Param::kZeroPoint, y, 1));
  return ProductShape(c, 0, 3, y);
}

// Conv's rank (sizes from the kernel at run time), as `dtype`.
void ConvShape(InferContext& c, DType dtype) {
  const Shape* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, dtype);
  } else {
    c.SetOutputDynamic(0, dtype, static_cast<int>(x->size()));
  }
}

absl::Status ConvInteger(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(CheckOperandTypes(c, {{0, "x"}, {1, "w"}}));
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 2, "x_zero_point", Param::kZeroPoint, c.input_dtype(0), 1));
  DYNVM_RETURN_IF_ERROR(
      CheckParam(c, 3, "w_zero_point", Param::kZeroPoint, c.input_dtype(1), KnownDim(c, 1, 0)));
  ConvShape(c, DType::kI32);
  return absl::OkStatus();
}

absl::Status QLinearConv(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(CheckOperandTypes(c, {{0, "x"}, {3, "w"}, {7, "y_zero_point"}}));
  const DType x = c.input_dtype(0), w = c.input_dtype(3), y = c.input_dtype(7);
  const std::optional<int64_t> m = KnownDim(c, 3, 0);
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 1, "x_scale", Param::kScale, x, 1));
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 2, "x_zero_point", Param::kZeroPoint, x, 1));
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 4, "w_scale", Param::kScale, w, m));
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 5, "w_zero_point", Param::kZeroPoint, w, m));
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 6, "y_scale", Param::kScale, y, 1));
  DYNVM_RETURN_IF_ERROR(CheckParam(c, 7, "y_zero_point", Param::kZeroPoint, y, 1));
  if (c.has_input(8) && c.input_dtype(8) != DType::kI32) {
    return c.Error(absl::StrCat("B must be i32, not ", DTypeName(c.input_dtype(8))));
  }
  ConvShape(c, y);
  return absl::OkStatus();
}

// DynamicQuantizeLinear: y like x in u8, with a scalar scale (f32) and zero point (u8).
absl::Status DynamicQuantizeLinear(InferContext& c) {
  const std::vector<Dim>* x = c.input_shape(0);
  if (x) {
    c.SetOutput(0, DType::kU8, *x);
  } else {
    c.SetOutputUnknown(0, DType::kU8);
  }
  c.SetOutput(1, DType::kF32, {});
  c.SetOutput(2, DType::kU8, {});
  return absl::OkStatus();
}

// Opsets 19 to 23 add float8 and 4-bit types (refused where they appear, naming the type),
// `saturate` (for float8 only), blocked quantization and an explicit output type. dynvm takes
// per-tensor and per-axis quantization: a nonzero block_size is refused, and output_dtype only
// where it names the type the kernel makes anyway (the zero point's, or u8 without one, for
// QuantizeLinear; the scale's for DequantizeLinear, checked by the shape function).
absl::Status LowerQuantization(LowerContext& c) {
  if (const AttrValue* b = c.node.attr("block_size"); b != nullptr && b->i != 0) {
    return absl::UnimplementedError(absl::StrCat(c.label, ": ", c.node.op,
                                                 ": blocked quantization (block_size ", b->i,
                                                 ", opset 21) is not supported"));
  }
  c.node.attrs.erase("block_size");
  c.node.attrs.erase("saturate");  // only float8 outputs saturate; dynvm has none
  return absl::OkStatus();
}

}  // namespace

void DefineQuantOps(OpTable& t) {
  static constexpr OpRow kRows[] = {
      {"QuantizeLinear", 7, "10:3:3 13:3:3 19:3:3 21:3:3 23:3:3",
       "axis:i block_size:i@21 output_dtype:i@21 saturate:i@19", kPure, QuantizeLinear,
       LowerQuantization},
      {ops::kDequantizeLinear, 7, "10:3:3 13:3:3 19:3:3 21:3:3 23:3:3",
       "axis:i block_size:i@21 output_dtype:i@23", kPure, DequantizeLinear, LowerQuantization},
      {"DynamicQuantizeLinear", 7, "11:1:1", "", kPure, DynamicQuantizeLinear},
      {"MatMulInteger", 7, "10:4:3", "", kPure, MatMulInteger},
      {"QLinearMatMul", 7, "10:8:255 21:8:255", "", kPure, QLinearMatMul},
      {"ConvInteger", 7, "10:4:3", "auto_pad:s dilations:I group:i kernel_shape:I pads:I strides:I",
       kPure, ConvInteger},
      {"QLinearConv", 7, "10:9:255",
       "auto_pad:s dilations:I group:i kernel_shape:I pads:I strides:I", kPure, QLinearConv},
  };
  t.Add("", kRows);
}

}  // namespace dynvm::compiler
