// rms_norm, rms_norm_scale (rms_norm.cc): the hand-written RMSNorm in its forms, against the
// unoptimized program, and the near misses left alone.
#include "compiler/rewrite/rewrite_testing.h"
#include "gtest/gtest.h"

namespace dynvm::compiler::rewrite {
namespace {

struct RmsForm {
  std::vector<int64_t> axes = {-1};
  int64_t keepdims = 1;
  bool square_by_mul = false;
  int inverse = 0;     // 0: Mul(x, Div(1, den)) (torch.rsqrt); 1: Div(x, den); 2: Reciprocal;
                       // 3: Mul(Reciprocal(den), 1) (torch's 1.0 / t)
  bool casts = false;  // x and the result through Casts to f32 (LLaMA's .to())
  bool x_first = true;
  bool eps_first = false;
  bool weight = true;
  bool weight_rows = false;  // a weight [rows, 1]: varies along another axis
  bool share_ms = false;     // the mean square is also an output
  bool eps_input = false;    // eps a graph input, not a constant
};

Outcome RunForm(const RmsForm& f) {
  std::vector<std::pair<std::string, Tensor>> in = {{"x", RandomF32({2, 3, 8}, 7, -2, 2)}};
  if (f.eps_input) in.push_back({"eps", RandomF32({1}, 3, 1e-3f, 1e-2f)});
  return CompareWithUnoptimized(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {"batch", 3, 8});
        if (f.casts) x = b.Op("Cast", {x}, {{"to", AttrInt(1)}});
        Value* sq = f.square_by_mul ? b.Op("Mul", {x, x}) : b.Op("Pow", {x, b.ScalarF32(2)});
        Value* ms = b.Op("ReduceMean", {sq},
                         {{"axes", AttrInts(f.axes)}, {"keepdims", AttrInt(f.keepdims)}});
        Value* eps = f.eps_input ? b.Input("eps", DType::kF32, {1}) : b.ScalarF32(1e-6f);
        Value* den = b.Op("Sqrt", {f.eps_first ? b.Op("Add", {eps, ms}) : b.Op("Add", {ms, eps})});
        Value* y;
        if (f.inverse == 1) {
          y = b.Op("Div", {x, den});
        } else {
          Value* inv =
              f.inverse == 0 ? b.Op("Div", {b.ScalarF32(1), den}) : b.Op("Reciprocal", {den});
          if (f.inverse == 3) inv = b.Op("Mul", {inv, b.ScalarF32(1)});
          y = f.x_first ? b.Op("Mul", {x, inv}) : b.Op("Mul", {inv, x});
        }
        if (f.casts) y = b.Op("Cast", {y}, {{"to", AttrInt(1)}});
        if (f.weight) {
          Tensor w = f.weight_rows ? RandomF32({3, 1}, 8) : RandomF32({8}, 8);
          y = b.Op("Mul", {b.Constant(w), y});
        }
        b.Output("y", y);
        if (f.share_ms) b.Output("ms", ms);
      },
      in, {}, 1e-4);
}

TEST(RmsNormTest, FusesEveryForm) {
  for (int form = 0; form < 10; ++form) {
    SCOPED_TRACE(form);
    RmsForm f;
    f.square_by_mul = form == 1;
    f.inverse = form == 2 ? 1 : form == 3 ? 2 : 0;
    f.x_first = form != 4;
    f.eps_first = form == 5;
    f.weight = form != 6;
    if (form == 7) f.axes = {-2, -1};
    if (form == 7) f.weight = false;
    if (form == 8) f.inverse = 3;
    f.casts = form == 9;
    Outcome o = RunForm(f);
    EXPECT_EQ(o.fired["rms_norm"], 1);
    EXPECT_EQ(o.fired["rms_norm_scale"], f.weight ? 1 : 0);
    EXPECT_TRUE(o.HasKernel("dynvm::RMSNorm"));
    EXPECT_FALSE(o.HasKernel("ReduceMean"));
    EXPECT_FALSE(o.HasKernel("Sqrt"));
    EXPECT_FALSE(o.HasKernel("Mul"));
    EXPECT_FALSE(o.HasKernel("Cast"));
  }
}

TEST(RmsNormTest, LeavesNearMissesAlone) {
  RmsForm other_axis;
  other_axis.axes = {1};
  EXPECT_EQ(RunForm(other_axis).fired["rms_norm"], 0);
  RmsForm no_keepdims;  // [2, 3] broadcast against [2, 3, 8] fails: use a full reduction
  no_keepdims.axes = {0, 1, 2};
  no_keepdims.keepdims = 0;
  EXPECT_EQ(RunForm(no_keepdims).fired["rms_norm"], 0);
  RmsForm shared;
  shared.share_ms = true;
  Outcome o = RunForm(shared);
  EXPECT_EQ(o.fired["rms_norm"], 0);
  EXPECT_TRUE(o.HasKernel("ReduceMean"));
  RmsForm eps_input;
  eps_input.eps_input = true;
  EXPECT_EQ(RunForm(eps_input).fired["rms_norm"], 0);
  // A weight varying along a non-normalized axis: the norm fuses, the scale stays a Mul.
  RmsForm rows;
  rows.weight_rows = true;
  Outcome r = RunForm(rows);
  EXPECT_EQ(r.fired["rms_norm"], 1);
  EXPECT_EQ(r.fired["rms_norm_scale"], 0);
  EXPECT_TRUE(r.HasKernel("Mul"));
}

// A LayerNorm's decomposition is an RMSNorm of the centered value: it is left to layer_norm.
TEST(RmsNormTest, LeavesLayerNormToLayerNorm) {
  const std::vector<std::pair<std::string, Tensor>> in = {{"x", RandomF32({4, 8}, 2)}};
  Outcome o = CompareWithUnoptimized(
      [](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {"n", 8});
        Value* d = b.Op("Sub", {x, b.Op("ReduceMean", {x}, {{"axes", AttrInts({-1})}})});
        Value* var = b.Op("ReduceMean", {b.Op("Mul", {d, d})}, {{"axes", AttrInts({-1})}});
        b.Output("y", b.Op("Div", {d, b.Op("Sqrt", {b.Op("Add", {var, b.ScalarF32(1e-5f)})})}));
      },
      in, {}, 1e-4);
  EXPECT_EQ(o.fired["layer_norm"], 1);
  EXPECT_EQ(o.fired["rms_norm"], 0);
}

}  // namespace
}  // namespace dynvm::compiler::rewrite
