// The weight-only quantized microkernels (qgemv.h) against a double-precision product over the
// dequantized weights. Sizes are random with odd row and column counts, vector tails and row
// ranges that start and end anywhere; every implementation the CPU runs (isa.h) is tested. Where
// the int8 path rounds its activations to 16 bits (AVX2, AVX-512 VNNI) or the bf16 path splits
// them into two bf16 halves (AVX-512 BF16), the tolerance adds the bound qgemv.h derives.
#include "kernels/cpu/qgemv.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/quantize.h"

namespace dynvm::cpu {
namespace {

struct Case {
  int64_t rows, k, n, r0, r1;
  float beta;
};

// What QGemvI8 may differ from the exact product by at output j of activation row xm: f32
// rounding (1e-5 of the magnitude) and, on a level that rounds activations to 16 bits, the
// bound qgemv.h derives: kQGemvI16Error steps of max|x| / 32767 per unit of scale * sum |q|.
double I8Bound(const float* xm, int64_t k, const int8_t* qj, float scale, double mag) {
  double bound = 1e-5 * mag;
  if (QGemvI8RoundsActivations()) {
    double amax = 0, qabs = 0;
    for (int64_t i = 0; i < k; ++i) {
      amax = std::max(amax, std::fabs(static_cast<double>(xm[i])));
      qabs += std::abs(static_cast<int>(qj[i]));
    }
    bound += kQGemvI16Error * amax / kQGemvI16Max * scale * qabs;
  }
  return bound + 1e-30;
}

// The same for QGemvBf16 (mag: sum |x w| plus |beta y|): f32 rounding, and on the split level
// the split's bound plus 2^-126 per term for flushed denormals.
double Bf16Bound(int64_t k, double mag) {
  double bound = 1e-5 * mag;
  if (QGemvBf16SplitsActivations()) bound += kQGemvBf16SplitError * mag + k * 0x1p-126;
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
    for (Isa isa : SupportedIsas()) {
      ScopedIsaForTesting level(isa);
      std::vector<float> yi = y0, yb = y0;
      QGemvI8(c.rows, c.k, x.data(), ldx, q.data(), ldw, scale.data(), c.r0, c.r1, c.beta,
              yi.data(), ldy);
      QGemvBf16(c.rows, c.k, x.data(), ldx, reinterpret_cast<const uint16_t*>(b.data()), ldw, c.r0,
                c.r1, c.beta, yb.data(), ldy);
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
          ASSERT_NEAR(yi[o], si,
                      I8Bound(&x[m * ldx], c.k, &q[j * ldw], scale[j], mag_i + std::fabs(y0[o])))
              << "int8 " << IsaName(isa) << " rows " << c.rows << " k " << c.k;
          ASSERT_NEAR(yb[o], sb, Bf16Bound(c.k, mag_b + std::fabs(y0[o])))
              << "bf16 " << IsaName(isa) << " rows " << c.rows << " k " << c.k;
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
      for (Isa isa : SupportedIsas()) {
        ScopedIsaForTesting level(isa);
        std::vector<float> yi = y0, yb = y0;
        QGemvI8(1, k, x.data(), k, q.data(), ldw, scale.data(), r0, r1, beta, yi.data(), n);
        QGemvBf16(1, k, x.data(), k, reinterpret_cast<const uint16_t*>(b.data()), ldw, r0, r1, beta,
                  yb.data(), n);
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
              absl::StrCat(IsaName(isa), " n ", n, " k ", k, " r0 ", r0, " j ", j);
          ASSERT_NEAR(yi[j], si,
                      I8Bound(x.data(), k, &q[j * ldw], scale[j], mag_i + std::fabs(y0[j])))
              << "int8 " << where;
          ASSERT_NEAR(yb[j], sb, Bf16Bound(k, mag_b + std::fabs(y0[j]))) << "bf16 " << where;
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
      for (Isa isa : SupportedIsas()) {
        ScopedIsaForTesting level(isa);
        std::vector<float> y = y0;
        QGemvI8(rows, k, x.data(), k, q.data(), k, scale.data(), 0, n, beta, y.data(), n);
        for (int64_t m = 0; m < rows; ++m) {
          for (int64_t j = 0; j < n; ++j) {
            double want = beta, mag = beta;
            for (int64_t i = 0; i < k; ++i) {
              want += static_cast<double>(x[m * k + i]) * scale[j] * q[j * k + i];
              mag += std::fabs(static_cast<double>(x[m * k + i]) * scale[j] * q[j * k + i]);
            }
            ASSERT_NEAR(y[m * n + j], want, I8Bound(&x[m * k], k, &q[j * k], scale[j], mag))
                << IsaName(isa) << " k " << k << " rows " << rows << " m " << m << " j " << j;
          }
        }
      }
    }
  }
}

// One activation row split over threads: on the AVX-512 VNNI path each output row is the same
// bit for bit whatever range computes it (the kernel reads the rows one after another, prefetching
// along them), with K across the 2048-column chunks and the 16384-column pass of the rounded
// activations, and within the bound of the double oracle.
TEST(QGemvTest, OneRowOutputDoesNotDependOnTheRowSplit) {
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> q8(-127, 127);
  for (int64_t k : {31, 2048, 5632 + 9, 16384 + 33}) {
    const int64_t n = 37, ldw = k + 3;
    std::vector<float> x(k), scale(n);
    std::vector<int8_t> q(n * ldw);
    for (float& v : x) v = u(rng);
    for (float& v : scale) v = 0.01f * (1.0f + u(rng));
    for (int8_t& v : q) v = static_cast<int8_t>(q8(rng));
    for (Isa isa : SupportedIsas()) {
      ScopedIsaForTesting level(isa);
      std::vector<float> whole(n, 0.0f);
      QGemvI8(1, k, x.data(), k, q.data(), ldw, scale.data(), 0, n, 0.0f, whole.data(), n);
      for (int64_t j = 0; j < n; ++j) {
        double want = 0, mag = 0;
        for (int64_t i = 0; i < k; ++i) {
          want += static_cast<double>(x[i]) * scale[j] * q[j * ldw + i];
          mag += std::fabs(static_cast<double>(x[i]) * scale[j] * q[j * ldw + i]);
        }
        ASSERT_NEAR(whole[j], want, I8Bound(x.data(), k, &q[j * ldw], scale[j], mag))
            << IsaName(isa) << " k " << k << " j " << j;
      }
      // The widening AVX-512 and AVX2 paths sum a block's rows with one transpose-and-add tree
      // and the tail rows lane by lane: only the VNNI path promises the same bits.
      if (std::string(QGemvI8Path()) != "avx512_vnni") continue;
      for (int64_t cut : {1, 5, 16, 19}) {
        std::vector<float> split(n, 0.0f);
        QGemvI8(1, k, x.data(), k, q.data(), ldw, scale.data(), 0, cut, 0.0f, split.data(), n);
        QGemvI8(1, k, x.data(), k, q.data(), ldw, scale.data(), cut, n, 0.0f, split.data(), n);
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(split[j], whole[j]) << IsaName(isa) << " k " << k << " cut " << cut;
        }
      }
    }
  }
}

// Activation rows the int16 path does not round (NaN, infinity, magnitudes below 2^-100; all
// zeros, which round exactly) give what the scalar path gives; rows 0-3 are one group of four,
// so rows 4 and 5 of the same call are rounded as usual (row 5 on the step of its one large
// element).
TEST(QGemvTest, ActivationRowsOutsideTheInt16RangeMatchThePortablePath) {
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
  std::vector<float> want(rows * n, 2.0f);
  {
    ScopedIsaForTesting portable(Isa::kPortable);
    QGemvI8(rows, k, x.data(), k, q.data(), k, scale.data(), 0, n, 1.0f, want.data(), n);
  }
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    std::vector<float> y(rows * n, 2.0f);
    QGemvI8(rows, k, x.data(), k, q.data(), k, scale.data(), 0, n, 1.0f, y.data(), n);
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t j = 0; j < n; ++j) {
        const float got = y[m * n + j], w = want[m * n + j];
        const std::string where = absl::StrCat(IsaName(isa), " row ", m, " j ", j);
        if (std::isnan(w) || std::isinf(w)) {
          EXPECT_TRUE(std::isnan(w) ? std::isnan(got) : got == w) << where << ": " << got;
          continue;
        }
        double mag = 2.0;
        for (int64_t i = 0; i < k; ++i)
          mag += std::fabs(double{x[m * k + i]} * scale[j] * q[j * k + i]);
        const double bound = m >= 4 ? I8Bound(&x[m * k], k, &q[j * k], scale[j], mag) : 1e-5 * mag;
        ASSERT_NEAR(got, w, bound) << where;
      }
    }
  }
}

// The same for bf16 weights: rows holding NaN or infinity are not split (they run the widening
// kernel: NaN and infinity propagate as in f32); tiny and denormal activations are within the
// split's bound (VDPBF16PS flushes denormals).
TEST(QGemvTest, Bf16ActivationRowsWithSpecialValuesMatchThePortablePath) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t k = 45, n = 19, rows = 6;
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(rows * k);
  std::vector<BFloat16> w(n * k);
  for (float& v : x) v = u(rng);
  for (BFloat16& v : w) v = BFloat16(u(rng));
  x[0 * k + 40] = nan;
  x[1 * k + 2] = -inf;
  for (int64_t i = 0; i < k; ++i) x[2 * k + i] *= 1e-33f;
  for (int64_t i = 0; i < k; ++i) x[3 * k + i] = i % 2 ? 1e-39f : 0.0f;  // denormals and zeros
  x[5 * k + 3] = 1e37f;
  const auto* wb = reinterpret_cast<const uint16_t*>(w.data());
  std::vector<float> want(rows * n, 2.0f);
  {
    ScopedIsaForTesting portable(Isa::kPortable);
    QGemvBf16(rows, k, x.data(), k, wb, k, 0, n, 1.0f, want.data(), n);
  }
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    std::vector<float> y(rows * n, 2.0f);
    QGemvBf16(rows, k, x.data(), k, wb, k, 0, n, 1.0f, y.data(), n);
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t j = 0; j < n; ++j) {
        const float got = y[m * n + j], ww = want[m * n + j];
        const std::string where = absl::StrCat(IsaName(isa), " row ", m, " j ", j);
        if (std::isnan(ww) || std::isinf(ww)) {
          EXPECT_TRUE(std::isnan(ww) ? std::isnan(got) : got == ww) << where << ": " << got;
          continue;
        }
        double mag = 2.0;
        for (int64_t i = 0; i < k; ++i) {
          mag += std::fabs(double{x[m * k + i]} * static_cast<float>(w[j * k + i]));
        }
        ASSERT_NEAR(got, ww, Bf16Bound(k, mag)) << where;
      }
    }
  }
}

TEST(QGemvTest, DequantizeRows) {
  const int8_t q[6] = {1, -2, 3, 127, -127, 0};
  const float scale[2] = {0.5f, 0.25f};
  const uint16_t b[2] = {BFloat16(1.5f).bits, BFloat16(-2.0f).bits};
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    float out[3];
    DequantizeRowsI8(3, q, 3, scale, 1, 2, out);
    EXPECT_EQ(out[0], 31.75f) << IsaName(isa);
    EXPECT_EQ(out[1], -31.75f) << IsaName(isa);
    EXPECT_EQ(out[2], 0.0f) << IsaName(isa);
    DequantizeRowsBf16(2, b, 2, 0, 1, out);
    EXPECT_EQ(out[0], 1.5f) << IsaName(isa);
    EXPECT_EQ(out[1], -2.0f) << IsaName(isa);
  }
}

}  // namespace
}  // namespace dynvm::cpu
