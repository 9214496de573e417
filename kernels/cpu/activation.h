// Activation microkernels (f32, a polynomial per element): erf, the GELUs, SiLU, a linear
// layer's bias + activation epilogue and the fused LSTM gates. Pointer in, pointer out, one
// thread; y may be x. NaN in gives NaN out. Portable, AVX2+FMA and AVX-512 implementations
// (isa.h); tanh, sigmoid and exp by fast_math.h. The levels may differ in the last bits where
// a multiply-add is fused (portable has no FMA) and where AVX2 has its own GELU loop.
#ifndef DYNVM_KERNELS_CPU_ACTIVATION_H_
#define DYNVM_KERNELS_CPU_ACTIVATION_H_

#include <cstdint>

namespace dynvm::cpu {

// y = erf(x), within 2e-7 absolute and 1e-6 relative. +-inf give +-1.
void Erf(int64_t n, const float* x, float* y);
// y = x/2 (1 + erf(x / sqrt 2)) (GELU, erf form) in one pass, within (1e-6 + 2e-7 x^2)
// relative of GELU in double.
void GeluErf(int64_t n, const float* x, float* y);
// y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void GeluTanh(int64_t n, const float* x, float* y);
// y = x sigmoid(x).
void Silu(int64_t n, const float* x, float* y);

enum class Activation { kNone, kRelu, kTanh, kSigmoid, kGelu, kGeluTanh, kSilu };

// Y[r, j] = act(Y[r, j] + bias[j]) over `rows` rows of n at row stride ldy (bias may be null):
// a linear layer's epilogue. Relu keeps NaN (and gives +0 for -0); tanh and sigmoid within
// 2e-7 absolute of libm.
void BiasActivationRows(Activation act, int64_t rows, int64_t n, const float* bias, float* y,
                        int64_t ldy);

// The default LSTM cell (sigmoid, tanh, tanh; no clip, peephole or input_forget) for `batch`
// rows of gates [batch, 4H] (ONNX's i, o, f, c blocks): c = f * c + i * tanh(c~),
// h = o * tanh(c). c and h [batch, H] are updated in place.
void LstmGates(int64_t batch, int64_t hidden, const float* gates, float* c, float* h);

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_ACTIVATION_H_
