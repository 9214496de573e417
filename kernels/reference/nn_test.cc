// Tests of the reference Conv, ConvTranspose, BatchNormalization, InstanceNormalization, LRN,
// Shrink and EyeLike kernels against hand-computed values.
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using ::dynvm::testing::F32;
using ::dynvm::testing::KernelCall;
using ::dynvm::testing::ToDoubles;
using ::testing::DoubleNear;
using ::testing::Pointwise;

std::vector<Tensor> RunCall(KernelCall& call) {
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<Tensor>{Tensor()};
}

std::vector<int64_t> Dims(const Tensor& t) { return {t.dims().begin(), t.dims().end()}; }

// [1, 1, 3, 3] holding 0..8.
Tensor Square() { return F32({1, 1, 3, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8}); }
Tensor Ones2x2() { return F32({1, 1, 2, 2}, {1, 1, 1, 1}); }

TEST(NnKernelTest, ConvSumsWindowsWithBiasPadsStridesAndGroups) {
  KernelCall plain("Conv");
  plain.In(Square()).In(Ones2x2()).In(F32({1}, {1})).Out(DType::kF32);
  const Tensor y = RunCall(plain)[0];
  EXPECT_EQ(Dims(y), (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_THAT(ToDoubles(y), Pointwise(DoubleNear(1e-6), {9, 13, 21, 25}));  // 2x2 sums + 1
  KernelCall padded("Conv");
  padded.In(Square()).In(Ones2x2()).Attr("pads", std::vector<int64_t>{1, 1, 1, 1});
  padded.Attr("strides", std::vector<int64_t>{2, 2}).Out(DType::kF32);
  // Windows at (-1,-1), (-1,1), (1,-1), (1,1): {0}, {1,2}, {3,6}, {4,5,7,8}.
  EXPECT_THAT(ToDoubles(RunCall(padded)[0]), Pointwise(DoubleNear(1e-6), {0, 3, 9, 24}));
  KernelCall grouped("Conv");
  grouped.In(F32({1, 2, 1, 1}, {2, 3}))
      .In(F32({2, 1, 1, 1}, {10, 100}))
      .Attr("group", int64_t{2})
      .Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(grouped)[0]), Pointwise(DoubleNear(1e-6), {20, 300}));
  KernelCall same("Conv");
  same.In(Square()).In(Ones2x2()).Attr("auto_pad", std::string("SAME_UPPER")).Out(DType::kF32);
  // One pad at the end of each dim: the last row and column sum fewer elements.
  EXPECT_THAT(ToDoubles(RunCall(same)[0]),
              Pointwise(DoubleNear(1e-6), {8, 12, 7, 20, 24, 13, 13, 15, 8}));
  KernelCall mismatch("Conv");
  mismatch.In(Square()).In(F32({1, 2, 1, 1}, {1, 1})).Out(DType::kF32);
  EXPECT_EQ(mismatch.Run().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NnKernelTest, ConvTransposeScattersTheKernel) {
  // x [1, 1, 2] = [1, 2], w [1, 1, 2] = [1, 10], stride 1: [1, 10 + 2, 20].
  KernelCall plain("ConvTranspose");
  plain.In(F32({1, 1, 2}, {1, 2})).In(F32({1, 1, 2}, {1, 10})).Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(plain)[0]), Pointwise(DoubleNear(1e-6), {1, 12, 20}));
  // Stride 2 with a bias of 0.5: positions 0, 1 from x[0], 2, 3 from x[1].
  KernelCall strided("ConvTranspose");
  strided.In(F32({1, 1, 2}, {1, 2})).In(F32({1, 1, 2}, {1, 10})).In(F32({1}, {0.5f}));
  strided.Attr("strides", std::vector<int64_t>{2}).Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(strided)[0]), Pointwise(DoubleNear(1e-6), {1.5, 10.5, 2.5, 20.5}));
  // One pad at each end trims the first and last positions; output_shape 4 with stride 2 pads
  // nothing.
  KernelCall padded("ConvTranspose");
  padded.In(F32({1, 1, 2}, {1, 2}))
      .In(F32({1, 1, 2}, {1, 10}))
      .Attr("pads", std::vector<int64_t>{1, 1});
  padded.Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(padded)[0]), Pointwise(DoubleNear(1e-6), {12}));
  KernelCall shaped("ConvTranspose");
  shaped.In(F32({1, 1, 2}, {1, 2}))
      .In(F32({1, 1, 2}, {1, 10}))
      .Attr("strides", std::vector<int64_t>{2});
  shaped.Attr("output_shape", std::vector<int64_t>{4}).Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(shaped)[0]), Pointwise(DoubleNear(1e-6), {1, 10, 2, 20}));
}

TEST(NnKernelTest, ConvIntegerSubtractsZeroPoints) {
  // x u8 [1, 1, 2, 2] = [10, 11, 12, 13] with zero point 10; w u8 [1, 1, 2, 2] = [1, 2, 3, 4]
  // with zero point 1: (0, 1, 2, 3) . (0, 1, 2, 3) = 14, as i32.
  KernelCall call("ConvInteger");
  call.In(testing::Make<uint8_t>(DType::kU8, {1, 1, 2, 2}, {10, 11, 12, 13}));
  call.In(testing::Make<uint8_t>(DType::kU8, {1, 1, 2, 2}, {1, 2, 3, 4}));
  call.In(testing::Make<uint8_t>(DType::kU8, {}, {10}))
      .In(testing::Make<uint8_t>(DType::kU8, {}, {1}));
  call.Out(DType::kI32);
  const Tensor y = RunCall(call)[0];
  EXPECT_EQ(y.dtype(), DType::kI32);
  EXPECT_EQ(testing::ToInts(y), (std::vector<int64_t>{14}));
}

TEST(NnKernelTest, BatchNormalizationInferenceAndTraining) {
  KernelCall inference("BatchNormalization");
  inference.In(F32({1, 2, 1, 1}, {1, 2}))
      .In(F32({2}, {2, 3}))
      .In(F32({2}, {0.5f, 0}))
      .In(F32({2}, {1, 0}));
  inference.In(F32({2}, {4, 1})).Attr("epsilon", 0.0f).Out(DType::kF32);
  // 2 * (1 - 1) / 2 + 0.5 and 3 * (2 - 0) / 1.
  EXPECT_THAT(ToDoubles(RunCall(inference)[0]), Pointwise(DoubleNear(1e-6), {0.5, 6.0}));
  KernelCall training("BatchNormalization");
  training.In(F32({2, 1, 1, 1}, {1, 3}))
      .In(F32({1}, {1}))
      .In(F32({1}, {0}))
      .In(F32({1}, {0}))
      .In(F32({1}, {1}));
  training.Attr("epsilon", 0.0f).Attr("training_mode", int64_t{1});
  training.Out(DType::kF32).Out(DType::kF32).Out(DType::kF32);
  const std::vector<Tensor> t = RunCall(training);
  ASSERT_EQ(t.size(), 3u);
  // Batch mean 2, variance 1; running mean 0 * 0.9 + 2 * 0.1, variance 1 * 0.9 + 1 * 0.1.
  EXPECT_THAT(ToDoubles(t[0]), Pointwise(DoubleNear(1e-6), {-1, 1}));
  EXPECT_THAT(ToDoubles(t[1]), Pointwise(DoubleNear(1e-6), {0.2}));
  EXPECT_THAT(ToDoubles(t[2]), Pointwise(DoubleNear(1e-6), {1.0}));
}

TEST(NnKernelTest, InstanceNormalizationAndLrn) {
  KernelCall inorm("InstanceNormalization");
  inorm.In(F32({1, 1, 2}, {1, 3}))
      .In(F32({1}, {1}))
      .In(F32({1}, {0}))
      .Attr("epsilon", 0.0f)
      .Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(inorm)[0]), Pointwise(DoubleNear(1e-6), {-1, 1}));
  KernelCall lrn("LRN");
  lrn.In(F32({1, 2, 1, 1}, {1, 2})).Attr("size", int64_t{2}).Attr("alpha", 1.0f).Attr("beta", 1.0f);
  lrn.Attr("bias", 1.0f).Out(DType::kF32);
  // Channel 0 sees channels 0..1 (1 + 4 = 5), channel 1 sees itself (4).
  EXPECT_THAT(ToDoubles(RunCall(lrn)[0]), Pointwise(DoubleNear(1e-6), {1 / 3.5, 2.0 / 3}));
}

TEST(NnKernelTest, ShrinkAndEyeLike) {
  KernelCall shrink("Shrink");
  shrink.In(F32({5}, {-2, -1, 0, 1, 2})).Attr("lambd", 1.5f).Attr("bias", 0.5f).Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(shrink)[0]),
              Pointwise(DoubleNear(1e-6), {-1.5, 0.0, 0.0, 0.0, 1.5}));
  KernelCall eye("EyeLike");
  eye.In(F32({2, 3}, {5, 5, 5, 5, 5, 5})).Attr("k", int64_t{1}).Out(DType::kI64);
  EXPECT_EQ(testing::ToInts(RunCall(eye)[0]), (std::vector<int64_t>{0, 1, 0, 0, 0, 1}));
}

}  // namespace
}  // namespace dynvm
