// dynvm::Attention (scaled dot-product attention, made by compiler/rewrite/attention.cc): the
// attributes, the run-time geometry shared by the reference kernel (attention.cc) and the
// oneDNN backend's fast path (kernels/dnnl/attention.cc), and the per-unit reference loop.
//
// With Q' = Transpose(Q, q_perm) [..., Lq, D], K' = Transpose(K, k_perm) [..., D, Lk] and
// V' = Transpose(V, v_perm) [..., Lk, Dv] (one rank r >= 2, equal leading dims, except that a
// leading dim of K' or V' may be 1 and is then read at every index of that dim of Q': grouped-query
// attention), S = scale * Q' K' masked by mask_mode:
//   0: no mask   1: S + mask   2: Where(mask, fill, S)   3: Where(mask, S, fill)
// (mask f32 for 1, bool for 2 and 3, broadcasting to S [..., Lq, Lk] without changing it),
// R = softmax(S over Lk) V' [..., Lq, Dv] and Y = Transpose(R, out_perm). The transposes are
// strides: nothing is copied. A mask that does not broadcast to S, or operands whose dims
// disagree, fail with InvalidArgument (the VM adds the node's name).
//
// The work is a loop over independent units (one per leading index: batch x heads), so it can
// be split across threads by unit ranges.
#ifndef DYNVM_KERNELS_REFERENCE_ATTENTION_H_
#define DYNVM_KERNELS_REFERENCE_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"
#include "kernels/reference/common.h"

namespace dynvm::reference {

struct AttentionAttrs {
  std::vector<int64_t> q_perm, k_perm, v_perm, out_perm;  // empty = identity
  float scale = 1.0f;
  int mask_mode = 0;
  float fill = 0.0f;
};

absl::StatusOr<AttentionAttrs> GetAttentionAttrs(const KernelSpec& spec);

struct AttentionGeometry {
  int rank = 0;
  int64_t units = 1, lq = 0, d = 0, lk = 0, dv = 0;
  Dims lead;                // the leading dims of S (rank - 2 of them)
  Dims qs, ks, vs, rs, ms;  // element strides of Q', K', V', R and the mask over their r axes
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* out = nullptr;
  const void* mask = nullptr;  // float (mode 1) or bool (2, 3)
};

// Validates the operands and prepares the output (contiguous). f32 Q, K, V only.
absl::StatusOr<AttentionGeometry> PrepareAttention(const AttentionAttrs& a, KernelContext& ctx,
                                                   absl::Span<const Tensor* const> in,
                                                   absl::Span<Tensor* const> out);

// The offset of unit `u` (a linear index over geometry.lead) in an operand of `strides`.
int64_t UnitOffset(const AttentionGeometry& g, const Dims& strides, int64_t u);

// S's masked value at (i, j) of unit `u`'s mask block `m` (mask strides from the geometry).
inline float MaskScore(const AttentionAttrs& a, const AttentionGeometry& g, const void* m,
                       int64_t i, int64_t j, float s) {
  const int64_t off = i * g.ms[g.rank - 2] + j * g.ms[g.rank - 1];
  switch (a.mask_mode) {
    case 1:
      return s + static_cast<const float*>(m)[off];
    case 2:
      return static_cast<const bool*>(m)[off] ? a.fill : s;
    case 3:
      return static_cast<const bool*>(m)[off] ? s : a.fill;
    default:
      return s;
  }
}

// Units [u0, u1) by plain strided loops; `row` holds lk floats.
void AttentionUnitsReference(const AttentionAttrs& a, const AttentionGeometry& g, int64_t u0,
                             int64_t u1, float* row);

}  // namespace dynvm::reference

#endif  // DYNVM_KERNELS_REFERENCE_ATTENTION_H_
