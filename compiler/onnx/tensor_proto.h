// Internal. ONNX TensorProto -> dynvm Tensor, with every size checked against the declared dims,
// and external data read from files beside the model (never from outside its folder).
#ifndef DYNVM_COMPILER_ONNX_TENSOR_PROTO_H_
#define DYNVM_COMPILER_ONNX_TENSOR_PROTO_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"
#include "onnx/onnx_pb.h"

namespace dynvm::compiler::onnx {

namespace pb = ::onnx;

struct TensorReadOptions {
  // The folder external data paths are relative to. Empty: external data is refused.
  std::string model_dir;
  // Largest tensor accepted, in bytes.
  int64_t max_bytes = int64_t{4} << 30;
};

// The dtype of an ONNX element type; Unimplemented for types dynvm has no dtype for (complex,
// float8...), and for strings (not supported in constants yet).
absl::StatusOr<DType> DTypeOfElemType(int32_t elem_type);
// "FLOAT", "INT64", ... for messages.
std::string ElemTypeName(int32_t elem_type);

// Checks the dims of `t` (non-negative, rank <= Tensor::kMaxRank, element count and byte size
// without overflow and within `max_bytes`) and that the data present (raw_data, typed field or
// external data reference) has exactly the size the dims call for. Reads no file.
absl::Status CheckTensorProto(const pb::TensorProto& t, const TensorReadOptions& options);

// Checks the external data reference of `t` (location inside the model's folder after
// normalization, the file exists, offset and length within it) and returns the file's
// canonical path, offset and length.
struct ExternalRef {
  std::string path;
  int64_t offset = 0;
  int64_t length = 0;
};
absl::StatusOr<ExternalRef> ResolveExternalData(const pb::TensorProto& t,
                                                const TensorReadOptions& options);

// Decodes `t` (after CheckTensorProto) into a fresh contiguous heap tensor.
absl::StatusOr<Tensor> TensorFromProto(const pb::TensorProto& t, const TensorReadOptions& options);

}  // namespace dynvm::compiler::onnx

#endif  // DYNVM_COMPILER_ONNX_TENSOR_PROTO_H_
