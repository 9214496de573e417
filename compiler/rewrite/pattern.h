// Declarative DAG patterns over the compiler IR (compiler/ir.h), matched from a root value
// towards its producers. A pattern is a tree of value patterns; giving two of its leaves (or
// subtrees) the same capture name makes it a DAG: the second occurrence must be the very value
// the first one bound. Built from:
//
//   Any("x")                  any value, captured as "x"
//   Const("c", pred)          a compile-time constant (Value::constant) satisfying pred
//   Op("Mul", {a, b})         output 0 of a default-domain node of that op whose inputs match
//                             ("dynvm::Attention": a node of domain "dynvm")
//   OneOf({p, q})             the first alternative that matches
//
// and refined with:
//
//   .Commutative()            a two-input op whose operands may match in either order
//   .As("name")               captures the value (and its node) under a name
//   .Where(pred)              a predicate over the value and the captures so far (dtype, shape,
//                             symbolic dims compared with another capture's)
//   .NodeIs(pred)             a predicate over the producing node (attributes, constant inputs)
//   .OneUse()                 the value has exactly one use
//
// Single use of the whole match is checked by the driver (compiler/rewrite/rewrite.h): every
// matched node but the root must have no consumer outside the match, so a rewrite never
// computes an intermediate twice.
#ifndef DYNVM_COMPILER_REWRITE_PATTERN_H_
#define DYNVM_COMPILER_REWRITE_PATTERN_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "compiler/ir.h"

namespace dynvm::compiler::rewrite {

// How many times each value is read: node inputs (regions included) and graph outputs.
class UseCounts {
 public:
  void Count(const Graph& g);  // adds the uses in g and its regions
  void Add(const Value* v, int n = 1) { counts_[v] += n; }
  int operator()(const Value* v) const {
    auto it = counts_.find(v);
    return it == counts_.end() ? 0 : it->second;
  }

 private:
  absl::flat_hash_map<const Value*, int> counts_;
};

// What a match bound: captured values by name, and the matched nodes (the root's first).
struct Match {
  absl::flat_hash_map<std::string, Value*> values;
  absl::flat_hash_map<std::string, Node*> named_nodes;
  std::vector<Node*> nodes;

  Value* operator[](const std::string& name) const {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second;
  }
  Node* node(const std::string& name) const {
    auto it = named_nodes.find(name);
    return it == named_nodes.end() ? nullptr : it->second;
  }
};

using ValuePred = std::function<bool(const Value&, const Match&)>;
using NodePred = std::function<bool(const Node&, const Match&)>;

class Pattern {
 public:
  static Pattern Any(std::string name = "");
  static Pattern Const(std::string name = "", ValuePred pred = nullptr);
  static Pattern Op(std::string op, std::vector<Pattern> inputs);
  static Pattern OneOf(std::vector<Pattern> alternatives);

  Pattern& Commutative();
  Pattern& As(std::string name);
  Pattern& Where(ValuePred pred);
  Pattern& NodeIs(NodePred pred);
  Pattern& OneUse();

  // The op a match's root node must have ("" for Any/Const; each alternative's for OneOf).
  std::vector<std::string> RootOps() const;

  // Matches `v` against this pattern, extending `m` (left unchanged on failure).
  bool Match(Value* v, const UseCounts& uses, rewrite::Match& m) const;

 private:
  enum class Kind : uint8_t { kAny, kConst, kOp, kOneOf };
  Pattern() = default;
  bool MatchHere(Value* v, const UseCounts& uses, rewrite::Match& m) const;
  bool MatchInputs(compiler::Node& n, const std::vector<int>& order, const UseCounts& uses,
                   rewrite::Match& m) const;

  Kind kind_ = Kind::kAny;
  std::string op_;
  std::string domain_;  // "" = the ONNX default domain
  std::string name_;
  std::vector<Pattern> inputs_;  // operands, or the alternatives of OneOf
  bool commutative_ = false;
  bool one_use_ = false;
  std::vector<ValuePred> value_preds_;
  std::vector<NodePred> node_preds_;
};

// ---- predicates and helpers for rules ----

// Every element of the floating-point constant `v` is within `tol` of `x` (so a scalar, or
// a tensor of one repeated value broadcast like one).
bool ConstAll(const Value& v, double x, double tol = 1e-6);
ValuePred ConstEquals(double x, double tol = 1e-6);
// The constant as one double, when it holds one element (of any numeric dtype).
std::optional<double> ConstScalar(const Value& v);
ValuePred IsFloat();  // f32, f16, bf16 or f64

// The axes a Reduce* node reduces: its `axes` attribute, or its constant second input
// (ReduceSum from opset 13, every reduce from 18), normalized to [0, rank). nullopt when they
// are not known at compile time, `noop_with_empty_axes` is set, or the input's rank is unknown.
std::optional<std::vector<int64_t>> ReduceAxes(const compiler::Node& n);
// The node reduces exactly the trailing `count` axes of its input with keepdims=1 (the
// default). count 0: any non-empty set of trailing axes.
bool ReducesTrailingAxes(const compiler::Node& n, int count = 0);

// A Transpose node's permutation (the default reverses), or nullopt when its input's rank is
// unknown or the perm attribute has another length.
std::optional<std::vector<int64_t>> TransposePerm(const compiler::Node& n);

// The constant sizes of `x`'s trailing `k` axes, or nullopt when one is not a constant or they
// hold more than `max_count` elements in all (a normalization whose scale a rule makes at compile
// time: a hostile model's huge normalized shape is refused).
std::optional<std::vector<int64_t>> TrailingConstDims(const Value& x, int k,
                                                      int64_t max_count = int64_t{1} << 24);

// The element count of `v` when every dim is a constant; nullopt for a null value, an unknown
// shape or a symbolic dim (the quantization rules' scale and zero-point checks).
std::optional<int64_t> ConstNumel(const Value* v);

}  // namespace dynvm::compiler::rewrite

#endif  // DYNVM_COMPILER_REWRITE_PATTERN_H_
