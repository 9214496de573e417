// dynvm's packed GEMM (packed_gemm.h) and Winograd F(2x2, 3x3) (winograd.h) at every level this
// CPU runs (isa.h), against the product and the direct convolution summed in double.
//
// Packed GEMM tolerance: a float dot product of k terms accumulated by FMAs (per K block, then
// added to C) is within k * eps * sum |a_p b_p| of the exact sum (eps = 2^-24 per rounding; at
// most one rounding per term; the portable level's separate multiply and add round twice). The
// test asserts |c - exact| <= (k + 2) * 2^-23 * sum |a_p b_p| and reports the largest ratio.
//
// Winograd tolerance (winograd_test.cc in kernels/dnnl/ derives it): |y - exact| <= 2e-5 sqrt(C)
// (1 + |exact| / sqrt(9 C)) for inputs and weights in [-1, 1].
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/cpu/winograd.h"
#include "kernels/testing.h"
#include "kernels/thread_pool.h"

namespace dynvm::cpu {
namespace {

using packed_gemm::kDeepDepth;
using packed_gemm::kDepth;
using packed_gemm::Multiply;
using packed_gemm::MultiplyVector;
using packed_gemm::Pack;
using packed_gemm::PackedFloats;
using testing::kSanitized;

struct Free {
  void operator()(float* p) const { std::free(p); }
};

std::unique_ptr<float, Free> PackedBuffer(int64_t k, int64_t n) {
  const size_t bytes = static_cast<size_t>(PackedFloats(k, n)) * sizeof(float);
  return std::unique_ptr<float, Free>(
      static_cast<float*>(std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) & ~63))));
}

// One product: rows [i0, i1) of C = A B with A [m, k] (row stride lda >= k) and B [k, n] given
// as `trans` 'N' ([k, n], row stride ldw) or 'T' ([n, k]), K in blocks of `depth`. Checks every
// element of those rows against the double-precision sum (`sampled`: of every fifth row and the
// last 25, which meet every row block's tiles and tails), that the other rows are untouched,
// and that the epilogue sees every element of the range exactly once, after its last K block.
void CheckProduct(int64_t m, int64_t n, int64_t k, char trans, int64_t i0, int64_t i1,
                  std::mt19937& rng, double& worst, int64_t depth = kDepth, bool sampled = false) {
  SCOPED_TRACE(absl::StrCat("m=", m, " n=", n, " k=", k, " trans=", std::string(1, trans),
                            " rows [", i0, ", ", i1, ") depth ", depth));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t lda = k + 3, ldw = (trans == 'N' ? n : k) + 5, ldc = n + 2;
  std::vector<float> a(static_cast<size_t>(m * lda)),
      w(static_cast<size_t>((trans == 'N' ? k : n) * ldw));
  for (float& v : a) v = dist(rng);
  for (float& v : w) v = dist(rng);
  auto b_at = [&](int64_t q, int64_t j) {
    return trans == 'N' ? w[static_cast<size_t>(q * ldw + j)] : w[static_cast<size_t>(j * ldw + q)];
  };
  std::unique_ptr<float, Free> packed = PackedBuffer(k, n);
  ASSERT_NE(packed, nullptr);
  Pack(trans, k, n, w.data(), ldw, packed.get());
  constexpr float kSentinel = 12345.0f;
  std::vector<float> c(static_cast<size_t>(m * ldc), kSentinel), seen(c.size(), kSentinel);
  std::vector<int> visits(c.size(), 0);
  Multiply(
      i0, i1, n, k, a.data() + 0, lda, packed.get(), c.data(), ldc,
      [&](int64_t r0, int64_t rows, int64_t j0, int64_t cols) {
        for (int64_t r = r0; r < r0 + rows; ++r) {
          for (int64_t j = j0; j < j0 + cols; ++j) {
            ++visits[static_cast<size_t>(r * ldc + j)];
            seen[static_cast<size_t>(r * ldc + j)] = c[static_cast<size_t>(r * ldc + j)];
          }
        }
      },
      depth);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = static_cast<size_t>(r * ldc + j);
      if (r < i0 || r >= i1 || j >= n) {
        ASSERT_EQ(c[at], kSentinel) << "wrote outside the range at " << r << "," << j;
        ASSERT_EQ(visits[at], 0);
        continue;
      }
      ASSERT_EQ(visits[at], 1) << "epilogue visits at " << r << "," << j;
      ASSERT_EQ(seen[at], c[at]) << "the epilogue ran before the last K block at " << r << "," << j;
      if (sampled && r % 5 != 0 && r < i1 - 25) continue;
      double exact = 0.0, magnitude = 0.0;
      for (int64_t q = 0; q < k; ++q) {
        const double t = static_cast<double>(a[static_cast<size_t>(r * lda + q)]) * b_at(q, j);
        exact += t;
        magnitude += std::abs(t);
      }
      const double bound = (k + 2) * std::ldexp(1.0, -23) * magnitude + 1e-30;
      const double err = std::abs(c[at] - exact);
      worst = std::max(worst, err / bound);
      ASSERT_LE(err, bound) << "at " << r << "," << j << ": " << c[at] << " vs " << exact;
    }
  }
}

// Row tails (1-5 rows past the 6-row tiles; 1-11 past AVX-512's 12-row two-panel passes, 1-23
// past its 24-row one-panel passes), pairs of panels and a last single or ragged panel, K across
// blocks, equal row blocks past kRowBlock, sub-ranges of rows (a thread's share), both weight
// layouts.
TEST(PackedGemm, MatchesTheProductInDouble) {
  std::mt19937 rng(7);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    SCOPED_TRACE(IsaName(isa));
    double worst = 0.0;
    for (char trans : {'N', 'T'}) {
      for (int64_t m : {1, 5, 6, 8, 13, 17, 23, 25, 200}) {
        for (int64_t n : {1, 16, 17, 48, 150}) {
          for (int64_t k : {int64_t{1}, int64_t{9}, kDepth, kDepth + 3, 2 * kDepth + 100}) {
            if (kSanitized && m * n * k > 200000) continue;
            CheckProduct(m, n, k, trans, 0, m, rng, worst);
            if (m >= 13) CheckProduct(m, n, k, trans, 5, m - 1, rng, worst);
          }
        }
      }
    }
    std::printf("%s: largest error / bound: %.3g\n", IsaName(isa), worst);
  }
}

// Products of many rows: several row blocks (equal blocks of 138 and 137 rows past kRowBlock,
// each ending in a 12-row tail of 5 or 6 rows; a sub-range starting mid-tile), several depth
// blocks with a ragged last one, column spans (Multiply's C-in-L2 spans: 640 columns at
// 192-row blocks) with a ragged last span, column block and panel, and kDeepDepth's blocks of
// four K segments with a ragged last segment; each row block prefetches the next one's A.
TEST(PackedGemm, ManyRowsMatchTheProductInDouble) {
  std::mt19937 rng(10);
  struct Case {
    int64_t m, n, k, depth, i0, i1;
  };
  const Case cases[] = {
      {413, 150, 2 * kDepth + 37, kDepth, 0, 413},
      {413, 150, 2 * kDepth + 37, kDepth, 7, 400},
      {192, 700, kDepth + 5, kDepth, 0, 192},
      {250, 40, kDeepDepth + 300, kDeepDepth, 0, 250},
      {2 * 192 + 1, 33, 2 * kDepth, kDepth, 0, 385},
  };
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    SCOPED_TRACE(IsaName(isa));
    double worst = 0.0;
    for (const Case& c : cases) {
      if (kSanitized && isa == Isa::kPortable && c.m * c.n * c.k > 20000000) continue;
      CheckProduct(c.m, c.n, c.k, 'T', c.i0, c.i1, rng, worst, c.depth, /*sampled=*/true);
    }
    std::printf("%s: many rows: largest error / bound: %.3g\n", IsaName(isa), worst);
  }
}

// packed_gemm::MultiplyVector (the GEMV on packed panels) against the double-precision sum:
// ragged last panels (N not a multiple of 16), K not a multiple of the eight chains, sub-ranges of
// panels (a thread's share: the other columns untouched), both weight layouts; at 2 threads the
// panels split over the kernels' pool, as the Linear and MatMul kernels split them.
void CheckVector(int64_t n, int64_t k, char trans, int threads, std::mt19937& rng, double& worst) {
  SCOPED_TRACE(
      absl::StrCat("n=", n, " k=", k, " trans=", std::string(1, trans), " threads=", threads));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t ldw = (trans == 'N' ? n : k) + 3;
  std::vector<float> x(static_cast<size_t>(k)),
      w(static_cast<size_t>((trans == 'N' ? k : n) * ldw));
  for (float& v : x) v = dist(rng);
  for (float& v : w) v = dist(rng);
  std::unique_ptr<float, Free> packed = PackedBuffer(k, n);
  ASSERT_NE(packed, nullptr);
  Pack(trans, k, n, w.data(), ldw, packed.get());
  const int64_t panels = (n + 15) / 16;
  constexpr float kSentinel = 12345.0f;
  for (int64_t p0 : {int64_t{0}, panels / 2}) {
    std::vector<float> y(static_cast<size_t>(panels * 16 + 8), kSentinel);
    auto pool = ThreadPool::Create(threads);
    ASSERT_TRUE(pool.ok()) << pool.status();
    (*pool)->ParallelFor(panels - p0, 1, [&](int64_t b, int64_t e) {
      MultiplyVector(p0 + b, p0 + e, n, k, x.data(), packed.get(), y.data());
    });
    for (int64_t j = 0; j < static_cast<int64_t>(y.size()); ++j) {
      if (j < p0 * 16 || j >= n) {
        ASSERT_EQ(y[static_cast<size_t>(j)], kSentinel) << "wrote outside the columns at " << j;
        continue;
      }
      double exact = 0.0, magnitude = 0.0;
      for (int64_t q = 0; q < k; ++q) {
        const double wv = trans == 'N' ? w[static_cast<size_t>(q * ldw + j)]
                                       : w[static_cast<size_t>(j * ldw + q)];
        exact += static_cast<double>(x[static_cast<size_t>(q)]) * wv;
        magnitude += std::abs(static_cast<double>(x[static_cast<size_t>(q)]) * wv);
      }
      const double bound = (k + 2) * std::ldexp(1.0, -23) * magnitude + 1e-30;
      const double err = std::abs(y[static_cast<size_t>(j)] - exact);
      worst = std::max(worst, err / bound);
      ASSERT_LE(err, bound) << "at " << j << ": " << y[static_cast<size_t>(j)] << " vs " << exact;
    }
  }
}

TEST(PackedGemm, VectorMatchesTheProductInDouble) {
  std::mt19937 rng(9);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    SCOPED_TRACE(IsaName(isa));
    double worst = 0.0;
    for (char trans : {'N', 'T'}) {
      for (int threads : {1, 2}) {
        for (int64_t n : {1, 15, 16, 17, 70, 150}) {
          for (int64_t k : {0, 1, 3, 7, 8, 9, 100, 1029}) {
            CheckVector(n, k, trans, threads, rng, worst);
          }
        }
      }
    }
    std::printf("%s: vector: largest error / bound: %.3g\n", IsaName(isa), worst);
  }
}

// AVX2 and AVX-512 give the same bits (each element one FMA chain in K order, K blocks added
// through C in the same order).
TEST(PackedGemm, Avx2AndAvx512AgreeBitForBit) {
  if (!IsaSupported(Isa::kAvx512)) GTEST_SKIP() << "needs AVX-512";
  std::mt19937 rng(8);
  const int64_t m = 53, n = 70, k = 2 * kDepth + 11;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(m * k), w(k * n);
  for (float& v : a) v = dist(rng);
  for (float& v : w) v = dist(rng);
  std::unique_ptr<float, Free> packed = PackedBuffer(k, n);
  Pack('N', k, n, w.data(), n, packed.get());
  std::vector<float> c[2] = {std::vector<float>(m * n), std::vector<float>(m * n)};
  for (int i = 0; i < 2; ++i) {
    ScopedIsaForTesting level(i == 0 ? Isa::kAvx2 : Isa::kAvx512);
    Multiply(0, m, n, k, a.data(), k, packed.get(), c[i].data(), n,
             [](int64_t, int64_t, int64_t, int64_t) {});
  }
  EXPECT_EQ(c[0], c[1]);
}

// K in blocks of kDeepDepth (dynvm::MatMul on panels) at every level, over K of several deep
// blocks, with rows of a partial tile: within the rounding bound of the double-precision sum,
// and the same as kDepth's blocks where K fits one deep block's first kDepth (K = kDepth).
TEST(PackedGemm, DeepDepthBlocksMatchADoubleSum) {
  std::mt19937 rng(9);
  const int64_t m = 29, n = 37, k = 2 * kDeepDepth + 13;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(m * k), w(k * n);
  for (float& v : a) v = dist(rng);
  for (float& v : w) v = dist(rng);
  std::unique_ptr<float, Free> packed = PackedBuffer(k, n);
  Pack('N', k, n, w.data(), n, packed.get());
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsaForTesting level(isa);
    std::vector<float> c[2] = {std::vector<float>(m * n), std::vector<float>(m * n)};
    for (int i = 0; i < 2; ++i) {
      Multiply(
          0, m, n, k, a.data(), k, packed.get(), c[i].data(), n,
          [](int64_t, int64_t, int64_t, int64_t) {}, i == 0 ? kDepth : kDeepDepth);
    }
    EXPECT_NE(c[0], c[1]);  // block sums added through C: another rounding order
    {
      std::vector<float> d[2] = {std::vector<float>(m * n), std::vector<float>(m * n)};
      for (int i = 0; i < 2; ++i) {
        Multiply(
            0, m, n, kDepth, a.data(), k, packed.get(), d[i].data(), n,
            [](int64_t, int64_t, int64_t, int64_t) {}, i == 0 ? kDepth : kDeepDepth);
      }
      EXPECT_EQ(d[0], d[1]);
    }
    double worst = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, scale = 0;
        for (int64_t q = 0; q < k; ++q) {
          sum += double{a[i * k + q]} * w[q * n + j];
          scale += std::abs(double{a[i * k + q]} * w[q * n + j]);
        }
        worst = std::max(worst, std::abs(c[1][i * n + j] - sum) / ((k + 1) * 0x1p-24 * scale));
      }
    }
    EXPECT_LE(worst, 1.0);
  }
}

// Pack's layout: panel p holds B[q][16p + j] at 16 K p + 16 q + j, zeros past N.
TEST(PackedGemm, PackLayout) {
  const int64_t k = 3, n = 20;
  std::vector<float> w(static_cast<size_t>(k * n));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i + 1);
  std::unique_ptr<float, Free> packed = PackedBuffer(k, n);
  ASSERT_EQ(PackedFloats(k, n), 2 * 16 * k);
  Pack('N', k, n, w.data(), n, packed.get());
  for (int64_t p = 0; p < 2; ++p) {
    for (int64_t q = 0; q < k; ++q) {
      for (int64_t j = 0; j < 16; ++j) {
        const float want = 16 * p + j < n ? w[static_cast<size_t>(q * n + 16 * p + j)] : 0.0f;
        EXPECT_EQ(packed.get()[16 * k * p + 16 * q + j], want) << p << " " << q << " " << j;
      }
    }
  }
}

// ---- Winograd ----

struct Conv {
  int64_t n, c, m, h, w;
  int64_t pad_top, pad_left, pad_bottom, pad_right;
  winograd::Act act;
  bool bias, sum;
};

// One convolution through RunBlocks (all blocks, in two calls, as two threads would) against
// the direct convolution in double with the same post-ops.
void CheckWinograd(const Conv& cv, std::mt19937& rng, double& worst) {
  SCOPED_TRACE(absl::StrCat(cv.n, "x", cv.h, "x", cv.w, "x", cv.c, " -> ", cv.m, " pads ",
                            cv.pad_top, ",", cv.pad_left, ",", cv.pad_bottom, ",", cv.pad_right,
                            " act ", static_cast<int>(cv.act), cv.bias ? " bias" : "",
                            cv.sum ? " sum" : ""));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  winograd::Shape s{cv.n,
                    cv.c,
                    cv.m,
                    cv.h,
                    cv.w,
                    cv.pad_top,
                    cv.pad_left,
                    cv.h + cv.pad_top + cv.pad_bottom - 2,
                    cv.w + cv.pad_left + cv.pad_right - 2};
  std::vector<float> x(cv.n * cv.h * cv.w * cv.c), w(cv.m * cv.c * 9), bias(cv.m),
      sum(cv.n * s.oh * s.ow * cv.m), y(sum.size(), 777.0f);
  for (auto* v : {&x, &w, &bias, &sum}) {
    for (float& f : *v) f = dist(rng);
  }
  const int64_t strides[4] = {cv.c * 9, 9, 3, 1};  // [m, c, 3, 3]
  std::vector<float> packed(winograd::PackedWeightsFloats(cv.c, cv.m));
  winograd::PackWeights(w.data(), strides, cv.c, cv.m, packed.data());
  winograd::PostOps post;
  post.bias = cv.bias ? bias.data() : nullptr;
  post.sum = cv.sum ? sum.data() : nullptr;
  post.act = cv.act;
  post.alpha = cv.act == winograd::Act::kClip ? -0.5f : 0.1f;
  post.beta = 0.75f;
  const int64_t blocks = winograd::Blocks(s);
  std::vector<float> ws(winograd::WorkspaceFloats(s) + 16);
  float* wsp = ws.data() + (16 - (reinterpret_cast<uintptr_t>(ws.data()) / 4) % 16) % 16;
  winograd::RunBlocks(s, x.data(), packed.data(), post, y.data(), 0, blocks / 2, wsp);
  winograd::RunBlocks(s, x.data(), packed.data(), post, y.data(), blocks / 2, blocks, wsp);
  const double scale = 2e-5 * std::sqrt(static_cast<double>(cv.c));
  const double norm = std::sqrt(9.0 * static_cast<double>(cv.c));
  for (int64_t b = 0; b < cv.n; ++b) {
    for (int64_t oy = 0; oy < s.oh; ++oy) {
      for (int64_t ox = 0; ox < s.ow; ++ox) {
        for (int64_t o = 0; o < cv.m; ++o) {
          double acc = 0;
          for (int64_t ky = 0; ky < 3; ++ky) {
            for (int64_t kx = 0; kx < 3; ++kx) {
              const int64_t iy = oy + ky - cv.pad_top, ix = ox + kx - cv.pad_left;
              if (iy < 0 || iy >= cv.h || ix < 0 || ix >= cv.w) continue;
              for (int64_t i = 0; i < cv.c; ++i) {
                acc += double{x[((b * cv.h + iy) * cv.w + ix) * cv.c + i]} *
                       w[((o * cv.c + i) * 3 + ky) * 3 + kx];
              }
            }
          }
          const int64_t at = ((b * s.oh + oy) * s.ow + ox) * cv.m + o;
          if (cv.bias) acc += bias[o];
          if (cv.sum) acc += sum[at];
          switch (cv.act) {
            case winograd::Act::kRelu:
              acc = std::max(acc, 0.0);
              break;
            case winograd::Act::kLeakyRelu:
              acc = acc < 0 ? 0.1 * acc : acc;
              break;
            case winograd::Act::kClip:
              acc = std::min(std::max(acc, -0.5), 0.75);
              break;
            case winograd::Act::kSigmoid:
              acc = 1 / (1 + std::exp(-acc));
              break;
            case winograd::Act::kTanh:
              acc = std::tanh(acc);
              break;
            default:
              break;
          }
          const double err = std::fabs(y[at] - acc);
          worst = std::max(worst, err);
          ASSERT_LE(err, scale * (1 + std::fabs(acc) / norm))
              << "at " << b << "," << oy << "," << ox << "," << o << ": " << y[at] << " vs " << acc;
        }
      }
    }
  }
}

// Channel counts around the 8-lane vectors and 16-column panels, odd sizes (partial edge
// tiles), pads 0, 1 and asymmetric, batches, post-ops and the residual.
TEST(Winograd, MatchesTheDirectConvolutionInDouble) {
  std::mt19937 rng(9);
  using A = winograd::Act;
  const Conv convs[] = {
      {1, 32, 32, 8, 20, 1, 1, 1, 1, A::kRelu, true, false},
      {2, 33, 17, 5, 7, 0, 0, 0, 0, A::kNone, false, true},
      {1, 40, 50, 9, 11, 0, 1, 1, 0, A::kLeakyRelu, true, true},
      {3, 7, 9, 4, 4, 2, 0, 1, 2, A::kClip, true, false},
      {1, 64, 48, 6, 13, 1, 1, 1, 1, A::kSigmoid, false, false},
      {1, 16, 24, 3, 3, 1, 2, 0, 1, A::kTanh, true, true},
  };
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    double worst = 0;
    for (const Conv& cv : convs) {
      SCOPED_TRACE(IsaName(isa));
      CheckWinograd(cv, rng, worst);
    }
    std::printf("%s: largest |winograd - exact|: %.3g\n", IsaName(isa), worst);
  }
}

}  // namespace
}  // namespace dynvm::cpu
