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
// qdq_gemm: the same around a Gemm (a Linear layer),
//   QuantizeLinear(Gemm(DequantizeLinear(xq, ..), DequantizeLinear(wq, ..)[, c]), ys[, yz])
// with transA 0, alpha 1 and beta 1, transB 0 (w [K, N], per-channel axis 1) or 1 (w [N, K],
// per-channel axis 0: wq is transposed, which the fold after the rewrites folds for a constant
// wq). Without c: QLinearMatMul as above. With c (f32, any Gemm broadcast):
//   QuantizeLinear(Cast<f32>(MatMulInteger(xq, wq, xz, wz)) * (xs * ws) + c, ys[, yz])
// (the integer product on the oneDNN int8 GEMM; the scaling, bias and requantization are
// vector loops).
//
// qdq_conv: the same around a Conv,
//   QuantizeLinear(Conv(DequantizeLinear(xq, ..), DequantizeLinear(wq, ..)[, b]), ys[, yz])
// with w [M, C/group, k...] per tensor or per output channel (axis 0, M elements), x and y per
// tensor, every Conv attribute kept. Without b: QLinearConv(xq, xs, xz, wq, ws, wz, ys, yz).
// With b the DequantizeLinear of an int32 constant bq [M] whose scale is exactly the f32
// product xs * ws (per channel), as ONNX Runtime's quantize_static writes every Conv bias:
// QLinearConv(xq, xs, xz, wq, ws, wz, ys, yz, bq). With another b (f32 [M]):
//   QuantizeLinear(Cast<f32>(ConvInteger(xq, wq, xz, wz)) * r(xs * ws) + r(b), ys[, yz])
// (r: reshaped to [M, 1, ...] to broadcast over the spatial dims), so a bias that is not a
// multiple of xs * ws loses nothing to rounding. ConvInteger and QLinearConv run on oneDNN's
// int8 convolution (docs/kernels.md, "Quantized operators"). x's DequantizeLinear is found
// through the Conv's input and may have other readers (a residual Add reads the block's input
// too); it stays for them.
//
// qdq_add: a residual Add between quantized tensors,
//   QuantizeLinear(Add(DequantizeLinear(aq, as[, az]), DequantizeLinear(bq, bs[, bz])), cs[, cz])
// becomes com.microsoft::QLinearAdd(aq, as, az, bq, bs, bz, cs, cz) (what ONNX Runtime's QDQ
// transformer makes of it, with its MLAS arithmetic: kernels/reference/qeltwise.cc). Taken: aq
// and bq of one 8-bit type and one known shape, cz of that type, every scale f32 and every
// scale and zero point per tensor; the DequantizeLinears may have other readers.
//
// qdq_requantize: QuantizeLinear(Relu(DequantizeLinear(xq, xs[, xz])), ys[, yz]) and
// QuantizeLinear(DequantizeLinear(xq, xs[, xz]), ys[, yz]) become
// dynvm::Requantize(xq, xs, xz, ys, yz) (relu = 1 with the Relu): the same f32 arithmetic in one
// pass over the 8-bit data, bit for bit the unfused program's. Per tensor, f32 scales; the
// DequantizeLinear may have other readers.
//
// The fused result can differ from the unfused program by one quantization step where the
// f32 product lands within rounding of a tie: the fused product is exact and requantized in
// double (or scaled in f32 with c), the unfused one summed in f32 (ONNX Runtime's fusion
// behaves alike).
#include <optional>
#include <vector>

#include "compiler/builder.h"
#include "compiler/ops/names.h"
#include "compiler/rewrite/rules.h"

namespace dynvm::compiler::rewrite {
namespace {

using P = Pattern;

bool Is8Bit(DType d) { return d == DType::kU8 || d == DType::kI8; }

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

int64_t IntAttr(const Node* n, const char* name, int64_t dflt) {
  const AttrValue* a = n == nullptr ? nullptr : n->attr(name);
  return a == nullptr ? dflt : a->i;
}

float FloatAttr(const Node* n, const char* name, float dflt) {
  const AttrValue* a = n == nullptr ? nullptr : n->attr(name);
  return a == nullptr ? dflt : a->f;
}

// The checks both rules share; `trans_b`: w is [N, K] (its output channels on axis 0).
bool Fusable(const Match& m, bool trans_b) {
  Value *xq = m["xq"], *xs = m["xs"], *xz = m["xz"], *wq = m["wq"], *ws = m["ws"], *wz = m["wz"],
        *ys = m["ys"], *yz = m["yz"];
  if (!Is8Bit(xq->dtype) || !Is8Bit(wq->dtype) || (yz != nullptr && !Is8Bit(yz->dtype))) {
    return false;
  }
  for (const Value* s : {xs, ws, ys}) {
    if (s->dtype != DType::kF32) return false;
  }
  if ((xz != nullptr && xz->dtype != xq->dtype) || (wz != nullptr && wz->dtype != wq->dtype)) {
    return false;
  }
  // x and y per tensor.
  for (const Value* v : {xs, xz, ys, yz}) {
    if (v != nullptr && ConstNumel(v) != 1) return false;
  }
  // w [K, N] ([N, K] with trans_b), per tensor or per output channel.
  if (!wq->has_shape() || wq->rank() != 2) return false;
  const int out_axis = trans_b ? 0 : 1;
  const std::optional<int64_t> n = SymbolicContext::AsConst((*wq->shape)[out_axis]);
  const std::optional<int64_t> wn = ConstNumel(ws);
  if (!n || !wn) return false;
  if (*wn != 1) {
    const int64_t axis = AxisOf(m.node("wdq"));
    if ((axis != out_axis && axis != out_axis - 2) || *wn != *n || ws->rank() != 1) return false;
  }
  return wz == nullptr || ConstNumel(wz) == wn;
}

Value* Replace(Emitter& e, const Match& m) {
  if (!Fusable(m, false)) return nullptr;
  Value *xq = m["xq"], *xz = m["xz"], *wq = m["wq"], *wz = m["wz"], *yz = m["yz"];
  Value *xs = m["xs"], *ws = m["ws"], *ys = m["ys"];
  Value* xzp = ZeroPoint(e, xz, xq->dtype);
  Value* wzp = ZeroPoint(e, wz, wq->dtype);
  Value* yzp = ZeroPoint(e, yz, DType::kU8);
  if (xzp == nullptr || wzp == nullptr || yzp == nullptr) return nullptr;
  return e.Op("QLinearMatMul", {xq, xs, xzp, wq, ws, wzp, ys, yzp});
}

Value* ReplaceGemm(Emitter& e, const Match& m) {
  const Node* gemm = m.node("gemm");
  const int64_t trans_b = IntAttr(gemm, "transB", 0);
  Value* c = m["c"];
  if (IntAttr(gemm, "transA", 0) != 0 || (trans_b != 0 && trans_b != 1) ||
      FloatAttr(gemm, "alpha", 1.0f) != 1.0f ||
      (c != nullptr && (FloatAttr(gemm, "beta", 1.0f) != 1.0f || c->dtype != DType::kF32)) ||
      !Fusable(m, trans_b == 1)) {
    return nullptr;
  }
  Value *xq = m["xq"], *xz = m["xz"], *wq = m["wq"], *wz = m["wz"], *yz = m["yz"];
  Value *xs = m["xs"], *ws = m["ws"], *ys = m["ys"];
  if (!xq->has_shape() || xq->rank() != 2) return nullptr;
  Value* xzp = ZeroPoint(e, xz, xq->dtype);
  Value* wzp = ZeroPoint(e, wz, wq->dtype);  // before wq becomes a node's (not yet typed) output
  if (trans_b == 1) wq = e.Op("Transpose", {wq}, {{"perm", AttrInts({1, 0})}});
  if (xzp == nullptr || wzp == nullptr) return nullptr;
  if (c == nullptr) {
    Value* yzp = ZeroPoint(e, yz, DType::kU8);
    if (yzp == nullptr) return nullptr;
    return e.Op("QLinearMatMul", {xq, xs, xzp, wq, ws, wzp, ys, yzp});
  }
  Value* acc = e.Op("MatMulInteger", {xq, wq, xzp, wzp});
  Value* f = e.Op("Cast", {acc}, {{"to", AttrInt(1)}});  // FLOAT
  Value* y = e.Op("Add", {e.Op("Mul", {f, e.Op("Mul", {xs, ws})}), c});
  std::vector<Value*> q = {y, ys};
  if (yz != nullptr) q.push_back(yz);
  return e.Op("QuantizeLinear", q);
}

// x = DequantizeLinear(q, s[, z]) of any other readers (a residual Add, the other convolutions
// of a block read the same activation): its inputs, or false.
bool DequantizedFrom(const Value* x, Value** q, Value** s, Value** z) {
  const Node* n = x == nullptr ? nullptr : x->producer;
  if (n == nullptr || n->op != "DequantizeLinear" || !n->domain.empty() || x->output_index != 0 ||
      n->inputs.size() < 2 || n->inputs[0] == nullptr || n->inputs[1] == nullptr) {
    return false;
  }
  *q = n->inputs[0];
  *s = n->inputs[1];
  *z = n->inputs.size() > 2 ? n->inputs[2] : nullptr;
  return true;
}

// The elements of a constant f32 tensor, or empty.
std::vector<float> ConstFloats(const Value* v) {
  if (v == nullptr || !v->constant || v->constant->dtype() != DType::kF32) return {};
  const Tensor& t = *v->constant;
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// A bias as quantizers write it, DequantizeLinear(bq, bs[, zeros]) with bq an int32 constant
// [M] and bs exactly the f32 products xs * ws (per channel, or one): bq, which QLinearConv adds
// to its integer sums before the one requantization (the unfused Conv adds bq * bs in f32).
// nullptr when b is not of that form.
Value* Int32Bias(const Value* b, const Value* xs, const Value* ws, int64_t channels) {
  Value *bq = nullptr, *bs = nullptr, *bz = nullptr;
  if (!DequantizedFrom(b, &bq, &bs, &bz) || bq->dtype != DType::kI32 || !bq->constant ||
      bq->constant->numel() != channels) {
    return nullptr;
  }
  if (bz != nullptr) {
    if (!bz->constant || bz->constant->dtype() != DType::kI32) return nullptr;
    const Tensor& z = *bz->constant;
    for (int64_t i = 0; i < z.numel(); ++i) {
      if (z.data<int32_t>()[i] != 0) return nullptr;
    }
  }
  const std::vector<float> x = ConstFloats(xs), w = ConstFloats(ws), s = ConstFloats(bs);
  if (x.size() != 1 || w.empty() || s.empty()) return nullptr;
  for (int64_t j = 0; j < channels; ++j) {
    const float want = x[0] * w[w.size() == 1 ? 0 : static_cast<size_t>(j)];
    if (s[s.size() == 1 ? 0 : static_cast<size_t>(j)] != want) return nullptr;
  }
  return bq;
}

Value* ReplaceConv(Emitter& e, const Match& m) {
  const Node* conv = m.node("conv");
  Value *xq = nullptr, *xs = nullptr, *xz = nullptr;
  if (!DequantizedFrom(m["xf"], &xq, &xs, &xz)) return nullptr;
  Value *wq = m["wq"], *ws = m["ws"], *wz = m["wz"];
  Value *ys = m["ys"], *yz = m["yz"], *b = m["b"];
  if (!Is8Bit(xq->dtype) || !Is8Bit(wq->dtype) || (yz != nullptr && !Is8Bit(yz->dtype))) {
    return nullptr;
  }
  for (const Value* v : {xs, ws, ys}) {
    if (v->dtype != DType::kF32) return nullptr;
  }
  if ((xz != nullptr && xz->dtype != xq->dtype) || (wz != nullptr && wz->dtype != wq->dtype)) {
    return nullptr;
  }
  for (const Value* v : {xs, xz, ys, yz}) {
    if (v != nullptr && ConstNumel(v) != 1) return nullptr;
  }
  // w [M, C/group, k...] with a known M; its scale per tensor or per output channel (axis 0).
  if (!wq->has_shape() || wq->rank() < 3 || !xq->has_shape() || xq->rank() != wq->rank()) {
    return nullptr;
  }
  const std::optional<int64_t> channels = SymbolicContext::AsConst((*wq->shape)[0]);
  const std::optional<int64_t> wn = ConstNumel(ws);
  if (!channels || !wn) return nullptr;
  if (*wn != 1) {
    const int64_t axis = AxisOf(m.node("wdq"));
    if ((axis != 0 && axis != -wq->rank()) || *wn != *channels || ws->rank() != 1) return nullptr;
  }
  if (wz != nullptr && ConstNumel(wz) != wn) return nullptr;
  if (b != nullptr && (b->dtype != DType::kF32 || b->rank() != 1 || ConstNumel(b) != channels)) {
    return nullptr;
  }
  Value* xzp = ZeroPoint(e, xz, xq->dtype);
  Value* wzp = ZeroPoint(e, wz, wq->dtype);
  if (xzp == nullptr || wzp == nullptr) return nullptr;
  Attrs attrs = conv->attrs;
  Value* bq = b == nullptr ? nullptr : Int32Bias(b, xs, ws, *channels);
  if (b == nullptr || bq != nullptr) {
    Value* yzp = ZeroPoint(e, yz, DType::kU8);
    if (yzp == nullptr) return nullptr;
    std::vector<Value*> in = {xq, xs, xzp, wq, ws, wzp, ys, yzp};
    if (bq != nullptr) in.push_back(bq);
    return e.Op("QLinearConv", std::move(in), attrs);
  }
  // [M, 1, ..., 1]: per-channel values broadcast over the output's spatial dims.
  std::vector<int64_t> per_channel(static_cast<size_t>(wq->rank() - 1), 1);
  per_channel[0] = *channels;
  absl::StatusOr<Tensor> shape_t = Tensor::FromVector<int64_t>(
      DType::kI64, {static_cast<int64_t>(per_channel.size())}, per_channel);
  if (!shape_t.ok()) return nullptr;
  Value* shape = e.Constant(*std::move(shape_t));
  Value* acc = e.Op("ConvInteger", {xq, wq, xzp, wzp}, attrs);
  Value* f = e.Op("Cast", {acc}, {{"to", AttrInt(1)}});  // FLOAT
  Value* scale =
      e.Op("Reshape", {e.Op("Expand", {e.Op("Mul", {xs, ws}), e.Op("Shape", {b})}), shape});
  Value* y = e.Op("Add", {e.Op("Mul", {f, scale}), e.Op("Reshape", {b, shape})});
  std::vector<Value*> q = {y, ys};
  if (yz != nullptr) q.push_back(yz);
  return e.Op("QuantizeLinear", q);
}

// Whether a and b have one shape (each dim the same symbol or the same constant).
bool SameShape(const Value* a, const Value* b) {
  if (!a->shape || !b->shape || a->shape->size() != b->shape->size()) return false;
  for (size_t i = 0; i < a->shape->size(); ++i) {
    const Dim x = (*a->shape)[i], y = (*b->shape)[i];
    if (x == y) continue;
    const std::optional<int64_t> cx = SymbolicContext::AsConst(x), cy = SymbolicContext::AsConst(y);
    if (!cx || !cy || *cx != *cy) return false;
  }
  return true;
}

// Whether every value is absent or a per-tensor (one-element) parameter.
bool PerTensor(std::initializer_list<const Value*> vs) {
  for (const Value* v : vs) {
    if (v != nullptr && ConstNumel(v) != 1) return false;
  }
  return true;
}

Value* ReplaceAdd(Emitter& e, const Match& m) {
  Value *aq = nullptr, *as = nullptr, *az = nullptr, *bq = nullptr, *bs = nullptr, *bz = nullptr;
  if (!DequantizedFrom(m["af"], &aq, &as, &az) || !DequantizedFrom(m["bf"], &bq, &bs, &bz)) {
    return nullptr;
  }
  Value *cs = m["ys"], *cz = m["yz"];
  const DType dt = aq->dtype;
  if (!Is8Bit(dt) || bq->dtype != dt || (cz != nullptr && cz->dtype != dt) ||
      (cz == nullptr && dt != DType::kU8) || !aq->has_shape() || !bq->has_shape() ||
      !SameShape(aq, bq) || (az != nullptr && az->dtype != dt) ||
      (bz != nullptr && bz->dtype != dt)) {
    return nullptr;
  }
  for (const Value* s : {as, bs, cs}) {
    if (s->dtype != DType::kF32) return nullptr;
  }
  if (!PerTensor({as, az, bs, bz, cs, cz})) return nullptr;
  Value* azp = ZeroPoint(e, az, dt);
  Value* bzp = ZeroPoint(e, bz, dt);
  Value* czp = ZeroPoint(e, cz, dt);
  if (azp == nullptr || bzp == nullptr || czp == nullptr) return nullptr;
  return e.Op(ops::kQLinearAdd, {aq, as, azp, bq, bs, bzp, cs, czp}, {}, ops::kMsftDomain);
}

Value* Requantize(Emitter& e, const Match& m, bool relu) {
  Value *xq = nullptr, *xs = nullptr, *xz = nullptr;
  if (!DequantizedFrom(m["xf"], &xq, &xs, &xz)) return nullptr;
  Value *ys = m["ys"], *yz = m["yz"];
  if (!Is8Bit(xq->dtype) || (xz != nullptr && xz->dtype != xq->dtype) ||
      (yz != nullptr && !Is8Bit(yz->dtype)) || xs->dtype != DType::kF32 ||
      ys->dtype != DType::kF32 || !PerTensor({xs, xz, ys, yz})) {
    return nullptr;
  }
  Value* xzp = ZeroPoint(e, xz, xq->dtype);
  Value* yzp = ZeroPoint(e, yz, DType::kU8);
  if (xzp == nullptr || yzp == nullptr) return nullptr;
  return e.Op(ops::kRequantize, {xq, xs, xzp, ys, yzp}, {{"relu", AttrInt(relu ? 1 : 0)}},
              ops::kDynvmDomain);
}

Value* ReplaceRequantizeRelu(Emitter& e, const Match& m) { return Requantize(e, m, true); }
Value* ReplaceRequantize(Emitter& e, const Match& m) { return Requantize(e, m, false); }

}  // namespace

std::vector<Rule> QdqRules() {
  P matmul = P::Op("MatMul", {Dequantize("x"), Dequantize("w")});
  P ys = P::Any("ys"), yz = P::Any("yz");
  P root =
      P::OneOf({P::Op("QuantizeLinear", {matmul, ys, yz}), P::Op("QuantizeLinear", {matmul, ys})});
  P gemm = P::OneOf({P::Op("Gemm", {Dequantize("x"), Dequantize("w"), P::Any("c")}).As("gemm"),
                     P::Op("Gemm", {Dequantize("x"), Dequantize("w")}).As("gemm")});
  P groot =
      P::OneOf({P::Op("QuantizeLinear", {gemm, ys, yz}), P::Op("QuantizeLinear", {gemm, ys})});
  // x's DequantizeLinear may have other readers (ReplaceConv finds it through the value).
  P conv = P::OneOf({P::Op("Conv", {P::Any("xf"), Dequantize("w"), P::Any("b")}).As("conv"),
                     P::Op("Conv", {P::Any("xf"), Dequantize("w")}).As("conv")});
  P croot =
      P::OneOf({P::Op("QuantizeLinear", {conv, ys, yz}), P::Op("QuantizeLinear", {conv, ys})});
  P add = P::Op("Add", {P::Any("af"), P::Any("bf")});
  P aroot = P::OneOf({P::Op("QuantizeLinear", {add, ys, yz}), P::Op("QuantizeLinear", {add, ys})});
  P relu = P::Op("Relu", {P::Any("xf")});
  P rroot =
      P::OneOf({P::Op("QuantizeLinear", {relu, ys, yz}), P::Op("QuantizeLinear", {relu, ys})});
  P qroot = P::OneOf({P::Op("QuantizeLinear", {P::Any("xf"), ys, yz}),
                      P::Op("QuantizeLinear", {P::Any("xf"), ys})});
  return {Rule{"qdq_matmul", std::move(root), &Replace},
          Rule{"qdq_gemm", std::move(groot), &ReplaceGemm},
          Rule{"qdq_conv", std::move(croot), &ReplaceConv},
          Rule{"qdq_add", std::move(aroot), &ReplaceAdd},
          Rule{"qdq_requantize_relu", std::move(rroot), &ReplaceRequantizeRelu},
          Rule{"qdq_requantize", std::move(qroot), &ReplaceRequantize}};
}

}  // namespace dynvm::compiler::rewrite
