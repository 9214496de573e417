// The dynvm instruction set, defined once. The encoder, decoder, verifier, assembler,
// disassembler and the interpreter's dispatch table all expand DYNVM_OPCODES.
// docs/isa.md explains the decisions behind it.
//
// Encoding: code is a vector of 32-bit words. Every instruction starts with a header word
//
//     31        24 23                    8 7          0
//    +------------+-----------------------+------------+
//    |  reserved  |  length in words      |   opcode   |
//    +------------+-----------------------+------------+
//
// followed by its operands, in the order of its format below. Each operand takes one word,
// except kImm64 and kImmF64 (two words, low word first) and lists (a count word, then one word
// per element). The length counts the header word, so `pc += length` always steps to the next
// instruction. Reserved bits are zero.
//
// Operand letters in the meanings below: S[x] scalar register, O[x] object register,
// "v" a value operand (an i64 register or a small immediate), "j" a jump target.
#ifndef DYNVM_ISA_OPCODES_H_
#define DYNVM_ISA_OPCODES_H_

#include <array>
#include <cstdint>
#include <initializer_list>

#include "absl/strings/string_view.h"

namespace dynvm::isa {

enum class Operand : uint8_t {
  // Scalar registers: R read, W write; I i64, F f64, B bool, S any scalar type.
  kRI,
  kRF,
  kRB,
  kRS,
  kWI,
  kWF,
  kWB,
  kWS,
  // Object registers by kind: R read, W write, M read and updated in place.
  // T tensor, G storage, Q sequence, P optional, X any kind.
  kRT,
  kWT,
  kMT,
  kWG,
  kRG,
  kRQ,
  kWQ,
  kMQ,
  kRP,
  kWP,
  kRX,
  kWX,
  kKill,    // an object register released; unassigned afterwards
  kImm32,   // 1 word, unsigned
  kImm64,   // 2 words, two's complement int64
  kImmF64,  // 2 words, IEEE double
  kValue,   // 1 word: bit 31 set -> i64 register (bits 0..30), else immediate 0..2^31-1
  kDType,   // 1 word, a dynvm::DType
  kDevice,  // 1 word, a device id (0 CPU, 1 CUDA)
  kKernel,  // 1 word, kernel table index
  kConst,   // 1 word, constant table index
  kFunc,    // 1 word, function index
  kString,  // 1 word, string table index
  kSite,    // 1 word, invoke site index, unique within the function
  kJump,    // 1 word, signed offset in words from this instruction's header
  // Lists: a count word then the elements.
  kListRX,   // object registers read; 0xFFFFFFFF marks an absent optional kernel input
  kListWX,   // object registers written
  kListOut,  // invoke outputs: preallocated ones are read and written, dynamic ones written
  kListRS,   // scalar registers read
  kListWS,   // scalar registers written
  kListValue,
};

// X(Enumerator, "mnemonic", (operand formats...), (operand names...), "meaning")
//
// The operand names become the fields of the instruction's struct in isa/operands.h
// (isa::op::Loop::kTrip is operand 1 of `loop`); every reader and writer of code addresses
// operands through them, so a word position is never written by hand.
#define DYNVM_OPCODES(X)                                                                           \
  /* Structured control flow. Jump operands are written by the assembler and checked */            \
  /* by the verifier against the nesting, so they are never free-form. */                          \
  X(Nop, "nop", (), (), "no operation")                                                            \
  X(If, "if", (kRB, kJump), (kCond, kElse),                                                        \
    "if !S[a]: goto j (after the matching else, or its endif)")                                    \
  X(Else, "else", (kJump), (kEnd), "goto j (the matching endif)")                                  \
  X(EndIf, "endif", (), (), "closes an if")                                                        \
  X(Loop, "loop", (kWI, kValue, kJump), (kIter, kTrip, kExit),                                     \
    "S[a] := 0; if S[a] >= v: goto j (past endloop)")                                              \
  X(EndLoop, "endloop", (kJump), (kHead),                                                          \
    "S[iter] += 1; if S[iter] < trip: goto the body of loop j, else fall through")                 \
  X(Break, "break", (kJump), (kTarget), "goto j (past the innermost endloop)")                     \
  X(BreakIf, "break_if", (kRB, kJump), (kCond, kTarget),                                           \
    "if S[a]: goto j (past the innermost endloop)")                                                \
  X(BreakUnless, "break_unless", (kRB, kJump), (kCond, kTarget),                                   \
    "if !S[a]: goto j (past the innermost endloop)")                                               \
  X(Continue, "continue", (kJump), (kTarget), "goto j (the innermost endloop)")                    \
  X(Call, "call", (kFunc, kListRX, kListRS, kListWX, kListWS),                                     \
    (kFunc, kObjArgs, kScalarArgs, kObjResults, kScalarResults),                                   \
    "(O..., S...) := F[f](O..., S...)")                                                            \
  X(Ret, "ret", (kListRX, kListRS), (kObjs, kScalars), "return O..., S... to the caller")          \
  X(Fail, "fail", (kString), (kMessage), "stop the run with error message a")                      \
  X(Assert, "assert", (kRB, kString), (kCond, kMessage),                                           \
    "if !S[a]: stop the run with error message b")                                                 \
  /* Moves. Objects are reference-counted handles: a move never copies tensor data. */             \
  X(Mov, "mov", (kWX, kRX), (kDst, kSrc), "O[a] := O[b]")                                          \
  X(MovS, "mov_s", (kWS, kRS), (kDst, kSrc), "S[a] := S[b]")                                       \
  X(PMove, "pmove", (kListWX, kListRX), (kDst, kSrc),                                              \
    "O[a_i] := O[b_i] for all i at once (a swap works)")                                           \
  X(PMoveS, "pmove_s", (kListWS, kListRS), (kDst, kSrc), "S[a_i] := S[b_i] for all i at once")     \
  X(Kill, "kill", (kKill), (kReg), "release O[a]")                                                 \
  /* Scalar constants and arithmetic. Integer ops wrap; div/mod floor and fail on zero. */         \
  X(ConstI, "const_i", (kWI, kImm64), (kDst, kImm), "S[a] := imm")                                 \
  X(ConstF, "const_f", (kWF, kImmF64), (kDst, kImm), "S[a] := imm")                                \
  X(ConstB, "const_b", (kWB, kImm32), (kDst, kImm), "S[a] := imm != 0")                            \
  X(AddI, "add_i", (kWI, kRI, kRI), (kDst, kLhs, kRhs), "S[a] := S[b] + S[c]")                     \
  X(AddImmI, "addimm_i", (kWI, kRI, kImm64), (kDst, kLhs, kImm), "S[a] := S[b] + imm")             \
  X(SubI, "sub_i", (kWI, kRI, kRI), (kDst, kLhs, kRhs), "S[a] := S[b] - S[c]")                     \
  X(MulI, "mul_i", (kWI, kRI, kRI), (kDst, kLhs, kRhs), "S[a] := S[b] * S[c]")                     \
  X(DivI, "div_i", (kWI, kRI, kRI), (kDst, kLhs, kRhs), "S[a] := floor(S[b] / S[c])")              \
  X(ModI, "mod_i", (kWI, kRI, kRI), (kDst, kLhs, kRhs),                                            \
    "S[a] := S[b] - S[c] * floor(S[b] / S[c])")                                                    \
  X(MinI, "min_i", (kWI, kRI, kRI), (kDst, kLhs, kRhs), "S[a] := min(S[b], S[c])")                 \
  X(MaxI, "max_i", (kWI, kRI, kRI), (kDst, kLhs, kRhs), "S[a] := max(S[b], S[c])")                 \
  X(NegI, "neg_i", (kWI, kRI), (kDst, kSrc), "S[a] := -S[b]")                                      \
  X(AddF, "add_f", (kWF, kRF, kRF), (kDst, kLhs, kRhs), "S[a] := S[b] + S[c]")                     \
  X(SubF, "sub_f", (kWF, kRF, kRF), (kDst, kLhs, kRhs), "S[a] := S[b] - S[c]")                     \
  X(MulF, "mul_f", (kWF, kRF, kRF), (kDst, kLhs, kRhs), "S[a] := S[b] * S[c]")                     \
  X(DivF, "div_f", (kWF, kRF, kRF), (kDst, kLhs, kRhs), "S[a] := S[b] / S[c] (IEEE)")              \
  X(MinF, "min_f", (kWF, kRF, kRF), (kDst, kLhs, kRhs), "S[a] := min(S[b], S[c])")                 \
  X(MaxF, "max_f", (kWF, kRF, kRF), (kDst, kLhs, kRhs), "S[a] := max(S[b], S[c])")                 \
  X(NegF, "neg_f", (kWF, kRF), (kDst, kSrc), "S[a] := -S[b]")                                      \
  X(EqI, "eq_i", (kWB, kRI, kRI), (kDst, kLhs, kRhs), "S[a] := S[b] == S[c]")                      \
  X(NeI, "ne_i", (kWB, kRI, kRI), (kDst, kLhs, kRhs), "S[a] := S[b] != S[c]")                      \
  X(LtI, "lt_i", (kWB, kRI, kRI), (kDst, kLhs, kRhs), "S[a] := S[b] < S[c]")                       \
  X(LeI, "le_i", (kWB, kRI, kRI), (kDst, kLhs, kRhs), "S[a] := S[b] <= S[c]")                      \
  X(EqF, "eq_f", (kWB, kRF, kRF), (kDst, kLhs, kRhs), "S[a] := S[b] == S[c]")                      \
  X(LtF, "lt_f", (kWB, kRF, kRF), (kDst, kLhs, kRhs), "S[a] := S[b] < S[c]")                       \
  X(LeF, "le_f", (kWB, kRF, kRF), (kDst, kLhs, kRhs), "S[a] := S[b] <= S[c]")                      \
  X(And, "and", (kWB, kRB, kRB), (kDst, kLhs, kRhs), "S[a] := S[b] && S[c]")                       \
  X(Or, "or", (kWB, kRB, kRB), (kDst, kLhs, kRhs), "S[a] := S[b] || S[c]")                         \
  X(Xor, "xor", (kWB, kRB, kRB), (kDst, kLhs, kRhs), "S[a] := S[b] != S[c]")                       \
  X(Not, "not", (kWB, kRB), (kDst, kSrc), "S[a] := !S[b]")                                         \
  X(IToF, "i2f", (kWF, kRI), (kDst, kSrc), "S[a] := double(S[b])")                                 \
  X(FToI, "f2i", (kWI, kRF), (kDst, kSrc), "S[a] := trunc(S[b]), saturated; NaN gives 0")          \
  X(BToI, "b2i", (kWI, kRB), (kDst, kSrc), "S[a] := S[b] ? 1 : 0")                                 \
  X(SelectI, "select_i", (kWI, kRB, kRI, kRI), (kDst, kCond, kIfTrue, kIfFalse),                   \
    "S[a] := S[b] ? S[c] : S[d]")                                                                  \
  X(SelectF, "select_f", (kWF, kRB, kRF, kRF), (kDst, kCond, kIfTrue, kIfFalse),                   \
    "S[a] := S[b] ? S[c] : S[d]")                                                                  \
  /* Bridges between the banks. Reading an element is a sync point for device tensors. */          \
  X(Dim, "dim", (kWI, kRT, kImm32), (kDst, kTensor, kAxis),                                        \
    "S[a] := O[b].dims[n] (fails if n >= rank)")                                                   \
  X(Rank, "rank", (kWI, kRT), (kDst, kTensor), "S[a] := rank of O[b]")                             \
  X(Numel, "numel", (kWI, kRT), (kDst, kTensor), "S[a] := element count of O[b]")                  \
  X(ReadI, "read_i", (kWI, kRT, kValue), (kDst, kTensor, kIndex),                                  \
    "S[a] := i64(O[b].flat[v]) (bounds-checked)")                                                  \
  X(ReadF, "read_f", (kWF, kRT, kValue), (kDst, kTensor, kIndex),                                  \
    "S[a] := f64(O[b].flat[v]) (bounds-checked)")                                                  \
  X(ReadB, "read_b", (kWB, kRT, kValue), (kDst, kTensor, kIndex),                                  \
    "S[a] := O[b].flat[v] != 0 (bounds-checked)")                                                  \
  X(Write, "write", (kMT, kValue, kRS), (kTensor, kIndex, kSrc),                                   \
    "O[a].flat[v] := S[c] converted to O[a]'s dtype")                                              \
  /* Memory. Tensors are strided views at an offset into a storage. */                             \
  X(AllocStorage, "alloc_storage", (kWG, kValue, kDevice), (kDst, kBytes, kDevice),                \
    "O[a] := v bytes from the pool of a device, 64-byte aligned")                                  \
  X(AllocTensor, "alloc_tensor", (kWT, kRG, kValue, kDType, kListValue),                           \
    (kDst, kStorage, kOffset, kDType, kDims),                                                      \
    "O[a] := contiguous view of O[b] at byte offset v with dims (checked to fit)")                 \
  X(AllocGrowable, "alloc_growable", (kWT, kDType, kDevice, kImm32, kValue, kListValue),           \
    (kDst, kDType, kDevice, kAxis, kCapacity, kDims),                                              \
    "O[a] := new tensor with dims, room for v along axis n before it must grow")                   \
  X(Append, "append", (kMT, kRT, kImm32), (kTensor, kPart, kAxis),                                 \
    "O[a] := concat(O[a], O[b]) along axis n, in place when O[a] ends at its storage's "           \
    "frontier; else grows x2")                                                                     \
  X(LoadConst, "load_const", (kWT, kConst), (kDst, kConst),                                        \
    "O[a] := read-only view of constant c")                                                        \
  X(Reshape, "reshape", (kWT, kRT, kListValue), (kDst, kSrc, kDims),                               \
    "O[a] := O[b] with new dims (same count; O[b] contiguous)")                                    \
  X(View, "view", (kWT, kRT, kValue, kListValue, kListValue),                                      \
    (kDst, kSrc, kOffset, kDims, kStrides),                                                        \
    "O[a] := view of O[b]'s storage at element offset v, dims, strides (elements; checked)")       \
  X(Copy, "copy", (kMT, kRT), (kDst, kSrc),                                                        \
    "O[a][...] := O[b][...] (same shape and dtype; across devices)")                               \
  X(Invoke, "invoke", (kKernel, kSite, kListRX, kListOut), (kKernel, kSite, kInputs, kOutputs),    \
    "K[k](inputs) -> outputs")                                                                     \
  X(Emit, "emit", (kRT, kImm32), (kTensor, kStream), "hand O[a] to the host's stream n callback")  \
  /* Sequences and optionals (values; updated in place when not shared). */                        \
  X(SeqNew, "seq_new", (kWQ), (kDst), "O[a] := empty sequence")                                    \
  X(SeqPush, "seq_push", (kMQ, kRT), (kSeq, kTensor), "append O[b] to O[a]")                       \
  X(SeqInsert, "seq_insert", (kMQ, kRT, kRI), (kSeq, kTensor, kIndex),                             \
    "insert O[b] into O[a] at S[c] (negative from the end)")                                       \
  X(SeqErase, "seq_erase", (kMQ, kRI), (kSeq, kIndex), "erase element S[b] of O[a]")               \
  X(SeqAt, "seq_at", (kWT, kRQ, kRI), (kDst, kSeq, kIndex), "O[a] := O[b][S[c]] (bounds-checked)") \
  X(SeqLen, "seq_len", (kWI, kRQ), (kDst, kSeq), "S[a] := length of O[b]")                         \
  X(OptNone, "opt_none", (kWP), (kDst), "O[a] := empty optional")                                  \
  X(OptSome, "opt_some", (kWP, kRX), (kDst, kContent), "O[a] := optional holding O[b]")            \
  X(OptHas, "opt_has", (kWB, kRP), (kDst, kOpt), "S[a] := O[b] holds a value")                     \
  X(OptGet, "opt_get", (kWX, kRP), (kDst, kOpt), "O[a] := the value of O[b] (fails if empty)")     \
  X(Extend, "extend", (kMT, kImm32, kValue), (kTensor, kAxis, kLength),                            \
    "O[a] := O[a] lengthened to v along axis n, the new rows unwritten (a kernel writes them); "   \
    "in place when O[a] ends at its storage's frontier with room; else grows x2")

enum class Opcode : uint8_t {
#define DYNVM_OPCODE_ENUM(name, mnemonic, operands, names, meaning) k##name,
  DYNVM_OPCODES(DYNVM_OPCODE_ENUM)
#undef DYNVM_OPCODE_ENUM
};

inline constexpr int kNumOpcodes = 0
#define DYNVM_OPCODE_COUNT(name, mnemonic, operands, names, meaning) +1
    DYNVM_OPCODES(DYNVM_OPCODE_COUNT)
#undef DYNVM_OPCODE_COUNT
    ;

inline constexpr uint32_t kRegisterFlag = 0x80000000u;  // in a kValue word
inline constexpr uint32_t kAbsentRegister = 0xFFFFFFFFu;
inline constexpr int kMaxOperands = 6;
inline constexpr uint32_t kMaxInstructionWords = 0xFFFF;

struct OpcodeInfo {
  absl::string_view mnemonic;
  absl::string_view meaning;
  uint8_t num_operands;
  Operand operands[kMaxOperands];
};

namespace internal {
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
#define DYNVM_OPCODE_INFO(name, mnemonic, operands, names, meaning) \
  MakeInfo(mnemonic, meaning, {DYNVM_EXPAND operands}),
      DYNVM_OPCODES(DYNVM_OPCODE_INFO)
#undef DYNVM_OPCODE_INFO
  }};
}
#undef DYNVM_EXPAND
}  // namespace internal

// The table, usable in constant expressions (isa/operands.h computes word positions from it).
inline constexpr std::array<OpcodeInfo, kNumOpcodes> kOpcodeTable = internal::BuildTable();

inline const OpcodeInfo& GetOpcodeInfo(Opcode op) { return kOpcodeTable[static_cast<size_t>(op)]; }
inline bool IsValidOpcode(uint32_t op) { return op < static_cast<uint32_t>(kNumOpcodes); }

// Words taken by an operand that is not a list (lists take 1 + count).
constexpr int OperandWords(Operand o) {
  return (o == Operand::kImm64 || o == Operand::kImmF64) ? 2 : 1;
}
constexpr bool IsList(Operand o) { return o >= Operand::kListRX; }

inline uint32_t HeaderWord(Opcode op, uint32_t length) {
  return static_cast<uint32_t>(op) | (length << 8);
}
inline Opcode HeaderOpcode(uint32_t word) { return static_cast<Opcode>(word & 0xFF); }
inline uint32_t HeaderLength(uint32_t word) { return (word >> 8) & 0xFFFF; }

}  // namespace dynvm::isa

#endif  // DYNVM_ISA_OPCODES_H_
