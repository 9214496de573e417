// Public API. A Profiler records what runs of a VirtualMachine spend their time on.
//
//   dynvm::Profiler prof;
//   dynvm::RunOptions run;
//   run.profiler = &prof;
//   absl::Status s = vm->Run(run);           // any number of runs; they accumulate
//   s = prof.WriteChromeTrace("trace.json");  // open in https://ui.perfetto.dev or
//   chrome://tracing std::fputs(prof.SummaryTable().c_str(), stdout);
//
// What it records (docs/profiling.md):
//   - one span per run, per `call`, per loop and per loop iteration, and per kernel invoke
//     (named by the op, with the kernel's full name, backend, variant and the input and output
//     dtypes and shapes as arguments);
//   - counter samples of the VM's pool bytes in use (and the device pool's, once used), taken
//     after each instruction that can change them, when they changed;
//   - per loop (a `loop` instruction of a function), the time inside kernels and outside them
//     (the interpreter's own overhead), summed over its iterations;
//   - per parallel job of a kernel (ctx.ParallelFor that split across the VM's thread pool, or
//     found a shared pool busy), its fork and join and each range's thread (the caller or
//     worker i), elements and start and end, so per-worker time and imbalance are visible.
//
// Cost: a run without a profiler executes a separately compiled interpreter loop that contains
// no profiling code at all; the only cost is one branch per Run (and, in ParallelFor, one
// branch per job and per range: no clock read, no atomic). With a profiler, each invoke reads
// the clock twice and appends a span, and each parallel range reads it twice on its thread,
// so a run of many tiny kernels runs slower (the summary estimates the profiler's own share).
//
// Thread safety: thread-compatible. A profiler receives events from one run at a time; give each
// VM that runs concurrently its own profiler.
#ifndef DYNVM_VM_PROFILER_H_
#define DYNVM_VM_PROFILER_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/thread_pool.h"

namespace dynvm {

class Executable;
class Tensor;

class Profiler {
 public:
  Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // ---- Results ----

  enum class SpanKind : uint8_t { kRun, kCall, kLoop, kIteration, kKernel };
  struct Span {
    SpanKind kind;
    int32_t name;      // kernel: index into kernels(); otherwise index into names()
    int64_t start_ns;  // since the profiler was made (or last cleared)
    int64_t dur_ns;
    int64_t arg;        // iteration: its index; loop: iterations run; kernel: offset in shape_data
    int64_t kernel_ns;  // run, call, loop, iteration: time inside kernels within the span
  };
  struct KernelInfo {
    std::string op;       // "MatMul"
    std::string name;     // "matmul.f32.dnnl.runtime_m" (Kernel::name)
    std::string backend;  // "dnnl"
    std::string variant;  // "runtime_m", or ""
  };
  struct Counter {
    int64_t ts_ns;
    int64_t bytes;
    bool device;  // the CUDA device pool rather than the host pool
  };
  // A ParallelFor job of a kernel invoke: logged when it split into ranges on the pool, or
  // found a shared pool busy (then one range, [0, n), ran on the calling thread).
  struct ParallelJob {
    int32_t span;   // the kernel span (index into spans())
    int32_t tasks;  // its ranges: ranges()[first_range, first_range + tasks)
    int32_t first_range;
    bool pool_busy;
    int64_t n;             // the ranges cover [0, n)
    int64_t start_ns;      // the fork
    int64_t dur_ns;        // fork to join
    int64_t join_wait_ns;  // the caller's wait at the join, after the ranges it ran
  };
  struct Range {
    int32_t thread;  // who ran it: 0 the thread that ran the VM, i > 0 the pool's worker i
    int32_t index;   // the range's index in its job; worker i's own range is range i, so a
                     // range i > 0 with thread 0 is one the caller took from a late worker
    int64_t begin, end;
    int64_t start_ns, dur_ns;
  };

  // Spans in the order they ended.
  const std::vector<Span>& spans() const { return spans_; }
  const std::vector<Counter>& counters() const { return counters_; }
  const std::vector<KernelInfo>& kernels() const { return kernels_; }
  const std::vector<std::string>& names() const { return names_; }
  // Parallel jobs in the order of their kernel spans, and their ranges.
  const std::vector<ParallelJob>& parallel_jobs() const { return parallel_jobs_; }
  const std::vector<Range>& ranges() const { return ranges_; }
  // "f32[1,256] f32[256,1024] -> f32[1,1024]" for a kernel span.
  std::string ShapesOf(const Span& span) const;
  // "function@pc node" of a kernel span's invoke (node: the source node, when recorded).
  absl::string_view SiteOf(const Span& span) const;

  // Totals per kernel (by full kernel name) and per loop, largest total first.
  struct KernelTotal {
    const KernelInfo* kernel;
    int64_t calls = 0;
    int64_t total_ns = 0;
    // Its parallel jobs: those that split (jobs) and those that found the pool busy.
    int64_t jobs = 0;
    int64_t busy_pool_jobs = 0;
    int32_t max_tasks = 0;  // the most ranges of one job
    int64_t job_ns = 0;     // fork to join, summed over the jobs that split
    int64_t range_ns = 0;   // the ranges' times, summed
    int64_t ranges = 0;
    int64_t stolen = 0;  // ranges the caller ran because their worker had not started
    int64_t join_wait_ns = 0;
    // Per job, a thread's busy time is the sum of the ranges it ran; summed over the jobs:
    double mean_thread_ns = 0;  // the mean over the job's threads (range time / tasks)
    int64_t max_thread_ns = 0;  // the busiest thread's
    // max_thread_ns / mean_thread_ns: 1 when every thread of every job was busy as long.
    double imbalance() const { return mean_thread_ns > 0 ? max_thread_ns / mean_thread_ns : 0; }
  };
  // Per thread over every parallel job (thread 0: the VM's thread, i > 0: worker i).
  struct ThreadTotal {
    int32_t thread;
    int64_t ranges = 0;
    int64_t stolen = 0;  // thread 0: ranges it ran for a late worker
    int64_t busy_ns = 0;
  };
  struct LoopTotal {
    std::string name;  // "function@pc"
    int64_t entries = 0;
    int64_t iterations = 0;
    int64_t total_ns = 0;   // inside iterations
    int64_t kernel_ns = 0;  // inside kernels within iterations
    // The median over iterations of the time outside kernels (robust to an iteration the OS
    // preempted).
    int64_t median_outside_ns = 0;
  };
  struct Totals {
    int64_t runs = 0;
    int64_t run_ns = 0;
    int64_t kernel_ns = 0;
    int64_t kernel_calls = 0;
    std::vector<KernelTotal> kernels;
    std::vector<LoopTotal> loops;
    std::vector<ThreadTotal> threads;  // by thread, when any parallel job ran
  };
  Totals ComputeTotals() const;

  // The trace in Chrome's trace-event format (a JSON object with a "traceEvents" array):
  // complete ("X") events for spans, counter ("C") events for memory, metadata naming the
  // process and thread.
  std::string ChromeTraceJson() const;
  absl::Status WriteChromeTrace(const std::string& path) const;
  // A text table: per kernel calls, total and mean time and share of run time; the time outside
  // kernels; per loop the interpreter's own time per iteration; per kernel that ran parallel
  // jobs, their threads' busy time and imbalance, and per thread its busy time.
  std::string SummaryTable() const;
  // Nanoseconds one clock read costs here (measured when the profiler is made).
  double clock_read_ns() const { return clock_read_ns_; }
  // Forgets everything recorded.
  void Clear();

  // ---- Recording: called by the VirtualMachine while a run is in progress ----

  int64_t Now() const {
    ++clock_reads_;
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                epoch_)
        .count();
  }
  // A run of `function` of `exe` starts; maps the executable's kernels and functions to names.
  void BeginRun(const Executable& exe, int function);
  void EndRun();
  void BeginCall(int function) { open_.push_back({function_names_[function], Now(), kernel_ns_}); }
  void EndCall() { Close(SpanKind::kCall, 0); }
  // A loop at `pc` of `function` starts its first iteration.
  void BeginLoop(int function, uint32_t pc);
  // At the back edge: ends the current iteration and, if `again`, starts the next one; else
  // ends the loop.
  void EndIteration(bool again);
  // A break: ends the current iteration and the loop.
  void BreakLoop() { EndIteration(false); }
  // How many loops are open; a frame that returns or fails closes those it opened.
  size_t open_loops() const { return loops_.size(); }
  void CloseLoopsTo(size_t n) {
    while (loops_.size() > n) EndIteration(false);
  }
  // An invoke of kernel `kernel` (index in the run's executable) at invoke site `site` (at
  // `pc`) of `function` ran from start to end.
  void Kernel(int kernel, int function, uint32_t site, uint32_t pc, int64_t start, int64_t end,
              const Tensor* const* inputs, uint32_t n_in, Tensor* const* outputs, uint32_t n_out);
  // Where the run's kernel context logs ParallelFor ranges (KernelContext::set_parallel_log);
  // Kernel() takes the jobs logged during its invoke.
  ParallelLog* parallel_log() { return &parallel_log_; }
  // Pool bytes in use now; recorded when changed.
  void Memory(int64_t bytes, bool device) {
    int64_t& last = device ? last_device_bytes_ : last_bytes_;
    if (bytes == last) return;
    last = bytes;
    counters_.push_back({Now(), bytes, device});
  }

 private:
  struct Open {
    int32_t name;
    int64_t start_ns;
    int64_t kernel_ns_at_start;
  };
  struct OpenLoop {
    int32_t name;
    int32_t loop_index;  // into loop_totals_
    int64_t start_ns;
    int64_t kernel_ns_at_start;
    int64_t iteration;
    int64_t iteration_start_ns;
    int64_t iteration_kernel_ns_at_start;
  };
  int32_t Intern(absl::string_view name);
  void Close(SpanKind kind, int64_t arg);
  // Moves the jobs of parallel_log_ that started within [start, ...) to the span `span`.
  void TakeParallelJobs(int32_t span, int64_t start);
  void AppendParallelEvents(const Span& s, int32_t span, std::string& out) const;
  void AppendParallelSummary(const Totals& t, std::string& out) const;
  int64_t epoch_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(epoch_.time_since_epoch()).count();
  }

  std::chrono::steady_clock::time_point epoch_;
  double clock_read_ns_ = 0;
  mutable int64_t clock_reads_ = 0;

  std::vector<Span> spans_;
  std::vector<Counter> counters_;
  std::vector<ParallelJob> parallel_jobs_;
  std::vector<Range> ranges_;
  ParallelLog parallel_log_;
  // Per kernel span: site name (names_ index), n_in, n_out, then per tensor: dtype, rank, dims
  // (rank -1: absent).
  std::vector<int64_t> shape_data_;
  std::vector<KernelInfo> kernels_;
  absl::flat_hash_map<std::string, int32_t> kernel_ids_;  // by op + '\0' + name
  std::vector<std::string> names_;
  absl::flat_hash_map<std::string, int32_t> name_ids_;
  struct LoopAccum {
    int64_t entries = 0, iterations = 0, total_ns = 0, kernel_ns = 0;
  };
  std::vector<LoopAccum> loop_totals_;
  std::vector<int32_t> loop_total_names_;                 // loop_totals_ index -> names_ index
  absl::flat_hash_map<int32_t, int32_t> loop_total_ids_;  // names_ index -> loop_totals_ index

  // Per run.
  const Executable* exe_ = nullptr;
  std::vector<int32_t> run_kernels_;     // kernel index -> kernels_ index
  std::vector<int32_t> function_names_;  // function index -> names_ index ("call NAME")
  std::vector<std::string> function_plain_names_;
  absl::flat_hash_map<uint64_t, int32_t> loop_names_;  // (function << 32 | pc) -> names_ index
  std::vector<std::vector<int32_t>> site_names_;       // function, site -> names_ index or -1
  std::vector<Open> open_;
  std::vector<OpenLoop> loops_;
  int64_t kernel_ns_ = 0;  // total time inside kernels so far
  int64_t last_bytes_ = -1;
  int64_t last_device_bytes_ = -1;
  int64_t runs_ = 0;
  int64_t run_ns_ = 0;
};

}  // namespace dynvm

#endif  // DYNVM_VM_PROFILER_H_
