// Allocation failures and memory limits on a real model: the exported LSTM decoder
// (tools/models/lstm_scatter: embedding, LSTM cell, output layer, argmax and a ScatterND into
// the token buffer, all inside the ONNX graph's decode loop), compiled here from its ONNX file.
//
// Fault injection: a fresh VM's first run makes every allocation the model can make (inputs
// are bound before; the first run also allocates the per-site kernel workspaces, which is where
// oneDNN's scratchpads come from). For each of those allocations in turn (all of them: the
// test fails if there are more than 500), a fresh VM fails exactly that one: the run must return
// ResourceExhausted, and the same VM must then produce PyTorch's tokens (the checked-in case0) and
// hold exactly the pool bytes of a VM that never failed. Under ASan, LeakSanitizer checks at exit
// that nothing leaked in the system allocator either.
//
// Memory limits: a limit lower than the model needs gives ResourceExhausted naming the limit,
// on every run, never a crash; a limit of what a run reserves is enough.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/strings.h"
#include "kernels/testing.h"
#include "tools/npy/npy.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"
#include "vm/vm_testing.h"

namespace dynvm {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kModel = "tools/models/lstm_scatter";
constexpr int64_t kMaxSites = 500;

struct Case {
  Tensor prompt, max_new_tokens;
  std::vector<int64_t> want_tokens;  // PyTorch's
};

absl::StatusOr<Case> LoadCase() {
  const fs::path dir = kModel / "case0";
  Case c;
  absl::StatusOr<Tensor> t = npy::LoadNpy((dir / "input_prompt.npy").string());
  if (!t.ok()) return t.status();
  c.prompt = *std::move(t);
  t = npy::LoadNpy((dir / "input_max_new_tokens.npy").string());
  if (!t.ok()) return t.status();
  c.max_new_tokens = *std::move(t);
  t = npy::LoadNpy((dir / "output_tokens.npy").string());
  if (!t.ok()) return t.status();
  c.want_tokens = testing::ToInts(*t);
  return c;
}

// The model compiled once, loaded with each backend policy.
absl::StatusOr<std::shared_ptr<const Executable>> LoadModel(const BackendPolicy& backends) {
  static const absl::StatusOr<std::string>* const bytes = [] {
    absl::StatusOr<std::unique_ptr<compiler::Module>> module =
        compiler::onnx::ImportOnnxFile((kModel / "model.onnx").string());
    if (!module.ok()) return new absl::StatusOr<std::string>(module.status());
    absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(**module);
    if (!compiled.ok()) return new absl::StatusOr<std::string>(compiled.status());
    return new absl::StatusOr<std::string>(std::move(compiled->bytes));
  }();
  if (!bytes->ok()) return bytes->status();
  LoadOptions options;
  options.backends = backends;
  return Executable::LoadFromBytes(*(*bytes), options);
}

absl::StatusOr<std::unique_ptr<VirtualMachine>> BoundVm(
    const std::shared_ptr<const Executable>& exe, const Case& c, const VmOptions& options = {}) {
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<VirtualMachine> vm, VirtualMachine::Create(exe, options));
  DYNVM_RETURN_IF_ERROR((vm)->SetInput("prompt", c.prompt));
  DYNVM_RETURN_IF_ERROR((vm)->SetInput("max_new_tokens", c.max_new_tokens));
  return vm;
}

std::vector<int64_t> Tokens(const VirtualMachine& vm) {
  absl::StatusOr<Tensor> t = vm.GetOutput("tokens");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? testing::ToInts(*t) : std::vector<int64_t>{};
}

struct Param {
  const char* name;
  BackendPolicy backends;
};

class ModelFaultTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (!fs::exists(kModel / "model.onnx")) GTEST_SKIP() << "no " << kModel;
    absl::StatusOr<Case> c = LoadCase();
    ASSERT_TRUE(c.ok()) << c.status();
    case_ = *std::move(c);
    ASSERT_EQ(case_.want_tokens.size(), 24u);
    absl::StatusOr<std::shared_ptr<const Executable>> exe = LoadModel(GetParam().backends);
    ASSERT_TRUE(exe.ok()) << exe.status();
    exe_ = *std::move(exe);
  }

  Case case_;
  std::shared_ptr<const Executable> exe_;
};

TEST_P(ModelFaultTest, FailureAtEveryAllocationSiteThenTheSameVmRuns) {
  // A VM that never fails: how many allocations its first and second runs make, and the
  // pool bytes it holds afterwards (inputs, workspaces, the last run's outputs).
  absl::StatusOr<std::unique_ptr<VirtualMachine>> clean = BoundVm(exe_, case_);
  ASSERT_TRUE(clean.ok()) << clean.status();
  const int64_t before = (*clean)->memory_stats().allocs;
  ASSERT_TRUE((*clean)->Run().ok());
  ASSERT_EQ(Tokens(**clean), case_.want_tokens);
  const int64_t first_run = (*clean)->memory_stats().allocs - before;
  ASSERT_TRUE((*clean)->Run().ok());
  ASSERT_EQ(Tokens(**clean), case_.want_tokens);
  const int64_t warm_run = (*clean)->memory_stats().allocs - before - first_run;
  const int64_t in_use = (*clean)->memory_stats().bytes_in_use;
  std::printf("%s: first run %lld allocations, warm run %lld, %lld bytes in use after\n",
              GetParam().name, static_cast<long long>(first_run), static_cast<long long>(warm_run),
              static_cast<long long>(in_use));
  // Every decode step allocates (kernel outputs, the growing token buffer), so the sites are
  // many more than the model's few dozen instructions.
  ASSERT_GT(first_run, 24);
  ASSERT_GE(first_run, warm_run);
  std::string dnnl_kernels;
  for (int k = 0; k < exe_->num_kernels(); ++k) {
    const std::string name = exe_->kernel(k).name();
    if (name.find(".dnnl") != std::string::npos) absl::StrAppend(&dnnl_kernels, " ", name);
  }
  std::printf("%s: oneDNN kernels:%s\n", GetParam().name, dnnl_kernels.c_str());
#ifdef DYNVM_WITH_DNNL
  // With oneDNN, its kernels serve the model, and the first run also allocates their
  // scratchpads (per-site workspaces from the VM's pool): those sites are among the failed.
  if (GetParam().backends.allowed.empty()) {
    EXPECT_FALSE(dnnl_kernels.empty());
    EXPECT_GT(first_run, warm_run);
  }
#endif

  // Every site is failed in turn: a model with more sites than kMaxSites would make this test
  // slow, so that is an error here, not a silent cut.
  ASSERT_LE(first_run, kMaxSites) << "more allocation sites than this test fails in turn";
  for (int64_t n = 1; n <= first_run; ++n) {
    SCOPED_TRACE(absl::StrCat("failing allocation ", n, " of ", first_run));
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = BoundVm(exe_, case_);
    ASSERT_TRUE(vm.ok()) << vm.status();
    testing::FailNthAllocation(**vm, n);
    const absl::Status s = (*vm)->Run();
    ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(s.message(), HasSubstr("injected allocation failure"));
    EXPECT_THAT(s.message(), HasSubstr("function 'main' pc "));
    EXPECT_EQ((*vm)->memory_stats().failed_allocs, 1);
    EXPECT_EQ((*vm)->GetOutputs().status().code(), absl::StatusCode::kFailedPrecondition);
    // The same VM, with no fault armed (the injected one fired), runs correctly and holds no
    // more pool memory than the VM that never failed: nothing of the failed run is left.
    const absl::Status again = (*vm)->Run();
    ASSERT_TRUE(again.ok()) << again;
    EXPECT_EQ(Tokens(**vm), case_.want_tokens);
    EXPECT_EQ((*vm)->memory_stats().bytes_in_use, in_use);
    EXPECT_EQ((*vm)->memory_stats().failed_allocs, 1);
  }

  // A fault armed past the last allocation of a run does not fire in it.
  testing::FailNthAllocation(**clean, warm_run + 1);
  ASSERT_TRUE((*clean)->Run().ok());
  EXPECT_EQ(Tokens(**clean), case_.want_tokens);
  EXPECT_EQ((*clean)->Run().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE((*clean)->Run().ok());
  EXPECT_EQ(Tokens(**clean), case_.want_tokens);
}

// A string model (docs/strings.md): StringNormalizer, Gather, Concat and Cast each allocate a
// string tensor (table and bytes in one pool block). Failing each allocation in turn gives
// ResourceExhausted, and the same VM then runs to the right strings holding exactly the pool
// bytes of a VM that never failed: no string bytes are left behind.
std::vector<std::string> StringsOf(const Tensor& t) {
  std::vector<std::string> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.emplace_back(StringAt(t, i));
  return v;
}

TEST(StringModelFaultTest, FailureAtEveryAllocationThenTheSameVmRuns) {
  compiler::Module m;
  compiler::GraphBuilder b(m.AddFunction("main"));
  compiler::Value* x = b.Input("x", DType::kString, {"n"});
  compiler::Value* f = b.Input("f", DType::kF32, {"k"});
  compiler::Value* up =
      b.Op("StringNormalizer", {x}, {{"case_change_action", compiler::AttrString("UPPER")}});
  compiler::Value* g = b.Op("Gather", {up, b.VectorI64({0, -1})}, {{"axis", compiler::AttrInt(0)}});
  compiler::Value* c = b.Op("Cast", {f}, {{"to", compiler::AttrInt(8)}});
  b.Output("y", b.Op("Concat", {up, g, c}, {{"axis", compiler::AttrInt(0)}}));
  absl::StatusOr<compiler::CompileResult> r = compiler::Compile(m);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(r->bytes);
  ASSERT_TRUE(exe.ok()) << exe.status();
  const std::vector<std::string> want = {"A", "CAF\xc3\xa9", "A", "CAF\xc3\xa9", "0.25", "-8"};
  auto bound = [&]() -> absl::StatusOr<std::unique_ptr<VirtualMachine>> {
    DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<VirtualMachine> vm, VirtualMachine::Create(*exe));
    DYNVM_ASSIGN_OR_RETURN(Tensor xs, StringTensor({2}, {"a", "caf\xc3\xa9"}));
    DYNVM_RETURN_IF_ERROR(vm->SetInput("x", xs));
    DYNVM_RETURN_IF_ERROR(vm->SetInput("f", testing::F32({2}, {0.25f, -8.0f})));
    return vm;
  };
  absl::StatusOr<std::unique_ptr<VirtualMachine>> clean = bound();
  ASSERT_TRUE(clean.ok()) << clean.status();
  const int64_t before = (*clean)->memory_stats().allocs;
  ASSERT_TRUE((*clean)->Run().ok());
  const int64_t first_run = (*clean)->memory_stats().allocs - before;
  ASSERT_TRUE((*clean)->Run().ok());
  ASSERT_EQ(StringsOf(*(*clean)->GetOutput(0)), want);
  const int64_t in_use = (*clean)->memory_stats().bytes_in_use;
  ASSERT_GE(first_run, 4);  // at least the four string outputs
  for (int64_t n = 1; n <= first_run; ++n) {
    SCOPED_TRACE(absl::StrCat("failing allocation ", n, " of ", first_run));
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = bound();
    ASSERT_TRUE(vm.ok()) << vm.status();
    testing::FailNthAllocation(**vm, n);
    const absl::Status s = (*vm)->Run();
    ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    const absl::Status again = (*vm)->Run();
    ASSERT_TRUE(again.ok()) << again;
    EXPECT_EQ(StringsOf(*(*vm)->GetOutput(0)), want);
    EXPECT_EQ((*vm)->memory_stats().bytes_in_use, in_use);
  }
}

TEST_P(ModelFaultTest, MemoryLimitBelowWhatTheModelNeeds) {
  absl::StatusOr<std::unique_ptr<VirtualMachine>> clean = BoundVm(exe_, case_);
  ASSERT_TRUE(clean.ok()) << clean.status();
  ASSERT_TRUE((*clean)->Run().ok());
  const AllocatorStats stats = (*clean)->memory_stats();
  const int64_t peak = stats.peak_bytes_in_use;
  const int64_t reserved = stats.bytes_reserved;
  std::printf("%s: peak %lld bytes in use, %lld reserved\n", GetParam().name,
              static_cast<long long>(peak), static_cast<long long>(reserved));
  ASSERT_GT(peak, 0);

  // Limits from a sixteenth of the peak up to what a run reserves: below the peak a run cannot
  // succeed; at any limit it either succeeds with PyTorch's tokens or reports the limit.
  int refused = 0;
  for (int step = 1; step <= 16; ++step) {
    const int64_t limit = step < 16 ? peak * step / 16 : reserved;
    SCOPED_TRACE(absl::StrCat("memory limit ", limit));
    VmOptions options;
    options.memory_limit = limit;
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe_, options);
    ASSERT_TRUE(vm.ok()) << vm.status();
    // Binding copies the inputs into the pool: that may already be over the limit.
    absl::Status s = (*vm)->SetInput("prompt", case_.prompt);
    if (s.ok()) s = (*vm)->SetInput("max_new_tokens", case_.max_new_tokens);
    if (s.ok()) s = (*vm)->Run();
    if (limit < peak) {
      ASSERT_FALSE(s.ok());
    }
    if (s.ok()) {
      EXPECT_EQ(Tokens(**vm), case_.want_tokens);
      continue;
    }
    ++refused;
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(s.message(), HasSubstr("memory limit of "));
    // Runs again with the same error (the VM stays usable), and never over the limit.
    if ((*vm)->SetInput("prompt", case_.prompt).ok() &&
        (*vm)->SetInput("max_new_tokens", case_.max_new_tokens).ok()) {
      EXPECT_EQ((*vm)->Run().code(), absl::StatusCode::kResourceExhausted);
      EXPECT_EQ((*vm)->GetOutputs().status().code(), absl::StatusCode::kFailedPrecondition);
    }
    EXPECT_LE((*vm)->memory_stats().bytes_reserved, limit);
  }
  EXPECT_EQ(refused, 15);

  // What a run reserved is enough, on every run.
  VmOptions options;
  options.memory_limit = reserved;
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = BoundVm(exe_, case_, options);
  ASSERT_TRUE(vm.ok()) << vm.status();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*vm)->Run().ok());
    EXPECT_EQ(Tokens(**vm), case_.want_tokens);
  }
}

// Hostile inputs to the real model: wrong name, dtype, rank or shape, and prompt tokens outside
// the embedding table (the Gather that embeds them reads them as indices). Each is an error
// naming what was wrong, never an out-of-bounds read; the VM then runs correctly.
TEST_P(ModelFaultTest, HostileInputsAreErrorsAndTheVmRunsAfter) {
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = BoundVm(exe_, case_);
  ASSERT_TRUE(vm.ok()) << vm.status();
  auto runs_correctly = [&] {
    ASSERT_TRUE((*vm)->SetInput("prompt", case_.prompt).ok());
    ASSERT_TRUE((*vm)->SetInput("max_new_tokens", case_.max_new_tokens).ok());
    const absl::Status s = (*vm)->Run();
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(Tokens(**vm), case_.want_tokens);
  };
  runs_correctly();

  absl::Status s = (*vm)->SetInput("tokens", case_.prompt);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  s = (*vm)->SetInput("prompt", testing::F32({1, 2}, {1, 2}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("must be i64"));

  struct Bad {
    Tensor prompt;
    absl::StatusCode code;
    const char* expect;
  };
  const int64_t kHuge = int64_t{1} << 40;
  const Bad bad[] = {
      {testing::I64({8}, {1, 2, 3, 4, 5, 6, 7, 8}), absl::StatusCode::kInvalidArgument,
       "must have rank 2"},
      {testing::I64({1, 1, 2}, {1, 2}), absl::StatusCode::kInvalidArgument, "must have rank 2"},
      {testing::I64({1, 3}, {1, kHuge, 2}), absl::StatusCode::kInvalidArgument, "Gather"},
      {testing::I64({1, 3}, {1, -kHuge, 2}), absl::StatusCode::kInvalidArgument, "Gather"},
      {testing::I64({2, 1}, {0, std::numeric_limits<int64_t>::min()}),
       absl::StatusCode::kInvalidArgument, "Gather"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.prompt.DebugString());
    ASSERT_TRUE((*vm)->SetInput("prompt", b.prompt).ok());
    s = (*vm)->Run();
    EXPECT_EQ(s.code(), b.code) << s;
    EXPECT_THAT(s.message(), HasSubstr(b.expect));
    EXPECT_EQ((*vm)->GetOutputs().status().code(), absl::StatusCode::kFailedPrecondition);
  }
  // max_new_tokens of the wrong rank.
  ASSERT_TRUE((*vm)->SetInput("prompt", case_.prompt).ok());
  ASSERT_TRUE((*vm)->SetInput("max_new_tokens", testing::I64({1}, {3})).ok());
  s = (*vm)->Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("max_new_tokens"));
  runs_correctly();
}

INSTANTIATE_TEST_SUITE_P(LstmDecoder, ModelFaultTest,
                         ::testing::Values(Param{"reference", BackendPolicy{{"reference"}}},
                                           Param{"preferred", BackendPolicy{}}),
                         [](const ::testing::TestParamInfo<Param>& p) {
                           return std::string(p.param.name);
                         });

}  // namespace
}  // namespace dynvm
