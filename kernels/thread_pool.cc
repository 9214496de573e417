#include "kernels/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DYNVM_CPU_RELAX() _mm_pause()
#else
#define DYNVM_CPU_RELAX() std::this_thread::yield()
#endif

namespace dynvm {
namespace {

constexpr int kMaxCap = 4096;
constexpr int kTaskBits = 16;  // low bits of ThreadPool::epoch_: the job's task count
static_assert(kMaxCap < (1 << kTaskBits));

int DefaultMaxThreads() {
  const char* env = std::getenv("DYNVM_MAX_THREADS");
  int v = 0;
  if (env != nullptr && absl::SimpleAtoi(env, &v) && v >= 1 && v <= kMaxCap) return v;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n >= 1) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(std::min<unsigned>(hc, kMaxCap));
}

std::atomic<int>& Cap() {
  static std::atomic<int> cap{DefaultMaxThreads()};
  return cap;
}

std::atomic<int> live_workers{0};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int MaxThreads() { return Cap().load(std::memory_order_relaxed); }

absl::Status SetMaxThreads(int n) {
  if (n < 1 || n > kMaxCap) {
    return absl::InvalidArgumentError(
        absl::StrCat("the thread cap must be in [1, ", kMaxCap, "], got ", n));
  }
  Cap().store(n, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status ValidateThreadCount(int64_t n, absl::string_view what) {
  const int cap = MaxThreads();
  if (n < 1 || n > cap) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be in [1, ", cap,
                                                   "] (the process-wide cap: the CPUs available ",
                                                   "or DYNVM_MAX_THREADS), got ", n));
  }
  return absl::OkStatus();
}

int LiveWorkerThreads() { return live_workers.load(std::memory_order_relaxed); }

absl::StatusOr<std::unique_ptr<ThreadPool>> ThreadPool::Create(int num_threads, Options options) {
  if (absl::Status s = ValidateThreadCount(num_threads, "ThreadPool: num_threads"); !s.ok()) {
    return s;
  }
  return std::unique_ptr<ThreadPool>(new ThreadPool(num_threads, options));
}

absl::StatusOr<std::shared_ptr<ThreadPool>> ThreadPool::Shared(int num_threads) {
  if (absl::Status s = ValidateThreadCount(num_threads, "ThreadPool: num_threads"); !s.ok()) {
    return s;
  }
  static std::mutex mu;
  static auto* pools = new std::map<int, std::shared_ptr<ThreadPool>>();
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<ThreadPool>& p = (*pools)[num_threads];
  if (p == nullptr) p.reset(new ThreadPool(num_threads, Options()));
  return p;
}

ThreadPool::ThreadPool(int num_threads, Options options)
    : num_threads_(num_threads),
      options_(options),
      slots_(new Slot[static_cast<size_t>(num_threads)]()),
      claims_(new std::atomic<uint32_t>[static_cast<size_t>(num_threads)]) {
  for (int i = 0; i < num_threads; ++i) claims_[i].store(1, std::memory_order_relaxed);
  workers_.reserve(num_threads - 1);
  for (int i = 1; i < num_threads; ++i) {
    live_workers.fetch_add(1, std::memory_order_relaxed);
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  epoch_.store(((epoch_.load() >> kTaskBits) + 1) << kTaskBits);  // a job of no tasks
  { std::lock_guard<std::mutex> lock(park_mu_); }
  park_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  live_workers.fetch_sub(static_cast<int>(workers_.size()), std::memory_order_relaxed);
}

int ThreadPool::Tasks(int64_t n, int64_t grain) const {
  if (grain < 1) grain = 1;
  if (num_threads_ == 1 || n <= grain) return 1;
  const int64_t chunks = (n + grain - 1) / grain;
  return static_cast<int>(std::min<int64_t>(chunks, num_threads_));
}

void ThreadPool::Range(int64_t n, int64_t grain, int tasks, int i, int64_t* begin, int64_t* end) {
  if (grain < 1) grain = 1;
  const int64_t chunks = (n + grain - 1) / grain;
  // Chunks split as evenly as they go: the first (chunks % tasks) ranges get one more.
  const int64_t base = chunks / tasks, extra = chunks % tasks;
  const int64_t c0 = i * base + std::min<int64_t>(i, extra);
  const int64_t c1 = c0 + base + (i < extra ? 1 : 0);
  *begin = std::min(n, c0 * grain);
  *end = std::min(n, c1 * grain);
}

template <bool kTimed>
void ThreadPool::RunTask(int index, int thread) {
  int64_t begin, end;
  Range(job_n_, job_grain_, job_tasks_, index, &begin, &end);
  if constexpr (kTimed) {
    Slot& slot = slots_[index];
    slot.thread = thread;
    slot.start_ns = NowNs();
    if (begin < end) (*job_fn_)(begin, end);
    slot.end_ns = NowNs();
  } else {
    if (begin < end) (*job_fn_)(begin, end);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> fn,
                             ParallelLog* log) {
  if (n <= 0) return;
  const int tasks = Tasks(n, grain);
  if (tasks == 1) {
    fn(0, n);
    return;
  }
  std::unique_lock<std::mutex> job(job_mu_, std::try_to_lock);
  if (!job.owns_lock()) {  // another VM's kernel holds the shared pool: no oversubscription
    if (log == nullptr) {
      fn(0, n);
    } else {
      RunBusyLogged(n, fn, log);
    }
    return;
  }
  job_n_ = n;
  job_grain_ = grain < 1 ? 1 : grain;
  job_tasks_ = tasks;
  job_fn_ = &fn;
  job_timed_ = log != nullptr;
  if (log == nullptr) {
    RunJob<false>(tasks);
  } else {
    RunLoggedJob(tasks, log);
  }
  job_fn_ = nullptr;
}

void ThreadPool::RunBusyLogged(int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn,
                               ParallelLog* log) {
  ParallelLog::Call call;
  call.n = n;
  call.tasks = 1;
  call.first_range = static_cast<int32_t>(log->ranges.size());
  call.pool_busy = true;
  call.start_ns = NowNs();
  fn(0, n);
  call.end_ns = NowNs();
  log->ranges.push_back({0, 0, 0, n, call.start_ns, call.end_ns});
  log->calls.push_back(call);
}

void ThreadPool::RunLoggedJob(int tasks, ParallelLog* log) {
  ParallelLog::Call call;
  call.n = job_n_;
  call.tasks = tasks;
  call.first_range = static_cast<int32_t>(log->ranges.size());
  call.start_ns = NowNs();
  const int64_t wait_ns = RunJob<true>(tasks);
  call.end_ns = NowNs();
  call.join_wait_ns = call.end_ns - wait_ns;
  // Every slot is visible: its thread wrote it before the pending_ decrement RunJob acquired.
  for (int i = 0; i < tasks; ++i) {
    ParallelLog::Range r;
    r.thread = slots_[i].thread;
    r.index = i;
    Range(job_n_, job_grain_, tasks, i, &r.begin, &r.end);
    r.start_ns = slots_[i].start_ns;
    r.end_ns = slots_[i].end_ns;
    log->ranges.push_back(r);
  }
  log->calls.push_back(call);
}

template <bool kTimed>
int64_t ThreadPool::RunJob(int tasks) {
  pending_.store(tasks - 1, std::memory_order_relaxed);
  park_.store(false, std::memory_order_relaxed);
  // Opens ranges 1.. for claiming; release: a worker that claims one sees the job above.
  for (int i = 1; i < tasks; ++i) claims_[i].store(0, std::memory_order_release);
  // Publishes the job: a new sequence number with the task count in the low bits.
  const uint64_t seq = (epoch_.load(std::memory_order_relaxed) >> kTaskBits) + 1;
  epoch_.store((seq << kTaskBits) | static_cast<uint64_t>(tasks), std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    // A worker that counted itself a sleeper checks the epoch under park_mu_ before it waits:
    // taking the lock here orders this notify after that check.
    { std::lock_guard<std::mutex> lock(park_mu_); }
    park_cv_.notify_all();
  }
  RunTask<kTimed>(0, 0);
  // Ranges whose worker has not started (descheduled on a busy machine, or still waking up)
  // run here: the join never waits for a thread that has no core.
  for (int i = 1; i < tasks; ++i) {
    if (claims_[i].exchange(1, std::memory_order_acq_rel) == 0) {
      RunTask<kTimed>(i, 0);
      pending_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  int64_t wait_ns = 0;  // kTimed: when the caller's own ranges were done
  if constexpr (kTimed) wait_ns = NowNs();
  // Join: the ranges workers claimed.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 4096) {
      DYNVM_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  return wait_ns;
}

void ThreadPool::Park() { park_.store(true, std::memory_order_relaxed); }

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;  // the epoch at construction: a job published before this thread ran counts
  const auto spin = std::chrono::microseconds(options_.spin_us);
  for (;;) {
    // Spin for the next job, then park.
    auto start = std::chrono::steady_clock::now();
    uint64_t e;
    for (int i = 0;; ++i) {
      e = epoch_.load(std::memory_order_acquire);
      if (e != seen) break;
      DYNVM_CPU_RELAX();
      if ((i & 63) == 63 && (park_.load(std::memory_order_relaxed) ||
                             std::chrono::steady_clock::now() - start > spin)) {
        std::unique_lock<std::mutex> lock(park_mu_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        park_cv_.wait(lock, [&] { return epoch_.load(std::memory_order_seq_cst) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        start = std::chrono::steady_clock::now();
      }
    }
    seen = e;
    if (stop_.load()) return;
    // A worker claims its range; the caller may have run it already. A worker that saw an
    // older job late may claim its range of the current one (whose fields the claim's
    // acquire makes visible): it runs that, correctly, and skips the next epoch's claim.
    if (index < static_cast<int>(e & ((uint64_t{1} << kTaskBits) - 1)) &&
        claims_[index].exchange(1, std::memory_order_acq_rel) == 0) {
      if (job_timed_) {
        RunTask<true>(index, index);
      } else {
        RunTask<false>(index, index);
      }
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
}

}  // namespace dynvm
