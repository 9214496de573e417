// The thread pool's fork/join cost and the work sizes where splitting pays
// (docs/threads.md; raw output under docs/results/threads-*):
//   BM_ForkJoin/threads      -- one ParallelFor whose ranges do nothing: the fork/join cost
//                               with workers spinning (back-to-back jobs, as in a decode step);
//   BM_ForkJoinParked/threads -- the same after the workers parked (the first kernel of a step
//                               after a pause);
//   BM_ForkJoinLogged/threads -- BM_ForkJoin with a ParallelLog, as in a profiled run (each
//                               range reads the clock twice; docs/profiling.md);
//   BM_Sum/n/threads         -- a float sum over n elements, each range summed by its thread:
//                               the size where 2 threads beat 1 (an elementwise or reduction
//                               loop's threshold).
#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "kernels/thread_pool.h"

namespace dynvm {
namespace {

std::unique_ptr<ThreadPool> MakePool(int threads) {
  if (threads > MaxThreads() && !SetMaxThreads(threads).ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<ThreadPool>> p = ThreadPool::Create(threads);
  return p.ok() ? std::move(*p) : nullptr;
}

void BM_ForkJoin(benchmark::State& state) {
  std::unique_ptr<ThreadPool> pool = MakePool(static_cast<int>(state.range(0)));
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
    pool->ParallelFor(2, 1, [&](int64_t b, int64_t) { benchmark::DoNotOptimize(b); });
  }
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_ForkJoin)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

void BM_ForkJoinLogged(benchmark::State& state) {
  std::unique_ptr<ThreadPool> pool = MakePool(static_cast<int>(state.range(0)));
  ParallelLog log;
  for (auto _ : state) {
    pool->ParallelFor(
        2, 1, [&](int64_t b, int64_t) { benchmark::DoNotOptimize(b); }, &log);
    if (log.calls.size() >= 4096) log.Clear();  // a profiler takes them after each kernel
  }
}
BENCHMARK(BM_ForkJoinLogged)->ArgName("threads")->Arg(2)->UseRealTime();

void BM_ForkJoinParked(benchmark::State& state) {
  std::unique_ptr<ThreadPool> pool = MakePool(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    state.PauseTiming();
    pool->Park();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    state.ResumeTiming();
    pool->ParallelFor(2, 1, [&](int64_t b, int64_t) { benchmark::DoNotOptimize(b); });
  }
}
BENCHMARK(BM_ForkJoinParked)->ArgName("threads")->Arg(2)->UseRealTime();

void BM_Sum(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::unique_ptr<ThreadPool> pool = MakePool(static_cast<int>(state.range(1)));
  std::vector<float> x(n, 1.0f);
  float part[2] = {0, 0};
  for (auto _ : state) {
    pool->ParallelFor(n, 1024, [&](int64_t b, int64_t e) {
      part[b == 0 ? 0 : 1] = std::accumulate(x.begin() + b, x.begin() + e, 0.0f);
    });
    benchmark::DoNotOptimize(part[0] + part[1]);
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}
BENCHMARK(BM_Sum)
    ->ArgNames({"n", "threads"})
    ->ArgsProduct({{1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20}, {1, 2}})
    ->UseRealTime();

}  // namespace
}  // namespace dynvm

BENCHMARK_MAIN();
