// dynvm::Attention on the oneDNN backend (kernels/reference/attention.h has the definition):
// per (batch, head) unit, S = scale * Q K^T by dnnl_sgemm (or the GEMV loop for one query: a
// decode step), the mask and the softmax by vector loops in place, and S V by dnnl_sgemm (GEMV)
// written straight into the output at its strides. Q, K and V are read where they are (their
// head-split transposes are strides). Queries run in blocks whose scores fit a fixed 64 KiB
// scratch (the site's workspace: nothing is allocated per decode step). Under a Where-mask with
// fill -inf (torch's masked_fill(mask, -inf): causal and key-padding masks) a block of queries
// reads only the keys from the first to the last any of its rows keeps: the others weigh
// exactly 0 after the softmax, so a causal mask's upper triangle is neither multiplied nor
// read (about half the work of a prefix). Needs unit stride
// along D and Dv (the layouts torch's exports give); anything else runs the reference loops.
// Units are independent: with more than one thread they are split across the VM's pool (a
// scratch block per range, dnnl_sgemm single-threaded inside), above kMinParallelGemv
// multiply-adds.
//
// Grouped-query decode (one query per unit, K and V shared along the last leading axis: stride 0
// in both, the group axis attention_kv_repeat gives [.., kv heads, G, 1, D] against K' and V'
// [.., kv heads, 1, ..], and the mask absent or shared along it too): the G query heads of a
// group run as one unit, cpu::GroupScores and cpu::GroupWeightedSum reading each key and value
// row once for up to four heads, where the per-head GEMVs read them G times (the first from
// memory, the rest from L2). The pool splits the groups; a group's heads run on one thread, and
// a head's sums do not depend on the heads beside it, so the bits do not depend on the thread
// count.
#include "kernels/reference/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <utility>

#include "common/status_macros.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/rows.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/parallel_loops.h"

namespace dynvm::onednn {
namespace {

using reference::AttentionAttrs;
using reference::AttentionGeometry;

// The scratch for scores: 64 KiB, [128, 128] at once.
constexpr int64_t kScratchFloats = 16384;

// Queries per block under a mask that drops keys: each block reads only the keys its rows keep,
// so smaller blocks skip more of a causal mask's triangle, and larger ones call dnnl_sgemm less.
constexpr int64_t kSkipBlock = 32;

// Masks row i of unit mask block `m`, keys [j0, j0 + w), into s[w].
void MaskRow(const AttentionAttrs& a, const AttentionGeometry& g, const void* m, int64_t i,
             int64_t j0, int64_t w, float* s) {
  const int r = g.rank;
  const int64_t js = g.ms[r - 1];
  if (js == 1) {
    const int64_t off = i * g.ms[r - 2] + j0;
    if (a.mask_mode == 1) {
      cpu::AddTo(w, static_cast<const float*>(m) + off, s);
    } else {
      cpu::FillWhere(w, static_cast<const bool*>(m) + off, a.mask_mode == 2, a.fill, s);
    }
    return;
  }
  for (int64_t j = 0; j < w; ++j) s[j] = reference::MaskScore(a, g, m, i, j0 + j, s[j]);
}

// Keys a Where-mask replaces by -inf weigh exactly 0 after the softmax, whatever their scores
// (NaN included), as long as the row keeps one key: such keys need not be read at all.
bool MaskSkipsKeys(const AttentionAttrs& a) {
  return (a.mask_mode == 2 || a.mask_mode == 3) && std::isinf(a.fill) && a.fill < 0;
}

// The keys [lo, hi) that queries [i0, i0 + rows) of a unit keep under a skipping mask: from
// the first key any of them keeps to the last. All keys when a row keeps none (its softmax is
// NaN, as in the unfused graph).
std::pair<int64_t, int64_t> KeptKeys(const AttentionAttrs& a, const AttentionGeometry& g,
                                     const bool* m, int64_t i0, int64_t rows) {
  const int r = g.rank;
  const int64_t is = g.ms[r - 2], js = g.ms[r - 1];
  const bool masked = a.mask_mode == 2;  // the value that drops a key
  int64_t lo = g.lk, hi = 0;
  if (is == 0) rows = 1;  // a mask broadcast along the queries: every row is the first
  for (int64_t i = i0; i < i0 + rows; ++i) {
    const bool* row = m + i * is;
    int64_t first = 0;
    while (first < g.lk && row[first * js] == masked) ++first;
    if (first == g.lk) return {0, g.lk};
    int64_t last = g.lk - 1;
    while (row[last * js] == masked) --last;
    lo = std::min(lo, first);
    hi = std::max(hi, last + 1);
  }
  return {lo, hi};
}

// The unit-stride layout the fast path takes, with its leading dimensions.
struct Layout {
  int64_t ldq, ldk, ldv, ldo;
};

bool FastLayout(const AttentionGeometry& g, Layout& l) {
  const int r = g.rank;
  if (g.d == 0 || g.lk == 0 || g.dv == 0 || g.lq == 0) return false;
  if ((g.d > 1 && (g.qs[r - 1] != 1 || g.ks[r - 2] != 1)) ||
      (g.dv > 1 && (g.vs[r - 1] != 1 || g.rs[r - 1] != 1))) {
    return false;
  }
  l.ldq = g.lq > 1 ? g.qs[r - 2] : g.d;
  l.ldk = g.lk > 1 ? g.ks[r - 1] : g.d;
  l.ldv = g.lk > 1 ? g.vs[r - 2] : g.dv;
  l.ldo = g.lq > 1 ? g.rs[r - 2] : g.dv;
  return l.ldq >= g.d && l.ldk >= g.d && l.ldv >= g.dv && l.ldo >= g.dv;
}

// Queries [i0, i0 + rows) of one unit over keys [j0, j0 + w): scores into s[rows, w], masked,
// softmax, times V'.
absl::Status RunRows(const AttentionAttrs& a, const AttentionGeometry& g, const Layout& l,
                     const float* q, const float* k, const float* v, const void* m, float* y,
                     int64_t i0, int64_t rows, int64_t j0, int64_t w, float* s) {
  q += i0 * l.ldq;
  y += i0 * l.ldo;
  k += j0 * l.ldk;
  v += j0 * l.ldv;
  if (rows == 1) {  // one query (a decode step): GEMV loops
    cpu::Gemv('T', w, g.d, a.scale, q, k, l.ldk, 0.0f, s);
  } else {
    DYNVM_RETURN_IF_ERROR(FromDnnl(
        dnnl_sgemm('N', 'T', rows, w, g.d, a.scale, q, l.ldq, k, l.ldk, 0.0f, s, w), "dnnl_sgemm"));
  }
  if (m != nullptr) {
    for (int64_t i = 0; i < rows; ++i) MaskRow(a, g, m, i0 + i, j0, w, s + i * w);
  }
  cpu::SoftmaxRows(rows, w, s, s);
  if (rows == 1) {
    cpu::Gemv('N', g.dv, w, 1.0f, s, v, l.ldv, 0.0f, y);
    return absl::OkStatus();
  }
  return FromDnnl(dnnl_sgemm('N', 'N', rows, g.dv, w, 1.0f, s, w, v, l.ldv, 0.0f, y, l.ldo),
                  "dnnl_sgemm");
}

// Unit u's query, key, value, output and mask (nullptr: none) pointers.
struct UnitData {
  const float *q, *k, *v;
  float* y;
  const void* m;
};
UnitData DataOf(const AttentionGeometry& g, int64_t u, size_t mask_elem) {
  return {g.q + reference::UnitOffset(g, g.qs, u), g.k + reference::UnitOffset(g, g.ks, u),
          g.v + reference::UnitOffset(g, g.vs, u), g.out + reference::UnitOffset(g, g.rs, u),
          g.mask == nullptr
              ? nullptr
              : static_cast<const char*>(g.mask) + reference::UnitOffset(g, g.ms, u) * mask_elem};
}

// Units [u0, u1), queries in blocks of `block` rows (s holds block x lk floats).
absl::Status RunUnits(const AttentionAttrs& a, const AttentionGeometry& g, const Layout& l,
                      int64_t u0, int64_t u1, int64_t block, float* s) {
  const size_t mask_elem = a.mask_mode == 1 ? sizeof(float) : sizeof(bool);
  for (int64_t u = u0; u < u1; ++u) {
    const UnitData d = DataOf(g, u, mask_elem);
    const float *q = d.q, *k = d.k, *v = d.v;
    float* y = d.y;
    const void* m = d.m;
    if (m == nullptr || !MaskSkipsKeys(a)) {
      for (int64_t i0 = 0; i0 < g.lq; i0 += block) {
        DYNVM_RETURN_IF_ERROR(
            RunRows(a, g, l, q, k, v, m, y, i0, std::min(block, g.lq - i0), 0, g.lk, s));
      }
      continue;
    }
    // Blocks of kSkipBlock queries, each over the keys it keeps (a causal mask: about half).
    const int64_t b = std::min(block, kSkipBlock);
    for (int64_t i0 = 0; i0 < g.lq; i0 += b) {
      const int64_t rows = std::min(b, g.lq - i0);
      const auto [lo, hi] = KeptKeys(a, g, static_cast<const bool*>(m), i0, rows);
      DYNVM_RETURN_IF_ERROR(RunRows(a, g, l, q, k, v, m, y, i0, rows, lo, hi - lo, s));
    }
  }
  return absl::OkStatus();
}

// The query heads that share K, V and the mask in a decode step (one query per unit): the
// extent of the last leading axis when K', V' and the mask all have stride 0 along it, else 1.
int64_t DecodeGroup(const AttentionGeometry& g) {
  const int r = g.rank;
  if (g.lq != 1 || r < 3) return 1;
  const int axis = r - 3;
  if (g.lead[axis] < 2 || g.ks[axis] != 0 || g.vs[axis] != 0 ||
      (g.mask != nullptr && g.ms[axis] != 0)) {
    return 1;
  }
  return g.lead[axis];
}

// Groups [g0, g1) of `group` heads, one query each (s holds `floats` floats).
void RunGroups(const AttentionAttrs& a, const AttentionGeometry& g, const Layout& l, int64_t group,
               int64_t g0, int64_t g1, int64_t floats, float* s) {
  const size_t mask_elem = a.mask_mode == 1 ? sizeof(float) : sizeof(bool);
  const int axis = g.rank - 3;
  const int64_t ldq = g.qs[axis], ldy = g.rs[axis];
  for (int64_t o = g0; o < g1; ++o) {
    const int64_t u = o * group;
    const UnitData d = DataOf(g, u, mask_elem);
    const float *q = d.q, *k = d.k, *v = d.v;
    float* y = d.y;
    const void* m = d.m;
    int64_t j0 = 0, w = g.lk;
    if (m != nullptr && MaskSkipsKeys(a)) {
      const auto [lo, hi] = KeptKeys(a, g, static_cast<const bool*>(m), 0, 1);
      j0 = lo;
      w = hi - lo;
    }
    // Heads per pass: all of the group unless their scores outgrow the scratch.
    const int64_t per_pass = std::clamp<int64_t>(floats / std::max<int64_t>(w, 1), 1, group);
    for (int64_t h0 = 0; h0 < group; h0 += per_pass) {
      const int64_t heads = std::min(per_pass, group - h0);
      cpu::GroupScores(heads, w, g.d, a.scale, q + h0 * ldq, ldq, k + j0 * l.ldk, l.ldk, s, w);
      if (m != nullptr) {
        for (int64_t h = 0; h < heads; ++h) MaskRow(a, g, m, 0, j0, w, s + h * w);
      }
      cpu::SoftmaxRows(heads, w, s, s);
      cpu::GroupWeightedSum(heads, w, g.dv, s, w, v + j0 * l.ldv, l.ldv, y + h0 * ldy, ldy);
    }
  }
}

// Units per range on the VM's pool: all of them (one thread) below kMinParallelGemv
// multiply-adds in all (a short decode step), else one unit (a (batch, head) pair) at a time.
int64_t UnitGrain(const KernelContext& ctx, const AttentionGeometry& g) {
  if (ctx.num_threads() == 1 || g.units < 2) return std::max<int64_t>(g.units, 1);
  const double macs = static_cast<double>(g.units) * static_cast<double>(g.lq) *
                      static_cast<double>(g.lk) * static_cast<double>(g.d + g.dv);
  return macs < static_cast<double>(kMinParallelGemv) ? g.units : 1;
}

class AttentionKernel final : public DnnlKernel {
 public:
  AttentionKernel(std::string name, AttentionAttrs a)
      : DnnlKernel(std::move(name)), a_(std::move(a)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_ASSIGN_OR_RETURN(AttentionGeometry g, reference::PrepareAttention(a_, ctx, in, out));
    Layout l;
    const bool fast = FastLayout(g, l);
    // The scores of a block of queries, from the site's workspace: a fixed size (one row when
    // a row is longer), so a decode whose prefix grows allocates nothing after its first step.
    // One scratch block per range of units on the VM's pool.
    const int64_t floats = std::max(kScratchFloats, g.lk);
    // Sized by the thread count (not this call's ranges): one size at every decode step.
    DYNVM_ASSIGN_OR_RETURN(void* s, ctx.Workspace(static_cast<size_t>(floats) *
                                                  std::max(ctx.num_threads(), 1) * sizeof(float)));
    const int64_t group = fast ? DecodeGroup(g) : 1;
    if (group > 1) return RunGrouped(ctx, g, l, group, floats, static_cast<float*>(s));
    const int64_t grain = UnitGrain(ctx, g);
    const int tasks = ctx.ParallelTasks(g.units, grain);
    if (tasks == 1) {
      // dnnl_sgemm on this thread alone, at one VM thread too (OpenMP's default team, every
      // core, stalled a GroupQueryAttention decode step for tens of ms whenever the other core
      // was busy: the same loops, kernels/dnnl/msft_attention.cc).
      SetThreads(1);
      if (!fast) {
        reference::AttentionUnitsReference(a_, g, 0, g.units, static_cast<float*>(s));
        return absl::OkStatus();
      }
      return RunUnits(a_, g, l, 0, g.units, floats / g.lk, static_cast<float*>(s));
    }
    // Ranges take their scratch blocks in the order they start; errors are collected and the
    // first returned after the join.
    std::atomic<int> next_block{0};
    std::mutex mu;
    absl::Status status;
    float* scratch = static_cast<float*>(s);
    ctx.ParallelFor(g.units, grain, [&](int64_t u0, int64_t u1) {
      float* block = scratch + floats * next_block.fetch_add(1, std::memory_order_relaxed);
      SetThreads(1);  // dnnl_sgemm on this thread: no OpenMP team beside the pool
      if (!fast) {
        reference::AttentionUnitsReference(a_, g, u0, u1, block);
        return;
      }
      absl::Status st = RunUnits(a_, g, l, u0, u1, floats / g.lk, block);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (status.ok()) status = std::move(st);
      }
    });
    return status;
  }

 private:
  // The grouped decode step: groups split over the pool like units (UnitGrain's threshold).
  absl::Status RunGrouped(KernelContext& ctx, const AttentionGeometry& g, const Layout& l,
                          int64_t group, int64_t floats, float* scratch) const {
    const int64_t groups = g.units / group;
    const int64_t grain = UnitGrain(ctx, g) >= g.units ? groups : 1;
    if (ctx.ParallelTasks(groups, grain) == 1) {
      RunGroups(a_, g, l, group, 0, groups, floats, scratch);
      return absl::OkStatus();
    }
    std::atomic<int> next_block{0};
    ctx.ParallelFor(groups, grain, [&](int64_t g0, int64_t g1) {
      float* block = scratch + floats * next_block.fetch_add(1, std::memory_order_relaxed);
      RunGroups(a_, g, l, group, g0, g1, floats, block);
    });
    return absl::OkStatus();
  }

  AttentionAttrs a_;
};

}  // namespace

void RegisterAttentionKernels(KernelRegistry& r) {
  r.Register(KernelRegistration{
      "dynvm", "Attention", Device::kCPU, kBackend, kDnnlPriority,
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_ASSIGN_OR_RETURN(AttentionAttrs a, reference::GetAttentionAttrs(spec));
        DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1, 2}));
        return std::make_unique<AttentionKernel>(KernelName(spec), std::move(a));
      }});
}

}  // namespace dynvm::onednn
