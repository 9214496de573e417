// Feeds arbitrary bytes to the ONNX importer and, when they import, compiles the module with
// constant folding (which runs reference kernels on the model's constants). Both may fail;
// neither may crash, hang or allocate without bound: the structural checker and the importer's
// limits are what stand between a hostile file and the compiler.
//
// Seed corpus: compiler/onnx/fuzz_corpus/ (tiny models written by
// tools/models/make_fuzz_corpus.py).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/strings/string_view.h"
#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dynvm::compiler::onnx::ImportOptions options;
  options.max_tensor_bytes = int64_t{1} << 24;
  absl::StatusOr<std::unique_ptr<dynvm::compiler::Module>> m =
      dynvm::compiler::onnx::ImportOnnxBytes(
          absl::string_view(reinterpret_cast<const char*>(data), size), /*model_dir=*/"", options);
  if (!m.ok()) return 0;
  dynvm::compiler::CompileOptions compile;
  compile.arena_value_limit = int64_t{1} << 24;
  (void)dynvm::compiler::Compile(**m, compile);
  return 0;
}
