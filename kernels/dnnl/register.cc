#include "kernels/dnnl/dnnl_kernels.h"

namespace dynvm {

void RegisterDnnlKernels(KernelRegistry& registry) {
  onednn::RegisterMatmulKernels(registry);
  onednn::RegisterRnnKernels(registry);
  onednn::RegisterEltwiseKernels(registry);
  onednn::RegisterNormalizationKernels(registry);
  onednn::RegisterReduceKernels(registry);
  onednn::RegisterActivationKernels(registry);
  onednn::RegisterAttentionKernels(registry);
  onednn::RegisterMsftAttentionKernels(registry);
  onednn::RegisterRotaryKernels(registry);
  onednn::RegisterLinearKernels(registry);
  onednn::RegisterConvKernels(registry);
  onednn::RegisterPoolKernels(registry);
  onednn::RegisterResizeKernels(registry);
  onednn::RegisterTransposeKernels(registry);
  onednn::RegisterPadKernels(registry);
  onednn::RegisterConcatKernels(registry);
  onednn::RegisterGridSampleKernels(registry);
  onednn::RegisterRoiAlignKernels(registry);
  onednn::RegisterQuantKernels(registry);
  onednn::RegisterQuantizedWeightKernels(registry);
  onednn::RegisterMatMulNBitsKernels(registry);
  onednn::RegisterQConvKernels(registry);
  onednn::RegisterQuantEltwiseKernels(registry);
}

}  // namespace dynvm
