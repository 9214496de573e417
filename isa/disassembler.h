// The text form of an executable (docs/isa.md, "Text assembly"). vm-dis prints it; vm-as reads
// it back into a byte-identical executable.
#ifndef DYNVM_ISA_DISASSEMBLER_H_
#define DYNVM_ISA_DISASSEMBLER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "schema/executable_generated.h"

namespace dynvm::isa {

struct DisassembleOptions {
  bool constant_data = true;  // print constant bytes (needed to assemble the text again)
  bool pcs = true;            // a "; pc N" comment on each instruction (ignored by vm-as)
  bool compressed = false;    // the file stores its constant segment compressed: .compressed
};

// REQUIRES: `exe` passed VerifyExecutable. `constants` is the (uncompressed) constant segment.
absl::StatusOr<std::string> Disassemble(const fb::Executable& exe,
                                        absl::Span<const uint8_t> constants,
                                        const DisassembleOptions& options = {});

// Text helpers shared with the assembler.
std::string QuoteString(absl::string_view s);
std::string FormatF64(double v);
std::string FormatF32(float v);

}  // namespace dynvm::isa

#endif  // DYNVM_ISA_DISASSEMBLER_H_
