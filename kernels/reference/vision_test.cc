// Tests of the reference MeanVarianceNormalization, MaxUnpool, RoiAlign and GridSample kernels
// against hand-computed values, beyond ONNX's node cases: edge shapes, empty tensors, NaN and
// bad input.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using ::dynvm::testing::F32;
using ::dynvm::testing::I64;
using ::dynvm::testing::KernelCall;
using ::dynvm::testing::ToDoubles;
using ::testing::DoubleNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

std::vector<Tensor> RunCall(KernelCall& call) {
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<Tensor>{Tensor()};
}

std::vector<int64_t> Dims(const Tensor& t) { return {t.dims().begin(), t.dims().end()}; }

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(VisionKernelTest, MeanVarianceNormalizationPerChannel) {
  KernelCall mvn("MeanVarianceNormalization");
  // Channel 0 {1, 3}: mean 2, std 1. Channel 1 {5, 5}: std 0, so 0 / 1e-9 = 0.
  mvn.In(F32({1, 2, 1, 2}, {1, 3, 5, 5})).Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(mvn)[0]),
              Pointwise(DoubleNear(1e-6), std::vector<double>{-1, 1, 0, 0}));
  KernelCall last("MeanVarianceNormalization");
  last.In(F32({2, 2}, {0, 4, 1, 1})).Attr("axes", std::vector<int64_t>{1}).Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(last)[0]),
              Pointwise(DoubleNear(1e-6), std::vector<double>{-1, 1, 0, 0}));
}

TEST(VisionKernelTest, MeanVarianceNormalizationNanStaysInItsGroupAndEmptyWorks) {
  KernelCall mvn("MeanVarianceNormalization");
  mvn.In(F32({1, 2, 1, 2}, {kNaN, 3, 0, 2})).Out(DType::kF32);
  const std::vector<double> y = ToDoubles(RunCall(mvn)[0]);
  ASSERT_EQ(y.size(), 4u);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  EXPECT_NEAR(y[2], -1, 1e-6);
  EXPECT_NEAR(y[3], 1, 1e-6);
  KernelCall empty("MeanVarianceNormalization");
  empty.In(F32({0, 2, 1, 1}, {})).Out(DType::kF32);
  EXPECT_EQ(Dims(RunCall(empty)[0]), (std::vector<int64_t>{0, 2, 1, 1}));
  KernelCall bad("MeanVarianceNormalization");
  bad.In(F32({2, 2}, {0, 0, 0, 0})).Attr("axes", std::vector<int64_t>{5}).Out(DType::kF32);
  EXPECT_FALSE(bad.Run().ok());
}

TEST(VisionKernelTest, MaxUnpoolScattersIntoZeros) {
  KernelCall unpool("MaxUnpool");
  unpool.In(F32({1, 1, 2, 2}, {1, 2, 3, 4})).In(I64({1, 1, 2, 2}, {0, 3, 8, 15}));
  unpool.Attr("kernel_shape", std::vector<int64_t>{2, 2});
  unpool.Attr("strides", std::vector<int64_t>{2, 2}).Out(DType::kF32);
  const Tensor y = RunCall(unpool)[0];
  EXPECT_EQ(Dims(y), (std::vector<int64_t>{1, 1, 4, 4}));
  EXPECT_THAT(ToDoubles(y), Pointwise(DoubleNear(0), std::vector<double>{1, 0, 0, 2, 0, 0, 0, 0, 3,
                                                                         0, 0, 0, 0, 0, 0, 4}));
  // A larger output_shape pads the inferred 2x2 at the end; NaN moves like any value.
  KernelCall shaped("MaxUnpool");
  shaped.In(F32({1, 1, 1, 1}, {kNaN})).In(I64({1, 1, 1, 1}, {3}));
  shaped.In(I64({4}, {1, 1, 3, 3})).Attr("kernel_shape", std::vector<int64_t>{2, 2});
  shaped.Out(DType::kF32);
  const std::vector<double> s = ToDoubles(RunCall(shaped)[0]);
  ASSERT_EQ(s.size(), 9u);
  EXPECT_TRUE(std::isnan(s[4]));  // inferred (1, 1) -> output (1, 1)
  EXPECT_EQ(s[3], 0);
  KernelCall small("MaxUnpool");  // smaller than the inferred shape: refused
  small.In(F32({1, 1, 1, 1}, {1})).In(I64({1, 1, 1, 1}, {0}));
  small.In(I64({4}, {1, 1, 1, 1})).Attr("kernel_shape", std::vector<int64_t>{2, 2});
  small.Out(DType::kF32);
  EXPECT_FALSE(small.Run().ok());
}

TEST(VisionKernelTest, MaxUnpoolRejectsOutOfRangeIndicesAndTakesEmptyInput) {
  KernelCall bad("MaxUnpool");
  bad.In(F32({1, 1, 1, 1}, {1})).In(I64({1, 1, 1, 1}, {4}));
  bad.Attr("kernel_shape", std::vector<int64_t>{2, 2}).Out(DType::kF32);
  absl::StatusOr<std::vector<Tensor>> r = bad.Run();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("index 4"));
  KernelCall empty("MaxUnpool");
  empty.In(F32({0, 1, 1, 1}, {})).In(I64({0, 1, 1, 1}, {}));
  empty.Attr("kernel_shape", std::vector<int64_t>{2, 2}).Out(DType::kF32);
  EXPECT_EQ(Dims(RunCall(empty)[0]), (std::vector<int64_t>{0, 1, 2, 2}));
}

TEST(VisionKernelTest, RoiAlignAverageAndMax) {
  // A 2x2 image {0, 1; 2, 3}; the box (0, 0)-(2, 2) with one sample per bin: half_pixel
  // samples at (0.5, 0.5), the bilinear mean 1.5; the max mode keeps the largest weighted
  // corner, 0.25 * 3.
  for (const char* mode : {"avg", "max"}) {
    KernelCall roi("RoiAlign");
    roi.In(F32({1, 1, 2, 2}, {0, 1, 2, 3})).In(F32({1, 4}, {0, 0, 2, 2})).In(I64({1}, {0}));
    roi.Attr("sampling_ratio", int64_t{1}).Attr("mode", std::string(mode)).Out(DType::kF32);
    const Tensor y = RunCall(roi)[0];
    EXPECT_EQ(Dims(y), (std::vector<int64_t>{1, 1, 1, 1}));
    EXPECT_THAT(
        ToDoubles(y),
        Pointwise(DoubleNear(1e-6), std::vector<double>{std::string(mode) == "avg" ? 1.5 : 0.75}));
  }
  // output_half_pixel: no shift, so the sample sits at (1, 1): pixel 3.
  KernelCall legacy("RoiAlign");
  legacy.In(F32({1, 1, 2, 2}, {0, 1, 2, 3})).In(F32({1, 4}, {0, 0, 2, 2})).In(I64({1}, {0}));
  legacy.Attr("sampling_ratio", int64_t{1});
  legacy.Attr("coordinate_transformation_mode", std::string("output_half_pixel"));
  legacy.Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(legacy)[0]), Pointwise(DoubleNear(1e-6), std::vector<double>{3.0}));
}

TEST(VisionKernelTest, RoiAlignEdgeCases) {
  KernelCall none("RoiAlign");  // no boxes: an empty output
  none.In(F32({1, 2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7})).In(F32({0, 4}, {})).In(I64({0}, {}));
  none.Attr("output_height", int64_t{3}).Attr("output_width", int64_t{2}).Out(DType::kF32);
  EXPECT_EQ(Dims(RunCall(none)[0]), (std::vector<int64_t>{0, 2, 3, 2}));
  KernelCall far("RoiAlign");  // a box far outside the image samples zeros
  far.In(F32({1, 1, 2, 2}, {1, 1, 1, 1})).In(F32({1, 4}, {10, 10, 12, 12})).In(I64({1}, {0}));
  far.Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(far)[0]), Pointwise(DoubleNear(0), std::vector<double>{0.0}));
  KernelCall nan("RoiAlign");
  nan.In(F32({1, 1, 2, 2}, {kNaN, 1, 1, 1})).In(F32({1, 4}, {0, 0, 2, 2})).In(I64({1}, {0}));
  nan.Out(DType::kF32);
  EXPECT_TRUE(std::isnan(ToDoubles(RunCall(nan)[0])[0]));
  KernelCall bad("RoiAlign");
  bad.In(F32({1, 1, 2, 2}, {0, 1, 2, 3})).In(F32({1, 4}, {0, 0, 2, 2})).In(I64({1}, {1}));
  bad.Out(DType::kF32);
  absl::StatusOr<std::vector<Tensor>> r = bad.Run();
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("batch index 1"));
}

// grid points (x, y): the corners, the centre and one far outside.
Tensor Grid() { return F32({1, 1, 4, 2}, {-1, -1, 1, 1, 0, 0, 3, 3}); }

std::vector<double> Sample(const std::string& mode, const std::string& pad, int64_t align) {
  KernelCall gs("GridSample");
  gs.In(F32({1, 1, 2, 2}, {0, 1, 2, 3})).In(Grid());
  gs.Attr("mode", mode).Attr("padding_mode", pad).Attr("align_corners", align).Out(DType::kF32);
  const Tensor y = RunCall(gs)[0];
  EXPECT_EQ(Dims(y), (std::vector<int64_t>{1, 1, 1, 4}));
  return ToDoubles(y);
}

TEST(VisionKernelTest, GridSampleModesAndPadding) {
  // align_corners: -1 and 1 are the corner pixels; the centre is their bilinear mean 1.5.
  EXPECT_THAT(Sample("bilinear", "zeros", 1),
              Pointwise(DoubleNear(1e-6), std::vector<double>{0, 3, 1.5, 0}));
  EXPECT_THAT(Sample("bilinear", "border", 1),
              Pointwise(DoubleNear(1e-6), std::vector<double>{0, 3, 1.5, 3}));
  // Reflection about [0, 1]: x = y = 2 mirrors to 0.
  EXPECT_THAT(Sample("bilinear", "reflection", 1),
              Pointwise(DoubleNear(1e-6), std::vector<double>{0, 3, 1.5, 0}));
  // Nearest rounds half to even: the centre (0.5, 0.5) reads pixel (0, 0).
  EXPECT_THAT(Sample("nearest", "zeros", 1),
              Pointwise(DoubleNear(1e-6), std::vector<double>{0, 3, 0, 0}));
  // Bicubic interpolates: exact at pixel centres.
  EXPECT_THAT(Sample("bicubic", "border", 1),
              Pointwise(DoubleNear(1e-6), std::vector<double>{0, 3, 1.5, 3}));
  // Without align_corners, -1 and 1 are the outer edges: (-0.5, -0.5) with zero padding mixes
  // pixel 0 with three zeros; the centre is still 1.5.
  const std::vector<double> edge = Sample("bilinear", "zeros", 0);
  EXPECT_NEAR(edge[0], 0.0, 1e-6);
  EXPECT_NEAR(edge[1], 0.25 * 3, 1e-6);
  EXPECT_NEAR(edge[2], 1.5, 1e-6);
  EXPECT_THAT(Sample("bilinear", "border", 0),
              Pointwise(DoubleNear(1e-6), std::vector<double>{0, 3, 1.5, 3}));
}

// Bicubic samples outside the image: the border and reflection padding apply to each of the
// 4 x 4 taps, not to the sampled coordinate (PyTorch's grid_sample, which GridSample-16
// follows, and ONNX Runtime). Expected values from torch 1.13, float64:
//   x = [[1, 2, 4], [-1, 3, 0.5]], grid (x, y) = (-1.7, 0.3), (1.4, -1.2), (0.2, 2.5),
//   (-3.1, -2.2); F.grid_sample(x, grid, mode="bicubic", padding_mode=..., align_corners=...)
// (found by tests/differential: dynvm clamped the coordinate, giving the border pixel).
TEST(VisionKernelTest, GridSampleBicubicPadsEachTap) {
  struct Case {
    const char* pad;
    int64_t align;
    std::vector<double> torch;
  };
  const std::vector<Case> cases = {
      {"border", 0, {-0.6479999999999992, 4.165375000000001, 2.7434999999999996, 1.0}},
      {"border", 1, {-0.4759311093749975, 4.458149500000004, 2.9614375000000006, 1.144}},
      {"reflection",
       0,
       {1.4574591249999984, 4.332693125000002, 2.668249999999996, 1.2641571874999968}},
      {"reflection",
       1,
       {1.824854593750002, 3.4553280000000033, 2.5566250000000004, 1.771336999999999}},
      {"zeros", 0, {0.06014249999999973, -0.07784353124999958, 0.0, 0.0}},
      {"zeros", 1, {-0.27309128906249736, 2.605203, 0.6842031250000001, 0.0}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.pad, " align_corners ", c.align));
    KernelCall gs("GridSample");
    gs.In(F32({1, 1, 2, 3}, {1, 2, 4, -1, 3, 0.5}))
        .In(F32({1, 1, 4, 2}, {-1.7f, 0.3f, 1.4f, -1.2f, 0.2f, 2.5f, -3.1f, -2.2f}));
    gs.Attr("mode", "bicubic").Attr("padding_mode", c.pad).Attr("align_corners", c.align);
    gs.Out(DType::kF32);
    // The grid is float32 (torch read the same values as doubles): 1e-5.
    EXPECT_THAT(ToDoubles(RunCall(gs)[0]), Pointwise(DoubleNear(1e-5), c.torch));
  }
}

// Far outside a wider image (5 columns: the reflection's period exceeds the far-outside limit
// of the zero padding): x = [[1, 2, 4, 7, -2], [-1, 3, 0.5, 2, 1]], grid (-9.3, 0.3),
// (31.4, -1.2), (0.2, -27.5); torch 1.13 as above.
TEST(VisionKernelTest, GridSampleBicubicFarOutside) {
  struct Case {
    const char* pad;
    int64_t align;
    std::vector<double> torch;
  };
  const std::vector<Case> cases = {
      {"border", 0, {-0.6479999999999996, -2.1417499999999987, 6.53125}},
      {"border", 1, {-0.3341250000000001, -2.182250000000002, 6.027999999999999}},
      {"reflection", 0, {0.19867187500000041, 1.324804687500001, 1.109375}},
      {"reflection", 1, {1.4001345000000063, 1.6312959999999963, 1.6877499999999994}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.pad, " align_corners ", c.align));
    KernelCall gs("GridSample");
    gs.In(F32({1, 1, 2, 5}, {1, 2, 4, 7, -2, -1, 3, 0.5, 2, 1}))
        .In(F32({1, 1, 3, 2}, {-9.3f, 0.3f, 31.4f, -1.2f, 0.2f, -27.5f}));
    gs.Attr("mode", "bicubic").Attr("padding_mode", c.pad).Attr("align_corners", c.align);
    gs.Out(DType::kF32);
    EXPECT_THAT(ToDoubles(RunCall(gs)[0]), Pointwise(DoubleNear(1e-4), c.torch));
  }
}

TEST(VisionKernelTest, GridSampleNanEmptyAndBadShapes) {
  KernelCall nan("GridSample");
  nan.In(F32({1, 1, 2, 2}, {0, 1, 2, 3})).In(F32({1, 1, 1, 2}, {kNaN, 0})).Out(DType::kF32);
  EXPECT_TRUE(std::isnan(ToDoubles(RunCall(nan)[0])[0]));
  // An infinite coordinate: outside the image under zeros padding (0), the edge under border
  // padding, and NaN under reflection (its mirror image is undefined), for every mode; never a
  // cast of a NaN to an integer (UBSan's stage of tools/test.sh checks that).
  const float inf = std::numeric_limits<float>::infinity();
  for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
    for (const char* pad : {"zeros", "border", "reflection"}) {
      KernelCall far("GridSample");
      far.Backend("reference");
      far.In(F32({1, 1, 2, 2}, {0, 1, 2, 3})).In(F32({1, 1, 2, 2}, {inf, 0, -inf, -inf}));
      far.Attr("mode", std::string(mode)).Attr("padding_mode", std::string(pad));
      far.Out(DType::kF32);
      const std::vector<double> got = ToDoubles(RunCall(far)[0]);
      const std::string what = std::string(mode) + " " + pad;
      if (std::string(pad) == "reflection") {
        EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1])) << what;
      } else if (std::string(pad) == "zeros") {
        EXPECT_EQ(got[0], 0.0) << what;
        EXPECT_EQ(got[1], 0.0) << what;
      } else {
        EXPECT_TRUE(std::isfinite(got[0]) && std::isfinite(got[1])) << what;
        EXPECT_EQ(got[1], 0.0) << what;  // (-inf, -inf): the top-left pixel
      }
    }
  }
  KernelCall empty("GridSample");
  empty.In(F32({1, 3, 2, 2}, std::vector<float>(12, 1))).In(F32({1, 0, 5, 2}, {}));
  empty.Out(DType::kF32);
  EXPECT_EQ(Dims(RunCall(empty)[0]), (std::vector<int64_t>{1, 3, 0, 5}));
  KernelCall bad("GridSample");
  bad.In(F32({1, 1, 2, 2}, {0, 1, 2, 3})).In(F32({1, 1, 1, 3}, {0, 0, 0})).Out(DType::kF32);
  absl::StatusOr<std::vector<Tensor>> r = bad.Run();
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("grid"));
  KernelCall mode("GridSample");
  mode.In(F32({1, 1, 2, 2}, {0, 1, 2, 3})).In(Grid()).Attr("mode", std::string("area"));
  mode.Out(DType::kF32);
  EXPECT_FALSE(mode.Run().ok());
}

}  // namespace
}  // namespace dynvm
