#include "compiler/memory_plan.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "common/status_macros.h"
#include "compiler/ops/names.h"
#include "compiler/ops/op_def.h"

namespace dynvm::compiler {

bool IsOnnx(const Node& n, absl::string_view op) { return n.domain.empty() && n.op == op; }

bool IsLazyOp(const Node& n) {
  if (!n.domain.empty() || !HasTrait(n, kShapeArith)) return false;
  bool any = false;
  for (const Value* v : n.outputs) {
    if (v == nullptr) continue;
    if (!v->content || v->dynamic || !v->shape || v->shape->size() > 1 || !IsInteger(v->dtype))
      return false;
    any = true;
  }
  return any;
}

bool IsContainer(const Value* v) { return v != nullptr && v->kind != ObjectKind::kTensor; }

bool IsContainerOp(const Node& n) {
  if (!n.domain.empty()) return false;
  // Identity passes whatever it is given: a container op when that is a container.
  if (n.op == ops::kIdentity) return !n.inputs.empty() && IsContainer(n.inputs[0]);
  return HasTrait(n, kContainer);
}

bool HasTensorResult(const Node& n) {
  return n.op == ops::kSequenceLength || n.op == ops::kOptionalHasElement;
}

bool IsViewOp(const Node& n) { return n.domain.empty() && HasTrait(n, kView); }

const ValuePlan& MemoryPlan::of(const Value* v) const {
  static const ValuePlan kNone;
  auto it = values_.find(v);
  return it == values_.end() ? kNone : it->second;
}

const Value* MemoryPlan::Root(const Value* v) const {
  while (true) {
    auto it = values_.find(v);
    if (it == values_.end() || it->second.store != Store::kAlias) return v;
    v = it->second.alias_of;
  }
}

const std::vector<Use>& MemoryPlan::UsesOf(const Value* v) const {
  static const std::vector<Use> kNone;
  auto it = uses_.find(v);
  return it == uses_.end() ? kNone : it->second;
}

const Value* MemoryPlan::InPlacePresentOf(const Value* present) const {
  auto it = in_place_present_.find(present);
  return it == in_place_present_.end() ? nullptr : it->second;
}

// The input index of the past an attention operator's present output `out` (1: keys, 2:
// values) extends, or -1: GroupQueryAttention's past_key/past_value are inputs 3/4,
// MultiHeadAttention's 6/7, ONNX Attention 23's 4/5 (all [B, heads, P, H] -> [B, heads, T, H]).
static int PastInputOf(const Node& n, size_t out) {
  if (out != 1 && out != 2) return -1;
  const int k = static_cast<int>(out) - 1;
  if (n.domain == ops::kMsftDomain && n.op == "GroupQueryAttention") return 3 + k;
  if (n.domain == ops::kMsftDomain && n.op == "MultiHeadAttention") return 6 + k;
  if (IsOnnx(n, ops::kAttention)) return 4 + k;
  return -1;
}

const std::vector<bool>& MemoryPlan::GrowableCarried(const Node* loop) const {
  static const std::vector<bool> kNone;
  auto it = growable_carried_.find(loop);
  return it == growable_carried_.end() ? kNone : it->second;
}

const Value* MemoryPlan::DoubleRootOf(const Value* body_output) const {
  auto it = double_root_of_.find(body_output);
  return it == double_root_of_.end() ? nullptr : it->second;
}

bool MemoryPlan::NeedsTensor(const Value* v) const {
  auto it = uses_.find(v);
  if (it == uses_.end()) return false;
  for (const auto& [node, graph] : it->second) {
    if (node == nullptr) return true;  // a graph output
    if (IsLazyOp(*node)) continue;
    if (IsOnnx(*node, ops::kLoop) && !node->inputs.empty() && node->inputs[0] == v &&
        std::count(node->inputs.begin(), node->inputs.end(), v) == 1) {
      continue;  // the trip count is read from the content (and is no other input)
    }
    if (IsViewOp(*node) && node->inputs.size() > 1 && node->inputs[1] == v &&
        node->inputs[0] != v && node->outputs[0] && node->outputs[0]->shape &&
        !node->outputs[0]->dynamic && of(node->outputs[0]).store == Store::kAlias) {
      continue;  // a reshape target: the dims come from the content
    }
    return true;
  }
  return false;
}

// Builds a MemoryPlan: each step below is one named pass over the function's graph.
class Planner {
 public:
  Planner(Graph& g, SymbolicContext& sym, const CompileOptions& opts, MemoryPlan& plan)
      : g_(g),
        sym_(sym),
        opts_(opts),
        plan_(plan),
        info_(plan.values_),
        uses_(plan.uses_),
        allocs_(plan.slots_) {}

  absl::Status Run() {
    for (const Value* in : g_.inputs) info_[in].store = Store::kParam;
    Number(g_);
    CollectUses(g_);
    DYNVM_RETURN_IF_ERROR(Classify(g_));
    PoolFunctionOutputs();
    PoolContainerElements(g_);
    MarkMaterialized();
    PoolCarriedIfResults(g_);
    DoubleBufferCarried(g_);
    Liveness();
    Place();
    return absl::OkStatus();
  }

 private:
  // Numbers every node (two clock ticks: its start, and its end after its regions).
  void Number(Graph& g);
  void CollectUses(Graph& g);
  // The storage class of every value.
  absl::Status Classify(Graph& g);
  // Decides, for each loop-carried value, whether it grows by in-place appends.
  void PlanLoop(Node& loop);
  bool PlanInPlacePresent(const Node& p, const Value* in, const Value* out);
  void PoolFunctionOutputs();
  void PoolContainerElements(Graph& g);
  void MarkMaterialized();
  // The slots that may hold v's data: its root's, or for a register set elsewhere (an If
  // result, a Loop result, a body's carried input) those of every value it may be.
  void StorageSlots(const Value* v, absl::flat_hash_set<const Value*>& seen,
                    std::vector<int>& slots) const;
  std::vector<int> StorageSlots(const Value* v) const;
  std::vector<const Value*> RegisterSources(const Value* root) const {
    return plan_.RegisterSources(root);
  }
  void PoolCarried(const Value* v, Graph* body, absl::flat_hash_set<const Value*>& seen);
  bool MayBeStrided(const Value* v) const { return plan_.MayBeStrided(v); }
  void PoolCarriedIfResults(Graph& g);
  void DoubleBufferCarried(Graph& g);
  // Live ranges of the arena slots.
  void Liveness();
  void Definitions(Graph& g, int64_t entry);
  void CoverRegionResults(Graph& g);
  // Values whose storage is a register set elsewhere keep every slot that may hold their data.
  void CoverRegisterValues(const std::vector<const Value*>& in_order);
  // Offsets: greedy, largest first.
  void Place();
  int NewAlloc(const Value* v);
  absl::StatusOr<int64_t> ArenaBytes(const Value* v) const;
  const Value* Root(const Value* v) const { return plan_.Root(v); }

  Graph& g_;
  SymbolicContext& sym_;
  const CompileOptions& opts_;
  MemoryPlan& plan_;
  absl::flat_hash_map<const Value*, ValuePlan>& info_;
  absl::flat_hash_map<const Value*, std::vector<Use>>& uses_;
  std::vector<ArenaSlot>& allocs_;
  int64_t clock_ = 0;
  absl::flat_hash_map<const Node*, std::pair<int64_t, int64_t>> pos_;
};

// Tensors kept in a sequence or optional outlive their arena slot: pool storage.
void Planner::PoolContainerElements(Graph& g) {
  for (auto& n : g.nodes) {
    for (auto& [name, sub] : n->subgraphs) PoolContainerElements(*sub);
    if (!n->domain.empty()) continue;
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const bool held = n->op == ops::kSequenceConstruct ||
                        (n->op == ops::kSequenceInsert && i == 1) ||
                        (n->op == ops::kOptional && i == 0);
      if (!held || n->inputs[i] == nullptr || IsContainer(n->inputs[i])) continue;
      ValuePlan& info = info_[Root(n->inputs[i])];
      if (info.store == Store::kArena) info.store = Store::kPool;
    }
  }
}

std::vector<const Value*> MemoryPlan::RegisterSources(const Value* root) const {
  std::vector<const Value*> out;
  auto it = values_.find(root);
  if (it == values_.end() || it->second.store != Store::kRegister) return out;
  const Node* p = root->producer;
  if (p != nullptr && IsOnnx(*p, ops::kIf)) {
    const size_t k = std::find(p->outputs.begin(), p->outputs.end(), root) - p->outputs.begin();
    for (const char* br : {"then_branch", "else_branch"}) {
      const Graph* branch = p->subgraph(br);
      if (branch != nullptr && k < branch->outputs.size() && branch->outputs[k] != nullptr) {
        out.push_back(branch->outputs[k]);
      }
    }
    return out;
  }
  // A Loop result and the body's carried input are the initial value or the body's value.
  const Node* loop = p;
  size_t k = 0;
  if (p != nullptr && IsOnnx(*p, ops::kLoop)) {
    k = std::find(p->outputs.begin(), p->outputs.end(), root) - p->outputs.begin();
  } else if (p == nullptr && root->graph != nullptr && root->graph->owner != nullptr &&
             IsOnnx(*root->graph->owner, ops::kLoop) &&
             root->graph == root->graph->owner->subgraph("body")) {
    loop = root->graph->owner;
    const std::vector<Value*>& ins = root->graph->inputs;
    const size_t j = std::find(ins.begin(), ins.end(), root) - ins.begin();
    if (j < 2 || j >= ins.size()) return out;
    k = j - 2;
  } else {
    return out;
  }
  const size_t nc = loop->inputs.size() - 2;
  auto grow = growable_carried_.find(loop);
  if (k >= nc || (grow != growable_carried_.end() && grow->second[k])) return out;
  if (loop->inputs[2 + k] != nullptr) out.push_back(loop->inputs[2 + k]);
  const Value* body_out = loop->subgraph("body")->outputs[1 + k];
  if (body_out != nullptr) out.push_back(body_out);
  return out;
}

void Planner::StorageSlots(const Value* v, absl::flat_hash_set<const Value*>& seen,
                           std::vector<int>& slots) const {
  const Value* root = Root(v);
  if (!seen.insert(root).second) return;
  auto it = info_.find(root);
  if (it == info_.end()) return;
  slots.insert(slots.end(), it->second.slots.begin(), it->second.slots.end());
  for (const Value* source : RegisterSources(root)) StorageSlots(source, seen, slots);
}

std::vector<int> Planner::StorageSlots(const Value* v) const {
  absl::flat_hash_set<const Value*> seen;
  std::vector<int> slots;
  StorageSlots(v, seen, slots);
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  return slots;
}

bool MemoryPlan::MayBeStrided(const Value* v) const {
  absl::flat_hash_set<const Value*> seen;
  return MayBeStrided(v, seen);
}

bool MemoryPlan::MayBeStrided(const Value* v, absl::flat_hash_set<const Value*>& seen) const {
  const Value* root = Root(v);
  if (!seen.insert(root).second) return false;
  const Node* p = root->producer;
  // The Concat appending onto a carried value (its output is the carried register), and the
  // Loop result of such a carried value.
  const Node* concat = nullptr;
  if (p != nullptr && append_nodes_.contains(p)) {
    concat = p;
  } else if (p != nullptr && IsOnnx(*p, ops::kLoop)) {
    const size_t k = std::find(p->outputs.begin(), p->outputs.end(), root) - p->outputs.begin();
    auto grow = growable_carried_.find(p);
    if (grow != growable_carried_.end() && k < grow->second.size() && grow->second[k]) {
      concat = p->subgraph("body")->outputs[1 + k]->producer;
    }
  }
  if (in_place_present_.contains(root)) return true;  // grown along axis 2
  if (concat != nullptr && !IsOnnx(*concat, ops::kConcat)) return true;
  if (concat != nullptr) {
    const int64_t axis = concat->attr("axis")->i;
    return axis != 0 && axis != -concat->inputs[0]->rank();
  }
  for (const Value* source : RegisterSources(root)) {
    if (MayBeStrided(source, seen)) return true;
  }
  return false;
}

// A loop-carried value that is a register set elsewhere in the body (an If result, the result
// of a nested Loop, a nested loop's carried input) is live across the back edge, into the
// next iteration, until the carried input's last use; which value it is is known only at run
// time (which branch ran, whether the nested loop ran), so alternating arena slots per
// iteration would not be safe (a branch that passes the carried value through skips a write;
// a nested loop's own double buffer starts over at its first slot every time it runs). The
// body's values it may be get pool storage of their own instead: a fresh block per iteration
// from the pool's free lists, freed when the carried register moves on.
void Planner::PoolCarried(const Value* v, Graph* body, absl::flat_hash_set<const Value*>& seen) {
  const Value* root = Root(v);
  if (root->graph == nullptr || !body->Contains(root->graph) || !seen.insert(root).second) return;
  ValuePlan& ri = info_[root];
  if (ri.store == Store::kArena) ri.store = Store::kPool;
  for (const Value* source : RegisterSources(root)) PoolCarried(source, body, seen);
}

// Applies PoolCarried to every loop-carried value that is a register set in the body.
void Planner::PoolCarriedIfResults(Graph& g) {
  for (auto& n : g.nodes) {
    for (auto& [name, sub] : n->subgraphs) PoolCarriedIfResults(*sub);
    if (!IsOnnx(*n, ops::kLoop)) continue;
    Graph* body = n->subgraph("body");
    const size_t nc = n->inputs.size() - 2;
    for (size_t i = 0; i < nc; ++i) {
      if (plan_.growable_carried_[n.get()][i]) continue;
      const Value* root = Root(body->outputs[1 + i]);
      if (root == body->inputs[2 + i] || info_[root].store != Store::kRegister) continue;
      absl::flat_hash_set<const Value*> seen;
      PoolCarried(root, body, seen);
    }
  }
}

// Loop-carried values computed into the arena are double-buffered: two slots.
void Planner::DoubleBufferCarried(Graph& g) {
  for (auto& n : g.nodes) {
    for (auto& [name, sub] : n->subgraphs) DoubleBufferCarried(*sub);
    if (!IsOnnx(*n, ops::kLoop)) continue;
    Graph* body = n->subgraph("body");
    const size_t nc = n->inputs.size() - 2;
    for (size_t i = 0; i < nc; ++i) {
      if (plan_.growable_carried_[n.get()][i]) continue;
      const Value* out = body->outputs[1 + i];
      const Value* root = Root(out);
      if (root->graph == nullptr || !body->Contains(root->graph)) continue;
      ValuePlan& ri = info_[root];
      if (ri.store != Store::kArena || root->producer == nullptr) continue;
      if (ri.slots.empty()) {
        ri.slots.push_back(NewAlloc(root));
        ri.slots.push_back(NewAlloc(root));
      }
      plan_.double_root_of_[out] = root;
    }
  }
}

// Function outputs live in their own pool storage.
void Planner::PoolFunctionOutputs() {
  for (const Value* out : g_.outputs) {
    ValuePlan& info = info_[Root(out)];
    if (info.store == Store::kArena) info.store = Store::kPool;
    plan_.function_outputs_.insert(Root(out));
  }
}

// Lazy values read as tensors somewhere are materialized where first needed.
void Planner::MarkMaterialized() {
  for (auto& [v, info] : info_) {
    if (info.store == Store::kLazy) info.materialize = plan_.NeedsTensor(v);
  }
}

void Planner::Number(Graph& g) {
  for (auto& n : g.nodes) {
    const int64_t start = ++clock_;
    for (auto& [name, sub] : n->subgraphs) Number(*sub);
    pos_[n.get()] = {start, ++clock_};
  }
}

void Planner::CollectUses(Graph& g) {
  for (auto& n : g.nodes) {
    for (const Value* v : n->inputs) {
      if (v) uses_[v].push_back({n.get(), &g});
    }
    for (auto& [name, sub] : n->subgraphs) CollectUses(*sub);
  }
  for (const Value* v : g.outputs) {
    if (v) uses_[v].push_back({nullptr, &g});
  }
}

absl::StatusOr<int64_t> Planner::ArenaBytes(const Value* v) const {
  if (!v->shape || v->dynamic) return absl::UnavailableError("dynamic");
  Dim bytes = sym_.Const(DTypeSize(v->dtype));
  for (Dim d : *v->shape) bytes = sym_.Mul(bytes, d);
  std::optional<int64_t> ub = sym_.UpperBound(bytes);
  if (!ub || *ub > opts_.arena_value_limit) return absl::UnavailableError("unbounded");
  return (std::max<int64_t>(*ub, 1) + 63) / 64 * 64;
}

int Planner::NewAlloc(const Value* v) {
  absl::StatusOr<int64_t> bytes = ArenaBytes(v);
  ArenaSlot a;
  a.size = bytes.ok() ? *bytes : 64;
  allocs_.push_back(a);
  return static_cast<int>(allocs_.size() - 1);
}

absl::Status Planner::Classify(Graph& g) {
  for (auto& node : g.nodes) {
    Node& n = *node;
    if (IsOnnx(n, ops::kLoop)) PlanLoop(n);
    for (auto& [name, sub] : n.subgraphs) {
      for (const Value* in : sub->inputs) info_[in].store = Store::kRegister;
      if (IsOnnx(n, ops::kLoop)) {
        // The iteration number is a scalar made a tensor only on demand; the condition is
        // written into a small arena slot when the body reads it.
        if (sub->inputs[0]->content) info_[sub->inputs[0]].store = Store::kLazy;
        if (uses_.contains(sub->inputs[1])) info_[sub->inputs[1]].store = Store::kArena;
      }
      DYNVM_RETURN_IF_ERROR(Classify(*sub));
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const Value* v = n.outputs[i];
      if (v == nullptr) continue;
      ValuePlan& info = info_[v];
      if (v->constant) {
        info.store = Store::kConst;
        continue;
      }
      if (!n.subgraphs.empty()) {
        info.store = Store::kRegister;  // If results, Loop/Scan outputs
        continue;
      }
      if (IsContainerOp(n) && !HasTensorResult(n)) {
        info.store = Store::kRegister;  // sequences, optionals, and tensors taken out of them
        continue;
      }
      if (plan_.append_nodes_.contains(&n) || plan_.in_place_present_.contains(v)) {
        info.store = Store::kRegister;
        continue;
      }
      if (IsLazyOp(n)) {
        info.store = Store::kLazy;
        continue;
      }
      // A reshape needs a contiguous input: one that may be a growable storage grown along
      // another axis than the first (strided within its capacity) is reshaped by its kernel
      // (a copy). Identity passes any layout on, and so do Unsqueeze and Squeeze: they only
      // insert or remove extent-1 dimensions, which the VM's reshape does on strided tensors
      // too (a KV cache viewed with a group axis is read in place, not copied per step).
      if (IsViewOp(n) && i == 0 && !v->dynamic && v->shape && n.inputs[0] != nullptr &&
          (n.op == ops::kIdentity || n.op == ops::kDropout || n.op == ops::kUnsqueeze ||
           n.op == ops::kSqueeze || !MayBeStrided(n.inputs[0]))) {
        info.store = Store::kAlias;
        info.alias_of = n.inputs[0];
        continue;
      }
      // A string kernel allocates its output: the bytes live with it (docs/strings.md).
      if (v->dynamic || !v->shape || v->dtype == DType::kString) {
        info.store = Store::kDynamic;
        continue;
      }
      if (ArenaBytes(v).ok()) {
        info.store = Store::kArena;
      } else {
        info.store = Store::kPool;
      }
    }
  }
  return absl::OkStatus();
}

// Decides, for each loop-carried value, how it is stored across iterations.
void Planner::PlanLoop(Node& loop) {
  Graph* body = loop.subgraph("body");
  const size_t nc = loop.inputs.size() - 2;
  std::vector<bool>& grow = plan_.growable_carried_[&loop];
  grow.assign(nc, false);
  for (size_t i = 0; i < nc; ++i) {
    const Value* in = body->inputs[2 + i];
    const Value* out = body->outputs[1 + i];
    if (out == nullptr || out->producer == nullptr || out->graph != body) continue;
    const Node& p = *out->producer;
    if (PlanInPlacePresent(p, in, out)) {
      grow[i] = true;
      continue;
    }
    const AttrValue* axis = p.attr("axis");
    if (!IsOnnx(p, ops::kConcat) || p.inputs.size() != 2 || p.inputs[0] != in ||
        p.inputs[1] == in || axis == nullptr || in->rank() <= 0 || p.inputs[1] == nullptr ||
        p.inputs[1]->rank() != in->rank()) {
      continue;
    }
    // The old value must not be read as a tensor after it has been extended in place.
    bool only_concat = true;
    auto it = uses_.find(in);
    if (it != uses_.end()) {
      for (const auto& [node, graph] : it->second) {
        if (node != &p && !(node != nullptr && IsLazyOp(*node))) only_concat = false;
      }
    }
    if (!only_concat) continue;
    grow[i] = true;
    plan_.append_nodes_.insert(&p);
  }
}

// A carried past read (as a tensor) only by the attention node whose present output is the
// carried value's next value: the present is the past's growable storage extended in place.
// The present must have a known shape (GroupQueryAttention's length max(total, P) is a run-time
// size when total_sequence_length's content is unknown; the kernel allocates it then).
bool Planner::PlanInPlacePresent(const Node& p, const Value* in, const Value* out) {
  const std::vector<std::string>& off = opts_.disabled_rewrites;
  if (std::find(off.begin(), off.end(), kPresentInPlaceSwitch) != off.end()) return false;
  const size_t o = std::find(p.outputs.begin(), p.outputs.end(), out) - p.outputs.begin();
  const int past = PastInputOf(p, o);
  if (past < 0 || static_cast<size_t>(past) >= p.inputs.size() || p.inputs[past] != in ||
      in->rank() != 4 || in->dtype != DType::kF32 || out->dynamic || !out->shape ||
      out->shape->size() != 4) {
    return false;
  }
  auto it = uses_.find(in);
  if (it != uses_.end()) {
    for (const auto& [node, graph] : it->second) {
      if (node != &p && !(node != nullptr && IsLazyOp(*node))) return false;
    }
  }
  // The node reads the past once, as that one input.
  if (std::count(p.inputs.begin(), p.inputs.end(), in) != 1) return false;
  plan_.in_place_present_[out] = in;
  return true;
}

void Planner::Liveness() {
  Definitions(g_, 0);
  // Uses, extended to the end of every loop between the use and the definition.
  const int64_t function_end = clock_ + 1;
  for (const auto& [v, list] : uses_) {
    ValuePlan& info = info_[v];
    for (const auto& [node, graph] : list) {
      int64_t t =
          node ? pos_[node].first : (graph->owner ? pos_[graph->owner].second : function_end);
      for (Graph* r = graph; r != nullptr && r != v->graph; r = r->parent) {
        if (r->owner && (IsOnnx(*r->owner, ops::kLoop) || IsOnnx(*r->owner, ops::kScan))) {
          t = std::max(t, pos_[r->owner].second);
        }
      }
      info.last_use = std::max(info.last_use, t);
    }
  }
  // Allocations: cover every value whose data they hold. Made in value order (not the hash
  // map's), so the placement, and the file, are the same on every compile.
  std::vector<const Value*> in_order;
  in_order.reserve(info_.size());
  for (auto& [v, info] : info_) in_order.push_back(v);
  std::sort(in_order.begin(), in_order.end(),
            [](const Value* a, const Value* b) { return a->id < b->id; });
  for (const Value* v : in_order) {
    const Value* root = Root(v);
    ValuePlan& ri = info_[root];
    if (ri.store == Store::kArena || (ri.store == Store::kLazy && ri.materialize)) {
      if (ri.slots.empty()) ri.slots.push_back(NewAlloc(root));
    }
  }
  for (auto& [v, info] : info_) {
    const Value* root = Root(v);
    for (int a : info_[root].slots) allocs_[a].Cover(info.def, std::max(info.last_use, info.def));
  }
  CoverRegionResults(g_);
  CoverRegisterValues(in_order);
}

// A value whose root is a register set elsewhere (an If or Loop result, a body's carried input,
// or a view of one) holds the data of the values it may be until its own last use: their slots
// stay live that long.
void Planner::CoverRegisterValues(const std::vector<const Value*>& in_order) {
  for (const Value* v : in_order) {
    const ValuePlan& info = info_[v];
    const Value* root = Root(v);
    if (info_[root].store != Store::kRegister || info.last_use < 0) continue;
    for (int a : StorageSlots(root)) {
      if (allocs_[a].end >= allocs_[a].start) allocs_[a].Cover(allocs_[a].start, info.last_use);
    }
  }
}

// Definition points: a region's inputs at its owner's start, node outputs at their node's.
void Planner::Definitions(Graph& g, int64_t entry) {
  for (const Value* v : g.inputs) info_[v].def = entry;
  for (auto& n : g.nodes) {
    const int64_t start = pos_[n.get()].first;
    for (auto& [name, sub] : n->subgraphs) Definitions(*sub, start);
    // Outputs are allocated before the node runs, while its inputs are still live: a
    // kernel never writes over its own inputs.
    for (const Value* v : n->outputs) {
      if (v) info_[v].def = start;
    }
  }
}

// Results of regions keep the data of their branch / body values alive, for as long as
// anything holds that data: the result itself, every view of it (an Identity, a Reshape),
// and the result of an enclosing or later If or Loop that passes it on. An If's result is a
// register (no slot of its own) whose data is one of its branches' values; so is a Loop's.
// The ends are propagated to a fixed point (a chain of Ifs passing one value along), then
// every slot is covered to the end of the last holder of its data.
void Planner::CoverRegionResults(Graph& g) {
  absl::flat_hash_map<const Value*, int64_t> held;  // root -> end of its last holder
  for (const auto& [v, info] : info_) {
    int64_t& e = held[Root(v)];
    e = std::max(e, std::max(info.last_use, info.def));
  }
  auto end_of = [&](const Value* v) {
    auto it = held.find(Root(v));
    return it == held.end() ? int64_t{-1} : it->second;
  };
  auto extend = [&](const Value* v, int64_t end) {
    if (v == nullptr) return false;
    int64_t& e = held[Root(v)];
    if (e >= end) return false;
    e = end;
    return true;
  };
  std::vector<const Node*> regions;
  std::vector<Graph*> todo = {&g};
  while (!todo.empty()) {
    Graph* cur = todo.back();
    todo.pop_back();
    for (auto& n : cur->nodes) {
      for (auto& [name, sub] : n->subgraphs) todo.push_back(sub.get());
      if (IsOnnx(*n, ops::kIf) || IsOnnx(*n, ops::kLoop)) regions.push_back(n.get());
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (const Node* n : regions) {
      const int64_t node_end = pos_[n].second;
      if (IsOnnx(*n, ops::kIf)) {
        for (size_t i = 0; i < n->outputs.size(); ++i) {
          if (!n->outputs[i]) continue;
          const int64_t end = std::max(end_of(n->outputs[i]), node_end);
          for (const char* br : {"then_branch", "else_branch"}) {
            Graph* branch = n->subgraph(br);
            if (i < branch->outputs.size()) changed |= extend(branch->outputs[i], end);
          }
        }
        continue;
      }
      // A Loop: the initial value is read by the first iteration and is the result of none.
      Graph* body = n->subgraph("body");
      const size_t nc = n->inputs.size() - 2;
      for (size_t i = 0; i < nc; ++i) {
        const Value* result = i < n->outputs.size() ? n->outputs[i] : nullptr;
        const int64_t end = result ? std::max(end_of(result), node_end) : node_end;
        changed |= extend(n->inputs[2 + i], end);
        changed |= extend(body->outputs[1 + i], end);
      }
    }
  }
  for (const Node* n : regions) {
    if (!IsOnnx(*n, ops::kLoop)) continue;
    const int64_t start = pos_[n].first;
    const size_t nc = n->inputs.size() - 2;
    for (size_t i = 0; i < nc; ++i) {
      for (const Value* v : {n->inputs[2 + i], n->subgraph("body")->outputs[1 + i]}) {
        if (v == nullptr) continue;
        for (int a : info_[Root(v)].slots) allocs_[a].Cover(start, end_of(v));
      }
    }
  }
  for (const auto& [root, end] : held) {
    for (int a : info_[root].slots) allocs_[a].Cover(allocs_[a].start, end);
  }
}

void Planner::Place() {
  std::vector<int> order(allocs_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    // Largest first; equal sizes by start time, which colours an interval graph optimally.
    if (allocs_[a].size != allocs_[b].size) return allocs_[a].size > allocs_[b].size;
    return allocs_[a].start < allocs_[b].start;
  });
  std::vector<int> placed;
  for (int idx : order) {
    ArenaSlot& a = allocs_[idx];
    if (a.end < a.start) a.start = a.end = 0;
    // Candidate offsets: 0 and the end of every placed allocation that overlaps in time.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (int p : placed) {
      const ArenaSlot& o = allocs_[p];
      if (o.start <= a.end && a.start <= o.end) busy.emplace_back(o.offset, o.offset + o.size);
    }
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + a.size <= lo) break;
      offset = std::max(offset, hi);
    }
    a.offset = offset;
    plan_.arena_bytes_ = std::max(plan_.arena_bytes_, offset + a.size);
    placed.push_back(idx);
  }
  // Largest live set.
  std::vector<std::pair<int64_t, int64_t>> events;
  for (const ArenaSlot& a : allocs_) {
    events.emplace_back(a.start, a.size);
    events.emplace_back(a.end + 1, -a.size);
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0;
  for (const auto& [t, d] : events) {
    live += d;
    plan_.largest_live_ = std::max(plan_.largest_live_, live);
  }
}

absl::StatusOr<MemoryPlan> MemoryPlan::Make(Graph& g, SymbolicContext& sym,
                                            const CompileOptions& options) {
  MemoryPlan plan;
  Planner planner(g, sym, options, plan);
  DYNVM_RETURN_IF_ERROR(planner.Run());
  return plan;
}

}  // namespace dynvm::compiler
