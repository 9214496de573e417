// Where the oneDNN backend runs one of dynvm's microkernels (kernels/cpu/) instead of a oneDNN
// primitive or dnnl_sgemm, per shape: the measured rules, in one place (docs/kernels.md,
// "Microkernel or oneDNN", has the measurements; dnnl_choice_benchmark takes them). Each rule
// reads the active microkernel level (cpu::ActiveIsa(): cpuid, lowered by DYNVM_CPU_ISA), so
// forcing a level down for an A/B run takes the choices that level would make; oneDNN's own
// level (ONEDNN_MAX_CPU_ISA) is read where it matters (HasInt8Vnni, the Winograd primitive).
#ifndef DYNVM_KERNELS_DNNL_CHOICE_H_
#define DYNVM_KERNELS_DNNL_CHOICE_H_

#include <cstdint>
#include <optional>

namespace dynvm::onednn::choice {

// A batch-1 product [1, k] x [k, n] (MatMul, Gemm, Linear, the recurrent gates' GEMVs) on
// `threads` threads: cpu::Gemv (split over the pool at more than one thread) rather than
// dnnl_sgemm.
bool UseGemv(int64_t n, int64_t k, int threads);

// A dynvm::Linear with constant weights the compiler left plain (with or without an activation),
// [m, k] x [k, n]: dynvm's packed GEMM on a copy packed once at its first run (cpu::packed_gemm,
// bias and activation on each block in cache) rather than dnnl_sgemm. (A weight stored as the
// panels, b_packed_n, always runs the packed GEMM.) Off with DYNVM_DNNL_PACKED_GEMM=0 (read once).
bool UsePackedGemm(int64_t m, int64_t n, int64_t k);

// A FusedConv dynvm's Winograd (cpu::winograd) could serve: whether it runs, given whether
// oneDNN's Winograd would serve it (oneDNN has a Winograd primitive for it, with its post-ops,
// and the conv kernel takes oneDNN's Winograd at its size). Off with DYNVM_DNNL_OWN_WINOGRAD=0
// (read once).
bool UseOwnWinograd(bool onednn_winograd_serves);

// A product of m activation rows with weight-only quantized weights [n, k], int8 (`int8`) or
// bf16 (QMatMul, the QLSTM/QGRU/QRNN GEMMs): the direct microkernel (cpu::QGemvI8 / QGemvBf16,
// each weight read once per call) rather than dequantizing the weights into scratch for
// dnnl_sgemm.
bool UseQGemv(int64_t m, int64_t n, int64_t k, bool int8);

// An integer product [m, k] x [k, n] (m >= 2) of MatMulInteger / QLinearMatMul or of the im2col
// ConvInteger / QLinearConv: dynvm's exact integer GEMM (cpu::IGemmCompute) rather than
// oneDNN's integer GEMM, which is exact only where oneDNN has VNNI (without it its u8 x s8
// kernels may saturate 16-bit intermediates). (m = 1 always runs cpu::IGemv.)
bool UseIGemm(int64_t m, int64_t n, int64_t k);

// An Add, Sub, Mul or Div the plain loops do not take (a broadcast other than a whole row, one
// scalar or one scalar per row; a strided view; a broadcast first operand): cpu::BinaryStrided
// over the output's merged axes rather than oneDNN's binary primitive. `a_full`: the first
// operand has every output element (else oneDNN cannot serve it at all).
bool UseStridedBinary(bool a_full);

// For benchmarks and tests: forces a rule's answer (nullopt: the rule again). Not thread-safe:
// set it while no kernel runs.
enum class Rule { kGemv, kPackedGemm, kOwnWinograd, kQGemv, kIGemm, kStridedBinary };
void ForceForTesting(Rule rule, std::optional<bool> use);

}  // namespace dynvm::onednn::choice

#endif  // DYNVM_KERNELS_DNNL_CHOICE_H_
