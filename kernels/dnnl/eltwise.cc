// oneDNN elementwise ops (f32): unary ops by the eltwise primitive, binary ops (numpy
// broadcasting) by the binary primitive, each bound once per site and shape.
//
// NaN: oneDNN's relu, exp, clip, max and min map NaN to a number where ONNX (and the reference
// kernels) propagate it; those kernels scan their inputs (common.h, HasNaN) and hand a run with
// a NaN to the reference kernel.
//
// Erf (GELU's) is a microkernel (cpu::Erf, kernels/cpu/activation.h): oneDNN has no erf primitive.
//
// With more than one thread (docs/threads.md), Add/Sub/Mul/Div of the loop's forms, Where's
// loop, and Relu, LeakyRelu, Abs, Neg and Sqrt from kMinParallelElements elements (Erf from
// kMinParallelMathElements) run
// loops split across the VM's pool, so that oneDNN's OpenMP threads never run beside the
// pool's; the other unary ops and broadcasts keep the primitive (OpenMP above
// kMinParallelWork).
//
// Log is the reference kernel's: oneDNN 2.6's vectorized log is off by ~1.4e-6 near 1 (log(1)
// gives -1.4e-6), outside the ONNX suite's absolute tolerance of 1e-7.
//
// Signed zeros: oneDNN's linear eltwise computes alpha x + beta, and -0 + 0 is +0. Neg (alpha
// -1, beta 0) therefore always runs cpu::Unary, whatever the thread count, and Mean of two
// (a post-op scale of 0.5 is the same linear) is the reference kernel's.
//
// Add, Sub, Mul and Div with a broadcast the plain row loops do not take (an operand repeated
// over leading axes, a middle axis of 1: attention biases and masks; both operands broadcast; a
// broadcast first operand; a strided view) run cpu::BinaryStrided over the output's merged axes
// where choice::UseStridedBinary says so: everywhere, as measured (oneDNN 2.6 serves a middle
// axis of 1 only by its reference binary, about 90 ns an element, 800x the loop's time; where
// it jits, the loop is as fast or faster at one thread).
//
// Run-time fallbacks to the reference kernel: empty tensors; Max and Min under
// kMinBinaryElements output elements (a primitive execute costs more than the reference loop
// there: dnnl_benchmark.cc, BM_Add); a strided unary input (the eltwise primitive writes its
// output in its input's layout); and a broadcast of Max or Min oneDNN lacks (its first operand
// must have every output element: both operands broadcast).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/dnnl/choice.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/parallel_loops.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

using reference::Dims;
using alg = dnnl::algorithm;

// ---- unary ----

struct UnaryDef {
  const char* op;
  alg algorithm;
  float alpha = 0;
  float beta = 0;
  const char* alpha_attr = nullptr;  // attribute overriding alpha
  bool drops_nan = false;            // oneDNN maps NaN to a number: NaN inputs go to the reference
};

// Unary ops whose result IEEE arithmetic gives exactly (NaN propagated): with more than one
// thread they run cpu::Unary across the VM's pool instead of the primitive (which would use
// oneDNN's OpenMP above kMinParallelWork, or one thread below it).
std::optional<cpu::UnaryOp> LoopFor(alg algorithm, float alpha, float beta) {
  if (algorithm == alg::eltwise_relu)
    return alpha == 0.0f ? cpu::UnaryOp::kRelu : cpu::UnaryOp::kLeakyRelu;
  if (algorithm == alg::eltwise_abs) return cpu::UnaryOp::kAbs;
  if (algorithm == alg::eltwise_linear && alpha == -1.0f && beta == 0.0f) return cpu::UnaryOp::kNeg;
  if (algorithm == alg::eltwise_sqrt) return cpu::UnaryOp::kSqrt;
  return std::nullopt;
}

class UnaryKernel final : public DnnlKernel {
 public:
  UnaryKernel(std::string name, alg algorithm, float alpha, float beta, bool clip, bool drops_nan)
      : DnnlKernel(std::move(name)),
        algorithm_(algorithm),
        alpha_(alpha),
        beta_(beta),
        clip_(clip),
        drops_nan_(drops_nan),
        loop_(clip ? std::nullopt : LoopFor(algorithm, alpha, beta)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "eltwise"));
    const Tensor& x = *in[0];
    if (x.dtype() != DType::kF32 || x.numel() == 0 || !x.is_contiguous()) {
      return RunFallback(ctx, in, out);
    }
    float alpha = alpha_, beta = beta_;
    if (clip_) {
      // Clip's bounds as inputs (opset >= 11); the reference kernel checks odd ones.
      for (size_t i = 1; i < 3 && i < in.size(); ++i) {
        if (in[i] == nullptr) continue;
        if (in[i]->dtype() != DType::kF32 || in[i]->numel() != 1) {
          return RunFallback(ctx, in, out);
        }
        (i == 1 ? alpha : beta) = *in[i]->data<float>();
      }
      if (std::isnan(alpha) || std::isnan(beta)) return RunFallback(ctx, in, out);
    }
    // Neg always runs the loop: oneDNN's linear computes -x + 0, and -0 + 0 is +0, so Neg(+0)
    // would be +0 (a later division by it gives +inf for -inf: seed 7 graph 37417).
    if (loop_.has_value() && (*loop_ == cpu::UnaryOp::kNeg ||
                              (ctx.num_threads() > 1 && x.numel() >= kMinParallelElements))) {
      DYNVM_RETURN_IF_ERROR(
          reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "eltwise"));
      const float* src = x.data<float>();
      float* dst = out[0]->data<float>();
      const cpu::UnaryOp op = *loop_;
      ParallelElements(ctx, x.numel(), [&](int64_t e0, int64_t e1) {
        cpu::Unary(op, alpha, e1 - e0, src + e0, dst + e0);
      });
      return absl::OkStatus();
    }
    if (drops_nan_ && HasNaN(x)) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "eltwise"));
    SetThreads(ThreadsFor(ctx.num_threads(), x.numel()));
    ShapeKey key;
    key.Add(&x);
    key.Add(ctx.num_threads());
    key.AddFloat(alpha);
    key.AddFloat(beta);
    PrimitiveState* st = SiteState<PrimitiveState>(ctx);
    DYNVM_RETURN_IF_ERROR(
        Rebind(ctx, st, key, x.numel(), "eltwise", [&](const dnnl::engine& engine) {
          const dnnl::memory::desc md = TensorDesc(x);
          dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, algorithm_, md, alpha,
                                        beta);
          dnnl::eltwise_forward::primitive_desc pd(d, UserScratchpadAttr(), engine);
          st->prim.Bind(pd, {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}});
        }));
    if (st->use_fallback) return RunFallback(ctx, in, out);
    return ExecuteBound(ctx, st->prim, {x.raw_data(), out[0]->raw_data()});
  }

 private:
  alg algorithm_;
  float alpha_, beta_;
  bool clip_;
  bool drops_nan_;
  std::optional<cpu::UnaryOp> loop_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateUnary(const KernelSpec& spec, const UnaryDef& def) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 1, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
  float alpha = def.alpha;
  if (def.alpha_attr != nullptr) {
    DYNVM_ASSIGN_OR_RETURN(float a, spec.GetFloat(def.alpha_attr, def.alpha));
    alpha = a;
  }
  return std::make_unique<UnaryKernel>(KernelName(spec), def.algorithm, alpha, def.beta,
                                       /*clip=*/false, def.drops_nan);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateClip(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 3, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
  // Opset < 11 gives the bounds as attributes.
  absl::StatusOr<float> lo = spec.GetFloat("min", -std::numeric_limits<float>::infinity());
  absl::StatusOr<float> hi = spec.GetFloat("max", std::numeric_limits<float>::infinity());
  if (!lo.ok()) return lo.status();
  if (!hi.ok()) return hi.status();
  return std::make_unique<UnaryKernel>(KernelName(spec), alg::eltwise_clip_v2, *lo, *hi,
                                       /*clip=*/true, /*drops_nan=*/true);
}

// ---- binary ----

class BinaryKernel final : public DnnlKernel {
 public:
  BinaryKernel(std::string name, alg algorithm, bool commutative)
      : DnnlKernel(std::move(name)),
        algorithm_(algorithm),
        commutative_(commutative),
        drops_nan_(algorithm == alg::binary_max || algorithm == alg::binary_min) {
    if (algorithm == alg::binary_add) loop_op_ = cpu::BinaryOp::kAdd;
    if (algorithm == alg::binary_sub) loop_op_ = cpu::BinaryOp::kSub;
    if (algorithm == alg::binary_mul) loop_op_ = cpu::BinaryOp::kMul;
    if (algorithm == alg::binary_div) loop_op_ = cpu::BinaryOp::kDiv;
  }

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, "binary"));
    const Tensor* a = in[0];
    const Tensor* b = in[1];
    if (a->dtype() != DType::kF32 || b->dtype() != DType::kF32) return RunFallback(ctx, in, out);
    absl::StatusOr<Dims> dims = reference::BroadcastShapes(a->dims(), b->dims());
    if (!dims.ok()) return RunFallback(ctx, in, out);  // reports the shapes
    absl::StatusOr<int64_t> total = CheckedNumel(*dims);
    if (!total.ok()) return RunFallback(ctx, in, out);
    const int64_t numel = *total;
    if (drops_nan_ && (HasNaN(*a) || HasNaN(*b))) return RunFallback(ctx, in, out);
    const absl::Span<const int64_t> out_dims = *dims;
    // oneDNN broadcasts its second operand only: the first must have every output element.
    if (a->numel() != numel && commutative_ && b->numel() == numel) std::swap(a, b);
    if (a->numel() == numel && LoopServes(ctx, *a, *b, out_dims, numel)) {
      DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, out_dims, "binary"));
      return RunLoop(ctx, *a, *b, out_dims, numel, out[0]);
    }
    if (loop_op_.has_value() && numel > 0 && !out_dims.empty()) {
      if (choice::UseStridedBinary(a->numel() == numel)) {
        DYNVM_RETURN_IF_ERROR(
            reference::PrepareOutput(ctx, out[0], DType::kF32, out_dims, "binary"));
        RunStrided(ctx, PlanStrided(*a, *b, out_dims), *a, *b, numel, out[0]);
        return absl::OkStatus();
      }
    }
    if (a->numel() != numel || numel < kMinBinaryElements) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, out_dims, "binary"));
    SetThreads(ThreadsFor(ctx.num_threads(), numel));
    ShapeKey key;
    key.Add(a);
    key.Add(b);
    key.Add(ctx.num_threads());
    PrimitiveState* st = SiteState<PrimitiveState>(ctx);
    DYNVM_RETURN_IF_ERROR(Rebind(ctx, st, key, numel, "binary", [&](const dnnl::engine& engine) {
      const int rank = std::max<int>(static_cast<int>(out_dims.size()), 1);
      const dnnl::memory::desc a_md = AlignedDesc(*a, rank);
      const dnnl::memory::desc b_md = AlignedDesc(*b, rank);
      const dnnl::memory::desc y_md = DenseDesc(dnnl::memory::data_type::f32, out_dims);
      dnnl::binary::desc d(algorithm_, a_md, b_md, y_md);
      dnnl::binary::primitive_desc pd(d, UserScratchpadAttr(), engine);
      st->prim.Bind(pd, {{DNNL_ARG_SRC_0, a_md}, {DNNL_ARG_SRC_1, b_md}, {DNNL_ARG_DST, y_md}});
    }));
    if (st->use_fallback) return RunFallback(ctx, in, out);
    return ExecuteBound(ctx, st->prim, {a->raw_data(), b->raw_data(), out[0]->raw_data()});
  }

 private:
  // Add, Sub, Mul and Div of at most kChurnMaxElements elements (any size with more than one
  // thread: the loop splits across the VM's pool, where the primitive would use OpenMP) run a
  // plain loop (cpu::BinaryRows) when `a` has every output element, contiguous, and `b` is too,
  // or is one row or a scalar (contiguous): no primitive to bind per shape, and IEEE results
  // equal to the reference's. A `b` of one scalar per row of the output's trailing dims (a
  // [N, 1, 1] operand over [N, C, T]: Silero VAD's per-example normalization at batch > 1) runs
  // the loop at any size: oneDNN 2.6 serves that broadcast only by its reference implementation
  // (ref:any, about 100 ns an element).
  bool LoopServes(const KernelContext& ctx, const Tensor& a, const Tensor& b,
                  absl::Span<const int64_t> dims, int64_t numel) const {
    if (!loop_op_.has_value() || numel == 0 || a.numel() != numel || !a.is_contiguous() ||
        !b.is_contiguous()) {
      return false;
    }
    if (RowScalarsWidth(b, dims, numel) > 0) return true;
    if (numel > kChurnMaxElements && ctx.num_threads() == 1) return false;
    if (b.numel() == numel || b.numel() == 1) return true;
    // b one row: its dims, right-aligned, are 1 except the last, which equals the output's.
    if (dims.empty() || b.rank() == 0 || b.dim(b.rank() - 1) != dims.back() ||
        b.numel() != dims.back()) {
      return false;
    }
    return true;
  }

  // When b, its dims left-padded with 1s to the output's rank, equals the output's dims up to
  // some axis and is 1 after it (and has more than one element and fewer than the output): the
  // number of output elements each of b's values covers. 0 otherwise.
  static int64_t RowScalarsWidth(const Tensor& b, absl::Span<const int64_t> dims, int64_t numel) {
    const int rank = static_cast<int>(dims.size());
    if (b.numel() <= 1 || b.numel() >= numel || b.rank() > rank) return 0;
    const int pad = rank - b.rank();
    auto b_dim = [&](int i) { return i < pad ? int64_t{1} : b.dim(i - pad); };
    int i = 0;
    while (i < rank && b_dim(i) == dims[i]) ++i;
    for (; i < rank; ++i) {
      if (b_dim(i) != 1) return 0;
    }
    return numel / b.numel();
  }

  absl::Status RunLoop(const KernelContext& ctx, const Tensor& a, const Tensor& b,
                       absl::Span<const int64_t> dims, int64_t numel, Tensor* y) const {
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    if (const int64_t width = RowScalarsWidth(b, dims, numel); width > 0) {
      ParallelBinaryRowScalars(ctx, *loop_op_, numel / width, width, pa, pb, y->data<float>());
    } else if (b.numel() == numel) {
      ParallelBinaryRows(ctx, *loop_op_, 1, numel, pa, pb, numel, y->data<float>());
    } else if (b.numel() == 1) {
      ParallelBinaryRows(ctx, *loop_op_, 1, numel, pa, pb, -1, y->data<float>());
    } else {
      ParallelBinaryRows(ctx, *loop_op_, numel / b.numel(), b.numel(), pa, pb, 0, y->data<float>());
    }
    return absl::OkStatus();
  }

  // The output's dims with a's and b's element strides (0 along an axis an operand broadcasts
  // over), axes of extent 1 dropped and neighbours merged where both operands step through
  // them as through one axis (the output, dense, always does).
  struct StridedPlan {
    int rank = 0;
    int64_t dims[Tensor::kMaxRank] = {};
    int64_t a_strides[Tensor::kMaxRank] = {};
    int64_t b_strides[Tensor::kMaxRank] = {};
  };
  static StridedPlan PlanStrided(const Tensor& a, const Tensor& b, absl::Span<const int64_t> dims) {
    const int rank = static_cast<int>(dims.size());
    auto stride = [&](const Tensor& t, int i) {  // i: an output axis
      const int j = i - (rank - t.rank());
      return j < 0 || t.dim(j) == 1 ? int64_t{0} : t.stride(j);
    };
    StridedPlan p;
    for (int i = 0; i < rank; ++i) {
      if (dims[i] == 1) continue;
      const int64_t sa = stride(a, i), sb = stride(b, i);
      if (p.rank > 0) {
        const int q = p.rank - 1;
        if (p.a_strides[q] == sa * dims[i] && p.b_strides[q] == sb * dims[i]) {
          p.dims[q] *= dims[i];
          p.a_strides[q] = sa;
          p.b_strides[q] = sb;
          continue;
        }
      }
      p.dims[p.rank] = dims[i];
      p.a_strides[p.rank] = sa;
      p.b_strides[p.rank] = sb;
      ++p.rank;
    }
    if (p.rank == 0) p = StridedPlan{1, {1}, {0}, {0}};  // one element
    return p;
  }

  void RunStrided(const KernelContext& ctx, const StridedPlan& p, const Tensor& a, const Tensor& b,
                  int64_t numel, Tensor* y) const {
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    float* py = y->data<float>();
    ParallelElements(ctx, numel, [&](int64_t e0, int64_t e1) {
      cpu::BinaryStrided(*loop_op_, p.rank, p.dims, pa, p.a_strides, pb, p.b_strides, e0, e1, py);
    });
  }

  alg algorithm_;
  bool commutative_;
  bool drops_nan_;                        // max/min return the other operand for a NaN
  std::optional<cpu::BinaryOp> loop_op_;  // ops the plain loop serves
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateBinary(const KernelSpec& spec, alg algorithm,
                                                     bool commutative) {
  if (spec.inputs.size() != 2) {
    // Variadic Max/Min/Sum with other than two inputs: the reference kernel.
    return absl::UnimplementedError(
        absl::StrCat(spec.op, ": the oneDNN kernel takes exactly two inputs"));
  }
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 2, 2, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1}));
  return std::make_unique<BinaryKernel>(KernelName(spec), algorithm, commutative);
}

// ---- Where ----

// Where(cond, X, Y) with f32 X and Y by a plain loop (cpu::WhereBlocks) when every operand is
// contiguous and is the output itself, one value, or a block of the output's trailing dims
// repeated (a [T, T] causal mask over [B, H, T, T] scores); anything else is the reference's.
class WhereKernel final : public DnnlKernel {
 public:
  using DnnlKernel::DnnlKernel;

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 3, out, "Where"));
    const Tensor& c = *in[0];
    const Tensor& x = *in[1];
    const Tensor& y = *in[2];
    if (c.dtype() != DType::kBool || x.dtype() != DType::kF32 || y.dtype() != DType::kF32) {
      return RunFallback(ctx, in, out);
    }
    absl::StatusOr<Dims> cx = reference::BroadcastShapes(c.dims(), x.dims());
    if (!cx.ok()) return RunFallback(ctx, in, out);
    absl::StatusOr<Dims> dims = reference::BroadcastShapes(*cx, y.dims());
    if (!dims.ok()) return RunFallback(ctx, in, out);
    absl::StatusOr<int64_t> total = CheckedNumel(*dims);
    if (!total.ok() || *total == 0) return RunFallback(ctx, in, out);
    // The block: the largest trailing-dims period among the operands that are not scalars.
    int64_t pc, px, py;
    if (!Period(c, *dims, &pc) || !Period(x, *dims, &px) || !Period(y, *dims, &py)) {
      return RunFallback(ctx, in, out);
    }
    // Periods are products of trailing dims: the smallest non-scalar one divides the others.
    int64_t block = *total;
    for (int64_t p : {pc, px, py}) {
      if (p > 1) block = std::min(block, p);
    }
    if (pc == 1 && c.numel() == 1) return RunFallback(ctx, in, out);  // a scalar condition
    if (pc % block != 0 || (px > 1 && px % block != 0) || (py > 1 && py % block != 0)) {
      return RunFallback(ctx, in, out);
    }
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, *dims, "Where"));
    const int64_t blocks = *total / block;
    float* o = out[0]->data<float>();
    // Operand of period p: block b starts at (b * block) % p.
    const uint8_t* pcond = c.data<uint8_t>();
    const float* pxv = x.data<float>();
    const float* pyv = y.data<float>();
    // Blocks [b0, b1): split across the VM's pool with more than one thread.
    auto blocks_in = [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1;) {
        // Runs of blocks over which every non-scalar operand advances linearly (until one
        // wraps).
        const int64_t start = b * block;
        int64_t run = b1 - b;
        for (int64_t p : {pc, px, py}) {
          if (p > 1) run = std::min(run, (p - start % p) / block);
        }
        cpu::WhereBlocks(run, block, pcond + start % pc, block, pxv + (px > 1 ? start % px : 0),
                         px > 1 ? block : -1, pyv + (py > 1 ? start % py : 0), py > 1 ? block : -1,
                         o + start);
        b += run;
      }
    };
    if (ctx.num_threads() == 1 || *total < kMinParallelElements) {
      blocks_in(0, blocks);
    } else {
      ctx.ParallelFor(blocks, std::max<int64_t>(1, kMinParallelElements / (2 * block)), blocks_in);
    }
    return absl::OkStatus();
  }

 private:
  // The period of `t` in the output `dims`: 1 for one value; its numel when it is contiguous
  // and its dims, leading 1s dropped, equal the output's trailing dims. False otherwise.
  static bool Period(const Tensor& t, absl::Span<const int64_t> dims, int64_t* period) {
    *period = t.numel();
    if (t.numel() == 1) return true;
    if (!t.is_contiguous()) return false;
    int first = 0;
    while (first < t.rank() && t.dim(first) == 1) ++first;
    const int n = t.rank() - first;
    if (n > static_cast<int>(dims.size())) return false;
    for (int i = 0; i < n; ++i) {
      if (t.dim(first + i) != dims[dims.size() - n + i]) return false;
    }
    return true;
  }
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateWhere(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 3, 3, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {1, 2}));
  return std::make_unique<WhereKernel>(KernelName(spec));
}

// ---- Erf ----

class ErfKernel final : public DnnlKernel {
 public:
  using DnnlKernel::DnnlKernel;

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "Erf"));
    const Tensor& x = *in[0];
    if (x.dtype() != DType::kF32 || !x.is_contiguous()) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "Erf"));
    const float* src = x.data<float>();
    float* dst = out[0]->data<float>();
    ParallelElements(
        ctx, x.numel(), [&](int64_t e0, int64_t e1) { cpu::Erf(e1 - e0, src + e0, dst + e0); },
        kMinParallelMathElements);
    return absl::OkStatus();
  }
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateErf(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 1, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
  return std::make_unique<ErfKernel>(KernelName(spec));
}

// dynvm::ChannelMul (kernels/reference/dynvm_ops.cc): x [N, C, spatial...] times a gate g
// [N or 1, C, 1...], plain or channels-last on either side (a squeeze-excitation block between
// channels-last FusedConvs; compiler/conv_fusion.h). Channels-last to channels-last is
// cpu::BinaryRows over each image's pixels with the image's gate as the broadcast row; plain to
// plain is one row per channel times its gate; the mixed layouts a loop. Rows split over the
// VM's pool from kMinParallelElements elements. Non-dense operands run the reference kernel.
class ChannelMulKernel final : public DnnlKernel {
 public:
  ChannelMulKernel(std::string name, bool in_cl, bool out_cl)
      : DnnlKernel(std::move(name)), in_cl_(in_cl), out_cl_(out_cl) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, "ChannelMul"));
    const Tensor& x = *in[0];
    const Tensor& g = *in[1];
    bool ok = x.dtype() == DType::kF32 && g.dtype() == DType::kF32 && x.rank() >= 3 &&
              x.rank() <= 5 && g.rank() == x.rank() && (g.dim(0) == 1 || g.dim(0) == x.dim(0)) &&
              g.dim(1) == x.dim(1) && x.is_contiguous() && g.is_contiguous();
    for (int d = 2; ok && d < g.rank(); ++d) ok = g.dim(d) == 1;
    if (!ok) return RunFallback(ctx, in, out);  // reports the shapes, if wrong
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "ChannelMul"));
    const int64_t n = x.dim(0), c = x.dim(1), sp = x.numel() / std::max<int64_t>(n * c, 1);
    const int64_t gn = g.dim(0) == 1 ? 0 : 1;
    const float* xs = x.data<float>();
    const float* gs = g.data<float>();
    float* y = out[0]->data<float>();
    // Rows: pixels of C (channels-last in) or channels of sp (plain in).
    const int64_t per_image = in_cl_ ? sp : c, width = in_cl_ ? c : sp;
    auto rows = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t i = r / per_image, k = r % per_image;
        const float* gi = gs + i * gn * c;
        const float* xr = xs + r * width;
        if (in_cl_ && out_cl_) {
          const int64_t seg = std::min(r1, (i + 1) * per_image) - r;  // this image's rows
          cpu::BinaryRows(cpu::BinaryOp::kMul, seg, c, xr, gi, 0, y + r * c);
          r += seg - 1;
        } else if (!in_cl_ && !out_cl_) {
          cpu::BinaryRows(cpu::BinaryOp::kMul, 1, sp, xr, gi + k, -1, y + r * sp);
        } else if (in_cl_) {  // pixel k of image i into the plain output
          for (int64_t j = 0; j < c; ++j) y[(i * c + j) * sp + k] = xr[j] * gi[j];
        } else {  // channel k of image i into the channels-last output
          for (int64_t s = 0; s < sp; ++s) y[(i * sp + s) * c + k] = xr[s] * gi[k];
        }
      }
    };
    const int64_t total = n * per_image;
    if (ctx.num_threads() == 1 || x.numel() < kMinParallelElements) {
      rows(0, total);
    } else {
      ctx.ParallelFor(total, std::max<int64_t>(1, kMinParallelElements / (2 * width)), rows);
    }
    return absl::OkStatus();
  }

 private:
  bool in_cl_, out_cl_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateChannelMul(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 2, 2, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1}));
  DYNVM_ASSIGN_OR_RETURN(int64_t in_cl, spec.GetInt("channels_last_in", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t out_cl, spec.GetInt("channels_last_out", 0));
  return std::make_unique<ChannelMulKernel>(KernelName(spec), in_cl != 0, out_cl != 0);
}

void Add(KernelRegistry& r, const char* op, KernelFactory f) {
  r.Register(KernelRegistration{"", op, Device::kCPU, kBackend, kDnnlPriority, std::move(f)});
}

}  // namespace

void RegisterEltwiseKernels(KernelRegistry& r) {
  static const UnaryDef kUnary[] = {
      {"Relu", alg::eltwise_relu, 0, 0, nullptr, /*drops_nan=*/true},
      {"LeakyRelu", alg::eltwise_relu, 0.01f, 0, "alpha"},
      {"Tanh", alg::eltwise_tanh},
      {"Sigmoid", alg::eltwise_logistic},
      {"Exp", alg::eltwise_exp, 0, 0, nullptr, /*drops_nan=*/true},
      {"Sqrt", alg::eltwise_sqrt},
      {"Abs", alg::eltwise_abs},
      {"Elu", alg::eltwise_elu, 1.0f, 0, "alpha"},
      {"Softplus", alg::eltwise_soft_relu},
      {"Neg", alg::eltwise_linear, -1.0f, 0.0f},
      {"Reciprocal", alg::eltwise_pow, 1.0f, -1.0f},
      {"HardSwish", alg::eltwise_hardswish},
      {"Round", alg::eltwise_round},
  };
  for (const UnaryDef& def : kUnary) {
    Add(r, def.op, [&def](const KernelSpec& spec) { return CreateUnary(spec, def); });
  }
  Add(r, "Clip", &CreateClip);
  r.Register(KernelRegistration{"dynvm", "ChannelMul", Device::kCPU, kBackend, kDnnlPriority,
                                &CreateChannelMul});
  Add(r, "Erf", &CreateErf);
  Add(r, "Where", &CreateWhere);
  struct BinaryDef {
    const char* op;
    alg algorithm;
    bool commutative;
  };
  // Not Mean: its 0.5 (a + b) would be a post-op scale, oneDNN's linear 0.5 x + 0, and -0 + 0
  // is +0, so the mean of two negative zeros would lose its sign. The reference kernel serves it.
  static const BinaryDef kBinary[] = {
      {"Add", alg::binary_add, true}, {"Sub", alg::binary_sub, false},
      {"Mul", alg::binary_mul, true}, {"Div", alg::binary_div, false},
      {"Max", alg::binary_max, true}, {"Min", alg::binary_min, true},
      {"Sum", alg::binary_add, true},
  };
  for (const BinaryDef& def : kBinary) {
    Add(r, def.op, [&def](const KernelSpec& spec) {
      return CreateBinary(spec, def.algorithm, def.commutative);
    });
  }
}

}  // namespace dynvm::onednn
