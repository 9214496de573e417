// Writes bytecode: one typed call per instruction, generated from DYNVM_OPCODES, and scopes
// for the structured control flow.
//
//     isa::CodeBuilder b(&code);
//     b.Emit<isa::op::ConstI>(r, int64_t{42});               // operands in the table's order
//     {
//       isa::CodeBuilder::LoopScope loop = b.Loop(iter, trip);  // loop iter, trip
//       loop.BreakUnless(cond);                                  // break_unless cond
//       ...                                                      // the body
//     }                                                          // endloop; jumps patched
//
// Emit checks at compile time that it gets one argument per operand, each of a matching kind:
// an integer for registers, value words, immediates of one word and table indices; int64_t
// for kImm64; double for kImmF64; anything convertible to absl::Span<const uint32_t> for
// lists. Jumps are written by the scopes. An instruction longer than kMaxInstructionWords
// (a list too long) makes status() an error; the code is then unusable.
//
// Builds with assertions (no NDEBUG) or DYNVM_CHECK_EMITTED (the sanitizer builds) decode
// every instruction as it is written (isa::DecodeAt) and abort on a malformed one: that is a
// bug in the caller, never bad input.
#ifndef DYNVM_ISA_CODE_BUILDER_H_
#define DYNVM_ISA_CODE_BUILDER_H_

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "isa/opcodes.h"
#include "isa/operands.h"

namespace dynvm::isa {

class CodeBuilder {
 public:
  explicit CodeBuilder(std::vector<uint32_t>* code) : code_(code) {}
  CodeBuilder(const CodeBuilder&) = delete;
  CodeBuilder& operator=(const CodeBuilder&) = delete;

  // Appends one instruction of opcode Op::kOpcode; returns its pc.
  template <typename Op, typename... Args>
  uint32_t Emit(const Args&... args) {
    static_assert(sizeof...(Args) == kNumOperands<Op>, "wrong number of operands");
    const uint32_t pc = this->pc();
    code_->push_back(HeaderWord(Op::kOpcode, 0));
    [&]<size_t... I>(std::index_sequence<I...>) { (Put<Op, static_cast<int>(I)>(args), ...); }
    (std::index_sequence_for<Args...>{});
    Finish(Op::kOpcode, pc);
    return pc;
  }

  // Sets jump operand i of the Op instruction at `pc` to reach `target` (a pc).
  template <typename Op, int i>
  void PatchJump(uint32_t pc, uint32_t target) {
    static_assert(kOperandType<Op, i> == Operand::kJump, "not a jump operand");
    uint32_t* ip = code_->data() + pc;
    ip[OperandPos<Op, i>(ip)] = static_cast<uint32_t>(static_cast<int32_t>(target - pc));
  }

  // The pc the next instruction gets.
  uint32_t pc() const { return static_cast<uint32_t>(code_->size()); }
  // OK, or the first instruction that was too long.
  const absl::Status& status() const { return status_; }

  // `if cond` ... [`else` ...] `endif`, closed by Close() or the destructor.
  class IfScope {
   public:
    IfScope(IfScope&& other) noexcept;
    IfScope& operator=(IfScope&&) = delete;
    ~IfScope() { Close(); }
    // Ends the then-branch and starts the else-branch.
    void Else();
    // Emits `endif` and patches the jumps; idempotent.
    void Close();

   private:
    friend class CodeBuilder;
    IfScope(CodeBuilder* b, uint32_t if_pc) : b_(b), if_pc_(if_pc) {}
    CodeBuilder* b_;
    uint32_t if_pc_;
    int64_t else_pc_ = -1;
  };
  IfScope If(uint32_t cond);

  // `loop iter, trip` ... `endloop`, closed by Close() or the destructor. `trip` is a value
  // word (an immediate, or ValueRegister(r)).
  class LoopScope {
   public:
    LoopScope(LoopScope&& other) noexcept;
    LoopScope& operator=(LoopScope&&) = delete;
    ~LoopScope() { Close(); }
    // `break_unless cond`: leaves the loop when S[cond] is false.
    void BreakUnless(uint32_t cond);
    // Emits `endloop` and patches the exit and the breaks; idempotent.
    void Close();

   private:
    friend class CodeBuilder;
    LoopScope(CodeBuilder* b, uint32_t loop_pc) : b_(b), loop_pc_(loop_pc) {}
    CodeBuilder* b_;
    uint32_t loop_pc_;
    std::vector<uint32_t> breaks_;  // pcs of break_unless
  };
  LoopScope Loop(uint32_t iter, uint32_t trip);

 private:
  template <typename Op, int i, typename A>
  void Put(const A& a) {
    constexpr Operand t = kOperandType<Op, i>;
    if constexpr (IsList(t)) {
      const absl::Span<const uint32_t> words(a);
      code_->push_back(static_cast<uint32_t>(words.size()));
      code_->insert(code_->end(), words.begin(), words.end());
    } else if constexpr (t == Operand::kImm64) {
      static_assert(std::is_integral_v<A>, "kImm64 takes an integer");
      const auto u = static_cast<uint64_t>(static_cast<int64_t>(a));
      code_->push_back(static_cast<uint32_t>(u));
      code_->push_back(static_cast<uint32_t>(u >> 32));
    } else if constexpr (t == Operand::kImmF64) {
      static_assert(std::is_floating_point_v<A>, "kImmF64 takes a double");
      const double d = a;
      uint64_t u;
      std::memcpy(&u, &d, sizeof u);
      code_->push_back(static_cast<uint32_t>(u));
      code_->push_back(static_cast<uint32_t>(u >> 32));
    } else {
      static_assert(std::is_integral_v<A> || std::is_enum_v<A>, "a one-word operand");
      code_->push_back(static_cast<uint32_t>(a));
    }
  }
  // Patches the header's length; records an over-long instruction; checks the encoding in
  // checking builds.
  void Finish(Opcode op, uint32_t pc);

  std::vector<uint32_t>* code_;
  absl::Status status_;
};

}  // namespace dynvm::isa

#endif  // DYNVM_ISA_CODE_BUILDER_H_
