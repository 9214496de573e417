// Public API. Limits the verifier enforces on every executable it loads (isa/verifier.h; a
// host sets them through LoadOptions::limits). Apart from the verifier so that the VM's public
// headers do not reach the flatbuffers schema.
#ifndef DYNVM_ISA_VERIFY_LIMITS_H_
#define DYNVM_ISA_VERIFY_LIMITS_H_

#include <cstdint>

namespace dynvm::isa {

struct VerifyLimits {
  uint32_t max_registers = 1u << 16;  // per bank, per function
  int max_nesting = 256;              // if/loop depth
  int max_rank = 8;
};

}  // namespace dynvm::isa

#endif  // DYNVM_ISA_VERIFY_LIMITS_H_
