// Typed access to the operands of one instruction, generated from DYNVM_OPCODES.
//
// Each opcode has a struct in isa::op named like its enumerator, whose enum lists the
// operand names of the table:
//
//     isa::op::Loop::kIter, isa::op::Loop::kTrip, isa::op::Loop::kExit   (operands 0, 1, 2)
//
// `Operands<op::Loop> in(ip)` reads the instruction at ip: `in.reg<op::Loop::kIter>()`,
// `in.value<op::Loop::kTrip>()`, `in.jump<op::Loop::kExit>()`. Each accessor checks at compile
// time that the operand has a matching format, and computes its word position from the table:
// a constant for operands before any list, one add per list before it otherwise. Readers never
// write `ip + N`; isa::CodeBuilder (isa/code_builder.h) is the matching writer.
//
// The accessors do not check anything at run time: they are for code the verifier accepted
// (the interpreter, the loader) or that the compiler is writing.
#ifndef DYNVM_ISA_OPERANDS_H_
#define DYNVM_ISA_OPERANDS_H_

#include <cstdint>
#include <cstring>

#include "absl/types/span.h"
#include "isa/opcodes.h"

namespace dynvm::isa {

namespace op {
#define DYNVM_EXPAND_NAMES(...) __VA_ARGS__
#define DYNVM_OPCODE_STRUCT(name, mnemonic, operands, names, meaning) \
  struct name {                                                       \
    static constexpr Opcode kOpcode = Opcode::k##name;                \
    enum Field : int { DYNVM_EXPAND_NAMES names };                    \
  };
DYNVM_OPCODES(DYNVM_OPCODE_STRUCT)
#undef DYNVM_OPCODE_STRUCT
#undef DYNVM_EXPAND_NAMES
}  // namespace op

// The format of operand i of Op.
template <typename Op, int i>
constexpr Operand kOperandType = [] {
  static_assert(i >= 0 && i < kOpcodeTable[static_cast<size_t>(Op::kOpcode)].num_operands,
                "operand index out of range for this opcode");
  return kOpcodeTable[static_cast<size_t>(Op::kOpcode)].operands[i];
}();

template <typename Op>
constexpr int kNumOperands = kOpcodeTable[static_cast<size_t>(Op::kOpcode)].num_operands;

constexpr bool IsRegisterOperand(Operand o) { return o <= Operand::kKill; }
// Operands of one word that are not registers or jumps: immediates and table indices.
constexpr bool IsWordOperand(Operand o) {
  return o == Operand::kImm32 || o == Operand::kDType || o == Operand::kDevice ||
         o == Operand::kKernel || o == Operand::kConst || o == Operand::kFunc ||
         o == Operand::kString || o == Operand::kSite;
}

// Word position of operand i of Op within its instruction (the header is word 0).
template <typename Op, int i>
inline uint32_t OperandPos(const uint32_t* ip) {
  if constexpr (i == 0) {
    return 1;
  } else {
    constexpr Operand prev = kOperandType<Op, i - 1>;
    const uint32_t at = OperandPos<Op, i - 1>(ip);
    if constexpr (IsList(prev)) {
      return at + 1 + ip[at];
    } else {
      return at + OperandWords(prev);
    }
  }
}

template <typename Op>
class Operands {
 public:
  explicit Operands(const uint32_t* ip) : ip_(ip) {}

  // A scalar or object register (kKill included).
  template <int i>
  uint32_t reg() const {
    static_assert(IsRegisterOperand(kOperandType<Op, i>), "not a register operand");
    return ip_[OperandPos<Op, i>(ip_)];
  }
  // A kValue word: an immediate, or an i64 register with kRegisterFlag set.
  template <int i>
  uint32_t value() const {
    static_assert(kOperandType<Op, i> == Operand::kValue, "not a value operand");
    return ip_[OperandPos<Op, i>(ip_)];
  }
  // An immediate or a table index of one word.
  template <int i>
  uint32_t word() const {
    static_assert(IsWordOperand(kOperandType<Op, i>), "not a one-word immediate or index");
    return ip_[OperandPos<Op, i>(ip_)];
  }
  // A jump: a signed offset in words from this instruction's header.
  template <int i>
  int32_t jump() const {
    static_assert(kOperandType<Op, i> == Operand::kJump, "not a jump operand");
    return static_cast<int32_t>(ip_[OperandPos<Op, i>(ip_)]);
  }
  template <int i>
  int64_t imm64() const {
    static_assert(kOperandType<Op, i> == Operand::kImm64, "not an imm64 operand");
    const uint32_t* w = ip_ + OperandPos<Op, i>(ip_);
    return static_cast<int64_t>(static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32));
  }
  template <int i>
  double f64() const {
    static_assert(kOperandType<Op, i> == Operand::kImmF64, "not an f64 operand");
    const uint32_t* w = ip_ + OperandPos<Op, i>(ip_);
    const uint64_t u = static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32);
    double d;
    std::memcpy(&d, &u, sizeof d);
    return d;
  }
  // The elements of a list operand.
  template <int i>
  absl::Span<const uint32_t> list() const {
    static_assert(IsList(kOperandType<Op, i>), "not a list operand");
    const uint32_t* w = ip_ + OperandPos<Op, i>(ip_);
    return absl::Span<const uint32_t>(w + 1, w[0]);
  }
  // Word position of operand i (for patching a jump written before its target was known).
  template <int i>
  uint32_t pos() const {
    return OperandPos<Op, i>(ip_);
  }
  // The instruction's length in words, from its header.
  uint32_t length() const { return HeaderLength(ip_[0]); }

 private:
  const uint32_t* ip_;
};

}  // namespace dynvm::isa

#endif  // DYNVM_ISA_OPERANDS_H_
