// oneDNN MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool (pooling_v2), inference
// BatchNormalization (global statistics) and LRN (across channels), f32, on the plain layout,
// with the conv family's per-site primitive cache (conv.h).
//
// A plain 4-D or 5-D input is reordered to channels-last in the workspace before oneDNN pools
// it: oneDNN 2.6 pools nchw with its reference implementation. Inference BatchNormalization
// over rows of 8 pixels or more is a scale and shift per (image, channel) row
// (cpu::BinaryRows), not oneDNN's plain-layout primitive (about 6 ns an element).
//
// Run-time fallbacks to the reference kernel, which also reports every shape error: empty
// tensors, more than 3 spatial dims, a max pool over an input holding NaN (the reference kernel
// propagates it; oneDNN's max drops it), an average pool with count_include_pad whose ceil_mode
// adds a window past the end padding (ONNX does not count that part), pads oneDNN rejects, and
// BatchNormalization parameters that are not one contiguous value per channel. MaxPool's Indices
// output and training-mode BatchNormalization are the reference kernel's (at create).
//
// GlobalAveragePool and GlobalMaxPool over a dense input run kernels/cpu/reduce.h's
// microkernels, not the pooling primitive: a row reduction per (image, channel) on the plain
// layout, a column reduction over the pixels on channels-last (the squeeze of a
// squeeze-excitation block). oneDNN 2.6 pools a plain nchw input with a reference kernel (11.6 ms
// a call in PaddleOCR v4 detection's profile, issue 32). A global max pool over an input holding
// NaN stays the reference kernel's (the row loops skip NaN).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/reduce.h"
#include "kernels/dnnl/conv_common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/parallel_loops.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

using dt = dnnl::memory::data_type;
using reference::Dims;

// ---- Pooling ----

struct PoolAttrs {
  bool max = true;
  bool global = false;
  Dims kernel, strides, pads, dilations;
  std::string auto_pad = "NOTSET";
  bool ceil_mode = false;
  bool count_include_pad = false;
  bool channels_last_in = false, channels_last_out = false;  // compiler/conv_fusion.h
};

// The channels-last (NHWC) descriptor of a [N, C, spatial...] tensor's logical dims.
dnnl::memory::desc ChannelsLastDesc(absl::Span<const int64_t> dims) {
  using tag = dnnl::memory::format_tag;
  const tag t = dims.size() == 3 ? tag::acb : dims.size() == 4 ? tag::acdb : tag::acdeb;
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), dt::f32, t);
}

struct PoolGeometry {
  int k = 0;
  int64_t in[3], kd[3], st[3], dl[3], pl[3], pr[3], od[3];
  bool extended = false;  // ceil_mode added a window past the end padding
};

// As the reference kernel's Plan (kernels/reference/pool.cc); false when invalid or outside
// this kernel.
bool PoolPlan(const PoolAttrs& a, const Tensor& x, PoolGeometry* g) {
  const int k = x.rank() - 2;
  if (k < 1 || k > 3) return false;
  const auto sk = static_cast<size_t>(k);
  g->k = k;
  if (!a.global && (a.kernel.size() != sk || (!a.strides.empty() && a.strides.size() != sk) ||
                    (!a.dilations.empty() && a.dilations.size() != sk) ||
                    (!a.pads.empty() && a.auto_pad == "NOTSET" && a.pads.size() != 2 * sk))) {
    return false;
  }
  const bool same = !a.global && (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER");
  for (int i = 0; i < k; ++i) {
    const auto u = static_cast<size_t>(i);
    g->in[i] = x.dim(i + 2);
    g->kd[i] = a.global ? g->in[i] : a.kernel[u];
    g->st[i] = a.global || a.strides.empty() ? 1 : a.strides[u];
    const int64_t dil = a.global || a.dilations.empty() ? 1 : a.dilations[u];
    if (g->kd[i] < 1 || g->st[i] < 1 || dil < 1) return false;
    g->dl[i] = dil - 1;
    const int64_t span = (g->kd[i] - 1) * dil + 1;
    int64_t pb = 0, pe = 0;
    if (!a.global && a.auto_pad == "NOTSET" && !a.pads.empty()) {
      pb = a.pads[u];
      pe = a.pads[sk + u];
      if (pb < 0 || pe < 0) return false;
    }
    int64_t o;
    if (same) {
      o = (g->in[i] + g->st[i] - 1) / g->st[i];
      const int64_t total = std::max<int64_t>(0, (o - 1) * g->st[i] + span - g->in[i]);
      pb = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe = total - pb;
    } else {
      const int64_t room = g->in[i] + pb + pe - span;
      if (room < 0) return false;
      o = (a.ceil_mode ? (room + g->st[i] - 1) / g->st[i] : room / g->st[i]) + 1;
      if (a.ceil_mode && (o - 1) * g->st[i] >= g->in[i] + pb) --o;
    }
    g->od[i] = o;
    g->pl[i] = pb;
    g->pr[i] = (o - 1) * g->st[i] + span - g->in[i] - pb;
    if (g->pr[i] > pe) g->extended = true;
  }
  return true;
}

// Window elements up to which a channels-last max pool runs ChannelsLastMaxPool.
constexpr int64_t kMaxTaps = 64;

// A max pool whose windows lie inside a channels-last input (no padding, any kernel, stride
// and dilation), written channels-last: one pass over the output pixels, each the maximum of
// its window's channel vectors. Memory-bound: about twice oneDNN's AVX2 pooling on a CRNN's
// stages, and it propagates NaN, so it needs no scan of the input for one.
void ChannelsLastMaxPool(const KernelContext& ctx, const PoolGeometry& g, const Tensor& x,
                         float* y) {
  int64_t in[3] = {1, 1, 1}, kd[3] = {1, 1, 1}, st[3] = {1, 1, 1}, dl[3] = {1, 1, 1},
          od[3] = {1, 1, 1};
  for (int i = 0; i < g.k; ++i) {
    const int j = 3 - g.k + i;
    in[j] = g.in[i];
    kd[j] = g.kd[i];
    st[j] = g.st[i];
    dl[j] = g.dl[i] + 1;
    od[j] = g.od[i];
  }
  const int64_t c = x.dim(1), n = x.dim(0);
  absl::InlinedVector<int64_t, kMaxTaps> taps;
  for (int64_t a = 0; a < kd[0]; ++a) {
    for (int64_t b = 0; b < kd[1]; ++b) {
      for (int64_t e = 0; e < kd[2]; ++e) {
        taps.push_back(((a * dl[0] * in[1] + b * dl[1]) * in[2] + e * dl[2]) * c);
      }
    }
  }
  const float* px = x.data<float>();
  const int64_t rows = n * od[0] * od[1];  // output rows of od[2] pixels
  auto run = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t oh = r % od[1], odd = (r / od[1]) % od[0], b = r / (od[1] * od[0]);
      const float* base = px + ((b * in[0] + odd * st[0]) * in[1] + oh * st[1]) * in[2] * c;
      float* yr = y + r * od[2] * c;
      for (int64_t ow = 0; ow < od[2]; ++ow) {
        cpu::MaxOverTaps(c, base + ow * st[2] * c, taps.data(), static_cast<int64_t>(taps.size()),
                         yr + ow * c);
      }
    }
  };
  const int64_t per_row = od[2] * c * static_cast<int64_t>(taps.size());
  if (ctx.num_threads() > 1 && rows * per_row >= kMinParallelWork / 16) {
    ctx.ParallelFor(rows, std::max<int64_t>(1, (kMinParallelWork / 64) / per_row), run);
  } else {
    run(0, rows);
  }
}

// A global pool of a dense f32 x [N, C, spatial...] (channels-last when `channels_last`) into
// y [N, C] (the same bytes in both layouts): the mean or maximum over the pixels, split over
// the images and channels (plain) or the images (channels-last) across the VM's pool.
void GlobalPool(const KernelContext& ctx, bool max, bool channels_last, const Tensor& x, float* y) {
  const int64_t n = x.dim(0), c = x.dim(1), pixels = x.numel() / std::max<int64_t>(1, n * c);
  const cpu::ReduceOp op = max ? cpu::ReduceOp::kMax : cpu::ReduceOp::kSum;
  const float* px = x.data<float>();
  const float scale = max ? 1.0f : 1.0f / static_cast<float>(pixels);
  // Rows [r0, r1): (image, channel) pairs (plain) or images (channels-last).
  auto run = [&](int64_t r0, int64_t r1) {
    if (channels_last) {
      cpu::ReduceColumns(op, r1 - r0, pixels, c, px + r0 * pixels * c, y + r0 * c);
    } else {
      cpu::ReduceRows(op, r1 - r0, pixels, px + r0 * pixels, y + r0);
    }
    if (!max) {
      const int64_t per = channels_last ? c : 1;
      for (int64_t i = r0 * per; i < r1 * per; ++i) y[i] *= scale;
    }
  };
  const int64_t rows = channels_last ? n : n * c;
  const int64_t per_row = x.numel() / std::max<int64_t>(1, rows);
  if (ctx.num_threads() == 1 || x.numel() < kMinParallelElements) {
    run(0, rows);
  } else {
    ctx.ParallelFor(rows, std::max<int64_t>(1, kMinParallelElements / (2 * per_row)), run);
  }
}

class PoolKernel final : public DnnlKernel {
 public:
  PoolKernel(std::string name, PoolAttrs attrs)
      : DnnlKernel(std::move(name)), attrs_(std::move(attrs)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "Pool"));
    const Tensor& x = *in[0];
    if (attrs_.global && x.dtype() == DType::kF32 && x.rank() >= 3 && x.numel() > 0 &&
        x.is_contiguous() && !(attrs_.max && HasNaN(x))) {
      Dims out_dims = {x.dim(0), x.dim(1)};
      for (int i = 2; i < x.rank(); ++i) out_dims.push_back(1);
      DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(
          ctx, out[0], DType::kF32, out_dims, attrs_.max ? "GlobalMaxPool" : "GlobalAveragePool"));
      if (out[0]->is_contiguous()) {
        GlobalPool(ctx, attrs_.max, attrs_.channels_last_in, x, out[0]->data<float>());
        return absl::OkStatus();
      }
    }
    PoolGeometry g;
    if (x.dtype() == DType::kF32 && x.numel() > 0 && PoolPlan(attrs_, x, &g) && attrs_.max &&
        attrs_.channels_last_in && x.is_contiguous() && InsideWindows(g)) {
      Dims out_dims = {x.dim(0), x.dim(1)};
      int64_t out_spatial = 1;
      for (int i = 0; i < g.k; ++i) {
        out_dims.push_back(g.od[i]);
        out_spatial *= g.od[i];
      }
      if (attrs_.channels_last_out || out_spatial == 1) {
        DYNVM_RETURN_IF_ERROR(
            reference::PrepareOutput(ctx, out[0], DType::kF32, out_dims, "MaxPool"));
        if (out[0]->is_contiguous()) {
          ChannelsLastMaxPool(ctx, g, x, out[0]->data<float>());
          return absl::OkStatus();
        }
      }
    }
    if (x.dtype() != DType::kF32 || x.numel() == 0 || !PoolPlan(attrs_, x, &g) ||
        (attrs_.channels_last_in && !x.is_contiguous()) ||
        (g.extended && !attrs_.max && attrs_.count_include_pad) || (attrs_.max && HasNaN(x))) {
      return RunFallback(ctx, in, out);
    }
    Dims out_dims = {x.dim(0), x.dim(1)};
    for (int i = 0; i < g.k; ++i) out_dims.push_back(g.od[i]);
    SetThreads(ThreadsFor(ctx.num_threads(), x.numel()));
    ShapeKey key;
    key.Add(&x);
    key.Add(ctx.num_threads());
    SiteCache* st = SiteState<SiteCache>(ctx);
    bool fresh = false;
    Entry* e = st->Lookup(key, &fresh);
    if (fresh) {
      DYNVM_RETURN_IF_ERROR(BindEntry(e, "pooling", [&](const dnnl::engine& engine) {
        // A plain input (after a Concat, which stays plain: SqueezeNet's Fire modules,
        // GoogLeNet's and Inception's blocks, DenseNet's transitions): oneDNN 2.6 pools nchw
        // and ncdhw with its reference kernel (12x slower than ONNX Runtime on SqueezeNet),
        // so a reorder brings it to channels-last in the workspace first.
        const bool reorder_in = !attrs_.channels_last_in && PlainReorderPays(x);
        const bool cl_in = attrs_.channels_last_in || reorder_in;
        const dnnl::memory::desc src = cl_in ? ChannelsLastDesc(x.dims()) : TensorDesc(x);
        // A [N, C, 1...] output has the same bytes in both layouts: given channels-last
        // beside a channels-last input, oneDNN runs its optimized pooling, not a reference one.
        int64_t out_spatial = 1;
        for (int i = 0; i < g.k; ++i) out_spatial *= g.od[i];
        const bool cl_out = attrs_.channels_last_out || (cl_in && out_spatial == 1);
        // A channels-last input with a plain output (the end of a conv chain): oneDNN pools
        // mixed layouts with a slow generic kernel, so it pools into channels-last in the
        // workspace and a reorder writes the (smaller) output plain.
        const bool reorder_out = cl_in && !cl_out;
        if (reorder_in) {
          BindReorder(&e->src_reorder, engine, TensorDesc(x), src);
          e->src_bytes = Align(src.get_size());
        }
        const dnnl::memory::desc plain = DenseDesc(dt::f32, out_dims);
        const dnnl::memory::desc dst = cl_out || reorder_out ? ChannelsLastDesc(out_dims) : plain;
        const dnnl::algorithm alg = attrs_.max ? dnnl::algorithm::pooling_max
                                    : attrs_.count_include_pad
                                        ? dnnl::algorithm::pooling_avg_include_padding
                                        : dnnl::algorithm::pooling_avg_exclude_padding;
        dnnl::pooling_v2_forward::desc d(
            dnnl::prop_kind::forward_inference, alg, src, dst, dnnl::memory::dims(g.st, g.st + g.k),
            dnnl::memory::dims(g.kd, g.kd + g.k), dnnl::memory::dims(g.dl, g.dl + g.k),
            dnnl::memory::dims(g.pl, g.pl + g.k), dnnl::memory::dims(g.pr, g.pr + g.k));
        dnnl::pooling_v2_forward::primitive_desc pd(d, UserScratchpadAttr(), engine);
        e->reference_impl = IsReferenceImpl(pd);
        e->main.Bind(pd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
        if (reorder_out) {
          BindReorder(&e->dst_reorder, engine, dst, plain);
          e->dst_bytes = Align(dst.get_size());
        }
      }));
    }
    if (e->use_fallback) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, out_dims, "Pool"));
    if (!e->dst_reorder.bound() && !e->src_reorder.bound()) {
      return ExecuteBound(ctx, e->main, {x.raw_data(), out[0]->raw_data()});
    }
    const size_t scratch =
        Align(std::max({e->main.scratchpad_bytes(), e->src_reorder.scratchpad_bytes(),
                        e->dst_reorder.scratchpad_bytes()}));
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(scratch + e->src_bytes + e->dst_bytes + 64));
    char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws) + 63) & ~uintptr_t{63});
    const void* psrc = x.raw_data();
    if (e->src_reorder.bound()) {
      char* cl = base + scratch;
      DYNVM_RETURN_IF_ERROR(e->src_reorder.Execute({x.raw_data(), cl}, base));
      psrc = cl;
    }
    if (!e->dst_reorder.bound()) return e->main.Execute({psrc, out[0]->raw_data()}, base);
    char* pdst = base + scratch + e->src_bytes;
    DYNVM_RETURN_IF_ERROR(e->main.Execute({psrc, pdst}, base));
    return e->dst_reorder.Execute({pdst, out[0]->raw_data()}, base);
  }

  // A plain 4-D or 5-D input whose pooling oneDNN would run with its reference kernel is worth
  // a reorder to channels-last: more than one channel (one channel is both layouts).
  static bool PlainReorderPays(const Tensor& x) {
    return (x.rank() == 4 || x.rank() == 5) && x.dim(1) > 1;
  }

 private:
  // Every window inside the input: no padding at either end (ceil_mode's extra window
  // included).
  // At most kMaxTaps elements per window (kept on the stack).
  static bool InsideWindows(const PoolGeometry& g) {
    int64_t taps = 1;
    for (int i = 0; i < g.k; ++i) {
      if (g.pl[i] != 0 || g.pr[i] > 0) return false;
      taps *= g.kd[i];
    }
    return taps <= kMaxTaps;
  }

  PoolAttrs attrs_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreatePool(const KernelSpec& spec, bool max, bool global) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 1, 1, 2));
  if (spec.outputs.size() > 1) {
    return absl::UnimplementedError("MaxPool: the Indices output is the reference kernel's");
  }
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
  PoolAttrs a;
  a.max = max;
  a.global = global;
  DYNVM_ASSIGN_OR_RETURN(int64_t cl_in, spec.GetInt("channels_last_in", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t cl_out, spec.GetInt("channels_last_out", 0));
  a.channels_last_in = cl_in != 0;
  a.channels_last_out = cl_out != 0;
  if (!global) {
    for (auto [name, field] : {std::pair<const char*, Dims*>{"kernel_shape", &a.kernel},
                               {"strides", &a.strides},
                               {"pads", &a.pads},
                               {"dilations", &a.dilations}}) {
      DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> v, spec.GetInts(name));
      field->assign(v.begin(), v.end());
    }
    DYNVM_ASSIGN_OR_RETURN(std::string ap, spec.GetString("auto_pad", "NOTSET"));
    a.auto_pad = ap.empty() ? "NOTSET" : ap;
    DYNVM_ASSIGN_OR_RETURN(int64_t ceil, spec.GetInt("ceil_mode", 0));
    DYNVM_ASSIGN_OR_RETURN(int64_t cip, spec.GetInt("count_include_pad", 0));
    DYNVM_ASSIGN_OR_RETURN(int64_t order, spec.GetInt("storage_order", 0));
    if (order != 0) return absl::UnimplementedError("MaxPool: storage_order 1");
    a.ceil_mode = ceil != 0;
    a.count_include_pad = cip != 0;
  }
  return std::make_unique<PoolKernel>(KernelName(spec), std::move(a));
}

// ---- BatchNormalization (inference) ----

class BatchNormKernel final : public DnnlKernel {
 public:
  BatchNormKernel(std::string name, float epsilon)
      : DnnlKernel(std::move(name)), epsilon_(epsilon) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 5, out, "BatchNormalization"));
    const Tensor& x = *in[0];
    bool plain = x.dtype() == DType::kF32 && x.rank() >= 2 && x.rank() <= 5 && x.numel() > 0;
    for (int i = 1; i < 5 && plain; ++i) {
      plain = in[i]->dtype() == DType::kF32 && in[i]->rank() == 1 && in[i]->dim(0) == x.dim(1) &&
              in[i]->is_contiguous();
    }
    if (!plain) return RunFallback(ctx, in, out);
    if (x.is_contiguous() && x.numel() / (x.dim(0) * x.dim(1)) >= kMinScaleShiftPixels) {
      DYNVM_RETURN_IF_ERROR(
          reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "BatchNormalization"));
      if (out[0]->is_contiguous()) {
        ScaleShift(ctx, x, in, out[0]->data<float>());
        return absl::OkStatus();
      }
    }
    SetThreads(ThreadsFor(ctx.num_threads(), x.numel()));
    ShapeKey key;
    key.Add(&x);
    key.Add(ctx.num_threads());
    SiteCache* st = SiteState<SiteCache>(ctx);
    bool fresh = false;
    Entry* e = st->Lookup(key, &fresh);
    if (fresh) {
      DYNVM_RETURN_IF_ERROR(BindEntry(e, "batch normalization", [&](const dnnl::engine& engine) {
        const dnnl::memory::desc src = TensorDesc(x);
        const dnnl::memory::desc dst = DenseDesc(dt::f32, x.dims());
        const dnnl::memory::desc vec = DenseDesc(dt::f32, {x.dim(1)});
        dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_inference, src, epsilon_,
                                                  dnnl::normalization_flags::use_global_stats |
                                                      dnnl::normalization_flags::use_scale |
                                                      dnnl::normalization_flags::use_shift);
        dnnl::batch_normalization_forward::primitive_desc pd(d, UserScratchpadAttr(), engine);
        if (pd.dst_desc() != dst) throw dnnl::error(dnnl_unimplemented, "layout");
        e->main.Bind(pd, {{DNNL_ARG_SRC, src},
                          {DNNL_ARG_SCALE, vec},
                          {DNNL_ARG_SHIFT, vec},
                          {DNNL_ARG_MEAN, vec},
                          {DNNL_ARG_VARIANCE, vec},
                          {DNNL_ARG_DST, dst}});
      }));
    }
    if (e->use_fallback) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "BatchNormalization"));
    return ExecuteBound(ctx, e->main,
                        {x.raw_data(), in[1]->raw_data(), in[2]->raw_data(), in[3]->raw_data(),
                         in[4]->raw_data(), out[0]->raw_data()});
  }

 private:
  // Rows of at least this many pixels run ScaleShift; shorter ones (a [N, C] input) oneDNN.
  static constexpr int64_t kMinScaleShiftPixels = 8;

  // y = x * a[c] + b[c] per (image, channel) row, a = scale / sqrt(var + epsilon) and
  // b = bias - mean * a (in double, rounded once): the oneDNN primitive on the plain layout took
  // 59 us a call in DenseNet-121 at 64x64 (its pre-activation BNs over concatenated features,
  // 26% of the model), about 6 ns an element.
  void ScaleShift(KernelContext& ctx, const Tensor& x, Inputs in, float* y) const {
    const int64_t n = x.dim(0), c = x.dim(1), pixels = x.numel() / (n * c);
    const float *scale = in[1]->data<float>(), *bias = in[2]->data<float>(),
                *mean = in[3]->data<float>(), *var = in[4]->data<float>();
    std::vector<float> a(static_cast<size_t>(c)), b(static_cast<size_t>(c));
    for (int64_t k = 0; k < c; ++k) {
      const double ak = static_cast<double>(scale[k]) /
                        std::sqrt(static_cast<double>(var[k]) + static_cast<double>(epsilon_));
      a[k] = static_cast<float>(ak);
      b[k] = static_cast<float>(static_cast<double>(bias[k]) - static_cast<double>(mean[k]) * ak);
    }
    const float* px = x.data<float>();
    auto run = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t k = r % c;
        cpu::BinaryRows(cpu::BinaryOp::kMul, 1, pixels, px + r * pixels, &a[k], -1, y + r * pixels);
        cpu::BinaryRows(cpu::BinaryOp::kAdd, 1, pixels, y + r * pixels, &b[k], -1, y + r * pixels);
      }
    };
    if (ctx.num_threads() == 1 || x.numel() < kMinParallelElements) {
      run(0, n * c);
    } else {
      ctx.ParallelFor(n * c, std::max<int64_t>(1, kMinParallelElements / (2 * pixels)), run);
    }
  }

  float epsilon_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateBatchNorm(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 5, 5, 1, 3));
  DYNVM_ASSIGN_OR_RETURN(int64_t training, spec.GetInt("training_mode", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t is_test, spec.GetInt("is_test", 1));
  if (spec.outputs.size() > 1 || training != 0 || is_test == 0) {
    return absl::UnimplementedError("BatchNormalization: training mode is the reference kernel's");
  }
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1, 2, 3, 4}));
  DYNVM_ASSIGN_OR_RETURN(float epsilon, spec.GetFloat("epsilon", 1e-5f));
  return std::make_unique<BatchNormKernel>(KernelName(spec), epsilon);
}

// ---- LRN ----

class LrnKernel final : public DnnlKernel {
 public:
  LrnKernel(std::string name, int64_t size, float alpha, float beta, float bias)
      : DnnlKernel(std::move(name)), size_(size), alpha_(alpha), beta_(beta), bias_(bias) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "LRN"));
    const Tensor& x = *in[0];
    if (x.dtype() != DType::kF32 || x.rank() < 3 || x.rank() > 5 || x.numel() == 0) {
      return RunFallback(ctx, in, out);
    }
    SetThreads(ThreadsFor(ctx.num_threads(), x.numel() * size_));
    ShapeKey key;
    key.Add(&x);
    key.Add(ctx.num_threads());
    SiteCache* st = SiteState<SiteCache>(ctx);
    bool fresh = false;
    Entry* e = st->Lookup(key, &fresh);
    if (fresh) {
      DYNVM_RETURN_IF_ERROR(BindEntry(e, "lrn", [&](const dnnl::engine& engine) {
        const dnnl::memory::desc src = TensorDesc(x);
        const dnnl::memory::desc dst = DenseDesc(dt::f32, x.dims());
        dnnl::lrn_forward::desc d(dnnl::prop_kind::forward_inference,
                                  dnnl::algorithm::lrn_across_channels, src, size_, alpha_, beta_,
                                  bias_);
        dnnl::lrn_forward::primitive_desc pd(d, UserScratchpadAttr(), engine);
        if (pd.dst_desc() != dst) throw dnnl::error(dnnl_unimplemented, "layout");
        e->main.Bind(pd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
      }));
    }
    if (e->use_fallback) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "LRN"));
    return ExecuteBound(ctx, e->main, {x.raw_data(), out[0]->raw_data()});
  }

 private:
  int64_t size_;
  float alpha_, beta_, bias_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateLrn(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 1, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
  DYNVM_ASSIGN_OR_RETURN(int64_t size, spec.GetInt("size", 0));
  DYNVM_ASSIGN_OR_RETURN(float alpha, spec.GetFloat("alpha", 1e-4f));
  DYNVM_ASSIGN_OR_RETURN(float beta, spec.GetFloat("beta", 0.75f));
  DYNVM_ASSIGN_OR_RETURN(float bias, spec.GetFloat("bias", 1.0f));
  // oneDNN centres an even window differently from ONNX (which puts the extra channel after).
  if (size % 2 == 0) return absl::UnimplementedError("LRN: an even size is the reference kernel's");
  return std::make_unique<LrnKernel>(KernelName(spec), size, alpha, beta, bias);
}

void Add(KernelRegistry& r, const char* op, KernelFactory f) {
  r.Register(KernelRegistration{"", op, Device::kCPU, kBackend, kDnnlPriority, std::move(f)});
}

}  // namespace

void RegisterPoolKernels(KernelRegistry& r) {
  Add(r, "MaxPool", [](const KernelSpec& s) { return CreatePool(s, true, false); });
  Add(r, "AveragePool", [](const KernelSpec& s) { return CreatePool(s, false, false); });
  Add(r, "GlobalMaxPool", [](const KernelSpec& s) { return CreatePool(s, true, true); });
  Add(r, "GlobalAveragePool", [](const KernelSpec& s) { return CreatePool(s, false, true); });
  Add(r, "BatchNormalization", &CreateBatchNorm);
  Add(r, "LRN", &CreateLrn);
}

}  // namespace dynvm::onednn
