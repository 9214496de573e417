// The oneDNN conv family against the reference kernels (the oracle): Conv in 1-3 spatial dims
// with groups, depthwise, dilations, strides, pads and auto_pad; ConvTranspose; FusedConv with
// every post-op; pooling; BatchNormalization; LRN. Each case is compared through KernelTester
// (three runs at one site, the last into preallocated outputs) and must be served by oneDNN
// itself (no reference fallback). Then the per-site primitive cache under width churn.
#include "kernels/dnnl/conv.h"

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allocator/heap_allocator.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/dnnl/common.h"
#include "kernels/kernel_tester.h"
#include "kernels/registry.h"
#include "kernels/testing.h"
#include "oneapi/dnnl/dnnl.h"

namespace dynvm::onednn {
namespace {

// Whether oneDNN runs kernels of `isa` here (its effective ISA: the CPU's, lowered by
// ONEDNN_MAX_CPU_ISA).
bool OneDnnHas(dnnl_cpu_isa_t isa) { return (dnnl_get_effective_cpu_isa() & isa) == isa; }

using testing::kSanitized;

using testing::KernelCall;
using testing::KernelTester;

Tensor Random(std::vector<int64_t> dims, uint32_t seed, float lo = -1, float hi = 1) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

using Attrs = std::function<void(KernelTester&, KernelCall&)>;

struct Case {
  std::string what;
  std::string op;
  std::string domain;
  std::vector<Tensor> inputs;  // an empty tensor of rank 0 marks an absent input
  Attrs attrs;
};

// Compares with the reference kernel, then checks oneDNN served every run.
void Check(const Case& c, double tol = 1e-4) {
  SCOPED_TRACE(c.what);
  KernelTester t(c.op, c.domain);
  KernelCall call(c.op, c.domain);
  for (const Tensor& in : c.inputs) {
    t.In(in);
    call.In(in);
  }
  t.Out(DType::kF32).Tol(tol, tol);
  call.Out(DType::kF32);
  if (c.attrs) c.attrs(t, call);
  absl::Status s = t.Compare("dnnl");
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_NE(t.kernel_name().find(".dnnl"), std::string::npos) << t.kernel_name();
  KernelSpec spec = call.spec();
  spec.backend = "dnnl";
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  const auto* dk = dynamic_cast<const DnnlKernel*>(k->get());
  ASSERT_NE(dk, nullptr);
  KernelContext ctx(&HeapAllocator::Get(), 1);
  std::vector<const Tensor*> in;
  for (const Tensor& x : c.inputs) in.push_back(&x);
  for (int run = 0; run < 2; ++run) {
    Tensor y;
    Tensor* outs[] = {&y};
    ASSERT_TRUE((*k)->Run(ctx, in, outs).ok());
  }
  EXPECT_EQ(dk->fallback_runs(), 0) << dk->name();
}

template <typename T>
Attrs A(std::vector<std::pair<std::string, T>> attrs) {
  return [attrs](KernelTester& t, KernelCall& c) {
    for (const auto& [name, v] : attrs) {
      t.Attr(name, v);
      c.Attr(name, v);
    }
  };
}

using Ints = std::vector<int64_t>;

Attrs Both(Attrs a, Attrs b) {
  return [a, b](KernelTester& t, KernelCall& c) {
    a(t, c);
    b(t, c);
  };
}

Attrs S(const std::string& name, const std::string& v) {
  return [name, v](KernelTester& t, KernelCall& c) {
    t.Attr(name, v);
    c.Attr(name, v);
  };
}

Attrs I(const std::string& name, int64_t v) {
  return [name, v](KernelTester& t, KernelCall& c) {
    t.Attr(name, v);
    c.Attr(name, v);
  };
}

Attrs F(const std::string& name, float v) {
  return [name, v](KernelTester& t, KernelCall& c) {
    t.Attr(name, v);
    c.Attr(name, v);
  };
}

TEST(DnnlConv, MatchesReference) {
  uint32_t seed = 1;
  auto r = [&](std::vector<int64_t> d) { return Random(std::move(d), seed++); };
  Check({"2d plain", "Conv", "", {r({2, 3, 9, 11}), r({8, 3, 3, 3})}, nullptr});
  Check({"2d bias strides pads",
         "Conv",
         "",
         {r({1, 16, 15, 13}), r({32, 16, 3, 3}), r({32})},
         A<Ints>({{"strides", {2, 2}}, {"pads", {1, 0, 2, 1}}})});
  Check({"2d dilations",
         "Conv",
         "",
         {r({1, 4, 12, 12}), r({6, 4, 3, 3})},
         A<Ints>({{"dilations", {2, 3}}, {"pads", {2, 2, 2, 2}}})});
  Check({"2d groups",
         "Conv",
         "",
         {r({2, 8, 10, 10}), r({12, 4, 3, 3}), r({12})},
         Both(A<Ints>({{"pads", {1, 1, 1, 1}}}), I("group", 2))});
  Check({"2d depthwise",
         "Conv",
         "",
         {r({1, 32, 14, 14}), r({32, 1, 3, 3}), r({32})},
         Both(A<Ints>({{"pads", {1, 1, 1, 1}}, {"strides", {2, 2}}}), I("group", 32))});
  Check({"2d 1x1", "Conv", "", {r({3, 24, 7, 7}), r({40, 24, 1, 1}), r({40})}, nullptr});
  for (const char* ap : {"SAME_UPPER", "SAME_LOWER", "VALID"}) {
    Check({std::string("auto_pad ") + ap,
           "Conv",
           "",
           {r({1, 5, 10, 9}), r({7, 5, 4, 3})},
           Both(A<Ints>({{"strides", {2, 3}}}), S("auto_pad", ap))});
  }
  Check({"1d",
         "Conv",
         "",
         {r({2, 6, 40}), r({10, 6, 5}), r({10})},
         A<Ints>({{"pads", {2, 1}}, {"strides", {2}}, {"dilations", {2}}})});
  Check({"1d depthwise",
         "Conv",
         "",
         {r({1, 8, 31}), r({8, 1, 3})},
         Both(A<Ints>({{"pads", {1, 1}}}), I("group", 8))});
  Check({"3d",
         "Conv",
         "",
         {r({1, 4, 6, 7, 8}), r({8, 4, 3, 3, 3}), r({8})},
         A<Ints>({{"pads", {1, 0, 1, 1, 0, 1}}, {"strides", {1, 2, 1}}})});
  Check({"3d groups", "Conv", "", {r({1, 6, 5, 5, 5}), r({6, 2, 2, 2, 2})}, I("group", 3)});
}

TEST(DnnlConv, StridedInput) {
  // A slice of a wider tensor (row padding): read in place or reordered, never wrong.
  Tensor wide = Random({1, 4, 9, 16}, 7);
  Tensor x = *Tensor::View(wide.storage(), 0, DType::kF32, {1, 4, 9, 12}, {576, 144, 16, 1});
  Check({"strided x", "Conv", "", {x, Random({5, 4, 3, 3}, 8)}, nullptr});
}

TEST(DnnlConvTranspose, MatchesReference) {
  uint32_t seed = 100;
  auto r = [&](std::vector<int64_t> d) { return Random(std::move(d), seed++); };
  Check({"2d", "ConvTranspose", "", {r({1, 4, 5, 6}), r({4, 6, 3, 3}), r({6})}, nullptr});
  Check({"2d strides pads output_padding",
         "ConvTranspose",
         "",
         {r({2, 8, 7, 7}), r({8, 4, 3, 3}), r({4})},
         A<Ints>({{"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}, {"output_padding", {1, 1}}})});
  Check({"2d groups dilations",
         "ConvTranspose",
         "",
         {r({1, 6, 5, 5}), r({6, 2, 3, 3})},
         Both(A<Ints>({{"dilations", {2, 2}}}), I("group", 3))});
  Check({"2d output_shape",
         "ConvTranspose",
         "",
         {r({1, 3, 4, 4}), r({3, 5, 3, 3})},
         A<Ints>({{"strides", {3, 2}}, {"output_shape", {12, 9}}})});
  Check({"1d",
         "ConvTranspose",
         "",
         {r({1, 4, 10}), r({4, 3, 4}), r({3})},
         A<Ints>({{"strides", {2}}, {"pads", {1, 1}}})});
  Check({"3d",
         "ConvTranspose",
         "",
         {r({1, 2, 3, 4, 3}), r({2, 3, 2, 2, 2})},
         A<Ints>({{"strides", {2, 1, 2}}})});
}

// A kernel equal to the stride (no overlapping windows) runs as a GEMM and a scatter
// (DeconvAsGemm): 1D to 3D, strides 2 to 4 and unequal ones, one output channel, with and
// without bias, batches, at 1 and 3 threads; the near misses (output padding, pads, groups,
// dilations, a kernel larger than the stride) take the deconvolution primitive, same results.
TEST(DnnlConvTranspose, KernelEqualToStrideMatchesReference) {
  uint32_t seed = 1000;
  auto r = [&](std::vector<int64_t> d) { return Random(std::move(d), seed++); };
  Check({"2x2 stride 2, bias",
         "ConvTranspose",
         "",
         {r({2, 24, 10, 12}), r({24, 24, 2, 2}), r({24})},
         A<Ints>({{"strides", {2, 2}}})});
  Check({"2x2 stride 2 to one channel",
         "ConvTranspose",
         "",
         {r({1, 24, 16, 9}), r({24, 1, 2, 2})},
         A<Ints>({{"strides", {2, 2}}, {"kernel_shape", {2, 2}}})});
  Check({"3x2 stride 3x2",
         "ConvTranspose",
         "",
         {r({1, 5, 4, 7}), r({5, 6, 3, 2}), r({6})},
         A<Ints>({{"strides", {3, 2}}})});
  Check({"1d stride 4",
         "ConvTranspose",
         "",
         {r({3, 8, 13}), r({8, 5, 4}), r({5})},
         A<Ints>({{"strides", {4}}})});
  Check({"3d stride 2",
         "ConvTranspose",
         "",
         {r({1, 4, 3, 4, 5}), r({4, 3, 2, 2, 2})},
         A<Ints>({{"strides", {2, 2, 2}}})});
  for (int threads : {1, 3}) {
    KernelTester t("ConvTranspose");
    t.In(r({2, 32, 40, 40})).In(r({32, 16, 2, 2})).In(r({16})).Out(DType::kF32);
    t.Attr("strides", Ints{2, 2}).Tol(1e-4, 1e-4).Threads(threads);
    absl::Status st = t.Compare("dnnl");
    EXPECT_TRUE(st.ok()) << "threads " << threads << ": " << st;
  }
  Check({"output padding",
         "ConvTranspose",
         "",
         {r({1, 4, 5, 5}), r({4, 3, 2, 2})},
         A<Ints>({{"strides", {2, 2}}, {"output_padding", {1, 1}}})});
  Check({"pads",
         "ConvTranspose",
         "",
         {r({1, 4, 5, 5}), r({4, 3, 2, 2})},
         A<Ints>({{"strides", {2, 2}}, {"pads", {0, 1, 0, 1}}})});
  Check({"groups",
         "ConvTranspose",
         "",
         {r({1, 4, 5, 5}), r({4, 3, 2, 2})},
         Both(A<Ints>({{"strides", {2, 2}}}), I("group", 2))});
  Check({"kernel 3 stride 2",
         "ConvTranspose",
         "",
         {r({1, 4, 5, 5}), r({4, 3, 3, 3})},
         A<Ints>({{"strides", {2, 2}}})});
}

TEST(DnnlFusedConv, EveryPostOpMatchesReference) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  uint32_t seed = 200;
  auto r = [&](std::vector<int64_t> d) { return Random(std::move(d), seed++); };
  struct Act {
    const char* name;
    float alpha, beta;
  };
  for (Act act : {Act{"", 0, 0}, Act{"Relu", 0, 0}, Act{"LeakyRelu", 0.1f, 0},
                  Act{"Clip", 0.0f, 6.0f}, Act{"Clip", -0.5f, 0.25f}, Act{"Sigmoid", 0, 0},
                  Act{"HardSwish", 0, 0}, Act{"SiLU", 0, 0}, Act{"Tanh", 0, 0}}) {
    for (bool sum : {false, true}) {
      Case c{absl::StrCat("FusedConv ", act.name, sum ? " + sum" : ""),
             "FusedConv",
             "dynvm",
             {r({2, 8, 9, 9}), r({16, 8, 3, 3}), r({16})},
             Both(Both(A<Ints>({{"pads", {1, 1, 1, 1}}}), S("activation", act.name)),
                  Both(F("activation_alpha", act.alpha), F("activation_beta", act.beta)))};
      if (sum) c.inputs.push_back(Random({2, 16, 9, 9}, seed++, -4, 4));
      Check(c);
    }
  }
  // Affine (alpha * x + beta), alone and as the second of two post-ops ("activation2": the
  // scale and shift after a HardSwish, the Max bound after a LeakyRelu).
  Check({"FusedConv Affine",
         "FusedConv",
         "dynvm",
         {r({2, 8, 9, 9}), r({16, 8, 3, 3}), r({16})},
         Both(Both(A<Ints>({{"pads", {1, 1, 1, 1}}}), S("activation", "Affine")),
              Both(F("activation_alpha", 0.75f), F("activation_beta", -0.5f)))});
  for (Act first : {Act{"HardSwish", 0, 0}, Act{"LeakyRelu", 0.2f, 0}, Act{"Relu", 0, 0}}) {
    for (Act second :
         {Act{"Affine", 0.47f, -0.3f}, Act{"Clip", -0.4f, kInf}, Act{"Clip", -kInf, 0.25f}}) {
      for (bool sum : {false, true}) {
        Case c{
            absl::StrCat("FusedConv ", first.name, " then ", second.name, sum ? " + sum" : ""),
            "FusedConv",
            "dynvm",
            {r({2, 8, 9, 9}), r({16, 8, 3, 3}), r({16})},
            Both(Both(Both(A<Ints>({{"pads", {1, 1, 1, 1}}}), S("activation", first.name)),
                      Both(F("activation_alpha", first.alpha), F("activation_beta", first.beta))),
                 Both(S("activation2", second.name), Both(F("activation2_alpha", second.alpha),
                                                          F("activation2_beta", second.beta))))};
        if (sum) c.inputs.push_back(Random({2, 16, 9, 9}, seed++, -4, 4));
        Check(c);
      }
    }
  }
  // Two post-ops on the shapes dynvm's own code would take with one (a channels-last chain with
  // constant weights: Winograd F(2x2, 3x3) at 32 channels and 8x8, the GEMM at 4x4 pixels over
  // a batch of 4): served by oneDNN's convolution, same results.
  const Attrs two = Both(Both(S("activation", "HardSwish"), S("activation2", "Affine")),
                         Both(F("activation2_alpha", 0.5f), F("activation2_beta", 0.125f)));
  const Attrs chain = Both(Both(I("channels_last_in", 1), I("channels_last_out", 1)),
                           Both(I("constant_weights", 1), A<Ints>({{"pads", {1, 1, 1, 1}}})));
  Check({"two post-ops, Winograd shape",
         "FusedConv",
         "dynvm",
         {r({1, 32, 8, 8}), r({32, 32, 3, 3}), r({32})},
         Both(two, chain)});
  Check({"two post-ops, GEMM shape",
         "FusedConv",
         "dynvm",
         {r({4, 32, 4, 4}), r({48, 32, 3, 3}), r({48})},
         Both(two, chain)});
  // Weights marked constant: packed once and shared.
  Check({"constant weights",
         "FusedConv",
         "dynvm",
         {r({1, 16, 8, 8}), r({16, 16, 3, 3}), r({16})},
         Both(I("constant_weights", 1), S("activation", "Relu"))});
}

TEST(DnnlPool, MatchesReference) {
  uint32_t seed = 300;
  auto r = [&](std::vector<int64_t> d) { return Random(std::move(d), seed++); };
  for (const char* op : {"MaxPool", "AveragePool"}) {
    const std::string o = op;
    Check({o + " 2d", op, "", {r({2, 3, 12, 11})}, A<Ints>({{"kernel_shape", {3, 3}}})});
    Check({o + " 2d strides pads",
           op,
           "",
           {r({1, 8, 13, 13})},
           A<Ints>({{"kernel_shape", {3, 3}}, {"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}})});
    Check({o + " ceil",
           op,
           "",
           {r({1, 2, 12, 12})},
           Both(A<Ints>({{"kernel_shape", {3, 3}}, {"strides", {2, 2}}}), I("ceil_mode", 1))});
    Check({o + " same_upper",
           op,
           "",
           {r({1, 2, 9, 10})},
           Both(A<Ints>({{"kernel_shape", {2, 3}}, {"strides", {2, 2}}}),
                S("auto_pad", "SAME_UPPER"))});
    Check({o + " 1d",
           op,
           "",
           {r({2, 4, 21})},
           A<Ints>({{"kernel_shape", {4}}, {"strides", {3}}, {"pads", {1, 2}}})});
    Check({o + " 3d",
           op,
           "",
           {r({1, 2, 6, 7, 8})},
           A<Ints>({{"kernel_shape", {2, 2, 2}}, {"strides", {2, 2, 2}}})});
  }
  Check({"MaxPool dilations",
         "MaxPool",
         "",
         {r({1, 3, 11, 11})},
         A<Ints>({{"kernel_shape", {2, 2}}, {"dilations", {2, 2}}})});
  Check({"AveragePool count_include_pad",
         "AveragePool",
         "",
         {r({1, 3, 10, 10})},
         Both(A<Ints>({{"kernel_shape", {3, 3}}, {"pads", {1, 1, 1, 1}}}),
              I("count_include_pad", 1))});
  Check({"AveragePool exclude pad",
         "AveragePool",
         "",
         {r({1, 3, 10, 10})},
         A<Ints>({{"kernel_shape", {3, 3}}, {"pads", {1, 1, 1, 1}}, {"strides", {2, 2}}})});
  // Channels-last input, with a channels-last output or a plain one (the end of a conv chain:
  // pooled channels-last into the workspace, then reordered).
  for (const char* op : {"MaxPool", "AveragePool"}) {
    for (int64_t cl_out : {0, 1}) {
      const std::string o = absl::StrCat(op, " channels-last in, out ", cl_out);
      const Attrs layout = Both(I("channels_last_in", 1), I("channels_last_out", cl_out));
      Check({o + " 2d",
             op,
             "",
             {r({2, 24, 9, 13})},
             Both(A<Ints>({{"kernel_shape", {3, 2}}, {"strides", {2, 1}}, {"pads", {1, 0, 1, 1}}}),
                  layout)});
      Check({o + " 1d",
             op,
             "",
             {r({1, 16, 21})},
             Both(A<Ints>({{"kernel_shape", {4}}, {"strides", {4}}}), layout)});
      Check({o + " 3d",
             op,
             "",
             {r({1, 8, 4, 6, 5})},
             Both(A<Ints>({{"kernel_shape", {2, 2, 2}}, {"strides", {2, 2, 2}}}), layout)});
    }
  }
  Check({"GlobalAveragePool", "GlobalAveragePool", "", {r({2, 16, 7, 9})}, nullptr});
  Check({"GlobalMaxPool", "GlobalMaxPool", "", {r({2, 16, 7, 9})}, nullptr});
  Check({"GlobalAveragePool 1d", "GlobalAveragePool", "", {r({2, 5, 17})}, nullptr});
}

// Global pools run kernels/cpu/reduce.h's loops on both layouts: plain (a row per image and
// channel) and channels-last (a column reduction over the pixels), 1D to 3D, channel counts off
// the vector width, inputs big enough to split across threads, at 1 and 3 threads and every
// microkernel level.
TEST(DnnlPool, GlobalPoolsOnBothLayouts) {
  uint32_t seed = 900;
  auto r = [&](std::vector<int64_t> d) { return Random(std::move(d), seed++, -3, 5); };
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    for (int64_t cl_in : {0, 1}) {
      for (int64_t cl_out : {0, 1}) {
        const Attrs layout = Both(I("channels_last_in", cl_in), I("channels_last_out", cl_out));
        const std::string o = absl::StrCat(op, " in ", cl_in, " out ", cl_out);
        Check({o + " 2d", op, "", {r({2, 13, 7, 9})}, layout});
        Check({o + " 1d", op, "", {r({3, 40, 17})}, layout});
        Check({o + " 3d", op, "", {r({1, 5, 3, 4, 5})}, layout});
        Check({o + " one pixel", op, "", {r({2, 19, 1, 1})}, layout});
        // An SE block's squeeze: 96 channels of 40x40 (parallel from 2^15 elements), at every
        // microkernel level this CPU runs (portable, AVX2, AVX-512).
        for (cpu::Isa isa : cpu::SupportedIsas()) {
          cpu::ScopedIsaForTesting level(isa);
          for (int threads : {1, 3}) {
            KernelTester t(op);
            t.In(r({2, 96, 40, 39})).Out(DType::kF32).Tol(1e-4, 1e-4).Threads(threads);
            t.Attr("channels_last_in", cl_in).Attr("channels_last_out", cl_out);
            absl::Status s = t.Compare("dnnl");
            EXPECT_TRUE(s.ok()) << o << " " << cpu::IsaName(isa) << " threads " << threads << ": "
                                << s;
            EXPECT_NE(t.kernel_name().find(".dnnl"), std::string::npos) << t.kernel_name();
          }
        }
      }
    }
  }
  // NaN under a global max pool: the reference kernel's (it propagates it), same result.
  Tensor nan = r({1, 4, 3, 3});
  nan.data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  KernelTester t("GlobalMaxPool");
  t.In(nan).Out(DType::kF32);
  EXPECT_TRUE(t.Compare("dnnl").ok());
}

// A max pool over a channels-last input whose windows lie inside it runs dynvm's own loop
// (ChannelsLastMaxPool): kernels, strides and dilations in 1D/2D/3D, batches, channel counts
// off the vector width, a channels-last or a single-pixel output; NaN is larger than every
// number, as in the reference kernel, without falling back to it.
TEST(DnnlPool, ChannelsLastMaxPoolMatchesReference) {
  uint32_t seed = 800;
  auto r = [&](std::vector<int64_t> d) { return Random(std::move(d), seed++); };
  const Attrs cl = Both(I("channels_last_in", 1), I("channels_last_out", 1));
  Check({"2x2 stride 2",
         "MaxPool",
         "",
         {r({2, 32, 8, 13})},
         Both(A<Ints>({{"kernel_shape", {2, 2}}, {"strides", {2, 2}}}), cl)});
  Check({"4x1 stride 4x1 to one row",
         "MaxPool",
         "",
         {r({1, 20, 4, 9})},
         Both(A<Ints>({{"kernel_shape", {4, 1}}, {"strides", {4, 1}}}), cl)});
  Check({"3x3 stride 1 dilated",
         "MaxPool",
         "",
         {r({1, 7, 9, 10})},
         Both(A<Ints>({{"kernel_shape", {3, 3}}, {"dilations", {2, 1}}}), cl)});
  Check({"1d",
         "MaxPool",
         "",
         {r({3, 5, 17})},
         Both(A<Ints>({{"kernel_shape", {3}}, {"strides", {2}}}), cl)});
  Check({"3d",
         "MaxPool",
         "",
         {r({1, 9, 5, 6, 7})},
         Both(A<Ints>({{"kernel_shape", {2, 3, 2}}, {"strides", {1, 2, 2}}}), cl)});
  Check({"whole image",
         "MaxPool",
         "",
         {r({2, 11, 3, 4})},
         Both(A<Ints>({{"kernel_shape", {3, 4}}}), I("channels_last_in", 1))});
  Tensor nan = Random({1, 16, 4, 6}, seed++);
  nan.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  nan.data<float>()[16 * 7 + 3] = std::numeric_limits<float>::quiet_NaN();
  Check({"NaN",
         "MaxPool",
         "",
         {nan},
         Both(A<Ints>({{"kernel_shape", {2, 2}}, {"strides", {2, 2}}}), cl)});
}

// A plain input (after a Concat: SqueezeNet's Fire modules, GoogLeNet's and Inception's blocks)
// is reordered to channels-last before pooling: oneDNN 2.6 pools nchw with its reference
// implementation, 5-12x slower. Same results as the reference kernel, with either output layout,
// in 2-D (SqueezeNet's ceil-mode 3x3 stride 2, padded windows) and 3-D, and no reference
// implementation bound on a CPU with AVX2.
TEST(DnnlPool, PlainInputIsPooledChannelsLast) {
  uint32_t seed = 900;
  const bool avx2 = OneDnnHas(dnnl_cpu_isa_avx2);
  struct Shape {
    std::vector<int64_t> dims, kernel, strides, pads;
    int64_t ceil;
  };
  for (const Shape& sh : {Shape{{1, 128, 15, 15}, {3, 3}, {2, 2}, {0, 0, 0, 0}, 1},
                          Shape{{2, 24, 12, 13}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0},
                          Shape{{1, 16, 6, 9, 9}, {1, 3, 3}, {1, 2, 2}, {0, 1, 1, 0, 1, 1}, 1}}) {
    for (const char* op : {"MaxPool", "AveragePool"}) {
      for (int64_t cl_out : {0, 1}) {
        const std::string what =
            absl::StrCat(op, " ", absl::StrJoin(sh.dims, "x"), " ceil ", sh.ceil, " out ", cl_out);
        const std::vector<Tensor> inputs = {Random(sh.dims, seed++)};
        const Attrs attrs =
            Both(A<Ints>({{"kernel_shape", sh.kernel}, {"strides", sh.strides}, {"pads", sh.pads}}),
                 Both(I("ceil_mode", sh.ceil), I("channels_last_out", cl_out)));
        Check({what, op, "", inputs, attrs});
        KernelTester t(op);
        KernelCall call(op);
        call.In(inputs[0]).Out(DType::kF32);
        attrs(t, call);
        KernelSpec spec = call.spec();
        spec.backend = "dnnl";
        std::unique_ptr<Kernel> k = *KernelRegistry::Global().Create(spec);
        KernelContext ctx(&HeapAllocator::Get(), 1);
        std::vector<const Tensor*> in = {&inputs[0]};
        Tensor y;
        Tensor* out[] = {&y};
        ASSERT_TRUE(k->Run(ctx, in, out).ok()) << what;
        const ConvCacheStats st = GetConvCacheStats(ctx.state().get());
        EXPECT_EQ(st.src_reorders, 1) << what;
        if (avx2) EXPECT_EQ(st.reference_impls, 0) << what;
      }
    }
  }
}

TEST(DnnlPool, FallbacksStillMatch) {
  // Ceil mode with count_include_pad past the end padding, and a NaN under MaxPool: the
  // reference kernel serves them, with the same results.
  KernelTester avg("AveragePool");
  avg.Random(DType::kF32, {1, 2, 12, 12})
      .Out(DType::kF32)
      .Attr("kernel_shape", Ints{3, 3})
      .Attr("strides", Ints{2, 2})
      .Attr("pads", Ints{1, 1, 1, 1})
      .Attr("ceil_mode", int64_t{1})
      .Attr("count_include_pad", int64_t{1});
  EXPECT_TRUE(avg.Compare("dnnl").ok());
  Tensor x = Random({1, 1, 4, 4}, 5);
  x.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  KernelTester mx("MaxPool");
  mx.In(x).Out(DType::kF32).Attr("kernel_shape", Ints{2, 2});
  EXPECT_TRUE(mx.Compare("dnnl").ok());
}

TEST(DnnlBatchNormLrn, MatchesReference) {
  uint32_t seed = 400;
  auto r = [&](std::vector<int64_t> d) { return Random(std::move(d), seed++); };
  for (std::vector<int64_t> dims :
       {std::vector<int64_t>{2, 6, 5, 7}, {3, 4, 10}, {1, 3, 4, 5, 6}, {4, 9}}) {
    const int64_t c = dims[1];
    Check({"BatchNormalization rank " + std::to_string(dims.size()),
           "BatchNormalization",
           "",
           {r(dims), r({c}), r({c}), r({c}), Random({c}, seed++, 0.5f, 2.0f)},
           F("epsilon", 1e-3f)});
  }
  Check({"LRN 3", "LRN", "", {r({2, 8, 5, 5})}, Both(I("size", 3), F("alpha", 0.01f))});
  Check({"LRN 5",
         "LRN",
         "",
         {r({1, 7, 4, 6})},
         Both(Both(I("size", 5), F("beta", 0.5f)), F("bias", 2.0f))});
}

// Inference BatchNormalization over rows of 8 pixels or more runs a scale and shift per
// (image, channel) row (BatchNormKernel::ScaleShift), no oneDNN primitive: DenseNet's
// pre-activation BNs took 26% of the model on oneDNN's plain-layout primitive. The reference
// kernel's results at 1 and 2 threads (rows split over the pool past 32768 elements); a [N, C]
// input keeps the primitive.
TEST(DnnlBatchNormLrn, PlainRowsRunAScaleAndShift) {
  uint32_t seed = 450;
  for (std::vector<int64_t> dims :
       {std::vector<int64_t>{1, 256, 16, 16}, {2, 5, 3, 3}, {3, 7, 9}, {1, 4, 2, 3, 5}, {6, 12}}) {
    for (int threads : {1, 2}) {
      const int64_t c = dims[1];
      const std::string what = absl::StrCat(absl::StrJoin(dims, "x"), " threads ", threads);
      const std::vector<Tensor> inputs = {Random(dims, seed++), Random({c}, seed++),
                                          Random({c}, seed++), Random({c}, seed++),
                                          Random({c}, seed++, 0.5f, 2.0f)};
      Check({what, "BatchNormalization", "", inputs, F("epsilon", 1e-3f)});
      KernelCall call("BatchNormalization");
      for (const Tensor& t : inputs) call.In(t);
      call.Out(DType::kF32).Attr("epsilon", 1e-3f);
      KernelSpec spec = call.spec();
      spec.backend = "dnnl";
      std::unique_ptr<Kernel> k = *KernelRegistry::Global().Create(spec);
      KernelContext ctx(&HeapAllocator::Get(), threads);
      std::vector<const Tensor*> in;
      for (const Tensor& t : inputs) in.push_back(&t);
      Tensor y;
      Tensor* out[] = {&y};
      ASSERT_TRUE(k->Run(ctx, in, out).ok()) << what;
      const bool rows = dims.size() > 2;
      EXPECT_EQ(GetConvCacheStats(ctx.state().get()).entries, rows ? 0 : 1) << what;
      KernelCall ref("BatchNormalization");
      for (const Tensor& x : inputs) ref.In(x);
      ref.Out(DType::kF32).Attr("epsilon", 1e-3f).Backend("reference");
      absl::StatusOr<std::vector<Tensor>> want = ref.Run();
      ASSERT_TRUE(want.ok() && want->size() == 1u) << what;
      for (int64_t i = 0; i < y.numel(); ++i) {
        ASSERT_NEAR(y.data<float>()[i], (*want)[0].data<float>()[i],
                    1e-5 * (1 + std::abs((*want)[0].data<float>()[i])))
            << what << " at " << i;
      }
    }
  }
}

TEST(DnnlConv, BadShapesAreInvalidArgument) {
  KernelCall call("Conv");
  call.Backend("dnnl");
  // Weights for 4 input channels, input with 3.
  call.In(Random({1, 3, 8, 8}, 1)).In(Random({2, 4, 3, 3}, 2)).Out(DType::kF32);
  EXPECT_EQ(call.Run().status().code(), absl::StatusCode::kInvalidArgument);
  KernelCall big("Conv");
  big.Backend("dnnl");
  big.In(Random({1, 1, 4, 4}, 1)).In(Random({1, 1, 7, 7}, 2)).Out(DType::kF32);
  EXPECT_EQ(big.Run().status().code(), absl::StatusCode::kInvalidArgument);
  KernelCall neg("Conv");
  neg.Backend("dnnl");
  neg.In(Random({1, 1, 8, 8}, 1)).In(Random({1, 1, 3, 3}, 2)).Out(DType::kF32);
  neg.Attr("pads", Ints{-1, 0, 0, 0});
  EXPECT_EQ(neg.Run().status().code(), absl::StatusCode::kInvalidArgument);
}

// Channels-last operands must be dense buffers: a broadcast view marked channels-last (a
// hostile program) is InvalidArgument on both backends, never an out-of-bounds read.
TEST(DnnlFusedConv, ChannelsLastViewsMustBeContiguous) {
  Tensor base = Random({1, 4, 1, 1}, 3);
  Tensor x = *Tensor::View(base.storage(), 0, DType::kF32, {1, 4, 6, 6}, {4, 1, 0, 0});
  Tensor w = Random({4, 4, 3, 3}, 4);
  for (const char* backend : {"dnnl", "reference"}) {
    SCOPED_TRACE(backend);
    KernelCall in_call("FusedConv", "dynvm");
    in_call.Backend(backend).In(x).In(w).Out(DType::kF32).Attr("channels_last_in", int64_t{1});
    EXPECT_EQ(in_call.Run().status().code(), absl::StatusCode::kInvalidArgument);
    Tensor y = Random({1, 4, 4, 4}, 5);
    Tensor sum = *Tensor::View(base.storage(), 0, DType::kF32, {1, 4, 4, 4}, {4, 1, 0, 0});
    KernelCall sum_call("FusedConv", "dynvm");
    sum_call.Backend(backend).In(Random({1, 4, 6, 6}, 6)).In(w).Absent().In(sum);
    sum_call.Out(DType::kF32).Attr("channels_last_sum", int64_t{1});
    EXPECT_EQ(sum_call.Run().status().code(), absl::StatusCode::kInvalidArgument);
  }
  // The same call with a dense residual and no bias is served by oneDNN, as the reference.
  Tensor xd = Random({1, 4, 6, 6}, 6), sd = Random({1, 4, 4, 4}, 7);
  KernelTester t("FusedConv", "dynvm");
  t.In(xd).In(w).Absent().In(sd).Out(DType::kF32).Tol(1e-4, 1e-4);
  t.Attr("channels_last_sum", int64_t{1}).Attr("activation", std::string("Relu"));
  absl::Status st = t.Compare("dnnl");
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_NE(t.kernel_name().find(".dnnl"), std::string::npos) << t.kernel_name();
}

// 3x3 stride-1 FusedConvs with constant weights, enough channels and pixels per image run
// oneDNN's Winograd (on AVX-512; elsewhere dynvm's own for channels-last operands, tested in
// winograd_test.cc, or the direct algorithm): same results as the reference
// kernel with every post-op and channels-last port, at several widths and batches; smaller
// images and strided convolutions keep the direct algorithm.
TEST(DnnlFusedConv, WinogradWhereItPaysMatchesReference) {
  uint32_t seed = 500;
  auto r = [&](std::vector<int64_t> d) { return Random(std::move(d), seed++); };
  const bool avx512 = OneDnnHas(dnnl_cpu_isa_avx512_core);
  struct Shape {
    int64_t n, c, m, h, w, stride;
    bool winograd;
  };
  for (Shape sh : {Shape{1, 32, 48, 14, 14, 1, true}, Shape{2, 64, 32, 16, 23, 1, true},
                   Shape{1, 32, 64, 4, 25, 1, true}, Shape{1, 48, 48, 8, 8, 1, false},
                   Shape{1, 16, 32, 16, 16, 1, false}, Shape{1, 32, 32, 30, 30, 2, false},
                   Shape{1, 96, 24, 12, 13, 1, true}, Shape{1, 32, 8, 12, 12, 1, false}}) {
    for (int variant = 0; variant < 3; ++variant) {
      const bool sum = variant >= 1, channels_last = variant == 2;
      const int64_t oh = (sh.h - 1) / sh.stride + 1, ow = (sh.w - 1) / sh.stride + 1;
      std::vector<Tensor> inputs = {r({sh.n, sh.c, sh.h, sh.w}), r({sh.m, sh.c, 3, 3}), r({sh.m})};
      if (sum) inputs.push_back(Random({sh.n, sh.m, oh, ow}, seed++, -4, 4));
      Attrs attrs =
          Both(Both(A<Ints>({{"pads", {1, 1, 1, 1}}, {"strides", {sh.stride, sh.stride}}}),
                    I("constant_weights", 1)),
               S("activation", variant == 3 ? "Clip" : "Relu"));
      if (variant == 3)
        attrs = Both(attrs, Both(F("activation_alpha", -1), F("activation_beta", 2)));
      if (channels_last) {
        attrs = Both(attrs, Both(Both(I("channels_last_in", 1), I("channels_last_out", 1)),
                                 I("channels_last_sum", 1)));
      }
      const std::string what = absl::StrCat(sh.n, "x", sh.c, "x", sh.h, "x", sh.w, " -> ", sh.m,
                                            " stride ", sh.stride, " variant ", variant);
      Check({what, "FusedConv", "dynvm", inputs, attrs});
      // Which algorithm the site bound.
      KernelTester t("FusedConv", "dynvm");
      KernelCall call("FusedConv", "dynvm");
      for (const Tensor& in : inputs) call.In(in);
      call.Out(DType::kF32);
      attrs(t, call);
      KernelSpec spec = call.spec();
      spec.backend = "dnnl";
      std::unique_ptr<Kernel> k = *KernelRegistry::Global().Create(spec);
      KernelContext ctx(&HeapAllocator::Get(), 1);
      std::vector<const Tensor*> in;
      for (const Tensor& x : inputs) in.push_back(&x);
      Tensor y;
      Tensor* out[] = {&y};
      ASSERT_TRUE(k->Run(ctx, in, out).ok()) << what;
      if (variant == 3) continue;
      EXPECT_EQ(GetConvCacheStats(ctx.state().get()).winograd, sh.winograd && avx512 ? 1 : 0)
          << what;
    }
  }
}

// Channels-last FusedConvs with constant weights, at most 16 output pixels per image and at
// least 32 over the batch, run as im2col + one GEMM: same results as the reference kernel with
// bias, residual, Relu / LeakyRelu / Clip, strides, dilations, asymmetric pads and kernels;
// the other shapes and activations keep oneDNN's convolution.
TEST(DnnlFusedConv, SmallImagesAsOneGemmMatchReference) {
  uint32_t seed = 600;
  auto r = [&](std::vector<int64_t> d) { return Random(std::move(d), seed++); };
  struct Shape {
    int64_t n, c, m, h, w, kh, kw;
    Ints pads, strides, dilations;
    const char* act;
    bool sum, bias, gemm;
  };
  const Shape shapes[] = {
      // 24 output channels: with 32 or more dynvm's Winograd could take this 3x3 stride-1 shape
      // (winograd_test.cc; choice::UseOwnWinograd).
      {8, 32, 24, 4, 4, 3, 3, {1, 1, 1, 1}, {1, 1}, {1, 1}, "Relu", true, true, true},
      {8, 16, 24, 4, 4, 3, 3, {1, 1, 1, 1}, {2, 2}, {1, 1}, "LeakyRelu", false, false, true},
      {4, 8, 16, 4, 4, 3, 3, {2, 2, 2, 2}, {1, 1}, {2, 2}, "Clip", true, true, true},
      {16, 8, 8, 3, 4, 2, 3, {0, 1, 1, 0}, {1, 1}, {1, 1}, "", false, true, true},
      {4, 16, 16, 3, 3, 3, 3, {0, 0, 0, 0}, {1, 1}, {1, 1}, "Relu", false, true, false},
      {8, 16, 16, 4, 4, 3, 3, {1, 1, 1, 1}, {1, 1}, {1, 1}, "Sigmoid", false, true, false},
      {1, 16, 16, 5, 5, 3, 3, {1, 1, 1, 1}, {1, 1}, {1, 1}, "Relu", false, true, false}};
  for (const Shape& sh : shapes) {
    std::vector<Tensor> inputs = {r({sh.n, sh.c, sh.h, sh.w}), r({sh.m, sh.c, sh.kh, sh.kw})};
    if (sh.bias) inputs.push_back(r({sh.m}));  // every case with a residual has a bias
    const int64_t oh =
        (sh.h + sh.pads[0] + sh.pads[2] - (sh.kh - 1) * sh.dilations[0] - 1) / sh.strides[0] + 1;
    const int64_t ow =
        (sh.w + sh.pads[1] + sh.pads[3] - (sh.kw - 1) * sh.dilations[1] - 1) / sh.strides[1] + 1;
    if (sh.sum) inputs.push_back(Random({sh.n, sh.m, oh, ow}, seed++, -4, 4));
    Attrs attrs = Both(
        Both(A<Ints>({{"pads", sh.pads},
                      {"strides", sh.strides},
                      {"dilations", sh.dilations},
                      {"kernel_shape", {sh.kh, sh.kw}}}),
             I("constant_weights", 1)),
        Both(Both(I("channels_last_in", 1), I("channels_last_out", 1)), I("channels_last_sum", 1)));
    attrs =
        Both(attrs, Both(S("activation", sh.act),
                         Both(F("activation_alpha", std::string(sh.act) == "Clip" ? -0.5f : 0.1f),
                              F("activation_beta", 0.75f))));
    const std::string what = absl::StrCat(sh.n, "x", sh.c, "x", sh.h, "x", sh.w, " k", sh.kh, "x",
                                          sh.kw, " -> ", sh.m, " ", sh.act);
    Check({what, "FusedConv", "dynvm", inputs, attrs});
    KernelTester t("FusedConv", "dynvm");
    KernelCall call("FusedConv", "dynvm");
    for (const Tensor& in : inputs) call.In(in);
    call.Out(DType::kF32);
    attrs(t, call);
    KernelSpec spec = call.spec();
    spec.backend = "dnnl";
    std::unique_ptr<Kernel> k = *KernelRegistry::Global().Create(spec);
    KernelContext ctx(&HeapAllocator::Get(), 1);
    std::vector<const Tensor*> in;
    for (const Tensor& x : inputs) in.push_back(&x);
    Tensor y;
    Tensor* out[] = {&y};
    ASSERT_TRUE(k->Run(ctx, in, out).ok()) << what;
    EXPECT_EQ(GetConvCacheStats(ctx.state().get()).gemm, sh.gemm ? 1 : 0) << what;
  }
}

// Runs a FusedConv at 1 and 2 threads (a fresh site each), checks the site's cache statistics
// with `expect` and that both outputs agree (dnnl_sgemm on a range of rows may round the last bit
// differently from the whole product; Check compares the 1-thread output with the reference).
void ExpectPathAtOneAndTwoThreads(const std::string& what, const std::vector<Tensor>& inputs,
                                  const Attrs& attrs,
                                  const std::function<void(const ConvCacheStats&)>& expect) {
  KernelTester t("FusedConv", "dynvm");
  KernelCall call("FusedConv", "dynvm");
  for (const Tensor& in : inputs) call.In(in);
  call.Out(DType::kF32);
  attrs(t, call);
  KernelSpec spec = call.spec();
  spec.backend = "dnnl";
  std::unique_ptr<Kernel> k = *KernelRegistry::Global().Create(spec);
  std::vector<const Tensor*> in;
  for (const Tensor& x : inputs) in.push_back(&x);
  Tensor y1, y2;
  for (int threads : {1, 2}) {
    KernelContext ctx(&HeapAllocator::Get(), threads);
    Tensor* outs[] = {threads == 1 ? &y1 : &y2};
    ASSERT_TRUE(k->Run(ctx, in, outs).ok()) << what;
    expect(GetConvCacheStats(ctx.state().get()));
  }
  ASSERT_EQ(y1.numel(), y2.numel());
  for (int64_t i = 0; i < y1.numel(); ++i) {
    const float a = y1.data<float>()[i], b = y2.data<float>()[i];
    ASSERT_NEAR(a, b, 1e-5 * (1 + std::fabs(a))) << what << " at " << i;
  }
}

// dynvm::ChannelMul (a squeeze-excitation scale) against the reference kernel on every layout
// pair, a gate per image and one for the batch, sizes below and above the parallel threshold;
// at 2 threads the same values as at 1.
TEST(DnnlChannelMul, EveryLayoutMatchesReference) {
  uint32_t seed = 1200;
  for (const std::vector<int64_t>& dims :
       {std::vector<int64_t>{2, 5, 7}, {3, 24, 9, 11}, {2, 200, 48, 96}, {1, 4, 3, 2, 5}}) {
    for (int64_t gate_batch : {int64_t{1}, dims[0]}) {
      for (int layouts = 0; layouts < 4; ++layouts) {
        std::vector<int64_t> gdims(dims.size(), 1);
        gdims[0] = gate_batch;
        gdims[1] = dims[1];
        const std::vector<Tensor> inputs = {Random(dims, seed++), Random(gdims, seed++)};
        const Attrs attrs =
            Both(I("channels_last_in", layouts & 1), I("channels_last_out", (layouts >> 1) & 1));
        const std::string what = absl::StrCat(dims.size(), "D ", dims[1], " channels, gate batch ",
                                              gate_batch, ", layouts ", layouts);
        Check({what, "ChannelMul", "dynvm", inputs, attrs}, 0);
        KernelTester t("ChannelMul", "dynvm");
        KernelCall call("ChannelMul", "dynvm");
        for (const Tensor& in : inputs) call.In(in);
        call.Out(DType::kF32);
        attrs(t, call);
        KernelSpec spec = call.spec();
        spec.backend = "dnnl";
        std::unique_ptr<Kernel> k = *KernelRegistry::Global().Create(spec);
        std::vector<const Tensor*> in = {&inputs[0], &inputs[1]};
        Tensor y1, y2;
        for (int threads : {1, 2}) {
          KernelContext ctx(&HeapAllocator::Get(), threads);
          Tensor* outs[] = {threads == 1 ? &y1 : &y2};
          ASSERT_TRUE(k->Run(ctx, in, outs).ok()) << what;
        }
        for (int64_t i = 0; i < y1.numel(); ++i) {
          ASSERT_EQ(y1.data<float>()[i], y2.data<float>()[i]) << what << " at " << i;
        }
      }
    }
  }
}

// A depthwise Conv1d (group == channels == output channels, stride 1) over a plain input runs on
// dynvm's microkernel (cpu/depthwise.h) at every instruction-set level this CPU has: the same
// results as the reference kernel with and without bias, pads (symmetric, asymmetric, none),
// dilations, taps around the microkernel's 32-output block, lengths below and above it, each
// activation it takes, a plain or channels-last output, at 1 and 2 threads. Near misses stay on
// oneDNN and still match: stride 2, a channel multiplier of 2, a grouped (not depthwise) conv, a
// residual, an activation it does not take (Clip), a second activation, a channels-last input.
TEST(DnnlFusedConv, DepthwiseConv1dOnTheMicrokernelMatchesReference) {
  struct Shape {
    int64_t n, c, m, group, t, k, stride, dilation;
    Ints pads;
    const char* act;
    bool bias, sum, channels_last_in, channels_last_out, act2, takes;
  };
  const Shape shapes[] = {
      {1, 144, 144, 144, 100, 31, 1, 1, {15, 15}, "SiLU", true, false, false, true, false, true},
      {2, 17, 17, 17, 40, 15, 1, 1, {7, 7}, "SiLU", true, false, false, false, false, true},
      {1, 5, 5, 5, 33, 3, 1, 2, {2, 2}, "", false, false, false, false, false, true},
      {3, 20, 20, 20, 7, 5, 1, 1, {0, 4}, "Relu", true, false, false, true, false, true},
      {1, 33, 33, 33, 64, 1, 1, 1, {0, 0}, "Sigmoid", true, false, false, false, false, true},
      {1, 8, 8, 8, 31, 9, 1, 3, {0, 0}, "Tanh", true, false, false, true, false, true},
      {1, 16, 16, 16, 65, 32, 1, 1, {16, 15}, "", true, false, false, false, false, true},
      // Near misses.
      {1, 16, 16, 16, 40, 5, 2, 1, {2, 2}, "SiLU", true, false, false, false, false, false},
      {1, 16, 32, 16, 40, 5, 1, 1, {2, 2}, "", true, false, false, false, false, false},
      {1, 16, 16, 8, 40, 5, 1, 1, {2, 2}, "", true, false, false, false, false, false},
      {1, 16, 16, 16, 40, 5, 1, 1, {2, 2}, "", true, true, false, false, false, false},
      {1, 16, 16, 16, 40, 5, 1, 1, {2, 2}, "Clip", true, false, false, false, false, false},
      {1, 16, 16, 16, 40, 5, 1, 1, {2, 2}, "Relu", true, false, false, false, true, false},
      {1, 16, 16, 16, 40, 5, 1, 1, {2, 2}, "", true, false, true, false, false, false},
  };
  uint32_t seed = 1000;
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting level(isa);
    for (const Shape& sh : shapes) {
      const int64_t out =
          (sh.t + sh.pads[0] + sh.pads[1] - (sh.k - 1) * sh.dilation - 1) / sh.stride + 1;
      std::vector<Tensor> inputs = {Random({sh.n, sh.c, sh.t}, seed++),
                                    Random({sh.m, sh.c / sh.group, sh.k}, seed++)};
      if (sh.bias) inputs.push_back(Random({sh.m}, seed++));  // every case with a residual has one
      if (sh.sum) inputs.push_back(Random({sh.n, sh.m, out}, seed++, -4, 4));
      Attrs attrs = Both(Both(A<Ints>({{"pads", sh.pads},
                                       {"strides", {sh.stride}},
                                       {"dilations", {sh.dilation}},
                                       {"kernel_shape", {sh.k}}}),
                              Both(I("group", sh.group), I("constant_weights", 1))),
                         Both(I("channels_last_in", sh.channels_last_in ? 1 : 0),
                              I("channels_last_out", sh.channels_last_out ? 1 : 0)));
      attrs =
          Both(attrs, Both(S("activation", sh.act),
                           Both(F("activation_alpha", std::string(sh.act) == "SiLU" ? 1 : -0.5f),
                                F("activation_beta", 0.75f))));
      if (sh.act2) attrs = Both(attrs, Both(S("activation2", "Affine"), F("activation2_alpha", 2)));
      const std::string what =
          absl::StrCat(cpu::IsaName(isa), " ", sh.n, "x", sh.c, "x", sh.t, " k", sh.k, " -> ", sh.m,
                       " group ", sh.group, " stride ", sh.stride, " dilation ", sh.dilation, " ",
                       sh.act, sh.channels_last_out ? " channels-last out" : "");
      Check({what, "FusedConv", "dynvm", inputs, attrs});
      ExpectPathAtOneAndTwoThreads(what, inputs, attrs, [&](const ConvCacheStats& st) {
        EXPECT_EQ(st.depthwise_1d, sh.takes ? 1 : 0) << what;
      });
    }
  }
}

// A pointwise Conv1d (kernel 1, stride 1, unpadded, ungrouped) runs as sgemm on the VM's threads:
// the same results as the reference kernel with and without bias, each activation it takes,
// plain and channels-last input and output, batches, at 1 and 2 threads (sizes past the
// parallel threshold split rows across images). Near misses stay on oneDNN and still match: a
// kernel of 3, stride 2, a pad, groups, a residual, Clip, a second activation, a 2D 1x1 conv.
TEST(DnnlFusedConv, PointwiseConv1dAsGemmMatchesReference) {
  struct Shape {
    int64_t n, c, m, t, group, k, stride, pad;
    const char* act;
    bool bias, sum, channels_last_in, channels_last_out, act2, takes;
  };
  const Shape shapes[] = {
      {1, 144, 288, 100, 1, 1, 1, 0, "", true, false, false, false, false, true},
      {2, 144, 144, 100, 1, 1, 1, 0, "", true, false, true, false, false, true},
      {3, 40, 24, 37, 1, 1, 1, 0, "SiLU", true, false, false, true, false, true},
      {1, 17, 33, 5, 1, 1, 1, 0, "Relu", false, false, true, true, false, true},
      {5, 256, 96, 211, 1, 1, 1, 0, "Sigmoid", true, false, false, false, false, true},
      {3, 128, 256, 97, 1, 1, 1, 0, "Tanh", true, false, true, true, false, true},
      // Near misses.
      {1, 16, 16, 40, 1, 3, 1, 1, "", true, false, false, false, false, false},
      {1, 16, 16, 40, 1, 1, 2, 0, "", true, false, false, false, false, false},
      {1, 16, 16, 40, 1, 1, 1, 1, "", true, false, false, false, false, false},
      {1, 16, 16, 40, 2, 1, 1, 0, "", true, false, false, false, false, false},
      {1, 16, 16, 40, 1, 1, 1, 0, "", true, true, false, false, false, false},
      {1, 16, 16, 40, 1, 1, 1, 0, "Clip", true, false, false, false, false, false},
      {1, 16, 16, 40, 1, 1, 1, 0, "Relu", true, false, false, false, true, false},
  };
  uint32_t seed = 1100;
  for (const Shape& sh : shapes) {
    const int64_t out = (sh.t + 2 * sh.pad - sh.k) / sh.stride + 1;
    std::vector<Tensor> inputs = {Random({sh.n, sh.c, sh.t}, seed++),
                                  Random({sh.m, sh.c / sh.group, sh.k}, seed++)};
    if (sh.bias) inputs.push_back(Random({sh.m}, seed++));  // every case with a residual has one
    if (sh.sum) inputs.push_back(Random({sh.n, sh.m, out}, seed++, -4, 4));
    Attrs attrs = Both(
        Both(A<Ints>(
                 {{"pads", {sh.pad, sh.pad}}, {"strides", {sh.stride}}, {"kernel_shape", {sh.k}}}),
             Both(I("group", sh.group), I("constant_weights", 1))),
        Both(I("channels_last_in", sh.channels_last_in ? 1 : 0),
             I("channels_last_out", sh.channels_last_out ? 1 : 0)));
    attrs = Both(attrs, Both(S("activation", sh.act),
                             Both(F("activation_alpha", std::string(sh.act) == "SiLU" ? 1 : -0.5f),
                                  F("activation_beta", 0.75f))));
    if (sh.act2) attrs = Both(attrs, Both(S("activation2", "Affine"), F("activation2_alpha", 2)));
    const std::string what = absl::StrCat(
        sh.n, "x", sh.c, "x", sh.t, " k", sh.k, " -> ", sh.m, " group ", sh.group, " stride ",
        sh.stride, " pad ", sh.pad, " ", sh.act, sh.channels_last_in ? " channels-last in" : "",
        sh.channels_last_out ? " channels-last out" : "");
    Check({what, "FusedConv", "dynvm", inputs, attrs});
    ExpectPathAtOneAndTwoThreads(what, inputs, attrs, [&](const ConvCacheStats& st) {
      EXPECT_EQ(st.pointwise_1d, sh.takes ? 1 : 0) << what;
    });
  }
}

// One case of OnePixelImagesAsAProductMatchReference (below).
struct OnePixelShape {
  int64_t n, c, m, spatial, pixel, kernel, pad, stride, group;
  const char* act;
  bool bias, sum, act2, channels_last_in, channels_last_out, constant, takes;
};

void OnePixelCase(const OnePixelShape& sh, uint32_t& seed) {
  std::vector<int64_t> xd = {sh.n, sh.c}, wd = {sh.m, sh.c / sh.group}, yd = {sh.n, sh.m};
  std::vector<int64_t> pads, strides, kernel;
  for (int64_t d = 0; d < sh.spatial; ++d) {
    xd.push_back(d == 0 ? sh.pixel : 1);
    wd.push_back(sh.kernel);
    yd.push_back(((d == 0 ? sh.pixel : 1) + 2 * sh.pad - sh.kernel) / sh.stride + 1);
    strides.push_back(sh.stride);
    kernel.push_back(sh.kernel);
  }
  pads.assign(2 * sh.spatial, sh.pad);
  std::vector<Tensor> inputs = {Random(xd, seed++), Random(wd, seed++)};
  if (sh.bias || sh.sum) inputs.push_back(Random({sh.m}, seed++));
  if (sh.sum) inputs.push_back(Random(yd, seed++, -4, 4));
  Attrs attrs = Both(Both(A<Ints>({{"pads", pads}, {"strides", strides}, {"kernel_shape", kernel}}),
                          Both(I("group", sh.group), I("constant_weights", sh.constant ? 1 : 0))),
                     Both(I("channels_last_in", sh.channels_last_in ? 1 : 0),
                          I("channels_last_out", sh.channels_last_out ? 1 : 0)));
  if (*sh.act != '\0') {
    const std::string act = sh.act;
    const float alpha = act == "SiLU" ? 1.0f : act == "Affine" ? 1.0f / 6 : -0.5f;
    const float beta = act == "Affine" ? 0.5f : 0.75f;
    attrs = Both(attrs, Both(S("activation", act),
                             Both(F("activation_alpha", alpha), F("activation_beta", beta))));
  }
  if (sh.act2) {  // a HardSigmoid: Affine(1/6, 0.5), then Clip(0, 1)
    attrs = Both(attrs, Both(S("activation2", "Clip"),
                             Both(F("activation2_alpha", 0), F("activation2_beta", 1))));
  }
  const std::string what =
      absl::StrCat(sh.n, "x", sh.c, " -> ", sh.m, " rank ", sh.spatial + 2, " pixel ", sh.pixel,
                   " kernel ", sh.kernel, " pad ", sh.pad, " stride ", sh.stride, " group ",
                   sh.group, " ", sh.act, sh.act2 ? "+Clip" : "", sh.sum ? " sum" : "",
                   sh.channels_last_in ? " cl-in" : "", sh.channels_last_out ? " cl-out" : "",
                   sh.constant ? " constant" : "", " isa ", static_cast<int>(cpu::ActiveIsa()));
  Check({what, "FusedConv", "dynvm", inputs, attrs});
  ExpectPathAtOneAndTwoThreads(what, inputs, attrs, [&](const ConvCacheStats& st) {
    EXPECT_EQ(st.one_pixel, sh.takes ? 1 : 0) << what;
  });
}

// A FusedConv whose images are one pixel and whose kernel is 1 (a squeeze-excitation block's
// convolutions after its global pool) runs as a matrix product (ConvKernel::ExecuteOnePixel),
// whatever the ports' layouts (one pixel has the same bytes both ways): against the reference
// kernel with every activation, the HardSigmoid pair (Affine then Clip), bias or none, a residual,
// 1 to 3 spatial dims, strides, batches (one image: the packed GEMV; 16: the packed GEMM; 2-4:
// dnnl_sgemm), constant weights (packed) or not (cpu::Gemv, dnnl_sgemm), at every microkernel
// level the CPU has; near misses (more than one pixel, a padded or larger kernel, groups) keep
// oneDNN's convolution.
TEST(DnnlFusedConv, OnePixelImagesAsAProductMatchReference) {
  // {n, c, m, spatial dims, pixels along the first, kernel, pad, stride, group, activation, bias,
  // residual, activation2 (Clip 0..1), channels-last in, out, constant weights (set below),
  // takes}
  const OnePixelShape shapes[] = {
      {1, 960, 240, 2, 1, 1, 0, 1, 1, "Relu", true, false, false, true, false, true, true},
      {1, 240, 960, 2, 1, 1, 0, 1, 1, "Affine", true, false, true, false, true, true, true},
      {1, 72, 24, 2, 1, 1, 0, 1, 1, "SiLU", true, false, false, false, false, true, true},
      {1, 24, 72, 2, 1, 1, 0, 1, 1, "Sigmoid", true, false, false, true, true, true, true},
      {3, 120, 32, 2, 1, 1, 0, 1, 1, "HardSwish", true, false, false, false, false, true, true},
      {2, 33, 17, 2, 1, 1, 0, 2, 1, "LeakyRelu", false, false, false, false, false, true, true},
      {1, 50, 70, 2, 1, 1, 0, 1, 1, "Clip", true, true, false, false, false, true, true},
      {4, 64, 48, 2, 1, 1, 0, 1, 1, "Tanh", true, true, true, true, true, true, true},
      {1, 40, 30, 1, 1, 1, 0, 1, 1, "", true, false, false, false, false, true, true},
      {2, 40, 30, 3, 1, 1, 0, 1, 1, "", false, false, false, false, false, true, true},
      {1, 2048, 1000, 2, 1, 1, 0, 1, 1, "", true, false, false, false, false, true, true},
      {16, 96, 40, 2, 1, 1, 0, 1, 1, "Affine", true, true, true, true, true, true, true},
      // Near misses: two pixels, a padded 3x3 kernel, groups.
      {1, 64, 32, 2, 2, 1, 0, 1, 1, "Relu", true, false, false, false, false, true, false},
      {1, 64, 32, 2, 1, 3, 1, 1, 1, "Relu", true, false, false, false, false, true, false},
      {1, 64, 32, 2, 1, 1, 0, 1, 2, "Relu", true, false, false, false, false, true, false},
  };
  uint32_t seed = 1500;
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting level(isa);
    for (bool constant : {true, false}) {
      for (OnePixelShape sh : shapes) {
        sh.constant = constant;
        OnePixelCase(sh, seed);
      }
    }
  }
}

// Any other ungrouped Conv1d at more than one thread, from kMinParallelWork multiply-adds (where
// oneDNN ran its OpenMP team), runs as im2col + sgemm rows on the VM's threads
// (ConvKernel::ExecuteConv1dGemm): against the reference kernel at 1, 2 and 3 threads with kernel
// sizes, strides, pads (asymmetric, past the kernel), dilations, channels, an odd batch, a plain
// or channels-last output, with and without bias and activation; an STFT front end (one channel,
// 512 taps, stride 160), and batches whose product is weight-bound (fewer output steps than
// output channels, at least 32 columns over the batch: chunks of output channels over every
// image's columns, from kMinParallelGemm). At one thread, below the work (the STFT's 8-frame
// chunk), a batch the per-image split takes that is not weight-bound, grouped, with a residual, a
// channels-last input or Clip it stays on oneDNN.
TEST(DnnlFusedConv, Conv1dAsGemmOnTheVmThreadsMatchesReference) {
  struct Shape {
    int64_t n, c, t, m, k, stride, dilation, pad_l, pad_r, group;
    const char* act;
    bool bias, sum, cl_in, cl_out;
    bool eligible;  // a Conv1d the path serves (the thresholds are checked below)
  };
  constexpr bool Y = true, N = false;
  // clang-format off
  const Shape shapes[] = {
      {1, 1, 16000, 257, 512, 160, 1, 0, 0, 1, "", N, N, N, N, Y},         // STFT front end, 1 s
      {1, 32, 2000, 64, 7, 2, 3, 4, 1, 1, "SiLU", Y, N, N, Y, Y},
      {1, 64, 400, 256, 3, 3, 2, 9, 0, 1, "Tanh", N, N, N, N, Y},         // pad past the kernel
      {1, 8, 8000, 96, 11, 4, 1, 0, 13, 1, "Sigmoid", Y, N, N, Y, Y},
      {3, 16, 1000, 64, 9, 1, 2, 8, 8, 1, "Relu", Y, N, N, N, Y},         // 3 images, 2 threads
      // Too little work (the STFT's 8 frames, 1M multiply-adds).
      {1, 1, 1760, 257, 512, 160, 1, 0, 0, 1, "", Y, N, N, N, Y},
      // Batches the per-image split would take, weight-bound (fewer output steps per image than
      // output channels): chunks of output channels over every image's columns.
      {2, 1, 16000, 257, 512, 160, 1, 0, 0, 1, "", Y, N, N, N, Y},
      {2, 1, 4000, 257, 512, 160, 1, 0, 0, 1, "", N, N, N, N, Y},        // STFT, 2x4000
      {2, 1, 4000, 257, 512, 160, 1, 0, 0, 1, "Relu", Y, N, N, Y, Y},    // channels-last out
      {2, 1, 1728, 258, 256, 64, 1, 0, 0, 1, "Tanh", Y, N, N, N, Y},     // 3.2M, below 4M
      {4, 3, 300, 96, 16, 8, 1, 4, 3, 1, "Sigmoid", Y, N, N, N, Y},      // 4 images, pads
      // Not weight-bound (more output steps than channels), or fewer than 32 columns in all
      // (Silero v5's STFT at 2x576: 2 x 4 frames): the per-image split keeps it.
      {2, 1, 640, 258, 256, 128, 1, 0, 0, 1, "", Y, N, N, N, Y},
      {2, 16, 1000, 64, 9, 1, 2, 8, 8, 1, "Relu", Y, N, N, N, Y},
      {2, 1, 640, 8, 64, 4, 1, 0, 0, 1, "", Y, N, N, N, Y},
      // Near misses: grouped, a residual, a channels-last input, Clip.
      {1, 64, 1000, 64, 9, 1, 1, 4, 4, 4, "", Y, N, N, N, N},
      {1, 64, 1000, 64, 9, 1, 1, 4, 4, 1, "", Y, Y, N, N, N},
      {1, 64, 1000, 64, 9, 1, 1, 4, 4, 1, "", Y, N, Y, N, N},
      {1, 64, 1000, 64, 9, 1, 1, 4, 4, 1, "Clip", Y, N, N, N, N},
  };
  // clang-format on
  uint32_t seed = 3400;
  for (const Shape& sh : shapes) {
    const int64_t span = (sh.k - 1) * sh.dilation + 1;
    const int64_t out = (sh.t + sh.pad_l + sh.pad_r - span) / sh.stride + 1;
    std::vector<Tensor> inputs = {Random({sh.n, sh.c, sh.t}, seed++),
                                  Random({sh.m, sh.c / sh.group, sh.k}, seed++)};
    if (sh.bias) inputs.push_back(Random({sh.m}, seed++));
    if (sh.sum) inputs.push_back(Random({sh.n, sh.m, out}, seed++));
    Attrs attrs = Both(
        Both(A<Ints>({{"pads", {sh.pad_l, sh.pad_r}},
                      {"strides", {sh.stride}},
                      {"dilations", {sh.dilation}},
                      {"kernel_shape", {sh.k}}}),
             Both(I("group", sh.group), I("constant_weights", 1))),
        Both(I("channels_last_in", sh.cl_in ? 1 : 0), I("channels_last_out", sh.cl_out ? 1 : 0)));
    attrs = Both(attrs, Both(S("activation", sh.act),
                             Both(F("activation_alpha", std::string(sh.act) == "SiLU" ? 1 : -0.5f),
                                  F("activation_beta", 0.75f))));
    const std::string what = absl::StrCat(
        sh.n, "x", sh.c, "x", sh.t, " k", sh.k, " -> ", sh.m, " stride ", sh.stride, " dilation ",
        sh.dilation, " pads ", sh.pad_l, ",", sh.pad_r, " group ", sh.group, " ", sh.act,
        sh.sum ? " sum" : "", sh.cl_in ? " cl in" : "", sh.cl_out ? " cl out" : "");
    for (int threads : {1, 2, 3}) {
      SCOPED_TRACE(absl::StrCat(what, " threads ", threads));
      KernelTester t("FusedConv", "dynvm");
      KernelCall call("FusedConv", "dynvm");
      for (const Tensor& in : inputs) {
        t.In(in);
        call.In(in);
      }
      t.Out(DType::kF32).Tol(1e-4, 1e-4).Threads(threads);
      call.Out(DType::kF32);
      attrs(t, call);
      const absl::Status s = t.Compare("dnnl");
      ASSERT_TRUE(s.ok()) << s;
      KernelSpec spec = call.spec();
      spec.backend = "dnnl";
      std::unique_ptr<Kernel> kernel = *KernelRegistry::Global().Create(spec);
      KernelContext ctx(&HeapAllocator::Get(), threads);
      std::vector<const Tensor*> in;
      for (const Tensor& x : inputs) in.push_back(&x);
      Tensor y;
      Tensor* outs[] = {&y};
      ASSERT_TRUE(kernel->Run(ctx, in, outs).ok());
      // Batches the per-image split takes (whole images per range: 2 images at 2 threads, 3 at
      // 3 where the process may use 3 CPUs; else ParallelTasks is 1 at 3 threads, as in the
      // kernel, and oneDNN's team would run it) keep it unless weight-bound (fewer output steps
      // than output channels, at least 32 columns over the batch; from kMinParallelGemm, as the
      // per-image split); the others take the path from kMinParallelWork.
      const int tasks = ctx.ParallelTasks(sh.n, 1);
      const bool per_image = sh.n >= 2 && tasks > 1 && (sh.n % tasks == 0 || sh.n >= 4 * tasks);
      const bool weight_bound = sh.n >= 2 && out < sh.m && sh.n * out >= 32;
      const int64_t macs = sh.n * sh.m * sh.c * sh.k * out;
      const bool takes = per_image ? weight_bound && macs >= (int64_t{1} << 17)  // 128K
                                   : macs >= (int64_t{1} << 22);                 // 4M
      EXPECT_EQ(GetConvCacheStats(ctx.state().get()).conv1d_gemm,
                sh.eligible && threads > 1 && takes ? 1 : 0);
    }
  }
}

// Where the tensors' layouts have no optimized oneDNN implementation (on AVX2: a one-channel
// plain input with a channels-last output, a channels-last input with a plain output), the site
// binds another layout pair with reorders rather than oneDNN's reference convolution ("ref:any",
// 10-100x slower), and a dense one-channel input is read as channels-last (the same bytes):
// same results as the reference kernel, at several widths, channel counts, strides and
// activations, and no reference implementation bound on a CPU with AVX2. A plain input of a few
// channels (an RGB image) with a channels-last output no smaller than it reorders the input,
// never the output.
TEST(DnnlFusedConv, ChannelsLastPortsAvoidOneDnnReferenceImpls) {
  uint32_t seed = 700;
  const bool avx2 = OneDnnHas(dnnl_cpu_isa_avx2);
  struct Shape {
    int64_t n, c, m, h, w, stride;
    bool in, out;
  };
  for (Shape sh :
       {Shape{1, 1, 32, 32, 100, 1, false, true}, Shape{2, 1, 16, 12, 37, 2, false, true},
        Shape{1, 128, 128, 4, 25, 1, true, false}, Shape{1, 64, 48, 8, 61, 2, true, false},
        Shape{1, 32, 64, 16, 50, 1, true, true}, Shape{1, 3, 24, 9, 33, 1, false, true},
        Shape{1, 1, 8, 10, 21, 1, false, false}, Shape{2, 3, 32, 20, 31, 2, false, true},
        Shape{3, 4, 16, 11, 17, 1, false, true}, Shape{1, 3, 64, 40, 40, 2, false, true}}) {
    for (const char* act : {"Relu", "Sigmoid"}) {
      std::vector<Tensor> inputs = {Random({sh.n, sh.c, sh.h, sh.w}, seed++),
                                    Random({sh.m, sh.c, 3, 3}, seed++), Random({sh.m}, seed++)};
      Attrs attrs = Both(
          Both(A<Ints>({{"pads", {1, 1, 1, 1}}, {"strides", {sh.stride, sh.stride}}}),
               I("constant_weights", 1)),
          Both(S("activation", act),
               Both(I("channels_last_in", sh.in ? 1 : 0), I("channels_last_out", sh.out ? 1 : 0))));
      const std::string what =
          absl::StrCat(sh.n, "x", sh.c, "x", sh.h, "x", sh.w, " -> ", sh.m, " stride ", sh.stride,
                       " in ", sh.in, " out ", sh.out, " ", act);
      Check({what, "FusedConv", "dynvm", inputs, attrs});
      KernelTester t("FusedConv", "dynvm");
      KernelCall call("FusedConv", "dynvm");
      for (const Tensor& in : inputs) call.In(in);
      call.Out(DType::kF32);
      attrs(t, call);
      KernelSpec spec = call.spec();
      spec.backend = "dnnl";
      std::unique_ptr<Kernel> k = *KernelRegistry::Global().Create(spec);
      KernelContext ctx(&HeapAllocator::Get(), 1);
      std::vector<const Tensor*> in;
      for (const Tensor& x : inputs) in.push_back(&x);
      Tensor y;
      Tensor* out[] = {&y};
      ASSERT_TRUE(k->Run(ctx, in, out).ok()) << what;
      if (avx2) {
        const ConvCacheStats st = GetConvCacheStats(ctx.state().get());
        EXPECT_EQ(st.reference_impls, 0) << what;
        const int64_t oh = (sh.h - 1) / sh.stride + 1, ow = (sh.w - 1) / sh.stride + 1;
        if (!sh.in && sh.out && sh.c > 1 && sh.c * sh.h * sh.w <= sh.m * oh * ow) {
          EXPECT_EQ(st.dst_reorders, 0) << what;
        }
      }
    }
  }
}

// A FusedConv with a depthwise stage (a 1x1 conv, then a 3x3 depthwise conv, pad 1, stride 1 or
// 2; compiler/conv_fusion.h) against the reference kernel: random batch, channels and sizes,
// each pair of activations, with and without the 1x1's bias, channels-last at both ends (oneDNN's
// depthwise post-op where it has an optimized one, else two primitives) or a plain end (two
// primitives), 1 and 2 threads. Served by oneDNN every run; on AVX2 the post-op binds for at
// least one of the channels-last cases, and never with oneDNN's reference implementation.
TEST(DnnlFusedConv, PointwiseThenDepthwiseMatchesReference) {
  std::mt19937 rng(900);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const bool avx2 = OneDnnHas(dnnl_cpu_isa_avx2);
  const char* acts[] = {"", "Relu", "Clip", "HardSwish"};
  int fused = 0, cases = 0, big_cases = 0;
  uint32_t seed = 901;
  for (const char* act1 : acts) {
    for (const char* act2 : {"", "Relu", "Clip"}) {
      for (int variant = 0; variant < 5; ++variant) {
        // Variant 4: a size the kernel fuses (an expanded tensor of at least 2^20 elements) and
        // oneDNN has an optimized post-op for, with and without the 1x1's bias.
        const bool big = variant == 4;
        // Sanitizer builds run the reference convolution about 10x slower: two big cases there
        // (one with the 1x1's bias, one without); the Release ctest runs all twelve.
        if (big && kSanitized && big_cases >= 2) continue;
        const int64_t n = pick(big ? 2 : 1, 3), c = big ? pick(2, 4) * 8 : pick(1, 24),
                      m = big ? pick(6, 8) * 24 : pick(1, 6) * 8,
                      h = big ? pick(64, 72) : pick(1, 17), w = big ? pick(64, 72) : pick(1, 17),
                      stride = pick(1, 2);
        const bool in_cl = variant != 2, out_cl = variant != 3,
                   bias = big ? ++big_cases % 2 == 0 : pick(0, 3) != 0;
        const int threads = static_cast<int>(pick(1, 2));
        std::vector<Tensor> inputs = {Random({n, c, h, w}, seed++), Random({m, c, 1, 1}, seed++),
                                      Random({m}, seed++),          Tensor(),
                                      Random({m, 1, 3, 3}, seed++), Random({m}, seed++)};
        const std::string what = absl::StrCat(n, "x", c, "x", h, "x", w, " -> ", m, " stride ",
                                              stride, " acts '", act1, "' '", act2, "' bias ", bias,
                                              " in ", in_cl, " out ", out_cl, " threads ", threads);
        SCOPED_TRACE(what);
        KernelTester t("FusedConv", "dynvm");
        KernelCall call("FusedConv", "dynvm");
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (i == 3 || (i == 2 && !bias)) {
            t.Absent();
            call.Absent();
          } else {
            t.In(inputs[i]);
            call.In(inputs[i]);
          }
        }
        t.Out(DType::kF32).Tol(1e-4, 1e-4).Threads(threads);
        call.Out(DType::kF32);
        Attrs attrs = Both(
            Both(I("constant_weights", 1), I("dw_stride", stride)),
            Both(I("channels_last_in", in_cl ? 1 : 0), I("channels_last_out", out_cl ? 1 : 0)));
        attrs =
            Both(attrs,
                 Both(Both(S("activation", act1), S("dw_activation", act2)),
                      Both(Both(F("activation_alpha", 0.0f), F("activation_beta", 6.0f)),
                           Both(F("dw_activation_alpha", -0.25f), F("dw_activation_beta", 0.5f)))));
        attrs(t, call);
        absl::Status s = t.Compare("dnnl");
        ASSERT_TRUE(s.ok()) << s;
        KernelSpec spec = call.spec();
        spec.backend = "dnnl";
        std::unique_ptr<Kernel> k = *KernelRegistry::Global().Create(spec);
        const auto* dk = dynamic_cast<const DnnlKernel*>(k.get());
        ASSERT_NE(dk, nullptr);
        KernelContext ctx(&HeapAllocator::Get(), threads);
        std::vector<const Tensor*> in;
        for (size_t i = 0; i < inputs.size(); ++i) {
          in.push_back(i == 3 || (i == 2 && !bias) ? nullptr : &inputs[i]);
        }
        Tensor y;
        Tensor* out[] = {&y};
        ASSERT_TRUE(k->Run(ctx, in, out).ok());
        EXPECT_EQ(dk->fallback_runs(), 0);
        const ConvCacheStats st = GetConvCacheStats(ctx.state().get());
        EXPECT_EQ(st.dw_fused + st.dw_separate, 1);
        if (!in_cl || !out_cl) {
          EXPECT_EQ(st.dw_fused, 0);
        }
        if (avx2) {
          EXPECT_EQ(st.reference_impls, 0);
        }
        fused += st.dw_fused;
        ++cases;
      }
    }
  }
  if (avx2) {
    EXPECT_GT(fused, 0) << cases;
  }
}

// A batch of images on more than one thread runs one primitive per image on the VM's pool, each
// range claiming the next image (ConvKernel::ExecutePerImage): against the reference kernel at
// 2 and 3 threads (every image computed once, whatever ranges claim them), plain and
// channels-last layouts, a residual, groups, strides, weights reordered per run or packed once;
// batches above kMinParallelWork split only where the images divide evenly over the ranges or
// number at least 4 per range; below kMinParallelGemm multiply-adds and at one thread, no split.
TEST(DnnlFusedConv, BatchSplitsByImageOnTheVmThreads) {
  struct Shape {
    int64_t n, c, m, h, w, k, stride, group;
    bool cl, sum, constant;
    int threads;
    bool split;  // expected to run per image
  };
  const Shape shapes[] = {
      {2, 16, 16, 24, 24, 3, 1, 1, false, false, false, 2, true},  // 2.6M multiply-adds
      {3, 16, 16, 24, 24, 3, 1, 1, false, false, true, 2, true},   // odd batch below 4M
      {5, 8, 16, 20, 18, 3, 2, 1, true, true, true, 2, true},      // residual, channels-last
      {7, 8, 16, 20, 18, 3, 2, 1, true, true, false, 3, true},     // 3 ranges
      {7, 8, 16, 20, 18, 3, 2, 1, true, true, false, 2, true},     // 7 over 2 ranges
      {6, 16, 32, 12, 12, 3, 1, 4, true, false, true, 3, true},    // grouped
      {6, 16, 32, 12, 12, 3, 1, 4, true, false, true, 2, true},
      {3, 32, 32, 32, 32, 3, 1, 1, false, false, true, 2, false},   // 28M, 3 over 2 ranges
      {4, 32, 32, 32, 32, 3, 1, 1, false, false, true, 2, true},    // 38M, even
      {2, 1, 4, 4, 4, 3, 1, 1, false, false, false, 2, false},      // below kMinParallelGemm
      {4, 16, 16, 24, 24, 3, 1, 1, false, true, false, 1, false}};  // one thread
  uint32_t seed = 3200;
  for (const Shape& sh : shapes) {
    const int64_t oh = (sh.h + 2 - sh.k) / sh.stride + 1, ow = (sh.w + 2 - sh.k) / sh.stride + 1;
    std::vector<Tensor> inputs = {Random({sh.n, sh.c, sh.h, sh.w}, seed++),
                                  Random({sh.m, sh.c / sh.group, sh.k, sh.k}, seed++),
                                  Random({sh.m}, seed++)};
    if (sh.sum) inputs.push_back(Random({sh.n, sh.m, oh, ow}, seed++));
    const std::string what =
        absl::StrCat(sh.n, "x", sh.c, "x", sh.h, "x", sh.w, " -> ", sh.m, " k", sh.k, " stride ",
                     sh.stride, " group ", sh.group, " cl ", sh.cl, " sum ", sh.sum, " constant ",
                     sh.constant, " threads ", sh.threads);
    SCOPED_TRACE(what);
    const Attrs attrs = Both(
        Both(Both(A<Ints>({{"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{sh.stride, sh.stride}}}),
                  I("group", sh.group)),
             Both(I("constant_weights", sh.constant ? 1 : 0), S("activation", "Relu"))),
        Both(Both(I("channels_last_in", sh.cl ? 1 : 0), I("channels_last_out", sh.cl ? 1 : 0)),
             I("channels_last_sum", sh.cl && sh.sum ? 1 : 0)));
    KernelTester t("FusedConv", "dynvm");
    KernelCall call("FusedConv", "dynvm");
    for (const Tensor& in : inputs) {
      t.In(in);
      call.In(in);
    }
    t.Out(DType::kF32).Tol(1e-4, 1e-4).Threads(sh.threads);
    call.Out(DType::kF32);
    attrs(t, call);
    absl::Status s = t.Compare("dnnl");
    ASSERT_TRUE(s.ok()) << s;
    KernelSpec spec = call.spec();
    spec.backend = "dnnl";
    std::unique_ptr<Kernel> k = *KernelRegistry::Global().Create(spec);
    const auto* dk = dynamic_cast<const DnnlKernel*>(k.get());
    ASSERT_NE(dk, nullptr);
    KernelContext ctx(&HeapAllocator::Get(), sh.threads);
    std::vector<const Tensor*> in;
    for (const Tensor& x : inputs) in.push_back(&x);
    for (int run = 0; run < 2; ++run) {
      Tensor y;
      Tensor* out[] = {&y};
      ASSERT_TRUE(k->Run(ctx, in, out).ok());
    }
    EXPECT_EQ(dk->fallback_runs(), 0);
    // 3 threads split only where the process may use 3 CPUs (MaxThreads()).
    const bool split = sh.split && ctx.ParallelTasks(sh.n, 1) == sh.threads;
    EXPECT_EQ(GetConvCacheStats(ctx.state().get()).per_image, split ? 1 : 0);
  }
}

// One image on more than one thread splits by blocks of output rows of the first spatial dim,
// each block a primitive bound for its input rows (halo included) with the image's padding only
// at its edges, the blocks claimed by the VM's threads (ConvKernel::ExecuteRowBlocks): against
// the reference kernel at 2 and 3 threads in 2 and 3 spatial dims, plain and channels-last
// layouts, one input channel, strides, dilations, asymmetric pads, groups, a residual, weights
// packed once or reordered per run; below 2 x kMinConvTaskMacs multiply-adds, in 1D and at one
// thread, no split.
TEST(DnnlFusedConv, OneImageSplitsByRowsOnTheVmThreads) {
  struct Shape {
    std::vector<int64_t> x, w;  // [1, C, spatial...], [M, C / group, kernel...]
    std::vector<int64_t> strides, dilations, pads;
    int64_t group;
    bool cl, sum, constant;
    int threads;
    bool split;
  };
  constexpr bool T = true, F = false;
  // clang-format off
  const Shape shapes[] = {
      {{1, 16, 24, 24}, {16, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, F, F, T, 2, T},
      {{1, 16, 25, 23}, {24, 16, 3, 3}, {2, 1}, {1, 2}, {0, 2, 2, 1}, 1, T, T, F, 2, T},
      // openWakeWord's 3x1
      {{1, 24, 74, 32}, {24, 24, 3, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 1, T, F, T, 3, T},
      // one input channel (an STFT front end written as a 2D conv); a 1D conv does not split
      {{1, 1, 40, 100}, {64, 1, 8, 16}, {4, 2}, {1, 1}, {0, 0, 0, 0}, 1, F, F, T, 2, T},
      {{1, 1, 40, 100}, {64, 1, 8, 16}, {4, 2}, {1, 1}, {0, 0, 0, 0}, 1, T, T, F, 2, T},
      {{1, 1, 4000}, {64, 1, 128}, {40}, {1}, {0, 0}, 1, F, F, T, 2, F},
      // grouped; 3D
      {{1, 32, 40, 20}, {32, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 4, T, F, T, 2, T},
      {{1, 4, 9, 8, 8}, {8, 4, 3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1, 1, 1, 1}, 1, F, T,
       T, 2, T},
      // one thread; 9K multiply-adds
      {{1, 16, 24, 24}, {16, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, T, T, T, 1, F},
      {{1, 4, 8, 8}, {4, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, F, F, T, 2, F}};
  // clang-format on
  uint32_t seed = 3300;
  for (const Shape& sh : shapes) {
    const size_t k = sh.x.size() - 2;
    std::vector<int64_t> y = {1, sh.w[0]};
    for (size_t i = 0; i < k; ++i) {
      const int64_t span = (sh.w[i + 2] - 1) * sh.dilations[i] + 1;
      y.push_back((sh.x[i + 2] + sh.pads[i] + sh.pads[k + i] - span) / sh.strides[i] + 1);
    }
    std::vector<Tensor> inputs = {Random(sh.x, seed++), Random(sh.w, seed++),
                                  Random({sh.w[0]}, seed++)};
    if (sh.sum) inputs.push_back(Random(y, seed++));
    const std::string what = absl::StrCat(absl::StrJoin(sh.x, "x"), " * ", absl::StrJoin(sh.w, "x"),
                                          " group ", sh.group, " cl ", sh.cl, " sum ", sh.sum,
                                          " constant ", sh.constant, " threads ", sh.threads);
    SCOPED_TRACE(what);
    const Attrs attrs = Both(
        Both(
            Both(A<Ints>({{"pads", sh.pads}, {"strides", sh.strides}, {"dilations", sh.dilations}}),
                 I("group", sh.group)),
            Both(I("constant_weights", sh.constant ? 1 : 0), S("activation", "Relu"))),
        Both(Both(I("channels_last_in", sh.cl ? 1 : 0), I("channels_last_out", sh.cl ? 1 : 0)),
             I("channels_last_sum", sh.cl && sh.sum ? 1 : 0)));
    KernelTester t("FusedConv", "dynvm");
    KernelCall call("FusedConv", "dynvm");
    for (const Tensor& in : inputs) {
      t.In(in);
      call.In(in);
    }
    t.Out(DType::kF32).Tol(1e-4, 1e-4).Threads(sh.threads);
    call.Out(DType::kF32);
    attrs(t, call);
    absl::Status s = t.Compare("dnnl");
    ASSERT_TRUE(s.ok()) << s;
    KernelSpec spec = call.spec();
    spec.backend = "dnnl";
    std::unique_ptr<Kernel> kernel = *KernelRegistry::Global().Create(spec);
    const auto* dk = dynamic_cast<const DnnlKernel*>(kernel.get());
    ASSERT_NE(dk, nullptr);
    KernelContext ctx(&HeapAllocator::Get(), sh.threads);
    std::vector<const Tensor*> in;
    for (const Tensor& x : inputs) in.push_back(&x);
    for (int run = 0; run < 2; ++run) {
      Tensor out;
      Tensor* outs[] = {&out};
      ASSERT_TRUE(kernel->Run(ctx, in, outs).ok());
    }
    EXPECT_EQ(dk->fallback_runs(), 0);
    // (3 threads where the process may use 2 CPUs: the blocks run on the caller.)
    const int blocks = GetConvCacheStats(ctx.state().get()).row_blocks;
    if (sh.split) {
      EXPECT_GE(blocks, 2);
    } else {
      EXPECT_EQ(blocks, 0);
    }
  }
}

// 64 widths through one site: the cache stays at its capacity, evicts the oldest, and a shape
// seen again after warm-up binds nothing.
TEST(DnnlConv, WidthChurnIsBounded) {
  KernelCall call("Conv");
  Tensor w = Random({8, 4, 3, 3}, 3);
  call.In(Random({1, 4, 8, 8}, 1)).In(w).Out(DType::kF32).Attr("pads", Ints{1, 1, 1, 1});
  KernelSpec spec = call.spec();
  spec.backend = "dnnl";
  std::unique_ptr<Kernel> k = *KernelRegistry::Global().Create(spec);
  KernelContext ctx(&HeapAllocator::Get(), 1);
  auto run = [&](int64_t width) {
    Tensor x = Random({1, 4, 8, width}, static_cast<uint32_t>(width));
    Tensor y;
    const Tensor* in[] = {&x, &w};
    Tensor* out[] = {&y};
    absl::Status s = k->Run(ctx, in, out);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(y.dim(3), width);
  };
  const int cap = ConvCacheCapacity();
  for (int64_t width = 100; width < 164; ++width) run(width);
  ConvCacheStats st = GetConvCacheStats(ctx.state().get());
  EXPECT_EQ(st.entries, cap);
  EXPECT_EQ(st.binds, 64);
  EXPECT_EQ(st.evictions, 64 - cap);
  run(163);            // the most recent: cached
  run(163 - cap + 1);  // the oldest kept: cached
  st = GetConvCacheStats(ctx.state().get());
  EXPECT_EQ(st.binds, 64);
  run(100);  // evicted long ago: binds again
  EXPECT_EQ(GetConvCacheStats(ctx.state().get()).binds, 65);
  EXPECT_EQ(dynamic_cast<const DnnlKernel*>(k.get())->fallback_runs(), 0);
}

}  // namespace
}  // namespace dynvm::onednn
