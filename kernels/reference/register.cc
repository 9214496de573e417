#include "kernels/reference/reference.h"

namespace dynvm {

void RegisterReferenceKernels(KernelRegistry& registry) {
  reference::RegisterElementwiseKernels(registry);
  reference::RegisterMatmulKernels(registry);
  reference::RegisterReduceKernels(registry);
  reference::RegisterShapeKernels(registry);
  reference::RegisterRnnKernels(registry);
  reference::RegisterLossKernels(registry);
  reference::RegisterPoolKernels(registry);
  reference::RegisterNnKernels(registry);
  reference::RegisterResizeKernels(registry);
  reference::RegisterMiscKernels(registry);
  reference::RegisterStringKernels(registry);
  reference::RegisterDynvmKernels(registry);
  reference::RegisterFusedConvKernels(registry);
}

}  // namespace dynvm
