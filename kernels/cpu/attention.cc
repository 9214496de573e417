// Attention microkernels (attention.h): one always-inline body per microkernel, instantiated per
// level (target.h). Softcap is FastTanh per element; the rotary halves are two unit-stride
// streams (vectorized as such), the interleaved pairs a stride-2 loop the compiler vectorizes
// with shuffles.
#include "kernels/cpu/attention.h"

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu {
namespace {

DYNVM_ALWAYS_INLINE void SoftcapBody(int64_t n, float cap, const float* x, float* y) {
  const float inv = 1.0f / cap;
  DYNVM_IVDEP
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float r = cap * FastTanh(v * inv);
    y[i] = v != v ? v : r;
  }
}

DYNVM_ALWAYS_INLINE void RotaryBody(int64_t half, bool interleaved, const float* cos,
                                    const float* sin, const float* x, float* y) {
  if (!interleaved) {
    const float* x1 = x + half;
    float* y1 = y + half;
    DYNVM_IVDEP
    for (int64_t i = 0; i < half; ++i) {
      const float a = x[i], b = x1[i];
      y[i] = a * cos[i] - b * sin[i];
      y1[i] = a * sin[i] + b * cos[i];
    }
    return;
  }
  DYNVM_IVDEP
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[2 * i], b = x[2 * i + 1];
    y[2 * i] = a * cos[i] - b * sin[i];
    y[2 * i + 1] = a * sin[i] + b * cos[i];
  }
}

DYNVM_ALWAYS_INLINE void RotateHalfBody(int64_t half, const float* cos, const float* sin,
                                        const float* x, float* y) {
  const float* x1 = x + half;
  const float* c1 = cos + half;
  const float* s1 = sin + half;
  float* y1 = y + half;
  DYNVM_IVDEP
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x1[i];
    y[i] = a * cos[i] - b * sin[i];
    y1[i] = b * c1[i] + a * s1[i];
  }
}

#define DYNVM_ATTENTION_LEVEL(ATTR, SUFFIX)                                                      \
  ATTR void Softcap##SUFFIX(int64_t n, float cap, const float* x, float* y) {                    \
    SoftcapBody(n, cap, x, y);                                                                   \
  }                                                                                              \
  ATTR void Rotary##SUFFIX(int64_t half, bool interleaved, const float* cos, const float* sin,   \
                           const float* x, float* y) {                                           \
    RotaryBody(half, interleaved, cos, sin, x, y);                                               \
  }                                                                                              \
  ATTR void RotateHalf##SUFFIX(int64_t half, const float* cos, const float* sin, const float* x, \
                               float* y) {                                                       \
    RotateHalfBody(half, cos, sin, x, y);                                                        \
  }

DYNVM_ATTENTION_LEVEL(, Portable)
#if DYNVM_CPU_X86
DYNVM_ATTENTION_LEVEL(DYNVM_AVX2_LOOPS, Avx2)
DYNVM_ATTENTION_LEVEL(DYNVM_AVX512, Avx512)
#endif

#undef DYNVM_ATTENTION_LEVEL

}  // namespace

namespace internal {

void FillAttention(Isa isa, Dispatch* d) {
  d->softcap = &SoftcapPortable;
  d->rotary = &RotaryPortable;
  d->rotate_half = &RotateHalfPortable;
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) {
    d->softcap = &SoftcapAvx2;
    d->rotary = &RotaryAvx2;
    d->rotate_half = &RotateHalfAvx2;
  }
  if (isa >= Isa::kAvx512) {
    d->softcap = &SoftcapAvx512;
    d->rotary = &RotaryAvx512;
    d->rotate_half = &RotateHalfAvx512;
  }
#endif
}

}  // namespace internal

void Softcap(int64_t n, float cap, const float* x, float* y) {
  internal::Table().softcap(n, cap, x, y);
}

void Rotary(int64_t half, bool interleaved, const float* cos, const float* sin, const float* x,
            float* y) {
  internal::Table().rotary(half, interleaved, cos, sin, x, y);
}

}  // namespace dynvm::cpu

namespace dynvm::cpu {

void RotateHalf(int64_t half, const float* cos, const float* sin, const float* x, float* y) {
  internal::Table().rotate_half(half, cos, sin, x, y);
}

}  // namespace dynvm::cpu
