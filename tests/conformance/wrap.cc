#include "tests/conformance/wrap.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "onnx/onnx_pb.h"

namespace dynvm::conformance {
namespace {

namespace pb = ::onnx;

constexpr const char* kOuter = "wrap_outer_";

pb::NodeProto* AddNode(pb::GraphProto* g, const std::string& op, const std::string& name) {
  pb::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  return n;
}

// A Constant node making `out` (a scalar of `type` holding `value`).
void AddScalarConstant(pb::GraphProto* g, const std::string& out, pb::TensorProto::DataType type,
                       int64_t value) {
  pb::NodeProto* n = AddNode(g, "Constant", out);
  n->add_output(out);
  pb::AttributeProto* a = n->add_attribute();
  a->set_name("value");
  a->set_type(pb::AttributeProto::TENSOR);
  pb::TensorProto* t = a->mutable_t();
  t->set_data_type(type);
  if (type == pb::TensorProto::BOOL) {
    t->add_int32_data(static_cast<int32_t>(value));
  } else {
    t->add_int64_data(value);
  }
}

// Every static dim of a tensor type becomes a dim_param named after the value and the axis.
void SymbolicDims(pb::TypeProto* type, const std::string& value) {
  if (!type->has_tensor_type() || !type->tensor_type().has_shape()) return;
  pb::TensorShapeProto* shape = type->mutable_tensor_type()->mutable_shape();
  for (int k = 0; k < shape->dim_size(); ++k) {
    pb::TensorShapeProto::Dimension* d = shape->mutable_dim(k);
    if (d->has_dim_value()) d->set_dim_param(absl::StrCat("wrap_", value, "_", k));
  }
}

// The type of an output of the wrapped graph: the element type only (shapes may be symbolic).
void ElementTypeOnly(pb::ValueInfoProto* v) {
  if (v->type().has_tensor_type()) v->mutable_type()->mutable_tensor_type()->clear_shape();
}

// A Constant node making `out`, a 1-D int64 tensor.
void AddInts(pb::GraphProto* g, const std::string& out, const std::vector<int64_t>& values) {
  pb::NodeProto* n = AddNode(g, "Constant", out);
  n->add_output(out);
  pb::AttributeProto* a = n->add_attribute();
  a->set_name("value");
  a->set_type(pb::AttributeProto::TENSOR);
  pb::TensorProto* t = a->mutable_t();
  t->set_data_type(pb::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
}

// Tensor outputs leave the body as scan outputs. From opset 5 on each leaves flattened, with
// its shape beside it (a scan output needs a rank known at compile time, and a node's output
// rank may depend on data); before (Reshape takes its shape as an attribute) as it is.
void AddScanOutputs(const pb::GraphProto& g, int64_t opset, pb::GraphProto* body,
                    pb::NodeProto* loop) {
  if (opset >= 5) AddInts(body, "wrap_flat", {-1});
  for (const pb::ValueInfoProto& o : g.output()) {
    if (!o.type().has_tensor_type()) continue;
    if (opset < 5) {
      pb::ValueInfoProto* scan = body->add_output();
      *scan = o;
      ElementTypeOnly(scan);
      loop->add_output("wrap_scan_" + o.name());
      continue;
    }
    pb::NodeProto* flat = AddNode(body, "Reshape", "wrap_flatten_" + o.name());
    flat->add_input(o.name());
    flat->add_input("wrap_flat");
    flat->add_output("wrap_flat_" + o.name());
    pb::NodeProto* shape = AddNode(body, "Shape", "wrap_shape_" + o.name());
    shape->add_input(o.name());
    shape->add_output("wrap_shape_" + o.name());
    for (const std::string prefix : {"wrap_flat_", "wrap_shape_"}) {
      pb::ValueInfoProto* scan = body->add_output();
      scan->set_name(prefix + o.name());
      scan->mutable_type()->mutable_tensor_type()->set_elem_type(
          prefix == "wrap_flat_" ? o.type().tensor_type().elem_type() : pb::TensorProto::INT64);
      loop->add_output(prefix + "scan_" + o.name());
    }
  }
}

// Each tensor output of the wrapped graph is the last iteration's (Gather index 1 on axis 0 of
// the scan outputs), reshaped back to its shape from opset 5 on (with allowzero from opset 14,
// so a 0 in the shape is a 0 dim).
void AddLastIteration(const pb::GraphProto& g, int64_t opset, pb::GraphProto* out) {
  AddScalarConstant(out, "wrap_last", pb::TensorProto::INT64, 1);
  for (const pb::ValueInfoProto& o : g.output()) {
    if (!o.type().has_tensor_type()) continue;
    if (opset < 5) {
      pb::NodeProto* last = AddNode(out, "Gather", "wrap_last_" + o.name());
      last->add_input("wrap_scan_" + o.name());
      last->add_input("wrap_last");
      last->add_output(kOuter + o.name());
      continue;
    }
    for (const std::string prefix : {"wrap_flat_", "wrap_shape_"}) {
      pb::NodeProto* last = AddNode(out, "Gather", prefix + "last_" + o.name());
      last->add_input(prefix + "scan_" + o.name());
      last->add_input("wrap_last");
      last->add_output(prefix + "last_" + o.name());
    }
    pb::NodeProto* back = AddNode(out, "Reshape", "wrap_unflatten_" + o.name());
    back->add_input("wrap_flat_last_" + o.name());
    back->add_input("wrap_shape_last_" + o.name());
    back->add_output(kOuter + o.name());
    if (opset >= 14) {
      pb::AttributeProto* az = back->add_attribute();
      az->set_name("allowzero");
      az->set_type(pb::AttributeProto::INT);
      az->set_i(1);
    }
  }
}

void WrapInLoop(const pb::GraphProto& g, int64_t opset, pb::GraphProto* out) {
  absl::flat_hash_set<std::string> initialized;
  for (const pb::TensorProto& t : g.initializer()) initialized.insert(t.name());
  pb::GraphProto body;
  body.set_name("wrap_body");
  pb::ValueInfoProto* iter = body.add_input();
  iter->set_name("wrap_iter");
  iter->mutable_type()->mutable_tensor_type()->set_elem_type(pb::TensorProto::INT64);
  iter->mutable_type()->mutable_tensor_type()->mutable_shape();
  pb::ValueInfoProto* cond = body.add_input();
  cond->set_name("wrap_cond");
  cond->mutable_type()->mutable_tensor_type()->set_elem_type(pb::TensorProto::BOOL);
  cond->mutable_type()->mutable_tensor_type()->mutable_shape();
  pb::ValueInfoProto* cond_out = body.add_output();
  cond_out->set_name("wrap_cond_out");
  cond_out->mutable_type()->mutable_tensor_type()->set_elem_type(pb::TensorProto::BOOL);
  cond_out->mutable_type()->mutable_tensor_type()->mutable_shape();
  pb::NodeProto* keep = AddNode(&body, "Identity", "wrap_keep_going");
  keep->add_input("wrap_cond");
  keep->add_output("wrap_cond_out");

  AddScalarConstant(out, "wrap_trips", pb::TensorProto::INT64, 2);
  pb::NodeProto loop;
  loop.set_op_type("Loop");
  loop.set_name("wrap_loop");
  loop.add_input("wrap_trips");
  loop.add_input("");
  // Carried: each graph input (the body sees it under its own name, the outer graph under a
  // prefixed one) passed through unchanged.
  std::vector<pb::ValueInfoProto> carried_outs;
  for (const pb::ValueInfoProto& in : g.input()) {
    if (initialized.contains(in.name())) {
      *out->add_input() = in;  // an initializer's default: stays outside, captured
      continue;
    }
    pb::ValueInfoProto* outer = out->add_input();
    *outer = in;
    outer->set_name(kOuter + in.name());
    SymbolicDims(outer->mutable_type(), in.name());
    pb::ValueInfoProto* body_in = body.add_input();
    *body_in = *outer;
    body_in->set_name(in.name());
    pb::NodeProto* pass = AddNode(&body, "Identity", "wrap_pass_" + in.name());
    pass->add_input(in.name());
    pass->add_output("wrap_next_" + in.name());
    pb::ValueInfoProto next = *body_in;
    next.set_name("wrap_next_" + in.name());
    carried_outs.push_back(next);
    loop.add_input(kOuter + in.name());
    loop.add_output("wrap_final_" + in.name());
  }
  // A sequence or optional output is carried too (scan outputs are tensors), entering empty.
  for (const pb::ValueInfoProto& o : g.output()) {
    if (o.type().has_tensor_type()) continue;
    pb::NodeProto* empty;
    if (o.type().has_sequence_type()) {
      empty = AddNode(out, "SequenceEmpty", "wrap_empty_" + o.name());
      pb::AttributeProto* a = empty->add_attribute();
      a->set_name("dtype");
      a->set_type(pb::AttributeProto::INT);
      a->set_i(o.type().sequence_type().elem_type().tensor_type().elem_type());
    } else {
      empty = AddNode(out, "Optional", "wrap_empty_" + o.name());
      pb::AttributeProto* a = empty->add_attribute();
      a->set_name("type");
      a->set_type(pb::AttributeProto::TYPE_PROTO);
      *a->mutable_tp() = o.type().optional_type().elem_type();
    }
    empty->add_output("wrap_empty_" + o.name());
    loop.add_input("wrap_empty_" + o.name());
    loop.add_output(kOuter + o.name());
    pb::ValueInfoProto* prev = body.add_input();
    *prev = o;
    prev->set_name("wrap_prev_" + o.name());
    carried_outs.push_back(o);
  }
  for (const pb::ValueInfoProto& next : carried_outs) *body.add_output() = next;
  for (const pb::NodeProto& n : g.node()) *body.add_node() = n;
  AddScanOutputs(g, opset, &body, &loop);
  pb::AttributeProto* a = loop.add_attribute();
  a->set_name("body");
  a->set_type(pb::AttributeProto::GRAPH);
  *a->mutable_g() = std::move(body);
  *out->add_node() = std::move(loop);
  AddLastIteration(g, opset, out);
  for (const pb::ValueInfoProto& o : g.output()) {
    pb::ValueInfoProto* v = out->add_output();
    *v = o;
    v->set_name(kOuter + o.name());
    ElementTypeOnly(v);
  }
}

void WrapInIf(const pb::GraphProto& g, pb::GraphProto* out) {
  for (const pb::ValueInfoProto& in : g.input()) *out->add_input() = in;
  // The condition is the graph's last input, bound by the runner: a constant condition would be
  // decided at compile time and the If replaced by its taken branch.
  pb::ValueInfoProto* c = out->add_input();
  c->set_name(kWrapCondInput);
  c->mutable_type()->mutable_tensor_type()->set_elem_type(pb::TensorProto::BOOL);
  c->mutable_type()->mutable_tensor_type()->mutable_shape();
  pb::NodeProto node;
  node.set_op_type("If");
  node.set_name("wrap_if");
  node.add_input("wrap_cond");
  for (const char* branch : {"then_branch", "else_branch"}) {
    pb::AttributeProto* a = node.add_attribute();
    a->set_name(branch);
    a->set_type(pb::AttributeProto::GRAPH);
    pb::GraphProto* b = a->mutable_g();
    b->set_name(absl::StrCat("wrap_", branch));
    for (const pb::NodeProto& n : g.node()) *b->add_node() = n;
    for (const pb::ValueInfoProto& o : g.output()) *b->add_output() = o;
  }
  for (const pb::ValueInfoProto& o : g.output()) {
    node.add_output(kOuter + o.name());
    pb::ValueInfoProto* v = out->add_output();
    *v = o;
    v->set_name(kOuter + o.name());
  }
  *out->add_node() = std::move(node);
}

}  // namespace

absl::StatusOr<std::string> WrapModel(absl::string_view model, Wrap wrap) {
  if (wrap == Wrap::kNone) return std::string(model);
  pb::ModelProto m;
  if (!m.ParseFromArray(model.data(), static_cast<int>(model.size()))) {
    return absl::InvalidArgumentError("the model does not parse as a ModelProto");
  }
  const pb::GraphProto& g = m.graph();
  if (g.node_size() == 0) return absl::UnimplementedError("wrap: the graph has no nodes");
  pb::GraphProto wrapped;
  wrapped.set_name(g.name());
  for (const pb::TensorProto& t : g.initializer()) *wrapped.add_initializer() = t;
  for (const pb::SparseTensorProto& t : g.sparse_initializer()) {
    *wrapped.add_sparse_initializer() = t;
  }
  if (wrap == Wrap::kLoop) {
    int64_t opset = 0;
    for (const pb::OperatorSetIdProto& o : m.opset_import()) {
      if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
    }
    WrapInLoop(g, opset, &wrapped);
  } else {
    WrapInIf(g, &wrapped);
  }
  *m.mutable_graph() = std::move(wrapped);
  std::string bytes;
  if (!m.SerializeToString(&bytes)) return absl::InternalError("wrap: cannot serialize");
  return bytes;
}

}  // namespace dynvm::conformance
