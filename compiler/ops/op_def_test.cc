// The operator definitions (compiler/ops/): every family's table is well formed, the
// signatures and attributes the importer reads come out of them, and the definitions and the
// kernels match: every OpDef that reaches a kernel has a reference kernel, and every reference
// kernel has an OpDef.
#include "compiler/ops/op_def.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ops/names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/registry.h"

namespace dynvm::compiler {
namespace {

using ::testing::IsEmpty;

TEST(OpDefTest, TablesAreWellFormed) {
  EXPECT_THAT(BuiltinOps().errors(), IsEmpty());
  std::set<std::string> names;
  for (const OpDef* def : BuiltinOps().all()) {
    EXPECT_TRUE(names.insert(def->QualifiedName()).second) << def->QualifiedName();
    // A view's output is input 0 reshaped: it has one data input first.
    if (def->has(kView)) EXPECT_FALSE(def->has(kContainer)) << def->name;
    // Control flow is never folded or hoisted as a whole node.
    if (def->has(kControlFlow)) EXPECT_FALSE(def->has(kPure)) << def->name;
  }
  EXPECT_GT(names.size(), 180u);
}

TEST(OpDefTest, MalformedRowsAreRecordedNotFatal) {
  static constexpr OpRow kRows[] = {
      {"Good", 7, "7:1:1 13:2:1", "axis:i", kPure, nullptr},
      {"BadSignature", 7, "7:1", "", kPure, nullptr},
      {"OutOfOrder", 7, "13:1:1 7:1:1", "", kPure, nullptr},
      {"BadAttr", 7, "7:1:1", "axis:q", kPure, nullptr},
      {"BadRange", 7, "7:1:1", "axis:i#3", kPure, nullptr},
      {"Good", 7, "", "", 0, nullptr},  // defined twice
  };
  OpTable t;
  t.Add("test", kRows);
  EXPECT_EQ(t.errors().size(), 5u) << ::testing::PrintToString(t.errors());
  const OpDef* good = t.Find("test", "Good");
  ASSERT_NE(good, nullptr);
  EXPECT_EQ(good->versions.size(), 2u);  // the first definition stays
  EXPECT_NE(t.Find("test", "BadAttr"), nullptr);
  EXPECT_EQ(t.Find("test", "BadAttr")->AttrAt("axis", 7), nullptr);
}

TEST(OpDefTest, VersionsAndAttributeRangesFollowTheOpset) {
  static constexpr OpRow kRows[] = {
      {"Reduce", 1, "1:1:1 13:2:1 18:2:1", "axes:I@1-18 keepdims:i noop:i@18", kPure, nullptr},
  };
  OpTable t;
  t.Add("", kRows);
  ASSERT_THAT(t.errors(), IsEmpty());
  const OpDef* d = t.Find("ai.onnx", "Reduce");  // "ai.onnx" is the default domain
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->VersionAt(0), nullptr);
  EXPECT_EQ(d->VersionAt(12)->since, 1);
  EXPECT_EQ(d->VersionAt(13)->max_inputs, 2);
  EXPECT_EQ(d->VersionAt(23)->since, 18);
  EXPECT_NE(d->AttrAt("axes", 17), nullptr);
  EXPECT_EQ(d->AttrAt("axes", 18), nullptr);  // an input from 18 on
  EXPECT_EQ(d->AttrAt("noop", 17), nullptr);
  EXPECT_NE(d->AttrAt("noop", 18), nullptr);
  EXPECT_EQ(d->AttrAt("keepdims", 1)->kind, AttrKind::kInt);
  EXPECT_EQ(d->AttrAt("missing", 13), nullptr);
}

TEST(OpDefTest, RefusedVersionsCarryTheirReason) {
  static constexpr OpRow kRows[] = {
      {"Fft", 7, "17:2:1 20:x", "axis:i", kPure, nullptr, nullptr, nullptr, "axis became an input"},
      {"NoReason", 7, "17:2:1 20:x", "", kPure, nullptr},
  };
  OpTable t;
  t.Add("", kRows);
  EXPECT_EQ(t.errors().size(), 1u) << ::testing::PrintToString(t.errors());  // NoReason
  const OpDef* d = t.Find("", "Fft");
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->VersionAt(19)->refused);
  EXPECT_TRUE(d->VersionAt(23)->refused);
  EXPECT_EQ(d->refusal, "axis became an input");
}

// Every operator version ONNX defines in opsets 18 to 23 (onnx/defs/operator_sets.h of ONNX
// 1.18) is either a version of its definition (supported, or refused with a reason) or an
// operator dynvm does not define at all (refused by name at import): none is read with an older
// version's signature by mistake.
TEST(OpDefTest, EveryOperatorVersionOfOpsets18To23IsAccountedFor) {
  const std::map<int, std::vector<std::string>> kOnnx = {
      {18,
       {"Pad",
        "CenterCropPad",
        "Resize",
        "Mish",
        "OptionalGetElement",
        "OptionalHasElement",
        "Split",
        "Col2Im",
        "ScatterND",
        "ScatterElements",
        "ReduceSumSquare",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceL1",
        "ReduceL2",
        "ReduceMax",
        "ReduceMin",
        "ReduceMean",
        "ReduceProd",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
        "BitwiseNot",
        "GroupNormalization",
        "LpPool"}},
      {19,
       {"Equal", "AveragePool", "Cast", "CastLike", "Constant", "DeformConv", "DequantizeLinear",
        "Identity", "If", "Loop", "Pad", "QuantizeLinear", "Resize", "Reshape", "Scan", "Shape",
        "Size"}},
      {20,
       {"AffineGrid", "ConstantOfShape", "DFT", "Gelu", "GridSample", "ImageDecoder", "IsInf",
        "IsNaN", "ReduceMax", "ReduceMin", "RegexFullMatch", "StringConcat", "StringSplit"}},
      {21,
       {"Cast",
        "CastLike",
        "Constant",
        "ConstantOfShape",
        "DequantizeLinear",
        "Flatten",
        "GroupNormalization",
        "Identity",
        "If",
        "Loop",
        "Pad",
        "QLinearMatMul",
        "QuantizeLinear",
        "Reshape",
        "Scan",
        "Shape",
        "Size",
        "Squeeze",
        "Transpose",
        "Unsqueeze"}},
      {22,
       {"EyeLike",
        "RandomUniform",
        "RandomNormal",
        "RandomUniformLike",
        "RandomNormalLike",
        "Multinomial",
        "Bernoulli",
        "ThresholdedRelu",
        "Selu",
        "Elu",
        "Mish",
        "HardSigmoid",
        "HardSwish",
        "Softsign",
        "Softplus",
        "Sin",
        "Cos",
        "Tan",
        "Asin",
        "Acos",
        "Atan",
        "Sinh",
        "Cosh",
        "Asinh",
        "Acosh",
        "Atanh",
        "Round",
        "Det",
        "NegativeLogLikelihoodLoss",
        "AveragePool",
        "MaxPool",
        "MaxUnpool",
        "LpPool",
        "MaxRoiPool",
        "Conv",
        "ConvTranspose",
        "DeformConv",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "GlobalLpPool",
        "InstanceNormalization",
        "LpNormalization",
        "Dropout",
        "RoiAlign",
        "RNN",
        "GRU",
        "LSTM",
        "GridSample"}},
      {23,
       {"Attention",
        "Cast",
        "CastLike",
        "Constant",
        "ConstantOfShape",
        "DequantizeLinear",
        "Flatten",
        "Identity",
        "If",
        "Loop",
        "Pad",
        "QuantizeLinear",
        "RMSNormalization",
        "Reshape",
        "RotaryEmbedding",
        "Scan",
        "Shape",
        "Size",
        "Squeeze",
        "Transpose",
        "Unsqueeze"}},
  };
  // Not defined by dynvm at any opset: refused by name (docs/onnx.md says why).
  const std::set<std::string> kUndefined = {"Multinomial", "MaxRoiPool", "LpNormalization"};
  std::vector<std::string> missing, unexpected_undefined;
  for (const auto& [opset, names] : kOnnx) {
    for (const std::string& op : names) {
      const OpDef* d = FindOpDef("", op);
      if (d == nullptr || d->versions.empty()) {
        if (!kUndefined.contains(op)) unexpected_undefined.push_back(op);
        continue;
      }
      EXPECT_FALSE(kUndefined.contains(op)) << op << " is defined now: update kUndefined";
      const OpVersion* v = d->VersionAt(opset);
      if (v == nullptr || v->since != opset) missing.push_back(absl::StrCat(op, "-", opset));
    }
  }
  EXPECT_THAT(missing, IsEmpty()) << "versions without a row (supported or refused)";
  EXPECT_THAT(unexpected_undefined, IsEmpty());
}

TEST(OpDefTest, TheImporterTableComesFromTheDefinitions) {
  const OpDef* softmax = FindOpDef("", ops::kSoftmax);
  ASSERT_NE(softmax, nullptr);
  EXPECT_EQ(softmax->since, 1);
  EXPECT_EQ(softmax->VersionAt(13)->since, 13);
  EXPECT_NE(softmax->lower, nullptr);  // legacy_2d before opset 13
  EXPECT_EQ(softmax->AttrAt("axis", 13)->kind, AttrKind::kInt);
  const OpDef* gather = FindOpDef("", ops::kGather);
  ASSERT_NE(gather, nullptr);
  EXPECT_EQ(gather->VersionAt(13)->required_mask, 3u);
  EXPECT_TRUE(gather->has(kShapeArith));
  EXPECT_TRUE(FindOpDef("", ops::kWhere)->has(kElementwise));
  EXPECT_TRUE(FindOpDef("", ops::kReshape)->has(kView));
  EXPECT_TRUE(FindOpDef(ops::kDynvmDomain, ops::kSilu)->has(kElementwise));
  EXPECT_FALSE(FindOpDef(ops::kDynvmDomain, ops::kSample)->has(kPure));
  EXPECT_EQ(FindOpDef("", "NoSuchOp"), nullptr);
  EXPECT_EQ(FindOpDef("com.example", ops::kSoftmax), nullptr);
}

TEST(OpDefTest, DropoutIsAViewOnlyInInferenceMode) {
  Module m;
  Graph* g = m.AddFunction("main");
  Node n;
  n.op = ops::kDropout;
  n.graph = g;
  Value* x = m.NewValue(DType::kF32, std::nullopt, g, "x");
  n.inputs = {x};
  n.outputs = {m.NewValue(DType::kF32, std::nullopt, g, "y")};
  EXPECT_TRUE(HasTrait(n, kView));
  n.outputs.push_back(m.NewValue(DType::kBool, std::nullopt, g, "mask"));
  EXPECT_FALSE(HasTrait(n, kView));
  n.outputs.pop_back();
  AttrValue training;
  training.type = AttrValue::Type::kInt;
  training.i = 1;
  n.attrs["training_mode"] = training;
  EXPECT_FALSE(HasTrait(n, kView));
}

TEST(OpDefTest, CustomOpsRegisterAsDefinitions) {
  OpRegistry::Global().Register(OpSchema{
      "op.def.test", "Twice", [](InferContext&) { return absl::OkStatus(); }, /*pure=*/false});
  const OpDef* d = FindOpDef("op.def.test", "Twice");
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->has(kPure));
  EXPECT_TRUE(d->infer);
  EXPECT_TRUE(OpRegistry::Global().Has("op.def.test", "Twice"));
}

// Every definition that reaches a kernel has a reference kernel (the oracle every other backend
// is tested against), and every reference kernel has a definition.
TEST(OpDefTest, DefinitionsAndReferenceKernelsMatch) {
  std::set<std::pair<std::string, std::string>> kernels;
  for (auto& k : KernelRegistry::Global().Ops(Device::kCPU, "reference")) kernels.insert(k);
  ASSERT_GT(kernels.size(), 150u);
  std::vector<std::string> without_kernel, without_def;
  std::set<std::pair<std::string, std::string>> defined;
  for (const OpDef* def : BuiltinOps().all()) {
    defined.insert({def->domain, def->name});
    if (def->has(kNoKernel) || def->has(kContainer)) continue;   // lowered, never invoked
    if (def->domain.empty() && def->versions.empty()) continue;  // not importable yet
    if (!kernels.contains({def->domain, def->name})) without_kernel.push_back(def->QualifiedName());
  }
  for (const auto& [domain, op] : kernels) {
    if (!defined.contains({domain, op})) {
      without_def.push_back(domain.empty() ? op : domain + "::" + op);
    }
  }
  EXPECT_THAT(without_kernel, IsEmpty()) << "OpDefs without a reference kernel";
  EXPECT_THAT(without_def, IsEmpty()) << "reference kernels without an OpDef";
}

}  // namespace
}  // namespace dynvm::compiler

namespace dynvm::compiler {
namespace {

// Shapes through data-dependent control flow: an If whose branches make different ranks gives a
// value of unknown rank (Silero VAD squeezes a dim only when it is 1). Every shape function must
// accept inputs of unknown rank: it types its outputs as far as it can (unknown rank at worst)
// and leaves the checks that need the rank to the kernel, at run time. Each op gets the inputs
// and attributes it requires (below, where the default does not do), every input of unknown
// rank.
TEST(OpDefTest, EveryShapeFunctionAcceptsInputsOfUnknownRank) {
  struct Form {
    std::vector<DType> inputs;  // empty: every input the latest signature allows, in f32
    int outputs = 3;
    Attrs attrs;
  };
  AttrValue two;
  two.type = AttrValue::Type::kInt;
  two.i = 2;
  AttrValue sixteen = two;
  sixteen.i = 16;
  AttrValue shape;
  shape.type = AttrValue::Type::kInts;
  shape.ints = {2, 3};
  const DType f = DType::kF32, u8 = DType::kU8, i32 = DType::kI32;
  const std::map<std::string, Form> forms = {
      {"DepthToSpace", {{}, 1, {{"blocksize", two}}}},
      {"SpaceToDepth", {{}, 1, {{"blocksize", two}}}},
      {"RandomUniform", {{}, 1, {{"shape", shape}}}},
      {"RandomNormal", {{}, 1, {{"shape", shape}}}},
      {"QuantizeLinear", {{f, f, u8}, 1, {}}},
      {"DequantizeLinear", {{u8, f, u8}, 1, {}}},
      {"QLinearMatMul", {{u8, f, u8, u8, f, u8, f, u8}, 1, {}}},
      {"QLinearConv", {{u8, f, u8, u8, f, u8, f, u8, i32}, 1, {}}},
      {"MatMulInteger", {{u8, u8, u8, u8}, 1, {}}},
      {"ConvInteger", {{u8, u8, u8, u8}, 1, {}}},
      {"StringNormalizer", {{DType::kString}, 1, {}}},
      {"StringConcat", {{DType::kString, DType::kString}, 1, {}}},
      {"StringSplit", {{DType::kString}, 2, {}}},
      {"dynvm::Sample", {{f, f, DType::kI64, DType::kI64}, 1, {}}},
      {"dynvm::Emit", {{f}, 0, {}}},
      {"dynvm::Gelu", {{f}, 1, {}}},
      {"dynvm::GeluTanh", {{f}, 1, {}}},
      {"dynvm::Silu", {{f}, 1, {}}},
      {"dynvm::RMSNorm", {{f, f}, 1, {}}},
      {"dynvm::ChannelMul", {{f, f}, 1, {}}},
      {"dynvm::ChannelPad", {{f}, 1, {}}},
      {"dynvm::RotateHalf", {{f, f, f}, 1, {}}},
      {"dynvm::SwiGlu", {{f, f}, 1, {}}},
      {"dynvm::Attention", {{f, f, f}, 1, {}}},
      {"dynvm::Linear", {{f, f}, 1, {}}},
      {"dynvm::MatMul", {{f, f}, 1, {}}},
      {"dynvm::QMatMul", {{f, DType::kI8}, 1, {}}},
      {"dynvm::Requantize", {{u8, f, u8, f, u8}, 1, {}}},
      {"dynvm::QLSTM", {{f, DType::kI8, DType::kI8}, 3, {}}},
      {"dynvm::QGRU", {{f, DType::kI8, DType::kI8}, 2, {}}},
      {"dynvm::QRNN", {{f, DType::kI8, DType::kI8}, 2, {}}},
      {"com.microsoft::FastGelu", {{f, f}, 1, {}}},
      {"com.microsoft::BiasGelu", {{f, f}, 1, {}}},
      {"com.microsoft::Gelu", {{f}, 1, {}}},
      {"com.microsoft::QuickGelu", {{f}, 1, {}}},
      {"com.microsoft::SkipLayerNormalization", {{f, f, f, f, f}, 1, {}}},
      {"com.microsoft::SkipSimplifiedLayerNormalization", {{f, f, f, f}, 1, {}}},
      {"com.microsoft::FusedMatMul", {{f, f}, 1, {}}},
      {"com.microsoft::MatMulNBits",
       {{f, u8, f}, 1, {{"K", sixteen}, {"N", two}, {"block_size", sixteen}}}},
      {"com.microsoft::RotaryEmbedding", {{f, DType::kI64, f, f}, 1, {}}},
      {"com.microsoft::MatMulIntegerToFloat", {{u8, u8, f, f}, 1, {}}},
      {"com.microsoft::DynamicQuantizeMatMul", {{f, u8, f}, 1, {}}},
      {"com.microsoft::QLinearAdd", {{u8, f, u8, u8, f, u8, f, u8}, 1, {}}},
      {"SimplifiedLayerNormalization", {{f, f}, 2, {}}},
      {"com.microsoft::GroupQueryAttention",
       {{f, f, f, f, f, i32, i32}, 3, {{"num_heads", two}, {"kv_num_heads", two}}}},
      {"com.microsoft::MultiHeadAttention", {{f, f, f}, 3, {{"num_heads", two}}}},
      {"com.microsoft::Attention", {{f, f, f}, 2, {{"num_heads", two}}}},
      {"com.microsoft::EmbedLayerNormalization", {{i32, i32, f, f, f, f, f}, 3, {}}},
  };
  std::vector<std::string> failures;
  int checked = 0;
  for (const OpDef* def : BuiltinOps().all()) {
    // Constant has no inputs; control flow and containers are typed with their regions and
    // elements (compiler/infer.cc, ops/sequence.cc).
    if (!def->infer || def->has(kControlFlow) || def->has(kContainer) ||
        def->name == ops::kConstant) {
      continue;
    }
    Form form;
    if (auto it = forms.find(def->QualifiedName()); it != forms.end()) {
      form = it->second;
    } else {
      const int n = def->versions.empty()                 ? 1
                    : def->versions.back().max_inputs > 0 ? def->versions.back().max_inputs
                                                          : 2;
      form.inputs.assign(n, DType::kF32);
    }
    Module m;
    Graph* g = m.AddFunction("main");
    Node n;
    n.op = def->name;
    n.domain = def->domain;
    n.graph = g;
    n.attrs = form.attrs;
    for (DType d : form.inputs) n.inputs.push_back(m.NewValue(d, std::nullopt, g));
    for (int i = 0; i < form.outputs; ++i) {
      n.outputs.push_back(m.NewValue(DType::kF32, std::nullopt, g));
    }
    InferContext ctx(n, m);
    ++checked;
    if (absl::Status s = def->infer(ctx); !s.ok()) {
      failures.push_back(absl::StrCat(def->QualifiedName(), ": ", s.message()));
    }
  }
  EXPECT_GT(checked, 170);
  EXPECT_THAT(failures, IsEmpty());
}

}  // namespace
}  // namespace dynvm::compiler
