// Feeds arbitrary text to the assembler. Whatever assembles is serialized and loaded (the
// assembler does not verify, so this also feeds the verifier structurally valid flatbuffers
// with arbitrary code), and whatever loads is disassembled. None of it may crash.
//
// Seed corpus: tests/isa/*.s (the ISA conformance tests, read in place) and
// vm/fuzz_corpus/assembler/ (see tests/hostile_executable_test.cc).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "isa/assembler.h"
#include "isa/disassembler.h"
#include "isa/verifier.h"
#include "vm/executable.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::string> bytes = dynvm::isa::AssembleToBytes(text);
  if (!bytes.ok()) {
    if (bytes.status().message().empty()) __builtin_trap();
    return 0;
  }
  // VerifyFile needs 8-byte aligned bytes.
  std::vector<uint64_t> aligned((bytes->size() + 7) / 8);
  std::memcpy(aligned.data(), bytes->data(), bytes->size());
  const auto* b = reinterpret_cast<const uint8_t*>(aligned.data());
  absl::StatusOr<std::shared_ptr<const dynvm::Executable>> exe =
      dynvm::Executable::LoadFromBytes({b, bytes->size()});
  if (!exe.ok()) return 0;
  // Verified: the disassembler may rely on it.
  absl::StatusOr<dynvm::isa::VerifiedFile> v = dynvm::isa::VerifyFile({b, bytes->size()});
  if (!v.ok()) __builtin_trap();  // LoadFromBytes just accepted the same bytes
  absl::StatusOr<std::string> text_again = dynvm::isa::Disassemble(
      *v->executable, {b + v->header.constants_offset, v->header.constants_size});
  (void)text_again;
  return 0;
}
