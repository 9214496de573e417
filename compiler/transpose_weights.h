// The weight layout rule for products with few rows (compiler/transpose_weights.cc).
#ifndef DYNVM_COMPILER_TRANSPOSE_WEIGHTS_H_
#define DYNVM_COMPILER_TRANSPOSE_WEIGHTS_H_

#include "compiler/ir.h"

namespace dynvm::compiler {

// Stores each constant f32 weight W [K, N] that only products read as their B operand (MatMul's
// second input; dynvm::Linear's with trans_b = 0) in the layout its GEMV streams, once, when at
// least one of those products may have few rows of A at run time (a decode step):
// - read only by MatMuls (and `pack`): as the packed GEMM's panels [ceil(N / 16), K, 16] (zeros
//   past N; kernels/cpu/packed_gemm.h), each MatMul becoming dynvm::MatMul(A, panels,
//   b_packed_n = N): the decode step's GEMV reads one sequential stream per panel
//   (packed_gemm::MultiplyVector) and a prompt's product runs the packed GEMM on the same panels;
// - otherwise (a Linear reads it) transposed, as one constant [N, K], when the dot form reads it
//   faster: each MatMul becomes dynvm::MatMul(A, W^T, b_perm = [1, 0]) and each Linear takes
//   trans_b = 1, so the GEMV streams W^T's rows (cpu::Gemv's dot form) instead of walking W's
//   columns (the axpy form).
// The weight is stored once: the [K, N] constant is read by nothing afterwards (the panels add
// only N's padding to 16). Needs inferred shapes.
struct WeightLayouts {
  int packed = 0;
  int transposed = 0;
};
WeightLayouts TransposeConstantWeights(Module& module, bool pack = true);

// The name that turns it off in CompileOptions::disabled_rewrites (vm-compile
// --disable-rewrite transpose_weights, for A/B).
inline constexpr char kTransposeWeightsSwitch[] = "transpose_weights";
// The name that turns only the panels off (`pack` false: every weight transposed as before).
inline constexpr char kPackWeightsSwitch[] = "pack_weights";

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_TRANSPOSE_WEIGHTS_H_
