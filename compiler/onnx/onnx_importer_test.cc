// The ONNX importer on well-formed models (imported, compiled, run) and hostile ones (missing
// fields, cycles, wrong attribute types, huge dims, external data outside the model's folder):
// each is refused with a clear error, never a crash.
#include "compiler/onnx/onnx_importer.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/compiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "onnx/onnx_pb.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler::onnx {
namespace {

namespace pb = ::onnx;
namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A small fluent builder of ModelProtos for tests.
class ModelMaker {
 public:
  explicit ModelMaker(int opset = 13) {
    model_.set_ir_version(7);
    auto* o = model_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    graph_ = model_.mutable_graph();
    graph_->set_name("g");
  }
  pb::ModelProto& model() { return model_; }
  pb::GraphProto* graph() { return graph_; }

  static void SetType(pb::ValueInfoProto* v, int elem, const std::vector<std::string>& dims) {
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* shape = tt->mutable_shape();
    for (const std::string& d : dims) {
      auto* dim = shape->add_dim();
      if (!d.empty() && (std::isdigit(static_cast<unsigned char>(d[0])) || d[0] == '-')) {
        dim->set_dim_value(std::stoll(d));
      } else if (!d.empty()) {
        dim->set_dim_param(d);
      }
    }
  }
  ModelMaker& Input(const std::string& name, int elem, const std::vector<std::string>& dims) {
    SetType(graph_->add_input(), elem, dims);
    graph_->mutable_input(graph_->input_size() - 1)->set_name(name);
    return *this;
  }
  ModelMaker& Output(const std::string& name) {
    graph_->add_output()->set_name(name);
    return *this;
  }
  pb::NodeProto* Node(const std::string& op, const std::vector<std::string>& ins,
                      const std::vector<std::string>& outs, pb::GraphProto* g = nullptr) {
    auto* n = (g ? g : graph_)->add_node();
    n->set_op_type(op);
    n->set_name(absl::StrCat(op, "_", (g ? g : graph_)->node_size()));
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return n;
  }
  static pb::AttributeProto* IntAttr(pb::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(pb::AttributeProto::INT);
    a->set_i(v);
    return a;
  }
  pb::TensorProto* Initializer(const std::string& name, const std::vector<int64_t>& dims,
                               const std::vector<float>& values) {
    auto* t = graph_->add_initializer();
    t->set_name(name);
    t->set_data_type(pb::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
    return t;
  }
  std::string Bytes() const { return model_.SerializeAsString(); }

 private:
  pb::ModelProto model_;
  pb::GraphProto* graph_;
};

absl::StatusOr<std::unique_ptr<Module>> Import(const ModelMaker& m, const std::string& dir = "") {
  return ImportOnnxBytes(m.Bytes(), dir);
}

std::vector<Tensor> CompileAndRun(Module& m,
                                  const std::vector<std::pair<std::string, Tensor>>& inputs) {
  absl::StatusOr<CompileResult> r = Compile(m);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << m.Dump();
  if (!r.ok()) return {};
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(r->bytes);
  EXPECT_TRUE(exe.ok()) << exe.status();
  if (!exe.ok()) return {};
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  EXPECT_TRUE(vm.ok());
  for (const auto& [name, t] : inputs) {
    absl::Status s = (*vm)->SetInput(name, t);
    EXPECT_TRUE(s.ok()) << s;
  }
  absl::Status s = (*vm)->Run();
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return {};
  return *(*vm)->GetOutputs();
}

// A folder under the test's temp dir, removed at the end.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TEST_TMPDIR");
    path_ = fs::path(base ? base : fs::temp_directory_path().string()) /
            absl::StrCat("dynvm_onnx_test_", ::testing::UnitTest::GetInstance()->random_seed(), "_",
                         reinterpret_cast<uintptr_t>(this));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  void Write(const std::string& rel, const std::string& bytes) const {
    fs::create_directories((path_ / rel).parent_path());
    std::ofstream(path_ / rel, std::ios::binary) << bytes;
  }

 private:
  fs::path path_;
};

// ---- well-formed models -------------------------------------------------------------------

TEST(OnnxImporterTest, InputsWeightsSymbolsAndNamesAreKept) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"batch", "3"}).Output("y");
  mm.Initializer("bias", {3}, {1, 2, 3});
  mm.Node("Add", {"x", "bias"}, {"y"});
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  ASSERT_TRUE(m.ok()) << m.status();
  const Graph& g = *(*m)->functions()[0].graph;
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.inputs[0]->name, "x");
  EXPECT_EQ(SymbolicContext::ToString((*g.inputs[0]->shape)[0]), "batch");
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_TRUE(g.nodes[0]->inputs[1]->is_weight);
  std::vector<Tensor> out = CompileAndRun(**m, {{"x", testing::F32({2, 3}, {0, 0, 0, 1, 1, 1})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(testing::ToDoubles(out[0]), (std::vector<double>{1, 2, 3, 2, 3, 4}));
}

TEST(OnnxImporterTest, InitializerThatIsAlsoAnInputIsAWeight) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"2"})
      .Input("w", pb::TensorProto::FLOAT, {"2"})
      .Output("y");
  mm.Initializer("w", {2}, {5, 6});
  mm.Node("Mul", {"x", "w"}, {"y"});
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->functions()[0].graph->inputs.size(), 1u);
  std::vector<Tensor> out = CompileAndRun(**m, {{"x", testing::F32({2}, {1, 2})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(testing::ToDoubles(out[0]), (std::vector<double>{5, 12}));
}

TEST(OnnxImporterTest, OutputThatIsAnInputAndTwoOutputsOfOneValue) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("x").Output("y").Output("y");
  mm.Node("Neg", {"x"}, {"y"});
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<Tensor> out = CompileAndRun(**m, {{"x", testing::F32({2}, {1, 2})}});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(testing::ToDoubles(out[0]), (std::vector<double>{1, 2}));
  EXPECT_EQ(testing::ToDoubles(out[1]), (std::vector<double>{-1, -2}));
  EXPECT_EQ(testing::ToDoubles(out[2]), (std::vector<double>{-1, -2}));
}

TEST(OnnxImporterTest, LoopBodyReadsOuterValues) {
  // y = x; repeat n times: y = y + x (x read from the outer graph inside the body).
  ModelMaker mm;
  mm.Input("n", pb::TensorProto::INT64, {}).Input("x", pb::TensorProto::FLOAT, {"3"}).Output("y");
  pb::NodeProto* loop = mm.Node("Loop", {"n", "", "x"}, {"y"});
  auto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(pb::AttributeProto::GRAPH);
  pb::GraphProto* body = a->mutable_g();
  body->set_name("body");
  ModelMaker::SetType(body->add_input(), pb::TensorProto::INT64, {});
  body->mutable_input(0)->set_name("i");
  ModelMaker::SetType(body->add_input(), pb::TensorProto::BOOL, {});
  body->mutable_input(1)->set_name("c");
  ModelMaker::SetType(body->add_input(), pb::TensorProto::FLOAT, {"3"});
  body->mutable_input(2)->set_name("acc");
  mm.Node("Identity", {"c"}, {"c_out"}, body);
  mm.Node("Add", {"acc", "x"}, {"acc_out"}, body);
  body->add_output()->set_name("c_out");
  body->add_output()->set_name("acc_out");
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<Tensor> out =
      CompileAndRun(**m, {{"n", Tensor::ScalarI64(3)}, {"x", testing::F32({3}, {1, 2, 3})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(testing::ToDoubles(out[0]), (std::vector<double>{4, 8, 12}));
}

// PyTorch's exporter declares a Loop body's iteration number and condition as [1] tensors, and
// ONNX Runtime feeds them in that rank: a body that slices with the iteration number
// (torchvision's MViT pooling, `x[i:i + 1]` in a scripted loop) needs Slice's 1-D starts.
// The body reads them as [1]: each iteration's slice, and the iteration number as a [1] scan
// element ([n, 1] stacked).
TEST(OnnxImporterTest, LoopCountersDeclaredOneDimensionalAreReadAsOneElementTensors) {
  ModelMaker mm;
  mm.Input("n", pb::TensorProto::INT64, {}).Input("x", pb::TensorProto::FLOAT, {"5"});
  mm.Output("slices").Output("iters");
  pb::NodeProto* loop = mm.Node("Loop", {"n", ""}, {"slices", "iters"});
  auto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(pb::AttributeProto::GRAPH);
  pb::GraphProto* body = a->mutable_g();
  body->set_name("body");
  ModelMaker::SetType(body->add_input(), pb::TensorProto::INT64, {"1"});
  body->mutable_input(0)->set_name("i");
  ModelMaker::SetType(body->add_input(), pb::TensorProto::BOOL, {"1"});
  body->mutable_input(1)->set_name("c");
  pb::NodeProto* one = mm.Node("Constant", {}, {"one"}, body);
  auto* v = one->add_attribute();
  v->set_name("value_ints");
  v->set_type(pb::AttributeProto::INTS);
  v->add_ints(1);
  mm.Node("Add", {"i", "one"}, {"end"}, body);
  mm.Node("Slice", {"x", "i", "end"}, {"s"}, body);
  mm.Node("Identity", {"c"}, {"c_out"}, body);
  mm.Node("Identity", {"i"}, {"i_out"}, body);
  for (const char* o : {"c_out", "s", "i_out"}) body->add_output()->set_name(o);
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<Tensor> out = CompileAndRun(
      **m, {{"n", Tensor::ScalarI64(3)}, {"x", testing::F32({5}, {10, 11, 12, 13, 14})}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(std::vector<int64_t>(out[0].dims().begin(), out[0].dims().end()),
            (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(testing::ToDoubles(out[0]), (std::vector<double>{10, 11, 12}));
  EXPECT_EQ(std::vector<int64_t>(out[1].dims().begin(), out[1].dims().end()),
            (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(testing::ToDoubles(out[1]), (std::vector<double>{0, 1, 2}));
}

// An operator the importer does not support inside a Loop body is refused naming the Loop, the
// body, the node and the op.
TEST(OnnxImporterTest, UnsupportedOpInALoopBodyNamesTheLoopAndTheNode) {
  ModelMaker mm;
  mm.Input("n", pb::TensorProto::INT64, {}).Input("x", pb::TensorProto::FLOAT, {"3"}).Output("y");
  pb::NodeProto* loop = mm.Node("Loop", {"n", "", "x"}, {"y"});
  loop->set_name("the_loop");
  auto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(pb::AttributeProto::GRAPH);
  pb::GraphProto* body = a->mutable_g();
  body->set_name("body");
  ModelMaker::SetType(body->add_input(), pb::TensorProto::INT64, {});
  body->mutable_input(0)->set_name("i");
  ModelMaker::SetType(body->add_input(), pb::TensorProto::BOOL, {});
  body->mutable_input(1)->set_name("c");
  ModelMaker::SetType(body->add_input(), pb::TensorProto::FLOAT, {"3"});
  body->mutable_input(2)->set_name("acc");
  mm.Node("Identity", {"c"}, {"c_out"}, body);
  mm.Node("Foo", {"acc"}, {"acc_out"}, body)->set_name("the_foo");
  body->add_output()->set_name("c_out");
  body->add_output()->set_name("acc_out");
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(),
              HasSubstr("node 'the_loop' (Loop): body: node 'the_foo' (Foo): operator Foo is not "
                        "supported"));
}

TEST(OnnxImporterTest, UpsampleBecomesResize) {
  // Opset 7 gives the scales as an attribute; nearest rounds down (asymmetric coordinates):
  // output x reads input floor(x / 3).
  ModelMaker mm(7);
  mm.Input("x", pb::TensorProto::FLOAT, {"1", "1", "1", "2"}).Output("y");
  pb::NodeProto* n = mm.Node("Upsample", {"x"}, {"y"});
  auto* a = n->add_attribute();
  a->set_name("scales");
  a->set_type(pb::AttributeProto::FLOATS);
  for (float f : {1.0f, 1.0f, 1.0f, 3.0f}) a->add_floats(f);
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<Tensor> out = CompileAndRun(**m, {{"x", testing::F32({1, 1, 1, 2}, {1, 2})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(testing::ToDoubles(out[0]), (std::vector<double>{1, 1, 1, 2, 2, 2}));
}

TEST(OnnxImporterTest, ExternalDataInsideTheFolderIsRead) {
  TempDir dir;
  const float w[3] = {7, 8, 9};
  dir.Write("weights/w.bin",
            std::string("PAD!") + std::string(reinterpret_cast<const char*>(w), sizeof(w)));
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"3"}).Output("y");
  pb::TensorProto* t = mm.Initializer("w", {3}, {});
  t->set_data_location(pb::TensorProto::EXTERNAL);
  for (auto [k, v] : {std::pair<const char*, const char*>{"location", "weights/w.bin"},
                      {"offset", "4"},
                      {"length", "12"}}) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  }
  mm.Node("Add", {"x", "w"}, {"y"});
  dir.Write("model.onnx", mm.Bytes());
  absl::StatusOr<std::unique_ptr<Module>> m = ImportOnnxFile((dir.path() / "model.onnx").string());
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<Tensor> out = CompileAndRun(**m, {{"x", testing::F32({3}, {1, 1, 1})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(testing::ToDoubles(out[0]), (std::vector<double>{8, 9, 10}));
}

TEST(OnnxImporterTest, SoftmaxBeforeOpset13IsTwoDimensional) {
  ModelMaker mm(11);
  mm.Input("x", pb::TensorProto::FLOAT, {"1", "2", "2"}).Output("y");
  mm.Node("Softmax", {"x"}, {"y"});
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  ASSERT_TRUE(m.ok()) << m.status();
  // Axis 1 (the default before opset 13) over the flattened [2*2]: four equal probabilities.
  std::vector<Tensor> out = CompileAndRun(**m, {{"x", testing::F32({1, 2, 2}, {0, 0, 0, 0})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(testing::ToDoubles(out[0]), (std::vector<double>{0.25, 0.25, 0.25, 0.25}));
}

// ---- hostile models ------------------------------------------------------------------------

TEST(OnnxImporterHostileTest, NotAProtobuf) {
  absl::StatusOr<std::unique_ptr<Module>> m = ImportOnnxBytes("\xff\xff\xff\xff garbage", "");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("not a valid ONNX model"));
}

TEST(OnnxImporterHostileTest, MissingGraph) {
  ModelMaker mm;
  mm.model().clear_graph();
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("no graph"));
}

TEST(OnnxImporterHostileTest, MissingOpsetImport) {
  ModelMaker mm;
  mm.model().clear_opset_import();
  EXPECT_THAT(Import(mm).status().message(), HasSubstr("imports no opset"));
}

TEST(OnnxImporterHostileTest, MissingOpType) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
  mm.Node("", {"x"}, {"y"});
  EXPECT_THAT(Import(mm).status().message(), HasSubstr("has no op_type"));
}

TEST(OnnxImporterHostileTest, MissingInputType) {
  ModelMaker mm;
  mm.graph()->add_input()->set_name("x");
  mm.Output("y");
  mm.Node("Neg", {"x"}, {"y"});
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("input 'x': has no tensor type"));
}

TEST(OnnxImporterHostileTest, UndefinedName) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
  mm.Node("Add", {"x", "nowhere"}, {"y"});
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("node 'Add_1' (Add): reads 'nowhere'"));
}

TEST(OnnxImporterHostileTest, CyclicGraph) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("b");
  mm.Node("Add", {"x", "b"}, {"a"});
  mm.Node("Neg", {"a"}, {"b"});
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("reads 'b', which is not defined before it"));
}

TEST(OnnxImporterHostileTest, NameDefinedTwice) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
  mm.Node("Neg", {"x"}, {"y"});
  mm.Node("Relu", {"x"}, {"y"});
  EXPECT_THAT(Import(mm).status().message(), HasSubstr("defines 'y', which is already defined"));
}

TEST(OnnxImporterHostileTest, MissingRequiredInputOrTooManyInputs) {
  {
    ModelMaker mm;
    mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
    mm.Node("Add", {"x", ""}, {"y"});
    absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(m.status().message(),
                HasSubstr("node 'Add_1' (Add): required input 1 of Add is missing"));
  }
  {
    ModelMaker mm;
    mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
    mm.Node("If", {}, {"y"});
    EXPECT_THAT(Import(mm).status().message(), HasSubstr("required input 0 of If is missing"));
  }
  {
    ModelMaker mm;
    mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
    mm.Node("Relu", {"x", "x"}, {"y"});
    EXPECT_THAT(Import(mm).status().message(), HasSubstr("Relu takes at most 1 inputs, got 2"));
  }
  {
    ModelMaker mm(9);  // Range exists from opset 11
    mm.Input("x", pb::TensorProto::FLOAT, {}).Output("y");
    mm.Node("Range", {"x", "x", "x"}, {"y"});
    EXPECT_THAT(Import(mm).status().message(),
                HasSubstr("operator Range does not exist in opset 9"));
  }
}

TEST(OnnxImporterHostileTest, UndefinedGraphOutput) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("z");
  EXPECT_THAT(Import(mm).status().message(), HasSubstr("output 'z' is not defined"));
}

TEST(OnnxImporterHostileTest, SubgraphReadsAValueDefinedAfterItsNode) {
  ModelMaker mm;
  mm.Input("c", pb::TensorProto::BOOL, {}).Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
  pb::NodeProto* n = mm.Node("If", {"c"}, {"y"});
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = n->add_attribute();
    a->set_name(branch);
    a->set_type(pb::AttributeProto::GRAPH);
    mm.Node("Neg", {"later"}, {"r"}, a->mutable_g());
    a->mutable_g()->add_output()->set_name("r");
  }
  mm.Node("Neg", {"x"}, {"later"});
  EXPECT_THAT(Import(mm).status().message(),
              HasSubstr("reads 'later', which is not defined before it"));
}

TEST(OnnxImporterHostileTest, WrongAttributeType) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"2", "3"}).Output("y");
  pb::NodeProto* n = mm.Node("Transpose", {"x"}, {"y"});
  auto* a = n->add_attribute();
  a->set_name("perm");
  a->set_type(pb::AttributeProto::FLOAT);
  a->set_f(1);
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      m.status().message(),
      HasSubstr("node 'Transpose_1' (Transpose): attribute 'perm' must be INTS, not FLOAT"));
}

TEST(OnnxImporterHostileTest, AttributeTypeDisagreesWithItsValue) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"2", "3"}).Output("y");
  pb::NodeProto* n = mm.Node("Transpose", {"x"}, {"y"});
  auto* a = n->add_attribute();
  a->set_name("perm");
  a->set_type(pb::AttributeProto::INTS);
  a->set_f(1);
  EXPECT_THAT(Import(mm).status().message(),
              HasSubstr("attribute 'perm': is of type INTS but holds a FLOAT"));
}

TEST(OnnxImporterHostileTest, AttributeWithoutName) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
  ModelMaker::IntAttr(mm.Node("Flatten", {"x"}, {"y"}), "", 1);
  EXPECT_THAT(Import(mm).status().message(), HasSubstr("an attribute has no name"));
}

TEST(OnnxImporterHostileTest, HugeDeclaredDims) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"1125899906842624", "2"}).Output("y");
  mm.Node("Neg", {"x"}, {"y"});
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("declares a huge dim"));
}

TEST(OnnxImporterHostileTest, NegativeDeclaredDim) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"-3"}).Output("y");
  mm.Node("Neg", {"x"}, {"y"});
  EXPECT_THAT(Import(mm).status().message(), HasSubstr("declares a negative dim -3"));
}

TEST(OnnxImporterHostileTest, InitializerDimsOverflow) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
  mm.Initializer("w", {int64_t{1} << 40, int64_t{1} << 40}, {1});
  mm.Node("Add", {"x", "w"}, {"y"});
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("initializer 'w'"));
  EXPECT_THAT(m.status().message(), HasSubstr("overflows"));
}

TEST(OnnxImporterHostileTest, InitializerDataShorterThanItsDims) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"4"}).Output("y");
  pb::TensorProto* t = mm.Initializer("w", {4}, {});
  t->set_raw_data(std::string(12, '\0'));
  mm.Node("Add", {"x", "w"}, {"y"});
  EXPECT_THAT(Import(mm).status().message(), HasSubstr("needs 16 bytes, raw_data has 12"));
  t->clear_raw_data();
  t->add_float_data(1);
  EXPECT_THAT(Import(mm).status().message(), HasSubstr("needs 4 elements, has 1"));
}

TEST(OnnxImporterHostileTest, TensorWithoutDataType) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"1"}).Output("y");
  mm.Initializer("w", {1}, {1})->clear_data_type();
  mm.Node("Add", {"x", "w"}, {"y"});
  EXPECT_THAT(Import(mm).status().message(), HasSubstr("tensor 'w' has no data type"));
}

pb::TensorProto* ExternalInitializer(ModelMaker& mm, const std::string& location) {
  mm.Input("x", pb::TensorProto::FLOAT, {"3"}).Output("y");
  pb::TensorProto* t = mm.Initializer("w", {3}, {});
  t->set_data_location(pb::TensorProto::EXTERNAL);
  auto* e = t->add_external_data();
  e->set_key("location");
  e->set_value(location);
  mm.Node("Add", {"x", "w"}, {"y"});
  return t;
}

TEST(OnnxImporterHostileTest, ExternalDataOutsideTheFolder) {
  TempDir dir;
  dir.Write("secret.bin", std::string(12, 'x'));
  dir.Write("model/ok.bin", std::string(12, '\0'));
  for (const std::string& location :
       {std::string("../secret.bin"), std::string("sub/../../secret.bin"),
        (dir.path() / "secret.bin").string()}) {
    ModelMaker mm;
    ExternalInitializer(mm, location);
    absl::StatusOr<std::unique_ptr<Module>> m =
        ImportOnnxBytes(mm.Bytes(), (dir.path() / "model").string());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kPermissionDenied)
        << location << ": " << m.status();
    EXPECT_THAT(m.status().message(), HasSubstr("initializer 'w'")) << location;
  }
}

TEST(OnnxImporterHostileTest, ExternalDataThroughASymlinkOutsideTheFolder) {
  TempDir dir;
  dir.Write("secret.bin", std::string(12, 'x'));
  fs::create_directories(dir.path() / "model");
  std::error_code ec;
  fs::create_symlink(dir.path() / "secret.bin", dir.path() / "model" / "link.bin", ec);
  if (ec) GTEST_SKIP() << "cannot create a symlink: " << ec.message();
  ModelMaker mm;
  ExternalInitializer(mm, "link.bin");
  absl::StatusOr<std::unique_ptr<Module>> m =
      ImportOnnxBytes(mm.Bytes(), (dir.path() / "model").string());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kPermissionDenied) << m.status();
  EXPECT_THAT(m.status().message(), HasSubstr("resolves outside the model's folder"));
}

TEST(OnnxImporterHostileTest, ExternalDataMissingFileOrPastTheEnd) {
  TempDir dir;
  dir.Write("short.bin", std::string(8, '\0'));
  {
    ModelMaker mm;
    ExternalInitializer(mm, "absent.bin");
    absl::StatusOr<std::unique_ptr<Module>> m = ImportOnnxBytes(mm.Bytes(), dir.path().string());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound) << m.status();
  }
  {
    ModelMaker mm;
    pb::TensorProto* t = ExternalInitializer(mm, "short.bin");
    auto* e = t->add_external_data();
    e->set_key("offset");
    e->set_value("100");
    absl::StatusOr<std::unique_ptr<Module>> m = ImportOnnxBytes(mm.Bytes(), dir.path().string());
    EXPECT_THAT(m.status().message(), HasSubstr("past the end"));
  }
  {
    ModelMaker mm;
    ExternalInitializer(mm, "short.bin");
    absl::StatusOr<std::unique_ptr<Module>> m = ImportOnnxBytes(mm.Bytes(), dir.path().string());
    EXPECT_THAT(m.status().message(), HasSubstr("needs 12 bytes; its external data has 8"));
  }
  {
    ModelMaker mm;
    ExternalInitializer(mm, "short.bin");
    absl::StatusOr<std::unique_ptr<Module>> m = ImportOnnxBytes(mm.Bytes(), "");
    EXPECT_THAT(m.status().message(), HasSubstr("without its folder"));
  }
}

TEST(OnnxImporterHostileTest, UnsupportedOperatorAttributeAndType) {
  {
    ModelMaker mm;
    mm.Input("x", pb::TensorProto::FLOAT, {"1", "1", "4", "4"}).Output("y");
    mm.Node("MaxRoiPool", {"x"}, {"y"});
    absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(
        m.status().message(),
        HasSubstr("node 'MaxRoiPool_1' (MaxRoiPool): operator MaxRoiPool is not supported"));
  }
  {
    ModelMaker mm;
    mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
    ModelMaker::IntAttr(mm.Node("Relu", {"x"}, {"y"}), "fancy", 1);
    absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(m.status().message(),
                HasSubstr("node 'Relu_1' (Relu): attribute 'fancy' of Relu is not supported"));
  }
  {
    ModelMaker mm;
    mm.Input("x", pb::TensorProto::COMPLEX64, {"2"}).Output("y");
    mm.Node("Identity", {"x"}, {"y"});
    absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(m.status().message(),
                HasSubstr("input 'x': element type COMPLEX64 is not supported"));
  }
  {
    ModelMaker mm;
    mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
    mm.Node("Foo", {"x"}, {"y"})->set_domain("com.example");
    absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(m.status().message(), HasSubstr("operator com.example::Foo is not supported"));
  }
}

TEST(OnnxImporterTest, RegisteredOpsOfOtherDomainsAreImported) {
  // dynvm's own ops register like a user's custom op would: dynvm::Emit streams a value.
  ModelMaker mm;
  auto* o = mm.model().add_opset_import();
  o->set_domain("dynvm");
  o->set_version(1);
  mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
  mm.Node("Emit", {"x"}, {})->set_domain("dynvm");
  mm.Node("Neg", {"x"}, {"y"});
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->functions()[0].graph->nodes[0]->domain, "dynvm");
  std::vector<Tensor> out = CompileAndRun(**m, {{"x", testing::F32({2}, {1, 2})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(testing::ToDoubles(out[0]), (std::vector<double>{-1, -2}));
}

// ONNX Runtime's contrib operators (compiler/ops/msft.cc): checked against their signatures;
// an operator dynvm does not define is refused naming it and the domain.
TEST(OnnxImporterTest, MicrosoftDomain) {
  auto make = [](const char* op, std::vector<std::string> inputs) {
    auto mm = std::make_unique<ModelMaker>();
    auto* o = mm->model().add_opset_import();
    o->set_domain("com.microsoft");
    o->set_version(1);
    mm->Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
    mm->Node(op, inputs, {"y"})->set_domain("com.microsoft");
    return mm;
  };
  {
    auto mm = make("NoSuchContribOp", {"x"});
    absl::StatusOr<std::unique_ptr<Module>> m = Import(*mm);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(m.status().message(),
                HasSubstr("operator NoSuchContribOp of domain com.microsoft"));
  }
  {
    auto mm = make("QuickGelu", {"x", "x"});  // one input at most
    absl::StatusOr<std::unique_ptr<Module>> m = Import(*mm);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(m.status().message(), HasSubstr("QuickGelu takes at most 1 inputs"));
  }
  {
    auto mm = make("Gelu", {"x"});  // lowered to dynvm::Gelu
    absl::StatusOr<std::unique_ptr<Module>> m = Import(*mm);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ((*m)->functions()[0].graph->nodes[0]->domain, "dynvm");
    std::vector<Tensor> out = CompileAndRun(**m, {{"x", testing::F32({2}, {0, 1})}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_NEAR(testing::ToDoubles(out[0])[1], 0.8413447460685429, 1e-6);
  }
}

TEST(OnnxImporterHostileTest, UnsupportedDtypeIsRefusedAtCompileTimeNamingTheNode) {
  // Erf has no kernel for i64: the compiler refuses the node, naming it.
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::INT64, {"2"}).Output("y");
  mm.Node("Erf", {"x"}, {"y"});
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<CompileResult> r = Compile(**m);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("Erf 'Erf_1'"));
  EXPECT_THAT(r.status().message(), HasSubstr("i64"));
}

TEST(OnnxImporterHostileTest, OpsetOutOfRange) {
  for (int opset : {24, 0}) {
    ModelMaker mm(opset);
    mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
    mm.Node("Neg", {"x"}, {"y"});
    absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
    EXPECT_NE(m.status().code(), absl::StatusCode::kOk);
    EXPECT_THAT(m.status().message(), HasSubstr("opset")) << opset;
    if (opset == 24) {
      EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
      EXPECT_THAT(m.status().message(), HasSubstr("opset 24 is not supported"));
      EXPECT_THAT(m.status().message(), HasSubstr("opsets 7 to 23"));
    }
  }
}

// Opsets 18 to 23 import through the operators' versioned signatures: ReduceMean takes its axes
// as an input from 18 (one input before), and libonnx 1.12's checker, which knows no schema past
// opset 17, is not run on them even when asked for.
TEST(OnnxImporterTest, Opset18To23ModelsImportWithTheirVersionsSignatures) {
  for (int opset : {17, 18, 23}) {
    ModelMaker mm(opset);
    mm.Input("x", pb::TensorProto::FLOAT, {"2", "3"}).Input("axes", pb::TensorProto::INT64, {"1"});
    mm.Output("y");
    mm.Node("ReduceMean", {"x", "axes"}, {"y"});
    ImportOptions options;
    options.onnx_checker = opset >= 18;
    absl::StatusOr<std::unique_ptr<Module>> m = ImportOnnxBytes(mm.Bytes(), "", options);
    if (opset == 17) {
      EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
      EXPECT_THAT(m.status().message(), HasSubstr("ReduceMean takes at most 1 inputs"));
      continue;
    }
    ASSERT_TRUE(m.ok()) << opset << ": " << m.status();
    EXPECT_TRUE(Compile(**m).ok()) << opset;
  }
}

TEST(OnnxImporterHostileTest, UnknownOperatorAtOpset18IsRefusedByName) {
  ModelMaker mm(18);
  mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
  mm.Node("NoSuchOp", {"x"}, {"y"});
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(m.status().message(),
              HasSubstr("node 'NoSuchOp_1' (NoSuchOp): operator NoSuchOp is not supported "
                        "(opset 18)"));
}

TEST(OnnxImporterHostileTest, RefusedVersionNamesTheOperatorTheVersionAndWhy) {
  ModelMaker mm(21);  // DeformConv's version 19 is in force at opset 21
  mm.Input("x", pb::TensorProto::FLOAT, {"1", "1", "4", "4"}).Output("y");
  mm.Node("DeformConv", {"x", "x", "x"}, {"y"});
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(m.status().message(),
              HasSubstr("operator DeformConv version 19 is not supported (opset 21): "
                        "not implemented"));
  ModelMaker old(18);  // no DeformConv yet
  old.Input("x", pb::TensorProto::FLOAT, {"1", "1", "4", "4"}).Output("y");
  old.Node("DeformConv", {"x", "x", "x"}, {"y"});
  EXPECT_THAT(Import(old).status().message(), HasSubstr("does not exist in opset 18"));
}

TEST(OnnxImporterHostileTest, Float8CastIsRefusedNamingTheType) {
  ModelMaker mm(19);
  mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
  ModelMaker::IntAttr(mm.Node("Cast", {"x"}, {"y"}), "to", 17);
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<CompileResult> r = Compile(**m);
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("FLOAT8E4M3FN"));
}

TEST(OnnxImporterHostileTest, OldOpsetOnlyForOperatorsUnchangedSince) {
  {
    ModelMaker mm(6);  // Neg has not changed since opset 6
    mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
    mm.Node("Neg", {"x"}, {"y"});
    EXPECT_TRUE(Import(mm).ok());
  }
  {
    ModelMaker mm(6);  // Dropout changed in opset 7
    mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
    mm.Node("Dropout", {"x"}, {"y"});
    absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(m.status().message(), HasSubstr("operator Dropout of opset 6 is not supported"));
  }
}

TEST(OnnxImporterTest, Opset6BroadcastWithAnAxis) {
  // Before opset 7, Add(A, B, broadcast=1, axis=0) aligns B [2] with A's axis 0.
  ModelMaker mm(6);
  mm.Input("a", pb::TensorProto::FLOAT, {"2", "3"})
      .Input("b", pb::TensorProto::FLOAT, {"2"})
      .Output("y");
  pb::NodeProto* n = mm.Node("Add", {"a", "b"}, {"y"});
  ModelMaker::IntAttr(n, "broadcast", 1);
  ModelMaker::IntAttr(n, "axis", 0);
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<Tensor> out = CompileAndRun(
      **m, {{"a", testing::F32({2, 3}, {0, 0, 0, 1, 1, 1})}, {"b", testing::F32({2}, {10, 20})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(testing::ToDoubles(out[0]), (std::vector<double>{10, 10, 10, 21, 21, 21}));
}

TEST(OnnxImporterHostileTest, DeeplyNestedSubgraphs) {
  // Deeper than the checker allows: a short message naming the limit, whether or not the depth
  // is within protobuf's default recursion limit (about 32 levels); far deeper (beyond the
  // parser's own limit), a parse error that says nesting is refused there.
  for (int levels : {25, 32, 100, 300, 400}) {
    SCOPED_TRACE(levels);
    ModelMaker mm;
    mm.Input("c", pb::TensorProto::BOOL, {}).Output("y");
    pb::GraphProto* g = mm.graph();
    for (int depth = 0; depth < levels; ++depth) {
      pb::NodeProto* n = mm.Node("If", {"c"}, {"y"}, g);
      auto* a = n->add_attribute();
      a->set_name("then_branch");
      a->set_type(pb::AttributeProto::GRAPH);
      g = a->mutable_g();
      g->set_name(absl::StrCat("level", depth + 1));
      g->add_output()->set_name("y");
    }
    const absl::Status s = Import(mm).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_LT(s.message().size(), 200u) << s.message();
    if (levels <= 300) {
      EXPECT_THAT(s.message(), HasSubstr("nest more than 24 deep"));
    } else {
      EXPECT_THAT(s.message(), HasSubstr("protobuf parsing failed"));
    }
  }
}

TEST(OnnxImporterHostileTest, LoopWithoutItsInputs) {
  ModelMaker mm;
  mm.Input("x", pb::TensorProto::FLOAT, {"2"}).Output("y");
  pb::NodeProto* loop = mm.Node("Loop", {}, {"y"});
  auto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(pb::AttributeProto::GRAPH);
  a->mutable_g()->add_output()->set_name("x");
  absl::StatusOr<std::unique_ptr<Module>> m = Import(mm);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("Loop needs inputs M and cond"));
}

// The fuzzer's seeds and the inputs it once crashed on (regress_*), run through the fuzz
// target's logic in every build, so CI covers the corpus without libFuzzer: seeds import and
// compile; regression inputs import, compile or are refused, never crash.
TEST(OnnxImporterHostileTest, FuzzCorpusImportsOrIsRefused) {
  int seeds = 0;
  for (const auto& e : std::filesystem::directory_iterator("compiler/onnx/fuzz_corpus")) {
    SCOPED_TRACE(e.path().string());
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(bytes.empty());
    ImportOptions options;
    options.max_tensor_bytes = int64_t{1} << 24;
    absl::StatusOr<std::unique_ptr<Module>> m = ImportOnnxBytes(bytes, /*model_dir=*/"", options);
    const bool regression = e.path().filename().string().rfind("regress", 0) == 0;
    // external.onnx names a data file: refused without a model folder.
    if (e.path().filename() == "external.onnx") {
      EXPECT_FALSE(m.ok());
      continue;
    }
    if (!regression) {
      ASSERT_TRUE(m.ok()) << m.status();
      ++seeds;
    }
    if (!m.ok()) continue;
    CompileOptions compile;
    compile.arena_value_limit = int64_t{1} << 24;
    absl::StatusOr<CompileResult> c = Compile(**m, compile);
    if (!regression) {
      EXPECT_TRUE(c.ok()) << c.status();
    }
  }
  EXPECT_GE(seeds, 10);
}

}  // namespace
}  // namespace dynvm::compiler::onnx
