// SwiGLU rule: the gating of a SwiGLU feed-forward block (Llama, Mistral, Qwen: down(silu(x W_gate)
// * (x W_up))), with silu as the silu rule makes it from Mul(x, Sigmoid(x)) or as ONNX writes it,
// becomes one pass (kernels/reference/dynvm_ops.cc has the definition; the oneDNN backend runs
// cpu::SiluMul).
//
// swiglu: Mul(dynvm::Silu(gate), up) (either operand order), gate and up f32 (any broadcast the
//         Mul does) -> dynvm::SwiGlu(gate, up).
//   Refused: the Silu read elsewhere (the driver keeps it), another dtype. A Silu that
//   linear_activation folded into its dynvm::Linear first is left there (its epilogue computes
//   it in cache: the Mul stays one pass either way).
#include <vector>

#include "compiler/rewrite/rules.h"

namespace dynvm::compiler::rewrite {
namespace {

using P = Pattern;

Value* Fuse(Emitter& e, const Match& m) {
  Value* gate = m["gate"];
  Value* up = m["up"];
  if (gate->dtype != DType::kF32 || up->dtype != DType::kF32) return nullptr;
  return e.Op("SwiGlu", {gate, up}, {}, "dynvm");
}

}  // namespace

std::vector<Rule> SwiGluRules() {
  std::vector<Rule> rules;
  rules.push_back(Rule{
      "swiglu", P::Op("Mul", {P::Op("dynvm::Silu", {P::Any("gate")}), P::Any("up")}).Commutative(),
      &Fuse});
  return rules;
}

}  // namespace dynvm::compiler::rewrite
