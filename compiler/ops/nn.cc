// Neural-network operators: MatMul, Gemm, Einsum, Det, convolutions, Resize (and Upsample,
// lowered to it), pooling, normalizations, losses and the recurrent layers.
#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
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

absl::Status MatMul(InferContext& c) {
  const Shape* a = c.input_shape(0);
  const Shape* b = c.input_shape(1);
  if (!a || !b) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  if (a->empty() || b->empty()) return c.Error("MatMul inputs must have rank >= 1");
  Shape sa = *a, sb = *b;
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), c.sym().Const(1));
  if (b1) sb.push_back(c.sym().Const(1));
  Shape batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
  absl::StatusOr<Shape> batch = BroadcastShapes(c.sym(), batch_a, batch_b);
  if (!batch.ok()) return c.Error(batch.status().message());
  Dim ka = sa[sa.size() - 1], kb = sb[sb.size() - 2];
  auto cka = SymbolicContext::AsConst(ka), ckb = SymbolicContext::AsConst(kb);
  if (cka && ckb && *cka != *ckb) {
    return c.Error(
        absl::StrCat("inner dims differ: ", ShapeToString(*a), " x ", ShapeToString(*b)));
  }
  Shape out = *batch;
  if (!a1) out.push_back(sa[sa.size() - 2]);
  if (!b1) out.push_back(sb[sb.size() - 1]);
  c.SetOutput(0, c.input_dtype(0), out);
  return absl::OkStatus();
}

absl::Status Gemm(InferContext& c) {
  const Shape* a = c.input_shape(0);
  const Shape* b = c.input_shape(1);
  if ((a && a->size() != 2) || (b && b->size() != 2)) return c.Error("Gemm inputs must be 2-D");
  absl::StatusOr<int64_t> ta = c.GetInt("transA", 0), tb = c.GetInt("transB", 0);
  if (!ta.ok()) return ta.status();
  if (!tb.ok()) return tb.status();
  if (!a || !b) {  // an operand of unknown rank (data-dependent control flow): 2-D all the same
    c.SetOutputDynamic(0, c.input_dtype(0), 2);
    return absl::OkStatus();
  }
  Dim m = *ta ? (*a)[1] : (*a)[0];
  Dim n = *tb ? (*b)[0] : (*b)[1];
  c.SetOutput(0, c.input_dtype(0), {m, n});
  return absl::OkStatus();
}

absl::Status LayerNorm(InferContext& c) {
  const Shape* in = c.input_shape(0);
  if (in == nullptr) {  // unknown rank: the kernel checks the axis
    absl::StatusOr<int64_t> stash = c.GetInt("stash_type", 1);
    if (!stash.ok()) return stash.status();
    c.SetOutputUnknown(0, c.input_dtype(0));
    for (size_t i = 1; i < 3; ++i)
      c.SetOutputUnknown(i, *stash == 1 ? DType::kF32 : c.input_dtype(0));
    return absl::OkStatus();
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, c.GetInt("axis", -1));
  DYNVM_ASSIGN_OR_RETURN(int ax, Axis(c, axis, static_cast<int>(in->size())));
  c.SetOutput(0, c.input_dtype(0), *in);
  Shape stat = *in;
  for (size_t i = ax; i < stat.size(); ++i) stat[i] = c.sym().Const(1);
  absl::StatusOr<int64_t> stash = c.GetInt("stash_type", 1);
  if (!stash.ok()) return stash.status();
  const DType sd = *stash == 1 ? DType::kF32 : c.input_dtype(0);
  c.SetOutput(1, sd, stat);
  c.SetOutput(2, sd, stat);
  return absl::OkStatus();
}

absl::Status Rnn(InferContext& c, int gates, bool has_c) {
  const Shape* x = c.input_shape(0);
  const Shape* w = c.input_shape(1);
  // X or W of unknown rank (data-dependent control flow before the layer): typed all the same;
  // the sizes nothing else tells come from the kernel, which checks the ranks.
  if ((x && x->size() != 3) || (w && w->size() != 3)) return c.Error("X and W must be 3-D");
  DYNVM_ASSIGN_OR_RETURN(int64_t layout, c.GetInt("layout", 0));
  DYNVM_ASSIGN_OR_RETURN(std::string direction, c.GetString("direction", "forward"));
  Dim num_dir = c.sym().Const(direction == "bidirectional" ? 2 : 1);
  absl::StatusOr<int64_t> hidden_attr = c.GetInt("hidden_size", -1);
  if (!hidden_attr.ok()) return hidden_attr.status();
  if (!x || (!w && *hidden_attr <= 0)) {
    const DType t = c.input_dtype(0);
    c.SetOutputDynamic(0, t, 4);
    c.SetOutputDynamic(1, t, 3);
    if (has_c) c.SetOutputDynamic(2, t, 3);
    return absl::OkStatus();
  }
  Dim hidden = *hidden_attr > 0 ? c.sym().Const(*hidden_attr)
                                : c.sym().FloorDiv((*w)[1], c.sym().Const(gates));
  Dim seq = layout ? (*x)[1] : (*x)[0];
  Dim batch = layout ? (*x)[0] : (*x)[1];
  const DType t = c.input_dtype(0);
  if (layout) {
    c.SetOutput(0, t, {batch, seq, num_dir, hidden});
    c.SetOutput(1, t, {batch, num_dir, hidden});
    if (has_c) c.SetOutput(2, t, {batch, num_dir, hidden});
  } else {
    c.SetOutput(0, t, {seq, num_dir, batch, hidden});
    c.SetOutput(1, t, {num_dir, batch, hidden});
    if (has_c) c.SetOutput(2, t, {num_dir, batch, hidden});
  }
  return absl::OkStatus();
}

absl::Status LstmShape(InferContext& c) { return Rnn(c, 4, true); }
absl::Status GruShape(InferContext& c) { return Rnn(c, 3, false); }
absl::Status RnnShape(InferContext& c) { return Rnn(c, 1, false); }

// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: the loss per target element
// (reduction "none") or a scalar; SoftmaxCrossEntropyLoss's log_prob has the scores' shape.
absl::Status Loss(InferContext& c) {
  DYNVM_ASSIGN_OR_RETURN(std::string reduction, c.GetString("reduction", "mean"));
  const DType dtype = c.input_dtype(0);
  if (reduction != "none") {
    c.SetOutput(0, dtype, {});
  } else if (c.input_shape(1)) {
    c.SetOutput(0, dtype, *c.input_shape(1));
  } else {
    c.SetOutputUnknown(0, dtype);
  }
  if (c.input_shape(0)) {
    c.SetOutput(1, dtype, *c.input_shape(0));
  } else {
    c.SetOutputUnknown(1, dtype);
  }
  return absl::OkStatus();
}

// Pooling: [N, C, spatial...]; the spatial sizes are left to the kernel (auto_pad, ceil_mode),
// except for the global pools (all ones).
absl::Status Pool(InferContext& c) {
  const std::vector<Dim>* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    c.SetOutputUnknown(1, DType::kI64);
    return absl::OkStatus();
  }
  if (x->size() < 3) return c.Error("pooling needs an input of rank 3 or more");
  if (c.node().op == ops::kGlobalMaxPool || c.node().op == ops::kGlobalAveragePool ||
      c.node().op == "GlobalLpPool") {
    std::vector<Dim> dims(x->begin(), x->begin() + 2);
    dims.resize(x->size(), c.sym().Const(1));
    c.SetOutput(0, c.input_dtype(0), std::move(dims));
    return absl::OkStatus();
  }
  if (std::optional<std::vector<Dim>> dims = StaticPoolShape(c)) {
    c.SetOutput(0, c.input_dtype(0), *dims);
    c.SetOutput(1, DType::kI64, *std::move(dims));
    return absl::OkStatus();
  }
  c.SetOutputDynamic(0, c.input_dtype(0), static_cast<int>(x->size()));
  c.SetOutputDynamic(1, DType::kI64, static_cast<int>(x->size()));
  return absl::OkStatus();
}

// Conv: [N, M, spatial...], the spatial sizes left to the kernel.
absl::Status ConvOp(InferContext& c) {
  const std::vector<Dim>* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
  } else {
    c.SetOutputDynamic(0, c.input_dtype(0), static_cast<int>(x->size()));
  }
  return absl::OkStatus();
}

// BatchNormalization: Y like X; running mean and variance (training mode) like the scale.
// The scale, B, mean and var hold one value per channel (X's dim 1): one of another rank or
// length is refused here when both sizes are known, by the kernel at run time otherwise.
absl::Status BatchNorm(InferContext& c) {
  static constexpr const char* kParams[] = {"X", "scale", "B", "input_mean", "input_var"};
  DYNVM_ASSIGN_OR_RETURN(int64_t spatial, c.GetInt("spatial", 1));
  const std::vector<Dim>* x = c.input_shape(0);
  const std::optional<int64_t> channels =
      x != nullptr && x->size() >= 2 ? SymbolicContext::AsConst((*x)[1]) : std::nullopt;
  for (size_t i = 1; i < 5 && spatial == 1; ++i) {
    const std::vector<Dim>* p = c.input_shape(i);
    if (p == nullptr) continue;
    if (p->size() != 1) {
      return c.Error(absl::StrCat(
          kParams[i], " must hold one value per channel (rank 1), got rank ", p->size()));
    }
    const std::optional<int64_t> len = SymbolicContext::AsConst((*p)[0]);
    if (channels && len && *len != *channels) {
      return c.Error(
          absl::StrCat(kParams[i], " holds ", *len, " values, but X has ", *channels, " channels"));
    }
  }
  if (c.input_shape(0)) {
    c.SetOutput(0, c.input_dtype(0), *c.input_shape(0));
  } else {
    c.SetOutputUnknown(0, c.input_dtype(0));
  }
  for (size_t i = 1; i < 3; ++i) {
    if (c.input_shape(1)) {
      c.SetOutput(i, c.input_dtype(1), *c.input_shape(1));
    } else {
      c.SetOutputUnknown(i, c.input_dtype(1));
    }
  }
  return absl::OkStatus();
}

// Einsum: the sizes come from the equation at run time.
absl::Status EinsumShape(InferContext& c) {
  c.SetOutputUnknown(0, c.input_dtype(0));
  return absl::OkStatus();
}

// Det: the batch dims of a [..., M, M] input.
absl::Status DetShape(InferContext& c) {
  const std::vector<Dim>* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
  } else if (x->size() < 2) {
    return c.Error("Det needs a [..., M, M] input");
  } else {
    c.SetOutput(0, c.input_dtype(0), std::vector<Dim>(x->begin(), x->end() - 2));
  }
  return absl::OkStatus();
}

// Upsample (opsets 7 to 9) is Resize with asymmetric coordinates, nearest rounding down, and no
// roi; opsets 7 and 8 give the scales as an attribute.
absl::Status LowerUpsample(LowerContext& c) {
  Node& n = c.node;
  const AttrValue* scales = n.attr("scales");
  Value* scales_value = n.inputs.size() > 1 ? n.inputs[1] : nullptr;
  if (scales != nullptr) {
    if (scales->type != AttrValue::Type::kFloats) {
      return absl::InvalidArgumentError(
          absl::StrCat(c.label, ": Upsample: 'scales' must be floats"));
    }
    absl::StatusOr<Tensor> t = Tensor::FromVector<float>(
        DType::kF32, {static_cast<int64_t>(scales->floats.size())}, scales->floats);
    if (!t.ok()) return t.status();
    scales_value = c.module.NewConstant(*std::move(t), absl::StrCat(n.name, "/scales"));
    n.attrs.erase("scales");
  }
  if (n.inputs.empty() || scales_value == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(c.label, ": Upsample needs X and scales"));
  }
  n.op = std::string(ops::kResize);
  n.inputs = {n.inputs[0], nullptr, scales_value};
  for (const auto& [name, value] :
       {std::pair<const char*, const char*>{"coordinate_transformation_mode", "asymmetric"},
        {"nearest_mode", "floor"}}) {
    AttrValue v;
    v.type = AttrValue::Type::kString;
    v.s = value;
    n.attrs[name] = v;
  }
  return absl::OkStatus();
}

// Resize 10 differs from 11 on (the kernel refuses it, naming the difference).
absl::Status LowerResize(LowerContext& c) {
  if (c.opset < 11) {
    AttrValue v10;
    v10.type = AttrValue::Type::kInt;
    v10.i = 1;
    c.node.attrs["opset10"] = v10;
  }
  return absl::OkStatus();
}

// Attention (opset 23): Y [B, Sq, qN Hv] (3-D inputs, with q_num_heads and kv_num_heads) or
// [B, qN, Sq, Hv] (4-D); present_key/value [B, kvN, P + Skv, H | Hv]. Kernel:
// kernels/reference/msft_attention.cc.
absl::Status AttentionShape(InferContext& c) {
  if (c.num_outputs() < 1 || c.num_outputs() > 4) return c.Error("has one to four outputs");
  DYNVM_ASSIGN_OR_RETURN(int64_t qk_mode, c.GetInt("qk_matmul_output_mode", 0));
  if (c.has_output(3) && (qk_mode < 0 || qk_mode > 3)) {
    return absl::UnimplementedError(absl::StrCat("Attention: qk_matmul_output_mode ", qk_mode,
                                                 " is not supported (0, 1, 2 or 3)"));
  }
  const DType dt = c.input_dtype(0);
  if (dt != DType::kF32 && dt != DType::kF16) {
    return absl::UnimplementedError(
        absl::StrCat("Attention: Q of dtype ", DTypeName(dt), " is not supported (f32, f16)"));
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t qn, c.GetInt("q_num_heads", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t kvn, c.GetInt("kv_num_heads", 0));
  const Shape* q = c.input_shape(0);
  const Shape* k = c.input_shape(1);
  const Shape* v = c.input_shape(2);
  if (q == nullptr || k == nullptr || v == nullptr) {
    for (size_t i = 0; i < 4; ++i) c.SetOutputUnknown(i, dt);
    return absl::OkStatus();
  }
  const size_t r = q->size();
  if ((r != 3 && r != 4) || k->size() != r || v->size() != r) {
    return c.Error(
        "Q, K and V must all be 3-D [batch, sequence, hidden] or all 4-D "
        "[batch, heads, sequence, head_size]");
  }
  const Shape* past = c.input_shape(4);
  if (past != nullptr && past->size() != 4) {
    return c.Error("past_key must be 4-D [batch, kv_num_heads, past, head_size]");
  }
  if ((c.has_input(4) || c.has_input(5)) && (!c.has_output(1) || !c.has_output(2))) {
    return c.Error(
        "a past needs the present_key and present_value outputs (ONNX Runtime's kernel requires "
        "them)");
  }
  Dim len = r == 3 ? (*k)[1] : (*k)[2];
  if (past != nullptr) len = c.sym().Add((*past)[2], len);
  if (r == 4) {
    c.SetOutput(3, dt, {(*q)[0], (*q)[1], (*q)[2], len});
    c.SetOutput(0, dt, {(*q)[0], (*q)[1], (*q)[2], (*v)[3]});
    c.SetOutput(1, dt, {(*q)[0], (*k)[1], len, (*k)[3]});
    c.SetOutput(2, dt, {(*q)[0], (*v)[1], len, (*v)[3]});
    return absl::OkStatus();
  }
  if (qn <= 0 || kvn <= 0 || qn % kvn != 0) {
    return c.Error(absl::StrCat("3-D inputs need q_num_heads (", qn, ") and kv_num_heads (", kvn,
                                "), positive, q_num_heads a multiple of kv_num_heads"));
  }
  const std::tuple<const Shape*, int64_t, const char*> parts[] = {
      {q, qn, "Q"}, {k, kvn, "K"}, {v, kvn, "V"}};
  for (const auto& [x, heads, what] : parts) {
    auto hidden = SymbolicContext::AsConst((*x)[2]);
    if (hidden && (*hidden <= 0 || *hidden % heads != 0)) {
      return c.Error(absl::StrCat(what, "'s hidden size ", *hidden,
                                  " is not a positive multiple of its heads (", heads, ")"));
    }
  }
  const Dim qnd = c.sym().Const(qn), kvd = c.sym().Const(kvn);
  const Dim v_head = c.sym().FloorDiv((*v)[2], kvd);
  c.SetOutput(0, dt, {(*q)[0], (*q)[1], c.sym().Mul(v_head, qnd)});
  c.SetOutput(3, dt, {(*q)[0], qnd, (*q)[1], len});
  c.SetOutput(1, dt, {(*q)[0], kvd, len, c.sym().FloorDiv((*k)[2], kvd)});
  c.SetOutput(2, dt, {(*q)[0], kvd, len, v_head});
  return absl::OkStatus();
}

// AffineGrid (opset 20): theta [N, k, k+1], size (N, C, spatial...) -> [N, spatial..., k].
absl::Status AffineGridShape(InferContext& c) {
  const DType dt = c.input_dtype(0);
  const std::vector<Dim>* size = c.content(1);
  if (size != nullptr && (size->size() == 4 || size->size() == 5)) {
    Shape out = {(*size)[0]};
    for (size_t i = 2; i < size->size(); ++i) out.push_back((*size)[i]);
    out.push_back(c.sym().Const(static_cast<int64_t>(size->size()) - 2));
    c.SetOutput(0, dt, out);
    return absl::OkStatus();
  }
  if (std::optional<std::vector<int64_t>> v = ConstInts(c, 1);
      v && (v->size() == 4 || v->size() == 5)) {
    Shape out = {c.sym().Const((*v)[0])};
    for (size_t i = 2; i < v->size(); ++i) out.push_back(c.sym().Const((*v)[i]));
    out.push_back(c.sym().Const(static_cast<int64_t>(v->size()) - 2));
    c.SetOutput(0, dt, out);
    return absl::OkStatus();
  }
  const Shape* theta = c.input_shape(0);
  if (theta != nullptr && theta->size() == 3) {
    if (std::optional<int64_t> k = SymbolicContext::AsConst((*theta)[1]);
        k && (*k == 2 || *k == 3)) {
      c.SetOutputDynamic(0, dt, static_cast<int>(*k) + 2);
      return absl::OkStatus();
    }
  }
  c.SetOutputUnknown(0, dt);
  return absl::OkStatus();
}

// GroupNormalization before opset 21 scales per group ([num_groups]); from 21 per channel.
absl::Status LowerGroupNorm(LowerContext& c) {
  if (c.opset < 21) {
    AttrValue per_group;
    per_group.type = AttrValue::Type::kInt;
    per_group.i = 1;
    c.node.attrs["group_scale"] = per_group;
  }
  c.node.attrs.erase("stash_type");  // the kernel sums in double
  return absl::OkStatus();
}

// stash_type: the reference kernels accumulate in double whatever it asks.
absl::Status LowerStashType(LowerContext& c) {
  c.node.attrs.erase("stash_type");
  return absl::OkStatus();
}

}  // namespace

absl::Status InferConvShape(InferContext& c) {
  const std::vector<Dim>* x = c.input_shape(0);
  const std::vector<Dim>* w = c.input_shape(1);
  const DType dtype = c.input_dtype(0);
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> pads, c.GetInts("pads", {}));
  for (int64_t p : pads) {
    if (p < 0) return c.Error(absl::StrCat("negative pad ", p));
  }
  if (x == nullptr) {
    c.SetOutputUnknown(0, dtype);
    return absl::OkStatus();
  }
  const int rank = static_cast<int>(x->size());
  if (rank < 3) return c.Error("X must be [N, C, D...]");
  if (w == nullptr) {
    c.SetOutputDynamic(0, dtype, rank);
    return absl::OkStatus();
  }
  if (static_cast<int>(w->size()) != rank) {
    return c.Error(absl::StrCat("W has rank ", w->size(), ", X has rank ", rank));
  }
  const int k = rank - 2;
  DYNVM_ASSIGN_OR_RETURN(int64_t group, c.GetInt("group", 1));
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, c.GetInts("kernel_shape", {}));
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> strides, c.GetInts("strides", {}));
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> dilations, c.GetInts("dilations", {}));
  DYNVM_ASSIGN_OR_RETURN(std::string auto_pad, c.GetString("auto_pad", "NOTSET"));
  const auto sk = static_cast<size_t>(k);
  if (group < 1 || (!kernel.empty() && kernel.size() != sk) ||
      (!strides.empty() && strides.size() != sk) ||
      (!dilations.empty() && dilations.size() != sk) || (!pads.empty() && pads.size() != 2 * sk)) {
    return c.Error("group, kernel_shape, strides, dilations or pads do not match the input's rank");
  }
  const std::optional<int64_t> xc = SymbolicContext::AsConst((*x)[1]);
  const std::optional<int64_t> wc = SymbolicContext::AsConst((*w)[1]);
  if (xc && wc && *xc != *wc * group) {
    return c.Error(absl::StrCat("X has ", *xc, " channels, W expects ", *wc, " x group ", group));
  }
  std::vector<Dim> out = {(*x)[0], (*w)[0]};
  for (size_t i = 0; i < sk; ++i) {
    const std::optional<int64_t> in = SymbolicContext::AsConst((*x)[i + 2]);
    const std::optional<int64_t> kd = SymbolicContext::AsConst((*w)[i + 2]);
    const int64_t st = strides.empty() ? 1 : strides[i];
    const int64_t dl = dilations.empty() ? 1 : dilations[i];
    if (st < 1 || dl < 1) return c.Error("strides and dilations must be positive");
    if (!in || !kd) break;
    const int64_t span = (*kd - 1) * dl + 1;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out.push_back(c.sym().Const((*in + st - 1) / st));
      continue;
    }
    const int64_t pb = auto_pad == "NOTSET" && !pads.empty() ? pads[i] : 0;
    const int64_t pe = auto_pad == "NOTSET" && !pads.empty() ? pads[sk + i] : 0;
    const int64_t room = *in + pb + pe - span;
    if (room < 0) {
      return c.Error(absl::StrCat("the kernel (", span, ") is larger than the padded input (",
                                  *in + pb + pe, ")"));
    }
    out.push_back(c.sym().Const(room / st + 1));
  }
  if (out.size() == static_cast<size_t>(rank)) {
    c.SetOutput(0, dtype, std::move(out));
    return absl::OkStatus();
  }
  // Symbolic spatial dims (an audio or image length): the kernel decides them; the batch and the
  // output channels are known all the same (checked at run time, codegen.cc).
  out.resize(2);
  for (int i = 2; i < rank; ++i) out.push_back(c.sym().Fresh("d"));
  c.SetOutput(0, dtype, std::move(out));
  if (c.has_output(0)) c.node().outputs[0]->dynamic = true;
  return absl::OkStatus();
}

absl::Status InferFusedConvShape(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(InferConvShape(c));
  if (!c.has_input(4)) return absl::OkStatus();
  const std::vector<Dim>* x = c.input_shape(0);
  const std::vector<Dim>* w = c.input_shape(1);
  const std::vector<Dim>* dw = c.input_shape(4);
  DYNVM_ASSIGN_OR_RETURN(int64_t stride, c.GetInt("dw_stride", 1));
  if (stride != 1 && stride != 2) return c.Error("dw_stride must be 1 or 2");
  if (dw != nullptr) {
    const std::optional<int64_t> m =
        w != nullptr && w->size() == 4 ? SymbolicContext::AsConst((*w)[0]) : std::nullopt;
    const std::optional<int64_t> d0 =
        dw->size() == 4 ? SymbolicContext::AsConst((*dw)[0]) : std::nullopt;
    if (dw->size() != 4 || SymbolicContext::AsConst((*dw)[1]) != 1 ||
        SymbolicContext::AsConst((*dw)[2]) != 3 || SymbolicContext::AsConst((*dw)[3]) != 3 ||
        (m && d0 && *m != *d0)) {
      return c.Error("the depthwise weights must be [M, 1, 3, 3], M the first conv's outputs");
    }
  }
  const DType dtype = c.input_dtype(0);
  if (x == nullptr || w == nullptr || x->size() != 4) {
    c.SetOutputDynamic(0, dtype, 4);
    return absl::OkStatus();
  }
  // The first conv is 1x1, stride 1, unpadded: its output keeps X's spatial dims.
  const Dim s = c.sym().Const(stride);
  c.SetOutput(0, dtype,
              {(*x)[0], (*w)[0], c.sym().CeilDiv((*x)[2], s), c.sym().CeilDiv((*x)[3], s)});
  return absl::OkStatus();
}

std::optional<std::vector<Dim>> StaticPoolShape(InferContext& c) {
  const std::vector<Dim>* x = c.input_shape(0);
  if (x == nullptr || x->size() < 3) return std::nullopt;
  const size_t k = x->size() - 2;
  absl::StatusOr<std::vector<int64_t>> kernel = c.GetInts("kernel_shape", {});
  absl::StatusOr<std::vector<int64_t>> strides = c.GetInts("strides", {});
  absl::StatusOr<std::vector<int64_t>> dilations = c.GetInts("dilations", {});
  absl::StatusOr<std::vector<int64_t>> pads = c.GetInts("pads", {});
  absl::StatusOr<std::string> auto_pad = c.GetString("auto_pad", "NOTSET");
  absl::StatusOr<int64_t> ceil_mode = c.GetInt("ceil_mode", 0);
  if (!kernel.ok() || !strides.ok() || !dilations.ok() || !pads.ok() || !auto_pad.ok() ||
      !ceil_mode.ok() || kernel->size() != k || (!strides->empty() && strides->size() != k) ||
      (!dilations->empty() && dilations->size() != k) ||
      (!pads->empty() && pads->size() != 2 * k)) {
    return std::nullopt;
  }
  const bool same = *auto_pad == "SAME_UPPER" || *auto_pad == "SAME_LOWER";
  if (!same && *auto_pad != "NOTSET" && *auto_pad != "VALID" && !auto_pad->empty()) {
    return std::nullopt;
  }
  std::vector<Dim> out = {(*x)[0], (*x)[1]};
  for (size_t i = 0; i < k; ++i) {
    const std::optional<int64_t> in = SymbolicContext::AsConst((*x)[i + 2]);
    const int64_t kd = (*kernel)[i];
    const int64_t st = strides->empty() ? 1 : (*strides)[i];
    const int64_t dl = dilations->empty() ? 1 : (*dilations)[i];
    if (!in || kd < 1 || st < 1 || dl < 1) return std::nullopt;
    const int64_t span = (kd - 1) * dl + 1;
    if (same) {
      out.push_back(c.sym().Const((*in + st - 1) / st));
      continue;
    }
    const bool use_pads = (*auto_pad == "NOTSET" || auto_pad->empty()) && !pads->empty();
    const int64_t pb = use_pads ? (*pads)[i] : 0, pe = use_pads ? (*pads)[k + i] : 0;
    if (pb < 0 || pe < 0) return std::nullopt;
    const int64_t room = *in + pb + pe - span;
    if (room < 0) return std::nullopt;
    int64_t o = (*ceil_mode != 0 ? (room + st - 1) / st : room / st) + 1;
    if (*ceil_mode != 0 && (o - 1) * st >= *in + pb) --o;
    out.push_back(c.sym().Const(o));
  }
  return out;
}

namespace {}  // namespace

void DefineNnOps(OpTable& t) {
  static constexpr OpRow kRows[] = {
      {ops::kMatMul, 1, "1:2:3 9:2:3 13:2:3", "", kPure, MatMul},
      {ops::kGemm, 7, "1:3:7 6:3:7 7:3:7 9:3:7 11:3:3 13:3:3", "alpha:f beta:f transA:i transB:i",
       kPure, Gemm},
      {"Einsum", 7, "12:0:1", "equation:s", kPure, EinsumShape},
      {"Det", 7, "11:1:1 22:1:1", "", kPure, DetShape},
      {ops::kConv, 1, "1:3:3 11:3:3 22:3:3",
       "auto_pad:s dilations:I group:i kernel_shape:I pads:I strides:I", kPure, InferConvShape},
      {"ConvTranspose", 1, "1:3:3 11:3:3 22:3:3",
       "auto_pad:s dilations:I group:i kernel_shape:I output_padding:I output_shape:I pads:I "
       "strides:I",
       kPure, ConvOp},
      {ops::kResize, 7, "10:2:3 11:4:1 13:4:1 18:4:1 19:4:1",
       "antialias:i@18 axes:I@18 coordinate_transformation_mode:s cubic_coeff_a:f "
       "exclude_outside:i extrapolation_value:f keep_aspect_ratio_policy:s@18 mode:s "
       "nearest_mode:s",
       kPure, ConvOp, LowerResize},
      {ops::kUpsample, 7, "7:1:1 9:2:3", "mode:s scales:F", kPure | kNoKernel, nullptr,
       LowerUpsample},
      {ops::kMaxPool, 1, "1:1:1 8:1:1 10:1:1 11:1:1 12:1:1 22:1:1",
       "auto_pad:s ceil_mode:i dilations:I kernel_shape:I pads:I storage_order:i strides:I", kPure,
       Pool},
      {ops::kAveragePool, 1, "1:1:1 7:1:1 10:1:1 11:1:1 19:1:1 22:1:1",
       "auto_pad:s ceil_mode:i count_include_pad:i dilations:I@19 kernel_shape:I pads:I strides:I",
       kPure, Pool},
      {ops::kGlobalMaxPool, 1, "1:1:1 22:1:1", "", kPure, Pool},
      {ops::kGlobalAveragePool, 1, "1:1:1 22:1:1", "", kPure, Pool},
      {"LpPool", 2, "2:1:1 11:1:1 18:1:1 22:1:1",
       "auto_pad:s ceil_mode:i@18 dilations:I@18 kernel_shape:I p:i pads:I strides:I", kPure, Pool},
      {"GlobalLpPool", 2, "2:1:1 22:1:1", "p:i", kPure, Pool},
      {ops::kBatchNormalization, 6, "6:5:31 7:5:31 9:5:31 14:5:31 15:5:31",
       "epsilon:f is_test:i momentum:f spatial:i training_mode:i", kPure, BatchNorm},
      {"InstanceNormalization", 6, "6:3:7 22:3:7", "epsilon:f", kPure, SameAsInput},
      {"GroupNormalization", 7, "18:3:7 21:3:7", "epsilon:f num_groups:i stash_type:i@21", kPure,
       SameAsInput, LowerGroupNorm},
      {"RMSNormalization", 7, "23:2:3", "axis:i epsilon:f stash_type:i", kPure, SameAsInput,
       LowerStashType},
      {"RotaryEmbedding", 7, "23:4:7", "interleaved:i num_heads:i rotary_embedding_dim:i", kPure,
       SameAsInput},
      {"AffineGrid", 7, "20:2:3", "align_corners:i", kPure, AffineGridShape},
      // Operators of opsets 18-23 dynvm refuses, with the reason (docs/onnx.md).
      {"Col2Im", 7, "18:x", "", kNoKernel, nullptr, nullptr, nullptr, "not implemented"},
      {"DeformConv", 7, "19:x 22:x", "", kNoKernel, nullptr, nullptr, nullptr, "not implemented"},
      {"ImageDecoder", 7, "20:x", "", kNoKernel, nullptr, nullptr, nullptr,
       "decoding image files is not an inference kernel dynvm has"},
      // Q, K, V, attn_mask?, past_key?, past_value? -> Y, present_key?, present_value?
      {"Attention", 7, "23:6:7",
       "is_causal:i kv_num_heads:i q_num_heads:i qk_matmul_output_mode:i scale:f softcap:f "
       "softmax_precision:i",
       kPure, AttentionShape},
      {"LRN", 1, "1:1:1 13:1:1", "alpha:f beta:f bias:f size:i", kPure, SameAsInput},
      {ops::kLayerNormalization, 7, "17:3:3", "axis:i epsilon:f stash_type:i", kPure, LayerNorm},
      {"NegativeLogLikelihoodLoss", 7, "12:3:3 13:3:3 22:3:3", "ignore_index:i reduction:s", kPure,
       Loss},
      {"SoftmaxCrossEntropyLoss", 7, "12:3:3 13:3:3", "ignore_index:i reduction:s", kPure, Loss},
      {ops::kLSTM, 7, "1:8:7 7:8:7 14:8:7 22:8:7",
       "activation_alpha:F activation_beta:F activations:S clip:f direction:s hidden_size:i "
       "input_forget:i layout:i",
       kPure, LstmShape},
      {ops::kGRU, 7, "1:6:7 3:6:7 7:6:7 14:6:7 22:6:7",
       "activation_alpha:F activation_beta:F activations:S clip:f direction:s hidden_size:i "
       "layout:i linear_before_reset:i",
       kPure, GruShape},
      {ops::kRNN, 7, "1:6:7 7:6:7 14:6:7 22:6:7",
       "activation_alpha:F activation_beta:F activations:S clip:f direction:s hidden_size:i "
       "layout:i",
       kPure, RnnShape},
  };
  t.Add("", kRows);
}

}  // namespace dynvm::compiler
