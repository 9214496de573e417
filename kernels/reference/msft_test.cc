// The com.microsoft reference kernels (kernels/reference/msft.cc) against values computed here
// from ORT's definitions; tests/conformance/msft checks them against ONNX Runtime itself.
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using testing::F32;
using testing::KernelCall;
using testing::ToDoubles;

constexpr char kMs[] = "com.microsoft";

Tensor U8(std::vector<int64_t> dims, std::vector<uint8_t> v) {
  return testing::Make<uint8_t>(DType::kU8, std::move(dims), std::move(v));
}

TEST(MsftKernelTest, FastGeluAddsTheBiasAlongTheLastAxis) {
  const Tensor x = F32({2, 2}, {0.5f, -1, 2, 0});
  const Tensor bias = F32({2}, {0.25f, 1});
  absl::StatusOr<std::vector<Tensor>> r =
      KernelCall("FastGelu", kMs).In(x).In(bias).Out(DType::kF32).Run();
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<double> xs = {0.75, 0, 2.25, 1};
  const std::vector<double> got = ToDoubles((*r)[0]);
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    EXPECT_NEAR(got[i], 0.5 * v * (1 + std::tanh(0.7978845608 * (v + 0.044715 * v * v * v))), 1e-6);
  }
  // A bias that is not the last dim.
  EXPECT_FALSE(
      KernelCall("FastGelu", kMs).In(x).In(F32({3}, {1, 2, 3})).Out(DType::kF32).Run().ok());
}

TEST(MsftKernelTest, QuickGeluAndBiasGelu) {
  const Tensor x = F32({3}, {-2, 0.5f, 3});
  absl::StatusOr<std::vector<Tensor>> q =
      KernelCall("QuickGelu", kMs).In(x).Out(DType::kF32).Attr("alpha", 0.5f).Run();
  ASSERT_TRUE(q.ok()) << q.status();
  absl::StatusOr<std::vector<Tensor>> b =
      KernelCall("BiasGelu", kMs).In(x).In(F32({3}, {1, 0, -1})).Out(DType::kF32).Run();
  ASSERT_TRUE(b.ok()) << b.status();
  const std::vector<double> xs = {-2, 0.5, 3}, bs = {-1, 0.5, 2};
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(ToDoubles((*q)[0])[i], xs[i] / (1 + std::exp(-0.5 * xs[i])), 1e-6);
    EXPECT_NEAR(ToDoubles((*b)[0])[i], 0.5 * bs[i] * (1 + std::erf(bs[i] / std::sqrt(2.0))), 1e-6);
  }
}

TEST(MsftKernelTest, SkipSimplifiedLayerNormalizationBroadcastsSkip) {
  const Tensor x = F32({2, 2}, {1, 2, 3, 4});
  const Tensor skip = F32({2}, {1, -1});
  const Tensor gamma = F32({2}, {1, 2});
  absl::StatusOr<std::vector<Tensor>> r = KernelCall("SkipSimplifiedLayerNormalization", kMs)
                                              .In(x)
                                              .In(skip)
                                              .In(gamma)
                                              .Out(DType::kF32)
                                              .Attr("epsilon", 0.0f)
                                              .Run();
  ASSERT_TRUE(r.ok()) << r.status();
  // Rows (2, 1) and (4, 3): RMS sqrt(2.5) and sqrt(12.5).
  const std::vector<double> want = {2 / std::sqrt(2.5), 2 / std::sqrt(2.5), 4 / std::sqrt(12.5),
                                    6 / std::sqrt(12.5)};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(ToDoubles((*r)[0])[i], want[i], 1e-6) << i;
}

TEST(MsftKernelTest, SkipLayerNormalizationWithBetaAndBias) {
  const Tensor x = F32({1, 3}, {1, 2, 3});
  absl::StatusOr<std::vector<Tensor>> r = KernelCall("SkipLayerNormalization", kMs)
                                              .In(x)
                                              .In(F32({1, 3}, {0, 0, 0}))
                                              .In(F32({3}, {1, 1, 1}))
                                              .In(F32({3}, {10, 10, 10}))
                                              .In(F32({3}, {0, 0, 3}))
                                              .Out(DType::kF32)
                                              .Attr("epsilon", 0.0f)
                                              .Run();
  ASSERT_TRUE(r.ok()) << r.status();
  // sum (1, 2, 6): mean 3, variance 14/3.
  const double inv = 1 / std::sqrt(14.0 / 3);
  const std::vector<double> want = {10 - 2 * inv, 10 - inv, 10 + 3 * inv};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(ToDoubles((*r)[0])[i], want[i], 1e-6) << i;
}

TEST(MsftKernelTest, SimplifiedLayerNormalizationOverTwoAxes) {
  const Tensor x = F32({1, 2, 2}, {1, 1, 1, 1});
  absl::StatusOr<std::vector<Tensor>> r = KernelCall("SimplifiedLayerNormalization")
                                              .In(x)
                                              .In(F32({2, 2}, {1, 2, 3, 4}))
                                              .Out(DType::kF32)
                                              .Out(DType::kF32)
                                              .Attr("axis", int64_t{1})
                                              .Attr("epsilon", 0.0f)
                                              .Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(ToDoubles((*r)[0]), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ((*r)[1].numel(), 1);
  EXPECT_NEAR(ToDoubles((*r)[1])[0], 1.0, 1e-7);
}

TEST(MsftKernelTest, FusedMatMulTransposesAndScales) {
  const Tensor a = F32({2, 2}, {1, 2, 3, 4});  // transA: [[1, 3], [2, 4]]
  const Tensor b = F32({2, 2}, {5, 6, 7, 8});  // transB: [[5, 7], [6, 8]]
  absl::StatusOr<std::vector<Tensor>> r = KernelCall("FusedMatMul", kMs)
                                              .In(a)
                                              .In(b)
                                              .Out(DType::kF32)
                                              .Attr("transA", int64_t{1})
                                              .Attr("transB", int64_t{1})
                                              .Attr("alpha", 0.5f)
                                              .Run();
  ASSERT_TRUE(r.ok()) << r.status();
  // [[1, 3], [2, 4]] x [[5, 7], [6, 8]] = [[23, 31], [34, 46]].
  EXPECT_EQ(ToDoubles((*r)[0]), (std::vector<double>{11.5, 15.5, 17, 23}));
}

// Two rows of K = 20 in blocks of 16 (the second padded), 4 bits, packed low nibble first.
TEST(MsftKernelTest, MatMulNBitsDequantizesPerBlock) {
  const int64_t k = 20, n = 2, blocks = 2, blob = 8;
  std::vector<uint8_t> b(n * blocks * blob, 0);
  std::vector<int> q(n * blocks * 16, 0);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t e = 0; e < k; ++e) q[j * 32 + e] = static_cast<int>((j * 7 + e * 3) % 16);
  }
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(q[2 * i] | q[2 * i + 1] << 4);
  const std::vector<float> scales = {0.5f, 0.25f, 1.0f, 2.0f};
  const std::vector<uint8_t> zp = {0x3 | 0x9 << 4, 0x8 | 0x1 << 4};  // per row: 2 nibbles
  std::vector<float> a(k);
  for (int64_t e = 0; e < k; ++e) a[e] = static_cast<float>(e % 5) - 2;
  for (bool with_zp : {false, true}) {
    KernelCall call("MatMulNBits", kMs);
    call.In(F32({1, k}, a)).In(U8({n, blocks, blob}, b)).In(F32({n * blocks}, scales));
    if (with_zp) call.In(U8({n}, zp));
    absl::StatusOr<std::vector<Tensor>> r = call.Out(DType::kF32)
                                                .Attr("K", k)
                                                .Attr("N", n)
                                                .Attr("bits", int64_t{4})
                                                .Attr("block_size", int64_t{16})
                                                .Run();
    ASSERT_TRUE(r.ok()) << r.status();
    const std::vector<int> zps =
        with_zp ? std::vector<int>{3, 9, 8, 1} : std::vector<int>{8, 8, 8, 8};
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t e = 0; e < k; ++e) {
        want += a[e] * (q[j * 32 + e] - zps[j * 2 + e / 16]) * scales[j * 2 + e / 16];
      }
      EXPECT_NEAR(ToDoubles((*r)[0])[j], want, 1e-5) << with_zp << " " << j;
    }
  }
}

// One head of 4 at positions 1 and 2 (an offset position_ids of 1): halves (x0, x2), (x1, x3)
// rotate by the cached angles; interleaved, pairs (x0, x1), (x2, x3).
TEST(MsftKernelTest, RotaryEmbeddingRotatesHalvesOrPairs) {
  const Tensor x = F32({1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  const Tensor cos = F32({3, 2}, {1, 1, 0, 0.5f, -1, 0});
  const Tensor sin = F32({3, 2}, {0, 0, 1, 0.5f, 0, 1});
  for (int64_t interleaved : {0, 1}) {
    absl::StatusOr<std::vector<Tensor>> r = KernelCall("RotaryEmbedding", kMs)
                                                .In(x)
                                                .In(testing::I64({1}, {1}))
                                                .In(cos)
                                                .In(sin)
                                                .Out(DType::kF32)
                                                .Attr("interleaved", interleaved)
                                                .Run();
    ASSERT_TRUE(r.ok()) << r.status();
    // Position 1: (cos, sin) = (0, 1) and (0.5, 0.5); position 2: (-1, 0) and (0, 1).
    const std::vector<double> want = interleaved
                                         ? std::vector<double>{-2, 1, -0.5, 3.5, -5, -6, -8, 7}
                                         : std::vector<double>{-3, -1, 1, 3, -5, -8, -7, 6};
    EXPECT_EQ(ToDoubles((*r)[0]), want) << interleaved;
  }
}

TEST(MsftKernelTest, MatMulIntegerToFloatAndDynamicQuantizeMatMul) {
  // ((3 - 1) (2 - 2) + (5 - 1) (4 - 2)) 0.5 0.25 + 0.5 = 1.5.
  absl::StatusOr<std::vector<Tensor>> r = KernelCall("MatMulIntegerToFloat", kMs)
                                              .In(U8({1, 2}, {3, 5}))
                                              .In(U8({2, 1}, {2, 4}))
                                              .In(F32({}, {0.5f}))
                                              .In(F32({}, {0.25f}))
                                              .In(U8({}, {1}))
                                              .In(U8({}, {2}))
                                              .In(F32({1}, {0.5f}))
                                              .Out(DType::kF32)
                                              .Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(ToDoubles((*r)[0]), (std::vector<double>{1.5}));
  // A (0, 2.55) quantizes with scale 0.01 and zero point 0 to (0, 255): 255 * 2 * 0.01.
  absl::StatusOr<std::vector<Tensor>> d = KernelCall("DynamicQuantizeMatMul", kMs)
                                              .In(F32({1, 2}, {0, 2.55f}))
                                              .In(testing::Make<int8_t>(DType::kI8, {2, 1}, {1, 2}))
                                              .In(F32({}, {1}))
                                              .Out(DType::kF32)
                                              .Run();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_NEAR(ToDoubles((*d)[0])[0], 5.1, 1e-5);
}

// Two tokens: word[1] + position[0] = (0, 1) normalizes to (-1, 1); word[0] + position[1] =
// (3, 3) to (0, 0); then gamma and beta. mask (1, 0) counts one token.
TEST(MsftKernelTest, EmbedLayerNormalizationSumsNormalizesAndCountsTheMask) {
  absl::StatusOr<std::vector<Tensor>> r = KernelCall("EmbedLayerNormalization", kMs)
                                              .In(testing::I32({1, 2}, {1, 0}))
                                              .Absent()
                                              .In(F32({2, 2}, {1, 3, 0, 0}))
                                              .In(F32({2, 2}, {0, 1, 2, 0}))
                                              .Absent()
                                              .In(F32({2}, {2, 1}))
                                              .In(F32({2}, {0.5f, -0.5f}))
                                              .In(testing::I32({1, 2}, {1, 0}))
                                              .Out(DType::kF32)
                                              .Out(DType::kI32)
                                              .Out(DType::kF32)
                                              .Run();
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<double> y = ToDoubles((*r)[0]), sum = ToDoubles((*r)[2]);
  const std::vector<double> want_y = {-1.5, 0.5, 0.5, -0.5}, want_sum = {0, 1, 3, 3};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(y[i], want_y[i], 1e-5);
    EXPECT_EQ(sum[i], want_sum[i]);
  }
  EXPECT_EQ(ToDoubles((*r)[1]), std::vector<double>{1});
  // An id outside the word table.
  EXPECT_FALSE(KernelCall("EmbedLayerNormalization", kMs)
                   .In(testing::I32({1, 2}, {2, 0}))
                   .Absent()
                   .In(F32({2, 2}, {1, 3, 0, 0}))
                   .In(F32({2, 2}, {0, 1, 2, 0}))
                   .Absent()
                   .In(F32({2}, {2, 1}))
                   .In(F32({2}, {0.5f, -0.5f}))
                   .Out(DType::kF32)
                   .Run()
                   .ok());
}

}  // namespace
}  // namespace dynvm
