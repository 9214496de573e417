// Attention microkernels (attention.h): one always-inline body per microkernel, instantiated per
// level (target.h). Softcap is FastTanh per element; the rotary halves are two unit-stride
// streams (vectorized as such), the interleaved pairs a stride-2 loop the compiler vectorizes
// with shuffles.
//
// The grouped-query products (GroupScores, GroupWeightedSum) are intrinsics per level: the
// scores are reductions (the vectorizer keeps f32 sums in order, so it would not vectorize
// them), and the weighted sum keeps a block of heads x columns of accumulators in registers
// while one row of V is loaded. Blocks of up to four heads: scores take one accumulator vector
// per head and one k vector per step, reduced by one tree of VHADDPS for the four heads (a head
// with no row in the block sums zeros beside the others, so its sums are those of any block);
// the weighted sum takes 4 x 64 columns (AVX-512: 16 accumulators) or 4 x 16 (AVX2: 8), then
// narrower steps and a masked tail, each element one multiply-add per key in key order.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu {
namespace {

DYNVM_ALWAYS_INLINE void SoftcapBody(int64_t n, float cap, const float* x, float* y) {
  const float inv = 1.0f / cap;
  DYNVM_IVDEP
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float r = cap * FastTanh(v * inv);
    y[i] = v != v ? v : r;
  }
}

DYNVM_ALWAYS_INLINE void RotaryBody(int64_t half, bool interleaved, const float* cos,
                                    const float* sin, const float* x, float* y) {
  if (!interleaved) {
    const float* x1 = x + half;
    float* y1 = y + half;
    DYNVM_IVDEP
    for (int64_t i = 0; i < half; ++i) {
      const float a = x[i], b = x1[i];
      y[i] = a * cos[i] - b * sin[i];
      y1[i] = a * sin[i] + b * cos[i];
    }
    return;
  }
  DYNVM_IVDEP
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[2 * i], b = x[2 * i + 1];
    y[2 * i] = a * cos[i] - b * sin[i];
    y[2 * i + 1] = a * sin[i] + b * cos[i];
  }
}

DYNVM_ALWAYS_INLINE void RotateHalfBody(int64_t half, const float* cos, const float* sin,
                                        const float* x, float* y) {
  const float* x1 = x + half;
  const float* c1 = cos + half;
  const float* s1 = sin + half;
  float* y1 = y + half;
  DYNVM_IVDEP
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x1[i];
    y[i] = a * cos[i] - b * sin[i];
    y1[i] = b * c1[i] + a * s1[i];
  }
}

void GroupScoresPortable(int64_t heads, int64_t n, int64_t d, float alpha, const float* q,
                         int64_t ldq, const float* k, int64_t ldk, float* s, int64_t lds) {
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < n; ++j) {
      float t = 0.0f;
      for (int64_t c = 0; c < d; ++c) t += q[h * ldq + c] * k[j * ldk + c];
      s[h * lds + j] = alpha * t;
    }
  }
}

void GroupWeightedSumPortable(int64_t heads, int64_t n, int64_t dv, const float* p, int64_t ldp,
                              const float* v, int64_t ldv, float* y, int64_t ldy) {
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t c = 0; c < dv; ++c) {
      float t = 0.0f;
      for (int64_t j = 0; j < n; ++j) t += p[h * ldp + j] * v[j * ldv + c];
      y[h * ldy + c] = t;
    }
  }
}

#define DYNVM_ATTENTION_LEVEL(ATTR, SUFFIX)                                                      \
  ATTR void Softcap##SUFFIX(int64_t n, float cap, const float* x, float* y) {                    \
    SoftcapBody(n, cap, x, y);                                                                   \
  }                                                                                              \
  ATTR void Rotary##SUFFIX(int64_t half, bool interleaved, const float* cos, const float* sin,   \
                           const float* x, float* y) {                                           \
    RotaryBody(half, interleaved, cos, sin, x, y);                                               \
  }                                                                                              \
  ATTR void RotateHalf##SUFFIX(int64_t half, const float* cos, const float* sin, const float* x, \
                               float* y) {                                                       \
    RotateHalfBody(half, cos, sin, x, y);                                                        \
  }

DYNVM_ATTENTION_LEVEL(, Portable)
#if DYNVM_CPU_X86
DYNVM_ATTENTION_LEVEL(DYNVM_AVX2_LOOPS, Avx2)
DYNVM_ATTENTION_LEVEL(DYNVM_AVX512, Avx512)
#endif

#undef DYNVM_ATTENTION_LEVEL

#if DYNVM_CPU_X86

// The lane sums of four vectors, [sum a0, sum a1, sum a2, sum a3], by one fixed tree.
DYNVM_AVX2 DYNVM_ALWAYS_INLINE __m128 Sum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// Lanes [0, r) of eight set (AVX2's masked loads and stores), r in [0, 8].
DYNVM_AVX2 DYNVM_ALWAYS_INLINE __m256i Lanes8(int64_t r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

template <int kHeads>
DYNVM_AVX2 void GroupScoresBlockAvx2(int64_t n, int64_t d, float alpha, const float* q, int64_t ldq,
                                     const float* k, int64_t ldk, float* s, int64_t lds) {
  const int64_t whole = d / 8 * 8;
  const __m256i tail = Lanes8(d - whole);
  for (int64_t j = 0; j < n; ++j) {
    const float* kj = k + j * ldk;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t c = 0; c < whole; c += 8) {
      const __m256 kv = _mm256_loadu_ps(kj + c);
      for (int h = 0; h < kHeads; ++h) {
        acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * ldq + c), kv, acc[h]);
      }
    }
    if (whole < d) {
      const __m256 kv = _mm256_maskload_ps(kj + whole, tail);
      for (int h = 0; h < kHeads; ++h) {
        acc[h] = _mm256_fmadd_ps(_mm256_maskload_ps(q + h * ldq + whole, tail), kv, acc[h]);
      }
    }
    alignas(16) float sum[4];
    _mm_store_ps(sum, _mm_mul_ps(Sum4(acc[0], acc[1], acc[2], acc[3]), _mm_set1_ps(alpha)));
    for (int h = 0; h < kHeads; ++h) s[h * lds + j] = sum[h];
  }
}

template <int kHeads>
DYNVM_AVX512 void GroupScoresBlockAvx512(int64_t n, int64_t d, float alpha, const float* q,
                                         int64_t ldq, const float* k, int64_t ldk, float* s,
                                         int64_t lds) {
  const int64_t whole = d / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (d - whole)) - 1);
  for (int64_t j = 0; j < n; ++j) {
    const float* kj = k + j * ldk;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    for (int64_t c = 0; c < whole; c += 16) {
      const __m512 kv = _mm512_loadu_ps(kj + c);
      for (int h = 0; h < kHeads; ++h) {
        acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + h * ldq + c), kv, acc[h]);
      }
    }
    if (whole < d) {
      const __m512 kv = _mm512_maskz_loadu_ps(tail, kj + whole);
      for (int h = 0; h < kHeads; ++h) {
        acc[h] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, q + h * ldq + whole), kv, acc[h]);
      }
    }
    __m256 half[4];
    for (int h = 0; h < 4; ++h) {
      half[h] = _mm256_add_ps(_mm512_extractf32x8_ps(acc[h], 0), _mm512_extractf32x8_ps(acc[h], 1));
    }
    alignas(16) float sum[4];
    _mm_store_ps(sum, _mm_mul_ps(Sum4(half[0], half[1], half[2], half[3]), _mm_set1_ps(alpha)));
    for (int h = 0; h < kHeads; ++h) s[h * lds + j] = sum[h];
  }
}

// Columns [c, c + 16 * kVectors) of a block of heads over every key (AVX-512).
template <int kHeads, int kVectors>
DYNVM_AVX512 DYNVM_ALWAYS_INLINE void WeightedColumnsAvx512(int64_t n, const float* p, int64_t ldp,
                                                            const float* v, int64_t ldv, float* y,
                                                            int64_t ldy, __mmask16 last) {
  __m512 acc[kHeads][kVectors];
  for (int h = 0; h < kHeads; ++h) {
    for (int i = 0; i < kVectors; ++i) acc[h][i] = _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < n; ++j) {
    const float* vj = v + j * ldv;
    __m512 x[kVectors];
    for (int i = 0; i < kVectors; ++i) {
      x[i] = i + 1 < kVectors ? _mm512_loadu_ps(vj + 16 * i)
                              : _mm512_maskz_loadu_ps(last, vj + 16 * i);
    }
    for (int h = 0; h < kHeads; ++h) {
      const __m512 w = _mm512_set1_ps(p[h * ldp + j]);
      for (int i = 0; i < kVectors; ++i) acc[h][i] = _mm512_fmadd_ps(w, x[i], acc[h][i]);
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    for (int i = 0; i < kVectors; ++i) {
      if (i + 1 < kVectors) {
        _mm512_storeu_ps(y + h * ldy + 16 * i, acc[h][i]);
      } else {
        _mm512_mask_storeu_ps(y + h * ldy + 16 * i, last, acc[h][i]);
      }
    }
  }
}

template <int kHeads>
DYNVM_AVX512 void GroupWeightedSumBlockAvx512(int64_t n, int64_t dv, const float* p, int64_t ldp,
                                              const float* v, int64_t ldv, float* y, int64_t ldy) {
  const __mmask16 all = 0xffff;
  int64_t c = 0;
  for (; c + 64 <= dv; c += 64) {
    WeightedColumnsAvx512<kHeads, 4>(n, p, ldp, v + c, ldv, y + c, ldy, all);
  }
  for (; c < dv; c += 16) {
    const int64_t r = std::min<int64_t>(16, dv - c);
    WeightedColumnsAvx512<kHeads, 1>(n, p, ldp, v + c, ldv, y + c, ldy,
                                     static_cast<__mmask16>((1u << r) - 1));
  }
}

// Columns [c, c + 8 * kVectors) of a block of heads over every key (AVX2; `last` the lanes of
// the last vector).
template <int kHeads, int kVectors>
DYNVM_AVX2 DYNVM_ALWAYS_INLINE void WeightedColumnsAvx2(int64_t n, const float* p, int64_t ldp,
                                                        const float* v, int64_t ldv, float* y,
                                                        int64_t ldy, __m256i last, bool whole) {
  __m256 acc[kHeads][kVectors];
  for (int h = 0; h < kHeads; ++h) {
    for (int i = 0; i < kVectors; ++i) acc[h][i] = _mm256_setzero_ps();
  }
  for (int64_t j = 0; j < n; ++j) {
    const float* vj = v + j * ldv;
    __m256 x[kVectors];
    for (int i = 0; i < kVectors; ++i) {
      x[i] = whole || i + 1 < kVectors ? _mm256_loadu_ps(vj + 8 * i)
                                       : _mm256_maskload_ps(vj + 8 * i, last);
    }
    for (int h = 0; h < kHeads; ++h) {
      const __m256 w = _mm256_set1_ps(p[h * ldp + j]);
      for (int i = 0; i < kVectors; ++i) acc[h][i] = _mm256_fmadd_ps(w, x[i], acc[h][i]);
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    for (int i = 0; i < kVectors; ++i) {
      if (whole || i + 1 < kVectors) {
        _mm256_storeu_ps(y + h * ldy + 8 * i, acc[h][i]);
      } else {
        _mm256_maskstore_ps(y + h * ldy + 8 * i, last, acc[h][i]);
      }
    }
  }
}

template <int kHeads>
DYNVM_AVX2 void GroupWeightedSumBlockAvx2(int64_t n, int64_t dv, const float* p, int64_t ldp,
                                          const float* v, int64_t ldv, float* y, int64_t ldy) {
  const __m256i all = Lanes8(8);
  int64_t c = 0;
  for (; c + 16 <= dv; c += 16) {
    WeightedColumnsAvx2<kHeads, 2>(n, p, ldp, v + c, ldv, y + c, ldy, all, true);
  }
  for (; c < dv; c += 8) {
    const int64_t r = std::min<int64_t>(8, dv - c);
    WeightedColumnsAvx2<kHeads, 1>(n, p, ldp, v + c, ldv, y + c, ldy, Lanes8(r), r == 8);
  }
}

// Heads in blocks of four, the last block of 1-3 heads.
#define DYNVM_GROUP_LEVEL(ATTR, SUFFIX)                                                            \
  ATTR void GroupScores##SUFFIX(int64_t heads, int64_t n, int64_t d, float alpha, const float* q,  \
                                int64_t ldq, const float* k, int64_t ldk, float* s, int64_t lds) { \
    int64_t h = 0;                                                                                 \
    for (; h + 4 <= heads; h += 4) {                                                               \
      GroupScoresBlock##SUFFIX<4>(n, d, alpha, q + h * ldq, ldq, k, ldk, s + h * lds, lds);        \
    }                                                                                              \
    const float* qh = q + h * ldq;                                                                 \
    float* sh = s + h * lds;                                                                       \
    switch (heads - h) {                                                                           \
      case 3:                                                                                      \
        GroupScoresBlock##SUFFIX<3>(n, d, alpha, qh, ldq, k, ldk, sh, lds);                        \
        break;                                                                                     \
      case 2:                                                                                      \
        GroupScoresBlock##SUFFIX<2>(n, d, alpha, qh, ldq, k, ldk, sh, lds);                        \
        break;                                                                                     \
      case 1:                                                                                      \
        GroupScoresBlock##SUFFIX<1>(n, d, alpha, qh, ldq, k, ldk, sh, lds);                        \
        break;                                                                                     \
      default:                                                                                     \
        break;                                                                                     \
    }                                                                                              \
  }                                                                                                \
  ATTR void GroupWeightedSum##SUFFIX(int64_t heads, int64_t n, int64_t dv, const float* p,         \
                                     int64_t ldp, const float* v, int64_t ldv, float* y,           \
                                     int64_t ldy) {                                                \
    int64_t h = 0;                                                                                 \
    for (; h + 4 <= heads; h += 4) {                                                               \
      GroupWeightedSumBlock##SUFFIX<4>(n, dv, p + h * ldp, ldp, v, ldv, y + h * ldy, ldy);         \
    }                                                                                              \
    const float* ph = p + h * ldp;                                                                 \
    float* yh = y + h * ldy;                                                                       \
    switch (heads - h) {                                                                           \
      case 3:                                                                                      \
        GroupWeightedSumBlock##SUFFIX<3>(n, dv, ph, ldp, v, ldv, yh, ldy);                         \
        break;                                                                                     \
      case 2:                                                                                      \
        GroupWeightedSumBlock##SUFFIX<2>(n, dv, ph, ldp, v, ldv, yh, ldy);                         \
        break;                                                                                     \
      case 1:                                                                                      \
        GroupWeightedSumBlock##SUFFIX<1>(n, dv, ph, ldp, v, ldv, yh, ldy);                         \
        break;                                                                                     \
      default:                                                                                     \
        break;                                                                                     \
    }                                                                                              \
  }

DYNVM_GROUP_LEVEL(DYNVM_AVX2, Avx2)
DYNVM_GROUP_LEVEL(DYNVM_AVX512, Avx512)

#undef DYNVM_GROUP_LEVEL

#endif  // DYNVM_CPU_X86

}  // namespace

namespace internal {

void FillAttention(Isa isa, Dispatch* d) {
  d->softcap = &SoftcapPortable;
  d->rotary = &RotaryPortable;
  d->rotate_half = &RotateHalfPortable;
  d->group_scores = &GroupScoresPortable;
  d->group_weighted_sum = &GroupWeightedSumPortable;
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) {
    d->softcap = &SoftcapAvx2;
    d->rotary = &RotaryAvx2;
    d->rotate_half = &RotateHalfAvx2;
    d->group_scores = &GroupScoresAvx2;
    d->group_weighted_sum = &GroupWeightedSumAvx2;
  }
  if (isa >= Isa::kAvx512) {
    d->softcap = &SoftcapAvx512;
    d->rotary = &RotaryAvx512;
    d->rotate_half = &RotateHalfAvx512;
    d->group_scores = &GroupScoresAvx512;
    d->group_weighted_sum = &GroupWeightedSumAvx512;
  }
#endif
}

}  // namespace internal

void Softcap(int64_t n, float cap, const float* x, float* y) {
  internal::Table().softcap(n, cap, x, y);
}

void Rotary(int64_t half, bool interleaved, const float* cos, const float* sin, const float* x,
            float* y) {
  internal::Table().rotary(half, interleaved, cos, sin, x, y);
}

}  // namespace dynvm::cpu

namespace dynvm::cpu {

void RotateHalf(int64_t half, const float* cos, const float* sin, const float* x, float* y) {
  internal::Table().rotate_half(half, cos, sin, x, y);
}

void GroupScores(int64_t heads, int64_t n, int64_t d, float alpha, const float* q, int64_t ldq,
                 const float* k, int64_t ldk, float* s, int64_t lds) {
  internal::Table().group_scores(heads, n, d, alpha, q, ldq, k, ldk, s, lds);
}

void GroupWeightedSum(int64_t heads, int64_t n, int64_t dv, const float* p, int64_t ldp,
                      const float* v, int64_t ldv, float* y, int64_t ldy) {
  internal::Table().group_weighted_sum(heads, n, dv, p, ldp, v, ldv, y, ldy);
}

}  // namespace dynvm::cpu
