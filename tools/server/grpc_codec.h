// gRPC messages of the Open Inference Protocol (grpc_predict_v2.proto) to and from tensors:
// raw_input_contents or typed contents in, raw_output_contents or typed contents out. Pure
// functions: what the fuzzer (codec_fuzzer.cc) drives.
#ifndef DYNVM_TOOLS_SERVER_GRPC_CODEC_H_
#define DYNVM_TOOLS_SERVER_GRPC_CODEC_H_

#include <vector>

#include "absl/status/statusor.h"
#include "tools/server/codec.h"
#include "tools/server/grpc_predict_v2.pb.h"

namespace dynvm::server {

// The inputs of a ModelInferRequest (names, dtypes, shapes and contents checked; limits
// applied). `raw_outputs` says whether the request used raw contents (the response answers in
// kind). `timeout_ms` comes from the request parameter of that name (0 when absent).
struct GrpcInputs {
  std::vector<NamedTensor> inputs;
  std::vector<std::string> outputs;
  bool raw = false;
  int64_t timeout_ms = 0;
};
absl::StatusOr<GrpcInputs> DecodeGrpcInfer(const inference::ModelInferRequest& request,
                                           const Limits& limits);

// Fills `response`'s outputs: raw_output_contents when `raw`, typed contents otherwise.
void EncodeGrpcOutputs(const std::vector<NamedTensor>& outputs, bool raw,
                       inference::ModelInferResponse* response);

}  // namespace dynvm::server

#endif  // DYNVM_TOOLS_SERVER_GRPC_CODEC_H_
