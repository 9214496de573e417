// The shared VM test fixture: load from assembly text, compile an IR module or an ONNX file and
// load it, run with named inputs, compare outputs. Failures are reported as gtest failures
// (EXPECT) naming the step, and the functions return nullptr / an empty result, so a test
// writes ASSERT_NE(exe, nullptr) after them. Test-only; not installed.
#ifndef DYNVM_TESTS_VM_FIXTURE_H_
#define DYNVM_TESTS_VM_FIXTURE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/compiler.h"
#include "compiler/ir.h"
#include "kernels/tensor.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::testing {

// isa::AssembleToBytes then Executable::LoadFromBytes.
absl::StatusOr<std::shared_ptr<const Executable>> AssembleAndLoad(absl::string_view text,
                                                                  const LoadOptions& options = {});
// The same, the error as a test failure (nullptr then).
std::shared_ptr<const Executable> LoadAssembly(absl::string_view text,
                                               const LoadOptions& options = {});

std::unique_ptr<VirtualMachine> MakeVm(std::shared_ptr<const Executable> exe,
                                       const VmOptions& options = {});

struct Compiled {
  compiler::CompileResult result;
  std::shared_ptr<const Executable> exe;  // null when compiling or loading failed
};
// compiler::Compile then LoadFromBytes; the error (and the module's dump) as a test failure.
Compiled CompileAndLoad(compiler::Module& module, const compiler::CompileOptions& options = {},
                        const LoadOptions& load = {});
// An ONNX file through the importer, then CompileAndLoad (tests linked with
// dynvm::vm_fixture_onnx only).
Compiled CompileOnnxFile(const std::string& path, const compiler::CompileOptions& options = {},
                         const LoadOptions& load = {});

// Binds `inputs` by name, runs `function` and returns its outputs in signature order.
absl::StatusOr<std::vector<Tensor>> RunWith(
    VirtualMachine& vm, const std::vector<std::pair<std::string, Tensor>>& inputs,
    FunctionRef function = {});

// `got` has `dims` and, element by element, is within `tolerance` of `want` (absolute).
void ExpectTensorNear(const Tensor& got, const std::vector<int64_t>& dims,
                      const std::vector<double>& want, double tolerance = 1e-5);

}  // namespace dynvm::testing

#endif  // DYNVM_TESTS_VM_FIXTURE_H_
