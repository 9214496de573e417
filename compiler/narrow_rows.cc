// NarrowSelectedRows (passes.h): when a program computes a whole tensor and then keeps one row
// of it (a language model's logits for every position, of which decoding reads the last), the
// row-wise ops before the selection compute that row only.
//
// A backward "demand" analysis over each region: a value is demanded whole (kFull), or only at
// one index of one axis (kRow), or not at all. A Gather of a single constant index demands its
// data at that row. A row-wise op (below) whose outputs are demanded at a row demands its
// inputs at the matching row of the matching axis, unless an input is broadcast along that
// axis (then it is needed whole). Every other use demands a value whole. Uses inside nested
// regions and region outputs are whole uses.
//
// The rewrite narrows, in place, every row-wise node whose outputs are all demanded at a row:
// each of its inputs that is demanded at that row and produced by a narrowed node is already
// narrowed; any other input read at the row gets a Gather of the single index, keeping the
// axis. The selecting Gathers then read index 0 of their narrowed data. A Gather of an
// out-of-range index still fails at run time: the inserted Gather reads a dim equal to the one
// the original read (the analysis only follows equal symbolic dims).
//
// Row-wise ops: elementwise ops with broadcasting (the row of the output needs the same row of
// every input that has the axis at full size; dynvm's Gelu, GeluTanh, Silu and SwiGlu too),
// MatMul (a row of the output's second-to-last axis needs that row of A, through a_perm for
// dynvm::MatMul; dynvm::Linear, dynvm::QMatMul and com.microsoft::MatMulNBits: a row of any
// axis but the last needs that row of X), dynvm::RMSNorm along an axis before the normalized
// ones, Gemm (a row of Y needs
// A's row, A's axis 1 with transA, and C's row when C is [M, N]), dynvm::Attention (a row of
// the output's query axis, through out_perm, needs the row of Q's query axis, through q_perm,
// and of the mask's when it has that axis at full size; K and V whole),
// Softmax/LogSoftmax/LayerNormalization along another axis, Transpose (the axis moves), and
// Reshape when the output axis is an input axis with as many elements before it, of the same
// size, or a multiple or a divisor of it (ReshapeRows: the wanted rows then are a block of
// rows there).
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
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

// kRow: the block `index` of `count` rows of `axis` (rows [index * count, index * count +
// count); a negative index counts blocks from the end), what a Gather of one index wants
// (count 1) seen through Reshapes that split or merge the axis with others (a batch-first
// [L, B, E] from a [L * B, E] product: one position is a block of B rows there).
struct Demand {
  enum class Kind : uint8_t { kNone, kRow, kFull };
  Kind kind = Kind::kNone;
  int axis = 0;
  int64_t index = 0;
  int64_t count = 1;

  static Demand Full() { return {Kind::kFull, 0, 0, 1}; }
  static Demand Row(int axis, int64_t index, int64_t count = 1) {
    return {Kind::kRow, axis, index, count};
  }
  bool is_row() const { return kind == Kind::kRow; }
  bool SameRows(const Demand& o) const {
    return axis == o.axis && index == o.index && count == o.count;
  }
};

Demand Merge(Demand a, Demand b) {
  if (a.kind == Demand::Kind::kNone) return b;
  if (b.kind == Demand::Kind::kNone) return a;
  if (a.is_row() && b.is_row() && a.SameRows(b)) return a;
  return Demand::Full();
}

int NormalizeAxis(int64_t axis, int rank) {
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

int64_t IntAttr(const Node& n, const char* name, int64_t def) {
  const AttrValue* a = n.attr(name);
  return a != nullptr && a->type == AttrValue::Type::kInt ? a->i : def;
}

// What a row-wise node needs of input `i` when its output 0 is wanted at `row`: kRow (that
// axis), kFull (the input is read whole: broadcast along the axis, or a shape operand), or
// nullopt when the node is not row-wise along that axis (or shapes are not known well enough
// to tell).
struct InputNeed {
  bool narrow = false;  // read at a row (axis below) rather than whole
  int axis = 0;
  int64_t count = 0;  // rows per block on that axis; 0: the output's
};

// A permutation attribute of `rank` entries, the identity when absent; nullopt when malformed.
std::optional<std::vector<int64_t>> PermAttr(const Node& n, const char* name, int rank) {
  std::vector<int64_t> perm(rank);
  for (int i = 0; i < rank; ++i) perm[i] = i;
  const AttrValue* a = n.attr(name);
  if (a == nullptr) return perm;
  if (a->type != AttrValue::Type::kInts || static_cast<int>(a->ints.size()) != rank)
    return std::nullopt;
  for (int64_t p : a->ints) {
    if (p < 0 || p >= rank) return std::nullopt;
  }
  return a->ints;
}

// A Reshape's input rows for output rows in blocks of `count` along `axis`: the input axis `b`
// with as many elements in the dims before it (every index of the dims before then picks the
// same block of elements in both), and the block size there. The dims before must be equal
// (symbolic dims allowed) or all constant (unit dims skipped). Equal sizes: the same blocks. An
// input axis m times longer (the output split it): blocks of count * m rows. m times shorter
// (the output merged it with the dims after it): blocks of count / m, when m divides count.
// nullopt: none of these.
std::optional<std::pair<int, int64_t>> ReshapeRows(const std::vector<Dim>& in,
                                                   const std::vector<Dim>& out, int axis,
                                                   int64_t count) {
  const Dim size = out[axis];
  if (static_cast<int>(in.size()) > axis) {
    bool same = true;
    for (int j = 0; j <= axis && same; ++j) same = in[j] == out[j];
    if (same) return std::make_pair(axis, count);
  }
  int64_t before = 1;  // elements in out's dims before the axis
  for (int j = 0; j < axis; ++j) {
    std::optional<int64_t> c = SymbolicContext::AsConst(out[j]);
    if (!c) return std::nullopt;
    before *= *c;
  }
  const std::optional<int64_t> n = SymbolicContext::AsConst(size);
  int64_t in_before = 1;
  for (int b = 0; b < static_cast<int>(in.size()) && in_before <= before; ++b) {
    if (in_before == before && in[b] == size) return std::make_pair(b, count);
    std::optional<int64_t> c = SymbolicContext::AsConst(in[b]);
    if (!c || *c <= 0) return std::nullopt;
    if (in_before == before && *c != 1) {
      if (!n || *n <= 1) return std::nullopt;
      if (*c % *n == 0) return std::make_pair(b, count * (*c / *n));
      const int64_t m = *n / *c;
      if (*n % *c == 0 && count % m == 0) return std::make_pair(b, count / m);
      return std::nullopt;
    }
    in_before *= *c;
  }
  return std::nullopt;
}

// dynvm::Attention (kernels/reference/attention.h) wanted at a row of output axis `axis`: when
// that axis is R's query axis (through out_perm), the row of Q's query axis (through q_perm)
// and of the mask's if it has the axis at full size; K and V whole. Other axes: nullopt.
template <typename SameAxis>
std::optional<std::vector<InputNeed>> AttentionRows(const Node& n, int r, int axis,
                                                    SameAxis& same_axis_input,
                                                    std::vector<InputNeed>& needs) {
  if (r < 2 || n.inputs.size() < 3 || n.inputs[0] == nullptr || n.inputs[0]->rank() != r)
    return std::nullopt;
  const std::optional<std::vector<int64_t>> out_perm = PermAttr(n, "out_perm", r);
  const std::optional<std::vector<int64_t>> q_perm = PermAttr(n, "q_perm", r);
  if (!out_perm || !q_perm || (*out_perm)[axis] != r - 2) return std::nullopt;
  if (!same_axis_input(0, static_cast<int>((*q_perm)[r - 2]))) return std::nullopt;
  if (n.inputs.size() > 3 && n.inputs[3] != nullptr) {
    const Value* mask = n.inputs[3];
    const int m_axis = (r - 2) - (r - mask->rank());
    if (m_axis >= 0 && SymbolicContext::AsConst((*mask->shape)[m_axis]) != 1 &&
        !same_axis_input(3, m_axis)) {
      return std::nullopt;
    }
  }
  return needs;
}

std::optional<std::vector<InputNeed>> RowWiseInputs(const Node& n, int axis, int64_t count) {
  const bool dynvm = n.domain == ops::kDynvmDomain;
  // Rows of X (operand 0), like MatMul: Linear, and the quantized products.
  const bool linear = (dynvm && (n.op == ops::kLinear || n.op == ops::kQMatMul)) ||
                      (n.domain == ops::kMsftDomain && n.op == "MatMulNBits");
  const bool rms_norm = dynvm && n.op == ops::kRMSNorm;     // over [axis, rank)
  const bool permuted = dynvm && n.op == ops::kMatMul;      // A's rows through a_perm
  const bool attention = dynvm && n.op == ops::kAttention;  // the queries' rows
  // Elementwise ops of either domain (dynvm's Gelu, GeluTanh and Silu among them).
  const bool elementwise = HasTrait(n, kElementwise) || (dynvm && n.op == ops::kSwiGlu);
  if ((!n.domain.empty() && !linear && !permuted && !attention && !elementwise && !rms_norm) ||
      n.outputs.empty() || n.outputs[0] == nullptr) {
    return std::nullopt;
  }
  const Value* out = n.outputs[0];
  if (!out->shape || out->dynamic) return std::nullopt;
  const int r = out->rank();
  if (axis < 0 || axis >= r) return std::nullopt;
  const Dim size = (*out->shape)[axis];
  if (SymbolicContext::AsConst(size) == count) return std::nullopt;  // nothing to save
  // Only output 0 may be used (LayerNormalization's mean and inverse deviation are not).
  std::vector<InputNeed> needs(n.inputs.size());
  for (const Value* in : n.inputs) {
    if (in != nullptr && (!in->shape || in->kind != ObjectKind::kTensor)) return std::nullopt;
  }
  auto same_axis_input = [&](size_t i, int in_axis) -> bool {
    const Value* in = n.inputs[i];
    if (in == nullptr || in_axis < 0 || in_axis >= in->rank()) return false;
    if ((*in->shape)[in_axis] != size) return false;
    needs[i] = {true, in_axis};
    return true;
  };
  const std::string& op = n.op;
  if (attention) {  // Y = Transpose(softmax(Q' K' + mask) V', out_perm): a row of Y's query axis
    return AttentionRows(n, r, axis, same_axis_input, needs);
  }
  if (op == ops::kGemm) {  // Y [M, N] = A' B' + C: a row of Y is a row of A' (and of C if not
                           // broadcast)
    if (r != 2 || axis != 0 || n.inputs.size() < 2) return std::nullopt;
    if (!same_axis_input(0, IntAttr(n, "transA", 0) != 0 ? 1 : 0)) return std::nullopt;
    if (n.inputs.size() > 2 && n.inputs[2] != nullptr && n.inputs[2]->rank() == 2 &&
        SymbolicContext::AsConst((*n.inputs[2]->shape)[0]) != 1 && !same_axis_input(2, 0)) {
      return std::nullopt;
    }
    return needs;
  }
  if (linear) {  // dynvm::Linear(X [..., K], W, B): a row of any axis but the last is X's row
    if (axis >= r - 1 || n.inputs.empty() || n.inputs[0] == nullptr || n.inputs[0]->rank() != r ||
        !same_axis_input(0, axis)) {
      return std::nullopt;
    }
    return needs;
  }
  if (elementwise) {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Value* in = n.inputs[i];
      if (in == nullptr) continue;
      const int in_axis = axis - (r - in->rank());
      if (in_axis < 0) continue;  // broadcast: read whole
      const Dim d = (*in->shape)[in_axis];
      if (SymbolicContext::AsConst(d) == 1) continue;
      if (!same_axis_input(i, in_axis)) return std::nullopt;
    }
    return needs;
  }
  if (op == ops::kMatMul) {
    if (r < 2 || axis != r - 2 || n.inputs.size() != 2 || n.inputs[0] == nullptr)
      return std::nullopt;
    const int ra = n.inputs[0]->rank();
    if (ra < 2) return std::nullopt;
    int row_axis = ra - 2;
    if (const AttrValue* p = permuted ? n.attr("a_perm") : nullptr; p != nullptr) {
      if (p->type != AttrValue::Type::kInts || static_cast<int>(p->ints.size()) != ra)
        return std::nullopt;
      row_axis = static_cast<int>(p->ints[ra - 2]);
    }
    if (!same_axis_input(0, row_axis)) return std::nullopt;
    return needs;
  }
  if (op == ops::kSoftmax || op == ops::kLogSoftmax) {
    const bool legacy = n.attr("legacy_2d") != nullptr;
    const int k = NormalizeAxis(IntAttr(n, "axis", legacy ? 1 : -1), r);
    if (legacy ? axis >= k : axis == k) return std::nullopt;
    if (!same_axis_input(0, axis)) return std::nullopt;
    return needs;
  }
  if (rms_norm) {  // normalizes over [axis, rank): a row of an axis before is x's row
    const int k = NormalizeAxis(IntAttr(n, "axis", -1), r);
    if (axis >= k || !same_axis_input(0, axis)) return std::nullopt;
    return needs;
  }
  if (op == ops::kLayerNormalization) {
    for (size_t i = 1; i < n.outputs.size(); ++i) {
      if (n.outputs[i] != nullptr) return std::nullopt;
    }
    const int k = NormalizeAxis(IntAttr(n, "axis", -1), r);
    if (axis >= k || !same_axis_input(0, axis)) return std::nullopt;
    return needs;
  }
  if (op == ops::kTranspose) {
    const AttrValue* perm = n.attr("perm");
    int in_axis = r - 1 - axis;
    if (perm != nullptr) {
      if (perm->type != AttrValue::Type::kInts || static_cast<int>(perm->ints.size()) != r)
        return std::nullopt;
      in_axis = static_cast<int>(perm->ints[axis]);
    }
    if (!same_axis_input(0, in_axis)) return std::nullopt;
    return needs;
  }
  if (op == ops::kReshape) {
    if (n.inputs.size() != 2 || n.inputs[0] == nullptr || n.inputs[1] == nullptr)
      return std::nullopt;
    const Value* in = n.inputs[0];
    const Value* target = n.inputs[1];
    if (IntAttr(n, "allowzero", 0) != 0) return std::nullopt;
    const std::optional<std::pair<int, int64_t>> rows =
        ReshapeRows(*in->shape, *out->shape, axis, count);
    if (!rows) return std::nullopt;
    const std::optional<int> in_axis = rows->first;
    // The target's entries up to the axis must be sizes, not -1 (inferred from the element
    // count, which narrowing changes): known from its contents. An entry 0 copies the input's
    // dim at its index: at the narrowed input axis (when it is not the output's) it must not.
    if (!target->content || static_cast<int>(target->content->size()) != r) return std::nullopt;
    for (int j = 0; j <= axis; ++j) {
      std::optional<int64_t> c = SymbolicContext::AsConst((*target->content)[j]);
      if (c && *c < 0) return std::nullopt;
    }
    if (*in_axis != axis && *in_axis < r) {
      std::optional<int64_t> c = SymbolicContext::AsConst((*target->content)[*in_axis]);
      if (!c || *c <= 0) return std::nullopt;
    }
    const Value* x = n.inputs[0];
    if (*in_axis >= x->rank()) return std::nullopt;
    needs[0] = {true, *in_axis, rows->second};
    return needs;  // the target is rewritten, read whole
  }
  return std::nullopt;
}

class RowNarrower {
 public:
  RowNarrower(Module& m, Graph& g) : m_(m), g_(g) {}

  int Run() {
    Analyze();
    return Rewrite();
  }

 private:
  void MarkNestedUses(const Graph& sub) {
    for (const auto& n : sub.nodes) {
      for (const Value* v : n->inputs) {
        if (v != nullptr) demand_[v] = Demand::Full();
      }
      for (const auto& [name, s] : n->subgraphs) MarkNestedUses(*s);
    }
    for (const Value* v : sub.outputs) {
      if (v != nullptr) demand_[v] = Demand::Full();
    }
  }

  void Use(const Value* v, Demand d) {
    if (v != nullptr) demand_[v] = Merge(demand_[v], d);
  }

  // A Gather of one constant index: the row it selects.
  static std::optional<Demand> Selection(const Node& n) {
    if (!n.domain.empty() || n.op != ops::kGather || n.inputs.size() != 2) return std::nullopt;
    const Value* data = n.inputs[0];
    const Value* idx = n.inputs[1];
    // Tensors of rows (rank 2 and more): not the selection of one element of a shape.
    if (data == nullptr || idx == nullptr || !data->shape || data->rank() < 2 || !idx->constant) {
      return std::nullopt;
    }
    if (idx->constant->numel() != 1 || idx->constant->rank() > 1) return std::nullopt;
    int64_t index = 0;
    if (idx->dtype == DType::kI64) {
      index = idx->constant->data<int64_t>()[0];
    } else if (idx->dtype == DType::kI32) {
      index = idx->constant->data<int32_t>()[0];
    } else {
      return std::nullopt;
    }
    const int axis = NormalizeAxis(IntAttr(n, "axis", 0), data->rank());
    if (axis < 0 || axis >= data->rank()) return std::nullopt;
    return Demand::Row(axis, index);
  }

  void Analyze() {
    for (const Value* v : g_.outputs) Use(v, Demand::Full());
    for (auto it = g_.nodes.rbegin(); it != g_.nodes.rend(); ++it) {
      const Node& n = **it;
      for (const auto& [name, sub] : n.subgraphs) MarkNestedUses(*sub);
      if (std::optional<Demand> sel = Selection(n)) {
        selections_.emplace(&n, *sel);
        Use(n.inputs[0], *sel);
        Use(n.inputs[1], Demand::Full());
        continue;
      }
      // Narrowed when every used output is wanted at the same row.
      std::optional<Demand> row;
      bool all_rows = !n.outputs.empty() && n.subgraphs.empty();
      for (const Value* v : n.outputs) {
        if (v == nullptr) continue;
        auto d = demand_.find(v);
        if (d == demand_.end() || d->second.kind == Demand::Kind::kNone) continue;
        if (!d->second.is_row() || (row && !row->SameRows(d->second))) {
          all_rows = false;
          break;
        }
        row = d->second;
      }
      std::optional<std::vector<InputNeed>> needs;
      if (all_rows && row && n.outputs.size() >= 1 && n.outputs[0] != nullptr &&
          demand_[n.outputs[0]].is_row()) {
        needs = RowWiseInputs(n, row->axis, row->count);
      }
      if (!needs) {
        for (const Value* v : n.inputs) Use(v, Demand::Full());
        continue;
      }
      narrowed_.emplace(&n, Narrowing{*row, *needs, n.outputs[0]->rank()});
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const InputNeed& need = (*needs)[i];
        Use(n.inputs[i], need.narrow ? Demand::Row(need.axis, row->index,
                                                   need.count > 0 ? need.count : row->count)
                                     : Demand::Full());
      }
    }
  }

  // Whether `v` is narrowed in place (its producer is) to exactly `rows`.
  bool NarrowedInPlace(const Value* v, const Demand& rows) const {
    if (v == nullptr || v->producer == nullptr || v->graph != &g_) return false;
    auto it = narrowed_.find(v->producer);
    if (it == narrowed_.end()) return false;
    auto d = demand_.find(v);
    return d != demand_.end() && d->second.is_row() && d->second.SameRows(rows);
  }

  Value* NewNode(std::vector<std::unique_ptr<Node>>& out, const std::string& op,
                 std::vector<Value*> inputs, Attrs attrs, DType dtype, const std::string& name) {
    return AppendNode(m_, g_, out, op, std::move(inputs), std::move(attrs), name, dtype);
  }

  // The rows of `v` a narrowed user reads: a Gather of the index keeping the axis (one row),
  // or a Slice of the block (rows [index * count, index * count + count); the last block's
  // end as INT64_MAX).
  Value* RowOf(std::vector<std::unique_ptr<Node>>& out, Value* v, const Demand& rows,
               const Node& user) {
    const auto key = std::make_tuple(v, rows.axis, rows.index, rows.count);
    if (auto it = gathered_.find(key); it != gathered_.end()) return it->second;
    const std::string name =
        user.name.empty() ? std::string("row") : absl::StrCat(user.name, "/row");
    Value* row = nullptr;
    if (rows.count == 1) {
      AttrValue ax;
      ax.type = AttrValue::Type::kInt;
      ax.i = rows.axis;
      absl::StatusOr<Tensor> idx = Tensor::FromVector<int64_t>(DType::kI64, {1}, {rows.index});
      row = NewNode(out, ops::kGather, {v, m_.NewConstant(*std::move(idx))}, {{"axis", ax}},
                    v->dtype, name);
    } else {
      const int64_t start = rows.index * rows.count;
      const int64_t end =
          rows.index == -1 ? std::numeric_limits<int64_t>::max() : start + rows.count;
      auto vec = [&](int64_t x) {
        return m_.NewConstant(*Tensor::FromVector<int64_t>(DType::kI64, {1}, {x}));
      };
      row =
          NewNode(out, ops::kSlice, {v, vec(start), vec(end), vec(rows.axis)}, {}, v->dtype, name);
    }
    gathered_.emplace(key, row);
    return row;
  }

  int Rewrite() {
    if (narrowed_.empty()) return 0;
    std::vector<std::unique_ptr<Node>> out;
    for (auto& node : g_.nodes) {
      Node& n = *node;
      // (Found by the analysis: Selection(n) needs its data's shape, which rewriting the data's
      // producer above has reset.)
      if (auto sel = selections_.find(&n);
          sel != selections_.end() && NarrowedInPlace(n.inputs[0], sel->second)) {
        // Its data now has the selected row only.
        const Tensor& old = *n.inputs[1]->constant;
        absl::StatusOr<Tensor> zero = old.rank() == 0
                                          ? absl::StatusOr<Tensor>(Tensor::ScalarI64(0))
                                          : Tensor::FromVector<int64_t>(DType::kI64, {1}, {0});
        n.inputs[1] = m_.NewConstant(*std::move(zero));
      }
      auto it = narrowed_.find(&n);
      if (it != narrowed_.end()) {
        // (What the analysis found: the shapes of narrowed inputs are no longer known here.)
        const Demand row = it->second.row;
        const std::vector<InputNeed>& needs = it->second.needs;
        for (size_t i = 0; i < n.inputs.size(); ++i) {
          const InputNeed& need = needs[i];
          if (!need.narrow) continue;
          const Demand in_rows =
              Demand::Row(need.axis, row.index, need.count > 0 ? need.count : row.count);
          if (NarrowedInPlace(n.inputs[i], in_rows)) continue;
          n.inputs[i] = RowOf(out, n.inputs[i], in_rows, n);
        }
        if (n.op == ops::kReshape) {
          // The target's entry at the axis becomes the block's rows: target * keep + one.
          const int r = it->second.out_rank;
          std::vector<int64_t> keep(r, 1), one(r, 0);
          keep[row.axis] = 0;
          one[row.axis] = row.count;
          Value* scaled = NewNode(
              out, ops::kMul,
              {n.inputs[1], m_.NewConstant(*Tensor::FromVector<int64_t>(DType::kI64, {r}, keep))},
              {}, DType::kI64, absl::StrCat(n.name, "/row_shape"));
          n.inputs[1] =
              NewNode(out, ops::kAdd,
                      {scaled, m_.NewConstant(*Tensor::FromVector<int64_t>(DType::kI64, {r}, one))},
                      {}, DType::kI64, absl::StrCat(n.name, "/row_shape"));
        }
        for (Value* v : n.outputs) {
          if (v != nullptr) v->shape.reset();  // inferred again
        }
      }
      out.push_back(std::move(node));
    }
    g_.nodes = std::move(out);
    return static_cast<int>(narrowed_.size());
  }

  Module& m_;
  Graph& g_;
  absl::flat_hash_map<const Value*, Demand> demand_;
  struct Narrowing {
    Demand row;
    std::vector<InputNeed> needs;
    int out_rank;
  };
  absl::flat_hash_map<const Node*, Narrowing> narrowed_;
  absl::flat_hash_map<const Node*, Demand> selections_;  // the selecting Gathers
  // The rows inserted: (value, axis, index, count) -> its Gather or Slice.
  absl::flat_hash_map<std::tuple<Value*, int, int64_t, int64_t>, Value*> gathered_;
};

void NarrowGraph(Module& m, Graph& g, int& count) {
  for (auto& n : g.nodes) {
    for (auto& [name, sub] : n->subgraphs) NarrowGraph(m, *sub, count);
  }
  count += RowNarrower(m, g).Run();
}

}  // namespace

int NarrowSelectedRows(Module& m) {
  int count = 0;
  for (Function& f : m.functions()) NarrowGraph(m, *f.graph, count);
  return count;
}

}  // namespace dynvm::compiler
