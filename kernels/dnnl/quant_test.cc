// The oneDNN backend's quantization kernels against the reference kernels (the oracle), exactly:
// QuantizeLinear / DequantizeLinear per tensor and per axis (values on rounding ties included),
// MatMulInteger and QLinearMatMul over varied M, K, N, batches, u8/s8 activations, zero points
// and per-column scales. Each case also asserts who served it: the fast path (oneDNN's integer
// GEMM on a CPU with VNNI, the VNNI-free GEMM of igemm.h without it; the vector loops always),
// the reference fallback for the cases it does not take. The integer convolutions also run the
// im2col kernel on its own (qconv.cc hands it every run on a CPU without VNNI).
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/heap_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/dnnl/choice.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/qconv_check.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;

bool CpuHasVnni() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return (isa & dnnl_cpu_isa_avx512_core_vnni) == dnnl_cpu_isa_avx512_core_vnni ||
         (isa & dnnl_cpu_isa_avx2_vnni) == dnnl_cpu_isa_avx2_vnni;
}

// Runs `call` on the dnnl backend's kernel (the im2col convolution kernel when `im2col`) and on
// the reference kernel; expects identical outputs and `want_fast` runs served without the
// reference fallback, on `threads` threads (products of 4M multiply-adds and more split).
void ExpectSameAsReference(KernelCall call, const std::vector<Tensor>& inputs, bool want_fast,
                           bool im2col = false, int threads = 1) {
  absl::StatusOr<std::vector<Tensor>> want = KernelCall(call).Backend("reference").Run();
  ASSERT_TRUE(want.ok()) << want.status();
  KernelSpec spec = call.spec();
  spec.backend = "dnnl";
  absl::StatusOr<std::unique_ptr<Kernel>> k = im2col
                                                  ? CreateIm2ColConv(spec, spec.op == "QLinearConv")
                                                  : KernelRegistry::Global().Create(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  const auto* dnnl = dynamic_cast<const DnnlKernel*>(k->get());
  ASSERT_NE(dnnl, nullptr);
  KernelContext ctx(&HeapAllocator::Get(), threads);
  std::vector<const Tensor*> in;
  for (const Tensor& t : inputs) in.push_back(&t);
  Tensor out;
  std::vector<Tensor*> outs = {&out};
  absl::Status s = (*k)->Run(ctx, in, outs);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out.dtype(), (*want)[0].dtype());
  EXPECT_EQ(out.dims(), (*want)[0].dims());
  EXPECT_EQ(testing::ToDoubles(out), testing::ToDoubles((*want)[0])) << dnnl->name();
  EXPECT_EQ(dnnl->fallback_runs(), want_fast ? 0 : 1) << dnnl->name();
}

TEST(DnnlQuant, QuantizeAndDequantizeMatchTheReferenceExactly) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-40, 40);
  for (DType q : {DType::kU8, DType::kI8}) {
    for (int64_t axis : {-1, 0, 1, 2}) {
      for (bool per_axis : {false, true}) {
        SCOPED_TRACE(absl::StrCat(DTypeName(q), " axis ", axis, " per_axis ", per_axis));
        const std::vector<int64_t> dims = {3, 5, 7};
        const int64_t ch = per_axis ? dims[axis < 0 ? axis + 3 : axis] : 1;
        std::vector<float> scales(ch);
        for (float& s : scales) s = 0.05f + 0.1f * static_cast<float>(rng() % 10);
        Tensor scale = per_axis ? testing::F32({ch}, scales) : testing::F32({}, {scales[0]});
        Tensor zp = *Tensor::Empty(q, per_axis ? std::vector<int64_t>{ch} : std::vector<int64_t>{});
        for (int64_t c = 0; c < ch; ++c) {
          if (q == DType::kU8) {
            zp.data<uint8_t>()[c] = static_cast<uint8_t>(100 + c);
          } else {
            zp.data<int8_t>()[c] = static_cast<int8_t>(-3 + c);
          }
        }
        // Every fourth value lies on a rounding tie (k + 0.5) * scale.
        Tensor x = *Tensor::Empty(DType::kF32, dims);
        for (int64_t i = 0; i < x.numel(); ++i) {
          x.data<float>()[i] = i % 4 == 0 ? (static_cast<float>(i % 9) - 4.5f) * scales[0] : u(rng);
        }
        KernelCall quant("QuantizeLinear");
        quant.In(x).In(scale).In(zp).Out(q).Attr("axis", axis);
        ExpectSameAsReference(quant, {x, scale, zp}, true);
        Tensor xq = testing::RandomInt8(q, dims, rng);
        KernelCall dequant("DequantizeLinear");
        dequant.In(xq).In(scale).In(zp).Out(DType::kF32).Attr("axis", axis);
        ExpectSameAsReference(dequant, {xq, scale, zp}, true);
      }
    }
  }
  // From 32K elements at 2 threads the loops split in 16K blocks, a block spanning channels:
  // per tensor and per axis (axis 1: rows of 200), u8 and i8, against the reference.
  for (DType q : {DType::kU8, DType::kI8}) {
    for (bool per_axis : {false, true}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(q), " 2 threads, per_axis ", per_axis));
      const std::vector<int64_t> dims = {3, 130, 200};
      const int64_t ch = per_axis ? 130 : 1;
      std::vector<float> scales(ch);
      for (float& v : scales) v = 0.05f + 0.1f * static_cast<float>(rng() % 10);
      Tensor scale = per_axis ? testing::F32({ch}, scales) : testing::F32({}, {scales[0]});
      Tensor zp =
          testing::RandomInt8(q, per_axis ? std::vector<int64_t>{ch} : std::vector<int64_t>{}, rng);
      Tensor x = *Tensor::Empty(DType::kF32, dims);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
      KernelCall quant("QuantizeLinear");
      quant.In(x).In(scale).In(zp).Out(q).Attr("axis", int64_t{1});
      ExpectSameAsReference(quant, {x, scale, zp}, true, false, /*threads=*/2);
      Tensor xq = testing::RandomInt8(q, dims, rng);
      KernelCall dequant("DequantizeLinear");
      dequant.In(xq).In(scale).In(zp).Out(DType::kF32).Attr("axis", int64_t{1});
      ExpectSameAsReference(dequant, {xq, scale, zp}, true, false, /*threads=*/2);
    }
  }
  // No zero point: u8.
  Tensor x = testing::F32({4}, {-1.0f, 0.5f, 1.5f, 300.0f}), s = testing::F32({}, {1.0f});
  KernelCall q("QuantizeLinear");
  q.In(x).In(s).Out(DType::kU8);
  ExpectSameAsReference(q, {x, s}, true);
}

TEST(DnnlQuant, IntegerMatMulsMatchTheReferenceExactly) {
  std::mt19937 rng(11);
  // oneDNN's GEMM with VNNI, igemm.h's without: the fast path either way.
  const bool vnni = true;
  struct Shape {
    std::vector<int64_t> a, b;
  };
  const std::vector<Shape> shapes = {
      {{1, 1}, {1, 1}},    {{1, 64}, {64, 33}},     {{3, 17}, {17, 5}},   {{64, 300}, {300, 48}},
      {{7, 33}, {33, 49}}, {{130, 512}, {512, 70}}, {{2, 3, 40}, {40, 9}}};
  for (DType at : {DType::kU8, DType::kI8}) {
    for (const Shape& sh : shapes) {
      SCOPED_TRACE(absl::StrCat(DTypeName(at), " a ", sh.a.size(), "-D K ", sh.b[0]));
      Tensor a = testing::RandomInt8(at, sh.a, rng), b = testing::RandomInt8(DType::kI8, sh.b, rng);
      Tensor za = testing::Int8Scalar(at, at == DType::kU8 ? 128 : -5),
             zb = testing::Int8Scalar(DType::kI8, 3);
      KernelCall mm("MatMulInteger");
      mm.In(a).In(b).In(za).In(zb).Out(DType::kI32);
      ExpectSameAsReference(mm, {a, b, za, zb}, vnni);
      ExpectSameAsReference(mm, {a, b, za, zb}, vnni, false, /*threads=*/2);

      const int64_t n = sh.b[1];
      std::vector<float> bs(n);
      for (float& v : bs) v = 0.001f * static_cast<float>(1 + rng() % 50);
      for (DType yt : {DType::kU8, DType::kI8}) {
        for (bool per_column : {false, true}) {
          Tensor as = testing::F32({}, {0.02f}), ys = testing::F32({}, {0.7f});
          Tensor bsc = per_column ? testing::F32({n}, bs) : testing::F32({}, {bs[0]});
          Tensor yz = testing::Int8Scalar(yt, yt == DType::kU8 ? 120 : 4);
          KernelCall ql("QLinearMatMul");
          ql.In(a).In(as).In(za).In(b).In(bsc).In(zb).In(ys).In(yz).Out(yt);
          ExpectSameAsReference(ql, {a, as, za, b, bsc, zb, ys, yz}, vnni);
        }
      }
    }
  }
  // Per-column zero points of one repeated value (symmetric per-channel weights) take the fast
  // path; differing ones do not.
  for (int varied : {0, 1}) {
    Tensor a = testing::RandomInt8(DType::kU8, {5, 24}, rng),
           b = testing::RandomInt8(DType::kI8, {24, 6}, rng);
    Tensor za = testing::Int8Scalar(DType::kU8, 128), zb = *Tensor::Empty(DType::kI8, {6});
    for (int64_t j = 0; j < 6; ++j) zb.data<int8_t>()[j] = static_cast<int8_t>(varied * j);
    Tensor as = testing::F32({}, {0.02f}), ys = testing::F32({}, {0.7f});
    Tensor bs = testing::F32({6}, {0.01f, 0.02f, 0.03f, 0.04f, 0.05f, 0.06f});
    Tensor yz = testing::Int8Scalar(DType::kU8, 128);
    KernelCall ql("QLinearMatMul");
    ql.In(a).In(as).In(za).In(b).In(bs).In(zb).In(ys).In(yz).Out(DType::kU8);
    ExpectSameAsReference(ql, {a, as, za, b, bs, zb, ys, yz}, vnni && varied == 0);
  }
  // u8 weights (shifted to s8) take the fast path; per-row zero points do not.
  Tensor a = testing::RandomInt8(DType::kU8, {4, 8}, rng),
         b = testing::RandomInt8(DType::kU8, {8, 3}, rng);
  for (int64_t m : {1, 4}) {  // M = 1 runs the vector loop, M = 4 the GEMM
    Tensor am = testing::RandomInt8(DType::kU8, {m, 8}, rng);
    for (int zb : {0, 200}) {
      Tensor za = testing::Int8Scalar(DType::kU8, 7), zbt = testing::Int8Scalar(DType::kU8, zb);
      KernelCall mm("MatMulInteger");
      mm.In(am).In(b).In(za).In(zbt).Out(DType::kI32);
      ExpectSameAsReference(mm, {am, b, za, zbt}, vnni);
    }
  }
  Tensor b8 = testing::RandomInt8(DType::kI8, {8, 3}, rng),
         za = testing::RandomInt8(DType::kU8, {4}, rng);
  KernelCall rows("MatMulInteger");
  rows.In(a).In(b8).In(za).Out(DType::kI32);
  ExpectSameAsReference(rows, {a, b8, za}, false);
}

TEST(DnnlQuant, IntegerConvsMatchTheReferenceExactly) {
  std::mt19937 rng(13);
  const bool vnni = CpuHasVnni();
  struct Conv {
    int64_t c, hw, m, k, stride, pad, dilation;
  };
  const std::vector<Conv> convs = {{1, 5, 1, 1, 1, 0, 1},
                                   {3, 7, 4, 3, 1, 1, 1},
                                   {8, 9, 5, 3, 2, 1, 1},
                                   {2, 8, 3, 2, 1, 0, 2},
                                   {4, 6, 6, 3, 2, 2, 1}};
  for (DType xt : {DType::kU8, DType::kI8}) {
    for (const Conv& cv : convs) {
      SCOPED_TRACE(absl::StrCat(DTypeName(xt), " c ", cv.c, " hw ", cv.hw, " m ", cv.m, " k ", cv.k,
                                " s ", cv.stride, " p ", cv.pad, " d ", cv.dilation));
      Tensor x = testing::RandomInt8(xt, {2, cv.c, cv.hw, cv.hw}, rng);
      Tensor w = testing::RandomInt8(DType::kI8, {cv.m, cv.c, cv.k, cv.k}, rng);
      Tensor xz = testing::Int8Scalar(xt, xt == DType::kU8 ? 131 : -7),
             wz = testing::Int8Scalar(DType::kI8, 0);
      auto attrs = [&](KernelCall& call) {
        call.Attr("strides", std::vector<int64_t>{cv.stride, cv.stride})
            .Attr("pads", std::vector<int64_t>{cv.pad, cv.pad, cv.pad, cv.pad})
            .Attr("dilations", std::vector<int64_t>{cv.dilation, cv.dilation});
      };
      KernelCall ci("ConvInteger");
      ci.In(x).In(w).In(xz).In(wz).Out(DType::kI32);
      attrs(ci);
      ExpectSameAsReference(ci, {x, w, xz, wz}, vnni);
      ExpectSameAsReference(ci, {x, w, xz, wz}, true, /*im2col=*/true);
      std::vector<float> ws(cv.m);
      for (float& v : ws) v = 0.001f * static_cast<float>(1 + rng() % 30);
      Tensor bias = *Tensor::Empty(DType::kI32, {cv.m});
      for (int64_t i = 0; i < cv.m; ++i)
        bias.data<int32_t>()[i] = static_cast<int32_t>(i * 97) - 150;
      for (DType yt : {DType::kU8, DType::kI8}) {
        Tensor xs = testing::F32({}, {0.03f}), wsc = testing::F32({cv.m}, ws);
        Tensor ys = testing::F32({}, {0.4f}),
               yz = testing::Int8Scalar(yt, yt == DType::kU8 ? 100 : 3);
        KernelCall ql("QLinearConv");
        ql.In(x).In(xs).In(xz).In(w).In(wsc).In(wz).In(ys).In(yz).In(bias).Out(yt);
        attrs(ql);
        // The primitive requantizes in f32 (ONNX Runtime's arithmetic): identical but at ties.
        qconv_check::Requant q;
        absl::StatusOr<std::vector<Tensor>> sums = KernelCall(ci).Backend("reference").Run();
        ASSERT_TRUE(sums.ok()) << sums.status();
        q.sums = (*sums)[0];
        q.zy = yt == DType::kU8 ? 100 : 3;
        for (int64_t i = 0; i < cv.m; ++i) {
          q.bias.push_back(bias.data<int32_t>()[i]);
          q.scale.push_back(0.03 * static_cast<double>(ws[static_cast<size_t>(i)]) / 0.4);
        }
        qconv_check::ExpectQLinearAsReference(ql, {x, xs, xz, w, wsc, wz, ys, yz, bias}, vnni, q);
        ExpectSameAsReference(ql, {x, xs, xz, w, wsc, wz, ys, yz, bias}, true, /*im2col=*/true);
      }
    }
  }
  // Groups run on oneDNN's int8 convolution (qconv.cc); u8 weights are the reference's.
  Tensor x = testing::RandomInt8(DType::kU8, {1, 4, 5, 5}, rng);
  Tensor wg = testing::RandomInt8(DType::kI8, {2, 2, 3, 3}, rng),
         wu = testing::RandomInt8(DType::kU8, {2, 4, 3, 3}, rng);
  KernelCall grouped("ConvInteger");
  grouped.In(x).In(wg).Out(DType::kI32).Attr("group", int64_t{2});
  ExpectSameAsReference(grouped, {x, wg}, vnni);
  KernelCall unsigned_w("ConvInteger");
  unsigned_w.In(x).In(wu).Out(DType::kI32);
  ExpectSameAsReference(unsigned_w, {x, wu}, false);
  // A non-zero weight zero point and batches of 2, big enough to split on 2 threads: the im2col
  // kernel (w packed once per run).
  Tensor x3 = testing::RandomInt8(DType::kI8, {2, 32, 20, 20}, rng);
  Tensor w3 = testing::RandomInt8(DType::kI8, {40, 32, 3, 3}, rng);
  Tensor xz = testing::Int8Scalar(DType::kI8, 100), wz = testing::Int8Scalar(DType::kI8, -77);
  KernelCall nz("ConvInteger");
  nz.In(x3).In(w3).In(xz).In(wz).Out(DType::kI32).Attr("pads", std::vector<int64_t>{1, 1, 1, 1});
  for (int threads : {1, 2}) ExpectSameAsReference(nz, {x3, w3, xz, wz}, true, true, threads);
}

// DynamicQuantizeMatMul (com.microsoft; the form quantize_dynamic writes, fused by the
// dynquant_matmul rewrite) against the reference kernel, bit for bit, on every microkernel
// level the CPU has (AVX2 and AVX-512 here: cpu::ScopedIsaForTesting) and both integer GEMMs
// (oneDNN's with VNNI, igemm.h's: choice::ForceForTesting) and, for a constant B, the packed
// u8 x s8 GEMM (u8s8_gemm.h: VPDPBUSD at avx512_vnni, scalar below): M = 1 and more, leading
// batch dims, s8 and u8 B, per-tensor and per-column scales and zero points (differing ones
// taken out after the GEMM), with and without bias, 1 and 2 threads, an all-zero A (scale 0).
TEST(DnnlQuant, DynamicQuantizeMatMulMatchesTheReferenceExactly) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-3, 5);
  struct Shape {
    std::vector<int64_t> a;
    int64_t n;
  };
  const std::vector<Shape> shapes = {{{1, 1}, 1},
                                     {{1, 64}, 33},
                                     {{3, 17}, 5},
                                     {{2, 5, 40}, 48},
                                     {{130, 96}, 70},
                                     {{1, 7, 256}, 64},
                                     {{64, 300}, 19},
                                     // From 4M multiply-adds the packed product splits at 2
                                     // threads: by chunks of panels, and (few panels, many
                                     // rows) by chunks of rows.
                                     {{64, 256}, 256},
                                     {{1100, 64}, 60},
                                     // A of 76800 elements: its min and max scanned in blocks
                                     // at 2 threads, the last one partial.
                                     {{300, 256}, 80},
                                     // M = 1 from 512K multiply-adds: the GEMV's panels split
                                     // at 2 threads (33 panels, the last one partial).
                                     {{1, 1024}, 520}};
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting level(isa);
    for (bool igemm : {false, true}) {
      choice::ForceForTesting(choice::Rule::kIGemm, igemm);
      for (const Shape& sh : shapes) {
        const int64_t k = sh.a.back(), n = sh.n;
        Tensor a = *Tensor::Empty(DType::kF32, sh.a);
        for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = u(rng);
        for (DType bt : {DType::kI8, DType::kU8}) {
          for (int form = 0; form < 4; ++form) {  // bit 0: per column; bit 1: zero point, bias
            const bool per_column = form & 1, with_zp = form & 2;
            SCOPED_TRACE(absl::StrCat(cpu::IsaName(isa), igemm ? " igemm" : " dnnl", " a ",
                                      sh.a.size(), "-D K ", k, " N ", n, " ", DTypeName(bt),
                                      per_column ? " per column" : " per tensor",
                                      with_zp ? " zp bias" : ""));
            Tensor b = testing::RandomInt8(bt, {k, n}, rng);
            std::vector<float> scales(per_column ? n : 1);
            for (float& v : scales) v = 0.001f * static_cast<float>(1 + rng() % 50);
            Tensor bs = per_column ? testing::F32({n}, scales) : testing::F32({}, scales);
            Tensor zb = testing::RandomInt8(
                bt, per_column ? std::vector<int64_t>{n} : std::vector<int64_t>{}, rng);
            std::vector<float> bias_values(n);
            for (float& v : bias_values) v = u(rng);
            Tensor bias = testing::F32({n}, bias_values);
            for (int64_t constant : {0, 1}) {  // 1: B packed once (cpu::U8S8Gemm with VNNI)
              KernelCall call("DynamicQuantizeMatMul", "com.microsoft");
              call.In(a).In(b).In(bs);
              std::vector<Tensor> in = {a, b, bs};
              if (with_zp) {
                call.In(zb).In(bias);
                in.push_back(zb);
                in.push_back(bias);
              }
              call.Out(DType::kF32).Attr("constant_weights", constant);
              ExpectSameAsReference(call, in, true);
              ExpectSameAsReference(call, in, true, false, /*threads=*/2);
            }
          }
        }
      }
      choice::ForceForTesting(choice::Rule::kIGemm, std::nullopt);
    }
  }
  // All zeros: the scale is 0 and every product 0; the output is the bias.
  Tensor zeros = testing::F32({2, 4}, std::vector<float>(8, 0.0f));
  Tensor b = testing::RandomInt8(DType::kI8, {4, 3}, rng), bs = testing::F32({}, {0.5f});
  Tensor zb = testing::Int8Scalar(DType::kI8, 0), bias = testing::F32({3}, {1.0f, -2.0f, 3.0f});
  KernelCall call("DynamicQuantizeMatMul", "com.microsoft");
  call.In(zeros).In(b).In(bs).In(zb).In(bias).Out(DType::kF32);
  ExpectSameAsReference(call, {zeros, b, bs, zb, bias}, true);
  // A B of rank 3 is the reference's (it refuses it, naming B).
  Tensor b3 = testing::RandomInt8(DType::kI8, {1, 4, 3}, rng);
  KernelCall bad("DynamicQuantizeMatMul", "com.microsoft");
  bad.In(zeros).In(b3).In(bs).Out(DType::kF32);
  absl::StatusOr<std::vector<Tensor>> r = KernelCall(bad).Backend("dnnl").Run();
  EXPECT_FALSE(r.ok());
}

// DynamicQuantizeLinear against the reference kernel, bit for bit, on every level: ranges on
// both sides of 0, all positive and all negative values, all zeros (scale 0), values on rounding
// ties, sizes around the vector widths, 1 and 2 threads.
TEST(DnnlQuant, DynamicQuantizeLinearMatchesTheReferenceExactly) {
  std::mt19937 rng(31);
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting level(isa);
    for (int64_t n : {1, 15, 16, 17, 100, 40000, 70000}) {  // 70000: scanned in blocks
      for (int range = 0; range < 4; ++range) {
        SCOPED_TRACE(absl::StrCat(cpu::IsaName(isa), " n ", n, " range ", range));
        const float lo = range == 1 ? 0.5f : -3.0f, hi = range == 2 ? -0.25f : 7.0f;
        std::uniform_real_distribution<float> u(lo, hi);
        Tensor x = *Tensor::Empty(DType::kF32, {n});
        for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = range == 3 ? 0.0f : u(rng);
        if (range == 0 && n > 2) {  // ties: (k + 0.5) * scale once the scale is known
          const float scale = (hi - lo) / 255.0f;
          x.data<float>()[0] = lo;
          x.data<float>()[1] = hi;
          x.data<float>()[2] = 10.5f * scale;
        }
        KernelCall dq("DynamicQuantizeLinear");
        dq.In(x).Out(DType::kU8).Out(DType::kF32).Out(DType::kU8);
        absl::StatusOr<std::vector<Tensor>> want = KernelCall(dq).Backend("reference").Run();
        ASSERT_TRUE(want.ok()) << want.status();
        for (int threads : {1, 2}) {
          KernelSpec spec = dq.spec();
          spec.backend = "dnnl";
          absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
          ASSERT_TRUE(k.ok()) << k.status();
          KernelContext ctx(&HeapAllocator::Get(), threads);
          Tensor y, s, z;
          std::vector<Tensor*> outs = {&y, &s, &z};
          std::vector<const Tensor*> ins = {&x};
          ASSERT_TRUE((*k)->Run(ctx, ins, outs).ok());
          EXPECT_EQ(testing::ToDoubles(y), testing::ToDoubles((*want)[0]));
          EXPECT_EQ(testing::ToDoubles(s), testing::ToDoubles((*want)[1]));
          EXPECT_EQ(testing::ToDoubles(z), testing::ToDoubles((*want)[2]));
          EXPECT_EQ(dynamic_cast<const DnnlKernel*>(k->get())->fallback_runs(), 0);
        }
      }
    }
  }
}

// An infinity anywhere in x, also in a later block of the 2-thread scan, sends
// DynamicQuantizeLinear and DynamicQuantizeMatMul to the reference kernel at 1 and 2 threads.
TEST(DnnlQuant, DynamicQuantizationOfAnInfinityFallsBackAtEveryThreadCount) {
  for (int64_t at : {int64_t{5}, int64_t{69999}}) {
    Tensor x = *Tensor::Empty(DType::kF32, {700, 100});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 13) - 6;
    x.data<float>()[at] = std::numeric_limits<float>::infinity();
    for (int threads : {1, 2}) {
      SCOPED_TRACE(absl::StrCat("infinity at ", at, ", threads ", threads));
      KernelCall dq("DynamicQuantizeLinear");
      dq.In(x).Out(DType::kU8).Out(DType::kF32).Out(DType::kU8);
      KernelSpec spec = dq.spec();
      spec.backend = "dnnl";
      absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
      ASSERT_TRUE(k.ok()) << k.status();
      KernelContext ctx(&HeapAllocator::Get(), threads);
      Tensor y, s, z;
      std::vector<Tensor*> outs = {&y, &s, &z};
      std::vector<const Tensor*> ins = {&x};
      (void)(*k)->Run(ctx, ins, outs);
      EXPECT_EQ(dynamic_cast<const DnnlKernel*>(k->get())->fallback_runs(), 1);
    }
  }
}

TEST(DnnlQuant, BadScaleIsInvalidArgumentOnTheFastPathToo) {
  Tensor x = testing::F32({4}, {1, 2, 3, 4});
  for (float bad : {0.0f, -0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    Tensor s = testing::F32({}, {bad});
    KernelCall q("QuantizeLinear");
    q.In(x).In(s).Out(DType::kU8).Backend("dnnl");
    absl::StatusOr<std::vector<Tensor>> r = q.Run();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr("scale must be finite and positive"));
  }
  // Per axis: the message names the bad element (CheckQuantScale's one-pass check finds it
  // bad, its naming loop finds which).
  Tensor x2 = testing::F32({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor s4 = testing::F32({4}, {0.5f, 1.0f, std::numeric_limits<float>::infinity(), 2.0f});
  KernelCall q("QuantizeLinear");
  q.In(x2).In(s4).Out(DType::kU8).Attr("axis", int64_t{1}).Backend("dnnl");
  absl::StatusOr<std::vector<Tensor>> r = q.Run();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("element 2 is inf"));
}

}  // namespace
}  // namespace dynvm::onednn
