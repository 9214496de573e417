// Internal: which constants an executable's code only gathers rows from. A decode step reads
// every weight once per token, but of an embedding table it reads the rows its tokens pick:
// Executable::Load leaves such tables in the file's mapping when it copies the rest of the
// constants into 2 MB pages (LoadOptions::constant_pages), so their untouched pages are never
// read or resident.
//
// Derived from the verified code, not stored in the file: a marking in the executable would be
// a claim the loader must check against the same code to trust it, and older executables would
// lack it. Conservative: a constant is gathered only if every use of it is the data input of an
// ONNX Gather along axis 0 whose indices are not a constant; any other use (another kernel or
// input, a move, a view, a call, a return, a tensor attribute) makes it dense.
#ifndef DYNVM_VM_GATHERED_CONSTANTS_H_
#define DYNVM_VM_GATHERED_CONSTANTS_H_

#include <cstdint>
#include <vector>

#include "schema/mapped_file.h"

namespace dynvm {

namespace fb {
struct Executable;
}  // namespace fb

// One flag per entry of exe's constant table. `exe` must have passed isa::VerifyExecutable.
std::vector<bool> GatheredConstants(const fb::Executable& exe);

// Tables smaller than this stay in the copy: left mapped, each would split the 2 MB pages around
// it for less than it saves.
inline constexpr uint64_t kMinFileBackedConstantBytes = uint64_t{2} << 20;

// The ranges of the gathered constants of at least kMinFileBackedConstantBytes, as offsets in the
// file whose constant segment starts at `segment_offset`.
std::vector<schema::FileRange> GatheredConstantRanges(const fb::Executable& exe,
                                                      uint64_t segment_offset);

}  // namespace dynvm

#endif  // DYNVM_VM_GATHERED_CONSTANTS_H_
