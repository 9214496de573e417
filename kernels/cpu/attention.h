// Attention microkernels (f32): the per-row steps of the fused attention kernels that are not a
// product (kernels/dnnl/msft_attention.cc: scores by Gemv or dnnl_sgemm, softmax by
// SoftmaxRows): the softcap of a row of scores and rotary embeddings (RoPE) of a head's values.
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

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_ATTENTION_H_
