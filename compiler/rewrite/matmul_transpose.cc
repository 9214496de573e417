// Transposes read by a product become the product's operand strides (late phase: these rules
// run after every other rule reached its fixpoint, so attention's Q·Kᵀ, whose MatMul comes
// first in program order, is still attention's; compiler/rewrite/rewrite.h).
//
// matmul_transpose: MatMul(A', B'), A' = Transpose(a, p) | a, B' = Transpose(b, q) | b, at least
//   one of them a Transpose -> dynvm::MatMul(a, b, a_perm = p, b_perm = q) (an operand with no
//   Transpose has no perm attribute). Each folded Transpose is read only by this MatMul, its
//   input is an f32 tensor of known rank r >= 2 that is not a constant (folding makes a constant
//   weight a plain one), and its permutation keeps the input's last axis in a matrix axis
//   (p[r-1] == r-1 or p[r-2] == r-1: the permuted matrix has a unit stride along its rows or its
//   columns, which dnnl_sgemm reads in place as a plain or transposed operand with a leading
//   dimension). Both operands are f32. A Transpose that does not fold (a permutation that moves
//   the last axis into the batch dims, which the product would have to copy; an input of unknown
//   rank; a constant input; a Transpose read elsewhere) stays, and its result is read as is;
//   with no Transpose folded the rule refuses. Other dtypes are refused.
// linear_transpose: dynvm::Linear(x, Transpose(w, [1, 0]), b?) with w a 2-D f32 value read only
//   there -> dynvm::Linear(x, w, b?) with trans_b flipped (matmul_bias takes MatMul(x, w.t()) +
//   b before matmul_transpose could).
#include <optional>
#include <string>
#include <vector>

#include "compiler/builder.h"
#include "compiler/rewrite/rules.h"

namespace dynvm::compiler::rewrite {
namespace {

using P = Pattern;

bool F32Tensor(const Value& v) { return v.dtype == DType::kF32 && v.kind == ObjectKind::kTensor; }

// Transpose(x) read only here, captured as name_t, or x itself.
P Operand(const std::string& name) {
  return P::OneOf({P::Op("Transpose", {P::Any(name)}).OneUse().As(name + "_t"), P::Any(name)});
}

// How operand `name` is read: its Transpose's input and permutation when the Transpose folds,
// else the MatMul's operand as is (perm empty: the Transpose, if any, stays).
struct Folded {
  Value* value = nullptr;
  std::vector<int64_t> perm;
};

Folded FoldOperand(const Match& m, const std::string& name) {
  const Node* t = m.node(name + "_t");
  if (t == nullptr) return {m[name], {}};
  const Value& x = *m[name];
  const int r = x.rank();
  Folded as_is{m[name + "_t"], {}};
  if (!F32Tensor(x) || r < 2 || x.constant.has_value()) return as_is;
  std::optional<std::vector<int64_t>> p = TransposePerm(*t);
  if (!p || static_cast<int>(p->size()) != r) return as_is;
  if ((*p)[r - 1] != r - 1 && (*p)[r - 2] != r - 1) return as_is;
  return {m[name], std::move(*p)};
}

Value* FoldMatMulTransposes(Emitter& e, const Match& m) {
  Folded a = FoldOperand(m, "a"), b = FoldOperand(m, "b");
  if (a.perm.empty() && b.perm.empty()) return nullptr;
  const Node& mm = e.root();
  if (!F32Tensor(*mm.inputs[0]) || !F32Tensor(*mm.inputs[1])) return nullptr;
  Attrs attrs;
  if (!a.perm.empty()) attrs["a_perm"] = AttrInts(std::move(a.perm));
  if (!b.perm.empty()) attrs["b_perm"] = AttrInts(std::move(b.perm));
  return e.Op("MatMul", {a.value, b.value}, std::move(attrs), "dynvm");
}

Value* FoldLinearTranspose(Emitter& e, const Match& m) {
  const Node& lin = e.root();
  const Value& w = *m["w"];
  if (!F32Tensor(w) || w.rank() != 2 || w.constant.has_value()) return nullptr;
  std::optional<std::vector<int64_t>> p = TransposePerm(*m.node("w_t"));
  if (!p || *p != std::vector<int64_t>{1, 0}) return nullptr;
  const AttrValue* tb = lin.attr("trans_b");
  Attrs attrs = lin.attrs;
  attrs["trans_b"] = AttrInt(tb != nullptr && tb->i != 0 ? 0 : 1);
  std::vector<Value*> inputs = lin.inputs;
  inputs[1] = m["w"];
  return e.Op("Linear", std::move(inputs), std::move(attrs), "dynvm");
}

}  // namespace

std::vector<Rule> MatMulTransposeRules() {
  std::vector<Rule> rules;
  rules.push_back(Rule{"matmul_transpose", P::Op("MatMul", {Operand("a"), Operand("b")}),
                       &FoldMatMulTransposes, kLatePhase});
  P wt = P::Op("Transpose", {P::Any("w")}).OneUse().As("w_t");
  rules.push_back(Rule{"linear_transpose",
                       P::OneOf({P::Op("dynvm::Linear", {P::Any("x"), wt, P::Any("b")}),
                                 P::Op("dynvm::Linear", {P::Any("x"), wt})}),
                       &FoldLinearTranspose, kLatePhase});
  return rules;
}

}  // namespace dynvm::compiler::rewrite
