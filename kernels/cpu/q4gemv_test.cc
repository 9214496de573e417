// The 4-bit block-quantized microkernels (q4gemv.h) against a double-precision product over
// weights dequantized here, independently of the kernels: every implementation the CPU runs
// (isa.h), every block size 16..256, K around and off the block and vector widths, odd N, row
// ranges that start and end anywhere, 1..9 activation rows, with and without zero points and bias.
// Tolerance: f32 summation, 2 K 2^-24 sum_i |x[i] w[j, i]| (a block's partial sum and the row sum
// each add at most K roundings of that magnitude).
#include "kernels/cpu/q4gemv.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"

namespace dynvm::cpu {
namespace {

struct Random4Bit {
  int64_t n, k, block, blocks;
  std::vector<uint8_t> packed, zp;
  std::vector<float> scales;
  std::vector<int> q, zps;  // unpacked values [n, k] and zero points [n, blocks]

  Random4Bit(std::mt19937& rng, int64_t n_, int64_t k_, int64_t block_, bool with_zp)
      : n(n_), k(k_), block(block_), blocks((k_ + block_ - 1) / block_) {
    std::uniform_real_distribution<float> u(0.01f, 0.2f);
    packed.assign(n * blocks * block / 2, 0);
    q.assign(n * k, 0);
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < blocks * block; ++i) {
        const int v = static_cast<int>(rng() % 16);  // the padding holds values too
        if (i < k) q[j * k + i] = v;
        packed[j * blocks * block / 2 + i / 2] |= static_cast<uint8_t>(i % 2 ? v << 4 : v);
      }
    }
    scales.resize(n * blocks);
    for (float& s : scales) s = u(rng);
    zps.assign(n * blocks, 8);
    if (with_zp) {
      const int64_t per_row = (blocks + 1) / 2;
      zp.assign(n * per_row, 0);
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t b = 0; b < per_row * 2; ++b) {
          const int v = static_cast<int>(rng() % 16);
          if (b < blocks) zps[j * blocks + b] = v;
          zp[j * per_row + b / 2] |= static_cast<uint8_t>(b % 2 ? v << 4 : v);
        }
      }
    }
  }

  Q4Weights View() const {
    Q4Weights w;
    w.k = k;
    w.block = block;
    w.packed = packed.data();
    w.scales = scales.data();
    w.zero_points = zp.empty() ? nullptr : zp.data();
    return w;
  }

  double W(int64_t j, int64_t i) const {
    const int64_t b = i / block;
    return static_cast<double>(q[j * k + i] - zps[j * blocks + b]) * scales[j * blocks + b];
  }
};

void CheckProduct(const Random4Bit& w, int64_t rows, int64_t r0, int64_t r1, bool bias,
                  std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t ldx = w.k + 3, ldy = w.n + 2;
  std::vector<float> x(rows * ldx), b(w.n);
  for (float& v : x) v = u(rng);
  for (float& v : b) v = u(rng);
  const float sentinel = -12345.0f;
  std::vector<float> y(rows * ldy, sentinel);
  QGemvQ4(rows, x.data(), ldx, w.View(), bias ? b.data() : nullptr, r0, r1, y.data(), ldy);
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t j = 0; j < w.n; ++j) {
      const float got = y[m * ldy + j];
      if (j < r0 || j >= r1) {
        ASSERT_EQ(got, sentinel) << "row " << j << " outside [" << r0 << ", " << r1 << ")";
        continue;
      }
      double want = bias ? b[j] : 0.0, mag = std::fabs(want);
      for (int64_t i = 0; i < w.k; ++i) {
        want += x[m * ldx + i] * w.W(j, i);
        mag += std::fabs(x[m * ldx + i] * w.W(j, i));
      }
      const double tol = 2.0 * static_cast<double>(w.k + 2) * 0x1p-24 * mag + 1e-30;
      ASSERT_NEAR(got, want, tol) << IsaName(ActiveIsa()) << " block " << w.block << " k " << w.k
                                  << " n " << w.n << " rows " << rows << " m " << m << " j " << j
                                  << " zp " << !w.zp.empty();
    }
  }
}

TEST(Q4GemvTest, EveryLevelAndBlockSizeMatchesDoubleProduct) {
  std::mt19937 rng(34);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting scoped(isa);
    for (int64_t block : {16, 32, 64, 128, 256}) {
      for (int64_t k : {int64_t{1}, int64_t{15}, int64_t{17}, block - 1, block, block + 1,
                        3 * block + 5, int64_t{257}, int64_t{1000}}) {
        const int64_t n = 1 + static_cast<int64_t>(rng() % 11);
        const bool with_zp = rng() % 2 == 0;
        Random4Bit w(rng, n, k, block, with_zp);
        const int64_t rows = 1 + static_cast<int64_t>(rng() % 9);
        const int64_t r0 = static_cast<int64_t>(rng() % n);
        const int64_t r1 = r0 + 1 + static_cast<int64_t>(rng() % (n - r0));
        CheckProduct(w, rows, 0, n, rng() % 2 == 0, rng);
        CheckProduct(w, rows, r0, r1, rng() % 2 == 0, rng);
      }
    }
  }
}

// Decode-sized rows: N 37 (groups of four and a tail) at K 4096, one and four activation rows.
TEST(Q4GemvTest, LongRowsMatchDoubleProduct) {
  std::mt19937 rng(35);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting scoped(isa);
    for (int64_t block : {32, 128}) {
      Random4Bit w(rng, 37, 4096, block, block == 32);
      CheckProduct(w, 1, 0, 37, true, rng);
      CheckProduct(w, 4, 3, 37, false, rng);
    }
  }
}

TEST(Q4GemvTest, NaNAndInfinityPropagate) {
  std::mt19937 rng(36);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting scoped(isa);
    Random4Bit w(rng, 5, 70, 32, false);
    std::vector<float> x(2 * 70, 0.5f);
    x[3] = std::numeric_limits<float>::quiet_NaN();
    x[70 + 69] = std::numeric_limits<float>::infinity();
    std::vector<float> y(2 * 5);
    QGemvQ4(2, x.data(), 70, w.View(), nullptr, 0, 5, y.data(), 5);
    for (int64_t j = 0; j < 5; ++j) {
      EXPECT_TRUE(std::isnan(y[j])) << IsaName(isa) << " " << j;
      // inf times a weight of either sign, or NaN where the weight is 0.
      const double wj = w.W(j, 69);
      if (wj != 0) {
        EXPECT_EQ(y[5 + j], wj > 0 ? INFINITY : -INFINITY) << IsaName(isa) << " " << j;
      } else {
        EXPECT_TRUE(std::isnan(y[5 + j])) << IsaName(isa) << " " << j;
      }
    }
  }
}

// (q - zp) * scale rounded once to f32, at every level, every block size, a partial last block.
TEST(Q4GemvTest, DequantizeRowsIsExact) {
  std::mt19937 rng(37);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting scoped(isa);
    for (int64_t block : {16, 32, 64, 128, 256}) {
      for (int64_t k : {block, int64_t{300}}) {
        Random4Bit w(rng, 6, k, block, block != 64);
        std::vector<float> dst(4 * k);
        DequantizeRowsQ4(w.View(), 1, 5, dst.data());
        for (int64_t j = 1; j < 5; ++j) {
          for (int64_t i = 0; i < k; ++i) {
            const int64_t b = i / block;
            const float want = static_cast<float>(w.q[j * k + i] - w.zps[j * w.blocks + b]) *
                               w.scales[j * w.blocks + b];
            ASSERT_EQ(dst[(j - 1) * k + i], want)
                << IsaName(isa) << " block " << block << " k " << k << " " << j << " " << i;
          }
        }
      }
    }
  }
}

// The panels of W^T for the prompt's GEMM (DequantizeQ4ToPanels): every value (q - zp) * scale
// rounded once to f32 at [i - i0][c] of its panel, zeros past N, at every level, every block size,
// K off the 32-value groups and the blocks (an odd number of blocks of 16: a last group of 8
// bytes), the whole K and depth ranges that start past 0 and end inside K, panel ranges that
// start past 0 and end in N's ragged last panel.
TEST(Q4GemvTest, DequantizePanelsIsExact) {
  std::mt19937 rng(38);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting scoped(isa);
    for (int64_t block : {16, 32, 64, 128, 256}) {
      for (int64_t k : {block, 3 * block - 5, int64_t{300}, int64_t{17}}) {
        for (int64_t n : {int64_t{16}, int64_t{37}, int64_t{50}}) {
          Random4Bit w(rng, n, k, block, (n + block) % 3 != 0);
          const int64_t panels = (n + 15) / 16;
          for (auto [i0, i1] : {std::pair<int64_t, int64_t>{0, k},
                                {k / 64 * 32, k},
                                {0, std::min<int64_t>(k, 64)}}) {
            for (int64_t p0 : {int64_t{0}, panels - 1}) {
              const int64_t depth = i1 - i0;
              std::vector<float> dst((panels - p0) * 16 * depth, -1.0f);
              DequantizeQ4ToPanels(w.View(), n, p0, panels, i0, i1, dst.data());
              for (int64_t p = p0; p < panels; ++p) {
                for (int64_t i = i0; i < i1; ++i) {
                  for (int64_t c = 0; c < 16; ++c) {
                    const int64_t j = 16 * p + c, b = i / block;
                    const float want =
                        j >= n ? 0.0f
                               : static_cast<float>(w.q[j * k + i] - w.zps[j * w.blocks + b]) *
                                     w.scales[j * w.blocks + b];
                    ASSERT_EQ(dst[((p - p0) * depth + i - i0) * 16 + c], want)
                        << IsaName(isa) << " block " << block << " k " << k << " n " << n << " ["
                        << i0 << ", " << i1 << ") p " << p << " i " << i << " c " << c;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

// accuracy_level 4 (QGemvQ4Int8): the test's own quantization of each activation block (ORT's:
// amax / 127, round-half-even(x * (127 / amax)) in f32), exact integer block products, summed in
// double. Tolerance (q4gemv.h): f32 rounding of the block scales' product and of the sum over
// blocks and lanes, 2 (blocks + 10) 2^-24 sum_b |s scale| (sum_i |q w4| + zp |sum_i q|); a value
// quantized one step off is a multiple of it larger at these sizes.
void CheckInt8Product(const Random4Bit& w, int64_t rows, int64_t r0, int64_t r1, bool bias,
                      std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t ldx = w.k + 5, ldy = w.n + 1;
  std::vector<float> x(rows * ldx), b(w.n);
  for (float& v : x) v = u(rng);
  for (float& v : b) v = u(rng);
  std::vector<uint8_t> xq(rows * Q8ActivationRowBytes(w.View()));
  QuantizeActivationsQ8(rows, x.data(), ldx, w.View(), xq.data());
  const float sentinel = -12345.0f;
  std::vector<float> y(rows * ldy, sentinel);
  QGemvQ4Int8(rows, xq.data(), w.View(), bias ? b.data() : nullptr, r0, r1, y.data(), ldy);
  for (int64_t m = 0; m < rows; ++m) {
    std::vector<int> q(w.k);
    std::vector<float> sa(w.blocks);
    for (int64_t blk = 0; blk < w.blocks; ++blk) {
      const int64_t i0 = blk * w.block, i1 = std::min(w.k, i0 + w.block);
      float amax = 0.0f;
      for (int64_t i = i0; i < i1; ++i) amax = std::max(amax, std::fabs(x[m * ldx + i]));
      sa[blk] = amax / 127.0f;
      const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
      for (int64_t i = i0; i < i1; ++i) {
        q[i] = static_cast<int>(std::nearbyint(x[m * ldx + i] * inverse));
      }
    }
    for (int64_t j = 0; j < w.n; ++j) {
      const float got = y[m * ldy + j];
      if (j < r0 || j >= r1) {
        ASSERT_EQ(got, sentinel) << "row " << j << " outside [" << r0 << ", " << r1 << ")";
        continue;
      }
      double want = bias ? b[j] : 0.0, mag = std::fabs(want);
      for (int64_t blk = 0; blk < w.blocks; ++blk) {
        // The kernels sum q w4 and the correction zp sum(q) apart (q4gemv.h): the magnitude is
        // sum |q w4| + zp |sum q|.
        const int64_t zp = w.zps[j * w.blocks + blk];
        int64_t d = 0, dmag = 0, qsum = 0;
        for (int64_t i = blk * w.block; i < std::min(w.k, (blk + 1) * w.block); ++i) {
          d += q[i] * (w.q[j * w.k + i] - zp);
          dmag += std::abs(q[i]) * w.q[j * w.k + i];
          qsum += q[i];
        }
        dmag += zp * std::abs(qsum);
        const double s = std::fabs(static_cast<double>(sa[blk]) * w.scales[j * w.blocks + blk]);
        want +=
            static_cast<double>(sa[blk]) * w.scales[j * w.blocks + blk] * static_cast<double>(d);
        mag += s * static_cast<double>(dmag);
      }
      const double tol = 2.0 * static_cast<double>(w.blocks + 10) * 0x1p-24 * mag + 1e-30;
      ASSERT_NEAR(got, want, tol) << IsaName(ActiveIsa()) << " block " << w.block << " k " << w.k
                                  << " n " << w.n << " rows " << rows << " m " << m << " j " << j
                                  << " zp " << !w.zp.empty();
    }
  }
}

TEST(Q4GemvInt8Test, EveryLevelAndBlockSizeMatchesExactBlockProducts) {
  std::mt19937 rng(44);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting scoped(isa);
    for (int64_t block : {16, 32, 64, 128, 256}) {
      for (int64_t k : {int64_t{1}, int64_t{15}, int64_t{17}, block - 1, block, block + 1,
                        2 * block, 3 * block + 5, int64_t{257}, int64_t{1000}}) {
        if (k < 1) continue;
        const int64_t n = 1 + static_cast<int64_t>(rng() % 11);
        for (bool with_zp : {false, true}) {
          Random4Bit w(rng, n, k, block, with_zp);
          const int64_t rows = 1 + static_cast<int64_t>(rng() % 9);
          const int64_t r0 = static_cast<int64_t>(rng() % n);
          const int64_t r1 = r0 + 1 + static_cast<int64_t>(rng() % (n - r0));
          CheckInt8Product(w, rows, 0, n, rng() % 2 == 0, rng);
          CheckInt8Product(w, rows, r0, r1, rng() % 2 == 0, rng);
        }
      }
    }
  }
}

// Decode-sized rows: N 37 at K 4096 (and an odd number of 32-blocks), a prompt-sized row count.
TEST(Q4GemvInt8Test, LongRowsMatchExactBlockProducts) {
  std::mt19937 rng(45);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting scoped(isa);
    for (int64_t block : {32, 64, 128}) {
      Random4Bit w(rng, 37, block == 32 ? 4064 : 4096, block, block != 64);
      CheckInt8Product(w, 1, 0, 37, true, rng);
      CheckInt8Product(w, 17, 3, 37, false, rng);
    }
  }
}

// Prompt-sized row counts (the blocked GEMM from 4 rows, q4gemv_int8.inc): rows around its
// tiles (4 x 24 columns on AVX-512 VNNI, 2 x 16 on AVX2), N around them, every block size, K off
// the block and the 64-value chunks, zero points, output ranges that start and end mid-tile.
TEST(Q4GemvInt8Test, PromptRowsMatchExactBlockProducts) {
  std::mt19937 rng(47);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting scoped(isa);
    for (int64_t block : {16, 32, 64, 128, 256}) {
      for (int64_t k : {block / 2 + 1, 3 * block + 4, int64_t{600}}) {
        for (bool with_zp : {false, true}) {
          const int64_t n = 1 + static_cast<int64_t>(rng() % 60);
          Random4Bit w(rng, n, k, block, with_zp);
          for (int64_t rows : {4, 5, 6, 11, 33}) {
            const int64_t r0 = static_cast<int64_t>(rng() % n);
            const int64_t r1 = r0 + 1 + static_cast<int64_t>(rng() % (n - r0));
            CheckInt8Product(w, rows, 0, n, rng() % 2 == 0, rng);
            CheckInt8Product(w, rows, r0, r1, rng() % 2 == 0, rng);
          }
        }
      }
    }
  }
}

// Ties round half to even, as ORT's quantizer does: amax 127 makes 127 / amax exactly 1, so
// x = 2.5 is 2, 3.5 is 4, -2.5 is -2, 0.5 is 0, 1.5 is 2; the weights are 1 (9 - zp 8), the
// scale 1: y is the sum of the rounded values, exactly.
TEST(Q4GemvInt8Test, TiesRoundHalfToEven) {
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting scoped(isa);
    for (int64_t block : {32, 64}) {
      Q4Weights w;
      w.k = block;
      w.block = block;
      std::vector<uint8_t> packed(block / 2, 0x99);
      std::vector<float> scales = {1.0f};
      w.packed = packed.data();
      w.scales = scales.data();
      std::vector<float> x(block, 0.0f);
      const float values[] = {127.0f, 2.5f, 3.5f, -2.5f, 0.5f, 1.5f, -0.5f, 126.5f};
      for (int i = 0; i < 8; ++i) x[i * (block / 8) + 1] = values[i];
      std::vector<uint8_t> xq(Q8ActivationRowBytes(w));
      QuantizeActivationsQ8(1, x.data(), block, w, xq.data());
      float y = 0.0f;
      QGemvQ4Int8(1, xq.data(), w, nullptr, 0, 1, &y, 1);
      EXPECT_EQ(y, 127.0f + 2 + 4 - 2 + 0 + 2 + 0 + 126) << IsaName(isa) << " block " << block;
    }
  }
}

// The vectorized activation quantizers (AVX2 and up) write the portable one's bytes exactly:
// values, scales, sums and their spread copies, for every block size, K off 16 and off the
// block, ties (x * 127 / amax at n + 0.5), zero blocks, and blocks holding NaN or infinity. The
// portable quantizer itself is checked against the test's own (ORT's) through the products above.
TEST(Q4GemvInt8Test, EveryLevelQuantizesActivationsAsThePortableLoop) {
  std::mt19937 rng(48);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int64_t block : {16, 32, 64, 128, 256}) {
    for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{17}, block - 1, block, block + 9,
                      3 * block + 21, int64_t{1000}}) {
      if (k < 1) continue;
      Q4Weights w;
      w.k = k;
      w.block = block;
      const int64_t rows = 3, row_bytes = Q8ActivationRowBytes(w);
      std::vector<float> x(rows * k);
      for (float& v : x) v = u(rng);
      for (int64_t i = 0; i < k; i += 5) {
        x[i] = 127.0f;  // block amax 127: x * (127 / amax) is x, and n + 0.5 ties
        if (i + 1 < k) x[i + 1] = static_cast<float>(static_cast<int>(rng() % 200) - 100) + 0.5f;
      }
      std::fill(x.begin() + k, x.begin() + k + std::min<int64_t>(k, block), 0.0f);  // zero block
      x[2 * k + (k - 1)] = (k % 2 == 0) ? std::numeric_limits<float>::quiet_NaN()
                                        : std::numeric_limits<float>::infinity();
      std::vector<uint8_t> want(rows * row_bytes, 0xAB);
      {
        ScopedIsaForTesting scoped(Isa::kPortable);
        QuantizeActivationsQ8(rows, x.data(), k, w, want.data());
      }
      for (Isa isa : SupportedIsas()) {
        ScopedIsaForTesting scoped(isa);
        std::vector<uint8_t> got(rows * row_bytes, 0xCD);
        QuantizeActivationsQ8(rows, x.data(), k, w, got.data());
        for (int64_t i = 0; i < rows * row_bytes; ++i) {
          ASSERT_EQ(got[i], want[i]) << IsaName(isa) << " block " << block << " k " << k << " byte "
                                     << i << " of rows of " << row_bytes;
        }
      }
    }
  }
}

TEST(Q4GemvInt8Test, NaNAndInfinityGiveNaN) {
  std::mt19937 rng(46);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting scoped(isa);
    for (int64_t block : {32, 128}) {
      Random4Bit w(rng, 5, 300, block, false);
      std::vector<float> x(2 * 300, 0.5f);
      x[3] = std::numeric_limits<float>::quiet_NaN();
      x[300 + 299] = std::numeric_limits<float>::infinity();
      std::vector<uint8_t> xq(2 * Q8ActivationRowBytes(w.View()));
      QuantizeActivationsQ8(2, x.data(), 300, w.View(), xq.data());
      std::vector<float> y(2 * 5);
      QGemvQ4Int8(2, xq.data(), w.View(), nullptr, 0, 5, y.data(), 5);
      for (float v : y) EXPECT_TRUE(std::isnan(v)) << IsaName(isa);
    }
  }
}

}  // namespace
}  // namespace dynvm::cpu
