// qdq_matmul (qdq.cc): QuantizeLinear(MatMul(DequantizeLinear(x), DequantizeLinear(w))) fused
// into QLinearMatMul, against the unfused program over varied sizes, activation types,
// per-tensor and per-channel weights and absent zero points; and the near misses left alone.
// qdq_gemm: the same around a Gemm (transB 0 and 1, with and without a bias). qdq_conv: the same
// around a Conv (groups, strides, pads, per-channel weights, with and without a bias).
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/rewrite/rewrite_testing.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler::rewrite {
namespace {

struct Case {
  int64_t m = 3, k = 16, n = 8;
  DType x = DType::kU8;
  bool per_channel = true;
  bool zero_points = true;
  int64_t w_axis = 1;          // the weight DequantizeLinear's axis
  bool x_per_axis = false;     // x dequantized per channel of K (not fusable)
  bool share_weights = false;  // the dequantized weights also a graph output
  bool gemm = false;           // a 2-D Gemm instead of a MatMul
  int64_t trans_b = 0;         // Gemm: w is [N, K]
  bool bias = false;           // Gemm: with C [N]
  float alpha = 1.0f;          // Gemm
};

Tensor Ints(DType dtype, std::vector<int64_t> dims, std::mt19937& rng, int lo, int hi) {
  Tensor t = *Tensor::Empty(dtype, dims);
  std::uniform_int_distribution<int> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kU8) {
      t.data<uint8_t>()[i] = static_cast<uint8_t>(d(rng));
    } else {
      t.data<int8_t>()[i] = static_cast<int8_t>(d(rng));
    }
  }
  return t;
}

void Build(GraphBuilder& b, const Case& c) {
  std::mt19937 rng(static_cast<uint32_t>(c.m * 1000 + c.k * 10 + c.n));
  const bool u8 = c.x == DType::kU8;
  Value* xq = c.gemm ? b.Input("x", c.x, {"rows", c.k}) : b.Input("x", c.x, {"batch", c.m, c.k});
  std::vector<Value*> xdq = {
      xq, b.Constant(c.x_per_axis ? testing::F32({c.k}, std::vector<float>(c.k, 0.03f))
                                  : testing::F32({}, {0.03f}))};
  if (c.zero_points) {
    xdq.push_back(b.Constant(c.x_per_axis ? Ints(c.x, {c.k}, rng, 1, 9)
                                          : Ints(c.x, {}, rng, u8 ? 120 : -4, u8 ? 136 : 4)));
  }
  // A Gemm with transB has w [N, K]: its output channels on axis 0 (w_axis names the axis of
  // N, or of K for the near miss, in either layout).
  const bool kn = !(c.gemm && c.trans_b == 1);
  const int64_t ch = c.per_channel ? (c.w_axis == 1 ? c.n : c.k) : 1;
  const int64_t axis = kn ? c.w_axis : 1 - c.w_axis;
  std::vector<float> scales(ch);
  for (float& s : scales) s = 0.002f * static_cast<float>(1 + rng() % 20);
  std::vector<Value*> wdq = {
      b.Constant(
          Ints(DType::kI8, kn ? std::vector<int64_t>{c.k, c.n} : std::vector<int64_t>{c.n, c.k},
               rng, -127, 127),
          "w", true),
      b.Constant(c.per_channel ? testing::F32({ch}, scales) : testing::F32({}, {scales[0]}))};
  if (c.zero_points) {
    wdq.push_back(b.Constant(c.per_channel ? Ints(DType::kI8, {ch}, rng, 0, 0)
                                           : Ints(DType::kI8, {}, rng, 0, 0)));
  }
  Value* xf = b.Op("DequantizeLinear", xdq, {{"axis", AttrInt(-1)}});
  Value* wf = b.Op("DequantizeLinear", wdq, {{"axis", AttrInt(axis)}});
  Value* y = nullptr;
  if (c.gemm) {
    std::vector<Value*> in = {xf, wf};
    if (c.bias) {
      std::vector<float> bias(c.n);
      for (float& v : bias) v = 0.1f * static_cast<float>(static_cast<int>(rng() % 41) - 20);
      in.push_back(b.Constant(testing::F32({c.n}, bias)));
    }
    y = b.Op("Gemm", in, {{"transB", AttrInt(c.trans_b)}, {"alpha", AttrFloat(c.alpha)}});
  } else {
    y = b.Op("MatMul", {xf, wf});
  }
  std::vector<Value*> q = {y, b.Constant(testing::F32({}, {0.05f}))};
  if (c.zero_points) q.push_back(b.Constant(Ints(DType::kU8, {}, rng, 128, 128)));
  b.Output("y", b.Op("QuantizeLinear", q));
  if (c.share_weights) b.Output("wf", wf);
}

// Compiles `c` (optimized or not) and runs it on a batch of 2; outputs and the compile result.
std::vector<Tensor> Run(const Case& c, bool optimize, CompileResult* result) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Build(b, c);
  CompileOptions options;
  options.optimize = optimize;
  absl::StatusOr<CompileResult> r = Compile(m, options);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(
      {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()});
  EXPECT_TRUE(exe.ok()) << exe.status();
  if (!exe.ok()) return {};
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  EXPECT_TRUE(vm.ok()) << vm.status();
  if (!vm.ok()) return {};
  std::mt19937 rng(5);
  const bool u8 = c.x == DType::kU8;
  EXPECT_TRUE((*vm)
                  ->SetInput("x", Ints(c.x,
                                       c.gemm ? std::vector<int64_t>{c.m, c.k}
                                              : std::vector<int64_t>{2, c.m, c.k},
                                       rng, u8 ? 0 : -128, u8 ? 255 : 127))
                  .ok());
  absl::Status s = (*vm)->Run();
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return {};
  *result = *std::move(r);
  return *(*vm)->GetOutputs();
}

bool HasKernel(const CompileResult& r, const std::string& op) {
  for (const KernelReport& k : r.kernels) {
    if (k.op == op) return true;
  }
  return false;
}

// Runs the case fused and unfused; returns whether the rule fired. Fired: every element within
// one quantization step of the unfused program and at least 99% equal; not fired: all equal.
bool FusedMatchesUnfused(const Case& c) {
  CompileResult fused, plain;
  std::vector<Tensor> got = Run(c, true, &fused), want = Run(c, false, &plain);
  EXPECT_EQ(got.size(), want.size());
  if (got.empty() || got.size() != want.size()) return false;
  const std::string rule = c.gemm ? "qdq_gemm" : "qdq_matmul";
  const bool fired = fused.rewrites.count(rule) && fused.rewrites.at(rule) > 0;
  // A Gemm with a bias runs MatMulInteger and f32 scaling; otherwise QLinearMatMul.
  EXPECT_EQ(fired, HasKernel(fused, c.gemm && c.bias ? "MatMulInteger" : "QLinearMatMul"));
  EXPECT_EQ(fired, !HasKernel(fused, c.gemm ? "Gemm" : "MatMul"));
  // transB's Transpose of the constant int8 weights is folded after the rewrites.
  EXPECT_FALSE(HasKernel(fused, "Transpose"));
  if (fired && c.gemm && c.bias) {
    for (const KernelReport& k : fused.kernels) {
      if (k.op == "MatMulInteger") EXPECT_NE(k.chosen.find("dnnl"), std::string::npos) << k.chosen;
    }
  }
  for (size_t o = 0; o < got.size(); ++o) {
    EXPECT_EQ(got[o].dtype(), want[o].dtype());
    EXPECT_EQ(got[o].dims(), want[o].dims());
    const std::vector<double> a = testing::ToDoubles(got[o]), b = testing::ToDoubles(want[o]);
    if (a.size() != b.size()) return fired;
    int64_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_LE(std::fabs(a[i] - b[i]), fired ? 1.0 : 0.0) << "output " << o << " element " << i;
      differ += a[i] != b[i];
    }
    EXPECT_LE(differ * 100, static_cast<int64_t>(a.size())) << differ << " of " << a.size();
  }
  return fired;
}

TEST(QdqTest, MatMulFusesAtEverySize) {
  for (int64_t m : {1, 5}) {
    for (int64_t k : {1, 16, 37}) {
      for (int64_t n : {1, 8, 19}) {
        for (DType x : {DType::kU8, DType::kI8}) {
          for (bool per_channel : {false, true}) {
            for (bool zero_points : {true, false}) {
              SCOPED_TRACE(absl::StrCat("m ", m, " k ", k, " n ", n, " ", DTypeName(x),
                                        per_channel ? " per-channel" : " per-tensor",
                                        zero_points ? "" : " no zero points"));
              Case c{m, k, n, x, per_channel, zero_points};
              EXPECT_TRUE(FusedMatchesUnfused(c));
            }
          }
        }
      }
    }
  }
}

TEST(QdqTest, GemmFusesAtEverySize) {
  for (int64_t m : {1, 5}) {
    for (int64_t k : {1, 16, 37}) {
      for (int64_t n : {1, 8, 19}) {
        for (int64_t trans_b : {0, 1}) {
          for (bool bias : {true, false}) {
            for (bool per_channel : {false, true}) {
              for (DType x : {DType::kU8, DType::kI8}) {
                const bool zero_points = (m + k + n) % 2 == 0;
                SCOPED_TRACE(absl::StrCat("m ", m, " k ", k, " n ", n, " transB ", trans_b,
                                          bias ? " bias " : " no bias ", DTypeName(x),
                                          per_channel ? " per-channel" : " per-tensor",
                                          zero_points ? "" : " no zero points"));
                Case c{m, k, n, x, per_channel, zero_points};
                c.gemm = true;
                c.trans_b = trans_b;
                c.bias = bias;
                EXPECT_TRUE(FusedMatchesUnfused(c));
              }
            }
          }
        }
      }
    }
  }
}

TEST(QdqTest, GemmNearMissesAreLeftAlone) {
  for (int64_t trans_b : {0, 1}) {
    Case per_input_channel;
    per_input_channel.gemm = true;
    per_input_channel.trans_b = trans_b;
    per_input_channel.w_axis = 0;  // w scaled per input channel
    EXPECT_FALSE(FusedMatchesUnfused(per_input_channel));
    Case alpha;
    alpha.gemm = true;
    alpha.trans_b = trans_b;
    alpha.bias = true;
    alpha.alpha = 0.5f;  // a scaled product: not taken
    EXPECT_FALSE(FusedMatchesUnfused(alpha));
    Case shared;
    shared.gemm = true;
    shared.trans_b = trans_b;
    shared.share_weights = true;
    EXPECT_FALSE(FusedMatchesUnfused(shared));
  }
}

TEST(QdqTest, NearMissesAreLeftAlone) {
  Case per_input_channel;
  per_input_channel.w_axis = 0;  // w scaled per row of K: not a per-output-channel scale
  EXPECT_FALSE(FusedMatchesUnfused(per_input_channel));
  Case x_per_axis;
  x_per_axis.x_per_axis = true;
  EXPECT_FALSE(FusedMatchesUnfused(x_per_axis));
  Case shared;
  shared.share_weights = true;  // the dequantized weights are read elsewhere
  EXPECT_FALSE(FusedMatchesUnfused(shared));
}

struct ConvCase {
  int64_t c = 4, m = 6, hw = 7, k = 3, group = 1, stride = 1, pad = 1;
  DType x = DType::kU8;
  bool per_channel = true;
  bool zero_points = true;
  bool bias = false;
  bool int32_bias = false;      // the bias as DequantizeLinear(int32, xs * ws), as quantizers write
  int64_t w_axis = 0;           // the weight DequantizeLinear's axis (1: not fusable)
  bool share_weights = false;   // the dequantized weights also a graph output
  bool share_input = false;     // the dequantized x also a graph output (as a residual reads it)
  bool bias_scale_off = false;  // the int32 bias's scale not exactly xs * ws
};

// QuantizeLinear(Conv(DequantizeLinear(x), DequantizeLinear(w)[, b])) fused and unfused, on a
// batch of 2; returns whether qdq_conv fired, after checking the outputs as FusedMatchesUnfused
// does.
bool ConvFusedMatchesUnfused(const ConvCase& c) {
  std::vector<Tensor> outs[2];
  CompileResult results[2];
  for (int optimize = 0; optimize < 2; ++optimize) {
    std::mt19937 rng(static_cast<uint32_t>(c.c * 100 + c.m * 10 + c.k + c.group));
    const bool u8 = c.x == DType::kU8;
    Module mod;
    GraphBuilder b(mod.AddFunction("main"));
    Value* xq = b.Input("x", c.x, {"batch", c.c, c.hw, c.hw});
    const float xs = 0.03f;
    std::vector<Value*> xdq = {xq, b.Constant(testing::F32({}, {xs}))};
    if (c.zero_points) xdq.push_back(b.Constant(Ints(c.x, {}, rng, u8 ? 120 : -4, u8 ? 136 : 4)));
    const int64_t ch = c.per_channel ? (c.w_axis == 0 ? c.m : c.c / c.group) : 1;
    std::vector<float> scales(ch);
    for (float& s : scales) s = 0.002f * static_cast<float>(1 + rng() % 20);
    std::vector<Value*> wdq = {
        b.Constant(Ints(DType::kI8, {c.m, c.c / c.group, c.k, c.k}, rng, -127, 127), "w", true),
        b.Constant(c.per_channel ? testing::F32({ch}, scales) : testing::F32({}, {scales[0]}))};
    if (c.zero_points) {
      wdq.push_back(b.Constant(c.per_channel ? Ints(DType::kI8, {ch}, rng, 0, 0)
                                             : Ints(DType::kI8, {}, rng, 0, 0)));
    }
    Value* xf = b.Op("DequantizeLinear", xdq);
    Value* wf = b.Op("DequantizeLinear", wdq, {{"axis", AttrInt(c.w_axis)}});
    std::vector<Value*> in = {xf, wf};
    if (c.bias) {
      std::vector<float> bias(c.m);
      for (float& v : bias) v = 0.1f * static_cast<float>(static_cast<int>(rng() % 41) - 20);
      if (c.int32_bias) {
        std::vector<int32_t> bq(c.m);
        std::vector<float> bs(c.m);
        for (int64_t i = 0; i < c.m; ++i) {
          bs[i] = xs * scales[c.per_channel ? i : 0] * (c.bias_scale_off ? 1.0001f : 1.0f);
          bq[i] = static_cast<int32_t>(std::lround(bias[i] / bs[i]));
        }
        in.push_back(b.Op("DequantizeLinear",
                          {b.Constant(*Tensor::FromVector<int32_t>(DType::kI32, {c.m}, bq)),
                           b.Constant(testing::F32({c.m}, bs))},
                          {{"axis", AttrInt(0)}}));
      } else {
        in.push_back(b.Constant(testing::F32({c.m}, bias)));
      }
    }
    Value* y = b.Op("Conv", in,
                    {{"group", AttrInt(c.group)},
                     {"strides", AttrInts({c.stride, c.stride})},
                     {"pads", AttrInts({c.pad, c.pad, c.pad, c.pad})},
                     {"kernel_shape", AttrInts({c.k, c.k})}});
    std::vector<Value*> q = {y, b.Constant(testing::F32({}, {0.05f}))};
    if (c.zero_points) q.push_back(b.Constant(Ints(DType::kU8, {}, rng, 128, 128)));
    b.Output("y", b.Op("QuantizeLinear", q));
    if (c.share_weights) b.Output("wf", wf);
    if (c.share_input) b.Output("xf", xf);
    CompileOptions options;
    options.optimize = optimize == 1;
    absl::StatusOr<CompileResult> r = Compile(mod, options);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return false;
    absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(
        {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()});
    EXPECT_TRUE(exe.ok()) << exe.status();
    if (!exe.ok()) return false;
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
    EXPECT_TRUE(vm.ok()) << vm.status();
    if (!vm.ok()) return false;
    std::mt19937 in_rng(5);
    EXPECT_TRUE(
        (*vm)
            ->SetInput("x", Ints(c.x, {2, c.c, c.hw, c.hw}, in_rng, u8 ? 0 : -128, u8 ? 255 : 127))
            .ok());
    absl::Status s = (*vm)->Run();
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return false;
    outs[optimize] = *(*vm)->GetOutputs();
    results[optimize] = *std::move(r);
  }
  const CompileResult& fused = results[1];
  const bool fired = fused.rewrites.count("qdq_conv") && fused.rewrites.at("qdq_conv") > 0;
  // An int32 bias of scale xs * ws goes into QLinearConv; another bias runs ConvInteger and f32
  // scaling.
  const bool integer_bias = c.int32_bias && !c.bias_scale_off;
  EXPECT_EQ(fired, HasKernel(fused, c.bias && !integer_bias ? "ConvInteger" : "QLinearConv"));
  EXPECT_EQ(fired, !HasKernel(fused, "Conv") && !HasKernel(fused, "dynvm::FusedConv"));
  const std::vector<Tensor>& got = outs[1];
  const std::vector<Tensor>& want = outs[0];
  EXPECT_EQ(got.size(), want.size());
  for (size_t o = 0; o < got.size() && o < want.size(); ++o) {
    EXPECT_EQ(got[o].dims(), want[o].dims());
    const std::vector<double> a = testing::ToDoubles(got[o]), e = testing::ToDoubles(want[o]);
    if (a.size() != e.size()) return fired;
    int64_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_LE(std::fabs(a[i] - e[i]), fired ? 1.0 : 0.0) << "output " << o << " element " << i;
      differ += a[i] != e[i];
    }
    EXPECT_LE(differ * 100, static_cast<int64_t>(a.size())) << differ << " of " << a.size();
  }
  return fired;
}

TEST(QdqTest, ConvFusesAcrossShapes) {
  int i = 0;
  for (auto [cin, m, group] :
       {std::tuple<int64_t, int64_t, int64_t>{4, 6, 1}, {3, 8, 1}, {8, 8, 2}, {6, 6, 6}}) {
    for (auto [k, stride, pad] :
         {std::tuple<int64_t, int64_t, int64_t>{3, 1, 1}, {1, 1, 0}, {3, 2, 0}}) {
      for (bool bias : {false, true}) {
        ConvCase c;
        c.c = cin;
        c.m = m;
        c.group = group;
        c.k = k;
        c.stride = stride;
        c.pad = pad;
        c.bias = bias;
        c.int32_bias = bias && i % 2 == 0;
        c.x = i % 3 == 0 ? DType::kI8 : DType::kU8;
        c.per_channel = i % 4 != 1;
        c.zero_points = i % 5 != 2;
        c.hw = 5 + i % 4;
        ++i;
        SCOPED_TRACE(absl::StrCat("c ", c.c, " m ", c.m, " group ", c.group, " k ", c.k, " stride ",
                                  c.stride, " pad ", c.pad, bias ? " bias" : "",
                                  c.int32_bias ? " (int32)" : "", " ", DTypeName(c.x),
                                  c.per_channel ? " per-channel" : " per-tensor",
                                  c.zero_points ? "" : " no zero points"));
        EXPECT_TRUE(ConvFusedMatchesUnfused(c));
      }
    }
  }
}

TEST(QdqTest, ConvNearMissesAreLeftAlone) {
  ConvCase other_axis;
  other_axis.c = 6;
  other_axis.m = 6;
  other_axis.w_axis = 1;  // per input channel
  EXPECT_FALSE(ConvFusedMatchesUnfused(other_axis));
  ConvCase shared;
  shared.share_weights = true;  // the dequantized weights read elsewhere
  EXPECT_FALSE(ConvFusedMatchesUnfused(shared));
}

// ONNX Runtime's QDQ form: the int32 bias (scale xs * ws, per channel) becomes QLinearConv's; a
// bias scale a little off keeps the ConvInteger form; x's DequantizeLinear read elsewhere too (a
// residual Add) does not stop the fusion.
TEST(QdqTest, ConvTakesInt32BiasAndSharedInput) {
  for (bool off : {false, true}) {
    for (bool share : {false, true}) {
      ConvCase c;
      c.bias = true;
      c.int32_bias = true;
      c.bias_scale_off = off;
      c.share_input = share;
      SCOPED_TRACE(absl::StrCat(off ? "scale off" : "scale xs * ws", share ? ", x shared" : ""));
      EXPECT_TRUE(ConvFusedMatchesUnfused(c));
    }
  }
}

// A chain of three QDQ convolutions (1x1 expand, 3x3 depthwise, 1x1 project; batch 2): after
// qdq_conv, QLinearConvs passing u8 values, which the layout pass keeps channels-last (NHWC)
// between them. `kind` 0: both inner values; 1: the first inner value also a graph output; 2:
// it also dequantized into a graph output (as a residual Add reads it): that value stays
// plain. Returns the values kept channels-last, after checking the outputs against the
// unoptimized program as ConvFusedMatchesUnfused does.
int QuantizedChainLayouts(int kind, DType xt) {
  std::vector<Tensor> outs[2];
  int marked = -1;
  for (int optimize = 0; optimize < 2; ++optimize) {
    std::mt19937 rng(77);
    Module mod;
    GraphBuilder b(mod.AddFunction("main"));
    const bool u8 = xt == DType::kU8;
    Value* v = b.Input("x", xt, {"batch", 8, 9, 9});
    Value* xz = b.Constant(Ints(xt, {}, rng, u8 ? 128 : 0, u8 ? 128 : 0));
    float xs = 0.03f;
    struct Layer {
      int64_t cin, m, k, group;
    };
    const Layer layers[3] = {{8, 16, 1, 1}, {16, 16, 3, 16}, {16, 8, 1, 1}};
    Value* first_inner = nullptr;
    for (int l = 0; l < 3; ++l) {
      const Layer& ly = layers[l];
      std::vector<float> ws(ly.m);
      for (float& s : ws) s = 0.002f * static_cast<float>(1 + rng() % 20);
      Value* xf = b.Op("DequantizeLinear", {v, b.Constant(testing::F32({}, {xs})), xz});
      Value* wf = b.Op(
          "DequantizeLinear",
          {b.Constant(Ints(DType::kI8, {ly.m, ly.cin / ly.group, ly.k, ly.k}, rng, -100, 100), "w",
                      true),
           b.Constant(testing::F32({ly.m}, ws)), b.Constant(Ints(DType::kI8, {ly.m}, rng, 0, 0))},
          {{"axis", AttrInt(0)}});
      const int64_t pad = ly.k / 2;
      Value* y = b.Op("Conv", {xf, wf},
                      {{"group", AttrInt(ly.group)},
                       {"pads", AttrInts({pad, pad, pad, pad})},
                       {"kernel_shape", AttrInts({ly.k, ly.k})}});
      xs = 0.05f;
      xz = b.Constant(Ints(DType::kU8, {}, rng, 0, 0));
      v = b.Op("QuantizeLinear", {y, b.Constant(testing::F32({}, {xs})), xz});
      if (l == 0) first_inner = v;
    }
    b.Output("y", v);
    if (kind == 1) b.Output("inner", first_inner);
    if (kind == 2) {
      b.Output("inner_f32",
               b.Op("DequantizeLinear", {first_inner, b.Constant(testing::F32({}, {0.05f})), xz}));
    }
    CompileOptions options;
    options.optimize = optimize == 1;
    absl::StatusOr<CompileResult> r = Compile(mod, options);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return -1;
    if (optimize == 1) {
      EXPECT_EQ(r->rewrites.count("qdq_conv") ? r->rewrites.at("qdq_conv") : 0, 3);
      const auto it = r->conv_fusion.find("quantized_channels_last_values");
      marked = it == r->conv_fusion.end() ? 0 : it->second;
    }
    absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(
        {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()});
    EXPECT_TRUE(exe.ok()) << exe.status();
    if (!exe.ok()) return -1;
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
    EXPECT_TRUE(vm.ok()) << vm.status();
    if (!vm.ok()) return -1;
    std::mt19937 in_rng(5);
    EXPECT_TRUE(
        (*vm)->SetInput("x", Ints(xt, {2, 8, 9, 9}, in_rng, u8 ? 0 : -128, u8 ? 255 : 127)).ok());
    absl::Status s = (*vm)->Run();
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return -1;
    outs[optimize] = *(*vm)->GetOutputs();
  }
  EXPECT_EQ(outs[0].size(), outs[1].size());
  for (size_t o = 0; o < outs[0].size() && o < outs[1].size(); ++o) {
    EXPECT_EQ(outs[1][o].dims(), outs[0][o].dims());
    const std::vector<double> a = testing::ToDoubles(outs[1][o]),
                              e = testing::ToDoubles(outs[0][o]);
    if (a.size() != e.size()) return marked;
    int64_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      // A requantization tie may move a value by one step (its f32 image: 0.05 in f32 units).
      EXPECT_LE(std::fabs(a[i] - e[i]), o == 0 || kind != 2 ? 1.0 : 0.0501)
          << "output " << o << " element " << i;
      differ += a[i] != e[i];
    }
    EXPECT_LE(differ * 100, static_cast<int64_t>(a.size())) << differ << " of " << a.size();
  }
  return marked;
}

TEST(QdqTest, QLinearConvChainsStayChannelsLast) {
  for (DType xt : {DType::kU8, DType::kI8}) {
    SCOPED_TRACE(DTypeName(xt));
    EXPECT_EQ(QuantizedChainLayouts(0, xt), 2);
    EXPECT_EQ(QuantizedChainLayouts(1, xt), 1);  // near miss: the inner value is an output
    EXPECT_EQ(QuantizedChainLayouts(2, xt), 1);  // near miss: a DequantizeLinear reads it too
  }
}

// A residual block as ONNX Runtime's QDQ quantizer writes it (a 1x1 stem; 1x1 expand, 3x3
// depthwise, 1x1 project; DequantizeLinear of the stem's and the project's outputs into an Add,
// quantized; DequantizeLinear -> Relu -> QuantizeLinear; a 1x1 conv after it): qdq_add makes a
// QLinearAdd of the Add, qdq_requantize_relu a Requantize of the Relu, and the layout pass keeps
// the whole block channels-last (the four QLinearConvs inside write channels-last values, the
// Add and the Requantize pass them on). `threads`: the VM's. Checks the outputs against the
// unoptimized program (one quantization step at a tie, under 1% of them); returns the values
// kept channels-last.
int ResidualBlockLayouts(DType xt, int threads) {
  std::vector<Tensor> outs[2];
  int marked = -1;
  for (int optimize = 0; optimize < 2; ++optimize) {
    std::mt19937 rng(91);
    Module mod;
    GraphBuilder b(mod.AddFunction("main"));
    const bool u8 = xt == DType::kU8;
    Value* v = b.Input("x", xt, {"batch", 8, 11, 7});
    Value* z = b.Constant(Ints(xt, {}, rng, u8 ? 128 : 0, u8 ? 128 : 0));
    float s = 0.03f;
    Value* stem = nullptr;
    float stem_s = 0;
    Value* stem_z = nullptr;
    auto conv = [&](int64_t cin, int64_t m, int64_t k, int64_t group) {
      std::vector<float> ws(m);
      for (float& w : ws) w = 0.002f * static_cast<float>(1 + rng() % 20);
      Value* xf = b.Op("DequantizeLinear", {v, b.Constant(testing::F32({}, {s})), z});
      Value* wf =
          b.Op("DequantizeLinear",
               {b.Constant(Ints(DType::kI8, {m, cin / group, k, k}, rng, -100, 100), "w", true),
                b.Constant(testing::F32({m}, ws)), b.Constant(Ints(DType::kI8, {m}, rng, 0, 0))},
               {{"axis", AttrInt(0)}});
      const int64_t pad = k / 2;
      Value* y = b.Op("Conv", {xf, wf},
                      {{"group", AttrInt(group)},
                       {"pads", AttrInts({pad, pad, pad, pad})},
                       {"kernel_shape", AttrInts({k, k})}});
      s = 0.05f;
      z = b.Constant(Ints(DType::kU8, {}, rng, 100, 100));
      v = b.Op("QuantizeLinear", {y, b.Constant(testing::F32({}, {s})), z});
    };
    conv(8, 8, 1, 1);
    stem = v;
    stem_s = s;
    stem_z = z;
    conv(8, 16, 1, 1);
    conv(16, 16, 3, 16);
    conv(16, 8, 1, 1);
    Value* sum = b.Op(
        "Add", {b.Op("DequantizeLinear", {stem, b.Constant(testing::F32({}, {stem_s})), stem_z}),
                b.Op("DequantizeLinear", {v, b.Constant(testing::F32({}, {s})), z})});
    Value* sz = b.Constant(Ints(DType::kU8, {}, rng, 120, 120));
    Value* sq = b.Op("QuantizeLinear", {sum, b.Constant(testing::F32({}, {0.07f})), sz});
    Value* relu =
        b.Op("Relu", {b.Op("DequantizeLinear", {sq, b.Constant(testing::F32({}, {0.07f})), sz})});
    z = b.Constant(Ints(DType::kU8, {}, rng, 0, 0));
    s = 0.04f;
    v = b.Op("QuantizeLinear", {relu, b.Constant(testing::F32({}, {s})), z});
    conv(8, 8, 1, 1);
    b.Output("y", v);
    CompileOptions options;
    options.optimize = optimize == 1;
    absl::StatusOr<CompileResult> r = Compile(mod, options);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return -1;
    if (optimize == 1) {
      for (const char* rule : {"qdq_add", "qdq_requantize_relu"}) {
        EXPECT_EQ(r->rewrites.count(rule) ? r->rewrites.at(rule) : 0, 1) << rule;
      }
      const auto it = r->conv_fusion.find("quantized_channels_last_values");
      marked = it == r->conv_fusion.end() ? 0 : it->second;
    }
    absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(
        {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()});
    EXPECT_TRUE(exe.ok()) << exe.status();
    if (!exe.ok()) return -1;
    VmOptions vm_options;
    vm_options.num_threads = threads;
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe, vm_options);
    EXPECT_TRUE(vm.ok()) << vm.status();
    if (!vm.ok()) return -1;
    std::mt19937 in_rng(5);
    EXPECT_TRUE(
        (*vm)->SetInput("x", Ints(xt, {3, 8, 11, 7}, in_rng, u8 ? 0 : -128, u8 ? 255 : 127)).ok());
    absl::Status st = (*vm)->Run();
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) return -1;
    outs[optimize] = *(*vm)->GetOutputs();
  }
  EXPECT_EQ(outs[0].size(), 1u);
  EXPECT_EQ(outs[1].size(), 1u);
  if (outs[0].size() != 1 || outs[1].size() != 1) return marked;
  const std::vector<double> a = testing::ToDoubles(outs[1][0]), e = testing::ToDoubles(outs[0][0]);
  EXPECT_EQ(a.size(), e.size());
  int64_t differ = 0;
  for (size_t i = 0; i < a.size() && i < e.size(); ++i) {
    EXPECT_LE(std::fabs(a[i] - e[i]), 1.0) << "element " << i;
    differ += a[i] != e[i];
  }
  EXPECT_LE(differ * 100, static_cast<int64_t>(a.size())) << differ << " of " << a.size();
  return marked;
}

TEST(QdqTest, ResidualBlocksStayChannelsLast) {
  for (DType xt : {DType::kU8, DType::kI8}) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(xt), ", ", threads, " threads"));
      EXPECT_EQ(ResidualBlockLayouts(xt, threads), 4);
    }
  }
}

}  // namespace
}  // namespace dynvm::compiler::rewrite
