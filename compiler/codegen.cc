// Memory planning and bytecode emission for one function (docs/compiler.md).
//
// Planning: every value gets a storage class. Values of bounded size share one arena per
// function, placed by liveness (greedy, largest first); values in a loop body reuse their
// slots every iteration; loop-carried values computed into the arena are double-buffered (the
// write offset swaps at the back edge); a Concat onto a loop-carried value becomes an in-place
// append into a growable storage; values of unbounded size get a pool storage sized by scalar
// code; data-dependent values are allocated by their kernel. Function outputs never live in
// the arena.
#include "compiler/codegen.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "isa/instruction.h"
#include "isa/opcodes.h"

namespace dynvm::compiler {
namespace {

using isa::CodeWriter;
using isa::Opcode;

enum class Store : uint8_t {
  kNone,      // not materialized (unused)
  kConst,     // a constant: load_const at function entry
  kParam,     // a function input
  kAlias,     // a view of another value (reshape, identity)
  kArena,     // a slot of the function's arena
  kDouble,    // two arena slots, alternating per iteration (loop-carried)
  kPool,      // its own pool storage, sized at run time
  kDynamic,   // allocated by its kernel
  kLazy,      // a shape computation kept as scalars; materialized on demand
  kRegister,  // defined by a register set elsewhere (loop-carried, If results, growables)
};

struct Alloc {
  int64_t size = 0;
  int64_t start = std::numeric_limits<int64_t>::max();
  int64_t end = -1;
  int64_t offset = -1;
  void Cover(int64_t a, int64_t b) {
    start = std::min(start, a);
    end = std::max(end, b);
  }
};

struct Info {
  Store store = Store::kNone;
  const Value* alias_of = nullptr;
  std::vector<int> allocs;  // arena allocations holding this value's data
  bool materialize = false;
  int64_t def = -1;
  int64_t last_use = -1;
};

bool IsOnnx(const Node& n, absl::string_view op) { return n.domain.empty() && n.op == op; }

bool IsLazyOp(const Node& n) {
  static const absl::flat_hash_set<std::string> kOps = {
      "Shape",   "Size", "Gather", "Concat", "Unsqueeze", "Squeeze",  "Slice",  "Cast",
      "Reshape", "Add",  "Sub",    "Mul",    "Div",       "Identity", "Flatten"};
  if (!n.domain.empty() || !kOps.contains(n.op)) return false;
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

// ONNX sequence and optional operators, lowered to seq_* / opt_* instructions
// (EmitContainerOp); Identity of a sequence or optional is a move.
bool IsContainerOp(const Node& n) {
  static const absl::flat_hash_set<std::string> kOps = {
      "SequenceEmpty", "SequenceConstruct",  "SequenceInsert",     "SequenceErase",
      "SequenceAt",    "SequenceLength",     "ConcatFromSequence", "SplitToSequence",
      "Optional",      "OptionalHasElement", "OptionalGetElement"};
  if (!n.domain.empty()) return false;
  if (n.op == "Identity") return !n.inputs.empty() && IsContainer(n.inputs[0]);
  return kOps.contains(n.op);
}

// Container ops whose output is a plain small tensor, stored like any kernel output.
bool HasTensorResult(const Node& n) {
  return n.op == "SequenceLength" || n.op == "OptionalHasElement";
}

fb::ObjectKind FbKind(ObjectKind k) { return static_cast<fb::ObjectKind>(static_cast<uint8_t>(k)); }

// Ops that only change how a tensor is viewed.
bool IsViewOp(const Node& n) {
  if (!n.domain.empty()) return false;
  if (n.op == "Identity") return true;
  if (n.op == "Dropout") {
    const AttrValue* m = n.attr("training_mode");
    return n.inputs.size() <= 2 && (m == nullptr || m->i == 0) &&
           (n.outputs.size() < 2 || n.outputs[1] == nullptr);
  }
  return n.op == "Reshape" || n.op == "Flatten" || n.op == "Squeeze" || n.op == "Unsqueeze";
}

class FunctionCodegen {
 public:
  FunctionCodegen(Module& m, const Function& f, uint32_t index, ExecutableBuilder& b,
                  const CompileOptions& o)
      : m_(m), sym_(m.sym()), f_(f), g_(*f.graph), index_(index), b_(b), opts_(o) {}

  absl::StatusOr<FunctionReport> Run();

 private:
  // ---- analysis ----
  void Number(Graph& g);
  void CollectUses(Graph& g);
  absl::Status Classify(Graph& g);
  void PlanLoop(Node& loop);
  void Liveness();
  void Place();
  int NewAlloc(const Value* v);
  const Value* Root(const Value* v) const {
    while (true) {
      auto it = info_.find(v);
      if (it == info_.end() || it->second.store != Store::kAlias) return v;
      v = it->second.alias_of;
    }
  }
  absl::StatusOr<int64_t> ArenaBytes(const Value* v) const;
  bool NeedsTensor(const Value* v) const;

  // ---- emission ----
  absl::Status EmitGraph(Graph& g);
  // Per node of `g`: the pool values to release after it (loop bodies only).
  std::vector<std::vector<const Value*>> KillsAfter(Graph& g);
  absl::Status EmitNode(Node& n);
  absl::Status EmitKernel(Node& n);
  absl::Status EmitView(Node& n);
  absl::Status EmitIf(Node& n);
  absl::Status EmitLoop(Node& n);
  absl::Status EmitAppend(Node& n);
  absl::Status EmitStream(Node& n);
  // Sequences and optionals (docs/onnx.md, "Sequences and optionals").
  absl::Status EmitContainerOp(Node& n);
  absl::Status EmitConcatFromSequence(Node& n);
  absl::Status EmitSplitToSequence(Node& n);
  // A register holding v's data that may be kept in a sequence or optional: v's own when its
  // storage is fresh per run and contiguous, else a contiguous copy in new pool storage.
  absl::StatusOr<uint32_t> Shareable(const Value* v);
  // An i64 scalar register holding element 0 of v (its content when known).
  absl::StatusOr<uint32_t> ScalarOf(const Value* v);
  // Emits one instruction of fixed-size operands.
  absl::Status Op(Opcode op, std::initializer_list<uint32_t> words);
  // Emits `loop iter, trip` and returns (loop pc, exit word); CloseLoop emits `endloop`.
  absl::StatusOr<std::pair<uint32_t, uint32_t>> OpenLoop(uint32_t iter, uint32_t trip_word);
  absl::Status CloseLoop(std::pair<uint32_t, uint32_t> loop);
  // Allocates v's planned storage on `device` (arena values view the device arena, which has
  // the host arena's layout).
  absl::Status EmitAllocFor(const Value* v, uint32_t reg, Device device = Device::kCPU);
  // Device placement (CompileOptions::device): where `n` runs, and whether v is on the device.
  Device PlaceKernel(const Node& n, const std::vector<bool>& dynamic);
  bool OnDevice(const Value* v) const { return on_device_.contains(Root(v)); }
  absl::Status EmitMaterializeLazy(const Value* v);
  absl::Status DefineDynamicSymbols(const Value* v, uint32_t reg);
  // Reads the symbolic contents of a function input (BindScalarInputs) into a scalar register.
  absl::Status DefineContentSymbol(const Value* in, uint32_t reg);
  // `d` with each induction dim of the loops being emitted replaced by its capacity.
  Dim WithCapacities(Dim d);
  absl::StatusOr<uint32_t> Tensor(const Value* v);  // the register holding v as a tensor
  absl::StatusOr<uint32_t> EvalDim(Dim d);
  absl::StatusOr<uint32_t> ValueWord(Dim d);
  absl::StatusOr<std::vector<uint32_t>> DimWords(const std::vector<Dim>& dims);
  absl::Status Finish();
  bool PoolOwned(const Value* v);

  uint32_t NewScalar(fb::ScalarType t) {
    fn_->scalar_types.push_back(t);
    return static_cast<uint32_t>(fn_->scalar_types.size() - 1);
  }
  uint32_t NewObject(fb::ObjectKind kind, DType dtype,
                     fb::ObjectKind elem_kind = fb::ObjectKind::Tensor) {
    fn_->object_types.emplace_back(kind, static_cast<uint8_t>(dtype), elem_kind);
    return static_cast<uint32_t>(fn_->object_types.size() - 1);
  }
  // A register of v's type: a tensor, or a sequence or optional.
  uint32_t NewTensorReg(const Value* v) {
    return NewObject(FbKind(v->kind), v->dtype, FbKind(v->elem_kind));
  }
  void BindSymbol(Dim sym, uint32_t reg) { scopes_.back().dims[sym] = reg; }
  void PushScope() { scopes_.emplace_back(); }
  void PopScope() { scopes_.pop_back(); }
  absl::Status Internal(absl::string_view msg) const {
    return absl::InternalError(absl::StrCat("function '", f_.name, "': ", msg));
  }

  Module& m_;
  SymbolicContext& sym_;
  const Function& f_;
  Graph& g_;
  uint32_t index_;
  ExecutableBuilder& b_;
  const CompileOptions& opts_;
  fb::FunctionT* fn_ = nullptr;
  std::vector<uint32_t>* code_ = nullptr;

  int64_t clock_ = 0;
  absl::flat_hash_map<const Node*, std::pair<int64_t, int64_t>> pos_;
  absl::flat_hash_map<const Value*, std::vector<std::pair<const Node*, Graph*>>>
      uses_;  // node null: graph output
  absl::flat_hash_map<const Value*, Info> info_;
  std::vector<Alloc> allocs_;
  int64_t arena_bytes_ = 0;
  int64_t largest_live_ = 0;

  // Loop lowering decisions.
  absl::flat_hash_set<const Node*> append_nodes_;  // Concat lowered to append
  absl::flat_hash_map<const Node*, std::vector<bool>> growable_carried_;  // per Loop node
  absl::flat_hash_map<const Value*, const Value*> double_root_of_;  // carried body output -> root

  struct Scope {
    absl::flat_hash_map<Dim, uint32_t> dims;
  };
  std::vector<Scope> scopes_;
  absl::flat_hash_map<const Value*, uint32_t> reg_;
  absl::flat_hash_map<const Value*, std::pair<uint32_t, uint32_t>>
      double_offsets_;  // root -> (write, other)
  uint32_t arena_reg_ = 0;
  uint32_t device_arena_reg_ = 0;
  absl::flat_hash_set<const Value*> on_device_;  // outputs of kernels placed on the device
  uint32_t site_ = 0;
  int dynamic_sites_ = 0;
  int output_allocs_ = 0;
  absl::flat_hash_set<const Value*> function_outputs_;  // roots of the function's outputs
  int loop_sites_ = 0;  // of which inside loops (or growth that reallocates in one)
  absl::flat_hash_map<Dim, Dim> capacity_of_;  // induction dim -> its capacity symbol
  int loop_depth_ = 0;
  void CountAllocSite(bool grows_in_loop = false) {
    ++dynamic_sites_;
    if (loop_depth_ > 0 || grows_in_loop) ++loop_sites_;
  }
  int invokes_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Analysis

void FunctionCodegen::Number(Graph& g) {
  for (auto& n : g.nodes) {
    const int64_t start = ++clock_;
    for (auto& [name, sub] : n->subgraphs) Number(*sub);
    pos_[n.get()] = {start, ++clock_};
  }
}

void FunctionCodegen::CollectUses(Graph& g) {
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

bool FunctionCodegen::NeedsTensor(const Value* v) const {
  auto it = uses_.find(v);
  if (it == uses_.end()) return false;
  for (const auto& [node, graph] : it->second) {
    if (node == nullptr) return true;  // a graph output
    if (IsLazyOp(*node)) continue;
    if (IsOnnx(*node, "Loop") && (node->inputs.size() > 0 && node->inputs[0] == v) &&
        !(node->inputs.size() > 1 && node->inputs[1] == v)) {
      continue;  // the trip count is read from the content
    }
    if (IsViewOp(*node) && node->inputs.size() > 1 && node->inputs[1] == v &&
        node->inputs[0] != v && node->outputs[0] && node->outputs[0]->shape &&
        !node->outputs[0]->dynamic) {
      continue;  // a reshape target: the dims come from the content
    }
    return true;
  }
  return false;
}

absl::StatusOr<int64_t> FunctionCodegen::ArenaBytes(const Value* v) const {
  if (!v->shape || v->dynamic) return absl::UnavailableError("dynamic");
  Dim bytes = sym_.Const(DTypeSize(v->dtype));
  for (Dim d : *v->shape) bytes = sym_.Mul(bytes, d);
  std::optional<int64_t> ub = sym_.UpperBound(bytes);
  if (!ub || *ub > opts_.arena_value_limit) return absl::UnavailableError("unbounded");
  return (std::max<int64_t>(*ub, 1) + 63) / 64 * 64;
}

int FunctionCodegen::NewAlloc(const Value* v) {
  absl::StatusOr<int64_t> bytes = ArenaBytes(v);
  Alloc a;
  a.size = bytes.ok() ? *bytes : 64;
  allocs_.push_back(a);
  return static_cast<int>(allocs_.size() - 1);
}

absl::Status FunctionCodegen::Classify(Graph& g) {
  for (auto& node : g.nodes) {
    Node& n = *node;
    if (IsOnnx(n, "Loop")) PlanLoop(n);
    for (auto& [name, sub] : n.subgraphs) {
      for (const Value* in : sub->inputs) info_[in].store = Store::kRegister;
      if (IsOnnx(n, "Loop")) {
        // The iteration number is a scalar made a tensor only on demand; the condition is
        // written into a small arena slot when the body reads it.
        if (sub->inputs[0]->content) info_[sub->inputs[0]].store = Store::kLazy;
        if (uses_.contains(sub->inputs[1])) info_[sub->inputs[1]].store = Store::kArena;
      }
      if (absl::Status s = Classify(*sub); !s.ok()) return s;
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const Value* v = n.outputs[i];
      if (v == nullptr) continue;
      Info& info = info_[v];
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
      if (append_nodes_.contains(&n)) {
        info.store = Store::kRegister;
        continue;
      }
      if (IsLazyOp(n)) {
        info.store = Store::kLazy;
        continue;
      }
      if (IsViewOp(n) && i == 0 && !v->dynamic && v->shape && n.inputs[0] != nullptr) {
        info.store = Store::kAlias;
        info.alias_of = n.inputs[0];
        continue;
      }
      if (v->dynamic || !v->shape) {
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
void FunctionCodegen::PlanLoop(Node& loop) {
  Graph* body = loop.subgraph("body");
  const size_t nc = loop.inputs.size() - 2;
  std::vector<bool>& grow = growable_carried_[&loop];
  grow.assign(nc, false);
  for (size_t i = 0; i < nc; ++i) {
    const Value* in = body->inputs[2 + i];
    const Value* out = body->outputs[1 + i];
    if (out == nullptr || out->producer == nullptr || out->graph != body) continue;
    const Node& p = *out->producer;
    const AttrValue* axis = p.attr("axis");
    if (!IsOnnx(p, "Concat") || p.inputs.size() != 2 || p.inputs[0] != in || p.inputs[1] == in ||
        axis == nullptr || in->rank() <= 0 || p.inputs[1] == nullptr ||
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
    append_nodes_.insert(&p);
  }
}

void FunctionCodegen::Liveness() {
  // Definition points.
  std::function<void(Graph&, int64_t)> defs = [&](Graph& g, int64_t entry) {
    for (const Value* v : g.inputs) info_[v].def = entry;
    for (auto& n : g.nodes) {
      const int64_t start = pos_[n.get()].first;
      for (auto& [name, sub] : n->subgraphs) defs(*sub, start);
      // Outputs are allocated before the node runs, while its inputs are still live: a
      // kernel never writes over its own inputs.
      for (const Value* v : n->outputs) {
        if (v) info_[v].def = start;
      }
    }
  };
  defs(g_, 0);
  // Uses, extended to the end of every loop between the use and the definition.
  const int64_t function_end = clock_ + 1;
  for (const auto& [v, list] : uses_) {
    Info& info = info_[v];
    for (const auto& [node, graph] : list) {
      int64_t t =
          node ? pos_[node].first : (graph->owner ? pos_[graph->owner].second : function_end);
      for (Graph* r = graph; r != nullptr && r != v->graph; r = r->parent) {
        if (r->owner && (IsOnnx(*r->owner, "Loop") || IsOnnx(*r->owner, "Scan"))) {
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
    Info& ri = info_[root];
    if (ri.store == Store::kArena || (ri.store == Store::kLazy && ri.materialize)) {
      if (ri.allocs.empty()) ri.allocs.push_back(NewAlloc(root));
    }
  }
  for (auto& [v, info] : info_) {
    const Value* root = Root(v);
    for (int a : info_[root].allocs) allocs_[a].Cover(info.def, std::max(info.last_use, info.def));
  }
  // Results of regions keep the data of their branch / body values alive.
  std::function<void(Graph&)> regions = [&](Graph& g) {
    for (auto& n : g.nodes) {
      for (auto& [name, sub] : n->subgraphs) regions(*sub);
      if (IsOnnx(*n, "If")) {
        for (size_t i = 0; i < n->outputs.size(); ++i) {
          if (!n->outputs[i]) continue;
          const int64_t end = std::max(info_[n->outputs[i]].last_use, pos_[n.get()].second);
          for (const char* br : {"then_branch", "else_branch"}) {
            const Value* bv = n->subgraph(br)->outputs[i];
            for (int a : info_[Root(bv)].allocs) allocs_[a].Cover(allocs_[a].start, end);
          }
        }
      }
      if (IsOnnx(*n, "Loop")) {
        Graph* body = n->subgraph("body");
        const size_t nc = n->inputs.size() - 2;
        const auto [start, end] = pos_[n.get()];
        for (size_t i = 0; i < nc; ++i) {
          const int64_t out_end =
              n->outputs[i] ? std::max(info_[n->outputs[i]].last_use, end) : end;
          // The initial value is read by the first iteration and is the result of none.
          for (int a : info_[Root(n->inputs[2 + i])].allocs) allocs_[a].Cover(start, out_end);
          const Value* out = body->outputs[1 + i];
          for (int a : info_[Root(out)].allocs) allocs_[a].Cover(start, out_end);
        }
      }
    }
  };
  regions(g_);
}

void FunctionCodegen::Place() {
  std::vector<int> order(allocs_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    // Largest first; equal sizes by start time, which colours an interval graph optimally.
    if (allocs_[a].size != allocs_[b].size) return allocs_[a].size > allocs_[b].size;
    return allocs_[a].start < allocs_[b].start;
  });
  std::vector<int> placed;
  for (int idx : order) {
    Alloc& a = allocs_[idx];
    if (a.end < a.start) a.start = a.end = 0;
    // Candidate offsets: 0 and the end of every placed allocation that overlaps in time.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (int p : placed) {
      const Alloc& o = allocs_[p];
      if (o.start <= a.end && a.start <= o.end) busy.emplace_back(o.offset, o.offset + o.size);
    }
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + a.size <= lo) break;
      offset = std::max(offset, hi);
    }
    a.offset = offset;
    arena_bytes_ = std::max(arena_bytes_, offset + a.size);
    placed.push_back(idx);
  }
  // Largest live set.
  std::vector<std::pair<int64_t, int64_t>> events;
  for (const Alloc& a : allocs_) {
    events.emplace_back(a.start, a.size);
    events.emplace_back(a.end + 1, -a.size);
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0;
  for (const auto& [t, d] : events) {
    live += d;
    largest_live_ = std::max(largest_live_, live);
  }
}

// ---------------------------------------------------------------------------------------------
// Emission helpers

absl::StatusOr<uint32_t> FunctionCodegen::EvalDim(Dim d) {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto f = it->dims.find(d);
    if (f != it->dims.end()) return f->second;
  }
  CodeWriter w(code_);
  uint32_t r;
  switch (d->kind) {
    case DimNode::Kind::kConst:
      r = NewScalar(fb::ScalarType::I64);
      w.Begin(Opcode::kConstI);
      w.Word(r);
      w.Imm64(d->value);
      break;
    case DimNode::Kind::kSymbol:
      return Internal(absl::StrCat("symbol '", d->name, "' is used before it is defined"));
    default: {
      absl::StatusOr<uint32_t> a = EvalDim(d->a);
      if (!a.ok()) return a.status();
      absl::StatusOr<uint32_t> b = EvalDim(d->b);
      if (!b.ok()) return b.status();
      Opcode op = Opcode::kAddI;
      switch (d->kind) {
        case DimNode::Kind::kAdd:
          op = Opcode::kAddI;
          break;
        case DimNode::Kind::kMul:
          op = Opcode::kMulI;
          break;
        case DimNode::Kind::kFloorDiv:
          op = Opcode::kDivI;
          break;
        case DimNode::Kind::kMax:
          op = Opcode::kMaxI;
          break;
        case DimNode::Kind::kMin:
          op = Opcode::kMinI;
          break;
        default:
          break;
      }
      r = NewScalar(fb::ScalarType::I64);
      w.Begin(op);
      w.Word(r);
      w.Word(*a);
      w.Word(*b);
    }
  }
  if (absl::Status s = w.End(); !s.ok()) return s;
  BindSymbol(d, r);
  return r;
}

absl::StatusOr<uint32_t> FunctionCodegen::ValueWord(Dim d) {
  if (auto c = SymbolicContext::AsConst(d);
      c && *c >= 0 && *c < static_cast<int64_t>(isa::kRegisterFlag)) {
    return static_cast<uint32_t>(*c);
  }
  absl::StatusOr<uint32_t> r = EvalDim(d);
  if (!r.ok()) return r.status();
  return isa::ValueRegister(*r);
}

absl::StatusOr<std::vector<uint32_t>> FunctionCodegen::DimWords(const std::vector<Dim>& dims) {
  std::vector<uint32_t> words;
  for (Dim d : dims) {
    absl::StatusOr<uint32_t> w = ValueWord(d);
    if (!w.ok()) return w.status();
    words.push_back(*w);
  }
  return words;
}

absl::Status FunctionCodegen::EmitAllocFor(const Value* v, uint32_t reg, Device device) {
  const Info& info = info_[v];
  absl::StatusOr<std::vector<uint32_t>> dims = DimWords(*v->shape);
  if (!dims.ok()) return dims.status();
  CodeWriter w(code_);
  if (info.store == Store::kPool || info.allocs.empty()) {
    Dim bytes = sym_.Const(DTypeSize(v->dtype));
    for (Dim d : *v->shape) bytes = sym_.Mul(bytes, d);
    if (!capacity_of_.empty()) {
      // Sized for the capacities of the loop's induction dims (never below the value's size).
      const Dim capped = WithCapacities(bytes);
      if (capped != bytes) bytes = sym_.Max(bytes, capped);
    }
    absl::StatusOr<uint32_t> size = ValueWord(bytes);
    if (!size.ok()) return size.status();
    const uint32_t st = NewObject(fb::ObjectKind::Storage, DType::kF32);
    w.Begin(Opcode::kAllocStorage);
    w.Word(st);
    w.Word(*size);
    w.Word(static_cast<uint32_t>(device));
    if (absl::Status s = w.End(); !s.ok()) return s;
    w.Begin(Opcode::kAllocTensor);
    w.Word(reg);
    w.Word(st);
    w.Word(0);
    w.Word(static_cast<uint32_t>(v->dtype));
    w.List(*dims);
    if (absl::Status s = w.End(); !s.ok()) return s;
    // A function output gets fresh storage each run (so it survives the next run); that is
    // not a planning failure, and the report counts it apart.
    if (function_outputs_.contains(v)) {
      ++output_allocs_;
    } else {
      CountAllocSite();
    }
    // The tensor keeps the storage alive; the storage register would keep it past its use.
    w.Begin(Opcode::kKill);
    w.Word(st);
    return w.End();
  }
  uint32_t offset_word;
  auto d = double_offsets_.find(v);
  if (d != double_offsets_.end()) {
    offset_word = isa::ValueRegister(d->second.first);
  } else {
    const int64_t off = allocs_[info.allocs[0]].offset;
    if (off < static_cast<int64_t>(isa::kRegisterFlag)) {
      offset_word = static_cast<uint32_t>(off);
    } else {
      absl::StatusOr<uint32_t> r = EvalDim(sym_.Const(off));
      if (!r.ok()) return r.status();
      offset_word = isa::ValueRegister(*r);
    }
  }
  w.Begin(Opcode::kAllocTensor);
  w.Word(reg);
  w.Word(device == Device::kCPU ? arena_reg_ : device_arena_reg_);
  w.Word(offset_word);
  w.Word(static_cast<uint32_t>(v->dtype));
  w.List(*dims);
  return w.End();
}

absl::Status FunctionCodegen::DefineDynamicSymbols(const Value* v, uint32_t reg) {
  if (!v->shape || IsContainer(v)) return absl::OkStatus();
  for (size_t i = 0; i < v->shape->size(); ++i) {
    Dim d = (*v->shape)[i];
    if (!SymbolicContext::IsSymbol(d)) continue;
    bool defined = false;
    for (const Scope& s : scopes_) defined |= s.dims.contains(d);
    if (defined) continue;
    const uint32_t r = NewScalar(fb::ScalarType::I64);
    CodeWriter w(code_);
    w.Begin(Opcode::kDim);
    w.Word(r);
    w.Word(reg);
    w.Word(static_cast<uint32_t>(i));
    if (absl::Status s = w.End(); !s.ok()) return s;
    BindSymbol(d, r);
  }
  return absl::OkStatus();
}

Dim FunctionCodegen::WithCapacities(Dim d) {
  auto it = capacity_of_.find(d);
  if (it != capacity_of_.end()) return it->second;
  if (d->a == nullptr || d->b == nullptr) return d;
  const Dim a = WithCapacities(d->a), b = WithCapacities(d->b);
  if (a == d->a && b == d->b) return d;
  switch (d->kind) {
    case DimNode::Kind::kAdd:
      return sym_.Add(a, b);
    case DimNode::Kind::kMul:
      return sym_.Mul(a, b);
    case DimNode::Kind::kFloorDiv:
      return sym_.FloorDiv(a, b);
    case DimNode::Kind::kMax:
      return sym_.Max(a, b);
    case DimNode::Kind::kMin:
      return sym_.Min(a, b);
    default:
      return d;
  }
}

absl::Status FunctionCodegen::DefineContentSymbol(const Value* in, uint32_t reg) {
  if (!in->content || in->content->size() != 1 || !SymbolicContext::IsSymbol((*in->content)[0])) {
    return absl::OkStatus();
  }
  const Dim sym = (*in->content)[0];
  for (const Scope& s : scopes_) {
    if (s.dims.contains(sym)) return absl::OkStatus();
  }
  // The symbol is the input's value: read once, and checked as every size is (not negative,
  // within its declared bound), since the plan relies on both.
  CodeWriter w(code_);
  const uint32_t r = NewScalar(fb::ScalarType::I64);
  w.Begin(Opcode::kReadI);
  w.Word(r);
  w.Word(reg);
  w.Word(0);
  if (absl::Status s = w.End(); !s.ok()) return s;
  BindSymbol(sym, r);
  auto check = [&](uint32_t lo, uint32_t hi, const std::string& message) -> absl::Status {
    const uint32_t ok = NewScalar(fb::ScalarType::Bool);
    w.Begin(Opcode::kLeI);
    w.Word(ok);
    w.Word(lo);
    w.Word(hi);
    if (absl::Status s = w.End(); !s.ok()) return s;
    w.Begin(Opcode::kAssert);
    w.Word(ok);
    w.Word(b_.String(message));
    return w.End();
  };
  absl::StatusOr<uint32_t> zero = EvalDim(sym_.Const(0));
  if (!zero.ok()) return zero.status();
  if (absl::Status s = check(*zero, r,
                             absl::StrCat("input '", in->name, "' (the size symbol '", sym->name,
                                          "') must not be negative"));
      !s.ok()) {
    return s;
  }
  if (std::optional<int64_t> bound = sym_.BoundOf(sym->name)) {
    absl::StatusOr<uint32_t> b = EvalDim(sym_.Const(*bound));
    if (!b.ok()) return b.status();
    return check(r, *b,
                 absl::StrCat("symbol '", sym->name, "' exceeds its declared bound ", *bound,
                              " (input '", in->name, "')"));
  }
  return absl::OkStatus();
}

absl::Status FunctionCodegen::EmitMaterializeLazy(const Value* v) {
  const uint32_t reg = NewTensorReg(v);
  if (absl::Status s = EmitAllocFor(v, reg); !s.ok()) return s;
  const std::vector<Dim>& content = *v->content;
  for (size_t k = 0; k < content.size(); ++k) {
    absl::StatusOr<uint32_t> x = EvalDim(content[k]);
    if (!x.ok()) return x.status();
    CodeWriter w(code_);
    w.Begin(Opcode::kWrite);
    w.Word(reg);
    w.Word(static_cast<uint32_t>(k));
    w.Word(*x);
    if (absl::Status s = w.End(); !s.ok()) return s;
  }
  reg_[v] = reg;
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> FunctionCodegen::Tensor(const Value* v) {
  auto it = reg_.find(v);
  if (it != reg_.end()) return it->second;
  const Info& info = info_[v];
  if (info.store == Store::kLazy) {
    if (absl::Status s = EmitMaterializeLazy(v); !s.ok()) return s;
    return reg_[v];
  }
  return Internal(absl::StrCat("value %", v->id, " (", v->TypeString(), ") has no register here"));
}

// ---------------------------------------------------------------------------------------------
// Emission

std::vector<std::vector<const Value*>> FunctionCodegen::KillsAfter(Graph& g) {
  std::vector<std::vector<const Value*>> kills(g.nodes.size());
  if (g.owner == nullptr || !IsOnnx(*g.owner, "Loop")) return kills;
  absl::flat_hash_map<const Node*, size_t> index;
  for (size_t i = 0; i < g.nodes.size(); ++i) index[g.nodes[i].get()] = i;
  for (auto& n : g.nodes) {
    for (const Value* v : n->outputs) {
      if (v == nullptr || v->constant) continue;
      const Info& info = info_[v];
      const Store root = info_[Root(v)].store;
      if ((info.store != Store::kPool && info.store != Store::kDynamic &&
           info.store != Store::kAlias) ||
          (root != Store::kPool && root != Store::kDynamic)) {
        continue;
      }
      // The last node of this body that reads v (itself or in its regions); none if v leaves
      // the iteration (a body output).
      int64_t last = -1;
      bool escapes = false;
      for (const auto& [node, graph] : uses_[v]) {
        const Node* top = node;
        const Graph* in = graph;
        while (in != &g && in != nullptr) {
          top = in->owner;
          in = in->parent;
        }
        if (in == nullptr || top == nullptr) {
          escapes = true;
          break;
        }
        last = std::max<int64_t>(last, static_cast<int64_t>(index[top]));
      }
      if (!escapes && last >= 0) kills[last].push_back(v);
    }
  }
  return kills;
}

absl::Status FunctionCodegen::EmitGraph(Graph& g) {
  // Pool values of a loop body are released at their last use, so that later values (and the
  // next iteration) reuse their blocks: the pool then serves a body whose sizes grow every
  // iteration like an arena, with no more memory than the live values need.
  const std::vector<std::vector<const Value*>> kills = KillsAfter(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node* n = g.nodes[i].get();
    b_.Location(index_, static_cast<uint32_t>(code_->size()), n->Label());
    if (absl::Status s = EmitNode(*n); !s.ok()) {
      if (s.code() == absl::StatusCode::kInternal || absl::StrContains(s.message(), n->Label()))
        return s;
      return absl::Status(s.code(), absl::StrCat(n->Label(), ": ", s.message()));
    }
    for (const Value* v : kills[i]) {
      auto r = reg_.find(v);
      if (r == reg_.end()) continue;
      CodeWriter w(code_);
      w.Begin(Opcode::kKill);
      w.Word(r->second);
      if (absl::Status s = w.End(); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status FunctionCodegen::EmitNode(Node& n) {
  if (IsOnnx(n, "If")) return EmitIf(n);
  if (IsOnnx(n, "Loop")) return EmitLoop(n);
  if (!n.subgraphs.empty()) {
    return absl::UnimplementedError(
        absl::StrCat(n.Label(), ": control-flow op ", n.op, " is not supported yet"));
  }
  if (IsContainerOp(n)) return EmitContainerOp(n);
  if (append_nodes_.contains(&n)) return EmitAppend(n);
  if (n.domain == "dynvm" && n.op == "Emit") return EmitStream(n);
  bool all_constant = !n.outputs.empty();
  for (const Value* v : n.outputs) {
    if (v && !v->constant) all_constant = false;
  }
  if (all_constant) return absl::OkStatus();
  if (IsLazyOp(n)) {
    for (const Value* v : n.outputs) {
      if (v && info_[v].materialize) {
        if (absl::Status s = EmitMaterializeLazy(v); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }
  if (IsViewOp(n) && n.outputs[0] && info_[n.outputs[0]].store == Store::kAlias) return EmitView(n);
  return EmitKernel(n);
}

absl::Status FunctionCodegen::EmitView(Node& n) {
  const Value* out = n.outputs[0];
  absl::StatusOr<uint32_t> in = Tensor(n.inputs[0]);
  if (!in.ok()) return in.status();
  const uint32_t reg = NewTensorReg(out);
  CodeWriter w(code_);
  if (n.op == "Identity" || n.op == "Dropout") {
    w.Begin(Opcode::kMov);
    w.Word(reg);
    w.Word(*in);
  } else {
    absl::StatusOr<std::vector<uint32_t>> dims = DimWords(*out->shape);
    if (!dims.ok()) return dims.status();
    w.Begin(Opcode::kReshape);
    w.Word(reg);
    w.Word(*in);
    w.List(*dims);
  }
  if (absl::Status s = w.End(); !s.ok()) return s;
  reg_[out] = reg;
  return absl::OkStatus();
}

Device FunctionCodegen::PlaceKernel(const Node& n, const std::vector<bool>& dynamic) {
  if (opts_.device == Device::kCPU) return Device::kCPU;
  // Floating-point work, and anything reading a device value, goes to the device when it has a
  // kernel for it; integer shape and index arithmetic fed from the host stays there.
  bool wanted = false;
  for (const Value* v : n.outputs) wanted |= v != nullptr && IsFloat(v->dtype);
  for (const Value* v : n.inputs) wanted |= v != nullptr && (IsFloat(v->dtype) || OnDevice(v));
  return wanted && b_.DeviceAccepts(n, dynamic, opts_.device) ? opts_.device : Device::kCPU;
}

absl::Status FunctionCodegen::EmitKernel(Node& n) {
  std::vector<uint32_t> ins, outs;
  for (const Value* v : n.inputs) {
    if (v == nullptr) {
      ins.push_back(isa::kAbsentRegister);
      continue;
    }
    if (IsContainer(v)) {
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": an input is a ", v->TypeString(),
                                                     "; ", n.op, " takes tensors"));
    }
    absl::StatusOr<uint32_t> r = Tensor(v);
    if (!r.ok()) return r.status();
    ins.push_back(*r);
  }
  std::vector<bool> dynamic(n.outputs.size(), false);
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const Value* v = n.outputs[i];
    if (v == nullptr) continue;
    const Store store = info_[v].store;
    dynamic[i] = store == Store::kDynamic || store == Store::kNone || store == Store::kLazy;
  }
  const Device device = PlaceKernel(n, dynamic);
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const Value* v = n.outputs[i];
    if (v == nullptr) {
      outs.push_back(isa::kAbsentRegister);
      continue;
    }
    const uint32_t reg = NewTensorReg(v);
    if (dynamic[i]) {
      CountAllocSite();
    } else {
      if (absl::Status s = EmitAllocFor(v, reg, device); !s.ok()) return s;
    }
    if (device != Device::kCPU) on_device_.insert(v);
    outs.push_back(reg);
    reg_[v] = reg;
  }
  absl::StatusOr<uint32_t> k = b_.KernelFor(n, dynamic, device);
  if (!k.ok()) return k.status();
  if (opts_.check_kernels) {
    if (absl::Status s = b_.CheckKernel(*k, n, dynamic, device); !s.ok()) return s;
  }
  CodeWriter w(code_);
  w.Begin(Opcode::kInvoke);
  w.Word(*k);
  w.Word(site_++);
  w.List(ins);
  w.List(outs);
  if (absl::Status s = w.End(); !s.ok()) return s;
  ++invokes_;
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (n.outputs[i] && dynamic[i]) {
      if (absl::Status s = DefineDynamicSymbols(n.outputs[i], outs[i]); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status FunctionCodegen::EmitAppend(Node& n) {
  // Concat(carried, x) lowered to an in-place append into the carried register.
  absl::StatusOr<uint32_t> dst = Tensor(n.inputs[0]);
  if (!dst.ok()) return dst.status();
  absl::StatusOr<uint32_t> x = Tensor(n.inputs[1]);
  if (!x.ok()) return x.status();
  int64_t axis = n.attr("axis")->i;
  if (axis < 0) axis += n.inputs[0]->rank();
  CodeWriter w(code_);
  w.Begin(Opcode::kAppend);
  w.Word(*dst);
  w.Word(*x);
  w.Word(static_cast<uint32_t>(axis));
  if (absl::Status s = w.End(); !s.ok()) return s;
  reg_[n.outputs[0]] = *dst;
  return absl::OkStatus();
}

absl::Status FunctionCodegen::EmitStream(Node& n) {
  absl::StatusOr<uint32_t> x = Tensor(n.inputs[0]);
  if (!x.ok()) return x.status();
  const AttrValue* stream = n.attr("stream");
  if (stream != nullptr &&
      (stream->type != AttrValue::Type::kInt || stream->i < 0 || stream->i > 0xFFFF)) {
    return absl::InvalidArgumentError("Emit: 'stream' must be an int in [0, 65535]");
  }
  CodeWriter w(code_);
  w.Begin(Opcode::kEmit);
  w.Word(*x);
  w.Word(stream ? static_cast<uint32_t>(stream->i) : 0);
  return w.End();
}

absl::Status FunctionCodegen::EmitIf(Node& n) {
  absl::StatusOr<uint32_t> cond_t = Tensor(n.inputs[0]);
  if (!cond_t.ok()) return cond_t.status();
  const uint32_t c = NewScalar(fb::ScalarType::Bool);
  CodeWriter w(code_);
  w.Begin(Opcode::kReadB);
  w.Word(c);
  w.Word(*cond_t);
  w.Word(0);
  if (absl::Status s = w.End(); !s.ok()) return s;
  std::vector<uint32_t> out_regs;
  for (const Value* v : n.outputs) out_regs.push_back(v ? NewTensorReg(v) : 0);
  std::vector<uint32_t> if_jump;
  const uint32_t if_pc = w.Begin(Opcode::kIf);
  w.Word(c);
  const uint32_t if_jump_word = static_cast<uint32_t>(code_->size());
  w.Word(0);
  if (absl::Status s = w.End(); !s.ok()) return s;
  uint32_t else_pc = 0, else_jump_word = 0;
  for (const char* branch : {"then_branch", "else_branch"}) {
    const bool is_else = branch[0] == 'e';
    if (is_else) {
      else_pc = w.Begin(Opcode::kElse);
      else_jump_word = static_cast<uint32_t>(code_->size());
      w.Word(0);
      if (absl::Status s = w.End(); !s.ok()) return s;
      (*code_)[if_jump_word] = static_cast<uint32_t>(code_->size() - if_pc);
    }
    Graph* g = n.subgraph(branch);
    PushScope();
    if (absl::Status s = EmitGraph(*g); !s.ok()) return s;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (!n.outputs[i]) continue;
      absl::StatusOr<uint32_t> r = Tensor(g->outputs[i]);
      if (!r.ok()) return r.status();
      w.Begin(Opcode::kMov);
      w.Word(out_regs[i]);
      w.Word(*r);
      if (absl::Status s = w.End(); !s.ok()) return s;
    }
    PopScope();
  }
  const uint32_t endif_pc = w.Begin(Opcode::kEndIf);
  if (absl::Status s = w.End(); !s.ok()) return s;
  (*code_)[else_jump_word] = static_cast<uint32_t>(endif_pc - else_pc);
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (!n.outputs[i]) continue;
    reg_[n.outputs[i]] = out_regs[i];
    if (absl::Status s = DefineDynamicSymbols(n.outputs[i], out_regs[i]); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status FunctionCodegen::EmitLoop(Node& n) {
  Graph* body = n.subgraph("body");
  const size_t nc = n.inputs.size() - 2;
  const size_t ns = body->outputs.size() - 1 - nc;
  CodeWriter w(code_);
  // Trip count.
  uint32_t trip_word;
  const Value* m = n.inputs[0];
  if (m == nullptr) {
    const uint32_t r = NewScalar(fb::ScalarType::I64);
    w.Begin(Opcode::kConstI);
    w.Word(r);
    w.Imm64(std::numeric_limits<int64_t>::max());
    if (absl::Status s = w.End(); !s.ok()) return s;
    trip_word = isa::ValueRegister(r);
  } else if (m->content && m->content->size() == 1) {
    absl::StatusOr<uint32_t> word = ValueWord((*m->content)[0]);
    if (!word.ok()) return word.status();
    trip_word = *word;
  } else {
    absl::StatusOr<uint32_t> t = Tensor(m);
    if (!t.ok()) return t.status();
    const uint32_t r = NewScalar(fb::ScalarType::I64);
    w.Begin(Opcode::kReadI);
    w.Word(r);
    w.Word(*t);
    w.Word(0);
    if (absl::Status s = w.End(); !s.ok()) return s;
    trip_word = isa::ValueRegister(r);
  }
  // Running condition.
  const uint32_t cond = NewScalar(fb::ScalarType::Bool);
  if (n.inputs[1] == nullptr) {
    w.Begin(Opcode::kConstB);
    w.Word(cond);
    w.Word(1);
  } else {
    absl::StatusOr<uint32_t> t = Tensor(n.inputs[1]);
    if (!t.ok()) return t.status();
    w.Begin(Opcode::kReadB);
    w.Word(cond);
    w.Word(*t);
    w.Word(0);
  }
  if (absl::Status s = w.End(); !s.ok()) return s;
  // Loop-carried registers.
  const std::vector<bool>& grow = growable_carried_[&n];
  std::vector<uint32_t> carried(nc);
  for (size_t i = 0; i < nc; ++i) {
    const Value* init = n.inputs[2 + i];
    const Value* in = body->inputs[2 + i];
    absl::StatusOr<uint32_t> src = Tensor(init);
    if (!src.ok()) return src.status();
    carried[i] = NewTensorReg(in);
    if (grow[i]) {
      const int64_t axis_attr = body->outputs[1 + i]->producer->attr("axis")->i;
      const int rank = init->rank();
      const uint32_t axis = static_cast<uint32_t>(axis_attr < 0 ? axis_attr + rank : axis_attr);
      absl::StatusOr<std::vector<uint32_t>> dims = DimWords(*init->shape);
      if (!dims.ok()) return dims.status();
      // Capacity: the initial extent plus one step per iteration when the trip count is
      // bounded; otherwise a start that grows geometrically.
      Dim cap_dim = sym_.Const(16);
      bool cap_bounded = false;  // else appends in the loop reallocate as it grows
      const Value* x = body->outputs[1 + i]->producer->inputs[1];
      if (m && m->content && x->shape) {
        Dim total = sym_.Add((*init->shape)[axis], sym_.Mul((*m->content)[0], (*x->shape)[axis]));
        if (auto ub = sym_.UpperBound(total); ub && *ub < (int64_t{1} << 31)) {
          cap_dim = sym_.Const(*ub);
          cap_bounded = true;
        }
      }
      absl::StatusOr<uint32_t> cap = ValueWord(cap_dim);
      if (!cap.ok()) return cap.status();
      w.Begin(Opcode::kAllocGrowable);
      w.Word(carried[i]);
      w.Word(static_cast<uint32_t>(init->dtype));
      w.Word(0);
      w.Word(axis);
      w.Word(*cap);
      w.List(*dims);
      if (absl::Status s = w.End(); !s.ok()) return s;
      CountAllocSite(/*grows_in_loop=*/!cap_bounded);
      w.Begin(Opcode::kCopy);
      w.Word(carried[i]);
      w.Word(*src);
    } else {
      w.Begin(Opcode::kMov);
      w.Word(carried[i]);
      w.Word(*src);
    }
    if (absl::Status s = w.End(); !s.ok()) return s;
    reg_[in] = carried[i];
    if (n.outputs[i]) reg_[n.outputs[i]] = carried[i];
  }
  // Double-buffer write offsets for carried values computed into the arena.
  std::vector<std::pair<uint32_t, uint32_t>> swaps;
  for (size_t i = 0; i < nc; ++i) {
    const Value* root = double_root_of_.count(body->outputs[1 + i])
                            ? double_root_of_[body->outputs[1 + i]]
                            : nullptr;
    if (root == nullptr || double_offsets_.contains(root)) continue;
    const Info& ri = info_[root];
    const uint32_t a = NewScalar(fb::ScalarType::I64), b = NewScalar(fb::ScalarType::I64);
    w.Begin(Opcode::kConstI);
    w.Word(a);
    w.Imm64(allocs_[ri.allocs[0]].offset);
    if (absl::Status s = w.End(); !s.ok()) return s;
    w.Begin(Opcode::kConstI);
    w.Word(b);
    w.Imm64(allocs_[ri.allocs[1]].offset);
    if (absl::Status s = w.End(); !s.ok()) return s;
    double_offsets_[root] = {a, b};
    swaps.emplace_back(a, b);
  }
  // Scan outputs accumulate in growable storages.
  std::vector<uint32_t> scans(ns);
  std::vector<bool> scan_dims_known(ns, true);
  std::vector<uint32_t> scan_caps(ns, 0);
  for (size_t k = 0; k < ns; ++k) {
    const Value* elem = body->outputs[1 + nc + k];
    const Value* out = n.outputs[nc + k];
    scans[k] = NewObject(fb::ObjectKind::Tensor, elem->dtype);
    if (!elem->shape) return absl::UnimplementedError("a scan output of unknown rank");
    std::vector<Dim> dims{sym_.Const(0)};
    // Element dims known before the loop size the storage now; otherwise the first append
    // adopts them.
    if (out && out->shape) {
      dims.insert(dims.end(), out->shape->begin() + 1, out->shape->end());
    } else {
      dims.insert(dims.end(), elem->shape->begin(), elem->shape->end());
    }
    bool known = true;
    for (size_t d = 1; d < dims.size(); ++d) {
      std::vector<Dim> syms;
      sym_.CollectSymbols(dims[d], &syms);
      for (Dim s : syms) {
        bool defined = false;
        for (const Scope& sc : scopes_) defined |= sc.dims.contains(s);
        if (!defined) known = false;
      }
    }
    if (!known) {
      for (size_t d = 1; d < dims.size(); ++d) dims[d] = sym_.Const(0);
    }
    scan_dims_known[k] = known;
    absl::StatusOr<std::vector<uint32_t>> words = DimWords(dims);
    if (!words.ok()) return words.status();
    Dim cap_dim = sym_.Const(16);
    bool cap_bounded = false;
    if (m && m->content) {
      if (auto ub = sym_.UpperBound((*m->content)[0]); ub && *ub < (int64_t{1} << 31)) {
        cap_dim = sym_.Const(*ub);
        cap_bounded = true;
      }
    }
    absl::StatusOr<uint32_t> cap = ValueWord(cap_dim);
    if (!cap.ok()) return cap.status();
    scan_caps[k] = *cap;
    w.Begin(Opcode::kAllocGrowable);
    w.Word(scans[k]);
    w.Word(static_cast<uint32_t>(elem->dtype));
    w.Word(0);
    w.Word(0);
    w.Word(*cap);
    w.List(*words);
    if (absl::Status s = w.End(); !s.ok()) return s;
    CountAllocSite(/*grows_in_loop=*/!cap_bounded);
    if (out) reg_[out] = scans[k];
  }
  // Unbounded induction dims (a carried dim the body advances by a constant step) get a
  // capacity: a scalar that doubles when the dim outgrows it. Pool values of the body are
  // sized for the capacity, so they keep their size (and their pool blocks) between doublings.
  struct Capacity {
    Dim dim;
    uint32_t reg;
  };
  std::vector<Capacity> capacities;
  for (size_t i = 0; i < nc; ++i) {
    const Value* in = body->inputs[2 + i];
    const Value* out = body->outputs[1 + i];
    if (!in->shape || !out->shape || in->shape->size() != out->shape->size()) continue;
    for (size_t k = 0; k < in->shape->size(); ++k) {
      const Dim d = (*in->shape)[k];
      const Dim o = (*out->shape)[k];
      if (!SymbolicContext::IsSymbol(d) || sym_.UpperBound(d) || o->kind != DimNode::Kind::kAdd)
        continue;
      const Dim step = o->a == d ? o->b : (o->b == d ? o->a : nullptr);
      if (step == nullptr || !SymbolicContext::AsConst(step) ||
          *SymbolicContext::AsConst(step) <= 0)
        continue;
      bool seen = capacity_of_.contains(d);
      for (const Capacity& c : capacities) seen |= c.dim == d;
      if (seen) continue;
      const uint32_t r = NewScalar(fb::ScalarType::I64);
      w.Begin(Opcode::kConstI);
      w.Word(r);
      w.Imm64(0);
      if (absl::Status s = w.End(); !s.ok()) return s;
      capacities.push_back({d, r});
    }
  }
  // The loop.
  const uint32_t iter = NewScalar(fb::ScalarType::I64);
  const uint32_t loop_pc = w.Begin(Opcode::kLoop);
  w.Word(iter);
  w.Word(trip_word);
  const uint32_t exit_word = static_cast<uint32_t>(code_->size());
  w.Word(0);
  if (absl::Status s = w.End(); !s.ok()) return s;
  std::vector<std::pair<uint32_t, uint32_t>> breaks;  // (pc, jump word)
  const uint32_t brk = w.Begin(Opcode::kBreakUnless);
  w.Word(cond);
  breaks.emplace_back(brk, static_cast<uint32_t>(code_->size()));
  w.Word(0);
  if (absl::Status s = w.End(); !s.ok()) return s;
  PushScope();
  // Body inputs: the iteration number and condition as values, the carried dims re-read.
  const Value* iter_v = body->inputs[0];
  if (iter_v->content) BindSymbol((*iter_v->content)[0], iter);
  if (info_[iter_v].store == Store::kLazy && info_[iter_v].materialize) {
    if (absl::Status s = EmitMaterializeLazy(iter_v); !s.ok()) return s;
  }
  const Value* cond_v = body->inputs[1];
  if (uses_.contains(cond_v)) {
    const uint32_t reg = NewTensorReg(cond_v);
    if (absl::Status s = EmitAllocFor(cond_v, reg); !s.ok()) return s;
    w.Begin(Opcode::kWrite);
    w.Word(reg);
    w.Word(0);
    w.Word(cond);
    if (absl::Status s = w.End(); !s.ok()) return s;
    reg_[cond_v] = reg;
  }
  for (size_t i = 0; i < nc; ++i) {
    if (absl::Status s = DefineDynamicSymbols(body->inputs[2 + i], carried[i]); !s.ok()) return s;
  }
  for (const Capacity& c : capacities) {
    // capacity := dim > capacity ? 2 * dim : capacity
    absl::StatusOr<uint32_t> d = EvalDim(c.dim);
    if (!d.ok()) return d.status();
    const uint32_t outgrown = NewScalar(fb::ScalarType::Bool),
                   twice = NewScalar(fb::ScalarType::I64);
    w.Begin(Opcode::kLtI);
    w.Word(outgrown);
    w.Word(c.reg);
    w.Word(*d);
    if (absl::Status s = w.End(); !s.ok()) return s;
    w.Begin(Opcode::kAddI);
    w.Word(twice);
    w.Word(*d);
    w.Word(*d);
    if (absl::Status s = w.End(); !s.ok()) return s;
    w.Begin(Opcode::kSelectI);
    w.Word(c.reg);
    w.Word(outgrown);
    w.Word(twice);
    w.Word(c.reg);
    if (absl::Status s = w.End(); !s.ok()) return s;
    const Dim cap = sym_.Fresh("cap");
    BindSymbol(cap, c.reg);
    capacity_of_[c.dim] = cap;
  }
  ++loop_depth_;
  absl::Status body_status = EmitGraph(*body);
  --loop_depth_;
  for (const Capacity& c : capacities) capacity_of_.erase(c.dim);
  if (!body_status.ok()) return body_status;
  // Scan outputs.
  for (size_t k = 0; k < ns; ++k) {
    const Value* elem = body->outputs[1 + nc + k];
    absl::StatusOr<uint32_t> e = Tensor(elem);
    if (!e.ok()) return e.status();
    std::vector<Dim> dims{sym_.Const(1)};
    dims.insert(dims.end(), elem->shape->begin(), elem->shape->end());
    absl::StatusOr<std::vector<uint32_t>> words = DimWords(dims);
    if (!words.ok()) return words.status();
    if (!scan_dims_known[k]) {
      // The element dims are known only inside the body: the first iteration makes the
      // growable storage again with them (append needs the other dims to agree).
      dims[0] = sym_.Const(0);
      absl::StatusOr<std::vector<uint32_t>> empty = DimWords(dims);
      if (!empty.ok()) return empty.status();
      const uint32_t zero = NewScalar(fb::ScalarType::I64), first = NewScalar(fb::ScalarType::Bool);
      w.Begin(Opcode::kConstI);
      w.Word(zero);
      w.Imm64(0);
      if (absl::Status s = w.End(); !s.ok()) return s;
      w.Begin(Opcode::kEqI);
      w.Word(first);
      w.Word(iter);
      w.Word(zero);
      if (absl::Status s = w.End(); !s.ok()) return s;
      const uint32_t if_pc = w.Begin(Opcode::kIf);
      w.Word(first);
      const uint32_t jump_word = static_cast<uint32_t>(code_->size());
      w.Word(0);
      if (absl::Status s = w.End(); !s.ok()) return s;
      w.Begin(Opcode::kAllocGrowable);
      w.Word(scans[k]);
      w.Word(static_cast<uint32_t>(elem->dtype));
      w.Word(0);
      w.Word(0);
      w.Word(scan_caps[k]);
      w.List(*empty);
      if (absl::Status s = w.End(); !s.ok()) return s;
      const uint32_t endif_pc = w.Begin(Opcode::kEndIf);
      if (absl::Status s = w.End(); !s.ok()) return s;
      (*code_)[jump_word] = endif_pc - if_pc;
      CountAllocSite();
    }
    const uint32_t one = NewObject(fb::ObjectKind::Tensor, elem->dtype);
    w.Begin(Opcode::kReshape);
    w.Word(one);
    w.Word(*e);
    w.List(*words);
    if (absl::Status s = w.End(); !s.ok()) return s;
    w.Begin(Opcode::kAppend);
    w.Word(scans[k]);
    w.Word(one);
    w.Word(0);
    if (absl::Status s = w.End(); !s.ok()) return s;
  }
  // Rebind the carried values: one parallel move.
  std::vector<uint32_t> dst, src;
  for (size_t i = 0; i < nc; ++i) {
    if (grow[i]) continue;
    const Value* out = body->outputs[1 + i];
    if (out == body->inputs[2 + i]) continue;
    absl::StatusOr<uint32_t> r = Tensor(out);
    if (!r.ok()) return r.status();
    const Value* in = body->inputs[2 + i];
    if (in->kind == ObjectKind::kOptional && out->kind != ObjectKind::kOptional) {
      // The body makes the content of a carried optional: wrap it.
      const uint32_t wrapped = NewTensorReg(in);
      if (absl::Status s = Op(Opcode::kOptSome, {wrapped, *r}); !s.ok()) return s;
      r = wrapped;
    }
    dst.push_back(carried[i]);
    src.push_back(*r);
  }
  if (!dst.empty()) {
    w.Begin(Opcode::kPMove);
    w.List(dst);
    w.List(src);
    if (absl::Status s = w.End(); !s.ok()) return s;
  }
  if (!swaps.empty()) {
    std::vector<uint32_t> sd, ss;
    for (auto [a, b] : swaps) {
      sd.push_back(a);
      sd.push_back(b);
      ss.push_back(b);
      ss.push_back(a);
    }
    w.Begin(Opcode::kPMoveS);
    w.List(sd);
    w.List(ss);
    if (absl::Status s = w.End(); !s.ok()) return s;
  }
  // The condition for the next iteration.
  const Value* cond_out = body->outputs[0];
  if (cond_out != nullptr && cond_out != cond_v) {
    absl::StatusOr<uint32_t> t = Tensor(cond_out);
    if (!t.ok()) return t.status();
    w.Begin(Opcode::kReadB);
    w.Word(cond);
    w.Word(*t);
    w.Word(0);
    if (absl::Status s = w.End(); !s.ok()) return s;
  }
  PopScope();
  const uint32_t end_pc = w.Begin(Opcode::kEndLoop);
  w.Word(static_cast<uint32_t>(static_cast<int32_t>(loop_pc) - static_cast<int32_t>(end_pc)));
  if (absl::Status s = w.End(); !s.ok()) return s;
  const uint32_t exit_pc = static_cast<uint32_t>(code_->size());
  (*code_)[exit_word] = exit_pc - loop_pc;
  for (auto [pc, word] : breaks) (*code_)[word] = exit_pc - pc;
  for (size_t i = 0; i < nc; ++i) {
    const Value* res = n.outputs[i];
    if (res == nullptr || res->kind == body->inputs[2 + i]->kind) continue;
    // A carried optional whose body makes its content: the result is the content.
    const uint32_t got = NewTensorReg(res);
    if (absl::Status s = Op(Opcode::kOptGet, {got, carried[i]}); !s.ok()) return s;
    reg_[res] = got;
  }
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (n.outputs[i] && n.outputs[i]->dynamic) {
      if (absl::Status s = DefineDynamicSymbols(n.outputs[i], reg_[n.outputs[i]]); !s.ok())
        return s;
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Sequences and optionals

absl::Status FunctionCodegen::Op(Opcode op, std::initializer_list<uint32_t> words) {
  CodeWriter w(code_);
  w.Begin(op);
  for (uint32_t word : words) w.Word(word);
  return w.End();
}

absl::StatusOr<std::pair<uint32_t, uint32_t>> FunctionCodegen::OpenLoop(uint32_t iter,
                                                                        uint32_t trip_word) {
  CodeWriter w(code_);
  const uint32_t pc = w.Begin(Opcode::kLoop);
  w.Word(iter);
  w.Word(trip_word);
  const uint32_t exit_word = static_cast<uint32_t>(code_->size());
  w.Word(0);
  if (absl::Status s = w.End(); !s.ok()) return s;
  return std::make_pair(pc, exit_word);
}

absl::Status FunctionCodegen::CloseLoop(std::pair<uint32_t, uint32_t> loop) {
  CodeWriter w(code_);
  const uint32_t end_pc = w.Begin(Opcode::kEndLoop);
  w.Word(static_cast<uint32_t>(static_cast<int32_t>(loop.first) - static_cast<int32_t>(end_pc)));
  if (absl::Status s = w.End(); !s.ok()) return s;
  (*code_)[loop.second] = static_cast<uint32_t>(code_->size()) - loop.first;
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> FunctionCodegen::ScalarOf(const Value* v) {
  if (v->content && v->content->size() == 1) return EvalDim((*v->content)[0]);
  absl::StatusOr<uint32_t> t = Tensor(v);
  if (!t.ok()) return t.status();
  const uint32_t r = NewScalar(fb::ScalarType::I64);
  if (absl::Status s = Op(Opcode::kReadI, {r, *t, 0}); !s.ok()) return s;
  return r;
}

absl::StatusOr<uint32_t> FunctionCodegen::Shareable(const Value* v) {
  absl::StatusOr<uint32_t> r = Tensor(v);
  if (!r.ok()) return r.status();
  const Value* root = Root(v);
  const Store store = info_[root].store;
  // Fresh contiguous storage every time the producer runs, or a read-only constant, or a
  // tensor already taken out of a container (which holds only such tensors).
  if (v->constant || root->constant || store == Store::kPool || store == Store::kDynamic) return *r;
  if (store == Store::kRegister && root->producer != nullptr && IsContainerOp(*root->producer) &&
      root->producer->op != "ConcatFromSequence") {
    return *r;
  }
  const uint32_t rank = static_cast<uint32_t>(std::max(v->rank(), 0));
  if (!v->shape)
    return absl::UnimplementedError("a tensor of unknown rank kept in a sequence or optional");
  // Copy into new pool storage, with the dims read from the register.
  std::vector<uint32_t> dims;
  const uint32_t bytes = NewScalar(fb::ScalarType::I64);
  if (absl::Status s = Op(Opcode::kNumel, {bytes, *r}); !s.ok()) return s;
  const uint32_t esize = NewScalar(fb::ScalarType::I64);
  CodeWriter w(code_);
  w.Begin(Opcode::kConstI);
  w.Word(esize);
  w.Imm64(DTypeSize(v->dtype));
  if (absl::Status s = w.End(); !s.ok()) return s;
  if (absl::Status s = Op(Opcode::kMulI, {bytes, bytes, esize}); !s.ok()) return s;
  for (uint32_t k = 0; k < rank; ++k) {
    const uint32_t d = NewScalar(fb::ScalarType::I64);
    if (absl::Status s = Op(Opcode::kDim, {d, *r, k}); !s.ok()) return s;
    dims.push_back(isa::ValueRegister(d));
  }
  const uint32_t st = NewObject(fb::ObjectKind::Storage, DType::kF32);
  if (absl::Status s = Op(Opcode::kAllocStorage, {st, isa::ValueRegister(bytes), 0}); !s.ok())
    return s;
  const uint32_t copy = NewObject(fb::ObjectKind::Tensor, v->dtype);
  w.Begin(Opcode::kAllocTensor);
  w.Word(copy);
  w.Word(st);
  w.Word(0);
  w.Word(static_cast<uint32_t>(v->dtype));
  w.List(dims);
  if (absl::Status s = w.End(); !s.ok()) return s;
  if (absl::Status s = Op(Opcode::kCopy, {copy, *r}); !s.ok()) return s;
  return copy;
}

absl::Status FunctionCodegen::EmitContainerOp(Node& n) {
  const std::string& op = n.op;
  Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  if (out == nullptr) return absl::OkStatus();
  auto in = [&](size_t i) -> absl::StatusOr<uint32_t> {
    if (i >= n.inputs.size() || n.inputs[i] == nullptr)
      return Internal(absl::StrCat(n.Label(), ": input ", i, " missing"));
    return Tensor(n.inputs[i]);
  };
  // The register a sequence op updates: the input's own when this node is its only use in
  // the same region (a list appended to in a loop is updated in place), else a copy of the
  // handle (the VM copies the sequence on its first change: values, copy on write).
  auto target = [&](const Value* q) -> absl::StatusOr<uint32_t> {
    absl::StatusOr<uint32_t> r = Tensor(q);
    if (!r.ok()) return r.status();
    auto it = uses_.find(q);
    const bool only_use = it != uses_.end() && it->second.size() == 1 && it->second[0].first == &n;
    if (only_use && q->graph == n.graph && !q->constant && info_[q].store != Store::kParam)
      return *r;
    const uint32_t copy = NewTensorReg(out);
    if (absl::Status s = Op(Opcode::kMov, {copy, *r}); !s.ok()) return s;
    return copy;
  };
  uint32_t result = 0;
  if (op == "Identity") {
    absl::StatusOr<uint32_t> x = in(0);
    if (!x.ok()) return x.status();
    result = NewTensorReg(out);
    if (absl::Status s = Op(Opcode::kMov, {result, *x}); !s.ok()) return s;
  } else if (op == "SequenceEmpty") {
    result = NewTensorReg(out);
    if (absl::Status s = Op(Opcode::kSeqNew, {result}); !s.ok()) return s;
  } else if (op == "SequenceConstruct") {
    result = NewTensorReg(out);
    if (absl::Status s = Op(Opcode::kSeqNew, {result}); !s.ok()) return s;
    for (const Value* v : n.inputs) {
      absl::StatusOr<uint32_t> t = Shareable(v);
      if (!t.ok()) return t.status();
      if (absl::Status s = Op(Opcode::kSeqPush, {result, *t}); !s.ok()) return s;
    }
  } else if (op == "SequenceInsert") {
    absl::StatusOr<uint32_t> t = Shareable(n.inputs[1]);
    if (!t.ok()) return t.status();
    std::optional<uint32_t> pos;
    if (n.inputs.size() > 2 && n.inputs[2] != nullptr) {
      absl::StatusOr<uint32_t> p = ScalarOf(n.inputs[2]);
      if (!p.ok()) return p.status();
      pos = *p;
    }
    absl::StatusOr<uint32_t> q = target(n.inputs[0]);
    if (!q.ok()) return q.status();
    result = *q;
    absl::Status s =
        pos ? Op(Opcode::kSeqInsert, {result, *t, *pos}) : Op(Opcode::kSeqPush, {result, *t});
    if (!s.ok()) return s;
  } else if (op == "SequenceErase") {
    uint32_t pos;
    if (n.inputs.size() > 1 && n.inputs[1] != nullptr) {
      absl::StatusOr<uint32_t> p = ScalarOf(n.inputs[1]);
      if (!p.ok()) return p.status();
      pos = *p;
    } else {
      absl::StatusOr<uint32_t> p = EvalDim(sym_.Const(-1));
      if (!p.ok()) return p.status();
      pos = *p;
    }
    absl::StatusOr<uint32_t> q = target(n.inputs[0]);
    if (!q.ok()) return q.status();
    result = *q;
    if (absl::Status s = Op(Opcode::kSeqErase, {result, pos}); !s.ok()) return s;
  } else if (op == "SequenceAt") {
    absl::StatusOr<uint32_t> q = in(0);
    if (!q.ok()) return q.status();
    absl::StatusOr<uint32_t> p = ScalarOf(n.inputs[1]);
    if (!p.ok()) return p.status();
    result = NewTensorReg(out);
    if (absl::Status s = Op(Opcode::kSeqAt, {result, *q, *p}); !s.ok()) return s;
  } else if (op == "SequenceLength") {
    absl::StatusOr<uint32_t> q = in(0);
    if (!q.ok()) return q.status();
    const uint32_t len = NewScalar(fb::ScalarType::I64);
    if (absl::Status s = Op(Opcode::kSeqLen, {len, *q}); !s.ok()) return s;
    if (out->content && out->content->size() == 1) BindSymbol((*out->content)[0], len);
    result = NewTensorReg(out);
    if (absl::Status s = EmitAllocFor(out, result); !s.ok()) return s;
    if (absl::Status s = Op(Opcode::kWrite, {result, 0, len}); !s.ok()) return s;
  } else if (op == "ConcatFromSequence") {
    return EmitConcatFromSequence(n);
  } else if (op == "SplitToSequence") {
    return EmitSplitToSequence(n);
  } else if (op == "Optional") {
    result = NewTensorReg(out);
    if (n.inputs.empty() || n.inputs[0] == nullptr) {
      if (absl::Status s = Op(Opcode::kOptNone, {result}); !s.ok()) return s;
    } else {
      absl::StatusOr<uint32_t> x = IsContainer(n.inputs[0]) ? in(0) : Shareable(n.inputs[0]);
      if (!x.ok()) return x.status();
      if (absl::Status s = Op(Opcode::kOptSome, {result, *x}); !s.ok()) return s;
    }
  } else if (op == "OptionalHasElement") {
    const uint32_t has = NewScalar(fb::ScalarType::Bool);
    const Value* x = n.inputs.empty() ? nullptr : n.inputs[0];
    if (x == nullptr || x->kind != ObjectKind::kOptional) {
      // Opset 18's forms: an absent input is empty, a tensor or sequence is present.
      CodeWriter w(code_);
      w.Begin(Opcode::kConstB);
      w.Word(has);
      w.Word(x != nullptr ? 1 : 0);
      if (absl::Status s = w.End(); !s.ok()) return s;
    } else {
      absl::StatusOr<uint32_t> o = in(0);
      if (!o.ok()) return o.status();
      if (absl::Status s = Op(Opcode::kOptHas, {has, *o}); !s.ok()) return s;
    }
    result = NewTensorReg(out);
    if (absl::Status s = EmitAllocFor(out, result); !s.ok()) return s;
    if (absl::Status s = Op(Opcode::kWrite, {result, 0, has}); !s.ok()) return s;
  } else if (op == "OptionalGetElement") {
    absl::StatusOr<uint32_t> o = in(0);
    if (!o.ok()) return o.status();
    result = NewTensorReg(out);
    const bool is_opt = n.inputs[0]->kind == ObjectKind::kOptional;
    if (absl::Status s = Op(is_opt ? Opcode::kOptGet : Opcode::kMov, {result, *o}); !s.ok())
      return s;
  } else {
    return absl::UnimplementedError(absl::StrCat(n.Label(), ": ", op, " is not supported"));
  }
  reg_[out] = result;
  return DefineDynamicSymbols(out, result);
}

absl::Status FunctionCodegen::EmitConcatFromSequence(Node& n) {
  Value* out = n.outputs[0];
  const Value* q = n.inputs[0];
  if (!q->shape) {
    return absl::UnimplementedError(
        absl::StrCat(n.Label(), ": the rank of the sequence's elements is unknown"));
  }
  const int r = q->rank();
  const bool new_axis = n.attr("new_axis") != nullptr && n.attr("new_axis")->i != 0;
  int64_t axis = n.attr("axis") != nullptr ? n.attr("axis")->i : 0;
  if (axis < 0) axis += r + (new_axis ? 1 : 0);
  const uint32_t a = static_cast<uint32_t>(axis);
  absl::StatusOr<uint32_t> qr = Tensor(q);
  if (!qr.ok()) return qr.status();
  const uint32_t len = NewScalar(fb::ScalarType::I64);
  if (absl::Status s = Op(Opcode::kSeqLen, {len, *qr}); !s.ok()) return s;
  absl::StatusOr<uint32_t> zero = EvalDim(sym_.Const(0));
  if (!zero.ok()) return zero.status();
  absl::StatusOr<uint32_t> one = EvalDim(sym_.Const(1));
  if (!one.ok()) return one.status();
  // The first element (an empty sequence is an error) gives the other dims.
  const uint32_t first = NewObject(fb::ObjectKind::Tensor, q->dtype);
  if (absl::Status s = Op(Opcode::kSeqAt, {first, *qr, *zero}); !s.ok()) return s;
  std::vector<uint32_t> dims;
  for (int k = 0; k < r; ++k) {
    const uint32_t d = NewScalar(fb::ScalarType::I64);
    if (absl::Status s = Op(Opcode::kDim, {d, first, static_cast<uint32_t>(k)}); !s.ok()) return s;
    dims.push_back(d);
  }
  const uint32_t cap = NewScalar(fb::ScalarType::I64);
  if (new_axis) {
    if (absl::Status s = Op(Opcode::kMovS, {cap, len}); !s.ok()) return s;
  } else if (absl::Status s = Op(Opcode::kMulI, {cap, len, dims[a]}); !s.ok()) {
    return s;
  }
  if (absl::Status s = Op(Opcode::kMaxI, {cap, cap, *one}); !s.ok()) return s;
  std::vector<uint32_t> out_dims;
  for (uint32_t d : dims) out_dims.push_back(isa::ValueRegister(d));
  if (new_axis) {
    out_dims.insert(out_dims.begin() + a, 0);
  } else {
    out_dims[a] = 0;
  }
  const uint32_t result = NewTensorReg(out);
  CodeWriter w(code_);
  w.Begin(Opcode::kAllocGrowable);
  w.Word(result);
  w.Word(static_cast<uint32_t>(q->dtype));
  w.Word(0);
  w.Word(a);
  w.Word(isa::ValueRegister(cap));
  w.List(out_dims);
  if (absl::Status s = w.End(); !s.ok()) return s;
  ++dynamic_sites_;
  const uint32_t iter = NewScalar(fb::ScalarType::I64);
  absl::StatusOr<std::pair<uint32_t, uint32_t>> loop = OpenLoop(iter, isa::ValueRegister(len));
  if (!loop.ok()) return loop.status();
  PushScope();
  const uint32_t item = NewObject(fb::ObjectKind::Tensor, q->dtype);
  if (absl::Status s = Op(Opcode::kSeqAt, {item, *qr, iter}); !s.ok()) return s;
  uint32_t piece = item;
  if (new_axis) {
    // Elements are contiguous (see Shareable), so the unsqueeze is a reshape.
    std::vector<uint32_t> unsq;
    for (int k = 0; k < r; ++k) {
      const uint32_t d = NewScalar(fb::ScalarType::I64);
      if (absl::Status s = Op(Opcode::kDim, {d, item, static_cast<uint32_t>(k)}); !s.ok()) return s;
      unsq.push_back(isa::ValueRegister(d));
    }
    unsq.insert(unsq.begin() + a, 1);
    piece = NewObject(fb::ObjectKind::Tensor, q->dtype);
    w.Begin(Opcode::kReshape);
    w.Word(piece);
    w.Word(item);
    w.List(unsq);
    if (absl::Status s = w.End(); !s.ok()) return s;
  }
  if (absl::Status s = Op(Opcode::kAppend, {result, piece, a}); !s.ok()) return s;
  PopScope();
  if (absl::Status s = CloseLoop(*loop); !s.ok()) return s;
  reg_[out] = result;
  return DefineDynamicSymbols(out, result);
}

absl::Status FunctionCodegen::EmitSplitToSequence(Node& n) {
  Value* out = n.outputs[0];
  const Value* x = n.inputs[0];
  if (!x->shape)
    return absl::UnimplementedError(absl::StrCat(n.Label(), ": the input's rank is unknown"));
  const int r = x->rank();
  int64_t axis = n.attr("axis") != nullptr ? n.attr("axis")->i : 0;
  if (axis < 0) axis += r;
  const uint32_t a = static_cast<uint32_t>(axis);
  const bool keepdims = n.attr("keepdims") == nullptr || n.attr("keepdims")->i != 0;
  const Value* split = n.inputs.size() > 1 ? n.inputs[1] : nullptr;
  if (split != nullptr && (!split->shape || split->rank() > 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.Label(), ": 'split' must be a scalar or a 1-D tensor"));
  }
  // Chunks are views of a contiguous tensor copied into fresh storage each.
  absl::StatusOr<uint32_t> xr = Shareable(x);
  if (!xr.ok()) return xr.status();
  std::vector<uint32_t> d(r), stride(r);
  for (int k = 0; k < r; ++k) {
    d[k] = NewScalar(fb::ScalarType::I64);
    if (absl::Status s = Op(Opcode::kDim, {d[k], *xr, static_cast<uint32_t>(k)}); !s.ok()) return s;
  }
  absl::StatusOr<uint32_t> one = EvalDim(sym_.Const(1));
  if (!one.ok()) return one.status();
  absl::StatusOr<uint32_t> esize = EvalDim(sym_.Const(DTypeSize(x->dtype)));
  if (!esize.ok()) return esize.status();
  for (int k = r - 1; k >= 0; --k) {
    stride[k] = NewScalar(fb::ScalarType::I64);
    if (k == r - 1) {
      if (absl::Status s = Op(Opcode::kMovS, {stride[k], *one}); !s.ok()) return s;
    } else if (absl::Status s = Op(Opcode::kMulI, {stride[k], stride[k + 1], d[k + 1]}); !s.ok()) {
      return s;
    }
  }
  const uint32_t row_bytes = NewScalar(fb::ScalarType::I64);
  if (absl::Status s = Op(Opcode::kMovS, {row_bytes, *esize}); !s.ok()) return s;
  for (int k = 0; k < r; ++k) {
    if (k == static_cast<int>(a)) continue;
    if (absl::Status s = Op(Opcode::kMulI, {row_bytes, row_bytes, d[k]}); !s.ok()) return s;
  }
  // The number of chunks.
  const uint32_t count = NewScalar(fb::ScalarType::I64);
  uint32_t chunk = 0, split_reg = 0, acc = 0;
  const bool list = split != nullptr && split->rank() == 1;
  if (split == nullptr) {
    if (absl::Status s = Op(Opcode::kMovS, {count, d[a]}); !s.ok()) return s;
  } else if (!list) {
    absl::StatusOr<uint32_t> c = ScalarOf(split);
    if (!c.ok()) return c.status();
    chunk = *c;
    const uint32_t positive = NewScalar(fb::ScalarType::Bool);
    absl::StatusOr<uint32_t> zero = EvalDim(sym_.Const(0));
    if (!zero.ok()) return zero.status();
    if (absl::Status s = Op(Opcode::kLtI, {positive, *zero, chunk}); !s.ok()) return s;
    if (absl::Status s =
            Op(Opcode::kAssert,
               {positive, b_.String(absl::StrCat(n.Label(), ": 'split' must be positive"))});
        !s.ok()) {
      return s;
    }
    // ceil(d / c) = (d + c - 1) div c
    if (absl::Status s = Op(Opcode::kAddI, {count, d[a], chunk}); !s.ok()) return s;
    if (absl::Status s = Op(Opcode::kSubI, {count, count, *one}); !s.ok()) return s;
    if (absl::Status s = Op(Opcode::kDivI, {count, count, chunk}); !s.ok()) return s;
  } else {
    absl::StatusOr<uint32_t> sr = Tensor(split);
    if (!sr.ok()) return sr.status();
    split_reg = *sr;
    if (absl::Status s = Op(Opcode::kNumel, {count, split_reg}); !s.ok()) return s;
    acc = NewScalar(fb::ScalarType::I64);
    CodeWriter w(code_);
    w.Begin(Opcode::kConstI);
    w.Word(acc);
    w.Imm64(0);
    if (absl::Status s = w.End(); !s.ok()) return s;
  }
  const uint32_t result = NewTensorReg(out);
  if (absl::Status s = Op(Opcode::kSeqNew, {result}); !s.ok()) return s;
  const uint32_t iter = NewScalar(fb::ScalarType::I64);
  absl::StatusOr<std::pair<uint32_t, uint32_t>> loop = OpenLoop(iter, isa::ValueRegister(count));
  if (!loop.ok()) return loop.status();
  PushScope();
  uint32_t start = iter, len = *one;
  if (split != nullptr && !list) {
    start = NewScalar(fb::ScalarType::I64);
    len = NewScalar(fb::ScalarType::I64);
    if (absl::Status s = Op(Opcode::kMulI, {start, iter, chunk}); !s.ok()) return s;
    if (absl::Status s = Op(Opcode::kSubI, {len, d[a], start}); !s.ok()) return s;
    if (absl::Status s = Op(Opcode::kMinI, {len, len, chunk}); !s.ok()) return s;
  } else if (list) {
    start = NewScalar(fb::ScalarType::I64);
    len = NewScalar(fb::ScalarType::I64);
    if (absl::Status s = Op(Opcode::kMovS, {start, acc}); !s.ok()) return s;
    if (absl::Status s = Op(Opcode::kReadI, {len, split_reg, isa::ValueRegister(iter)}); !s.ok())
      return s;
    if (absl::Status s = Op(Opcode::kAddI, {acc, acc, len}); !s.ok()) return s;
  }
  const uint32_t offset = NewScalar(fb::ScalarType::I64);
  if (absl::Status s = Op(Opcode::kMulI, {offset, start, stride[a]}); !s.ok()) return s;
  std::vector<uint32_t> dims, strides;
  for (int k = 0; k < r; ++k) {
    dims.push_back(isa::ValueRegister(k == static_cast<int>(a) ? len : d[k]));
    strides.push_back(isa::ValueRegister(stride[k]));
  }
  CodeWriter w(code_);
  const uint32_t view = NewObject(fb::ObjectKind::Tensor, x->dtype);
  w.Begin(Opcode::kView);
  w.Word(view);
  w.Word(*xr);
  w.Word(isa::ValueRegister(offset));
  w.List(dims);
  w.List(strides);
  if (absl::Status s = w.End(); !s.ok()) return s;
  const uint32_t bytes = NewScalar(fb::ScalarType::I64);
  if (absl::Status s = Op(Opcode::kMulI, {bytes, row_bytes, len}); !s.ok()) return s;
  const uint32_t st = NewObject(fb::ObjectKind::Storage, DType::kF32);
  if (absl::Status s = Op(Opcode::kAllocStorage, {st, isa::ValueRegister(bytes), 0}); !s.ok())
    return s;
  const uint32_t item = NewObject(fb::ObjectKind::Tensor, x->dtype);
  w.Begin(Opcode::kAllocTensor);
  w.Word(item);
  w.Word(st);
  w.Word(0);
  w.Word(static_cast<uint32_t>(x->dtype));
  w.List(dims);
  if (absl::Status s = w.End(); !s.ok()) return s;
  if (absl::Status s = Op(Opcode::kCopy, {item, view}); !s.ok()) return s;
  uint32_t pushed = item;
  if (split == nullptr && !keepdims) {
    std::vector<uint32_t> squeezed = dims;
    squeezed.erase(squeezed.begin() + a);
    pushed = NewObject(fb::ObjectKind::Tensor, x->dtype);
    w.Begin(Opcode::kReshape);
    w.Word(pushed);
    w.Word(item);
    w.List(squeezed);
    if (absl::Status s = w.End(); !s.ok()) return s;
  }
  if (absl::Status s = Op(Opcode::kSeqPush, {result, pushed}); !s.ok()) return s;
  PopScope();
  if (absl::Status s = CloseLoop(*loop); !s.ok()) return s;
  if (list) {
    const uint32_t ok = NewScalar(fb::ScalarType::Bool);
    if (absl::Status s = Op(Opcode::kEqI, {ok, acc, d[a]}); !s.ok()) return s;
    if (absl::Status s = Op(Opcode::kAssert,
                            {ok, b_.String(absl::StrCat(
                                     n.Label(), ": the 'split' lengths must add up to the axis"))});
        !s.ok()) {
      return s;
    }
  }
  reg_[out] = result;
  return absl::OkStatus();
}

bool FunctionCodegen::PoolOwned(const Value* v) {
  if (v->constant) return false;
  const Value* root = Root(v);
  const Store store = info_[root].store;
  if (store == Store::kPool || store == Store::kDynamic) return true;
  if (store != Store::kRegister || root->producer == nullptr || !IsOnnx(*root->producer, "Loop"))
    return false;
  // Loop results: growables and scan outputs are pool-owned; a carried value is when the
  // body makes it in its own pool storage.
  const Node& loop = *root->producer;
  const size_t nc = loop.inputs.size() - 2;
  size_t idx = 0;
  while (idx < loop.outputs.size() && loop.outputs[idx] != root) ++idx;
  if (idx >= nc) return true;
  if (growable_carried_[&loop][idx]) return true;
  const Value* out = loop.subgraph("body")->outputs[1 + idx];
  if (out == loop.subgraph("body")->inputs[2 + idx]) return PoolOwned(loop.inputs[2 + idx]);
  // After zero iterations the result is the initial value, so that must be pool-owned too.
  const Store s = info_[Root(out)].store;
  return (s == Store::kPool || s == Store::kDynamic) && !double_root_of_.contains(out) &&
         PoolOwned(loop.inputs[2 + idx]);
}

absl::Status FunctionCodegen::Finish() {
  // Outputs: pool-owned values are returned as they are; anything in the arena, a constant
  // or an input is copied into its own pool storage, so outputs survive the next run.
  CodeWriter w(code_);
  std::vector<uint32_t> rets;
  for (const Value* v : g_.outputs) {
    absl::StatusOr<uint32_t> r = Tensor(v);
    if (!r.ok()) return r.status();
    if (IsContainer(v)) {  // its tensors are shareable (fresh pool storage or constants)
      rets.push_back(*r);
      continue;
    }
    // Compiled for a device, every output is copied: the copy lands on the host.
    if (PoolOwned(v) && (opts_.device == Device::kCPU || !v->shape)) {
      rets.push_back(*r);
      continue;
    }
    if (!v->shape) return Internal("an output of unknown shape is not pool-owned");
    Dim bytes = sym_.Const(DTypeSize(v->dtype));
    for (Dim d : *v->shape) bytes = sym_.Mul(bytes, d);
    absl::StatusOr<uint32_t> size = ValueWord(bytes);
    if (!size.ok()) return size.status();
    absl::StatusOr<std::vector<uint32_t>> dims = DimWords(*v->shape);
    if (!dims.ok()) return dims.status();
    const uint32_t st = NewObject(fb::ObjectKind::Storage, DType::kF32);
    const uint32_t copy = NewTensorReg(v);
    w.Begin(Opcode::kAllocStorage);
    w.Word(st);
    w.Word(*size);
    w.Word(0);
    if (absl::Status s = w.End(); !s.ok()) return s;
    w.Begin(Opcode::kAllocTensor);
    w.Word(copy);
    w.Word(st);
    w.Word(0);
    w.Word(static_cast<uint32_t>(v->dtype));
    w.List(*dims);
    if (absl::Status s = w.End(); !s.ok()) return s;
    w.Begin(Opcode::kCopy);
    w.Word(copy);
    w.Word(*r);
    if (absl::Status s = w.End(); !s.ok()) return s;
    rets.push_back(copy);
  }
  w.Begin(Opcode::kRet);
  w.List(rets);
  w.List({});
  return w.End();
}

absl::StatusOr<FunctionReport> FunctionCodegen::Run() {
  b_.exe().functions.push_back(std::make_unique<fb::FunctionT>());
  fn_ = b_.exe().functions.back().get();
  fn_->name = f_.name;
  code_ = &fn_->code;
  scopes_.emplace_back();

  // Inputs are the first object registers.
  auto sig = std::make_unique<fb::SignatureT>();
  for (const Value* in : g_.inputs) {
    const uint32_t reg = NewTensorReg(in);
    reg_[in] = reg;
    info_[in].store = Store::kParam;
    auto p = std::make_unique<fb::ParamT>();
    p->name = in->name.empty() ? absl::StrCat("input_", reg) : in->name;
    p->dtype = static_cast<uint8_t>(in->dtype);
    p->kind = FbKind(in->kind);
    if (!in->shape) {
      p->has_shape = false;
    } else {
      for (Dim d : *in->shape) {
        auto dim = std::make_unique<fb::DimT>();
        if (auto c = SymbolicContext::AsConst(d)) {
          dim->value = *c;
        } else if (SymbolicContext::IsSymbol(d)) {
          dim->symbol = d->name;
        } else if (IsContainer(in)) {
          dim->symbol = SymbolicContext::ToString(d);  // element dims: only constants are checked
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat("input '", p->name, "' has a computed dim"));
        }
        p->shape.push_back(std::move(dim));
      }
    }
    sig->inputs.push_back(std::move(p));
  }
  fn_->num_object_params = static_cast<uint32_t>(g_.inputs.size());
  for (const Value* out : g_.outputs) {
    if (out == nullptr) return absl::InvalidArgumentError("a function output is missing");
    fn_->object_results.emplace_back(FbKind(out->kind), static_cast<uint8_t>(out->dtype),
                                     FbKind(out->elem_kind));
    auto p = std::make_unique<fb::ParamT>();
    p->name = out->name.empty() ? absl::StrCat("output_", sig->outputs.size()) : out->name;
    p->dtype = static_cast<uint8_t>(out->dtype);
    p->kind = FbKind(out->kind);
    if (!out->shape) {
      p->has_shape = false;
    } else {
      for (Dim d : *out->shape) {
        auto dim = std::make_unique<fb::DimT>();
        if (auto c = SymbolicContext::AsConst(d)) {
          dim->value = *c;
        } else {
          dim->symbol = SymbolicContext::IsSymbol(d) ? d->name : SymbolicContext::ToString(d);
        }
        p->shape.push_back(std::move(dim));
      }
    }
    sig->outputs.push_back(std::move(p));
  }
  // Output names must be unique: suffix duplicates.
  {
    absl::flat_hash_set<std::string> seen;
    for (auto& p : sig->outputs) {
      std::string base = p->name;
      for (int k = 1; !seen.insert(p->name).second; ++k) p->name = absl::StrCat(base, "_", k);
    }
  }
  fn_->signature = std::move(sig);
  for (const auto& [name, bound] : opts_.bounds) {
    auto b = std::make_unique<fb::SymbolBoundT>();
    b->name = name;
    b->bound = bound;
    fn_->bounds.push_back(std::move(b));
  }

  // Analysis.
  Number(g_);
  CollectUses(g_);
  if (absl::Status s = Classify(g_); !s.ok()) return s;
  // Function outputs live in their own pool storage.
  for (const Value* out : g_.outputs) {
    Info& info = info_[Root(out)];
    if (info.store == Store::kArena) info.store = Store::kPool;
    function_outputs_.insert(Root(out));
  }
  // Tensors kept in a sequence or optional outlive their arena slot: pool storage.
  std::function<void(Graph&)> kept = [&](Graph& g) {
    for (auto& n : g.nodes) {
      for (auto& [name, sub] : n->subgraphs) kept(*sub);
      if (!n->domain.empty()) continue;
      for (size_t i = 0; i < n->inputs.size(); ++i) {
        const bool held = n->op == "SequenceConstruct" || (n->op == "SequenceInsert" && i == 1) ||
                          (n->op == "Optional" && i == 0);
        if (!held || n->inputs[i] == nullptr || IsContainer(n->inputs[i])) continue;
        Info& info = info_[Root(n->inputs[i])];
        if (info.store == Store::kArena) info.store = Store::kPool;
      }
    }
  };
  kept(g_);
  for (auto& [v, info] : info_) {
    if (info.store == Store::kLazy) info.materialize = NeedsTensor(v);
  }
  // A loop-carried value that comes out of an If (a branch's value, or a value of the body
  // that a branch passes on) is live across the back edge, into the next iteration, until the
  // carried input's last use; which branch made it is known only at run time, so alternating
  // arena slots per iteration would not be safe (a branch that passes the carried value
  // through skips a write). Such values get pool storage of their own instead: a fresh block
  // per iteration from the pool's free lists, freed when the carried register moves on.
  std::function<void(const Value*, Graph*)> pool_carried = [&](const Value* v, Graph* body) {
    const Value* root = Root(v);
    if (root->graph == nullptr || !body->Contains(root->graph)) return;
    const Node* p = root->producer;
    if (p != nullptr && IsOnnx(*p, "If")) {
      size_t k = 0;
      while (k < p->outputs.size() && p->outputs[k] != root) ++k;
      if (k == p->outputs.size()) return;
      for (const char* br : {"then_branch", "else_branch"}) {
        Graph* branch = p->subgraph(br);
        if (branch != nullptr && k < branch->outputs.size()) pool_carried(branch->outputs[k], body);
      }
      return;
    }
    Info& ri = info_[root];
    if (ri.store == Store::kArena) ri.store = Store::kPool;
  };
  std::function<void(Graph&)> carried_ifs = [&](Graph& g) {
    for (auto& n : g.nodes) {
      for (auto& [name, sub] : n->subgraphs) carried_ifs(*sub);
      if (!IsOnnx(*n, "Loop")) continue;
      Graph* body = n->subgraph("body");
      const size_t nc = n->inputs.size() - 2;
      for (size_t i = 0; i < nc; ++i) {
        if (growable_carried_[n.get()][i]) continue;
        const Value* root = Root(body->outputs[1 + i]);
        if (root->producer != nullptr && IsOnnx(*root->producer, "If")) pool_carried(root, body);
      }
    }
  };
  carried_ifs(g_);
  // Loop-carried values computed into the arena are double-buffered.
  std::function<void(Graph&)> doubles = [&](Graph& g) {
    for (auto& n : g.nodes) {
      for (auto& [name, sub] : n->subgraphs) doubles(*sub);
      if (!IsOnnx(*n, "Loop")) continue;
      Graph* body = n->subgraph("body");
      const size_t nc = n->inputs.size() - 2;
      for (size_t i = 0; i < nc; ++i) {
        if (growable_carried_[n.get()][i]) continue;
        const Value* out = body->outputs[1 + i];
        const Value* root = Root(out);
        if (root->graph == nullptr || !body->Contains(root->graph)) continue;
        Info& ri = info_[root];
        if (ri.store != Store::kArena || root->producer == nullptr) continue;
        if (ri.allocs.empty()) {
          ri.allocs.push_back(NewAlloc(root));
          ri.allocs.push_back(NewAlloc(root));
        }
        double_root_of_[out] = root;
      }
    }
  };
  doubles(g_);
  Liveness();
  Place();

  // Emission: the arena, the constants, the input symbols, then the body.
  CodeWriter w(code_);
  for (size_t i = 0; i < g_.inputs.size(); ++i) {
    if (absl::Status s = DefineDynamicSymbols(g_.inputs[i], static_cast<uint32_t>(i)); !s.ok())
      return s;
  }
  for (size_t i = 0; i < g_.inputs.size(); ++i) {
    if (absl::Status s = DefineContentSymbol(g_.inputs[i], static_cast<uint32_t>(i)); !s.ok())
      return s;
  }
  if (arena_bytes_ > 0) {
    arena_reg_ = NewObject(fb::ObjectKind::Storage, DType::kF32);
    absl::StatusOr<uint32_t> size = ValueWord(sym_.Const(arena_bytes_));
    if (!size.ok()) return size.status();
    w.Begin(Opcode::kAllocStorage);
    w.Word(arena_reg_);
    w.Word(*size);
    w.Word(0);
    if (absl::Status s = w.End(); !s.ok()) return s;
    if (opts_.device != Device::kCPU) {
      // The device arena mirrors the host arena's layout: a value placed on the device uses
      // its planned offset there.
      device_arena_reg_ = NewObject(fb::ObjectKind::Storage, DType::kF32);
      w.Begin(Opcode::kAllocStorage);
      w.Word(device_arena_reg_);
      w.Word(*size);
      w.Word(static_cast<uint32_t>(opts_.device));
      if (absl::Status s = w.End(); !s.ok()) return s;
    }
  }
  // Constants used anywhere in the function are loaded once, at entry.
  {
    std::vector<const Value*> consts;
    for (const auto& [v, list] : uses_) {
      if (v->constant) consts.push_back(v);
    }
    std::sort(consts.begin(), consts.end(),
              [](const Value* a, const Value* b) { return a->id < b->id; });
    for (const Value* v : consts) {
      if (v->content && !NeedsTensor(v)) continue;
      const uint32_t reg = NewTensorReg(v);
      w.Begin(Opcode::kLoadConst);
      w.Word(reg);
      w.Word(b_.ConstantOf(v));
      if (absl::Status s = w.End(); !s.ok()) return s;
      reg_[v] = reg;
    }
  }
  if (absl::Status s = EmitGraph(g_); !s.ok()) return s;
  if (absl::Status s = Finish(); !s.ok()) return s;
  fn_->num_invoke_sites = site_;

  FunctionReport report;
  report.name = f_.name;
  report.arena_bytes = arena_bytes_;
  report.dynamic_alloc_sites = dynamic_sites_;
  report.output_allocs = output_allocs_;
  report.loop_alloc_sites = loop_sites_;
  report.largest_live_bytes = largest_live_;
  report.num_values = static_cast<int>(info_.size());
  report.invokes = invokes_;
  for (uint32_t pc = 0; pc < code_->size(); pc += isa::HeaderLength((*code_)[pc]))
    ++report.instructions;
  return report;
}

}  // namespace

absl::StatusOr<FunctionReport> GenerateFunction(Module& module, const Function& function,
                                                uint32_t index, ExecutableBuilder& builder,
                                                const CompileOptions& options) {
  return FunctionCodegen(module, function, index, builder, options).Run();
}

}  // namespace dynvm::compiler
