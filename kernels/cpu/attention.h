// Attention microkernels (f32): the per-row steps of the fused attention kernels that are not a
// product (kernels/dnnl/msft_attention.cc: scores by Gemv or dnnl_sgemm, softmax by
// SoftmaxRows): the softcap of a row of scores and rotary embeddings (RoPE) of a head's values;
// and the two products of a grouped-query decode step (kernels/dnnl/attention.cc), where the
// query heads of one key/value head read its keys and values once for all of them.
// Pointer in, pointer out, one thread; y may be x. Portable, AVX2+FMA and AVX-512
// implementations (isa.h), the same loop per level: the levels may differ in the last bits where
// a multiply-add is fused (portable has none).
#ifndef DYNVM_KERNELS_CPU_ATTENTION_H_
#define DYNVM_KERNELS_CPU_ATTENTION_H_

#include <cstdint>

namespace dynvm::cpu {

// y = cap * tanh(x / cap) (cap > 0; tanh by FastTanh, fast_math.h: within 2e-7 absolute of
// libm's). NaN gives NaN; +-inf give +-cap.
void Softcap(int64_t n, float cap, const float* x, float* y);

// Rotary embedding of the first 2 half values of one head: with c = cos[i], s = sin[i] for
// i < half, the pairs (x[i], x[i + half]) (interleaved false: GPT-NeoX / Llama halves) or
// (x[2i], x[2i + 1]) (interleaved true: GPT-J pairs) become (a c - b s, a s + b c). Values past
// 2 half are not touched (y keeps what it had: copy them when y is not x).
void Rotary(int64_t half, bool interleaved, const float* cos, const float* sin, const float* x,
            float* y);

// The rotate-half form with full-width tables (as exporters write RoPE: x cos + rotate_half(x)
// sin, rotate_half(x) = [-x[half:], x[:half]]): y[i] = x[i] cos[i] - x[i + half] sin[i] and
// y[i + half] = x[i + half] cos[i + half] + x[i] sin[i + half] for i < half.
void RotateHalf(int64_t half, const float* cos, const float* sin, const float* x, float* y);

// Grouped-query scores: s[h * lds + j] = alpha * sum_c q[h * ldq + c] k[j * ldk + c] for h <
// heads, j < n, c < d (q and k unit-stride along c). Each key row is read once for up to four
// heads at a time. The sum over c of one (h, j) runs in one fixed order per level, whatever
// `heads` and the head's place among them (the lanes of one vector per head, reduced by one
// tree, then the tail in order): a head's scores do not depend on how many run beside it.
void GroupScores(int64_t heads, int64_t n, int64_t d, float alpha, const float* q, int64_t ldq,
                 const float* k, int64_t ldk, float* s, int64_t lds);

// Grouped-query weighted sum: y[h * ldy + c] = sum_j p[h * ldp + j] v[j * ldv + c] for h <
// heads, c < dv, j < n in order (one multiply-add per j, fused from AVX2 on), v unit-stride along
// c. Each row of v is read once per four heads; a y element's sum does not depend on `heads`.
void GroupWeightedSum(int64_t heads, int64_t n, int64_t dv, const float* p, int64_t ldp,
                      const float* v, int64_t ldv, float* y, int64_t ldy);

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_ATTENTION_H_
