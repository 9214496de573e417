// layer_norm, layer_norm_scale, layer_norm_bias (layer_norm.cc): the decomposition in its
// forms, against the unoptimized program, and the near misses left alone.
#include "compiler/rewrite/rewrite_testing.h"
#include "gtest/gtest.h"

namespace dynvm::compiler::rewrite {
namespace {

AttrValue Axes(std::vector<int64_t> axes) { return AttrInts(std::move(axes)); }

struct LnForm {
  std::vector<int64_t> mean_axes = {-1};
  std::vector<int64_t> var_axes = {-1};
  bool square_by_mul = false;
  bool reciprocal = false;  // Mul(d, Reciprocal(den)) instead of Div
  bool eps_first = false;
  bool affine = true;
  bool share_d = false;  // d is also an output
};

Outcome RunForm(const LnForm& f) {
  const std::vector<std::pair<std::string, Tensor>> in = {{"x", RandomF32({2, 3, 8}, 7, -2, 2)}};
  return CompareWithUnoptimized(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {"batch", 3, 8});
        Value* mean = b.Op("ReduceMean", {x}, {{"axes", Axes(f.mean_axes)}});
        Value* d = b.Op("Sub", {x, mean});
        Value* sq = f.square_by_mul ? b.Op("Mul", {d, d}) : b.Op("Pow", {d, b.ScalarF32(2)});
        Value* var = b.Op("ReduceMean", {sq}, {{"axes", Axes(f.var_axes)}});
        Value* eps = b.ScalarF32(1e-5f);
        Value* den =
            b.Op("Sqrt", {f.eps_first ? b.Op("Add", {eps, var}) : b.Op("Add", {var, eps})});
        Value* y =
            f.reciprocal ? b.Op("Mul", {d, b.Op("Reciprocal", {den})}) : b.Op("Div", {d, den});
        if (f.affine) {
          const int64_t n = f.mean_axes.size() == 2 ? 24 : 8;
          std::vector<int64_t> dims =
              n == 24 ? std::vector<int64_t>{3, 8} : std::vector<int64_t>{8};
          y = b.Op("Mul", {b.Constant(RandomF32(dims, 8)), y});
          y = b.Op("Add", {y, b.Constant(RandomF32(dims, 9))});
        }
        b.Output("y", y);
        if (f.share_d) b.Output("d", d);
      },
      in, {}, 1e-4);
}

TEST(LayerNormTest, FusesEveryForm) {
  for (int form = 0; form < 6; ++form) {
    SCOPED_TRACE(form);
    LnForm f;
    f.square_by_mul = form == 1;
    f.reciprocal = form == 2;
    f.eps_first = form == 3;
    f.affine = form != 4;
    if (form == 5) f.mean_axes = f.var_axes = {-2, -1};
    Outcome o = RunForm(f);
    EXPECT_EQ(o.fired["layer_norm"], 1);
    EXPECT_EQ(o.fired["layer_norm_scale"], f.affine ? 1 : 0);
    EXPECT_EQ(o.fired["layer_norm_bias"], f.affine ? 1 : 0);
    EXPECT_TRUE(o.HasKernel("LayerNormalization"));
    EXPECT_FALSE(o.HasKernel("ReduceMean"));
    EXPECT_FALSE(o.HasKernel("Sqrt"));
  }
}

TEST(LayerNormTest, LeavesNearMissesAlone) {
  LnForm other_axis;
  other_axis.mean_axes = other_axis.var_axes = {1};
  EXPECT_EQ(RunForm(other_axis).fired["layer_norm"], 0);
  LnForm mixed;
  mixed.mean_axes = {-1};
  mixed.var_axes = {-2, -1};
  EXPECT_EQ(RunForm(mixed).fired["layer_norm"], 0);
  LnForm shared;
  shared.share_d = true;
  Outcome o = RunForm(shared);
  EXPECT_EQ(o.fired["layer_norm"], 0);
  EXPECT_TRUE(o.HasKernel("ReduceMean"));
}

TEST(LayerNormTest, FoldsScaleAndBiasIntoLayerNormalization) {
  const std::vector<std::pair<std::string, Tensor>> in = {{"x", RandomF32({4, 6}, 2)}};
  Outcome o = CompareWithUnoptimized(
      [](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {"n", 6});
        Value* ln = b.Op("LayerNormalization",
                         {x, b.Constant(RandomF32({6}, 3)), b.Constant(RandomF32({6}, 4))},
                         {{"epsilon", AttrFloat(1e-3f)}});
        Value* y =
            b.Op("Add", {b.Op("Mul", {ln, b.ScalarF32(3)}), b.Constant(RandomF32({1, 6}, 5))});
        b.Output("y", y);
      },
      in, {}, 1e-5);
  EXPECT_EQ(o.fired["layer_norm_scale"], 1);
  EXPECT_EQ(o.fired["layer_norm_bias"], 1);
  // A scale that varies along a non-normalized axis is not a LayerNormalization's.
  Outcome rows = CompareWithUnoptimized(
      [](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {4, 6});
        Value* ln = b.Op("LayerNormalization", {x, b.Constant(RandomF32({6}, 3))});
        b.Output("y", b.Op("Mul", {ln, b.Constant(RandomF32({4, 1}, 6))}));
      },
      in, {}, 1e-5);
  EXPECT_EQ(rows.fired["layer_norm_scale"], 0);
}

}  // namespace
}  // namespace dynvm::compiler::rewrite
