// Runs the built vm-as, vm-dis and vm-run binaries as a user would: every tests/isa/*.s file
// survives vm-as -> vm-dis -> vm-as byte for byte; vm-run computes the right values from .npy
// inputs and writes outputs into mapped .npy files; vm-compile --weights-out/--compress output
// runs through vm-run; every user error is a one-line message and exit status 1, never a crash.
#include "tools/cli.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schema/mapped_file.h"
#include "tools/npy/npy.h"
#include "tools/vocab.h"

namespace dynvm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int code = -1;  // exit status, or 128 + signal
  std::string out;
  std::string err;
};

std::string Quote(absl::string_view s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            absl::StrCat("dynvm_cli_test_", getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  std::string Path(absl::string_view name) const { return absl::StrCat(dir_, "/", name); }

  // Runs `tool` with `args` (each quoted), capturing stdout and stderr.
  Result Run(absl::string_view tool, const std::vector<std::string>& args) {
    std::vector<std::string> quoted;
    for (const std::string& a : args) quoted.push_back(Quote(a));
    const std::string out = Path("stdout.txt"), err = Path("stderr.txt");
    const std::string cmd = absl::StrCat(Quote(tool), " ", absl::StrJoin(quoted, " "), " >",
                                         Quote(out), " 2>", Quote(err));
    const int status = std::system(cmd.c_str());
    Result r;
    if (status != -1 && WIFEXITED(status)) {
      r.code = WEXITSTATUS(status);
    } else if (status != -1 && WIFSIGNALED(status)) {
      r.code = 128 + WTERMSIG(status);
    }
    r.out = schema::ReadFileToString(out).value_or("");
    r.err = schema::ReadFileToString(err).value_or("");
    return r;
  }

  void Write(absl::string_view name, absl::string_view text) {
    ASSERT_TRUE(schema::WriteStringToFile(Path(name), text).ok());
  }
  void WriteNpy(absl::string_view name, const Tensor& t) {
    ASSERT_TRUE(npy::SaveNpy(Path(name), t).ok());
  }

  // Assembles `text` into NAME.dvm.
  void Assemble(absl::string_view name, absl::string_view text) {
    Write(absl::StrCat(name, ".s"), text);
    Result r =
        Run(DYNVM_VM_AS, {Path(absl::StrCat(name, ".s")), "-o", Path(absl::StrCat(name, ".dvm"))});
    ASSERT_EQ(r.code, 0) << r.err;
  }

  std::string dir_;
};

// A failed run: exit status 1 and exactly one line on stderr naming the program.
void ExpectCleanError(const Result& r, absl::string_view program) {
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(absl::StartsWith(r.err, absl::StrCat(program, ": error: "))) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

template <typename T>
Tensor Make(DType dtype, std::vector<int64_t> dims, std::vector<T> values) {
  return *Tensor::FromVector<T>(dtype, dims, values);
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

// ---- the flag parser ----

TEST(FlagParserTest, ParsesEveryForm) {
  std::string s;
  int64_t n = 0;
  bool b = false;
  std::vector<std::string> r;
  cli::FlagParser p("prog", "ARGS");
  p.AddString("--str,-s", &s, "a string");
  p.AddInt("--num", &n, "a number", true);
  p.AddSwitch("--flag", &b, "a switch");
  p.AddRepeated("--rep", &r, "repeated");
  const char* argv[] = {"prog",  "pos1", "-s",      "v",  "--num=4k", "--flag",
                        "--rep", "a",    "--rep=b", "--", "--pos2"};
  ASSERT_TRUE(p.Parse(11, argv).ok());
  EXPECT_EQ(s, "v");
  EXPECT_EQ(n, 4096);
  EXPECT_TRUE(b);
  EXPECT_EQ(r, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(p.positional(), (std::vector<std::string>{"pos1", "--pos2"}));
  EXPECT_TRUE(p.seen("--num"));
  EXPECT_FALSE(p.help_requested());
  EXPECT_THAT(p.Usage(), HasSubstr("--str, -s"));
}

TEST(FlagParserTest, ErrorsNameTheFlag) {
  int64_t n = 0;
  bool b = false;
  auto parse = [&](std::vector<const char*> argv) {
    cli::FlagParser p("prog", "");
    p.AddInt("--num", &n, "");
    p.AddSwitch("--flag", &b, "");
    argv.insert(argv.begin(), "prog");
    return p.Parse(static_cast<int>(argv.size()), argv.data());
  };
  EXPECT_THAT(parse({"--bogus"}).message(), HasSubstr("unknown flag '--bogus'"));
  EXPECT_THAT(parse({"--num"}).message(), HasSubstr("--num needs a value"));
  EXPECT_THAT(parse({"--num", "12x"}).message(), HasSubstr("expected an integer"));
  EXPECT_THAT(parse({"--num", "4k"}).message(),
              HasSubstr("expected an integer"));  // no suffixes here
  EXPECT_THAT(parse({"--num=1", "--num=2"}).message(), HasSubstr("more than once"));
  EXPECT_THAT(parse({"--flag=yes"}).message(), HasSubstr("takes no value"));
  EXPECT_TRUE(parse({"--num", "-3"}).ok());
  EXPECT_EQ(n, -3);
}

TEST(FlagParserTest, ParseInt64Suffixes) {
  int64_t v = 0;
  ASSERT_TRUE(cli::ParseInt64("2M", true, &v).ok());
  EXPECT_EQ(v, 2 << 20);
  ASSERT_TRUE(cli::ParseInt64("1g", true, &v).ok());
  EXPECT_EQ(v, int64_t{1} << 30);
  EXPECT_FALSE(cli::ParseInt64("9223372036854775807k", true, &v).ok());
  EXPECT_FALSE(cli::ParseInt64("k", true, &v).ok());
  EXPECT_FALSE(cli::ParseInt64("", false, &v).ok());
}

// ---- vm-as / vm-dis round trips ----

TEST_F(CliTest, EveryIsaFileRoundTripsByteForByte) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator("tests/isa")) {
    if (e.path().extension() == ".s") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty());
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    const std::string stem = std::filesystem::path(f).stem().string();
    const std::string a = Path(stem + ".dvm"), dis = Path(stem + ".dis.s"),
                      b = Path(stem + ".again.dvm");
    Result r = Run(DYNVM_VM_AS, {f, "-o", a});
    ASSERT_EQ(r.code, 0) << r.err;
    for (const bool pcs : {true, false}) {
      std::vector<std::string> args = {a};
      if (!pcs) args.push_back("--no-pcs");
      r = Run(DYNVM_VM_DIS, args);
      ASSERT_EQ(r.code, 0) << r.err;
      EXPECT_EQ(absl::StrContains(r.out, "; pc "), pcs);
      Write(stem + ".dis.s", r.out);
      r = Run(DYNVM_VM_AS, {dis, "-o", b});
      ASSERT_EQ(r.code, 0) << r.err;
      r = Run("cmp", {a, b});
      EXPECT_EQ(r.code, 0) << "vm-dis | vm-as is not byte-identical: " << r.out;
    }
    // The pipe itself: vm-as - reads standard input.
    const std::string piped = Path(stem + ".piped.dvm");
    r = Run("bash", {"-c", absl::StrCat(Quote(DYNVM_VM_DIS), " ", Quote(a), " | ",
                                        Quote(DYNVM_VM_AS), " - -o ", Quote(piped))});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(Run("cmp", {a, piped}).code, 0) << "vm-dis | vm-as - is not byte-identical";
  }
  // - without -o, and text on stdin that does not assemble: clean errors naming stdin.
  Result r = Run("bash", {"-c", absl::StrCat(Quote(DYNVM_VM_AS), " - < /dev/null")});
  ExpectCleanError(r, "vm-as");
  EXPECT_THAT(r.err, HasSubstr("needs -o"));
  r = Run("bash", {"-c", absl::StrCat("echo nonsense | ", Quote(DYNVM_VM_AS), " - -o ",
                                      Quote(Path("x.dvm")))});
  ExpectCleanError(r, "vm-as");
  EXPECT_THAT(r.err, HasSubstr("<stdin>: line 1"));
}

TEST_F(CliTest, AssemblerErrorsNameTheLine) {
  Write("bad.s", ".function main\n  .entry\n  frobnicate %s0\n  ret (), ()\n.end\n");
  Result r = Run(DYNVM_VM_AS, {Path("bad.s"), "-o", Path("bad.dvm")});
  ExpectCleanError(r, "vm-as");
  EXPECT_THAT(r.err, HasSubstr("line 3"));
  EXPECT_THAT(r.err, HasSubstr("frobnicate"));
  EXPECT_FALSE(std::filesystem::exists(Path("bad.dvm")));
}

// What vm-dis prints for weights-apart executables is checked when read back: offset= and
// size= only on external constants, within vm-as's layout limit, and where the writer's layout
// (table order, 64-byte aligned) puts them; storage:DTYPE takes a dtype only.
TEST_F(CliTest, ExternalConstantLayoutIsChecked) {
  const std::string head = ".weights \"w.dvw\" hash=18446744073709551615 size=128\n";
  const std::string tail = ".function main\n  .params 0 0\n  .entry\n  ret (), ()\n.end\n";
  const struct {
    const char* name;
    std::string text;
    const char* error;
  } cases[] = {
      {"inline", ".const f32 [1] hex:00000000 offset=0\n" + tail,
       "line 1: offset= and size= are for external constants"},
      {"huge", head + ".const f32 [1] external offset=0 size=1099511627776\n" + tail,
       "line 2: external constant of 1099511627776 bytes"},
      {"moved",
       head + ".const f32 [16] external offset=0 size=64\n" +
           ".const f32 [16] external offset=128 size=64\n" + tail,
       "constant 1: offset=128 is not where the layout puts it (64"},
      {"storage", ".function main\n  .params 0 0\n  .oregs storage:f32:f32\n  ret (), ()\n.end\n",
       "line 3: expected storage or storage:DTYPE"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Write("x.s", c.text);
    Result r = Run(DYNVM_VM_AS, {Path("x.s"), "-o", Path("x.dvm")});
    ExpectCleanError(r, "vm-as");
    EXPECT_THAT(r.err, HasSubstr(c.error));
  }
}

TEST_F(CliTest, VerifierErrorsNameTheLine) {
  // %s1 is read before it is written: the verifier refuses it, and vm-as maps its pc to line 7.
  Write("unassigned.s",
        "; a comment line\n"
        ".function main\n"
        "  .sregs i64 i64 i64\n"
        "  .entry\n"
        "  const_i %s0, 1\n"
        "  ; another comment\n"
        "  add_i %s2, %s0, %s1\n"
        "  ret (), ()\n"
        ".end\n");
  Result r = Run(DYNVM_VM_AS, {Path("unassigned.s"), "-o", Path("unassigned.dvm")});
  ExpectCleanError(r, "vm-as");
  EXPECT_THAT(r.err, HasSubstr("line 7: function 'main' pc 4"));
  EXPECT_FALSE(std::filesystem::exists(Path("unassigned.dvm")));
}

TEST_F(CliTest, AsAndDisUsageErrors) {
  ExpectCleanError(Run(DYNVM_VM_AS, {}), "vm-as");
  ExpectCleanError(Run(DYNVM_VM_AS, {Path("missing.s"), "-o", Path("x.dvm")}), "vm-as");
  ExpectCleanError(Run(DYNVM_VM_DIS, {Path("missing.dvm")}), "vm-dis");
  ExpectCleanError(Run(DYNVM_VM_DIS, {"--pcs"}), "vm-dis");
  Write("garbage.dvm", "this is not an executable");
  Result r = Run(DYNVM_VM_DIS, {Path("garbage.dvm")});
  ExpectCleanError(r, "vm-dis");
  EXPECT_THAT(r.err, HasSubstr("garbage.dvm"));
  for (const char* tool : {DYNVM_VM_AS, DYNVM_VM_DIS, DYNVM_VM_RUN}) {
    r = Run(tool, {"--help"});
    EXPECT_EQ(r.code, 0);
    EXPECT_THAT(r.out, HasSubstr("usage: "));
  }
}

// ---- vm-run ----

constexpr absl::string_view kProgram = R"(
.kernel "Add" in(f32, f32) out(f32)
.kernel "Mul" in(f32, f32) out(dyn:f32)

; sum = x + y (preallocated), prod = x * y (allocated by the kernel), rows = dim 0 of x
.function main
  .params 2 0
  .sregs i64 i64 i64
  .oregs tensor:f32 tensor:f32 storage tensor:f32 tensor:f32 storage tensor:i64
  .oresults tensor:f32 tensor:f32 tensor:i64
  .input x [n,3]
  .input y [n,3]
  .output sum [n,3]
  .output prod [n,3]
  .output rows []
  .bound n 100
  dim %s0, %o0, 0
  const_i %s1, 12
  mul_i %s2, %s0, %s1
  alloc_storage %o2, %s2, cpu
  alloc_tensor %o3, %o2, 0, f32, [%s0, 3]
  invoke k0, #0, (%o0, %o1), (%o3)
  invoke k1, #1, (%o0, %o1), (%o4)
  alloc_storage %o5, 8, cpu
  alloc_tensor %o6, %o5, 0, i64, []
  write %o6, 0, %s0
  ret (%o3, %o4, %o6), ()
.end

; returns its bf16 input unchanged
.function echo_bf16
  .params 1 0
  .oregs tensor:bf16
  .oresults tensor:bf16
  .input b [2]
  .output b_out [2]
  ret (%o0), ()
.end
)";

class VmRunTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    Assemble("prog", kProgram);
    WriteNpy("x.npy", Make<float>(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6}));
    WriteNpy("y.npy", Make<float>(DType::kF32, {2, 3}, {10, 20, 30, 40, 50, 60}));
    exe_ = Path("prog.dvm");
    x_ = absl::StrCat("x=", Path("x.npy"));
    y_ = absl::StrCat("y=", Path("y.npy"));
  }
  std::string exe_, x_, y_;
};

TEST_F(VmRunTest, RunsAndWritesOutputs) {
  Result r = Run(DYNVM_VM_RUN, {exe_, "--input", x_, "--input", y_, "--output-dir", Path("out")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "sum f32 [2,3]\nprod f32 [2,3]\nrows i64 []\n");
  EXPECT_EQ(r.err, "");
  absl::StatusOr<Tensor> sum = npy::LoadNpy(Path("out/sum.npy"));
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->ShapeString(), "[2,3]");
  EXPECT_EQ(Values<float>(*sum), (std::vector<float>{11, 22, 33, 44, 55, 66}));
  absl::StatusOr<Tensor> prod = npy::LoadNpy(Path("out/prod.npy"));
  ASSERT_TRUE(prod.ok()) << prod.status();
  EXPECT_EQ(Values<float>(*prod), (std::vector<float>{10, 40, 90, 160, 250, 360}));
  absl::StatusOr<Tensor> rows = npy::LoadNpy(Path("out/rows.npy"));
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->rank(), 0);  // a scalar is a 0-d array
  EXPECT_EQ(rows->dtype(), DType::kI64);
  EXPECT_EQ(Values<int64_t>(*rows), (std::vector<int64_t>{2}));
}

// x.npy and y.npy are bound in place; sum and rows (made by plain allocations of a shape known
// from x's dims) are written by the program straight into their mapped .npy files, prod (the
// kernel allocates it) is copied into its file once.
TEST_F(VmRunTest, ZeroCopyInputsAndOutputs) {
  Result r = Run(DYNVM_VM_RUN, {exe_, "-i", x_, "-i", y_, "--output-dir", Path("zc"), "--stats",
                                "--repeat", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("zero_copy_inputs=2 mapped_output_files=3 outputs_written_in_place=2\n"));
  absl::StatusOr<Tensor> sum = npy::LoadNpy(Path("zc/sum.npy"));
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(Values<float>(*sum), (std::vector<float>{11, 22, 33, 44, 55, 66}));
  absl::StatusOr<Tensor> prod = npy::LoadNpy(Path("zc/prod.npy"));
  ASSERT_TRUE(prod.ok()) << prod.status();
  EXPECT_EQ(Values<float>(*prod), (std::vector<float>{10, 40, 90, 160, 250, 360}));
  absl::StatusOr<Tensor> rows = npy::LoadNpy(Path("zc/rows.npy"));
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(Values<int64_t>(*rows), (std::vector<int64_t>{2}));
  // The files are byte for byte what EncodeNpy (and numpy.save) writes.
  EXPECT_EQ(*schema::ReadFileToString(Path("zc/sum.npy")),
            *npy::EncodeNpy(Make<float>(DType::kF32, {2, 3}, {11, 22, 33, 44, 55, 66})));
  EXPECT_EQ(*schema::ReadFileToString(Path("zc/rows.npy")),
            *npy::EncodeNpy(Make<int64_t>(DType::kI64, {}, {2})));
}

#ifdef DYNVM_VM_COMPILE
// vm-compile writes the weights apart (and compressed); vm-run finds them beside the .dvm or
// where --weights says, and the exported GPT decoder still gives PyTorch's tokens.
TEST_F(CliTest, CompiledWithWeightsApartAndCompressed) {
  const std::string model = "tools/models/gpt/model.onnx", cases = "tools/models/gpt/case0/";
  const std::vector<std::string> inputs = {"-i", "prompt=" + cases + "input_prompt.npy", "-i",
                                           "max_new_tokens=" + cases + "input_max_new_tokens.npy"};
  Result r = Run(DYNVM_VM_COMPILE, {model, "-o", Path("plain.dvm")});
  ASSERT_EQ(r.code, 0) << r.err;
  r = Run(DYNVM_VM_COMPILE,
          {model, "-o", Path("gpt.dvm"), "--weights-out", Path("gpt.dvw"), "--compress"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("gpt.dvw ("));
  const int64_t plain = static_cast<int64_t>(schema::ReadFileToString(Path("plain.dvm"))->size());
  const int64_t code = static_cast<int64_t>(schema::ReadFileToString(Path("gpt.dvm"))->size());
  const int64_t weights = static_cast<int64_t>(schema::ReadFileToString(Path("gpt.dvw"))->size());
  EXPECT_LT(code, plain / 3);
  EXPECT_LT(code + weights, plain);
  std::vector<std::string> args = {Path("gpt.dvm"), "--output-dir", Path("out")};
  args.insert(args.end(), inputs.begin(), inputs.end());
  r = Run(DYNVM_VM_RUN, args);
  ASSERT_EQ(r.code, 0) << r.err;
  absl::StatusOr<Tensor> tokens = npy::LoadNpy(Path("out/tokens.npy"));
  absl::StatusOr<Tensor> want = npy::LoadNpy(cases + "output_tokens.npy");
  ASSERT_TRUE(tokens.ok() && want.ok());
  EXPECT_EQ(*npy::EncodeNpy(*tokens), *npy::EncodeNpy(*want));
  // Moved away: not found beside the .dvm, found with --weights.
  std::rename(Path("gpt.dvw").c_str(), Path("moved.dvw").c_str());
  args.resize(1);
  args.insert(args.end(), inputs.begin(), inputs.end());
  r = Run(DYNVM_VM_RUN, args);
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("gpt.dvw"));
  args.push_back("--weights");
  args.push_back(Path("moved.dvw"));
  r = Run(DYNVM_VM_RUN, args);
  EXPECT_EQ(r.code, 0) << r.err;
  // Another model's weights under the right name: refused.
  r = Run(DYNVM_VM_COMPILE,
          {"tools/lm/charlm.onnx", "-o", Path("lm.dvm"), "--weights-out", Path("gpt.dvw")});
  ASSERT_EQ(r.code, 0) << r.err;
  r = Run(DYNVM_VM_RUN, std::vector<std::string>(args.begin(), args.end() - 2));
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("different or stale weights file"));
}

// Bad --quantize-weights / --quantize-min-bytes values are one clean error line each.
TEST_F(CliTest, QuantizeWeightsFlagErrors) {
  const std::string model = "tools/models/gpt/model.onnx";
  Result r = Run(DYNVM_VM_COMPILE, {model, "-o", Path("q.dvm"), "--quantize-weights", "int2"});
  ExpectCleanError(r, "vm-compile");
  EXPECT_THAT(r.err, HasSubstr("must be int8, bf16 or int4, got 'int2'"));
  r = Run(DYNVM_VM_COMPILE,
          {model, "-o", Path("q.dvm"), "--quantize-weights", "int4", "--quantize-block", "48"});
  ExpectCleanError(r, "vm-compile");
  EXPECT_THAT(r.err, HasSubstr("--quantize-block must be a power of two from 16 to 256"));
  r = Run(DYNVM_VM_COMPILE, {model, "-o", Path("q.dvm"), "--quantize-weights", "int4",
                             "--quantize-accuracy-level", "5"});
  ExpectCleanError(r, "vm-compile");
  EXPECT_THAT(r.err, HasSubstr("--quantize-accuracy-level must be 0, 1, 2, 3 or 4, got '5'"));
  r = Run(DYNVM_VM_COMPILE, {model, "-o", Path("q.dvm"), "--quantize-weights", "int8",
                             "--quantize-accuracy-level", "4"});
  ExpectCleanError(r, "vm-compile");
  EXPECT_THAT(r.err, HasSubstr("need --quantize-weights int4"));
  r = Run(DYNVM_VM_COMPILE,
          {model, "-o", Path("q.dvm"), "--quantize-weights", "int8", "--quantize-zero-points"});
  ExpectCleanError(r, "vm-compile");
  EXPECT_THAT(r.err, HasSubstr("need --quantize-weights int4"));
  r = Run(DYNVM_VM_COMPILE,
          {model, "-o", Path("q.dvm"), "--quantize-weights", "int8", "--quantize-min-bytes", "-3"});
  ExpectCleanError(r, "vm-compile");
  EXPECT_THAT(r.err, HasSubstr("--quantize-min-bytes must be a non-negative integer"));
  r = Run(DYNVM_VM_COMPILE, {model, "-o", Path("q.dvm"), "--quantize-min-bytes", "0"});
  ExpectCleanError(r, "vm-compile");
  EXPECT_THAT(r.err, HasSubstr("needs --quantize-weights"));
  r = Run(DYNVM_VM_COMPILE, {model, "-o", Path("q.dvm"), "--quantize-weights", "bf16",
                             "--quantize-min-bytes", "0", "--report"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("MatMul '/gpt/blocks.0/q/MatMul'): bf16 4096 -> 2048 bytes"));
  // int4, blocks of 16 with zero points: the 32 x 32 weight -> 32 rows x 2 blocks x 8 bytes,
  // 64 f32 scales, 32 zero-point bytes.
  r = Run(DYNVM_VM_COMPILE,
          {model, "-o", Path("q.dvm"), "--quantize-weights", "int4", "--quantize-min-bytes", "0",
           "--quantize-block", "16", "--quantize-zero-points", "--report"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("MatMul '/gpt/blocks.0/q/MatMul'): int4 4096 -> 800 bytes"));
  EXPECT_THAT(r.out, HasSubstr("com.microsoft::MatMulNBits"));
}

// vm-dis | vm-as gives back the bytes vm-compile wrote, for every model in tools/models and
// tools/lm, in every form: plain, without debug info, compressed, weights apart (the .dvm; the
// .dvw beside it), weights apart and compressed.
TEST_F(CliTest, EveryCompiledModelRoundTripsByteForByteInEveryForm) {
  std::vector<std::string> models;
  for (const char* dir : {"tools/models", "tools/lm"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
      if (e.path().extension() == ".onnx") models.push_back(e.path().string());
    }
  }
  std::sort(models.begin(), models.end());
  // tools/models' five decoders (gru_stop's is loop.onnx) and the char-LM.
  ASSERT_GE(models.size(), 6u);
  const std::vector<std::pair<std::string, std::vector<std::string>>> forms = {
      {"plain", {}},
      {"stripped", {"--strip-debug"}},
      {"compressed", {"--compress"}},
      {"apart", {"--weights-out", Path("apart.dvw")}},
      {"apart_compressed", {"--weights-out", Path("apart_compressed.dvw"), "--compress"}},
      {"int8", {"--quantize-weights", "int8", "--quantize-min-bytes", "0"}},
      {"bf16", {"--quantize-weights", "bf16"}}};
  int checked = 0;
  for (const std::string& model : models) {
    for (const auto& [form, flags] : forms) {
      SCOPED_TRACE(model + " " + form);
      const std::string a = Path(form + ".dvm"), text = Path(form + ".s"),
                        b = Path(form + ".again.dvm");
      std::vector<std::string> args = {model, "-o", a};
      args.insert(args.end(), flags.begin(), flags.end());
      Result r = Run(DYNVM_VM_COMPILE, args);
      ASSERT_EQ(r.code, 0) << r.err;
      r = Run(DYNVM_VM_DIS, {a});
      ASSERT_EQ(r.code, 0) << r.err;
      EXPECT_EQ(absl::StrContains(r.out, "\n.compressed\n"), form == "compressed");
      EXPECT_EQ(absl::StrContains(r.out, "\n.weights "), absl::StartsWith(form, "apart"));
      Write(form + ".s", r.out);
      r = Run(DYNVM_VM_AS, {text, "-o", b});
      ASSERT_EQ(r.code, 0) << r.err;
      absl::StatusOr<std::string> original = schema::ReadFileToString(a);
      absl::StatusOr<std::string> again = schema::ReadFileToString(b);
      ASSERT_TRUE(original.ok() && again.ok());
      EXPECT_EQ(again->size(), original->size());
      EXPECT_TRUE(*again == *original) << "vm-dis | vm-as is not byte-identical";
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(models.size() * forms.size()));
}

// UTF-8 of code point `cp` (the vocabulary's entries).
std::string Utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// tools/demo.sh itself (with the tools of this build, no install or build step): vm-compile of
// the char-LM with the demo's bounds, then vm-run --vocab --text --set --stream-prefix. The text
// streamed while the run is in progress equals the run's final tokens (tokens.npy) decoded with
// the vocabulary, greedy and sampled; the same seed gives the same text.
TEST_F(CliTest, DemoStreamsExactlyTheTokensItReturns) {
  std::vector<uint32_t> vocab;
  {
    absl::StatusOr<std::string> text = schema::ReadFileToString("tools/lm/vocab.txt");
    ASSERT_TRUE(text.ok()) << text.status();
    for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
      uint32_t cp;
      ASSERT_TRUE(absl::SimpleAtoi(line, &cp)) << line;
      vocab.push_back(cp);
    }
  }
  const std::string tools = std::filesystem::path(DYNVM_VM_RUN).parent_path().string();
  const std::string prompt = "And God said";
  std::string sampled;
  for (const char* temperature : {"0", "0.8", "0.8"}) {
    SCOPED_TRACE(temperature);
    Result r = Run("env", {"DYNVM_DEMO_TOOLS=" + tools, "DYNVM_DEMO_OUT=" + Path("demo"), "bash",
                           "tools/demo.sh", "--prompt", prompt, "--length", "80", "--temperature",
                           temperature, "--seed", "5"});
    ASSERT_EQ(r.code, 0) << r.err << r.out;
    // The stream: the prefix (the prompt), then each token as it was produced (newlines
    // included), then the line vm-run ends it with and the output lines.
    const size_t at = r.out.find("\n" + prompt);
    ASSERT_NE(at, std::string::npos) << r.out;
    const size_t start = at + 1 + prompt.size();
    const size_t end = r.out.rfind("\ntokens i64 [1,80]\n");
    ASSERT_NE(end, std::string::npos) << r.out;
    ASSERT_GE(end, start);
    const std::string streamed = r.out.substr(start, end - start);
    absl::StatusOr<Tensor> tokens = npy::LoadNpy(Path("demo/charlm-out/tokens.npy"));
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    ASSERT_EQ(tokens->dtype(), DType::kI64);
    std::string decoded;
    for (int64_t id : Values<int64_t>(*tokens)) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, static_cast<int64_t>(vocab.size()));
      decoded += Utf8(vocab[id]);
    }
    EXPECT_EQ(tokens->numel(), 80);
    EXPECT_EQ(streamed, decoded);
    if (std::string(temperature) != "0") {
      if (!sampled.empty()) {
        EXPECT_EQ(decoded, sampled);  // same seed, same text
      }
      sampled = decoded;
    }
  }
}

// --bound plans the GPT's growing loop at its maximum (--report: no allocation site left in
// the loop; vm-run --stats: none after the first iteration), a run beyond a bound names the
// symbol, and bad or unknown bounds are reported. --device: cpu compiles for the host; cuda
// compiles for the device where the build has CUDA (vm-run --device cpu then refuses the file)
// and is refused with one line where it does not; anything else is an error.
TEST_F(CliTest, CompileBoundReportAndDevice) {
  const std::string model = "tools/models/gpt/model.onnx", cases = "tools/models/gpt/case0/";
  const std::vector<std::string> inputs = {"-i", "prompt=" + cases + "input_prompt.npy", "-i",
                                           "max_new_tokens=" + cases + "input_max_new_tokens.npy"};
  Result r = Run(DYNVM_VM_COMPILE, {model, "-o", Path("free.dvm"), "--report"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("loop_alloc_sites=[1-9]"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("kernel 0: [A-Za-z]+ "));
  r = Run(DYNVM_VM_COMPILE, {model, "-o", Path("gpt.dvm"), "--report", "--bound", "batch=1",
                             "--bound", "prompt_len=8", "--bound", "max_new_tokens=56"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("function main: "));
  EXPECT_THAT(r.out, HasSubstr(" loop_alloc_sites=0 "));
  EXPECT_THAT(r.out, Not(::testing::ContainsRegex("loop_alloc_sites=[1-9]")));
  EXPECT_THAT(r.out, HasSubstr("wrote " + Path("gpt.dvm")));
  EXPECT_EQ(r.err, "");
  // Without --report: only the line saying what was written.
  r = Run(DYNVM_VM_COMPILE, {model, "-o", Path("quiet.dvm")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("loop_alloc_sites")));
  std::vector<std::string> args = {Path("gpt.dvm"), "--stats", "--output-dir", Path("out")};
  args.insert(args.end(), inputs.begin(), inputs.end());
  r = Run(DYNVM_VM_RUN, args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(" after_first_iteration=0\n"));
  absl::StatusOr<Tensor> tokens = npy::LoadNpy(Path("out/tokens.npy"));
  absl::StatusOr<Tensor> want = npy::LoadNpy(cases + "output_tokens.npy");
  ASSERT_TRUE(tokens.ok() && want.ok());
  EXPECT_EQ(*npy::EncodeNpy(*tokens), *npy::EncodeNpy(*want));
  // A bound below what case0 asks for: the run fails naming the symbol.
  r = Run(DYNVM_VM_COMPILE, {model, "-o", Path("small.dvm"), "--bound", "max_new_tokens=2"});
  ASSERT_EQ(r.code, 0) << r.err;
  args[0] = Path("small.dvm");
  r = Run(DYNVM_VM_RUN, args);
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("max_new_tokens"));
  // Bad bounds, and a bound naming nothing in the model (a warning, the file is written).
  ExpectCleanError(Run(DYNVM_VM_COMPILE, {model, "-o", Path("x.dvm"), "--bound", "batch"}),
                   "vm-compile");
  ExpectCleanError(Run(DYNVM_VM_COMPILE, {model, "-o", Path("x.dvm"), "--bound", "batch=-1"}),
                   "vm-compile");
  r = Run(DYNVM_VM_COMPILE, {model, "-o", Path("typo.dvm"), "--bound", "max_new_tokns=4"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("warning: bound max_new_tokns: no input dim or scalar input"));
  // -o (or --weights-out) naming the model itself is refused; the model is left as it was.
  const std::string model_bytes = *schema::ReadFileToString(model);
  ASSERT_TRUE(schema::WriteStringToFile(Path("self.onnx"), model_bytes).ok());
  for (const std::vector<std::string>& tail :
       {std::vector<std::string>{"-o", Path("self.onnx")},
        std::vector<std::string>{"-o", Path("w.dvm"), "--weights-out", Path("self.onnx")}}) {
    std::vector<std::string> a = {Path("self.onnx")};
    a.insert(a.end(), tail.begin(), tail.end());
    r = Run(DYNVM_VM_COMPILE, a);
    ExpectCleanError(r, "vm-compile");
    EXPECT_THAT(r.err, HasSubstr("is the model"));
    EXPECT_EQ(*schema::ReadFileToString(Path("self.onnx")), model_bytes);
  }
  // --device.
  r = Run(DYNVM_VM_COMPILE, {model, "-o", Path("cpu.dvm"), "--device", "cpu"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(*schema::ReadFileToString(Path("cpu.dvm")),
            *schema::ReadFileToString(Path("quiet.dvm")));
  ExpectCleanError(Run(DYNVM_VM_COMPILE, {model, "-o", Path("x.dvm"), "--device", "tpu"}),
                   "vm-compile");
  r = Run(DYNVM_VM_COMPILE, {model, "-o", Path("cuda.dvm"), "--device", "cuda"});
  if (r.code == 0) {  // a build that can compile for CUDA
    args[0] = Path("cuda.dvm");
    args.push_back("--device");
    args.push_back("cpu");
    r = Run(DYNVM_VM_RUN, args);
    ExpectCleanError(r, "vm-run");
    EXPECT_THAT(r.err, HasSubstr("was compiled for the CUDA device"));
  } else {
    ExpectCleanError(r, "vm-compile");
    EXPECT_THAT(r.err, HasSubstr("CUDA"));
  }
}
#endif

TEST_F(VmRunTest, RepeatThreadsStatsAndLimits) {
  Result r = Run(DYNVM_VM_RUN, {exe_, "-i", x_, "-i", y_, "--repeat", "5", "--threads", "2",
                                "--stats", "--max-iterations", "10", "--memory-limit", "1m"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("sum f32 [2,3]\n"));
  EXPECT_THAT(r.out, testing::ContainsRegex("median_ms=[0-9.]+ min_ms=[0-9.]+\n"));
  EXPECT_THAT(r.out, testing::ContainsRegex(
                         "bytes_in_use=[0-9]+ peak_bytes_in_use=[0-9]+ system_allocs=[0-9]+ "
                         "pool_hits=[0-9]+\n"));
  // A memory limit below what the run needs is a clean error.
  r = Run(DYNVM_VM_RUN, {exe_, "-i", x_, "-i", y_, "--memory-limit", "64"});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("limit"));
}

TEST_F(VmRunTest, ProfileWritesATraceAndSummary) {
  // One run: a span for the run and one per invoke (Add, Mul). vm/profiler_test.cc and
  // tools/models/trace_test.cc parse traces; here the tool's flags are checked.
  Result r = Run(DYNVM_VM_RUN,
                 {exe_, "-i", x_, "-i", y_, "--profile", Path("t.json"), "--profile-summary"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("sum f32 [2,3]\n"));
  EXPECT_THAT(r.out, HasSubstr("profile: 1 run,"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("add\\.f32\\.[a-z]+.* Add +1 "));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("mul\\.f32\\.[a-z]+.* Mul +1 "));
  absl::StatusOr<std::string> trace = schema::ReadFileToString(Path("t.json"));
  ASSERT_TRUE(trace.ok()) << trace.status();
  auto count = [&](const std::string& what) {
    int n = 0;
    for (size_t p = trace->find(what); p != std::string::npos; p = trace->find(what, p + 1)) ++n;
    return n;
  };
  EXPECT_TRUE(absl::StartsWith(*trace, "{")) << *trace;
  EXPECT_EQ(count("\"traceEvents\":["), 1);
  EXPECT_EQ(count("\"cat\":\"run\""), 1);
  EXPECT_EQ(count("\"cat\":\"kernel\",\"name\":\"Add\""), 1);
  EXPECT_EQ(count("\"cat\":\"kernel\",\"name\":\"Mul\""), 1);
  EXPECT_GE(count("\"ph\":\"C\""), 1);
  // With --repeat only the timed runs are profiled.
  r = Run(DYNVM_VM_RUN, {exe_, "-i", x_, "-i", y_, "--repeat", "3", "--profile-summary"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("profile: 3 runs,"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex(" Add +3 "));
  // A trace that cannot be written is one clean error.
  r = Run(DYNVM_VM_RUN, {exe_, "-i", x_, "-i", y_, "--profile", Path("no/such/dir/t.json")});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("t.json"));
}

TEST_F(VmRunTest, DeviceFlagChecksTheBuildTheMachineAndTheFile) {
  Result r = Run(DYNVM_VM_RUN, {exe_, "-i", x_, "-i", y_, "--device", "gpu"});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("--device must be cpu or cuda"));
  r = Run(DYNVM_VM_RUN, {exe_, "-i", x_, "-i", y_, "--device", "cpu"});
  EXPECT_EQ(r.code, 0) << r.err;
  // A host-only file: refused for the build (no CUDA), the machine (no GPU) or the file itself.
  r = Run(DYNVM_VM_RUN, {exe_, "-i", x_, "-i", y_, "--device", "cuda"});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, testing::AnyOf(HasSubstr("this build has no CUDA device support"),
                                    HasSubstr("no CUDA device available"),
                                    HasSubstr("runs no kernel on the CUDA device")));
}

TEST_F(VmRunTest, Bf16TravelsAsUint16) {
  // 1.0 and -2.0 in bf16.
  WriteNpy("b.npy", Make<uint16_t>(DType::kU16, {2}, {0x3F80, 0xC000}));
  Result r = Run(DYNVM_VM_RUN, {exe_, "--function", "echo_bf16", "--input",
                                absl::StrCat("b=", Path("b.npy")), "--output-dir", Path("out")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "b_out bf16 [2]\n");
  absl::StatusOr<Tensor> b = npy::LoadNpy(Path("out/b_out.npy"));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->dtype(), DType::kU16);
  EXPECT_EQ(Values<uint16_t>(*b), (std::vector<uint16_t>{0x3F80, 0xC000}));
  // A float file is not silently converted.
  r = Run(DYNVM_VM_RUN,
          {exe_, "--function", "echo_bf16", "--input", absl::StrCat("b=", Path("x.npy"))});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("must be bf16"));
}

TEST_F(VmRunTest, MissingInput) {
  Result r = Run(DYNVM_VM_RUN, {exe_, "--input", x_});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("missing input: y"));
}

TEST_F(VmRunTest, WrongDtype) {
  WriteNpy("xi.npy", Make<int64_t>(DType::kI64, {2, 3}, {1, 2, 3, 4, 5, 6}));
  Result r =
      Run(DYNVM_VM_RUN, {exe_, "--input", absl::StrCat("x=", Path("xi.npy")), "--input", y_});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("input 'x' must be f32[n,3]"));
  EXPECT_THAT(r.err, HasSubstr("i64[2,3]"));
}

TEST_F(VmRunTest, WrongRank) {
  WriteNpy("x1.npy", Make<float>(DType::kF32, {6}, {1, 2, 3, 4, 5, 6}));
  Result r =
      Run(DYNVM_VM_RUN, {exe_, "--input", absl::StrCat("x=", Path("x1.npy")), "--input", y_});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("rank 2"));
}

TEST_F(VmRunTest, WrongShapeAndInconsistentSymbol) {
  WriteNpy("x4.npy", Make<float>(DType::kF32, {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}));
  Result r =
      Run(DYNVM_VM_RUN, {exe_, "--input", absl::StrCat("x=", Path("x4.npy")), "--input", y_});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("dim 1 must be 3"));
  WriteNpy("x3.npy", Make<float>(DType::kF32, {1, 3}, {1, 2, 3}));
  r = Run(DYNVM_VM_RUN, {exe_, "--input", absl::StrCat("x=", Path("x3.npy")), "--input", y_});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("symbol 'n'"));
}

TEST_F(VmRunTest, UnknownInputName) {
  Result r = Run(DYNVM_VM_RUN, {exe_, "--input", x_, "--input", y_, "--input",
                                absl::StrCat("z=", Path("x.npy"))});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("no input named 'z'; its inputs are: x, y"));
  r = Run(DYNVM_VM_RUN, {exe_, "--input", absl::StrCat("x", Path("x.npy"))});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("NAME=FILE.npy"));
  r = Run(DYNVM_VM_RUN, {exe_, "--input", x_, "--input", x_, "--input", y_});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("more than once"));
}

TEST_F(VmRunTest, UnknownFunction) {
  Result r = Run(DYNVM_VM_RUN, {exe_, "--function", "nope", "--input", x_, "--input", y_});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("no function named 'nope'"));
}

TEST_F(VmRunTest, NonexistentFiles) {
  Result r = Run(DYNVM_VM_RUN, {Path("nope.dvm"), "--input", x_, "--input", y_});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("nope.dvm"));
  r = Run(DYNVM_VM_RUN, {exe_, "--input", x_, "--input", absl::StrCat("y=", Path("nope.npy"))});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("input 'y'"));
  EXPECT_THAT(r.err, HasSubstr("nope.npy"));
}

TEST_F(VmRunTest, CorruptFiles) {
  const std::string good = *schema::ReadFileToString(exe_);
  // A flipped byte inside the flatbuffer: the checksum catches it.
  std::string flipped = good;
  flipped[200] = static_cast<char>(flipped[200] ^ 0x40);
  Write("flipped.dvm", flipped);
  Result r = Run(DYNVM_VM_RUN, {Path("flipped.dvm"), "--input", x_, "--input", y_});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("flipped.dvm"));
  // Truncated, empty, and not an executable at all.
  Write("short.dvm", good.substr(0, good.size() / 2));
  Write("empty.dvm", "");
  Write("text.dvm", "hello\n");
  for (const char* name : {"short.dvm", "empty.dvm", "text.dvm"}) {
    r = Run(DYNVM_VM_RUN, {Path(name), "--input", x_, "--input", y_});
    ExpectCleanError(r, "vm-run");
    EXPECT_THAT(r.err, HasSubstr(name));
    r = Run(DYNVM_VM_DIS, {Path(name)});
    ExpectCleanError(r, "vm-dis");
  }
  // A corrupt .npy input.
  Write("bad.npy", "\x93NUMPY\x01\x00garbage");
  r = Run(DYNVM_VM_RUN, {exe_, "--input", x_, "--input", absl::StrCat("y=", Path("bad.npy"))});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("bad.npy"));
}

TEST_F(VmRunTest, BadFlags) {
  Result r = Run(DYNVM_VM_RUN, {exe_, "--bogus"});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("unknown flag '--bogus'"));
  ExpectCleanError(Run(DYNVM_VM_RUN, {exe_, "-i", x_, "-i", y_, "--repeat", "0"}), "vm-run");
  ExpectCleanError(Run(DYNVM_VM_RUN, {exe_, "-i", x_, "-i", y_, "--threads", "x"}), "vm-run");
  ExpectCleanError(Run(DYNVM_VM_RUN, {exe_, "-i", x_, "-i", y_, "--threads", "0"}), "vm-run");
  ExpectCleanError(Run(DYNVM_VM_RUN, {exe_, "-i", x_, "-i", y_, "--memory-limit", "-1"}), "vm-run");
  ExpectCleanError(Run(DYNVM_VM_RUN, {}), "vm-run");
  ExpectCleanError(Run(DYNVM_VM_RUN, {exe_, exe_}), "vm-run");
}

TEST_F(VmRunTest, RunTimeErrorsAreClean) {
  // An iteration budget the program exceeds, through --max-iterations.
  Assemble("loop", R"(
.function main
  .params 1 0
  .sregs i64
  .oregs tensor:f32
  .oresults tensor:f32
  .input x [2,3]
  .output y [2,3]
  loop %s0, 1000
    nop
  endloop
  ret (%o0), ()
.end
)");
  Result r = Run(DYNVM_VM_RUN, {Path("loop.dvm"), "-i", x_, "--max-iterations", "10"});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("iteration limit"));
  r = Run(DYNVM_VM_RUN, {Path("loop.dvm"), "-i", x_});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("median_ms")));
}

// vm-run's limits without flags (docs/trust.md): 10000000 loop iterations per run and 4 GiB of
// pool memory, each raised by its flag.
TEST_F(VmRunTest, DefaultLimitsStopRunawayPrograms) {
  const std::string loop = R"(
.function main
  .params 0 0
  .sregs i64
  .entry
  loop %s0, TRIPS
    nop
  endloop
  ret (), ()
.end
)";
  Assemble("over", absl::StrReplaceAll(loop, {{"TRIPS", "10000001"}}));
  Assemble("at", absl::StrReplaceAll(loop, {{"TRIPS", "10000000"}}));
  Result r = Run(DYNVM_VM_RUN, {Path("over.dvm")});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("loop iteration limit of 10000000 exceeded"));
  EXPECT_EQ(Run(DYNVM_VM_RUN, {Path("at.dvm")}).code, 0);
  r = Run(DYNVM_VM_RUN, {Path("over.dvm"), "--max-iterations", "10000001"});
  EXPECT_EQ(r.code, 0) << r.err;
  // 5 GiB of storage: refused by the default limit before anything is allocated.
  Assemble("big", R"(
.function main
  .params 0 0
  .sregs i64
  .oregs storage
  .entry
  const_i %s0, 5368709120
  alloc_storage %o0, %s0, cpu
  ret (), ()
.end
)");
  r = Run(DYNVM_VM_RUN, {Path("big.dvm")});
  ExpectCleanError(r, "vm-run");
  EXPECT_THAT(r.err, HasSubstr("memory limit of 4294967296 bytes"));
  r = Run(DYNVM_VM_RUN, {Path("big.dvm"), "--memory-limit", "4g"});
  EXPECT_THAT(r.err, HasSubstr("memory limit of 4294967296 bytes"));
  r = Run(DYNVM_VM_RUN, {Path("big.dvm"), "--memory-limit", "6g"});
  EXPECT_EQ(r.code, 0) << r.err;  // storage is not touched: no page is made resident
  EXPECT_THAT(Run(DYNVM_VM_RUN, {"--help"}).out,
              HasSubstr("10000000 loop iterations per run, 4 GiB of pool memory"));
}

// The vocabulary helpers vm-run and dynvm-server share, against this file's own Utf8 oracle.
TEST(VocabTest, ParsesEncodesAndRefusesBadText) {
  absl::StatusOr<std::vector<uint32_t>> vocab =
      cli::ParseVocab(" 97\n\n98\n20013\n128512\n", "v.txt");
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_THAT(*vocab, ::testing::ElementsAre(97u, 98u, 20013u, 128512u));
  for (uint32_t cp :
       {0x41u, 0xE9u, 0x7FFu, 0x800u, 0x4E2Du, 0xFFFFu, 0x10000u, 0x1F600u, 0x10FFFFu}) {
    EXPECT_EQ(cli::Utf8(cp), Utf8(cp)) << cp;
  }
  absl::StatusOr<std::vector<int64_t>> ids =
      cli::EncodeText(absl::StrCat("ba", Utf8(20013), Utf8(128512), "a"), *vocab, "text");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ::testing::ElementsAre(1, 0, 2, 3, 0));
  EXPECT_THAT(cli::EncodeText("abc", *vocab, "text_input").status().message(),
              HasSubstr("character 'c' of text_input is not in the vocabulary"));
  EXPECT_THAT(cli::EncodeText("a\xC3", *vocab, "text").status().message(),
              HasSubstr("text is not valid UTF-8"));
  EXPECT_THAT(cli::EncodeText("\xFF", *vocab, "text").status().message(),
              HasSubstr("text is not valid UTF-8"));
  EXPECT_THAT(cli::EncodeText("", *vocab, "prompt").status().message(),
              HasSubstr("prompt is empty"));
  EXPECT_THAT(cli::ParseVocab("97\nx\n", "v.txt").status().message(),
              HasSubstr("v.txt line 2: expected a Unicode code point"));
  EXPECT_THAT(cli::ParseVocab("1114112\n", "v.txt").status().message(),
              HasSubstr("v.txt line 1: expected a Unicode code point"));
  EXPECT_THAT(cli::ParseVocab("\n \n", "v.txt").status().message(), HasSubstr("v.txt is empty"));
  EXPECT_EQ(cli::ReadVocab("/nonexistent/vocab.txt").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dynvm
