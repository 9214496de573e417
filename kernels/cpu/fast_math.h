// Branch-free float exp, sigmoid and tanh that compilers vectorize in plain loops (the fused
// gate loops of the recurrent kernels, the activations). Accuracy: exp within 2 ulp over its
// range; sigmoid and tanh within 2e-7 absolute. Inline, so that each microkernel level
// (target.h) compiles them for its own target. Internal to kernels/cpu/*.cc.
#ifndef DYNVM_KERNELS_CPU_FAST_MATH_H_
#define DYNVM_KERNELS_CPU_FAST_MATH_H_

#include <algorithm>
#include <bit>
#include <cstdint>

namespace dynvm::cpu {

// exp(x); saturates to about 2^127 above 88.3 and to about 2^-126 below -87.3 (never inf or a
// denormal); exp(0) is exactly 1 (n = 0, r = 0: LogSoftmaxRows relies on it). NaN in gives a number
// out: callers feed finite GEMM results. Vectorizes only where floating-point comparisons may be
// if-converted: compile users with -fno-trapping-math (kernels/CMakeLists.txt does for
// kernels/cpu/).
inline float FastExp(float x) {
  x = std::min(std::max(x, -87.3f), 88.3f);
  // x = n * ln2 + r with |r| <= ln2 / 2. Adding 1.5 * 2^23 rounds x * log2(e) to the integer n
  // (in the low mantissa bits of t) without a float-to-int conversion.
  constexpr float kShifter = 12582912.0f;
  const float t = x * 1.44269504088896341f + kShifter;
  const float nf = t - kShifter;
  const int32_t n = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kShifter);
  float r = x - nf * 0.693359375f;
  r = r + nf * 2.12194440e-4f;
  // exp(r) by Cephes' expf polynomial.
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23);
  return p * scale;
}

inline float FastSigmoid(float x) { return 1.0f / (1.0f + FastExp(-x)); }

// tanh(x) = 1 - 2 / (exp(2x) + 1), odd-symmetric by construction.
inline float FastTanh(float x) { return 1.0f - 2.0f / (FastExp(2.0f * x) + 1.0f); }

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_FAST_MATH_H_
