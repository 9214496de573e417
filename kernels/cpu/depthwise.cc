// Depthwise 1D convolution microkernel (depthwise.h). Tuning notes: a block of kBlock outputs is
// held in registers (two zmm on AVX-512, four ymm on AVX2) across every tap, so each tap costs
// one broadcast and kBlock / lanes unaligned loads and FMAs, and y is written once; the row
// stays in L1 (a 400-step row is 1.6 KB). oneDNN 2.6 serves a plain-layout (NCW) depthwise
// Conv1d with a generic kernel: a conformer's k=15 conv over [1, 256, 400] took 2.6 ms there,
// this loop about 0.05 ms (docs/results/conformer-2026-11-29.txt).
#include "kernels/cpu/depthwise.h"

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu {
namespace {

constexpr int kBlock = 32;

DYNVM_ALWAYS_INLINE void DepthwiseBody(int64_t n, const float* xp, const float* w, int64_t taps,
                                       int64_t dilation, float bias, float* y) {
  int64_t t = 0;
  for (; t + kBlock <= n; t += kBlock) {
    float acc[kBlock];
    for (int j = 0; j < kBlock; ++j) acc[j] = bias;
    for (int64_t k = 0; k < taps; ++k) {
      const float wk = w[k];
      const float* xs = xp + t + k * dilation;
      for (int j = 0; j < kBlock; ++j) acc[j] += wk * xs[j];
    }
    for (int j = 0; j < kBlock; ++j) y[t + j] = acc[j];
  }
  for (; t < n; ++t) {
    float acc = bias;
    for (int64_t k = 0; k < taps; ++k) acc += w[k] * xp[t + k * dilation];
    y[t] = acc;
  }
}

void DepthwisePortable(int64_t n, const float* xp, const float* w, int64_t taps, int64_t dilation,
                       float bias, float* y) {
  DepthwiseBody(n, xp, w, taps, dilation, bias, y);
}

#if DYNVM_CPU_X86
DYNVM_AVX2 void DepthwiseAvx2(int64_t n, const float* xp, const float* w, int64_t taps,
                              int64_t dilation, float bias, float* y) {
  DepthwiseBody(n, xp, w, taps, dilation, bias, y);
}
DYNVM_AVX512 void DepthwiseAvx512(int64_t n, const float* xp, const float* w, int64_t taps,
                                  int64_t dilation, float bias, float* y) {
  DepthwiseBody(n, xp, w, taps, dilation, bias, y);
}
#endif  // DYNVM_CPU_X86

}  // namespace

namespace internal {

void FillDepthwise(Isa isa, Dispatch* d) {
  d->depthwise_conv1d_row = &DepthwisePortable;
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) d->depthwise_conv1d_row = &DepthwiseAvx2;
  if (isa >= Isa::kAvx512) d->depthwise_conv1d_row = &DepthwiseAvx512;
#endif
}

}  // namespace internal

void DepthwiseConv1dRow(int64_t n, const float* xp, const float* w, int64_t taps, int64_t dilation,
                        float bias, float* y) {
  internal::Table().depthwise_conv1d_row(n, xp, w, taps, dilation, bias, y);
}

}  // namespace dynvm::cpu
