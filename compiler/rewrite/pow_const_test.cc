// pow_const (pow_const.cc): each exponent it rewrites, against the unoptimized program, and
// the exponents it leaves alone.
#include "compiler/rewrite/rewrite_testing.h"
#include "gtest/gtest.h"

namespace dynvm::compiler::rewrite {
namespace {

Outcome PowOf(Tensor exponent, bool exponent_input = false) {
  return CompareWithUnoptimized(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {"n", 5});
        Value* e = exponent_input ? b.Input("e", DType::kF32, {}) : b.Constant(exponent);
        b.Output("y", b.Op("Pow", {x, e}));
      },
      exponent_input
          ? std::vector<std::pair<std::string, Tensor>>{{"x", RandomF32({3, 5}, 1, 0.1f, 2)},
                                                        {"e", exponent}}
          : std::vector<std::pair<std::string, Tensor>>{{"x", RandomF32({3, 5}, 1, 0.1f, 2)}});
}

TEST(PowConstTest, RewritesKnownExponents) {
  for (float e : {1.0f, 2.0f, 3.0f, 0.5f, -1.0f, -0.5f}) {
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

TEST(PowConstTest, LeavesOtherExponentsAlone) {
  for (float e : {2.5f, 4.0f, 0.0f}) {
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
