// The exported decoders (tools/models/export_decoders.py) compiled for the CUDA device
// (CompileOptions::device = kCUDA): the greedy tokens must equal PyTorch's, which the CPU run
// also matches (models_test.cc), and the logits agree to 1e-3. Skips with a message without a
// CUDA device.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "allocator/cuda_allocator.h"
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

class CudaModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaModelTest, TokensMatchTheCpu) {
  if (absl::Status s = CudaDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  const fs::path dir = fs::path("tools/models") / GetParam();
  absl::StatusOr<std::unique_ptr<compiler::Module>> module =
      compiler::onnx::ImportOnnxFile((dir / "model.onnx").string());
  ASSERT_TRUE(module.ok()) << module.status();
  compiler::CompileOptions options;
  options.device = Device::kCUDA;
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(**module, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  int on_device = 0;
  for (const compiler::KernelReport& k : compiled->kernels)
    on_device += absl::StrContains(k.chosen, ".cuda");
  EXPECT_GT(on_device, 0) << compiled->ReportText();
  absl::StatusOr<std::shared_ptr<const Executable>> exe =
      Executable::LoadFromBytes(compiled->bytes);
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  std::vector<fs::path> cases;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && absl::StartsWith(e.path().filename().string(), "case"))
      cases.push_back(e.path());
  }
  std::sort(cases.begin(), cases.end());
  ASSERT_FALSE(cases.empty());
  for (const fs::path& c : cases) {
    SCOPED_TRACE(c.string());
    for (const char* input : {"prompt", "max_new_tokens"}) {
      absl::StatusOr<Tensor> t = npy::LoadNpy((c / absl::StrCat("input_", input, ".npy")).string());
      ASSERT_TRUE(t.ok()) << t.status();
      ASSERT_TRUE((*vm)->SetInput(input, *t).ok());
    }
    const absl::Status s = (*vm)->Run();
    ASSERT_TRUE(s.ok()) << s;
    absl::StatusOr<Tensor> tokens = (*vm)->GetOutput("tokens");
    absl::StatusOr<Tensor> logits = (*vm)->GetOutput("logits");
    ASSERT_TRUE(tokens.ok() && logits.ok());
    ASSERT_EQ(tokens->device(), Device::kCPU);
    absl::StatusOr<Tensor> want_tokens = npy::LoadNpy((c / "output_tokens.npy").string());
    absl::StatusOr<Tensor> want_logits = npy::LoadNpy((c / "output_logits.npy").string());
    ASSERT_TRUE(want_tokens.ok() && want_logits.ok());
    EXPECT_EQ(testing::ToInts(*tokens), testing::ToInts(*want_tokens));
    const std::vector<double> a = testing::ToDoubles(*logits), b = testing::ToDoubles(*want_logits);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-3) << "logit " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Decoders, CudaModelTest,
                         ::testing::Values("lstm_scatter", "lstm_cat", "gpt"));

}  // namespace
}  // namespace dynvm
