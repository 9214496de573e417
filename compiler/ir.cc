#include "compiler/ir.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dynvm::compiler {

std::string Value::TypeString() const {
  std::string s(DTypeName(dtype));
  s = shape ? absl::StrCat(s, ShapeToString(*shape)) : absl::StrCat(s, "[?]");
  if (kind == ObjectKind::kSequence) return absl::StrCat("seq<", s, ">");
  if (kind == ObjectKind::kOptional) {
    return elem_kind == ObjectKind::kSequence ? absl::StrCat("opt<seq<", s, ">>")
                                              : absl::StrCat("opt<", s, ">");
  }
  return s;
}

Graph* Node::subgraph(absl::string_view attr) const {
  for (const auto& [name, g] : subgraphs) {
    if (name == attr) return g.get();
  }
  return nullptr;
}

const AttrValue* Node::attr(absl::string_view name) const {
  auto it = attrs.find(name);
  return it == attrs.end() ? nullptr : &it->second;
}

std::string Node::Label() const {
  std::string op_name = domain.empty() ? op : absl::StrCat(domain, "::", op);
  return name.empty() ? op_name : absl::StrCat(op_name, " '", name, "'");
}

bool Graph::Sees(const Value* v) const {
  if (v->graph == nullptr) return true;  // constants
  for (const Graph* g = this; g != nullptr; g = g->parent) {
    if (v->graph == g) return true;
  }
  return false;
}

bool Graph::Contains(const Graph* g) const {
  for (; g != nullptr; g = g->parent) {
    if (g == this) return true;
  }
  return false;
}

Module::Module() = default;
Module::~Module() = default;

Graph* Module::AddFunction(absl::string_view name) {
  functions_.push_back({std::string(name), NewGraph(nullptr, nullptr)});
  return functions_.back().graph.get();
}

Graph* Module::function(absl::string_view name) const {
  for (const Function& f : functions_) {
    if (f.name == name) return f.graph.get();
  }
  return nullptr;
}

std::unique_ptr<Graph> Module::NewGraph(Graph* parent, Node* owner) {
  auto g = std::make_unique<Graph>();
  g->module = this;
  g->parent = parent;
  g->owner = owner;
  return g;
}

Value* Module::NewValue(DType dtype, std::optional<std::vector<Dim>> shape, Graph* graph,
                        absl::string_view name) {
  auto v = std::make_unique<Value>();
  v->id = static_cast<int>(values_.size());
  v->dtype = dtype;
  v->shape = std::move(shape);
  v->graph = graph;
  v->name = std::string(name);
  values_.push_back(std::move(v));
  return values_.back().get();
}

std::vector<Dim> Module::ConstShape(absl::Span<const int64_t> dims) {
  std::vector<Dim> out;
  for (int64_t d : dims) out.push_back(sym_.Const(d));
  return out;
}

Value* Module::NewConstant(Tensor t, absl::string_view name, bool is_weight) {
  std::vector<Dim> shape = ConstShape(t.dims());
  Value* v = NewValue(t.dtype(), std::move(shape), nullptr, name);
  v->is_weight = is_weight;
  // Small integer constants also carry their contents, for shape arithmetic.
  if ((t.dtype() == DType::kI64 || t.dtype() == DType::kI32) && t.rank() <= 1 && t.numel() <= 64) {
    std::vector<Dim> content;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const int64_t stride = t.rank() == 1 ? t.stride(0) : 0;
      content.push_back(sym_.Const(t.dtype() == DType::kI64 ? t.data<int64_t>()[i * stride]
                                                            : t.data<int32_t>()[i * stride]));
    }
    v->content = std::move(content);
  }
  v->constant = std::move(t);
  return v;
}

Value* AppendNode(Module& m, Graph& g, std::vector<std::unique_ptr<Node>>& out,
                  const std::string& op, std::vector<Value*> inputs, Attrs attrs,
                  const std::string& name, DType dtype, Value* result) {
  auto n = std::make_unique<Node>();
  n->op = op;
  n->name = name;
  n->graph = &g;
  n->inputs = std::move(inputs);
  n->attrs = std::move(attrs);
  Value* v = result != nullptr ? result : m.NewValue(dtype, std::nullopt, &g);
  v->producer = n.get();
  v->output_index = 0;
  v->graph = &g;
  n->outputs.push_back(v);
  out.push_back(std::move(n));
  return v;
}

std::string AttrToString(const AttrValue& a) {
  switch (a.type) {
    case AttrValue::Type::kInt:
      return absl::StrCat(a.i);
    case AttrValue::Type::kFloat:
      return absl::StrCat(a.f);
    case AttrValue::Type::kString:
      return absl::StrCat("\"", a.s, "\"");
    case AttrValue::Type::kInts:
      return absl::StrCat("[", absl::StrJoin(a.ints, ","), "]");
    case AttrValue::Type::kFloats:
      return absl::StrCat("[", absl::StrJoin(a.floats, ","), "]");
    case AttrValue::Type::kStrings:
      return absl::StrCat("[", absl::StrJoin(a.strings, ","), "]");
    case AttrValue::Type::kTensor:
      return absl::StrCat("tensor ", a.tensor.DebugString());
  }
  return "?";
}

namespace {

std::string Ref(const Value* v) {
  if (v == nullptr) return "_";
  if (v->constant && v->graph == nullptr) return absl::StrCat("%c", v->id);
  return absl::StrCat("%", v->id);
}

void DumpGraph(const Graph& g, int indent, std::string* out);

void DumpNode(const Node& n, int indent, std::string* out) {
  const std::string pad(indent, ' ');
  std::vector<std::string> outs, ins, attrs;
  for (const Value* v : n.outputs)
    outs.push_back(v ? absl::StrCat(Ref(v), ": ", v->TypeString(), v->dynamic ? "!" : "") : "_");
  for (const Value* v : n.inputs) ins.push_back(Ref(v));
  for (const auto& [k, a] : n.attrs) attrs.push_back(absl::StrCat(k, "=", AttrToString(a)));
  absl::StrAppend(out, pad, absl::StrJoin(outs, ", "), " = ",
                  n.domain.empty() ? "" : absl::StrCat(n.domain, "::"), n.op, "(",
                  absl::StrJoin(ins, ", "), ")");
  if (!attrs.empty()) absl::StrAppend(out, " {", absl::StrJoin(attrs, ", "), "}");
  out->append("\n");
  for (const auto& [name, sub] : n.subgraphs) {
    absl::StrAppend(out, pad, "  ", name, ":\n");
    DumpGraph(*sub, indent + 4, out);
  }
}

void DumpGraph(const Graph& g, int indent, std::string* out) {
  const std::string pad(indent, ' ');
  std::vector<std::string> ins;
  for (const Value* v : g.inputs) {
    ins.push_back(absl::StrCat(Ref(v), v->name.empty() ? "" : absl::StrCat(" '", v->name, "'"),
                               ": ", v->TypeString()));
  }
  absl::StrAppend(out, pad, "(", absl::StrJoin(ins, ", "), ") {\n");
  for (const auto& n : g.nodes) DumpNode(*n, indent + 2, out);
  std::vector<std::string> outs;
  for (const Value* v : g.outputs) outs.push_back(Ref(v));
  absl::StrAppend(out, pad, "  return (", absl::StrJoin(outs, ", "), ")\n", pad, "}\n");
}

}  // namespace

std::string Module::Dump() const {
  std::string out;
  for (const Function& f : functions_) {
    absl::StrAppend(&out, "func ", f.name, " ");
    DumpGraph(*f.graph, 0, &out);
  }
  return out;
}

}  // namespace dynvm::compiler
