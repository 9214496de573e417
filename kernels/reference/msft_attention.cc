// Reference kernels of ONNX Runtime's attention contrib operators (com.microsoft
// GroupQueryAttention, MultiHeadAttention), with ORT's semantics (its contrib-operator
// documentation and its CPU kernels; ORT 1.30 is the oracle of tests/conformance/msft). The
// definitions (signatures, attributes, shapes) are in compiler/ops/msft.cc. f32
// (GroupQueryAttention and Attention 23 f16 too, computed in f32); dot products and softmax sums in
// double.
//
// Every operator materializes Q [B, N, Sq, Dk], K and V (per KV head) and runs one core
// (Attend): for each query row, scores = scale * q . k_j, adjusted by the operator (causal and
// window limits, masks, biases, softcap: a score of -inf is excluded), softmax over the keys
// (optionally "smooth", with a sink term), times V. Query head h reads KV head h / (N / N_kv).
//
//   GroupQueryAttention(query, key?, value?, past_key?, past_value?, seqlens_k,
//     total_sequence_length, cos_cache?, sin_cache?, position_ids?, attention_bias?, head_sink?)
//     -> output [B, S, N H], present_key, present_value [B, N_kv, max(total, P), H]
//   query [B, S, N H] (or packed [B, S, (N + 2 N_kv) H] with key and value absent), key/value
//   [B, S, N_kv H], past [B, N_kv, P, H], seqlens_k i32 [B] (each sequence's total length - 1),
//   total_sequence_length i32 scalar. Batch b has total_b = seqlens_k[b] + 1 keys; its past
//   length is 0 on the first prompt (S == total_sequence_length), else total_b - S. present =
//   past[0, past_b) ++ the new keys (after rotary), zero beyond. Query row s sees keys
//   [start, min(past_b + s + 1, total_b)), start limited by local_window_size; rotary uses
//   positions s on the first prompt, total_b - S + s after it (position_ids when given).
#include "kernels/reference/msft_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <memory_resource>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "common/half.h"
#include "common/status_macros.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;
constexpr char kMsft[] = "com.microsoft";
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool Present(Inputs in, size_t i) { return i < in.size() && in[i] != nullptr; }
bool Wanted(Outputs out, size_t i) { return i < out.size() && out[i] != nullptr; }

// The vectors of these kernels (operand copies, presents, scores) come from a bump arena over
// the site's workspace (KernelContext::Workspace), sized by the largest call the site has made:
// a call that outgrows it takes the rest from the heap and records its total, so the next call's
// block holds it all, and a decode step's calls after the first allocate nothing. Set per
// kernel call on the calling thread (these kernels run on it alone); outside one, the heap.
thread_local std::pmr::memory_resource* t_arena = nullptr;
std::pmr::memory_resource* Res() {
  return t_arena != nullptr ? t_arena : std::pmr::new_delete_resource();
}
using FVec = std::pmr::vector<float>;
using IVec = std::pmr::vector<int64_t>;

struct ArenaSize final : KernelState {
  size_t bytes = 0;
};

class SiteArena final : public std::pmr::memory_resource {
 public:
  explicit SiteArena(KernelContext& ctx) : ctx_(ctx) {
    std::unique_ptr<KernelState>& st = ctx.state();
    if (st == nullptr) st = std::make_unique<ArenaSize>();
    size_ = static_cast<ArenaSize*>(st.get());
    absl::StatusOr<void*> block = ctx.Workspace(std::max<size_t>(size_->bytes, 4096));
    status_ = block.status();
    if (block.ok()) mono_.emplace(*block, std::max<size_t>(size_->bytes, 4096));
    prev_ = t_arena;
    if (mono_) t_arena = this;
  }
  ~SiteArena() override {
    t_arena = prev_;
    size_->bytes = std::max(size_->bytes, used_);
  }
  const absl::Status& status() const { return status_; }

 private:
  void* do_allocate(size_t bytes, size_t align) override {
    used_ += bytes + align;
    return mono_->allocate(bytes, align);
  }
  void do_deallocate(void*, size_t, size_t) override {}  // released with the arena
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override {
    return this == &o;
  }
  KernelContext& ctx_;
  ArenaSize* size_ = nullptr;
  absl::Status status_;
  std::optional<std::pmr::monotonic_buffer_resource> mono_;
  std::pmr::memory_resource* prev_ = nullptr;
  size_t used_ = 0;
};

// The elements of `t` (f32) in row-major order.
FVec Floats(const Tensor& t) {
  FVec v(static_cast<size_t>(t.numel()), Res());
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = p[t.ElementOffset(i)];
  return v;
}

// Element i (row-major) of an integer tensor (i32 or i64).
int64_t IntAt(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kI32 ? t.data<int32_t>()[t.ElementOffset(i)]
                                  : t.data<int64_t>()[t.ElementOffset(i)];
}

// The elements of an integer tensor (i32 or i64) as int64.
IVec Ints(const Tensor& t) {
  IVec v(static_cast<size_t>(t.numel()), Res());
  for (int64_t i = 0; i < t.numel(); ++i) {
    v[i] = t.dtype() == DType::kI32 ? t.data<int32_t>()[t.ElementOffset(i)]
                                    : t.data<int64_t>()[t.ElementOffset(i)];
  }
  return v;
}

// Writes a present key or value output [B, heads, T, H] from `src` (row-major). A planned
// output may be a strided view: a loop's KV cache whose growable storage the present extends
// in place over the past (docs/compiler.md, "growable"); `src` was computed from the past first,
// so rewriting its rows over themselves is safe.
absl::Status WritePresent(KernelContext& ctx, Tensor* out, const Dims& dims, const FVec& src,
                          absl::string_view op) {
  if (out->defined() && !out->is_contiguous() && out->dtype() == DType::kF32 &&
      out->dims() == dims) {
    float* p = out->data<float>();
    for (int64_t i = 0; i < out->numel(); ++i) p[out->ElementOffset(i)] = src[i];
    return absl::OkStatus();
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out, DType::kF32, dims, op));
  std::copy(src.begin(), src.end(), out->data<float>());
  return absl::OkStatus();
}

absl::Status Bad(absl::string_view op, absl::string_view what, const Tensor* t = nullptr) {
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": ", what, t != nullptr ? absl::StrCat(", got ", t->DebugString()) : ""));
}

absl::Status NeedFloat(const Tensor& t, absl::string_view op, absl::string_view what) {
  if (t.dtype() != DType::kF32) {
    return absl::UnimplementedError(
        absl::StrCat(op, ": ", what, " must be f32, got ", t.DebugString()));
  }
  return absl::OkStatus();
}

// ---- The core ----

// A read-only operand indexed (batch, head, row) with unit stride along the last axis.
struct Operand {
  const float* p = nullptr;
  int64_t sb = 0, sh = 0, ss = 0;
  const float* at(int64_t b, int64_t h, int64_t s) const { return p + b * sb + h * sh + s * ss; }
};
struct OutOperand {
  float* p = nullptr;
  int64_t sb = 0, sh = 0, ss = 0;
  float* at(int64_t b, int64_t h, int64_t s) const { return p + b * sb + h * sh + s * ss; }
};

struct AttnShape {
  int64_t batch = 0, heads = 0, kv_heads = 1, sq = 0, skv = 0, dk = 0, dv = 0;
};

// Adjusts one row of scaled scores (b, query head, query row, scores[skv]) in place; -inf
// excludes a key.
using RowFn = absl::FunctionRef<void(int64_t, int64_t, int64_t, float*)>;

struct Softmax {
  bool smooth = false;          // a sink term of 0 (ORT's smooth_softmax)
  const float* sink = nullptr;  // per query head (ORT's head_sink), else null
  float* probs = nullptr;       // when set, the probabilities [B, H, Sq, skv] are written here
};

void Attend(const AttnShape& a, Operand q, Operand k, Operand v, float scale, RowFn row,
            const Softmax& sm, OutOperand out) {
  const int64_t group = a.heads / a.kv_heads;
  FVec scores(static_cast<size_t>(a.skv), Res());
  std::pmr::vector<double> probs(static_cast<size_t>(a.skv), Res());
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t kh = h / group;
      for (int64_t i = 0; i < a.sq; ++i) {
        const float* qi = q.at(b, h, i);
        for (int64_t j = 0; j < a.skv; ++j) {
          const float* kj = k.at(b, kh, j);
          double dot = 0;
          for (int64_t d = 0; d < a.dk; ++d) dot += static_cast<double>(qi[d]) * kj[d];
          scores[j] = static_cast<float>(dot) * scale;
        }
        row(b, h, i, scores.data());
        const bool has_sink = sm.smooth || sm.sink != nullptr;
        const double sink = sm.sink != nullptr ? sm.sink[h] : 0.0;
        double m = has_sink ? sink : -std::numeric_limits<double>::infinity();
        for (float s : scores) m = std::max(m, static_cast<double>(s));
        double sum = has_sink ? std::exp(sink - m) : 0.0;
        for (int64_t j = 0; j < a.skv; ++j) {
          probs[j] = scores[j] == kNegInf ? 0.0 : std::exp(scores[j] - m);
          sum += probs[j];
        }
        if (sm.probs != nullptr) {
          float* p = sm.probs + ((b * a.heads + h) * a.sq + i) * a.skv;
          for (int64_t j = 0; j < a.skv; ++j) p[j] = static_cast<float>(probs[j] / sum);
        }
        float* o = out.at(b, h, i);
        for (int64_t d = 0; d < a.dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < a.skv; ++j) {
            if (probs[j] != 0.0) acc += probs[j] * v.at(b, kh, j)[d];
          }
          o[d] = static_cast<float>(acc / sum);
        }
      }
    }
  }
}

// RoPE of the first `rot` values of each head row in place: halves (x_i, x_{i + rot/2}) or
// interleaved pairs (x_2i, x_2i+1), rotated by cos/sin[pos, i].
void Rotate(float* x, int64_t rot, bool interleaved, const float* cos, const float* sin) {
  const int64_t half = rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    const double x0 = x[a], x1 = x[b];
    x[a] = static_cast<float>(x0 * cos[i] - x1 * sin[i]);
    x[b] = static_cast<float>(x0 * sin[i] + x1 * cos[i]);
  }
}

// ---- GroupQueryAttention ----

class GroupQueryAttentionKernel final : public Kernel {
 public:
  explicit GroupQueryAttentionKernel(GqaAttrs a) : a_(a) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    SiteArena arena(ctx);  // this call's vectors (Res())
    DYNVM_RETURN_IF_ERROR(arena.status());
    DYNVM_ASSIGN_OR_RETURN(GqaGeometry g, CheckGroupQueryAttention(a_, in));
    const int64_t n = a_.heads, nkv = a_.kv_heads, h = g.head, s = g.seq;
    const int64_t q_stride = (g.packed ? n + 2 * nkv : n) * h;  // one token of query
    FVec q = Floats(*in[0]);
    FVec k = g.packed ? FVec(Res()) : Floats(*in[1]);
    FVec v = g.packed ? FVec(Res()) : Floats(*in[2]);
    // New keys and values [B, S, N_kv, H] as (pointer, token stride).
    float* kp = g.packed ? q.data() + n * h : k.data();
    float* vp = g.packed ? q.data() + (n + nkv) * h : v.data();
    const int64_t kv_stride = g.packed ? q_stride : nkv * h;
    if (a_.rotary) DYNVM_RETURN_IF_ERROR(ApplyRotary(in, g, q.data(), q_stride, kp, kv_stride));
    // present = past[0, past_b) ++ new, zeros beyond.
    const int64_t t = g.present;
    FVec pk(static_cast<size_t>(g.batch * nkv * t * h), 0.0f, Res()), pv(pk.size(), 0.0f, Res());
    FVec past_k = g.has_past ? Floats(*in[3]) : FVec(Res());
    FVec past_v = g.has_past ? Floats(*in[4]) : FVec(Res());
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t kh = 0; kh < nkv; ++kh) {
        float* dk = pk.data() + (b * nkv + kh) * t * h;
        float* dv = pv.data() + (b * nkv + kh) * t * h;
        const int64_t src = (b * nkv + kh) * g.past * h;
        std::copy_n(past_k.data() + (g.has_past ? src : 0), g.past_b[b] * h, dk);
        std::copy_n(past_v.data() + (g.has_past ? src : 0), g.past_b[b] * h, dv);
        for (int64_t i = 0; i < s; ++i) {
          const int64_t from = (b * s + i) * kv_stride + kh * h;
          std::copy_n(kp + from, h, dk + (g.past_b[b] + i) * h);
          std::copy_n(vp + from, h, dv + (g.past_b[b] + i) * h);
        }
      }
    }
    FVec bias = Present(in, 10) ? Floats(*in[10]) : FVec(Res());
    FVec sink = Present(in, 11) ? Floats(*in[11]) : FVec(Res());
    const Tensor* bt = Present(in, 10) ? in[10] : nullptr;
    auto row = [&](int64_t b, int64_t hq, int64_t i, float* sc) {
      int64_t start, causal;
      GqaKeyRange(a_, g, b, i, &start, &causal);
      const float* brow = nullptr;
      if (bt != nullptr) {
        const int64_t bb = bt->dim(0) == 1 ? 0 : b, bh = bt->dim(1) == 1 ? 0 : hq;
        brow = bias.data() + ((bb * bt->dim(1) + bh) * s + i) * bt->dim(3);
      }
      for (int64_t j = 0; j < t; ++j) {
        if (j < start || j >= causal) {
          sc[j] = kNegInf;
          continue;
        }
        if (a_.softcap > 0.0f) sc[j] = a_.softcap * std::tanh(sc[j] / a_.softcap);
        if (brow != nullptr) sc[j] += brow[j];
      }
    };
    const Dims od = {g.batch, s, n * h};
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, od, "GroupQueryAttention"));
    const AttnShape shape{g.batch, n, nkv, s, t, h, h};
    const Operand qo{q.data(), s * q_stride, h, q_stride};
    const Operand ko{pk.data(), nkv * t * h, t * h, h}, vo{pv.data(), nkv * t * h, t * h, h};
    const float scale = a_.scale != 0.0f ? a_.scale : 1.0f / std::sqrt(static_cast<float>(h));
    Attend(shape, qo, ko, vo, scale, row, {a_.smooth, sink.empty() ? nullptr : sink.data()},
           {out[0]->data<float>(), s * n * h, h, n * h});
    const Dims pd = {g.batch, nkv, t, h};
    for (size_t o : {size_t{1}, size_t{2}}) {
      if (!Wanted(out, o)) continue;
      DYNVM_RETURN_IF_ERROR(WritePresent(ctx, out[o], pd, o == 1 ? pk : pv, "GroupQueryAttention"));
    }
    return absl::OkStatus();
  }
  std::string name() const override { return "group_query_attention.f32.ref"; }

 private:
  absl::Status ApplyRotary(Inputs in, const GqaGeometry& g, float* q, int64_t q_stride, float* k,
                           int64_t kv_stride) const;

  GqaAttrs a_;
};

// cos/sin caches, position_ids, attention_bias, head_sink.
absl::Status CheckGqaOptional(const GqaAttrs& a, Inputs in, const GqaGeometry& g);

}  // namespace

absl::StatusOr<GqaGeometry> CheckGroupQueryAttention(const GqaAttrs& a, Inputs in) {
  constexpr char kOp[] = "GroupQueryAttention";
  GqaGeometry g;
  if (!Present(in, 0) || !Present(in, 5) || !Present(in, 6)) {
    return Bad(kOp, "query, seqlens_k and total_sequence_length are required");
  }
  const Tensor& q = *in[0];
  DYNVM_RETURN_IF_ERROR(NeedFloat(q, kOp, "query"));
  if (q.rank() != 3) return Bad(kOp, "query must be 3-D [batch, sequence, hidden]", &q);
  g.packed = !Present(in, 1);
  if (g.packed == Present(in, 2)) {
    return Bad(kOp, "key and value must both be present, or both absent (packed QKV)");
  }
  const int64_t n = a.heads, nkv = a.kv_heads;
  g.batch = q.dim(0);
  g.seq = q.dim(1);
  const int64_t parts = g.packed ? n + 2 * nkv : n;
  if (q.dim(2) % parts != 0 || q.dim(2) == 0) {
    return Bad(kOp,
               absl::StrCat(
                   "query's hidden size ", q.dim(2), " is not a positive multiple of ",
                   g.packed ? "num_heads + 2 kv_num_heads (packed QKV) = " : "num_heads = ", parts),
               &q);
  }
  g.head = q.dim(2) / parts;
  for (size_t i : {size_t{1}, size_t{2}}) {
    if (g.packed) break;
    const Tensor& t = *in[i];
    DYNVM_RETURN_IF_ERROR(NeedFloat(t, kOp, i == 1 ? "key" : "value"));
    if (t.rank() != 3 || t.dim(0) != g.batch || t.dim(1) != g.seq || t.dim(2) != nkv * g.head) {
      return Bad(kOp,
                 absl::StrCat(i == 1 ? "key" : "value", " must be [", g.batch, ", ", g.seq, ", ",
                              nkv * g.head, "] (kv_num_heads x head size)"),
                 &t);
    }
  }
  g.has_past = Present(in, 3) || Present(in, 4);
  if (g.has_past) {
    for (size_t i : {size_t{3}, size_t{4}}) {
      const char* what = i == 3 ? "past_key" : "past_value";
      if (!Present(in, i)) return Bad(kOp, "past_key and past_value must both be present");
      const Tensor& t = *in[i];
      DYNVM_RETURN_IF_ERROR(NeedFloat(t, kOp, what));
      if (t.rank() != 4 || t.dim(0) != g.batch || t.dim(1) != nkv || t.dim(3) != g.head ||
          t.dim(2) != in[3]->dim(2)) {
        return Bad(kOp,
                   absl::StrCat(what, " must be [", g.batch, ", ", nkv, ", past, ", g.head,
                                "], past_key and past_value of one shape"),
                   &t);
      }
    }
    g.past = in[3]->dim(2);
  }
  const Tensor& sl = *in[5];
  const Tensor& tot = *in[6];
  if (sl.dtype() != DType::kI32 || sl.numel() != g.batch) {
    return Bad(kOp, absl::StrCat("seqlens_k must be i32 [", g.batch, "]"), &sl);
  }
  if (tot.dtype() != DType::kI32 || tot.numel() != 1) {
    return Bad(kOp, "total_sequence_length must be one i32 value", &tot);
  }
  g.total = IntAt(tot, 0);
  g.present = std::max(g.total, g.past);
  const bool subsequent = g.seq > 1 && g.seq != g.total;
  if (subsequent && g.batch != 1) {
    return Bad(
        kOp, absl::StrCat("a sequence_length (", g.seq, ") > 1 other than total_sequence_length (",
                          g.total, ") needs batch size 1"));
  }
  g.first_prompt = !subsequent && g.seq == g.total;
  if (g.seq < 1 || (!subsequent && !g.first_prompt && g.seq != 1)) {
    return Bad(kOp, "sequence_length must be 1 when it is not the prompt", &q);
  }
  for (int64_t b = 0; b < g.batch; ++b) {
    const int64_t len = IntAt(sl, b);
    const int64_t total_b = len + 1;
    const int64_t past_b = !g.has_past || g.first_prompt ? 0 : total_b - g.seq;
    if (total_b < 1 || total_b > g.present || past_b < 0 || past_b > g.past ||
        past_b + g.seq > g.present) {
      return Bad(kOp,
                 absl::StrCat("seqlens_k[", b, "] = ", len, " does not fit the sequence (", g.seq,
                              "), past (", g.past, ") and total_sequence_length (", g.total, ")"));
    }
    g.total_b.push_back(total_b);
    g.past_b.push_back(past_b);
  }
  DYNVM_RETURN_IF_ERROR(CheckGqaOptional(a, in, g));
  return g;
}

namespace {

absl::Status CheckGqaOptional(const GqaAttrs& a, Inputs in, const GqaGeometry& g) {
  constexpr char kOp[] = "GroupQueryAttention";
  if (Present(in, 7) != Present(in, 8)) {
    return Bad(kOp, "cos_cache and sin_cache must both be present or both absent");
  }
  if (a.rotary && !Present(in, 7)) return Bad(kOp, "do_rotary needs cos_cache and sin_cache");
  if (a.rotary) {
    const Tensor& c = *in[7];
    const Tensor& sn = *in[8];
    DYNVM_RETURN_IF_ERROR(NeedFloat(c, kOp, "cos_cache"));
    DYNVM_RETURN_IF_ERROR(NeedFloat(sn, kOp, "sin_cache"));
    if (c.rank() != 2 || sn.rank() != 2 || c.dim(0) != sn.dim(0) || c.dim(1) != sn.dim(1) ||
        c.dim(1) == 0 || 2 * c.dim(1) > g.head) {
      return Bad(kOp,
                 absl::StrCat("cos_cache and sin_cache must be one shape [positions, rotary_dim / "
                              "2] with rotary_dim <= head size (",
                              g.head, ")"),
                 &c);
    }
  }
  if (Present(in, 9)) {
    const Tensor& p = *in[9];
    if ((p.dtype() != DType::kI64 && p.dtype() != DType::kI32) || p.numel() != g.batch * g.seq) {
      return Bad(kOp, absl::StrCat("position_ids must be integers [", g.batch, ", ", g.seq, "]"),
                 &p);
    }
  }
  if (Present(in, 10)) {
    const Tensor& b = *in[10];
    DYNVM_RETURN_IF_ERROR(NeedFloat(b, kOp, "attention_bias"));
    if (b.rank() != 4 || (b.dim(0) != 1 && b.dim(0) != g.batch) ||
        (b.dim(1) != 1 && b.dim(1) != a.heads) || b.dim(2) != g.seq || b.dim(3) < g.present) {
      return Bad(kOp,
                 absl::StrCat("attention_bias must be [", g.batch, " or 1, ", a.heads, " or 1, ",
                              g.seq, ", >= ", g.present, "]"),
                 &b);
    }
  }
  if (Present(in, 11)) {
    DYNVM_RETURN_IF_ERROR(NeedFloat(*in[11], kOp, "head_sink"));
    if (in[11]->numel() != a.heads) {
      return Bad(kOp, absl::StrCat("head_sink must have num_heads (", a.heads, ") values"), in[11]);
    }
  }
  return absl::OkStatus();
}

// Rotates Q's heads and the new K's heads at each token's position: position_ids when given,
// else s on the first prompt (padded rows too) and total_b - S + s after it (ORT's positions).
absl::Status GroupQueryAttentionKernel::ApplyRotary(Inputs in, const GqaGeometry& g, float* q,
                                                    int64_t q_stride, float* k,
                                                    int64_t kv_stride) const {
  const Tensor& ct = *in[7];
  const FVec cos = Floats(ct), sin = Floats(*in[8]);
  const int64_t half = ct.dim(1), rot = 2 * half;
  const IVec ids = Present(in, 9) ? Ints(*in[9]) : IVec(Res());
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t s = 0; s < g.seq; ++s) {
      const int64_t pos = GqaPosition(g, ids, b, s);
      if (pos < 0 || pos >= ct.dim(0)) {
        return Bad("GroupQueryAttention",
                   absl::StrCat("position ", pos, " of batch ", b, " is outside cos_cache"), &ct);
      }
      const float* c = cos.data() + pos * half;
      const float* sn = sin.data() + pos * half;
      for (int64_t h = 0; h < a_.heads; ++h) {
        Rotate(q + (b * g.seq + s) * q_stride + h * g.head, rot, a_.interleaved, c, sn);
      }
      for (int64_t h = 0; h < a_.kv_heads; ++h) {
        Rotate(k + (b * g.seq + s) * kv_stride + h * g.head, rot, a_.interleaved, c, sn);
      }
    }
  }
  return absl::OkStatus();
}

// ---- MultiHeadAttention, Attention (com.microsoft) ----
//
// Both score scale Q K^T + attention_bias + a mask of 0 or mask_filter_value (ORT's PrepareMask:
// the padding mask and, with unidirectional, the causal limit key j <= P + i), softmax over all
// P + L keys (a masked key keeps its tiny weight, as in ORT), times V.

absl::Status CheckMaskAndBias(absl::string_view op, const MhaAttrs& a, const MhaGeometry& g,
                              const Tensor* mask, const Tensor* bias, absl::string_view what) {
  const int64_t t = g.past + g.kv_seq;
  if (mask != nullptr) {
    const Tensor& m = *mask;
    const bool ok = m.dtype() == DType::kI32 &&
                    ((m.rank() == 1 && (m.dim(0) == g.batch || m.dim(0) == 2 * g.batch)) ||
                     (m.rank() == 2 && m.dim(0) == g.batch && m.dim(1) == t) ||
                     (m.rank() == 3 && m.dim(0) == g.batch && m.dim(1) == g.seq && m.dim(2) == t));
    if (!ok) {
      return Bad(
          op,
          absl::StrCat(what, " must be i32 [", g.batch, "], [", 2 * g.batch, "], [", g.batch, ", ",
                       t, "] or [", g.batch, ", ", g.seq, ", ", t, "] (total sequence ", t, ")"),
          &m);
    }
  }
  if (bias != nullptr) {
    const Tensor& b = *bias;
    DYNVM_RETURN_IF_ERROR(NeedFloat(b, op, "attention_bias"));
    if (b.rank() != 4 || (b.dim(0) != 1 && b.dim(0) != g.batch) ||
        (b.dim(1) != 1 && b.dim(1) != a.heads) || b.dim(2) != g.seq || b.dim(3) != t) {
      return Bad(op,
                 absl::StrCat("attention_bias must be [", g.batch, " or 1, ", a.heads, " or 1, ",
                              g.seq, ", ", t, "]"),
                 &b);
    }
  }
  return absl::OkStatus();
}

// Y [B, S, N Hv] from q [B, S, N, H] and the present keys and values [B, N, T, H | Hv].
absl::Status AttendMasked(KernelContext& ctx, absl::string_view op, const MhaAttrs& a,
                          const MhaGeometry& g, const FVec& q, const FVec& pk, const FVec& pv,
                          const Tensor* mask, const Tensor* abt, Tensor* out) {
  const int64_t n = a.heads, h = g.head, hv = g.v_head, s = g.seq, t = g.past + g.kv_seq;
  FVec m(static_cast<size_t>(PaddingMaskFloats(a, g, mask)), Res());
  if (!m.empty()) WritePaddingMask(a, g, mask, m.data());
  const FVec ab = abt != nullptr ? Floats(*abt) : FVec(Res());
  auto row = [&](int64_t b, int64_t hq, int64_t i, float* sc) {
    const float* mr = m.empty() ? nullptr : m.data() + (b * s + i) * t;
    const float* br = nullptr;
    if (abt != nullptr) {
      const int64_t bb = abt->dim(0) == 1 ? 0 : b, bh = abt->dim(1) == 1 ? 0 : hq;
      br = ab.data() + ((bb * abt->dim(1) + bh) * s + i) * t;
    }
    for (int64_t j = 0; j < t; ++j) {
      float add = 0.0f;
      if (br != nullptr) add += br[j];
      if (mr != nullptr) add += mr[j];
      sc[j] += add;
    }
  };
  const Dims od = {g.batch, s, n * hv};
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out, DType::kF32, od, op));
  const float scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(h));
  Attend({g.batch, n, n, s, t, h, hv}, {q.data(), s * n * h, h, n * h},
         {pk.data(), n * t * h, t * h, h}, {pv.data(), n * t * hv, t * hv, hv}, scale, row, {},
         {out->data<float>(), s * n * hv, hv, n * hv});
  return absl::OkStatus();
}

// dst [B, N, P + L, hd] = past [B, N, P, hd] (may be null when P is 0) ++ x (the new rows,
// [B, L, N, hd] or [B, N, L, hd] with bnsh) + bias [N hd] (may be null).
void ConcatPast(const MhaGeometry& g, int64_t n, int64_t hd, const float* past, const float* x,
                const float* bias, FVec& dst) {
  const int64_t t = g.past + g.kv_seq;
  dst.assign(static_cast<size_t>(g.batch * n * t * hd), 0.0f);
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t h = 0; h < n; ++h) {
      float* d = dst.data() + (b * n + h) * t * hd;
      if (g.past > 0) std::copy_n(past + (b * n + h) * g.past * hd, g.past * hd, d);
      for (int64_t j = 0; j < g.kv_seq; ++j) {
        const int64_t from =
            g.bnsh_kv ? ((b * n + h) * g.kv_seq + j) * hd : (b * g.kv_seq + j) * n * hd + h * hd;
        for (int64_t e = 0; e < hd; ++e) {
          d[(g.past + j) * hd + e] = x[from + e] + (bias != nullptr ? bias[h * hd + e] : 0.0f);
        }
      }
    }
  }
}

class MultiHeadAttentionKernel final : public Kernel {
 public:
  explicit MultiHeadAttentionKernel(MhaAttrs a) : a_(a) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    SiteArena arena(ctx);  // this call's vectors (Res())
    DYNVM_RETURN_IF_ERROR(arena.status());
    constexpr char kOp[] = "MultiHeadAttention";
    DYNVM_ASSIGN_OR_RETURN(MhaGeometry g,
                           CheckMultiHeadAttention(a_, in, Wanted(out, 1) || Wanted(out, 2)));
    const int64_t n = a_.heads, h = g.head, hv = g.v_head;
    FVec q = Floats(*in[0]);
    const FVec bias = Present(in, 3) ? Floats(*in[3]) : FVec(Res());
    if (!bias.empty()) {
      for (size_t i = 0; i < q.size(); ++i) q[i] += bias[i % (n * h)];
    }
    // present = past ++ the new keys (and values), [B, N, T, H].
    const FVec k = Floats(*in[1]), v = Floats(*in[2]);
    const FVec past_k = g.past > 0 ? Floats(*in[6]) : FVec(Res());
    const FVec past_v = g.past > 0 ? Floats(*in[7]) : FVec(Res());
    FVec pk(Res()), pv(Res());
    ConcatPast(g, n, h, past_k.data(), k.data(), bias.empty() ? nullptr : bias.data() + n * h, pk);
    ConcatPast(g, n, hv, past_v.data(), v.data(), bias.empty() ? nullptr : bias.data() + 2 * n * h,
               pv);
    DYNVM_RETURN_IF_ERROR(AttendMasked(ctx, kOp, a_, g, q, pk, pv, Present(in, 4) ? in[4] : nullptr,
                                       Present(in, 5) ? in[5] : nullptr, out[0]));
    const int64_t t = g.past + g.kv_seq;
    for (size_t o : {size_t{1}, size_t{2}}) {
      if (!Wanted(out, o)) continue;
      const Dims pd = {g.batch, n, t, o == 1 ? h : hv};
      DYNVM_RETURN_IF_ERROR(WritePresent(ctx, out[o], pd, o == 1 ? pk : pv, kOp));
    }
    return absl::OkStatus();
  }
  std::string name() const override { return "multi_head_attention.f32.ref"; }

 private:
  MhaAttrs a_;
};

}  // namespace

// The mask (key_padding_mask / mask_index: [B] end positions, [2B] end and start, [B, T] or
// [B, S, T] of 0/1) and the causal limit as ORT's PrepareMask makes them: [B, S, T] of 0 or
// mask_filter_value; empty when there is neither.
int64_t PaddingMaskFloats(const MhaAttrs& a, const MhaGeometry& g, const Tensor* mask) {
  const bool causal = a.causal && g.seq > 1;
  return mask == nullptr && !causal ? 0 : g.batch * g.seq * (g.past + g.kv_seq);
}

void WritePaddingMask(const MhaAttrs& a, const MhaGeometry& g, const Tensor* mask, float* m) {
  const int64_t s = g.seq, t = g.past + g.kv_seq;
  const bool causal = a.causal && s > 1;
  std::fill_n(m, PaddingMaskFloats(a, g, mask), 0.0f);
  const int rank = mask != nullptr ? mask->rank() : 0;
  const bool starts = mask != nullptr && mask->numel() == 2 * g.batch;
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t i = 0; i < s; ++i) {
      float* r = m + (b * s + i) * t;
      for (int64_t j = 0; j < t && mask != nullptr; ++j) {
        bool keep;
        if (rank == 3) {
          keep = IntAt(*mask, (b * s + i) * t + j) > 0;
        } else if (rank == 2) {
          keep = IntAt(*mask, b * t + j) > 0;
        } else {
          keep = j < IntAt(*mask, b);
          if (starts) keep = keep && j >= std::min(IntAt(*mask, b + g.batch), t);
        }
        if (!keep) r[j] = a.mask_filter;
      }
      if (causal && i < s - 1) {
        for (int64_t j = g.past + i + 1; j < t; ++j) r[j] = a.mask_filter;
      }
    }
  }
}

std::vector<float> PaddingMask(const MhaAttrs& a, const MhaGeometry& g, const Tensor* mask) {
  std::vector<float> m(static_cast<size_t>(PaddingMaskFloats(a, g, mask)));
  if (!m.empty()) WritePaddingMask(a, g, mask, m.data());
  return m;
}

absl::StatusOr<MhaGeometry> CheckMultiHeadAttention(const MhaAttrs& a, Inputs in,
                                                    bool wants_present) {
  constexpr char kOp[] = "MultiHeadAttention";
  MhaGeometry g;
  const int64_t n = a.heads;
  if (!Present(in, 0)) return Bad(kOp, "query is required");
  const Tensor& q = *in[0];
  DYNVM_RETURN_IF_ERROR(NeedFloat(q, kOp, "query"));
  if (q.rank() == 5 || (Present(in, 1) && in[1]->rank() == 5)) {
    return absl::UnimplementedError(
        "MultiHeadAttention: packed QKV or KV (5-D query or key) is not supported (ONNX "
        "Runtime's CPU kernel has no such form either)");
  }
  if (q.rank() != 3) return Bad(kOp, "query must be 3-D [batch, sequence, hidden]", &q);
  if (!Present(in, 1) || !Present(in, 2)) return Bad(kOp, "key and value are required");
  g.batch = q.dim(0);
  g.seq = q.dim(1);
  if (q.dim(2) % n != 0 || q.dim(2) == 0) {
    return Bad(
        kOp, absl::StrCat("query's hidden size is not a positive multiple of num_heads (", n, ")"),
        &q);
  }
  g.head = q.dim(2) / n;
  const Tensor& k = *in[1];
  const Tensor& v = *in[2];
  DYNVM_RETURN_IF_ERROR(NeedFloat(k, kOp, "key"));
  DYNVM_RETURN_IF_ERROR(NeedFloat(v, kOp, "value"));
  g.bnsh_kv = k.rank() == 4;
  if (g.bnsh_kv) {
    if (k.dim(0) != g.batch || k.dim(1) != n || k.dim(3) != g.head) {
      return Bad(
          kOp,
          absl::StrCat("a 4-D key must be [", g.batch, ", ", n, ", kv_sequence, ", g.head, "]"),
          &k);
    }
    if (v.rank() != 4 || v.dim(0) != g.batch || v.dim(1) != n || v.dim(2) != k.dim(2)) {
      return Bad(kOp, "a 4-D key needs a value [batch, num_heads, kv_sequence, v_head_size]", &v);
    }
    if (Present(in, 3) || Present(in, 6) || Present(in, 7)) {
      return Bad(kOp, "a 4-D (BNSH) key and value take no bias and no past");
    }
    g.kv_seq = k.dim(2);
    g.v_head = v.dim(3);
  } else {
    if (k.rank() != 3 || k.dim(0) != g.batch || k.dim(2) != q.dim(2)) {
      return Bad(kOp, absl::StrCat("key must be [", g.batch, ", kv_sequence, ", q.dim(2), "]"), &k);
    }
    if (v.rank() != 3 || v.dim(0) != g.batch || v.dim(1) != k.dim(1) || v.dim(2) % n != 0) {
      return Bad(kOp,
                 "value must be [batch, kv_sequence, v_hidden] with v_hidden a multiple of "
                 "num_heads",
                 &v);
    }
    g.kv_seq = k.dim(1);
    g.v_head = v.dim(2) / n;
  }
  if (Present(in, 3)) {
    DYNVM_RETURN_IF_ERROR(NeedFloat(*in[3], kOp, "bias"));
    if (in[3]->numel() != n * (2 * g.head + g.v_head)) {
      return Bad(kOp,
                 absl::StrCat("bias must have ", n * (2 * g.head + g.v_head),
                              " values (Q, K and V hidden sizes)"),
                 in[3]);
    }
  }
  if (Present(in, 6) != Present(in, 7)) {
    return Bad(kOp, "past_key and past_value must both be present or both absent");
  }
  // ONNX Runtime reads the past only when a present output is wanted (without one it attends
  // over the new keys alone): dynvm does the same (docs/onnx.md).
  if (Present(in, 6) && wants_present) {
    const Tensor& pk = *in[6];
    const Tensor& pv = *in[7];
    DYNVM_RETURN_IF_ERROR(NeedFloat(pk, kOp, "past_key"));
    DYNVM_RETURN_IF_ERROR(NeedFloat(pv, kOp, "past_value"));
    if (pk.rank() != 4 || pk.dim(0) != g.batch || pk.dim(1) != n || pk.dim(3) != g.head ||
        pv.rank() != 4 || pv.dim(0) != g.batch || pv.dim(1) != n || pv.dim(2) != pk.dim(2) ||
        pv.dim(3) != g.v_head) {
      return Bad(
          kOp,
          absl::StrCat("past_key and past_value must be [", g.batch, ", ", n, ", past, head_size]"),
          &pk);
    }
    g.past = pk.dim(2);
  }
  DYNVM_RETURN_IF_ERROR(CheckMaskAndBias(kOp, a, g, Present(in, 4) ? in[4] : nullptr,
                                         Present(in, 5) ? in[5] : nullptr, "key_padding_mask"));
  return g;
}

absl::Status CheckMsftAttention(const MhaAttrs& a, absl::Span<const int64_t> sizes, Inputs in,
                                bool wants_present, MhaGeometry& g, int64_t& din, int64_t& dq,
                                int64_t& dv) {
  constexpr char kOp[] = "Attention (com.microsoft)";
  const int64_t n = a.heads;
  if (!Present(in, 0) || !Present(in, 1) || !Present(in, 2)) {
    return Bad(kOp, "input, weights and bias are required");
  }
  for (size_t i = 0; i < 3; ++i) {
    DYNVM_RETURN_IF_ERROR(NeedFloat(*in[i], kOp, i == 0 ? "input" : i == 1 ? "weights" : "bias"));
  }
  const Tensor& x = *in[0];
  const Tensor& w = *in[1];
  if (x.rank() != 3) return Bad(kOp, "input must be 3-D [batch, sequence, input_hidden]", &x);
  din = x.dim(2);
  if (w.rank() != 2 || w.dim(0) != din) {
    return Bad(kOp, absl::StrCat("weights must be [", din, ", D + D + Dv]"), &w);
  }
  if (sizes.empty()) {
    if (w.dim(1) % 3 != 0) return Bad(kOp, "weights' second dim must be 3 x hidden", &w);
    dq = dv = w.dim(1) / 3;
  } else {
    if (sizes.size() != 3 || sizes[0] != sizes[1] || sizes[0] + sizes[1] + sizes[2] != w.dim(1)) {
      return Bad(kOp,
                 "qkv_hidden_sizes must be three sizes (Q and K equal) summing to "
                 "weights' second dim",
                 &w);
    }
    dq = sizes[0];
    dv = sizes[2];
  }
  if (dq <= 0 || dv <= 0 || dq % n != 0 || dv % n != 0) {
    return Bad(kOp, absl::StrCat("the Q, K and V hidden sizes (", dq, ", ", dv,
                                 ") must be positive multiples of num_heads (", n, ")"));
  }
  if (in[2]->numel() != 2 * dq + dv) {
    return Bad(kOp, absl::StrCat("bias must have ", 2 * dq + dv, " values"), in[2]);
  }
  g.batch = x.dim(0);
  g.seq = g.kv_seq = x.dim(1);
  g.head = dq / n;
  g.v_head = dv / n;
  if (Present(in, 4)) {
    const Tensor& p = *in[4];
    DYNVM_RETURN_IF_ERROR(NeedFloat(p, kOp, "past"));
    if (g.head != g.v_head || p.rank() != 5 || p.dim(0) != 2 || p.dim(1) != g.batch ||
        p.dim(2) != n || p.dim(4) != g.head) {
      return Bad(kOp,
                 absl::StrCat("past must be [2, ", g.batch, ", ", n, ", past, ", g.head,
                              "] (K and V of one head size)"),
                 &p);
    }
    g.past = p.dim(3);
  }
  if (wants_present && g.head != g.v_head) {
    return Bad(kOp, absl::StrCat("the present output [2, batch, heads, total, head size] needs K "
                                 "and V of one head size (qkv_hidden_sizes gives ",
                                 g.head, " and ", g.v_head, ")"));
  }
  return CheckMaskAndBias(kOp, a, g, Present(in, 3) ? in[3] : nullptr,
                          Present(in, 5) ? in[5] : nullptr, "mask_index");
}

namespace {

// Attention (com.microsoft): input [B, S, D_in] times weights [D_in, D + D + Dv] plus bias gives
// Q, K and V (qkv_hidden_sizes, or three equal parts); past [2, B, N, P, H] and present
// [2, B, N, P + S, H] hold keys and values together.
class MsftAttentionKernel final : public Kernel {
 public:
  MsftAttentionKernel(MhaAttrs a, std::vector<int64_t> sizes) : a_(a), sizes_(std::move(sizes)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    SiteArena arena(ctx);  // this call's vectors (Res())
    DYNVM_RETURN_IF_ERROR(arena.status());
    constexpr char kOp[] = "Attention";
    MhaGeometry g;
    int64_t din = 0, dq = 0, dv = 0;
    DYNVM_RETURN_IF_ERROR(CheckMsftAttention(a_, sizes_, in, Wanted(out, 1), g, din, dq, dv));
    const int64_t n = a_.heads, rows = g.batch * g.seq, cols = 2 * dq + dv;
    const FVec x = Floats(*in[0]), w = Floats(*in[1]), bias = Floats(*in[2]);
    // qkv [B S, D + D + Dv] = x W + bias.
    FVec qkv(static_cast<size_t>(rows * cols), Res());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        double acc = bias[c];
        for (int64_t e = 0; e < din; ++e) {
          acc += static_cast<double>(x[r * din + e]) * w[e * cols + c];
        }
        qkv[r * cols + c] = static_cast<float>(acc);
      }
    }
    FVec q(static_cast<size_t>(rows * dq), Res()), k(q.size(), Res()),
        v(static_cast<size_t>(rows * dv), Res());
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(qkv.data() + r * cols, dq, q.data() + r * dq);
      std::copy_n(qkv.data() + r * cols + dq, dq, k.data() + r * dq);
      std::copy_n(qkv.data() + r * cols + 2 * dq, dv, v.data() + r * dv);
    }
    const FVec past = Present(in, 4) ? Floats(*in[4]) : FVec(Res());
    const int64_t half = g.batch * n * g.past * g.head;
    FVec pk(Res()), pv(Res());
    ConcatPast(g, n, g.head, past.data(), k.data(), nullptr, pk);
    ConcatPast(g, n, g.v_head, past.empty() ? nullptr : past.data() + half, v.data(), nullptr, pv);
    DYNVM_RETURN_IF_ERROR(AttendMasked(ctx, kOp, a_, g, q, pk, pv, Present(in, 3) ? in[3] : nullptr,
                                       Present(in, 5) ? in[5] : nullptr, out[0]));
    if (Wanted(out, 1)) {
      const Dims pd = {2, g.batch, n, g.past + g.kv_seq, g.head};
      DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[1], DType::kF32, pd, kOp));
      float* p = out[1]->data<float>();
      std::copy(pk.begin(), pk.end(), p);
      std::copy(pv.begin(), pv.end(), p + pk.size());
    }
    return absl::OkStatus();
  }
  std::string name() const override { return "attention.com.microsoft.f32.ref"; }

 private:
  MhaAttrs a_;
  std::vector<int64_t> sizes_;
};

// ---- Attention (ONNX, opset 23) ----
//
// Q [B, Sq, qN H] and K, V [B, Skv, kvN H | Hv] (3-D, with q_num_heads and kv_num_heads) or
// [B, qN, Sq, H], [B, kvN, Skv, H | Hv] (4-D); past [B, kvN, P, H]; present = past ++ K. Scores
// softcap(scale Q K^T) + attn_mask (bool: false adds the lowest float; f32: added; broadcast to
// [B, qN, Sq, P + Skv]), is_causal masking key j > P + i (ONNX Runtime's alignment, which skips
// it for one query after a past), softmax, times V.

// The element strides that read attn_mask (bool or f32) broadcast to the scores `sd`
// [B, qN, Sq, T]; InvalidArgument when it does not broadcast to them.
absl::StatusOr<Dims> MaskStrides(const Tensor& m, const Dims& sd) {
  if (m.dtype() != DType::kBool && m.dtype() != DType::kF32) {
    return Bad("Attention", "attn_mask must be bool or f32", &m);
  }
  absl::StatusOr<Dims> b = BroadcastShapes(m.dims(), sd);
  if (m.rank() > 4 || !b.ok() || *b != sd) {
    return Bad("Attention",
               absl::StrCat("attn_mask must broadcast to [", sd[0], ", ", sd[1], ", ", sd[2], ", ",
                            sd[3], "] (batch, q heads, q sequence, past + kv sequence)"),
               &m);
  }
  return BroadcastStrides(m, sd);
}

}  // namespace

absl::StatusOr<OnnxAttnGeometry> CheckOnnxAttention(const OnnxAttnAttrs& a, Inputs in) {
  constexpr char kOp[] = "Attention";
  for (size_t i = 0; i < 3; ++i) {
    if (!Present(in, i)) return Bad(kOp, "Q, K and V are required");
    DYNVM_RETURN_IF_ERROR(NeedFloat(*in[i], kOp, i == 0 ? "Q" : i == 1 ? "K" : "V"));
  }
  const Tensor& q = *in[0];
  const Tensor& k = *in[1];
  const Tensor& v = *in[2];
  const int r = q.rank();
  if ((r != 3 && r != 4) || k.rank() != r || v.rank() != r) {
    return Bad(kOp, "Q, K and V must all be 3-D or all 4-D", &q);
  }
  int64_t b = q.dim(0), qn, kvn, sq, skv, h, hv;
  if (r == 3) {
    qn = a.q_heads;
    kvn = a.kv_heads;
    if (qn <= 0 || kvn <= 0) {
      return Bad(kOp, "3-D inputs need the q_num_heads and kv_num_heads attributes");
    }
    if (q.dim(2) % qn != 0 || k.dim(2) % kvn != 0 || v.dim(2) % kvn != 0) {
      return Bad(kOp,
                 absl::StrCat("Q's hidden size must be a multiple of q_num_heads (", qn,
                              "), K's and V's of kv_num_heads (", kvn, ")"),
                 &q);
    }
    sq = q.dim(1);
    skv = k.dim(1);
    h = q.dim(2) / qn;
    hv = v.dim(2) / kvn;
    if (k.dim(2) / kvn != h) return Bad(kOp, "K's head size differs from Q's", &k);
  } else {
    qn = q.dim(1);
    kvn = k.dim(1);
    sq = q.dim(2);
    skv = k.dim(2);
    h = q.dim(3);
    hv = v.dim(3);
    if (k.dim(3) != h || v.dim(1) != kvn) {
      return Bad(kOp, "K must be [batch, kv_heads, kv_sequence, Q's head size]", &k);
    }
  }
  if (k.dim(0) != b || v.dim(0) != b || v.dim(r == 3 ? 1 : 2) != skv) {
    return Bad(kOp, "K and V must have Q's batch and one kv sequence length", &v);
  }
  if (kvn <= 0 || qn % kvn != 0) {
    return Bad(kOp, absl::StrCat("the query heads (", qn,
                                 ") must be a multiple of the key/value "
                                 "heads (",
                                 kvn, ")"));
  }
  int64_t past = 0;
  if (Present(in, 4) != Present(in, 5)) {
    return Bad(kOp, "past_key and past_value must both be present or both absent");
  }
  if (Present(in, 4)) {
    const Tensor& pk = *in[4];
    const Tensor& pv = *in[5];
    DYNVM_RETURN_IF_ERROR(NeedFloat(pk, kOp, "past_key"));
    DYNVM_RETURN_IF_ERROR(NeedFloat(pv, kOp, "past_value"));
    if (pk.rank() != 4 || pk.dim(0) != b || pk.dim(1) != kvn || pk.dim(3) != h || pv.rank() != 4 ||
        pv.dim(0) != b || pv.dim(1) != kvn || pv.dim(2) != pk.dim(2) || pv.dim(3) != hv) {
      return Bad(
          kOp,
          absl::StrCat("past_key and past_value must be [", b, ", ", kvn, ", past, head_size]"),
          &pk);
    }
    past = pk.dim(2);
  }
  OnnxAttnGeometry g{r, b, qn, kvn, sq, skv, h, hv, past, past + skv, {}};
  if (Present(in, 3)) {
    DYNVM_ASSIGN_OR_RETURN(g.mask_strides, MaskStrides(*in[3], {b, qn, sq, g.total}));
  }
  return g;
}

namespace {

class OnnxAttentionKernel final : public Kernel {
 public:
  explicit OnnxAttentionKernel(OnnxAttnAttrs a) : a_(a) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    SiteArena arena(ctx);  // this call's vectors (Res())
    DYNVM_RETURN_IF_ERROR(arena.status());
    constexpr char kOp[] = "Attention";
    DYNVM_ASSIGN_OR_RETURN(OnnxAttnGeometry geo, CheckOnnxAttention(a_, in));
    const Tensor& q = *in[0];
    const int r = geo.rank;
    const int64_t b = geo.batch, qn = geo.q_heads, kvn = geo.kv_heads, sq = geo.sq, skv = geo.skv,
                  h = geo.head, hv = geo.v_head, past = geo.past;
    const int64_t t = past + skv;
    // Q as [B, qN, Sq, H] strides; present K and V [B, kvN, T, H].
    FVec qv = Floats(q);
    const Operand qo = r == 3 ? Operand{qv.data(), sq * qn * h, h, qn * h}
                              : Operand{qv.data(), qn * sq * h, sq * h, h};
    FVec pk(static_cast<size_t>(b * kvn * t * h), Res());
    FVec pv(static_cast<size_t>(b * kvn * t * hv), Res());
    Present4(in, 1, r, b, kvn, skv, past, h, pk);
    Present4(in, 2, r, b, kvn, skv, past, hv, pv);
    // The mask, broadcast to [B, qN, Sq, T].
    const Tensor* mt = Present(in, 3) ? in[3] : nullptr;
    const Dims sd = {b, qn, sq, t};
    const Dims& ms = geo.mask_strides;
    // ONNX Runtime's order: softcap, then the mask (a bool mask's false and the causal limit
    // as the lowest float, so a row with every key masked is uniform, as in ORT). The qk
    // output [B, qN, Sq, T] holds the scores at qk_matmul_output_mode's stage: 0 scale Q K^T,
    // 1 after the softcap, 2 after the mask, 3 the probabilities (ONNX Runtime's numbering,
    // following its softcap-then-mask order).
    constexpr float kLowest = std::numeric_limits<float>::lowest();
    const bool causal = a_.causal && !(sq == 1 && past > 0);
    float* qk = nullptr;
    if (Wanted(out, 3)) {
      DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[3], DType::kF32, sd, kOp));
      qk = out[3]->data<float>();
    }
    auto snapshot = [&](int mode, int64_t bi, int64_t hq, int64_t i, const float* sc) {
      if (qk != nullptr && a_.qk_mode == mode) {
        std::copy_n(sc, t, qk + ((bi * qn + hq) * sq + i) * t);
      }
    };
    auto row = [&](int64_t bi, int64_t hq, int64_t i, float* sc) {
      snapshot(0, bi, hq, i, sc);
      for (int64_t j = 0; j < t && a_.softcap > 0.0f; ++j) {
        sc[j] = a_.softcap * std::tanh(sc[j] / a_.softcap);
      }
      snapshot(1, bi, hq, i, sc);
      for (int64_t j = 0; j < t; ++j) {
        float add = 0.0f;
        if (mt != nullptr) {
          const int64_t off = bi * ms[0] + hq * ms[1] + i * ms[2] + j * ms[3];
          if (mt->dtype() == DType::kBool) {
            add = mt->data<bool>()[off] ? 0.0f : kLowest;
          } else {
            add = mt->data<float>()[off];
          }
        }
        if (causal && j > past + i) add = kLowest;
        sc[j] += add;
      }
      snapshot(2, bi, hq, i, sc);
    };
    const Dims od = r == 3 ? Dims{b, sq, qn * hv} : Dims{b, qn, sq, hv};
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, od, kOp));
    const OutOperand oo = r == 3 ? OutOperand{out[0]->data<float>(), sq * qn * hv, hv, qn * hv}
                                 : OutOperand{out[0]->data<float>(), qn * sq * hv, sq * hv, hv};
    const float scale = a_.scale != 0.0f ? a_.scale : 1.0f / std::sqrt(static_cast<float>(h));
    Attend({b, qn, kvn, sq, t, h, hv}, qo, {pk.data(), kvn * t * h, t * h, h},
           {pv.data(), kvn * t * hv, t * hv, hv}, scale, row,
           {false, nullptr, qk != nullptr && a_.qk_mode == 3 ? qk : nullptr}, oo);
    for (size_t o : {size_t{1}, size_t{2}}) {
      if (!Wanted(out, o)) continue;
      const Dims pd = {b, kvn, t, o == 1 ? h : hv};
      DYNVM_RETURN_IF_ERROR(WritePresent(ctx, out[o], pd, o == 1 ? pk : pv, kOp));
    }
    return absl::OkStatus();
  }
  std::string name() const override { return "attention.onnx.f32.ref"; }

 private:
  // present[b, n] = past (input i + 3) ++ input i (K or V, 3-D or 4-D), head size hd.
  static void Present4(Inputs in, size_t i, int r, int64_t b, int64_t n, int64_t s, int64_t past,
                       int64_t hd, FVec& dst) {
    const FVec x = Floats(*in[i]);
    const FVec p = past > 0 ? Floats(*in[i + 3]) : FVec(Res());
    const int64_t t = past + s;
    for (int64_t bi = 0; bi < b; ++bi) {
      for (int64_t h = 0; h < n; ++h) {
        float* d = dst.data() + (bi * n + h) * t * hd;
        std::copy_n(p.data() + (past > 0 ? (bi * n + h) * past * hd : 0), past * hd, d);
        for (int64_t j = 0; j < s; ++j) {
          const int64_t from =
              r == 3 ? (bi * s + j) * n * hd + h * hd : ((bi * n + h) * s + j) * hd;
          std::copy_n(x.data() + from, hd, d + (past + j) * hd);
        }
      }
    }
  }

  OnnxAttnAttrs a_;
};

// Runs an f32 kernel on f16 operands (GroupQueryAttention and Attention 23, which ONNX Runtime
// runs in f16 on CPU too): the f16 inputs widened to f32, the outputs narrowed back to f16.
class F16Adapter final : public Kernel {
 public:
  explicit F16Adapter(std::unique_ptr<Kernel> inner) : inner_(std::move(inner)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    std::vector<Tensor> wide(in.size());
    std::vector<const Tensor*> ins(in.begin(), in.end());
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i] == nullptr || in[i]->dtype() != DType::kF16) continue;
      std::vector<float> v(static_cast<size_t>(in[i]->numel()));
      const Half* p = in[i]->data<Half>();
      for (int64_t e = 0; e < in[i]->numel(); ++e) v[e] = p[in[i]->ElementOffset(e)];
      DYNVM_ASSIGN_OR_RETURN(wide[i], Tensor::FromVector<float>(DType::kF32, in[i]->dims(), v));
      ins[i] = &wide[i];
    }
    std::vector<Tensor> tmp(out.size());
    std::vector<Tensor*> outs(out.size(), nullptr);
    for (size_t o = 0; o < out.size(); ++o) {
      if (out[o] != nullptr) outs[o] = &tmp[o];
    }
    DYNVM_RETURN_IF_ERROR(inner_->Run(ctx, ins, outs));
    for (size_t o = 0; o < out.size(); ++o) {
      if (out[o] == nullptr) continue;
      DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[o], DType::kF16, tmp[o].dims(), name()));
      const float* src = tmp[o].data<float>();
      Half* dst = out[o]->data<Half>();
      for (int64_t e = 0; e < tmp[o].numel(); ++e) dst[e] = Half(src[e]);
    }
    return absl::OkStatus();
  }
  std::string name() const override { return absl::StrCat(inner_->name(), ".f16"); }

 private:
  std::unique_ptr<Kernel> inner_;
};

bool InputIsF16(const KernelSpec& spec, size_t i) {
  return i < spec.inputs.size() && spec.inputs[i].dtype == static_cast<uint8_t>(DType::kF16);
}

bool InputIsF32(const KernelSpec& spec, size_t i) {
  return i < spec.inputs.size() && spec.inputs[i].dtype == static_cast<uint8_t>(DType::kF32);
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeGroupQueryAttention(const KernelSpec& s) {
  if (!InputIsF32(s, 0) && !InputIsF16(s, 0)) {
    return absl::UnimplementedError("GroupQueryAttention: query must be f32 or f16");
  }
  DYNVM_ASSIGN_OR_RETURN(GqaAttrs a, GetGqaAttrs(s));
  std::unique_ptr<Kernel> k = std::make_unique<GroupQueryAttentionKernel>(a);
  if (InputIsF16(s, 0)) return std::make_unique<F16Adapter>(std::move(k));
  return k;
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeMultiHeadAttention(const KernelSpec& s) {
  if (!InputIsF32(s, 0)) {
    return absl::UnimplementedError(
        "MultiHeadAttention: query must be f32 (float16 is not supported)");
  }
  DYNVM_ASSIGN_OR_RETURN(MhaAttrs a, GetMhaAttrs(s, "MultiHeadAttention"));
  return std::make_unique<MultiHeadAttentionKernel>(a);
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeMsftAttention(const KernelSpec& s) {
  if (!InputIsF32(s, 0)) {
    return absl::UnimplementedError("Attention (com.microsoft): input must be f32");
  }
  DYNVM_ASSIGN_OR_RETURN(MhaAttrs a, GetMhaAttrs(s, "Attention (com.microsoft)"));
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, s.GetInts("qkv_hidden_sizes", {}));
  return std::make_unique<MsftAttentionKernel>(a, std::move(sizes));
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeOnnxAttention(const KernelSpec& s) {
  if (!InputIsF32(s, 0) && !InputIsF16(s, 0)) {
    return absl::UnimplementedError("Attention: Q must be f32 or f16");
  }
  DYNVM_ASSIGN_OR_RETURN(OnnxAttnAttrs a, GetOnnxAttnAttrs(s));
  std::unique_ptr<Kernel> k = std::make_unique<OnnxAttentionKernel>(a);
  if (InputIsF16(s, 0)) return std::make_unique<F16Adapter>(std::move(k));
  return k;
}

}  // namespace

absl::StatusOr<GqaAttrs> GetGqaAttrs(const KernelSpec& s) {
  GqaAttrs a;
  DYNVM_ASSIGN_OR_RETURN(a.heads, s.GetInt("num_heads", 0));
  DYNVM_ASSIGN_OR_RETURN(a.kv_heads, s.GetInt("kv_num_heads", 0));
  DYNVM_ASSIGN_OR_RETURN(a.local_window, s.GetInt("local_window_size", -1));
  DYNVM_ASSIGN_OR_RETURN(a.scale, s.GetFloat("scale", 0.0f));
  DYNVM_ASSIGN_OR_RETURN(a.softcap, s.GetFloat("softcap", 0.0f));
  DYNVM_ASSIGN_OR_RETURN(int64_t rotary, s.GetInt("do_rotary", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t interleaved, s.GetInt("rotary_interleaved", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t smooth, s.GetInt("smooth_softmax", 0));
  if (a.heads <= 0 || a.kv_heads <= 0 || a.heads % a.kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GroupQueryAttention: num_heads (", a.heads,
                     ") must be a positive multiple of kv_num_heads (", a.kv_heads, ")"));
  }
  a.rotary = rotary != 0;
  a.interleaved = interleaved != 0;
  a.smooth = smooth != 0;
  return a;
}

absl::StatusOr<OnnxAttnAttrs> GetOnnxAttnAttrs(const KernelSpec& s) {
  OnnxAttnAttrs a;
  DYNVM_ASSIGN_OR_RETURN(a.q_heads, s.GetInt("q_num_heads", 0));
  DYNVM_ASSIGN_OR_RETURN(a.kv_heads, s.GetInt("kv_num_heads", 0));
  DYNVM_ASSIGN_OR_RETURN(a.scale, s.GetFloat("scale", 0.0f));
  DYNVM_ASSIGN_OR_RETURN(a.softcap, s.GetFloat("softcap", 0.0f));
  DYNVM_ASSIGN_OR_RETURN(int64_t causal, s.GetInt("is_causal", 0));
  DYNVM_ASSIGN_OR_RETURN(a.qk_mode, s.GetInt("qk_matmul_output_mode", 0));
  if (a.qk_mode < 0 || a.qk_mode > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("Attention: qk_matmul_output_mode ", a.qk_mode, " is not 0, 1, 2 or 3"));
  }
  a.causal = causal != 0;
  return a;
}

absl::StatusOr<MhaAttrs> GetMhaAttrs(const KernelSpec& s, absl::string_view op) {
  MhaAttrs a;
  DYNVM_ASSIGN_OR_RETURN(a.heads, s.GetInt("num_heads", 0));
  DYNVM_ASSIGN_OR_RETURN(a.scale, s.GetFloat("scale", 0.0f));
  DYNVM_ASSIGN_OR_RETURN(a.mask_filter, s.GetFloat("mask_filter_value", -10000.0f));
  DYNVM_ASSIGN_OR_RETURN(int64_t uni, s.GetInt("unidirectional", 0));
  if (a.heads <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": num_heads must be positive"));
  }
  a.causal = uni != 0;
  return a;
}

void RegisterMsftAttentionKernels(KernelRegistry& r) {
  auto add = [&r](const char* op, KernelFactory factory) {
    r.Register({kMsft, op, Device::kCPU, "reference", kReferencePriority, std::move(factory)});
  };
  add("GroupQueryAttention", MakeGroupQueryAttention);
  add("MultiHeadAttention", MakeMultiHeadAttention);
  add("Attention", MakeMsftAttention);
  r.Register({"", "Attention", Device::kCPU, "reference", kReferencePriority, MakeOnnxAttention});
}

}  // namespace dynvm::reference
