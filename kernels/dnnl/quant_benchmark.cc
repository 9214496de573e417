// The quantization kernels of the oneDNN backend against the reference kernels and against the
// f32 path they replace: QLinearMatMul (int8 GEMM) vs the f32 MatMul at the same sizes, and
// QuantizeLinear / DequantizeLinear vector loops vs the reference loops, QLinearConv vs the f32
// Conv and the reference. One thread.
#include <memory>
#include <string>
#include <vector>

#include "allocator/heap_allocator.h"
#include "benchmark/benchmark.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;

Tensor Ints(DType dtype, std::vector<int64_t> dims) {
  Tensor t = *Tensor::Empty(dtype, dims);
  for (int64_t i = 0; i < t.numel(); ++i) {
    static_cast<uint8_t*>(t.raw_data())[i] = static_cast<uint8_t>((i * 37) % 251);
  }
  return t;
}

Tensor Floats(std::vector<int64_t> dims) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = 0.01f * static_cast<float>(1 + i % 89);
  return t;
}

Tensor Scalar(DType dtype, float v) {
  Tensor t = *Tensor::Empty(dtype, {});
  if (dtype == DType::kF32) {
    t.data<float>()[0] = v;
  } else {
    static_cast<uint8_t*>(t.raw_data())[0] = static_cast<uint8_t>(v);
  }
  return t;
}

void Run(benchmark::State& state, const KernelCall& call, const std::string& backend,
         const std::vector<Tensor>& inputs) {
  KernelSpec spec = call.spec();
  spec.backend = backend;  // the kernel of `backend`, with the registry's fallback after it
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  if (!k.ok()) {
    state.SkipWithError(std::string(k.status().message()).c_str());
    return;
  }
  state.SetLabel((*k)->name());
  KernelContext ctx(&HeapAllocator::Get(), 1);
  std::vector<const Tensor*> in;
  for (const Tensor& t : inputs) in.push_back(&t);
  Tensor out;
  std::vector<Tensor*> outs = {&out};
  for (auto _ : state) {
    absl::Status s = (*k)->Run(ctx, in, outs);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
}

constexpr int64_t kK = 1024, kN = 1024;

// Arg 0: M; arg 1: 1 for the dnnl kernel, 0 for the reference.
void QLinearMatMul(benchmark::State& state) {
  const int64_t m = state.range(0);
  Tensor a = Ints(DType::kU8, {m, kK}), b = Ints(DType::kI8, {kK, kN});
  Tensor as = Scalar(DType::kF32, 0.02f), bs = Floats({kN}), ys = Scalar(DType::kF32, 3.0f);
  Tensor az = Scalar(DType::kU8, 128), bz = Scalar(DType::kI8, 0), yz = Scalar(DType::kU8, 128);
  KernelCall call("QLinearMatMul");
  call.In(a).In(as).In(az).In(b).In(bs).In(bz).In(ys).In(yz).Out(DType::kU8);
  Run(state, call, state.range(1) ? "dnnl" : "reference", {a, as, az, b, bs, bz, ys, yz});
  state.counters["GOP/s"] = benchmark::Counter(2.0 * m * kK * kN * 1e-9 * state.iterations(),
                                               benchmark::Counter::kIsRate);
}
BENCHMARK(QLinearMatMul)
    ->ArgNames({"M", "dnnl"})
    ->Args({1, 1})
    ->Args({16, 1})
    ->Args({64, 1})
    ->Args({1, 0})
    ->Args({16, 0});

// The f32 MatMul the QDQ form computes when not fused (dnnl).
void MatMulF32(benchmark::State& state) {
  const int64_t m = state.range(0);
  Tensor a = Floats({m, kK}), b = Floats({kK, kN});
  KernelCall call("MatMul");
  call.In(a).In(b).Out(DType::kF32);
  Run(state, call, "dnnl", {a, b});
  state.counters["GOP/s"] = benchmark::Counter(2.0 * m * kK * kN * 1e-9 * state.iterations(),
                                               benchmark::Counter::kIsRate);
}
BENCHMARK(MatMulF32)->ArgNames({"M"})->Arg(1)->Arg(16)->Arg(64);

// Arg 0: 1 quantize, 0 dequantize; arg 1: 1 dnnl, 0 reference. 1M elements, per tensor.
void QuantizeDequantize(benchmark::State& state) {
  const bool quantize = state.range(0) != 0;
  Tensor x = quantize ? Floats({1024, 1024}) : Ints(DType::kU8, {1024, 1024});
  Tensor s = Scalar(DType::kF32, 0.05f), z = Scalar(DType::kU8, 128);
  KernelCall call(quantize ? "QuantizeLinear" : "DequantizeLinear");
  call.In(x).In(s).In(z).Out(quantize ? DType::kU8 : DType::kF32);
  Run(state, call, state.range(1) ? "dnnl" : "reference", {x, s, z});
  state.SetItemsProcessed(state.iterations() * x.numel());
}
BENCHMARK(QuantizeDequantize)
    ->ArgNames({"quantize", "dnnl"})
    ->Args({1, 1})
    ->Args({1, 0})
    ->Args({0, 1})
    ->Args({0, 0});

// Arg 0: 1 dnnl, 0 reference; arg 1: 1 the f32 Conv (dnnl) instead. [1, 64, 28, 28] by
// [64, 64, 3, 3], pads 1.
void QLinearConv(benchmark::State& state) {
  const bool f32 = state.range(1) != 0;
  const std::vector<int64_t> pads = {1, 1, 1, 1};
  if (f32) {
    Tensor x = Floats({1, 64, 28, 28}), w = Floats({64, 64, 3, 3});
    KernelCall call("Conv");
    call.In(x).In(w).Out(DType::kF32).Attr("pads", pads);
    Run(state, call, "dnnl", {x, w});
  } else {
    Tensor x = Ints(DType::kU8, {1, 64, 28, 28}), w = Ints(DType::kI8, {64, 64, 3, 3});
    Tensor xs = Scalar(DType::kF32, 0.02f), ws = Floats({64}), ys = Scalar(DType::kF32, 30.0f);
    Tensor xz = Scalar(DType::kU8, 128), wz = Scalar(DType::kI8, 0), yz = Scalar(DType::kU8, 128);
    KernelCall call("QLinearConv");
    call.In(x).In(xs).In(xz).In(w).In(ws).In(wz).In(ys).In(yz).Out(DType::kU8).Attr("pads", pads);
    Run(state, call, state.range(0) ? "dnnl" : "reference", {x, xs, xz, w, ws, wz, ys, yz});
  }
  state.counters["GOP/s"] = benchmark::Counter(
      2.0 * 64 * 28 * 28 * 64 * 9 * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(QLinearConv)->ArgNames({"dnnl", "f32"})->Args({1, 0})->Args({0, 0})->Args({1, 1});

}  // namespace
}  // namespace dynvm::onednn

BENCHMARK_MAIN();
