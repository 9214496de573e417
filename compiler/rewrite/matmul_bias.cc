// Linear-layer rules: a product with its bias (and an activation after it) becomes one
// dynvm::Linear (kernels/reference/linear.h), the forms torch.onnx.export writes for nn.Linear
// at every opset from 11 to 17. x, w, the product and the bias are f32.
//
// matmul_bias:       Add(MatMul(x, w), b) (either Add operand order): x of known rank >= 1, w
//                    any 2-D value (an initializer or not) whose N is a known constant, b a
//                    constant holding N values along its last axis, every other dim 1, of rank
//                    at most the product's (it must not broadcast the product)
//                    -> dynvm::Linear(x, w, b)
// gemm_activation:   act(Gemm(a, w[, c])) with transA = 0, alpha = 1, beta = 1 (or no c), c a
//                    constant [N] or [1, N], act one of the activations below
//                    -> dynvm::Linear(a, w, c, trans_b = transB, activation = act)
// linear_activation: act(dynvm::Linear(...)) with no activation yet, the Linear read only there;
//                    act is Relu, Tanh, Sigmoid, dynvm::Gelu, dynvm::GeluTanh or dynvm::Silu
//                    -> dynvm::Linear with activation = act
// Refused: a bias of another shape (varying along another axis, or broadcasting the product),
// a non-constant bias, N not a constant, the product (or an unfused Linear) read elsewhere, a
// Gemm with transA, alpha or beta other than 1, or a C that is not one row; other dtypes.
// A plain Gemm (no activation) is left alone: its kernel already adds C as the bias. Off when
// the compile quantizes weights (the quantize-weights pass takes MatMul weights).
#include <optional>
#include <string>
#include <vector>

#include "compiler/builder.h"
#include "compiler/rewrite/rules.h"
#include "compiler/symbolic.h"

namespace dynvm::compiler::rewrite {
namespace {

using P = Pattern;

bool F32(const Value& v) { return v.dtype == DType::kF32 && v.kind == ObjectKind::kTensor; }

P X() {
  return P::Any("x").Where([](const Value& v, const Match&) { return F32(v) && v.rank() >= 1; });
}

P W() {
  return P::Any("w").Where([](const Value& v, const Match&) { return F32(v) && v.rank() == 2; });
}

P Bias(const std::string& name) {
  return P::Const(name, [](const Value& v, const Match&) { return F32(v); });
}

// The constant bias holds n values along its last axis (every other dim 1) and has rank at
// most max_rank. (It is passed as is: it stays the same weight the model stores.)
bool BiasFits(const Value& b, int64_t n, int max_rank) {
  const Tensor& t = *b.constant;
  return t.rank() >= 1 && t.rank() <= max_rank && t.dim(t.rank() - 1) == n && t.numel() == n;
}

// W's N as a constant (w is [K, N], or [N, K] with trans_b).
std::optional<int64_t> ConstN(const Value& w, bool trans_b) {
  if (w.rank() != 2) return std::nullopt;
  return SymbolicContext::AsConst((*w.shape)[trans_b ? 0 : 1]);
}

Value* FuseMatMulBias(Emitter& e, const Match& m) {
  const Value& b = *m["b"];
  const Value& mm = *m["mm"];
  if (!F32(mm) || mm.rank() < 1) return nullptr;
  const std::optional<int64_t> n = ConstN(*m["w"], false);
  if (!n) return nullptr;
  if (!BiasFits(b, *n, mm.rank())) return nullptr;
  Attrs attrs;
  attrs["trans_b"] = AttrInt(0);
  attrs["activation"] = AttrString("");
  return e.Op("Linear", {m["x"], m["w"], m["b"]}, std::move(attrs), "dynvm");
}

// The activation a matched act node applies, as Linear's attribute.
std::optional<std::string> ActivationName(const Node& act) {
  if (act.domain.empty() && (act.op == "Relu" || act.op == "Tanh" || act.op == "Sigmoid")) {
    return act.op;
  }
  if (act.domain == "dynvm" && (act.op == "Gelu" || act.op == "GeluTanh" || act.op == "Silu")) {
    return act.op;
  }
  return std::nullopt;
}

P Activation(const P& inner) {
  std::vector<P> alts;
  for (const char* op :
       {"Relu", "Tanh", "Sigmoid", "dynvm::Gelu", "dynvm::GeluTanh", "dynvm::Silu"}) {
    alts.push_back(P::Op(op, {inner}).As("act"));
  }
  return P::OneOf(std::move(alts));
}

int64_t IntAttr(const Node& n, const char* name, int64_t def) {
  const AttrValue* a = n.attr(name);
  return a != nullptr ? a->i : def;
}

double FloatAttr(const Node& n, const char* name, double def) {
  const AttrValue* a = n.attr(name);
  return a != nullptr ? a->f : def;
}

Value* FuseGemmActivation(Emitter& e, const Match& m) {
  const Node& gemm = *m.node("gemm");
  std::optional<std::string> act = ActivationName(e.root());
  if (!act || !F32(*gemm.outputs[0])) return nullptr;
  const bool trans_b = IntAttr(gemm, "transB", 0) != 0;
  if (IntAttr(gemm, "transA", 0) != 0 || FloatAttr(gemm, "alpha", 1.0) != 1.0) return nullptr;
  if (m["x"]->rank() != 2) return nullptr;
  const std::optional<int64_t> n = ConstN(*m["w"], trans_b);
  if (!n) return nullptr;
  std::vector<Value*> inputs = {m["x"], m["w"]};
  if (Value* c = m["c"]; c != nullptr) {
    if (FloatAttr(gemm, "beta", 1.0) != 1.0 || !BiasFits(*c, *n, 2)) return nullptr;
    inputs.push_back(c);
  }
  Attrs attrs;
  attrs["trans_b"] = AttrInt(trans_b ? 1 : 0);
  attrs["activation"] = AttrString(*act);
  return e.Op("Linear", std::move(inputs), std::move(attrs), "dynvm");
}

Value* FuseLinearActivation(Emitter& e, const Match& m) {
  const Node& lin = *m.node("lin");
  std::optional<std::string> act = ActivationName(e.root());
  const AttrValue* current = lin.attr("activation");
  if (!act || (current != nullptr && !current->s.empty())) return nullptr;
  Attrs attrs = lin.attrs;
  attrs["activation"] = AttrString(*act);
  return e.Op("Linear", lin.inputs, std::move(attrs), "dynvm");
}

}  // namespace

std::vector<Rule> MatMulBiasRules() {
  std::vector<Rule> rules;
  P mm = P::Op("MatMul", {X(), W()}).As("mm");
  rules.push_back(
      Rule{"matmul_bias", P::Op("Add", {mm, Bias("b")}).Commutative(), &FuseMatMulBias});
  P gemm = P::OneOf(
      {P::Op("Gemm", {X(), W(), Bias("c")}).As("gemm"), P::Op("Gemm", {X(), W()}).As("gemm")});
  rules.push_back(Rule{"gemm_activation", Activation(gemm), &FuseGemmActivation});
  P lin = P::OneOf({P::Op("dynvm::Linear", {P::Any(), P::Any(), P::Any()}),
                    P::Op("dynvm::Linear", {P::Any(), P::Any()})})
              .OneUse()
              .As("lin");
  rules.push_back(Rule{"linear_activation", Activation(lin), &FuseLinearActivation});
  for (Rule& r : rules) r.fuses_weight_products = true;  // dynvm::Linear is not quantized
  return rules;
}

}  // namespace dynvm::compiler::rewrite
