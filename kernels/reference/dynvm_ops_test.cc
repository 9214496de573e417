#include <cmath>
#include <limits>

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
  // Greedy reads the row itself (no copy): NaN is still the largest, ties the lowest index,
  // and a row of -inf picks its first token.
  EXPECT_EQ(Sample(nan, 0, 1, 0), (std::vector<int64_t>{1}));
  const float inf = std::numeric_limits<float>::infinity();
  Tensor edges = F32({2, 4}, {-inf, -inf, -inf, -inf, -1, inf, 3, inf});
  EXPECT_EQ(Sample(edges, 0, 1, 0), (std::vector<int64_t>{0, 1}));
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

// Sample with top_k, top_p, repetition_penalty and the tokens it applies to.
struct Filters {
  int64_t top_k = 0;
  float top_p = 1;
  float penalty = 1;
  std::vector<Tensor> seen;
};

absl::StatusOr<std::vector<Tensor>> RunFiltered(const Tensor& logits, float t, int64_t seed,
                                                int64_t step, const Filters& f) {
  KernelCall call("Sample", "dynvm");
  call.In(logits)
      .In(Tensor::Scalar(t))
      .In(Tensor::ScalarI64(seed))
      .In(Tensor::ScalarI64(step))
      .In(Tensor::ScalarI64(f.top_k))
      .In(Tensor::Scalar(f.top_p))
      .In(Tensor::Scalar(f.penalty));
  for (const Tensor& s : f.seen) call.In(s);
  return call.Out(DType::kI64).Run();
}

std::vector<int64_t> Sample(const Tensor& logits, float t, int64_t seed, int64_t step,
                            const Filters& f) {
  absl::StatusOr<std::vector<Tensor>> r = RunFiltered(logits, t, seed, step, f);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? testing::ToInts((*r)[0]) : std::vector<int64_t>{};
}

// Neutral settings draw exactly what the four-input form draws.
TEST(SampleTest, NeutralFiltersDrawTheSameTokens) {
  Tensor logits = F32({2, 5}, {0.1f, 0.7f, -0.3f, 0.4f, 0.5f, 1, 2, 0, 1.5f, -1});
  for (int step = 0; step < 50; ++step) {
    EXPECT_EQ(Sample(logits, 0.9f, 11, step, {}), Sample(logits, 0.9f, 11, step));
  }
}

// top_k = 1 and a tiny top_p keep only the largest logit: greedy at any temperature.
TEST(SampleTest, TopKOneAndTinyTopPAreGreedy) {
  Tensor logits = F32({2, 6}, {0.1f, 0.7f, -0.3f, 0.69f, 0.5f, 0.2f, 1, 2, 0, 1.9f, -1, 2.1f});
  for (int step = 0; step < 200; ++step) {
    EXPECT_EQ(Sample(logits, 2.0f, 5, step, {.top_k = 1}), (std::vector<int64_t>{1, 5}));
    EXPECT_EQ(Sample(logits, 2.0f, 5, step, {.top_p = 1e-6f}), (std::vector<int64_t>{1, 5}));
  }
}

// Frequencies against the renormalized distributions; p = [0.1, 0.2, 0.3, 0.4].
TEST(SampleTest, TopKAndTopPFrequencies) {
  Tensor logits = F32({1, 4}, {0, std::log(2.0f), std::log(3.0f), std::log(4.0f)});
  const int n = 20000;
  struct Case {
    Filters f;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {{.top_k = 2}, {0, 0, 3 / 7.0, 4 / 7.0}},
      {{.top_p = 0.5f}, {0, 0, 3 / 7.0, 4 / 7.0}},  // 0.4 < 0.5 <= 0.4 + 0.3
      {{.top_p = 0.75f}, {0, 2 / 9.0, 3 / 9.0, 4 / 9.0}},
      {{.top_k = 3, .top_p = 0.5f}, {0, 0, 3 / 7.0, 4 / 7.0}},  // top-p over the top 3: 4/9 < 0.5
      {{.top_k = 3, .top_p = 0.4f}, {0, 0, 0, 1}},              // 4/9 >= 0.4
      {{.top_k = 9}, {0.1, 0.2, 0.3, 0.4}},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    std::vector<int> count(4, 0);
    for (int step = 0; step < n; ++step) ++count[Sample(logits, 1.0f, 7, step, cases[c].f)[0]];
    for (int k = 0; k < 4; ++k) {
      EXPECT_NEAR(count[k] / static_cast<double>(n), cases[c].want[k], 0.015) << c << " " << k;
    }
  }
  // Ties with the k-th largest logit are kept (Hugging Face's top-k): three equal logits at
  // top_k = 1.
  Tensor tied = F32({1, 4}, {1, 1, 0, 1});
  std::vector<int> count(4, 0);
  for (int step = 0; step < n; ++step) ++count[Sample(tied, 1.0f, 3, step, {.top_k = 1})[0]];
  EXPECT_EQ(count[2], 0);
  for (int k : {0, 1, 3}) EXPECT_NEAR(count[k] / static_cast<double>(n), 1 / 3.0, 0.015) << k;
}

// Hugging Face's repetition penalty: positive logits divided, negative ones multiplied, once per
// distinct token of the prompt and output.
TEST(SampleTest, RepetitionPenaltyChangesTheGreedyPick) {
  Tensor logits = F32({2, 4}, {3.0f, 2.4f, 0, -5, -1.0f, -1.1f, -3, -4});
  // Row 0: 3 / 1.2 = 2.5 > 2.4 (once, not 3 / 1.44); row 1: -1 * 1.2 = -1.2 < -1.1.
  EXPECT_EQ(Sample(logits, 0, 1, 0, {.penalty = 1.2f, .seen = {I64({2, 3}, {0, 0, 0, 0, 0, 3})}}),
            (std::vector<int64_t>{0, 1}));
  // Token 0 of row 0 over two seen tensors: 3 / 1.3 = 2.31 < 2.4.
  EXPECT_EQ(Sample(logits, 0, 1, 0,
                   {.penalty = 1.3f, .seen = {I64({2, 1}, {0, 2}), I64({2, 2}, {0, 3, 2, 2})}}),
            (std::vector<int64_t>{1, 0}));
  // A penalty below 1 favours the seen tokens: 2.4 / 0.5 = 4.8 > 3; -1.1 * 0.5 = -0.55 > -1.
  EXPECT_EQ(Sample(logits, 0, 1, 0, {.penalty = 0.5f, .seen = {I64({2, 1}, {1, 1})}}),
            (std::vector<int64_t>{1, 1}));
  // Sampled at a low temperature the penalized pick dominates.
  int picked = 0;
  for (int step = 0; step < 500; ++step) {
    picked +=
        Sample(logits, 0.05f, 9, step, {.penalty = 2.0f, .seen = {I64({2, 1}, {0, 0})}})[0] == 1;
  }
  EXPECT_GT(picked, 495);
}

// A -1 among the seen tokens is a shorter prompt row's padding: skipped (token V - 1 is not
// penalized); any other negative id is an error naming it.
TEST(SampleTest, RepetitionPenaltySkipsPadding) {
  Tensor logits = F32({2, 4}, {3.0f, 2.4f, 0, 2.9f, -1.0f, -1.1f, -3, -0.9f});
  EXPECT_EQ(Sample(logits, 0, 1, 0, {.penalty = 1.2f, .seen = {I64({2, 2}, {0, -1, -1, -1})}}),
            (std::vector<int64_t>{3, 3}));
  absl::StatusOr<std::vector<Tensor>> r =
      RunFiltered(logits, 0, 1, 0, {.penalty = 1.2f, .seen = {I64({2, 1}, {-2, 0})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("token -2 of the tokens the repetition_penalty"),
            std::string::npos)
      << r.status();
}

TEST(SampleTest, BadSettingsAreErrorsNamingThem) {
  Tensor logits = F32({1, 3}, {1, 2, 3});
  auto error = [&](const Filters& f) {
    absl::StatusOr<std::vector<Tensor>> r = RunFiltered(logits, 1.0f, 1, 0, f);
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_NE(error({.top_k = -1}).find("top_k must be >= 0"), std::string::npos);
  for (float p : {0.0f, -0.5f, 1.5f, std::nanf("")}) {
    EXPECT_NE(error({.top_p = p}).find("top_p must be in (0, 1]"), std::string::npos) << p;
  }
  for (float r : {0.0f, -1.0f, std::nanf(""), INFINITY}) {
    EXPECT_NE(error({.penalty = r}).find("repetition_penalty must be a finite number > 0"),
              std::string::npos)
        << r;
  }
  EXPECT_NE(error({.penalty = 1.2f, .seen = {I64({1, 2}, {0, 3})}})
                .find("token 3 of the tokens the repetition_penalty applies to"),
            std::string::npos);
  EXPECT_NE(error({.penalty = 1.2f, .seen = {I64({2, 1}, {0, 1})}}).find("[batch, n]"),
            std::string::npos);
  EXPECT_EQ(error({.top_k = 5, .top_p = 1.0f, .penalty = 1.0f}), "ok");
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

// dynvm::ChannelPad against index arithmetic done here: x [N, C, spatial...] with `before` and
// `after` zero channels, every layout pair (channels-last bytes under the logical dims), ranks 3
// to 5, zeros in front or behind or both; x's NaN, infinities and -0 land unchanged; bad
// operands and attributes are errors.
TEST(ChannelPadKernelTest, EveryLayoutMatchesIndexArithmetic) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::vector<int64_t>& dims :
       {std::vector<int64_t>{2, 3, 5}, {2, 24, 7, 6}, {1, 5, 2, 3, 4}}) {
    const int64_t n = dims[0], c = dims[1];
    int64_t sp = 1;
    for (size_t d = 2; d < dims.size(); ++d) sp *= dims[d];
    std::vector<float> plain(static_cast<size_t>(n * c * sp));
    for (size_t i = 0; i < plain.size(); ++i) plain[i] = 0.25f * static_cast<float>(i) - 3.0f;
    plain[1] = std::nanf("");
    plain[2] = inf;
    plain[3] = -0.0f;
    for (auto [before, after] : {std::pair<int64_t, int64_t>{0, 4}, {3, 0}, {2, 5}}) {
      for (int layouts = 0; layouts < 4; ++layouts) {
        const bool in_cl = layouts & 1, out_cl = layouts & 2;
        SCOPED_TRACE(::testing::Message() << dims.size() << "D, before " << before << ", after "
                                          << after << ", layouts " << layouts);
        // x's bytes: plain, or channels-last (pixel-major) under the same logical dims.
        std::vector<float> bytes(plain.size());
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < c; ++j)
            for (int64_t s = 0; s < sp; ++s)
              bytes[in_cl ? (i * sp + s) * c + j : (i * c + j) * sp + s] =
                  plain[(i * c + j) * sp + s];
        absl::StatusOr<std::vector<Tensor>> r = KernelCall("ChannelPad", "dynvm")
                                                    .In(F32(dims, bytes))
                                                    .Out(DType::kF32)
                                                    .Attr("before", before)
                                                    .Attr("after", after)
                                                    .Attr("channels_last_in", int64_t{in_cl})
                                                    .Attr("channels_last_out", int64_t{out_cl})
                                                    .Run();
        ASSERT_TRUE(r.ok()) << r.status();
        const Tensor& y = (*r)[0];
        const int64_t co = before + c + after;
        ASSERT_EQ(y.dim(1), co);
        ASSERT_EQ(y.numel(), n * co * sp);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = 0; j < co; ++j) {
            for (int64_t s = 0; s < sp; ++s) {
              const float got =
                  y.data<float>()[out_cl ? (i * sp + s) * co + j : (i * co + j) * sp + s];
              const bool pad = j < before || j >= before + c;
              const float want = pad ? 0.0f : plain[(i * c + j - before) * sp + s];
              if (std::isnan(want)) {
                ASSERT_TRUE(std::isnan(got)) << i << " " << j << " " << s;
              } else {
                ASSERT_EQ(got, want) << i << " " << j << " " << s;
                ASSERT_EQ(std::signbit(got), std::signbit(want)) << i << " " << j << " " << s;
              }
            }
          }
        }
      }
    }
  }
  // x without channels: y is all zeros.
  absl::StatusOr<std::vector<Tensor>> empty = KernelCall("ChannelPad", "dynvm")
                                                  .In(F32({2, 0, 3}, {}))
                                                  .Out(DType::kF32)
                                                  .Attr("before", int64_t{1})
                                                  .Attr("after", int64_t{1})
                                                  .Attr("channels_last_out", int64_t{1})
                                                  .Run();
  ASSERT_TRUE(empty.ok()) << empty.status();
  ASSERT_EQ((*empty)[0].numel(), 12);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ((*empty)[0].data<float>()[i], 0.0f) << i;
  // Rank 2, a negative count, an i64 x.
  EXPECT_EQ(KernelCall("ChannelPad", "dynvm")
                .In(F32({2, 3}, {1, 2, 3, 4, 5, 6}))
                .Out(DType::kF32)
                .Attr("after", int64_t{1})
                .Run()
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(KernelCall("ChannelPad", "dynvm")
                   .In(F32({1, 2, 1}, {1, 2}))
                   .Out(DType::kF32)
                   .Attr("after", int64_t{-1})
                   .Run()
                   .ok());
  EXPECT_EQ(KernelCall("ChannelPad", "dynvm")
                .In(I64({1, 2, 1}, {1, 2}))
                .Out(DType::kF32)
                .Attr("after", int64_t{1})
                .Run()
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dynvm
