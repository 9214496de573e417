#include "compiler/conv_fusion.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/ops/names.h"
#include "compiler/passes.h"

namespace dynvm::compiler {
namespace {

using UseCounts = absl::flat_hash_map<const Value*, int>;

// Ops the conv fusion takes that compiler/ops/names.h does not name.
constexpr char kConvTranspose[] = "ConvTranspose";
constexpr char kHardSigmoid[] = "HardSigmoid";
constexpr char kMax[] = "Max";
constexpr char kMin[] = "Min";
constexpr char kSplit[] = "Split";

void CountUses(Graph& g, UseCounts& uses) {
  for (auto& n : g.nodes) {
    for (Value* v : n->inputs) {
      if (v != nullptr) ++uses[v];
    }
    for (auto& [name, sub] : n->subgraphs) CountUses(*sub, uses);
  }
  for (Value* v : g.outputs) {
    if (v != nullptr) ++uses[v];
  }
}

void EachGraph(Graph& g, const std::function<void(Graph&)>& fn) {
  fn(g);
  for (auto& n : g.nodes) {
    for (auto& [name, sub] : n->subgraphs) EachGraph(*sub, fn);
  }
}

const AttrValue* Attr(const Node& n, const char* name, AttrValue::Type type) {
  const AttrValue* a = n.attr(name);
  return a != nullptr && a->type == type ? a : nullptr;
}

int64_t IntAttr(const Node& n, const char* name, int64_t def) {
  const AttrValue* a = Attr(n, name, AttrValue::Type::kInt);
  return a != nullptr ? a->i : def;
}

float FloatAttr(const Node& n, const char* name, float def) {
  const AttrValue* a = Attr(n, name, AttrValue::Type::kFloat);
  return a != nullptr ? a->f : def;
}

// A constant f32 tensor's elements, in row-major order; empty when `v` is not one.
std::vector<float> ConstF32(const Value* v) {
  if (v == nullptr || !v->constant || v->constant->dtype() != DType::kF32) return {};
  const Tensor& t = *v->constant;
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = t.data<float>()[t.ElementOffset(i)];
  return out;
}

// Constant integer elements (i64 or i32); nullopt when `v` is not one.
std::optional<std::vector<int64_t>> ConstInts(const Value* v) {
  if (v == nullptr || !v->constant) return std::nullopt;
  const Tensor& t = *v->constant;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::kI64) {
      out.push_back(t.data<int64_t>()[t.ElementOffset(i)]);
    } else if (t.dtype() == DType::kI32) {
      out.push_back(t.data<int32_t>()[t.ElementOffset(i)]);
    } else {
      return std::nullopt;
    }
  }
  return out;
}

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

// The constant operand of a two-input `n` reading `cur` [N, M, spatial...] (a conv's output
// chain: M channels by construction) when it is one f32 value, or (unless `scalar_only`) one per
// channel (dims 1 but the channel axis, aligned from the right, of rank at most cur's), all
// finite: its value per channel (M of them); empty otherwise. Such a constant broadcasts to
// cur's shape whatever its other dims, so `n`'s output is cur's shape even where shape
// inference could not say so (a ConvTranspose's output dims are fresh symbols: Paddle2ONNX's
// bias Add and BatchNormalization after DBNet's upsampling ConvTransposes).
std::vector<float> ChannelConstant(const Node& n, const Value* cur, int64_t m, bool scalar_only) {
  if (!n.domain.empty() || n.inputs.size() != 2 || n.outputs.size() != 1 ||
      n.outputs[0] == nullptr || !cur->shape) {
    return {};
  }
  const Value* k = n.inputs[0] == cur ? n.inputs[1] : n.inputs[0];
  if (k == nullptr || k == cur || !k->constant || k->constant->dtype() != DType::kF32 ||
      (n.inputs[0] != cur && n.inputs[1] != cur)) {
    return {};
  }
  const Tensor& t = *k->constant;
  const int rank = cur->rank();
  if (t.rank() > rank || rank < 2) return {};
  for (int i = 0; i < t.rank(); ++i) {
    const int axis = i + rank - t.rank();
    if (t.dim(i) != 1 && (axis != 1 || t.dim(i) != m || scalar_only)) return {};
  }
  std::vector<float> v = ConstF32(k);
  for (float e : v) {
    if (!std::isfinite(e)) return {};
  }
  if (v.size() == 1) return std::vector<float>(static_cast<size_t>(m), v[0]);
  return v.size() == static_cast<size_t>(m) ? v : std::vector<float>{};
}

// An activation a FusedConv applies (conv.cc's names).
struct Act {
  std::string name;  // empty: none
  float alpha = 0, beta = 0;
};

// One Conv (or ConvTranspose) being fused.
struct Chain {
  Node* conv = nullptr;
  Value* x = nullptr;
  std::vector<float> w, b;  // b empty: no bias
  std::vector<int64_t> w_dims;
  bool transpose = false;    // a ConvTranspose: W is [C, M / group, K...]
  int64_t group = 1, m = 0;  // m: output channels
  Value* sum = nullptr;
  Act act, act2;         // act2: a second activation after act
  Node* last = nullptr;  // the node whose output the FusedConv takes over
  std::vector<Node*> absorbed;
};

class Fuser {
 public:
  Fuser(Module& m, UseCounts& uses, ConvFusionCounts& counts)
      : m_(m), uses_(uses), counts_(counts) {}

  // Folds Pads into the Convs reading them and removes the Pads.
  void FoldPads(Graph& g) {
    std::vector<Node*> dead;
    for (auto& node : g.nodes) {
      Node* n = node.get();
      Chain c;
      if (n->op != ops::kConv || !n->domain.empty() || n->inputs.size() < 2 || !Start(n, &c))
        continue;
      if (Node* p = FoldPad(&c); p != nullptr) dead.push_back(p);
    }
    for (Node* p : dead) {
      for (size_t i = 0; i < g.nodes.size(); ++i) {
        if (g.nodes[i].get() == p) {
          g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      }
    }
  }

  void FuseGraph(Graph& g) {
    absl::flat_hash_map<const Value*, std::vector<Node*>> users;
    for (auto& n : g.nodes) {
      for (Value* v : n->inputs) {
        if (v != nullptr) users[v].push_back(n.get());
      }
    }
    // The one node of this graph reading `v`, when `v` has exactly `n` uses, all in this graph.
    auto sole = [&](const Value* v) -> Node* {
      auto it = users.find(v);
      if (it == users.end() || it->second.size() != 1 || uses_[v] != 1 ||
          consumed_.contains(it->second[0])) {
        return nullptr;
      }
      return it->second[0];
    };
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      Node* n = g.nodes[i].get();
      if ((n->op != ops::kConv && n->op != kConvTranspose) || !n->domain.empty() ||
          n->outputs.size() != 1 || n->outputs[0] == nullptr || n->inputs.size() < 2) {
        continue;
      }
      Chain c;
      if (!Start(n, &c)) continue;
      Value* cur = n->outputs[0];
      c.last = n;
      // BatchNormalizations and Mul/Add by constants (one value, or one per channel) fold into
      // the weights and bias, in any order.
      for (Node* u = sole(cur);
           u != nullptr && (FoldBatchNorm(u, cur, &c) || FoldScale(u, cur, &c)); u = sole(cur)) {
        cur = u->outputs[0];
      }
      if (c.transpose) {  // a ConvTranspose takes the folds only, and stays one
        if (c.last != n) RewriteTranspose(c);
        continue;
      }
      if (Node* add = sole(cur); add != nullptr && add->op == ops::kAdd && add->domain.empty() &&
                                 add->inputs.size() == 2 && add->outputs[0] != nullptr) {
        Value* other = add->inputs[0] == cur ? add->inputs[1] : add->inputs[0];
        if (other != cur && other != nullptr && other->dtype == DType::kF32 &&
            SameShape(other, cur) && SameShape(add->outputs[0], cur)) {
          c.sum = other;
          c.last = add;
          c.absorbed.push_back(add);
          cur = add->outputs[0];
          ++counts_.sums;
        }
      }
      if (Node* act = Activation(cur, users, sole, &c.act, &c.absorbed); act != nullptr) {
        c.last = act;
        c.absorbed.push_back(act);
        cur = act->outputs[0];
        ++counts_.activations;
        if (c.act.name == kHardSigmoid) {
          // max(0, min(1, alpha * x + beta)): both post-ops.
          c.act2 = {"Clip", 0.0f, 1.0f};
          c.act.name = "Affine";
        } else if (Node* act2 = SecondActivation(cur, users, sole, &c); act2 != nullptr) {
          c.last = act2;
          c.absorbed.push_back(act2);
          ++counts_.activations;
        }
      }
      // Nodes the FusedConv absorbed: another chain must not take them (they are dead now).
      consumed_.insert(n);
      for (Node* a : c.absorbed) consumed_.insert(a);
      Rewrite(c);
    }
  }

 private:
  bool Start(Node* n, Chain* c) {
    c->conv = n;
    c->x = n->inputs[0];
    const Value* w = n->inputs[1];
    if (c->x == nullptr || c->x->dtype != DType::kF32 || w == nullptr || !w->constant ||
        w->constant->dtype() != DType::kF32 || w->constant->rank() < 3) {
      return false;
    }
    c->w = ConstF32(w);
    c->w_dims.assign(w->constant->dims().begin(), w->constant->dims().end());
    c->transpose = n->op == kConvTranspose;
    c->group = IntAttr(*n, "group", 1);
    if (c->group < 1 || (c->transpose && c->w_dims[0] % c->group != 0)) return false;
    c->m = c->transpose ? c->w_dims[1] * c->group : c->w_dims[0];
    if (n->inputs.size() > 2 && n->inputs[2] != nullptr) {
      c->b = ConstF32(n->inputs[2]);
      if (c->b.size() != static_cast<size_t>(c->m)) return false;
    }
    return c->m > 0;
  }

  // Multiplies the weights of each output channel o by s(o): W [M, ...] for a Conv,
  // [C, M / group, K...] for a ConvTranspose (o = (input channel's group) * M / group + j).
  static void ScaleOutputs(Chain* c, const std::function<double(size_t)>& s) {
    if (!c->transpose) {
      const size_t per = c->w.size() / static_cast<size_t>(c->m);
      for (size_t o = 0; o < static_cast<size_t>(c->m); ++o) {
        const double f = s(o);
        for (size_t j = 0; j < per; ++j)
          c->w[o * per + j] = static_cast<float>(c->w[o * per + j] * f);
      }
      return;
    }
    const size_t cin = static_cast<size_t>(c->w_dims[0]), mg = static_cast<size_t>(c->w_dims[1]);
    const size_t k = c->w.size() / (cin * mg), per_group = cin / static_cast<size_t>(c->group);
    for (size_t ci = 0; ci < cin; ++ci) {
      for (size_t j = 0; j < mg; ++j) {
        const double f = s((ci / per_group) * mg + j);
        float* w = c->w.data() + (ci * mg + j) * k;
        for (size_t e = 0; e < k; ++e) w[e] = static_cast<float>(w[e] * f);
      }
    }
  }

  // A zero constant Pad on spatial dims only, read only by this Conv: the Conv reads the Pad's
  // input with the pads added to its own. Returns the Pad, now unused.
  Node* FoldPad(Chain* c) {
    Node* p = c->x->producer;
    Node& conv = *c->conv;
    if (p == nullptr || p->op != ops::kPad || !p->domain.empty() || p->graph != conv.graph ||
        uses_[c->x] != 1) {
      return nullptr;
    }
    const AttrValue* mode = p->attr("mode");
    if (mode != nullptr && (mode->type != AttrValue::Type::kString || mode->s != "constant"))
      return nullptr;
    const AttrValue* ap = conv.attr("auto_pad");
    if (ap != nullptr && ap->s != "NOTSET" && !ap->s.empty()) return nullptr;
    std::vector<int64_t> pads;
    float value = 0;
    if (const AttrValue* a = Attr(*p, "pads", AttrValue::Type::kInts); a != nullptr) {
      pads = a->ints;
      value = FloatAttr(*p, "value", 0.0f);
    } else {
      if (p->inputs.size() > 3) return nullptr;  // axes
      std::optional<std::vector<int64_t>> v =
          ConstInts(p->inputs.size() > 1 ? p->inputs[1] : nullptr);
      if (!v) return nullptr;
      pads = *v;
      if (p->inputs.size() > 2 && p->inputs[2] != nullptr) {
        std::vector<float> cv = ConstF32(p->inputs[2]);
        if (cv.size() != 1) return nullptr;
        value = cv[0];
      }
    }
    const size_t r = c->w_dims.size(), k = r - 2;
    if (value != 0.0f || pads.size() != 2 * r || pads[0] != 0 || pads[1] != 0 || pads[r] != 0 ||
        pads[r + 1] != 0) {
      return nullptr;
    }
    std::vector<int64_t> own(2 * k, 0);
    if (const AttrValue* a = Attr(conv, "pads", AttrValue::Type::kInts); a != nullptr) {
      if (a->ints.size() != 2 * k) return nullptr;
      own = a->ints;
    }
    for (size_t i = 0; i < k; ++i) {
      if (pads[2 + i] < 0 || pads[r + 2 + i] < 0) return nullptr;
      own[i] += pads[2 + i];
      own[k + i] += pads[r + 2 + i];
    }
    AttrValue a;
    a.type = AttrValue::Type::kInts;
    a.ints = std::move(own);
    conv.attrs["pads"] = std::move(a);
    conv.inputs[0] = p->inputs[0];
    ++counts_.pads;
    return p;
  }

  bool FoldBatchNorm(Node* bn, Value* cur, Chain* c) {
    if (bn->op != ops::kBatchNormalization || !bn->domain.empty() || bn->inputs.size() != 5 ||
        bn->inputs[0] != cur || bn->outputs.empty() || bn->outputs[0] == nullptr ||
        IntAttr(*bn, "training_mode", 0) != 0 || IntAttr(*bn, "is_test", 1) == 0 ||
        IntAttr(*bn, "spatial", 1) != 1) {
      return false;
    }
    for (size_t i = 1; i < bn->outputs.size(); ++i) {
      if (bn->outputs[i] != nullptr) return false;
    }
    const size_t m = static_cast<size_t>(c->m);
    std::vector<float> scale = ConstF32(bn->inputs[1]), shift = ConstF32(bn->inputs[2]),
                       mean = ConstF32(bn->inputs[3]), var = ConstF32(bn->inputs[4]);
    if (scale.size() != m || shift.size() != m || mean.size() != m || var.size() != m) return false;
    const double eps = FloatAttr(*bn, "epsilon", 1e-5f);
    auto factor = [&](size_t o) { return scale[o] / std::sqrt(static_cast<double>(var[o]) + eps); };
    ScaleOutputs(c, factor);
    if (c->b.empty()) c->b.assign(m, 0.0f);
    for (size_t o = 0; o < m; ++o) {
      c->b[o] = static_cast<float>((c->b[o] - static_cast<double>(mean[o])) * factor(o) + shift[o]);
    }
    c->last = bn;
    c->absorbed.push_back(bn);
    ++counts_.batch_norms;
    return true;
  }

  // Mul or Add of the conv's output by a constant (ChannelConstant): w' = w * k, b' = b * k;
  // b' = b + k.
  bool FoldScale(Node* u, Value* cur, Chain* c) {
    if (u->op != ops::kMul && u->op != ops::kAdd) return false;
    const int64_t m = c->m;
    const std::vector<float> k = ChannelConstant(*u, cur, m, /*scalar_only=*/false);
    if (k.empty()) return false;
    if (c->b.empty()) c->b.assign(static_cast<size_t>(m), 0.0f);
    if (u->op == ops::kMul) ScaleOutputs(c, [&](size_t o) { return k[o]; });
    for (size_t o = 0; o < static_cast<size_t>(m); ++o) {
      if (u->op == ops::kMul) {
        c->b[o] *= k[o];
      } else {
        c->b[o] += k[o];
      }
    }
    c->last = u;
    c->absorbed.push_back(u);
    ++counts_.scales;
    return true;
  }

  // The activation reading `cur` (its only reader): written into `act`; returns the last node
  // it takes (the others pushed onto `absorbed`), nullptr when there is none.
  template <typename Sole>
  Node* Activation(Value* cur, const absl::flat_hash_map<const Value*, std::vector<Node*>>& users,
                   Sole&& sole, Act* act, std::vector<Node*>* absorbed) {
    // SiLU: Mul(x, Sigmoid(x)).
    auto it = users.find(cur);
    if (it != users.end() && it->second.size() == 2 && uses_[cur] == 2) {
      Node* a = it->second[0];
      Node* b = it->second[1];
      if (a->op != ops::kSigmoid) std::swap(a, b);
      if (a->op == ops::kSigmoid && a->domain.empty() && b->op == ops::kMul && b->domain.empty() &&
          a->outputs[0] != nullptr && sole(a->outputs[0]) == b && b->inputs.size() == 2 &&
          ((b->inputs[0] == cur && b->inputs[1] == a->outputs[0]) ||
           (b->inputs[1] == cur && b->inputs[0] == a->outputs[0]))) {
        act->name = "SiLU";
        absorbed->push_back(a);
        return b;
      }
      return nullptr;
    }
    Node* u = sole(cur);
    if (u == nullptr || u->inputs.empty() || u->outputs.size() != 1 || u->outputs[0] == nullptr) {
      return nullptr;
    }
    if (Node* last = ScalarActivation(u, cur, sole, act, absorbed); last != nullptr) return last;
    if (u->inputs[0] != cur) return nullptr;
    // The pattern rewrites (compiler/rewrite/activations.cc) run first and turn the SiLU
    // decomposition into dynvm::Silu: the same activation.
    if (u->domain == ops::kDynvmDomain && u->op == ops::kSilu && u->inputs.size() == 1) {
      act->name = "SiLU";
      return u;
    }
    if (!u->domain.empty()) return nullptr;
    if (u->op == ops::kRelu || u->op == ops::kSigmoid || u->op == ops::kHardSwish ||
        u->op == ops::kTanh) {
      act->name = u->op;
      return u;
    }
    if (u->op == ops::kLeakyRelu) {
      act->name = u->op;
      act->alpha = FloatAttr(*u, "alpha", 0.01f);
      return u;
    }
    if (u->op == kHardSigmoid) {  // the caller makes it Affine + Clip(0, 1)
      act->name = u->op;
      act->alpha = FloatAttr(*u, "alpha", 0.2f);
      act->beta = FloatAttr(*u, "beta", 0.5f);
      return u;
    }
    if (u->op == ops::kClip) {
      float lo = FloatAttr(*u, "min", -FLT_MAX), hi = FloatAttr(*u, "max", FLT_MAX);
      for (size_t i = 1; i < u->inputs.size(); ++i) {
        if (u->inputs[i] == nullptr) continue;
        std::vector<float> v = ConstF32(u->inputs[i]);
        if (v.size() != 1) return nullptr;
        (i == 1 ? lo : hi) = v[0];
      }
      act->name = "Clip";
      act->alpha = lo;
      act->beta = hi;
      return u;
    }
    return nullptr;
  }

  // The activation after the first one (as Activation), unless it is HardSigmoid (two post-ops
  // of its own).
  template <typename Sole>
  Node* SecondActivation(Value* cur,
                         const absl::flat_hash_map<const Value*, std::vector<Node*>>& users,
                         Sole&& sole, Chain* c) {
    Act act;
    std::vector<Node*> absorbed;
    Node* last = Activation(cur, users, sole, &act, &absorbed);
    if (last == nullptr || act.name == kHardSigmoid) return nullptr;
    c->act2 = act;
    for (Node* n : absorbed) c->absorbed.push_back(n);
    return last;
  }

  // Max or Min with one constant value (a Clip bound: tf2onnx's LeakyRelu + Max pairs), or Mul
  // by one constant value then optionally Add of one, or Add of one alone (an Affine: the scale
  // and shift exports write after an activation). The constant must not broadcast the output.
  template <typename Sole>
  Node* ScalarActivation(Node* u, Value* cur, Sole&& sole, Act* act, std::vector<Node*>* absorbed) {
    if (!u->domain.empty()) return nullptr;
    const bool max = u->op == kMax, min = u->op == kMin;
    if (!max && !min && u->op != ops::kMul && u->op != ops::kAdd) return nullptr;
    const std::vector<float> k = ChannelConstant(*u, cur, 1, /*scalar_only=*/true);
    if (k.size() != 1) return nullptr;
    constexpr float kInf = std::numeric_limits<float>::infinity();
    if (max || min) {
      *act = {"Clip", max ? k[0] : -kInf, max ? kInf : k[0]};
      return u;
    }
    *act = {"Affine", u->op == ops::kMul ? k[0] : 1.0f, u->op == ops::kAdd ? k[0] : 0.0f};
    if (u->op == ops::kAdd) return u;
    Value* scaled = u->outputs[0];
    Node* add = sole(scaled);
    if (add == nullptr || add->op != ops::kAdd) return u;
    const std::vector<float> shift = ChannelConstant(*add, scaled, 1, /*scalar_only=*/true);
    if (shift.size() != 1) return u;
    act->beta = shift[0];
    absorbed->push_back(u);
    return add;
  }

  // The ConvTranspose with its folded weights and bias, in place of the last node folded.
  void RewriteTranspose(const Chain& c) {
    Tensor w = *Tensor::Empty(DType::kF32, c.w_dims);
    std::copy(c.w.begin(), c.w.end(), w.data<float>());
    Tensor b = *Tensor::Empty(DType::kF32, {c.m});
    std::copy(c.b.begin(), c.b.end(), b.data<float>());
    Node* f = c.last;
    Value* out = f->outputs[0];
    f->op = kConvTranspose;
    f->domain = "";
    f->name = c.conv->name;
    f->attrs = c.conv->attrs;
    f->inputs = {c.x, m_.NewConstant(std::move(w), "", /*is_weight=*/true),
                 m_.NewConstant(std::move(b), "", /*is_weight=*/true)};
    f->outputs = {out};
    out->output_index = 0;
    consumed_.insert(c.conv);
    for (Node* a : c.absorbed) consumed_.insert(a);
    ++counts_.transposes;
  }

  void Rewrite(const Chain& c) {
    Node* n = c.conv;
    Attrs attrs = n->attrs;
    AttrValue cw;
    cw.type = AttrValue::Type::kInt;
    cw.i = 1;
    attrs["constant_weights"] = cw;
    for (const auto& [act, prefix] :
         {std::pair<const Act*, const char*>{&c.act, "activation"}, {&c.act2, "activation2"}}) {
      if (act->name.empty()) continue;
      AttrValue a;
      a.type = AttrValue::Type::kString;
      a.s = act->name;
      attrs[prefix] = a;
      AttrValue f;
      f.type = AttrValue::Type::kFloat;
      f.f = act->alpha;
      attrs[absl::StrCat(prefix, "_alpha")] = f;
      f.f = act->beta;
      attrs[absl::StrCat(prefix, "_beta")] = f;
    }
    Tensor w = *Tensor::Empty(DType::kF32, c.w_dims);
    std::copy(c.w.begin(), c.w.end(), w.data<float>());
    std::vector<Value*> inputs = {c.x, m_.NewConstant(std::move(w), "", /*is_weight=*/true)};
    if (!c.b.empty() || c.sum != nullptr) {
      if (c.b.empty()) {
        inputs.push_back(nullptr);
      } else {
        Tensor b = *Tensor::Empty(DType::kF32, {static_cast<int64_t>(c.b.size())});
        std::copy(c.b.begin(), c.b.end(), b.data<float>());
        inputs.push_back(m_.NewConstant(std::move(b), "", /*is_weight=*/true));
      }
    }
    if (c.sum != nullptr) inputs.push_back(c.sum);
    Node* f = c.last;
    Value* out = f->outputs[0];
    f->op = ops::kFusedConv;
    f->domain = "dynvm";
    f->name = n->name;
    f->attrs = std::move(attrs);
    f->inputs = std::move(inputs);
    f->outputs = {out};
    out->output_index = 0;
    ++counts_.convs;
  }

  Module& m_;
  absl::flat_hash_set<const Node*> consumed_;
  UseCounts& uses_;
  ConvFusionCounts& counts_;
};

void SetInt(Node* n, const char* name, int64_t v) {
  AttrValue a;
  a.type = AttrValue::Type::kInt;
  a.i = v;
  n->attrs[name] = a;
}

bool IsFusedConv(const Node* n) {
  return n->op == ops::kFusedConv && n->domain == ops::kDynvmDomain;
}

// Pools that take and give channels-last tensors (flags "channels_last_in" / "_out"): one
// output (no Indices), f32.
bool IsLayoutPool(const Node* n) {
  return n->domain.empty() &&
         (n->op == ops::kMaxPool || n->op == ops::kAveragePool || n->op == ops::kGlobalMaxPool ||
          n->op == ops::kGlobalAveragePool) &&
         !n->inputs.empty() && n->inputs[0] != nullptr && n->inputs[0]->dtype == DType::kF32 &&
         (n->outputs.size() == 1 || n->outputs[1] == nullptr);
}

bool IsChannelMul(const Node* n) {
  return n->op == ops::kChannelMul && n->domain == ops::kDynvmDomain;
}

// Whether dims a and b are equal (the same symbol or the same constant).
bool SameDim(const Dim& a, const Dim& b) {
  if (a == b) return true;
  const std::optional<int64_t> ca = SymbolicContext::AsConst(a), cb = SymbolicContext::AsConst(b);
  return ca && cb && *ca == *cb;
}

bool DimIs(const Dim& a, int64_t v) {
  const std::optional<int64_t> c = SymbolicContext::AsConst(a);
  return c && *c == v;
}

// A Mul of a FusedConv's or pool's output x [N, C, spatial...] (rank 3 to 5, f32) by a gate g
// [N or 1, C, 1...] of x's rank, giving x's shape (a squeeze-excitation block's scale) becomes
// dynvm::ChannelMul(x, g), which takes and gives the channels-last layout (AssignBlockedLayouts):
// the convs around it then need no reorder. Returns the Muls rewritten.
int RewriteChannelMuls(Graph& g) {
  int rewritten = 0;
  for (auto& node : g.nodes) {
    Node* n = node.get();
    if (n->op != ops::kMul || !n->domain.empty() || n->inputs.size() != 2 ||
        n->outputs.size() != 1 || n->outputs[0] == nullptr) {
      continue;
    }
    for (int xi = 0; xi < 2; ++xi) {
      Value* x = n->inputs[xi];
      Value* gate = n->inputs[1 - xi];
      if (x == nullptr || gate == nullptr || x->producer == nullptr ||
          (!IsFusedConv(x->producer) && !IsLayoutPool(x->producer)) || !x->shape || !gate->shape ||
          x->dtype != DType::kF32 || gate->dtype != DType::kF32 || x->rank() < 3 || x->rank() > 5 ||
          gate->rank() != x->rank() || !SameShape(n->outputs[0], x)) {
        continue;
      }
      const std::vector<Dim>& xd = *x->shape;
      const std::vector<Dim>& gd = *gate->shape;
      bool ok = (SameDim(gd[0], xd[0]) || DimIs(gd[0], 1)) && SameDim(gd[1], xd[1]);
      for (size_t d = 2; ok && d < gd.size(); ++d) ok = DimIs(gd[d], 1);
      if (!ok) continue;
      n->op = ops::kChannelMul;
      n->domain = ops::kDynvmDomain;
      n->inputs = {x, gate};
      ++rewritten;
      break;
    }
  }
  return rewritten;
}

bool IsChannelPad(const Node* n) {
  return n->op == ops::kChannelPad && n->domain == ops::kDynvmDomain;
}

// Whether `v` is a constant f32 tensor of +0.0 only (no -0.0: a copy of it must equal zeros).
bool IsPositiveZeros(const Value* v) {
  if (v == nullptr || !v->constant || v->constant->dtype() != DType::kF32) return false;
  for (float f : ConstF32(v)) {
    if (f != 0.0f || std::signbit(f)) return false;
  }
  return true;
}

// A Concat along the channel axis (1) of an f32 value x [N, C, spatial...] (rank 3 to 5) and a
// constant of zeros [N, Z, spatial...] (either order: zeros after x, or before) becomes
// dynvm::ChannelPad(x) with "before" / "after" = Z: BlazeFace's residual blocks add a conv's
// output to its input padded with zero channels this way (tf2onnx writes the zeros as a
// ConstantOfShape). ChannelPad passes the channels-last layout like a pool
// (AssignBlockedLayouts), so the convs around it need no reorder. Returns the Concats rewritten.
int RewriteChannelPads(Graph& g) {
  int rewritten = 0;
  for (auto& node : g.nodes) {
    Node* n = node.get();
    if (n->op != ops::kConcat || !n->domain.empty() || n->inputs.size() != 2 ||
        n->outputs.size() != 1 || n->outputs[0] == nullptr || n->inputs[0] == nullptr ||
        n->inputs[1] == nullptr) {
      continue;
    }
    const int zi = IsPositiveZeros(n->inputs[1]) ? 1 : IsPositiveZeros(n->inputs[0]) ? 0 : -1;
    if (zi < 0) continue;
    Value* x = n->inputs[1 - zi];
    const Value* z = n->inputs[zi];
    if (!x->shape || x->dtype != DType::kF32 || x->rank() < 3 || x->rank() > 5 || x->constant) {
      continue;
    }
    const int64_t axis = IntAttr(*n, "axis", 0);
    if (axis != 1 && axis != 1 - x->rank()) continue;
    const absl::Span<const int64_t> zd = z->constant->dims();
    bool ok = static_cast<int64_t>(zd.size()) == x->rank() && zd[1] > 0;
    for (int d = 0; ok && d < x->rank(); ++d) ok = d == 1 || DimIs((*x->shape)[d], zd[d]);
    if (!ok) continue;
    n->op = ops::kChannelPad;
    n->domain = ops::kDynvmDomain;
    n->attrs.clear();
    SetInt(n, zi == 1 ? "after" : "before", zd[1]);
    n->inputs = {x};
    ++rewritten;
  }
  return rewritten;
}

// Whether `v` can be kept channels-last: every reader takes that layout (a FusedConv as X or
// the residual, a pool as X), and it is no graph output and not read in a nested region. A
// pool reading it gives its own output channels-last when that output is markable too, and
// plain otherwise (the pool converts: its output is the smaller one).
bool Markable(const Graph& g, const Value* v, UseCounts& uses) {
  if (!v->shape || v->rank() < 3 || v->rank() > 5 || v->dtype != DType::kF32) {
    return false;
  }
  int reads = 0;
  for (const auto& other : g.nodes) {
    for (size_t i = 0; i < other->inputs.size(); ++i) {
      if (other->inputs[i] != v) continue;
      ++reads;
      const bool conv_reads = IsFusedConv(other.get()) && (i == 0 || i == 3);
      const bool pool_reads =
          (IsLayoutPool(other.get()) || IsChannelMul(other.get()) || IsChannelPad(other.get())) &&
          i == 0;
      if (!conv_reads && !pool_reads) return false;
    }
  }
  return reads > 0 && reads == uses[v];
}

// Values passed only from one FusedConv or pool to FusedConvs and pools are kept
// channels-last (NHWC), the layout oneDNN's AVX-512 convolutions take: the producer writes it
// and the readers read it, so no reorder runs between them. Returns the values changed.
int AssignBlockedLayouts(Graph& g, UseCounts& uses) {
  int changed = 0;
  for (auto& node : g.nodes) {
    Node* p = node.get();
    if ((!IsFusedConv(p) && !IsLayoutPool(p) && !IsChannelMul(p) && !IsChannelPad(p)) ||
        p->outputs.empty() || p->outputs[0] == nullptr || !Markable(g, p->outputs[0], uses)) {
      continue;
    }
    const Value* v = p->outputs[0];
    SetInt(p, "channels_last_out", 1);
    for (auto& other : g.nodes) {
      for (size_t i = 0; i < other->inputs.size(); ++i) {
        if (other->inputs[i] == v) {
          SetInt(other.get(), i == 0 ? "channels_last_in" : "channels_last_sum", 1);
        }
      }
    }
    ++changed;
  }
  return changed;
}

bool IsQLinearConv(const Node* n) {
  return n->op == "QLinearConv" && n->domain.empty() && !n->inputs.empty() &&
         n->inputs[0] != nullptr && n->outputs.size() == 1 && n->outputs[0] != nullptr;
}

bool Is8BitActivation(const Value* v) {
  return v != nullptr && v->shape && v->rank() >= 3 && v->rank() <= 5 &&
         (v->dtype == DType::kU8 || v->dtype == DType::kI8);
}

// A quantized elementwise node that serves channels-last tensors (its operands and result in
// one layout): com.microsoft::QLinearAdd of operands of one rank (flagged "channels_last": it
// broadcasts over the logical dims), dynvm::Requantize (elementwise). Its data ports:
// QLinearAdd's A and B, Requantize's x.
bool IsLayoutFreeQuantized(const Node* n) {
  if (n->outputs.size() != 1 || !Is8BitActivation(n->outputs[0])) return false;
  if (n->domain == ops::kMsftDomain && n->op == ops::kQLinearAdd) {
    return n->inputs.size() >= 7 && Is8BitActivation(n->inputs[0]) &&
           Is8BitActivation(n->inputs[3]) && n->inputs[0]->rank() == n->inputs[3]->rank() &&
           n->inputs[0]->rank() == n->outputs[0]->rank();
  }
  return n->domain == ops::kDynvmDomain && n->op == ops::kRequantize && !n->inputs.empty() &&
         Is8BitActivation(n->inputs[0]);
}

bool IsQuantizedDataPort(const Node* n, size_t i) {
  if (IsQLinearConv(n)) return i == 0;
  if (!IsLayoutFreeQuantized(n)) return false;
  return n->op == ops::kQLinearAdd ? (i == 0 || i == 3) : i == 0;
}

// 8-bit activations are kept channels-last u8/s8 (NHWC), the layout oneDNN's int8 convolutions
// read and write, over every group of values that QLinearConvs and quantized elementwise nodes
// (IsLayoutFreeQuantized: a QDQ CNN's residual QLinearAdd and Requantize after the qdq rewrites)
// pass between them: a group is the values such a node joins (its data inputs and its output),
// and it changes layout when each of its values is made by a QLinearConv or such a node, read
// only by them (a QLinearConv as x), and is no graph output and not read in a nested region.
// "channels_last_out" goes on the QLinearConvs that make its values, "channels_last_in" on
// those that read them, "channels_last" on the QLinearAdds. Returns the QLinearConvs whose
// output changed.
int AssignQuantizedLayouts(Graph& g, UseCounts& uses) {
  absl::flat_hash_map<const Value*, const Value*> parent;
  std::function<const Value*(const Value*)> root = [&](const Value* v) {
    auto it = parent.find(v);
    if (it == parent.end() || it->second == v) return v;
    const Value* r = root(it->second);
    parent[v] = r;
    return r;
  };
  auto join = [&](const Value* a, const Value* b) {
    parent.try_emplace(a, a);
    parent.try_emplace(b, b);
    const Value *ra = root(a), *rb = root(b);
    if (ra != rb) parent[ra] = rb;
  };
  // The groups, and whether each value's producer and readers take the layout.
  absl::flat_hash_map<const Value*, int> reads;
  absl::flat_hash_set<const Value*> bad;
  for (const auto& node : g.nodes) {
    const Node* n = node.get();
    const bool free = IsLayoutFreeQuantized(n);
    for (const Value* out : n->outputs) {
      if (out == nullptr || !Is8BitActivation(out)) continue;
      parent.try_emplace(out, out);
      if (!free && !IsQLinearConv(n)) bad.insert(out);
    }
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Value* v = n->inputs[i];
      if (v == nullptr || !Is8BitActivation(v)) continue;
      parent.try_emplace(v, v);
      ++reads[v];
      if (!IsQuantizedDataPort(n, i)) bad.insert(v);
      if (free && IsQuantizedDataPort(n, i)) join(v, n->outputs[0]);
    }
  }
  for (const auto& [v, p] : parent) {
    if (v->producer == nullptr || reads[v] == 0 || reads[v] != uses[v]) bad.insert(v);
  }
  absl::flat_hash_set<const Value*> bad_groups;
  for (const Value* v : bad) bad_groups.insert(root(v));
  int changed = 0;
  for (const auto& node : g.nodes) {
    Node* p = node.get();
    if (!IsQLinearConv(p) || !Is8BitActivation(p->outputs[0]) ||
        bad_groups.contains(root(p->outputs[0]))) {
      continue;
    }
    SetInt(p, "channels_last_out", 1);
    ++changed;
  }
  for (const auto& node : g.nodes) {
    Node* r = node.get();
    if (IsQLinearConv(r) && Is8BitActivation(r->inputs[0]) &&
        !bad_groups.contains(root(r->inputs[0]))) {
      SetInt(r, "channels_last_in", 1);
    }
    if (IsLayoutFreeQuantized(r) && r->op == ops::kQLinearAdd &&
        !bad_groups.contains(root(r->outputs[0]))) {
      SetInt(r, "channels_last", 1);
    }
  }
  return changed;
}

std::vector<int64_t> IntsAttr(const Node& n, const char* name) {
  const AttrValue* a = Attr(n, name, AttrValue::Type::kInts);
  return a != nullptr ? a->ints : std::vector<int64_t>{};
}

bool AllEqual(const std::vector<int64_t>& v, size_t size, int64_t value) {
  if (v.empty()) return true;  // the attribute's default
  if (v.size() != size) return false;
  for (int64_t x : v) {
    if (x != value) return false;
  }
  return true;
}

// The constant dims of a FusedConv's 4D f32 weights; empty when they are not that.
std::vector<int64_t> Weights4D(const Node& n) {
  const Value* w = n.inputs.size() > 1 ? n.inputs[1] : nullptr;
  if (w == nullptr || !w->constant || w->constant->dtype() != DType::kF32 ||
      w->constant->rank() != 4) {
    return {};
  }
  return {w->constant->dims().begin(), w->constant->dims().end()};
}

// A FusedConv with no residual and no depthwise stage yet, no auto_pad, undilated, at most one
// activation.
bool PlainFusedConv(const Node& n) {
  const AttrValue* ap = n.attr("auto_pad");
  return IsFusedConv(&n) && n.attr("activation2") == nullptr && n.inputs.size() >= 2 &&
         n.inputs.size() <= 4 && (n.inputs.size() < 4 || n.inputs[3] == nullptr) &&
         n.outputs.size() == 1 && n.outputs[0] != nullptr && n.inputs[0] != nullptr &&
         (ap == nullptr || ap->s.empty() || ap->s == "NOTSET") &&
         AllEqual(IntsAttr(n, "dilations"), 2, 1);
}

// 1x1, stride 1, unpadded, ungrouped.
bool IsPointwise(const Node& n) {
  const std::vector<int64_t> w = Weights4D(n);
  return PlainFusedConv(n) && w.size() == 4 && w[2] == 1 && w[3] == 1 &&
         IntAttr(n, "group", 1) == 1 && AllEqual(IntsAttr(n, "strides"), 2, 1) &&
         AllEqual(IntsAttr(n, "pads"), 4, 0);
}

// 3x3 depthwise over `m` channels, stride 1 or 2 on both axes, pad 1 all round; its stride, or
// 0 when it is not one.
int64_t DepthwiseStride(const Node& n, int64_t m) {
  const std::vector<int64_t> w = Weights4D(n);
  const std::vector<int64_t> strides = IntsAttr(n, "strides"), pads = IntsAttr(n, "pads");
  if (!PlainFusedConv(n) || w.size() != 4 || w[0] != m || w[1] != 1 || w[2] != 3 || w[3] != 3 ||
      IntAttr(n, "group", 1) != m || pads.size() != 4 || !AllEqual(pads, 4, 1)) {
    return 0;
  }
  const int64_t s = strides.empty() ? 1 : strides[0];
  if ((s != 1 && s != 2) || !AllEqual(strides, 2, s)) return 0;
  if (n.inputs.size() > 2 && n.inputs[2] != nullptr &&
      (!n.inputs[2]->constant || n.inputs[2]->constant->numel() != m)) {
    return 0;
  }
  return s;
}

// The channel counts a Split node `s` of a rank-`rank` value with `m` channels gives each output
// when it splits along the channel axis (axis 1) into parts given by its constant "split" input
// or attribute, or into equal parts (no split, or opset 18's num_outputs): empty otherwise.
std::vector<int64_t> ChannelSplit(const Node& s, int rank, int64_t m) {
  int64_t axis = IntAttr(s, "axis", 0);
  if (axis < 0) axis += rank;
  const size_t parts = s.outputs.size();
  if (s.op != kSplit || !s.domain.empty() || axis != 1 || parts < 2) return {};
  for (const Value* o : s.outputs) {
    if (o == nullptr) return {};
  }
  std::vector<int64_t> sizes;
  if (s.inputs.size() > 1 && s.inputs[1] != nullptr) {
    const std::optional<std::vector<int64_t>> v = ConstInts(s.inputs[1]);
    if (!v) return {};
    sizes = *v;
  } else if (const AttrValue* a = Attr(s, "split", AttrValue::Type::kInts); a != nullptr) {
    sizes = a->ints;
  } else {
    if (m % static_cast<int64_t>(parts) != 0) return {};
    sizes.assign(parts, m / static_cast<int64_t>(parts));
  }
  int64_t total = 0;
  for (int64_t v : sizes) {
    if (v <= 0) return {};
    total += v;
  }
  return sizes.size() == parts && total == m ? sizes : std::vector<int64_t>{};
}

// A FusedConv (ungrouped, no residual, no depthwise stage, constant f32 weights and bias) whose
// output is read only by a Split along the channel axis becomes one FusedConv per part, each
// with its rows of the weights and bias, writing that part's output: the Split's copy goes. A
// part read only by a Sigmoid (a GLU's gate, x[:M/2] * sigmoid(x[M/2:]), as torch writes
// nn.GLU and F.glu) takes it as its activation, or as its second activation after the conv's
// own (none when the conv has two already). Counts the convs split and the Sigmoids absorbed
// (as activations); the Split and the absorbed Sigmoids are removed from `g`.
void FuseChannelSplits(Module& m, Graph& g, UseCounts& uses, ConvFusionCounts& counts) {
  absl::flat_hash_map<const Value*, std::vector<Node*>> readers;
  for (auto& n : g.nodes) {
    for (Value* v : n->inputs) {
      if (v != nullptr) readers[v].push_back(n.get());
    }
  }
  absl::flat_hash_set<const Node*> removed;
  std::vector<std::unique_ptr<Node>> added;  // new FusedConvs, placed after their conv
  std::vector<std::pair<Node*, Node*>> after;
  for (auto& node : g.nodes) {
    Node* a = node.get();
    if (!IsFusedConv(a) || a->inputs.size() < 2 || a->inputs.size() > 3 || a->outputs.size() != 1 ||
        a->outputs[0] == nullptr || a->inputs[0] == nullptr || IntAttr(*a, "group", 1) != 1 ||
        a->inputs[1] == nullptr || !a->inputs[1]->constant ||
        a->inputs[1]->constant->dtype() != DType::kF32 || a->inputs[1]->constant->rank() < 3 ||
        (a->inputs.size() > 2 && a->inputs[2] != nullptr && !a->inputs[2]->constant)) {
      continue;
    }
    Value* out = a->outputs[0];
    auto it = readers.find(out);
    if (it == readers.end() || it->second.size() != 1 || uses[out] != 1) continue;
    Node* split = it->second[0];
    const Tensor& w = *a->inputs[1]->constant;
    const int64_t channels = w.dim(0), per_channel = w.numel() / std::max<int64_t>(channels, 1);
    const std::vector<int64_t> sizes = ChannelSplit(*split, out->rank(), channels);
    if (sizes.empty() || split->inputs[0] != out) continue;
    const std::vector<float> weights = ConstF32(a->inputs[1]);
    const std::vector<float> bias = a->inputs.size() > 2 && a->inputs[2] != nullptr
                                        ? ConstF32(a->inputs[2])
                                        : std::vector<float>{};
    if (weights.size() != static_cast<size_t>(w.numel()) ||
        (a->inputs.size() > 2 && a->inputs[2] != nullptr &&
         bias.size() != static_cast<size_t>(channels))) {
      continue;
    }
    int64_t row = 0;
    Node* prev = a;
    for (size_t part = 0; part < sizes.size(); ++part) {
      std::vector<int64_t> dims(w.dims().begin(), w.dims().end());
      dims[0] = sizes[part];
      Tensor wp = *Tensor::Empty(DType::kF32, dims);
      std::copy(weights.begin() + row * per_channel,
                weights.begin() + (row + sizes[part]) * per_channel, wp.data<float>());
      std::vector<Value*> inputs = {a->inputs[0], m.NewConstant(std::move(wp), "", true)};
      if (!bias.empty()) {
        Tensor bp = *Tensor::Empty(DType::kF32, {sizes[part]});
        std::copy(bias.begin() + row, bias.begin() + row + sizes[part], bp.data<float>());
        inputs.push_back(m.NewConstant(std::move(bp), "", true));
      }
      row += sizes[part];
      auto conv = std::make_unique<Node>();
      conv->op = a->op;
      conv->domain = a->domain;
      conv->name = absl::StrCat(a->name, "/part", part);
      conv->attrs = a->attrs;
      conv->inputs = std::move(inputs);
      conv->graph = &g;
      Value* y = split->outputs[part];
      // A part read only by a Sigmoid: the conv gives the Sigmoid's output.
      auto r = readers.find(y);
      Node* sig =
          r != readers.end() && r->second.size() == 1 && uses[y] == 1 ? r->second[0] : nullptr;
      if (sig != nullptr && sig->op == ops::kSigmoid && sig->domain.empty() &&
          sig->outputs.size() == 1 && sig->outputs[0] != nullptr &&
          conv->attrs.count("activation2") == 0) {
        const char* slot = conv->attrs.count("activation") == 0 ? "activation" : "activation2";
        AttrValue act;
        act.type = AttrValue::Type::kString;
        act.s = "Sigmoid";
        conv->attrs[slot] = act;
        y = sig->outputs[0];
        removed.insert(sig);
        ++counts.activations;
      }
      y->producer = conv.get();
      y->output_index = 0;
      conv->outputs = {y};
      after.push_back({prev, conv.get()});
      prev = conv.get();
      added.push_back(std::move(conv));
    }
    removed.insert(a);
    removed.insert(split);
    readers.erase(out);
    out->producer = nullptr;
    ++counts.splits;
  }
  if (added.empty()) return;
  // Each part right after its conv (or the part before it): X is defined before the conv.
  absl::flat_hash_map<const Node*, std::vector<std::unique_ptr<Node>>> place;
  for (size_t i = 0; i < added.size(); ++i) {
    place[after[i].first].push_back(std::move(added[i]));
  }
  std::vector<std::unique_ptr<Node>> nodes;
  std::function<void(const Node*)> emit_after = [&](const Node* n) {
    auto p = place.find(n);
    if (p == place.end()) return;
    for (auto& c : p->second) {
      const Node* raw = c.get();
      nodes.push_back(std::move(c));
      emit_after(raw);
    }
  };
  for (auto& n : g.nodes) {
    const Node* raw = n.get();
    if (removed.count(raw) == 0) nodes.push_back(std::move(n));
    emit_after(raw);
  }
  g.nodes = std::move(nodes);
}

// Folds each 3x3 depthwise FusedConv into the 1x1 FusedConv before it (conv_fusion.h).
// Returns the pairs fused; the 1x1 nodes are left dead.
int FuseDepthwisePairs(Module& m, Graph& g, UseCounts& uses) {
  absl::flat_hash_map<const Value*, std::vector<std::pair<Node*, size_t>>> readers;
  for (auto& n : g.nodes) {
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      if (n->inputs[i] != nullptr) readers[n->inputs[i]].push_back({n.get(), i});
    }
  }
  int fused = 0;
  for (auto& node : g.nodes) {
    Node* a = node.get();
    if (!IsPointwise(*a)) continue;
    const Value* mid = a->outputs[0];
    auto it = readers.find(mid);
    if (it == readers.end() || it->second.size() != 1 || uses[mid] != 1 ||
        it->second[0].second != 0) {
      continue;
    }
    Node* b = it->second[0].first;
    const int64_t channels = Weights4D(*a)[0];
    const int64_t stride = DepthwiseStride(*b, channels);
    if (stride == 0) continue;
    Value* dw_b = b->inputs.size() > 2 ? b->inputs[2] : nullptr;
    if (dw_b == nullptr) {
      Tensor zeros = *Tensor::Empty(DType::kF32, {channels});
      std::fill(zeros.data<float>(), zeros.data<float>() + channels, 0.0f);
      dw_b = m.NewConstant(std::move(zeros), "", /*is_weight=*/true);
    }
    Attrs attrs = a->attrs;
    AttrValue st;
    st.type = AttrValue::Type::kInt;
    st.i = stride;
    attrs["dw_stride"] = st;
    for (const auto& [from, to] :
         {std::pair<const char*, const char*>{"activation", "dw_activation"},
          {"activation_alpha", "dw_activation_alpha"},
          {"activation_beta", "dw_activation_beta"}}) {
      if (const AttrValue* v = b->attr(from); v != nullptr) attrs[to] = *v;
    }
    b->inputs = {a->inputs[0], a->inputs[1], a->inputs.size() > 2 ? a->inputs[2] : nullptr,
                 nullptr,      b->inputs[1], dw_b};
    b->attrs = std::move(attrs);
    readers.erase(mid);
    ++fused;
  }
  return fused;
}

}  // namespace

absl::StatusOr<ConvFusionCounts> FuseConvolutions(Module& module) {
  ConvFusionCounts counts;
  for (Function& f : module.functions()) {
    UseCounts uses;
    CountUses(*f.graph, uses);
    Fuser fuser(module, uses, counts);
    EachGraph(*f.graph, [&](Graph& g) { fuser.FoldPads(g); });
  }
  // The Convs' output shapes, now that they read the unpadded inputs.
  if (counts.pads > 0) DYNVM_RETURN_IF_ERROR(InferShapes(module));
  for (Function& f : module.functions()) {
    UseCounts uses;
    CountUses(*f.graph, uses);
    Fuser fuser(module, uses, counts);
    EachGraph(*f.graph, [&](Graph& g) { fuser.FuseGraph(g); });
  }
  if (counts.convs > 0 || counts.transposes > 0) {
    DYNVM_RETURN_IF_ERROR(InferShapes(module));
    EliminateDeadCode(module);  // the absorbed nodes, which still read the chains' values
  }
  for (Function& f : module.functions()) {
    UseCounts uses;
    CountUses(*f.graph, uses);
    EachGraph(*f.graph, [&](Graph& g) { FuseChannelSplits(module, g, uses, counts); });
  }
  if (counts.splits > 0) DYNVM_RETURN_IF_ERROR(InferShapes(module));
  for (Function& f : module.functions()) {
    UseCounts uses;
    CountUses(*f.graph, uses);
    EachGraph(*f.graph, [&](Graph& g) { counts.depthwise += FuseDepthwisePairs(module, g, uses); });
  }
  if (counts.depthwise > 0) {
    DYNVM_RETURN_IF_ERROR(InferShapes(module));
    EliminateDeadCode(module);
  }
  for (Function& f : module.functions()) {
    UseCounts uses;
    CountUses(*f.graph, uses);
    EachGraph(*f.graph, [&](Graph& g) {
      counts.channel_muls += RewriteChannelMuls(g);
      counts.channel_pads += RewriteChannelPads(g);
      counts.blocked += AssignBlockedLayouts(g, uses);
      counts.quantized_blocked += AssignQuantizedLayouts(g, uses);
    });
  }
  return counts;
}

}  // namespace dynvm::compiler
