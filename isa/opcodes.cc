#include "isa/opcodes.h"

#include <array>

namespace dynvm::isa {
namespace {

#define DYNVM_EXPAND(...) __VA_ARGS__

constexpr OpcodeInfo MakeInfo(absl::string_view mnemonic, absl::string_view meaning,
                              std::initializer_list<Operand> operands) {
  OpcodeInfo info{mnemonic, meaning, static_cast<uint8_t>(operands.size()), {}};
  int i = 0;
  for (Operand o : operands) info.operands[i++] = o;
  return info;
}

constexpr std::array<OpcodeInfo, kNumOpcodes> BuildTable() {
  using enum Operand;
  return {{
#define DYNVM_OPCODE_INFO(name, mnemonic, operands, meaning) \
  MakeInfo(mnemonic, meaning, {DYNVM_EXPAND operands}),
      DYNVM_OPCODES(DYNVM_OPCODE_INFO)
#undef DYNVM_OPCODE_INFO
  }};
}

constexpr std::array<OpcodeInfo, kNumOpcodes> kTable = BuildTable();

}  // namespace

const OpcodeInfo& GetOpcodeInfo(Opcode op) { return kTable[static_cast<size_t>(op)]; }

}  // namespace dynvm::isa
