// The VirtualMachine and Executable C++ API, with programs written in dynvm assembly: binding
// inputs and reading outputs, ownership and lifetimes, every input error, interruption
// (iteration budget, cancellation, deadline), error annotation, allocation failures at every
// site, flat memory over ten million iterations, concurrent VMs on one executable, output
// buffers, and the 8-thread stress test on an executable with a separate weights file.
// Built twice: against the computed-goto interpreter (vm_test) and the switch one
// (vm_switch_test).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "compiler/builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "isa/assembler.h"
#include "kernels/tensor.h"
#include "schema/mapped_file.h"
#include "schema/writer.h"
#include "tests/vm_fixture.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"
#include "vm/vm_testing.h"

namespace dynvm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::LoadAssembly;
using testing::MakeVm;
using ::testing::Not;

Tensor F32(std::vector<int64_t> dims, std::vector<float> values) {
  return *Tensor::FromVector<float>(DType::kF32, dims, values);
}

Tensor I64(std::vector<int64_t> dims, std::vector<int64_t> values) {
  return *Tensor::FromVector<int64_t>(DType::kI64, dims, values);
}

std::vector<float> Floats(const Tensor& t) {
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_TRUE(t.is_contiguous());
  if (!t.defined()) return {};
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

std::vector<float> Output(const VirtualMachine& vm, absl::string_view name,
                          FunctionRef function = {}) {
  absl::StatusOr<Tensor> t = vm.GetOutput(name, function);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? Floats(*t) : std::vector<float>{};
}

// sum = (x + y) + bias, prod = x * scale, echo = x itself.
constexpr absl::string_view kBasic = R"(
.const f32 [3] name="bias" weight values:[1, 2, 3]
.const f32 [3] name="scale" values:[2, 2, 2]
.kernel "Add" in(f32, f32) out(f32)
.kernel "Mul" in(f32, f32) out(f32)

.function main
  .params 2 0
  .sregs i64 i64 i64
  .oregs tensor:f32 tensor:f32 tensor:f32 tensor:f32 storage tensor:f32 storage tensor:f32 storage tensor:f32
  .oresults tensor:f32 tensor:f32 tensor:f32
  .input x [n,3]
  .input y [n,3]
  .output sum [n,3]
  .output prod [n,3]
  .output echo [n,3]
  .bound n 8
  load_const %o2, c0
  load_const %o3, c1
  dim %s0, %o0, 0
  const_i %s1, 12
  mul_i %s2, %s0, %s1
  alloc_storage %o4, %s2, cpu
  alloc_tensor %o5, %o4, 0, f32, [%s0, 3]
  invoke k0, #0, (%o0, %o1), (%o5)
  alloc_storage %o6, %s2, cpu
  alloc_tensor %o7, %o6, 0, f32, [%s0, 3]
  invoke k0, #1, (%o5, %o2), (%o7)
  alloc_storage %o8, %s2, cpu
  alloc_tensor %o9, %o8, 0, f32, [%s0, 3]
  invoke k1, #2, (%o0, %o3), (%o9)
  ret (%o7, %o9, %o0), ()
.end

; a second entry with its own signature
.function twice
  .params 1 0
  .oregs tensor:f32 storage tensor:f32
  .oresults tensor:f32
  .input v [4]
  .output w [4]
  alloc_storage %o1, 16, cpu
  alloc_tensor %o2, %o1, 0, f32, [4]
  invoke k0, #0, (%o0, %o0), (%o2)
  ret (%o2), ()
.end
)";

class BasicTest : public ::testing::Test {
 protected:
  void SetUp() override {
    exe_ = LoadAssembly(kBasic);
    ASSERT_NE(exe_, nullptr);
    vm_ = MakeVm(exe_);
    ASSERT_NE(vm_, nullptr);
  }
  void Bind(const Tensor& x, const Tensor& y) {
    ASSERT_TRUE(vm_->SetInput("x", x).ok());
    ASSERT_TRUE(vm_->SetInput("y", y).ok());
  }
  std::shared_ptr<const Executable> exe_;
  std::unique_ptr<VirtualMachine> vm_;
};

Tensor X() { return F32({2, 3}, {1, 2, 3, 4, 5, 6}); }
Tensor Y() { return F32({2, 3}, {10, 20, 30, 40, 50, 60}); }

TEST_F(BasicTest, InputsAndOutputsByNameAndIndex) {
  ASSERT_TRUE(vm_->SetInput(0, X()).ok());
  ASSERT_TRUE(vm_->SetInput("y", Y()).ok());
  ASSERT_TRUE(vm_->Run().ok());
  EXPECT_THAT(Output(*vm_, "sum"), ElementsAre(12, 24, 36, 45, 57, 69));
  EXPECT_THAT(Output(*vm_, "prod"), ElementsAre(2, 4, 6, 8, 10, 12));
  absl::StatusOr<Tensor> by_index = vm_->GetOutput(1);
  ASSERT_TRUE(by_index.ok());
  EXPECT_THAT(Floats(*by_index), ElementsAre(2, 4, 6, 8, 10, 12));
  EXPECT_EQ(by_index->ShapeString(), "[2,3]");
  absl::StatusOr<std::vector<Tensor>> all = vm_->GetOutputs();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].storage().get(), vm_->GetOutput("sum")->storage().get());

  // The second entry, named explicitly everywhere.
  ASSERT_TRUE(vm_->SetInput(0, F32({4}, {1, 2, 3, 4}), "twice").ok());
  RunOptions run;
  run.function = "twice";
  ASSERT_TRUE(vm_->Run(run).ok());
  EXPECT_THAT(Output(*vm_, "w", "twice"), ElementsAre(2, 4, 6, 8));
  absl::StatusOr<Tensor> w = vm_->GetOutput(0, "twice");
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(Floats(*w), ElementsAre(2, 4, 6, 8));
  // main's outputs are still those of its last run.
  EXPECT_THAT(Output(*vm_, "sum"), ElementsAre(12, 24, 36, 45, 57, 69));
}

TEST_F(BasicTest, FunctionHandlesResolveOnce) {
  absl::StatusOr<FunctionHandle> twice = exe_->ResolveFunction("twice");
  ASSERT_TRUE(twice.ok()) << twice.status();
  EXPECT_EQ(twice->index(), *exe_->FindFunction("twice"));
  EXPECT_EQ(exe_->function(twice->index()).name, "twice");
  EXPECT_EQ(exe_->ResolveFunction("nope").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<FunctionHandle> main = exe_->ResolveFunction("");
  ASSERT_TRUE(main.ok());
  EXPECT_EQ(exe_->function(main->index()).name, "main");

  // The handle goes wherever a name does, and in RunOptions.
  EXPECT_THAT(*vm_->input_names(*twice), ElementsAre("v"));
  ASSERT_TRUE(vm_->SetInput("v", F32({4}, {1, 2, 3, 4}), *twice).ok());
  RunOptions run;
  run.function = "no such function";  // ignored: the handle wins
  run.handle = *twice;
  ASSERT_TRUE(vm_->Run(run).ok());
  EXPECT_THAT(Output(*vm_, "w", "twice"), ElementsAre(2, 4, 6, 8));
  absl::StatusOr<Tensor> w = vm_->GetOutput("w", *twice);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(Floats(*w), ElementsAre(2, 4, 6, 8));

  // A handle of another executable (even of the same text) is refused, naming why.
  std::shared_ptr<const Executable> other = LoadAssembly(kBasic);
  ASSERT_NE(other, nullptr);
  absl::StatusOr<FunctionHandle> foreign = other->ResolveFunction("twice");
  ASSERT_TRUE(foreign.ok());
  run.handle = *foreign;
  absl::Status s = vm_->Run(run);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("another executable"));
  EXPECT_EQ(vm_->GetOutput("w", *foreign).status().code(), absl::StatusCode::kInvalidArgument);
  // A default handle names nothing: Run falls back to RunOptions::function.
  run.handle = FunctionHandle();
  run.function = "twice";
  EXPECT_TRUE(vm_->Run(run).ok());
}

TEST_F(BasicTest, NamesListRealInputsOnly) {
  EXPECT_THAT(*vm_->input_names(), ElementsAre("x", "y"));
  EXPECT_THAT(*vm_->output_names(), ElementsAre("sum", "prod", "echo"));
  EXPECT_THAT(*vm_->input_names("twice"), ElementsAre("v"));
  EXPECT_EQ(exe_->num_constants(), 2);
  EXPECT_EQ(exe_->num_weights(), 1);  // "bias" is a weight; "scale" is a plain constant
  EXPECT_EQ(exe_->weight_bytes(), 12);
  const int main = *exe_->FindFunction("");
  EXPECT_EQ(exe_->function(main).name, "main");
  EXPECT_EQ(exe_->function(main).inputs.size(), 2u);
  EXPECT_EQ(vm_->input_names("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(BasicTest, SetInputCopies) {
  Tensor x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  ASSERT_TRUE(vm_->SetInput("x", x).ok());
  ASSERT_TRUE(vm_->SetInput("y", Y()).ok());
  x.data<float>()[0] = 1000;  // after SetInput: must not be seen
  ASSERT_TRUE(vm_->Run().ok());
  EXPECT_THAT(Output(*vm_, "sum"), ElementsAre(12, 24, 36, 45, 57, 69));
  absl::StatusOr<Tensor> echo = vm_->GetOutput("echo");
  ASSERT_TRUE(echo.ok());
  EXPECT_NE(echo->storage().get(), x.storage().get());
  EXPECT_THAT(Floats(*echo), ElementsAre(1, 2, 3, 4, 5, 6));
}

TEST_F(BasicTest, SetInputZeroCopyDoesNotCopy) {
  Tensor x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  ASSERT_TRUE(vm_->SetInputZeroCopy("x", x).ok());
  ASSERT_TRUE(vm_->SetInput("y", Y()).ok());
  ASSERT_TRUE(vm_->Run().ok());
  absl::StatusOr<Tensor> echo = vm_->GetOutput("echo");
  ASSERT_TRUE(echo.ok());
  EXPECT_EQ(echo->storage().get(), x.storage().get());
  EXPECT_EQ(echo->raw_data(), x.raw_data());
  // The binding views the caller's data: a change between runs is seen by the next run.
  x.data<float>()[0] = 100;
  ASSERT_TRUE(vm_->Run().ok());
  EXPECT_THAT(Output(*vm_, "sum"), ElementsAre(111, 24, 36, 45, 57, 69));
}

TEST_F(BasicTest, SetInputZeroCopyRefusesMisalignedData) {
  Tensor backing = F32({8}, {0, 1, 2, 3, 4, 5, 6, 7});
  absl::StatusOr<Tensor> misaligned = Tensor::View(backing.storage(), 2, DType::kF32, {2, 3});
  ASSERT_TRUE(misaligned.ok()) << misaligned.status();
  absl::Status s = vm_->SetInputZeroCopy("x", *misaligned);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("aligned"));
  // Copying it is fine.
  EXPECT_TRUE(vm_->SetInput("x", *misaligned).ok());
}

TEST_F(BasicTest, NothingIsAllocatedForInputsBoundWithoutACopy) {
  EXPECT_EQ(vm_->memory_stats().bytes_in_use, 0);
  Tensor x = X(), y = Y();
  ASSERT_TRUE(vm_->SetInputZeroCopy("x", x).ok());
  ASSERT_TRUE(vm_->SetInputZeroCopy("y", y).ok());
  EXPECT_EQ(vm_->memory_stats().bytes_in_use, 0);
  EXPECT_EQ(vm_->memory_stats().system_allocs, 0);
  ASSERT_TRUE(vm_->Run().ok());
  EXPECT_THAT(Output(*vm_, "sum"), ElementsAre(12, 24, 36, 45, 57, 69));
}

TEST_F(BasicTest, OutputBuffersAreWrittenInPlace) {
  Tensor sum = F32({2, 3}, {0, 0, 0, 0, 0, 0});
  Tensor prod = F32({2, 3}, {0, 0, 0, 0, 0, 0});
  Tensor echo = F32({2, 3}, {0, 0, 0, 0, 0, 0});
  ASSERT_TRUE(vm_->SetOutputBuffer("sum", sum).ok());
  ASSERT_TRUE(vm_->SetOutputBuffer("prod", prod).ok());
  ASSERT_TRUE(vm_->SetOutputBuffer("echo", echo).ok());
  Bind(X(), Y());
  ASSERT_TRUE(vm_->Run().ok());
  EXPECT_THAT(Floats(sum), ElementsAre(12, 24, 36, 45, 57, 69));
  EXPECT_THAT(Floats(prod), ElementsAre(2, 4, 6, 8, 10, 12));
  EXPECT_THAT(Floats(echo), ElementsAre(1, 2, 3, 4, 5, 6));
  // sum and prod are made by their kernels in the buffers; echo is the input, copied at ret.
  EXPECT_EQ(vm_->last_run_output_copies(), 1);
  EXPECT_EQ(vm_->GetOutput("sum")->raw_data(), sum.raw_data());
  EXPECT_EQ(vm_->GetOutput("prod")->raw_data(), prod.raw_data());
  EXPECT_EQ(vm_->GetOutput("echo")->raw_data(), echo.raw_data());
  // Every run writes the same buffers.
  Bind(F32({2, 3}, {1, 1, 1, 1, 1, 1}), F32({2, 3}, {0, 0, 0, 0, 0, 0}));
  ASSERT_TRUE(vm_->Run().ok());
  EXPECT_THAT(Floats(sum), ElementsAre(2, 3, 4, 2, 3, 4));
  EXPECT_THAT(Floats(prod), ElementsAre(2, 2, 2, 2, 2, 2));
  // The binding keeps the buffer alive: the caller may drop its handle.
  const void* data = sum.raw_data();
  sum = Tensor();
  ASSERT_TRUE(vm_->Run().ok());
  EXPECT_EQ(vm_->GetOutput("sum")->raw_data(), data);
  EXPECT_THAT(Output(*vm_, "sum"), ElementsAre(2, 3, 4, 2, 3, 4));
}

TEST_F(BasicTest, OutputBufferOfAnotherShapeFailsTheRun) {
  ASSERT_TRUE(vm_->SetOutputBuffer("sum", F32({2, 3}, {0, 0, 0, 0, 0, 0})).ok());
  Bind(F32({1, 3}, {1, 2, 3}), F32({1, 3}, {1, 1, 1}));
  absl::Status s = vm_->Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("output 'sum' is f32[1,3], its bound buffer is f32[2,3]"));
  EXPECT_FALSE(vm_->GetOutput("sum").ok());
  // Cleared, the output goes back to the VM's memory.
  ASSERT_TRUE(vm_->SetOutputBuffer("sum", Tensor()).ok());
  ASSERT_TRUE(vm_->Run().ok());
  EXPECT_THAT(Output(*vm_, "sum"), ElementsAre(3, 5, 7));
  EXPECT_EQ(vm_->last_run_output_copies(), 0);
}

TEST_F(BasicTest, OutputBufferErrors) {
  absl::Status s = vm_->SetOutputBuffer("sum", I64({2, 3}, {0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("must be f32"));
  s = vm_->SetOutputBuffer("sum", F32({6}, {0, 0, 0, 0, 0, 0}));
  EXPECT_THAT(s.message(), HasSubstr("must have shape [n,3]"));
  s = vm_->SetOutputBuffer("sum", F32({2, 4}, {0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_THAT(s.message(), HasSubstr("must have shape [n,3]"));
  Tensor backing = F32({8}, {0, 1, 2, 3, 4, 5, 6, 7});
  absl::StatusOr<Tensor> misaligned = Tensor::View(backing.storage(), 2, DType::kF32, {2, 3});
  ASSERT_TRUE(misaligned.ok());
  s = vm_->SetOutputBuffer("sum", *misaligned);
  EXPECT_THAT(s.message(), HasSubstr("not aligned"));
  s = vm_->SetOutputBuffer("nope", F32({2, 3}, {0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(vm_->SetOutputBuffer("w", F32({4}, {0, 0, 0, 0}), "twice").ok());
  EXPECT_FALSE(vm_->SetOutputBuffer("w", F32({5}, {0, 0, 0, 0, 0}), "twice").ok());
}

TEST_F(BasicTest, OutputsOutliveNextRunAndTheVm) {
  Bind(X(), Y());
  ASSERT_TRUE(vm_->Run().ok());
  const Tensor first_sum = *vm_->GetOutput("sum");
  const Tensor first_echo = *vm_->GetOutput("echo");
  Bind(F32({1, 3}, {0, 0, 0}), F32({1, 3}, {0, 0, 0}));
  ASSERT_TRUE(vm_->Run().ok());
  EXPECT_THAT(Output(*vm_, "sum"), ElementsAre(1, 2, 3));
  EXPECT_THAT(Floats(first_sum), ElementsAre(12, 24, 36, 45, 57, 69));
  // Fed back as an input without a copy.
  ASSERT_TRUE(vm_->SetInputZeroCopy("x", first_sum).ok());
  ASSERT_TRUE(vm_->SetInput("y", Y()).ok());
  ASSERT_TRUE(vm_->Run().ok());
  EXPECT_THAT(Output(*vm_, "sum"), ElementsAre(23, 46, 69, 86, 109, 132));
  EXPECT_EQ(vm_->GetOutput("echo")->storage().get(), first_sum.storage().get());
  const Tensor last_prod = *vm_->GetOutput("prod");
  vm_.reset();
  exe_.reset();
  EXPECT_THAT(Floats(first_sum), ElementsAre(12, 24, 36, 45, 57, 69));
  EXPECT_THAT(Floats(first_echo), ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_THAT(Floats(last_prod), ElementsAre(24, 48, 72, 90, 114, 138));
}

// The pool copy SetInput makes, returned as an output, is the only thing left of the VM.
TEST_F(BasicTest, CopiedInputReturnedAsOutputOutlivesTheVm) {
  Bind(X(), Y());
  ASSERT_TRUE(vm_->Run().ok());
  Tensor echo = *vm_->GetOutput("echo");
  vm_.reset();
  EXPECT_THAT(Floats(echo), ElementsAre(1, 2, 3, 4, 5, 6));
  echo = Tensor();  // must not touch a destroyed pool
}

TEST_F(BasicTest, InputErrors) {
  // Wrong dtype: refused at binding.
  absl::Status s = vm_->SetInput("x", I64({2, 3}, {1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("must be f32"));
  s = vm_->SetInputZeroCopy("x", I64({2, 3}, {1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = vm_->SetInput("x", Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // Unknown name or index.
  s = vm_->SetInput("z", X());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr("x, y"));
  EXPECT_EQ(vm_->SetInput(2, X()).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(vm_->SetInput(-1, X()).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(vm_->SetInput("x", X(), "nope").code(), absl::StatusCode::kNotFound);

  // Missing input.
  ASSERT_TRUE(vm_->SetInput("x", X()).ok());
  s = vm_->Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("input 'y'"));
  EXPECT_EQ(vm_->GetOutputs().status().code(), absl::StatusCode::kFailedPrecondition);

  struct Case {
    Tensor x, y;
    const char* message;
  };
  const Case cases[] = {
      {F32({6}, {1, 2, 3, 4, 5, 6}), Y(), "must have rank 2"},                        // rank
      {F32({2, 3, 1}, {1, 2, 3, 4, 5, 6}), Y(), "must have rank 2"},                  // rank
      {F32({3, 2}, {1, 2, 3, 4, 5, 6}), Y(), "dim 1 must be 3"},                      // fixed dim
      {F32({1, 3}, {1, 2, 3}), Y(), "symbol 'n' = 2, but another input has it = 1"},  // symbol
      {F32({9, 3}, std::vector<float>(27, 1.0f)),
       F32({9, 3}, std::vector<float>(27, 1.0f)),  // bound
       "symbol 'n' = 9 exceeds its declared bound 8"},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(vm_->SetInput("x", c.x).ok());
    ASSERT_TRUE(vm_->SetInput("y", c.y).ok());
    s = vm_->Run();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
  // At the bound exactly is fine, and the VM is usable after all those errors.
  Bind(F32({8, 3}, std::vector<float>(24, 1.0f)), F32({8, 3}, std::vector<float>(24, 2.0f)));
  ASSERT_TRUE(vm_->Run().ok());
  EXPECT_EQ(Output(*vm_, "sum")[23], 6.0f);
}

// A run refused before it starts (an input of the wrong shape, or missing) leaves no outputs
// behind: the previous run's are not readable as if they were this run's.
TEST_F(BasicTest, RefusedRunLeavesNoStaleOutputs) {
  Bind(X(), Y());
  ASSERT_TRUE(vm_->Run().ok());
  const Tensor kept = *vm_->GetOutput("sum");
  ASSERT_TRUE(vm_->SetInput("x", F32({6}, {1, 2, 3, 4, 5, 6})).ok());
  EXPECT_EQ(vm_->Run().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(vm_->GetOutputs().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(vm_->GetOutput("sum").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Floats(kept), ElementsAre(12, 24, 36, 45, 57, 69));  // what the caller holds stays
  Bind(X(), Y());
  ASSERT_TRUE(vm_->Run().ok());
  EXPECT_THAT(Output(*vm_, "sum"), ElementsAre(12, 24, 36, 45, 57, 69));
}

TEST_F(BasicTest, UnknownOutputAndFunction) {
  Bind(X(), Y());
  ASSERT_TRUE(vm_->Run().ok());
  absl::StatusOr<Tensor> t = vm_->GetOutput("nope");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("sum, prod, echo"));
  EXPECT_EQ(vm_->GetOutput(3).status().code(), absl::StatusCode::kOutOfRange);
  RunOptions run;
  run.function = "nope";
  absl::Status s = vm_->Run(run);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr("main"));
  // "twice" has not run: no outputs yet.
  EXPECT_EQ(vm_->GetOutput("w", "twice").status().code(), absl::StatusCode::kFailedPrecondition);
}

// acc := trips * x, by a loop that per iteration makes a view of a preallocated storage, does
// some scalar work and invokes Add into that view, then swaps the two buffers.
constexpr absl::string_view kLoop = R"(
.kernel "Add" in(f32, f32) out(f32)

.function main
  .params 2 0
  .sregs i64 i64 i64 f64 i64
  .oregs tensor:i64 tensor:f32 storage storage tensor:f32 tensor:f32
  .oresults tensor:f32
  .input trips []
  .input x [4]
  .output acc [4]
  read_i %s0, %o0, 0
  alloc_storage %o2, 16, cpu
  alloc_storage %o3, 16, cpu
  alloc_tensor %o4, %o2, 0, f32, [4]
  const_f %s3, 0
  loop %s1, 4
    write %o4, %s1, %s3
  endloop
  loop %s1, %s0
    addimm_i %s2, %s1, 3
    mul_i %s4, %s2, %s2
    sub_i %s4, %s4, %s2
    alloc_tensor %o5, %o3, 0, f32, [4]
    invoke k0, #0, (%o4, %o1), (%o5)
    pmove (%o4, %o2, %o3), (%o5, %o3, %o2)
  endloop
  ret (%o4), ()
.end
)";

class LoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    exe_ = LoadAssembly(kLoop);
    ASSERT_NE(exe_, nullptr);
  }
  static void Bind(VirtualMachine& vm, int64_t trips) {
    ASSERT_TRUE(vm.SetInputZeroCopy("trips", I64({}, {trips})).ok());
    ASSERT_TRUE(vm.SetInput("x", F32({4}, {1, 2, 4, 0.5f})).ok());
  }
  std::shared_ptr<const Executable> exe_;
};

TEST_F(LoopTest, Computes) {
  std::unique_ptr<VirtualMachine> vm = MakeVm(exe_);
  Bind(*vm, 10);
  ASSERT_TRUE(vm->Run().ok());
  EXPECT_THAT(Output(*vm, "acc"), ElementsAre(10, 20, 40, 5));
  EXPECT_EQ(vm->last_run_iterations(), 14);
  Bind(*vm, 0);
  ASSERT_TRUE(vm->Run().ok());
  EXPECT_THAT(Output(*vm, "acc"), ElementsAre(0, 0, 0, 0));
}

// acc is swapped with other registers in the loop: its buffer gets a copy at ret.
TEST_F(LoopTest, OutputBufferOfALoopCarriedValueIsCopiedInto) {
  std::unique_ptr<VirtualMachine> vm = MakeVm(exe_);
  Tensor acc = F32({4}, {9, 9, 9, 9});
  ASSERT_TRUE(vm->SetOutputBuffer("acc", acc).ok());
  Bind(*vm, 3);
  ASSERT_TRUE(vm->Run().ok());
  EXPECT_EQ(vm->last_run_output_copies(), 1);
  EXPECT_EQ(vm->GetOutput("acc")->raw_data(), acc.raw_data());
  std::unique_ptr<VirtualMachine> plain = MakeVm(exe_);
  Bind(*plain, 3);
  ASSERT_TRUE(plain->Run().ok());
  EXPECT_EQ(Floats(acc), Output(*plain, "acc"));
  EXPECT_EQ(Floats(acc), (std::vector<float>{3, 6, 12, 1.5f}));
}

TEST_F(LoopTest, IterationLimit) {
  VmOptions options;
  options.max_loop_iterations = 100;
  std::unique_ptr<VirtualMachine> vm = MakeVm(exe_, options);
  Bind(*vm, 1000);
  absl::Status s = vm->Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("iteration limit of 100"));
  EXPECT_THAT(s.message(), HasSubstr("endloop"));
  Bind(*vm, 96);  // 4 + 96 iterations: exactly the budget
  ASSERT_TRUE(vm->Run().ok());
  EXPECT_THAT(Output(*vm, "acc"), ElementsAre(96, 192, 384, 48));
}

TEST_F(LoopTest, CancelFromAnotherThread) {
  std::unique_ptr<VirtualMachine> vm = MakeVm(exe_);
  Bind(*vm, int64_t{1} << 39);  // hours
  CancellationToken token;
  RunOptions run;
  run.cancel = &token;
  std::thread canceller([&token] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    token.Cancel();
  });
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = vm->Run(run);
  canceller.join();
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(vm->GetOutputs().status().code(), absl::StatusCode::kFailedPrecondition);
  // A token still cancelled stops the next run at once; reset, the same VM runs correctly.
  Bind(*vm, 10);
  EXPECT_TRUE(absl::IsCancelled(vm->Run(run)));
  token.Reset();
  ASSERT_TRUE(vm->Run(run).ok());
  EXPECT_THAT(Output(*vm, "acc"), ElementsAre(10, 20, 40, 5));
}

TEST_F(LoopTest, Deadline) {
  std::unique_ptr<VirtualMachine> vm = MakeVm(exe_);
  Bind(*vm, int64_t{1} << 39);
  RunOptions run;
  run.deadline = absl::Now() + absl::Milliseconds(50);
  absl::Status s = vm->Run(run);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  run.deadline = absl::Now() - absl::Seconds(1);
  Bind(*vm, 10);
  EXPECT_TRUE(absl::IsDeadlineExceeded(vm->Run(run)));
  run.deadline = absl::Now() + absl::Seconds(600);
  ASSERT_TRUE(vm->Run(run).ok());
  EXPECT_THAT(Output(*vm, "acc"), ElementsAre(10, 20, 40, 5));
}

// Two loops: the first allocates a larger storage every iteration (a new pool class, so a
// system allocation each time); the second allocates and releases the same size every
// iteration (the pool serves it again). The steady state counts each loop after its first
// iteration: the first loop's n - 1 growths, nothing of the second.
constexpr absl::string_view kTwoLoops = R"(
.function main
  .params 1 0
  .sregs i64 i64 i64 i64
  .oregs tensor:i64 storage storage
  .oresults tensor:i64
  .input n []
  .output n_out []
  read_i %s0, %o0, 0
  loop %s1, %s0
    addimm_i %s2, %s1, 1
    const_i %s3, 65536
    mul_i %s3, %s2, %s3
    alloc_storage %o1, %s3, cpu
  endloop
  loop %s1, 3
    alloc_storage %o2, 100, cpu
    kill %o2
  endloop
  ret (%o0), ()
.end
)";

TEST(RunMemoryTest, SteadyStateCountsEachLoopAfterItsFirstIteration) {
  std::shared_ptr<const Executable> exe = LoadAssembly(kTwoLoops);
  ASSERT_NE(exe, nullptr);
  for (int64_t n : {1, 4}) {
    SCOPED_TRACE(n);
    std::unique_ptr<VirtualMachine> vm = MakeVm(exe);
    ASSERT_TRUE(vm->SetInputZeroCopy("n", I64({}, {n})).ok());
    ASSERT_TRUE(vm->Run().ok());
    const RunMemoryStats m = vm->last_run_memory();
    EXPECT_TRUE(m.first_iteration_ended);
    EXPECT_EQ(m.system_allocs, n + 1);
    EXPECT_EQ(m.system_allocs_after_first_iteration, n - 1);
  }
}

// The C++ API is safe by default, as vm-run and Python: 10,000,000 loop iterations and 4 GiB
// of pool memory per run; 0 removes a limit.
TEST_F(LoopTest, DefaultLimitsStopARunawayLoopAndZeroRemovesThem) {
  const VmOptions defaults;
  EXPECT_EQ(defaults.max_loop_iterations, kDefaultMaxLoopIterations);
  EXPECT_EQ(defaults.memory_limit, kDefaultMemoryLimit);
  std::unique_ptr<VirtualMachine> vm = MakeVm(exe_);
  Bind(*vm, kDefaultMaxLoopIterations + 1);
  absl::Status s = vm->Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("loop iteration limit of 10000000"));
  Bind(*vm, 10);  // usable after it
  ASSERT_TRUE(vm->Run().ok());
  VmOptions unlimited;
  unlimited.max_loop_iterations = 0;
  std::unique_ptr<VirtualMachine> free_vm = MakeVm(exe_, unlimited);
  Bind(*free_vm, 10);  // (TenMillionIterationsInFlatMemory runs past the default with 2e7)
  ASSERT_TRUE(free_vm->Run().ok());
  EXPECT_EQ(free_vm->last_run_iterations(), 14);
}

TEST_F(LoopTest, TenMillionIterationsInFlatMemory) {
  VmOptions options;
  options.max_loop_iterations = 20'000'000;  // above the safe default of 10,000,000
  std::unique_ptr<VirtualMachine> vm = MakeVm(exe_, options);
  for (int i = 0; i < 3; ++i) {
    Bind(*vm, 10);
    ASSERT_TRUE(vm->Run().ok());
  }
  const AllocatorStats small = vm->memory_stats();
  Bind(*vm, 10'000'000);
  ASSERT_TRUE(vm->Run().ok());
  const AllocatorStats big = vm->memory_stats();
  // Exact in f32: every partial sum is a multiple of its element's spacing.
  EXPECT_THAT(Output(*vm, "acc"), ElementsAre(1e7f, 2e7f, 4e7f, 5e6f));
  EXPECT_EQ(vm->last_run_iterations(), 10'000'004);
  EXPECT_EQ(big.system_allocs, small.system_allocs);
  EXPECT_EQ(big.bytes_in_use, small.bytes_in_use);
  EXPECT_EQ(big.peak_bytes_in_use, small.peak_bytes_in_use);
  EXPECT_EQ(big.allocs - small.allocs, 3);  // the x copy and two storages: none per iteration
}

// Four ScatterND sites in a row, each copying its 262144 i32 indices to i64 in its workspace
// (2 MiB, above the 1 MiB a site keeps: vm/interpreter.cc, kMaxKeptWorkspaceBytes): each workspace
// goes back to the pool when its invoke returns, so the sites share one block (the run's peak is
// one workspace, not four) and nothing but the output is in use after the run. A model with many
// such sites (MViT's 64 ScatterNDs, each indexing its whole attention matrix) held them all
// otherwise.
constexpr absl::string_view kLargeWorkspaces = R"(
.kernel "ScatterND" in(f32, i32, f32) out(f32) attrs(reduction=s:"add")

.function main
  .params 3 0
  .oregs tensor:i32 tensor:f32 tensor:f32 storage tensor:f32 storage tensor:f32 storage tensor:f32 storage tensor:f32
  .oresults tensor:f32
  .input idx [262144,1]
  .input upd [262144]
  .input x [4]
  .output y [4]
  alloc_storage %o3, 16, cpu
  alloc_tensor %o4, %o3, 0, f32, [4]
  kill %o3
  invoke k0, #0, (%o2, %o0, %o1), (%o4)
  alloc_storage %o5, 16, cpu
  alloc_tensor %o6, %o5, 0, f32, [4]
  kill %o5
  invoke k0, #1, (%o4, %o0, %o1), (%o6)
  kill %o4
  alloc_storage %o7, 16, cpu
  alloc_tensor %o8, %o7, 0, f32, [4]
  kill %o7
  invoke k0, #2, (%o6, %o0, %o1), (%o8)
  kill %o6
  alloc_storage %o9, 16, cpu
  alloc_tensor %o10, %o9, 0, f32, [4]
  kill %o9
  invoke k0, #3, (%o8, %o0, %o1), (%o10)
  kill %o8
  ret (%o10), ()
.end
)";

TEST(WorkspaceTest, LargeWorkspacesGoBackToThePoolAfterTheirInvoke) {
  constexpr int64_t kN = 262144;
  constexpr int64_t kWorkspaceBytes = kN * 8;  // the indices as i64
  std::shared_ptr<const Executable> exe = LoadAssembly(kLargeWorkspaces);
  ASSERT_NE(exe, nullptr);
  std::unique_ptr<VirtualMachine> vm = MakeVm(exe);
  std::vector<int32_t> idx(kN);
  for (int64_t t = 0; t < kN; ++t) idx[t] = static_cast<int32_t>(t % 4);
  const Tensor indices = *Tensor::FromVector<int32_t>(DType::kI32, {kN, 1}, idx);
  const Tensor updates = F32({kN}, std::vector<float>(kN, 1.0f));
  const Tensor x = F32({4}, {1, 2, 3, 4});
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run);
    ASSERT_TRUE(vm->SetInputZeroCopy("idx", indices).ok());
    ASSERT_TRUE(vm->SetInputZeroCopy("upd", updates).ok());
    ASSERT_TRUE(vm->SetInputZeroCopy("x", x).ok());
    ASSERT_TRUE(vm->Run().ok());
    // Each site adds kN / 4 ones to each element: 4 sites, exact in f32.
    constexpr float kAdded = 4.0f * (kN / 4);
    EXPECT_THAT(Output(*vm, "y"), ElementsAre(1 + kAdded, 2 + kAdded, 3 + kAdded, 4 + kAdded));
    const AllocatorStats stats = vm->memory_stats();
    EXPECT_LT(stats.bytes_in_use, kWorkspaceBytes / 2);
    EXPECT_LT(stats.peak_bytes_in_use, 2 * kWorkspaceBytes);
    // The second run finds the block in the pool's free list.
    if (run == 1) EXPECT_EQ(vm->last_run_memory().system_allocs, 0);
  }
}

// The same four sites with contiguous i64 indices: ScatterND reads them in place (no copy; an
// index tensor may be as large as the data it addresses), so the run's peak is its outputs
// alone. With the copy it held a 2 MiB workspace during each invoke.
TEST(WorkspaceTest, ScatterNDReadsContiguousI64IndicesInPlace) {
  constexpr int64_t kN = 262144;
  std::shared_ptr<const Executable> exe =
      LoadAssembly(absl::StrReplaceAll(kLargeWorkspaces, {{"i32", "i64"}}));
  ASSERT_NE(exe, nullptr);
  std::unique_ptr<VirtualMachine> vm = MakeVm(exe);
  std::vector<int64_t> idx(kN);
  for (int64_t t = 0; t < kN; ++t) idx[t] = t % 4 - 4 * (t % 2);  // negative ones too
  const Tensor indices = I64({kN, 1}, idx);
  const Tensor updates = F32({kN}, std::vector<float>(kN, 1.0f));
  ASSERT_TRUE(vm->SetInputZeroCopy("idx", indices).ok());
  ASSERT_TRUE(vm->SetInputZeroCopy("upd", updates).ok());
  ASSERT_TRUE(vm->SetInputZeroCopy("x", F32({4}, {1, 2, 3, 4})).ok());
  ASSERT_TRUE(vm->Run().ok());
  constexpr float kAdded = 4.0f * (kN / 4);
  EXPECT_THAT(Output(*vm, "y"), ElementsAre(1 + kAdded, 2 + kAdded, 3 + kAdded, 4 + kAdded));
  EXPECT_LT(vm->memory_stats().peak_bytes_in_use, kN * 8 / 4);
}

TEST_F(LoopTest, ManyVmsOnEightThreads) {
  constexpr int kThreads = 8, kRuns = 50;
  auto expected = [](int t, int r) {
    const float n = static_cast<float>((t * kRuns + r) % 17);
    return std::vector<float>{n, 2 * n, 4 * n, n / 2};
  };
  // Single-threaded reference results.
  std::vector<std::vector<float>> reference(kThreads * kRuns);
  {
    std::unique_ptr<VirtualMachine> vm = MakeVm(exe_);
    for (int t = 0; t < kThreads; ++t) {
      for (int r = 0; r < kRuns; ++r) {
        Bind(*vm, (t * kRuns + r) % 17);
        ASSERT_TRUE(vm->Run().ok());
        reference[t * kRuns + r] = Output(*vm, "acc");
        ASSERT_EQ(reference[t * kRuns + r], expected(t, r));
      }
    }
  }
  std::vector<std::vector<float>> results(kThreads * kRuns);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe_);
      if (!vm.ok()) {
        ++failures;
        return;
      }
      for (int r = 0; r < kRuns; ++r) {
        const int64_t trips = (t * kRuns + r) % 17;
        if (!(*vm)->SetInputZeroCopy("trips", I64({}, {trips})).ok() ||
            !(*vm)->SetInput("x", F32({4}, {1, 2, 4, 0.5f})).ok() || !(*vm)->Run().ok()) {
          ++failures;
          return;
        }
        absl::StatusOr<Tensor> acc = (*vm)->GetOutput("acc");
        if (!acc.ok()) {
          ++failures;
          return;
        }
        results[t * kRuns + r].assign(acc->data<float>(), acc->data<float>() + acc->numel());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(results, reference);
}

TEST_F(LoopTest, ExecutableHandleReleasedWhileVmsRun) {
  constexpr int kThreads = 4;
  std::vector<std::unique_ptr<VirtualMachine>> vms;
  for (int t = 0; t < kThreads; ++t) {
    vms.push_back(MakeVm(exe_));
    Bind(*vms.back(), 1000 + t);
  }
  std::weak_ptr<const Executable> weak = exe_;
  std::atomic<bool> go{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (int r = 0; r < 20; ++r) {
        if (!vms[t]->Run().ok()) ++failures;
      }
    });
  }
  go = true;
  exe_.reset();  // while the VMs run: they keep the executable alive
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_FALSE(weak.expired());
  for (int t = 0; t < kThreads; ++t) {
    const float n = static_cast<float>(1000 + t);
    EXPECT_THAT(Output(*vms[t], "acc"), ElementsAre(n, 2 * n, 4 * n, n / 2));
  }
  const Tensor kept = *vms[0]->GetOutput("acc");
  vms.clear();
  EXPECT_TRUE(weak.expired());
  EXPECT_THAT(Floats(kept), ElementsAre(1000, 2000, 4000, 500));
}

// The stress test (labelled `threads`: the CI's ThreadSanitizer stage runs it): 8 threads x 200
// runs on one executable whose weights live in a separate .dvw file, each thread with its own
// VM, zero-copy inputs, and (every other thread) its outputs written into its own buffers. Every
// result must equal the single-threaded run's, byte for byte. The handle that loaded the
// executable is dropped while the threads run; the weights mapping goes with the last VM.
TEST(StressTest, EightThreadsTwoHundredRunsOnSharedWeights) {
  constexpr int kThreads = 8, kRuns = 200;
  absl::StatusOr<isa::Assembly> a = isa::Assemble(kBasic);
  ASSERT_TRUE(a.ok()) << a.status();
  std::vector<absl::string_view> data(a->constants.begin(), a->constants.end());
  schema::WriteOptions wo;
  wo.weights_file_name = "stress.dvw";
  absl::StatusOr<schema::SerializedFiles> files =
      schema::SerializeExecutableFiles(*a->exe, data, wo);
  ASSERT_TRUE(files.ok()) << files.status();
  const std::string dir = ::testing::TempDir();
  const std::string exe_path = absl::StrCat(dir, "/stress_", getpid(), ".dvm");
  ASSERT_TRUE(schema::WriteStringToFile(exe_path, files->executable).ok());
  ASSERT_TRUE(schema::WriteStringToFile(dir + "/stress.dvw", files->weights).ok());
  const int segments_before = Executable::SharedSegmentCount();
  absl::StatusOr<std::shared_ptr<const Executable>> loaded = Executable::Load(exe_path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::shared_ptr<const Executable> exe = *std::move(loaded);
  ASSERT_TRUE(exe->external_weights());
  EXPECT_EQ(Executable::SharedSegmentCount(), segments_before + 1);

  auto input = [](int t, int r) {
    std::vector<float> v(6);
    for (int i = 0; i < 6; ++i) v[i] = static_cast<float>((t * 31 + r * 7 + i) % 23) - 11.0f;
    return F32({2, 3}, v);
  };
  const Tensor y = F32({2, 3}, {0.5f, -1, 2, 0.25f, 3, -4});
  // Single-threaded reference, checked against values computed here.
  std::vector<std::vector<float>> reference(kThreads * kRuns);
  {
    std::unique_ptr<VirtualMachine> vm = MakeVm(exe);
    ASSERT_TRUE(vm->SetInput("y", y).ok());
    for (int t = 0; t < kThreads; ++t) {
      for (int r = 0; r < kRuns; ++r) {
        const Tensor x = input(t, r);
        ASSERT_TRUE(vm->SetInput("x", x).ok());
        ASSERT_TRUE(vm->Run().ok());
        std::vector<float> out = Output(*vm, "sum");
        const std::vector<float> prod = Output(*vm, "prod");
        for (int i = 0; i < 6; ++i) {
          ASSERT_EQ(out[i],
                    x.data<float>()[i] + y.data<float>()[i] + static_cast<float>(i % 3 + 1));
          ASSERT_EQ(prod[i], x.data<float>()[i] * 2);
        }
        out.insert(out.end(), prod.begin(), prod.end());
        reference[t * kRuns + r] = std::move(out);
      }
    }
  }
  std::vector<std::unique_ptr<VirtualMachine>> vms;
  for (int t = 0; t < kThreads; ++t) vms.push_back(MakeVm(exe));
  std::weak_ptr<const Executable> weak = exe;
  std::vector<std::vector<float>> results(kThreads * kRuns);
  std::atomic<int> failures{0}, started{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      VirtualMachine& vm = *vms[t];
      Tensor sum_buf = F32({2, 3}, std::vector<float>(6, 0)),
             prod_buf = F32({2, 3}, std::vector<float>(6, 0));
      const bool buffers = t % 2 == 0;
      if (buffers && (!vm.SetOutputBuffer("sum", sum_buf).ok() ||
                      !vm.SetOutputBuffer("prod", prod_buf).ok())) {
        ++failures;
        return;
      }
      if (!vm.SetInputZeroCopy("y", y).ok()) ++failures;
      ++started;
      for (int r = 0; r < kRuns; ++r) {
        const Tensor x = input(t, r);
        if (!vm.SetInputZeroCopy("x", x).ok() || !vm.Run().ok()) {
          ++failures;
          return;
        }
        absl::StatusOr<Tensor> sum = vm.GetOutput("sum"), prod = vm.GetOutput("prod");
        if (!sum.ok() || !prod.ok() ||
            (buffers &&
             (sum->raw_data() != sum_buf.raw_data() || vm.last_run_output_copies() != 0))) {
          ++failures;
          return;
        }
        std::vector<float>& out = results[t * kRuns + r];
        out.assign(sum->data<float>(), sum->data<float>() + 6);
        out.insert(out.end(), prod->data<float>(), prod->data<float>() + 6);
      }
    });
  }
  while (started.load() < kThreads && failures.load() == 0) std::this_thread::yield();
  exe.reset();  // the loading handle goes while the VMs run: they keep the executable alive
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(results, reference);
  EXPECT_FALSE(weak.expired());
  vms.clear();
  EXPECT_TRUE(weak.expired());
  EXPECT_EQ(Executable::SharedSegmentCount(), segments_before);
  std::remove(exe_path.c_str());
}

// Several allocation sites: two storages, a kernel's dynamic output, a growable tensor and an
// append that outgrows it. Outputs: a = (x + y) * x + y, m = (x + y) * x (dynamic), c = [a, a].
constexpr absl::string_view kAllocs = R"(
.kernel "Add" in(f32, f32) out(f32)
.kernel "Mul" in(f32, f32) out(dyn:f32)

.function main
  .params 2 0
  .sregs i64 i64 i64
  .oregs tensor:f32 tensor:f32 storage tensor:f32 tensor:f32 storage tensor:f32 tensor:f32
  .oresults tensor:f32 tensor:f32 tensor:f32
  .input x [n]
  .input y [n]
  .output a [n]
  .output m [n]
  .output c *
  dim %s0, %o0, 0
  const_i %s1, 4
  mul_i %s2, %s0, %s1
  alloc_storage %o2, %s2, cpu
  alloc_tensor %o3, %o2, 0, f32, [%s0]
  invoke k0, #0, (%o0, %o1), (%o3)
  invoke k1, #1, (%o3, %o0), (%o4)
  alloc_storage %o5, %s2, cpu
  alloc_tensor %o6, %o5, 0, f32, [%s0]
  invoke k0, #2, (%o4, %o1), (%o6)
  alloc_growable %o7, f32, cpu, 0, 1, [0]
  append %o7, %o6, 0
  append %o7, %o6, 0
  ret (%o6, %o4, %o7), ()
.end
)";

TEST(AllocationTest, FailureAtEverySite) {
  std::shared_ptr<const Executable> exe = LoadAssembly(kAllocs);
  ASSERT_NE(exe, nullptr);
  std::unique_ptr<VirtualMachine> vm = MakeVm(exe);
  ASSERT_TRUE(vm->SetInput("x", F32({3}, {1, 2, 3})).ok());
  ASSERT_TRUE(vm->SetInput("y", F32({3}, {10, 20, 30})).ok());
  auto check_outputs = [&] {
    EXPECT_THAT(Output(*vm, "a"), ElementsAre(21, 64, 129));
    EXPECT_THAT(Output(*vm, "m"), ElementsAre(11, 44, 99));
    EXPECT_THAT(Output(*vm, "c"), ElementsAre(21, 64, 129, 21, 64, 129));
  };
  int failures = 0;
  bool passed_the_last_site = false;  // a fault armed past the run's allocations
  for (int64_t n = 1; n <= 100; ++n) {
    SCOPED_TRACE(n);
    testing::FailNthAllocation(*vm, n);
    absl::Status s = vm->Run();
    if (s.ok()) {
      testing::FailNthAllocation(*vm, 0);
      check_outputs();
      passed_the_last_site = true;
      break;
    }
    ++failures;
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(s.message(), HasSubstr("injected allocation failure"));
    EXPECT_THAT(s.message(), HasSubstr("function 'main' pc "));
    EXPECT_EQ(vm->GetOutputs().status().code(), absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE(vm->Run().ok());
    check_outputs();
  }
  // alloc_storage x2, Mul's output, alloc_growable, the growing append: every site failed.
  EXPECT_TRUE(passed_the_last_site);
  EXPECT_GE(failures, 5);
  EXPECT_EQ(vm->memory_stats().failed_allocs, failures);
}

TEST(AllocationTest, MemoryLimitBelowNeed) {
  constexpr absl::string_view kBig = R"(
.function main
  .params 1 0
  .oregs tensor:f32 storage
  .oresults tensor:f32
  .input x [1]
  .output y [1]
  alloc_storage %o1, 1048576, cpu
  ret (%o0), ()
.end
)";
  std::shared_ptr<const Executable> exe = LoadAssembly(kBig);
  ASSERT_NE(exe, nullptr);
  VmOptions options;
  options.memory_limit = 64 * 1024;
  std::unique_ptr<VirtualMachine> vm = MakeVm(exe, options);
  ASSERT_TRUE(vm->SetInput("x", F32({1}, {1})).ok());
  absl::Status s = vm->Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("memory limit"));
  EXPECT_THAT(s.message(), HasSubstr("alloc_storage"));
  // Still usable; a VM with enough room runs it.
  EXPECT_EQ(vm->Run().code(), absl::StatusCode::kResourceExhausted);
  options.memory_limit = 4 << 20;
  std::unique_ptr<VirtualMachine> roomy = MakeVm(exe, options);
  ASSERT_TRUE(roomy->SetInput("x", F32({1}, {1})).ok());
  EXPECT_TRUE(roomy->Run().ok());
}

// Outputs that the VM's kernels and growth allocated (not alloc_storage) also outlive the VM.
TEST(AllocationTest, KernelAndGrowthOutputsOutliveTheVm) {
  std::shared_ptr<const Executable> exe = LoadAssembly(kAllocs);
  ASSERT_NE(exe, nullptr);
  Tensor m, c;
  {
    std::unique_ptr<VirtualMachine> vm = MakeVm(exe);
    ASSERT_TRUE(vm->SetInput("x", F32({3}, {1, 2, 3})).ok());
    ASSERT_TRUE(vm->SetInput("y", F32({3}, {10, 20, 30})).ok());
    ASSERT_TRUE(vm->Run().ok());
    m = *vm->GetOutput("m");
    c = *vm->GetOutput("c");
  }
  EXPECT_THAT(Floats(m), ElementsAre(11, 44, 99));
  m = Tensor();  // released after the VM: must not touch a destroyed pool
  EXPECT_THAT(Floats(c), ElementsAre(21, 64, 129, 21, 64, 129));
  c = Tensor();
}

// Run-time errors name the function, the pc, the mnemonic and the node of a .loc.
constexpr absl::string_view kErrors = R"(
.kernel "Add" in(f32, f32) out(f32)

.function divide
  .params 1 0
  .sregs i64 i64 i64
  .oregs tensor:i64 storage tensor:i64
  .oresults tensor:i64
  .input d []
  .output q []
  read_i %s0, %o0, 0
  const_i %s1, 100
  .loc "Div_7"
  div_i %s2, %s1, %s0
  .loc "Out_1"
  alloc_storage %o1, 8, cpu
  alloc_tensor %o2, %o1, 0, i64, []
  write %o2, 0, %s2
  ret (%o2), ()
.end

.function add_wrong_shape
  .params 1 0
  .oregs tensor:f32 storage tensor:f32
  .oresults tensor:f32
  .input x [2]
  .output y [3]
  alloc_storage %o1, 12, cpu
  alloc_tensor %o2, %o1, 0, f32, [3]
  .loc "Add_3"
  invoke k0, #0, (%o0, %o0), (%o2)
  ret (%o2), ()
.end
)";

TEST(ErrorTest, RunTimeErrorsNameFunctionPcAndNode) {
  std::shared_ptr<const Executable> exe = LoadAssembly(kErrors);
  ASSERT_NE(exe, nullptr);
  std::unique_ptr<VirtualMachine> vm = MakeVm(exe);
  RunOptions run;
  run.function = "divide";
  ASSERT_TRUE(vm->SetInput("d", I64({}, {0}), "divide").ok());
  absl::Status s = vm->Run(run);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // read_i takes 4 words, const_i 4: div_i is at pc 8.
  EXPECT_THAT(s.message(),
              HasSubstr("function 'divide' pc 8 (div_i, node 'Div_7'): integer division by zero"));
  EXPECT_EQ(exe->SourceNode(*exe->FindFunction("divide"), 8), "Div_7");
  ASSERT_TRUE(vm->SetInput("d", I64({}, {7}), "divide").ok());
  ASSERT_TRUE(vm->Run(run).ok());
  absl::StatusOr<Tensor> q = vm->GetOutput("q", "divide");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q->data<int64_t>(), 14);

  run.function = "add_wrong_shape";
  ASSERT_TRUE(vm->SetInput("x", F32({2}, {1, 2}), "add_wrong_shape").ok());
  s = vm->Run(run);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("function 'add_wrong_shape' pc "));
  EXPECT_THAT(s.message(), HasSubstr("(invoke, node 'Add_3'): "));
  EXPECT_THAT(s.message(), HasSubstr("Add"));
}

// Bad input that the signature cannot refuse (its dims are free) fails at a node deep in the
// graph: here an audio chunk shorter than a convolution's kernel. The error still names the
// node, and also every input of free shape with this run's shape, leaving out an input whose
// dims are fixed (checked at binding). The same VM then runs a good chunk.
TEST(ErrorTest, RunTimeShapeErrorsNameTheInputsOfFreeShape) {
  compiler::Module m;
  compiler::GraphBuilder b(m.AddFunction("main"));
  compiler::Value* audio =
      b.Input("audio", DType::kF32, {int64_t{1}, int64_t{1}, std::string("samples")});
  compiler::Value* bias = b.Input("bias", DType::kF32, {int64_t{1}});
  compiler::Value* conv = b.Op("Conv", {audio, b.Constant(F32({1, 1, 5}, {1, 1, 1, 1, 1}))});
  b.Output("y", b.Op("Add", {conv, bias}));
  testing::Compiled c = testing::CompileAndLoad(m);
  ASSERT_NE(c.exe, nullptr);
  std::unique_ptr<VirtualMachine> vm = MakeVm(c.exe);
  absl::StatusOr<std::vector<Tensor>> out =
      testing::RunWith(*vm, {{"audio", F32({1, 1, 3}, {1, 2, 3})}, {"bias", F32({1}, {0.5})}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
  EXPECT_THAT(out.status().message(), HasSubstr("node '"));
  EXPECT_THAT(out.status().message(),
              HasSubstr("[this run's inputs of free shape: input 'audio' f32[1,1,3]]"));
  EXPECT_THAT(out.status().message(), Not(HasSubstr("'bias'")));
  out = testing::RunWith(
      *vm, {{"audio", F32({1, 1, 6}, {1, 2, 3, 4, 5, 6})}, {"bias", F32({1}, {0.5})}});
  ASSERT_TRUE(out.ok()) << out.status();
  testing::ExpectTensorNear((*out)[0], {1, 1, 2}, {15.5, 20.5});
}

}  // namespace
}  // namespace dynvm
