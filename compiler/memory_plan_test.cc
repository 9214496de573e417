// Memory planning on its own: graphs built with the C++ builder, shapes inferred, planned;
// the tests read the plan (storage classes, slots, offsets, live ranges), not emitted code.
#include "compiler/memory_plan.h"

#include <algorithm>

#include "common/status_macros.h"
#include "compiler/builder.h"
#include "compiler/passes.h"
#include "gtest/gtest.h"

namespace dynvm::compiler {
namespace {

absl::StatusOr<MemoryPlan> Plan(Module& m, const CompileOptions& options = {}) {
  DYNVM_RETURN_IF_ERROR(InferShapes(m));
  return MemoryPlan::Make(*m.functions()[0].graph, m.sym(), options);
}

Tensor Zeros(std::vector<int64_t> dims) { return *Tensor::Empty(DType::kF32, dims); }

bool Overlap(const ArenaSlot& a, const ArenaSlot& b) {
  return a.offset < b.offset + b.size && b.offset < a.offset + a.size;
}

bool LiveTogether(const ArenaSlot& a, const ArenaSlot& b) {
  return a.start <= b.end && b.start <= a.end;
}

// No two slots live at the same time share bytes, and the arena holds every slot.
void ExpectValidPlacement(const MemoryPlan& plan) {
  const std::vector<ArenaSlot>& s = plan.slots();
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_GE(s[i].offset, 0);
    EXPECT_EQ(s[i].offset % 64, 0);
    EXPECT_LE(s[i].offset + s[i].size, plan.arena_bytes());
    for (size_t j = i + 1; j < s.size(); ++j) {
      if (LiveTogether(s[i], s[j])) EXPECT_FALSE(Overlap(s[i], s[j])) << i << " and " << j;
    }
  }
}

TEST(MemoryPlanTest, ValuesOfDisjointLifetimesShareArenaBytes) {
  // x -> a -> b -> c -> d -> y: a chain, so a and c (and b and d) are never live together.
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {4, 64});
  Value* a = b.Op("Relu", {x});
  Value* c1 = b.Op("Neg", {a});
  Value* c2 = b.Op("Relu", {c1});
  Value* c3 = b.Op("Neg", {c2});
  b.Output("y", b.Op("Relu", {c3}));
  absl::StatusOr<MemoryPlan> plan = Plan(m);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const Value* v : {a, c1, c2, c3}) {
    EXPECT_EQ(plan->of(v).store, Store::kArena) << v->id;
    ASSERT_EQ(plan->of(v).slots.size(), 1u);
  }
  ExpectValidPlacement(*plan);
  // Four 1 KiB values, at most two live at once: the arena holds two, not four.
  EXPECT_EQ(plan->arena_bytes(), 2 * 4 * 64 * 4);
  EXPECT_EQ(plan->largest_live_bytes(), 2 * 4 * 64 * 4);
  const ArenaSlot& sa = plan->slots()[plan->of(a).slots[0]];
  const ArenaSlot& s2 = plan->slots()[plan->of(c2).slots[0]];
  EXPECT_EQ(sa.offset, s2.offset);
}

TEST(MemoryPlanTest, OutputsInputsAndUnboundedValuesAreNotInTheArena) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {"n", 8});
  Value* fixed = b.Input("f", DType::kF32, {2, 8});
  Value* h = b.Op("Relu", {x});      // n unbounded: pool
  Value* g = b.Op("Relu", {fixed});  // bounded: arena
  Value* out = b.Op("Neg", {g});     // a function output: pool, even though bounded
  Value* r = b.Op("Reshape", {h, b.VectorI64({-1})});  // a view of h
  b.Output("out", out);
  b.Output("r", r);
  absl::StatusOr<MemoryPlan> plan = Plan(m);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->of(x).store, Store::kParam);
  EXPECT_EQ(plan->of(h).store, Store::kPool);
  EXPECT_EQ(plan->of(g).store, Store::kArena);
  EXPECT_EQ(plan->of(out).store, Store::kPool);
  EXPECT_TRUE(plan->IsFunctionOutput(out));
  EXPECT_EQ(plan->of(r).store, Store::kAlias);
  EXPECT_EQ(plan->Root(r), h);
  EXPECT_TRUE(plan->IsFunctionOutput(h));  // the root of an output
  ExpectValidPlacement(*plan);
}

TEST(MemoryPlanTest, BoundsPutSymbolicValuesInTheArenaAtTheirMaximum) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {"n", 16});
  Value* h = b.Op("Relu", {x});
  b.Output("y", b.Op("Neg", {h}));
  CompileOptions options;
  options.bounds = {{"n", 10}};
  m.sym().SetBound("n", 10);
  absl::StatusOr<MemoryPlan> plan = Plan(m, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->of(h).store, Store::kArena);
  EXPECT_EQ(plan->slots()[plan->of(h).slots[0]].size, 10 * 16 * 4);
}

TEST(MemoryPlanTest, LoopCarriedValuesAreDoubleBufferedOrAppended) {
  // A loop that carries a fixed-size state (computed into the arena: two slots, alternating)
  // and a token history that grows by Concat (an in-place append into a growable storage).
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* trip = b.Input("trip", DType::kI64, {});
  Value* state0 = b.Input("state", DType::kF32, {1, 32});
  Value* hist0 = b.Input("hist", DType::kF32, {1, 0});
  Node* loop_node = nullptr;
  const Value* body_state = nullptr;
  std::vector<Value*> res =
      b.Loop(trip, nullptr, {state0, hist0}, 0,
             [&](GraphBuilder& body, Value* iter, Value* cond, const std::vector<Value*>& carried) {
               Value* next = body.Op("Tanh", {carried[0]});
               body_state = next;
               Value* tok = body.Op("ReduceSum", {next}, {{"axes", AttrInts({1})}});
               Value* hist = body.Op("Concat", {carried[1], tok}, {{"axis", AttrInt(1)}});
               loop_node = hist->producer->graph->owner;
               return std::vector<Value*>{cond, next, hist};
             });
  b.Output("state", res[0]);
  b.Output("hist", res[1]);
  absl::StatusOr<MemoryPlan> plan = Plan(m);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_NE(loop_node, nullptr);
  const std::vector<bool>& grow = plan->GrowableCarried(loop_node);
  ASSERT_EQ(grow.size(), 2u);
  EXPECT_FALSE(grow[0]);
  EXPECT_TRUE(grow[1]);
  const Graph* body = loop_node->subgraph("body");
  EXPECT_TRUE(plan->IsAppend(body->outputs[2]->producer));
  EXPECT_EQ(plan->DoubleRootOf(body->outputs[1]), body_state);
  const ValuePlan& sp = plan->of(body_state);
  EXPECT_EQ(sp.store, Store::kArena);
  ASSERT_EQ(sp.slots.size(), 2u);
  // Both slots live across the whole loop, so they never share bytes.
  const ArenaSlot& s0 = plan->slots()[sp.slots[0]];
  const ArenaSlot& s1 = plan->slots()[sp.slots[1]];
  EXPECT_TRUE(LiveTogether(s0, s1));
  EXPECT_FALSE(Overlap(s0, s1));
  ExpectValidPlacement(*plan);
}

// A loop carrying an attention operator's KV cache (Attention 23 with past/present): the
// carried past read only by the node whose present is its next value grows in place; a past
// also read by another node, and the switch kPresentInPlaceSwitch, keep the copying present.
struct CacheLoop {
  Module m;
  Node* loop = nullptr;
  const Value* present_k = nullptr;
};
void BuildCacheLoop(CacheLoop& c, bool extra_reader) {
  GraphBuilder b(c.m.AddFunction("main"));
  Value* trip = b.Input("trip", DType::kI64, {});
  Value* q0 = b.Input("q", DType::kF32, {1, 1, 8});
  Value* k0 = b.Input("past_k", DType::kF32, {1, 2, 3, 4});
  Value* v0 = b.Input("past_v", DType::kF32, {1, 2, 3, 4});
  std::vector<Value*> res =
      b.Loop(trip, nullptr, {k0, v0}, 0,
             [&](GraphBuilder& body, Value* iter, Value* cond, const std::vector<Value*>& carried) {
               std::vector<Value*> outs =
                   body.Ops("Attention", {q0, q0, q0, nullptr, carried[0], carried[1]},
                            {{"q_num_heads", AttrInt(2)}, {"kv_num_heads", AttrInt(2)}}, 3);
               c.present_k = outs[1];
               c.loop = outs[1]->producer->graph->owner;
               if (extra_reader) body.Op("Neg", {carried[0]});
               return std::vector<Value*>{cond, outs[1], outs[2]};
             });
  b.Output("k", res[0]);
  b.Output("v", res[1]);
}

TEST(MemoryPlanTest, AttentionPresentExtendsTheCarriedPastInPlace) {
  CacheLoop c;
  BuildCacheLoop(c, /*extra_reader=*/false);
  absl::StatusOr<MemoryPlan> plan = Plan(c.m);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const Graph* body = c.loop->subgraph("body");
  EXPECT_EQ(plan->GrowableCarried(c.loop), (std::vector<bool>{true, true}));
  EXPECT_EQ(plan->InPlacePresentOf(c.present_k), body->inputs[2]);
  EXPECT_EQ(plan->of(c.present_k).store, Store::kRegister);
  EXPECT_TRUE(plan->MayBeStrided(c.present_k));

  CacheLoop off;
  BuildCacheLoop(off, /*extra_reader=*/false);
  CompileOptions options;
  options.disabled_rewrites = {kPresentInPlaceSwitch};
  absl::StatusOr<MemoryPlan> copied = Plan(off.m, options);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->GrowableCarried(off.loop), (std::vector<bool>{false, false}));
  EXPECT_EQ(copied->InPlacePresentOf(off.present_k), nullptr);
}

TEST(MemoryPlanTest, APastReadByAnotherNodeIsNotExtendedInPlace) {
  CacheLoop c;
  BuildCacheLoop(c, /*extra_reader=*/true);
  absl::StatusOr<MemoryPlan> plan = Plan(c.m);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Keys: the past is also read by Neg (it would see the extended view): copied. Values: in place.
  EXPECT_EQ(plan->GrowableCarried(c.loop), (std::vector<bool>{false, true}));
  EXPECT_EQ(plan->InPlacePresentOf(c.present_k), nullptr);
}

TEST(MemoryPlanTest, TensorsKeptInASequenceGetPoolStorage) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {2, 2});
  Value* kept = b.Op("Relu", {x});
  Value* seq = b.Op("SequenceConstruct", {kept});
  b.Output("n", b.Op("SequenceLength", {seq}));
  absl::StatusOr<MemoryPlan> plan = Plan(m);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->of(kept).store, Store::kPool);
  EXPECT_EQ(plan->of(seq).store, Store::kRegister);
}

TEST(MemoryPlanTest, PlanningIsReproducible) {
  // Slots are made in value order, never hash order: two plans of one graph agree.
  auto build = [](Module& m) {
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {3, 5});
    Value* acc = x;
    for (int i = 0; i < 12; ++i) acc = b.Op(i % 2 ? "Relu" : "Neg", {b.Op("Add", {acc, x})});
    b.Output("y", acc);
  };
  Module m1, m2;
  build(m1);
  build(m2);
  absl::StatusOr<MemoryPlan> p1 = Plan(m1), p2 = Plan(m2);
  ASSERT_TRUE(p1.ok() && p2.ok());
  ASSERT_EQ(p1->slots().size(), p2->slots().size());
  for (size_t i = 0; i < p1->slots().size(); ++i) {
    EXPECT_EQ(p1->slots()[i].offset, p2->slots()[i].offset);
    EXPECT_EQ(p1->slots()[i].size, p2->slots()[i].size);
  }
  EXPECT_EQ(p1->arena_bytes(), p2->arena_bytes());
}

}  // namespace
}  // namespace dynvm::compiler
