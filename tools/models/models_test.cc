// Real exported models (tools/models/export_decoders.py): PyTorch decoders whose greedy decode
// loop was scripted into the ONNX graph. Each is imported, compiled and run on the checked-in
// cases; tokens must equal PyTorch's exactly and logits to 1e-4. No PyTorch needed.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "tools/npy/npy.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = "tools/models";

std::vector<fs::path> Cases(const fs::path& model_dir) {
  std::vector<fs::path> out;
  for (const fs::directory_entry& e : fs::directory_iterator(model_dir)) {
    if (e.is_directory() && absl::StartsWith(e.path().filename().string(), "case"))
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void RunModel(const std::string& name, const compiler::CompileOptions& options) {
  const fs::path dir = kModels / name;
  absl::StatusOr<std::unique_ptr<compiler::Module>> module =
      compiler::onnx::ImportOnnxFile((dir / "model.onnx").string());
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(**module, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  absl::StatusOr<std::shared_ptr<const Executable>> exe =
      Executable::LoadFromBytes(compiled->bytes);
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  const std::vector<fs::path> cases = Cases(dir);
  ASSERT_FALSE(cases.empty()) << "no cases in " << dir;
  for (const fs::path& c : cases) {
    SCOPED_TRACE(c.string());
    for (const char* input : {"prompt", "max_new_tokens"}) {
      absl::StatusOr<Tensor> t = npy::LoadNpy((c / absl::StrCat("input_", input, ".npy")).string());
      ASSERT_TRUE(t.ok()) << t.status();
      ASSERT_TRUE((*vm)->SetInput(input, *t).ok());
    }
    absl::Status s = (*vm)->Run();
    ASSERT_TRUE(s.ok()) << s;
    absl::StatusOr<Tensor> tokens = (*vm)->GetOutput("tokens");
    absl::StatusOr<Tensor> logits = (*vm)->GetOutput("logits");
    ASSERT_TRUE(tokens.ok() && logits.ok());
    absl::StatusOr<Tensor> want_tokens = npy::LoadNpy((c / "output_tokens.npy").string());
    absl::StatusOr<Tensor> want_logits = npy::LoadNpy((c / "output_logits.npy").string());
    ASSERT_TRUE(want_tokens.ok() && want_logits.ok());
    ASSERT_EQ(tokens->dims(), want_tokens->dims()) << tokens->DebugString();
    EXPECT_EQ(testing::ToInts(*tokens), testing::ToInts(*want_tokens));
    ASSERT_EQ(logits->dims(), want_logits->dims()) << logits->DebugString();
    const std::vector<double> a = testing::ToDoubles(*logits), b = testing::ToDoubles(*want_logits);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << "logit " << i;
  }
}

class ExportedModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExportedModelTest, MatchesPyTorch) { RunModel(GetParam(), {}); }

TEST_P(ExportedModelTest, MatchesPyTorchWithBoundsAndNoOptimization) {
  compiler::CompileOptions bounded;
  bounded.bounds = {{"batch", 4}, {"prompt_len", 16}};
  RunModel(GetParam(), bounded);
  compiler::CompileOptions plain;
  plain.optimize = false;
  RunModel(GetParam(), plain);
}

// A bounded trip count bounds the dims the loop grows (the GPT's ids and activations, the
// LSTM's token list): everything is planned at its maximum, and the results do not change.
TEST_P(ExportedModelTest, MatchesPyTorchWithABoundedTripCount) {
  compiler::CompileOptions bounded;
  bounded.bounds = {{"batch", 3}, {"prompt_len", 8}, {"max_new_tokens", 24}};
  RunModel(GetParam(), bounded);
}

INSTANTIATE_TEST_SUITE_P(Decoders, ExportedModelTest,
                         ::testing::Values("lstm_scatter", "lstm_cat", "lstm_list", "gpt",
                                           "gpt_kv"));

}  // namespace
}  // namespace dynvm

namespace dynvm {
namespace {

// A GRU decode that stops at an end token (tools/bench/export_bench_models.py, copied with
// PyTorch's tokens): its hidden state is carried through an If inside the Loop. A planner that
// put that state in an arena slot the next iteration reuses decoded wrong tokens on some
// compiles (the slot order followed a hash map's), so compile it several times.
TEST(ExportedGruTest, StateCarriedThroughAnIfMatchesPyTorchOnEveryCompile) {
  const fs::path dir = kModels / "gru_stop";
  absl::StatusOr<Tensor> want = npy::LoadNpy((dir / "output_tokens.npy").string());
  ASSERT_TRUE(want.ok()) << want.status();
  std::string first_bytes;
  for (int attempt = 0; attempt < 4; ++attempt) {
    absl::StatusOr<std::unique_ptr<compiler::Module>> module =
        compiler::onnx::ImportOnnxFile((dir / "loop.onnx").string());
    ASSERT_TRUE(module.ok()) << module.status();
    absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(**module, {});
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    if (attempt == 0) first_bytes = compiled->bytes;
    EXPECT_TRUE(compiled->bytes == first_bytes)
        << "compile " << attempt << " differs from the first";
    absl::StatusOr<std::shared_ptr<const Executable>> exe =
        Executable::LoadFromBytes(compiled->bytes);
    ASSERT_TRUE(exe.ok()) << exe.status();
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
    ASSERT_TRUE(vm.ok()) << vm.status();
    for (const std::string input : {"prompt", "max_new_tokens", "stop_token"}) {
      absl::StatusOr<Tensor> t =
          npy::LoadNpy((dir / absl::StrCat("input_", input, ".npy")).string());
      ASSERT_TRUE(t.ok()) << t.status();
      ASSERT_TRUE((*vm)->SetInput(input, *t).ok());
    }
    absl::Status s = (*vm)->Run();
    ASSERT_TRUE(s.ok()) << s;
    absl::StatusOr<Tensor> tokens = (*vm)->GetOutput("tokens");
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    EXPECT_EQ(testing::ToInts(*tokens), testing::ToInts(*want)) << "compile " << attempt;
  }
}

}  // namespace
}  // namespace dynvm

namespace dynvm {
namespace {

// Decoding strategies over a tiny LSTM LM (tools/models/export_search.py), scripted and exported
// at opsets 14 and 17: beam search (4 beams, length penalty, per-beam end token; batch 1 and 2),
// top-k sampling and top-p sampling with a repetition penalty (randomness from a uniforms input),
// and top-k sampling drawn by dynvm::Sample (seeded Philox; PyTorch ran a Python Philox).
// Every integer output (tokens) equals PyTorch's exactly, every float output (scores, logits) to
// 1e-4, in one Run() each.
std::unique_ptr<VirtualMachine> CompileSearch(const std::string& name,
                                              const compiler::CompileOptions& options,
                                              compiler::CompileResult* result = nullptr) {
  absl::StatusOr<std::unique_ptr<compiler::Module>> module =
      compiler::onnx::ImportOnnxFile((kModels / name / "model.onnx").string());
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return nullptr;
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(**module, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<const Executable>> exe =
      Executable::LoadFromBytes(compiled->bytes);
  EXPECT_TRUE(exe.ok()) << exe.status();
  if (!exe.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  EXPECT_TRUE(vm.ok()) << vm.status();
  if (!vm.ok()) return nullptr;
  if (result != nullptr) *result = *std::move(compiled);
  return *std::move(vm);
}

// Binds every input_<name>.npy of `c`.
void BindCase(VirtualMachine& vm, const fs::path& c) {
  for (const fs::directory_entry& e : fs::directory_iterator(c)) {
    const std::string file = e.path().filename().string();
    if (!absl::StartsWith(file, "input_")) continue;
    absl::StatusOr<Tensor> t = npy::LoadNpy(e.path().string());
    ASSERT_TRUE(t.ok()) << t.status();
    const std::string name = file.substr(6, file.size() - 6 - 4);
    ASSERT_TRUE(vm.SetInput(name, *t).ok()) << name;
  }
}

void RunSearch(const std::string& name, const compiler::CompileOptions& options) {
  std::unique_ptr<VirtualMachine> vm = CompileSearch(name, options);
  ASSERT_NE(vm, nullptr);
  const std::vector<fs::path> cases = Cases(kModels / name);
  ASSERT_GE(cases.size(), 3u);
  for (const fs::path& c : cases) {
    SCOPED_TRACE(c.string());
    BindCase(*vm, c);
    const absl::Status s = vm->Run();
    ASSERT_TRUE(s.ok()) << s;
    int checked = 0;
    for (const fs::directory_entry& e : fs::directory_iterator(c)) {
      const std::string file = e.path().filename().string();
      if (!absl::StartsWith(file, "output_")) continue;
      const std::string out = file.substr(7, file.size() - 7 - 4);
      absl::StatusOr<Tensor> want = npy::LoadNpy(e.path().string());
      absl::StatusOr<Tensor> got = vm->GetOutput(out);
      ASSERT_TRUE(want.ok() && got.ok()) << out;
      ASSERT_EQ(got->dims(), want->dims()) << out << ": " << got->DebugString();
      ASSERT_EQ(got->dtype(), want->dtype()) << out;
      if (want->dtype() == DType::kF32) {
        const std::vector<double> a = testing::ToDoubles(*got), b = testing::ToDoubles(*want);
        for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << out << " " << i;
      } else {
        EXPECT_EQ(testing::ToInts(*got), testing::ToInts(*want)) << out;
      }
      ++checked;
    }
    EXPECT_GE(checked, 2);
  }
}

class SearchModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SearchModelTest, MatchesPyTorch) { RunSearch(GetParam(), {}); }

TEST_P(SearchModelTest, MatchesPyTorchWithBoundsAndNoOptimization) {
  compiler::CompileOptions bounded;
  bounded.bounds = {{"batch", 2}, {"prompt_len", 8}, {"max_new_tokens", 16}, {"steps", 16}};
  RunSearch(GetParam(), bounded);
  compiler::CompileOptions plain;
  plain.optimize = false;
  RunSearch(GetParam(), plain);
}

// Compiled with bounds, the search plans every value in the loop (no allocation site inside
// it), and once warm a run of 10 or 40 steps makes no system allocation after its first
// iteration (the VM's --stats counter after_first_iteration): none per step.
TEST_P(SearchModelTest, BoundedSearchAllocatesNothingPerStep) {
  compiler::CompileOptions bounded;
  bounded.bounds = {{"batch", 2}, {"prompt_len", 8}, {"max_new_tokens", 40}, {"steps", 40}};
  compiler::CompileResult result;
  std::unique_ptr<VirtualMachine> vm = CompileSearch(GetParam(), bounded, &result);
  ASSERT_NE(vm, nullptr);
  EXPECT_EQ(result.functions[0].loop_alloc_sites, 0) << result.ReportText();
  const fs::path c = kModels / GetParam() / "case1";  // batch 2
  BindCase(*vm, c);
  // The step count is an input (beam search, seeded sampling) or the uniforms' length.
  const bool counted = fs::exists(c / "input_max_new_tokens.npy");
  auto after_first = [&](int64_t steps) -> int64_t {
    if (counted) {
      EXPECT_TRUE(vm->SetInput("max_new_tokens", Tensor::ScalarI64(steps)).ok());
    } else {
      Tensor u = *Tensor::Empty(DType::kF32, {2, steps});
      for (int64_t i = 0; i < u.numel(); ++i) u.data<float>()[i] = 0.37f;
      EXPECT_TRUE(vm->SetInput("uniforms", u).ok());
    }
    const absl::Status s = vm->Run();
    EXPECT_TRUE(s.ok()) << s;
    const RunMemoryStats mem = vm->last_run_memory();
    EXPECT_TRUE(mem.first_iteration_ended);
    return mem.system_allocs_after_first_iteration;
  };
  // Warm-up runs of both lengths fill the pool (the outputs' sizes differ with the length).
  for (int64_t steps : {40, 10}) after_first(steps);
  const int64_t short_run = after_first(10);
  const int64_t long_run = after_first(40);
  std::printf("%s: system allocations after the first iteration: %lld (10 steps), %lld (40)\n",
              GetParam().c_str(), static_cast<long long>(short_run),
              static_cast<long long>(long_run));
  EXPECT_EQ(long_run, 0);
  EXPECT_EQ(short_run, 0);
}

INSTANTIATE_TEST_SUITE_P(Searches, SearchModelTest,
                         ::testing::Values("beam14", "beam17", "topk14", "topk17", "topp14",
                                           "topp17", "topk_sample14", "topk_sample17"));

}  // namespace
}  // namespace dynvm
