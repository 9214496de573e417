// pow_const: Pow(x, c) for a float x and a one-element constant c (any numeric dtype) of rank
// at most x's becomes
//   c = 1    Identity(x)          c = 2    Mul(x, x)          c = 3    Mul(Mul(x, x), x)
//   c = 0.5  Sqrt(x)              c = -1   Reciprocal(x)      c = -0.5 Reciprocal(Sqrt(x))
// Refused: another exponent, a non-constant exponent, an exponent of more than one element or
// of higher rank than x (the result's shape would grow).
#include <cmath>
#include <optional>

#include "compiler/rewrite/rules.h"

namespace dynvm::compiler::rewrite {
namespace {

std::optional<double> Exponent(const Value& e) {
  std::optional<double> c = ConstScalar(e);
  if (!c) return std::nullopt;
  for (double known : {1.0, 2.0, 3.0, 0.5, -1.0, -0.5}) {
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
  if (c == 0.5) return e.Op("Sqrt", {x});
  if (c == -1.0) return e.Op("Reciprocal", {x});
  return e.Op("Reciprocal", {e.Op("Sqrt", {x})});
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
