// Activation rules: the forms torch.onnx.export writes (every opset from 11 to 17) for GELU,
// its tanh approximation, SiLU and HardSwish (opsets below 14) become one op each. x is f32 or
// f64; constants are one-element floats within 1e-5 of the value named (either operand of a
// commutative op, in any association of the outer product).
//
// gelu:       0.5 * x * A, A = Add(Erf(Div(x, 1.41421356) | Mul(x, 0.70710678)), 1)
//             as Mul(Mul(x, A), 0.5), Mul(Mul(x, 0.5), A) or Mul(x, Mul(A, 0.5))
//             -> dynvm::Gelu(x)
// gelu_tanh:  the same outer product with A = Add(Tanh(Mul(Add(x, Mul(cube, 0.044715)),
//             0.7978846)), 1), cube = Mul(x, Mul(x, x)) | Mul(Mul(x, x), x) | Pow(x, 3)
//             -> dynvm::GeluTanh(x)
// silu:       Mul(x, Sigmoid(x)) -> dynvm::Silu(x)
// hard_swish: Mul(x, HardSigmoid(x) with alpha 1/6, beta 0.5) -> HardSwish(x)
// hard_swish_written: HardSwish written out with R = Relu6(x + 3) = Clip(Add(x, 3), 0, 6) (the
//             bounds as inputs, opset 11 on, or attributes min/max before), as Paddle2ONNX,
//             torch (x * F.relu6(x + 3) / 6) and hand-written exports do:
//             Div(Mul(x, R), 6), Mul(Mul(x, R), 1/6), Mul(x, Div(R, 6)), Mul(x, Mul(R, 1/6))
//             -> HardSwish(x)
// hard_sigmoid_written: Div(R, 6) or Mul(R, 1/6) -> HardSigmoid(x) with alpha 1/6, beta 0.5
//             (then hard_swish takes a Mul(x, it)).
// Refused: another constant, an intermediate read elsewhere, the inner and outer x different
// values, another dtype.
#include <cmath>

#include "compiler/rewrite/rules.h"

namespace dynvm::compiler::rewrite {
namespace {

using P = Pattern;

P C(double v) { return P::Const("", ConstEquals(v, 1e-5)); }

P X() {
  return P::Any("x").Where([](const Value& v, const Match&) {
    return v.dtype == DType::kF32 || v.dtype == DType::kF64;
  });
}

// 0.5 * x * a in the three associations torch and hand-written code produce.
P HalfXTimes(const P& a) {
  return P::OneOf({
      P::Op("Mul", {P::Op("Mul", {X(), a}).Commutative(), C(0.5)}).Commutative(),
      P::Op("Mul", {P::Op("Mul", {X(), C(0.5)}).Commutative(), a}).Commutative(),
      P::Op("Mul", {X(), P::Op("Mul", {a, C(0.5)}).Commutative()}).Commutative(),
  });
}

P GeluErfPattern() {
  P scaled = P::OneOf({P::Op("Div", {X(), C(std::sqrt(2.0))}),
                       P::Op("Mul", {X(), C(std::sqrt(0.5))}).Commutative()});
  return HalfXTimes(P::Op("Add", {P::Op("Erf", {scaled}), C(1)}).Commutative());
}

P GeluTanhPattern() {
  P square = P::Op("Mul", {X(), X()});
  P cube = P::OneOf({P::Op("Mul", {X(), square}).Commutative(), P::Op("Pow", {X(), C(3)})});
  P inner = P::Op("Add", {X(), P::Op("Mul", {cube, C(0.044715)}).Commutative()}).Commutative();
  P arg = P::Op("Mul", {inner, C(std::sqrt(2.0 / M_PI))}).Commutative();
  return HalfXTimes(P::Op("Add", {P::Op("Tanh", {arg}), C(1)}).Commutative());
}

bool HardSigmoidForSwish(const Node& n, const Match&) {
  const AttrValue* alpha = n.attr("alpha");
  const AttrValue* beta = n.attr("beta");
  const double a = alpha != nullptr ? alpha->f : 0.2;
  const double b = beta != nullptr ? beta->f : 0.5;
  return std::fabs(a - 1.0 / 6.0) <= 1e-6 && std::fabs(b - 0.5) <= 1e-6;
}

// A Clip of `a` to [lo, hi]: bounds as constant inputs (opset 11 on) or attributes (before).
P ClipTo(const P& a, double lo, double hi) {
  auto bounds = [lo, hi](const Node& n, const Match&) {
    const AttrValue* mn = n.attr("min");
    const AttrValue* mx = n.attr("max");
    return mn != nullptr && mx != nullptr && mn->type == AttrValue::Type::kFloat &&
           mx->type == AttrValue::Type::kFloat && std::fabs(mn->f - lo) <= 1e-5 &&
           std::fabs(mx->f - hi) <= 1e-5;
  };
  return P::OneOf({P::Op("Clip", {a, C(lo), C(hi)}), P::Op("Clip", {a}).NodeIs(bounds)});
}

// Relu6(x + 3).
P Relu6XPlus3() { return ClipTo(P::Op("Add", {X(), C(3)}).Commutative(), 0, 6); }

// v / 6 as Div(v, 6) or Mul(v, 1/6).
P Sixth(const P& v) {
  return P::OneOf({P::Op("Div", {v, C(6)}), P::Op("Mul", {v, C(1.0 / 6.0)}).Commutative()});
}

P HardSwishWrittenPattern() {
  return P::OneOf({Sixth(P::Op("Mul", {X(), Relu6XPlus3()}).Commutative()),
                   P::Op("Mul", {X(), Sixth(Relu6XPlus3())}).Commutative()});
}

AttrValue FloatAttr(float v) {
  AttrValue a;
  a.type = AttrValue::Type::kFloat;
  a.f = v;
  return a;
}

Value* EmitHardSigmoid(Emitter& e, const Match& m) {
  Attrs attrs;
  attrs["alpha"] = FloatAttr(static_cast<float>(1.0 / 6.0));
  attrs["beta"] = FloatAttr(0.5f);
  return e.Op("HardSigmoid", {m["x"]}, std::move(attrs));
}

std::function<Value*(Emitter&, const Match&)> Unary(const char* op, const char* domain) {
  return [op, domain](Emitter& e, const Match& m) { return e.Op(op, {m["x"]}, {}, domain); };
}

}  // namespace

std::vector<Rule> ActivationRules() {
  std::vector<Rule> rules;
  rules.push_back(Rule{"gelu", GeluErfPattern(), Unary("Gelu", "dynvm")});
  rules.push_back(Rule{"gelu_tanh", GeluTanhPattern(), Unary("GeluTanh", "dynvm")});
  rules.push_back(Rule{"silu", P::Op("Mul", {X(), P::Op("Sigmoid", {X()})}).Commutative(),
                       Unary("Silu", "dynvm")});
  rules.push_back(Rule{
      "hard_swish",
      P::Op("Mul", {X(), P::Op("HardSigmoid", {X()}).NodeIs(&HardSigmoidForSwish)}).Commutative(),
      Unary("HardSwish", "")});
  rules.push_back(Rule{"hard_swish_written", HardSwishWrittenPattern(), Unary("HardSwish", "")});
  rules.push_back(Rule{"hard_sigmoid_written", Sixth(Relu6XPlus3()), &EmitHardSigmoid});
  return rules;
}

}  // namespace dynvm::compiler::rewrite
