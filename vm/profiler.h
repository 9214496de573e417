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
//     (the interpreter's own overhead), summed over its iterations.
//
// Cost: a run without a profiler executes a separately compiled interpreter loop that contains
// no profiling code at all; the only cost is one branch per Run. With a profiler, each invoke
// reads the clock twice and appends a span, so a run of many tiny kernels runs slower (the
// summary estimates the profiler's own share).
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

  // Spans in the order they ended.
  const std::vector<Span>& spans() const { return spans_; }
  const std::vector<Counter>& counters() const { return counters_; }
  const std::vector<KernelInfo>& kernels() const { return kernels_; }
  const std::vector<std::string>& names() const { return names_; }
  // "f32[1,256] f32[256,1024] -> f32[1,1024]" for a kernel span.
  std::string ShapesOf(const Span& span) const;
  // "function@pc node" of a kernel span's invoke (node: the source node, when recorded).
  absl::string_view SiteOf(const Span& span) const;

  // Totals per kernel (by full kernel name) and per loop, largest total first.
  struct KernelTotal {
    const KernelInfo* kernel;
    int64_t calls = 0;
    int64_t total_ns = 0;
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
  };
  Totals ComputeTotals() const;

  // The trace in Chrome's trace-event format (a JSON object with a "traceEvents" array):
  // complete ("X") events for spans, counter ("C") events for memory, metadata naming the
  // process and thread.
  std::string ChromeTraceJson() const;
  absl::Status WriteChromeTrace(const std::string& path) const;
  // A text table: per kernel calls, total and mean time and share of run time; the time outside
  // kernels; per loop the interpreter's own time per iteration.
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

  std::chrono::steady_clock::time_point epoch_;
  double clock_read_ns_ = 0;
  mutable int64_t clock_reads_ = 0;

  std::vector<Span> spans_;
  std::vector<Counter> counters_;
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
