// The profiler (vm/profiler.h) on programs written in dynvm assembly, whose spans, kernel
// calls and memory samples are known exactly from the program text.
#include "vm/profiler.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "allocator/pool_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "isa/assembler.h"
#include "kernels/tensor.h"
#include "tests/vm_fixture.h"
#include "vm/executable.h"
#include "vm/trace_testing.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::LoadAssembly;

// Five iterations of: a 4 KiB storage, y1 = x + x into it, y2 = x1 * x1 (in a call, into a
// fresh 16-byte storage), out = y2 + x; an inner loop of 10 trips that breaks in its second
// iteration; then the iteration's storages are killed. out = 4x^2 + x.
constexpr absl::string_view kProgram = R"(
.kernel "Add" in(f32, f32) out(f32)
.kernel "Mul" in(f32, f32) out(f32)

.function square
  .params 1 0
  .oregs tensor:f32 storage tensor:f32
  .oresults tensor:f32
  alloc_storage %o1, 16, cpu
  alloc_tensor %o2, %o1, 0, f32, [4]
  invoke k1, #0, (%o0, %o0), (%o2)
  ret (%o2), ()
.end

.function main
  .params 1 0
  .sregs i64 i64 bool i64
  .oregs tensor:f32 storage tensor:f32 storage tensor:f32 tensor:f32
  .oresults tensor:f32
  .input x [4]
  .output y [4]
  alloc_storage %o1, 16, cpu
  alloc_tensor %o2, %o1, 0, f32, [4]
  loop %s0, 5
    alloc_storage %o3, 4096, cpu
    alloc_tensor %o4, %o3, 0, f32, [4]
    invoke k0, #0, (%o0, %o0), (%o4)
    call @square, (%o4), (), (%o5), ()
    invoke k0, #1, (%o5, %o0), (%o2)
    loop %s1, 10
      const_i %s3, 1
      eq_i %s2, %s1, %s3
      break_if %s2
    endloop
    kill %o5
    kill %o4
    kill %o3
  endloop
  ret (%o2), ()
.end
)";

std::vector<float> Floats(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

class ProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    exe_ = LoadAssembly(kProgram);
    ASSERT_NE(exe_, nullptr);
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe_);
    ASSERT_TRUE(vm.ok()) << vm.status();
    vm_ = *std::move(vm);
    absl::StatusOr<Tensor> x = Tensor::FromVector<float>(DType::kF32, {4}, {1, 2, 3, 4});
    ASSERT_TRUE(x.ok());
    ASSERT_TRUE(vm_->SetInput("x", *x).ok());
  }
  std::vector<float> Output() {
    absl::StatusOr<Tensor> y = vm_->GetOutput("y");
    EXPECT_TRUE(y.ok()) << y.status();
    return y.ok() ? Floats(*y) : std::vector<float>{};
  }
  int Count(const Profiler& p, Profiler::SpanKind kind) {
    int n = 0;
    for (const Profiler::Span& s : p.spans()) n += s.kind == kind;
    return n;
  }

  std::shared_ptr<const Executable> exe_;
  std::unique_ptr<VirtualMachine> vm_;
};

TEST_F(ProfilerTest, RecordsEverySpanOfTheProgram) {
  Profiler prof;
  RunOptions run;
  run.profiler = &prof;
  ASSERT_TRUE(vm_->Run(run).ok());
  EXPECT_THAT(Output(), ElementsAre(5, 18, 39, 68));  // 4x^2 + x

  using K = Profiler::SpanKind;
  EXPECT_EQ(Count(prof, K::kRun), 1);
  EXPECT_EQ(Count(prof, K::kKernel), 15);  // 5 x (Add, Mul, Add)
  EXPECT_EQ(Count(prof, K::kCall), 5);
  EXPECT_EQ(Count(prof, K::kLoop), 6);        // the outer loop, and the inner one 5 times
  EXPECT_EQ(Count(prof, K::kIteration), 15);  // 5 outer + 5 x 2 inner (break in the 2nd)

  const Profiler::Totals t = prof.ComputeTotals();
  EXPECT_EQ(t.runs, 1);
  EXPECT_EQ(t.kernel_calls, 15);
  ASSERT_EQ(t.kernels.size(), 2u);
  for (const Profiler::KernelTotal& k : t.kernels) {
    if (k.kernel->op == "Add") {
      EXPECT_EQ(k.calls, 10);
    } else {
      EXPECT_EQ(k.kernel->op, "Mul");
      EXPECT_EQ(k.calls, 5);
    }
    EXPECT_EQ(k.kernel->name, exe_->kernel(k.kernel->op == "Add" ? 0 : 1).name());
    EXPECT_TRUE(absl::StartsWith(k.kernel->name, k.kernel->op == "Add" ? "add.f32." : "mul.f32."));
    EXPECT_FALSE(k.kernel->backend.empty());
  }
  ASSERT_EQ(t.loops.size(), 2u);
  EXPECT_EQ(t.loops[0].entries, 1);  // the outer loop is the longest
  EXPECT_EQ(t.loops[0].iterations, 5);
  EXPECT_EQ(t.loops[1].entries, 5);
  EXPECT_EQ(t.loops[1].iterations, 10);
  EXPECT_TRUE(absl::StartsWith(t.loops[0].name, "main@"));
  // Every kernel runs inside the outer loop: its iterations hold all kernel time.
  EXPECT_EQ(t.loops[0].kernel_ns, t.kernel_ns);
  EXPECT_EQ(t.loops[1].kernel_ns, 0);
  EXPECT_LE(t.kernel_ns, t.loops[0].total_ns);
  EXPECT_LE(t.loops[0].total_ns, t.run_ns);

  // Iterations are numbered from 0 within each entry of their loop.
  std::vector<int64_t> outer;
  for (const Profiler::Span& s : prof.spans()) {
    if (s.kind == K::kIteration && prof.names()[s.name] == t.loops[0].name) outer.push_back(s.arg);
    if (s.kind == K::kKernel) {
      EXPECT_EQ(prof.ShapesOf(s), "f32[4] f32[4] -> f32[4]");
    }
  }
  EXPECT_THAT(outer, ElementsAre(0, 1, 2, 3, 4));

  // The median time outside kernels of the outer loop's iterations, from the spans.
  std::vector<int64_t> outside;
  for (const Profiler::Span& s : prof.spans()) {
    if (s.kind == K::kIteration && prof.names()[s.name] == t.loops[0].name)
      outside.push_back(s.dur_ns - s.kernel_ns);
  }
  std::sort(outside.begin(), outside.end());
  ASSERT_EQ(outside.size(), 5u);
  EXPECT_EQ(t.loops[0].median_outside_ns, outside[2]);
  EXPECT_GT(outside[2], 0);
}

TEST_F(ProfilerTest, SamplesPoolBytesWhenTheyChange) {
  const int64_t before = vm_->memory_stats().bytes_in_use;  // the bound input
  Profiler prof;
  RunOptions run;
  run.profiler = &prof;
  ASSERT_TRUE(vm_->Run(run).ok());
  // What a storage of 16 and of 4096 bytes occupies in a pool (its header shares the block).
  auto occupies = [](size_t bytes) -> int64_t {
    auto pool = std::make_shared<PoolAllocator>();
    absl::StatusOr<StorageRef> st = Storage::Allocate(*pool, bytes, pool);
    EXPECT_TRUE(st.ok());
    return pool->stats().bytes_in_use;
  };
  const int64_t small = occupies(16), big = occupies(4096);
  ASSERT_GE(small, 16);
  ASSERT_GE(big, 4096);
  std::vector<int64_t> want = {before, before + small};
  for (int i = 0; i < 5; ++i) {
    const int64_t base = before + small;
    want.insert(want.end(), {base + big, base + big + small, base + big, base});
  }
  std::vector<int64_t> got;
  for (const Profiler::Counter& c : prof.counters()) {
    EXPECT_FALSE(c.device);
    got.push_back(c.bytes);
  }
  EXPECT_EQ(got, want);
}

TEST_F(ProfilerTest, ChromeTraceIsValidAndNested) {
  Profiler prof;
  RunOptions run;
  run.profiler = &prof;
  ASSERT_TRUE(vm_->Run(run).ok());
  absl::StatusOr<testing::Json> json = testing::JsonParser::Parse(prof.ChromeTraceJson());
  ASSERT_TRUE(json.ok()) << json.status();
  absl::StatusOr<testing::TraceSummary> trace = testing::CheckTrace(*json);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->spans.size(), prof.spans().size());
  EXPECT_EQ(trace->counters.size(), prof.counters().size());
  EXPECT_EQ(trace->metadata, 2);
  int adds = 0, muls = 0;
  for (const testing::TraceSpan& s : trace->spans) {
    const testing::TraceSpan* parent = s.parent >= 0 ? &trace->spans[s.parent] : nullptr;
    if (s.cat == "run") {
      EXPECT_EQ(s.name, "run main");
      EXPECT_EQ(parent, nullptr);
    } else {
      ASSERT_NE(parent, nullptr) << s.name;
    }
    if (s.cat == "kernel") {
      adds += s.name == "Add";
      muls += s.name == "Mul";
      // Add runs in main's outer iterations, Mul inside the call.
      EXPECT_EQ(parent->cat, s.name == "Add" ? "iteration" : "call") << s.name;
      ASSERT_NE(s.args, nullptr);
      const testing::Json* shapes = s.args->Get("shapes");
      ASSERT_NE(shapes, nullptr);
      EXPECT_EQ(shapes->str, "f32[4] f32[4] -> f32[4]");
      const testing::Json* kernel = s.args->Get("kernel");
      ASSERT_NE(kernel, nullptr);
      EXPECT_TRUE(absl::StartsWith(kernel->str, s.name == "Add" ? "add.f32." : "mul.f32."))
          << kernel->str;
      const testing::Json* site = s.args->Get("site");
      ASSERT_NE(site, nullptr);
      EXPECT_TRUE(absl::StartsWith(site->str, s.name == "Add" ? "main@" : "square@")) << site->str;
    }
    if (s.cat == "call") {
      EXPECT_EQ(s.name, "call square");
      EXPECT_EQ(parent->cat, "iteration");
    }
    if (s.cat == "iteration") {
      EXPECT_EQ(parent->cat, "loop");
    }
    if (s.cat == "loop") {
      EXPECT_TRUE(parent->cat == "run" || parent->cat == "iteration") << parent->cat;
    }
  }
  EXPECT_EQ(adds, 10);
  EXPECT_EQ(muls, 5);
  for (const auto& [name, bytes] : trace->counters) EXPECT_EQ(name, "pool bytes in use");
}

TEST_F(ProfilerTest, RunsAccumulateAndUnprofiledRunsRecordNothing) {
  Profiler prof;
  RunOptions run;
  run.profiler = &prof;
  ASSERT_TRUE(vm_->Run(run).ok());
  ASSERT_TRUE(vm_->Run(run).ok());
  const size_t spans = prof.spans().size();
  ASSERT_TRUE(vm_->Run().ok());
  EXPECT_THAT(Output(), ElementsAre(5, 18, 39, 68));
  EXPECT_EQ(prof.spans().size(), spans);
  const Profiler::Totals t = prof.ComputeTotals();
  EXPECT_EQ(t.runs, 2);
  EXPECT_EQ(t.kernel_calls, 30);
  const std::string table = prof.SummaryTable();
  EXPECT_THAT(table, HasSubstr("profile: 2 runs"));
  EXPECT_THAT(table, HasSubstr(t.kernels[0].kernel->name));
  EXPECT_THAT(table, HasSubstr("outside kernels"));
  EXPECT_THAT(table, HasSubstr(t.loops[0].name));
  prof.Clear();
  EXPECT_TRUE(prof.spans().empty());
  EXPECT_EQ(prof.ComputeTotals().runs, 0);
}

TEST_F(ProfilerTest, AFailedRunClosesItsSpans) {
  // Two back edges per outer iteration (the inner loop's first, the outer loop's): a budget of
  // 4 runs out at the inner back edge of the third outer iteration.
  VmOptions options;
  options.max_loop_iterations = 4;
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe_, options);
  ASSERT_TRUE(vm.ok());
  absl::StatusOr<Tensor> x = Tensor::FromVector<float>(DType::kF32, {4}, {1, 2, 3, 4});
  ASSERT_TRUE((*vm)->SetInput("x", *x).ok());
  Profiler prof;
  RunOptions run;
  run.profiler = &prof;
  absl::Status s = (*vm)->Run(run);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  absl::StatusOr<testing::Json> json = testing::JsonParser::Parse(prof.ChromeTraceJson());
  ASSERT_TRUE(json.ok()) << json.status();
  absl::StatusOr<testing::TraceSummary> trace = testing::CheckTrace(*json);
  ASSERT_TRUE(trace.ok()) << trace.status();
  int runs = 0, loops = 0;
  for (const testing::TraceSpan& sp : trace->spans) {
    runs += sp.cat == "run";
    loops += sp.cat == "loop";
  }
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(loops, 4);  // outer, and inner in outer iterations 0, 1, 2
  // The VM (and the profiler) work on after the failure.
  ASSERT_TRUE(vm_->Run(run).ok());
  EXPECT_EQ(prof.ComputeTotals().runs, 2);
}

TEST(ProfilerJsonTest, NamesFromTheFileAreEscaped) {
  // A source node name with a quote, a backslash, a control byte, a byte that is not UTF-8 and
  // a valid two-byte character.
  std::shared_ptr<const Executable> exe = LoadAssembly(R"(
.kernel "Add" in(f32, f32) out(f32)
.function main
  .params 1 0
  .oregs tensor:f32 storage tensor:f32
  .oresults tensor:f32
  .input x [4]
  .output y [4]
  alloc_storage %o1, 16, cpu
  alloc_tensor %o2, %o1, 0, f32, [4]
  .loc "a\"q\\ \x01 \xff \xc3\xa9"
  invoke k0, #0, (%o0, %o0), (%o2)
  ret (%o2), ()
.end
)");
  ASSERT_NE(exe, nullptr);
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe);
  ASSERT_TRUE(vm.ok());
  ASSERT_TRUE(
      (*vm)->SetInput("x", *Tensor::FromVector<float>(DType::kF32, {4}, {1, 2, 3, 4})).ok());
  Profiler prof;
  RunOptions run;
  run.profiler = &prof;
  ASSERT_TRUE((*vm)->Run(run).ok());
  const std::string json_text = prof.ChromeTraceJson();
  EXPECT_THAT(json_text, HasSubstr("a\\\"q\\\\ \\u0001 \\ufffd \xc3\xa9\""));
  absl::StatusOr<testing::Json> json = testing::JsonParser::Parse(json_text);
  ASSERT_TRUE(json.ok()) << json.status();
  absl::StatusOr<testing::TraceSummary> trace = testing::CheckTrace(*json);
  ASSERT_TRUE(trace.ok()) << trace.status();
  bool found = false;
  for (const testing::TraceSpan& s : trace->spans) {
    if (s.cat != "kernel") continue;
    found = true;
    // The parser turns \u0001 into the byte and U+FFFD into '?'.
    EXPECT_TRUE(absl::EndsWith(s.args->Get("site")->str, "a\"q\\ \x01 ? \xc3\xa9"))
        << s.args->Get("site")->str;
  }
  EXPECT_TRUE(found);
}

TEST(TraceTestingTest, ParserAndCheckerRefuseBadInput) {
  absl::StatusOr<testing::Json> bad = testing::JsonParser::Parse("{\"a\":[1,2,]}");
  EXPECT_FALSE(bad.ok());
  absl::StatusOr<testing::Json> good =
      testing::JsonParser::Parse("{\"a\":[1,-2.5e3,\"x\\\"y\\u0041\"],\"b\":null}");
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_NE(good->Get("a"), nullptr);
  EXPECT_EQ(good->Get("a")->array[1].number, -2500);
  EXPECT_EQ(good->Get("a")->array[2].str, "x\"yA");
  // Improper nesting is refused.
  absl::StatusOr<testing::Json> overlap = testing::JsonParser::Parse(
      R"({"traceEvents":[{"ph":"X","pid":1,"tid":1,"name":"a","ts":0,"dur":10},)"
      R"({"ph":"X","pid":1,"tid":1,"name":"b","ts":5,"dur":10}]})");
  ASSERT_TRUE(overlap.ok());
  EXPECT_FALSE(testing::CheckTrace(*overlap).ok());
}

}  // namespace
}  // namespace dynvm
