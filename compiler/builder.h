// Public API. Builds graphs in C++ (tests use it; so can users):
//
//   Module m;
//   GraphBuilder b(m.AddFunction("main"));
//   Value* x = b.Input("x", DType::kF32, {"batch", 3});
//   Value* y = b.Op("Relu", {b.Op("Add", {x, b.Constant(bias)})});
//   b.Output("y", y);
//
// Regions: If and Loop take callbacks that build their branches / body with a nested builder;
// a region may use any value of the enclosing graphs.
#ifndef DYNVM_COMPILER_BUILDER_H_
#define DYNVM_COMPILER_BUILDER_H_

#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "compiler/ir.h"

namespace dynvm::compiler {

// A dimension of a declared input shape: a size or a symbol name.
using DimSpec = std::variant<int64_t, std::string>;

AttrValue AttrInt(int64_t v);
AttrValue AttrFloat(float v);
AttrValue AttrString(std::string v);
AttrValue AttrInts(std::vector<int64_t> v);
AttrValue AttrFloats(std::vector<float> v);
AttrValue AttrTensor(Tensor t);

class GraphBuilder {
 public:
  explicit GraphBuilder(Graph* graph) : g_(graph), m_(*graph->module) {}

  Graph* graph() const { return g_; }
  Module& module() const { return m_; }

  // A graph input. Only for a function's top level.
  Value* Input(const std::string& name, DType dtype, const std::vector<DimSpec>& shape);
  Value* InputUnknownShape(const std::string& name, DType dtype);
  Value* Constant(const Tensor& t, const std::string& name = "", bool is_weight = false);
  Value* ScalarI64(int64_t v);
  Value* ScalarF32(float v);
  Value* VectorI64(const std::vector<int64_t>& v);

  // A node with `num_outputs` outputs (types are inferred at compile time).
  std::vector<Value*> Ops(const std::string& op, const std::vector<Value*>& inputs,
                          const Attrs& attrs = {}, int num_outputs = 1,
                          const std::string& domain = "");
  Value* Op(const std::string& op, const std::vector<Value*>& inputs, const Attrs& attrs = {},
            const std::string& domain = "");
  void Output(const std::string& name, Value* v);

  // If(cond) with both branches returning `num_outputs` values.
  std::vector<Value*> If(Value* cond, int num_outputs,
                         const std::function<std::vector<Value*>(GraphBuilder&)>& then_fn,
                         const std::function<std::vector<Value*>(GraphBuilder&)>& else_fn);
  // ONNX Loop: `max_trip` and `cond` may be null. The body gets (iter, cond, carried...) and
  // returns (cond_out, carried_out..., scan_outputs...). Returns (carried finals..., scans...).
  std::vector<Value*> Loop(
      Value* max_trip, Value* cond, const std::vector<Value*>& carried, int num_scan_outputs,
      const std::function<std::vector<Value*>(GraphBuilder&, Value* iter, Value* cond,
                                              const std::vector<Value*>& carried)>& body);

  void set_node_name(const std::string& name) { next_name_ = name; }

 private:
  Node* AddNode(const std::string& op, const std::vector<Value*>& inputs, int num_outputs,
                const std::string& domain);

  Graph* g_;
  Module& m_;
  std::string next_name_;
};

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_BUILDER_H_
