// TransposeConstantWeights (compiler/transpose_weights.h): constant [K, N] weights of products
// with few rows are stored once, transposed; the compiled products equal the reference MatMul
// on the original weights (odd K and N, 1 to 130 rows, batch dims, a weight shared by two
// products, a Linear with a bias); weights read elsewhere or only by many-row products keep
// their layout.
#include "compiler/transpose_weights.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "compiler/compiler_testing.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler {
namespace {

Tensor RefMatMul(const Tensor& a, const Tensor& b) {
  testing::KernelCall call("MatMul");
  call.In(a).In(b).Out(DType::kF32);
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? (*r)[0] : Tensor();
}

void ExpectNear(const Tensor& got, const Tensor& want, double tol) {
  ASSERT_EQ(got.dims(), want.dims()) << got.DebugString() << " vs " << want.DebugString();
  std::vector<double> a = testing::ToDoubles(got), b = testing::ToDoubles(want);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "element " << i;
}

CompileOptions Disabled() {
  CompileOptions o;
  o.disabled_rewrites = {"transpose_weights"};
  return o;
}

// y = x W and z = u W (a decode-shaped [batch, seq, K] and a [1, K] product sharing W), with
// K = 131 and N = 129 (odd: no vector width divides them).
TEST(TransposeWeightsTest, DecodeProductsMatchTheReferenceAndTheWeightIsStoredOnce) {
  constexpr int64_t kK = 131, kN = 129;
  const Tensor w = RandomF32({kK, kN}, 1);
  auto build = [&](Module& m) {
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {DimSpec("batch"), DimSpec("seq"), kK});
    Value* u = b.Input("u", DType::kF32, {1, kK});
    Value* wv = b.Constant(w, "w", /*is_weight=*/true);
    b.Output("y", b.Op("MatMul", {x, wv}));
    b.Output("z", b.Op("MatMul", {u, wv}));
  };
  Module on_m, off_m;
  build(on_m);
  build(off_m);
  Compiled on = CompileOrDie(on_m), off = CompileOrDie(off_m, Disabled());
  ASSERT_TRUE(on.exe && off.exe);
  EXPECT_EQ(on.result.transposed_weights, 1);
  EXPECT_EQ(off.result.transposed_weights, 0);
  // Stored once: the same constant bytes as the untransposed executable, one weight.
  EXPECT_EQ(on.exe->constant_segment_bytes(), off.exe->constant_segment_bytes());
  EXPECT_EQ(on.exe->weight_bytes(), off.exe->weight_bytes());
  EXPECT_EQ(on.exe->num_weights(), 1);
  const Tensor u = RandomF32({1, kK}, 2);
  for (const int threads : {1, 2}) {
    for (const int64_t batch : {1, 2}) {
      for (const int64_t seq : {1, 2, 7, 64, 130}) {
        SCOPED_TRACE(absl::StrCat("threads ", threads, " batch ", batch, " seq ", seq));
        const Tensor x = RandomF32({batch, seq, kK}, static_cast<uint32_t>(seq + 100 * batch));
        std::vector<Tensor> got = RunOrDie(on.exe, {{"x", x}, {"u", u}}, threads);
        ASSERT_EQ(got.size(), 2u);
        ExpectNear(got[0], RefMatMul(x, w), 1e-4);
        ExpectNear(got[1], RefMatMul(u, w), 1e-4);
      }
    }
  }
}

// MatMul + bias (a dynvm::Linear with trans_b = 0) takes the transposed weight with trans_b = 1.
TEST(TransposeWeightsTest, LinearTakesTheTransposedWeight) {
  constexpr int64_t kK = 160, kN = 103;
  const Tensor w = RandomF32({kK, kN}, 3), bias = RandomF32({kN}, 4);
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {DimSpec("rows"), kK});
  Value* y = b.Op("MatMul", {x, b.Constant(w, "w", true)});
  b.Output("y", b.Op("Add", {y, b.Constant(bias, "b", true)}));
  Compiled c = CompileOrDie(m);
  ASSERT_TRUE(c.exe);
  EXPECT_EQ(c.result.transposed_weights, 1);
  for (const int64_t rows : {1, 3, 33}) {
    SCOPED_TRACE(rows);
    const Tensor x = RandomF32({rows, kK}, static_cast<uint32_t>(rows));
    std::vector<Tensor> got = RunOrDie(c.exe, {{"x", x}}, 1);
    ASSERT_EQ(got.size(), 1u);
    Tensor want = RefMatMul(x, w);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < kN; ++j) want.data<float>()[i * kN + j] += bias.data<float>()[j];
    }
    ExpectNear(got[0], want, 1e-4);
  }
}

// A weight also read by something other than a product's B, only by products of many rows
// known at compile time, or of short rows and more outputs than K (where the axpy form reads
// faster), keeps its [K, N] layout.
TEST(TransposeWeightsTest, WeightsReadElsewhereOrOnlyByManyRowsOrShortAndWideStay) {
  constexpr int64_t kK = 130, kN = 128;
  const Tensor w = RandomF32({kK, kN}, 5);
  {
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {DimSpec("rows"), kK});
    Value* v = b.Input("v", DType::kF32, {kK, kN});
    Value* wv = b.Constant(w, "w", true);
    b.Output("y", b.Op("MatMul", {x, wv}));
    b.Output("s", b.Op("Add", {v, wv}));
    Compiled c = CompileOrDie(m);
    EXPECT_EQ(c.result.transposed_weights, 0);
  }
  {
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {4, 64, kK});
    b.Output("y", b.Op("MatMul", {x, b.Constant(w, "w", true)}));
    Compiled c = CompileOrDie(m);
    ASSERT_TRUE(c.exe);
    EXPECT_EQ(c.result.transposed_weights, 0);
    const Tensor xv = RandomF32({4, 64, kK}, 6);
    ExpectNear(RunOrDie(c.exe, {{"x", xv}}, 1)[0], RefMatMul(xv, w), 1e-4);
  }
  {
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {DimSpec("rows"), 512});
    b.Output("y", b.Op("MatMul", {x, b.Constant(RandomF32({512, 1408}, 7), "w", true)}));
    Compiled c = CompileOrDie(m);
    EXPECT_EQ(c.result.transposed_weights, 0);
  }
}

}  // namespace
}  // namespace dynvm::compiler
