// dynvm::Attention (attention.f32.dnnl) on a grouped-query decode step at the shapes of the
// language-model decoders (docs/llm.md): Q [1, kv heads, G, 1, 64] against K and V [1, kv heads,
// 1, T, 64] read in place of a cache of T + 64 rows per head, what attention_kv_repeat gives.
//   BM_GroupedDecode/kvh/group/keys/threads/cold
// cold 1: each call reads the next of enough copies of K and V (96 MB in all) that they come
// from memory, as in a decode loop, where each token's weights (100 MB - 1.5 GB) pass through
// the caches between one layer's attention and the next token's; cold 0: the same K and V every
// call (in cache). The ISA level: DYNVM_CPU_ISA=avx2 (docs/kernels.md). Wall time.
#include <sys/mman.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "allocator/heap_allocator.h"
#include "benchmark/benchmark.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;

// Memory from a 2 MB boundary advised MADV_HUGEPAGE before it is touched: under THP `always` or
// `madvise` the kernel backs it with 2 MB pages.
class HugePages final : public Allocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    const size_t huge = size_t{2} << 20;
    void* p = std::aligned_alloc(huge, (bytes + huge - 1) / huge * huge);
    if (p == nullptr) return absl::ResourceExhaustedError("aligned_alloc");
    (void)::madvise(p, (bytes + huge - 1) / huge * huge, MADV_HUGEPAGE);
    return p;
  }
  void Deallocate(void* p, size_t) override { std::free(p); }
  Device device() const override { return Device::kCPU; }
  AllocatorStats stats() const override { return {}; }
  void FailNthAllocation(int64_t) override {}
};

Tensor Filled(std::vector<int64_t> dims, int salt, bool huge = false) {
  static HugePages pages;
  Tensor t = huge ? *Tensor::Allocate(pages, DType::kF32, dims) : *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data<float>()[i] = 0.01f * static_cast<float>((i * 7 + salt) % 89 - 44);
  }
  return t;
}

void BM_GroupedDecode(benchmark::State& state) {
  const int64_t kvh = state.range(0), group = state.range(1), lk = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const bool cold = state.range(4) != 0;
  const int64_t d = 64, capacity = lk + 64;
  const int64_t per_call = 2 * kvh * capacity * d * 4;  // bytes of K and V
  const int64_t copies = cold ? std::max<int64_t>(1, (int64_t{96} << 20) / per_call) : 1;
  const Tensor q = Filled({1, 1, kvh, group, d}, 1);
  // Each copy's caches [1, kvh, 1, capacity, d], viewed as their first lk rows.
  const bool huge = state.range(5) != 0;
  const Tensor kc = Filled({copies, kvh, 1, capacity, d}, 2, huge);
  const Tensor vc = Filled({copies, kvh, 1, capacity, d}, 3, huge);
  const std::vector<int64_t> dims = {1, kvh, 1, lk, d};
  const std::vector<int64_t> strides = {kvh * capacity * d, capacity * d, capacity * d, d, 1};
  std::vector<Tensor> ks, vs;
  for (int64_t c = 0; c < copies; ++c) {
    Tensor k = *Tensor::View(kc.storage(), c * kvh * capacity * d * 4, DType::kF32, dims, strides);
    Tensor v = *Tensor::View(vc.storage(), c * kvh * capacity * d * 4, DType::kF32, dims, strides);
    ks.push_back(k);
    vs.push_back(v);
  }
  KernelCall call("Attention", "dynvm");
  call.In(q).In(ks[0]).In(vs[0]).Out(DType::kF32);
  call.Attr("q_perm", std::vector<int64_t>{0, 2, 3, 1, 4})
      .Attr("k_perm", std::vector<int64_t>{0, 1, 2, 4, 3})
      .Attr("scale", 0.125f)
      .Backend("dnnl");
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = KernelRegistry::Global().Create(call.spec());
  if (!kernel.ok()) {
    state.SkipWithError(std::string(kernel.status().message()).c_str());
    return;
  }
  state.SetLabel((*kernel)->name());
  KernelContext ctx(&HeapAllocator::Get(), threads);
  Tensor y = *Tensor::Empty(DType::kF32, {1, kvh, group, 1, d});
  std::vector<Tensor*> out = {&y};
  int64_t c = 0;
  for (auto _ : state) {
    std::vector<const Tensor*> in = {&q, &ks[c], &vs[c]};
    c = c + 1 == copies ? 0 : c + 1;
    absl::Status s = (*kernel)->Run(ctx, in, out);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
  state.counters["KV_GB/s"] = benchmark::Counter(
      static_cast<double>(2 * kvh * lk * d * 4) * static_cast<double>(state.iterations()) * 1e-9,
      benchmark::Counter::kIsRate);
}

void GroupedArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"kvh", "group", "keys", "threads", "cold", "huge"});
  for (int64_t kvh : {2, 8}) {
    for (int64_t lk : {128, 192, 640}) {
      for (int64_t threads : {1, 2}) {
        for (int64_t cold : {0, 1}) {
          for (int64_t huge : {0, 1}) b->Args({kvh, 4, lk, threads, cold, huge});
        }
      }
    }
  }
  b->UseRealTime();
}
BENCHMARK(BM_GroupedDecode)->Apply(GroupedArgs);

}  // namespace
}  // namespace dynvm::onednn

BENCHMARK_MAIN();
