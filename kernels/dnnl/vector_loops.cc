#include "kernels/dnnl/vector_loops.h"

#include <bit>
#include <cmath>
#include <limits>

#include "kernels/dnnl/fast_math.h"

namespace dynvm::onednn {
namespace {

#define DYNVM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

// Max of a row, and whether it holds NaN or +inf (exponent all ones, except -inf).
DYNVM_CLONES float RowMax(int64_t n, const float* x, bool* bad) {
  float m = -std::numeric_limits<float>::infinity();
  uint32_t any = 0;
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t b = std::bit_cast<uint32_t>(x[j]);
    any |= ((b & 0x7f800000u) == 0x7f800000u && b != 0xff800000u) ? 1u : 0u;
    m = x[j] > m ? x[j] : m;
  }
  *bad = any != 0;
  return m;
}

DYNVM_CLONES float ExpRow(int64_t n, const float* x, float m, float* y) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float e = x[j] == kNegInf ? 0.0f : FastExp(x[j] - m);
    y[j] = e;
    sum += e;
  }
  return sum;
}

DYNVM_CLONES void ScaleRow(int64_t n, float s, float* y) {
  for (int64_t j = 0; j < n; ++j) y[j] *= s;
}

}  // namespace

bool SoftmaxRows(int64_t rows, int64_t n, const float* x, float* y) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    bool bad = false;
    if (RowMax(n, x + r * n, &bad) == kNegInf || bad) return false;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    bool bad;
    const float m = RowMax(n, xr, &bad);
    ScaleRow(n, 1.0f / ExpRow(n, xr, m, yr), yr);
  }
  return true;
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
