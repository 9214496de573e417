// dynvm::Linear on dynvm's packed GEMM (kernels/cpu/packed_gemm.h; a constant weight with an
// activation) against the reference kernel, and dynvm::MatMul on a weight stored as the panels
// (b_packed_n) against a double-precision sum. The microkernel itself: kernels/cpu/gemm_test.cc.

#include "kernels/cpu/packed_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/heap_allocator.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/dnnl/choice.h"
#include "kernels/reference/linear.h"
#include "kernels/registry.h"
#include "kernels/testing.h"
#include "kernels/thread_pool.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;

reference::LinearAct ActOf(const std::string& act) {
  using reference::LinearAct;
  if (act == "Relu") return LinearAct::kRelu;
  if (act == "Tanh") return LinearAct::kTanh;
  if (act == "Sigmoid") return LinearAct::kSigmoid;
  if (act == "Gelu") return LinearAct::kGelu;
  if (act == "GeluTanh") return LinearAct::kGeluTanh;
  if (act == "Silu") return LinearAct::kSilu;
  return LinearAct::kNone;
}

Tensor RandomTensor(std::vector<int64_t> dims, std::mt19937& rng) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// packed_gemm::MultiplyStreamed (B produced piece by piece: chunks of columns over one depth block,
// as MatMulNBits' prompt path does) gives Multiply's bits on the whole packed B, at every level,
// for row counts across the row blocks and tiles, ragged N, chunks of one panel and of several,
// both depths (K 300-306: two depth blocks at kDepth); each piece is produced into one reused
// buffer (poisoned first), as the kernel's scratch is.
TEST(PackedGemm, StreamedChunksGiveMultiplysBits) {
  std::mt19937 rng(12);
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting scoped(isa);
    for (int64_t m : {7, 33, 200, 400}) {
      const int64_t k = 300 + m % 7, n = 16 * 9 + m % 13;
      const Tensor a = RandomTensor({m, k}, rng), w = RandomTensor({n, k}, rng);
      std::vector<float> packed(cpu::packed_gemm::PackedFloats(k, n));
      cpu::packed_gemm::Pack('T', k, n, w.data<float>(), k, packed.data());
      for (int64_t depth : {cpu::packed_gemm::kDepth, cpu::packed_gemm::kDeepDepth}) {
        std::vector<float> want(m * n), got(m * n, -7.0f);
        auto none = [](int64_t, int64_t, int64_t, int64_t) {};
        cpu::packed_gemm::Multiply(0, m, n, k, a.data<float>(), k, packed.data(), want.data(), n,
                                   none, depth);
        for (int64_t chunk : {int64_t{16}, int64_t{64}}) {
          std::vector<float> buffer(chunk * k);
          auto produce = [&](int64_t j0, int64_t j1, int64_t q0, int64_t q1) {
            std::fill(buffer.begin(), buffer.end(), NAN);
            for (int64_t p = j0 / 16; p < (j1 + 15) / 16; ++p) {
              std::copy(packed.begin() + (p * k + q0) * 16, packed.begin() + (p * k + q1) * 16,
                        buffer.begin() + (p - j0 / 16) * (q1 - q0) * 16);
            }
            return static_cast<const float*>(buffer.data());
          };
          cpu::packed_gemm::MultiplyStreamed(0, m, n, k, a.data<float>(), k, chunk, produce,
                                             got.data(), n, none, depth);
          for (int64_t i = 0; i < m * n; ++i) {
            ASSERT_EQ(got[i], want[i]) << cpu::IsaName(isa) << " m " << m << " depth " << depth
                                       << " chunk " << chunk << " at " << i;
          }
        }
      }
    }
  }
}

// dynvm::Linear with constant_weights = 1, with or without an activation (the packed path where
// choice::UsePackedGemm takes the shape, dnnl_sgemm elsewhere; then the packed path forced at
// every row count, one row on the GEMV of the panels) against the reference kernel, at
// every microkernel level, at 1 and 2 threads; one kernel object runs two weights in turn,
// twice, so a packed copy must be told apart by its weight (the cache) and reused (the second
// round).
TEST(PackedGemm, LinearWithConstantWeightsMatchesTheReference) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  std::mt19937 rng(11);
  const char* acts[] = {"Relu", "Tanh", "", "Sigmoid", "Gelu", "GeluTanh", "Silu"};
  int i = 0;
  for (const std::optional<bool> forced : {std::optional<bool>(), std::optional<bool>(true)}) {
    choice::ForceForTesting(choice::Rule::kPackedGemm, forced);
    for (cpu::Isa isa : cpu::SupportedIsas()) {
      cpu::ScopedIsaForTesting level(isa);
      SCOPED_TRACE(absl::StrCat(cpu::IsaName(isa), forced ? " packed GEMM forced" : ""));
      for (int64_t rows : {1, 8, 13, 17, 130}) {
        for (int64_t tb : {0, 1}) {
          const int64_t k = 300, n = 70;
          const std::string act = acts[i++ % 7];
          SCOPED_TRACE(absl::StrCat("rows=", rows, " trans_b=", tb, " act=", act));
          Tensor x = RandomTensor({2, rows, k}, rng), b = RandomTensor({n}, rng);
          Tensor w1 =
              RandomTensor(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, rng);
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
  }
  choice::ForceForTesting(choice::Rule::kPackedGemm, std::nullopt);
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// dynvm::MatMul(A, panels, b_packed_n = N) (compiler/transpose_weights.h stores such weights):
// the oneDNN kernel (MultiplyVector at one row, packed_gemm::Multiply above, split by panels or
// by rows)
// at every microkernel level and the reference kernel (the panels read by index), at 1 and 2
// threads, against the sum in double of A times the plain [K, N] weight: one row (rank-1 and
// rank-2 A), a prompt's rows in a batch, odd K and N (N not a multiple of 16, padded with
// zeros), K = 1, sizes that split on the pool; and the same bits at 1 and 2 threads.
TEST(PackedGemm, MatMulOnPackedWeightsMatchesADoubleSum) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  std::mt19937 rng(23);
  struct Case {
    std::vector<int64_t> a_dims;
    int64_t n;
  };
  const std::vector<Case> cases = {
      {{300}, 70},
      {{1, 300}, 257},
      {{1, 1, 1024}, 200},
      {{2, 7, 37}, 17},
      {{130, 300}, 70},
      {{3, 1}, 33},
      {{1, 5}, 1},
      {{64, 512}, 144},
      // Several row blocks, split by rows at 2 threads (packed_gemm::SplitRows).
      {{2, 203, 61}, 37},
  };
  for (const Case& c : cases) {
    const int64_t k = c.a_dims.back(), n = c.n;
    SCOPED_TRACE(absl::StrCat("A ", DimsString(c.a_dims), " N ", n));
    const Tensor a = RandomTensor(c.a_dims, rng), w = RandomTensor({k, n}, rng);
    Tensor panels = *Tensor::Empty(DType::kF32, {(n + 15) / 16, k, 16});
    cpu::packed_gemm::Pack('N', k, n, w.data<float>(), n, panels.data<float>());
    const int64_t m = a.numel() / k;
    std::vector<double> want(static_cast<size_t>(m * n)), scale(want.size());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, abs_sum = 0;
        for (int64_t q = 0; q < k; ++q) {
          const double p = double{a.data<float>()[i * k + q]} * w.data<float>()[q * n + j];
          sum += p;
          abs_sum += std::abs(p);
        }
        want[i * n + j] = sum;
        scale[i * n + j] = abs_sum;
      }
    }
    std::vector<int64_t> out_dims(c.a_dims.begin(), c.a_dims.end() - 1);
    out_dims.push_back(n);
    KernelCall call("MatMul", "dynvm");
    call.In(a).In(panels).Out(DType::kF32).Attr("b_packed_n", n);
    auto check = [&](const Tensor& y) {
      ASSERT_EQ(y.dims(), absl::MakeConstSpan(out_dims));
      const std::vector<double> g = testing::ToDoubles(y);
      for (size_t j = 0; j < g.size(); ++j) {
        // The rounding bound of a sum of k products in float: k u (u = 2^-24), plus one rounding.
        ASSERT_NEAR(g[j], want[j], (static_cast<double>(k) + 1) * 0x1p-24 * scale[j])
            << "element " << j;
      }
    };
    for (int threads : {1, 2}) {
      SCOPED_TRACE(absl::StrCat("reference threads=", threads));
      KernelCall ref = call;
      ref.Backend("reference");
      absl::StatusOr<std::vector<Tensor>> r = ref.Run(threads);
      ASSERT_TRUE(r.ok()) << r.status();
      check((*r)[0]);
    }
    KernelSpec spec = call.spec();
    spec.backend = "dnnl";
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = KernelRegistry::Global().Create(spec);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    EXPECT_NE((*kernel)->name().find("packed"), std::string::npos) << (*kernel)->name();
    for (cpu::Isa isa : cpu::SupportedIsas()) {
      cpu::ScopedIsaForTesting level(isa);
      std::vector<double> first;
      for (int threads : {1, 2}) {
        SCOPED_TRACE(absl::StrCat(cpu::IsaName(isa), " threads=", threads));
        KernelContext ctx(&HeapAllocator::Get(), threads);
        Tensor y;
        Tensor* outs[1] = {&y};
        const absl::Status st = (*kernel)->Run(ctx, {&a, &panels}, outs);
        ASSERT_TRUE(st.ok()) << st;
        check(y);
        if (threads == 1) {
          first = testing::ToDoubles(y);
        } else {
          EXPECT_EQ(testing::ToDoubles(y), first) << "the bits depend on the thread count";
        }
      }
    }
  }
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// dynvm::Linear(X, panels, B?, b_packed_n = N) (compiler/transpose_weights.h stores a weight only
// products read so): the oneDNN kernel (the packed GEMM at every row count: MultiplyVector at one
// row, Multiply with the bias and activation per block above) at every microkernel level, at 1
// and 2 threads, and the reference kernel (the panels read by index), against the sum in double
// of X times the plain [K, N] weight plus the bias, through the activation: one row, rows that
// end in every tail of the 24- and 6-row tiles, leading batch dims, odd K and N (N not a
// multiple of 16), K across the depth blocks, rows across several row blocks (split by rows at 2
// threads), with and without a bias and an activation.
TEST(PackedGemm, LinearOnPackedWeightsMatchesADoubleSum) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  std::mt19937 rng(37);
  struct Case {
    std::vector<int64_t> x_dims;
    int64_t n;
    bool bias;
    const char* act;
  };
  const std::vector<Case> cases = {
      {{1, 300}, 70, true, ""},
      {{300}, 33, false, "Gelu"},
      {{17, 257}, 129, true, ""},
      {{2, 25, 131}, 40, true, "Relu"},
      {{3, 7, 96}, 384, false, ""},
      {{50, 600}, 17, true, "GeluTanh"},
      {{197, 77}, 200, true, "Silu"},
      {{8, 1}, 48, true, ""},
      {{2, 64, 40}, 257, false, "Tanh"},
      // Several row blocks and depth blocks, split by rows at 2 threads (packed_gemm::SplitRows).
      {{413, 300}, 50, true, "Gelu"}};
  for (const Case& c : cases) {
    const int64_t k = c.x_dims.back(), n = c.n, m = [&] {
      int64_t r = 1;
      for (size_t i = 0; i + 1 < c.x_dims.size(); ++i) r *= c.x_dims[i];
      return r;
    }();
    SCOPED_TRACE(absl::StrCat("X ", DimsString(c.x_dims), " N ", n, " act '", c.act, "'"));
    const Tensor x = RandomTensor(c.x_dims, rng), w = RandomTensor({k, n}, rng);
    const Tensor bias = RandomTensor({n}, rng);
    Tensor panels = *Tensor::Empty(DType::kF32, {(n + 15) / 16, k, 16});
    cpu::packed_gemm::Pack('N', k, n, w.data<float>(), n, panels.data<float>());
    // The bound: k + 1 roundings of the products' magnitudes, through the activation (slope at
    // most 1.13, GELU's), plus the activation's own few ulps.
    std::vector<double> want(static_cast<size_t>(m * n)), tol(want.size());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = c.bias ? bias.data<float>()[j] : 0.0, scale = std::abs(sum);
        for (int64_t q = 0; q < k; ++q) {
          const double p = double{x.data<float>()[i * k + q]} * w.data<float>()[q * n + j];
          sum += p;
          scale += std::abs(p);
        }
        want[i * n + j] = reference::LinearActivation(ActOf(c.act), sum);
        tol[i * n + j] = 1.2 * (static_cast<double>(k) + 2) * 0x1p-24 * scale +
                         1e-6 * (1.0 + std::abs(want[i * n + j]));
      }
    }
    std::vector<int64_t> out_dims(c.x_dims.begin(), c.x_dims.end() - 1);
    out_dims.push_back(n);
    KernelCall call("Linear", "dynvm");
    call.In(x).In(panels);
    if (c.bias) call.In(bias);
    call.Out(DType::kF32).Attr("b_packed_n", n).Attr("activation", std::string(c.act));
    call.Attr("constant_weights", int64_t{1});
    auto check = [&](const Tensor& y) {
      ASSERT_EQ(y.dims(), absl::MakeConstSpan(out_dims));
      const std::vector<double> g = testing::ToDoubles(y);
      for (size_t j = 0; j < g.size(); ++j) {
        ASSERT_NEAR(g[j], want[j], tol[j]) << "element " << j;
      }
    };
    {
      KernelCall ref = call;
      ref.Backend("reference");
      absl::StatusOr<std::vector<Tensor>> r = ref.Run(1);
      ASSERT_TRUE(r.ok()) << r.status();
      check((*r)[0]);
    }
    KernelSpec spec = call.spec();
    spec.backend = "dnnl";
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = KernelRegistry::Global().Create(spec);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    EXPECT_NE((*kernel)->name().find("packed"), std::string::npos) << (*kernel)->name();
    std::vector<const Tensor*> in = {&x, &panels};
    if (c.bias) in.push_back(&bias);
    for (cpu::Isa isa : cpu::SupportedIsas()) {
      cpu::ScopedIsaForTesting level(isa);
      std::vector<double> first;
      for (int threads : {1, 2}) {
        SCOPED_TRACE(absl::StrCat(cpu::IsaName(isa), " threads=", threads));
        KernelContext ctx(&HeapAllocator::Get(), threads);
        Tensor y;
        Tensor* outs[1] = {&y};
        const absl::Status st = (*kernel)->Run(ctx, in, outs);
        ASSERT_TRUE(st.ok()) << st;
        check(y);
        if (threads == 1) {
          first = testing::ToDoubles(y);
        } else {
          EXPECT_EQ(testing::ToDoubles(y), first) << "the bits depend on the thread count";
        }
      }
    }
  }
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// Weights that do not fit b_packed_n (panels of the wrong count, depth or width, or a plain
// matrix) beside a [2, 40] left operand: InvalidArgument from both backends (the oneDNN kernel's
// fallback reports them too), naming the packed B where `message` is given.
void ExpectUnfitPanelsRejected(const char* op, const Tensor& a, std::mt19937& rng,
                               const char* message) {
  for (const std::vector<int64_t>& w_dims :
       {std::vector<int64_t>{2, 40, 16}, std::vector<int64_t>{3, 41, 16},
        std::vector<int64_t>{3, 40, 8}, std::vector<int64_t>{40, 33}}) {
    SCOPED_TRACE(DimsString(w_dims));
    const Tensor w = RandomTensor(w_dims, rng);
    for (const char* backend : {"reference", "dnnl"}) {
      KernelCall call(op, "dynvm");
      call.In(a).In(w).Out(DType::kF32).Attr("b_packed_n", int64_t{33}).Backend(backend);
      absl::StatusOr<std::vector<Tensor>> r = call.Run(1);
      ASSERT_FALSE(r.ok()) << backend;
      EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
      if (message != nullptr) {
        EXPECT_NE(r.status().message().find(message), std::string::npos) << r.status();
      }
    }
  }
}

// Panels that do not fit b_packed_n or X's K, a plain W beside b_packed_n, and b_packed_n with
// trans_b = 1, are errors (the oneDNN kernel's fallback reports them too).
TEST(PackedGemm, LinearOnPackedWeightsRejectsBadShapes) {
  std::mt19937 rng(41);
  const Tensor x = RandomTensor({2, 40}, rng);
  ExpectUnfitPanelsRejected("Linear", x, rng, nullptr);
  KernelCall both("Linear", "dynvm");
  both.In(x).In(RandomTensor({3, 40, 16}, rng)).Out(DType::kF32);
  both.Attr("b_packed_n", int64_t{33}).Attr("trans_b", int64_t{1});
  EXPECT_FALSE(both.Run(1).ok());
}

// A read through a_perm (a strided view, which the oneDNN kernel copies into its workspace)
// beside a packed B: both kernels against the double sum of the transposed A times W.
TEST(PackedGemm, MatMulOnPackedWeightsReadsAPermutedA) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  std::mt19937 rng(31);
  const int64_t k = 300, m = 9, n = 50;
  const Tensor at = RandomTensor({k, m}, rng), w = RandomTensor({k, n}, rng);
  Tensor panels = *Tensor::Empty(DType::kF32, {(n + 15) / 16, k, 16});
  cpu::packed_gemm::Pack('N', k, n, w.data<float>(), n, panels.data<float>());
  for (const char* backend : {"reference", "dnnl"}) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(absl::StrCat(backend, " threads=", threads));
      KernelCall call("MatMul", "dynvm");
      call.In(at).In(panels).Out(DType::kF32).Attr("b_packed_n", n);
      call.Attr("a_perm", std::vector<int64_t>{1, 0}).Backend(backend);
      absl::StatusOr<std::vector<Tensor>> r = call.Run(threads);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ((*r)[0].dims(), absl::MakeConstSpan(std::vector<int64_t>{m, n}));
      const std::vector<double> g = testing::ToDoubles((*r)[0]);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0, scale = 0;
          for (int64_t q = 0; q < k; ++q) {
            const double p = double{at.data<float>()[q * m + i]} * w.data<float>()[q * n + j];
            sum += p;
            scale += std::abs(p);
          }
          ASSERT_NEAR(g[i * n + j], sum, (k + 1) * 0x1p-24 * scale) << i << " " << j;
        }
      }
    }
  }
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// A packed B whose shape does not fit b_packed_n or A's K, and b_perm beside b_packed_n, are
// errors that name the problem (the oneDNN kernel's fallback reports them too).
TEST(PackedGemm, MatMulOnPackedWeightsRejectsBadShapes) {
  std::mt19937 rng(29);
  const Tensor a = RandomTensor({2, 40}, rng);
  ExpectUnfitPanelsRejected("MatMul", a, rng, "packed B");
  KernelCall both("MatMul", "dynvm");
  both.In(a).In(RandomTensor({3, 40, 16}, rng)).Out(DType::kF32);
  both.Attr("b_packed_n", int64_t{33}).Attr("b_perm", std::vector<int64_t>{1, 0});
  EXPECT_FALSE(both.Run(1).ok());
}

}  // namespace
}  // namespace dynvm::onednn
