// Compiling for the CUDA device (CompileOptions::device): which kernels go to the device, where
// their values are planned, that outputs come back to the host, and the graceful errors of a
// build or machine without CUDA. The run on a device compares with the CPU build of the same
// graph and skips without a device.
#include <cmath>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "allocator/cuda_allocator.h"
#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "compiler/compiler_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "isa/disassembler.h"
#include "isa/verifier.h"
#include "kernels/testing.h"
#include "schema/format.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// y = relu(x @ w + b) (float work: the device); n = k + k (integer work from the host: the host).
void BuildMlp(Module& m) {
  GraphBuilder g(m.AddFunction("main"));
  Value* x = g.Input("x", DType::kF32, {"batch", 8});
  Value* k = g.Input("k", DType::kI64, {3});
  Value* w = g.Constant(RandomF32({8, 5}, 1), "w", true);
  Value* b = g.Constant(RandomF32({5}, 2), "b", true);
  g.Output("y", g.Op("Relu", {g.Op("Add", {g.Op("MatMul", {x, w}), b})}));
  g.Output("n", g.Op("Add", {k, k}));
}

std::string Disassembly(const std::string& bytes) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  absl::StatusOr<isa::VerifiedFile> v = isa::VerifyFile({data, bytes.size()});
  if (!v.ok()) return v.status().ToString();
  isa::DisassembleOptions o;
  o.constant_data = false;
  absl::StatusOr<std::string> s = isa::Disassemble(*v->executable, {}, o);
  return s.ok() ? *s : s.status().ToString();
}

// One case for every build, so that nothing is skipped: a build without CUDA refuses to compile
// for the device; a CUDA build places the float work on the device, and runs it on a GPU (the
// CPU build's values) or, without one, fails the run with the no-device error.
TEST(DevicePlacementTest, FloatWorkGoesToTheDeviceAndOutputsComeBack) {
  Module m;
  BuildMlp(m);
  CompileOptions options;
  options.device = Device::kCUDA;
  if (!CudaBuildEnabled()) {
    absl::StatusOr<CompileResult> r = Compile(m, options);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(absl::IsUnimplemented(r.status())) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("this build has no CUDA device support"));
    return;
  }
  options.bounds = {{"batch", 4}};
  absl::StatusOr<CompileResult> r = Compile(m, options);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string text = Disassembly(r->bytes);
  EXPECT_THAT(text, HasSubstr(".kernel \"MatMul\" device=cuda in(f32, f32) out(f32)"));
  EXPECT_THAT(text, HasSubstr(".kernel \"Add\" device=cuda in(f32, f32) out(f32)"));
  EXPECT_THAT(text, HasSubstr(".kernel \"Relu\" device=cuda in(f32) out(f32)"));
  EXPECT_THAT(text, HasSubstr(".kernel \"Add\" in(i64, i64) out(i64)"));  // stays on the host
  EXPECT_THAT(text, HasSubstr(", cuda "));                                // the device arena
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(r->bytes);
  ASSERT_TRUE(exe.ok()) << exe.status();  // loading never touches the device
  EXPECT_NE((*exe)->required_features() & schema::kFeatureCudaDevice, 0u);
  for (const KernelReport& k : r->kernels) {
    if (k.op == "MatMul") {
      EXPECT_THAT(k.chosen, HasSubstr(".cuda")) << k.chosen;
    }
  }

  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  ASSERT_TRUE(vm.ok());
  const Tensor x = RandomF32({3, 8}, 3);
  const Tensor k = testing::I64({3}, {1, 2, 3});
  ASSERT_TRUE((*vm)->SetInput("x", x).ok());
  ASSERT_TRUE((*vm)->SetInput("k", k).ok());
  const absl::Status run = (*vm)->Run();
  if (absl::Status s = CudaDeviceAvailable(); !s.ok()) {
    EXPECT_EQ(run.code(), s.code()) << run;
    EXPECT_THAT(run.message(), HasSubstr("no CUDA device available"));
    return;
  }
  ASSERT_TRUE(run.ok()) << run;
  // The same graph compiled for the CPU gives the same values; device outputs come back.
  Module m_cpu;
  BuildMlp(m_cpu);
  absl::StatusOr<CompileResult> cpu = Compile(m_cpu, {});
  ASSERT_TRUE(cpu.ok());
  absl::StatusOr<std::shared_ptr<const Executable>> cpu_exe = Executable::LoadFromBytes(cpu->bytes);
  ASSERT_TRUE(cpu_exe.ok());
  absl::StatusOr<std::unique_ptr<VirtualMachine>> cpu_vm = VirtualMachine::Create(*cpu_exe);
  ASSERT_TRUE(cpu_vm.ok());
  ASSERT_TRUE((*cpu_vm)->SetInput("x", x).ok());
  ASSERT_TRUE((*cpu_vm)->SetInput("k", k).ok());
  ASSERT_TRUE((*cpu_vm)->Run().ok());
  for (const char* name : {"y", "n"}) {
    absl::StatusOr<Tensor> got = (*vm)->GetOutput(name);
    absl::StatusOr<Tensor> want = (*cpu_vm)->GetOutput(name);
    ASSERT_TRUE(got.ok() && want.ok());
    EXPECT_EQ(got->device(), Device::kCPU);
    const std::vector<double> g = testing::ToDoubles(*got), w = testing::ToDoubles(*want);
    ASSERT_EQ(g.size(), w.size());
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5) << name << " " << i;
  }
}

}  // namespace
}  // namespace dynvm::compiler
