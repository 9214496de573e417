// Tests of the reference Resize kernel against hand-computed values.
#include <cstdint>
#include <string>
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
using ::testing::Pointwise;

// [1, 1, 1, 2] = [[[[1, 3]]]] resized by scales [1, 1, 1, 2] (or to sizes [1, 1, 1, 4]).
std::vector<double> Resize(const std::string& mode, const std::string& transform,
                           bool use_sizes = false) {
  KernelCall call("Resize");
  call.In(F32({1, 1, 1, 2}, {1, 3})).In(F32({0}, {}));
  if (use_sizes) {
    call.In(F32({0}, {})).In(I64({4}, {1, 1, 1, 4}));
  } else {
    call.In(F32({4}, {1, 1, 1, 2}));
  }
  call.Attr("mode", mode).Attr("coordinate_transformation_mode", transform).Out(DType::kF32);
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? ToDoubles((*r)[0]) : std::vector<double>{};
}

TEST(ResizeKernelTest, NearestAndLinearUpsampling) {
  // Output x maps to (x + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25 (half_pixel).
  EXPECT_THAT(Resize("nearest", "half_pixel"), Pointwise(DoubleNear(1e-6), {1, 1, 3, 3}));
  // Linear, clamped at the edges: 1, 1 + 2 * 0.25, 1 + 2 * 0.75, 3.
  EXPECT_THAT(Resize("linear", "half_pixel"), Pointwise(DoubleNear(1e-6), {1.0, 1.5, 2.5, 3.0}));
  // align_corners: x * (2 - 1) / (4 - 1) = 0, 1/3, 2/3, 1.
  EXPECT_THAT(Resize("linear", "align_corners", /*use_sizes=*/true),
              Pointwise(DoubleNear(1e-6), {1.0, 1 + 2.0 / 3, 1 + 4.0 / 3, 3.0}));
  // asymmetric: x / 2 = 0, 0.5, 1, 1.5.
  EXPECT_THAT(Resize("linear", "asymmetric"), Pointwise(DoubleNear(1e-6), {1, 2, 3, 3}));
}

// pytorch_half_pixel maps every coordinate of an output of length 1 to the input's 0 (the
// operator's text: "length_resized > 1 ? (x_resized + 0.5) / scale - 0.5 : 0"), so cubic, whose
// weights at an integer coordinate are 0, 1, 0, 0, takes the first element, whatever the scale
// that made the length 1 (seed 7 graphs 8911 and 11847 of the differential fuzzer).
TEST(ResizeKernelTest, PytorchHalfPixelToLengthOneTakesTheFirstElement) {
  const std::vector<float> x = {1.11589f, -0.56936634f, -2.2965572f, 4.0f};
  for (bool use_sizes : {true, false}) {
    for (float a : {-0.75f, -0.5f}) {
      for (int exclude : {0, 1}) {
        SCOPED_TRACE(::testing::Message()
                     << "sizes " << use_sizes << " a " << a << " exclude " << exclude);
        KernelCall call("Resize");
        call.In(F32({1, 4}, x)).In(F32({0}, {}));
        if (use_sizes) {
          call.In(F32({0}, {})).In(I64({2}, {3, 1}));
        } else {
          call.In(F32({2}, {3, 0.4f}));  // floor(4 x 0.4) = 1
        }
        call.Attr("mode", std::string("cubic"))
            .Attr("coordinate_transformation_mode", std::string("pytorch_half_pixel"))
            .Attr("cubic_coeff_a", a)
            .Attr("exclude_outside", int64_t{exclude})
            .Out(DType::kF32);
        absl::StatusOr<std::vector<Tensor>> r = call.Run();
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ((*r)[0].dims(), (std::vector<int64_t>{3, 1}));
        EXPECT_THAT(ToDoubles((*r)[0]),
                    Pointwise(DoubleNear(1e-6), std::vector<double>(3, 1.11589f)));
      }
    }
  }
}

TEST(ResizeKernelTest, CubicKeepsConstantsAndRefusesBadInputs) {
  // Cubic weights sum to one: a constant input stays constant.
  KernelCall cubic("Resize");
  cubic.In(F32({1, 3}, {2, 2, 2}))
      .In(F32({0}, {}))
      .In(F32({2}, {1, 2}))
      .Attr("mode", std::string("cubic"));
  cubic.Out(DType::kF32);
  absl::StatusOr<std::vector<Tensor>> r = cubic.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(ToDoubles((*r)[0]), Pointwise(DoubleNear(1e-6), std::vector<double>(6, 2.0)));
  KernelCall both("Resize");
  both.In(F32({2}, {1, 2})).In(F32({0}, {})).In(F32({1}, {2})).In(I64({1}, {4})).Out(DType::kF32);
  EXPECT_EQ(both.Run().status().code(), absl::StatusCode::kInvalidArgument);
  KernelCall bad_mode("Resize");
  bad_mode.In(F32({2}, {1, 2}))
      .In(F32({0}, {}))
      .In(F32({1}, {2}))
      .Attr("mode", std::string("area"))
      .Out(DType::kF32);
  EXPECT_FALSE(bad_mode.Run().ok());
}

}  // namespace
}  // namespace dynvm
