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
      {"MatMulNBits", 1, "1:6:7", "K:i N:i bits:i block_size:i accuracy_level:i", kPure,
       MatMulNBitsShape},
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
