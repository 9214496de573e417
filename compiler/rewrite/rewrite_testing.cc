#include "compiler/rewrite/rewrite_testing.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler::rewrite {
namespace {

std::vector<Tensor> CompileAndRun(const std::function<void(GraphBuilder&)>& build,
                                  const std::vector<std::pair<std::string, Tensor>>& inputs,
                                  const CompileOptions& options, CompileResult* result) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  build(b);
  absl::StatusOr<CompileResult> r = Compile(m, options);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(
      {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()});
  EXPECT_TRUE(exe.ok()) << exe.status();
  if (!exe.ok()) return {};
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  EXPECT_TRUE(vm.ok()) << vm.status();
  if (!vm.ok()) return {};
  for (const auto& [name, t] : inputs) EXPECT_TRUE((*vm)->SetInput(name, t).ok()) << name;
  absl::Status s = (*vm)->Run();
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return {};
  *result = *std::move(r);
  return *(*vm)->GetOutputs();
}

}  // namespace

bool Outcome::HasKernel(const std::string& op) const {
  return std::find(kernels.begin(), kernels.end(), op) != kernels.end();
}

Outcome CompareWithUnoptimized(const std::function<void(GraphBuilder&)>& build,
                               const std::vector<std::pair<std::string, Tensor>>& inputs,
                               CompileOptions options, double tol) {
  CompileResult opt_result, ref_result;
  std::vector<Tensor> got = CompileAndRun(build, inputs, options, &opt_result);
  options.optimize = false;
  std::vector<Tensor> want = CompileAndRun(build, inputs, options, &ref_result);
  EXPECT_TRUE(ref_result.rewrites.empty());
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    EXPECT_EQ(got[i].dims(), want[i].dims()) << "output " << i;
    if (got[i].dims() != want[i].dims()) continue;
    std::vector<double> a = testing::ToDoubles(got[i]), b = testing::ToDoubles(want[i]);
    for (size_t j = 0; j < a.size(); ++j) {
      const bool near = std::fabs(a[j] - b[j]) <= tol * (1 + std::fabs(b[j])) ||
                        (std::isnan(a[j]) && std::isnan(b[j])) || a[j] == b[j];
      EXPECT_TRUE(near) << "output " << i << " element " << j << ": " << a[j] << " vs " << b[j];
      if (!near) break;
    }
  }
  Outcome out;
  out.fired = opt_result.rewrites;
  for (const KernelReport& k : opt_result.kernels) out.kernels.push_back(k.op);
  return out;
}

}  // namespace dynvm::compiler::rewrite
