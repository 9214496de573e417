// vm-run: runs a function of a .dvm executable on inputs read from NumPy .npy files.
//
//   vm-run FILE.dvm [--function NAME] --input NAME=FILE.npy ... [--output-dir DIR]
//          [--repeat N] [--threads N] [--stats] [--max-iterations N] [--memory-limit BYTES]
//          [--set NAME=NUMBER ...] [--vocab FILE --text NAME=STRING ...] [--instances N]
//          [--device cpu|cuda] [--profile TRACE.json] [--profile-summary] [--weights FILE.dvw]
//          [--constant-pages auto|mapped|huge]
//
// --weights names the weights file of an executable compiled with vm-compile --weights-out
// (default: the file it names, beside FILE.dvm).
//
// --constant-pages: where the constants live (LoadOptions::constant_pages): `mapped`, the file's
// read-only mapping (zero copy); `huge`, a copy read at load into 2 MB pages (faster to stream:
// LLM decode); `auto` (default), huge for a file of at least 64 MiB where transparent huge pages
// are enabled.
//
// --device names the device the executable was compiled for (vm-compile --device): `cuda`
// first checks that this build and machine can use a CUDA device and that FILE runs kernels
// on it, and refuses with one clear line otherwise; `cpu` refuses a CUDA executable. Without
// --device, FILE runs on whatever it was compiled for. Outputs a program leaves on the device
// are copied to the host to be printed and written (docs/cuda.md).
//
// Limits: each run may execute at most --max-iterations loop iterations (default 10000000) and
// hold at most --memory-limit bytes of pool memory (default 4 GiB; 0: no limit), so that an
// executable from anywhere is stopped with an error instead of looping for hours or taking the
// machine's memory (docs/trust.md). Raise them for programs that need more.
//
// --instances N runs N VMs on the one loaded executable concurrently, each on its own thread
// with its own copy of the inputs, checks that every instance's outputs equal the
// single-instance run, and prints the process's peak resident memory.
//
// --set binds a scalar input from a number; --text binds a [1, n] token input encoding STRING
// with the vocabulary of --vocab (one Unicode code point per line, token id = line number).
// With --vocab, tokens the program streams (the `emit` instruction, stream 0) are printed as
// text while the run is in progress.
//
// --profile writes a Chrome trace-event file of the run (open it in https://ui.perfetto.dev or
// chrome://tracing); --profile-summary prints a table of time per kernel and the interpreter's
// own share per loop iteration (docs/profiling.md). With --repeat, only the timed runs are
// profiled (the first run warms up).
//
// Prints one line per output, `NAME DTYPE [DIMS]` (a scalar is `[]`; a sequence output is
// `NAME sequence of N: DTYPE[DIMS] ...`, an optional `NAME optional ...` or `NAME optional:
// empty`), and with --output-dir writes DIR/NAME.npy for each tensor (DIR/NAME_K.npy for
// element K of a sequence). Sequence and optional inputs cannot be bound from the command
// line. An .npy file whose data can be used in place is bound without a copy
// (SetInputZeroCopy); bf16 inputs travel as '<u2' files and are reinterpreted. A tensor output
// whose shape is known from its signature and the inputs' dims gets its DIR/NAME.npy created
// and mapped before the run and bound with SetOutputBuffer, so the program writes the file in
// place (or copies into it once at return); the others are written after the run. --stats
// counts both, and the bytes of the constants' file copied and left mapped (--constant-pages).
// Every error is one line on stderr and a nonzero exit status.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allocator/cuda_allocator.h"
#include "common/dtype.h"
#include "common/status_macros.h"
#include "kernels/tensor.h"
#include "kernels/thread_pool.h"
#include "schema/format.h"
#include "tools/cli.h"
#include "tools/npy/npy.h"
#include "tools/vocab.h"
#include "vm/executable.h"
#include "vm/profiler.h"
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
  int64_t max_iterations = 0;  // set by ParseFlags: kDefaultMaxIterations unless given; 0: none
  int64_t memory_limit = 0;    // set by ParseFlags: kDefaultMemoryLimit unless given; 0: none
  std::vector<std::string> sets;
  std::vector<std::string> texts;
  std::string vocab_path;
  int64_t instances = 0;
  std::string stream_prefix;
  std::string device;   // "", "cpu" or "cuda"
  std::string profile;  // Chrome trace file
  bool profile_summary = false;
  std::string weights;
  std::string constant_pages = "auto";
};

// Peak resident set size of the process (VmHWM), in bytes; 0 if unknown.
int64_t PeakRssBytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  int64_t kb = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb * 1024;
}

// Current resident set size, in bytes.
int64_t RssBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<int64_t>(resident) * 4096;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.dims() != b.dims()) return false;
  absl::StatusOr<std::string> ea = npy::EncodeNpy(a), eb = npy::EncodeNpy(b);
  return ea.ok() && eb.ok() && *ea == *eb;
}

// A one-element tensor of `dtype` holding `text` parsed as a number.
absl::StatusOr<Tensor> ScalarOf(DType dtype, absl::string_view text, int rank) {
  std::vector<int64_t> dims(static_cast<size_t>(rank), 1);
  DYNVM_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(dtype, dims));
  double d;
  int64_t i;
  const bool is_int = cli::ParseInt64(text, false, &i).ok();
  if (!is_int && !absl::SimpleAtod(text, &d)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a number"));
  }
  if (is_int) d = static_cast<double>(i);
  switch (dtype) {
    case DType::kF32:
      *t.data<float>() = static_cast<float>(d);
      break;
    case DType::kF64:
      *t.data<double>() = d;
      break;
    case DType::kI64:
      *t.data<int64_t>() = is_int ? i : static_cast<int64_t>(d);
      break;
    case DType::kI32:
      *t.data<int32_t>() = static_cast<int32_t>(is_int ? i : static_cast<int64_t>(d));
      break;
    case DType::kBool:
      *t.data<bool>() = d != 0;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "--set supports f32, f64, i64, i32 and bool inputs, not ", DTypeName(dtype)));
  }
  return t;
}

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

// What BindInputs saw: the value of every symbolic input dim, and how many inputs it bound
// without a copy.
struct BindReport {
  std::map<std::string, int64_t> symbols;
  int zero_copy_inputs = 0;
};

// Reads and binds every --input. Errors name the input and the file.
absl::Status BindInputs(const Flags& flags, const FunctionInfo& info,
                        const std::vector<uint32_t>* vocab, VirtualMachine& vm, bool copy = false,
                        BindReport* report = nullptr) {
  auto note = [&](const ParamInfo& p, const Tensor& t) {
    if (report == nullptr || !p.has_shape || t.rank() != static_cast<int>(p.shape.size())) return;
    for (size_t i = 0; i < p.shape.size(); ++i) {
      if (p.shape[i].value < 0)
        report->symbols.emplace(p.shape[i].symbol, t.dim(static_cast<int>(i)));
    }
  };
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
      DYNVM_ASSIGN_OR_RETURN(Tensor as_bf16, npy::ReinterpretAs(*t, DType::kBF16));
      t = std::move(as_bf16);
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
    absl::Status s = zero_copy && !copy ? vm.SetInputZeroCopy(name, *t, info.name)
                                        : vm.SetInput(name, *t, info.name);
    if (!s.ok()) return s;
    if (zero_copy && !copy && report != nullptr) ++report->zero_copy_inputs;
    note(p, *t);
    bound[index] = true;
  }
  // --set NAME=NUMBER and --text NAME=STRING.
  for (int pass = 0; pass < 2; ++pass) {
    const std::vector<std::string>& specs = pass == 0 ? flags.sets : flags.texts;
    for (const std::string& spec : specs) {
      const size_t eq = spec.find('=');
      if (eq == std::string::npos || eq == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(pass == 0 ? "--set" : "--text", " expects NAME=VALUE, got '", spec, "'"));
      }
      const std::string name = spec.substr(0, eq);
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
      absl::StatusOr<Tensor> t;
      if (pass == 0) {
        t = ScalarOf(p.dtype, spec.substr(eq + 1),
                     p.has_shape ? static_cast<int>(p.shape.size()) : 0);
      } else {
        if (vocab == nullptr) return absl::InvalidArgumentError("--text needs --vocab");
        absl::StatusOr<std::vector<int64_t>> ids =
            cli::EncodeText(spec.substr(eq + 1), *vocab, "text");
        if (!ids.ok())
          return absl::Status(ids.status().code(),
                              absl::StrCat("input '", name, "': ", ids.status().message()));
        if (p.dtype != DType::kI64)
          return absl::InvalidArgumentError(
              absl::StrCat("input '", name, "' must be i64 for --text"));
        t = Tensor::FromVector<int64_t>(DType::kI64, {1, static_cast<int64_t>(ids->size())}, *ids);
      }
      if (!t.ok())
        return absl::Status(t.status().code(),
                            absl::StrCat("input '", name, "': ", t.status().message()));
      DYNVM_RETURN_IF_ERROR(vm.SetInput(name, *t, info.name));
      note(p, *t);
      bound[index] = true;
    }
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

// Binds every output whose shape is known from the signature and the inputs to a fresh
// DIR/NAME.npy mapped for writing (npy::CreateMappedNpy), so the program writes it in place.
// Returns which outputs are bound; an output that cannot be is left to WriteOutputs.
std::vector<bool> MapOutputFiles(const std::string& dir, const FunctionInfo& info,
                                 const BindReport& report, VirtualMachine& vm) {
  std::vector<bool> mapped(info.outputs.size(), false);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return mapped;  // WriteOutputs reports it
  std::map<std::string, int> files;
  for (const ParamInfo& p : info.outputs) ++files[SafeFileName(p.name)];
  for (size_t k = 0; k < info.outputs.size(); ++k) {
    const ParamInfo& p = info.outputs[k];
    if (p.kind != ObjectKind::kTensor || !p.has_shape || p.dtype == DType::kString ||
        files[SafeFileName(p.name)] > 1) {
      continue;
    }
    std::vector<int64_t> dims;
    for (const DimInfo& d : p.shape) {
      auto it = report.symbols.find(d.symbol);
      if (d.value >= 0) {
        dims.push_back(d.value);
      } else if (it != report.symbols.end()) {
        dims.push_back(it->second);
      } else {
        break;
      }
    }
    if (dims.size() != p.shape.size()) continue;
    const std::string path =
        (std::filesystem::path(dir) / (SafeFileName(p.name) + ".npy")).string();
    absl::StatusOr<Tensor> t = npy::CreateMappedNpy(path, p.dtype, dims);
    if (!t.ok()) continue;
    if (vm.SetOutputBuffer(p.name, *t, info.name).ok()) {
      mapped[k] = true;
    } else {
      std::filesystem::remove(path, ec);
    }
  }
  return mapped;
}

// Every tensor of a run's outputs, on the host, with a name each: a tensor output is NAME, the
// elements of a sequence output (or of an optional holding one) NAME_0, NAME_1, ..., the
// tensor of an optional NAME (nothing when it is empty). `lines` describes each output.
struct HostOutputs {
  std::vector<std::string> names;
  std::vector<Tensor> tensors;
  std::vector<std::string> lines;
  std::vector<size_t> output_index;  // per tensor: the output it belongs to
};

absl::StatusOr<HostOutputs> CollectOutputs(const VirtualMachine& vm, const FunctionInfo& info) {
  HostOutputs h;
  size_t current = 0;
  auto add = [&](const std::string& name, const Tensor& t) -> absl::Status {
    DYNVM_ASSIGN_OR_RETURN(Tensor host, vm.ToHost(t));
    h.output_index.push_back(current);
    h.names.push_back(name);
    h.tensors.push_back(std::move(host));
    return absl::OkStatus();
  };
  for (size_t i = 0; i < info.outputs.size(); ++i) {
    current = i;
    const std::string& name = info.outputs[i].name;
    DYNVM_ASSIGN_OR_RETURN(ObjectValue v, vm.GetOutputValue(static_cast<int>(i), info.name));
    if (v.kind == ObjectKind::kTensor) {
      DYNVM_RETURN_IF_ERROR(add(name, v.tensor));
      h.lines.push_back(
          absl::StrCat(name, " ", DTypeName(v.tensor.dtype()), " ", v.tensor.ShapeString()));
      continue;
    }
    if (v.kind == ObjectKind::kOptional && !v.has_value) {
      h.lines.push_back(absl::StrCat(name, " optional: empty"));
      continue;
    }
    const bool seq = v.kind == ObjectKind::kSequence || v.elem_kind == ObjectKind::kSequence;
    std::string line = absl::StrCat(name, v.kind == ObjectKind::kOptional ? " optional " : " ");
    if (!seq) {
      DYNVM_RETURN_IF_ERROR(add(name, v.tensor));
      absl::StrAppend(&line, DTypeName(v.tensor.dtype()), " ", v.tensor.ShapeString());
    } else {
      absl::StrAppend(&line, "sequence of ", v.sequence.size(), v.sequence.empty() ? "" : ":");
      for (size_t k = 0; k < v.sequence.size(); ++k) {
        DYNVM_RETURN_IF_ERROR(add(absl::StrCat(name, "_", k), v.sequence[k]));
        absl::StrAppend(&line, " ", DTypeName(v.sequence[k].dtype()), v.sequence[k].ShapeString());
      }
    }
    h.lines.push_back(std::move(line));
  }
  return h;
}

// `mapped[k]`: output k was written by the run into its mapped file.
absl::Status WriteOutputs(const std::string& dir, const HostOutputs& outputs,
                          const std::vector<bool>& mapped = {}) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create directory ", dir, ": ", ec.message()));
  std::set<std::string> used;
  for (size_t i = 0; i < outputs.tensors.size(); ++i) {
    const std::string file = SafeFileName(outputs.names[i]);
    if (!used.insert(file).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two outputs would both be written to ", file, ".npy"));
    }
    const size_t k = outputs.output_index[i];
    if (k < mapped.size() && mapped[k]) continue;  // the run wrote it into its mapped file
    const std::string path = (std::filesystem::path(dir) / (file + ".npy")).string();
    if (absl::Status s = npy::SaveNpy(path, outputs.tensors[i]); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("output '", outputs.names[i], "': ", s.message()));
    }
  }
  return absl::OkStatus();
}

// Limits vm-run applies unless told otherwise, the VM's defaults (vm/virtual_machine.h): a file
// from anywhere cannot make it loop for hours or take the machine's memory (docs/trust.md).
// --max-iterations and --memory-limit raise them (0: no limit).
constexpr int64_t kDefaultMaxIterations = kDefaultMaxLoopIterations;

// Declares every flag, parses argv into `f` and checks the values. `help` is set when --help
// was asked for (usage printed). Returns the positional executable path.
absl::StatusOr<std::string> ParseFlags(int argc, char** argv, Flags& f, bool& help) {
  f.max_iterations = kDefaultMaxIterations;
  f.memory_limit = kDefaultMemoryLimit;
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
  flags.AddInt("--threads", &f.threads,
               "intra-op threads each kernel may use: 1 (the default) to the CPUs available");
  flags.AddSwitch("--stats", &f.stats, "print the VM's memory statistics after the run");
  flags.AddInt("--max-iterations", &f.max_iterations,
               "loop iteration budget per run (default 10000000; 0: no limit)");
  flags.AddInt("--memory-limit", &f.memory_limit,
               "pool memory limit in bytes, k, m, g suffixes (default 4g; 0: no limit)", true);
  flags.AddRepeated("--set", &f.sets, "NAME=NUMBER: binds a scalar input");
  flags.AddRepeated("--text", &f.texts, "NAME=STRING: binds a [1, n] token input (needs --vocab)");
  flags.AddInt("--instances", &f.instances,
               "run N VMs on one executable concurrently and check their outputs");
  flags.AddString("--stream-prefix", &f.stream_prefix, "text printed before the streamed tokens");
  flags.AddString("--vocab", &f.vocab_path,
                  "token vocabulary (one code point per line); streamed tokens print as text");
  flags.AddString("--weights", &f.weights, "the weights file (.dvw) of FILE (default: beside it)");
  flags.AddString("--constant-pages", &f.constant_pages,
                  "auto, mapped or huge: constants in the file mapping or in a copy in 2 MB pages "
                  "(default auto: huge for files of 64 MiB or more)");
  flags.AddString("--device", &f.device,
                  "cpu or cuda: the device FILE was compiled for (checked before running)");
  flags.AddString("--profile", &f.profile,
                  "write a Chrome trace of the run to FILE (docs/profiling.md)");
  flags.AddSwitch("--profile-summary", &f.profile_summary,
                  "print time per kernel and the interpreter's share per loop iteration");
  DYNVM_RETURN_IF_ERROR(flags.Parse(argc, argv));
  help = flags.help_requested();
  if (help) {
    std::fputs(flags.Usage().c_str(), stdout);
    std::fputs(
        "\nRuns FILE.dvm and prints one line per output: NAME DTYPE [DIMS].\n"
        "bf16 inputs are read from '<u2' files; outputs in bf16 are written as '<u2'.\n"
        "Limits unless raised: 10000000 loop iterations per run, 4 GiB of pool memory.\n",
        stdout);
    return std::string();
  }
  if (flags.positional().size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected one executable, got ",
                                                   flags.positional().size(),
                                                   " positional arguments (try vm-run --help)"));
  }
  if (flags.seen("--repeat") && f.repeat < 1)
    return absl::InvalidArgumentError("--repeat must be at least 1");
  DYNVM_RETURN_IF_ERROR(ValidateThreadCount(f.threads, "--threads"));
  if (f.max_iterations < 0)
    return absl::InvalidArgumentError("--max-iterations must not be negative");
  if (f.memory_limit < 0) return absl::InvalidArgumentError("--memory-limit must not be negative");
  if (flags.seen("--instances") && (f.instances < 1 || f.instances > 1024)) {
    return absl::InvalidArgumentError("--instances must be in [1, 1024]");
  }
  if (absl::Status s = ParseConstantPages(f.constant_pages).status(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--constant-pages: ", s.message()));
  }
  if (!f.device.empty() && f.device != "cpu" && f.device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu or cuda, got '", f.device, "'"));
  }
  if (f.device == "cuda") {
    if (absl::Status s = CudaDeviceAvailable(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--device cuda: ", s.message()));
    }
  }
  return flags.positional()[0];
}

// Loads `path` and checks it against --device.
absl::StatusOr<std::shared_ptr<const Executable>> LoadForDevice(const std::string& path,
                                                                const Flags& f) {
  LoadOptions load;
  load.weights_path = f.weights;
  DYNVM_ASSIGN_OR_RETURN(load.constant_pages, ParseConstantPages(f.constant_pages));
  DYNVM_ASSIGN_OR_RETURN(std::shared_ptr<const Executable> exe, Executable::Load(path, load));
  const bool uses_cuda = (exe->required_features() & schema::kFeatureCudaDevice) != 0;
  if (f.device == "cuda" && !uses_cuda) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device cuda: ", path,
        " runs no kernel on the CUDA device (compile it with vm-compile --device cuda)"));
  }
  if (f.device == "cpu" && uses_cuda) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device cpu: ", path, " was compiled for the CUDA device"));
  }
  return exe;
}

// Streamed tokens (row 0 of each tensor emitted on stream 0) print as text as they come.
EmitCallback PrintTokens(const std::vector<uint32_t>& vocab) {
  return [&vocab](int stream, const Tensor& t) -> absl::Status {
    if (stream != 0 || t.numel() == 0 || (t.dtype() != DType::kI64 && t.dtype() != DType::kI32)) {
      return absl::OkStatus();
    }
    const int64_t id = t.dtype() == DType::kI64 ? *t.data<int64_t>() : *t.data<int32_t>();
    if (id < 0 || id >= static_cast<int64_t>(vocab.size())) {
      return absl::OutOfRangeError(
          absl::StrCat("streamed token ", id, " is outside the vocabulary"));
    }
    std::fputs(cli::Utf8(vocab[id]).c_str(), stdout);
    std::fflush(stdout);
    return absl::OkStatus();
  };
}

// --instances: every instance gets its own VM, thread and copy of the inputs; the executable
// (and so the mapped weights) is shared. Each instance's outputs must equal `reference`'s.
absl::Status RunInstances(const Flags& f, const std::shared_ptr<const Executable>& exe,
                          const VmOptions& options, const FunctionInfo& info, const RunOptions& run,
                          const std::vector<uint32_t>* vocab, const HostOutputs& reference,
                          int64_t baseline_rss) {
  const int n = static_cast<int>(f.instances);
  std::vector<std::unique_ptr<VirtualMachine>> vms(n);
  for (int i = 0; i < n; ++i) {
    DYNVM_ASSIGN_OR_RETURN(vms[i], VirtualMachine::Create(exe, options));
    DYNVM_RETURN_IF_ERROR(BindInputs(f, info, vocab, *vms[i], /*copy=*/true));
  }
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  RunOptions quiet = run;
  quiet.on_emit = nullptr;
  quiet.profiler = nullptr;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] { status[i] = vms[i]->Run(quiet); });
  }
  for (std::thread& t : threads) t.join();
  std::printf("instances=%d\n", n);
  bool all_ok = true;
  for (int i = 0; i < n; ++i) {
    if (!status[i].ok())
      return absl::Status(status[i].code(),
                          absl::StrCat("instance ", i, ": ", status[i].message()));
    DYNVM_ASSIGN_OR_RETURN(HostOutputs outs, CollectOutputs(*vms[i], info));
    bool same = outs.tensors.size() == reference.tensors.size();
    for (size_t k = 0; same && k < outs.tensors.size(); ++k) {
      same = SameBytes(outs.tensors[k], reference.tensors[k]);
    }
    std::printf("instance %d: %s\n", i,
                same ? "outputs equal the single-instance run" : "OUTPUTS DIFFER");
    all_ok &= same;
  }
  std::printf("peak_rss_mb=%.1f baseline_rss_mb=%.1f weights_mb=%.1f\n", PeakRssBytes() / 1048576.0,
              baseline_rss / 1048576.0, exe->weight_bytes() / 1048576.0);
  if (!all_ok) return absl::InternalError("instances produced different outputs");
  return absl::OkStatus();
}

// --stats: the VM's memory statistics after the run, and how the files were bound.
void PrintStats(const VirtualMachine& vm, const BindReport& bind_report,
                const std::vector<bool>& mapped, int output_copies, bool uses_cuda) {
  const AllocatorStats st = vm.memory_stats();
  std::printf("bytes_in_use=%lld peak_bytes_in_use=%lld system_allocs=%lld pool_hits=%lld\n",
              static_cast<long long>(st.bytes_in_use), static_cast<long long>(st.peak_bytes_in_use),
              static_cast<long long>(st.system_allocs), static_cast<long long>(st.pool_hits));
  // The last run's system allocations, and those of its loops' steady state (after their
  // first iteration, up to their end): 0 for a decode loop planned ahead.
  const RunMemoryStats run_mem = vm.last_run_memory();
  std::printf("run_system_allocs=%lld after_first_iteration=%s\n",
              static_cast<long long>(run_mem.system_allocs),
              run_mem.first_iteration_ended
                  ? std::to_string(run_mem.system_allocs_after_first_iteration).c_str()
                  : "none");
  const int n_mapped = static_cast<int>(std::count(mapped.begin(), mapped.end(), true));
  std::printf("zero_copy_inputs=%d mapped_output_files=%d outputs_written_in_place=%d\n",
              bind_report.zero_copy_inputs, n_mapped, n_mapped - output_copies);
  if (uses_cuda) {
    const AllocatorStats dev = vm.device_memory_stats();
    std::printf(
        "device_bytes_in_use=%lld device_peak_bytes_in_use=%lld "
        "device_system_allocs=%lld device_pool_hits=%lld\n",
        static_cast<long long>(dev.bytes_in_use), static_cast<long long>(dev.peak_bytes_in_use),
        static_cast<long long>(dev.system_allocs), static_cast<long long>(dev.pool_hits));
  }
}

void PrintTimes(const std::vector<double>& times_ms) {
  if (times_ms.empty()) return;
  std::vector<double> sorted = times_ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  std::printf("median_ms=%.4f min_ms=%.4f\n", median, sorted.front());
}

int Main(int argc, char** argv) {
  Flags f;
  bool help = false;
  absl::StatusOr<std::string> path = ParseFlags(argc, argv, f, help);
  if (!path.ok()) return cli::ReportError(kProgram, path.status());
  if (help) return 0;

  const int64_t baseline_rss = RssBytes();  // before the executable is mapped
  absl::StatusOr<std::shared_ptr<const Executable>> exe = LoadForDevice(*path, f);
  if (!exe.ok()) return cli::ReportError(kProgram, exe.status());
  const bool uses_cuda = ((*exe)->required_features() & schema::kFeatureCudaDevice) != 0;
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
  options.max_loop_iterations = f.max_iterations;
  options.memory_limit = f.memory_limit;
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe, options);
  if (!vm.ok()) return cli::ReportError(kProgram, vm.status());
  std::vector<uint32_t> vocab;
  if (!f.vocab_path.empty()) {
    absl::StatusOr<std::vector<uint32_t>> v = cli::ReadVocab(f.vocab_path);
    if (!v.ok()) return cli::ReportError(kProgram, v.status());
    vocab = *std::move(v);
  }
  const std::vector<uint32_t>* vocab_or_null = f.vocab_path.empty() ? nullptr : &vocab;
  BindReport bind_report;
  if (absl::Status s = BindInputs(f, info, vocab_or_null, **vm, false, &bind_report); !s.ok()) {
    return cli::ReportError(kProgram, s);
  }
  // Outputs of a shape known now are written by the program straight into their .npy files.
  std::vector<bool> mapped;
  if (!f.output_dir.empty()) mapped = MapOutputFiles(f.output_dir, info, bind_report, **vm);
  auto fail = [&](const absl::Status& s) {
    // A mapped output file of a failed run holds nothing useful.
    std::error_code ec;
    for (size_t k = 0; k < mapped.size(); ++k) {
      if (mapped[k]) {
        std::filesystem::remove(
            std::filesystem::path(f.output_dir) / (SafeFileName(info.outputs[k].name) + ".npy"),
            ec);
      }
    }
    return cli::ReportError(kProgram, s);
  };

  RunOptions run;
  run.function = info.name;
  if (!vocab.empty()) {
    std::fputs(f.stream_prefix.c_str(), stdout);
    std::fflush(stdout);
    run.on_emit = PrintTokens(vocab);
  }
  Profiler profiler;
  const bool profiling = !f.profile.empty() || f.profile_summary;
  RunOptions first = run;
  if (profiling && f.repeat == 0) first.profiler = &profiler;
  if (profiling && f.repeat > 0) run.profiler = &profiler;
  if (absl::Status s = (*vm)->Run(first); !s.ok()) return fail(s);
  const int output_copies = (*vm)->last_run_output_copies();
  if (!vocab.empty()) {
    std::fputs("\n", stdout);
    run.on_emit = nullptr;  // timed repeats do not print
  }
  std::vector<double> times_ms;
  for (int64_t i = 0; i < f.repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = (*vm)->Run(run);
    const auto end = std::chrono::steady_clock::now();
    if (!s.ok()) return fail(s);
    times_ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }

  // Outputs the program left on the device are copied to the host.
  absl::StatusOr<HostOutputs> outputs = CollectOutputs(**vm, info);
  if (!outputs.ok()) return cli::ReportError(kProgram, outputs.status());
  for (const std::string& line : outputs->lines) std::printf("%s\n", line.c_str());
  if (!f.output_dir.empty()) {
    if (absl::Status s = WriteOutputs(f.output_dir, *outputs, mapped); !s.ok())
      return cli::ReportError(kProgram, s);
  }
  PrintTimes(times_ms);
  if (!f.profile.empty()) {
    if (absl::Status s = profiler.WriteChromeTrace(f.profile); !s.ok())
      return cli::ReportError(kProgram, s);
  }
  if (f.profile_summary) std::fputs(profiler.SummaryTable().c_str(), stdout);
  if (f.instances > 0) {
    if (absl::Status s =
            RunInstances(f, *exe, options, info, run, vocab_or_null, *outputs, baseline_rss);
        !s.ok()) {
      return cli::ReportError(kProgram, s);
    }
  }
  if (f.stats) {
    PrintStats(**vm, bind_report, mapped, output_copies, uses_cuda);
    // --constant-pages: how much of the constants' file was copied (2 MB pages) and mapped.
    std::printf("constant_bytes_copied=%lld constant_bytes_mapped=%lld\n",
                static_cast<long long>((*exe)->constant_bytes_copied()),
                static_cast<long long>((*exe)->constant_bytes_mapped()));
  }
  if (std::fflush(stdout) != 0)
    return cli::ReportError(kProgram, "cannot write to standard output");
  return 0;
}

}  // namespace
}  // namespace dynvm

int main(int argc, char** argv) { return dynvm::Main(argc, argv); }
