// The weight-only quantized kernels (qgemv.h, qmatmul.cc, rnn.cc's QLSTM/QGRU/QRNN) against
// oracles: a double-precision product over the dequantized weights, and the reference kernels
// (kernels/reference/qweights.cc, themselves the f32 reference recurrence over dequantized
// weights). Sizes are random with odd row and column counts, vector tails and row ranges that
// start and end anywhere; every vector path the CPU has runs. Where the int8 path rounds its
// activations to 16 bits (AVX2), the tolerance adds the rounding bound qgemv.h derives.
#include "kernels/dnnl/qgemv.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "gtest/gtest.h"
#include "kernels/kernel_tester.h"
#include "kernels/testing.h"

namespace dynvm::onednn {
namespace {

using ::dynvm::testing::KernelCall;

struct Case {
  int64_t rows, k, n, r0, r1;
  float beta;
};

std::vector<QGemvIsa> Isas() {
  std::vector<QGemvIsa> out = {QGemvIsa::kBest, QGemvIsa::kScalar};
  for (QGemvIsa i : {QGemvIsa::kAvx2, QGemvIsa::kAvx512}) {
    if (QGemvIsaSupported(i)) out.push_back(i);
  }
  return out;
}

// What QGemvI8 may differ from the exact product by at output j of activation row xm: f32
// rounding (1e-5 of the magnitude) and, on a path that rounds activations to 16 bits, the
// bound qgemv.h derives: kQGemvI16Error steps of max|x| / 32767 per unit of scale * sum |q|.
double I8Bound(QGemvIsa isa, const float* xm, int64_t k, const int8_t* qj, float scale,
               double mag) {
  double bound = 1e-5 * mag;
  if (QGemvI8RoundsActivations(isa)) {
    double amax = 0, qabs = 0;
    for (int64_t i = 0; i < k; ++i) {
      amax = std::max(amax, std::fabs(static_cast<double>(xm[i])));
      qabs += std::abs(static_cast<int>(qj[i]));
    }
    bound += kQGemvI16Error * amax / kQGemvI16Max * scale * qabs;
  }
  return bound + 1e-30;
}

TEST(QGemvTest, MatchesDoubleOracleOnRandomSizes) {
  std::mt19937 rng(19);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> q8(-127, 127);
  for (int trial = 0; trial < 60; ++trial) {
    Case c;
    c.rows = 1 + static_cast<int64_t>(rng() % 9);
    c.k = 1 + static_cast<int64_t>(rng() % 300);
    c.n = 1 + static_cast<int64_t>(rng() % 70);
    c.r0 = static_cast<int64_t>(rng() % c.n);
    c.r1 = c.r0 + 1 + static_cast<int64_t>(rng() % (c.n - c.r0));
    c.beta = trial % 3 == 0 ? 1.0f : 0.0f;
    const int64_t ldx = c.k + static_cast<int64_t>(rng() % 3), ldw = c.k + trial % 2;
    const int64_t ldy = c.n + 1;
    std::vector<float> x(c.rows * ldx), scale(c.n), y0(c.rows * ldy);
    std::vector<int8_t> q(c.n * ldw);
    std::vector<BFloat16> b(c.n * ldw);
    for (float& v : x) v = u(rng);
    for (float& v : scale) v = 0.01f * (1.0f + u(rng));
    for (int8_t& v : q) v = static_cast<int8_t>(q8(rng));
    for (BFloat16& v : b) v = BFloat16(u(rng));
    for (float& v : y0) v = u(rng);
    for (QGemvIsa isa : Isas()) {
      std::vector<float> yi = y0, yb = y0;
      QGemvI8(c.rows, c.k, x.data(), ldx, q.data(), ldw, scale.data(), c.r0, c.r1, c.beta,
              yi.data(), ldy, isa);
      QGemvBf16(c.rows, c.k, x.data(), ldx, reinterpret_cast<const uint16_t*>(b.data()), ldw, c.r0,
                c.r1, c.beta, yb.data(), ldy, isa);
      for (int64_t m = 0; m < c.rows; ++m) {
        for (int64_t j = 0; j < c.n; ++j) {
          const int64_t o = m * ldy + j;
          if (j < c.r0 || j >= c.r1) {  // outside the range: untouched
            ASSERT_EQ(yi[o], y0[o]);
            ASSERT_EQ(yb[o], y0[o]);
            continue;
          }
          double si = 0, sb = 0, mag_i = 0, mag_b = 0;
          for (int64_t i = 0; i < c.k; ++i) {
            const double xv = x[m * ldx + i];
            si += xv * scale[j] * q[j * ldw + i];
            sb += xv * static_cast<float>(b[j * ldw + i]);
            mag_i += std::fabs(xv * scale[j] * q[j * ldw + i]);
            mag_b += std::fabs(xv * static_cast<float>(b[j * ldw + i]));
          }
          si += c.beta * y0[o];
          sb += c.beta * y0[o];
          ASSERT_NEAR(
              yi[o], si,
              I8Bound(isa, &x[m * ldx], c.k, &q[j * ldw], scale[j], mag_i + std::fabs(y0[o])))
              << "int8 isa " << static_cast<int>(isa) << " rows " << c.rows << " k " << c.k;
          ASSERT_NEAR(yb[o], sb, 1e-5 * (mag_b + std::fabs(y0[o])) + 1e-30)
              << "bf16 isa " << static_cast<int>(isa) << " rows " << c.rows << " k " << c.k;
        }
      }
    }
  }
}

// One activation row (the decode GEMV: AVX-512 runs 16 output rows per block): every row
// count around the block sizes, ragged K, row ranges that start off a block, beta 0 and 1.
TEST(QGemvTest, OneRowMatchesDoubleOracleAcrossBlockSizes) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> q8(-127, 127);
  for (int64_t n : {1, 4, 15, 16, 17, 31, 32, 33, 47, 64, 100}) {
    for (int64_t k : {1, 7, 15, 16, 17, 64, 129, 300}) {
      const int64_t r0 = n > 3 ? static_cast<int64_t>(rng() % 3) : 0, r1 = n;
      const float beta = (n + k) % 2 == 0 ? 1.0f : 0.0f;
      const int64_t ldw = k + n % 2;
      std::vector<float> x(k), scale(n), y0(n);
      std::vector<int8_t> q(n * ldw);
      std::vector<BFloat16> b(n * ldw);
      for (float& v : x) v = u(rng);
      for (float& v : scale) v = 0.01f * (1.0f + u(rng));
      for (int8_t& v : q) v = static_cast<int8_t>(q8(rng));
      for (BFloat16& v : b) v = BFloat16(u(rng));
      for (float& v : y0) v = u(rng);
      for (QGemvIsa isa : Isas()) {
        std::vector<float> yi = y0, yb = y0;
        QGemvI8(1, k, x.data(), k, q.data(), ldw, scale.data(), r0, r1, beta, yi.data(), n, isa);
        QGemvBf16(1, k, x.data(), k, reinterpret_cast<const uint16_t*>(b.data()), ldw, r0, r1, beta,
                  yb.data(), n, isa);
        for (int64_t j = 0; j < n; ++j) {
          if (j < r0) {
            ASSERT_EQ(yi[j], y0[j]);
            ASSERT_EQ(yb[j], y0[j]);
            continue;
          }
          double si = beta * y0[j], sb = beta * y0[j], mag_i = 0, mag_b = 0;
          for (int64_t i = 0; i < k; ++i) {
            si += static_cast<double>(x[i]) * scale[j] * q[j * ldw + i];
            sb += static_cast<double>(x[i]) * static_cast<float>(b[j * ldw + i]);
            mag_i += std::fabs(static_cast<double>(x[i]) * scale[j] * q[j * ldw + i]);
            mag_b += std::fabs(static_cast<double>(x[i]) * static_cast<float>(b[j * ldw + i]));
          }
          const std::string where =
              absl::StrCat("isa ", static_cast<int>(isa), " n ", n, " k ", k, " r0 ", r0, " j ", j);
          ASSERT_NEAR(yi[j], si,
                      I8Bound(isa, x.data(), k, &q[j * ldw], scale[j], mag_i + std::fabs(y0[j])))
              << "int8 " << where;
          ASSERT_NEAR(yb[j], sb, 1e-5 * (mag_b + std::fabs(y0[j])) + 1e-30) << "bf16 " << where;
        }
      }
    }
  }
}

// Long rows (several of the int16 path's 2048-column chunks, and tails) at the extremes of the
// int32 sums: weights -128 / 127 and activations of one magnitude (every rounded activation
// +-32767), against the exact product; an overflow would be off by 2^32 steps.
TEST(QGemvTest, LongRowsAtTheExtremesDoNotOverflow) {
  std::mt19937 rng(29);
  for (int64_t k : {2047, 2048, 2049, 4096 + 17, 6151}) {
    for (int64_t rows : {1, 2, 3, 5}) {
      const int64_t n = 11;
      std::vector<float> x(rows * k), scale(n), y0(rows * n);
      std::vector<int8_t> q(n * k);
      for (int64_t m = 0; m < rows; ++m) {
        for (int64_t i = 0; i < k; ++i) {  // row 0: all -1 (aligned with -128: the largest sums)
          x[m * k + i] = m == 0 ? -1.0f : (rng() % 2 != 0 ? 0.75f : -0.75f);
        }
      }
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < k; ++i) {
          q[j * k + i] = j % 2 == 0 ? int8_t{-128} : (rng() % 2 != 0 ? int8_t{127} : int8_t{-128});
        }
      }
      for (float& v : scale) v = 0.001f * (1 + rng() % 7);
      for (float& v : y0) v = 1.0f;
      const float beta = k % 2 == 0 ? 0.0f : 1.0f;
      for (QGemvIsa isa : Isas()) {
        std::vector<float> y = y0;
        QGemvI8(rows, k, x.data(), k, q.data(), k, scale.data(), 0, n, beta, y.data(), n, isa);
        for (int64_t m = 0; m < rows; ++m) {
          for (int64_t j = 0; j < n; ++j) {
            double want = beta, mag = beta;
            for (int64_t i = 0; i < k; ++i) {
              want += static_cast<double>(x[m * k + i]) * scale[j] * q[j * k + i];
              mag += std::fabs(static_cast<double>(x[m * k + i]) * scale[j] * q[j * k + i]);
            }
            ASSERT_NEAR(y[m * n + j], want, I8Bound(isa, &x[m * k], k, &q[j * k], scale[j], mag))
                << "isa " << static_cast<int>(isa) << " k " << k << " rows " << rows << " m " << m
                << " j " << j;
          }
        }
      }
    }
  }
}

// Activation rows the int16 path does not round (NaN, infinity, magnitudes below 2^-100; all
// zeros, which round exactly) give what the scalar path gives; rows 0-3 are one group of four,
// so rows 4 and 5 of the same call are rounded as usual (row 5 on the step of its one large
// element).
TEST(QGemvTest, ActivationRowsOutsideTheInt16RangeMatchTheScalarPath) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t k = 37, n = 13, rows = 6;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(rows * k), scale(n, 0.01f);
  std::vector<int8_t> q(n * k);
  for (float& v : x) v = u(rng);
  for (int8_t& v : q) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  x[0 * k + 5] = nan;
  x[1 * k + 36] = inf;
  for (int64_t i = 0; i < k; ++i) x[2 * k + i] *= 1e-33f;  // largest magnitude below 2^-100
  for (int64_t i = 0; i < k; ++i) x[3 * k + i] = 0.0f;
  x[5 * k + 3] = 1e37f;  // row 4 stays ordinary; row 5 is rounded on a step of 1e37 / 32767
  for (QGemvIsa isa : Isas()) {
    std::vector<float> y(rows * n, 2.0f), want(rows * n, 2.0f);
    QGemvI8(rows, k, x.data(), k, q.data(), k, scale.data(), 0, n, 1.0f, y.data(), n, isa);
    QGemvI8(rows, k, x.data(), k, q.data(), k, scale.data(), 0, n, 1.0f, want.data(), n,
            QGemvIsa::kScalar);
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t j = 0; j < n; ++j) {
        const float got = y[m * n + j], w = want[m * n + j];
        const std::string where = absl::StrCat("isa ", static_cast<int>(isa), " row ", m, " j ", j);
        if (std::isnan(w) || std::isinf(w)) {
          EXPECT_TRUE(std::isnan(w) ? std::isnan(got) : got == w) << where << ": " << got;
          continue;
        }
        double mag = 2.0;
        for (int64_t i = 0; i < k; ++i)
          mag += std::fabs(double{x[m * k + i]} * scale[j] * q[j * k + i]);
        const double bound =
            m >= 4 ? I8Bound(isa, &x[m * k], k, &q[j * k], scale[j], mag) : 1e-5 * mag;
        ASSERT_NEAR(got, w, bound) << where;
      }
    }
  }
}

TEST(QGemvTest, DequantizeRows) {
  const int8_t q[6] = {1, -2, 3, 127, -127, 0};
  const float scale[2] = {0.5f, 0.25f};
  float out[3];
  DequantizeRowsI8(3, q, 3, scale, 1, 2, out);
  EXPECT_EQ(out[0], 31.75f);
  EXPECT_EQ(out[1], -31.75f);
  EXPECT_EQ(out[2], 0.0f);
  const uint16_t b[2] = {BFloat16(1.5f).bits, BFloat16(-2.0f).bits};
  DequantizeRowsBf16(2, b, 2, 0, 1, out);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.0f);
}

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

// qgemv.h's bound on a product of K activations in [-1, 1] with RandomWeight's int8 weights
// (|w| <= 1.5) where QGemvI8 rounds activations to 16 bits; 0 otherwise.
double I8RoundingBound(bool i8, int64_t k) {
  if (!i8 || !QGemvI8RoundsActivations()) return 0.0;
  return kQGemvI16Error / kQGemvI16Max * 1.5 * static_cast<double>(k);
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
    t.Out(DType::kF32).Tol(1e-5 + I8RoundingBound(i8, k), 1e-5);
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
      t.Out(DType::kF32).Tol(1e-5 + I8RoundingBound(i8, k), 1e-5);
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
    // Where int8 products round their activations (up to kQuantSmallRows rows: QGemvI8), one
    // step from a zero state: its gate inputs are then off by at most the product's bound e
    // (x in [-1, 1], and R times the zero state is exact), and sigmoid (slope <= 1/4) and tanh
    // (<= 1) carry that to at most 1.5 e in h and c (LSTM: c = i g, h = o tanh c; GRU with
    // either reset form, its bias in [-1, 1]; RNN: e). More steps feed h's error through R,
    // which no useful bound follows; charlm_quality_test and quantized_models_test bound whole
    // decodes.
    const bool rounds = i8 && QGemvI8RoundsActivations() && batch <= kQuantSmallRows;
    if (rounds) seq = 1;
    const int64_t in = 1 + static_cast<int64_t>(rng() % 40),
                  h = 1 + static_cast<int64_t>(rng() % 24);
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
    t.Tol(1e-5 + (rounds ? 1.5 * I8RoundingBound(i8, in) : 0.0), 1e-4);
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
    t.Tol(1e-5 + 1.5 * I8RoundingBound(i8, in), 1e-4);
    const absl::Status s = t.Compare("dnnl");
    ASSERT_TRUE(s.ok()) << s << (i8 ? " int8" : " bf16");

    const int64_t k = 301, n = 259;
    auto [mw, ms] = RandomWeight(rng, {n, k}, i8);
    testing::KernelTester mm("QMatMul", "dynvm");
    mm.In(RandomF32(rng, {1, 1, k})).In(mw);
    if (i8) mm.In(ms);
    mm.Out(DType::kF32).Tol(1e-5 + I8RoundingBound(i8, k), 1e-5).Threads(2);
    const absl::Status sm = mm.Compare("dnnl");
    ASSERT_TRUE(sm.ok()) << sm << (i8 ? " int8" : " bf16");
  }
}

}  // namespace
}  // namespace dynvm::onednn
