// Memory planning for one function: where every value's data lives (docs/compiler.md,
// "Memory planning"). Internal to the compiler; code generation (codegen.cc) reads the plan
// and never changes it.
//
// Every value gets a storage class. Values of bounded size share one arena per function,
// placed by liveness (greedy, largest first); values in a loop body reuse their slots every
// iteration; loop-carried values computed into the arena are double-buffered (the write
// offset swaps at the back edge); a Concat onto a loop-carried value becomes an in-place
// append into a growable storage; values of unbounded size get a pool storage sized by scalar
// code; data-dependent values are allocated by their kernel. Function outputs, tensors kept in
// sequences or optionals, and loop-carried values that come out of an If or a nested Loop never
// live in the arena. A value that is a register set elsewhere (an If or Loop result, a body's
// carried input) keeps every slot that may hold its data live until its last use.
#ifndef DYNVM_COMPILER_MEMORY_PLAN_H_
#define DYNVM_COMPILER_MEMORY_PLAN_H_

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/compiler.h"
#include "compiler/ir.h"
#include "compiler/symbolic.h"

namespace dynvm::compiler {

// --disable-rewrite attention_present_in_place (CompileOptions::disabled_rewrites): an attention
// operator's present KV cache is written into fresh storage each iteration (past copied), not
// extended in place over its loop-carried past (an A/B switch; docs/llm.md).
inline constexpr char kPresentInPlaceSwitch[] = "attention_present_in_place";

// Where a value's data lives.
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

// One arena slot: its size, the time span it is live in (node clock ticks), its offset.
struct ArenaSlot {
  int64_t size = 0;
  int64_t start = std::numeric_limits<int64_t>::max();
  int64_t end = -1;
  int64_t offset = -1;
  void Cover(int64_t a, int64_t b) {
    start = std::min(start, a);
    end = std::max(end, b);
  }
};

// The plan of one value.
struct ValuePlan {
  Store store = Store::kNone;
  const Value* alias_of = nullptr;  // kAlias: the value it views
  std::vector<int> slots;           // arena slots holding its data (two when double-buffered)
  bool materialize = false;         // kLazy: also needed as a tensor
  int64_t def = -1;                 // clock tick of its definition
  int64_t last_use = -1;            // clock tick of its last use (loops extended)
};

// A use of a value: the node that reads it (null when it is an output of `graph`).
using Use = std::pair<const Node*, Graph*>;

// Predicates shared by planning and emission.
bool IsOnnx(const Node& n, absl::string_view op);
// A shape computation of known integer content, kept as scalar code.
bool IsLazyOp(const Node& n);
bool IsContainer(const Value* v);  // a sequence or an optional
// ONNX sequence and optional operators, lowered to seq_* / opt_* instructions; Identity of a
// sequence or optional is a move.
bool IsContainerOp(const Node& n);
// Container ops whose output is a plain small tensor, stored like any kernel output.
bool HasTensorResult(const Node& n);
// Ops that only change how a tensor is viewed.
bool IsViewOp(const Node& n);

class MemoryPlan {
 public:
  // Plans `g`, a function's top-level graph.
  static absl::StatusOr<MemoryPlan> Make(Graph& g, SymbolicContext& sym,
                                         const CompileOptions& options);

  // The plan of v (a default kNone plan for a value the planner never saw).
  const ValuePlan& of(const Value* v) const;
  // The value whose storage v's data is in (following views).
  const Value* Root(const Value* v) const;
  // Whether v is read as a tensor (not only as shape content) somewhere.
  bool NeedsTensor(const Value* v) const;
  // Where v is read; empty when unused.
  const std::vector<Use>& UsesOf(const Value* v) const;
  bool HasUses(const Value* v) const { return uses_.contains(v); }
  const absl::flat_hash_map<const Value*, std::vector<Use>>& uses() const { return uses_; }

  const std::vector<ArenaSlot>& slots() const { return slots_; }
  int64_t arena_bytes() const { return arena_bytes_; }
  int64_t largest_live_bytes() const { return largest_live_; }

  // A Concat onto a loop-carried value, lowered to an in-place append.
  bool IsAppend(const Node* n) const { return append_nodes_.contains(n); }
  // For a present output of an attention node (GroupQueryAttention, MultiHeadAttention,
  // Attention 23) that is the body's next value of a loop-carried past: that carried past (the
  // node's own past input), whose growable storage the output extends in place (`extend`, and
  // the kernel writes past ++ new over it without copying the past's rows); null otherwise.
  const Value* InPlacePresentOf(const Value* present) const;
  // Per carried value of a Loop node: whether it grows by appends (a growable storage).
  const std::vector<bool>& GrowableCarried(const Node* loop) const;
  // For a body output of a carried value computed into the arena: the value it is the root
  // of, double-buffered (two slots); null otherwise.
  const Value* DoubleRootOf(const Value* body_output) const;
  // v is the root of a function output (in its own pool storage).
  bool IsFunctionOutput(const Value* v) const { return function_outputs_.contains(v); }
  // The values a register value may be (the branch values of an If result; the initial value
  // and the body's value of a Loop result or carried input); empty for any other value.
  std::vector<const Value*> RegisterSources(const Value* root) const;
  // v may be a growable storage grown along another axis than the first (strided within its
  // capacity): not contiguous.
  bool MayBeStrided(const Value* v) const;
  // How many values the plan covers (the compile report's num_values).
  int num_values() const { return static_cast<int>(values_.size()); }

 private:
  friend class Planner;
  MemoryPlan() = default;
  bool MayBeStrided(const Value* v, absl::flat_hash_set<const Value*>& seen) const;

  absl::flat_hash_map<const Value*, std::vector<Use>> uses_;
  absl::flat_hash_map<const Value*, ValuePlan> values_;
  std::vector<ArenaSlot> slots_;
  int64_t arena_bytes_ = 0;
  int64_t largest_live_ = 0;
  absl::flat_hash_set<const Node*> append_nodes_;
  absl::flat_hash_map<const Value*, const Value*> in_place_present_;
  absl::flat_hash_map<const Node*, std::vector<bool>> growable_carried_;
  absl::flat_hash_map<const Value*, const Value*> double_root_of_;
  absl::flat_hash_set<const Value*> function_outputs_;
};

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_MEMORY_PLAN_H_
