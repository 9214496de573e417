// Quantization microkernels (quantize.h): loops the compiler vectorizes, one body per kernel
// instantiated for each level (target.h).
#include "kernels/cpu/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu {
namespace {

template <typename T, int kLo, int kHi>
DYNVM_ALWAYS_INLINE void QuantizeBody(int64_t n, const float* x, float s, float z, T* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float r = std::nearbyint(x[i] / s) + z;
    y[i] = static_cast<T>(std::max(static_cast<float>(kLo), std::min(static_cast<float>(kHi), r)));
  }
}

template <typename T>
DYNVM_ALWAYS_INLINE void DequantizeBody(int64_t n, const T* x, float s, float z, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = (static_cast<float>(x[i]) - z) * s;
}

template <typename T, int kLo, int kHi>
DYNVM_ALWAYS_INLINE void RequantizeBody(int64_t n, const int32_t* acc, const double* scale,
                                        double z, T* y) {
  for (int64_t j = 0; j < n; ++j) {
    const double r = std::nearbyint(static_cast<double>(acc[j]) * scale[j]) + z;
    y[j] =
        static_cast<T>(std::max(static_cast<double>(kLo), std::min(static_cast<double>(kHi), r)));
  }
}

template <typename T, int kLo, int kHi>
DYNVM_ALWAYS_INLINE void RequantizeUniformBody(int64_t n, const int32_t* acc, double add, double s,
                                               double z, T* y) {
  for (int64_t j = 0; j < n; ++j) {
    const double r = std::nearbyint((static_cast<double>(acc[j]) + add) * s) + z;
    y[j] =
        static_cast<T>(std::max(static_cast<double>(kLo), std::min(static_cast<double>(kHi), r)));
  }
}

template <typename T, int kLo, int kHi>
DYNVM_ALWAYS_INLINE void QLinearAddBody(int64_t n, const T* a, const T* b, float ra, float rb,
                                        float k, T* c) {
  DYNVM_IVDEP
  for (int64_t i = 0; i < n; ++i) {
    const float v =
        std::fma(static_cast<float>(a[i]), ra, std::fma(static_cast<float>(b[i]), rb, k));
    const float r = std::nearbyint(v);
    c[i] = static_cast<T>(std::max(static_cast<float>(kLo), std::min(static_cast<float>(kHi), r)));
  }
}

DYNVM_ALWAYS_INLINE void LookupBody(int64_t n, const uint8_t* x, const uint8_t* table, uint8_t* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = table[x[i]];
}

DYNVM_ALWAYS_INLINE void ShiftBody(int64_t n, const uint8_t* x, int8_t* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int8_t>(static_cast<int>(x[i]) - 128);
}

// 16 lanes of running minima and maxima in GCC vectors (an elementwise min/max each level
// compiles to its own vector instructions: the plain-array form stayed scalar), then the lanes
// and the tail.
typedef float MinMaxLanes __attribute__((vector_size(64)));

DYNVM_ALWAYS_INLINE void MinMaxBody(int64_t n, const float* x, float* lo, float* hi) {
  constexpr int kLanes = 16;
  float first[kLanes];
  for (int j = 0; j < kLanes; ++j) first[j] = x[0];
  MinMaxLanes l, h;
  std::memcpy(&l, first, sizeof(l));
  h = l;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    MinMaxLanes v;
    std::memcpy(&v, x + i, sizeof(v));
    l = v < l ? v : l;
    h = v > h ? v : h;
  }
  float lo_lanes[kLanes], hi_lanes[kLanes];
  std::memcpy(lo_lanes, &l, sizeof(l));
  std::memcpy(hi_lanes, &h, sizeof(h));
  float a = lo_lanes[0], b = hi_lanes[0];
  for (int j = 1; j < kLanes; ++j) {
    a = lo_lanes[j] < a ? lo_lanes[j] : a;
    b = hi_lanes[j] > b ? hi_lanes[j] : b;
  }
  for (; i < n; ++i) {
    a = x[i] < a ? x[i] : a;
    b = x[i] > b ? x[i] : b;
  }
  *lo = a;
  *hi = b;
}

// Two loops so that the product and the bias are rounded apart (no FMA contraction across a
// store the next loop reads).
DYNVM_ALWAYS_INLINE void ScaleAccRowBody(int64_t n, const int32_t* acc, const int32_t* col,
                                         const int32_t* zc, int32_t rs, const float* scale,
                                         const float* bias, float* y) {
  const uint32_t r = static_cast<uint32_t>(rs);
  if (zc == nullptr && col == nullptr) {
    for (int64_t j = 0; j < n; ++j) y[j] = static_cast<float>(acc[j]) * scale[j];
  } else if (col == nullptr) {
    for (int64_t j = 0; j < n; ++j) {
      const uint32_t v = static_cast<uint32_t>(acc[j]) - static_cast<uint32_t>(zc[j]) * r;
      y[j] = static_cast<float>(static_cast<int32_t>(v)) * scale[j];
    }
  } else if (zc == nullptr) {
    for (int64_t j = 0; j < n; ++j) {
      const uint32_t v = static_cast<uint32_t>(acc[j]) + static_cast<uint32_t>(col[j]);
      y[j] = static_cast<float>(static_cast<int32_t>(v)) * scale[j];
    }
  } else {
    for (int64_t j = 0; j < n; ++j) {
      const uint32_t v = static_cast<uint32_t>(acc[j]) + static_cast<uint32_t>(col[j]) -
                         static_cast<uint32_t>(zc[j]) * r;
      y[j] = static_cast<float>(static_cast<int32_t>(v)) * scale[j];
    }
  }
  if (bias != nullptr) {
    for (int64_t j = 0; j < n; ++j) y[j] += bias[j];
  }
}

DYNVM_ALWAYS_INLINE float Bf16ToF32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

DYNVM_ALWAYS_INLINE void DequantizeRowsI8Body(int64_t k, const int8_t* q, int64_t ldw,
                                              const float* scale, int64_t r0, int64_t r1,
                                              float* dst) {
  for (int64_t j = r0; j < r1; ++j) {
    const int8_t* row = q + j * ldw;
    float* d = dst + (j - r0) * k;
    const float s = scale[j];
    for (int64_t i = 0; i < k; ++i) d[i] = s * static_cast<float>(row[i]);
  }
}

DYNVM_ALWAYS_INLINE void DequantizeRowsBf16Body(int64_t k, const uint16_t* w, int64_t ldw,
                                                int64_t r0, int64_t r1, float* dst) {
  for (int64_t j = r0; j < r1; ++j) {
    const uint16_t* row = w + j * ldw;
    float* d = dst + (j - r0) * k;
    for (int64_t i = 0; i < k; ++i) d[i] = Bf16ToF32(row[i]);
  }
}

#define DYNVM_QUANTIZE_LEVEL(ATTR, SUFFIX)                                                        \
  ATTR void QuantizeU8##SUFFIX(int64_t n, const float* x, float s, float z, uint8_t* y) {         \
    QuantizeBody<uint8_t, 0, 255>(n, x, s, z, y);                                                 \
  }                                                                                               \
  ATTR void QuantizeI8##SUFFIX(int64_t n, const float* x, float s, float z, int8_t* y) {          \
    QuantizeBody<int8_t, -128, 127>(n, x, s, z, y);                                               \
  }                                                                                               \
  ATTR void DequantizeU8##SUFFIX(int64_t n, const uint8_t* x, float s, float z, float* y) {       \
    DequantizeBody(n, x, s, z, y);                                                                \
  }                                                                                               \
  ATTR void DequantizeI8##SUFFIX(int64_t n, const int8_t* x, float s, float z, float* y) {        \
    DequantizeBody(n, x, s, z, y);                                                                \
  }                                                                                               \
  ATTR void RequantizeU8##SUFFIX(int64_t n, const int32_t* acc, const double* scale, double z,    \
                                 uint8_t* y) {                                                    \
    RequantizeBody<uint8_t, 0, 255>(n, acc, scale, z, y);                                         \
  }                                                                                               \
  ATTR void RequantizeI8##SUFFIX(int64_t n, const int32_t* acc, const double* scale, double z,    \
                                 int8_t* y) {                                                     \
    RequantizeBody<int8_t, -128, 127>(n, acc, scale, z, y);                                       \
  }                                                                                               \
  ATTR void RequantizeU8Uniform##SUFFIX(int64_t n, const int32_t* acc, double add, double s,      \
                                        double z, uint8_t* y) {                                   \
    RequantizeUniformBody<uint8_t, 0, 255>(n, acc, add, s, z, y);                                 \
  }                                                                                               \
  ATTR void RequantizeI8Uniform##SUFFIX(int64_t n, const int32_t* acc, double add, double s,      \
                                        double z, int8_t* y) {                                    \
    RequantizeUniformBody<int8_t, -128, 127>(n, acc, add, s, z, y);                               \
  }                                                                                               \
  ATTR void ShiftU8ToS8##SUFFIX(int64_t n, const uint8_t* x, int8_t* y) { ShiftBody(n, x, y); }   \
  ATTR void LookupBytes##SUFFIX(int64_t n, const uint8_t* x, const uint8_t* table, uint8_t* y) {  \
    LookupBody(n, x, table, y);                                                                   \
  }                                                                                               \
  ATTR void QLinearAddU8##SUFFIX(int64_t n, const uint8_t* a, const uint8_t* b, float ra,         \
                                 float rb, float k, uint8_t* c) {                                 \
    QLinearAddBody<uint8_t, 0, 255>(n, a, b, ra, rb, k, c);                                       \
  }                                                                                               \
  ATTR void QLinearAddI8##SUFFIX(int64_t n, const int8_t* a, const int8_t* b, float ra, float rb, \
                                 float k, int8_t* c) {                                            \
    QLinearAddBody<int8_t, -128, 127>(n, a, b, ra, rb, k, c);                                     \
  }                                                                                               \
  ATTR void MinMax##SUFFIX(int64_t n, const float* x, float* lo, float* hi) {                     \
    MinMaxBody(n, x, lo, hi);                                                                     \
  }                                                                                               \
  ATTR void ScaleAccRow##SUFFIX(int64_t n, const int32_t* acc, const int32_t* col,                \
                                const int32_t* zc, int32_t rs, const float* scale,                \
                                const float* bias, float* y) {                                    \
    ScaleAccRowBody(n, acc, col, zc, rs, scale, bias, y);                                         \
  }                                                                                               \
  ATTR void DequantizeRowsI8##SUFFIX(int64_t k, const int8_t* q, int64_t ldw, const float* scale, \
                                     int64_t r0, int64_t r1, float* dst) {                        \
    DequantizeRowsI8Body(k, q, ldw, scale, r0, r1, dst);                                          \
  }                                                                                               \
  ATTR void DequantizeRowsBf16##SUFFIX(int64_t k, const uint16_t* w, int64_t ldw, int64_t r0,     \
                                       int64_t r1, float* dst) {                                  \
    DequantizeRowsBf16Body(k, w, ldw, r0, r1, dst);                                               \
  }

DYNVM_QUANTIZE_LEVEL(, Portable)
#if DYNVM_CPU_X86
DYNVM_QUANTIZE_LEVEL(DYNVM_AVX2_LOOPS, Avx2)
DYNVM_QUANTIZE_LEVEL(DYNVM_AVX512_LOOPS, Avx512)
#endif
#undef DYNVM_QUANTIZE_LEVEL

#if DYNVM_CPU_X86
// QLinearAdd with intrinsics on the x86 levels: GCC leaves the fma of the generic body scalar.
// The same arithmetic: fma(a, ra, fma(b, rb, k)), clamped to the type's range in f32 (where
// clamping and rounding commute), rounded half to even by the conversion (MXCSR's default mode);
// the tail is the generic body.
template <typename T, int kLo, int kHi>
DYNVM_AVX512 void QLinearAddAvx512Impl(int64_t n, const T* a, const T* b, float ra, float rb,
                                       float k, T* c) {
  const __m512 vra = _mm512_set1_ps(ra), vrb = _mm512_set1_ps(rb), vk = _mm512_set1_ps(k);
  const __m512 lo = _mm512_set1_ps(static_cast<float>(kLo));
  const __m512 hi = _mm512_set1_ps(static_cast<float>(kHi));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
    const __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
    __m512 fa, fb;
    if constexpr (kLo == 0) {
      fa = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(va));
      fb = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(vb));
    } else {
      fa = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(va));
      fb = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(vb));
    }
    __m512 v = _mm512_fmadd_ps(fa, vra, _mm512_fmadd_ps(fb, vrb, vk));
    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    const __m512i q = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(c + i), _mm512_cvtepi32_epi8(q));
  }
  QLinearAddBody<T, kLo, kHi>(n - i, a + i, b + i, ra, rb, k, c + i);
}

template <typename T, int kLo, int kHi>
DYNVM_AVX2 void QLinearAddAvx2Impl(int64_t n, const T* a, const T* b, float ra, float rb, float k,
                                   T* c) {
  const __m256 vra = _mm256_set1_ps(ra), vrb = _mm256_set1_ps(rb), vk = _mm256_set1_ps(k);
  const __m256 lo = _mm256_set1_ps(static_cast<float>(kLo));
  const __m256 hi = _mm256_set1_ps(static_cast<float>(kHi));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i va = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + i));
    const __m128i vb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + i));
    __m256 fa, fb;
    if constexpr (kLo == 0) {
      fa = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(va));
      fb = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(vb));
    } else {
      fa = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(va));
      fb = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(vb));
    }
    __m256 v = _mm256_fmadd_ps(fa, vra, _mm256_fmadd_ps(fb, vrb, vk));
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    const __m256i q = _mm256_cvtps_epi32(v);
    const __m128i w =
        _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));  // exact
    const __m128i bytes = kLo == 0 ? _mm_packus_epi16(w, w) : _mm_packs_epi16(w, w);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(c + i), bytes);
  }
  QLinearAddBody<T, kLo, kHi>(n - i, a + i, b + i, ra, rb, k, c + i);
}

// 64 lookups at a time: two 128-entry two-table permutes (the index's low 7 bits), the high bit
// picking between them.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void LookupBytesVbmi(int64_t n,
                                                                            const uint8_t* x,
                                                                            const uint8_t* table,
                                                                            uint8_t* y) {
  const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
  const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i v = _mm512_loadu_si512(x + i);
    const __m512i lo = _mm512_permutex2var_epi8(t0, v, t1);
    const __m512i hi = _mm512_permutex2var_epi8(t2, v, t3);
    _mm512_storeu_si512(y + i, _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi));
  }
  LookupBody(n - i, x + i, table, y + i);
}

void QLinearAddU8Avx512I(int64_t n, const uint8_t* a, const uint8_t* b, float ra, float rb, float k,
                         uint8_t* c) {
  QLinearAddAvx512Impl<uint8_t, 0, 255>(n, a, b, ra, rb, k, c);
}
void QLinearAddI8Avx512I(int64_t n, const int8_t* a, const int8_t* b, float ra, float rb, float k,
                         int8_t* c) {
  QLinearAddAvx512Impl<int8_t, -128, 127>(n, a, b, ra, rb, k, c);
}
void QLinearAddU8Avx2I(int64_t n, const uint8_t* a, const uint8_t* b, float ra, float rb, float k,
                       uint8_t* c) {
  QLinearAddAvx2Impl<uint8_t, 0, 255>(n, a, b, ra, rb, k, c);
}
void QLinearAddI8Avx2I(int64_t n, const int8_t* a, const int8_t* b, float ra, float rb, float k,
                       int8_t* c) {
  QLinearAddAvx2Impl<int8_t, -128, 127>(n, a, b, ra, rb, k, c);
}
#endif

#define DYNVM_QUANTIZE_FILL(SUFFIX)                        \
  d->quantize_u8 = &QuantizeU8##SUFFIX;                    \
  d->quantize_i8 = &QuantizeI8##SUFFIX;                    \
  d->dequantize_u8 = &DequantizeU8##SUFFIX;                \
  d->dequantize_i8 = &DequantizeI8##SUFFIX;                \
  d->requantize_u8 = &RequantizeU8##SUFFIX;                \
  d->requantize_i8 = &RequantizeI8##SUFFIX;                \
  d->requantize_u8_uniform = &RequantizeU8Uniform##SUFFIX; \
  d->requantize_i8_uniform = &RequantizeI8Uniform##SUFFIX; \
  d->shift_u8_to_s8 = &ShiftU8ToS8##SUFFIX;                \
  d->min_max = &MinMax##SUFFIX;                            \
  d->scale_acc_row = &ScaleAccRow##SUFFIX;                 \
  d->dequantize_rows_i8 = &DequantizeRowsI8##SUFFIX;       \
  d->dequantize_rows_bf16 = &DequantizeRowsBf16##SUFFIX;   \
  d->qlinear_add_u8 = &QLinearAddU8##SUFFIX;               \
  d->qlinear_add_i8 = &QLinearAddI8##SUFFIX;               \
  d->lookup_bytes = &LookupBytes##SUFFIX;

}  // namespace

namespace internal {

void FillQuantize(Isa isa, Dispatch* d) {
  DYNVM_QUANTIZE_FILL(Portable)
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) {
    DYNVM_QUANTIZE_FILL(Avx2)
    d->qlinear_add_u8 = &QLinearAddU8Avx2I;
    d->qlinear_add_i8 = &QLinearAddI8Avx2I;
  }
  if (isa >= Isa::kAvx512) {
    DYNVM_QUANTIZE_FILL(Avx512)
    d->qlinear_add_u8 = &QLinearAddU8Avx512I;
    d->qlinear_add_i8 = &QLinearAddI8Avx512I;
    if (__builtin_cpu_supports("avx512vbmi")) d->lookup_bytes = &LookupBytesVbmi;
  }
#endif
}

}  // namespace internal

void QuantizeU8(int64_t n, const float* x, float s, float z, uint8_t* y) {
  internal::Table().quantize_u8(n, x, s, z, y);
}
void QuantizeI8(int64_t n, const float* x, float s, float z, int8_t* y) {
  internal::Table().quantize_i8(n, x, s, z, y);
}
void DequantizeU8(int64_t n, const uint8_t* x, float s, float z, float* y) {
  internal::Table().dequantize_u8(n, x, s, z, y);
}
void DequantizeI8(int64_t n, const int8_t* x, float s, float z, float* y) {
  internal::Table().dequantize_i8(n, x, s, z, y);
}
void RequantizeU8(int64_t n, const int32_t* acc, const double* scale, double z, uint8_t* y) {
  internal::Table().requantize_u8(n, acc, scale, z, y);
}
void RequantizeI8(int64_t n, const int32_t* acc, const double* scale, double z, int8_t* y) {
  internal::Table().requantize_i8(n, acc, scale, z, y);
}
void RequantizeU8Uniform(int64_t n, const int32_t* acc, double add, double s, double z,
                         uint8_t* y) {
  internal::Table().requantize_u8_uniform(n, acc, add, s, z, y);
}
void RequantizeI8Uniform(int64_t n, const int32_t* acc, double add, double s, double z, int8_t* y) {
  internal::Table().requantize_i8_uniform(n, acc, add, s, z, y);
}
void ShiftU8ToS8(int64_t n, const uint8_t* x, int8_t* y) {
  internal::Table().shift_u8_to_s8(n, x, y);
}
void MinMax(int64_t n, const float* x, float* lo, float* hi) {
  internal::Table().min_max(n, x, lo, hi);
}
void ScaleAccRow(int64_t n, const int32_t* acc, const int32_t* col, const int32_t* zc, int32_t rs,
                 const float* scale, const float* bias, float* y) {
  internal::Table().scale_acc_row(n, acc, col, zc, rs, scale, bias, y);
}
void DequantizeRowsI8(int64_t k, const int8_t* q, int64_t ldw, const float* scale, int64_t r0,
                      int64_t r1, float* dst) {
  internal::Table().dequantize_rows_i8(k, q, ldw, scale, r0, r1, dst);
}
void DequantizeRowsBf16(int64_t k, const uint16_t* w, int64_t ldw, int64_t r0, int64_t r1,
                        float* dst) {
  internal::Table().dequantize_rows_bf16(k, w, ldw, r0, r1, dst);
}
void LookupBytes(int64_t n, const uint8_t* x, const uint8_t* table, uint8_t* y) {
  internal::Table().lookup_bytes(n, x, table, y);
}
void QLinearAddU8(int64_t n, const uint8_t* a, const uint8_t* b, float ra, float rb, float k,
                  uint8_t* c) {
  internal::Table().qlinear_add_u8(n, a, b, ra, rb, k, c);
}
void QLinearAddI8(int64_t n, const int8_t* a, const int8_t* b, float ra, float rb, float k,
                  int8_t* c) {
  internal::Table().qlinear_add_i8(n, a, b, ra, rb, k, c);
}

}  // namespace dynvm::cpu
