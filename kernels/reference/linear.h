// dynvm::Linear (a linear layer with its bias and activation, made by
// compiler/rewrite/matmul_bias.cc): the attributes, the run-time checks shared by the reference
// kernel (linear.cc) and the oneDNN backend's kernel (kernels/dnnl/linear.cc), and the
// activations' exact definitions.
//
// Y = act(X W + B): X [..., K] (rank >= 1, its leading dims are rows), W [K, N] (trans_b = 0)
// or [N, K] (trans_b = 1), B (optional) N values along its last axis, every other dim 1;
// Y [..., N]. activation: "" (none), "Relu", "Tanh", "Sigmoid", "Gelu" (erf form), "GeluTanh",
// "Silu" (x sigmoid(x)), the same functions as the ops of those names. With b_packed_n = N
// (trans_b 0; compiler/transpose_weights.h stores such weights) W is the [K, N] matrix stored as
// the packed GEMM's panels [ceil(N / 16), K, 16] (W[k, j] at [j / 16, k, j % 16], zeros past N;
// kernels/cpu/packed_gemm.h). Shapes that disagree fail with InvalidArgument (the VM adds the
// node's name).
#ifndef DYNVM_KERNELS_REFERENCE_LINEAR_H_
#define DYNVM_KERNELS_REFERENCE_LINEAR_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"
#include "kernels/registry.h"

namespace dynvm::reference {

enum class LinearAct { kNone, kRelu, kTanh, kSigmoid, kGelu, kGeluTanh, kSilu };

struct LinearAttrs {
  bool trans_b = false;
  LinearAct act = LinearAct::kNone;
  int64_t packed_n = -1;  // b_packed_n: W is panels of 16 columns; -1: a plain W
};

absl::StatusOr<LinearAttrs> GetLinearAttrs(const KernelSpec& spec);

// The product's geometry: m rows (X's leading dims), k, n.
struct LinearGeometry {
  int64_t m = 0, k = 0, n = 0;
};

// Checks the inputs (f32, ranks, K and N agreeing, B's shape) and prepares Y [..., N].
absl::StatusOr<LinearGeometry> PrepareLinear(const LinearAttrs& a, KernelContext& ctx,
                                             absl::Span<const Tensor* const> in,
                                             absl::Span<Tensor* const> out);

// The activation of one value, in double (the reference definition).
double LinearActivation(LinearAct act, double x);

}  // namespace dynvm::reference

#endif  // DYNVM_KERNELS_REFERENCE_LINEAR_H_
