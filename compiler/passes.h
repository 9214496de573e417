// Compiler passes over a Module. Each returns an error naming the node it could not handle.
#ifndef DYNVM_COMPILER_PASSES_H_
#define DYNVM_COMPILER_PASSES_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/ir.h"

namespace dynvm::compiler {

// Rewrites every ONNX Scan as a Loop (compiler/lower_scan.cc). A Scan that moves a scan
// output's axis needs that output's rank: before shape inference such a Scan is left as it is.
// Returns how many Scan nodes were left.
absl::StatusOr<int> LowerScans(Module& module);

// Gives each one-element integer function input that a Loop reads as its trip count (directly
// or through Cast, Identity, Reshape, Squeeze, Unsqueeze) the symbolic contents Symbol(name of
// the input), unless an input dim already has that name: the trip count, and every shape
// computed from it, is then symbolic, and `--bound NAME=N` bounds it. The code generator reads
// the symbol from the input at function entry and checks it (not negative, within its bound).
// Returns how many inputs it bound.
int BindScalarInputs(Module& module);

// Symbolic shape and dtype inference of every value, regions included. Loop-carried values
// whose shape changes from one iteration to the next get fresh symbols in the body.
absl::Status InferShapes(Module& module);
absl::Status InferGraph(Module& module, Graph& graph);

// Runs the reference kernel of every pure node whose inputs are all constants (outputs up to
// `max_elements` each) and replaces its outputs by constants. With `keep_quantized_weights`, a
// DequantizeLinear read by a MatMul or Gemm stays (the qdq_matmul / qdq_gemm rewrites need the
// int8 weights; the fold after the rewrites folds what they left).
absl::Status FoldConstants(Module& module, int64_t max_elements = 1 << 20,
                           bool keep_quantized_weights = false);

// Removes nodes whose outputs nothing uses (regions included).
void EliminateDeadCode(Module& module);

// Merges pure nodes with the same op, attributes and inputs (shape computations included).
void EliminateCommonSubexpressions(Module& module);

// Moves pure nodes of Loop/Scan bodies whose inputs all come from outside the body (or are
// constants) in front of the loop, so they run once.
void HoistLoopInvariants(Module& module);

// Where a Gather of one constant index keeps one row of a tensor that row-wise ops computed
// (the logits of every position, of which a decode step reads the last), makes those ops
// compute that row only (compiler/narrow_rows.cc). Needs inferred shapes; infer them again
// after. Returns how many nodes it narrowed.
int NarrowSelectedRows(Module& module);

// Where a Gather along axis 0 of a run-time index vector keeps some rows of a tensor whose
// leading axes a Reshape or Flatten merged ([d0, ..., dk, C] -> [d0 * ... * dk, C]: the
// prompt step's logits of `--decode`, of which each batch row's last position is kept), makes
// the row-wise ops before it compute those rows only (compiler/gather_rows.cc). Needs inferred
// shapes; infer them again after. Returns how many nodes it narrowed.
int GatherRowsEarly(Module& module);

// Where a Loop carries tensors stacked into one (an exported decode loop's KV cache [layers, 2,
// ...]: each slice read by a Gather of a constant index, the new slices re-stacked by Unsqueeze
// + Concat every iteration), carries the slices apart, so that the loop stops copying the stack
// and each slice's Concat growth becomes an in-place append (compiler/unstack_carried.cc).
// Infers shapes after each sweep. Returns how many carried values it unstacked.
absl::StatusOr<int> UnstackLoopCarried(Module& module);

// Replaces every use of `from` by `to` in `graph` and its regions (and graph outputs).
void ReplaceUses(Graph& graph, Value* from, Value* to);

// Calls fn(node) for every node of every function, regions included (pre-order).
void ForEachNode(Module& module, const std::function<void(Node&)>& fn);

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_PASSES_H_
