// com.microsoft GroupQueryAttention's and MultiHeadAttention's and ONNX Attention 23's attributes
// and the run-time geometry of one call, shared by the reference kernels (msft_attention.cc, the
// oracle) and the oneDNN backend's fast kernels (kernels/dnnl/msft_attention.cc): the checks and
// ORT's per-batch past and total lengths are one code, the arithmetic is each kernel's own.
// msft_attention.cc's header comment has the operator's definition.
#ifndef DYNVM_KERNELS_REFERENCE_MSFT_ATTENTION_H_
#define DYNVM_KERNELS_REFERENCE_MSFT_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/kernel.h"
#include "kernels/reference/common.h"

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
  // Per batch: keys, and past keys before the new ones (inline up to batch 8: a decode step's
  // check allocates nothing).
  absl::InlinedVector<int64_t, 8> total_b, past_b;
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
inline int64_t GqaPosition(const GqaGeometry& g, absl::Span<const int64_t> ids, int64_t b,
                           int64_t s) {
  if (!ids.empty()) return ids[b * g.seq + s];
  return (g.first_prompt ? 0 : g.total_b[b] - g.seq) + s;
}

// ONNX's Attention 23: the attributes (qk_matmul_output_mode 0 to 3) and the geometry of one
// call. Q, K and V 3-D [B, S, heads x head size] or 4-D [B, heads, S, head size]; past
// [B, kv heads, P, head size]; attn_mask broadcast to the scores [B, q heads, Sq, P + Skv].
struct OnnxAttnAttrs {
  int64_t q_heads = 0, kv_heads = 0, qk_mode = 0;
  float scale = 0.0f, softcap = 0.0f;
  bool causal = false;
};

absl::StatusOr<OnnxAttnAttrs> GetOnnxAttnAttrs(const KernelSpec& spec);

struct OnnxAttnGeometry {
  int rank = 0;
  int64_t batch = 0, q_heads = 0, kv_heads = 0, sq = 0, skv = 0, head = 0, v_head = 0, past = 0,
          total = 0;
  Dims mask_strides;  // element strides of attn_mask over [B, q heads, Sq, total]; empty: none
};

// Validates the inputs (f32 Q, K, V and past; shapes; the mask's dtype and broadcast) and gives
// the geometry; InvalidArgument (Unimplemented for a dtype) naming what is wrong.
absl::StatusOr<OnnxAttnGeometry> CheckOnnxAttention(const OnnxAttnAttrs& a,
                                                    absl::Span<const Tensor* const> in);

// com.microsoft MultiHeadAttention: the attributes and the geometry of one call.
struct MhaAttrs {
  int64_t heads = 0;
  float scale = 0.0f, mask_filter = -10000.0f;
  bool causal = false;
};

// The attributes of MultiHeadAttention and of com.microsoft Attention (named `op` in errors).
absl::StatusOr<MhaAttrs> GetMhaAttrs(const KernelSpec& spec, absl::string_view op);

struct MhaGeometry {
  int64_t batch = 0, seq = 0, kv_seq = 0, past = 0, head = 0, v_head = 0;
  bool bnsh_kv = false;  // key and value [B, N, L, H] (cross attention with cached keys)
};

// Validates MultiHeadAttention's inputs and gives the geometry (the past counts only when a
// present output is wanted, as in ONNX Runtime's CPU kernel).
absl::StatusOr<MhaGeometry> CheckMultiHeadAttention(const MhaAttrs& a,
                                                    absl::Span<const Tensor* const> in,
                                                    bool wants_present);

// Validates com.microsoft Attention's inputs (qkv_hidden_sizes `sizes`, empty for three equal
// parts): the geometry, the input hidden size din and the Q/K and V hidden sizes dq, dv. The
// present output (wants_present) needs K and V of one head size: it holds both at one shape.
absl::Status CheckMsftAttention(const MhaAttrs& a, absl::Span<const int64_t> sizes,
                                absl::Span<const Tensor* const> in, bool wants_present,
                                MhaGeometry& g, int64_t& din, int64_t& dq, int64_t& dv);

// The key-padding mask and the causal limit as ONNX Runtime's PrepareMask makes them:
// [B, S, past + kv_seq] of 0 or mask_filter_value (added to the scores: a masked key keeps its
// tiny weight); empty when there is neither.
std::vector<float> PaddingMask(const MhaAttrs& a, const MhaGeometry& g, const Tensor* mask);
// The same written to `m`, PaddingMaskFloats(a, g, mask) floats (0 when there is neither), so
// that a kernel can keep it in its site's workspace (no allocation per call).
int64_t PaddingMaskFloats(const MhaAttrs& a, const MhaGeometry& g, const Tensor* mask);
void WritePaddingMask(const MhaAttrs& a, const MhaGeometry& g, const Tensor* mask, float* m);

}  // namespace dynvm::reference

#endif  // DYNVM_KERNELS_REFERENCE_MSFT_ATTENTION_H_
