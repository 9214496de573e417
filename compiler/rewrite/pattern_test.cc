// The framework itself (pattern.h, rewrite.h): commutative operands, DAG captures, constant
// and shape predicates, single use, the fixpoint, disabling rules.
#include "compiler/rewrite/pattern.h"

#include "compiler/builder.h"
#include "compiler/passes.h"
#include "compiler/rewrite/rewrite.h"
#include "compiler/rewrite/rewrite_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dynvm::compiler::rewrite {
namespace {

using P = Pattern;

// Builds main(x f32[2,3]) with `body` and infers shapes.
struct Fixture {
  Module m;
  GraphBuilder b{m.AddFunction("main")};
  Value* x = b.Input("x", DType::kF32, {2, 3});
  Value* y = b.Input("y", DType::kF32, {2, 3});
  void Finish(Value* out) {
    b.Output("out", out);
    EXPECT_TRUE(InferShapes(m).ok());
  }
};

bool Matches(const P& p, Value* v, Match* m = nullptr) {
  UseCounts uses;
  uses.Count(*v->graph);
  Match local;
  return p.Match(v, uses, m ? *m : local);
}

TEST(PatternTest, CommutativeOperandsMatchEitherOrder) {
  Fixture f;
  Value* v = f.b.Op("Mul", {f.b.ScalarF32(2), f.x});
  f.Finish(v);
  P fixed = P::Op("Mul", {P::Any("a"), P::Const("c", ConstEquals(2))});
  EXPECT_FALSE(Matches(fixed, v));
  P comm = P::Op("Mul", {P::Any("a"), P::Const("c", ConstEquals(2))}).Commutative();
  Match m;
  ASSERT_TRUE(Matches(comm, v, &m));
  EXPECT_EQ(m["a"], f.x);
  EXPECT_EQ(m.nodes.size(), 1u);
}

TEST(PatternTest, SameCaptureMustBeSameValue) {
  Fixture f;
  Value* xx = f.b.Op("Mul", {f.x, f.x});
  Value* xy = f.b.Op("Mul", {f.x, f.y});
  f.Finish(f.b.Op("Add", {xx, xy}));
  P square = P::Op("Mul", {P::Any("a"), P::Any("a")});
  EXPECT_TRUE(Matches(square, xx));
  EXPECT_FALSE(Matches(square, xy));
}

TEST(PatternTest, ConstantPredicatesSeeValueShapeAndDtype) {
  Fixture f;
  Value* half = f.b.Op("Mul", {f.x, f.b.ScalarF32(0.5f)});
  Value* vec = f.b.Op("Mul", {f.x, f.b.Constant(RandomF32({3}, 1))});
  Value* i64 = f.b.Op("Mul", {f.b.ScalarI64(2), f.b.ScalarI64(3)});
  f.Finish(f.b.Op("Add", {half, vec}));
  P p = P::Op("Mul", {P::Any(), P::Const("c", ConstEquals(0.5))});
  EXPECT_TRUE(Matches(p, half));
  EXPECT_FALSE(Matches(p, vec));
  P shaped = P::Op(
      "Mul",
      {P::Any(), P::Const("c").Where([](const Value& v, const Match&) { return v.rank() == 1; })});
  EXPECT_TRUE(Matches(shaped, vec));
  EXPECT_FALSE(Matches(shaped, half));
  P floats = P::Op("Mul", {P::Any().Where(IsFloat()), P::Any()});
  EXPECT_TRUE(Matches(floats, half));
  EXPECT_FALSE(Matches(floats, i64));
}

TEST(PatternTest, SymbolicShapePredicate) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {"batch", 4});
  Value* z = b.Input("z", DType::kF32, {"other", 4});
  Value* xx = b.Op("Add", {x, x});
  Value* xz = b.Op("Add", {x, z});
  b.Output("a", xx);
  b.Output("b", xz);
  ASSERT_TRUE(InferShapes(m).ok());
  // Both operands have the same symbolic first dim.
  P same =
      P::Op("Add", {P::Any("a"), P::Any("b").Where([](const Value& v, const Match& mm) {
                      return v.shape && mm["a"]->shape && (*v.shape)[0] == (*mm["a"]->shape)[0];
                    })});
  EXPECT_TRUE(Matches(same, xx));
  EXPECT_FALSE(Matches(same, xz));
}

TEST(PatternTest, OneUse) {
  Fixture f;
  Value* e = f.b.Op("Exp", {f.x});
  Value* once = f.b.Op("Neg", {f.b.Op("Exp", {f.y})});
  Value* twice = f.b.Op("Neg", {e});
  f.Finish(f.b.Op("Add", {f.b.Op("Add", {twice, e}), once}));
  P p = P::Op("Neg", {P::Op("Exp", {P::Any()}).OneUse()});
  EXPECT_TRUE(Matches(p, once));
  EXPECT_FALSE(Matches(p, twice));
}

// A toy rule set: Neg(Neg(a)) -> Identity(a), then Identity's input Neg(Neg(..)) again.
Rule DoubleNeg() {
  return Rule{"double_neg", P::Op("Neg", {P::Op("Neg", {P::Any("a")})}),
              [](Emitter& e, const Match& m) { return e.Op("Identity", {m["a"]}); }};
}

TEST(RewriteTest, AppliesToFixpointAndKeepsOutputs) {
  Fixture f;
  Value* v = f.x;
  for (int i = 0; i < 8; ++i) v = f.b.Op("Neg", {v});
  f.Finish(v);
  Value* out = f.m.functions()[0].graph->outputs[0];
  Rule r = DoubleNeg();
  absl::StatusOr<RewriteCounts> counts = ApplyRules(f.m, {&r});
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ((*counts)["double_neg"], 4);
  Graph& g = *f.m.functions()[0].graph;
  EXPECT_EQ(g.outputs[0], out);  // the root's value (name, uses) is kept
  for (const auto& n : g.nodes) EXPECT_NE(n->op, "Neg");
}

TEST(RewriteTest, RefusesWhenAnIntermediateHasAnotherConsumer) {
  Fixture f;
  Value* inner = f.b.Op("Neg", {f.x});
  f.Finish(f.b.Op("Add", {f.b.Op("Neg", {inner}), inner}));
  Rule r = DoubleNeg();
  absl::StatusOr<RewriteCounts> counts = ApplyRules(f.m, {&r});
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ((*counts)["double_neg"], 0);
}

TEST(RewriteTest, RulesInsideRegions) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {3});
  Value* c = b.Input("c", DType::kBool, {});
  std::vector<Value*> outs = b.If(
      c, 1,
      [&](GraphBuilder& t) -> std::vector<Value*> { return {t.Op("Neg", {t.Op("Neg", {x})})}; },
      [&](GraphBuilder& e) -> std::vector<Value*> { return {e.Op("Abs", {x})}; });
  b.Output("y", outs[0]);
  ASSERT_TRUE(InferShapes(m).ok());
  Rule r = DoubleNeg();
  absl::StatusOr<RewriteCounts> counts = ApplyRules(m, {&r});
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ((*counts)["double_neg"], 1);
}

TEST(RewriteTest, DisableByNameAndUnknownName) {
  Fixture f;
  f.Finish(f.b.Op("Pow", {f.x, f.b.ScalarF32(2)}));
  RewriteOptions off;
  off.disabled = {"pow_const"};
  absl::StatusOr<RewriteCounts> counts = ApplyRewrites(f.m, off);
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->count("pow_const"), 0u);
  off.disabled = {"no_such_rule"};
  absl::StatusOr<RewriteCounts> bad = ApplyRewrites(f.m, off);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("unknown rewrite rule 'no_such_rule'"));
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("pow_const"));
}

TEST(RewriteTest, CompileOptionsTurnRulesOff) {
  auto build = [](GraphBuilder& b) {
    Value* x = b.Input("x", DType::kF32, {2, 3});
    b.Output("y", b.Op("Pow", {x, b.ScalarF32(2)}));
  };
  const std::vector<std::pair<std::string, Tensor>> in = {{"x", RandomF32({2, 3}, 3)}};
  Outcome on = CompareWithUnoptimized(build, in);
  EXPECT_EQ(on.fired["pow_const"], 1);
  CompileOptions options;
  options.disabled_rewrites = {"pow_const"};
  Outcome off = CompareWithUnoptimized(build, in, options);
  EXPECT_EQ(off.fired.count("pow_const"), 0u);
  EXPECT_TRUE(off.HasKernel("Pow"));
  EXPECT_FALSE(on.HasKernel("Pow"));
}

}  // namespace
}  // namespace dynvm::compiler::rewrite
