// oneDNN-backend specifics the generic backend test (kernels/backend_test.cc) does not see:
// plain shapes are served by oneDNN, not by the reference fallback; fallbacks are counted;
// kernel names tell the variant; a site rebinds when the thread count changes.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allocator/heap_allocator.h"
#include "gtest/gtest.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/parallel_loops.h"
#include "kernels/kernel_tester.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

namespace dynvm::onednn {
namespace {

using testing::F32;
using testing::KernelCall;
using testing::ToDoubles;

Tensor Filled(std::vector<int64_t> dims, float scale = 0.01f) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = scale * static_cast<float>(i % 97 - 48);
  return t;
}

// A oneDNN kernel for a call's spec, run `runs` times at one site.
struct Site {
  std::unique_ptr<Kernel> kernel;
  const DnnlKernel* dnnl = nullptr;
  std::unique_ptr<KernelContext> ctx;
};

Site Make(KernelCall& call, int threads = 1) {
  KernelSpec spec = call.spec();
  spec.backend = "dnnl";
  Site s;
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  EXPECT_TRUE(k.ok()) << k.status();
  if (!k.ok()) return s;
  s.kernel = *std::move(k);
  s.dnnl = dynamic_cast<const DnnlKernel*>(s.kernel.get());
  EXPECT_NE(s.dnnl, nullptr);
  s.ctx = std::make_unique<KernelContext>(&HeapAllocator::Get(), threads);
  return s;
}

absl::Status RunAt(Site& s, const std::vector<const Tensor*>& in, int num_outputs) {
  std::vector<Tensor> outs(num_outputs);
  std::vector<Tensor*> ptrs;
  for (Tensor& t : outs) ptrs.push_back(&t);
  return s.kernel->Run(*s.ctx, in, ptrs);
}

struct PlainCase {
  const char* what;
  KernelCall call;
  std::vector<Tensor> inputs;
  int outputs = 1;
};

TEST(DnnlKernels, PlainShapesAreServedByOneDnn) {
  std::vector<PlainCase> cases;
  {
    Tensor a = Filled({1, 1024}), b = Filled({1024, 1024});
    cases.push_back({"matmul", KernelCall("MatMul").In(a).In(b).Out(DType::kF32), {a, b}});
  }
  {
    Tensor a = Filled({8, 64}), w = Filled({32, 64}), c = Filled({32});
    KernelCall call("Gemm");
    call.In(a).In(w).In(c).Out(DType::kF32).Attr("transB", int64_t{1});
    cases.push_back({"gemm", call, {a, w, c}});
  }
  {
    Tensor a = Filled({64, 129}), b = Filled({129});
    cases.push_back({"add", KernelCall("Add").In(a).In(b).Out(DType::kF32), {a, b}});
    cases.push_back({"sub", KernelCall("Sub").In(a).In(b).Out(DType::kF32), {a, b}});
    cases.push_back({"relu", KernelCall("Relu").In(a).Out(DType::kF32), {a}});
    KernelCall sm("Softmax");
    sm.In(a).Out(DType::kF32);
    cases.push_back({"softmax", sm, {a}});
    KernelCall rs("ReduceSum");
    rs.In(a).Out(DType::kF32).Attr("axes", std::vector<int64_t>{1});
    cases.push_back({"reducesum", rs, {a}});
  }
  {
    Tensor x = Filled({4, 256}), s = Filled({256}), b = Filled({256});
    KernelCall ln("LayerNormalization");
    ln.In(x).In(s).In(b).Out(DType::kF32);
    cases.push_back({"layernorm", ln, {x, s, b}});
  }
  for (const char* op : {"LSTM", "GRU", "RNN"}) {
    const int64_t g = op[0] == 'L' ? 4 : op[0] == 'G' ? 3 : 1;
    Tensor x = Filled({2, 1, 8}), w = Filled({1, g * 16, 8}), r = Filled({1, g * 16, 16});
    KernelCall call(op);
    call.In(x).In(w).In(r).Out(DType::kF32).Out(DType::kF32).Attr("hidden_size", int64_t{16});
    cases.push_back({op, call, {x, w, r}, 2});
  }
  for (PlainCase& c : cases) {
    Site s = Make(c.call);
    ASSERT_NE(s.dnnl, nullptr) << c.what;
    std::vector<const Tensor*> in;
    for (const Tensor& t : c.inputs) in.push_back(&t);
    for (int run = 0; run < 3; ++run) {
      absl::Status st = RunAt(s, in, c.outputs);
      ASSERT_TRUE(st.ok()) << c.what << ": " << st;
    }
    EXPECT_EQ(s.dnnl->fallback_runs(), 0) << c.what << " (" << s.dnnl->name() << ")";
  }
}

// Einsum of two operands that is a batched matrix product runs as one dnnl_sgemm per batch
// index (MaxViT's attention: the reference kernel's enumeration took 98% of the model): batch,
// row, column and summed letters in any order in the terms and the output, several of each,
// none of some; the reference kernel's results. Equations of another form (a letter summed
// over one operand, a diagonal, three operands, an ellipsis) are the reference kernel's.
TEST(DnnlKernels, EinsumProductsMatchTheReference) {
  struct Case {
    const char* eq;
    std::vector<int64_t> a, b;
    bool dnnl;
  };
  float scale = 0.01f;
  {  // one operand (a transpose, a diagonal, a sum): the reference kernel's
    KernelCall call("Einsum");
    call.In(Filled({3, 4})).Out(DType::kF32).Attr("equation", std::string("ij->ji"));
    EXPECT_EQ(call.Backend("dnnl").Run().status().code(), absl::StatusCode::kUnimplemented);
  }
  for (const Case& c : std::vector<Case>{
           {"B G H I D, B G H J D -> B G H I J", {1, 2, 3, 7, 5}, {1, 2, 3, 6, 5}, true},
           {"B G H I J, B G H J D -> B G H I D", {2, 1, 3, 4, 6}, {2, 1, 3, 6, 5}, true},
           {"bij,bjk->bik", {3, 4, 5}, {3, 5, 2}, true},
           {"ij,jk->ki", {4, 5}, {5, 3}, true},
           {"ik,jk->ij", {6, 8}, {7, 8}, true},
           {"abc,cd->dba", {2, 3, 4}, {4, 5}, true},
           {"i,j->ij", {4}, {3}, true},
           {"bi,bi->b", {5, 9}, {5, 9}, true},
           {"ij,jk->k", {3, 4}, {4, 2}, false},
           {"ii,ij->ij", {3, 3}, {3, 2}, false},
           {"...ij,...jk->...ik", {2, 3, 4}, {2, 4, 5}, false},
       }) {
    const Tensor a = Filled(c.a, scale), b = Filled(c.b, scale * 1.5f);
    scale *= 1.1f;
    if (!c.dnnl) {  // the oneDNN backend refuses it, so the registry takes the reference kernel
      KernelCall call("Einsum");
      call.In(a).In(b).Out(DType::kF32).Attr("equation", std::string(c.eq)).Backend("dnnl");
      EXPECT_EQ(call.Run().status().code(), absl::StatusCode::kUnimplemented) << c.eq;
      continue;
    }
    testing::KernelTester t("Einsum");
    t.In(a).In(b).Out(DType::kF32).Tol(1e-5, 1e-5);
    t.Attr("equation", std::string(c.eq));
    absl::Status s = t.Compare("dnnl");
    ASSERT_TRUE(s.ok()) << c.eq << ": " << s;
    EXPECT_NE(t.kernel_name().find("einsum.f32.dnnl"), std::string::npos)
        << c.eq << ": " << t.kernel_name();
  }
}

// Gemm = alpha A B + beta C. A C of one row rides along as the matmul primitive's bias, and
// the primitive's output scale multiplies the bias too: alpha (A B + C). The oneDNN kernel
// must give the reference kernel's alpha A B + C for every alpha, C layout ([N], [1, N],
// [M, N]), transB and row count (the primitive from 2 rows; the fuzzer's
// dynvm-bug-dnnl-gemm-alpha-scales-c).
TEST(DnnlKernels, GemmScalesOnlyTheProductByAlpha) {
  for (auto [k, n] : {std::pair<int64_t, int64_t>{5, 3}, {24, 40}}) {
    for (float alpha : {0.5f, 1.0f, -2.0f}) {
      for (float beta : {1.0f, 0.25f}) {
        for (int64_t m : {1, 2, 16}) {
          for (int64_t tb : {0, 1}) {
            for (std::vector<int64_t> cdims : {std::vector<int64_t>{n}, {1, n}, {m, n}}) {
              SCOPED_TRACE(absl::StrCat("K ", k, " N ", n, " alpha ", alpha, " beta ", beta, " M ",
                                        m, " transB ", tb, " C rank ", cdims.size(), " C rows ",
                                        cdims[0]));
              Tensor a = Filled({m, k}), w = tb ? Filled({n, k}, 0.02f) : Filled({k, n}, 0.02f);
              Tensor c = Filled(cdims, 0.5f);
              KernelCall call("Gemm");
              call.In(a).In(w).In(c).Out(DType::kF32).Attr("transB", tb);
              call.Attr("alpha", alpha).Attr("beta", beta);
              Site s = Make(call);
              KernelCall ref = call;
              absl::StatusOr<std::vector<Tensor>> want = ref.Backend("reference").Run();
              ASSERT_TRUE(want.ok()) << want.status();
              ASSERT_NE(s.dnnl, nullptr);
              std::vector<Tensor> got(1);
              std::vector<Tensor*> outs = {&got[0]};
              for (int run = 0; run < 2; ++run) {  // the bound primitive's second run too
                absl::Status st = s.kernel->Run(*s.ctx, {&a, &w, &c}, outs);
                ASSERT_TRUE(st.ok()) << st;
                ASSERT_EQ(got[0].dims(), (*want)[0].dims());
                for (int64_t i = 0; i < got[0].numel(); ++i) {
                  ASSERT_NEAR(got[0].data<float>()[i], (*want)[0].data<float>()[i], 1e-4f)
                      << "element " << i << ", run " << run;
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(DnnlKernels, FallbacksAreCounted) {
  // A transposed view: the eltwise primitive would write the output in the input's layout.
  Tensor base = Filled({40, 70});
  Tensor view = *Tensor::View(base.storage(), 0, DType::kF32, {70, 40}, {1, 70});
  KernelCall relu("Relu");
  relu.In(view).Out(DType::kF32);
  Site s = Make(relu);
  ASSERT_TRUE(RunAt(s, {&view}, 1).ok());
  EXPECT_EQ(s.dnnl->fallback_runs(), 1);
  // Max of two operands that both broadcast: oneDNN broadcasts only its second (Add, Sub, Mul
  // and Div run the strided loop there).
  Tensor a = Filled({129, 1}), b = Filled({1, 64});
  KernelCall max("Max");
  max.In(a).In(b).Out(DType::kF32);
  Site t = Make(max);
  ASSERT_TRUE(RunAt(t, {&a, &b}, 1).ok());
  EXPECT_EQ(t.dnnl->fallback_runs(), 1);
}

TEST(DnnlKernels, NamesTellTheVariant) {
  Tensor a = Filled({2, 3}), b = Filled({3, 4});
  KernelCall mm("MatMul");
  mm.In(a).In(b).Out(DType::kF32);
  EXPECT_EQ(Make(mm).kernel->name(), "matmul.f32.dnnl.sgemm+brgemm");
  KernelCall add("Add");
  add.In(a).In(a).Out(DType::kF32);
  EXPECT_EQ(Make(add).kernel->name(), "add.f32.dnnl");
  Tensor x = Filled({1, 1, 4}), w = Filled({1, 16, 4}), r = Filled({1, 16, 4});
  KernelCall lstm("LSTM");
  lstm.In(x).In(w).In(r).Out(DType::kF32);
  EXPECT_EQ(Make(lstm).kernel->name(), "lstm.f32.dnnl.gemm");
  // The registry's default choice for f32 is oneDNN; f64 is the reference kernel's.
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(add.spec());
  ASSERT_TRUE(k.ok());
  EXPECT_EQ((*k)->name(), "add.f32.dnnl");
  KernelCall add64("Add");
  Tensor d = *Tensor::Empty(DType::kF64, {2});
  add64.In(d).In(d).Out(DType::kF64);
  k = KernelRegistry::Global().Create(add64.spec());
  ASSERT_TRUE(k.ok());
  EXPECT_EQ((*k)->name(), "add.f64.ref");
}

TEST(DnnlKernels, ThreadCountChangeRebinds) {
  Tensor a = Filled({256, 300});
  KernelCall sm("Softmax");
  sm.In(a).Out(DType::kF32);
  Site s = Make(sm, 2);
  std::vector<Tensor> outs(1);
  ASSERT_TRUE(RunAt(s, {&a}, 1).ok());
  s.ctx->set_num_threads(1);
  ASSERT_TRUE(RunAt(s, {&a}, 1).ok());
  s.ctx->set_num_threads(2);
  ASSERT_TRUE(RunAt(s, {&a}, 1).ok());
  EXPECT_EQ(s.dnnl->fallback_runs(), 0);
}

// The output's bytes of one call at the site.
std::string OutBits(Site& s, const std::vector<const Tensor*>& in) {
  std::vector<Tensor> outs(1);
  absl::Status st = s.kernel->Run(*s.ctx, in, {&outs[0]});
  EXPECT_TRUE(st.ok()) << st;
  return std::string(static_cast<const char*>(outs[0].raw_data()), outs[0].nbytes());
}

// A site stops binding primitives after kMaxPrimitiveBinds shapes, but counts them per run
// (ShapeCount, KernelContext::BeginRun): after a run that went through more shapes, a new run
// of the first shape binds the primitive again and gives the first run's bits. Counted over the
// site's lifetime, the fifth shape a VM ever saw sent the site to the loop (Softmax) or to
// sgemm (Gemm) for good, and the first input then gave other bits (docs/determinism.md; the
// beam search's scores of tools/models/beam14 moved by 1e-5).
TEST(DnnlKernels, ShapeChurnCountsPerRunSoAnInputGivesTheSameBitsAfterAnyHistory) {
  Tensor x = Filled({4, 40}, 0.37f);
  KernelCall sm("Softmax");  // the primitive over axis 0 (over the last axis it is a loop)
  sm.In(x).Out(DType::kF32).Attr("axis", int64_t{0});
  Site s = Make(sm);
  Tensor w = Filled({24, 40}, 0.011f);
  KernelCall gemm("Gemm");
  gemm.In(x).In(w).Out(DType::kF32).Attr("transB", int64_t{1});
  Site g = Make(gemm);
  s.ctx->BeginRun();
  g.ctx->BeginRun();
  const std::string log_softmax_bits = OutBits(s, {&x}), gemm_bits = OutBits(g, {&x, &w});
  EXPECT_EQ(s.dnnl->fallback_runs(), 0);  // the primitive
  s.ctx->BeginRun();
  g.ctx->BeginRun();
  for (int64_t rows = 5; rows < 5 + 2 * kMaxPrimitiveBinds; ++rows) {
    Tensor y = Filled({rows, 40}, 0.29f);
    OutBits(s, {&y});
    OutBits(g, {&y, &w});
  }
  const int64_t churned = s.dnnl->fallback_runs();
  EXPECT_EQ(churned, kMaxPrimitiveBinds);  // the shapes after the first kMaxPrimitiveBinds
  s.ctx->BeginRun();
  g.ctx->BeginRun();
  EXPECT_TRUE(OutBits(s, {&x}) == log_softmax_bits);
  EXPECT_EQ(s.dnnl->fallback_runs(), churned);  // the primitive again
  EXPECT_TRUE(OutBits(g, {&x, &w}) == gemm_bits);
  // Within one run the count goes on: the first shape again after the churn runs the loop.
  for (int64_t rows = 5; rows < 5 + kMaxPrimitiveBinds; ++rows) {
    Tensor y = Filled({rows, 40}, 0.29f);
    OutBits(s, {&y});
  }
  OutBits(s, {&x});
  EXPECT_EQ(s.dnnl->fallback_runs(), churned + 2);  // rows = 8 and the first shape
}

// Neg flips the sign bit of every value, zeros included (oneDNN's linear -x + 0 gave +0 for +0:
// a division by it then had the wrong infinity, seed 7 graph 37417), at one and two threads
// and above the parallel threshold; the mean of two negative zeros is -0 (numpy's). The oracle:
// IEEE negation and (a + b) / 2, bit for bit.
TEST(DnnlKernels, NegAndMeanKeepTheSignOfZero) {
  for (int64_t n : {int64_t{4}, kMinParallelElements + 3}) {
    Tensor x = Filled({n});
    float* p = x.data<float>();
    p[0] = 0.0f;
    p[1] = -0.0f;
    p[2] = std::numeric_limits<float>::infinity();
    p[3] = std::numeric_limits<float>::quiet_NaN();
    for (int threads : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << n << " elements, " << threads << " threads");
      absl::StatusOr<std::vector<Tensor>> neg =
          KernelCall("Neg").In(x).Out(DType::kF32).Run(threads);
      ASSERT_TRUE(neg.ok()) << neg.status();
      const float* y = (*neg)[0].data<float>();
      for (int64_t i = 0; i < n; ++i) {
        const float want = -p[i];
        EXPECT_EQ(std::memcmp(&y[i], &want, sizeof(float)), 0) << i << ": " << y[i];
      }
      absl::StatusOr<std::vector<Tensor>> mean =
          KernelCall("Mean").In(x).In(x).Out(DType::kF32).Run(threads);
      ASSERT_TRUE(mean.ok()) << mean.status();
      const float* m = (*mean)[0].data<float>();
      for (int64_t i = 0; i < n; ++i) {
        const float want = (p[i] + p[i]) / 2;
        EXPECT_EQ(std::memcmp(&m[i], &want, sizeof(float)), 0) << i << ": " << m[i];
      }
    }
  }
}

// The log-probability of a row's only element is exactly 0, and no log-probability is above 0
// (oneDNN's softmax_log gave +1.4e-6: seed 7 graphs 20569 and 46513). The oracle: x - max -
// log(sum(exp(x - max))) in double.
TEST(DnnlKernels, LogSoftmaxOfOneElementIsZero) {
  Tensor one = F32({3, 1}, {-2.25f, -1.125f, 3.0f});
  absl::StatusOr<std::vector<Tensor>> r =
      KernelCall("LogSoftmax").In(one).Out(DType::kF32).Attr("axis", int64_t{-1}).Run();
  ASSERT_TRUE(r.ok()) << r.status();
  for (double v : ToDoubles((*r)[0])) EXPECT_EQ(v, 0.0);
  Tensor x = Filled({8, 33}, 0.37f);
  x.data<float>()[5] = 60.0f;  // a dominant element: its log-probability is about -1e-17
  r = KernelCall("LogSoftmax").In(x).Out(DType::kF32).Attr("axis", int64_t{-1}).Run();
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<double> got = ToDoubles((*r)[0]);
  for (int64_t row = 0; row < 8; ++row) {
    const float* p = x.data<float>() + row * 33;
    double m = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int j = 0; j < 33; ++j) m = std::max(m, static_cast<double>(p[j]));
    for (int j = 0; j < 33; ++j) sum += std::exp(p[j] - m);
    for (int j = 0; j < 33; ++j) {
      const double want = p[j] - m - std::log(sum);
      EXPECT_LE(got[row * 33 + j], 0.0) << row << ", " << j;
      EXPECT_NEAR(got[row * 33 + j], want, 1e-6 * (1 + std::abs(want))) << row << ", " << j;
    }
  }
}

TEST(DnnlKernels, WorkspaceComesFromTheContextAllocator) {
  // A strided operand oneDNN cannot address is packed into the site's workspace, which the
  // context's allocator provides (the VM's pool in a VM).
  Tensor base = Filled({60});
  Tensor a = *Tensor::View(base.storage(), 0, DType::kF32, {4, 5}, {2, 10});  // every other
  Tensor b = Filled({5, 2});
  KernelCall mm("MatMul");
  mm.In(a).In(b).Out(DType::kF32);
  Site s = Make(mm);
  const int64_t before = HeapAllocator::Get().stats().allocs;
  ASSERT_TRUE(RunAt(s, {&a, &b}, 1).ok());
  EXPECT_GT(HeapAllocator::Get().stats().allocs, before);
}

// LogSoftmax over the last axis of a contiguous input runs cpu::LogSoftmaxRows (no fallback), at
// 1 and 2 threads, against the reference kernel (double) as oracle: within the vector exp's error,
// never above 0, -inf entries -inf, a row holding NaN NaN throughout. Every other case (another
// axis, a strided view, an empty input) is the reference kernel's, bit for bit.
TEST(DnnlKernels, LogSoftmaxLastAxisIsServedAndMatchesTheReference) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-40, 40);
  for (int64_t n : {1, 2, 7, 16, 17, 1000, 32000}) {
    const int64_t rows = n > 1000 ? 3 : 9;
    Tensor x = *Tensor::Empty(DType::kF32, {rows, n});
    float* px = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) px[i] = u(rng);
    px[1 * n + n / 3] = 300.0f;  // a dominant element
    for (int64_t j = 1; j < n; j += 4)
      px[2 * n + j] = -std::numeric_limits<float>::infinity();                  // masked entries
    if (rows > 3) px[3 * n + n - 1] = std::numeric_limits<float>::quiet_NaN();  // a NaN row
    KernelCall call("LogSoftmax");
    call.In(x).Out(DType::kF32).Attr("axis", int64_t{-1});
    KernelCall ref = call;
    absl::StatusOr<std::vector<Tensor>> want = ref.Backend("reference").Run();
    ASSERT_TRUE(want.ok()) << want.status();
    const float* pw = (*want)[0].data<float>();
    for (int threads : {1, 2}) {
      SCOPED_TRACE(absl::StrCat("n ", n, " threads ", threads));
      Site s = Make(call, threads);
      ASSERT_NE(s.dnnl, nullptr);
      std::vector<Tensor> outs(1);
      std::vector<Tensor*> ptrs = {&outs[0]};
      ASSERT_TRUE(s.kernel->Run(*s.ctx, {&x}, ptrs).ok());
      EXPECT_EQ(s.dnnl->fallback_runs(), 0);
      const float* py = outs[0].data<float>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        if (std::isnan(pw[i])) {
          ASSERT_TRUE(std::isnan(py[i])) << i;
          continue;
        }
        ASSERT_LE(py[i], 0.0f) << i;
        if (std::isinf(pw[i])) {
          ASSERT_EQ(py[i], pw[i]) << i;
        } else {
          ASSERT_NEAR(py[i], pw[i], 2e-6 + 1.2e-7 * std::abs(pw[i])) << i;
        }
      }
      if (n == 1) {
        for (int64_t r = 0; r < rows; ++r) {
          if (r != 3) ASSERT_EQ(py[r], 0.0f) << r;
        }
      }
    }
  }
  // The fallbacks: the first axis, a transposed view, an empty input.
  Tensor a = Filled({6, 5});
  Tensor view = *Tensor::View(a.storage(), 0, DType::kF32, {5, 6}, {1, 5});
  Tensor empty = *Tensor::Empty(DType::kF32, {0, 5});
  const std::pair<const Tensor*, int64_t> cases[] = {{&a, 0}, {&view, -1}, {&empty, -1}};
  for (const auto& [in, axis] : cases) {
    SCOPED_TRACE(absl::StrCat("dims ", in->dim(0), "x", in->dim(1), " axis ", axis));
    KernelCall call("LogSoftmax");
    call.In(*in).Out(DType::kF32).Attr("axis", axis);
    KernelCall ref = call;
    absl::StatusOr<std::vector<Tensor>> want = ref.Backend("reference").Run();
    ASSERT_TRUE(want.ok()) << want.status();
    Site s = Make(call);
    ASSERT_NE(s.dnnl, nullptr);
    std::vector<Tensor> outs(1);
    std::vector<Tensor*> ptrs = {&outs[0]};
    ASSERT_TRUE(s.kernel->Run(*s.ctx, {in}, ptrs).ok());
    EXPECT_EQ(s.dnnl->fallback_runs(), 1);
    ASSERT_EQ(outs[0].dims(), (*want)[0].dims());
    for (int64_t i = 0; i < outs[0].numel(); ++i) {
      EXPECT_EQ(outs[0].data<float>()[i], (*want)[0].data<float>()[i]) << i;
    }
  }
}

TEST(DnnlKernels, CausalSoftmaxIsServedAndExact) {
  // Attention scores under a causal mask: row i holds -inf after column i. The loop serves it
  // (no fallback), masked entries are exactly 0, the others equal exp(x - max) / sum.
  const int64_t heads = 3, t = 37;
  Tensor x = *Tensor::Empty(DType::kF32, {1, heads, t, t});
  float* px = x.data<float>();
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < t; ++j) {
        px[(h * t + i) * t + j] =
            j > i ? -std::numeric_limits<float>::infinity()
                  : 0.37f * static_cast<float>((h * 31 + i * 7 + j * 13) % 23 - 11);
      }
    }
  }
  for (int threads : {1, 2}) {
    KernelCall sm("Softmax");
    sm.In(x).Out(DType::kF32);
    Site s = Make(sm, threads);
    std::vector<Tensor> outs(1);
    std::vector<Tensor*> ptrs = {&outs[0]};
    ASSERT_TRUE(s.kernel->Run(*s.ctx, {&x}, ptrs).ok());
    EXPECT_EQ(s.dnnl->fallback_runs(), 0);
    const float* py = outs[0].data<float>();
    for (int64_t row = 0; row < heads * t; ++row) {
      const int64_t i = row % t;
      double m = -1e30, sum = 0;
      for (int64_t j = 0; j <= i; ++j) m = std::max(m, double{px[row * t + j]});
      for (int64_t j = 0; j <= i; ++j) sum += std::exp(double{px[row * t + j]} - m);
      for (int64_t j = 0; j < t; ++j) {
        if (j > i) {
          ASSERT_EQ(py[row * t + j], 0.0f) << row << "," << j;
        } else {
          ASSERT_NEAR(py[row * t + j], std::exp(double{px[row * t + j]} - m) / sum, 1e-6)
              << row << "," << j;
        }
      }
    }
  }
  // A row of -inf only is NaN throughout for the reference kernel (exp(-inf - -inf)), and for
  // the loop; the other row is unaffected.
  Tensor all_masked = *Tensor::Empty(DType::kF32, {2, 4});
  for (int i = 0; i < 8; ++i) {
    all_masked.data<float>()[i] = i < 4 ? 0.5f : -std::numeric_limits<float>::infinity();
  }
  KernelCall sm("Softmax");
  sm.In(all_masked).Out(DType::kF32);
  Site s = Make(sm);
  std::vector<Tensor> outs(1);
  std::vector<Tensor*> ptrs = {&outs[0]};
  ASSERT_TRUE(s.kernel->Run(*s.ctx, {&all_masked}, ptrs).ok());
  EXPECT_EQ(s.dnnl->fallback_runs(), 0);
  for (int i = 0; i < 8; ++i) {
    if (i < 4) {
      EXPECT_FLOAT_EQ(outs[0].data<float>()[i], 0.25f) << i;
    } else {
      EXPECT_TRUE(std::isnan(outs[0].data<float>()[i])) << i;
    }
  }
}

TEST(DnnlKernels, ErfMatchesLibm) {
  std::vector<float> values;
  for (int i = -70000; i <= 70000; ++i) values.push_back(static_cast<float>(i) * 1e-4f);
  for (float v : {1e-30f, -1e-20f, 3e-8f, 0.0f, -0.0f, 10.0f, -30.0f, 1e30f}) values.push_back(v);
  values.push_back(std::numeric_limits<float>::infinity());
  values.push_back(-std::numeric_limits<float>::infinity());
  values.push_back(std::numeric_limits<float>::quiet_NaN());
  Tensor x = *Tensor::FromVector<float>(DType::kF32, {static_cast<int64_t>(values.size())}, values);
  KernelCall erf("Erf");
  erf.In(x).Out(DType::kF32);
  Site s = Make(erf);
  EXPECT_EQ(s.kernel->name(), "erf.f32.dnnl");
  std::vector<Tensor> outs(1);
  std::vector<Tensor*> ptrs = {&outs[0]};
  ASSERT_TRUE(s.kernel->Run(*s.ctx, {&x}, ptrs).ok());
  EXPECT_EQ(s.dnnl->fallback_runs(), 0);
  const float* y = outs[0].data<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    const double want = std::erf(double{values[i]});
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(y[i])) << values[i];
      continue;
    }
    ASSERT_NEAR(y[i], want, 2e-7 + 1e-6 * std::fabs(want)) << "erf(" << values[i] << ")";
    ASSERT_EQ(std::signbit(y[i]), std::signbit(want)) << values[i];
  }
}

// The activations in place (the memory plan gives an activation its dying input's buffer):
// served by the vector loops, not the reference, and equal to the out-of-place result, over a
// length that is not a multiple of any chunk or vector width.
TEST(DnnlKernels, ActivationsInPlaceMatchOutOfPlace) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> values(3 * 1001);
  for (float& v : values) v = dist(rng);
  for (const char* op : {"Gelu", "GeluTanh", "Silu"}) {
    const Tensor x = *Tensor::FromVector<float>(DType::kF32, {3, 1001}, values);
    KernelCall call(op, "dynvm");
    call.In(x).Out(DType::kF32);
    Site s = Make(call);
    std::vector<Tensor> outs(1);
    std::vector<Tensor*> ptrs = {&outs[0]};
    ASSERT_TRUE(s.kernel->Run(*s.ctx, {&x}, ptrs).ok());
    Tensor inplace = *Tensor::FromVector<float>(DType::kF32, {3, 1001}, values);
    Tensor alias = inplace;  // the same storage as the input
    std::vector<Tensor*> same = {&alias};
    ASSERT_TRUE(s.kernel->Run(*s.ctx, {&inplace}, same).ok()) << op;
    EXPECT_EQ(s.dnnl->fallback_runs(), 0) << op;
    ASSERT_EQ(alias.data<float>(), inplace.data<float>());
    for (int64_t i = 0; i < x.numel(); ++i) {
      ASSERT_EQ(alias.data<float>()[i], outs[0].data<float>()[i]) << op << " " << i;
    }
  }
}

// The kernels split across the pool (batch-1 GEMV in MatMul, Gemm and the LSTM/GRU gates;
// Softmax, LayerNormalization and RMSNorm rows; the binary, activation and reduction loops;
// attention units) at 2 threads, with odd sizes above their thresholds (so the split happens
// and its ranges end off the grain), against the reference kernels.
struct SplitCase {
  std::string what;
  KernelCall call;
  int64_t work;  // the split work (multiply-adds or elements), checked against the threshold
  int64_t threshold;
};

// Tensors of uniform values in [-1, 1) from one generator; rng() draws from it too.
class Random {
 public:
  explicit Random(uint32_t seed) : rng_(seed) {}
  Tensor operator()(std::vector<int64_t> dims) {
    Tensor t = *Tensor::Empty(DType::kF32, dims);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist_(rng_);
    return t;
  }
  float Uniform() { return dist_(rng_); }

 private:
  std::mt19937 rng_;
  std::uniform_real_distribution<float> dist_{-1.0f, 1.0f};
};

// MatMul and Gemm at batch 1: the GEMV split by weight rows or columns.
void AddGemvCases(Random& random, std::vector<SplitCase>& cases) {
  for (int64_t n : {257, 1001}) {
    const int64_t k = 131;
    Tensor a = random({1, k}), b = random({k, n}), w = random({n, k}), c = random({n});
    KernelCall mm("MatMul");
    mm.In(a).In(b).Out(DType::kF32);
    cases.push_back({"MatMul N=" + std::to_string(n), mm, n * k, kMinParallelGemv});
    KernelCall gemm("Gemm");
    gemm.In(a).In(w).In(c).Out(DType::kF32).Attr("transB", int64_t{1});
    cases.push_back({"Gemm transB N=" + std::to_string(n), gemm, n * k, kMinParallelGemv});
  }
}

// The LSTM and GRU gates' GEMVs at batch 1.
void AddRecurrentCases(Random& random, std::vector<SplitCase>& cases) {
  {
    const int64_t h = 97, in = 45;
    Tensor x = random({5, 1, in}), w = random({1, 4 * h, in}), r = random({1, 4 * h, h});
    Tensor b = random({1, 8 * h});
    KernelCall lstm("LSTM");
    lstm.In(x)
        .In(w)
        .In(r)
        .In(b)
        .Out(DType::kF32)
        .Out(DType::kF32)
        .Out(DType::kF32)
        .Attr("hidden_size", h);
    cases.push_back({"LSTM batch 1", lstm, 4 * h * h, kMinParallelGemv});
  }
  for (int64_t lbr : {0, 1}) {
    const int64_t h = 131, in = 31;
    Tensor x = random({4, 1, in}), w = random({1, 3 * h, in}), r = random({1, 3 * h, h});
    Tensor b = random({1, 6 * h});
    KernelCall gru("GRU");
    gru.In(x)
        .In(w)
        .In(r)
        .In(b)
        .Out(DType::kF32)
        .Out(DType::kF32)
        .Attr("hidden_size", h)
        .Attr("linear_before_reset", lbr);
    cases.push_back(
        {"GRU batch 1 lbr=" + std::to_string(lbr), gru, (lbr ? 3 : 2) * h * h, kMinParallelGemv});
  }
}

// Softmax, LayerNormalization and RMSNorm rows.
void AddRowCases(Random& random, std::vector<SplitCase>& cases) {
  {
    Tensor x = random({3, 43, 131});
    KernelCall sm("Softmax");
    sm.In(x).Out(DType::kF32);
    cases.push_back({"Softmax", sm, x.numel(), kMinParallelRows});
    Tensor scale = random({131}), bias = random({131});
    KernelCall ln("LayerNormalization");
    ln.In(x).In(scale).In(bias).Out(DType::kF32).Attr("axis", int64_t{-1});
    cases.push_back({"LayerNormalization", ln, x.numel(), kMinParallelRows});
  }
  {
    // LayerNormalization above kChurnMaxElements (the primitive on one thread, the loop at 2).
    Tensor x = random({7, 43, 257}), scale = random({257});
    KernelCall ln("LayerNormalization");
    ln.In(x).In(scale).Out(DType::kF32).Attr("axis", int64_t{-1});
    cases.push_back({"LayerNormalization large", ln, x.numel(), kMinParallelRows});
    KernelCall rms("RMSNorm", "dynvm");
    rms.In(x).In(scale).Out(DType::kF32).Attr("epsilon", 1e-3f);
    cases.push_back({"RMSNorm", rms, x.numel(), kMinParallelRows});
    Tensor scale2 = random({43, 257});
    KernelCall rms2("RMSNorm", "dynvm");  // two normalized axes
    rms2.In(x).In(scale2).Out(DType::kF32).Attr("axis", int64_t{1});
    cases.push_back({"RMSNorm axis 1", rms2, x.numel(), kMinParallelRows});
  }
}

// The binary, unary, Where, activation and reduction loops.
void AddElementwiseCases(Random& random, std::vector<SplitCase>& cases) {
  {
    // Elementwise loops: 132612 elements (a ragged tail of 16-element blocks).
    Tensor x = random({12, 43, 257}), y = random({12, 43, 257}), row = random({257});
    Tensor one = random({1}), big = random({13, 43, 257}), big_row = random({1, 1, 257});
    for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
      KernelCall full(op), by_row(op), by_scalar(op), large(op);
      full.In(x).In(y).Out(DType::kF32);
      by_row.In(x).In(row).Out(DType::kF32);
      by_scalar.In(x).In(one).Out(DType::kF32);
      large.In(big).In(big_row).Out(DType::kF32);  // above kChurnMaxElements
      cases.push_back({std::string(op) + " same shape", full, x.numel(), kMinParallelElements});
      cases.push_back({std::string(op) + " row", by_row, x.numel(), kMinParallelElements});
      cases.push_back({std::string(op) + " scalar", by_scalar, x.numel(), kMinParallelElements});
      cases.push_back({std::string(op) + " large", large, big.numel(), kMinParallelElements});
    }
    Tensor positive = random({3, 43, 257});
    for (int64_t i = 0; i < positive.numel(); ++i) {
      positive.data<float>()[i] = std::abs(positive.data<float>()[i]) + 0.01f;
    }
    for (const char* op : {"Relu", "LeakyRelu", "Abs", "Neg", "Sqrt"}) {
      KernelCall unary(op);
      unary.In(std::string(op) == "Sqrt" ? positive : x).Out(DType::kF32);
      if (std::string(op) == "LeakyRelu") unary.Attr("alpha", 0.1f);
      cases.push_back({op, unary, x.numel(), kMinParallelElements});
    }
    // Where: a [43, 257] condition over [3, 43, 257] (the block repeats), a scalar y.
    Tensor cond = *Tensor::Empty(DType::kBool, {43, 257});
    for (int64_t i = 0; i < cond.numel(); ++i) cond.data<bool>()[i] = random.Uniform() > 0;
    KernelCall where("Where");
    where.In(cond).In(x).In(one).Out(DType::kF32);
    cases.push_back({"Where", where, x.numel(), kMinParallelElements});
    KernelCall erf("Erf");
    erf.In(x).Out(DType::kF32);
    cases.push_back({"Erf", erf, x.numel(), kMinParallelMathElements});
    for (const char* op : {"Gelu", "GeluTanh", "Silu"}) {
      KernelCall act(op, "dynvm");
      act.In(x).Out(DType::kF32);
      cases.push_back({op, act, x.numel(), kMinParallelMathElements});
    }
    // Reductions: rows (innermost axis) and a middle axis (blocks of the outer axis).
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2"}) {
      KernelCall rows(op), middle(op);
      rows.In(x).Out(DType::kF32).Attr("axes", std::vector<int64_t>{-1});
      middle.In(big).Out(DType::kF32).Attr("axes", std::vector<int64_t>{1});
      cases.push_back({std::string(op) + " rows", rows, x.numel(), kMinParallelElements});
      cases.push_back({std::string(op) + " middle", middle, big.numel(), kMinParallelElements});
    }
    KernelCall big_sm("Softmax");
    big_sm.In(big).Out(DType::kF32);
    cases.push_back({"Softmax large", big_sm, big.numel(), kMinParallelRows});
  }
}

// Attention's (batch, head) units.
void AddAttentionCases(Random& random, std::vector<SplitCase>& cases) {
  {
    // Attention: 3 x 5 = 15 (batch, head) units, an odd count; Q [B, L, H, D] through q_perm,
    // an additive key-padding mask [B, 1, 1, Lk].
    const int64_t b = 3, h = 5, lq = 37, lk = 41, d = 24;
    Tensor q = random({b, lq, h, d}), k = random({b, h, lk, d}), v = random({b, h, lk, d});
    Tensor mask = random({b, 1, 1, lk});
    KernelCall att("Attention", "dynvm");
    att.In(q)
        .In(k)
        .In(v)
        .In(mask)
        .Out(DType::kF32)
        .Attr("q_perm", std::vector<int64_t>{0, 2, 1, 3})
        .Attr("k_perm", std::vector<int64_t>{0, 1, 3, 2})
        .Attr("scale", 0.2f)
        .Attr("mask_mode", int64_t{1});
    cases.push_back({"Attention", att, b * h * lq * lk * 2 * d, kMinParallelGemv});
    KernelCall decode("Attention", "dynvm");  // one query per unit: the GEMV loops
    Tensor q1 = random({b, h, 1, d}), k1 = random({b, h, 700, d}), v1 = random({b, h, 700, d});
    decode.In(q1)
        .In(k1)
        .In(v1)
        .Out(DType::kF32)
        .Attr("k_perm", std::vector<int64_t>{0, 1, 3, 2})
        .Attr("scale", 0.2f);
    cases.push_back({"Attention one query", decode, b * h * 700 * 2 * d, kMinParallelGemv});
  }
}

// Products with M >= 2 on the pool (kMinParallelGemm).
void AddProductCases(Random& random, std::vector<SplitCase>& cases) {
  // Rows split (a folded batch), columns split (short M), batch items split, Gemm with
  // transposed operands, alpha, beta and a full C.
  {
    Tensor a = random({3, 45, 131}), b = random({131, 67});
    KernelCall mm("MatMul");
    mm.In(a).In(b).Out(DType::kF32);
    cases.push_back({"MatMul rows", mm, 135 * 131 * 67, kMinParallelGemm});
  }
  {
    Tensor a = random({5, 131}), b = random({131, 1001});
    KernelCall mm("MatMul");
    mm.In(a).In(b).Out(DType::kF32);
    cases.push_back({"MatMul columns", mm, 5 * 131 * 1001, kMinParallelGemm});
  }
  {
    Tensor a = random({2, 3, 37, 53}), b = random({2, 1, 53, 41});
    KernelCall mm("MatMul");
    mm.In(a).In(b).Out(DType::kF32);
    cases.push_back({"MatMul batch", mm, 6 * 37 * 53 * 41, kMinParallelGemm});
  }
  for (int64_t rows : {7, 40}) {
    Tensor a = random({131, rows}), w = random({257, 131}), c = random({rows, 257});
    KernelCall gemm("Gemm");
    gemm.In(a).In(w).In(c).Out(DType::kF32).Attr("transA", int64_t{1}).Attr("transB", int64_t{1});
    gemm.Attr("alpha", 0.5f).Attr("beta", 2.0f);
    cases.push_back(
        {"Gemm transA transB M=" + std::to_string(rows), gemm, rows * 257 * 131, kMinParallelGemm});
  }
  {
    Tensor a = random({64, 131}), w = random({131, 129}), c = random({129});
    KernelCall gemm("Gemm");
    gemm.In(a).In(w).In(c).Out(DType::kF32);
    cases.push_back({"Gemm bias row", gemm, 64 * 131 * 129, kMinParallelGemm});
  }
}

// dynvm::Linear on the pool: rows, columns and the batch-1 GEMV, both weight layouts, with the
// bias and each activation in the epilogue.
void AddLinearCases(Random& random, std::vector<SplitCase>& cases) {
  {
    const char* acts[] = {"", "Relu", "Tanh", "Sigmoid", "Gelu", "GeluTanh", "Silu"};
    int i = 0;
    for (int64_t rows : {1, 5, 135}) {
      for (int64_t tb : {0, 1}) {
        const int64_t k = 131, n = 257;
        Tensor x = random({rows, k}), w = tb ? random({n, k}) : random({k, n});
        Tensor b = random({1, n});
        const char* act = acts[i++ % 7];
        KernelCall lin("Linear", "dynvm");
        lin.In(x).In(w).In(b).Out(DType::kF32).Attr("trans_b", tb);
        lin.Attr("activation", std::string(act));
        cases.push_back({absl::StrCat("Linear rows=", rows, " trans_b=", tb, " act=", act), lin,
                         rows * k * n, rows == 1 ? kMinParallelGemv : kMinParallelGemm});
      }
    }
  }
}

TEST(DnnlKernels, ParallelKernelsMatchTheReferenceAtTwoThreads) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  Random random(11);
  std::vector<SplitCase> cases;
  for (auto add : {&AddGemvCases, &AddRecurrentCases, &AddRowCases, &AddElementwiseCases,
                   &AddAttentionCases, &AddProductCases, &AddLinearCases}) {
    add(random, cases);
  }
  for (SplitCase& c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_GE(c.work, c.threshold);  // the case runs split
    KernelCall ref = c.call;
    ref.Backend("reference");
    absl::StatusOr<std::vector<Tensor>> want = ref.Run(1);
    ASSERT_TRUE(want.ok()) << want.status();
    KernelCall fast = c.call;
    fast.Backend("dnnl");
    for (int rep = 0; rep < 3; ++rep) {  // the same ranges every call, the same results
      absl::StatusOr<std::vector<Tensor>> got = fast.Run(2);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->size(), want->size());
      for (size_t o = 0; o < want->size(); ++o) {
        const std::vector<double> g = testing::ToDoubles((*got)[o]);
        const std::vector<double> e = testing::ToDoubles((*want)[o]);
        ASSERT_EQ(g.size(), e.size());
        for (size_t i = 0; i < g.size(); ++i) {
          ASSERT_NEAR(g[i], e[i], 2e-4 * (1.0 + std::abs(e[i]))) << "output " << o << " at " << i;
        }
      }
    }
  }
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// dynvm::Linear on one thread against the reference kernel: each activation, both weight
// layouts, 3-D X, a [N] and a [1, 1, N] bias, no bias, K = 0.
TEST(DnnlKernels, LinearMatchesTheReference) {
  const char* acts[] = {"", "Relu", "Tanh", "Sigmoid", "Gelu", "GeluTanh", "Silu"};
  int i = 0;
  for (int64_t k : {0, 37}) {
    for (int64_t rows : {1, 4}) {
      for (int64_t tb : {0, 1}) {
        for (int bias_rank : {0, 1, 3}) {
          const int64_t n = 45;
          Tensor x = Filled({2, rows, k}, 0.03f), w = tb ? Filled({n, k}) : Filled({k, n});
          std::vector<int64_t> bdims(bias_rank, 1);
          if (bias_rank > 0) bdims.back() = n;
          const std::string act = acts[i++ % 7];
          KernelCall call("Linear", "dynvm");
          call.In(x).In(w);
          if (bias_rank > 0) call.In(Filled(bdims, 0.1f));
          call.Out(DType::kF32).Attr("trans_b", tb).Attr("activation", act);
          SCOPED_TRACE(absl::StrCat("k=", k, " rows=", rows, " tb=", tb, " bias_rank=", bias_rank,
                                    " act=", act));
          KernelCall ref = call;
          ref.Backend("reference");
          absl::StatusOr<std::vector<Tensor>> want = ref.Run(1);
          ASSERT_TRUE(want.ok()) << want.status();
          Site s = Make(call);
          std::vector<const Tensor*> in;
          std::vector<Tensor> keep = {x, w};
          if (bias_rank > 0) keep.push_back(Filled(bdims, 0.1f));
          for (const Tensor& t : keep) in.push_back(&t);
          Tensor y;
          Tensor* outs[1] = {&y};
          ASSERT_TRUE(s.kernel->Run(*s.ctx, in, outs).ok());
          EXPECT_EQ(s.dnnl->fallback_runs(), 0);
          const std::vector<double> g = testing::ToDoubles(y);
          const std::vector<double> e = testing::ToDoubles((*want)[0]);
          ASSERT_EQ(g.size(), e.size());
          for (size_t j = 0; j < g.size(); ++j) {
            ASSERT_NEAR(g[j], e[j], 2e-5 * (1.0 + std::abs(e[j]))) << j;
          }
        }
      }
    }
  }
  // Shapes that disagree are errors naming what is wrong.
  KernelCall bad("Linear", "dynvm");
  bad.In(Filled({3, 5})).In(Filled({6, 7})).Out(DType::kF32);
  Site s = Make(bad);
  Tensor x = Filled({3, 5}), w = Filled({6, 7}), y;
  Tensor* outs[1] = {&y};
  absl::Status st = s.kernel->Run(*s.ctx, {&x, &w}, outs);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(st.message().find("W's K"), std::string::npos) << st;
}

// dynvm::MatMul (a_perm, b_perm) against an independent oracle: the reference Transpose
// materializing each permuted operand, then the reference MatMul. The reference dynvm::MatMul
// (strided loops) and the oneDNN kernel at 1 and 2 threads, no reference fallback in the
// latter: 2-D, batched, torch's head layouts, a broadcast batch, a 1-D B, odd sizes, a
// permutation moving the last axis into the batch (packed), sizes that split on the pool.
TEST(DnnlKernels, PermutedMatMulMatchesTransposeThenMatMul) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto random = [&](std::vector<int64_t> dims) {
    Tensor t = *Tensor::Empty(DType::kF32, dims);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
    return t;
  };
  using Perm = std::vector<int64_t>;
  struct Case {
    std::vector<int64_t> a_dims;
    Perm a_perm;
    std::vector<int64_t> b_dims;
    Perm b_perm;
  };
  const std::vector<Case> cases = {
      {{37, 5}, {1, 0}, {37, 41}, {}},                             // Aᵀ B
      {{5, 37}, {}, {41, 37}, {1, 0}},                             // A Bᵀ
      {{37, 1}, {1, 0}, {41, 37}, {1, 0}},                         // M = 1, both transposed
      {{3, 53, 7}, {0, 2, 1}, {3, 53, 41}, {}},                    // batched Aᵀ
      {{3, 7, 53}, {}, {3, 41, 53}, {0, 2, 1}},                    // batched Bᵀ (Q Kᵀ)
      {{9, 2, 3, 16}, {1, 2, 0, 3}, {9, 2, 3, 16}, {1, 2, 3, 0}},  // [L,B,H,D] heads
      {{2, 1, 53, 7}, {0, 1, 3, 2}, {3, 53, 41}, {}},              // broadcast batch
      {{3, 53, 7}, {0, 2, 1}, {53}, {}},                           // 1-D B
      {{4, 37, 5}, {2, 0, 1}, {5, 37, 41}, {}},            // last axis into the batch: packed
      {{6, 131, 67}, {0, 2, 1}, {6, 45, 131}, {0, 2, 1}},  // split by batch items
      {{131, 139}, {1, 0}, {131, 257}, {}},                // split by rows or columns
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat("A ", DimsString(c.a_dims), " B ", DimsString(c.b_dims)));
    Tensor a = random(c.a_dims), b = random(c.b_dims);
    auto transposed = [](const Tensor& t, const Perm& p) -> Tensor {
      if (p.empty()) return t;
      KernelCall tr("Transpose");
      tr.In(t).Out(DType::kF32).Attr("perm", p).Backend("reference");
      absl::StatusOr<std::vector<Tensor>> r = tr.Run(1);
      EXPECT_TRUE(r.ok()) << r.status();
      return r.ok() ? (*r)[0] : Tensor();
    };
    KernelCall plain("MatMul");
    plain.In(transposed(a, c.a_perm)).In(transposed(b, c.b_perm)).Out(DType::kF32);
    plain.Backend("reference");
    absl::StatusOr<std::vector<Tensor>> want = plain.Run(1);
    ASSERT_TRUE(want.ok()) << want.status();
    const std::vector<double> e = testing::ToDoubles((*want)[0]);
    KernelCall call("MatMul", "dynvm");
    call.In(a).In(b).Out(DType::kF32);
    if (!c.a_perm.empty()) call.Attr("a_perm", c.a_perm);
    if (!c.b_perm.empty()) call.Attr("b_perm", c.b_perm);
    for (const char* backend : {"reference", "dnnl"}) {
      for (int threads : {1, 2}) {
        SCOPED_TRACE(absl::StrCat(backend, " threads=", threads));
        Site s;
        if (std::string(backend) == "dnnl") s = Make(call, threads);
        KernelCall run = call;
        run.Backend(backend);
        absl::StatusOr<std::vector<Tensor>> got = run.Run(threads);
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_EQ((*got)[0].dims(), (*want)[0].dims());
        const std::vector<double> g = testing::ToDoubles((*got)[0]);
        for (size_t i = 0; i < g.size(); ++i) {
          ASSERT_NEAR(g[i], e[i], 2e-4 * (1.0 + std::abs(e[i]))) << i;
        }
        if (s.dnnl != nullptr) {  // the oneDNN kernel serves it itself
          std::vector<Tensor> outs(1);
          Tensor* ptrs[1] = {&outs[0]};
          ASSERT_TRUE(s.kernel->Run(*s.ctx, {&a, &b}, ptrs).ok());
          EXPECT_EQ(s.dnnl->fallback_runs(), 0);
        }
      }
    }
  }
  // A permutation that is not one: an error naming it.
  KernelCall bad("MatMul", "dynvm");
  bad.In(random({3, 4})).In(random({3, 5})).Out(DType::kF32).Attr("a_perm", Perm{1, 1});
  for (const char* backend : {"reference", "dnnl"}) {
    KernelCall run = bad;
    run.Backend(backend);
    absl::StatusOr<std::vector<Tensor>> r = run.Run(1);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
    EXPECT_NE(r.status().message().find("a_perm"), std::string::npos) << r.status();
  }
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// oneDNN's process-wide primitive cache is bounded at dynvm's default (a VM per call over many
// shapes must not grow without bound), or at what the environment asks for.
TEST(DnnlKernels, PrimitiveCacheIsBounded) {
  ASSERT_TRUE(CpuEngine().ok());
  if (std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") != nullptr) GTEST_SKIP();
  const int want = std::getenv("DYNVM_DNNL_PRIMITIVE_CACHE_CAPACITY") != nullptr
                       ? PrimitiveCacheCapacity()
                       : kDefaultPrimitiveCacheCapacity;
  EXPECT_EQ(dnnl::get_primitive_cache_capacity(), want);
  EXPECT_LT(want, 1024);
}

// A b of one value per row of the output's trailing dims ([N, 1, 1] over [N, C, T]: Silero
// VAD's per-example normalization at batch > 1) runs a plain loop (oneDNN 2.6 has only its
// reference binary for it): the reference kernel's results exactly, at 1 and 2 threads, for
// each op, b first for the commutative ones, above kChurnMaxElements, with a lower rank than
// the output; and broadcasts of other forms next to it still match.
TEST(DnnlKernels, BinaryRowScalarsMatchTheReference) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  struct Shapes {
    std::vector<int64_t> a, b;
  };
  const Shapes shapes[] = {
      {{2, 129, 24}, {2, 1, 1}},  {{4, 5, 7, 16}, {4, 5, 1, 1}}, {{3, 300}, {3, 1}},
      {{2, 1, 24}, {2, 1, 1}},    {{1, 4, 6, 5}, {4, 1, 1}},     {{4, 64, 1100}, {4, 1, 1}},
      {{2, 129, 24}, {129, 1}},   {{2, 129, 24}, {1, 129, 1}},   {{2, 129, 24}, {2, 129, 1}},
      {{2, 129, 24}, {1, 1, 24}}, {{2, 3, 5}, {2, 1, 5}},
  };
  Random random(29);
  for (const Shapes& sh : shapes) {
    Tensor a = random(sh.a), b = random(sh.b);
    for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] += 2.0f;  // no division by ~0
    for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
      const bool commutative = op[0] == 'A' || op[0] == 'M';
      for (bool b_first : {false, true}) {
        if (b_first && !commutative) continue;
        KernelCall call(op);
        if (b_first) {
          call.In(b).In(a).Out(DType::kF32);
        } else {
          call.In(a).In(b).Out(DType::kF32);
        }
        KernelCall ref = call;
        ref.Backend("reference");
        absl::StatusOr<std::vector<Tensor>> want = ref.Run(1);
        ASSERT_TRUE(want.ok()) << want.status();
        const std::vector<double> e = testing::ToDoubles((*want)[0]);
        for (int threads : {1, 2}) {
          SCOPED_TRACE(absl::StrCat(op, " a=[", absl::StrJoin(sh.a, ","), "] b=[",
                                    absl::StrJoin(sh.b, ","), "] b_first=", b_first,
                                    " threads=", threads));
          Site s = Make(call, threads);
          std::vector<const Tensor*> in =
              b_first ? std::vector<const Tensor*>{&b, &a} : std::vector<const Tensor*>{&a, &b};
          Tensor y;
          Tensor* outs[1] = {&y};
          ASSERT_TRUE(s.kernel->Run(*s.ctx, in, outs).ok());
          ASSERT_TRUE(y.dims() == (*want)[0].dims());
          const std::vector<double> g = testing::ToDoubles(y);
          ASSERT_EQ(g.size(), e.size());
          for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], e[i]) << "at " << i;
        }
      }
    }
  }
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// Broadcasts the plain loops do not take run cpu::BinaryStrided (the rule picks it over
// oneDNN's binary primitive, and it serves what oneDNN cannot: a broadcast first operand, both
// operands broadcast): the reference kernel's bits, infinities included, at 1 and 2 threads,
// each op, never handed to the reference kernel. Shapes: attention biases and masks (a
// relative position bias over windows, a shifted-window mask over heads, a padding mask per
// example), both operands broadcast, a first operand broadcast, ranks 1 to 6 with size-1 axes
// anywhere, a transposed view, sizes under 4096 and above kChurnMaxElements.
TEST(DnnlKernels, StridedBroadcastsMatchTheReference) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  struct Shapes {
    std::vector<int64_t> a, b;
    bool transpose_a = false;  // a read through a view with its last two axes swapped
  };
  const Shapes shapes[] = {
      {{9, 3, 49, 49}, {1, 3, 49, 49}},
      {{1, 9, 3, 49, 49}, {1, 9, 1, 49, 49}},
      {{2, 12, 50, 50}, {2, 1, 1, 50}},
      {{40, 3, 49, 49}, {1, 3, 49, 49}},
      {{3, 1, 70}, {1, 64, 1}},
      {{1, 64, 1}, {3, 1, 70}},
      {{129}, {64, 129}},
      {{2, 1, 3, 1, 5, 7}, {1, 4, 3, 1, 1, 7}},
      {{2, 3, 4, 5, 6, 7}, {3, 1, 5, 1, 7}},
      {{5}, {4, 1}},
      {{64, 80, 30}, {64, 1, 30}, true},
      {{16, 90, 50}, {90, 50}, true},
  };
  Random random(31);
  for (const Shapes& sh : shapes) {
    Tensor a = random(sh.a), b = random(sh.b);
    for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] += 2.0f;  // no division by ~0
    a.data<float>()[a.numel() / 2] = std::numeric_limits<float>::infinity();
    b.data<float>()[0] = -std::numeric_limits<float>::infinity();
    if (sh.transpose_a) {  // the same values as a dense a, stored with the last axes swapped
      std::vector<int64_t> swapped = sh.a, strides(sh.a.size());
      std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
      Tensor store = random(swapped);
      const int r = static_cast<int>(sh.a.size());
      ContiguousStrides(swapped, strides.data());
      std::swap(strides[r - 1], strides[r - 2]);
      a = *Tensor::View(store.storage(), 0, DType::kF32, sh.a, strides);
    }
    for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
      KernelCall call(op);
      call.In(a).In(b).Out(DType::kF32);
      KernelCall ref = call;
      ref.Backend("reference");
      absl::StatusOr<std::vector<Tensor>> want = ref.Run(1);
      ASSERT_TRUE(want.ok()) << want.status();
      const std::vector<double> e = testing::ToDoubles((*want)[0]);
      for (int threads : {1, 2}) {
        SCOPED_TRACE(absl::StrCat(op, " a=[", absl::StrJoin(sh.a, ","), "] b=[",
                                  absl::StrJoin(sh.b, ","), "] transposed=", sh.transpose_a,
                                  " threads=", threads));
        Site s = Make(call, threads);
        Tensor y;
        Tensor* outs[1] = {&y};
        const std::vector<const Tensor*> in = {&a, &b};
        ASSERT_TRUE(s.kernel->Run(*s.ctx, in, outs).ok());
        EXPECT_EQ(s.dnnl->fallback_runs(), 0);
        ASSERT_TRUE(y.dims() == (*want)[0].dims());
        const std::vector<double> g = testing::ToDoubles(y);
        ASSERT_EQ(g.size(), e.size());
        for (size_t i = 0; i < g.size(); ++i) {
          ASSERT_TRUE(g[i] == e[i] || (std::isnan(g[i]) && std::isnan(e[i]))) << "at " << i;
        }
      }
    }
  }
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

}  // namespace
}  // namespace dynvm::onednn
