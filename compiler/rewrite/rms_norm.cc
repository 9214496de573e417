// RMSNorm rules: the root-mean-square normalization written by hand (T5, LLaMA:
// x * rsqrt(mean(x^2, -1, keepdim) + eps) * weight) becomes one dynvm::RMSNorm, and an
// elementwise scale after it folds into its scale.
//
// rms_norm:       Div(x, den), Mul(x, Reciprocal(den)) or Mul(x, Div(1, den)) (either order)
//                 den = Sqrt(Add(ms, eps)), ms = ReduceMean(Mul(x, x) | Pow(x, 2))
//                 (1 / den also as Reciprocal(den) or Mul(Reciprocal(den), 1): torch's `1.0 / t`)
//                 -> dynvm::RMSNorm(x, ones, axis = rank - k, epsilon = eps); an x that is a
//                 Cast to f32 of an f32 value (LLaMA's x.to(torch.float32)) is read past.
//   The ReduceMean reduces the k trailing axes of x with keepdims (axes as an attribute or a
//   constant input); eps is a one-element float constant (either operand of Add); x is f32 with
//   constant sizes on the k normalized axes (at most 2^24 elements). torch 1.13 writes
//   torch.rsqrt(v) as Div(1, Sqrt(v)) and x.pow(2) as Pow(x, 2) (pow_const may have made it
//   Mul(x, x) first). Refused: another axis, keepdims=0, an intermediate read elsewhere, a
//   non-constant eps, and an x that is Sub(y, ReduceMean(y)) (a LayerNorm: layer_norm's).
// rms_norm_scale: Mul(dynvm::RMSNorm(x, s), g) (either order; the RMSNorm may be behind a Cast
//   to f32, LLaMA's h.to(input_dtype)) for a constant f32 g that is one
//   value, or whose sizes (leading 1s dropped) are the normalized sizes -> dynvm::RMSNorm(x,
//   s * g). Refused: any other g (one that broadcasts along another axis), s not constant.
#include <optional>
#include <vector>

#include "compiler/rewrite/rules.h"

namespace dynvm::compiler::rewrite {
namespace {

using P = Pattern;

int64_t Count(const std::vector<int64_t>& dims) {
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  return count;
}

// v = Sub(y, ReduceMean(y)): a LayerNorm's decomposition (layer_norm.cc takes it whole).
bool Centered(const Value& v) {
  const Node* sub = v.producer;
  if (sub == nullptr || sub->op != "Sub" || !sub->domain.empty() || sub->inputs.size() != 2 ||
      sub->inputs[1] == nullptr) {
    return false;
  }
  const Node* mean = sub->inputs[1]->producer;
  return mean != nullptr && mean->op == "ReduceMean" && mean->domain.empty() &&
         !mean->inputs.empty() && mean->inputs[0] == sub->inputs[0];
}

// A Cast to f32 of an f32 value (changes nothing).
bool IsCastToF32(const Node& n, const Match&) {
  const AttrValue* to = n.attr("to");
  return to != nullptr && to->i == 1 /* FLOAT */ && n.inputs.size() == 1 &&
         n.inputs[0] != nullptr && n.inputs[0]->dtype == DType::kF32;
}

Value* Fuse(Emitter& e, const Match& m) {
  Value* x = m["x"];
  // LLaMA's x.to(torch.float32) on an f32 x: read past it.
  if (x->producer != nullptr && x->producer->op == "Cast" && x->producer->domain.empty() &&
      IsCastToF32(*x->producer, m)) {
    x = x->producer->inputs[0];
  }
  const int k = static_cast<int>(ReduceAxes(*m.node("ms"))->size());
  std::optional<std::vector<int64_t>> dims = TrailingConstDims(*x, k);
  std::optional<double> eps = ConstScalar(*m["eps"]);
  if (!dims || !eps || x->dtype != DType::kF32) return nullptr;
  std::vector<float> ones(Count(*dims), 1.0f);
  Attrs attrs;
  attrs["axis"].type = AttrValue::Type::kInt;
  attrs["axis"].i = x->rank() - k;
  attrs["epsilon"].type = AttrValue::Type::kFloat;
  attrs["epsilon"].f = static_cast<float>(*eps);
  return e.Op("RMSNorm", {x, e.Constant(*Tensor::FromVector<float>(DType::kF32, *dims, ones))},
              std::move(attrs), "dynvm");
}

// The values of constant `g` for each of `count` normalized elements of shape `dims`: one value
// repeated, or g's own when its sizes (leading 1s dropped) are `dims` (contiguous). nullopt
// otherwise.
std::optional<std::vector<float>> PerElement(const Tensor& g, const std::vector<int64_t>& dims) {
  const int64_t count = Count(dims);
  if (g.dtype() != DType::kF32) return std::nullopt;
  if (g.numel() == 1) return std::vector<float>(count, g.data<float>()[0]);
  if (g.numel() != count || !g.is_contiguous()) return std::nullopt;
  int first = 0;
  while (first < g.rank() && g.dim(first) == 1) ++first;
  int d = static_cast<int>(dims.size()) - (g.rank() - first);
  if (d < 0) return std::nullopt;
  for (int i = 0; i < d; ++i) {
    if (dims[i] != 1) return std::nullopt;  // g would broadcast along a normalized axis
  }
  for (int i = first; i < g.rank(); ++i, ++d) {
    if (g.dim(i) != dims[d]) return std::nullopt;
  }
  return std::vector<float>(g.data<float>(), g.data<float>() + count);
}

Value* FoldScale(Emitter& e, const Match& m) {
  const Node& norm = *m.node("norm");
  Value* x = norm.inputs[0];
  const int64_t axis_attr = norm.attr("axis") ? norm.attr("axis")->i : -1;
  const int rank = x->rank();
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
  if (axis < 0 || axis >= rank) return nullptr;
  std::optional<std::vector<int64_t>> dims = TrailingConstDims(*x, rank - axis);
  if (!dims) return nullptr;
  std::optional<std::vector<float>> s = PerElement(*norm.inputs[1]->constant, *dims);
  std::optional<std::vector<float>> g = PerElement(*m["g"]->constant, *dims);
  if (!s || !g) return nullptr;
  for (size_t i = 0; i < s->size(); ++i) (*s)[i] *= (*g)[i];
  return e.Op("RMSNorm", {x, e.Constant(*Tensor::FromVector<float>(DType::kF32, *dims, *s))},
              norm.attrs, "dynvm");
}

}  // namespace

std::vector<Rule> RmsNormRules() {
  P x = P::Any("x").Where([](const Value& v, const Match&) { return !Centered(v); });
  P square = P::OneOf({P::Op("Mul", {x, x}), P::Op("Pow", {x, P::Const("", ConstEquals(2))})});
  P ms = P::OneOf({P::Op("ReduceMean", {square}), P::Op("ReduceMean", {square, P::Const()})})
             .As("ms")
             .Where([](const Value& v, const Match&) {
               return v.producer != nullptr && ReducesTrailingAxes(*v.producer);
             });
  P den = P::Op("Sqrt", {P::Op("Add", {ms, P::Const("eps", IsFloat())}).Commutative()});
  P recip = P::Op("Reciprocal", {den});
  P inv = P::OneOf({
      recip, P::Op("Div", {P::Const("", ConstEquals(1)), den}),
      P::Op("Mul", {recip, P::Const("", ConstEquals(1))}).Commutative(),  // torch's 1.0 / t
  });
  P root = P::OneOf({P::Op("Div", {x, den}), P::Op("Mul", {x, inv}).Commutative()});
  P norm = P::Op("dynvm::RMSNorm", {P::Any(), P::Const()})
               .As("norm")
               .Where([](const Value& v, const Match&) { return v.dtype == DType::kF32; });
  // LLaMA's h.to(input_dtype) on f32: a Cast to f32 of the f32 result.
  P norm_or_cast = P::OneOf({norm, P::Op("Cast", {norm}).NodeIs(&IsCastToF32)});

  std::vector<Rule> rules;
  rules.push_back(Rule{"rms_norm", std::move(root), &Fuse});
  rules.push_back(Rule{"rms_norm_scale", P::Op("Mul", {norm_or_cast, P::Const("g")}).Commutative(),
                       &FoldScale});
  return rules;
}

}  // namespace dynvm::compiler::rewrite
