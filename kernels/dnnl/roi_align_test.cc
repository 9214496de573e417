// The oneDNN backend's RoiAlign (kernels/dnnl/roi_align.cc) against the reference kernel (the
// oracle, in double): both modes, both coordinate transformations, fixed and adaptive sampling,
// boxes inside, across and outside the image (samples beyond [-1, size] count 0), degenerate and
// empty regions, batch indices into a batch of images (i64 and i32), no regions, 1 and 2
// threads; served by the backend itself, no fallback. Then the fallbacks (a bad batch index, a
// non-finite box) give the reference kernel's answer.
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/heap_allocator.h"
#include "gtest/gtest.h"
#include "kernels/dnnl/common.h"
#include "kernels/kernel_tester.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;
using testing::KernelTester;

Tensor RandomF32(std::vector<int64_t> dims, std::mt19937& rng, float lo, float hi) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

// Boxes [r, 4] (x1, y1, x2, y2) in input pixels for an image of h x w at `scale`: most inside,
// some across the border, a few outside, degenerate (x2 <= x1) and tiny.
Tensor Boxes(int64_t r, int64_t h, int64_t w, float scale, std::mt19937& rng) {
  Tensor t = *Tensor::Empty(DType::kF32, {r, 4});
  std::uniform_real_distribution<float> u(0, 1);
  const float ih = static_cast<float>(h) / scale, iw = static_cast<float>(w) / scale;
  for (int64_t k = 0; k < r; ++k) {
    float* b = t.data<float>() + k * 4;
    const int kind = static_cast<int>(k % 6);
    float x1 = u(rng) * iw, y1 = u(rng) * ih;
    float x2 = x1 + u(rng) * iw * 0.7f, y2 = y1 + u(rng) * ih * 0.7f;
    if (kind == 3) {  // across the border
      x1 -= 0.4f * iw;
      y2 += 0.5f * ih;
    } else if (kind == 4) {  // outside
      x1 += 1.5f * iw;
      x2 += 2.0f * iw;
    } else if (kind == 5) {  // degenerate or tiny
      x2 = x1 - u(rng) * 2 / scale;
      y2 = y1 + 0.3f / scale;
    }
    b[0] = x1;
    b[1] = y1;
    b[2] = x2;
    b[3] = y2;
  }
  return t;
}

struct Case {
  int64_t n, c, h, w, r, out_h, out_w, sampling;
  float scale;
  const char* mode;
  const char* ctm;
  bool i32;
};

void CheckCase(const Case& cs, uint32_t seed, int threads) {
  std::mt19937 rng(seed);
  Tensor x = RandomF32({cs.n, cs.c, cs.h, cs.w}, rng, -2, 2);
  Tensor boxes = Boxes(cs.r, cs.h, cs.w, cs.scale, rng);
  Tensor batch = *Tensor::Empty(cs.i32 ? DType::kI32 : DType::kI64, {cs.r});
  for (int64_t k = 0; k < cs.r; ++k) {
    const int64_t b = static_cast<int64_t>(rng() % static_cast<uint32_t>(cs.n));
    if (cs.i32) {
      batch.data<int32_t>()[k] = static_cast<int32_t>(b);
    } else {
      batch.data<int64_t>()[k] = b;
    }
  }
  const std::string what =
      absl::StrCat(cs.n, "x", cs.c, "x", cs.h, "x", cs.w, " rois ", cs.r, " out ", cs.out_h, "x",
                   cs.out_w, " sampling ", cs.sampling, " scale ", cs.scale, " ", cs.mode, " ",
                   cs.ctm, cs.i32 ? " i32" : "", " threads ", threads);
  SCOPED_TRACE(what);
  KernelTester t("RoiAlign");
  t.In(x).In(boxes).In(batch).Out(DType::kF32).Tol(2e-6, 2e-6).Threads(threads);
  t.Attr("mode", std::string(cs.mode))
      .Attr("coordinate_transformation_mode", std::string(cs.ctm))
      .Attr("output_height", cs.out_h)
      .Attr("output_width", cs.out_w)
      .Attr("sampling_ratio", cs.sampling)
      .Attr("spatial_scale", cs.scale);
  const absl::Status s = t.Compare("dnnl");
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(t.kernel_name(), "roialign.f32.dnnl");
  // Served by the kernel itself: no run fell back to the reference.
  KernelSpec spec = t.spec();
  spec.backend = "dnnl";
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  const auto* dk = dynamic_cast<const DnnlKernel*>(k->get());
  ASSERT_NE(dk, nullptr);
  KernelContext ctx(&HeapAllocator::Get(), threads);
  const Tensor* in[] = {&x, &boxes, &batch};
  Tensor y;
  Tensor* outs[] = {&y};
  ASSERT_TRUE((*k)->Run(ctx, in, outs).ok());
  EXPECT_EQ(dk->fallback_runs(), 0);
}

TEST(DnnlRoiAlign, MatchesReference) {
  const Case cases[] = {
      // torchvision's box head: 7x7 bins, 2x2 samples, one FPN level of a 320x320 image.
      {1, 256, 10, 10, 150, 7, 7, 2, 0.03125f, "avg", "half_pixel", false},
      {1, 32, 20, 25, 40, 7, 7, 2, 0.0625f, "avg", "output_half_pixel", false},
      // Mask R-CNN's 14x14 bins; adaptive sampling (0).
      {2, 16, 24, 17, 30, 14, 14, 0, 0.25f, "avg", "half_pixel", false},
      {2, 9, 13, 21, 25, 3, 5, 0, 1.0f, "avg", "output_half_pixel", true},
      {3, 5, 8, 8, 20, 2, 2, 3, 0.5f, "max", "half_pixel", false},
      {1, 7, 9, 11, 18, 4, 3, 0, 0.5f, "max", "output_half_pixel", true},
      {1, 3, 1, 1, 6, 2, 2, 1, 1.0f, "avg", "half_pixel", false},  // a 1x1 image
      {2, 4, 6, 6, 0, 2, 2, 2, 1.0f, "avg", "half_pixel", false},  // no regions
  };
  uint32_t seed = 7;
  for (const Case& cs : cases) {
    for (int threads : {1, 2}) CheckCase(cs, seed++, threads);
  }
}

// The cases the kernel leaves to the reference kernel answer as it does: a batch index outside
// the batch (InvalidArgument from both) and a box of NaN.
TEST(DnnlRoiAlign, FallbacksMatchTheReference) {
  std::mt19937 rng(3);
  Tensor x = RandomF32({1, 4, 6, 6}, rng, -1, 1);
  Tensor boxes = Boxes(3, 6, 6, 1.0f, rng);
  Tensor bad = *Tensor::Empty(DType::kI64, {3});
  bad.data<int64_t>()[0] = 0;
  bad.data<int64_t>()[1] = 1;  // the batch has one image
  bad.data<int64_t>()[2] = 0;
  KernelTester t("RoiAlign");
  t.In(x).In(boxes).In(bad).Out(DType::kF32);
  EXPECT_TRUE(t.Compare("dnnl").ok());  // the backend fails with the reference's code
  Tensor nan_boxes = Boxes(3, 6, 6, 1.0f, rng);
  nan_boxes.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  Tensor zero = *Tensor::Empty(DType::kI64, {3});
  for (int k = 0; k < 3; ++k) zero.data<int64_t>()[k] = 0;
  KernelTester u("RoiAlign");
  u.In(x).In(nan_boxes).In(zero).Out(DType::kF32).Attr("sampling_ratio", int64_t{2});
  EXPECT_TRUE(u.Compare("dnnl").ok());
}

}  // namespace
}  // namespace dynvm::onednn
