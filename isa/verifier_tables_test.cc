// The verifier's checks of declarations, signatures, the kernel and constant tables, debug
// locations and the file around the code: each malformed table is refused with an error that
// names the entry and what was wrong.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "isa/verifier.h"
#include "isa/verifier_testing.h"
#include "schema/executable_generated.h"

namespace dynvm::isa {
namespace {

using ::testing::HasSubstr;

TEST(VerifierTest, TooManyRegisters) {
  VerifyLimits limits;
  limits.max_registers = 4;
  ExpectRefused(VerifyText(Program("i64 i64 i64 i64 i64", "", "ret (), ()"), nullptr, limits),
                {"function 'main' pc 0: too many registers (5 scalar, 0 object; limit 4)"});
  ExpectRefused(VerifyText(Program("", "storage storage storage storage storage", "ret (), ()"),
                           nullptr, limits),
                {"too many registers (0 scalar, 5 object; limit 4)"});
  // The default limit, 2^16 per bank.
  ExpectRefused(VerifyText(Program("", "", "ret (), ()"),
                           [](Assembly& a) {
                             Fn(a, "main")->scalar_types.assign((1u << 16) + 1,
                                                                fb::ScalarType::I64);
                           }),
                {"too many registers (65537 scalar, 0 object; limit 65536)"});
}

TEST(VerifierTest, InvalidRegisterDeclarations) {
  const std::string text = Program("i64", "tensor:f32", "ret (), ()");
  ExpectRefused(VerifyText(text,
                           [](Assembly& a) {
                             Fn(a, "main")->object_types[0] =
                                 fb::ObjectType(fb::ObjectKind::Tensor, 99, fb::ObjectKind::Tensor);
                           }),
                {"function 'main' %o0: invalid dtype 99"});
  ExpectRefused(VerifyText(text,
                           [](Assembly& a) {
                             Fn(a, "main")->object_types[0] = fb::ObjectType(
                                 static_cast<fb::ObjectKind>(9), 0, fb::ObjectKind::Tensor);
                           }),
                {"function 'main' %o0: invalid object kind 9"});
  ExpectRefused(VerifyText(text,
                           [](Assembly& a) {
                             Fn(a, "main")->object_types[0] = fb::ObjectType(
                                 fb::ObjectKind::Optional, 0, fb::ObjectKind::Storage);
                           }),
                {"function 'main' %o0: an optional must hold a tensor or a sequence"});
  ExpectRefused(VerifyText(text,
                           [](Assembly& a) {
                             Fn(a, "main")->scalar_types[0] = static_cast<fb::ScalarType>(3);
                           }),
                {"function 'main' pc 0: %s0 has an invalid scalar type"});
  ExpectRefused(VerifyText(text,
                           [](Assembly& a) {
                             Fn(a, "main")->object_results.push_back(fb::ObjectType(
                                 fb::ObjectKind::Sequence, 200, fb::ObjectKind::Tensor));
                           }),
                {"function 'main' result 0: invalid dtype 200"});
  ExpectRefused(
      VerifyText(text,
                 [](Assembly& a) {
                   Fn(a, "main")->scalar_results.push_back(static_cast<fb::ScalarType>(50));
                 }),
      {"function 'main' pc 0: invalid scalar result type"});
  ExpectRefused(VerifyText(Program("i64", "", "ret (), ()"),
                           [](Assembly& a) { Fn(a, "callee")->num_scalar_params = 3; }),
                {"function 'callee' pc 0: more parameters than registers"});
  ExpectRefused(VerifyText(Program("", "", "ret (), ()", "  .sites 1000\n")),
                {"function 'main' pc 0: num_invoke_sites 1000 exceeds the code size"});
  ExpectRefused(VerifyText(Program("", "", "ret (), ()", "  .bound n -1\n")),
                {"function 'main' pc 0: invalid symbol bound"});
}

TEST(VerifierTest, DuplicateFunctionNames) {
  ExpectRefused(
      VerifyText(absl::StrCat(kPrelude, ".function callee\n  .params 0 0\n  ret (), ()\n.end\n")),
      {"duplicate function name 'callee'"});
}

TEST(VerifierTest, NoFunctions) {
  ExpectRefused(VerifyText(".string \"x\"\n"), {"executable has no functions"});
}

TEST(VerifierTest, SignatureRegisterMismatch) {
  const std::string io = absl::StrCat(kPrelude, R"(
.function main
  .params 1 0
  .oregs tensor:f32
  .oresults tensor:f32
  .input x [n, 3]
  .output y *
  ret (%o0), ()
.end
)");
  ASSERT_TRUE(VerifyText(io).ok()) << VerifyText(io);
  ExpectRefused(
      VerifyText(io, [](Assembly& a) { Fn(a, "main")->signature->inputs[0]->dtype = 7; }),
      {"function 'main' pc 0: input 'x' is declared tensor but its register is tensor:f32"});
  ExpectRefused(
      VerifyText(io,
                 [](Assembly& a) {
                   Fn(a, "main")->signature->outputs[0]->kind = fb::ObjectKind::Sequence;
                 }),
      {"function 'main' pc 0: output 'y' is declared sequence but its register is tensor:f32"});
  ExpectRefused(
      VerifyText(io, [](Assembly& a) { Fn(a, "main")->num_object_params = 0; }),
      {"function 'main' pc 0: signature has 1 inputs but the function 0 object parameters"});
  ExpectRefused(
      VerifyText(io, [](Assembly& a) { Fn(a, "main")->signature->outputs.clear(); }),
      {"function 'main' pc 0: signature has 0 outputs but the function 1 object results"});
  ExpectRefused(VerifyText(io, [](Assembly& a) { Fn(a, "main")->signature->inputs[0]->name = ""; }),
                {"function 'main' pc 0: input 0 has no name"});
  ExpectRefused(
      VerifyText(io,
                 [](Assembly& a) { Fn(a, "main")->signature->inputs[0]->shape[0]->symbol = ""; }),
      {"function 'main' pc 0: input 'x' has an invalid dim"});
  ExpectRefused(
      VerifyText(io,
                 [](Assembly& a) { Fn(a, "main")->signature->inputs[0]->shape[1]->value = -2; }),
      {"input 'x' has an invalid dim"});
  ExpectRefused(VerifyText(io,
                           [](Assembly& a) {
                             auto& shape = Fn(a, "main")->signature->inputs[0]->shape;
                             while (shape.size() < 9)
                               shape.push_back(std::make_unique<fb::DimT>(*shape[1]));
                           }),
                {"input 'x' has rank above 8"});
  ExpectRefused(
      VerifyText(io,
                 [](Assembly& a) {
                   fb::FunctionT* f = Fn(a, "main");
                   f->num_scalar_params = 1;
                   f->scalar_types.push_back(fb::ScalarType::I64);
                 }),
      {"function 'main' pc 0: a function with a signature takes and returns only objects"});
  const std::string two = absl::StrCat(kPrelude, R"(
.function main
  .params 2 0
  .oregs tensor:f32 tensor:f32
  .input x *
  .input x *
  ret (), ()
.end
)");
  ExpectRefused(VerifyText(two), {"function 'main' pc 0: duplicate input name 'x'"});
}

TEST(VerifierTest, InvalidKernelEntries) {
  const std::string text = Program("", "", "ret (), ()");
  ExpectRefused(VerifyText(text, [](Assembly& a) { a.exe->kernels[0]->device = 7; }),
                {"kernel 0 (Add): invalid device 7"});
  ExpectRefused(VerifyText(text, [](Assembly& a) { a.exe->kernels[1]->op = ""; }),
                {"kernel 1 (): empty op name"});
  ExpectRefused(VerifyText(text, [](Assembly& a) { a.exe->kernels[0]->inputs[1]->dtype = 40; }),
                {"kernel 0 (Add): invalid port dtype"});
  ExpectRefused(VerifyText(text,
                           [](Assembly& a) {
                             a.exe->kernels[2]->outputs[1]->kind = static_cast<fb::ObjectKind>(4);
                           }),
                {"kernel 2 (Split): invalid port kind"});
  ExpectRefused(VerifyText(text, [](Assembly& a) { a.exe->kernels[0]->inputs[0]->dynamic = true; }),
                {"kernel 0 (Add): an input cannot be dynamic"});
  ExpectRefused(VerifyText(absl::StrCat(".kernel \"SplitToSequence\" in(f32) out(seq:f32)\n",
                                        Program("", "", "ret (), ()"))),
                {"kernel 0 (SplitToSequence): non-tensor outputs must be dynamic"});
  ExpectRefused(VerifyText(absl::StrCat(".kernel \"Gemm\" in(f32) out(f32) attrs(w=t:c9)\n",
                                        Program("", "", "ret (), ()"))),
                {"kernel 0 (Gemm): attribute 'w' refers to constant 9 out of range"});
  ExpectRefused(VerifyText(absl::StrCat(".kernel \"Gemm\" in(f32) out(f32) attrs(alpha=f:1.0)\n",
                                        Program("", "", "ret (), ()")),
                           [](Assembly& a) {
                             a.exe->kernels[0]->attrs[0]->type = static_cast<fb::AttrType>(9);
                           }),
                {"kernel 0 (Gemm): invalid attribute type"});
}

TEST(VerifierTest, InvalidConstants) {
  auto with_const = [](absl::string_view decl) {
    return absl::StrCat(decl, "\n", Program("", "", "ret (), ()"));
  };
  ExpectRefused(VerifyText(with_const(".const f32 [2, 3] hex:00112233")),
                {"constant 0: size 4 does not match its shape"});
  ExpectRefused(VerifyText(with_const(".const f32 [2] values:[1, 2]"),
                           [](Assembly& a) { a.exe->constants[0]->dtype = 99; }),
                {"constant 0: invalid dtype 99"});
  // A string constant needs at least its (offset, length) table (docs/strings.md).
  ExpectRefused(VerifyText(with_const(".const f32 [0] hex:"),
                           [](Assembly& a) {
                             a.exe->constants[0]->dtype = 13;
                             a.exe->constants[0]->shape = {2};
                           }),
                {"constant 0: size 0 does not match its shape"});
  ExpectRefused(VerifyText(with_const(".const f32 [-1] hex:")), {"constant 0: invalid shape"});
  ExpectRefused(VerifyText(with_const(".const f32 [4611686018427387904, 4] hex:")),
                {"constant 0: invalid shape"});
  ExpectRefused(VerifyText(with_const(".const u8 [1, 1, 1, 1, 1, 1, 1, 1, 1] hex:00")),
                {"constant 0: rank too large"});
  // The prelude's constants come after the one under test.
  ExpectRefused(VerifyText(with_const(".const i64 [2305843009213693952] hex:")),
                {"constant 0: size 0 does not match its shape"});
}

TEST(VerifierTest, ConstantRunsPastTheSegment) {
  absl::StatusOr<std::string> bytes = Build(
      absl::StrCat(".const f32 [6] values:[1, 2, 3, 4, 5, 6]\n", Program("", "", "ret (), ()")));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_TRUE(VerifyBytes(*bytes).ok());
  // The file claims a 16-byte segment: constant 0 (24 bytes at 0) runs past it; so does the
  // prelude's first constant at offset 64.
  std::string cut = EditHeader(*bytes, [](schema::FileHeader& h) {
    h.constants_size = 16;
    h.constants_raw_size = 16;
  });
  ExpectRefused(VerifyBytes(cut),
                {"constant 0: range [0, +24) runs past the end of the 16-byte constant segment"});
  // And a constant at an offset past a truncated segment.
  cut = EditHeader(*bytes, [](schema::FileHeader& h) {
    h.constants_size = 64;
    h.constants_raw_size = 64;
  });
  ExpectRefused(VerifyBytes(cut),
                {"constant 1: range [64, +8) runs past the end of the 64-byte constant segment"});
}

TEST(VerifierTest, ConstantOffsetMisaligned) {
  // The writer always aligns constants: build the flatbuffer directly.
  absl::StatusOr<Assembly> a =
      Assemble(absl::StrCat(".const f32 [2] values:[1, 2]\n", Program("", "", "ret (), ()")));
  ASSERT_TRUE(a.ok()) << a.status();
  a->exe->constants[0]->size = 8;
  a->exe->constants[0]->offset = 8;
  flatbuffers::FlatBufferBuilder builder;
  builder.Finish(fb::Executable::Pack(builder, a->exe.get()), fb::ExecutableIdentifier());
  ExpectRefused(VerifyExecutable(*fb::GetExecutable(builder.GetBufferPointer()), 256),
                {"constant 0: offset is not 64-byte aligned"});
}

TEST(VerifierTest, InvalidDebugLocations) {
  const std::string text = Program("", "", ".loc \"n1\"\nnop\n.loc \"n2\"\nret (), ()");
  ASSERT_TRUE(VerifyText(text).ok()) << VerifyText(text);
  ExpectRefused(VerifyText(text, [](Assembly& a) { a.exe->debug->locations[1]->pc = 100; }),
                {"debug location past the code"});
  ExpectRefused(VerifyText(text, [](Assembly& a) { a.exe->debug->locations[0]->function = 9; }),
                {"debug location names a missing function"});
  ExpectRefused(VerifyText(text,
                           [](Assembly& a) {
                             std::swap(a.exe->debug->locations[0], a.exe->debug->locations[1]);
                           }),
                {"debug locations are not sorted"});
}

// String tensors (docs/strings.md): a string register verifies; an instruction that would
// fill one from raw memory is refused.
TEST(VerifierTest, StringRegistersVerifyButAllocTensorOfStringsIsRefused) {
  const std::string text = Program("", "tensor:f32", "ret (), ()");
  const uint8_t kString = static_cast<uint8_t>(DType::kString);
  absl::Status s = VerifyText(text, [&](Assembly& a) {
    Fn(a, "main")->object_types[0] =
        fb::ObjectType(fb::ObjectKind::Tensor, kString, fb::ObjectKind::Tensor);
  });
  EXPECT_TRUE(s.ok()) << s;
  s = VerifyText(Program("", "tensor:string storage",
                         "alloc_storage %o1, 64, cpu\nalloc_tensor %o0, %o1, 0, string, [2]\n"
                         "ret (), ()"),
                 [](Assembly&) {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("alloc_tensor: %o0 is a string tensor, which this instruction does not"));
}

// A call checked before its callee (the callee comes later in the table) must not index the
// callee's register declarations past their end.
TEST(VerifierTest, CalleeDeclaresFewerRegistersThanParameters) {
  const std::string call = Program(
      "i64 bool", "tensor:f32 tensor:f32",
      "load_const %o0, c0\nconst_i %s0, 1\ncall @callee, (%o0), (%s0), (%o1), (%s1)\nret (), ()");
  // Moves the callee (function 0) after main and points the call at its new index.
  auto callee_last = [](Assembly& a) {
    std::rotate(a.exe->functions.begin(), a.exe->functions.begin() + 1, a.exe->functions.end());
    std::vector<uint32_t>& code = Fn(a, "main")->code;
    code[OperandWord(code, PcOf(code, Opcode::kCall), 0)] = 1;
  };
  ASSERT_TRUE(VerifyText(call, callee_last).ok()) << VerifyText(call, callee_last);
  ExpectRefused(VerifyText(call,
                           [&](Assembly& a) {
                             callee_last(a);
                             Fn(a, "callee")->object_types.clear();
                           }),
                {"function 'main' pc 7: call: callee declares fewer registers than parameters"});
  ExpectRefused(VerifyText(call,
                           [&](Assembly& a) {
                             callee_last(a);
                             Fn(a, "callee")->scalar_types.clear();
                           }),
                {"function 'main' pc 7: call: callee declares fewer registers than parameters"});
}

// An attribute's ints are read as int64: a vector at 4 mod 8, which flatbuffers' own verifier
// lets through (it checks the alignment of the length word only), is refused. The writer always
// aligns it, so the flatbuffer is built here with an int32 vector in its place.
TEST(VerifierTest, AttributeIntsVectorMisaligned) {
  absl::StatusOr<Assembly> a = Assemble(
      ".kernel \"Transpose\" in(f32) out(dyn:f32) attrs(perm=ints:[1, 0])\n"
      ".function main\n  .params 0 0\n  ret (), ()\n.end\n");
  ASSERT_TRUE(a.ok()) << a.status();
  // Built with 0 to 3 words of padding just before the vector (in memory): some put its data
  // at 4 mod 8 in an 8-aligned copy of the buffer, the others at 0 mod 8.
  int misaligned = 0;
  for (int pad = 0; pad < 4; ++pad) {
    flatbuffers::FlatBufferBuilder b;
    // Two int64 (1, 0), written as four little-endian int32 words (so aligned to 4 only),
    // under a length word of 2.
    b.StartVector(4, sizeof(int32_t));
    for (int32_t w : {0, 0, 0, 1}) b.PushElement(w);  // back to front
    const flatbuffers::Offset<flatbuffers::Vector<int64_t>> ints(b.EndVector(2));
    for (int i = 0; i < pad; ++i) b.PushElement<uint32_t>(0);
    const auto attr =
        fb::CreateAttribute(b, b.CreateString("perm"), fb::AttrType::Ints, 0, 0, 0, ints);
    const fb::KernelT& k = *a->exe->kernels[0];
    std::vector<flatbuffers::Offset<fb::Port>> ins, outs;
    for (const auto& p : k.inputs) ins.push_back(fb::Port::Pack(b, p.get()));
    for (const auto& p : k.outputs) outs.push_back(fb::Port::Pack(b, p.get()));
    const auto op = b.CreateString(k.op);
    const auto in_vec = b.CreateVector(ins);
    const auto out_vec = b.CreateVector(outs);
    const auto attr_vec = b.CreateVector(&attr, 1);
    const auto kernel = fb::CreateKernel(b, op, 0, k.device, in_vec, out_vec, attr_vec);
    const auto fn = fb::Function::Pack(b, a->exe->functions[0].get());
    const auto fns = b.CreateVector(&fn, 1);
    const auto kernels = b.CreateVector(&kernel, 1);
    b.Finish(fb::CreateExecutable(b, fns, kernels), fb::ExecutableIdentifier());
    std::vector<uint64_t> buf((b.GetSize() + 7) / 8);
    std::memcpy(buf.data(), b.GetBufferPointer(), b.GetSize());
    const auto* bytes = reinterpret_cast<const uint8_t*>(buf.data());
    flatbuffers::Verifier fbv(bytes, b.GetSize());
    ASSERT_TRUE(fb::VerifyExecutableBuffer(fbv)) << "pad " << pad;
    const fb::Executable* exe = fb::GetExecutable(bytes);
    const auto* v = exe->kernels()->Get(0)->attrs()->Get(0)->ints();
    ASSERT_NE(v, nullptr);
    ASSERT_EQ(v->size(), 2u);
    if (reinterpret_cast<uintptr_t>(v->data()) % 8 == 0) {
      EXPECT_TRUE(VerifyExecutable(*exe, 0).ok()) << "pad " << pad;
      continue;
    }
    ++misaligned;
    ExpectRefused(VerifyExecutable(*exe, 0),
                  {"kernel 0 (Transpose): attribute 'perm': ints vector is not 8-byte aligned"});
  }
  EXPECT_GE(misaligned, 1);
  EXPECT_LE(misaligned, 3);
}

// Not an executable at all, or a broken flatbuffer behind a valid header.
TEST(VerifierTest, HeaderAndFlatbufferErrorsPassThrough) {
  EXPECT_THAT(std::string(VerifyBytes("").message()), HasSubstr("truncated executable"));
  absl::StatusOr<std::string> bytes = Build(Program("", "", "ret (), ()"));
  ASSERT_TRUE(bytes.ok());
  std::string broken = *bytes;
  // The root offset of the flatbuffer, just after the header.
  broken[schema::kHeaderSize] = '\x7F';
  broken[schema::kHeaderSize + 1] = '\x7F';
  EXPECT_EQ(VerifyBytes(broken).code(), absl::StatusCode::kDataLoss);
  broken = Reseal(broken);
  ExpectRefused(VerifyBytes(broken), {"flatbuffer structure is invalid"});
}

// Found by vm_verifier_fuzzer: a constant's shape vector moved to 4 mod 8. flatbuffers 2.0's
// verifier checks only the 4-byte alignment of the length word, so reading the int64 dims was
// a misaligned load (UBSan: "load of misaligned address ... for type 'const long'").
TEST(VerifierTest, RegressionMisalignedConstantShapeVector) {
  std::ifstream in("vm/fuzz_corpus/verifier/crash-misaligned-constant-shape.dvm", std::ios::binary);
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  // The fuzz target recomputes the checksum for this input (bit 0 of byte 64 is set).
  ExpectRefused(VerifyBytes(Reseal(ss.str())), {"constant 1: shape vector is not 8-byte aligned"});
}

}  // namespace
}  // namespace dynvm::isa
