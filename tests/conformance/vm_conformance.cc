// vm-conformance: runs ONNX's backend test cases (libonnx-testdata) through the importer,
// compiler and VM, and prints `passed / failed / unsupported` per suite.
//
//   vm-conformance [--data DIR] [--suite NAME ...] [--backends reference,...] [--filter TEXT]
//                  [--list-failures] [--list-unsupported] [--expected FILE] [--write-passes FILE]
//                  [--wrap loop|if|if-else]
//
// Cases whose model draws random numbers pass on dtype, shape and a statistical check
// (conformance.h) and are listed apart after the counts.
//
// With --expected FILE (one `suite/case` per line, '#' comments), every listed case must pass:
// a listed case that does not is a regression, and the exit status is 1. Cases that pass but
// are not listed are printed as new passes (add them, so the list only grows).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "schema/mapped_file.h"
#include "tests/conformance/conformance.h"
#include "tools/cli.h"

namespace dynvm::conformance {
namespace {

constexpr absl::string_view kProgram = "vm-conformance";

struct Counts {
  int passed = 0, failed = 0, unsupported = 0;
  double seconds = 0;
};

absl::StatusOr<std::set<std::string>> ReadExpected(const std::string& path) {
  DYNVM_ASSIGN_OR_RETURN(std::string text, schema::ReadFileToString(path));
  std::set<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    out.insert(std::string(line));
  }
  return out;
}

int Main(int argc, char** argv) {
  std::string data_dir = kDefaultDataDir;
  std::vector<std::string> suites;
  std::string backends;
  std::string filter;
  std::string expected_path;
  std::string write_passes;
  std::string expect_kernels_path;
  bool list_failures = false, list_unsupported = false;
  cli::FlagParser flags(
      std::string(kProgram),
      "[--data DIR] [--suite NAME ...] [--backends reference,...] [--filter TEXT]\n"
      "              [--list-failures] [--list-unsupported] [--expected FILE] [--write-passes "
      "FILE]");
  flags.AddString("--data", &data_dir,
                  "the test data folder (default /usr/share/libonnx-testdata/data)");
  flags.AddRepeated(
      "--suite", &suites,
      "a suite to run: node, pytorch-operator, pytorch-converted, simple (default all)");
  flags.AddString("--backends", &backends,
                  "kernel backends allowed, comma-separated (default: all of this build)");
  flags.AddString("--filter", &filter, "run only cases whose name contains TEXT");
  flags.AddSwitch("--list-failures", &list_failures, "print each failed case and why");
  flags.AddSwitch("--list-unsupported", &list_unsupported, "print each unsupported case and why");
  flags.AddString("--expected", &expected_path,
                  "fail (exit 1) unless every case listed in FILE passes");
  flags.AddString("--expect-kernels", &expect_kernels_path,
                  "FILE: lines `suite/case KERNEL...`; each listed case must bind kernels whose "
                  "names contain every KERNEL (e.g. conv.f32.dnnl), or it fails");
  std::string wrap;
  flags.AddString("--wrap", &wrap,
                  "loop, if or if-else: run each case's graph inside a Loop (trip count 2, "
                  "symbolic input dims) or both branches of an If whose then (if) or else "
                  "(if-else) branch runs (tests/conformance/wrap.h)");
  flags.AddString("--write-passes", &write_passes,
                  "write the passing cases to FILE (suite/case per line)");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return cli::ReportError(kProgram, s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (!flags.positional().empty())
    return cli::ReportError(kProgram, "unexpected positional arguments");
  std::error_code ec;
  if (!std::filesystem::is_directory(data_dir, ec)) {
    return cli::ReportError(kProgram,
                            absl::StrCat("no ONNX test data at ", data_dir,
                                         ": run `bash tools/install-deps.sh test` (installs "
                                         "libonnx-testdata) or pass --data DIR"));
  }
  if (suites.empty()) suites.assign(std::begin(kSuites), std::end(kSuites));
  RunnerOptions options;
  if (wrap == "loop") {
    options.wrap = Wrap::kLoop;
  } else if (wrap == "if") {
    options.wrap = Wrap::kIf;
  } else if (wrap == "if-else") {
    options.wrap = Wrap::kIfElse;
  } else if (!wrap.empty()) {
    return cli::ReportError(kProgram, absl::InvalidArgumentError(absl::StrCat(
                                          "--wrap must be loop, if or if-else, not '", wrap, "'")));
  }
  if (!backends.empty()) {
    for (absl::string_view b : absl::StrSplit(backends, ',', absl::SkipEmpty())) {
      options.backends.allowed.push_back(std::string(b));
    }
  }
  if (!expect_kernels_path.empty()) {
    // The same line format as --expected: `suite/case` then the kernel names it must bind.
    absl::StatusOr<std::set<std::string>> lines = ReadExpected(expect_kernels_path);
    if (!lines.ok()) return cli::ReportError(kProgram, lines.status());
    for (const std::string& line : *lines) {
      std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (words.size() < 2) {
        return cli::ReportError(
            kProgram, absl::StrCat(expect_kernels_path, ": '", line, "' names no kernel"));
      }
      options.expect_kernels[words[0]].assign(words.begin() + 1, words.end());
    }
  }
  std::set<std::string> expected;
  if (!expected_path.empty()) {
    absl::StatusOr<std::set<std::string>> e = ReadExpected(expected_path);
    if (!e.ok()) return cli::ReportError(kProgram, e.status());
    expected = *std::move(e);
  }
  std::map<std::string, Counts> counts;
  std::vector<CaseResult> results;
  std::set<std::string> ran;
  for (const std::string& suite : suites) {
    absl::StatusOr<std::vector<std::string>> cases = ListCases(data_dir, suite);
    if (!cases.ok()) return cli::ReportError(kProgram, cases.status());
    Counts& c = counts[suite];
    for (const std::string& dir : *cases) {
      if (!filter.empty() &&
          !absl::StrContains(std::filesystem::path(dir).filename().string(), filter))
        continue;
      CaseResult r = RunCase(suite, dir, options);
      ran.insert(absl::StrCat(suite, "/", r.name));
      c.seconds += r.seconds;
      switch (r.outcome) {
        case Outcome::kPassed:
          ++c.passed;
          break;
        case Outcome::kFailed:
          ++c.failed;
          break;
        case Outcome::kUnsupported:
          ++c.unsupported;
          break;
      }
      if ((r.outcome == Outcome::kFailed && list_failures) ||
          (r.outcome == Outcome::kUnsupported && list_unsupported)) {
        std::printf("%s %s/%s: %s\n", r.outcome == Outcome::kFailed ? "FAIL" : "UNSUPPORTED",
                    suite.c_str(), r.name.c_str(), r.message.c_str());
      }
      results.push_back(std::move(r));
    }
  }
  for (const std::string& suite : suites) {
    const Counts& c = counts[suite];
    std::printf("%-18s %4d passed / %4d failed / %4d unsupported  (%.1f s)\n", suite.c_str(),
                c.passed, c.failed, c.unsupported, c.seconds);
  }
  // Random models pass on dtype, shape and a statistical check, not values: listed apart.
  int random_passed = 0;
  for (const CaseResult& r : results) {
    if (r.random && r.outcome == Outcome::kPassed) ++random_passed;
  }
  if (random_passed > 0) {
    std::printf(
        "of those passed, %d random case(s) judged by dtype, shape and a statistical "
        "check (not values):\n",
        random_passed);
    for (const CaseResult& r : results) {
      if (r.random && r.outcome == Outcome::kPassed) {
        std::printf("  RANDOM %s/%s\n", r.suite.c_str(), r.name.c_str());
      }
    }
  }
  std::fflush(stdout);
  if (!write_passes.empty()) {
    std::ofstream out(write_passes);
    for (const CaseResult& r : results) {
      if (r.outcome == Outcome::kPassed) out << r.suite << "/" << r.name << "\n";
    }
    if (!out) return cli::ReportError(kProgram, absl::StrCat("cannot write ", write_passes));
  }
  if (expected_path.empty()) return 0;
  int regressions = 0, new_passes = 0;
  std::set<std::string> passed;
  for (const CaseResult& r : results) {
    const std::string key = absl::StrCat(r.suite, "/", r.name);
    if (r.outcome == Outcome::kPassed) {
      passed.insert(key);
      if (!expected.contains(key)) {
        ++new_passes;
        std::printf("NEW PASS %s (add it to %s)\n", key.c_str(), expected_path.c_str());
      }
    } else if (expected.contains(key)) {
      ++regressions;
      std::printf("REGRESSION %s: %s %s\n", key.c_str(), OutcomeName(r.outcome), r.message.c_str());
    }
  }
  for (const std::string& key : expected) {
    if (!ran.contains(key)) {
      // A listed case that did not run (filtered out, or its suite not selected) is not judged;
      // one whose folder is gone is a regression.
      const std::string suite = key.substr(0, key.find('/'));
      bool suite_ran = false;
      for (const std::string& s : suites) suite_ran |= s == suite;
      if (suite_ran && filter.empty()) {
        ++regressions;
        std::printf("REGRESSION %s: the case is missing from %s\n", key.c_str(), data_dir.c_str());
      }
    }
  }
  std::printf("%zu expected passes, %d regressions, %d new passes\n", expected.size(), regressions,
              new_passes);
  return regressions == 0 ? 0 : 1;
}

}  // namespace
}  // namespace dynvm::conformance

int main(int argc, char** argv) { return dynvm::conformance::Main(argc, argv); }
