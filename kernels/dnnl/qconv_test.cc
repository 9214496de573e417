// ConvInteger and QLinearConv on oneDNN's int8 convolution (qconv.cc) against the reference
// kernels (the oracle), exactly (QLinearConv: identical but at f32's rounding ties, where the
// primitive's f32 requantization, ONNX Runtime's, may differ by one: ExpectQLinearAsReference):
// random shapes with 1-3 spatial dims, groups, strides, pads
// (explicit and SAME), dilations, u8 and i8 x and y, non-zero x and y zero points, per-tensor
// and per-channel weight scales, with and without bias. Each case also asserts who served it:
// the primitive on a CPU with VNNI, the fallback (im2col or reference) for non-zero weight zero
// points, u8 weights, and sums too large for oneDNN's f32 store to keep exact. The 1-D and 2-D
// cases also run the im2col kernel (quant.cc) on its own, which must serve them without the
// reference: on a CPU without VNNI the primitive hands it every run (its GEMM is then igemm.h's).
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allocator/heap_allocator.h"
#include "gtest/gtest.h"
#include "kernels/channels_last.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/conv.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/qconv_check.h"
#include "kernels/registry.h"
#include "kernels/testing.h"
#include "kernels/thread_pool.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;

bool CpuHasVnni() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return (isa & dnnl_cpu_isa_avx512_core_vnni) == dnnl_cpu_isa_avx512_core_vnni ||
         (isa & dnnl_cpu_isa_avx2_vnni) == dnnl_cpu_isa_avx2_vnni;
}

Tensor Ints(DType dtype, const std::vector<int64_t>& dims, std::mt19937& rng, int lo, int hi) {
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

Tensor Full(DType dtype, const std::vector<int64_t>& dims, std::mt19937& rng) {
  return Ints(dtype, dims, rng, dtype == DType::kU8 ? 0 : -128, dtype == DType::kU8 ? 255 : 127);
}

Tensor Scalar(DType dtype, int v) {
  std::mt19937 rng(0);
  return Ints(dtype, {}, rng, v, v);
}

// Runs `call` on the dnnl kernel (twice, on one site: the second run reuses the bound
// primitive) and on the reference kernel; expects identical outputs, and every run served
// without the fallback when `want_fast`, by it otherwise, binding `want_binds` primitives (one
// per part of a run split over `threads` threads).
void ExpectSameAsReference(const KernelCall& call, const std::vector<Tensor>& inputs,
                           bool want_fast, int threads = 1, int want_binds = 1) {
  absl::StatusOr<std::vector<Tensor>> want = KernelCall(call).Backend("reference").Run();
  ASSERT_TRUE(want.ok()) << want.status();
  KernelSpec spec = call.spec();
  spec.backend = "dnnl";
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  const auto* dnnl = dynamic_cast<const DnnlKernel*>(k->get());
  ASSERT_NE(dnnl, nullptr);
  KernelContext ctx(&HeapAllocator::Get(), threads);
  std::vector<const Tensor*> in;
  for (const Tensor& t : inputs) in.push_back(&t);
  for (int run = 0; run < 2; ++run) {
    Tensor out;
    std::vector<Tensor*> outs = {&out};
    absl::Status s = (*k)->Run(ctx, in, outs);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(out.dtype(), (*want)[0].dtype());
    ASSERT_EQ(out.dims(), (*want)[0].dims());
    EXPECT_EQ(testing::ToDoubles(out), testing::ToDoubles((*want)[0])) << dnnl->name();
  }
  EXPECT_EQ(dnnl->fallback_runs(), want_fast ? 0 : 2) << dnnl->name();
  if (want_fast) {
    EXPECT_EQ(GetConvCacheStats(ctx.state().get()).binds, want_binds);
  }
}

// Runs `call` on the im2col kernel alone and on the reference kernel; expects identical outputs,
// served without the reference.
void ExpectIm2ColSameAsReference(const KernelCall& call, const std::vector<Tensor>& inputs) {
  absl::StatusOr<std::vector<Tensor>> want = KernelCall(call).Backend("reference").Run();
  ASSERT_TRUE(want.ok()) << want.status();
  KernelSpec spec = call.spec();
  spec.backend = "dnnl";
  absl::StatusOr<std::unique_ptr<Kernel>> k = CreateIm2ColConv(spec, spec.op == "QLinearConv");
  ASSERT_TRUE(k.ok()) << k.status();
  const auto* dnnl = dynamic_cast<const DnnlKernel*>(k->get());
  ASSERT_NE(dnnl, nullptr);
  KernelContext ctx(&HeapAllocator::Get(), 1);
  std::vector<const Tensor*> in;
  for (const Tensor& t : inputs) in.push_back(&t);
  Tensor out;
  std::vector<Tensor*> outs = {&out};
  absl::Status s = (*k)->Run(ctx, in, outs);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(out.dims(), (*want)[0].dims());
  EXPECT_EQ(testing::ToDoubles(out), testing::ToDoubles((*want)[0])) << dnnl->name();
  EXPECT_EQ(dnnl->fallback_runs(), 0) << dnnl->name();
}

struct Case {
  std::vector<int64_t> x_dims, w_dims, strides, pads, dilations;
  int64_t group = 1;
  std::string auto_pad = "NOTSET";
};

// A random convolution with `k` spatial dims.
Case RandomCase(int k, std::mt19937& rng) {
  auto pick = [&rng](int lo, int hi) {
    return static_cast<int64_t>(std::uniform_int_distribution<int>(lo, hi)(rng));
  };
  Case c;
  c.group = pick(0, 2) == 0 ? pick(2, 3) : 1;
  const int64_t cin = c.group * pick(1, 5), m = c.group * pick(1, 6);
  c.x_dims = {pick(1, 2), cin};
  c.w_dims = {m, cin / c.group};
  const int64_t modes = pick(0, 3);
  c.auto_pad = modes == 0 ? "SAME_UPPER" : modes == 1 ? "SAME_LOWER" : "NOTSET";
  std::vector<int64_t> lo, hi;
  for (int i = 0; i < k; ++i) {
    const int64_t kd = pick(1, 3), dl = pick(1, 2), st = pick(1, 2);
    const int64_t ext = (kd - 1) * dl + 1;
    c.x_dims.push_back(ext + pick(0, k == 3 ? 4 : 9));
    c.w_dims.push_back(kd);
    c.strides.push_back(st);
    c.dilations.push_back(dl);
    lo.push_back(pick(0, 2));
    hi.push_back(pick(0, 2));
  }
  if (c.auto_pad == "NOTSET") {
    c.pads = lo;
    c.pads.insert(c.pads.end(), hi.begin(), hi.end());
  }
  return c;
}

// Whether the convolution pads its input (SAME pads computed as ONNX does).
bool Padded(const Case& c) {
  if (c.auto_pad == "NOTSET") {
    for (int64_t p : c.pads) {
      if (p != 0) return true;
    }
    return false;
  }
  for (size_t i = 0; i < c.strides.size(); ++i) {
    const int64_t in = c.x_dims[i + 2], s = c.strides[i];
    const int64_t ext = (c.w_dims[i + 2] - 1) * c.dilations[i] + 1;
    if (((in + s - 1) / s - 1) * s + ext - in > 0) return true;
  }
  return false;
}

void Attrs(const Case& c, KernelCall& call) {
  call.Attr("strides", c.strides)
      .Attr("dilations", c.dilations)
      .Attr("group", c.group)
      .Attr("auto_pad", c.auto_pad);
  if (!c.pads.empty()) call.Attr("pads", c.pads);
}

TEST(DnnlQConv, RandomConvsMatchTheReferenceExactly) {
  std::mt19937 rng(19);
  const bool vnni = CpuHasVnni();
  for (int trial = 0; trial < 60; ++trial) {
    const int k = 1 + trial % 3;
    const Case c = RandomCase(k, rng);
    const DType xt = trial % 2 == 0 ? DType::kU8 : DType::kI8;
    const DType yt = trial % 4 < 2 ? DType::kU8 : DType::kI8;
    const int64_t m = c.w_dims[0];
    SCOPED_TRACE(absl::StrCat("trial ", trial, " x ", absl::StrJoin(c.x_dims, "x"), " w ",
                              absl::StrJoin(c.w_dims, "x"), " group ", c.group, " ", c.auto_pad,
                              " s ", absl::StrJoin(c.strides, ","), " p ",
                              absl::StrJoin(c.pads, ","), " d ", absl::StrJoin(c.dilations, ","),
                              " ", DTypeName(xt), "->", DTypeName(yt)));
    Tensor x = Full(xt, c.x_dims, rng), w = Full(DType::kI8, c.w_dims, rng);
    const int zx = xt == DType::kU8 ? 121 + trial : -9 + trial / 4;
    Tensor xz = Scalar(xt, zx);
    // oneDNN 2.6.3 pads 3-D convolutions with a non-zero zero point wrongly (qconv.cc).
    const bool fast = vnni && !(k == 3 && zx != 0 && Padded(c));
    const bool per_channel_wz = trial % 3 == 0;
    Tensor wz = per_channel_wz ? *Tensor::Empty(DType::kI8, {m}) : Scalar(DType::kI8, 0);
    if (per_channel_wz) {
      for (int64_t i = 0; i < m; ++i) wz.data<int8_t>()[i] = 0;
    }
    KernelCall ci("ConvInteger");
    ci.In(x).In(w).In(xz).In(wz).Out(DType::kI32);
    Attrs(c, ci);
    ExpectSameAsReference(ci, {x, w, xz, wz}, fast);
    if (k <= 2) ExpectIm2ColSameAsReference(ci, {x, w, xz, wz});
    const bool per_channel = trial % 2 == 1;
    std::vector<float> ws(per_channel ? m : 1);
    for (float& v : ws) v = 0.0005f * static_cast<float>(1 + rng() % 40);
    Tensor xs = testing::F32({}, {0.02f}), wsc = testing::F32({per_channel ? m : 1}, ws);
    if (!per_channel) wsc = testing::F32({}, ws);
    Tensor ys = testing::F32({}, {0.3f + 0.01f * static_cast<float>(trial)});
    Tensor yz = Scalar(yt, yt == DType::kU8 ? 90 + trial : -5 + trial / 5);
    Tensor b32 = *Tensor::Empty(DType::kI32, {m});
    for (int64_t i = 0; i < m; ++i) {
      b32.data<int32_t>()[i] = static_cast<int32_t>(rng() % 60001) - 30000;
    }
    KernelCall ql("QLinearConv");
    ql.In(x).In(xs).In(xz).In(w).In(wsc).In(wz).In(ys).In(yz);
    if (trial % 5 != 0) ql.In(b32);
    ql.Out(yt);
    Attrs(c, ql);
    qconv_check::Requant q;
    absl::StatusOr<std::vector<Tensor>> sums = KernelCall(ci).Backend("reference").Run();
    ASSERT_TRUE(sums.ok()) << sums.status();
    q.sums = (*sums)[0];
    q.zy = yt == DType::kU8 ? 90 + trial : -5 + trial / 5;
    for (int64_t i = 0; i < m; ++i) {
      q.bias.push_back(trial % 5 != 0 ? b32.data<int32_t>()[i] : 0);
      q.scale.push_back(0.02 * static_cast<double>(ws[per_channel ? static_cast<size_t>(i) : 0]) /
                        static_cast<double>(ys.data<float>()[0]));
    }
    if (trial % 5 != 0) {
      qconv_check::ExpectQLinearAsReference(ql, {x, xs, xz, w, wsc, wz, ys, yz, b32}, fast, q);
      if (k <= 2) ExpectIm2ColSameAsReference(ql, {x, xs, xz, w, wsc, wz, ys, yz, b32});
    } else {
      qconv_check::ExpectQLinearAsReference(ql, {x, xs, xz, w, wsc, wz, ys, yz}, fast, q);
      if (k <= 2) ExpectIm2ColSameAsReference(ql, {x, xs, xz, w, wsc, wz, ys, yz});
    }
  }
}

// Layers of a quantized CNN's size (ResNet-like shapes, 3x3 and 1x1, strided, depthwise), u8 and
// s8 x and y, zero points across their range, scales spread over four orders of magnitude per
// output channel, s32 biases: the requantization inside the primitive against the reference,
// outputs identical but at f32's ties (ExpectQLinearAsReference). Ties are rare: under one
// output in ten thousand.
TEST(DnnlQConv, RequantizationInThePrimitiveMatchesTheReference) {
  std::mt19937 rng(41);
  struct Layer {
    Case c;
    DType xt, yt;
  };
  const std::vector<Layer> layers = {
      {{{1, 64, 14, 14}, {64, 64, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}}, DType::kU8, DType::kU8},
      {{{2, 32, 15, 15}, {64, 32, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}}, DType::kU8, DType::kI8},
      {{{1, 128, 7, 7}, {96, 128, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}}, DType::kI8, DType::kU8},
      {{{1, 48, 12, 12}, {48, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 48}, DType::kI8, DType::kI8},
      {{{3, 3, 32, 32}, {16, 3, 7, 7}, {2, 2}, {3, 3, 3, 3}, {1, 1}}, DType::kU8, DType::kU8},
  };
  int64_t ties = 0, outputs = 0;
  for (size_t li = 0; li < layers.size(); ++li) {
    const Layer& l = layers[li];
    const Case& c = l.c;
    SCOPED_TRACE(absl::StrCat("layer ", li, " x ", absl::StrJoin(c.x_dims, "x"), " w ",
                              absl::StrJoin(c.w_dims, "x"), " ", DTypeName(l.xt), "->",
                              DTypeName(l.yt)));
    const int64_t m = c.w_dims[0];
    Tensor x = Full(l.xt, c.x_dims, rng), w = Ints(DType::kI8, c.w_dims, rng, -60, 60);
    for (int zi = 0; zi < 3; ++zi) {
      const int zx = l.xt == DType::kU8 ? std::vector<int>{0, 128, 255}[zi]
                                        : std::vector<int>{-128, 0, 127}[zi];
      const int zy = l.yt == DType::kU8 ? std::vector<int>{255, 0, 131}[zi]
                                        : std::vector<int>{127, -3, -128}[zi];
      Tensor xz = Scalar(l.xt, zx), yz = Scalar(l.yt, zy);
      KernelCall ci("ConvInteger");
      ci.In(x).In(w).In(xz).Out(DType::kI32);
      Attrs(c, ci);
      absl::StatusOr<std::vector<Tensor>> sums = ci.Backend("reference").Run();
      ASSERT_TRUE(sums.ok()) << sums.status();
      std::vector<float> ws(static_cast<size_t>(m));
      for (float& v : ws)
        v = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 999.0f,
                       -static_cast<int>(rng() % 14) - 4);
      const float xsv = 0.0173f, ysv = 0.071f * static_cast<float>(1 + zi);
      Tensor xs = testing::F32({}, {xsv}), wsc = testing::F32({m}, ws);
      Tensor ys = testing::F32({}, {ysv});
      Tensor b32 = *Tensor::Empty(DType::kI32, {m});
      qconv_check::Requant q;
      q.sums = (*sums)[0];
      q.zy = zy;
      for (int64_t i = 0; i < m; ++i) {
        b32.data<int32_t>()[i] = static_cast<int32_t>(rng() % 200001) - 100000;
        q.bias.push_back(b32.data<int32_t>()[i]);
        q.scale.push_back(static_cast<double>(xsv) * ws[static_cast<size_t>(i)] / ysv);
      }
      Tensor wz = Scalar(DType::kI8, 0);
      KernelCall ql("QLinearConv");
      ql.In(x).In(xs).In(xz).In(w).In(wsc).In(wz).In(ys).In(yz).In(b32).Out(l.yt);
      Attrs(c, ql);
      ties += qconv_check::ExpectQLinearAsReference(ql, {x, xs, xz, w, wsc, wz, ys, yz, b32},
                                                    CpuHasVnni(), q);
      outputs += 2 * q.sums.numel();
    }
  }
  EXPECT_LT(ties * 10000, outputs) << ties << " ties in " << outputs << " outputs";
}

// Runs the kernel `make` creates for `call` on `inputs` (twice, one site, `threads` threads); its
// output.
Tensor RunOnce(const KernelCall& call, const std::vector<Tensor>& inputs, bool im2col,
               int threads = 1) {
  KernelSpec spec = call.spec();
  spec.backend = "dnnl";
  absl::StatusOr<std::unique_ptr<Kernel>> k =
      im2col ? CreateIm2ColConv(spec, true) : KernelRegistry::Global().Create(spec);
  EXPECT_TRUE(k.ok()) << k.status();
  if (!k.ok()) return Tensor();
  KernelContext ctx(&HeapAllocator::Get(), threads);
  std::vector<const Tensor*> in;
  for (const Tensor& t : inputs) in.push_back(&t);
  Tensor out;
  for (int run = 0; run < 2; ++run) {
    out = Tensor();
    std::vector<Tensor*> outs = {&out};
    absl::Status s = (*k)->Run(ctx, in, outs);
    EXPECT_TRUE(s.ok()) << s;
  }
  return out;
}

// QLinearConv reading and writing channels-last u8/s8 (flags "channels_last_in" / "_out", set
// by the compiler's layout pass on chains): the primitive, the im2col kernel (1-D, 2-D) and the
// reference, each against itself on the plain layout, bit for bit, with x permuted on the way
// in and y on the way out (kernels/channels_last.h, itself checked by element against the
// plain index). Cases the primitive hands to its fallback (a weight zero point) too.
TEST(DnnlQConv, ChannelsLastMatchesThePlainLayout) {
  std::mt19937 rng(53);
  // PermuteChannels8 against the index arithmetic.
  Tensor t = Full(DType::kU8, {2, 3, 4, 5}, rng);
  absl::StatusOr<Tensor> cl = PermuteChannels8(t, true);
  ASSERT_TRUE(cl.ok()) << cl.status();
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t s = 0; s < 20; ++s) {
        ASSERT_EQ(cl->data<uint8_t>()[(n * 20 + s) * 3 + c],
                  t.data<uint8_t>()[(n * 3 + c) * 20 + s]);
      }
    }
  }
  EXPECT_FALSE(PermuteChannels8(Tensor::Scalar(1.0f), true).ok());
  for (int trial = 0; trial < 24; ++trial) {
    const int k = 1 + trial % 3;
    const Case c = RandomCase(k, rng);
    const DType xt = trial % 2 == 0 ? DType::kU8 : DType::kI8;
    const DType yt = trial % 4 < 2 ? DType::kU8 : DType::kI8;
    const int64_t m = c.w_dims[0];
    SCOPED_TRACE(absl::StrCat("trial ", trial, " x ", absl::StrJoin(c.x_dims, "x"), " w ",
                              absl::StrJoin(c.w_dims, "x"), " group ", c.group));
    Tensor x = Full(xt, c.x_dims, rng), w = Full(DType::kI8, c.w_dims, rng);
    Tensor xz = Scalar(xt, xt == DType::kU8 ? 120 : -3);
    Tensor wz = Scalar(DType::kI8, trial % 6 == 5 ? 2 : 0);  // non-zero: the fallback
    std::vector<float> ws(static_cast<size_t>(m));
    for (float& v : ws) v = 0.0005f * static_cast<float>(1 + rng() % 40);
    Tensor xs = testing::F32({}, {0.02f}), wsc = testing::F32({m}, ws);
    Tensor ys = testing::F32({}, {0.37f}), yz = Scalar(yt, yt == DType::kU8 ? 100 : 4);
    Tensor b32 = *Tensor::Empty(DType::kI32, {m});
    for (int64_t i = 0; i < m; ++i) {
      b32.data<int32_t>()[i] = static_cast<int32_t>(rng() % 20001) - 10000;
    }
    Tensor xcl = *PermuteChannels8(x, true);
    for (int impl = 0; impl < 3; ++impl) {  // the registry's kernel, im2col, the reference
      if (impl == 1 && k == 3) continue;    // the im2col kernel is 1-D and 2-D only
      for (int flags = 1; flags < 4; ++flags) {
        const bool in_cl = flags & 1, out_cl = flags & 2;
        SCOPED_TRACE(absl::StrCat("impl ", impl, " in ", in_cl, " out ", out_cl));
        const std::vector<Tensor> plain_in = {x, xs, xz, w, wsc, wz, ys, yz, b32};
        std::vector<Tensor> flagged_in = plain_in;
        if (in_cl) flagged_in[0] = xcl;
        auto make = [&](const std::vector<Tensor>& ins, bool flag) {
          KernelCall call("QLinearConv");
          for (const Tensor& v : ins) call.In(v);
          call.Out(yt);
          Attrs(c, call);
          if (flag) {
            call.Attr("channels_last_in", int64_t{in_cl})
                .Attr("channels_last_out", int64_t{out_cl});
          }
          return call;
        };
        const KernelCall plain = make(plain_in, false), flagged = make(flagged_in, true);
        Tensor want, got;
        if (impl == 2) {
          absl::StatusOr<std::vector<Tensor>> a = KernelCall(plain).Backend("reference").Run();
          absl::StatusOr<std::vector<Tensor>> b = KernelCall(flagged).Backend("reference").Run();
          ASSERT_TRUE(a.ok()) << a.status();
          ASSERT_TRUE(b.ok()) << b.status();
          want = (*a)[0];
          got = (*b)[0];
        } else {
          want = RunOnce(plain, plain_in, impl == 1);
          got = RunOnce(flagged, flagged_in, impl == 1);
        }
        ASSERT_TRUE(got.defined() && want.defined());
        if (out_cl) got = *PermuteChannels8(got, false);
        EXPECT_EQ(testing::ToDoubles(got), testing::ToDoubles(want));
      }
    }
  }
}

// A convolution of at least 1M multiply-adds with more than one thread splits over the VM's
// pool (no OpenMP team): whole images where the batch divides evenly over the threads (or has
// 4 per thread), else each image's output rows in one block per thread, each block bound with
// the padding that falls inside it. Against the reference kernels at 2 and 3 threads, batch 1
// and more, odd sizes, strides, dilations, pads, groups, 1-D and 2-D: ConvInteger exactly,
// QLinearConv as ExpectQLinearAsReference allows; the split asserted by the primitives bound
// (one per row block); the channels-last flags bit for bit against the plain layout.
TEST(DnnlQConv, SplitOverTheThreadsMatchesTheReference) {
  if (!CpuHasVnni()) GTEST_SKIP() << "the split is the primitive's, which needs VNNI";
  ASSERT_TRUE(SetMaxThreads(4).ok());  // 3 threads on a 2-CPU machine too
  std::mt19937 rng(61);
  struct Split {
    Case c;
    int binds2, binds3;  // primitives bound at 2 and 3 threads
  };
  const std::vector<Split> cases = {
      {{{1, 16, 37, 29}, {32, 16, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}}, 2, 3},
      {{{3, 8, 45, 31}, {24, 8, 3, 3}, {2, 2}, {2, 1, 2, 1}, {2, 2}}, 2, 1},
      {{{4, 48, 33, 27}, {48, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 48}, 1, 3},
      {{{1, 64, 301}, {64, 64, 5}, {1}, {2, 2}, {1}}, 2, 3},
      {{{1, 96, 23, 23}, {96, 1, 3, 3}, {2, 2}, {0, 0, 1, 1}, {1, 1}, 96, "SAME_UPPER"}, 0, 0},
      {{{2, 40, 17, 19}, {80, 40, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}}, 1, 1},
      // A depthwise conv of 451K multiply-adds: counted 4 times (kDepthwiseWeight), it splits.
      {{{1, 64, 56, 56}, {64, 1, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 64}, 2, 3},
  };
  for (size_t ci_ = 0; ci_ < cases.size(); ++ci_) {
    Case c = cases[ci_].c;
    if (c.auto_pad != "NOTSET") c.pads.clear();
    const int64_t m = c.w_dims[0];
    Tensor x = Full(DType::kU8, c.x_dims, rng), w = Ints(DType::kI8, c.w_dims, rng, -70, 70);
    Tensor xz = Scalar(DType::kU8, 117), wz = Scalar(DType::kI8, 0);
    std::vector<float> ws(static_cast<size_t>(m));
    for (float& v : ws) v = 0.0002f * static_cast<float>(1 + rng() % 40);
    const float xsv = 0.02f, ysv = 0.41f;
    Tensor xs = testing::F32({}, {xsv}), wsc = testing::F32({m}, ws);
    Tensor ys = testing::F32({}, {ysv}), yz = Scalar(DType::kU8, 96);
    Tensor b32 = *Tensor::Empty(DType::kI32, {m});
    for (int64_t i = 0; i < m; ++i) {
      b32.data<int32_t>()[i] = static_cast<int32_t>(rng() % 20001) - 10000;
    }
    KernelCall ci("ConvInteger");
    ci.In(x).In(w).In(xz).Out(DType::kI32);
    Attrs(c, ci);
    absl::StatusOr<std::vector<Tensor>> sums = KernelCall(ci).Backend("reference").Run();
    ASSERT_TRUE(sums.ok()) << sums.status();
    qconv_check::Requant q;
    q.sums = (*sums)[0];
    q.zy = 96;
    for (int64_t i = 0; i < m; ++i) {
      q.bias.push_back(b32.data<int32_t>()[i]);
      q.scale.push_back(static_cast<double>(xsv) * ws[static_cast<size_t>(i)] / ysv);
    }
    const std::vector<Tensor> plain_in = {x, xs, xz, w, wsc, wz, ys, yz, b32};
    for (int threads : {2, 3}) {
      SCOPED_TRACE(absl::StrCat("case ", ci_, " x ", absl::StrJoin(c.x_dims, "x"), " w ",
                                absl::StrJoin(c.w_dims, "x"), ", ", threads, " threads"));
      // Case 4 has 124K multiply-adds (depthwise: 498K counted): below the split, one thread.
      const int binds = threads == 2 ? cases[ci_].binds2 : cases[ci_].binds3;
      ExpectSameAsReference(ci, {x, w, xz}, true, threads, binds == 0 ? 1 : binds);
      KernelCall ql("QLinearConv");
      for (const Tensor& v : plain_in) ql.In(v);
      ql.Out(DType::kU8);
      Attrs(c, ql);
      qconv_check::ExpectQLinearAsReference(ql, plain_in, true, q, threads, binds == 0 ? 1 : binds);
      const Tensor plain = RunOnce(ql, plain_in, false, threads);
      for (int flags = 1; flags < 4; ++flags) {
        const bool in_cl = flags & 1, out_cl = flags & 2;
        SCOPED_TRACE(absl::StrCat("in ", in_cl, " out ", out_cl));
        std::vector<Tensor> flagged_in = plain_in;
        if (in_cl) flagged_in[0] = *PermuteChannels8(x, true);
        KernelCall fl("QLinearConv");
        for (const Tensor& v : flagged_in) fl.In(v);
        fl.Out(DType::kU8);
        Attrs(c, fl);
        fl.Attr("channels_last_in", int64_t{in_cl}).Attr("channels_last_out", int64_t{out_cl});
        Tensor got = RunOnce(fl, flagged_in, false, threads);
        ASSERT_TRUE(got.defined() && plain.defined());
        if (out_cl) got = *PermuteChannels8(got, false);
        EXPECT_EQ(testing::ToDoubles(got), testing::ToDoubles(plain));
      }
    }
  }
}

// MLAS rounds (sum + bias) * scale half to even, then adds y's zero point; oneDNN alone adds the
// zero point in f32 first. With sum 21 and scale 0.50000006 (the f32 after 0.5) the product is
// the f32 just above 10.5, which rounds to 11 (111 with the zero point 100, as the reference's
// exact value 10.50000125 does too); 10.5000009 + 100 in f32 is 110.5, which would round to 110.
TEST(DnnlQConv, RoundsBeforeTheZeroPointAsMlas) {
  const float above_half = std::nextafter(0.5f, 1.0f);
  Tensor x = *Tensor::Empty(DType::kU8, {1, 1, 1, 1});
  x.data<uint8_t>()[0] = 21;
  Tensor w = *Tensor::Empty(DType::kI8, {1, 1, 1, 1});
  w.data<int8_t>()[0] = 1;
  const std::vector<Tensor> in = {x,
                                  testing::F32({}, {1.0f}),
                                  Scalar(DType::kU8, 0),
                                  w,
                                  testing::F32({}, {above_half}),
                                  Scalar(DType::kI8, 0),
                                  testing::F32({}, {1.0f}),
                                  Scalar(DType::kU8, 100)};
  KernelCall call("QLinearConv");
  for (const Tensor& t : in) call.In(t);
  call.Out(DType::kU8);
  for (const char* backend : {"dnnl", "reference"}) {
    absl::StatusOr<std::vector<Tensor>> y = KernelCall(call).Backend(backend).Run();
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ((*y)[0].data<uint8_t>()[0], 111) << backend;
  }
}

// constant_weights = 1 (the compiler's mark for an executable's constant w): the packed weights
// are kept per bound entry and reordered again only for another tensor. Scales of powers of two
// make every requantization exact in f32 and double alike, so outputs equal the reference's.
TEST(DnnlQConv, ConstantWeightsArePackedOnce) {
  std::mt19937 rng(71);
  const Case c{{2, 16, 9, 7}, {24, 16, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}};
  Tensor x = Full(DType::kU8, c.x_dims, rng);
  Tensor w1 = Ints(DType::kI8, c.w_dims, rng, -100, 100);
  Tensor w2 = Ints(DType::kI8, c.w_dims, rng, -100, 100);
  auto call = [&](const Tensor& w) {
    KernelCall k("QLinearConv");
    k.In(x).In(testing::F32({}, {1.0f})).In(Scalar(DType::kU8, 128)).In(w);
    k.In(testing::F32({}, {0.25f})).In(Scalar(DType::kI8, 0)).In(testing::F32({}, {64.0f}));
    k.In(Scalar(DType::kU8, 100)).Out(DType::kU8);
    Attrs(c, k);
    k.Attr("constant_weights", int64_t{1});
    return k;
  };
  KernelSpec spec = call(w1).spec();
  spec.backend = "dnnl";
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  KernelContext ctx(&HeapAllocator::Get(), 1);
  for (const Tensor* w : {&w1, &w1, &w2, &w1}) {
    absl::StatusOr<std::vector<Tensor>> want = call(*w).Backend("reference").Run();
    ASSERT_TRUE(want.ok()) << want.status();
    const KernelCall kc = call(*w);
    Tensor out;
    std::vector<Tensor*> outs = {&out};
    ASSERT_TRUE((*k)->Run(ctx, kc.inputs(), outs).ok());
    EXPECT_EQ(testing::ToDoubles(out), testing::ToDoubles((*want)[0]));
  }
  EXPECT_EQ(dynamic_cast<const DnnlKernel*>(k->get())->fallback_runs(), CpuHasVnni() ? 0 : 4);
}

TEST(DnnlQConv, WhatThePrimitiveCannotDoIsStillExact) {
  std::mt19937 rng(23);
  const Case c{{1, 4, 7, 7}, {6, 4, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}};
  Tensor x = Full(DType::kU8, c.x_dims, rng), w = Full(DType::kI8, c.w_dims, rng);
  Tensor xz = Scalar(DType::kU8, 128);
  // A non-zero weight zero point (oneDNN 2.6 has none): the im2col kernel.
  Tensor wz = Scalar(DType::kI8, 3);
  KernelCall ci("ConvInteger");
  ci.In(x).In(w).In(xz).In(wz).Out(DType::kI32);
  Attrs(c, ci);
  ExpectSameAsReference(ci, {x, w, xz, wz}, false);
  ExpectIm2ColSameAsReference(ci, {x, w, xz, wz});
  // u8 weights.
  Tensor wu = Full(DType::kU8, c.w_dims, rng);
  KernelCall cu("ConvInteger");
  cu.In(x).In(wu).Out(DType::kI32);
  Attrs(c, cu);
  ExpectSameAsReference(cu, {x, wu}, false);
  // Sums that reach 2^24 (|w| 127 over 2048 taps, x spanning 0..255 around a zero point of 0):
  // oneDNN's f32 store rounds them, so the run is redone by the fallback.
  const Case big{{1, 512, 3, 3}, {2, 512, 2, 2}, {1, 1}, {0, 0, 0, 0}, {1, 1}};
  Tensor xb = Full(DType::kU8, big.x_dims, rng);
  Tensor wb = Ints(DType::kI8, big.w_dims, rng, 127, 127);
  xb.data<uint8_t>()[0] = 255;
  KernelCall cb("ConvInteger");
  cb.In(xb).In(wb).Out(DType::kI32);
  Attrs(big, cb);
  ExpectSameAsReference(cb, {xb, wb}, false);
  // The same weights on small activations stay on the primitive.
  Tensor xsmall = Ints(DType::kU8, big.x_dims, rng, 0, 15);
  KernelCall cs("ConvInteger");
  cs.In(xsmall).In(wb).Out(DType::kI32);
  Attrs(big, cs);
  ExpectSameAsReference(cs, {xsmall, wb}, CpuHasVnni());
  // Large raw sums that the zero point brings back below 2^24 (x mostly equal to its zero point
  // at the top of its range, w all large and positive): oneDNN takes the zero point out in
  // integers, so these stay on the primitive, exact.
  for (DType xt : {DType::kU8, DType::kI8}) {
    const int z = xt == DType::kU8 ? 255 : 127;
    const Case zc{{1, 512, 5, 5}, {4, 512, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}};
    Tensor xr = Ints(xt, zc.x_dims, rng, z, z);
    Tensor noise = Full(xt, {50}, rng);
    for (int64_t i = 0; i < 50; ++i) {
      const int64_t at = static_cast<int64_t>(rng() % static_cast<uint32_t>(xr.numel()));
      if (xt == DType::kU8) {
        xr.data<uint8_t>()[at] = noise.data<uint8_t>()[i];
      } else {
        xr.data<int8_t>()[at] = noise.data<int8_t>()[i];
      }
    }
    Tensor wr = Ints(DType::kI8, zc.w_dims, rng, 100, 127);
    Tensor zr = Scalar(xt, z);
    KernelCall cr("ConvInteger");
    cr.In(xr).In(wr).In(zr).Out(DType::kI32);
    Attrs(zc, cr);
    ExpectSameAsReference(cr, {xr, wr, zr}, CpuHasVnni());
  }
  // 3-D, padded, with a non-zero x zero point: oneDNN 2.6.3 gets the padded border wrong
  // (found by RandomConvsMatchTheReferenceExactly); the im2col kernel serves it.
  const Case pad3{{1, 3, 5, 6, 4}, {2, 3, 3, 3, 2}, {1, 2, 1}, {0, 1, 1, 1, 0, 1}, {1, 1, 1}};
  Tensor x3 = Full(DType::kU8, pad3.x_dims, rng), w3 = Full(DType::kI8, pad3.w_dims, rng);
  Tensor z3 = Scalar(DType::kU8, 100);
  KernelCall c3("ConvInteger");
  c3.In(x3).In(w3).In(z3).Out(DType::kI32);
  Attrs(pad3, c3);
  ExpectSameAsReference(c3, {x3, w3, z3}, false);
  // ... and with a zero point of 0 it runs on the primitive.
  Tensor z0 = Scalar(DType::kU8, 0);
  KernelCall c0("ConvInteger");
  c0.In(x3).In(w3).In(z0).Out(DType::kI32);
  Attrs(pad3, c0);
  ExpectSameAsReference(c0, {x3, w3, z0}, CpuHasVnni());
}

}  // namespace
}  // namespace dynvm::onednn
