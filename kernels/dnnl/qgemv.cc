// Weight-only quantized GEMV / small-M products (qgemv.h). Each weight element is widened to
// f32 in registers (int8: sign-extend and convert; bf16: shift into the upper half) and
// multiplied into f32 accumulators; int8 rows are scaled once after the sum. Four output rows
// run side by side (four independent FMA chains); the activation rows stay in L1. With one
// activation row (the decode GEMV) AVX-512 runs sixteen output rows side by side and sums them
// with one transpose-and-add tree (short K is then neither latency- nor reduction-bound).
//
// Paths: AVX-512 (16 lanes, masked tails), AVX2+FMA (8 lanes, scalar tails) and scalar, chosen
// once by __builtin_cpu_supports (explicit intrinsics: the widening does not auto-vectorize).
#include "kernels/dnnl/qgemv.h"

#include <immintrin.h>

#include "kernels/dnnl/clones.h"

// GCC 12 warns about the undefined first operand its own masked-intrinsic headers pass.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cstring>

namespace dynvm::onednn {
namespace {

inline float Bf16ToF32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline float Widen(int8_t v) { return static_cast<float>(v); }
inline float Widen(uint16_t v) { return Bf16ToF32(v); }

template <typename W>
void QGemvScalar(int64_t rows, int64_t k, const float* x, int64_t ldx, const W* w, int64_t ldw,
                 const float* scale, int64_t r0, int64_t r1, float beta, float* y, int64_t ldy) {
  for (int64_t j = r0; j < r1; ++j) {
    const W* wj = w + j * ldw;
    for (int64_t m = 0; m < rows; ++m) {
      const float* xm = x + m * ldx;
      float acc = 0.0f;
      for (int64_t i = 0; i < k; ++i) acc += xm[i] * Widen(wj[i]);
      if (scale != nullptr) acc *= scale[j];
      float& out = y[m * ldy + j];
      out = beta == 0.0f ? acc : beta * out + acc;
    }
  }
}

// ---- AVX-512 ----

#define DYNVM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

DYNVM_AVX512 inline __m512 Load16(const int8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
DYNVM_AVX512 inline __m512 Load16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
DYNVM_AVX512 inline __m512 MaskLoad16(__mmask16 mk, const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mk, p)));
}
DYNVM_AVX512 inline __m512 MaskLoad16(__mmask16 mk, const uint16_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, p)), 16));
}

// kR output rows from j times kM activation rows: each weight vector is widened once and
// used for every activation row.
template <int kR, int kM, typename W>
DYNVM_AVX512 void BlockAvx512(int64_t k, const float* x, int64_t ldx, const W* w, int64_t ldw,
                              const float* scale, int64_t j, float beta, float* y, int64_t ldy) {
  const int64_t k16 = k & ~int64_t{15};
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - k16)) - 1u);
  __m512 acc[kM][kR];
  for (int m = 0; m < kM; ++m) {
    for (int r = 0; r < kR; ++r) acc[m][r] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < k16; i += 16) {
    __m512 wv[kR];
    for (int r = 0; r < kR; ++r) wv[r] = Load16(w + (j + r) * ldw + i);
    for (int m = 0; m < kM; ++m) {
      const __m512 xv = _mm512_loadu_ps(x + m * ldx + i);
      for (int r = 0; r < kR; ++r) acc[m][r] = _mm512_fmadd_ps(xv, wv[r], acc[m][r]);
    }
  }
  if (tail != 0) {
    __m512 wv[kR];
    for (int r = 0; r < kR; ++r) wv[r] = MaskLoad16(tail, w + (j + r) * ldw + k16);
    for (int m = 0; m < kM; ++m) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, x + m * ldx + k16);
      for (int r = 0; r < kR; ++r) acc[m][r] = _mm512_fmadd_ps(xv, wv[r], acc[m][r]);
    }
  }
  for (int m = 0; m < kM; ++m) {
    for (int r = 0; r < kR; ++r) {
      float s = _mm512_reduce_add_ps(acc[m][r]);
      if (scale != nullptr) s *= scale[j + r];
      float& out = y[m * ldy + j + r];
      out = beta == 0.0f ? s : beta * out + s;
    }
  }
}

// kR output rows from j, all activation rows (four at a time).
template <int kR, typename W>
DYNVM_AVX512 void RowsAvx512(int64_t rows, int64_t k, const float* x, int64_t ldx, const W* w,
                             int64_t ldw, const float* scale, int64_t j, float beta, float* y,
                             int64_t ldy) {
  int64_t m = 0;
  for (; m + 4 <= rows; m += 4) {
    BlockAvx512<kR, 4>(k, x + m * ldx, ldx, w, ldw, scale, j, beta, y + m * ldy, ldy);
  }
  switch (rows - m) {
    case 3:
      return BlockAvx512<kR, 3>(k, x + m * ldx, ldx, w, ldw, scale, j, beta, y + m * ldy, ldy);
    case 2:
      return BlockAvx512<kR, 2>(k, x + m * ldx, ldx, w, ldw, scale, j, beta, y + m * ldy, ldy);
    case 1:
      return BlockAvx512<kR, 1>(k, x + m * ldx, ldx, w, ldw, scale, j, beta, y + m * ldy, ldy);
    default:
      return;
  }
}

// Sums each of the 16 vectors a[0..15] into lane r of the result (a transpose-and-add tree:
// 15 adds for 16 rows instead of 16 full horizontal reductions).
DYNVM_AVX512 inline __m512 Sum16x16(const __m512* a) {
  __m512 x[8], v[4], z[2];
  for (int p = 0; p < 8; ++p) {  // per 128-bit lane: [a0 0+2, a1 0+2, a0 1+3, a1 1+3]
    x[p] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * p], a[2 * p + 1]),
                         _mm512_unpackhi_ps(a[2 * p], a[2 * p + 1]));
  }
  for (int p = 0; p < 4; ++p) {  // per 128-bit lane: a[4p..4p+3]'s quarter sums
    v[p] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * p], x[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(x[2 * p], x[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  for (int p = 0; p < 2; ++p) {  // 128-bit lanes: v[2p] halves, v[2p+1] halves
    z[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  return _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// One activation row (the decode GEMV), 16 output rows from j: 16 independent FMA chains (short
// K is not latency-bound) and one reduction tree for all 16 sums.
template <typename W>
DYNVM_AVX512 void Block16Avx512(int64_t k, const float* x, const W* w, int64_t ldw,
                                const float* scale, int64_t j, float beta, float* y) {
  const int64_t k16 = k & ~int64_t{15};
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - k16)) - 1u);
  __m512 acc[16];
  for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
  const W* wj = w + j * ldw;
  for (int64_t i = 0; i < k16; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    for (int r = 0; r < 16; ++r) acc[r] = _mm512_fmadd_ps(xv, Load16(wj + r * ldw + i), acc[r]);
  }
  if (tail != 0) {
    const __m512 xv = _mm512_maskz_loadu_ps(tail, x + k16);
    for (int r = 0; r < 16; ++r) {
      acc[r] = _mm512_fmadd_ps(xv, MaskLoad16(tail, wj + r * ldw + k16), acc[r]);
    }
  }
  __m512 s = Sum16x16(acc);
  if (scale != nullptr) s = _mm512_mul_ps(s, _mm512_loadu_ps(scale + j));
  if (beta != 0.0f) s = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(y + j), s);
  _mm512_storeu_ps(y + j, s);
}

template <typename W>
DYNVM_AVX512 void QGemvAvx512(int64_t rows, int64_t k, const float* x, int64_t ldx, const W* w,
                              int64_t ldw, const float* scale, int64_t r0, int64_t r1, float beta,
                              float* y, int64_t ldy) {
  int64_t j = r0;
  if (rows == 1) {
    for (; j + 16 <= r1; j += 16) Block16Avx512(k, x, w, ldw, scale, j, beta, y);
  }
  for (; j + 4 <= r1; j += 4) RowsAvx512<4>(rows, k, x, ldx, w, ldw, scale, j, beta, y, ldy);
  for (; j < r1; ++j) RowsAvx512<1>(rows, k, x, ldx, w, ldw, scale, j, beta, y, ldy);
}

// ---- AVX2 ----

#define DYNVM_AVX2 __attribute__((target("avx2,fma")))

DYNVM_AVX2 inline __m256 Load8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
DYNVM_AVX2 inline __m256 Load8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

DYNVM_AVX2 inline float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

template <int kR, typename W>
DYNVM_AVX2 void BlockAvx2(int64_t rows, int64_t k, const float* x, int64_t ldx, const W* w,
                          int64_t ldw, const float* scale, int64_t j, float beta, float* y,
                          int64_t ldy) {
  const int64_t k8 = k & ~int64_t{7};
  for (int64_t m = 0; m < rows; ++m) {
    const float* xm = x + m * ldx;
    __m256 acc[kR];
    for (int r = 0; r < kR; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < k8; i += 8) {
      const __m256 xv = _mm256_loadu_ps(xm + i);
      for (int r = 0; r < kR; ++r) {
        acc[r] = _mm256_fmadd_ps(xv, Load8(w + (j + r) * ldw + i), acc[r]);
      }
    }
    for (int r = 0; r < kR; ++r) {
      float s = Sum8(acc[r]);
      const W* wr = w + (j + r) * ldw;
      for (int64_t i = k8; i < k; ++i) s += xm[i] * Widen(wr[i]);
      if (scale != nullptr) s *= scale[j + r];
      float& out = y[m * ldy + j + r];
      out = beta == 0.0f ? s : beta * out + s;
    }
  }
}

template <typename W>
DYNVM_AVX2 void QGemvAvx2(int64_t rows, int64_t k, const float* x, int64_t ldx, const W* w,
                          int64_t ldw, const float* scale, int64_t r0, int64_t r1, float beta,
                          float* y, int64_t ldy) {
  int64_t j = r0;
  for (; j + 4 <= r1; j += 4) BlockAvx2<4>(rows, k, x, ldx, w, ldw, scale, j, beta, y, ldy);
  for (; j < r1; ++j) BlockAvx2<1>(rows, k, x, ldx, w, ldw, scale, j, beta, y, ldy);
}

using Path = QGemvIsa;

Path Detect() {
  __builtin_cpu_init();
  if (QGemvIsaSupported(Path::kAvx512)) return Path::kAvx512;
  return QGemvIsaSupported(Path::kAvx2) ? Path::kAvx2 : Path::kScalar;
}

Path CurrentPath() {
  static const Path path = Detect();
  return path;
}

template <typename W>
void Dispatch(Path path, int64_t rows, int64_t k, const float* x, int64_t ldx, const W* w,
              int64_t ldw, const float* scale, int64_t r0, int64_t r1, float beta, float* y,
              int64_t ldy) {
  if (rows <= 0 || r1 <= r0) return;
  switch (path) {
    case Path::kAvx512:
      return QGemvAvx512(rows, k, x, ldx, w, ldw, scale, r0, r1, beta, y, ldy);
    case Path::kAvx2:
      return QGemvAvx2(rows, k, x, ldx, w, ldw, scale, r0, r1, beta, y, ldy);
    case Path::kScalar:
    case Path::kBest:
      return QGemvScalar(rows, k, x, ldx, w, ldw, scale, r0, r1, beta, y, ldy);
  }
}

}  // namespace

bool QGemvIsaSupported(QGemvIsa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case Path::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    case Path::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default:
      return true;
  }
}

void QGemvI8(int64_t rows, int64_t k, const float* x, int64_t ldx, const int8_t* q, int64_t ldw,
             const float* scale, int64_t r0, int64_t r1, float beta, float* y, int64_t ldy,
             QGemvIsa isa) {
  Dispatch(isa == QGemvIsa::kBest ? CurrentPath() : isa, rows, k, x, ldx, q, ldw, scale, r0, r1,
           beta, y, ldy);
}

void QGemvBf16(int64_t rows, int64_t k, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
               int64_t r0, int64_t r1, float beta, float* y, int64_t ldy, QGemvIsa isa) {
  Dispatch<uint16_t>(isa == QGemvIsa::kBest ? CurrentPath() : isa, rows, k, x, ldx, w, ldw, nullptr,
                     r0, r1, beta, y, ldy);
}

namespace {

// Widening loops the compiler vectorizes (cloned for AVX-512 and AVX2, picked by the CPU;
// internal: see clones.h).
DYNVM_CLONES void DequantizeRowsI8Loop(int64_t k, const int8_t* q, int64_t ldw, const float* scale,
                                       int64_t r0, int64_t r1, float* dst) {
  for (int64_t j = r0; j < r1; ++j) {
    const int8_t* row = q + j * ldw;
    float* d = dst + (j - r0) * k;
    const float s = scale[j];
    for (int64_t i = 0; i < k; ++i) d[i] = s * static_cast<float>(row[i]);
  }
}

DYNVM_CLONES void DequantizeRowsBf16Loop(int64_t k, const uint16_t* w, int64_t ldw, int64_t r0,
                                         int64_t r1, float* dst) {
  for (int64_t j = r0; j < r1; ++j) {
    const uint16_t* row = w + j * ldw;
    float* d = dst + (j - r0) * k;
    for (int64_t i = 0; i < k; ++i) d[i] = Bf16ToF32(row[i]);
  }
}

}  // namespace

void DequantizeRowsI8(int64_t k, const int8_t* q, int64_t ldw, const float* scale, int64_t r0,
                      int64_t r1, float* dst) {
  DequantizeRowsI8Loop(k, q, ldw, scale, r0, r1, dst);
}

void DequantizeRowsBf16(int64_t k, const uint16_t* w, int64_t ldw, int64_t r0, int64_t r1,
                        float* dst) {
  DequantizeRowsBf16Loop(k, w, ldw, r0, r1, dst);
}

const char* QGemvPath() {
  switch (CurrentPath()) {
    case Path::kAvx512:
      return "avx512";
    case Path::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

}  // namespace dynvm::onednn
