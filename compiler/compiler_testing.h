// Helpers shared by the compiler's tests: random inputs and compile-and-load in one step.
#ifndef DYNVM_COMPILER_COMPILER_TESTING_H_
#define DYNVM_COMPILER_COMPILER_TESTING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compiler/compiler.h"
#include "vm/executable.h"

namespace dynvm::compiler {

// f32 tensor of `dims` with values uniform in [lo, hi), the same for the same seed.
Tensor RandomF32(std::vector<int64_t> dims, uint32_t seed, float lo = -1, float hi = 1);

struct Compiled {
  CompileResult result;
  std::shared_ptr<const Executable> exe;
};

// Compiles `m` and loads the bytes; a failure of either is a test failure (with the module
// dumped) and returns an empty Compiled (exe null).
Compiled CompileOrDie(Module& m, CompileOptions options = {});

// Runs `exe` on a new VM of `threads` threads with `inputs` set by name and returns its
// outputs; any failure is a test failure and returns no outputs.
std::vector<Tensor> RunOrDie(const std::shared_ptr<const Executable>& exe,
                             const std::vector<std::pair<std::string, Tensor>>& inputs,
                             int threads = 1);

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_COMPILER_TESTING_H_
