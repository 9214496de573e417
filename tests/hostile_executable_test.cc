// Hostile executables: every single-byte corruption and every truncation of a small valid
// file either loads or is refused with an error, never a crash; whatever loads also runs to
// an OK or an error. Run-time limits (loop iterations, call depth) stop runaway programs, and
// constants that point outside the constant segment are refused.
//
// Fuzz corpora: with DYNVM_REGENERATE_FUZZ_CORPUS=1 in the environment, the test
// RegenerateFuzzCorpus (run from the repository root) rewrites the checked-in seed corpora:
//   vm/fuzz_corpus/seeds/      assembled tests/isa/*.s + kProgram (vm_verifier_fuzzer's and
//                              vm_run_fuzzer's seeds)
//   vm/fuzz_corpus/assembler/  kProgram as text (vm_assembler_fuzzer also reads tests/isa/*.s in
//                              place)
// Also in seeds/: onnx_*.dvm, the ONNX fuzzer's seed models (compiler/onnx/fuzz_corpus/) compiled
// with `vm-compile`, programs with inputs and real kernels for vm_run_fuzzer to bind inputs to.
// Crash inputs found by the fuzzers are added there by hand (named crash-*), and pinned by a
// regression test below.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "allocator/heap_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "isa/assembler.h"
#include "schema/format.h"
#include "schema/format_testing.h"
#include "schema/mapped_file.h"
#include "schema/writer.h"
#include "vm/executable.h"
#include "vm/fuzzing.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

using ::testing::HasSubstr;

// Constants (one a weight), a kernel, a loop with a double buffer, an if, a call and a
// signature: a little of everything the loader and the verifier check.
constexpr absl::string_view kProgram = R"(.producer "hostile_executable_test"
.string "wrong sum"
.const f32 [4] name="w" weight values:[1, 2, 3, 4]
.const f32 [4] values:[0.5, 0.5, 0.5, 0.5]
.kernel "Add" in(f32, f32) out(f32)

.function twice
  .params 0 1
  .sregs i64 i64
  .sresults i64
  add_i %s1, %s0, %s0
  ret (), (%s1)
.end

.function main
  .params 0 0
  .sregs i64 f64 f64 bool i64
  .oregs tensor:f32 tensor:f32 storage storage tensor:f32 tensor:f32
  .oresults tensor:f32
  .output y [4]
  load_const %o0, c0
  load_const %o1, c1
  alloc_storage %o2, 16, cpu
  alloc_storage %o3, 16, cpu
  alloc_tensor %o4, %o2, 0, f32, [4]
  alloc_tensor %o5, %o3, 0, f32, [4]
  copy %o4, %o0
  const_i %s4, 3
  call @twice, (), (%s4), (), (%s4)
  loop %s0, %s4
    invoke k0, #0, (%o4, %o1), (%o5)
    pmove (%o4, %o5), (%o5, %o4)
  endloop
  ; 1 + 6 * 0.5
  read_f %s1, %o4, 0
  const_f %s2, 4
  eq_f %s3, %s1, %s2
  if %s3
    nop
  else
    fail str0
  endif
  ret (%o4), ()
.end
)";

std::string AssembleOrDie(absl::string_view text) {
  absl::StatusOr<std::string> bytes = isa::AssembleToBytes(text);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::string();
}

absl::Span<const uint8_t> Span(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

absl::StatusOr<std::shared_ptr<const Executable>> Load(const std::string& bytes) {
  return Executable::LoadFromBytes(Span(bytes));
}

using schema::Reseal;  // schema/format_testing.h

std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Outcome {
  bool loaded = false;
  int runs_ok = 0;
  int runs_failed = 0;
  std::vector<absl::Status> errors;  // the load error, or each failed run's
};

// Loads `bytes`; if that works, runs every entry function under tight limits, its inputs bound
// to small pseudo-random tensors as vm_run_fuzzer does. Either step may fail; neither may crash.
Outcome LoadAndRun(const std::string& bytes) {
  Outcome out;
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Load(bytes);
  if (!exe.ok()) {
    EXPECT_FALSE(exe.status().message().empty());
    out.errors.push_back(exe.status());
    return out;
  }
  out.loaded = true;
  VmOptions options;
  options.max_loop_iterations = 100000;
  options.max_call_depth = 32;
  options.memory_limit = int64_t{64} << 20;
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe, options);
  if (!vm.ok()) return out;
  for (int f = 0; f < (*exe)->num_functions(); ++f) {
    const FunctionInfo& info = (*exe)->function(f);
    if (!info.is_entry) continue;
    fuzzing::BindSmallInputs(**vm, info, fuzzing::SeedOf(Span(bytes).data(), bytes.size()) + f);
    RunOptions run;
    run.function = info.name;
    run.deadline = absl::Now() + absl::Seconds(5);
    absl::Status s = (*vm)->Run(run);
    if (s.ok()) {
      ++out.runs_ok;
      EXPECT_TRUE((*vm)->GetOutputs(info.name).ok());
    } else {
      ++out.runs_failed;
      out.errors.push_back(s);
    }
  }
  return out;
}

struct Tally {
  int mutants = 0, loaded = 0, refused = 0, runs_ok = 0, runs_failed = 0;
  void Add(const Outcome& o) {
    ++mutants;
    (o.loaded ? loaded : refused) += 1;
    runs_ok += o.runs_ok;
    runs_failed += o.runs_failed;
  }
  std::string Summary(absl::string_view what) const {
    return absl::StrCat(what, ": ", mutants, " mutants, ", loaded, " loaded, ", refused,
                        " refused; runs: ", runs_ok, " ok, ", runs_failed, " failed");
  }
};

TEST(HostileExecutableTest, TheProgramLoadsAndRuns) {
  const std::string bytes = AssembleOrDie(kProgram);
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Load(bytes);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ((*exe)->num_kernels(), 1);
  EXPECT_EQ((*exe)->num_constants(), 2);
  EXPECT_EQ((*exe)->num_weights(), 1);
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->Run().ok()) << (*vm)->Run();
  absl::StatusOr<Tensor> y = (*vm)->GetOutput("y");
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->numel(), 4);
  EXPECT_EQ(y->data<float>()[3], 7.0f);
  EXPECT_EQ((*vm)->last_run_iterations(), 6);
}

// (a) Every byte flipped (XOR 0xFF and XOR 0x01) at every position. Flips in the header and
// flatbuffer mostly trip the checksum; flips in the constant segment change only data.
TEST(HostileExecutableTest, EverySingleByteFlipLoadsOrIsRefused) {
  const std::string bytes = AssembleOrDie(kProgram);
  ASSERT_FALSE(bytes.empty());
  Tally tally;
  for (uint8_t mask : {uint8_t{0xFF}, uint8_t{0x01}}) {
    for (size_t pos = 0; pos < bytes.size(); ++pos) {
      std::string m = bytes;
      m[pos] = static_cast<char>(m[pos] ^ mask);
      tally.Add(LoadAndRun(m));
    }
  }
  std::cout << tally.Summary("byte flips") << "\n";
  EXPECT_EQ(tally.mutants, 2 * static_cast<int>(bytes.size()));
  EXPECT_GT(tally.refused, 0);
}

// The same flips inside the flatbuffer, with the checksum recomputed: these reach the
// flatbuffers verifier, the ISA verifier, kernel binding and, when they pass, the interpreter.
TEST(HostileExecutableTest, EveryResealedFlatbufferByteFlipLoadsOrIsRefused) {
  const std::string bytes = AssembleOrDie(kProgram);
  absl::StatusOr<schema::FileHeader> h = schema::ParseHeader(Span(bytes));
  ASSERT_TRUE(h.ok()) << h.status();
  Tally tally;
  for (uint8_t mask : {uint8_t{0xFF}, uint8_t{0x01}}) {
    for (size_t pos = h->flatbuffer_offset; pos < h->flatbuffer_offset + h->flatbuffer_size;
         ++pos) {
      std::string m = bytes;
      m[pos] = static_cast<char>(m[pos] ^ mask);
      Reseal(m);
      tally.Add(LoadAndRun(m));
    }
  }
  std::cout << tally.Summary("resealed flatbuffer flips") << "\n";
  EXPECT_GT(tally.loaded, 0);
  EXPECT_GT(tally.refused, 0);
}

// (b) Every truncation is refused.
TEST(HostileExecutableTest, EveryTruncationIsRefused) {
  const std::string bytes = AssembleOrDie(kProgram);
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::StatusOr<std::shared_ptr<const Executable>> exe = Load(bytes.substr(0, n));
    EXPECT_FALSE(exe.ok()) << "a " << n << "-byte prefix of the " << bytes.size()
                           << "-byte file loaded";
    if (!exe.ok()) {
      EXPECT_FALSE(exe.status().message().empty());
    }
  }
  // With the checksum recomputed, truncations inside the flatbuffer are refused as well
  // (the header's sizes no longer fit the file).
  for (size_t n = schema::kHeaderSize; n < bytes.size(); ++n) {
    std::string m = bytes.substr(0, n);
    Reseal(m);
    EXPECT_FALSE(Load(m).ok()) << n;
  }
}

// (c) A loop with a huge trip count is stopped by max_loop_iterations.
TEST(HostileExecutableTest, HugeTripCountIsStoppedByTheIterationLimit) {
  const std::string bytes = AssembleOrDie(R"(
.function main
  .params 0 0
  .sregs i64 i64
  .entry
  const_i %s1, 9223372036854775807
  loop %s0, %s1
    nop
  endloop
  ret (), ()
.end
)");
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Load(bytes);
  ASSERT_TRUE(exe.ok()) << exe.status();
  VmOptions options;
  options.max_loop_iterations = 12345;
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe, options);
  ASSERT_TRUE(vm.ok());
  absl::Status s = (*vm)->Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("loop iteration limit of 12345 exceeded"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("function 'main' pc"));
  // The limit is per run: the VM stays usable and a second run stops the same way.
  EXPECT_EQ((*vm)->Run().code(), absl::StatusCode::kResourceExhausted);
}

// (d) Unbounded recursion is stopped by max_call_depth, with the default and a small limit.
TEST(HostileExecutableTest, DeepRecursionIsStoppedByTheCallDepthLimit) {
  const std::string bytes = AssembleOrDie(R"(
.function down
  .params 1 1
  .sregs i64 i64
  .oregs tensor:f32
  addimm_i %s1, %s0, 1
  call @down, (%o0), (%s1), (), ()
  ret (), ()
.end
.const f32 [1] values:[1]
.function main
  .params 0 0
  .sregs i64
  .oregs tensor:f32
  .entry
  load_const %o0, c0
  const_i %s0, 0
  call @down, (%o0), (%s0), (), ()
  ret (), ()
.end
)");
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Load(bytes);
  ASSERT_TRUE(exe.ok()) << exe.status();
  for (int depth : {1, 2, 17, 200}) {
    VmOptions options;
    options.max_call_depth = depth;
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe, options);
    ASSERT_TRUE(vm.ok());
    absl::Status s = (*vm)->Run();
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat("call depth limit of ", depth, " exceeded")));
  }
}

// An entry function may declare a sequence (or optional) input, which the verifier accepts;
// the host API binds only tensors. Binding a tensor to such an input used to leave the
// sequence register null, and seq_len dereferenced it.
TEST(HostileExecutableTest, NonTensorInputsCannotBeBoundToATensor) {
  const std::string bytes = AssembleOrDie(R"(
.function main
  .params 1 0
  .sregs i64
  .oregs seq:f32
  .input xs *
  seq_len %s0, %o0
  ret (), ()
.end
.function opt
  .params 1 0
  .sregs bool
  .oregs opt:tensor:f32
  .input x *
  opt_has %s0, %o0
  ret (), ()
.end
)");
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Load(bytes);
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  ASSERT_TRUE(vm.ok());
  absl::StatusOr<Tensor> t = Tensor::Allocate(HeapAllocator::Get(), DType::kF32, {2});
  ASSERT_TRUE(t.ok());
  for (const char* fn : {"main", "opt"}) {
    absl::Status s = (*vm)->SetInput(0, *t, fn);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("only tensor inputs can be bound")) << s;
    s = (*vm)->SetInputZeroCopy((*exe)->function(*(*exe)->FindFunction(fn)).inputs[0].name, *t, fn);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    RunOptions run;
    run.function = fn;
    s = (*vm)->Run(run);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("is not set"));
  }
}

// Found by vm_run_fuzzer: alloc_tensor at a byte offset that is not a multiple of the element
// size gave the Add kernel a misaligned float output (UBSan: "store to misaligned address").
TEST(HostileExecutableTest, RegressionMisalignedAllocTensorOffsetIsRefused) {
  const std::string bytes = AssembleOrDie(R"(
.function main
  .params 0 0
  .oregs storage tensor:f32
  .entry
  alloc_storage %o0, 64, cpu
  alloc_tensor %o1, %o0, 3, f32, [2]
  ret (), ()
.end
)");
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Load(bytes);
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  ASSERT_TRUE(vm.ok());
  absl::Status s = (*vm)->Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(
      std::string(s.message()),
      HasSubstr("alloc_tensor byte offset 3 is not a multiple of the 4-byte f32 element size"));
  // The fuzzer's input: its run now fails at the alloc_tensor instead of reaching the kernel.
  const std::string input = ReadAll("vm/fuzz_corpus/run/crash-misaligned-alloc-tensor.dvm");
  ASSERT_FALSE(input.empty());
  const std::string crash =
      fuzzing::FileFromFuzzInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  const Outcome o = LoadAndRun(crash);
  EXPECT_TRUE(o.loaded);
  EXPECT_GT(o.runs_failed, 0);
}

// Serializes `exe` as the writer does, but keeps the constant offsets and sizes as given:
// the writer always lays constants out correctly, a hostile file need not.
std::string WriteWithRawConstants(fb::ExecutableT& exe, const std::string& segment) {
  flatbuffers::FlatBufferBuilder builder;
  builder.Finish(fb::Executable::Pack(builder, &exe), fb::ExecutableIdentifier());
  schema::FileHeader h;
  h.flatbuffer_offset = schema::kHeaderSize;
  h.flatbuffer_size = builder.GetSize();
  h.constants_offset = (schema::kHeaderSize + h.flatbuffer_size + 63) / 64 * 64;
  h.constants_size = h.constants_raw_size = segment.size();
  std::string out(h.constants_offset + segment.size(), '\0');
  std::memcpy(out.data() + schema::kHeaderSize, builder.GetBufferPointer(), h.flatbuffer_size);
  std::memcpy(out.data() + h.constants_offset, segment.data(), segment.size());
  auto* b = reinterpret_cast<uint8_t*>(out.data());
  schema::EncodeHeader(h, b);
  Reseal(out);
  return out;
}

// (e) Constants pointing past the end of the constant segment are refused.
TEST(HostileExecutableTest, ConstantPastTheEndIsRefused) {
  absl::StatusOr<isa::Assembly> a = isa::Assemble(kProgram);
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string segment(128, '\x01');
  // Assemble leaves the layout to the writer: set it by hand.
  a->exe->constants[0]->offset = 0;
  a->exe->constants[1]->offset = 64;
  a->exe->constants[0]->size = a->exe->constants[1]->size = 16;
  ASSERT_TRUE(Load(WriteWithRawConstants(*a->exe, segment)).ok());
  struct Case {
    uint64_t offset;
    const char* expect;
  };
  for (Case c :
       {Case{128,
             "constant 1: range [128, +16) runs past the end of the 128-byte constant segment"},
        Case{64, ""},  // inside: fine
        Case{192, "constant 1: range [192, +16) runs past"},
        Case{uint64_t{1} << 63, "runs past the end"}, Case{~uint64_t{63}, "runs past the end"}}) {
    a->exe->constants[1]->offset = c.offset;
    absl::StatusOr<std::shared_ptr<const Executable>> exe =
        Load(WriteWithRawConstants(*a->exe, segment));
    if (*c.expect == '\0') {
      EXPECT_TRUE(exe.ok()) << exe.status();
      continue;
    }
    ASSERT_FALSE(exe.ok()) << c.offset;
    EXPECT_EQ(exe.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(exe.status().message()), HasSubstr(c.expect));
  }
  // A segment that ends exactly where constant 1 ends, and one shorter than it needs.
  a->exe->constants[1]->offset = 64;
  EXPECT_TRUE(Load(WriteWithRawConstants(*a->exe, segment.substr(0, 80))).ok());
  absl::StatusOr<std::shared_ptr<const Executable>> exe =
      Load(WriteWithRawConstants(*a->exe, segment.substr(0, 70)));
  ASSERT_FALSE(exe.ok());
  EXPECT_THAT(std::string(exe.status().message()),
              HasSubstr("constant 1: range [64, +16) runs past the end of the 70-byte"));
}

// String constants (docs/strings.md): a table of (offset, length) pairs, then the bytes. A
// range outside the bytes, a table larger than the constant, or invalid UTF-8 is refused at load
// naming the constant and the element; a valid one loads and runs to its strings.
constexpr absl::string_view kStringProgram = R"(.const u8 [1] values:[0]
.function main
  .params 0 0
  .oregs tensor:string
  .oresults tensor:string
  .output y [2]
  load_const %o0, c0
  ret (%o0), ()
.end
)";

std::string StringConstant(std::vector<std::pair<uint64_t, uint64_t>> entries,
                           const std::string& bytes) {
  std::string out(entries.size() * 16, '\0');
  for (size_t i = 0; i < entries.size(); ++i) {
    std::memcpy(out.data() + 16 * i, &entries[i].first, 8);
    std::memcpy(out.data() + 16 * i + 8, &entries[i].second, 8);
  }
  return out + bytes;
}

TEST(HostileExecutableTest, StringConstantsWithBadRangesOrBadUtf8AreRefused) {
  absl::StatusOr<isa::Assembly> a = isa::Assemble(kStringProgram);
  ASSERT_TRUE(a.ok()) << a.status();
  fb::ConstantT& c = *a->exe->constants[0];
  c.dtype = static_cast<uint8_t>(DType::kString);
  c.shape = {2};
  c.offset = 0;
  auto load = [&](const std::string& data) {
    c.size = data.size();
    return Load(WriteWithRawConstants(*a->exe, data));
  };
  {  // valid: "ab" and "é€" (multi-byte), and it runs to them
    const std::string good = StringConstant({{32, 2}, {34, 5}}, "ab\xc3\xa9\xe2\x82\xac");
    absl::StatusOr<std::shared_ptr<const Executable>> exe = load(good);
    ASSERT_TRUE(exe.ok()) << exe.status();
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
    ASSERT_TRUE(vm.ok()) << vm.status();
    ASSERT_TRUE((*vm)->Run().ok());
    absl::StatusOr<Tensor> y = (*vm)->GetOutput(0);
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->dtype(), DType::kString);
    const StringRef* e = y->data<StringRef>();
    EXPECT_EQ(std::string(e[0].data, e[0].size), "ab");
    EXPECT_EQ(std::string(e[1].data, e[1].size), "\xc3\xa9\xe2\x82\xac");
  }
  struct Case {
    std::string data;
    const char* expect;
  };
  const uint64_t kHuge = ~uint64_t{0} - 3;
  const Case cases[] = {
      {StringConstant({{32, 2}, {0, 4}}, "abcd"), "string element 1: bytes [0, +4) lie outside"},
      {StringConstant({{32, 2}, {34, 3}}, "abcd"), "string element 1: bytes [34, +3) lie outside"},
      {StringConstant({{32, kHuge}, {32, 0}}, "ab"), "string element 0: bytes [32, +"},
      {StringConstant({{kHuge, 8}, {32, 0}}, "ab"), "lie outside"},
      {StringConstant({{32, 2}, {34, 2}}, "a\xff\xc3\xa9"),
       "string element 0: invalid UTF-8 at byte 1"},
      {StringConstant({{32, 0}, {32, 3}}, "\xed\xa0\x80"), "string element 1: invalid UTF-8"},
      {std::string(24, '\0'), "constant 0: size 24 does not match its shape"},
  };
  for (const Case& k : cases) {
    absl::StatusOr<std::shared_ptr<const Executable>> exe = load(k.data);
    ASSERT_FALSE(exe.ok()) << k.expect;
    EXPECT_EQ(exe.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(exe.status().message()), HasSubstr(k.expect));
  }
}

// String registers hold pointers: the instructions that fill, copy or reinterpret tensor
// memory refuse them, and kernels see them only on string-typed ports as dynamic outputs.
TEST(HostileExecutableTest, InstructionsThatWouldForgeStringsAreRefused) {
  struct Case {
    const char* body;
    const char* expect;
  };
  const Case cases[] = {
      {"alloc_storage %o1, 64, cpu\n  alloc_tensor %o0, %o1, 0, string, [2]",
       "%o0 is a string tensor"},
      {"alloc_growable %o0, string, cpu, 0, 4, [2]", "%o0 is a string tensor"},
      {"load_const %o0, c0\n  view %o2, %o0, 0, [2], [1]", "%o0 is a string tensor"},
      {"load_const %o0, c0\n  load_const %o2, c0\n  copy %o2, %o0", "%o0 is a string tensor"},
      {"load_const %o0, c0\n  read_i %s0, %o0, 0", "%o0 is a string tensor"},
      {"load_const %o0, c0\n  invoke k0, #0, (%o0), (%o2)", "on a port not typed string"},
      {"load_const %o0, c0\n  load_const %o2, c0\n  invoke k1, #0, (%o0), (%o2)",
       "a string output must be dynamic"},
  };
  for (const Case& k : cases) {
    const std::string text = absl::StrCat(R"(.const u8 [1] values:[0]
.kernel "Identity" in(any) out(dyn:any)
.kernel "Identity" in(string) out(string)
.function main
  .params 0 0
  .sregs i64
  .oregs tensor:string storage tensor:string
  )",
                                          k.body, "\n  ret (), ()\n.end\n");
    absl::StatusOr<isa::Assembly> a = isa::Assemble(text);
    if (!a.ok()) {  // the assembler verifies too
      EXPECT_THAT(std::string(a.status().message()), HasSubstr(k.expect)) << k.body;
      continue;
    }
    fb::ConstantT& c = *a->exe->constants[0];
    c.dtype = static_cast<uint8_t>(DType::kString);
    c.shape = {2};
    c.offset = 0;
    const std::string data = StringConstant({{32, 0}, {32, 0}}, "");
    c.size = data.size();
    absl::StatusOr<std::shared_ptr<const Executable>> exe =
        Load(WriteWithRawConstants(*a->exe, data));
    ASSERT_FALSE(exe.ok()) << k.body;
    EXPECT_EQ(exe.status().code(), absl::StatusCode::kInvalidArgument) << exe.status();
    EXPECT_THAT(std::string(exe.status().message()), HasSubstr(k.expect)) << k.body;
  }
}

// Kernel binding at load: a kernel-table entry that no registered backend serves, or whose
// attributes have the wrong type, is refused naming the entry, before any VM exists.
TEST(HostileExecutableTest, KernelsThatNoBackendServesAreRefusedAtLoad) {
  struct Case {
    const char* kernel;
    absl::StatusCode code;
    const char* expect;
  };
  const Case cases[] = {
      {R"(.kernel "NoSuchOp" in(f32) out(dyn:f32))", absl::StatusCode::kNotFound,
       "kernel 0 (NoSuchOp"},
      {R"(.kernel "MatMul" in(bool, bool) out(dyn:bool))", absl::StatusCode::kUnimplemented,
       "kernel 0 (MatMul"},
      {R"(.kernel "Transpose" in(f32) out(dyn:f32) attrs(perm=s:"0,1"))",
       absl::StatusCode::kInvalidArgument, "attribute 'perm' must be of type ints"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.kernel);
    const std::string bytes = AssembleOrDie(
        absl::StrCat(c.kernel, "\n.function main\n  .params 0 0\n  .entry\n  ret (), ()\n.end\n"));
    ASSERT_FALSE(bytes.empty());
    absl::StatusOr<std::shared_ptr<const Executable>> exe = Load(bytes);
    ASSERT_FALSE(exe.ok());
    EXPECT_EQ(exe.status().code(), c.code) << exe.status();
    EXPECT_THAT(std::string(exe.status().message()), HasSubstr(c.expect));
  }
}

// Conv shapes that disagree (issue 17): W's input channels against X's, a negative pad, a kernel
// larger than the padded input. Whatever backend serves Conv refuses them with InvalidArgument
// naming the op, at load or at run time; never a crash or an out-of-bounds read.
TEST(HostileExecutableTest, ConvShapesThatDisagreeAreInvalidArgument) {
  struct Case {
    const char* what;
    const char* x;
    int x_numel;
    const char* w;
    int w_numel;
    const char* attrs;
  };
  const Case cases[] = {
      {"channels", "[1,3,4,4]", 48, "[2,4,3,3]", 72, ""},
      {"negative pad", "[1,1,4,4]", 16, "[1,1,3,3]", 9, " attrs(pads=ints:[-2,0,0,0])"},
      {"kernel too large", "[1,1,3,3]", 9, "[1,1,5,5]", 25, " attrs(pads=ints:[0,0,1,1])"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto values = [](int n) {
      std::string v;
      for (int i = 0; i < n; ++i) absl::StrAppend(&v, i > 0 ? "," : "", i % 7);
      return v;
    };
    const std::string bytes = AssembleOrDie(absl::StrCat(
        ".const f32 ", c.x, " values:[", values(c.x_numel), "]\n.const f32 ", c.w, " values:[",
        values(c.w_numel), "]\n.kernel \"Conv\" in(f32, f32) out(dyn:f32)", c.attrs,
        "\n.function main\n  .params 0 0\n  .entry\n  .oregs tensor:f32 tensor:f32 tensor:f32\n"
        "  load_const %o0, c0\n  load_const %o1, c1\n  invoke k0, #0, (%o0, %o1), (%o2)\n"
        "  ret (), ()\n.end\n"));
    ASSERT_FALSE(bytes.empty());
    absl::StatusOr<std::shared_ptr<const Executable>> exe = Load(bytes);
    absl::Status s = exe.status();
    if (exe.ok()) {
      std::unique_ptr<VirtualMachine> vm = *VirtualMachine::Create(*exe);
      s = vm->Run();
      EXPECT_TRUE(vm->Run().code() == s.code());  // the VM stays usable
    }
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("Conv")) << s;
  }
}

// A file that needs an external or compressed weights file, which this version cannot read,
// is refused at load (not read as if its constants were in the file).
TEST(HostileExecutableTest, WeightsFeaturesWithoutTheirDataAreRefused) {
  // A header that claims external weights (but the file names no weights file) or a
  // compressed constant segment (but the segment is no zstd frame) is refused at load.
  const std::string bytes =
      AssembleOrDie(".function main\n  .params 0 0\n  .entry\n  ret (), ()\n.end\n");
  ASSERT_TRUE(Load(bytes).ok());
  absl::StatusOr<schema::FileHeader> h = schema::ParseHeader(Span(bytes));
  ASSERT_TRUE(h.ok()) << h.status();
  for (uint64_t feature : {schema::kFeatureExternalWeights, schema::kFeatureCompressedConstants}) {
    schema::FileHeader edited = *h;
    edited.required_features |= feature;
    if (feature == schema::kFeatureCompressedConstants) edited.constants_raw_size += 64;
    std::string m = bytes;
    schema::EncodeHeader(edited, reinterpret_cast<uint8_t*>(m.data()));
    Reseal(m);
    absl::StatusOr<std::shared_ptr<const Executable>> exe = Load(m);
    ASSERT_FALSE(exe.ok()) << feature;
    EXPECT_NE(exe.status().code(), absl::StatusCode::kInternal) << exe.status();
    EXPECT_THAT(std::string(exe.status().message()),
                HasSubstr(feature == schema::kFeatureExternalWeights ? "weights" : "compress"))
        << exe.status();
  }
}

// ---------------------------------------------------------------------------------------------
// Seed corpora for the fuzzers (see the top of this file).

void WriteFile(const std::filesystem::path& p, const std::string& data) {
  std::filesystem::create_directories(p.parent_path());
  absl::Status s = schema::WriteStringToFile(p.string(), data);
  ASSERT_TRUE(s.ok()) << s;
}

TEST(HostileExecutableTest, RegenerateFuzzCorpus) {
  const char* env = std::getenv("DYNVM_REGENERATE_FUZZ_CORPUS");
  if (env == nullptr || std::string(env) != "1")
    GTEST_SKIP() << "set DYNVM_REGENERATE_FUZZ_CORPUS=1 to rewrite";
  std::vector<std::pair<std::string, std::string>> sources = {
      {"hostile_program", std::string(kProgram)}};
  for (const auto& e : std::filesystem::directory_iterator("tests/isa")) {
    if (e.path().extension() == ".s")
      sources.emplace_back(e.path().stem().string(), ReadAll(e.path()));
  }
  for (const auto& [name, text] : sources) {
    const std::string bytes = AssembleOrDie(text);
    ASSERT_TRUE(Load(bytes).ok()) << name;
    WriteFile(std::filesystem::path("vm/fuzz_corpus/seeds") / (name + ".dvm"), bytes);
    if (name == "hostile_program") {
      WriteFile(std::filesystem::path("vm/fuzz_corpus/assembler") / (name + ".s"), text);
    }
  }
  // A string constant (docs/strings.md), and one whose second range runs past its bytes.
  for (const bool bad : {false, true}) {
    absl::StatusOr<isa::Assembly> a = isa::Assemble(kStringProgram);
    ASSERT_TRUE(a.ok()) << a.status();
    fb::ConstantT& c = *a->exe->constants[0];
    c.dtype = static_cast<uint8_t>(DType::kString);
    c.shape = {2};
    c.offset = 0;
    const std::string data =
        StringConstant({{32, 2}, {34, bad ? 9u : 5u}}, "ab\xc3\xa9\xe2\x82\xac");
    c.size = data.size();
    const std::string bytes = WriteWithRawConstants(*a->exe, data);
    ASSERT_EQ(Load(bytes).ok(), !bad);
    if (bad) {
      WriteFile("vm/fuzz_corpus/verifier/crash-string-constant-past-its-bytes.dvm", bytes);
    } else {
      WriteFile("vm/fuzz_corpus/seeds/string_constant.dvm", bytes);
    }
  }
}

// Every checked-in seed and crash input is handled without a crash (the fuzz targets' own
// logic, run as a unit test so that CI covers the corpora without libFuzzer).
// Every checked-in corpus file: the seeds (assembled tests/isa/*.s, kProgram, compiled ONNX
// models) load and run their entry functions under the fuzzers' limits, as they are and
// resealed; each crash-* input
// has its own exact outcome; the corpora have the sizes checked in (a file added or lost
// changes the count here too).
TEST(HostileExecutableTest, FuzzCorporaLoadOrAreRefused) {
  struct Expected {
    const char* file;
    bool loads;
    int runs_failed;        // of the entry functions run
    absl::StatusCode code;  // of the load error, or of each failed run
    const char* message;    // a substring of that error
  };
  const Expected kCrashes[] = {
      // A shape vector at 4 mod 8 (isa/verifier_tables_test.cc pins the verifier's check).
      {"vm/fuzz_corpus/verifier/crash-misaligned-constant-shape.dvm", false, 0,
       absl::StatusCode::kInvalidArgument, "shape vector is not 8-byte aligned"},
      // A Concat writing over its own input (docs/trust.md): runs, to unspecified values.
      {"vm/fuzz_corpus/run/crash-concat-output-overlaps-input.dvm", true, 0, absl::StatusCode::kOk,
       ""},
      // A string constant whose second element runs past its bytes (docs/strings.md).
      {"vm/fuzz_corpus/verifier/crash-string-constant-past-its-bytes.dvm", false, 0,
       absl::StatusCode::kInvalidArgument, "string element 1: bytes [34, +9) lie outside"},
      // alloc_tensor at a misaligned offset: refused at run time.
      {"vm/fuzz_corpus/run/crash-misaligned-alloc-tensor.dvm", true, 1,
       absl::StatusCode::kInvalidArgument, "is not a multiple of the"},
  };
  const struct {
    const char* dir;
    int files;
  } kCorpora[] = {
      {"vm/fuzz_corpus/seeds", 18}, {"vm/fuzz_corpus/verifier", 2}, {"vm/fuzz_corpus/run", 2}};
  int crashes_seen = 0;
  for (const auto& corpus : kCorpora) {
    ASSERT_TRUE(std::filesystem::is_directory(corpus.dir)) << corpus.dir;
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(corpus.dir)) {
      ++n;
      const std::string path = e.path().string();
      SCOPED_TRACE(path);
      std::string bytes = ReadAll(e.path());
      ASSERT_FALSE(bytes.empty());
      const bool crash = absl::StartsWith(e.path().filename().string(), "crash-");
      const Expected* want = nullptr;
      for (const Expected& x : kCrashes) {
        if (path == x.file) want = &x;
      }
      ASSERT_EQ(crash, want != nullptr) << "a crash-* input without an expected outcome here";
      // As checked in (a fuzzer's input reseals itself when bit 0 of byte 64 is set) and
      // resealed: the same outcome either way.
      for (const bool reseal : {false, true}) {
        if (reseal) Reseal(bytes);
        if (crash && !reseal && (static_cast<uint8_t>(bytes[64]) & 1)) continue;
        const Outcome o = LoadAndRun(bytes);
        if (want == nullptr) {
          // A seed loads and runs every entry function (to OK, or to the error a tests/isa
          // fail_* case is written to reach).
          EXPECT_TRUE(o.loaded) << (o.errors.empty() ? "" : o.errors[0].ToString());
          EXPECT_GT(o.runs_ok + o.runs_failed, 0);
          continue;
        }
        EXPECT_EQ(o.loaded, want->loads);
        if (want->loads) {
          EXPECT_EQ(o.runs_failed, want->runs_failed);
        }
        for (const absl::Status& err : o.errors) {
          EXPECT_EQ(err.code(), want->code) << err;
          EXPECT_THAT(std::string(err.message()), HasSubstr(want->message));
        }
        if (!want->loads || want->runs_failed > 0) {
          EXPECT_FALSE(o.errors.empty());
        }
      }
      crashes_seen += crash ? 1 : 0;
    }
    EXPECT_EQ(n, corpus.files) << corpus.dir;
  }
  EXPECT_EQ(crashes_seen, static_cast<int>(std::size(kCrashes)));
  // The assembler's corpus, tests/isa/*.s (read in place) and kProgram: text that assembles to a
  // program that loads and runs.
  const struct {
    const char* dir;
    int min_files;
    int max_files;
  } kTextCorpora[] = {{"tests/isa", 6, 1000}, {"vm/fuzz_corpus/assembler", 1, 1}};
  for (const auto& corpus : kTextCorpora) {
    ASSERT_TRUE(std::filesystem::is_directory(corpus.dir)) << corpus.dir;
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(corpus.dir)) {
      ++n;
      SCOPED_TRACE(e.path().string());
      absl::StatusOr<std::string> bytes = isa::AssembleToBytes(ReadAll(e.path()));
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      const Outcome o = LoadAndRun(*bytes);
      EXPECT_TRUE(o.loaded) << (o.errors.empty() ? "" : o.errors[0].ToString());
      EXPECT_GT(o.runs_ok + o.runs_failed, 0);
    }
    EXPECT_GE(n, corpus.min_files) << corpus.dir;
    EXPECT_LE(n, corpus.max_files) << corpus.dir;
  }
}

}  // namespace
}  // namespace dynvm
