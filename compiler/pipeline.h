// Internal. The pass pipeline of Compile (compiler/compiler.cc): an ordered list of passes, each
// declaring what it needs and what it invalidates, so that shape inference runs again exactly
// where a pass left the shapes stale and a later pass reads them, never elsewhere.
//
// The IR caches one analysis: the values' dtypes, shapes and symbolic contents ("shapes"). The
// IR keeps no use lists (a pass that needs uses counts them itself), so shapes are the only
// thing a pass can invalidate. A pass that invalidates shapes is followed at once by shape
// inference when any later pass needs shapes (the code generator always does), so each pass
// sees a module in which every value's type is current.
#ifndef DYNVM_COMPILER_PIPELINE_H_
#define DYNVM_COMPILER_PIPELINE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/compiler.h"
#include "compiler/ir.h"

namespace dynvm::compiler {

struct Pass {
  std::string name;  // as --report prints it
  // Reads dtypes, shapes or symbolic contents: runs on inferred shapes.
  bool needs_shapes = true;
  // Leaves shapes stale when it changes the module (`run` returns true). A pass that keeps
  // shapes current itself (setting its new values' types, or inferring after its own sweeps)
  // does not.
  bool invalidates_shapes = false;
  // Runs the pass; true when it changed the module.
  std::function<absl::StatusOr<bool>(Module&)> run;
};

class Pipeline {
 public:
  void Add(Pass pass) { passes_.push_back(std::move(pass)); }
  // Runs every pass in order. `shapes_valid`: whether the module's shapes are current on entry.
  // Shapes are current on return (the code generator reads them).
  absl::Status Run(Module& module, bool shapes_valid = false);
  const std::vector<PassRecord>& records() const { return records_; }

 private:
  std::vector<Pass> passes_;
  std::vector<PassRecord> records_;
};

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_PIPELINE_H_
