// gRPC messages of the Open Inference Protocol (grpc_predict_v2.proto) to and from tensors:
// raw_input_contents or typed contents in, raw_output_contents or typed contents out. Pure
// functions: what the fuzzer (codec_fuzzer.cc) drives.
#ifndef DYNVM_TOOLS_SERVER_GRPC_CODEC_H_
#define DYNVM_TOOLS_SERVER_GRPC_CODEC_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "tools/server/codec.h"
#include "tools/server/grpc_predict_v2.pb.h"

namespace dynvm::server {

// The inputs of a ModelInferRequest (names, dtypes, shapes and contents checked; limits
// applied). `raw_outputs` says whether the request used raw contents (the response answers in
// kind). `timeout_ms` comes from the request parameter of that name (0 when absent). With an
// `owner` that keeps `request` alive, raw_input_contents are viewed without a copy where
// their dtype and alignment allow (TensorOverRaw).
struct GrpcInputs {
  std::vector<NamedTensor> inputs;
  std::vector<std::string> outputs;
  bool raw = false;
  int64_t timeout_ms = 0;
};
absl::StatusOr<GrpcInputs> DecodeGrpcInfer(const inference::ModelInferRequest& request,
                                           const Limits& limits,
                                           std::shared_ptr<const void> owner = nullptr);

// Fills `response`'s outputs: raw_output_contents when `raw`, typed contents otherwise. With
// `raw` and not `with_raw_contents`, only the outputs' names, dtypes and shapes (the contents go
// through SerializeWithRawOutputs).
void EncodeGrpcOutputs(const std::vector<NamedTensor>& outputs, bool raw,
                       inference::ModelInferResponse* response, bool with_raw_contents = true);

// The wire bytes of `response` followed by one raw_output_contents field per tensor of
// `raw_outputs`, as slices: each numeric tensor's bytes are sent from its own memory (the
// slice holds a reference to it), BYTES tensors are encoded. What a parser reads is
// `response` with raw_output_contents appended (the field's number and order are the
// protocol's; the tensors come after any raw contents `response` already holds).
grpc::ByteBuffer SerializeWithRawOutputs(const inference::ModelInferResponse& response,
                                         const std::vector<NamedTensor>& raw_outputs);

}  // namespace dynvm::server

#endif  // DYNVM_TOOLS_SERVER_GRPC_CODEC_H_
