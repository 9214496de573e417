// Weight-only quantized weights (vm-compile --quantize-weights): checks, dequantization and the
// reference kernels of dynvm's QMatMul, QLSTM, QGRU and QRNN (qweights.cc).
#ifndef DYNVM_KERNELS_REFERENCE_QWEIGHTS_H_
#define DYNVM_KERNELS_REFERENCE_QWEIGHTS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/kernel.h"
#include "kernels/tensor.h"

namespace dynvm {
class KernelRegistry;
}

namespace dynvm::reference {

// OK when w is a contiguous `rank`-D i8 or bf16 tensor and scale is f32 of w's leading dims
// (one per output row; int8 only, null for bf16). Errors name `op`.
absl::Status CheckQuantizedWeight(const Tensor& w, const Tensor* scale, int rank,
                                  absl::string_view op);

// The f32 weights w stands for. REQUIRES: CheckQuantizedWeight passed.
absl::StatusOr<Tensor> DequantizeWeight(const Tensor& w, const Tensor* scale);

// The spec of the ONNX recurrent op (LSTM for QLSTM...) over f32 W and R.
KernelSpec F32RecurrentSpec(const KernelSpec& spec);

void RegisterQuantizedWeightKernels(KernelRegistry& r);

}  // namespace dynvm::reference

#endif  // DYNVM_KERNELS_REFERENCE_QWEIGHTS_H_
