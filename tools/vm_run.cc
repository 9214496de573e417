// vm-run: runs a function of a .dvm executable on inputs read from NumPy .npy files.
//
//   vm-run FILE.dvm [--function NAME] --input NAME=FILE.npy ... [--output-dir DIR]
//          [--repeat N] [--threads N] [--stats] [--max-iterations N] [--memory-limit BYTES]
//
// Prints one line per output, `NAME DTYPE [DIMS]` (a scalar is `[]`), and with --output-dir
// writes DIR/NAME.npy for each. An .npy file whose data can be used in place is bound without a
// copy (SetInputZeroCopy); bf16 inputs travel as '<u2' files and are reinterpreted. Every error
// is one line on stderr and a nonzero exit status.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "isa/dtype.h"
#include "kernels/tensor.h"
#include "tools/cli.h"
#include "tools/npy/npy.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

constexpr absl::string_view kProgram = "vm-run";

struct Flags {
  std::string function;
  std::vector<std::string> inputs;
  std::string output_dir;
  int64_t repeat = 0;
  int64_t threads = 1;
  bool stats = false;
  int64_t max_iterations = 0;  // 0: the VM's default
  int64_t memory_limit = 0;    // 0: unlimited
};

std::string JoinNames(const std::vector<ParamInfo>& params) {
  if (params.empty()) return "(none)";
  return absl::StrJoin(params, ", ",
                       [](std::string* out, const ParamInfo& p) { out->append(p.name); });
}

std::string ShapeText(const ParamInfo& p) {
  if (!p.has_shape) return "*";
  return absl::StrCat("[",
                      absl::StrJoin(p.shape, ",",
                                    [](std::string* out, const DimInfo& d) {
                                      if (d.value >= 0) {
                                        absl::StrAppend(out, d.value);
                                      } else {
                                        out->append(d.symbol);
                                      }
                                    }),
                      "]");
}

// A file name for output `name`: characters other than [A-Za-z0-9._-] become '_', and a
// leading '.' too, so a name from the file can never leave the output directory.
std::string SafeFileName(absl::string_view name) {
  std::string out(name);
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (!absl::ascii_isalnum(u) && c != '.' && c != '_' && c != '-') c = '_';
  }
  if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');
  return out;
}

// Reads and binds every --input. Errors name the input and the file.
absl::Status BindInputs(const Flags& flags, const FunctionInfo& info, VirtualMachine& vm) {
  std::vector<bool> bound(info.inputs.size(), false);
  for (const std::string& spec : flags.inputs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--input expects NAME=FILE.npy, got '", spec, "'"));
    }
    const std::string name = spec.substr(0, eq);
    const std::string path = spec.substr(eq + 1);
    int index = -1;
    for (size_t i = 0; i < info.inputs.size(); ++i) {
      if (info.inputs[i].name == name) index = static_cast<int>(i);
    }
    if (index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("function '", info.name, "' has no input named '", name,
                       "'; its inputs are: ", JoinNames(info.inputs)));
    }
    if (bound[index])
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "' given more than once"));
    const ParamInfo& p = info.inputs[index];
    if (p.kind != ObjectKind::kTensor) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "' is not a tensor; vm-run binds tensors only"));
    }
    bool zero_copy = false;
    absl::StatusOr<Tensor> t = npy::LoadNpy(path, &zero_copy);
    if (!t.ok())
      return absl::Status(t.status().code(),
                          absl::StrCat("input '", name, "': ", t.status().message()));
    if (p.dtype == DType::kBF16 && t->dtype() == DType::kU16) {
      absl::StatusOr<Tensor> as_bf16 = npy::ReinterpretAs(*t, DType::kBF16);
      if (!as_bf16.ok()) return as_bf16.status();
      t = *std::move(as_bf16);
    }
    if (t->dtype() != p.dtype) {
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "' must be ",
                                                     DTypeName(p.dtype), ShapeText(p), ", but ",
                                                     path, " holds ", t->DebugString()));
    }
    if (p.has_shape && t->rank() != static_cast<int>(p.shape.size())) {
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "' must have rank ",
                                                     p.shape.size(), " ", ShapeText(p), ", but ",
                                                     path, " holds ", t->DebugString()));
    }
    absl::Status s =
        zero_copy ? vm.SetInputZeroCopy(name, *t, info.name) : vm.SetInput(name, *t, info.name);
    if (!s.ok()) return s;
    bound[index] = true;
  }
  std::vector<std::string> missing;
  for (size_t i = 0; i < info.inputs.size(); ++i) {
    if (!bound[i]) missing.push_back(info.inputs[i].name);
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing input", missing.size() > 1 ? "s" : "", ": ",
                     absl::StrJoin(missing, ", "), " (function '", info.name,
                     "' takes: ", JoinNames(info.inputs), "; pass --input NAME=FILE.npy)"));
  }
  return absl::OkStatus();
}

absl::Status WriteOutputs(const std::string& dir, const FunctionInfo& info,
                          const std::vector<Tensor>& outputs) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create directory ", dir, ": ", ec.message()));
  std::set<std::string> used;
  for (size_t i = 0; i < outputs.size() && i < info.outputs.size(); ++i) {
    if (!outputs[i].defined()) continue;
    const std::string file = SafeFileName(info.outputs[i].name);
    if (!used.insert(file).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two outputs would both be written to ", file, ".npy"));
    }
    const std::string path = (std::filesystem::path(dir) / (file + ".npy")).string();
    if (absl::Status s = npy::SaveNpy(path, outputs[i]); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("output '", info.outputs[i].name, "': ", s.message()));
    }
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Flags f;
  cli::FlagParser flags(
      std::string(kProgram),
      "FILE.dvm [--function NAME] --input NAME=FILE.npy ... [--output-dir DIR] [--repeat N]\n"
      "              [--threads N] [--stats] [--max-iterations N] [--memory-limit BYTES]");
  flags.AddString("--function", &f.function, "the entry function to run (default: main)");
  flags.AddRepeated("--input,-i", &f.inputs,
                    "NAME=FILE.npy: binds an input (repeat for each input)");
  flags.AddString("--output-dir,-o", &f.output_dir, "write each output to DIR/NAME.npy");
  flags.AddInt("--repeat", &f.repeat,
               "after one warm-up run, time N runs; print median_ms and min_ms");
  flags.AddInt("--threads", &f.threads, "intra-op threads each kernel may use (default 1)");
  flags.AddSwitch("--stats", &f.stats, "print the VM's memory statistics after the run");
  flags.AddInt("--max-iterations", &f.max_iterations, "loop iteration budget per run");
  flags.AddInt("--memory-limit", &f.memory_limit, "pool memory limit in bytes (k, m, g suffixes)",
               true);
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return cli::ReportError(kProgram, s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    std::fputs(
        "\nRuns FILE.dvm and prints one line per output: NAME DTYPE [DIMS].\n"
        "bf16 inputs are read from '<u2' files; outputs in bf16 are written as '<u2'.\n",
        stdout);
    return 0;
  }
  if (flags.positional().size() != 1) {
    return cli::ReportError(kProgram,
                            absl::StrCat("expected one executable, got ", flags.positional().size(),
                                         " positional arguments (try vm-run --help)"));
  }
  if (flags.seen("--repeat") && f.repeat < 1)
    return cli::ReportError(kProgram, "--repeat must be at least 1");
  if (f.threads < 1 || f.threads > 4096)
    return cli::ReportError(kProgram, "--threads must be in [1, 4096]");
  if (flags.seen("--max-iterations") && f.max_iterations < 0) {
    return cli::ReportError(kProgram, "--max-iterations must not be negative");
  }
  if (f.memory_limit < 0) return cli::ReportError(kProgram, "--memory-limit must not be negative");

  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::Load(flags.positional()[0]);
  if (!exe.ok()) return cli::ReportError(kProgram, exe.status());
  absl::StatusOr<int> index = (*exe)->FindFunction(f.function);
  if (!index.ok()) return cli::ReportError(kProgram, index.status());
  const FunctionInfo& info = (*exe)->function(*index);
  if (!info.is_entry) {
    return cli::ReportError(kProgram,
                            absl::StrCat("function '", info.name,
                                         "' has no signature: it cannot be run from the host"));
  }

  VmOptions options;
  options.num_threads = static_cast<int>(f.threads);
  if (flags.seen("--max-iterations")) options.max_loop_iterations = f.max_iterations;
  options.memory_limit = f.memory_limit;
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe, options);
  if (!vm.ok()) return cli::ReportError(kProgram, vm.status());
  if (absl::Status s = BindInputs(f, info, **vm); !s.ok()) return cli::ReportError(kProgram, s);

  RunOptions run;
  run.function = info.name;
  if (absl::Status s = (*vm)->Run(run); !s.ok()) return cli::ReportError(kProgram, s);
  std::vector<double> times_ms;
  for (int64_t i = 0; i < f.repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = (*vm)->Run(run);
    const auto end = std::chrono::steady_clock::now();
    if (!s.ok()) return cli::ReportError(kProgram, s);
    times_ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }

  absl::StatusOr<std::vector<Tensor>> outputs = (*vm)->GetOutputs(info.name);
  if (!outputs.ok()) return cli::ReportError(kProgram, outputs.status());
  for (size_t i = 0; i < outputs->size() && i < info.outputs.size(); ++i) {
    const Tensor& t = (*outputs)[i];
    if (t.defined()) {
      std::printf("%s %s %s\n", info.outputs[i].name.c_str(),
                  std::string(DTypeName(t.dtype())).c_str(), t.ShapeString().c_str());
    } else {
      std::printf("%s (not a tensor)\n", info.outputs[i].name.c_str());
    }
  }
  if (!f.output_dir.empty()) {
    if (absl::Status s = WriteOutputs(f.output_dir, info, *outputs); !s.ok())
      return cli::ReportError(kProgram, s);
  }
  if (!times_ms.empty()) {
    std::vector<double> sorted = times_ms;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    const double median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    std::printf("median_ms=%.4f min_ms=%.4f\n", median, sorted.front());
  }
  if (f.stats) {
    const AllocatorStats st = (*vm)->memory_stats();
    std::printf("bytes_in_use=%lld peak_bytes_in_use=%lld system_allocs=%lld pool_hits=%lld\n",
                static_cast<long long>(st.bytes_in_use),
                static_cast<long long>(st.peak_bytes_in_use),
                static_cast<long long>(st.system_allocs), static_cast<long long>(st.pool_hits));
  }
  if (std::fflush(stdout) != 0)
    return cli::ReportError(kProgram, "cannot write to standard output");
  return 0;
}

}  // namespace
}  // namespace dynvm

int main(int argc, char** argv) { return dynvm::Main(argc, argv); }
