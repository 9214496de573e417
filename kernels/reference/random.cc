// Reference kernels for Bernoulli, RandomUniform, RandomNormal, RandomUniformLike and
// RandomNormalLike, drawn from the Philox4x32-10 generator of kernels/reference/philox.h (the
// one dynvm.Sample uses): element i of a run takes u_i = PhiloxUniform(key, step, i), a
// double in [0, 1) with 53 random bits.
//
// With a `seed` attribute, key is the seed's float bit pattern and step is 0: the output is a
// pure function of the seed and the element index, the same on every run, thread count and
// machine. Without one, key is drawn once per process from std::random_device and step is a
// process-wide counter advanced by every run, so outputs vary from run to run and process to
// process.
//
// Uniform: low + (high - low) * u, kept below high after rounding to the output type.
// Normal: mean + scale * z with z = sqrt(-2 ln(1 - u_2i)) cos(2 pi u_2i+1) (Box-Muller).
// Bernoulli: 1 where u < p, else 0; p must lie in [0, 1] (NaN and values outside are an
// InvalidArgument). Training-mode Dropout (elementwise.cc) draws its mask here too.
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/reference/common.h"
#include "kernels/reference/philox.h"
#include "kernels/reference/reference.h"
#include "kernels/reference/signal_common.h"

namespace dynvm::reference {
namespace {

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;

enum class Dist : uint8_t { kUniform, kNormal, kBernoulli };

struct RandomAttrs {
  Dist dist = Dist::kUniform;
  bool like = false;  // the shape comes from input 0
  bool seeded = false;
  uint64_t seed = 0;
  float a = 0, b = 1;  // low/high or mean/scale
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
};

uint64_t ProcessKey() {
  static const uint64_t key = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return key;
}

std::atomic<uint64_t>& RunCounter() {
  static std::atomic<uint64_t> counter{1};
  return counter;
}

// The largest value of T below `high` (`low` when none lies in [low, high)).
template <typename T>
T Below(float low, float high) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return std::max(static_cast<T>(low), std::nextafter(static_cast<T>(high), static_cast<T>(low)));
  } else {
    float h = high;
    for (int k = 0; k < 4096; ++k) {  // f16, bf16 (and integers): step down until T rounds below
      const T t = T(h);
      if (static_cast<float>(t) < high) return static_cast<float>(t) < low ? T(low) : t;
      h -= std::max(std::abs(h) * 0x1p-12f, std::numeric_limits<float>::denorm_min());
    }
    return T(low);
  }
}

absl::Status RunRandom(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const RandomAttrs*>(attrs);
  const char* op = a.dist == Dist::kBernoulli ? "Bernoulli" : "Random";
  DYNVM_RETURN_IF_ERROR(NeedIo(in, a.like ? 1 : 0, out, op));
  Dims dims;
  if (a.like) {
    dims.assign(in[0]->dims().begin(), in[0]->dims().end());
  } else {
    dims.assign(a.shape.begin(), a.shape.end());
  }
  const DType dtype = a.dtype == static_cast<DType>(kAnyDType) && a.like ? in[0]->dtype() : a.dtype;
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], dtype, dims, op));
  const uint64_t key = a.seeded ? a.seed : ProcessKey();
  const uint64_t step = a.seeded ? 0 : RunCounter().fetch_add(1, std::memory_order_relaxed);
  const int64_t n = out[0]->numel();
  std::vector<double> y(static_cast<size_t>(n));
  if (a.dist == Dist::kBernoulli) {
    const std::vector<double> p = ReadDoubles(*in[0]);
    for (int64_t i = 0; i < n; ++i) {
      if (!(p[i] >= 0.0 && p[i] <= 1.0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("Bernoulli: probability ", p[i], " at element ", i, " is outside [0, 1]"));
      }
      y[i] = PhiloxUniform(key, step, static_cast<uint64_t>(i)) < p[i] ? 1.0 : 0.0;
    }
  } else if (a.dist == Dist::kUniform) {
    for (int64_t i = 0; i < n; ++i) {
      y[i] = a.a +
             (static_cast<double>(a.b) - a.a) * PhiloxUniform(key, step, static_cast<uint64_t>(i));
    }
  } else {
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    for (int64_t i = 0; i < n; ++i) {
      const double u1 = PhiloxUniform(key, step, 2 * static_cast<uint64_t>(i));
      const double u2 = PhiloxUniform(key, step, 2 * static_cast<uint64_t>(i) + 1);
      y[i] = a.a + a.b * std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(kTwoPi * u2);
    }
  }
  WriteDoubles(*out[0], y);
  if (a.dist == Dist::kUniform && a.b > a.a) {  // rounding must not reach `high`
    (void)DispatchNumeric(dtype, op, [&](auto* tag) -> absl::Status {
      using T = std::remove_pointer_t<decltype(tag)>;
      const T below = Below<T>(a.a, a.b);
      T* p = out[0]->data<T>();
      for (int64_t i = 0; i < n; ++i) {
        if (static_cast<double>(static_cast<float>(p[i])) >= a.b) p[i] = below;
      }
      return absl::OkStatus();
    });
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeRandom(const KernelSpec& spec, const char* op,
                                                   Dist dist, bool like) {
  if (spec.inputs.size() != (like ? 1u : 0u) || spec.outputs.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": expected ", like ? 1 : 0, " inputs and 1 output"));
  }
  RandomAttrs r;
  r.dist = dist;
  r.like = like;
  if (const AttrValue* s = spec.Find("seed"); s != nullptr) {
    DYNVM_ASSIGN_OR_RETURN(float seed, spec.GetFloat("seed", 0));
    r.seeded = true;
    r.seed = std::bit_cast<uint32_t>(seed);
  }
  if (dist == Dist::kUniform) {
    DYNVM_ASSIGN_OR_RETURN(r.a, spec.GetFloat("low", 0));
    DYNVM_ASSIGN_OR_RETURN(r.b, spec.GetFloat("high", 1));
    if (!(r.a <= r.b) || !std::isfinite(r.a) || !std::isfinite(r.b)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": low ", r.a, " and high ", r.b, " must be finite, low <= high"));
    }
  } else if (dist == Dist::kNormal) {
    DYNVM_ASSIGN_OR_RETURN(r.a, spec.GetFloat("mean", 0));
    DYNVM_ASSIGN_OR_RETURN(r.b, spec.GetFloat("scale", 1));
    if (!std::isfinite(r.a) || !std::isfinite(r.b)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": mean and scale must be finite"));
    }
  }
  if (!like) {
    DYNVM_ASSIGN_OR_RETURN(r.shape, spec.GetInts("shape"));
    for (int64_t d : r.shape) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat(op, ": negative size in shape"));
    }
  }
  r.dtype = spec.outputs[0].dtype != kAnyDType
                ? static_cast<DType>(spec.outputs[0].dtype)
                : (like ? static_cast<DType>(kAnyDType) : DType::kF32);
  if (r.dtype != static_cast<DType>(kAnyDType) &&
      (r.dtype == DType::kString || (dist != Dist::kBernoulli && !IsFloat(r.dtype)))) {
    return absl::UnimplementedError(
        absl::StrCat(op, ": output type ", DTypeName(r.dtype), " not supported"));
  }
  return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), &RunRandom,
                                          std::make_shared<const RandomAttrs>(std::move(r)));
}

void Add(KernelRegistry& r, const char* op, Dist dist, bool like) {
  r.Register(KernelRegistration{
      "", op, Device::kCPU, "reference", kReferencePriority,
      [op, dist, like](const KernelSpec& spec) { return MakeRandom(spec, op, dist, like); }});
}

}  // namespace

absl::Status TrainingDropout(KernelContext& ctx, const Tensor& x, double ratio,
                             std::optional<int64_t> seed, Tensor* y, Tensor* mask,
                             DType mask_dtype) {
  if (!IsFloat(x.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Dropout: training mode needs floating-point data, got ", x.DebugString()));
  }
  if (!(ratio > 0 && ratio < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Dropout: ratio must be in [0, 1), got ", ratio));
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, y, x.dtype(), x.dims(), "Dropout"));
  if (mask != nullptr) {
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, mask, mask_dtype, x.dims(), "Dropout"));
  }
  const uint64_t key = seed ? static_cast<uint64_t>(*seed) : ProcessKey();
  const uint64_t step = seed ? 0 : RunCounter().fetch_add(1, std::memory_order_relaxed);
  std::vector<double> v = ReadDoubles(x);
  std::vector<double> m(v.size());
  const double scale = 1.0 / (1.0 - ratio);
  for (size_t i = 0; i < v.size(); ++i) {
    m[i] = PhiloxUniform(key, step, static_cast<uint64_t>(i)) >= ratio ? 1.0 : 0.0;
    v[i] = m[i] != 0 ? v[i] * scale : 0.0;
  }
  WriteDoubles(*y, v);
  if (mask != nullptr) WriteDoubles(*mask, m);
  return absl::OkStatus();
}

void RegisterRandomKernels(KernelRegistry& r) {
  Add(r, "RandomUniform", Dist::kUniform, false);
  Add(r, "RandomNormal", Dist::kNormal, false);
  Add(r, "RandomUniformLike", Dist::kUniform, true);
  Add(r, "RandomNormalLike", Dist::kNormal, true);
  Add(r, "Bernoulli", Dist::kBernoulli, true);
}

}  // namespace dynvm::reference
