#include "kernels/dnnl/choice.h"

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/qgemv.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/quant_common.h"

namespace dynvm::onednn::choice {
namespace {

// An A/B switch: false when the variable holds "0".
bool EnvOn(const char* name) {
  const char* env = std::getenv(name);
  return env == nullptr || std::strcmp(env, "0") != 0;
}

std::optional<bool>& Forced(Rule rule) {
  static std::optional<bool> forced[5];
  return forced[static_cast<int>(rule)];
}

}  // namespace

void ForceForTesting(Rule rule, std::optional<bool> use) { Forced(rule) = use; }

bool UseGemv(int64_t n, int64_t k, int threads) {
  if (const std::optional<bool>& f = Forced(Rule::kGemv)) return *f;
  // At one thread oneDNN's GEMV from kMinParallelWork multiply-adds; the pool's split otherwise.
  return threads > 1 || n * k < kMinParallelWork;
}

bool UsePackedGemm(int64_t m, int64_t n, int64_t k) {
  static const bool on = EnvOn("DYNVM_DNNL_PACKED_GEMM");
  if (const std::optional<bool>& f = Forced(Rule::kPackedGemm)) {
    return *f && cpu::ActiveIsa() >= cpu::Isa::kAvx2;
  }
  if (!on || m < 8) return false;
  return cpu::ActiveIsa() == cpu::Isa::kAvx2;
}

bool UseOwnWinograd(bool onednn_has_winograd) {
  static const bool on = EnvOn("DYNVM_DNNL_OWN_WINOGRAD");
  if (cpu::ActiveIsa() < cpu::Isa::kAvx2) return false;
  if (const std::optional<bool>& f = Forced(Rule::kOwnWinograd)) return *f;
  return on && !onednn_has_winograd;
}

bool UseQGemv(int64_t m, int64_t n, int64_t k) {
  if (const std::optional<bool>& f = Forced(Rule::kQGemv)) return *f;
  return m <= cpu::kQuantSmallRows;
}

bool UseIGemm(int64_t m, int64_t n, int64_t k) {
  if (const std::optional<bool>& f = Forced(Rule::kIGemm)) return *f || !HasInt8Vnni();
  return !HasInt8Vnni();
}

}  // namespace dynvm::onednn::choice
