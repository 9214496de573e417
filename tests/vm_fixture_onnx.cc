// The ONNX part of the shared VM test fixture (tests/vm_fixture.h), apart so that tests of a
// build without ONNX link the rest.
#include "compiler/onnx/onnx_importer.h"
#include "gtest/gtest.h"
#include "tests/vm_fixture.h"

namespace dynvm::testing {

Compiled CompileOnnxFile(const std::string& path, const compiler::CompileOptions& options,
                         const LoadOptions& load) {
  absl::StatusOr<std::unique_ptr<compiler::Module>> module = compiler::onnx::ImportOnnxFile(path);
  EXPECT_TRUE(module.ok()) << path << ": " << module.status();
  if (!module.ok()) return {};
  return CompileAndLoad(**module, options, load);
}

}  // namespace dynvm::testing
