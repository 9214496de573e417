// oneDNN reductions (f32): ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceL1, ReduceL2 and
// ReduceSumSquare, by the reduction primitive bound once per site and shape.
//
// The reference kernel serves ReduceLogSumExp (oneDNN has no stable form), ReduceLogSum
// (oneDNN 2.6's log is off by ~1.4e-6 near 1, outside the ONNX suite's tolerance) and
// ReduceProd (oneDNN multiplies in f32, overflowing where the reference's double does not),
// and, at run time, empty tensors and empty reductions (an identity value per output),
// noop_with_empty_axes with no axes, bad axes (it reports them), and ReduceMax/ReduceMin over
// an input holding NaN (oneDNN skips NaN, ONNX propagates it).
// oneDNN accumulates in f32 where the reference kernel uses double: results agree to f32
// rounding of the sum (kernel tester tolerances).
//
// Reductions of ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceL2 and ReduceSumSquare over
// one contiguous block of axes of a contiguous input run plain vectorized loops instead of the
// primitive: over the innermost axes (a LayerNorm's or softmax's rows) a row loop with 16 lanes
// of f32 partial sums, over middle axes (a mean pool over the sequence) a loop along the kept
// inner axis. Binding and executing the primitive there cost several times the work (a 350 us
// ReduceSum over the last axis in the issue-16 profile, 1.1 ms for a [8, 64, 128] pool over
// axis 1). With more than one thread, the loops' outer indices (rows, or the blocks of a
// middle-axis reduction) are split across the VM's pool from kMinParallelElements input
// elements (parallel_loops.h). The loops are kernels/cpu/reduce.h's microkernels.
#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/parallel_loops.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

using dt = dnnl::memory::data_type;

struct ReduceDef {
  const char* op;
  dnnl::algorithm algorithm;
  float p = 0;
};

// The row loop's form of an algorithm, with the finishing step; false when it has none.
bool RowForm(dnnl::algorithm a, float p, cpu::ReduceOp* op, bool* mean, bool* root) {
  using alg = dnnl::algorithm;
  *mean = a == alg::reduction_mean;
  *root = a == alg::reduction_norm_lp_sum && p == 2.0f;
  if (a == alg::reduction_sum || a == alg::reduction_mean)
    *op = cpu::ReduceOp::kSum;
  else if (a == alg::reduction_max)
    *op = cpu::ReduceOp::kMax;
  else if (a == alg::reduction_min)
    *op = cpu::ReduceOp::kMin;
  else if (*root || (a == alg::reduction_norm_lp_power_p_sum && p == 2.0f))
    *op = cpu::ReduceOp::kSumSquare;
  else
    return false;
  return true;
}

struct ReduceAttrs {
  bool keepdims = true;
  bool noop_with_empty_axes = false;
  std::vector<int64_t> axes;  // the attribute form
};

class ReduceKernel final : public DnnlKernel {
 public:
  ReduceKernel(std::string name, const ReduceDef& def, ReduceAttrs attrs)
      : DnnlKernel(std::move(name)), def_(def), attrs_(std::move(attrs)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, def_.op));
    const Tensor& x = *in[0];
    const int rank = x.rank();
    if (x.dtype() != DType::kF32 || rank == 0 || x.numel() == 0) {
      return RunFallback(ctx, in, out);
    }
    // The reduced axes, from the input (newer opsets) or the attribute.
    bool mask[Tensor::kMaxRank] = {};
    int num_axes = 0;
    const Tensor* axes_in = in.size() > 1 ? in[1] : nullptr;
    const int64_t n_in = axes_in != nullptr ? axes_in->numel() : 0;
    const int64_t n_attr = static_cast<int64_t>(attrs_.axes.size());
    const int64_t n = axes_in != nullptr ? n_in : n_attr;
    if (axes_in != nullptr && (axes_in->rank() > 1 || (axes_in->dtype() != DType::kI64 &&
                                                       axes_in->dtype() != DType::kI32))) {
      return RunFallback(ctx, in, out);
    }
    for (int64_t i = 0; i < n; ++i) {
      int64_t a;
      if (axes_in == nullptr) {
        a = attrs_.axes[i];
      } else {
        const int64_t off = axes_in->rank() == 1 ? i * axes_in->stride(0) : 0;
        a = axes_in->dtype() == DType::kI64 ? axes_in->data<int64_t>()[off]
                                            : axes_in->data<int32_t>()[off];
      }
      if (a < -rank || a >= rank || mask[a < 0 ? a + rank : a]) return RunFallback(ctx, in, out);
      mask[a < 0 ? a + rank : a] = true;
      ++num_axes;
    }
    if (num_axes == 0) {
      if (attrs_.noop_with_empty_axes) return RunFallback(ctx, in, out);
      for (int d = 0; d < rank; ++d) mask[d] = true;
    }
    int64_t dst_dims[Tensor::kMaxRank], out_dims[Tensor::kMaxRank];
    int out_rank = 0;
    for (int d = 0; d < rank; ++d) {
      dst_dims[d] = mask[d] ? 1 : x.dim(d);
      if (!mask[d]) {
        out_dims[out_rank++] = x.dim(d);
      } else if (attrs_.keepdims) {
        out_dims[out_rank++] = 1;
      }
    }
    // oneDNN's max and min skip NaN; the reference kernel propagates it.
    if ((def_.algorithm == dnnl::algorithm::reduction_max ||
         def_.algorithm == dnnl::algorithm::reduction_min) &&
        HasNaN(x)) {
      return RunFallback(ctx, in, out);
    }
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(
        ctx, out[0], DType::kF32, absl::MakeConstSpan(out_dims, out_rank), def_.op));
    // One contiguous block of reduced axes of a contiguous input: the row loop (innermost
    // axes) or the column loop (axes with kept axes inside them).
    int first = 0, last = rank - 1;
    while (first < rank && !mask[first]) ++first;
    while (last > first && !mask[last]) --last;
    bool block = first < rank && x.is_contiguous();
    for (int d = first; d <= last && block; ++d) block = mask[d];
    cpu::ReduceOp op;
    bool mean, root;
    if (block && RowForm(def_.algorithm, def_.p, &op, &mean, &root)) {
      int64_t outer = 1, n = 1, inner = 1;
      for (int d = 0; d < rank; ++d) (d < first ? outer : d <= last ? n : inner) *= x.dim(d);
      float* y = out[0]->data<float>();
      const float* px = x.data<float>();
      // Outer indices [o0, o1): independent, split across the VM's pool (one thread below
      // kMinParallelElements elements read).
      auto loop = [&](int64_t o0, int64_t o1) {
        if (inner == 1) {
          cpu::ReduceRows(op, o1 - o0, n, px + o0 * n, y + o0);
        } else {
          cpu::ReduceColumns(op, o1 - o0, n, inner, px + o0 * n * inner, y + o0 * inner);
        }
        if (mean || root) {
          for (int64_t r = o0 * inner; r < o1 * inner; ++r) {
            y[r] = mean ? y[r] / static_cast<float>(n) : std::sqrt(y[r]);
          }
        }
      };
      if (ctx.num_threads() == 1 || x.numel() < kMinParallelElements) {
        loop(0, outer);
      } else {
        const int64_t per_outer = std::max<int64_t>(n * inner, 1);
        ctx.ParallelFor(outer, std::max<int64_t>(1, kMinParallelElements / (2 * per_outer)), loop);
      }
      return absl::OkStatus();
    }
    SetThreads(ThreadsFor(ctx.num_threads(), x.numel()));
    ShapeKey key;
    key.Add(&x);
    int64_t bits = 0;
    for (int d = 0; d < rank; ++d) bits |= int64_t{mask[d]} << d;
    key.Add(bits);
    key.Add(ctx.num_threads());
    PrimitiveState* st = SiteState<PrimitiveState>(ctx);
    DYNVM_RETURN_IF_ERROR(
        Rebind(ctx, st, key, x.numel(), "reduction", [&](const dnnl::engine& engine) {
          const dnnl::memory::desc src = TensorDesc(x);
          const dnnl::memory::desc dst = DenseDesc(dt::f32, absl::MakeConstSpan(dst_dims, rank));
          dnnl::reduction::desc d(def_.algorithm, src, dst, def_.p, 0.0f);
          dnnl::reduction::primitive_desc pd(d, UserScratchpadAttr(), engine);
          st->prim.Bind(pd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
        }));
    if (st->use_fallback) return RunFallback(ctx, in, out);
    return ExecuteBound(ctx, st->prim, {x.raw_data(), out[0]->raw_data()});
  }

 private:
  const ReduceDef& def_;
  ReduceAttrs attrs_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateReduce(const KernelSpec& spec, const ReduceDef& def) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 2, 1, 1));
  // The fallback's factory (the reference kernel, which the registry makes next) validates the
  // attributes: its errors are the spec's.
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
  ReduceAttrs a;
  absl::StatusOr<int64_t> keepdims = spec.GetInt("keepdims", 1);
  absl::StatusOr<int64_t> noop = spec.GetInt("noop_with_empty_axes", 0);
  absl::StatusOr<std::vector<int64_t>> axes = spec.GetInts("axes");
  if (!keepdims.ok()) return keepdims.status();
  if (!noop.ok()) return noop.status();
  if (!axes.ok()) return axes.status();
  a.keepdims = *keepdims != 0;
  a.noop_with_empty_axes = *noop != 0;
  a.axes = *std::move(axes);
  return std::make_unique<ReduceKernel>(KernelName(spec), def, std::move(a));
}

}  // namespace

void RegisterReduceKernels(KernelRegistry& r) {
  using alg = dnnl::algorithm;
  // Not ReduceProd: oneDNN multiplies in f32, the reference kernel (and constant folding) in
  // double: a product whose f32 partial products overflow before a 0 came out NaN at run time
  // and 0 folded (seed 7 graph 45074). The reference kernel serves it.
  static const ReduceDef kDefs[] = {
      {"ReduceSum", alg::reduction_sum},
      {"ReduceMean", alg::reduction_mean},
      {"ReduceMax", alg::reduction_max},
      {"ReduceMin", alg::reduction_min},
      {"ReduceL1", alg::reduction_norm_lp_sum, 1.0f},
      {"ReduceL2", alg::reduction_norm_lp_sum, 2.0f},
      {"ReduceSumSquare", alg::reduction_norm_lp_power_p_sum, 2.0f},
  };
  for (const ReduceDef& def : kDefs) {
    r.Register(
        KernelRegistration{"", def.op, Device::kCPU, kBackend, kDnnlPriority,
                           [&def](const KernelSpec& spec) { return CreateReduce(spec, def); }});
  }
}

}  // namespace dynvm::onednn
