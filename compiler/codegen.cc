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
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/memory_plan.h"
#include "compiler/ops/names.h"
#include "isa/code_builder.h"
#include "isa/instruction.h"
#include "isa/opcodes.h"
#include "isa/operands.h"

namespace dynvm::compiler {
namespace {

using isa::Opcode;
namespace op = isa::op;

fb::ObjectKind FbKind(ObjectKind k) { return static_cast<fb::ObjectKind>(static_cast<uint8_t>(k)); }

class FunctionCodegen {
 public:
  FunctionCodegen(Module& m, const Function& f, uint32_t index, ExecutableBuilder& b,
                  const CompileOptions& o, const MemoryPlan& plan)
      : m_(m),
        sym_(m.sym()),
        f_(f),
        g_(*f.graph),
        index_(index),
        b_(b),
        opts_(o),
        plan_(plan),
        fn_(NewFunction(b)),
        bc_(&fn_->code) {}

  absl::StatusOr<FunctionReport> Run();

 private:
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
  // The steps of EmitLoop, in order.
  struct LoopEmission;
  absl::Status EmitTripCount(LoopEmission& loop);
  absl::Status EmitRunningCondition(LoopEmission& loop);
  absl::Status EmitCarriedInit(LoopEmission& loop);
  void EmitDoubleBufferOffsets(LoopEmission& loop);
  absl::Status EmitScanStorages(LoopEmission& loop);
  void EmitCapacityRegisters(LoopEmission& loop);
  absl::Status EmitBodyEntry(LoopEmission& loop);
  absl::Status EmitBody(LoopEmission& loop);
  absl::Status EmitScanAppends(LoopEmission& loop);
  absl::Status EmitRebind(LoopEmission& loop);
  absl::Status EmitLoopResults(LoopEmission& loop);
  // The capacity of a growable storage along its growth axis: `total` (the extent it reaches;
  // null when unknown) when that has an upper bound below 2^31, else 16, grown geometrically
  // by append. The flag says whether it is bounded.
  std::pair<Dim, bool> GrowableCapacity(Dim total);
  Dim GrowthPerIteration(const Value& next, int rank, uint32_t* axis);
  // The signature: input and output names, dtypes and dims; the symbol bounds.
  absl::Status EmitSignature();
  // The arena storages and the constants, at function entry.
  absl::Status EmitEntry();
  // Allocates v's planned storage on `device` (arena values view the device arena, which has
  // the host arena's layout).
  absl::Status EmitAllocFor(const Value* v, uint32_t reg, Device device = Device::kCPU);
  // Device placement (CompileOptions::device): where `n` runs, and whether v is on the device.
  Device PlaceKernel(const Node& n, const std::vector<bool>& dynamic);
  bool OnDevice(const Value* v) const { return on_device_.contains(plan_.Root(v)); }
  absl::Status EmitMaterializeLazy(const Value* v);
  // Binds the fresh symbols of v's shape to the dims of register `reg`; with `check_known`, the
  // dims the compiler claimed are checked too (a kernel's dynamic output).
  absl::Status DefineDynamicSymbols(const Value* v, uint32_t reg, bool check_known = false);
  // Reads the symbolic contents of a function input (BindScalarInputs) into a scalar register.
  absl::Status DefineContentSymbol(const Value* in, uint32_t reg);
  // `d` with each induction dim of the loops being emitted replaced by its capacity.
  Dim WithCapacities(Dim d);
  absl::StatusOr<uint32_t> Tensor(const Value* v);  // the register holding v as a tensor
  absl::StatusOr<uint32_t> EvalDim(Dim d);
  absl::StatusOr<uint32_t> ValueWord(Dim d);
  absl::StatusOr<std::vector<uint32_t>> DimWords(const std::vector<Dim>& dims);
  absl::Status Finish();
  absl::StatusOr<uint32_t> CopyOfUnknownRank(const Value* v, uint32_t reg);
  uint32_t CopyToPool(const Value* v, uint32_t r);
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
  bool Defined(Dim sym) const {
    for (const Scope& s : scopes_) {
      if (s.dims.contains(sym)) return true;
    }
    return false;
  }
  static fb::FunctionT* NewFunction(ExecutableBuilder& b) {
    b.exe().functions.push_back(std::make_unique<fb::FunctionT>());
    return b.exe().functions.back().get();
  }
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
  const MemoryPlan& plan_;
  fb::FunctionT* fn_;
  isa::CodeBuilder bc_;  // writes fn_->code

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
// Emission helpers

absl::StatusOr<uint32_t> FunctionCodegen::EvalDim(Dim d) {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto f = it->dims.find(d);
    if (f != it->dims.end()) return f->second;
  }
  uint32_t r;
  switch (d->kind) {
    case DimNode::Kind::kConst:
      r = NewScalar(fb::ScalarType::I64);
      bc_.Emit<op::ConstI>(r, d->value);
      break;
    case DimNode::Kind::kSymbol:
      return Internal(absl::StrCat("symbol '", d->name, "' is used before it is defined"));
    default: {
      DYNVM_ASSIGN_OR_RETURN(const uint32_t a, EvalDim(d->a));
      DYNVM_ASSIGN_OR_RETURN(const uint32_t b, EvalDim(d->b));
      r = NewScalar(fb::ScalarType::I64);
      switch (d->kind) {
        case DimNode::Kind::kMul:
          bc_.Emit<op::MulI>(r, a, b);
          break;
        case DimNode::Kind::kFloorDiv:
          bc_.Emit<op::DivI>(r, a, b);
          break;
        case DimNode::Kind::kMax:
          bc_.Emit<op::MaxI>(r, a, b);
          break;
        case DimNode::Kind::kMin:
          bc_.Emit<op::MinI>(r, a, b);
          break;
        default:  // kAdd
          bc_.Emit<op::AddI>(r, a, b);
          break;
      }
    }
  }
  BindSymbol(d, r);
  return r;
}

absl::StatusOr<uint32_t> FunctionCodegen::ValueWord(Dim d) {
  if (auto c = SymbolicContext::AsConst(d);
      c && *c >= 0 && *c < static_cast<int64_t>(isa::kRegisterFlag)) {
    return static_cast<uint32_t>(*c);
  }
  DYNVM_ASSIGN_OR_RETURN(uint32_t r, EvalDim(d));
  return isa::ValueRegister(r);
}

absl::StatusOr<std::vector<uint32_t>> FunctionCodegen::DimWords(const std::vector<Dim>& dims) {
  std::vector<uint32_t> words;
  for (Dim d : dims) {
    DYNVM_ASSIGN_OR_RETURN(uint32_t w, ValueWord(d));
    words.push_back(w);
  }
  return words;
}

absl::Status FunctionCodegen::EmitAllocFor(const Value* v, uint32_t reg, Device device) {
  const ValuePlan& info = plan_.of(v);
  DYNVM_ASSIGN_OR_RETURN(std::vector<uint32_t> dims, DimWords(*v->shape));
  if (info.store == Store::kPool || info.slots.empty()) {
    Dim bytes = sym_.Const(DTypeSize(v->dtype));
    for (Dim d : *v->shape) bytes = sym_.Mul(bytes, d);
    if (!capacity_of_.empty()) {
      // Sized for the capacities of the loop's induction dims (never below the value's size).
      const Dim capped = WithCapacities(bytes);
      if (capped != bytes) bytes = sym_.Max(bytes, capped);
    }
    DYNVM_ASSIGN_OR_RETURN(uint32_t size, ValueWord(bytes));
    const uint32_t st = NewObject(fb::ObjectKind::Storage, DType::kF32);
    bc_.Emit<op::AllocStorage>(st, size, static_cast<uint32_t>(device));
    bc_.Emit<op::AllocTensor>(reg, st, 0, static_cast<uint32_t>(v->dtype), dims);
    // A function output gets fresh storage each run (so it survives the next run); that is
    // not a planning failure, and the report counts it apart.
    if (plan_.IsFunctionOutput(v)) {
      ++output_allocs_;
    } else {
      CountAllocSite();
    }
    // The tensor keeps the storage alive; the storage register would keep it past its use.
    bc_.Emit<op::Kill>(st);
    return absl::OkStatus();
  }
  uint32_t offset_word;
  auto d = double_offsets_.find(v);
  if (d != double_offsets_.end()) {
    offset_word = isa::ValueRegister(d->second.first);
  } else {
    const int64_t off = plan_.slots()[info.slots[0]].offset;
    if (off < static_cast<int64_t>(isa::kRegisterFlag)) {
      offset_word = static_cast<uint32_t>(off);
    } else {
      DYNVM_ASSIGN_OR_RETURN(uint32_t r, EvalDim(sym_.Const(off)));
      offset_word = isa::ValueRegister(r);
    }
  }
  bc_.Emit<op::AllocTensor>(reg, device == Device::kCPU ? arena_reg_ : device_arena_reg_,
                            offset_word, static_cast<uint32_t>(v->dtype), dims);
  return absl::OkStatus();
}

absl::Status FunctionCodegen::DefineDynamicSymbols(const Value* v, uint32_t reg, bool check_known) {
  if (!v->shape || IsContainer(v)) return absl::OkStatus();
  // The kernel decided the dims: fresh symbols are bound to them. A dim the shape function
  // claimed (a constant, or an expression of symbols already defined: NonZero's rank, a Conv's
  // channels with symbolic spatial dims) is checked, so a kernel and a shape function that
  // disagree give an error naming the node, never a program that trusts the wrong size.
  for (size_t i = 0; i < v->shape->size(); ++i) {
    Dim d = (*v->shape)[i];
    if (SymbolicContext::IsSymbol(d) && !Defined(d)) {
      const uint32_t r = NewScalar(fb::ScalarType::I64);
      bc_.Emit<op::Dim>(r, reg, static_cast<uint32_t>(i));
      BindSymbol(d, r);
      continue;
    }
    if (!check_known) continue;
    std::vector<Dim> syms;
    sym_.CollectSymbols(d, &syms);
    bool known = true;
    for (Dim s : syms) known &= Defined(s);
    if (!known) continue;
    DYNVM_ASSIGN_OR_RETURN(const uint32_t want, EvalDim(d));
    const uint32_t got = NewScalar(fb::ScalarType::I64);
    bc_.Emit<op::Dim>(got, reg, static_cast<uint32_t>(i));
    const uint32_t same = NewScalar(fb::ScalarType::Bool);
    bc_.Emit<op::EqI>(same, got, want);
    const std::string producer =
        v->producer != nullptr ? v->producer->Label() : absl::StrCat("value '", v->name, "'");
    bc_.Emit<op::Assert>(
        same, b_.String(absl::StrCat(producer, ": output ", v->output_index, " has dim ", i,
                                     " other than the compiler inferred (",
                                     SymbolicContext::ToString(d), ")")));
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
  if (Defined(sym)) return absl::OkStatus();
  // The symbol is the input's value read once: a Loop's trip count (BindScalarInputs). A
  // negative count runs no iteration (ONNX Runtime's and PyTorch's reading), so the symbol is
  // max(value, 0); it is checked against its declared bound, since the plan relies on that.
  const uint32_t r = NewScalar(fb::ScalarType::I64);
  bc_.Emit<op::ReadI>(r, reg, 0);
  DYNVM_ASSIGN_OR_RETURN(uint32_t zero, EvalDim(sym_.Const(0)));
  bc_.Emit<op::MaxI>(r, r, zero);
  BindSymbol(sym, r);
  auto check = [&](uint32_t lo, uint32_t hi, const std::string& message) -> absl::Status {
    const uint32_t ok = NewScalar(fb::ScalarType::Bool);
    bc_.Emit<op::LeI>(ok, lo, hi);
    bc_.Emit<op::Assert>(ok, b_.String(message));
    return absl::OkStatus();
  };
  if (std::optional<int64_t> bound = sym_.BoundOf(sym->name)) {
    DYNVM_ASSIGN_OR_RETURN(uint32_t b, EvalDim(sym_.Const(*bound)));
    return check(r, b,
                 absl::StrCat("symbol '", sym->name, "' exceeds its declared bound ", *bound,
                              " (input '", in->name, "')"));
  }
  return absl::OkStatus();
}

absl::Status FunctionCodegen::EmitMaterializeLazy(const Value* v) {
  const uint32_t reg = NewTensorReg(v);
  DYNVM_RETURN_IF_ERROR(EmitAllocFor(v, reg));
  const std::vector<Dim>& content = *v->content;
  for (size_t k = 0; k < content.size(); ++k) {
    DYNVM_ASSIGN_OR_RETURN(uint32_t x, EvalDim(content[k]));
    bc_.Emit<op::Write>(reg, static_cast<uint32_t>(k), x);
  }
  reg_[v] = reg;
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> FunctionCodegen::Tensor(const Value* v) {
  auto it = reg_.find(v);
  if (it != reg_.end()) return it->second;
  const ValuePlan& info = plan_.of(v);
  if (info.store == Store::kLazy) {
    DYNVM_RETURN_IF_ERROR(EmitMaterializeLazy(v));
    return reg_[v];
  }
  return Internal(absl::StrCat("value %", v->id, " (", v->TypeString(), ") has no register here"));
}

// ---------------------------------------------------------------------------------------------
// Emission

std::vector<std::vector<const Value*>> FunctionCodegen::KillsAfter(Graph& g) {
  std::vector<std::vector<const Value*>> kills(g.nodes.size());
  // A function's own graph and loop bodies; not If branches (their values may be the If's
  // results).
  if (g.owner != nullptr && !IsOnnx(*g.owner, ops::kLoop)) return kills;
  absl::flat_hash_map<const Node*, size_t> index;
  for (size_t i = 0; i < g.nodes.size(); ++i) index[g.nodes[i].get()] = i;
  for (auto& n : g.nodes) {
    for (const Value* v : n->outputs) {
      if (v == nullptr || v->constant) continue;
      const ValuePlan& info = plan_.of(v);
      const Store root = plan_.of(plan_.Root(v)).store;
      if ((info.store != Store::kPool && info.store != Store::kDynamic &&
           info.store != Store::kAlias) ||
          (root != Store::kPool && root != Store::kDynamic)) {
        continue;
      }
      // The last node of this body that reads v (itself or in its regions); none if v leaves
      // the iteration (a body output).
      int64_t last = -1;
      bool escapes = false;
      for (const auto& [node, graph] : plan_.UsesOf(v)) {
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

namespace {

// The node's label for the debug section (run-time errors, profiles): inside a body or branch,
// prefixed with the regions around it, e.g. "Loop 'decode': body: Add 'add_1'".
std::string LocationLabel(const Graph& g, const Node& n) {
  std::string label = n.Label();
  for (const Graph* r = &g; r->owner != nullptr; r = r->parent) {
    std::string region = "body";
    for (const auto& [name, sub] : r->owner->subgraphs) {
      if (sub.get() == r) region = name;
    }
    label = absl::StrCat(r->owner->Label(), ": ", region, ": ", label);
    if (r->parent == nullptr) break;
  }
  return label;
}

}  // namespace

absl::Status FunctionCodegen::EmitGraph(Graph& g) {
  // Pool values of a loop body, and of the function itself, are released at their last use, so
  // that later values (and the next iteration) reuse their blocks: the pool then serves a body
  // whose sizes grow every iteration like an arena, with no more memory than the live values
  // need, and an unbounded function (a decode's prompt step) holds only its live values.
  const std::vector<std::vector<const Value*>> kills = KillsAfter(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node* n = g.nodes[i].get();
    b_.Location(index_, bc_.pc(), LocationLabel(g, *n));
    if (absl::Status s = EmitNode(*n); !s.ok()) {
      if (s.code() == absl::StatusCode::kInternal || absl::StrContains(s.message(), n->Label()))
        return s;
      return absl::Status(s.code(), absl::StrCat(n->Label(), ": ", s.message()));
    }
    for (const Value* v : kills[i]) {
      auto r = reg_.find(v);
      if (r == reg_.end()) continue;
      bc_.Emit<op::Kill>(r->second);
    }
  }
  return absl::OkStatus();
}

absl::Status FunctionCodegen::EmitNode(Node& n) {
  if (IsOnnx(n, ops::kIf)) return EmitIf(n);
  if (IsOnnx(n, ops::kLoop)) return EmitLoop(n);
  if (!n.subgraphs.empty()) {
    return absl::UnimplementedError(
        absl::StrCat(n.Label(), ": control-flow op ", n.op, " is not supported yet"));
  }
  if (IsContainerOp(n)) return EmitContainerOp(n);
  if (plan_.IsAppend(&n)) return EmitAppend(n);
  if (n.domain == ops::kDynvmDomain && n.op == ops::kEmit) return EmitStream(n);
  bool all_constant = !n.outputs.empty();
  for (const Value* v : n.outputs) {
    if (v && !v->constant) all_constant = false;
  }
  if (all_constant) return absl::OkStatus();
  if (IsLazyOp(n)) {
    for (const Value* v : n.outputs) {
      if (v && plan_.of(v).materialize) {
        DYNVM_RETURN_IF_ERROR(EmitMaterializeLazy(v));
      }
    }
    return absl::OkStatus();
  }
  if (IsViewOp(n) && n.outputs[0] && plan_.of(n.outputs[0]).store == Store::kAlias)
    return EmitView(n);
  return EmitKernel(n);
}

absl::Status FunctionCodegen::EmitView(Node& n) {
  const Value* out = n.outputs[0];
  DYNVM_ASSIGN_OR_RETURN(uint32_t in, Tensor(n.inputs[0]));
  const uint32_t reg = NewTensorReg(out);
  if (n.op == ops::kIdentity || n.op == ops::kDropout) {
    bc_.Emit<op::Mov>(reg, in);
  } else {
    DYNVM_ASSIGN_OR_RETURN(const std::vector<uint32_t> dims, DimWords(*out->shape));
    bc_.Emit<op::Reshape>(reg, in, dims);
  }
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
  // Present outputs extended in place over their carried past (MemoryPlan::InPlacePresentOf):
  // the kernel reads the past through a copy of the carried register's view, and the register,
  // extended to the present's length, is the output.
  std::vector<std::pair<const Value*, uint32_t>> past_views, in_place;
  for (const Value* v : n.outputs) {
    const Value* past = v != nullptr ? plan_.InPlacePresentOf(v) : nullptr;
    if (past == nullptr) continue;
    DYNVM_ASSIGN_OR_RETURN(const uint32_t carried, Tensor(past));
    const uint32_t view = NewTensorReg(past);
    bc_.Emit<op::Mov>(view, carried);
    past_views.emplace_back(past, view);
    in_place.emplace_back(v, carried);
  }
  auto find = [](const std::vector<std::pair<const Value*, uint32_t>>& list, const Value* v) {
    auto it = std::find_if(list.begin(), list.end(), [v](const auto& e) { return e.first == v; });
    return it == list.end() ? std::optional<uint32_t>() : std::optional<uint32_t>(it->second);
  };
  for (const auto& [v, carried] : in_place) {
    DYNVM_ASSIGN_OR_RETURN(const uint32_t length, ValueWord((*v->shape)[2]));
    bc_.Emit<op::Extend>(carried, 2u, length);
  }
  for (const Value* v : n.inputs) {
    if (v == nullptr) {
      ins.push_back(isa::kAbsentRegister);
      continue;
    }
    if (IsContainer(v)) {
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), ": an input is a ", v->TypeString(),
                                                     "; ", n.op, " takes tensors"));
    }
    if (std::optional<uint32_t> view = find(past_views, v)) {
      ins.push_back(*view);
      continue;
    }
    DYNVM_ASSIGN_OR_RETURN(uint32_t r, Tensor(v));
    ins.push_back(r);
  }
  std::vector<bool> dynamic(n.outputs.size(), false);
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const Value* v = n.outputs[i];
    if (v == nullptr) continue;
    const Store store = plan_.of(v).store;
    dynamic[i] = store == Store::kDynamic || store == Store::kNone || store == Store::kLazy;
  }
  const Device device = PlaceKernel(n, dynamic);
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const Value* v = n.outputs[i];
    if (v == nullptr) {
      outs.push_back(isa::kAbsentRegister);
      continue;
    }
    if (std::optional<uint32_t> carried = find(in_place, v)) {
      outs.push_back(*carried);
      reg_[v] = *carried;
      continue;
    }
    const uint32_t reg = NewTensorReg(v);
    if (dynamic[i]) {
      CountAllocSite();
    } else {
      DYNVM_RETURN_IF_ERROR(EmitAllocFor(v, reg, device));
    }
    if (device != Device::kCPU) on_device_.insert(v);
    outs.push_back(reg);
    reg_[v] = reg;
  }
  DYNVM_ASSIGN_OR_RETURN(uint32_t k, b_.KernelFor(n, dynamic, device));
  if (opts_.check_kernels) {
    DYNVM_RETURN_IF_ERROR(b_.CheckKernel(k, n, dynamic, device));
  }
  bc_.Emit<op::Invoke>(k, site_++, ins, outs);
  ++invokes_;
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (n.outputs[i] && dynamic[i]) {
      DYNVM_RETURN_IF_ERROR(DefineDynamicSymbols(n.outputs[i], outs[i], /*check_known=*/true));
    }
  }
  return absl::OkStatus();
}

absl::Status FunctionCodegen::EmitAppend(Node& n) {
  // Concat(carried, x) lowered to an in-place append into the carried register.
  DYNVM_ASSIGN_OR_RETURN(uint32_t dst, Tensor(n.inputs[0]));
  DYNVM_ASSIGN_OR_RETURN(uint32_t x, Tensor(n.inputs[1]));
  int64_t axis = n.attr("axis")->i;
  if (axis < 0) axis += n.inputs[0]->rank();
  bc_.Emit<op::Append>(dst, x, static_cast<uint32_t>(axis));
  reg_[n.outputs[0]] = dst;
  return absl::OkStatus();
}

absl::Status FunctionCodegen::EmitStream(Node& n) {
  DYNVM_ASSIGN_OR_RETURN(uint32_t x, Tensor(n.inputs[0]));
  const AttrValue* stream = n.attr("stream");
  if (stream != nullptr &&
      (stream->type != AttrValue::Type::kInt || stream->i < 0 || stream->i > 0xFFFF)) {
    return absl::InvalidArgumentError("Emit: 'stream' must be an int in [0, 65535]");
  }
  bc_.Emit<op::Emit>(x, stream ? static_cast<uint32_t>(stream->i) : 0);
  return absl::OkStatus();
}

absl::Status FunctionCodegen::EmitIf(Node& n) {
  DYNVM_ASSIGN_OR_RETURN(uint32_t cond_t, Tensor(n.inputs[0]));
  const uint32_t c = NewScalar(fb::ScalarType::Bool);
  bc_.Emit<op::ReadB>(c, cond_t, 0u);
  std::vector<uint32_t> out_regs;
  for (const Value* v : n.outputs) out_regs.push_back(v ? NewTensorReg(v) : 0);
  isa::CodeBuilder::IfScope branch = bc_.If(c);
  for (const char* name : {"then_branch", "else_branch"}) {
    if (name[0] == 'e') branch.Else();
    Graph* g = n.subgraph(name);
    PushScope();
    DYNVM_RETURN_IF_ERROR(EmitGraph(*g));
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (!n.outputs[i]) continue;
      DYNVM_ASSIGN_OR_RETURN(const uint32_t r, Tensor(g->outputs[i]));
      bc_.Emit<op::Mov>(out_regs[i], r);
    }
    PopScope();
  }
  branch.Close();
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (!n.outputs[i]) continue;
    reg_[n.outputs[i]] = out_regs[i];
    DYNVM_RETURN_IF_ERROR(DefineDynamicSymbols(n.outputs[i], out_regs[i]));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Loops: one Loop node is emitted in the steps below, which share a LoopEmission.

struct FunctionCodegen::LoopEmission {
  explicit LoopEmission(Node& loop)
      : n(loop),
        body(loop.subgraph("body")),
        nc(loop.inputs.size() - 2),
        ns(body->outputs.size() - 1 - nc),
        m(loop.inputs[0]) {}
  Node& n;
  Graph* body;
  size_t nc;       // carried values
  size_t ns;       // scan outputs
  const Value* m;  // the trip count input (may be null)
  uint32_t trip_word = 0;
  uint32_t cond = 0;                                 // the running condition (a bool register)
  uint32_t iter = 0;                                 // the iteration counter
  std::vector<uint32_t> carried;                     // carried registers
  std::vector<std::pair<uint32_t, uint32_t>> swaps;  // double-buffer offset registers
  std::vector<uint32_t> scans, scan_caps;
  std::vector<bool> scan_dims_known;
  // Unbounded induction dims and the register holding each one's capacity.
  struct Capacity {
    Dim dim;
    uint32_t reg;
  };
  std::vector<Capacity> capacities;
};

// How a growable carried value grows per iteration along its axis (set in *axis): the rows a
// Concat appends, or the new keys an attention operator's present adds to its past (the
// query's length for GroupQueryAttention, whose present may be longer: max(total, P)); null
// when unknown.
Dim FunctionCodegen::GrowthPerIteration(const Value& next, int rank, uint32_t* axis) {
  const Node& p = *next.producer;
  if (IsOnnx(p, ops::kConcat)) {
    const int64_t a = p.attr("axis")->i;
    *axis = static_cast<uint32_t>(a < 0 ? a + rank : a);
    const Value* x = p.inputs[1];
    return x->shape ? (*x->shape)[*axis] : nullptr;
  }
  *axis = 2;  // an attention present [B, heads, T, H]
  const Value* past = plan_.InPlacePresentOf(&next);
  if (past != nullptr && past->shape && next.shape) {
    // The present's length less the past's, when that is a number; else the new keys'.
    if (sym_.AsConst(sym_.Sub((*next.shape)[2], (*past->shape)[2]))) {
      return sym_.Sub((*next.shape)[2], (*past->shape)[2]);
    }
  }
  const bool gqa = p.op == "GroupQueryAttention";
  const Value* keys =
      gqa || p.inputs.size() < 2 || p.inputs[1] == nullptr ? p.inputs[0] : p.inputs[1];
  if (keys == nullptr || !keys->shape) return nullptr;
  const std::vector<Dim>& d = *keys->shape;
  if (d.size() == 3) return d[1];          // [B, L, hidden]
  if (d.size() == 4 && !gqa) return d[2];  // [B, N, L, H]
  return nullptr;
}

std::pair<Dim, bool> FunctionCodegen::GrowableCapacity(Dim total) {
  if (total != nullptr) {
    if (auto ub = sym_.UpperBound(total); ub && *ub < (int64_t{1} << 31)) {
      return {sym_.Const(*ub), true};
    }
  }
  return {sym_.Const(16), false};
}

absl::Status FunctionCodegen::EmitLoop(Node& n) {
  LoopEmission loop(n);
  DYNVM_RETURN_IF_ERROR(EmitTripCount(loop));
  DYNVM_RETURN_IF_ERROR(EmitRunningCondition(loop));
  DYNVM_RETURN_IF_ERROR(EmitCarriedInit(loop));
  EmitDoubleBufferOffsets(loop);
  DYNVM_RETURN_IF_ERROR(EmitScanStorages(loop));
  EmitCapacityRegisters(loop);
  loop.iter = NewScalar(fb::ScalarType::I64);
  {
    isa::CodeBuilder::LoopScope scope = bc_.Loop(loop.iter, loop.trip_word);
    scope.BreakUnless(loop.cond);
    PushScope();
    DYNVM_RETURN_IF_ERROR(EmitBodyEntry(loop));
    DYNVM_RETURN_IF_ERROR(EmitBody(loop));
    DYNVM_RETURN_IF_ERROR(EmitScanAppends(loop));
    DYNVM_RETURN_IF_ERROR(EmitRebind(loop));
    PopScope();
  }  // endloop
  return EmitLoopResults(loop);
}

// The trip count as a value word: an immediate, its content's scalar, or read from the tensor.
absl::Status FunctionCodegen::EmitTripCount(LoopEmission& loop) {
  const Value* m = loop.m;
  if (m == nullptr) {
    const uint32_t r = NewScalar(fb::ScalarType::I64);
    bc_.Emit<op::ConstI>(r, std::numeric_limits<int64_t>::max());
    loop.trip_word = isa::ValueRegister(r);
  } else if (m->content && m->content->size() == 1) {
    DYNVM_ASSIGN_OR_RETURN(loop.trip_word, ValueWord((*m->content)[0]));
  } else {
    DYNVM_ASSIGN_OR_RETURN(const uint32_t t, Tensor(m));
    const uint32_t r = NewScalar(fb::ScalarType::I64);
    bc_.Emit<op::ReadI>(r, t, 0u);
    loop.trip_word = isa::ValueRegister(r);
  }
  return absl::OkStatus();
}

absl::Status FunctionCodegen::EmitRunningCondition(LoopEmission& loop) {
  loop.cond = NewScalar(fb::ScalarType::Bool);
  if (loop.n.inputs[1] == nullptr) {
    bc_.Emit<op::ConstB>(loop.cond, 1u);
  } else {
    DYNVM_ASSIGN_OR_RETURN(const uint32_t t, Tensor(loop.n.inputs[1]));
    bc_.Emit<op::ReadB>(loop.cond, t, 0u);
  }
  return absl::OkStatus();
}

// Carried registers take their initial values; a carried value grown by appends gets a
// growable storage, sized for its final extent when the trip count is bounded.
absl::Status FunctionCodegen::EmitCarriedInit(LoopEmission& loop) {
  Node& n = loop.n;
  Graph* body = loop.body;
  const std::vector<bool>& grow = plan_.GrowableCarried(&n);
  loop.carried.resize(loop.nc);
  for (size_t i = 0; i < loop.nc; ++i) {
    const Value* init = n.inputs[2 + i];
    const Value* in = body->inputs[2 + i];
    DYNVM_ASSIGN_OR_RETURN(const uint32_t src, Tensor(init));
    const uint32_t reg = NewTensorReg(in);
    loop.carried[i] = reg;
    if (grow[i]) {
      uint32_t axis = 0;
      Dim step = GrowthPerIteration(*body->outputs[1 + i], init->rank(), &axis);
      DYNVM_ASSIGN_OR_RETURN(const std::vector<uint32_t> dims, DimWords(*init->shape));
      // The extent reached: the initial one plus one step per iteration.
      Dim total = nullptr;
      if (loop.m && loop.m->content && step != nullptr) {
        total = sym_.Add((*init->shape)[axis], sym_.Mul((*loop.m->content)[0], step));
      }
      const auto [cap_dim, bounded] = GrowableCapacity(total);
      DYNVM_ASSIGN_OR_RETURN(const uint32_t cap, ValueWord(cap_dim));
      bc_.Emit<op::AllocGrowable>(reg, static_cast<uint32_t>(init->dtype), 0u, axis, cap, dims);
      CountAllocSite(/*grows_in_loop=*/!bounded);
      bc_.Emit<op::Copy>(reg, src);
    } else {
      bc_.Emit<op::Mov>(reg, src);
    }
    reg_[in] = reg;
    if (n.outputs[i]) reg_[n.outputs[i]] = reg;
  }
  return absl::OkStatus();
}

// Carried values computed into the arena alternate between two slots: a register holds each
// slot's offset, swapped at the back edge.
void FunctionCodegen::EmitDoubleBufferOffsets(LoopEmission& loop) {
  for (size_t i = 0; i < loop.nc; ++i) {
    const Value* root = plan_.DoubleRootOf(loop.body->outputs[1 + i]);
    if (root == nullptr || double_offsets_.contains(root)) continue;
    const ValuePlan& ri = plan_.of(root);
    const uint32_t a = NewScalar(fb::ScalarType::I64), b = NewScalar(fb::ScalarType::I64);
    bc_.Emit<op::ConstI>(a, plan_.slots()[ri.slots[0]].offset);
    bc_.Emit<op::ConstI>(b, plan_.slots()[ri.slots[1]].offset);
    double_offsets_[root] = {a, b};
    loop.swaps.emplace_back(a, b);
  }
}

// Scan outputs accumulate in growable storages.
absl::Status FunctionCodegen::EmitScanStorages(LoopEmission& loop) {
  loop.scans.resize(loop.ns);
  loop.scan_caps.resize(loop.ns, 0);
  loop.scan_dims_known.resize(loop.ns, true);
  for (size_t k = 0; k < loop.ns; ++k) {
    const Value* elem = loop.body->outputs[1 + loop.nc + k];
    const Value* out = loop.n.outputs[loop.nc + k];
    loop.scans[k] = NewObject(fb::ObjectKind::Tensor, elem->dtype);
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
      for (Dim s : syms) known &= Defined(s);
    }
    if (!known) {
      for (size_t d = 1; d < dims.size(); ++d) dims[d] = sym_.Const(0);
    }
    loop.scan_dims_known[k] = known;
    DYNVM_ASSIGN_OR_RETURN(const std::vector<uint32_t> words, DimWords(dims));
    const auto [cap_dim, bounded] =
        GrowableCapacity(loop.m && loop.m->content ? (*loop.m->content)[0] : nullptr);
    DYNVM_ASSIGN_OR_RETURN(loop.scan_caps[k], ValueWord(cap_dim));
    bc_.Emit<op::AllocGrowable>(loop.scans[k], static_cast<uint32_t>(elem->dtype), 0u, 0u,
                                loop.scan_caps[k], words);
    CountAllocSite(/*grows_in_loop=*/!bounded);
    if (out) reg_[out] = loop.scans[k];
  }
  return absl::OkStatus();
}

// Unbounded induction dims (a carried dim the body advances by a constant step) get a
// capacity: a scalar that doubles when the dim outgrows it. Pool values of the body are sized
// for the capacity, so they keep their size (and their pool blocks) between doublings.
void FunctionCodegen::EmitCapacityRegisters(LoopEmission& loop) {
  for (size_t i = 0; i < loop.nc; ++i) {
    const Value* in = loop.body->inputs[2 + i];
    const Value* out = loop.body->outputs[1 + i];
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
      for (const LoopEmission::Capacity& c : loop.capacities) seen |= c.dim == d;
      if (seen) continue;
      const uint32_t r = NewScalar(fb::ScalarType::I64);
      bc_.Emit<op::ConstI>(r, int64_t{0});
      loop.capacities.push_back({d, r});
    }
  }
}

// The body's inputs: the iteration number and condition as values, the carried dims re-read,
// and each capacity grown when its dim outgrew it.
absl::Status FunctionCodegen::EmitBodyEntry(LoopEmission& loop) {
  Graph* body = loop.body;
  const Value* iter_v = body->inputs[0];
  if (iter_v->content) BindSymbol((*iter_v->content)[0], loop.iter);
  if (plan_.of(iter_v).store == Store::kLazy && plan_.of(iter_v).materialize) {
    DYNVM_RETURN_IF_ERROR(EmitMaterializeLazy(iter_v));
  }
  const Value* cond_v = body->inputs[1];
  if (plan_.HasUses(cond_v)) {
    const uint32_t reg = NewTensorReg(cond_v);
    DYNVM_RETURN_IF_ERROR(EmitAllocFor(cond_v, reg));
    bc_.Emit<op::Write>(reg, 0u, loop.cond);
    reg_[cond_v] = reg;
  }
  for (size_t i = 0; i < loop.nc; ++i) {
    DYNVM_RETURN_IF_ERROR(DefineDynamicSymbols(body->inputs[2 + i], loop.carried[i]));
  }
  for (const LoopEmission::Capacity& c : loop.capacities) {
    // capacity := dim > capacity ? 2 * dim : capacity
    DYNVM_ASSIGN_OR_RETURN(const uint32_t d, EvalDim(c.dim));
    const uint32_t outgrown = NewScalar(fb::ScalarType::Bool),
                   twice = NewScalar(fb::ScalarType::I64);
    bc_.Emit<op::LtI>(outgrown, c.reg, d);
    bc_.Emit<op::AddI>(twice, d, d);
    bc_.Emit<op::SelectI>(c.reg, outgrown, twice, c.reg);
    const Dim cap = sym_.Fresh("cap");
    BindSymbol(cap, c.reg);
    capacity_of_[c.dim] = cap;
  }
  return absl::OkStatus();
}

absl::Status FunctionCodegen::EmitBody(LoopEmission& loop) {
  ++loop_depth_;
  absl::Status status = EmitGraph(*loop.body);
  --loop_depth_;
  for (const LoopEmission::Capacity& c : loop.capacities) capacity_of_.erase(c.dim);
  return status;
}

// Each scan output's element is appended to its storage.
absl::Status FunctionCodegen::EmitScanAppends(LoopEmission& loop) {
  for (size_t k = 0; k < loop.ns; ++k) {
    const Value* elem = loop.body->outputs[1 + loop.nc + k];
    DYNVM_ASSIGN_OR_RETURN(uint32_t e, Tensor(elem));
    // The reshape below needs a contiguous element: one that may be grown along another axis
    // than the first (strided in its growable storage) is copied first.
    if (plan_.MayBeStrided(elem)) e = CopyToPool(elem, e);
    std::vector<Dim> dims{sym_.Const(1)};
    dims.insert(dims.end(), elem->shape->begin(), elem->shape->end());
    DYNVM_ASSIGN_OR_RETURN(const std::vector<uint32_t> words, DimWords(dims));
    if (!loop.scan_dims_known[k]) {
      // The element dims are known only inside the body: the first iteration makes the
      // growable storage again with them (append needs the other dims to agree).
      dims[0] = sym_.Const(0);
      DYNVM_ASSIGN_OR_RETURN(const std::vector<uint32_t> empty, DimWords(dims));
      const uint32_t zero = NewScalar(fb::ScalarType::I64), first = NewScalar(fb::ScalarType::Bool);
      bc_.Emit<op::ConstI>(zero, int64_t{0});
      bc_.Emit<op::EqI>(first, loop.iter, zero);
      {
        isa::CodeBuilder::IfScope first_iteration = bc_.If(first);
        bc_.Emit<op::AllocGrowable>(loop.scans[k], static_cast<uint32_t>(elem->dtype), 0u, 0u,
                                    loop.scan_caps[k], empty);
      }
      CountAllocSite();
    }
    const uint32_t one = NewObject(fb::ObjectKind::Tensor, elem->dtype);
    bc_.Emit<op::Reshape>(one, e, words);
    bc_.Emit<op::Append>(loop.scans[k], one, 0u);
  }
  return absl::OkStatus();
}

// The back edge: the carried values rebound in one parallel move, the double-buffer offsets
// swapped, and the condition for the next iteration read.
absl::Status FunctionCodegen::EmitRebind(LoopEmission& loop) {
  Graph* body = loop.body;
  const std::vector<bool>& grow = plan_.GrowableCarried(&loop.n);
  std::vector<uint32_t> dst, src;
  for (size_t i = 0; i < loop.nc; ++i) {
    if (grow[i]) continue;
    const Value* out = body->outputs[1 + i];
    if (out == body->inputs[2 + i]) continue;
    DYNVM_ASSIGN_OR_RETURN(uint32_t r, Tensor(out));
    const Value* in = body->inputs[2 + i];
    if (in->kind == ObjectKind::kOptional && out->kind != ObjectKind::kOptional) {
      // The body makes the content of a carried optional: wrap it.
      const uint32_t wrapped = NewTensorReg(in);
      bc_.Emit<op::OptSome>(wrapped, r);
      r = wrapped;
    }
    dst.push_back(loop.carried[i]);
    src.push_back(r);
  }
  if (!dst.empty()) bc_.Emit<op::PMove>(dst, src);
  if (!loop.swaps.empty()) {
    std::vector<uint32_t> sd, ss;
    for (auto [a, b] : loop.swaps) {
      sd.push_back(a);
      sd.push_back(b);
      ss.push_back(b);
      ss.push_back(a);
    }
    bc_.Emit<op::PMoveS>(sd, ss);
  }
  const Value* cond_out = body->outputs[0];
  if (cond_out != nullptr && cond_out != body->inputs[1]) {
    DYNVM_ASSIGN_OR_RETURN(const uint32_t t, Tensor(cond_out));
    bc_.Emit<op::ReadB>(loop.cond, t, 0u);
  }
  return absl::OkStatus();
}

// After the loop: a carried optional whose body makes its content yields the content, and
// the dims of dynamic results are read.
absl::Status FunctionCodegen::EmitLoopResults(LoopEmission& loop) {
  Node& n = loop.n;
  for (size_t i = 0; i < loop.nc; ++i) {
    const Value* res = n.outputs[i];
    if (res == nullptr || res->kind == loop.body->inputs[2 + i]->kind) continue;
    const uint32_t got = NewTensorReg(res);
    bc_.Emit<op::OptGet>(got, loop.carried[i]);
    reg_[res] = got;
  }
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (n.outputs[i] && n.outputs[i]->dynamic) {
      DYNVM_RETURN_IF_ERROR(DefineDynamicSymbols(n.outputs[i], reg_[n.outputs[i]]));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Sequences and optionals

absl::StatusOr<uint32_t> FunctionCodegen::ScalarOf(const Value* v) {
  if (v->content && v->content->size() == 1) return EvalDim((*v->content)[0]);
  DYNVM_ASSIGN_OR_RETURN(uint32_t t, Tensor(v));
  const uint32_t r = NewScalar(fb::ScalarType::I64);
  bc_.Emit<op::ReadI>(r, t, 0);
  return r;
}

absl::StatusOr<uint32_t> FunctionCodegen::Shareable(const Value* v) {
  DYNVM_ASSIGN_OR_RETURN(uint32_t r, Tensor(v));
  const Value* root = plan_.Root(v);
  const Store store = plan_.of(root).store;
  // Fresh contiguous storage every time the producer runs, or a read-only constant, or a
  // tensor already taken out of a container (which holds only such tensors).
  // String tensors are never in the arena and own (or share, refcounted) their bytes: they are
  // shared as they are (docs/strings.md).
  if (v->constant || root->constant || store == Store::kPool || store == Store::kDynamic ||
      v->dtype == DType::kString) {
    return r;
  }
  if (store == Store::kRegister && root->producer != nullptr && IsContainerOp(*root->producer) &&
      root->producer->op != ops::kConcatFromSequence) {
    return r;
  }
  if (!v->shape)
    return absl::UnimplementedError("a tensor of unknown rank kept in a sequence or optional");
  return CopyToPool(v, r);
}

// A contiguous copy of v (held in `r`, of known rank) in new pool storage, with the dims read
// from the register.
uint32_t FunctionCodegen::CopyToPool(const Value* v, uint32_t r) {
  const uint32_t rank = static_cast<uint32_t>(std::max(v->rank(), 0));
  std::vector<uint32_t> dims;
  const uint32_t bytes = NewScalar(fb::ScalarType::I64);
  bc_.Emit<op::Numel>(bytes, r);
  const uint32_t esize = NewScalar(fb::ScalarType::I64);
  bc_.Emit<op::ConstI>(esize, DTypeSize(v->dtype));
  bc_.Emit<op::MulI>(bytes, bytes, esize);
  for (uint32_t k = 0; k < rank; ++k) {
    const uint32_t d = NewScalar(fb::ScalarType::I64);
    bc_.Emit<op::Dim>(d, r, k);
    dims.push_back(isa::ValueRegister(d));
  }
  const uint32_t st = NewObject(fb::ObjectKind::Storage, DType::kF32);
  bc_.Emit<op::AllocStorage>(st, isa::ValueRegister(bytes), 0);
  const uint32_t copy = NewObject(fb::ObjectKind::Tensor, v->dtype);
  bc_.Emit<op::AllocTensor>(copy, st, 0, static_cast<uint32_t>(v->dtype), dims);
  bc_.Emit<op::Copy>(copy, r);
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
    DYNVM_ASSIGN_OR_RETURN(uint32_t r, Tensor(q));
    const std::vector<Use>& uses = plan_.UsesOf(q);
    const bool only_use = uses.size() == 1 && uses[0].first == &n;
    if (only_use && q->graph == n.graph && !q->constant && plan_.of(q).store != Store::kParam)
      return r;
    const uint32_t copy = NewTensorReg(out);
    bc_.Emit<op::Mov>(copy, r);
    return copy;
  };
  uint32_t result = 0;
  if (op == ops::kIdentity) {
    DYNVM_ASSIGN_OR_RETURN(uint32_t x, in(0));
    result = NewTensorReg(out);
    bc_.Emit<op::Mov>(result, x);
  } else if (op == ops::kSequenceEmpty) {
    result = NewTensorReg(out);
    bc_.Emit<op::SeqNew>(result);
  } else if (op == ops::kSequenceConstruct) {
    result = NewTensorReg(out);
    bc_.Emit<op::SeqNew>(result);
    for (const Value* v : n.inputs) {
      DYNVM_ASSIGN_OR_RETURN(uint32_t t, Shareable(v));
      bc_.Emit<op::SeqPush>(result, t);
    }
  } else if (op == ops::kSequenceInsert) {
    DYNVM_ASSIGN_OR_RETURN(uint32_t t, Shareable(n.inputs[1]));
    std::optional<uint32_t> pos;
    if (n.inputs.size() > 2 && n.inputs[2] != nullptr) {
      DYNVM_ASSIGN_OR_RETURN(uint32_t p, ScalarOf(n.inputs[2]));
      pos = p;
    }
    DYNVM_ASSIGN_OR_RETURN(uint32_t q, target(n.inputs[0]));
    result = q;
    if (pos) {
      bc_.Emit<op::SeqInsert>(result, t, *pos);
    } else {
      bc_.Emit<op::SeqPush>(result, t);
    }
  } else if (op == ops::kSequenceErase) {
    uint32_t pos;
    if (n.inputs.size() > 1 && n.inputs[1] != nullptr) {
      DYNVM_ASSIGN_OR_RETURN(uint32_t p, ScalarOf(n.inputs[1]));
      pos = p;
    } else {
      DYNVM_ASSIGN_OR_RETURN(uint32_t p, EvalDim(sym_.Const(-1)));
      pos = p;
    }
    DYNVM_ASSIGN_OR_RETURN(uint32_t q, target(n.inputs[0]));
    result = q;
    bc_.Emit<op::SeqErase>(result, pos);
  } else if (op == ops::kSequenceAt) {
    DYNVM_ASSIGN_OR_RETURN(uint32_t q, in(0));
    DYNVM_ASSIGN_OR_RETURN(uint32_t p, ScalarOf(n.inputs[1]));
    result = NewTensorReg(out);
    bc_.Emit<op::SeqAt>(result, q, p);
  } else if (op == ops::kSequenceLength) {
    DYNVM_ASSIGN_OR_RETURN(uint32_t q, in(0));
    const uint32_t len = NewScalar(fb::ScalarType::I64);
    bc_.Emit<op::SeqLen>(len, q);
    if (out->content && out->content->size() == 1) BindSymbol((*out->content)[0], len);
    result = NewTensorReg(out);
    DYNVM_RETURN_IF_ERROR(EmitAllocFor(out, result));
    bc_.Emit<op::Write>(result, 0, len);
  } else if (op == ops::kConcatFromSequence) {
    return EmitConcatFromSequence(n);
  } else if (op == ops::kSplitToSequence) {
    return EmitSplitToSequence(n);
  } else if (op == ops::kOptional) {
    result = NewTensorReg(out);
    if (n.inputs.empty() || n.inputs[0] == nullptr) {
      bc_.Emit<op::OptNone>(result);
    } else {
      DYNVM_ASSIGN_OR_RETURN(uint32_t x, IsContainer(n.inputs[0]) ? in(0) : Shareable(n.inputs[0]));
      bc_.Emit<op::OptSome>(result, x);
    }
  } else if (op == ops::kOptionalHasElement) {
    const uint32_t has = NewScalar(fb::ScalarType::Bool);
    const Value* x = n.inputs.empty() ? nullptr : n.inputs[0];
    if (x == nullptr || x->kind != ObjectKind::kOptional) {
      // Opset 18's forms: an absent input is empty, a tensor or sequence is present.
      bc_.Emit<op::ConstB>(has, x != nullptr ? 1 : 0);
    } else {
      DYNVM_ASSIGN_OR_RETURN(uint32_t o, in(0));
      bc_.Emit<op::OptHas>(has, o);
    }
    result = NewTensorReg(out);
    DYNVM_RETURN_IF_ERROR(EmitAllocFor(out, result));
    bc_.Emit<op::Write>(result, 0, has);
  } else if (op == ops::kOptionalGetElement) {
    DYNVM_ASSIGN_OR_RETURN(uint32_t o, in(0));
    result = NewTensorReg(out);
    const bool is_opt = n.inputs[0]->kind == ObjectKind::kOptional;
    if (is_opt) {
      bc_.Emit<op::OptGet>(result, o);
    } else {
      bc_.Emit<op::Mov>(result, o);
    }
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
  DYNVM_ASSIGN_OR_RETURN(uint32_t qr, Tensor(q));
  const uint32_t len = NewScalar(fb::ScalarType::I64);
  bc_.Emit<op::SeqLen>(len, qr);
  DYNVM_ASSIGN_OR_RETURN(uint32_t zero, EvalDim(sym_.Const(0)));
  absl::StatusOr<uint32_t> one = EvalDim(sym_.Const(1));
  if (!one.ok()) return one.status();
  // The first element (an empty sequence is an error) gives the other dims.
  const uint32_t first = NewObject(fb::ObjectKind::Tensor, q->dtype);
  bc_.Emit<op::SeqAt>(first, qr, zero);
  std::vector<uint32_t> dims;
  for (int k = 0; k < r; ++k) {
    const uint32_t d = NewScalar(fb::ScalarType::I64);
    bc_.Emit<op::Dim>(d, first, static_cast<uint32_t>(k));
    dims.push_back(d);
  }
  // The capacity is the result's extent along the axis, so that the result fills its storage
  // and is contiguous (spare capacity along another axis than the first would leave it
  // strided, and a reshape of it would fail): the elements' extents added up.
  const uint32_t cap = NewScalar(fb::ScalarType::I64);
  if (new_axis) {
    bc_.Emit<op::MovS>(cap, len);
  } else {
    bc_.Emit<op::ConstI>(cap, int64_t{0});
    const uint32_t at = NewScalar(fb::ScalarType::I64), extent = NewScalar(fb::ScalarType::I64);
    isa::CodeBuilder::LoopScope sum = bc_.Loop(at, isa::ValueRegister(len));
    const uint32_t element = NewObject(fb::ObjectKind::Tensor, q->dtype);
    bc_.Emit<op::SeqAt>(element, qr, at);
    bc_.Emit<op::Dim>(extent, element, a);
    bc_.Emit<op::AddI>(cap, cap, extent);
    sum.Close();
  }
  bc_.Emit<op::MaxI>(cap, cap, *one);
  std::vector<uint32_t> out_dims;
  for (uint32_t d : dims) out_dims.push_back(isa::ValueRegister(d));
  if (new_axis) {
    out_dims.insert(out_dims.begin() + a, 0);
  } else {
    out_dims[a] = 0;
  }
  const uint32_t result = NewTensorReg(out);
  bc_.Emit<op::AllocGrowable>(result, static_cast<uint32_t>(q->dtype), 0, a,
                              isa::ValueRegister(cap), out_dims);
  ++dynamic_sites_;
  const uint32_t iter = NewScalar(fb::ScalarType::I64);
  isa::CodeBuilder::LoopScope loop = bc_.Loop(iter, isa::ValueRegister(len));
  PushScope();
  const uint32_t item = NewObject(fb::ObjectKind::Tensor, q->dtype);
  bc_.Emit<op::SeqAt>(item, qr, iter);
  uint32_t piece = item;
  if (new_axis) {
    // Elements are contiguous (see Shareable), so the unsqueeze is a reshape.
    std::vector<uint32_t> unsq;
    for (int k = 0; k < r; ++k) {
      const uint32_t d = NewScalar(fb::ScalarType::I64);
      bc_.Emit<op::Dim>(d, item, static_cast<uint32_t>(k));
      unsq.push_back(isa::ValueRegister(d));
    }
    unsq.insert(unsq.begin() + a, 1);
    piece = NewObject(fb::ObjectKind::Tensor, q->dtype);
    bc_.Emit<op::Reshape>(piece, item, unsq);
  }
  bc_.Emit<op::Append>(result, piece, a);
  PopScope();
  loop.Close();
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
  DYNVM_ASSIGN_OR_RETURN(uint32_t xr, Shareable(x));
  std::vector<uint32_t> d(r), stride(r);
  for (int k = 0; k < r; ++k) {
    d[k] = NewScalar(fb::ScalarType::I64);
    bc_.Emit<op::Dim>(d[k], xr, static_cast<uint32_t>(k));
  }
  const uint32_t numel = NewScalar(fb::ScalarType::I64);
  bc_.Emit<op::Numel>(numel, xr);
  DYNVM_ASSIGN_OR_RETURN(uint32_t one, EvalDim(sym_.Const(1)));
  absl::StatusOr<uint32_t> esize = EvalDim(sym_.Const(DTypeSize(x->dtype)));
  if (!esize.ok()) return esize.status();
  for (int k = r - 1; k >= 0; --k) {
    stride[k] = NewScalar(fb::ScalarType::I64);
    if (k == r - 1) {
      bc_.Emit<op::MovS>(stride[k], one);
    } else
      bc_.Emit<op::MulI>(stride[k], stride[k + 1], d[k + 1]);
  }
  const uint32_t row_bytes = NewScalar(fb::ScalarType::I64);
  bc_.Emit<op::MovS>(row_bytes, *esize);
  for (int k = 0; k < r; ++k) {
    if (k == static_cast<int>(a)) continue;
    bc_.Emit<op::MulI>(row_bytes, row_bytes, d[k]);
  }
  // The number of chunks.
  const uint32_t count = NewScalar(fb::ScalarType::I64);
  uint32_t chunk = 0, split_reg = 0, acc = 0;
  const bool list = split != nullptr && split->rank() == 1;
  if (split == nullptr) {
    bc_.Emit<op::MovS>(count, d[a]);
  } else if (!list) {
    absl::StatusOr<uint32_t> c = ScalarOf(split);
    if (!c.ok()) return c.status();
    chunk = *c;
    const uint32_t positive = NewScalar(fb::ScalarType::Bool);
    absl::StatusOr<uint32_t> zero = EvalDim(sym_.Const(0));
    if (!zero.ok()) return zero.status();
    bc_.Emit<op::LtI>(positive, *zero, chunk);
    bc_.Emit<op::Assert>(positive,
                         b_.String(absl::StrCat(n.Label(), ": 'split' must be positive")));
    // ceil(d / c) = (d + c - 1) div c
    bc_.Emit<op::AddI>(count, d[a], chunk);
    bc_.Emit<op::SubI>(count, count, one);
    bc_.Emit<op::DivI>(count, count, chunk);
  } else {
    absl::StatusOr<uint32_t> sr = Tensor(split);
    if (!sr.ok()) return sr.status();
    split_reg = *sr;
    bc_.Emit<op::Numel>(count, split_reg);
    acc = NewScalar(fb::ScalarType::I64);
    bc_.Emit<op::ConstI>(acc, 0);
  }
  const uint32_t result = NewTensorReg(out);
  bc_.Emit<op::SeqNew>(result);
  const uint32_t iter = NewScalar(fb::ScalarType::I64);
  isa::CodeBuilder::LoopScope loop = bc_.Loop(iter, isa::ValueRegister(count));
  PushScope();
  uint32_t start = iter, len = one;
  if (split != nullptr && !list) {
    start = NewScalar(fb::ScalarType::I64);
    len = NewScalar(fb::ScalarType::I64);
    bc_.Emit<op::MulI>(start, iter, chunk);
    bc_.Emit<op::SubI>(len, d[a], start);
    bc_.Emit<op::MinI>(len, len, chunk);
  } else if (list) {
    start = NewScalar(fb::ScalarType::I64);
    len = NewScalar(fb::ScalarType::I64);
    bc_.Emit<op::MovS>(start, acc);
    bc_.Emit<op::ReadI>(len, split_reg, isa::ValueRegister(iter));
    bc_.Emit<op::AddI>(acc, acc, len);
  }
  const uint32_t offset = NewScalar(fb::ScalarType::I64);
  bc_.Emit<op::MulI>(offset, start, stride[a]);
  // An empty input (a dim other than the axis 0) has no bytes to offset into: every chunk
  // of it starts at 0 (at most the element count, where the chunks of any input end).
  bc_.Emit<op::MinI>(offset, offset, numel);
  std::vector<uint32_t> dims, strides;
  for (int k = 0; k < r; ++k) {
    dims.push_back(isa::ValueRegister(k == static_cast<int>(a) ? len : d[k]));
    strides.push_back(isa::ValueRegister(stride[k]));
  }
  const uint32_t view = NewObject(fb::ObjectKind::Tensor, x->dtype);
  bc_.Emit<op::View>(view, xr, isa::ValueRegister(offset), dims, strides);
  const uint32_t bytes = NewScalar(fb::ScalarType::I64);
  bc_.Emit<op::MulI>(bytes, row_bytes, len);
  const uint32_t st = NewObject(fb::ObjectKind::Storage, DType::kF32);
  bc_.Emit<op::AllocStorage>(st, isa::ValueRegister(bytes), 0);
  const uint32_t item = NewObject(fb::ObjectKind::Tensor, x->dtype);
  bc_.Emit<op::AllocTensor>(item, st, 0, static_cast<uint32_t>(x->dtype), dims);
  bc_.Emit<op::Copy>(item, view);
  uint32_t pushed = item;
  // keepdims = 0 drops the axis without `split` and with a scalar one (ONNX Runtime's reading,
  // see the shape function in compiler/ops/sequence.cc); a scalar split's chunks must be 1 long.
  if ((split == nullptr || !list) && !keepdims) {
    if (split != nullptr) {
      const uint32_t unit = NewScalar(fb::ScalarType::Bool);
      bc_.Emit<op::EqI>(unit, len, one);
      bc_.Emit<op::Assert>(unit,
                           b_.String(absl::StrCat(n.Label(),
                                                  ": keepdims = 0 with a scalar 'split' needs "
                                                  "chunks of 1 along the axis")));
    }
    std::vector<uint32_t> squeezed = dims;
    squeezed.erase(squeezed.begin() + a);
    pushed = NewObject(fb::ObjectKind::Tensor, x->dtype);
    bc_.Emit<op::Reshape>(pushed, item, squeezed);
  }
  bc_.Emit<op::SeqPush>(result, pushed);
  PopScope();
  loop.Close();
  if (list) {
    const uint32_t ok = NewScalar(fb::ScalarType::Bool);
    bc_.Emit<op::EqI>(ok, acc, d[a]);
    bc_.Emit<op::Assert>(
        ok, b_.String(absl::StrCat(n.Label(), ": the 'split' lengths must add up to the axis")));
  }
  reg_[out] = result;
  return absl::OkStatus();
}

bool FunctionCodegen::PoolOwned(const Value* v) {
  if (v->constant) return false;
  const Value* root = plan_.Root(v);
  const Store store = plan_.of(root).store;
  if (store == Store::kPool || store == Store::kDynamic) return true;
  if (store == Store::kRegister && root->producer != nullptr && IsOnnx(*root->producer, ops::kIf)) {
    // An If result is pool-owned when what each branch gives is.
    const Node& n = *root->producer;
    size_t idx = 0;
    while (idx < n.outputs.size() && n.outputs[idx] != root) ++idx;
    const Graph* then_g = n.subgraph("then_branch");
    const Graph* else_g = n.subgraph("else_branch");
    return idx < n.outputs.size() && then_g != nullptr && else_g != nullptr &&
           PoolOwned(then_g->outputs[idx]) && PoolOwned(else_g->outputs[idx]);
  }
  if (store != Store::kRegister || root->producer == nullptr ||
      !IsOnnx(*root->producer, ops::kLoop))
    return false;
  // Loop results: growables and scan outputs are pool-owned; a carried value is when the
  // body makes it in its own pool storage.
  const Node& loop = *root->producer;
  const size_t nc = loop.inputs.size() - 2;
  size_t idx = 0;
  while (idx < loop.outputs.size() && loop.outputs[idx] != root) ++idx;
  if (idx >= nc) return true;
  if (plan_.GrowableCarried(&loop)[idx]) return true;
  const Value* out = loop.subgraph("body")->outputs[1 + idx];
  if (out == loop.subgraph("body")->inputs[2 + idx]) return PoolOwned(loop.inputs[2 + idx]);
  // After zero iterations the result is the initial value, so that must be pool-owned too.
  const Store s = plan_.of(plan_.Root(out)).store;
  return (s == Store::kPool || s == Store::kDynamic) && plan_.DoubleRootOf(out) == nullptr &&
         PoolOwned(loop.inputs[2 + idx]);
}

// A copy of v (held in `reg`), whose rank only the run knows, into fresh pool storage: an
// Identity kernel with a dynamic output allocates it with v's dims, whatever their number.
absl::StatusOr<uint32_t> FunctionCodegen::CopyOfUnknownRank(const Value* v, uint32_t reg) {
  Node copy;
  copy.op = ops::kIdentity;
  copy.name = absl::StrCat("output '", v->name, "'");
  copy.inputs = {const_cast<Value*>(v)};
  copy.outputs = {const_cast<Value*>(v)};
  const std::vector<bool> dynamic = {true};
  DYNVM_ASSIGN_OR_RETURN(const uint32_t k, b_.KernelFor(copy, dynamic, Device::kCPU));
  if (opts_.check_kernels) DYNVM_RETURN_IF_ERROR(b_.CheckKernel(k, copy, dynamic, Device::kCPU));
  const uint32_t out = NewTensorReg(v);
  bc_.Emit<op::Invoke>(k, site_++, std::vector<uint32_t>{reg}, std::vector<uint32_t>{out});
  ++invokes_;
  ++output_allocs_;
  return out;
}

absl::Status FunctionCodegen::Finish() {
  // Outputs: pool-owned values are returned as they are; anything in the arena, a constant
  // or an input is copied into its own pool storage, so outputs survive the next run.
  std::vector<uint32_t> rets;
  for (const Value* v : g_.outputs) {
    DYNVM_ASSIGN_OR_RETURN(uint32_t r, Tensor(v));
    if (IsContainer(v)) {  // its tensors are shareable (fresh pool storage or constants)
      rets.push_back(r);
      continue;
    }
    // Compiled for a device, every output is copied: the copy lands on the host. A string
    // output is returned as it is: strings are never in the arena and their storage is
    // refcounted (an output of an input or a constant shares it; docs/strings.md).
    if ((PoolOwned(v) && (opts_.device == Device::kCPU || !v->shape)) ||
        v->dtype == DType::kString) {
      rets.push_back(r);
      continue;
    }
    if (!v->shape) {
      DYNVM_ASSIGN_OR_RETURN(const uint32_t copy, CopyOfUnknownRank(v, r));
      rets.push_back(copy);
      continue;
    }
    Dim bytes = sym_.Const(DTypeSize(v->dtype));
    for (Dim d : *v->shape) bytes = sym_.Mul(bytes, d);
    DYNVM_ASSIGN_OR_RETURN(uint32_t size, ValueWord(bytes));
    absl::StatusOr<std::vector<uint32_t>> dims = DimWords(*v->shape);
    if (!dims.ok()) return dims.status();
    const uint32_t st = NewObject(fb::ObjectKind::Storage, DType::kF32);
    const uint32_t copy = NewTensorReg(v);
    bc_.Emit<op::AllocStorage>(st, size, 0);
    bc_.Emit<op::AllocTensor>(copy, st, 0, static_cast<uint32_t>(v->dtype), *dims);
    bc_.Emit<op::Copy>(copy, r);
    rets.push_back(copy);
  }
  bc_.Emit<op::Ret>(rets, std::vector<uint32_t>{});
  return absl::OkStatus();
}

absl::StatusOr<FunctionReport> FunctionCodegen::Run() {
  fn_->name = f_.name;
  scopes_.emplace_back();
  DYNVM_RETURN_IF_ERROR(EmitSignature());
  DYNVM_RETURN_IF_ERROR(EmitEntry());
  DYNVM_RETURN_IF_ERROR(EmitGraph(g_));
  DYNVM_RETURN_IF_ERROR(Finish());
  DYNVM_RETURN_IF_ERROR(bc_.status());
  fn_->num_invoke_sites = site_;

  FunctionReport report;
  report.name = f_.name;
  report.arena_bytes = plan_.arena_bytes();
  report.dynamic_alloc_sites = dynamic_sites_;
  report.output_allocs = output_allocs_;
  report.loop_alloc_sites = loop_sites_;
  report.largest_live_bytes = plan_.largest_live_bytes();
  report.num_values = plan_.num_values();
  report.invokes = invokes_;
  const std::vector<uint32_t>& code = fn_->code;
  for (uint32_t pc = 0; pc < code.size(); pc += isa::HeaderLength(code[pc])) ++report.instructions;
  return report;
}

absl::Status FunctionCodegen::EmitSignature() {
  // Inputs are the first object registers.
  auto sig = std::make_unique<fb::SignatureT>();
  for (const Value* in : g_.inputs) {
    const uint32_t reg = NewTensorReg(in);
    reg_[in] = reg;
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
  for (size_t i = 0; i < g_.outputs.size(); ++i) {
    const Value* out = g_.outputs[i];
    if (out == nullptr) return absl::InvalidArgumentError("a function output is missing");
    fn_->object_results.emplace_back(FbKind(out->kind), static_cast<uint8_t>(out->dtype),
                                     FbKind(out->elem_kind));
    auto p = std::make_unique<fb::ParamT>();
    // The name the output had before the passes (two outputs CSE merged into one value keep
    // theirs), else the value's.
    p->name =
        i < f_.output_names.size() && !f_.output_names[i].empty() ? f_.output_names[i] : out->name;
    if (p->name.empty()) p->name = absl::StrCat("output_", sig->outputs.size());
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
  return absl::OkStatus();
}

absl::Status FunctionCodegen::EmitEntry() {
  // The input symbols, the arena, the constants; the body follows.
  for (size_t i = 0; i < g_.inputs.size(); ++i) {
    DYNVM_RETURN_IF_ERROR(DefineDynamicSymbols(g_.inputs[i], static_cast<uint32_t>(i)));
  }
  for (size_t i = 0; i < g_.inputs.size(); ++i) {
    DYNVM_RETURN_IF_ERROR(DefineContentSymbol(g_.inputs[i], static_cast<uint32_t>(i)));
  }
  if (plan_.arena_bytes() > 0) {
    arena_reg_ = NewObject(fb::ObjectKind::Storage, DType::kF32);
    DYNVM_ASSIGN_OR_RETURN(uint32_t size, ValueWord(sym_.Const(plan_.arena_bytes())));
    bc_.Emit<op::AllocStorage>(arena_reg_, size, 0);
    if (opts_.device != Device::kCPU) {
      // The device arena mirrors the host arena's layout: a value placed on the device uses
      // its planned offset there.
      device_arena_reg_ = NewObject(fb::ObjectKind::Storage, DType::kF32);
      bc_.Emit<op::AllocStorage>(device_arena_reg_, size, static_cast<uint32_t>(opts_.device));
    }
  }
  // Constants used anywhere in the function are loaded once, at entry.
  {
    std::vector<const Value*> consts;
    for (const auto& [v, list] : plan_.uses()) {
      if (v->constant) consts.push_back(v);
    }
    std::sort(consts.begin(), consts.end(),
              [](const Value* a, const Value* b) { return a->id < b->id; });
    for (const Value* v : consts) {
      if (v->content && !plan_.NeedsTensor(v)) continue;
      const uint32_t reg = NewTensorReg(v);
      bc_.Emit<op::LoadConst>(reg, b_.ConstantOf(v));
      reg_[v] = reg;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FunctionReport> GenerateFunction(Module& module, const Function& function,
                                                uint32_t index, ExecutableBuilder& builder,
                                                const CompileOptions& options) {
  DYNVM_ASSIGN_OR_RETURN(const MemoryPlan plan,
                         MemoryPlan::Make(*function.graph, module.sym(), options));
  return FunctionCodegen(module, function, index, builder, options, plan).Run();
}

}  // namespace dynvm::compiler
