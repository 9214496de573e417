// Internal. The only place dynvm calls into libonnx (beyond its protobuf classes). libonnx's
// checker throws C++ exceptions and assumes well-formed input, so it is called only after
// dynvm's own structural checks, and only from libonnx_bridge.cc, which catches everything.
#ifndef DYNVM_COMPILER_ONNX_LIBONNX_BRIDGE_H_
#define DYNVM_COMPILER_ONNX_LIBONNX_BRIDGE_H_

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"

namespace dynvm::compiler::onnx {

// Runs onnx::checker::check_model. InvalidArgument with libonnx's message when it refuses the
// model; never throws.
absl::Status RunLibOnnxChecker(const ::onnx::ModelProto& model);

}  // namespace dynvm::compiler::onnx

#endif  // DYNVM_COMPILER_ONNX_LIBONNX_BRIDGE_H_
