// matmul_bias, gemm_activation, linear_activation (matmul_bias.cc): the linear-layer forms
// torch writes, with every activation, against the unoptimized program, and the near misses
// left alone.
#include <cmath>
#include <string>

#include "compiler/rewrite/rewrite_testing.h"
#include "gtest/gtest.h"

namespace dynvm::compiler::rewrite {
namespace {

constexpr int64_t kK = 19, kN = 23;

using Build = std::function<Value*(GraphBuilder&, Value* x)>;

// x [2, s, K] (s symbolic), optimized against unoptimized, at 1 and 2 threads.
Outcome Run3d(const Build& f, int threads = 1) {
  const std::vector<std::pair<std::string, Tensor>> in = {{"x", RandomF32({2, 5, kK}, 3)}};
  CompileOptions options;
  (void)threads;
  return CompareWithUnoptimized(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {2, "s", kK});
        b.Output("y", f(b, x));
      },
      in, options, 1e-5);
}

Value* Weight(GraphBuilder& b, int64_t rows, int64_t cols, uint32_t seed = 7) {
  return b.Constant(RandomF32({rows, cols}, seed), "", /*is_weight=*/true);
}

Value* Bias(GraphBuilder& b, std::vector<int64_t> dims, uint32_t seed = 9) {
  return b.Constant(RandomF32(std::move(dims), seed));
}

Value* Linear3d(GraphBuilder& b, Value* x, bool bias_first = false) {
  Value* mm = b.Op("MatMul", {x, Weight(b, kK, kN)});
  Value* bias = Bias(b, {kN});
  return bias_first ? b.Op("Add", {bias, mm}) : b.Op("Add", {mm, bias});
}

// 0.5 * x * (1 + erf(x / sqrt 2)) as torch writes it (the gelu rule makes dynvm::Gelu).
Value* DecomposedGelu(GraphBuilder& b, Value* x) {
  Value* erf = b.Op("Erf", {b.Op("Div", {x, b.ScalarF32(std::sqrt(2.0f))})});
  Value* a = b.Op("Add", {erf, b.ScalarF32(1)});
  return b.Op("Mul", {b.Op("Mul", {x, a}), b.ScalarF32(0.5f)});
}

TEST(MatMulBiasTest, BiasInEitherOrderAndOfRankUpToTheProducts) {
  for (bool first : {false, true}) {
    Outcome o = Run3d([first](GraphBuilder& b, Value* x) { return Linear3d(b, x, first); });
    EXPECT_EQ(o.fired["matmul_bias"], 1);
    EXPECT_TRUE(o.HasKernel("dynvm::Linear"));
    EXPECT_FALSE(o.HasKernel("MatMul"));
    EXPECT_FALSE(o.HasKernel("Add"));
  }
  for (std::vector<int64_t> dims : {std::vector<int64_t>{1, kN}, std::vector<int64_t>{1, 1, kN}}) {
    Outcome o = Run3d([dims](GraphBuilder& b, Value* x) {
      return b.Op("Add", {b.Op("MatMul", {x, Weight(b, kK, kN)}), Bias(b, dims)});
    });
    EXPECT_EQ(o.fired["matmul_bias"], 1) << dims.size();
  }
}

TEST(MatMulBiasTest, EveryActivation) {
  const std::vector<std::pair<std::string, Build>> acts = {
      {"Relu", [](GraphBuilder& b, Value* y) { return b.Op("Relu", {y}); }},
      {"Tanh", [](GraphBuilder& b, Value* y) { return b.Op("Tanh", {y}); }},
      {"Sigmoid", [](GraphBuilder& b, Value* y) { return b.Op("Sigmoid", {y}); }},
      {"Gelu", [](GraphBuilder& b, Value* y) { return DecomposedGelu(b, y); }},
      {"Silu",
       [](GraphBuilder& b, Value* y) {
         return b.Op("Mul", {y, b.Op("Sigmoid", {y})});
       }},
  };
  for (const auto& act : acts) {
    SCOPED_TRACE(act.first);
    const Build& f = act.second;
    Outcome o = Run3d([&f](GraphBuilder& b, Value* x) { return f(b, Linear3d(b, x)); });
    EXPECT_EQ(o.fired["matmul_bias"], 1);
    EXPECT_EQ(o.fired["linear_activation"], 1);
    EXPECT_TRUE(o.HasKernel("dynvm::Linear"));
    EXPECT_FALSE(o.HasKernel("Relu") || o.HasKernel("Tanh") || o.HasKernel("Sigmoid") ||
                 o.HasKernel("dynvm::Gelu") || o.HasKernel("dynvm::Silu"));
  }
}

TEST(MatMulBiasTest, NonConstantWeightFuses) {
  const std::vector<std::pair<std::string, Tensor>> in = {{"x", RandomF32({3, kK}, 3)},
                                                          {"w", RandomF32({kK, kN}, 4)}};
  Outcome o = CompareWithUnoptimized(
      [](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {"m", kK});
        Value* w = b.Input("w", DType::kF32, {kK, kN});
        b.Output("y", b.Op("Relu", {b.Op("Add", {b.Op("MatMul", {x, w}), Bias(b, {kN})})}));
      },
      in, {}, 1e-5);
  EXPECT_EQ(o.fired["matmul_bias"], 1);
  EXPECT_EQ(o.fired["linear_activation"], 1);
}

TEST(MatMulBiasTest, NearMissesAreLeftAlone) {
  // A bias varying along another axis, or broadcasting the product.
  for (std::vector<int64_t> dims : {std::vector<int64_t>{5, kN}, std::vector<int64_t>{2, 1, kN},
                                    std::vector<int64_t>{1, 1, 1, kN}}) {
    const std::vector<std::pair<std::string, Tensor>> in = {{"x", RandomF32({2, 5, kK}, 3)}};
    Outcome o = CompareWithUnoptimized(
        [dims](GraphBuilder& b) {
          Value* x = b.Input("x", DType::kF32, {2, 5, kK});
          b.Output("y", b.Op("Add", {b.Op("MatMul", {x, Weight(b, kK, kN)}), Bias(b, dims)}));
        },
        in, {}, 1e-5);
    EXPECT_EQ(o.fired["matmul_bias"], 0) << dims.size() << " " << dims[0];
  }
  // The product read elsewhere.
  Outcome o = Run3d([](GraphBuilder& b, Value* x) {
    Value* mm = b.Op("MatMul", {x, Weight(b, kK, kN)});
    return b.Op("Mul", {b.Op("Add", {mm, Bias(b, {kN})}), mm});
  });
  EXPECT_EQ(o.fired["matmul_bias"], 0);
  // A non-constant bias.
  o = Run3d([](GraphBuilder& b, Value* x) {
    Value* mm = b.Op("MatMul", {x, Weight(b, kK, kN)});
    return b.Op("Add", {mm, b.Op("Exp", {Bias(b, {kN})})});
  });
  // (Exp of a constant folds to a constant: the bias is constant after folding.)
  EXPECT_EQ(o.fired["matmul_bias"], 1);
  o = Run3d([](GraphBuilder& b, Value* x) {
    Value* mm = b.Op("MatMul", {x, Weight(b, kK, kN)});
    Value* row = b.Op("ReduceMean", {x}, {{"axes", AttrInts({0, 1})}, {"keepdims", AttrInt(0)}});
    Value* bias = b.Op("MatMul", {row, Weight(b, kK, kN, 5)});
    return b.Op("Add", {mm, bias});
  });
  EXPECT_EQ(o.fired["matmul_bias"], 0);
  // The fused Linear read elsewhere: the activation is not folded in.
  o = Run3d([](GraphBuilder& b, Value* x) {
    Value* y = Linear3d(b, x);
    return b.Op("Add", {b.Op("Relu", {y}), y});
  });
  EXPECT_EQ(o.fired["matmul_bias"], 1);
  EXPECT_EQ(o.fired["linear_activation"], 0);
}

Outcome RunGemm(const Attrs& attrs, bool with_c, std::vector<int64_t> c_dims, bool trans_b,
                const char* act) {
  const std::vector<std::pair<std::string, Tensor>> in = {{"x", RandomF32({6, kK}, 3)}};
  return CompareWithUnoptimized(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {"m", kK});
        Value* w = trans_b ? Weight(b, kN, kK) : Weight(b, kK, kN);
        std::vector<Value*> ins = {x, w};
        if (with_c) ins.push_back(Bias(b, c_dims));
        Attrs a = attrs;
        a["transB"] = AttrInt(trans_b ? 1 : 0);
        b.Output("y", b.Op(act, {b.Op("Gemm", ins, a)}));
      },
      in, {}, 1e-5);
}

TEST(MatMulBiasTest, GemmWithActivation) {
  for (bool trans_b : {true, false}) {
    for (bool with_c : {true, false}) {
      for (std::vector<int64_t> c : {std::vector<int64_t>{kN}, std::vector<int64_t>{1, kN}}) {
        Outcome o = RunGemm({}, with_c, c, trans_b, "Relu");
        EXPECT_EQ(o.fired["gemm_activation"], 1) << trans_b << with_c << c.size();
        EXPECT_FALSE(o.HasKernel("Gemm"));
      }
    }
  }
  EXPECT_EQ(RunGemm({}, true, {kN}, true, "Tanh").fired["gemm_activation"], 1);
  // Near misses: alpha, beta, transA... (transA needs x [K, m]: alpha and beta suffice), a C of
  // another shape, a Gemm with no activation.
  EXPECT_EQ(
      RunGemm({{"alpha", AttrFloat(0.5f)}}, true, {kN}, true, "Relu").fired["gemm_activation"], 0);
  EXPECT_EQ(RunGemm({{"beta", AttrFloat(2.0f)}}, true, {kN}, true, "Relu").fired["gemm_activation"],
            0);
  EXPECT_EQ(RunGemm({}, true, {6, kN}, true, "Relu").fired["gemm_activation"], 0);
  EXPECT_EQ(RunGemm({}, true, {kN}, true, "Neg").fired["gemm_activation"], 0);
}

}  // namespace
}  // namespace dynvm::compiler::rewrite
