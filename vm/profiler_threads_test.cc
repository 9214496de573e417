// The profiler's per-worker ranges (vm/profiler.h, docs/profiling.md): a model whose Add splits
// across the VM's thread pool, at several sizes and thread counts, with a private and the
// shared pool, and two VMs sharing one pool with a profiler each. The expected split comes from
// ThreadPool::Range and the kernel's documented grain (docs/threads.md), not from the profiler.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/tensor.h"
#include "kernels/thread_pool.h"
#include "tests/vm_fixture.h"
#include "vm/executable.h"
#include "vm/profiler.h"
#include "vm/trace_testing.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// y = x + x over N elements.
constexpr absl::string_view kProgram = R"(
.kernel "Add" in(f32, f32) out(f32)

.function main
  .params 1 0
  .oregs tensor:f32 storage tensor:f32
  .oresults tensor:f32
  .input x [N]
  .output y [N]
  alloc_storage %o1, BYTES, cpu
  alloc_tensor %o2, %o1, 0, f32, [N]
  invoke k0, #0, (%o0, %o0), (%o2)
  ret (%o2), ()
.end
)";

// The same-shape f32 Add of the oneDNN backend splits from 32K elements into ranges of
// 16K-element multiples (kMinParallelElements, docs/threads.md).
constexpr int64_t kMinSplit = int64_t{1} << 15;
constexpr int64_t kGrain = kMinSplit / 2;

class ProfilerThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef DYNVM_WITH_DNNL
    GTEST_SKIP() << "the pool-split Add is the oneDNN backend's";
#endif
    cap_ = MaxThreads();
    ASSERT_TRUE(SetMaxThreads(std::max(cap_, 3)).ok());  // 2- and 3-thread VMs on any machine
  }
  void TearDown() override {
    if (cap_ > 0) {
      ASSERT_TRUE(SetMaxThreads(cap_).ok());
    }
  }

  static std::shared_ptr<const Executable> Load(int64_t n) {
    return testing::LoadAssembly(
        absl::StrReplaceAll(kProgram, {{"BYTES", absl::StrCat(4 * n)}, {"N", absl::StrCat(n)}}));
  }
  static std::unique_ptr<VirtualMachine> Vm(std::shared_ptr<const Executable> exe, int threads,
                                            bool shared, int64_t n) {
    VmOptions o;
    o.num_threads = threads;
    o.shared_thread_pool = shared;
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe, o);
    EXPECT_TRUE(vm.ok()) << vm.status();
    if (!vm.ok()) return nullptr;
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 1000) - 500.0f;
    absl::StatusOr<Tensor> t = Tensor::FromVector<float>(DType::kF32, {n}, x);
    EXPECT_TRUE(t.ok());
    EXPECT_TRUE(t.ok() && (*vm)->SetInput("x", *t).ok());
    return *std::move(vm);
  }
  static void ExpectOutput(VirtualMachine& vm, int64_t n) {
    absl::StatusOr<Tensor> y = vm.GetOutput("y");
    ASSERT_TRUE(y.ok()) << y.status();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(y->data<float>()[i], 2.0f * (static_cast<float>(i % 1000) - 500.0f)) << i;
    }
  }

  int cap_ = 0;
};

// Checks one logged job against the static split and the kernel span around it.
void ExpectJob(const Profiler& prof, const Profiler::ParallelJob& job, int64_t n, int threads) {
  const Profiler::Span& kernel = prof.spans()[job.span];
  ASSERT_EQ(kernel.kind, Profiler::SpanKind::kKernel);
  EXPECT_EQ(prof.kernels()[kernel.name].op, "Add");
  EXPECT_EQ(job.n, n);
  EXPECT_GE(job.start_ns, kernel.start_ns);
  EXPECT_LE(job.start_ns + job.dur_ns, kernel.start_ns + kernel.dur_ns);
  EXPECT_GE(job.join_wait_ns, 0);
  EXPECT_LE(job.join_wait_ns, job.dur_ns);
  if (job.pool_busy) {  // only when another VM held the shared pool
    ASSERT_EQ(job.tasks, 1);
    const Profiler::Range& r = prof.ranges()[job.first_range];
    EXPECT_EQ(r.thread, 0);
    EXPECT_EQ(r.begin, 0);
    EXPECT_EQ(r.end, n);
    return;
  }
  const int64_t chunks = (n + kGrain - 1) / kGrain;
  const int tasks = static_cast<int>(std::min<int64_t>(chunks, threads));
  ASSERT_EQ(job.tasks, tasks);
  int64_t covered = 0;
  for (int i = 0; i < tasks; ++i) {
    const Profiler::Range& r = prof.ranges()[job.first_range + i];
    int64_t b, e;
    ThreadPool::Range(n, kGrain, tasks, i, &b, &e);
    EXPECT_EQ(r.index, i);
    EXPECT_EQ(r.begin, b);
    EXPECT_EQ(r.end, e);
    EXPECT_EQ(r.begin, covered);  // contiguous, in order, from 0
    covered = r.end;
    // Worker i runs range i, or the caller does (range 0 always; range i when it was late).
    EXPECT_TRUE(r.thread == 0 || r.thread == i) << "range " << i << " thread " << r.thread;
    EXPECT_EQ(i == 0, i == 0 && r.thread == 0);
    EXPECT_GE(r.dur_ns, 0);
    EXPECT_GE(r.start_ns, job.start_ns);
    EXPECT_LE(r.start_ns + r.dur_ns, job.start_ns + job.dur_ns);
  }
  EXPECT_EQ(covered, n);
}

TEST_F(ProfilerThreadsTest, RangesCoverTheWorkInsideTheKernelSpan) {
  for (const int64_t n : {kMinSplit + 16, int64_t{1} << 18, (int64_t{1} << 19) + 5}) {
    std::shared_ptr<const Executable> exe = Load(n);
    ASSERT_NE(exe, nullptr);
    for (const int threads : {1, 2, 3}) {
      for (const bool shared : {true, false}) {
        SCOPED_TRACE(absl::StrCat("n ", n, ", threads ", threads, shared ? ", shared" : ""));
        std::unique_ptr<VirtualMachine> vm = Vm(exe, threads, shared, n);
        ASSERT_NE(vm, nullptr);
        Profiler prof;
        RunOptions run;
        run.profiler = &prof;
        constexpr int kRuns = 3;
        for (int r = 0; r < kRuns; ++r) ASSERT_TRUE(vm->Run(run).ok());
        ExpectOutput(*vm, n);
        if (threads == 1) {  // nothing splits: no job, no worker track, no parallel table
          EXPECT_TRUE(prof.parallel_jobs().empty());
          EXPECT_TRUE(prof.ranges().empty());
          EXPECT_THAT(prof.ChromeTraceJson(), Not(HasSubstr("worker")));
          EXPECT_THAT(prof.SummaryTable(), Not(HasSubstr("parallel")));
          continue;
        }
        ASSERT_EQ(prof.parallel_jobs().size(), kRuns);
        for (const Profiler::ParallelJob& job : prof.parallel_jobs()) {
          ASSERT_NO_FATAL_FAILURE(ExpectJob(prof, job, n, threads));
          EXPECT_FALSE(job.pool_busy);  // no other VM uses the pool here
        }
      }
    }
  }
}

// The trace: the job on the VM's track inside the kernel's span, each range on the track of
// its thread (the VM's, or "worker i" named by metadata), within the job in time.
TEST_F(ProfilerThreadsTest, TraceHasPerWorkerTracksInsideTheKernelSpan) {
  constexpr int64_t kN = 2 * kMinSplit;
  std::shared_ptr<const Executable> exe = Load(kN);
  ASSERT_NE(exe, nullptr);
  std::unique_ptr<VirtualMachine> vm = Vm(exe, 2, false, kN);
  ASSERT_NE(vm, nullptr);
  Profiler prof;
  RunOptions run;
  run.profiler = &prof;
  constexpr int kRuns = 4;
  for (int r = 0; r < kRuns; ++r) ASSERT_TRUE(vm->Run(run).ok());
  const std::string text = prof.ChromeTraceJson();
  absl::StatusOr<testing::Json> json = testing::JsonParser::Parse(text);
  ASSERT_TRUE(json.ok()) << json.status();
  absl::StatusOr<testing::TraceSummary> trace = testing::CheckTrace(*json);
  ASSERT_TRUE(trace.ok()) << trace.status();
  bool worker_ran = false;
  for (const Profiler::Range& r : prof.ranges()) worker_ran |= r.thread == 1;
  // process_name, thread_name "vm", and thread_name + thread_sort_index of worker 1 if it ran.
  EXPECT_EQ(trace->metadata, worker_ran ? 4 : 2);
  if (worker_ran) {
    EXPECT_THAT(text, HasSubstr("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":2,"
                                "\"args\":{\"name\":\"worker 1\"}}"));
  }
  int jobs = 0, ranges = 0, on_workers = 0;
  std::vector<const testing::TraceSpan*> kernels, parallel;
  for (const testing::TraceSpan& s : trace->spans) {
    if (s.cat == "kernel") kernels.push_back(&s);
    if (s.cat == "parallel") parallel.push_back(&s);
  }
  ASSERT_EQ(kernels.size(), kRuns);
  ASSERT_EQ(parallel.size(), kRuns);
  for (const testing::TraceSpan& s : trace->spans) {
    if (s.cat == "parallel") {
      ++jobs;
      EXPECT_EQ(s.tid, 1);
      ASSERT_GE(s.parent, 0);
      EXPECT_EQ(trace->spans[s.parent].cat, "kernel");  // nested in the kernel's span
      EXPECT_EQ(s.name, "Add parallel");
      ASSERT_NE(s.args, nullptr);
      EXPECT_EQ(s.args->Get("n")->number, kN);
      EXPECT_EQ(s.args->Get("ranges")->number, 2);
    }
    if (s.cat != "range") continue;
    ++ranges;
    ASSERT_NE(s.args, nullptr);
    const int index = static_cast<int>(s.args->Get("range")->number);
    const std::string thread = s.args->Get("thread")->str;
    EXPECT_EQ(s.name, absl::StrCat("Add range ", index));
    EXPECT_EQ(s.args->Get("begin")->number, index * kN / 2);
    EXPECT_EQ(s.args->Get("end")->number, (index + 1) * kN / 2);
    if (thread == "caller") {
      EXPECT_EQ(s.tid, 1);
      ASSERT_GE(s.parent, 0);  // inside the job on the VM's track
      EXPECT_EQ(trace->spans[s.parent].cat, "parallel");
      EXPECT_EQ(s.args->Get("stolen")->b, index != 0);
      continue;
    }
    ++on_workers;
    EXPECT_EQ(thread, "worker 1");
    EXPECT_EQ(index, 1);
    EXPECT_EQ(s.tid, 2);
    EXPECT_EQ(s.parent, -1);  // alone on its track
    // In time, inside exactly one job (and its kernel span) of the VM's track.
    int inside = 0;
    for (const testing::TraceSpan* p : parallel) {
      if (s.ts >= p->ts && s.ts + s.dur <= p->ts + p->dur + 1e-3) ++inside;
    }
    EXPECT_EQ(inside, 1) << s.ts;
  }
  EXPECT_EQ(jobs, kRuns);
  EXPECT_EQ(ranges, 2 * kRuns);
  EXPECT_EQ(on_workers > 0, worker_ran);
}

// The summary's columns against the recorded ranges.
TEST_F(ProfilerThreadsTest, SummaryColumnsAreConsistent) {
  constexpr int64_t kN = 3 * kGrain + 100;  // 4 chunks: at 3 threads 2 + 1 + 1
  std::shared_ptr<const Executable> exe = Load(kN);
  ASSERT_NE(exe, nullptr);
  std::unique_ptr<VirtualMachine> vm = Vm(exe, 3, false, kN);
  ASSERT_NE(vm, nullptr);
  Profiler prof;
  RunOptions run;
  run.profiler = &prof;
  constexpr int kRuns = 5;
  for (int r = 0; r < kRuns; ++r) ASSERT_TRUE(vm->Run(run).ok());
  const Profiler::Totals t = prof.ComputeTotals();
  ASSERT_EQ(t.kernels.size(), 1);
  const Profiler::KernelTotal& k = t.kernels[0];
  EXPECT_EQ(k.calls, kRuns);
  EXPECT_EQ(k.jobs, kRuns);
  EXPECT_EQ(k.busy_pool_jobs, 0);
  EXPECT_EQ(k.max_tasks, 3);
  EXPECT_EQ(k.ranges, 3 * kRuns);
  int64_t range_ns = 0, stolen = 0, job_ns = 0, wait_ns = 0;
  for (const Profiler::Range& r : prof.ranges()) {
    range_ns += r.dur_ns;
    stolen += r.thread == 0 && r.index != 0;
  }
  for (const Profiler::ParallelJob& j : prof.parallel_jobs()) {
    job_ns += j.dur_ns;
    wait_ns += j.join_wait_ns;
  }
  EXPECT_EQ(k.range_ns, range_ns);
  EXPECT_EQ(k.stolen, stolen);
  EXPECT_EQ(k.job_ns, job_ns);
  EXPECT_EQ(k.join_wait_ns, wait_ns);
  EXPECT_NEAR(k.mean_thread_ns, range_ns / 3.0, 1.0);
  EXPECT_GE(k.max_thread_ns, k.mean_thread_ns - 1.0);
  EXPECT_GE(k.imbalance(), 1.0 - 1e-9);
  EXPECT_LE(k.imbalance(), 3.0 + 1e-9);  // at most one thread did everything
  // Per thread: the busy times add up to the ranges' time, ranges to the ranges.
  int64_t busy = 0, n_ranges = 0, thread_stolen = 0;
  for (const Profiler::ThreadTotal& th : t.threads) {
    EXPECT_LE(th.thread, 2);
    busy += th.busy_ns;
    n_ranges += th.ranges;
    thread_stolen += th.stolen;
    if (th.thread > 0) {
      EXPECT_EQ(th.stolen, 0);
    }
  }
  EXPECT_EQ(busy, range_ns);
  EXPECT_EQ(n_ranges, 3 * kRuns);
  EXPECT_EQ(thread_stolen, stolen);
  const std::string table = prof.SummaryTable();
  EXPECT_THAT(table, HasSubstr("parallel kernel"));
  for (const char* column :
       {"jobs", "busy_pool", "threads", "job_us", "busy_us/thr", "imbalance", "join_wait_us",
        "stolen", "parallel thread", "busy_ms", "caller (the VM's thread)"}) {
    EXPECT_THAT(table, HasSubstr(column));
  }
  // The kernel's line: name, 5 jobs, 0 busy, 3 threads.
  const std::string line_start = absl::StrCat(k.kernel->name, " ");
  size_t at = table.find("parallel kernel");
  ASSERT_NE(at, std::string::npos);
  at = table.find(line_start, at);
  ASSERT_NE(at, std::string::npos) << table;
  const std::string line = table.substr(at, table.find('\n', at) - at);
  std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
  ASSERT_EQ(fields.size(), 9) << line;
  EXPECT_EQ(fields[1], "5");
  EXPECT_EQ(fields[2], "0");
  EXPECT_EQ(fields[3], "3");
  EXPECT_EQ(fields[8], absl::StrCat(stolen));
}

// Two VMs sharing the process's pool, each with its own profiler, run at once: each profiler
// logs only its VM's jobs, each job either split on the pool or ran whole on its caller while
// the other VM held the pool, and every range covers its share (race-free under TSan).
TEST_F(ProfilerThreadsTest, VmsSharingThePoolLogTheirOwnJobs) {
  constexpr int64_t kN = 2 * kMinSplit;
  std::shared_ptr<const Executable> exe = Load(kN);
  ASSERT_NE(exe, nullptr);
  constexpr int kRuns = 40;
  Profiler profs[2];
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<VirtualMachine> vm = Vm(exe, 2, true, kN);
      ASSERT_NE(vm, nullptr);
      RunOptions run;
      run.profiler = &profs[t];
      for (int r = 0; r < kRuns; ++r) ASSERT_TRUE(vm->Run(run).ok());
      ExpectOutput(*vm, kN);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Profiler& prof : profs) {
    ASSERT_EQ(prof.parallel_jobs().size(), kRuns);
    int busy = 0;
    for (const Profiler::ParallelJob& job : prof.parallel_jobs()) {
      ASSERT_NO_FATAL_FAILURE(ExpectJob(prof, job, kN, 2));
      busy += job.pool_busy;
    }
    const Profiler::Totals t = prof.ComputeTotals();
    ASSERT_EQ(t.kernels.size(), 1);
    EXPECT_EQ(t.kernels[0].jobs + t.kernels[0].busy_pool_jobs, kRuns);
    EXPECT_EQ(t.kernels[0].busy_pool_jobs, busy);
    if (busy > 0) {
      EXPECT_THAT(prof.SummaryTable(), HasSubstr("parallel kernel"));
    }
  }
}

}  // namespace
}  // namespace dynvm
