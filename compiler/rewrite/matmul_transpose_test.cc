// matmul_transpose, linear_transpose (matmul_transpose.cc): a Transpose read by a MatMul becomes
// the operand's strides, on random sizes, against the unoptimized program; attention keeps its
// Q·Kᵀ; the near misses are left alone.
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/passes.h"
#include "compiler/rewrite/rewrite.h"
#include "compiler/rewrite/rewrite_testing.h"
#include "gtest/gtest.h"

namespace dynvm::compiler::rewrite {
namespace {

using Perm = std::vector<int64_t>;
using Inputs = std::vector<std::pair<std::string, Tensor>>;

// The dims of Transpose(dims, perm)'s input, so that the permuted operand has `want` dims.
std::vector<int64_t> Unpermuted(const std::vector<int64_t>& want, const Perm& p) {
  std::vector<int64_t> d(want.size());
  for (size_t i = 0; i < p.size(); ++i) d[p[i]] = want[i];
  return d;
}

std::vector<DimSpec> Specs(const std::vector<int64_t>& d, int symbolic = -1) {
  std::vector<DimSpec> s;
  for (size_t i = 0; i < d.size(); ++i) {
    if (static_cast<int>(i) == symbolic) {
      s.emplace_back(absl::StrCat("s", i));
    } else {
      s.emplace_back(d[i]);
    }
  }
  return s;
}

struct Product {
  std::vector<int64_t> a, b;  // the MatMul's operand dims (after any Transpose)
  Perm pa, pb;                // empty: no Transpose
  bool share_a = false;       // the Transpose of A is a second output
  int symbolic = -1;          // this axis of each Transpose input is a symbol
};

// MatMul(Transpose(a, pa) | a, Transpose(b, pb) | b), optimized against unoptimized.
Outcome RunProduct(const Product& p, uint32_t seed) {
  const std::vector<int64_t> ad = p.pa.empty() ? p.a : Unpermuted(p.a, p.pa);
  const std::vector<int64_t> bd = p.pb.empty() ? p.b : Unpermuted(p.b, p.pb);
  const Inputs in = {{"a", RandomF32(ad, seed)}, {"b", RandomF32(bd, seed + 1)}};
  return CompareWithUnoptimized(
      [&](GraphBuilder& g) {
        Value* a = g.Input("a", DType::kF32, Specs(ad, p.symbolic));
        Value* b = g.Input("b", DType::kF32, Specs(bd, p.symbolic));
        Value* at = p.pa.empty() ? a : g.Op("Transpose", {a}, {{"perm", AttrInts(p.pa)}});
        Value* bt = p.pb.empty() ? b : g.Op("Transpose", {b}, {{"perm", AttrInts(p.pb)}});
        g.Output("y", g.Op("MatMul", {at, bt}));
        if (p.share_a) g.Output("at", at);
      },
      in, {}, 1e-4);
}

// Random sizes for each form: 2-D Aᵀ B and A Bᵀ, batched Q Kᵀ outside attention, the
// [L, B, H, D] head layouts of nn.MultiheadAttention, a broadcast batch, a 1-D B.
TEST(MatMulTransposeTest, FoldsOnRandomSizes) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 6; ++trial) {
    SCOPED_TRACE(trial);
    // From trial 3 on, dims of 1 too: a Transpose that then moves only axes of size 1 is a
    // view (transpose_unit_axes) and the MatMul has nothing left to fold.
    const int64_t lo = trial < 3 ? 2 : 1;
    auto dim = [&rng, lo](int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    const int64_t m = dim(23), k = dim(23), n = dim(23), b = dim(4), h = dim(3);
    const std::vector<Product> forms = {
        {{m, k}, {k, n}, {1, 0}, {}},
        {{m, k}, {k, n}, {}, {1, 0}},
        {{m, k}, {k, n}, {1, 0}, {1, 0}},
        {{b, h, m, k}, {b, h, k, n}, {}, {0, 1, 3, 2}},
        {{b, h, m, k}, {b, h, k, n}, {1, 2, 0, 3}, {1, 2, 3, 0}},
        {{b, m, k}, {k, n}, {0, 2, 1}, {}},
        {{1, m, k}, {b, k, n}, {}, {0, 2, 1}},  // a broadcast batch
        {{m, k}, {b, k, n}, {1, 0}, {0, 2, 1}},
        {{b, m, k}, {k}, {1, 0, 2}, {}},
        {{b, m, k}, {b, k, n}, {0, 2, 1}, {}, false, 0},  // a symbolic batch
    };
    for (size_t f = 0; f < forms.size(); ++f) {
      SCOPED_TRACE(f);
      Outcome o = RunProduct(forms[f], 10 * trial + static_cast<uint32_t>(f));
      EXPECT_FALSE(o.HasKernel("Transpose"));
      if (lo == 2) {
        EXPECT_EQ(o.fired["matmul_transpose"], 1);
        EXPECT_TRUE(o.HasKernel("dynvm::MatMul"));
        EXPECT_FALSE(o.HasKernel("MatMul"));
      } else {
        EXPECT_GE(o.fired["matmul_transpose"] + o.fired["transpose_unit_axes"], 1);
      }
    }
  }
}

TEST(MatMulTransposeTest, NearMissesAreLeftAlone) {
  // The Transpose is read elsewhere: it stays, and so does the MatMul.
  Product shared{{5, 7}, {7, 3}, {1, 0}, {}, /*share_a=*/true};
  Outcome o = RunProduct(shared, 1);
  EXPECT_EQ(o.fired["matmul_transpose"], 0);
  EXPECT_TRUE(o.HasKernel("Transpose"));
  // The last axis moves into the batch dims: no matrix axis has a unit stride.
  Outcome batch = RunProduct({{4, 5, 7}, {4, 7, 3}, {2, 0, 1}, {}}, 2);
  EXPECT_EQ(batch.fired["matmul_transpose"], 0);
  EXPECT_TRUE(batch.HasKernel("Transpose"));
  // ... but the other operand's Transpose still folds, this one is read as is.
  Outcome mixed = RunProduct({{4, 5, 7}, {4, 7, 3}, {2, 0, 1}, {0, 2, 1}}, 3);
  EXPECT_EQ(mixed.fired["matmul_transpose"], 1);
  EXPECT_TRUE(mixed.HasKernel("Transpose"));
  EXPECT_TRUE(mixed.HasKernel("dynvm::MatMul"));
  // f64 products are left alone.
  const Inputs in = {{"a", RandomF32({7, 5}, 4)}, {"b", RandomF32({7, 3}, 5)}};
  Outcome f64 = CompareWithUnoptimized(
      [](GraphBuilder& g) {
        AttrValue to = AttrInt(static_cast<int64_t>(11));  // ONNX DOUBLE
        Value* a = g.Op("Cast", {g.Input("a", DType::kF32, {7, 5})}, {{"to", to}});
        Value* b = g.Op("Cast", {g.Input("b", DType::kF32, {7, 3})}, {{"to", to}});
        Value* y = g.Op("MatMul", {g.Op("Transpose", {a}, {{"perm", AttrInts({1, 0})}}), b});
        g.Output("y", g.Op("Cast", {y}, {{"to", AttrInt(1)}}));
      },
      in, {}, 1e-5);
  EXPECT_EQ(f64.fired["matmul_transpose"], 0);
  EXPECT_TRUE(f64.HasKernel("Transpose"));
  // A constant operand: folding makes it a plain weight, the rule never sees a Transpose.
  const Inputs x = {{"x", RandomF32({3, 6}, 6)}};
  Outcome weight = CompareWithUnoptimized(
      [](GraphBuilder& g) {
        Value* w = g.Constant(RandomF32({4, 6}, 7), "", /*is_weight=*/true);
        Value* wt = g.Op("Transpose", {w}, {{"perm", AttrInts({1, 0})}});
        g.Output("y", g.Op("MatMul", {g.Input("x", DType::kF32, {3, 6}), wt}));
      },
      x, {}, 1e-5);
  EXPECT_EQ(weight.fired["matmul_transpose"], 0);
  EXPECT_FALSE(weight.HasKernel("Transpose"));
}

// Scores softmaxed and multiplied by V are attention's: matmul_transpose runs after it and must
// not take Q·Kᵀ. Without the softmax the same product is matmul_transpose's.
TEST(MatMulTransposeTest, AttentionKeepsItsProduct) {
  const int64_t b = 2, h = 3, l = 5, d = 4;
  const Inputs in = {{"q", RandomF32({b, h, l, d}, 1)},
                     {"k", RandomF32({b, h, l, d}, 2)},
                     {"v", RandomF32({b, h, l, d}, 3)}};
  for (bool softmax : {true, false}) {
    SCOPED_TRACE(softmax);
    Outcome o = CompareWithUnoptimized(
        [&](GraphBuilder& g) {
          Value* q = g.Input("q", DType::kF32, {b, h, l, d});
          Value* k = g.Input("k", DType::kF32, {b, h, l, d});
          Value* v = g.Input("v", DType::kF32, {b, h, l, d});
          Value* kt = g.Op("Transpose", {k}, {{"perm", AttrInts({0, 1, 3, 2})}});
          Value* s = g.Op("Div", {g.Op("MatMul", {q, kt}), g.ScalarF32(2.0f)});
          if (softmax) s = g.Op("Softmax", {s}, {{"axis", AttrInt(-1)}});
          g.Output("y", g.Op("MatMul", {s, v}));
        },
        in, {}, 1e-5);
    EXPECT_EQ(o.fired["attention"], softmax ? 1 : 0);
    EXPECT_EQ(o.fired["matmul_transpose"], softmax ? 0 : 1);
    EXPECT_FALSE(o.HasKernel("Transpose"));
  }
}

// MatMul(x, w.t()) + b with a w that is not a constant: matmul_bias makes a Linear, whose
// Transpose becomes trans_b.
TEST(MatMulTransposeTest, LinearTakesTheTransposeAsTransB) {
  const Inputs in = {{"x", RandomF32({2, 5, 6}, 1)}, {"w", RandomF32({4, 6}, 2)}};
  Outcome o = CompareWithUnoptimized(
      [](GraphBuilder& g) {
        Value* x = g.Input("x", DType::kF32, {2, "s", 6});
        Value* w = g.Input("w", DType::kF32, {4, 6});
        Value* wt = g.Op("Transpose", {w}, {{"perm", AttrInts({1, 0})}});
        Value* bias = g.Constant(RandomF32({4}, 3));
        g.Output("y", g.Op("Add", {g.Op("MatMul", {x, wt}), bias}));
      },
      in, {}, 1e-5);
  EXPECT_EQ(o.fired["matmul_bias"], 1);
  EXPECT_EQ(o.fired["linear_transpose"], 1);
  EXPECT_TRUE(o.HasKernel("dynvm::Linear"));
  EXPECT_FALSE(o.HasKernel("Transpose"));
}

// Only the last row is kept: NarrowSelectedRows narrows dynvm::MatMul's A along the axis a_perm
// puts in the rows (here x's last axis), and the program still equals the unoptimized one.
void BuildLastRow(GraphBuilder& g) {
  Value* x = g.Input("x", DType::kF32, {2, 6, "s"});
  Value* w = g.Input("w", DType::kF32, {6, 5});
  Value* a = g.Op("Transpose", {x}, {{"perm", AttrInts({0, 2, 1})}});
  Value* y = g.Op("MatMul", {a, w});
  g.Output("last", g.Op("Gather", {y, g.ScalarI64(-1)}, {{"axis", AttrInt(1)}}));
}

TEST(MatMulTransposeTest, SelectedRowNarrowsThroughThePermutation) {
  Module m;
  GraphBuilder g(m.AddFunction("main"));
  BuildLastRow(g);
  ASSERT_TRUE(InferShapes(m).ok());
  absl::StatusOr<RewriteCounts> fired = ApplyRewrites(m);
  ASSERT_TRUE(fired.ok()) << fired.status();
  EXPECT_EQ((*fired)["matmul_transpose"], 1);
  EXPECT_GE(NarrowSelectedRows(m), 1) << m.Dump();
  ASSERT_TRUE(InferShapes(m).ok()) << m.Dump();
  bool narrowed = false;
  for (const auto& n : m.functions()[0].graph->nodes) {
    if (n->domain == "dynvm" && n->op == "MatMul") {
      narrowed = SymbolicContext::AsConst((*n->inputs[0]->shape)[2]) == 1;
    }
  }
  EXPECT_TRUE(narrowed) << m.Dump();
  Outcome o = CompareWithUnoptimized(
      &BuildLastRow, {{"x", RandomF32({2, 6, 7}, 1)}, {"w", RandomF32({6, 5}, 2)}}, {}, 1e-5);
  EXPECT_EQ(o.fired["matmul_transpose"], 1);
}

}  // namespace
}  // namespace dynvm::compiler::rewrite
