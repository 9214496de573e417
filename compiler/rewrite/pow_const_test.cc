// pow_const (pow_const.cc): each exponent it rewrites, against the unoptimized program, and
// the exponents it leaves alone.
#include <limits>
#include <vector>

#include "compiler/rewrite/rewrite_testing.h"
#include "gtest/gtest.h"

namespace dynvm::compiler::rewrite {
namespace {

Outcome PowOf(Tensor exponent, bool exponent_input = false,
              Tensor x = RandomF32({3, 5}, 1, 0.1f, 2)) {
  return CompareWithUnoptimized(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {"n", 5});
        Value* e = exponent_input ? b.Input("e", DType::kF32, {}) : b.Constant(exponent);
        b.Output("y", b.Op("Pow", {x, e}));
      },
      exponent_input ? std::vector<std::pair<std::string, Tensor>>{{"x", x}, {"e", exponent}}
                     : std::vector<std::pair<std::string, Tensor>>{{"x", x}});
}

TEST(PowConstTest, RewritesKnownExponents) {
  for (float e : {1.0f, 2.0f, 3.0f, -1.0f}) {
    SCOPED_TRACE(e);
    Outcome o = PowOf(Tensor::Scalar(e));
    EXPECT_EQ(o.fired["pow_const"], 1);
    EXPECT_FALSE(o.HasKernel("Pow"));
  }
  // An integer exponent, and a one-element tensor of rank 1 (x has rank 2).
  Outcome i = PowOf(Tensor::ScalarI64(2));
  EXPECT_EQ(i.fired["pow_const"], 1);
  Outcome v = PowOf(*Tensor::FromVector<float>(DType::kF32, {1}, {3.0f}));
  EXPECT_EQ(v.fired["pow_const"], 1);
}

// Each rewrite gives what pow gives for signed zeros, infinities, NaN and negative bases (the
// oracle: the unoptimized program's Pow, std::pow; NaN must meet NaN and inf the same inf).
TEST(PowConstTest, RewritesKeepPowAtSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> xs = {
      -inf,  -2.5f, -1.0f, -0.0f, 0.0f, 0.5f, 3.0f, inf, std::numeric_limits<float>::quiet_NaN(),
      -1e30f};
  const Tensor x = *Tensor::FromVector<float>(DType::kF32, {2, 5}, xs);
  for (float e : {1.0f, 2.0f, 3.0f, -1.0f, 0.5f, -0.5f}) {
    SCOPED_TRACE(e);
    Outcome o = PowOf(Tensor::Scalar(e), false, x);
    EXPECT_EQ(o.fired["pow_const"], e == 0.5f || e == -0.5f ? 0 : 1);
  }
}

TEST(PowConstTest, LeavesOtherExponentsAlone) {
  // 0.5 and -0.5: Sqrt(-inf) is NaN where pow(-inf, 0.5) is +inf, and 1 / Sqrt(-0) is -inf
  // where pow(-0, -0.5) is +inf.
  for (float e : {2.5f, 4.0f, 0.0f, 0.5f, -0.5f}) {
    SCOPED_TRACE(e);
    Outcome o = PowOf(Tensor::Scalar(e));
    EXPECT_EQ(o.fired["pow_const"], 0);
    EXPECT_TRUE(o.HasKernel("Pow"));
  }
  // Not constant; more than one element; higher rank than x (the result's rank grows).
  EXPECT_EQ(PowOf(Tensor::Scalar(2), /*exponent_input=*/true).fired["pow_const"], 0);
  EXPECT_EQ(PowOf(*Tensor::FromVector<float>(DType::kF32, {5}, {2, 2, 2, 2, 2})).fired["pow_const"],
            0);
  EXPECT_EQ(PowOf(*Tensor::FromVector<float>(DType::kF32, {1, 1, 1}, {2})).fired["pow_const"], 0);
}

}  // namespace
}  // namespace dynvm::compiler::rewrite
