#include "tests/vm_fixture.h"

#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "isa/assembler.h"
#include "kernels/testing.h"

namespace dynvm::testing {

absl::StatusOr<std::shared_ptr<const Executable>> AssembleAndLoad(absl::string_view text,
                                                                  const LoadOptions& options) {
  DYNVM_ASSIGN_OR_RETURN(std::string bytes, isa::AssembleToBytes(text));
  return Executable::LoadFromBytes(bytes, options);
}

std::shared_ptr<const Executable> LoadAssembly(absl::string_view text, const LoadOptions& options) {
  absl::StatusOr<std::shared_ptr<const Executable>> exe = AssembleAndLoad(text, options);
  EXPECT_TRUE(exe.ok()) << exe.status();
  return exe.ok() ? *exe : nullptr;
}

std::unique_ptr<VirtualMachine> MakeVm(std::shared_ptr<const Executable> exe,
                                       const VmOptions& options) {
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm =
      VirtualMachine::Create(std::move(exe), options);
  EXPECT_TRUE(vm.ok()) << vm.status();
  return vm.ok() ? *std::move(vm) : nullptr;
}

Compiled CompileAndLoad(compiler::Module& module, const compiler::CompileOptions& options,
                        const LoadOptions& load) {
  absl::StatusOr<compiler::CompileResult> r = compiler::Compile(module, options);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << module.Dump();
  if (!r.ok()) return {};
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(r->bytes, load);
  EXPECT_TRUE(exe.ok()) << exe.status();
  return {*std::move(r), exe.ok() ? *exe : nullptr};
}

absl::StatusOr<std::vector<Tensor>> RunWith(
    VirtualMachine& vm, const std::vector<std::pair<std::string, Tensor>>& inputs,
    FunctionRef function) {
  for (const auto& [name, t] : inputs) {
    DYNVM_RETURN_IF_ERROR(vm.SetInput(name, t, function));
  }
  RunOptions run;
  if (function.is_handle()) {
    run.handle = function.handle();
  } else {
    run.function = std::string(function.name());
  }
  DYNVM_RETURN_IF_ERROR(vm.Run(run));
  return vm.GetOutputs(function);
}

void ExpectTensorNear(const Tensor& got, const std::vector<int64_t>& dims,
                      const std::vector<double>& want, double tolerance) {
  ASSERT_TRUE(got.defined());
  ASSERT_EQ(std::vector<int64_t>(got.dims().begin(), got.dims().end()), dims);
  const std::vector<double> values = ToDoubles(got);
  ASSERT_EQ(values.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(values[i], want[i], tolerance) << "element " << i;
  }
}

}  // namespace dynvm::testing
