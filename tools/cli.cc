#include "tools/cli.h"

#include <cstdio>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace dynvm::cli {

FlagParser::FlagParser(std::string program, std::string synopsis)
    : program_(std::move(program)), synopsis_(std::move(synopsis)) {}

void FlagParser::Add(absl::string_view names, Kind kind, void* target, absl::string_view help,
                     bool allow_suffix) {
  Flag f;
  f.names = absl::StrSplit(names, ',', absl::SkipEmpty());
  f.kind = kind;
  f.target = target;
  f.help = std::string(help);
  f.allow_suffix = allow_suffix;
  flags_.push_back(std::move(f));
}

void FlagParser::AddString(absl::string_view names, std::string* value, absl::string_view help) {
  Add(names, Kind::kString, value, help, false);
}
void FlagParser::AddInt(absl::string_view names, int64_t* value, absl::string_view help,
                        bool allow_suffix) {
  Add(names, Kind::kInt, value, help, allow_suffix);
}
void FlagParser::AddSwitch(absl::string_view names, bool* value, absl::string_view help) {
  Add(names, Kind::kSwitch, value, help, false);
}
void FlagParser::AddRepeated(absl::string_view names, std::vector<std::string>* values,
                             absl::string_view help) {
  Add(names, Kind::kRepeated, values, help, false);
}

FlagParser::Flag* FlagParser::Find(absl::string_view name) {
  for (Flag& f : flags_) {
    for (const std::string& n : f.names) {
      if (n == name) return &f;
    }
  }
  return nullptr;
}

bool FlagParser::seen(absl::string_view name) const {
  for (const Flag& f : flags_) {
    if (!f.names.empty() && f.names[0] == name) return f.seen;
  }
  return false;
}

absl::Status FlagParser::Set(Flag& flag, absl::string_view name, absl::string_view value) {
  switch (flag.kind) {
    case Kind::kString:
      if (flag.seen) return absl::InvalidArgumentError(absl::StrCat(name, " given more than once"));
      *static_cast<std::string*>(flag.target) = std::string(value);
      break;
    case Kind::kInt: {
      if (flag.seen) return absl::InvalidArgumentError(absl::StrCat(name, " given more than once"));
      absl::Status s = ParseInt64(value, flag.allow_suffix, static_cast<int64_t*>(flag.target));
      if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", s.message()));
      break;
    }
    case Kind::kSwitch:
      *static_cast<bool*>(flag.target) = true;
      break;
    case Kind::kRepeated:
      static_cast<std::vector<std::string>*>(flag.target)->push_back(std::string(value));
      break;
  }
  flag.seen = true;
  return absl::OkStatus();
}

absl::Status FlagParser::Parse(int argc, const char* const* argv) {
  bool flags_done = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      positional_.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    absl::string_view name = arg;
    absl::string_view value;
    bool has_value = false;
    if (const size_t eq = arg.find('=');
        absl::StartsWith(arg, "--") && eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    Flag* flag = Find(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", name, "' (try ", program_, " --help)"));
    }
    if (flag->kind == Kind::kSwitch) {
      if (has_value) return absl::InvalidArgumentError(absl::StrCat(name, " takes no value"));
    } else if (!has_value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      value = argv[++i];
    }
    DYNVM_RETURN_IF_ERROR(Set(*flag, name, value));
  }
  return absl::OkStatus();
}

std::string FlagParser::Usage() const {
  std::string out = absl::StrCat("usage: ", program_, " ", synopsis_, "\n");
  if (!flags_.empty()) absl::StrAppend(&out, "\nflags:\n");
  for (const Flag& f : flags_) {
    std::string names = absl::StrJoin(f.names, ", ");
    switch (f.kind) {
      case Kind::kString:
      case Kind::kRepeated:
        absl::StrAppend(&names, " VALUE");
        break;
      case Kind::kInt:
        absl::StrAppend(&names, " N");
        break;
      case Kind::kSwitch:
        break;
    }
    if (names.size() < 28) names.resize(28, ' ');
    absl::StrAppend(&out, "  ", names, " ", f.help, "\n");
  }
  absl::StrAppend(&out, "  --help, -h                   print this help\n");
  return out;
}

absl::Status ParseInt64(absl::string_view text, bool allow_suffix, int64_t* out) {
  absl::string_view digits = text;
  int shift = 0;
  if (allow_suffix && !digits.empty()) {
    switch (absl::ascii_tolower(static_cast<unsigned char>(digits.back()))) {
      case 'k':
        shift = 10;
        break;
      case 'm':
        shift = 20;
        break;
      case 'g':
        shift = 30;
        break;
      default:
        break;
    }
    if (shift != 0) digits.remove_suffix(1);
  }
  int64_t v;
  if (digits.empty() || !absl::SimpleAtoi(digits, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("expected an integer, got '", text, "'"));
  }
  if (shift != 0) {
    if (v > (std::numeric_limits<int64_t>::max() >> shift) ||
        v < (std::numeric_limits<int64_t>::min() >> shift)) {
      return absl::InvalidArgumentError(absl::StrCat("'", text, "' is out of range"));
    }
    v *= int64_t{1} << shift;
  }
  *out = v;
  return absl::OkStatus();
}

int ReportError(absl::string_view program, absl::string_view message) {
  std::string line(message);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fprintf(stderr, "%.*s: error: %s\n", static_cast<int>(program.size()), program.data(),
               line.c_str());
  return 1;
}

int ReportError(absl::string_view program, const absl::Status& status) {
  return ReportError(program, status.message());
}

}  // namespace dynvm::cli
