// transpose_chain and reshape_chain (chains.cc) against the unoptimized program, and the near
// misses left alone.
#include "compiler/rewrite/rewrite_testing.h"
#include "gtest/gtest.h"

namespace dynvm::compiler::rewrite {
namespace {

const std::vector<std::pair<std::string, Tensor>> kIn = {{"x", RandomF32({2, 3, 4, 5}, 1)}};

Outcome Transposes(std::vector<int64_t> p, std::vector<int64_t> q, bool share = false) {
  return CompareWithUnoptimized(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {"b", 3, 4, 5});
        Value* t = b.Op("Transpose", {x}, {{"perm", AttrInts(p)}});
        b.Output("y", b.Op("Transpose", {t}, {{"perm", AttrInts(q)}}));
        if (share) b.Output("t", t);
      },
      kIn);
}

TEST(ChainsTest, TransposesCollapse) {
  Outcome o = Transposes({0, 2, 1, 3}, {0, 1, 3, 2});  // torch's k.transpose(1,2).transpose(-2,-1)
  EXPECT_EQ(o.fired["transpose_chain"], 1);
  Outcome id = Transposes({0, 2, 1, 3}, {0, 2, 1, 3});
  EXPECT_EQ(id.fired["transpose_chain"], 1);
  EXPECT_FALSE(id.HasKernel("Transpose"));
  Outcome rev = CompareWithUnoptimized(
      [](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {2, 3, 4, 5});
        Value* t = b.Op("Transpose", {x});  // reversed axes
        b.Output("y", b.Op("Transpose", {t}, {{"perm", AttrInts({1, 0, 2, 3})}}));
      },
      kIn);
  EXPECT_EQ(rev.fired["transpose_chain"], 1);
  EXPECT_EQ(Transposes({0, 2, 1, 3}, {0, 1, 3, 2}, /*share=*/true).fired["transpose_chain"], 0);
}

TEST(ChainsTest, IdentityTransposeIsAView) {
  Outcome o = CompareWithUnoptimized(
      [](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {"b", 3, 4, 5});
        Value* y = b.Op("Transpose", {x}, {{"perm", AttrInts({0, 1, 2, 3})}});
        b.Output("y", b.Op("Relu", {y}));
      },
      kIn);
  EXPECT_EQ(o.fired["transpose_identity"], 1);
  EXPECT_FALSE(o.HasKernel("Transpose"));
  // An absent perm reverses the axes: left alone.
  Outcome rev = CompareWithUnoptimized(
      [](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {2, 3, 4, 5});
        b.Output("y", b.Op("Relu", {b.Op("Transpose", {x})}));
      },
      kIn);
  EXPECT_EQ(rev.fired["transpose_identity"], 0);
  EXPECT_TRUE(rev.HasKernel("Transpose"));
}

Outcome UnitAxes(std::vector<int64_t> perm, std::vector<DimSpec> dims,
                 std::vector<int64_t> actual) {
  return CompareWithUnoptimized(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, dims);
        b.Output("y", b.Op("Relu", {b.Op("Transpose", {x}, {{"perm", AttrInts(perm)}})}));
      },
      {{"x", RandomF32(actual, 3)}});
}

TEST(ChainsTest, TransposeOfUnitAxesIsAReshape) {
  // torch's batch-first swap at batch 1, with a symbolic sequence length.
  Outcome swap = UnitAxes({1, 0, 2}, {1, "s", 8}, {1, 5, 8});
  EXPECT_EQ(swap.fired["transpose_unit_axes"], 1);
  EXPECT_FALSE(swap.HasKernel("Transpose"));
  Outcome heads = UnitAxes({0, 2, 1, 3}, {4, 1, 1, 6}, {4, 1, 1, 6});
  EXPECT_EQ(heads.fired["transpose_unit_axes"], 1);
  // Two axes larger than 1 swap: a real Transpose.
  Outcome real = UnitAxes({1, 0, 2}, {2, 3, 8}, {2, 3, 8});
  EXPECT_EQ(real.fired["transpose_unit_axes"], 0);
  EXPECT_TRUE(real.HasKernel("Transpose"));
  // A dim that may be larger than 1 (a symbol) moves past another: left alone.
  Outcome symbolic = UnitAxes({1, 0, 2}, {"b", 5, 8}, {1, 5, 8});
  EXPECT_EQ(symbolic.fired["transpose_unit_axes"], 0);
  // Two symbols: no constant target shape.
  Outcome two = UnitAxes({1, 0, 2, 3}, {1, 1, "s", "t"}, {1, 1, 3, 4});
  EXPECT_EQ(two.fired["transpose_unit_axes"], 0);
  // An empty dim: the Reshape keeps it 0 (allowzero), [0, 1] -> [1, 0] (seed 7 graph 10589).
  Outcome empty = UnitAxes({1, 0}, {0, 1}, {0, 1});
  EXPECT_EQ(empty.fired["transpose_unit_axes"], 1);
  Outcome empty3 = UnitAxes({1, 0, 2}, {0, 1, 3}, {0, 1, 3});
  EXPECT_EQ(empty3.fired["transpose_unit_axes"], 1);
  // A 0 beside a symbol: the -1 would be 0 / 0. Left alone.
  Outcome empty_symbolic = UnitAxes({1, 0, 2}, {0, 1, "s"}, {0, 1, 3});
  EXPECT_EQ(empty_symbolic.fired["transpose_unit_axes"], 0);
}

Outcome Reshapes(std::vector<int64_t> s1, std::vector<int64_t> s2, bool share = false) {
  return CompareWithUnoptimized(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {2, 3, 4, 5});
        Value* s = b.Op("Reshape", {x, b.VectorI64(s1)});
        b.Output("y", b.Op("Reshape", {s, b.VectorI64(s2)}));
        if (share) b.Output("s", s);
      },
      kIn);
}

TEST(ChainsTest, ReshapesCollapse) {
  EXPECT_EQ(Reshapes({6, 20}, {2, 3, -1}).fired["reshape_chain"], 1);
  // A 0 in the outer shape copies a dim of the inner result: left alone.
  EXPECT_EQ(Reshapes({6, 20}, {0, 4, 5}).fired["reshape_chain"], 0);
  EXPECT_EQ(Reshapes({6, 20}, {2, 3, -1}, /*share=*/true).fired["reshape_chain"], 0);
  // Symbolic dims: the inner Reshape is checked only at run time, so it stays.
  Outcome symbolic = CompareWithUnoptimized(
      [](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {"b", 3, 4, 5});
        Value* s = b.Op("Reshape", {x, b.VectorI64({-1, 20})});
        b.Output("y", b.Op("Reshape", {s, b.VectorI64({2, 3, -1})}));
      },
      kIn);
  EXPECT_EQ(symbolic.fired["reshape_chain"], 0);
}

Outcome ZeroPad(std::vector<int64_t> pads, const char* mode, bool with_value) {
  return CompareWithUnoptimized(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {"b", 3, 4, 5});
        std::vector<Value*> in = {x, b.VectorI64(pads)};
        if (with_value) in.push_back(b.ScalarF32(0.0f));
        Value* y = b.Op("Pad", in, {{"mode", AttrString(mode)}});
        b.Output("y", b.Op("Relu", {y}));
      },
      kIn);
}

TEST(ChainsTest, ZeroPadIsAView) {
  for (const char* mode : {"constant", "reflect", "edge"}) {
    Outcome o = ZeroPad({0, 0, 0, 0, 0, 0, 0, 0}, mode, false);
    EXPECT_EQ(o.fired["pad_identity"], 1) << mode;
    EXPECT_FALSE(o.HasKernel("Pad")) << mode;
  }
  // Pads that pad and a constant_value input (its run-time check) are left alone.
  Outcome padded = ZeroPad({0, 0, 1, 0, 0, 0, 0, 0}, "constant", false);
  EXPECT_EQ(padded.fired["pad_identity"], 0);
  EXPECT_TRUE(padded.HasKernel("Pad"));
  EXPECT_EQ(ZeroPad({0, 0, 0, 0, 0, 0, 0, 0}, "constant", true).fired["pad_identity"], 0);
}

}  // namespace
}  // namespace dynvm::compiler::rewrite
