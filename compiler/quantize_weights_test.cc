// vm-compile --quantize-weights (compiler/quantize_weights.h): random MatMul, Gemm, LSTM, GRU and
// RNN models of random sizes compiled in f32, int8 and bf16 give outputs close to the f32
// executable's; weights that would lose too much stay f32 and are reported; the threshold holds.
#include "compiler/quantize_weights.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler {
namespace {

Tensor Random(std::mt19937& rng, std::vector<int64_t> dims, float scale = 1.0f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

struct Model {
  std::unique_ptr<Module> module;
  std::vector<std::pair<std::string, Tensor>> inputs;
};

// y = MatMul(x, W); z = Gemm(x, V^T, c); an LSTM, GRU or RNN over s, of random sizes.
Model Build(uint32_t seed, const Tensor* w_override = nullptr) {
  std::mt19937 rng(seed);
  const int64_t m = 1 + rng() % 5;
  const int64_t k = w_override ? w_override->dim(0) : 3 + rng() % 70;
  const int64_t n = w_override ? w_override->dim(1) : 1 + rng() % 50;
  const int64_t seq = 1 + rng() % 4, batch = 1 + rng() % 3, in = 2 + rng() % 30, h = 1 + rng() % 20;
  const char* ops[] = {"LSTM", "GRU", "RNN"};
  const char* op = ops[seed % 3];
  const int64_t gates = seed % 3 == 0 ? 4 : seed % 3 == 1 ? 3 : 1;
  Model md;
  md.module = std::make_unique<Module>();
  GraphBuilder b(md.module->AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {m, k});
  Value* s = b.Input("s", DType::kF32, {seq, batch, in});
  b.Output("y", b.Op("MatMul",
                     {x, b.Constant(w_override ? *w_override : Random(rng, {k, n}), "W", true)}));
  b.Output("z", b.Op("Gemm",
                     {x, b.Constant(Random(rng, {n, k}), "V", true),
                      b.Constant(Random(rng, {n}), "c", true)},
                     {{"transB", AttrInt(1)}}));
  std::vector<Value*> r = b.Ops(op,
                                {s, b.Constant(Random(rng, {1, gates * h, in}), "RW", true),
                                 b.Constant(Random(rng, {1, gates * h, h}), "RR", true),
                                 b.Constant(Random(rng, {1, 2 * gates * h}), "RB", true)},
                                {{"hidden_size", AttrInt(h)}}, 2);
  b.Output("r", r[0]);
  md.inputs = {{"x", Random(rng, {m, k})}, {"s", Random(rng, {seq, batch, in})}};
  return md;
}

struct Outcome {
  CompileResult result;
  std::vector<Tensor> outputs;
};

Outcome CompileAndRunWith(Model md, const CompileOptions& o) {
  absl::StatusOr<CompileResult> r = Compile(*md.module, o);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(r->bytes);
  EXPECT_TRUE(exe.ok()) << exe.status();
  if (!exe.ok()) return {};
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  EXPECT_TRUE(vm.ok()) << vm.status();
  for (const auto& [name, t] : md.inputs) EXPECT_TRUE((*vm)->SetInput(name, t).ok());
  absl::Status s = (*vm)->Run();
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return {};
  return {*std::move(r), *(*vm)->GetOutputs()};
}

Outcome CompileAndRun(Model md, DType q, int64_t min_bytes = 0) {
  CompileOptions o;
  o.quantize_weights = q;
  o.quantize_min_bytes = min_bytes;
  return CompileAndRunWith(std::move(md), o);
}

double RelativeL2(const Tensor& got, const Tensor& want) {
  const std::vector<double> a = testing::ToDoubles(got), b = testing::ToDoubles(want);
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

int CountOp(const CompileResult& r, const std::string& op) {
  int n = 0;
  for (const KernelReport& k : r.kernels) n += k.op == op;
  return n;
}

TEST(QuantizeWeightsTest, RandomModelsStayCloseToF32) {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    const Outcome f32 = CompileAndRun(Build(seed), DType::kF32);
    ASSERT_EQ(f32.outputs.size(), 3u);
    for (DType q : {DType::kI8, DType::kBF16}) {
      const Outcome run = CompileAndRun(Build(seed), q);
      ASSERT_EQ(run.outputs.size(), 3u);
      // Per-channel int8 of uniform weights: ~0.5% relative error per product; bf16 ~0.1%.
      const double bound = q == DType::kI8 ? 0.02 : 0.005;
      for (size_t i = 0; i < 3; ++i) {
        ASSERT_EQ(run.outputs[i].dims(), f32.outputs[i].dims());
        const double e = RelativeL2(run.outputs[i], f32.outputs[i]);
        EXPECT_LE(e, bound) << "seed " << seed << " output " << i << " " << DTypeName(q);
        EXPECT_GT(e, 0.0) << "seed " << seed << " output " << i << ": not quantized?";
      }
      // Kernel-table entries (the two QMatMuls share one when their specs agree).
      EXPECT_GE(CountOp(run.result, "dynvm::QMatMul"), 1) << run.result.ReportText();
      EXPECT_EQ(CountOp(run.result, "MatMul") + CountOp(run.result, "Gemm"), 0);
      const char* ops[] = {"dynvm::QLSTM", "dynvm::QGRU", "dynvm::QRNN"};
      EXPECT_EQ(CountOp(run.result, ops[seed % 3]), 1) << run.result.ReportText();
      ASSERT_EQ(run.result.quantized_weights.size(), 4u);  // W, V, RW, RR
      for (const std::string& line : run.result.quantized_weights) {
        EXPECT_TRUE(absl::StrContains(line, q == DType::kI8 ? ": i8 " : ": bf16 ")) << line;
        EXPECT_EQ(absl::StrContains(line, "max scale"), q == DType::kI8) << line;
      }
    }
  }
}

TEST(QuantizeWeightsTest, ScalesSpanningMoreThan2To16StayF32AndAreReported) {
  std::mt19937 rng(3);
  Tensor w = Random(rng, {8, 5});  // [K, N]: output channel j is column j
  for (int64_t i = 0; i < 8; ++i) w.data<float>()[i * 5 + 2] *= 1e-6f;  // channel 2 tiny
  const Outcome f32 = CompileAndRun(Build(4, &w), DType::kF32);
  const Outcome q = CompileAndRun(Build(4, &w), DType::kI8);
  ASSERT_EQ(q.outputs.size(), 3u);
  std::string kept;
  for (const std::string& line : q.result.quantized_weights) {
    if (absl::StartsWith(line, "quantize W ")) kept = line;
  }
  EXPECT_TRUE(absl::StrContains(kept, "kept f32")) << kept;
  EXPECT_TRUE(absl::StrContains(kept, "more than 2^16")) << kept;
  EXPECT_EQ(CountOp(q.result, "MatMul"), 1);  // W's MatMul stayed f32
  EXPECT_EQ(RelativeL2(q.outputs[0], f32.outputs[0]), 0.0);
  // bf16 has no per-channel scale: the same weight is quantized.
  const Outcome b = CompileAndRun(Build(4, &w), DType::kBF16);
  EXPECT_EQ(CountOp(b.result, "MatMul"), 0);
}

TEST(QuantizeWeightsTest, NonFiniteWeightsStayF32) {
  std::mt19937 rng(5);
  Tensor w = Random(rng, {8, 5});
  w.data<float>()[7] = std::nanf("");
  const Outcome q = CompileAndRun(Build(7, &w), DType::kBF16);
  bool found = false;
  for (const std::string& line : q.result.quantized_weights) {
    found |= absl::StartsWith(line, "quantize W ") && absl::StrContains(line, "NaN or infinity");
  }
  EXPECT_TRUE(found) << q.result.ReportText();
  EXPECT_EQ(CountOp(q.result, "MatMul"), 1);
}

TEST(QuantizeWeightsTest, SmallWeightsStayBelowTheThreshold) {
  const Outcome q = CompileAndRun(Build(2), DType::kI8, int64_t{1} << 40);
  EXPECT_TRUE(q.result.quantized_weights.empty());
  EXPECT_EQ(CountOp(q.result, "dynvm::QMatMul"), 0);
  CompileOptions o;
  o.quantize_weights = DType::kI16;
  Model md = Build(2);
  absl::StatusOr<CompileResult> r = Compile(*md.module, o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "int8, int4 or bf16")) << r.status();
}

// y = x W (K x N) as int4 blocks: each output differs from the f32 product by at most
// sum_i |x[i]| times the largest rounding error of a weight, a block's scale (max |w| / 8
// symmetric, at most 2 max |w| / 15 with zero points; half a step, one step where the grid clamps).
// MatMul and Gemm become MatMulNBits on the oneDNN backend's kernel; LSTM/GRU/RNN stay f32. At
// accuracy_level 4 the activations' int8 rounding (half a step of max |x| / 127 per block) adds
// well under that bound's margin at these sizes.
TEST(QuantizeWeightsTest, Int4BlocksStayWithinTheirRoundingOfF32) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    const Outcome f32 = CompileAndRun(Build(seed), DType::kF32);
    ASSERT_EQ(f32.outputs.size(), 3u);
    for (int64_t block : {16, 32, 64, 128}) {
      for (int zp_level = 0; zp_level < 4; ++zp_level) {
        const bool zp = zp_level % 2 == 1;
        CompileOptions o;
        o.quantize_weights = DType::kU8;
        o.quantize_min_bytes = 0;
        o.quantize_block = block;
        o.quantize_zero_points = zp;
        o.quantize_accuracy_level = zp_level < 2 ? 0 : 4;
        Model md = Build(seed);
        const Tensor x = md.inputs[0].second;
        const Outcome run = CompileAndRunWith(std::move(md), o);
        ASSERT_EQ(run.outputs.size(), 3u);
        const std::vector<double> xs = testing::ToDoubles(x);
        const int64_t m = x.dim(0), k = x.dim(1);
        for (int out = 0; out < 2; ++out) {  // y (weights in [-1, 1]) and z
          const std::vector<double> got = testing::ToDoubles(run.outputs[out]);
          const std::vector<double> want = testing::ToDoubles(f32.outputs[out]);
          const int64_t n = run.outputs[out].dim(1);
          for (int64_t r = 0; r < m; ++r) {
            double xabs = 0;
            for (int64_t i = 0; i < k; ++i) xabs += std::fabs(xs[r * k + i]);
            const double bound = xabs * (zp ? 2.0 / 15 : 1.0 / 8) + 1e-5 * (1 + xabs);
            for (int64_t j = 0; j < n; ++j) {
              ASSERT_NEAR(got[r * n + j], want[r * n + j], bound)
                  << "seed " << seed << " block " << block << " zp " << zp << " accuracy_level "
                  << o.quantize_accuracy_level << " output " << out;
            }
          }
          EXPECT_GT(RelativeL2(run.outputs[out], f32.outputs[out]), 0.0) << "not quantized?";
        }
        EXPECT_EQ(RelativeL2(run.outputs[2], f32.outputs[2]), 0.0);  // the RNN stays f32
        EXPECT_EQ(CountOp(run.result, "MatMul") + CountOp(run.result, "Gemm"), 0);
        bool fast = false;
        for (const KernelReport& kr : run.result.kernels) {
          if (kr.op == "com.microsoft::MatMulNBits") {
            fast = absl::StrContains(kr.chosen, ".dnnl");
            EXPECT_TRUE(fast) << kr.chosen;
          }
        }
        EXPECT_TRUE(fast) << run.result.ReportText();
        ASSERT_EQ(run.result.quantized_weights.size(), 2u);  // W, V
        for (const std::string& line : run.result.quantized_weights) {
          EXPECT_TRUE(absl::StrContains(line, ": int4 ")) << line;
        }
      }
    }
  }
}

TEST(QuantizeWeightsTest, Int4BlockSizeMustBeAPowerOfTwoFrom16To256) {
  for (int64_t block : {0, 8, 48, 512}) {
    CompileOptions o;
    o.quantize_weights = DType::kU8;
    o.quantize_block = block;
    Model md = Build(2);
    absl::StatusOr<CompileResult> r = Compile(*md.module, o);
    ASSERT_FALSE(r.ok()) << block;
    EXPECT_TRUE(absl::StrContains(r.status().message(), "int4 block size")) << r.status();
  }
}

}  // namespace
}  // namespace dynvm::compiler
