// GatherRowsEarly (passes.h): where a program computes a tensor for every row and then keeps
// the rows a run-time index picks, the row-wise ops before the pick compute those rows only.
//
// The case it is for: `vm-compile --decode` (compiler/onnx/decode_wrap.cc) reads the prompt
// step's logits [batch, prompt_len, vocab] as [batch * prompt_len, vocab] and Gathers row
// r * prompt_len + length_r - 1 of each batch row r: one position per row, whose index is known
// only at run time. Computing the output layer (and the last block's MLP) for all prompt_len
// positions and keeping one is most of a prompt step's wasted work. NarrowSelectedRows
// (narrow_rows.cc) handles a constant index; this pass a run-time one.
//
// A tensor's rows: its last axis's vectors, indexed by all its leading axes at once (the
// [d0 * ... * dk, C] matrix of a [d0, ..., dk, C] tensor). The root: Gather(V, I, axis 0) of a
// matrix V with I a vector not as long as V (V's only use). A set S of row-wise nodes is grown
// backward from V's producer: a node joins when it is row-wise (below), its one output has V's
// number of rows, and every use of that output is by a node of S, reading it by rows. The
// rewrite gives every operand that an S node reads by rows and that comes from outside S a
// Gather(Flatten(operand, rank - 1), I, axis 0) (the same rows), so that the S nodes, in place,
// compute [n, ...] instead of [d0, ..., dk, ...]; the root Gather's uses read V. The nodes that
// compute I are moved in front of the first S node when they came after it (refused when I
// depends on S). An index out of range is refused by the inserted Gathers as by the original
// one.
//
// Row-wise: the output's row depends only on the same row of the operands read by rows, which
// have the output's leading dims, and the other operands are read whole and have no leading
// axes the rows could broadcast along (rank <= 1, or rank 2 with dim 0 of size 1, or the
// weights of a product):
//   - elementwise ops (either domain) without an axis attribute, dynvm::SwiGlu;
//   - Reshape and Flatten with as many rows before as after (they split or merge leading axes
//     only; narrowed, they become Identity): the prompt step's [batch * prompt_len, vocab]
//     view, and the Reshape -> Gemm -> Reshape of a 2-D product (GPT-2's Conv1D);
//   - dynvm::RMSNorm, LayerNormalization, Softmax, LogSoftmax over the last axis only;
//   - MatMul with a rank-2 B; dynvm::MatMul without a_perm (B rank 2, or packed and constant);
//     Gemm without transA; dynvm::Linear, dynvm::QMatMul and com.microsoft::MatMulNBits with
//     constant weights.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "compiler/ops/names.h"
#include "compiler/ops/op_def.h"
#include "compiler/passes.h"

namespace dynvm::compiler {
namespace {

// Users of each value defined in a graph: a node of the graph (a use inside a nested region
// counts as a use by the node that owns the region), or nullptr for a graph output.
using Users = absl::flat_hash_map<const Value*, std::vector<const Node*>>;

void CollectNestedUses(const Graph& sub, const Node* owner, Users& users) {
  for (const auto& n : sub.nodes) {
    for (const Value* v : n->inputs) {
      if (v != nullptr) users[v].push_back(owner);
    }
    for (const auto& [name, s] : n->subgraphs) CollectNestedUses(*s, owner, users);
  }
  for (const Value* v : sub.outputs) {
    if (v != nullptr) users[v].push_back(owner);
  }
}

Users CollectUsers(const Graph& g) {
  Users users;
  for (const auto& n : g.nodes) {
    for (const Value* v : n->inputs) {
      if (v != nullptr) users[v].push_back(n.get());
    }
    for (const auto& [name, s] : n->subgraphs) CollectNestedUses(*s, n.get(), users);
  }
  for (const Value* v : g.outputs) {
    if (v != nullptr) users[v].push_back(nullptr);
  }
  return users;
}

int64_t IntAttr(const Node& n, const char* name, int64_t def) {
  const AttrValue* a = n.attr(name);
  return a != nullptr && a->type == AttrValue::Type::kInt ? a->i : def;
}

// How a row-wise node reads each operand.
enum class Read : uint8_t {
  kRows,   // row by row: has the output's leading dims; gathered (or narrowed in S)
  kWhole,  // the same for every row (broadcast, or a product's weights)
};

bool SameLeading(const Value* v, const std::vector<Dim>& leading) {
  if (v == nullptr || !v->shape || v->rank() != static_cast<int>(leading.size()) + 1) return false;
  for (size_t i = 0; i < leading.size(); ++i) {
    if ((*v->shape)[i] != leading[i]) return false;
  }
  return true;
}

// An operand every row reads whole that keeps its meaning against [n, ...] rows: rank <= 1, or
// rank 2 with a first dim of 1 (it broadcasts the same against 2-D rows).
bool BroadcastsAlongRows(const Value* v) {
  if (v == nullptr) return true;
  if (!v->shape) return false;
  if (v->rank() <= 1) return true;
  return v->rank() == 2 && SymbolicContext::AsConst((*v->shape)[0]) == 1;
}

bool LastAxisOnly(const Node& n, int rank) {
  int64_t axis = IntAttr(n, "axis", -1);
  if (axis < 0) axis += rank;
  return axis == rank - 1;
}

// The product ops: operand 0 by rows, the others constant weights (or absent).
bool ConstantWeights(const Node& n) {
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    if (n.inputs[i] != nullptr && !n.inputs[i]->constant) return false;
  }
  return true;
}

// The rows of `v` seen as a matrix of its last axis: the product of its leading dims; null
// when `v` has no known shape of rank 2 or more.
Dim RowCount(Module& m, const Value* v) {
  if (v == nullptr || !v->shape || v->rank() < 2) return nullptr;
  Dim rows = (*v->shape)[0];
  for (int i = 1; i + 1 < v->rank(); ++i) rows = m.sym().Mul(rows, (*v->shape)[i]);
  return rows;
}

// How `n` reads its operands when it is row-wise over the leading axes of its output, whose
// leading dims merge into `rows` rows, or nullopt when it is not.
std::optional<std::vector<Read>> RowWiseReads(Module& m, const Node& n, Dim rows) {
  int used_outputs = 0;
  for (const Value* v : n.outputs) used_outputs += v != nullptr ? 1 : 0;
  if (used_outputs != 1 || n.outputs[0] == nullptr || !n.subgraphs.empty()) return std::nullopt;
  const Value* out = n.outputs[0];
  if (RowCount(m, out) != rows || out->dynamic || out->kind != ObjectKind::kTensor)
    return std::nullopt;
  const int r = out->rank();
  const std::vector<Dim> leading(out->shape->begin(), out->shape->end() - 1);
  std::vector<Read> reads(n.inputs.size(), Read::kWhole);
  const bool dynvm = n.domain == ops::kDynvmDomain;
  const std::string& op = n.op;
  // Operand 0 by rows; the caller has checked the others.
  auto first_by_rows = [&]() -> std::optional<std::vector<Read>> {
    if (n.inputs.empty() || !SameLeading(n.inputs[0], leading)) return std::nullopt;
    reads[0] = Read::kRows;
    return reads;
  };
  if (HasTrait(n, kElementwise) || (dynvm && op == ops::kSwiGlu)) {
    if (n.attr("axis") != nullptr) return std::nullopt;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (SameLeading(n.inputs[i], leading)) {
        reads[i] = Read::kRows;
      } else if (!BroadcastsAlongRows(n.inputs[i])) {
        return std::nullopt;
      }
    }
    return reads;
  }
  if (n.domain.empty() && (op == ops::kReshape || op == ops::kFlatten)) {
    // As many rows before as after (so rows of as many elements): it splits or merges leading
    // axes only, and keeps the rows and their order.
    const Value* in = n.inputs.empty() ? nullptr : n.inputs[0];
    if (RowCount(m, in) != rows) return std::nullopt;
    reads[0] = Read::kRows;
    return reads;
  }
  if ((dynvm && op == ops::kRMSNorm) ||
      (n.domain.empty() &&
       (op == ops::kLayerNormalization || op == ops::kSoftmax || op == ops::kLogSoftmax))) {
    if (!LastAxisOnly(n, r)) return std::nullopt;
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      if (!BroadcastsAlongRows(n.inputs[i])) return std::nullopt;
    }
    return first_by_rows();
  }
  if (op == ops::kMatMul && (n.domain.empty() || dynvm)) {
    if (n.inputs.size() != 2 || n.inputs[1] == nullptr || !n.inputs[1]->shape) return std::nullopt;
    if (const AttrValue* p = dynvm ? n.attr("a_perm") : nullptr; p != nullptr) {
      if (p->type != AttrValue::Type::kInts) return std::nullopt;
      for (size_t i = 0; i < p->ints.size(); ++i) {
        if (p->ints[i] != static_cast<int64_t>(i)) return std::nullopt;
      }
    }
    const bool packed = dynvm && n.attr("b_packed_n") != nullptr;
    if (packed ? !n.inputs[1]->constant : n.inputs[1]->rank() != 2) return std::nullopt;
    return first_by_rows();
  }
  if (n.domain.empty() && op == ops::kGemm) {  // Y [M, N] = A B' + C, A not transposed
    if (r != 2 || IntAttr(n, "transA", 0) != 0 || n.inputs.size() < 2 ||
        SameLeading(n.inputs[1], leading) ||
        (n.inputs.size() > 2 && !BroadcastsAlongRows(n.inputs[2]))) {
      return std::nullopt;
    }
    return first_by_rows();
  }
  if ((dynvm && (op == ops::kLinear || op == ops::kQMatMul)) ||
      (n.domain == ops::kMsftDomain && op == "MatMulNBits")) {
    if (!ConstantWeights(n)) return std::nullopt;
    if (op == ops::kLinear && n.inputs.size() > 2 && !BroadcastsAlongRows(n.inputs[2]))
      return std::nullopt;
    return first_by_rows();
  }
  return std::nullopt;
}

// The pick the pass starts from: Gather(V, I, axis 0) of some of the rows of a matrix V.
struct Root {
  Node* gather = nullptr;
  Value* data = nullptr;  // V [R, C]
  Value* index = nullptr;
  Dim rows = nullptr;  // R
};

std::optional<Root> FindRoot(Node& n, const Users& users) {
  if (!n.domain.empty() || n.op != ops::kGather || n.inputs.size() != 2) return std::nullopt;
  Value* data = n.inputs[0];
  Value* index = n.inputs[1];
  if (data == nullptr || index == nullptr || data->rank() != 2 || index->rank() != 1 ||
      IntAttr(n, "axis", 0) != 0 || data->producer == nullptr || data->producer->graph != n.graph) {
    return std::nullopt;
  }
  // Nothing to save when the index picks as many rows as there are.
  const Dim rows = (*data->shape)[0];
  if ((*index->shape)[0] == rows) return std::nullopt;
  auto it = users.find(data);
  if (it == users.end() || it->second.size() != 1 || it->second[0] != &n) return std::nullopt;
  return Root{&n, data, index, rows};
}

class RowGatherer {
 public:
  RowGatherer(Module& m, Graph& g) : m_(m), g_(g) {}

  // Rewrites every root of the graph; returns how many nodes now compute the picked rows only.
  int Run() {
    int count = 0;
    for (bool changed = true; changed;) {
      changed = false;
      const Users users = CollectUsers(g_);
      for (auto& node : g_.nodes) {
        std::optional<Root> root = FindRoot(*node, users);
        if (!root) continue;
        const int n = Rewrite(*root, users);
        if (n > 0) {
          count += n;
          changed = true;
          break;  // the node list changed
        }
      }
    }
    return count;
  }

 private:
  // The row-wise nodes whose rows the root's pick decides, with how each reads its operands.
  absl::flat_hash_map<const Node*, std::vector<Read>> GrowSet(const Root& root,
                                                              const Users& users) {
    absl::flat_hash_map<const Node*, std::vector<Read>> set;
    std::optional<std::vector<Read>> reads = RowWiseReads(m_, *root.data->producer, root.rows);
    if (!reads) return set;
    set.emplace(root.data->producer, *std::move(reads));
    for (auto it = g_.nodes.rbegin(); it != g_.nodes.rend(); ++it) {
      const Node& n = **it;
      if (set.contains(&n)) continue;
      if (n.outputs.empty() || n.outputs[0] == nullptr) continue;
      auto u = users.find(n.outputs[0]);
      if (u == users.end()) continue;
      bool all_in = true;
      for (const Node* user : u->second) {
        auto s = user != nullptr ? set.find(user) : set.end();
        if (s == set.end()) {
          all_in = false;
          break;
        }
        for (size_t i = 0; i < user->inputs.size(); ++i) {
          if (user->inputs[i] == n.outputs[0] && s->second[i] != Read::kRows) all_in = false;
        }
        if (!all_in) break;
      }
      if (!all_in) continue;
      if (std::optional<std::vector<Read>> r = RowWiseReads(m_, n, root.rows)) {
        set.emplace(&n, *std::move(r));
      }
    }
    return set;
  }

  // The nodes of the graph that `v` depends on (nested regions' captures included).
  absl::flat_hash_set<const Node*> Cone(const Value* v) {
    absl::flat_hash_set<const Node*> cone;
    std::vector<const Value*> work = {v};
    auto visit_region = [&](const Graph& sub, auto& self) -> void {
      for (const auto& n : sub.nodes) {
        for (const Value* in : n->inputs) work.push_back(in);
        for (const auto& [name, s] : n->subgraphs) self(*s, self);
      }
      for (const Value* out : sub.outputs) work.push_back(out);
    };
    while (!work.empty()) {
      const Value* x = work.back();
      work.pop_back();
      if (x == nullptr || x->producer == nullptr || x->producer->graph != &g_) continue;
      if (!cone.insert(x->producer).second) continue;
      for (const Value* in : x->producer->inputs) work.push_back(in);
      for (const auto& [name, s] : x->producer->subgraphs) visit_region(*s, visit_region);
    }
    return cone;
  }

  int Rewrite(const Root& root, const Users& users) {
    const absl::flat_hash_map<const Node*, std::vector<Read>> set = GrowSet(root, users);
    if (set.empty()) return 0;
    const absl::flat_hash_set<const Node*> index_cone = Cone(root.index);
    for (const Node* n : index_cone) {
      if (set.contains(n) || n == root.gather) return 0;
    }
    Value* picked = root.gather->outputs[0];
    std::vector<std::unique_ptr<Node>> out;
    std::vector<std::unique_ptr<Node>> later;  // from the first S node on, but the index's cone
    absl::flat_hash_map<Value*, Value*> gathered;
    bool seen_set = false;
    for (auto& node : g_.nodes) {
      Node* n = node.get();
      if (n == root.gather) continue;  // dropped: V is the picked rows now
      if (!seen_set && set.contains(n)) seen_set = true;
      if (seen_set && index_cone.contains(n)) {
        out.push_back(std::move(node));  // in front of the first S node
        continue;
      }
      if (!seen_set) {
        out.push_back(std::move(node));
        continue;
      }
      auto s = set.find(n);
      if (s != set.end()) Narrow(*n, s->second, set, root, later, gathered);
      later.push_back(std::move(node));
    }
    for (auto& node : later) out.push_back(std::move(node));
    g_.nodes = std::move(out);  // frees the root's Gather
    ReplaceUses(g_, picked, root.data);
    return static_cast<int>(set.size());
  }

  // Makes `n` compute the picked rows: operands it reads by rows from outside the set are
  // gathered; an axis attribute becomes -1 (the last axis, which the rank change keeps).
  void Narrow(Node& n, const std::vector<Read>& reads,
              const absl::flat_hash_map<const Node*, std::vector<Read>>& set, const Root& root,
              std::vector<std::unique_ptr<Node>>& out,
              absl::flat_hash_map<Value*, Value*>& gathered) {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      Value* v = n.inputs[i];
      if (reads[i] != Read::kRows || (v->producer != nullptr && set.contains(v->producer)))
        continue;
      auto it = gathered.find(v);
      if (it == gathered.end()) {
        const std::string name = n.name.empty() ? "rows" : absl::StrCat(n.name, "/rows");
        Value* flat = v;
        if (v->rank() != 2) {
          AttrValue axis;
          axis.type = AttrValue::Type::kInt;
          axis.i = v->rank() - 1;
          flat = AppendNode(m_, g_, out, ops::kFlatten, {v}, {{"axis", axis}}, name, v->dtype);
        }
        AttrValue zero;
        zero.type = AttrValue::Type::kInt;
        zero.i = 0;
        it = gathered
                 .emplace(v, AppendNode(m_, g_, out, ops::kGather, {flat, root.index},
                                        {{"axis", zero}}, name, v->dtype))
                 .first;
      }
      n.inputs[i] = it->second;
    }
    if (n.op == ops::kReshape || n.op == ops::kFlatten) {
      // Its operand is the picked rows [n, C] already.
      n.op = ops::kIdentity;
      n.inputs.resize(1);
      n.attrs.clear();
    } else if (auto a = n.attrs.find("axis"); a != n.attrs.end()) {
      a->second.i = -1;
    }
    for (Value* v : n.outputs) {
      if (v != nullptr) v->shape.reset();  // inferred again
    }
  }

  Module& m_;
  Graph& g_;
};

void GatherInGraph(Module& m, Graph& g, int& count) {
  for (auto& n : g.nodes) {
    for (auto& [name, sub] : n->subgraphs) GatherInGraph(m, *sub, count);
  }
  count += RowGatherer(m, g).Run();
}

}  // namespace

int GatherRowsEarly(Module& m) {
  int count = 0;
  for (Function& f : m.functions()) GatherInGraph(m, *f.graph, count);
  return count;
}

}  // namespace dynvm::compiler
