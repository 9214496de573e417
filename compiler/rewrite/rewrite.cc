#include "compiler/rewrite/rewrite.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/passes.h"
#include "kernels/registry.h"

namespace dynvm::compiler::rewrite {

Value* Emitter::Op(const std::string& op, std::vector<Value*> inputs, Attrs attrs,
                   const std::string& domain) {
  Value* out =
      AppendNode(m_, g_, nodes_, op, std::move(inputs), std::move(attrs), root_.name, DType::kF32);
  nodes_.back()->domain = domain;
  return out;
}

Value* Emitter::Constant(Tensor t) { return m_.NewConstant(std::move(t)); }

namespace {

struct Sweep {
  Module& module;
  const absl::flat_hash_map<std::string, std::vector<const Rule*>>& by_op;
  UseCounts uses;
  absl::flat_hash_set<const Node*> consumed;  // matched by a rewrite this sweep
  RewriteCounts& counts;
  Device device = Device::kCPU;
  int fired = 0;
};

// Off the CPU: false when every matched node has a kernel on the device and some node of the
// replacement has none (the rewrite would move that work to the CPU).
bool KeepsDevice(const Sweep& s, const Match& m, const std::vector<std::unique_ptr<Node>>& added) {
  if (s.device == Device::kCPU) return true;
  const KernelRegistry& registry = KernelRegistry::Global();
  for (const Node* n : m.nodes) {
    if (!registry.HasOp(n->domain, n->op, s.device)) return true;
  }
  for (const auto& n : added) {
    if (!registry.HasOp(n->domain, n->op, s.device)) return false;
  }
  return true;
}

// Every matched node but the root is in the root's region, and each of its outputs is read
// only by matched nodes.
bool Closed(const Match& m, const UseCounts& uses, const Graph& g) {
  absl::flat_hash_map<const Value*, int> inside;
  for (const Node* n : m.nodes) {
    if (n->graph != &g) return false;
    for (const Value* v : n->inputs) {
      if (v != nullptr) ++inside[v];
    }
  }
  for (size_t i = 1; i < m.nodes.size(); ++i) {
    for (const Value* v : m.nodes[i]->outputs) {
      if (v == nullptr) continue;
      auto it = inside.find(v);
      if (uses(v) != (it == inside.end() ? 0 : it->second)) return false;
    }
  }
  return true;
}

// Tries the rules at `node`; on success returns the nodes replacing it.
std::vector<std::unique_ptr<Node>> TryRules(Sweep& s, Graph& g, Node& node) {
  if (node.outputs.size() != 1 || node.outputs[0] == nullptr) return {};
  auto it = s.by_op.find(node.domain.empty() ? node.op : node.domain + "::" + node.op);
  if (it == s.by_op.end()) return {};
  Value* root = node.outputs[0];
  for (const Rule* rule : it->second) {
    Match m;
    if (!rule->pattern.Match(root, s.uses, m) || m.nodes.empty() || m.nodes[0] != &node) continue;
    bool fresh = true;
    for (const Node* n : m.nodes) fresh &= !s.consumed.contains(n);
    if (!fresh || !Closed(m, s.uses, g)) continue;
    Emitter e(s.module, g, node);
    Value* result = rule->rewrite(e, m);
    if (result == nullptr) continue;
    std::vector<std::unique_ptr<Node>>& added = e.nodes();
    if (!KeepsDevice(s, m, added)) continue;
    // The replacement's last node must produce `result` and nothing else may read it; else an
    // Identity carries it.
    bool last_produces = !added.empty() && added.back()->outputs[0] == result;
    for (const auto& n : added) {
      for (const Value* v : n->inputs) last_produces &= v != result;
    }
    if (!last_produces) e.Op("Identity", {result});
    Node& last = *added.back();
    last.outputs[0] = root;
    root->producer = &last;
    root->output_index = 0;
    for (const auto& n : added) {
      for (const Value* v : n->inputs) {
        if (v != nullptr) s.uses.Add(v);
      }
    }
    for (const Node* n : m.nodes) s.consumed.insert(n);
    ++s.counts[rule->name];
    ++s.fired;
    return std::move(added);
  }
  return {};
}

void SweepGraph(Sweep& s, Graph& g) {
  std::vector<std::unique_ptr<Node>> out;
  out.reserve(g.nodes.size());
  for (auto& node : g.nodes) {
    for (auto& [name, sub] : node->subgraphs) SweepGraph(s, *sub);
    std::vector<std::unique_ptr<Node>> replacement = TryRules(s, g, *node);
    if (replacement.empty()) {
      out.push_back(std::move(node));
      continue;
    }
    for (auto& n : replacement) out.push_back(std::move(n));
    // The root goes; its matched producers are dead now and go with dead code elimination.
  }
  g.nodes = std::move(out);
}

}  // namespace

absl::StatusOr<RewriteCounts> ApplyRules(Module& module, const std::vector<const Rule*>& rules,
                                         Device device) {
  RewriteCounts counts;
  // by_op per phase, the phases in increasing order.
  std::map<int, absl::flat_hash_map<std::string, std::vector<const Rule*>>> phases;
  for (const Rule* r : rules) {
    counts[r->name] = 0;
    for (const std::string& op : r->pattern.RootOps()) phases[r->phase][op].push_back(r);
  }
  for (const auto& [phase, by_op] : phases) {
    for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
      Sweep s{module, by_op, {}, {}, counts, device};
      for (Function& f : module.functions()) s.uses.Count(*f.graph);
      for (Function& f : module.functions()) SweepGraph(s, *f.graph);
      if (s.fired == 0) break;
      EliminateDeadCode(module);
      DYNVM_RETURN_IF_ERROR(InferShapes(module));
    }
  }
  return counts;
}

absl::StatusOr<RewriteCounts> ApplyRewrites(Module& module, const RewriteOptions& options) {
  std::vector<const Rule*> rules;
  absl::flat_hash_set<std::string> disabled(options.disabled.begin(), options.disabled.end());
  for (const Rule& r : AllRules()) {
    const bool off = disabled.erase(r.name) > 0;
    if (!off && !(options.keep_weight_products && r.fuses_weight_products)) rules.push_back(&r);
  }
  if (!disabled.empty()) {
    std::string names;
    for (const Rule& r : AllRules()) absl::StrAppend(&names, names.empty() ? "" : ", ", r.name);
    for (const std::string& n : options.other_switches) absl::StrAppend(&names, ", ", n);
    return absl::InvalidArgumentError(
        absl::StrCat("unknown rewrite rule '", *disabled.begin(), "' (the rules: ", names, ")"));
  }
  return ApplyRules(module, rules, options.device);
}

}  // namespace dynvm::compiler::rewrite
