// Rotary embedding rule: the rotate-half form GPT-NeoX / Llama exports write for RoPE becomes one
// dynvm::RotateHalf (kernels/reference/dynvm_ops.cc has its definition; the oneDNN backend runs
// it in one pass, kernels/dnnl/rotary.cc).
//
// rotate_half: Add(Mul(x, cos), Mul(rot, sin)) (any operand order), rot = rotate_half(x) =
//              Concat(Neg(hi), lo) over the last axis, lo = Slice(x, 0, D/2) and hi =
//              Slice(x, D/2, >= D) of x's last axis (D constant and even; starts, ends, axes and
//              steps constant inputs, or values computed from constant dims (a scripted export's
//              x.shape[-1] // 2), or the attributes before opset 10; steps 1)
//              -> dynvm::RotateHalf(x, cos, sin).
//   x, cos and sin are f32; the three broadcast together as the two Muls do (a decode step's
//   tables [t, D] over x [B, H, 1, D], t symbolic: the fused op has the same broadcast shape, and
//   its kernel reports what the Muls would). The rule reads no value of cos or sin, so the
//   tables may be anything (computed from position ids, constants, swapped, the same): the fused
//   op computes the same expression. Refused: halves
//   other than [0, D/2) and [D/2, D) (a partial rotary dimension sliced inside the rotated
//   values, the halves swapped), the Neg on the first half, a Concat or Slice along another
//   axis, a step other than 1, an odd or symbolic D, an intermediate read elsewhere, another
//   dtype.
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "compiler/rewrite/rules.h"
#include "compiler/symbolic.h"

namespace dynvm::compiler::rewrite {
namespace {

using P = Pattern;

// The one-element integer `v` known at compile time: a constant, or a value computed from
// constant dims (its symbolic content: a scripted export's `x.shape[-1] // 2`); else nullopt.
std::optional<int64_t> OneInt(const Value* v) {
  if (v == nullptr) return std::nullopt;
  if (!v->constant) {
    if (!v->content || v->content->size() != 1) return std::nullopt;
    return SymbolicContext::AsConst((*v->content)[0]);
  }
  if (v->constant->numel() != 1) return std::nullopt;
  const Tensor& t = *v->constant;
  if (t.dtype() == DType::kI64) return t.data<int64_t>()[t.ElementOffset(0)];
  if (t.dtype() == DType::kI32) return t.data<int32_t>()[t.ElementOffset(0)];
  return std::nullopt;
}

// A Slice of one axis: [start, end) along `axis` (normalized), step 1.
struct OneAxisSlice {
  int64_t axis = 0, start = 0, end = 0;
};

std::optional<int64_t> OneAttrInt(const Node& n, const char* name) {
  const AttrValue* a = n.attr(name);
  if (a == nullptr || a->type != AttrValue::Type::kInts || a->ints.size() != 1) return std::nullopt;
  return a->ints[0];
}

// What Slice node `n` of a rank-`rank` input cuts, when it cuts one axis with step 1 and
// constant bounds (inputs from opset 10, attributes before).
std::optional<OneAxisSlice> SliceOf(const Node& n, int64_t rank) {
  std::optional<int64_t> start, end, axis, step = 1;
  if (n.inputs.size() >= 3) {
    start = OneInt(n.inputs[1]);
    end = OneInt(n.inputs[2]);
    if (n.inputs.size() >= 4 && n.inputs[3] != nullptr) axis = OneInt(n.inputs[3]);
    if (n.inputs.size() >= 4 && n.inputs[3] == nullptr) return std::nullopt;  // every axis
    if (n.inputs.size() >= 5 && n.inputs[4] != nullptr) step = OneInt(n.inputs[4]);
  } else {
    start = OneAttrInt(n, "starts");
    end = OneAttrInt(n, "ends");
    axis = OneAttrInt(n, "axes");
  }
  if (!start || !end || !axis || !step || *step != 1) return std::nullopt;
  if (*axis < -rank || *axis >= rank) return std::nullopt;
  return OneAxisSlice{*axis < 0 ? *axis + rank : *axis, *start, *end};
}

// The slice is [first, last) of an axis of size d (ONNX's clamping of negative and large bounds).
bool Covers(const OneAxisSlice& s, int64_t d, int64_t first, int64_t last) {
  auto clamp = [d](int64_t v) {
    if (v < 0) v += d;
    return v < 0 ? 0 : v > d ? d : v;
  };
  return clamp(s.start) == first && clamp(s.end) == last;
}

Value* Fuse(Emitter& e, const Match& m) {
  Value* x = m["x"];
  if (x->dtype != DType::kF32 || !x->shape || x->rank() == 0) return nullptr;
  const int64_t rank = x->rank();
  const std::optional<int64_t> d = SymbolicContext::AsConst((*x->shape)[rank - 1]);
  if (!d || *d < 2 || *d % 2 != 0) return nullptr;
  const std::optional<OneAxisSlice> lo = SliceOf(*m.node("lo"), rank);
  const std::optional<OneAxisSlice> hi = SliceOf(*m.node("hi"), rank);
  if (!lo || !hi || lo->axis != rank - 1 || hi->axis != rank - 1) return nullptr;
  if (!Covers(*lo, *d, 0, *d / 2) || !Covers(*hi, *d, *d / 2, *d)) return nullptr;
  const AttrValue* axis = m.node("cat")->attr("axis");
  if (axis == nullptr || (axis->i != -1 && axis->i != rank - 1)) return nullptr;
  // The tables broadcast with x as the two Muls do (the fused op's shape is the same
  // broadcast); f32 only.
  if (m["cos"]->dtype != DType::kF32 || m["sin"]->dtype != DType::kF32) return nullptr;
  return e.Op("RotateHalf", {x, m["cos"], m["sin"]}, {}, "dynvm");
}

// A Slice of x in either form: bounds as inputs (opset 10 on; axes and steps optional) or as
// attributes (before).
// (The bounds are checked by Fuse: constants, or values of constant symbolic content.)
P SliceOfX(const P& x, const char* name) {
  return P::OneOf({P::Op("Slice", {x, P::Any(), P::Any(), P::Any(), P::Any()}),
                   P::Op("Slice", {x, P::Any(), P::Any(), P::Any()}),
                   P::Op("Slice", {x, P::Any(), P::Any()}), P::Op("Slice", {x})})
      .As(name);
}

}  // namespace

std::vector<Rule> RotaryRules() {
  P x = P::Any("x");
  P rot = P::Op("Concat", {P::Op("Neg", {SliceOfX(x, "hi")}), SliceOfX(x, "lo")}).As("cat");
  // rot first: it binds x through the Slices, so that Mul(x, cos) then takes x in either
  // operand order (matching binds without backtracking into a sibling).
  P root = P::Op("Add", {P::Op("Mul", {rot, P::Any("sin")}).Commutative(),
                         P::Op("Mul", {x, P::Any("cos")}).Commutative()})
               .Commutative();
  std::vector<Rule> rules;
  rules.push_back(Rule{"rotate_half", std::move(root), &Fuse});
  return rules;
}

}  // namespace dynvm::compiler::rewrite
