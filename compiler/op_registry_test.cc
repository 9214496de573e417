// BroadcastShapes (the shape of every broadcasting elementwise op) against what the kernels
// compute: two dims that are different symbols broadcast to whichever is not 1, which is 0
// when one is 1 and the other 0 (not their maximum: the differential fuzzer found Add of
// [1] and [0] planned as [1], and the run stopped at the kernel's check).
#include "compiler/op_registry.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler {
namespace {

absl::StatusOr<Tensor> AddOf(int64_t a, int64_t b, bool optimize) {
  Module m;
  GraphBuilder g(m.AddFunction("main"));
  Value* x = g.Input("x", DType::kF32, {DimSpec("a")});
  Value* y = g.Input("y", DType::kF32, {DimSpec("b")});
  g.Output("z", g.Op("Add", {x, y}));
  CompileOptions options;
  options.optimize = optimize;
  absl::StatusOr<CompileResult> r = Compile(m, options);
  if (!r.ok()) return r.status();
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(r->bytes);
  if (!exe.ok()) return exe.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  if (!vm.ok()) return vm.status();
  const Tensor xv = *Tensor::FromVector<float>(DType::kF32, {a}, std::vector<float>(a, 1.0f));
  const Tensor yv = *Tensor::FromVector<float>(DType::kF32, {b}, std::vector<float>(b, 2.0f));
  if (absl::Status s = (*vm)->SetInput("x", xv); !s.ok()) return s;
  if (absl::Status s = (*vm)->SetInput("y", yv); !s.ok()) return s;
  if (absl::Status s = (*vm)->Run(); !s.ok()) return s;
  return (*(*vm)->GetOutputs())[0];
}

TEST(BroadcastShapesTest, TwoSymbolsBroadcastToTheOneThatIsNotOne) {
  struct Case {
    int64_t a, b, want;
  };
  for (const Case& c : std::vector<Case>{
           {1, 0, 0}, {0, 1, 0}, {0, 0, 0}, {1, 3, 3}, {3, 1, 3}, {2, 2, 2}, {1, 1, 1}}) {
    for (const bool optimize : {true, false}) {
      SCOPED_TRACE(absl::StrCat("[", c.a, "] + [", c.b, "]", optimize ? "" : " --no-optimize"));
      absl::StatusOr<Tensor> z = AddOf(c.a, c.b, optimize);
      ASSERT_TRUE(z.ok()) << z.status();
      EXPECT_EQ(z->dims(), (std::vector<int64_t>{c.want}));
      for (double v : testing::ToDoubles(*z)) EXPECT_EQ(v, 3.0);
    }
  }
}

// Shapes that do not broadcast still fail at run time, naming the op.
TEST(BroadcastShapesTest, SymbolsThatDoNotBroadcastFailAtRunTime) {
  absl::StatusOr<Tensor> z = AddOf(2, 3, true);
  EXPECT_FALSE(z.ok());
}

}  // namespace
}  // namespace dynvm::compiler
