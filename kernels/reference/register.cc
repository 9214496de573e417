#include "kernels/reference/qweights.h"
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
  reference::RegisterQuantKernels(registry);
  reference::RegisterQuantEltwiseKernels(registry);
  reference::RegisterStringKernels(registry);
  reference::RegisterDynvmKernels(registry);
  reference::RegisterMsftKernels(registry);
  reference::RegisterMsftAttentionKernels(registry);
  reference::RegisterAttentionKernel(registry);
  reference::RegisterLinearKernel(registry);
  reference::RegisterFusedConvKernels(registry);
  reference::RegisterVisionKernels(registry);
  reference::RegisterRandomKernels(registry);
  reference::RegisterSignalKernels(registry);
  reference::RegisterQuantizedWeightKernels(registry);
}

}  // namespace dynvm
