// Intra-op threads (docs/threads.md): a persistent pool that splits one kernel's loop across
// the calling thread and its workers, and the process-wide cap on a VM's thread count.
//
// A kernel reaches the pool through its context: ctx.ParallelFor(n, grain, fn) runs
// fn(begin, end) over disjoint ranges covering [0, n) and returns when every range is done.
// With one thread (the default), or when the pool is busy with another VM's kernel, fn(0, n)
// runs on the calling thread. The split is static: the same n, grain and thread count give the
// same ranges every call, so a worker reads the same rows of a weight from step to step (they
// stay in its core's L2).
//
// A range whose worker has not started by the time the caller finishes its own range runs on
// the caller (work is never left waiting for a thread the OS has not scheduled: a busy machine).
// Workers spin briefly after each job (the next kernel of a decode step usually follows within
// microseconds), then park on a condition variable; a fork/join of 2 threads costs well under a
// microsecond while they spin (kernels/thread_pool_benchmark.cc).
#ifndef DYNVM_KERNELS_THREAD_POOL_H_
#define DYNVM_KERNELS_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dynvm {

// The most threads one VM (one ThreadPool) may use. Defaults to the CPUs this process may run
// on (sched_getaffinity), or the DYNVM_MAX_THREADS environment variable when it holds a
// positive integer (read once, at the first call).
int MaxThreads();
// Sets the cap; InvalidArgument unless 1 <= n <= 4096. Pools already made keep their threads.
absl::Status SetMaxThreads(int n);
// OK when 1 <= n <= MaxThreads(); else InvalidArgument naming `what` (e.g. "num_threads").
absl::Status ValidateThreadCount(int64_t n, absl::string_view what);

// Worker threads alive in this process (every pool's), for tests and tools.
int LiveWorkerThreads();

// Per-range timing of ParallelFor jobs, filled only when the caller passes one (the profiler,
// vm/profiler.h, docs/profiling.md). Times are steady_clock::now().time_since_epoch() in ns.
struct ParallelLog {
  struct Call {
    int64_t n = 0;             // the loop's extent: ranges cover [0, n)
    int32_t tasks = 0;         // ranges in the job
    int32_t first_range = 0;   // its ranges: ranges[first_range, first_range + tasks)
    bool pool_busy = false;    // another job held the pool: one range, [0, n), on the caller
    int64_t start_ns = 0;      // the fork (the job's publication)
    int64_t end_ns = 0;        // the join returned
    int64_t join_wait_ns = 0;  // the caller's wait at the join, after the ranges it ran
  };
  struct Range {
    int32_t thread = 0;  // who ran it: 0 the calling thread, i > 0 the pool's worker i
    int32_t index = 0;   // the range's index in its job (worker i's own range is range i)
    int64_t begin = 0, end = 0;
    int64_t start_ns = 0, end_ns = 0;
  };
  std::vector<Call> calls;
  std::vector<Range> ranges;
  void Clear() {
    calls.clear();
    ranges.clear();
  }
};

class ThreadPool {
 public:
  struct Options {
    // How long an idle worker polls for the next job before it parks (microseconds).
    int spin_us = 200;
  };

  // A pool running jobs on `num_threads` threads: the caller and num_threads - 1 workers.
  // InvalidArgument when num_threads is outside [1, MaxThreads()].
  static absl::StatusOr<std::unique_ptr<ThreadPool>> Create(int num_threads, Options options);
  static absl::StatusOr<std::unique_ptr<ThreadPool>> Create(int num_threads) {
    return Create(num_threads, Options());
  }
  // The process-wide pool of `num_threads` threads, shared by every VM that asks for it (made on
  // first use, never destroyed). Its jobs run one at a time: a VM whose kernel finds it busy runs
  // the kernel on its own thread, so VMs sharing it never oversubscribe the cores.
  static absl::StatusOr<std::shared_ptr<ThreadPool>> Shared(int num_threads);

  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) over disjoint ranges covering [0, n), each (but the last) a multiple
  // of `grain` long, and returns when all are done. Range i of T goes to thread i (0: the
  // caller). Runs fn(0, n) on the caller when n <= grain, with one thread, or when another job
  // holds the pool. fn must not call ParallelFor on the same pool. Thread-safe.
  //
  // With a `log`, each range's thread and start and end times are appended to it (a job that
  // split, or one that found the pool busy; a loop of one range is not logged). Each range's
  // thread writes its own slot of the job and the caller copies the slots after the join: no
  // lock, no extra atomic. Without one (nullptr), no clock is read.
  void ParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> fn,
                   ParallelLog* log = nullptr);

  // The ranges ParallelFor(n, grain, ...) hands out (the thread count it uses), and range i.
  int Tasks(int64_t n, int64_t grain) const;
  static void Range(int64_t n, int64_t grain, int tasks, int i, int64_t* begin, int64_t* end);

  // Stops the workers' spinning now (they park until the next job): called before work runs
  // on other threads (oneDNN's OpenMP team) that would compete with spinning workers.
  void Park();

 private:
  ThreadPool(int num_threads, Options options);
  void WorkerLoop(int index);
  // Runs range `index` of the job on thread `thread` (0: the caller); kTimed: into slots_.
  template <bool kTimed>
  void RunTask(int index, int thread);
  // The job's fork and join, after the caller took job_mu_; kTimed: each range fills its slot,
  // and it returns when the caller's own ranges were done (the start of its join wait).
  template <bool kTimed>
  int64_t RunJob(int tasks);
  // The logged paths, out of line (ParallelFor without a log stays as small as before): a job
  // on the pool, and a loop run whole on the caller because the pool was busy.
  ABSL_ATTRIBUTE_NOINLINE void RunLoggedJob(int tasks, ParallelLog* log);
  ABSL_ATTRIBUTE_NOINLINE void RunBusyLogged(int64_t n,
                                             absl::FunctionRef<void(int64_t, int64_t)> fn,
                                             ParallelLog* log);

  const int num_threads_;
  const Options options_;
  std::vector<std::thread> workers_;

  std::mutex job_mu_;  // held by the caller for the duration of a job (try_lock)

  // The job, written by the caller before it stores a new epoch_ and read by the job's workers
  // after they see it (acquire). epoch_ holds a sequence number above the job's task count (the
  // low 16 bits): a worker outside the job reads nothing else.
  int64_t job_n_ = 0;
  int64_t job_grain_ = 1;
  int job_tasks_ = 0;
  const absl::FunctionRef<void(int64_t, int64_t)>* job_fn_ = nullptr;
  bool job_timed_ = false;  // a logged job: each range's thread fills slots_[range]

  // Per range of a logged job: written by the thread that ran it (before its pending_
  // decrement, or by the caller), read by the caller after the join. A cache line each.
  struct alignas(64) Slot {
    int32_t thread;
    int64_t start_ns, end_ns;
  };
  std::unique_ptr<Slot[]> slots_;

  std::atomic<uint64_t> epoch_{0};
  // Range i > 0 of the current job is taken by whoever sets claims_[i] first: its worker, or
  // the caller once its own range is done (so a join never waits for a descheduled worker).
  std::unique_ptr<std::atomic<uint32_t>[]> claims_;
  std::atomic<int> pending_{0};  // ranges 1.. not yet finished
  std::atomic<bool> stop_{false};
  std::atomic<bool> park_{false};
  std::atomic<int> sleepers_{0};  // workers parked or about to park
  std::mutex park_mu_;
  std::condition_variable park_cv_;
};

}  // namespace dynvm

#endif  // DYNVM_KERNELS_THREAD_POOL_H_
