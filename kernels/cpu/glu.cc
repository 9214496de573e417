// Gated-linear-unit microkernels (glu.h): one always-inline body, instantiated per level
// (target.h).
#include "kernels/cpu/glu.h"

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu {
namespace {

DYNVM_ALWAYS_INLINE void SiluMulBody(int64_t n, const float* gate, const float* up, float* y) {
  DYNVM_IVDEP
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float s = g * FastSigmoid(g);
    y[i] = (g != g ? g : s) * up[i];
  }
}

void SiluMulPortable(int64_t n, const float* gate, const float* up, float* y) {
  SiluMulBody(n, gate, up, y);
}
#if DYNVM_CPU_X86
DYNVM_AVX2_LOOPS void SiluMulAvx2(int64_t n, const float* gate, const float* up, float* y) {
  SiluMulBody(n, gate, up, y);
}
DYNVM_AVX512 void SiluMulAvx512(int64_t n, const float* gate, const float* up, float* y) {
  SiluMulBody(n, gate, up, y);
}
#endif

}  // namespace

namespace internal {

void FillGlu(Isa isa, Dispatch* d) {
  d->silu_mul = &SiluMulPortable;
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) d->silu_mul = &SiluMulAvx2;
  if (isa >= Isa::kAvx512) d->silu_mul = &SiluMulAvx512;
#endif
}

}  // namespace internal

void SiluMul(int64_t n, const float* gate, const float* up, float* y) {
  internal::Table().silu_mul(n, gate, up, y);
}

}  // namespace dynvm::cpu
