// Feeds arbitrary bytes to Executable::LoadFromBytes: header checks, checksum, flatbuffers'
// structural verifier, the ISA verifier and kernel binding; whatever loads is disassembled. Any
// input must load or be refused with an error; a crash, a sanitizer report or a trap is a bug.
//
// The checksum: a mutated file almost never keeps a correct CRC-32, so without help nearly
// every input would stop at the checksum and the verifier behind it would go unexplored. So
// when the input holds at least a header, bit 0 of the stored checksum (byte 64) picks one of
// two modes, about half of the inputs each:
//   1: the checksum is recomputed over the (mutated) header and flatbuffer first, and the
//      input reaches the flatbuffer and ISA verifiers;
//   0: the bytes are loaded as they are, which exercises the checksum check itself.
// The bit is free to use: in mode 1 the stored checksum is overwritten anyway, and a valid file
// loads the same in both modes.
//
// Seed corpus: isa/fuzz_corpus/verifier/ (see tests/hostile_executable_test.cc to regenerate).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "isa/disassembler.h"
#include "isa/verifier.h"
#include "schema/format.h"
#include "vm/executable.h"

namespace {

// Recomputes the checksum of the header and flatbuffer in `file` and stores it.
void Reseal(std::string& file) {
  if (file.size() < dynvm::schema::kHeaderSize) return;
  auto* b = reinterpret_cast<uint8_t*>(file.data());
  uint64_t fb_size = 0;
  for (int i = 0; i < 8; ++i) fb_size |= static_cast<uint64_t>(b[32 + i]) << (8 * i);
  if (fb_size > file.size() - dynvm::schema::kHeaderSize) return;
  const uint32_t crc = dynvm::schema::ComputeChecksum({b, dynvm::schema::kHeaderSize},
                                                      {b + dynvm::schema::kHeaderSize, fb_size});
  for (int i = 0; i < 4; ++i) b[64 + i] = static_cast<uint8_t>(crc >> (8 * i));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string file(reinterpret_cast<const char*>(data), size);
  if (size >= dynvm::schema::kHeaderSize && (data[64] & 1) != 0) Reseal(file);
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
