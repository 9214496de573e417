// The exported decoders (tools/models) compiled with --quantize-weights int8 and bf16 (every
// MatMul/Gemm/LSTM weight, --quantize-min-bytes 0: these weights are small): one decode step's
// logits (the checked-in output_logits.npy, PyTorch's f32) within relative L2 error 3% (int8) and
// 1% (bf16). The f32 executable's error is printed beside them for scale.
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

double RelativeL2(const Tensor& got, const Tensor& want) {
  const std::vector<double> a = testing::ToDoubles(got), b = testing::ToDoubles(want);
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

// The largest relative L2 error of the final-step logits over the model's cases whose greedy
// tokens equal PyTorch's (so that the step compared saw the same history); `compared` counts them.
double WorstError(const std::string& name, DType q, int* compared, int* quantized) {
  const fs::path dir = fs::path("tools/models") / name;
  absl::StatusOr<std::unique_ptr<compiler::Module>> module =
      compiler::onnx::ImportOnnxFile((dir / "model.onnx").string());
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return INFINITY;
  compiler::CompileOptions options;
  options.quantize_weights = q;
  options.quantize_min_bytes = 0;
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(**module, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return INFINITY;
  *quantized = 0;
  for (const std::string& line : compiled->quantized_weights) {
    *quantized += !absl::StrContains(line, "kept f32");
  }
  absl::StatusOr<std::shared_ptr<const Executable>> exe =
      Executable::LoadFromBytes(compiled->bytes);
  EXPECT_TRUE(exe.ok()) << exe.status();
  if (!exe.ok()) return INFINITY;
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  EXPECT_TRUE(vm.ok()) << vm.status();
  if (!vm.ok()) return INFINITY;
  double worst = 0;
  *compared = 0;
  for (int c = 0; fs::exists(dir / absl::StrCat("case", c)); ++c) {
    const fs::path cd = dir / absl::StrCat("case", c);
    for (const char* input : {"prompt", "max_new_tokens"}) {
      absl::StatusOr<Tensor> t =
          npy::LoadNpy((cd / absl::StrCat("input_", input, ".npy")).string());
      EXPECT_TRUE(t.ok() && (*vm)->SetInput(input, *t).ok());
    }
    absl::Status s = (*vm)->Run();
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return INFINITY;
    absl::StatusOr<Tensor> tokens = (*vm)->GetOutput("tokens");
    absl::StatusOr<Tensor> logits = (*vm)->GetOutput("logits");
    absl::StatusOr<Tensor> want_tokens = npy::LoadNpy((cd / "output_tokens.npy").string());
    absl::StatusOr<Tensor> want_logits = npy::LoadNpy((cd / "output_logits.npy").string());
    EXPECT_TRUE(tokens.ok() && logits.ok() && want_tokens.ok() && want_logits.ok());
    if (testing::ToInts(*tokens) != testing::ToInts(*want_tokens)) continue;
    ++*compared;
    worst = std::max(worst, RelativeL2(*logits, *want_logits));
  }
  return worst;
}

class QuantizedModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizedModelTest, OneStepLogitsStayClose) {
  int compared = 0, quantized = 0;
  const double f32 = WorstError(GetParam(), DType::kF32, &compared, &quantized);
  for (DType q : {DType::kI8, DType::kBF16}) {
    const double e = WorstError(GetParam(), q, &compared, &quantized);
    std::printf(
        "%s %s: logits relative L2 error %.5f over %d cases (f32 executable: %.2g), "
        "%d weights quantized\n",
        GetParam().c_str(), std::string(DTypeName(q)).c_str(), e, compared, f32, quantized);
    EXPECT_GT(quantized, 0);
    EXPECT_GE(compared, 2) << "the quantized decode changed most cases' tokens";
    EXPECT_LE(e, q == DType::kI8 ? 0.03 : 0.01) << DTypeName(q);
  }
}

INSTANTIATE_TEST_SUITE_P(Decoders, QuantizedModelTest,
                         ::testing::Values("lstm_scatter", "lstm_cat", "lstm_list", "gpt",
                                           "gpt_kv"));

}  // namespace
}  // namespace dynvm
