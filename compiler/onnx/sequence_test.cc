// ONNX sequences and optionals end to end: imported, compiled to seq_*/opt_* instructions, run,
// and compared with values worked out by hand; sequence and optional inputs and outputs through
// VirtualMachine::SetInputValue / GetOutputValue; a list appended to in a loop is updated in
// place; malformed uses are refused.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "isa/disassembler.h"
#include "isa/verifier.h"
#include "kernels/testing.h"
#include "onnx/onnx_pb.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler::onnx {
namespace {

namespace pb = ::onnx;
using testing::F32;
using ::testing::HasSubstr;
using testing::I64;
using testing::ToDoubles;
using testing::ToInts;

void SetTensorType(pb::TypeProto* t, int elem, const std::vector<int64_t>& dims) {
  auto* tt = t->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) {
    auto* dim = shape->add_dim();
    if (d >= 0) dim->set_dim_value(d);
  }
}

class Maker {
 public:
  explicit Maker(int opset = 16) {
    model_.set_ir_version(8);
    auto* o = model_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    g_ = model_.mutable_graph();
    g_->set_name("g");
  }
  pb::GraphProto* graph() { return g_; }
  pb::TypeProto* Input(const std::string& name) {
    auto* v = g_->add_input();
    v->set_name(name);
    return v->mutable_type();
  }
  Maker& TensorInput(const std::string& name, int elem, const std::vector<int64_t>& dims) {
    SetTensorType(Input(name), elem, dims);
    return *this;
  }
  Maker& Output(const std::string& name) {
    g_->add_output()->set_name(name);
    return *this;
  }
  pb::NodeProto* Node(const std::string& op, const std::vector<std::string>& ins,
                      const std::vector<std::string>& outs, pb::GraphProto* g = nullptr) {
    g = g ? g : g_;
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(absl::StrCat(op, "_", g->node_size()));
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return n;
  }
  static void Int(pb::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(pb::AttributeProto::INT);
    a->set_i(v);
  }
  void ConstI64(const std::string& name, const std::vector<int64_t>& dims,
                const std::vector<int64_t>& v) {
    auto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(pb::TensorProto::INT64);
    for (int64_t d : dims) t->add_dims(d);
    for (int64_t x : v) t->add_int64_data(x);
  }
  std::string Bytes() const { return model_.SerializeAsString(); }

 private:
  pb::ModelProto model_;
  pb::GraphProto* g_;
};

struct Compiled {
  CompileResult result;
  std::shared_ptr<const Executable> exe;
};

absl::StatusOr<Compiled> CompileModel(const Maker& m) {
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<Module> module, ImportOnnxBytes(m.Bytes(), ""));
  DYNVM_ASSIGN_OR_RETURN(CompileResult r, Compile(*module));
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(r.bytes);
  if (!exe.ok()) return exe.status();
  return Compiled{std::move(r), *std::move(exe)};
}

std::vector<std::vector<double>> Values(const std::vector<Tensor>& items) {
  std::vector<std::vector<double>> out;
  for (const Tensor& t : items) out.push_back(ToDoubles(t));
  return out;
}

std::vector<std::vector<int64_t>> Shapes(const std::vector<Tensor>& items) {
  std::vector<std::vector<int64_t>> out;
  for (const Tensor& t : items) out.emplace_back(t.dims().begin(), t.dims().end());
  return out;
}

TEST(OnnxSequenceTest, SequenceOperatorsComputeTheirValues) {
  // x = [[0,1,2],[3,4,5]], y = [[6,7,8]].
  Maker m;
  m.TensorInput("x", pb::TensorProto::FLOAT, {2, 3})
      .TensorInput("y", pb::TensorProto::FLOAT, {1, 3});
  m.ConstI64("zero", {}, {0});
  m.ConstI64("one", {}, {1});
  m.ConstI64("lens", {2}, {2, 3});
  m.Node("SequenceConstruct", {"x", "y"}, {"s"});                              // [x, y]
  m.Node("SequenceInsert", {"s", "x", "zero"}, {"s2"});                        // [x, x, y]
  m.Node("SequenceLength", {"s2"}, {"len"});                                   // 3
  m.Node("SequenceErase", {"s2"}, {"s3"});                                     // [x, x]
  m.Node("SequenceAt", {"s2", "one"}, {"at"});                                 // x
  m.Node("ConcatFromSequence", {"s2"}, {"cat"});                               // [5, 3]
  Maker::Int(m.Node("ConcatFromSequence", {"s3"}, {"stack"}), "new_axis", 1);  // [2, 2, 3]
  m.Node("SplitToSequence", {"cat", "lens"}, {"parts"});                       // [2,3], [3,3]
  auto* cols = m.Node("SplitToSequence", {"x"}, {"cols"});                     // 3 x [2]
  Maker::Int(cols, "axis", 1);
  Maker::Int(cols, "keepdims", 0);
  m.Node("SplitToSequence", {"y", "one"}, {"ones"});  // chunks of 1 along axis 0
  // torch's unbind(1): a scalar split of 1 with keepdims 0 drops the axis (ONNX Runtime's
  // reading, docs/onnx.md): 3 x [2].
  auto* unbind = m.Node("SplitToSequence", {"x", "one"}, {"unbound"});
  Maker::Int(unbind, "axis", 1);
  Maker::Int(unbind, "keepdims", 0);
  for (const char* o : {"len", "at", "cat", "stack", "parts", "cols", "ones", "s3", "unbound"})
    m.Output(o);
  absl::StatusOr<Compiled> c = CompileModel(m);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c->exe);
  ASSERT_TRUE(vm.ok());
  ASSERT_TRUE((*vm)->SetInput("x", F32({2, 3}, {0, 1, 2, 3, 4, 5})).ok());
  ASSERT_TRUE((*vm)->SetInput("y", F32({1, 3}, {6, 7, 8})).ok());
  absl::Status s = (*vm)->Run();
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<double> x = {0, 1, 2, 3, 4, 5};
  EXPECT_EQ(ToInts(*(*vm)->GetOutput("len")), (std::vector<int64_t>{3}));
  EXPECT_EQ(ToDoubles(*(*vm)->GetOutput("at")), x);
  absl::StatusOr<Tensor> cat = (*vm)->GetOutput("cat");
  ASSERT_TRUE(cat.ok()) << cat.status();
  EXPECT_EQ(cat->dims()[0], 5);
  EXPECT_EQ(ToDoubles(*cat), (std::vector<double>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 6, 7, 8}));
  absl::StatusOr<Tensor> stack = (*vm)->GetOutput("stack");
  ASSERT_TRUE(stack.ok());
  EXPECT_EQ(std::vector<int64_t>(stack->dims().begin(), stack->dims().end()),
            (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(ToDoubles(*stack), (std::vector<double>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}));

  absl::StatusOr<ObjectValue> parts = (*vm)->GetOutputValue("parts");
  ASSERT_TRUE(parts.ok()) << parts.status();
  EXPECT_EQ(parts->kind, ObjectKind::kSequence);
  EXPECT_EQ(Shapes(parts->sequence), (std::vector<std::vector<int64_t>>{{2, 3}, {3, 3}}));
  EXPECT_EQ(Values(parts->sequence),
            (std::vector<std::vector<double>>{{0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8}}));
  absl::StatusOr<ObjectValue> colv = (*vm)->GetOutputValue("cols");
  ASSERT_TRUE(colv.ok());
  EXPECT_EQ(Shapes(colv->sequence), (std::vector<std::vector<int64_t>>{{2}, {2}, {2}}));
  EXPECT_EQ(Values(colv->sequence), (std::vector<std::vector<double>>{{0, 3}, {1, 4}, {2, 5}}));
  absl::StatusOr<ObjectValue> ones = (*vm)->GetOutputValue("ones");
  ASSERT_TRUE(ones.ok());
  EXPECT_EQ(Shapes(ones->sequence), (std::vector<std::vector<int64_t>>{{1, 3}}));
  absl::StatusOr<ObjectValue> unbound = (*vm)->GetOutputValue("unbound");
  ASSERT_TRUE(unbound.ok()) << unbound.status();
  EXPECT_EQ(Shapes(unbound->sequence), (std::vector<std::vector<int64_t>>{{2}, {2}, {2}}));
  EXPECT_EQ(Values(unbound->sequence), (std::vector<std::vector<double>>{{0, 3}, {1, 4}, {2, 5}}));
  absl::StatusOr<ObjectValue> s3 = (*vm)->GetOutputValue("s3");
  ASSERT_TRUE(s3.ok());
  EXPECT_EQ(Values(s3->sequence), (std::vector<std::vector<double>>{x, x}));
  // A sequence output is not a tensor.
  absl::StatusOr<Tensor> not_tensor = (*vm)->GetOutput("s3");
  EXPECT_EQ(not_tensor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_tensor.status().message(), HasSubstr("GetOutputValue"));
  EXPECT_EQ((*vm)->GetOutputs().status().code(), absl::StatusCode::kInvalidArgument);
}

// SplitToSequence of an empty tensor along an axis that is not empty: every piece is empty
// ([0, 1] each, as numpy.split gives), and none of them offsets into the input's storage of
// 0 bytes. Before, the second piece's view at offset 1 failed: "view offset ... outside a
// storage of 0 bytes" (fuzzer seed 20261129 graphs 7843, 8373, 9295).
TEST(OnnxSequenceTest, SplitToSequenceOfAnEmptyTensorGivesEmptyPieces) {
  Maker m;
  m.TensorInput("x", pb::TensorProto::FLOAT, {0, 3});
  m.ConstI64("two", {}, {2});
  m.ConstI64("lens", {2}, {1, 2});
  Maker::Int(m.Node("SplitToSequence", {"x"}, {"cols"}), "axis", 1);
  Maker::Int(m.Node("SplitToSequence", {"x", "two"}, {"chunks"}), "axis", 1);
  Maker::Int(m.Node("SplitToSequence", {"x", "lens"}, {"parts"}), "axis", 1);
  for (const char* o : {"cols", "chunks", "parts"}) m.Output(o);
  absl::StatusOr<Compiled> c = CompileModel(m);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c->exe);
  ASSERT_TRUE(vm.ok());
  ASSERT_TRUE((*vm)->SetInput("x", F32({0, 3}, {})).ok());
  absl::Status s = (*vm)->Run();
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<std::pair<const char*, std::vector<std::vector<int64_t>>>> want = {
      {"cols", {{0, 1}, {0, 1}, {0, 1}}},
      {"chunks", {{0, 2}, {0, 1}}},
      {"parts", {{0, 1}, {0, 2}}}};
  for (const auto& [name, shapes] : want) {
    absl::StatusOr<ObjectValue> v = (*vm)->GetOutputValue(name);
    ASSERT_TRUE(v.ok()) << name << ": " << v.status();
    EXPECT_EQ(Shapes(v->sequence), shapes) << name;
  }
}

// ConcatFromSequence along a second axis of elements that differ in their extent along it: the
// result fills its storage exactly (contiguous), so a Reshape of it is a view that works.
TEST(OnnxSequenceTest, ConcatenationOfUnequalElementsIsContiguous) {
  Maker m;
  m.TensorInput("x", pb::TensorProto::FLOAT, {2, 1})
      .TensorInput("y", pb::TensorProto::FLOAT, {2, 3});
  m.ConstI64("shape", {1}, {-1});
  m.Node("SequenceConstruct", {"x", "y", "x"}, {"s"});
  Maker::Int(m.Node("ConcatFromSequence", {"s"}, {"cat"}), "axis", 1);  // [2, 5]
  m.Node("Reshape", {"cat", "shape"}, {"flat"});
  m.Output("flat");
  absl::StatusOr<Compiled> c = CompileModel(m);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c->exe);
  ASSERT_TRUE(vm.ok());
  ASSERT_TRUE((*vm)->SetInput("x", F32({2, 1}, {1, 2})).ok());
  ASSERT_TRUE((*vm)->SetInput("y", F32({2, 3}, {3, 4, 5, 6, 7, 8})).ok());
  absl::Status s = (*vm)->Run();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ToDoubles(*(*vm)->GetOutput("flat")),
            (std::vector<double>{1, 3, 4, 5, 1, 2, 6, 7, 8, 2}));
}

TEST(OnnxSequenceTest, OptionalsHoldTensorsAndSequencesOrNothing) {
  Maker m;
  m.TensorInput("x", pb::TensorProto::INT64, {2});
  m.Node("Optional", {"x"}, {"o"});
  m.Node("OptionalHasElement", {"o"}, {"has"});
  m.Node("OptionalGetElement", {"o"}, {"got"});
  pb::NodeProto* none = m.Node("Optional", {}, {"none"});
  auto* a = none->add_attribute();
  a->set_name("type");
  a->set_type(pb::AttributeProto::TYPE_PROTO);
  SetTensorType(a->mutable_tp(), pb::TensorProto::INT64, {2});
  m.Node("OptionalHasElement", {"none"}, {"has_none"});
  m.Node("SequenceConstruct", {"x", "x"}, {"q"});
  m.Node("Optional", {"q"}, {"oq"});
  m.Node("OptionalGetElement", {"oq"}, {"q2"});
  for (const char* o : {"has", "got", "has_none", "none", "q2", "oq"}) m.Output(o);
  absl::StatusOr<Compiled> c = CompileModel(m);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c->exe);
  ASSERT_TRUE(vm.ok());
  ASSERT_TRUE((*vm)->SetInput("x", I64({2}, {7, -3})).ok());
  absl::Status s = (*vm)->Run();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ToInts(*(*vm)->GetOutput("has")), (std::vector<int64_t>{1}));
  EXPECT_EQ(ToInts(*(*vm)->GetOutput("got")), (std::vector<int64_t>{7, -3}));
  EXPECT_EQ(ToInts(*(*vm)->GetOutput("has_none")), (std::vector<int64_t>{0}));
  absl::StatusOr<ObjectValue> none_v = (*vm)->GetOutputValue("none");
  ASSERT_TRUE(none_v.ok());
  EXPECT_EQ(none_v->kind, ObjectKind::kOptional);
  EXPECT_FALSE(none_v->has_value);
  absl::StatusOr<ObjectValue> q2 = (*vm)->GetOutputValue("q2");
  ASSERT_TRUE(q2.ok());
  EXPECT_EQ(q2->kind, ObjectKind::kSequence);
  EXPECT_EQ(Values(q2->sequence), (std::vector<std::vector<double>>{{7, -3}, {7, -3}}));
  absl::StatusOr<ObjectValue> oq = (*vm)->GetOutputValue("oq");
  ASSERT_TRUE(oq.ok());
  EXPECT_EQ(oq->elem_kind, ObjectKind::kSequence);
  EXPECT_TRUE(oq->has_value);
  EXPECT_EQ(oq->sequence.size(), 2u);
}

// seq_in: sequence of f32 [?, 2]; opt_in: optional f32 tensor. Outputs: the sequence with
// opt_in's tensor appended (or seq_in itself when opt_in is empty), and its length.
Maker SequenceAndOptionalInputs() {
  Maker m;
  pb::TypeProto* seq = m.Input("seq_in");
  SetTensorType(seq->mutable_sequence_type()->mutable_elem_type(), pb::TensorProto::FLOAT, {-1, 2});
  pb::TypeProto* opt = m.Input("opt_in");
  SetTensorType(opt->mutable_optional_type()->mutable_elem_type(), pb::TensorProto::FLOAT, {-1, 2});
  m.Node("OptionalHasElement", {"opt_in"}, {"has"});
  pb::NodeProto* n = m.Node("If", {"has"}, {"out"});
  auto* then_a = n->add_attribute();
  then_a->set_name("then_branch");
  then_a->set_type(pb::AttributeProto::GRAPH);
  pb::GraphProto* then_g = then_a->mutable_g();
  then_g->set_name("then");
  m.Node("OptionalGetElement", {"opt_in"}, {"t"}, then_g);
  m.Node("SequenceInsert", {"seq_in", "t"}, {"appended"}, then_g);
  then_g->add_output()->set_name("appended");
  auto* else_a = n->add_attribute();
  else_a->set_name("else_branch");
  else_a->set_type(pb::AttributeProto::GRAPH);
  pb::GraphProto* else_g = else_a->mutable_g();
  else_g->set_name("else");
  m.Node("Identity", {"seq_in"}, {"same"}, else_g);
  else_g->add_output()->set_name("same");
  m.Node("SequenceLength", {"out"}, {"n"});
  m.Output("out").Output("n");
  return m;
}

TEST(OnnxSequenceTest, SequenceAndOptionalInputsAndOutputs) {
  absl::StatusOr<Compiled> c = CompileModel(SequenceAndOptionalInputs());
  ASSERT_TRUE(c.ok()) << c.status();
  const FunctionInfo& info = c->exe->function(*c->exe->FindFunction(""));
  ASSERT_EQ(info.inputs.size(), 2u);
  EXPECT_EQ(info.inputs[0].kind, ObjectKind::kSequence);
  EXPECT_EQ(info.inputs[1].kind, ObjectKind::kOptional);
  EXPECT_EQ(info.inputs[1].elem_kind, ObjectKind::kTensor);
  EXPECT_EQ(info.outputs[0].kind, ObjectKind::kSequence);
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c->exe);
  ASSERT_TRUE(vm.ok());
  VirtualMachine& v = **vm;
  const Tensor a = F32({1, 2}, {1, 2}), b = F32({2, 2}, {3, 4, 5, 6});
  ASSERT_TRUE(v.SetInputValue("seq_in", ObjectValue::OfSequence({a, b})).ok());
  ASSERT_TRUE(
      v.SetInputValue("opt_in", ObjectValue::Some(ObjectValue::OfTensor(F32({1, 2}, {9, 8}))))
          .ok());
  absl::Status s = v.Run();
  ASSERT_TRUE(s.ok()) << s;
  absl::StatusOr<ObjectValue> out = v.GetOutputValue("out");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(Values(out->sequence),
            (std::vector<std::vector<double>>{{1, 2}, {3, 4, 5, 6}, {9, 8}}));
  EXPECT_EQ(ToInts(*v.GetOutput("n")), (std::vector<int64_t>{3}));
  // The empty optional: the input sequence comes back as it is.
  ASSERT_TRUE(v.SetInputValue("opt_in", ObjectValue::EmptyOptional(ObjectKind::kTensor)).ok());
  s = v.Run();
  ASSERT_TRUE(s.ok()) << s;
  out = v.GetOutputValue("out");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(Values(out->sequence), (std::vector<std::vector<double>>{{1, 2}, {3, 4, 5, 6}}));
  EXPECT_EQ(ToInts(*v.GetOutput("n")), (std::vector<int64_t>{2}));
  // An empty sequence is a sequence too.
  ASSERT_TRUE(v.SetInputValue("seq_in", ObjectValue::OfSequence({})).ok());
  ASSERT_TRUE(v.Run().ok());
  EXPECT_EQ(ToInts(*v.GetOutput("n")), (std::vector<int64_t>{0}));

  // Wrong kinds, dtypes and element shapes are refused.
  EXPECT_EQ(v.SetInput("seq_in", a).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v.SetInputValue("seq_in", ObjectValue::OfTensor(a)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v.SetInputValue("opt_in", ObjectValue::OfSequence({a})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v.SetInputValue("opt_in", ObjectValue::Some(ObjectValue::OfSequence({a}))).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v.SetInputValue("seq_in", ObjectValue::OfSequence({I64({1, 2}, {1, 2})})).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(
      v.SetInputValue("seq_in", ObjectValue::OfSequence({a, F32({2, 3}, {0, 0, 0, 0, 0, 0})}))
          .ok());
  s = v.Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("seq_in"));
  ASSERT_TRUE(v.SetInputValue("seq_in", ObjectValue::OfSequence({F32({2}, {0, 0})})).ok());
  EXPECT_EQ(v.Run().code(), absl::StatusCode::kInvalidArgument);
}

// A scripted loop appending to a list: SequenceEmpty, then SequenceInsert on the loop-carried
// sequence, then ConcatFromSequence. The appended sequence is updated in place: no move of a
// sequence register in the loop body (a move would make seq_push copy the whole list).
TEST(OnnxSequenceTest, ListAppendedInALoopIsUpdatedInPlace) {
  Maker m;
  m.TensorInput("n", pb::TensorProto::INT64, {});
  Maker::Int(m.Node("SequenceEmpty", {}, {"empty"}), "dtype", pb::TensorProto::INT64);
  pb::NodeProto* loop = m.Node("Loop", {"n", "", "empty"}, {"list"});
  auto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(pb::AttributeProto::GRAPH);
  pb::GraphProto* body = a->mutable_g();
  body->set_name("body");
  SetTensorType(body->add_input()->mutable_type(), pb::TensorProto::INT64, {});
  body->mutable_input(0)->set_name("i");
  SetTensorType(body->add_input()->mutable_type(), pb::TensorProto::BOOL, {});
  body->mutable_input(1)->set_name("c");
  body->add_input()->set_name("acc");
  m.Node("Mul", {"i", "i"}, {"sq"}, body);
  m.Node("Unsqueeze", {"sq", "axes"}, {"sq1"}, body);
  m.Node("SequenceInsert", {"acc", "sq1"}, {"acc2"}, body);
  m.Node("Identity", {"c"}, {"c2"}, body);
  body->add_output()->set_name("c2");
  body->add_output()->set_name("acc2");
  m.ConstI64("axes", {1}, {0});
  m.Node("ConcatFromSequence", {"list"}, {"squares"});
  m.Node("SequenceLength", {"list"}, {"count"});
  m.Output("squares").Output("count");
  absl::StatusOr<Compiled> c = CompileModel(m);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c->exe);
  ASSERT_TRUE(vm.ok());
  ASSERT_TRUE((*vm)->SetInput("n", Tensor::ScalarI64(5)).ok());
  absl::Status s = (*vm)->Run();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ToInts(*(*vm)->GetOutput("squares")), (std::vector<int64_t>{0, 1, 4, 9, 16}));
  EXPECT_EQ(ToInts(*(*vm)->GetOutput("count")), (std::vector<int64_t>{5}));
  // Zero iterations: an empty list; concatenating it is an error (as in ONNX).
  ASSERT_TRUE((*vm)->SetInput("n", Tensor::ScalarI64(0)).ok());
  EXPECT_THAT((*vm)->Run().message(), HasSubstr("out of range"));

  const auto* data = reinterpret_cast<const uint8_t*>(c->result.bytes.data());
  absl::StatusOr<isa::VerifiedFile> verified = isa::VerifyFile({data, c->result.bytes.size()});
  ASSERT_TRUE(verified.ok());
  isa::DisassembleOptions o;
  o.constant_data = false;
  o.pcs = false;
  absl::StatusOr<std::string> text = isa::Disassemble(*verified->executable, {}, o);
  ASSERT_TRUE(text.ok());
  std::vector<std::string> types;
  bool in_loop = false;
  int pushes = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (absl::StartsWith(line, ".oregs"))
      types = absl::StrSplit(line.substr(7), ' ', absl::SkipEmpty());
    if (absl::StartsWith(line, "loop ")) in_loop = true;
    if (absl::StartsWith(line, "endloop")) in_loop = false;
    if (!in_loop) continue;
    if (absl::StartsWith(line, "seq_push")) ++pushes;
    if (absl::StartsWith(line, "mov %o")) {
      int dst = -1;
      ASSERT_TRUE(absl::SimpleAtoi(line.substr(6, line.find(',') - 6), &dst)) << line;
      ASSERT_LT(dst, static_cast<int>(types.size()));
      EXPECT_FALSE(absl::StartsWith(types[dst], "seq"))
          << "the list is moved in the loop: " << line << "\n"
          << *text;
    }
  }
  EXPECT_GE(pushes, 1) << *text;
}

TEST(OnnxSequenceTest, MalformedUsesAreRefused) {
  {  // A tensor op reading a sequence.
    Maker m;
    m.TensorInput("x", pb::TensorProto::FLOAT, {2});
    m.Node("SequenceConstruct", {"x"}, {"s"});
    m.Node("Relu", {"s"}, {"y"});
    m.Output("y");
    absl::StatusOr<Compiled> c = CompileModel(m);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  }
  {  // Inserting an i64 tensor into a sequence of f32.
    Maker m;
    m.TensorInput("x", pb::TensorProto::INT64, {2});
    Maker::Int(m.Node("SequenceEmpty", {}, {"e"}), "dtype", pb::TensorProto::FLOAT);
    m.Node("SequenceInsert", {"e", "x"}, {"s"});
    m.Output("s");
    absl::StatusOr<Compiled> c = CompileModel(m);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr("sequence of f32"));
  }
  {  // SequenceAt of a tensor.
    Maker m;
    m.TensorInput("x", pb::TensorProto::INT64, {});
    m.Node("SequenceAt", {"x", "x"}, {"y"});
    m.Output("y");
    EXPECT_EQ(CompileModel(m).status().code(), absl::StatusCode::kInvalidArgument);
  }
  {  // Maps are not supported.
    Maker m;
    pb::TypeProto* t = m.Input("m");
    t->mutable_map_type()->set_key_type(pb::TensorProto::INT64);
    SetTensorType(t->mutable_map_type()->mutable_value_type(), pb::TensorProto::FLOAT, {});
    m.Node("Identity", {"m"}, {"y"});
    m.Output("y");
    EXPECT_EQ(CompileModel(m).status().code(), absl::StatusCode::kUnimplemented);
  }
  {  // SequenceAt out of range fails at run time.
    Maker m;
    m.TensorInput("x", pb::TensorProto::FLOAT, {2});
    m.ConstI64("five", {}, {5});
    m.Node("SequenceConstruct", {"x"}, {"s"});
    m.Node("SequenceAt", {"s", "five"}, {"y"});
    m.Output("y");
    absl::StatusOr<Compiled> c = CompileModel(m);
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c->exe);
    ASSERT_TRUE((*vm)->SetInput("x", F32({2}, {1, 2})).ok());
    absl::Status s = (*vm)->Run();
    EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
    EXPECT_THAT(s.message(), HasSubstr("SequenceAt"));
  }
  {  // keepdims 0 with a scalar split of 2: chunks of 2 cannot drop the axis (a run-time error
     // naming the node, as ONNX Runtime fails too).
    Maker m;
    m.TensorInput("x", pb::TensorProto::FLOAT, {4});
    m.ConstI64("two", {}, {2});
    pb::NodeProto* split = m.Node("SplitToSequence", {"x", "two"}, {"s"});
    Maker::Int(split, "keepdims", 0);
    split->set_name("unbind");
    m.Output("s");
    absl::StatusOr<Compiled> c = CompileModel(m);
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c->exe);
    ASSERT_TRUE((*vm)->SetInput("x", F32({4}, {1, 2, 3, 4})).ok());
    absl::Status s = (*vm)->Run();
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("unbind"));
    EXPECT_THAT(s.message(), HasSubstr("chunks of 1"));
  }
}

}  // namespace
}  // namespace dynvm::compiler::onnx
