// ONNX ModelProto -> compiler IR. Runs after the structural checks (model_checker.h), so names
// resolve and tensors have consistent sizes; what remains to refuse here is what dynvm does not
// support (operators, attributes, element types) and what only the conversion sees.
#include "compiler/onnx/onnx_importer.h"

#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/onnx/decode_wrap.h"
#include "compiler/onnx/libonnx_bridge.h"
#include "compiler/onnx/model_checker.h"
#include "compiler/onnx/tensor_proto.h"
#include "compiler/op_registry.h"
#include "compiler/ops/names.h"
#include "compiler/ops/op_def.h"
#include "google/protobuf/io/coded_stream.h"
#include "kernels/registry.h"
#include "schema/mapped_file.h"

namespace dynvm::compiler::onnx {
namespace {

using AttrType = pb::AttributeProto::AttributeType;

struct Scope {
  const Scope* parent = nullptr;
  absl::flat_hash_map<std::string, Value*> names;
  Value* Find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent) {
      auto it = s->names.find(name);
      if (it != s->names.end()) return it->second;
    }
    return nullptr;
  }
};

std::string Join(absl::string_view where, absl::string_view what) {
  return where.empty() ? std::string(what) : absl::StrCat(where, ": ", what);
}

AttrType TypeOf(const pb::AttributeProto& a) {
  if (a.type() != pb::AttributeProto::UNDEFINED) return a.type();
  // The structural checker guarantees exactly one filled field when the type is missing.
  if (a.has_f()) return pb::AttributeProto::FLOAT;
  if (a.has_i()) return pb::AttributeProto::INT;
  if (a.has_s()) return pb::AttributeProto::STRING;
  if (a.has_t()) return pb::AttributeProto::TENSOR;
  if (a.has_g()) return pb::AttributeProto::GRAPH;
  if (a.has_tp()) return pb::AttributeProto::TYPE_PROTO;
  if (a.floats_size() > 0) return pb::AttributeProto::FLOATS;
  if (a.ints_size() > 0) return pb::AttributeProto::INTS;
  if (a.strings_size() > 0) return pb::AttributeProto::STRINGS;
  return pb::AttributeProto::UNDEFINED;
}

// Opsets 7 to 23 of the default domain are supported; a model of an older opset is accepted when
// every operator it uses is unchanged since that opset (OpDef::since). Each operator's versions up
// to 23 are in its definition (compiler/ops/), those dynvm refuses marked there.
constexpr int kMinOpset = 1;
constexpr int kMinFullOpset = 7;
constexpr int kMaxOpset = 23;
// The newest opset Debian's libonnx (1.12) has schemas for: its checker (--onnx-check) refuses
// newer models it cannot read, so it runs only up to here.
constexpr int kLibOnnxMaxOpset = 17;
// Nested protobuf messages the parser follows: three per level of subgraph nesting
// (GraphProto > NodeProto > AttributeProto), far above kMaxGraphDepth.
constexpr int kProtoRecursionLimit = 1000;

// The definition of a default-domain op the importer accepts: nullptr when there is none or it
// has no ONNX signature.
const OpDef* OnnxDef(absl::string_view op) {
  const OpDef* d = BuiltinOps().Find("", op);
  return d != nullptr && !d->versions.empty() ? d : nullptr;
}

// If, Loop and Scan: their regions are imported with them (SequenceMap is imported as a Loop).
bool IsControlFlow(absl::string_view op) {
  const OpDef* d = OnnxDef(op);
  return d != nullptr && d->has(kControlFlow) && op != ops::kSequenceMap;
}

// The type of a value: a tensor, or a sequence of tensors, or an optional of either.
struct ValueType {
  ObjectKind kind = ObjectKind::kTensor;
  ObjectKind elem_kind = ObjectKind::kTensor;
  DType dtype = DType::kF32;
  bool has_dtype = false;
  std::optional<std::vector<Dim>> shape;
};

class Importer {
 public:
  Importer(const ImportOptions& options, TensorReadOptions tensor_options)
      : options_(options), tensor_options_(std::move(tensor_options)) {}

  absl::StatusOr<std::unique_ptr<Module>> Run(const pb::ModelProto& model);

 private:
  // `loop_body`: `g` is a Loop's body (its first two inputs are the iteration number and the
  // condition).
  absl::Status ImportGraph(const pb::GraphProto& g, Graph* graph, Scope& scope, bool top,
                           const std::string& where, bool loop_body = false);
  // A Loop body that declares its iteration number or condition as a one-element 1-D tensor
  // ([1], as PyTorch's exporter writes them) reads them as such: ONNX Runtime feeds them in the
  // rank the body declares, and a body that indexes with the iteration number (Gather) then
  // slices with the result (Slice's starts must be 1-D) depends on it. The body's input stays
  // the scalar the Loop makes; its readers see a Reshape of it to [1].
  absl::Status ReshapeDeclaredLoopCounters(const pb::GraphProto& g, Graph* graph, Scope& scope);
  // `adapted`: a node of an opset before 7 rewritten to its opset-7 form by ImportLegacyNode.
  absl::Status ImportNode(const pb::NodeProto& n, int index, Graph* graph, Scope& scope,
                          const std::string& where, bool adapted = false);
  // The graphs of a control-flow node's attributes (null when absent).
  struct Regions {
    const pb::GraphProto* then_g = nullptr;
    const pb::GraphProto* else_g = nullptr;
    const pb::GraphProto* body_g = nullptr;
  };
  absl::Status ReadAttributes(const pb::NodeProto& n, const std::string& label, bool control_flow,
                              Node* np, Regions* regions);
  absl::Status ImportRegions(const pb::NodeProto& n, const std::string& label, Graph* graph,
                             Scope& scope, Node* np, const Regions& r, size_t* region_outputs);
  // SequenceMap as a Loop over the first sequence's length: SequenceAt of each sequence input,
  // the body, and SequenceInsert of each result into a Loop-carried sequence.
  absl::Status ImportSequenceMap(const pb::NodeProto& n, int index, Graph* graph, Scope& scope,
                                 const std::string& label);
  absl::Status ImportLegacyNode(const pb::NodeProto& n, int index, Graph* graph, Scope& scope,
                                const std::string& where);
  absl::Status CheckOnnxNode(const pb::NodeProto& n, const std::string& label, bool adapted) const;
  // Arity and attributes against the signature of `def` at `opset` of its domain.
  absl::Status CheckSignature(const pb::NodeProto& n, const OpDef& def, int64_t opset,
                              const std::string& label) const;
  // The rank of `name` where the model declares it (an input, a value_info, a constant).
  std::optional<int> DeclaredRank(const std::string& name, const Scope& scope) const;
  absl::StatusOr<ValueType> ParseType(const pb::TypeProto& type, const std::string& label,
                                      const std::string& name, int depth);
  absl::StatusOr<Value*> ImportConstant(const pb::NodeProto& n, const std::string& label);
  absl::StatusOr<Tensor> ReadTensor(const pb::TensorProto& t, const std::string& label);
  absl::StatusOr<Value*> ImportInput(const pb::ValueInfoProto& v, Graph* graph, bool top,
                                     const std::string& where);

  const ImportOptions& options_;
  TensorReadOptions tensor_options_;
  Module* m_ = nullptr;
  int64_t opset_ = 0;
  absl::flat_hash_map<std::string, int64_t> domain_opsets_;  // of the other domains
  absl::flat_hash_map<std::string, int> declared_rank_;      // from value_info and outputs
  absl::flat_hash_set<std::string> declared_sequence_;       // values declared sequence-typed
  int synthetic_ = 0;
};

// Operators whose opset-6-and-older versions broadcast with `broadcast`/`axis` attributes
// (the right operand aligned at `axis` of the left one) instead of NumPy's rules.
bool IsLegacyBroadcastOp(absl::string_view op) {
  const OpDef* d = OnnxDef(op);
  return d != nullptr && d->has(kLegacyBroadcast);
}

absl::StatusOr<Tensor> Importer::ReadTensor(const pb::TensorProto& t, const std::string& label) {
  absl::StatusOr<Tensor> r = TensorFromProto(t, tensor_options_);
  if (!r.ok()) return absl::Status(r.status().code(), Join(label, r.status().message()));
  return r;
}

absl::StatusOr<ValueType> Importer::ParseType(const pb::TypeProto& type, const std::string& label,
                                              const std::string& name, int depth) {
  ValueType vt;
  switch (type.value_case()) {
    case pb::TypeProto::kTensorType:
      break;
    case pb::TypeProto::kSequenceType: {
      if (!type.sequence_type().has_elem_type())
        return absl::InvalidArgumentError(Join(label, "a sequence type without an element type"));
      const pb::TypeProto& elem = type.sequence_type().elem_type();
      if (elem.value_case() != pb::TypeProto::kTensorType) {
        return absl::UnimplementedError(Join(label, "only sequences of tensors are supported"));
      }
      DYNVM_ASSIGN_OR_RETURN(ValueType e, ParseType(elem, label, name, depth + 1));
      e.kind = ObjectKind::kSequence;
      return e;
    }
    case pb::TypeProto::kOptionalType: {
      if (depth > 0)
        return absl::UnimplementedError(
            Join(label, "optionals inside other types are not supported"));
      if (!type.optional_type().has_elem_type())
        return absl::InvalidArgumentError(Join(label, "an optional type without an element type"));
      DYNVM_ASSIGN_OR_RETURN(ValueType e,
                             ParseType(type.optional_type().elem_type(), label, name, depth + 1));
      e.elem_kind = e.kind;
      e.kind = ObjectKind::kOptional;
      return e;
    }
    default:
      return absl::UnimplementedError(Join(label,
                                           "only tensors, sequences of tensors and optionals are "
                                           "supported (not maps or sparse tensors)"));
  }
  if (type.value_case() != pb::TypeProto::kTensorType) {
    return absl::UnimplementedError(Join(label, "nested sequences are not supported"));
  }
  const pb::TypeProto::Tensor& tt = type.tensor_type();
  if (tt.has_elem_type() && tt.elem_type() != pb::TensorProto::UNDEFINED) {
    absl::StatusOr<DType> d = DTypeOfElemType(tt.elem_type());
    if (!d.ok()) return absl::Status(d.status().code(), Join(label, d.status().message()));
    vt.dtype = *d;
    vt.has_dtype = true;
  }
  if (tt.has_shape()) {
    if (tt.shape().dim_size() > Tensor::kMaxRank) {
      return absl::UnimplementedError(
          Join(label, absl::StrCat("has rank ", tt.shape().dim_size(), "; at most ",
                                   Tensor::kMaxRank, " is supported")));
    }
    std::vector<Dim> dims;
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const pb::TensorShapeProto::Dimension& d = tt.shape().dim(i);
      if (d.value_case() == pb::TensorShapeProto::Dimension::kDimValue) {
        dims.push_back(m_->sym().Const(d.dim_value()));
      } else if (depth == 0 && d.value_case() == pb::TensorShapeProto::Dimension::kDimParam &&
                 !d.dim_param().empty()) {
        dims.push_back(m_->sym().Symbol(d.dim_param()));
      } else {
        // Elements of sequences and optionals: a named dim is not shared between them.
        dims.push_back(m_->sym().Fresh(absl::StrCat(name, "_dim", i)));
      }
    }
    vt.shape = std::move(dims);
  }
  return vt;
}

absl::StatusOr<Value*> Importer::ImportInput(const pb::ValueInfoProto& v, Graph* graph, bool top,
                                             const std::string& where) {
  const std::string label = Join(where, absl::StrCat("input '", v.name(), "'"));
  if (top && !v.has_type()) return absl::InvalidArgumentError(Join(label, "has no tensor type"));
  ValueType vt;
  if (v.has_type()) {
    DYNVM_ASSIGN_OR_RETURN(ValueType t, ParseType(v.type(), label, v.name(), 0));
    vt = std::move(t);
    if (top && !vt.has_dtype) return absl::InvalidArgumentError(Join(label, "has no element type"));
  }
  Value* value = m_->NewValue(vt.dtype, std::move(vt.shape), graph, v.name());
  value->kind = vt.kind;
  value->elem_kind = vt.elem_kind;
  graph->inputs.push_back(value);
  return value;
}

absl::StatusOr<Value*> Importer::ImportConstant(const pb::NodeProto& n, const std::string& label) {
  if (n.output_size() != 1 || n.output(0).empty()) {
    return absl::InvalidArgumentError(Join(label, "a Constant must have exactly one output"));
  }
  if (n.attribute_size() != 1) {
    return absl::InvalidArgumentError(
        Join(label, "a Constant must have exactly one value attribute"));
  }
  const pb::AttributeProto& a = n.attribute(0);
  absl::StatusOr<Tensor> t;
  if (a.name() == "value") {
    t = ReadTensor(a.t(), label);
  } else if (a.name() == "value_float") {
    t = Tensor::Scalar(a.f());
  } else if (a.name() == "value_int") {
    t = Tensor::ScalarI64(a.i());
  } else if (a.name() == "value_floats") {
    t = Tensor::FromVector<float>(DType::kF32, {a.floats_size()},
                                  absl::MakeConstSpan(a.floats().data(), a.floats_size()));
  } else if (a.name() == "value_ints") {
    t = Tensor::FromVector<int64_t>(DType::kI64, {a.ints_size()},
                                    absl::MakeConstSpan(a.ints().data(), a.ints_size()));
  } else {
    return absl::UnimplementedError(
        Join(label, absl::StrCat("attribute '", a.name(), "' is not supported (",
                                 a.name() == "sparse_value" ? "sparse tensors" : "strings",
                                 " are not supported)")));
  }
  if (!t.ok()) return t.status();
  return m_->NewConstant(*std::move(t), n.output(0));
}

std::optional<int> Importer::DeclaredRank(const std::string& name, const Scope& scope) const {
  if (const Value* v = scope.Find(name); v != nullptr && v->shape) return v->rank();
  auto it = declared_rank_.find(name);
  if (it != declared_rank_.end()) return it->second;
  return std::nullopt;
}

absl::Status Importer::ImportLegacyNode(const pb::NodeProto& n, int index, Graph* graph,
                                        Scope& scope, const std::string& where) {
  const std::string label = Join(where, NodeLabel(n, index));
  const std::string& op = n.op_type();
  pb::NodeProto adapted = n;
  adapted.clear_attribute();
  int64_t broadcast = 0, axis = 0;
  bool has_axis = false;
  for (const pb::AttributeProto& a : n.attribute()) {
    const bool gemm_attr = op == ops::kGemm && (a.name() == "alpha" || a.name() == "beta" ||
                                                a.name() == "transA" || a.name() == "transB");
    if (gemm_attr) {
      *adapted.add_attribute() = a;
    } else if (a.name() == "broadcast" && a.type() == pb::AttributeProto::INT &&
               op != ops::kPRelu) {
      broadcast = a.i();
    } else if (a.name() == "axis" && a.type() == pb::AttributeProto::INT &&
               IsLegacyBroadcastOp(op)) {
      axis = a.i();
      has_axis = true;
    } else {
      return absl::UnimplementedError(
          Join(label, absl::StrCat("attribute '", a.name(), "' of ", op, " (opset ", opset_,
                                   ") is not supported")));
    }
  }
  if (n.input_size() < 2 || n.input(0).empty() || n.input(1).empty()) {
    return absl::InvalidArgumentError(Join(label, absl::StrCat(op, " needs two inputs")));
  }
  // The right operand reshaped so that NumPy broadcasting aligns it as the old rules did:
  // trailing ones for `axis` (elementwise ops), or along the channel axis 1 (PRelu's slope).
  int pad = 0, first_axis = 0;
  if (IsLegacyBroadcastOp(op) && broadcast != 0 && has_axis) {
    const std::optional<int> ra = DeclaredRank(n.input(0), scope),
                             rb = DeclaredRank(n.input(1), scope);
    if (!ra || !rb) {
      return absl::UnimplementedError(Join(
          label, "broadcasting with an axis (opset < 7) needs the declared ranks of both inputs"));
    }
    if (axis < 0) axis += *ra;
    pad = static_cast<int>(*ra - axis - *rb);
    first_axis = *rb;
    if (axis < 0 || pad < 0) {
      return absl::InvalidArgumentError(Join(
          label, absl::StrCat("broadcast axis ", axis, " does not fit ranks ", *ra, " and ", *rb)));
    }
  } else if (op == ops::kPRelu) {
    const std::optional<int> rx = DeclaredRank(n.input(0), scope),
                             rs = DeclaredRank(n.input(1), scope);
    const Value* slope = scope.Find(n.input(1));
    const bool single = slope != nullptr && slope->shape && slope->rank() == 1 &&
                        SymbolicContext::AsConst((*slope->shape)[0]) == 1;
    if (!single) {
      if (!rx || !rs)
        return absl::UnimplementedError(Join(label, "PRelu (opset < 7) needs declared ranks"));
      if (*rs == 1 && *rx > 2) {
        pad = *rx - 2;
        first_axis = 1;
      }
    }
  }
  if (pad > 0) {
    std::string reshaped = absl::StrCat(n.input(1), "/legacy_broadcast");
    while (scope.Find(reshaped) != nullptr)
      reshaped = absl::StrCat(n.input(1), "/legacy_broadcast", ++synthetic_);
    pb::NodeProto unsqueeze;
    unsqueeze.set_op_type(ops::kUnsqueeze);
    unsqueeze.set_name(absl::StrCat(n.name().empty() ? op : n.name(), "/legacy_broadcast"));
    unsqueeze.add_input(n.input(1));
    unsqueeze.add_output(reshaped);
    pb::AttributeProto* axes = unsqueeze.add_attribute();
    axes->set_name("axes");
    axes->set_type(pb::AttributeProto::INTS);
    for (int k = 0; k < pad; ++k) axes->add_ints(first_axis + k);
    DYNVM_RETURN_IF_ERROR(ImportNode(unsqueeze, index, graph, scope, where));
    adapted.set_input(1, reshaped);
  }
  return ImportNode(adapted, index, graph, scope, where, /*adapted=*/true);
}

// Checks an ONNX-domain node against the operator table: supported, present in the model's
// opset, its arity, its attributes' names and types. Aborted: an opset-6 node that
// ImportLegacyNode rewrites.
absl::Status Importer::CheckOnnxNode(const pb::NodeProto& n, const std::string& label,
                                     bool adapted) const {
  const OpDef* def = OnnxDef(n.op_type());
  if (def == nullptr) {
    return absl::UnimplementedError(Join(
        label, absl::StrCat("operator ", n.op_type(), " is not supported (opset ", opset_, ")")));
  }
  if (!adapted && opset_ < kMinFullOpset && opset_ < def->since &&
      (def->has(kLegacyBroadcast) || n.op_type() == ops::kGemm || n.op_type() == ops::kPRelu)) {
    return absl::AbortedError("legacy");
  }
  if (!adapted && opset_ < kMinFullOpset && opset_ < def->since) {
    return absl::UnimplementedError(Join(
        label, absl::StrCat("operator ", n.op_type(), " of opset ", opset_,
                            " is not supported (only its version ", def->since, " and later)")));
  }
  return CheckSignature(n, *def, opset_, label);
}

absl::Status Importer::CheckSignature(const pb::NodeProto& n, const OpDef& def, int64_t opset,
                                      const std::string& label) const {
  const OpVersion* version = def.VersionAt(opset);
  if (version == nullptr) {
    return absl::InvalidArgumentError(Join(
        label, absl::StrCat("operator ", def.QualifiedName(), " does not exist in opset ", opset)));
  }
  if (version->refused) {
    return absl::UnimplementedError(
        Join(label, absl::StrCat("operator ", def.QualifiedName(), " version ", version->since,
                                 " is not supported (opset ", opset, "): ", def.refusal)));
  }
  if (version->max_inputs > 0 && n.input_size() > version->max_inputs) {
    return absl::InvalidArgumentError(
        Join(label, absl::StrCat(n.op_type(), " takes at most ", version->max_inputs,
                                 " inputs, got ", n.input_size())));
  }
  for (int i = 0; i < 32; ++i) {
    if ((version->required_mask >> i & 1) && (i >= n.input_size() || n.input(i).empty())) {
      return absl::InvalidArgumentError(
          Join(label, absl::StrCat("required input ", i, " of ", n.op_type(), " is missing")));
    }
  }
  for (const pb::AttributeProto& a : n.attribute()) {
    const AttrDef* attr = def.AttrAt(a.name(), opset);
    if (attr == nullptr) {
      return absl::UnimplementedError(Join(
          label, absl::StrCat("attribute '", a.name(), "' of ", n.op_type(), " is not supported")));
    }
    const AttrType type = TypeOf(a);
    if (static_cast<int>(type) != static_cast<int>(attr->kind)) {
      return absl::InvalidArgumentError(
          Join(label, absl::StrCat("attribute '", a.name(), "' must be ", AttrKindName(attr->kind),
                                   ", not ", AttrTypeName(type))));
    }
  }
  return absl::OkStatus();
}

absl::Status Importer::ImportNode(const pb::NodeProto& n, int index, Graph* graph, Scope& scope,
                                  const std::string& where, bool adapted) {
  const std::string label = Join(where, NodeLabel(n, index));
  const std::string domain = n.domain() == "ai.onnx" ? "" : n.domain();
  if (!domain.empty()) {
    // Another domain: dynvm's own ops and a user's custom ops, registered with the compiler
    // (a shape function) or the runtime (a kernel). Their shape functions and kernel factories
    // check inputs and attributes.
    const OpDef* def = FindOpDef(domain, n.op_type());
    // A built-in definition with a signature (ONNX Runtime's com.microsoft operators,
    // compiler/ops/msft.cc) is checked like ONNX's own, against the opset of its domain the
    // model imports (1 when it imports none).
    const OpDef* builtin = BuiltinOps().Find(domain, n.op_type());
    if (builtin != nullptr && !builtin->versions.empty()) {
      auto it = domain_opsets_.find(domain);
      const int64_t opset = it == domain_opsets_.end() ? 1 : it->second;
      DYNVM_RETURN_IF_ERROR(CheckSignature(n, *builtin, opset, label));
    } else if (def == nullptr && domain == ops::kMsftDomain &&
               !KernelRegistry::Global().HasOp(domain, n.op_type(), Device::kCPU)) {
      return absl::UnimplementedError(
          Join(label, absl::StrCat("operator ", n.op_type(),
                                   " of domain com.microsoft (ONNX Runtime's contrib operators) "
                                   "is not supported")));
    }
    if (def == nullptr && !KernelRegistry::Global().HasOp(domain, n.op_type(), Device::kCPU)) {
      return absl::UnimplementedError(
          Join(label, absl::StrCat("operator ", domain, "::", n.op_type(),
                                   " is not supported (nothing is registered for domain '", domain,
                                   "' by that name)")));
    }
  } else if (absl::Status s = CheckOnnxNode(n, label, adapted); !s.ok()) {
    if (s.code() == absl::StatusCode::kAborted)
      return ImportLegacyNode(n, index, graph, scope, where);
    return s;
  }
  if (domain.empty() && n.op_type() == ops::kSequenceMap) {
    return ImportSequenceMap(n, index, graph, scope, label);
  }
  if (domain.empty() && n.op_type() == ops::kConstant) {
    DYNVM_ASSIGN_OR_RETURN(Value * c, ImportConstant(n, label));
    scope.names[n.output(0)] = c;
    return absl::OkStatus();
  }

  auto node = std::make_unique<Node>();
  Node* np = node.get();
  np->op = n.op_type();
  np->domain = domain;
  np->name = n.name().empty() ? absl::StrCat(n.op_type(), "_", index) : n.name();
  np->graph = graph;
  for (const std::string& in : n.input()) {
    if (in.empty()) {
      np->inputs.push_back(nullptr);
      continue;
    }
    Value* v = scope.Find(in);
    if (v == nullptr)
      return absl::InvalidArgumentError(Join(label, absl::StrCat("reads undefined '", in, "'")));
    np->inputs.push_back(v);
  }
  const bool control_flow = domain.empty() && IsControlFlow(n.op_type());
  if (!control_flow) {
    while (!np->inputs.empty() && np->inputs.back() == nullptr) np->inputs.pop_back();
  }
  // Attributes, and the regions of control flow.
  Regions regions;
  DYNVM_RETURN_IF_ERROR(ReadAttributes(n, label, control_flow, np, &regions));
  if (const OpDef* def = FindOpDef(np->domain, np->op); def != nullptr && def->lower != nullptr) {
    LowerContext lower{*np, opset_, *m_, label};
    DYNVM_RETURN_IF_ERROR(def->lower(lower));
  }
  size_t region_outputs = 0;
  DYNVM_RETURN_IF_ERROR(ImportRegions(n, label, graph, scope, np, regions, &region_outputs));
  // Outputs.
  for (int i = 0; i < n.output_size(); ++i) {
    if (n.output(i).empty()) {
      np->outputs.push_back(nullptr);
      continue;
    }
    Value* v = m_->NewValue(DType::kF32, std::nullopt, graph, n.output(i));
    v->producer = np;
    v->output_index = i;
    np->outputs.push_back(v);
  }
  if (control_flow) {
    if (np->outputs.size() > region_outputs) {
      return absl::InvalidArgumentError(Join(
          label,
          absl::StrCat("has ", np->outputs.size(), " outputs; its ",
                       n.op_type() == ops::kIf ? "branches" : "body", " make ", region_outputs)));
    }
    while (np->outputs.size() < region_outputs) np->outputs.push_back(nullptr);
  } else {
    while (!np->outputs.empty() && np->outputs.back() == nullptr) np->outputs.pop_back();
  }
  for (Value* v : np->outputs) {
    if (v != nullptr) scope.names[v->name] = v;
  }
  graph->nodes.push_back(std::move(node));
  return absl::OkStatus();
}

// The attributes of `n` into np->attrs; the graphs of control flow into `regions`.
absl::Status Importer::ReadAttributes(const pb::NodeProto& n, const std::string& label,
                                      bool control_flow, Node* np, Regions* regions) {
  for (const pb::AttributeProto& a : n.attribute()) {
    AttrValue v;
    switch (TypeOf(a)) {
      case pb::AttributeProto::INT:
        v.type = AttrValue::Type::kInt;
        v.i = a.i();
        break;
      case pb::AttributeProto::FLOAT:
        v.type = AttrValue::Type::kFloat;
        v.f = a.f();
        break;
      case pb::AttributeProto::STRING:
        v.type = AttrValue::Type::kString;
        v.s = a.s();
        break;
      case pb::AttributeProto::INTS:
        v.type = AttrValue::Type::kInts;
        v.ints.assign(a.ints().begin(), a.ints().end());
        break;
      case pb::AttributeProto::FLOATS:
        v.type = AttrValue::Type::kFloats;
        v.floats.assign(a.floats().begin(), a.floats().end());
        break;
      case pb::AttributeProto::STRINGS:
        v.type = AttrValue::Type::kStrings;
        v.strings.assign(a.strings().begin(), a.strings().end());
        break;
      case pb::AttributeProto::TENSOR: {
        DYNVM_ASSIGN_OR_RETURN(
            Tensor t, ReadTensor(a.t(), Join(label, absl::StrCat("attribute '", a.name(), "'"))));
        v.type = AttrValue::Type::kTensor;
        v.tensor = std::move(t);
        break;
      }
      case pb::AttributeProto::TYPE_PROTO: {
        // Optional's 'type' (the only TYPE_PROTO attribute the operator table admits): kept
        // as the content kind and element type.
        DYNVM_ASSIGN_OR_RETURN(
            ValueType t, ParseType(a.tp(), Join(label, absl::StrCat("attribute '", a.name(), "'")),
                                   a.name(), 1));
        AttrValue kind;
        kind.type = AttrValue::Type::kInt;
        kind.i = static_cast<int64_t>(t.kind);
        np->attrs["elem_kind"] = kind;
        v.type = AttrValue::Type::kInt;
        v.i = OnnxFromDType(t.dtype);
        np->attrs["dtype"] = v;
        continue;
      }
      case pb::AttributeProto::GRAPH:
        if (!control_flow) {
          return absl::UnimplementedError(
              Join(label, absl::StrCat("graph attribute '", a.name(), "' is not supported")));
        }
        if (a.name() == "then_branch") regions->then_g = &a.g();
        if (a.name() == "else_branch") regions->else_g = &a.g();
        if (a.name() == "body") regions->body_g = &a.g();
        continue;
      default:
        return absl::UnimplementedError(
            Join(label, absl::StrCat("attribute '", a.name(), "' of type ", AttrTypeName(TypeOf(a)),
                                     " is not supported")));
    }
    np->attrs[a.name()] = std::move(v);
  }
  return absl::OkStatus();
}

// Checks the regions of If, Loop and Scan and imports them (a subgraph sees the names defined
// before this node); `region_outputs` is how many outputs they make.
absl::Status Importer::ImportRegions(const pb::NodeProto& n, const std::string& label, Graph* graph,
                                     Scope& scope, Node* np, const Regions& r,
                                     size_t* region_outputs) {
  const bool control_flow = np->domain.empty() && IsControlFlow(n.op_type());
  if (control_flow && n.op_type() == ops::kIf) {
    if (r.then_g == nullptr || r.else_g == nullptr) {
      return absl::InvalidArgumentError(Join(label, "If needs then_branch and else_branch"));
    }
    if (r.then_g->output_size() != r.else_g->output_size()) {
      return absl::InvalidArgumentError(
          Join(label, absl::StrCat("then_branch has ", r.then_g->output_size(),
                                   " outputs, else_branch ", r.else_g->output_size())));
    }
    *region_outputs = r.then_g->output_size();
  } else if (control_flow && (n.op_type() == ops::kLoop || n.op_type() == ops::kScan)) {
    if (r.body_g == nullptr)
      return absl::InvalidArgumentError(Join(label, absl::StrCat(n.op_type(), " needs a body")));
    *region_outputs = n.op_type() == ops::kLoop ? std::max(r.body_g->output_size() - 1, 0)
                                                : r.body_g->output_size();
    if (n.op_type() == ops::kLoop && n.input_size() < 2) {
      return absl::InvalidArgumentError(
          Join(label, "Loop needs inputs M and cond (either may be empty)"));
    }
  }
  for (const auto& [attr, g] :
       {std::pair<const char*, const pb::GraphProto*>{"then_branch", r.then_g},
        {"else_branch", r.else_g},
        {"body", r.body_g}}) {
    if (g == nullptr) continue;
    std::unique_ptr<Graph> sub = m_->NewGraph(graph, np);
    Scope inner;
    inner.parent = &scope;
    const bool loop_body = g == r.body_g && n.op_type() == ops::kLoop;
    DYNVM_RETURN_IF_ERROR(
        ImportGraph(*g, sub.get(), inner, /*top=*/false, Join(label, attr), loop_body));
    np->subgraphs.emplace_back(attr, std::move(sub));
  }
  return absl::OkStatus();
}

absl::Status Importer::ImportSequenceMap(const pb::NodeProto& n, int index, Graph* graph,
                                         Scope& scope, const std::string& label) {
  const pb::GraphProto* body_g = nullptr;
  for (const pb::AttributeProto& a : n.attribute()) {
    if (a.name() == "body") body_g = &a.g();
  }
  if (body_g == nullptr) return absl::InvalidArgumentError(Join(label, "SequenceMap needs a body"));
  if (body_g->input_size() != n.input_size() || body_g->output_size() != n.output_size()) {
    return absl::InvalidArgumentError(
        Join(label, absl::StrCat("the body takes ", body_g->input_size(), " inputs and makes ",
                                 body_g->output_size(), " outputs for ", n.input_size(),
                                 " inputs and ", n.output_size(), " outputs")));
  }
  const std::string name = n.name().empty() ? absl::StrCat("SequenceMap_", index) : n.name();
  std::vector<Value*> ins;
  for (int j = 0; j < n.input_size(); ++j) {
    Value* v = n.input(j).empty() ? nullptr : scope.Find(n.input(j));
    if (v == nullptr) {
      return absl::InvalidArgumentError(
          Join(label, absl::StrCat("input ", j, " is missing or undefined")));
    }
    ins.push_back(v);
  }
  // The element types of the results: the body's declared output types.
  std::vector<DType> out_dtypes;
  for (const pb::ValueInfoProto& o : body_g->output()) {
    if (!o.has_type() || o.type().value_case() != pb::TypeProto::kTensorType ||
        !o.type().tensor_type().has_elem_type()) {
      return absl::UnimplementedError(Join(
          label,
          absl::StrCat("SequenceMap: body output '", o.name(), "' needs a declared tensor type")));
    }
    absl::StatusOr<DType> d = DTypeOfElemType(o.type().tensor_type().elem_type());
    if (!d.ok()) return absl::Status(d.status().code(), Join(label, d.status().message()));
    out_dtypes.push_back(*d);
  }
  auto add = [](Graph* g, const std::string& op, const std::string& node_name,
                std::vector<Value*> inputs, std::vector<Value*> outputs) {
    auto node = std::make_unique<Node>();
    node->op = op;
    node->name = node_name;
    node->graph = g;
    node->inputs = std::move(inputs);
    node->outputs = std::move(outputs);
    for (size_t k = 0; k < node->outputs.size(); ++k) {
      node->outputs[k]->producer = node.get();
      node->outputs[k]->output_index = static_cast<int>(k);
    }
    Node* p = node.get();
    g->nodes.push_back(std::move(node));
    return p;
  };
  Value* len = m_->NewValue(DType::kI64, std::nullopt, graph, absl::StrCat(name, "/length"));
  add(graph, ops::kSequenceLength, absl::StrCat(name, "/length"), {ins[0]}, {len});
  std::vector<Value*> loop_ins = {len, nullptr};
  for (size_t k = 0; k < out_dtypes.size(); ++k) {
    Value* e = m_->NewValue(out_dtypes[k], std::nullopt, graph, absl::StrCat(name, "/empty", k));
    Node* en = add(graph, ops::kSequenceEmpty, absl::StrCat(name, "/empty", k), {}, {e});
    AttrValue dt;
    dt.type = AttrValue::Type::kInt;
    dt.i = OnnxFromDType(out_dtypes[k]);
    en->attrs["dtype"] = dt;
    loop_ins.push_back(e);
  }
  std::vector<Value*> results;
  for (int k = 0; k < n.output_size(); ++k) {
    results.push_back(m_->NewValue(out_dtypes[k], std::nullopt, graph, n.output(k)));
  }
  auto loop_node = std::make_unique<Node>();
  Node* loop = loop_node.get();
  loop->op = ops::kLoop;
  loop->name = name;
  loop->graph = graph;
  loop->inputs = loop_ins;
  loop->outputs = results;
  for (size_t k = 0; k < results.size(); ++k) {
    results[k]->producer = loop;
    results[k]->output_index = static_cast<int>(k);
  }
  std::unique_ptr<Graph> sub = m_->NewGraph(graph, loop);
  Value* iter = m_->NewValue(DType::kI64, std::nullopt, sub.get(), "iter");
  Value* cond = m_->NewValue(DType::kBool, std::nullopt, sub.get(), "cond");
  sub->inputs = {iter, cond};
  std::vector<Value*> accs;
  for (size_t k = 0; k < out_dtypes.size(); ++k) {
    accs.push_back(m_->NewValue(out_dtypes[k], std::nullopt, sub.get(), absl::StrCat("acc", k)));
    sub->inputs.push_back(accs.back());
  }
  const std::string where = Join(label, "body");
  Scope inner;
  inner.parent = &scope;
  for (int j = 0; j < n.input_size(); ++j) {
    const bool is_seq =
        j == 0 || ins[j]->kind == ObjectKind::kSequence || declared_sequence_.contains(n.input(j));
    if (!is_seq) {
      inner.names[body_g->input(j).name()] = ins[j];  // a tensor: the same in every iteration
      continue;
    }
    Value* x = m_->NewValue(DType::kF32, std::nullopt, sub.get(), body_g->input(j).name());
    add(sub.get(), ops::kSequenceAt, absl::StrCat(name, "/at", j), {ins[j], iter}, {x});
    inner.names[body_g->input(j).name()] = x;
  }
  for (const pb::TensorProto& t : body_g->initializer()) {
    DYNVM_ASSIGN_OR_RETURN(
        Tensor tensor, ReadTensor(t, Join(where, absl::StrCat("initializer '", t.name(), "'"))));
    inner.names[t.name()] = m_->NewConstant(std::move(tensor), t.name(), /*is_weight=*/true);
  }
  for (int i = 0; i < body_g->node_size(); ++i) {
    DYNVM_RETURN_IF_ERROR(ImportNode(body_g->node(i), i, sub.get(), inner, where));
  }
  sub->outputs = {cond};
  for (int k = 0; k < body_g->output_size(); ++k) {
    Value* v = inner.Find(body_g->output(k).name());
    if (v == nullptr) {
      return absl::InvalidArgumentError(
          Join(where, absl::StrCat("output '", body_g->output(k).name(), "' is not defined")));
    }
    Value* acc =
        m_->NewValue(out_dtypes[k], std::nullopt, sub.get(), absl::StrCat("acc", k, "_next"));
    add(sub.get(), ops::kSequenceInsert, absl::StrCat(name, "/insert", k), {accs[k], v}, {acc});
    sub->outputs.push_back(acc);
  }
  loop->subgraphs.emplace_back("body", std::move(sub));
  graph->nodes.push_back(std::move(loop_node));
  for (int k = 0; k < n.output_size(); ++k) {
    if (!n.output(k).empty()) scope.names[n.output(k)] = results[k];
  }
  return absl::OkStatus();
}

absl::Status Importer::ReshapeDeclaredLoopCounters(const pb::GraphProto& g, Graph* graph,
                                                   Scope& scope) {
  for (int i = 0; i < std::min(g.input_size(), 2); ++i) {
    const pb::ValueInfoProto& v = g.input(i);
    if (!v.has_type() || v.type().value_case() != pb::TypeProto::kTensorType ||
        !v.type().tensor_type().has_shape() || v.type().tensor_type().shape().dim_size() != 1) {
      continue;
    }
    const pb::TensorShapeProto::Dimension& d = v.type().tensor_type().shape().dim(0);
    if (d.has_dim_value() && d.dim_value() != 1) continue;  // not a one-element form
    Value* scalar = scope.names[v.name()];
    const int64_t one_element = 1;
    DYNVM_ASSIGN_OR_RETURN(
        Tensor shape_t,
        Tensor::FromVector<int64_t>(DType::kI64, {1}, absl::MakeConstSpan(&one_element, 1)));
    Value* shape = m_->NewConstant(std::move(shape_t), absl::StrCat(v.name(), "/shape"));
    Value* one = m_->NewValue(i == 0 ? DType::kI64 : DType::kBool, std::nullopt, graph,
                              absl::StrCat(v.name(), "/1d"));
    auto node = std::make_unique<Node>();
    node->op = ops::kReshape;
    node->name = absl::StrCat(v.name(), "/1d");
    node->graph = graph;
    node->inputs = {scalar, shape};
    node->outputs = {one};
    one->producer = node.get();
    one->output_index = 0;
    graph->nodes.push_back(std::move(node));
    scope.names[v.name()] = one;
  }
  return absl::OkStatus();
}

absl::Status Importer::ImportGraph(const pb::GraphProto& g, Graph* graph, Scope& scope, bool top,
                                   const std::string& where, bool loop_body) {
  for (const auto* list : {&g.value_info(), &g.output(), &g.input()}) {
    for (const pb::ValueInfoProto& v : *list) {
      if (v.has_type() && v.type().value_case() == pb::TypeProto::kTensorType &&
          v.type().tensor_type().has_shape()) {
        declared_rank_[v.name()] = v.type().tensor_type().shape().dim_size();
      }
      if (v.has_type() && v.type().value_case() == pb::TypeProto::kSequenceType) {
        declared_sequence_.insert(v.name());
      }
    }
  }
  absl::flat_hash_map<std::string, bool> is_init;
  for (const pb::TensorProto& t : g.initializer()) {
    DYNVM_ASSIGN_OR_RETURN(
        Tensor tensor, ReadTensor(t, Join(where, absl::StrCat("initializer '", t.name(), "'"))));
    scope.names[t.name()] = m_->NewConstant(std::move(tensor), t.name(), /*is_weight=*/true);
    is_init[t.name()] = true;
  }
  for (const pb::ValueInfoProto& v : g.input()) {
    // At the top level an input with an initializer is a weight with a default; dynvm
    // treats it as the weight. A region's inputs are its signature, all of them.
    if (top && is_init.contains(v.name())) continue;
    DYNVM_ASSIGN_OR_RETURN(Value * in, ImportInput(v, graph, top, where));
    scope.names[v.name()] = in;
  }
  if (loop_body) DYNVM_RETURN_IF_ERROR(ReshapeDeclaredLoopCounters(g, graph, scope));
  for (int i = 0; i < g.node_size(); ++i) {
    DYNVM_RETURN_IF_ERROR(ImportNode(g.node(i), i, graph, scope, where));
  }
  for (const pb::ValueInfoProto& o : g.output()) {
    Value* v = scope.Find(o.name());
    if (v == nullptr) {
      return absl::InvalidArgumentError(
          Join(where, absl::StrCat("output '", o.name(), "' is not defined")));
    }
    graph->outputs.push_back(v);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Module>> Importer::Run(const pb::ModelProto& model) {
  DYNVM_RETURN_IF_ERROR(CheckModelStructure(model, tensor_options_));
  bool found = false;
  for (const pb::OperatorSetIdProto& o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") {
      opset_ = o.version();
      found = true;
    } else {
      domain_opsets_[o.domain()] = o.version();
    }
  }
  if (!found)
    return absl::UnimplementedError("the model imports no opset of the default ONNX domain");
  if (opset_ < kMinOpset || opset_ > kMaxOpset) {
    return absl::UnimplementedError(absl::StrCat(
        "opset ", opset_, " is not supported (dynvm imports opsets ", kMinFullOpset, " to ",
        kMaxOpset, ", and older ones where the operators used have not changed)"));
  }
  if (options_.onnx_checker && opset_ <= kLibOnnxMaxOpset) {
    DYNVM_RETURN_IF_ERROR(RunLibOnnxChecker(model));
  }
  auto module = std::make_unique<Module>();
  m_ = module.get();
  Graph* top = module->AddFunction(options_.function_name);
  Scope scope;
  DYNVM_RETURN_IF_ERROR(ImportGraph(model.graph(), top, scope, /*top=*/true, ""));
  return module;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Module>> ImportOnnxBytes(absl::string_view bytes,
                                                        const std::string& model_dir,
                                                        const ImportOptions& options) {
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(
        "the model is larger than 2 GiB; use external data for its weights");
  }
  pb::ModelProto model;
  // Protobuf's default recursion limit (100 messages) stops at about 32 nested If/Loop bodies,
  // with only "parsing failed" to say why: parse deeper, and let the structural check refuse
  // bodies nested more than kMaxGraphDepth with a message that says so.
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  in.SetRecursionLimit(kProtoRecursionLimit);
  if (!model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a valid ONNX model (protobuf parsing failed; subgraphs nested more than ",
                     kProtoRecursionLimit / 3, " deep are refused there)"));
  }
  TensorReadOptions t;
  t.model_dir = model_dir;
  t.max_bytes = options.max_tensor_bytes;
  if (options.decode) {  // checked as a step model first, then as the decode model
    DYNVM_RETURN_IF_ERROR(CheckModelStructure(model, t));
    DYNVM_RETURN_IF_ERROR(WrapStepModelForDecode(&model));
  }
  return Importer(options, std::move(t)).Run(model);
}

absl::StatusOr<std::unique_ptr<Module>> ImportOnnxFile(const std::string& path,
                                                       const ImportOptions& options) {
  DYNVM_ASSIGN_OR_RETURN(std::shared_ptr<const schema::MappedFile> file,
                         schema::MappedFile::Open(path));
  const absl::Span<const uint8_t> bytes = (file)->bytes();
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  absl::StatusOr<std::unique_ptr<Module>> m = ImportOnnxBytes(
      absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), dir, options);
  if (!m.ok())
    return absl::Status(m.status().code(), absl::StrCat(path, ": ", m.status().message()));
  return m;
}

}  // namespace dynvm::compiler::onnx
