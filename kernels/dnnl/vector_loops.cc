#include "kernels/dnnl/vector_loops.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/dnnl/clones.h"
#include "kernels/dnnl/fast_math.h"

namespace dynvm::onednn {
namespace {
// Outputs here are either separate arrays or exactly their inputs (an in-place op: the same
// index read then written). The compiler's run-time overlap check would send the in-place case
// to the scalar loop; ivdep states that no iteration depends on another.
#define DYNVM_IVDEP _Pragma("GCC ivdep")

// Explicit lanes: the compiler does not reorder float reductions on its own (no -ffast-math),
// but vectorizes kLanes independent accumulators.
constexpr int kLanes = 16;

// A GCC vector type: float max and sum reductions the compiler would not vectorize on its own
// (without -ffast-math it keeps the scalar order).
typedef float V16f __attribute__((vector_size(64)));

// Max of a row; NaN entries are skipped (as the reference kernel's std::max does).
DYNVM_CLONES float RowMax(int64_t n, const float* x) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  V16f m = V16f{} + kNegInf;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    V16f v;
    std::memcpy(&v, x + j, sizeof(v));
    m = v > m ? v : m;
  }
  float r = kNegInf;
  for (int k = 0; k < kLanes; ++k) r = m[k] > r ? m[k] : r;
  for (; j < n; ++j) r = x[j] > r ? x[j] : r;
  return r;
}

// y = exp(x - m): exactly 0 for x = -inf, NaN for NaN.
DYNVM_CLONES void ExpRow(int64_t n, const float* x, float m, float* y) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  DYNVM_IVDEP
  for (int64_t j = 0; j < n; ++j) {
    const float v = x[j];
    const float e = FastExp(v - m);
    y[j] = v == kNegInf ? 0.0f : v != v ? v : e;
  }
}

DYNVM_CLONES float RowSum(int64_t n, const float* x) {
  V16f acc = V16f{};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    V16f v;
    std::memcpy(&v, x + j, sizeof(v));
    acc += v;
  }
  float s = 0.0f;
  for (int k = 0; k < kLanes; ++k) s += acc[k];
  for (; j < n; ++j) s += x[j];
  return s;
}

DYNVM_CLONES void ScaleRow(int64_t n, float s, float* y) {
  DYNVM_IVDEP
  for (int64_t j = 0; j < n; ++j) y[j] *= s;
}

// Loads and stores of V16f as macros, not helper functions: a helper without the
// clones' target attributes would pass vectors under a different ABI.
#define DYNVM_LOADV(p) (*reinterpret_cast<const V16fU*>(p))
#define DYNVM_STOREV(p, v) (*reinterpret_cast<V16fU*>(p) = (v))

// An unaligned, may-alias view of 16 floats.
typedef float V16fU __attribute__((vector_size(64), aligned(4), may_alias));

inline float Scaled(float acc, float alpha, float beta, const float* y) {
  return beta == 0.0f ? alpha * acc : alpha * acc + beta * *y;
}

// Dot form: y[j] = x . w[j, :] over row-major rows of w, four rows at a time (four streams).
DYNVM_CLONES void GemvRows(int64_t n, int64_t k, float alpha, const float* x, const float* w,
                           int64_t ldw, float beta, float* y) {
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

// The dot form on AVX-512 with software prefetch: while four rows are read, the four rows
// eight ahead are prefetched, one cache line per row per step. On the LSTM LM's weights (4.7 MB
// per token, in L3) this reads ~118 GB/s against ~92 for GemvRows (whose hardware-prefetched
// streams start cold at every row group).
// GCC 12's AVX-512 headers make an undefined vector for the unused source of their masked
// builtins, which -Wmaybe-uninitialized reports at every use (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The sum of 16 lanes.
__attribute__((target("avx512f"))) inline float SumAvx512(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm512_castps512_ps256(_mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

__attribute__((target("avx512f"))) void GemvRowsAvx512(int64_t n, int64_t k, float alpha,
                                                       const float* x, const float* w, int64_t ldw,
                                                       float beta, float* y) {
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
      _mm_prefetch(reinterpret_cast<const char*>(p + i), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + ldw + i), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + 2 * ldw + i), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + 3 * ldw + i), _MM_HINT_T0);
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

// The sum of 8 lanes.
__attribute__((target("avx2,fma"))) inline float SumAvx2(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

// The dot form on AVX2 + FMA: four rows at a time, two 8-lane accumulators per row (eight FMA
// chains in flight). GCC lowers GemvRows' 16-lane vectors on AVX2 through the stack (about 2
// GFLOP/s on an LSTM's 512x128 recurrent weights); this runs from registers.
__attribute__((target("avx2,fma"))) void GemvRowsAvx2(int64_t n, int64_t k, float alpha,
                                                      const float* x, const float* w, int64_t ldw,
                                                      float beta, float* y) {
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

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

bool HasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

// Axpy form: y[j0:j0+64] accumulates x[i] * b[i, j0:j0+64] down the rows of a row-major b.
DYNVM_CLONES void GemvCols(int64_t n, int64_t k, float alpha, const float* x, const float* b,
                           int64_t ldb, float beta, float* y) {
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
  for (; j < n; ++j) {
    float s = 0.0f;
    for (int64_t i = 0; i < k; ++i) s += x[i] * b[i * ldb + j];
    y[j] = Scaled(s, alpha, beta, y + j);
  }
}
#undef DYNVM_FINISH

// y[0:8] = alpha * acc + beta * y[0:8] (y is not read when beta is 0).
__attribute__((target("avx2,fma"))) inline void FinishAvx2(__m256 acc, float alpha, float beta,
                                                           float* y) {
  __m256 out = _mm256_mul_ps(acc, _mm256_set1_ps(alpha));
  if (beta != 0.0f) out = _mm256_fmadd_ps(_mm256_loadu_ps(y), _mm256_set1_ps(beta), out);
  _mm256_storeu_ps(y, out);
}

// The axpy form on AVX2 + FMA: 64 columns at a time in eight 8-lane accumulators, then 8, then
// one. GCC spills GemvCols' 16-lane accumulators to the stack on AVX2 (81 stack accesses in its
// AVX2 clone), which made the decode GEMV of a [K, N] weight (torch's MatMul export of a Linear
// layer) several times slower than this.
__attribute__((target("avx2,fma"))) void GemvColsAvx2(int64_t n, int64_t k, float alpha,
                                                      const float* x, const float* b, int64_t ldb,
                                                      float beta, float* y) {
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

// RowMax and RowSum on AVX2 + FMA, with the generic clones' results: GCC lowers RowMax's
// 16-lane select on AVX2 to scalar compares through the stack (its AVX2 clone ran ~800 cycles
// for a 128-float row: 5.5% of a transformer encoder's time), and RowSum's lane sum likewise.
// Two 8-lane registers hold the generic version's 16 lanes, so the sums are formed in the same
// order (lane k sums x[k], x[k + 16], ...; then lanes 0..15 in order, then the tail).
__attribute__((target("avx2,fma"))) float RowMaxAvx2(int64_t n, const float* x) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // max_ps(v, m) is v > m ? v : m: a NaN v keeps m, as the generic loop skips NaN.
  __m256 lo = _mm256_set1_ps(kNegInf), hi = lo;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    lo = _mm256_max_ps(_mm256_loadu_ps(x + j), lo);
    hi = _mm256_max_ps(_mm256_loadu_ps(x + j + 8), hi);
  }
  __m128 h = _mm_max_ps(_mm_max_ps(_mm256_castps256_ps128(lo), _mm256_extractf128_ps(lo, 1)),
                        _mm_max_ps(_mm256_castps256_ps128(hi), _mm256_extractf128_ps(hi, 1)));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  float r = _mm_cvtss_f32(h);
  for (; j < n; ++j) r = x[j] > r ? x[j] : r;
  return r;
}

__attribute__((target("avx2,fma"))) float RowSumAvx2(int64_t n, const float* x) {
  __m256 lo = _mm256_setzero_ps(), hi = lo;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    lo = _mm256_add_ps(lo, _mm256_loadu_ps(x + j));
    hi = _mm256_add_ps(hi, _mm256_loadu_ps(x + j + 8));
  }
  alignas(32) float lanes[kLanes];
  _mm256_store_ps(lanes, lo);
  _mm256_store_ps(lanes + 8, hi);
  float s = 0.0f;
  for (int k = 0; k < kLanes; ++k) s += lanes[k];
  for (; j < n; ++j) s += x[j];
  return s;
}

// The row max and sum the row kernels use: the explicit AVX2 loops where AVX2 is the widest.
float MaxOfRow(int64_t n, const float* x) {
  return HasAvx2Fma() && !HasAvx512() ? RowMaxAvx2(n, x) : RowMax(n, x);
}

float SumOfRow(int64_t n, const float* x) {
  return HasAvx2Fma() && !HasAvx512() ? RowSumAvx2(n, x) : RowSum(n, x);
}

}  // namespace

void SoftmaxRows(int64_t rows, int64_t n, const float* x, float* y) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float m = MaxOfRow(n, xr);
    ExpRow(n, xr, m, yr);
    const float sum = SumOfRow(n, yr);
    if (m == kInf || m == -kInf || sum != sum) {
      // +inf (inf - inf), a row of -inf only, or a NaN: the reference kernel's row is NaN.
      std::fill(yr, yr + n, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    ScaleRow(n, 1.0f / sum, yr);
  }
}

namespace {

DYNVM_CLONES float RowSquaredDeviation(int64_t n, const float* x, float mean) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float d = x[j + k] - mean;
      acc[k] += d * d;
    }
  }
  for (int k = 0; j < n; ++j, ++k) {
    const float d = x[j] - mean;
    acc[k] += d * d;
  }
  float s = 0.0f;
  for (int k = 0; k < kLanes; ++k) s += acc[k];
  return s;
}

DYNVM_CLONES void NormalizeRow(int64_t n, const float* x, float mean, float rstd,
                               const float* scale, const float* bias, float* y) {
  if (scale != nullptr && bias != nullptr) {
    DYNVM_IVDEP
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mean) * rstd * scale[j] + bias[j];
  } else if (scale != nullptr) {
    DYNVM_IVDEP
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mean) * rstd * scale[j];
  } else if (bias != nullptr) {
    DYNVM_IVDEP
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mean) * rstd + bias[j];
  } else {
    DYNVM_IVDEP
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mean) * rstd;
  }
}

// bs >= 0: b's rows are bs apart; bs < 0: b is one scalar.
#define DYNVM_BINARY_LOOP(NAME, OP)                                                           \
  DYNVM_CLONES void NAME(int64_t rows, int64_t n, const float* a, const float* b, int64_t bs, \
                         float* y) {                                                          \
    if (bs < 0) {                                                                             \
      const float s = b[0];                                                                   \
      DYNVM_IVDEP                                                                             \
      for (int64_t j = 0; j < rows * n; ++j) y[j] = a[j] OP s;                                \
      return;                                                                                 \
    }                                                                                         \
    for (int64_t r = 0; r < rows; ++r) {                                                      \
      const float* ar = a + r * n;                                                            \
      const float* br = b + r * bs;                                                           \
      float* yr = y + r * n;                                                                  \
      DYNVM_IVDEP                                                                             \
      for (int64_t j = 0; j < n; ++j) yr[j] = ar[j] OP br[j];                                 \
    }                                                                                         \
  }
DYNVM_BINARY_LOOP(AddRows, +)
DYNVM_BINARY_LOOP(SubRows, -)
DYNVM_BINARY_LOOP(MulRows, *)
DYNVM_BINARY_LOOP(DivRows, /)
#undef DYNVM_BINARY_LOOP

#define DYNVM_WHERE_LOOP(NAME, XV, YV)                                                \
  DYNVM_CLONES void NAME(int64_t n, const uint8_t* c, const float* x, const float* y, \
                         float* out) {                                                \
    DYNVM_IVDEP                                                                       \
    for (int64_t j = 0; j < n; ++j) {                                                 \
      /* Both loaded unconditionally: a select the compiler can vectorize. */         \
      const float xv = XV, yv = YV;                                                   \
      out[j] = c[j] != 0 ? xv : yv;                                                   \
    }                                                                                 \
  }
DYNVM_WHERE_LOOP(WhereVV, x[j], y[j])
DYNVM_WHERE_LOOP(WhereSV, x[0], y[j])
DYNVM_WHERE_LOOP(WhereVS, x[j], y[0])
DYNVM_WHERE_LOOP(WhereSS, x[0], y[0])
#undef DYNVM_WHERE_LOOP

}  // namespace

void WhereBlocks(int64_t blocks, int64_t n, const uint8_t* cond, int64_t cond_step, const float* x,
                 int64_t x_step, const float* y, int64_t y_step, float* out) {
  const bool xs = x_step < 0, ys = y_step < 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* c = cond + b * cond_step;
    const float* xb = xs ? x : x + b * x_step;
    const float* yb = ys ? y : y + b * y_step;
    float* o = out + b * n;
    if (!xs && !ys) {
      WhereVV(n, c, xb, yb, o);
    } else if (xs && !ys) {
      WhereSV(n, c, xb, yb, o);
    } else if (!xs) {
      WhereVS(n, c, xb, yb, o);
    } else {
      WhereSS(n, c, xb, yb, o);
    }
  }
}

void LayerNormRows(int64_t rows, int64_t n, const float* x, const float* scale, const float* bias,
                   float epsilon, float* y) {
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float mean = SumOfRow(n, xr) * inv_n;
    const float var = RowSquaredDeviation(n, xr, mean) * inv_n;
    NormalizeRow(n, xr, mean, 1.0f / std::sqrt(var + epsilon), scale, bias, y + r * n);
  }
}

void RmsNormRows(int64_t rows, int64_t n, const float* x, const float* scale, float epsilon,
                 float* y) {
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float ms = RowSquaredDeviation(n, xr, 0.0f) * inv_n;
    NormalizeRow(n, xr, 0.0f, 1.0f / std::sqrt(ms + epsilon), scale, nullptr, y + r * n);
  }
}

void BinaryRows(BinaryOp op, int64_t rows, int64_t n, const float* a, const float* b,
                int64_t b_row_stride, float* y) {
  switch (op) {
    case BinaryOp::kAdd:
      return AddRows(rows, n, a, b, b_row_stride, y);
    case BinaryOp::kSub:
      return SubRows(rows, n, a, b, b_row_stride, y);
    case BinaryOp::kMul:
      return MulRows(rows, n, a, b, b_row_stride, y);
    case BinaryOp::kDiv:
      return DivRows(rows, n, a, b, b_row_stride, y);
  }
}

// |x| < 0.5: the Taylor series of erf to x^15 (error below 1e-9 relative). Otherwise
// 1 - erfc(|x|) with the Chebyshev-fitted erfc of Numerical Recipes (erfcc: relative error
// below 1.2e-7), its exp by FastExp. Both are computed and one is selected: branch-free.
namespace {

// erfc(z) for z >= 0 by the Chebyshev-fitted erfcc of Numerical Recipes (relative error below
// 1.2e-7), its exp by FastExp; z = inf gives t = 0 and an exponent clamped inside FastExp: 0.
// Inline (scalar), so each clone below compiles it for its own target.
inline float Erfc(float z) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * FastExp(p - std::min(z * z, 100.0f));
}

// The clones are internal (clones.h); ErfArray below calls them.
DYNVM_CLONES void ErfLoop(int64_t n, const float* x, float* y) {
  DYNVM_IVDEP
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float z = std::fabs(v);
    const float z2 = v * v;
    float s = -1.0f / 75600.0f;  // x^15 coefficient / (2 / sqrt(pi))
    s = s * z2 + 1.0f / 9360.0f;
    s = s * z2 - 1.0f / 1320.0f;
    s = s * z2 + 1.0f / 216.0f;
    s = s * z2 - 1.0f / 42.0f;
    s = s * z2 + 1.0f / 10.0f;
    s = s * z2 - 1.0f / 3.0f;
    s = s * z2 + 1.0f;
    const float small = 1.12837916709551257f * v * s;
    const float erfc = Erfc(z);
    const float large = std::copysign(1.0f - erfc, v);
    const float r = z < 0.5f ? small : large;
    y[i] = v != v ? v : r;
  }
}

// GELU (erf form) in one pass: x/2 (1 + erf(x / sqrt 2)) = x/2 (2 - erfc(z)) for x >= 0 and
// x/2 erfc(z) for x < 0, z = |x| / sqrt 2, with ErfLoop's erfc. One formula for every x (no
// Taylor branch: 2 - erfc(z) near z = 0 is within 1.2e-7 relative of 1 + erf), and more
// accurate than 1 + erf(x) in the negative tail, where that sum cancels.
DYNVM_CLONES void GeluErfLoop(int64_t n, const float* x, float* y) {
  DYNVM_IVDEP
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float erfc = Erfc(std::fabs(v) * 0.7071067811865476f);
    y[i] = 0.5f * v * (v >= 0.0f ? 2.0f - erfc : erfc);
  }
}

#define DYNVM_AVX2_FMA __attribute__((target("avx2,fma")))

// FastExp (fast_math.h) on 8 lanes, the same steps.
DYNVM_AVX2_FMA inline __m256 ExpAvx2(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 shifter = _mm256_set1_ps(12582912.0f);
  const __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), shifter);
  const __m256 nf = _mm256_sub_ps(t, shifter);
  const __m256i n = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(shifter));
  __m256 r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fmadd_ps(nf, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
}

// GeluErfLoop's formula on 8 lanes (Erfc's polynomial and FastExp, the same steps).
DYNVM_AVX2_FMA inline __m256 GeluErfAvx2(__m256 v) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 z = _mm256_mul_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v),
                                 _mm256_set1_ps(0.7071067811865476f));
  const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.5f), z, one));
  __m256 p = _mm256_set1_ps(0.17087277f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.82215223f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.48851587f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.13520398f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.27886807f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.18628806f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.09678418f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.37409196f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.00002368f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.26551223f));
  const __m256 z2 = _mm256_min_ps(_mm256_mul_ps(z, z), _mm256_set1_ps(100.0f));
  const __m256 erfc = _mm256_mul_ps(t, ExpAvx2(_mm256_sub_ps(p, z2)));
  const __m256 nonneg = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ);
  const __m256 f = _mm256_blendv_ps(erfc, _mm256_sub_ps(_mm256_set1_ps(2.0f), erfc), nonneg);
  // NaN: v * f is NaN (as the scalar loop's).
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v), f);
}

// Four vectors per step: the polynomial chains are long, and independent ones in flight hide
// their latency (the compiler's clone ran one chain at a time): BM_GeluForms 490-550 -> 637 M
// elements/s on the AVX2 EPYC.
DYNVM_AVX2_FMA void GeluErfArrayAvx2(int64_t n, const float* x, float* y) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 a = GeluErfAvx2(_mm256_loadu_ps(x + i));
    const __m256 b = GeluErfAvx2(_mm256_loadu_ps(x + i + 8));
    const __m256 c = GeluErfAvx2(_mm256_loadu_ps(x + i + 16));
    const __m256 d = GeluErfAvx2(_mm256_loadu_ps(x + i + 24));
    _mm256_storeu_ps(y + i, a);
    _mm256_storeu_ps(y + i + 8, b);
    _mm256_storeu_ps(y + i + 16, c);
    _mm256_storeu_ps(y + i + 24, d);
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, GeluErfAvx2(_mm256_loadu_ps(x + i)));
  if (i < n) GeluErfLoop(n - i, x + i, y + i);
}

}  // namespace

void ErfArray(int64_t n, const float* x, float* y) { ErfLoop(n, x, y); }

void GeluErfArray(int64_t n, const float* x, float* y) {
  if (HasAvx2Fma() && !HasAvx512()) {
    GeluErfArrayAvx2(n, x, y);
  } else {
    GeluErfLoop(n, x, y);
  }
}

void Gemv(char trans, int64_t n, int64_t k, float alpha, const float* x, const float* b,
          int64_t ldb, float beta, float* y) {
  if (trans == 'T') {
    if (HasAvx512()) {
      GemvRowsAvx512(n, k, alpha, x, b, ldb, beta, y);
    } else if (HasAvx2Fma()) {
      GemvRowsAvx2(n, k, alpha, x, b, ldb, beta, y);
    } else {
      GemvRows(n, k, alpha, x, b, ldb, beta, y);
    }
  } else if (HasAvx2Fma() && !HasAvx512()) {
    GemvColsAvx2(n, k, alpha, x, b, ldb, beta, y);
  } else {
    GemvCols(n, k, alpha, x, b, ldb, beta, y);
  }
}

void ParallelGemv(const KernelContext& ctx, char trans, int64_t n, int64_t k, float alpha,
                  const float* x, const float* b, int64_t ldb, float beta, float* y) {
  if (ctx.num_threads() == 1 || n * k < kMinParallelGemv) {
    Gemv(trans, n, k, alpha, x, b, ldb, beta, y);
    return;
  }
  // 'T': whole rows of the weight, 16 at a time (64 bytes of y); 'N': 64 columns (the loop's
  // vector block).
  const int64_t grain = trans == 'T' ? 16 : 64;
  ctx.ParallelFor(n, grain, [&](int64_t j0, int64_t j1) {
    const float* bj = trans == 'T' ? b + j0 * ldb : b + j0;
    Gemv(trans, j1 - j0, k, alpha, x, bj, ldb, beta, y + j0);
  });
}

namespace {

// Rows per range: at least kMinParallelRows / threads elements' worth, so that a range's work
// outweighs a fork/join.
int64_t RowGrain(const KernelContext& ctx, int64_t rows, int64_t n) {
  if (ctx.num_threads() == 1 || rows < 2 || rows * n < kMinParallelRows) return rows;
  return std::max<int64_t>(1, kMinParallelRows / (2 * std::max<int64_t>(n, 1)));
}

}  // namespace

void ParallelSoftmaxRows(const KernelContext& ctx, int64_t rows, int64_t n, const float* x,
                         float* y) {
  ctx.ParallelFor(rows, RowGrain(ctx, rows, n),
                  [&](int64_t r0, int64_t r1) { SoftmaxRows(r1 - r0, n, x + r0 * n, y + r0 * n); });
}

void ParallelLayerNormRows(const KernelContext& ctx, int64_t rows, int64_t n, const float* x,
                           const float* scale, const float* bias, float epsilon, float* y) {
  ctx.ParallelFor(rows, RowGrain(ctx, rows, n), [&](int64_t r0, int64_t r1) {
    LayerNormRows(r1 - r0, n, x + r0 * n, scale, bias, epsilon, y + r0 * n);
  });
}

void ParallelRmsNormRows(const KernelContext& ctx, int64_t rows, int64_t n, const float* x,
                         const float* scale, float epsilon, float* y) {
  ctx.ParallelFor(rows, RowGrain(ctx, rows, n), [&](int64_t r0, int64_t r1) {
    RmsNormRows(r1 - r0, n, x + r0 * n, scale, epsilon, y + r0 * n);
  });
}

void ParallelElements(const KernelContext& ctx, int64_t n,
                      absl::FunctionRef<void(int64_t, int64_t)> fn, int64_t min_elements) {
  if (ctx.num_threads() == 1 || n < min_elements) {
    fn(0, n);
    return;
  }
  // Whole 16-float blocks (a cache line), at least min_elements / 2 per range.
  const int64_t grain = std::max<int64_t>(16, (min_elements / 2 + 15) / 16 * 16);
  ctx.ParallelFor(n, grain, fn);
}

void ParallelBinaryRows(const KernelContext& ctx, BinaryOp op, int64_t rows, int64_t n,
                        const float* a, const float* b, int64_t b_row_stride, float* y) {
  if (ctx.num_threads() == 1 || rows * n < kMinParallelElements ||
      (b_row_stride > 0 && b_row_stride != n)) {
    BinaryRows(op, rows, n, a, b, b_row_stride, y);
    return;
  }
  if (b_row_stride == 0 && rows > 1) {  // b is one row: whole rows per range
    const int64_t grain =
        std::max<int64_t>(1, kMinParallelElements / (2 * std::max<int64_t>(n, 1)));
    ctx.ParallelFor(rows, grain, [&](int64_t r0, int64_t r1) {
      BinaryRows(op, r1 - r0, n, a + r0 * n, b, 0, y + r0 * n);
    });
    return;
  }
  // b has every element (b_row_stride n: rows of one array) or is one scalar.
  ParallelElements(ctx, rows * n, [&](int64_t e0, int64_t e1) {
    if (b_row_stride < 0) {
      BinaryRows(op, 1, e1 - e0, a + e0, b, -1, y + e0);
    } else {
      BinaryRows(op, 1, e1 - e0, a + e0, b + e0, e1 - e0, y + e0);
    }
  });
}

}  // namespace dynvm::onednn
