// ONNX's quantization operators end to end (import, compile, run) and their bad parameters:
// a zero, negative, NaN or infinite scale, a zero point outside its type's range and per-axis
// lengths that do not match the axis are InvalidArgument at compile time naming the node when
// they are constants, and at run time (naming the node) when they are inputs.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "onnx/onnx_pb.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler::onnx {
namespace {

namespace pb = ::onnx;
using ::testing::HasSubstr;

// A minimal ModelProto builder: typed inputs, nodes, typed initializers.
class Model {
 public:
  explicit Model(int opset = 13) {
    model_.set_ir_version(7);
    auto* o = model_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    model_.mutable_graph()->set_name("g");
  }
  Model& Input(const std::string& name, int elem, const std::vector<int64_t>& dims) {
    auto* v = model_.mutable_graph()->add_input();
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
    return *this;
  }
  Model& Output(const std::string& name) {
    model_.mutable_graph()->add_output()->set_name(name);
    return *this;
  }
  pb::NodeProto* Node(const std::string& op, const std::vector<std::string>& ins,
                      const std::vector<std::string>& outs) {
    auto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(absl::StrCat(op, "_", model_.graph().node_size()));
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return n;
  }
  static void IntAttr(pb::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(pb::AttributeProto::INT);
    a->set_i(v);
  }
  Model& Floats(const std::string& name, const std::vector<int64_t>& dims,
                const std::vector<float>& values) {
    pb::TensorProto* t = Init(name, pb::TensorProto::FLOAT, dims);
    for (float v : values) t->add_float_data(v);
    return *this;
  }
  // An 8-bit (or i32) initializer; values go to int32_data, as ONNX stores them.
  Model& Ints(const std::string& name, int elem, const std::vector<int64_t>& dims,
              const std::vector<int32_t>& values) {
    pb::TensorProto* t = Init(name, elem, dims);
    for (int32_t v : values) t->add_int32_data(v);
    return *this;
  }
  std::string Bytes() const { return model_.SerializeAsString(); }

 private:
  pb::TensorProto* Init(const std::string& name, int elem, const std::vector<int64_t>& dims) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(elem);
    for (int64_t d : dims) t->add_dims(d);
    return t;
  }
  pb::ModelProto model_;
};

absl::Status CompileStatus(const Model& m) {
  absl::StatusOr<std::unique_ptr<Module>> mod = ImportOnnxBytes(m.Bytes(), "");
  if (!mod.ok()) return mod.status();
  return Compile(**mod).status();
}

// Compiles and runs; the run's status, and its outputs in *out.
absl::Status CompileAndRun(const Model& m,
                           const std::vector<std::pair<std::string, Tensor>>& inputs,
                           std::vector<Tensor>* out) {
  absl::StatusOr<std::unique_ptr<Module>> mod = ImportOnnxBytes(m.Bytes(), "");
  if (!mod.ok()) return mod.status();
  absl::StatusOr<CompileResult> r = Compile(**mod);
  if (!r.ok()) return r.status();
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(r->bytes);
  if (!exe.ok()) return exe.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  if (!vm.ok()) return vm.status();
  for (const auto& [name, t] : inputs) {
    absl::Status s = (*vm)->SetInput(name, t);
    if (!s.ok()) return s;
  }
  absl::Status s = (*vm)->Run();
  if (!s.ok()) return s;
  absl::StatusOr<std::vector<Tensor>> outs = (*vm)->GetOutputs();
  if (!outs.ok()) return outs.status();
  *out = std::move(*outs);
  return absl::OkStatus();
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// QuantizeLinear(x, scale[, zp]) with a constant scale.
Model QuantizeWithScale(const std::vector<int64_t>& scale_dims, const std::vector<float>& scale,
                        int64_t axis = 1) {
  Model m;
  m.Input("x", pb::TensorProto::FLOAT, {2, 3}).Output("y");
  m.Floats("s", scale_dims, scale);
  Model::IntAttr(m.Node("QuantizeLinear", {"x", "s"}, {"y"}), "axis", axis);
  return m;
}

TEST(QuantTest, BadConstantScaleIsRefusedAtCompileTimeNamingTheNode) {
  for (float bad : {0.0f, -0.5f, kNaN, kInf, -kInf}) {
    SCOPED_TRACE(bad);
    absl::Status s = CompileStatus(QuantizeWithScale({}, {bad}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("QuantizeLinear 'QuantizeLinear_1'"));
    EXPECT_THAT(s.message(), HasSubstr("y_scale must be finite and positive"));
    // The same in one channel of a per-axis scale.
    s = CompileStatus(QuantizeWithScale({3}, {0.5f, bad, 1.0f}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("element 1"));
  }
  EXPECT_TRUE(CompileStatus(QuantizeWithScale({3}, {0.5f, 0.25f, 1.0f})).ok());
}

TEST(QuantTest, PerAxisLengthMismatchIsRefusedAtCompileTime) {
  // x is [2, 3]: axis 1 needs 3 scales, axis 0 needs 2.
  absl::Status s = CompileStatus(QuantizeWithScale({2}, {0.5f, 0.25f}, /*axis=*/1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("QuantizeLinear 'QuantizeLinear_1'"));
  EXPECT_THAT(s.message(), HasSubstr("y_scale has 2 values; expected 1 (per tensor) or 3"));
  EXPECT_TRUE(CompileStatus(QuantizeWithScale({2}, {0.5f, 0.25f}, /*axis=*/0)).ok());

  // DequantizeLinear: a zero point whose length differs from the axis.
  Model m;
  m.Input("x", pb::TensorProto::UINT8, {2, 3}).Output("y");
  m.Floats("s", {3}, {1, 2, 3}).Ints("z", pb::TensorProto::UINT8, {4}, {1, 2, 3, 4});
  m.Node("DequantizeLinear", {"x", "s", "z"}, {"y"});
  s = CompileStatus(m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("DequantizeLinear 'DequantizeLinear_1'"));
  EXPECT_THAT(s.message(), HasSubstr("x_zero_point has 4 values"));

  // QLinearMatMul: b [3, 4] per column takes 4 scales, not 5.
  Model q;
  q.Input("a", pb::TensorProto::UINT8, {2, 3}).Input("b", pb::TensorProto::INT8, {3, 4});
  q.Output("y");
  q.Floats("as", {}, {0.1f}).Ints("az", pb::TensorProto::UINT8, {}, {3});
  q.Floats("bs", {5}, {1, 1, 1, 1, 1}).Ints("bz", pb::TensorProto::INT8, {}, {0});
  q.Floats("ys", {}, {0.2f}).Ints("yz", pb::TensorProto::UINT8, {}, {128});
  q.Node("QLinearMatMul", {"a", "as", "az", "b", "bs", "bz", "ys", "yz"}, {"y"});
  s = CompileStatus(q);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("QLinearMatMul 'QLinearMatMul_1'"));
  EXPECT_THAT(s.message(), HasSubstr("b_scale has 5 values; expected 1 (per tensor) or 4"));
}

TEST(QuantTest, ZeroPointOutOfItsTypesRangeIsRefused) {
  // A UINT8 zero point stored as 300 in int32_data: refused at import, naming the tensor.
  Model m;
  m.Input("x", pb::TensorProto::FLOAT, {2, 3}).Output("y");
  m.Floats("s", {}, {0.5f}).Ints("z", pb::TensorProto::UINT8, {}, {300});
  m.Node("QuantizeLinear", {"x", "s", "z"}, {"y"});
  absl::Status s = CompileStatus(m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("'z'"));
  EXPECT_THAT(s.message(), HasSubstr("300, outside the range"));

  // An i32 zero point of ConvInteger's u8 x: 256 does not fit u8.
  Model c;
  c.Input("x", pb::TensorProto::UINT8, {1, 1, 3, 3}).Output("y");
  c.Ints("w", pb::TensorProto::UINT8, {1, 1, 2, 2}, {1, 1, 1, 1});
  c.Ints("xz", pb::TensorProto::INT32, {}, {256});
  c.Node("ConvInteger", {"x", "w", "xz"}, {"y"});
  s = CompileStatus(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("ConvInteger 'ConvInteger_1'"));
  EXPECT_THAT(s.message(), HasSubstr("x_zero_point element 0 is 256, outside the range of u8"));

  // QuantizeLinear's zero point decides the output type: i32 is not a quantized type.
  Model q;
  q.Input("x", pb::TensorProto::FLOAT, {2, 3}).Output("y");
  q.Floats("s", {}, {0.5f}).Ints("z", pb::TensorProto::INT32, {}, {0});
  q.Node("QuantizeLinear", {"x", "s", "z"}, {"y"});
  s = CompileStatus(q);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("y_zero_point must be u8 or i8, not i32"));
}

TEST(QuantTest, BadScaleFromAnInputFailsTheRunNamingTheNodeAndTheVmStaysUsable) {
  Model m;
  m.Input("x", pb::TensorProto::UINT8, {2, 2}).Input("s", pb::TensorProto::FLOAT, {});
  m.Output("y");
  m.Node("DequantizeLinear", {"x", "s"}, {"y"});
  absl::StatusOr<std::unique_ptr<Module>> mod = ImportOnnxBytes(m.Bytes(), "");
  ASSERT_TRUE(mod.ok()) << mod.status();
  absl::StatusOr<CompileResult> r = Compile(**mod);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(r->bytes);
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  const Tensor x = testing::Make<uint8_t>(DType::kU8, {2, 2}, {0, 10, 20, 255});
  for (float bad : {0.0f, -1.0f, kNaN, kInf}) {
    SCOPED_TRACE(bad);
    ASSERT_TRUE((*vm)->SetInput("x", x).ok());
    ASSERT_TRUE((*vm)->SetInput("s", testing::Make<float>(DType::kF32, {}, {bad})).ok());
    absl::Status s = (*vm)->Run();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("DequantizeLinear_1"));
    EXPECT_THAT(s.message(), HasSubstr("scale must be finite and positive"));
  }
  // The same VM then runs a good scale.
  ASSERT_TRUE((*vm)->SetInput("x", x).ok());
  ASSERT_TRUE((*vm)->SetInput("s", testing::Make<float>(DType::kF32, {}, {0.5f})).ok());
  ASSERT_TRUE((*vm)->Run().ok());
  absl::StatusOr<std::vector<Tensor>> out = (*vm)->GetOutputs();
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(testing::ToDoubles((*out)[0]), (std::vector<double>{0, 5, 10, 127.5}));
}

TEST(QuantTest, QLinearMatMulPerColumnScalesMatchHandComputedValues) {
  // a = [[1, 2], [3, 4]] (u8, zero point 1), b = [[1, -1], [2, 3]] (i8, zero point 0),
  // a_scale 0.5, b_scale per column [1, 2], y_scale 0.25, y_zero_point 10:
  // (a - 1) x b = [[2, 3], [8, 7]]; times 0.5 * [1, 2] / 0.25 = [2, 4] per column:
  // [[4, 12], [16, 28]] + 10 = [[14, 22], [26, 38]].
  Model m;
  m.Input("a", pb::TensorProto::UINT8, {2, 2}).Output("y");
  m.Floats("as", {}, {0.5f}).Ints("az", pb::TensorProto::UINT8, {}, {1});
  m.Ints("b", pb::TensorProto::INT8, {2, 2}, {1, -1, 2, 3});
  m.Floats("bs", {2}, {1, 2}).Ints("bz", pb::TensorProto::INT8, {2}, {0, 0});
  m.Floats("ys", {}, {0.25f}).Ints("yz", pb::TensorProto::UINT8, {}, {10});
  m.Node("QLinearMatMul", {"a", "as", "az", "b", "bs", "bz", "ys", "yz"}, {"y"});
  std::vector<Tensor> out;
  absl::Status s =
      CompileAndRun(m, {{"a", testing::Make<uint8_t>(DType::kU8, {2, 2}, {1, 2, 3, 4})}}, &out);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dtype(), DType::kU8);
  EXPECT_EQ(testing::ToDoubles(out[0]), (std::vector<double>{14, 22, 26, 38}));
}

TEST(QuantTest, MatMulIntegerPerRowAndPerColumnZeroPoints) {
  // a = [[5, 6], [7, 8]] less per-row zero points [5, 7] = [[0, 1], [0, 1]];
  // b = [[1, 2], [3, 4]] less per-column [1, 2] = [[0, 0], [2, 2]]; product [[2, 2], [2, 2]].
  Model m;
  m.Input("a", pb::TensorProto::UINT8, {2, 2}).Output("y");
  m.Ints("b", pb::TensorProto::UINT8, {2, 2}, {1, 2, 3, 4});
  m.Ints("az", pb::TensorProto::UINT8, {2}, {5, 7}).Ints("bz", pb::TensorProto::UINT8, {2}, {1, 2});
  m.Node("MatMulInteger", {"a", "b", "az", "bz"}, {"y"});
  std::vector<Tensor> out;
  absl::Status s =
      CompileAndRun(m, {{"a", testing::Make<uint8_t>(DType::kU8, {2, 2}, {5, 6, 7, 8})}}, &out);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out[0].dtype(), DType::kI32);
  EXPECT_EQ(testing::ToDoubles(out[0]), (std::vector<double>{2, 2, 2, 2}));
}

}  // namespace
}  // namespace dynvm::compiler::onnx
