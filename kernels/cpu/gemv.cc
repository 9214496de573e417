// The GEMV microkernel (gemv.h). Two forms:
// - Dot ('T', a [N, K] weight: a Linear layer's, an RNN's): y[j] = x . w[j, :], four rows at a
//   time (four streams). AVX-512 adds software prefetch on Intel: while four rows are read, the
//   four rows eight ahead are prefetched, one cache line per row per step; on the LSTM LM's
//   weights (4.7 MB per token, in L3) an AVX-512 Xeon read ~118 GB/s against ~92 for the generic
//   loop, whose hardware-prefetched streams start cold at every row group. AMD Zen 4's hardware
//   prefetcher keeps up, and the prefetch instructions cost it 20% (FillGemv). AVX2 runs two 8-lane
//   accumulators per row (eight FMA chains from registers): GCC's AVX2 code of the generic 16-lane
//   loop kept its accumulators on the stack (about 2 GFLOP/s on an LSTM's 512x128 recurrent
//   weights, 39% of the CRNN's time on the AVX2 EPYC).
// - Axpy ('N', a row-major [K, N] weight: torch's MatMul export of a Linear layer): 64 columns
//   of y accumulate x[i] * b[i, :] down the rows. AVX2 holds the 64 columns in eight registers
//   (GCC spilled the generic loop's 16-lane accumulators: 81 stack accesses); GPT decode went
//   from 1.29-1.30x to 1.37-1.60x ONNX Runtime on the AVX2 EPYC
//   (docs/results/avx2-gemvcols-gpt-op1{4,7}-2026-11-28.txt). AVX-512 streams whole rows into
//   an L1 tile of accumulators (GemvColsAvx512: the strips read down the rows fell behind the
//   prefetcher from K of about 1024).
// Every level sums each output in its own fixed order; the levels differ in the last bits
// (lane counts differ, and portable has no FMA).
#include "kernels/cpu/gemv.h"

#include <algorithm>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu {
namespace {

constexpr int kLanes = 16;

// An unaligned, may-alias view of 16 floats (GCC vector type).
typedef float V16f __attribute__((vector_size(64)));
typedef float V16fU __attribute__((vector_size(64), aligned(4), may_alias));

// Loads and stores of V16f as macros, not helper functions: a helper compiled without the
// caller's target would pass vectors under a different ABI.
#define DYNVM_LOADV(p) (*reinterpret_cast<const V16fU*>(p))
#define DYNVM_STOREV(p, v) (*reinterpret_cast<V16fU*>(p) = (v))

DYNVM_ALWAYS_INLINE float Scaled(float acc, float alpha, float beta, const float* y) {
  return beta == 0.0f ? alpha * acc : alpha * acc + beta * *y;
}

// Dot form: y[j] = x . w[j, :] over row-major rows of w, four rows at a time (four streams).
DYNVM_ALWAYS_INLINE void GemvRowsBody(int64_t n, int64_t k, float alpha, const float* x,
                                      const float* w, int64_t ldw, float beta, float* y) {
  const int64_t kv = k - k % kLanes;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* r0 = w + j * ldw;
    const float* r1 = r0 + ldw;
    const float* r2 = r1 + ldw;
    const float* r3 = r2 + ldw;
    V16f a0 = V16f{}, a1 = V16f{}, a2 = V16f{}, a3 = V16f{};
    for (int64_t i = 0; i < kv; i += kLanes) {
      const V16f xv = DYNVM_LOADV(x + i);
      a0 += DYNVM_LOADV(r0 + i) * xv;
      a1 += DYNVM_LOADV(r1 + i) * xv;
      a2 += DYNVM_LOADV(r2 + i) * xv;
      a3 += DYNVM_LOADV(r3 + i) * xv;
    }
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (int l = 0; l < kLanes; ++l) {
      s0 += a0[l];
      s1 += a1[l];
      s2 += a2[l];
      s3 += a3[l];
    }
    for (int64_t i = kv; i < k; ++i) {
      s0 += r0[i] * x[i];
      s1 += r1[i] * x[i];
      s2 += r2[i] * x[i];
      s3 += r3[i] * x[i];
    }
    y[j] = Scaled(s0, alpha, beta, y + j);
    y[j + 1] = Scaled(s1, alpha, beta, y + j + 1);
    y[j + 2] = Scaled(s2, alpha, beta, y + j + 2);
    y[j + 3] = Scaled(s3, alpha, beta, y + j + 3);
  }
  for (; j < n; ++j) {
    const float* r = w + j * ldw;
    V16f a = V16f{};
    for (int64_t i = 0; i < kv; i += kLanes) a += DYNVM_LOADV(r + i) * DYNVM_LOADV(x + i);
    float s = 0.0f;
    for (int l = 0; l < kLanes; ++l) s += a[l];
    for (int64_t i = kv; i < k; ++i) s += r[i] * x[i];
    y[j] = Scaled(s, alpha, beta, y + j);
  }
}

// Axpy form: y[j0:j0+64] accumulates x[i] * b[i, j0:j0+64] down the rows of a row-major b.
DYNVM_ALWAYS_INLINE void GemvColsBody(int64_t n, int64_t k, float alpha, const float* x,
                                      const float* b, int64_t ldb, float beta, float* y) {
  int64_t j = 0;
#define DYNVM_FINISH(acc, at)                              \
  do {                                                     \
    V16f out = (acc)*alpha;                                \
    if (beta != 0.0f) out += DYNVM_LOADV(y + (at)) * beta; \
    DYNVM_STOREV(y + (at), out);                           \
  } while (0)
  for (; j + 4 * kLanes <= n; j += 4 * kLanes) {
    V16f a0 = V16f{}, a1 = V16f{}, a2 = V16f{}, a3 = V16f{};
    for (int64_t i = 0; i < k; ++i) {
      const float* row = b + i * ldb + j;
      const V16f xv = V16f{} + x[i];
      a0 += DYNVM_LOADV(row) * xv;
      a1 += DYNVM_LOADV(row + kLanes) * xv;
      a2 += DYNVM_LOADV(row + 2 * kLanes) * xv;
      a3 += DYNVM_LOADV(row + 3 * kLanes) * xv;
    }
    DYNVM_FINISH(a0, j);
    DYNVM_FINISH(a1, j + kLanes);
    DYNVM_FINISH(a2, j + 2 * kLanes);
    DYNVM_FINISH(a3, j + 3 * kLanes);
  }
  for (; j + kLanes <= n; j += kLanes) {
    V16f a = V16f{};
    for (int64_t i = 0; i < k; ++i) a += DYNVM_LOADV(b + i * ldb + j) * (V16f{} + x[i]);
    DYNVM_FINISH(a, j);
  }
#undef DYNVM_FINISH
  for (; j < n; ++j) {
    float s = 0.0f;
    for (int64_t i = 0; i < k; ++i) s += x[i] * b[i * ldb + j];
    y[j] = Scaled(s, alpha, beta, y + j);
  }
}

void GemvPortable(char trans, int64_t n, int64_t k, float alpha, const float* x, const float* b,
                  int64_t ldb, float beta, float* y) {
  if (trans == 'T') {
    GemvRowsBody(n, k, alpha, x, b, ldb, beta, y);
  } else {
    GemvColsBody(n, k, alpha, x, b, ldb, beta, y);
  }
}

#if DYNVM_CPU_X86

// ---- AVX2 ----

// The sum of 8 lanes.
DYNVM_AVX2 DYNVM_ALWAYS_INLINE float SumAvx2(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

DYNVM_AVX2 void GemvRowsAvx2(int64_t n, int64_t k, float alpha, const float* x, const float* w,
                             int64_t ldw, float beta, float* y) {
  const int64_t kv = k - k % kLanes;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* r0 = w + j * ldw;
    const float* r1 = r0 + ldw;
    const float* r2 = r1 + ldw;
    const float* r3 = r2 + ldw;
    __m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
    for (int64_t i = 0; i < kv; i += kLanes) {
      const __m256 xl = _mm256_loadu_ps(x + i), xh = _mm256_loadu_ps(x + i + 8);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + i), xl, a0);
      b0 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + i + 8), xh, b0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(r1 + i), xl, a1);
      b1 = _mm256_fmadd_ps(_mm256_loadu_ps(r1 + i + 8), xh, b1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(r2 + i), xl, a2);
      b2 = _mm256_fmadd_ps(_mm256_loadu_ps(r2 + i + 8), xh, b2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(r3 + i), xl, a3);
      b3 = _mm256_fmadd_ps(_mm256_loadu_ps(r3 + i + 8), xh, b3);
    }
    float s0 = SumAvx2(_mm256_add_ps(a0, b0)), s1 = SumAvx2(_mm256_add_ps(a1, b1));
    float s2 = SumAvx2(_mm256_add_ps(a2, b2)), s3 = SumAvx2(_mm256_add_ps(a3, b3));
    for (int64_t i = kv; i < k; ++i) {
      s0 += r0[i] * x[i];
      s1 += r1[i] * x[i];
      s2 += r2[i] * x[i];
      s3 += r3[i] * x[i];
    }
    y[j] = Scaled(s0, alpha, beta, y + j);
    y[j + 1] = Scaled(s1, alpha, beta, y + j + 1);
    y[j + 2] = Scaled(s2, alpha, beta, y + j + 2);
    y[j + 3] = Scaled(s3, alpha, beta, y + j + 3);
  }
  for (; j < n; ++j) {
    const float* r = w + j * ldw;
    __m256 a = _mm256_setzero_ps(), b = a;
    for (int64_t i = 0; i < kv; i += kLanes) {
      a = _mm256_fmadd_ps(_mm256_loadu_ps(r + i), _mm256_loadu_ps(x + i), a);
      b = _mm256_fmadd_ps(_mm256_loadu_ps(r + i + 8), _mm256_loadu_ps(x + i + 8), b);
    }
    float s = SumAvx2(_mm256_add_ps(a, b));
    for (int64_t i = kv; i < k; ++i) s += r[i] * x[i];
    y[j] = Scaled(s, alpha, beta, y + j);
  }
}

// y[0:8] = alpha * acc + beta * y[0:8] (y is not read when beta is 0).
DYNVM_AVX2 DYNVM_ALWAYS_INLINE void FinishAvx2(__m256 acc, float alpha, float beta, float* y) {
  __m256 out = _mm256_mul_ps(acc, _mm256_set1_ps(alpha));
  if (beta != 0.0f) out = _mm256_fmadd_ps(_mm256_loadu_ps(y), _mm256_set1_ps(beta), out);
  _mm256_storeu_ps(y, out);
}

// 64 columns at a time in eight 8-lane accumulators, then 8, then one.
DYNVM_AVX2 void GemvColsAvx2(int64_t n, int64_t k, float alpha, const float* x, const float* b,
                             int64_t ldb, float beta, float* y) {
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) {
    __m256 a[8];
    for (__m256& v : a) v = _mm256_setzero_ps();
    for (int64_t i = 0; i < k; ++i) {
      const float* row = b + i * ldb + j;
      const __m256 xv = _mm256_broadcast_ss(x + i);
      for (int u = 0; u < 8; ++u) a[u] = _mm256_fmadd_ps(_mm256_loadu_ps(row + 8 * u), xv, a[u]);
    }
    for (int u = 0; u < 8; ++u) FinishAvx2(a[u], alpha, beta, y + j + 8 * u);
  }
  for (; j + 8 <= n; j += 8) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 2 <= k; i += 2) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(b + i * ldb + j), _mm256_broadcast_ss(x + i), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(b + (i + 1) * ldb + j), _mm256_broadcast_ss(x + i + 1),
                           a1);
    }
    if (i < k) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(b + i * ldb + j), _mm256_broadcast_ss(x + i), a0);
    }
    FinishAvx2(_mm256_add_ps(a0, a1), alpha, beta, y + j);
  }
  for (; j < n; ++j) {
    float s = 0.0f;
    for (int64_t i = 0; i < k; ++i) s += x[i] * b[i * ldb + j];
    y[j] = Scaled(s, alpha, beta, y + j);
  }
}

DYNVM_AVX2 void GemvAvx2(char trans, int64_t n, int64_t k, float alpha, const float* x,
                         const float* b, int64_t ldb, float beta, float* y) {
  if (trans == 'T') {
    GemvRowsAvx2(n, k, alpha, x, b, ldb, beta, y);
  } else {
    GemvColsAvx2(n, k, alpha, x, b, ldb, beta, y);
  }
}

// ---- AVX-512 ----

// GCC 12's AVX-512 headers make an undefined vector for the unused source of their masked
// builtins, which -Wmaybe-uninitialized reports at every use (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// The sum of 16 lanes.
DYNVM_AVX512_LOOPS DYNVM_ALWAYS_INLINE float SumAvx512(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm512_castps512_ps256(_mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

template <bool kPrefetch>
DYNVM_AVX512_LOOPS void GemvRowsAvx512(int64_t n, int64_t k, float alpha, const float* x,
                                       const float* w, int64_t ldw, float beta, float* y) {
  constexpr int64_t kAhead = 8;
  const int64_t kv = k - k % kLanes;
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - kv)) - 1);
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* r0 = w + j * ldw;
    const float* r1 = r0 + ldw;
    const float* r2 = r1 + ldw;
    const float* r3 = r2 + ldw;
    const float* p = j + kAhead + 4 <= n ? r0 + kAhead * ldw : r0;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < kv; i += kLanes) {
      if constexpr (kPrefetch) {
        _mm_prefetch(reinterpret_cast<const char*>(p + i), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p + ldw + i), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p + 2 * ldw + i), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p + 3 * ldw + i), _MM_HINT_T0);
      }
      const __m512 xv = _mm512_loadu_ps(x + i);
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(r0 + i), xv, a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(r1 + i), xv, a1);
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(r2 + i), xv, a2);
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(r3 + i), xv, a3);
    }
    if (kv < k) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, x + kv);
      a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, r0 + kv), xv, a0);
      a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, r1 + kv), xv, a1);
      a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, r2 + kv), xv, a2);
      a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, r3 + kv), xv, a3);
    }
    y[j] = Scaled(SumAvx512(a0), alpha, beta, y + j);
    y[j + 1] = Scaled(SumAvx512(a1), alpha, beta, y + j + 1);
    y[j + 2] = Scaled(SumAvx512(a2), alpha, beta, y + j + 2);
    y[j + 3] = Scaled(SumAvx512(a3), alpha, beta, y + j + 3);
  }
  for (; j < n; ++j) {
    const float* r = w + j * ldw;
    __m512 a = _mm512_setzero_ps();
    for (int64_t i = 0; i < kv; i += kLanes)
      a = _mm512_fmadd_ps(_mm512_loadu_ps(r + i), _mm512_loadu_ps(x + i), a);
    if (kv < k)
      a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, r + kv), _mm512_maskz_loadu_ps(tail, x + kv),
                          a);
    y[j] = Scaled(SumAvx512(a), alpha, beta, y + j);
  }
}

#pragma GCC diagnostic pop

// Axpy form, streaming whole rows: a tile of up to kColsTile columns of y accumulates in a buffer
// in L1 while the rows of b go by four at a time (each row's tile one contiguous stream, which the
// hardware prefetcher follows), acc = fma(b[i, :], x[i], acc) in order of i: each output the same
// chain of FMAs as GemvColsBody's. The 64-column strips of GemvColsBody read b down its rows at a
// stride of ldb, 256 bytes per row: from K of about 1024 the prefetcher falls behind (on the Zen 4
// EPYC, [K, N] 1024 x 8192 ran 11.3 GB/s against the dot form's 22.1; docs/llm.md).
DYNVM_AVX512 void GemvColsAvx512(int64_t n, int64_t k, float alpha, const float* x, const float* b,
                                 int64_t ldb, float beta, float* y) {
  constexpr int64_t kColsTile = 2048;  // 8 KB of accumulators
  alignas(64) float acc[kColsTile];
  for (int64_t j0 = 0; j0 < n; j0 += kColsTile) {
    const int64_t cols = std::min(kColsTile, n - j0), full = cols / 16 * 16;
    for (int64_t c = 0; c < full; c += 16) _mm512_store_ps(acc + c, _mm512_setzero_ps());
    int64_t i = 0;
    for (; i + 4 <= k; i += 4) {
      const float* r = b + i * ldb + j0;
      const __m512 x0 = _mm512_set1_ps(x[i]), x1 = _mm512_set1_ps(x[i + 1]);
      const __m512 x2 = _mm512_set1_ps(x[i + 2]), x3 = _mm512_set1_ps(x[i + 3]);
      for (int64_t c = 0; c < full; c += 16) {
        __m512 a = _mm512_load_ps(acc + c);
        a = _mm512_fmadd_ps(_mm512_loadu_ps(r + c), x0, a);
        a = _mm512_fmadd_ps(_mm512_loadu_ps(r + ldb + c), x1, a);
        a = _mm512_fmadd_ps(_mm512_loadu_ps(r + 2 * ldb + c), x2, a);
        a = _mm512_fmadd_ps(_mm512_loadu_ps(r + 3 * ldb + c), x3, a);
        _mm512_store_ps(acc + c, a);
      }
    }
    for (; i < k; ++i) {
      const float* r = b + i * ldb + j0;
      const __m512 xi = _mm512_set1_ps(x[i]);
      for (int64_t c = 0; c < full; c += 16) {
        _mm512_store_ps(acc + c,
                        _mm512_fmadd_ps(_mm512_loadu_ps(r + c), xi, _mm512_load_ps(acc + c)));
      }
    }
    for (int64_t c = 0; c < full; c += 16) {
      __m512 out = _mm512_mul_ps(_mm512_load_ps(acc + c), _mm512_set1_ps(alpha));
      if (beta != 0.0f) {
        out = _mm512_fmadd_ps(_mm512_loadu_ps(y + j0 + c), _mm512_set1_ps(beta), out);
      }
      _mm512_storeu_ps(y + j0 + c, out);
    }
    for (int64_t j = j0 + full; j < j0 + cols; ++j) {
      float s = 0.0f;
      for (int64_t q = 0; q < k; ++q) s += x[q] * b[q * ldb + j];
      y[j] = Scaled(s, alpha, beta, y + j);
    }
  }
}

template <bool kPrefetch>
DYNVM_AVX512_LOOPS void GemvAvx512(char trans, int64_t n, int64_t k, float alpha, const float* x,
                                   const float* b, int64_t ldb, float beta, float* y) {
  if (trans == 'T') {
    GemvRowsAvx512<kPrefetch>(n, k, alpha, x, b, ldb, beta, y);
  } else {
    GemvColsAvx512(n, k, alpha, x, b, ldb, beta, y);
  }
}

#endif  // DYNVM_CPU_X86

}  // namespace

namespace internal {

void FillGemv(Isa isa, Dispatch* d) {
  d->gemv = &GemvPortable;
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) d->gemv = &GemvAvx2;
  // The software prefetch pays on Intel (measured on a Xeon, above) and costs on AMD Zen 4 (its
  // hardware prefetcher keeps up; with the prefetch the [1024, 1024] GEMV ran 28 against 37
  // GFLOP/s: dnnl_choice_benchmark's BM_Gemv, docs/results/zen4-choice-*). The same arithmetic.
  if (isa >= Isa::kAvx512) d->gemv = IsAmd() ? &GemvAvx512<false> : &GemvAvx512<true>;
#endif
}

}  // namespace internal

void Gemv(char trans, int64_t n, int64_t k, float alpha, const float* x, const float* b,
          int64_t ldb, float beta, float* y) {
  internal::Table().gemv(trans, n, k, alpha, x, b, ldb, beta, y);
}

}  // namespace dynvm::cpu
