#include "compiler/builder.h"

#include "absl/strings/str_cat.h"
#include "compiler/ops/names.h"

namespace dynvm::compiler {

AttrValue AttrInt(int64_t v) {
  AttrValue a;
  a.type = AttrValue::Type::kInt;
  a.i = v;
  return a;
}
AttrValue AttrFloat(float v) {
  AttrValue a;
  a.type = AttrValue::Type::kFloat;
  a.f = v;
  return a;
}
AttrValue AttrString(std::string v) {
  AttrValue a;
  a.type = AttrValue::Type::kString;
  a.s = std::move(v);
  return a;
}
AttrValue AttrInts(std::vector<int64_t> v) {
  AttrValue a;
  a.type = AttrValue::Type::kInts;
  a.ints = std::move(v);
  return a;
}
AttrValue AttrFloats(std::vector<float> v) {
  AttrValue a;
  a.type = AttrValue::Type::kFloats;
  a.floats = std::move(v);
  return a;
}
AttrValue AttrTensor(Tensor t) {
  AttrValue a;
  a.type = AttrValue::Type::kTensor;
  a.tensor = std::move(t);
  return a;
}

Value* GraphBuilder::Input(const std::string& name, DType dtype,
                           const std::vector<DimSpec>& shape) {
  std::vector<Dim> dims;
  for (const DimSpec& d : shape) {
    if (std::holds_alternative<int64_t>(d)) {
      dims.push_back(m_.sym().Const(std::get<int64_t>(d)));
    } else {
      dims.push_back(m_.sym().Symbol(std::get<std::string>(d)));
    }
  }
  Value* v = m_.NewValue(dtype, std::move(dims), g_, name);
  g_->inputs.push_back(v);
  return v;
}

Value* GraphBuilder::InputUnknownShape(const std::string& name, DType dtype) {
  Value* v = m_.NewValue(dtype, std::nullopt, g_, name);
  g_->inputs.push_back(v);
  return v;
}

Value* GraphBuilder::Constant(const Tensor& t, const std::string& name, bool is_weight) {
  return m_.NewConstant(t, name, is_weight);
}

Value* GraphBuilder::ScalarI64(int64_t v) { return Constant(Tensor::ScalarI64(v)); }
Value* GraphBuilder::ScalarF32(float v) { return Constant(Tensor::Scalar(v)); }
Value* GraphBuilder::VectorI64(const std::vector<int64_t>& v) {
  return Constant(*Tensor::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(v.size())}, v));
}

Node* GraphBuilder::AddNode(const std::string& op, const std::vector<Value*>& inputs,
                            int num_outputs, const std::string& domain) {
  auto n = std::make_unique<Node>();
  n->op = op;
  n->domain = domain;
  n->name = std::move(next_name_);
  next_name_.clear();
  n->inputs = inputs;
  n->graph = g_;
  for (int i = 0; i < num_outputs; ++i) {
    Value* v = m_.NewValue(DType::kF32, std::nullopt, g_);
    v->producer = n.get();
    v->output_index = i;
    n->outputs.push_back(v);
  }
  g_->nodes.push_back(std::move(n));
  return g_->nodes.back().get();
}

std::vector<Value*> GraphBuilder::Ops(const std::string& op, const std::vector<Value*>& inputs,
                                      const Attrs& attrs, int num_outputs,
                                      const std::string& domain) {
  Node* n = AddNode(op, inputs, num_outputs, domain);
  n->attrs = attrs;
  return n->outputs;
}

Value* GraphBuilder::Op(const std::string& op, const std::vector<Value*>& inputs,
                        const Attrs& attrs, const std::string& domain) {
  return Ops(op, inputs, attrs, 1, domain)[0];
}

void GraphBuilder::Output(const std::string& name, Value* v) {
  if (v->name.empty()) v->name = name;
  if (v->name != name) {
    // The same value under a second name: an Identity keeps both names.
    v = Op(ops::kIdentity, {v});
    v->name = name;
  }
  g_->outputs.push_back(v);
}

std::vector<Value*> GraphBuilder::If(
    Value* cond, int num_outputs, const std::function<std::vector<Value*>(GraphBuilder&)>& then_fn,
    const std::function<std::vector<Value*>(GraphBuilder&)>& else_fn) {
  Node* n = AddNode(ops::kIf, {cond}, num_outputs, "");
  for (const char* name : {"then_branch", "else_branch"}) {
    std::unique_ptr<Graph> sub = m_.NewGraph(g_, n);
    GraphBuilder b(sub.get());
    sub->outputs = (name[0] == 't' ? then_fn : else_fn)(b);
    n->subgraphs.emplace_back(name, std::move(sub));
  }
  return n->outputs;
}

std::vector<Value*> GraphBuilder::Loop(
    Value* max_trip, Value* cond, const std::vector<Value*>& carried, int num_scan_outputs,
    const std::function<std::vector<Value*>(GraphBuilder&, Value*, Value*,
                                            const std::vector<Value*>&)>& body_fn) {
  std::vector<Value*> inputs = {max_trip, cond};
  inputs.insert(inputs.end(), carried.begin(), carried.end());
  Node* n = AddNode(ops::kLoop, inputs, static_cast<int>(carried.size()) + num_scan_outputs, "");
  std::unique_ptr<Graph> body = m_.NewGraph(g_, n);
  Value* iter = m_.NewValue(DType::kI64, std::vector<Dim>{}, body.get(), "iter");
  Value* c = m_.NewValue(DType::kBool, std::vector<Dim>{}, body.get(), "cond");
  body->inputs = {iter, c};
  std::vector<Value*> in;
  for (size_t i = 0; i < carried.size(); ++i) {
    Value* v =
        m_.NewValue(carried[i]->dtype, carried[i]->shape, body.get(), absl::StrCat("carried_", i));
    body->inputs.push_back(v);
    in.push_back(v);
  }
  GraphBuilder b(body.get());
  body->outputs = body_fn(b, iter, c, in);
  n->subgraphs.emplace_back("body", std::move(body));
  return n->outputs;
}

}  // namespace dynvm::compiler
