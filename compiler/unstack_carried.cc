// UnstackLoopCarried (passes.h): a loop that carries several tensors stacked into one (an
// exported decode loop's KV cache [layers, 2, batch, heads, past, head_dim]) reads each slice
// with a Gather of a constant index and re-stacks the new slices every iteration:
//
//   body:  G_i = Gather(S, i, axis 0)          (every use of the carried S)
//          S' = Concat(Unsqueeze(Y_0, [0]), ..., Unsqueeze(Y_{n-1}, [0]), axis 0)
//
// The re-stack copies the whole cache every iteration, and hides each slice's own growth
// (Y_i = Concat(G_i, new, axis 2)) from the memory plan, which appends in place only onto a
// carried value. The rewrite carries the n slices apart instead: the loop's initial value is
// split once before the loop (Gather(S_init, i)), the body reads slice i where it read G_i and
// yields Y_i as the slice's next value, and after the loop the final slices are stacked again
// once (only when the loop's result is used). Applied until nothing changes, so a stack of
// stacks ([layers, 2, ...]) becomes one carried value per layer and K/V, each of which the
// memory plan then grows in place ("growable", docs/compiler.md).
//
// Conditions (otherwise the loop is left as it is): the initial value's first dim is the
// constant n; the body output is exactly that re-stack of n slices; every use of the carried
// value in the body is a Gather of a constant scalar index along axis 0 or a Shape of it (which
// becomes [n] followed by slice 0's shape); no use in a nested region, no other reader. Then the
// value has n slices at every iteration, so reading slice i of it is reading the carried slice.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/ops/names.h"
#include "compiler/passes.h"

namespace dynvm::compiler {
namespace {

bool IsOnnx(const Node& n, const char* op) { return n.domain.empty() && n.op == op; }

int64_t IntAttr(const Node& n, const char* name, int64_t def) {
  const AttrValue* a = n.attr(name);
  return a != nullptr && a->type == AttrValue::Type::kInt ? a->i : def;
}

// The value of a constant integer tensor of one element (rank <= `max_rank`).
std::optional<int64_t> ConstIndex(const Value* v, int max_rank) {
  if (v == nullptr || !v->constant || v->constant->numel() != 1 || v->constant->rank() > max_rank) {
    return std::nullopt;
  }
  if (v->dtype == DType::kI64) return v->constant->data<int64_t>()[0];
  if (v->dtype == DType::kI32) return v->constant->data<int32_t>()[0];
  return std::nullopt;
}

// Y when `u` is Unsqueeze(Y, axes = [0]) made in `body` (the axes an attribute or an input).
Value* UnsqueezedAtFront(const Value* u, const Graph* body) {
  if (u == nullptr || u->producer == nullptr || u->graph != body) return nullptr;
  const Node& n = *u->producer;
  if (!IsOnnx(n, ops::kUnsqueeze) || n.inputs.empty() || n.inputs[0] == nullptr) return nullptr;
  const int rank = u->rank();
  std::optional<int64_t> axis;
  if (n.inputs.size() > 1 && n.inputs[1] != nullptr) {
    axis = ConstIndex(n.inputs[1], 1);
  } else if (const AttrValue* a = n.attr("axes");
             a != nullptr && a->type == AttrValue::Type::kInts && a->ints.size() == 1) {
    axis = a->ints[0];
  }
  if (!axis || (*axis != 0 && !(rank > 0 && *axis == -rank))) return nullptr;
  return n.inputs[0];
}

// Where each value is read: nodes of the region itself, and whether a nested region or the
// region's outputs read it.
struct Readers {
  absl::flat_hash_map<const Value*, std::vector<Node*>> nodes;
  absl::flat_hash_map<const Value*, bool> elsewhere;
};

void MarkNested(const Graph& g, Readers& r) {
  for (const auto& n : g.nodes) {
    for (const Value* v : n->inputs) r.elsewhere[v] = true;
    for (const auto& [name, sub] : n->subgraphs) MarkNested(*sub, r);
  }
  for (const Value* v : g.outputs) r.elsewhere[v] = true;
}

Readers ReadersOf(const Graph& g) {
  Readers r;
  for (const auto& n : g.nodes) {
    for (const Value* v : n->inputs) r.nodes[v].push_back(n.get());
    for (const auto& [name, sub] : n->subgraphs) MarkNested(*sub, r);
  }
  for (const Value* v : g.outputs) r.elsewhere[v] = true;
  return r;
}

// One carried value that can be unstacked: its slices' next values and the Gathers reading it
// (with their normalized indices).
struct Unstackable {
  std::vector<Value*> next;
  std::vector<std::pair<Node*, int64_t>> gathers;
  std::vector<Node*> shapes;  // Shape(S) = Concat([n], Shape(slice 0))
};

std::optional<Unstackable> Match(const Node& loop, const Graph& body, size_t k,
                                 const Readers& readers) {
  const Value* init = loop.inputs[2 + k];
  const Value* in = body.inputs[2 + k];
  const Value* out = body.outputs[1 + k];
  while (out != nullptr && out->producer != nullptr && out->graph == &body &&
         IsOnnx(*out->producer, ops::kIdentity) && out->producer->inputs.size() == 1) {
    out = out->producer->inputs[0];  // the re-stack, passed on by Identity
  }
  if (init == nullptr || in == nullptr || out == nullptr || in->kind != ObjectKind::kTensor ||
      !init->shape || init->rank() < 1 || out->producer == nullptr || out->graph != &body) {
    return std::nullopt;
  }
  const std::optional<int64_t> n = SymbolicContext::AsConst((*init->shape)[0]);
  const Node& stack = *out->producer;
  if (!n || *n < 1 || !IsOnnx(stack, ops::kConcat) ||
      static_cast<int64_t>(stack.inputs.size()) != *n) {
    return std::nullopt;
  }
  const int64_t axis = IntAttr(stack, "axis", 0);
  if (axis != 0 && !(out->rank() > 0 && axis == -out->rank())) return std::nullopt;
  Unstackable u;
  for (const Value* part : stack.inputs) {
    Value* y = UnsqueezedAtFront(part, &body);
    if (y == nullptr || y == in) return std::nullopt;
    u.next.push_back(y);
  }
  auto elsewhere = readers.elsewhere.find(in);
  if (elsewhere != readers.elsewhere.end() && elsewhere->second) return std::nullopt;
  auto it = readers.nodes.find(in);
  if (it == readers.nodes.end()) return std::nullopt;  // nothing to gain
  for (Node* g : it->second) {
    if (IsOnnx(*g, ops::kShape) && g->attr("start") == nullptr && g->attr("end") == nullptr &&
        g->inputs.size() == 1 && g->outputs.size() == 1 && g->outputs[0] != nullptr) {
      u.shapes.push_back(g);
      continue;
    }
    if (!IsOnnx(*g, ops::kGather) || g->inputs.size() != 2 || g->inputs[0] != in ||
        g->inputs[1] == in || g->outputs.size() != 1 || g->outputs[0] == nullptr) {
      return std::nullopt;
    }
    const int64_t ax = IntAttr(*g, "axis", 0);
    std::optional<int64_t> index = ConstIndex(g->inputs[1], 0);
    if ((ax != 0 && !(in->rank() > 0 && ax == -in->rank())) || !index || *index < -*n ||
        *index >= *n) {
      return std::nullopt;
    }
    u.gathers.push_back({g, *index < 0 ? *index + *n : *index});
  }
  return u;
}

Value* IndexConstant(Module& m, int64_t i) { return m.NewConstant(Tensor::ScalarI64(i)); }

// Carries slice i of carried value k apart, for every i (see the file comment).
void Unstack(Module& m, Node& loop, size_t k, const Unstackable& u, bool result_used) {
  Graph& outer = *loop.graph;
  Graph& body = *loop.subgraph("body");
  const size_t nc = loop.inputs.size() - 2;
  const size_t n = u.next.size();
  Value* init = loop.inputs[2 + k];
  Value* in = body.inputs[2 + k];
  Value* result = loop.outputs[k];
  const std::string label = absl::StrCat(loop.name, "/unstacked", k);
  // Before the loop: the initial slices.
  std::vector<std::unique_ptr<Node>> before;
  std::vector<Value*> inits, ins, results;
  for (size_t i = 0; i < n; ++i) {
    inits.push_back(AppendNode(m, outer, before, ops::kGather,
                               {init, IndexConstant(m, static_cast<int64_t>(i))},
                               {{"axis", AttrValue{}}}, absl::StrCat(label, "_", i), init->dtype));
    ins.push_back(m.NewValue(in->dtype, std::nullopt, &body));
    results.push_back(
        m.NewValue(result != nullptr ? result->dtype : in->dtype, std::nullopt, &outer));
  }
  // The body reads the carried slices; its Gathers of the stack go, and its Shapes of the stack
  // become [n] followed by slice 0's shape.
  std::vector<Value*> next = u.next;
  for (const auto& [g, i] : u.gathers) {
    ReplaceUses(body, g->outputs[0], ins[i]);
    // A slice passed on unchanged: its next value is the carried slice itself.
    std::replace(next.begin(), next.end(), g->outputs[0], ins[i]);
  }
  std::vector<std::unique_ptr<Node>> nodes;
  for (std::unique_ptr<Node>& node : body.nodes) {
    const bool gather = std::any_of(u.gathers.begin(), u.gathers.end(),
                                    [&](const auto& g) { return g.first == node.get(); });
    if (gather) continue;
    if (std::find(u.shapes.begin(), u.shapes.end(), node.get()) == u.shapes.end()) {
      nodes.push_back(std::move(node));
      continue;
    }
    Tensor count = *Tensor::Empty(DType::kI64, {1});
    count.data<int64_t>()[0] = static_cast<int64_t>(n);
    Value* rest = AppendNode(m, body, nodes, ops::kShape, {ins[0]}, {}, node->name, DType::kI64);
    AppendNode(m, body, nodes, ops::kConcat, {m.NewConstant(std::move(count)), rest},
               {{"axis", AttrValue{}}}, node->name, DType::kI64, node->outputs[0]);
  }
  body.nodes = std::move(nodes);
  // The carried lists: k out, the n slices in at the end of the carried ones.
  loop.inputs.erase(loop.inputs.begin() + 2 + k);
  loop.inputs.insert(loop.inputs.end(), inits.begin(), inits.end());
  body.inputs.erase(body.inputs.begin() + 2 + k);
  body.inputs.insert(body.inputs.end(), ins.begin(), ins.end());
  body.outputs.erase(body.outputs.begin() + 1 + k);
  body.outputs.insert(body.outputs.begin() + static_cast<std::ptrdiff_t>(nc), next.begin(),
                      next.end());
  loop.outputs.erase(loop.outputs.begin() + k);
  loop.outputs.insert(loop.outputs.begin() + static_cast<std::ptrdiff_t>(nc - 1), results.begin(),
                      results.end());
  for (size_t j = 0; j < loop.outputs.size(); ++j) {
    if (loop.outputs[j] == nullptr) continue;
    loop.outputs[j]->producer = &loop;
    loop.outputs[j]->output_index = static_cast<int>(j);
  }
  // After the loop: the stack again, where the loop's result is read.
  std::vector<std::unique_ptr<Node>> after;
  if (result != nullptr && result_used) {
    std::vector<Value*> parts;
    for (size_t i = 0; i < n; ++i) {
      Tensor zero = *Tensor::Empty(DType::kI64, {1});
      zero.data<int64_t>()[0] = 0;
      Value* axes = m.NewConstant(std::move(zero));
      parts.push_back(AppendNode(m, outer, after, ops::kUnsqueeze, {results[i], axes}, {},
                                 absl::StrCat(label, "_restack", i), result->dtype));
    }
    AppendNode(m, outer, after, ops::kConcat, parts, {{"axis", AttrValue{}}},
               absl::StrCat(label, "_restack"), result->dtype, result);
  } else if (result != nullptr) {
    result->producer = nullptr;  // read by nothing: the dead-code pass never sees it
  }
  auto pos = std::find_if(outer.nodes.begin(), outer.nodes.end(),
                          [&](const std::unique_ptr<Node>& node) { return node.get() == &loop; });
  pos = outer.nodes.insert(pos, std::make_move_iterator(before.begin()),
                           std::make_move_iterator(before.end()));
  pos += static_cast<std::ptrdiff_t>(before.size()) + 1;
  outer.nodes.insert(pos, std::make_move_iterator(after.begin()),
                     std::make_move_iterator(after.end()));
}

// One sweep over every Loop (regions included); the number of carried values unstacked.
int Sweep(Module& m) {
  std::vector<Node*> loops;
  ForEachNode(m, [&](Node& n) {
    if (IsOnnx(n, ops::kLoop) && n.subgraph("body") != nullptr) loops.push_back(&n);
  });
  int count = 0;
  for (Node* loop : loops) {
    Graph& body = *loop->subgraph("body");
    if (loop->inputs.size() < 2 || body.inputs.size() != loop->inputs.size() ||
        body.outputs.size() < loop->inputs.size() - 1) {
      continue;
    }
    const Readers readers = ReadersOf(body);
    const Readers outer = ReadersOf(*loop->graph);
    for (size_t k = 0; k + 2 < loop->inputs.size(); ++k) {
      std::optional<Unstackable> u = Match(*loop, body, k, readers);
      if (!u) continue;
      const Value* result = loop->outputs.size() > k ? loop->outputs[k] : nullptr;
      const bool used =
          result != nullptr && (outer.nodes.contains(result) || outer.elsewhere.contains(result));
      Unstack(m, *loop, k, *u, used);
      ++count;
      break;  // the lists changed: the next sweep looks at this loop again
    }
  }
  return count;
}

}  // namespace

absl::StatusOr<int> UnstackLoopCarried(Module& m) {
  int total = 0;
  for (int round = 0; round < 64; ++round) {
    const int count = Sweep(m);
    if (count == 0) break;
    total += count;
    DYNVM_RETURN_IF_ERROR(InferShapes(m));
  }
  return total;
}

}  // namespace dynvm::compiler
