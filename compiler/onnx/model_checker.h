// Internal. Structural checks of an ONNX model, run before anything else reads it (and before
// libonnx sees it, which assumes well-formed input and may crash otherwise).
//
// Checked: the graph and opset imports are present; every name a node reads is defined before
// the node (in its graph or, for subgraphs, in an enclosing one), so cycles and undefined names
// are refused; names are defined once; attributes have a type matching the field they fill and
// exactly one filled field; tensors (initializers, attribute tensors) have non-negative dims
// whose byte size does not overflow and data of exactly that size, and external data stays in
// the model's folder; declared dims of values are non-negative and not absurd; subgraphs nest
// at most kMaxGraphDepth deep. Errors name the graph, node and value concerned.
#ifndef DYNVM_COMPILER_ONNX_MODEL_CHECKER_H_
#define DYNVM_COMPILER_ONNX_MODEL_CHECKER_H_

#include "absl/status/status.h"
#include "compiler/onnx/tensor_proto.h"
#include "onnx/onnx_pb.h"

namespace dynvm::compiler::onnx {

inline constexpr int kMaxGraphDepth = 24;
// Largest dim a value's declared shape may have.
inline constexpr int64_t kMaxDeclaredDim = int64_t{1} << 40;

absl::Status CheckModelStructure(const pb::ModelProto& model, const TensorReadOptions& options);

// "node 'name' (Op)" or "node #3 (Op)" when the node has no name.
std::string NodeLabel(const pb::NodeProto& node, int index);

// "INT", "FLOATS", ... (ONNX's names) for messages; "UNKNOWN" for a value outside the enum.
std::string AttrTypeName(pb::AttributeProto::AttributeType type);

}  // namespace dynvm::compiler::onnx

#endif  // DYNVM_COMPILER_ONNX_MODEL_CHECKER_H_
