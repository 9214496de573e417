// Counts calls into the system allocator (malloc and friends, interposed below) while oneDNN
// kernels repeat a run at one site: the decode paths (a matmul at M=1, an LSTM step at batch
// 1) must make none after their first run on one thread. With more threads, oneDNN 2.6's
// OpenMP layer wraps each parallel call in a std::function (one small allocation per GEMM
// call), and dnnl_primitive_execute builds an argument map per call: both are measured and
// bounded here, not zero. Not built with sanitizers (they own malloc).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "allocator/heap_allocator.h"
#include "gtest/gtest.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}

namespace {
std::atomic<int64_t> g_calls{0};
std::atomic<bool> g_counting{false};
inline void Count() {
  if (g_counting.load(std::memory_order_relaxed)) g_calls.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* malloc(size_t n) {
  Count();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  Count();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  Count();
  return __libc_realloc(p, n);
}
void free(void* p) { __libc_free(p); }
void* memalign(size_t a, size_t n) {
  Count();
  return __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) {
  Count();
  return __libc_memalign(a, n);
}
int posix_memalign(void** p, size_t a, size_t n) {
  Count();
  *p = __libc_memalign(a, n);
  return *p != nullptr ? 0 : 12;  // ENOMEM
}
}

namespace dynvm {
namespace {

using testing::KernelCall;

Tensor Filled(std::vector<int64_t> dims) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = 0.001f * static_cast<float>(i % 89 - 44);
  return t;
}

// System allocator calls of `runs` repeat runs of the call's kernel at one site, after a
// first run; outputs are preallocated (as the compiler plans them).
int64_t CallsPerRepeat(KernelCall& call, const std::vector<Tensor>& inputs,
                       const std::vector<std::vector<int64_t>>& out_dims, int threads, int runs) {
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(call.spec());
  EXPECT_TRUE(k.ok()) << k.status();
  if (!k.ok()) return -1;
  KernelContext ctx(&HeapAllocator::Get(), threads);
  std::vector<const Tensor*> in;
  for (const Tensor& t : inputs) in.push_back(t.defined() ? &t : nullptr);
  std::vector<Tensor> outs;
  for (const auto& d : out_dims) outs.push_back(*Tensor::Empty(DType::kF32, d));
  std::vector<Tensor*> out;
  for (Tensor& t : outs) out.push_back(&t);
  EXPECT_TRUE((*k)->Run(ctx, in, out).ok());
  g_calls = 0;
  g_counting = true;
  for (int i = 0; i < runs; ++i) {
    absl::Status s = (*k)->Run(ctx, in, out);
    if (!s.ok()) {
      g_counting = false;
      ADD_FAILURE() << s;
      return -1;
    }
  }
  g_counting = false;
  return g_calls.load();
}

TEST(DnnlAllocations, MatMulAtOneRowAllocatesNothing) {
  Tensor a = Filled({1, 1024}), b = Filled({1024, 1024});
  KernelCall call("MatMul");
  call.In(a).In(b).Out(DType::kF32);
  EXPECT_EQ(CallsPerRepeat(call, {a, b}, {{1, 1024}}, 1, 20), 0);
  const int64_t two = CallsPerRepeat(call, {a, b}, {{1, 1024}}, 2, 20);
  std::printf("MatMul [1,1024]x[1024,1024], 2 threads: %.1f calls per run\n", two / 20.0);
  EXPECT_LE(two, 20);
}

TEST(DnnlAllocations, LinearLayerDecodeAllocatesNothing) {
  Tensor x = Filled({1, 512}), w = Filled({256, 512}), bias = Filled({256});
  KernelCall call("Gemm");
  call.In(x).In(w).In(bias).Out(DType::kF32).Attr("transB", int64_t{1});
  EXPECT_EQ(CallsPerRepeat(call, {x, w, bias}, {{1, 256}}, 1, 20), 0);
}

TEST(DnnlAllocations, LstmDecodeStepAllocatesNothing) {
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    const int64_t h = 256;
    Tensor x = Filled({1, 1, h}), w = Filled({1, 4 * h, h}), r = Filled({1, 4 * h, h});
    Tensor b = Filled({1, 8 * h}), h0 = Filled({1, 1, h}), c0 = Filled({1, 1, h});
    KernelCall call("LSTM");
    call.In(x).In(w).In(r).In(b).Absent().In(h0).In(c0);
    call.Out(DType::kF32).Out(DType::kF32).Out(DType::kF32).Attr("hidden_size", h);
    const int64_t calls = CallsPerRepeat(call, {x, w, r, b, Tensor(), h0, c0},
                                         {{1, 1, 1, h}, {1, 1, h}, {1, 1, h}}, threads, 20);
    if (threads == 1) {
      EXPECT_EQ(calls, 0);
    } else {
      std::printf("LSTM step hidden 256, 2 threads: %.1f calls per step\n", calls / 20.0);
      EXPECT_LE(calls, 2 * 20);  // one per GEMM (x*W^T, h*R^T)
    }
  }
}

// A conv site after 64 widths (its primitive cache full and evicting) runs a repeated width
// with no binding and no allocation of its own: what remains is oneDNN's argument map per
// primitive execute (the conv and its layout reorders), the same count every run.
TEST(DnnlAllocations, ConvAfterWidthChurnAllocatesOnlyOneDnnArgumentMaps) {
  Tensor w = Filled({16, 8, 3, 3});
  KernelCall call("Conv");
  call.In(Filled({1, 8, 16, 16}))
      .In(w)
      .Out(DType::kF32)
      .Attr("pads", std::vector<int64_t>{1, 1, 1, 1});
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(call.spec());
  ASSERT_TRUE(k.ok()) << k.status();
  KernelContext ctx(&HeapAllocator::Get(), 1);
  std::vector<Tensor> xs;
  for (int64_t width = 100; width < 164; ++width) xs.push_back(Filled({1, 8, 16, width}));
  auto run = [&](const Tensor& x, Tensor* y) {
    const Tensor* in[] = {&x, &w};
    Tensor* out[] = {y};
    return (*k)->Run(ctx, in, out);
  };
  for (const Tensor& x : xs) {
    Tensor y = *Tensor::Empty(DType::kF32, {1, 16, 16, x.dim(3)});
    ASSERT_TRUE(run(x, &y).ok());
  }
  Tensor y = *Tensor::Empty(DType::kF32, {1, 16, 16, 163});
  int64_t per_run[2];
  for (int64_t& calls : per_run) {
    g_calls = 0;
    g_counting = true;
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(run(xs.back(), &y).ok());
    g_counting = false;
    calls = g_calls.load();
  }
  std::printf("Conv [1,8,16,163] after 64 widths: %.1f system allocator calls per run\n",
              per_run[1] / 10.0);
  EXPECT_EQ(per_run[0], per_run[1]);
  EXPECT_LE(per_run[1], 10 * 3 * 16);  // at most 3 primitive executes, each an argument map
}

// Not a requirement: oneDNN 2.6's dnnl_primitive_execute builds a small argument map per
// call. Printed for the record.
TEST(DnnlAllocations, PrimitiveExecuteOverheadIsSmall) {
  Tensor a = Filled({64, 1024}), b = Filled({1024});
  KernelCall add("Add");
  add.In(a).In(b).Out(DType::kF32);
  const int64_t calls = CallsPerRepeat(add, {a, b}, {{64, 1024}}, 1, 10);
  std::printf("Add [64,1024]: %.1f system allocator calls per run\n", calls / 10.0);
  EXPECT_LE(calls, 10 * 16);
}

}  // namespace
}  // namespace dynvm
