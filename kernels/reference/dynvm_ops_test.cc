#include <cmath>

#include "gtest/gtest.h"
#include "kernels/reference/philox.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using testing::F32;
using testing::I64;
using testing::KernelCall;

// Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
TEST(PhiloxTest, KnownAnswers) {
  using reference::Philox4x32;
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(
      Philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
      (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(
      Philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
      (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

std::vector<int64_t> Sample(const Tensor& logits, float t, int64_t seed, int64_t step) {
  absl::StatusOr<std::vector<Tensor>> r = KernelCall("Sample", "dynvm")
                                              .In(logits)
                                              .In(Tensor::Scalar(t))
                                              .In(Tensor::ScalarI64(seed))
                                              .In(Tensor::ScalarI64(step))
                                              .Out(DType::kI64)
                                              .Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? testing::ToInts((*r)[0]) : std::vector<int64_t>{};
}

TEST(SampleTest, ZeroTemperatureIsArgmax) {
  Tensor logits = F32({3, 4}, {0, 5, 1, 5, -1, -2, -3, -0.5f, 2, 2, 2, 2});
  EXPECT_EQ(Sample(logits, 0, 1, 0), (std::vector<int64_t>{1, 3, 0}));
  Tensor nan = F32({1, 3}, {1, std::nanf(""), 2});
  EXPECT_EQ(Sample(nan, 0.8f, 1, 0), (std::vector<int64_t>{1}));
}

TEST(SampleTest, SameSeedAndStepSameToken) {
  Tensor logits = F32({2, 5}, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 1, 1, 1, 1, 1});
  for (int step = 0; step < 20; ++step) {
    EXPECT_EQ(Sample(logits, 1.0f, 42, step), Sample(logits, 1.0f, 42, step));
  }
  bool differs = false;
  for (int step = 0; step < 20; ++step)
    differs |= Sample(logits, 1.0f, 42, step) != Sample(logits, 1.0f, 43, step);
  EXPECT_TRUE(differs);
}

TEST(SampleTest, FrequenciesFollowTheSoftmax) {
  // p = softmax([0, ln 2, ln 3, ln 4]) = [0.1, 0.2, 0.3, 0.4].
  Tensor logits = F32({1, 4}, {0, std::log(2.0f), std::log(3.0f), std::log(4.0f)});
  std::vector<int> count(4, 0);
  const int n = 20000;
  for (int step = 0; step < n; ++step) ++count[Sample(logits, 1.0f, 7, step)[0]];
  for (int k = 0; k < 4; ++k)
    EXPECT_NEAR(count[k] / static_cast<double>(n), 0.1 * (k + 1), 0.015) << k;
  // A low temperature sharpens towards the argmax.
  int top = 0;
  for (int step = 0; step < 2000; ++step) top += Sample(logits, 0.05f, 7, step)[0] == 3;
  EXPECT_GT(top, 1980);  // p = 0.9968: 1993.7 expected, sd 2.5
}

TEST(SampleTest, BadInputsAreErrors) {
  EXPECT_FALSE(KernelCall("Sample", "dynvm")
                   .In(F32({4}, {1, 2, 3, 4}))
                   .In(Tensor::Scalar(1))
                   .In(Tensor::ScalarI64(1))
                   .In(Tensor::ScalarI64(0))
                   .Out(DType::kI64)
                   .Run()
                   .ok());
  EXPECT_FALSE(KernelCall("Sample", "dynvm")
                   .In(F32({1, 0}, {}))
                   .In(Tensor::Scalar(1))
                   .In(Tensor::ScalarI64(1))
                   .In(Tensor::ScalarI64(0))
                   .Out(DType::kI64)
                   .Run()
                   .ok());
  EXPECT_FALSE(KernelCall("Sample", "dynvm")
                   .In(F32({1, 2}, {1, 2}))
                   .In(F32({2}, {1, 1}))
                   .In(Tensor::ScalarI64(1))
                   .In(Tensor::ScalarI64(0))
                   .Out(DType::kI64)
                   .Run()
                   .ok());
}

}  // namespace
}  // namespace dynvm

namespace dynvm {
namespace {

// dynvm::Attention (kernels/reference/attention.h) against a hand-computed answer, on every
// backend; attributes a hostile executable could carry are errors, never reads outside.
TEST(AttentionKernelTest, KnownAnswerAndBadAttributes) {
  // One unit: Q [1, 2] = [[1, 0]], K' [2, 2] (K given as [Lk, D] with k_perm [1, 0]),
  // V [2, 1]. Scores scale 1: [1 * 1, 1 * 0] = [1, 0]; softmax [e/(e+1), 1/(e+1)].
  const Tensor q = testing::F32({1, 2}, {1, 0});
  const Tensor k = testing::F32({2, 2}, {1, 0, 0, 1});  // rows: key 0 = (1, 0), key 1 = (0, 1)
  const Tensor v = testing::F32({2, 1}, {2, 4});
  const double e = std::exp(1.0);
  const double want = (2 * e + 4) / (e + 1);
  std::vector<const char*> backends = {"reference"};
#if defined(DYNVM_WITH_DNNL)
  backends.push_back("dnnl");
#endif
  for (const char* backend : backends) {
    SCOPED_TRACE(backend);
    absl::StatusOr<std::vector<Tensor>> r = testing::KernelCall("Attention", "dynvm")
                                                .In(q)
                                                .In(k)
                                                .In(v)
                                                .Out(DType::kF32)
                                                .Attr("k_perm", std::vector<int64_t>{1, 0})
                                                .Attr("scale", 1.0f)
                                                .Backend(backend)
                                                .Run();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NEAR((*r)[0].data<float>()[0], want, 1e-5);
  }
  // A square Q whose repeated axis would pass every dim check.
  const Tensor q2 = testing::F32({2, 2}, {1, 0, 0, 1});
  for (std::vector<int64_t> bad : {std::vector<int64_t>{1, 1}, {0, 0}, {1}, {0, 2}}) {
    absl::StatusOr<std::vector<Tensor>> r = testing::KernelCall("Attention", "dynvm")
                                                .In(q2)
                                                .In(k)
                                                .In(v)
                                                .Out(DType::kF32)
                                                .Attr("q_perm", bad)
                                                .Run();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(r.status().message().find("is not a permutation"), std::string::npos) << r.status();
  }
  absl::StatusOr<std::vector<Tensor>> r = testing::KernelCall("Attention", "dynvm")
                                              .In(q)
                                              .In(k)
                                              .In(v)
                                              .Out(DType::kF32)
                                              .Attr("mask_mode", int64_t{1})
                                              .Run();
  EXPECT_FALSE(r.ok());  // mode 1 needs a mask input
}

}  // namespace
}  // namespace dynvm

namespace dynvm {
namespace {

// dynvm::RMSNorm against the formula computed here, on every backend; bad operands are errors.
TEST(RmsNormKernelTest, MatchesTheFormula) {
  const Tensor x = testing::F32({2, 3}, {1, -2, 3, 0.5f, 0, -0.25f});
  const Tensor scale = testing::F32({3}, {1, 2, -1});
  const float eps = 1e-2f;
  std::vector<const char*> backends = {"reference"};
#if defined(DYNVM_WITH_DNNL)
  backends.push_back("dnnl");
#endif
  for (const char* backend : backends) {
    SCOPED_TRACE(backend);
    absl::StatusOr<std::vector<Tensor>> r = testing::KernelCall("RMSNorm", "dynvm")
                                                .In(x)
                                                .In(scale)
                                                .Out(DType::kF32)
                                                .Attr("epsilon", eps)
                                                .Backend(backend)
                                                .Run();
    ASSERT_TRUE(r.ok()) << r.status();
    for (int row = 0; row < 2; ++row) {
      double ms = 0;
      for (int j = 0; j < 3; ++j) ms += std::pow(x.data<float>()[row * 3 + j], 2) / 3;
      for (int j = 0; j < 3; ++j) {
        const double want =
            x.data<float>()[row * 3 + j] / std::sqrt(ms + eps) * scale.data<float>()[j];
        EXPECT_NEAR((*r)[0].data<float>()[row * 3 + j], want, 1e-5) << row << " " << j;
      }
    }
  }
  // A scale that is not one value per normalized element.
  absl::StatusOr<std::vector<Tensor>> bad = testing::KernelCall("RMSNorm", "dynvm")
                                                .In(x)
                                                .In(testing::F32({2}, {1, 1}))
                                                .Out(DType::kF32)
                                                .Run();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
}

}  // namespace
}  // namespace dynvm
