// qdq_matmul: the QDQ form of a quantized MatMul, as ONNX Runtime's quantizer and PyTorch's
// quantized export write it,
//   QuantizeLinear(MatMul(DequantizeLinear(xq, xs[, xz]), DequantizeLinear(wq, ws[, wz])),
//                  ys[, yz])
// becomes one QLinearMatMul(xq, xs, xz, wq, ws, wz, ys, yz) (absent zero points become zero
// constants: x's and w's type, u8 for y), which the oneDNN backend runs as an int8 GEMM.
// Taken: xq and wq u8 or i8, f32 scales; x's scale and zero point and y's per tensor (one
// element); w 2-D [K, N] with its scale and zero point per tensor or per output channel
// (axis 1, N elements). Refused: a per-axis x or y, w per input channel (axis 0) or of another
// rank, unknown shapes, and (by the driver) a dequantized value read elsewhere.
//
// The fused result can differ from the three-op program by one quantization step where the
// f32 product lands within rounding of a tie: the fused product is exact and requantized in
// double, the unfused one rounded in f32 (ONNX Runtime's fusion behaves alike).
#include <optional>
#include <vector>

#include "compiler/rewrite/rules.h"

namespace dynvm::compiler::rewrite {
namespace {

using P = Pattern;

bool Is8Bit(DType d) { return d == DType::kU8 || d == DType::kI8; }

// The element count of a value of constant shape.
std::optional<int64_t> Numel(const Value* v) {
  if (v == nullptr || !v->has_shape()) return std::nullopt;
  int64_t n = 1;
  for (Dim d : *v->shape) {
    std::optional<int64_t> c = SymbolicContext::AsConst(d);
    if (!c) return std::nullopt;
    n *= *c;
  }
  return n;
}

// DequantizeLinear(q, s[, z]) capturing q, s, z under `prefix` and the node as `prefix`.
P Dequantize(const std::string& prefix) {
  P q = P::Any(prefix + "q"), s = P::Any(prefix + "s"), z = P::Any(prefix + "z");
  return P::OneOf({P::Op("DequantizeLinear", {q, s, z}).As(prefix + "dq"),
                   P::Op("DequantizeLinear", {q, s}).As(prefix + "dq")});
}

// The zero point, or a zero constant of `dtype`.
Value* ZeroPoint(Emitter& e, Value* z, DType dtype) {
  if (z != nullptr) return z;
  absl::StatusOr<Tensor> t = Tensor::Empty(dtype, {});
  if (!t.ok()) return nullptr;
  static_cast<uint8_t*>(t->raw_data())[0] = 0;
  return e.Constant(*std::move(t));
}

int64_t AxisOf(const Node* n) {
  const AttrValue* a = n == nullptr ? nullptr : n->attr("axis");
  return a == nullptr ? 1 : a->i;
}

Value* Replace(Emitter& e, const Match& m) {
  Value *xq = m["xq"], *xs = m["xs"], *xz = m["xz"], *wq = m["wq"], *ws = m["ws"], *wz = m["wz"],
        *ys = m["ys"], *yz = m["yz"];
  if (!Is8Bit(xq->dtype) || !Is8Bit(wq->dtype) || (yz != nullptr && !Is8Bit(yz->dtype))) {
    return nullptr;
  }
  for (const Value* s : {xs, ws, ys}) {
    if (s->dtype != DType::kF32) return nullptr;
  }
  if ((xz != nullptr && xz->dtype != xq->dtype) || (wz != nullptr && wz->dtype != wq->dtype)) {
    return nullptr;
  }
  // x and y per tensor.
  for (const Value* v : {xs, xz, ys, yz}) {
    if (v != nullptr && Numel(v) != 1) return nullptr;
  }
  // w [K, N], per tensor or per output channel (axis 1).
  if (!wq->has_shape() || wq->rank() != 2) return nullptr;
  const std::optional<int64_t> n = SymbolicContext::AsConst((*wq->shape)[1]);
  const std::optional<int64_t> wn = Numel(ws);
  if (!n || !wn) return nullptr;
  if (*wn != 1) {
    const int64_t axis = AxisOf(m.node("wdq"));
    if ((axis != 1 && axis != -1) || *wn != *n || ws->rank() != 1) return nullptr;
  }
  if (wz != nullptr && Numel(wz) != wn) return nullptr;
  Value* xzp = ZeroPoint(e, xz, xq->dtype);
  Value* wzp = ZeroPoint(e, wz, wq->dtype);
  Value* yzp = ZeroPoint(e, yz, DType::kU8);
  if (xzp == nullptr || wzp == nullptr || yzp == nullptr) return nullptr;
  return e.Op("QLinearMatMul", {xq, xs, xzp, wq, ws, wzp, ys, yzp});
}

}  // namespace

std::vector<Rule> QdqRules() {
  P matmul = P::Op("MatMul", {Dequantize("x"), Dequantize("w")});
  P ys = P::Any("ys"), yz = P::Any("yz");
  P root =
      P::OneOf({P::Op("QuantizeLinear", {matmul, ys, yz}), P::Op("QuantizeLinear", {matmul, ys})});
  return {Rule{"qdq_matmul", std::move(root), &Replace}};
}

}  // namespace dynvm::compiler::rewrite
