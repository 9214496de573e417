// Tests of the reference pooling kernels (MaxPool with Indices, AveragePool, the global pools)
// against hand-computed values.
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using ::dynvm::testing::F32;
using ::dynvm::testing::KernelCall;
using ::dynvm::testing::ToDoubles;
using ::dynvm::testing::ToInts;
using ::testing::DoubleNear;
using ::testing::Pointwise;

// [1, 1, 4, 4] holding 0..15 row-major.
Tensor Grid() {
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(i);
  return F32({1, 1, 4, 4}, v);
}

std::vector<Tensor> RunCall(KernelCall& call) {
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<Tensor>{};
}

std::vector<int64_t> Dims(const Tensor& t) { return {t.dims().begin(), t.dims().end()}; }

TEST(PoolKernelTest, MaxPoolWithIndicesAndAveragePool) {
  KernelCall max("MaxPool");
  max.In(Grid())
      .Attr("kernel_shape", std::vector<int64_t>{2, 2})
      .Attr("strides", std::vector<int64_t>{2, 2});
  max.Out(DType::kF32).Out(DType::kI64);
  std::vector<Tensor> m = RunCall(max);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(Dims(m[0]), (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_EQ(ToDoubles(m[0]), (std::vector<double>{5, 7, 13, 15}));
  EXPECT_EQ(ToInts(m[1]), (std::vector<int64_t>{5, 7, 13, 15}));
  KernelCall avg("AveragePool");
  avg.In(Grid())
      .Attr("kernel_shape", std::vector<int64_t>{2, 2})
      .Attr("strides", std::vector<int64_t>{2, 2});
  avg.Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(avg)[0]), Pointwise(DoubleNear(1e-6), {2.5, 4.5, 10.5, 12.5}));
}

TEST(PoolKernelTest, PaddingCountsOnlyWhenAsked) {
  // [[1, 2], [3, 4]], a 3x3 window with one pad all round: every window covers all four.
  for (int64_t include : {0, 1}) {
    KernelCall avg("AveragePool");
    avg.In(F32({1, 1, 2, 2}, {1, 2, 3, 4})).Attr("kernel_shape", std::vector<int64_t>{3, 3});
    avg.Attr("pads", std::vector<int64_t>{1, 1, 1, 1})
        .Attr("count_include_pad", include)
        .Out(DType::kF32);
    const double want = include ? 10.0 / 9 : 2.5;
    EXPECT_THAT(ToDoubles(RunCall(avg)[0]), Pointwise(DoubleNear(1e-6), {want, want, want, want}));
  }
}

TEST(PoolKernelTest, CeilModeAutoPadAndDilations) {
  for (int64_t ceil : {0, 1}) {
    KernelCall max("MaxPool");
    max.In(Grid())
        .Attr("kernel_shape", std::vector<int64_t>{3, 3})
        .Attr("strides", std::vector<int64_t>{2, 2});
    max.Attr("ceil_mode", ceil).Out(DType::kF32);
    const Tensor y = RunCall(max)[0];
    if (ceil) {
      EXPECT_EQ(Dims(y), (std::vector<int64_t>{1, 1, 2, 2}));
      EXPECT_EQ(ToDoubles(y), (std::vector<double>{10, 11, 14, 15}));
    } else {
      EXPECT_EQ(ToDoubles(y), (std::vector<double>{10}));
    }
  }
  const Tensor row = F32({1, 1, 5}, {1, 2, 3, 4, 5});
  for (const std::string pad : {"SAME_UPPER", "SAME_LOWER"}) {
    KernelCall max("MaxPool");
    max.In(row)
        .Attr("kernel_shape", std::vector<int64_t>{2})
        .Attr("auto_pad", pad)
        .Out(DType::kF32);
    // One pad in all: at the end (UPPER) or at the beginning (LOWER).
    EXPECT_EQ(ToDoubles(RunCall(max)[0]), pad == "SAME_UPPER"
                                              ? (std::vector<double>{2, 3, 4, 5, 5})
                                              : (std::vector<double>{1, 2, 3, 4, 5}));
  }
  KernelCall dilated("MaxPool");
  dilated.In(F32({1, 1, 5}, {1, 5, 2, 4, 3})).Attr("kernel_shape", std::vector<int64_t>{2});
  dilated.Attr("dilations", std::vector<int64_t>{2}).Out(DType::kF32);
  EXPECT_EQ(ToDoubles(RunCall(dilated)[0]),
            (std::vector<double>{2, 5, 3}));  // pairs (0,2) (1,3) (2,4)
}

TEST(PoolKernelTest, GlobalPoolsAndErrors) {
  std::vector<float> v(8);
  for (int i = 0; i < 8; ++i) v[i] = static_cast<float>(i);
  KernelCall gavg("GlobalAveragePool");
  gavg.In(F32({1, 2, 2, 2}, v)).Out(DType::kF32);
  const Tensor a = RunCall(gavg)[0];
  EXPECT_EQ(Dims(a), (std::vector<int64_t>{1, 2, 1, 1}));
  EXPECT_THAT(ToDoubles(a), Pointwise(DoubleNear(1e-6), {1.5, 5.5}));
  KernelCall gmax("GlobalMaxPool");
  gmax.In(F32({1, 2, 2, 2}, v)).Out(DType::kF32);
  EXPECT_EQ(ToDoubles(RunCall(gmax)[0]), (std::vector<double>{3, 7}));
  KernelCall too_big("MaxPool");
  too_big.In(F32({1, 1, 2}, {1, 2})).Attr("kernel_shape", std::vector<int64_t>{3}).Out(DType::kF32);
  EXPECT_EQ(too_big.Run().status().code(), absl::StatusCode::kInvalidArgument);
  KernelCall no_kernel("MaxPool");
  no_kernel.In(F32({1, 1, 2}, {1, 2})).Out(DType::kF32);
  EXPECT_FALSE(no_kernel.Run().ok());
}

}  // namespace
}  // namespace dynvm
