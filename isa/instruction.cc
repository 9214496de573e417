#include "isa/instruction.h"

#include "absl/strings/str_cat.h"

namespace dynvm::isa {

absl::Status DecodeAt(absl::Span<const uint32_t> code, uint32_t pc, Decoded* out) {
  if (pc >= code.size())
    return absl::InvalidArgumentError(absl::StrCat("pc ", pc, " past the end"));
  const uint32_t header = code[pc];
  if (!IsValidOpcode(header & 0xFF)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown opcode ", header & 0xFF, " at pc ", pc));
  }
  if ((header >> 24) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("reserved header bits set at pc ", pc));
  }
  out->op = HeaderOpcode(header);
  out->length = HeaderLength(header);
  const OpcodeInfo& info = GetOpcodeInfo(out->op);
  if (out->length == 0 || out->length > code.size() - pc) {
    return absl::InvalidArgumentError(absl::StrCat(info.mnemonic, " at pc ", pc, ": length ",
                                                   out->length, " runs past the end of the code"));
  }
  out->num_operands = info.num_operands;
  uint32_t pos = 1;
  for (int i = 0; i < info.num_operands; ++i) {
    const Operand type = info.operands[i];
    Decoded::Slot& s = out->slots[i];
    s.type = type;
    s.pos = pos;
    s.count = 0;
    if (pos >= out->length) {
      return absl::InvalidArgumentError(
          absl::StrCat(info.mnemonic, " at pc ", pc, ": length ", out->length, " too short"));
    }
    if (IsList(type)) {
      s.count = code[pc + pos];
      if (s.count > out->length - pos - 1) {
        return absl::InvalidArgumentError(absl::StrCat(info.mnemonic, " at pc ", pc, ": list of ",
                                                       s.count, " runs past the instruction"));
      }
      pos += 1 + s.count;
    } else {
      pos += OperandWords(type);
    }
  }
  if (pos != out->length) {
    return absl::InvalidArgumentError(absl::StrCat(info.mnemonic, " at pc ", pc, ": length ",
                                                   out->length, " but operands take ", pos));
  }
  return absl::OkStatus();
}

uint32_t CodeWriter::Begin(Opcode op) {
  start_ = static_cast<uint32_t>(code_->size());
  op_ = op;
  code_->push_back(HeaderWord(op, 0));
  return start_;
}

void CodeWriter::Imm64(int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  code_->push_back(static_cast<uint32_t>(u));
  code_->push_back(static_cast<uint32_t>(u >> 32));
}

void CodeWriter::F64(double v) {
  uint64_t u;
  std::memcpy(&u, &v, 8);
  code_->push_back(static_cast<uint32_t>(u));
  code_->push_back(static_cast<uint32_t>(u >> 32));
}

void CodeWriter::List(absl::Span<const uint32_t> words) {
  code_->push_back(static_cast<uint32_t>(words.size()));
  code_->insert(code_->end(), words.begin(), words.end());
}

absl::Status CodeWriter::End() {
  const size_t length = code_->size() - start_;
  if (length > kMaxInstructionWords) {
    return absl::InvalidArgumentError(absl::StrCat(GetOpcodeInfo(op_).mnemonic, " has ", length,
                                                   " words; the limit is ", kMaxInstructionWords));
  }
  (*code_)[start_] = HeaderWord(op_, static_cast<uint32_t>(length));
  return absl::OkStatus();
}

}  // namespace dynvm::isa
