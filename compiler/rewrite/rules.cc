#include "compiler/rewrite/rules.h"

namespace dynvm::compiler::rewrite {

const std::vector<Rule>& AllRules() {
  static const std::vector<Rule>* rules = [] {
    auto* all = new std::vector<Rule>;
    for (auto* make : {&PowConstRules, &LayerNormRules, &ActivationRules, &ChainRules,
                       &AttentionRules, &QdqRules, &DynQuantRules, &RmsNormRules, &RotaryRules,
                       &SwiGluRules, &MatMulBiasRules, &MatMulTransposeRules}) {
      for (Rule& r : make()) all->push_back(std::move(r));
    }
    return all;
  }();
  return *rules;
}

}  // namespace dynvm::compiler::rewrite
