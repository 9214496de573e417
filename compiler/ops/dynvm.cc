// dynvm's own ops (domain "dynvm"); their reference kernels are in kernels/reference/.
//
//   Sample(logits [B, V], temperature [], seed [], step [][, top_k [], top_p [],
//          repetition_penalty [], tokens [B, n]...]) -> tokens [B] i64 (docs/sampling.md)
//   Requantize(x, x_scale, x_zero_point, y_scale, y_zero_point) -> y  x (u8/i8) dequantized,
//                      through Relu when relu = 1, and quantized again to y_zero_point's type:
//                      exactly DequantizeLinear -> [Relu] -> QuantizeLinear in f32, per tensor
//                      (compiler/rewrite/qdq.cc, qdq_requantize; kernels/reference/quant.cc).
//   FusedConv(X, W, B?, sum?, dw_W?, dw_B?) -> Y  Conv + residual + activation, optionally then
//                      a 3x3 depthwise conv + activation (compiler/conv_fusion.h)
//   Emit(x, stream=0)  hands x to the host's stream callback (the `emit` instruction); no
//                      outputs; never removed as dead code.
//   Gelu(x), GeluTanh(x), Silu(x) -> same type as x: fused activations the pattern rewrites
//                      make (compiler/rewrite/activations.cc).
//   RMSNorm(x, scale) -> same type as x: x / sqrt(mean(x^2) + epsilon) * scale over the axes
//                      [axis, rank) (attributes axis, default -1, and epsilon, default 1e-5;
//                      scale has one value per normalized element); compiler/rewrite/rms_norm.cc.
//   RotateHalf(x, cos, sin) -> same type as x: x * cos + rotate_half(x) * sin, rotate_half(x) =
//                      Concat(-x[..., D/2:], x[..., :D/2]) over the last axis (D even): the
//                      rotary embedding as GPT-NeoX / Llama exports write it; x, cos and sin
//                      broadcast together (numpy), along every axis but x's last
//                      (compiler/rewrite/rotary.cc; kernels/reference/dynvm_ops.cc has the exact
//                      definition).
//   SwiGlu(gate, up) -> gate's type: silu(gate) * up = gate sigmoid(gate) up, broadcast
//                      together (numpy): SwiGLU's gating (compiler/rewrite/swiglu.cc).
//   Attention(Q, K, V, mask?) -> Y  scaled dot-product attention (compiler/rewrite/attention.cc;
//                      kernels/reference/attention.cc has the exact definition). Attributes
//                      q_perm, k_perm, v_perm, out_perm (identity when absent), scale, mask_mode
//                      (0 none, 1 additive, 2/3 Where(mask, fill, s) / Where(mask, s, fill)),
//                      fill. With Q' = Transpose(Q, q_perm) [..., Lq, D], K' [..., D, Lk],
//                      V' [..., Lk, Dv]: Y = Transpose(R, out_perm), R [..., Lq, Dv]. A leading
//                      dim of K' or V' may be 1 against Q''s (grouped-query attention).
//   Linear(X [..., K], W, B?) -> Y [..., N]  Y = act(X W + B) (compiler/rewrite/matmul_bias.cc;
//                      kernels/reference/linear.cc has the exact definition). W is [K, N], or
//                      [N, K] with trans_b = 1; B holds N values along its last axis (its other
//                      dims 1); activation "" (none), Relu, Tanh, Sigmoid, Gelu, GeluTanh, Silu.
//                      With b_packed_n = N (trans_b 0), W is the [K, N] matrix stored as the
//                      packed GEMM's panels [ceil(N / 16), K, 16], as MatMul's below.
//   Copy(x) -> y       x's dtype and shape, contiguous: a strided view materialized.
//   MatMul(A, B) -> Y  Y = MatMul(Transpose(A, a_perm), Transpose(B, b_perm)) with numpy
//                      semantics (identity when a perm is absent); the kernels read A and B
//                      through the permuted strides, no copy (compiler/rewrite/
//                      matmul_transpose.cc; kernels/reference/matmul.cc has the definition).
//                      With b_packed_n = N, B is a [K, N] matrix stored as the packed GEMM's
//                      panels [ceil(N / 16), K, 16] (B[k, j] at [j / 16, k, j % 16], zeros past
//                      N; kernels/cpu/packed_gemm.h), no b_perm (compiler/pack_weights.h).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/ops/names.h"
#include "compiler/ops/op_def.h"
#include "compiler/ops/shape_util.h"

namespace dynvm::compiler {
namespace {

using shapes::Axis;
using shapes::ConstInts;
using shapes::Numel;
using shapes::SameAsInput;
using Shape = std::vector<Dim>;

// The dims of Transpose(x, perm) (identity when the attribute is absent).
absl::StatusOr<std::vector<Dim>> PermutedDims(InferContext& c, const std::vector<Dim>& x,
                                              const char* attr) {
  std::vector<int64_t> identity(x.size());
  for (size_t i = 0; i < x.size(); ++i) identity[i] = static_cast<int64_t>(i);
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> perm, c.GetInts(attr, identity));
  std::vector<bool> seen(x.size(), false);
  if (perm.size() != x.size()) return c.Error(absl::StrCat(attr, " has the wrong length"));
  std::vector<Dim> out(x.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(x.size()) || seen[perm[i]]) {
      return c.Error(absl::StrCat(attr, " is not a permutation"));
    }
    seen[perm[i]] = true;
    out[i] = x[perm[i]];
  }
  return out;
}

absl::Status InferAttention(InferContext& c) {
  if (c.num_inputs() < 3 || c.num_inputs() > 4 || c.num_outputs() != 1 || !c.has_input(0) ||
      !c.has_input(1) || !c.has_input(2)) {
    return c.Error("Attention takes (Q, K, V[, mask]) and has one output");
  }
  const std::vector<Dim>* q = c.input_shape(0);
  const std::vector<Dim>* v = c.input_shape(2);
  if (q == nullptr || v == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  if (q->size() < 2 || v->size() != q->size()) {
    return c.Error("Q and V must have one rank, at least 2");
  }
  DYNVM_ASSIGN_OR_RETURN(std::vector<Dim> qd, PermutedDims(c, *q, "q_perm"));
  DYNVM_ASSIGN_OR_RETURN(std::vector<Dim> vd, PermutedDims(c, *v, "v_perm"));
  qd.back() = vd.back();  // R = [..., Lq, Dv]
  DYNVM_ASSIGN_OR_RETURN(std::vector<Dim> out, PermutedDims(c, qd, "out_perm"));
  c.SetOutput(0, c.input_dtype(0), std::move(out));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Dim>> PackedBDims(InferContext& c, const std::vector<Dim>& b, int64_t n);

absl::Status InferLinear(InferContext& c) {
  if (c.num_inputs() < 2 || c.num_inputs() > 3 || c.num_outputs() != 1 || !c.has_input(0) ||
      !c.has_input(1)) {
    return c.Error("Linear takes (X, W[, B]) and has one output");
  }
  DYNVM_ASSIGN_OR_RETURN(const int64_t trans_b, c.GetInt("trans_b", 0));
  const std::vector<Dim>* x = c.input_shape(0);
  const std::vector<Dim>* w = c.input_shape(1);
  if (x == nullptr || w == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  DYNVM_ASSIGN_OR_RETURN(const int64_t packed_n, c.GetInt("b_packed_n", -1));
  if (packed_n >= 0) {
    if (trans_b != 0) return c.Error("Linear: b_packed_n with trans_b = 1");
    if (x->empty()) return c.Error("Linear: X must have rank >= 1");
    DYNVM_ASSIGN_OR_RETURN(const std::vector<Dim> kn, PackedBDims(c, *w, packed_n));
    std::vector<Dim> out = *x;
    out.back() = kn[1];
    c.SetOutput(0, c.input_dtype(0), std::move(out));
    return absl::OkStatus();
  }
  if (x->empty() || w->size() != 2) return c.Error("Linear: X must have rank >= 1 and W rank 2");
  std::vector<Dim> out = *x;
  out.back() = (*w)[trans_b != 0 ? 0 : 1];
  c.SetOutput(0, c.input_dtype(0), std::move(out));
  return absl::OkStatus();
}

// The logical [K, N] of a packed B (b_packed_n = N): panels [ceil(N / 16), K, 16]
// (kernels/cpu/packed_gemm.h; compiler/pack_weights.h makes them).
absl::StatusOr<std::vector<Dim>> PackedBDims(InferContext& c, const std::vector<Dim>& b,
                                             int64_t n) {
  if (c.HasAttr("b_perm")) return c.Error("MatMul: b_perm with a packed B (b_packed_n)");
  if (b.size() != 3) return c.Error("a packed B (b_packed_n) must be [N / 16, K, 16]");
  const std::optional<int64_t> panels = SymbolicContext::AsConst(b[0]),
                               width = SymbolicContext::AsConst(b[2]);
  if ((panels && *panels != (n + 15) / 16) || (width && *width != 16)) {
    return c.Error(absl::StrCat("a packed B of N = ", n, " must be [", (n + 15) / 16, ", K, 16]"));
  }
  return std::vector<Dim>{b[1], c.sym().Const(n)};
}

absl::Status InferPermutedMatMul(InferContext& c) {
  if (c.num_inputs() != 2 || c.num_outputs() != 1 || !c.has_input(0) || !c.has_input(1)) {
    return c.Error("MatMul takes (A, B) and has one output");
  }
  const std::vector<Dim>* a = c.input_shape(0);
  const std::vector<Dim>* b = c.input_shape(1);
  if (a == nullptr || b == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  if (a->empty() || b->empty()) return c.Error("MatMul inputs must have rank >= 1");
  DYNVM_ASSIGN_OR_RETURN(std::vector<Dim> sa, PermutedDims(c, *a, "a_perm"));
  DYNVM_ASSIGN_OR_RETURN(const int64_t packed_n, c.GetInt("b_packed_n", -1));
  std::vector<Dim> sb;
  if (packed_n >= 0) {
    DYNVM_ASSIGN_OR_RETURN(sb, PackedBDims(c, *b, packed_n));
  } else {
    DYNVM_ASSIGN_OR_RETURN(sb, PermutedDims(c, *b, "b_perm"));
  }
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), c.sym().Const(1));
  if (b1) sb.push_back(c.sym().Const(1));
  const std::vector<Dim> batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
  absl::StatusOr<std::vector<Dim>> batch = BroadcastShapes(c.sym(), batch_a, batch_b);
  if (!batch.ok()) return c.Error(batch.status().message());
  const std::optional<int64_t> ka = SymbolicContext::AsConst(sa.back()),
                               kb = SymbolicContext::AsConst(sb[sb.size() - 2]);
  if (ka && kb && *ka != *kb) return c.Error("MatMul: inner dims differ after the permutations");
  std::vector<Dim> out = std::move(*batch);
  if (!a1) out.push_back(sa[sa.size() - 2]);
  if (!b1) out.push_back(sb.back());
  c.SetOutput(0, c.input_dtype(0), std::move(out));
  return absl::OkStatus();
}

absl::Status QMatMulShape(InferContext& c) {
  if (c.num_inputs() < 2 || c.num_inputs() > 3 || c.num_outputs() != 1 || !c.has_input(0) ||
      !c.has_input(1)) {
    return c.Error("QMatMul takes (A, W, scale?) and has one output");
  }
  const std::vector<Dim>* a = c.input_shape(0);
  const std::vector<Dim>* w = c.input_shape(1);
  if (w != nullptr && w->size() != 2) return c.Error("W must be [N, K]");
  if (a == nullptr || w == nullptr) {
    c.SetOutputUnknown(0, DType::kF32);
    return absl::OkStatus();
  }
  if (a->empty()) return c.Error("A must have rank 1 or more");
  std::vector<Dim> y = *a;
  y.back() = (*w)[0];
  c.SetOutput(0, DType::kF32, std::move(y));
  return absl::OkStatus();
}

absl::Status SampleShape(InferContext& c) {
  const std::vector<Dim>* logits = c.input_shape(0);
  if (c.num_inputs() != 4 && c.num_inputs() < 7) {
    return c.Error(
        "Sample takes (logits, temperature, seed, step[, top_k, top_p, repetition_penalty, "
        "tokens...])");
  }
  if (logits == nullptr) {
    c.SetOutputDynamic(0, DType::kI64, 1);
    return absl::OkStatus();
  }
  if (logits->size() != 2) return c.Error("logits must be [batch, vocab]");
  c.SetOutput(0, DType::kI64, {(*logits)[0]});
  return absl::OkStatus();
}

absl::Status EmitShape(InferContext& c) {
  if (c.num_inputs() != 1 || c.num_outputs() != 0)
    return c.Error("Emit takes one input and has no outputs");
  return absl::OkStatus();
}

// Gelu, GeluTanh, Silu.
absl::Status ActivationShape(InferContext& c) {
  if (c.num_inputs() != 1 || c.num_outputs() != 1 || !c.has_input(0))
    return c.Error("takes one input and has one output");
  const std::vector<Dim>* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
  } else {
    c.SetOutput(0, c.input_dtype(0), *x);
  }
  return absl::OkStatus();
}

absl::Status RmsNormShape(InferContext& c) {
  if (c.num_inputs() != 2 || c.num_outputs() != 1 || !c.has_input(0) || !c.has_input(1))
    return c.Error("RMSNorm takes (x, scale) and has one output");
  const std::vector<Dim>* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
  } else {
    c.SetOutput(0, c.input_dtype(0), *x);
  }
  return absl::OkStatus();
}

// The numpy broadcast of every input's shape, x's dtype.
absl::Status BroadcastAll(InferContext& c) {
  std::vector<Dim> shape;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const std::vector<Dim>* s = c.input_shape(i);
    if (s == nullptr) {
      c.SetOutputUnknown(0, c.input_dtype(0));
      return absl::OkStatus();
    }
    if (i == 0) {
      shape = *s;
      continue;
    }
    absl::StatusOr<std::vector<Dim>> b = BroadcastShapes(c.sym(), shape, *s);
    if (!b.ok()) return c.Error(b.status().message());
    shape = *std::move(b);
  }
  c.SetOutput(0, c.input_dtype(0), shape);
  return absl::OkStatus();
}

// x * cos + rotate_half(x) * sin: the broadcast of the three.
absl::Status RotateHalfShape(InferContext& c) {
  if (c.num_inputs() != 3 || c.num_outputs() != 1 || !c.has_input(0) || !c.has_input(1) ||
      !c.has_input(2))
    return c.Error("RotateHalf takes (x, cos, sin) and has one output");
  return BroadcastAll(c);
}

// silu(gate) * up: the broadcast of the two.
absl::Status SwiGluShape(InferContext& c) {
  if (c.num_inputs() != 2 || c.num_outputs() != 1 || !c.has_input(0) || !c.has_input(1))
    return c.Error("SwiGlu takes (gate, up) and has one output");
  return BroadcastAll(c);
}

// QLSTM, QGRU, QRNN: the f32 layer's shapes (the weights' dtype does not change them).
absl::Status QLstmShape(InferContext& c) { return FindOpDef("", ops::kLSTM)->infer(c); }
absl::Status QGruShape(InferContext& c) { return FindOpDef("", ops::kGRU)->infer(c); }
absl::Status QRnnShape(InferContext& c) { return FindOpDef("", ops::kRNN)->infer(c); }

// Requantize: y has x's shape and y_zero_point's type (u8 or i8).
absl::Status RequantizeShape(InferContext& c) {
  if (c.num_inputs() != 5 || c.num_outputs() != 1) {
    return c.Error("Requantize takes (x, x_scale, x_zero_point, y_scale, y_zero_point)");
  }
  const DType in = c.input_dtype(0), out = c.input_dtype(4);
  if ((in != DType::kU8 && in != DType::kI8) || (out != DType::kU8 && out != DType::kI8)) {
    return c.Error(absl::StrCat("Requantize: x and y_zero_point must be u8 or i8, not ",
                                DTypeName(in), " and ", DTypeName(out)));
  }
  const std::vector<Dim>* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, out);
  } else {
    c.SetOutput(0, out, *x);
  }
  return absl::OkStatus();
}

// ChannelMul (compiler/conv_fusion.h): y = x * g, x [N, C, spatial...], g [N or 1, C, 1...];
// y has x's dims.
absl::Status ChannelMulShape(InferContext& c) {
  if (c.num_inputs() != 2 || c.num_outputs() != 1 || !c.has_input(0) || !c.has_input(1))
    return c.Error("ChannelMul takes (x, g) and has one output");
  const std::vector<Dim>* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
  } else {
    c.SetOutput(0, c.input_dtype(0), *x);
  }
  return absl::OkStatus();
}

// ChannelPad (compiler/conv_fusion.h): x [N, C, spatial...] (rank 3 to 5) with "before" and
// "after" zero channels added: y [N, before + C + after, spatial...].
absl::Status ChannelPadShape(InferContext& c) {
  if (c.num_inputs() != 1 || c.num_outputs() != 1 || !c.has_input(0))
    return c.Error("ChannelPad takes (x) and has one output");
  DYNVM_ASSIGN_OR_RETURN(const int64_t before, c.GetInt("before", 0));
  DYNVM_ASSIGN_OR_RETURN(const int64_t after, c.GetInt("after", 0));
  if (before < 0 || after < 0) return c.Error("ChannelPad: before and after must be >= 0");
  const std::vector<Dim>* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  if (x->size() < 3 || x->size() > 5) return c.Error("ChannelPad: x must have rank 3 to 5");
  std::vector<Dim> y = *x;
  y[1] = c.sym().Add(y[1], c.sym().Const(before + after));
  c.SetOutput(0, c.input_dtype(0), y);
  return absl::OkStatus();
}

}  // namespace

void DefineDynvmOps(OpTable& t) {
  static constexpr OpRow kRows[] = {
      {ops::kSample, 7, "", "", 0, SampleShape},
      {ops::kEmit, 7, "", "", kNoKernel, EmitShape},
      {ops::kGelu, 7, "", "", kPure | kElementwise, ActivationShape},
      {ops::kGeluTanh, 7, "", "", kPure | kElementwise, ActivationShape},
      {ops::kSilu, 7, "", "", kPure | kElementwise, ActivationShape},
      {ops::kRMSNorm, 7, "", "", kPure, RmsNormShape},
      {ops::kRotateHalf, 7, "", "", kPure, RotateHalfShape},
      {ops::kSwiGlu, 7, "", "", kPure, SwiGluShape},
      {ops::kAttention, 7, "", "", kPure, InferAttention},
      {ops::kLinear, 7, "", "", kPure, InferLinear},
      {ops::kMatMul, 1, "", "", kPure, InferPermutedMatMul},
      {ops::kFusedConv, 7, "", "", kPure, InferFusedConvShape},
      {ops::kChannelMul, 7, "", "", kPure, ChannelMulShape},
      {ops::kChannelPad, 7, "", "", kPure, ChannelPadShape},
      {ops::kRequantize, 7, "", "", kPure, RequantizeShape},
      {ops::kQMatMul, 7, "", "", kPure, QMatMulShape},
      {"QLSTM", 7, "", "", kPure, QLstmShape},
      {"QGRU", 7, "", "", kPure, QGruShape},
      {"QRNN", 7, "", "", kPure, QRnnShape},
      {"Copy", 7, "", "", kPure, shapes::SameAsInputKeepingContent},
  };
  t.Add(ops::kDynvmDomain, kRows);
}

}  // namespace dynvm::compiler
