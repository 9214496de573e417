// Checks on the scales and zero points of linear quantization (QuantizeLinear, DequantizeLinear,
// MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv), shared by the kernels (run time) and
// the compiler (compile time, when the values are constants): a scale must be finite and
// positive, a zero point must fit the quantized type, and a per-axis scale or zero point must
// hold one value per channel. Every error is InvalidArgument and names `what` (say
// "QLinearMatMul: b_scale") and the offending value and index.
#ifndef DYNVM_KERNELS_QUANT_PARAMS_H_
#define DYNVM_KERNELS_QUANT_PARAMS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/tensor.h"

namespace dynvm {

// Every element of `scale` (any floating-point dtype) is finite and greater than zero.
absl::Status CheckQuantScale(const Tensor& scale, absl::string_view what);

// Every element of `zp` (any integer dtype) lies in the range of `quant` (u8: 0..255, i8:
// -128..127, i32: its own range); `quant` must be an integer dtype.
absl::Status CheckZeroPoint(const Tensor& zp, DType quant, absl::string_view what);

// A scale or zero point of `numel` values applies to an axis of `channels`: 1 (per tensor) or
// `channels` (per axis).
absl::Status CheckQuantLength(int64_t numel, int64_t channels, absl::string_view what);

// The representable range of an integer dtype as doubles; {-inf, inf} for other dtypes.
std::pair<double, double> QuantRange(DType d);

}  // namespace dynvm

#endif  // DYNVM_KERNELS_QUANT_PARAMS_H_
