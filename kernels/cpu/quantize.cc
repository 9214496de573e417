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
  d->dequantize_rows_bf16 = &DequantizeRowsBf16##SUFFIX;

}  // namespace

namespace internal {

void FillQuantize(Isa isa, Dispatch* d) {
  DYNVM_QUANTIZE_FILL(Portable)
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) {
    DYNVM_QUANTIZE_FILL(Avx2)
  }
  if (isa >= Isa::kAvx512) {
    DYNVM_QUANTIZE_FILL(Avx512)
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

}  // namespace dynvm::cpu
