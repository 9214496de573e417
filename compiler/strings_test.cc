// String tensors end to end (docs/strings.md): graphs with string inputs, constants and outputs
// are compiled, run in the VM and checked against values computed by hand; bad strings at
// binding are InvalidArgument and leave the VM usable; a failing run leaks nothing.
#include "kernels/strings.h"

#include <string>
#include <vector>

#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler {
namespace {

using ::testing::HasSubstr;

const std::string kCafe = "caf\xc3\xa9";

Tensor S(std::vector<int64_t> dims, std::vector<std::string> v) { return *StringTensor(dims, v); }

AttrValue AttrStrings(std::vector<std::string> v) {
  AttrValue a;
  a.type = AttrValue::Type::kStrings;
  a.strings = std::move(v);
  return a;
}

std::vector<std::string> Strings(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::kString);
  std::vector<std::string> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.emplace_back(StringAt(t, i));
  return out;
}

// x: string [n, 2] -> Identity -> Reshape [-1] -> y; StringNormalizer(UPPER, stop "skip") -> z;
// Equal(z, constant "CAFÉ"?) -> e (the constant is lower-case é: ASCII-only case change keeps
// é); Cast(f: f32 [n]) -> string -> c, and back -> d.
std::shared_ptr<const Executable> Build() {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kString, {"n", 2});
  Value* f = b.Input("f", DType::kF32, {"n"});
  Value* flat = b.Op("Reshape", {b.Op("Identity", {x}), b.VectorI64({-1})});
  b.Output("y", flat);
  Value* z =
      b.Op("StringNormalizer", {flat},
           {{"case_change_action", AttrString("UPPER")}, {"stopwords", AttrStrings({"skip"})}});
  b.Output("z", z);
  b.Output("e", b.Op("Equal", {z, b.Constant(S({1}, {"CAF\xc3\xa9"}))}));
  Value* c = b.Op("Cast", {f}, {{"to", AttrInt(8)}});
  b.Output("c", c);
  b.Output("d", b.Op("Cast", {c}, {{"to", AttrInt(1)}}));
  absl::StatusOr<CompileResult> r = Compile(m);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << m.Dump();
  if (!r.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(r->bytes);
  EXPECT_TRUE(exe.ok()) << exe.status();
  return exe.ok() ? *exe : nullptr;
}

TEST(StringsTest, CompilesAndRuns) {
  std::shared_ptr<const Executable> exe = Build();
  ASSERT_NE(exe, nullptr);
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->SetInput("x", S({2, 2}, {"skip", kCafe, "", "Tea"})).ok());
  ASSERT_TRUE((*vm)->SetInput("f", testing::F32({2}, {0.5f, -3.25f})).ok());
  ASSERT_TRUE((*vm)->Run().ok());
  absl::StatusOr<std::vector<Tensor>> out = (*vm)->GetOutputs();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Strings((*out)[0]), (std::vector<std::string>{"skip", kCafe, "", "Tea"}));
  EXPECT_EQ(Strings((*out)[1]), (std::vector<std::string>{"CAF\xc3\xa9", "", "TEA"}));
  EXPECT_EQ(testing::ToInts((*out)[2]), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(Strings((*out)[3]), (std::vector<std::string>{"0.5", "-3.25"}));
  EXPECT_EQ(testing::ToDoubles((*out)[4]), (std::vector<double>{0.5, -3.25}));
  // Empty tensors and a second run with other shapes.
  ASSERT_TRUE((*vm)->SetInput("x", S({0, 2}, {})).ok());
  ASSERT_TRUE((*vm)->SetInput("f", testing::F32({0}, {})).ok());
  ASSERT_TRUE((*vm)->Run().ok());
  out = (*vm)->GetOutputs();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].numel(), 0);
  EXPECT_EQ(Strings((*out)[1]), (std::vector<std::string>{""}));  // ONNX: one "" when empty
}

TEST(StringsTest, InvalidUtf8AtBindingIsInvalidArgument) {
  std::shared_ptr<const Executable> exe = Build();
  ASSERT_NE(exe, nullptr);
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  const Tensor bad = S({1, 2}, {"ok", std::string("a\xc3(", 3)});
  for (const bool zero_copy : {false, true}) {
    absl::Status s = zero_copy ? (*vm)->SetInputZeroCopy("x", bad) : (*vm)->SetInput("x", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("input 'x': string element 1 is not valid UTF-8 (byte 1)"));
  }
  // A forged element (negative size, null data) is refused the same way.
  Tensor forged = S({1, 2}, {"a", "b"});
  forged.data<StringRef>()[1] = {nullptr, 5};
  absl::Status s = (*vm)->SetInputZeroCopy("x", forged);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // The VM stays usable.
  ASSERT_TRUE((*vm)->SetInputZeroCopy("x", S({1, 2}, {"a", "skip"})).ok());
  ASSERT_TRUE((*vm)->SetInput("f", testing::F32({1}, {2.0f})).ok());
  ASSERT_TRUE((*vm)->Run().ok());
  absl::StatusOr<Tensor> z = (*vm)->GetOutput(1);
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(Strings(*z), (std::vector<std::string>{"A"}));
}

TEST(StringsTest, AFailingRunLeaksNothing) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kString, {"n"});
  Value* upper = b.Op("StringNormalizer", {x}, {{"case_change_action", AttrString("UPPER")}});
  b.Output("y", b.Op("Cast", {upper}, {{"to", AttrInt(1)}}));
  absl::StatusOr<CompileResult> r = Compile(m);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(r->bytes);
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->SetInput("x", S({3}, {"1.5", "inf", "-2"})).ok());
  ASSERT_TRUE((*vm)->Run().ok());
  absl::StatusOr<Tensor> y = (*vm)->GetOutput(0);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(testing::ToDoubles(*y), (std::vector<double>{1.5, INFINITY, -2}));
  y = Tensor();
  ASSERT_TRUE((*vm)->SetInput("x", S({3}, {"1.5", "one", "-2"})).ok());
  // What a VM holds with this input bound and nothing run.
  absl::StatusOr<std::unique_ptr<VirtualMachine>> fresh = VirtualMachine::Create(*exe);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE((*fresh)->SetInput("x", S({3}, {"1.5", "one", "-2"})).ok());
  const int64_t bound = (*fresh)->memory_stats().bytes_in_use;
  ASSERT_GT(bound, 0);
  absl::Status s = (*vm)->Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("Cast: string element 1 \"ONE\""));
  // The normalized strings the failed run made are back with the pool.
  EXPECT_EQ((*vm)->memory_stats().bytes_in_use, bound);
}

}  // namespace
}  // namespace dynvm::compiler
