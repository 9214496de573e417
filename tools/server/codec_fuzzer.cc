// libFuzzer target: dynvm-server's request decoding, which sees every byte a client sends.
// The first byte picks the path: 0, the REST JSON body; 1, a REST body with the binary tensor
// data extension (the next two bytes are Inference-Header-Content-Length); 2, a serialized
// gRPC ModelInferRequest. Decoded requests are checked against a fixed signature and encoded
// back, as the server does. Nothing may crash, leak or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "google/protobuf/stubs/logging.h"
#include "tools/server/codec.h"
#include "tools/server/grpc_codec.h"

namespace {

dynvm::FunctionInfo Signature() {
  dynvm::FunctionInfo f;
  f.name = "main";
  dynvm::ParamInfo x;
  x.name = "x";
  x.dtype = dynvm::DType::kF32;
  x.shape = {{-1, "batch"}, {4, ""}};
  dynvm::ParamInfo s;
  s.name = "s";
  s.dtype = dynvm::DType::kString;
  s.shape = {{-1, "batch"}};
  f.inputs = {x, s};
  f.bounds = {{"batch", 8}};
  return f;
}

void Exercise(const std::vector<dynvm::server::NamedTensor>& inputs) {
  static const dynvm::FunctionInfo f = Signature();
  dynvm::server::Limits limits;
  (void)dynvm::server::CheckSignature(f, inputs, limits);
  dynvm::server::EncodeRestInfer("m", "1", "id", inputs, std::vector<bool>(inputs.size(), true));
  dynvm::server::EncodeRestInfer("m", "1", "", inputs, {});
  inference::ModelInferResponse r;
  dynvm::server::EncodeGrpcOutputs(inputs, false, &r);
}

}  // namespace

// Protobuf logs every string field that is not UTF-8: quiet, as the reports would drown the run.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  dynvm::server::Limits limits;
  limits.max_elements = 1 << 16;
  limits.max_body_bytes = 1 << 20;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] == 0 || data[0] == 1) {
    int64_t header = -1;
    std::string rest = body;
    if (data[0] == 1 && rest.size() >= 2) {
      header = static_cast<uint8_t>(rest[0]) | (static_cast<uint8_t>(rest[1]) << 8);
      rest = rest.substr(2);
    }
    auto req = dynvm::server::ParseRestInfer(rest, header, limits);
    if (req.ok()) Exercise(req->inputs);
    // Again with inputs viewed in place where they can be (the server's path), on a body of
    // its own that the views keep alive.
    auto owned = std::make_shared<const std::string>(rest);
    auto viewed = dynvm::server::ParseRestInfer(*owned, header, limits, owned);
    if (viewed.ok() != req.ok()) __builtin_trap();
    owned.reset();
    if (viewed.ok()) Exercise(viewed->inputs);
  } else if (data[0] == 2) {
    auto request = std::make_shared<inference::ModelInferRequest>();
    if (!request->ParseFromString(body)) return 0;
    auto decoded = dynvm::server::DecodeGrpcInfer(*request, limits);
    if (decoded.ok()) Exercise(decoded->inputs);
    auto viewed = dynvm::server::DecodeGrpcInfer(*request, limits, request);
    if (viewed.ok() != decoded.ok()) __builtin_trap();
    request.reset();  // the views keep it alive
    if (viewed.ok()) Exercise(viewed->inputs);
  }
  return 0;
}
