// Tests of the reference NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss kernels against
// hand-computed values.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using ::dynvm::testing::F32;
using ::dynvm::testing::I64;
using ::dynvm::testing::KernelCall;
using ::dynvm::testing::ToDoubles;
using ::testing::DoubleNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

// Log-probabilities [[-1, -2, -3], [-4, -5, -6]]; targets [2, 0].
Tensor LogProbs() { return F32({2, 3}, {-1, -2, -3, -4, -5, -6}); }
Tensor Targets() { return I64({2}, {2, 0}); }

std::vector<double> Nll(const std::string& reduction, const Tensor& x, const Tensor& target,
                        const Tensor* weight = nullptr,
                        std::optional<int64_t> ignore = std::nullopt) {
  KernelCall call("NegativeLogLikelihoodLoss");
  call.In(x).In(target);
  if (weight != nullptr) call.In(*weight);
  call.Attr("reduction", reduction).Out(DType::kF32);
  if (ignore) call.Attr("ignore_index", *ignore);
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? ToDoubles((*r)[0]) : std::vector<double>{};
}

TEST(LossKernelTest, NegativeLogLikelihoodReductions) {
  // Per element: -x[0, 2] = 3, -x[1, 0] = 4.
  EXPECT_THAT(Nll("none", LogProbs(), Targets()), Pointwise(DoubleNear(1e-6), {3, 4}));
  EXPECT_THAT(Nll("sum", LogProbs(), Targets()), Pointwise(DoubleNear(1e-6), {7}));
  EXPECT_THAT(Nll("mean", LogProbs(), Targets()), Pointwise(DoubleNear(1e-6), {3.5}));
}

TEST(LossKernelTest, NegativeLogLikelihoodWeightsAndIgnoredTargets) {
  const Tensor w = F32({3}, {0.5f, 1, 2});
  // 3 * w[2] = 6, 4 * w[0] = 2; mean divides by w[2] + w[0] = 2.5.
  EXPECT_THAT(Nll("none", LogProbs(), Targets(), &w), Pointwise(DoubleNear(1e-6), {6, 2}));
  EXPECT_THAT(Nll("mean", LogProbs(), Targets(), &w), Pointwise(DoubleNear(1e-6), {3.2}));
  // Ignoring class 0: the second element counts for nothing; the mean is over one element.
  EXPECT_THAT(Nll("none", LogProbs(), Targets(), nullptr, 0), Pointwise(DoubleNear(1e-6), {3, 0}));
  EXPECT_THAT(Nll("mean", LogProbs(), Targets(), nullptr, 0), Pointwise(DoubleNear(1e-6), {3}));
  EXPECT_THAT(Nll("mean", LogProbs(), Targets(), &w, 0), Pointwise(DoubleNear(1e-6), {3}));
  // An ignored target may lie outside [0, C).
  EXPECT_THAT(Nll("sum", LogProbs(), I64({2}, {-100, 1}), nullptr, -100),
              Pointwise(DoubleNear(1e-6), {5}));
}

TEST(LossKernelTest, NegativeLogLikelihoodSpatialDims) {
  // x [1, 2, 2]: class 0 = [-1, -2], class 1 = [-3, -4]; targets [[1, 0]] pick -x[0,1,0] = 3
  // and -x[0,0,1] = 2.
  EXPECT_THAT(Nll("none", F32({1, 2, 2}, {-1, -2, -3, -4}), I64({1, 2}, {1, 0})),
              Pointwise(DoubleNear(1e-6), {3, 2}));
}

TEST(LossKernelTest, BadTargetsAreRefused) {
  KernelCall out_of_range("NegativeLogLikelihoodLoss");
  out_of_range.In(LogProbs()).In(I64({2}, {3, 0})).Out(DType::kF32);
  absl::StatusOr<std::vector<Tensor>> r = out_of_range.Run();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("out of range"));
  KernelCall wrong_shape("NegativeLogLikelihoodLoss");
  wrong_shape.In(LogProbs()).In(I64({3}, {0, 0, 0})).Out(DType::kF32);
  EXPECT_EQ(wrong_shape.Run().status().code(), absl::StatusCode::kInvalidArgument);
  KernelCall bad_reduction("NegativeLogLikelihoodLoss");
  bad_reduction.In(LogProbs()).In(Targets()).Attr("reduction", std::string("max")).Out(DType::kF32);
  EXPECT_FALSE(bad_reduction.Run().ok());
}

TEST(LossKernelTest, SoftmaxCrossEntropyAndLogProb) {
  // scores [[0, ln 3]]: softmax [1/4, 3/4]; target 1: loss -ln(3/4).
  KernelCall call("SoftmaxCrossEntropyLoss");
  call.In(F32({1, 2}, {0, static_cast<float>(std::log(3.0))}))
      .In(I64({1}, {1}))
      .Out(DType::kF32)
      .Out(DType::kF32);
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(ToDoubles((*r)[0]), Pointwise(DoubleNear(1e-6), {-std::log(0.75)}));
  EXPECT_THAT(ToDoubles((*r)[1]), Pointwise(DoubleNear(1e-6), {std::log(0.25), std::log(0.75)}));
}

}  // namespace
}  // namespace dynvm
