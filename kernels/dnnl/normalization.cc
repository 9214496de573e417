// oneDNN Softmax (softmax_v2 primitive) and LayerNormalization (f32), bound once per site and
// shape. LogSoftmax never runs oneDNN's softmax_log (its vectorized log is off by ~1.4e-6 near 1,
// so the log-probability of a row's only element came out +1.4e-6): over the last axis of a
// contiguous input it runs cpu::LogSoftmaxRows (kernels/cpu/rows.h: the vector exp, the log of the
// sum and the subtractions in double, so a row's only element gives exactly 0 and no value is
// above 0), rows split across the VM's pool as Softmax's are, with Softmax's rules for -inf
// (-inf out), NaN and +inf (the row NaN throughout); every other LogSoftmax (another axis, a
// strided or empty input) is the reference kernel's.
//
// Softmax over the last axis of a contiguous input (attention, an output layer) runs a plain
// vectorized loop (cpu::SoftmaxRows, kernels/cpu/rows.h) instead of the primitive: a decoder's
// attention grows every step, and binding a primitive per shape costs more than the softmax itself.
// With more than one thread the loop's rows are split across the VM's pool above kMinParallelRows
// elements (parallel_loops.h), so that oneDNN's OpenMP threads never run beside the pool's. It also
// serves -inf entries (a causal mask: exactly 0), and rows with NaN or +inf as the reference kernel
// does (NaN throughout).
//
// LayerNormalization of at most kChurnMaxElements elements, or of any size with more than one
// thread, is a plain loop too (rows split likewise), and so are, at every size, dynvm::RMSNorm
// (the fused op of compiler/rewrite/rms_norm.cc), SimplifiedLayerNormalization and
// RMSNormalization 23 (cpu::RmsNormRows), and com.microsoft SkipLayerNormalization and
// SkipSimplifiedLayerNormalization (per row: X + skip + bias in f32, ORT's sum output, then
// cpu::LayerNormRows / RmsNormRows in place). Their reference kernels (in double) serve the
// skip ops' mean and inv_std_var outputs, a scale that broadcasts, and strided or non-f32 inputs.
//
// Run-time fallbacks to the reference kernel: empty tensors, Softmax over an input holding NaN
// or +inf, or a row of -inf only (oneDNN resolves those rows differently), opset < 13 Softmax on a
// strided input, and LayerNormalization on a strided input or with a Scale/B that is not one value
// per normalized element. A LayerNormalization asked for its Mean and InvStdDev outputs is the
// reference kernel's (at create: oneDNN returns the variance, not its inverse square root).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/rows.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/parallel_loops.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

using dt = dnnl::memory::data_type;

// ---- Softmax ----

class SoftmaxKernel final : public DnnlKernel {
 public:
  SoftmaxKernel(std::string name, int64_t axis, bool legacy_2d)
      : DnnlKernel(std::move(name)), axis_(axis), legacy_2d_(legacy_2d) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "Softmax"));
    const Tensor& x = *in[0];
    const int rank = x.rank();
    if (x.dtype() != DType::kF32 || x.numel() == 0 || axis_ < -rank || axis_ >= rank ||
        (legacy_2d_ && !x.is_contiguous())) {
      return RunFallback(ctx, in, out);
    }
    const int axis = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
    // The loop, its rows split across the VM's pool with more than one thread.
    if (!legacy_2d_ && axis == rank - 1 && x.is_contiguous()) {
      DYNVM_RETURN_IF_ERROR(
          reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "Softmax"));
      const int64_t n = x.dim(rank - 1);
      ParallelSoftmaxRows(ctx, x.numel() / n, n, x.data<float>(), out[0]->data<float>());
      return absl::OkStatus();
    }
    // A row holding NaN or +inf is NaN throughout for the reference kernel (exp(inf - inf));
    // oneDNN's max skips NaN and gives the other elements numbers.
    if (HasNonFinite(x)) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "Softmax"));
    SetThreads(ThreadsFor(ctx.num_threads(), x.numel()));
    ShapeKey key;
    key.Add(&x);
    key.Add(ctx.num_threads());
    PrimitiveState* st = SiteState<PrimitiveState>(ctx);
    DYNVM_RETURN_IF_ERROR(
        Rebind(ctx, st, key, x.numel(), "softmax", [&](const dnnl::engine& engine) {
          dnnl::memory::desc src, dst;
          int dnnl_axis = axis;
          if (legacy_2d_) {
            // Opset < 13: normalize over [axis, rank) of the input viewed as 2-D.
            int64_t outer = 1, inner = 1;
            for (int d = 0; d < rank; ++d) (d < axis ? outer : inner) *= x.dim(d);
            src = dst = DenseDesc(dt::f32, {outer, inner});
            dnnl_axis = 1;
          } else {
            src = TensorDesc(x);
            dst = DenseDesc(dt::f32, x.dims());
          }
          dnnl::softmax_v2_forward::desc d(dnnl::prop_kind::forward_inference,
                                           dnnl::algorithm::softmax_accurate, src, dst, dnnl_axis);
          dnnl::softmax_v2_forward::primitive_desc pd(d, UserScratchpadAttr(), engine);
          st->prim.Bind(pd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
        }));
    if (st->use_fallback) return RunFallback(ctx, in, out);
    return ExecuteBound(ctx, st->prim, {x.raw_data(), out[0]->raw_data()});
  }

 private:
  int64_t axis_;
  bool legacy_2d_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmax(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 1, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
  DYNVM_ASSIGN_OR_RETURN(int64_t legacy, spec.GetInt("legacy_2d", 0));
  absl::StatusOr<int64_t> axis = spec.GetInt("axis", legacy != 0 ? 1 : -1);
  if (!axis.ok()) return axis.status();
  return std::make_unique<SoftmaxKernel>(KernelName(spec), *axis, legacy != 0);
}

// ---- LogSoftmax ----

// Over the last axis of a contiguous input (opset < 13's 2-D view too, when its axis is the
// last): cpu::LogSoftmaxRows, rows split across the VM's pool. Every other case is the reference
// kernel's (not oneDNN's softmax_log: its vectorized log is off by ~1.4e-6 near 1, so a row's
// only element, or a dominant one, came out +1.4e-6, above 0: seed 7 graphs 20569 and 46513).
class LogSoftmaxKernel final : public DnnlKernel {
 public:
  LogSoftmaxKernel(std::string name, int64_t axis) : DnnlKernel(std::move(name)), axis_(axis) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "LogSoftmax"));
    const Tensor& x = *in[0];
    const int rank = x.rank();
    if (x.dtype() != DType::kF32 || x.numel() == 0 || !x.is_contiguous() || rank == 0 ||
        (axis_ != -1 && axis_ != rank - 1)) {
      return RunFallback(ctx, in, out);
    }
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "LogSoftmax"));
    const int64_t n = x.dim(rank - 1);
    ParallelLogSoftmaxRows(ctx, x.numel() / n, n, x.data<float>(), out[0]->data<float>());
    return absl::OkStatus();
  }

 private:
  int64_t axis_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateLogSoftmax(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 1, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
  DYNVM_ASSIGN_OR_RETURN(int64_t legacy, spec.GetInt("legacy_2d", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", legacy != 0 ? 1 : -1));
  return std::make_unique<LogSoftmaxKernel>(KernelName(spec), axis);
}

// ---- LayerNormalization ----

// True when `t` (Scale or B) holds exactly one value per element of x's dims [axis, rank), in
// row-major order: dims right-aligned equal to those (leading 1s allowed), contiguous.
bool PerElement(const Tensor& t, const Tensor& x, int axis, int64_t count) {
  if (t.dtype() != DType::kF32 || t.rank() > x.rank() || t.numel() != count || !t.is_contiguous()) {
    return false;
  }
  const int lead = x.rank() - t.rank();
  for (int i = 0; i < t.rank(); ++i) {
    const int p = lead + i;
    if (p < axis ? t.dim(i) != 1 : t.dim(i) != x.dim(p)) return false;
  }
  return true;
}

class LayerNormKernel final : public DnnlKernel {
 public:
  LayerNormKernel(std::string name, int64_t axis, float epsilon)
      : DnnlKernel(std::move(name)), axis_(axis), epsilon_(epsilon) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "LayerNormalization"));
    const Tensor& x = *in[0];
    const Tensor* scale = in.size() > 1 ? in[1] : nullptr;
    const Tensor* bias = in.size() > 2 ? in[2] : nullptr;
    const int rank = x.rank();
    if (x.dtype() != DType::kF32 || !x.is_contiguous() || axis_ < -rank || axis_ >= rank ||
        x.numel() == 0 || (out.size() > 1 && out[1] != nullptr) ||
        (out.size() > 2 && out[2] != nullptr)) {
      return RunFallback(ctx, in, out);
    }
    const int axis = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
    int64_t rows = 1, count = 1;
    for (int d = 0; d < rank; ++d) (d < axis ? rows : count) *= x.dim(d);
    if ((scale != nullptr && !PerElement(*scale, x, axis, count)) ||
        (bias != nullptr && !PerElement(*bias, x, axis, count))) {
      return RunFallback(ctx, in, out);
    }
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "LayerNormalization"));
    // A plain loop (no primitive to bind per shape), its rows on the VM's pool with more than
    // one thread (oneDNN's primitive would use OpenMP); larger inputs on one thread: the primitive.
    if (x.numel() <= kChurnMaxElements || ctx.num_threads() > 1) {
      ParallelLayerNormRows(
          ctx, rows, count, x.data<float>(), scale != nullptr ? scale->data<float>() : nullptr,
          bias != nullptr ? bias->data<float>() : nullptr, epsilon_, out[0]->data<float>());
      return absl::OkStatus();
    }
    SetThreads(ThreadsFor(ctx.num_threads(), x.numel()));
    ShapeKey key;
    key.Add(rows);
    key.Add(count);
    key.Add(scale != nullptr);
    key.Add(bias != nullptr);
    key.Add(ctx.num_threads());
    PrimitiveState* st = SiteState<PrimitiveState>(ctx);
    DYNVM_RETURN_IF_ERROR(
        Rebind(ctx, st, key, x.numel(), "layer normalization", [&](const dnnl::engine& engine) {
          const dnnl::memory::desc data = DenseDesc(dt::f32, {rows, count});
          const dnnl::memory::desc vec = DenseDesc(dt::f32, {count});
          dnnl::normalization_flags flags = dnnl::normalization_flags::none;
          if (scale != nullptr) flags |= dnnl::normalization_flags::use_scale;
          if (bias != nullptr) flags |= dnnl::normalization_flags::use_shift;
          dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_inference, data,
                                                    epsilon_, flags);
          dnnl::layer_normalization_forward::primitive_desc pd(d, UserScratchpadAttr(), engine);
          if (scale != nullptr && bias != nullptr) {
            st->prim.Bind(pd, {{DNNL_ARG_SRC, data},
                               {DNNL_ARG_DST, data},
                               {DNNL_ARG_SCALE, vec},
                               {DNNL_ARG_SHIFT, vec}});
          } else if (scale != nullptr || bias != nullptr) {
            st->prim.Bind(pd, {{DNNL_ARG_SRC, data},
                               {DNNL_ARG_DST, data},
                               {scale != nullptr ? DNNL_ARG_SCALE : DNNL_ARG_SHIFT, vec}});
          } else {
            st->prim.Bind(pd, {{DNNL_ARG_SRC, data}, {DNNL_ARG_DST, data}});
          }
        }));
    if (st->use_fallback) return RunFallback(ctx, in, out);
    void* y = out[0]->raw_data();
    if (scale != nullptr && bias != nullptr) {
      return ExecuteBound(ctx, st->prim, {x.raw_data(), y, scale->raw_data(), bias->raw_data()});
    }
    if (scale != nullptr || bias != nullptr) {
      const Tensor* v = scale != nullptr ? scale : bias;
      return ExecuteBound(ctx, st->prim, {x.raw_data(), y, v->raw_data()});
    }
    return ExecuteBound(ctx, st->prim, {x.raw_data(), y});
  }

 private:
  int64_t axis_;
  float epsilon_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateLayerNorm(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 3, 1, 3));
  if (spec.outputs.size() > 1) {
    return absl::UnimplementedError(
        "LayerNormalization: Mean and InvStdDev outputs are the reference kernel's");
  }
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", -1));
  absl::StatusOr<float> epsilon = spec.GetFloat("epsilon", 1e-5f);
  if (!epsilon.ok()) return epsilon.status();
  return std::make_unique<LayerNormKernel>(KernelName(spec), axis, *epsilon);
}

// ---- dynvm::RMSNorm, SimplifiedLayerNormalization, RMSNormalization (opset 23) ----

bool Given(Inputs in, size_t i) { return i < in.size() && in[i] != nullptr; }
bool Wanted(Outputs out, size_t i) { return i < out.size() && out[i] != nullptr; }

// How a kernel's scale must fit the `k` normalized dims of x (from `axis`) for the loop.
enum class ScaleFit {
  kCount,    // count elements, any shape (dynvm::RMSNorm, SimplifiedLayerNormalization)
  kAligned,  // the normalized dims right-aligned, missing ones 1 (RMSNormalization: a scale
             // that broadcasts along a normalized dim is the reference kernel's)
};

bool ScaleFits(const Tensor& scale, const Tensor& x, int axis, int64_t count, ScaleFit fit) {
  if (scale.numel() != count) return false;
  if (fit == ScaleFit::kCount) return true;
  const int k = x.rank() - axis;
  if (scale.rank() > k) return false;
  for (int d = 1; d <= scale.rank(); ++d) {
    if (scale.dim(scale.rank() - d) != x.dim(x.rank() - d)) return false;
  }
  return true;
}

// The microkernel (cpu::RmsNormRows), rows split across the VM's pool. The reference kernel (which
// reports bad inputs) runs a strided x or scale, a scale that does not fit and an empty x.
// SimplifiedLayerNormalization's inv_std_var output is one more pass over each row (in double).
class RmsNormKernel final : public DnnlKernel {
 public:
  RmsNormKernel(std::string name, std::string op, int64_t axis, float epsilon, ScaleFit fit)
      : DnnlKernel(std::move(name)),
        op_(std::move(op)),
        axis_(axis),
        epsilon_(epsilon),
        fit_(fit) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (!Given(in, 0) || !Given(in, 1) || !Wanted(out, 0)) return RunFallback(ctx, in, out);
    const Tensor& x = *in[0];
    const Tensor& scale = *in[1];
    const int rank = x.rank();
    if (x.dtype() != DType::kF32 || scale.dtype() != DType::kF32 || !x.is_contiguous() ||
        !scale.is_contiguous() || axis_ < -rank || axis_ >= rank || x.numel() == 0) {
      return RunFallback(ctx, in, out);
    }
    const int axis = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
    int64_t rows = 1, count = 1;
    for (int d = 0; d < rank; ++d) (d < axis ? rows : count) *= x.dim(d);
    if (!ScaleFits(scale, x, axis, count, fit_)) return RunFallback(ctx, in, out);
    if (Wanted(out, 1)) DYNVM_RETURN_IF_ERROR(InvStdVar(ctx, x, axis, rows, count, *out[1]));
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), op_));
    ParallelRmsNormRows(ctx, rows, count, x.data<float>(), scale.data<float>(), epsilon_,
                        out[0]->data<float>());
    return absl::OkStatus();
  }

 private:
  // SimplifiedLayerNormalization's inv_std_var [X's dims, the normalized ones 1]:
  // 1 / sqrt(mean(x^2) + epsilon) per row, the sum in double as the reference kernel sums.
  absl::Status InvStdVar(KernelContext& ctx, const Tensor& x, int axis, int64_t rows, int64_t count,
                         Tensor& inv) const {
    reference::Dims stat(x.dims().begin(), x.dims().end());
    for (int d = axis; d < x.rank(); ++d) stat[d] = 1;
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, &inv, DType::kF32, stat, op_));
    const float* xs = x.data<float>();
    float* v = inv.data<float>();
    ctx.ParallelFor(
        rows, std::max<int64_t>(1, kMinParallelRows / count), [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const float* row = xs + r * count;
            double square = 0;
            for (int64_t j = 0; j < count; ++j) square += double{row[j]} * row[j];
            v[r] =
                static_cast<float>(1.0 / std::sqrt(square / static_cast<double>(count) + epsilon_));
          }
        });
    return absl::OkStatus();
  }

  std::string op_;
  int64_t axis_;
  float epsilon_;
  ScaleFit fit_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateRmsNormFor(const KernelSpec& spec, size_t max_out,
                                                         ScaleFit fit) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 2, 2, 1, max_out));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1}));
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", -1));
  DYNVM_ASSIGN_OR_RETURN(float epsilon, spec.GetFloat("epsilon", 1e-5f));
  return std::make_unique<RmsNormKernel>(KernelName(spec), spec.op, axis, epsilon, fit);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateRmsNorm(const KernelSpec& spec) {
  return CreateRmsNormFor(spec, 1, ScaleFit::kCount);
}
absl::StatusOr<std::unique_ptr<Kernel>> CreateSimplifiedLayerNorm(const KernelSpec& spec) {
  return CreateRmsNormFor(spec, 2, ScaleFit::kCount);
}
absl::StatusOr<std::unique_ptr<Kernel>> CreateRmsNormalization(const KernelSpec& spec) {
  return CreateRmsNormFor(spec, 1, ScaleFit::kAligned);
}

// ---- com.microsoft SkipLayerNormalization, SkipSimplifiedLayerNormalization ----

// f32, contiguous, `count` elements (absent: fine).
bool FastParam(Inputs in, size_t i, int64_t count) {
  return !Given(in, i) ||
         (in[i]->dtype() == DType::kF32 && in[i]->is_contiguous() && in[i]->numel() == count);
}

// skip's shape, leading 1s aside, is x's trailing dims (whole rows of x, repeated over its
// leading dims): the reference kernel's rule.
bool SkipRepeats(const Tensor& x, const Tensor& skip) {
  int lead = 0;
  while (lead < skip.rank() && skip.dim(lead) == 1) ++lead;
  const int kept = skip.rank() - lead;
  if (kept > x.rank() || skip.numel() == 0) return false;
  for (int d = 1; d <= kept; ++d) {
    if (skip.dim(skip.rank() - d) != x.dim(x.rank() - d)) return false;
  }
  return skip.numel() % x.dim(x.rank() - 1) == 0;
}

// Per row: sum = input + skip (+ bias), in f32 as ONNX Runtime adds (the sum output exactly),
// into input_skip_bias_sum when wanted, else into Y; then cpu::RmsNormRows / LayerNormRows of
// that row into Y (in place when the sum is Y). Rows split across the VM's pool. The mean and
// inv_std_var outputs, strided or non-f32 operands, a skip that does not repeat over input's
// rows, and parameters of another size are the reference kernel's (which reports bad ones).
class SkipNormKernel final : public DnnlKernel {
 public:
  SkipNormKernel(std::string name, std::string op, bool simplified, float epsilon)
      : DnnlKernel(std::move(name)),
        op_(std::move(op)),
        simplified_(simplified),
        epsilon_(epsilon) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    const size_t beta_at = simplified_ ? 99 : 3, bias_at = simplified_ ? 3 : 4;
    if (!Given(in, 0) || !Given(in, 1) || !Given(in, 2) || !Wanted(out, 0) || Wanted(out, 1) ||
        Wanted(out, 2)) {
      return RunFallback(ctx, in, out);
    }
    const Tensor& x = *in[0];
    const Tensor& skip = *in[1];
    if (x.rank() < 1 || x.numel() == 0 || x.dtype() != DType::kF32 || !x.is_contiguous() ||
        skip.dtype() != DType::kF32 || !skip.is_contiguous() || !SkipRepeats(x, skip)) {
      return RunFallback(ctx, in, out);
    }
    const int64_t count = x.dim(x.rank() - 1), rows = x.numel() / count;
    if (!FastParam(in, 2, count) || !FastParam(in, beta_at, count) ||
        !FastParam(in, bias_at, count)) {
      return RunFallback(ctx, in, out);
    }
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), op_));
    float* sum = out[0]->data<float>();
    if (Wanted(out, 3)) {
      DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[3], DType::kF32, x.dims(), op_));
      sum = out[3]->data<float>();
    }
    const float* xs = x.data<float>();
    const float* ss = skip.data<float>();
    const float* gamma = in[2]->data<float>();
    const float* beta = Given(in, beta_at) ? in[beta_at]->data<float>() : nullptr;
    const float* bias = Given(in, bias_at) ? in[bias_at]->data<float>() : nullptr;
    const int64_t skip_n = skip.numel();
    float* y = out[0]->data<float>();
    ctx.ParallelFor(rows, RowGrain(rows, count, ctx), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* a = xs + r * count;
        const float* b = ss + (r * count) % skip_n;
        float* s = sum + r * count;
        for (int64_t j = 0; j < count; ++j) s[j] = a[j] + b[j];
        if (bias != nullptr) {
          for (int64_t j = 0; j < count; ++j) s[j] += bias[j];
        }
      }
      if (simplified_) {
        cpu::RmsNormRows(r1 - r0, count, sum + r0 * count, gamma, epsilon_, y + r0 * count);
      } else {
        cpu::LayerNormRows(r1 - r0, count, sum + r0 * count, gamma, beta, epsilon_, y + r0 * count);
      }
    });
    return absl::OkStatus();
  }

 private:
  // One range below kMinParallelRows elements, else rows shared evenly by the pool's threads.
  static int64_t RowGrain(int64_t rows, int64_t count, const KernelContext& ctx) {
    if (ctx.num_threads() <= 1 || rows * count < kMinParallelRows) return rows;
    return std::max<int64_t>(1, (rows + ctx.num_threads() - 1) / ctx.num_threads());
  }

  std::string op_;
  bool simplified_;
  float epsilon_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateSkipNorm(const KernelSpec& spec, bool simplified) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 3, simplified ? 4 : 5, 1, 4));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1, 2}));
  DYNVM_ASSIGN_OR_RETURN(float epsilon, spec.GetFloat("epsilon", 1e-12f));
  return std::make_unique<SkipNormKernel>(KernelName(spec), spec.op, simplified, epsilon);
}

// InstanceNormalization (f32): each (n, c) plane of a contiguous X [N, C, D...] as one row of
// cpu::LayerNormRows (mean and variance in f32, as LayerNormalization's rows), then times
// scale[c] plus B[c] (cpu::BinaryRows with a scalar, the row still in cache); planes split over
// the VM's pool. The reference kernel (sums in double) serves strided operands, empty tensors and
// reports every shape error. RAFT's feature and context encoders: docs/results/refhot-s11-*.
class InstanceNormKernel final : public DnnlKernel {
 public:
  InstanceNormKernel(std::string name, float epsilon)
      : DnnlKernel(std::move(name)), epsilon_(epsilon) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (in.size() != 3 || in[0] == nullptr || in[1] == nullptr || in[2] == nullptr ||
        out.size() != 1 || out[0] == nullptr) {
      return RunFallback(ctx, in, out);
    }
    const Tensor& x = *in[0];
    const Tensor& scale = *in[1];
    const Tensor& bias = *in[2];
    if (x.rank() < 3 || x.dtype() != DType::kF32 || !x.is_contiguous() || x.numel() == 0) {
      return RunFallback(ctx, in, out);
    }
    const int64_t c = x.dim(1);
    for (const Tensor* t : {&scale, &bias}) {
      if (t->rank() != 1 || t->dim(0) != c || t->dtype() != DType::kF32 || !t->is_contiguous()) {
        return RunFallback(ctx, in, out);  // reports the error, if any
      }
    }
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "InstanceNormalization"));
    const int64_t rows = x.dim(0) * c;
    const int64_t plane = x.numel() / rows;
    const float* xp = x.data<float>();
    const float* sp = scale.data<float>();
    const float* bp = bias.data<float>();
    float* yp = out[0]->data<float>();
    const int64_t grain = ctx.num_threads() == 1 || x.numel() < kMinParallelRows
                              ? rows
                              : std::max<int64_t>(1, kMinParallelRows / (2 * plane));
    ctx.ParallelFor(rows, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* yr = yp + r * plane;
        cpu::LayerNormRows(1, plane, xp + r * plane, nullptr, nullptr, epsilon_, yr);
        cpu::BinaryRows(cpu::BinaryOp::kMul, 1, plane, yr, sp + r % c, -1, yr);
        cpu::BinaryRows(cpu::BinaryOp::kAdd, 1, plane, yr, bp + r % c, -1, yr);
      }
    });
    return absl::OkStatus();
  }

 private:
  float epsilon_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateInstanceNorm(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 3, 3, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1, 2}));
  absl::StatusOr<float> epsilon = spec.GetFloat("epsilon", 1e-5f);
  if (!epsilon.ok()) return epsilon.status();
  return std::make_unique<InstanceNormKernel>(KernelName(spec), *epsilon);
}

void Add(KernelRegistry& r, const char* op, KernelFactory f) {
  r.Register(KernelRegistration{"", op, Device::kCPU, kBackend, kDnnlPriority, std::move(f)});
}

}  // namespace

void RegisterNormalizationKernels(KernelRegistry& r) {
  Add(r, "Softmax", &CreateSoftmax);
  // LogSoftmax: never oneDNN's softmax_log, off by ~1.4e-6 near 1 (a log-probability above 0,
  // and a ReduceLogSum of it gave -13.5 for -inf: seed 7 graphs 20569 and 46513). The last axis
  // runs cpu::LogSoftmaxRows (log of the sum in double), the rest the reference kernel.
  Add(r, "LogSoftmax", &CreateLogSoftmax);
  Add(r, "LayerNormalization", &CreateLayerNorm);
  Add(r, "InstanceNormalization", &CreateInstanceNorm);
  r.Register(KernelRegistration{"dynvm", "RMSNorm", Device::kCPU, kBackend, kDnnlPriority,
                                &CreateRmsNorm});
  Add(r, "SimplifiedLayerNormalization", &CreateSimplifiedLayerNorm);
  Add(r, "RMSNormalization", &CreateRmsNormalization);
  for (bool simplified : {false, true}) {
    r.Register(KernelRegistration{
        "com.microsoft", simplified ? "SkipSimplifiedLayerNormalization" : "SkipLayerNormalization",
        Device::kCPU, kBackend, kDnnlPriority,
        [simplified](const KernelSpec& spec) { return CreateSkipNorm(spec, simplified); }});
  }
}

}  // namespace dynvm::onednn
