// Request and response encoding of the Open Inference Protocol (KServe v2) for dynvm-server:
// the REST body (JSON tensors, and the binary tensor data extension: a JSON header of
// Inference-Header-Content-Length bytes followed by raw little-endian tensors), the raw
// tensor bytes that gRPC's raw_input_contents carry, and validation against a model's
// signature. Pure functions of their arguments: what the fuzzer (codec_fuzzer.cc) drives.
//
// Every error is InvalidArgument (400 / INVALID_ARGUMENT) naming the tensor and what was wrong,
// or ResourceExhausted (413 / RESOURCE_EXHAUSTED) for a request past a limit.
#ifndef DYNVM_TOOLS_SERVER_CODEC_H_
#define DYNVM_TOOLS_SERVER_CODEC_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "kernels/tensor.h"
#include "nlohmann/json_fwd.hpp"
#include "vm/executable.h"

namespace dynvm::server {

// What one request may hold (config.json "limits"; docs/serving.md).
struct Limits {
  int64_t max_body_bytes = int64_t{64} << 20;
  int64_t max_elements = int64_t{1} << 24;  // per tensor
  int64_t max_string_bytes = int64_t{1} << 20;
  int64_t max_tensors = 64;
  int64_t max_batch = 1024;  // the first dim of a tensor whose first dim is symbolic
};

// KServe datatype names ("FP32", "INT64", "BYTES" ...) and dynvm's dtypes.
absl::StatusOr<DType> DTypeFromKServe(absl::string_view name);
std::string KServeDType(DType dtype);

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

struct RequestedOutput {
  std::string name;
  bool binary = false;  // parameters.binary_data
};

struct InferRequest {
  std::string id;
  std::vector<NamedTensor> inputs;
  std::vector<RequestedOutput> outputs;  // empty: every output
  bool binary_outputs = false;           // parameters.binary_data_output
  int64_t timeout_ms = 0;                // parameters.timeout_ms; 0 = the model's default
};

// A tensor of `dtype` and `dims` from raw little-endian bytes (BYTES: each element a 4-byte
// little-endian length and its bytes). `what` names the tensor in errors.
absl::StatusOr<Tensor> TensorFromRaw(DType dtype, const std::vector<int64_t>& dims,
                                     absl::string_view raw, const Limits& limits,
                                     absl::string_view what);
// As TensorFromRaw, but without a copy where it can: a numeric tensor whose bytes are aligned to
// its element size is a view of `raw`, which `owner` keeps alive (as long as any reference to
// the tensor, e.g. a VM's zero-copy input binding, lives). BYTES, misaligned or empty data,
// and a null `owner` are copied.
absl::StatusOr<Tensor> TensorOverRaw(DType dtype, const std::vector<int64_t>& dims,
                                     absl::string_view raw, const Limits& limits,
                                     absl::string_view what, std::shared_ptr<const void> owner);
// The raw bytes of a contiguous host tensor, appended to `out` (the inverse of TensorFromRaw).
void AppendRaw(const Tensor& t, std::string* out);

// Checks a shape from a request: rank at most Tensor::kMaxRank, dims >= 0, element count
// within the limit. Returns the element count.
absl::StatusOr<int64_t> CheckShape(const std::vector<int64_t>& dims, const Limits& limits,
                                   absl::string_view what);

// Parses a REST infer body. `header_length` is Inference-Header-Content-Length, or -1 when the
// request has no binary part (the whole body is JSON).
// With an `owner` that keeps `body` alive, binary inputs are viewed in place where their dtype
// and alignment allow (TensorOverRaw).
absl::StatusOr<InferRequest> ParseRestInfer(absl::string_view body, int64_t header_length,
                                            const Limits& limits,
                                            std::shared_ptr<const void> owner = nullptr);

// Checks the inputs against `function`'s signature: every input given once, known names, the
// dtype, the rank, fixed dims, one value per symbol across the inputs and the declared bounds.
absl::Status CheckSignature(const FunctionInfo& function, const std::vector<NamedTensor>& inputs,
                            const Limits& limits);

// The REST response: JSON, or (when an output is binary) the JSON header then the raw outputs;
// `header_length` is then the header's size (-1 for plain JSON).
struct RestResponse {
  std::string body;
  int64_t header_length = -1;
  // The binary outputs that follow `body` on the wire, in order, when they are sent from
  // their tensors' memory instead of being copied into `body` (see EncodeRestInfer).
  std::vector<Tensor> tail;
  int64_t tail_bytes = 0;
};
// When every binary output is numeric and together they hold at least `tail_from_bytes`
// bytes, they are left in `tail` (body is then the header alone); otherwise they are appended
// to `body`.
RestResponse EncodeRestInfer(absl::string_view model, absl::string_view version,
                             absl::string_view id, const std::vector<NamedTensor>& outputs,
                             const std::vector<bool>& binary, int64_t tail_from_bytes = INT64_MAX);

// Parses JSON without exceptions; InvalidArgument names `what` and the byte where it failed.
absl::StatusOr<nlohmann::json> ParseJson(absl::string_view text, absl::string_view what);

// {"error": message} as the protocol's error responses are.
std::string ErrorJson(absl::string_view message);

// A model or version name from a URL or a request: [A-Za-z0-9_.-], 1 to 128 characters, not
// starting with '.' (so never "." or ".." or a hidden file). InvalidArgument otherwise.
absl::Status CheckName(absl::string_view name, absl::string_view what);

}  // namespace dynvm::server

#endif  // DYNVM_TOOLS_SERVER_CODEC_H_
