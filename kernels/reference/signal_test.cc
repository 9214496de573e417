// Tests of the reference DFT, STFT and MelWeightMatrix kernels against hand-computed spectra
// and a direct O(n^2) DFT (the oracle), beyond ONNX's node cases: odd and prime lengths,
// padding and truncation, other axes, empty batches, NaN and bad input.
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <random>
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

Tensor RunOne(KernelCall& call) {
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? (*r)[0] : Tensor();
}

std::vector<int64_t> Dims(const Tensor& t) { return {t.dims().begin(), t.dims().end()}; }

// The direct DFT of x (interleaved re, im) as interleaved re, im.
std::vector<double> NaiveDft(const std::vector<double>& x, bool inverse) {
  const size_t n = x.size() / 2;
  std::vector<double> y(2 * n);
  for (size_t k = 0; k < n; ++k) {
    std::complex<double> acc = 0;
    for (size_t t = 0; t < n; ++t) {
      const double ang = (inverse ? 2 : -2) * M_PI * static_cast<double>(k * t % n) / n;
      acc += std::complex<double>(x[2 * t], x[2 * t + 1]) * std::polar(1.0, ang);
    }
    if (inverse) acc /= static_cast<double>(n);
    y[2 * k] = acc.real();
    y[2 * k + 1] = acc.imag();
  }
  return y;
}

std::vector<float> RandomValues(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

TEST(SignalKernelTest, DftOfAKnownRealSignalFullAndOnesided) {
  KernelCall full("DFT");
  full.In(F32({1, 4, 1}, {1, 2, 3, 4})).Out(DType::kF32);
  const Tensor y = RunOne(full);
  EXPECT_EQ(Dims(y), (std::vector<int64_t>{1, 4, 2}));
  EXPECT_THAT(ToDoubles(y),
              Pointwise(DoubleNear(1e-5), std::vector<double>{10, 0, -2, 2, -2, 0, -2, -2}));
  KernelCall half("DFT");
  half.In(F32({1, 4, 1}, {1, 2, 3, 4})).Attr("onesided", int64_t{1}).Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunOne(half)),
              Pointwise(DoubleNear(1e-5), std::vector<double>{10, 0, -2, 2, -2, 0}));
}

TEST(SignalKernelTest, DftMatchesTheDirectTransformAtOddAndPrimeLengths) {
  for (int64_t n : {1, 2, 5, 7, 12, 13, 64}) {
    for (bool inverse : {false, true}) {
      const std::vector<float> x = RandomValues(2 * n, static_cast<uint32_t>(n));
      KernelCall dft("DFT");
      dft.In(F32({1, n, 2}, x)).Attr("inverse", int64_t{inverse}).Out(DType::kF32);
      const std::vector<double> want = NaiveDft({x.begin(), x.end()}, inverse);
      EXPECT_THAT(ToDoubles(RunOne(dft)), Pointwise(DoubleNear(1e-4), want))
          << "n " << n << " inverse " << inverse;
    }
  }
}

TEST(SignalKernelTest, DftLengthPadsOrTruncatesAndOtherAxesWork) {
  // dft_length 4 pads {1, 2} with zeros: the spectrum of {1, 2, 0, 0}.
  KernelCall pad("DFT");
  pad.In(F32({1, 2, 1}, {1, 2})).In(I64({}, {4})).Out(DType::kF32);
  const std::vector<double> padded = NaiveDft({1, 0, 2, 0, 0, 0, 0, 0}, false);
  EXPECT_THAT(ToDoubles(RunOne(pad)), Pointwise(DoubleNear(1e-5), padded));
  KernelCall cut("DFT");  // dft_length 2 keeps {1, 2}
  cut.In(F32({1, 4, 1}, {1, 2, 3, 4})).In(I64({}, {2})).Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunOne(cut)),
              Pointwise(DoubleNear(1e-5), std::vector<double>{3, 0, -1, 0}));
  // axis 2 of [1, 2, 3, 1]: each row of 3 transformed on its own.
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  KernelCall axis("DFT");
  axis.In(F32({1, 2, 3, 1}, x)).Attr("axis", int64_t{2}).Out(DType::kF32);
  std::vector<double> want = NaiveDft({1, 0, 2, 0, 3, 0}, false);
  const std::vector<double> row2 = NaiveDft({4, 0, 5, 0, 6, 0}, false);
  want.insert(want.end(), row2.begin(), row2.end());
  EXPECT_THAT(ToDoubles(RunOne(axis)), Pointwise(DoubleNear(1e-5), want));
}

TEST(SignalKernelTest, DftEmptyNanAndBadInput) {
  KernelCall empty("DFT");
  empty.In(F32({0, 8, 1}, {})).Out(DType::kF32);
  EXPECT_EQ(Dims(RunOne(empty)), (std::vector<int64_t>{0, 8, 2}));
  KernelCall nan("DFT");
  nan.In(F32({1, 4, 1}, {std::numeric_limits<float>::quiet_NaN(), 0, 0, 0})).Out(DType::kF32);
  const std::vector<double> spectrum = ToDoubles(RunOne(nan));
  ASSERT_EQ(spectrum.size(), 8u);
  for (int k = 0; k < 4; ++k) EXPECT_TRUE(std::isnan(spectrum[2 * k])) << k;  // every real part
  KernelCall last("DFT");
  last.In(F32({1, 4, 1}, {1, 2, 3, 4})).Attr("axis", int64_t{-1}).Out(DType::kF32);
  absl::StatusOr<std::vector<Tensor>> r = last.Run();
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("axis -1"));
  KernelCall three("DFT");
  three.In(F32({1, 2, 3}, {1, 2, 3, 4, 5, 6})).Out(DType::kF32);
  EXPECT_FALSE(three.Run().ok());
  KernelCall zero("DFT");
  zero.In(F32({1, 4, 1}, {1, 2, 3, 4})).In(I64({}, {0})).Out(DType::kF32);
  EXPECT_FALSE(zero.Run().ok());
}

TEST(SignalKernelTest, StftFramesWindowsAndTransforms) {
  const int64_t len = 37, flen = 8, step = 5;
  const std::vector<float> x = RandomValues(len, 3);
  const std::vector<float> w = RandomValues(flen, 4);
  KernelCall stft("STFT");
  stft.In(F32({1, len, 1}, x)).In(I64({}, {step})).In(F32({flen}, w)).Out(DType::kF32);
  const Tensor y = RunOne(stft);
  const int64_t frames = (len - flen) / step + 1;  // 6
  EXPECT_EQ(Dims(y), (std::vector<int64_t>{1, frames, flen / 2 + 1, 2}));
  std::vector<double> want;
  for (int64_t f = 0; f < frames; ++f) {
    std::vector<double> frame(2 * flen, 0);
    for (int64_t k = 0; k < flen; ++k) frame[2 * k] = double{x[f * step + k]} * w[k];
    const std::vector<double> s = NaiveDft(frame, false);
    want.insert(want.end(), s.begin(), s.begin() + 2 * (flen / 2 + 1));
  }
  EXPECT_THAT(ToDoubles(y), Pointwise(DoubleNear(1e-4), want));
  // Two-sided with a frame_length and no window (a rectangular one), odd length.
  KernelCall two("STFT");
  two.In(F32({1, len, 1}, x)).In(I64({}, {step})).Absent().In(I64({}, {7}));
  two.Attr("onesided", int64_t{0}).Out(DType::kF32);
  const Tensor t = RunOne(two);
  EXPECT_EQ(Dims(t), (std::vector<int64_t>{1, (len - 7) / step + 1, 7, 2}));
  std::vector<double> first(14, 0);
  for (int k = 0; k < 7; ++k) first[2 * k] = x[k];
  const std::vector<double> got = ToDoubles(t);
  EXPECT_THAT(std::vector<double>(got.begin(), got.begin() + 14),
              Pointwise(DoubleNear(1e-4), NaiveDft(first, false)));
}

TEST(SignalKernelTest, StftBadInput) {
  KernelCall too_long("STFT");
  too_long.In(F32({1, 4, 1}, {1, 2, 3, 4})).In(I64({}, {1})).In(F32({8}, std::vector<float>(8, 1)));
  too_long.Out(DType::kF32);
  EXPECT_FALSE(too_long.Run().ok());
  KernelCall step("STFT");
  step.In(F32({1, 4, 1}, {1, 2, 3, 4})).In(I64({}, {0})).In(F32({2}, {1, 1})).Out(DType::kF32);
  absl::StatusOr<std::vector<Tensor>> r = step.Run();
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("frame_step 0"));
  KernelCall mismatch("STFT");
  mismatch.In(F32({1, 4, 1}, {1, 2, 3, 4})).In(I64({}, {1})).In(F32({2}, {1, 1}));
  mismatch.In(I64({}, {3})).Out(DType::kF32);
  EXPECT_FALSE(mismatch.Run().ok());
}

TEST(SignalKernelTest, MelWeightMatrixShapeTrianglesAndBadInput) {
  KernelCall mel("MelWeightMatrix");
  mel.In(I64({}, {4})).In(I64({}, {64})).In(I64({}, {16000}));
  mel.In(F32({}, {0})).In(F32({}, {8000})).Out(DType::kF32);
  const Tensor y = RunOne(mel);
  EXPECT_EQ(Dims(y), (std::vector<int64_t>{33, 4}));
  const std::vector<double> v = ToDoubles(y);
  for (int64_t m = 0; m < 4; ++m) {  // each filter peaks at exactly 1 and lies in [0, 1]
    double peak = 0;
    for (int64_t b = 0; b < 33; ++b) {
      ASSERT_GE(v[b * 4 + m], 0);
      ASSERT_LE(v[b * 4 + m], 1);
      peak = std::max(peak, v[b * 4 + m]);
    }
    EXPECT_EQ(peak, 1);
  }
  KernelCall beyond("MelWeightMatrix");  // above Nyquist: past the spectrogram
  beyond.In(I64({}, {4})).In(I64({}, {64})).In(I64({}, {16000}));
  beyond.In(F32({}, {0})).In(F32({}, {40000})).Out(DType::kF32);
  absl::StatusOr<std::vector<Tensor>> r = beyond.Run();
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("spectrogram bins"));
  KernelCall none("MelWeightMatrix");
  none.In(I64({}, {0})).In(I64({}, {64})).In(I64({}, {16000}));
  none.In(F32({}, {0})).In(F32({}, {8000})).Out(DType::kF32);
  EXPECT_FALSE(none.Run().ok());
}

}  // namespace
}  // namespace dynvm
