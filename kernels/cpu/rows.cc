// Row-wise microkernels (rows.h). Tuning notes:
// - The row max and sum are written over 16 explicit lanes (GCC vector types): the compiler
//   keeps the scalar order of a float reduction (no -ffast-math), so it vectorizes only
//   independent accumulators. Each level sums the lanes in the same order, so every level gives
//   the same bits.
// - GCC lowers the 16-lane select of the row max and the lane sum to scalar code through the
//   stack on AVX2 (its AVX2 clone ran ~800 cycles for a 128-float row: 5.5% of a transformer
//   encoder's time), so AVX2 has explicit versions (two 8-lane registers hold the 16 lanes): the
//   `nn.TransformerEncoder` classifier's attention went from 731 to 263 us a call on the AVX2
//   EPYC.
#include "kernels/cpu/rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu {
namespace {

constexpr int kLanes = 16;

// A GCC vector type: float max and sum reductions the compiler would not vectorize on its own
// (without -ffast-math it keeps the scalar order).
typedef float V16f __attribute__((vector_size(64)));

// Max of a row; NaN entries are skipped (as the reference kernel's std::max does).
DYNVM_ALWAYS_INLINE float RowMax(int64_t n, const float* x) {
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

DYNVM_ALWAYS_INLINE float RowSum(int64_t n, const float* x) {
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

// y = exp(x - m): exactly 0 for x = -inf, NaN for NaN.
DYNVM_ALWAYS_INLINE void ExpRow(int64_t n, const float* x, float m, float* y) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  DYNVM_IVDEP
  for (int64_t j = 0; j < n; ++j) {
    const float v = x[j];
    const float e = FastExp(v - m);
    y[j] = v == kNegInf ? 0.0f : v != v ? v : e;
  }
}

DYNVM_ALWAYS_INLINE void ScaleRow(int64_t n, float s, float* y) {
  DYNVM_IVDEP
  for (int64_t j = 0; j < n; ++j) y[j] *= s;
}

DYNVM_ALWAYS_INLINE float RowSquaredDeviation(int64_t n, const float* x, float mean) {
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

DYNVM_ALWAYS_INLINE void NormalizeRow(int64_t n, const float* x, float mean, float rstd,
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

// The row max and sum of the generic levels.
struct GenericReductions {
  static DYNVM_ALWAYS_INLINE float Max(int64_t n, const float* x) { return RowMax(n, x); }
  static DYNVM_ALWAYS_INLINE float Sum(int64_t n, const float* x) { return RowSum(n, x); }
};

template <typename R>
DYNVM_ALWAYS_INLINE void SoftmaxRowsBody(int64_t rows, int64_t n, const float* x, float* y) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float m = R::Max(n, xr);
    ExpRow(n, xr, m, yr);
    const float sum = R::Sum(n, yr);
    if (m == kInf || m == -kInf || sum != sum) {
      // +inf (inf - inf), a row of -inf only, or a NaN: the reference kernel's row is NaN.
      std::fill(yr, yr + n, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    ScaleRow(n, 1.0f / sum, yr);
  }
}

template <typename R>
DYNVM_ALWAYS_INLINE void LayerNormRowsBody(int64_t rows, int64_t n, const float* x,
                                           const float* scale, const float* bias, float epsilon,
                                           float* y) {
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float mean = R::Sum(n, xr) * inv_n;
    const float var = RowSquaredDeviation(n, xr, mean) * inv_n;
    NormalizeRow(n, xr, mean, 1.0f / std::sqrt(var + epsilon), scale, bias, y + r * n);
  }
}

DYNVM_ALWAYS_INLINE void RmsNormRowsBody(int64_t rows, int64_t n, const float* x,
                                         const float* scale, float epsilon, float* y) {
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float ms = RowSquaredDeviation(n, xr, 0.0f) * inv_n;
    NormalizeRow(n, xr, 0.0f, 1.0f / std::sqrt(ms + epsilon), scale, nullptr, y + r * n);
  }
}

// ---- portable ----

void SoftmaxRowsPortable(int64_t rows, int64_t n, const float* x, float* y) {
  SoftmaxRowsBody<GenericReductions>(rows, n, x, y);
}
void LayerNormRowsPortable(int64_t rows, int64_t n, const float* x, const float* scale,
                           const float* bias, float epsilon, float* y) {
  LayerNormRowsBody<GenericReductions>(rows, n, x, scale, bias, epsilon, y);
}
void RmsNormRowsPortable(int64_t rows, int64_t n, const float* x, const float* scale, float epsilon,
                         float* y) {
  RmsNormRowsBody(rows, n, x, scale, epsilon, y);
}

#if DYNVM_CPU_X86

// ---- AVX2 ----

// RowMax and RowSum with the generic versions' results: two 8-lane registers hold their 16
// lanes, so the sums are formed in the same order (lane k sums x[k], x[k + 16], ...; then lanes
// 0..15 in order, then the tail). Not inline into the body: a target function is inlined only
// into one of the same target, which the body (no target) is not until it is inlined itself.
DYNVM_AVX2 float RowMaxAvx2(int64_t n, const float* x) {
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

DYNVM_AVX2 float RowSumAvx2(int64_t n, const float* x) {
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

struct Avx2Reductions {
  static float Max(int64_t n, const float* x) { return RowMaxAvx2(n, x); }
  static float Sum(int64_t n, const float* x) { return RowSumAvx2(n, x); }
};

DYNVM_AVX2 void SoftmaxRowsAvx2(int64_t rows, int64_t n, const float* x, float* y) {
  SoftmaxRowsBody<Avx2Reductions>(rows, n, x, y);
}
DYNVM_AVX2 void LayerNormRowsAvx2(int64_t rows, int64_t n, const float* x, const float* scale,
                                  const float* bias, float epsilon, float* y) {
  LayerNormRowsBody<Avx2Reductions>(rows, n, x, scale, bias, epsilon, y);
}
DYNVM_AVX2 void RmsNormRowsAvx2(int64_t rows, int64_t n, const float* x, const float* scale,
                                float epsilon, float* y) {
  RmsNormRowsBody(rows, n, x, scale, epsilon, y);
}

// ---- AVX-512: the generic bodies ----

DYNVM_AVX512 void SoftmaxRowsAvx512(int64_t rows, int64_t n, const float* x, float* y) {
  SoftmaxRowsBody<GenericReductions>(rows, n, x, y);
}
DYNVM_AVX512 void LayerNormRowsAvx512(int64_t rows, int64_t n, const float* x, const float* scale,
                                      const float* bias, float epsilon, float* y) {
  LayerNormRowsBody<GenericReductions>(rows, n, x, scale, bias, epsilon, y);
}
DYNVM_AVX512 void RmsNormRowsAvx512(int64_t rows, int64_t n, const float* x, const float* scale,
                                    float epsilon, float* y) {
  RmsNormRowsBody(rows, n, x, scale, epsilon, y);
}

#endif  // DYNVM_CPU_X86

}  // namespace

namespace internal {

void FillRows(Isa isa, Dispatch* d) {
  d->softmax_rows = &SoftmaxRowsPortable;
  d->layer_norm_rows = &LayerNormRowsPortable;
  d->rms_norm_rows = &RmsNormRowsPortable;
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) {
    d->softmax_rows = &SoftmaxRowsAvx2;
    d->layer_norm_rows = &LayerNormRowsAvx2;
    d->rms_norm_rows = &RmsNormRowsAvx2;
  }
  if (isa >= Isa::kAvx512) {
    d->softmax_rows = &SoftmaxRowsAvx512;
    d->layer_norm_rows = &LayerNormRowsAvx512;
    d->rms_norm_rows = &RmsNormRowsAvx512;
  }
#endif
}

}  // namespace internal

void SoftmaxRows(int64_t rows, int64_t n, const float* x, float* y) {
  internal::Table().softmax_rows(rows, n, x, y);
}

void LayerNormRows(int64_t rows, int64_t n, const float* x, const float* scale, const float* bias,
                   float epsilon, float* y) {
  internal::Table().layer_norm_rows(rows, n, x, scale, bias, epsilon, y);
}

void RmsNormRows(int64_t rows, int64_t n, const float* x, const float* scale, float epsilon,
                 float* y) {
  internal::Table().rms_norm_rows(rows, n, x, scale, epsilon, y);
}

}  // namespace dynvm::cpu
