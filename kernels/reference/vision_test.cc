// Tests of the reference MeanVarianceNormalization, MaxUnpool, RoiAlign and GridSample kernels
// against hand-computed values, beyond ONNX's node cases: edge shapes, empty tensors, NaN and
// bad input.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

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

TEST(VisionKernelTest, GridSampleNanEmptyAndBadShapes) {
  KernelCall nan("GridSample");
  nan.In(F32({1, 1, 2, 2}, {0, 1, 2, 3})).In(F32({1, 1, 1, 2}, {kNaN, 0})).Out(DType::kF32);
  EXPECT_TRUE(std::isnan(ToDoubles(RunCall(nan)[0])[0]));
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
