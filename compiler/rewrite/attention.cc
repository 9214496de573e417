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
// onnx_attention: Attention(Q, K, V[, attn_mask]) of opset 23 (its reference kernel:
//             kernels/reference/msft_attention.cc) -> dynvm::Attention with K read transposed
//             (k_perm), the scale (the attribute, else 1/sqrt(head size)), a bool mask as
//             Where(mask, S, lowest float) (mask_mode 3) and a float one added (1). 4-D inputs as
//             they are; 3-D ones [B, S, heads x head size] through Reshapes to [B, S, heads, head
//             size], read with the heads transposed out by the operands' and the result's
//             strides. is_causal without attn_mask as a causal bool mask (Trilu of ones shaped
//             [Sq, Skv] at run time; key j visible to query i when j <= i, as ONNX Runtime
//             without a past). 4-D grouped heads (G query heads per key/value head, constant
//             counts): Q reshaped to [B, kv heads, G x Sq, H], a mask that does not vary over
//             the heads tiled G times along its rows, the result reshaped back. Only the plain
//             form: no past, no present or qk outputs, softcap 0, is_causal only without
//             attn_mask, f32, the head sizes known, a mask that fits the scores (MaskFits);
//             3-D inputs with as many query heads as key/value heads.
// attention_kv_repeat: dynvm::Attention(Q, K, V[, mask]) whose K and V repeat their heads,
//             Reshape(Expand(Unsqueeze(x, a + 1), [..., kvh, g, ...]), [..., kvh * g, ...])
//             (torch's x[:, :, None].expand(...).reshape(...) of grouped-query attention; the
//             repeated axis the heads axis r - 3 after k_perm / v_perm, kvh and g >= 2
//             constants, Q's heads kvh * g) -> dynvm::Attention of rank r + 1 reading
//             Unsqueeze(x, a + 1) itself (K' [..., kvh, 1, ...] broadcast along the group),
//             Q reshaped to [..., kvh, g, ...] at its heads axis, a mask of rank >= 3 whose
//             heads dim is 1 given a unit group axis, and the result's heads merged back by a
//             Reshape (a view). The repeat (a copy of K and V per call) is gone. Refused: a
//             per-head mask, symbolic head counts.
// shape_of_kv_repeat: Shape(r) of such a repeat r (no start/end) -> Concat(Shape(x)[:a],
//             [kvh * g], Shape(x)[a + 1:]): exports read the repeated K's shape (to size the
//             mask), which would keep the repeat alive and attention_kv_repeat from applying.
// msft_multi_head_attention: com.microsoft MultiHeadAttention(query, key, value[, bias]) with
//             3-D operands, the bias absent or a constant (added to Q, K and V by its parts), no
//             key_padding_mask, attention_bias or past, one output, unidirectional 0 -> the
//             same 3-D form of dynvm::Attention (Reshapes and strides).
#include <cmath>
#include <limits>
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

// The plain form of ONNX's Attention that dynvm::Attention computes (see onnx_attention above).
bool PlainOnnxAttention(const Node& n, const Match&) {
  if (n.inputs.size() < 3 || n.outputs.empty()) return false;
  for (size_t i = 4; i < n.inputs.size(); ++i) {
    if (n.inputs[i] != nullptr) return false;  // past_key, past_value
  }
  for (size_t i = 1; i < n.outputs.size(); ++i) {
    if (n.outputs[i] != nullptr) return false;  // present_key, present_value, qk
  }
  const AttrValue* softcap = n.attr("softcap");
  if (softcap != nullptr && softcap->f != 0.0f) return false;
  // is_causal only without attn_mask: the causal mask is then made here.
  const AttrValue* causal = n.attr("is_causal");
  const bool has_mask = n.inputs.size() > 3 && n.inputs[3] != nullptr;
  return causal == nullptr || causal->i == 0 || !has_mask;
}

// The causal mask [Sq, T] of bool (key j visible to query i when j <= i): Trilu of ones shaped
// by the sequence axes of q and k (`axis`), computed at run time.
Value* CausalMask(Emitter& e, Value* q, Value* k, int64_t axis) {
  Attrs seq = {{"start", Int(axis)}, {"end", Int(axis + 1)}};
  Value* dims =
      e.Op("Concat", {e.Op("Shape", {q}, seq), e.Op("Shape", {k}, seq)}, {{"axis", Int(0)}});
  AttrValue one;
  one.type = AttrValue::Type::kTensor;
  one.tensor = *Tensor::FromVector<uint8_t>(DType::kBool, {1}, {1});
  return e.Op("Trilu", {e.Op("ConstantOfShape", {dims}, {{"value", one}})}, {{"upper", Int(0)}});
}

std::optional<int64_t> IntAttr(const Node& n, const char* name) {
  const AttrValue* a = n.attr(name);
  if (a == nullptr || a->type != AttrValue::Type::kInt) return std::nullopt;
  return a->i;
}

// Reshape(x, [0, 0, heads, size]): [B, S, heads x size] -> [B, S, heads, size].
Value* SplitHeads(Emitter& e, Value* x, int64_t heads, int64_t size) {
  Value* shape = e.Constant(*Tensor::FromVector<int64_t>(DType::kI64, {4}, {0, 0, heads, size}));
  return e.Op("Reshape", {x, shape});
}

Value* FuseOnnxAttention(Emitter& e, const Match& m) {
  const Node& n = e.root();
  Value *q = m["q"], *k = m["k"], *v = m["v"];
  const int r = q->rank();
  if ((r != 3 && r != 4) || k->rank() != r || v->rank() != r) return nullptr;
  for (const Value* x : {q, k, v}) {
    if (x->dtype != DType::kF32) return nullptr;
  }
  int64_t heads = 0, head = 0, v_head = 0, group = 1;
  if (r == 4) {
    std::optional<int64_t> h = SymbolicContext::AsConst((*q->shape)[3]);
    if (!h || (*k->shape)[1] != (*v->shape)[1]) return nullptr;
    // As many query heads as key/value heads (one expression: a constant, or one symbol), or
    // constant counts, the query heads a multiple (grouped: below).
    if ((*q->shape)[1] != (*k->shape)[1]) {
      std::optional<int64_t> qn = SymbolicContext::AsConst((*q->shape)[1]);
      std::optional<int64_t> kn = SymbolicContext::AsConst((*k->shape)[1]);
      if (!qn || !kn || *kn <= 0 || *qn % *kn != 0) return nullptr;
      group = *qn / *kn;
      heads = *kn;
    }
    head = *h;
  } else {
    std::optional<int64_t> qn = IntAttr(n, "q_num_heads"), kn = IntAttr(n, "kv_num_heads");
    std::optional<int64_t> qh = SymbolicContext::AsConst((*q->shape)[2]);
    std::optional<int64_t> vh = SymbolicContext::AsConst((*v->shape)[2]);
    std::optional<int64_t> kh = SymbolicContext::AsConst((*k->shape)[2]);
    if (!qn || !kn || *qn != *kn || *qn <= 0 || !qh || !vh || !kh || *qh != *kh || *qh % *qn != 0 ||
        *vh % *qn != 0) {
      return nullptr;
    }
    heads = *qn;
    head = *qh / heads;
    v_head = *vh / heads;
  }
  if (head <= 0) return nullptr;
  const AttrValue* sa = n.attr("scale");
  const double scale = sa != nullptr && sa->f != 0.0f ? sa->f : 1.0 / std::sqrt(double(head));
  // The scores [B, heads, Sq, T] (T the key length: no past here).
  std::vector<Dim> scores;
  if (r == 4) {
    scores = {(*q->shape)[0], (*q->shape)[1], (*q->shape)[2], (*k->shape)[2]};
  } else {
    scores = {(*q->shape)[0], e.module().sym().Const(heads), (*q->shape)[1], (*k->shape)[1]};
  }
  int64_t mode = 0;
  Value* mask = n.inputs.size() > 3 ? n.inputs[3] : nullptr;
  if (mask != nullptr) {
    if (mask->dtype != DType::kBool && mask->dtype != DType::kF32) return nullptr;
    if (!MaskFits(*mask, scores)) return nullptr;
    mode = mask->dtype == DType::kBool ? 3 : 1;
  }
  // Grouped heads: a mask that does not vary over the heads.
  if (group > 1 && mask != nullptr && mask->rank() >= 3) {
    std::optional<int64_t> mh = SymbolicContext::AsConst((*mask->shape)[mask->rank() - 3]);
    if (!mh || *mh != 1) return nullptr;
  }
  const AttrValue* causal = n.attr("is_causal");
  const bool is_causal = causal != nullptr && causal->i != 0;
  Attrs attrs;
  attrs["scale"] = Float(scale);
  // ONNX Runtime masks with the lowest float, not -inf: a row with every key masked is uniform.
  // The causal mask alone never masks every key (key 0 is always visible): -inf, which lets the
  // fused kernel skip the masked keys.
  if (is_causal) {
    mask = CausalMask(e, q, k, r == 4 ? 2 : 1);
    mode = 3;
    attrs["fill"] = Float(-std::numeric_limits<double>::infinity());
  } else if (mode == 3) {
    attrs["fill"] = Float(std::numeric_limits<float>::lowest());
  }
  attrs["mask_mode"] = Int(mode);
  std::vector<Value*> inputs;
  if (r == 4 && group > 1) {
    // Query heads h = kv x group + g: Q as [B, kv heads, group x Sq, H] (a contiguous Reshape,
    // row g Sq + s), the mask's rows tiled group times to match, the result reshaped back.
    attrs["k_perm"] = Ints({0, 1, 3, 2});
    Value* shape = e.Constant(*Tensor::FromVector<int64_t>(DType::kI64, {4}, {0, heads, -1, 0}));
    inputs = {e.Op("Reshape", {q, shape}), k, v};
    // The causal mask [Sq, T] is made here (its type is inferred after the sweep): tiled.
    std::optional<int64_t> rows;
    if (!is_causal && mask != nullptr && mask->rank() >= 2) {
      rows = SymbolicContext::AsConst((*mask->shape)[mask->rank() - 2]);
    }
    const int64_t mr = is_causal ? 2 : mask != nullptr ? mask->rank() : 0;
    if (mr >= 2 && (!rows || *rows != 1)) {
      std::vector<int64_t> reps(mr, 1);
      reps[mr - 2] = group;
      mask =
          e.Op("Tile", {mask, e.Constant(*Tensor::FromVector<int64_t>(DType::kI64, {mr}, reps))});
    }
  } else if (r == 4) {
    attrs["k_perm"] = Ints({0, 1, 3, 2});
    inputs = {q, k, v};
  } else {
    attrs["q_perm"] = Ints({0, 2, 1, 3});
    attrs["k_perm"] = Ints({0, 2, 3, 1});
    attrs["v_perm"] = Ints({0, 2, 1, 3});
    attrs["out_perm"] = Ints({0, 2, 1, 3});
    inputs = {SplitHeads(e, q, heads, head), SplitHeads(e, k, heads, head),
              SplitHeads(e, v, heads, v_head)};
  }
  if (mask != nullptr) inputs.push_back(mask);
  Value* y = e.Op("Attention", std::move(inputs), std::move(attrs), "dynvm");
  if (r == 4 && group > 1) {
    Value* shape =
        e.Constant(*Tensor::FromVector<int64_t>(DType::kI64, {4}, {0, heads * group, -1, 0}));
    return e.Op("Reshape", {y, shape});
  }
  if (r == 4) return y;
  Value* merged =
      e.Constant(*Tensor::FromVector<int64_t>(DType::kI64, {3}, {0, 0, heads * v_head}));
  return e.Op("Reshape", {y, merged});
}

// The plain form of com.microsoft's MultiHeadAttention: query, key, value (3-D), a bias that is
// absent or a constant, no mask, attention_bias or past, one output, not unidirectional.
bool PlainMultiHeadAttention(const Node& n, const Match&) {
  if (n.inputs.size() < 3 || n.outputs.empty()) return false;
  for (size_t i = 0; i < 3; ++i) {
    if (n.inputs[i] == nullptr || n.inputs[i]->rank() != 3) return false;
  }
  if (n.inputs.size() > 3 && n.inputs[3] != nullptr && !n.inputs[3]->constant) return false;
  for (size_t i = 4; i < n.inputs.size(); ++i) {
    if (n.inputs[i] != nullptr) return false;
  }
  for (size_t i = 1; i < n.outputs.size(); ++i) {
    if (n.outputs[i] != nullptr) return false;
  }
  std::optional<int64_t> uni = IntAttr(n, "unidirectional");
  return !uni || *uni == 0;
}

// x + bias[from, from + count) (a constant), or x without a bias.
Value* AddBiasPart(Emitter& e, Value* x, const Value* bias, int64_t from, int64_t count) {
  if (bias == nullptr) return x;
  const Tensor& t = *bias->constant;
  std::vector<float> part(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) part[i] = t.data<float>()[t.ElementOffset(from + i)];
  return e.Op("Add", {x, e.Constant(*Tensor::FromVector<float>(DType::kF32, {count}, part))});
}

Value* FuseMultiHeadAttention(Emitter& e, const Match& m) {
  const Node& n = e.root();
  Value *q = m["q"], *k = m["k"], *v = m["v"];
  const Value* bias = n.inputs.size() > 3 ? n.inputs[3] : nullptr;
  for (const Value* x : {q, k, v}) {
    if (x->dtype != DType::kF32) return nullptr;
  }
  std::optional<int64_t> heads = IntAttr(n, "num_heads");
  std::optional<int64_t> qh = SymbolicContext::AsConst((*q->shape)[2]);
  std::optional<int64_t> kh = SymbolicContext::AsConst((*k->shape)[2]);
  std::optional<int64_t> vh = SymbolicContext::AsConst((*v->shape)[2]);
  if (!heads || *heads <= 0 || !qh || !kh || !vh || *qh != *kh || *qh % *heads != 0 ||
      *vh % *heads != 0) {
    return nullptr;
  }
  if (bias != nullptr && (bias->dtype != DType::kF32 || bias->constant->numel() != 2 * *qh + *vh)) {
    return nullptr;
  }
  const int64_t head = *qh / *heads, v_head = *vh / *heads;
  const AttrValue* sa = n.attr("scale");
  Attrs attrs;
  attrs["scale"] =
      Float(sa != nullptr && sa->f != 0.0f ? sa->f : 1.0 / std::sqrt(static_cast<double>(head)));
  attrs["mask_mode"] = Int(0);
  attrs["q_perm"] = Ints({0, 2, 1, 3});
  attrs["k_perm"] = Ints({0, 2, 3, 1});
  attrs["v_perm"] = Ints({0, 2, 1, 3});
  attrs["out_perm"] = Ints({0, 2, 1, 3});
  std::vector<Value*> inputs = {
      SplitHeads(e, AddBiasPart(e, q, bias, 0, *qh), *heads, head),
      SplitHeads(e, AddBiasPart(e, k, bias, *qh, *qh), *heads, head),
      SplitHeads(e, AddBiasPart(e, v, bias, 2 * *qh, *vh), *heads, v_head)};
  Value* y = e.Op("Attention", std::move(inputs), std::move(attrs), "dynvm");
  Value* merged = e.Constant(*Tensor::FromVector<int64_t>(DType::kI64, {3}, {0, 0, *vh}));
  return e.Op("Reshape", {y, merged});
}

// ---- attention_kv_repeat ----

// The permutation attribute `name` of `n`, or the identity of rank r.
std::vector<int64_t> PermOrIdentity(const Node& n, const char* name, int r) {
  const AttrValue* a = n.attr(name);
  if (a != nullptr && a->type == AttrValue::Type::kInts && static_cast<int>(a->ints.size()) == r) {
    return a->ints;
  }
  std::vector<int64_t> id(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) id[static_cast<size_t>(i)] = i;
  return id;
}

// A permutation of rank r whose axis r - 3 (the heads) reads operand axis `a`, rewritten for the
// operand with axis `a` split in two (a, a + 1): the heads become (kv heads, group).
std::vector<int64_t> SplitPerm(const std::vector<int64_t>& perm, int64_t a) {
  std::vector<int64_t> out;
  const int r = static_cast<int>(perm.size());
  for (int i = 0; i < r; ++i) {
    if (i == r - 3) {
      out.push_back(a);
      out.push_back(a + 1);
    } else {
      out.push_back(perm[i] < a ? perm[i] : perm[i] + 1);
    }
  }
  return out;
}

// Shape(x) with axes [at, at + count) replaced by the constant dims `mid`.
Value* ShapeWith(Emitter& e, Value* x, int64_t at, int64_t count, std::vector<int64_t> mid) {
  Value* shape = e.Op("Shape", {x});
  std::vector<Value*> parts;
  auto ints = [&](std::vector<int64_t> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    return e.Constant(*Tensor::FromVector<int64_t>(DType::kI64, {n}, v));
  };
  if (at > 0) parts.push_back(e.Op("Slice", {shape, ints({0}), ints({at})}));
  parts.push_back(ints(std::move(mid)));
  parts.push_back(
      e.Op("Slice", {shape, ints({at + count}), ints({std::numeric_limits<int64_t>::max()})}));
  return e.Op("Concat", std::move(parts), {{"axis", Int(0)}});
}

// What one repeated operand (K or V) of the match is: x [..., kv heads at `axis`, ...] whose
// heads Unsqueeze + Expand + Reshape repeat `group` times each (torch's x[:, :, None]
// .expand(b, kvh, g, t, d).reshape(b, kvh * g, t, d)).
struct KvRepeat {
  Value* unsqueezed = nullptr;  // [..., kv heads, 1, ...]
  int64_t axis = 0, kv_heads = 0, group = 0;
};

// The repeat of `rep`'s producers: Reshape(Expand(Unsqueeze(x, a + 1), [..., kvh, g, ...]),
// [..., kvh * g, ...]) in `rep`'s region, kvh and g >= 2 constants.
std::optional<KvRepeat> RepeatChain(const Value* rep) {
  auto producer = [](const Value* v, const char* op) -> const Node* {
    if (v == nullptr || v->producer == nullptr || !v->producer->domain.empty() ||
        v->producer->op != op || v->producer->inputs.empty() || v->graph != v->producer->graph) {
      return nullptr;
    }
    return v->producer;
  };
  const Node* rn = producer(rep, "Reshape");
  const Value* ex = rn != nullptr ? rn->inputs[0] : nullptr;
  const Node* en = producer(ex, "Expand");
  Value* u = en != nullptr ? en->inputs[0] : nullptr;
  const Node* un = producer(u, "Unsqueeze");
  const Value* x = un != nullptr ? un->inputs[0] : nullptr;
  if (x == nullptr || !u->shape || !ex->shape || !rep->shape || !x->shape ||
      rep->graph != u->graph || ex->graph != u->graph) {
    return std::nullopt;
  }
  std::optional<int64_t> ua;
  if (un->inputs.size() > 1 && un->inputs[1] != nullptr) {
    if (std::optional<double> c = ConstScalar(*un->inputs[1]); c.has_value()) {
      ua = static_cast<int64_t>(*c);
    }
  } else if (const AttrValue* a = un->attr("axes");
             a != nullptr && a->type == AttrValue::Type::kInts && a->ints.size() == 1) {
    ua = a->ints[0];
  }
  const int ur = u->rank();
  if (!ua) return std::nullopt;
  if (*ua < 0) *ua += ur;
  if (*ua < 1 || *ua >= ur || ex->rank() != ur || rep->rank() != ur - 1) return std::nullopt;
  const std::vector<Dim>&us = *u->shape, &es = *ex->shape, &rs = *rep->shape;
  for (int i = 0; i < ur; ++i) {
    if (i != *ua && us[i] != es[i]) return std::nullopt;  // only the new axis is expanded
  }
  KvRepeat k;
  k.axis = *ua - 1;
  std::optional<int64_t> kvh = SymbolicContext::AsConst(es[k.axis]);
  std::optional<int64_t> g = SymbolicContext::AsConst(es[*ua]);
  std::optional<int64_t> merged = SymbolicContext::AsConst(rs[k.axis]);
  if (!kvh || !g || !merged || *g < 2 || *merged != *kvh * *g) return std::nullopt;
  for (int i = 0; i < ur - 1; ++i) {
    if (i != k.axis && rs[i] != es[i < k.axis ? i : i + 1]) return std::nullopt;
  }
  k.unsqueezed = u;
  k.kv_heads = *kvh;
  k.group = *g;
  return k;
}

std::optional<KvRepeat> RepeatOf(const Match& m, const std::string& tag) {
  return RepeatChain(m[tag + "_rep"]);
}

// Shape(r) of such a repeat r, without start or end.
bool ShapeOfRepeat(const Node& n, const Match&) {
  return n.inputs.size() == 1 && n.attr("start") == nullptr && n.attr("end") == nullptr &&
         RepeatChain(n.inputs[0]).has_value();
}

// Its dims from the unrepeated x, so that reading the repeat's shape (an export sizes the mask
// by it) does not keep the repeat alive.
Value* FoldShapeOfRepeat(Emitter& e, const Match& m) {
  std::optional<KvRepeat> k = RepeatChain(m["r"]);
  if (!k) return nullptr;
  Value* x = k->unsqueezed->producer->inputs[0];
  return ShapeWith(e, x, k->axis, 1, {k->kv_heads * k->group});
}

// dynvm::Attention whose K and V repeat their heads (grouped-query attention written with
// expand + reshape): reads the kv heads directly, Q's heads split (kv heads, group) and K and V
// broadcast along the group, instead of the materialized repeat (a copy of K and V per call).
Value* FoldKvRepeat(Emitter& e, const Match& m) {
  const Node& att = e.root();
  Value* q = m["q"];
  const int r = q->rank();
  if (r < 3 || !q->shape) return nullptr;
  std::optional<KvRepeat> k = RepeatOf(m, "k"), v = RepeatOf(m, "v");
  if (!k || !v || k->kv_heads != v->kv_heads || k->group != v->group) return nullptr;
  const std::vector<int64_t> qp = PermOrIdentity(att, "q_perm", r);
  const std::vector<int64_t> kp = PermOrIdentity(att, "k_perm", r);
  const std::vector<int64_t> vp = PermOrIdentity(att, "v_perm", r);
  const std::vector<int64_t> op = PermOrIdentity(att, "out_perm", r);
  // The heads axis (r - 3 after the permutations) is the repeated one in K and V.
  if (kp[r - 3] != k->axis || vp[r - 3] != v->axis) return nullptr;
  const int64_t aq = qp[r - 3];
  const int64_t heads = k->kv_heads * k->group;
  std::optional<int64_t> qh = SymbolicContext::AsConst((*q->shape)[aq]);
  if (!qh || *qh != heads) return nullptr;
  Value* mask = att.inputs.size() > 3 ? att.inputs[3] : nullptr;
  if (mask != nullptr) {
    const int mr = mask->rank();
    if (mr < 0 || mr > r) return nullptr;
    if (mr >= 3) {  // its heads axis must broadcast: insert the group axis beside it
      std::optional<int64_t> mh = SymbolicContext::AsConst((*mask->shape)[mr - 3]);
      if (!mh || *mh != 1) return nullptr;
      mask = e.Op("Unsqueeze",
                  {mask, e.Constant(*Tensor::FromVector<int64_t>(DType::kI64, {1}, {mr - 3}))});
    }
  }
  Value* q5 = e.Op("Reshape", {q, ShapeWith(e, q, aq, 1, {k->kv_heads, k->group})});
  Attrs attrs = att.attrs;
  attrs["q_perm"] = Ints(SplitPerm(qp, aq));
  attrs["k_perm"] = Ints(SplitPerm(kp, k->axis));
  attrs["v_perm"] = Ints(SplitPerm(vp, v->axis));
  // R [..., heads, Lq, Dv] -> [..., kv heads, group, Lq, Dv]; Y's heads axis splits likewise.
  std::vector<int64_t> out;
  int64_t at = 0;
  for (int i = 0; i < r; ++i) {
    if (op[i] == r - 3) {
      at = static_cast<int64_t>(out.size());
      out.push_back(r - 3);
      out.push_back(r - 2);
    } else {
      out.push_back(op[i] < r - 3 ? op[i] : op[i] + 1);
    }
  }
  attrs["out_perm"] = Ints(out);
  std::vector<Value*> inputs = {q5, k->unsqueezed, v->unsqueezed};
  if (mask != nullptr) inputs.push_back(mask);
  Value* y5 = e.Op("Attention", std::move(inputs), std::move(attrs), "dynvm");
  return e.Op("Reshape", {y5, ShapeWith(e, y5, at, 2, {heads})});
}

// Reshape(Expand(Unsqueeze(x, axis), shape), shape'): a repeat of x's heads, captured as tag.
P RepeatedHeads(const std::string& tag) {
  P un = P::OneOf({P::Op("Unsqueeze", {P::Any(tag)}), P::Op("Unsqueeze", {P::Any(tag), P::Any()})})
             .As(tag + "_unsq");
  P ex = P::Op("Expand", {un, P::Any()}).As(tag + "_exp");
  return P::Op("Reshape", {ex, P::Any()}).As(tag + "_rep");
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
  P onnx3 = P::Op("Attention", {P::Any("q"), P::Any("k"), P::Any("v")}).NodeIs(&PlainOnnxAttention);
  P onnx4 = P::Op("Attention", {P::Any("q"), P::Any("k"), P::Any("v"), P::Any("mask")})
                .NodeIs(&PlainOnnxAttention);
  P onnx = P::OneOf({onnx3, onnx4});
  rules.push_back(Rule{"onnx_attention", onnx, &FuseOnnxAttention});
  P mha3 = P::Op("com.microsoft::MultiHeadAttention", {P::Any("q"), P::Any("k"), P::Any("v")})
               .NodeIs(&PlainMultiHeadAttention);
  P mha4 = P::Op("com.microsoft::MultiHeadAttention",
                 {P::Any("q"), P::Any("k"), P::Any("v"), P::Any("bias")})
               .NodeIs(&PlainMultiHeadAttention);
  rules.push_back(
      Rule{"msft_multi_head_attention", P::OneOf({mha3, mha4}), &FuseMultiHeadAttention});
  P gqa3 = P::Op("dynvm::Attention", {P::Any("q"), RepeatedHeads("k"), RepeatedHeads("v")});
  P gqa4 = P::Op("dynvm::Attention",
                 {P::Any("q"), RepeatedHeads("k"), RepeatedHeads("v"), P::Any("mask")});
  rules.push_back(Rule{"attention_kv_repeat", P::OneOf({gqa3, gqa4}), &FoldKvRepeat});
  rules.push_back(Rule{"shape_of_kv_repeat", P::Op("Shape", {P::Any("r")}).NodeIs(&ShapeOfRepeat),
                       &FoldShapeOfRepeat});
  return rules;
}

}  // namespace dynvm::compiler::rewrite
