#include "compiler/compiler_testing.h"

#include <random>
#include <utility>

#include "gtest/gtest.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler {

Tensor RandomF32(std::vector<int64_t> dims, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

Compiled CompileOrDie(Module& m, CompileOptions options) {
  absl::StatusOr<CompileResult> r = Compile(m, options);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << m.Dump();
  if (!r.ok()) return {};
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(r->bytes);
  EXPECT_TRUE(exe.ok()) << exe.status();
  if (!exe.ok()) return {};
  return {*std::move(r), *std::move(exe)};
}

std::vector<Tensor> RunOrDie(const std::shared_ptr<const Executable>& exe,
                             const std::vector<std::pair<std::string, Tensor>>& inputs,
                             int threads) {
  VmOptions o;
  o.num_threads = threads;
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe, o);
  EXPECT_TRUE(vm.ok()) << vm.status();
  if (!vm.ok()) return {};
  for (const auto& [name, t] : inputs) {
    absl::Status s = (*vm)->SetInput(name, t);
    EXPECT_TRUE(s.ok()) << s;
  }
  absl::Status s = (*vm)->Run();
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return {};
  return *(*vm)->GetOutputs();
}

}  // namespace dynvm::compiler
