// Test helpers for the rewrite rules: a graph built twice, compiled with and without
// optimization, run on the same inputs, the outputs compared.
#ifndef DYNVM_COMPILER_REWRITE_REWRITE_TESTING_H_
#define DYNVM_COMPILER_REWRITE_REWRITE_TESTING_H_

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "compiler/compiler_testing.h"

namespace dynvm::compiler::rewrite {

struct Outcome {
  std::map<std::string, int> fired;  // CompileResult::rewrites of the optimized program
  std::vector<std::string> kernels;  // its kernel table's ops
  bool HasKernel(const std::string& op) const;
};

// Builds the graph with `build` twice, compiles it with `options` and with optimize = false,
// runs both on `inputs` and expects every output within `tol` (absolute and relative).
Outcome CompareWithUnoptimized(const std::function<void(GraphBuilder&)>& build,
                               const std::vector<std::pair<std::string, Tensor>>& inputs,
                               CompileOptions options = {}, double tol = 1e-5);

}  // namespace dynvm::compiler::rewrite

#endif  // DYNVM_COMPILER_REWRITE_REWRITE_TESTING_H_
