// The oneDNN CPU kernels: one registration function per op family, all at priority
// kDnnlPriority under backend "dnnl" (docs/kernels.md). Internal.
#ifndef DYNVM_KERNELS_DNNL_DNNL_KERNELS_H_
#define DYNVM_KERNELS_DNNL_DNNL_KERNELS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"
#include "kernels/registry.h"

namespace dynvm::onednn {

void RegisterMatmulKernels(KernelRegistry& r);         // matmul.cc: MatMul, Gemm
void RegisterRnnKernels(KernelRegistry& r);            // rnn.cc: LSTM, GRU, RNN
void RegisterEltwiseKernels(KernelRegistry& r);        // eltwise.cc: unary and binary ops
void RegisterNormalizationKernels(KernelRegistry& r);  // normalization.cc: Softmax, LayerNorm
void RegisterReduceKernels(KernelRegistry& r);         // reduce.cc: ReduceX
void RegisterAttentionKernels(KernelRegistry& r);      // attention.cc: dynvm::Attention
// msft_attention.cc: GroupQueryAttention, MultiHeadAttention, Attention (both domains)
void RegisterMsftAttentionKernels(KernelRegistry& r);
void RegisterRotaryKernels(KernelRegistry& r);      // rotary.cc: dynvm::RotateHalf, SwiGlu
void RegisterLinearKernels(KernelRegistry& r);      // linear.cc: dynvm::Linear
void RegisterActivationKernels(KernelRegistry& r);  // activations.cc: dynvm::Gelu, ...
void RegisterConvKernels(KernelRegistry& r);       // conv.cc: Conv, ConvTranspose, dynvm::FusedConv
void RegisterPoolKernels(KernelRegistry& r);       // pool.cc: pooling, BatchNormalization, LRN
void RegisterResizeKernels(KernelRegistry& r);     // resize.cc: Resize (row loops)
void RegisterTransposeKernels(KernelRegistry& r);  // transpose.cc: Transpose (reorder)
void RegisterPadKernels(KernelRegistry& r);        // pad.cc: Pad (copy loops)
void RegisterConcatKernels(KernelRegistry& r);     // concat.cc: Concat (copy loops)
void RegisterGridSampleKernels(KernelRegistry& r);  // grid_sample.cc: GridSample
void RegisterRoiAlignKernels(KernelRegistry& r);    // roi_align.cc: RoiAlign
// quant.cc: (De)QuantizeLinear, MatMulInteger, QLinearMatMul
void RegisterQuantKernels(KernelRegistry& r);
void RegisterQuantizedWeightKernels(KernelRegistry& r);  // qmatmul.cc: dynvm::QMatMul
void RegisterMatMulNBitsKernels(KernelRegistry& r);      // matmul_nbits.cc: 4-bit MatMulNBits
// qconv.cc: ConvInteger, QLinearConv on oneDNN's int8 convolution.
void RegisterQConvKernels(KernelRegistry& r);
// qeltwise.cc: com.microsoft::QLinearAdd, dynvm::Requantize.
void RegisterQuantEltwiseKernels(KernelRegistry& r);
// quant.cc: the im2col ConvInteger / QLinearConv kernel (registered by RegisterQuantKernels at
// kDnnlSecondPriority: qconv.cc's fallback; it falls back to the reference in turn).
absl::StatusOr<std::unique_ptr<Kernel>> CreateIm2ColConv(const KernelSpec& spec, bool qlinear);

}  // namespace dynvm::onednn

#endif  // DYNVM_KERNELS_DNNL_DNNL_KERNELS_H_
