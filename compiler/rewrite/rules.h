// The rules of the pattern-rewrite framework, one file each (docs/compiler.md, "Pattern
// rewrites", lists what each matches and where it refuses).
#ifndef DYNVM_COMPILER_REWRITE_RULES_H_
#define DYNVM_COMPILER_REWRITE_RULES_H_

#include <vector>

#include "compiler/rewrite/rewrite.h"

namespace dynvm::compiler::rewrite {

std::vector<Rule> PowConstRules();         // pow_const.cc
std::vector<Rule> LayerNormRules();        // layer_norm.cc
std::vector<Rule> ActivationRules();       // activations.cc
std::vector<Rule> ChainRules();            // chains.cc
std::vector<Rule> AttentionRules();        // attention.cc
std::vector<Rule> QdqRules();              // qdq.cc
std::vector<Rule> DynQuantRules();         // dynquant.cc
std::vector<Rule> RmsNormRules();          // rms_norm.cc
std::vector<Rule> RotaryRules();           // rotary.cc
std::vector<Rule> SwiGluRules();           // swiglu.cc
std::vector<Rule> MatMulBiasRules();       // matmul_bias.cc
std::vector<Rule> MatMulTransposeRules();  // matmul_transpose.cc (late phase)

}  // namespace dynvm::compiler::rewrite

#endif  // DYNVM_COMPILER_REWRITE_RULES_H_
