// Internal. The ONNX operators the importer accepts (opsets 7 to 17, default domain), with the
// attributes each may carry and their types, so that a model using anything else is refused
// at import with a message naming the node, the operator and what is missing.
#ifndef DYNVM_COMPILER_ONNX_OP_SUPPORT_H_
#define DYNVM_COMPILER_ONNX_OP_SUPPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "onnx/onnx_pb.h"

namespace dynvm::compiler::onnx {

// Opsets 7 to 17 are supported; a model of an older opset is accepted when every operator it
// uses is unchanged since that opset (OpSupport::since).
inline constexpr int kMinOpset = 1;
inline constexpr int kMinFullOpset = 7;
inline constexpr int kMaxOpset = 17;

struct OpSupport {
  // The opset-7 schema of the operator dates from this opset (7 when it is from opset 7 or
  // later): a model of an opset below 7 may use the operator only from this opset on.
  int since = 7;
  struct Arity {
    int since = 1;               // the schema version (opset) this arity holds from
    int max_inputs = 0;          // 0: any number
    uint32_t required_mask = 0;  // bit i: input i must be present (a non-empty name)
  };
  std::vector<Arity> arity;  // by increasing `since`
  // The arity in force at `opset`; nullptr when the operator does not exist there yet.
  const Arity* ArityAt(int64_t opset) const;
  // Attribute name -> its type in the ONNX spec (union over opsets 7..17).
  absl::flat_hash_map<std::string, ::onnx::AttributeProto::AttributeType> attrs;
};

// nullptr when the operator is not supported.
const OpSupport* FindOpSupport(absl::string_view op);

// Every operator the importer accepts, in the table's order.
std::vector<std::string> SupportedOps();

// "INT", "FLOATS", ... for messages.
std::string AttrTypeName(::onnx::AttributeProto::AttributeType type);

}  // namespace dynvm::compiler::onnx

#endif  // DYNVM_COMPILER_ONNX_OP_SUPPORT_H_
