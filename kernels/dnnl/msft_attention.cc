// com.microsoft GroupQueryAttention on the oneDNN backend: ONNX Runtime's semantics (the
// reference kernel, kernels/reference/msft_attention.cc, is the definition and the oracle; the
// checks and per-batch lengths are its code, reference/msft_attention.h), f32 arithmetic on
// kernels/cpu's microkernels.
//
// One unit of work is a (batch, KV head) pair, run on the VM's pool: it writes its slice of the
// present key and value outputs (the past's first past_b rows, the new rows, rotated when
// do_rotary, zeros beyond), rotates its query heads when do_rotary (into a scratch copy), then
// for each query row attends over the keys it sees with every query head of its group at once:
// the scores of the group's heads [group, w] by one dnnl_sgemm (Gemv for one head) over the
// present keys it has just written (still in cache), softcap, attention_bias, the sink
// (smooth_softmax or head_sink: one more logit without a value row), SoftmaxRows, then the
// product with the values into the output. Excluded keys (causal, local window) are not read
// at all: each row's keys are one range [first, end). A decode step (one query, a long past) is
// bound by reading the past: each unit reads its past once, and its group's queries share it.
//
// Runs the reference kernel (the registry's fallback) for f16 and for inputs that are not
// contiguous.
#include "kernels/reference/msft_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "common/status_macros.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/rows.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/parallel_loops.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

using reference::GqaAttrs;
using reference::GqaGeometry;

bool Present(Inputs in, size_t i) { return i < in.size() && in[i] != nullptr; }
bool Wanted(Outputs out, size_t i) { return i < out.size() && out[i] != nullptr; }

// A KV cache [B, heads, T, hd] whose rows are contiguous (hd floats, rows hd apart) while its
// batch and head strides may skip room: a loop's cache grown in place within its capacity
// (docs/compiler.md, "growable"), whose present output is the past's storage extended.
template <typename T>
struct Cache {
  T* p = nullptr;
  int64_t sb = 0, sh = 0;  // batch and head strides, in floats
  T* at(int64_t b, int64_t h) const { return p + b * sb + h * sh; }
};
template <typename T>
Cache<T> Packed(T* p, int64_t heads, int64_t t, int64_t hd) {
  return {p, heads * t * hd, t * hd};
}
Cache<const float> CacheOf(const Tensor& t) { return {t.data<float>(), t.stride(0), t.stride(1)}; }
Cache<float> CacheOf(Tensor& t) { return {t.data<float>(), t.stride(0), t.stride(1)}; }

bool RowsContiguous(const Tensor& t) {
  return t.rank() == 4 && (t.dim(3) <= 1 || t.stride(3) == 1) &&
         (t.dim(2) <= 1 || t.stride(2) == t.dim(3));
}

// Inputs the fused kernels read: contiguous, except the past caches (inputs `past`), whose rows
// must be.
bool Usable(Inputs in, std::initializer_list<size_t> past) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == nullptr || in[i]->is_contiguous()) continue;
    if (std::find(past.begin(), past.end(), i) == past.end() || !RowsContiguous(*in[i])) {
      return false;
    }
  }
  return true;
}

// A present output planned as a strided cache view of these dims is written where it is;
// anything else as any output.
absl::Status PreparePresent(KernelContext& ctx, Tensor* out, const reference::Dims& dims,
                            const char* op) {
  if (out->defined() && !out->is_contiguous() && out->dtype() == DType::kF32 &&
      out->dims() == dims && RowsContiguous(*out)) {
    return absl::OkStatus();
  }
  return reference::PrepareOutput(ctx, out, DType::kF32, dims, op);
}

// Copies n rows of a past into its present, unless they are already there (the present
// extends the past's own storage in place).
void CopyPastRows(const float* past, float* present, int64_t n, size_t row) {
  if (n > 0 && past != present) std::memcpy(present, past, static_cast<size_t>(n) * row);
}

// Everything one call reads and writes, resolved once.
struct GqaCall {
  const GqaAttrs* a = nullptr;
  const GqaGeometry* g = nullptr;
  int64_t group = 1;         // query heads per KV head
  const float* q = nullptr;  // query rows [B S, q_stride] (heads at H apart)
  int64_t q_stride = 0;
  float* q_rot = nullptr;    // rotated queries [B S, N H] (do_rotary), else null
  const float* k = nullptr;  // new keys and values [B S, kv_stride]
  const float* v = nullptr;
  int64_t kv_stride = 0;
  Cache<const float> past_k;  // [B, N_kv, P, H], p null without a past
  Cache<const float> past_v;
  Cache<float> pk;  // present [B, N_kv, T, H] (possibly over the past's storage)
  Cache<float> pv;
  const float* cos = nullptr;  // rotary caches [positions, half]
  const float* sin = nullptr;
  int64_t half = 0;
  std::vector<int64_t> ids;     // position_ids [B S] or empty
  const float* bias = nullptr;  // attention_bias [Bb, Nb, S, >= T] or null
  int64_t bias_b = 0, bias_h = 0, bias_t = 0;
  const float* sink = nullptr;  // head_sink [N] or null
  float scale = 1.0f;
  float* out = nullptr;  // [B S, N H]
};

std::vector<int64_t> Ids(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    v[i] = t.dtype() == DType::kI32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
  }
  return v;
}

// Copies one head row of `h` values from x to y, rotated at position `pos` (do_rotary).
void RotateRow(const GqaCall& c, int64_t pos, const float* x, float* y) {
  const int64_t h = c.g->head;
  if (y != x) std::memcpy(y, x, static_cast<size_t>(h) * sizeof(float));
  cpu::Rotary(c.half, c.a->interleaved, c.cos + pos * c.half, c.sin + pos * c.half, y, y);
}

// The present rows of unit (b, kh): past[0, past_b) ++ the new rows (keys rotated), zeros
// beyond; and the rotated query heads of the group when do_rotary.
void FillUnit(const GqaCall& c, int64_t b, int64_t kh) {
  const GqaGeometry& g = *c.g;
  const int64_t h = g.head, t = g.present, pb = g.past_b[b];
  const size_t row = static_cast<size_t>(h) * sizeof(float);
  float* dk = c.pk.at(b, kh);
  float* dv = c.pv.at(b, kh);
  if (pb > 0) {
    CopyPastRows(c.past_k.at(b, kh), dk, pb, row);
    CopyPastRows(c.past_v.at(b, kh), dv, pb, row);
  }
  for (int64_t i = 0; i < g.seq; ++i) {
    const int64_t from = (b * g.seq + i) * c.kv_stride + kh * h;
    float* kr = dk + (pb + i) * h;
    if (c.a->rotary) {
      const int64_t pos = reference::GqaPosition(g, c.ids, b, i);
      RotateRow(c, pos, c.k + from, kr);
      for (int64_t r = 0; r < c.group; ++r) {
        const int64_t hq = kh * c.group + r;
        RotateRow(c, pos, c.q + (b * g.seq + i) * c.q_stride + hq * h,
                  c.q_rot + (b * g.seq + i) * c.a->heads * h + hq * h);
      }
    } else {
      std::memcpy(kr, c.k + from, row);
    }
    std::memcpy(dv + (pb + i) * h, c.v + from, row);
  }
  const int64_t used = pb + g.seq;
  std::memset(dk + used * h, 0, static_cast<size_t>(t - used) * row);
  std::memset(dv + used * h, 0, static_cast<size_t>(t - used) * row);
}

// Weighted sums of a few rows of probabilities over the same values: y_r (rows ldy apart) =
// p_r V for r < rows (p_r ld apart, w of them) and V [w, h]. In a decode step (`one_query`: one
// query row per batch item) up to kGemvValueRows rows (its group of heads) by one GEMV per row:
// dnnl_sgemm's GEMM path at M > 1 with these shapes mallocs on every call (under gdb:
// posix_memalign in dnnl_sgemm), which a decode step must not (tests/decode_alloc_test.cc); its
// scores' product (N^T) and every M = 1 product do not. A prompt keeps the GEMM: per row it was
// 25% slower there (1024 query rows, groups of 4 heads; the decode steps took the same time).
constexpr int64_t kGemvValueRows = 8;
absl::Status ValueRows(bool one_query, int64_t rows, int64_t h, int64_t w, const float* p,
                       int64_t ld, const float* v, float* y, int64_t ldy) {
  if (!one_query || rows > kGemvValueRows) {
    return FromDnnl(dnnl_sgemm('N', 'N', rows, h, w, 1.0f, p, ld, v, h, 0.0f, y, ldy),
                    "dnnl_sgemm");
  }
  for (int64_t r = 0; r < rows; ++r) {
    cpu::Gemv('N', h, w, 1.0f, p + r * ld, v, h, 0.0f, y + r * ldy);
  }
  return absl::OkStatus();
}

// Query row i of unit (b, kh), every head of its group: s holds group x (T + 1) floats.
absl::Status AttendRow(const GqaCall& c, int64_t b, int64_t kh, int64_t i, float* s) {
  const GqaAttrs& a = *c.a;
  const GqaGeometry& g = *c.g;
  const int64_t h = g.head, n = a.heads, group = c.group;
  int64_t first, end;
  reference::GqaKeyRange(a, g, b, i, &first, &end);
  const int64_t w = end - first;
  const bool sink = a.smooth || c.sink != nullptr;
  const int64_t ld = w + (sink ? 1 : 0);
  const float* q = c.q_rot != nullptr ? c.q_rot + (b * g.seq + i) * n * h + kh * group * h
                                      : c.q + (b * g.seq + i) * c.q_stride + kh * group * h;
  const float* k = c.pk.at(b, kh) + first * h;
  const float* v = c.pv.at(b, kh) + first * h;
  float* y = c.out + (b * g.seq + i) * n * h + kh * group * h;
  if (w == 0) {  // no key: 0/0 as the reference, or 0 beside a sink
    std::fill_n(y, group * h, sink ? 0.0f : std::numeric_limits<float>::quiet_NaN());
    return absl::OkStatus();
  }
  if (group == 1) {
    cpu::Gemv('T', w, h, c.scale, q, k, h, 0.0f, s);
  } else {
    DYNVM_RETURN_IF_ERROR(FromDnnl(
        dnnl_sgemm('N', 'T', group, w, h, c.scale, q, h, k, h, 0.0f, s, ld), "dnnl_sgemm"));
  }
  for (int64_t r = 0; r < group; ++r) {
    float* sr = s + r * ld;
    const int64_t hq = kh * group + r;
    if (a.softcap > 0.0f) cpu::Softcap(w, a.softcap, sr, sr);
    if (c.bias != nullptr) {
      const int64_t bb = c.bias_b == 1 ? 0 : b, bh = c.bias_h == 1 ? 0 : hq;
      cpu::AddTo(w, c.bias + ((bb * c.bias_h + bh) * g.seq + i) * c.bias_t + first, sr);
    }
    if (sink) sr[w] = c.sink != nullptr ? c.sink[hq] : 0.0f;
  }
  cpu::SoftmaxRows(group, ld, s, s);
  return ValueRows(g.seq == 1, group, h, w, s, ld, v, y, h);
}

absl::Status RunUnits(const GqaCall& c, int64_t u0, int64_t u1, float* s) {
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t b = u / c.a->kv_heads, kh = u % c.a->kv_heads;
    FillUnit(c, b, kh);
    for (int64_t i = 0; i < c.g->seq; ++i) DYNVM_RETURN_IF_ERROR(AttendRow(c, b, kh, i, s));
  }
  return absl::OkStatus();
}

// Units on the VM's pool: all on this thread below kMinParallelGemv multiply-adds, else one
// unit at a time, each range with its own block of `block_floats` scratch floats (the caller
// sized `scratch` for num_threads() of them). The first error is returned after the join.
absl::Status RunOnPool(KernelContext& ctx, int64_t units, double macs, float* scratch,
                       int64_t block_floats,
                       absl::FunctionRef<absl::Status(int64_t, int64_t, float*)> run) {
  const int64_t grain =
      ctx.num_threads() == 1 || units < 2 || macs < static_cast<double>(kMinParallelGemv)
          ? std::max<int64_t>(units, 1)
          : 1;
  if (ctx.ParallelTasks(units, grain) == 1) {
    // dnnl_sgemm on this thread alone, at one VM thread too: OpenMP's default team (every
    // core) stalled a decode step for tens of ms whenever the other core was busy.
    SetThreads(1);
    return run(0, units, scratch);
  }
  std::atomic<int> next_block{0};
  std::mutex mu;
  absl::Status status;
  ctx.ParallelFor(units, grain, [&](int64_t u0, int64_t u1) {
    float* s = scratch + block_floats * next_block.fetch_add(1, std::memory_order_relaxed);
    SetThreads(1);  // dnnl_sgemm on this thread: no OpenMP team beside the pool
    absl::Status st = run(u0, u1, s);
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      if (status.ok()) status = std::move(st);
    }
  });
  return status;
}

bool AllContiguous(Inputs in) {
  for (const Tensor* t : in) {
    if (t != nullptr && !t->is_contiguous()) return false;
  }
  return true;
}

class GroupQueryAttentionKernel final : public DnnlKernel {
 public:
  GroupQueryAttentionKernel(std::string name, GqaAttrs a) : DnnlKernel(std::move(name)), a_(a) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (!Usable(in, {3, 4}) || !Present(in, 0) || in[0]->dtype() != DType::kF32) {
      return RunFallback(ctx, in, out);
    }
    DYNVM_ASSIGN_OR_RETURN(GqaGeometry g, reference::CheckGroupQueryAttention(a_, in));
    constexpr char kOp[] = "GroupQueryAttention";
    const int64_t n = a_.heads, nkv = a_.kv_heads, h = g.head, t = g.present;
    const int64_t rows = g.batch * g.seq;
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], DType::kF32, {g.batch, g.seq, n * h}, kOp));
    const bool presents = Wanted(out, 1) && Wanted(out, 2);
    for (size_t o : {size_t{1}, size_t{2}}) {
      if (!Wanted(out, o)) continue;
      DYNVM_RETURN_IF_ERROR(PreparePresent(ctx, out[o], {g.batch, nkv, t, h}, kOp));
    }
    // One workspace: the scores of each range [group, T + 1], the rotated queries, and the
    // present keys and values when an output does not take them.
    const int64_t group = n / nkv, units = g.batch * nkv;
    const int64_t score_floats = group * (t + 1);
    const int64_t rot_floats = a_.rotary ? rows * n * h : 0;
    const int64_t present_floats = presents ? 0 : 2 * units * t * h;
    const int threads = std::max(ctx.num_threads(), 1);
    DYNVM_ASSIGN_OR_RETURN(
        void* ws,
        ctx.Workspace(static_cast<size_t>(score_floats * threads + rot_floats + present_floats) *
                      sizeof(float)));
    float* scratch = static_cast<float*>(ws);
    GqaCall c;
    c.a = &a_;
    c.g = &g;
    c.group = group;
    c.q = in[0]->data<float>();
    c.q_stride = in[0]->dim(2);
    c.q_rot = a_.rotary ? scratch + score_floats * threads : nullptr;
    c.k = g.packed ? c.q + n * h : in[1]->data<float>();
    c.v = g.packed ? c.q + (n + nkv) * h : in[2]->data<float>();
    c.kv_stride = g.packed ? c.q_stride : nkv * h;
    if (g.has_past) {
      c.past_k = CacheOf(*in[3]);
      c.past_v = CacheOf(*in[4]);
    }
    float* own = scratch + score_floats * threads + rot_floats;
    c.pk = presents ? CacheOf(*out[1]) : Packed(own, nkv, t, h);
    c.pv = presents ? CacheOf(*out[2]) : Packed(own + units * t * h, nkv, t, h);
    if (a_.rotary) {
      c.cos = in[7]->data<float>();
      c.sin = in[8]->data<float>();
      c.half = in[7]->dim(1);
      if (Present(in, 9)) c.ids = Ids(*in[9]);
      DYNVM_RETURN_IF_ERROR(CheckPositions(g, c, in[7]->dim(0)));
    }
    if (Present(in, 10)) {
      c.bias = in[10]->data<float>();
      c.bias_b = in[10]->dim(0);
      c.bias_h = in[10]->dim(1);
      c.bias_t = in[10]->dim(3);
    }
    if (Present(in, 11)) c.sink = in[11]->data<float>();
    c.scale = a_.scale != 0.0f ? a_.scale : 1.0f / std::sqrt(static_cast<float>(h));
    c.out = out[0]->data<float>();
    const double macs = static_cast<double>(g.batch) * n * g.seq * static_cast<double>(t) * 2.0 * h;
    return RunOnPool(ctx, units, macs, scratch, score_floats,
                     [&c](int64_t u0, int64_t u1, float* s) { return RunUnits(c, u0, u1, s); });
  }

 private:
  // Every rotary position inside the caches (the reference's error).
  static absl::Status CheckPositions(const GqaGeometry& g, const GqaCall& c, int64_t positions) {
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t s = 0; s < g.seq; ++s) {
        const int64_t pos = reference::GqaPosition(g, c.ids, b, s);
        if (pos < 0 || pos >= positions) {
          return absl::InvalidArgumentError(absl::StrCat("GroupQueryAttention: position ", pos,
                                                         " of batch ", b, " is outside cos_cache (",
                                                         positions, " positions)"));
        }
      }
    }
    return absl::OkStatus();
  }

  GqaAttrs a_;
};

// ---- ONNX Attention 23 ----

using reference::Dims;
using reference::OnnxAttnAttrs;
using reference::OnnxAttnGeometry;

// Everything one Attention 23 call reads and writes.
struct OnnxCall {
  const OnnxAttnAttrs* a = nullptr;
  const OnnxAttnGeometry* g = nullptr;
  int64_t group = 1;
  const float* q = nullptr;  // Q, K, V as given (3-D or 4-D), past [B, kvN, P, H | Hv] or null
  const float* k = nullptr;
  const float* v = nullptr;
  Cache<const float> past_k;
  Cache<const float> past_v;
  Cache<float> pk;  // present [B, kvN, T, H] and [B, kvN, T, Hv] (possibly over the past)
  Cache<float> pv;
  const Tensor* mask = nullptr;  // bool or f32, read at g->mask_strides
  bool causal = false;           // is_causal, off for one query after a past (ORT's alignment)
  float scale = 1.0f;
  float* out = nullptr;
};

// Present rows of unit (b, kh) for one of K (hd = H) or V (hd = Hv): past ++ the new rows.
void FillPresent(const OnnxAttnGeometry& g, int64_t b, int64_t kh, int64_t hd,
                 const Cache<const float>& past, const float* x, const Cache<float>& present) {
  const size_t row = static_cast<size_t>(hd) * sizeof(float);
  float* d = present.at(b, kh);
  if (g.past > 0) CopyPastRows(past.at(b, kh), d, g.past, row);
  for (int64_t j = 0; j < g.skv; ++j) {
    const int64_t from = g.rank == 3 ? (b * g.skv + j) * g.kv_heads * hd + kh * hd
                                     : ((b * g.kv_heads + kh) * g.skv + j) * hd;
    std::memcpy(d + (g.past + j) * hd, x + from, row);
  }
}

// Softcap, the mask and the causal limit on the scores row of (b, hq, i), ONNX Runtime's order:
// a bool mask's false and the causal limit add the lowest float, an f32 mask is added.
void AdjustRow(const OnnxCall& c, int64_t b, int64_t hq, int64_t i, float* s) {
  const OnnxAttnGeometry& g = *c.g;
  const int64_t t = g.total;
  if (c.a->softcap > 0.0f) cpu::Softcap(t, c.a->softcap, s, s);
  constexpr float kLowest = std::numeric_limits<float>::lowest();
  const int64_t limit = c.causal ? std::min(t, g.past + i + 1) : t;  // keys [limit, t) masked
  if (c.mask != nullptr) {
    const Dims& ms = g.mask_strides;
    const int64_t off = b * ms[0] + hq * ms[1] + i * ms[2], js = ms[3];
    if (c.mask->dtype() == DType::kF32) {
      const float* m = c.mask->data<float>() + off;
      if (js == 1) {
        cpu::AddTo(limit, m, s);
      } else {
        for (int64_t j = 0; j < limit; ++j) s[j] += m[j * js];
      }
    } else {
      const bool* m = c.mask->data<bool>() + off;
      for (int64_t j = 0; j < limit; ++j) s[j] += m[j * js] ? 0.0f : kLowest;
    }
  }
  for (int64_t j = limit; j < t; ++j) s[j] += kLowest;
}

// Unit (b, kh): its present rows, then every query row with the group's heads at once; s holds
// group x T floats.
absl::Status RunOnnxUnit(const OnnxCall& c, int64_t b, int64_t kh, float* s) {
  const OnnxAttnGeometry& g = *c.g;
  const int64_t h = g.head, hv = g.v_head, t = g.total, group = c.group, qn = g.q_heads;
  FillPresent(g, b, kh, h, c.past_k, c.k, c.pk);
  FillPresent(g, b, kh, hv, c.past_v, c.v, c.pv);
  const float* k = c.pk.at(b, kh);
  const float* v = c.pv.at(b, kh);
  // The group's heads at query row i: 3-D rows H apart, 4-D rows Sq H apart.
  const int64_t ldq = g.rank == 3 ? h : g.sq * h, ldo = g.rank == 3 ? hv : g.sq * hv;
  for (int64_t i = 0; i < g.sq; ++i) {
    const int64_t h0 = kh * group;
    const float* q =
        c.q + (g.rank == 3 ? (b * g.sq + i) * qn * h + h0 * h : ((b * qn + h0) * g.sq + i) * h);
    float* y = c.out +
               (g.rank == 3 ? (b * g.sq + i) * qn * hv + h0 * hv : ((b * qn + h0) * g.sq + i) * hv);
    if (group == 1) {
      cpu::Gemv('T', t, h, c.scale, q, k, h, 0.0f, s);
    } else {
      DYNVM_RETURN_IF_ERROR(FromDnnl(
          dnnl_sgemm('N', 'T', group, t, h, c.scale, q, ldq, k, h, 0.0f, s, t), "dnnl_sgemm"));
    }
    for (int64_t r = 0; r < group; ++r) AdjustRow(c, b, h0 + r, i, s + r * t);
    cpu::SoftmaxRows(group, t, s, s);
    DYNVM_RETURN_IF_ERROR(ValueRows(g.sq == 1, group, hv, t, s, t, v, y, ldo));
  }
  return absl::OkStatus();
}

class OnnxAttentionKernel final : public DnnlKernel {
 public:
  OnnxAttentionKernel(std::string name, OnnxAttnAttrs a) : DnnlKernel(std::move(name)), a_(a) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    // The qk_matmul_output output and f16 run the reference kernel.
    if (!Usable(in, {4, 5}) || !Present(in, 0) || in[0]->dtype() != DType::kF32 || Wanted(out, 3)) {
      return RunFallback(ctx, in, out);
    }
    constexpr char kOp[] = "Attention";
    DYNVM_ASSIGN_OR_RETURN(OnnxAttnGeometry g, reference::CheckOnnxAttention(a_, in));
    const int64_t b = g.batch, qn = g.q_heads, kvn = g.kv_heads, t = g.total;
    const Dims od = g.rank == 3 ? Dims{b, g.sq, qn * g.v_head} : Dims{b, qn, g.sq, g.v_head};
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, od, kOp));
    const bool presents = Wanted(out, 1) && Wanted(out, 2);
    for (size_t o : {size_t{1}, size_t{2}}) {
      if (!Wanted(out, o)) continue;
      DYNVM_RETURN_IF_ERROR(
          PreparePresent(ctx, out[o], {b, kvn, t, o == 1 ? g.head : g.v_head}, kOp));
    }
    const int64_t group = qn / kvn, units = b * kvn, score_floats = std::max<int64_t>(group * t, 1);
    const int64_t present_floats = presents ? 0 : units * t * (g.head + g.v_head);
    const int threads = std::max(ctx.num_threads(), 1);
    DYNVM_ASSIGN_OR_RETURN(
        void* ws, ctx.Workspace(static_cast<size_t>(score_floats * threads + present_floats) *
                                sizeof(float)));
    float* scratch = static_cast<float*>(ws);
    OnnxCall c;
    c.a = &a_;
    c.g = &g;
    c.group = group;
    c.q = in[0]->data<float>();
    c.k = in[1]->data<float>();
    c.v = in[2]->data<float>();
    if (g.past > 0) {
      c.past_k = CacheOf(*in[4]);
      c.past_v = CacheOf(*in[5]);
    }
    float* own = scratch + score_floats * threads;
    c.pk = presents ? CacheOf(*out[1]) : Packed(own, kvn, t, g.head);
    c.pv = presents ? CacheOf(*out[2]) : Packed(own + units * t * g.head, kvn, t, g.v_head);
    c.mask = Present(in, 3) ? in[3] : nullptr;
    c.causal = a_.causal && !(g.sq == 1 && g.past > 0);
    c.scale = a_.scale != 0.0f ? a_.scale : 1.0f / std::sqrt(static_cast<float>(g.head));
    c.out = out[0]->data<float>();
    if (t == 0 || g.sq == 0) return absl::OkStatus();
    const double macs = static_cast<double>(b) * qn * g.sq * static_cast<double>(t) *
                        static_cast<double>(g.head + g.v_head);
    return RunOnPool(ctx, units, macs, scratch, score_floats,
                     [&c, kvn](int64_t u0, int64_t u1, float* s) -> absl::Status {
                       for (int64_t u = u0; u < u1; ++u) {
                         DYNVM_RETURN_IF_ERROR(RunOnnxUnit(c, u / kvn, u % kvn, s));
                       }
                       return absl::OkStatus();
                     });
  }

 private:
  OnnxAttnAttrs a_;
};

// ---- MultiHeadAttention (com.microsoft) ----

using reference::MhaAttrs;
using reference::MhaGeometry;

// Queries per block: the scores of a block [rows, T] and its biased queries [rows, H].
constexpr int64_t kMhaBlock = 64;

// Query rows per block for S queries: a decode step's one query needs one row of scratch, not
// kMhaBlock (whose workspace would grow with the cache every few tokens).
int64_t MhaBlock(int64_t seq) { return std::clamp<int64_t>(seq, 1, kMhaBlock); }

struct MhaCall {
  const MhaAttrs* a = nullptr;
  const MhaGeometry* g = nullptr;
  const float* q = nullptr;  // token rows [B S] of N H at q_ld
  const float* k = nullptr;  // token rows [B L] of N H (N Hv) at kv_ld, or [B, N, L, H]
  const float* v = nullptr;
  int64_t q_ld = 0, k_ld = 0, v_ld = 0;
  const float* bias = nullptr;  // [N H + N H + N Hv] or null
  Cache<const float> past_k;
  Cache<const float> past_v;
  Cache<float> pk;  // present [B, N, T, H], [B, N, T, Hv] (possibly over the past's storage)
  Cache<float> pv;
  const float* mask = nullptr;  // [B, S, T] of 0 / mask_filter_value, or null
  const float* attn_bias = nullptr;
  int64_t ab_b = 0, ab_h = 0;
  float scale = 1.0f;
  float* out = nullptr;  // [B, S, N Hv]
};

// Present rows of unit (b, h) for K (hd = H, bias at bias_off) or V: past ++ new rows + bias.
void FillMhaPresent(const MhaCall& c, int64_t b, int64_t h, int64_t hd,
                    const Cache<const float>& past, const float* x, int64_t ld, int64_t bias_off,
                    const Cache<float>& present) {
  const MhaGeometry& g = *c.g;
  const int64_t n = c.a->heads;
  float* d = present.at(b, h);
  if (g.past > 0) CopyPastRows(past.at(b, h), d, g.past, static_cast<size_t>(hd) * sizeof(float));
  const float* bias = c.bias != nullptr ? c.bias + bias_off + h * hd : nullptr;
  for (int64_t j = 0; j < g.kv_seq; ++j) {
    const float* src =
        x + (g.bnsh_kv ? ((b * n + h) * g.kv_seq + j) * hd : (b * g.kv_seq + j) * ld + h * hd);
    float* dst = d + (g.past + j) * hd;
    if (bias != nullptr) {
      cpu::BinaryRows(cpu::BinaryOp::kAdd, 1, hd, src, bias, hd, dst);
    } else {
      std::memcpy(dst, src, static_cast<size_t>(hd) * sizeof(float));
    }
  }
}

// Unit (b, h): its present rows, then its queries in blocks; s holds MhaBlock(S) x (T + H).
absl::Status RunMhaUnit(const MhaCall& c, int64_t b, int64_t h, float* s) {
  const MhaGeometry& g = *c.g;
  const int64_t n = c.a->heads, hd = g.head, hv = g.v_head, t = g.past + g.kv_seq, sq = g.seq;
  FillMhaPresent(c, b, h, hd, c.past_k, c.k, c.k_ld, n * hd, c.pk);
  FillMhaPresent(c, b, h, hv, c.past_v, c.v, c.v_ld, 2 * n * hd, c.pv);
  const float* k = c.pk.at(b, h);
  const float* v = c.pv.at(b, h);
  const int64_t block = MhaBlock(sq);
  float* qb = s + block * t;
  for (int64_t i0 = 0; i0 < sq; i0 += block) {
    const int64_t rows = std::min(block, sq - i0);
    const float* q = c.q + (b * sq + i0) * c.q_ld + h * hd;
    int64_t ldq = c.q_ld;
    if (c.bias != nullptr) {  // Q + its bias, rows H apart
      for (int64_t r = 0; r < rows; ++r) {
        cpu::BinaryRows(cpu::BinaryOp::kAdd, 1, hd, q + r * c.q_ld, c.bias + h * hd, hd,
                        qb + r * hd);
      }
      q = qb;
      ldq = hd;
    }
    DYNVM_RETURN_IF_ERROR(FromDnnl(
        dnnl_sgemm('N', 'T', rows, t, hd, c.scale, q, ldq, k, hd, 0.0f, s, t), "dnnl_sgemm"));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      if (c.attn_bias != nullptr) {
        const int64_t bb = c.ab_b == 1 ? 0 : b, bh = c.ab_h == 1 ? 0 : h;
        cpu::AddTo(t, c.attn_bias + ((bb * c.ab_h + bh) * sq + i) * t, s + r * t);
      }
      if (c.mask != nullptr) cpu::AddTo(t, c.mask + (b * sq + i) * t, s + r * t);
    }
    cpu::SoftmaxRows(rows, t, s, s);
    float* y = c.out + (b * sq + i0) * n * hv + h * hv;
    DYNVM_RETURN_IF_ERROR(FromDnnl(
        dnnl_sgemm('N', 'N', rows, hv, t, 1.0f, s, t, v, hv, 0.0f, y, n * hv), "dnnl_sgemm"));
  }
  return absl::OkStatus();
}

// Every (batch, head) unit of a prepared call on the VM's pool (blocks of block_floats).
absl::Status RunMha(KernelContext& ctx, const MhaCall& c, float* scratch, int64_t block_floats) {
  const MhaGeometry& g = *c.g;
  const int64_t n = c.a->heads, t = g.past + g.kv_seq, units = g.batch * n;
  if (t == 0 || g.seq == 0) return absl::OkStatus();
  const double macs = static_cast<double>(units) * g.seq * static_cast<double>(t) *
                      static_cast<double>(g.head + g.v_head);
  return RunOnPool(ctx, units, macs, scratch, block_floats,
                   [&c, n](int64_t u0, int64_t u1, float* s) -> absl::Status {
                     for (int64_t u = u0; u < u1; ++u) {
                       DYNVM_RETURN_IF_ERROR(RunMhaUnit(c, u / n, u % n, s));
                     }
                     return absl::OkStatus();
                   });
}

class MultiHeadAttentionKernel final : public DnnlKernel {
 public:
  MultiHeadAttentionKernel(std::string name, MhaAttrs a) : DnnlKernel(std::move(name)), a_(a) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (!Usable(in, {6, 7}) || !Present(in, 0) || in[0]->dtype() != DType::kF32) {
      return RunFallback(ctx, in, out);
    }
    constexpr char kOp[] = "MultiHeadAttention";
    const bool presents = Wanted(out, 1) && Wanted(out, 2);
    DYNVM_ASSIGN_OR_RETURN(MhaGeometry g, reference::CheckMultiHeadAttention(
                                              a_, in, Wanted(out, 1) || Wanted(out, 2)));
    const int64_t n = a_.heads, t = g.past + g.kv_seq, units = g.batch * n;
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], DType::kF32, {g.batch, g.seq, n * g.v_head}, kOp));
    for (size_t o : {size_t{1}, size_t{2}}) {
      if (!Wanted(out, o)) continue;
      DYNVM_RETURN_IF_ERROR(
          PreparePresent(ctx, out[o], {g.batch, n, t, o == 1 ? g.head : g.v_head}, kOp));
    }
    const Tensor* mask_in = Present(in, 4) ? in[4] : nullptr;
    const int64_t mask_floats = reference::PaddingMaskFloats(a_, g, mask_in);
    const int64_t block_floats = MhaBlock(g.seq) * (t + g.head);
    const int64_t present_floats = presents ? 0 : units * t * (g.head + g.v_head);
    const int threads = std::max(ctx.num_threads(), 1);
    DYNVM_ASSIGN_OR_RETURN(
        void* ws,
        ctx.Workspace(static_cast<size_t>(block_floats * threads + present_floats + mask_floats) *
                      sizeof(float)));
    float* scratch = static_cast<float*>(ws);
    // The mask after the blocks and the own presents, in the site's workspace (no allocation).
    float* mask = scratch + block_floats * threads + present_floats;
    if (mask_floats > 0) reference::WritePaddingMask(a_, g, mask_in, mask);
    MhaCall c;
    c.a = &a_;
    c.g = &g;
    c.q = in[0]->data<float>();
    c.k = in[1]->data<float>();
    c.v = in[2]->data<float>();
    c.q_ld = c.k_ld = n * g.head;
    c.v_ld = n * g.v_head;
    c.bias = Present(in, 3) ? in[3]->data<float>() : nullptr;
    if (g.past > 0) {
      c.past_k = CacheOf(*in[6]);
      c.past_v = CacheOf(*in[7]);
    }
    float* own = scratch + block_floats * threads;
    c.pk = presents ? CacheOf(*out[1]) : Packed(own, n, t, g.head);
    c.pv = presents ? CacheOf(*out[2]) : Packed(own + units * t * g.head, n, t, g.v_head);
    c.mask = mask_floats > 0 ? mask : nullptr;
    if (Present(in, 5)) {
      c.attn_bias = in[5]->data<float>();
      c.ab_b = in[5]->dim(0);
      c.ab_h = in[5]->dim(1);
    }
    c.scale = a_.scale != 0.0f ? a_.scale : 1.0f / std::sqrt(static_cast<float>(g.head));
    c.out = out[0]->data<float>();
    return RunMha(ctx, c, scratch, block_floats);
  }

 private:
  MhaAttrs a_;
};

// com.microsoft Attention: qkv [B S, D + D + Dv] = input x weights + bias by one dnnl_sgemm
// (the VM's threads), then the MultiHeadAttention units over it (rows of qkv at its width),
// past [2, B, N, P, H] and present [2, B, N, P + S, H] holding keys then values.
class MsftAttentionKernel final : public DnnlKernel {
 public:
  MsftAttentionKernel(std::string name, MhaAttrs a, std::vector<int64_t> sizes)
      : DnnlKernel(std::move(name)), a_(a), sizes_(std::move(sizes)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (!AllContiguous(in) || !Present(in, 0) || in[0]->dtype() != DType::kF32) {
      return RunFallback(ctx, in, out);
    }
    constexpr char kOp[] = "Attention";
    MhaGeometry g;
    int64_t din = 0, dq = 0, dv = 0;
    DYNVM_RETURN_IF_ERROR(
        reference::CheckMsftAttention(a_, sizes_, in, Wanted(out, 1), g, din, dq, dv));
    const int64_t n = a_.heads, rows = g.batch * g.seq, cols = 2 * dq + dv;
    const int64_t t = g.past + g.kv_seq, units = g.batch * n;
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], DType::kF32, {g.batch, g.seq, dv}, kOp));
    if (Wanted(out, 1)) {
      DYNVM_RETURN_IF_ERROR(
          reference::PrepareOutput(ctx, out[1], DType::kF32, {2, g.batch, n, t, g.head}, kOp));
    }
    const Tensor* mask_in = Present(in, 3) ? in[3] : nullptr;
    const int64_t mask_floats = reference::PaddingMaskFloats(a_, g, mask_in);
    const int64_t block_floats = MhaBlock(g.seq) * (t + g.head);
    const int64_t present_floats = Wanted(out, 1) ? 0 : units * t * (g.head + g.v_head);
    const int threads = std::max(ctx.num_threads(), 1);
    DYNVM_ASSIGN_OR_RETURN(
        void* ws, ctx.Workspace(static_cast<size_t>(block_floats * threads + present_floats +
                                                    rows * cols + mask_floats) *
                                sizeof(float)));
    float* scratch = static_cast<float*>(ws);
    float* qkv = scratch + block_floats * threads + present_floats;
    float* mask = qkv + rows * cols;  // in the site's workspace: no allocation per call
    if (mask_floats > 0) reference::WritePaddingMask(a_, g, mask_in, mask);
    // qkv = bias (each row) + input x weights.
    const float* bias = in[2]->data<float>();
    for (int64_t r = 0; r < rows; ++r) std::memcpy(qkv + r * cols, bias, cols * sizeof(float));
    if (rows > 0 && din > 0) {
      SetThreads(ThreadsFor(ctx.num_threads(), rows * cols * din));
      if (ctx.num_threads() > 1) ctx.ParkWorkers();
      DYNVM_RETURN_IF_ERROR(
          FromDnnl(dnnl_sgemm('N', 'N', rows, cols, din, 1.0f, in[0]->data<float>(), din,
                              in[1]->data<float>(), cols, 1.0f, qkv, cols),
                   "dnnl_sgemm"));
    }
    MhaCall c;
    c.a = &a_;
    c.g = &g;
    c.q = qkv;
    c.k = qkv + dq;
    c.v = qkv + 2 * dq;
    c.q_ld = c.k_ld = c.v_ld = cols;
    if (g.past > 0) {
      const float* past = in[4]->data<float>();
      c.past_k = Packed(past, n, g.past, g.head);
      c.past_v = Packed(past + g.batch * n * g.past * g.head, n, g.past, g.head);
    }
    float* present = Wanted(out, 1) ? out[1]->data<float>() : scratch + block_floats * threads;
    c.pk = Packed(present, n, t, g.head);
    c.pv = Packed(present + units * t * g.head, n, t, g.head);
    c.mask = mask_floats > 0 ? mask : nullptr;
    if (Present(in, 5)) {
      c.attn_bias = in[5]->data<float>();
      c.ab_b = in[5]->dim(0);
      c.ab_h = in[5]->dim(1);
    }
    c.scale = a_.scale != 0.0f ? a_.scale : 1.0f / std::sqrt(static_cast<float>(g.head));
    c.out = out[0]->data<float>();
    return RunMha(ctx, c, scratch, block_floats);
  }

 private:
  MhaAttrs a_;
  std::vector<int64_t> sizes_;
};

}  // namespace

void RegisterMsftAttentionKernels(KernelRegistry& r) {
  r.Register(KernelRegistration{
      "com.microsoft", "GroupQueryAttention", Device::kCPU, kBackend, kDnnlPriority,
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_ASSIGN_OR_RETURN(GqaAttrs a, reference::GetGqaAttrs(spec));
        DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
        return std::make_unique<GroupQueryAttentionKernel>(KernelName(spec), a);
      }});
  r.Register(KernelRegistration{
      "com.microsoft", "MultiHeadAttention", Device::kCPU, kBackend, kDnnlPriority,
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_ASSIGN_OR_RETURN(MhaAttrs a, reference::GetMhaAttrs(spec, "MultiHeadAttention"));
        DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
        return std::make_unique<MultiHeadAttentionKernel>(KernelName(spec), a);
      }});
  r.Register(KernelRegistration{
      "com.microsoft", "Attention", Device::kCPU, kBackend, kDnnlPriority,
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_ASSIGN_OR_RETURN(MhaAttrs a,
                               reference::GetMhaAttrs(spec, "Attention (com.microsoft)"));
        DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, spec.GetInts("qkv_hidden_sizes", {}));
        DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
        return std::make_unique<MsftAttentionKernel>(KernelName(spec), a, std::move(sizes));
      }});
  r.Register(KernelRegistration{
      "", "Attention", Device::kCPU, kBackend, kDnnlPriority,
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_ASSIGN_OR_RETURN(OnnxAttnAttrs a, reference::GetOnnxAttnAttrs(spec));
        DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
        return std::make_unique<OnnxAttentionKernel>(KernelName(spec), a);
      }});
}

}  // namespace dynvm::onednn
