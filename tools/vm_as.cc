// vm-as: assembles dynvm text assembly (docs/isa.md, "Text assembly") into a .dvm executable.
//
//   vm-as FILE.s -o FILE.dvm
//   vm-dis FILE.dvm | vm-as - -o FILE.dvm      (- reads standard input)
//
// The result is verified by loading it (Executable::LoadFromBytes: header, flatbuffer,
// verifier, kernel binding) before anything is written, so a file vm-as writes always loads.
// An executable whose constants live in a weights file (a `.weights` line, as vm-dis prints for
// vm-compile --weights-out) is loaded with that file, which must be beside the output.
// Errors name the source line: the assembler's own, and the verifier's, whose "function 'F'
// pc N" is mapped back to the line of that instruction.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "isa/assembler.h"
#include "isa/opcodes.h"
#include "schema/mapped_file.h"
#include "tools/cli.h"
#include "vm/executable.h"

namespace dynvm {
namespace {

// The text of `line` without its comment (a ';' outside a string) and surrounding space.
absl::string_view StripComment(absl::string_view line) {
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == ';') {
      return absl::StripAsciiWhitespace(line.substr(0, i));
    }
  }
  return absl::StripAsciiWhitespace(line);
}

// The source line (1-based) of the instruction at `pc` of function `function`, or 0 when it
// cannot be found. The assembler emits exactly one instruction per instruction line, in order,
// so the k-th instruction of the function's code is its k-th instruction line.
int LineOfInstruction(absl::string_view text, absl::string_view function, uint32_t pc) {
  absl::StatusOr<isa::Assembly> assembly = isa::Assemble(text);
  if (!assembly.ok()) return 0;
  const fb::FunctionT* fn = nullptr;
  for (const auto& f : assembly->exe->functions) {
    if (f->name == function) {
      fn = f.get();
      break;
    }
  }
  if (fn == nullptr) return 0;
  int index = -1;
  for (uint32_t at = 0, k = 0; at < fn->code.size(); ++k) {
    if (at == pc) {
      index = static_cast<int>(k);
      break;
    }
    const uint32_t length = isa::HeaderLength(fn->code[at]);
    if (length == 0) return 0;
    at += length;
  }
  if (index < 0) return 0;
  int line_number = 0;
  bool inside = false;
  int seen = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_number;
    absl::string_view line = StripComment(raw);
    if (line.empty()) continue;
    if (line[0] == '.') {
      std::vector<absl::string_view> words =
          absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
      if (words[0] == ".function") {
        inside = words.size() == 2 && words[1] == function;
      } else if (words[0] == ".end") {
        if (inside) return 0;
      }
      continue;
    }
    if (inside && seen++ == index) return line_number;
  }
  return 0;
}

// Adds "line N: " to a verifier error of the form "function 'F' pc N: ...".
std::string WithSourceLine(absl::string_view text, absl::string_view message) {
  constexpr absl::string_view kPrefix = "function '";
  const size_t start = message.find(kPrefix);
  if (start == absl::string_view::npos) return std::string(message);
  absl::string_view rest = message.substr(start + kPrefix.size());
  const size_t quote = rest.find('\'');
  if (quote == absl::string_view::npos) return std::string(message);
  const absl::string_view function = rest.substr(0, quote);
  rest.remove_prefix(quote + 1);
  if (!absl::ConsumePrefix(&rest, " pc ")) return std::string(message);
  size_t digits = 0;
  while (digits < rest.size() && absl::ascii_isdigit(static_cast<unsigned char>(rest[digits]))) {
    ++digits;
  }
  uint32_t pc;
  if (!absl::SimpleAtoi(rest.substr(0, digits), &pc)) return std::string(message);
  const int line = LineOfInstruction(text, function, pc);
  if (line == 0) return std::string(message);
  return absl::StrCat("line ", line, ": ", message);
}

// All of standard input.
absl::StatusOr<std::string> ReadStdin() {
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), stdin)) > 0) text.append(buffer, n);
  if (std::ferror(stdin)) return absl::DataLossError("cannot read standard input");
  return text;
}

int Main(int argc, char** argv) {
  constexpr absl::string_view kProgram = "vm-as";
  std::string output;
  cli::FlagParser flags(std::string(kProgram), "FILE.s|- -o FILE.dvm");
  flags.AddString("--output,-o", &output, "where to write the executable (default: FILE.dvm)");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return cli::ReportError(kProgram, s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    std::fputs("\nAssembles FILE.s, verifies the result by loading it, then writes it.\n", stdout);
    return 0;
  }
  if (flags.positional().size() != 1) {
    return cli::ReportError(kProgram,
                            absl::StrCat("expected one input file, got ", flags.positional().size(),
                                         " (usage: vm-as FILE.s -o FILE.dvm)"));
  }
  // "-": the text comes from standard input (vm-dis prog.dvm | vm-as - -o prog.dvm).
  const bool from_stdin = flags.positional()[0] == "-";
  const std::string input = from_stdin ? std::string("<stdin>") : flags.positional()[0];
  if (output.empty()) {
    if (from_stdin)
      return cli::ReportError(kProgram, "reading standard input (-) needs -o FILE.dvm");
    absl::string_view stem = input;
    absl::ConsumeSuffix(&stem, ".s");
    output = absl::StrCat(stem, ".dvm");
  }
  absl::StatusOr<std::string> text = from_stdin ? ReadStdin() : schema::ReadFileToString(input);
  if (!text.ok()) return cli::ReportError(kProgram, text.status());
  absl::StatusOr<std::string> bytes = isa::AssembleToBytes(*text);
  if (!bytes.ok())
    return cli::ReportError(kProgram, absl::StrCat(input, ": ", bytes.status().message()));
  // An executable whose constants are in a weights file (.weights) is checked with that file,
  // which the loader will look for beside the output.
  LoadOptions load;
  std::error_code ec;
  load.weights_dir = std::filesystem::absolute(output, ec).parent_path().string();
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(*bytes, load);
  if (!exe.ok()) {
    return cli::ReportError(
        kProgram,
        absl::StrCat(input, ": does not verify: ", WithSourceLine(*text, exe.status().message())));
  }
  if (absl::Status s = schema::WriteStringToFile(output, *bytes); !s.ok()) {
    return cli::ReportError(kProgram, s);
  }
  return 0;
}

}  // namespace
}  // namespace dynvm

int main(int argc, char** argv) { return dynvm::Main(argc, argv); }
