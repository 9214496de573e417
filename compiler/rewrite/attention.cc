// Scaled dot-product attention rules: the forms torch.onnx.export writes (torch 1.13, opsets
// 11-17) for nn.MultiheadAttention / nn.TransformerEncoderLayer and hand-written blocks become
// one dynvm::Attention (compiler/ops/dynvm.cc has its definition), with the head split and
// merge Transposes around it folded into its operand and result strides.
//
// attention:  MatMul(Softmax(M, axis = last), V')
//             M  = S | Add(S, mask) | Where(cond, fill, S) | Where(cond, S, fill)
//             S  = sc(MatMul(sc(Q'), sc(K')))
//             sc(x) = x | Div(x, c) | Mul(x, c)     c: a one-element float constant
//             Q', K', V' = Transpose(x) (read only here) | x
//             -> dynvm::Attention(Q, K, V[, mask | cond]) with scale = the product of the c's
//   Q', K', V' have one rank r >= 2; fill is a one-element float constant; an additive mask
//   is f32 and cond bool, of rank <= r. Refused: Softmax over another axis, an intermediate
//   (the scores, the probabilities) read elsewhere, a dtype other than f32, leading dims of
//   Q', K', V' or a mask dim that cannot match the scores (constants that differ, a broadcast
//   operand), a mask of higher rank than the scores. A mask dim the compiler cannot compare
//   (a symbol) is checked by the kernel at run time: one that does not broadcast is an error
//   naming the node.
// attention_transpose: Transpose(dynvm::Attention(...)) (the Attention read only there)
//             -> dynvm::Attention with the permutation folded into out_perm.
#include <optional>
#include <vector>

#include "compiler/rewrite/rules.h"

namespace dynvm::compiler::rewrite {
namespace {

using P = Pattern;

P Scalar(const std::string& name) {
  return P::Const(name, [](const Value& v, const Match&) {
    return IsFloat()(v, Match{}) && ConstScalar(v).has_value();
  });
}

// x, or x divided / multiplied by a one-element constant (captured as tag_div / tag_mul).
P Scaled(const P& x, const std::string& tag) {
  return P::OneOf({P::Op("Div", {x, Scalar(tag + "_dc")}).As(tag + "_div"),
                   P::Op("Mul", {x, Scalar(tag + "_mc")}).Commutative().As(tag + "_mul"), x});
}

// Transpose(x) read only here (folded into strides), or x.
P Transposed(const std::string& name) {
  return P::OneOf({P::Op("Transpose", {P::Any(name)}).OneUse().As(name + "_t"), P::Any(name)});
}

std::vector<int64_t> Identity(int rank) {
  std::vector<int64_t> p(rank);
  for (int i = 0; i < rank; ++i) p[i] = i;
  return p;
}

// The permutation folded for operand `name` (identity without a Transpose).
std::optional<std::vector<int64_t>> FoldedPerm(const Match& m, const std::string& name) {
  if (const Node* t = m.node(name + "_t"); t != nullptr) return TransposePerm(*t);
  const int rank = m[name]->rank();
  if (rank < 0) return std::nullopt;
  return Identity(rank);
}

// The dims of Transpose(x, perm).
std::vector<Dim> Permuted(const Value& x, const std::vector<int64_t>& perm) {
  std::vector<Dim> d(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) d[i] = (*x.shape)[perm[i]];
  return d;
}

// Two dims that may be equal at run time without broadcasting either: the same expression,
// or not both constants (checked at run time) unless one of them is the constant 1.
bool MayMatch(Dim a, Dim b) {
  if (a == b) return true;
  std::optional<int64_t> ca = SymbolicContext::AsConst(a), cb = SymbolicContext::AsConst(b);
  if (ca && cb) return false;
  return !(ca && *ca == 1) && !(cb && *cb == 1);
}

// The multiplier the captured Div/Mul constants of `tag` contribute.
double ScaleOf(const Match& m, const std::string& tag) {
  if (m.node(tag + "_div") != nullptr) return 1.0 / *ConstScalar(*m[tag + "_dc"]);
  if (m.node(tag + "_mul") != nullptr) return *ConstScalar(*m[tag + "_mc"]);
  return 1.0;
}

AttrValue Ints(std::vector<int64_t> v) {
  AttrValue a;
  a.type = AttrValue::Type::kInts;
  a.ints = std::move(v);
  return a;
}

AttrValue Float(double f) {
  AttrValue a;
  a.type = AttrValue::Type::kFloat;
  a.f = static_cast<float>(f);
  return a;
}

AttrValue Int(int64_t i) {
  AttrValue a;
  a.type = AttrValue::Type::kInt;
  a.i = i;
  return a;
}

// The mask (or condition) fits scores of dims `scores`: rank <= r, each dim 1 or matching.
bool MaskFits(const Value& mask, const std::vector<Dim>& scores) {
  if (!mask.shape || mask.rank() > static_cast<int>(scores.size())) return false;
  const size_t off = scores.size() - mask.shape->size();
  for (size_t i = 0; i < mask.shape->size(); ++i) {
    Dim md = (*mask.shape)[i], sd = scores[off + i];
    std::optional<int64_t> mc = SymbolicContext::AsConst(md), sc = SymbolicContext::AsConst(sd);
    if (md == sd || (mc && *mc == 1)) continue;
    if (mc && sc) return false;        // differ
    if (sc && *sc == 1) return false;  // the mask would broadcast the scores
  }
  return true;
}

Value* FuseAttention(Emitter& e, const Match& m) {
  Value *q = m["q"], *k = m["k"], *v = m["v"];
  const int r = q->rank();
  if (r < 2 || k->rank() != r || v->rank() != r) return nullptr;
  for (const Value* x : {q, k, v}) {
    if (x->dtype != DType::kF32) return nullptr;
  }
  std::optional<std::vector<int64_t>> qp = FoldedPerm(m, "q"), kp = FoldedPerm(m, "k"),
                                      vp = FoldedPerm(m, "v");
  if (!qp || !kp || !vp) return nullptr;
  const std::vector<Dim> qd = Permuted(*q, *qp), kd = Permuted(*k, *kp), vd = Permuted(*v, *vp);
  // Q' [..., Lq, D] x K' [..., D, Lk]; P [..., Lq, Lk] x V' [..., Lk, Dv].
  if (!MayMatch(qd[r - 1], kd[r - 2]) || !MayMatch(kd[r - 1], vd[r - 2])) return nullptr;
  std::vector<Dim> scores(qd.begin(), qd.end() - 1);
  scores.push_back(kd[r - 1]);
  for (int i = 0; i < r - 2; ++i) {
    if (!MayMatch(qd[i], kd[i]) || !MayMatch(qd[i], vd[i])) return nullptr;
  }
  const double scale = ScaleOf(m, "q") * ScaleOf(m, "k") * ScaleOf(m, "s");
  Attrs attrs;
  attrs["q_perm"] = Ints(*qp);
  attrs["k_perm"] = Ints(*kp);
  attrs["v_perm"] = Ints(*vp);
  attrs["scale"] = Float(scale);
  std::vector<Value*> inputs = {q, k, v};
  int64_t mode = 0;
  if (m.node("add") != nullptr) mode = 1;
  if (m.node("where_t") != nullptr) mode = 2;
  if (m.node("where_f") != nullptr) mode = 3;
  if (mode != 0) {
    Value* mask = m["mask"];
    if (mask->dtype != (mode == 1 ? DType::kF32 : DType::kBool)) return nullptr;
    if (!MaskFits(*mask, scores)) return nullptr;
    inputs.push_back(mask);
    if (mode >= 2) attrs["fill"] = Float(*ConstScalar(*m["fill"]));
  }
  attrs["mask_mode"] = Int(mode);
  return e.Op("Attention", std::move(inputs), std::move(attrs), "dynvm");
}

bool SoftmaxOverLast(const Node& n, const Match&) {
  const AttrValue* axis = n.attr("axis");
  const int rank = n.inputs[0]->rank();
  if (rank < 2) return false;
  if (axis == nullptr) return rank == 2;  // the default differs between opsets but for rank 2
  return axis->i == -1 || axis->i == rank - 1;
}

Value* FoldOutputTranspose(Emitter& e, const Match& m) {
  const Node& att = *m.node("att");
  std::optional<std::vector<int64_t>> p2 = TransposePerm(e.root());
  const AttrValue* out = att.attr("out_perm");
  const int r = att.outputs[0]->rank();
  if (!p2 || static_cast<int>(p2->size()) != r) return nullptr;
  std::vector<int64_t> p1 = out != nullptr ? out->ints : Identity(r);
  if (static_cast<int>(p1.size()) != r) return nullptr;
  std::vector<int64_t> composed(r);
  for (int i = 0; i < r; ++i) {
    if ((*p2)[i] < 0 || (*p2)[i] >= r) return nullptr;
    composed[i] = p1[(*p2)[i]];
  }
  Attrs attrs = att.attrs;
  attrs["out_perm"] = Ints(std::move(composed));
  return e.Op("Attention", att.inputs, std::move(attrs), "dynvm");
}

}  // namespace

std::vector<Rule> AttentionRules() {
  P qk = P::Op("MatMul", {Scaled(Transposed("q"), "q"), Scaled(Transposed("k"), "k")});
  P s = Scaled(qk, "s");
  P masked = P::OneOf({
      P::Op("Add", {s, P::Any("mask")}).Commutative().As("add"),
      P::Op("Where", {P::Any("mask"), Scalar("fill"), s}).As("where_t"),
      P::Op("Where", {P::Any("mask"), s, Scalar("fill")}).As("where_f"),
      s,
  });
  P probs = P::Op("Softmax", {masked}).NodeIs(&SoftmaxOverLast);
  std::vector<Rule> rules;
  rules.push_back(Rule{"attention", P::Op("MatMul", {probs, Transposed("v")}), &FuseAttention});
  P att = P::OneOf({P::Op("dynvm::Attention", {P::Any(), P::Any(), P::Any()}),
                    P::Op("dynvm::Attention", {P::Any(), P::Any(), P::Any(), P::Any()})})
              .OneUse()
              .As("att");
  rules.push_back(Rule{"attention_transpose", P::Op("Transpose", {att}), &FoldOutputTranspose});
  return rules;
}

}  // namespace dynvm::compiler::rewrite
