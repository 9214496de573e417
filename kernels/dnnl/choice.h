// Where the oneDNN backend runs one of dynvm's microkernels (kernels/cpu/) instead of a oneDNN
// primitive or dnnl_sgemm, per shape: the measured rules, in one place (docs/kernels.md,
// "Microkernel or oneDNN", has the measurements). Each rule reads the active level
// (cpu::ActiveIsa(): cpuid, lowered by DYNVM_CPU_ISA), so forcing a level down for an A/B run
// takes the choices that level would make.
#ifndef DYNVM_KERNELS_DNNL_CHOICE_H_
#define DYNVM_KERNELS_DNNL_CHOICE_H_

#include <cstdint>

namespace dynvm::onednn::choice {

// A dynvm::Linear with an activation and constant weights, [m, k] x [k, n]: dynvm's packed GEMM
// (cpu::packed_gemm) rather than dnnl_sgemm. Off with DYNVM_DNNL_PACKED_GEMM=0 (read once).
bool UsePackedGemm(int64_t m, int64_t n, int64_t k, int threads);

// A FusedConv that dynvm's Winograd (cpu::winograd) could serve, where oneDNN has no Winograd
// primitive for it: whether the active level runs dynvm's. Off with DYNVM_DNNL_OWN_WINOGRAD=0
// (read once).
bool UseOwnWinograd();

// A product of m activation rows with weight-only quantized weights [n, k] (QMatMul, the
// QLSTM/QGRU/QRNN GEMMs): the direct microkernel (cpu::QGemvI8 / QGemvBf16, reading each weight
// once per call) rather than dequantizing the weights into scratch for dnnl_sgemm.
bool UseQGemv(int64_t m, int64_t n, int64_t k);

// An integer product [m, k] x [k, n] of MatMulInteger / QLinearMatMul (m >= 2) or of the im2col
// ConvInteger / QLinearConv: dynvm's exact integer GEMM (cpu::IGemmCompute) rather than
// oneDNN's integer GEMM, which is exact only where oneDNN has VNNI (without it its u8 x s8
// kernels may saturate 16-bit intermediates). (M = 1 always runs cpu::IGemv.)
bool UseIGemm(int64_t m, int64_t n, int64_t k);

}  // namespace dynvm::onednn::choice

#endif  // DYNVM_KERNELS_DNNL_CHOICE_H_
