#include "isa/code_builder.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "isa/instruction.h"

#if !defined(NDEBUG) && !defined(DYNVM_CHECK_EMITTED)
#define DYNVM_CHECK_EMITTED 1
#endif

namespace dynvm::isa {

void CodeBuilder::Finish(Opcode op, uint32_t pc) {
  const size_t length = code_->size() - pc;
  if (length > kMaxInstructionWords) {
    if (status_.ok()) {
      status_ =
          absl::InvalidArgumentError(absl::StrCat(GetOpcodeInfo(op).mnemonic, " has ", length,
                                                  " words; the limit is ", kMaxInstructionWords));
    }
    return;
  }
  (*code_)[pc] = HeaderWord(op, static_cast<uint32_t>(length));
#ifdef DYNVM_CHECK_EMITTED
  Decoded d;
  if (absl::Status s = DecodeAt(*code_, pc, &d); !s.ok()) {
    // A caller of Emit broke the encoding: a bug in dynvm, not bad input.
    const std::string message(s.message());
    std::fprintf(stderr, "CodeBuilder: malformed instruction emitted: %s\n", message.c_str());
    std::abort();
  }
#endif
}

CodeBuilder::IfScope CodeBuilder::If(uint32_t cond) {
  return IfScope(this, Emit<op::If>(cond, 0u));
}

CodeBuilder::IfScope::IfScope(IfScope&& other) noexcept
    : b_(std::exchange(other.b_, nullptr)), if_pc_(other.if_pc_), else_pc_(other.else_pc_) {}

void CodeBuilder::IfScope::Else() {
  else_pc_ = b_->Emit<op::Else>(0u);
  // A false condition goes to the first instruction of the else-branch.
  b_->PatchJump<op::If, op::If::kElse>(if_pc_, b_->pc());
}

void CodeBuilder::IfScope::Close() {
  if (b_ == nullptr) return;
  const uint32_t endif_pc = b_->Emit<op::EndIf>();
  if (else_pc_ >= 0) {
    b_->PatchJump<op::Else, op::Else::kEnd>(static_cast<uint32_t>(else_pc_), endif_pc);
  } else {
    b_->PatchJump<op::If, op::If::kElse>(if_pc_, endif_pc);
  }
  b_ = nullptr;
}

CodeBuilder::LoopScope CodeBuilder::Loop(uint32_t iter, uint32_t trip) {
  return LoopScope(this, Emit<op::Loop>(iter, trip, 0u));
}

CodeBuilder::LoopScope::LoopScope(LoopScope&& other) noexcept
    : b_(std::exchange(other.b_, nullptr)),
      loop_pc_(other.loop_pc_),
      breaks_(std::move(other.breaks_)) {}

void CodeBuilder::LoopScope::BreakUnless(uint32_t cond) {
  breaks_.push_back(b_->Emit<op::BreakUnless>(cond, 0u));
}

void CodeBuilder::LoopScope::Close() {
  if (b_ == nullptr) return;
  const uint32_t end_pc = b_->Emit<op::EndLoop>(0u);
  b_->PatchJump<op::EndLoop, op::EndLoop::kHead>(end_pc, loop_pc_);
  const uint32_t exit_pc = b_->pc();
  b_->PatchJump<op::Loop, op::Loop::kExit>(loop_pc_, exit_pc);
  for (uint32_t pc : breaks_) b_->PatchJump<op::BreakUnless, op::BreakUnless::kTarget>(pc, exit_pc);
  b_ = nullptr;
}

}  // namespace dynvm::isa
