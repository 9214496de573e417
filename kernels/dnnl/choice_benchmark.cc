// The measurements behind choice.h's rules: each pits a microkernel (kernels/cpu/) against the
// oneDNN form it stands in for, on the same problem, one thread, CPU time. The last argument of
// each is the microkernel level (cpu::Isa: 1 avx2, 2 avx512, 3 avx512_vnni; a level the CPU
// lacks is skipped); oneDNN's level is the process's (ONEDNN_MAX_CPU_ISA=AVX2 for the AVX2
// runs). docs/kernels.md, "Microkernel or oneDNN", quotes the results.
//   BM_Gemv/n/impl/isa          -- [1, n] x [n, n]^T: 0 cpu::Gemv, 1 dnnl_sgemm (UseGemv);
//   BM_LinearGelu/m/k/n/packed/isa -- the dynvm::Linear kernel with GELU and constant weights:
//                                  packed 1 the packed GEMM, 0 dnnl_sgemm (UsePackedGemm);
//   BM_QuantizedProduct/m/n/dtype/direct/isa -- [m, n] x int8 (dtype 1) or bf16 (2) [n, n]^T:
//                                  direct 1 cpu::QGemv, 0 dequantize + dnnl_sgemm (UseQGemv);
//   BM_IntGemm/m/n/impl/isa     -- [m, n] u8 x [n, n] s8 with zero points: 0 cpu::IGemm (pack
//                                  both, compute), 1 dnnl_gemm_u8s8s32 (UseIGemm; only exact
//                                  with VNNI);
//   BM_Winograd/shape/act/own/isa -- a channels-last FusedConv: own 1 dynvm's Winograd, 0
//                                  oneDNN (its Winograd where it has one for the post-op, else
//                                  its direct convolution) (UseOwnWinograd).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "allocator/heap_allocator.h"
#include "benchmark/benchmark.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/igemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/qgemv.h"
#include "kernels/cpu/quantize.h"
#include "kernels/dnnl/choice.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/quant_common.h"
#include "kernels/registry.h"
#include "kernels/testing.h"
#include "kernels/thread_pool.h"
#include "oneapi/dnnl/dnnl.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

Tensor RandomTensor(std::vector<int64_t> dims, uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return testing::F32(dims, Random(n, seed));
}

// Sets the microkernel level of the benchmark's argument `arg`; false (the run skipped) when
// the CPU lacks it.
bool SetLevel(benchmark::State& state, int arg, std::unique_ptr<cpu::ScopedIsaForTesting>* level) {
  const auto isa = static_cast<cpu::Isa>(state.range(arg));
  if (!cpu::IsaSupported(isa)) {
    state.SkipWithError("level not supported by this CPU");
    return false;
  }
  *level = std::make_unique<cpu::ScopedIsaForTesting>(isa);
  return true;
}

// Runs a dnnl-backend kernel for `call` in the benchmark loop at one site, on `threads` threads
// (the VM's pool past 1).
void RunKernel(benchmark::State& state, KernelCall& call, const std::vector<Tensor>& inputs,
               std::vector<int64_t> out_dims, int threads = 1) {
  KernelSpec spec = call.spec();
  spec.backend = "dnnl";
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  if (!k.ok()) {
    state.SkipWithError(std::string(k.status().message()).c_str());
    return;
  }
  if (threads > MaxThreads() && !SetMaxThreads(threads).ok()) {
    state.SkipWithError("threads");
    return;
  }
  KernelContext ctx(&HeapAllocator::Get(), threads);
  std::vector<const Tensor*> in;
  for (const Tensor& t : inputs) in.push_back(&t);
  Tensor y = *Tensor::Empty(DType::kF32, out_dims);
  Tensor* out[] = {&y};
  for (auto _ : state) {
    const absl::Status s = (*k)->Run(ctx, in, out);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
  state.SetLabel((*k)->name());
}

void SetRate(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}

// ---- UseGemv ----

void BM_Gemv(benchmark::State& state) {
  std::unique_ptr<cpu::ScopedIsaForTesting> level;
  if (!SetLevel(state, 2, &level)) return;
  const int64_t n = state.range(0);
  const bool sgemm = state.range(1) == 1;
  const std::vector<float> w = Random(n * n, 1), x = Random(n, 2);
  std::vector<float> y(n);
  SetThreads(1);
  for (auto _ : state) {
    if (sgemm) {
      dnnl_sgemm('N', 'T', 1, n, n, 1.0f, x.data(), n, w.data(), n, 0.0f, y.data(), n);
    } else {
      cpu::Gemv('T', n, n, 1.0f, x.data(), w.data(), n, 0.0f, y.data());
    }
    benchmark::DoNotOptimize(y.data());
  }
  SetRate(state, 2.0 * n * n);
}
BENCHMARK(BM_Gemv)
    ->ArgNames({"n", "sgemm", "isa"})
    ->ArgsProduct({{256, 512, 1024, 2048, 2896, 4096}, {0, 1}, {1, 2, 3}});

// ---- UsePackedGemm ----

void BM_LinearGelu(benchmark::State& state) {
  std::unique_ptr<cpu::ScopedIsaForTesting> level;
  if (!SetLevel(state, 4, &level)) return;
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  choice::ForceForTesting(choice::Rule::kPackedGemm, state.range(3) == 1);
  const Tensor x = RandomTensor({m, k}, 3), w = RandomTensor({n, k}, 4), b = RandomTensor({n}, 5);
  KernelCall call("Linear", "dynvm");
  call.In(x).In(w).In(b).Out(DType::kF32).Attr("trans_b", int64_t{1});
  call.Attr("activation", std::string("Gelu")).Attr("constant_weights", int64_t{1});
  RunKernel(state, call, {x, w, b}, {m, n});
  choice::ForceForTesting(choice::Rule::kPackedGemm, std::nullopt);
  SetRate(state, 2.0 * m * n * k);
}
void LinearArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "k", "n", "packed", "isa"});
  for (auto [k, n] : {std::pair{256, 1024}, {1024, 256}, {512, 512}}) {
    for (int64_t m : {8, 16, 32, 64, 128, 256, 512}) {
      for (int isa : {1, 2}) {
        for (int packed : {0, 1}) b->Args({m, k, n, packed, isa});
      }
    }
  }
}
BENCHMARK(BM_LinearGelu)->Apply(LinearArgs);

// The transformer shapes (the rule's re-measure): a Linear with a bias and no activation
// (act 0) or GELU (act 1), constant weights, at `threads` threads, the weights cold: the
// benchmark cycles through copies of W (and so of the packed copies) totalling at least 96 MiB,
// three times the L3 of the Zen 4 EPYC, as a model's layers read their weights from memory.
void BM_Linear(benchmark::State& state) {
  std::unique_ptr<cpu::ScopedIsaForTesting> level;
  if (!SetLevel(state, 5, &level)) return;
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const bool gelu = state.range(3) == 1;
  const int threads = static_cast<int>(state.range(6));
  if (threads > MaxThreads() && !SetMaxThreads(threads).ok()) {
    state.SkipWithError("threads");
    return;
  }
  choice::ForceForTesting(choice::Rule::kPackedGemm, state.range(4) == 1);
  const int64_t copies = std::max<int64_t>(1, ((int64_t{96} << 20) / 4 + n * k - 1) / (n * k));
  const Tensor x = RandomTensor({m, k}, 3), b = RandomTensor({n}, 5);
  std::vector<Tensor> ws;
  for (int64_t i = 0; i < copies; ++i) ws.push_back(RandomTensor({n, k}, 4 + i));
  KernelCall call("Linear", "dynvm");
  call.In(x).In(ws[0]).In(b).Out(DType::kF32).Attr("trans_b", int64_t{1});
  call.Attr("activation", std::string(gelu ? "Gelu" : "")).Attr("constant_weights", int64_t{1});
  KernelSpec spec = call.spec();
  spec.backend = "dnnl";
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = KernelRegistry::Global().Create(spec);
  if (!kernel.ok()) {
    state.SkipWithError(std::string(kernel.status().message()).c_str());
    return;
  }
  KernelContext ctx(&HeapAllocator::Get(), threads);
  Tensor y = *Tensor::Empty(DType::kF32, {m, n});
  Tensor* out[] = {&y};
  auto run = [&](const Tensor& w) {
    const absl::Status s = (*kernel)->Run(ctx, {&x, &w, &b}, out);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    return s.ok();
  };
  for (const Tensor& w : ws) {  // packs each copy once, outside the timing
    if (!run(w)) return;
  }
  size_t next = 0;
  for (auto _ : state) {
    if (!run(ws[next])) return;
    next = (next + 1) % ws.size();
  }
  choice::ForceForTesting(choice::Rule::kPackedGemm, std::nullopt);
  state.SetLabel((*kernel)->name());
  SetRate(state, 2.0 * m * n * k);
  state.counters["GB/s"] =
      benchmark::Counter(4e-9 * n * k * state.iterations(), benchmark::Counter::kIsRate);
}
void TransformerArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "k", "n", "act", "packed", "isa", "threads"});
  const std::pair<int64_t, int64_t> shapes[] = {
      {768, 2304}, {768, 3072}, {3072, 768}, {384, 1536}, {1536, 384}, {96, 384},   {192, 768},
      {768, 192},  {384, 96},   {256, 1024}, {1024, 256}, {512, 512},  {1024, 4096}};
  for (auto [k, n] : shapes) {
    for (int64_t m : {1, 8, 17, 50, 64, 128, 197, 256, 512, 1024, 3136, 6272}) {
      for (int threads : {1, 2}) {
        for (int isa : {1, 2}) {
          for (int packed : {0, 1}) b->Args({m, k, n, 0, packed, isa, threads});
        }
      }
    }
  }
}
BENCHMARK(BM_Linear)->Apply(TransformerArgs)->UseRealTime();

// ---- UseQGemv ----

void BM_QuantizedProduct(benchmark::State& state) {
  std::unique_ptr<cpu::ScopedIsaForTesting> level;
  if (!SetLevel(state, 4, &level)) return;
  const int64_t m = state.range(0), n = state.range(1), k = n;
  const bool i8 = state.range(2) == 1, direct = state.range(3) == 1;
  const std::vector<float> x = Random(m * k, 6), wf = Random(n * k, 7);
  std::vector<int8_t> q(n * k);
  std::vector<uint16_t> bf(n * k);
  std::vector<float> scale(n, 1.0f / 127), y(m * n), deq(n * k);
  for (int64_t i = 0; i < n * k; ++i) {
    q[i] = static_cast<int8_t>(wf[i] * 127);
    uint32_t u;
    std::memcpy(&u, &wf[i], 4);
    bf[i] = static_cast<uint16_t>(u >> 16);
  }
  SetThreads(1);
  for (auto _ : state) {
    if (direct) {
      for (int64_t r = 0; r < m; r += cpu::kQuantSmallRows) {
        const int64_t rows = std::min(cpu::kQuantSmallRows, m - r);
        if (i8) {
          cpu::QGemvI8(rows, k, x.data() + r * k, k, q.data(), k, scale.data(), 0, n, 0.0f,
                       y.data() + r * n, n);
        } else {
          cpu::QGemvBf16(rows, k, x.data() + r * k, k, bf.data(), k, 0, n, 0.0f, y.data() + r * n,
                         n);
        }
      }
    } else {
      if (i8) {
        cpu::DequantizeRowsI8(k, q.data(), k, scale.data(), 0, n, deq.data());
      } else {
        cpu::DequantizeRowsBf16(k, bf.data(), k, 0, n, deq.data());
      }
      dnnl_sgemm('N', 'T', m, n, k, 1.0f, x.data(), k, deq.data(), k, 0.0f, y.data(), n);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(i8 ? cpu::QGemvI8Path() : cpu::QGemvBf16Path());
  SetRate(state, 2.0 * m * n * k);
}
BENCHMARK(BM_QuantizedProduct)
    ->ArgNames({"m", "n", "dtype", "direct", "isa"})
    ->ArgsProduct({{1, 2, 4, 8, 12, 16, 32, 64, 128}, {256, 1024}, {1, 2}, {0, 1}, {1, 2, 3}});

// ---- UseIGemm ----

void BM_IntGemm(benchmark::State& state) {
  std::unique_ptr<cpu::ScopedIsaForTesting> level;
  if (!SetLevel(state, 3, &level)) return;
  const int64_t m = state.range(0), n = state.range(1), k = n;
  const bool onednn = state.range(2) == 1;
  std::mt19937 rng(8);
  std::vector<uint8_t> a(m * k);
  std::vector<int8_t> b(k * n);
  for (uint8_t& v : a) v = static_cast<uint8_t>(rng());
  for (int8_t& v : b) v = static_cast<int8_t>(rng());
  std::vector<int32_t> c(m * n);
  std::vector<int16_t> pa(cpu::IGemmPackedABytes(m, k) / 2), pb(cpu::IGemmPackedBBytes(k, n) / 2);
  const int32_t co = 0;
  SetThreads(1);
  for (auto _ : state) {
    if (onednn) {
      dnnl_gemm_u8s8s32('N', 'N', 'F', m, n, k, 1.0f, a.data(), k, 3, b.data(), n, -1, 0.0f,
                        c.data(), n, &co);
    } else {
      cpu::IGemmPackA(k, a.data(), true, k, 3, 0, m, pa.data());
      cpu::IGemmPackB(k, n, b.data(), n, -1, 0, cpu::IGemmPanels(n), pb.data());
      cpu::IGemmCompute(k, n, pa.data(), pb.data(), 0, m, 0, cpu::IGemmPanels(n), c.data(), n);
    }
    benchmark::DoNotOptimize(c.data());
  }
  state.SetLabel(onednn ? (HasInt8Vnni() ? "onednn vnni" : "onednn (not exact)")
                        : cpu::IGemmPath());
  SetRate(state, 2.0 * m * n * k);
}
BENCHMARK(BM_IntGemm)
    ->ArgNames({"m", "n", "onednn", "isa"})
    ->ArgsProduct({{2, 16, 64, 256}, {256, 1024}, {0, 1}, {1, 2, 3}});

// ---- UseOwnWinograd ----

struct ConvShape {
  int64_t n, c, m, h, w;
};
constexpr ConvShape kConvShapes[] = {
    {1, 32, 64, 16, 150}, {1, 64, 128, 8, 75},   {1, 128, 128, 4, 75},   // the CRNN's
    {1, 64, 64, 56, 56},  {1, 128, 128, 28, 28}, {1, 256, 256, 14, 14},  // resnet18's
    {8, 256, 256, 4, 4},
};

void BM_Winograd(benchmark::State& state) {
  std::unique_ptr<cpu::ScopedIsaForTesting> level;
  if (!SetLevel(state, 3, &level)) return;
  const ConvShape& s = kConvShapes[state.range(0)];
  const bool clip = state.range(1) == 1;
  choice::ForceForTesting(choice::Rule::kOwnWinograd, state.range(2) == 1);
  const Tensor x = RandomTensor({s.n, s.c, s.h, s.w}, 9), w = RandomTensor({s.m, s.c, 3, 3}, 10),
               b = RandomTensor({s.m}, 11);
  KernelCall call("FusedConv", "dynvm");
  call.In(x).In(w).In(b).Out(DType::kF32);
  call.Attr("pads", std::vector<int64_t>{1, 1, 1, 1})
      .Attr("constant_weights", int64_t{1})
      .Attr("activation", std::string(clip ? "Clip" : "Relu"))
      .Attr("activation_alpha", 0.0f)
      .Attr("activation_beta", 6.0f)
      .Attr("channels_last_in", int64_t{1})
      .Attr("channels_last_out", int64_t{1});
  RunKernel(state, call, {x, w, b}, {s.n, s.m, s.h, s.w});
  choice::ForceForTesting(choice::Rule::kOwnWinograd, std::nullopt);
  SetRate(state, 2.0 * s.n * s.h * s.w * s.c * s.m * 9);  // direct-convolution FLOPs
}
BENCHMARK(BM_Winograd)
    ->ArgNames({"shape", "clip", "own", "isa"})
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6}, {0, 1}, {0, 1}, {1, 2}});

// ---- UseStridedBinary ----

// The broadcasts of BM_StridedBinary: output dims and the second operand's (the first has the
// output's dims).
struct BroadcastCase {
  std::vector<int64_t> a, b;
};
const BroadcastCase kBroadcastCases[] = {
    {{64, 3, 49, 49}, {1, 3, 49, 49}},         // 0 a relative position bias over the windows
    {{1, 16, 3, 49, 49}, {1, 16, 1, 49, 49}},  // 1 a shifted-window mask over the heads
    {{2, 12, 128, 128}, {2, 1, 1, 128}},       // 2 a padding mask per example over heads, rows
    {{4, 64, 28, 28}, {1, 64, 1, 1}},          // 3 one value per channel, 4 images
    {{784, 128}, {128}},                       // 4 a channels-last bias (one row)
    {{4, 64, 28, 28}, {4, 64, 28, 28}},        // 5 the same shape
    {{4, 64, 28, 28}, {1}},                    // 6 a scalar
    {{4, 64, 28, 28}, {4, 1, 28, 28}},         // 7 one plane per image over the channels
};

void BM_StridedBinary(benchmark::State& state) {
  std::unique_ptr<cpu::ScopedIsaForTesting> level;
  if (!SetLevel(state, 3, &level)) return;
  const BroadcastCase& c = kBroadcastCases[state.range(0)];
  choice::ForceForTesting(choice::Rule::kStridedBinary, state.range(1) == 1);
  const Tensor a = RandomTensor(c.a, 6), b = RandomTensor(c.b, 7);
  KernelCall call("Add");
  call.In(a).In(b).Out(DType::kF32);
  RunKernel(state, call, {a, b}, c.a, static_cast<int>(state.range(2)));
  choice::ForceForTesting(choice::Rule::kStridedBinary, std::nullopt);
  state.counters["elements/s"] = benchmark::Counter(
      static_cast<double>(a.numel()) * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_StridedBinary)
    ->ArgNames({"case", "loop", "threads", "isa"})
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7}, {0, 1}, {1, 2}, {1, 2}})
    ->UseRealTime();

}  // namespace
}  // namespace dynvm::onednn

BENCHMARK_MAIN();
