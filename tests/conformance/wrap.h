// Wraps an ONNX test case's graph in control flow, for the Loop- and If-wrapped conformance runs
// (vm-conformance --wrap loop|if, docs/onnx.md "Conformance"):
//
//   loop: the graph's nodes become the body of a Loop with trip count 2 (a Constant). The
//         graph's inputs (those without an initializer) are loop-carried, passed through
//         unchanged each iteration; initializers are read from the outer scope (captured). Every
//         static input dim becomes a dim_param, so every shape is symbolic. Each original output
//         is a scan output of the body ([2, ...]) and the graph's output is its last iteration
//         (Gather index 1 on axis 0).
//   if:   the graph's nodes are copied into both branches of an If whose condition is a new
//         last graph input, kWrapCondInput (a bool scalar: a run-time value, so both branches
//         are compiled; a constant condition would be decided at compile time), which the runner
//         binds to true (the then branch runs); the branches read the graph's inputs and
//         initializers from the outer scope.
//   if-else: the same, the runner binding the condition false (the else branch runs).
//
// Inputs and outputs keep their order (the runner binds them by position), so the case's
// test_data_set_* folders apply unchanged (plus the condition, last, for if and if-else).
#ifndef DYNVM_TESTS_CONFORMANCE_WRAP_H_
#define DYNVM_TESTS_CONFORMANCE_WRAP_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dynvm::conformance {

enum class Wrap { kNone, kLoop, kIf, kIfElse };

// The If wrappers' condition input (last): true for kIf, false for kIfElse.
inline constexpr const char* kWrapCondInput = "wrap_cond";

// The serialized ModelProto `model` with its graph wrapped as `wrap` says (kNone: unchanged).
// InvalidArgument when `model` does not parse; Unimplemented for graphs that cannot be wrapped
// (no nodes).
absl::StatusOr<std::string> WrapModel(absl::string_view model, Wrap wrap);

}  // namespace dynvm::conformance

#endif  // DYNVM_TESTS_CONFORMANCE_WRAP_H_
