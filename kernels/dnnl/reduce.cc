// oneDNN reductions (f32): ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1,
// ReduceL2 and ReduceSumSquare, by the reduction primitive bound once per site and shape.
//
// The reference kernel serves ReduceLogSumExp (oneDNN has no stable form) and ReduceLogSum
// (oneDNN 2.6's log is off by ~1.4e-6 near 1, outside the ONNX suite's tolerance), and, at
// run time, empty tensors and empty reductions (an identity value per output),
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
// elements (vector_loops.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/dnnl/clones.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/vector_loops.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

using dt = dnnl::memory::data_type;

struct ReduceDef {
  const char* op;
  dnnl::algorithm algorithm;
  float p = 0;
};

constexpr int kLanes = 16;

enum class RowOp { kSum, kSumSquare, kMax, kMin };

// y[r] = op over x[r * n, (r + 1) * n). kMax/kMin: callers send inputs holding NaN elsewhere.
DYNVM_CLONES void ReduceRowsLoop(RowOp op, int64_t rows, int64_t n, const float* x, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * n;
    float acc[kLanes];
    const float init = op == RowOp::kMax ? -INFINITY : op == RowOp::kMin ? INFINITY : 0.0f;
    for (float& a : acc) a = init;
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const float v = row[j + l];
        switch (op) {
          case RowOp::kSum:
            acc[l] += v;
            break;
          case RowOp::kSumSquare:
            acc[l] += v * v;
            break;
          case RowOp::kMax:
            acc[l] = acc[l] > v ? acc[l] : v;
            break;
          case RowOp::kMin:
            acc[l] = acc[l] < v ? acc[l] : v;
            break;
        }
      }
    }
    float total = init;
    for (int l = 0; l < kLanes; ++l) {
      if (op == RowOp::kMax) {
        total = total > acc[l] ? total : acc[l];
      } else if (op == RowOp::kMin) {
        total = total < acc[l] ? total : acc[l];
      } else {
        total += acc[l];
      }
    }
    for (; j < n; ++j) {
      const float v = row[j];
      if (op == RowOp::kMax) {
        total = total > v ? total : v;
      } else if (op == RowOp::kMin) {
        total = total < v ? total : v;
      } else {
        total += op == RowOp::kSumSquare ? v * v : v;
      }
    }
    y[r] = total;
  }
}

// y[o, i] = op over j of x[o, j, i] for x [outer, reduce, inner] (inner > 1): a middle-axis
// reduction (a mean pool over a sequence), vectorized along the inner axis.
DYNVM_CLONES void ReduceColumnsLoop(RowOp op, int64_t outer, int64_t reduce, int64_t inner,
                                    const float* x, float* y) {
  const float init = op == RowOp::kMax ? -INFINITY : op == RowOp::kMin ? INFINITY : 0.0f;
  for (int64_t o = 0; o < outer; ++o) {
    float* yo = y + o * inner;
    for (int64_t i = 0; i < inner; ++i) yo[i] = init;
    for (int64_t j = 0; j < reduce; ++j) {
      const float* xj = x + (o * reduce + j) * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const float v = xj[i];
        switch (op) {
          case RowOp::kSum:
            yo[i] += v;
            break;
          case RowOp::kSumSquare:
            yo[i] += v * v;
            break;
          case RowOp::kMax:
            yo[i] = yo[i] > v ? yo[i] : v;
            break;
          case RowOp::kMin:
            yo[i] = yo[i] < v ? yo[i] : v;
            break;
        }
      }
    }
  }
}

// ReduceRowsLoop on AVX2 + FMA with the generic loop's lanes and order (two 8-lane registers
// hold its 16 lanes; max_ps(acc, v) is acc > v ? acc : v, min_ps likewise; the sum of squares
// fused as the FMA clones contract it): GCC's AVX2 clone of the generic loop is scalar code.
template <RowOp op>
__attribute__((target("avx2,fma"))) inline __m256 Step(__m256 acc, __m256 v) {
  if constexpr (op == RowOp::kSum) return _mm256_add_ps(acc, v);
  if constexpr (op == RowOp::kSumSquare) return _mm256_fmadd_ps(v, v, acc);
  if constexpr (op == RowOp::kMax) return _mm256_max_ps(acc, v);
  return _mm256_min_ps(acc, v);
}

template <RowOp op>
__attribute__((target("avx2,fma"))) void ReduceRowsAvx2(int64_t rows, int64_t n, const float* x,
                                                        float* y) {
  const float init = op == RowOp::kMax ? -INFINITY : op == RowOp::kMin ? INFINITY : 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * n;
    __m256 lo = _mm256_set1_ps(init), hi = lo;
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes) {
      lo = Step<op>(lo, _mm256_loadu_ps(row + j));
      hi = Step<op>(hi, _mm256_loadu_ps(row + j + 8));
    }
    alignas(32) float acc[kLanes];
    _mm256_store_ps(acc, lo);
    _mm256_store_ps(acc + 8, hi);
    float total = init;
    for (int l = 0; l < kLanes; ++l) {
      if constexpr (op == RowOp::kMax) {
        total = total > acc[l] ? total : acc[l];
      } else if constexpr (op == RowOp::kMin) {
        total = total < acc[l] ? total : acc[l];
      } else {
        total += acc[l];
      }
    }
    for (; j < n; ++j) {
      const float v = row[j];
      if constexpr (op == RowOp::kMax) {
        total = total > v ? total : v;
      } else if constexpr (op == RowOp::kMin) {
        total = total < v ? total : v;
      } else {
        total += op == RowOp::kSumSquare ? v * v : v;
      }
    }
    y[r] = total;
  }
}

// ReduceColumnsLoop on AVX2 + FMA: eight inner columns at a time held in a register across the
// reduced axis (the same order per element as the generic loop, whose AVX2 clone is scalar).
template <RowOp op>
__attribute__((target("avx2,fma"))) void ReduceColumnsAvx2(int64_t outer, int64_t reduce,
                                                           int64_t inner, const float* x,
                                                           float* y) {
  const float init = op == RowOp::kMax ? -INFINITY : op == RowOp::kMin ? INFINITY : 0.0f;
  for (int64_t o = 0; o < outer; ++o) {
    const float* xo = x + o * reduce * inner;
    float* yo = y + o * inner;
    int64_t i = 0;
    for (; i + 8 <= inner; i += 8) {
      __m256 acc = _mm256_set1_ps(init);
      for (int64_t j = 0; j < reduce; ++j) acc = Step<op>(acc, _mm256_loadu_ps(xo + j * inner + i));
      _mm256_storeu_ps(yo + i, acc);
    }
    for (; i < inner; ++i) {
      float acc = init;
      for (int64_t j = 0; j < reduce; ++j) {
        const float v = xo[j * inner + i];
        if constexpr (op == RowOp::kSum) {
          acc += v;
        } else if constexpr (op == RowOp::kSumSquare) {
          acc += v * v;
        } else if constexpr (op == RowOp::kMax) {
          acc = acc > v ? acc : v;
        } else {
          acc = acc < v ? acc : v;
        }
      }
      yo[i] = acc;
    }
  }
}

bool UseAvx2Loops() {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                           !__builtin_cpu_supports("avx512f");
  return avx2;
}

void ReduceColumns(RowOp op, int64_t outer, int64_t reduce, int64_t inner, const float* x,
                   float* y) {
  if (!UseAvx2Loops()) return ReduceColumnsLoop(op, outer, reduce, inner, x, y);
  switch (op) {
    case RowOp::kSum:
      return ReduceColumnsAvx2<RowOp::kSum>(outer, reduce, inner, x, y);
    case RowOp::kSumSquare:
      return ReduceColumnsAvx2<RowOp::kSumSquare>(outer, reduce, inner, x, y);
    case RowOp::kMax:
      return ReduceColumnsAvx2<RowOp::kMax>(outer, reduce, inner, x, y);
    case RowOp::kMin:
      return ReduceColumnsAvx2<RowOp::kMin>(outer, reduce, inner, x, y);
  }
}

// The row loop for this CPU: the explicit AVX2 loops where AVX2 is the widest.
void ReduceRows(RowOp op, int64_t rows, int64_t n, const float* x, float* y) {
  if (!UseAvx2Loops()) return ReduceRowsLoop(op, rows, n, x, y);
  switch (op) {
    case RowOp::kSum:
      return ReduceRowsAvx2<RowOp::kSum>(rows, n, x, y);
    case RowOp::kSumSquare:
      return ReduceRowsAvx2<RowOp::kSumSquare>(rows, n, x, y);
    case RowOp::kMax:
      return ReduceRowsAvx2<RowOp::kMax>(rows, n, x, y);
    case RowOp::kMin:
      return ReduceRowsAvx2<RowOp::kMin>(rows, n, x, y);
  }
}

// The row loop's form of an algorithm, with the finishing step; false when it has none.
bool RowForm(dnnl::algorithm a, float p, RowOp* op, bool* mean, bool* root) {
  using alg = dnnl::algorithm;
  *mean = a == alg::reduction_mean;
  *root = a == alg::reduction_norm_lp_sum && p == 2.0f;
  if (a == alg::reduction_sum || a == alg::reduction_mean)
    *op = RowOp::kSum;
  else if (a == alg::reduction_max)
    *op = RowOp::kMax;
  else if (a == alg::reduction_min)
    *op = RowOp::kMin;
  else if (*root || (a == alg::reduction_norm_lp_power_p_sum && p == 2.0f))
    *op = RowOp::kSumSquare;
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
  ReduceKernel(std::string name, std::unique_ptr<Kernel> reference, const ReduceDef& def,
               ReduceAttrs attrs)
      : DnnlKernel(std::move(name), std::move(reference)), def_(def), attrs_(std::move(attrs)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, def_.op));
    const Tensor& x = *in[0];
    const int rank = x.rank();
    if (x.dtype() != DType::kF32 || rank == 0 || x.numel() == 0) {
      return RunReference(ctx, in, out);
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
      return RunReference(ctx, in, out);
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
      if (a < -rank || a >= rank || mask[a < 0 ? a + rank : a]) return RunReference(ctx, in, out);
      mask[a < 0 ? a + rank : a] = true;
      ++num_axes;
    }
    if (num_axes == 0) {
      if (attrs_.noop_with_empty_axes) return RunReference(ctx, in, out);
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
      return RunReference(ctx, in, out);
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
    RowOp op;
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
          ReduceRows(op, o1 - o0, n, px + o0 * n, y + o0);
        } else {
          ReduceColumns(op, o1 - o0, n, inner, px + o0 * n * inner, y + o0 * inner);
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
    DYNVM_RETURN_IF_ERROR(Rebind(st, key, x.numel(), "reduction", [&](const dnnl::engine& engine) {
      const dnnl::memory::desc src = TensorDesc(x);
      const dnnl::memory::desc dst = DenseDesc(dt::f32, absl::MakeConstSpan(dst_dims, rank));
      dnnl::reduction::desc d(def_.algorithm, src, dst, def_.p, 0.0f);
      dnnl::reduction::primitive_desc pd(d, UserScratchpadAttr(), engine);
      st->prim.Bind(pd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
    }));
    if (st->use_reference) return RunReference(ctx, in, out);
    return ExecuteBound(ctx, st->prim, {x.raw_data(), out[0]->raw_data()});
  }

 private:
  const ReduceDef& def_;
  ReduceAttrs attrs_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateReduce(const KernelSpec& spec, const ReduceDef& def) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 2, 1, 1));
  // The reference factory validates the attributes: its errors are the spec's.
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> ref, CreateReference(spec));
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
  return std::make_unique<ReduceKernel>(KernelName(spec), std::move(ref), def, std::move(a));
}

}  // namespace

void RegisterReduceKernels(KernelRegistry& r) {
  using alg = dnnl::algorithm;
  static const ReduceDef kDefs[] = {
      {"ReduceSum", alg::reduction_sum},
      {"ReduceMean", alg::reduction_mean},
      {"ReduceMax", alg::reduction_max},
      {"ReduceMin", alg::reduction_min},
      {"ReduceProd", alg::reduction_mul},
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
