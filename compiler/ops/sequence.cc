// ONNX's sequence and optional operators, and Identity of any kind. A sequence value's dtype and
// shape describe its elements; only constant dims are facts (elements may differ in the
// others). An optional's elem_kind says whether it holds a tensor or a sequence. The code
// generator lowers these operators to the seq_* and opt_* instructions (codegen.cc); they are
// impure so that folding, CSE and hoisting leave them alone.
//
// Control flow (If, Loop, Scan, SequenceMap) is defined here too: its shapes are inferred with
// its regions (compiler/infer.cc), Scan is lowered to a Loop (compiler/lower_scan.cc) and
// SequenceMap imported as one.
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

bool IsContainer(const Value* v) { return v != nullptr && v->kind != ObjectKind::kTensor; }

// The element shape two sets of elements share: equal dims stay, others become fresh.
std::optional<std::vector<Dim>> Merge(SymbolicContext& sym,
                                      const std::optional<std::vector<Dim>>& a,
                                      const std::optional<std::vector<Dim>>& b) {
  if (!a || !b || a->size() != b->size()) return std::nullopt;
  std::vector<Dim> out = *a;
  for (size_t i = 0; i < out.size(); ++i) {
    if ((*a)[i] != (*b)[i]) out[i] = sym.Fresh("e");
  }
  return out;
}

void SetContainer(InferContext& c, size_t i, ObjectKind kind, ObjectKind elem_kind, DType dtype,
                  std::optional<std::vector<Dim>> shape, bool empty = false) {
  if (!c.has_output(i)) return;
  Value* v = c.node().outputs[i];
  v->kind = kind;
  v->elem_kind = elem_kind;
  v->dtype = dtype;
  v->shape = std::move(shape);
  v->empty_sequence = empty;
  v->dynamic = false;
  v->content.reset();
}

// A tensor taken out of a container: constant dims are known, the others are read at run
// time (fresh symbols).
void SetElement(InferContext& c, size_t i, DType dtype,
                const std::optional<std::vector<Dim>>& shape) {
  if (!shape) {
    c.SetOutputUnknown(i, dtype);
    return;
  }
  std::vector<Dim> dims = *shape;
  for (Dim& d : dims) {
    if (!SymbolicContext::AsConst(d)) d = c.sym().Fresh("e");
  }
  c.SetOutput(i, dtype, std::move(dims));
  if (c.has_output(i)) c.node().outputs[i]->dynamic = true;
}

absl::Status NeedSequence(InferContext& c, size_t i) {
  if (!c.has_input(i) || c.input(i)->kind != ObjectKind::kSequence) {
    return c.Error(absl::StrCat("input ", i, " must be a sequence"));
  }
  return absl::OkStatus();
}

absl::Status NeedTensor(InferContext& c, size_t i) {
  if (c.has_input(i) && c.input(i)->kind != ObjectKind::kTensor) {
    return c.Error(absl::StrCat("input ", i, " must be a tensor, not ", c.input(i)->TypeString()));
  }
  return absl::OkStatus();
}

absl::Status SequenceEmpty(InferContext& c) {
  DYNVM_ASSIGN_OR_RETURN(int64_t t, c.GetInt("dtype", 1));
  std::optional<DType> d = DTypeFromOnnx(t);
  if (!d || *d == DType::kString)
    return absl::UnimplementedError(absl::StrCat(c.node().Label(), ": element type ", t));
  SetContainer(c, 0, ObjectKind::kSequence, ObjectKind::kTensor, *d, std::nullopt, /*empty=*/true);
  return absl::OkStatus();
}

absl::Status SequenceConstruct(InferContext& c) {
  if (c.num_inputs() == 0) return c.Error("SequenceConstruct needs at least one tensor");
  std::optional<std::vector<Dim>> shape;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) return c.Error(absl::StrCat("input ", i, " is missing"));
    DYNVM_RETURN_IF_ERROR(NeedTensor(c, i));
    if (c.input_dtype(i) != c.input_dtype(0))
      return c.Error("the tensors must have one element type");
    shape = i == 0 ? c.input(0)->shape : Merge(c.sym(), shape, c.input(i)->shape);
  }
  SetContainer(c, 0, ObjectKind::kSequence, ObjectKind::kTensor, c.input_dtype(0),
               std::move(shape));
  return absl::OkStatus();
}

absl::Status SequenceInsert(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(NeedSequence(c, 0));
  if (!c.has_input(1)) return c.Error("the tensor to insert is missing");
  DYNVM_RETURN_IF_ERROR(NeedTensor(c, 1));
  DYNVM_RETURN_IF_ERROR(NeedTensor(c, 2));
  const Value* q = c.input(0);
  const Value* t = c.input(1);
  if (q->dtype != t->dtype) {
    return c.Error(absl::StrCat("inserting a ", DTypeName(t->dtype), " tensor into a sequence of ",
                                DTypeName(q->dtype)));
  }
  SetContainer(c, 0, ObjectKind::kSequence, ObjectKind::kTensor, q->dtype,
               q->empty_sequence ? t->shape : Merge(c.sym(), q->shape, t->shape));
  return absl::OkStatus();
}

absl::Status SequenceErase(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(NeedSequence(c, 0));
  DYNVM_RETURN_IF_ERROR(NeedTensor(c, 1));
  const Value* q = c.input(0);
  SetContainer(c, 0, ObjectKind::kSequence, ObjectKind::kTensor, q->dtype, q->shape,
               q->empty_sequence);
  return absl::OkStatus();
}

absl::Status SequenceAt(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(NeedSequence(c, 0));
  if (!c.has_input(1)) return c.Error("the position is missing");
  DYNVM_RETURN_IF_ERROR(NeedTensor(c, 1));
  SetElement(c, 0, c.input(0)->dtype, c.input(0)->shape);
  return absl::OkStatus();
}

absl::Status SequenceLength(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(NeedSequence(c, 0));
  c.SetOutput(0, DType::kI64, {});
  // The length is a scalar register (seq_len), usable as a Loop's trip count without a read.
  c.SetContent(0, {c.sym().Fresh("len")});
  return absl::OkStatus();
}

absl::Status ConcatFromSequence(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(NeedSequence(c, 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, c.GetInt("axis", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t new_axis, c.GetInt("new_axis", 0));
  if (new_axis != 0 && new_axis != 1) return c.Error("new_axis must be 0 or 1");
  const Value* q = c.input(0);
  if (!q->shape) {
    // Without the element rank the axis cannot be placed (codegen refuses it).
    c.SetOutputUnknown(0, q->dtype);
    return absl::OkStatus();
  }
  const int64_t r = static_cast<int64_t>(q->shape->size());
  const int64_t out_rank = r + new_axis;
  int64_t a = axis < 0 ? axis + out_rank : axis;
  if (a < 0 || a >= out_rank || (new_axis == 0 && r == 0)) {
    return c.Error(absl::StrCat("axis ", axis, " out of range for elements of rank ", r));
  }
  std::vector<Dim> dims = *q->shape;
  for (Dim& d : dims) {
    if (!SymbolicContext::AsConst(d)) d = c.sym().Fresh("e");
  }
  if (new_axis) {
    dims.insert(dims.begin() + a, c.sym().Fresh("n"));
  } else {
    dims[a] = c.sym().Fresh("n");
  }
  c.SetOutput(0, q->dtype, std::move(dims));
  if (c.has_output(0)) c.node().outputs[0]->dynamic = true;
  return absl::OkStatus();
}

absl::Status SplitToSequence(InferContext& c) {
  if (!c.has_input(0)) return c.Error("the input is missing");
  DYNVM_RETURN_IF_ERROR(NeedTensor(c, 0));
  DYNVM_RETURN_IF_ERROR(NeedTensor(c, 1));
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, c.GetInt("axis", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t keepdims, c.GetInt("keepdims", 1));
  const Value* x = c.input(0);
  if (!x->shape) {
    SetContainer(c, 0, ObjectKind::kSequence, ObjectKind::kTensor, x->dtype, std::nullopt);
    return absl::OkStatus();
  }
  const int64_t r = static_cast<int64_t>(x->shape->size());
  const int64_t a = axis < 0 ? axis + r : axis;
  if (a < 0 || a >= r) return c.Error(absl::StrCat("axis ", axis, " out of range for rank ", r));
  std::vector<Dim> dims = *x->shape;
  // keepdims = 0 drops the axis when `split` is absent or a scalar (chunks of that many, which
  // must then be 1 at run time): ONNX Runtime's reading, which PyTorch's export of unbind
  // (SplitToSequence with split 1, keepdims 0) relies on; the spec's text ignores keepdims
  // whenever `split` is given (docs/onnx.md, "Known differences").
  const std::vector<Dim>* split_shape = c.input_shape(1);
  const bool scalar_split = c.has_input(1) && split_shape != nullptr && split_shape->empty();
  if (!c.has_input(1) || (scalar_split && !keepdims)) {
    if (keepdims) {
      dims[a] = c.sym().Const(1);
    } else {
      dims.erase(dims.begin() + a);
    }
  } else {
    dims[a] = c.sym().Fresh("e");
  }
  SetContainer(c, 0, ObjectKind::kSequence, ObjectKind::kTensor, x->dtype, std::move(dims));
  return absl::OkStatus();
}

absl::Status Optional(InferContext& c) {
  if (c.has_input(0)) {
    const Value* x = c.input(0);
    if (x->kind == ObjectKind::kOptional) return c.Error("an optional cannot hold an optional");
    SetContainer(c, 0, ObjectKind::kOptional, x->kind, x->dtype, x->shape);
    return absl::OkStatus();
  }
  // No input: the type comes from the 'type' attribute, which the importer turns into
  // 'elem_kind' (0 tensor, 2 sequence) and 'dtype' (an ONNX element type).
  DYNVM_ASSIGN_OR_RETURN(int64_t kind, c.GetInt("elem_kind", -1));
  DYNVM_ASSIGN_OR_RETURN(int64_t t, c.GetInt("dtype", -1));
  if (kind != static_cast<int64_t>(ObjectKind::kTensor) &&
      kind != static_cast<int64_t>(ObjectKind::kSequence)) {
    return c.Error("an Optional without input needs a tensor or sequence 'type'");
  }
  std::optional<DType> d = DTypeFromOnnx(t);
  if (!d || *d == DType::kString)
    return absl::UnimplementedError(absl::StrCat(c.node().Label(), ": element type ", t));
  SetContainer(c, 0, ObjectKind::kOptional, static_cast<ObjectKind>(kind), *d, std::nullopt);
  return absl::OkStatus();
}

absl::Status OptionalHasElement(InferContext& c) {
  c.SetOutput(0, DType::kBool, {});
  return absl::OkStatus();
}

absl::Status OptionalGetElement(InferContext& c) {
  if (!c.has_input(0)) return c.Error("the input is missing");
  const Value* x = c.input(0);
  const ObjectKind kind = x->kind == ObjectKind::kOptional ? x->elem_kind : x->kind;
  if (kind == ObjectKind::kSequence) {
    SetContainer(c, 0, ObjectKind::kSequence, ObjectKind::kTensor, x->dtype, x->shape);
  } else if (x->kind == ObjectKind::kTensor) {
    if (x->shape) {
      c.SetOutput(0, x->dtype, *x->shape);
    } else {
      c.SetOutputUnknown(0, x->dtype);
    }
  } else {
    SetElement(c, 0, x->dtype, x->shape);
  }
  return absl::OkStatus();
}

// Identity of any kind (a tensor's shape and contents pass through).
absl::Status Identity(InferContext& c) {
  if (!c.has_input(0)) return c.Error("missing input 0");
  const Value* x = c.input(0);
  if (IsContainer(x)) {
    SetContainer(c, 0, x->kind, x->elem_kind, x->dtype, x->shape, x->empty_sequence);
    return absl::OkStatus();
  }
  if (x->shape) {
    c.SetOutput(0, x->dtype, *x->shape);
  } else {
    c.SetOutputUnknown(0, x->dtype);
  }
  if (c.content(0)) c.SetContent(0, *c.content(0));
  return absl::OkStatus();
}

// Scan before opset 9 has a batch axis and sequence_lens: the kernel-free lowering to a Loop
// (compiler/lower_scan.cc) takes that form with opset8 = 1.
absl::Status LowerScan(LowerContext& c) {
  if (c.opset < 9) {
    AttrValue v8;
    v8.type = AttrValue::Type::kInt;
    v8.i = 1;
    c.node.attrs["opset8"] = v8;
  }
  return absl::OkStatus();
}

}  // namespace

void DefineSequenceOps(OpTable& t) {
  static constexpr OpRow kRows[] = {
      {ops::kSequenceEmpty, 7, "11:0:0", "dtype:i", kContainer, SequenceEmpty},
      {ops::kSequenceConstruct, 7, "11:0:1", "", kContainer, SequenceConstruct},
      {ops::kSequenceInsert, 7, "11:3:3", "", kContainer, SequenceInsert},
      {ops::kSequenceErase, 7, "11:2:1", "", kContainer, SequenceErase},
      {ops::kSequenceAt, 7, "11:2:3", "", kContainer, SequenceAt},
      {ops::kSequenceLength, 7, "11:1:1", "", kContainer, SequenceLength},
      {ops::kConcatFromSequence, 7, "11:1:1", "axis:i new_axis:i", kContainer, ConcatFromSequence},
      {ops::kSplitToSequence, 7, "11:2:1", "axis:i keepdims:i", kContainer, SplitToSequence},
      {ops::kOptional, 7, "15:1:0", "type:T", kContainer, Optional},
      {ops::kOptionalHasElement, 7, "15:1:1 18:1:0", "", kContainer, OptionalHasElement},
      {ops::kOptionalGetElement, 7, "15:1:1 18:1:1", "", kContainer, OptionalGetElement},
      {ops::kIdentity, 1, "1:1:1 13:1:1 14:1:1 16:1:1 19:1:1 21:1:1 23:1:1", "",
       kPure | kElementwise | kView | kShapeArith, Identity},
      {ops::kIf, 1, "1:1:1 11:1:1 13:1:1 16:1:1 19:1:1 21:1:1 23:1:1",
       "else_branch:g then_branch:g", kControlFlow | kNoKernel, nullptr},
      {ops::kLoop, 1, "1:0:0 11:0:0 13:0:0 16:0:0 19:0:0 21:0:0 23:0:0", "body:g",
       kControlFlow | kNoKernel, nullptr},
      {ops::kScan, 7, "8:0:2 9:0:1 11:0:1 16:0:1 19:0:1 21:0:1 23:0:1",
       "body:g directions:I num_scan_inputs:i scan_input_axes:I scan_input_directions:I "
       "scan_output_axes:I scan_output_directions:I",
       kControlFlow | kNoKernel, nullptr, LowerScan},
      {ops::kSequenceMap, 7, "17:0:1", "body:g", kControlFlow | kNoKernel, nullptr},
  };
  t.Add("", kRows);
}

}  // namespace dynvm::compiler
