// dynvm's packed GEMM (packed_gemm.h) against the product summed in double (the oracle), and
// dynvm::Linear on it (a constant weight with an activation) against the reference kernel.
//
// Tolerance: a float dot product of k terms accumulated by FMAs (per K block, then added to C)
// is within k * eps * sum |a_p b_p| of the exact sum (eps = 2^-24 per rounding; at most one
// rounding per term). The test asserts |c - exact| <= (k + 2) * 2^-23 * sum |a_p b_p|, twice
// that bound, and reports the largest ratio seen.
#include "kernels/dnnl/packed_gemm.h"

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
#include "kernels/registry.h"
#include "kernels/testing.h"
#include "kernels/thread_pool.h"

namespace dynvm::onednn::packed_gemm {
namespace {

using testing::KernelCall;

struct Free {
  void operator()(float* p) const { std::free(p); }
};

std::unique_ptr<float, Free> PackedBuffer(int64_t k, int64_t n) {
  const size_t bytes = static_cast<size_t>(PackedFloats(k, n)) * sizeof(float);
  return std::unique_ptr<float, Free>(
      static_cast<float*>(std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) & ~63))));
}

// One product: rows [i0, i1) of C = A B with A [m, k] (row stride lda >= k) and B [k, n] given
// as `trans` 'N' ([k, n], row stride ldw) or 'T' ([n, k]). Checks every element of those rows
// against the double-precision sum, that the other rows are untouched, and that the epilogue
// sees every element of the range exactly once, after its last K block.
void CheckProduct(int64_t m, int64_t n, int64_t k, char trans, int64_t i0, int64_t i1,
                  std::mt19937& rng, double& worst) {
  SCOPED_TRACE(absl::StrCat("m=", m, " n=", n, " k=", k, " trans=", std::string(1, trans),
                            " rows [", i0, ", ", i1, ")"));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t lda = k + 3, ldw = (trans == 'N' ? n : k) + 5, ldc = n + 2;
  std::vector<float> a(static_cast<size_t>(m * lda)),
      w(static_cast<size_t>((trans == 'N' ? k : n) * ldw));
  for (float& v : a) v = dist(rng);
  for (float& v : w) v = dist(rng);
  auto b_at = [&](int64_t q, int64_t j) {
    return trans == 'N' ? w[static_cast<size_t>(q * ldw + j)] : w[static_cast<size_t>(j * ldw + q)];
  };
  std::unique_ptr<float, Free> packed = PackedBuffer(k, n);
  ASSERT_NE(packed, nullptr);
  Pack(trans, k, n, w.data(), ldw, packed.get());
  constexpr float kSentinel = 12345.0f;
  std::vector<float> c(static_cast<size_t>(m * ldc), kSentinel), seen(c.size(), kSentinel);
  std::vector<int> visits(c.size(), 0);
  Multiply(i0, i1, n, k, a.data() + 0, lda, packed.get(), c.data(), ldc,
           [&](int64_t r0, int64_t rows, int64_t j0, int64_t cols) {
             for (int64_t r = r0; r < r0 + rows; ++r) {
               for (int64_t j = j0; j < j0 + cols; ++j) {
                 ++visits[static_cast<size_t>(r * ldc + j)];
                 seen[static_cast<size_t>(r * ldc + j)] = c[static_cast<size_t>(r * ldc + j)];
               }
             }
           });
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = static_cast<size_t>(r * ldc + j);
      if (r < i0 || r >= i1 || j >= n) {
        ASSERT_EQ(c[at], kSentinel) << "wrote outside the range at " << r << "," << j;
        ASSERT_EQ(visits[at], 0);
        continue;
      }
      double exact = 0.0, magnitude = 0.0;
      for (int64_t q = 0; q < k; ++q) {
        const double t = static_cast<double>(a[static_cast<size_t>(r * lda + q)]) * b_at(q, j);
        exact += t;
        magnitude += std::abs(t);
      }
      const double bound = (k + 2) * std::ldexp(1.0, -23) * magnitude + 1e-30;
      const double err = std::abs(c[at] - exact);
      worst = std::max(worst, err / bound);
      ASSERT_LE(err, bound) << "at " << r << "," << j << ": " << c[at] << " vs " << exact;
      ASSERT_EQ(visits[at], 1) << "epilogue visits at " << r << "," << j;
      ASSERT_EQ(seen[at], c[at]) << "the epilogue ran before the last K block at " << r << "," << j;
    }
  }
}

// Row tails (1-5 rows past the 6-row tiles), ragged last panels, K across blocks, equal row
// blocks past kRowBlock, sub-ranges of rows (a thread's share), both weight layouts.
TEST(PackedGemm, MatchesTheProductInDouble) {
  if (!Supported()) GTEST_SKIP() << "needs AVX2 and FMA without AVX-512F";
  std::mt19937 rng(7);
  double worst = 0.0;
  for (char trans : {'N', 'T'}) {
    for (int64_t m : {1, 5, 6, 13, 200}) {
      for (int64_t n : {1, 16, 17, 150}) {
        for (int64_t k : {int64_t{1}, int64_t{9}, kDepth, kDepth + 3, 2 * kDepth + 100}) {
          if (testing::kSanitized && m * n * k > 200000) continue;
          CheckProduct(m, n, k, trans, 0, m, rng, worst);
          if (m >= 13) CheckProduct(m, n, k, trans, 5, m - 1, rng, worst);
        }
      }
    }
  }
  std::printf("largest error / bound: %.3g\n", worst);
}

// Pack's layout: panel p holds B[q][16p + j] at 16 K p + 16 q + j, zeros past N.
TEST(PackedGemm, PackLayout) {
  const int64_t k = 3, n = 20;
  std::vector<float> w(static_cast<size_t>(k * n));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i + 1);
  std::unique_ptr<float, Free> packed = PackedBuffer(k, n);
  ASSERT_EQ(PackedFloats(k, n), 2 * 16 * k);
  Pack('N', k, n, w.data(), n, packed.get());
  for (int64_t p = 0; p < 2; ++p) {
    for (int64_t q = 0; q < k; ++q) {
      for (int64_t j = 0; j < 16; ++j) {
        const float want = 16 * p + j < n ? w[static_cast<size_t>(q * n + 16 * p + j)] : 0.0f;
        EXPECT_EQ(packed.get()[16 * k * p + 16 * q + j], want) << p << " " << q << " " << j;
      }
    }
  }
}

Tensor RandomTensor(std::vector<int64_t> dims, std::mt19937& rng) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// dynvm::Linear with constant_weights = 1 and an activation (the packed path where
// Supported(), dnnl_sgemm elsewhere) against the reference kernel, at 1 and 2 threads; one
// kernel object runs two weights in turn, twice, so a packed copy must be told apart by its
// weight (the cache) and reused (the second round).
TEST(PackedGemm, LinearWithConstantWeightsMatchesTheReference) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  std::mt19937 rng(11);
  const char* acts[] = {"Relu", "Tanh", "Sigmoid", "Gelu", "GeluTanh", "Silu"};
  int i = 0;
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
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

}  // namespace
}  // namespace dynvm::onednn::packed_gemm
