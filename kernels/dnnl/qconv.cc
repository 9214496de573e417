// ConvInteger and QLinearConv on oneDNN's int8 convolution primitive (docs/kernels.md,
// "Quantized operators"): u8 or s8 x, s8 w, s32 accumulation (VNNI), 1-3 spatial dims, any
// group, strides, dilations, explicit or SAME/VALID pads.
//
// The primitive computes the exact s32 sum of (x - x_zero_point) * w, the x zero point given
// at run time through oneDNN's source zero-point attribute (padding counts as the zero point,
// as ONNX wants).
//
// ConvInteger: the s32 sums are its output. oneDNN's int8 kernels convert the s32 sum (its
// zero-point and s8 compensations applied in integers) to f32 before storing it, which is exact
// only below 2^24. The rounding is monotonic and 2^24 is a float, so a stored magnitude below
// 2^24 is the exact sum, and one at or above it may not be: each run checks the stored sums (one
// pass) and redoes a run that has such a sum with the im2col kernel (quant.cc), exact at every
// magnitude. Real layers' sums stay far below 2^24 after the zero point is taken out.
//
// QLinearConv: the requantization runs inside the primitive, which writes u8 or s8 y directly:
// the s32 bias, then the output scale x_scale * w_scale / y_scale (rounded once to f32; per
// tensor or per output channel, bound into the primitive), y's zero point (at run time), saturation
// and rounding half to even, in f32. That is ONNX Runtime's own arithmetic (MLAS requantizes
// f32(sum + bias) * f32 scale, rounds half to even and saturates), not the reference kernel's
// double: the two agree except where the exact value (sum + bias) * scale + y_zero_point lies
// within f32's rounding error of a tie (x.5), where they may differ by one (qconv_test asserts
// exactly that bound: every output identical, or off by one within 2^-20 of its magnitude of a
// tie). Sums of 2^24 or more are rounded to f32 there as in ORT (an error of 2^-24 relative, the
// same bound).
//
// Layouts: the primitive picks its own (format_tag::any); x is reordered from NCHW into it and
// y (ConvInteger: the s32 sums) back to NCHW in the site's workspace. A QLinearConv in a chain
// (compiler/conv_fusion.h) reads and writes channels-last u8/s8 instead ("channels_last_in" /
// "_out", kernels/channels_last.h), the layout oneDNN picks, so no reorder runs between two of
// them; its fallbacks (the im2col kernel, the reference) take the same flags; w is reordered on
// every run (its packed form carries oneDNN's compensation for the zero point and for s8 x).
// Primitives are bound per site and concrete shape in the conv family's LRU (conv_common.h), the
// thread count, the scales' mask, y's type and QLinearConv's output scales (hashed; the entry
// keeps them to compare) in the key.
//
// What this does not take goes to the im2col kernel (which in turn hands what it cannot do, such
// as 3-D, to the reference): 3-D convolutions with padding and a non-zero x zero point (oneDNN
// 2.6.3 computes the padded border wrong there: qconv_test), a CPU without VNNI (the im2col
// kernel's GEMM is then igemm.h's, exact without VNNI), u8 or non-zero weight zero points
// (oneDNN 2.6 has no weight zero points), per-channel x zero points, strided tensors, non-f32 or
// per-axis x/y scales, a bias that is not a contiguous i32 [M].
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/quantize.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/conv_common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/quant_common.h"
#include "kernels/quant_params.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

using dt = dnnl::memory::data_type;

// f32 holds every integer below this exactly.
inline constexpr int64_t kExactF32 = int64_t{1} << 24;

struct Attrs {
  std::vector<int64_t> kernel, strides, pads, dilations;
  std::string auto_pad;
  int64_t group = 1;
  // QLinearConv: x / y hold channels-last data (kernels/channels_last.h).
  bool channels_last_in = false, channels_last_out = false;
};

// The channels-last tag (NWC, NHWC, NDHWC) of a rank 3-5 tensor.
dnnl::memory::format_tag ChannelsLastTag(int rank) {
  return rank == 3   ? dnnl::memory::format_tag::nwc
         : rank == 4 ? dnnl::memory::format_tag::nhwc
                     : dnnl::memory::format_tag::ndhwc;
}

// The convolution's geometry; k spatial dims (1..3).
struct Geometry {
  int k = 0;
  int64_t n = 0, c = 0, m = 0, g = 1;
  int64_t in[3] = {}, kd[3] = {}, st[3] = {}, dl[3] = {}, pl[3] = {}, pr[3] = {}, od[3] = {};
  int64_t spatial_out() const {
    int64_t p = 1;
    for (int i = 0; i < k; ++i) p *= od[i];
    return p;
  }
  bool padded() const {
    for (int i = 0; i < k; ++i) {
      if (pl[i] != 0 || pr[i] != 0) return true;
    }
    return false;
  }
  int64_t kernel_size() const {
    int64_t p = c / g;
    for (int i = 0; i < k; ++i) p *= kd[i];
    return p;
  }
};

// The geometry, or false when the shapes or attributes are not this kernel's (the fallback
// then serves them, and reports what is wrong with them).
bool MakeGeometry(const Attrs& a, const Tensor& x, const Tensor& w, Geometry* g) {
  const int r = x.rank();
  if (r < 3 || r > 5 || w.rank() != r || a.group < 1) return false;
  g->k = r - 2;
  g->n = x.dim(0);
  g->c = x.dim(1);
  g->m = w.dim(0);
  g->g = a.group;
  if (g->n == 0 || g->m == 0 || g->c == 0 || g->c % g->g != 0 || g->m % g->g != 0 ||
      w.dim(1) != g->c / g->g) {
    return false;
  }
  const size_t k = static_cast<size_t>(g->k);
  auto sized = [k](const std::vector<int64_t>& v, size_t want) {
    return v.empty() || v.size() == want;
  };
  if (!sized(a.kernel, k) || !sized(a.strides, k) || !sized(a.dilations, k) ||
      !sized(a.pads, 2 * k)) {
    return false;
  }
  const bool same = a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER";
  if (!same && a.auto_pad != "VALID" && a.auto_pad != "NOTSET" && !a.auto_pad.empty()) {
    return false;
  }
  for (int i = 0; i < g->k; ++i) {
    const size_t u = static_cast<size_t>(i);
    g->in[i] = x.dim(2 + i);
    g->kd[i] = w.dim(2 + i);
    if (!a.kernel.empty() && a.kernel[u] != g->kd[i]) return false;
    g->st[i] = a.strides.empty() ? 1 : a.strides[u];
    g->dl[i] = a.dilations.empty() ? 1 : a.dilations[u];
    if (g->st[i] < 1 || g->dl[i] < 1 || g->in[i] < 1 || g->kd[i] < 1) return false;
    const int64_t ext = (g->kd[i] - 1) * g->dl[i] + 1;
    if (same) {
      const int64_t out = (g->in[i] + g->st[i] - 1) / g->st[i];
      const int64_t total = std::max<int64_t>(0, (out - 1) * g->st[i] + ext - g->in[i]);
      const int64_t small = total / 2;
      g->pl[i] = a.auto_pad == "SAME_UPPER" ? small : total - small;
      g->pr[i] = total - g->pl[i];
    } else if (a.auto_pad == "VALID" || a.pads.empty()) {
      g->pl[i] = g->pr[i] = 0;
    } else {
      g->pl[i] = a.pads[u];
      g->pr[i] = a.pads[u + k];
    }
    if (g->pl[i] < 0 || g->pr[i] < 0) return false;
    const int64_t span = g->in[i] + g->pl[i] + g->pr[i] - ext;
    if (span < 0) return false;
    g->od[i] = span / g->st[i] + 1;
  }
  return true;
}

class QConvKernel final : public DnnlKernel {
 public:
  QConvKernel(std::string name, bool qlinear, Attrs a)
      : DnnlKernel(std::move(name)), qlinear_(qlinear), a_(std::move(a)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    const char* op = qlinear_ ? "QLinearConv" : "ConvInteger";
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, qlinear_ ? 8 : 2, out, op));
    auto at = [&](size_t i) -> const Tensor* { return i < in.size() ? in[i] : nullptr; };
    const Tensor& x = *in[0];
    const Tensor& w = *in[qlinear_ ? 3 : 1];
    const Tensor* xz = at(2);
    const Tensor* wz = at(qlinear_ ? 5 : 3);
    const Tensor* bias = qlinear_ ? at(8) : nullptr;
    Geometry g;
    if (!HasInt8Vnni() || !Is8Bit(x.dtype()) || w.dtype() != DType::kI8 || !x.is_contiguous() ||
        !w.is_contiguous() || !MakeGeometry(a_, x, w, &g) || !ZeroPointsUsable(x, xz, wz) ||
        (qlinear_ && !ParamsUsable(in, bias, g.m))) {
      return RunFallback(ctx, in, out);
    }
    const DType out_dtype = qlinear_ ? in[7]->dtype() : DType::kI32;
    if (out[0]->defined() && out[0]->dtype() != out_dtype) return RunFallback(ctx, in, out);
    const int32_t zx = static_cast<int32_t>(QuantParamAt(xz, 0));
    if (zx != 0 && g.k == 3 && g.padded()) return RunFallback(ctx, in, out);

    std::vector<int64_t> out_dims = {g.n, g.m};
    for (int i = 0; i < g.k; ++i) out_dims.push_back(g.od[i]);
    const int64_t p = g.spatial_out();
    SetThreads(ThreadsFor(ctx.num_threads(), g.n * g.m * p * g.kernel_size()));
    ShapeKey key;
    key.Add(&x);
    key.Add(&w);
    key.Add(ctx.num_threads());
    // QLinearConv's output scales are bound into the primitive (oneDNN 2.6's int8 convolutions
    // take no run-time scales): their hash is in the key, and the entry keeps them to compare.
    std::vector<float> scales;
    if (qlinear_) {
      scales = OutputScales(in);
      key.Add(in[4]);  // the scales' mask: per tensor or per output channel
      key.Add(in[7]);  // y's type
      key.Add(static_cast<int64_t>(HashFloats(scales)));
    }
    SiteCache* st = SiteState<SiteCache>(ctx);
    bool fresh = false;
    Entry* e = st->Lookup(key, &fresh);
    if (fresh) {
      DYNVM_RETURN_IF_ERROR(BindEntry(e, "int8 convolution", [&](const dnnl::engine& engine) {
        Bind(engine, g, x, w, out_dims, qlinear_ ? in[7]->dtype() : DType::kI32, scales, e);
      }));
    }
    // (A hash collision between different scales, however unlikely, goes to the fallback.)
    if (e->use_fallback || e->out_scales != scales) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], out_dtype, out_dims, op));
    if (qlinear_) return ExecuteQLinear(ctx, *e, g, x, w, zx, in, bias, out[0]);
    return Execute(ctx, *e, g, x, w, zx, in, out[0]);
  }

 private:
  // x's zero point one value of x's type (or absent); w's absent or all zeros.
  static bool ZeroPointsUsable(const Tensor& x, const Tensor* xz, const Tensor* wz) {
    if (xz != nullptr && (xz->dtype() != x.dtype() || xz->numel() != 1 || xz->rank() > 1)) {
      return false;
    }
    if (wz == nullptr) return true;
    if (wz->dtype() != DType::kI8 || wz->rank() > 1 || !wz->is_contiguous()) return false;
    for (int64_t i = 0; i < wz->numel(); ++i) {
      if (wz->data<int8_t>()[i] != 0) return false;
    }
    return true;
  }

  // QLinearConv's output scales x_scale * w_scale / y_scale (one, or one per output channel),
  // computed in double and rounded once to f32.
  static std::vector<float> OutputScales(Inputs in) {
    const double xs = QuantParamAt(in[1], 0), ys = QuantParamAt(in[6], 0);
    std::vector<float> s(static_cast<size_t>(in[4]->numel()));
    for (size_t oc = 0; oc < s.size(); ++oc) {
      s[oc] = static_cast<float>(xs * QuantParamAt(in[4], static_cast<int64_t>(oc)) / ys);
    }
    return s;
  }

  // FNV-1a over the floats' bits.
  static uint64_t HashFloats(const std::vector<float>& v) {
    uint64_t h = 1469598103934665603ull;
    for (float f : v) {
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof(bits));
      h = (h ^ bits) * 1099511628211ull;
    }
    return h;
  }

  // QLinearConv's scales: f32, valid, per tensor (w: or per output channel); y's zero point
  // one 8-bit value; the bias a contiguous i32 [M].
  static bool ParamsUsable(Inputs in, const Tensor* bias, int64_t m) {
    const Tensor &xs = *in[1], &ws = *in[4], &ys = *in[6], &yz = *in[7];
    for (const Tensor* s : {&xs, &ws, &ys}) {
      if (s->dtype() != DType::kF32 || s->rank() > 1 || !s->is_contiguous() ||
          !CheckQuantScale(*s, "scale").ok()) {
        return false;
      }
    }
    if (bias != nullptr && (bias->dtype() != DType::kI32 || bias->rank() != 1 ||
                            bias->dim(0) != m || !bias->is_contiguous())) {
      return false;
    }
    return xs.numel() == 1 && ys.numel() == 1 && (ws.numel() == 1 || ws.numel() == m) &&
           yz.numel() == 1 && yz.rank() <= 1 && Is8Bit(yz.dtype());
  }

  // Binds the primitive: ConvInteger's with an s32 destination; QLinearConv's with its
  // requantization inside (output scales per tensor or per output channel, y's zero point, an
  // s32 bias, a u8 or s8 destination).
  void Bind(const dnnl::engine& engine, const Geometry& g, const Tensor& x, const Tensor& w,
            const std::vector<int64_t>& out_dims, DType out_dtype, const std::vector<float>& scales,
            Entry* e) const {
    e->out_scales = scales;
    const dt xt = x.dtype() == DType::kU8 ? dt::u8 : dt::s8;
    const dnnl::memory::dims xd(x.dims().begin(), x.dims().end());
    const dnnl::memory::desc src =
        a_.channels_last_in ? dnnl::memory::desc(xd, xt, ChannelsLastTag(x.rank())) : TensorDesc(x);
    dnnl::memory::dims wdims;
    if (g.g > 1) {
      wdims = {g.g, g.m / g.g};
      for (int i = 1; i < w.rank(); ++i) wdims.push_back(w.dim(i));
    } else {
      wdims.assign(w.dims().begin(), w.dims().end());
    }
    const dnnl::memory::desc wts = DenseDesc(dt::s8, wdims);
    const dt yt = out_dtype == DType::kU8 ? dt::u8 : out_dtype == DType::kI8 ? dt::s8 : dt::s32;
    const dnnl::memory::desc dst =
        a_.channels_last_out
            ? dnnl::memory::desc(out_dims, yt, ChannelsLastTag(static_cast<int>(out_dims.size())))
            : DenseDesc(yt, out_dims);
    const dnnl::memory::desc src_any(xd, xt, dnnl::memory::format_tag::any);
    const dnnl::memory::desc wts_any(wdims, dt::s8, dnnl::memory::format_tag::any);
    const dnnl::memory::desc dst_any(out_dims, yt, dnnl::memory::format_tag::any);
    const dnnl::memory::desc bias_md = qlinear_ ? DenseDesc(dt::s32, {g.m}) : dnnl::memory::desc();
    const dnnl::memory::dims strides(g.st, g.st + g.k), pl(g.pl, g.pl + g.k), pr(g.pr, g.pr + g.k);
    dnnl::memory::dims dil(static_cast<size_t>(g.k));
    for (int i = 0; i < g.k; ++i)
      dil[static_cast<size_t>(i)] = g.dl[i] - 1;  // oneDNN counts dilation from 0
    dnnl::primitive_attr attr = UserScratchpadAttr();
    attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    if (qlinear_) {
      attr.set_output_scales(scales.size() > 1 ? 1 << 1 : 0, scales);
      attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
    }
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                      dnnl::algorithm::convolution_direct, src_any, wts_any,
                                      bias_md, dst_any, strides, dil, pl, pr);
    dnnl::convolution_forward::primitive_desc pd(d, attr, engine);
    const dnnl::memory::desc psrc = pd.query_md(dnnl::query::src_md);
    const dnnl::memory::desc pwts = pd.query_md(dnnl::query::weights_md);
    const dnnl::memory::desc pdst = pd.query_md(dnnl::query::dst_md);
    e->reference_impl = IsReferenceImpl(pd);
    if (qlinear_) {
      const dnnl::memory::desc one = DenseDesc(dt::s32, {1});
      e->main.Bind(pd, {{DNNL_ARG_SRC, psrc},
                        {DNNL_ARG_WEIGHTS, pwts},
                        {DNNL_ARG_BIAS, bias_md},
                        {DNNL_ARG_DST, pdst},
                        {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, one},
                        {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, one}});
    } else {
      e->main.Bind(pd, {{DNNL_ARG_SRC, psrc},
                        {DNNL_ARG_WEIGHTS, pwts},
                        {DNNL_ARG_DST, pdst},
                        {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, DenseDesc(dt::s32, {1})}});
    }
    if (psrc != src) {
      BindReorder(&e->src_reorder, engine, src, psrc);
      e->src_bytes = Align(psrc.get_size());
    }
    if (pwts != wts) {
      BindReorder(&e->w_reorder, engine, wts, pwts);
      e->w_bytes = Align(pwts.get_size());
    }
    // The result always lands in the workspace: ConvInteger's s32 sums (checked there, then
    // copied or reordered to y), QLinearConv's u8/s8 y when oneDNN wrote another layout.
    if (pdst != dst) BindReorder(&e->dst_reorder, engine, pdst, dst);
    e->dst_bytes = Align(pdst.get_size());
  }

  // QLinearConv on the primitive: y requantized by oneDNN, in f32 as ONNX Runtime's MLAS does
  // (header), then reordered to NCHW when oneDNN wrote another layout.
  absl::Status ExecuteQLinear(KernelContext& ctx, const Entry& e, const Geometry& g,
                              const Tensor& x, const Tensor& w, int32_t zx, Inputs in,
                              const Tensor* bias, Tensor* y) const {
    size_t scratch = e.main.scratchpad_bytes();
    for (const BoundPrimitive* r : {&e.src_reorder, &e.w_reorder, &e.dst_reorder}) {
      scratch = std::max(scratch, r->scratchpad_bytes());
    }
    scratch = Align(scratch);
    const size_t params = Align(static_cast<size_t>(g.m) * sizeof(int32_t));
    DYNVM_ASSIGN_OR_RETURN(
        void* ws, ctx.Workspace(scratch + e.src_bytes + e.w_bytes + e.dst_bytes + params + 64));
    char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws) + 63) & ~uintptr_t{63});
    char* pscratch = base;
    char* psrc = pscratch + scratch;
    char* pw = psrc + e.src_bytes;
    char* pdst = pw + e.w_bytes;
    int32_t* zero_bias = reinterpret_cast<int32_t*>(pdst + e.dst_bytes);
    const int32_t zy = static_cast<int32_t>(QuantParamAt(in[7], 0));
    const void* b = bias != nullptr ? bias->raw_data() : nullptr;
    if (b == nullptr) {
      std::fill(zero_bias, zero_bias + g.m, 0);
      b = zero_bias;
    }
    ParkPoolForOpenMp(ctx);  // the reorders and the convolution run on oneDNN's OpenMP team
    const void* src = x.raw_data();
    if (e.src_reorder.bound()) {
      DYNVM_RETURN_IF_ERROR(e.src_reorder.Execute({src, psrc}, pscratch));
      src = psrc;
    }
    const void* wts = w.raw_data();
    if (e.w_reorder.bound()) {
      DYNVM_RETURN_IF_ERROR(e.w_reorder.Execute({wts, pw}, pscratch));
      wts = pw;
    }
    void* dst = e.dst_reorder.bound() ? static_cast<void*>(pdst) : y->raw_data();
    DYNVM_RETURN_IF_ERROR(e.main.Execute({src, wts, b, dst, &zx, &zy}, pscratch));
    if (e.dst_reorder.bound()) {
      DYNVM_RETURN_IF_ERROR(e.dst_reorder.Execute({pdst, y->raw_data()}, pscratch));
    }
    return absl::OkStatus();
  }

  // ConvInteger on the primitive: the exact s32 sums (header).
  absl::Status Execute(KernelContext& ctx, const Entry& e, const Geometry& g, const Tensor& x,
                       const Tensor& w, int32_t zx, Inputs in, Tensor* y) const {
    size_t scratch = e.main.scratchpad_bytes();
    for (const BoundPrimitive* r : {&e.src_reorder, &e.w_reorder, &e.dst_reorder}) {
      scratch = std::max(scratch, r->scratchpad_bytes());
    }
    scratch = Align(scratch);
    const int64_t p = g.spatial_out();
    DYNVM_ASSIGN_OR_RETURN(void* ws,
                           ctx.Workspace(scratch + e.src_bytes + e.w_bytes + e.dst_bytes + 64));
    char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws) + 63) & ~uintptr_t{63});
    char* pscratch = base;
    char* psrc = pscratch + scratch;
    char* pw = psrc + e.src_bytes;
    char* pdst = pw + e.w_bytes;
    ParkPoolForOpenMp(ctx);  // the reorders and the convolution run on oneDNN's OpenMP team
    const void* src = x.raw_data();
    if (e.src_reorder.bound()) {
      DYNVM_RETURN_IF_ERROR(e.src_reorder.Execute({src, psrc}, pscratch));
      src = psrc;
    }
    const void* wts = w.raw_data();
    if (e.w_reorder.bound()) {
      DYNVM_RETURN_IF_ERROR(e.w_reorder.Execute({wts, pw}, pscratch));
      wts = pw;
    }
    DYNVM_RETURN_IF_ERROR(e.main.Execute({src, wts, pdst, &zx}, pscratch));
    // The plain NCHW s32 sums.
    const int32_t* sums = reinterpret_cast<const int32_t*>(pdst);
    if (e.dst_reorder.bound()) {
      DYNVM_RETURN_IF_ERROR(e.dst_reorder.Execute({pdst, y->data<int32_t>()}, pscratch));
      sums = y->data<int32_t>();
    } else {
      std::copy(sums, sums + g.n * g.m * p, y->data<int32_t>());
    }
    // A sum of 2^24 or more may have been rounded by oneDNN's f32 store (header): the run is
    // redone by the fallback (the im2col kernel), exact at every magnitude. (INT32_MIN, which
    // the f32 store gives only far beyond any reachable sum, counts as 2^31.)
    if (cpu::AnyAbsAtLeast(g.n * g.m * p, sums, static_cast<int32_t>(kExactF32))) {
      return RunFallback(ctx, in, Outputs(&y, 1));
    }
    return absl::OkStatus();
  }

  bool qlinear_;
  Attrs a_;
};

}  // namespace

void RegisterQConvKernels(KernelRegistry& r) {
  for (bool qlinear : {false, true}) {
    r.Register(KernelRegistration{
        "", qlinear ? "QLinearConv" : "ConvInteger", Device::kCPU, kBackend, kDnnlPriority,
        [qlinear](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
          DYNVM_RETURN_IF_ERROR(CheckArity(spec, qlinear ? 8 : 2, qlinear ? 9 : 4, 1, 1));
          Attrs a;
          DYNVM_ASSIGN_OR_RETURN(a.kernel, spec.GetInts("kernel_shape"));
          DYNVM_ASSIGN_OR_RETURN(a.strides, spec.GetInts("strides"));
          DYNVM_ASSIGN_OR_RETURN(a.pads, spec.GetInts("pads"));
          DYNVM_ASSIGN_OR_RETURN(a.dilations, spec.GetInts("dilations"));
          DYNVM_ASSIGN_OR_RETURN(a.auto_pad, spec.GetString("auto_pad", "NOTSET"));
          DYNVM_ASSIGN_OR_RETURN(a.group, spec.GetInt("group", 1));
          if (qlinear) {
            DYNVM_ASSIGN_OR_RETURN(int64_t ci, spec.GetInt("channels_last_in", 0));
            DYNVM_ASSIGN_OR_RETURN(int64_t co, spec.GetInt("channels_last_out", 0));
            a.channels_last_in = ci != 0;
            a.channels_last_out = co != 0;
          }
          // Its fallback is the registry's next kernel for the spec: the im2col kernel
          // (quant.cc, kDnnlSecondPriority), whose own fallback is the reference kernel.
          return std::make_unique<QConvKernel>(KernelName(spec), qlinear, std::move(a));
        }});
  }
}

}  // namespace dynvm::onednn
