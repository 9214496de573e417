// Every operator the ONNX importer accepts has compile-time shape and dtype inference, so its
// outputs are typed inside Loop and If bodies too (issue: a GatherElements in a loop body made
// the loop-carried value "f32[?]" and the Loop was refused).
#include <set>
#include <string>
#include <vector>

#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "compiler/onnx/op_support.h"
#include "compiler/op_registry.h"
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
  const std::vector<std::string> ops = onnx::SupportedOps();
  ASSERT_GT(ops.size(), 100u);
  for (const std::string& op : ops) {
    if (Exempt().contains(op)) continue;
    const OpSchema* schema = OpRegistry::Global().Find("", op);
    if (schema == nullptr || !schema->infer) missing.push_back(op);
  }
  EXPECT_TRUE(missing.empty()) << "no shape/dtype function for: "
                               << ::testing::PrintToString(missing);
  // The exemptions hold: Resize (Upsample's target) has one, and the regions' ops are
  // importable (their inference lives in InferGraph).
  EXPECT_NE(OpRegistry::Global().Find("", "Resize"), nullptr);
  for (const char* op : {"If", "Loop", "Scan", "SequenceMap", "Upsample"}) {
    EXPECT_NE(onnx::FindOpSupport(op), nullptr) << op;
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

}  // namespace
}  // namespace dynvm::compiler
