// The text assembler: dynvm assembly (docs/isa.md, "Text assembly") to an executable.
// Jump offsets are not written in the text: the assembler derives them from the nesting of
// if/else/endif and loop/endloop, exactly as the verifier expects them.
#ifndef DYNVM_ISA_ASSEMBLER_H_
#define DYNVM_ISA_ASSEMBLER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "schema/executable_generated.h"

namespace dynvm::isa {

struct Assembly {
  std::unique_ptr<fb::ExecutableT> exe;
  std::vector<std::string> constants;  // data of exe->constants[i]
  // Per constant: the offset= and size= an `external` constant declares (-1: not given).
  struct Layout {
    int64_t offset = -1;
    int64_t size = -1;
  };
  std::vector<Layout> external_layout;
  bool compress = false;  // .compressed: store the constant segment zstd-compressed
};

// Parses assembly text. Errors name the line and what was wrong. The result is not verified;
// AssembleToBytes serializes it and the loader verifies it.
absl::StatusOr<Assembly> Assemble(absl::string_view text);

// Assemble + serialize into .dvm bytes: with .compressed, the constant segment zstd-compressed
// at the writer's default level (vm-compile --compress's); with .weights, constants `external`
// at their declared offset= and size= (vm-compile --weights-out's layout), and no segment.
absl::StatusOr<std::string> AssembleToBytes(absl::string_view text);

}  // namespace dynvm::isa

#endif  // DYNVM_ISA_ASSEMBLER_H_
