// Activation microkernels (activation.h). Tuning notes:
// - GELU (erf form) is one pass, x/2 (2 - erfc(z)) for x >= 0 and x/2 erfc(z) below, z =
//   |x|/sqrt 2, with no Taylor branch: 1.25x the three-pass form (erf, add, multiply) in
//   dnnl_benchmark's BM_GeluForms, and free of the cancellation of 1 + erf(x) in the negative
//   tail. exp's argument -x^2/2 is rounded in float, hence the (1e-6 + 2e-7 x^2) relative bound
//   (DnnlKernels.GeluErfArrayMatchesGeluInDouble).
// - On AVX2 an explicit loop runs four vectors at once (490-550 -> 590-637 M elements/s on the
//   AVX2 EPYC): the compiler's AVX2 code ran one long polynomial chain at a time.
// - The fused LSTM gates are one pass over the cell state (one in/out pointer, so the compiler's
//   overlap checks pass), branch-free exp: with GCC's FMA contraction (the AVX2 level is AVX2 +
//   FMA) the GPT decode on the AVX2 EPYC went from 62-73 to 37-55 ms a run together with the
//   other loops (docs/results/avx2-gpt-fma-attention-ab-2026-11-28.txt).
#include "kernels/cpu/activation.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu {
namespace {

// erfc(z) for z >= 0 by the Chebyshev-fitted erfcc of Numerical Recipes (relative error below
// 1.2e-7), its exp by FastExp; z = inf gives t = 0 and an exponent clamped inside FastExp: 0.
DYNVM_ALWAYS_INLINE float Erfc(float z) {
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

// |x| < 0.5: the Taylor series of erf to x^15 (error below 1e-9 relative). Otherwise
// 1 - erfc(|x|). Both are computed and one is selected: branch-free.
DYNVM_ALWAYS_INLINE void ErfBody(int64_t n, const float* x, float* y) {
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

DYNVM_ALWAYS_INLINE void GeluErfBody(int64_t n, const float* x, float* y) {
  DYNVM_IVDEP
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float erfc = Erfc(std::fabs(v) * 0.7071067811865476f);
    y[i] = 0.5f * v * (v >= 0.0f ? 2.0f - erfc : erfc);
  }
}

DYNVM_ALWAYS_INLINE void GeluTanhBody(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = FastTanh(0.7978845608028654f * (v + 0.044715f * v * v * v));
    const float r = 0.5f * v * (1.0f + t);
    y[i] = v != v ? v : r;
  }
}

DYNVM_ALWAYS_INLINE void SiluBody(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float r = v * FastSigmoid(v);
    y[i] = v != v ? v : r;
  }
}

DYNVM_ALWAYS_INLINE void ReluRow(int64_t n, float* y) {
  for (int64_t j = 0; j < n; ++j) y[j] = y[j] > 0.0f ? y[j] : (y[j] != y[j] ? y[j] : 0.0f);
}

DYNVM_ALWAYS_INLINE void TanhRow(int64_t n, float* y) {
  for (int64_t j = 0; j < n; ++j) {
    const float v = y[j];
    const float r = FastTanh(v);
    y[j] = v != v ? v : r;
  }
}

DYNVM_ALWAYS_INLINE void SigmoidRow(int64_t n, float* y) {
  for (int64_t j = 0; j < n; ++j) {
    const float v = y[j];
    const float r = FastSigmoid(v);
    y[j] = v != v ? v : r;
  }
}

DYNVM_ALWAYS_INLINE void AddBias(int64_t n, const float* b, float* y) {
  for (int64_t j = 0; j < n; ++j) y[j] += b[j];
}

// GeluT: the level's GELU (a functor with Run(n, x, y)).
template <typename GeluT>
DYNVM_ALWAYS_INLINE void BiasActivationBody(Activation act, int64_t rows, int64_t n,
                                            const float* bias, float* y, int64_t ldy) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * ldy;
    if (bias != nullptr) AddBias(n, bias, row);
    switch (act) {
      case Activation::kNone:
        break;
      case Activation::kRelu:
        ReluRow(n, row);
        break;
      case Activation::kTanh:
        TanhRow(n, row);
        break;
      case Activation::kSigmoid:
        SigmoidRow(n, row);
        break;
      case Activation::kGelu:
        GeluT::Run(n, row, row);
        break;
      case Activation::kGeluTanh:
        GeluTanhBody(n, row, row);
        break;
      case Activation::kSilu:
        SiluBody(n, row, row);
        break;
    }
  }
}

DYNVM_ALWAYS_INLINE void LstmGatesBody(int64_t batch, int64_t hidden, const float* gates, float* c,
                                       float* h) {
  const int64_t H = hidden;
  for (int64_t b = 0; b < batch; ++b) {
    const float* gi = gates + b * 4 * H;
    const float* go = gi + H;
    const float* gf = gi + 2 * H;
    const float* gc = gi + 3 * H;
    float* cb = c + b * H;
    float* hb = h + b * H;
    for (int64_t j = 0; j < H; ++j) {
      const float cj = FastSigmoid(gf[j]) * cb[j] + FastSigmoid(gi[j]) * FastTanh(gc[j]);
      cb[j] = cj;
      hb[j] = FastSigmoid(go[j]) * FastTanh(cj);
    }
  }
}

struct GenericGelu {
  static DYNVM_ALWAYS_INLINE void Run(int64_t n, const float* x, float* y) { GeluErfBody(n, x, y); }
};

#define DYNVM_ACTIVATION_LEVEL(ATTR, SUFFIX, GELU)                                                 \
  ATTR void Erf##SUFFIX(int64_t n, const float* x, float* y) { ErfBody(n, x, y); }                 \
  ATTR void GeluTanh##SUFFIX(int64_t n, const float* x, float* y) { GeluTanhBody(n, x, y); }       \
  ATTR void Silu##SUFFIX(int64_t n, const float* x, float* y) { SiluBody(n, x, y); }               \
  ATTR void BiasActivationRows##SUFFIX(Activation act, int64_t rows, int64_t n, const float* bias, \
                                       float* y, int64_t ldy) {                                    \
    BiasActivationBody<GELU>(act, rows, n, bias, y, ldy);                                          \
  }                                                                                                \
  ATTR void LstmGates##SUFFIX(int64_t batch, int64_t hidden, const float* gates, float* c,         \
                              float* h) {                                                          \
    LstmGatesBody(batch, hidden, gates, c, h);                                                     \
  }

void GeluErfPortable(int64_t n, const float* x, float* y) { GeluErfBody(n, x, y); }
DYNVM_ACTIVATION_LEVEL(, Portable, GenericGelu)

#if DYNVM_CPU_X86

// ---- AVX2: GELU four vectors at a time ----

// FastExp (fast_math.h) on 8 lanes, the same steps.
DYNVM_AVX2 DYNVM_ALWAYS_INLINE __m256 ExpAvx2(__m256 x) {
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

// GeluErfBody's formula on 8 lanes (Erfc's polynomial and FastExp, the same steps).
DYNVM_AVX2 DYNVM_ALWAYS_INLINE __m256 GeluErfAvx2(__m256 v) {
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

// The generic loop at this level, for the tails.
DYNVM_AVX2_LOOPS void GeluErfLoopAvx2(int64_t n, const float* x, float* y) { GeluErfBody(n, x, y); }

// Four vectors per step: the polynomial chains are long, and independent ones in flight hide
// their latency.
DYNVM_AVX2 void GeluErfAvx2(int64_t n, const float* x, float* y) {
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
  if (i < n) GeluErfLoopAvx2(n - i, x + i, y + i);
}

struct Avx2Gelu {
  static void Run(int64_t n, const float* x, float* y) { GeluErfAvx2(n, x, y); }
};

DYNVM_ACTIVATION_LEVEL(DYNVM_AVX2_LOOPS, Avx2, Avx2Gelu)

// ---- AVX-512: the generic bodies ----

DYNVM_AVX512_LOOPS void GeluErfAvx512(int64_t n, const float* x, float* y) { GeluErfBody(n, x, y); }
DYNVM_ACTIVATION_LEVEL(DYNVM_AVX512_LOOPS, Avx512, GenericGelu)

#endif  // DYNVM_CPU_X86

#undef DYNVM_ACTIVATION_LEVEL

#define DYNVM_ACTIVATION_FILL(SUFFIX)                    \
  d->erf = &Erf##SUFFIX;                                 \
  d->gelu_erf = &GeluErf##SUFFIX;                        \
  d->gelu_tanh = &GeluTanh##SUFFIX;                      \
  d->silu = &Silu##SUFFIX;                               \
  d->bias_activation_rows = &BiasActivationRows##SUFFIX; \
  d->lstm_gates = &LstmGates##SUFFIX;

}  // namespace

namespace internal {

void FillActivation(Isa isa, Dispatch* d) {
  DYNVM_ACTIVATION_FILL(Portable)
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) {
    DYNVM_ACTIVATION_FILL(Avx2)
  }
  if (isa >= Isa::kAvx512) {
    DYNVM_ACTIVATION_FILL(Avx512)
  }
#endif
}

}  // namespace internal

void Erf(int64_t n, const float* x, float* y) { internal::Table().erf(n, x, y); }
void GeluErf(int64_t n, const float* x, float* y) { internal::Table().gelu_erf(n, x, y); }
void GeluTanh(int64_t n, const float* x, float* y) { internal::Table().gelu_tanh(n, x, y); }
void Silu(int64_t n, const float* x, float* y) { internal::Table().silu(n, x, y); }

void BiasActivationRows(Activation act, int64_t rows, int64_t n, const float* bias, float* y,
                        int64_t ldy) {
  internal::Table().bias_activation_rows(act, rows, n, bias, y, ldy);
}

void LstmGates(int64_t batch, int64_t hidden, const float* gates, float* c, float* h) {
  internal::Table().lstm_gates(batch, hidden, gates, c, h);
}

}  // namespace dynvm::cpu
