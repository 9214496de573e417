// The demo's character LSTM LM (tools/lm/charlm.onnx: prompt loop, output layer, dynvm.Sample
// and early stop inside one ONNX Loop), compiled and run in one Run() call per case.
// Oracles, written by export_charlm.py (no PyTorch needed here):
//   greedy_b1, greedy_b3: PyTorch's greedy decode, token for token;
//   sampled_b2, stop_b1:  PyTorch's logits sampled by the script's own NumPy implementation of
//                         the documented Philox generator (docs/sampling.md).
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "tools/npy/npy.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

namespace fs = std::filesystem;

const fs::path kData = "tools/lm/testdata";
constexpr const char* kInputs[] = {"prompt", "max_new_tokens", "temperature", "seed", "stop_token"};

class CharLmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<compiler::Module>> module =
        compiler::onnx::ImportOnnxFile("tools/lm/charlm.onnx");
    ASSERT_TRUE(module.ok()) << module.status();
    compiler::CompileOptions options;
    options.bounds = {{"batch", 4}, {"prompt_len", 64}};
    absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(**module, options);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    absl::StatusOr<std::shared_ptr<const Executable>> exe =
        Executable::LoadFromBytes(compiled->bytes);
    ASSERT_TRUE(exe.ok()) << exe.status();
    exe_ = new std::shared_ptr<const Executable>(*exe);
  }
  static void TearDownTestSuite() {
    delete exe_;
    exe_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(exe_, nullptr);
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe_);
    ASSERT_TRUE(vm.ok()) << vm.status();
    vm_ = *std::move(vm);
  }

  // Binds the case's inputs; `seed` >= 0 overrides the stored seed.
  void Bind(const std::string& name, int64_t seed = -1) {
    for (const char* input : kInputs) {
      absl::StatusOr<Tensor> t =
          npy::LoadNpy((kData / absl::StrCat(name, "_", input, ".npy")).string());
      ASSERT_TRUE(t.ok()) << t.status();
      if (seed >= 0 && std::string(input) == "seed") t = testing::I64({}, {seed});
      ASSERT_TRUE(vm_->SetInput(input, *t).ok()) << input;
    }
  }

  std::vector<int64_t> Generate(const RunOptions& options = {}) {
    absl::Status s = vm_->Run(options);
    EXPECT_TRUE(s.ok()) << s;
    absl::StatusOr<Tensor> tokens = vm_->GetOutput("tokens");
    EXPECT_TRUE(tokens.ok()) << tokens.status();
    if (!tokens.ok()) return {};
    last_dims_.assign(tokens->dims().begin(), tokens->dims().end());
    return testing::ToInts(*tokens);
  }

  std::vector<int64_t> Want(const std::string& name) {
    absl::StatusOr<Tensor> t = npy::LoadNpy((kData / absl::StrCat(name, "_tokens.npy")).string());
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return {};
    want_dims_.assign(t->dims().begin(), t->dims().end());
    return testing::ToInts(*t);
  }

  static std::shared_ptr<const Executable>* exe_;
  std::unique_ptr<VirtualMachine> vm_;
  std::vector<int64_t> last_dims_, want_dims_;
};

std::shared_ptr<const Executable>* CharLmTest::exe_ = nullptr;

TEST_F(CharLmTest, GreedyBatch1MatchesPyTorch) {
  Bind("greedy_b1");
  std::vector<int64_t> got = Generate();
  EXPECT_EQ(got, Want("greedy_b1"));
  EXPECT_EQ(last_dims_, want_dims_);
}

TEST_F(CharLmTest, GreedyBatch3MatchesPyTorch) {
  Bind("greedy_b3");
  std::vector<int64_t> got = Generate();
  EXPECT_EQ(got, Want("greedy_b3"));
  EXPECT_EQ(last_dims_, want_dims_);
}

TEST_F(CharLmTest, SampledMatchesTheDocumentedGenerator) {
  Bind("sampled_b2");
  std::vector<int64_t> got = Generate();
  EXPECT_EQ(got, Want("sampled_b2"));
  EXPECT_EQ(last_dims_, want_dims_);
}

TEST_F(CharLmTest, SameSeedSameTextOtherSeedOtherText) {
  Bind("sampled_b2");
  const std::vector<int64_t> first = Generate();
  const std::vector<int64_t> again = Generate();
  EXPECT_EQ(first, again);
  Bind("sampled_b2", /*seed=*/4321);
  const std::vector<int64_t> other = Generate();
  ASSERT_EQ(other.size(), first.size());
  EXPECT_NE(other, first);
}

TEST_F(CharLmTest, EarlyStopAtTheEndTokenGivesTheRightCount) {
  Bind("stop_b1");
  std::vector<int64_t> got = Generate();
  const std::vector<int64_t> want = Want("stop_b1");
  EXPECT_EQ(got, want);
  // The budget was 400; the run stopped at the first stop token (0), which it includes.
  ASSERT_EQ(last_dims_, (std::vector<int64_t>{1, 30}));
  EXPECT_EQ(got.back(), 0);
  for (size_t i = 0; i + 1 < got.size(); ++i)
    EXPECT_NE(got[i], 0) << "stop token before the end at " << i;
}

TEST_F(CharLmTest, TokensStreamOutAsTheyAreProduced) {
  Bind("greedy_b3");
  std::vector<int64_t> streamed;
  int calls = 0;
  RunOptions options;
  options.on_emit = [&](int stream, const Tensor& value) -> absl::Status {
    EXPECT_EQ(stream, 0);
    ++calls;
    for (int64_t t : testing::ToInts(value)) streamed.push_back(t);
    return absl::OkStatus();
  };
  std::vector<int64_t> got = Generate(options);
  const std::vector<int64_t> want = Want("greedy_b3");
  EXPECT_EQ(got, want);
  // One emit per generated step, each with one token per row: step-major order.
  ASSERT_EQ(want_dims_.size(), 2u);
  const int64_t batch = want_dims_[0], steps = want_dims_[1];
  EXPECT_EQ(calls, steps);
  ASSERT_EQ(static_cast<int64_t>(streamed.size()), batch * steps);
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t b = 0; b < batch; ++b) EXPECT_EQ(streamed[s * batch + b], want[b * steps + s]);
  }
}

TEST_F(CharLmTest, StoppingTheStreamStopsTheRunAndTheVmRunsAgain) {
  Bind("greedy_b1");
  int calls = 0;
  RunOptions options;
  options.on_emit = [&](int, const Tensor&) -> absl::Status {
    return ++calls == 5 ? absl::CancelledError("reader closed") : absl::OkStatus();
  };
  absl::Status s = vm_->Run(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr("reader closed"));
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(Generate(), Want("greedy_b1"));
}

}  // namespace
}  // namespace dynvm
