#include "compiler/passes.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "allocator/heap_allocator.h"
#include "common/status_macros.h"
#include "compiler/codegen.h"
#include "compiler/op_registry.h"
#include "compiler/ops/names.h"
#include "compiler/ops/op_def.h"
#include "kernels/registry.h"

namespace dynvm::compiler {
namespace {

bool IsControlFlow(const Node& n) { return !n.subgraphs.empty(); }

bool IsPure(const Node& n) {
  if (IsControlFlow(n)) return false;
  return HasTrait(n, kPure);
}

// A node may be removed when nothing uses its outputs: pure ops, and control flow whose
// regions contain only removable nodes (no host effects such as streaming).
bool Removable(const Node& n) {
  if (!IsControlFlow(n)) return IsPure(n);
  for (const auto& [name, sub] : n.subgraphs) {
    for (const auto& inner : sub->nodes) {
      if (!Removable(*inner)) return false;
    }
  }
  return true;
}

void ForEachGraph(Graph& g, const std::function<void(Graph&)>& fn) {
  fn(g);
  for (auto& n : g.nodes) {
    for (auto& [name, sub] : n->subgraphs) ForEachGraph(*sub, fn);
  }
}

void CollectUses(Graph& g, absl::flat_hash_map<const Value*, int>& uses) {
  for (auto& n : g.nodes) {
    for (Value* v : n->inputs) {
      if (v) ++uses[v];
    }
    for (auto& [name, sub] : n->subgraphs) CollectUses(*sub, uses);
  }
  for (Value* v : g.outputs) {
    if (v) ++uses[v];
  }
}

void SetConstant(Module& m, Value* v, Tensor t) {
  Value* c = m.NewConstant(std::move(t));
  v->constant = c->constant;
  v->content = c->content;
  v->shape = c->shape;
  v->dynamic = false;
  v->producer = nullptr;
  v->graph = nullptr;
}

absl::StatusOr<std::vector<Tensor>> RunReference(const Node& n) {
  const KernelSpec spec = SpecFor(n, std::vector<bool>(n.outputs.size(), true));
  std::vector<const Tensor*> in_ptrs;
  for (const Value* v : n.inputs) in_ptrs.push_back(v == nullptr ? nullptr : &*v->constant);
  std::vector<Tensor> outs(n.outputs.size());
  std::vector<Tensor*> out_ptrs;
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    out_ptrs.push_back(n.outputs[i] == nullptr ? nullptr : &outs[i]);
  }
  BackendPolicy policy;
  policy.allowed = {"reference"};
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> k, KernelRegistry::Global().Create(spec, policy));
  KernelContext ctx(&HeapAllocator::Get());
  DYNVM_RETURN_IF_ERROR((k)->Run(ctx, in_ptrs, out_ptrs));
  return outs;
}

void RemoveNodes(Graph& g, const absl::flat_hash_set<const Node*>& dead) {
  if (dead.empty()) return;
  g.nodes.erase(
      std::remove_if(g.nodes.begin(), g.nodes.end(),
                     [&](const std::unique_ptr<Node>& n) { return dead.contains(n.get()); }),
      g.nodes.end());
}

absl::Status FoldGraph(Module& m, Graph& g, int64_t max_elements, bool keep_quantized_weights) {
  absl::flat_hash_set<const Node*> folded;
  absl::flat_hash_set<const Value*> matmul_inputs;
  if (keep_quantized_weights) {
    for (const auto& n : g.nodes) {
      if (n->domain.empty() &&
          (n->op == ops::kMatMul || n->op == ops::kGemm || n->op == ops::kConv))
        matmul_inputs.insert(n->inputs.begin(), n->inputs.end());
    }
  }
  for (auto& node : g.nodes) {
    Node& n = *node;
    for (auto& [name, sub] : n.subgraphs) {
      DYNVM_RETURN_IF_ERROR(FoldGraph(m, *sub, max_elements, keep_quantized_weights));
    }
    if (n.domain.empty() && n.op == ops::kConstant && n.outputs.size() == 1 && n.outputs[0] &&
        n.outputs[0]->constant) {
      SetConstant(m, n.outputs[0], *n.outputs[0]->constant);
      folded.insert(&n);
      continue;
    }
    if (!IsPure(n)) continue;
    if (keep_quantized_weights && n.domain.empty() && n.op == ops::kDequantizeLinear &&
        !n.outputs.empty() && matmul_inputs.contains(n.outputs[0])) {
      continue;
    }
    bool all_const = !n.inputs.empty();
    for (const Value* v : n.inputs) {
      if (v != nullptr && !v->constant) all_const = false;
    }
    if (!all_const) continue;
    // Only outputs whose inferred size is a known constant within the limit: a kernel whose
    // output size comes from constant data (a Range, a ConstantOfShape of a hostile model)
    // must not allocate without bound at compile time.
    bool bounded = true;
    for (const Value* v : n.outputs) {
      if (v == nullptr) continue;
      if (!v->shape || v->dynamic) {
        bounded = false;
        break;
      }
      int64_t numel = 1;
      for (Dim d : *v->shape) {
        std::optional<int64_t> c = SymbolicContext::AsConst(d);
        if (!c || *c < 0 || (*c > 0 && numel > max_elements / *c)) {
          bounded = false;
          break;
        }
        numel *= *c;
      }
      if (!bounded || numel > max_elements) {
        bounded = false;
        break;
      }
    }
    if (!bounded) continue;
    absl::StatusOr<std::vector<Tensor>> outs = RunReference(n);
    if (!outs.ok()) continue;  // the error, if real, is reported when the program runs
    bool small = true;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i] && (!(*outs)[i].defined() || (*outs)[i].numel() > max_elements))
        small = false;
    }
    if (!small) continue;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i]) SetConstant(m, n.outputs[i], (*outs)[i]);
    }
    folded.insert(&n);
  }
  RemoveNodes(g, folded);
  return absl::OkStatus();
}

std::string CseKey(const Node& n) {
  std::string key = absl::StrCat(n.domain, "::", n.op, "(");
  for (const Value* v : n.inputs) absl::StrAppend(&key, v ? v->id : -1, ",");
  absl::StrAppend(&key, ")");
  for (const auto& [k, a] : n.attrs) {
    if (a.type == AttrValue::Type::kTensor) return "";  // not worth comparing tensors
    absl::StrAppend(&key, k, "=", AttrToString(a), ";");
  }
  absl::StrAppend(&key, "#", n.outputs.size());
  return key;
}

void CseGraph(Graph& g, absl::flat_hash_map<std::string, Node*> seen) {
  absl::flat_hash_set<const Node*> dead;
  for (auto& node : g.nodes) {
    Node& n = *node;
    for (auto& [name, sub] : n.subgraphs) CseGraph(*sub, seen);
    if (!IsPure(n)) continue;
    const std::string key = CseKey(n);
    if (key.empty()) continue;
    auto [it, inserted] = seen.emplace(key, &n);
    if (inserted) continue;
    Node& first = *it->second;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i] == nullptr) continue;
      if (first.outputs[i] == nullptr) {
        first.outputs[i] = n.outputs[i];
        n.outputs[i]->producer = &first;
        continue;
      }
      // Replace uses in the whole function: find its top-level graph.
      Graph* top = &g;
      while (top->parent) top = top->parent;
      ReplaceUses(*top, n.outputs[i], first.outputs[i]);
    }
    dead.insert(&n);
  }
  RemoveNodes(g, dead);
}

void HoistGraph(Graph& g) {
  std::vector<std::unique_ptr<Node>> out;
  for (auto& node : g.nodes) {
    for (auto& [name, sub] : node->subgraphs) HoistGraph(*sub);
    const bool is_loop = node->domain.empty() && (node->op == ops::kLoop || node->op == ops::kScan);
    if (is_loop) {
      Graph* body = node->subgraph("body");
      std::vector<std::unique_ptr<Node>> keep;
      for (auto& inner : body->nodes) {
        bool invariant = IsPure(*inner);
        for (const Value* v : inner->inputs) {
          if (v != nullptr && v->graph != nullptr && body->Contains(v->graph)) invariant = false;
        }
        if (invariant) {
          inner->graph = &g;
          for (Value* v : inner->outputs) {
            if (v) v->graph = &g;
          }
          out.push_back(std::move(inner));
        } else {
          keep.push_back(std::move(inner));
        }
      }
      body->nodes = std::move(keep);
    }
    out.push_back(std::move(node));
  }
  g.nodes = std::move(out);
}

}  // namespace

void ForEachNode(Module& m, const std::function<void(Node&)>& fn) {
  for (Function& f : m.functions()) {
    ForEachGraph(*f.graph, [&](Graph& g) {
      for (auto& n : g.nodes) fn(*n);
    });
  }
}

void ReplaceUses(Graph& graph, Value* from, Value* to) {
  ForEachGraph(graph, [&](Graph& g) {
    for (auto& n : g.nodes) {
      for (Value*& v : n->inputs) {
        if (v == from) v = to;
      }
    }
    for (Value*& v : g.outputs) {
      if (v == from) v = to;
    }
  });
}

absl::Status FoldConstants(Module& m, int64_t max_elements, bool keep_quantized_weights) {
  for (Function& f : m.functions()) {
    DYNVM_RETURN_IF_ERROR(FoldGraph(m, *f.graph, max_elements, keep_quantized_weights));
  }
  return absl::OkStatus();
}

void EliminateDeadCode(Module& m) {
  for (Function& f : m.functions()) {
    while (true) {
      absl::flat_hash_map<const Value*, int> uses;
      CollectUses(*f.graph, uses);
      bool removed = false;
      ForEachGraph(*f.graph, [&](Graph& g) {
        absl::flat_hash_set<const Node*> dead;
        for (auto& n : g.nodes) {
          if (!Removable(*n)) continue;
          bool used = false;
          for (const Value* v : n->outputs) {
            if (v && uses.contains(v)) used = true;
          }
          if (!used) dead.insert(n.get());
        }
        if (!dead.empty()) removed = true;
        RemoveNodes(g, dead);
      });
      if (!removed) break;
    }
  }
}

void EliminateCommonSubexpressions(Module& m) {
  for (Function& f : m.functions()) CseGraph(*f.graph, {});
}

void HoistLoopInvariants(Module& m) {
  for (Function& f : m.functions()) HoistGraph(*f.graph);
}

namespace {

// The function input `m` comes from through shape-preserving single-element ops, or null.
const Value* ScalarInputBehind(const Value* m) {
  while (m != nullptr && m->producer != nullptr) {
    const Node& p = *m->producer;
    const bool passes = p.domain.empty() &&
                        (p.op == ops::kCast || p.op == ops::kIdentity || p.op == ops::kSqueeze ||
                         p.op == ops::kUnsqueeze || p.op == ops::kReshape);
    // `n - c` or `n + c` of a constant c (a decode loop's max_new_tokens - 1).
    const bool offset = p.domain.empty() && (p.op == ops::kSub || p.op == ops::kAdd) &&
                        p.inputs.size() == 2 && p.inputs[1] != nullptr && p.inputs[1]->constant;
    if ((!passes && !offset) || p.inputs.empty()) return nullptr;
    m = p.inputs[0];
  }
  return m;
}

}  // namespace

int BindScalarInputs(Module& m) {
  int bound = 0;
  for (Function& f : m.functions()) {
    Graph& g = *f.graph;
    absl::flat_hash_set<std::string> dim_names;
    for (const Value* in : g.inputs) {
      if (!in->shape) continue;
      for (Dim d : *in->shape) {
        if (SymbolicContext::IsSymbol(d)) dim_names.insert(d->name);
      }
    }
    absl::flat_hash_set<const Value*> trip_inputs;
    ForEachGraph(g, [&](Graph& sub) {
      for (auto& n : sub.nodes) {
        if (!n->domain.empty() || n->op != ops::kLoop || n->inputs.empty()) continue;
        const Value* src = ScalarInputBehind(n->inputs[0]);
        if (src != nullptr && src->producer == nullptr && src->graph == &g) trip_inputs.insert(src);
      }
    });
    for (Value* in : g.inputs) {
      if (!trip_inputs.contains(in) || in->content || in->constant || in->name.empty() ||
          !IsInteger(in->dtype) || !in->shape || dim_names.contains(in->name)) {
        continue;
      }
      bool one = true;
      for (Dim d : *in->shape) one &= SymbolicContext::AsConst(d) == 1;
      if (!one) continue;
      in->content = std::vector<Dim>{m.sym().Symbol(in->name)};
      ++bound;
    }
  }
  return bound;
}

}  // namespace dynvm::compiler
