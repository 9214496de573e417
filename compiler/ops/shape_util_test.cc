// Shape functions keep symbolic content only where the operator keeps the values: an
// elementwise op that changes values (Sign, Neg, Clip, CumSum, a scatter) applied to a shape
// tensor must not hand its input's content on, or the shape arithmetic after it computes with
// the unchanged dims (the differential fuzzer found Mul(Size(x), Sign(Size(x))) compiled as
// Size(x)^2: tests/differential/regressions/sign-of-a-size).
#include "compiler/ops/shape_util.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "compiler/compiler_testing.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler {
namespace {

// Compiles the module and runs it on x; returns output 0 as int64 values.
std::vector<int64_t> RunI64(Module& m, const Tensor& x, bool optimize) {
  CompileOptions options;
  options.optimize = optimize;
  Compiled c = CompileOrDie(m, options);
  if (!c.exe) return {};
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c.exe);
  EXPECT_TRUE(vm.ok()) << vm.status();
  EXPECT_TRUE((*vm)->SetInput("x", x).ok());
  absl::Status s = (*vm)->Run();
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return {};
  const Tensor y = (*(*vm)->GetOutputs())[0];
  std::vector<int64_t> out;
  for (double v : testing::ToDoubles(y)) out.push_back(static_cast<int64_t>(v));
  return out;
}

// Each case: a graph over x [batch, 3] (batch 2 at run time) whose result is computed from
// x's shape through one value-changing op, and the values it must give.
struct Case {
  std::string name;
  Value* (*build)(GraphBuilder& b, Value* x);
  std::vector<int64_t> want;
};

TEST(ShapeUtilTest, ValueChangingOpsDoNotPassShapeContentOn) {
  const std::vector<Case> cases = {
      // Size * Sign(Size) = 6 * 1.
      {"Sign",
       [](GraphBuilder& b, Value* x) {
         Value* s = b.Op("Size", {x});
         return b.Op("Mul", {s, b.Op("Sign", {s})});
       },
       {6}},
      // Shape + Neg(Shape) = 0.
      {"Neg",
       [](GraphBuilder& b, Value* x) {
         Value* s = b.Op("Shape", {x});
         return b.Op("Add", {s, b.Op("Neg", {s})});
       },
       {0, 0}},
      // Clip(Shape, max 2) + Shape = [4, 5].
      {"Clip",
       [](GraphBuilder& b, Value* x) {
         Value* s = b.Op("Shape", {x});
         return b.Op("Add", {b.Op("Clip", {s, nullptr, b.ScalarI64(2)}), s});
       },
       {4, 5}},
      // CumSum(Shape) - Shape = [0, 2].
      {"CumSum",
       [](GraphBuilder& b, Value* x) {
         Value* s = b.Op("Shape", {x});
         return b.Op("Sub", {b.Op("CumSum", {s, b.ScalarI64(0)}), s});
       },
       {0, 2}},
      // ScatterElements(Shape, [1], [7]) - Shape = [0, 4].
      {"ScatterElements",
       [](GraphBuilder& b, Value* x) {
         Value* s = b.Op("Shape", {x});
         Value* sc = b.Op("ScatterElements", {s, b.VectorI64({1}), b.VectorI64({7})});
         return b.Op("Sub", {sc, s});
       },
       {0, 4}},
      // ScatterND(Shape, [[0]], [5]) * 1 = [5, 3]: the scattered values, not the dims.
      {"ScatterND",
       [](GraphBuilder& b, Value* x) {
         Value* s = b.Op("Shape", {x});
         Value* ind = b.Constant(*Tensor::FromVector<int64_t>(DType::kI64, {1, 1}, {0}));
         Value* sc = b.Op("ScatterND", {s, ind, b.VectorI64({5})});
         return b.Op("Mul", {sc, b.ScalarI64(1)});
       },
       {5, 3}},
  };
  const Tensor x = *Tensor::Empty(DType::kF32, {2, 3});
  for (const Case& c : cases) {
    for (const bool optimize : {true, false}) {
      SCOPED_TRACE(absl::StrCat(c.name, optimize ? "" : " --no-optimize"));
      Module m;
      GraphBuilder b(m.AddFunction("main"));
      Value* in = b.Input("x", DType::kF32, {DimSpec("batch"), 3});
      b.Output("y", c.build(b, in));
      EXPECT_EQ(RunI64(m, x, optimize), c.want);
    }
  }
}

// Value-keeping ops still pass content on: Identity of a shape computes like the shape.
TEST(ShapeUtilTest, IdentityKeepsShapeContent) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {DimSpec("batch"), 3});
  Value* s = b.Op("Shape", {x});
  Value* y = b.Op("Mul", {b.Op("Identity", {s}), b.Op("Dropout", {s})});
  b.Output("y", y);
  const Tensor xv = *Tensor::Empty(DType::kF32, {2, 3});
  EXPECT_EQ(RunI64(m, xv, true), (std::vector<int64_t>{4, 9}));
}

}  // namespace
}  // namespace dynvm::compiler
