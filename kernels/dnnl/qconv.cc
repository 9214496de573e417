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
// the s32 bias, then the output scale x_scale * w_scale / y_scale (in f32 as ONNX Runtime
// computes it: f32(f32(x_scale * w_scale) / y_scale); per tensor or per output channel, bound
// into the primitive), rounding half to even (an eltwise_round post-op), y's zero point (at run
// time) and saturation. That is MLAS's arithmetic (f32(sum + bias) * scale, rounded half to even,
// then the zero point added and saturated; oneDNN alone would add the zero point in f32 before
// rounding, which moves values within f32's rounding of a tie), not the reference kernel's
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
// every run (its packed form carries oneDNN's compensation for the zero point and for s8 x),
// or once per bound entry where the compiler marks it a constant (constant_weights = 1).
// Primitives are bound per site and concrete shape in the conv family's LRU (conv_common.h), the
// scales' mask, y's type and QLinearConv's output scales (hashed; the entry keeps them to
// compare) in the key.
//
// Threads: the primitives never run on oneDNN's OpenMP team (libgomp's threads spin between
// calls beside the VM's pool: at 2 threads on a shared 2-CPU machine that took a batch-8 QDQ CNN
// from 21 to 171 ms). A run with one thread, or below kMinSplitWork multiply-adds, binds the
// primitive at OpenMP count 1 and runs it on the calling thread. A larger run with more
// threads splits over the VM's pool (RunSplit): by image where the batch divides evenly over
// the ranges (or has 4 images per range), else each image's output rows (of the first spatial
// dim) in one block per range, each block a primitive of its own bound for the rows it reads
// and the padding inside its window; ranges claim units from a shared counter, each with its
// own argument handles (BoundPrimitive::Share) and its own user scratchpad. Every output's
// arithmetic is the whole convolution's (the integer sum, the same f32 requantization).
//
// What this does not take goes to the im2col kernel (which in turn hands what it cannot do, such
// as 3-D, to the reference): 3-D convolutions with padding and a non-zero x zero point (oneDNN
// 2.6.3 computes the padded border wrong there: qconv_test), a CPU without VNNI (the im2col
// kernel's GEMM is then igemm.h's, exact without VNNI), u8 or non-zero weight zero points
// (oneDNN 2.6 has no weight zero points), per-channel x zero points, strided tensors, non-f32 or
// per-axis x/y scales, a bias that is not a contiguous i32 [M].
#include <algorithm>
#include <array>
#include <atomic>
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
  // QLinearConv: w is a constant of the executable (immutable): packed once per entry.
  bool constant_weights = false;
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

// Multiply-adds from which a convolution splits over the VM's threads (RunSplit): about 10 us
// of VNNI work on one core, several times a pool round trip. A convolution with fewer than 4
// input channels per group (depthwise: VPDPBUSD's 4-wide sums do not apply) counts each
// multiply-add kDepthwiseWeight times: oneDNN's u8 depthwise 3x3 runs at about 20 G
// multiply-adds/s on one Zen 4 core against 70 for the dense ones (the QDQ CNN at batch 1,
// 112x112), so its stride-2 depthwise conv (451K, 24 us) stayed on one thread at 2 threads.
inline constexpr int64_t kMinSplitWork = int64_t{1} << 20;
inline constexpr int64_t kDepthwiseWeight = 4;

// How a run splits over the VM's threads: `parts` row blocks per image (1: whole images), each
// image's parts a unit, units claimed by `tasks` ranges. parts == 0: no split.
struct Split {
  int parts = 0;
  int64_t units = 0;
  int tasks = 1;
};

// The geometry of output rows [r0, r1) (of spatial dim 0) of one image of `g`: the input rows
// they read, [*i0, *i1), become the slice's input, with the padding that falls inside the
// slice's window. False when the slice reads no input row (all padding).
bool RowSlice(const Geometry& g, int64_t r0, int64_t r1, Geometry* s, int64_t* i0, int64_t* i1) {
  const int64_t ext = (g.kd[0] - 1) * g.dl[0] + 1;
  const int64_t start = r0 * g.st[0] - g.pl[0], end = (r1 - 1) * g.st[0] - g.pl[0] + ext;
  *i0 = std::max<int64_t>(0, start);
  *i1 = std::min(g.in[0], end);
  if (*i1 <= *i0) return false;
  *s = g;
  s->n = 1;
  s->in[0] = *i1 - *i0;
  s->pl[0] = *i0 - start;
  s->pr[0] = end - *i1;
  s->od[0] = r1 - r0;
  return true;
}

// Output rows [*r0, *r1) of part p of `parts` (as even as they go).
void PartRows(const Geometry& g, int p, int parts, int64_t* r0, int64_t* r1) {
  *r0 = g.od[0] * p / parts;
  *r1 = g.od[0] * (p + 1) / parts;
}

// Dense strides of `dims`: plain (NCHW) or channels-last (NHWC).
dnnl::memory::dims DenseStrides(const dnnl::memory::dims& dims, bool channels_last) {
  const size_t r = dims.size();
  dnnl::memory::dims st(r);
  if (!channels_last) {
    int64_t acc = 1;
    for (size_t i = r; i-- > 0;) {
      st[i] = acc;
      acc *= dims[i];
    }
    return st;
  }
  int64_t acc = dims[1];
  st[1] = 1;
  for (size_t i = r; i-- > 2;) {
    st[i] = acc;
    acc *= dims[i];
  }
  st[0] = acc;
  return st;
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
    // oneDNN's int8 primitives never run on its OpenMP team (which spins between calls beside
    // the VM's pool): one thread here, or a split over the VM's pool (RunSplit).
    SetThreads(1);
    ShapeKey key;
    key.Add(&x);
    key.Add(&w);
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
    const Split split = PlanSplit(ctx, g);
    if (split.parts > 0) {
      std::vector<Entry*> parts;
      DYNVM_RETURN_IF_ERROR(BindParts(st, key, g, x, out_dtype, split, scales, &parts));
      if (!parts.empty()) {
        DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], out_dtype, out_dims, op));
        return RunSplit(ctx, parts, split, g, x, w, zx, in, bias, out[0]);
      }
    }
    key.Add(int64_t{-1});  // the whole convolution on one thread
    bool fresh = false;
    Entry* e = st->Lookup(key, &fresh);
    if (fresh) {
      DYNVM_RETURN_IF_ERROR(BindEntry(e, "int8 convolution", [&](const dnnl::engine& engine) {
        const dt xt = x.dtype() == DType::kU8 ? dt::u8 : dt::s8;
        const dt yt = YType(out_dtype);
        const dnnl::memory::dims xd(x.dims().begin(), x.dims().end());
        const dnnl::memory::desc src = a_.channels_last_in
                                           ? dnnl::memory::desc(xd, xt, ChannelsLastTag(x.rank()))
                                           : TensorDesc(x);
        const dnnl::memory::desc dst =
            a_.channels_last_out
                ? dnnl::memory::desc(out_dims, yt,
                                     ChannelsLastTag(static_cast<int>(out_dims.size())))
                : DenseDesc(yt, out_dims);
        Bind(engine, g, xt, src, yt, dst, scales, e);
      }));
    }
    // (A hash collision between different scales, however unlikely, goes to the fallback.)
    if (e->use_fallback || e->out_scales != scales) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], out_dtype, out_dims, op));
    if (qlinear_) return ExecuteQLinear(ctx, *e, g, x, w, zx, in, bias, out[0]);
    return Execute(ctx, *e, g, x, w, zx, in, out[0]);
  }

 private:
  static dt YType(DType t) { return t == DType::kU8 ? dt::u8 : t == DType::kI8 ? dt::s8 : dt::s32; }

  // The split for a run with more than one thread and at least kMinSplitWork multiply-adds
  // (weighted for a depthwise convolution):
  // whole images where a batch divides evenly over the ranges or has at least 4 images per
  // range; else each image's output rows in as many blocks as ranges (batch 1: a convolution
  // with one output row stays whole, on one thread).
  static Split PlanSplit(const KernelContext& ctx, const Geometry& g) {
    Split s;
    const int64_t weight = g.c / g.g < 4 ? kDepthwiseWeight : 1;
    if (ctx.num_threads() < 2 ||
        g.n * g.m * g.spatial_out() * g.kernel_size() * weight < kMinSplitWork) {
      return s;
    }
    const int image_tasks = ctx.ParallelTasks(g.n, 1);
    if (g.n >= 2 && (g.n % image_tasks == 0 || g.n >= 4 * image_tasks)) {
      s.parts = 1;
    } else {
      // Each part is an entry of the site's cache: at most half of it.
      s.parts = std::min(ctx.ParallelTasks(g.od[0], 1), ConvCacheCapacity() / 2);
      if (s.parts < 2) return Split();
    }
    s.units = g.n * s.parts;
    s.tasks = ctx.ParallelTasks(s.units, 1);
    return s;
  }

  // The site's entries for the parts of `split` (each bound for one image's rows, with a handle
  // per range), in *parts; left empty where one has no primitive or the parts pack the weights
  // differently (the whole convolution then runs on one thread).
  absl::Status BindParts(SiteCache* st, const ShapeKey& base, const Geometry& g, const Tensor& x,
                         DType out_dtype, const Split& split, const std::vector<float>& scales,
                         std::vector<Entry*>* parts) const {
    const dt xt = x.dtype() == DType::kU8 ? dt::u8 : dt::s8;
    const dt yt = YType(out_dtype);
    dnnl::memory::dims xfull = {g.n, g.c}, yfull = {g.n, g.m};
    for (int i = 0; i < g.k; ++i) {
      xfull.push_back(g.in[i]);
      yfull.push_back(g.od[i]);
    }
    for (int p = 0; p < split.parts; ++p) {
      int64_t r0, r1, i0, i1;
      PartRows(g, p, split.parts, &r0, &r1);
      Geometry s;
      if (!RowSlice(g, r0, r1, &s, &i0, &i1)) {
        parts->clear();
        return absl::OkStatus();
      }
      ShapeKey key = base;
      key.Add(int64_t{-2});  // a part of a split run
      key.Add(split.parts);
      key.Add(p);
      bool fresh = false;
      Entry* e = st->Lookup(key, &fresh);
      if (fresh) {
        DYNVM_RETURN_IF_ERROR(BindEntry(e, "int8 convolution", [&](const dnnl::engine& engine) {
          e->per_image = true;
          dnnl::memory::dims xd = xfull, yd = yfull;
          xd[0] = yd[0] = 1;
          xd[2] = s.in[0];
          yd[2] = s.od[0];
          // A slice of a channels-last image is a dense channels-last tensor; a slice of a
          // plain one keeps the whole tensor's strides.
          const dnnl::memory::desc src =
              a_.channels_last_in
                  ? dnnl::memory::desc(xd, xt, ChannelsLastTag(static_cast<int>(xd.size())))
                  : dnnl::memory::desc(xd, xt, DenseStrides(xfull, false));
          const dnnl::memory::desc dst =
              a_.channels_last_out
                  ? dnnl::memory::desc(yd, yt, ChannelsLastTag(static_cast<int>(yd.size())))
                  : dnnl::memory::desc(yd, yt, DenseStrides(yfull, false));
          Bind(engine, s, xt, src, yt, dst, scales, e);
        }));
      }
      if (e->use_fallback || e->out_scales != scales ||
          (!parts->empty() && e->w_packed != (*parts)[0]->w_packed)) {
        parts->clear();
        return absl::OkStatus();
      }
      for (int t = static_cast<int>(e->lanes.size()); t < split.tasks; ++t) {
        e->lanes.push_back(
            {e->main.Share(), e->src_reorder.Share(), e->dst_reorder.Share(), BoundPrimitive()});
      }
      parts->push_back(e);
    }
    return absl::OkStatus();
  }

  // Runs the parts of `split` over the VM's threads, each range at OpenMP count 1 (no OpenMP
  // team) with its own handles and scratch, claiming the next unit (an image's part) from a
  // shared counter: a range whose core is busy holds up only the unit it is on. The weights
  // are reordered once, on this thread, for all the parts (BindParts checked they pack alike).
  // Each output's arithmetic is that of the whole convolution on one thread: the integer sum,
  // then the same f32 requantization.
  absl::Status RunSplit(KernelContext& ctx, const std::vector<Entry*>& parts, const Split& split,
                        const Geometry& g, const Tensor& x, const Tensor& w, int32_t zx, Inputs in,
                        const Tensor* bias, Tensor* y) const {
    size_t scratch = 0, src_bytes = 0, dst_bytes = 0;
    for (const Entry* e : parts) {
      for (const BoundPrimitive* r : {&e->main, &e->src_reorder, &e->dst_reorder, &e->w_reorder}) {
        scratch = std::max(scratch, r->scratchpad_bytes());
      }
      src_bytes = std::max(src_bytes, e->src_bytes);
      dst_bytes = std::max(dst_bytes, e->dst_bytes);
    }
    const size_t slot = Align(scratch) + src_bytes + dst_bytes;
    const size_t w_bytes = parts[0]->w_bytes;
    const size_t params = Align(static_cast<size_t>(g.m) * sizeof(int32_t));
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(split.tasks * slot + w_bytes + params + 64));
    char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws) + 63) & ~uintptr_t{63});
    char* pw = base + split.tasks * slot;
    int32_t* zero_bias = reinterpret_cast<int32_t*>(pw + w_bytes);
    DYNVM_ASSIGN_OR_RETURN(const void* wts, PackedWeights(*parts[0], w, pw, base));
    const void* b = bias != nullptr ? bias->raw_data() : nullptr;
    if (qlinear_ && b == nullptr) {
      std::fill(zero_bias, zero_bias + g.m, 0);
      b = zero_bias;
    }
    const int32_t zy = qlinear_ ? static_cast<int32_t>(QuantParamAt(in[7], 0)) : 0;
    // Bytes of one image and of one row of spatial dim 0, of x and of y.
    int64_t x_row = 1, y_row = DTypeSize(y->dtype());
    for (int i = 1; i < g.k; ++i) {
      x_row *= g.in[i];
      y_row *= g.od[i];
    }
    const int64_t x_image = x_row * g.in[0] * g.c, y_image = y_row * g.od[0] * g.m;
    if (a_.channels_last_in) x_row *= g.c;  // else a channel's row (the plain slice's stride)
    if (a_.channels_last_out) y_row *= g.m;
    const char* px = static_cast<const char*>(x.raw_data());
    char* py = static_cast<char*>(y->raw_data());
    std::atomic<int64_t> next{0};
    std::vector<absl::Status> status(static_cast<size_t>(split.tasks));
    ctx.ParallelFor(split.tasks, 1, [&](int64_t t0, int64_t t1) {
      SetThreads(1);  // a pool worker, or the caller: one primitive per unit, no OpenMP team
      for (int64_t t = t0; t < t1; ++t) {
        absl::Status& st = status[static_cast<size_t>(t)];
        for (int64_t u = next.fetch_add(1); u < split.units && st.ok(); u = next.fetch_add(1)) {
          const int p = static_cast<int>(u % split.parts);
          const int64_t image = u / split.parts;
          int64_t r0, r1, i0, i1;
          PartRows(g, p, split.parts, &r0, &r1);
          Geometry sg;
          RowSlice(g, r0, r1, &sg, &i0, &i1);
          const std::array<BoundPrimitive, 4>& lane = parts[static_cast<size_t>(p)]->lanes[t];
          st = RunPart(*parts[static_cast<size_t>(p)], lane, px + image * x_image + i0 * x_row, wts,
                       b, py + image * y_image + r0 * y_row, zx, zy, base + t * slot,
                       Align(scratch), src_bytes);
        }
      }
    });
    for (const absl::Status& st : status) DYNVM_RETURN_IF_ERROR(st);
    // ConvInteger: a sum of 2^24 or more may have been rounded by oneDNN's f32 store (header).
    if (!qlinear_ &&
        cpu::AnyAbsAtLeast(y->numel(), y->data<int32_t>(), static_cast<int32_t>(kExactF32))) {
      return RunFallback(ctx, in, Outputs(&y, 1));
    }
    return absl::OkStatus();
  }

  // One unit of a split run on `lane`'s handles: x's slice (reordered into the slot), the
  // convolution, y's slice (reordered out of the slot).
  absl::Status RunPart(const Entry& e, const std::array<BoundPrimitive, 4>& lane, const void* x,
                       const void* wts, const void* bias, void* y, int32_t zx, int32_t zy,
                       char* slot, size_t scratch_bytes, size_t src_bytes) const {
    char* psrc = slot + scratch_bytes;
    char* pdst = psrc + src_bytes;
    const void* src = x;
    if (e.src_reorder.bound()) {
      DYNVM_RETURN_IF_ERROR(lane[1].Execute({src, psrc}, slot));
      src = psrc;
    }
    void* dst = e.dst_reorder.bound() ? static_cast<void*>(pdst) : y;
    if (qlinear_) {
      DYNVM_RETURN_IF_ERROR(lane[0].Execute({src, wts, bias, dst, &zx, &zy}, slot));
    } else {
      DYNVM_RETURN_IF_ERROR(lane[0].Execute({src, wts, dst, &zx}, slot));
    }
    if (e.dst_reorder.bound()) DYNVM_RETURN_IF_ERROR(lane[2].Execute({pdst, y}, slot));
    return absl::OkStatus();
  }

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
  // in f32 as ONNX Runtime computes them: the product rounded, then the quotient.
  static std::vector<float> OutputScales(Inputs in) {
    const float xs = static_cast<float>(QuantParamAt(in[1], 0));
    const float ys = static_cast<float>(QuantParamAt(in[6], 0));
    std::vector<float> s(static_cast<size_t>(in[4]->numel()));
    for (size_t oc = 0; oc < s.size(); ++oc) {
      const float xw = xs * static_cast<float>(QuantParamAt(in[4], static_cast<int64_t>(oc)));
      s[oc] = xw / ys;
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

  // Binds the primitive for `g` (x of type xt stored as `src`, y of type yt stored as `dst`: the
  // whole tensors, or an image's rows for a split run): ConvInteger's with an s32 destination;
  // QLinearConv's with its requantization inside (output scales per tensor or per output
  // channel, y's zero point, an s32 bias, a u8 or s8 destination).
  void Bind(const dnnl::engine& engine, const Geometry& g, dt xt, const dnnl::memory::desc& src,
            dt yt, const dnnl::memory::desc& dst, const std::vector<float>& scales,
            Entry* e) const {
    e->out_scales = scales;
    dnnl::memory::dims xd = {g.n, g.c}, wdims, out_dims = {g.n, g.m};
    if (g.g > 1) {
      wdims = {g.g, g.m / g.g, g.c / g.g};
    } else {
      wdims = {g.m, g.c};
    }
    for (int i = 0; i < g.k; ++i) {
      xd.push_back(g.in[i]);
      wdims.push_back(g.kd[i]);
      out_dims.push_back(g.od[i]);
    }
    const dnnl::memory::desc wts = DenseDesc(dt::s8, wdims);
    const dnnl::memory::desc src_any(xd, xt, dnnl::memory::format_tag::any);
    const dnnl::memory::desc wts_any(wdims, dt::s8, dnnl::memory::format_tag::any);
    const dnnl::memory::desc dst_any(out_dims, yt, dnnl::memory::format_tag::any);
    const dnnl::memory::desc bias_md = qlinear_ ? DenseDesc(dt::s32, {g.m}) : dnnl::memory::desc();
    const dnnl::memory::dims strides(g.st, g.st + g.k), pl(g.pl, g.pl + g.k), pr(g.pr, g.pr + g.k);
    dnnl::memory::dims dil(static_cast<size_t>(g.k));
    for (int i = 0; i < g.k; ++i)
      dil[static_cast<size_t>(i)] = g.dl[i] - 1;  // oneDNN counts dilation from 0
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                      dnnl::algorithm::convolution_direct, src_any, wts_any,
                                      bias_md, dst_any, strides, dil, pl, pr);
    dnnl::convolution_forward::primitive_desc pd = RoundedPd(d, scales, engine);
    const dnnl::memory::desc psrc = pd.query_md(dnnl::query::src_md);
    const dnnl::memory::desc pwts = pd.query_md(dnnl::query::weights_md);
    const dnnl::memory::desc pdst = pd.query_md(dnnl::query::dst_md);
    e->reference_impl = IsReferenceImpl(pd);
    e->w_packed = pwts;
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
    if (pdst != dst) BindReorder(&e->dst_reorder, engine, pdst, dst);
    e->dst_bytes = Align(pdst.get_size());
  }

  // The primitive of `d` with, for QLinearConv, rounding (half to even) before y's zero point is
  // added, as MLAS does (an eltwise_round post-op: oneDNN alone adds the zero point in f32 first,
  // which moves values within f32's rounding of a tie); without it where oneDNN has no kernel
  // taking the post-op (grouped 1x1 convolutions in 2.6.3), whose results then differ from MLAS's
  // only at such ties. REQUIRES: inside Guard.
  dnnl::convolution_forward::primitive_desc RoundedPd(const dnnl::convolution_forward::desc& d,
                                                      const std::vector<float>& scales,
                                                      const dnnl::engine& engine) const {
    // A fresh attribute each time (dnnl::primitive_attr copies share one).
    auto attr = [&](bool round) {
      dnnl::primitive_attr a = UserScratchpadAttr();
      a.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
      if (qlinear_) {
        a.set_output_scales(scales.size() > 1 ? 1 << 1 : 0, scales);
        a.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
      }
      if (round) {
        dnnl::post_ops po;
        po.append_eltwise(1.0f, dnnl::algorithm::eltwise_round, 0.0f, 0.0f);
        a.set_post_ops(po);
      }
      return a;
    };
    if (qlinear_) {
      try {
        dnnl::convolution_forward::primitive_desc pd(d, attr(true), engine);
        dnnl::convolution_forward probe(pd);  // some kernels refuse the post-op only here
        return pd;
      } catch (const dnnl::error&) {  // no kernel with the post-op: the one without it
      }
    }
    return dnnl::convolution_forward::primitive_desc(d, attr(false), engine);
  }

  // The weights in the primitive's layout: reordered into `pw` (workspace) on every run, or, for
  // constant weights, once per entry and kept there (reordered again only if the tensor moved).
  absl::StatusOr<const void*> PackedWeights(const Entry& e, const Tensor& w, char* pw,
                                            char* scratch) const {
    if (!e.w_reorder.bound()) return w.raw_data();
    if (!a_.constant_weights) {
      DYNVM_RETURN_IF_ERROR(e.w_reorder.Execute({w.raw_data(), pw}, scratch));
      return pw;
    }
    if (e.w_cache.empty() || e.w_cache_src != w.raw_data()) {
      e.w_cache.assign(e.w_bytes + 64, 0);
      e.w_cache_src = nullptr;
      DYNVM_RETURN_IF_ERROR(e.w_reorder.Execute({w.raw_data(), AlignedCache(e)}, scratch));
      e.w_cache_src = w.raw_data();
    }
    return AlignedCache(e);
  }

  static char* AlignedCache(const Entry& e) {
    return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(e.w_cache.data()) + 63) &
                                   ~uintptr_t{63});
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
    const void* src = x.raw_data();
    if (e.src_reorder.bound()) {
      DYNVM_RETURN_IF_ERROR(e.src_reorder.Execute({src, psrc}, pscratch));
      src = psrc;
    }
    DYNVM_ASSIGN_OR_RETURN(const void* wts, PackedWeights(e, w, pw, pscratch));
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
            DYNVM_ASSIGN_OR_RETURN(int64_t cw, spec.GetInt("constant_weights", 0));
            a.constant_weights = cw != 0;
          }
          // Its fallback is the registry's next kernel for the spec: the im2col kernel
          // (quant.cc, kDnnlSecondPriority), whose own fallback is the reference kernel.
          return std::make_unique<QConvKernel>(KernelName(spec), qlinear, std::move(a));
        }});
  }
}

}  // namespace dynvm::onednn
