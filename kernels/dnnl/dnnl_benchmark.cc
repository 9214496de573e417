// Benchmarks of the oneDNN backend, per kernel and shape class, and of the oneDNN forms the
// kernels chose between (docs/kernels.md, "oneDNN backend"):
//   BM_MatMul/M/threads          -- the MatMul kernel (K = N = 1024), GFLOP/s counter;
//   BM_Linear/M/threads          -- Gemm with a [N, K] weight (transB) and a bias;
//   BM_Sgemm[TransB], BM_MatmulRuntimeM, BM_MatmulFixed[TransB] -- dnnl_sgemm, the runtime-M
//                                    matmul primitive and the fixed-shape primitive on the same
//                                    problem, with B row-major or transposed;
//   BM_LstmStep_*/threads        -- one LSTM decode step (batch 1, hidden 256): this backend's
//                                    GEMMs + fused gates, oneDNN's LSTM primitive (weights
//                                    prepacked, not timed), the reference kernel;
//   BM_Add, BM_Tanh, BM_Softmax, BM_LayerNorm -- primitive-backed ops against the reference
//                                    kernel, by size (sets kMinBinaryElements);
//   BM_LogSoftmax/rows/n/dnnl      -- last-axis LogSoftmax: cpu::LogSoftmaxRows against the
//                                    reference kernel;
//   BM_ReduceLastAxis/max/dnnl     -- ReduceSum/ReduceMax over rows of 128: the row loops
//                                    against the reference kernel; BM_ReduceMiddleAxis/dnnl
//                                    likewise for a mean over axis 1 of [8, 64, 128];
//   BM_TransposeReference, BM_TransposeReorder, BM_TransposeKernel/shape/threads -- Transpose:
//                                    the reference copy, one bare reorder primitive, and the
//                                    dnnl kernel (transpose.cc) that picks between them.
//   BM_PadReference, BM_PadKernel/shape/threads -- Pad: the reference kernel and pad.cc.
//   BM_ResizeReference, BM_ResizeKernel/shape/threads, BM_GridSampleReference,
//   BM_GridSampleKernel, BM_ConcatReference, BM_ConcatKernel -- the reference kernels against
//                                    resize.cc, grid_sample.cc and concat.cc on real shapes.
// Every run uses user scratchpads and a thread count set per benchmark. Figures and the choices
// they made: docs/kernels.md, "oneDNN backend".
//
// Tuning notes (moved here from docs/kernels.md with the code's move to kernels/cpu/; the
// figures are those of the records named):
//
// Figures (dnnl_benchmark, single-thread GFLOP/s over thread CPU time, median of 3; K = N = 1024;
// [results/claims-kernels-2026-11-24.txt](results/claims-kernels-2026-11-24.txt), on the 2-core
// development VM while other builds and benchmarks kept it busy: the M = 1 rows, bound by memory
// bandwidth, suffer most from the other processes):
//
// - BM_MatMul (this kernel): M = 1 13.1; M = 64 111.7; M = 512 140.4
// - BM_Linear (Gemm transB + bias): M = 1 13.7; M = 64 114.2; M = 512 140.1
// - BM_Sgemm (plain B): M = 1 13.3; M = 64 108.0; M = 512 143.4
// - BM_MatmulRuntimeM: M = 1 13.3; M = 64 107.4; M = 512 141.2
// - BM_MatmulFixed: M = 1 6.2; M = 64 105.0; M = 512 136.3
// - BM_MatmulFixedTransB: M = 1 7.4; M = 64 119.7; M = 512 142.9
// - BM_SgemmTransB: M = 1 13.6; M = 64 104.7; M = 512 137.3
//
// LSTM step, batch 1, hidden 256, input 256 (same record, CPU time): GEMMs + fused gates 37.3 us,
// oneDNN's LSTM primitive (weights prepacked, reorder not timed) 44.3 us, reference kernel 243 us.
// Two-thread scaling is not measured: the machine had no idle core.
#include <algorithm>
#include <iterator>
#include <memory>
#include <vector>

#include "allocator/heap_allocator.h"
#include "benchmark/benchmark.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/rows.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/parallel_loops.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;

Tensor Filled(std::vector<int64_t> dims) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = 0.001f * static_cast<float>(i % 89 - 44);
  return t;
}

// Runs a kernel (created for `call`, restricted to `backend`) in the benchmark loop at one site
// with preallocated outputs.
void RunKernel(benchmark::State& state, KernelCall& call, const std::string& backend,
               const std::vector<Tensor>& inputs, const std::vector<std::vector<int64_t>>& out_dims,
               int threads) {
  KernelSpec spec = call.spec();
  spec.backend = backend;  // the kernel of `backend`, with the registry's fallback after it
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  if (!k.ok()) {
    state.SkipWithError(std::string(k.status().message()).c_str());
    return;
  }
  state.SetLabel((*k)->name());
  KernelContext ctx(&HeapAllocator::Get(), threads);
  std::vector<const Tensor*> in;
  for (const Tensor& t : inputs) in.push_back(t.defined() ? &t : nullptr);
  std::vector<Tensor> outs;
  for (const auto& d : out_dims) outs.push_back(*Tensor::Empty(DType::kF32, d));
  std::vector<Tensor*> out;
  for (Tensor& t : outs) out.push_back(&t);
  for (auto _ : state) {
    absl::Status s = (*k)->Run(ctx, in, out);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
}

void SetFlops(benchmark::State& state, double flops_per_iter) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iter * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}

constexpr int64_t kK = 1024, kN = 1024;

// Single-threaded runs report GFLOP/s over the thread's CPU time, which on a shared machine
// is closer to an idle machine's wall time; two-thread runs over wall time.
void MatMulArgs1(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "threads"});
  for (int64_t m : {1, 64, 512}) b->Args({m, 1});
}
void MatMulArgs2(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "threads"});
  for (int64_t m : {1, 64, 512}) b->Args({m, 2});
  b->UseRealTime();
}
#define MATMUL_BENCHMARK(fn)         \
  BENCHMARK(fn)->Apply(MatMulArgs1); \
  BENCHMARK(fn)->Apply(MatMulArgs2)

// ---- MatMul through the kernel ----

void BM_MatMul(benchmark::State& state) {
  const int64_t m = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  Tensor a = Filled({m, kK}), b = Filled({kK, kN});
  KernelCall call("MatMul");
  call.In(a).In(b).Out(DType::kF32);
  RunKernel(state, call, "dnnl", {a, b}, {{m, kN}}, threads);
  SetFlops(state, 2.0 * m * kK * kN);
}
MATMUL_BENCHMARK(BM_MatMul);

// A linear layer: Gemm with a [N, K] weight (transB) and a bias.
void BM_Linear(benchmark::State& state) {
  const int64_t m = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  Tensor a = Filled({m, kK}), w = Filled({kN, kK}), bias = Filled({kN});
  KernelCall call("Gemm");
  call.In(a).In(w).In(bias).Out(DType::kF32).Attr("transB", int64_t{1});
  RunKernel(state, call, "dnnl", {a, w, bias}, {{m, kN}}, threads);
  SetFlops(state, 2.0 * m * kK * kN);
}
MATMUL_BENCHMARK(BM_Linear);

// The sweeps behind the split thresholds (parallel_loops.h, docs/threads.md), forced to split
// whatever the size, wall time:
//   BM_GemvSplit/N/threads -- a linear layer's batch-1 GEMV, [1, N] x [N, N]^T, its weight rows
//                             split across the pool (the threshold kMinParallelGemv);
//   BM_SoftmaxSplit, BM_LayerNormSplit/rows/threads -- rows of 128 split likewise
//                             (kMinParallelRows);
//   BM_BinarySplit, BM_ErfSplit/elements/threads -- the elementwise loops
//                             (kMinParallelElements).
KernelContext* SweepContext(int threads) {
  if (threads > MaxThreads() && !SetMaxThreads(threads).ok()) return nullptr;
  static KernelContext* ctx[3] = {nullptr, new KernelContext(&HeapAllocator::Get(), 1),
                                  new KernelContext(&HeapAllocator::Get(), 2)};
  return threads <= 2 ? ctx[threads] : nullptr;
}

void BM_GemvSplit(benchmark::State& state) {
  const int64_t n = state.range(0);
  KernelContext* ctx = SweepContext(static_cast<int>(state.range(1)));
  Tensor x = Filled({n}), w = Filled({n, n}), y = Filled({n});
  for (auto _ : state) {
    ctx->ParallelFor(n, 16, [&](int64_t j0, int64_t j1) {
      cpu::Gemv('T', j1 - j0, n, 1.0f, x.data<float>(), w.data<float>() + j0 * n, n, 0.0f,
                y.data<float>() + j0);
    });
    benchmark::DoNotOptimize(y.data<float>()[0]);
  }
  state.counters["MACs"] = static_cast<double>(n * n);
}
BENCHMARK(BM_GemvSplit)
    ->ArgNames({"N", "threads"})
    ->ArgsProduct({{64, 96, 128, 181, 256, 362, 512, 1024}, {1, 2}})
    ->UseRealTime();

void BM_SoftmaxSplit(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  KernelContext* ctx = SweepContext(threads);
  Tensor x = Filled({rows, 128}), y = Filled({rows, 128});
  for (auto _ : state) {
    ctx->ParallelFor(rows, (rows + threads - 1) / threads, [&](int64_t r0, int64_t r1) {
      cpu::SoftmaxRows(r1 - r0, 128, x.data<float>() + r0 * 128, y.data<float>() + r0 * 128);
    });
    benchmark::DoNotOptimize(y.data<float>()[0]);
  }
  state.counters["elements"] = static_cast<double>(rows * 128);
}
BENCHMARK(BM_SoftmaxSplit)
    ->ArgNames({"rows", "threads"})
    ->ArgsProduct({{8, 32, 64, 128, 256, 512}, {1, 2}})
    ->UseRealTime();

// ReduceMax / ReduceSum over the last axis of [rows, 128] (the row loops, reduce.cc) against
// the reference kernel: arg 0 the op (0 ReduceSum, 1 ReduceMax), arg 1 dnnl (1) or reference.
void BM_ReduceLastAxis(benchmark::State& state) {
  const char* op = state.range(0) == 0 ? "ReduceSum" : "ReduceMax";
  const int64_t rows = 512;
  KernelCall call(op);
  Tensor x = Filled({rows, 128});
  call.In(x).Attr("axes", std::vector<int64_t>{-1}).Attr("keepdims", int64_t{0}).Out(DType::kF32);
  RunKernel(state, call, state.range(1) == 1 ? "dnnl" : "reference", {x}, {{rows}}, 1);
  state.counters["elements/s"] = benchmark::Counter(
      static_cast<double>(rows * 128) * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ReduceLastAxis)->ArgNames({"max", "dnnl"})->ArgsProduct({{0, 1}, {0, 1}});

// ReduceMean over axis 1 of [8, 64, 128] (a mean pool over the sequence: the column loops).
void BM_ReduceMiddleAxis(benchmark::State& state) {
  KernelCall call("ReduceMean");
  Tensor x = Filled({8, 64, 128});
  call.In(x).Attr("axes", std::vector<int64_t>{1}).Attr("keepdims", int64_t{0}).Out(DType::kF32);
  RunKernel(state, call, state.range(0) == 1 ? "dnnl" : "reference", {x}, {{8, 128}}, 1);
  state.counters["elements/s"] = benchmark::Counter(
      static_cast<double>(x.numel()) * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ReduceMiddleAxis)->ArgNames({"dnnl"})->Arg(0)->Arg(1);

void BM_LayerNormSplit(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  KernelContext* ctx = SweepContext(threads);
  Tensor x = Filled({rows, 128}), y = Filled({rows, 128}), s = Filled({128}), b = Filled({128});
  for (auto _ : state) {
    ctx->ParallelFor(rows, (rows + threads - 1) / threads, [&](int64_t r0, int64_t r1) {
      cpu::LayerNormRows(r1 - r0, 128, x.data<float>() + r0 * 128, s.data<float>(), b.data<float>(),
                         1e-5f, y.data<float>() + r0 * 128);
    });
    benchmark::DoNotOptimize(y.data<float>()[0]);
  }
  state.counters["elements"] = static_cast<double>(rows * 128);
}
BENCHMARK(BM_LayerNormSplit)
    ->ArgNames({"rows", "threads"})
    ->ArgsProduct({{8, 32, 64, 128, 256, 512}, {1, 2}})
    ->UseRealTime();

// GELU (erf form) over 256 floats in place, one thread: form 0 as three passes (x / sqrt 2,
// cpu::Erf, x/2 (1 + e): the Linear epilogue before cpu::GeluErf), form 1 cpu::GeluErf.
void BM_GeluForms(benchmark::State& state) {
  constexpr int64_t n = 256;
  Tensor x = Filled({n}), y = Filled({n}), e = Filled({n});
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = 0.03f * static_cast<float>(i - n / 2);
  float* py = y.data<float>();
  float* pe = e.data<float>();
  for (auto _ : state) {
    std::copy(x.data<float>(), x.data<float>() + n, py);
    if (state.range(0) == 0) {
      for (int64_t j = 0; j < n; ++j) pe[j] = py[j] * 0.7071067811865476f;
      cpu::Erf(n, pe, pe);
      for (int64_t j = 0; j < n; ++j) py[j] = 0.5f * py[j] * (1.0f + pe[j]);
    } else {
      cpu::GeluErf(n, py, py);
    }
    benchmark::DoNotOptimize(py[0]);
  }
  state.counters["elements/s"] =
      benchmark::Counter(static_cast<double>(n) * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GeluForms)->ArgNames({"form"})->Arg(0)->Arg(1);

// The elementwise loops (kMinParallelElements): cpu::BinaryRows (Add of a broadcast row, the
// cheapest per element) and cpu::Erf (the core of Gelu, the dearest) over `elements` floats,
// split in halves at 2 threads.
void BM_BinarySplit(benchmark::State& state) {
  const int64_t elements = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  KernelContext* ctx = SweepContext(threads);
  const int64_t rows = elements / 128;
  Tensor x = Filled({rows, 128}), b = Filled({128}), y = Filled({rows, 128});
  for (auto _ : state) {
    ctx->ParallelFor(rows, (rows + threads - 1) / threads, [&](int64_t r0, int64_t r1) {
      cpu::BinaryRows(cpu::BinaryOp::kAdd, r1 - r0, 128, x.data<float>() + r0 * 128,
                      b.data<float>(), 0, y.data<float>() + r0 * 128);
    });
    benchmark::DoNotOptimize(y.data<float>()[0]);
  }
  state.counters["elements"] = static_cast<double>(rows * 128);
}
BENCHMARK(BM_BinarySplit)
    ->ArgNames({"elements", "threads"})
    ->ArgsProduct({{4096, 8192, 16384, 32768, 65536, 131072, 262144, 1048576}, {1, 2}})
    ->UseRealTime();

void BM_ErfSplit(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  KernelContext* ctx = SweepContext(threads);
  Tensor x = Filled({n}), y = Filled({n});
  for (auto _ : state) {
    ctx->ParallelFor(n, (n + threads - 1) / threads, [&](int64_t e0, int64_t e1) {
      cpu::Erf(e1 - e0, x.data<float>() + e0, y.data<float>() + e0);
    });
    benchmark::DoNotOptimize(y.data<float>()[0]);
  }
  state.counters["elements"] = static_cast<double>(n);
}
BENCHMARK(BM_ErfSplit)
    ->ArgNames({"elements", "threads"})
    ->ArgsProduct({{1024, 2048, 4096, 8192, 16384, 32768, 65536, 262144}, {1, 2}})
    ->UseRealTime();

// ---- the oneDNN forms, directly ----

void Sgemm(benchmark::State& state, char trans_b) {
  const int64_t m = state.range(0);
  SetThreads(static_cast<int>(state.range(1)));
  std::vector<float> a(m * kK, 0.5f), b(kK * kN, 0.25f), c(m * kN);
  const int64_t ldb = trans_b == 'N' ? kN : kK;
  for (auto _ : state) {
    dnnl_sgemm('N', trans_b, m, kN, kK, 1.0f, a.data(), kK, b.data(), ldb, 0.0f, c.data(), kN);
  }
  SetFlops(state, 2.0 * m * kK * kN);
}
void BM_Sgemm(benchmark::State& state) { Sgemm(state, 'N'); }
void BM_SgemmTransB(benchmark::State& state) { Sgemm(state, 'T'); }
MATMUL_BENCHMARK(BM_Sgemm);
MATMUL_BENCHMARK(BM_SgemmTransB);

// A matmul primitive over M rows (DNNL_RUNTIME_DIM_VAL for the runtime-M form) executed on
// `m` rows with a user scratchpad.
void MatmulPrimitive(benchmark::State& state, bool runtime_m, bool trans_b) {
  using dt = dnnl::memory::data_type;
  const int64_t m = state.range(0);
  SetThreads(static_cast<int>(state.range(1)));
  std::vector<float> a(m * kK, 0.5f), b(kK * kN, 0.25f), c(m * kN);
  std::vector<char> scratch;
  BoundPrimitive prim;
  absl::Status s = Guard("matmul", [&] {
    const dnnl::engine& engine = **CpuEngine();
    const int64_t pm = runtime_m ? DNNL_RUNTIME_DIM_VAL : m;
    dnnl::memory::desc a_md({pm, kK}, dt::f32, dnnl::memory::dims{kK, 1});
    dnnl::memory::desc b_md({kK, kN}, dt::f32,
                            trans_b ? dnnl::memory::dims{1, kK} : dnnl::memory::dims{kN, 1});
    dnnl::memory::desc c_md({pm, kN}, dt::f32, dnnl::memory::dims{kN, 1});
    dnnl::matmul::desc d(a_md, b_md, c_md);
    dnnl::matmul::primitive_desc pd(d, UserScratchpadAttr(), engine);
    state.SetLabel(pd.impl_info_str());
    prim.Bind(pd, {{DNNL_ARG_SRC, DenseDesc(dt::f32, {m, kK})},
                   {DNNL_ARG_WEIGHTS, b_md},
                   {DNNL_ARG_DST, DenseDesc(dt::f32, {m, kN})}});
    return absl::OkStatus();
  });
  if (!s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  scratch.resize(prim.scratchpad_bytes() + 64);
  for (auto _ : state) {
    s = prim.Execute({a.data(), b.data(), c.data()}, scratch.data());
  }
  if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  SetFlops(state, 2.0 * m * kK * kN);
}
void BM_MatmulRuntimeM(benchmark::State& state) { MatmulPrimitive(state, true, false); }
void BM_MatmulFixed(benchmark::State& state) { MatmulPrimitive(state, false, false); }
void BM_MatmulFixedTransB(benchmark::State& state) { MatmulPrimitive(state, false, true); }
MATMUL_BENCHMARK(BM_MatmulRuntimeM);
MATMUL_BENCHMARK(BM_MatmulFixed);
MATMUL_BENCHMARK(BM_MatmulFixedTransB);

// ---- LSTM step (batch 1, hidden 256, input 256) ----

constexpr int64_t kHidden = 256;

void LstmStep(benchmark::State& state, const std::string& backend) {
  const int threads = static_cast<int>(state.range(0));
  const int64_t h = kHidden;
  Tensor x = Filled({1, 1, h}), w = Filled({1, 4 * h, h}), r = Filled({1, 4 * h, h});
  Tensor b = Filled({1, 8 * h}), h0 = Filled({1, 1, h}), c0 = Filled({1, 1, h});
  KernelCall call("LSTM");
  call.In(x).In(w).In(r).In(b).Absent().In(h0).In(c0);
  call.Out(DType::kF32).Out(DType::kF32).Out(DType::kF32).Attr("hidden_size", h);
  RunKernel(state, call, backend, {x, w, r, b, Tensor(), h0, c0},
            {{1, 1, 1, h}, {1, 1, h}, {1, 1, h}}, threads);
  SetFlops(state, 2.0 * 2 * 4 * h * h);
}
void BM_LstmStep_GemmFusedGates(benchmark::State& state) { LstmStep(state, "dnnl"); }
void BM_LstmStep_Reference(benchmark::State& state) { LstmStep(state, "reference"); }
BENCHMARK(BM_LstmStep_GemmFusedGates)->ArgName("threads")->Arg(1);
BENCHMARK(BM_LstmStep_GemmFusedGates)->ArgName("threads")->Arg(2)->UseRealTime();
BENCHMARK(BM_LstmStep_Reference)->ArgName("threads")->Arg(1);

// oneDNN's LSTM primitive on the same step, its weights reordered once into the layout it
// prefers (the reorder is not timed: a compiler-packed constant would hold it).
void BM_LstmStep_OneDnnPrimitive(benchmark::State& state) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  SetThreads(static_cast<int>(state.range(0)));
  const int64_t h = kHidden;
  std::vector<float> x(h, 0.1f), h0(h, 0.1f), c0(h, 0.1f), y(h), hy(h), cy(h);
  std::vector<float> wl(h * 4 * h, 0.01f), wi(h * 4 * h, 0.01f), bias(4 * h, 0.0f);
  std::vector<char> scratch, wl_packed, wi_packed;
  BoundPrimitive prim;
  absl::Status s = Guard("lstm", [&] {
    const dnnl::engine& engine = **CpuEngine();
    dnnl::stream stream(engine);
    const dnnl::memory::desc src({1, 1, h}, dt::f32, tag::tnc);
    const dnnl::memory::desc state_md({1, 1, 1, h}, dt::f32, tag::ldnc);
    const dnnl::memory::desc w_any({1, 1, h, 4, h}, dt::f32, tag::any);
    const dnnl::memory::desc bias_md({1, 1, 4, h}, dt::f32, tag::ldgo);
    dnnl::lstm_forward::desc d(dnnl::prop_kind::forward_inference,
                               dnnl::rnn_direction::unidirectional_left2right, src, state_md,
                               state_md, w_any, w_any, bias_md, src, state_md, state_md);
    dnnl::lstm_forward::primitive_desc pd(d, UserScratchpadAttr(), engine);
    state.SetLabel(pd.impl_info_str());
    const dnnl::memory::desc wl_md = pd.weights_layer_desc(), wi_md = pd.weights_iter_desc();
    wl_packed.resize(wl_md.get_size());
    wi_packed.resize(wi_md.get_size());
    const dnnl::memory::desc plain({1, 1, h, 4, h}, dt::f32, tag::ldigo);
    dnnl::memory wl_user(plain, engine, wl.data()), wl_mem(wl_md, engine, wl_packed.data());
    dnnl::memory wi_user(plain, engine, wi.data()), wi_mem(wi_md, engine, wi_packed.data());
    dnnl::reorder(wl_user, wl_mem).execute(stream, wl_user, wl_mem);
    dnnl::reorder(wi_user, wi_mem).execute(stream, wi_user, wi_mem);
    stream.wait();
    prim.Bind(pd, {{DNNL_ARG_SRC_LAYER, src},
                   {DNNL_ARG_SRC_ITER, state_md},
                   {DNNL_ARG_SRC_ITER_C, state_md},
                   {DNNL_ARG_WEIGHTS_LAYER, wl_md},
                   {DNNL_ARG_WEIGHTS_ITER, wi_md},
                   {DNNL_ARG_BIAS, bias_md},
                   {DNNL_ARG_DST_LAYER, src},
                   {DNNL_ARG_DST_ITER, state_md},
                   {DNNL_ARG_DST_ITER_C, state_md}});
    return absl::OkStatus();
  });
  if (!s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  scratch.resize(prim.scratchpad_bytes() + 64);
  for (auto _ : state) {
    s = prim.Execute({x.data(), h0.data(), c0.data(), wl_packed.data(), wi_packed.data(),
                      bias.data(), y.data(), hy.data(), cy.data()},
                     scratch.data());
  }
  if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  SetFlops(state, 2.0 * 2 * 4 * h * h);
}
BENCHMARK(BM_LstmStep_OneDnnPrimitive)->ArgName("threads")->Arg(1);
BENCHMARK(BM_LstmStep_OneDnnPrimitive)->ArgName("threads")->Arg(2)->UseRealTime();

// ---- primitive-backed ops against the reference kernel, by size ----

void SizeArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"elements", "dnnl"});
  for (int64_t n : {64, 256, 1024, 4096, 16384, 262144}) {
    b->Args({n, 1});
    b->Args({n, 0});
  }
}

void BM_Add(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = Filled({n}), b = Filled({n});
  KernelCall call("Add");
  call.In(a).In(b).Out(DType::kF32);
  RunKernel(state, call, state.range(1) ? "dnnl" : "reference", {a, b}, {{n}}, 1);
}
BENCHMARK(BM_Add)->Apply(SizeArgs);

void BM_Tanh(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = Filled({n});
  KernelCall call("Tanh");
  call.In(a).Out(DType::kF32);
  RunKernel(state, call, state.range(1) ? "dnnl" : "reference", {a}, {{n}}, 1);
}
BENCHMARK(BM_Tanh)->Apply(SizeArgs);

void BM_Softmax(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = Filled({n / 64 > 0 ? n / 64 : 1, 64});
  KernelCall call("Softmax");
  call.In(a).Out(DType::kF32);
  RunKernel(state, call, state.range(1) ? "dnnl" : "reference", {a}, {{a.dim(0), a.dim(1)}}, 1);
}
BENCHMARK(BM_Softmax)->Apply(SizeArgs);

// LogSoftmax over the last axis of [rows, n] (cpu::LogSoftmaxRows) against the reference kernel
// (double, std::exp per element): an output layer or a beam over a 32K vocabulary, a 1000-class
// classifier, rows of 128, rows of one element.
void BM_LogSoftmax(benchmark::State& state) {
  const int64_t rows = state.range(0), n = state.range(1);
  Tensor a = Filled({rows, n});
  KernelCall call("LogSoftmax");
  call.In(a).Out(DType::kF32).Attr("axis", int64_t{-1});
  RunKernel(state, call, state.range(2) ? "dnnl" : "reference", {a}, {{rows, n}}, 1);
  state.counters["elements"] = static_cast<double>(rows * n);
}
BENCHMARK(BM_LogSoftmax)
    ->ArgNames({"rows", "n", "dnnl"})
    ->ArgsProduct({{1}, {32000}, {1, 0}})
    ->ArgsProduct({{8}, {32000}, {1, 0}})
    ->ArgsProduct({{16}, {1000}, {1, 0}})
    ->ArgsProduct({{64}, {128}, {1, 0}})
    ->ArgsProduct({{512}, {1}, {1, 0}});

void BM_LayerNorm(benchmark::State& state) {
  const int64_t rows = state.range(0);
  Tensor x = Filled({rows, 1024}), s = Filled({1024}), b = Filled({1024});
  KernelCall call("LayerNormalization");
  call.In(x).In(s).In(b).Out(DType::kF32);
  RunKernel(state, call, state.range(1) ? "dnnl" : "reference", {x, s, b}, {{rows, 1024}}, 1);
}
BENCHMARK(BM_LayerNorm)
    ->ArgNames({"rows", "dnnl"})
    ->Args({1, 1})
    ->Args({1, 0})
    ->Args({64, 1})
    ->Args({64, 0});

// ---- Transpose: the reference kernel's strided copy against a oneDNN reorder ----
// BM_TransposeReference/shape/threads runs the reference kernel (at 2 threads it splits the
// output's outer dim over the VM's pool); BM_TransposeReorder/shape/threads one reorder
// primitive from the permuted-strides view of the input to the dense output, bound once, with
// OpenMP at `threads`. Shapes: the encoders' transposes (docs/kernels.md, "oneDNN backend").
struct TransposeShape {
  std::vector<int64_t> dims, perm;
};
const TransposeShape kTransposeShapes[] = {
    {{8, 64, 256}, {1, 0, 2}},
    {{64, 8, 256}, {1, 0, 2}},
    {{8, 4, 64, 64}, {0, 2, 1, 3}},
    {{1, 128, 4, 64}, {0, 2, 1, 3}},
    {{2, 3, 5, 7}, {3, 1, 0, 2}},
    {{64, 64}, {1, 0}},
    {{512, 512}, {1, 0}},
    {{16, 16}, {1, 0}},
    {{32, 32}, {1, 0}},
    {{8, 64, 64}, {0, 2, 1}},
    // The CRNN's features into its LSTM (tools/bench/crnn_bench.py, widths 100 and 400).
    {{1, 128, 25}, {2, 0, 1}},
    {{1, 128, 100}, {2, 0, 1}},
};

void TransposeArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"shape", "threads"});
  for (int64_t s = 0; s < static_cast<int64_t>(std::size(kTransposeShapes)); ++s) {
    b->Args({s, 1});
    b->Args({s, 2});
  }
  b->UseRealTime();
}

void TransposeOutDims(const TransposeShape& sh, std::vector<int64_t>* dims,
                      std::vector<int64_t>* strides) {
  std::vector<int64_t> in_strides(sh.dims.size(), 1);
  for (int i = static_cast<int>(sh.dims.size()) - 2; i >= 0; --i)
    in_strides[i] = in_strides[i + 1] * sh.dims[i + 1];
  for (int64_t p : sh.perm) {
    dims->push_back(sh.dims[p]);
    strides->push_back(in_strides[p]);
  }
}

// The Transpose kernel of one backend on shape range(0) at range(1) threads.
void RunTranspose(benchmark::State& state, const char* backend) {
  const TransposeShape& sh = kTransposeShapes[state.range(0)];
  Tensor x = Filled(sh.dims);
  std::vector<int64_t> dims, strides;
  TransposeOutDims(sh, &dims, &strides);
  KernelCall call("Transpose");
  call.In(x).Out(DType::kF32).Attr("perm", sh.perm);
  if (state.range(1) > MaxThreads() && !SetMaxThreads(static_cast<int>(state.range(1))).ok()) {
    state.SkipWithError("no thread pool");
    return;
  }
  RunKernel(state, call, backend, {x}, {dims}, static_cast<int>(state.range(1)));
}

void BM_TransposeReference(benchmark::State& state) { RunTranspose(state, "reference"); }
BENCHMARK(BM_TransposeReference)->Apply(TransposeArgs);

// The dnnl kernel (transpose.cc), which picks between the two per shape.
void BM_TransposeKernel(benchmark::State& state) { RunTranspose(state, "dnnl"); }
BENCHMARK(BM_TransposeKernel)->Apply(TransposeArgs);

void BM_TransposeReorder(benchmark::State& state) {
  const TransposeShape& sh = kTransposeShapes[state.range(0)];
  Tensor x = Filled(sh.dims);
  std::vector<int64_t> dims, strides;
  TransposeOutDims(sh, &dims, &strides);
  Tensor y = *Tensor::Empty(DType::kF32, dims);
  KernelContext ctx(&HeapAllocator::Get(), 1);
  BoundPrimitive prim;
  absl::Status s = Guard("reorder", [&] {
    const dnnl::engine& engine = **CpuEngine();
    const dnnl::memory::desc src = PlainDesc(dnnl::memory::data_type::f32, dims, strides);
    const dnnl::memory::desc dst = DenseDesc(dnnl::memory::data_type::f32, dims);
    SetThreads(static_cast<int>(state.range(1)));
    dnnl::reorder::primitive_desc pd(engine, src, engine, dst, UserScratchpadAttr());
    prim.Bind(pd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
    return absl::OkStatus();
  });
  if (!s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  for (auto _ : state) {
    s = ExecuteBound(ctx, prim, {x.raw_data(), y.raw_data()});
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
  SetThreads(1);
}
BENCHMARK(BM_TransposeReorder)->Apply(TransposeArgs);

// ---- Pad: the reference kernel's element loop against the dnnl kernel's row copies ----
// BM_PadReference/shape/threads and BM_PadKernel/shape/threads (pad.cc). Shapes: swin_t's
// channels-last window padding at 64x64 and 224x224 (stage 1 and 2; at 224 the pads are 0),
// NCHW borders in reflect and constant mode, and a 1-D reflect pad of an audio chunk (Silero).
struct PadShape {
  std::vector<int64_t> dims, pads;
  const char* mode;
};
const PadShape kPadShapes[] = {
    {{1, 16, 16, 96}, {0, 0, 0, 0, 0, 5, 5, 0}, "constant"},
    {{1, 8, 8, 192}, {0, 0, 0, 0, 0, 6, 6, 0}, "constant"},
    {{1, 56, 56, 96}, {0, 0, 0, 0, 0, 0, 0, 0}, "constant"},
    {{1, 28, 28, 192}, {0, 0, 0, 0, 0, 0, 0, 0}, "constant"},
    {{1, 64, 56, 56}, {0, 0, 1, 1, 0, 0, 1, 1}, "constant"},
    {{1, 64, 56, 56}, {0, 0, 1, 1, 0, 0, 1, 1}, "reflect"},
    {{1, 576}, {0, 64, 0, 64}, "reflect"},
};

void PadArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"shape", "threads"});
  for (int64_t s = 0; s < static_cast<int64_t>(std::size(kPadShapes)); ++s) {
    b->Args({s, 1});
    b->Args({s, 2});
  }
  b->UseRealTime();
}

void RunPad(benchmark::State& state, const char* backend) {
  const PadShape& sh = kPadShapes[state.range(0)];
  Tensor x = Filled(sh.dims);
  Tensor pads =
      *Tensor::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(sh.pads.size())}, sh.pads);
  std::vector<int64_t> dims = sh.dims;
  const size_t rank = dims.size();
  for (size_t d = 0; d < rank; ++d) dims[d] += sh.pads[d] + sh.pads[d + rank];
  KernelCall call("Pad");
  call.In(x).In(pads).Out(DType::kF32).Attr("mode", std::string(sh.mode));
  if (state.range(1) > MaxThreads() && !SetMaxThreads(static_cast<int>(state.range(1))).ok()) {
    state.SkipWithError("no thread pool");
    return;
  }
  RunKernel(state, call, backend, {x, pads}, {dims}, static_cast<int>(state.range(1)));
}

void BM_PadReference(benchmark::State& state) { RunPad(state, "reference"); }
BENCHMARK(BM_PadReference)->Apply(PadArgs);
void BM_PadKernel(benchmark::State& state) { RunPad(state, "dnnl"); }
BENCHMARK(BM_PadKernel)->Apply(PadArgs);

// ---- Resize, GridSample, Concat: the reference kernels against the dnnl ones ----
// BM_Resize{Reference,Kernel}/shape/threads (resize.cc). Shapes: raft_small's final flow
// upsampling (x8, bilinear, align_corners) at a 128 x 128 input; an FPN level (nearest x2 as
// torch exports it, asymmetric + floor) and the same level to sizes of other ratios; PaddleOCR
// det's neck (nearest x2 of [1, 96, 60, 92]); bilinear x2 half_pixel (U-Net, the old oneDNN
// primitive's case); DeepLab's head (bilinear to 8x, half_pixel); a cubic x2.
struct ResizeShape {
  std::vector<int64_t> in, out;
  const char* mode;
  const char* transform;
  const char* nearest;
};
const ResizeShape kResizeShapes[] = {
    {{1, 2, 16, 16}, {1, 2, 128, 128}, "linear", "align_corners", "round_prefer_floor"},
    {{1, 256, 25, 38}, {1, 256, 50, 76}, "nearest", "asymmetric", "floor"},
    {{1, 256, 25, 38}, {1, 256, 50, 75}, "nearest", "asymmetric", "floor"},
    {{1, 96, 60, 92}, {1, 96, 120, 184}, "nearest", "asymmetric", "floor"},
    {{1, 64, 48, 48}, {1, 64, 96, 96}, "linear", "half_pixel", "round_prefer_floor"},
    {{1, 21, 12, 12}, {1, 21, 96, 96}, "linear", "half_pixel", "round_prefer_floor"},
    {{1, 16, 32, 32}, {1, 16, 64, 64}, "cubic", "half_pixel", "round_prefer_floor"},
};

void ShapeThreadArgs(benchmark::internal::Benchmark* b, int64_t shapes) {
  b->ArgNames({"shape", "threads"});
  for (int64_t s = 0; s < shapes; ++s) {
    b->Args({s, 1});
    b->Args({s, 2});
  }
  b->UseRealTime();
}

void ResizeArgs(benchmark::internal::Benchmark* b) {
  ShapeThreadArgs(b, static_cast<int64_t>(std::size(kResizeShapes)));
}

bool EnsureThreads(benchmark::State& state) {
  if (state.range(1) > MaxThreads() && !SetMaxThreads(static_cast<int>(state.range(1))).ok()) {
    state.SkipWithError("no thread pool");
    return false;
  }
  return true;
}

void RunResize(benchmark::State& state, const char* backend) {
  const ResizeShape& sh = kResizeShapes[state.range(0)];
  Tensor x = Filled(sh.in);
  Tensor sizes =
      *Tensor::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(sh.out.size())}, sh.out);
  KernelCall call("Resize");
  call.In(x).Absent().Absent().In(sizes).Out(DType::kF32);
  call.Attr("mode", std::string(sh.mode))
      .Attr("coordinate_transformation_mode", std::string(sh.transform))
      .Attr("nearest_mode", std::string(sh.nearest));
  if (!EnsureThreads(state)) return;
  RunKernel(state, call, backend, {x, Tensor(), Tensor(), sizes}, {sh.out},
            static_cast<int>(state.range(1)));
}

void BM_ResizeReference(benchmark::State& state) { RunResize(state, "reference"); }
BENCHMARK(BM_ResizeReference)->Apply(ResizeArgs);
void BM_ResizeKernel(benchmark::State& state) { RunResize(state, "dnnl"); }
BENCHMARK(BM_ResizeKernel)->Apply(ResizeArgs);

// BM_GridSample{Reference,Kernel}/shape/threads (grid_sample.cc). Shapes: raft_small's
// correlation lookup at a 128 x 128 input (16 x 16 = 256 pixels, a 9 x 9 window each, bilinear,
// zeros, align_corners, on the pyramid's levels 16 x 16 and 2 x 2), and a feature warp
// ([1, 64, 64, 64] by a dense flow grid, bilinear, border).
struct GridShape {
  std::vector<int64_t> in, grid;
  const char* mode;
  const char* pad;
  int64_t align;
};
const GridShape kGridShapes[] = {
    {{256, 1, 16, 16}, {256, 9, 9, 2}, "bilinear", "zeros", 1},
    {{256, 1, 2, 2}, {256, 9, 9, 2}, "bilinear", "zeros", 1},
    {{1, 64, 64, 64}, {1, 64, 64, 2}, "bilinear", "border", 0},
    {{1, 64, 64, 64}, {1, 64, 64, 2}, "nearest", "reflection", 0},
};

void GridArgs(benchmark::internal::Benchmark* b) {
  ShapeThreadArgs(b, static_cast<int64_t>(std::size(kGridShapes)));
}

void RunGridSample(benchmark::State& state, const char* backend) {
  const GridShape& sh = kGridShapes[state.range(0)];
  Tensor x = Filled(sh.in);
  Tensor grid = *Tensor::Empty(DType::kF32, sh.grid);
  for (int64_t i = 0; i < grid.numel(); ++i) {
    grid.data<float>()[i] = -1.1f + 2.2f * static_cast<float>((i * 7919) % 1000) / 1000.0f;
  }
  KernelCall call("GridSample");
  call.In(x).In(grid).Out(DType::kF32);
  call.Attr("mode", std::string(sh.mode))
      .Attr("padding_mode", std::string(sh.pad))
      .Attr("align_corners", sh.align);
  if (!EnsureThreads(state)) return;
  RunKernel(state, call, backend, {x, grid}, {{sh.in[0], sh.in[1], sh.grid[1], sh.grid[2]}},
            static_cast<int>(state.range(1)));
}

void BM_GridSampleReference(benchmark::State& state) { RunGridSample(state, "reference"); }
BENCHMARK(BM_GridSampleReference)->Apply(GridArgs);
void BM_GridSampleKernel(benchmark::State& state) { RunGridSample(state, "dnnl"); }
BENCHMARK(BM_GridSampleKernel)->Apply(GridArgs);

// BM_Concat{Reference,Kernel}/shape/threads (concat.cc). Shapes: DenseNet-121's channel concat
// at a 64 x 64 input (block 1: 64 + 6 x 32 channels at 16 x 16), SqueezeNet 1.1's fire module
// (two [1, 64, 15, 15]), PaddleOCR det's neck (four [1, 24, 160, 160]).
struct ConcatShape {
  std::vector<std::vector<int64_t>> in;
};
const ConcatShape kConcatShapes[] = {
    {{{1, 64, 16, 16},
      {1, 32, 16, 16},
      {1, 32, 16, 16},
      {1, 32, 16, 16},
      {1, 32, 16, 16},
      {1, 32, 16, 16},
      {1, 32, 16, 16}}},
    {{{1, 64, 15, 15}, {1, 64, 15, 15}}},
    {{{1, 24, 160, 160}, {1, 24, 160, 160}, {1, 24, 160, 160}, {1, 24, 160, 160}}},
};

void ConcatArgs(benchmark::internal::Benchmark* b) {
  ShapeThreadArgs(b, static_cast<int64_t>(std::size(kConcatShapes)));
}

void RunConcat(benchmark::State& state, const char* backend) {
  const ConcatShape& sh = kConcatShapes[state.range(0)];
  std::vector<Tensor> xs;
  KernelCall call("Concat");
  std::vector<int64_t> out = sh.in[0];
  out[1] = 0;
  for (const auto& d : sh.in) {
    xs.push_back(Filled(d));
    out[1] += d[1];
  }
  for (const Tensor& x : xs) call.In(x);
  call.Out(DType::kF32).Attr("axis", int64_t{1});
  if (!EnsureThreads(state)) return;
  RunKernel(state, call, backend, xs, {out}, static_cast<int>(state.range(1)));
}

void BM_ConcatReference(benchmark::State& state) { RunConcat(state, "reference"); }
BENCHMARK(BM_ConcatReference)->Apply(ConcatArgs);
void BM_ConcatKernel(benchmark::State& state) { RunConcat(state, "dnnl"); }
BENCHMARK(BM_ConcatKernel)->Apply(ConcatArgs);

}  // namespace
}  // namespace dynvm::onednn

BENCHMARK_MAIN();
