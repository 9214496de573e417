#include "kernels/dnnl/vector_loops.h"

#include <bit>
#include <cmath>
#include <limits>

#include "kernels/dnnl/fast_math.h"

namespace dynvm::onednn {
namespace {

#define DYNVM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

// Explicit lanes: the compiler does not reorder float reductions on its own (no -ffast-math),
// but vectorizes kLanes independent accumulators.
constexpr int kLanes = 16;

// Max of a row, and whether it holds NaN or +inf (exponent all ones, except -inf).
DYNVM_CLONES float RowMax(int64_t n, const float* x, bool* bad) {
  float m[kLanes];
  uint32_t any[kLanes];
  for (int k = 0; k < kLanes; ++k) {
    m[k] = -std::numeric_limits<float>::infinity();
    any[k] = 0;
  }
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float v = x[j + k];
      const uint32_t b = std::bit_cast<uint32_t>(v);
      any[k] |= ((b & 0x7f800000u) == 0x7f800000u) & (b != 0xff800000u);
      m[k] = v > m[k] ? v : m[k];
    }
  }
  for (int k = 0; j < n; ++j, ++k) {
    const float v = x[j];
    const uint32_t b = std::bit_cast<uint32_t>(v);
    any[k] |= ((b & 0x7f800000u) == 0x7f800000u) & (b != 0xff800000u);
    m[k] = v > m[k] ? v : m[k];
  }
  float r = m[0];
  uint32_t a = any[0];
  for (int k = 1; k < kLanes; ++k) {
    r = m[k] > r ? m[k] : r;
    a |= any[k];
  }
  *bad = a != 0;
  return r;
}

// y = exp(x - m) (exactly 0 for x = -inf); returns the sum.
DYNVM_CLONES float ExpRow(int64_t n, const float* x, float m, float* y) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float sum[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float v = x[j + k];
      const float e = v == kNegInf ? 0.0f : FastExp(v - m);
      y[j + k] = e;
      sum[k] += e;
    }
  }
  for (int k = 0; j < n; ++j, ++k) {
    const float e = x[j] == kNegInf ? 0.0f : FastExp(x[j] - m);
    y[j] = e;
    sum[k] += e;
  }
  float s = 0.0f;
  for (int k = 0; k < kLanes; ++k) s += sum[k];
  return s;
}

DYNVM_CLONES void ScaleRow(int64_t n, float s, float* y) {
  for (int64_t j = 0; j < n; ++j) y[j] *= s;
}

}  // namespace

bool SoftmaxRows(int64_t rows, int64_t n, const float* x, float* y) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  bool bad = false;
  if (x == y) {
    // In place: check every row before writing (the reference kernel then reads x intact).
    for (int64_t r = 0; r < rows; ++r) {
      if (RowMax(n, x + r * n, &bad) == kNegInf || bad) return false;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float m = RowMax(n, xr, &bad);
    if (m == kNegInf || bad) return false;  // not in place: y is rewritten by the caller
    ScaleRow(n, 1.0f / ExpRow(n, xr, m, yr), yr);
  }
  return true;
}

namespace {

DYNVM_CLONES float RowSum(int64_t n, const float* x) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) acc[k] += x[j + k];
  }
  for (int k = 0; j < n; ++j, ++k) acc[k] += x[j];
  float s = 0.0f;
  for (int k = 0; k < kLanes; ++k) s += acc[k];
  return s;
}

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
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mean) * rstd * scale[j] + bias[j];
  } else if (scale != nullptr) {
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mean) * rstd * scale[j];
  } else if (bias != nullptr) {
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mean) * rstd + bias[j];
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mean) * rstd;
  }
}

// bs >= 0: b's rows are bs apart; bs < 0: b is one scalar.
#define DYNVM_BINARY_LOOP(NAME, OP)                                                  \
  DYNVM_CLONES void NAME(int64_t rows, int64_t n, const float* a, const float* b,  \
                         int64_t bs, float* y) {                                     \
    if (bs < 0) {                                                                    \
      const float s = b[0];                                                          \
      for (int64_t j = 0; j < rows * n; ++j) y[j] = a[j] OP s;                       \
      return;                                                                        \
    }                                                                                \
    for (int64_t r = 0; r < rows; ++r) {                                             \
      const float* ar = a + r * n;                                                   \
      const float* br = b + r * bs;                                                  \
      float* yr = y + r * n;                                                         \
      for (int64_t j = 0; j < n; ++j) yr[j] = ar[j] OP br[j];                        \
    }                                                                                \
  }
DYNVM_BINARY_LOOP(AddRows, +)
DYNVM_BINARY_LOOP(SubRows, -)
DYNVM_BINARY_LOOP(MulRows, *)
DYNVM_BINARY_LOOP(DivRows, /)
#undef DYNVM_BINARY_LOOP

#define DYNVM_WHERE_LOOP(NAME, XV, YV)                                               \
  DYNVM_CLONES void NAME(int64_t n, const uint8_t* c, const float* x, const float* y, \
                         float* out) {                                                 \
    for (int64_t j = 0; j < n; ++j) out[j] = c[j] != 0 ? XV : YV;                      \
  }
DYNVM_WHERE_LOOP(WhereVV, x[j], y[j])
DYNVM_WHERE_LOOP(WhereSV, x[0], y[j])
DYNVM_WHERE_LOOP(WhereVS, x[j], y[0])
DYNVM_WHERE_LOOP(WhereSS, x[0], y[0])
#undef DYNVM_WHERE_LOOP

}  // namespace

void WhereBlocks(int64_t blocks, int64_t n, const uint8_t* cond, int64_t cond_step,
                 const float* x, int64_t x_step, const float* y, int64_t y_step, float* out) {
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
    const float mean = RowSum(n, xr) * inv_n;
    const float var = RowSquaredDeviation(n, xr, mean) * inv_n;
    NormalizeRow(n, xr, mean, 1.0f / std::sqrt(var + epsilon), scale, bias, y + r * n);
  }
}

void BinaryRows(BinaryOp op, int64_t rows, int64_t n, const float* a, const float* b,
                int64_t b_row_stride, float* y) {
  switch (op) {
    case BinaryOp::kAdd: return AddRows(rows, n, a, b, b_row_stride, y);
    case BinaryOp::kSub: return SubRows(rows, n, a, b, b_row_stride, y);
    case BinaryOp::kMul: return MulRows(rows, n, a, b, b_row_stride, y);
    case BinaryOp::kDiv: return DivRows(rows, n, a, b, b_row_stride, y);
  }
}

// |x| < 0.5: the Taylor series of erf to x^15 (error below 1e-9 relative). Otherwise
// 1 - erfc(|x|) with the Chebyshev-fitted erfc of Numerical Recipes (erfcc: relative error
// below 1.2e-7), its exp by FastExp. Both are computed and one is selected: branch-free.
DYNVM_CLONES void ErfArray(int64_t n, const float* x, float* y) {
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
    // z = inf: t = 0 and the exponent -inf clamps inside FastExp: erfc = 0.
    const float erfc = t * FastExp(p - std::min(z2, 100.0f));
    const float large = std::copysign(1.0f - erfc, v);
    const float r = z < 0.5f ? small : large;
    y[i] = v != v ? v : r;
  }
}

}  // namespace dynvm::onednn
