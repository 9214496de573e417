// oneDNN Transpose (f32): the permutation as one reorder primitive from the permuted-strides view
// of the input to the dense output, bound per site and shape.
//
// The view's dims are first simplified: size-1 dims dropped, and neighbours that are one run of
// memory in the input merged (the output is dense, so they are one run there too). What remains
// decides the kernel (dnnl_benchmark.cc, BM_TransposeReference / BM_TransposeReorder; figures in
// docs/kernels.md, "oneDNN backend"):
// - the innermost output dim also innermost in the input (stride 1): the reference kernel's
//   strided copy runs along contiguous rows and is as fast as the reorder (within noise), so the
//   reference kernel serves it; likewise a plain copy (one dim left), anything below
//   kMinReorderElements elements (the two are even at 32x32, the reference faster at 16x16),
//   and, at a site whose shapes keep changing, small shapes after its first few
//   (kMaxPrimitiveBinds, common.h);
// - otherwise (the innermost axis moves: a 2-D transpose, K^T in attention) the reorder,
//   1.4-3.5x faster than the reference kernel's element-wise copy (64x64: 1.4-1.7x,
//   [8, 64, 64] -> [0, 2, 1]: 2x, 512x512: 3.5x).
// With more than one thread and at least kMinParallelCopyBytes of output, the outermost
// simplified dim is cut into one range per thread, each a reorder of its own on its thread with
// OpenMP count 1: oneDNN's OpenMP reorder at 2 threads measured slower than one thread on the
// shared 2-core machine. Each range has its own memory objects (their data handles are set per
// run); two ranges of equal size may share one oneDNN primitive (its primitive cache), which is
// safe to run on two threads at once because its scratchpad is the caller's (scratchpad_mode::
// user), one slice of the site's workspace per range. Other dtypes, zero-size dims, more than
// kMaxReorderRank simplified dims, and zero or negative input strides go to the reference
// kernel, which also reports every error (a perm that is not a permutation, at create).
//
// Tuning notes (moved here from docs/kernels.md with the code's move to kernels/cpu/; the
// figures are those of the records named):
//
// Transpose (kernels/dnnl/transpose.cc, test kernels_dnnl_transpose_test): the permutation as a
// oneDNN reorder from the input's permuted-strides view to the dense output, bound per site and
// shape (ShapeKey of the input's dims and strides, and the thread count). The view is first
// simplified (size-1 dims dropped, neighbours that are one run of input memory merged); the reorder
// serves it only where the innermost output axis is not the input's innermost (a 2-D transpose,
// attention's K^T) and it has at least 2048 elements. Everything else runs the reference kernel
// (counted in fallback_runs()): permutations that keep the innermost axis (the encoders' head
// split/merge, [8, 4, 64, 64] -> perm [0, 2, 1, 3] and the like), small tensors, zero-size dims,
// more than 6 simplified dims, zero or negative strides, other dtypes (refused at create), and, at
// a site whose shapes keep changing, shapes of at most 64K elements after its first four (as
// Rebind, above). A perm that is not a permutation is the reference factory's InvalidArgument at
// create; a perm whose length is not the input's rank, its error at run time. At more than one
// thread, an output of at least 64 KiB (the reference copy's own split size) is cut along its
// outermost simplified dim into one range per thread, each range its own reorder (its own memory
// objects; two equal ranges may share oneDNN's cached primitive, safe to run concurrently with user
// scratchpads, one workspace slice per range) at OpenMP count 1 on a pool thread; oneDNN's own
// OpenMP reorder at 2 threads was slower than one thread in most runs on the loaded 2-core machine,
// up to 400x (8 ms for [64, 8, 256]) when its team waited for the busy core. Measured
// (dnnl_benchmark --benchmark_filter=BM_Transpose, real time, medians of 8 randomly interleaved
// repetitions, load average 1.1-2.9: docs/results/avx2-transpose-reorder-2026-11-28.txt;
// BM_TransposeReorder is one reorder of the whole tensor, BM_TransposeKernel this kernel):
//
// - [8, 64, 256], 1 0 2: reference 1 thr 20.2 us; reorder 1 thr 19.6 us; kernel 1 thr 18.5 us
//   (ref); reference 2 thr 13.4 us; kernel 2 thr 24.3 us (ref)
// - [64, 8, 256], 1 0 2: reference 1 thr 22.2; reorder 1 thr 19.9; kernel 1 thr 20.6 (ref);
//   reference 2 thr 11.7; kernel 2 thr 14.9 (ref)
// - [8, 4, 64, 64], 0 2 1 3: reference 1 thr 22.0; reorder 1 thr 20.8; kernel 1 thr 21.3 (ref);
//   reference 2 thr 37.0; kernel 2 thr 13.2 (ref)
// - [1, 128, 4, 64], 0 2 1 3: reference 1 thr 4.2; reorder 1 thr 3.8; kernel 1 thr 5.4 (ref);
//   reference 2 thr 5.0; kernel 2 thr 4.8 (ref)
// - [2, 3, 5, 7], 3 1 0 2: reference 1 thr 0.57; reorder 1 thr 0.36; kernel 1 thr 0.38 (ref);
//   reference 2 thr 0.39; kernel 2 thr 0.41 (ref)
// - [16, 16], 1 0: reference 1 thr 0.27; reorder 1 thr 0.41; kernel 1 thr 0.31 (ref); reference 2
//   thr 0.33; kernel 2 thr 0.37 (ref)
// - [32, 32], 1 0: reference 1 thr 0.89; reorder 1 thr 0.60; kernel 1 thr 0.75 (ref); reference 2
//   thr 0.67; kernel 2 thr 0.70 (ref)
// - [64, 64], 1 0: reference 1 thr 2.54; reorder 1 thr 1.51; kernel 1 thr 1.81; reference 2 thr
//   2.08; kernel 2 thr 1.44
// - [8, 64, 64], 0 2 1: reference 1 thr 19.8; reorder 1 thr 11.0; kernel 1 thr 9.4; reference 2 thr
//   33.1; kernel 2 thr 8.1 (split)
// - [512, 512], 1 0: reference 1 thr 533; reorder 1 thr 159; kernel 1 thr 153; reference 2 thr 372;
//   kernel 2 thr 143 (split; 83 us CPU)
//
// "(ref)": the kernel ran its reference kernel, so that column differs from the reference column
// only by noise, which on this shared machine is +-30% on rows that run the same code. The rule
// follows from the rows where the reorder's gain is beyond that noise: it is 1.4-3.5x when the
// innermost axis moves and the tensor has 4096 elements or more, even with the reference at 32x32
// (1024 elements; 0.60 vs 0.89 here, 0.56 vs 0.58 in a separate 4-repetition run) and slower at
// 16x16, so the threshold sits between (2048). Where the innermost axis stays, each element run is
// a contiguous row the reference copies in its inner loop, and the reorder was within 0-15% of it
// across five runs (faster in most, slower in some): not taken, so such sites keep the reference's
// own pool split at 2 threads and bind nothing. The encoder shapes of issue 16 all keep the
// innermost axis (or are below 2048 elements), so this kernel does not change them; it pays on
// attention's K^T ([8, 64, 64] -> [0, 2, 1]: 2.1x at 1 thread, 4x at 2), 2-D transposes, and the
// CRNN's features into its LSTM ([1, 128, T] -> [2, 0, 1], vm-compile --report on
// tools/bench/crnn_bench.py's export names transpose.f32.dnnl for it): T = 25, 1.6 -> 1.5 us at 1
// thread, 2.5 -> 1.1 us at 2; T = 100, 5.9 -> 4.1 us and 10.6 -> 3.2 us
// (docs/results/avx2-transpose-reorder-crnn-2026-11-28.txt). The CRNN's other Transpose (the LSTM
// output, [T, 2, 1, H] -> [0, 2, 1, 3]) keeps the innermost axis and runs the reference copy.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/reference/common.h"
#include "kernels/reference/data_movement.h"

namespace dynvm::onednn {
namespace {

using dt = dnnl::memory::data_type;

inline constexpr int kMaxReorderRank = 6;
inline constexpr int64_t kMinReorderElements = 2048;

struct TransposeAttrs {
  bool has_perm = false;
  std::vector<int64_t> perm;
};

// The simplified view of Transpose(x, perm) (see above).
struct View {
  int rank = 0;
  int64_t dims[Tensor::kMaxRank];
  int64_t strides[Tensor::kMaxRank];
  int64_t elements = 1;
};

// False when the view is not the reorder's (above); *v holds it otherwise.
bool Simplify(const TransposeAttrs& a, const Tensor& x, View* v) {
  const int rank = x.rank();
  if (x.dtype() != DType::kF32 || (a.has_perm && a.perm.size() != static_cast<size_t>(rank))) {
    return false;
  }
  v->rank = 0;
  for (int i = 0; i < rank; ++i) {
    const int p = a.has_perm ? static_cast<int>(a.perm[i]) : rank - 1 - i;
    const int64_t d = x.dim(p), s = x.stride(p);
    if (d == 0) return false;
    if (d == 1) continue;
    if (s <= 0) return false;
    v->elements *= d;
    if (v->rank > 0 && v->strides[v->rank - 1] == s * d) {
      v->dims[v->rank - 1] *= d;
      v->strides[v->rank - 1] = s;
      continue;
    }
    v->dims[v->rank] = d;
    v->strides[v->rank] = s;
    ++v->rank;
  }
  return v->rank >= 2 && v->rank <= kMaxReorderRank && v->strides[v->rank - 1] != 1 &&
         v->elements >= kMinReorderElements;
}

// A site's primitives: one per range of the outermost dim.
struct TransposeState : KernelState {
  ShapeKey key;
  bool valid = false;
  bool use_fallback = false;
  int binds = 0;  // shapes this site has seen
  std::vector<BoundPrimitive> parts;
  std::vector<int64_t> starts;  // parts.size() + 1 row offsets
};

// Binds st's primitives for view v cut into `ranges` ranges of its outermost dim.
absl::Status BindParts(TransposeState* st, const View& v, int ranges) {
  DYNVM_ASSIGN_OR_RETURN(const dnnl::engine* engine, CpuEngine());
  const int64_t rows = v.dims[0];
  st->parts.assign(ranges, BoundPrimitive());
  st->starts.assign(ranges + 1, 0);
  for (int r = 0; r < ranges; ++r) {
    st->starts[r + 1] = st->starts[r] + rows / ranges + (r < rows % ranges ? 1 : 0);
  }
  SetThreads(1);
  return Guard("reorder", [&] {
    for (int r = 0; r < ranges; ++r) {
      int64_t dims[kMaxReorderRank];
      std::copy(v.dims, v.dims + v.rank, dims);
      dims[0] = st->starts[r + 1] - st->starts[r];
      const auto d = absl::MakeConstSpan(dims, v.rank);
      const dnnl::memory::desc src = PlainDesc(dt::f32, d, absl::MakeConstSpan(v.strides, v.rank));
      const dnnl::memory::desc dst = DenseDesc(dt::f32, d);
      dnnl::reorder::primitive_desc pd(*engine, src, *engine, dst, UserScratchpadAttr());
      st->parts[r].Bind(pd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
    }
    return absl::OkStatus();
  });
}

class TransposeKernel final : public DnnlKernel {
 public:
  TransposeKernel(std::string name, TransposeAttrs attrs)
      : DnnlKernel(std::move(name)), attrs_(std::move(attrs)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "Transpose"));
    const Tensor& x = *in[0];
    View v;
    if (!Simplify(attrs_, x, &v)) return RunFallback(ctx, in, out);
    const int64_t bytes = v.elements * static_cast<int64_t>(sizeof(float));
    const int ranges = ctx.num_threads() > 1 && bytes >= reference::kMinParallelCopyBytes
                           ? static_cast<int>(std::min<int64_t>(ctx.num_threads(), v.dims[0]))
                           : 1;
    ShapeKey key;
    key.Add(&x);
    key.Add(ranges);
    TransposeState* st = SiteState<TransposeState>(ctx);
    if (!st->valid || st->key != key) {
      st->valid = false;
      // A site whose shapes keep changing binds for its first kMaxPrimitiveBinds shapes, then
      // only for large ones (common.h): binding costs more than a small copy.
      if (++st->binds > kMaxPrimitiveBinds && v.elements <= kChurnMaxElements) {
        st->use_fallback = true;
      } else {
        absl::Status s = BindParts(st, v, ranges);
        if (!s.ok() && !absl::IsUnimplemented(s)) return s;
        st->use_fallback = !s.ok();
      }
      st->key = key;
      st->valid = true;
    }
    if (st->use_fallback) return RunFallback(ctx, in, out);
    const int rank = x.rank();
    reference::Dims out_dims(rank);
    for (int i = 0; i < rank; ++i) {
      out_dims[i] = x.dim(attrs_.has_perm ? static_cast<int>(attrs_.perm[i]) : rank - 1 - i);
    }
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], DType::kF32, out_dims, "Transpose"));
    return Execute(ctx, *st, v, x.data<float>(), out[0]->data<float>());
  }

 private:
  // Runs each part on its range: part r reads rows [starts[r], starts[r + 1]) of the view.
  static absl::Status Execute(KernelContext& ctx, const TransposeState& st, const View& v,
                              const float* src, float* dst) {
    const int64_t row_elements = v.elements / v.dims[0];
    size_t scratch = 0;
    for (const BoundPrimitive& p : st.parts) scratch = std::max(scratch, p.scratchpad_bytes());
    const size_t stride = (scratch + 63) / 64 * 64;
    void* scratch_base = nullptr;
    if (stride > 0) {
      DYNVM_ASSIGN_OR_RETURN(scratch_base, ctx.Workspace(stride * st.parts.size()));
    }
    const auto run = [&](int64_t r) {
      SetThreads(1);
      const int64_t row = st.starts[r];
      void* pad = stride > 0 ? static_cast<char*>(scratch_base) + r * stride : nullptr;
      return st.parts[r].Execute({src + row * v.strides[0], dst + row * row_elements}, pad);
    };
    const int64_t parts = static_cast<int64_t>(st.parts.size());
    if (parts == 1) return run(0);
    std::atomic<bool> failed{false};
    absl::Status first;
    ctx.ParallelFor(parts, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        absl::Status s = run(r);
        if (!s.ok() && !failed.exchange(true)) first = s;
      }
    });
    return first;
  }

  TransposeAttrs attrs_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateTranspose(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 1, 1, 1));
  // The fallback's factory (the reference kernel, which the registry makes next) checks that
  // perm is a permutation.
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
  TransposeAttrs a;
  a.has_perm = spec.Find("perm") != nullptr;
  DYNVM_ASSIGN_OR_RETURN(a.perm, spec.GetInts("perm"));
  return std::make_unique<TransposeKernel>(KernelName(spec), std::move(a));
}

}  // namespace

void RegisterTransposeKernels(KernelRegistry& r) {
  r.Register(
      KernelRegistration{"", "Transpose", Device::kCPU, kBackend, kDnnlPriority, &CreateTranspose});
}

}  // namespace dynvm::onednn
