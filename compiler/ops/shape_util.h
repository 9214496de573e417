// Internal. Helpers the shape functions of several families share (compiler/ops/*.cc).
#ifndef DYNVM_COMPILER_OPS_SHAPE_UTIL_H_
#define DYNVM_COMPILER_OPS_SHAPE_UTIL_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/op_registry.h"

namespace dynvm::compiler {
namespace shapes {

// `axis` normalized to [0, rank); InvalidArgument naming the node when out of range.
absl::StatusOr<int> Axis(InferContext& c, int64_t axis, int rank);
// Reads a constant or symbolic-content integer input as constants; nullopt if not constant.
std::optional<std::vector<int64_t>> ConstInts(InferContext& c, size_t i);
// The product of the dims.
Dim Numel(SymbolicContext& sym, const std::vector<Dim>& s);
// Every output gets input 0's dtype and shape. The symbolic content (the dims a shape tensor
// holds) is not passed on: an op of this shape function may change the values (Sign, Neg,
// Clip, CumSum, a scatter).
absl::Status SameAsInput(InferContext& c);
// SameAsInput, and output 0 keeps input 0's symbolic content: for ops that keep the values
// (Dropout in inference, dynvm::Copy).
absl::Status SameAsInputKeepingContent(InferContext& c);

}  // namespace shapes

// Shape inference of Conv and dynvm::FusedConv: [N, M, spatial...] (a FusedConv with a
// depthwise stage: [N, M, ceil(H / dw_stride), ceil(W / dw_stride)]). The spatial sizes are
// computed when the input's spatial dims and W's kernel dims are constants (else left to the
// kernel); a W whose input channels disagree with X's (times group), a negative pad, or a
// kernel larger than the padded input is an error naming the node whenever the dims it needs
// are known (compiler/ops/nn.cc).
absl::Status InferConvShape(InferContext& c);
absl::Status InferFusedConvShape(InferContext& c);
// The output dims of MaxPool / AveragePool when the input's spatial dims are constants and the
// attributes valid (as kernels/reference/pool.cc computes them); nullopt otherwise (the kernel
// decides, and reports errors, at run time).
std::optional<std::vector<Dim>> StaticPoolShape(InferContext& c);

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_OPS_SHAPE_UTIL_H_
