// Every non-reference backend's kernels against the reference kernels (kernel_tester.h), on
// random shapes: M=1, odd sizes, empty dims, broadcasting, strided views, several threads.
// Each case also checks that the backend, not a fallback, produced the kernel where it claims
// the op.
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/kernel_tester.h"
#include "kernels/registry.h"

namespace dynvm::testing {
namespace {

using Dims = std::vector<int64_t>;

std::vector<std::string> Backends() {
  std::vector<std::string> b;
#if defined(DYNVM_WITH_DNNL)
  b.push_back("dnnl");
#endif
  return b;
}

class BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  const std::string& backend() const { return GetParam(); }

  // Compares and checks that `backend()` created the kernel.
  void Check(KernelTester& t) {
    const absl::Status s = t.Compare(backend());
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(absl::StrContains(t.kernel_name(), absl::StrCat(".", backend())))
        << t.kernel_name();
  }
  // The backend may decline at create (Unimplemented); if it accepts, it must agree.
  void CheckOrDecline(KernelTester& t) {
    const absl::Status s = t.Compare(backend());
    if (absl::IsUnimplemented(s)) return;
    ASSERT_TRUE(s.ok()) << s;
  }
};

// ---- MatMul, Gemm ----

TEST_P(BackendTest, MatMulShapeClasses) {
  for (int64_t m : {1, 2, 7, 64}) {
    for (int64_t kn : {1, 3, 33, 130}) {
      KernelTester t("MatMul", "", static_cast<uint32_t>(m * 1000 + kn));
      t.Random(DType::kF32, {m, kn}).Random(DType::kF32, {kn, kn + 5}).Out(DType::kF32);
      t.Tol(1e-5, 1e-4);
      Check(t);
    }
  }
}

TEST_P(BackendTest, MatMulDecodeSize) {
  KernelTester t("MatMul");
  t.Random(DType::kF32, {1, 1024}).Random(DType::kF32, {1024, 1024}).Out(DType::kF32);
  t.Tol(1e-4, 1e-4);
  Check(t);
  EXPECT_EQ(t.kernel_name(), "matmul.f32.dnnl.sgemm+brgemm");
}

TEST_P(BackendTest, MatMulOneDimensionalAndBatched) {
  const std::vector<std::pair<Dims, Dims>> cases = {
      {{5}, {5, 3}},
      {{4, 5}, {5}},
      {{5}, {5}},
      {{2, 3, 4}, {4, 6}},
      {{2, 1, 4}, {4, 6}},
      {{3, 4}, {2, 4, 6}},
      {{2, 3, 4}, {2, 4, 6}},
      {{2, 1, 3, 4}, {5, 4, 2}},
      {{1, 2, 3, 4}, {4, 1}},
      {{2, 3, 1, 4}, {4, 5}},
      {{4, 1, 7}, {7, 9}},
  };
  uint32_t seed = 7;
  for (const auto& [a, b] : cases) {
    KernelTester t("MatMul", "", seed++);
    t.Random(DType::kF32, a).Random(DType::kF32, b).Out(DType::kF32);
    Check(t);
  }
}

TEST_P(BackendTest, MatMulEmptyDims) {
  const std::vector<std::pair<Dims, Dims>> cases = {
      {{0, 4}, {4, 3}},    {{3, 0}, {0, 4}},       {{3, 4}, {4, 0}},
      {{0, 3, 4}, {4, 2}}, {{2, 0, 4}, {2, 4, 5}},
  };
  for (const auto& [a, b] : cases) {
    KernelTester t("MatMul");
    t.Random(DType::kF32, a).Random(DType::kF32, b).Out(DType::kF32);
    Check(t);
  }
}

TEST_P(BackendTest, MatMulStridedViews) {
  {
    KernelTester t("MatMul", "", 3);  // B transposed (a weight stored [N, K])
    t.Random(DType::kF32, {3, 17}).Transposed(DType::kF32, {17, 9}, {1, 0}).Out(DType::kF32);
    Check(t);
  }
  {
    KernelTester t("MatMul", "", 4);  // A transposed
    t.Transposed(DType::kF32, {6, 17}, {1, 0}).Random(DType::kF32, {17, 9}).Out(DType::kF32);
    Check(t);
  }
  {
    KernelTester t("MatMul", "", 5);  // rows with spare capacity (a KV cache)
    t.Padded(DType::kF32, {2, 5, 8}, 3).Padded(DType::kF32, {2, 8, 6}, 2).Out(DType::kF32);
    Check(t);
  }
  {
    KernelTester t("MatMul", "", 6);  // batched, transposed K^T as in attention scores
    t.Random(DType::kF32, {2, 4, 8}).Transposed(DType::kF32, {2, 8, 4}, {0, 2, 1}).Out(DType::kF32);
    Check(t);
  }
  {
    KernelTester t("MatMul", "", 8);  // an operand oneDNN cannot address: packed
    t.Transposed(DType::kF32, {3, 4, 5}, {1, 2, 0}).Random(DType::kF32, {5, 2}).Out(DType::kF32);
    Check(t);
  }
}

TEST_P(BackendTest, MatMulMismatchIsAnError) {
  KernelTester t("MatMul");
  t.Random(DType::kF32, {2, 3}).Random(DType::kF32, {4, 5}).Out(DType::kF32);
  Check(t);  // both fail with InvalidArgument
}

TEST_P(BackendTest, MatMulTwoThreads) {
  KernelTester t("MatMul", "", 11);
  t.Random(DType::kF32, {64, 256}).Random(DType::kF32, {256, 128}).Out(DType::kF32).Threads(2);
  Check(t);
}

TEST_P(BackendTest, GemmAttributesAndBias) {
  struct Case {
    int64_t m, k, n;
    int64_t ta, tb;
    float alpha, beta;
    Dims c;  // empty vector + has_c=false: absent
    bool has_c;
  };
  const std::vector<Case> cases = {
      {1, 16, 8, 0, 1, 1.0f, 1.0f, {8}, true},   {3, 5, 7, 0, 0, 1.0f, 1.0f, {3, 7}, true},
      {3, 5, 7, 1, 0, 0.5f, 2.0f, {1, 7}, true}, {3, 5, 7, 1, 1, 1.0f, 1.0f, {3, 1}, true},
      {4, 9, 2, 0, 1, 2.0f, 0.0f, {4, 2}, true}, {4, 9, 2, 0, 0, 1.0f, 1.0f, {}, false},
      {1, 1, 1, 0, 0, 1.0f, 1.0f, {}, true},     {5, 0, 3, 0, 0, 1.0f, 0.5f, {3}, true},
      {0, 4, 3, 0, 0, 1.0f, 1.0f, {3}, true},    {33, 65, 17, 1, 1, -1.0f, 3.0f, {17}, true},
  };
  uint32_t seed = 20;
  for (const Case& c : cases) {
    KernelTester t("Gemm", "", seed++);
    t.Random(DType::kF32, c.ta ? Dims{c.k, c.m} : Dims{c.m, c.k});
    t.Random(DType::kF32, c.tb ? Dims{c.n, c.k} : Dims{c.k, c.n});
    if (c.has_c) t.Random(DType::kF32, c.c);
    t.Out(DType::kF32).Attr("transA", c.ta).Attr("transB", c.tb);
    t.Attr("alpha", c.alpha).Attr("beta", c.beta);
    Check(t);
  }
}

TEST_P(BackendTest, NonF32IsDeclined) {
  KernelTester t("MatMul");
  t.Random(DType::kF64, {2, 3}).Random(DType::kF64, {3, 2}).Out(DType::kF64);
  EXPECT_TRUE(absl::IsUnimplemented(t.Compare(backend())));
  // The registry then picks the reference kernel.
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(t.spec());
  ASSERT_TRUE(k.ok());
  EXPECT_EQ((*k)->name(), "matmul.f64.ref");
}

TEST_P(BackendTest, RandomMatMulShapes) {
  std::mt19937 rng(99);
  auto dim = [&](int lo, int hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int i = 0; i < 40; ++i) {
    const int64_t m = dim(0, 3) == 0 ? 1 : dim(1, 40), k = dim(1, 50), n = dim(1, 40);
    Dims a = {m, k}, b = {k, n};
    if (dim(0, 2) == 0) a.insert(a.begin(), dim(1, 3));
    if (dim(0, 3) == 0) b.insert(b.begin(), a.size() == 3 ? a[0] : dim(1, 3));
    KernelTester t("MatMul", "", static_cast<uint32_t>(i));
    if (dim(0, 3) == 0 && b.size() == 2) {
      t.Random(DType::kF32, a).Transposed(DType::kF32, b, {1, 0});
    } else {
      t.Random(DType::kF32, a).Random(DType::kF32, b);
    }
    t.Out(DType::kF32);
    Check(t);
  }
}

// ---- elementwise ----

// Shapes of every class: scalar, M=1 rows, odd sizes, empty, large (past any small-tensor
// threshold).
const std::vector<Dims>& ElementwiseShapes() {
  static const std::vector<Dims> shapes = {
      {}, {1}, {7}, {1, 33}, {3, 5, 7}, {0, 4}, {2, 0, 3}, {64, 129}, {4, 1000},
  };
  return shapes;
}

TEST_P(BackendTest, UnaryOps) {
  struct Op {
    const char* name;
    double lo, hi;
  };
  const std::vector<Op> ops = {
      {"Relu", -2, 2},     {"LeakyRelu", -2, 2}, {"Tanh", -4, 4},        {"Sigmoid", -8, 8},
      {"Exp", -5, 5},      {"Sqrt", 0, 10},      {"Abs", -3, 3},         {"Elu", -3, 3},
      {"Softplus", -5, 5}, {"Neg", -3, 3},       {"Reciprocal", 0.1, 5}, {"HardSwish", -5, 5},
      {"Round", -10, 10},
  };
  uint32_t seed = 1;
  for (const Op& op : ops) {
    for (const Dims& shape : ElementwiseShapes()) {
      KernelTester t(op.name, "", seed++);
      t.Random(DType::kF32, shape, op.lo, op.hi).Out(DType::kF32);
      if (std::string(op.name) == "LeakyRelu" || std::string(op.name) == "Elu") {
        t.Attr("alpha", 0.3f);
      }
      Check(t);
    }
    KernelTester strided(op.name, "", seed++);  // a transposed view
    strided.Transposed(DType::kF32, {40, 70}, {1, 0}, op.lo, op.hi).Out(DType::kF32);
    Check(strided);
  }
}

TEST_P(BackendTest, ClipForms) {
  for (const Dims& shape : ElementwiseShapes()) {
    KernelTester inputs("Clip", "", 5);
    inputs.Random(DType::kF32, shape, -3, 3);
    inputs.In(F32({}, {-0.5f})).In(F32({}, {1.25f})).Out(DType::kF32);
    Check(inputs);
    KernelTester only_max("Clip", "", 6);
    only_max.Random(DType::kF32, shape, -3, 3).Absent().In(F32({}, {0.5f})).Out(DType::kF32);
    Check(only_max);
    KernelTester attrs("Clip", "", 7);  // opset < 11
    attrs.Random(DType::kF32, shape, -3, 3).Out(DType::kF32);
    attrs.Attr("min", -1.0f).Attr("max", 2.0f);
    Check(attrs);
  }
}

TEST_P(BackendTest, BinaryOpsBroadcasting) {
  const std::vector<std::pair<Dims, Dims>> shapes = {
      {{64, 129}, {64, 129}}, {{64, 129}, {129}},     {{129}, {64, 129}},     {{64, 129}, {64, 1}},
      {{64, 1}, {1, 129}},    {{8, 16, 32}, {16, 1}}, {{1}, {4, 1000}},       {{4, 1000}, {}},
      {{3, 5}, {3, 5}},       {{0, 5}, {5}},          {{2, 3, 0}, {1, 3, 1}}, {{1, 1, 300}, {300}},
  };
  uint32_t seed = 100;
  // Not Mean: the reference kernel's (oneDNN's post-op scale adds 0 and loses a -0).
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum"}) {
    for (const auto& [a, b] : shapes) {
      KernelTester t(op, "", seed++);
      const bool div = std::string(op) == "Div";
      t.Random(DType::kF32, a).Random(DType::kF32, b, div ? 0.5 : -1, div ? 2.0 : 1);
      t.Out(DType::kF32).Tol(1e-6, 1e-5);
      Check(t);
    }
    KernelTester strided(op, "", seed++);
    strided.Transposed(DType::kF32, {70, 80}, {1, 0}).Padded(DType::kF32, {70, 80}, 4);
    strided.Out(DType::kF32);
    Check(strided);
  }
}

TEST_P(BackendTest, VariadicWithThreeInputsIsDeclined) {
  KernelTester t("Sum");
  t.Random(DType::kF32, {3}).Random(DType::kF32, {3}).Random(DType::kF32, {3}).Out(DType::kF32);
  EXPECT_TRUE(absl::IsUnimplemented(t.Compare(backend())));
}

TEST_P(BackendTest, WhereBroadcasting) {
  struct Case {
    Dims cond, x, y;
  };
  const std::vector<Case> cases = {
      {{5, 5}, {}, {2, 3, 5, 5}},  // a causal mask over attention scores
      {{2, 3, 5, 5}, {2, 3, 5, 5}, {2, 3, 5, 5}},
      {{1, 5}, {4, 5}, {}},
      {{3, 7}, {7}, {2, 3, 7}},
      {{4, 1}, {4, 6}, {4, 6}},  // not a trailing block: the reference loop
      {{}, {3, 4}, {3, 4}},      // a scalar condition
      {{0, 4}, {4}, {1, 4}},
  };
  uint32_t seed = 150;
  for (const Case& c : cases) {
    KernelTester t("Where", "", seed++);
    t.Random(DType::kBool, c.cond).Random(DType::kF32, c.x).Random(DType::kF32, c.y);
    t.Out(DType::kF32).Tol(0, 0);
    Check(t);
  }
}

TEST_P(BackendTest, Erf) {
  KernelTester t("Erf", "", 170);
  t.Random(DType::kF32, {64, 129}, -4, 4).Out(DType::kF32).Tol(2e-7, 1e-6);
  Check(t);
}

TEST_P(BackendTest, SmallBinaryOpsByLoop) {
  // Shapes the plain loop serves (same shape, one row, a scalar; in either order when
  // commutative) and one it does not (a column).
  const std::vector<std::pair<Dims, Dims>> shapes = {
      {{3, 17}, {3, 17}}, {{3, 17}, {17}},   {{17}, {3, 17}},        {{3, 17}, {}},
      {{}, {3, 17}},      {{3, 17}, {3, 1}}, {{1, 4, 9}, {1, 1, 9}},
  };
  uint32_t seed = 180;
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    for (const auto& [a, b] : shapes) {
      KernelTester t(op, "", seed++);
      const bool div = std::string(op) == "Div";
      t.Random(DType::kF32, a).Random(DType::kF32, b, div ? 0.5 : -1, div ? 2.0 : 1);
      t.Out(DType::kF32).Tol(0, 0);
      Check(t);
    }
  }
}

// ---- Softmax, LayerNormalization ----

TEST_P(BackendTest, SoftmaxAxes) {
  const std::vector<std::pair<Dims, int64_t>> cases = {
      {{1, 1000}, -1}, {{7}, 0},          {{3, 5, 7}, 1}, {{3, 5, 7}, 0},
      {{4, 33}, -1},   {{2, 3, 4, 5}, 2}, {{0, 5}, 1},    {{3, 1}, 1},
  };
  uint32_t seed = 200;
  // LogSoftmax's last axis is cpu::LogSoftmaxRows; its other axes the reference kernel's.
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (const auto& [shape, axis] : cases) {
      KernelTester t(op, "", seed++);
      t.Random(DType::kF32, shape, -5, 5).Out(DType::kF32).Attr("axis", axis);
      Check(t);
      KernelTester legacy(op, "", seed++);  // opset < 13
      legacy.Random(DType::kF32, shape, -5, 5).Out(DType::kF32);
      legacy.Attr("axis", axis).Attr("legacy_2d", int64_t{1});
      Check(legacy);
    }
    KernelTester strided(op, "", seed++);
    strided.Transposed(DType::kF32, {6, 40}, {1, 0}, -5, 5).Out(DType::kF32);
    Check(strided);
  }
}

TEST_P(BackendTest, LayerNormalization) {
  struct Case {
    Dims x;
    int64_t axis;
    Dims scale, bias;  // empty: absent
  };
  const std::vector<Case> cases = {
      {{1, 256}, -1, {256}, {256}}, {{3, 7}, -1, {7}, {}},  {{2, 3, 8}, 1, {3, 8}, {3, 8}},
      {{2, 3, 8}, -1, {1, 8}, {8}}, {{5, 33}, 1, {}, {}},   {{4, 6}, 0, {4, 6}, {4, 6}},
      {{3, 4}, -1, {3, 1}, {}},     {{0, 8}, -1, {8}, {8}}, {{2, 3, 8}, 1, {8}, {8}},
  };
  uint32_t seed = 300;
  for (const Case& c : cases) {
    KernelTester t("LayerNormalization", "", seed++);
    t.Random(DType::kF32, c.x, -3, 3);
    if (c.scale.empty()) {
      t.Absent();
    } else {
      t.Random(DType::kF32, c.scale, 0.5, 1.5);
    }
    if (!c.bias.empty()) t.Random(DType::kF32, c.bias);
    t.Out(DType::kF32).Attr("axis", c.axis).Attr("epsilon", 1e-5f).Tol(1e-5, 1e-4);
    Check(t);
  }
  KernelTester stats("LayerNormalization");  // Mean and InvStdDev: the reference kernel's
  stats.Random(DType::kF32, {2, 8}).Random(DType::kF32, {8}).Out(DType::kF32);
  stats.Out(DType::kF32).Out(DType::kF32);
  EXPECT_TRUE(absl::IsUnimplemented(stats.Compare(backend())));
}

// ---- reductions ----

TEST_P(BackendTest, Reductions) {
  struct Case {
    Dims x;
    std::vector<int64_t> axes;
    int64_t keepdims;
  };
  const std::vector<Case> cases = {
      {{1, 1000}, {1}, 1}, {{7, 9}, {0}, 0},   {{3, 5, 7}, {0, 2}, 1},
      {{3, 5, 7}, {}, 0},  {{4, 33}, {-1}, 1}, {{2, 3, 4, 5}, {1, 3}, 0},
      {{0, 5}, {1}, 1},    {{3, 0}, {1}, 1},   {{64, 129}, {0}, 1},
  };
  uint32_t seed = 400;
  // Not ReduceProd: the reference kernel's (oneDNN multiplies in f32, which overflows where
  // the product in double does not).
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1",
                         "ReduceL2", "ReduceSumSquare"}) {
    for (const Case& c : cases) {
      // Attribute form (opset < 13/18) and input form.
      for (bool as_input : {false, true}) {
        KernelTester t(op, "", seed++);
        t.Random(DType::kF32, c.x, -1, 1);
        if (as_input && !c.axes.empty()) {
          t.In(I64({static_cast<int64_t>(c.axes.size())}, c.axes));
        } else if (!c.axes.empty()) {
          t.Attr("axes", c.axes);
        }
        t.Out(DType::kF32).Attr("keepdims", c.keepdims).Tol(1e-5, 1e-4);
        Check(t);
      }
    }
    KernelTester strided(op, "", seed++);
    strided.Transposed(DType::kF32, {30, 40}, {1, 0}, 0.5, 1.0)
        .Attr("axes", std::vector<int64_t>{1});
    strided.Out(DType::kF32).Tol(1e-5, 1e-4);
    Check(strided);
    KernelTester noop(op, "", seed++);
    noop.Random(DType::kF32, {3, 4}, 0.5, 1.0).Attr("noop_with_empty_axes", int64_t{1});
    noop.Out(DType::kF32);
    Check(noop);
  }
  for (const char* op : {"ReduceLogSumExp", "ReduceLogSum", "Log"}) {  // the reference kernel's
    KernelTester t(op);
    t.Random(DType::kF32, {3, 4}, 0.5, 1.5).Out(DType::kF32);
    EXPECT_TRUE(absl::IsUnimplemented(t.Compare(backend()))) << op;
  }
}

// ---- NaN and infinity ----

// Random values in [-2, 2) with NaN, +inf and -inf sprinkled in (a few per row).
Tensor WithSpecials(Dims dims, uint32_t seed) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = dist(rng);
    if (i % 97 == 5) v = std::numeric_limits<float>::quiet_NaN();
    if (i % 89 == 7) v = std::numeric_limits<float>::infinity();
    if (i % 83 == 9) v = -std::numeric_limits<float>::infinity();
    t.data<float>()[i] = v;
  }
  return t;
}

TEST_P(BackendTest, NonFiniteValuesFollowTheReference) {
  const Dims shape = {64, 129};
  uint32_t seed = 900;
  for (const char* op : {"Relu", "LeakyRelu", "Tanh", "Sigmoid", "Exp", "Sqrt", "Abs", "Elu",
                         "Softplus", "Neg", "Reciprocal", "HardSwish", "Round", "Clip", "Softmax",
                         "LogSoftmax", "LayerNormalization"}) {
    KernelTester t(op, "", seed);
    t.In(WithSpecials(shape, seed++)).Out(DType::kF32);
    if (std::string(op) == "Clip") t.In(F32({}, {-1.0f})).In(F32({}, {1.0f}));
    Check(t);
  }
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"}) {
    KernelTester t(op, "", seed);
    t.In(WithSpecials(shape, seed)).In(WithSpecials(shape, seed + 1)).Out(DType::kF32);
    seed += 2;
    Check(t);
  }
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1",
                         "ReduceL2", "ReduceSumSquare"}) {
    KernelTester t(op, "", seed);
    t.In(WithSpecials(shape, seed++)).Attr("axes", std::vector<int64_t>{1}).Out(DType::kF32);
    Check(t);
  }
  KernelTester mm("MatMul", "", seed);
  mm.In(WithSpecials({4, 129}, seed)).Random(DType::kF32, {129, 8}).Out(DType::kF32);
  Check(mm);
}

// ---- LSTM, GRU, RNN ----

struct RnnCase {
  const char* op;
  int64_t seq, batch, input, hidden;
  const char* direction = "forward";
  int64_t layout = 0;
  bool bias = true, h0 = true, c0 = true, peephole = false;
  std::vector<std::string> activations;
  float clip = 0;
  int64_t input_forget = 0, linear_before_reset = 0;
  std::vector<int32_t> lens;  // sequence_lens; empty: absent
  int outputs = 3;            // LSTM: Y, Y_h, Y_c (fewer for GRU/RNN)
  bool y = true;              // Y present
};

void AddRnnInputs(KernelTester& t, const RnnCase& c) {
  const bool lstm = std::string(c.op) == "LSTM";
  const int64_t gates = lstm ? 4 : std::string(c.op) == "GRU" ? 3 : 1;
  const int64_t nd = std::string(c.direction) == "bidirectional" ? 2 : 1;
  const Dims x = c.layout == 0 ? Dims{c.seq, c.batch, c.input} : Dims{c.batch, c.seq, c.input};
  const Dims state = c.layout == 0 ? Dims{nd, c.batch, c.hidden} : Dims{c.batch, nd, c.hidden};
  t.Random(DType::kF32, x);
  t.Random(DType::kF32, {nd, gates * c.hidden, c.input}, -0.5, 0.5);
  t.Random(DType::kF32, {nd, gates * c.hidden, c.hidden}, -0.5, 0.5);
  c.bias ? t.Random(DType::kF32, {nd, 2 * gates * c.hidden}) : t.Absent();
  c.lens.empty() ? t.Absent() : t.In(I32({c.batch}, c.lens));
  c.h0 ? t.Random(DType::kF32, state) : t.Absent();
  if (lstm) {
    c.c0 ? t.Random(DType::kF32, state) : t.Absent();
    if (c.peephole) t.Random(DType::kF32, {nd, 3 * c.hidden}, -0.5, 0.5);
  }
  const int max_out = lstm ? 3 : 2;
  for (int i = 0; i < std::min(c.outputs, max_out); ++i) t.Out(DType::kF32);
  t.Attr("hidden_size", c.hidden).Attr("direction", std::string(c.direction));
  if (c.layout != 0) t.Attr("layout", c.layout);
  if (!c.activations.empty()) t.Attr("activations", c.activations);
  if (c.clip > 0) t.Attr("clip", c.clip);
  if (c.input_forget != 0) t.Attr("input_forget", c.input_forget);
  if (c.linear_before_reset != 0) t.Attr("linear_before_reset", c.linear_before_reset);
  t.Tol(1e-5, 1e-4);
}

TEST_P(BackendTest, RecurrentCells) {
  std::vector<RnnCase> cases;
  for (const char* op : {"LSTM", "GRU", "RNN"}) {
    cases.push_back({op, 1, 1, 16, 256});  // a decode step
    cases.push_back({op, 4, 3, 5, 7});
    cases.push_back({op, 3, 2, 1, 1});
    RnnCase rev{op, 5, 2, 6, 4};
    rev.direction = "reverse";
    cases.push_back(rev);
    RnnCase bi{op, 3, 2, 4, 5};
    bi.direction = "bidirectional";
    cases.push_back(bi);
    RnnCase batch_major{op, 3, 2, 4, 5};
    batch_major.layout = 1;
    batch_major.direction = "bidirectional";
    cases.push_back(batch_major);
    RnnCase bare{op, 2, 3, 4, 6};
    bare.bias = bare.h0 = bare.c0 = false;
    cases.push_back(bare);
    RnnCase clipped{op, 3, 2, 4, 5};
    clipped.clip = 0.7f;
    cases.push_back(clipped);
    RnnCase full_lens{op, 3, 2, 4, 5};
    full_lens.lens = {3, 3};
    cases.push_back(full_lens);
    RnnCase short_lens{op, 4, 3, 4, 5};
    short_lens.lens = {4, 2, 0};
    cases.push_back(short_lens);
    RnnCase states_only{op, 3, 2, 4, 5};
    states_only.outputs = 2;
    cases.push_back(states_only);
    RnnCase empty{op, 0, 2, 4, 5};
    cases.push_back(empty);
  }
  RnnCase peephole{"LSTM", 3, 2, 4, 5};
  peephole.peephole = true;
  cases.push_back(peephole);
  RnnCase forget{"LSTM", 3, 2, 4, 5};
  forget.input_forget = 1;
  cases.push_back(forget);
  RnnCase acts{"LSTM", 3, 2, 4, 5};
  acts.activations = {"HardSigmoid", "Relu", "Softsign"};
  cases.push_back(acts);
  RnnCase lbr{"GRU", 3, 2, 4, 5};
  lbr.linear_before_reset = 1;
  cases.push_back(lbr);
  RnnCase rnn_acts{"RNN", 3, 2, 4, 5};
  rnn_acts.activations = {"Relu"};
  cases.push_back(rnn_acts);
  uint32_t seed = 500;
  for (const RnnCase& c : cases) {
    KernelTester t(c.op, "", seed++);
    AddRnnInputs(t, c);
    Check(t);
  }
}

TEST_P(BackendTest, LstmTwoThreads) {
  RnnCase c{"LSTM", 4, 2, 64, 128};
  KernelTester t("LSTM", "", 77);
  AddRnnInputs(t, c);
  t.Threads(2);
  Check(t);
  EXPECT_EQ(t.kernel_name(), "lstm.f32.dnnl.gemm");
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendTest, ::testing::ValuesIn(Backends()));
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BackendTest);

// The defaults kernel_tester.h documents, {atol, rtol} per dtype.
TEST(KernelTesterTest, DefaultTolerancesAreTheDocumentedOnes) {
  const struct {
    DType dtype;
    double atol, rtol;
  } cases[] = {{DType::kF32, 1e-5, 1e-4},  {DType::kF64, 1e-9, 1e-9}, {DType::kF16, 1e-2, 1e-2},
               {DType::kBF16, 2e-2, 2e-2}, {DType::kI64, 0, 0},       {DType::kI32, 0, 0},
               {DType::kI8, 0, 0},         {DType::kU8, 0, 0},        {DType::kBool, 0, 0}};
  for (const auto& c : cases) {
    const Tolerance t = DefaultTolerance(c.dtype);
    EXPECT_EQ(t.atol, c.atol) << DTypeName(c.dtype);
    EXPECT_EQ(t.rtol, c.rtol) << DTypeName(c.dtype);
  }
}

}  // namespace
}  // namespace dynvm::testing
