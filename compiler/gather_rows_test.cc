// GatherRowsEarly (gather_rows.cc), and NarrowSelectedRows (narrow_rows.cc) through the same
// Llama-like block (dynvm::RMSNorm, dynvm::SwiGlu, quantized products). Each case checks the
// pass's count and the narrowed shapes on the IR, and the optimized compile against the
// unoptimized one (no passes: every row computed, then picked) on random inputs.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "compiler/compiler_testing.h"
#include "compiler/passes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler {
namespace {

using ::testing::HasSubstr;

void ExpectNear(const Tensor& got, const Tensor& want, double tol) {
  ASSERT_EQ(got.dims(), want.dims()) << got.DebugString() << " vs " << want.DebugString();
  std::vector<double> a = testing::ToDoubles(got), b = testing::ToDoubles(want);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "element " << i;
}

enum class Pick {
  kRunTime,   // row b * seq + lengths[b] - 1 of the [batch * seq, vocab] rows (--decode's)
  kConstant,  // position -1 of every batch row (Gather(logits, -1, axis 1))
};

struct BlockValues {
  Value* hidden_matmul = nullptr;  // the first product, on the block's input
  Value* rms_norm = nullptr;
  Value* logits = nullptr;  // the output layer's product
};

// x [batch, seq, 16] -> residual product -> RMSNorm -> SwiGLU MLP -> residual -> LayerNorm ->
// output layer [batch, seq, 10] + bias -> LogSoftmax, then the pick. With `hidden_output`, the
// second residual sum is also an output (needed whole: the narrowing stops there). With
// `conv1d`, the MLP's down projection is GPT-2's Conv1D as torch exports it: Reshape to [batch *
// seq, 24] -> Gemm (+ bias) -> Reshape back to [batch, seq, 16].
BlockValues BuildBlock(Module& m, Pick pick, bool hidden_output, bool conv1d = false) {
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {"batch", "seq", 16});
  Value* lengths = b.Input("lengths", DType::kI64, {"batch"});
  BlockValues v;
  v.hidden_matmul = b.Op("MatMul", {x, b.Constant(RandomF32({16, 16}, 1), "w0", true)});
  Value* h = b.Op("Add", {x, v.hidden_matmul});
  Attrs norm = {{"axis", AttrInt(-1)}, {"epsilon", AttrFloat(1e-5f)}};
  v.rms_norm = b.Op("RMSNorm", {h, b.Constant(RandomF32({16}, 2), "s1", true)}, norm, "dynvm");
  Value* gate = b.Op("MatMul", {v.rms_norm, b.Constant(RandomF32({16, 24}, 3), "wg", true)});
  Value* up = b.Op("MatMul", {v.rms_norm, b.Constant(RandomF32({16, 24}, 4), "wu", true)});
  Value* act = b.Op("SwiGlu", {gate, up}, {}, "dynvm");
  Value* down = nullptr;
  if (conv1d) {
    Value* flat = b.Op("Reshape", {act, b.VectorI64({-1, 24})});
    Value* product = b.Op("Gemm", {flat, b.Constant(RandomF32({24, 16}, 5), "wd", true),
                                   b.Constant(RandomF32({16}, 10), "bd", true)});
    Value* lead = b.Op("Slice", {b.Op("Shape", {x}), b.VectorI64({0}), b.VectorI64({2})});
    down = b.Op("Reshape",
                {product, b.Op("Concat", {lead, b.VectorI64({16})}, {{"axis", AttrInt(0)}})});
  } else {
    down = b.Op("MatMul", {act, b.Constant(RandomF32({24, 16}, 5), "wd", true)});
  }
  Value* h2 = b.Op("Add", {h, down});
  Value* n2 = b.Op("LayerNormalization",
                   {h2, b.Constant(RandomF32({16}, 6)), b.Constant(RandomF32({16}, 7))},
                   {{"axis", AttrInt(-1)}});
  v.logits = b.Op("MatMul", {n2, b.Constant(RandomF32({16, 10}, 8), "wo", true)});
  Value* scores = b.Op("LogSoftmax", {b.Op("Add", {v.logits, b.Constant(RandomF32({10}, 9))})},
                       {{"axis", AttrInt(-1)}});
  if (pick == Pick::kConstant) {
    b.Output("picked", b.Op("Gather", {scores, b.ScalarI64(-1)}, {{"axis", AttrInt(1)}}));
  } else {
    // The index is computed after the products, as decode_wrap.cc's graph has it.
    Value* shape = b.Op("Shape", {x});
    Value* batch = b.Op("Slice", {shape, b.VectorI64({0}), b.VectorI64({1})});
    Value* seq = b.Op("Slice", {shape, b.VectorI64({1}), b.VectorI64({2})});
    Value* rows =
        b.Op("Reshape", {scores, b.Op("Concat", {b.Op("Mul", {batch, seq}), b.VectorI64({-1})},
                                      {{"axis", AttrInt(0)}})});
    Value* starts = b.Op(
        "Mul", {b.Op("Range",
                     {b.ScalarI64(0), b.Op("Squeeze", {batch, b.VectorI64({0})}), b.ScalarI64(1)}),
                b.Op("Squeeze", {seq, b.VectorI64({0})})});
    Value* index = b.Op("Add", {starts, b.Op("Sub", {lengths, b.ScalarI64(1)})});
    b.Output("picked", b.Op("Gather", {rows, index}));
  }
  if (hidden_output) b.Output("hidden", h2);
  return v;
}

Tensor Lengths(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return *Tensor::FromVector<int64_t>(DType::kI64, {n}, std::move(v));
}

// Compiles the block optimized (with `options`) and without passes and compares them on batch 3
// at several lengths, each batch row's last position somewhere else.
void ExpectSameAsUnoptimized(Pick pick, bool hidden_output, CompileOptions options, double tol,
                             bool conv1d = false) {
  Module opt_module, plain_module;
  BuildBlock(opt_module, pick, hidden_output, conv1d);
  BuildBlock(plain_module, pick, hidden_output, conv1d);
  CompileOptions plain_options = options;
  plain_options.optimize = false;
  Compiled opt = CompileOrDie(opt_module, options);
  Compiled plain = CompileOrDie(plain_module, plain_options);
  ASSERT_TRUE(opt.exe && plain.exe);
  for (int64_t seq : {1, 4, 9}) {
    SCOPED_TRACE(absl::StrCat("seq ", seq));
    Tensor x = RandomF32({3, seq, 16}, 20 + static_cast<uint32_t>(seq));
    Tensor lengths = Lengths({seq, 1, (seq + 1) / 2});
    for (int threads : {1, 2}) {
      std::vector<Tensor> got = RunOrDie(opt.exe, {{"x", x}, {"lengths", lengths}}, threads);
      std::vector<Tensor> want = RunOrDie(plain.exe, {{"x", x}, {"lengths", lengths}});
      ASSERT_EQ(got.size(), hidden_output ? 2u : 1u);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) ExpectNear(got[i], want[i], tol);
    }
  }
}

TEST(GatherRowsTest, RunTimePickComputesThePickedRowsOnly) {
  for (bool hidden_output : {false, true}) {
    SCOPED_TRACE(hidden_output ? "second residual also an output" : "the pick only");
    Module m;
    BlockValues v = BuildBlock(m, Pick::kRunTime, hidden_output);
    ASSERT_TRUE(InferShapes(m).ok());
    EXPECT_EQ(NarrowSelectedRows(m), 0);  // a run-time index: not its case
    const int count = GatherRowsEarly(m);
    ASSERT_TRUE(InferShapes(m).ok()) << m.Dump();
    // The output layer's product (and, unless the residual is needed whole, everything from the
    // first product on) computes [batch, ...]: one row per batch row.
    ASSERT_TRUE(v.logits->shape && v.hidden_matmul->shape && v.rms_norm->shape);
    EXPECT_EQ(v.logits->rank(), 2) << m.Dump();
    // The [batch * seq, 10] view of the scores (Reshape, now Identity) counts as well.
    if (hidden_output) {
      EXPECT_EQ(count, 5) << m.Dump();  // + LogSoftmax, Add (bias), MatMul, LayerNormalization
      EXPECT_EQ(v.hidden_matmul->rank(), 3);
      EXPECT_EQ(v.rms_norm->rank(), 3);
    } else {
      EXPECT_EQ(count, 13) << m.Dump();
      EXPECT_EQ(v.hidden_matmul->rank(), 2) << m.Dump();
      EXPECT_EQ(v.rms_norm->rank(), 2);
    }
    ExpectSameAsUnoptimized(Pick::kRunTime, hidden_output, {}, 1e-5);
  }
}

// Weights of at least 0 bytes stored as `q` (int4: blocks of 16, f32 activations).
CompileOptions Quantized(DType q) {
  CompileOptions options;
  options.quantize_weights = q;
  options.quantize_min_bytes = 0;
  options.quantize_block = 16;
  options.quantize_accuracy_level = 0;
  return options;
}

// The block compiled with `options`, its pass counts checked by `check`, then against the
// unoptimized compile.
template <typename Check>
void CompileAndCompare(Pick pick, const CompileOptions& options, Check check) {
  Module m;
  BuildBlock(m, pick, false);
  Compiled c = CompileOrDie(m, options);
  ASSERT_TRUE(c.exe);
  check(c.result, m);
  ExpectSameAsUnoptimized(pick, false, options, 1e-3);
}

TEST(GatherRowsTest, QuantizedProductsArePickedToo) {
  // int8 (dynvm::QMatMul), bf16, and int4 blocks (com.microsoft::MatMulNBits, f32 activations).
  for (DType q : {DType::kI8, DType::kBF16, DType::kU8}) {
    SCOPED_TRACE(DTypeName(q));
    CompileAndCompare(Pick::kRunTime, Quantized(q), [](const CompileResult& r, Module& m) {
      EXPECT_EQ(r.gathered_row_nodes, 13) << m.Dump();
    });
  }
}

// Reshape -> Gemm -> Reshape (GPT-2's Conv1D) keeps the rows: both Reshapes and the Gemm are
// narrowed, and the pick goes on through the MLP above them.
TEST(GatherRowsTest, ReshapesThatKeepTheRowsAndGemmArePickedThrough) {
  Module m;
  BlockValues v = BuildBlock(m, Pick::kRunTime, false, /*conv1d=*/true);
  ASSERT_TRUE(InferShapes(m).ok());
  EXPECT_EQ(GatherRowsEarly(m), 15) << m.Dump();  // 13, the down product's 2 more nodes
  ASSERT_TRUE(InferShapes(m).ok()) << m.Dump();
  ASSERT_TRUE(v.hidden_matmul->shape && v.rms_norm->shape);
  EXPECT_EQ(v.hidden_matmul->rank(), 2) << m.Dump();
  EXPECT_EQ(v.rms_norm->rank(), 2) << m.Dump();
  ExpectSameAsUnoptimized(Pick::kRunTime, false, {}, 1e-5, /*conv1d=*/true);
}

// A Reshape that moves elements between rows is not row-wise: nothing before it is narrowed.
TEST(GatherRowsTest, ReshapeAcrossRowsStopsThePick) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {"batch", 6, 4});
  Value* index = b.Input("index", DType::kI64, {"n"});
  Value* h = b.Op("MatMul", {x, b.Constant(RandomF32({4, 4}, 11), "w", true)});
  // [batch, 6, 4] -> [batch * 4, 6]: the rows of 4 become rows of 6.
  Value* moved = b.Op("Reshape", {h, b.VectorI64({-1, 6})});
  Value* y = b.Op("Relu", {moved});
  b.Output("picked", b.Op("Gather", {y, index}));
  ASSERT_TRUE(InferShapes(m).ok());
  EXPECT_EQ(GatherRowsEarly(m), 1) << m.Dump();  // the Relu only
  ASSERT_TRUE(InferShapes(m).ok()) << m.Dump();
  EXPECT_EQ(h->rank(), 3);
}

TEST(GatherRowsTest, IndexOutOfRangeIsStillAnError) {
  for (bool optimize : {true, false}) {
    SCOPED_TRACE(optimize ? "optimized" : "unoptimized");
    Module m;
    BuildBlock(m, Pick::kRunTime, false);
    CompileOptions options;
    options.optimize = optimize;
    Compiled c = CompileOrDie(m, options);
    ASSERT_TRUE(c.exe);
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c.exe);
    ASSERT_TRUE(vm.ok()) << vm.status();
    ASSERT_TRUE((*vm)->SetInput("x", RandomF32({2, 3, 16}, 30)).ok());
    // Row 1's last position 3 + 5 - 1 = 7 of 3: past the 6 rows.
    ASSERT_TRUE((*vm)->SetInput("lengths", Lengths({3, 5})).ok());
    absl::Status s = (*vm)->Run();
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("Gather"));
    // The VM stays usable: a good index runs.
    ASSERT_TRUE((*vm)->SetInput("lengths", Lengths({3, 2})).ok());
    EXPECT_TRUE((*vm)->Run().ok());
  }
}

// NarrowSelectedRows on a constant pick goes through RMSNorm, SwiGlu and the quantized products
// as well.
TEST(GatherRowsTest, ConstantPickNarrowsThroughRmsNormAndSwiGlu) {
  Module m;
  BlockValues v = BuildBlock(m, Pick::kConstant, false);
  ASSERT_TRUE(InferShapes(m).ok());
  EXPECT_GE(NarrowSelectedRows(m), 12) << m.Dump();
  ASSERT_TRUE(InferShapes(m).ok()) << m.Dump();
  ASSERT_TRUE(v.hidden_matmul->shape && v.rms_norm->shape);
  EXPECT_EQ(SymbolicContext::AsConst((*v.rms_norm->shape)[1]), 1) << m.Dump();
  EXPECT_EQ(SymbolicContext::AsConst((*v.hidden_matmul->shape)[1]), 1) << m.Dump();
  ExpectSameAsUnoptimized(Pick::kConstant, false, {}, 1e-5);
  CompileAndCompare(Pick::kConstant, Quantized(DType::kI8), [](const CompileResult& r, Module& q) {
    EXPECT_GE(r.narrowed_nodes, 12) << q.Dump();
  });
}

}  // namespace
}  // namespace dynvm::compiler
