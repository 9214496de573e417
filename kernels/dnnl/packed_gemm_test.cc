// dynvm::Linear on dynvm's packed GEMM (kernels/cpu/packed_gemm.h; a constant weight with an
// activation) against the reference kernel. The microkernel itself: kernels/cpu/gemm_test.cc.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/heap_allocator.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/registry.h"
#include "kernels/testing.h"
#include "kernels/thread_pool.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;

Tensor RandomTensor(std::vector<int64_t> dims, std::mt19937& rng) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// dynvm::Linear with constant_weights = 1 and an activation (the packed path where
// choice::UsePackedGemm takes the shape, dnnl_sgemm elsewhere) against the reference kernel, at
// every microkernel level, at 1 and 2 threads; one kernel object runs two weights in turn,
// twice, so a packed copy must be told apart by its weight (the cache) and reused (the second
// round).
TEST(PackedGemm, LinearWithConstantWeightsMatchesTheReference) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  std::mt19937 rng(11);
  const char* acts[] = {"Relu", "Tanh", "Sigmoid", "Gelu", "GeluTanh", "Silu"};
  int i = 0;
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting level(isa);
    SCOPED_TRACE(cpu::IsaName(isa));
    for (int64_t rows : {8, 13, 130}) {
      for (int64_t tb : {0, 1}) {
        const int64_t k = 300, n = 70;
        const std::string act = acts[i++ % 6];
        SCOPED_TRACE(absl::StrCat("rows=", rows, " trans_b=", tb, " act=", act));
        Tensor x = RandomTensor({2, rows, k}, rng), b = RandomTensor({n}, rng);
        Tensor w1 = RandomTensor(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, rng);
        Tensor w2 = RandomTensor(std::vector<int64_t>(w1.dims().begin(), w1.dims().end()), rng);
        KernelCall call("Linear", "dynvm");
        call.In(x).In(w1).In(b).Out(DType::kF32).Attr("trans_b", tb).Attr("activation", act);
        call.Attr("constant_weights", int64_t{1});
        KernelSpec spec = call.spec();
        spec.backend = "dnnl";
        absl::StatusOr<std::unique_ptr<Kernel>> kernel = KernelRegistry::Global().Create(spec);
        ASSERT_TRUE(kernel.ok()) << kernel.status();
        for (int threads : {1, 2}) {
          KernelContext ctx(&HeapAllocator::Get(), threads);
          for (int round = 0; round < 2; ++round) {
            for (const Tensor* w : {&w1, &w2}) {
              KernelCall ref("Linear", "dynvm");
              ref.In(x).In(*w).In(b).Out(DType::kF32).Attr("trans_b", tb).Attr("activation", act);
              ref.Backend("reference");
              absl::StatusOr<std::vector<Tensor>> want = ref.Run(1);
              ASSERT_TRUE(want.ok()) << want.status();
              Tensor y;
              Tensor* outs[1] = {&y};
              ASSERT_TRUE((*kernel)->Run(ctx, {&x, w, &b}, outs).ok());
              const std::vector<double> g = testing::ToDoubles(y);
              const std::vector<double> e = testing::ToDoubles((*want)[0]);
              ASSERT_EQ(g.size(), e.size());
              for (size_t j = 0; j < g.size(); ++j) {
                ASSERT_NEAR(g[j], e[j], 2e-5 * (1.0 + std::abs(e[j])))
                    << j << " threads=" << threads << " round=" << round;
              }
            }
          }
        }
      }
    }
  }
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

}  // namespace
}  // namespace dynvm::onednn
