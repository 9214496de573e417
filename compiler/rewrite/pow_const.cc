// pow_const: Pow(x, c) for a float x and a one-element constant c (any numeric dtype) of rank
// at most x's becomes
//   c = 1    Identity(x)          c = 2    Mul(x, x)          c = 3    Mul(Mul(x, x), x)
//   c = -1   Reciprocal(x)
// each pow(x, c) up to rounding for every x, with the signed zeros, infinities and NaN pow gives.
// Refused: another exponent, a non-constant exponent, an exponent of more than one element or
// of higher rank than x (the result's shape would grow). Exponents 0.5 and -0.5 are refused
// too: Sqrt differs from pow where IEEE's sqrt and pow do, pow(-inf, 0.5) = +inf but
// sqrt(-inf) = NaN, and pow(-0, -0.5) = +inf but 1 / sqrt(-0) = -inf (seed 7 graphs 9023,
// 23300 and 38358 of the differential fuzzer; docs/differential.md).
#include <cmath>
#include <optional>

#include "compiler/rewrite/rules.h"

namespace dynvm::compiler::rewrite {
namespace {

std::optional<double> Exponent(const Value& e) {
  std::optional<double> c = ConstScalar(e);
  if (!c) return std::nullopt;
  for (double known : {1.0, 2.0, 3.0, -1.0}) {
    if (*c == known) return c;
  }
  return std::nullopt;
}

Value* Replace(Emitter& e, const Match& m) {
  Value* x = m["x"];
  const double c = *Exponent(*m["e"]);
  if (c == 1.0) return e.Op("Identity", {x});
  if (c == 2.0) return e.Op("Mul", {x, x});
  if (c == 3.0) return e.Op("Mul", {e.Op("Mul", {x, x}), x});
  return e.Op("Reciprocal", {x});  // c == -1
}

}  // namespace

std::vector<Rule> PowConstRules() {
  Pattern pow = Pattern::Op(
      "Pow",
      {Pattern::Any("x").Where(IsFloat()), Pattern::Const("e", [](const Value& v, const Match& m) {
         return Exponent(v).has_value() && m["x"]->has_shape() && v.rank() <= m["x"]->rank();
       })});
  return {Rule{"pow_const", std::move(pow), &Replace}};
}

}  // namespace dynvm::compiler::rewrite
