// The oneDNN backend's GridSample (grid_sample.cc) against the reference kernel (the oracle), bit
// for bit: every mode, padding mode and align_corners, grid points inside, on pixel centres and
// half-pixels (nearest's ties), outside, far outside, NaN and infinite, odd sizes and inputs of
// one pixel, f16/bf16/f64 inputs and grids, strided inputs and grids, at 1 and 2 threads (a
// RAFT-sized correlation lookup splits). Runs it must serve are checked to run no fallback.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/heap_allocator.h"
#include "common/half.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_testing.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;
using testing::SameBits;

struct Case {
  std::string mode = "bilinear", pad = "zeros";
  int64_t align = 0;
};

using Result = testing::BackendRun;

absl::StatusOr<Result> RunGridSample(const Tensor& x, const Tensor& grid, const Case& c,
                                     const std::string& backend, int threads) {
  KernelCall call("GridSample");
  call.In(x).In(grid).Out(x.dtype());
  call.Attr("mode", c.mode).Attr("padding_mode", c.pad).Attr("align_corners", c.align);
  return testing::RunOnBackend(call, backend, threads);
}

void ExpectMatches(const Tensor& x, const Tensor& grid, const Case& c, bool served) {
  const std::string what = absl::StrCat(x.DebugString(), " grid ", grid.DebugString(), " ", c.mode,
                                        " ", c.pad, " align ", c.align);
  testing::ExpectDnnlMatchesReference(
      [&](const std::string& backend, int threads) {
        return RunGridSample(x, grid, c, backend, threads);
      },
      what, served, testing::BitsDiffer);
}

Tensor Random(const std::vector<int64_t>& dims, float lo, float hi, std::mt19937& rng) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

// A grid [n, oh, ow, 2] of random points in [-1.3, 1.3] with, every few points, a special one:
// a pixel centre or a half-pixel of the input (w x h, both align_corners conventions), far
// outside, NaN, an infinity.
Tensor MakeGrid(int64_t n, int64_t oh, int64_t ow, int64_t h, int64_t w, std::mt19937& rng) {
  Tensor g = Random({n, oh, ow, 2}, -1.3f, 1.3f, rng);
  float* p = g.data<float>();
  const int64_t points = n * oh * ow;
  for (int64_t i = 0; i < points; ++i) {
    const int64_t kind = static_cast<int64_t>(rng() % 10);
    const int64_t px = static_cast<int64_t>(rng() % (w + 2)) - 1;
    const int64_t py = static_cast<int64_t>(rng() % (h + 2)) - 1;
    float* q = p + 2 * i;
    switch (kind) {
      case 0:  // a pixel centre, align_corners 0
        q[0] = (2.0f * px + 1) / w - 1;
        q[1] = (2.0f * py + 1) / h - 1;
        break;
      case 1:  // a pixel centre, align_corners 1 (and half-pixels between for 0)
        q[0] = w > 1 ? 2.0f * px / (w - 1) - 1 : 0;
        q[1] = h > 1 ? 2.0f * py / (h - 1) - 1 : 0;
        break;
      case 2:  // a half-pixel, align_corners 0
        q[0] = 2.0f * px / w - 1;
        q[1] = 2.0f * py / h - 1;
        break;
      case 3:
        q[rng() % 2] = (rng() % 2 ? 1 : -1) * 1e6f;
        break;
      case 4:
        q[rng() % 2] = std::numeric_limits<float>::quiet_NaN();
        break;
      case 5:
        q[rng() % 2] = (rng() % 2 ? 1 : -1) * std::numeric_limits<float>::infinity();
        break;
      default:
        break;
    }
  }
  return g;
}

const char* const kModes[] = {"bilinear", "nearest", "bicubic"};
const char* const kPads[] = {"zeros", "border", "reflection"};

TEST(DnnlGridSampleTest, MatchesReferenceOverModesPaddingsAndSizes) {
  std::mt19937 rng(1);
  const std::vector<std::vector<int64_t>> inputs = {
      {2, 3, 5, 7}, {1, 2, 1, 6}, {1, 1, 4, 1}, {1, 1, 1, 1}, {3, 1, 8, 8}};
  for (const char* mode : kModes) {
    for (const char* pad : kPads) {
      for (int64_t align : {0, 1}) {
        for (const auto& dims : inputs) {
          const Tensor x = Random(dims, -1, 1, rng);
          const Tensor grid = MakeGrid(dims[0], 4, 7, dims[2], dims[3], rng);
          ExpectMatches(x, grid, {mode, pad, align}, true);
        }
      }
    }
  }
}

Tensor Convert(const Tensor& t, DType dtype) {
  Tensor o = *Tensor::Empty(dtype, std::vector<int64_t>(t.dims().begin(), t.dims().end()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = t.data<float>()[i];
    if (dtype == DType::kF16) o.data<Half>()[i] = Half(v);
    if (dtype == DType::kBF16) o.data<BFloat16>()[i] = BFloat16(v);
    if (dtype == DType::kF64) o.data<double>()[i] = v;
    if (dtype == DType::kF32) o.data<float>()[i] = v;
  }
  return o;
}

TEST(DnnlGridSampleTest, OtherFloatTypes) {
  std::mt19937 rng(2);
  const DType types[] = {DType::kF16, DType::kBF16, DType::kF64, DType::kF32};
  for (DType xt : types) {
    for (DType gt : types) {
      for (const char* mode : kModes) {
        const Tensor x = Convert(Random({1, 2, 5, 6}, -1, 1, rng), xt);
        const Tensor grid = Convert(MakeGrid(1, 3, 4, 5, 6, rng), gt);
        ExpectMatches(x, grid, {mode, "reflection", 0}, true);
        ExpectMatches(x, grid, {mode, "zeros", 1}, true);
      }
    }
  }
}

TEST(DnnlGridSampleTest, StridedInputAndGrid) {
  std::mt19937 rng(3);
  // X [2, 3, 5, 7] over a channels-last buffer; the grid [2, 4, 6, 2] over [2, 2, 4, 6].
  const Tensor xb = Random({2, 5, 7, 3}, -1, 1, rng);
  const Tensor x =
      *Tensor::View(xb.storage(), xb.byte_offset(), DType::kF32, {2, 3, 5, 7}, {105, 1, 21, 3});
  const Tensor gb = MakeGrid(2, 4, 6, 5, 7, rng);  // 96 floats, reread as [2, 2, 4, 6]
  const Tensor grid =
      *Tensor::View(gb.storage(), gb.byte_offset(), DType::kF32, {2, 4, 6, 2}, {48, 6, 1, 24});
  for (const char* mode : kModes) {
    for (const char* pad : kPads) ExpectMatches(x, grid, {mode, pad, 1}, true);
  }
}

// RAFT's correlation lookup (an input per pixel of the 1/8 feature map, a 9 x 9 window each)
// and a warp of a feature map: large enough to split over 2 threads.
TEST(DnnlGridSampleTest, LargeRunsAtOneAndTwoThreads) {
  std::mt19937 rng(4);
  for (const char* mode : kModes) {
    const Tensor corr = Random({256, 1, 16, 16}, -1, 1, rng);
    ExpectMatches(corr, MakeGrid(256, 9, 9, 16, 16, rng), {mode, "zeros", 1}, true);
    const Tensor feat = Random({2, 16, 24, 20}, -1, 1, rng);
    ExpectMatches(feat, MakeGrid(2, 24, 20, 24, 20, rng), {mode, "border", 0}, true);
  }
}

TEST(DnnlGridSampleTest, ErrorsAndEmptyInputsGoToTheReference) {
  std::mt19937 rng(5);
  const Tensor x = Random({1, 2, 3, 4}, -1, 1, rng);
  ExpectMatches(x, Random({2, 3, 3, 2}, -1, 1, rng), {}, false);  // batch differs
  ExpectMatches(x, Random({1, 3, 3, 3}, -1, 1, rng), {}, false);  // 3 coordinates
  ExpectMatches(Random({1, 2, 0, 4}, -1, 1, rng), Random({1, 3, 3, 2}, -1, 1, rng), {}, false);
  ExpectMatches(x, Random({1, 0, 3, 2}, -1, 1, rng), {}, true);  // an empty output
}

}  // namespace
}  // namespace dynvm::onednn
