// LayerNorm rules: the mean/variance decomposition torch writes below opset 17 (and the ones
// written by hand) become one LayerNormalization, and an elementwise scale and shift after it
// fold into its Scale and B.
//
// layer_norm:   Div(d, Sqrt(Add(var, eps)))  or  Mul(d, Reciprocal(Sqrt(Add(var, eps))))
//               d   = Sub(x, ReduceMean(x))
//               var = ReduceMean(Mul(d, d) | Pow(d, 2))
//               -> LayerNormalization(x, ones, axis = rank - k, epsilon = eps)
//   Both ReduceMeans reduce the same k trailing axes of x with keepdims (axes as an attribute
//   or a constant input); eps is a one-element float constant (either operand of Add); x is
//   f32 with constant sizes on the k normalized axes (at most 2^24 elements). Refused: another
//   axis, keepdims=0, two different axis sets, an intermediate read elsewhere, a non-constant eps.
// layer_norm_scale: Mul(LayerNormalization(x, s[, b]), g) for a constant f32 g (either
//   operand) that broadcasts only along the normalized axes -> LayerNormalization(x, s*g[, b*g]).
// layer_norm_bias:  Add(LayerNormalization(x, s[, b]), c) likewise -> LayerNormalization(x, s,
//   b + c). Refused: a g or c with a non-1 size outside the normalized axes, a LayerNormalization
//   whose Mean/InvStdDev outputs are read, Scale or B not constant.
#include <optional>
#include <vector>

#include "compiler/rewrite/rules.h"

namespace dynvm::compiler::rewrite {
namespace {

using P = Pattern;

// Constant `t` (f32) broadcast to `dims` (the normalized shape, right-aligned within a tensor of
// rank `rank`), when every size of t outside those axes is 1.
std::optional<std::vector<float>> Expand(const Tensor& t, const std::vector<int64_t>& dims,
                                         int rank) {
  const int k = static_cast<int>(dims.size());
  if (t.dtype() != DType::kF32 || t.rank() > rank) return std::nullopt;
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  std::vector<float> out(count);
  for (int i = 0; i < t.rank(); ++i) {
    const int pos = rank - t.rank() + i;  // axis in the rank-`rank` result
    const int64_t want = pos >= rank - k ? dims[pos - (rank - k)] : 1;
    if (t.dim(i) != 1 && t.dim(i) != want) return std::nullopt;
  }
  for (int64_t linear = 0; linear < count; ++linear) {
    // Index of t read by element `linear` of the normalized shape.
    int64_t rest = linear, src = 0;
    for (int j = k - 1; j >= 0; --j) {
      const int64_t idx = rest % dims[j];
      rest /= dims[j];
      const int ti = t.rank() - k + j;
      if (ti >= 0 && t.dim(ti) != 1) src += idx * t.stride(ti);
    }
    out[linear] = t.data<float>()[src];
  }
  return out;
}

Tensor MakeF32(const std::vector<int64_t>& dims, const std::vector<float>& v) {
  return *Tensor::FromVector<float>(DType::kF32, dims, v);
}

Value* FuseDecomposition(Emitter& e, const Match& m) {
  Value* x = m["x"];
  const Node* mean = m.node("mean");
  const int k = static_cast<int>(ReduceAxes(*mean)->size());
  std::optional<std::vector<int64_t>> dims = TrailingConstDims(*x, k);
  std::optional<double> eps = ConstScalar(*m["eps"]);
  if (!dims || !eps || x->dtype != DType::kF32) return nullptr;
  int64_t count = 1;
  for (int64_t d : *dims) count *= d;
  Value* ones = e.Constant(MakeF32(*dims, std::vector<float>(count, 1.0f)));
  Attrs attrs;
  attrs["axis"].type = AttrValue::Type::kInt;
  attrs["axis"].i = x->rank() - k;
  attrs["epsilon"].type = AttrValue::Type::kFloat;
  attrs["epsilon"].f = static_cast<float>(*eps);
  return e.Op("LayerNormalization", {x, ones}, std::move(attrs));
}

// Shared by layer_norm_scale and layer_norm_bias.
Value* FoldAffine(Emitter& e, const Match& m, bool scale) {
  const Node& ln = *m.node("ln");
  Value* x = ln.inputs[0];
  const int64_t axis_attr = ln.attr("axis") ? ln.attr("axis")->i : -1;
  const int rank = x->rank();
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
  if (axis < 0 || axis >= rank) return nullptr;
  std::optional<std::vector<int64_t>> dims = TrailingConstDims(*x, rank - axis);
  if (!dims) return nullptr;
  std::optional<std::vector<float>> s = Expand(*ln.inputs[1]->constant, *dims, rank);
  std::optional<std::vector<float>> c = Expand(*m["c"]->constant, *dims, rank);
  const bool has_b = ln.inputs.size() > 2 && ln.inputs[2] != nullptr;
  std::optional<std::vector<float>> b =
      has_b ? Expand(*ln.inputs[2]->constant, *dims, rank)
            : std::optional<std::vector<float>>(std::vector<float>(s ? s->size() : 0, 0.0f));
  if (!s || !c || !b) return nullptr;
  for (size_t i = 0; i < s->size(); ++i) {
    if (scale) {
      (*s)[i] *= (*c)[i];
      (*b)[i] *= (*c)[i];
    } else {
      (*b)[i] += (*c)[i];
    }
  }
  std::vector<Value*> inputs = {x, e.Constant(MakeF32(*dims, *s))};
  if (has_b || !scale) inputs.push_back(e.Constant(MakeF32(*dims, *b)));
  return e.Op("LayerNormalization", std::move(inputs), ln.attrs);
}

Pattern LayerNormOp() {
  // Output 0 only (the driver refuses a match whose Mean/InvStdDev outputs are read).
  return P::OneOf({P::Op("LayerNormalization", {P::Any(), P::Const()}),
                   P::Op("LayerNormalization", {P::Any(), P::Const(), P::Const()})})
      .As("ln")
      .Where([](const Value& v, const Match&) { return v.dtype == DType::kF32; });
}

}  // namespace

std::vector<Rule> LayerNormRules() {
  P x = P::Any("x");
  P mean = P::OneOf({P::Op("ReduceMean", {x}), P::Op("ReduceMean", {x, P::Const()})})
               .As("mean")
               .Where([](const Value& v, const Match&) {
                 return v.producer != nullptr && ReducesTrailingAxes(*v.producer);
               });
  P d = P::Op("Sub", {x, mean}).As("d");
  P square = P::OneOf({P::Op("Mul", {d, d}), P::Op("Pow", {d, P::Const("", ConstEquals(2))})});
  P var = P::OneOf({P::Op("ReduceMean", {square}), P::Op("ReduceMean", {square, P::Const()})})
              .Where([](const Value& v, const Match& m) {
                return v.producer != nullptr &&
                       ReducesTrailingAxes(*v.producer,
                                           static_cast<int>(ReduceAxes(*m.node("mean"))->size()));
              });
  P den = P::Op("Sqrt", {P::Op("Add", {var, P::Const("eps", IsFloat())}).Commutative()});
  P root = P::OneOf(
      {P::Op("Div", {d, den}), P::Op("Mul", {d, P::Op("Reciprocal", {den})}).Commutative()});

  std::vector<Rule> rules;
  rules.push_back(Rule{"layer_norm", std::move(root), &FuseDecomposition});
  rules.push_back(
      Rule{"layer_norm_scale", P::Op("Mul", {LayerNormOp(), P::Const("c")}).Commutative(),
           [](Emitter& e, const Match& m) { return FoldAffine(e, m, /*scale=*/true); }});
  rules.push_back(
      Rule{"layer_norm_bias", P::Op("Add", {LayerNormOp(), P::Const("c")}).Commutative(),
           [](Emitter& e, const Match& m) { return FoldAffine(e, m, /*scale=*/false); }});
  return rules;
}

}  // namespace dynvm::compiler::rewrite
