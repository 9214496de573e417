// Serializes an executable (the flatbuffer object tree plus constant bytes) into .dvm bytes.
// Used by the assembler and the compiler. Deterministic: the same input gives the same bytes.
//
// Thread safety: thread-safe on distinct `exe` objects (no shared state); SerializeExecutable*
// fill in `exe`'s offsets, so one `exe` is serialized by one thread at a time.
#ifndef DYNVM_SCHEMA_WRITER_H_
#define DYNVM_SCHEMA_WRITER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "schema/executable_generated.h"

namespace dynvm::schema {

struct WriteOptions {
  bool strip_debug = false;
  // Store the constant segment zstd-compressed (feature bit compressed-constants, in the .dvm
  // or, with weights_file_name, in the .dvw). Loaders decompress it once per process.
  bool compress = false;
  int compression_level = 3;
  // When set, the constants go to a separate weights file (.dvw) of this name, which the
  // executable refers to by name, content hash and size (WeightsRef, feature external-weights).
  std::string weights_file_name;
};

struct SerializedFiles {
  std::string executable;  // the .dvm
  std::string weights;     // the .dvw; empty unless WriteOptions::weights_file_name was set
};

// Lays out the constant segment (each constant 64-byte aligned, in table order), fills in
// every constant's offset and size in `exe`, sets the required-feature bits the content
// needs, and returns the whole file. `constants[i]` is the data of exe.constants[i].
absl::StatusOr<std::string> SerializeExecutable(fb::ExecutableT& exe,
                                                absl::Span<const absl::string_view> constants,
                                                const WriteOptions& options = {});

// Same, and the weights file when `options.weights_file_name` is set.
absl::StatusOr<SerializedFiles> SerializeExecutableFiles(
    fb::ExecutableT& exe, absl::Span<const absl::string_view> constants,
    const WriteOptions& options = {});

// The required-feature bits the content of `exe` needs (sequences, CUDA, ...).
uint64_t RequiredFeatures(const fb::ExecutableT& exe);

}  // namespace dynvm::schema

#endif  // DYNVM_SCHEMA_WRITER_H_
