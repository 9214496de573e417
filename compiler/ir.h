// Public API. The compiler's graph IR: an SSA graph of values and nodes with nested regions
// (If branches, Loop and Scan bodies) that may read values of enclosing regions.
//
// Ownership: a Module owns every Graph, Node and Value in it; raw pointers into a Module stay
// valid as long as the Module. Thread safety: thread-compatible.
#ifndef DYNVM_COMPILER_IR_H_
#define DYNVM_COMPILER_IR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "common/types.h"
#include "compiler/symbolic.h"
#include "kernels/attr_value.h"
#include "kernels/tensor.h"

namespace dynvm::compiler {

class Graph;
class Module;
class Node;

using Attrs = std::map<std::string, AttrValue, std::less<>>;

class Value {
 public:
  int id = 0;
  std::string name;  // the model's name, kept for inputs and outputs
  DType dtype = DType::kF32;
  // kTensor, or an ONNX sequence (kSequence: dtype and shape describe its elements) or
  // optional (kOptional: elem_kind says whether it holds a tensor or a sequence; dtype and
  // shape describe the tensor, or the sequence's elements). For sequences and optionals only
  // the constant dims of `shape` are facts (elements may differ in the others).
  ObjectKind kind = ObjectKind::kTensor;
  ObjectKind elem_kind = ObjectKind::kTensor;
  // A sequence known to be empty (SequenceEmpty): `shape` says nothing yet, the first
  // inserted tensor decides it.
  bool empty_sequence = false;
  // nullopt: rank unknown (the producing kernel allocates it at run time).
  std::optional<std::vector<Dim>> shape;
  Node* producer = nullptr;  // null for graph inputs and constants
  int output_index = -1;
  Graph* graph = nullptr;  // the region the value belongs to
  // A compile-time value: an initializer, a Constant node, or a folded result.
  std::optional<Tensor> constant;
  bool is_weight = false;
  // The symbolic elements of a small 0-D/1-D integer tensor computed from shapes (Shape,
  // Gather, Concat... of dims). Lets shape arithmetic compile to scalar code.
  std::optional<std::vector<Dim>> content;
  // The kernel for this value's producer decides its shape at run time; the listed dims are
  // fresh symbols defined after the producer runs.
  bool dynamic = false;

  bool has_shape() const { return shape.has_value(); }
  int rank() const { return shape ? static_cast<int>(shape->size()) : -1; }
  std::string TypeString() const;  // "f32[batch,3]"
};

class Node {
 public:
  std::string op;
  std::string domain;  // "" = ONNX default
  std::string name;    // source node name (for errors and the debug section)
  Attrs attrs;
  std::vector<Value*> inputs;   // nullptr: an absent optional input
  std::vector<Value*> outputs;  // nullptr: an absent optional output
  // Nested regions, by attribute name ("then_branch", "else_branch", "body").
  std::vector<std::pair<std::string, std::unique_ptr<Graph>>> subgraphs;
  Graph* graph = nullptr;

  Graph* subgraph(absl::string_view attr) const;
  const AttrValue* attr(absl::string_view name) const;
  std::string Label() const;  // "Add 'node_name'"
};

class Graph {
 public:
  Module* module = nullptr;
  Graph* parent = nullptr;  // enclosing region; null for a function's top level
  Node* owner = nullptr;    // the If/Loop/Scan node this region belongs to
  std::vector<Value*> inputs;
  std::vector<Value*> outputs;
  std::vector<std::unique_ptr<Node>> nodes;  // topological order

  // True if `v` is defined in this region or an enclosing one.
  bool Sees(const Value* v) const;
  bool Contains(const Graph* g) const;  // g is this region or nested in it
};

// A function the host can call: a top-level graph with named inputs and outputs.
struct Function {
  std::string name;
  std::unique_ptr<Graph> graph;
  // The host's names of graph->outputs, taken before any pass runs (Compile): passes may
  // merge two outputs into one value (CSE) or replace an output by another value (Identity
  // removal), whose name is not the output's.
  std::vector<std::string> output_names;
};

class Module {
 public:
  Module();
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  SymbolicContext& sym() { return sym_; }
  const SymbolicContext& sym() const { return sym_; }

  // Adds an entry function with an empty graph.
  Graph* AddFunction(absl::string_view name);
  std::vector<Function>& functions() { return functions_; }
  const std::vector<Function>& functions() const { return functions_; }
  Graph* function(absl::string_view name) const;

  // Creates a value owned by the module.
  Value* NewValue(DType dtype, std::optional<std::vector<Dim>> shape, Graph* graph,
                  absl::string_view name = "");
  // A constant value (in no region: visible everywhere).
  Value* NewConstant(Tensor t, absl::string_view name = "", bool is_weight = false);
  std::unique_ptr<Graph> NewGraph(Graph* parent, Node* owner);

  // Dims of a tensor's shape as constant Dims.
  std::vector<Dim> ConstShape(absl::Span<const int64_t> dims);

  // A readable text dump for debugging and golden tests.
  std::string Dump() const;

  int num_values() const { return static_cast<int>(values_.size()); }
  Value* value(int id) const { return values_[id].get(); }

 private:
  SymbolicContext sym_;
  std::vector<Function> functions_;
  std::vector<std::unique_ptr<Value>> values_;
};

std::string AttrToString(const AttrValue& a);

// Appends to `out` (nodes being assembled for `g`, which passes put in place themselves) a node
// of `g` with one output: `result` when given (an existing value the node now produces), else a
// fresh value of `dtype` whose shape inference fills in. Returns the output.
Value* AppendNode(Module& m, Graph& g, std::vector<std::unique_ptr<Node>>& out,
                  const std::string& op, std::vector<Value*> inputs, Attrs attrs = {},
                  const std::string& name = "", DType dtype = DType::kF32, Value* result = nullptr);

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_IR_H_
