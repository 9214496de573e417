// Public API. Symbolic dimensions: expressions over named symbols (`batch`, `seq`, or fresh
// symbols for data-dependent sizes) with sums, products, floor division, max and min.
//
// Expressions are interned in a SymbolicContext: structurally equal expressions (after
// simplification) are the same pointer, so "equal symbols unify" is pointer equality.
//
// Thread safety: thread-compatible.
#ifndef DYNVM_COMPILER_SYMBOLIC_H_
#define DYNVM_COMPILER_SYMBOLIC_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace dynvm::compiler {

struct DimNode {
  enum class Kind : uint8_t { kConst, kSymbol, kAdd, kMul, kFloorDiv, kMax, kMin };
  Kind kind;
  int64_t value = 0;  // kConst
  std::string name;   // kSymbol
  const DimNode* a = nullptr;
  const DimNode* b = nullptr;
  int id = 0;  // creation order; gives commutative operands a canonical order
};
using Dim = const DimNode*;

class SymbolicContext {
 public:
  SymbolicContext();
  SymbolicContext(const SymbolicContext&) = delete;
  SymbolicContext& operator=(const SymbolicContext&) = delete;

  Dim Const(int64_t v);
  // The symbol named `name` (the same pointer for the same name).
  Dim Symbol(absl::string_view name);
  // A new symbol that no other expression names: "<prefix>_<n>".
  Dim Fresh(absl::string_view prefix);

  Dim Add(Dim a, Dim b);
  Dim Sub(Dim a, Dim b);
  Dim Mul(Dim a, Dim b);
  Dim FloorDiv(Dim a, Dim b);  // b must not be zero at run time
  Dim CeilDiv(Dim a, Dim b);
  Dim Max(Dim a, Dim b);
  Dim Min(Dim a, Dim b);

  static std::optional<int64_t> AsConst(Dim d) {
    if (d->kind == DimNode::Kind::kConst) return d->value;
    return std::nullopt;
  }
  static bool IsSymbol(Dim d) { return d->kind == DimNode::Kind::kSymbol; }

  // Declared upper bounds of symbols (from --bound NAME=N or the API).
  void SetBound(absl::string_view symbol, int64_t bound);
  std::optional<int64_t> BoundOf(absl::string_view symbol) const;
  const absl::flat_hash_map<std::string, int64_t>& bounds() const { return bounds_; }

  // Bounds of an expression's value given the symbol bounds; symbols are >= 0 (they are
  // sizes). nullopt when unbounded.
  std::optional<int64_t> UpperBound(Dim d) const;
  std::optional<int64_t> LowerBound(Dim d) const;

  // The symbols an expression mentions.
  void CollectSymbols(Dim d, std::vector<Dim>* out) const;
  // Value under an assignment of every symbol it mentions; nullopt if one is missing.
  std::optional<int64_t> Evaluate(Dim d,
                                  const absl::flat_hash_map<std::string, int64_t>& env) const;

  static std::string ToString(Dim d);

  // Expressions created from now on have ids >= this value (regions use it to tell symbols
  // created inside them from those defined before).
  int next_id() const { return static_cast<int>(nodes_.size()); }
  // True if `d` mentions a symbol created at or after `id`.
  bool MentionsSymbolSince(Dim d, int id) const;

 private:
  Dim Intern(DimNode::Kind kind, int64_t value, absl::string_view name, Dim a, Dim b);

  std::vector<std::unique_ptr<DimNode>> nodes_;
  absl::flat_hash_map<std::string, Dim> interned_;
  absl::flat_hash_map<std::string, int64_t> bounds_;
  int fresh_counter_ = 0;
};

std::string ShapeToString(const std::vector<Dim>& shape);

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_SYMBOLIC_H_
