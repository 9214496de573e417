// Every operator the ONNX importer accepts has compile-time shape and dtype inference, so its
// outputs are typed inside Loop and If bodies too (issue: a GatherElements in a loop body made
// the loop-carried value "f32[?]" and the Loop was refused).
#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "compiler/ops/op_def.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler {
namespace {

// Operators with no shape function of their own, each for a reason checked below.
const std::set<std::string>& Exempt() {
  static const std::set<std::string> kExempt = {
      "If",          "Loop", "Scan",  // inferred with their regions (compiler/infer.cc)
      "SequenceMap",                  // imported as a Loop
      "Upsample",                     // imported as Resize
  };
  return kExempt;
}

TEST(OpCoverageTest, EveryImportableOperatorHasShapeAndDtypeInference) {
  std::vector<std::string> missing;
  int importable = 0;
  for (const OpDef* def : BuiltinOps().all()) {
    if (!def->domain.empty() || def->versions.empty()) continue;  // not an importable ONNX op
    // Every version refused (Col2Im, Attention ...): refused at import, never inferred.
    if (std::all_of(def->versions.begin(), def->versions.end(),
                    [](const OpVersion& v) { return v.refused; })) {
      continue;
    }
    ++importable;
    if (Exempt().contains(def->name)) continue;
    if (!def->infer) missing.push_back(def->name);
  }
  ASSERT_GT(importable, 100);
  EXPECT_TRUE(missing.empty()) << "no shape/dtype function for: "
                               << ::testing::PrintToString(missing);
  // The exemptions hold: Resize (Upsample's target) has one, Upsample lowers to it, and the
  // regions' ops are control flow (their inference lives in InferGraph).
  ASSERT_NE(FindOpDef("", "Resize"), nullptr);
  EXPECT_TRUE(FindOpDef("", "Resize")->infer);
  EXPECT_NE(FindOpDef("", "Upsample")->lower, nullptr);
  for (const char* op : {"If", "Loop", "Scan", "SequenceMap"}) {
    ASSERT_NE(FindOpDef("", op), nullptr) << op;
    EXPECT_TRUE(FindOpDef("", op)->has(kControlFlow)) << op;
  }
}

// seqs = GatherElements(seqs, expand(unsqueeze(idx, 1), shape(seqs))) + 1, n times: the
// reduction of the beam-search reorder that failed to compile.
TEST(OpCoverageTest, GatherElementsInALoopKeepsTheCarriedDtype) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* n = b.Input("n", DType::kI64, {});
  Value* seqs = b.Input("seqs", DType::kI64, {"rows", 3});
  Value* idx = b.Input("idx", DType::kI64, {"rows"});
  std::vector<Value*> outs =
      b.Loop(n, nullptr, {seqs}, 0,
             [&](GraphBuilder& l, Value*, Value* cond, const std::vector<Value*>& carried) {
               Value* col = l.Op("Unsqueeze", {idx, l.VectorI64({1})});
               Value* wide = l.Op("Expand", {col, l.Op("Shape", {carried[0]})});
               Value* g = l.Op("GatherElements", {carried[0], wide}, {{"axis", AttrInt(0)}});
               return std::vector<Value*>{cond, l.Op("Add", {g, l.ScalarI64(1)})};
             });
  b.Output("out", outs[0]);
  absl::StatusOr<CompileResult> r = Compile(m);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(
      {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()});
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  ASSERT_TRUE(vm.ok()) << vm.status();

  const std::vector<int64_t> rows_idx = {3, 0, 0, 2};
  std::vector<int64_t> want(12);
  for (int i = 0; i < 12; ++i) want[i] = i;
  for (int trips : {0, 1, 3}) {
    // The oracle: the same recurrence as plain loops.
    std::vector<int64_t> expect = want;
    for (int t = 0; t < trips; ++t) {
      std::vector<int64_t> next(12);
      for (int row = 0; row < 4; ++row) {
        for (int col = 0; col < 3; ++col) next[row * 3 + col] = expect[rows_idx[row] * 3 + col] + 1;
      }
      expect = next;
    }
    ASSERT_TRUE((*vm)->SetInput("n", *Tensor::FromVector<int64_t>(DType::kI64, {}, {trips})).ok());
    ASSERT_TRUE(
        (*vm)->SetInput("seqs", *Tensor::FromVector<int64_t>(DType::kI64, {4, 3}, want)).ok());
    ASSERT_TRUE(
        (*vm)->SetInput("idx", *Tensor::FromVector<int64_t>(DType::kI64, {4}, rows_idx)).ok());
    ASSERT_TRUE((*vm)->Run().ok());
    absl::StatusOr<Tensor> out = (*vm)->GetOutput("out");
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->dtype(), DType::kI64);
    ASSERT_EQ(out->dims(), (std::vector<int64_t>{4, 3}));
    for (int i = 0; i < 12; ++i) EXPECT_EQ(out->data<int64_t>()[i], expect[i]) << trips << " " << i;
  }
}

// A body that changes a carried value's dtype is refused at compile time, naming the Loop, the
// carried value's index and name, and the body node that changed it.
TEST(OpCoverageTest, CarriedDtypeChangeNamesTheValueAndTheBodyNode) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* n = b.Input("n", DType::kI64, {});
  Value* tokens = b.Input("tokens", DType::kI64, {2});
  std::vector<Value*> outs =
      b.Loop(n, nullptr, {tokens}, 0,
             [&](GraphBuilder& l, Value*, Value* cond, const std::vector<Value*>& carried) {
               l.set_node_name("to_float");
               Value* f = l.Op("Cast", {carried[0]}, {{"to", AttrInt(1)}});
               return std::vector<Value*>{cond, f};
             });
  b.Output("out", outs[0]);
  absl::StatusOr<CompileResult> r = Compile(m);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(r.status().message());
  EXPECT_NE(msg.find("loop-carried value 0 'tokens' enters as i64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("body node 'to_float', Cast"), std::string::npos) << msg;
}

using ::testing::HasSubstr;

// The message of compiling `m`, which must fail with InvalidArgument or Unimplemented.
std::string CompileError(Module& m) {
  absl::StatusOr<CompileResult> r = Compile(m);
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_TRUE(r.status().code() == absl::StatusCode::kInvalidArgument ||
              r.status().code() == absl::StatusCode::kUnimplemented)
      << r.status();
  return std::string(r.status().message());
}

// A Loop over `x` (f32[2]) whose body computes `make(body, carried)` as the carried value.
std::string LoopBodyError(const std::function<Value*(GraphBuilder&, Value*)>& make) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  b.set_node_name("the_loop");
  std::vector<Value*> outs =
      b.Loop(b.Input("n", DType::kI64, {}), nullptr, {b.Input("x", DType::kF32, {2})}, 0,
             [&](GraphBuilder& l, Value*, Value* cond, const std::vector<Value*>& carried) {
               return std::vector<Value*>{cond, make(l, carried[0])};
             });
  b.Output("y", outs[0]);
  return CompileError(m);
}

// A carried value whose rank the body changes is refused at compile time (not "an output of
// unknown shape is not pool-owned" from the planner), naming the Loop, the value and the node.
TEST(BodyErrorTest, CarriedRankChangeNamesTheLoopTheValueAndTheBodyNode) {
  const std::string msg = LoopBodyError([](GraphBuilder& l, Value* x) {
    l.set_node_name("the_unsqueeze");
    return l.Op("Unsqueeze", {x, l.VectorI64({0})});
  });
  EXPECT_THAT(msg, HasSubstr("Loop 'the_loop': loop-carried value 0 'x' enters as f32[2] but the "
                             "body makes f32[1,2] (body node 'the_unsqueeze', Unsqueeze): a "
                             "carried value must keep its rank"));
}

// A shape error inside a body names the Loop, that it is in the body, and the node and op.
TEST(BodyErrorTest, ShapeMismatchInABodyNamesTheLoopAndTheBodyNode) {
  const std::string msg = LoopBodyError([](GraphBuilder& l, Value* x) {
    Value* three = l.Constant(*Tensor::FromVector<float>(DType::kF32, {3}, {1, 2, 3}));
    l.set_node_name("the_add");
    return l.Op("Add", {x, three});
  });
  EXPECT_THAT(msg, HasSubstr("Loop 'the_loop': body: Add 'the_add': shapes [2] and [3] do not "
                             "broadcast"));
}

// An op no kernel accepts inside a body names the Loop and the body node.
TEST(BodyErrorTest, NoKernelInABodyNamesTheLoopAndTheBodyNode) {
  const std::string msg = LoopBodyError([](GraphBuilder& l, Value* x) {
    Value* i = l.Op("Cast", {x}, {{"to", AttrInt(7)}});
    l.set_node_name("the_erf");
    return l.Op("Cast", {l.Op("Erf", {i})}, {{"to", AttrInt(1)}});
  });
  EXPECT_THAT(msg, HasSubstr("Loop 'the_loop'"));
  EXPECT_THAT(msg, HasSubstr("Erf 'the_erf': no kernel for Erf(i64)"));
}

// If branches: a dtype disagreement names the If, the output's index and name and the node of
// each branch that made it; a shape error in a branch names the If and the branch.
TEST(BodyErrorTest, IfBranchErrorsNameTheIfTheBranchAndTheNodes) {
  {
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {2});
    Value* c = b.Input("c", DType::kBool, {});
    b.set_node_name("the_if");
    std::vector<Value*> outs = b.If(
        c, 1,
        [&](GraphBuilder& t) {
          t.set_node_name("to_int");
          return std::vector<Value*>{t.Op("Cast", {x}, {{"to", AttrInt(7)}})};
        },
        [&](GraphBuilder& e) {
          e.set_node_name("the_relu");
          return std::vector<Value*>{e.Op("Relu", {x})};
        });
    b.Output("y", outs[0]);
    const std::string msg = CompileError(m);
    EXPECT_THAT(msg, HasSubstr("If 'the_if': output 0 '"));
    EXPECT_THAT(msg, HasSubstr("has type i64[2] in then_branch (then_branch node 'to_int', Cast) "
                               "and f32[2] in else_branch (else_branch node 'the_relu', Relu)"));
  }
  {
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {2});
    Value* c = b.Input("c", DType::kBool, {});
    b.set_node_name("the_if");
    std::vector<Value*> outs = b.If(
        c, 1, [&](GraphBuilder& t) { return std::vector<Value*>{t.Op("Relu", {x})}; },
        [&](GraphBuilder& e) {
          Value* three = e.Constant(*Tensor::FromVector<float>(DType::kF32, {3}, {1, 2, 3}));
          e.set_node_name("the_add");
          return std::vector<Value*>{e.Op("Add", {x, three})};
        });
    b.Output("y", outs[0]);
    EXPECT_THAT(CompileError(m), HasSubstr("If 'the_if': else_branch: Add 'the_add': shapes [2] "
                                           "and [3] do not broadcast"));
  }
}

// A shape error found only at run time inside a body names the Loop and the body node: the body
// doubles x each iteration, so the Add with a [2] constant fails in the second one.
TEST(BodyErrorTest, RunTimeErrorInABodyNamesTheLoopAndTheBodyNode) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  b.set_node_name("the_loop");
  std::vector<Value*> outs =
      b.Loop(b.Input("n", DType::kI64, {}), nullptr, {b.Input("x", DType::kF32, {2})}, 0,
             [&](GraphBuilder& l, Value*, Value* cond, const std::vector<Value*>& carried) {
               Value* two = l.Constant(*Tensor::FromVector<float>(DType::kF32, {2}, {1, 2}));
               l.set_node_name("the_add");
               Value* sum = l.Op("Add", {carried[0], two});
               return std::vector<Value*>{cond, l.Op("Concat", {sum, sum}, {{"axis", AttrInt(0)}})};
             });
  b.Output("y", outs[0]);
  absl::StatusOr<CompileResult> r = Compile(m);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(
      {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()});
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->SetInput("n", Tensor::ScalarI64(2)).ok());
  ASSERT_TRUE((*vm)->SetInput("x", *Tensor::FromVector<float>(DType::kF32, {2}, {0, 0})).ok());
  const absl::Status s = (*vm)->Run();
  EXPECT_THAT(s.message(), HasSubstr("node 'Loop 'the_loop': body: Add 'the_add''")) << s;
  EXPECT_THAT(s.message(), HasSubstr("do not broadcast")) << s;
  // The VM stays usable: one iteration is fine.
  ASSERT_TRUE((*vm)->SetInput("n", Tensor::ScalarI64(1)).ok());
  EXPECT_TRUE((*vm)->Run().ok());
}

}  // namespace
}  // namespace dynvm::compiler
