// Pooled allocation against the system allocator for the sizes a VM step allocates.
#include <cstdlib>

#include "allocator/heap_allocator.h"
#include "allocator/pool_allocator.h"
#include "benchmark/benchmark.h"

namespace dynvm {
namespace {

void SizeArgs(benchmark::internal::Benchmark* b) {
  b->Arg(64)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20)->Arg(16 << 20);
}

// Steady state: after the first iteration every allocation is a free-list hit.
void BM_PoolAllocFree(benchmark::State& state) {
  static PoolAllocator* pool = new PoolAllocator();  // shared by the threaded runs
  const auto bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    absl::StatusOr<void*> p = pool->Allocate(bytes);
    if (!p.ok()) {
      state.SkipWithError("allocation failed");
      break;
    }
    benchmark::DoNotOptimize(*p);
    pool->Deallocate(*p, bytes);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PoolAllocFree)->Apply(SizeArgs);
BENCHMARK(BM_PoolAllocFree)->Arg(4 << 10)->Threads(2)->UseRealTime();

// The same through the Allocator interface of the process heap (aligned_alloc + free + stats).
void BM_HeapAllocatorAllocFree(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  HeapAllocator& heap = HeapAllocator::Get();
  for (auto _ : state) {
    absl::StatusOr<void*> p = heap.Allocate(bytes);
    if (!p.ok()) {
      state.SkipWithError("allocation failed");
      break;
    }
    benchmark::DoNotOptimize(*p);
    heap.Deallocate(*p, bytes);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HeapAllocatorAllocFree)->Apply(SizeArgs);

// Bare std::aligned_alloc/std::free, for comparison.
void BM_SystemAllocFree(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::aligned_alloc(kTensorAlignment, bytes);
    if (p == nullptr) {
      state.SkipWithError("allocation failed");
      break;
    }
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SystemAllocFree)->Apply(SizeArgs);
BENCHMARK(BM_SystemAllocFree)->Arg(4 << 10)->Threads(2)->UseRealTime();

}  // namespace
}  // namespace dynvm

BENCHMARK_MAIN();
