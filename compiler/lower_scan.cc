// Lowers ONNX Scan to Loop (passes.h: LowerScans), so that Scan runs on the Loop machinery
// (loop-carried registers rebound by a parallel move, scan outputs appended in place,
// double-buffered arena slots):
//
//   Scan-9+ (states s, scan inputs x_j along axis a_j, direction d_j):
//     T = Shape(x_0)[a_0]
//     Loop(T, _, s...) body(i, c, s...):
//       x_j slice = Gather(x_j, d_j ? T - 1 - i : i, axis = a_j)   (feeds the original body)
//       ...original body...
//       return c, s_out..., y_k...
//     then each scan output y_k is reversed along axis 0 when its direction is 1, and its
//     iteration axis moved to scan_output_axes[k] with a Transpose.
//
//   Scan-8 (a batch axis 0 on every state and scan input, scan axis 1, no output axes):
//     Loop(B, _) body(b, c): Scan-9 over Gather(s, b), Gather(x_j, b), its states and scan
//     outputs stacked as the outer loop's scan outputs; then lowered as above.
//     sequence_lens is not supported.
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/ops/names.h"
#include "compiler/passes.h"

namespace dynvm::compiler {
namespace {

AttrValue IntAttr(int64_t v) {
  AttrValue a;
  a.type = AttrValue::Type::kInt;
  a.i = v;
  return a;
}

AttrValue IntsAttr(std::vector<int64_t> v) {
  AttrValue a;
  a.type = AttrValue::Type::kInts;
  a.ints = std::move(v);
  return a;
}

class ScanLowering {
 public:
  explicit ScanLowering(Module& m) : m_(m) {}

  absl::Status LowerGraph(Graph& g);
  int left() const { return left_; }

 private:
  Value* Add(std::vector<std::unique_ptr<Node>>& out, Graph& g, const std::string& op,
             std::vector<Value*> inputs, Attrs attrs = {}, Value* result = nullptr,
             const std::string& name = "") {
    return AppendNode(m_, g, out, op, std::move(inputs), std::move(attrs), name, DType::kF32,
                      result);
  }
  absl::StatusOr<std::vector<int64_t>> Ints(const Node& n, const char* name, size_t count,
                                            int64_t def) {
    const AttrValue* a = n.attr(name);
    if (a == nullptr) return std::vector<int64_t>(count, def);
    if (a->type != AttrValue::Type::kInts || a->ints.size() != count) {
      return absl::InvalidArgumentError(
          absl::StrCat(n.Label(), ": '", name, "' must list ", count, " ints"));
    }
    return a->ints;
  }
  absl::Status Lower9(std::unique_ptr<Node> scan, Graph& g,
                      std::vector<std::unique_ptr<Node>>& out);
  absl::Status Lower8(std::unique_ptr<Node> scan, Graph& g,
                      std::vector<std::unique_ptr<Node>>& out);

  // False for a Scan-9 that moves a scan output's axis while the rank of that output is not
  // known yet (before shape inference).
  static bool ReadyToLower(const Node& n) {
    if (n.attr("opset8") != nullptr) return true;
    const AttrValue* axes = n.attr("scan_output_axes");
    const Graph* body = n.subgraph("body");
    if (axes == nullptr || body == nullptr || axes->type != AttrValue::Type::kInts) return true;
    const size_t num_state =
        body->outputs.size() >= axes->ints.size() ? body->outputs.size() - axes->ints.size() : 0;
    for (size_t k = 0; k < axes->ints.size(); ++k) {
      const Value* elem =
          num_state + k < body->outputs.size() ? body->outputs[num_state + k] : nullptr;
      if (axes->ints[k] != 0 && elem != nullptr && !elem->shape) return false;
    }
    return true;
  }

  Module& m_;
  int left_ = 0;
};

absl::Status ScanLowering::Lower9(std::unique_ptr<Node> scan, Graph& g,
                                  std::vector<std::unique_ptr<Node>>& out) {
  Node& n = *scan;
  Graph* body = n.subgraph("body");
  const AttrValue* nsi_attr = n.attr("num_scan_inputs");
  if (body == nullptr || nsi_attr == nullptr || nsi_attr->type != AttrValue::Type::kInt) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.Label(), ": Scan needs a body and num_scan_inputs"));
  }
  const int64_t nsi = nsi_attr->i;
  if (nsi < 1 || static_cast<size_t>(nsi) > n.inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": num_scan_inputs ", nsi,
                                                   " does not fit ", n.inputs.size(), " inputs"));
  }
  const size_t num_state = n.inputs.size() - nsi;
  if (body->inputs.size() != n.inputs.size() || body->outputs.size() < num_state) {
    return absl::InvalidArgumentError(absl::StrCat(
        n.Label(), ": the body takes ", body->inputs.size(), " inputs and makes ",
        body->outputs.size(), " outputs for ", num_state, " states and ", nsi, " scan inputs"));
  }
  const size_t num_scan_out = body->outputs.size() - num_state;
  if (n.outputs.size() > body->outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": ", n.outputs.size(),
                                                   " outputs for a body that makes ",
                                                   body->outputs.size()));
  }
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i] == nullptr)
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": input ", i, " is missing"));
  }
  absl::StatusOr<std::vector<int64_t>> in_axes = Ints(n, "scan_input_axes", nsi, 0);
  absl::StatusOr<std::vector<int64_t>> in_dirs = Ints(n, "scan_input_directions", nsi, 0);
  absl::StatusOr<std::vector<int64_t>> out_axes = Ints(n, "scan_output_axes", num_scan_out, 0);
  absl::StatusOr<std::vector<int64_t>> out_dirs =
      Ints(n, "scan_output_directions", num_scan_out, 0);
  for (const auto* s : {&in_axes, &in_dirs, &out_axes, &out_dirs}) {
    if (!s->ok()) return s->status();
  }
  const std::string base = n.name.empty() ? std::string("scan") : n.name;
  // The trip count: the length of the first scan input along its axis. The axis may be
  // negative; Shape(x)[axis] with a negative index counts from the end, as the axis does.
  Value* x0 = n.inputs[num_state];
  Value* shape = Add(out, g, ops::kShape, {x0});
  Value* trip =
      Add(out, g, ops::kGather, {shape, m_.NewConstant(Tensor::ScalarI64((*in_axes)[0]))});
  Value* last = nullptr;
  // The Loop replaces the Scan node: same body graph, new signature.
  auto loop = std::make_unique<Node>();
  Node* lp = loop.get();
  lp->op = ops::kLoop;
  lp->name = n.name;
  lp->graph = &g;
  lp->inputs = {trip, nullptr};
  for (size_t i = 0; i < num_state; ++i) lp->inputs.push_back(n.inputs[i]);
  Value* iter = m_.NewValue(DType::kI64, std::vector<Dim>{}, body, "iter");
  Value* cond = m_.NewValue(DType::kBool, std::vector<Dim>{}, body, "cond");
  std::vector<Value*> slices(body->inputs.begin() + num_state, body->inputs.end());
  std::vector<Value*> new_inputs = {iter, cond};
  new_inputs.insert(new_inputs.end(), body->inputs.begin(), body->inputs.begin() + num_state);
  body->inputs = std::move(new_inputs);
  std::vector<std::unique_ptr<Node>> front;
  for (int64_t j = 0; j < nsi; ++j) {
    Value* index = iter;
    if ((*in_dirs)[j] == 1) {
      if (last == nullptr)
        last = Add(out, g, ops::kSub, {trip, m_.NewConstant(Tensor::ScalarI64(1))});
      index = Add(front, *body, ops::kSub, {last, iter});
    } else if ((*in_dirs)[j] != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(n.Label(), ": scan input direction must be 0 or 1"));
    }
    Add(front, *body, ops::kGather, {n.inputs[num_state + j], index},
        {{"axis", IntAttr((*in_axes)[j])}}, slices[j], absl::StrCat(base, "/slice", j));
  }
  for (auto& node : body->nodes) front.push_back(std::move(node));
  body->nodes = std::move(front);
  std::vector<Value*> body_outs = {cond};
  body_outs.insert(body_outs.end(), body->outputs.begin(), body->outputs.end());
  body->outputs = std::move(body_outs);
  body->owner = lp;
  // Outputs: final states as they are; scan outputs through a reversal and a transpose when
  // their direction or axis asks for it.
  std::vector<std::pair<size_t, Value*>> post;  // (scan output index, the Scan's output value)
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    Value* v = n.outputs[i];
    const bool is_scan_out = i >= num_state;
    const size_t k = i - num_state;
    const bool needs_post =
        is_scan_out && v != nullptr && ((*out_dirs)[k] != 0 || (*out_axes)[k] != 0);
    if (needs_post) {
      post.emplace_back(k, v);
      v = m_.NewValue(DType::kF32, std::nullopt, &g);
    }
    if (v != nullptr) {
      v->producer = lp;
      v->output_index = static_cast<int>(i);
    }
    lp->outputs.push_back(v);
  }
  for (auto& [name, sub] : n.subgraphs) lp->subgraphs.emplace_back(name, std::move(sub));
  out.push_back(std::move(loop));
  for (auto& [k, result] : post) {
    Value* v = lp->outputs[num_state + k];
    const bool reverse = (*out_dirs)[k] != 0;
    const int64_t axis = (*out_axes)[k];
    if (reverse) {
      // x[::-1] along axis 0: Slice(starts=[-1], ends=[INT64_MIN], axes=[0], steps=[-1]).
      auto vec = [&](int64_t x) {
        return m_.NewConstant(
            *Tensor::FromVector<int64_t>(DType::kI64, {1}, std::vector<int64_t>{x}));
      };
      v = Add(out, g, ops::kSlice,
              {v, vec(-1), vec(std::numeric_limits<int64_t>::min()), vec(0), vec(-1)}, {},
              axis == 0 ? result : nullptr);
    }
    if (axis != 0) {
      // Move the iteration axis (0) to `axis` of the output, whose rank is the element's + 1
      // (known: ReadyToLower checked it).
      const int rank = body->outputs[1 + num_state + k]->rank() + 1;
      const int64_t a = axis < 0 ? axis + rank : axis;
      if (a < 0 || a >= rank) {
        return absl::InvalidArgumentError(
            absl::StrCat(n.Label(), ": scan output axis ", axis, " out of range"));
      }
      std::vector<int64_t> perm;
      for (int64_t d = 1; d <= a; ++d) perm.push_back(d);
      perm.push_back(0);
      for (int64_t d = a + 1; d < rank; ++d) perm.push_back(d);
      Add(out, g, ops::kTranspose, {v}, {{"perm", IntsAttr(std::move(perm))}}, result);
    }
  }
  return absl::OkStatus();
}

absl::Status ScanLowering::Lower8(std::unique_ptr<Node> scan, Graph& g,
                                  std::vector<std::unique_ptr<Node>>& out) {
  Node& n = *scan;
  if (!n.inputs.empty() && n.inputs[0] != nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(n.Label(), ": Scan (opset 8) with sequence_lens is not supported"));
  }
  const AttrValue* nsi_attr = n.attr("num_scan_inputs");
  Graph* body = n.subgraph("body");
  if (body == nullptr || nsi_attr == nullptr || nsi_attr->type != AttrValue::Type::kInt ||
      n.inputs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.Label(), ": Scan needs a body and num_scan_inputs"));
  }
  const int64_t nsi = nsi_attr->i;
  const size_t num_in = n.inputs.size() - 1;
  if (nsi < 1 || static_cast<size_t>(nsi) > num_in) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.Label(), ": num_scan_inputs ", nsi, " does not fit the inputs"));
  }
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    if (n.inputs[i] == nullptr)
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": input ", i, " is missing"));
  }
  if (n.outputs.size() > body->outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": ", n.outputs.size(),
                                                   " outputs for a body that makes ",
                                                   body->outputs.size()));
  }
  // Outer loop over the batch.
  Value* shape = Add(out, g, ops::kShape, {n.inputs[1]});
  Value* batch = Add(out, g, ops::kGather, {shape, m_.NewConstant(Tensor::ScalarI64(0))});
  auto loop = std::make_unique<Node>();
  Node* lp = loop.get();
  lp->op = ops::kLoop;
  lp->name = n.name;
  lp->graph = &g;
  lp->inputs = {batch, nullptr};
  std::unique_ptr<Graph> outer = m_.NewGraph(&g, lp);
  Value* b = m_.NewValue(DType::kI64, std::vector<Dim>{}, outer.get(), "b");
  Value* cond = m_.NewValue(DType::kBool, std::vector<Dim>{}, outer.get(), "cond");
  outer->inputs = {b, cond};
  // The inner Scan-9 over one batch element.
  auto inner = std::make_unique<Node>();
  Node* ip = inner.get();
  ip->op = ops::kScan;
  ip->name = absl::StrCat(n.name.empty() ? "scan" : n.name, "/batch");
  ip->graph = outer.get();
  ip->attrs["num_scan_inputs"] = IntAttr(nsi);
  if (const AttrValue* d = n.attr("directions")) ip->attrs["scan_input_directions"] = *d;
  std::vector<std::unique_ptr<Node>> outer_nodes;
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    ip->inputs.push_back(
        Add(outer_nodes, *outer, ops::kGather, {n.inputs[i], b}, {{"axis", IntAttr(0)}}));
  }
  std::vector<Value*> outer_outs = {cond};
  for (size_t i = 0; i < body->outputs.size(); ++i) {
    Value* v = m_.NewValue(DType::kF32, std::nullopt, outer.get());
    v->producer = ip;
    v->output_index = static_cast<int>(i);
    ip->outputs.push_back(v);
    outer_outs.push_back(v);
  }
  for (auto& [name, sub] : n.subgraphs) {
    sub->parent = outer.get();
    sub->owner = ip;
    ip->subgraphs.emplace_back(name, std::move(sub));
  }
  outer_nodes.push_back(std::move(inner));
  outer->nodes = std::move(outer_nodes);
  outer->outputs = std::move(outer_outs);
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    Value* v = n.outputs[i];
    if (v != nullptr) {
      v->producer = lp;
      v->output_index = static_cast<int>(i);
    }
    lp->outputs.push_back(v);
  }
  while (lp->outputs.size() < body->outputs.size()) lp->outputs.push_back(nullptr);
  lp->subgraphs.emplace_back("body", std::move(outer));
  out.push_back(std::move(loop));
  return absl::OkStatus();
}

absl::Status ScanLowering::LowerGraph(Graph& g) {
  std::vector<std::unique_ptr<Node>> out;
  for (auto& node : g.nodes) {
    if (node->domain.empty() && node->op == ops::kScan && !ReadyToLower(*node)) {
      ++left_;
      out.push_back(std::move(node));
    } else if (node->domain.empty() && node->op == ops::kScan) {
      const bool v8 = node->attr("opset8") != nullptr;
      absl::Status s = v8 ? Lower8(std::move(node), g, out) : Lower9(std::move(node), g, out);
      if (!s.ok()) return s;
    } else {
      out.push_back(std::move(node));
    }
  }
  g.nodes = std::move(out);
  // Regions, including those just made (a Scan-8's inner Scan is lowered here).
  for (auto& node : g.nodes) {
    for (auto& [name, sub] : node->subgraphs) {
      DYNVM_RETURN_IF_ERROR(LowerGraph(*sub));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> LowerScans(Module& module) {
  ScanLowering lowering(module);
  for (Function& f : module.functions()) {
    DYNVM_RETURN_IF_ERROR(lowering.LowerGraph(*f.graph));
  }
  return lowering.left();
}

}  // namespace dynvm::compiler
