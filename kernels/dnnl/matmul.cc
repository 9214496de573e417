// oneDNN MatMul and Gemm (f32).
//
// Variants ("sgemm+brgemm"), chosen per shape class when a site binds (measured on the
// project's CPU; figures in docs/kernels.md, benchmarks in dnnl_benchmark.cc):
//   sgemm  -- dnnl_sgemm: M = 1 (decode) and any product whose B is row-major. It takes
//             row-major or transposed operands with any leading dimension, needs no primitive,
//             argument map or cache lookup, and at M=1 runs oneDNN's GEMV kernel, which
//             allocates nothing. A fixed-shape matmul primitive is ~3x slower at M=1; the
//             runtime-M primitive is the same GEMM engine behind a primitive execute.
//   brgemm -- the fixed-shape matmul primitive, bound per site and shape with a user
//             scratchpad: M >= 2 with a transposed B (a [N, K] weight), where sgemm's
//             transposed path is slower. Gemm's C rides along as the primitive's bias when it
//             is one row added as is.
// A site whose shape keeps changing (a decoder's sequence growing every step) stops binding
// primitives after kMaxPrimitiveBinds shapes in a run and runs sgemm until the run ends: binding
// a primitive per shape costs more than the GEMM at those sizes. The count restarts with each
// run (ShapeCount, common.h), so the choice, and the result's bits, never depend on earlier runs.
//
// Weights are used in place in their plain layout (row-major or transposed by strides); an
// operand oneDNN cannot address (a broadcast view, a non-unit inner stride) is packed into the
// site's workspace, never a weight in the ordinary case.
//
// At more than one thread, products of M >= 2 (or batched) above kMinParallelGemm run on the
// VM's pool (SplitSgemm): one dnnl_sgemm per range of rows, columns or batch items, each on its
// own thread at OpenMP count 1, so oneDNN's OpenMP team never runs beside the pool.
//
// dynvm::MatMul (compiler/rewrite/matmul_transpose.cc) runs this kernel on views of its operands
// through a_perm and b_perm: a folded Transpose is only strides here.
//
// Batched MatMul loops over the broadcast batch; when B is shared by the whole batch and A's
// batch dims collapse onto its rows (the [B, S, K] x [K, N] of a linear layer), the batch is
// folded into one GEMM with M = B*S.
//
// Tuning notes (moved here from docs/kernels.md with the code's move to kernels/cpu/; the
// figures are those of the records named):
//
// MatMul and Gemm. Per shape class, when a site binds (figures below):
// - M = 1 (a decode step) on one thread (work under kMinParallelWork): the GEMV loop (Gemv,
//   kernels/cpu/gemv.cc, per level), which streams the weight once, four rows at
//   a time for a [N, K] weight (dot form) or 64 columns at a time down a row-major [K, N] one. At
//   these sizes the product is bound by reading the weights (4.7 MB per step for the LSTM LM of
//   tools/bench), and the loop goes straight at them. The dot form has explicit AVX-512 (with
//   software prefetch) and AVX2+FMA versions: GCC's AVX2 clone of the generic 16-lane loop kept its
//   accumulators on the stack (about 2 GFLOP/s on an LSTM's 512x128 recurrent weights, 39% of the
//   CRNN's time on an AVX2 machine); the AVX2 version runs eight FMA chains from registers. The
//   axpy form (a [K, N] weight: torch's MatMul export of a Linear layer) has an AVX2+FMA version
//   too (GemvColsAvx2: 64 columns in eight registers), for the same reason (81 stack accesses in
//   GCC's AVX2 clone): GPT decode went from 1.29-1.30x to 1.37-1.60x ONNX Runtime on the AVX2
//   machine (docs/results/avx2-gemvcols-gpt-op1{4,7}-2026-11-28.txt).
//   kernels_cpu_test's Gemv.MatchesADoubleLoop checks both forms at every level.
// - M = 1 with more work, and any product whose B is row-major: dnnl_sgemm. At M = 1 it runs
//   oneDNN's GEMV kernel: 13.3 GFLOP/s against 6.2 for a fixed-shape matmul primitive and 13.3 for
//   the runtime-M primitive in the record below, with no primitive, no argument map and no
//   allocation at all.
// - M >= 2 with a transposed B (a [N, K] weight: Gemm transB, the usual Linear layer): the
//   fixed-shape matmul primitive (brgemm), whose transposed-B path beats sgemm's (119.7 against
//   104.7 GFLOP/s at M = 64 in the record below). Gemm's C rides along as the primitive's bias when
//   it is one row added as is.
// - Batched MatMul loops over the broadcast batch; when B is shared and A's batch dims continue its
//   rows ([B, S, K] x [K, N]), the batch folds into one GEMM with M = B*S.
// - At more than one thread, a product with M >= 2 (or a batch) of at least kMinParallelGemm (128K)
//   multiply-adds runs on the VM's pool instead of oneDNN's OpenMP: M's rows (N's columns when M is
//   short, a batch's items) split into one range per thread, each one single-threaded dnnl_sgemm
//   (docs/threads.md). One thread is unchanged.
// - dynvm::MatMul(A, B) (a_perm, b_perm; made by the matmul_transpose rewrite, docs/compiler.md) is
//   MatMul(Transpose(A, a_perm), Transpose(B, b_perm)): the same kernel run on views of A and B
//   through the permuted strides, so a folded Transpose costs nothing. Each matrix is read in place
//   by dnnl_sgemm as a plain ('N') or transposed ('T') operand with its leading dimension, one GEMM
//   per batch item (split over the pool by items, rows or columns like MatMul); the rule folds only
//   permutations that leave a unit stride along the matrix's rows or columns, so nothing is packed.
//   The reference kernel runs its strided loops on the same views;
//   DnnlKernels.PermutedMatMulMatchesTransposeThenMatMul checks both against a materialized
//   Transpose then MatMul.
// - dynvm::Linear (a linear layer with its bias and activation, made by the matmul_bias,
//   gemm_activation and linear_activation rewrites, docs/compiler.md): dnnl_sgemm with W read in
//   place ([K, N] row-major, or [N, K] transposed: the exporter's layout; sgemm rather than the
//   brgemm primitive, so MatMul's plain-B speed is kept), the GEMV loop at M = 1, then bias and
//   activation over each range of rows in one vectorized pass while it is in cache (Relu, Tanh,
//   Sigmoid, GELU by cpu::GeluErf (one pass: x/2 (2 - erfc(z)) or x/2 erfc(z), z = |x|/sqrt 2, with
//   no Taylor branch; 1.25x the three-pass form in BM_GeluForms, and free of the cancellation of 1
//   + erf(x) in the negative tail; on AVX2 without AVX-512 an explicit loop runs four vectors at
//   once, 490-550 -> 590-637 M elements/s, since the compiler's clone ran one long polynomial chain
//   at a time; kernels_cpu_test's Activation.ErfAndTheGelusMatchDouble bounds it against GELU in
//   double, (1e-6
//   + 2e-7 x^2) relative: exp's argument -x^2/2 is rounded in float), tanh-GELU, SiLU; tanh and
//   sigmoid by kernels/cpu/fast_math.h, within 2e-5 relative of the reference in
//   DnnlKernels.LinearMatchesTheReference). Split over the pool like MatMul at more than one
//   thread. A strided X is packed into the site's workspace; a W or B not unit-stride along its
//   rows runs the reference kernel.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/dnnl/choice.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/parallel_loops.h"
#include "kernels/reference/common.h"
#include "kernels/reference/permute.h"

namespace dynvm::onednn {
namespace {

using reference::Dims;

// How one GEMM operand is read: op(X) is rows x cols.
struct Operand {
  char trans = 'N';
  int64_t ld = 0;
  bool pack = false;  // copied into the workspace as a dense rows x cols matrix
};

// rows x cols with element strides (sr, sc): read in place when oneDNN can address it,
// row-major ('N') or column-major ('T'), else packed.
Operand PlanOperand(int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  const int64_t min_n = std::max<int64_t>(cols, 1), min_t = std::max<int64_t>(rows, 1);
  const int64_t ld_n = rows == 1 ? min_n : sr;
  if ((sc == 1 || cols == 1) && ld_n >= min_n) return Operand{'N', ld_n, false};
  const int64_t ld_t = cols == 1 ? min_t : sc;
  if ((sr == 1 || rows == 1) && ld_t >= min_t) return Operand{'T', ld_t, false};
  return Operand{'N', min_n, true};
}

void PackMatrix(const float* src, int64_t rows, int64_t cols, int64_t sr, int64_t sc, float* dst) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* s = src + i * sr;
    float* d = dst + i * cols;
    for (int64_t j = 0; j < cols; ++j) d[j] = s[j * sc];
  }
}

absl::Status Sgemm(const KernelContext& ctx, const Operand& a, const Operand& b, int64_t m,
                   int64_t n, int64_t k, float alpha, const float* pa, const float* pb, float beta,
                   float* c, int64_t ldc) {
  // One row (a decode step): the GEMV microkernel (cpu::Gemv), its outputs split across the VM's
  // threads when it has several; on one thread, choice::UseGemv sends large products to sgemm.
  if (m == 1 && a.trans == 'N' && choice::UseGemv(n, k, ctx.num_threads())) {
    ParallelGemv(ctx, b.trans, n, k, alpha, pa, pb, b.ld, beta, c);
    return absl::OkStatus();
  }
  const dnnl_status_t s =
      dnnl_sgemm(a.trans, b.trans, m, n, k, alpha, pa, a.ld, pb, b.ld, beta, c, ldc);
  return FromDnnl(s, "dnnl_sgemm");
}

// Products (M >= 2) of at least kMinParallelGemm multiply-adds, at more than one thread, run on
// the VM's pool (common.h).

// Rows (or columns) per range of a split product: a multiple of sgemm's register blocks.
constexpr int64_t kSplitRowGrain = 8;
constexpr int64_t kSplitColGrain = 16;

int64_t BatchCount(absl::Span<const int64_t> batch) {
  int64_t count = 1;
  for (int64_t d : batch) count *= d;
  return count;
}

bool SplitOnPool(const KernelContext& ctx, int64_t m, int64_t n, int64_t k, int64_t count) {
  if (ctx.num_threads() < 2 || n <= 0 || k <= 0) return false;
  if (count == 1 && m < 2) return false;  // the batch-1 GEMV splits itself (ParallelGemv)
  return count * m * n * k >= kMinParallelGemm;
}

// One product on the calling thread only (a pool worker or the caller during a split).
dnnl_status_t SerialSgemm(const Operand& a, const Operand& b, int64_t m, int64_t n, int64_t k,
                          float alpha, const float* pa, const float* pb, float beta, float* c,
                          int64_t ldc) {
  SetThreads(1);
  if (m == 1 && a.trans == 'N') {
    cpu::Gemv(b.trans, n, k, alpha, pa, pb, b.ld, beta, c);
    return dnnl_success;
  }
  return dnnl_sgemm(a.trans, b.trans, m, n, k, alpha, pa, a.ld, pb, b.ld, beta, c, ldc);
}

// C = alpha op(A) op(B) + beta C with M's rows or N's columns split across the pool
// (SplitByColumns).
absl::Status SplitSgemm(const KernelContext& ctx, const Operand& a, const Operand& b, int64_t m,
                        int64_t n, int64_t k, float alpha, const float* pa, const float* pb,
                        float beta, float* c, int64_t ldc) {
  SetThreads(1);
  std::atomic<int> failed{dnnl_success};
  const auto note = [&failed](dnnl_status_t s) {
    if (s != dnnl_success) failed.store(s, std::memory_order_relaxed);
  };
  if (!SplitByColumns(m, n, ctx.num_threads(), kSplitRowGrain, kSplitColGrain)) {
    ctx.ParallelFor(m, kSplitRowGrain, [&](int64_t i0, int64_t i1) {
      const float* ai = a.trans == 'N' ? pa + i0 * a.ld : pa + i0;
      note(SerialSgemm(a, b, i1 - i0, n, k, alpha, ai, pb, beta, c + i0 * ldc, ldc));
    });
  } else {
    ctx.ParallelFor(n, kSplitColGrain, [&](int64_t j0, int64_t j1) {
      const float* bj = b.trans == 'N' ? pb + j0 : pb + j0 * b.ld;
      note(SerialSgemm(a, b, m, j1 - j0, k, alpha, pa, bj, beta, c + j0, ldc));
    });
  }
  return FromDnnl(static_cast<dnnl_status_t>(failed.load()), "dnnl_sgemm");
}

// Panels per range of a split product on packed B: the packed GEMM's column block (8 panels).
constexpr int64_t kPackedPanelGrain = cpu::packed_gemm::kColBlock / cpu::packed_gemm::kPanel;

// Products of at least this many rows (after folding) whose B is read transposed (a [N, K]
// weight: Gemm transB, a Linear layer) run the fixed-shape matmul primitive (brgemm) with its
// scratchpad from the VM's pool: dnnl_sgemm's transposed-B path is slower there. Everything else
// runs dnnl_sgemm, whose GEMV kernel is ~3x faster than the primitive at M=1 and whose plain-B
// GEMM is as fast as the primitive at any M. Measured per shape class: dnnl_benchmark.cc.
constexpr int64_t kPrimitiveMinRows = 2;

// `allowed`: the site has seen at most kMaxPrimitiveBinds shapes in this run (ShapeCount,
// common.h); after that it runs sgemm until the run ends.
bool UsePrimitive(int64_t m, int64_t n, int64_t k, const Operand& b, bool allowed) {
  if (m < kPrimitiveMinRows || n <= 0 || k <= 0 || b.trans != 'T' || b.pack) return false;
  return allowed;
}

// Binds a fixed-shape matmul primitive C[M,N] = alpha * A[M,K] * B[K,N] (+ bias[N]) over
// element strides (sam, sak) and (sbk, sbn). Unimplemented when oneDNN has no such primitive.
absl::Status BindMatmulPrimitive(BoundPrimitive* prim, int64_t m, int64_t n, int64_t k, int64_t sam,
                                 int64_t sak, int64_t sbk, int64_t sbn, bool bias, float alpha) {
  DYNVM_ASSIGN_OR_RETURN(const dnnl::engine* engine, CpuEngine());
  return Guard("matmul", [&]() -> absl::Status {
    using dt = dnnl::memory::data_type;
    const int64_t a_dims[2] = {m, k}, a_strides[2] = {sam, sak};
    const int64_t b_dims[2] = {k, n}, b_strides[2] = {sbk, sbn};
    const dnnl::memory::desc a_md = PlainDesc(dt::f32, a_dims, a_strides);
    const dnnl::memory::desc b_md = PlainDesc(dt::f32, b_dims, b_strides);
    const dnnl::memory::desc c_md = DenseDesc(dt::f32, {m, n});
    const dnnl::memory::desc bias_md = DenseDesc(dt::f32, {1, n});
    dnnl::primitive_attr attr = UserScratchpadAttr();
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    const dnnl::matmul::desc d =
        bias ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md) : dnnl::matmul::desc(a_md, b_md, c_md);
    const dnnl::matmul::primitive_desc pd(d, attr, *engine);
    // Strides only oneDNN's reference implementation takes: dnnl_sgemm (packing) is faster.
    if (absl::string_view(pd.impl_info_str()).substr(0, 3) == "ref") {
      return absl::UnimplementedError("matmul: no optimized implementation");
    }
    if (bias) {
      prim->Bind(pd, {{DNNL_ARG_SRC, a_md},
                      {DNNL_ARG_WEIGHTS, b_md},
                      {DNNL_ARG_BIAS, bias_md},
                      {DNNL_ARG_DST, c_md}});
    } else {
      prim->Bind(pd, {{DNNL_ARG_SRC, a_md}, {DNNL_ARG_WEIGHTS, b_md}, {DNNL_ARG_DST, c_md}});
    }
    return absl::OkStatus();
  });
}

// The shape-dependent plan of one MatMul site.
struct MatMulPlan {
  int64_t m = 0, n = 0, k = 0;
  int64_t sam = 0, sak = 0, sbk = 0, sbn = 0;
  Operand a, b;
  Dims batch;  // broadcast batch dims (empty when folded)
  Dims batch_sa, batch_sb;
  size_t pack_a_floats = 0, pack_b_floats = 0;
};

struct MatMulState : KernelState {
  ShapeKey key;
  bool valid = false;
  MatMulPlan plan;
  Dims out_dims;
  bool use_primitive = false;
  bool split = false;  // on the pool (SplitOnPool)
  // A split batched product: each item's (A, B) offsets, item i writing C's i-th block.
  std::vector<std::pair<int64_t, int64_t>> offsets;
  ShapeCount shapes;               // shapes seen in this run
  bool primitive_allowed = false;  // the plan's ShapeCount verdict
  BoundPrimitive prim;
};

// MatMul, and dynvm::MatMul (a_perm, b_perm): the product of views of A and B through the
// permuted strides, planned like any strided operand (read in place by dnnl_sgemm as a plain or
// transposed matrix with its leading dimension; packed only when neither matrix axis has a unit
// stride, which compiler/rewrite/matmul_transpose.cc never makes).
class MatMulKernel final : public DnnlKernel {
 public:
  MatMulKernel(std::string name, std::vector<int64_t> a_perm = {}, std::vector<int64_t> b_perm = {},
               int64_t packed_n = -1)
      : DnnlKernel(std::move(name)),
        a_perm_(std::move(a_perm)),
        b_perm_(std::move(b_perm)),
        packed_n_(packed_n) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, "MatMul"));
    if (packed_n_ >= 0) {
      absl::StatusOr<Tensor> a = reference::PermutedView(*in[0], a_perm_, "MatMul", "a_perm");
      if (!a.ok()) return RunFallback(ctx, in, out);  // reports the bad permutation
      return RunPacked(ctx, *a, *in[1], in, out);
    }
    if (a_perm_.empty() && b_perm_.empty()) return RunOn(ctx, *in[0], *in[1], in, out);
    absl::StatusOr<Tensor> a = reference::PermutedView(*in[0], a_perm_, "MatMul", "a_perm");
    absl::StatusOr<Tensor> b = reference::PermutedView(*in[1], b_perm_, "MatMul", "b_perm");
    if (!a.ok() || !b.ok()) return RunFallback(ctx, in, out);  // reports the bad permutation
    return RunOn(ctx, *a, *b, in, out);
  }

 private:
  // The product of a and b (`in`'s operands, or views of them), `in` for the reference kernel.
  absl::Status RunOn(KernelContext& ctx, const Tensor& a, const Tensor& b, Inputs in,
                     Outputs out) const {
    if (a.dtype() != DType::kF32 || b.dtype() != DType::kF32 || a.rank() == 0 || b.rank() == 0) {
      return RunFallback(ctx, in, out);  // the reference kernel reports the error
    }
    SetThreads(
        ThreadsFor(ctx.num_threads(), a.numel() * (b.rank() == 1 ? 1 : b.dim(b.rank() - 1))));
    ShapeKey key;
    key.Add(&a);
    key.Add(&b);
    key.Add(ctx.num_threads());
    MatMulState* st = SiteState<MatMulState>(ctx);
    const bool same_key = st->valid && st->key == key;
    const bool allowed = st->shapes.Allows(ctx, same_key);
    if (!same_key || allowed != st->primitive_allowed) {
      st->primitive_allowed = allowed;
      st->valid = false;
      absl::Status s = Plan(a, b, st);
      if (!s.ok()) return RunFallback(ctx, in, out);  // reports the shape error
      const MatMulPlan& p = st->plan;
      st->use_primitive = false;
      st->offsets.clear();
      st->split = !p.a.pack && !p.b.pack && SplitOnPool(ctx, p.m, p.n, p.k, BatchCount(p.batch));
      if (st->split && !p.batch.empty()) {
        reference::ForEachOffset<2>(
            p.batch, {absl::MakeConstSpan(p.batch_sa), absl::MakeConstSpan(p.batch_sb)},
            [st](int64_t oa, int64_t ob) { st->offsets.emplace_back(oa, ob); });
      }
      if (!st->split && p.batch.empty() && UsePrimitive(p.m, p.n, p.k, p.b, allowed)) {
        s = BindMatmulPrimitive(&st->prim, p.m, p.n, p.k, p.sam, p.sak, p.sbk, p.sbn,
                                /*bias=*/false, 1.0f);
        if (!s.ok() && !absl::IsUnimplemented(s)) return s;
        st->use_primitive = s.ok();
      }
      st->key = key;
      st->valid = true;
    }
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], DType::kF32, st->out_dims, "MatMul"));
    Tensor& y = *out[0];
    if (y.numel() == 0) return absl::OkStatus();
    const MatMulPlan& p = st->plan;
    if (p.k == 0) {
      std::memset(y.raw_data(), 0, static_cast<size_t>(y.nbytes()));
      return absl::OkStatus();
    }
    if (st->use_primitive) {
      return ExecuteBound(ctx, st->prim, {a.raw_data(), b.raw_data(), y.raw_data()});
    }
    if (st->split) return RunSplit(ctx, *st, a.data<float>(), b.data<float>(), y.data<float>());
    float* pack_a = nullptr;
    float* pack_b = nullptr;
    if (p.pack_a_floats + p.pack_b_floats > 0) {
      DYNVM_ASSIGN_OR_RETURN(void* ws,
                             ctx.Workspace((p.pack_a_floats + p.pack_b_floats) * sizeof(float)));
      pack_a = static_cast<float*>(ws);
      pack_b = pack_a + p.pack_a_floats;
    }
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    float* py = y.data<float>();
    absl::Status status;
    auto one = [&](int64_t oa, int64_t ob) {
      if (!status.ok()) return;
      const float* ma = pa + oa;
      const float* mb = pb + ob;
      if (p.a.pack) {
        PackMatrix(ma, p.m, p.k, p.sam, p.sak, pack_a);
        ma = pack_a;
      }
      if (p.b.pack) {
        PackMatrix(mb, p.k, p.n, p.sbk, p.sbn, pack_b);
        mb = pack_b;
      }
      status = Sgemm(ctx, p.a, p.b, p.m, p.n, p.k, 1.0f, ma, mb, 0.0f, py, p.n);
      py += p.m * p.n;
    };
    if (p.batch.empty()) {
      one(0, 0);
    } else {
      reference::ForEachOffset<2>(
          p.batch, {absl::MakeConstSpan(p.batch_sa), absl::MakeConstSpan(p.batch_sb)}, one);
    }
    return status;
  }

  // A product on the pool: one GEMM split by rows or columns, or a batch split by items.
  static absl::Status RunSplit(const KernelContext& ctx, const MatMulState& st, const float* pa,
                               const float* pb, float* py) {
    const MatMulPlan& p = st.plan;
    if (st.offsets.empty()) {
      return SplitSgemm(ctx, p.a, p.b, p.m, p.n, p.k, 1.0f, pa, pb, 0.0f, py, p.n);
    }
    SetThreads(1);
    std::atomic<int> failed{dnnl_success};
    const int64_t items = static_cast<int64_t>(st.offsets.size());
    ctx.ParallelFor(items, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const auto& off = st.offsets[static_cast<size_t>(i)];
        const dnnl_status_t s = SerialSgemm(p.a, p.b, p.m, p.n, p.k, 1.0f, pa + off.first,
                                            pb + off.second, 0.0f, py + i * p.m * p.n, p.n);
        if (s != dnnl_success) failed.store(s, std::memory_order_relaxed);
      }
    });
    return FromDnnl(static_cast<dnnl_status_t>(failed.load()), "dnnl_sgemm");
  }

  static absl::Status Plan(const Tensor& a, const Tensor& b, MatMulState* st) {
    MatMulPlan p;
    const int ra = a.rank(), rb = b.rank();
    p.m = ra == 1 ? 1 : a.dim(ra - 2);
    p.k = a.dim(ra - 1);
    const int64_t kb = rb == 1 ? b.dim(0) : b.dim(rb - 2);
    p.n = rb == 1 ? 1 : b.dim(rb - 1);
    p.sam = ra == 1 ? 0 : a.stride(ra - 2);
    p.sak = a.stride(ra - 1);
    p.sbk = rb == 1 ? b.stride(0) : b.stride(rb - 2);
    p.sbn = rb == 1 ? 0 : b.stride(rb - 1);
    if (p.k != kb) return absl::InvalidArgumentError("MatMul: inner dimensions differ");
    const absl::Span<const int64_t> batch_a = a.dims().first(ra >= 2 ? ra - 2 : 0);
    const absl::Span<const int64_t> batch_b = b.dims().first(rb >= 2 ? rb - 2 : 0);
    DYNVM_ASSIGN_OR_RETURN(Dims batch, reference::BroadcastShapes(batch_a, batch_b));
    Dims out_dims = batch;
    if (ra > 1) out_dims.push_back(p.m);
    if (rb > 1) out_dims.push_back(p.n);
    const size_t nb = batch.size();
    Dims bsa(nb, 0), bsb(nb, 0);
    for (size_t i = 0; i < batch_a.size(); ++i) {
      if (batch_a[i] != 1) bsa[nb - batch_a.size() + i] = a.stride(static_cast<int>(i));
    }
    for (size_t i = 0; i < batch_b.size(); ++i) {
      if (batch_b[i] != 1) bsb[nb - batch_b.size() + i] = b.stride(static_cast<int>(i));
    }
    // Fold the batch into M when B is shared and A's rows continue across its batch dims.
    bool fold = nb > 0 && std::all_of(bsb.begin(), bsb.end(), [](int64_t s) { return s == 0; });
    if (fold) {
      if (p.m > 1 && p.sak != 1 && p.k > 1) fold = false;
      int64_t row_stride = p.m > 1 ? p.sam : -1;  // M == 1: set by the innermost batch dim
      int64_t expect = p.m > 1 ? p.sam * p.m : -1;
      for (size_t i = nb; i-- > 0 && fold;) {
        if ((batch)[i] == 1) continue;
        if (expect < 0) {
          row_stride = bsa[i];
          expect = bsa[i] * (batch)[i];
        } else if (bsa[i] != expect) {
          fold = false;
        } else {
          expect *= (batch)[i];
        }
      }
      if (fold && row_stride >= 0) p.sam = row_stride;
    }
    if (fold) {
      int64_t rows = 1;
      for (int64_t d : batch) rows *= d;
      p.m *= rows;
      if (rows == 0) p.m = 0;
    } else {
      p.batch = batch;
      p.batch_sa = std::move(bsa);
      p.batch_sb = std::move(bsb);
    }
    p.a = PlanOperand(p.m, p.k, p.sam, p.sak);
    p.b = PlanOperand(p.k, p.n, p.sbk, p.sbn);
    if (p.a.pack) p.pack_a_floats = static_cast<size_t>(p.m * p.k);
    if (p.b.pack) p.pack_b_floats = static_cast<size_t>(p.k * p.n);
    st->plan = std::move(p);
    st->out_dims = std::move(out_dims);
    return absl::OkStatus();
  }

  // A x B with B the packed GEMM's panels [ceil(N / 16), K, 16] (b_packed_n = N): one row (a
  // decode step) runs packed_gemm::MultiplyVector, more rows packed_gemm::Multiply, both split
  // over the pool by ranges of panels (columns), or by rows where every thread gets a whole row
  // block (packed_gemm::SplitRows); each output's summation order is the same at any thread
  // count. A's leading dims are the rows (a strided A is packed into the
  // workspace first).
  absl::Status RunPacked(KernelContext& ctx, const Tensor& a, const Tensor& b, Inputs in,
                         Outputs out) const {
    using cpu::packed_gemm::kPanel;
    const int64_t n = packed_n_, panels = (n + kPanel - 1) / kPanel;
    if (a.dtype() != DType::kF32 || b.dtype() != DType::kF32 || a.rank() == 0 || b.rank() != 3 ||
        b.dim(0) != panels || b.dim(1) != a.dim(a.rank() - 1) || b.dim(2) != kPanel ||
        !b.is_contiguous()) {
      return RunFallback(ctx, in, out);  // the reference kernel reports the error
    }
    const int64_t k = b.dim(1), m = a.numel() / std::max<int64_t>(k, 1);
    Dims out_dims(a.dims().begin(), a.dims().end() - 1);
    out_dims.push_back(n);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, out_dims, "MatMul"));
    Tensor& y = *out[0];
    if (y.numel() == 0) return absl::OkStatus();
    float* py = y.data<float>();
    if (k == 0) {
      std::memset(py, 0, static_cast<size_t>(y.nbytes()));
      return absl::OkStatus();
    }
    const float* pa = a.data<float>();
    if (!a.is_contiguous()) {
      DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(static_cast<size_t>(a.nbytes())));
      float* dense = static_cast<float*>(ws);
      reference::ForEachOffset<1>(a.dims(), {a.strides()}, [&](int64_t o) { *dense++ = pa[o]; });
      pa = static_cast<const float*>(ws);
    }
    const float* pb = b.data<float>();
    const bool split = m == 1 ? m * n * k >= kMinParallelGemv : m * n * k >= kMinParallelGemm;
    const int threads = ctx.num_threads();
    if (split && m > 1 && threads > 1 && cpu::packed_gemm::SplitRows(m, threads)) {
      // Every thread a whole row block or more: by rows (each packs only its rows of A).
      ctx.ParallelFor(m, (m + threads - 1) / threads, [&](int64_t i0, int64_t i1) {
        cpu::packed_gemm::Multiply(
            i0, i1, n, k, pa, k, pb, py, n, [](int64_t, int64_t, int64_t, int64_t) {},
            cpu::packed_gemm::kDeepDepth);
      });
      return absl::OkStatus();
    }
    const int64_t grain = split ? kPackedPanelGrain : panels;
    ctx.ParallelFor(panels, grain, [&](int64_t p0, int64_t p1) {
      if (m == 1) {
        cpu::packed_gemm::MultiplyVector(p0, p1, n, k, pa, pb, py);
        return;
      }
      const int64_t j0 = p0 * kPanel, cols = std::min(n, p1 * kPanel) - j0;
      cpu::packed_gemm::Multiply(
          0, m, cols, k, pa, k, pb + j0 * k, py + j0, n, [](int64_t, int64_t, int64_t, int64_t) {},
          cpu::packed_gemm::kDeepDepth);
    });
    return absl::OkStatus();
  }

  std::vector<int64_t> a_perm_, b_perm_;  // empty: identity
  int64_t packed_n_;                      // b_packed_n, or -1
};

// ---- Gemm ----

struct GemmAttrs {
  float alpha = 1.0f;
  float beta = 1.0f;
  bool trans_a = false;
  bool trans_b = false;
};

struct GemmState : KernelState {
  ShapeKey key;
  bool valid = false;
  int64_t m = 0, n = 0, k = 0;
  Operand a, b;
  int64_t sam = 0, sak = 0, sbk = 0, sbn = 0;
  int64_t sc0 = 0, sc1 = 0;  // C's strides broadcast to [M, N]
  bool use_primitive = false;
  bool primitive_bias = false;     // C is the primitive's bias row
  bool split = false;              // on the pool (SplitOnPool)
  ShapeCount shapes;               // shapes seen in this run
  bool primitive_allowed = false;  // the plan's ShapeCount verdict
  BoundPrimitive prim;
};

class GemmKernel final : public DnnlKernel {
 public:
  GemmKernel(std::string name, GemmAttrs attrs) : DnnlKernel(std::move(name)), attrs_(attrs) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, "Gemm"));
    const Tensor& a = *in[0];
    const Tensor& b = *in[1];
    const Tensor* c = in.size() > 2 ? in[2] : nullptr;
    if (a.rank() != 2 || b.rank() != 2 || a.dtype() != DType::kF32 || b.dtype() != DType::kF32 ||
        (c != nullptr && (c->dtype() != DType::kF32 || c->rank() > 2))) {
      return RunFallback(ctx, in, out);
    }
    SetThreads(ThreadsFor(ctx.num_threads(), a.numel() * (attrs_.trans_b ? b.dim(0) : b.dim(1))));
    ShapeKey key;
    key.Add(&a);
    key.Add(&b);
    key.Add(c);
    key.Add(ctx.num_threads());
    GemmState* st = SiteState<GemmState>(ctx);
    const bool use_c = c != nullptr && attrs_.beta != 0;
    const bool same_key = st->valid && st->key == key;
    const bool allowed = st->shapes.Allows(ctx, same_key);
    if (!same_key || allowed != st->primitive_allowed) {
      st->primitive_allowed = allowed;
      st->valid = false;
      if (!Plan(a, b, c, st)) return RunFallback(ctx, in, out);
      // The primitive takes C as its bias when C is one row added as is (beta = 1). Its
      // output scale multiplies the bias too (alpha (A B + C)): with alpha other than 1, C
      // is added by sgemm's beta instead.
      const bool c_row =
          use_c && attrs_.beta == 1.0f && attrs_.alpha == 1.0f && st->sc0 == 0 && st->sc1 == 1;
      st->use_primitive = false;
      st->split = !st->a.pack && !st->b.pack && SplitOnPool(ctx, st->m, st->n, st->k, 1);
      if (!st->split && (!use_c || c_row) && UsePrimitive(st->m, st->n, st->k, st->b, allowed)) {
        absl::Status s = BindMatmulPrimitive(&st->prim, st->m, st->n, st->k, st->sam, st->sak,
                                             st->sbk, st->sbn, use_c, attrs_.alpha);
        if (!s.ok() && !absl::IsUnimplemented(s)) return s;
        st->use_primitive = s.ok();
        st->primitive_bias = use_c;
      }
      st->key = key;
      st->valid = true;
    }
    const int64_t mn[2] = {st->m, st->n};
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, mn, "Gemm"));
    Tensor& y = *out[0];
    if (y.numel() == 0) return absl::OkStatus();
    if (st->use_primitive) {
      if (st->primitive_bias) {
        return ExecuteBound(ctx, st->prim,
                            {a.raw_data(), b.raw_data(), c->raw_data(), y.raw_data()});
      }
      return ExecuteBound(ctx, st->prim, {a.raw_data(), b.raw_data(), y.raw_data()});
    }
    float* py = y.data<float>();
    if (use_c) {
      const float* pc = c->data<float>();
      for (int64_t i = 0; i < st->m; ++i) {
        const float* crow = pc + i * st->sc0;
        float* yrow = py + i * st->n;
        if (st->sc1 == 1) {
          std::memmove(yrow, crow, static_cast<size_t>(st->n) * sizeof(float));
        } else {
          for (int64_t j = 0; j < st->n; ++j) yrow[j] = crow[j * st->sc1];
        }
      }
    }
    if (st->k == 0) {
      for (int64_t i = 0; i < st->m * st->n; ++i) py[i] = use_c ? attrs_.beta * py[i] : 0.0f;
      return absl::OkStatus();
    }
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    if (st->a.pack || st->b.pack) {
      const size_t fa = st->a.pack ? static_cast<size_t>(st->m * st->k) : 0;
      const size_t fb = st->b.pack ? static_cast<size_t>(st->k * st->n) : 0;
      DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace((fa + fb) * sizeof(float)));
      float* buf = static_cast<float*>(ws);
      if (st->a.pack) {
        PackMatrix(pa, st->m, st->k, st->sam, st->sak, buf);
        pa = buf;
      }
      if (st->b.pack) {
        PackMatrix(pb, st->k, st->n, st->sbk, st->sbn, buf + fa);
        pb = buf + fa;
      }
    }
    if (st->split) {
      return SplitSgemm(ctx, st->a, st->b, st->m, st->n, st->k, attrs_.alpha, pa, pb,
                        use_c ? attrs_.beta : 0.0f, py, st->n);
    }
    return Sgemm(ctx, st->a, st->b, st->m, st->n, st->k, attrs_.alpha, pa, pb,
                 use_c ? attrs_.beta : 0.0f, py, st->n);
  }

 private:
  bool Plan(const Tensor& a, const Tensor& b, const Tensor* c, GemmState* st) const {
    const bool ta = attrs_.trans_a, tb = attrs_.trans_b;
    st->m = a.dim(ta ? 1 : 0);
    st->k = a.dim(ta ? 0 : 1);
    st->sam = a.stride(ta ? 1 : 0);
    st->sak = a.stride(ta ? 0 : 1);
    const int64_t kb = b.dim(tb ? 1 : 0);
    st->n = b.dim(tb ? 0 : 1);
    st->sbk = b.stride(tb ? 1 : 0);
    st->sbn = b.stride(tb ? 0 : 1);
    if (st->k != kb) return false;
    if (c != nullptr) {
      const int64_t mn[2] = {st->m, st->n};
      absl::StatusOr<Dims> bc = reference::BroadcastShapes(c->dims(), mn);
      if (!bc.ok() || absl::MakeConstSpan(*bc) != absl::MakeConstSpan(mn)) return false;
      const Dims s = reference::BroadcastStrides(*c, mn);
      st->sc0 = s[0];
      st->sc1 = s[1];
    }
    st->a = PlanOperand(st->m, st->k, st->sam, st->sak);
    st->b = PlanOperand(st->k, st->n, st->sbk, st->sbn);
    return true;
  }

  GemmAttrs attrs_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateMatMul(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 2, 2, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1}));
  return std::make_unique<MatMulKernel>(KernelName(spec, "sgemm+brgemm"));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreatePermutedMatMul(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 2, 2, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1}));
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> a_perm, spec.GetInts("a_perm"));
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> b_perm, spec.GetInts("b_perm"));
  DYNVM_ASSIGN_OR_RETURN(const int64_t packed_n, spec.GetInt("b_packed_n", -1));
  if (packed_n >= 0) {
    if (!b_perm.empty()) {
      return absl::InvalidArgumentError("MatMul: b_perm with a packed B (b_packed_n)");
    }
    return std::make_unique<MatMulKernel>(KernelName(spec, "packed"), std::move(a_perm),
                                          std::move(b_perm), packed_n);
  }
  return std::make_unique<MatMulKernel>(KernelName(spec, "sgemm+brgemm"), std::move(a_perm),
                                        std::move(b_perm));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateGemm(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 2, 3, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1}));
  if (spec.inputs.size() > 2 && spec.inputs[2].dtype != kAnyDType) {
    DYNVM_RETURN_IF_ERROR(RequireF32(spec, {2}));
  }
  // The fallback's factory (the reference kernel, which the registry makes next) validates the
  // attributes; its errors are the spec's errors.
  GemmAttrs g;
  absl::StatusOr<float> alpha = spec.GetFloat("alpha", 1.0f);
  absl::StatusOr<float> beta = spec.GetFloat("beta", 1.0f);
  absl::StatusOr<int64_t> ta = spec.GetInt("transA", 0);
  absl::StatusOr<int64_t> tb = spec.GetInt("transB", 0);
  if (!alpha.ok() || !beta.ok() || !ta.ok() || !tb.ok()) {
    return absl::InvalidArgumentError("Gemm: bad attributes");
  }
  g.alpha = *alpha;
  g.beta = *beta;
  g.trans_a = *ta == 1;
  g.trans_b = *tb == 1;
  return std::make_unique<GemmKernel>(KernelName(spec, "sgemm+brgemm"), g);
}

// ---- Einsum of two operands that is a batched matrix product ----
//
// "B G H I D, B G H J D -> B G H I J" (MaxViT's attention), "bij,bjk->bik", "ik,jk->ij": every
// letter of an operand is either in the output or in both operands (summed), none repeated
// within a term, no ellipsis. Letters in both operands and the output are the batch; in one
// operand and the output, its free rows or columns; in both operands only, the contraction.
// Each operand is copied into the workspace as [batch, rows, K] and [batch, K, columns], one
// dnnl_sgemm per batch index makes [batch, rows, columns], and that is copied into the output
// in its letter order. The reference kernel enumerates every letter assignment (447 ms a call
// in MaxViT-T at 224x224, 98% of the model). Other equations are the reference kernel's (at
// create); sizes that disagree, empty tensors and other dtypes fall back to it at run time.

// dst[...] = src[...] over `dims`, both through their own strides (in elements).
void CopyStrided(const std::vector<int64_t>& dims, const float* src, const std::vector<int64_t>& ss,
                 float* dst, const std::vector<int64_t>& ds) {
  const size_t rank = dims.size();
  if (rank == 0) {
    *dst = *src;
    return;
  }
  std::vector<int64_t> idx(rank, 0);
  const int64_t inner = dims[rank - 1], si = ss[rank - 1], di = ds[rank - 1];
  for (;;) {
    int64_t so = 0, dof = 0;
    for (size_t d = 0; d + 1 < rank; ++d) {
      so += idx[d] * ss[d];
      dof += idx[d] * ds[d];
    }
    for (int64_t j = 0; j < inner; ++j) dst[dof + j * di] = src[so + j * si];
    size_t d = rank - 1;
    while (d > 0) {
      --d;
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (rank == 1) return;
  }
}

struct EinsumPlan {
  std::string a, b, y;  // the terms, spaces removed
  // Letters by role, in the output's order (batch, rows, columns) or A's (the contraction).
  std::string batch, rows, cols, sum;
};

// The plan of a two-operand product equation; nullopt for any other form.
std::optional<EinsumPlan> PlanEinsum(const std::string& equation) {
  std::string eq;
  for (char ch : equation) {
    if (ch != ' ') eq.push_back(ch);
  }
  const size_t arrow = eq.find("->"), comma = eq.find(',');
  if (arrow == std::string::npos || comma == std::string::npos || comma > arrow ||
      eq.find(',', comma + 1) != std::string::npos || eq.find('.') != std::string::npos) {
    return std::nullopt;
  }
  EinsumPlan p{eq.substr(0, comma), eq.substr(comma + 1, arrow - comma - 1), eq.substr(arrow + 2)};
  for (const std::string* t : {&p.a, &p.b, &p.y}) {
    for (size_t i = 0; i < t->size(); ++i) {
      if (!std::isalpha(static_cast<unsigned char>((*t)[i])) ||
          t->find((*t)[i], i + 1) != std::string::npos) {
        return std::nullopt;
      }
    }
  }
  auto in = [](const std::string& t, char ch) { return t.find(ch) != std::string::npos; };
  for (char ch : p.y) {
    if (in(p.a, ch) && in(p.b, ch))
      p.batch.push_back(ch);
    else if (in(p.a, ch))
      p.rows.push_back(ch);
    else if (in(p.b, ch))
      p.cols.push_back(ch);
    else
      return std::nullopt;
  }
  for (char ch : p.a) {
    if (!in(p.y, ch) && !in(p.b, ch)) return std::nullopt;  // summed over one operand
    if (!in(p.y, ch)) p.sum.push_back(ch);
  }
  for (char ch : p.b) {
    if (!in(p.y, ch) && !in(p.a, ch)) return std::nullopt;
  }
  return p;
}

class EinsumKernel final : public DnnlKernel {
 public:
  EinsumKernel(std::string name, EinsumPlan plan)
      : DnnlKernel(std::move(name)), p_(std::move(plan)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, "Einsum"));
    const Tensor &a = *in[0], &b = *in[1];
    if (a.dtype() != DType::kF32 || b.dtype() != DType::kF32 ||
        a.rank() != static_cast<int>(p_.a.size()) || b.rank() != static_cast<int>(p_.b.size()) ||
        a.numel() == 0 || b.numel() == 0) {
      return RunFallback(ctx, in, out);
    }
    absl::flat_hash_map<char, int64_t> size;
    for (size_t i = 0; i < p_.a.size(); ++i) size[p_.a[i]] = a.dim(static_cast<int>(i));
    for (size_t i = 0; i < p_.b.size(); ++i) {
      auto [it, inserted] = size.emplace(p_.b[i], b.dim(static_cast<int>(i)));
      if (!inserted && it->second != b.dim(static_cast<int>(i))) return RunFallback(ctx, in, out);
    }
    auto product = [&](const std::string& letters) {
      int64_t n = 1;
      for (char ch : letters) n *= size[ch];
      return n;
    };
    const int64_t nb = product(p_.batch), m = product(p_.rows), n = product(p_.cols),
                  k = product(p_.sum);
    std::vector<int64_t> y_dims;
    for (char ch : p_.y) y_dims.push_back(size[ch]);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, y_dims, "Einsum"));
    DYNVM_ASSIGN_OR_RETURN(void* ws,
                           ctx.Workspace(sizeof(float) * (nb * m * k + nb * k * n + nb * m * n)));
    float* a2 = static_cast<float*>(ws);
    float* b2 = a2 + nb * m * k;
    float* y2 = b2 + nb * k * n;
    // An operand's (or the output's) view in `order`: dims and strides of its letters.
    auto view = [&](const std::string& term, const Tensor& t, const std::string& order,
                    std::vector<int64_t>* dims, std::vector<int64_t>* strides) {
      for (char ch : order) {
        const size_t pos = term.find(ch);
        dims->push_back(size[ch]);
        strides->push_back(t.strides()[pos]);
      }
    };
    auto dense = [](const std::vector<int64_t>& dims) {
      std::vector<int64_t> st(dims.size());
      int64_t s = 1;
      for (size_t i = dims.size(); i-- > 0;) {
        st[i] = s;
        s *= dims[i];
      }
      return st;
    };
    std::vector<int64_t> dims, strides;
    view(p_.a, a, p_.batch + p_.rows + p_.sum, &dims, &strides);
    CopyStrided(dims, a.data<float>(), strides, a2, dense(dims));
    dims.clear();
    strides.clear();
    view(p_.b, b, p_.batch + p_.sum + p_.cols, &dims, &strides);
    CopyStrided(dims, b.data<float>(), strides, b2, dense(dims));
    SetThreads(ThreadsFor(ctx.num_threads(), nb * m * n * k));
    for (int64_t i = 0; i < nb; ++i) {
      DYNVM_RETURN_IF_ERROR(FromDnnl(dnnl_sgemm('N', 'N', m, n, k, 1.0f, a2 + i * m * k, k,
                                                b2 + i * k * n, n, 0.0f, y2 + i * m * n, n),
                                     "dnnl_sgemm"));
    }
    dims.clear();
    strides.clear();
    view(p_.y, *out[0], p_.batch + p_.rows + p_.cols, &dims, &strides);
    CopyStrided(dims, y2, dense(dims), out[0]->data<float>(), strides);
    return absl::OkStatus();
  }

 private:
  EinsumPlan p_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateEinsum(const KernelSpec& spec) {
  // One operand or three: the reference kernel's (Unimplemented lets the registry take it).
  if (spec.inputs.size() != 2 || spec.outputs.size() != 1) {
    return absl::UnimplementedError("Einsum: the oneDNN backend takes two operands");
  }
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1}));
  DYNVM_ASSIGN_OR_RETURN(std::string equation, spec.GetString("equation", ""));
  std::optional<EinsumPlan> plan = PlanEinsum(equation);
  if (!plan) {
    return absl::UnimplementedError(
        absl::StrCat("Einsum: '", equation, "' is not a two-operand product"));
  }
  return std::make_unique<EinsumKernel>(KernelName(spec, "sgemm"), *std::move(plan));
}
}  // namespace

void RegisterMatmulKernels(KernelRegistry& r) {
  r.Register(
      KernelRegistration{"", "MatMul", Device::kCPU, kBackend, kDnnlPriority, &CreateMatMul});
  r.Register(KernelRegistration{"", "Gemm", Device::kCPU, kBackend, kDnnlPriority, &CreateGemm});
  r.Register(
      KernelRegistration{"", "Einsum", Device::kCPU, kBackend, kDnnlPriority, &CreateEinsum});
  r.Register(KernelRegistration{"dynvm", "MatMul", Device::kCPU, kBackend, kDnnlPriority,
                                &CreatePermutedMatMul});
}

}  // namespace dynvm::onednn
