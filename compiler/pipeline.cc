#include "compiler/pipeline.h"

#include <chrono>

#include "common/status_macros.h"
#include "compiler/passes.h"

namespace dynvm::compiler {
namespace {

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

absl::Status Pipeline::Run(Module& module, bool shapes_valid) {
  records_.clear();
  auto infer = [&]() -> absl::Status {
    const auto start = std::chrono::steady_clock::now();
    DYNVM_RETURN_IF_ERROR(InferShapes(module));
    records_.push_back({"infer_shapes", MillisecondsSince(start), true});
    shapes_valid = true;
    return absl::OkStatus();
  };
  for (const Pass& pass : passes_) {
    if (pass.needs_shapes && !shapes_valid) DYNVM_RETURN_IF_ERROR(infer());
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<bool> changed = pass.run(module);
    if (!changed.ok()) return changed.status();
    records_.push_back({pass.name, MillisecondsSince(start), *changed});
    // Stale shapes are inferred again at once: the next pass, or the code generator after the
    // last one, reads them.
    if (*changed && pass.invalidates_shapes) DYNVM_RETURN_IF_ERROR(infer());
  }
  if (!shapes_valid) DYNVM_RETURN_IF_ERROR(infer());
  return absl::OkStatus();
}

}  // namespace dynvm::compiler
