// TransposeConstantWeights (compiler/transpose_weights.h): constant [K, N] weights of products
// with few rows, and those Linears read, are stored once, as panels of 16 columns (MatMul and
// Linear with b_packed_n; transposed with pack_weights off); the compiled products equal the
// reference MatMul on the original weights (odd K and N, 1 to 130 rows, batch dims, a weight
// shared by two products, a Linear with a bias, trans_b = 1, 1 and 2 threads) and do not depend
// on what ran before; weights read elsewhere, by two orientations, under the size, or only by
// many-row MatMuls keep their layout; quantized weights are not touched.
#include "compiler/transpose_weights.h"

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
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

// One graph compiled three ways: with every rewrite (the weight stored as panels), with
// transpose_weights off (the weight as it came), and with only pack_weights off (transposed).
struct ThreeWays {
  Module panels_m, off_m, transposed_m;
  Compiled panels, off, transposed;
};

std::unique_ptr<ThreeWays> CompileThreeWays(absl::FunctionRef<void(Module&)> build) {
  auto t = std::make_unique<ThreeWays>();
  build(t->panels_m);
  build(t->off_m);
  build(t->transposed_m);
  CompileOptions no_panels;
  no_panels.disabled_rewrites = {"pack_weights"};
  t->panels = CompileOrDie(t->panels_m);
  t->off = CompileOrDie(t->off_m, Disabled());
  t->transposed = CompileOrDie(t->transposed_m, no_panels);
  EXPECT_TRUE(t->panels.exe && t->off.exe && t->transposed.exe);
  return t;
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
  const std::unique_ptr<ThreeWays> t = CompileThreeWays(build);
  ASSERT_TRUE(t->panels.exe && t->off.exe && t->transposed.exe);
  const Compiled &on = t->panels, &off = t->off, &transposed = t->transposed;
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
  const StoredWeight stored = FindStoredWeight(t->panels_m);
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

// The Linears reading a weight, and how: b_packed_n (-1: none), trans_b, W's dims.
struct LinearUse {
  int64_t packed_n = -1, trans_b = 0;
  std::vector<int64_t> w_dims;
};

std::vector<LinearUse> LinearUses(Module& m) {
  std::vector<LinearUse> uses;
  for (auto& n : m.functions()[0].graph->nodes) {
    if (n->domain != "dynvm" || n->op != "Linear") continue;
    LinearUse u;
    if (const AttrValue* a = n->attr("b_packed_n")) u.packed_n = a->i;
    if (const AttrValue* a = n->attr("trans_b")) u.trans_b = a->i;
    const Value* w = n->inputs[1];
    if (w != nullptr && w->constant.has_value()) {
      u.w_dims.assign(w->constant->dims().begin(), w->constant->dims().end());
    }
    uses.push_back(std::move(u));
  }
  return uses;
}

Tensor AddBias(Tensor y, const Tensor& bias) {
  const int64_t n = bias.numel();
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] += bias.data<float>()[i % n];
  return y;
}

// MatMul + bias (a dynvm::Linear with trans_b = 0) takes the weight as panels with b_packed_n,
// stored once (the panels add only N's padding); with pack_weights off, transposed with
// trans_b = 1 as before.
TEST(TransposeWeightsTest, LinearTakesThePanels) {
  constexpr int64_t kK = 160, kN = 103, kPanels = 7;
  const Tensor w = RandomF32({kK, kN}, 3), bias = RandomF32({kN}, 4);
  auto build = [&](Module& m) {
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {DimSpec("rows"), kK});
    Value* y = b.Op("MatMul", {x, b.Constant(w, "w", true)});
    b.Output("y", b.Op("Add", {y, b.Constant(bias, "b", true)}));
  };
  const std::unique_ptr<ThreeWays> t = CompileThreeWays(build);
  ASSERT_TRUE(t->panels.exe && t->off.exe && t->transposed.exe);
  const Compiled &c = t->panels, &off = t->off, &transposed = t->transposed;
  Module& m = t->panels_m;
  EXPECT_EQ(c.result.packed_weights, 1);
  EXPECT_EQ(c.result.transposed_weights, 0);
  EXPECT_EQ(transposed.result.transposed_weights, 1);
  // Stored once: the panels add N's padding to 16 columns (and the segment's alignment).
  const int64_t padding = (kPanels * 16 - kN) * kK * 4;
  EXPECT_GE(c.exe->constant_segment_bytes(), off.exe->constant_segment_bytes() + padding);
  EXPECT_LT(c.exe->constant_segment_bytes(), off.exe->constant_segment_bytes() + padding + 64);
  const std::vector<LinearUse> uses = LinearUses(m);
  ASSERT_EQ(uses.size(), 1u);
  EXPECT_EQ(uses[0].packed_n, kN);
  EXPECT_EQ(uses[0].trans_b, 0);
  EXPECT_EQ(uses[0].w_dims, (std::vector<int64_t>{kPanels, kK, 16}));
  for (const Compiled* e : {&c, &transposed}) {
    for (const int threads : {1, 2}) {
      for (const int64_t rows : {1, 3, 17, 33, 130}) {
        SCOPED_TRACE(
            absl::StrCat(e == &c ? "panels" : "transposed", " threads ", threads, " rows ", rows));
        const Tensor x = RandomF32({rows, kK}, static_cast<uint32_t>(rows));
        std::vector<Tensor> got = RunOrDie(e->exe, {{"x", x}}, threads);
        ASSERT_EQ(got.size(), 1u);
        ExpectNear(got[0], AddBias(RefMatMul(x, w), bias), 1e-4);
      }
    }
  }
}

// A Linear of many rows known at compile time takes the panels too (its kernel runs the packed
// GEMM at every row count), and so does a Gemm with transB = 1 (a dynvm::Linear with
// trans_b = 1 with its Relu: the panels of W^T, trans_b dropped); leading batch dims.
TEST(TransposeWeightsTest, LinearsOfManyRowsAndTransposedWeightsTakeThePanels) {
  constexpr int64_t kK = 130, kN = 200;
  const Tensor w = RandomF32({kK, kN}, 13), wt = RandomF32({kN, kK}, 14);
  const Tensor bias = RandomF32({kN}, 15);
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {4, 64, kK});
  Value* u = b.Input("u", DType::kF32, {50, kK});
  Value* y = b.Op("MatMul", {x, b.Constant(w, "w", true)});
  b.Output("y", b.Op("Relu", {b.Op("Add", {y, b.Constant(bias, "b", true)})}));
  Attrs gemm;
  gemm["transB"] = AttrInt(1);
  b.Output("z",
           b.Op("Relu", {b.Op("Gemm", {u, b.Constant(wt, "wt", true), b.Constant(bias, "c", true)},
                              gemm)}));
  Compiled c = CompileOrDie(m);
  ASSERT_TRUE(c.exe);
  EXPECT_EQ(c.result.packed_weights, 2);
  const std::vector<LinearUse> uses = LinearUses(m);
  ASSERT_EQ(uses.size(), 2u);
  for (const LinearUse& use : uses) {
    EXPECT_EQ(use.packed_n, kN);
    EXPECT_EQ(use.trans_b, 0);
    EXPECT_EQ(use.w_dims, (std::vector<int64_t>{13, kK, 16}));
  }
  Tensor wtt = *Tensor::Empty(DType::kF32, {kK, kN});
  for (int64_t k = 0; k < kK; ++k) {
    for (int64_t j = 0; j < kN; ++j) wtt.data<float>()[k * kN + j] = wt.data<float>()[j * kK + k];
  }
  const Tensor xv = RandomF32({4, 64, kK}, 16), uv = RandomF32({50, kK}, 17);
  auto relu = [](Tensor t) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::max(t.data<float>()[i], 0.0f);
    return t;
  };
  const Tensor want_y = relu(AddBias(RefMatMul(xv, w), bias));
  const Tensor want_z = relu(AddBias(RefMatMul(uv, wtt), bias));
  for (const int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    std::vector<Tensor> got = RunOrDie(c.exe, {{"x", xv}, {"u", uv}}, threads);
    ASSERT_EQ(got.size(), 2u);
    ExpectNear(got[0], want_y, 1e-4);
    ExpectNear(got[1], want_z, 1e-4);
  }
}

// Near misses keep the Linear's weight as it was: a W that is an input (not a constant), a
// constant W also read by an Add, one read by a Linear with trans_b = 1 and by a MatMul (two
// orientations of one constant), and one under the rule's size (16384 elements).
TEST(TransposeWeightsTest, LinearNearMissesKeepTheirWeights) {
  constexpr int64_t kK = 130, kN = 128;
  auto linear = [](GraphBuilder& b, Value* x, Value* w, int64_t n) {
    return b.Op("Add", {b.Op("MatMul", {x, w}), b.Constant(RandomF32({n}, 21), "b", true)});
  };
  {
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {DimSpec("rows"), kK});
    Value* w = b.Input("w", DType::kF32, {kK, kN});
    b.Output("y", linear(b, x, w, kN));
    Compiled c = CompileOrDie(m);
    EXPECT_EQ(c.result.packed_weights + c.result.transposed_weights, 0);
    ASSERT_EQ(LinearUses(m).size(), 1u);
    EXPECT_EQ(LinearUses(m)[0].packed_n, -1);
  }
  {
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {DimSpec("rows"), kK});
    Value* v = b.Input("v", DType::kF32, {kK, kN});
    Value* w = b.Constant(RandomF32({kK, kN}, 22), "w", true);
    b.Output("y", linear(b, x, w, kN));
    b.Output("s", b.Op("Add", {v, w}));
    Compiled c = CompileOrDie(m);
    EXPECT_EQ(c.result.packed_weights + c.result.transposed_weights, 0);
    ASSERT_EQ(LinearUses(m).size(), 1u);
    EXPECT_EQ(LinearUses(m)[0].packed_n, -1);
  }
  {
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {DimSpec("rows"), kK});
    Value* u = b.Input("u", DType::kF32, {DimSpec("rows"), kK});
    Value* w = b.Constant(RandomF32({kK, kK}, 23), "w", true);
    Attrs gemm;
    gemm["transB"] = AttrInt(1);
    b.Output("y", b.Op("Relu",
                       {b.Op("Gemm", {x, w, b.Constant(RandomF32({kK}, 24), "c", true)}, gemm)}));
    b.Output("z", b.Op("MatMul", {u, w}));
    Compiled c = CompileOrDie(m);
    EXPECT_EQ(c.result.packed_weights + c.result.transposed_weights, 0);
    ASSERT_EQ(LinearUses(m).size(), 1u);  // the Gemm + Relu is a Linear with trans_b = 1
    EXPECT_EQ(LinearUses(m)[0].trans_b, 1);
    EXPECT_EQ(LinearUses(m)[0].packed_n, -1);
  }
  {
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {DimSpec("rows"), 127});
    b.Output("y", linear(b, x, b.Constant(RandomF32({127, kN}, 25), "w", true), kN));
    Compiled c = CompileOrDie(m);
    EXPECT_EQ(c.result.packed_weights + c.result.transposed_weights, 0);
  }
}

// A weight also read by something other than a product's B, or only by products of many rows
// known at compile time, keeps its [K, N] layout; one that MatMuls alone read is stored as panels
// whatever its shape (short rows and more outputs than K too, where the axpy form read faster
// than the dot form), and so is a Linear's short and wide weight.
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
    EXPECT_EQ(c.result.transposed_weights, 0);
    EXPECT_EQ(c.result.packed_weights, 1);
  }
}

}  // namespace
}  // namespace dynvm::compiler
