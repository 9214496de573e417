// A profiled decode of a real exported model: the exported LSTM decoder (lstm_scatter) is
// imported, compiled and run with a Profiler; its Chrome trace must be valid JSON with the
// expected structure: kernel spans named by op (LSTM, MatMul or Gemm, ArgMax ...) with shapes,
// one iteration span per generated token, counter events for the pool's bytes in use, and
// spans nested inside their parents. The trace is parsed by vm/trace_testing.h's own parser.
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "tools/npy/npy.h"
#include "vm/executable.h"
#include "vm/profiler.h"
#include "vm/trace_testing.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

namespace fs = std::filesystem;

class DecodeTraceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeTraceTest, TraceOfTheDecodeHasTheExpectedSpans) {
  const fs::path dir = fs::path("tools/models/lstm_scatter") / GetParam();
  absl::StatusOr<std::unique_ptr<compiler::Module>> module =
      compiler::onnx::ImportOnnxFile("tools/models/lstm_scatter/model.onnx");
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(**module, {});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  absl::StatusOr<std::shared_ptr<const Executable>> exe =
      Executable::LoadFromBytes(compiled->bytes);
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  for (const std::string input : {"prompt", "max_new_tokens"}) {
    absl::StatusOr<Tensor> t = npy::LoadNpy((dir / ("input_" + input + ".npy")).string());
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE((*vm)->SetInput(input, *t).ok());
  }
  Profiler prof;
  RunOptions run;
  run.profiler = &prof;
  absl::Status s = (*vm)->Run(run);
  ASSERT_TRUE(s.ok()) << s;

  // Profiling changes nothing: the tokens are PyTorch's.
  absl::StatusOr<Tensor> tokens = (*vm)->GetOutput("tokens");
  absl::StatusOr<Tensor> want = npy::LoadNpy((dir / "output_tokens.npy").string());
  ASSERT_TRUE(tokens.ok() && want.ok());
  EXPECT_EQ(testing::ToInts(*tokens), testing::ToInts(*want));
  const int64_t generated = want->dim(1);

  const std::string path =
      (fs::path(::testing::TempDir()) / ("decode_trace_" + GetParam() + ".json")).string();
  ASSERT_TRUE(prof.WriteChromeTrace(path).ok());
  absl::StatusOr<std::string> text = [&]() -> absl::StatusOr<std::string> {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return absl::NotFoundError(path);
    std::string out;
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    std::fclose(f);
    return out;
  }();
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<testing::Json> json = testing::JsonParser::Parse(*text);
  ASSERT_TRUE(json.ok()) << json.status();
  absl::StatusOr<testing::TraceSummary> trace = testing::CheckTrace(*json);  // includes nesting
  ASSERT_TRUE(trace.ok()) << trace.status();

  std::map<std::string, int> kernels_by_op;
  std::map<std::string, int> iterations_by_loop;
  int runs = 0;
  for (const testing::TraceSpan& span : trace->spans) {
    const testing::TraceSpan* parent = span.parent >= 0 ? &trace->spans[span.parent] : nullptr;
    if (span.cat == "run") {
      ++runs;
      EXPECT_EQ(parent, nullptr);
      continue;
    }
    ASSERT_NE(parent, nullptr) << span.cat << " " << span.name << " outside the run";
    if (span.cat == "kernel") {
      ++kernels_by_op[span.name];
      ASSERT_NE(span.args, nullptr);
      for (const char* key : {"kernel", "backend", "shapes", "site"}) {
        const testing::Json* v = span.args->Get(key);
        ASSERT_TRUE(v != nullptr && v->IsString()) << key;
      }
      EXPECT_NE(span.args->Get("shapes")->str.find("->"), std::string::npos);
      EXPECT_TRUE(parent->cat == "run" || parent->cat == "iteration" || parent->cat == "call")
          << parent->cat;
    } else if (span.cat == "iteration") {
      EXPECT_EQ(parent->cat, "loop");
      const testing::Json* loop = span.args != nullptr ? span.args->Get("loop") : nullptr;
      ASSERT_TRUE(loop != nullptr && loop->IsString());
      ++iterations_by_loop[loop->str];
    } else {
      EXPECT_TRUE(span.cat == "loop" || span.cat == "call") << span.cat;
    }
  }
  EXPECT_EQ(runs, 1);
  // The decode: one loop, one iteration per generated token (none when no token is asked for).
  if (generated == 0) {
    EXPECT_TRUE(iterations_by_loop.empty());
  } else {
    ASSERT_EQ(iterations_by_loop.size(), 1u);
    EXPECT_EQ(iterations_by_loop.begin()->second, generated);
  }
  // The prompt and every step run the LSTM; the output layer is a MatMul or Gemm.
  EXPECT_EQ(kernels_by_op["LSTM"], 1 + generated);
  EXPECT_GE(kernels_by_op["MatMul"] + kernels_by_op["Gemm"], 1 + generated);
  // Memory: samples of the pool's bytes in use, never empty, the first at the run's start.
  ASSERT_FALSE(trace->counters.empty());
  for (const auto& [name, bytes] : trace->counters) EXPECT_EQ(name, "pool bytes in use");
  double peak = 0;
  for (const auto& [name, bytes] : trace->counters) peak = std::max(peak, bytes);
  EXPECT_GT(peak, 0);
  EXPECT_LE(peak, static_cast<double>((*vm)->memory_stats().peak_bytes_in_use));
}

INSTANTIATE_TEST_SUITE_P(Cases, DecodeTraceTest, ::testing::Values("case0", "case1", "case2"));

}  // namespace
}  // namespace dynvm
