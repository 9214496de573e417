// The load-time verifier refuses every malformed executable with an error that says what was
// wrong and where (function, pc, instruction). Each case is a small program in dynvm assembly;
// where the assembler would refuse to produce the bad file, the assembled object tree or the
// code words are changed before serializing.
#include "isa/verifier.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "isa/verifier_testing.h"

namespace dynvm::isa {
namespace {

using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------------
// Programs that assemble as written: one per check, refused at instruction `instr` of main.

struct Case {
  const char* name;
  const char* sregs;
  const char* oregs;
  const char* body;
  int instr;           // index of the offending instruction in main
  const char* expect;  // what: a substring of the message after "pc N: mnemonic: "
  const char* extra = "";
};

const Case kCases[] = {
    // Register indices.
    {"ScalarRegisterOutOfRange", "i64", "", "const_i %s5, 1\nret (), ()", 0,
     "scalar register %s5 out of range (1)"},
    {"ObjectRegisterOutOfRange", "", "tensor:f32", "load_const %o3, c0\nret (), ()", 0,
     "object register %o3 out of range (1)"},
    {"ValueListRegisterOutOfRange", "", "storage tensor:f32",
     "alloc_storage %o0, 64, cpu\nalloc_tensor %o1, %o0, 0, f32, [%s4]\nret (), ()", 1,
     "scalar register %s4 out of range (0)"},
    {"PMoveRegisterOutOfRange", "", "tensor:f32",
     "load_const %o0, c0\npmove (%o7), (%o0)\nret (), ()", 1,
     "object register %o7 out of range (1)"},
    // Register kinds and scalar types.
    {"StorageWhereTensorExpected", "i64", "storage",
     "alloc_storage %o0, 64, cpu\nrank %s0, %o0\nret (), ()", 1,
     "%o0 is a storage, expected a tensor"},
    {"TensorWhereStorageExpected", "", "tensor:f32 tensor:f32",
     "load_const %o0, c0\nalloc_tensor %o1, %o0, 0, f32, [2]\nret (), ()", 1,
     "%o0 is a tensor:f32, expected a storage"},
    {"TensorWhereSequenceExpected", "i64", "tensor:f32",
     "load_const %o0, c0\nseq_len %s0, %o0\nret (), ()", 1,
     "%o0 is a tensor:f32, expected a sequence"},
    {"StorageAsKernelInput", "", "storage tensor:f32",
     "alloc_storage %o0, 64, cpu\ninvoke k0, #0, (%o0, %o0), (%o1)\nret (), ()", 1,
     "%o0 is a storage, expected a tensor"},
    {"WrongScalarType", "i64 f64 i64", "",
     "const_f %s1, 1\nconst_i %s2, 1\nadd_i %s0, %s1, %s2\nret (), ()", 2,
     "%s1 is f64, expected i64"},
    {"WrongScalarTypeWritten", "bool", "", "const_i %s0, 1\nret (), ()", 0,
     "%s0 is bool, expected i64"},
    {"IfConditionNotBool", "i64", "", "const_i %s0, 1\nif %s0\nendif\nret (), ()", 1,
     "%s0 is i64, expected bool"},
    {"LoopCounterNotI64", "f64", "", "loop %s0, 3\nendloop\nret (), ()", 0,
     "%s0 is f64, expected i64"},
    {"ValueRegisterNotI64", "f64", "storage",
     "const_f %s0, 64\nalloc_storage %o0, %s0, cpu\nret (), ()", 1, "%s0 is f64, expected i64"},
    {"MovObjectTypesDiffer", "", "tensor:f32 tensor:i64",
     "load_const %o0, c0\nmov %o1, %o0\nret (), ()", 1, "object types differ"},
    {"MovScalarTypesDiffer", "i64 f64", "", "const_i %s0, 1\nmov_s %s1, %s0\nret (), ()", 1,
     "scalar types differ"},
    {"CopyDTypesDiffer", "", "tensor:f32 tensor:i64",
     "load_const %o0, c0\nload_const %o1, c1\ncopy %o1, %o0\nret (), ()", 2, "differ in dtype"},
    {"OptionalHoldsOtherType", "", "opt:tensor:i64 tensor:f32",
     "load_const %o1, c0\nopt_some %o0, %o1\nret (), ()", 1,
     "optional holds optional<tensor>:i64, value is tensor:f32"},
    // Definite assignment.
    {"ScalarReadBeforeWritten", "i64 i64", "", "addimm_i %s0, %s1, 1\nret (), ()", 0,
     "%s1 is read before it is written"},
    {"ObjectReadBeforeWritten", "i64", "tensor:f32", "rank %s0, %o0\nret (), ()", 0,
     "%o0 is read before it is written"},
    {"AssignedOnlyInThen", "bool i64 i64", "",
     "const_b %s0, 1\nif %s0\nconst_i %s1, 1\nendif\naddimm_i %s2, %s1, 1\nret (), ()", 4,
     "%s1 is read before it is written"},
    {"AssignedOnlyInElse", "bool i64 i64", "",
     "const_b %s0, 1\nif %s0\nconst_i %s2, 1\nelse\nconst_i %s1, 1\nendif\naddimm_i %s2, %s1, "
     "1\nret (), ()",
     6, "%s1 is read before it is written"},
    {"AssignedOnlyInLoopBodyReadAfter", "i64 i64 i64", "",
     "loop %s0, 3\nconst_i %s1, 1\nendloop\naddimm_i %s2, %s1, 1\nret (), ()", 3,
     "%s1 is read before it is written"},
    {"AssignedAfterBreakReadAfterLoop", "i64 i64 i64 bool", "",
     "const_b %s3, 1\nconst_i %s2, 1\nloop %s0, %s2\nbreak_if %s3\nconst_i %s1, "
     "1\nendloop\naddimm_i %s2, %s1, 1\nret (), ()",
     6, "%s1 is read before it is written"},
    {"KilledInLoopReadNextIteration", "i64 i64", "tensor:f32",
     "load_const %o0, c0\nloop %s0, 3\nnumel %s1, %o0\nkill %o0\nendloop\nret (), ()", 4,
     "%o0 is assigned before the loop but not at its back edge"},
    {"KilledOnContinuePath", "i64 i64 bool", "tensor:f32",
     "load_const %o0, c0\nconst_b %s2, 1\nloop %s0, 3\nif %s2\nkill %o0\ncontinue\nendif\nnumel "
     "%s1, %o0\nendloop\nret (), ()",
     8, "%o0 is assigned before the loop but not at its back edge"},
    {"ReadAfterKill", "i64", "tensor:f32",
     "load_const %o0, c0\nkill %o0\nnumel %s0, %o0\nret (), ()", 2,
     "%o0 is read before it is written"},
    {"KilledInOneBranch", "i64 bool", "tensor:f32",
     "load_const %o0, c0\nconst_b %s1, 1\nif %s1\nkill %o0\nendif\nnumel %s0, %o0\nret (), ()", 5,
     "%o0 is read before it is written"},
    {"CallArgumentReadBeforeWritten", "i64 bool", "tensor:f32 tensor:f32",
     "const_i %s0, 1\ncall @callee, (%o0), (%s0), (%o1), (%s1)\nret (), ()", 1,
     "%o0 is read before it is written"},
    {"PreallocatedKernelOutputNotWritten", "", "tensor:f32 tensor:f32",
     "load_const %o0, c0\ninvoke k1, #0, (%o0, %o0), (%o1)\nret (), ()", 1,
     "%o1 is read before it is written"},
    // Structure that the assembler accepts.
    {"FunctionNotEndingInRet", "", "", "nop", 0, "the function must end with ret or fail"},
    {"FunctionEndingInEndif", "bool", "", "const_b %s0, 1\nif %s0\nret (), ()\nendif", 3,
     "the function must end with ret or fail"},
    // Table indices.
    {"KernelIndexOutOfRange", "", "tensor:f32 tensor:f32",
     "load_const %o0, c0\ninvoke k9, #0, (%o0, %o0), (%o1)\nret (), ()", 1,
     "kernel index 9 out of range"},
    {"ConstantIndexOutOfRange", "", "tensor:f32", "load_const %o0, c5\nret (), ()", 0,
     "constant index 5 out of range"},
    {"StringIndexOutOfRange", "", "", "fail str3", 0, "string index 3 out of range"},
    {"AssertStringIndexOutOfRange", "bool", "", "const_b %s0, 1\nassert %s0, str1\nret (), ()", 1,
     "string index 1 out of range"},
    {"InvokeSiteOutOfRange", "", "tensor:f32 tensor:f32",
     "load_const %o0, c0\ninvoke k0, #1, (%o0, %o0), (%o1)\nret (), ()", 1,
     "invoke site 1 out of range (1)", "  .sites 1\n"},
    {"DuplicateInvokeSite", "", "tensor:f32 tensor:f32",
     "load_const %o0, c0\ninvoke k0, #0, (%o0, %o0), (%o1)\ninvoke k0, #0, (%o1, %o1), (%o1)\nret "
     "(), ()",
     2, "invoke site 0 used twice", "  .sites 2\n"},
    // Kernels.
    {"KernelTooFewInputs", "", "tensor:f32 tensor:f32",
     "load_const %o0, c0\ninvoke k0, #0, (%o0), (%o1)\nret (), ()", 1,
     "kernel 0 (Add) takes 2 inputs and 1 outputs, given 1 and 1"},
    {"KernelTooManyOutputs", "", "tensor:f32 tensor:f32 tensor:f32",
     "load_const %o0, c0\ninvoke k0, #0, (%o0, %o0), (%o1, %o2)\nret (), ()", 1,
     "kernel 0 (Add) takes 2 inputs and 1 outputs, given 2 and 2"},
    {"KernelInputDTypeMismatch", "", "tensor:i64 tensor:f32",
     "load_const %o0, c1\ninvoke k0, #0, (%o0, %o0), (%o1)\nret (), ()", 1,
     "input 0 must be f32, %o0 is tensor:i64"},
    {"KernelOutputDTypeMismatch", "", "tensor:f32 tensor:i64",
     "load_const %o0, c0\ninvoke k0, #0, (%o0, %o0), (%o1)\nret (), ()", 1,
     "output 0 must be f32, %o1 is tensor:i64"},
    {"AbsentRequiredKernelInput", "", "tensor:f32 tensor:f32",
     "load_const %o0, c0\ninvoke k0, #0, (%o0, _), (%o1)\nret (), ()", 1, "input 1 is required"},
    {"AbsentRequiredKernelOutput", "", "tensor:f32",
     "load_const %o0, c0\ninvoke k0, #0, (%o0, %o0), (_)\nret (), ()", 1, "output 0 is required"},
    {"KernelOutputWrittenTwice", "", "tensor:f32 tensor:f32",
     "load_const %o0, c0\ninvoke k2, #0, (%o0), (%o1, %o1)\nret (), ()", 1,
     "a register is written twice"},
    // Calls and returns.
    {"CallArityMismatch", "i64 bool", "tensor:f32 tensor:f32",
     "load_const %o0, c0\ncall @callee, (%o0), (), (%o1), (%s1)\nret (), ()", 1,
     "arity does not match function 'callee'"},
    {"CallScalarArgumentType", "f64 bool", "tensor:f32 tensor:f32",
     "load_const %o0, c0\nconst_f %s0, 1\ncall @callee, (%o0), (%s0), (%o1), (%s1)\nret (), ()", 2,
     "scalar argument 0: type mismatch"},
    {"CallObjectArgumentType", "i64 bool", "tensor:i64 tensor:f32",
     "load_const %o0, c1\nconst_i %s0, 1\ncall @callee, (%o0), (%s0), (%o1), (%s1)\nret (), ()", 2,
     "object argument 0: type mismatch"},
    {"CallObjectResultType", "i64 bool", "tensor:f32 storage",
     "load_const %o0, c0\nconst_i %s0, 1\ncall @callee, (%o0), (%s0), (%o1), (%s1)\nret (), ()", 2,
     "object result 0: type mismatch"},
    {"CallScalarResultType", "i64 i64", "tensor:f32 tensor:f32",
     "load_const %o0, c0\nconst_i %s0, 1\ncall @callee, (%o0), (%s0), (%o1), (%s1)\nret (), ()", 2,
     "scalar result 0: type mismatch"},
    {"RetCountMismatch", "i64", "tensor:f32",
     "load_const %o0, c0\nconst_i %s0, 1\nret (%o0), (%s0)", 2,
     "result count differs from the declaration"},
    // Memory instructions.
    {"AllocTensorDTypeDiffers", "", "storage tensor:f32",
     "alloc_storage %o0, 64, cpu\nalloc_tensor %o1, %o0, 0, i64, [2]\nret (), ()", 1,
     "dtype operand differs from the register's dtype"},
    {"AllocGrowableDTypeDiffers", "", "tensor:f32",
     "alloc_growable %o0, i32, cpu, 0, 4, [0]\nret (), ()", 0,
     "dtype operand differs from the register's dtype"},
    {"AllocGrowableAxisOutOfRange", "", "tensor:f32",
     "alloc_growable %o0, f32, cpu, 2, 4, [0, 3]\nret (), ()", 0, "growth axis out of range"},
    {"AppendAxisOutOfRange", "", "tensor:f32 tensor:f32",
     "load_const %o0, c0\nload_const %o1, c0\nappend %o0, %o1, 8\nret (), ()", 2,
     "axis out of range"},
    {"LoadConstDTypeDiffers", "", "tensor:f32", "load_const %o0, c1\nret (), ()", 0,
     "constant dtype differs from the register's dtype"},
    {"AllocTensorMoreThan8Dims", "", "storage tensor:f32",
     "alloc_storage %o0, 64, cpu\nalloc_tensor %o1, %o0, 0, f32, [1, 1, 1, 1, 1, 1, 1, 1, 1]\nret "
     "(), ()",
     1, "more than 8 dims"},
    {"ReshapeMoreThan8Dims", "", "tensor:f32 tensor:f32",
     "load_const %o0, c0\nreshape %o1, %o0, [1, 1, 1, 1, 1, 1, 1, 1, 1, 2]\nret (), ()", 1,
     "more than 8 dims"},
    {"ViewDimsAndStridesDiffer", "", "tensor:f32 tensor:f32",
     "load_const %o0, c0\nview %o1, %o0, 0, [2], [1, 1]\nret (), ()", 1,
     "dims and strides differ in length"},
    {"PMoveListsDifferInLength", "", "tensor:f32 tensor:f32 tensor:f32",
     "load_const %o0, c0\npmove (%o1, %o2), (%o0)\nret (), ()", 1, "lists differ in length"},
    {"PMoveSListsDifferInLength", "i64 i64", "",
     "const_i %s0, 1\npmove_s (%s1), (%s0, %s0)\nret (), ()", 1, "lists differ in length"},
    {"PMoveWritesOneRegisterTwice", "", "tensor:f32 tensor:f32",
     "load_const %o0, c0\npmove (%o1, %o1), (%o0, %o0)\nret (), ()", 1,
     "a register is written twice"},
    {"PMoveSWritesOneRegisterTwice", "i64 i64", "",
     "const_i %s0, 1\npmove_s (%s1, %s1), (%s0, %s0)\nret (), ()", 1,
     "a register is written twice"},
    {"PMoveElementTypesDiffer", "", "tensor:f32 tensor:i64",
     "load_const %o0, c0\npmove (%o1), (%o0)\nret (), ()", 1, "element 0: types differ"},
};

class VerifierCaseTest : public ::testing::TestWithParam<Case> {};

TEST_P(VerifierCaseTest, RefusedWithWhatAndWhere) {
  const Case& c = GetParam();
  const std::string text = Program(c.sregs, c.oregs, c.body, c.extra);
  absl::StatusOr<Assembly> a = Assemble(text);
  ASSERT_TRUE(a.ok()) << a.status();
  const std::vector<uint32_t>& code = Fn(*a, "main")->code;
  const uint32_t pc = PcOfIndex(code, c.instr);
  const std::string where = absl::StrCat("function 'main' pc ", pc, ": ",
                                         GetOpcodeInfo(HeaderOpcode(code[pc])).mnemonic, ": ");
  ExpectRefused(VerifyText(text), {where, c.expect});
}

INSTANTIATE_TEST_SUITE_P(Checks, VerifierCaseTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

// The programs above differ from valid ones only in the broken detail.
TEST(VerifierTest, BaselineProgramsVerify) {
  EXPECT_TRUE(VerifyText(Program("", "", "ret (), ()")).ok())
      << VerifyText(Program("", "", "ret (), ()"));
  const std::string ok_kernels =
      Program("i64 bool", "tensor:f32 tensor:f32 tensor:f32 tensor:f32 tensor:f32",
              "load_const %o0, c0\n"
              "invoke k0, #0, (%o0, %o0), (%o1)\n"
              "invoke k1, #1, (%o0, _), (%o1)\n"
              "invoke k2, #2, (%o1), (%o2, %o3)\n"
              "const_i %s0, 1\n"
              "call @callee, (%o2), (%s0), (%o4), (%s1)\n"
              "pmove (%o0, %o1), (%o1, %o0)\n"
              "ret (), ()");
  EXPECT_TRUE(VerifyText(ok_kernels).ok()) << VerifyText(ok_kernels);
  const std::string ok_flow = Program(
      "i64 i64 bool", "tensor:f32",
      "load_const %o0, c0\nconst_b %s2, 1\nloop %s0, 3\nif %s2\nkill %o0\n"
      "load_const %o0, c0\ncontinue\nendif\nnumel %s1, %o0\nendloop\n"
      "if %s2\nconst_i %s1, 1\nelse\nconst_i %s1, 2\nendif\naddimm_i %s1, %s1, 1\nret (), ()");
  EXPECT_TRUE(VerifyText(ok_flow).ok()) << VerifyText(ok_flow);
}

// ---------------------------------------------------------------------------------------------
// Return types of a function with results.

TEST(VerifierTest, RetTypeMismatch) {
  const std::string text = absl::StrCat(kPrelude, R"(
.function f
  .params 0 0
  .sregs i64 f64
  .oregs tensor:i64
  .oresults tensor:f32
  .sresults i64
  load_const %o0, c1
  const_f %s1, 1
  ret (%o0), (%s1)
.end
)");
  ExpectRefused(VerifyText(text), {"function 'f' pc 7: ret: result 0: type mismatch"});
  const std::string scalar = absl::StrCat(kPrelude, R"(
.function f
  .params 0 0
  .sregs i64 f64
  .oregs tensor:f32
  .oresults tensor:f32
  .sresults i64
  load_const %o0, c0
  const_f %s1, 1
  ret (%o0), (%s1)
.end
)");
  ExpectRefused(VerifyText(scalar), {"function 'f' pc 7: ret: scalar result 0: type mismatch"});
  const std::string unset = absl::StrCat(kPrelude, R"(
.function f
  .params 0 0
  .oregs tensor:f32
  .oresults tensor:f32
  ret (%o0), ()
.end
)");
  ExpectRefused(VerifyText(unset), {"function 'f' pc 0: ret: %o0 is read before it is written"});
}

// ---------------------------------------------------------------------------------------------
// Raw code: structures and encodings the assembler never produces.

class Code {
 public:
  Code& Op(Opcode op, std::vector<uint32_t> operands = {}) {
    words.push_back(HeaderWord(op, static_cast<uint32_t>(operands.size() + 1)));
    words.insert(words.end(), operands.begin(), operands.end());
    return *this;
  }
  Code& Ret() { return Op(Opcode::kRet, {0, 0}); }
  std::vector<uint32_t> words;
};

// Verifies main (registers: %s0 bool, %s1 i64) with `code` as its body.
absl::Status VerifyCode(const Code& code, const VerifyLimits& limits = {}) {
  return VerifyText(
      Program("bool i64", "", "ret (), ()"), [&](Assembly& a) { Fn(a, "main")->code = code.words; },
      limits);
}

TEST(VerifierTest, ElseWithoutIf) {
  ExpectRefused(VerifyCode(Code().Op(Opcode::kElse, {0}).Ret()),
                {"function 'main' pc 0: else: else without a matching if"});
  // A second else.
  ExpectRefused(VerifyCode(Code()
                               .Op(Opcode::kConstB, {0, 1})
                               .Op(Opcode::kIf, {0, 0})
                               .Op(Opcode::kElse, {0})
                               .Op(Opcode::kElse, {0})
                               .Op(Opcode::kEndIf)
                               .Ret()),
                {"function 'main' pc 8: else: else without a matching if"});
  // An else inside a loop whose if is outside it.
  ExpectRefused(VerifyCode(Code()
                               .Op(Opcode::kConstB, {0, 1})
                               .Op(Opcode::kIf, {0, 0})
                               .Op(Opcode::kLoop, {1, 3, 0})
                               .Op(Opcode::kElse, {0})
                               .Op(Opcode::kEndLoop, {0})
                               .Op(Opcode::kEndIf)
                               .Ret()),
                {"pc 10: else: else without a matching if"});
}

TEST(VerifierTest, EndifWithoutIf) {
  ExpectRefused(VerifyCode(Code().Op(Opcode::kEndIf).Ret()),
                {"function 'main' pc 0: endif: endif without a matching if"});
  ExpectRefused(VerifyCode(Code().Op(Opcode::kLoop, {1, 3, 0}).Op(Opcode::kEndIf).Ret()),
                {"pc 4: endif: endif without a matching if"});
}

TEST(VerifierTest, EndloopWithoutLoop) {
  ExpectRefused(VerifyCode(Code().Op(Opcode::kEndLoop, {0}).Ret()),
                {"function 'main' pc 0: endloop: endloop without a matching loop"});
  ExpectRefused(VerifyCode(Code()
                               .Op(Opcode::kConstB, {0, 1})
                               .Op(Opcode::kIf, {0, 0})
                               .Op(Opcode::kEndLoop, {0})
                               .Ret()),
                {"pc 6: endloop: endloop without a matching loop"});
}

TEST(VerifierTest, BreakAndContinueOutsideALoop) {
  ExpectRefused(VerifyCode(Code().Op(Opcode::kBreak, {0}).Ret()),
                {"function 'main' pc 0: break: outside any loop"});
  ExpectRefused(VerifyCode(Code().Op(Opcode::kContinue, {0}).Ret()),
                {"function 'main' pc 0: continue: outside any loop"});
  ExpectRefused(VerifyCode(Code().Op(Opcode::kConstB, {0, 1}).Op(Opcode::kBreakIf, {0, 0}).Ret()),
                {"pc 3: break_if: outside any loop"});
  ExpectRefused(
      VerifyCode(Code().Op(Opcode::kConstB, {0, 1}).Op(Opcode::kBreakUnless, {0, 0}).Ret()),
      {"pc 3: break_unless: outside any loop"});
  // Inside an if, still outside any loop.
  ExpectRefused(VerifyCode(Code()
                               .Op(Opcode::kConstB, {0, 1})
                               .Op(Opcode::kIf, {0, 0})
                               .Op(Opcode::kBreak, {0})
                               .Op(Opcode::kEndIf)
                               .Ret()),
                {"pc 6: break: outside any loop"});
}

TEST(VerifierTest, UnclosedIfAndLoop) {
  ExpectRefused(VerifyCode(Code().Op(Opcode::kConstB, {0, 1}).Op(Opcode::kIf, {0, 0}).Ret()),
                {"function 'main' pc 3: if: is never closed"});
  ExpectRefused(VerifyCode(Code().Op(Opcode::kLoop, {1, 3, 0}).Ret()),
                {"function 'main' pc 0: loop: is never closed"});
  // The innermost unclosed block is named.
  ExpectRefused(VerifyCode(Code()
                               .Op(Opcode::kLoop, {1, 3, 0})
                               .Op(Opcode::kConstB, {0, 1})
                               .Op(Opcode::kIf, {0, 0})
                               .Ret()),
                {"pc 7: if: is never closed"});
}

TEST(VerifierTest, NestingDeeperThanTheLimit) {
  auto nested = [](int depth) {
    std::string body = "const_b %s0, 1\n";
    for (int i = 0; i < depth; ++i) body += "if %s0\n";
    for (int i = 0; i < depth; ++i) body += "endif\n";
    body += "ret (), ()";
    return Program("bool", "", body);
  };
  EXPECT_TRUE(VerifyText(nested(256)).ok()) << VerifyText(nested(256));
  // The 257th if is at pc 3 + 256 * 3.
  ExpectRefused(VerifyText(nested(257)), {"function 'main' pc 771: if: nesting deeper than 256"});
  VerifyLimits limits;
  limits.max_nesting = 3;
  auto loops = [](int depth) {
    std::string body;
    for (int i = 0; i < depth; ++i) body += "loop %s0, 2\n";
    for (int i = 0; i < depth; ++i) body += "endloop\n";
    return Program("i64", "", body + "ret (), ()");
  };
  EXPECT_TRUE(VerifyText(loops(3), nullptr, limits).ok());
  ExpectRefused(VerifyText(loops(4), nullptr, limits),
                {"function 'main' pc 12: loop: nesting deeper than 3"});
}

// A valid program with every kind of jump; each jump operand is then moved off by one.
TEST(VerifierTest, BadJumpOffsets) {
  const std::string text = Program("i64 bool", "",
                                   "const_b %s1, 1\n"
                                   "if %s1\n"
                                   "  nop\n"
                                   "else\n"
                                   "  nop\n"
                                   "endif\n"
                                   "loop %s0, 3\n"
                                   "  break_if %s1\n"
                                   "  break_unless %s1\n"
                                   "  if %s1\n"
                                   "    continue\n"
                                   "  endif\n"
                                   "  break\n"
                                   "endloop\n"
                                   "ret (), ()");
  ASSERT_TRUE(VerifyText(text).ok()) << VerifyText(text);
  struct Jump {
    Opcode op;
    int nth;
    int slot;
  };
  for (Jump j : {Jump{Opcode::kIf, 0, 1}, Jump{Opcode::kElse, 0, 0}, Jump{Opcode::kLoop, 0, 2},
                 Jump{Opcode::kEndLoop, 0, 0}, Jump{Opcode::kBreakIf, 0, 1},
                 Jump{Opcode::kBreakUnless, 0, 1}, Jump{Opcode::kIf, 1, 1},
                 Jump{Opcode::kContinue, 0, 0}, Jump{Opcode::kBreak, 0, 0}}) {
    for (int32_t delta : {1, -1, 1 << 20, -(1 << 30)}) {
      uint32_t pc = 0;
      int32_t expected = 0;
      const absl::Status s = VerifyText(text, [&](Assembly& a) {
        std::vector<uint32_t>& code = Fn(a, "main")->code;
        pc = PcOf(code, j.op, j.nth);
        uint32_t& w = code[OperandWord(code, pc, j.slot)];
        expected = static_cast<int32_t>(w);
        w = static_cast<uint32_t>(expected + delta);
      });
      const std::string mnemonic(GetOpcodeInfo(j.op).mnemonic);
      ExpectRefused(s, {absl::StrCat("function 'main' pc ", pc, ": ", mnemonic, ": jump offset ",
                                     expected + delta, " does not match the structure (expected ",
                                     expected, ")")});
    }
  }
}

TEST(VerifierTest, TruncatedInstruction) {
  // The last instruction's length runs past the end of the code.
  ExpectRefused(VerifyCode(Code().Op(Opcode::kNop).Op(Opcode::kRet, {0})),
                {"function 'main': ret at pc 1: length 2 too short"});
  Code c = Code().Op(Opcode::kNop).Ret();
  c.words[1] = HeaderWord(Opcode::kRet, 9);
  ExpectRefused(VerifyCode(c),
                {"function 'main': ret at pc 1: length 9 runs past the end of the code"});
  c.words[1] = HeaderWord(Opcode::kRet, 0xFFFF);
  ExpectRefused(VerifyCode(c), {"ret at pc 1: length 65535 runs past the end of the code"});
  c.words[1] = HeaderWord(Opcode::kRet, 0);
  ExpectRefused(VerifyCode(c), {"ret at pc 1: length 0 runs past the end of the code"});
  // A list count that runs past its instruction.
  ExpectRefused(VerifyCode(Code().Op(Opcode::kRet, {100, 0})),
                {"ret at pc 0: list of 100 runs past the instruction"});
  ExpectRefused(VerifyCode(Code().Op(Opcode::kRet, {0xFFFFFFFFu, 0})),
                {"list of 4294967295 runs past the instruction"});
  // A length longer than the operands.
  ExpectRefused(VerifyCode(Code().Op(Opcode::kNop, {0}).Ret()),
                {"nop at pc 0: length 2 but operands take 1"});
  // A 64-bit immediate cut in half.
  ExpectRefused(VerifyCode(Code().Op(Opcode::kConstI, {1, 5}).Ret()),
                {"const_i at pc 0: length 3 but operands take 4"});
  // The code ends inside an instruction.
  Code cut = Code().Op(Opcode::kConstI, {1, 5, 0}).Ret();
  cut.words.pop_back();
  ExpectRefused(VerifyCode(cut), {"ret at pc 4: length 3 runs past the end of the code"});
}

TEST(VerifierTest, UnknownOpcode) {
  Code c = Code().Op(Opcode::kNop).Ret();
  c.words[0] = HeaderWord(static_cast<Opcode>(kNumOpcodes), 1);
  ExpectRefused(VerifyCode(c),
                {absl::StrCat("function 'main': unknown opcode ", kNumOpcodes, " at pc 0")});
  c.words[0] = 0xFF | (1u << 8);
  ExpectRefused(VerifyCode(c), {"unknown opcode 255 at pc 0"});
}

TEST(VerifierTest, ReservedHeaderBits) {
  for (int bit = 24; bit < 32; ++bit) {
    Code c = Code().Op(Opcode::kNop).Ret();
    c.words[1] |= 1u << bit;
    ExpectRefused(VerifyCode(c), {"function 'main': reserved header bits set at pc 1"});
  }
}

TEST(VerifierTest, InvalidOperandWords) {
  // dtype and device operands outside their enums.
  const std::string text =
      Program("", "storage tensor:f32",
              "alloc_storage %o0, 64, cpu\nalloc_tensor %o1, %o0, 0, f32, [2]\nret (), ()");
  for (uint32_t dtype : {14u, 77u, 255u, 256u, 0xFFFFFFFFu}) {
    ExpectRefused(VerifyText(text,
                             [&](Assembly& a) {
                               std::vector<uint32_t>& code = Fn(a, "main")->code;
                               code[OperandWord(code, PcOf(code, Opcode::kAllocTensor), 3)] = dtype;
                             }),
                  {absl::StrCat("function 'main' pc 4: alloc_tensor: invalid dtype ", dtype)});
  }
  ExpectRefused(VerifyText(text,
                           [](Assembly& a) {
                             std::vector<uint32_t>& code = Fn(a, "main")->code;
                             code[OperandWord(code, PcOf(code, Opcode::kAllocStorage), 2)] = 9;
                           }),
                {"function 'main' pc 0: alloc_storage: invalid device 9"});
  // A call to a function index past the table (the assembler resolves names).
  const std::string call = Program(
      "i64 bool", "tensor:f32 tensor:f32",
      "load_const %o0, c0\nconst_i %s0, 1\ncall @callee, (%o0), (%s0), (%o1), (%s1)\nret (), ()");
  ASSERT_TRUE(VerifyText(call).ok()) << VerifyText(call);
  ExpectRefused(VerifyText(call,
                           [](Assembly& a) {
                             std::vector<uint32_t>& code = Fn(a, "main")->code;
                             code[OperandWord(code, PcOf(code, Opcode::kCall), 0)] = 2;
                           }),
                {"function 'main' pc 7: call: function index 2 out of range"});
}

TEST(VerifierTest, EmptyCode) {
  ExpectRefused(VerifyCode(Code()), {"function 'main' pc 0: function has no code"});
}

// ---------------------------------------------------------------------------------------------
// Sanity: every conformance program verifies.

TEST(VerifierTest, EveryConformanceProgramVerifies) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("tests/isa")) {
    if (e.path().extension() != ".s") continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    const absl::Status s = VerifyText(ss.str());
    EXPECT_TRUE(s.ok()) << e.path() << ": " << s;
    ++n;
  }
  EXPECT_GE(n, 6);
}

}  // namespace
}  // namespace dynvm::isa
