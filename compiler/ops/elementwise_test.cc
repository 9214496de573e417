// Shape arithmetic of compiler/ops/elementwise.cc against the values the kernels compute:
// integer Div truncates towards zero (ONNX Runtime, C), so the symbolic content of a quotient
// is a floor division only where both operands are known to be nonnegative (found by
// tests/differential: a Loop's trip count divided by a negative constant).
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

absl::StatusOr<std::vector<double>> CompileAndRun(Module& m, const Tensor& x, bool optimize) {
  CompileOptions options;
  options.optimize = optimize;
  absl::StatusOr<CompileResult> r = Compile(m, options);
  if (!r.ok()) return r.status();
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(r->bytes);
  if (!exe.ok()) return exe.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  if (!vm.ok()) return vm.status();
  if (absl::Status s = (*vm)->SetInput("x", x); !s.ok()) return s;
  if (absl::Status s = (*vm)->Run(); !s.ok()) return s;
  return testing::ToDoubles((*(*vm)->GetOutputs())[0]);
}

// Size(x) / d for x of 3 elements and a constant d of either sign, and d / Size(x) - 4:
// C's truncation, whatever the signs.
TEST(ElementwiseOpsTest, IntegerDivOfShapeValuesTruncates) {
  struct Case {
    int64_t divisor;
    bool size_first;
    double want;
  };
  const std::vector<Case> cases = {
      {-2, true, -1},   // 3 / -2 = -1.5 -> -1 (floor would give -2)
      {2, true, 1},     // 3 / 2 = 1
      {-887, true, 0},  // 3 / -887 -> 0 (floor: -1)
      {-7, false, -2},  // -7 / 3 = -2.33 -> -2 (floor: -3)
      {7, false, 2},    // 7 / 3 -> 2
  };
  const Tensor xv = *Tensor::Empty(DType::kF32, {1, 3});
  for (const Case& k : cases) {
    for (const bool optimize : {true, false}) {
      SCOPED_TRACE(absl::StrCat(k.size_first ? "size / " : "", k.divisor,
                                k.size_first ? "" : " / size", optimize ? "" : " --no-optimize"));
      Module m;
      GraphBuilder b(m.AddFunction("main"));
      Value* x = b.Input("x", DType::kF32, {DimSpec("batch"), 3});
      Value* size = b.Op("Size", {x});
      Value* d = b.ScalarI64(k.divisor);
      b.Output("y", k.size_first ? b.Op("Div", {size, d}) : b.Op("Div", {d, size}));
      absl::StatusOr<std::vector<double>> y = CompileAndRun(m, xv, optimize);
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_EQ(*y, std::vector<double>{k.want});
    }
  }
}

}  // namespace
}  // namespace dynvm::compiler
