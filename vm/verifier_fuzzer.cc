// Feeds arbitrary bytes to Executable::LoadFromBytes: header checks, checksum, flatbuffers'
// structural verifier, the ISA verifier and kernel binding; whatever loads is disassembled. Any
// input must load or be refused with an error; a crash, a sanitizer report or a trap is a bug.
// Bit 0 of the stored checksum (byte 64) picks whether the checksum is recomputed over the
// mutated bytes first (vm/fuzzing.h, FileFromFuzzInput), so that mutations reach the verifiers.
//
// Seed corpus: vm/fuzz_corpus/seeds/ (shared with vm_run_fuzzer) and vm/fuzz_corpus/verifier/
// (see tests/hostile_executable_test.cc to regenerate).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "isa/disassembler.h"
#include "isa/verifier.h"
#include "vm/executable.h"
#include "vm/fuzzing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string file = dynvm::fuzzing::FileFromFuzzInput(data, size);
  absl::StatusOr<std::shared_ptr<const dynvm::Executable>> exe =
      dynvm::Executable::LoadFromBytes(file);
  if (!exe.ok()) {
    // A refusal must say why.
    if (exe.status().message().empty()) __builtin_trap();
    return 0;
  }
  // Whatever loads is verified, so the disassembler (which relies on that) must cope too.
  std::vector<uint64_t> aligned((file.size() + 7) / 8);
  std::memcpy(aligned.data(), file.data(), file.size());
  const auto* b = reinterpret_cast<const uint8_t*>(aligned.data());
  absl::StatusOr<dynvm::isa::VerifiedFile> v = dynvm::isa::VerifyFile({b, file.size()});
  if (!v.ok()) __builtin_trap();  // LoadFromBytes just accepted the same bytes
  absl::StatusOr<std::string> text = dynvm::isa::Disassemble(
      *v->executable, {b + v->header.constants_offset, v->header.constants_size});
  (void)text;
  return 0;
}
