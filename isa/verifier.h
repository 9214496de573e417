// The verifier: runs once on every load and checks everything the interpreter relies on, so
// the interpreter loop itself does no bounds or type checks (docs/isa.md, "Verification").
#ifndef DYNVM_ISA_VERIFIER_H_
#define DYNVM_ISA_VERIFIER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "isa/verify_limits.h"
#include "schema/executable_generated.h"
#include "schema/format.h"

namespace dynvm::isa {

// Checks a parsed executable: tables, constants against the constant segment of
// `constant_segment_size` bytes, kernel entries, signatures, and each function's code
// (decoding, structure and jumps, register indices, banks and kinds, dtypes, kernel arity,
// definite assignment on every path). Errors name the function, the pc and the operand.
absl::Status VerifyExecutable(const fb::Executable& exe, uint64_t constant_segment_size,
                              const VerifyLimits& limits = {});

// Checks the data of a string constant of `numel` elements (docs/strings.md): a table of
// `numel` (u64 offset, u64 length) pairs, then the bytes. Every range lies in the bytes after
// the table, and every element is valid UTF-8. The loader runs it once the constants are mapped
// (they may be in a weights file, or compressed).
absl::Status CheckStringConstant(absl::Span<const uint8_t> data, int64_t numel);

struct VerifiedFile {
  schema::FileHeader header;
  const fb::Executable* executable;  // points into the file's bytes
};

// The whole check of a file's bytes: header (magic, version, features, ranges, checksum),
// flatbuffer structure (flatbuffers' verifier), then VerifyExecutable. `bytes` must stay alive
// and 8-byte aligned.
absl::StatusOr<VerifiedFile> VerifyFile(absl::Span<const uint8_t> bytes,
                                        const VerifyLimits& limits = {});

}  // namespace dynvm::isa

#endif  // DYNVM_ISA_VERIFIER_H_
