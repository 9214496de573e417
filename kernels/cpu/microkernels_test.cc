// Every implementation of the f32 and quantization microkernels that this CPU runs (isa.h:
// portable always, then AVX2, AVX-512, AVX-512 VNNI), each against an oracle of its own: the
// same IEEE operation per element in scalar code where the kernel promises exact results, and a
// computation in double with the kernel's stated bound otherwise. Lengths around every vector
// width (1, 7, 15, 16, 17, 31, 33, 64, 65, 129...) leave every kind of tail.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/depthwise.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/glu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/rows.h"

namespace dynvm::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const int64_t kLengths[] = {1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 129};

std::vector<float> Uniform(int64_t n, std::mt19937& rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Bitwise equality (NaN payloads aside: any NaN matches any NaN).
::testing::AssertionResult SameFloat(float got, float want) {
  if ((std::isnan(got) && std::isnan(want)) || std::memcmp(&got, &want, sizeof(float)) == 0) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << got << " vs " << want;
}

// The level set by DYNVM_CPU_ISA (the ctest kernels_cpu_test_avx2 runs this binary with it):
// first, before any test changes the level.
TEST(Isa, TheEnvironmentLowersTheLevel) {
  const char* env = std::getenv("DYNVM_CPU_ISA");
  const std::optional<Isa> want = env == nullptr ? std::nullopt : ParseIsa(env);
  if (!want.has_value()) {
    EXPECT_EQ(ActiveIsa(), DetectedIsa());
    return;
  }
  EXPECT_EQ(ActiveIsa(), std::min(*want, DetectedIsa())) << env;
}

TEST(Isa, NamesParseAndLevelsCanBeSet) {
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    EXPECT_EQ(ParseIsa(IsaName(isa)), isa);
  }
  EXPECT_FALSE(ParseIsa("sse9").has_value());
  const std::vector<Isa> all = SupportedIsas();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front(), Isa::kPortable);
  EXPECT_EQ(all.back(), DetectedIsa());
  const Isa before = ActiveIsa();
  for (Isa isa : all) {
    ScopedIsaForTesting level(isa);
    EXPECT_EQ(ActiveIsa(), isa);
  }
  EXPECT_EQ(ActiveIsa(), before);
  std::printf("detected %s, bf16 %d\n", IsaName(DetectedIsa()), HasAvx512Bf16() ? 1 : 0);
}

// ---- rows.h ----

TEST(Rows, SoftmaxMatchesDoubleAndItsNonFiniteRules) {
  std::mt19937 rng(1);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t n : kLengths) {
      const int64_t rows = 3;
      std::vector<float> x = Uniform(rows * n, rng, -20, 20);
      std::vector<float> y(x.size(), -1.0f);
      SoftmaxRows(rows, n, x.data(), y.data());
      for (int64_t r = 0; r < rows; ++r) {
        double m = -1e300, sum = 0;
        for (int64_t j = 0; j < n; ++j) m = std::max(m, double{x[r * n + j]});
        for (int64_t j = 0; j < n; ++j) sum += std::exp(x[r * n + j] - m);
        for (int64_t j = 0; j < n; ++j) {
          const double want = std::exp(x[r * n + j] - m) / sum;
          ASSERT_NEAR(y[r * n + j], want, 2e-6 * want + 1e-12)
              << IsaName(isa) << " n " << n << " r " << r << " j " << j;
        }
      }
      // In place gives the same bits.
      std::vector<float> z = x;
      SoftmaxRows(rows, n, z.data(), z.data());
      for (size_t i = 0; i < z.size(); ++i) ASSERT_TRUE(SameFloat(z[i], y[i])) << i;
    }
    // -inf entries give exactly 0; a row holding NaN or +inf, or only -inf, is NaN throughout.
    const int64_t n = 19;
    std::vector<float> x(4 * n, 0.5f);
    x[0 * n + 3] = -kInf;
    x[1 * n + 18] = kNaN;
    x[2 * n + 17] = kInf;
    for (int64_t j = 0; j < n; ++j) x[3 * n + j] = -kInf;
    std::vector<float> y(x.size());
    SoftmaxRows(4, n, x.data(), y.data());
    EXPECT_EQ(y[3], 0.0f) << IsaName(isa);
    EXPECT_NEAR(y[0], 1.0 / 18, 1e-7) << IsaName(isa);
    for (int64_t r = 1; r < 4; ++r) {
      for (int64_t j = 0; j < n; ++j) EXPECT_TRUE(std::isnan(y[r * n + j])) << r << " " << j;
    }
  }
}

// The reference kernel's LogSoftmax of one row (kernels/reference/reduce.cc RunSoftmax): max,
// sum of std::exp and the log in double, NaN-skipping max, rounded once to float.
std::vector<float> LogSoftmaxInDouble(const float* x, int64_t n) {
  double m = -std::numeric_limits<double>::infinity(), sum = 0;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, double{x[j]});
  for (int64_t j = 0; j < n; ++j) sum += std::exp(x[j] - m);
  const double log_sum = std::log(sum);
  std::vector<float> y(n);
  for (int64_t j = 0; j < n; ++j) y[j] = static_cast<float>(x[j] - m - log_sum);
  return y;
}

// Against the reference kernel's arithmetic in double at every level, rows of 1 to 32000 (one to
// 32 stack blocks of exps) with values spread wide, one dominant element, and -inf entries: within
// FastExp's error (2 ulp of each exp, so ~4e-7 of the sum, and as much absolute in its log), never
// above 0, exactly 0 for a row's only element, and the same bits in place.
TEST(Rows, LogSoftmaxMatchesDoubleNeverExceedsZeroAndItsNonFiniteRules) {
  std::mt19937 rng(11);
  const int64_t lengths[] = {1, 2, 7, 15, 16, 17, 33, 1000, 1023, 1024, 1025, 32000};
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t n : lengths) {
      const int64_t rows = 4;
      std::vector<float> x = Uniform(rows * n, rng, -30, 30);
      x[1 * n + n / 2] = 200.0f;  // row 1: one dominant element (its log-probability ~ -1e-26)
      for (int64_t j = 1; j < n; j += 3) x[2 * n + j] = -kInf;  // row 2: -inf entries
      for (int64_t j = 0; j < n; ++j) x[3 * n + j] = 1e4f + static_cast<float>(j % 5);  // large
      std::vector<float> y(x.size(), 1.0f);
      LogSoftmaxRows(rows, n, x.data(), y.data());
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<float> want = LogSoftmaxInDouble(x.data() + r * n, n);
        for (int64_t j = 0; j < n; ++j) {
          const float got = y[r * n + j];
          ASSERT_LE(got, 0.0f) << IsaName(isa) << " n " << n << " r " << r << " j " << j;
          if (std::isinf(want[j])) {
            ASSERT_EQ(got, want[j]) << IsaName(isa) << " n " << n << " r " << r << " j " << j;
            continue;
          }
          ASSERT_NEAR(got, want[j], 1e-6 + 1.2e-7 * std::abs(want[j]))
              << IsaName(isa) << " n " << n << " r " << r << " j " << j;
        }
      }
      if (n == 1) {
        for (int64_t r = 0; r < rows; ++r) ASSERT_TRUE(SameFloat(y[r], 0.0f)) << IsaName(isa);
      }
      std::vector<float> z = x;
      LogSoftmaxRows(rows, n, z.data(), z.data());
      for (size_t i = 0; i < z.size(); ++i) ASSERT_TRUE(SameFloat(z[i], y[i])) << i;
    }
    // -inf entries give -inf; a row holding NaN or +inf, or only -inf, is NaN throughout (the
    // reference kernel's exp(inf - inf) and exp(-inf - -inf)).
    const int64_t n = 19;
    std::vector<float> x(4 * n, 0.5f);
    x[0 * n + 3] = -kInf;
    x[1 * n + 18] = kNaN;
    x[2 * n + 17] = kInf;
    for (int64_t j = 0; j < n; ++j) x[3 * n + j] = -kInf;
    std::vector<float> y(x.size());
    LogSoftmaxRows(4, n, x.data(), y.data());
    EXPECT_EQ(y[3], -kInf) << IsaName(isa);
    EXPECT_NEAR(y[0], -std::log(18.0), 1e-6) << IsaName(isa);
    for (int64_t r = 1; r < 4; ++r) {
      for (int64_t j = 0; j < n; ++j) EXPECT_TRUE(std::isnan(y[r * n + j])) << r << " " << j;
    }
  }
}

TEST(Rows, NormalizationsMatchDouble) {
  std::mt19937 rng(2);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t n : kLengths) {
      const int64_t rows = 2;
      const float eps = 1e-5f;
      std::vector<float> x = Uniform(rows * n, rng, -3, 5), scale = Uniform(n, rng),
                         bias = Uniform(n, rng);
      for (int form = 0; form < 4; ++form) {
        const float* s = form & 1 ? scale.data() : nullptr;
        const float* b = form & 2 ? bias.data() : nullptr;
        std::vector<float> y(x.size()), z(x.size());
        LayerNormRows(rows, n, x.data(), s, b, eps, y.data());
        RmsNormRows(rows, n, x.data(), s, eps, z.data());
        for (int64_t r = 0; r < rows; ++r) {
          double mean = 0, var = 0, ms = 0;
          for (int64_t j = 0; j < n; ++j) mean += x[r * n + j];
          mean /= n;
          for (int64_t j = 0; j < n; ++j) {
            var += (x[r * n + j] - mean) * (x[r * n + j] - mean);
            ms += double{x[r * n + j]} * x[r * n + j];
          }
          var /= n;
          ms /= n;
          for (int64_t j = 0; j < n; ++j) {
            const double sj = s != nullptr ? s[j] : 1.0, bj = b != nullptr ? b[j] : 0.0;
            const double ln = (x[r * n + j] - mean) / std::sqrt(var + eps) * sj + bj;
            const double rms = x[r * n + j] / std::sqrt(ms + eps) * sj;
            const std::string where = absl::StrCat(IsaName(isa), " n ", n, " form ", form);
            ASSERT_NEAR(y[r * n + j], ln, 2e-5 * (1 + std::fabs(ln))) << where;
            ASSERT_NEAR(z[r * n + j], rms, 2e-5 * (1 + std::fabs(rms))) << where;
          }
        }
      }
    }
  }
}

// ---- elementwise.h ----

// The reference for BinaryOp: one IEEE operation.
float ApplyBinary(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      return a / b;
  }
  return 0.0f;
}

TEST(Elementwise, BinaryRowsAreExactForEveryLayout) {
  std::mt19937 rng(3);
  const BinaryOp ops[] = {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv};
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t n : kLengths) {
      const int64_t rows = 3;
      std::vector<float> a = Uniform(rows * n, rng), b = Uniform(rows * n, rng, 0.5f, 2);
      a[0] = kNaN;
      b[n - 1] = 0.0f;
      for (BinaryOp op : ops) {
        for (int64_t bs : {n, int64_t{0}, int64_t{-1}}) {
          std::vector<float> y(a.size());
          BinaryRows(op, rows, n, a.data(), b.data(), bs, y.data());
          std::vector<float> inplace = a;
          BinaryRows(op, rows, n, inplace.data(), b.data(), bs, inplace.data());
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t j = 0; j < n; ++j) {
              const float bv = bs < 0 ? b[0] : b[r * bs + j];
              const float want = ApplyBinary(op, a[r * n + j], bv);
              ASSERT_TRUE(SameFloat(y[r * n + j], want)) << IsaName(isa) << " n " << n;
              ASSERT_TRUE(SameFloat(inplace[r * n + j], want)) << IsaName(isa) << " n " << n;
            }
          }
        }
      }
    }
  }
}

// BinaryStrided over random shapes of rank 1 to 6: each operand's dims a random mix of the
// output's and 1 (both may broadcast; a size-1 output axis anywhere), a read through a
// transposed view half the time, the output written in one call and in two ranges cut at a
// random element (as two threads would), and in place over a dense a. Against a loop over
// multi-indices: the same bits, NaN and infinities included.
TEST(Elementwise, BinaryStridedIsExactForEveryBroadcast) {
  std::mt19937 rng(5);
  const BinaryOp ops[] = {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv};
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int trial = 0; trial < 300; ++trial) {
      const int rank = 1 + static_cast<int>(rng() % 6);
      int64_t dims[6], ad[6], bd[6];
      int64_t numel = 1;
      for (int i = 0; i < rank; ++i) {
        dims[i] = rng() % 5 == 0 ? 1 : 1 + static_cast<int64_t>(rng() % (i == rank - 1 ? 40 : 5));
        numel *= dims[i];
        ad[i] = rng() % 3 == 0 ? 1 : dims[i];
        bd[i] = rng() % 3 == 0 ? 1 : dims[i];
      }
      if (trial % 4 == 0) std::copy(dims, dims + rank, ad);  // a dense: in place too
      // Row-major strides of each operand's own dims, 0 where it broadcasts; a transposed
      // view of a: its storage holds the axes reversed.
      const bool transposed = trial % 4 != 0 && rng() % 2 == 0;
      int64_t as[6], bs[6], an = 1, bn = 1;
      for (int i = rank - 1; i >= 0; --i) {
        bs[i] = bd[i] == 1 ? 0 : bn;
        bn *= bd[i];
      }
      for (int k = 0; k < rank; ++k) {
        const int i = transposed ? k : rank - 1 - k;
        as[i] = ad[i] == 1 ? 0 : an;
        an *= ad[i];
      }
      std::vector<float> a = Uniform(an, rng), b = Uniform(bn, rng, 0.5f, 2);
      a[rng() % an] = kNaN;
      b[rng() % bn] = std::numeric_limits<float>::infinity();
      if (an > 1) a[rng() % an] = -0.0f;
      for (BinaryOp op : ops) {
        std::vector<float> want(numel);
        for (int64_t e = 0; e < numel; ++e) {
          int64_t oa = 0, ob = 0;
          for (int64_t rest = e, i = rank - 1; i >= 0; --i) {
            oa += rest % dims[i] * as[i];
            ob += rest % dims[i] * bs[i];
            rest /= dims[i];
          }
          want[e] = ApplyBinary(op, a[oa], b[ob]);
        }
        const int64_t cut = static_cast<int64_t>(rng() % (numel + 1));
        std::vector<float> whole(numel), split(numel);
        BinaryStrided(op, rank, dims, a.data(), as, b.data(), bs, 0, numel, whole.data());
        BinaryStrided(op, rank, dims, a.data(), as, b.data(), bs, 0, cut, split.data());
        BinaryStrided(op, rank, dims, a.data(), as, b.data(), bs, cut, numel, split.data());
        std::vector<float> inplace = a;
        const bool dense = std::equal(ad, ad + rank, dims) && !transposed;
        if (dense) {
          BinaryStrided(op, rank, dims, inplace.data(), as, b.data(), bs, 0, numel, inplace.data());
        }
        for (int64_t e = 0; e < numel; ++e) {
          ASSERT_TRUE(SameFloat(whole[e], want[e])) << IsaName(isa) << " trial " << trial;
          ASSERT_TRUE(SameFloat(split[e], want[e])) << IsaName(isa) << " cut " << cut;
          if (dense) ASSERT_TRUE(SameFloat(inplace[e], want[e])) << IsaName(isa);
        }
      }
    }
  }
}

TEST(Elementwise, WhereUnaryMasksAndScansAreExact) {
  std::mt19937 rng(4);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t n : kLengths) {
      std::vector<float> x = Uniform(2 * n, rng), y = Uniform(2 * n, rng);
      x[n / 2] = -0.0f;
      x[n - 1] = kNaN;
      std::vector<uint8_t> c(2 * n);
      for (int64_t i = 0; i < 2 * n; ++i) c[i] = rng() % 2;
      // Where over two blocks: vectors, scalar x, scalar y, both scalar.
      for (int form = 0; form < 4; ++form) {
        const int64_t xs = form & 1 ? -1 : n, ys = form & 2 ? -1 : n;
        std::vector<float> out(2 * n);
        WhereBlocks(2, n, c.data(), n, x.data(), xs, y.data(), ys, out.data());
        for (int64_t i = 0; i < 2 * n; ++i) {
          const float want = c[i] ? (xs < 0 ? x[0] : x[i]) : (ys < 0 ? y[0] : y[i]);
          ASSERT_TRUE(SameFloat(out[i], want)) << IsaName(isa) << " form " << form;
        }
      }
      for (UnaryOp op :
           {UnaryOp::kRelu, UnaryOp::kLeakyRelu, UnaryOp::kAbs, UnaryOp::kNeg, UnaryOp::kSqrt}) {
        std::vector<float> out(n);
        Unary(op, 0.25f, n, x.data(), out.data());
        for (int64_t i = 0; i < n; ++i) {
          const float v = x[i];
          const float want = op == UnaryOp::kRelu        ? (v < 0.0f ? 0.0f : v)
                             : op == UnaryOp::kLeakyRelu ? (v < 0.0f ? 0.25f * v : v)
                             : op == UnaryOp::kAbs       ? std::fabs(v)
                             : op == UnaryOp::kNeg       ? -v
                                                         : std::sqrt(v);
          ASSERT_TRUE(SameFloat(out[i], want)) << IsaName(isa) << " op " << static_cast<int>(op);
        }
      }
      std::vector<float> acc = y;
      AddTo(n, x.data(), acc.data());
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(SameFloat(acc[i], y[i] + x[i]));
      std::unique_ptr<bool[]> m(new bool[n]);
      for (int64_t i = 0; i < n; ++i) m[i] = c[i] != 0;
      acc = y;
      FillWhere(n, m.get(), false, -kInf, acc.data());
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(SameFloat(acc[i], m[i] ? y[i] : -kInf));
      // Scans: a NaN (or a large value) at each position in turn, then none.
      for (int64_t at = 0; at <= n; ++at) {
        std::vector<float> f(n, 1.0f);
        std::vector<int32_t> v(n, -7);
        if (at < n) {
          f[at] = at % 2 ? kNaN : -kNaN;
          v[at] = at % 3 == 0 ? std::numeric_limits<int32_t>::min() : -(1 << 24);
        }
        std::vector<uint32_t> bits(n);
        std::memcpy(bits.data(), f.data(), n * sizeof(float));
        ASSERT_EQ(AnyNaN(n, bits.data()), at < n) << IsaName(isa) << " at " << at;
        ASSERT_EQ(AnyAbsAtLeast(n, v.data(), 1 << 24), at < n) << IsaName(isa) << " at " << at;
      }
      std::vector<float> inf(n, kInf);
      std::vector<uint32_t> inf_bits(n);
      std::memcpy(inf_bits.data(), inf.data(), n * sizeof(float));
      EXPECT_FALSE(AnyNaN(n, inf_bits.data()));
    }
  }
}

TEST(Elementwise, MaxOverTapsPropagatesNaN) {
  std::mt19937 rng(5);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t c : kLengths) {
      const int64_t taps[] = {0, 3 * c, c, 5 * c};
      std::vector<float> x = Uniform(6 * c, rng);
      x[3 * c + c / 2] = kNaN;
      for (int64_t n_taps = 1; n_taps <= 4; ++n_taps) {
        std::vector<float> y(c);
        MaxOverTaps(c, x.data(), taps, n_taps, y.data());
        for (int64_t j = 0; j < c; ++j) {
          float want = x[taps[0] + j];
          for (int64_t t = 1; t < n_taps; ++t) {
            const float v = x[taps[t] + j];
            want = (v > want || std::isnan(v)) ? v : want;
          }
          ASSERT_TRUE(SameFloat(y[j], want)) << IsaName(isa) << " c " << c << " taps " << n_taps;
        }
      }
    }
  }
}

// ---- activation.h ----

// Values over the functions' range, the specials, and a length with every kind of tail.
std::vector<float> ActivationInputs() {
  std::vector<float> x;
  for (int i = -140000; i <= 140000; i += 7) x.push_back(static_cast<float>(i) * 1e-4f);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 3e-8f, 1e30f, -1e30f, -20.0f, -87.0f, 30.0f}) {
    x.push_back(v);
  }
  x.push_back(kInf);
  x.push_back(-kInf);
  x.push_back(kNaN);
  while (x.size() % 32 != 13) x.push_back(0.25f);
  return x;
}

TEST(Activation, ErfAndTheGelusMatchDouble) {
  const std::vector<float> x = ActivationInputs();
  const int64_t n = static_cast<int64_t>(x.size());
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    std::vector<float> erf(n), gelu(n), gelu_tanh(n), silu(n);
    Erf(n, x.data(), erf.data());
    GeluErf(n, x.data(), gelu.data());
    GeluTanh(n, x.data(), gelu_tanh.data());
    Silu(n, x.data(), silu.data());
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i];
      const std::string where = absl::StrCat(IsaName(isa), " x = ", x[i]);
      if (std::isnan(v)) {
        for (const auto* y : {&erf, &gelu, &gelu_tanh, &silu}) {
          ASSERT_TRUE(std::isnan((*y)[i])) << where;
        }
        continue;
      }
      // erf: within 2e-7 absolute and 1e-6 relative of libm, with its sign.
      const double e = std::erf(v);
      ASSERT_NEAR(erf[i], e, 2e-7 + 1e-6 * std::fabs(e)) << where;
      ASSERT_EQ(std::signbit(erf[i]), std::signbit(e)) << where;
      if (std::isinf(v)) {
        // GELU: +inf stays, -inf is NaN (-inf x 0, as x/2 (1 + erf(x/sqrt 2)) gives).
        if (v > 0) {
          EXPECT_EQ(gelu[i], v) << where;
        } else {
          EXPECT_TRUE(std::isnan(gelu[i])) << where;
        }
        continue;
      }
      // GELU (erf form): (1e-6 + 2e-7 x^2) relative (exp's argument -x^2/2 is rounded in float).
      const double g = 0.5 * v * std::erfc(-v / std::sqrt(2.0));
      ASSERT_LE(std::fabs(gelu[i] - g), (1e-6 + 2e-7 * v * v) * std::fabs(g) + 1e-37) << where;
      if (std::fabs(v) > 80) continue;  // x^3 overflows; the tanh form and SiLU saturate there
      // tanh and sigmoid within 2e-7 absolute (fast_math.h), carried through x/2 and x.
      const double t = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
      ASSERT_NEAR(gelu_tanh[i], t, 4e-7 * std::fabs(v) + 1e-6 * std::fabs(t) + 1e-30) << where;
      const double s = v / (1 + std::exp(-v));
      ASSERT_NEAR(silu[i], s, 4e-7 * std::fabs(v) + 1e-6 * std::fabs(s) + 1e-30) << where;
    }
  }
}

// Softcap: cap tanh(x / cap) within FastTanh's 2e-7 absolute (times cap) of libm's, NaN kept,
// +-inf to +-cap, in place too.
TEST(Attention, SoftcapMatchesDouble) {
  std::mt19937 rng(21);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t n : kLengths) {
      for (float cap : {0.5f, 3.0f, 30.0f}) {
        std::vector<float> x = Uniform(n, rng, -4 * cap, 4 * cap);
        if (n > 3) {
          x[0] = kNaN;
          x[1] = kInf;
          x[2] = -kInf;
        }
        std::vector<float> y(n);
        Softcap(n, cap, x.data(), y.data());
        for (int64_t i = 0; i < n; ++i) {
          const std::string where = absl::StrCat(IsaName(isa), " n ", n, " cap ", cap, " x ", x[i]);
          if (std::isnan(x[i])) {
            EXPECT_TRUE(std::isnan(y[i])) << where;
            continue;
          }
          const double want = cap * std::tanh(static_cast<double>(x[i]) / cap);
          ASSERT_NEAR(y[i], want, 3e-7 * cap) << where;
        }
        Softcap(n, cap, x.data(), x.data());
        for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(SameFloat(x[i], y[i])) << i;
      }
    }
  }
}

// RotateHalf: full-width tables against double, in place the same.
TEST(Attention, RotateHalfMatchesDouble) {
  std::mt19937 rng(23);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t half : kLengths) {
      const std::vector<float> x = Uniform(2 * half, rng, -2, 2);
      const std::vector<float> cos = Uniform(2 * half, rng), sin = Uniform(2 * half, rng);
      std::vector<float> y(2 * half);
      RotateHalf(half, cos.data(), sin.data(), x.data(), y.data());
      for (int64_t i = 0; i < 2 * half; ++i) {
        const double partner = i < half ? -static_cast<double>(x[i + half]) : x[i - half];
        const double want = x[i] * static_cast<double>(cos[i]) + partner * sin[i];
        ASSERT_NEAR(y[i], want, 1e-6) << IsaName(isa) << " half " << half << " i " << i;
      }
      std::vector<float> z = x;
      RotateHalf(half, cos.data(), sin.data(), z.data(), z.data());
      for (int64_t i = 0; i < 2 * half; ++i) ASSERT_TRUE(SameFloat(z[i], y[i])) << i;
    }
  }
}

// SiluMul: g sigmoid(g) up within FastSigmoid's 2e-7 absolute (times |g up|), NaN kept, in place.
TEST(Glu, SiluMulMatchesDouble) {
  std::mt19937 rng(24);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t n : kLengths) {
      std::vector<float> g = Uniform(n, rng, -20, 20);
      const std::vector<float> u = Uniform(n, rng, -3, 3);
      if (n > 2) g[1] = kNaN;
      std::vector<float> y(n);
      SiluMul(n, g.data(), u.data(), y.data());
      for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(g[i])) {
          EXPECT_TRUE(std::isnan(y[i])) << i;
          continue;
        }
        const double want = g[i] / (1 + std::exp(-static_cast<double>(g[i]))) * u[i];
        ASSERT_NEAR(y[i], want, 4e-7 * std::fabs(g[i] * u[i]) + 1e-6 * std::fabs(want) + 1e-30)
            << IsaName(isa) << " n " << n << " i " << i;
      }
      std::vector<float> z = g;
      SiluMul(n, z.data(), u.data(), z.data());
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(SameFloat(z[i], y[i])) << i;
    }
  }
}

// Rotary: both pair layouts against double, values past 2 half untouched, in place the same.
TEST(Attention, RotaryMatchesDoubleForHalvesAndPairs) {
  std::mt19937 rng(22);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t half : kLengths) {
      for (bool interleaved : {false, true}) {
        const int64_t width = 2 * half + 3;  // a partial rotary dimension: 3 values after it
        const std::vector<float> x = Uniform(width, rng, -2, 2);
        const std::vector<float> cos = Uniform(half, rng), sin = Uniform(half, rng);
        std::vector<float> y(width, 7.0f);
        Rotary(half, interleaved, cos.data(), sin.data(), x.data(), y.data());
        for (int64_t i = 0; i < half; ++i) {
          const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
          const double c = cos[i], s = sin[i], x0 = x[a], x1 = x[b];
          const std::string where = absl::StrCat(IsaName(isa), " half ", half, " i ", i);
          ASSERT_NEAR(y[a], x0 * c - x1 * s, 1e-6) << where;
          ASSERT_NEAR(y[b], x0 * s + x1 * c, 1e-6) << where;
        }
        for (int64_t i = 2 * half; i < width; ++i) ASSERT_EQ(y[i], 7.0f) << i;
        std::vector<float> z = x;
        Rotary(half, interleaved, cos.data(), sin.data(), z.data(), z.data());
        for (int64_t i = 0; i < 2 * half; ++i) ASSERT_TRUE(SameFloat(z[i], y[i])) << i;
      }
    }
  }
}

TEST(Activation, BiasActivationRowsMatchDouble) {
  std::mt19937 rng(6);
  const Activation acts[] = {Activation::kNone,    Activation::kRelu, Activation::kTanh,
                             Activation::kSigmoid, Activation::kGelu, Activation::kGeluTanh,
                             Activation::kSilu};
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t n : kLengths) {
      const int64_t rows = 3, ldy = n + 5;
      const std::vector<float> y0 = Uniform(rows * ldy, rng, -6, 6), bias = Uniform(n, rng);
      for (Activation act : acts) {
        for (bool with_bias : {false, true}) {
          std::vector<float> y = y0;
          BiasActivationRows(act, rows, n, with_bias ? bias.data() : nullptr, y.data(), ldy);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t j = 0; j < ldy; ++j) {
              const int64_t o = r * ldy + j;
              if (j >= n) {  // past the row: untouched
                ASSERT_EQ(y[o], y0[o]);
                continue;
              }
              const float in = with_bias ? y0[o] + bias[j] : y0[o];
              const double v = in;
              double want = v;
              switch (act) {
                case Activation::kNone:
                  break;
                case Activation::kRelu:
                  want = v > 0 ? v : 0.0;
                  break;
                case Activation::kTanh:
                  want = std::tanh(v);
                  break;
                case Activation::kSigmoid:
                  want = 1 / (1 + std::exp(-v));
                  break;
                case Activation::kGelu:
                  want = 0.5 * v * std::erfc(-v / std::sqrt(2.0));
                  break;
                case Activation::kGeluTanh:
                  want = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
                  break;
                case Activation::kSilu:
                  want = v / (1 + std::exp(-v));
                  break;
              }
              const double tol = act == Activation::kNone || act == Activation::kRelu
                                     ? 0.0
                                     : 4e-7 * (1 + std::fabs(v)) + 1e-6 * std::fabs(want);
              ASSERT_NEAR(y[o], want, tol)
                  << IsaName(isa) << " act " << static_cast<int>(act) << " n " << n;
            }
          }
        }
      }
    }
    // Relu keeps NaN and gives +0 for -0.
    float special[3] = {kNaN, -0.0f, -1.0f};
    BiasActivationRows(Activation::kRelu, 1, 3, nullptr, special, 3);
    EXPECT_TRUE(std::isnan(special[0]));
    EXPECT_FALSE(std::signbit(special[1]));
    EXPECT_EQ(special[2], 0.0f);
  }
}

TEST(Activation, LstmGatesMatchDouble) {
  std::mt19937 rng(7);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t hidden : kLengths) {
      const int64_t batch = 2;
      const std::vector<float> gates = Uniform(batch * 4 * hidden, rng, -8, 8);
      const std::vector<float> c0 = Uniform(batch * hidden, rng, -2, 2);
      std::vector<float> c = c0, h(batch * hidden);
      LstmGates(batch, hidden, gates.data(), c.data(), h.data());
      auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t j = 0; j < hidden; ++j) {
          const float* g = gates.data() + b * 4 * hidden;
          const double cj = sig(g[2 * hidden + j]) * c0[b * hidden + j] +
                            sig(g[j]) * std::tanh(double{g[3 * hidden + j]});
          const double hj = sig(g[hidden + j]) * std::tanh(cj);
          ASSERT_NEAR(c[b * hidden + j], cj, 2e-6) << IsaName(isa) << " hidden " << hidden;
          ASSERT_NEAR(h[b * hidden + j], hj, 2e-6) << IsaName(isa) << " hidden " << hidden;
        }
      }
    }
  }
}

// ---- gemv.h ----

// Both weight layouts against a double loop, with row lengths around the vector widths,
// padded rows, and alpha/beta (beta 0 must not read y, which starts as NaN).
// The axpy form over more columns than one accumulator tile (AVX-512's GemvColsAvx512 runs
// 2048 at a time), with row counts around its four-row step.
TEST(Gemv, AxpyFormAcrossColumnTiles) {
  std::mt19937 rng(9);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t n : {2047, 2048, 2049, 4100, 6150}) {
      for (int64_t k : {1, 4, 6, 9}) {
        const int64_t ld = n + 5;
        const std::vector<float> b = Uniform(k * ld, rng), x = Uniform(k, rng),
                                 y0 = Uniform(n, rng);
        std::vector<float> y = y0;
        Gemv('N', n, k, 0.5f, x.data(), b.data(), ld, 1.0f, y.data());
        for (int64_t j = 0; j < n; ++j) {
          double want = 0.0;
          for (int64_t i = 0; i < k; ++i) want += double{x[i]} * b[i * ld + j];
          ASSERT_NEAR(y[j], 0.5 * want + y0[j], 1e-5 * (1.0 + std::sqrt(static_cast<double>(k))))
              << IsaName(isa) << " n=" << n << " k=" << k << " j=" << j;
        }
      }
    }
  }
}

TEST(Gemv, MatchesADoubleLoop) {
  std::mt19937 rng(8);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (char trans : {'T', 'N'}) {
      for (int64_t n : {1, 3, 4, 5, 8, 16, 63, 64, 65, 130}) {
        for (int64_t k : {1, 7, 16, 17, 48, 129}) {
          for (auto [alpha, beta] :
               {std::pair{1.0f, 0.0f}, std::pair{0.5f, 1.0f}, std::pair{2.0f, -0.25f}}) {
            const int64_t rows = trans == 'T' ? n : k, cols = trans == 'T' ? k : n;
            const int64_t ld = cols + 3;
            const std::vector<float> b = Uniform(rows * ld, rng), x = Uniform(k, rng),
                                     y0 = Uniform(n, rng);
            std::vector<float> y = y0;
            if (beta == 0.0f) std::fill(y.begin(), y.end(), kNaN);
            Gemv(trans, n, k, alpha, x.data(), b.data(), ld, beta, y.data());
            for (int64_t j = 0; j < n; ++j) {
              double want = 0.0;
              for (int64_t i = 0; i < k; ++i)
                want += double{x[i]} * (trans == 'T' ? b[j * ld + i] : b[i * ld + j]);
              want = alpha * want + (beta == 0.0f ? 0.0 : double{beta} * y0[j]);
              ASSERT_NEAR(y[j], want, 1e-5 * (1.0 + std::sqrt(static_cast<double>(k))))
                  << IsaName(isa) << " " << trans << " n=" << n << " k=" << k << " j=" << j;
            }
          }
        }
      }
    }
  }
}

// ---- reduce.h ----

TEST(Reduce, RowsAndColumnsMatchDouble) {
  std::mt19937 rng(9);
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kSumSquare, ReduceOp::kMax, ReduceOp::kMin};
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t n : kLengths) {
      const int64_t outer = 3, inner = n % 5 + 1;
      const std::vector<float> x = Uniform(outer * n * inner, rng, -2, 3);
      for (ReduceOp op : ops) {
        auto fold = [op](double acc, double v) {
          switch (op) {
            case ReduceOp::kSum:
              return acc + v;
            case ReduceOp::kSumSquare:
              return acc + v * v;
            case ReduceOp::kMax:
              return std::max(acc, v);
            case ReduceOp::kMin:
              return std::min(acc, v);
          }
          return acc;
        };
        const double init = op == ReduceOp::kMax ? -1e300 : op == ReduceOp::kMin ? 1e300 : 0.0;
        const bool exact = op == ReduceOp::kMax || op == ReduceOp::kMin;
        std::vector<float> rows(outer * inner), cols(outer * inner);
        ReduceRows(op, outer * inner, n, x.data(), rows.data());  // rows of n
        ReduceColumns(op, outer, n, inner, x.data(), cols.data());
        for (int64_t r = 0; r < outer * inner; ++r) {
          double want = init, mag = 0;
          for (int64_t j = 0; j < n; ++j) {
            want = fold(want, x[r * n + j]);
            mag = fold(mag, std::fabs(x[r * n + j]));
          }
          ASSERT_NEAR(rows[r], want, exact ? 0.0 : 1e-6 * mag)
              << IsaName(isa) << " rows op " << static_cast<int>(op) << " n " << n;
        }
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t i = 0; i < inner; ++i) {
            double want = init, mag = 0;
            for (int64_t j = 0; j < n; ++j) {
              const double v = x[(o * n + j) * inner + i];
              want = fold(want, v);
              mag = fold(mag, std::fabs(v));
            }
            ASSERT_NEAR(cols[o * inner + i], want, exact ? 0.0 : 1e-6 * mag)
                << IsaName(isa) << " columns op " << static_cast<int>(op) << " n " << n;
          }
        }
      }
    }
  }
}

// ---- depthwise.h ----

// Every level against a double loop, lengths around the 32-output block, taps 1 to 33,
// dilations 1 to 3; y is written for t < n only.
TEST(Depthwise, Conv1dRowMatchesDouble) {
  std::mt19937 rng(10);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t n : kLengths) {
      for (int64_t taps : {1, 3, 15, 31, 33}) {
        for (int64_t dilation : {1, 3}) {
          const int64_t len = n + (taps - 1) * dilation;
          const std::vector<float> xp = Uniform(len, rng, -2, 2), w = Uniform(taps, rng);
          const float bias = Uniform(1, rng)[0];
          std::vector<float> y(n + 1, 1234.5f);
          DepthwiseConv1dRow(n, xp.data(), w.data(), taps, dilation, bias, y.data());
          for (int64_t t = 0; t < n; ++t) {
            double want = bias, mag = std::fabs(bias);
            for (int64_t k = 0; k < taps; ++k) {
              want += double{w[k]} * xp[t + k * dilation];
              mag += std::fabs(double{w[k]} * xp[t + k * dilation]);
            }
            ASSERT_NEAR(y[t], want, 1e-6 * mag + 1e-7)
                << IsaName(isa) << " n " << n << " taps " << taps << " dilation " << dilation
                << " t " << t;
          }
          ASSERT_EQ(y[n], 1234.5f) << IsaName(isa) << " wrote past n " << n;
        }
      }
    }
  }
}

// ---- quantize.h ----

// ONNX's definitions in scalar code: the division in f32, rounding half to even, saturation;
// requantization in double.
TEST(Quantize, EveryLoopIsExact) {
  std::mt19937 rng(10);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaForTesting level(isa);
    for (int64_t n : kLengths) {
      std::vector<float> x = Uniform(n, rng, -300, 300);
      x[0] = 2.5f;  // a tie: rounds to even
      if (n > 1) x[1] = -3.5f;
      const float s = 1.0f, z = 3.0f;
      std::vector<uint8_t> qu(n);
      std::vector<int8_t> qi(n);
      QuantizeU8(n, x.data(), s, z, qu.data());
      QuantizeI8(n, x.data(), s, z, qi.data());
      for (int64_t i = 0; i < n; ++i) {
        const float r = std::nearbyint(x[i] / s) + z;
        ASSERT_EQ(qu[i], static_cast<uint8_t>(std::clamp(r, 0.0f, 255.0f))) << IsaName(isa);
        ASSERT_EQ(qi[i], static_cast<int8_t>(std::clamp(r, -128.0f, 127.0f))) << IsaName(isa);
      }
      std::vector<float> du(n), di(n);
      DequantizeU8(n, qu.data(), 0.125f, 7.0f, du.data());
      DequantizeI8(n, qi.data(), 0.125f, -7.0f, di.data());
      std::vector<int8_t> shifted(n);
      ShiftU8ToS8(n, qu.data(), shifted.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(SameFloat(du[i], (static_cast<float>(qu[i]) - 7.0f) * 0.125f));
        ASSERT_TRUE(SameFloat(di[i], (static_cast<float>(qi[i]) + 7.0f) * 0.125f));
        ASSERT_EQ(shifted[i], static_cast<int8_t>(int{qu[i]} - 128));
      }
      std::vector<int32_t> acc(n);
      std::vector<double> scale(n);
      for (int64_t i = 0; i < n; ++i) {
        acc[i] = static_cast<int32_t>(rng() % 200001) - 100000;
        scale[i] = (i % 4 == 0 ? 0.5 : 1.0) / (1 + rng() % 1000);
      }
      acc[0] = 5;  // 5 * 0.5 = 2.5: a tie
      std::vector<uint8_t> ru(n), ruu(n);
      std::vector<int8_t> ri(n), riu(n);
      RequantizeU8(n, acc.data(), scale.data(), 10.0, ru.data());
      RequantizeI8(n, acc.data(), scale.data(), -10.0, ri.data());
      RequantizeU8Uniform(n, acc.data(), 3.0, scale[1 % n], 10.0, ruu.data());
      RequantizeI8Uniform(n, acc.data(), 3.0, scale[1 % n], -10.0, riu.data());
      for (int64_t i = 0; i < n; ++i) {
        const double r = std::nearbyint(acc[i] * scale[i]);
        const double u = std::nearbyint((acc[i] + 3.0) * scale[1 % n]);
        ASSERT_EQ(ru[i], static_cast<uint8_t>(std::clamp(r + 10.0, 0.0, 255.0))) << IsaName(isa);
        ASSERT_EQ(ri[i], static_cast<int8_t>(std::clamp(r - 10.0, -128.0, 127.0))) << IsaName(isa);
        ASSERT_EQ(ruu[i], static_cast<uint8_t>(std::clamp(u + 10.0, 0.0, 255.0))) << IsaName(isa);
        ASSERT_EQ(riu[i], static_cast<int8_t>(std::clamp(u - 10.0, -128.0, 127.0))) << IsaName(isa);
      }
    }
  }
}

}  // namespace
}  // namespace dynvm::cpu
