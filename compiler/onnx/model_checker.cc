#include "compiler/onnx/model_checker.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dynvm::compiler::onnx {
namespace {

using AttrType = pb::AttributeProto::AttributeType;

// Names visible in a graph: its own, then those of the enclosing graphs (as they were when
// the node owning the subgraph ran).
struct Scope {
  const Scope* parent = nullptr;
  absl::flat_hash_set<std::string> names;
  bool Has(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent) {
      if (s->names.contains(name)) return true;
    }
    return false;
  }
};

class Checker {
 public:
  explicit Checker(const TensorReadOptions& options) : options_(options) {}

  absl::Status CheckGraph(const pb::GraphProto& g, const Scope* outer, int depth,
                          const std::string& where);

 private:
  absl::Status CheckValueInfo(const pb::ValueInfoProto& v, const std::string& where,
                              bool need_name);
  absl::Status CheckTensor(const pb::TensorProto& t, const std::string& where);
  absl::Status CheckAttribute(const pb::AttributeProto& a, const std::string& label,
                              const Scope& scope, int depth);

  const TensorReadOptions& options_;
};

absl::Status Invalid(absl::string_view where, absl::string_view what) {
  if (where.empty()) return absl::InvalidArgumentError(what);
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

std::string Join(absl::string_view where, absl::string_view what) {
  return where.empty() ? std::string(what) : absl::StrCat(where, ": ", what);
}

absl::Status Checker::CheckValueInfo(const pb::ValueInfoProto& v, const std::string& where,
                                     bool need_name) {
  if (need_name && v.name().empty()) return Invalid(where, "a value has no name");
  if (!v.has_type()) return absl::OkStatus();
  const pb::TypeProto& type = v.type();
  if (type.value_case() != pb::TypeProto::kTensorType)
    return absl::OkStatus();  // refused where used
  const pb::TypeProto::Tensor& tt = type.tensor_type();
  if (!tt.has_shape()) return absl::OkStatus();
  const std::string label = Join(where, absl::StrCat("value '", v.name(), "'"));
  if (tt.shape().dim_size() > 64)
    return Invalid(label, absl::StrCat("declares rank ", tt.shape().dim_size()));
  int64_t numel = 1;
  for (const pb::TensorShapeProto::Dimension& d : tt.shape().dim()) {
    if (d.value_case() != pb::TensorShapeProto::Dimension::kDimValue) continue;
    const int64_t n = d.dim_value();
    if (n < 0) return Invalid(label, absl::StrCat("declares a negative dim ", n));
    if (n > kMaxDeclaredDim) return Invalid(label, absl::StrCat("declares a huge dim ", n));
    if (n != 0 && numel > (std::numeric_limits<int64_t>::max() / 16) / n) {
      return Invalid(label, "declares dims whose size overflows");
    }
    numel *= n;
  }
  return absl::OkStatus();
}

absl::Status Checker::CheckTensor(const pb::TensorProto& t, const std::string& where) {
  absl::Status s = CheckTensorProto(t, options_);
  if (s.ok() && t.has_data_location() && t.data_location() == pb::TensorProto::EXTERNAL) {
    s = ResolveExternalData(t, options_).status();
  }
  if (!s.ok()) return absl::Status(s.code(), Join(where, s.message()));
  return absl::OkStatus();
}

absl::Status Checker::CheckAttribute(const pb::AttributeProto& a, const std::string& label,
                                     const Scope& scope, int depth) {
  if (a.name().empty()) return Invalid(label, "an attribute has no name");
  const std::string where = absl::StrCat(label, ": attribute '", a.name(), "'");
  if (!a.ref_attr_name().empty())
    return absl::UnimplementedError(absl::StrCat(where, " refers to a function attribute"));
  // Which fields are filled.
  std::vector<AttrType> filled;
  if (a.has_f()) filled.push_back(pb::AttributeProto::FLOAT);
  if (a.has_i()) filled.push_back(pb::AttributeProto::INT);
  if (a.has_s()) filled.push_back(pb::AttributeProto::STRING);
  if (a.has_t()) filled.push_back(pb::AttributeProto::TENSOR);
  if (a.has_g()) filled.push_back(pb::AttributeProto::GRAPH);
  if (a.has_sparse_tensor()) filled.push_back(pb::AttributeProto::SPARSE_TENSOR);
  if (a.has_tp()) filled.push_back(pb::AttributeProto::TYPE_PROTO);
  if (a.floats_size() > 0) filled.push_back(pb::AttributeProto::FLOATS);
  if (a.ints_size() > 0) filled.push_back(pb::AttributeProto::INTS);
  if (a.strings_size() > 0) filled.push_back(pb::AttributeProto::STRINGS);
  if (a.tensors_size() > 0) filled.push_back(pb::AttributeProto::TENSORS);
  if (a.graphs_size() > 0) filled.push_back(pb::AttributeProto::GRAPHS);
  if (a.sparse_tensors_size() > 0) filled.push_back(pb::AttributeProto::SPARSE_TENSORS);
  if (a.type_protos_size() > 0) filled.push_back(pb::AttributeProto::TYPE_PROTOS);
  if (filled.size() > 1) return Invalid(where, "fills more than one value field");
  AttrType type = a.type();
  if (type == pb::AttributeProto::UNDEFINED) {
    if (filled.empty()) return Invalid(where, "has no type and no value");
    type = filled[0];
  } else if (!pb::AttributeProto::AttributeType_IsValid(type)) {
    return Invalid(where, absl::StrCat("has an unknown type ", static_cast<int>(type)));
  }
  if (filled.empty()) {
    const bool list = type == pb::AttributeProto::FLOATS || type == pb::AttributeProto::INTS ||
                      type == pb::AttributeProto::STRINGS || type == pb::AttributeProto::TENSORS ||
                      type == pb::AttributeProto::GRAPHS ||
                      type == pb::AttributeProto::SPARSE_TENSORS ||
                      type == pb::AttributeProto::TYPE_PROTOS;
    if (!list)
      return Invalid(where, absl::StrCat("is of type ", AttrTypeName(type), " but has no value"));
  } else if (filled[0] != type) {
    return Invalid(where, absl::StrCat("is of type ", AttrTypeName(type), " but holds a ",
                                       AttrTypeName(filled[0])));
  }
  if (a.has_t()) {
    DYNVM_RETURN_IF_ERROR(CheckTensor(a.t(), where));
  }
  for (const pb::TensorProto& t : a.tensors()) {
    DYNVM_RETURN_IF_ERROR(CheckTensor(t, where));
  }
  if (a.has_g()) {
    DYNVM_RETURN_IF_ERROR(CheckGraph(a.g(), &scope, depth + 1, where));
  }
  for (const pb::GraphProto& g : a.graphs()) {
    DYNVM_RETURN_IF_ERROR(CheckGraph(g, &scope, depth + 1, where));
  }
  return absl::OkStatus();
}

absl::Status Checker::CheckGraph(const pb::GraphProto& g, const Scope* outer, int depth,
                                 const std::string& where) {
  const std::string label =
      g.name().empty() ? where : Join(where, absl::StrCat("graph '", g.name(), "'"));
  if (depth > kMaxGraphDepth) {
    // Named by the innermost graph only: the path through every level would be longer than
    // the message is worth.
    return absl::InvalidArgumentError(
        absl::StrCat("graph '", g.name(), "': If, Loop and Scan bodies nest more than ",
                     kMaxGraphDepth, " deep (the limit of nesting dynvm compiles)"));
  }
  if (g.sparse_initializer_size() > 0) {
    return absl::UnimplementedError(Join(label, "sparse initializers are not supported"));
  }
  Scope scope;
  scope.parent = outer;
  absl::flat_hash_set<std::string> inits, inputs;
  for (const pb::TensorProto& t : g.initializer()) {
    if (t.name().empty()) return Invalid(label, "an initializer has no name");
    if (!inits.insert(t.name()).second)
      return Invalid(label, absl::StrCat("initializer '", t.name(), "' is defined twice"));
    DYNVM_RETURN_IF_ERROR(
        CheckTensor(t, Join(label, absl::StrCat("initializer '", t.name(), "'"))));
    scope.names.insert(t.name());
  }
  for (const pb::ValueInfoProto& v : g.input()) {
    DYNVM_RETURN_IF_ERROR(CheckValueInfo(v, label, /*need_name=*/true));
    if (!inputs.insert(v.name()).second)
      return Invalid(label, absl::StrCat("input '", v.name(), "' is listed twice"));
    scope.names.insert(v.name());
  }
  for (const pb::ValueInfoProto& v : g.value_info()) {
    DYNVM_RETURN_IF_ERROR(CheckValueInfo(v, label, /*need_name=*/false));
  }
  for (int i = 0; i < g.node_size(); ++i) {
    const pb::NodeProto& n = g.node(i);
    const std::string nl = Join(label, NodeLabel(n, i));
    if (n.op_type().empty()) return Invalid(nl, "has no op_type");
    for (const std::string& in : n.input()) {
      if (in.empty()) continue;  // an absent optional input
      if (!scope.Has(in)) {
        return Invalid(
            nl,
            absl::StrCat("reads '", in,
                         "', which is not defined before it (an undefined name, a cycle, or nodes "
                         "out of topological order)"));
      }
    }
    absl::flat_hash_set<std::string> attr_names;
    for (const pb::AttributeProto& a : n.attribute()) {
      if (!attr_names.insert(a.name()).second)
        return Invalid(nl, absl::StrCat("attribute '", a.name(), "' is given twice"));
      DYNVM_RETURN_IF_ERROR(CheckAttribute(a, nl, scope, depth));
    }
    for (const std::string& out : n.output()) {
      if (out.empty()) continue;  // an absent optional output
      if (!scope.names.insert(out).second) {
        return Invalid(nl,
                       absl::StrCat("defines '", out, "', which is already defined in this graph"));
      }
    }
  }
  for (const pb::ValueInfoProto& v : g.output()) {
    DYNVM_RETURN_IF_ERROR(CheckValueInfo(v, label, /*need_name=*/true));
    if (!scope.Has(v.name()))
      return Invalid(label, absl::StrCat("output '", v.name(), "' is not defined"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string NodeLabel(const pb::NodeProto& node, int index) {
  std::string op = node.domain().empty() || node.domain() == "ai.onnx"
                       ? node.op_type()
                       : absl::StrCat(node.domain(), "::", node.op_type());
  if (node.name().empty()) return absl::StrCat("node #", index, " (", op, ")");
  return absl::StrCat("node '", node.name(), "' (", op, ")");
}

absl::Status CheckModelStructure(const pb::ModelProto& model, const TensorReadOptions& options) {
  if (!model.has_graph()) return absl::InvalidArgumentError("the model has no graph");
  if (model.opset_import_size() == 0)
    return absl::InvalidArgumentError("the model imports no opset");
  absl::flat_hash_set<std::string> domains;
  for (const pb::OperatorSetIdProto& o : model.opset_import()) {
    const std::string d = o.domain() == "ai.onnx" ? "" : o.domain();
    if (!domains.insert(d).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("opset of domain '", d, "' is imported twice"));
    }
    if (!o.has_version() || o.version() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("opset of domain '", d, "' has no valid version"));
    }
  }
  Checker checker(options);
  return checker.CheckGraph(model.graph(), nullptr, 0, "");
}

std::string AttrTypeName(pb::AttributeProto::AttributeType type) {
  if (pb::AttributeProto::AttributeType_IsValid(type)) {
    return pb::AttributeProto::AttributeType_Name(type);
  }
  return "UNKNOWN";
}

}  // namespace dynvm::compiler::onnx
