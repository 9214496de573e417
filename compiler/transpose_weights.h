// The weight layout rule for products with few rows (compiler/transpose_weights.cc).
#ifndef DYNVM_COMPILER_TRANSPOSE_WEIGHTS_H_
#define DYNVM_COMPILER_TRANSPOSE_WEIGHTS_H_

#include "compiler/ir.h"

namespace dynvm::compiler {

// Stores each constant f32 weight W [K, N] that only products read as their B operand (MatMul's
// second input; dynvm::Linear's with trans_b = 0) transposed, as one constant [N, K], when at
// least one of those products may have few rows of A at run time (a decode step). Each MatMul
// becomes dynvm::MatMul(A, W^T, b_perm = [1, 0]) and each Linear takes trans_b = 1: the same
// product on a view, so the GEMV of a decode step streams W^T's rows (cpu::Gemv's dot form)
// instead of walking W's columns (the axpy form), and a product of many rows (a prompt) reads
// the transposed operand in place (oneDNN's transposed-B GEMM). The weight is stored once: the
// [K, N] constant is read by nothing afterwards. Needs inferred shapes. Returns how many
// weights it transposed.
int TransposeConstantWeights(Module& module);

// The name that turns it off in CompileOptions::disabled_rewrites (vm-compile
// --disable-rewrite transpose_weights, for A/B).
inline constexpr char kTransposeWeightsSwitch[] = "transpose_weights";

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_TRANSPOSE_WEIGHTS_H_
