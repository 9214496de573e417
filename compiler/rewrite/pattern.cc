#include "compiler/rewrite/pattern.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace dynvm::compiler::rewrite {
namespace {

// Element `i` (row-major) of a numeric constant as a double; nullopt for other dtypes.
std::optional<double> ElementAsDouble(const Tensor& t, int64_t i) {
  const int64_t off = t.ElementOffset(i);
  switch (t.dtype()) {
    case DType::kF32:
      return t.data<float>()[off];
    case DType::kF64:
      return t.data<double>()[off];
    case DType::kI64:
      return static_cast<double>(t.data<int64_t>()[off]);
    case DType::kI32:
      return static_cast<double>(t.data<int32_t>()[off]);
    default:
      return std::nullopt;
  }
}

}  // namespace

void UseCounts::Count(const Graph& g) {
  for (const auto& n : g.nodes) {
    for (const Value* v : n->inputs) {
      if (v != nullptr) ++counts_[v];
    }
    for (const auto& [name, sub] : n->subgraphs) Count(*sub);
  }
  for (const Value* v : g.outputs) {
    if (v != nullptr) ++counts_[v];
  }
}

Pattern Pattern::Any(std::string name) {
  Pattern p;
  p.kind_ = Kind::kAny;
  p.name_ = std::move(name);
  return p;
}

Pattern Pattern::Const(std::string name, ValuePred pred) {
  Pattern p;
  p.kind_ = Kind::kConst;
  p.name_ = std::move(name);
  if (pred) p.value_preds_.push_back(std::move(pred));
  return p;
}

Pattern Pattern::Op(std::string op, std::vector<Pattern> inputs) {
  Pattern p;
  p.kind_ = Kind::kOp;
  const size_t sep = op.find("::");
  if (sep != std::string::npos) {  // "domain::Op": a node of another domain (dynvm::Attention)
    p.domain_ = op.substr(0, sep);
    op = op.substr(sep + 2);
  }
  p.op_ = std::move(op);
  p.inputs_ = std::move(inputs);
  return p;
}

Pattern Pattern::OneOf(std::vector<Pattern> alternatives) {
  Pattern p;
  p.kind_ = Kind::kOneOf;
  p.inputs_ = std::move(alternatives);
  return p;
}

Pattern& Pattern::Commutative() {
  commutative_ = true;
  return *this;
}
Pattern& Pattern::As(std::string name) {
  name_ = std::move(name);
  return *this;
}
Pattern& Pattern::Where(ValuePred pred) {
  value_preds_.push_back(std::move(pred));
  return *this;
}
Pattern& Pattern::NodeIs(NodePred pred) {
  node_preds_.push_back(std::move(pred));
  return *this;
}
Pattern& Pattern::OneUse() {
  one_use_ = true;
  return *this;
}

std::vector<std::string> Pattern::RootOps() const {
  if (kind_ == Kind::kOp) return {domain_.empty() ? op_ : domain_ + "::" + op_};
  std::vector<std::string> out;
  if (kind_ == Kind::kOneOf) {
    for (const Pattern& alt : inputs_) {
      for (std::string& op : alt.RootOps()) out.push_back(std::move(op));
    }
  }
  if (kind_ == Kind::kAny || kind_ == Kind::kConst) out.push_back("");
  return out;
}

bool Pattern::Match(Value* v, const UseCounts& uses, rewrite::Match& m) const {
  if (v == nullptr) return false;
  if (!name_.empty()) {
    auto it = m.values.find(name_);
    if (it != m.values.end()) return it->second == v;  // a DAG edge: the same value again
  }
  rewrite::Match trial = m;
  if (!MatchHere(v, uses, trial)) return false;
  if (one_use_ && uses(v) != 1) return false;
  for (const ValuePred& pred : value_preds_) {
    if (!pred(*v, trial)) return false;
  }
  if (!name_.empty()) {
    trial.values[name_] = v;
    if (v->producer != nullptr) trial.named_nodes[name_] = v->producer;
  }
  m = std::move(trial);
  return true;
}

bool Pattern::MatchHere(Value* v, const UseCounts& uses, rewrite::Match& m) const {
  switch (kind_) {
    case Kind::kAny:
      return true;
    case Kind::kConst:
      return v->constant.has_value();
    case Kind::kOneOf:
      for (const Pattern& alt : inputs_) {
        if (alt.Match(v, uses, m)) return true;
      }
      return false;
    case Kind::kOp:
      break;
  }
  compiler::Node* n = v->producer;
  if (n == nullptr || n->domain != domain_ || n->op != op_ || v->output_index != 0 ||
      !n->subgraphs.empty()) {
    return false;
  }
  // Listed operands must be present; unlisted trailing ones absent.
  for (size_t i = inputs_.size(); i < n->inputs.size(); ++i) {
    if (n->inputs[i] != nullptr) return false;
  }
  if (n->inputs.size() < inputs_.size()) return false;
  std::vector<int> order(inputs_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  if (MatchInputs(*n, order, uses, m)) return true;
  if (commutative_ && inputs_.size() == 2) return MatchInputs(*n, {1, 0}, uses, m);
  return false;
}

bool Pattern::MatchInputs(compiler::Node& n, const std::vector<int>& order, const UseCounts& uses,
                          rewrite::Match& m) const {
  rewrite::Match trial = m;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (!inputs_[i].Match(n.inputs[order[i]], uses, trial)) return false;
  }
  for (const NodePred& pred : node_preds_) {
    if (!pred(n, trial)) return false;
  }
  compiler::Node* node = &n;
  if (std::find(trial.nodes.begin(), trial.nodes.end(), node) == trial.nodes.end()) {
    // Producers are matched before their consumer returns: insert the consumer first so the
    // root stays at the front.
    trial.nodes.insert(trial.nodes.begin(), node);
  }
  m = std::move(trial);
  return true;
}

bool ConstAll(const Value& v, double x, double tol) {
  if (!v.constant || !dynvm::IsFloat(v.dtype) || v.constant->numel() == 0) return false;
  const Tensor& t = *v.constant;
  for (int64_t i = 0; i < t.numel(); ++i) {
    std::optional<double> e = ElementAsDouble(t, i);
    if (!e || !(std::fabs(*e - x) <= tol)) return false;
  }
  return true;
}

ValuePred ConstEquals(double x, double tol) {
  return [x, tol](const Value& v, const Match&) { return ConstAll(v, x, tol); };
}

std::optional<double> ConstScalar(const Value& v) {
  if (!v.constant || v.constant->numel() != 1) return std::nullopt;
  return ElementAsDouble(*v.constant, 0);
}

ValuePred IsFloat() {
  return [](const Value& v, const Match&) { return dynvm::IsFloat(v.dtype); };
}

std::optional<std::vector<int64_t>> ReduceAxes(const compiler::Node& n) {
  if (n.inputs.empty() || n.inputs[0] == nullptr || !n.inputs[0]->shape) return std::nullopt;
  const int64_t rank = n.inputs[0]->rank();
  if (const AttrValue* a = n.attr("noop_with_empty_axes"); a != nullptr && a->i != 0) {
    return std::nullopt;
  }
  std::vector<int64_t> axes;
  if (const AttrValue* a = n.attr("axes"); a != nullptr) {
    axes = a->ints;
  } else if (n.inputs.size() > 1 && n.inputs[1] != nullptr) {
    const Value* in = n.inputs[1];
    if (!in->constant || in->constant->dtype() != DType::kI64) return std::nullopt;
    for (int64_t i = 0; i < in->constant->numel(); ++i) {
      axes.push_back(in->constant->data<int64_t>()[in->constant->ElementOffset(i)]);
    }
  }
  if (axes.empty()) {  // every axis
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  for (int64_t& a : axes) {
    if (a < -rank || a >= rank) return std::nullopt;
    if (a < 0) a += rank;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) return std::nullopt;
  return axes;
}

bool ReducesTrailingAxes(const compiler::Node& n, int count) {
  if (const AttrValue* k = n.attr("keepdims"); k != nullptr && k->i == 0) return false;
  std::optional<std::vector<int64_t>> axes = ReduceAxes(n);
  if (!axes || axes->empty()) return false;
  const int64_t rank = n.inputs[0]->rank();
  if (count > 0 && static_cast<int>(axes->size()) != count) return false;
  for (size_t i = 0; i < axes->size(); ++i) {
    if ((*axes)[i] != rank - static_cast<int64_t>(axes->size()) + static_cast<int64_t>(i)) {
      return false;
    }
  }
  return true;
}

std::optional<std::vector<int64_t>> TransposePerm(const compiler::Node& n) {
  const int rank = n.inputs.empty() || n.inputs[0] == nullptr ? -1 : n.inputs[0]->rank();
  if (rank < 0) return std::nullopt;
  if (const AttrValue* a = n.attr("perm"); a != nullptr) {
    if (static_cast<int>(a->ints.size()) != rank) return std::nullopt;
    return a->ints;
  }
  std::vector<int64_t> p(rank);
  for (int i = 0; i < rank; ++i) p[i] = rank - 1 - i;
  return p;
}

std::optional<std::vector<int64_t>> TrailingConstDims(const Value& x, int k, int64_t max_count) {
  if (!x.shape || k <= 0 || k > x.rank()) return std::nullopt;
  std::vector<int64_t> dims;
  int64_t count = 1;
  for (int i = x.rank() - k; i < x.rank(); ++i) {
    std::optional<int64_t> d = SymbolicContext::AsConst((*x.shape)[i]);
    if (!d || *d < 0 || (*d > 0 && count > max_count / *d)) return std::nullopt;
    count *= *d;
    dims.push_back(*d);
  }
  return dims;
}

std::optional<int64_t> ConstNumel(const Value* v) {
  if (v == nullptr || !v->has_shape()) return std::nullopt;
  int64_t n = 1;
  for (Dim d : *v->shape) {
    std::optional<int64_t> c = SymbolicContext::AsConst(d);
    if (!c) return std::nullopt;
    n *= *c;
  }
  return n;
}

}  // namespace dynvm::compiler::rewrite
