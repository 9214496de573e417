// vm-dis: prints a .dvm executable as text assembly (docs/isa.md, "Text assembly").
//
//   vm-dis FILE.dvm [--no-pcs]
//
// The file is verified first (isa::VerifyFile: header, checksum, flatbuffer, verifier); a file
// that does not verify is refused with the verifier's message. `vm-dis F | vm-as` gives back a
// byte-identical file for every file vm-compile or vm-as writes: a compressed constant segment
// (vm-compile --compress) is printed decompressed after a `.compressed` line, and vm-as
// compresses it again at the same (default) level; an executable with a separate weights file
// prints its `.weights` reference and `external` constants with their offset= and size= in that
// file (no data). Kernels are not bound, so a file using ops this build lacks still prints.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "isa/disassembler.h"
#include "isa/verifier.h"
#include "schema/format.h"
#include "schema/mapped_file.h"
#include "schema/weights.h"
#include "tools/cli.h"

namespace dynvm {
namespace {

int Main(int argc, char** argv) {
  constexpr absl::string_view kProgram = "vm-dis";
  bool no_pcs = false;
  cli::FlagParser flags(std::string(kProgram), "FILE.dvm [--no-pcs]");
  flags.AddSwitch("--no-pcs", &no_pcs, "omit the '; pc N' comment after each instruction");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return cli::ReportError(kProgram, s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    std::fputs("\nVerifies FILE.dvm and prints it as assembly that vm-as reads back.\n", stdout);
    return 0;
  }
  if (flags.positional().size() != 1) {
    return cli::ReportError(kProgram,
                            absl::StrCat("expected one input file, got ", flags.positional().size(),
                                         " (usage: vm-dis FILE.dvm [--no-pcs])"));
  }
  const std::string& path = flags.positional()[0];
  absl::StatusOr<std::shared_ptr<const schema::MappedFile>> file = schema::MappedFile::Open(path);
  if (!file.ok()) return cli::ReportError(kProgram, file.status());
  const absl::Span<const uint8_t> bytes = (*file)->bytes();
  absl::StatusOr<isa::VerifiedFile> verified = isa::VerifyFile(bytes);
  if (!verified.ok()) {
    return cli::ReportError(kProgram, absl::StrCat(path, ": ", verified.status().message()));
  }
  // The verifier checked that the constant segment lies inside the file.
  absl::Span<const uint8_t> constants =
      bytes.subspan(verified->header.constants_offset, verified->header.constants_size);
  std::vector<uint8_t> raw;  // a compressed segment, decompressed
  if (verified->header.required_features & schema::kFeatureCompressedConstants) {
    const uint64_t raw_size = verified->header.constants_raw_size;
    if (absl::Status s = schema::CheckCompressedSegment(constants, raw_size); !s.ok()) {
      return cli::ReportError(kProgram, absl::StrCat(path, ": ", s.message()));
    }
    raw.resize(raw_size);
    if (absl::Status s = schema::DecompressSegment(constants, raw.data(), raw_size); !s.ok()) {
      return cli::ReportError(kProgram, absl::StrCat(path, ": ", s.message()));
    }
    constants = raw;
  }
  isa::DisassembleOptions options;
  options.pcs = !no_pcs;
  options.compressed =
      (verified->header.required_features & schema::kFeatureCompressedConstants) != 0;
  absl::StatusOr<std::string> text = isa::Disassemble(*verified->executable, constants, options);
  if (!text.ok())
    return cli::ReportError(kProgram, absl::StrCat(path, ": ", text.status().message()));
  if (std::fwrite(text->data(), 1, text->size(), stdout) != text->size() ||
      std::fflush(stdout) != 0) {
    return cli::ReportError(kProgram, "cannot write to standard output");
  }
  return 0;
}

}  // namespace
}  // namespace dynvm

int main(int argc, char** argv) { return dynvm::Main(argc, argv); }
