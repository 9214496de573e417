#include "kernels/dnnl/choice.h"

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/qgemv.h"
#include "kernels/dnnl/quant_common.h"

namespace dynvm::onednn::choice {
namespace {

// An A/B switch: false when the variable holds "0".
bool EnvOn(const char* name) {
  const char* env = std::getenv(name);
  return env == nullptr || std::strcmp(env, "0") != 0;
}

}  // namespace

bool UsePackedGemm(int64_t m, int64_t n, int64_t k, int threads) {
  static const bool on = EnvOn("DYNVM_DNNL_PACKED_GEMM");
  if (!on || m < 8) return false;
  return cpu::ActiveIsa() == cpu::Isa::kAvx2;
}

bool UseQGemv(int64_t m, int64_t n, int64_t k) { return m <= cpu::kQuantSmallRows; }

bool UseIGemm(int64_t m, int64_t n, int64_t k) { return !HasInt8Vnni(); }

bool UseOwnWinograd() {
  static const bool on = EnvOn("DYNVM_DNNL_OWN_WINOGRAD");
  return on && cpu::ActiveIsa() >= cpu::Isa::kAvx2;
}

}  // namespace dynvm::onednn::choice
