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

// y = (x - m) - log_sum in double, rounded once to float (the reference kernel's arithmetic):
// never above 0 when m is the row's max and log_sum >= 0; -inf for x = -inf.
DYNVM_ALWAYS_INLINE void LogOutRow(int64_t n, const float* x, float m, double log_sum, float* y) {
  const double md = m;
  DYNVM_IVDEP
  for (int64_t j = 0; j < n; ++j)
    y[j] = static_cast<float>((static_cast<double>(x[j]) - md) - log_sum);
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

// The per-row steps of one level (Max, Sum, Exp, Scale, LogOut, SquaredDeviation, Normalize: static
// functions compiled for it). The row drivers below are compiled for the build's baseline and
// call them, as before kernels/cpu/: the driver's scalar arithmetic (the mean, 1 / sqrt(var +
// eps)) must not be contracted into FMAs, or the results would change.
template <typename L>
void SoftmaxRowsDriver(int64_t rows, int64_t n, const float* x, float* y) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float m = L::Max(n, xr);
    L::Exp(n, xr, m, yr);
    const float sum = L::Sum(n, yr);
    if (m == kInf || m == -kInf || sum != sum) {
      // +inf (inf - inf), a row of -inf only, or a NaN: the reference kernel's row is NaN.
      std::fill(yr, yr + n, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    L::Scale(n, 1.0f / sum, yr);
  }
}

// The exps go through a block on the stack (x and y may be the same array, and x is read again
// for the output); each block's lanes are summed as SoftmaxRows' are, the blocks in double.
template <typename L>
void LogSoftmaxRowsDriver(int64_t rows, int64_t n, const float* x, float* y) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr int64_t kBlock = 1024;
  if (n == 1) {
    // A row's only element: x - x - log(1) is exactly 0; NaN, +inf or -inf (the row of -inf
    // only) give NaN. Without the row's max, exp, sum and log per element.
    for (int64_t r = 0; r < rows; ++r) {
      y[r] = std::isfinite(x[r]) ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    }
    return;
  }
  alignas(64) float e[kBlock];
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float m = L::Max(n, xr);
    double sum = 0.0;
    for (int64_t j = 0; j < n; j += kBlock) {
      const int64_t len = std::min(kBlock, n - j);
      L::Exp(len, xr + j, m, e);
      sum += L::Sum(len, e);
    }
    if (m == kInf || m == -kInf || sum != sum) {
      // As SoftmaxRows: +inf (inf - inf), a row of -inf only, or a NaN: NaN throughout.
      std::fill(yr, yr + n, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    // sum >= 1 (the max's exp is exactly 1), so the log is >= 0.
    L::LogOut(n, xr, m, std::log(sum), yr);
  }
}

template <typename L>
void LayerNormRowsDriver(int64_t rows, int64_t n, const float* x, const float* scale,
                         const float* bias, float epsilon, float* y) {
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float mean = L::Sum(n, xr) * inv_n;
    const float var = L::SquaredDeviation(n, xr, mean) * inv_n;
    L::Normalize(n, xr, mean, 1.0f / std::sqrt(var + epsilon), scale, bias, y + r * n);
  }
}

template <typename L>
void RmsNormRowsDriver(int64_t rows, int64_t n, const float* x, const float* scale, float epsilon,
                       float* y) {
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float ms = L::SquaredDeviation(n, xr, 0.0f) * inv_n;
    L::Normalize(n, xr, 0.0f, 1.0f / std::sqrt(ms + epsilon), scale, nullptr, y + r * n);
  }
}

// The steps of a level whose bodies are the generic loops (ATTR: its target, or nothing).
#define DYNVM_ROW_STEPS(ATTR, NAME)                                                            \
  struct NAME {                                                                                \
    static ATTR float Max(int64_t n, const float* x) { return RowMax(n, x); }                  \
    static ATTR float Sum(int64_t n, const float* x) { return RowSum(n, x); }                  \
    static ATTR void Exp(int64_t n, const float* x, float m, float* y) { ExpRow(n, x, m, y); } \
    static ATTR void Scale(int64_t n, float s, float* y) { ScaleRow(n, s, y); }                \
    static ATTR void LogOut(int64_t n, const float* x, float m, double log_sum, float* y) {    \
      LogOutRow(n, x, m, log_sum, y);                                                          \
    }                                                                                          \
    static ATTR float SquaredDeviation(int64_t n, const float* x, float mean) {                \
      return RowSquaredDeviation(n, x, mean);                                                  \
    }                                                                                          \
    static ATTR void Normalize(int64_t n, const float* x, float mean, float rstd,              \
                               const float* scale, const float* bias, float* y) {              \
      NormalizeRow(n, x, mean, rstd, scale, bias, y);                                          \
    }                                                                                          \
  };

DYNVM_ROW_STEPS(, PortableSteps)

#if DYNVM_CPU_X86

// ---- AVX2 ----

// RowMax and RowSum with the generic versions' results: two 8-lane registers hold their 16
// lanes, so the sums are formed in the same order (lane k sums x[k], x[k + 16], ...; then lanes
// 0..15 in order, then the tail).
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

DYNVM_ROW_STEPS(DYNVM_AVX2_LOOPS, Avx2LoopSteps)

// The generic steps, with the explicit row max and sum.
struct Avx2Steps : Avx2LoopSteps {
  static float Max(int64_t n, const float* x) { return RowMaxAvx2(n, x); }
  static float Sum(int64_t n, const float* x) { return RowSumAvx2(n, x); }
};

// ---- AVX-512: the generic loops ----

DYNVM_ROW_STEPS(DYNVM_AVX512_LOOPS, Avx512Steps)

#endif  // DYNVM_CPU_X86

#undef DYNVM_ROW_STEPS

// The table's entries of a level.
template <typename L>
void FillLevel(internal::Dispatch* d) {
  d->softmax_rows = &SoftmaxRowsDriver<L>;
  d->log_softmax_rows = &LogSoftmaxRowsDriver<L>;
  d->layer_norm_rows = &LayerNormRowsDriver<L>;
  d->rms_norm_rows = &RmsNormRowsDriver<L>;
}

}  // namespace

namespace internal {

void FillRows(Isa isa, Dispatch* d) {
  FillLevel<PortableSteps>(d);
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) FillLevel<Avx2Steps>(d);
  if (isa >= Isa::kAvx512) FillLevel<Avx512Steps>(d);
#endif
}

}  // namespace internal

void SoftmaxRows(int64_t rows, int64_t n, const float* x, float* y) {
  internal::Table().softmax_rows(rows, n, x, y);
}

void LogSoftmaxRows(int64_t rows, int64_t n, const float* x, float* y) {
  internal::Table().log_softmax_rows(rows, n, x, y);
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
