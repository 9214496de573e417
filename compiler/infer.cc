// Shape inference over graphs, including the If/Loop/Scan regions.
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/op_registry.h"
#include "compiler/ops/names.h"
#include "compiler/ops/op_def.h"
#include "compiler/passes.h"

namespace dynvm::compiler {
namespace {

// Replaces dims that mention symbols created since `since` (region-local) by fresh symbols.
// Returns true if any was replaced.
bool Freshen(SymbolicContext& sym, std::vector<Dim>& shape, int since) {
  bool changed = false;
  for (Dim& d : shape) {
    if (sym.MentionsSymbolSince(d, since)) {
      d = sym.Fresh("d");
      changed = true;
    }
  }
  return changed;
}

void CopyType(Value* to, const Value* from) {
  to->dtype = from->dtype;
  to->kind = from->kind;
  to->elem_kind = from->elem_kind;
  to->empty_sequence = from->empty_sequence;
  to->shape = from->shape;
}

// " (body node 'name', Op)" for the node that made `v` in a body or branch.
std::string MadeBy(const Value* v, absl::string_view where) {
  return v->producer != nullptr
             ? absl::StrCat(" (", where, " node '", v->producer->name, "', ", v->producer->op, ")")
             : absl::StrCat(" (", where, " input '", v->name, "')");
}

// Infers a body or branch of `n`; its errors say which (a body node's own error names the node).
absl::Status InferRegion(Module& m, const Node& n, Graph& g, absl::string_view which) {
  absl::Status s = InferGraph(m, g);
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(n.Label(), ": ", which, ": ", s.message()));
}

// The value of an If condition when the compiler knows it: a one-element bool constant, or
// one-element symbolic content that is a constant (Equal, Not, Greater... over shapes).
std::optional<bool> StaticCondition(const Value* c) {
  if (c == nullptr || c->kind != ObjectKind::kTensor) return std::nullopt;
  if (c->constant && c->constant->numel() == 1 && c->constant->dtype() == DType::kBool) {
    return c->constant->data<bool>()[0];
  }
  if (c->content && c->content->size() == 1) {
    if (std::optional<int64_t> v = SymbolicContext::AsConst((*c->content)[0])) return *v != 0;
  }
  return std::nullopt;
}

// Replaces the If at g.nodes[index], whose condition the compiler knows, by the nodes of its
// taken branch; the other branch is dropped without being inferred or compiled (a scripted
// export's rank check keeps code for ranks the model never sees). The If's output values take
// over from the branch's (their names, as graph outputs, and their uses stay); a branch output
// no node of the branch makes (an outer value, a constant, one listed twice) is passed on by an
// Identity. Returns false, changing nothing, when the condition is not known.
absl::StatusOr<bool> InlineStaticIf(Module& m, Graph& g, size_t index) {
  Node& n = *g.nodes[index];
  const std::optional<bool> cond = StaticCondition(n.inputs.empty() ? nullptr : n.inputs[0]);
  if (!cond) return false;
  Graph* branch = n.subgraph(*cond ? "then_branch" : "else_branch");
  if (branch == nullptr || branch->outputs.size() != n.outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        n.Label(), ": the ", *cond ? "then_branch" : "else_branch", " (taken: the condition is ",
        *cond ? "true" : "false", " at compile time) must produce ", n.outputs.size(), " outputs"));
  }
  const std::vector<Value*> branch_outputs = branch->outputs;
  absl::flat_hash_map<Value*, Value*> took;       // a branch output -> the If output now holding it
  std::vector<std::pair<Value*, Value*>> passed;  // (source, If output) through an Identity
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    Value* out = n.outputs[k];
    Value* bo = branch_outputs[k];
    if (out == nullptr) continue;
    if (bo->producer == nullptr || bo->producer->graph != branch || took.contains(bo)) {
      passed.emplace_back(took.contains(bo) ? took[bo] : bo, out);
      continue;
    }
    ReplaceUses(*branch, bo, out);
    Node* p = bo->producer;
    p->outputs[static_cast<size_t>(bo->output_index)] = out;
    out->producer = p;
    out->output_index = bo->output_index;
    took[bo] = out;
  }
  std::vector<std::unique_ptr<Node>> nodes = std::move(branch->nodes);
  for (auto& node : nodes) {
    node->graph = &g;
    for (Value* v : node->outputs) {
      if (v != nullptr) v->graph = &g;
    }
    for (auto& [name, sub] : node->subgraphs) sub->parent = &g;
  }
  for (const auto& [source, out] : passed) {
    AppendNode(m, g, nodes, "Identity", {source}, {}, n.name, out->dtype, out);
  }
  g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(index));
  g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(index),
                 std::make_move_iterator(nodes.begin()), std::make_move_iterator(nodes.end()));
  return true;
}

absl::Status InferIf(Module& m, Node& n) {
  Graph* then_g = n.subgraph("then_branch");
  Graph* else_g = n.subgraph("else_branch");
  if (!then_g || !else_g)
    return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": If needs both branches"));
  SymbolicContext& sym = m.sym();
  const int since = sym.next_id();
  DYNVM_RETURN_IF_ERROR(InferRegion(m, n, *then_g, "then_branch"));
  DYNVM_RETURN_IF_ERROR(InferRegion(m, n, *else_g, "else_branch"));
  if (then_g->outputs.size() != n.outputs.size() || else_g->outputs.size() != n.outputs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.Label(), ": branches must produce ", n.outputs.size(), " outputs"));
  }
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    Value* out = n.outputs[i];
    if (out == nullptr) continue;
    const Value* a = then_g->outputs[i];
    const Value* b = else_g->outputs[i];
    if (a->dtype != b->dtype || a->kind != b->kind ||
        (a->kind == ObjectKind::kOptional && a->elem_kind != b->elem_kind)) {
      return absl::InvalidArgumentError(
          absl::StrCat(n.Label(), ": output ", i, " '", out->name, "' has type ", a->TypeString(),
                       " in then_branch", MadeBy(a, "then_branch"), " and ", b->TypeString(),
                       " in else_branch", MadeBy(b, "else_branch")));
    }
    out->dtype = a->dtype;
    out->kind = a->kind;
    out->elem_kind = a->elem_kind;
    out->empty_sequence = a->empty_sequence && b->empty_sequence;
    out->dynamic = false;
    if (a->kind == ObjectKind::kSequence && (a->empty_sequence || b->empty_sequence)) {
      // An empty branch says nothing about the elements: the other decides.
      out->shape = a->empty_sequence ? b->shape : a->shape;
      continue;
    }
    if (!a->shape || !b->shape || a->shape->size() != b->shape->size()) {
      out->shape.reset();
      out->dynamic = true;
      continue;
    }
    std::vector<Dim> shape = *a->shape;
    for (size_t k = 0; k < shape.size(); ++k) {
      if ((*a->shape)[k] != (*b->shape)[k]) {
        shape[k] = sym.Fresh("d");
        out->dynamic = true;
      }
    }
    if (Freshen(sym, shape, since)) out->dynamic = true;
    out->shape = std::move(shape);
  }
  return absl::OkStatus();
}

// A body must give a carried tensor back with the dtype and rank it entered with (its sizes may
// change); the error names the value and the body node that changed it, so the user finds the op
// to fix.
absl::Status CheckCarriedType(const Node& n, size_t i, const Value* in, const Value* out) {
  const bool rank_changes = in->kind == ObjectKind::kTensor && out->kind == ObjectKind::kTensor &&
                            in->shape && out->shape && in->shape->size() != out->shape->size();
  if (out->dtype == in->dtype && !rank_changes) return absl::OkStatus();
  const Value* init = n.inputs[2 + i];
  return absl::InvalidArgumentError(absl::StrCat(
      n.Label(), ": loop-carried value ", i, " '", init->name.empty() ? in->name : init->name,
      "' enters as ", in->TypeString(), " but the body makes ", out->TypeString(),
      MadeBy(out, "body"), out->dtype == in->dtype ? ": a carried value must keep its rank" : ""));
}

absl::Status InferLoop(Module& m, Node& n) {
  Graph* body = n.subgraph("body");
  if (!body) return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": Loop needs a body"));
  const size_t num_carried = n.inputs.size() >= 2 ? n.inputs.size() - 2 : 0;
  if (body->inputs.size() != num_carried + 2 || body->outputs.size() < num_carried + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.Label(), ": body has ", body->inputs.size(), " inputs and ",
                     body->outputs.size(), " outputs for ", num_carried, " loop-carried values"));
  }
  const size_t num_scan = body->outputs.size() - 1 - num_carried;
  if (n.outputs.size() != num_carried + num_scan) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.Label(), ": expected ", num_carried + num_scan, " outputs"));
  }
  SymbolicContext& sym = m.sym();
  const int since = sym.next_id();
  Value* iter = body->inputs[0];
  iter->dtype = DType::kI64;
  iter->shape = std::vector<Dim>{};
  iter->content = std::vector<Dim>{sym.Fresh("iter")};
  Value* cond = body->inputs[1];
  cond->dtype = DType::kBool;
  cond->shape = std::vector<Dim>{};
  for (size_t i = 0; i < num_carried; ++i) {
    Value* init = n.inputs[2 + i];
    if (init == nullptr)
      return absl::InvalidArgumentError(
          absl::StrCat(n.Label(), ": loop-carried input ", i, " is missing"));
    CopyType(body->inputs[2 + i], init);
  }
  // Iterate to a fixed point: a carried dim that the body changes becomes a fresh symbol,
  // re-read from the value at the start of every iteration.
  // A dim once found to vary stays a fresh symbol, re-read every iteration.
  std::vector<std::vector<bool>> varying(num_carried);
  for (int round = 0;; ++round) {
    DYNVM_RETURN_IF_ERROR(InferRegion(m, n, *body, "body"));
    bool changed = false;
    for (size_t i = 0; i < num_carried; ++i) {
      Value* in = body->inputs[2 + i];
      const Value* out = body->outputs[1 + i];
      DYNVM_RETURN_IF_ERROR(CheckCarriedType(n, i, in, out));
      if (in->empty_sequence && !out->empty_sequence) {
        // A sequence that enters empty: the body's elements decide its element shape.
        in->empty_sequence = false;
        in->shape = out->shape;
        changed = true;
        continue;
      }
      if (!in->shape) continue;
      if (!out->shape || out->shape->size() != in->shape->size()) {
        in->shape.reset();
        changed = true;
        continue;
      }
      varying[i].resize(in->shape->size(), false);
      for (size_t k = 0; k < in->shape->size(); ++k) {
        if (!varying[i][k] && (*in->shape)[k] != (*out->shape)[k]) {
          (*in->shape)[k] = sym.Fresh("d");
          varying[i][k] = true;
          changed = true;
        }
      }
    }
    if (!changed) break;
    if (round == 8)
      return absl::InternalError(absl::StrCat(n.Label(), ": loop shapes do not settle"));
  }
  // Induction dims: a carried dim the body advances by a loop-invariant step (out = in + c)
  // is at most init + trip_count * c, so a bounded trip count bounds it, and every value sized
  // by it can be planned at its maximum. The iteration number is below the trip count.
  const Value* trip = n.inputs.empty() ? nullptr : n.inputs[0];
  std::optional<int64_t> max_trips;
  if (trip != nullptr && trip->content && trip->content->size() == 1) {
    max_trips = sym.UpperBound((*trip->content)[0]);
    if (max_trips) sym.SetBound((*iter->content)[0]->name, std::max<int64_t>(*max_trips - 1, 0));
  }
  std::vector<std::vector<std::optional<int64_t>>> dim_bounds(num_carried);
  for (size_t i = 0; i < num_carried && max_trips; ++i) {
    Value* in = body->inputs[2 + i];
    const Value* out = body->outputs[1 + i];
    const Value* init = n.inputs[2 + i];
    if (!in->shape || !out->shape || !init->shape) continue;
    dim_bounds[i].resize(in->shape->size());
    for (size_t k = 0; k < in->shape->size(); ++k) {
      if (!varying[i][k]) continue;
      Dim d = (*in->shape)[k];
      Dim o = (*out->shape)[k];
      if (o->kind != DimNode::Kind::kAdd || (o->a != d && o->b != d)) continue;
      Dim step = o->a == d ? o->b : o->a;
      if (sym.MentionsSymbolSince(step, since)) continue;  // not loop-invariant
      // A step that may be negative (a shrinking dim) is largest on entry: not handled here.
      if (std::optional<int64_t> lb = sym.LowerBound(step); !lb || *lb < 0) continue;
      std::optional<int64_t> init_ub = sym.UpperBound((*init->shape)[k]);
      std::optional<int64_t> step_ub = sym.UpperBound(step);
      // Entering iteration j < trips, the dim is init + j * step; the result, after them all.
      int64_t total, grow;
      if (!init_ub || !step_ub || __builtin_mul_overflow(*max_trips, *step_ub, &grow) ||
          __builtin_add_overflow(*init_ub, grow, &total)) {
        continue;
      }
      sym.SetBound(d->name, *max_trips > 0 ? total - *step_ub : total);
      dim_bounds[i][k] = total;
    }
  }
  for (size_t i = 0; i < num_carried; ++i) {
    Value* out = n.outputs[i];
    if (out == nullptr) continue;
    const Value* in = body->inputs[2 + i];
    CopyType(out, in);
    const Value* made = body->outputs[1 + i];
    if (in->kind == ObjectKind::kOptional && made->kind == in->elem_kind) {
      // An optional that enters the loop and a body that makes its content (ONNX converts
      // implicitly): the result is the content (at least one iteration must run).
      out->kind = made->kind;
      out->elem_kind = ObjectKind::kTensor;
    }
    out->dynamic = false;
    if (!out->shape) {
      out->dynamic = true;
    } else if (Freshen(sym, *out->shape, since)) {
      out->dynamic = true;
      // The result of an induction dim keeps its bound.
      for (size_t k = 0; k < dim_bounds[i].size() && k < out->shape->size(); ++k) {
        if (dim_bounds[i][k] && SymbolicContext::IsSymbol((*out->shape)[k])) {
          sym.SetBound((*out->shape)[k]->name, *dim_bounds[i][k]);
        }
      }
    }
  }
  for (size_t k = 0; k < num_scan; ++k) {
    Value* out = n.outputs[num_carried + k];
    if (out == nullptr) continue;
    const Value* elem = body->outputs[1 + num_carried + k];
    out->dtype = elem->dtype;
    out->dynamic = true;
    if (!elem->shape) {
      out->shape.reset();
      continue;
    }
    std::vector<Dim> shape = *elem->shape;
    Freshen(sym, shape, since);
    shape.insert(shape.begin(), sym.Fresh("n"));
    out->shape = std::move(shape);
  }
  return absl::OkStatus();
}

absl::Status InferScan(Module& m, Node& n) {
  Graph* body = n.subgraph("body");
  if (!body) return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": Scan needs a body"));
  // Inputs: [sequence_lens (opset 8 only)] initial states..., scan inputs...
  absl::StatusOr<int64_t> num_scan_inputs = [&]() -> absl::StatusOr<int64_t> {
    const AttrValue* a = n.attr("num_scan_inputs");
    if (!a || a->type != AttrValue::Type::kInt)
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": num_scan_inputs missing"));
    return a->i;
  }();
  if (!num_scan_inputs.ok()) return num_scan_inputs.status();
  const bool opset8 = n.attr("opset8") != nullptr;
  const size_t first = opset8 ? 1 : 0;
  const int64_t nsi = *num_scan_inputs;
  if (nsi < 0 || static_cast<size_t>(nsi) + first > n.inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": bad num_scan_inputs"));
  }
  const size_t num_state = n.inputs.size() - first - nsi;
  if (body->inputs.size() != num_state + nsi || body->outputs.size() < num_state) {
    return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": body signature does not match"));
  }
  for (size_t i = first; i < n.inputs.size(); ++i) {
    if (n.inputs[i] == nullptr)
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": input ", i, " is missing"));
  }
  SymbolicContext& sym = m.sym();
  const int since = sym.next_id();
  const AttrValue* in_axes = n.attr("scan_input_axes");
  for (size_t i = 0; i < num_state; ++i) CopyType(body->inputs[i], n.inputs[first + i]);
  for (int64_t j = 0; j < nsi; ++j) {
    const Value* x = n.inputs[first + num_state + j];
    Value* bx = body->inputs[num_state + j];
    bx->dtype = x->dtype;
    if (!x->shape) {
      bx->shape.reset();
      continue;
    }
    int64_t axis = in_axes && j < static_cast<int64_t>(in_axes->ints.size()) ? in_axes->ints[j] : 0;
    if (opset8) axis = 1;  // opset 8: [batch, seq, ...]
    const int rank = static_cast<int>(x->shape->size());
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank)
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": scan input axis out of range"));
    std::vector<Dim> s = *x->shape;
    s.erase(s.begin() + axis);
    bx->shape = std::move(s);
  }
  DYNVM_RETURN_IF_ERROR(InferGraph(m, *body));
  for (size_t i = 0; i < num_state; ++i) {
    Value* out = n.outputs[i];
    if (!out) continue;
    CopyType(out, body->outputs[i]);
    out->dynamic = !out->shape || Freshen(sym, *out->shape, since);
  }
  for (size_t k = num_state; k < n.outputs.size() && k < body->outputs.size(); ++k) {
    Value* out = n.outputs[k];
    if (!out) continue;
    const Value* elem = body->outputs[k];
    out->dtype = elem->dtype;
    out->dynamic = true;
    if (!elem->shape) {
      out->shape.reset();
      continue;
    }
    std::vector<Dim> shape = *elem->shape;
    Freshen(sym, shape, since);
    // The iteration axis stands where scan_output_axes puts it (0 by default; negative
    // counts from the end of the output's rank), as the lowering's Transpose moves it.
    const AttrValue* out_axes = n.attr("scan_output_axes");
    const size_t j = k - num_state;
    int64_t axis = !opset8 && out_axes != nullptr && out_axes->type == AttrValue::Type::kInts &&
                           j < out_axes->ints.size()
                       ? out_axes->ints[j]
                       : 0;
    const int64_t out_rank = static_cast<int64_t>(shape.size()) + 1;
    if (axis < 0) axis += out_rank;
    if (axis < 0 || axis >= out_rank) {
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": scan output axis ",
                                                     out_axes->ints[j],
                                                     " is out of range for rank ", out_rank));
    }
    shape.insert(shape.begin() + axis, sym.Fresh("n"));
    out->shape = std::move(shape);
  }
  return absl::OkStatus();
}

// An output whose dims are all known must have an element count and a byte size that fit in
// int64 (a Reshape to [2^40, 2^40, 4] is refused here, at compile time, not at run time).
absl::Status CheckStaticSizes(const Node& n) {
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const Value* v = n.outputs[i];
    if (v == nullptr || !v->shape || v->kind != ObjectKind::kTensor) continue;
    int64_t elements = 1;
    bool known = true, overflow = false;
    for (Dim d : *v->shape) {
      const std::optional<int64_t> c = SymbolicContext::AsConst(d);
      if (!c) {
        known = false;
        break;
      }
      if (*c < 0) {  // a shape function's placeholder in a branch that may never run
        known = false;
        break;
      }
      overflow |= __builtin_mul_overflow(elements, *c, &elements);
    }
    int64_t bytes = 0;
    if (known && (overflow || __builtin_mul_overflow(elements, DTypeSize(v->dtype), &bytes))) {
      return absl::InvalidArgumentError(
          absl::StrCat("output ", i, " of shape ", ShapeToString(*v->shape),
                       " has more elements or bytes than fit in 64 bits"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status InferGraph(Module& m, Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i]->domain.empty() && g.nodes[i]->op == ops::kIf) {
      DYNVM_ASSIGN_OR_RETURN(const bool inlined, InlineStaticIf(m, g, i));
      if (inlined) {  // the taken branch's nodes now stand from i on
        --i;          // (wraps for i = 0; the loop's ++i brings it back)
        continue;
      }
    }
    Node& n = *g.nodes[i];
    absl::Status s;
    if (n.domain.empty() && n.op == ops::kIf) {
      s = InferIf(m, n);
    } else if (n.domain.empty() && n.op == ops::kLoop) {
      s = InferLoop(m, n);
    } else if (n.domain.empty() && n.op == ops::kScan) {
      s = InferScan(m, n);
    } else if (const OpDef* def = FindOpDef(n.domain, n.op); def && def->infer) {
      InferContext ctx(n, m);
      s = def->infer(ctx);
      if (s.ok() && n.domain.empty() && n.op == ops::kConstant) {
        const AttrValue* v = n.attr("value");
        Value* out = n.outputs[0];
        Value* c = m.NewConstant(v->tensor, out->name);
        out->constant = c->constant;
        out->content = c->content;
      }
    } else {
      // No shape function: the kernel decides the shapes at run time.
      for (Value* out : n.outputs) {
        if (out == nullptr) continue;
        if (!out->shape || !out->dynamic) {
          out->shape.reset();
          out->dynamic = true;
        }
      }
    }
    if (s.ok()) s = CheckStaticSizes(n);
    if (!s.ok()) {
      if (absl::StrContains(s.message(), n.op)) return s;
      return absl::Status(s.code(), absl::StrCat(n.Label(), ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status InferShapes(Module& m) {
  for (Function& f : m.functions()) {
    DYNVM_RETURN_IF_ERROR(InferGraph(m, *f.graph));
  }
  return absl::OkStatus();
}

}  // namespace dynvm::compiler
