// Compiles an ONNX model (mlp.onnx: y = Relu(x @ W + b), made by make_mlp.py) with an installed
// dynvm, runs it with the default kernels (oneDNN when the package has it) and checks the
// outputs against the values NumPy gives (make_mlp.py prints them).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dynvm/compiler/compiler.h"
#include "dynvm/compiler/onnx/onnx_importer.h"
#include "dynvm/vm/executable.h"
#include "dynvm/vm/virtual_machine.h"

int ConsumerPublicHeadersCompile();

namespace {

int Fail(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "consumer: %s: %s\n", what, std::string(s.message()).c_str());
  return 1;
}

}  // namespace

int main() {
  if (ConsumerPublicHeadersCompile() != 1) return 1;
  auto module = dynvm::compiler::onnx::ImportOnnxFile(DYNVM_CONSUMER_MODEL);
  if (!module.ok()) return Fail("import", module.status());
  dynvm::compiler::CompileOptions options;
  options.bounds = {{"batch", 4}};
  auto compiled = dynvm::compiler::Compile(**module, options);
  if (!compiled.ok()) return Fail("compile", compiled.status());
  auto exe = dynvm::Executable::LoadFromBytes(compiled->bytes);
  if (!exe.ok()) return Fail("load", exe.status());

  // The MatMul (with its bias: dynvm::Linear) runs on the package's preferred backend: oneDNN
  // when it was built with it.
  bool matmul_bound = false;
  for (int k = 0; k < (*exe)->num_kernels(); ++k) {
    const std::string& op = (*exe)->kernel_spec(k).op;
    if (op != "MatMul" && op != "Linear") continue;
    const std::string name = (*exe)->kernel(k).name();
    std::printf("consumer: MatMul -> %s\n", name.c_str());
    const bool dnnl = name.find(".dnnl") != std::string::npos;
    if (dnnl != static_cast<bool>(DYNVM_CONSUMER_WITH_DNNL)) {
      std::fprintf(stderr, "consumer: MatMul bound to %s\n", name.c_str());
      return 1;
    }
    matmul_bound = true;
  }
  if (!matmul_bound) {
    std::fprintf(stderr, "consumer: no MatMul kernel in the executable\n");
    return 1;
  }

  auto vm = dynvm::VirtualMachine::Create(*exe);
  if (!vm.ok()) return Fail("create", vm.status());
  auto main_fn = (*exe)->ResolveFunction("main");
  if (!main_fn.ok()) return Fail("resolve", main_fn.status());
  auto x =
      dynvm::Tensor::FromVector<float>(dynvm::DType::kF32, {2, 4}, {1, 2, 3, 4, -1, 0.5f, 0, 2});
  if (!x.ok()) return Fail("input", x.status());
  if (absl::Status s = (*vm)->SetInput("x", *x, *main_fn); !s.ok()) return Fail("set input", s);
  dynvm::RunOptions run;
  run.handle = *main_fn;
  if (absl::Status s = (*vm)->Run(run); !s.ok()) return Fail("run", s);
  auto y = (*vm)->GetOutput("y", *main_fn);
  if (!y.ok()) return Fail("output", y.status());

  const std::vector<float> want = {6.5f, 3.0f, 5.75f, 0.0f, 3.5f, 2.75f};
  if (y->dims().size() != 2 || y->dims()[0] != 2 || y->dims()[1] != 3) {
    std::fprintf(stderr, "consumer: output has the wrong shape\n");
    return 1;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const float got = y->data<float>()[i];
    if (std::fabs(got - want[i]) > 1e-5f) {
      std::fprintf(stderr, "consumer: y[%zu] = %g, want %g\n", i, got, want[i]);
      return 1;
    }
  }
  std::printf("consumer: ok\n");
  return 0;
}
