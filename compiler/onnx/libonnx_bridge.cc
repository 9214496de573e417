// Compiled with exceptions (-fexceptions): everything libonnx throws is caught here and turned
// into a Status. No other dynvm file calls libonnx functions.
#include "compiler/onnx/libonnx_bridge.h"

#include <exception>
#include <string>

#include "absl/strings/str_cat.h"
#include "onnx/checker.h"

namespace dynvm::compiler::onnx {

absl::Status RunLibOnnxChecker(const ::onnx::ModelProto& model) {
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("onnx checker: ", e.what()));
  } catch (...) {
    return absl::InvalidArgumentError("onnx checker: refused the model (unknown exception)");
  }
  return absl::OkStatus();
}

}  // namespace dynvm::compiler::onnx
