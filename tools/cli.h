// A small command-line flag parser shared by vm-as, vm-dis and vm-run. No exceptions: every
// problem (an unknown flag, a missing or malformed value) is a Status whose message names the
// flag, and the tools print it as one line and exit nonzero.
//
// Accepted forms: `--name VALUE`, `--name=VALUE`, a short alias `-o VALUE`, switches `--name`
// (no value), repeated flags (each occurrence appended), positional arguments anywhere, and
// `--` to end flags. `--help` and `-h` are always recognised.
//
// Thread safety: thread-compatible. Pointers given to Add* must outlive Parse.
#ifndef DYNVM_TOOLS_CLI_H_
#define DYNVM_TOOLS_CLI_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dynvm::cli {

class FlagParser {
 public:
  // `synopsis` is the usage line after the program name ("FILE.s -o FILE.dvm").
  FlagParser(std::string program, std::string synopsis);

  // `names` is "--long" or "--long,-s". Each flag may be registered once.
  void AddString(absl::string_view names, std::string* value, absl::string_view help);
  // An integer with an optional k/m/g suffix (powers of 1024) when `allow_suffix`.
  void AddInt(absl::string_view names, int64_t* value, absl::string_view help,
              bool allow_suffix = false);
  void AddSwitch(absl::string_view names, bool* value, absl::string_view help);
  void AddRepeated(absl::string_view names, std::vector<std::string>* values,
                   absl::string_view help);

  // Parses argv[1..argc). Positional arguments are collected in order. Returns
  // InvalidArgument naming the offending argument. After --help, help_requested() is true and
  // the rest of the command line is still checked.
  absl::Status Parse(int argc, const char* const* argv);

  const std::vector<std::string>& positional() const { return positional_; }
  bool help_requested() const { return help_; }
  bool seen(absl::string_view name) const;  // a flag given at least once, by its long name
  const std::string& program() const { return program_; }
  std::string Usage() const;

 private:
  enum class Kind { kString, kInt, kSwitch, kRepeated };
  struct Flag {
    std::vector<std::string> names;
    Kind kind;
    void* target;
    std::string help;
    bool allow_suffix = false;
    bool seen = false;
  };
  void Add(absl::string_view names, Kind kind, void* target, absl::string_view help,
           bool allow_suffix);
  Flag* Find(absl::string_view name);
  absl::Status Set(Flag& flag, absl::string_view name, absl::string_view value);

  std::string program_;
  std::string synopsis_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

// Parses "123", "-5", and with `allow_suffix` "64k", "2M", "1g" (binary multiples). Rejects
// overflow and trailing garbage.
absl::Status ParseInt64(absl::string_view text, bool allow_suffix, int64_t* out);

// Prints "PROGRAM: error: MESSAGE" on one line to stderr (newlines in the message become
// spaces) and returns the exit code to use (1).
int ReportError(absl::string_view program, const absl::Status& status);
int ReportError(absl::string_view program, absl::string_view message);

}  // namespace dynvm::cli

#endif  // DYNVM_TOOLS_CLI_H_
