// Test-only helpers shared by verifier_test.cc and verifier_tables_test.cc: a prelude
// of kernels, constants and a callee, programs around it, and ways to build, mutate and verify
// them.
#ifndef DYNVM_ISA_VERIFIER_TESTING_H_
#define DYNVM_ISA_VERIFIER_TESTING_H_

#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "isa/assembler.h"
#include "isa/instruction.h"
#include "isa/opcodes.h"
#include "isa/verifier.h"
#include "schema/format.h"
#include "schema/format_testing.h"
#include "schema/writer.h"

namespace dynvm::isa {

// Shared by the programs below: k0 Add(f32, f32) -> dynamic f32; k1 Add(f32, optional f32) ->
// preallocated f32; k2 Split(f32) -> two dynamic f32; c0 f32[2]; c1 i64[2]; str0; and a
// callee (tensor:f32, i64) -> (tensor:f32, bool) at function index 0.
inline constexpr absl::string_view kPrelude = R"(
.string "boom"
.const f32 [2] values:[1, 2]
.const i64 [2] values:[1, 2]
.kernel "Add" in(f32, f32) out(dyn:f32)
.kernel "Add" in(f32, f32?) out(f32)
.kernel "Split" in(f32) out(dyn:f32, dyn:f32)
.function callee
  .params 1 1
  .sregs i64 bool
  .oregs tensor:f32
  .oresults tensor:f32
  .sresults bool
  const_b %s1, 1
  ret (%o0), (%s1)
.end
)";

// `main` (function 1) with the given registers, extra directives and body.
inline std::string Program(absl::string_view sregs, absl::string_view oregs, absl::string_view body,
                           absl::string_view extra = "") {
  return absl::StrCat(kPrelude, ".function main\n  .params 0 0\n  .sregs ", sregs, "\n  .oregs ",
                      oregs, "\n", extra, "  .entry\n", body, "\n.end\n");
}

inline fb::FunctionT* Fn(Assembly& a, absl::string_view name) {
  for (auto& f : a.exe->functions) {
    if (f->name == name) return f.get();
  }
  ADD_FAILURE() << "no function " << name;
  return a.exe->functions.back().get();
}

// The pc of the `index`-th instruction of `code`.
inline uint32_t PcOfIndex(const std::vector<uint32_t>& code, int index) {
  uint32_t pc = 0;
  for (int i = 0; i < index; ++i) pc += HeaderLength(code[pc]);
  return pc;
}

// The pc of the `nth` instruction with opcode `op`.
inline uint32_t PcOf(const std::vector<uint32_t>& code, Opcode op, int nth = 0) {
  for (uint32_t pc = 0; pc < code.size(); pc += HeaderLength(code[pc])) {
    if (HeaderOpcode(code[pc]) == op && nth-- == 0) return pc;
  }
  ADD_FAILURE() << "no " << GetOpcodeInfo(op).mnemonic << " in the code";
  return 0;
}

// The word index of operand `slot` of the instruction at `pc`.
inline uint32_t OperandWord(const std::vector<uint32_t>& code, uint32_t pc, int slot) {
  Decoded d;
  absl::Status s = DecodeAt(code, pc, &d);
  EXPECT_TRUE(s.ok()) << s;
  return pc + d.slots[slot].pos;
}

// Verifies `bytes` from an 8-byte aligned copy, as the loader does.
inline absl::Status VerifyBytes(absl::string_view bytes, const VerifyLimits& limits = {}) {
  std::vector<uint64_t> buf((bytes.size() + 7) / 8);
  if (!bytes.empty()) std::memcpy(buf.data(), bytes.data(), bytes.size());
  return VerifyFile({reinterpret_cast<const uint8_t*>(buf.data()), bytes.size()}, limits).status();
}

using Mutation = std::function<void(Assembly&)>;

inline absl::StatusOr<std::string> Build(absl::string_view text, const Mutation& mutate = nullptr) {
  absl::StatusOr<Assembly> a = Assemble(text);
  if (!a.ok()) return a.status();
  if (mutate) mutate(*a);
  std::vector<absl::string_view> data(a->constants.begin(), a->constants.end());
  return schema::SerializeExecutable(*a->exe, data);
}

inline absl::Status VerifyText(absl::string_view text, const Mutation& mutate = nullptr,
                               const VerifyLimits& limits = {}) {
  absl::StatusOr<std::string> bytes = Build(text, mutate);
  if (!bytes.ok()) {
    return absl::InternalError(
        absl::StrCat("test program does not assemble: ", bytes.status().message()));
  }
  return VerifyBytes(*bytes, limits);
}

// Expects an InvalidArgument error containing every one of `parts`.
inline void ExpectRefused(const absl::Status& s, std::initializer_list<std::string> parts) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const std::string& p : parts) EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(p));
}

// Recomputes the checksum of `file` and stores it in the header, so that the checks behind
// it see the change (schema::Reseal, by value).
inline std::string Reseal(std::string file) {
  schema::Reseal(file);
  return file;
}

// Rewrites the header of `file` (with a fresh checksum) after `edit`.
inline std::string EditHeader(std::string file,
                              const std::function<void(schema::FileHeader&)>& edit) {
  file = Reseal(std::move(file));
  auto* b = reinterpret_cast<uint8_t*>(file.data());
  absl::StatusOr<schema::FileHeader> h = schema::ParseHeader({b, file.size()});
  EXPECT_TRUE(h.ok()) << h.status();
  if (!h.ok()) return file;
  edit(*h);
  schema::EncodeHeader(*h, b);
  return Reseal(std::move(file));
}

}  // namespace dynvm::isa

#endif  // DYNVM_ISA_VERIFIER_TESTING_H_
