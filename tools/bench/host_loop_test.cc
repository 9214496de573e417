// The host-glue comparison's correctness half: one small LSTM LM (tools/bench/testdata, made
// by export_bench_models.py --small) as a decode model with the loop in the graph and as a
// single-step model driven by the C++ host loop. Both must give PyTorch's greedy tokens
// exactly. No PyTorch needed: the models and PyTorch's tokens are checked in.
#include <memory>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "tools/bench/decode.h"
#include "tools/npy/npy.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::bench {
namespace {

const std::string kDir = "tools/bench/testdata/";

std::shared_ptr<const Executable> Compile(const std::string& file) {
  absl::StatusOr<std::unique_ptr<compiler::Module>> module =
      compiler::onnx::ImportOnnxFile(kDir + file);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return nullptr;
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(**module);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<const Executable>> exe =
      Executable::LoadFromBytes(compiled->bytes);
  EXPECT_TRUE(exe.ok()) << exe.status();
  return exe.ok() ? *exe : nullptr;
}

std::unique_ptr<VirtualMachine> NewVm(const std::shared_ptr<const Executable>& exe,
                                      int threads = 1) {
  VmOptions options;
  options.num_threads = threads;
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe, options);
  EXPECT_TRUE(vm.ok()) << vm.status();
  return vm.ok() ? *std::move(vm) : nullptr;
}

class HostLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loop_ = Compile("loop.onnx");
    step_ = Compile("step.onnx");
    ASSERT_NE(loop_, nullptr);
    ASSERT_NE(step_, nullptr);
    absl::StatusOr<Tensor> prompt = npy::LoadNpy(kDir + "input_prompt.npy");
    absl::StatusOr<Tensor> n = npy::LoadNpy(kDir + "input_max_new_tokens.npy");
    absl::StatusOr<Tensor> tokens = npy::LoadNpy(kDir + "output_tokens.npy");
    ASSERT_TRUE(prompt.ok() && n.ok() && tokens.ok());
    request_.prompt = testing::ToInts(*prompt);
    request_.max_new_tokens = testing::ToInts(*n).at(0);
    want_ = testing::ToInts(*tokens);
    ASSERT_EQ(static_cast<int64_t>(want_.size()), request_.max_new_tokens);
  }

  std::shared_ptr<const Executable> loop_, step_;
  DecodeRequest request_;
  std::vector<int64_t> want_;  // PyTorch's greedy tokens
};

TEST_F(HostLoopTest, InVmLoopGivesPyTorchTokens) {
  std::unique_ptr<VirtualMachine> vm = NewVm(loop_);
  ASSERT_NE(vm, nullptr);
  absl::StatusOr<std::vector<int64_t>> tokens = DecodeInVm(*vm, request_);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(*tokens, want_);
  // Rebinding nothing, a second run gives the same tokens.
  tokens = RunLoop(*vm);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(*tokens, want_);
}

TEST_F(HostLoopTest, HostLoopGivesTheSameTokens) {
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    std::unique_ptr<VirtualMachine> vm = NewVm(step_, threads);
    ASSERT_NE(vm, nullptr);
    absl::StatusOr<HostLoopDecoder> decoder = HostLoopDecoder::Create(vm.get());
    ASSERT_TRUE(decoder.ok()) << decoder.status();
    for (int round = 0; round < 2; ++round) {  // the state is reset for every decode
      absl::StatusOr<std::vector<int64_t>> tokens = decoder->Decode(request_);
      ASSERT_TRUE(tokens.ok()) << tokens.status();
      EXPECT_EQ(*tokens, want_);
    }
  }
}

TEST_F(HostLoopTest, HostLoopStopsAfterTheEndToken) {
  // The first token that differs from the first one: the decode stops right after it.
  size_t at = 1;
  while (at < want_.size() && want_[at] == want_[0]) ++at;
  ASSERT_LT(at, want_.size()) << "the reference tokens are all the same";
  DecodeRequest request = request_;
  request.stop_token = want_[at];
  std::unique_ptr<VirtualMachine> vm = NewVm(step_);
  ASSERT_NE(vm, nullptr);
  absl::StatusOr<HostLoopDecoder> decoder = HostLoopDecoder::Create(vm.get());
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  absl::StatusOr<std::vector<int64_t>> tokens = decoder->Decode(request);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(*tokens, std::vector<int64_t>(want_.begin(), want_.begin() + at + 1));
}

TEST_F(HostLoopTest, RejectsTheWrongKindOfModel) {
  std::unique_ptr<VirtualMachine> loop_vm = NewVm(loop_);
  ASSERT_NE(loop_vm, nullptr);
  absl::StatusOr<HostLoopDecoder> decoder = HostLoopDecoder::Create(loop_vm.get());
  EXPECT_EQ(decoder.status().code(), absl::StatusCode::kInvalidArgument) << decoder.status();
  std::unique_ptr<VirtualMachine> step_vm = NewVm(step_);
  ASSERT_NE(step_vm, nullptr);
  EXPECT_FALSE(DecodeInVm(*step_vm, request_).ok());
  DecodeRequest with_stop = request_;
  with_stop.stop_token = 3;  // the LSTM loop model has no stop_token input
  EXPECT_EQ(DecodeInVm(*loop_vm, with_stop).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dynvm::bench
