#include "compiler/symbolic.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dynvm::compiler {
namespace {

using Kind = DimNode::Kind;

bool Commutative(Kind k) {
  return k == Kind::kAdd || k == Kind::kMul || k == Kind::kMax || k == Kind::kMin;
}

// Saturating helpers for bounds.
std::optional<int64_t> SatAdd(std::optional<int64_t> a, std::optional<int64_t> b) {
  if (!a || !b) return std::nullopt;
  int64_t r;
  if (__builtin_add_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}
std::optional<int64_t> SatMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
int64_t FloorDivInt(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

}  // namespace

SymbolicContext::SymbolicContext() = default;

Dim SymbolicContext::Intern(Kind kind, int64_t value, absl::string_view name, Dim a, Dim b) {
  if (Commutative(kind) && a != nullptr && b != nullptr && a->id > b->id) std::swap(a, b);
  const std::string key = absl::StrCat(static_cast<int>(kind), "|", value, "|", name, "|",
                                       a ? a->id : -1, "|", b ? b->id : -1);
  auto it = interned_.find(key);
  if (it != interned_.end()) return it->second;
  auto n = std::make_unique<DimNode>();
  n->kind = kind;
  n->value = value;
  n->name = std::string(name);
  n->a = a;
  n->b = b;
  n->id = static_cast<int>(nodes_.size());
  Dim d = n.get();
  nodes_.push_back(std::move(n));
  interned_.emplace(key, d);
  return d;
}

Dim SymbolicContext::Const(int64_t v) { return Intern(Kind::kConst, v, "", nullptr, nullptr); }
Dim SymbolicContext::Symbol(absl::string_view name) {
  return Intern(Kind::kSymbol, 0, name, nullptr, nullptr);
}
Dim SymbolicContext::Fresh(absl::string_view prefix) {
  while (true) {
    std::string name = absl::StrCat(prefix, "_", fresh_counter_++);
    if (!interned_.contains(absl::StrCat(static_cast<int>(Kind::kSymbol), "|0|", name, "|-1|-1"))) {
      return Symbol(name);
    }
  }
}

Dim SymbolicContext::Add(Dim a, Dim b) {
  auto ca = AsConst(a), cb = AsConst(b);
  if (ca && cb) {
    int64_t r;
    if (!__builtin_add_overflow(*ca, *cb, &r)) return Const(r);
  }
  if (ca && *ca == 0) return b;
  if (cb && *cb == 0) return a;
  // (x + c1) + c2 -> x + (c1 + c2)
  if (cb && a->kind == Kind::kAdd && AsConst(a->b)) return Add(a->a, Const(*AsConst(a->b) + *cb));
  if (cb && a->kind == Kind::kAdd && AsConst(a->a)) return Add(a->b, Const(*AsConst(a->a) + *cb));
  if (ca && !cb) return Add(b, a);
  // x + (-1 * x) -> 0
  if (b->kind == Kind::kMul && AsConst(b->a) == -1 && b->b == a) return Const(0);
  if (a->kind == Kind::kMul && AsConst(a->a) == -1 && a->b == b) return Const(0);
  return Intern(Kind::kAdd, 0, "", a, b);
}

Dim SymbolicContext::Sub(Dim a, Dim b) { return Add(a, Mul(Const(-1), b)); }

Dim SymbolicContext::Mul(Dim a, Dim b) {
  auto ca = AsConst(a), cb = AsConst(b);
  if (ca && cb) {
    int64_t r;
    if (!__builtin_mul_overflow(*ca, *cb, &r)) return Const(r);
  }
  if ((ca && *ca == 0) || (cb && *cb == 0)) return Const(0);
  if (ca && *ca == 1) return b;
  if (cb && *cb == 1) return a;
  // c1 * (c2 * x) -> (c1 c2) * x, whichever operand of the inner product is the constant
  // (CeilDiv makes -1 * (-1 * x), which must fold back to x for Range sizes to stay bounded).
  if (ca && b->kind == Kind::kMul) {
    if (auto c2 = AsConst(b->a)) {
      if (auto p = SatMul(*ca, *c2)) return Mul(Const(*p), b->b);
    } else if (auto c2b = AsConst(b->b)) {
      if (auto p = SatMul(*ca, *c2b)) return Mul(Const(*p), b->a);
    }
  }
  if (cb && !ca) return Mul(b, a);
  return Intern(Kind::kMul, 0, "", a, b);
}

Dim SymbolicContext::FloorDiv(Dim a, Dim b) {
  auto ca = AsConst(a), cb = AsConst(b);
  if (cb && *cb == 1) return a;
  if (ca && cb && *cb != 0) return Const(FloorDivInt(*ca, *cb));
  if (ca && *ca == 0) return Const(0);
  if (a == b) return Const(1);
  // (c * x) / c -> x
  if (cb && *cb != 0 && a->kind == Kind::kMul && AsConst(a->a) == *cb) return a->b;
  return Intern(Kind::kFloorDiv, 0, "", a, b);
}

Dim SymbolicContext::CeilDiv(Dim a, Dim b) {
  // ceil(a / b) = -floor(-a / b)
  return Mul(Const(-1), FloorDiv(Mul(Const(-1), a), b));
}

Dim SymbolicContext::Max(Dim a, Dim b) {
  if (a == b) return a;
  auto ca = AsConst(a), cb = AsConst(b);
  if (ca && cb) return Const(std::max(*ca, *cb));
  // max(x, 0) = x where x cannot be negative (a size; not a difference such as n - 5, which a
  // slice past the end makes); max(x, 1) stays (x may be 0).
  if (ca && *ca == 0 && LowerBound(b).value_or(-1) >= 0) return b;
  if (cb && *cb == 0 && LowerBound(a).value_or(-1) >= 0) return a;
  // max(x, x + c) for a constant c: GroupQueryAttention's present length max(P + 1, P).
  auto offset = [](Dim x, Dim base) -> std::optional<int64_t> {  // x = base + c
    if (x->kind != Kind::kAdd) return std::nullopt;
    if (x->a == base) return AsConst(x->b);
    if (x->b == base) return AsConst(x->a);
    return std::nullopt;
  };
  if (auto c = offset(b, a)) return *c >= 0 ? b : a;
  if (auto c = offset(a, b)) return *c >= 0 ? a : b;
  return Intern(Kind::kMax, 0, "", a, b);
}

Dim SymbolicContext::Min(Dim a, Dim b) {
  if (a == b) return a;
  auto ca = AsConst(a), cb = AsConst(b);
  if (ca && cb) return Const(std::min(*ca, *cb));
  return Intern(Kind::kMin, 0, "", a, b);
}

void SymbolicContext::SetBound(absl::string_view symbol, int64_t bound) { bounds_[symbol] = bound; }

std::optional<int64_t> SymbolicContext::BoundOf(absl::string_view symbol) const {
  auto it = bounds_.find(symbol);
  if (it == bounds_.end()) return std::nullopt;
  return it->second;
}

std::optional<int64_t> SymbolicContext::UpperBound(Dim d) const {
  switch (d->kind) {
    case Kind::kConst:
      return d->value;
    case Kind::kSymbol:
      return BoundOf(d->name);
    case Kind::kAdd:
      return SatAdd(UpperBound(d->a), UpperBound(d->b));
    case Kind::kMul: {
      // Products of a constant and an expression, or of two nonnegative expressions.
      if (auto c = AsConst(d->a)) {
        if (*c >= 0) {
          auto u = UpperBound(d->b);
          return u ? SatMul(*c, *u) : std::nullopt;
        }
        auto l = LowerBound(d->b);
        return l ? SatMul(*c, *l) : std::nullopt;
      }
      auto la = LowerBound(d->a), lb = LowerBound(d->b);
      if (!la || !lb || *la < 0 || *lb < 0) return std::nullopt;
      auto ua = UpperBound(d->a), ub = UpperBound(d->b);
      if (!ua || !ub) return std::nullopt;
      return SatMul(*ua, *ub);
    }
    case Kind::kFloorDiv: {
      auto c = AsConst(d->b);
      if (!c || *c <= 0) return std::nullopt;
      auto u = UpperBound(d->a);
      return u ? std::optional<int64_t>(FloorDivInt(*u, *c)) : std::nullopt;
    }
    case Kind::kMax: {
      auto a = UpperBound(d->a), b = UpperBound(d->b);
      if (!a || !b) return std::nullopt;
      return std::max(*a, *b);
    }
    case Kind::kMin: {
      auto a = UpperBound(d->a), b = UpperBound(d->b);
      if (a && b) return std::min(*a, *b);
      return a ? a : b;
    }
  }
  return std::nullopt;
}

std::optional<int64_t> SymbolicContext::LowerBound(Dim d) const {
  switch (d->kind) {
    case Kind::kConst:
      return d->value;
    case Kind::kSymbol:
      return 0;
    case Kind::kAdd:
      return SatAdd(LowerBound(d->a), LowerBound(d->b));
    case Kind::kMul: {
      if (auto c = AsConst(d->a)) {
        if (*c >= 0) {
          auto l = LowerBound(d->b);
          return l ? SatMul(*c, *l) : std::nullopt;
        }
        auto u = UpperBound(d->b);
        return u ? SatMul(*c, *u) : std::nullopt;
      }
      auto la = LowerBound(d->a), lb = LowerBound(d->b);
      if (!la || !lb || *la < 0 || *lb < 0) return std::nullopt;
      return SatMul(*la, *lb);
    }
    case Kind::kFloorDiv: {
      auto c = AsConst(d->b);
      if (!c || *c <= 0) return std::nullopt;
      auto l = LowerBound(d->a);
      return l ? std::optional<int64_t>(FloorDivInt(*l, *c)) : std::nullopt;
    }
    case Kind::kMax: {
      auto a = LowerBound(d->a), b = LowerBound(d->b);
      if (a && b) return std::max(*a, *b);
      return a ? a : b;
    }
    case Kind::kMin: {
      auto a = LowerBound(d->a), b = LowerBound(d->b);
      if (!a || !b) return std::nullopt;
      return std::min(*a, *b);
    }
  }
  return std::nullopt;
}

void SymbolicContext::CollectSymbols(Dim d, std::vector<Dim>* out) const {
  if (d->kind == Kind::kSymbol) {
    if (std::find(out->begin(), out->end(), d) == out->end()) out->push_back(d);
    return;
  }
  if (d->a) CollectSymbols(d->a, out);
  if (d->b) CollectSymbols(d->b, out);
}

std::optional<int64_t> SymbolicContext::Evaluate(
    Dim d, const absl::flat_hash_map<std::string, int64_t>& env) const {
  switch (d->kind) {
    case Kind::kConst:
      return d->value;
    case Kind::kSymbol: {
      auto it = env.find(d->name);
      if (it == env.end()) return std::nullopt;
      return it->second;
    }
    default:
      break;
  }
  auto a = Evaluate(d->a, env), b = Evaluate(d->b, env);
  if (!a || !b) return std::nullopt;
  switch (d->kind) {
    case Kind::kAdd:
      return *a + *b;
    case Kind::kMul:
      return *a * *b;
    case Kind::kFloorDiv:
      return *b == 0 ? std::nullopt : std::optional<int64_t>(FloorDivInt(*a, *b));
    case Kind::kMax:
      return std::max(*a, *b);
    case Kind::kMin:
      return std::min(*a, *b);
    default:
      return std::nullopt;
  }
}

std::string SymbolicContext::ToString(Dim d) {
  switch (d->kind) {
    case Kind::kConst:
      return absl::StrCat(d->value);
    case Kind::kSymbol:
      return d->name;
    case Kind::kAdd:
      return absl::StrCat("(", ToString(d->a), " + ", ToString(d->b), ")");
    case Kind::kMul:
      return absl::StrCat(ToString(d->a), "*", ToString(d->b));
    case Kind::kFloorDiv:
      return absl::StrCat("(", ToString(d->a), " // ", ToString(d->b), ")");
    case Kind::kMax:
      return absl::StrCat("max(", ToString(d->a), ", ", ToString(d->b), ")");
    case Kind::kMin:
      return absl::StrCat("min(", ToString(d->a), ", ", ToString(d->b), ")");
  }
  return "?";
}

bool SymbolicContext::MentionsSymbolSince(Dim d, int id) const {
  if (d->kind == Kind::kSymbol) return d->id >= id;
  if (d->kind == Kind::kConst) return false;
  return MentionsSymbolSince(d->a, id) || (d->b != nullptr && MentionsSymbolSince(d->b, id));
}

std::string ShapeToString(const std::vector<Dim>& shape) {
  std::vector<std::string> parts;
  for (Dim d : shape) parts.push_back(SymbolicContext::ToString(d));
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

}  // namespace dynvm::compiler
