// History independence (docs/determinism.md): a VM's result for an input does not depend on
// what the process ran before. For every model under tools/models and tools/lm (enumerated from
// the folders: a new model is covered, and one the test cannot drive fails it), compiled once
// (without bounds, and with bounds), one VM runs a first input (the model's first checked-in
// case) and keeps its output bits; then a seeded random sequence of runs: the other cases,
// inputs cut and tiled to other shapes (batch, prompt length, steps, max_new_tokens, seed), 1
// and 2 intra-op threads, other models in the same process, a second VM on the same executable
// (alone, and running on another thread at the same time); then a larger input than the first,
// and the first input again: its outputs must equal the first run's bit for bit (memcmp). Every
// input seen twice must give the same bits both times, whatever ran between, and every
// checked-in case must match its reference outputs (PyTorch's: tokens exactly, floats to 1e-4).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "kernels/thread_pool.h"
#include "tools/npy/npy.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

namespace fs = std::filesystem;

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// One checked-in case: the inputs it binds and the reference outputs it has.
struct Case {
  std::string name;
  NamedTensors inputs;
  NamedTensors refs;
};

// A model file and where its cases live: `case*` folders (or the model's folder itself) holding
// input_<name>.npy and output_<name>.npy (tools/models), or <case>_<name>.npy files in a
// testdata folder (tools/lm).
struct ModelSource {
  std::string name;
  fs::path onnx;
  fs::path data;
  bool prefixed = false;  // <case>_<name>.npy in `data`
};

std::vector<ModelSource> DiscoverModels() {
  std::vector<ModelSource> out;
  if (fs::is_directory("tools/models")) {
    for (const fs::directory_entry& d : fs::directory_iterator("tools/models")) {
      const std::string name = d.path().filename().string();
      if (!d.is_directory() || absl::StartsWith(name, "__") || absl::StartsWith(name, "."))
        continue;
      ModelSource m{name, fs::path(), d.path(), false};
      for (const fs::directory_entry& f : fs::directory_iterator(d.path())) {
        if (f.path().extension() == ".onnx") m.onnx = f.path();  // one each (checked below)
      }
      out.push_back(m);
    }
  }
  if (fs::is_directory("tools/lm")) {
    for (const fs::directory_entry& f : fs::directory_iterator("tools/lm")) {
      if (f.path().extension() != ".onnx") continue;
      out.push_back({f.path().stem().string(), f.path(), "tools/lm/testdata", true});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ModelSource& a, const ModelSource& b) { return a.onnx < b.onnx; });
  return out;
}

std::vector<std::string> ModelNames() {
  std::vector<std::string> names;
  for (const ModelSource& m : DiscoverModels()) names.push_back(m.name);
  return names;
}

int CountOnnx(const fs::path& dir) {
  int n = 0;
  for (const fs::directory_entry& f : fs::directory_iterator(dir))
    n += f.path().extension() == ".onnx";
  return n;
}

// input_<x>.npy / output_<x>.npy files of one folder.
absl::Status LoadFolderCase(const fs::path& dir, Case& c) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& f : fs::directory_iterator(dir)) files.push_back(f.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    const std::string file = p.filename().string();
    if (p.extension() != ".npy") continue;
    const bool input = absl::StartsWith(file, "input_");
    if (!input && !absl::StartsWith(file, "output_")) continue;
    absl::StatusOr<Tensor> t = npy::LoadNpy(p.string());
    if (!t.ok()) return t.status();
    const size_t skip = input ? 6 : 7;
    (input ? c.inputs : c.refs).push_back({file.substr(skip, file.size() - skip - 4), *t});
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Case>> LoadCases(const ModelSource& m, const FunctionInfo& fn) {
  std::vector<Case> cases;
  if (!m.prefixed) {
    std::vector<fs::path> dirs;
    for (const fs::directory_entry& d : fs::directory_iterator(m.data)) {
      if (d.is_directory() && absl::StartsWith(d.path().filename().string(), "case"))
        dirs.push_back(d.path());
    }
    std::sort(dirs.begin(), dirs.end());
    if (dirs.empty()) dirs.push_back(m.data);  // the inputs next to the model
    for (const fs::path& d : dirs) {
      Case c{d.filename().string(), {}, {}};
      if (absl::Status s = LoadFolderCase(d, c); !s.ok()) return s;
      cases.push_back(std::move(c));
    }
    return cases;
  }
  // <case>_<input>.npy for every input of the function; <case>_<output>.npy references.
  std::vector<std::string> prefixes;
  const std::string first_suffix = absl::StrCat("_", fn.inputs.at(0).name, ".npy");
  for (const fs::directory_entry& f : fs::directory_iterator(m.data)) {
    const std::string file = f.path().filename().string();
    if (absl::EndsWith(file, first_suffix))
      prefixes.push_back(file.substr(0, file.size() - first_suffix.size()));
  }
  std::sort(prefixes.begin(), prefixes.end());
  for (const std::string& p : prefixes) {
    Case c{p, {}, {}};
    for (const auto& [list, params] :
         {std::pair{&c.inputs, &fn.inputs}, std::pair{&c.refs, &fn.outputs}}) {
      for (const ParamInfo& param : *params) {
        const fs::path file = m.data / absl::StrCat(p, "_", param.name, ".npy");
        if (!fs::exists(file)) continue;
        absl::StatusOr<Tensor> t = npy::LoadNpy(file.string());
        if (!t.ok()) return t.status();
        list->push_back({param.name, *t});
      }
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

// The model compiled once per process (per bounds mode), with its cases and the largest value
// each input symbol takes in them.
struct Model {
  ModelSource source;
  std::shared_ptr<const Executable> exe;
  std::vector<Case> cases;
  std::map<std::string, int64_t> max_symbol;
};

std::map<std::string, int64_t> MaxSymbols(const FunctionInfo& fn, const std::vector<Case>& cases) {
  std::map<std::string, int64_t> out;
  for (const Case& c : cases) {
    for (const auto& [name, t] : c.inputs) {
      for (const ParamInfo& p : fn.inputs) {
        if (p.name != name || static_cast<int>(p.shape.size()) != t.rank()) continue;
        for (int a = 0; a < t.rank(); ++a) {
          if (p.shape[a].value < 0)
            out[p.shape[a].symbol] = std::max(out[p.shape[a].symbol], t.dim(a));
        }
      }
    }
  }
  out["batch"] = std::max<int64_t>(out["batch"], 4);  // batches beyond the cases'
  return out;
}

// Checks that every case binds exactly the function's inputs.
absl::Status CheckCases(const ModelSource& m, const FunctionInfo& fn,
                        const std::vector<Case>& cases) {
  if (cases.empty()) return absl::NotFoundError(absl::StrCat("no cases for ", m.name));
  for (const Case& c : cases) {
    if (c.inputs.size() != fn.inputs.size())
      return absl::InvalidArgumentError(absl::StrCat(m.name, "/", c.name, " binds ",
                                                     c.inputs.size(), " of the ", fn.inputs.size(),
                                                     " inputs"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Model> BuildModel(const ModelSource& m, bool bounded) {
  if (m.onnx.empty() || (!m.prefixed && CountOnnx(m.onnx.parent_path()) != 1))
    return absl::InvalidArgumentError(absl::StrCat(m.name, ": not one .onnx in its folder"));
  absl::StatusOr<std::unique_ptr<compiler::Module>> module =
      compiler::onnx::ImportOnnxFile(m.onnx.string());
  if (!module.ok()) return module.status();
  // Cases first (from an unbounded compile's signature), then the bounds they need.
  compiler::CompileOptions options;
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(**module, options);
  if (!compiled.ok()) return compiled.status();
  absl::StatusOr<std::shared_ptr<const Executable>> exe =
      Executable::LoadFromBytes(compiled->bytes);
  if (!exe.ok()) return exe.status();
  const FunctionInfo& fn = (*exe)->function(*(*exe)->FindFunction(""));
  Model model{m, *exe, {}, {}};
  absl::StatusOr<std::vector<Case>> cases = LoadCases(m, fn);
  if (!cases.ok()) return cases.status();
  if (absl::Status s = CheckCases(m, fn, *cases); !s.ok()) return s;
  model.cases = *std::move(cases);
  model.max_symbol = MaxSymbols(fn, model.cases);
  if (!bounded) return model;
  for (const auto& [symbol, max] : model.max_symbol)  // room for the larger input's length
    options.bounds.push_back({symbol, symbol == "batch" ? max : 2 * max});
  int64_t max_new = 0;
  for (const Case& c : model.cases) {
    for (const auto& [name, t] : c.inputs) {
      if (name == "max_new_tokens" || name == "steps")
        max_new = std::max(max_new, testing::ToInts(t).at(0));
    }
  }
  if (max_new > 0) options.bounds.push_back({"max_new_tokens", max_new});
  compiled = compiler::Compile(**module, options);
  if (!compiled.ok()) return compiled.status();
  exe = Executable::LoadFromBytes(compiled->bytes);
  if (!exe.ok()) return exe.status();
  model.exe = *exe;
  return model;
}

// Compiled once per process: the other models a test mixes in come from here too.
const Model& GetModel(const std::string& name, bool bounded) {
  static auto* cache = new std::map<std::pair<std::string, bool>, absl::StatusOr<Model>>();
  auto it = cache->find({name, bounded});
  if (it == cache->end()) {
    absl::StatusOr<Model> built = absl::NotFoundError(absl::StrCat("no model ", name));
    for (const ModelSource& m : DiscoverModels()) {
      if (m.name == name) built = BuildModel(m, bounded);
    }
    it = cache->emplace(std::pair{name, bounded}, std::move(built)).first;
  }
  static const Model kNone;
  EXPECT_TRUE(it->second.ok()) << name << ": " << it->second.status();
  return it->second.ok() ? *it->second : kNone;
}

// `t` cut or tiled (cyclically) to `dims`: every value is one the case had.
Tensor Resize(const Tensor& t, const std::vector<int64_t>& dims) {
  Tensor out = *Tensor::Empty(t.dtype(), dims);
  const int64_t size = DTypeSize(t.dtype());
  const std::vector<int64_t> in_dims(t.dims().begin(), t.dims().end());
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t rest = i, src = 0, stride = 1;
    for (int a = static_cast<int>(dims.size()) - 1; a >= 0; --a) {
      src += (rest % dims[a]) % in_dims[a] * stride;
      rest /= dims[a];
      stride *= in_dims[a];
    }
    std::memcpy(static_cast<char*>(out.raw_data()) + i * size,
                static_cast<const char*>(t.raw_data()) + src * size, size);
  }
  return out;
}

// A size in [1, hi] (0 when hi is 0: a case with no steps).
int64_t UpTo(int64_t hi, std::mt19937_64& rng) {
  return std::uniform_int_distribution<int64_t>(std::min<int64_t>(1, hi), hi)(rng);
}

// Inputs of `base` with each symbol given a new size: the batch anything up to its maximum,
// the others (prompt length, steps) at most the case's own; max_new_tokens at most the case's;
// a new seed. `largest`: the batch at its maximum, the other symbols `grow` times the case's.
NamedTensors Variant(const Model& m, const Case& base, std::mt19937_64& rng, bool largest,
                     int64_t grow = 1) {
  const FunctionInfo& fn = m.exe->function(*m.exe->FindFunction(""));
  std::map<std::string, int64_t> size;
  NamedTensors out;
  for (const auto& [name, t] : base.inputs) {
    const ParamInfo* p = nullptr;
    for (const ParamInfo& q : fn.inputs) p = q.name == name ? &q : p;
    std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    for (int a = 0; a < t.rank() && p != nullptr && a < static_cast<int>(p->shape.size()); ++a) {
      const std::string& s = p->shape[a].symbol;
      if (p->shape[a].value >= 0) continue;
      if (!size.count(s)) {
        const int64_t hi = s == "batch" ? m.max_symbol.at(s) : t.dim(a);
        size[s] = largest ? (s == "batch" ? hi : hi * grow) : UpTo(hi, rng);
      }
      dims[a] = size[s];
    }
    Tensor v = Resize(t, dims);
    if (!largest && name == "max_new_tokens" && v.numel() == 1 && v.dtype() == DType::kI64)
      v.data<int64_t>()[0] = UpTo(v.data<int64_t>()[0], rng);
    if (!largest && name == "seed" && v.numel() == 1 && v.dtype() == DType::kI64)
      v.data<int64_t>()[0] = std::uniform_int_distribution<int64_t>(0, 1 << 30)(rng);
    out.push_back({name, std::move(v)});
  }
  return out;
}

// A tensor's dtype, dims and bytes (row-major, whatever its strides): equal strings are equal
// bits.
std::string Bits(const Tensor& t) {
  std::string s = absl::StrCat(DTypeName(t.dtype()), t.ShapeString(), ":");
  const int64_t size = DTypeSize(t.dtype());
  for (int64_t i = 0; i < t.numel(); ++i)
    s.append(static_cast<const char*>(t.raw_data()) + t.ElementOffset(i) * size, size);
  return s;
}

int64_t Elements(const NamedTensors& inputs) {
  int64_t n = 0;
  for (const auto& [name, t] : inputs) n += t.numel();
  return n;
}

std::string Key(const NamedTensors& inputs) {
  std::string key;
  for (const auto& [name, t] : inputs) absl::StrAppend(&key, name, "=", Bits(t), ";");
  return key;
}

absl::StatusOr<NamedTensors> RunOnce(VirtualMachine& vm, const NamedTensors& inputs) {
  for (const auto& [name, t] : inputs) {
    if (absl::Status s = vm.SetInput(name, t); !s.ok()) return s;
  }
  if (absl::Status s = vm.Run(); !s.ok()) return s;
  NamedTensors out;
  const FunctionInfo& fn = vm.executable().function(*vm.executable().FindFunction(""));
  for (const ParamInfo& p : fn.outputs) {
    absl::StatusOr<Tensor> t = vm.GetOutput(p.name);
    if (!t.ok()) return t.status();
    out.push_back({p.name, *t});
  }
  return out;
}

// The outputs against a case's references: integers exactly, floats to 1e-4.
void ExpectReference(const Case& c, const NamedTensors& got) {
  ASSERT_FALSE(c.refs.empty()) << c.name << " has no reference outputs";
  for (const auto& [name, want] : c.refs) {
    const Tensor* t = nullptr;
    for (const auto& [n, g] : got) t = n == name ? &g : t;
    ASSERT_NE(t, nullptr) << "no output " << name;
    ASSERT_EQ(t->dims(), want.dims()) << name << ": " << t->DebugString();
    ASSERT_EQ(t->dtype(), want.dtype()) << name;
    if (want.dtype() == DType::kF32) {
      const std::vector<double> a = testing::ToDoubles(*t), b = testing::ToDoubles(want);
      for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << name << " " << i;
    } else {
      EXPECT_EQ(testing::ToInts(*t), testing::ToInts(want)) << name;
    }
  }
}

// Where two runs of one input differ: the first output and byte.
std::string Diff(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] == b[i]) continue;
    size_t j = 0;
    while (j < a[i].size() && j < b[i].size() && a[i][j] == b[i][j]) ++j;
    return absl::StrCat("output ", i, " differs at byte ", j, " of ", a[i].size());
  }
  return a.size() == b.size() ? "" : "output counts differ";
}

enum class Step { kCase, kVariant, kRepeat, kThreads, kOtherModel, kSecondVm, kConcurrent };

class HistoryTest : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
 protected:
  void SetUp() override {
    if (MaxThreads() < 2) {
      ASSERT_TRUE(SetMaxThreads(2).ok());
    }
    const auto& [name, bounded] = GetParam();
    model_ = &GetModel(name, bounded);
    ASSERT_NE(model_->exe, nullptr) << name << " cannot be driven";
    rng_.seed(std::hash<std::string>()(name) ^ (bounded ? 0x9e37 : 0x51));
    VmOptions two;
    two.num_threads = 2;
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(model_->exe);
    ASSERT_TRUE(vm.ok()) << vm.status();
    vm_ = *std::move(vm);
    vm = VirtualMachine::Create(model_->exe, two);  // a second VM on the same executable
    ASSERT_TRUE(vm.ok()) << vm.status();
    vm2_ = *std::move(vm);
  }

  // Runs `inputs` on `vm` and checks the bits against every earlier run of the same inputs.
  void RunAndCheck(VirtualMachine& vm, const NamedTensors& inputs, const std::string& what) {
    absl::StatusOr<NamedTensors> out = RunOnce(vm, inputs);
    ASSERT_TRUE(out.ok()) << what << ": " << out.status();
    Record(inputs, *out, what);
  }

  void Record(const NamedTensors& inputs, const NamedTensors& out, const std::string& what) {
    if (std::getenv("DYNVM_HISTORY_VERBOSE")) {
      std::string shapes;
      for (const auto& [n, t] : inputs) absl::StrAppend(&shapes, n, t.ShapeString(), " ");
      std::printf("%s: %s\n", what.c_str(), shapes.c_str());
    }
    std::vector<std::string> bits;
    for (const auto& [name, t] : out) bits.push_back(Bits(t));
    const std::string key = Key(inputs);
    auto [it, fresh] = seen_.emplace(key, std::pair{bits, what});
    if (fresh) {
      keys_.push_back(inputs);
    } else {
      ++repeats_;
      EXPECT_TRUE(it->second.first == bits)
          << what << ": " << Diff(it->second.first, bits) << " from the earlier run of "
          << it->second.second << " on the same input";
    }
  }

  const Case& RandomCase(const Model& m) {
    return m.cases[std::uniform_int_distribution<size_t>(0, m.cases.size() - 1)(rng_)];
  }

  void DoStep(Step step, int i);
  void RunOtherModel(int i);
  void RunConcurrently(int i);

  const Model* model_ = nullptr;
  std::mt19937_64 rng_;
  std::unique_ptr<VirtualMachine> vm_, vm2_;
  std::map<std::string, std::pair<std::vector<std::string>, std::string>> seen_;
  std::vector<NamedTensors> keys_;
  int repeats_ = 0;
  int threads_ = 1;  // the first VM's
  std::map<std::string, std::unique_ptr<VirtualMachine>> others_;
};

void HistoryTest::RunOtherModel(int i) {
  const std::vector<std::string> names = ModelNames();
  std::vector<std::string> others;
  for (const std::string& n : names) {
    if (n != model_->source.name) others.push_back(n);
  }
  ASSERT_FALSE(others.empty());
  const std::string name =
      others[std::uniform_int_distribution<size_t>(0, others.size() - 1)(rng_)];
  const Model& other = GetModel(name, std::get<1>(GetParam()));
  ASSERT_NE(other.exe, nullptr) << name;
  std::unique_ptr<VirtualMachine>& vm = others_[name];
  if (vm == nullptr) vm = *VirtualMachine::Create(other.exe);
  const Case& c = RandomCase(other);
  absl::StatusOr<NamedTensors> out = RunOnce(*vm, c.inputs);
  ASSERT_TRUE(out.ok()) << "step " << i << ": " << name << "/" << c.name << ": " << out.status();
  SCOPED_TRACE(absl::StrCat("step ", i, ": other model ", name, "/", c.name));
  ExpectReference(c, *out);
}

// The second VM (2 threads, the shared pool) runs on another thread while the first runs: the
// pool is busy for one of them, whose kernels then run on one thread.
void HistoryTest::RunConcurrently(int i) {
  const NamedTensors a = Variant(*model_, RandomCase(*model_), rng_, false);
  const NamedTensors b = Variant(*model_, RandomCase(*model_), rng_, false);
  absl::StatusOr<NamedTensors> out_b = absl::UnknownError("not run");
  std::thread t([&] { out_b = RunOnce(*vm2_, b); });
  absl::StatusOr<NamedTensors> out_a = RunOnce(*vm_, a);
  t.join();
  ASSERT_TRUE(out_a.ok() && out_b.ok()) << out_a.status() << " " << out_b.status();
  Record(a, *out_a, absl::StrCat("step ", i, " (concurrent, first VM)"));
  Record(b, *out_b, absl::StrCat("step ", i, " (concurrent, second VM)"));
}

void HistoryTest::DoStep(Step step, int i) {
  const std::string what = absl::StrCat("step ", i);
  switch (step) {
    case Step::kCase: {
      const Case& c = RandomCase(*model_);
      absl::StatusOr<NamedTensors> out = RunOnce(*vm_, c.inputs);
      ASSERT_TRUE(out.ok()) << what << ": " << c.name << ": " << out.status();
      SCOPED_TRACE(absl::StrCat(what, ": ", c.name));
      ExpectReference(c, *out);
      Record(c.inputs, *out, what);
      return;
    }
    case Step::kVariant:
      return RunAndCheck(*vm_, Variant(*model_, RandomCase(*model_), rng_, false),
                         absl::StrCat(what, " (", threads_, " threads)"));
    case Step::kRepeat:  // an input run before, on whichever thread count the VM has now
      return RunAndCheck(*vm_,
                         keys_[std::uniform_int_distribution<size_t>(0, keys_.size() - 1)(rng_)],
                         absl::StrCat(what, " (repeat, ", threads_, " threads)"));
    case Step::kThreads: {
      const int n = std::uniform_int_distribution<int>(1, 2)(rng_);
      ASSERT_TRUE(vm_->set_num_threads(n).ok());
      threads_ = n;
      return RunAndCheck(*vm_, Variant(*model_, RandomCase(*model_), rng_, false),
                         absl::StrCat(what, " (", n, " threads)"));
    }
    case Step::kOtherModel:
      return RunOtherModel(i);
    case Step::kSecondVm:
      return RunAndCheck(*vm2_, Variant(*model_, RandomCase(*model_), rng_, false),
                         absl::StrCat(what, " (second VM)"));
    case Step::kConcurrent:
      return RunConcurrently(i);
  }
}

TEST_P(HistoryTest, TheFirstInputAgainGivesTheSameBits) {
  const Case& first = model_->cases.front();
  absl::StatusOr<NamedTensors> out = RunOnce(*vm_, first.inputs);
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectReference(first, *out);
  std::vector<std::string> first_bits;
  for (const auto& [name, t] : *out) first_bits.push_back(Bits(t));
  Record(first.inputs, *out, "first run");

  // Every kind of step three times, in a seeded random order: 21 runs or more.
  std::vector<Step> steps;
  for (Step s : {Step::kCase, Step::kVariant, Step::kRepeat, Step::kThreads, Step::kOtherModel,
                 Step::kSecondVm, Step::kConcurrent}) {
    steps.insert(steps.end(), 3, s);
  }
  std::shuffle(steps.begin(), steps.end(), rng_);
  for (size_t i = 0; i < steps.size() && !HasFatalFailure(); ++i) DoStep(steps[i], i);
  ASSERT_FALSE(HasFatalFailure());

  // A larger input than the first, so the pool holds bigger dirty blocks, then the first input
  // on the first thread count.
  const Case* big = &model_->cases.front();
  for (const Case& c : model_->cases) {
    if (Elements(c.inputs) > Elements(big->inputs)) big = &c;
  }
  NamedTensors large = Variant(*model_, *big, rng_, true);
  if (Elements(large) <= Elements(first.inputs))  // a fixed batch: a longer input
    large = Variant(*model_, *big, rng_, true, 2);
  ASSERT_GT(Elements(large), Elements(first.inputs));
  ASSERT_TRUE(vm_->set_num_threads(1).ok());
  threads_ = 1;
  RunAndCheck(*vm_, large, "the larger input");
  out = RunOnce(*vm_, first.inputs);
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<std::string> last_bits;
  for (const auto& [name, t] : *out) last_bits.push_back(Bits(t));
  EXPECT_TRUE(last_bits == first_bits) << "the first input again: " << Diff(first_bits, last_bits);
  ExpectReference(first, *out);
  // Inputs run twice or more: at least the repeats and the final run.
  EXPECT_GE(repeats_, 3);
  std::printf("%s: %zu runs, %zu distinct inputs, %d repeated\n", model_->source.name.c_str(),
              steps.size() + 3, seen_.size(), repeats_);
}

INSTANTIATE_TEST_SUITE_P(Models, HistoryTest,
                         ::testing::Combine(::testing::ValuesIn(ModelNames()), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<HistoryTest::ParamType>& info) {
                           return absl::StrCat(std::get<0>(info.param),
                                               std::get<1>(info.param) ? "_bounded" : "");
                         });

// The enumeration found the models of both folders (the test runs from the source root).
TEST(HistoryModelsTest, BothFoldersAreEnumerated) {
  const std::vector<ModelSource> models = DiscoverModels();
  int lm = 0, tools = 0;
  for (const ModelSource& m : models) (m.prefixed ? lm : tools)++;
  EXPECT_GE(tools, 10);
  EXPECT_GE(lm, 1);
}

}  // namespace
}  // namespace dynvm
