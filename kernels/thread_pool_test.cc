#include "kernels/thread_pool.h"

#include <dirent.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/heap_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/kernel.h"

namespace dynvm {
namespace {

using ::testing::HasSubstr;

#define DYNVM_CONCAT_INNER(a, b) a##b
#define DYNVM_CONCAT(a, b) DYNVM_CONCAT_INNER(a, b)
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL(DYNVM_CONCAT(statusor_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL(so, lhs, expr) \
  auto so = (expr);                              \
  ASSERT_TRUE(so.ok()) << so.status();           \
  lhs = std::move(*so)

// Threads of this process, from /proc/self/task.
int ProcessThreads() {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

TEST(ThreadCountTest, ValidatesAgainstTheCap) {
  const int cap = MaxThreads();
  ASSERT_GE(cap, 1);
  EXPECT_TRUE(ValidateThreadCount(1, "x").ok());
  EXPECT_TRUE(ValidateThreadCount(cap, "x").ok());
  for (int64_t bad : {int64_t{0}, int64_t{-1}, int64_t{cap} + 1, int64_t{1} << 40}) {
    const absl::Status s = ValidateThreadCount(bad, "num_threads");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("num_threads must be in [1, "));
  }
  EXPECT_EQ(ThreadPool::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ThreadPool::Create(cap + 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ThreadPool::Shared(-3).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ThreadCountTest, TheCapIsConfigurable) {
  const int cap = MaxThreads();
  EXPECT_EQ(SetMaxThreads(0).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(SetMaxThreads(cap + 3).ok());
  EXPECT_TRUE(ValidateThreadCount(cap + 3, "x").ok());
  EXPECT_FALSE(ValidateThreadCount(cap + 4, "x").ok());
  ASSERT_TRUE(SetMaxThreads(1).ok());
  EXPECT_FALSE(ValidateThreadCount(2, "x").ok());
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// Every index of [0, n) is visited exactly once, in ranges that are grain multiples, for odd
// sizes and pools larger than the machine (the cap raised for the test).
TEST(ThreadPoolTest, CoversEveryIndexOnce) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 5)).ok());
  for (int threads : {1, 2, 3, 5}) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ThreadPool> pool, ThreadPool::Create(threads));
    for (int64_t n : {1, 2, 3, 7, 64, 1001, 4099}) {
      for (int64_t grain : {1, 4, 16, 5000}) {
        std::vector<std::atomic<int>> seen(n);
        std::atomic<int> ranges{0};
        pool->ParallelFor(n, grain, [&](int64_t b, int64_t e) {
          ASSERT_LT(b, e);
          if (e != n) {
            ASSERT_EQ((e - b) % grain, 0);
          }
          for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
          ranges.fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << n << " " << grain;
        EXPECT_EQ(ranges.load(), pool->Tasks(n, grain));
        EXPECT_LE(ranges.load(), threads);
      }
    }
  }
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// The same call gives each worker the same range every time (a worker keeps its weight rows).
// Range 0 (the caller's) waits here until range 1 has started, so the caller never takes range 1
// over (which it does when the worker is late: a parked or descheduled worker).
TEST(ThreadPoolTest, RangesAreStableAcrossCalls) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 3)).ok());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ThreadPool> pool, ThreadPool::Create(3));
  std::thread::id first[3];
  for (int rep = 0; rep < 100; ++rep) {
    std::thread::id owner[3];
    std::atomic<int> started{0};
    pool->ParallelFor(999, 8, [&](int64_t b, int64_t e) {
      int64_t r0, r1;
      int range = -1;
      for (int i = 0; i < 3; ++i) {
        ThreadPool::Range(999, 8, 3, i, &r0, &r1);
        if (r0 == b) range = i;
      }
      ASSERT_GE(range, 0);
      owner[range] = std::this_thread::get_id();
      if (range == 0) {
        while (started.load() != 2) std::this_thread::yield();
      } else {
        started.fetch_add(1);
      }
    });
    EXPECT_EQ(owner[0], std::this_thread::get_id());
    EXPECT_NE(owner[1], owner[2]);
    for (int i = 1; i < 3; ++i) {
      ASSERT_NE(owner[i], std::this_thread::get_id());
      if (rep == 0) first[i] = owner[i];
      ASSERT_EQ(owner[i], first[i]) << "range " << i << " moved at call " << rep;
    }
    if (rep % 25 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // parked
  }
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// A worker that never gets to its range in time (spin 0: parked at once) leaves it to the
// caller; every index still runs once.
TEST(ThreadPoolTest, LateWorkersRangesRunOnTheCaller) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  ThreadPool::Options o;
  o.spin_us = 0;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ThreadPool> pool, ThreadPool::Create(2, o));
  int on_caller = 0;
  for (int rep = 0; rep < 500; ++rep) {
    std::vector<std::atomic<int>> seen(37);
    std::atomic<int> caller_ranges{0};
    const std::thread::id me = std::this_thread::get_id();
    pool->ParallelFor(37, 1, [&](int64_t b, int64_t e) {
      if (std::this_thread::get_id() == me) caller_ranges.fetch_add(1);
      for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
    });
    for (auto& s : seen) ASSERT_EQ(s.load(), 1);
    if (caller_ranges.load() == 2) ++on_caller;
  }
  RecordProperty("calls_run_whole_on_the_caller", on_caller);
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

TEST(ThreadPoolTest, WorkersAreCountedAndJoined) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 3)).ok());
  const int before = LiveWorkerThreads();
  const int threads_before = ProcessThreads();
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ThreadPool> pool, ThreadPool::Create(3));
    EXPECT_EQ(LiveWorkerThreads(), before + 2);
    EXPECT_EQ(ProcessThreads(), threads_before + 2);
  }
  EXPECT_EQ(LiveWorkerThreads(), before);
  // A joined thread's /proc entry goes when the kernel reaps it, a moment after the join.
  for (int i = 0; i < 1000 && ProcessThreads() != threads_before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(ProcessThreads(), threads_before);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ThreadPool> one, ThreadPool::Create(1));
  EXPECT_EQ(ProcessThreads(), threads_before);  // one thread: the caller's, no worker
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// VMs sharing a pool from several threads at once: each job runs whole (on the pool or, when
// it is busy, on its caller) and nothing is lost.
TEST(ThreadPoolTest, SharedPoolFromManyThreads) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<ThreadPool> pool, ThreadPool::Shared(2));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<ThreadPool> again, ThreadPool::Shared(2));
  EXPECT_EQ(pool.get(), again.get());
  std::vector<std::thread> callers;
  std::vector<int64_t> sums(4, 0);
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int rep = 0; rep < 300; ++rep) {
        std::vector<int64_t> v(257, 0);
        pool->ParallelFor(257, 3, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) v[i] = i;
        });
        for (int64_t x : v) sums[t] += x;
      }
    });
  }
  for (std::thread& c : callers) c.join();
  for (int64_t s : sums) EXPECT_EQ(s, 300 * (256 * 257 / 2));
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// A logged job: one call, its ranges in order covering [0, n), each attributed to the thread
// that really ran it (worker i for range i, or the caller when the worker was late), within
// the fork and join. Spin 0 makes late workers common.
TEST(ThreadPoolTest, LogRecordsWhoRanEachRange) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 3)).ok());
  for (const int spin_us : {0, 200}) {
    ThreadPool::Options o;
    o.spin_us = spin_us;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ThreadPool> pool, ThreadPool::Create(3, o));
    const std::thread::id me = std::this_thread::get_id();
    ParallelLog log;
    constexpr int kCalls = 200;
    std::vector<std::array<char, 3>> on_caller(kCalls);  // bytes: written by their own threads
    for (int c = 0; c < kCalls; ++c) {
      pool->ParallelFor(
          1000, 7,
          [&](int64_t b, int64_t) {
            int64_t r0, r1;
            for (int i = 0; i < 3; ++i) {
              ThreadPool::Range(1000, 7, 3, i, &r0, &r1);
              if (r0 == b) on_caller[c][i] = std::this_thread::get_id() == me;
            }
          },
          &log);
    }
    pool->ParallelFor(
        5, 7, [](int64_t, int64_t) {}, &log);  // one range: not a job, not logged
    ASSERT_EQ(log.calls.size(), kCalls);
    ASSERT_EQ(log.ranges.size(), 3 * kCalls);
    int stolen = 0;
    for (int c = 0; c < kCalls; ++c) {
      const ParallelLog::Call& call = log.calls[c];
      EXPECT_EQ(call.n, 1000);
      EXPECT_EQ(call.tasks, 3);
      EXPECT_EQ(call.first_range, 3 * c);
      EXPECT_FALSE(call.pool_busy);
      EXPECT_LE(call.start_ns, call.end_ns);
      EXPECT_GE(call.join_wait_ns, 0);
      EXPECT_LE(call.join_wait_ns, call.end_ns - call.start_ns);
      int64_t covered = 0;
      for (int i = 0; i < 3; ++i) {
        const ParallelLog::Range& r = log.ranges[call.first_range + i];
        EXPECT_EQ(r.index, i);
        EXPECT_EQ(r.begin, covered);
        covered = r.end;
        EXPECT_EQ(r.thread, on_caller[c][i] ? 0 : i) << "call " << c << " range " << i;
        stolen += i > 0 && r.thread == 0;
        EXPECT_LE(call.start_ns, r.start_ns);
        EXPECT_LE(r.start_ns, r.end_ns);
        EXPECT_LE(r.end_ns, call.end_ns);
      }
      EXPECT_EQ(covered, 1000);
    }
    RecordProperty(absl::StrCat("ranges_stolen_spin_", spin_us), stolen);
  }
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// A job that finds the pool held by another caller runs whole on its caller: logged as one
// range [0, n) on thread 0, marked pool_busy.
TEST(ThreadPoolTest, LogMarksAJobThatFoundThePoolBusy) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ThreadPool> pool, ThreadPool::Create(2));
  std::atomic<bool> holding{false}, release{false};
  std::thread other([&] {
    pool->ParallelFor(2, 1, [&](int64_t b, int64_t) {
      if (b != 0) return;  // range 0 runs on this caller, which holds the pool until released
      holding.store(true);
      while (!release.load()) std::this_thread::yield();
    });
  });
  while (!holding.load()) std::this_thread::yield();
  ParallelLog log;
  std::vector<int> seen(50, 0);
  pool->ParallelFor(
      50, 1,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ++seen[i];
      },
      &log);
  release.store(true);
  other.join();
  for (int s : seen) EXPECT_EQ(s, 1);
  ASSERT_EQ(log.calls.size(), 1);
  EXPECT_TRUE(log.calls[0].pool_busy);
  EXPECT_EQ(log.calls[0].tasks, 1);
  ASSERT_EQ(log.ranges.size(), 1);
  EXPECT_EQ(log.ranges[0].thread, 0);
  EXPECT_EQ(log.ranges[0].begin, 0);
  EXPECT_EQ(log.ranges[0].end, 50);
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

TEST(ThreadPoolTest, KernelContextParallelFor) {
  KernelContext one(&HeapAllocator::Get(), 1);
  int calls = 0;
  one.ParallelFor(100, 1, [&](int64_t b, int64_t e) {
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 100);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(one.ParallelTasks(100, 1), 1);
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  KernelContext two(&HeapAllocator::Get(), 2);
  std::vector<std::atomic<int>> seen(99);
  two.ParallelFor(99, 10, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
  });
  for (auto& s : seen) EXPECT_EQ(s.load(), 1);
  EXPECT_EQ(two.ParallelTasks(99, 10), 2);
  EXPECT_EQ(two.ParallelTasks(10, 10), 1);
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// ParallelForDynamic at 1..4 threads and chunk sizes from 1 to past n: every index exactly
// once, chunks of `chunk` elements (the last shorter) aligned to multiples of it, slots below
// ParallelTasks(n, chunk), and no slot used by two chunks at the same time.
TEST(ThreadPoolTest, DynamicSplitCoversEveryIndexOnceAtAnyChunking) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 4)).ok());
  for (int threads = 1; threads <= 4; ++threads) {
    KernelContext ctx(&HeapAllocator::Get(), threads);
    for (int64_t n : {1, 2, 7, 64, 1000}) {
      for (int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{16}, n - 1, n, n + 5}) {
        if (chunk < 1) continue;
        SCOPED_TRACE(absl::StrCat(threads, " threads, n ", n, ", chunk ", chunk));
        const int64_t chunks = (n + chunk - 1) / chunk;
        const int tasks = ctx.ParallelTasks(chunks, 1);
        EXPECT_EQ(tasks, static_cast<int>(std::min<int64_t>(threads, chunks)));
        std::vector<std::atomic<int>> seen(n);
        std::vector<std::atomic<int>> busy(tasks);
        std::atomic<int> calls{0}, bad{0};
        ctx.ParallelForDynamic(n, chunk, [&](int slot, int64_t b, int64_t e) {
          calls.fetch_add(1);
          if (slot < 0 || slot >= tasks || b % chunk != 0 || e != std::min(n, b + chunk)) {
            bad.fetch_add(1);
            return;
          }
          if (busy[slot].fetch_add(1) != 0) bad.fetch_add(1);  // a slot in use twice at once
          for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
          busy[slot].fetch_sub(1);
        });
        EXPECT_EQ(bad.load(), 0);
        EXPECT_EQ(calls.load(), chunks);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << "index " << i;
      }
    }
  }
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// The chunk a thread is stuck in (a core taken by another process) holds up that chunk alone:
// the first chunk claimed waits until every other chunk is done, which under a static split
// (half the chunks belonging to the waiting thread) would never happen.
TEST(ThreadPoolTest, DynamicSplitRunsTheRestBesideAStuckChunk) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 3)).ok());
  for (int threads = 2; threads <= 3; ++threads) {
    KernelContext ctx(&HeapAllocator::Get(), threads);
    for (int round = 0; round < 20; ++round) {
      constexpr int64_t kChunks = 12;
      std::atomic<int> done{0}, first{1};
      std::atomic<bool> timed_out{false};
      ctx.ParallelForDynamic(kChunks, 1, [&](int, int64_t, int64_t) {
        if (first.exchange(0) == 1) {
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (done.load() < kChunks - 1) {
            if (std::chrono::steady_clock::now() > until) {
              timed_out = true;
              break;
            }
            std::this_thread::yield();
          }
        }
        done.fetch_add(1);
      });
      ASSERT_FALSE(timed_out.load()) << threads << " threads, round " << round;
      EXPECT_EQ(done.load(), kChunks);
    }
  }
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

}  // namespace
}  // namespace dynvm
