// Reference kernels for DFT (opset 17), STFT and MelWeightMatrix. The transforms run in double
// through kissfft's C++ template (kissfft.hh, Debian's libkissfft-dev, BSD-3-Clause; the
// packaged library is float-only, the header-only template takes double); real input of even
// length takes the half-length complex transform (transform_real).
//
// DFT: input [batch, ..., n, ..., 1 or 2] (real or complex in the last dim), transformed along
// `axis` (default 1; not the last dim); the optional dft_length input zero-pads or truncates the
// signal to that length; inverse divides by the length; onesided keeps bins 0..n/2 (forward
// only). Output [..., bins, ..., 2].
// STFT: signal [batch, length, 1 or 2], frame_step, optional window [frame_length], optional
// frame_length; frames (length - frame_length) / frame_step + 1, each multiplied by the window
// and transformed; onesided (default 1, real signals) keeps frame_length / 2 + 1 bins. Output
// [batch, frames, bins, 2].
// MelWeightMatrix: [dft_length / 2 + 1, num_mel_bins] triangular filters between mel-spaced
// points (mel = 2595 log10(1 + hz / 700)), as ONNX's reference defines them: num_mel_bins + 2
// points spaced (high_mel - low_mel) / (num_mel_bins + 2) apart from low_mel, converted to
// bins floor((dft_length + 1) * hz / sample_rate).
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"
#include "kernels/reference/signal_common.h"
#include "kissfft.hh"

namespace dynvm::reference {
namespace {

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;
using Cpx = std::complex<double>;

// Transform lengths above this are refused: the plan and scratch live on the heap (about 48
// bytes per point), outside the pool's memory limit.
constexpr int64_t kMaxLength = int64_t{1} << 24;

// A 1-D transform of length n, planned once and applied to many signals.
class Transform {
 public:
  Transform(int64_t n, bool inverse) : n_(n), inverse_(inverse) {
    if (n_ > 1) full_ = std::make_unique<kissfft<double>>(static_cast<size_t>(n_), inverse_);
    if (n_ >= 2 && n_ % 2 == 0 && !inverse_) {
      half_ = std::make_unique<kissfft<double>>(static_cast<size_t>(n_ / 2), false);
    }
  }

  // The first `bins` outputs of the transform of n complex values.
  void Complex(const Cpx* in, Cpx* out, int64_t bins, std::vector<Cpx>& scratch) const {
    if (n_ == 0) return;
    if (n_ == 1) {
      out[0] = in[0];
      return;
    }
    scratch.resize(n_);
    full_->transform(in, scratch.data());
    std::copy(scratch.begin(), scratch.begin() + bins, out);
  }

  // The first `bins` outputs of the transform of n real values.
  void Real(const double* in, Cpx* out, int64_t bins, std::vector<Cpx>& scratch) const {
    if (half_ == nullptr) {
      std::vector<Cpx> c(in, in + n_);
      Complex(c.data(), out, bins, scratch);
      return;
    }
    const int64_t h = n_ / 2;
    scratch.resize(h);
    half_->transform_real(in, scratch.data());
    // scratch[0] packs bin 0 (real part) and bin n/2 (imaginary part).
    for (int64_t k = 0; k < bins; ++k) {
      if (k == 0) {
        out[k] = Cpx(scratch[0].real(), 0);
      } else if (k < h) {
        out[k] = scratch[k];
      } else if (k == h) {
        out[k] = Cpx(scratch[0].imag(), 0);
      } else {
        out[k] = std::conj(scratch[n_ - k]);  // conjugate symmetry of a real signal
      }
    }
  }

 private:
  int64_t n_;
  bool inverse_;
  std::unique_ptr<kissfft<double>> full_, half_;
};

absl::StatusOr<int64_t> ScalarInt(const Tensor& t, absl::string_view op, absl::string_view what) {
  DYNVM_ASSIGN_OR_RETURN(Dims v, ReadInts(t, op, what));
  if (v.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " must be one integer"));
  }
  return v[0];
}

// ---- DFT ----

struct DftAttrs {
  int64_t axis = 1;
  bool inverse = false, onesided = false;
};

absl::Status RunDft(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const DftAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(NeedIo(in, 1, out, "DFT"));
  const Tensor& x = *in[0];
  const int rank = x.rank();
  if (rank < 2 || (x.dim(rank - 1) != 1 && x.dim(rank - 1) != 2) || !IsFloat(x.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("DFT: input must be floating point [..., 1 or 2] (real or complex), got ",
                     x.DebugString()));
  }
  if (a.axis < -rank || a.axis >= rank - 1 || a.axis == -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DFT: axis ", a.axis, " out of range for ", x.DebugString(),
                     " (the last dim holds real and imaginary parts)"));
  }
  const int ax = static_cast<int>(a.axis < 0 ? a.axis + rank : a.axis);
  const bool complex_in = x.dim(rank - 1) == 2;
  const int64_t len = x.dim(ax);
  int64_t n = len;
  if (in.size() > 1 && in[1] != nullptr) {
    DYNVM_ASSIGN_OR_RETURN(n, ScalarInt(*in[1], "DFT", "dft_length"));
    if (n < 1 || n > kMaxLength) {
      return absl::InvalidArgumentError(absl::StrCat("DFT: dft_length ", n, " out of range"));
    }
  }
  if (a.onesided && a.inverse) {
    return absl::UnimplementedError("DFT: onesided inverse transforms are not supported");
  }
  const int64_t bins = a.onesided ? n / 2 + 1 : n;
  Dims dims(x.dims().begin(), x.dims().end());
  dims[ax] = bins;
  dims[rank - 1] = 2;
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), dims, "DFT"));
  // outer x axis x inner x (1 or 2), row-major.
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < ax; ++d) outer *= x.dim(d);
  for (int d = ax + 1; d < rank - 1; ++d) inner *= x.dim(d);
  const int64_t comps = x.dim(rank - 1);
  const std::vector<double> v = ReadDoubles(x);
  std::vector<double> y(static_cast<size_t>(outer * bins * inner * 2));
  const Transform t(n, a.inverse);
  std::vector<Cpx> scratch, signal(n), res(bins);
  std::vector<double> real(n);
  const double scale = a.inverse && n > 0 ? 1.0 / static_cast<double>(n) : 1.0;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t k = 0; k < n; ++k) {
        const int64_t at = ((o * len + k) * inner + i) * comps;
        const bool inside = k < len;
        real[k] = inside ? v[at] : 0.0;
        signal[k] = Cpx(real[k], inside && complex_in ? v[at + 1] : 0.0);
      }
      if (complex_in || a.inverse) {
        t.Complex(signal.data(), res.data(), bins, scratch);
      } else {
        t.Real(real.data(), res.data(), bins, scratch);
      }
      for (int64_t k = 0; k < bins; ++k) {
        const int64_t at = ((o * bins + k) * inner + i) * 2;
        y[at] = res[k].real() * scale;
        y[at + 1] = res[k].imag() * scale;
      }
    }
  }
  WriteDoubles(*out[0], y);
  return absl::OkStatus();
}

// ---- STFT ----

absl::Status RunStft(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const bool onesided = *static_cast<const bool*>(attrs);
  DYNVM_RETURN_IF_ERROR(NeedIo(in, 2, out, "STFT"));
  const Tensor& s = *in[0];
  if (s.rank() != 3 || (s.dim(2) != 1 && s.dim(2) != 2) || !IsFloat(s.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "STFT: signal must be floating point [batch, length, 1 or 2], got ", s.DebugString()));
  }
  const bool complex_in = s.dim(2) == 2;
  DYNVM_ASSIGN_OR_RETURN(int64_t step, ScalarInt(*in[1], "STFT", "frame_step"));
  const Tensor* window = in.size() > 2 ? in[2] : nullptr;
  std::optional<int64_t> frame_length;
  if (in.size() > 3 && in[3] != nullptr) {
    DYNVM_ASSIGN_OR_RETURN(frame_length, ScalarInt(*in[3], "STFT", "frame_length"));
  }
  if (window != nullptr && (window->rank() != 1 || !IsFloat(window->dtype()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("STFT: window must be 1-D floating point, got ", window->DebugString()));
  }
  if (window != nullptr && frame_length && *frame_length != window->dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat("STFT: frame_length ", *frame_length,
                                                   " differs from the window's length ",
                                                   window->dim(0)));
  }
  if (!frame_length && window == nullptr) {
    return absl::InvalidArgumentError("STFT: needs a window or a frame_length");
  }
  const int64_t flen = frame_length ? *frame_length : window->dim(0);
  const int64_t batch = s.dim(0), len = s.dim(1);
  if (step < 1 || flen < 1 || flen > len || flen > kMaxLength) {
    return absl::InvalidArgumentError(absl::StrCat("STFT: frame_step ", step,
                                                   " must be >= 1 and frame_length ", flen,
                                                   " in [1, the signal length ", len, "]"));
  }
  if (onesided && complex_in) {
    return absl::InvalidArgumentError("STFT: onesided needs a real signal; set onesided=0");
  }
  const int64_t frames = (len - flen) / step + 1;
  const int64_t bins = onesided ? flen / 2 + 1 : flen;
  const std::vector<int64_t> dims = {batch, frames, bins, 2};
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], s.dtype(), dims, "STFT"));
  const std::vector<double> v = ReadDoubles(s);
  const std::vector<double> w =
      window != nullptr ? ReadDoubles(*window) : std::vector<double>(flen, 1.0);
  std::vector<double> y(static_cast<size_t>(batch * frames * bins * 2));
  const Transform t(flen, false);
  std::vector<Cpx> scratch, signal(flen), res(bins);
  std::vector<double> real(flen);
  const int64_t comps = s.dim(2);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t f = 0; f < frames; ++f) {
      for (int64_t k = 0; k < flen; ++k) {
        const int64_t at = (b * len + f * step + k) * comps;
        real[k] = v[at] * w[k];
        signal[k] = Cpx(real[k], complex_in ? v[at + 1] * w[k] : 0.0);
      }
      if (complex_in) {
        t.Complex(signal.data(), res.data(), bins, scratch);
      } else {
        t.Real(real.data(), res.data(), bins, scratch);
      }
      double* o = &y[((b * frames + f) * bins) * 2];
      for (int64_t k = 0; k < bins; ++k) {
        o[2 * k] = res[k].real();
        o[2 * k + 1] = res[k].imag();
      }
    }
  }
  WriteDoubles(*out[0], y);
  return absl::OkStatus();
}

// ---- MelWeightMatrix ----

absl::StatusOr<double> ScalarFloat(const Tensor& t, absl::string_view what) {
  if (t.numel() != 1 || !IsFloat(t.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("MelWeightMatrix: ", what, " must be one floating-point value"));
  }
  return ReadDoubles(t)[0];
}

absl::Status RunMel(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const DType dtype = *static_cast<const DType*>(attrs);
  DYNVM_RETURN_IF_ERROR(NeedIo(in, 5, out, "MelWeightMatrix"));
  DYNVM_ASSIGN_OR_RETURN(int64_t mels, ScalarInt(*in[0], "MelWeightMatrix", "num_mel_bins"));
  DYNVM_ASSIGN_OR_RETURN(int64_t dft, ScalarInt(*in[1], "MelWeightMatrix", "dft_length"));
  DYNVM_ASSIGN_OR_RETURN(int64_t rate, ScalarInt(*in[2], "MelWeightMatrix", "sample_rate"));
  DYNVM_ASSIGN_OR_RETURN(double lo, ScalarFloat(*in[3], "lower_edge_hertz"));
  DYNVM_ASSIGN_OR_RETURN(double hi, ScalarFloat(*in[4], "upper_edge_hertz"));
  if (mels < 1 || dft < 1 || rate < 1 || mels > kMaxLength || dft > kMaxLength || !(lo >= 0) ||
      !(hi > lo) || !std::isfinite(hi)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MelWeightMatrix: needs num_mel_bins, dft_length, sample_rate >= 1 and 0 <= "
                     "lower_edge_hertz < upper_edge_hertz, got ",
                     mels, ", ", dft, ", ", rate, ", ", lo, ", ", hi));
  }
  const int64_t spec_bins = dft / 2 + 1;
  const std::vector<int64_t> dims = {spec_bins, mels};
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], dtype, dims, "MelWeightMatrix"));
  auto to_mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
  const double lo_mel = to_mel(lo), hi_mel = to_mel(hi);
  const double step = (hi_mel - lo_mel) / static_cast<double>(mels + 2);
  std::vector<int64_t> points(mels + 2);
  for (int64_t i = 0; i < mels + 2; ++i) {
    const double hz = 700.0 * (std::pow(10.0, (i * step + lo_mel) / 2595.0) - 1.0);
    points[i] = static_cast<int64_t>(std::floor(static_cast<double>(dft + 1) * hz / rate));
    if (points[i] < 0 || points[i] >= spec_bins) {
      return absl::InvalidArgumentError(
          absl::StrCat("MelWeightMatrix: upper_edge_hertz ", hi, " maps past the ", spec_bins,
                       " spectrogram bins of dft_length ", dft, " at sample_rate ", rate));
    }
  }
  std::vector<double> y(static_cast<size_t>(spec_bins * mels), 0.0);
  for (int64_t m = 0; m < mels; ++m) {
    const int64_t left = points[m], centre = points[m + 1], right = points[m + 2];
    if (centre == left) {
      y[centre * mels + m] = 1;
    } else {
      for (int64_t j = left; j <= centre; ++j) {
        y[j * mels + m] = static_cast<double>(j - left) / static_cast<double>(centre - left);
      }
    }
    for (int64_t j = centre; j < right; ++j) {
      y[j * mels + m] = static_cast<double>(right - j) / static_cast<double>(right - centre);
    }
  }
  WriteDoubles(*out[0], y);
  return absl::OkStatus();
}

void Add(KernelRegistry& r, const char* op, KernelFactory f) {
  r.Register(
      KernelRegistration{"", op, Device::kCPU, "reference", kReferencePriority, std::move(f)});
}

template <typename A>
absl::StatusOr<std::unique_ptr<Kernel>> Make(const KernelSpec& spec, FunctionKernel::RunFn run,
                                             A attrs) {
  return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), run,
                                          std::make_shared<const A>(std::move(attrs)));
}

}  // namespace

void RegisterSignalKernels(KernelRegistry& r) {
  Add(r, "DFT", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.empty() || spec.inputs.size() > 2 || spec.outputs.size() != 1) {
      return absl::InvalidArgumentError("DFT: expected 1..2 inputs and 1 output");
    }
    DftAttrs a;
    DYNVM_ASSIGN_OR_RETURN(a.axis, spec.GetInt("axis", 1));
    DYNVM_ASSIGN_OR_RETURN(int64_t inverse, spec.GetInt("inverse", 0));
    DYNVM_ASSIGN_OR_RETURN(int64_t onesided, spec.GetInt("onesided", 0));
    a.inverse = inverse != 0;
    a.onesided = onesided != 0;
    return Make(spec, &RunDft, a);
  });
  Add(r, "STFT", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() < 2 || spec.inputs.size() > 4 || spec.outputs.size() != 1) {
      return absl::InvalidArgumentError("STFT: expected 2..4 inputs and 1 output");
    }
    DYNVM_ASSIGN_OR_RETURN(int64_t onesided, spec.GetInt("onesided", 1));
    return Make(spec, &RunStft, onesided != 0);
  });
  Add(r, "MelWeightMatrix", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() != 5 || spec.outputs.size() != 1) {
      return absl::InvalidArgumentError("MelWeightMatrix: expected 5 inputs and 1 output");
    }
    const DType d = spec.outputs[0].dtype_or(DType::kF32);
    if (d == DType::kString || d == DType::kBool) {
      return absl::UnimplementedError(
          absl::StrCat("MelWeightMatrix: output type ", DTypeName(d), " not supported"));
    }
    return Make(spec, &RunMel, d);
  });
}

}  // namespace dynvm::reference
