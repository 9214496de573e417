// The elementwise operators: arithmetic and comparisons with NumPy broadcasting, logic, unary
// math and activations, casts, Where, and the row-wise normalizations that keep their input's
// shape (Softmax, LogSoftmax, Hardmax, CumSum). Integer arithmetic on shape values (Add, Sub,
// Mul, Div of Shape results) keeps its symbolic content, so the shapes computed from it stay
// exact.
#include <algorithm>
#include <limits>
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

// x / y as ONNX's integer Div computes it (truncating towards zero, as C and ONNX Runtime
// do): constants are divided, and a nonnegative x by a positive y is a floor division. Other
// signs are left to the kernel (nullopt).
std::optional<Dim> TruncatingDiv(SymbolicContext& sym, Dim x, Dim y) {
  const std::optional<int64_t> a = SymbolicContext::AsConst(x), b = SymbolicContext::AsConst(y);
  if (a && b) {
    if (*b == 0 || (*a == std::numeric_limits<int64_t>::min() && *b == -1)) return std::nullopt;
    return sym.Const(*a / *b);
  }
  const std::optional<int64_t> lx = sym.LowerBound(x), ly = sym.LowerBound(y);
  if (lx && *lx >= 0 && ly && *ly >= 1) return sym.FloorDiv(x, y);
  return std::nullopt;
}

// Elementwise ops over broadcast inputs. `out_dtype` overrides the dtype (comparisons: bool).
absl::Status Broadcasting(InferContext& c, std::optional<DType> out_dtype, bool content_arith) {
  Shape shape;
  DType dtype = DType::kF32;
  bool first = true;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    if (first) dtype = c.input_dtype(i);
    const Shape* s = c.input_shape(i);
    if (s == nullptr) {
      c.SetOutputUnknown(0, out_dtype.value_or(dtype));
      return absl::OkStatus();
    }
    if (first) {
      shape = *s;
    } else {
      absl::StatusOr<Shape> b = BroadcastShapes(c.sym(), shape, *s);
      if (!b.ok()) return c.Error(b.status().message());
      shape = *std::move(b);
    }
    first = false;
  }
  if (first) return c.Error("no inputs");
  c.SetOutput(0, out_dtype.value_or(dtype), shape);
  // Integer arithmetic on shape values stays symbolic.
  if (content_arith && c.num_inputs() == 2 && c.content(0) && c.content(1) && shape.size() <= 1) {
    const std::vector<Dim>& a = *c.content(0);
    const std::vector<Dim>& b = *c.content(1);
    const size_t n = std::max(a.size(), b.size());
    if ((a.size() == n || a.size() == 1) && (b.size() == n || b.size() == 1)) {
      std::vector<Dim> out;
      const std::string& op = c.node().op;
      for (size_t k = 0; k < n; ++k) {
        Dim x = a[a.size() == 1 ? 0 : k], y = b[b.size() == 1 ? 0 : k];
        if (op == ops::kAdd)
          out.push_back(c.sym().Add(x, y));
        else if (op == ops::kSub)
          out.push_back(c.sym().Sub(x, y));
        else if (op == ops::kMul)
          out.push_back(c.sym().Mul(x, y));
        else if (op == ops::kDiv) {
          std::optional<Dim> q = TruncatingDiv(c.sym(), x, y);
          if (!q) return absl::OkStatus();  // a quotient of unknown sign: no content
          out.push_back(*q);
        } else
          return absl::OkStatus();
      }
      c.SetContent(0, std::move(out));
    }
  }
  return absl::OkStatus();
}

absl::Status Unary(InferContext& c) { return SameAsInput(c); }

absl::Status Cast(InferContext& c) {
  DYNVM_ASSIGN_OR_RETURN(int64_t to, c.GetInt("to", 1));
  std::optional<DType> d = DTypeFromOnnx(to);
  if (!d) return c.Error(absl::StrCat("unsupported target type ", OnnxTypeName(to)));
  if (c.input_shape(0)) {
    c.SetOutput(0, *d, *c.input_shape(0));
  } else {
    c.SetOutputUnknown(0, *d);
  }
  if (c.content(0) && IsInteger(*d)) c.SetContent(0, *c.content(0));
  return absl::OkStatus();
}

absl::Status CastLike(InferContext& c) {
  if (!c.has_input(1)) return c.Error("CastLike needs two inputs");
  if (c.input_shape(0)) {
    c.SetOutput(0, c.input_dtype(1), *c.input_shape(0));
  } else {
    c.SetOutputUnknown(0, c.input_dtype(1));
  }
  return absl::OkStatus();
}

// Equal over symbolic contents: decided where the dims allow (equal constants or the same
// expression; bounds that cannot meet, e.g. a size against -1); content 0/1.
// Greater, Less, GreaterOrEqual, LessOrEqual: when both inputs have one-element symbolic
// content that the dims' bounds decide, the result is content 0 or 1 (so an If on a rank or
// size comparison is decided at compile time: compiler/infer.cc).
absl::Status CompareOp(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(Broadcasting(c, DType::kBool, false));
  const std::vector<Dim>* a = c.content(0);
  const std::vector<Dim>* b = c.content(1);
  if (!a || !b || a->size() != 1 || b->size() != 1 || !c.has_output(0) ||
      c.node().outputs[0]->rank() != 0) {
    return absl::OkStatus();
  }
  const std::string& op = c.node().op;
  // x op y with x, y swapped for Less/LessOrEqual: decide x > y or x >= y.
  const bool swap = op == "Less" || op == "LessOrEqual";
  const bool strict = op == "Greater" || op == "Less";
  const Dim x = swap ? (*b)[0] : (*a)[0], y = swap ? (*a)[0] : (*b)[0];
  const std::optional<int64_t> lx = c.sym().LowerBound(x), ux = c.sym().UpperBound(x);
  const std::optional<int64_t> ly = c.sym().LowerBound(y), uy = c.sym().UpperBound(y);
  std::optional<bool> r;
  if (lx && uy && (strict ? *lx > *uy : *lx >= *uy)) r = true;
  if (ux && ly && (strict ? *ux <= *ly : *ux < *ly)) r = false;
  if (!strict && x == y) r = true;
  if (strict && x == y) r = false;
  if (r) c.SetContent(0, {c.sym().Const(*r ? 1 : 0)});
  return absl::OkStatus();
}

// Not: content 1 - x for bool content (0/1) of up to one dimension.
absl::Status NotOp(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(Unary(c));
  const std::vector<Dim>* a = c.content(0);
  if (!a || !c.has_output(0) || c.node().outputs[0]->rank() > 1) return absl::OkStatus();
  std::vector<Dim> out;
  for (Dim d : *a) {
    const std::optional<int64_t> v = SymbolicContext::AsConst(d);
    if (!v || (*v != 0 && *v != 1)) return absl::OkStatus();
    out.push_back(c.sym().Const(1 - *v));
  }
  c.SetContent(0, std::move(out));
  return absl::OkStatus();
}

absl::Status EqualOp(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(Broadcasting(c, DType::kBool, false));
  const std::vector<Dim>* a = c.content(0);
  const std::vector<Dim>* b = c.content(1);
  if (!a || !b || !c.has_output(0) || c.node().outputs[0]->rank() < 0 ||
      c.node().outputs[0]->rank() > 1) {
    return absl::OkStatus();
  }
  const size_t n = std::max(a->size(), b->size());
  if ((a->size() != n && a->size() != 1) || (b->size() != n && b->size() != 1)) {
    return absl::OkStatus();
  }
  std::vector<Dim> out;
  for (size_t k = 0; k < n; ++k) {
    const Dim x = (*a)[a->size() == 1 ? 0 : k], y = (*b)[b->size() == 1 ? 0 : k];
    if (x == y) {
      out.push_back(c.sym().Const(1));
      continue;
    }
    const std::optional<int64_t> lx = c.sym().LowerBound(x), ux = c.sym().UpperBound(x);
    const std::optional<int64_t> ly = c.sym().LowerBound(y), uy = c.sym().UpperBound(y);
    if ((lx && uy && *lx > *uy) || (ly && ux && *ly > *ux)) {
      out.push_back(c.sym().Const(0));
      continue;
    }
    return absl::OkStatus();  // undecided: no content
  }
  c.SetContent(0, std::move(out));
  return absl::OkStatus();
}

absl::Status Where(InferContext& c) {
  absl::Status s = Broadcasting(c, std::nullopt, false);
  if (!s.ok()) return s;
  // The output dtype is X's (input 1), not the condition's.
  if (c.has_output(0)) c.node().outputs[0]->dtype = c.input_dtype(1);
  // A condition known element by element selects between symbolic contents.
  const std::vector<Dim>* cond = c.content(0);
  const std::vector<Dim>* x = c.content(1);
  const std::vector<Dim>* y = c.content(2);
  if (!cond || !x || !y || !c.has_output(0) || !IsInteger(c.input_dtype(1)) ||
      c.node().outputs[0]->rank() < 0 || c.node().outputs[0]->rank() > 1) {
    return absl::OkStatus();
  }
  const size_t n = std::max({cond->size(), x->size(), y->size()});
  std::vector<Dim> out;
  for (size_t k = 0; k < n; ++k) {
    for (const std::vector<Dim>* v : {cond, x, y}) {
      if (v->size() != n && v->size() != 1) return absl::OkStatus();
    }
    const std::optional<int64_t> pick =
        SymbolicContext::AsConst((*cond)[cond->size() == 1 ? 0 : k]);
    if (!pick) return absl::OkStatus();
    const std::vector<Dim>& from = *pick != 0 ? *x : *y;
    out.push_back(from[from.size() == 1 ? 0 : k]);
  }
  c.SetContent(0, std::move(out));
  return absl::OkStatus();
}

absl::Status BroadcastArith(InferContext& c) { return Broadcasting(c, std::nullopt, true); }
absl::Status BroadcastPlain(InferContext& c) { return Broadcasting(c, std::nullopt, false); }

// IsNaN, IsInf: the input's shape, bool.
absl::Status BoolLikeInput(InferContext& c) {
  absl::Status s = SameAsInput(c);
  if (c.has_output(0)) c.node().outputs[0]->dtype = DType::kBool;
  return s;
}

// Dropout: output 0 like the input, the optional mask bool.
absl::Status DropoutShape(InferContext& c) {
  absl::Status s = shapes::SameAsInputKeepingContent(c);
  if (c.has_output(1)) c.node().outputs[1]->dtype = DType::kBool;
  return s;
}

// Dropout is a view of its input in inference mode when it makes no mask.
bool DropoutIsView(const Node& n) {
  const AttrValue* m = n.attr("training_mode");
  return n.inputs.size() <= 2 && (m == nullptr || m->i == 0) &&
         (n.outputs.size() < 2 || n.outputs[1] == nullptr);
}

// Softmax, LogSoftmax and Hardmax before opset 13 flatten the input to 2-D at `axis`: the
// kernel takes that form with legacy_2d = 1.
absl::Status LowerLegacy2d(LowerContext& c) {
  if (c.opset < 13) {
    AttrValue legacy;
    legacy.type = AttrValue::Type::kInt;
    legacy.i = 1;
    c.node.attrs["legacy_2d"] = legacy;
  }
  return absl::OkStatus();
}

// Gelu (opset 20) is dynvm's own Gelu, or GeluTanh with approximate = "tanh": the fused
// activations the rewrites make (compiler/ops/dynvm.cc), so Linear fuses them too.
absl::Status LowerGelu(LowerContext& c) {
  std::string approximate = "none";
  if (const AttrValue* a = c.node.attr("approximate"); a != nullptr) approximate = a->s;
  if (approximate != "none" && approximate != "tanh") {
    return absl::InvalidArgumentError(
        absl::StrCat(c.label, ": Gelu: approximate must be none or tanh, not '", approximate, "'"));
  }
  c.node.domain = ops::kDynvmDomain;
  c.node.op = approximate == "tanh" ? ops::kGeluTanh : ops::kGelu;
  c.node.attrs.erase("approximate");
  return absl::OkStatus();
}

}  // namespace

void DefineElementwiseOps(OpTable& t) {
  static constexpr OpRow kRows[] = {
      {ops::kAdd, 7, "1:2:3 6:2:3 7:2:3 13:2:3 14:2:3", "",
       kPure | kElementwise | kShapeArith | kLegacyBroadcast, BroadcastArith},
      {ops::kSub, 7, "1:2:3 6:2:3 7:2:3 13:2:3 14:2:3", "",
       kPure | kElementwise | kShapeArith | kLegacyBroadcast, BroadcastArith},
      {ops::kMul, 7, "1:2:3 6:2:3 7:2:3 13:2:3 14:2:3", "",
       kPure | kElementwise | kShapeArith | kLegacyBroadcast, BroadcastArith},
      {ops::kDiv, 7, "1:2:3 6:2:3 7:2:3 13:2:3 14:2:3", "",
       kPure | kElementwise | kShapeArith | kLegacyBroadcast, BroadcastArith},
      {ops::kPow, 7, "1:2:3 7:2:3 12:2:3 13:2:3 15:2:3", "",
       kPure | kElementwise | kLegacyBroadcast, BroadcastPlain},
      {"Max", 6, "1:0:1 6:0:1 8:0:1 12:0:1 13:0:1", "", kPure | kElementwise, BroadcastPlain},
      {"Min", 6, "1:0:1 6:0:1 8:0:1 12:0:1 13:0:1", "", kPure | kElementwise, BroadcastPlain},
      {"Sum", 6, "1:0:1 6:0:1 8:0:1 13:0:1", "", kPure | kElementwise, BroadcastPlain},
      {"Mean", 6, "1:0:1 6:0:1 8:0:1 13:0:1", "", kPure | kElementwise, BroadcastPlain},
      {"Mod", 7, "10:2:3 13:2:3", "fmod:i", kPure | kElementwise, BroadcastPlain},
      {"BitShift", 7, "11:2:3", "direction:s", kPure | kElementwise, BroadcastPlain},
      {ops::kPRelu, 7, "1:2:3 6:2:3 7:2:3 9:2:3 16:2:3", "", kPure | kElementwise, BroadcastPlain},
      {ops::kAnd, 7, "1:2:3 7:2:3", "", kPure | kElementwise | kLegacyBroadcast, BroadcastPlain},
      {ops::kOr, 7, "1:2:3 7:2:3", "", kPure | kElementwise | kLegacyBroadcast, BroadcastPlain},
      {ops::kXor, 7, "1:2:3 7:2:3", "", kPure | kElementwise | kLegacyBroadcast, BroadcastPlain},
      {ops::kEqual, 7, "1:2:3 7:2:3 11:2:3 13:2:3 19:2:3", "",
       kPure | kElementwise | kLegacyBroadcast, EqualOp},
      {ops::kGreater, 7, "1:2:3 7:2:3 9:2:3 13:2:3", "", kPure | kElementwise | kLegacyBroadcast,
       CompareOp},
      {ops::kLess, 7, "1:2:3 7:2:3 9:2:3 13:2:3", "", kPure | kElementwise | kLegacyBroadcast,
       CompareOp},
      {"GreaterOrEqual", 7, "12:2:3 16:2:3", "", kPure | kElementwise, CompareOp},
      {"LessOrEqual", 7, "12:2:3 16:2:3", "", kPure | kElementwise, CompareOp},
      {"Not", 1, "1:1:1", "", kPure | kElementwise, NotOp},
      {"BitwiseAnd", 7, "18:2:3", "", kPure | kElementwise, BroadcastPlain},
      {"BitwiseOr", 7, "18:2:3", "", kPure | kElementwise, BroadcastPlain},
      {"BitwiseXor", 7, "18:2:3", "", kPure | kElementwise, BroadcastPlain},
      {"BitwiseNot", 7, "18:1:1", "", kPure | kElementwise, Unary},
      {ops::kWhere, 7, "9:3:7 16:3:7", "", kPure | kElementwise, Where},
      {ops::kCast, 6, "1:1:1 6:1:1 9:1:1 13:1:1 19:1:1 21:1:1 23:1:1", "saturate:i@19 to:i",
       kPure | kElementwise | kShapeArith, Cast},
      {"CastLike", 7, "15:2:3 19:2:3 21:2:3 23:2:3", "saturate:i@19", kPure, CastLike},
      {"Shrink", 7, "9:1:1", "bias:f lambd:f", kPure | kElementwise, SameAsInput},
      {"Sqrt", 6, "1:1:1 6:1:1 13:1:1", "", kPure | kElementwise, Unary},
      {"Exp", 6, "1:1:1 6:1:1 13:1:1", "", kPure | kElementwise, Unary},
      {"Log", 6, "1:1:1 6:1:1 13:1:1", "", kPure | kElementwise, Unary},
      {"Neg", 6, "1:1:1 6:1:1 13:1:1", "", kPure | kElementwise, Unary},
      {"Abs", 6, "1:1:1 6:1:1 13:1:1", "", kPure | kElementwise, Unary},
      {"Erf", 7, "9:1:1 13:1:1", "", kPure | kElementwise, Unary},
      {ops::kTanh, 6, "1:1:1 6:1:1 13:1:1", "", kPure | kElementwise, Unary},
      {ops::kSigmoid, 6, "1:1:1 6:1:1 13:1:1", "", kPure | kElementwise, Unary},
      {ops::kRelu, 6, "1:1:1 6:1:1 13:1:1 14:1:1", "", kPure | kElementwise, Unary},
      {"Floor", 6, "1:1:1 6:1:1 13:1:1", "", kPure | kElementwise, Unary},
      {"Ceil", 6, "1:1:1 6:1:1 13:1:1", "", kPure | kElementwise, Unary},
      {"Round", 7, "11:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {"Sign", 7, "9:1:1 13:1:1", "", kPure | kElementwise, Unary},
      {"Reciprocal", 6, "1:1:1 6:1:1 13:1:1", "", kPure | kElementwise, Unary},
      {"Softplus", 1, "1:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {"Softsign", 1, "1:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {ops::kLeakyRelu, 6, "1:1:1 6:1:1 16:1:1", "alpha:f", kPure | kElementwise, Unary},
      {"Elu", 6, "1:1:1 6:1:1 22:1:1", "alpha:f", kPure | kElementwise, Unary},
      {"Selu", 6, "1:1:1 6:1:1 22:1:1", "alpha:f gamma:f", kPure | kElementwise, Unary},
      {"Celu", 7, "12:1:1", "alpha:f", kPure | kElementwise, Unary},
      {"HardSigmoid", 6, "1:1:1 6:1:1 22:1:1", "alpha:f beta:f", kPure | kElementwise, Unary},
      {ops::kHardSwish, 7, "14:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {"ThresholdedRelu", 7, "10:1:1 22:1:1", "alpha:f", kPure | kElementwise, Unary},
      {ops::kClip, 6, "1:1:1 6:1:1 11:3:1 12:3:1 13:3:1", "max:f min:f", kPure | kElementwise,
       Unary},
      {"Sin", 7, "7:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {"Cos", 7, "7:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {"Tan", 7, "7:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {"Asin", 7, "7:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {"Acos", 7, "7:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {"Atan", 7, "7:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {"Sinh", 7, "9:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {"Cosh", 7, "9:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {"Asinh", 7, "9:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {"Acosh", 7, "9:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {"Atanh", 7, "9:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {"Mish", 7, "18:1:1 22:1:1", "", kPure | kElementwise, Unary},
      {ops::kGelu, 7, "20:1:1", "approximate:s", kPure | kElementwise | kNoKernel, Unary,
       LowerGelu},
      {"IsNaN", 7, "9:1:1 13:1:1 20:1:1", "", kPure | kElementwise, BoolLikeInput},
      {"IsInf", 7, "10:1:1 20:1:1", "detect_negative:i detect_positive:i", kPure | kElementwise,
       BoolLikeInput},
      {ops::kSoftmax, 1, "1:1:1 11:1:1 13:1:1", "axis:i", kPure, Unary, LowerLegacy2d},
      {ops::kLogSoftmax, 1, "1:1:1 11:1:1 13:1:1", "axis:i", kPure, Unary, LowerLegacy2d},
      {ops::kHardmax, 1, "1:1:1 11:1:1 13:1:1", "axis:i", kPure, Unary, LowerLegacy2d},
      {"CumSum", 7, "11:2:3 14:2:3", "exclusive:i reverse:i", kPure, Unary},
      {ops::kDropout, 7, "1:1:1 6:1:1 7:1:1 10:1:1 12:3:1 13:3:1 22:3:1", "ratio:f seed:i",
       kPure | kView, DropoutShape, nullptr, DropoutIsView},
  };
  t.Add("", kRows);
}

}  // namespace dynvm::compiler
