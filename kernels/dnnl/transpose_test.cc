// The oneDNN Transpose kernel (transpose.cc) against the reference kernel on random shapes and
// permutations of ranks 1-6, at 1 and 2 threads, and its errors.
#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allocator/heap_allocator.h"
#include "gtest/gtest.h"
#include "kernels/dnnl/common.h"
#include "kernels/registry.h"
#include "kernels/testing.h"
#include "kernels/thread_pool.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;
using testing::ToDoubles;

Tensor Filled(const std::vector<int64_t>& dims) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i) * 0.5f - 3;
  return t;
}

// A strided view of `base` through `perm` (a non-contiguous input).
Tensor PermutedView(const Tensor& base, const std::vector<int64_t>& perm) {
  std::vector<int64_t> dims, strides;
  for (int64_t p : perm) {
    dims.push_back(base.dim(static_cast<int>(p)));
    strides.push_back(base.stride(static_cast<int>(p)));
  }
  return *Tensor::View(base.storage(), base.byte_offset(), base.dtype(), dims, strides);
}

KernelCall TransposeCall(const Tensor& x, const std::vector<int64_t>* perm) {
  KernelCall call("Transpose");
  call.In(x).Out(DType::kF32);
  if (perm != nullptr) call.Attr("perm", *perm);
  return call;
}

// Runs Transpose(x, perm) on `backend` at `threads`, `runs` times at one site; the last output.
// *reference_runs: runs the dnnl kernel left to its fallback (the reference kernel).
absl::StatusOr<Tensor> RunTranspose(const Tensor& x, const std::vector<int64_t>* perm,
                                    const std::string& backend, int threads, int runs = 1,
                                    int64_t* reference_runs = nullptr) {
  KernelCall call = TransposeCall(x, perm);
  KernelSpec spec = call.spec();
  spec.backend = backend;
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> k, KernelRegistry::Global().Create(spec));
  KernelContext ctx(&HeapAllocator::Get(), threads);
  Tensor out;
  for (int r = 0; r < runs; ++r) {
    out = Tensor();
    std::vector<const Tensor*> in = {&x};
    std::vector<Tensor*> outs = {&out};
    DYNVM_RETURN_IF_ERROR(k->Run(ctx, in, outs));
  }
  if (reference_runs != nullptr) {
    const auto* d = dynamic_cast<const DnnlKernel*>(k.get());
    if (d == nullptr) return absl::InternalError(absl::StrCat("not a dnnl kernel: ", k->name()));
    *reference_runs = d->fallback_runs();
  }
  return out;
}

// Checks the dnnl kernel against the reference kernel (values and dims) at 1 and 2 threads; true
// when oneDNN served every run at 1 thread.
bool ExpectMatches(const Tensor& x, const std::vector<int64_t>* perm, const std::string& what) {
  absl::StatusOr<Tensor> want = RunTranspose(x, perm, "reference", 1);
  EXPECT_TRUE(want.ok()) << what << ": " << want.status();
  if (!want.ok()) return false;
  bool served = false;
  for (int threads : {1, 2}) {
    int64_t fallbacks = 0;
    absl::StatusOr<Tensor> got = RunTranspose(x, perm, "dnnl", threads, 2, &fallbacks);
    EXPECT_TRUE(got.ok()) << what << " threads " << threads << ": " << got.status();
    if (!got.ok()) continue;
    EXPECT_EQ(std::vector<int64_t>(got->dims().begin(), got->dims().end()),
              std::vector<int64_t>(want->dims().begin(), want->dims().end()))
        << what;
    EXPECT_EQ(ToDoubles(*got), ToDoubles(*want)) << what << " threads " << threads;
    if (threads == 1) served = fallbacks == 0;
  }
  return served;
}

TEST(DnnlTranspose, RandomShapesMatchReference) {
  ASSERT_TRUE(SetMaxThreads(std::max(2, MaxThreads())).ok());
  std::mt19937 rng(1234);
  const int64_t sizes[] = {1, 2, 3, 5, 8, 16, 33, 64};
  int served = 0, cases = 0;
  for (int rank = 1; rank <= 6; ++rank) {
    for (int trial = 0; trial < 12; ++trial) {
      std::vector<int64_t> dims(rank);
      int64_t numel = 0;
      do {
        numel = 1;
        for (int64_t& d : dims) {
          d = sizes[rng() % std::size(sizes)];
          numel *= d;
        }
      } while (numel > (int64_t{1} << 18));
      std::vector<int64_t> perm(rank);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      const bool absent = trial % 4 == 3;  // absent perm: the axes reversed
      const bool strided = trial % 3 == 2 && rank >= 2;
      Tensor x = Filled(dims);
      if (strided) {
        std::vector<int64_t> view_perm(rank);
        std::iota(view_perm.rbegin(), view_perm.rend(), 0);
        x = PermutedView(x, view_perm);
      }
      const std::string what = absl::StrCat("dims [", absl::StrJoin(x.dims(), ","), "] perm ",
                                            absent ? "absent" : absl::StrJoin(perm, ","),
                                            strided ? " (strided input)" : "");
      served += ExpectMatches(x, absent ? nullptr : &perm, what) ? 1 : 0;
      ++cases;
    }
  }
  // The inner-axis-moving, large enough cases go to oneDNN (not every one falls back).
  EXPECT_GT(served, 0) << "of " << cases;
}

TEST(DnnlTranspose, EncoderShapesAndEdges) {
  ASSERT_TRUE(SetMaxThreads(std::max(2, MaxThreads())).ok());
  struct Case {
    std::vector<int64_t> dims, perm;
    bool reorder;  // served by oneDNN (not the reference kernel) at 1 thread
  };
  const Case cases[] = {
      {{8, 64, 256}, {1, 0, 2}, false},  // the innermost axis stays: the reference copy
      {{8, 4, 64, 64}, {0, 2, 1, 3}, false},
      {{512, 512}, {1, 0}, true},                             // split over the pool at 2 threads
      {{8, 64, 64}, {0, 2, 1}, true},                         // K^T
      {{3, 1, 97, 1, 33}, {4, 1, 3, 2, 0}, true},             // size-1 dims, odd rows per thread
      {{2, 3, 5, 7}, {3, 1, 0, 2}, false},                    // below kMinReorderElements
      {{4, 0, 8}, {2, 0, 1}, false},                          // a zero-size dim
      {{2, 3, 4, 5, 6, 7, 2}, {6, 5, 4, 3, 2, 1, 0}, false},  // 7 dims: more than oneDNN's 6
      {{64, 32, 2}, {2, 1, 0}, true},
      {{32, 32}, {1, 0}, false},  // below kMinReorderElements
      {{64, 64}, {1, 0}, true},
      {{5, 77, 65}, {2, 1, 0}, true},  // 65 rows: 33 + 32 at 2 threads
  };
  for (const Case& c : cases) {
    const std::string what =
        absl::StrCat("dims [", absl::StrJoin(c.dims, ","), "] perm ", absl::StrJoin(c.perm, ","));
    EXPECT_EQ(ExpectMatches(Filled(c.dims), &c.perm, what), c.reorder) << what;
  }
}

TEST(DnnlTranspose, ShapeChangesRebindThenSmallShapesFallBack) {
  std::vector<int64_t> perm = {1, 0};
  KernelCall call = TransposeCall(Filled({64, 48}), &perm);
  KernelSpec spec = call.spec();
  spec.backend = "dnnl";
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ((*k)->name(), "transpose.f32.dnnl");
  const auto* dnnl = dynamic_cast<const DnnlKernel*>(k->get());
  ASSERT_NE(dnnl, nullptr);
  KernelContext ctx(&HeapAllocator::Get(), 1);
  // Four shapes bind (the repeat of the first rebinds); the fifth and sixth, small, fall back;
  // the last, large, binds again.
  struct Step {
    std::vector<int64_t> dims;
    int64_t reference_runs;  // after this run
  };
  const Step steps[] = {{{64, 48}, 0}, {{40, 100}, 0}, {{64, 48}, 0},  {{50, 50}, 0},
                        {{51, 50}, 1}, {{52, 50}, 2},  {{300, 301}, 2}};
  for (const Step& step : steps) {
    Tensor x = Filled(step.dims), out;
    std::vector<const Tensor*> in = {&x};
    std::vector<Tensor*> outs = {&out};
    ASSERT_TRUE((*k)->Run(ctx, in, outs).ok());
    absl::StatusOr<Tensor> want = RunTranspose(x, &perm, "reference", 1);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(ToDoubles(out), ToDoubles(*want));
    EXPECT_EQ(dnnl->fallback_runs(), step.reference_runs) << absl::StrJoin(step.dims, ",");
  }
}

TEST(DnnlTranspose, BadPermIsInvalidArgument) {
  Tensor x = Filled({4, 5, 6});
  for (const std::vector<int64_t>& perm :
       std::vector<std::vector<int64_t>>{{0, 0, 1}, {0, 1, 3}, {-1, 0, 1}}) {
    absl::StatusOr<Tensor> got = RunTranspose(x, &perm, "dnnl", 1);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    EXPECT_NE(got.status().message().find("is not a permutation"), std::string::npos)
        << got.status();
  }
  // A permutation of the wrong rank for the input: reported at run time.
  const std::vector<int64_t> perm2 = {1, 0};
  absl::StatusOr<Tensor> got = RunTranspose(x, &perm2, "dnnl", 1);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_NE(got.status().message().find("does not fit"), std::string::npos) << got.status();
}

}  // namespace
}  // namespace dynvm::onednn
