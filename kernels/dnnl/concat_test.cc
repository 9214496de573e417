// The oneDNN backend's Concat (concat.cc) against the reference kernel (the oracle), bit for bit:
// ranks 1-5, every axis (negative too), dtypes of 1, 2, 4 and 8 bytes and bool, one to five
// inputs, empty inputs, large outputs at 1 and 2 threads (a single batch's channel concat, one
// block per input, and many small blocks), strided inputs (the fallback) and errors.
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/heap_allocator.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_testing.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;
using testing::RandomTensor;
using testing::SameBits;

using Result = testing::BackendRun;

absl::StatusOr<Result> RunConcat(const std::vector<const Tensor*>& xs, int64_t axis,
                                 const std::string& backend, int threads) {
  KernelCall call("Concat");
  for (const Tensor* x : xs) call.In(*x);
  call.Out(xs[0]->dtype()).Attr("axis", axis);
  return testing::RunOnBackend(call, backend, threads);
}

void ExpectMatches(const std::vector<const Tensor*>& xs, int64_t axis, bool served) {
  std::string what = absl::StrCat("axis ", axis);
  for (const Tensor* x : xs) absl::StrAppend(&what, " ", x->DebugString());
  testing::ExpectDnnlMatchesReference(
      [&](const std::string& backend, int threads) {
        return RunConcat(xs, axis, backend, threads);
      },
      what, served, testing::BitsDiffer);
}

void ExpectMatchesOwned(const std::vector<Tensor>& xs, int64_t axis, bool served) {
  std::vector<const Tensor*> p;
  for (const Tensor& x : xs) p.push_back(&x);
  ExpectMatches(p, axis, served);
}

TEST(DnnlConcatTest, MatchesReferenceOverRanksAxesAndDtypes) {
  std::mt19937 rng(1);
  const DType dtypes[] = {DType::kF32, DType::kF16,  DType::kI8, DType::kU8,
                          DType::kI64, DType::kBool, DType::kF64};
  for (int rank = 1; rank <= 5; ++rank) {
    for (int axis = -rank; axis < rank; ++axis) {
      for (DType dtype : dtypes) {
        for (int inputs = 1; inputs <= 5; inputs += 2) {
          std::vector<int64_t> dims(rank);
          for (auto& d : dims) d = 1 + static_cast<int64_t>(rng() % 4);
          std::vector<Tensor> xs;
          for (int i = 0; i < inputs; ++i) {
            std::vector<int64_t> di = dims;
            di[axis < 0 ? axis + rank : axis] = static_cast<int64_t>(rng() % 4);  // 0 too
            xs.push_back(RandomTensor(dtype, di, rng));
          }
          ExpectMatchesOwned(xs, axis, true);
        }
      }
    }
  }
}

// Outputs of at least 64 KiB split over 2 threads: DenseNet's channel concat at batch 1 (one
// block per input), SqueezeNet's fire module, and many small blocks (a concat on the last axis).
TEST(DnnlConcatTest, LargeOutputsAtOneAndTwoThreads) {
  std::mt19937 rng(2);
  ExpectMatchesOwned({RandomTensor(DType::kF32, {1, 64, 16, 16}, rng),
                      RandomTensor(DType::kF32, {1, 32, 16, 16}, rng),
                      RandomTensor(DType::kF32, {1, 32, 16, 16}, rng),
                      RandomTensor(DType::kF32, {1, 32, 16, 16}, rng)},
                     1, true);
  ExpectMatchesOwned({RandomTensor(DType::kF32, {2, 64, 15, 15}, rng),
                      RandomTensor(DType::kF32, {2, 64, 15, 15}, rng)},
                     1, true);
  ExpectMatchesOwned(
      {RandomTensor(DType::kF32, {3000, 7}, rng), RandomTensor(DType::kF32, {3000, 1}, rng),
       RandomTensor(DType::kF32, {3000, 5}, rng)},
      -1, true);
  ExpectMatchesOwned({RandomTensor(DType::kU8, {70001}, rng), RandomTensor(DType::kU8, {3}, rng)},
                     0, true);
}

TEST(DnnlConcatTest, StridedInputsAndErrorsGoToTheReference) {
  std::mt19937 rng(3);
  const Tensor base = RandomTensor(DType::kF32, {6, 4}, rng);
  const Tensor t = *Tensor::View(base.storage(), base.byte_offset(), DType::kF32, {4, 6}, {1, 4});
  const Tensor b = RandomTensor(DType::kF32, {4, 3}, rng);
  ExpectMatches({&t, &b}, 1, false);
  ExpectMatches({&b, &t}, 1, false);
  const Tensor c = RandomTensor(DType::kF32, {5, 3}, rng);
  ExpectMatches({&b, &c}, 1, false);  // dims differ off the axis
  const Tensor d = RandomTensor(DType::kI32, {4, 3}, rng);
  ExpectMatches({&b, &d}, 1, false);  // dtypes differ
  ExpectMatches({&b, &b}, 2, false);  // axis out of range
}

}  // namespace
}  // namespace dynvm::onednn
