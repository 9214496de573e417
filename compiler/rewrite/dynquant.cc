// dynquant_matmul: a MatMul as ONNX Runtime's quantize_dynamic writes it
// (onnxruntime/python/tools/quantization/operators/matmul.py, class MatMulInteger),
//   xq, xs, xz = DynamicQuantizeLinear(x)
//   Mul(Cast<f32>(MatMulInteger(xq, w, xz[, wz])), Mul(xs, ws))     (either operand order)
// becomes com.microsoft DynamicQuantizeMatMul(x, w, ws[, wz]), which the oneDNN backend runs as
// one u8 x s8 integer GEMM with the quantization of x before it and the scaling after it
// (kernels/dnnl/quant.cc). Taken: x f32 of any rank, w u8 or i8 2-D [K, N] of known N, ws f32
// of 1 or N elements (rank 0 or 1), wz (absent, or of w's type with 1 or N elements), Cast to
// FLOAT. The DynamicQuantizeLinear and the scales' Mul are not part of the match: they may feed
// other MatMulIntegers (quantize_dynamic quantizes an activation once for every MatMul reading
// it: Q, K and V), and go with dead code elimination once nothing reads them. Refused: xq or xz
// not outputs 0 and 2 of one DynamicQuantizeLinear, xs not its output 1, a scale of another
// shape (a broadcast that would change the output's shape), another Cast target, and (by the
// driver) a MatMulInteger or Cast result read elsewhere.
//
// dynquant_matmul_bias: Add(DynamicQuantizeMatMul(x, w, ws[, wz]), bias) (either order), bias
// f32 [N], takes the bias into the op (its fifth input). The fused op computes the bits of the
// unfused program: x quantized as DynamicQuantizeLinear does, the product exact, f32(acc) times
// the f32 product of the scales, then the bias added (two roundings, as Mul then Add).
#include <optional>
#include <vector>

#include "compiler/builder.h"
#include "compiler/ops/names.h"
#include "compiler/rewrite/rules.h"

namespace dynvm::compiler::rewrite {
namespace {

using P = Pattern;

bool Is8Bit(DType d) { return d == DType::kU8 || d == DType::kI8; }

// Output `index` of a default-domain node of `op`.
const Node* ProducedBy(const Value* v, const char* op, int index) {
  if (v == nullptr || v->producer == nullptr || v->output_index != index) return nullptr;
  const Node* n = v->producer;
  return n->op == op && n->domain.empty() ? n : nullptr;
}

// A per-tensor or per-column (N) parameter of rank 0 or 1.
bool PerColumn(const Value* v, int64_t n) {
  const std::optional<int64_t> count = ConstNumel(v);
  return count && v->rank() <= 1 && (*count == 1 || *count == n);
}

// w's column count N, when w is a u8 or i8 matrix of known N.
std::optional<int64_t> Columns(const Value* w) {
  if (w == nullptr || !Is8Bit(w->dtype) || w->rank() != 2) return std::nullopt;
  return SymbolicContext::AsConst((*w->shape)[1]);
}

Value* Replace(Emitter& e, const Match& m) {
  Value *xq = m["xq"], *w = m["w"], *xz = m["xz"], *wz = m["wz"], *scales = m["scales"];
  const Node* dql = ProducedBy(xq, "DynamicQuantizeLinear", 0);
  const Node* cast = m.node("cast");
  if (dql == nullptr || dql->inputs.empty() || dql->outputs.size() != 3 || dql->outputs[2] != xz ||
      dql->inputs[0] == nullptr || dql->inputs[0]->dtype != DType::kF32 || cast == nullptr) {
    return nullptr;
  }
  const AttrValue* to = cast->attr("to");
  if (to == nullptr || to->i != 1) return nullptr;  // FLOAT
  const std::optional<int64_t> n = Columns(w);
  if (!n || (wz != nullptr && (wz->dtype != w->dtype || !PerColumn(wz, *n)))) return nullptr;
  // scales = Mul(xs, ws) in either order, ws f32 per tensor or per column.
  const Node* mul = ProducedBy(scales, "Mul", 0);
  if (mul == nullptr || mul->inputs.size() != 2) return nullptr;
  const Value* xs = dql->outputs[1];
  Value* ws = mul->inputs[0] == xs   ? mul->inputs[1]
              : mul->inputs[1] == xs ? mul->inputs[0]
                                     : nullptr;
  if (xs == nullptr || ws == nullptr || ws->dtype != DType::kF32 || !PerColumn(ws, *n)) {
    return nullptr;
  }
  std::vector<Value*> in = {dql->inputs[0], w, ws};
  if (wz != nullptr) in.push_back(wz);
  return e.Op("DynamicQuantizeMatMul", std::move(in), {}, ops::kMsftDomain);
}

Value* ReplaceBias(Emitter& e, const Match& m) {
  const Node* dq = m.node("dq");
  Value* bias = m["bias"];
  if (dq == nullptr || dq->inputs.size() < 3 || dq->inputs.size() > 4) return nullptr;
  const std::optional<int64_t> n = Columns(dq->inputs[1]);
  if (!n || bias->dtype != DType::kF32 || bias->rank() != 1 || ConstNumel(bias) != *n)
    return nullptr;
  std::vector<Value*> in = dq->inputs;
  in.resize(4, nullptr);  // an absent zero point stays absent
  in.push_back(bias);
  return e.Op("DynamicQuantizeMatMul", std::move(in), {}, ops::kMsftDomain);
}

}  // namespace

std::vector<Rule> DynQuantRules() {
  P xq = P::Any("xq"), w = P::Any("w"), xz = P::Any("xz"), wz = P::Any("wz");
  P mm = P::OneOf({P::Op("MatMulInteger", {xq, w, xz, wz}), P::Op("MatMulInteger", {xq, w, xz})});
  P cast = P::Op("Cast", {mm}).As("cast");
  P root = P::Op("Mul", {cast, P::Any("scales")}).Commutative();
  P dq = P::OneOf(
      {P::Op("com.microsoft::DynamicQuantizeMatMul", {P::Any(), P::Any(), P::Any(), P::Any()})
           .As("dq"),
       P::Op("com.microsoft::DynamicQuantizeMatMul", {P::Any(), P::Any(), P::Any()}).As("dq")});
  P broot = P::Op("Add", {dq, P::Any("bias")}).Commutative();
  return {Rule{"dynquant_matmul", std::move(root), &Replace},
          Rule{"dynquant_matmul_bias", std::move(broot), &ReplaceBias}};
}

}  // namespace dynvm::compiler::rewrite
