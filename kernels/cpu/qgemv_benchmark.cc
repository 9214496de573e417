// The weight-only GEMVs (qgemv.h) against the f32 GEMV they stand in for (cpu::Gemv: the decode
// GEMV of MatMul, Linear and the LSTM gates), one thread, at each level the CPU runs (isa.h).
//   BM_DecodeStepGemv: the LSTM LM's step (tools/bench/export_bench_models.py: W 1024x128 and R
//     1024x256 of layer 1, W and R 1024x256 of layer 2, the 1000x256 head; 5.2 MB in f32, 1.3
//     MB in int8), every weight its own memory, so a step reads them from L3 as a decode does.
//   BM_OneWeightGemv: one 1024x256 weight, read from L2 (1 MB f32, 256 KB int8).
// Arg 0: 0 f32, 1 int8, 2 bf16; arg 1: activation rows (f32: 1 only); arg 2: the level (isa.h,
// 0 portable .. 3 avx512_vnni; a level the CPU lacks is skipped). Items are multiply-adds.
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/qgemv.h"

namespace dynvm::cpu {
namespace {

struct Weight {
  int64_t n, k;
  std::vector<float> f32, scale;
  std::vector<int8_t> i8;
  std::vector<uint16_t> bf16;
};

std::vector<Weight> MakeWeights(const std::vector<std::pair<int64_t, int64_t>>& shapes) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<Weight> out;
  for (auto [n, k] : shapes) {
    Weight w{n, k, std::vector<float>(n * k), std::vector<float>(n, 1.0f / 127), {}, {}};
    w.i8.resize(n * k);
    w.bf16.resize(n * k);
    for (int64_t i = 0; i < n * k; ++i) {
      w.f32[i] = u(rng);
      w.i8[i] = static_cast<int8_t>(w.f32[i] * 127.0f);
      w.bf16[i] = static_cast<uint16_t>(0x3f00u + rng() % 256);
    }
    out.push_back(std::move(w));
  }
  return out;
}

void Run(benchmark::State& state, const std::vector<Weight>& weights) {
  const int dtype = static_cast<int>(state.range(0));
  const int64_t rows = state.range(1);
  const Isa isa = static_cast<Isa>(state.range(2));
  if (!IsaSupported(isa)) {
    state.SkipWithError("level not supported by this CPU");
    return;
  }
  ScopedIsaForTesting level(isa);
  int64_t kmax = 0, nmax = 0, macs = 0;
  for (const Weight& w : weights) {
    kmax = std::max(kmax, w.k);
    nmax = std::max(nmax, w.n);
    macs += rows * w.n * w.k;
  }
  std::vector<float> x(rows * kmax), y(rows * nmax);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : x) v = u(rng);
  for (auto _ : state) {
    for (const Weight& w : weights) {
      if (dtype == 0) {
        Gemv('T', w.n, w.k, 1.0f, x.data(), w.f32.data(), w.k, 0.0f, y.data());
      } else if (dtype == 1) {
        QGemvI8(rows, w.k, x.data(), kmax, w.i8.data(), w.k, w.scale.data(), 0, w.n, 0.0f, y.data(),
                nmax);
      } else {
        QGemvBf16(rows, w.k, x.data(), kmax, w.bf16.data(), w.k, 0, w.n, 0.0f, y.data(), nmax);
      }
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * macs);
  state.SetLabel(dtype == 0 ? IsaName(isa) : dtype == 1 ? QGemvI8Path() : QGemvBf16Path());
}

void BM_DecodeStepGemv(benchmark::State& state) {
  static const std::vector<Weight>* weights = new std::vector<Weight>(
      MakeWeights({{1024, 128}, {1024, 256}, {1024, 256}, {1024, 256}, {1000, 256}}));
  Run(state, *weights);
}

void BM_OneWeightGemv(benchmark::State& state) {
  static const std::vector<Weight>* weights = new std::vector<Weight>(MakeWeights({{1024, 256}}));
  Run(state, *weights);
}

void Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "rows", "isa"});
  for (int isa = 0; isa < 4; ++isa) {
    b->Args({0, 1, isa});
    for (int dtype : {1, 2}) {
      for (int rows : {1, 2, 4}) b->Args({dtype, rows, isa});
    }
  }
}

BENCHMARK(BM_DecodeStepGemv)->Apply(Args);
BENCHMARK(BM_OneWeightGemv)->Apply(Args);

}  // namespace
}  // namespace dynvm::cpu

BENCHMARK_MAIN();
