#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {

void RegisterRnnKernels(KernelRegistry& r) {}

}  // namespace dynvm::reference
