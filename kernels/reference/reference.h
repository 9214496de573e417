// The reference CPU kernels: one registration function per op family. They are the oracle
// for every other backend (docs/kernels.md). Internal.
#ifndef DYNVM_KERNELS_REFERENCE_REFERENCE_H_
#define DYNVM_KERNELS_REFERENCE_REFERENCE_H_

#include "kernels/registry.h"

namespace dynvm::reference {

inline constexpr int kReferencePriority = 0;

void RegisterElementwiseKernels(KernelRegistry& r);  // elementwise.cc
void RegisterMatmulKernels(KernelRegistry& r);       // matmul.cc
void RegisterReduceKernels(KernelRegistry& r);       // reduce.cc, softmax/norm
void RegisterShapeKernels(KernelRegistry& r);        // shape.cc: data movement and shapes
void RegisterRnnKernels(KernelRegistry& r);          // rnn.cc: LSTM, GRU, RNN
void RegisterLossKernels(
    KernelRegistry& r);  // loss.cc: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
void RegisterPoolKernels(KernelRegistry& r);    // pool.cc: MaxPool, AveragePool, Global*Pool
void RegisterNnKernels(KernelRegistry& r);      // nn.cc: Conv, ConvTranspose, BatchNormalization,
                                                // InstanceNormalization, LRN, Shrink, EyeLike
void RegisterResizeKernels(KernelRegistry& r);  // resize.cc: Resize
void RegisterStringKernels(KernelRegistry& r);  // strings.cc: string tensors, TfIdfVectorizer
void RegisterMiscKernels(KernelRegistry& r);    // misc.cc: windows, Det, (De)QuantizeLinear
void RegisterQuantKernels(KernelRegistry& r);   // quant.cc: MatMulInteger, QLinearMatMul
// qeltwise.cc: com.microsoft::QLinearAdd, dynvm::Requantize.
void RegisterQuantEltwiseKernels(KernelRegistry& r);
// QLinearAdd's f32 constants (qeltwise.cc, ONNX Runtime's MLAS arithmetic): C = saturate(
// round_half_even(fma(A, *ra, fma(B, *rb, *k)))).
void QLinearAddParams(float as, int32_t az, float bs, int32_t bz, float cs, int32_t cz, float* ra,
                      float* rb, float* k);
void RegisterDynvmKernels(KernelRegistry& r);
void RegisterMsftKernels(KernelRegistry& r);  // msft.cc: com.microsoft (ONNX Runtime contrib)
void RegisterMsftAttentionKernels(KernelRegistry& r);  // msft_attention.cc: its attention ops
void RegisterVisionKernels(KernelRegistry& r);    // vision.cc: GridSample, RoiAlign, MaxUnpool, MVN
void RegisterSignalKernels(KernelRegistry& r);    // signal.cc: DFT, STFT, MelWeightMatrix
void RegisterRandomKernels(KernelRegistry& r);    // random.cc: Bernoulli, Random*
void RegisterAttentionKernel(KernelRegistry& r);  // attention.cc: dynvm::Attention
void RegisterLinearKernel(KernelRegistry& r);     // linear.cc: dynvm::Linear
void RegisterFusedConvKernels(
    KernelRegistry& r);  // fused_conv.cc: dynvm::FusedConv   // dynvm domain ops (sampling, ...)

}  // namespace dynvm::reference

#endif  // DYNVM_KERNELS_REFERENCE_REFERENCE_H_
