// Conv fusion (compile time): each ONNX Conv of f32 data whose weights (and bias) are constants
// becomes one dynvm::FusedConv node (its kernel: kernels/dnnl/conv.cc, reference:
// kernels/reference/fused_conv.cc) that absorbs, where the graph allows:
//   - a zero constant Pad before it on spatial dims only (added to the Conv's pads);
//   - a BatchNormalization after it in inference mode with constant parameters (folded into the
//     weights and bias: w' = w * s, b' = (b - mean) * s + B, s = scale / sqrt(var + eps));
//   - Mul and Add by a constant after it (in any order with BatchNormalizations) holding one
//     value or one per output channel (dims 1 but the channel axis, all finite), the output
//     keeping the conv's shape: folded into the weights and bias (w' = w * k, b' = b * k;
//     b' = b + k);
//   - a residual Add after that, whose other operand has exactly the Conv output's shape;
//   - an activation after that: Relu, LeakyRelu, Clip (constant bounds), Sigmoid, HardSwish,
//     Tanh, SiLU written as x * Sigmoid(x), Max/Min with one constant value (Clip with one
//     bound), Mul by one constant value then optionally Add of one, or that Add alone
//     ("Affine": alpha * x + beta), or HardSigmoid (Affine(alpha, beta), then Clip(0, 1): both
//     activation slots);
//   - a second activation after the first (same kinds but HardSigmoid): "activation2",
//     "activation2_alpha", "activation2_beta" (tf2onnx's LeakyRelu + Max, PP-LCNet's HardSwish
//     + scale and shift). Such a FusedConv takes no depthwise stage.
// Each absorbed node's output must have no other use. The FusedConv is marked
// constant_weights = 1, so its kernel packs the weights once for every VM. Nodes left dead are
// removed by dead-code elimination. Then a value passed only from one FusedConv or pool to
// other FusedConvs (as X or the residual) or pools is kept channels-last ("channels_last_out" on
// the producer, "channels_last_in" / "channels_last_sum" on the readers), so no reorder runs
// between them; it keeps its logical dims and byte size. Likewise a u8/s8 value passed only
// from one QLinearConv to QLinearConvs (as x) is kept channels-last, NHWC, the layout oneDNN's
// int8 convolutions take (the same two flags; kernels/channels_last.h, every QLinearConv kernel
// honours them).
//
// A ConvTranspose with constant f32 weights (and bias) folds the BatchNormalizations and the
// Mul/Add by constants after it the same way (its weights are [C, M / group, K...]) and stays a
// ConvTranspose (no post-ops). Its output dims are not inferred (fresh symbols); a constant of
// one value or one per channel keeps any [N, M, ...] shape, so those fold there too.
//
// Before the layouts, a FusedConv that is 1x1, stride 1, unpadded, undilated, ungrouped, with
// no residual, whose output is read only by a FusedConv that is a 3x3 depthwise conv (group ==
// its input channels == its output channels, stride 1 or 2 on both axes, pad 1 all round,
// undilated, no residual) takes that second conv over (an expansion + depthwise pair of an
// inverted residual block): the one FusedConv carries the depthwise weights and bias as inputs 4
// and 5 (the bias materialized, zeros when absent; input 3, the residual, absent), its stride as
// "dw_stride" and its activation as "dw_activation" / "dw_activation_alpha" / "_beta" (same
// names and values as "activation"). Its output is the depthwise conv's. The dnnl kernel runs
// the pair as one oneDNN convolution with a depthwise post-op where oneDNN has an optimized one,
// so the expanded tensor never goes to memory. Before that, a FusedConv (ungrouped, no residual,
// constant weights and bias) whose output is read only by a Split along the channel axis becomes
// one FusedConv per part (its rows of the weights and bias), a part read only by a Sigmoid taking
// it as an activation: a GLU runs as two convs and a Mul. A Mul of a FusedConv's or pool's
// output x [N, C, spatial...] by a gate [N or 1, C, 1...] giving x's shape (a squeeze-excitation
// scale) becomes dynvm::ChannelMul, which passes the channels-last layout like a pool, and a
// Concat along the channels of a value and a constant of zeros (BlazeFace's channel-padded
// residual) becomes dynvm::ChannelPad, which does too.
// Self-contained, to move onto
// compiler/rewrite/ as rules.
#ifndef DYNVM_COMPILER_CONV_FUSION_H_
#define DYNVM_COMPILER_CONV_FUSION_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir.h"
#include "compiler/op_registry.h"

namespace dynvm::compiler {

struct ConvFusionCounts {
  int convs = 0;         // Conv nodes rewritten into FusedConv
  int pads = 0;          // Pads folded
  int batch_norms = 0;   // BatchNormalizations folded
  int sums = 0;          // residual Adds fused
  int scales = 0;        // Mul/Add by constants folded into the weights and bias
  int activations = 0;   // activations fused (the second of a pair counted too)
  int transposes = 0;    // ConvTransposes that took BatchNormalizations or constant Mul/Adds
  int depthwise = 0;     // 1x1 FusedConvs that took the 3x3 depthwise FusedConv after them
  int splits = 0;        // FusedConvs split into one per channel part of the Split reading them
  int channel_muls = 0;  // Muls by a per-channel gate made dynvm::ChannelMul (layout-aware)
  int channel_pads = 0;  // Concats with channels of zeros made dynvm::ChannelPad (layout-aware)
  int blocked = 0;       // values kept channels-last between FusedConvs
  int quantized_blocked = 0;  // u8/s8 values kept channels-last between QLinearConvs
};

// Rewrites every function of `module` in place. Call after shape inference; run shape
// inference and dead-code elimination again after it.
absl::StatusOr<ConvFusionCounts> FuseConvolutions(Module& module);

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_CONV_FUSION_H_
