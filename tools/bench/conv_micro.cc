// conv-micro: per-shape timings behind two layout/kernel decisions of the dnnl conv kernel
// (kernels/dnnl/conv.cc; docs/kernels.md, conv section), on this machine, 1 thread:
//
//  1. 1x1 stride-1 convolutions between channels-last (NHWC) tensors, the shapes of
//     torchvision's mobilenet_v2 at batch 8 and 1 (224x224) and a few others: oneDNN's
//     convolution (jit_1x1 on AVX2) with bias, Clip(0, 6) or the residual as post-ops, against
//     the same product as GEMMs Y[P, M] = X[P, C] W^T over the pixels read in place
//     (dnnl_sgemm over blocks of 64, 256 or 1024 rows or all P at once, the bias, residual and
//     activation applied to each block while it is in cache).
//  2. A first conv (3 plain NCHW input channels, 3x3 or 7x7 stride 2) into a channels-last
//     output: oneDNN's choice (plain source, blocked destination, reordered into NHWC after)
//     against the source reordered into NHWC and an NHWC -> NHWC convolution.
//  3. A 1x1 expansion (Clip(0, 6)) followed by a 3x3 depthwise conv (stride 1 or 2, Clip(0, 6)),
//     NHWC: two oneDNN convolutions against one 1x1 convolution with oneDNN's fused depthwise
//     post-op (append_dw_k3s1p1 / _k3s2p1), which never writes the expanded tensor out, on
//     oneDNN's own layouts with the input and output reordered from and to NHWC (on NHWC itself
//     oneDNN 2.6's fused kernel computes wrong values).
//
//   build/release/tools/bench/conv-micro [repeats]
//
// Prints the fastest of `repeats` (default 7) runs per variant, in ms.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <typename F>
double Fastest(int repeats, F&& f) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const double t = NowMs();
    f();
    best = std::min(best, NowMs() - t);
  }
  return best;
}

struct Pointwise {
  int n, h, w, c, m;
  bool relu6, residual;
};

dnnl::primitive_attr PostOps(bool sum, bool relu6) {
  dnnl::primitive_attr attr;
  dnnl::post_ops ops;
  if (sum) ops.append_sum(1.0f);
  if (relu6) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip_v2, 0.0f, 6.0f);
  attr.set_post_ops(ops);
  return attr;
}

// One 1x1 shape: oneDNN against blocked sgemm; prints a line.
void RunPointwise(const dnnl::engine& eng, dnnl::stream& st, const Pointwise& s, int repeats) {
  const long p = static_cast<long>(s.n) * s.h * s.w;
  std::vector<float> x(p * s.c), w(static_cast<size_t>(s.m) * s.c), wt(w.size()), b(s.m);
  std::vector<float> y(p * s.m), r(p * s.m, 0.5f), yg(p * s.m);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.1f - 0.3f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 5) * 0.1f - 0.2f;
  for (int i = 0; i < s.m; ++i) b[i] = 0.01f * static_cast<float>(i);
  for (int o = 0; o < s.m; ++o) {
    for (int i = 0; i < s.c; ++i)
      wt[static_cast<size_t>(i) * s.m + o] = w[static_cast<size_t>(o) * s.c + i];
  }
  const memory::desc src({s.n, s.c, s.h, s.w}, dt::f32, tag::acdb);
  const memory::desc dst({s.n, s.m, s.h, s.w}, dt::f32, tag::acdb);
  const memory::desc wany({s.m, s.c, 1, 1}, dt::f32, tag::any);
  const memory::desc wplain({s.m, s.c, 1, 1}, dt::f32, tag::oihw);
  const memory::desc bmd({s.m}, dt::f32, tag::a);
  dnnl::convolution_forward::desc cd(dnnl::prop_kind::forward_inference,
                                     dnnl::algorithm::convolution_direct, src, wany, bmd, dst,
                                     {1, 1}, {0, 0}, {0, 0});
  dnnl::convolution_forward::primitive_desc pd(cd, PostOps(s.residual, s.relu6), eng);
  memory wsrc(wplain, eng, w.data()), wm(pd.weights_desc(), eng);
  dnnl::reorder(wsrc, wm).execute(st, wsrc, wm);
  memory xm(src, eng, x.data()), ym(dst, eng, y.data()), bm(bmd, eng, b.data());
  dnnl::convolution_forward conv(pd);
  const double onednn = Fastest(repeats, [&] {
    if (s.residual) std::memcpy(y.data(), r.data(), y.size() * sizeof(float));
    conv.execute(
        st, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, ym}});
  });
  std::printf("mb%d %dx%d ic%d oc%d%s%s onednn(%s) %.3f ms %.0f GFLOP/s | sgemm rows", s.n, s.h,
              s.w, s.c, s.m, s.relu6 ? " relu6" : "", s.residual ? " +residual" : "",
              pd.impl_info_str(), onednn, 2.0 * p * s.c * s.m / 1e6 / onednn);
  double best_gemm = 1e30;
  for (long block : {64L, 256L, 1024L, p}) {
    const double t = Fastest(repeats, [&] {
      if (s.residual) std::memcpy(yg.data(), r.data(), yg.size() * sizeof(float));
      for (long p0 = 0; p0 < p; p0 += block) {
        const long rows = std::min(block, p - p0);
        float* yb = yg.data() + p0 * s.m;
        dnnl_sgemm('N', 'N', rows, s.m, s.c, 1.0f, x.data() + p0 * s.c, s.c, wt.data(), s.m,
                   s.residual ? 1.0f : 0.0f, yb, s.m);
        for (long q = 0; q < rows * s.m; ++q) {
          const float v = yb[q] + b[q % s.m];
          yb[q] = s.relu6 ? std::min(std::max(v, 0.0f), 6.0f) : v;
        }
      }
    });
    best_gemm = std::min(best_gemm, t);
    std::printf(" %ld: %.3f", block, t);
  }
  float diff = 0;
  for (size_t i = 0; i < y.size(); ++i) diff = std::max(diff, std::fabs(y[i] - yg[i]));
  std::printf(" ms | onednn/best_sgemm %.2fx | max diff %.1e\n", best_gemm / onednn, diff);
}

// One first conv: plain NCHW input of 3 channels, channels-last output; prints a line.
void RunFirstConv(const dnnl::engine& eng, dnnl::stream& st, int n, int hw, int m, int k,
                  int repeats) {
  const int c = 3, pad = k / 2, ohw = (hw + 2 * pad - k) / 2 + 1;
  const memory::desc x_plain({n, c, hw, hw}, dt::f32, tag::nchw);
  const memory::desc x_nhwc({n, c, hw, hw}, dt::f32, tag::nhwc);
  const memory::desc y_nhwc({n, m, ohw, ohw}, dt::f32, tag::nhwc);
  const memory::desc y_any({n, m, ohw, ohw}, dt::f32, tag::any);
  const memory::desc wany({m, c, k, k}, dt::f32, tag::any), bmd({m}, dt::f32, tag::a);
  const memory::desc wplain({m, c, k, k}, dt::f32, tag::oihw);
  std::vector<float> xv(static_cast<size_t>(n) * c * hw * hw, 0.5f), wv(m * c * k * k, 0.1f);
  std::vector<float> bv(m, 0.0f);
  memory xm(x_plain, eng, xv.data()), wsrc(wplain, eng, wv.data()), bm(bmd, eng, bv.data());
  memory yout(y_nhwc, eng);
  std::printf("first conv mb%d ic3 oc%d %dx%d k%d stride 2 -> NHWC:", n, m, hw, hw, k);
  const std::pair<memory::desc, memory::desc> layouts[] = {{x_plain, y_any}, {x_nhwc, y_nhwc}};
  for (const auto& [s, d] : layouts) {
    dnnl::convolution_forward::desc cd(dnnl::prop_kind::forward_inference,
                                       dnnl::algorithm::convolution_direct, s, wany, bmd, d, {2, 2},
                                       {pad, pad}, {pad, pad});
    dnnl::convolution_forward::primitive_desc pd(cd, PostOps(false, true), eng);
    memory wm(pd.weights_desc(), eng), xs(pd.src_desc(), eng), yd(pd.dst_desc(), eng);
    dnnl::reorder(wsrc, wm).execute(st, wsrc, wm);
    const bool rs = pd.src_desc() != x_plain, rd = pd.dst_desc() != y_nhwc;
    dnnl::reorder r_src(xm, xs), r_dst(yd, yout);
    dnnl::convolution_forward conv(pd);
    const double t = Fastest(repeats, [&] {
      if (rs) r_src.execute(st, xm, xs);
      conv.execute(st, {{DNNL_ARG_SRC, rs ? xs : xm},
                        {DNNL_ARG_WEIGHTS, wm},
                        {DNNL_ARG_BIAS, bm},
                        {DNNL_ARG_DST, rd ? yd : yout}});
      if (rd) r_dst.execute(st, yd, yout);
    });
    std::printf(" | %s %s(%s) %.3f ms", rs ? "reorder input," : "plain input,",
                rd ? "blocked output + reorder " : "NHWC output ", pd.impl_info_str(), t);
  }
  std::printf("\n");
}

void Zero(memory& m) { std::memset(m.get_data_handle(), 0, m.get_desc().get_size()); }

// One expansion + depthwise pair: separate convolutions against the fused post-op; prints a line.
void RunExpandDepthwise(const dnnl::engine& eng, dnnl::stream& st, int n, int hw, int c, int m,
                        int stride, int repeats) {
  const int ohw = stride == 1 ? hw : (hw - 1) / 2 + 1;
  const memory::desc src({n, c, hw, hw}, dt::f32, tag::nhwc),
      mid({n, m, hw, hw}, dt::f32, tag::nhwc);
  const memory::desc dst({n, m, ohw, ohw}, dt::f32, tag::nhwc), bmd({m}, dt::f32, tag::a);
  const memory::desc w1any({m, c, 1, 1}, dt::f32, tag::any),
      dwany({m, 1, 1, 3, 3}, dt::f32, tag::any);
  const dnnl::primitive_attr relu6 = PostOps(false, true);
  dnnl::convolution_forward::desc d1(dnnl::prop_kind::forward_inference,
                                     dnnl::algorithm::convolution_direct, src, w1any, bmd, mid,
                                     {1, 1}, {0, 0}, {0, 0});
  dnnl::convolution_forward::desc d2(dnnl::prop_kind::forward_inference,
                                     dnnl::algorithm::convolution_direct, mid, dwany, bmd, dst,
                                     {stride, stride}, {1, 1}, {1, 1});
  dnnl::convolution_forward::primitive_desc p1(d1, relu6, eng), p2(d2, relu6, eng);
  memory x(src, eng), y1(mid, eng), y2(dst, eng), w1(p1.weights_desc(), eng);
  memory w2(p2.weights_desc(), eng), b(bmd, eng);
  for (memory* z : {&x, &w1, &w2, &b}) Zero(*z);
  dnnl::convolution_forward c1(p1), c2(p2);
  const double separate = Fastest(repeats, [&] {
    c1.execute(st,
               {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w1}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y1}});
    c2.execute(
        st, {{DNNL_ARG_SRC, y1}, {DNNL_ARG_WEIGHTS, w2}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y2}});
  });
  dnnl::primitive_attr fused_attr;
  dnnl::post_ops ops;
  ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip_v2, 0.0f, 6.0f);
  if (stride == 1) {
    ops.append_dw_k3s1p1(dt::f32, dt::f32, dt::f32, 0, {});
  } else {
    ops.append_dw_k3s2p1(dt::f32, dt::f32, dt::f32, 0, {});
  }
  ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip_v2, 0.0f, 6.0f);
  fused_attr.set_post_ops(ops);
  // oneDNN 2.6's fused AVX2 kernel computes wrong values on NHWC source and destination
  // (kernels/dnnl/conv.cc, BindPair): the fused primitive takes its own layouts, and the timing
  // includes the reorders from and to NHWC that dynvm's kernel runs.
  const memory::desc src_any({n, c, hw, hw}, dt::f32, tag::any),
      mid_any({n, m, hw, hw}, dt::f32, tag::any);
  dnnl::convolution_forward::desc df(dnnl::prop_kind::forward_inference,
                                     dnnl::algorithm::convolution_direct, src_any, w1any, bmd,
                                     mid_any, {1, 1}, {0, 0}, {0, 0});
  dnnl::convolution_forward::primitive_desc pf(df, fused_attr, eng);
  const int dw = DNNL_ARG_ATTR_POST_OP_DW;
  memory wf(pf.weights_desc(), eng), xf(pf.src_desc(), eng), yf(pf.dst_desc(), eng), yo(dst, eng);
  memory dww(pf.query_md(dnnl::query::exec_arg_md, dw | DNNL_ARG_WEIGHTS), eng);
  memory dwb(pf.query_md(dnnl::query::exec_arg_md, dw | DNNL_ARG_BIAS), eng);
  for (memory* z : {&wf, &dww, &dwb}) Zero(*z);
  dnnl::convolution_forward cf(pf);
  dnnl::reorder r_in(x, xf), r_out(yf, yo);
  const double fused = Fastest(repeats, [&] {
    r_in.execute(st, x, xf);
    cf.execute(st, {{DNNL_ARG_SRC, xf},
                    {DNNL_ARG_WEIGHTS, wf},
                    {DNNL_ARG_BIAS, b},
                    {DNNL_ARG_DST, yf},
                    {dw | DNNL_ARG_WEIGHTS, dww},
                    {dw | DNNL_ARG_BIAS, dwb}});
    r_out.execute(st, yf, yo);
  });
  std::printf(
      "expand mb%d %dx%d ic%d oc%d + dw3x3 stride %d: separate (%s + %s) %.3f ms | fused "
      "dw post-op (%s, reorders included) %.3f ms | separate/fused %.2fx\n",
      n, hw, hw, c, m, stride, p1.impl_info_str(), p2.impl_info_str(), separate, pf.impl_info_str(),
      fused, separate / fused);
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream st(eng);
  const Pointwise shapes[] = {
      {8, 112, 112, 32, 16, false, false}, {8, 112, 112, 16, 96, true, false},
      {8, 56, 56, 96, 24, false, false},   {8, 56, 56, 24, 144, true, false},
      {8, 56, 56, 144, 24, false, true},   {8, 28, 28, 144, 32, false, false},
      {8, 28, 28, 32, 192, true, false},   {8, 28, 28, 192, 32, false, true},
      {8, 14, 14, 192, 64, false, false},  {8, 14, 14, 64, 384, true, false},
      {8, 14, 14, 384, 64, false, true},   {8, 14, 14, 384, 96, false, false},
      {8, 14, 14, 96, 576, true, false},   {8, 14, 14, 576, 96, false, true},
      {8, 7, 7, 576, 160, false, false},   {8, 7, 7, 160, 960, true, false},
      {8, 7, 7, 960, 160, false, true},    {8, 7, 7, 960, 320, false, false},
      {8, 7, 7, 320, 1280, true, false},   {1, 112, 112, 16, 96, true, false},
      {1, 56, 56, 144, 24, false, true},   {1, 14, 14, 64, 384, true, false},
      {1, 7, 7, 320, 1280, true, false},   {8, 2, 2, 320, 1280, true, false}};
  for (const Pointwise& s : shapes) RunPointwise(eng, st, s, repeats);
  RunFirstConv(eng, st, 8, 224, 32, 3, repeats);
  RunFirstConv(eng, st, 1, 224, 32, 3, repeats);
  RunFirstConv(eng, st, 8, 64, 32, 3, repeats);
  RunFirstConv(eng, st, 8, 224, 64, 7, repeats);
  RunFirstConv(eng, st, 1, 224, 64, 7, repeats);
  RunFirstConv(eng, st, 8, 64, 64, 7, repeats);
  // mobilenet_v2's expansion + depthwise pairs at 224x224 (its 112x112 to 28x28 stages).
  const int pairs[][5] = {{8, 112, 16, 96, 2}, {8, 56, 24, 144, 1}, {8, 56, 24, 144, 2},
                          {8, 28, 32, 192, 1}, {8, 28, 32, 192, 2}, {1, 112, 16, 96, 2},
                          {1, 56, 24, 144, 1}, {1, 28, 32, 192, 1}};
  for (const auto& p : pairs) RunExpandDepthwise(eng, st, p[0], p[1], p[2], p[3], p[4], repeats);
  return 0;
}
