// Tests of the conformance runner's statistical check for random models (CompareRandom): it
// accepts two draws of one distribution and rejects wrong dtypes, shapes, supports, non-finite
// values and means far apart.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "tests/conformance/conformance.h"

namespace dynvm::conformance {
namespace {

using ::dynvm::testing::F32;

std::vector<float> Draw(int n, double p, uint32_t seed) {
  std::mt19937 gen(seed);
  std::bernoulli_distribution b(p);
  std::vector<float> v(n);
  for (float& x : v) x = b(gen) ? 1.0f : 0.0f;
  return v;
}

TEST(CompareRandomTest, AcceptsTwoDrawsOfOneDistribution) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    EXPECT_TRUE(
        CompareRandom(F32({100}, Draw(100, 0.3, seed)), F32({100}, Draw(100, 0.3, seed + 1000)))
            .ok())
        << seed;
  }
  EXPECT_TRUE(CompareRandom(F32({0}, {}), F32({0}, {})).ok());
}

TEST(CompareRandomTest, RejectsWrongShapeDtypeSupportAndMean) {
  const Tensor want = F32({100}, Draw(100, 0.5, 1));
  EXPECT_FALSE(CompareRandom(F32({10, 10}, Draw(100, 0.5, 2)), want).ok());
  EXPECT_FALSE(CompareRandom(testing::I64({100}, std::vector<int64_t>(100, 0)), want).ok());
  std::vector<float> two = Draw(100, 0.5, 3);
  two[7] = 2;  // not a Bernoulli value
  EXPECT_FALSE(CompareRandom(F32({100}, two), want).ok());
  std::vector<float> nan = Draw(100, 0.5, 4);
  nan[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(CompareRandom(F32({100}, nan), want).ok());
  // p = 0.05 against p = 0.95: means 0.9 apart, far beyond five standard errors.
  EXPECT_FALSE(CompareRandom(F32({100}, Draw(100, 0.05, 5)), F32({100}, Draw(100, 0.95, 6))).ok());
}

}  // namespace
}  // namespace dynvm::conformance
