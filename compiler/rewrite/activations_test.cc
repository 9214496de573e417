// gelu, gelu_tanh, silu, hard_swish, hard_swish_written, hard_sigmoid_written (activations.cc): the
// forms torch writes and the other associations, against the unoptimized program, and the near
// misses left alone.
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

// Relu6(x + c) as Clip with bound inputs (opset 11 on), or attributes when `attrs`.
Value* Relu6Plus(GraphBuilder& b, Value* x, float c = 3, float hi = 6, bool attrs = false) {
  Value* sum = b.Op("Add", {x, b.ScalarF32(c)});
  if (attrs) return b.Op("Clip", {sum}, {{"min", AttrFloat(0)}, {"max", AttrFloat(hi)}});
  return b.Op("Clip", {sum, b.ScalarF32(0), b.ScalarF32(hi)});
}

TEST(ActivationsTest, HardSwishWrittenOut) {
  const std::vector<Build> forms = {
      [](GraphBuilder& b, Value* x) {  // Paddle2ONNX: Div(Mul(x, R), 6)
        return b.Op("Div", {b.Op("Mul", {x, Relu6Plus(b, x)}), b.ScalarF32(6)});
      },
      [](GraphBuilder& b, Value* x) {  // Mul(Mul(R, x), 1/6), the Add's operands swapped
        Value* r = b.Op("Clip", {b.Op("Add", {b.ScalarF32(3), x}), b.ScalarF32(0), b.ScalarF32(6)});
        return b.Op("Mul", {b.Op("Mul", {r, x}), b.ScalarF32(1.0f / 6)});
      },
      [](GraphBuilder& b, Value* x) {  // torch: x * F.relu6(x + 3) / 6 as Mul(x, Div(R, 6))
        return b.Op("Mul", {x, b.Op("Div", {Relu6Plus(b, x), b.ScalarF32(6)})});
      },
      [](GraphBuilder& b, Value* x) {  // Mul(Mul(1/6, R), x)
        return b.Op("Mul", {b.Op("Mul", {b.ScalarF32(1.0f / 6), Relu6Plus(b, x)}), x});
      },
  };
  for (size_t i = 0; i < forms.size(); ++i) {
    SCOPED_TRACE(i);
    Outcome o = RunAct(forms[i]);
    EXPECT_EQ(o.fired["hard_swish_written"] + o.fired["hard_swish"], 1);
    EXPECT_TRUE(o.HasKernel("HardSwish"));
    EXPECT_FALSE(o.HasKernel("Clip"));
    EXPECT_FALSE(o.HasKernel("Mul"));
  }
}

TEST(ActivationsTest, HardSwishWrittenOutWithClipAttributes) {
  // Clip's bounds as attributes (opsets before 11).
  Outcome o = RunAct([](GraphBuilder& b, Value* x) {
    return b.Op("Div", {b.Op("Mul", {x, Relu6Plus(b, x, 3, 6, true)}), b.ScalarF32(6)});
  });
  EXPECT_EQ(o.fired["hard_swish_written"], 1);
  EXPECT_FALSE(o.HasKernel("Clip"));
  Outcome s = RunAct([](GraphBuilder& b, Value* x) {
    return b.Op("Div", {Relu6Plus(b, x, 3, 5, true), b.ScalarF32(6)});
  });
  EXPECT_EQ(s.fired["hard_sigmoid_written"], 0);  // max 5
}

TEST(ActivationsTest, HardSigmoidWrittenOut) {
  Outcome o = RunAct([](GraphBuilder& b, Value* x) {
    return b.Op("Div", {Relu6Plus(b, x), b.ScalarF32(6)});
  });
  EXPECT_EQ(o.fired["hard_sigmoid_written"], 1);
  EXPECT_TRUE(o.HasKernel("HardSigmoid"));
  EXPECT_FALSE(o.HasKernel("Clip"));
  // HardSigmoid written out, then Mul(x, it): hard_swish takes the pair.
  Outcome p = RunAct([](GraphBuilder& b, Value* x) {
    Value* hs = b.Op("Mul", {Relu6Plus(b, x), b.ScalarF32(1.0f / 6)});
    return b.Op("Add", {b.Op("Mul", {hs, x}), hs});  // hs read twice: only the sigmoid folds
  });
  EXPECT_EQ(p.fired["hard_sigmoid_written"], 1);
  EXPECT_EQ(p.fired["hard_swish"], 0);
}

TEST(ActivationsTest, HardSwishWrittenNearMisses) {
  const std::vector<Build> misses = {
      [](GraphBuilder& b, Value* x) {  // x + 2
        return b.Op("Div", {b.Op("Mul", {x, Relu6Plus(b, x, 2)}), b.ScalarF32(6)});
      },
      [](GraphBuilder& b, Value* x) {  // clipped to [0, 5]
        return b.Op("Div", {b.Op("Mul", {x, Relu6Plus(b, x, 3, 5)}), b.ScalarF32(6)});
      },
      [](GraphBuilder& b, Value* x) {  // divided by 5
        return b.Op("Div", {b.Op("Mul", {x, Relu6Plus(b, x)}), b.ScalarF32(5)});
      },
      [](GraphBuilder& b, Value* x) {  // times 1/5
        return b.Op("Mul", {x, b.Op("Mul", {Relu6Plus(b, x), b.ScalarF32(0.2f)})});
      },
      [](GraphBuilder& b, Value* x) {  // the outer x is another value
        return b.Op("Div", {b.Op("Mul", {b.Op("Neg", {x}), Relu6Plus(b, x)}), b.ScalarF32(6)});
      },
      [](GraphBuilder& b, Value* x) {  // a lower bound of -1
        Value* r =
            b.Op("Clip", {b.Op("Add", {x, b.ScalarF32(3)}), b.ScalarF32(-1), b.ScalarF32(6)});
        return b.Op("Div", {b.Op("Mul", {x, r}), b.ScalarF32(6)});
      },
      [](GraphBuilder& b, Value* x) {  // the product also feeds the output
        Value* p = b.Op("Mul", {x, Relu6Plus(b, x)});
        return b.Op("Add", {b.Op("Div", {p, b.ScalarF32(6)}), p});
      },
  };
  for (size_t i = 0; i < misses.size(); ++i) {
    SCOPED_TRACE(i);
    Outcome o = RunAct(misses[i]);
    EXPECT_EQ(o.fired["hard_swish_written"], 0);
    EXPECT_EQ(o.fired["hard_swish"], 0);
    EXPECT_FALSE(o.HasKernel("HardSwish"));
  }
}

}  // namespace
}  // namespace dynvm::compiler::rewrite
