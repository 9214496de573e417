// The u8 x s8 GEMM on packed b (u8s8_gemm.h) against a scalar oracle summing a * b in 64 bits:
// every tile shape (1-6 rows x 1-4 panels, and more), K with every remainder mod 4, ragged last
// panels, s8 b and u8 b (packed less 128), every term at its largest magnitude, sub-ranges of
// rows and panels (the rest of c untouched), the column sums; and the microkernels the
// DynamicQuantizeMatMul epilogue uses (MinMax, ScaleAccRow) against plain loops. Every
// implementation the CPU runs (isa.h; the portable one always).
#include "kernels/cpu/u8s8_gemm.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/quantize.h"

namespace dynvm::cpu {
namespace {

void CheckGemm(int64_t m, int64_t k, int64_t n, bool b_u8, std::mt19937& rng, bool extreme) {
  const int64_t lda = U8S8PaddedK(k) + (m % 2) * 4;  // padded rows, sometimes wider
  std::vector<uint8_t> a(static_cast<size_t>(m * lda), 0);
  std::vector<uint8_t> b(static_cast<size_t>(k * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t q = 0; q < k; ++q) a[i * lda + q] = extreme ? 255 : static_cast<uint8_t>(rng());
  }
  for (uint8_t& v : b) v = extreme ? (b_u8 ? 0 : 0x80) : static_cast<uint8_t>(rng());
  std::vector<int8_t> packed(U8S8PackedBBytes(k, n));
  std::vector<int32_t> sums(static_cast<size_t>(n));
  U8S8PackB(k, n, b.data(), b_u8, n, packed.data(), sums.data());
  auto bv = [&](int64_t q, int64_t j) -> int64_t {
    const uint8_t raw = b[q * n + j];
    return b_u8 ? int64_t{raw} - 128 : int64_t{static_cast<int8_t>(raw)};
  };
  for (int64_t j = 0; j < n; ++j) {
    int64_t s = 0;
    for (int64_t q = 0; q < k; ++q) s += bv(q, j);
    ASSERT_EQ(sums[j], s) << "column " << j;
  }
  const int64_t panels = U8S8Panels(n);
  // The whole product, then a sub-range of rows and panels into a c filled with a sentinel.
  for (int range = 0; range < 2; ++range) {
    const int64_t i0 = range == 0 ? 0 : m / 3, i1 = range == 0 ? m : m - m / 4;
    const int64_t p0 = range == 0 ? 0 : panels / 2, p1 = panels;
    constexpr int32_t kSentinel = std::numeric_limits<int32_t>::min() + 7;
    std::vector<int32_t> c(static_cast<size_t>(m * n), kSentinel);
    U8S8Gemm(k, n, a.data(), lda, packed.data(), i0, i1, p0, p1, c.data(), n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const bool inside = i >= i0 && i < i1 && j >= p0 * kU8S8Panel && j < p1 * kU8S8Panel;
        int64_t want = kSentinel;
        if (inside) {
          want = 0;
          for (int64_t q = 0; q < k; ++q) want += int64_t{a[i * lda + q]} * bv(q, j);
        }
        ASSERT_EQ(c[i * n + j], want) << "row " << i << " column " << j << " range " << range;
      }
    }
  }
}

TEST(U8S8GemmTest, MatchesTheOracleOnEveryLevel) {
  std::mt19937 rng(23);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    SCOPED_TRACE(IsaName(isa));
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 13}) {
      for (int64_t k : {1, 2, 3, 4, 5, 31, 64}) {
        for (int64_t n : {1, 15, 16, 17, 48, 64, 65, 100}) {
          for (bool b_u8 : {false, true}) {
            SCOPED_TRACE(absl::StrCat("m ", m, " k ", k, " n ", n, b_u8 ? " u8 b" : " s8 b"));
            CheckGemm(m, k, n, b_u8, rng, false);
          }
        }
      }
    }
    // Every term at its largest magnitude (255 * -128), K well past 2^16 products.
    CheckGemm(7, 4099, 33, false, rng, true);
    CheckGemm(7, 4099, 33, true, rng, true);
  }
}

TEST(U8S8GemmTest, EpilogueMicrokernelsMatchPlainLoops) {
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> u(-50, 50);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    SCOPED_TRACE(IsaName(isa));
    for (int64_t n : {1, 7, 15, 16, 17, 33, 100}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = u(rng);
      float lo = 0, hi = 0;
      MinMax(n, x.data(), &lo, &hi);
      EXPECT_EQ(lo, *std::min_element(x.begin(), x.end())) << n;
      EXPECT_EQ(hi, *std::max_element(x.begin(), x.end())) << n;
      std::vector<int32_t> acc(static_cast<size_t>(n)), col(acc.size()), zc(acc.size());
      std::vector<float> scale(acc.size()), bias(acc.size()), y(acc.size());
      for (int64_t j = 0; j < n; ++j) {
        acc[j] = static_cast<int32_t>(rng() % 2000001) - 1000000;
        col[j] = static_cast<int32_t>(rng() % 20001) - 10000;
        zc[j] = static_cast<int32_t>(rng() % 256) - 128;
        scale[j] = 1e-4f * static_cast<float>(1 + rng() % 100);
        bias[j] = u(rng);
      }
      const int32_t rs = -12345;
      for (int form = 0; form < 8; ++form) {
        const int32_t* c = form & 1 ? col.data() : nullptr;
        const int32_t* z = form & 2 ? zc.data() : nullptr;
        const float* bi = form & 4 ? bias.data() : nullptr;
        ScaleAccRow(n, acc.data(), c, z, rs, scale.data(), bi, y.data());
        for (int64_t j = 0; j < n; ++j) {
          const int64_t v = int64_t{acc[j]} + (c ? c[j] : 0) - (z ? int64_t{z[j]} * rs : 0);
          // The product and the bias rounded apart (volatile: no contraction into an FMA).
          volatile float p = static_cast<float>(v) * scale[j];
          const float want = bi ? p + bi[j] : p;
          ASSERT_EQ(y[j], want) << "n " << n << " form " << form << " j " << j;
        }
      }
    }
  }
}

// U8S8GemmScaled against its definition, U8S8Gemm then ScaleAccRow per row, bit for bit: every
// tile shape and ragged last panel, with and without the column terms, the b zero points' terms
// (with row sums) and a bias, on sub-ranges of rows and panels (the rest of y untouched).
TEST(U8S8GemmTest, ScaledMatchesTheGemmThenScaleAccRowBitForBit) {
  std::mt19937 rng(37);
  std::uniform_real_distribution<float> u(-5, 5);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    SCOPED_TRACE(IsaName(isa));
    for (int64_t m : {1, 2, 5, 6, 7, 13}) {
      for (int64_t k : {3, 64, 257}) {
        for (int64_t n : {1, 17, 64, 65, 100}) {
          const int64_t lda = U8S8PaddedK(k);
          std::vector<uint8_t> a(static_cast<size_t>(m * lda), 0), b(static_cast<size_t>(k * n));
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t q = 0; q < k; ++q) a[i * lda + q] = static_cast<uint8_t>(rng());
          }
          for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
          std::vector<int8_t> packed(U8S8PackedBBytes(k, n));
          std::vector<int32_t> sums(static_cast<size_t>(n));
          U8S8PackB(k, n, b.data(), false, n, packed.data(), sums.data());
          std::vector<int32_t> col(static_cast<size_t>(n)), zc(col.size()), rs(m);
          std::vector<float> scale(col.size()), bias(col.size());
          for (int64_t j = 0; j < n; ++j) {
            col[j] = static_cast<int32_t>(rng() % 200001) - 100000;
            zc[j] = static_cast<int32_t>(rng() % 256) - 128;
            scale[j] = 1e-5f * static_cast<float>(1 + rng() % 1000);
            bias[j] = u(rng);
          }
          for (int32_t& v : rs) v = static_cast<int32_t>(rng() % 60001) - 30000;
          const int64_t panels = U8S8Panels(n);
          std::vector<int32_t> c(static_cast<size_t>(m * n));
          U8S8Gemm(k, n, a.data(), lda, packed.data(), 0, m, 0, panels, c.data(), n);
          for (int form = 0; form < 8; ++form) {
            for (int range = 0; range < 2; ++range) {
              SCOPED_TRACE(
                  absl::StrCat("m ", m, " k ", k, " n ", n, " form ", form, " range ", range));
              const int64_t i0 = range == 0 ? 0 : m / 3, i1 = range == 0 ? m : m - m / 4;
              const int64_t p0 = range == 0 ? 0 : panels / 2, p1 = panels;
              U8S8Scale e;
              e.col = form & 1 ? col.data() : nullptr;
              e.zc = form & 2 ? zc.data() : nullptr;
              e.rs = rs.data();
              e.scale = scale.data();
              e.bias = form & 4 ? bias.data() : nullptr;
              constexpr float kSentinel = -7.25f;
              std::vector<float> y(static_cast<size_t>(m * n), kSentinel);
              e.y = y.data();
              e.ldy = n;
              U8S8GemmScaled(k, n, a.data(), lda, packed.data(), i0, i1, p0, p1, e);
              std::vector<float> want(static_cast<size_t>(n));
              for (int64_t i = 0; i < m; ++i) {
                std::fill(want.begin(), want.end(), kSentinel);
                if (i >= i0 && i < i1) {
                  const int64_t j0 = std::min(n, p0 * kU8S8Panel);
                  ScaleAccRow(n - j0, c.data() + i * n + j0, e.col ? e.col + j0 : nullptr,
                              e.zc ? e.zc + j0 : nullptr, rs[i], scale.data() + j0,
                              e.bias ? e.bias + j0 : nullptr, want.data() + j0);
                }
                for (int64_t j = 0; j < n; ++j) {
                  ASSERT_EQ(y[i * n + j], want[j]) << "row " << i << " column " << j;
                }
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dynvm::cpu
