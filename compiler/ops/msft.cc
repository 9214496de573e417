// ONNX Runtime's contrib operators (domain "com.microsoft", opset 1, and the one ORT defines in
// the default domain): the LLM/transformer exports made for ORT use them (GenAI model builder,
// Optimum). Semantics are ORT's (its contrib-operator documentation; ORT 1.30 is the oracle of
// tests/conformance/msft). Reference kernels: kernels/reference/msft.cc.
//
//   FastGelu(X, bias?)       GeluTanh(X + bias); bias has X's last dim
//   BiasGelu(A, B)           Gelu(A + B), erf form; B has A's last dim
//   Gelu(X)                  erf form; lowered to dynvm::Gelu
//   QuickGelu(X)             X * sigmoid(alpha X), alpha 1.702 by default
//   SimplifiedLayerNormalization(X, scale) -> Y, inv_std_var?   (default domain, as ORT has it)
//                            RMS normalization over [axis, rank)
//   SkipLayerNormalization(X, skip, gamma, beta?, bias?) -> Y, mean?, inv_std_var?, sum?
//   SkipSimplifiedLayerNormalization(X, skip, gamma, bias?) -> Y, mean?, inv_std_var?, sum?
//                            the normalization of sum = X + skip + bias over the last axis; the
//                            mean and inv_std_var outputs are refused (ORT's CPU kernels leave
//                            them unwritten)
//   FusedMatMul(A, B)        alpha * MatMul(transA ? A^T : A, transB ? B^T : B) (last two
//                            axes); transBatchA/transBatchB other than 0 are refused
//   MatMulNBits(A, B, scales, zero_points?, g_idx?, bias?)  A [..., K] f32 times the block-
//                            quantized weight [N, K] transposed, plus bias [N]; bits 4 or 8
//   RotaryEmbedding(X, position_ids, cos_cache, sin_cache)  RoPE of X [B, S, hidden] or
//                            [B, N, S, head_size]; interleaved, num_heads, rotary_embedding_dim
//   MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp?, b_zp?, bias?)  (A - a_zp)(B - b_zp)
//                            a_scale b_scale + bias, A and B u8/i8, B 2-D; per-column b_scale
//                            and b_zp
//   DynamicQuantizeMatMul(A, B, b_scale, b_zp?, bias?)  the same with A f32 quantized to u8
//                            per tensor first (DynamicQuantizeLinear)
//   QLinearAdd(A, A_scale, A_zero_point?, B, B_scale, B_zero_point?, C_scale, C_zero_point?)
//                            A + B of u8 or i8 tensors (numpy broadcast), per-tensor scales and
//                            zero points, in MLAS's f32 arithmetic (kernels/reference/quant.cc)
//   GroupQueryAttention(query, key?, value?, past_key?, past_value?, seqlens_k,
//                            total_sequence_length, cos_cache?, sin_cache?, position_ids?,
//                            attention_bias?, head_sink?) -> output, present_key?,
//                            present_value?: grouped-query causal attention with a KV cache
//                            (kernels/reference/msft_attention.cc has the semantics)
//   MultiHeadAttention(query, key, value, bias?, key_padding_mask?, attention_bias?, past_key?,
//                            past_value?) -> output, present_key?, present_value?
//   Attention(input, weights, bias, mask_index?, past?, attention_bias?) -> output, present?:
//                            the same with Q, K, V projected from input (packed weights)
//   EmbedLayerNormalization(input_ids, segment_ids?, word_embedding, position_embedding,
//                            segment_embedding?, gamma, beta, mask?, position_ids?) -> output,
//                            mask_index?, embedding_sum?: LayerNorm of the summed embeddings
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/ops/names.h"
#include "compiler/ops/op_def.h"
#include "compiler/ops/shape_util.h"

namespace dynvm::compiler {
namespace {

using Shape = std::vector<Dim>;

// FastGelu, BiasGelu, QuickGelu: one output of X's shape and dtype.
absl::Status ActivationShape(InferContext& c) {
  if (c.num_outputs() != 1 || !c.has_input(0)) return c.Error("takes X and has one output");
  const Shape* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
  } else {
    c.SetOutput(0, c.input_dtype(0), *x);
  }
  return absl::OkStatus();
}

// SimplifiedLayerNormalization: Y as X; inv_std_var with the normalized axes 1 (f32).
absl::Status SimplifiedLayerNormShape(InferContext& c) {
  if (c.num_outputs() < 1 || c.num_outputs() > 2) return c.Error("has one or two outputs");
  const Shape* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    c.SetOutputUnknown(1, DType::kF32);
    return absl::OkStatus();
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, c.GetInt("axis", -1));
  DYNVM_ASSIGN_OR_RETURN(int ax, shapes::Axis(c, axis, static_cast<int>(x->size())));
  c.SetOutput(0, c.input_dtype(0), *x);
  Shape stat = *x;
  for (size_t i = ax; i < stat.size(); ++i) stat[i] = c.sym().Const(1);
  c.SetOutput(1, DType::kF32, std::move(stat));
  return absl::OkStatus();
}

// SkipLayerNormalization, SkipSimplifiedLayerNormalization: Y and input_skip_bias_sum as X.
absl::Status SkipLayerNormShape(InferContext& c) {
  if (c.num_outputs() < 1 || c.num_outputs() > 4) return c.Error("has one to four outputs");
  if (c.has_output(1) || c.has_output(2)) {
    return absl::UnimplementedError(
        absl::StrCat(c.node().op,
                     " (com.microsoft): the mean and inv_std_var outputs are not supported "
                     "(only output and input_skip_bias_sum)"));
  }
  const Shape* x = c.input_shape(0);
  for (size_t i : {size_t{0}, size_t{3}}) {
    if (x == nullptr) {
      c.SetOutputUnknown(i, c.input_dtype(0));
    } else {
      c.SetOutput(i, c.input_dtype(0), *x);
    }
  }
  return absl::OkStatus();
}

// FusedMatMul: MatMul after transposing the last two axes of A and/or B (operands of rank 2 or
// more when transposed).
absl::Status FusedMatMulShape(InferContext& c) {
  if (c.num_inputs() != 2 || c.num_outputs() != 1) return c.Error("takes (A, B), one output");
  DYNVM_ASSIGN_OR_RETURN(int64_t tba, c.GetInt("transBatchA", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t tbb, c.GetInt("transBatchB", 0));
  if (tba != 0 || tbb != 0) {
    return absl::UnimplementedError(
        "FusedMatMul (com.microsoft): transBatchA and transBatchB are not supported");
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t ta, c.GetInt("transA", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t tb, c.GetInt("transB", 0));
  const Shape* a = c.input_shape(0);
  const Shape* b = c.input_shape(1);
  if (a == nullptr || b == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  if (a->size() < 2 || b->size() < 2) return c.Error("FusedMatMul: A and B must have rank >= 2");
  Shape sa = *a, sb = *b;
  if (ta != 0) std::swap(sa[sa.size() - 1], sa[sa.size() - 2]);
  if (tb != 0) std::swap(sb[sb.size() - 1], sb[sb.size() - 2]);
  Shape batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
  absl::StatusOr<Shape> batch = BroadcastShapes(c.sym(), batch_a, batch_b);
  if (!batch.ok()) return c.Error(batch.status().message());
  auto ka = SymbolicContext::AsConst(sa.back()), kb = SymbolicContext::AsConst(sb[sb.size() - 2]);
  if (ka && kb && *ka != *kb) return c.Error("FusedMatMul: inner dims differ");
  Shape out = std::move(*batch);
  out.push_back(sa[sa.size() - 2]);
  out.push_back(sb.back());
  c.SetOutput(0, c.input_dtype(0), std::move(out));
  return absl::OkStatus();
}

// MatMulNBits: A [..., K] -> [..., N].
absl::Status MatMulNBitsShape(InferContext& c) {
  if (c.num_outputs() != 1) return c.Error("has one output");
  DYNVM_ASSIGN_OR_RETURN(int64_t k, c.GetInt("K", -1));
  DYNVM_ASSIGN_OR_RETURN(int64_t n, c.GetInt("N", -1));
  DYNVM_ASSIGN_OR_RETURN(int64_t bits, c.GetInt("bits", 4));
  DYNVM_ASSIGN_OR_RETURN(int64_t block, c.GetInt("block_size", -1));
  if (k <= 0 || n <= 0) return c.Error("MatMulNBits: attributes K and N must be positive");
  if (bits != 4 && bits != 8) {
    return absl::UnimplementedError(
        absl::StrCat("MatMulNBits (com.microsoft): bits ", bits, " is not supported (4 or 8)"));
  }
  if (block < 16 || (block & (block - 1)) != 0) {
    return c.Error("MatMulNBits: block_size must be a power of 2 and at least 16");
  }
  if (c.has_input(4)) {
    return absl::UnimplementedError("MatMulNBits (com.microsoft): g_idx is not supported");
  }
  const Shape* a = c.input_shape(0);
  if (a == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  if (a->empty()) return c.Error("MatMulNBits: A must have rank >= 1");
  auto ka = SymbolicContext::AsConst(a->back());
  if (ka && *ka != k) return c.Error(absl::StrCat("MatMulNBits: A's last dim is not K = ", k));
  Shape out = *a;
  out.back() = c.sym().Const(n);
  c.SetOutput(0, c.input_dtype(0), std::move(out));
  return absl::OkStatus();
}

// RotaryEmbedding: X's shape; the attributes ORT's CPU kernel does not implement are refused.
absl::Status RotaryEmbeddingShape(InferContext& c) {
  if (c.num_inputs() != 4 || c.num_outputs() != 1) {
    return c.Error("RotaryEmbedding takes (input, position_ids, cos_cache, sin_cache)");
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t packed, c.GetInt("is_packed_batching", 0));
  DYNVM_ASSIGN_OR_RETURN(float scale, c.GetFloat("scale", 1.0f));
  if (packed != 0 || scale != 1.0f) {
    return absl::UnimplementedError(
        "RotaryEmbedding (com.microsoft): is_packed_batching and scale other than 1 are not "
        "supported");
  }
  return ActivationShape(c);
}

// MatMulIntegerToFloat, DynamicQuantizeMatMul: A [..., K] times B [K, N], f32.
absl::Status QuantMatMulShape(InferContext& c) {
  if (c.num_outputs() != 1) return c.Error("has one output");
  const Shape* a = c.input_shape(0);
  const Shape* b = c.input_shape(1);
  if (b != nullptr && b->size() != 2) {
    return absl::UnimplementedError(
        absl::StrCat(c.node().op, " (com.microsoft): only a 2-D B is supported"));
  }
  if (a == nullptr || b == nullptr) {
    c.SetOutputUnknown(0, DType::kF32);
    return absl::OkStatus();
  }
  if (a->empty()) return c.Error("A must have rank >= 1");
  Shape out = *a;
  out.back() = (*b)[1];
  c.SetOutput(0, DType::kF32, std::move(out));
  return absl::OkStatus();
}

// GroupQueryAttention: output [B, S, N H]; present_key/value [B, N_kv, max(total, P), H] (total
// the value of total_sequence_length: a run-time size unless it is known here).
absl::Status GroupQueryAttentionShape(InferContext& c) {
  if (c.num_outputs() < 1 || c.num_outputs() > 4) return c.Error("has one to four outputs");
  if (c.has_output(3)) {
    return absl::UnimplementedError(
        "GroupQueryAttention (com.microsoft): the output_qk output is not supported");
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t n, c.GetInt("num_heads", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t nkv, c.GetInt("kv_num_heads", 0));
  if (n <= 0 || nkv <= 0 || n % nkv != 0) {
    return c.Error(absl::StrCat("num_heads (", n, ") must be a positive multiple of kv_num_heads (",
                                nkv, ")"));
  }
  const DType dt = c.input_dtype(0);
  if (dt != DType::kF32 && dt != DType::kF16) {
    return absl::UnimplementedError(
        absl::StrCat("GroupQueryAttention (com.microsoft): query of dtype ", DTypeName(dt),
                     " is not supported (f32, f16)"));
  }
  const Shape* q = c.input_shape(0);
  if (q == nullptr) {
    for (size_t i = 0; i < 3; ++i) c.SetOutputUnknown(i, dt);
    return absl::OkStatus();
  }
  if (q->size() != 3) return c.Error("query must be 3-D [batch, sequence, hidden]");
  const bool packed = !c.has_input(1);
  const int64_t parts = packed ? n + 2 * nkv : n;
  auto hidden = SymbolicContext::AsConst((*q)[2]);
  if (hidden && (*hidden <= 0 || *hidden % parts != 0)) {
    return c.Error(absl::StrCat(
        "query's hidden size ", *hidden, " is not a positive multiple of ",
        packed ? "num_heads + 2 kv_num_heads (packed QKV) = " : "num_heads = ", parts));
  }
  const Dim head = c.sym().FloorDiv((*q)[2], c.sym().Const(parts));
  c.SetOutput(0, dt, {(*q)[0], (*q)[1], packed ? c.sym().Mul(head, c.sym().Const(n)) : (*q)[2]});
  const Shape* past = c.input_shape(3);
  if (past != nullptr && past->size() != 4) {
    return c.Error("past_key must be 4-D [batch, kv_num_heads, past, head_size]");
  }
  const std::vector<Dim>* total = c.content(6);
  if (total == nullptr || total->size() != 1) {
    c.SetOutputDynamic(1, dt, 4);
    c.SetOutputDynamic(2, dt, 4);
    return absl::OkStatus();
  }
  const Dim len = past != nullptr ? c.sym().Max((*total)[0], (*past)[2]) : (*total)[0];
  for (size_t i : {size_t{1}, size_t{2}}) {
    c.SetOutput(i, dt, {(*q)[0], c.sym().Const(nkv), len, head});
  }
  return absl::OkStatus();
}

// MultiHeadAttention: output [B, S, Dv]; present_key/value [B, N, P + L, H | Hv] (key [B, L, D]
// or [B, N, L, H]).
absl::Status MultiHeadAttentionShape(InferContext& c) {
  if (c.num_outputs() < 1 || c.num_outputs() > 4) return c.Error("has one to four outputs");
  if (c.has_output(3)) {
    return absl::UnimplementedError(
        "MultiHeadAttention (com.microsoft): the qk output is not supported");
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t n, c.GetInt("num_heads", 0));
  if (n <= 0) return c.Error("num_heads must be positive");
  const DType dt = c.input_dtype(0);
  if (dt != DType::kF32) {
    return absl::UnimplementedError(
        absl::StrCat("MultiHeadAttention (com.microsoft): query of dtype ", DTypeName(dt),
                     " is not supported (f32 only)"));
  }
  if (!c.has_input(1) || !c.has_input(2)) {
    return absl::UnimplementedError(
        "MultiHeadAttention (com.microsoft): key and value are required (packed QKV is not "
        "supported)");
  }
  const Shape* q = c.input_shape(0);
  const Shape* k = c.input_shape(1);
  const Shape* v = c.input_shape(2);
  if (q != nullptr && q->size() == 5) {
    return absl::UnimplementedError(
        "MultiHeadAttention (com.microsoft): packed QKV (a 5-D query) is not supported");
  }
  if (k != nullptr && k->size() == 5) {
    return absl::UnimplementedError(
        "MultiHeadAttention (com.microsoft): packed KV (a 5-D key) is not supported");
  }
  if (q == nullptr || k == nullptr || v == nullptr) {
    for (size_t i = 0; i < 3; ++i) c.SetOutputUnknown(i, dt);
    return absl::OkStatus();
  }
  if (q->size() != 3) return c.Error("query must be 3-D [batch, sequence, hidden]");
  auto hidden = SymbolicContext::AsConst((*q)[2]);
  if (hidden && (*hidden <= 0 || *hidden % n != 0)) {
    return c.Error(absl::StrCat("query's hidden size ", *hidden,
                                " is not a positive multiple of num_heads (", n, ")"));
  }
  if ((k->size() != 3 && k->size() != 4) || v->size() != k->size()) {
    return c.Error(
        "key and value must both be 3-D [batch, kv_sequence, hidden] or 4-D "
        "[batch, num_heads, kv_sequence, head_size]");
  }
  const bool bnsh = k->size() == 4;
  const Dim nd = c.sym().Const(n);
  const Dim head = c.sym().FloorDiv((*q)[2], nd);
  const Dim v_head = bnsh ? (*v)[3] : c.sym().FloorDiv((*v)[2], nd);
  c.SetOutput(0, dt, {(*q)[0], (*q)[1], bnsh ? c.sym().Mul(v_head, nd) : (*v)[2]});
  const Shape* past = c.input_shape(6);
  if (past != nullptr && past->size() != 4) {
    return c.Error("past_key must be 4-D [batch, num_heads, past, head_size]");
  }
  Dim len = bnsh ? (*k)[2] : (*k)[1];
  if (past != nullptr) len = c.sym().Add((*past)[2], len);
  c.SetOutput(1, dt, {(*q)[0], nd, len, head});
  c.SetOutput(2, dt, {(*q)[0], nd, len, v_head});
  return absl::OkStatus();
}

// Attention (com.microsoft): output [B, S, Dv]; present [2, B, N, P + S, H] (Q, K and V from
// input [B, S, D_in] times weights [D_in, D + D + Dv]).
absl::Status MsftAttentionShape(InferContext& c) {
  if (c.num_outputs() < 1 || c.num_outputs() > 2) {
    return absl::UnimplementedError(
        "Attention (com.microsoft): only the output and present outputs are supported");
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t n, c.GetInt("num_heads", 0));
  if (n <= 0) return c.Error("num_heads must be positive");
  for (const char* attr : {"do_rotary", "past_present_share_buffer"}) {
    DYNVM_ASSIGN_OR_RETURN(int64_t v, c.GetInt(attr, 0));
    if (v != 0) {
      return absl::UnimplementedError(
          absl::StrCat("Attention (com.microsoft): ", attr,
                       " is not supported (ONNX Runtime's CPU kernel has no such form either)"));
    }
  }
  const DType dt = c.input_dtype(0);
  if (dt != DType::kF32) {
    return absl::UnimplementedError(absl::StrCat("Attention (com.microsoft): input of dtype ",
                                                 DTypeName(dt), " is not supported (f32 only)"));
  }
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, c.GetInts("qkv_hidden_sizes", {}));
  const Shape* x = c.input_shape(0);
  const Shape* w = c.input_shape(1);
  if (x == nullptr || w == nullptr) {
    c.SetOutputUnknown(0, dt);
    c.SetOutputUnknown(1, dt);
    return absl::OkStatus();
  }
  if (x->size() != 3) return c.Error("input must be 3-D [batch, sequence, input_hidden]");
  if (w->size() != 2) return c.Error("weights must be 2-D [input_hidden, D + D + Dv]");
  Dim dq, dv;
  if (sizes.empty()) {
    dq = dv = c.sym().FloorDiv((*w)[1], c.sym().Const(3));
  } else {
    if (sizes.size() != 3 || sizes[0] != sizes[1] || sizes[0] % n != 0 || sizes[2] % n != 0) {
      return c.Error(
          "qkv_hidden_sizes must be three sizes, Q's and K's equal, multiples of "
          "num_heads");
    }
    dq = c.sym().Const(sizes[0]);
    dv = c.sym().Const(sizes[2]);
  }
  if (auto d = SymbolicContext::AsConst(dq); d && (*d <= 0 || *d % n != 0)) {
    return c.Error(
        absl::StrCat("the hidden size ", *d, " is not a positive multiple of num_heads (", n, ")"));
  }
  c.SetOutput(0, dt, {(*x)[0], (*x)[1], dv});
  const Shape* past = c.input_shape(4);
  if (past != nullptr && past->size() != 5) {
    return c.Error("past must be 5-D [2, batch, num_heads, past, head_size]");
  }
  if (c.has_input(4) && !c.has_output(1)) {
    return c.Error("a past needs the present output (ONNX Runtime's kernel requires it)");
  }
  Dim len = (*x)[1];
  if (past != nullptr) len = c.sym().Add((*past)[3], len);
  c.SetOutput(
      1, dt,
      {c.sym().Const(2), (*x)[0], c.sym().Const(n), len, c.sym().FloorDiv(dq, c.sym().Const(n))});
  return absl::OkStatus();
}

// EmbedLayerNormalization: output and embedding_sum [B, S, H] (input_ids [B, S], the word
// embedding [V, H]); mask_index i32 [B].
absl::Status EmbedLayerNormShape(InferContext& c) {
  if (c.num_outputs() < 1 || c.num_outputs() > 3) return c.Error("has one to three outputs");
  const DType dt = c.input_dtype(2);
  if (dt != DType::kF32) {
    return absl::UnimplementedError(
        absl::StrCat("EmbedLayerNormalization (com.microsoft): embeddings of dtype ", DTypeName(dt),
                     " are not supported (f32 only)"));
  }
  const Shape* ids = c.input_shape(0);
  const Shape* word = c.input_shape(2);
  if (ids != nullptr && ids->size() != 2) return c.Error("input_ids must be 2-D [batch, sequence]");
  if (word != nullptr && word->size() != 2) return c.Error("word_embedding must be 2-D");
  if (ids == nullptr || word == nullptr) {
    c.SetOutputUnknown(0, dt);
    c.SetOutputUnknown(1, DType::kI32);
    c.SetOutputUnknown(2, dt);
    return absl::OkStatus();
  }
  c.SetOutput(0, dt, {(*ids)[0], (*ids)[1], (*word)[1]});
  c.SetOutput(1, DType::kI32, {(*ids)[0]});
  c.SetOutput(2, dt, {(*ids)[0], (*ids)[1], (*word)[1]});
  return absl::OkStatus();
}

// QLinearAdd: C has A's type and the broadcast shape of A and B.
absl::Status QLinearAddShape(InferContext& c) {
  if (c.num_outputs() != 1 || !c.has_input(0) || !c.has_input(3)) {
    return c.Error(
        "QLinearAdd takes A, A_scale, A_zero_point?, B, B_scale, B_zero_point?, "
        "C_scale, C_zero_point? and has one output");
  }
  const DType dt = c.input_dtype(0);
  if ((dt != DType::kU8 && dt != DType::kI8) || c.input_dtype(3) != dt) {
    return c.Error(absl::StrCat("QLinearAdd: A and B must both be u8 or both i8, not ",
                                DTypeName(dt), " and ", DTypeName(c.input_dtype(3))));
  }
  const Shape* a = c.input_shape(0);
  const Shape* b = c.input_shape(3);
  if (a == nullptr || b == nullptr) {
    c.SetOutputUnknown(0, dt);
    return absl::OkStatus();
  }
  absl::StatusOr<Shape> out = BroadcastShapes(c.sym(), *a, *b);
  if (!out.ok()) return c.Error(out.status().message());
  c.SetOutput(0, dt, *out);
  return absl::OkStatus();
}

// com.microsoft::Gelu is dynvm::Gelu.
absl::Status LowerGelu(LowerContext& l) {
  l.node.domain = ops::kDynvmDomain;
  l.node.op = ops::kGelu;
  return absl::OkStatus();
}

}  // namespace

void DefineMsftOps(OpTable& t) {
  static constexpr OpRow kRows[] = {
      {"FastGelu", 1, "1:2:1", "", kPure, ActivationShape},
      {"BiasGelu", 1, "1:2:3", "", kPure, ActivationShape},
      {ops::kGelu, 1, "1:1:1", "", kPure | kNoKernel, ActivationShape, LowerGelu},
      {"QuickGelu", 1, "1:1:1", "alpha:f", kPure, ActivationShape},
      {"SkipLayerNormalization", 1, "1:5:7", "epsilon:f", kPure, SkipLayerNormShape},
      {"SkipSimplifiedLayerNormalization", 1, "1:4:7", "epsilon:f", kPure, SkipLayerNormShape},
      {"FusedMatMul", 1, "1:2:3", "alpha:f transA:i transB:i transBatchA:i transBatchB:i", kPure,
       FusedMatMulShape},
      {"RotaryEmbedding", 1, "1:4:15",
       "interleaved:i is_packed_batching:i num_heads:i rotary_embedding_dim:i scale:f", kPure,
       RotaryEmbeddingShape},
      {"MatMulIntegerToFloat", 1, "1:7:15", "", kPure, QuantMatMulShape},
      {"DynamicQuantizeMatMul", 1, "1:5:7", "", kPure, QuantMatMulShape},
      // A, A_scale, A_zero_point?, B, B_scale, B_zero_point?, C_scale, C_zero_point?
      {ops::kQLinearAdd, 1, "1:8:91", "", kPure, QLinearAddShape},
      {"MatMulNBits", 1, "1:6:7", "K:i N:i bits:i block_size:i accuracy_level:i", kPure,
       MatMulNBitsShape},
      // query, key?, value?, past_key?, past_value?, seqlens_k, total_sequence_length,
      // cos_cache?, sin_cache?, position_ids?, attention_bias?, head_sink?
      {"GroupQueryAttention", 1, "1:12:97",
       "num_heads:i kv_num_heads:i scale:f softcap:f local_window_size:i do_rotary:i "
       "rotary_interleaved:i smooth_softmax:i",
       kPure, GroupQueryAttentionShape},
      // query, key, value, bias?, key_padding_mask?, attention_bias?, past_key?, past_value?
      {"MultiHeadAttention", 1, "1:8:1", "num_heads:i mask_filter_value:f scale:f unidirectional:i",
       kPure, MultiHeadAttentionShape},
      // input_ids, segment_ids?, word_embedding, position_embedding, segment_embedding?, gamma,
      // beta, mask?, position_ids?
      {"EmbedLayerNormalization", 1, "1:9:109", "epsilon:f mask_index_type:i", kPure,
       EmbedLayerNormShape},
      // input, weights, bias, mask_index?, past?, attention_bias?
      {"Attention", 1, "1:6:7",
       "num_heads:i qkv_hidden_sizes:I unidirectional:i mask_filter_value:f scale:f do_rotary:i "
       "past_present_share_buffer:i rotary_embedding_dim:i",
       kPure, MsftAttentionShape},
  };
  t.Add(ops::kMsftDomain, kRows);
  // ORT defines it in the default domain (opset 1 on), not in com.microsoft.
  static constexpr OpRow kDefaultDomainRows[] = {
      {"SimplifiedLayerNormalization", 1, "1:2:3", "axis:i epsilon:f stash_type:i", kPure,
       SimplifiedLayerNormShape},
  };
  t.Add("", kDefaultDomainRows);
}

}  // namespace dynvm::compiler
