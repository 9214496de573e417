// com.microsoft GroupQueryAttention's attributes and the run-time geometry of one call, shared by
// the reference kernel (msft_attention.cc, the oracle) and the oneDNN backend's fast kernel
// (kernels/dnnl/msft_attention.cc): the checks and ORT's per-batch past and total lengths are
// one code, the arithmetic is each kernel's own. msft_attention.cc's header comment has the
// operator's definition.
#ifndef DYNVM_KERNELS_REFERENCE_MSFT_ATTENTION_H_
#define DYNVM_KERNELS_REFERENCE_MSFT_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/kernel.h"

namespace dynvm::reference {

struct GqaAttrs {
  int64_t heads = 0, kv_heads = 0, local_window = -1;
  float scale = 0.0f, softcap = 0.0f;
  bool rotary = false, interleaved = false, smooth = false;
};

// The attributes of a GroupQueryAttention spec; InvalidArgument when the head counts do not
// divide.
absl::StatusOr<GqaAttrs> GetGqaAttrs(const KernelSpec& spec);

// The run-time geometry of one GroupQueryAttention call.
struct GqaGeometry {
  int64_t batch = 0, seq = 0, head = 0, past = 0, present = 0, total = 0, rot = 0;
  bool packed = false, first_prompt = false, has_past = false;
  std::vector<int64_t> total_b, past_b;  // per batch: keys, and past keys before the new ones
};

// Validates the inputs (f32; shapes, seqlens_k against the past and total_sequence_length, the
// optional inputs) and gives the geometry; InvalidArgument (Unimplemented for a dtype) naming
// what is wrong.
absl::StatusOr<GqaGeometry> CheckGroupQueryAttention(const GqaAttrs& a,
                                                     absl::Span<const Tensor* const> in);

// The keys [first, end) query row i of batch b sees: causal (keys up to its own position) and
// limited to the local window.
inline void GqaKeyRange(const GqaAttrs& a, const GqaGeometry& g, int64_t b, int64_t i,
                        int64_t* first, int64_t* end) {
  const int64_t causal = g.past_b[b] + i + 1 < g.total_b[b] ? g.past_b[b] + i + 1 : g.total_b[b];
  *end = causal;
  *first = a.local_window >= 0 && causal > a.local_window ? causal - a.local_window : 0;
}

// The rotary position of token s of batch b: position_ids when given (`ids`, [B, S]), else s on
// the first prompt and total_b - S + s after it (ORT's positions).
inline int64_t GqaPosition(const GqaGeometry& g, const std::vector<int64_t>& ids, int64_t b,
                           int64_t s) {
  if (!ids.empty()) return ids[b * g.seq + s];
  return (g.first_prompt ? 0 : g.total_b[b] - g.seq) + s;
}

}  // namespace dynvm::reference

#endif  // DYNVM_KERNELS_REFERENCE_MSFT_ATTENTION_H_
