// Shape functions of compiler/ops/tensor.cc against the values the kernels compute: a
// shape function and its kernel must agree on the output's dims, or the run stops at the
// compiler's check (found by tests/differential: NonZero of a scalar).
#include <limits>
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

absl::StatusOr<Tensor> CompileAndRun(Module& m, const Tensor& x, bool optimize) {
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
  return (*(*vm)->GetOutputs())[0];
}

// NonZero reads a scalar as a one-element vector, as numpy (the spec's model) and ONNX
// Runtime do: [1, n] indices, n = 1 for a nonzero scalar and 0 for zero.
TEST(TensorOpsTest, NonZeroOfAScalarHasOneRow) {
  for (const bool optimize : {true, false}) {
    for (const float value : {2.5f, 0.0f}) {
      SCOPED_TRACE(absl::StrCat(value, optimize ? "" : " --no-optimize"));
      Module m;
      GraphBuilder b(m.AddFunction("main"));
      Value* x = b.Input("x", DType::kF32, {});
      b.Output("y", b.Op("NonZero", {x}));
      const Tensor xv = *Tensor::FromVector<float>(DType::kF32, {}, {value});
      absl::StatusOr<Tensor> y = CompileAndRun(m, xv, optimize);
      ASSERT_TRUE(y.ok()) << y.status();
      const int64_t n = value != 0.0f ? 1 : 0;
      ASSERT_EQ(y->dims(), (std::vector<int64_t>{1, n}));
      if (n == 1) EXPECT_EQ(y->data<int64_t>()[0], 0);
    }
  }
}

// A vector and a matrix keep one row per dim.
TEST(TensorOpsTest, NonZeroHasOneRowPerDim) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {2, 2});
  b.Output("y", b.Op("NonZero", {x}));
  const Tensor xv = *Tensor::FromVector<float>(DType::kF32, {2, 2}, {0, 1, 2, 0});
  absl::StatusOr<Tensor> y = CompileAndRun(m, xv, true);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(testing::ToDoubles(*y), (std::vector<double>{0, 1, 1, 0}));
}

// Slice stepping backwards clamps its start to [0, n - 1] (the spec's text): a start before
// the first element still takes it. The compiler's shape (planned before the kernel runs)
// must be the kernel's: it planned [0, 1] for x[-3::-2] of a [1, 1] tensor and the run
// stopped (found by tests/differential).
TEST(TensorOpsTest, SliceSteppingBackwardsFromBeforeTheStartTakesTheFirstElement) {
  struct Case {
    int64_t start, end, step, n, want;
  };
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::vector<Case> cases = {
      {-3, kMin, -2, 1, 1},  // start -2 -> 0, end -> -1: element 0
      {-3, kMin, -1, 3, 1},  // start 0: element 0 only
      {-5, -9, -1, 3, 1},    // start -2 -> 0, end -6 -> -1: element 0
      {5, kMin, -2, 4, 2},   // start 3: elements 3, 1
      {-3, kMax, -2, 1, 0},  // end clamped to 0: nothing
      {0, kMin, -1, 0, 0},   // an empty axis
      {2, 0, -1, 4, 2},      // elements 2, 1
  };
  for (const Case& k : cases) {
    for (const bool optimize : {true, false}) {
      SCOPED_TRACE(absl::StrCat("x[", k.start, ":", k.end, ":", k.step, "] of ", k.n,
                                optimize ? "" : " --no-optimize"));
      Module m;
      GraphBuilder b(m.AddFunction("main"));
      Value* x = b.Input("x", DType::kF32, {2, k.n});
      b.Output("y", b.Op("Slice", {x, b.VectorI64({k.start}), b.VectorI64({k.end}),
                                   b.VectorI64({1}), b.VectorI64({k.step})}));
      std::vector<float> data(static_cast<size_t>(2 * k.n));
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
      const Tensor xv = *Tensor::FromVector<float>(DType::kF32, {2, k.n}, data);
      absl::StatusOr<Tensor> y = CompileAndRun(m, xv, optimize);
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_EQ(y->dims(), (std::vector<int64_t>{2, k.want}));
    }
  }
}

}  // namespace
}  // namespace dynvm::compiler
