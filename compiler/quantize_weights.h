// Weight-only quantization (vm-compile --quantize-weights int8|bf16; docs/kernels.md,
// "Weight-only quantization"). Rewrites MatMul, Gemm, LSTM, GRU and RNN nodes whose weight is an
// f32 constant of at least min_bytes into dynvm's QMatMul / QLSTM / QGRU / QRNN over int8
// weights with one f32 scale per output channel (symmetric, scale = max|w| / 127 per row), or
// over bf16 weights (round to nearest even). The quantized weights are ordinary constants: they
// live in the shared, mapped constant segment like f32 weights. Activations stay f32.
//
// int4 (dtype kU8, vm-compile --quantize-weights int4 [--quantize-block N]
// [--quantize-zero-points]): MatMul and Gemm weights become com.microsoft MatMulNBits nodes (the
// layout ONNX Runtime runs; kernels/cpu/q4gemv.h) with 4-bit blocks of `block` values along K, an
// f32 scale per block and, with zero_points, a 4-bit zero point per block (else 8: symmetric, the
// largest magnitude of a block at -8). LSTM, GRU and RNN weights stay f32 under int4.
//
// Layouts: a MatMul/Gemm weight becomes [N, K] (one row per output); an RNN's W and R keep their
// [dirs, gates*H, cols] layout with scales [dirs, gates*H].
//
// A weight stays f32 (and the report says why) when it holds NaN or infinity, or, for int8,
// when its nonzero per-channel scales span more than 2^16 (largest / smallest): one scale for
// channels that different would lose the small channels.
#ifndef DYNVM_COMPILER_QUANTIZE_WEIGHTS_H_
#define DYNVM_COMPILER_QUANTIZE_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir.h"
#include "compiler/op_registry.h"

namespace dynvm::compiler {

// Smallest weight (bytes of f32) quantized by default: below it the weight sits in L1/L2 and
// reading it costs little next to the rest of the step.
inline constexpr int64_t kDefaultQuantizeMinBytes = 16384;

struct QuantizeWeightsOptions {
  // kI8, kBF16, or kU8: int4 (4-bit values, two per byte, MatMul/Gemm only; see above).
  DType dtype = DType::kI8;
  int64_t min_bytes = kDefaultQuantizeMinBytes;
  int64_t block = 32;          // int4: values per block (a power of two, 16 to 256)
  bool zero_points = false;    // int4: a zero point per block (else symmetric)
  int64_t accuracy_level = 4;  // int4: MatMulNBits' accuracy_level (4: int8 activations; 0: f32)
};

struct QuantizedWeightReport {
  std::string weight;  // the constant's name, or "<node label> input i"
  std::string node;    // the node's label
  std::string dtype;   // "i8", "bf16", "int4", or "f32" when kept
  int64_t bytes_before = 0;
  int64_t bytes_after = 0;  // weights plus scales
  float max_scale = 0;      // int8: the largest per-channel scale; int4: per-block
  std::string kept_reason;  // why it stayed f32 (empty when quantized)
  std::string Text() const;
};

// Rewrites the module's nodes (every region). Shapes must be inferred again afterwards.
absl::StatusOr<std::vector<QuantizedWeightReport>> QuantizeWeights(
    Module& module, const QuantizeWeightsOptions& options);

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_QUANTIZE_WEIGHTS_H_
