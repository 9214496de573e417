// gelu, gelu_tanh, silu, hard_swish (activations.cc): the forms torch writes and the other
// associations, against the unoptimized program, and the near misses left alone.
#include <cmath>

#include "compiler/rewrite/rewrite_testing.h"
#include "gtest/gtest.h"

namespace dynvm::compiler::rewrite {
namespace {

using Build = std::function<Value*(GraphBuilder&, Value*)>;

Outcome RunAct(const Build& f) {
  const std::vector<std::pair<std::string, Tensor>> in = {{"x", RandomF32({3, 7}, 11, -4, 4)}};
  return CompareWithUnoptimized(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {"n", 7});
        b.Output("y", f(b, x));
      },
      in, {}, 1e-5);
}

Value* ErfPart(GraphBuilder& b, Value* x, float div = std::sqrt(2.0f)) {
  return b.Op("Add", {b.Op("Erf", {b.Op("Div", {x, b.ScalarF32(div)})}), b.ScalarF32(1)});
}

TEST(ActivationsTest, GeluInEveryAssociation) {
  const std::vector<Build> forms = {
      [](GraphBuilder& b, Value* x) {  // torch: Mul(Mul(x, A), 0.5)
        return b.Op("Mul", {b.Op("Mul", {x, ErfPart(b, x)}), b.ScalarF32(0.5f)});
      },
      [](GraphBuilder& b, Value* x) {  // Mul(Mul(0.5, x), A)
        return b.Op("Mul", {b.Op("Mul", {b.ScalarF32(0.5f), x}), ErfPart(b, x)});
      },
      [](GraphBuilder& b, Value* x) {  // Mul(x, Mul(A, 0.5)), erf of x * 1/sqrt2
        Value* a = b.Op(
            "Add", {b.ScalarF32(1), b.Op("Erf", {b.Op("Mul", {b.ScalarF32(std::sqrt(0.5f)), x})})});
        return b.Op("Mul", {x, b.Op("Mul", {a, b.ScalarF32(0.5f)})});
      },
  };
  for (size_t i = 0; i < forms.size(); ++i) {
    SCOPED_TRACE(i);
    Outcome o = RunAct(forms[i]);
    EXPECT_EQ(o.fired["gelu"], 1);
    EXPECT_TRUE(o.HasKernel("dynvm::Gelu"));
    EXPECT_FALSE(o.HasKernel("Erf"));
  }
}

TEST(ActivationsTest, GeluNearMisses) {
  // Another constant.
  EXPECT_EQ(RunAct([](GraphBuilder& b, Value* x) {
              return b.Op("Mul", {b.Op("Mul", {x, ErfPart(b, x, 1.5f)}), b.ScalarF32(0.5f)});
            }).fired["gelu"],
            0);
  // The inner x is another value.
  EXPECT_EQ(RunAct([](GraphBuilder& b, Value* x) {
              Value* x2 = b.Op("Neg", {x});
              return b.Op("Mul", {b.Op("Mul", {x2, ErfPart(b, x)}), b.ScalarF32(0.5f)});
            }).fired["gelu"],
            0);
  // The Erf also feeds the output.
  EXPECT_EQ(RunAct([](GraphBuilder& b, Value* x) {
              Value* a = ErfPart(b, x);
              return b.Op("Add", {b.Op("Mul", {b.Op("Mul", {x, a}), b.ScalarF32(0.5f)}), a});
            }).fired["gelu"],
            0);
}

Value* TanhGelu(GraphBuilder& b, Value* x, float k) {
  Value* cube = b.Op("Mul", {x, b.Op("Mul", {x, x})});
  Value* inner = b.Op("Add", {x, b.Op("Mul", {b.ScalarF32(k), cube})});
  Value* t = b.Op("Tanh", {b.Op("Mul", {b.ScalarF32(0.7978846f), inner})});
  Value* a = b.Op("Add", {b.ScalarF32(1), t});
  return b.Op("Mul", {b.ScalarF32(0.5f), b.Op("Mul", {x, a})});
}

TEST(ActivationsTest, GeluTanh) {
  Outcome o = RunAct([](GraphBuilder& b, Value* x) { return TanhGelu(b, x, 0.044715f); });
  EXPECT_EQ(o.fired["gelu_tanh"], 1);
  EXPECT_TRUE(o.HasKernel("dynvm::GeluTanh"));
  EXPECT_FALSE(o.HasKernel("Tanh"));
  // With Pow(x, 3) for the cube (pow_const turns it into Muls first).
  Outcome p = RunAct([](GraphBuilder& b, Value* x) {
    Value* cube = b.Op("Pow", {x, b.ScalarF32(3)});
    Value* inner = b.Op("Add", {b.Op("Mul", {cube, b.ScalarF32(0.044715f)}), x});
    Value* a = b.Op(
        "Add", {b.Op("Tanh", {b.Op("Mul", {inner, b.ScalarF32(0.7978846f)})}), b.ScalarF32(1)});
    return b.Op("Mul", {b.Op("Mul", {x, a}), b.ScalarF32(0.5f)});
  });
  EXPECT_EQ(p.fired["gelu_tanh"], 1);
  EXPECT_EQ(
      RunAct([](GraphBuilder& b, Value* x) { return TanhGelu(b, x, 0.05f); }).fired["gelu_tanh"],
      0);
}

TEST(ActivationsTest, SiluAndHardSwish) {
  Outcome s = RunAct([](GraphBuilder& b, Value* x) {
    return b.Op("Mul", {b.Op("Sigmoid", {x}), x});
  });
  EXPECT_EQ(s.fired["silu"], 1);
  EXPECT_TRUE(s.HasKernel("dynvm::Silu"));
  EXPECT_EQ(RunAct([](GraphBuilder& b, Value* x) {
              return b.Op("Mul", {b.Op("Sigmoid", {b.Op("Neg", {x})}), x});
            }).fired["silu"],
            0);
  Outcome h = RunAct([](GraphBuilder& b, Value* x) {
    return b.Op("Mul", {x, b.Op("HardSigmoid", {x}, {{"alpha", AttrFloat(1.0f / 6)}})});
  });
  EXPECT_EQ(h.fired["hard_swish"], 1);
  EXPECT_TRUE(h.HasKernel("HardSwish"));
  // The default alpha (0.2) is not HardSwish's.
  EXPECT_EQ(RunAct([](GraphBuilder& b, Value* x) {
              return b.Op("Mul", {x, b.Op("HardSigmoid", {x})});
            }).fired["hard_swish"],
            0);
}

}  // namespace
}  // namespace dynvm::compiler::rewrite
