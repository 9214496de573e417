#include "isa/verifier.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status_macros.h"
#include "common/types.h"
#include "common/utf8.h"
#include "isa/instruction.h"
#include "isa/operands.h"

namespace dynvm::isa {
namespace {

using fb::ObjectKind;
using fb::ScalarType;

bool ValidKind(ObjectKind k) {
  return static_cast<uint8_t>(k) <= static_cast<uint8_t>(ObjectKind::Optional);
}
bool ValidScalar(ScalarType t) {
  return static_cast<uint8_t>(t) <= static_cast<uint8_t>(ScalarType::Bool);
}

const char* KindName(ObjectKind k) {
  switch (k) {
    case ObjectKind::Tensor:
      return "tensor";
    case ObjectKind::Storage:
      return "storage";
    case ObjectKind::Sequence:
      return "sequence";
    case ObjectKind::Optional:
      return "optional";
  }
  return "?";
}
const char* ScalarName(ScalarType t) {
  switch (t) {
    case ScalarType::I64:
      return "i64";
    case ScalarType::F64:
      return "f64";
    case ScalarType::Bool:
      return "bool";
  }
  return "?";
}

std::string TypeName(const fb::ObjectType& t) {
  std::string s = KindName(t.kind());
  if (t.kind() == ObjectKind::Optional) absl::StrAppend(&s, "<", KindName(t.elem_kind()), ">");
  if (IsValidDType(t.dtype())) absl::StrAppend(&s, ":", DTypeName(static_cast<DType>(t.dtype())));
  return s;
}

bool SameType(const fb::ObjectType& a, const fb::ObjectType& b) {
  if (a.kind() != b.kind()) return false;
  if (a.kind() == ObjectKind::Storage) return true;
  if (a.kind() == ObjectKind::Optional && a.elem_kind() != b.elem_kind()) return false;
  return a.dtype() == b.dtype();
}

// Checks an object register type declaration.
absl::Status CheckObjectType(const fb::ObjectType& t, absl::string_view where) {
  if (!ValidKind(t.kind()))
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": invalid object kind ", static_cast<int>(t.kind())));
  switch (t.kind()) {
    case ObjectKind::Storage:
      return absl::OkStatus();
    case ObjectKind::Optional:
      if (t.elem_kind() != ObjectKind::Tensor && t.elem_kind() != ObjectKind::Sequence) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": an optional must hold a tensor or a sequence"));
      }
      [[fallthrough]];
    case ObjectKind::Tensor:
    case ObjectKind::Sequence:
      if (!IsValidDType(t.dtype())) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": invalid dtype ", t.dtype()));
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

// A set of assigned registers over both banks, or "unreachable" (the top of the lattice).
struct State {
  std::vector<uint64_t> bits;
  bool unreachable = false;

  bool Get(size_t i) const { return unreachable || ((bits[i >> 6] >> (i & 63)) & 1); }
  void Set(size_t i) { bits[i >> 6] |= uint64_t{1} << (i & 63); }
  void Clear(size_t i) { bits[i >> 6] &= ~(uint64_t{1} << (i & 63)); }
  static State Unreachable(size_t words) {
    State s;
    s.bits.assign(words, ~uint64_t{0});
    s.unreachable = true;
    return s;
  }
  void MeetWith(const State& o) {
    if (o.unreachable) return;
    if (unreachable) {
      *this = o;
      return;
    }
    for (size_t i = 0; i < bits.size(); ++i) bits[i] &= o.bits[i];
  }
};

class FunctionVerifier {
 public:
  FunctionVerifier(const fb::Executable& exe, const fb::Function& fn, const VerifyLimits& limits)
      : exe_(exe), fn_(fn), limits_(limits) {}

  absl::Status Verify();

 private:
  struct Instr {
    uint32_t pc;
    Decoded d;
    int32_t match = -1;  // if -> else or endif; else -> endif; loop -> endloop; endloop -> loop
    int32_t endif = -1;  // if -> endif
    int32_t loop = -1;   // break/continue -> innermost loop
  };
  struct LoopContext {
    State breaks;
    State continues;
  };

  absl::Status Err(uint32_t pc, absl::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat("function '", name_, "' pc ", pc, ": ", msg));
  }
  absl::Status ErrAt(const Instr& in, absl::string_view msg) const {
    return Err(in.pc, absl::StrCat(GetOpcodeInfo(in.d.op).mnemonic, ": ", msg));
  }
  uint32_t Word(const Instr& in, uint32_t pos) const { return code_[in.pc + pos]; }
  uint32_t Operand(const Instr& in, int i) const { return Word(in, in.d.slots[i].pos); }
  absl::Span<const uint32_t> ListOf(const Instr& in, int i) const {
    return {code_.data() + in.pc + in.d.slots[i].pos + 1, in.d.slots[i].count};
  }

  absl::Status CheckDeclarations();
  absl::Status CheckSignature();
  absl::Status Decode();
  absl::Status Structure();
  absl::Status Flow(size_t begin, size_t end, State& st, std::vector<LoopContext>& loops);
  absl::Status Step(const Instr& in, State& st);
  // Registers an instruction writes (scalars, objects) and releases, applied after its checks.
  struct Writes {
    std::vector<uint32_t> s, o, kills;
  };
  absl::Status CheckOperand(const Instr& in, int k, const State& st, Writes& w);
  absl::Status CheckIndex(const Instr& in, isa::Operand type, uint32_t w);
  absl::Status CheckValues(const Instr& in, int slot, const State& st);
  absl::Status Distinct(const Instr& in, absl::Span<const uint32_t> regs) const;
  absl::Status CheckRules(const Instr& in, const State& st, Writes& w);
  absl::Status SameOptional(const Instr& in, uint32_t optional, uint32_t content) const;
  absl::Status CheckParallelMove(const Instr& in, const State& st, Writes& w);
  absl::Status CheckInvoke(const Instr& in, const State& st, Writes& w);
  absl::Status CheckCall(const Instr& in, const State& st, Writes& w);
  absl::Status CheckRet(const Instr& in, const State& st);

  // Register helpers: object registers are numbered after the scalar ones in State.
  absl::Status ScalarReg(const Instr& in, uint32_t r, const State& st, bool read) const {
    if (r >= num_s_)
      return ErrAt(in, absl::StrCat("scalar register %s", r, " out of range (", num_s_, ")"));
    if (read && !st.Get(r))
      return ErrAt(in, absl::StrCat("%s", r, " is read before it is written"));
    return absl::OkStatus();
  }
  absl::Status ScalarTyped(const Instr& in, uint32_t r, ScalarType want, const State& st,
                           bool read) const {
    DYNVM_RETURN_IF_ERROR(ScalarReg(in, r, st, read));
    if (stypes_->Get(r) != want) {
      return ErrAt(in, absl::StrCat("%s", r, " is ", ScalarName(stypes_->Get(r)), ", expected ",
                                    ScalarName(want)));
    }
    return absl::OkStatus();
  }
  absl::Status ObjectReg(const Instr& in, uint32_t r, const State& st, bool read) const {
    if (r >= num_o_)
      return ErrAt(in, absl::StrCat("object register %o", r, " out of range (", num_o_, ")"));
    if (read && !st.Get(num_s_ + r))
      return ErrAt(in, absl::StrCat("%o", r, " is read before it is written"));
    return absl::OkStatus();
  }
  absl::Status ObjectKinded(const Instr& in, uint32_t r, ObjectKind want, const State& st,
                            bool read) const {
    DYNVM_RETURN_IF_ERROR(ObjectReg(in, r, st, read));
    if (otypes_->Get(r)->kind() != want) {
      return ErrAt(in, absl::StrCat("%o", r, " is a ", TypeName(*otypes_->Get(r)), ", expected a ",
                                    KindName(want)));
    }
    return absl::OkStatus();
  }
  absl::Status Value(const Instr& in, uint32_t w, const State& st) const {
    if (IsValueRegister(w)) return ScalarTyped(in, w & ~kRegisterFlag, ScalarType::I64, st, true);
    return absl::OkStatus();
  }
  const fb::ObjectType& OType(uint32_t r) const { return *otypes_->Get(r); }
  uint8_t ODType(uint32_t r) const { return otypes_->Get(r)->dtype(); }
  // String tensors hold pointers (docs/strings.md): only kernels, constants and inputs make
  // them, so instructions that fill, copy or reinterpret tensor memory refuse them.
  absl::Status NotString(const Instr& in, uint32_t r) const {
    if (ODType(r) == static_cast<uint8_t>(DType::kString)) {
      return ErrAt(in, absl::StrCat("%o", r,
                                    " is a string tensor, which this instruction does "
                                    "not take"));
    }
    return absl::OkStatus();
  }
  absl::Status SameDType(const Instr& in, uint32_t a, uint32_t b) const {
    if (ODType(a) != ODType(b)) {
      return ErrAt(in, absl::StrCat("%o", a, " (", TypeName(OType(a)), ") and %o", b, " (",
                                    TypeName(OType(b)), ") differ in dtype"));
    }
    return absl::OkStatus();
  }

  const fb::Executable& exe_;
  const fb::Function& fn_;
  const VerifyLimits& limits_;
  std::string name_;
  absl::Span<const uint32_t> code_;
  uint32_t num_s_ = 0, num_o_ = 0;
  const flatbuffers::Vector<ScalarType>* stypes_ = nullptr;
  const flatbuffers::Vector<const fb::ObjectType*>* otypes_ = nullptr;
  std::vector<Instr> instrs_;
  absl::flat_hash_set<uint32_t> sites_;
};

absl::Status FunctionVerifier::Verify() {
  name_ = fn_.name()->str();
  DYNVM_RETURN_IF_ERROR(CheckDeclarations());
  DYNVM_RETURN_IF_ERROR(CheckSignature());
  DYNVM_RETURN_IF_ERROR(Decode());
  DYNVM_RETURN_IF_ERROR(Structure());
  State st;
  st.bits.assign((num_s_ + num_o_ + 63) / 64 + 1, 0);
  for (uint32_t i = 0; i < fn_.num_scalar_params(); ++i) st.Set(i);
  for (uint32_t i = 0; i < fn_.num_object_params(); ++i) st.Set(num_s_ + i);
  std::vector<LoopContext> loops;
  return Flow(0, instrs_.size(), st, loops);
}

absl::Status FunctionVerifier::CheckDeclarations() {
  stypes_ = fn_.scalar_types();
  otypes_ = fn_.object_types();
  num_s_ = stypes_ ? stypes_->size() : 0;
  num_o_ = otypes_ ? otypes_->size() : 0;
  if (num_s_ > limits_.max_registers || num_o_ > limits_.max_registers) {
    return Err(0, absl::StrCat("too many registers (", num_s_, " scalar, ", num_o_,
                               " object; limit ", limits_.max_registers, ")"));
  }
  for (uint32_t i = 0; i < num_s_; ++i) {
    if (!ValidScalar(stypes_->Get(i)))
      return Err(0, absl::StrCat("%s", i, " has an invalid scalar type"));
  }
  for (uint32_t i = 0; i < num_o_; ++i) {
    DYNVM_RETURN_IF_ERROR(
        CheckObjectType(*otypes_->Get(i), absl::StrCat("function '", name_, "' %o", i)));
  }
  if (fn_.num_scalar_params() > num_s_ || fn_.num_object_params() > num_o_) {
    return Err(0, "more parameters than registers");
  }
  if (fn_.object_results()) {
    for (uint32_t i = 0; i < fn_.object_results()->size(); ++i) {
      DYNVM_RETURN_IF_ERROR(CheckObjectType(*fn_.object_results()->Get(i),
                                            absl::StrCat("function '", name_, "' result ", i)));
    }
  }
  if (fn_.scalar_results()) {
    for (ScalarType t : *fn_.scalar_results()) {
      if (!ValidScalar(t)) return Err(0, "invalid scalar result type");
    }
  }
  if (fn_.code() == nullptr || fn_.code()->size() == 0) return Err(0, "function has no code");
  code_ = absl::Span<const uint32_t>(fn_.code()->data(), fn_.code()->size());
  if (fn_.num_invoke_sites() > code_.size()) {
    return Err(0,
               absl::StrCat("num_invoke_sites ", fn_.num_invoke_sites(), " exceeds the code size"));
  }
  return absl::OkStatus();
}

absl::Status FunctionVerifier::CheckSignature() {
  if (fn_.bounds()) {
    for (const fb::SymbolBound* b : *fn_.bounds()) {
      if (b->name()->size() == 0 || b->bound() < 0) return Err(0, "invalid symbol bound");
    }
  }
  const fb::Signature* sig = fn_.signature();
  if (sig == nullptr) return absl::OkStatus();
  if (fn_.num_scalar_params() != 0 || (fn_.scalar_results() && fn_.scalar_results()->size() != 0)) {
    return Err(0, "a function with a signature takes and returns only objects");
  }
  const uint32_t num_in = sig->inputs() ? sig->inputs()->size() : 0;
  const uint32_t num_out = sig->outputs() ? sig->outputs()->size() : 0;
  const uint32_t num_results = fn_.object_results() ? fn_.object_results()->size() : 0;
  if (num_in != fn_.num_object_params()) {
    return Err(0, absl::StrCat("signature has ", num_in, " inputs but the function ",
                               fn_.num_object_params(), " object parameters"));
  }
  if (num_out != num_results) {
    return Err(0, absl::StrCat("signature has ", num_out, " outputs but the function ", num_results,
                               " object results"));
  }
  auto check_params = [&](const flatbuffers::Vector<flatbuffers::Offset<fb::Param>>* params,
                          bool inputs) -> absl::Status {
    if (params == nullptr) return absl::OkStatus();
    absl::flat_hash_set<std::string> names;
    for (uint32_t i = 0; i < params->size(); ++i) {
      const fb::Param* p = params->Get(i);
      const fb::ObjectType& t = inputs ? *otypes_->Get(i) : *fn_.object_results()->Get(i);
      const char* what = inputs ? "input" : "output";
      if (p->name()->size() == 0) return Err(0, absl::StrCat(what, " ", i, " has no name"));
      if (!names.insert(p->name()->str()).second) {
        return Err(0, absl::StrCat("duplicate ", what, " name '", p->name()->str(), "'"));
      }
      if (p->kind() != t.kind() || (t.kind() != ObjectKind::Storage && p->dtype() != t.dtype())) {
        return Err(0, absl::StrCat(what, " '", p->name()->str(), "' is declared ",
                                   KindName(p->kind()), " but its register is ", TypeName(t)));
      }
      if (p->shape()) {
        if (p->shape()->size() > static_cast<uint32_t>(limits_.max_rank)) {
          return Err(
              0, absl::StrCat(what, " '", p->name()->str(), "' has rank above ", limits_.max_rank));
        }
        for (const fb::Dim* d : *p->shape()) {
          if (d->value() < -1 ||
              (d->value() == -1 && (d->symbol() == nullptr || d->symbol()->size() == 0))) {
            return Err(0, absl::StrCat(what, " '", p->name()->str(), "' has an invalid dim"));
          }
        }
      }
    }
    return absl::OkStatus();
  };
  DYNVM_RETURN_IF_ERROR(check_params(sig->inputs(), true));
  return check_params(sig->outputs(), false);
}

absl::Status FunctionVerifier::Decode() {
  uint32_t pc = 0;
  while (pc < code_.size()) {
    Instr in;
    in.pc = pc;
    if (absl::Status s = DecodeAt(code_, pc, &in.d); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("function '", name_, "': ", s.message()));
    }
    pc += in.d.length;
    instrs_.push_back(in);
  }
  return absl::OkStatus();
}

absl::Status FunctionVerifier::Structure() {
  struct Open {
    size_t idx;
    bool is_loop;
  };
  std::vector<Open> stack;
  auto innermost_loop = [&]() -> int32_t {
    for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
      if (it->is_loop) return static_cast<int32_t>(it->idx);
    }
    return -1;
  };
  for (size_t i = 0; i < instrs_.size(); ++i) {
    Instr& in = instrs_[i];
    switch (in.d.op) {
      case Opcode::kIf:
      case Opcode::kLoop:
        stack.push_back({i, in.d.op == Opcode::kLoop});
        if (static_cast<int>(stack.size()) > limits_.max_nesting) {
          return ErrAt(in, absl::StrCat("nesting deeper than ", limits_.max_nesting));
        }
        break;
      case Opcode::kElse: {
        if (stack.empty() || stack.back().is_loop || instrs_[stack.back().idx].match >= 0) {
          return ErrAt(in, "else without a matching if");
        }
        instrs_[stack.back().idx].match = static_cast<int32_t>(i);
        break;
      }
      case Opcode::kEndIf: {
        if (stack.empty() || stack.back().is_loop) return ErrAt(in, "endif without a matching if");
        Instr& open = instrs_[stack.back().idx];
        if (open.match >= 0) {
          instrs_[open.match].match = static_cast<int32_t>(i);
        } else {
          open.match = static_cast<int32_t>(i);
        }
        open.endif = static_cast<int32_t>(i);
        stack.pop_back();
        break;
      }
      case Opcode::kEndLoop: {
        if (stack.empty() || !stack.back().is_loop)
          return ErrAt(in, "endloop without a matching loop");
        instrs_[stack.back().idx].match = static_cast<int32_t>(i);
        in.match = static_cast<int32_t>(stack.back().idx);
        stack.pop_back();
        break;
      }
      case Opcode::kBreak:
      case Opcode::kBreakIf:
      case Opcode::kBreakUnless:
      case Opcode::kContinue:
        in.loop = innermost_loop();
        if (in.loop < 0) return ErrAt(in, "outside any loop");
        break;
      default:
        break;
    }
  }
  if (!stack.empty()) return ErrAt(instrs_[stack.back().idx], "is never closed");
  const Opcode last = instrs_.back().d.op;
  if (last != Opcode::kRet && last != Opcode::kFail) {
    return ErrAt(instrs_.back(), "the function must end with ret or fail");
  }
  // Jump operands must equal the targets the nesting implies.
  auto expect_jump = [&](const Instr& in, int slot, uint32_t target) -> absl::Status {
    const int32_t got = static_cast<int32_t>(Operand(in, slot));
    const int64_t want = static_cast<int64_t>(target) - in.pc;
    if (got != want) {
      return ErrAt(in, absl::StrCat("jump offset ", got, " does not match the structure (expected ",
                                    want, ")"));
    }
    return absl::OkStatus();
  };
  auto after = [&](int32_t idx) { return instrs_[idx].pc + instrs_[idx].d.length; };
  for (const Instr& in : instrs_) {
    absl::Status s;
    switch (in.d.op) {
      case Opcode::kIf: {
        const Instr& m = instrs_[in.match];
        s = expect_jump(in, op::If::kElse, m.d.op == Opcode::kElse ? after(in.match) : m.pc);
        break;
      }
      case Opcode::kElse:
        s = expect_jump(in, op::Else::kEnd, instrs_[in.match].pc);
        break;
      case Opcode::kLoop:
        s = expect_jump(in, op::Loop::kExit, after(in.match));
        break;
      case Opcode::kEndLoop:
        s = expect_jump(in, op::EndLoop::kHead, instrs_[in.match].pc);
        break;
      case Opcode::kBreak:
        s = expect_jump(in, op::Break::kTarget, after(instrs_[in.loop].match));
        break;
      case Opcode::kBreakIf:
      case Opcode::kBreakUnless:
        static_assert(+op::BreakIf::kTarget == +op::BreakUnless::kTarget);
        s = expect_jump(in, op::BreakIf::kTarget, after(instrs_[in.loop].match));
        break;
      case Opcode::kContinue:
        s = expect_jump(in, op::Continue::kTarget, instrs_[instrs_[in.loop].match].pc);
        break;
      default:
        break;
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status FunctionVerifier::Flow(size_t begin, size_t end, State& st,
                                    std::vector<LoopContext>& loops) {
  const size_t words = st.bits.size();
  size_t i = begin;
  while (i < end) {
    const Instr& in = instrs_[i];
    switch (in.d.op) {
      case Opcode::kIf: {
        DYNVM_RETURN_IF_ERROR(
            ScalarTyped(in, Operand(in, op::If::kCond), ScalarType::Bool, st, true));
        const Instr& m = instrs_[in.match];
        const bool has_else = m.d.op == Opcode::kElse;
        State then_state = st;
        DYNVM_RETURN_IF_ERROR(Flow(i + 1, in.match, then_state, loops));
        if (has_else) {
          State else_state = st;
          DYNVM_RETURN_IF_ERROR(Flow(in.match + 1, in.endif, else_state, loops));
          then_state.MeetWith(else_state);
          st = std::move(then_state);
        } else {
          st.MeetWith(then_state);
        }
        i = in.endif + 1;
        continue;
      }
      case Opcode::kLoop: {
        DYNVM_RETURN_IF_ERROR(Value(in, Operand(in, op::Loop::kTrip), st));
        const uint32_t iter = Operand(in, op::Loop::kIter);
        DYNVM_RETURN_IF_ERROR(ScalarTyped(in, iter, ScalarType::I64, st, false));
        st.Set(iter);
        const State pre = st;
        loops.push_back({State::Unreachable(words), State::Unreachable(words)});
        State body = st;
        DYNVM_RETURN_IF_ERROR(Flow(i + 1, in.match, body, loops));
        LoopContext ctx = std::move(loops.back());
        loops.pop_back();
        body.MeetWith(ctx.continues);
        // Whatever was assigned when the body started must still be assigned at the back
        // edge, so one pass over the body is exact (no fixpoint needed).
        if (!body.unreachable) {
          for (size_t r = 0; r < num_s_ + num_o_; ++r) {
            if (pre.Get(r) && !body.Get(r)) {
              return ErrAt(instrs_[in.match],
                           absl::StrCat(r < num_s_ ? "%s" : "%o", r < num_s_ ? r : r - num_s_,
                                        " is assigned before the loop but not at its back edge"));
            }
          }
        }
        st = pre;
        st.MeetWith(body);
        st.MeetWith(ctx.breaks);
        i = in.match + 1;
        continue;
      }
      case Opcode::kBreak:
        loops.back().breaks.MeetWith(st);
        st = State::Unreachable(words);
        break;
      case Opcode::kBreakIf:
      case Opcode::kBreakUnless:
        static_assert(+op::BreakIf::kCond == +op::BreakUnless::kCond);
        DYNVM_RETURN_IF_ERROR(
            ScalarTyped(in, Operand(in, op::BreakIf::kCond), ScalarType::Bool, st, true));
        loops.back().breaks.MeetWith(st);
        break;
      case Opcode::kContinue:
        loops.back().continues.MeetWith(st);
        st = State::Unreachable(words);
        break;
      case Opcode::kRet:
      case Opcode::kFail:
        DYNVM_RETURN_IF_ERROR(Step(in, st));
        st = State::Unreachable(words);
        break;
      default:
        DYNVM_RETURN_IF_ERROR(Step(in, st));
        break;
    }
    ++i;
  }
  return absl::OkStatus();
}

// Checks one non-control instruction's operands and applies its reads and writes to `st`.
absl::Status FunctionVerifier::Step(const Instr& in, State& st) {
  Writes w;
  // Generic operands (lists are handled per opcode by CheckRules).
  for (int k = 0; k < in.d.num_operands; ++k) {
    DYNVM_RETURN_IF_ERROR(CheckOperand(in, k, st, w));
  }
  DYNVM_RETURN_IF_ERROR(CheckRules(in, st, w));
  for (uint32_t r : w.s) st.Set(r);
  for (uint32_t r : w.kills) st.Clear(num_s_ + r);
  for (uint32_t r : w.o) st.Set(num_s_ + r);
  return absl::OkStatus();
}

absl::Status FunctionVerifier::CheckOperand(const Instr& in, int k, const State& st, Writes& w) {
  const isa::Operand type = in.d.slots[k].type;
  const uint32_t r = Operand(in, k);
  switch (type) {
    case Operand::kRI:
      return ScalarTyped(in, r, ScalarType::I64, st, true);
    case Operand::kRF:
      return ScalarTyped(in, r, ScalarType::F64, st, true);
    case Operand::kRB:
      return ScalarTyped(in, r, ScalarType::Bool, st, true);
    case Operand::kRS:
      return ScalarReg(in, r, st, true);
    case Operand::kWI:
      w.s.push_back(r);
      return ScalarTyped(in, r, ScalarType::I64, st, false);
    case Operand::kWF:
      w.s.push_back(r);
      return ScalarTyped(in, r, ScalarType::F64, st, false);
    case Operand::kWB:
      w.s.push_back(r);
      return ScalarTyped(in, r, ScalarType::Bool, st, false);
    case Operand::kWS:
      w.s.push_back(r);
      return ScalarReg(in, r, st, false);
    case Operand::kRT:
      return ObjectKinded(in, r, ObjectKind::Tensor, st, true);
    case Operand::kMT:
      w.o.push_back(r);
      return ObjectKinded(in, r, ObjectKind::Tensor, st, true);
    case Operand::kWT:
      w.o.push_back(r);
      return ObjectKinded(in, r, ObjectKind::Tensor, st, false);
    case Operand::kRG:
      return ObjectKinded(in, r, ObjectKind::Storage, st, true);
    case Operand::kWG:
      w.o.push_back(r);
      return ObjectKinded(in, r, ObjectKind::Storage, st, false);
    case Operand::kRQ:
      return ObjectKinded(in, r, ObjectKind::Sequence, st, true);
    case Operand::kMQ:
      w.o.push_back(r);
      return ObjectKinded(in, r, ObjectKind::Sequence, st, true);
    case Operand::kWQ:
      w.o.push_back(r);
      return ObjectKinded(in, r, ObjectKind::Sequence, st, false);
    case Operand::kRP:
      return ObjectKinded(in, r, ObjectKind::Optional, st, true);
    case Operand::kWP:
      w.o.push_back(r);
      return ObjectKinded(in, r, ObjectKind::Optional, st, false);
    case Operand::kRX:
      return ObjectReg(in, r, st, true);
    case Operand::kWX:
      w.o.push_back(r);
      return ObjectReg(in, r, st, false);
    case Operand::kKill:
      w.kills.push_back(r);
      return ObjectReg(in, r, st, false);
    case Operand::kValue:
      return Value(in, r, st);
    default:
      return CheckIndex(in, type, r);
  }
}

// An immediate or table index operand.
absl::Status FunctionVerifier::CheckIndex(const Instr& in, isa::Operand type, uint32_t w) {
  switch (type) {
    case Operand::kDType:
      if (!IsValidDType(static_cast<uint8_t>(w)) || w > 0xFF)
        return ErrAt(in, absl::StrCat("invalid dtype ", w));
      break;
    case Operand::kDevice:
      if (w >= static_cast<uint32_t>(kNumDevices))
        return ErrAt(in, absl::StrCat("invalid device ", w));
      break;
    case Operand::kKernel:
      if (exe_.kernels() == nullptr || w >= exe_.kernels()->size())
        return ErrAt(in, absl::StrCat("kernel index ", w, " out of range"));
      break;
    case Operand::kConst:
      if (exe_.constants() == nullptr || w >= exe_.constants()->size())
        return ErrAt(in, absl::StrCat("constant index ", w, " out of range"));
      break;
    case Operand::kFunc:
      if (w >= exe_.functions()->size())
        return ErrAt(in, absl::StrCat("function index ", w, " out of range"));
      break;
    case Operand::kString:
      if (exe_.strings() == nullptr || w >= exe_.strings()->size())
        return ErrAt(in, absl::StrCat("string index ", w, " out of range"));
      break;
    case Operand::kSite:
      if (w >= fn_.num_invoke_sites()) {
        return ErrAt(
            in, absl::StrCat("invoke site ", w, " out of range (", fn_.num_invoke_sites(), ")"));
      }
      if (!sites_.insert(w).second)
        return ErrAt(in, absl::StrCat("invoke site ", w, " used twice"));
      break;
    default:
      break;
  }
  return absl::OkStatus();
}

// Every element of a list of value operands (dims, strides).
absl::Status FunctionVerifier::CheckValues(const Instr& in, int slot, const State& st) {
  for (uint32_t w : ListOf(in, slot)) DYNVM_RETURN_IF_ERROR(Value(in, w, st));
  if (ListOf(in, slot).size() > static_cast<size_t>(limits_.max_rank)) {
    return ErrAt(in, absl::StrCat("more than ", limits_.max_rank, " dims"));
  }
  return absl::OkStatus();
}

absl::Status FunctionVerifier::Distinct(const Instr& in, absl::Span<const uint32_t> regs) const {
  absl::flat_hash_set<uint32_t> seen;
  for (uint32_t r : regs) {
    if (r != kAbsentRegister && !seen.insert(r).second)
      return ErrAt(in, "a register is written twice");
  }
  return absl::OkStatus();
}

// Opcode-specific rules, beyond each operand's own check.
absl::Status FunctionVerifier::CheckRules(const Instr& in, const State& st, Writes& w) {
  switch (in.d.op) {
    case Opcode::kMovS:
      if (stypes_->Get(Operand(in, op::MovS::kDst)) != stypes_->Get(Operand(in, op::MovS::kSrc)))
        return ErrAt(in, "scalar types differ");
      break;
    case Opcode::kMov:
      if (!SameType(OType(Operand(in, op::Mov::kDst)), OType(Operand(in, op::Mov::kSrc))))
        return ErrAt(in, "object types differ");
      break;
    case Opcode::kPMove:
    case Opcode::kPMoveS:
      return CheckParallelMove(in, st, w);
    case Opcode::kAllocTensor:
      DYNVM_RETURN_IF_ERROR(NotString(in, Operand(in, op::AllocTensor::kDst)));
      if (ODType(Operand(in, op::AllocTensor::kDst)) != Operand(in, op::AllocTensor::kDType))
        return ErrAt(in, "dtype operand differs from the register's dtype");
      return CheckValues(in, op::AllocTensor::kDims, st);
    case Opcode::kAllocGrowable:
      DYNVM_RETURN_IF_ERROR(NotString(in, Operand(in, op::AllocGrowable::kDst)));
      if (ODType(Operand(in, op::AllocGrowable::kDst)) != Operand(in, op::AllocGrowable::kDType))
        return ErrAt(in, "dtype operand differs from the register's dtype");
      DYNVM_RETURN_IF_ERROR(CheckValues(in, op::AllocGrowable::kDims, st));
      if (Operand(in, op::AllocGrowable::kAxis) >= ListOf(in, op::AllocGrowable::kDims).size())
        return ErrAt(in, "growth axis out of range");
      break;
    case Opcode::kAppend:
      DYNVM_RETURN_IF_ERROR(NotString(in, Operand(in, op::Append::kTensor)));
      DYNVM_RETURN_IF_ERROR(
          SameDType(in, Operand(in, op::Append::kTensor), Operand(in, op::Append::kPart)));
      if (Operand(in, op::Append::kAxis) >= static_cast<uint32_t>(limits_.max_rank))
        return ErrAt(in, "axis out of range");
      break;
    case Opcode::kExtend:
      DYNVM_RETURN_IF_ERROR(NotString(in, Operand(in, op::Extend::kTensor)));
      if (Operand(in, op::Extend::kAxis) >= static_cast<uint32_t>(limits_.max_rank))
        return ErrAt(in, "axis out of range");
      break;
    case Opcode::kLoadConst: {
      const fb::Constant* c = exe_.constants()->Get(Operand(in, op::LoadConst::kConst));
      if (c->dtype() != ODType(Operand(in, op::LoadConst::kDst)))
        return ErrAt(in, "constant dtype differs from the register's dtype");
      break;
    }
    case Opcode::kReshape:
      DYNVM_RETURN_IF_ERROR(
          SameDType(in, Operand(in, op::Reshape::kDst), Operand(in, op::Reshape::kSrc)));
      return CheckValues(in, op::Reshape::kDims, st);
    case Opcode::kView:
      DYNVM_RETURN_IF_ERROR(NotString(in, Operand(in, op::View::kSrc)));
      DYNVM_RETURN_IF_ERROR(
          SameDType(in, Operand(in, op::View::kDst), Operand(in, op::View::kSrc)));
      DYNVM_RETURN_IF_ERROR(CheckValues(in, op::View::kDims, st));
      DYNVM_RETURN_IF_ERROR(CheckValues(in, op::View::kStrides, st));
      if (ListOf(in, op::View::kDims).size() != ListOf(in, op::View::kStrides).size())
        return ErrAt(in, "dims and strides differ in length");
      break;
    case Opcode::kCopy:
      DYNVM_RETURN_IF_ERROR(NotString(in, Operand(in, op::Copy::kSrc)));
      return SameDType(in, Operand(in, op::Copy::kDst), Operand(in, op::Copy::kSrc));
    case Opcode::kReadI:
    case Opcode::kReadF:
    case Opcode::kReadB:
      static_assert(+op::ReadI::kTensor == +op::ReadF::kTensor &&
                    +op::ReadI::kTensor == +op::ReadB::kTensor);
      return NotString(in, Operand(in, op::ReadI::kTensor));
    case Opcode::kWrite:
      return NotString(in, Operand(in, op::Write::kTensor));
    case Opcode::kSeqPush:
      return SameDType(in, Operand(in, op::SeqPush::kSeq), Operand(in, op::SeqPush::kTensor));
    case Opcode::kSeqInsert:
      return SameDType(in, Operand(in, op::SeqInsert::kSeq), Operand(in, op::SeqInsert::kTensor));
    case Opcode::kSeqAt:
      return SameDType(in, Operand(in, op::SeqAt::kDst), Operand(in, op::SeqAt::kSeq));
    case Opcode::kOptSome:
      return SameOptional(in, Operand(in, op::OptSome::kDst), Operand(in, op::OptSome::kContent));
    case Opcode::kOptGet:
      return SameOptional(in, Operand(in, op::OptGet::kOpt), Operand(in, op::OptGet::kDst));
    case Opcode::kInvoke:
      return CheckInvoke(in, st, w);
    case Opcode::kCall:
      return CheckCall(in, st, w);
    case Opcode::kRet:
      return CheckRet(in, st);
    default:
      break;
  }
  return absl::OkStatus();
}

// An optional register and the register of its content agree in kind and dtype.
absl::Status FunctionVerifier::SameOptional(const Instr& in, uint32_t optional,
                                            uint32_t content) const {
  const fb::ObjectType& opt = OType(optional);
  const fb::ObjectType& val = OType(content);
  if (opt.elem_kind() != val.kind() || opt.dtype() != val.dtype()) {
    return ErrAt(in, absl::StrCat("optional holds ", TypeName(opt), ", value is ", TypeName(val)));
  }
  return absl::OkStatus();
}

absl::Status FunctionVerifier::CheckParallelMove(const Instr& in, const State& st, Writes& w) {
  static_assert(+op::PMove::kDst == +op::PMoveS::kDst && +op::PMove::kSrc == +op::PMoveS::kSrc);
  const bool objects = in.d.op == Opcode::kPMove;
  absl::Span<const uint32_t> dst = ListOf(in, op::PMove::kDst), src = ListOf(in, op::PMove::kSrc);
  if (dst.size() != src.size()) return ErrAt(in, "lists differ in length");
  for (uint32_t r : src) {
    DYNVM_RETURN_IF_ERROR(objects ? ObjectReg(in, r, st, true) : ScalarReg(in, r, st, true));
  }
  for (size_t k = 0; k < dst.size(); ++k) {
    DYNVM_RETURN_IF_ERROR(objects ? ObjectReg(in, dst[k], st, false)
                                  : ScalarReg(in, dst[k], st, false));
    const bool same = objects ? SameType(OType(dst[k]), OType(src[k]))
                              : stypes_->Get(dst[k]) == stypes_->Get(src[k]);
    if (!same) return ErrAt(in, absl::StrCat("element ", k, ": types differ"));
    (objects ? w.o : w.s).push_back(dst[k]);
  }
  return Distinct(in, dst);
}

absl::Status FunctionVerifier::CheckInvoke(const Instr& in, const State& st, Writes& w) {
  const fb::Kernel* k = exe_.kernels()->Get(Operand(in, op::Invoke::kKernel));
  absl::Span<const uint32_t> ins = ListOf(in, op::Invoke::kInputs),
                             outs = ListOf(in, op::Invoke::kOutputs);
  const uint32_t nin = k->inputs() ? k->inputs()->size() : 0;
  const uint32_t nout = k->outputs() ? k->outputs()->size() : 0;
  if (ins.size() != nin || outs.size() != nout) {
    return ErrAt(in, absl::StrCat("kernel ", Operand(in, op::Invoke::kKernel), " (", k->op()->str(),
                                  ") takes ", nin, " inputs and ", nout, " outputs, given ",
                                  ins.size(), " and ", outs.size()));
  }
  auto check_port = [&](const fb::Port* p, uint32_t r, bool is_input,
                        size_t k_index) -> absl::Status {
    const char* what = is_input ? "input" : "output";
    if (r == kAbsentRegister) {
      if (!p->optional()) return ErrAt(in, absl::StrCat(what, " ", k_index, " is required"));
      return absl::OkStatus();
    }
    const bool read = is_input || !p->dynamic();
    DYNVM_RETURN_IF_ERROR(ObjectKinded(in, r, p->kind(), st, read));
    // A kernel sees string tensors only on ports that say so (the registry then binds only a
    // kernel that takes strings), and makes string outputs itself: their bytes live with them.
    if (p->kind() != ObjectKind::Storage && ODType(r) == static_cast<uint8_t>(DType::kString)) {
      if (p->dtype() != ODType(r)) {
        return ErrAt(in, absl::StrCat(what, " ", k_index, ": %o", r,
                                      " is a string tensor, on a port not typed string"));
      }
      if (!is_input && !p->dynamic()) {
        return ErrAt(in, absl::StrCat("output ", k_index, ": a string output must be dynamic"));
      }
    }
    if (p->dtype() != kAnyDType && p->kind() != ObjectKind::Storage && p->dtype() != ODType(r)) {
      return ErrAt(
          in,
          absl::StrCat(what, " ", k_index, " must be ",
                       IsValidDType(p->dtype()) ? DTypeName(static_cast<DType>(p->dtype())) : "?",
                       ", %o", r, " is ", TypeName(OType(r))));
    }
    if (!is_input) w.o.push_back(r);
    return absl::OkStatus();
  };
  for (size_t j = 0; j < ins.size(); ++j) {
    DYNVM_RETURN_IF_ERROR(check_port(k->inputs()->Get(j), ins[j], true, j));
  }
  for (size_t j = 0; j < outs.size(); ++j) {
    DYNVM_RETURN_IF_ERROR(check_port(k->outputs()->Get(j), outs[j], false, j));
  }
  return Distinct(in, outs);
  return absl::OkStatus();
}

absl::Status FunctionVerifier::CheckCall(const Instr& in, const State& st, Writes& w) {
  const fb::Function* callee = exe_.functions()->Get(Operand(in, op::Call::kFunc));
  absl::Span<const uint32_t> oargs = ListOf(in, op::Call::kObjArgs),
                             sargs = ListOf(in, op::Call::kScalarArgs);
  absl::Span<const uint32_t> ores = ListOf(in, op::Call::kObjResults),
                             sres = ListOf(in, op::Call::kScalarResults);
  const auto* ctypes = callee->object_types();
  const auto* cstypes = callee->scalar_types();
  const uint32_t n_ores = callee->object_results() ? callee->object_results()->size() : 0;
  const uint32_t n_sres = callee->scalar_results() ? callee->scalar_results()->size() : 0;
  if (oargs.size() != callee->num_object_params() || sargs.size() != callee->num_scalar_params() ||
      ores.size() != n_ores || sres.size() != n_sres) {
    return ErrAt(in, absl::StrCat("arity does not match function '", callee->name()->str(), "'"));
  }
  // The callee's declarations are checked when it is verified; guard the indices here.
  if ((oargs.size() > 0 && (ctypes == nullptr || ctypes->size() < oargs.size())) ||
      (sargs.size() > 0 && (cstypes == nullptr || cstypes->size() < sargs.size()))) {
    return ErrAt(in, "callee declares fewer registers than parameters");
  }
  for (size_t j = 0; j < oargs.size(); ++j) {
    DYNVM_RETURN_IF_ERROR(ObjectReg(in, oargs[j], st, true));
    if (!SameType(OType(oargs[j]), *ctypes->Get(j)))
      return ErrAt(in, absl::StrCat("object argument ", j, ": type mismatch"));
  }
  for (size_t j = 0; j < sargs.size(); ++j) {
    DYNVM_RETURN_IF_ERROR(ScalarReg(in, sargs[j], st, true));
    if (stypes_->Get(sargs[j]) != cstypes->Get(j))
      return ErrAt(in, absl::StrCat("scalar argument ", j, ": type mismatch"));
  }
  for (size_t j = 0; j < ores.size(); ++j) {
    DYNVM_RETURN_IF_ERROR(ObjectReg(in, ores[j], st, false));
    if (!SameType(OType(ores[j]), *callee->object_results()->Get(j)))
      return ErrAt(in, absl::StrCat("object result ", j, ": type mismatch"));
    w.o.push_back(ores[j]);
  }
  for (size_t j = 0; j < sres.size(); ++j) {
    DYNVM_RETURN_IF_ERROR(ScalarReg(in, sres[j], st, false));
    if (stypes_->Get(sres[j]) != callee->scalar_results()->Get(j))
      return ErrAt(in, absl::StrCat("scalar result ", j, ": type mismatch"));
    w.s.push_back(sres[j]);
  }
  DYNVM_RETURN_IF_ERROR(Distinct(in, ores));
  return Distinct(in, sres);
  return absl::OkStatus();
}

absl::Status FunctionVerifier::CheckRet(const Instr& in, const State& st) {
  absl::Span<const uint32_t> ores = ListOf(in, op::Ret::kObjs),
                             sres = ListOf(in, op::Ret::kScalars);
  const uint32_t n_ores = fn_.object_results() ? fn_.object_results()->size() : 0;
  const uint32_t n_sres = fn_.scalar_results() ? fn_.scalar_results()->size() : 0;
  if (ores.size() != n_ores || sres.size() != n_sres)
    return ErrAt(in, "result count differs from the declaration");
  for (size_t j = 0; j < ores.size(); ++j) {
    DYNVM_RETURN_IF_ERROR(ObjectReg(in, ores[j], st, true));
    if (!SameType(OType(ores[j]), *fn_.object_results()->Get(j)))
      return ErrAt(in, absl::StrCat("result ", j, ": type mismatch"));
  }
  for (size_t j = 0; j < sres.size(); ++j) {
    DYNVM_RETURN_IF_ERROR(ScalarReg(in, sres[j], st, true));
    if (stypes_->Get(sres[j]) != fn_.scalar_results()->Get(j))
      return ErrAt(in, absl::StrCat("scalar result ", j, ": type mismatch"));
  }
  return absl::OkStatus();
}

// flatbuffers 2.0's verifier checks only that a vector's length word is 4-byte aligned, not
// that 8-byte elements are 8-byte aligned: a hostile file can put a [long] vector at 4 mod 8,
// and reading it would be a misaligned load. The schema has two such vectors.
bool ElementsAligned(const flatbuffers::Vector<int64_t>* v) {
  return v == nullptr || reinterpret_cast<uintptr_t>(v->data()) % alignof(int64_t) == 0;
}

absl::Status CheckConstants(const fb::Executable& exe, uint64_t segment_size,
                            const VerifyLimits& limits) {
  if (exe.constants() == nullptr) return absl::OkStatus();
  for (uint32_t i = 0; i < exe.constants()->size(); ++i) {
    const fb::Constant* c = exe.constants()->Get(i);
    auto err = [&](absl::string_view msg) {
      return absl::InvalidArgumentError(absl::StrCat("constant ", i, ": ", msg));
    };
    if (!IsValidDType(c->dtype())) return err(absl::StrCat("invalid dtype ", c->dtype()));
    if (!ElementsAligned(c->shape())) return err("shape vector is not 8-byte aligned");
    const bool is_string = c->dtype() == static_cast<uint8_t>(DType::kString);
    int64_t n = 1;
    if (c->shape()) {
      if (c->shape()->size() > static_cast<uint32_t>(limits.max_rank)) return err("rank too large");
      for (int64_t d : *c->shape()) {
        if (d < 0 || __builtin_mul_overflow(n, d, &n)) return err("invalid shape");
      }
    }
    int64_t bytes;
    // A string constant is its (offset, length) table followed by the bytes: at least the table.
    // Its entries are checked by CheckStringConstant once the segment is mapped.
    if (__builtin_mul_overflow(n, DTypeSize(static_cast<DType>(c->dtype())), &bytes) ||
        (is_string ? static_cast<uint64_t>(bytes) > c->size()
                   : static_cast<uint64_t>(bytes) != c->size())) {
      return err(absl::StrCat("size ", c->size(), " does not match its shape"));
    }
    if (c->offset() % schema::kConstantAlignment != 0) return err("offset is not 64-byte aligned");
    if (c->offset() > segment_size || c->size() > segment_size - c->offset()) {
      return err(absl::StrCat("range [", c->offset(), ", +", c->size(),
                              ") runs past the end of the ", segment_size,
                              "-byte constant segment"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckKernels(const fb::Executable& exe) {
  if (exe.kernels() == nullptr) return absl::OkStatus();
  const uint32_t num_constants = exe.constants() ? exe.constants()->size() : 0;
  for (uint32_t i = 0; i < exe.kernels()->size(); ++i) {
    const fb::Kernel* k = exe.kernels()->Get(i);
    auto err = [&](absl::string_view msg) {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel ", i, " (", k->op()->str(), "): ", msg));
    };
    if (k->op()->size() == 0) return err("empty op name");
    if (k->device() >= kNumDevices) return err(absl::StrCat("invalid device ", k->device()));
    for (const auto* ports : {k->inputs(), k->outputs()}) {
      if (ports == nullptr) continue;
      for (const fb::Port* p : *ports) {
        if (!ValidKind(p->kind())) return err("invalid port kind");
        if (p->dtype() != kAnyDType && !IsValidDType(p->dtype())) return err("invalid port dtype");
      }
    }
    if (k->inputs()) {
      for (const fb::Port* p : *k->inputs()) {
        if (p->dynamic()) return err("an input cannot be dynamic");
      }
    }
    if (k->outputs()) {
      for (const fb::Port* p : *k->outputs()) {
        if (p->kind() != ObjectKind::Tensor && !p->dynamic())
          return err("non-tensor outputs must be dynamic");
      }
    }
    if (k->attrs()) {
      for (const fb::Attribute* a : *k->attrs()) {
        if (static_cast<uint8_t>(a->type()) > static_cast<uint8_t>(fb::AttrType::Tensor))
          return err("invalid attribute type");
        if (!ElementsAligned(a->ints())) {
          return err(absl::StrCat("attribute '", a->name()->str(),
                                  "': ints vector is not 8-byte aligned"));
        }
        if (a->type() == fb::AttrType::Tensor && a->tensor() >= num_constants) {
          return err(absl::StrCat("attribute '", a->name()->str(), "' refers to constant ",
                                  a->tensor(), " out of range"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDebug(const fb::Executable& exe) {
  if (exe.debug() == nullptr || exe.debug()->locations() == nullptr) return absl::OkStatus();
  const auto* locs = exe.debug()->locations();
  for (uint32_t i = 0; i < locs->size(); ++i) {
    const fb::SourceLocation* l = locs->Get(i);
    if (l->function() >= exe.functions()->size())
      return absl::InvalidArgumentError("debug location names a missing function");
    const fb::Function* f = exe.functions()->Get(l->function());
    if (f->code() == nullptr || l->pc() >= f->code()->size())
      return absl::InvalidArgumentError("debug location past the code");
    if (i > 0) {
      const fb::SourceLocation* p = locs->Get(i - 1);
      if (std::make_pair(p->function(), p->pc()) >= std::make_pair(l->function(), l->pc())) {
        return absl::InvalidArgumentError("debug locations are not sorted");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VerifyExecutable(const fb::Executable& exe, uint64_t constant_segment_size,
                              const VerifyLimits& limits) {
  if (exe.functions() == nullptr || exe.functions()->size() == 0) {
    return absl::InvalidArgumentError("executable has no functions");
  }
  DYNVM_RETURN_IF_ERROR(CheckConstants(exe, constant_segment_size, limits));
  DYNVM_RETURN_IF_ERROR(CheckKernels(exe));
  absl::flat_hash_set<std::string> names;
  for (uint32_t i = 0; i < exe.functions()->size(); ++i) {
    const fb::Function* f = exe.functions()->Get(i);
    if (!names.insert(f->name()->str()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate function name '", f->name()->str(), "'"));
    }
  }
  for (uint32_t i = 0; i < exe.functions()->size(); ++i) {
    FunctionVerifier v(exe, *exe.functions()->Get(i), limits);
    DYNVM_RETURN_IF_ERROR(v.Verify());
  }
  return CheckDebug(exe);
}

absl::Status CheckStringConstant(absl::Span<const uint8_t> data, int64_t numel) {
  const uint64_t table = static_cast<uint64_t>(numel) * 16;
  if (numel < 0 || static_cast<uint64_t>(numel) > data.size() / 16) {
    return absl::InvalidArgumentError(absl::StrCat("a string constant of ", numel,
                                                   " elements needs a ", numel,
                                                   "-entry table; it has ", data.size(), " bytes"));
  }
  for (int64_t i = 0; i < numel; ++i) {
    uint64_t off, len;
    std::memcpy(&off, data.data() + 16 * i, 8);
    std::memcpy(&len, data.data() + 16 * i + 8, 8);
    if (off < table || off > data.size() || len > data.size() - off) {
      return absl::InvalidArgumentError(absl::StrCat(
          "string element ", i, ": bytes [", off, ", +", len, ") lie outside the constant's ",
          data.size() - table, "-byte string area at [", table, ", ", data.size(), ")"));
    }
    const absl::string_view bytes(reinterpret_cast<const char*>(data.data() + off), len);
    if (int64_t bad = InvalidUtf8Offset(bytes); bad >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("string element ", i, ": invalid UTF-8 at byte ", bad));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<VerifiedFile> VerifyFile(absl::Span<const uint8_t> bytes,
                                        const VerifyLimits& limits) {
  DYNVM_ASSIGN_OR_RETURN(schema::FileHeader h, schema::ParseHeader(bytes));
  const uint8_t* fb_data = bytes.data() + h.flatbuffer_offset;
  flatbuffers::Verifier::Options opts;
  opts.max_tables = 1000000;
  opts.max_depth = 64;
  flatbuffers::Verifier verifier(fb_data, h.flatbuffer_size, opts);
  if (!fb::VerifyExecutableBuffer(verifier)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flatbuffer structure is invalid (", h.flatbuffer_size, " bytes at offset ",
        h.flatbuffer_offset, "): a field points outside the buffer or has the wrong type"));
  }
  const fb::Executable* exe = fb::GetExecutable(fb_data);
  // Constants stored in a weights file are checked against that file when it is attached.
  const uint64_t segment = (h.required_features & schema::kFeatureExternalWeights)
                               ? (exe->weights() ? exe->weights()->size() : 0)
                               : h.constants_raw_size;
  DYNVM_RETURN_IF_ERROR(VerifyExecutable(*exe, segment, limits));
  return VerifiedFile{h, exe};
}

}  // namespace dynvm::isa
