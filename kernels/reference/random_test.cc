// Tests of the reference Bernoulli and Random* kernels: shapes, dtypes and statistics, not
// values. Kolmogorov-Smirnov distances against the exact CDFs and mean/variance checks use
// fixed seeds with the alpha = 0.01 critical values, so each assertion is deterministic; the
// unseeded runs are checked to differ.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using ::dynvm::testing::F32;
using ::dynvm::testing::KernelCall;
using ::dynvm::testing::ToDoubles;
using ::testing::HasSubstr;

constexpr int64_t kN = 20000;

Tensor RunOne(KernelCall& call) {
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? (*r)[0] : Tensor();
}

std::vector<int64_t> Dims(const Tensor& t) { return {t.dims().begin(), t.dims().end()}; }

// The Kolmogorov-Smirnov distance of a sample from a CDF.
template <typename Cdf>
double KsDistance(std::vector<double> x, Cdf cdf) {
  std::sort(x.begin(), x.end());
  double d = 0;
  const double n = static_cast<double>(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double f = cdf(x[i]);
    d = std::max({d, f - static_cast<double>(i) / n, static_cast<double>(i + 1) / n - f});
  }
  return d;
}

// The alpha = 0.01 critical value of the one-sample KS statistic for large n.
double KsCritical(int64_t n) { return 1.628 / std::sqrt(static_cast<double>(n)); }

KernelCall Uniform(float seed, float low, float high, DType dtype = DType::kF32) {
  KernelCall call("RandomUniform");
  call.Attr("shape", std::vector<int64_t>{kN / 100, 100}).Attr("low", low).Attr("high", high);
  call.Attr("seed", seed).Out(dtype);
  return call;
}

TEST(RandomKernelTest, UniformIsUniformInRangeAndSeededRunsRepeat) {
  KernelCall u = Uniform(7.0f, -2.0f, 3.0f);
  const Tensor y = RunOne(u);
  EXPECT_EQ(Dims(y), (std::vector<int64_t>{kN / 100, 100}));
  EXPECT_EQ(y.dtype(), DType::kF32);
  const std::vector<double> v = ToDoubles(y);
  for (double x : v) {
    ASSERT_GE(x, -2.0);
    ASSERT_LT(x, 3.0);
  }
  EXPECT_LT(KsDistance(v, [](double x) { return (x + 2) / 5; }), KsCritical(kN));
  KernelCall again = Uniform(7.0f, -2.0f, 3.0f);
  EXPECT_EQ(ToDoubles(RunOne(again)), v);  // the same seed: the same numbers
  KernelCall other = Uniform(8.0f, -2.0f, 3.0f);
  EXPECT_NE(ToDoubles(RunOne(other)), v);
}

TEST(RandomKernelTest, UnseededRunsVary) {
  KernelCall a("RandomUniformLike");
  a.In(F32({64}, std::vector<float>(64, 0))).Out(DType::kF32);
  const std::vector<double> first = ToDoubles(RunOne(a));
  const std::vector<double> second = ToDoubles(RunOne(a));
  EXPECT_NE(first, second);
  KernelCall b("RandomNormal");
  b.Attr("shape", std::vector<int64_t>{64}).Out(DType::kF32);
  EXPECT_NE(ToDoubles(RunOne(b)), ToDoubles(RunOne(b)));
}

TEST(RandomKernelTest, NormalHasItsMeanVarianceAndCdf) {
  KernelCall n("RandomNormal");
  n.Attr("shape", std::vector<int64_t>{kN}).Attr("mean", 1.5f).Attr("scale", 2.0f);
  n.Attr("seed", 3.0f).Out(DType::kF64);
  const Tensor y = RunOne(n);
  EXPECT_EQ(y.dtype(), DType::kF64);
  const std::vector<double> v = ToDoubles(y);
  double mean = 0, var = 0;
  for (double x : v) mean += x;
  mean /= kN;
  for (double x : v) var += (x - mean) * (x - mean);
  var /= kN - 1;
  EXPECT_NEAR(mean, 1.5, 2.576 * 2.0 / std::sqrt(kN));  // 99% interval of the mean
  EXPECT_NEAR(var, 4.0, 2.576 * 4.0 * std::sqrt(2.0 / (kN - 1)));
  EXPECT_LT(KsDistance(v, [](double x) { return 0.5 * std::erfc(-(x - 1.5) / (2.0 * M_SQRT2)); }),
            KsCritical(kN));
}

TEST(RandomKernelTest, LikeOpsTakeTheInputsShapeAndTheDtypeAttribute) {
  KernelCall like("RandomNormalLike");
  like.In(F32({2, 0, 3}, {})).Out(DType::kF32);
  EXPECT_EQ(Dims(RunOne(like)), (std::vector<int64_t>{2, 0, 3}));  // empty is fine
  KernelCall half("RandomUniformLike");
  half.In(F32({kN}, std::vector<float>(kN, 0))).Attr("low", 0.0f).Attr("high", 1.0f);
  half.Attr("seed", 1.0f).Out(DType::kF16);
  const Tensor h = RunOne(half);
  EXPECT_EQ(h.dtype(), DType::kF16);
  for (double x : ToDoubles(h)) ASSERT_LT(x, 1.0);  // rounding never reaches high
  KernelCall bad("RandomUniform");
  bad.Attr("shape", std::vector<int64_t>{2}).Attr("low", 2.0f).Attr("high", 1.0f);
  bad.Out(DType::kF32);
  EXPECT_FALSE(bad.Run().ok());
}

TEST(RandomKernelTest, BernoulliFollowsItsProbabilities) {
  std::vector<float> p(kN);
  for (int64_t i = 0; i < kN; ++i) p[i] = i % 2 == 0 ? 0.3f : (i % 4 == 1 ? 0.0f : 1.0f);
  KernelCall b("Bernoulli");
  b.In(F32({kN}, p)).Attr("seed", 5.0f).Out(DType::kF32);
  const std::vector<double> y = ToDoubles(RunOne(b));
  double ones = 0;
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_TRUE(y[i] == 0 || y[i] == 1);
    if (p[i] == 0.0f) {
      ASSERT_EQ(y[i], 0);
    }
    if (p[i] == 1.0f) {
      ASSERT_EQ(y[i], 1);
    }
    if (i % 2 == 0) ones += y[i];
  }
  const double n = kN / 2;  // a binomial(n, 0.3) count: its 99% interval
  EXPECT_NEAR(ones, 0.3 * n, 2.576 * std::sqrt(n * 0.3 * 0.7));
  KernelCall again("Bernoulli");
  again.In(F32({kN}, p)).Attr("seed", 5.0f).Out(DType::kF32);
  EXPECT_EQ(ToDoubles(RunOne(again)), y);
  KernelCall as_bool("Bernoulli");
  as_bool.In(F32({3}, {0, 1, 1})).Out(DType::kBool);
  const Tensor t = RunOne(as_bool);
  EXPECT_EQ(t.dtype(), DType::kBool);
  EXPECT_EQ(ToDoubles(t), (std::vector<double>{0, 1, 1}));
}

TEST(RandomKernelTest, BernoulliRefusesNanAndOutOfRangeProbabilities) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -0.5f, 1.5f}) {
    KernelCall b("Bernoulli");
    b.In(F32({2}, {0.5f, bad})).Out(DType::kF32);
    absl::StatusOr<std::vector<Tensor>> r = b.Run();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("element 1"));
  }
}

TEST(RandomKernelTest, TrainingDropoutKeepsOneMinusRatioAndScales) {
  auto run = [](float ratio) {
    KernelCall d("Dropout");
    d.In(F32({kN}, std::vector<float>(kN, 2.0f))).In(F32({}, {ratio}));
    d.In(testing::Bool({}, {true})).Attr("seed", int64_t{9}).Out(DType::kF32).Out(DType::kBool);
    return d.Run();
  };
  absl::StatusOr<std::vector<Tensor>> r = run(0.25f);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<double> y = ToDoubles((*r)[0]), mask = ToDoubles((*r)[1]);
  double kept = 0;
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_TRUE(y[i] == 0 || std::abs(y[i] - 2.0 / 0.75) < 1e-6) << y[i];
    ASSERT_EQ(mask[i] != 0, y[i] != 0);
    kept += mask[i];
  }
  EXPECT_NEAR(kept, 0.75 * kN, 2.576 * std::sqrt(kN * 0.75 * 0.25));  // 99% interval
  absl::StatusOr<std::vector<Tensor>> again = run(0.25f);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(ToDoubles((*again)[0]), y);  // seeded: the same mask
  absl::StatusOr<std::vector<Tensor>> one = run(1.0f);
  ASSERT_FALSE(one.ok());
  EXPECT_THAT(one.status().message(), HasSubstr("ratio"));
}

}  // namespace
}  // namespace dynvm
