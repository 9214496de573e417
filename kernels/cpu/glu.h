// Gated-linear-unit microkernels (f32): SwiGLU's gating, silu(gate) * up, in one pass. Pointer
// in, pointer out, one thread; y may be gate or up. Portable, AVX2+FMA and AVX-512
// implementations (isa.h), one loop per level; sigmoid by fast_math.h's FastSigmoid (within
// 2e-7 absolute of libm's), so silu(g) is within 2e-7 |g| (times |up|) of the exact value.
#ifndef DYNVM_KERNELS_CPU_GLU_H_
#define DYNVM_KERNELS_CPU_GLU_H_

#include <cstdint>

namespace dynvm::cpu {

// y[i] = gate[i] sigmoid(gate[i]) up[i]. A NaN gate gives NaN.
void SiluMul(int64_t n, const float* gate, const float* up, float* y);

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_GLU_H_
