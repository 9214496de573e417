// A user's custom op end to end, through the public registries only: a kernel for domain
// "my.domain" op "Double" (kernels/registry.h) and its shape function (compiler/op_registry.h);
// a graph built with the C++ builder that uses it compiles, loads and runs, next to built-in
// ops. Also: a custom op without a shape function (its output is allocated at run time), a
// custom backend outranking the built-in ones for an op, and a clean load error for an op no
// kernel serves.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/status_macros.h"
#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "compiler/op_registry.h"
#include "gtest/gtest.h"
#include "kernels/kernel.h"
#include "kernels/registry.h"
#include "tests/vm_fixture.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

using compiler::CompileResult;
using compiler::GraphBuilder;
using compiler::Module;
using compiler::Value;
using testing::CompileAndLoad;
using testing::Compiled;

// y = 2 * x for f32 x of any shape (any strides): a user's kernel.
class DoubleKernel final : public Kernel {
 public:
  absl::Status Run(KernelContext& ctx, absl::Span<const Tensor* const> in,
                   absl::Span<Tensor* const> out) const override {
    if (in.size() != 1 || in[0] == nullptr || out.size() != 1 || out[0] == nullptr) {
      return absl::InvalidArgumentError("Double: one input and one output");
    }
    const Tensor& x = *in[0];
    Tensor& y = *out[0];
    if (!y.defined()) {  // no shape function: a dynamic output
      DYNVM_ASSIGN_OR_RETURN(Tensor t, ctx.AllocateOutput(DType::kF32, x.dims()));
      y = std::move(t);
    }
    if (y.dims() != x.dims()) return absl::InvalidArgumentError("Double: shape mismatch");
    // Row-major walk over x's dims with its strides; y is contiguous.
    const int rank = x.rank();
    int64_t idx[Tensor::kMaxRank] = {};
    const float* px = x.data<float>();
    float* py = y.data<float>();
    for (int64_t i = 0; i < y.numel(); ++i) {
      int64_t off = 0;
      for (int d = 0; d < rank; ++d) off += idx[d] * x.stride(d);
      py[i] = 2.0f * px[off];
      for (int d = rank - 1; d >= 0; --d) {
        if (++idx[d] < x.dim(d)) break;
        idx[d] = 0;
      }
    }
    return absl::OkStatus();
  }
  std::string name() const override { return "double.f32.my"; }
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateDouble(const KernelSpec& spec) {
  if (spec.inputs.size() != 1 || spec.outputs.size() != 1) {
    return absl::InvalidArgumentError("Double: one input and one output");
  }
  if (spec.inputs[0].dtype != static_cast<uint8_t>(DType::kF32)) {
    return absl::UnimplementedError("Double: f32 only");
  }
  return std::make_unique<DoubleKernel>();
}

// Registers the user's ops once per process.
void RegisterMyOps() {
  static std::once_flag once;
  std::call_once(once, [] {
    KernelRegistry::Global().Register(
        KernelRegistration{"my.domain", "Double", Device::kCPU, "my", 5, &CreateDouble});
    compiler::OpRegistry::Global().Register(
        compiler::OpSchema{"my.domain", "Double", [](compiler::InferContext& c) -> absl::Status {
                             if (c.num_inputs() != 1 || !c.has_input(0))
                               return c.Error("Double takes one input");
                             if (c.input_shape(0) == nullptr) {
                               c.SetOutputUnknown(0, c.input_dtype(0));
                             } else {
                               c.SetOutput(0, c.input_dtype(0), *c.input_shape(0));
                             }
                             return absl::OkStatus();
                           }});
    // The same kernel under an op with no shape function: compiled as a dynamic output.
    KernelRegistry::Global().Register(
        KernelRegistration{"my.domain", "DoubleDynamic", Device::kCPU, "my", 5, &CreateDouble});
  });
}

Tensor Input(std::vector<int64_t> dims) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i) - 2.5f;
  return t;
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

TEST(CustomKernel, CompilesAndRunsNextToBuiltInOps) {
  RegisterMyOps();
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {std::string("n"), int64_t{3}});
  Value* d = b.Op("Double", {b.Op("Relu", {x})}, {}, "my.domain");
  b.Output("y", b.Op("Add", {d, x}));
  Compiled c = CompileAndLoad(m);
  ASSERT_NE(c.exe, nullptr);
  EXPECT_TRUE(absl::StrContains(c.result.ReportText(), "my.domain::Double f32 -> double.f32.my"))
      << c.result.ReportText();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c.exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  for (int64_t n : {2, 5}) {  // two shapes through the same executable
    const Tensor in = Input({n, 3});
    ASSERT_TRUE((*vm)->SetInput("x", in).ok());
    absl::Status s = (*vm)->Run();
    ASSERT_TRUE(s.ok()) << s;
    absl::StatusOr<Tensor> y = (*vm)->GetOutput("y");
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->dims(), in.dims());
    const std::vector<float> xv = Values(in), yv = Values(*y);
    for (size_t i = 0; i < xv.size(); ++i) {
      EXPECT_FLOAT_EQ(yv[i], 2.0f * std::max(xv[i], 0.0f) + xv[i]) << "n=" << n << " i=" << i;
    }
  }
}

TEST(CustomKernel, WithoutShapeFunctionTheOutputIsDynamic) {
  RegisterMyOps();
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {int64_t{2}, int64_t{2}});
  b.Output("y", b.Op("DoubleDynamic", {x}, {}, "my.domain"));
  Compiled c = CompileAndLoad(m);
  ASSERT_NE(c.exe, nullptr);
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c.exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->SetInput("x", Input({2, 2})).ok());
  absl::Status s = (*vm)->Run();
  ASSERT_TRUE(s.ok()) << s;
  absl::StatusOr<Tensor> y = (*vm)->GetOutput("y");
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values(*y), (std::vector<float>{-5, -3, -1, 1}));
}

TEST(CustomKernel, AUserBackendCanOutrankTheBuiltInOnes) {
  // A user's Neg at a priority above every built-in backend serves ONNX's Neg.
  static std::once_flag once;
  std::call_once(once, [] {
    KernelRegistry::Global().Register(KernelRegistration{
        "", "Neg", Device::kCPU, "my", 100,
        [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
          if (spec.inputs.empty() || spec.inputs[0].dtype != static_cast<uint8_t>(DType::kF32)) {
            return absl::UnimplementedError("f32 only");
          }
          return std::make_unique<DoubleKernel>();  // deliberately not a negation
        }});
  });
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {int64_t{3}});
  b.Output("y", b.Op("Neg", {x}));
  Compiled c = CompileAndLoad(m);
  ASSERT_NE(c.exe, nullptr);
  EXPECT_TRUE(absl::StrContains(c.result.ReportText(), "Neg f32 -> double.f32.my"))
      << c.result.ReportText();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c.exe);
  ASSERT_TRUE(vm.ok());
  ASSERT_TRUE((*vm)->SetInput("x", Input({3})).ok());
  ASSERT_TRUE((*vm)->Run().ok());
  EXPECT_EQ(Values(*(*vm)->GetOutput("y")), (std::vector<float>{-5, -3, -1}));
  // A load restricted to the reference backend gets ONNX's Neg back.
  LoadOptions options;
  options.backends.allowed = {"reference"};
  absl::StatusOr<std::shared_ptr<const Executable>> ref =
      Executable::LoadFromBytes(c.result.bytes, options);
  ASSERT_TRUE(ref.ok()) << ref.status();
  vm = VirtualMachine::Create(*ref);
  ASSERT_TRUE(vm.ok());
  ASSERT_TRUE((*vm)->SetInput("x", Input({3})).ok());
  ASSERT_TRUE((*vm)->Run().ok());
  EXPECT_EQ(Values(*(*vm)->GetOutput("y")), (std::vector<float>{2.5f, 1.5f, 0.5f}));
}

TEST(CustomKernel, AnOpNoKernelServesFailsCleanly) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {int64_t{3}});
  b.Output("y", b.Op("Triple", {x}, {}, "my.unknown"));
  absl::StatusOr<CompileResult> r = compiler::Compile(m);
  if (!r.ok()) return;  // refused at compile time: fine
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(r->bytes);
  ASSERT_FALSE(exe.ok());
  EXPECT_TRUE(absl::StrContains(exe.status().message(), "Triple")) << exe.status();
}

}  // namespace
}  // namespace dynvm
