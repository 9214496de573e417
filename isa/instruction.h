// Decoding and encoding of instructions (the word layout is drawn in isa/opcodes.h).
#ifndef DYNVM_ISA_INSTRUCTION_H_
#define DYNVM_ISA_INSTRUCTION_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "isa/opcodes.h"

namespace dynvm::isa {

// One decoded instruction: where each operand's words are.
struct Decoded {
  struct Slot {
    Operand type;
    uint32_t pos;    // word index within the instruction of the operand (of the count, for lists)
    uint32_t count;  // list element count (lists only)
  };
  Opcode op;
  uint32_t length;
  int num_operands;
  Slot slots[kMaxOperands];
};

// Decodes the instruction at `pc`, checking that the opcode is known, reserved bits are zero,
// and that its operands (including list counts) fill exactly its length inside `code`.
absl::Status DecodeAt(absl::Span<const uint32_t> code, uint32_t pc, Decoded* out);

inline int64_t ReadImm64(const uint32_t* w) {
  uint64_t v = static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32);
  return static_cast<int64_t>(v);
}
inline double ReadF64(const uint32_t* w) {
  uint64_t v = static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32);
  double d;
  std::memcpy(&d, &v, 8);
  return d;
}

// Appends instructions to a code vector.
class CodeWriter {
 public:
  explicit CodeWriter(std::vector<uint32_t>* code) : code_(code) {}
  // Starts an instruction; returns its pc.
  uint32_t Begin(Opcode op);
  void Word(uint32_t w) { code_->push_back(w); }
  void Imm64(int64_t v);
  void F64(double v);
  void List(absl::Span<const uint32_t> words);
  // Patches the header's length. Fails if the instruction exceeds kMaxInstructionWords.
  absl::Status End();

 private:
  std::vector<uint32_t>* code_;
  uint32_t start_ = 0;
  Opcode op_ = Opcode::kNop;
};

inline uint32_t ValueRegister(uint32_t reg) { return reg | kRegisterFlag; }
inline bool IsValueRegister(uint32_t w) { return (w & kRegisterFlag) != 0; }

}  // namespace dynvm::isa

#endif  // DYNVM_ISA_INSTRUCTION_H_
