// swiglu (swiglu.cc): SwiGLU's gating, silu(gate) * up, in the forms exporters write, against the
// unoptimized program, and the near misses left alone.
#include "compiler/rewrite/rewrite_testing.h"
#include "gtest/gtest.h"

namespace dynvm::compiler::rewrite {
namespace {

struct GluForm {
  bool up_first = false;       // Mul(up, silu(gate))
  bool sigmoid_first = false;  // silu written Mul(Sigmoid(g), g)
  bool other_sigmoid = false;  // g * sigmoid(h): not a silu
  bool silu_output = false;    // the silu is also an output
  bool up_row = false;         // up [F] broadcast over the rows
  bool products = false;       // gate and up from MatMuls of x (the FFN's two projections)
};

Outcome RunForm(const GluForm& f) {
  std::vector<std::pair<std::string, Tensor>> in = {{"x", RandomF32({2, 3, 20}, 7, -3, 3)},
                                                    {"u", RandomF32({2, 3, 20}, 8)},
                                                    {"h", RandomF32({2, 3, 20}, 9)}};
  return CompareWithUnoptimized(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {"batch", 3, 20});
        Value* g = x;
        Value* u = b.Input("u", DType::kF32, {"batch", 3, 20});
        Value* h = b.Input("h", DType::kF32, {"batch", 3, 20});
        if (f.up_row) u = b.Constant(RandomF32({20}, 11));
        if (f.products) {
          g = b.Op("MatMul", {x, b.Constant(RandomF32({20, 12}, 12))});
          u = b.Op("MatMul", {x, b.Constant(RandomF32({20, 12}, 13))});
        }
        Value* sig = b.Op("Sigmoid", {f.other_sigmoid ? h : g});
        Value* silu = f.sigmoid_first ? b.Op("Mul", {sig, g}) : b.Op("Mul", {g, sig});
        b.Output("y", f.up_first ? b.Op("Mul", {u, silu}) : b.Op("Mul", {silu, u}));
        if (f.silu_output) b.Output("silu", silu);
      },
      in, {}, 1e-5);
}

TEST(SwiGluTest, FusesTheGatingForms) {
  for (int form = 0; form < 5; ++form) {
    SCOPED_TRACE(form);
    GluForm f;
    f.up_first = form == 1;
    f.sigmoid_first = form == 2;
    f.up_row = form == 3;
    f.products = form == 4;
    Outcome o = RunForm(f);
    EXPECT_EQ(o.fired["silu"], 1);
    EXPECT_EQ(o.fired["swiglu"], 1);
    EXPECT_TRUE(o.HasKernel("dynvm::SwiGlu"));
    EXPECT_FALSE(o.HasKernel("dynvm::Silu"));
    EXPECT_FALSE(o.HasKernel("Sigmoid"));
  }
}

TEST(SwiGluTest, LeavesNearMissesAlone) {
  GluForm other;  // g * sigmoid(h) * u: no silu
  other.other_sigmoid = true;
  Outcome o = RunForm(other);
  EXPECT_EQ(o.fired["swiglu"], 0);
  EXPECT_FALSE(o.HasKernel("dynvm::SwiGlu"));
  GluForm shared;  // the silu is read elsewhere: it stays, and so does the Mul
  shared.silu_output = true;
  Outcome s = RunForm(shared);
  EXPECT_EQ(s.fired["silu"], 1);
  EXPECT_EQ(s.fired["swiglu"], 0);
  EXPECT_TRUE(s.HasKernel("dynvm::Silu"));
}

}  // namespace
}  // namespace dynvm::compiler::rewrite
