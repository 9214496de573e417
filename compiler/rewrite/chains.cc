// Chains of layout ops collapse:
// transpose_chain: Transpose(Transpose(x, p), q) -> Transpose(x, r), r[i] = p[q[i]] (Identity
//   when r keeps every axis). torch writes these around attention (k.transpose(1, 2) then
//   k.transpose(-2, -1)). Refused: x of unknown rank (an absent perm reverses the axes), the
//   inner Transpose read elsewhere.
// transpose_identity: Transpose(x, p) with p keeping every axis -> Identity(x) (a view, no
//   copy). Refused: an absent perm (it reverses the axes), x of unknown rank.
// transpose_unit_axes (late phase): Transpose(x, p) that moves only axes of constant size 1
//   (the other axes keep their order: torch's batch-first swap [1, 0, 2] at batch 1) ->
//   Reshape(x, the permuted dims) (a view, no copy), a dim that is not a constant written as
//   -1, with allowzero = 1 where a dim is 0 (seed 7 graph 10589: Transpose of a [0, 1]).
//   Refused: x of unknown rank or shape, more than one dim that is not a constant, a dim of 0
//   beside one that is not a constant, an identity perm (transpose_identity's). Late, so that
//   attention folds its Transposes first.
// reshape_chain: Reshape(Reshape(x, s1), s2) -> Reshape(x, s2) when s2 is a constant with no 0
//   entry (a 0 copies a dim of the inner result, which x need not have) or the outer Reshape has
//   allowzero=1, and x and the inner result have constant shapes (so the inner Reshape was
//   checked at compile time: collapsing it must not remove a run-time error). Refused: a
//   non-constant s2, symbolic dims, the inner Reshape read elsewhere.
// pad_identity: Pad(x, pads) (opset 11 and later) whose pads are a constant of 2 * rank zeros,
//   any mode -> Identity(x) (a view, no copy). torch exports an AvgPool2d with
//   count_include_pad and padding 0 as such a Pad before the pool (DenseNet's transitions).
//   Refused: x of unknown rank, pads of another length (a run-time error), a constant_value or
//   axes input (their run-time checks), the pads attribute of opsets 2-10.
#include <algorithm>
#include <numeric>
#include <optional>
#include <vector>

#include "compiler/rewrite/rules.h"

namespace dynvm::compiler::rewrite {
namespace {

using P = Pattern;

Value* CollapseTransposes(Emitter& e, const Match& m) {
  std::optional<std::vector<int64_t>> p = TransposePerm(*m.node("inner"));
  std::optional<std::vector<int64_t>> q = TransposePerm(e.root());
  if (!p || !q || p->size() != q->size()) return nullptr;
  std::vector<int64_t> r(q->size());
  bool identity = true;
  for (size_t i = 0; i < r.size(); ++i) {
    if ((*q)[i] < 0 || (*q)[i] >= static_cast<int64_t>(p->size())) return nullptr;
    r[i] = (*p)[(*q)[i]];
    identity &= r[i] == static_cast<int64_t>(i);
  }
  if (identity) return e.Op("Identity", {m["x"]});
  Attrs attrs;
  attrs["perm"].type = AttrValue::Type::kInts;
  attrs["perm"].ints = std::move(r);
  return e.Op("Transpose", {m["x"]}, std::move(attrs));
}

Value* DropIdentityTranspose(Emitter& e, const Match& m) {
  const AttrValue* perm = e.root().attr("perm");
  std::optional<std::vector<int64_t>> p = TransposePerm(e.root());
  if (perm == nullptr || !p) return nullptr;
  for (size_t i = 0; i < p->size(); ++i) {
    if ((*p)[i] != static_cast<int64_t>(i)) return nullptr;
  }
  return e.Op("Identity", {m["x"]});
}

Value* TransposeAsReshape(Emitter& e, const Match& m) {
  const Value& x = *m["x"];
  std::optional<std::vector<int64_t>> p = TransposePerm(e.root());
  if (!p || !x.shape || x.kind != ObjectKind::kTensor) return nullptr;
  std::vector<int64_t> target(p->size());
  int64_t last_moved = -1, symbols = 0;
  bool identity = true;
  for (size_t i = 0; i < p->size(); ++i) {
    const int64_t a = (*p)[i];
    identity &= a == static_cast<int64_t>(i);
    const std::optional<int64_t> d = SymbolicContext::AsConst((*x.shape)[a]);
    target[i] = d ? *d : -1;
    if (!d) ++symbols;
    if (d && *d == 1) continue;
    if (a < last_moved) return nullptr;  // two axes that are not 1 swap
    last_moved = a;
  }
  if (identity || symbols > 1) return nullptr;
  // A dim of 0 must stay 0 (allowzero = 1: a 0 would otherwise copy the input's dim), and then
  // no -1 may stand beside it (its size would be 0 / 0).
  const bool has_zero = std::find(target.begin(), target.end(), 0) != target.end();
  if (has_zero && symbols > 0) return nullptr;
  Tensor shape = *Tensor::Empty(DType::kI64, {static_cast<int64_t>(target.size())});
  for (size_t i = 0; i < target.size(); ++i) shape.data<int64_t>()[i] = target[i];
  Attrs attrs;
  if (has_zero) {
    attrs["allowzero"].type = AttrValue::Type::kInt;
    attrs["allowzero"].i = 1;
  }
  return e.Op("Reshape", {m["x"], e.Constant(std::move(shape))}, std::move(attrs));
}

bool ConstantShape(const Value* v) {
  if (v == nullptr || !v->shape) return false;
  for (Dim d : *v->shape) {
    if (!SymbolicContext::AsConst(d)) return false;
  }
  return true;
}

Value* CollapseReshapes(Emitter& e, const Match& m) {
  const Node& outer = e.root();
  if (!ConstantShape(m["x"]) || !ConstantShape(m["inner"])) return nullptr;
  const AttrValue* allowzero = outer.attr("allowzero");
  const Tensor& s2 = *m["s2"]->constant;
  if (s2.dtype() != DType::kI64) return nullptr;
  if (allowzero == nullptr || allowzero->i == 0) {
    for (int64_t i = 0; i < s2.numel(); ++i) {
      if (s2.data<int64_t>()[s2.ElementOffset(i)] == 0) return nullptr;
    }
  }
  return e.Op("Reshape", {m["x"], m["s2"]}, outer.attrs);
}

Value* DropZeroPad(Emitter& e, const Match& m) {
  const Node& pad = e.root();
  const Value& x = *m["x"];
  if (!x.shape || x.kind != ObjectKind::kTensor) return nullptr;
  const size_t want = 2 * x.shape->size();
  const Tensor& t = *m["pads"]->constant;
  if (pad.attr("pads") != nullptr || t.dtype() != DType::kI64 || t.rank() != 1 ||
      static_cast<size_t>(t.numel()) != want) {
    return nullptr;
  }
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.data<int64_t>()[t.ElementOffset(i)] != 0) return nullptr;
  }
  return e.Op("Identity", {m["x"]});
}

}  // namespace

std::vector<Rule> ChainRules() {
  std::vector<Rule> rules;
  rules.push_back(Rule{"transpose_chain",
                       P::Op("Transpose", {P::Op("Transpose", {P::Any("x")}).As("inner")}),
                       &CollapseTransposes});
  rules.push_back(
      Rule{"transpose_identity", P::Op("Transpose", {P::Any("x")}), &DropIdentityTranspose});
  rules.push_back(Rule{"transpose_unit_axes", P::Op("Transpose", {P::Any("x")}),
                       &TransposeAsReshape, kLatePhase});
  rules.push_back(Rule{
      "reshape_chain",
      P::Op("Reshape", {P::Op("Reshape", {P::Any("x"), P::Any()}).As("inner"), P::Const("s2")}),
      &CollapseReshapes});
  rules.push_back(
      Rule{"pad_identity", P::Op("Pad", {P::Any("x"), P::Const("pads")}), &DropZeroPad});
  return rules;
}

}  // namespace dynvm::compiler::rewrite
