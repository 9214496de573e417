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
                         ::testing::Values("lstm_scatter", "lstm_cat", "lstm_list", "gpt"));

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
