// TransposeConstantWeights (compiler/transpose_weights.h): constant [K, N] weights of products
// with few rows are stored once, as panels of 16 columns (MatMuls) or transposed (a Linear); the
// compiled products equal the reference MatMul on the original weights (odd K and N, 1 to 130
// rows, batch dims, a weight shared by two products, a Linear with a bias, 1 and 2 threads) and
// do not depend on what ran before; weights read elsewhere or only by many-row products keep
// their layout; quantized weights are not touched.
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

// The weight's only stored form: the one constant MatMuls read, and every product's node.
struct StoredWeight {
  const Tensor* tensor = nullptr;
  int products = 0;  // dynvm::MatMul nodes reading it
  std::vector<int64_t> packed_n;
};

StoredWeight FindStoredWeight(Module& m) {
  StoredWeight s;
  for (auto& n : m.functions()[0].graph->nodes) {
    if (n->domain != "dynvm" || n->op != "MatMul") continue;
    const Value* b = n->inputs[1];
    if (b == nullptr || !b->constant.has_value()) continue;
    EXPECT_TRUE(s.tensor == nullptr || s.tensor == &*b->constant) << "two weights";
    s.tensor = &*b->constant;
    ++s.products;
    const AttrValue* a = n->attr("b_packed_n");
    if (a != nullptr) s.packed_n.push_back(a->i);
  }
  return s;
}

// y = x W and z = u W (a decode-shaped [batch, seq, K] and a [1, K] product sharing W), with
// K = 131 and N = 129 (odd: no vector width divides them; N pads to 144). Stored once, as the
// packed GEMM's panels; with pack_weights off, transposed.
TEST(TransposeWeightsTest, DecodeProductsMatchTheReferenceAndTheWeightIsStoredOnce) {
  constexpr int64_t kK = 131, kN = 129, kPanels = 9;
  const Tensor w = RandomF32({kK, kN}, 1);
  auto build = [&](Module& m) {
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {DimSpec("batch"), DimSpec("seq"), kK});
    Value* u = b.Input("u", DType::kF32, {1, kK});
    Value* wv = b.Constant(w, "w", /*is_weight=*/true);
    b.Output("y", b.Op("MatMul", {x, wv}));
    b.Output("z", b.Op("MatMul", {u, wv}));
  };
  Module on_m, off_m, transposed_m;
  build(on_m);
  build(off_m);
  build(transposed_m);
  CompileOptions no_panels;
  no_panels.disabled_rewrites = {"pack_weights"};
  Compiled on = CompileOrDie(on_m), off = CompileOrDie(off_m, Disabled()),
           transposed = CompileOrDie(transposed_m, no_panels);
  ASSERT_TRUE(on.exe && off.exe && transposed.exe);
  EXPECT_EQ(on.result.packed_weights, 1);
  EXPECT_EQ(on.result.transposed_weights, 0);
  EXPECT_EQ(off.result.packed_weights + off.result.transposed_weights, 0);
  EXPECT_EQ(transposed.result.packed_weights, 0);
  EXPECT_EQ(transposed.result.transposed_weights, 1);
  // Stored once: the panels add only N's padding to 16 columns; transposed, the same bytes.
  const int64_t padding = (kPanels * 16 - kN) * kK * 4;
  EXPECT_EQ(on.exe->constant_segment_bytes(), off.exe->constant_segment_bytes() + padding);
  EXPECT_EQ(on.exe->weight_bytes(), off.exe->weight_bytes() + padding);
  EXPECT_EQ(transposed.exe->constant_segment_bytes(), off.exe->constant_segment_bytes());
  EXPECT_EQ(on.exe->num_weights(), 1);
  // The graph: both products dynvm::MatMul(A, panels, b_packed_n = N) on one constant
  // [ceil(N / 16), K, 16] holding W[k, j] at [j / 16, k, j % 16] and zeros past N.
  const StoredWeight stored = FindStoredWeight(on_m);
  ASSERT_NE(stored.tensor, nullptr);
  EXPECT_EQ(stored.products, 2);
  EXPECT_EQ(stored.packed_n, (std::vector<int64_t>{kN, kN}));
  ASSERT_EQ(stored.tensor->dims(), (std::vector<int64_t>{kPanels, kK, 16}));
  const float* panels = stored.tensor->data<float>();
  for (int64_t k = 0; k < kK; ++k) {
    for (int64_t j = 0; j < kPanels * 16; ++j) {
      const float want = j < kN ? w.data<float>()[k * kN + j] : 0.0f;
      ASSERT_EQ(panels[((j / 16) * kK + k) * 16 + j % 16], want) << "k " << k << " j " << j;
    }
  }
  const Tensor u = RandomF32({1, kK}, 2);
  for (const Compiled* c : {&on, &transposed}) {
    for (const int threads : {1, 2}) {
      for (const int64_t batch : {1, 2}) {
        for (const int64_t seq : {1, 2, 7, 64, 130}) {
          SCOPED_TRACE(absl::StrCat(c == &on ? "panels" : "transposed", " threads ", threads,
                                    " batch ", batch, " seq ", seq));
          const Tensor x = RandomF32({batch, seq, kK}, static_cast<uint32_t>(seq + 100 * batch));
          std::vector<Tensor> got = RunOrDie(c->exe, {{"x", x}, {"u", u}}, threads);
          ASSERT_EQ(got.size(), 2u);
          ExpectNear(got[0], RefMatMul(x, w), 1e-4);
          ExpectNear(got[1], RefMatMul(u, w), 1e-4);
        }
      }
    }
  }
}

// A product's bits do not depend on the thread count nor on what ran before (one path per
// weight from the first call): the same decode-shaped input gives the same bits at 1 and 2
// threads, before and after a prompt-sized product on the same VM.
TEST(TransposeWeightsTest, PanelProductsGiveTheSameBitsWhateverRanBefore) {
  constexpr int64_t kK = 1024, kN = 200;
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {DimSpec("rows"), kK});
  b.Output("y", b.Op("MatMul", {x, b.Constant(RandomF32({kK, kN}, 8), "w", true)}));
  Compiled c = CompileOrDie(m);
  ASSERT_TRUE(c.exe);
  EXPECT_EQ(c.result.packed_weights, 1);
  const Tensor one = RandomF32({1, kK}, 9), many = RandomF32({64, kK}, 10);
  const std::vector<Tensor> first = RunOrDie(c.exe, {{"x", one}}, 1);
  ASSERT_EQ(first.size(), 1u);
  for (const int threads : {1, 2}) {
    VmOptions o;
    o.num_threads = threads;
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c.exe, o);
    ASSERT_TRUE(vm.ok()) << vm.status();
    for (const Tensor* in : {&one, &many, &one}) {
      ASSERT_TRUE((*vm)->SetInput("x", *in).ok());
      ASSERT_TRUE((*vm)->Run().ok());
    }
    absl::StatusOr<std::vector<Tensor>> y = (*vm)->GetOutputs();
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->size(), 1u);
    EXPECT_EQ(testing::ToDoubles((*y)[0]), testing::ToDoubles(first[0])) << "threads " << threads;
  }
}

// Weight quantization (int8, int4, bf16) takes MatMul's plain [K, N] weights: the layout pass
// does not run, and the executable is the one compiled with it switched off.
TEST(TransposeWeightsTest, QuantizedWeightsAreUnaffected) {
  const Tensor w = RandomF32({256, 200}, 11);
  for (const DType q : {DType::kI8, DType::kU8, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(q));
    auto compile = [&](std::vector<std::string> disabled) {
      Module m;
      GraphBuilder b(m.AddFunction("main"));
      Value* x = b.Input("x", DType::kF32, {DimSpec("rows"), 256});
      b.Output("y", b.Op("MatMul", {x, b.Constant(w, "w", true)}));
      CompileOptions o;
      o.quantize_weights = q;
      o.disabled_rewrites = std::move(disabled);
      absl::StatusOr<CompileResult> r = Compile(m, o);
      EXPECT_TRUE(r.ok()) << r.status();
      return r.ok() ? *r : CompileResult();
    };
    const CompileResult on = compile({}), off = compile({"transpose_weights", "pack_weights"});
    EXPECT_EQ(on.packed_weights + on.transposed_weights, 0);
    EXPECT_FALSE(on.quantized_weights.empty());
    EXPECT_EQ(on.bytes, off.bytes);
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

// A weight also read by something other than a product's B, or only by products of many rows
// known at compile time, keeps its [K, N] layout; one that MatMuls alone read is stored as panels
// whatever its shape (short rows and more outputs than K too, where the axpy form read faster
// than the dot form), but a Linear's short and wide weight stays.
TEST(TransposeWeightsTest, WeightsReadElsewhereOrOnlyByManyRowsStay) {
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
    EXPECT_EQ(c.result.transposed_weights + c.result.packed_weights, 0);
  }
  {
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {4, 64, kK});
    b.Output("y", b.Op("MatMul", {x, b.Constant(w, "w", true)}));
    Compiled c = CompileOrDie(m);
    ASSERT_TRUE(c.exe);
    EXPECT_EQ(c.result.transposed_weights + c.result.packed_weights, 0);
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
    EXPECT_EQ(c.result.packed_weights, 1);
  }
  {
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {DimSpec("rows"), 512});
    Value* y = b.Op("MatMul", {x, b.Constant(RandomF32({512, 1408}, 7), "w", true)});
    b.Output("y", b.Op("Add", {y, b.Constant(RandomF32({1408}, 12), "b", true)}));
    Compiled c = CompileOrDie(m);
    EXPECT_EQ(c.result.transposed_weights + c.result.packed_weights, 0);
  }
}

}  // namespace
}  // namespace dynvm::compiler
