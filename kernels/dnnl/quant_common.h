// Helpers shared by the oneDNN backend's integer kernels: quant.cc (QuantizeLinear,
// DequantizeLinear, MatMulInteger, QLinearMatMul, the im2col ConvInteger/QLinearConv) and
// qconv.cc (the int8 convolution primitive). docs/kernels.md, "Quantized operators".
#ifndef DYNVM_KERNELS_DNNL_QUANT_COMMON_H_
#define DYNVM_KERNELS_DNNL_QUANT_COMMON_H_

#include <cstdint>

#include "kernels/tensor.h"

namespace dynvm::onednn {

// u8 or i8.
bool Is8Bit(DType d);

// Element `i` of a per-tensor (one value: every i reads it) or per-axis scale or zero point
// (f32, u8 or i8) as double, exactly; 0 when `t` is null (an absent zero point).
double QuantParamAt(const Tensor* t, int64_t i);

// Whether the CPU has VNNI (avx512_core_vnni or avx2_vnni) as oneDNN sees it: oneDNN's u8 x s8
// GEMM and convolution are exact only there (without it they may saturate 16-bit
// intermediates).
bool HasInt8Vnni();

}  // namespace dynvm::onednn

#endif  // DYNVM_KERNELS_DNNL_QUANT_COMMON_H_
