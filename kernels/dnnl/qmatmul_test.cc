// The weight-only quantized kernels of the oneDNN backend (qmatmul.cc, rnn.cc's QLSTM/QGRU/QRNN)
// against the reference kernels (kernels/reference/qweights.cc, themselves the f32 reference
// over dequantized weights). Where the int8 microkernel rounds its activations to 16 bits (AVX2,
// AVX-512 VNNI; kernels/cpu/qgemv.h), the tolerance adds that rounding's bound.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "gtest/gtest.h"
#include "kernels/cpu/qgemv.h"
#include "kernels/dnnl/choice.h"
#include "kernels/kernel_tester.h"
#include "kernels/testing.h"

namespace dynvm::onednn {
namespace {

using ::dynvm::testing::KernelCall;

Tensor RandomF32(std::mt19937& rng, std::vector<int64_t> dims) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return testing::F32(dims, v);
}

// An i8 weight of `dims` with scales of its leading dims, or a bf16 weight.
std::pair<Tensor, Tensor> RandomWeight(std::mt19937& rng, std::vector<int64_t> dims, bool i8) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<int64_t> sdims(dims.begin(), dims.end() - 1);
  int64_t ns = 1;
  for (int64_t d : sdims) ns *= d;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  if (i8) {
    std::vector<int8_t> q(n);
    for (int8_t& v : q) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    std::vector<float> s(ns);
    for (float& v : s) v = (1.0f + 0.5f * u(rng)) / 127.0f;  // weights within +-1.5
    return {testing::Make<int8_t>(DType::kI8, dims, q), testing::F32(sdims, s)};
  }
  std::vector<BFloat16> b(n);
  for (BFloat16& v : b) v = BFloat16(u(rng));
  return {testing::Make<BFloat16>(DType::kBF16, dims, b), Tensor()};
}

// qgemv.h's bound on a product of K activations in [-1, 1] with RandomWeight's weights where the
// microkernel narrows the activations: int8 (|w| <= 1.5) rounded to 16 bits, bf16 (|w| <= 1)
// split into two bf16 halves; 0 otherwise.
double QuantizedBound(bool i8, int64_t k) {
  if (i8) {
    if (!cpu::QGemvI8RoundsActivations()) return 0.0;
    return cpu::kQGemvI16Error / cpu::kQGemvI16Max * 1.5 * static_cast<double>(k);
  }
  if (!cpu::QGemvBf16SplitsActivations()) return 0.0;
  return (cpu::kQGemvBf16SplitError + 0x1p-126) * static_cast<double>(k);
}

// Whether the microkernel narrows the activations of a weight of this type.
bool Narrows(bool i8) {
  return i8 ? cpu::QGemvI8RoundsActivations() : cpu::QGemvBf16SplitsActivations();
}

TEST(QMatMulTest, OneDnnKernelMatchesReference) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 24; ++trial) {
    const bool i8 = trial % 2 == 0;
    // Rows 1..20: the direct kernels up to kQuantSmallRows, dequantize + sgemm beyond.
    const int64_t m = 1 + static_cast<int64_t>(rng() % 20),
                  k = 1 + static_cast<int64_t>(rng() % 90);
    const int64_t n = 1 + static_cast<int64_t>(rng() % 40);
    auto [w, s] = RandomWeight(rng, {n, k}, i8);
    std::vector<int64_t> adims =
        trial % 3 == 0 ? std::vector<int64_t>{2, m, k} : std::vector<int64_t>{m, k};
    testing::KernelTester t("QMatMul", "dynvm");
    t.In(RandomF32(rng, adims)).In(w);
    if (i8) t.In(s);
    t.Out(DType::kF32).Tol(1e-5 + QuantizedBound(i8, k), 1e-5);
    ASSERT_TRUE(t.Compare("dnnl").ok()) << t.Compare("dnnl") << " m " << m << " k " << k;
  }
}

// The decode and prefill row counts (M 1, 2, 9, 33, 130: direct kernels and dequantize +
// sgemm) on random ragged K and N, int8 and bf16, against the reference kernel.
TEST(QMatMulTest, OneDnnKernelMatchesReferenceAtDecodeAndPrefillRows) {
  std::mt19937 rng(31);
  for (int64_t m : {1, 2, 9, 33, 130}) {
    for (int trial = 0; trial < 4; ++trial) {
      const bool i8 = trial % 2 == 0;
      const int64_t k = 1 + static_cast<int64_t>(rng() % 150),
                    n = 1 + static_cast<int64_t>(rng() % 70);
      auto [w, s] = RandomWeight(rng, {n, k}, i8);
      testing::KernelTester t("QMatMul", "dynvm");
      t.In(RandomF32(rng, {1, m, k})).In(w);
      if (i8) t.In(s);
      t.Out(DType::kF32).Tol(1e-5 + QuantizedBound(i8, k), 1e-5);
      ASSERT_TRUE(t.Compare("dnnl").ok()) << t.Compare("dnnl") << " m " << m << " k " << k;
    }
  }
}

TEST(QMatMulTest, BadInputIsAnError) {
  std::mt19937 rng(1);
  auto [w, s] = RandomWeight(rng, {3, 4}, true);
  absl::StatusOr<std::vector<Tensor>> r = KernelCall("QMatMul", "dynvm")
                                              .In(testing::F32({1, 5}, std::vector<float>(5)))
                                              .In(w)
                                              .In(s)
                                              .Out(DType::kF32)
                                              .Run();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("QMatMul"), std::string::npos) << r.status();
  r = KernelCall("QMatMul", "dynvm")
          .In(testing::F32({1, 4}, std::vector<float>(4)))
          .In(w)
          .Out(DType::kF32)
          .Run();  // int8 without its scale
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("scale"), std::string::npos) << r.status();
}

TEST(QRecurrentTest, OneDnnKernelMatchesReference) {
  std::mt19937 rng(11);
  const char* ops[] = {"QLSTM", "QGRU", "QRNN"};
  for (int trial = 0; trial < 18; ++trial) {
    const char* op = ops[trial % 3];
    const bool i8 = (trial / 3) % 2 == 0;
    const int64_t gates = trial % 3 == 0 ? 4 : trial % 3 == 1 ? 3 : 1;
    int64_t seq = 1 + static_cast<int64_t>(rng() % 12);
    const int64_t batch = 1 + static_cast<int64_t>(rng() % 10);
    // Where the products narrow their activations (the rows choice::UseQGemv sends to the direct
    // kernel: QGemvI8 rounding them to int16, QGemvBf16 splitting them into bf16 halves), one
    // step from a zero state: its gate inputs are then off by at most the product's bound e
    // (x in [-1, 1], and R times the zero state is exact), and sigmoid (slope <= 1/4) and tanh
    // (<= 1) carry that to at most 1.5 e in h and c (LSTM: c = i g, h = o tanh c; GRU with
    // either reset form, its bias in [-1, 1]; RNN: e). More steps feed h's error through R,
    // which no useful bound follows; charlm_quality_test and quantized_models_test bound whole
    // decodes.
    const int64_t in = 1 + static_cast<int64_t>(rng() % 40),
                  h = 1 + static_cast<int64_t>(rng() % 24);
    // The products the direct kernel serves (choice::UseQGemv): the input projection's seq x
    // batch rows, the recurrent product's batch rows.
    const bool rounds = Narrows(i8) && (choice::UseQGemv(seq * batch, gates * h, in, i8) ||
                                        choice::UseQGemv(batch, gates * h, h, i8));
    if (rounds) seq = 1;
    const int64_t nd = trial % 4 == 3 ? 2 : 1;
    auto [w, ws] = RandomWeight(rng, {nd, gates * h, in}, i8);
    auto [r, rs] = RandomWeight(rng, {nd, gates * h, h}, i8);
    testing::KernelTester t(op, "dynvm");
    t.In(RandomF32(rng, {seq, batch, in})).In(w).In(r).In(RandomF32(rng, {nd, 2 * gates * h}));
    if (i8) {
      t.Absent().Absent().Absent().Absent();  // sequence_lens, initial_h, initial_c, P
      t.In(ws).In(rs);
    }
    t.Attr("hidden_size", h);
    if (gates == 3 && trial % 2 == 1) t.Attr("linear_before_reset", int64_t{1});
    if (nd == 2) t.Attr("direction", std::string("bidirectional"));
    t.Out(DType::kF32).Out(DType::kF32);
    if (gates == 4) t.Out(DType::kF32);
    // As the f32 recurrences in backend_test.cc, plus the rounding bound where it applies.
    t.Tol(1e-5 + (rounds ? 1.5 * QuantizedBound(i8, in) : 0.0), 1e-4);
    const absl::Status s = t.Compare("dnnl");
    ASSERT_TRUE(s.ok()) << s << " " << op << " seq " << seq << " batch " << batch;
    EXPECT_EQ(t.kernel_name().find(".ref"), std::string::npos) << t.kernel_name();
  }
}

// The pool's split at 2 threads (the QLSTM gates' and QMatMul's GEMVs above kMinParallelGemv:
// each worker runs QGemv on its output rows and rounds the activations itself), odd sizes so
// that the ranges end off the 16-row grain, against the reference; one step from a zero state,
// bounded as in OneDnnKernelMatchesReference.
TEST(QRecurrentTest, TwoThreadsMatchTheReference) {
  std::mt19937 rng(13);
  for (bool i8 : {true, false}) {
    const int64_t in = 97, h = 131, gh = 4 * h;
    auto [w, ws] = RandomWeight(rng, {1, gh, in}, i8);
    auto [r, rs] = RandomWeight(rng, {1, gh, h}, i8);
    testing::KernelTester t("QLSTM", "dynvm");
    t.In(RandomF32(rng, {1, 1, in})).In(w).In(r).In(RandomF32(rng, {1, 2 * gh}));
    if (i8) t.Absent().Absent().Absent().Absent().In(ws).In(rs);
    t.Attr("hidden_size", h).Out(DType::kF32).Out(DType::kF32).Out(DType::kF32).Threads(2);
    t.Tol(1e-5 + 1.5 * QuantizedBound(i8, in), 1e-4);
    const absl::Status s = t.Compare("dnnl");
    ASSERT_TRUE(s.ok()) << s << (i8 ? " int8" : " bf16");

    const int64_t k = 301, n = 259;
    auto [mw, ms] = RandomWeight(rng, {n, k}, i8);
    testing::KernelTester mm("QMatMul", "dynvm");
    mm.In(RandomF32(rng, {1, 1, k})).In(mw);
    if (i8) mm.In(ms);
    mm.Out(DType::kF32).Tol(1e-5 + QuantizedBound(i8, k), 1e-5).Threads(2);
    const absl::Status sm = mm.Compare("dnnl");
    ASSERT_TRUE(sm.ok()) << sm << (i8 ? " int8" : " bf16");
  }
}

}  // namespace
}  // namespace dynvm::onednn
