// Public API. Imports an ONNX model (opsets 7 to 23) into the compiler's IR, ready for
// compiler::Compile:
//
//   absl::StatusOr<std::unique_ptr<compiler::Module>> m =
//       compiler::onnx::ImportOnnxFile("model.onnx");
//   absl::StatusOr<compiler::CompileResult> r = compiler::Compile(**m);
//
// The model becomes one entry function ("main"): graph inputs that are not initializers become
// its inputs, initializers become weights (constants), Constant nodes become constants,
// `dim_param` names become symbols (a dim with neither a value nor a name gets a fresh symbol),
// and the model's names are kept for inputs and outputs. If, Loop and Scan become regions that
// may read values of the enclosing graphs.
//
// Trust: the file is untrusted. It is parsed with protobuf, then checked structurally
// (model_checker.h) before anything else reads it; every malformed model is an error status,
// never a crash. External data (tensors in files beside the model) is read only from inside
// the model's folder. An operator, attribute or element type dynvm does not support is refused
// with an Unimplemented error naming the node, the operator and what is missing; a malformed
// model gives InvalidArgument (or PermissionDenied for external data outside the folder).
// Nodes of domains other than ONNX's are imported when an op of that name is registered with
// the compiler (OpRegistry) or the kernel registry: dynvm's own ops, a user's custom ops.
//
// Thread safety: thread-safe (no shared mutable state).
#ifndef DYNVM_COMPILER_ONNX_ONNX_IMPORTER_H_
#define DYNVM_COMPILER_ONNX_ONNX_IMPORTER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir.h"

namespace dynvm::compiler::onnx {

struct ImportOptions {
  std::string function_name = "main";
  // Largest single tensor (initializer, constant, external data) accepted, in bytes.
  int64_t max_tensor_bytes = int64_t{4} << 30;
  // Also run libonnx's model checker (after dynvm's own structural checks). Off by default:
  // it refuses some models dynvm runs fine (and libonnx is only ever called from one isolated
  // file that catches its exceptions). Skipped for models of opset 18 and later: Debian's
  // libonnx 1.12 has no schemas past opset 17, and dynvm never depends on them.
  bool onnx_checker = false;
  // vm-compile --decode: wrap an Optimum/GenAI step model into one in-VM decode loop first
  // (decode_wrap.h).
  bool decode = false;
};

// Reads `path`; external data paths are relative to the file's folder.
absl::StatusOr<std::unique_ptr<Module>> ImportOnnxFile(const std::string& path,
                                                       const ImportOptions& options = {});

// Imports a serialized ModelProto. External data paths are relative to `model_dir`; with an
// empty `model_dir`, a model that has external data is refused.
absl::StatusOr<std::unique_ptr<Module>> ImportOnnxBytes(absl::string_view bytes,
                                                        const std::string& model_dir,
                                                        const ImportOptions& options = {});

}  // namespace dynvm::compiler::onnx

#endif  // DYNVM_COMPILER_ONNX_ONNX_IMPORTER_H_
