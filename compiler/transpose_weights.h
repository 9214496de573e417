// The weight layout rule for products with few rows (compiler/transpose_weights.cc).
#ifndef DYNVM_COMPILER_TRANSPOSE_WEIGHTS_H_
#define DYNVM_COMPILER_TRANSPOSE_WEIGHTS_H_

#include "compiler/ir.h"

namespace dynvm::compiler {

// Stores each constant f32 weight W [K, N] that only products read as their B operand (MatMul's
// second input; dynvm::Linear's W, trans_b 0, or 1 with W^T [N, K] stored, every use the same way
// round) in the layout the packed GEMM streams, once, when a Linear reads it or at least one of
// the products may have few rows of A at run time (a decode step):
// - as the packed GEMM's panels [ceil(N / 16), K, 16] (zeros past N; kernels/cpu/packed_gemm.h),
//   each MatMul becoming dynvm::MatMul(A, panels, b_packed_n = N) and each Linear
//   dynvm::Linear(X, panels, B, b_packed_n = N) (trans_b dropped): one row runs the GEMV on the
//   panels (packed_gemm::MultiplyVector, one sequential stream per panel), more rows the packed
//   GEMM on the same panels (the Linear with its bias and activation per block);
// - with `pack` false (pack_weights off), for products of few rows only: transposed, as one
//   constant [N, K], when the dot form reads it faster: each MatMul becomes
//   dynvm::MatMul(A, W^T, b_perm = [1, 0]) and each Linear takes trans_b = 1, so the GEMV streams
//   W^T's rows (cpu::Gemv's dot form) instead of walking W's columns (the axpy form).
// The weight is stored once: the original constant is read by nothing afterwards (the panels add
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
