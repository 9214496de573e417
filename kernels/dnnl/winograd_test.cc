// dynvm's Winograd F(2x2, 3x3) (kernels/cpu/winograd.h) through the dnnl FusedConv kernel, against
// the reference FusedConv kernel (the oracle): random channel counts, odd sizes (partial edge
// tiles), pads 0, 1 and asymmetric, batches, every post-op and the residual, at 1 and 2
// threads; and which shapes bind it.
//
// Tolerance: F(2x2, 3x3) sums products of transformed values: |V| <= 4 max|x| (B^T and B each
// add or subtract two values), |U| <= 2.25 max|w| (G's rows sum to at most 1.5 in magnitude),
// and A^T adds three products per row and column. Its rounding error is therefore a few times
// that of a direct convolution: per output at most about 36 * sqrt(16 * C) * eps times the
// largest term in practice (random signs), against sqrt(9 * C) * eps for the direct sum. With
// |x|, |w| <= 1 that is below 2e-5 * sqrt(C) absolute; the test asserts
// |y - ref| <= 2e-5 * sqrt(C) * (1 + |ref| / sqrt(9 * C)) and reports the largest error seen.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/heap_allocator.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/dnnl/conv.h"
#include "kernels/registry.h"
#include "kernels/testing.h"
#include "oneapi/dnnl/dnnl.h"

namespace dynvm::onednn {
namespace {

using testing::kSanitized;

using testing::KernelCall;
using Ints = std::vector<int64_t>;

// Whether oneDNN runs its AVX-512 kernels here, which have a Winograd of their own that may take
// a shape before dynvm's (ONEDNN_MAX_CPU_ISA=AVX2 turns them off).
bool OneDnnHasAvx512() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}

// Whether dynvm's Winograd runs at the active microkernel level (choice::UseOwnWinograd).
bool OwnWinogradRuns() { return cpu::ActiveIsa() >= cpu::Isa::kAvx2; }

Tensor Random(std::vector<int64_t> dims, std::mt19937& rng, float lo = -1, float hi = 1) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

struct Conv {
  int64_t n, c, m, h, w;
  Ints pads;  // top, left, bottom, right
  std::string act;
  bool bias = true, sum = false;
  Ints strides = {1, 1}, dilations = {1, 1};
  int64_t group = 1, kernel = 3;
  bool channels_last = true;
};

std::string Describe(const Conv& cv) {
  return absl::StrCat(cv.n, "x", cv.c, "x", cv.h, "x", cv.w, " -> ", cv.m, " k", cv.kernel,
                      " pads ", cv.pads[0], ",", cv.pads[1], ",", cv.pads[2], ",", cv.pads[3],
                      " stride ", cv.strides[0], " dil ", cv.dilations[0], " group ", cv.group, " ",
                      cv.act.empty() ? "none" : cv.act, cv.bias ? " bias" : "",
                      cv.sum ? " sum" : "", cv.channels_last ? "" : " plain");
}

struct Outcome {
  std::vector<float> got, want;
  ConvCacheStats stats;
};

// Runs the conv on the dnnl backend (twice: bind, then the cached entry) and the reference.
Outcome RunBoth(const Conv& cv, int threads, std::mt19937& rng) {
  const int64_t oh =
      (cv.h + cv.pads[0] + cv.pads[2] - (cv.kernel - 1) * cv.dilations[0] - 1) / cv.strides[0] + 1;
  const int64_t ow =
      (cv.w + cv.pads[1] + cv.pads[3] - (cv.kernel - 1) * cv.dilations[1] - 1) / cv.strides[1] + 1;
  std::vector<Tensor> inputs = {Random({cv.n, cv.c, cv.h, cv.w}, rng),
                                Random({cv.m, cv.c / cv.group, cv.kernel, cv.kernel}, rng)};
  if (cv.bias || cv.sum) inputs.push_back(Random({cv.m}, rng));
  if (cv.sum) inputs.push_back(Random({cv.n, cv.m, oh, ow}, rng, -4, 4));
  KernelCall call("FusedConv", "dynvm");
  for (const Tensor& t : inputs) call.In(t);
  call.Out(DType::kF32);
  call.Attr("pads", cv.pads)
      .Attr("strides", cv.strides)
      .Attr("dilations", cv.dilations)
      .Attr("group", cv.group)
      .Attr("constant_weights", int64_t{1})
      .Attr("activation", cv.act)
      .Attr("activation_alpha", cv.act == "Clip" ? -0.5f : 0.1f)
      .Attr("activation_beta", 0.75f);
  if (cv.channels_last) {
    call.Attr("channels_last_in", int64_t{1})
        .Attr("channels_last_out", int64_t{1})
        .Attr("channels_last_sum", int64_t{1});
  }
  std::vector<const Tensor*> in;
  for (const Tensor& t : inputs) in.push_back(&t);
  Outcome o;
  for (const char* backend : {"reference", "dnnl"}) {
    KernelSpec spec = call.spec();
    spec.backend = backend;
    absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
    EXPECT_TRUE(k.ok()) << k.status();
    if (!k.ok()) return o;
    KernelContext ctx(&HeapAllocator::Get(), threads);
    Tensor y;
    Tensor* out[] = {&y};
    const bool dnnl = std::string(backend) == "dnnl";
    for (int run = 0; run < (dnnl ? 2 : 1); ++run) {
      absl::Status s = (*k)->Run(ctx, in, out);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) return o;
    }
    std::vector<float>& dst = dnnl ? o.got : o.want;
    dst.assign(y.data<float>(), y.data<float>() + y.numel());
    if (dnnl) o.stats = GetConvCacheStats(ctx.state().get());
  }
  return o;
}

// Largest |got - want| relative to the stated bound (<= 1 passes), and the largest error.
void ExpectClose(const Conv& cv, const Outcome& o, double* worst_error) {
  ASSERT_EQ(o.got.size(), o.want.size());
  const double scale = 2e-5 * std::sqrt(static_cast<double>(cv.c));
  const double norm = std::sqrt(9.0 * static_cast<double>(cv.c));
  for (size_t i = 0; i < o.got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(o.got[i]) - o.want[i]);
    *worst_error = std::max(*worst_error, err);
    ASSERT_LE(err, scale * (1 + std::fabs(o.want[i]) / norm))
        << Describe(cv) << " at " << i << ": " << o.got[i] << " vs " << o.want[i];
  }
}

TEST(Winograd, MatchesReferenceOnRandomShapes) {
  if (!OwnWinogradRuns()) GTEST_SKIP() << "no AVX2 + FMA";
  std::mt19937 rng(1700);
  const char* acts[] = {"", "Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSwish", "SiLU", "Tanh"};
  const Ints pad_sets[] = {{1, 1, 1, 1}, {0, 0, 0, 0}, {0, 1, 1, 0}, {2, 0, 1, 2}, {1, 2, 0, 1}};
  double worst = 0;
  int cases = 0, bound = 0;
  const int random_cases = kSanitized ? 8 : 24;  // 8: every activation once
  for (int i = 0; i < random_cases; ++i) {
    Conv cv;
    cv.n = 1 + i % 3;
    cv.c = 32 + static_cast<int64_t>(rng() % 72);
    cv.m = 32 + static_cast<int64_t>(rng() % 72);
    cv.h = 3 + static_cast<int64_t>(rng() % 20);
    cv.w = 3 + static_cast<int64_t>(rng() % 40);
    cv.pads = pad_sets[i % 5];
    cv.act = acts[i % 8];
    cv.sum = i % 3 == 1;
    cv.bias = i % 4 != 3;
    // Enough tiles for the Winograd path: grow the image until there are.
    while (cv.n * ((cv.h + cv.pads[0] + cv.pads[2] - 1) / 2) *
               ((cv.w + cv.pads[1] + cv.pads[3] - 1) / 2) <
           64) {
      cv.w += 8;
    }
    for (int threads : {1, 2}) {
      SCOPED_TRACE(absl::StrCat(Describe(cv), " threads ", threads));
      const Outcome o = RunBoth(cv, threads, rng);
      ExpectClose(cv, o, &worst);
      // On AVX-512 oneDNN's own Winograd may take the shape instead.
      if (!OneDnnHasAvx512()) {
        EXPECT_EQ(o.stats.own_winograd, 1) << Describe(cv);
      }
      bound += o.stats.own_winograd;
      ++cases;
    }
  }
  std::printf("largest |winograd - reference| over %d cases (%d on dynvm's Winograd): %.3g\n",
              cases, bound, worst);
}

// The CRNN's and resnet18's shapes (text lines 4-16 rows high, square images), every one with
// the residual sum in place (sum == output buffer is the compiler's choice; here separate).
TEST(Winograd, ModelShapesMatchReference) {
  if (!OwnWinogradRuns()) GTEST_SKIP() << "no AVX2 + FMA";
  std::mt19937 rng(1701);
  double worst = 0;
  const Conv shapes[] = {
      {1, 32, 64, 16, 150, {1, 1, 1, 1}, "Relu"},
      {1, 64, 128, 8, 75, {1, 1, 1, 1}, "Relu"},
      {1, 128, 128, 4, 75, {1, 1, 1, 1}, "Relu"},
      {2, 128, 128, 4, 25, {1, 1, 1, 1}, "Relu"},
      {1, 64, 64, 56, 56, {1, 1, 1, 1}, "Relu", true, true},
      {2, 256, 256, 14, 14, {1, 1, 1, 1}, "Relu", true, true},
  };
  const size_t count = kSanitized ? 4 : std::size(shapes);  // sanitized: the CRNN's shapes
  for (size_t i = 0; i < count; ++i) {
    const Conv& cv = shapes[i];
    SCOPED_TRACE(Describe(cv));
    const Outcome o = RunBoth(cv, 1, rng);
    ExpectClose(cv, o, &worst);
  }
  std::printf("largest |winograd - reference|: %.3g\n", worst);
}

// Which convolutions bind dynvm's Winograd: 3x3 stride-1 undilated ungrouped channels-last
// convs with enough channels and tiles do (where oneDNN's Winograd does not serve them: without
// AVX-512, or images under 96 pixels);
// stride 2, dilation 2, groups, 1x1 and 5x5 kernels, few channels, few tiles and plain layouts
// do not (and still match the reference).
TEST(Winograd, OnlyEligibleShapesBindIt) {
  if (!OwnWinogradRuns()) GTEST_SKIP() << "no AVX2 + FMA";
  const bool avx512 = OneDnnHasAvx512();
  std::mt19937 rng(1702);
  struct Want {
    Conv cv;
    bool own;
  };
  auto with = [](Conv cv, auto edit) {
    edit(cv);
    return cv;
  };
  // 32 channels and 4x10 output tiles: eligible, and small enough for the sanitizer builds.
  const Conv base = {1, 32, 32, 8, 20, {1, 1, 1, 1}, "Relu"};
  const Want wants[] = {
      {base, true},
      // 4x4 images over a batch: the small-image GEMM's shapes too; the Winograd comes first.
      {with(base,
            [](Conv& c) {
              c.n = 8;
              c.h = 4;
              c.w = 4;
              c.sum = true;
            }),
       true},
      {with(base,
            [](Conv& c) {
              c.strides = {2, 2};
            }),
       false},
      {with(base,
            [](Conv& c) {
              c.dilations = {2, 2};
            }),
       false},
      {with(base, [](Conv& c) { c.group = 2; }), false},
      {with(base,
            [](Conv& c) {
              c.kernel = 1;
              c.pads = {0, 0, 0, 0};
            }),
       false},
      {with(base,
            [](Conv& c) {
              c.kernel = 5;
              c.pads = {2, 2, 2, 2};
            }),
       false},
      {with(base, [](Conv& c) { c.c = 16; }), false},
      {with(base, [](Conv& c) { c.m = 16; }), false},
      {with(base,
            [](Conv& c) {
              c.h = 6;
              c.w = 6;
            }),
       false},
      {with(base, [](Conv& c) { c.channels_last = false; }), false},
  };
  double worst = 0;
  for (const Want& want : wants) {
    SCOPED_TRACE(Describe(want.cv));
    const Outcome o = RunBoth(want.cv, 1, rng);
    ExpectClose(want.cv, o, &worst);
    // With AVX-512 oneDNN's Winograd serves images of 96 pixels or more (conv.cc,
    // UseWinograd); choice::UseOwnWinograd leaves those to it.
    const bool onednn_serves = avx512 && want.cv.h * want.cv.w >= 96;
    EXPECT_EQ(o.stats.own_winograd, want.own && !onednn_serves ? 1 : 0);
  }
}

// One kernel run with more distinct weights than its packed-weights cache holds (64): the
// weights past that are transformed into the site's workspace on every run, with the same
// results.
TEST(Winograd, PacksPerRunWhenTheWeightsCacheIsFull) {
  if (!OwnWinogradRuns()) GTEST_SKIP() << "no AVX2 + FMA";
  std::mt19937 rng(1703);
  const Conv cv = {1, 32, 40, 8, 9, {1, 1, 1, 1}, "Relu"};
  const Tensor x = Random({cv.n, cv.c, cv.h, cv.w}, rng);
  const Tensor b = Random({cv.m}, rng);
  std::vector<Tensor> weights;
  for (int i = 0; i < 70; ++i) weights.push_back(Random({cv.m, cv.c, 3, 3}, rng));
  KernelCall call("FusedConv", "dynvm");
  call.In(x).In(weights[0]).In(b).Out(DType::kF32);
  call.Attr("pads", cv.pads)
      .Attr("constant_weights", int64_t{1})
      .Attr("activation", cv.act)
      .Attr("channels_last_in", int64_t{1})
      .Attr("channels_last_out", int64_t{1});
  KernelSpec spec = call.spec();
  std::unique_ptr<Kernel> kernels[2];
  for (int i = 0; i < 2; ++i) {
    spec.backend = i == 0 ? "reference" : "dnnl";
    absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
    ASSERT_TRUE(k.ok()) << k.status();
    kernels[i] = *std::move(k);
  }
  KernelContext ref_ctx(&HeapAllocator::Get(), 1), ctx(&HeapAllocator::Get(), 1);
  double worst = 0;
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < weights.size(); ++i) {
      const Tensor* in[] = {&x, &weights[i], &b};
      Tensor want, got;
      Tensor* want_out[] = {&want};
      Tensor* got_out[] = {&got};
      ASSERT_TRUE(kernels[0]->Run(ref_ctx, in, want_out).ok());
      ASSERT_TRUE(kernels[1]->Run(ctx, in, got_out).ok());
      Outcome o;
      o.want.assign(want.data<float>(), want.data<float>() + want.numel());
      o.got.assign(got.data<float>(), got.data<float>() + got.numel());
      SCOPED_TRACE(absl::StrCat("weights ", i, " round ", round));
      ExpectClose(cv, o, &worst);
    }
  }
  if (!OneDnnHasAvx512()) {
    EXPECT_EQ(GetConvCacheStats(ctx.state().get()).own_winograd, 1);
  }
}

}  // namespace
}  // namespace dynvm::onednn

namespace dynvm::onednn {
namespace {
// Timing aid (not run by default): prints the time per run of model shapes. Compare with
// DYNVM_DNNL_OWN_WINOGRAD=0 (oneDNN's direct convolution).
TEST(Winograd, DISABLED_Timing) {
  std::mt19937 rng(1);
  const Conv shapes[] = {
      {1, 32, 64, 16, 150, {1, 1, 1, 1}, "Relu"},  {1, 64, 128, 8, 75, {1, 1, 1, 1}, "Relu"},
      {1, 128, 128, 4, 75, {1, 1, 1, 1}, "Relu"},  {1, 128, 128, 4, 25, {1, 1, 1, 1}, "Relu"},
      {1, 64, 64, 56, 56, {1, 1, 1, 1}, "Relu"},   {1, 128, 128, 28, 28, {1, 1, 1, 1}, "Relu"},
      {1, 256, 256, 14, 14, {1, 1, 1, 1}, "Relu"}, {1, 512, 512, 7, 7, {1, 1, 1, 1}, "Relu"},
      {1, 64, 64, 16, 16, {1, 1, 1, 1}, "Relu"},   {1, 128, 128, 8, 8, {1, 1, 1, 1}, "Relu"},
      {1, 256, 256, 4, 4, {1, 1, 1, 1}, "Relu"},   {1, 512, 512, 2, 2, {1, 1, 1, 1}, "Relu"},
      {1, 32, 32, 6, 6, {1, 1, 1, 1}, "Relu"},     {1, 32, 32, 8, 8, {1, 1, 1, 1}, "Relu"},
      {1, 512, 512, 4, 4, {1, 1, 1, 1}, "Relu"},   {8, 128, 128, 8, 8, {1, 1, 1, 1}, "Relu"},
      {8, 512, 512, 7, 7, {1, 1, 1, 1}, "Relu"},   {8, 256, 256, 4, 4, {1, 1, 1, 1}, "Relu"},
      {16, 256, 256, 4, 4, {1, 1, 1, 1}, "Relu"},
  };
  for (const Conv& cv : shapes) {
    std::vector<Tensor> inputs = {Random({cv.n, cv.c, cv.h, cv.w}, rng),
                                  Random({cv.m, cv.c, 3, 3}, rng), Random({cv.m}, rng)};
    KernelCall call("FusedConv", "dynvm");
    for (const Tensor& t : inputs) call.In(t);
    call.Out(DType::kF32);
    call.Attr("pads", cv.pads)
        .Attr("constant_weights", int64_t{1})
        .Attr("activation", cv.act)
        .Attr("channels_last_in", int64_t{1})
        .Attr("channels_last_out", int64_t{1});
    KernelSpec spec = call.spec();
    spec.backend = "dnnl";
    std::unique_ptr<Kernel> k = *KernelRegistry::Global().Create(spec);
    KernelContext ctx(&HeapAllocator::Get(), 1);
    std::vector<const Tensor*> in;
    for (const Tensor& t : inputs) in.push_back(&t);
    Tensor y;
    Tensor* out[] = {&y};
    ASSERT_TRUE(k->Run(ctx, in, out).ok());
    double best = 1e9;
    for (int round = 0; round < 5; ++round) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 10; ++i) ASSERT_TRUE(k->Run(ctx, in, out).ok());
      best = std::min(
          best,
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
              10);
    }
    const double gflop = 2.0 * cv.n * cv.h * cv.w * cv.c * cv.m * 9 / 1e3;
    std::printf("%-40s own %d  %8.1f us  %6.1f direct-GFLOP/s\n", Describe(cv).c_str(),
                GetConvCacheStats(ctx.state().get()).own_winograd, best, gflop / best);
  }
}
}  // namespace
}  // namespace dynvm::onednn
