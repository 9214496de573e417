// dynvm's own Winograd F(2x2, 3x3) convolution for channels-last (NHWC) f32 tensors: what a
// FusedConv runs where oneDNN has no Winograd for it (oneDNN 2.6 has one only with AVX-512, and
// not with every post-op). Implementations (isa.h): portable (plain loops, for tests) and AVX2 +
// FMA, which AVX-512 CPUs run too; winograd.cc has the tuning notes. Internal to the kernels
// library; kernels/dnnl/conv.cc decides when (docs/kernels.md; kernels/dnnl/choice.h).
//
// The output is cut into 2x2 tiles (partial tiles at the bottom and right edges), each read from
// a 4x4 input window with zeros outside the image (any pads). For a block of 24 to 120 tiles
// (its transformed input at most 1 MiB, winograd.cc): the input transform V = B^T d B (vectorized
// over channels, which NHWC keeps contiguous) into 16 matrices [tiles, C]; 16 products V_k U_k with
// the transformed weights U_k [C, M] (U = G g G^T, packed once into 16-column panels) by a 6x16
// micro-kernel; the output transform Y = A^T m A vectorized over output channels with bias,
// residual and the activation applied before the NHWC store.
//
// Rounding: the transforms scale values (|V| up to 4x the input, |U| up to 2.25x the weights,
// A^T sums three products), so results differ from a direct convolution by a few times its own
// rounding error (a few 1e-6 relative to the sum of |x * w| terms; winograd_test.cc).
#ifndef DYNVM_KERNELS_CPU_WINOGRAD_H_
#define DYNVM_KERNELS_CPU_WINOGRAD_H_

#include <cstdint>

namespace dynvm::cpu::winograd {

// A 3x3 stride-1 undilated convolution of an NHWC input [n, h, w, c] into an NHWC output
// [n, oh, ow, m]; the input's zero padding starts pad_top rows above and pad_left columns left
// of it (the pads after it are whatever makes oh and ow: oh = h + pad_top + pad_bottom - 2).
struct Shape {
  int64_t n = 0, c = 0, m = 0, h = 0, w = 0;
  int64_t pad_top = 0, pad_left = 0;
  int64_t oh = 0, ow = 0;
  int64_t threads = 1;  // blocks are cut small enough for this many threads to share them
};

enum class Act { kNone, kRelu, kLeakyRelu, kClip, kSigmoid, kHardSwish, kSiLU, kTanh };

// Applied in the output transform: y = act(conv + bias + sum).
struct PostOps {
  const float* bias = nullptr;  // [m], or null
  const float* sum = nullptr;   // NHWC like y (may be y itself), or null
  Act act = Act::kNone;
  float alpha = 0, beta = 0;  // LeakyRelu's slope; Clip's min (alpha) and max (beta)
};

// Output tiles over the batch, tiles per block, blocks.
int64_t Tiles(const Shape& s);
int64_t TilesPerBlock(const Shape& s);
int64_t Blocks(const Shape& s);

// Floats of the packed transformed weights.
int64_t PackedWeightsFloats(int64_t c, int64_t m);
// Transforms W [m, c, 3, 3] (element (o, i, ky, kx) at w[o * strides[0] + i * strides[1] +
// ky * strides[2] + kx * strides[3]]) into `packed` (PackedWeightsFloats floats).
void PackWeights(const float* w, const int64_t strides[4], int64_t c, int64_t m, float* packed);

// Floats of workspace one thread needs (64-byte aligned by the caller).
int64_t WorkspaceFloats(const Shape& s);

// Computes the output tiles of blocks [b0, b1) with `ws` (WorkspaceFloats, 64-byte aligned) of
// its own. Blocks write disjoint outputs: threads may run disjoint ranges at once.
// REQUIRES: x, y and sum dense NHWC.
void RunBlocks(const Shape& s, const float* x, const float* packed, const PostOps& post, float* y,
               int64_t b0, int64_t b1, float* ws);

}  // namespace dynvm::cpu::winograd

#endif  // DYNVM_KERNELS_CPU_WINOGRAD_H_
