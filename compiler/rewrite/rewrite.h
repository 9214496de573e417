// The pattern-rewrite framework (docs/compiler.md, "Pattern rewrites"): rules, each a pattern
// (compiler/rewrite/pattern.h) and a replacement, applied over every region of a module to a
// fixpoint.
//
// A rule matches at a root node; when its pattern matches, every matched node but the root has
// no consumer outside the match (the intermediates die with the rewrite), and all matched nodes
// are in the root's region, its `rewrite` function builds the replacement with an Emitter. The
// replacement's last node takes over the root's output value (its name, shape and uses), the
// root is removed, and the other matched nodes are removed as dead code. `rewrite` may refuse
// (return nullptr) after looking closer; it must then have emitted nothing.
//
// Each sweep visits every node once in program order and rewrites at most once per node; shapes
// are inferred again after a sweep that changed anything, and sweeps repeat until one changes
// nothing (at most kMaxSweeps). Rules run in phases: the rules of phase 1 start once every rule
// of phase 0 has reached its fixpoint (a late rule such as matmul_transpose must not take a
// MatMul that a larger pattern, attention, would have rooted above it later in program order).
#ifndef DYNVM_COMPILER_REWRITE_REWRITE_H_
#define DYNVM_COMPILER_REWRITE_REWRITE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir.h"
#include "compiler/rewrite/pattern.h"

namespace dynvm::compiler::rewrite {

// Builds a rule's replacement: nodes inserted where the root was.
class Emitter {
 public:
  Emitter(Module& m, Graph& g, const Node& root) : m_(m), g_(g), root_(root) {}

  // A node of `op` (domain "" unless given) with one output; its type is inferred after the
  // sweep. The node is named after the root, for errors at run time.
  Value* Op(const std::string& op, std::vector<Value*> inputs, Attrs attrs = {},
            const std::string& domain = "");
  // A constant (no node).
  Value* Constant(Tensor t);
  Module& module() { return m_; }
  const Node& root() const { return root_; }
  std::vector<std::unique_ptr<Node>>& nodes() { return nodes_; }

 private:
  Module& m_;
  Graph& g_;
  const Node& root_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

struct Rule {
  std::string name;  // what --report prints and --disable-rewrite names
  Pattern pattern;
  // Builds the replacement of the match's root value, or returns nullptr to refuse.
  std::function<Value*(Emitter&, const Match&)> rewrite;
  int phase = 0;  // 0, or kLatePhase: applied after every phase-0 rule reached its fixpoint
  // Takes a MatMul or Gemm with a constant weight into a fused op (dynvm::Linear) that weight
  // quantization does not rewrite: off when weights are quantized (RewriteOptions).
  bool fuses_weight_products = false;
};

constexpr int kLatePhase = 1;

// Every rule, in the order they are tried at a node (compiler/rewrite/rules.cc).
const std::vector<Rule>& AllRules();

struct RewriteOptions {
  std::vector<std::string> disabled;  // rule names not to apply
  // The device compiled for. Off the CPU, a rewrite whose matched nodes all have a kernel on
  // the device is applied only when every node it makes has one too: a fusion must not move
  // work from the device to the CPU (a fused op with no device kernel, dynvm::Linear on CUDA).
  Device device = Device::kCPU;
  // The products keep their ONNX form for a later pass (quantize_weights): rules that fuse
  // them (Rule::fuses_weight_products) do not run.
  bool keep_weight_products = false;
  // Names the caller's own passes take from `disabled` before these options are built (the
  // compiler's unstack_loop_carried and transpose_weights): listed with the rules when a
  // disabled name is unknown, so the message names every accepted switch.
  std::vector<std::string> other_switches;
};

// How often each rule fired, by name (every rule listed, zeros included).
using RewriteCounts = std::map<std::string, int>;

constexpr int kMaxSweeps = 16;

// Applies `rules` (all of AllRules() by default) to a fixpoint. Needs inferred shapes; leaves
// them inferred. Errors: an unknown name in options.disabled, or a shape inference failure
// after a rewrite (naming the node).
absl::StatusOr<RewriteCounts> ApplyRewrites(Module& module, const RewriteOptions& options = {});
absl::StatusOr<RewriteCounts> ApplyRules(Module& module, const std::vector<const Rule*>& rules,
                                         Device device = Device::kCPU);

}  // namespace dynvm::compiler::rewrite

#endif  // DYNVM_COMPILER_REWRITE_REWRITE_H_
