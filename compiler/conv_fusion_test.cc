// Conv fusion: every fold and post-op, fused (optimize on) against unfused (optimize off, each
// node its own kernel), on the oneDNN and the reference backends; the rewrite fires on the
// shapes and opsets torch exports (Clip with attributes and with inputs, Pad with attributes
// and with inputs, 1D/2D/3D), and compile-time shape errors name the node.
#include "compiler/conv_fusion.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "compiler/compiler_testing.h"
#include "compiler/passes.h"
#include "compiler/rewrite/rewrite.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler {
namespace {

// What a graph body adds after the Conv: given the builder, x and the conv output.
struct Pattern {
  std::string what;
  int spatial = 2;
  bool pad = false;  // a Pad node before the Conv
  int pad_opset = 11;
  bool bn = false;
  bool residual = false;
  std::string act;  // "", Relu, LeakyRelu, Clip6, Clip11, Sigmoid, HardSwish, SiLU, Tanh
};

// Builds X -> [Pad] -> Conv -> [BN] -> [Add residual] -> [act] -> Y.
void Build(Module& m, const Pattern& p) {
  GraphBuilder b(m.AddFunction("main"));
  const int64_t c = 6, oc = 8;
  std::vector<DimSpec> xs = {int64_t{2}, c};
  std::vector<int64_t> ws = {oc, c}, ys = {2, oc};
  for (int i = 0; i < p.spatial; ++i) {
    xs.push_back(int64_t{7 + i});
    ws.push_back(3);
    ys.push_back(7 + i);
  }
  Value* x = b.Input("x", DType::kF32, xs);
  Value* in = x;
  Attrs conv;
  std::vector<int64_t> pads(2 * p.spatial, 1);
  if (p.pad) {
    std::vector<int64_t> pp(2 * (p.spatial + 2), 0);
    for (int i = 0; i < p.spatial; ++i) pp[2 + i] = pp[p.spatial + 4 + i] = 1;
    if (p.pad_opset < 11) {
      in = b.Op("Pad", {x}, {{"pads", AttrInts(pp)}});
    } else {
      in = b.Op("Pad", {x, b.VectorI64(pp)});
    }
  } else {
    conv["pads"] = AttrInts(pads);
  }
  Value* w = b.Constant(RandomF32(ws, 11), "w", true);
  Value* bias = b.Constant(RandomF32({oc}, 12), "b", true);
  Value* y = b.Op("Conv", {in, w, bias}, conv);
  if (p.bn) {
    y = b.Op("BatchNormalization",
             {y, b.Constant(RandomF32({oc}, 13, 0.5f, 1.5f)), b.Constant(RandomF32({oc}, 14)),
              b.Constant(RandomF32({oc}, 15)), b.Constant(RandomF32({oc}, 16, 0.2f, 2.0f))},
             {{"epsilon", AttrFloat(1e-3f)}});
  }
  if (p.residual) {
    std::vector<DimSpec> rs(ys.begin(), ys.end());
    y = b.Op("Add", {b.Input("r", DType::kF32, rs), y});
  }
  if (p.act == "Relu" || p.act == "Sigmoid" || p.act == "HardSwish" || p.act == "Tanh") {
    y = b.Op(p.act, {y});
  } else if (p.act == "LeakyRelu") {
    y = b.Op("LeakyRelu", {y}, {{"alpha", AttrFloat(0.2f)}});
  } else if (p.act == "Clip6") {
    y = b.Op("Clip", {y}, {{"min", AttrFloat(0.0f)}, {"max", AttrFloat(6.0f)}});
  } else if (p.act == "Clip11") {
    y = b.Op("Clip", {y, b.ScalarF32(-0.5f), b.ScalarF32(0.5f)});
  } else if (p.act == "SiLU") {
    y = b.Op("Mul", {y, b.Op("Sigmoid", {y})});
  }
  b.Output("y", y);
}

struct Run {
  std::vector<std::string> kernels;
  Tensor y;
};

Run CompileAndRun(const Pattern& p, bool optimize, const std::string& backend) {
  Module m;
  Build(m, p);
  CompileOptions options;
  options.optimize = optimize;
  absl::StatusOr<CompileResult> r = Compile(m, options);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  Run out;
  for (const KernelReport& k : r->kernels) out.kernels.push_back(k.op);
  LoadOptions load;
  load.backends = BackendPolicy{{backend, "reference"}};
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(
      {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()}, load);
  EXPECT_TRUE(exe.ok()) << exe.status();
  if (!exe.ok()) return {};
  std::unique_ptr<VirtualMachine> vm = *VirtualMachine::Create(*exe);
  std::vector<int64_t> xd = {2, 6}, yd = {2, 8};
  for (int i = 0; i < p.spatial; ++i) {
    xd.push_back(7 + i);
    yd.push_back(7 + i);
  }
  EXPECT_TRUE(vm->SetInput("x", RandomF32(xd, 1, -2, 2)).ok());
  if (p.residual) {
    EXPECT_TRUE(vm->SetInput("r", RandomF32(yd, 2, -2, 2)).ok());
  }
  absl::Status s = vm->Run();
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return out;
  out.y = (*vm->GetOutputs())[0];
  return out;
}

void ExpectFusedMatchesUnfused(const Pattern& p) {
  SCOPED_TRACE(p.what);
  for (const char* backend : {"dnnl", "reference"}) {
    SCOPED_TRACE(backend);
    Run unfused = CompileAndRun(p, false, backend);
    Run fused = CompileAndRun(p, true, backend);
    ASSERT_TRUE(fused.y.defined() && unfused.y.defined());
    // One kernel: the FusedConv took over every node of the pattern.
    ASSERT_EQ(fused.kernels.size(), 1u) << absl::StrJoin(fused.kernels, ",");
    EXPECT_EQ(fused.kernels[0], "dynvm::FusedConv");
    EXPECT_GT(unfused.kernels.size(), p.bn || p.residual || !p.act.empty() || p.pad ? 1u : 0u);
    ASSERT_EQ(fused.y.dims(), unfused.y.dims());
    std::vector<double> a = testing::ToDoubles(fused.y), b = testing::ToDoubles(unfused.y);
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_NEAR(a[i], b[i], 1e-4 + 1e-4 * std::abs(b[i])) << "element " << i;
    }
  }
}

TEST(ConvFusion, EveryFoldAndPostOpMatchesUnfused) {
  std::vector<Pattern> patterns;
  for (const char* act :
       {"", "Relu", "LeakyRelu", "Clip6", "Clip11", "Sigmoid", "HardSwish", "SiLU", "Tanh"}) {
    patterns.push_back({std::string("act ") + act, 2, false, 11, false, false, act});
  }
  patterns.push_back({"bn", 2, false, 11, true, false, ""});
  patterns.push_back({"bn relu", 2, false, 11, true, false, "Relu"});
  patterns.push_back({"bn residual relu", 2, false, 11, true, true, "Relu"});
  patterns.push_back({"residual", 2, false, 11, false, true, ""});
  patterns.push_back({"pad opset 11", 2, true, 11, false, false, ""});
  patterns.push_back({"pad opset 2 bn clip", 2, true, 2, true, false, "Clip6"});
  patterns.push_back({"1d bn silu", 1, false, 11, true, false, "SiLU"});
  patterns.push_back({"3d pad bn residual hardswish", 3, true, 11, true, true, "HardSwish"});
  for (const Pattern& p : patterns) ExpectFusedMatchesUnfused(p);
}

// A ResNet downsampling block: two Conv+BN branches meet in an Add, then Relu. One branch takes
// the Add and the Relu as post-ops, the other folds its BatchNormalization; two FusedConvs.
TEST(ConvFusion, TwoConvBranchesMeetingInAnAdd) {
  for (const char* backend : {"dnnl", "reference"}) {
    SCOPED_TRACE(backend);
    std::vector<Tensor> outs;
    std::vector<std::vector<std::string>> kernels;
    for (bool optimize : {false, true}) {
      Module m;
      GraphBuilder b(m.AddFunction("main"));
      Value* x = b.Input("x", DType::kF32, {int64_t{1}, int64_t{4}, int64_t{8}, int64_t{8}});
      auto branch = [&](int64_t k, uint32_t seed) {
        Attrs a = {{"strides", AttrInts({2, 2})}};
        if (k == 3) a["pads"] = AttrInts({1, 1, 1, 1});
        Value* y = b.Op("Conv", {x, b.Constant(RandomF32({6, 4, k, k}, seed), "", true)}, a);
        return b.Op("BatchNormalization",
                    {y, b.Constant(RandomF32({6}, seed + 1, 0.5f, 1.5f)),
                     b.Constant(RandomF32({6}, seed + 2)), b.Constant(RandomF32({6}, seed + 3)),
                     b.Constant(RandomF32({6}, seed + 4, 0.5f, 1.5f))});
      };
      Value* main = branch(3, 10);
      Value* down = branch(1, 20);
      b.Output("y", b.Op("Relu", {b.Op("Add", {main, down})}));
      CompileOptions options;
      options.optimize = optimize;
      absl::StatusOr<CompileResult> r = Compile(m, options);
      ASSERT_TRUE(r.ok()) << r.status();
      kernels.emplace_back();
      for (const KernelReport& k : r->kernels) kernels.back().push_back(k.op);
      LoadOptions load;
      load.backends = BackendPolicy{{backend, "reference"}};
      std::shared_ptr<const Executable> exe = *Executable::LoadFromBytes(
          {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()}, load);
      std::unique_ptr<VirtualMachine> vm = *VirtualMachine::Create(exe);
      ASSERT_TRUE(vm->SetInput("x", RandomF32({1, 4, 8, 8}, 5)).ok());
      ASSERT_TRUE(vm->Run().ok());
      outs.push_back((*vm->GetOutputs())[0]);
    }
    // Kernel-table entries (one per distinct attribute set): FusedConvs only.
    EXPECT_EQ(kernels[1], std::vector<std::string>(kernels[1].size(), "dynvm::FusedConv"))
        << absl::StrJoin(kernels[1], ",");
    EXPECT_FALSE(kernels[1].empty());
    std::vector<double> a = testing::ToDoubles(outs[1]), want = testing::ToDoubles(outs[0]);
    ASSERT_EQ(a.size(), want.size());
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], want[i], 1e-4 + 1e-4 * std::abs(want[i]));
  }
}

// A chain of FusedConvs (a residual block and a conv after it, 1D/2D/3D, channel counts not
// multiples of 16): the values between them stay channels-last; outputs equal the unfused
// graph's on both backends (the reference FusedConv converts the layout itself).
TEST(ConvFusion, ChannelsLastBetweenFusedConvs) {
  for (int spatial : {1, 2, 3}) {
    SCOPED_TRACE(spatial);
    auto build = [&](Module& m) {
      GraphBuilder b(m.AddFunction("main"));
      std::vector<DimSpec> xs = {int64_t{2}, int64_t{5}};
      std::vector<int64_t> w1 = {12, 5}, w2 = {12, 12}, w3 = {7, 12};
      Attrs a = {{"pads", AttrInts(std::vector<int64_t>(2 * spatial, 1))}};
      for (int i = 0; i < spatial; ++i) {
        xs.push_back(int64_t{6 + i});
        for (auto* w : {&w1, &w2, &w3}) w->push_back(3);
      }
      Value* x = b.Input("x", DType::kF32, xs);
      Value* y1 = b.Op("Relu", {b.Op("Conv", {x, b.Constant(RandomF32(w1, 1), "", true)}, a)});
      Value* y2 = b.Op("Conv", {y1, b.Constant(RandomF32(w2, 2), "", true)}, a);
      Value* y3 = b.Op("Relu", {b.Op("Add", {y2, y1})});
      b.Output("y", b.Op("Conv", {y3, b.Constant(RandomF32(w3, 3), "", true)}, a));
    };
    {
      Module m;
      build(m);
      ASSERT_TRUE(InferShapes(m).ok());
      absl::StatusOr<ConvFusionCounts> counts = FuseConvolutions(m);
      ASSERT_TRUE(counts.ok()) << counts.status();
      EXPECT_EQ(counts->convs, 3);
      EXPECT_EQ(counts->blocked, 2);  // y1 (read as X and as the residual) and y3
    }
    for (const char* backend : {"dnnl", "reference"}) {
      SCOPED_TRACE(backend);
      std::vector<Tensor> outs;
      for (bool optimize : {false, true}) {
        Module m;
        build(m);
        CompileOptions options;
        options.optimize = optimize;
        absl::StatusOr<CompileResult> r = Compile(m, options);
        ASSERT_TRUE(r.ok()) << r.status();
        if (optimize) {
          // The report shows what was folded and each conv's layouts (where reorders run).
          const std::string report = r->ReportText();
          EXPECT_THAT(report, ::testing::HasSubstr("conv_fusion convs: 3\n"));
          EXPECT_THAT(report, ::testing::HasSubstr("conv_fusion channels_last_values: 2\n"));
          EXPECT_THAT(report, ::testing::HasSubstr("; layout X plain, Y channels-last\n"));
          EXPECT_THAT(report, ::testing::HasSubstr("; layout X channels-last, Y plain\n"));
          EXPECT_THAT(report,
                      ::testing::HasSubstr(
                          "; layout X channels-last, Y channels-last, residual channels-last"));
        } else {
          EXPECT_THAT(r->ReportText(), ::testing::Not(::testing::HasSubstr("layout")));
        }
        LoadOptions load;
        load.backends = BackendPolicy{{backend, "reference"}};
        std::shared_ptr<const Executable> exe = *Executable::LoadFromBytes(
            {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()}, load);
        std::unique_ptr<VirtualMachine> vm = *VirtualMachine::Create(exe);
        std::vector<int64_t> xd = {2, 5};
        for (int i = 0; i < spatial; ++i) xd.push_back(6 + i);
        ASSERT_TRUE(vm->SetInput("x", RandomF32(xd, 9)).ok());
        absl::Status st = vm->Run();
        ASSERT_TRUE(st.ok()) << st;
        outs.push_back((*vm->GetOutputs())[0]);
      }
      std::vector<double> got = testing::ToDoubles(outs[1]), want = testing::ToDoubles(outs[0]);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-4 + 1e-4 * std::abs(want[i])) << "element " << i;
      }
    }
  }
}

// Pools between convs keep the layout too: conv -> MaxPool -> conv -> AveragePool ->
// GlobalAveragePool, 1D/2D/3D.
TEST(ConvFusion, ChannelsLastThroughPools) {
  for (int spatial : {1, 2, 3}) {
    SCOPED_TRACE(spatial);
    auto build = [&](Module& m) {
      GraphBuilder b(m.AddFunction("main"));
      std::vector<DimSpec> xs = {int64_t{2}, int64_t{3}};
      std::vector<int64_t> w1 = {10, 3}, w2 = {6, 10}, k2(spatial, 2), k3(spatial, 3);
      for (int i = 0; i < spatial; ++i) {
        xs.push_back(int64_t{9 + i});
        w1.push_back(3);
        w2.push_back(1);
      }
      Value* x = b.Input("x", DType::kF32, xs);
      Value* y = b.Op("Conv", {x, b.Constant(RandomF32(w1, 1), "", true)});
      y = b.Op("MaxPool", {y}, {{"kernel_shape", AttrInts(k2)}});
      y = b.Op("Conv", {y, b.Constant(RandomF32(w2, 2), "", true)});
      y = b.Op("AveragePool", {y},
               {{"kernel_shape", AttrInts(k3)},
                {"pads", AttrInts(std::vector<int64_t>(2 * spatial, 1))},
                {"strides", AttrInts(k2)}});
      b.Output("y", b.Op("GlobalAveragePool", {y}));
    };
    {
      Module m;
      build(m);
      ASSERT_TRUE(InferShapes(m).ok());
      absl::StatusOr<ConvFusionCounts> counts = FuseConvolutions(m);
      ASSERT_TRUE(counts.ok()) << counts.status();
      EXPECT_EQ(counts->blocked, 4);  // every value but the input and the output
    }
    for (const char* backend : {"dnnl", "reference"}) {
      SCOPED_TRACE(backend);
      std::vector<Tensor> outs;
      for (bool optimize : {false, true}) {
        Module m;
        build(m);
        CompileOptions options;
        options.optimize = optimize;
        absl::StatusOr<CompileResult> r = Compile(m, options);
        ASSERT_TRUE(r.ok()) << r.status();
        LoadOptions load;
        load.backends = BackendPolicy{{backend, "reference"}};
        std::shared_ptr<const Executable> exe = *Executable::LoadFromBytes(
            {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()}, load);
        std::unique_ptr<VirtualMachine> vm = *VirtualMachine::Create(exe);
        std::vector<int64_t> xd = {2, 3};
        for (int i = 0; i < spatial; ++i) xd.push_back(9 + i);
        ASSERT_TRUE(vm->SetInput("x", RandomF32(xd, 9)).ok());
        absl::Status st = vm->Run();
        ASSERT_TRUE(st.ok()) << st;
        outs.push_back((*vm->GetOutputs())[0]);
      }
      std::vector<double> got = testing::ToDoubles(outs[1]), want = testing::ToDoubles(outs[0]);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-4 + 1e-4 * std::abs(want[i])) << "element " << i;
      }
    }
  }
}

// The end of a chain: a conv's output read only by a windowed pool whose own output goes
// elsewhere (here Transpose, as a CRNN's conv stack feeds its LSTM) stays channels-last; the
// pool takes it channels-last and writes its output plain. 1D/2D/3D, MaxPool and AveragePool,
// widths that are not multiples of the vector length; equal to the unfused graph on both
// backends.
TEST(ConvFusion, ChannelsLastIntoAPoolWithAPlainOutput) {
  for (int spatial : {1, 2, 3}) {
    for (const char* pool : {"MaxPool", "AveragePool"}) {
      SCOPED_TRACE(absl::StrCat(spatial, " ", pool));
      auto build = [&](Module& m) {
        GraphBuilder b(m.AddFunction("main"));
        std::vector<DimSpec> xs = {int64_t{2}, int64_t{3}};
        std::vector<int64_t> w1 = {12, 3}, k2(spatial, 2), perm = {0};
        for (int i = 0; i < spatial; ++i) {
          xs.push_back(int64_t{7 + 2 * i});
          w1.push_back(3);
          perm.push_back(i + 2);
        }
        perm.push_back(1);
        Value* x = b.Input("x", DType::kF32, xs);
        Value* y = b.Op("Conv", {x, b.Constant(RandomF32(w1, 1), "", true)},
                        {{"pads", AttrInts(std::vector<int64_t>(2 * spatial, 1))}});
        y = b.Op("Relu", {y});
        y = b.Op(pool, {y}, {{"kernel_shape", AttrInts(k2)}, {"strides", AttrInts(k2)}});
        b.Output("y", b.Op("Transpose", {y}, {{"perm", AttrInts(perm)}}));
      };
      {
        Module m;
        build(m);
        ASSERT_TRUE(InferShapes(m).ok());
        absl::StatusOr<ConvFusionCounts> counts = FuseConvolutions(m);
        ASSERT_TRUE(counts.ok()) << counts.status();
        EXPECT_EQ(counts->blocked, 1);  // the conv's output
      }
      for (const char* backend : {"dnnl", "reference"}) {
        SCOPED_TRACE(backend);
        std::vector<Tensor> outs;
        for (bool optimize : {false, true}) {
          Module m;
          build(m);
          CompileOptions options;
          options.optimize = optimize;
          absl::StatusOr<CompileResult> r = Compile(m, options);
          ASSERT_TRUE(r.ok()) << r.status();
          LoadOptions load;
          load.backends = BackendPolicy{{backend, "reference"}};
          std::shared_ptr<const Executable> exe = *Executable::LoadFromBytes(
              {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()}, load);
          std::unique_ptr<VirtualMachine> vm = *VirtualMachine::Create(exe);
          std::vector<int64_t> xd = {2, 3};
          for (int i = 0; i < spatial; ++i) xd.push_back(7 + 2 * i);
          ASSERT_TRUE(vm->SetInput("x", RandomF32(xd, 9)).ok());
          absl::Status st = vm->Run();
          ASSERT_TRUE(st.ok()) << st;
          outs.push_back((*vm->GetOutputs())[0]);
        }
        ASSERT_EQ(outs[1].dims(), outs[0].dims());
        std::vector<double> got = testing::ToDoubles(outs[1]), want = testing::ToDoubles(outs[0]);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-4 + 1e-4 * std::abs(want[i])) << "element " << i;
        }
      }
    }
  }
}

// An inverted residual block as torch exports mobilenet_v2's: conv 3x3 -> [1x1 expansion + BN +
// act1] -> [3x3 depthwise, stride s, pad 1 + BN + act2] -> 1x1 projection + BN, plus the block's
// input when s == 1. Near misses change one thing.
struct Block {
  int64_t n = 2, c = 8, m = 24, h = 9, w = 11, stride = 1;
  std::string act1 = "Clip6", act2 = "Clip6";  // "", Relu, Clip6 (attributes), Clip11 (inputs)
  bool symbolic = false;                       // H and W of the input symbolic
  bool dw_residual = false;     // the depthwise conv's output also gets a residual Add
  bool read_twice = false;      // the expansion's output is a graph output too
  bool grouped = false;         // the 3x3 conv has group m / 2 (not depthwise)
  bool expand_stride2 = false;  // the 1x1 conv has stride 2
  bool dw_pad0 = false;         // the 3x3 conv is unpadded
};

Value* Act(GraphBuilder& b, Value* y, const std::string& act) {
  if (act == "Relu") return b.Op("Relu", {y});
  if (act == "Clip6")
    return b.Op("Clip", {y}, {{"min", AttrFloat(0.0f)}, {"max", AttrFloat(6.0f)}});
  if (act == "Clip11") return b.Op("Clip", {y, b.ScalarF32(0.0f), b.ScalarF32(6.0f)});
  return y;
}

Value* ConvBn(GraphBuilder& b, Value* x, std::vector<int64_t> w, Attrs a, uint32_t seed) {
  const int64_t oc = w[0];
  Value* y = b.Op("Conv", {x, b.Constant(RandomF32(w, seed, -0.5f, 0.5f), "", true)}, a);
  return b.Op(
      "BatchNormalization",
      {y, b.Constant(RandomF32({oc}, seed + 1, 0.5f, 1.5f)), b.Constant(RandomF32({oc}, seed + 2)),
       b.Constant(RandomF32({oc}, seed + 3)), b.Constant(RandomF32({oc}, seed + 4, 0.2f, 2.0f))});
}

void BuildBlock(Module& mod, const Block& k) {
  GraphBuilder b(mod.AddFunction("main"));
  std::vector<DimSpec> xs = {k.n, k.c};
  if (k.symbolic) {
    xs.push_back(std::string("h"));
    xs.push_back(std::string("w"));
  } else {
    xs.push_back(k.h);
    xs.push_back(k.w);
  }
  Value* x = b.Input("x", DType::kF32, xs);
  const Attrs pad1 = {{"pads", AttrInts({1, 1, 1, 1})}};
  Value* in = Act(b, ConvBn(b, x, {k.c, k.c, 3, 3}, pad1, 10), "Relu");
  Attrs e;
  if (k.expand_stride2) e["strides"] = AttrInts({2, 2});
  Value* mid = Act(b, ConvBn(b, in, {k.m, k.c, 1, 1}, e, 20), k.act1);
  if (k.read_twice) b.Output("mid", mid);
  const int64_t group = k.grouped ? k.m / 2 : k.m;
  Attrs d = {{"group", AttrInt(group)}, {"strides", AttrInts({k.stride, k.stride})}};
  if (!k.dw_pad0) d["pads"] = AttrInts({1, 1, 1, 1});
  Value* dw = ConvBn(b, mid, {k.m, k.m / group, 3, 3}, d, 30);
  if (k.dw_residual) {
    const int64_t oh = (k.h - 1) / k.stride + 1, ow = (k.w - 1) / k.stride + 1;
    dw = b.Op("Add", {dw, b.Input("r", DType::kF32, {k.n, k.m, oh, ow})});
  }
  dw = Act(b, dw, k.act2);
  Value* y = ConvBn(b, dw, {k.c, k.m, 1, 1}, {}, 40);
  if (k.stride == 1 && !k.expand_stride2 && !k.dw_pad0) y = b.Op("Add", {y, in});
  b.Output("y", y);
}

// Runs the block compiled with and without optimization on `backend`; the outputs must match.
void ExpectBlockMatchesUnfused(const Block& k, const std::string& backend) {
  std::vector<Tensor> outs;
  for (bool optimize : {false, true}) {
    Module mod;
    BuildBlock(mod, k);
    CompileOptions options;
    options.optimize = optimize;
    absl::StatusOr<CompileResult> r = Compile(mod, options);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->ReportText().find("conv_fusion depthwise_pairs: 1\n") != std::string::npos,
              optimize);
    LoadOptions load;
    load.backends = BackendPolicy{{backend, "reference"}};
    std::shared_ptr<const Executable> exe = *Executable::LoadFromBytes(
        {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()}, load);
    std::unique_ptr<VirtualMachine> vm = *VirtualMachine::Create(exe);
    ASSERT_TRUE(vm->SetInput("x", RandomF32({k.n, k.c, k.h, k.w}, 7, -2, 2)).ok());
    absl::Status st = vm->Run();
    ASSERT_TRUE(st.ok()) << st;
    outs.push_back((*vm->GetOutputs())[0]);
  }
  ASSERT_EQ(outs[0].dims(), outs[1].dims());
  std::vector<double> got = testing::ToDoubles(outs[1]), want = testing::ToDoubles(outs[0]);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4 + 1e-4 * std::abs(want[i])) << "element " << i;
  }
}

// The expansion + depthwise pair of every inverted residual block folds into one FusedConv, at
// random batch, channels and sizes (static and symbolic), stride 1 and 2, each activation pair
// (Clip with attributes and with inputs), and the compiled block equals the unoptimized one on
// the oneDNN backend (two primitives at these sizes; kernels/dnnl/conv_test.cc checks the fused
// one) and the reference.
TEST(ConvFusion, ExpansionAndDepthwiseFoldIntoOneFusedConv) {
  std::mt19937 rng(5);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int i = 0;
  for (const char* act1 : {"", "Relu", "Clip6", "Clip11"}) {
    for (const char* act2 : {"", "Relu", "Clip6"}) {
      Block k;
      k.act1 = act1;
      k.act2 = act2;
      k.n = pick(1, 2);
      k.c = pick(1, 4) * 4;
      k.m = k.c * pick(2, 6);
      const bool big = i % 3 == 0;
      k.h = big ? pick(28, 36) : pick(1, 20);
      k.w = big ? pick(28, 36) : pick(1, 20);
      k.stride = i % 2 + 1;
      k.symbolic = i % 4 == 1;
      ++i;
      SCOPED_TRACE(absl::StrCat(k.n, "x", k.c, "x", k.h, "x", k.w, " m ", k.m, " stride ", k.stride,
                                " acts '", act1, "' '", act2, "' symbolic ", k.symbolic));
      {
        Module mod;
        BuildBlock(mod, k);
        ASSERT_TRUE(InferShapes(mod).ok());
        absl::StatusOr<ConvFusionCounts> counts = FuseConvolutions(mod);
        ASSERT_TRUE(counts.ok()) << counts.status();
        EXPECT_EQ(counts->depthwise, 1);
        EXPECT_EQ(counts->convs, 4);
      }
      for (const char* backend : {"dnnl", "reference"}) {
        SCOPED_TRACE(backend);
        ExpectBlockMatchesUnfused(k, backend);
      }
    }
  }
}

// Near misses keep two FusedConvs: a residual on the depthwise conv, the expansion's output read
// twice, a grouped (not depthwise) 3x3 conv, a stride-2 1x1 conv, an unpadded 3x3 conv.
TEST(ConvFusion, NearMissesOfTheDepthwisePairAreNotFolded) {
  for (int miss = 0; miss < 5; ++miss) {
    SCOPED_TRACE(miss);
    Block k;
    k.dw_residual = miss == 0;
    k.read_twice = miss == 1;
    k.grouped = miss == 2;
    k.expand_stride2 = miss == 3;
    k.dw_pad0 = miss == 4;
    Module mod;
    BuildBlock(mod, k);
    ASSERT_TRUE(InferShapes(mod).ok());
    absl::StatusOr<ConvFusionCounts> counts = FuseConvolutions(mod);
    ASSERT_TRUE(counts.ok()) << counts.status();
    EXPECT_EQ(counts->depthwise, 0);
    EXPECT_EQ(counts->convs, 4);
  }
  Module mod;
  BuildBlock(mod, Block());
  ASSERT_TRUE(InferShapes(mod).ok());
  EXPECT_EQ(FuseConvolutions(mod)->depthwise, 1);
}

TEST(ConvFusion, AnOutputWithOtherUsesIsNotAbsorbed) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{5}});
  Value* y = b.Op("Conv", {x, b.Constant(RandomF32({3, 2, 3, 3}, 1), "w", true)});
  Value* r = b.Op("Relu", {y});
  b.Output("conv", y);
  b.Output("relu", r);
  absl::StatusOr<ConvFusionCounts> counts = FuseConvolutions(m);
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->convs, 1);
  EXPECT_EQ(counts->activations, 0);
}

TEST(ConvFusion, ShapeErrorsAreCompileTimeErrorsNamingTheNode) {
  struct Bad {
    const char* what;
    std::vector<DimSpec> x;
    std::vector<int64_t> w;
    std::vector<int64_t> pads;
    const char* expect;
  };
  for (const Bad& bad : {Bad{"channels",
                             {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{8}},
                             {4, 4, 3, 3},
                             {},
                             "channels"},
                         Bad{"negative pad",
                             {int64_t{1}, int64_t{4}, int64_t{8}, int64_t{8}},
                             {4, 4, 3, 3},
                             {-1, 0, 0, 0},
                             "negative pad"},
                         Bad{"negative pad, width unknown",
                             {int64_t{1}, int64_t{4}, int64_t{8}, std::string("w")},
                             {4, 4, 3, 3},
                             {0, -2, 0, 0},
                             "negative pad"},
                         Bad{"kernel too large",
                             {int64_t{1}, int64_t{4}, int64_t{2}, int64_t{8}},
                             {4, 4, 5, 3},
                             {1, 0, 1, 0},
                             "larger than the padded input"}}) {
    SCOPED_TRACE(bad.what);
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, bad.x);
    Attrs attrs;
    if (!bad.pads.empty()) attrs["pads"] = AttrInts(bad.pads);
    b.set_node_name("bad_conv");
    b.Output("y", b.Op("Conv", {x, b.Constant(RandomF32(bad.w, 1), "w", true)}, attrs));
    absl::StatusOr<CompileResult> r = Compile(m);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "bad_conv")) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), bad.expect)) << r.status();
  }
}

// Dims unknown at compile time: the same errors at run time, InvalidArgument naming the node,
// and the VM runs the next good input.
TEST(ConvFusion, ShapeErrorsAtRunTimeNameTheNode) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x =
      b.Input("x", DType::kF32, {int64_t{1}, std::string("c"), std::string("h"), std::string("w")});
  b.set_node_name("dyn_conv");
  b.Output("y", b.Op("Conv", {x, b.Constant(RandomF32({4, 4, 3, 3}, 1), "w", true)},
                     {{"pads", AttrInts({0, 1, 0, 1})}}));
  absl::StatusOr<CompileResult> r = Compile(m);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const char* backend : {"dnnl", "reference"}) {
    SCOPED_TRACE(backend);
    LoadOptions load;
    load.backends = BackendPolicy{{backend, "reference"}};
    std::shared_ptr<const Executable> exe = *Executable::LoadFromBytes(
        {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()}, load);
    std::unique_ptr<VirtualMachine> vm = *VirtualMachine::Create(exe);
    for (const std::vector<int64_t>& bad : {std::vector<int64_t>{1, 3, 8, 8}, {1, 4, 2, 8}}) {
      ASSERT_TRUE(vm->SetInput("x", RandomF32(bad, 2)).ok());
      absl::Status s = vm->Run();
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "dyn_conv")) << s;
    }
    ASSERT_TRUE(vm->SetInput("x", RandomF32({1, 4, 5, 9}, 3)).ok());
    ASSERT_TRUE(vm->Run().ok());
    EXPECT_EQ((*vm->GetOutputs())[0].dims(), absl::MakeConstSpan(std::vector<int64_t>{1, 4, 3, 9}));
  }
}

// A graph compiled with optimize on and off, run on one input on both backends: the outputs
// must agree. Returns the optimized program's kernel ops (on the dnnl run).
std::vector<std::string> ExpectOptimizedMatches(const std::function<void(GraphBuilder&)>& build,
                                                const Tensor& x) {
  std::vector<std::string> fused_kernels;
  for (const char* backend : {"dnnl", "reference"}) {
    SCOPED_TRACE(backend);
    std::vector<Tensor> outs;
    for (bool optimize : {false, true}) {
      Module m;
      GraphBuilder b(m.AddFunction("main"));
      build(b);
      CompileOptions options;
      options.optimize = optimize;
      absl::StatusOr<CompileResult> r = Compile(m, options);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return {};
      if (optimize) {
        fused_kernels.clear();
        for (const KernelReport& k : r->kernels) fused_kernels.push_back(k.op);
      }
      LoadOptions load;
      load.backends = BackendPolicy{{backend, "reference"}};
      std::shared_ptr<const Executable> exe = *Executable::LoadFromBytes(
          {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()}, load);
      std::unique_ptr<VirtualMachine> vm = *VirtualMachine::Create(exe);
      EXPECT_TRUE(vm->SetInput("x", x).ok());
      absl::Status st = vm->Run();
      EXPECT_TRUE(st.ok()) << st;
      if (!st.ok()) return {};
      outs.push_back((*vm->GetOutputs())[0]);
    }
    std::vector<double> got = testing::ToDoubles(outs[1]), want = testing::ToDoubles(outs[0]);
    EXPECT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
      if (std::abs(got[i] - want[i]) > 1e-4 + 1e-4 * std::abs(want[i])) {
        ADD_FAILURE() << "element " << i << ": " << got[i] << " against " << want[i];
        break;
      }
    }
  }
  return fused_kernels;
}

int CountOf(const std::vector<std::string>& kernels, const std::string& op) {
  return static_cast<int>(std::count(kernels.begin(), kernels.end(), op));
}

Value* ConvOf(GraphBuilder& b, Value* x, int64_t c, int64_t m, int64_t k, uint32_t seed,
              int64_t group = 1) {
  Attrs a = {{"pads", AttrInts(std::vector<int64_t>(4, k / 2))}, {"group", AttrInt(group)}};
  return b.Op("Conv",
              {x, b.Constant(RandomF32({m, c / group, k, k}, seed), "", true),
               b.Constant(RandomF32({m}, seed + 1), "", true)},
              a);
}

Value* Const(GraphBuilder& b, std::vector<int64_t> dims, uint32_t seed, float lo, float hi) {
  return b.Constant(RandomF32(std::move(dims), seed, lo, hi));
}

Value* Filled(GraphBuilder& b, std::vector<int64_t> dims, float v) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = v;
  return b.Constant(t);
}

// PP-LCNet's block as Paddle2ONNX writes it (PaddleOCR v4): Conv, a learnable scale and shift
// (Mul, Add by one value), HardSwish written out, another scale and shift, then the next conv
// (a depthwise one, then a 1x1). Each conv folds its scale and shift into the weights and takes
// HardSwish and the second scale and shift (an Affine) as post-ops: only FusedConvs remain,
// channels-last between them.
TEST(ConvFusion, ScalesAndAffineAroundHardSwishFold) {
  auto block = [](GraphBuilder& b, Value* x, int64_t c, int64_t m, int64_t k, int64_t group,
                  uint32_t seed) {
    Value* y = ConvOf(b, x, c, m, k, seed, group);
    y = b.Op("Mul", {Const(b, {1}, seed + 2, 0.5f, 2), y});
    y = b.Op("Add", {y, Const(b, {1}, seed + 3, -1, 1)});
    Value* r = b.Op("Clip", {b.Op("Add", {y, b.ScalarF32(3)}), b.ScalarF32(0), b.ScalarF32(6)});
    y = b.Op("Div", {b.Op("Mul", {y, r}), b.ScalarF32(6)});
    y = b.Op("Mul", {Const(b, {1}, seed + 4, 0.3f, 1.2f), y});
    return b.Op("Add", {y, Const(b, {1}, seed + 5, -1, 1)});
  };
  std::vector<std::string> kernels = ExpectOptimizedMatches(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {int64_t{2}, int64_t{3}, int64_t{12}, int64_t{10}});
        Value* y = block(b, x, 3, 16, 3, 1, 10);
        y = block(b, y, 16, 16, 3, 16, 20);
        b.Output("y", block(b, y, 16, 24, 1, 1, 30));
      },
      RandomF32({2, 3, 12, 10}, 1, -3, 3));
  EXPECT_EQ(kernels, std::vector<std::string>(kernels.size(), "dynvm::FusedConv"))
      << absl::StrJoin(kernels, ",");
  EXPECT_FALSE(kernels.empty());
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {int64_t{1}, int64_t{4}, int64_t{6}, int64_t{6}});
  b.Output("y", block(b, block(b, x, 4, 8, 3, 1, 40), 8, 8, 1, 1, 50));
  ASSERT_TRUE(InferShapes(m).ok());
  ASSERT_TRUE(rewrite::ApplyRewrites(m).ok());
  absl::StatusOr<ConvFusionCounts> counts = FuseConvolutions(m);
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(counts->convs, 2);
  EXPECT_EQ(counts->scales, 4);       // a Mul and an Add per conv
  EXPECT_EQ(counts->activations, 4);  // HardSwish and an Affine per conv
  EXPECT_EQ(counts->blocked, 1);
}

// tf2onnx's LeakyRelu + Max(x, -0.4) after each conv (openWakeWord's embedding model), then a
// MaxPool and another conv; per-channel scales ([1, M, 1, 1] and [M, 1, 1]) after a
// BatchNormalization; Min with one value after a Relu. Only FusedConvs and the pool remain.
TEST(ConvFusion, ChannelScalesAndScalarBoundsFold) {
  std::vector<std::string> kernels = ExpectOptimizedMatches(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {int64_t{2}, int64_t{1}, int64_t{14}, int64_t{9}});
        Value* y = ConvOf(b, x, 1, 8, 3, 1);
        y = b.Op("LeakyRelu", {y}, {{"alpha", AttrFloat(0.2f)}});
        y = b.Op("Max", {y, Filled(b, {1, 1, 1, 1}, -0.4f)});
        y = b.Op("MaxPool", {y},
                 {{"kernel_shape", AttrInts({2, 2})}, {"strides", AttrInts({2, 2})}});
        y = ConvOf(b, y, 8, 12, 3, 5);
        y = b.Op("BatchNormalization", {y, Const(b, {12}, 7, 0.5f, 1.5f), Const(b, {12}, 8, -1, 1),
                                        Const(b, {12}, 9, -1, 1), Const(b, {12}, 10, 0.2f, 2)});
        y = b.Op("Mul", {y, Const(b, {1, 12, 1, 1}, 11, -2, 2)});
        y = b.Op("Add", {Const(b, {12, 1, 1}, 12, -1, 1), y});
        y = b.Op("Relu", {y});
        b.Output("y", b.Op("Min", {b.ScalarF32(0.75f), y}));
      },
      RandomF32({2, 1, 14, 9}, 2, -2, 2));
  EXPECT_EQ(CountOf(kernels, "dynvm::FusedConv") + CountOf(kernels, "MaxPool"),
            static_cast<int>(kernels.size()))
      << absl::StrJoin(kernels, ",");
  EXPECT_EQ(CountOf(kernels, "MaxPool"), 1) << absl::StrJoin(kernels, ",");
}

// A squeeze-excitation block (MobileNetV3, PP-LCNet): GlobalAveragePool -> Conv 1x1 -> Relu ->
// Conv 1x1 -> HardSigmoid (alpha 1/6, and the default 0.2) -> Mul with the block's input. The
// HardSigmoid becomes two post-ops (Affine, then Clip to [0, 1]); the pool and the Mul stay.
TEST(ConvFusion, SqueezeExcitationTakesHardSigmoid) {
  for (float alpha : {1.0f / 6, 0.2f}) {
    SCOPED_TRACE(alpha);
    std::vector<std::string> kernels = ExpectOptimizedMatches(
        [&](GraphBuilder& b) {
          Value* x = b.Input("x", DType::kF32, {int64_t{2}, int64_t{3}, int64_t{9}, int64_t{7}});
          Value* y = b.Op("HardSwish", {ConvOf(b, x, 3, 16, 3, 1)});
          Value* s = b.Op("GlobalAveragePool", {y});
          s = b.Op("Relu", {ConvOf(b, s, 16, 4, 1, 3)});
          s = b.Op("HardSigmoid", {b.Op("Mul", {ConvOf(b, s, 4, 16, 1, 5), b.ScalarF32(4)})},
                   {{"alpha", AttrFloat(alpha)}});
          b.Output("y", ConvOf(b, b.Op("Mul", {y, s}), 16, 8, 1, 7));
        },
        RandomF32({2, 3, 9, 7}, 3, -2, 2));
    EXPECT_EQ(CountOf(kernels, "HardSigmoid"), 0) << absl::StrJoin(kernels, ",");
    EXPECT_EQ(CountOf(kernels, "Relu"), 0) << absl::StrJoin(kernels, ",");
    EXPECT_EQ(CountOf(kernels, "GlobalAveragePool"), 1) << absl::StrJoin(kernels, ",");
  }
}

// A ConvTranspose (groups 1 and 2, with and without bias, kernel equal to the stride or not)
// folds the bias Add (as Paddle2ONNX writes it: [1, M, 1, 1]), the BatchNormalization and the
// per-channel Mul after it into its weights and bias and stays a ConvTranspose, although its
// output dims are fresh symbols (a per-channel constant keeps any [N, M, ...] shape); the Relu
// stays its own op. A ConvTranspose whose output is read twice keeps its BatchNormalization.
TEST(ConvFusion, ConvTransposeFoldsBatchNormAndScales) {
  for (int64_t group : {1, 2}) {
    for (bool bias : {false, true}) {
      for (int64_t k : {2, 3}) {
        SCOPED_TRACE(absl::StrCat("group ", group, " bias ", bias, " kernel ", k));
        std::vector<std::string> kernels = ExpectOptimizedMatches(
            [&](GraphBuilder& b) {
              Value* x =
                  b.Input("x", DType::kF32, {int64_t{2}, int64_t{4}, int64_t{5}, int64_t{6}});
              std::vector<Value*> in = {x, Const(b, {4, 6 / group, k, k}, 1, -1, 1)};
              if (bias) in.push_back(Const(b, {6}, 2, -1, 1));
              Value* y = b.Op("ConvTranspose", in,
                              {{"strides", AttrInts({2, 2})}, {"group", AttrInt(group)}});
              y = b.Op("Add", {y, Const(b, {1, 6, 1, 1}, 10, -1, 1)});
              y = b.Op("BatchNormalization",
                       {y, Const(b, {6}, 3, 0.5f, 1.5f), Const(b, {6}, 4, -1, 1),
                        Const(b, {6}, 5, -1, 1), Const(b, {6}, 6, 0.2f, 2)});
              y = b.Op("Mul", {y, Const(b, {6, 1, 1}, 7, -2, 2)});
              b.Output("y", b.Op("Relu", {y}));
            },
            RandomF32({2, 4, 5, 6}, 8, -2, 2));
        EXPECT_EQ(kernels.size(), 2u) << absl::StrJoin(kernels, ",");
        EXPECT_EQ(CountOf(kernels, "ConvTranspose"), 1) << absl::StrJoin(kernels, ",");
        EXPECT_EQ(CountOf(kernels, "BatchNormalization"), 0) << absl::StrJoin(kernels, ",");
        EXPECT_EQ(CountOf(kernels, "Relu"), 1) << absl::StrJoin(kernels, ",");
      }
    }
  }
  std::vector<std::string> kernels = ExpectOptimizedMatches(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {int64_t{1}, int64_t{4}, int64_t{5}, int64_t{6}});
        Value* y = b.Op("ConvTranspose", {x, Const(b, {4, 3, 2, 2}, 1, -1, 1)},
                        {{"strides", AttrInts({2, 2})}});
        Value* n =
            b.Op("BatchNormalization", {y, Const(b, {3}, 3, 0.5f, 1.5f), Const(b, {3}, 4, -1, 1),
                                        Const(b, {3}, 5, -1, 1), Const(b, {3}, 6, 0.2f, 2)});
        b.Output("y", b.Op("Add", {n, y}));
      },
      RandomF32({1, 4, 5, 6}, 9, -2, 2));
  EXPECT_EQ(CountOf(kernels, "BatchNormalization"), 1) << absl::StrJoin(kernels, ",");
}

// Near misses: each leaves its op unfused (and the result the unfused graph's).
TEST(ConvFusion, ScaleAndBoundNearMissesAreNotFolded) {
  struct Miss {
    const char* what;
    const char* op;                                      // the op that must stay
    std::function<Value*(GraphBuilder&, Value*)> after;  // given the conv's output [2, 8, 8, 8]
  };
  const std::vector<Miss> misses = {
      {"Mul by [8] along the width (as wide as the channels)", "Mul",
       [](GraphBuilder& b, Value* y) {
         return b.Op("Mul", {y, Const(b, {8}, 3, -2, 2)});
       }},
      {"Add broadcasting the batch", "Add",
       [](GraphBuilder& b, Value* y) {
         return b.Op("Add", {y, Const(b, {2, 1, 1, 1, 1}, 3, -1, 1)});
       }},
      // Not folded: it stays its own op, as dynvm::ChannelMul (a per-channel scale of a conv's
      // output; SqueezeExcitationScaleKeepsChannelsLast).
      {"Mul by a per-channel value after an activation (not one value)", "dynvm::ChannelMul",
       [](GraphBuilder& b, Value* y) {
         return b.Op("Mul", {b.Op("Relu", {y}), Const(b, {1, 8, 1, 1}, 3, -2, 2)});
       }},
      {"Max with a non-constant", "Max",
       [](GraphBuilder& b, Value* y) {
         Value* other = b.Op("Sigmoid", {b.Op("Neg", {y})});  // y read twice: Relu stays too
         return b.Op("Max", {b.Op("Relu", {y}), other});
       }},
      {"Mul by infinity (then Sigmoid: finite outputs)", "Mul",
       [](GraphBuilder& b, Value* y) {
         Value* big = b.Op("Mul", {y, b.ScalarF32(std::numeric_limits<float>::infinity())});
         return b.Op("Sigmoid", {big});
       }},
      {"a third activation", "Sigmoid",
       [](GraphBuilder& b, Value* y) {
         Value* a = b.Op("Max", {b.Op("Relu", {y}), b.ScalarF32(0.1f)});
         return b.Op("Sigmoid", {a});
       }},
  };
  for (const Miss& miss : misses) {
    SCOPED_TRACE(miss.what);
    std::vector<std::string> kernels = ExpectOptimizedMatches(
        [&](GraphBuilder& b) {
          Value* x = b.Input("x", DType::kF32, {int64_t{2}, int64_t{4}, int64_t{8}, int64_t{8}});
          b.Output("y", miss.after(b, ConvOf(b, x, 4, 8, 3, 1)));
        },
        RandomF32({2, 4, 8, 8}, 4, -2, 2));
    EXPECT_EQ(CountOf(kernels, miss.op), 1) << absl::StrJoin(kernels, ",");
  }
}

// A conformer's GLU after its first pointwise Conv1d (torch's F.glu: Split along channels into
// halves, the second half's Sigmoid times the first): the conv becomes one FusedConv per half,
// the gate's with Sigmoid as its activation (as its second activation after a BatchNorm-folded
// conv's own Relu), so no Split or Sigmoid kernel remains. Also: Split with its sizes as an input
// or an attribute, the product written either way round, a 2D conv split in three unequal parts
// (one read by a Sigmoid that is also a graph output), batch and time symbolic. Equal to the
// unfused graph on both backends.
TEST(ConvFusion, ChannelSplitsAndGluGatesFold) {
  struct Case {
    const char* what;
    bool split_input, gate_first, relu, symbolic;
  };
  for (const Case& c : {Case{"split input", true, false, false, false},
                        Case{"split attribute, gate first", false, true, false, true},
                        Case{"equal parts, after Relu", false, false, true, false}}) {
    SCOPED_TRACE(c.what);
    std::vector<std::string> kernels = ExpectOptimizedMatches(
        [&](GraphBuilder& b) {
          Value* x = c.symbolic ? b.Input("x", DType::kF32, {"n", int64_t{12}, "t"})
                                : b.Input("x", DType::kF32, {int64_t{2}, int64_t{12}, int64_t{37}});
          Value* y = b.Op("Conv", {x, Const(b, {20, 12, 1}, 5, -1, 1), Const(b, {20}, 6, -1, 1)});
          if (c.relu) y = b.Op("Relu", {y});
          Attrs split_attrs = {{"axis", AttrInt(1)}};
          std::vector<Value*> in = {y};
          if (c.split_input) {
            in.push_back(b.VectorI64({10, 10}));
          } else if (!c.relu) {
            split_attrs["split"] = AttrInts({10, 10});
          }
          std::vector<Value*> halves = b.Ops("Split", in, split_attrs, 2);
          Value* gate = b.Op("Sigmoid", {halves[1]});
          y = c.gate_first ? b.Op("Mul", {gate, halves[0]}) : b.Op("Mul", {halves[0], gate});
          b.Output("y", y);
        },
        RandomF32({2, 12, 37}, 7, -2, 2));
    EXPECT_EQ(CountOf(kernels, "Split"), 0) << absl::StrJoin(kernels, ",");
    EXPECT_EQ(CountOf(kernels, "Sigmoid"), 0) << absl::StrJoin(kernels, ",");
  }
  std::vector<std::string> kernels = ExpectOptimizedMatches(
      [&](GraphBuilder& b) {
        Value* x = b.Input("x", DType::kF32, {int64_t{1}, int64_t{3}, int64_t{9}, int64_t{11}});
        Value* y = ConvOf(b, x, 3, 16, 3, 8);
        std::vector<Value*> parts =
            b.Ops("Split", {y, b.VectorI64({4, 9, 3})}, {{"axis", AttrInt(-3)}}, 3);
        Value* gate = b.Op("Sigmoid", {parts[0]});
        Value* rest = b.Op("Add", {b.Op("Relu", {parts[1]}), b.ScalarF32(1)});
        b.Output("y", b.Op("Mul", {rest, b.Op("ReduceSum", {gate, b.VectorI64({1})})}));
        b.Output("z", parts[2]);
      },
      RandomF32({1, 3, 9, 11}, 9, -2, 2));
  EXPECT_EQ(CountOf(kernels, "Split"), 0) << absl::StrJoin(kernels, ",");
  EXPECT_EQ(CountOf(kernels, "Sigmoid"), 0) << absl::StrJoin(kernels, ",");
  EXPECT_EQ(CountOf(kernels, "Relu"), 1) << absl::StrJoin(kernels, ",");  // only Sigmoid is taken
}

// Near misses keep the Split (and the Sigmoid): a split along time, the conv's output read
// twice, a grouped conv, parts of a split with a non-constant size input; and a conv with two
// activations already (HardSigmoid) splits but keeps its gate's Sigmoid.
TEST(ConvFusion, NearMissesOfTheChannelSplitAreNotFolded) {
  struct Miss {
    const char* what;
    int splits, sigmoids;
    std::function<Value*(GraphBuilder&, Value*)> build;
  };
  auto glu = [](GraphBuilder& b, Value* y, int64_t axis) {
    std::vector<Value*> h = b.Ops("Split", {y}, {{"axis", AttrInt(axis)}}, 2);
    return b.Op("Mul", {h[0], b.Op("Sigmoid", {h[1]})});
  };
  const Miss misses[] = {
      {"along time", 1, 1,
       [&](GraphBuilder& b, Value* x) {
         return glu(b, b.Op("Conv", {x, Const(b, {8, 4, 1}, 1, -1, 1)}), 2);
       }},
      {"read twice", 1, 1,
       [&](GraphBuilder& b, Value* x) {
         Value* y = b.Op("Conv", {x, Const(b, {8, 4, 1}, 2, -1, 1)});
         return b.Op("Add", {glu(b, y, 1), b.Op("ReduceMean", {y, b.VectorI64({1})})});
       }},
      {"grouped", 1, 1,
       [&](GraphBuilder& b, Value* x) {
         return glu(b, b.Op("Conv", {x, Const(b, {8, 2, 1}, 3, -1, 1)}, {{"group", AttrInt(2)}}),
                    1);
       }},
      {"split sizes computed", 1, 1,
       [&](GraphBuilder& b, Value* x) {
         Value* y = b.Op("Conv", {x, Const(b, {8, 4, 1}, 4, -1, 1)});
         Value* four = b.Op("Gather", {b.Op("Shape", {x}), b.VectorI64({1, 1})});
         std::vector<Value*> h = b.Ops("Split", {y, four}, {{"axis", AttrInt(1)}}, 2);
         return b.Op("Mul", {h[0], b.Op("Sigmoid", {h[1]})});
       }},
      {"two activations already", 0, 1,
       [&](GraphBuilder& b, Value* x) {
         Value* y = b.Op("HardSigmoid", {b.Op("Conv", {x, Const(b, {8, 4, 1}, 5, -1, 1)})});
         return glu(b, y, 1);
       }},
  };
  for (const Miss& miss : misses) {
    SCOPED_TRACE(miss.what);
    std::vector<std::string> kernels = ExpectOptimizedMatches(
        [&](GraphBuilder& b) {
          Value* x = b.Input("x", DType::kF32, {int64_t{2}, int64_t{4}, int64_t{10}});
          b.Output("y", miss.build(b, x));
        },
        RandomF32({2, 4, 10}, 6, -2, 2));
    EXPECT_EQ(CountOf(kernels, "Split"), miss.splits) << absl::StrJoin(kernels, ",");
    EXPECT_EQ(CountOf(kernels, "Sigmoid"), miss.sigmoids) << absl::StrJoin(kernels, ",");
  }
}

// A squeeze-excitation block's scale (Mul of a conv's output by a [N, C, 1...] gate) becomes
// dynvm::ChannelMul, which keeps the channels-last layout between the convs: 1D/2D/3D, the gate
// as either operand, a gate of batch 1 (a constant), the scaled value read by a conv (channels-
// last out) or by an Add too (plain out), the conv's output read by another op as well (plain
// in). Equal to the unfused graph on both backends; no Mul kernel left, and the report shows
// ChannelMul's layouts.
TEST(ConvFusion, SqueezeExcitationScaleKeepsChannelsLast) {
  struct Case {
    int spatial;
    bool gate_first, const_gate, out_read_elsewhere, in_read_elsewhere;
  };
  for (const Case& c : {Case{2, false, false, false, false}, Case{1, true, false, false, false},
                        Case{3, false, true, false, false}, Case{2, true, false, true, false},
                        Case{2, false, false, false, true}}) {
    SCOPED_TRACE(absl::StrCat("spatial ", c.spatial, " gate first ", c.gate_first, " const ",
                              c.const_gate, " out elsewhere ", c.out_read_elsewhere,
                              " in elsewhere ", c.in_read_elsewhere));
    std::vector<DimSpec> dims = {int64_t{2}, int64_t{3}};
    std::vector<int64_t> idims = {2, 3}, kernel, gate_dims = {c.const_gate ? 1 : 2, 12};
    for (int d = 0; d < c.spatial; ++d) {
      dims.push_back(int64_t{5 + d});
      idims.push_back(5 + d);
      kernel.push_back(1);
      gate_dims.push_back(1);
    }
    std::vector<std::string> kernels = ExpectOptimizedMatches(
        [&](GraphBuilder& b) {
          Value* x = b.Input("x", DType::kF32, dims);
          std::vector<int64_t> w1 = {12, 3}, w2 = {8, 12};
          w1.insert(w1.end(), kernel.begin(), kernel.end());
          w2.insert(w2.end(), kernel.begin(), kernel.end());
          Value* y = b.Op("Relu", {b.Op("Conv", {x, Const(b, w1, 1, -1, 1)})});
          Value* gate;
          if (c.const_gate) {
            gate = Const(b, gate_dims, 2, 0, 1);
          } else {
            gate = b.Op("Sigmoid", {b.Op("GlobalAveragePool", {y})});
          }
          Value* scaled = c.gate_first ? b.Op("Mul", {gate, y}) : b.Op("Mul", {y, gate});
          Value* out = b.Op("Conv", {scaled, Const(b, w2, 3, -1, 1)});
          if (c.out_read_elsewhere) {
            out = b.Op("Add", {out, b.Op("ReduceMean", {scaled, b.VectorI64({1})})});
          }
          if (c.in_read_elsewhere) {
            out = b.Op("Add", {out, b.Op("ReduceMean", {y, b.VectorI64({1})})});
          }
          b.Output("y", out);
        },
        RandomF32(idims, 4, -2, 2));
    EXPECT_EQ(CountOf(kernels, "Mul"), 0) << absl::StrJoin(kernels, ",");
    EXPECT_EQ(CountOf(kernels, "dynvm::ChannelMul"), 1) << absl::StrJoin(kernels, ",");
  }
}

// Near misses keep the Mul: a Mul by a [1, C, H, W] constant (not a gate), by a [N, 1, 1, 1]
// gate, and of a value no conv or pool produced (a graph input).
TEST(ConvFusion, NearMissesOfTheChannelMulAreNotRewritten) {
  const std::function<Value*(GraphBuilder&, Value*, Value*)> misses[] = {
      [](GraphBuilder& b, Value*, Value* y) {
        return b.Op("Mul", {y, Const(b, {1, 8, 5, 6}, 7, -1, 1)});
      },
      [](GraphBuilder& b, Value*, Value* y) {
        return b.Op("Mul", {y, b.Op("ReduceMean", {y, b.VectorI64({1, 2, 3})})});
      },
      [](GraphBuilder& b, Value* x, Value* y) {
        Value* g = b.Op("GlobalAveragePool", {y});
        return b.Op("Add", {y, b.Op("ReduceMean", {b.Op("Mul", {x, g}), b.VectorI64({1})})});
      },
  };
  for (size_t i = 0; i < std::size(misses); ++i) {
    SCOPED_TRACE(i);
    std::vector<std::string> kernels = ExpectOptimizedMatches(
        [&](GraphBuilder& b) {
          Value* x = b.Input("x", DType::kF32, {int64_t{2}, int64_t{8}, int64_t{5}, int64_t{6}});
          Value* y = b.Op("Conv", {x, Const(b, {8, 8, 1, 1}, 1, -1, 1)});
          b.Output("y", misses[i](b, x, y));
        },
        RandomF32({2, 8, 5, 6}, 5, -2, 2));
    EXPECT_EQ(CountOf(kernels, "Mul"), 1) << absl::StrJoin(kernels, ",");
    EXPECT_EQ(CountOf(kernels, "dynvm::ChannelMul"), 0) << absl::StrJoin(kernels, ",");
  }
}

// BlazeFace's residual block as tf2onnx writes it: a conv's output y (directly, or after a
// stride-2 MaxPool) concatenated with a constant of zeros along the channels (the zeros written
// as a constant or as ConstantOfShape of a constant shape; after y or before it; axis 1 or -3),
// added to the next conv's wider output. The Concat becomes dynvm::ChannelPad, which takes and
// gives the channels-last layout, so no value between the convs is plain. Equal to the unfused
// graph on both backends.
TEST(ConvFusion, ChannelPaddedResidualKeepsChannelsLast) {
  struct Case {
    bool zeros_first, constant_of_shape, pool;
    int64_t axis;
  };
  for (const Case& c : {Case{false, false, false, 1}, Case{true, false, false, -3},
                        Case{false, true, true, 1}, Case{true, true, true, 1}}) {
    SCOPED_TRACE(absl::StrCat("zeros first ", c.zeros_first, " ConstantOfShape ",
                              c.constant_of_shape, " pool ", c.pool, " axis ", c.axis));
    const int64_t hw = c.pool ? 4 : 8;
    auto build = [&](GraphBuilder& b) {
      Value* x = b.Input("x", DType::kF32, {int64_t{2}, int64_t{6}, int64_t{8}, int64_t{8}});
      Value* y = b.Op("Relu", {ConvOf(b, x, 6, 6, 3, 1)});
      Value* z;
      if (c.constant_of_shape) {
        z = b.Op("ConstantOfShape", {b.VectorI64({2, 4, hw, hw})});
      } else {
        z = Filled(b, {2, 4, hw, hw}, 0.0f);
      }
      Attrs stride2 = {{"kernel_shape", AttrInts({2, 2})}, {"strides", AttrInts({2, 2})}};
      Value* r = c.pool ? b.Op("MaxPool", {y}, stride2) : y;
      Value* padded =
          b.Op("Concat", c.zeros_first ? std::vector<Value*>{z, r} : std::vector<Value*>{r, z},
               {{"axis", AttrInt(c.axis)}});
      Attrs dw = {{"pads", AttrInts({1, 1, 1, 1})},
                  {"group", AttrInt(6)},
                  {"strides", AttrInts({c.pool ? 2 : 1, c.pool ? 2 : 1})}};
      Value* d = b.Op("Conv", {y, Const(b, {6, 1, 3, 3}, 2, -1, 1), Const(b, {6}, 3, -1, 1)}, dw);
      Value* out = b.Op("Relu", {b.Op("Add", {ConvOf(b, d, 6, 10, 1, 4), padded})});
      b.Output("y", ConvOf(b, out, 10, 3, 1, 6));
    };
    std::vector<std::string> kernels =
        ExpectOptimizedMatches(build, RandomF32({2, 6, 8, 8}, 7, -2, 2));
    EXPECT_EQ(CountOf(kernels, "Concat"), 0) << absl::StrJoin(kernels, ",");
    EXPECT_EQ(CountOf(kernels, "dynvm::ChannelPad"), 1) << absl::StrJoin(kernels, ",");
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    build(b);
    absl::StatusOr<CompileResult> r = Compile(m, CompileOptions{});
    ASSERT_TRUE(r.ok()) << r.status();
    for (const KernelReport& k : r->kernels) {
      if (k.op == "dynvm::ChannelPad") {
        EXPECT_EQ(k.layout, "layout X channels-last, Y channels-last");
      }
    }
  }
}

// Near misses keep the Concat: zeros of -0.0 (a copy would write +0.0), a constant that is not
// all zeros, and a Concat along another axis.
TEST(ConvFusion, NearMissesOfTheChannelPadAreNotRewritten) {
  const std::function<Value*(GraphBuilder&, Value*)> misses[] = {
      [](GraphBuilder& b, Value* y) {
        return b.Op("Concat", {y, Filled(b, {2, 4, 5, 6}, -0.0f)}, {{"axis", AttrInt(1)}});
      },
      [](GraphBuilder& b, Value* y) {
        return b.Op("Concat", {y, Filled(b, {2, 4, 5, 6}, 0.5f)}, {{"axis", AttrInt(1)}});
      },
      [](GraphBuilder& b, Value* y) {
        return b.Op("Concat", {y, Filled(b, {2, 8, 5, 2}, 0.0f)}, {{"axis", AttrInt(3)}});
      },
  };
  for (size_t i = 0; i < std::size(misses); ++i) {
    SCOPED_TRACE(i);
    std::vector<std::string> kernels = ExpectOptimizedMatches(
        [&](GraphBuilder& b) {
          Value* x = b.Input("x", DType::kF32, {int64_t{2}, int64_t{8}, int64_t{5}, int64_t{6}});
          Value* y = b.Op("Conv", {x, Const(b, {8, 8, 1, 1}, 1, -1, 1)});
          b.Output("y", misses[i](b, y));
        },
        RandomF32({2, 8, 5, 6}, 5, -2, 2));
    EXPECT_EQ(CountOf(kernels, "Concat"), 1) << absl::StrJoin(kernels, ",");
    EXPECT_EQ(CountOf(kernels, "dynvm::ChannelPad"), 0) << absl::StrJoin(kernels, ",");
  }
}

// A conformer's convolution module as an exporter that keeps BatchNormalization writes it
// (torch folds it at export; others do not): pointwise Conv1d, GLU, depthwise Conv1d (k 15 and
// 31, "same" pads), BatchNormalization, SiLU written as x * Sigmoid(x), pointwise Conv1d. The
// depthwise conv folds the BatchNormalization and takes SiLU; only FusedConvs and the GLU's Mul
// remain, and the output equals the unfused graph's on both backends (the dnnl backend runs the
// depthwise conv on cpu::DepthwiseConv1dRow and the pointwise ones as sgemm).
TEST(ConvFusion, ConformerConvolutionModuleFolds) {
  for (int64_t k : {15, 31}) {
    SCOPED_TRACE(k);
    std::vector<std::string> kernels = ExpectOptimizedMatches(
        [&](GraphBuilder& b) {
          Value* x = b.Input("x", DType::kF32, {"batch", int64_t{16}, "time"});
          Value* y = b.Op("Conv", {x, Const(b, {32, 16, 1}, 1, -1, 1), Const(b, {32}, 2, -1, 1)});
          std::vector<Value*> h =
              b.Ops("Split", {y, b.VectorI64({16, 16})}, {{"axis", AttrInt(1)}}, 2);
          y = b.Op("Mul", {h[0], b.Op("Sigmoid", {h[1]})});
          y = b.Op("Conv", {y, Const(b, {16, 1, k}, 3, -1, 1), Const(b, {16}, 4, -1, 1)},
                   {{"group", AttrInt(16)}, {"pads", AttrInts({k / 2, k / 2})}});
          y = b.Op("BatchNormalization",
                   {y, Const(b, {16}, 5, 0.5f, 1.5f), Const(b, {16}, 6, -1, 1),
                    Const(b, {16}, 7, -1, 1), Const(b, {16}, 8, 0.2f, 2)});
          y = b.Op("Mul", {y, b.Op("Sigmoid", {y})});
          b.Output("y", b.Op("Conv", {y, Const(b, {16, 16, 1}, 9, -1, 1)}));
        },
        RandomF32({2, 16, 45}, 10, -2, 2));
    // The GLU's two halves, the Mul, the depthwise conv (BatchNormalization and SiLU folded), the
    // projection.
    EXPECT_EQ(kernels, (std::vector<std::string>{"dynvm::FusedConv", "dynvm::FusedConv", "Mul",
                                                 "dynvm::FusedConv", "dynvm::FusedConv"}))
        << absl::StrJoin(kernels, ",");
  }
}

}  // namespace
}  // namespace dynvm::compiler
