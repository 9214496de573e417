// Depthwise 1D convolution microkernel (f32): one channel's row of a Conv1d whose group equals
// its channels (a conformer's or a TCN's depthwise conv, NCW layout), stride 1, any dilation.
// Pointer in, pointer out, one thread. Portable, AVX2+FMA and AVX-512 implementations (isa.h) of
// one loop; each output is bias + the taps in order k = 0, 1, ..., so the levels may differ only
// where a multiply-add is fused (portable has no FMA).
#ifndef DYNVM_KERNELS_CPU_DEPTHWISE_H_
#define DYNVM_KERNELS_CPU_DEPTHWISE_H_

#include <cstdint>

namespace dynvm::cpu {

// y[t] = bias + sum over k < taps of w[k] * xp[t + k * dilation], for t < n: xp is the channel's
// input row with its padding already in place (zeros), at least n + (taps - 1) * dilation floats.
// y must not overlap xp.
void DepthwiseConv1dRow(int64_t n, const float* xp, const float* w, int64_t taps, int64_t dilation,
                        float bias, float* y);

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_DEPTHWISE_H_
