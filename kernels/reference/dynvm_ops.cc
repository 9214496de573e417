// Kernels of dynvm's own ops (domain "dynvm"), registered exactly like a user's custom ops.
//
//   Sample(logits [B, V] f32/f64, temperature [] f32, seed [] i64, step [] i64) -> [B] i64
//     temperature <= 0: argmax (NaN counts as the largest value; ties pick the lowest index).
//     Otherwise p = softmax(logits / temperature) and the token is the smallest k with
//     sum(p[0..k]) > u, u = PhiloxUniform(seed, step, row) (kernels/reference/philox.h).
//   Gelu(x) = x/2 (1 + erf(x/sqrt 2)); GeluTanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
//   Silu(x) = x sigmoid(x). f32 or f64, any layout; the fused activations of
//   compiler/rewrite/activations.cc.
//   RMSNorm(x, scale) = x / sqrt(mean(x^2 over [axis, rank)) + epsilon) * scale, f32
//   (compiler/rewrite/rms_norm.cc).
#include <cmath>
#include <limits>
#include <vector>

#include "common/status_macros.h"
#include "kernels/reference/common.h"
#include "kernels/reference/philox.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

absl::StatusOr<double> ReadScalarDouble(const Tensor& t, absl::string_view what) {
  if (t.numel() != 1)
    return absl::InvalidArgumentError(
        absl::StrCat("Sample: ", what, " must have one element, got ", t.DebugString()));
  switch (t.dtype()) {
    case DType::kF32:
      return *t.data<float>();
    case DType::kF64:
      return *t.data<double>();
    case DType::kI64:
      return static_cast<double>(*t.data<int64_t>());
    case DType::kI32:
      return static_cast<double>(*t.data<int32_t>());
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("Sample: ", what, " has dtype ", DTypeName(t.dtype())));
  }
}

absl::StatusOr<int64_t> ReadScalarInt(const Tensor& t, absl::string_view what) {
  if (t.numel() != 1)
    return absl::InvalidArgumentError(
        absl::StrCat("Sample: ", what, " must have one element, got ", t.DebugString()));
  if (t.dtype() == DType::kI64) return *t.data<int64_t>();
  if (t.dtype() == DType::kI32) return *t.data<int32_t>();
  return absl::InvalidArgumentError(absl::StrCat("Sample: ", what, " must be i64 or i32"));
}

// NaN is larger than every number; ties keep the lowest index.
template <typename T>
bool Greater(T a, T b) {
  if (std::isnan(a)) return !std::isnan(b);
  if (std::isnan(b)) return false;
  return a > b;
}

// `p`: vocab doubles of scratch (the site's workspace, so a decode step allocates nothing).
template <typename T>
void SampleRows(const Tensor& logits, double temperature, uint64_t seed, uint64_t step,
                int64_t* out, double* p) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  const int64_t rs = logits.stride(0), cs = logits.stride(1);
  const T* base = logits.data<T>();
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = base + r * rs;
    int64_t best = 0;
    for (int64_t k = 1; k < vocab; ++k) {
      if (Greater(row[k * cs], row[best * cs])) best = k;
    }
    if (temperature <= 0 || std::isnan(static_cast<double>(row[best * cs])) ||
        std::isinf(static_cast<double>(row[best * cs]))) {
      out[r] = best;  // greedy (also the only sane answer when the row has NaN or +inf)
      continue;
    }
    const double max = static_cast<double>(row[best * cs]);
    double total = 0;
    for (int64_t k = 0; k < vocab; ++k) {
      const double v = std::exp((static_cast<double>(row[k * cs]) - max) / temperature);
      p[k] = std::isnan(v) ? 0.0 : v;
      total += p[k];
    }
    const double u = PhiloxUniform(seed, step, static_cast<uint64_t>(r)) * total;
    double acc = 0;
    int64_t pick = best;
    for (int64_t k = 0; k < vocab; ++k) {
      acc += p[k];
      if (acc > u) {
        pick = k;
        break;
      }
    }
    out[r] = pick;
  }
}

absl::Status RunSample(const void*, KernelContext& ctx, absl::Span<const Tensor* const> in,
                       absl::Span<Tensor* const> out) {
  if (in.size() != 4 || out.size() != 1 || !in[0] || !in[1] || !in[2] || !in[3] || !out[0]) {
    return absl::InvalidArgumentError(
        "Sample takes (logits, temperature, seed, step) and has one output");
  }
  const Tensor& logits = *in[0];
  if (logits.rank() != 2 || logits.dim(1) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Sample: logits must be [batch, vocab] with vocab > 0, got ", logits.DebugString()));
  }
  DYNVM_ASSIGN_OR_RETURN(double temperature, ReadScalarDouble(*in[1], "temperature"));
  DYNVM_ASSIGN_OR_RETURN(int64_t seed, ReadScalarInt(*in[2], "seed"));
  absl::StatusOr<int64_t> step = ReadScalarInt(*in[3], "step");
  if (!step.ok()) return step.status();
  const int64_t dims[1] = {logits.dim(0)};
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kI64, dims, "Sample"));
  int64_t* o = out[0]->data<int64_t>();
  DYNVM_ASSIGN_OR_RETURN(void* scratch,
                         ctx.Workspace(static_cast<size_t>(logits.dim(1)) * sizeof(double)));
  double* p = static_cast<double*>(scratch);
  if (logits.dtype() == DType::kF32) {
    SampleRows<float>(logits, temperature, static_cast<uint64_t>(seed),
                      static_cast<uint64_t>(*step), o, p);
  } else {
    SampleRows<double>(logits, temperature, static_cast<uint64_t>(seed),
                       static_cast<uint64_t>(*step), o, p);
  }
  return absl::OkStatus();
}

// ---- fused activations ----

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;

template <typename T, typename Fn>
absl::Status RunActivation(KernelContext& ctx, Inputs in, Outputs out, const char* op, Fn fn) {
  if (in.size() != 1 || in[0] == nullptr || out.size() != 1 || out[0] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, " takes one input and one output"));
  }
  const Tensor& x = *in[0];
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), x.dims(), op));
  const T* src = x.data<T>();
  T* dst = out[0]->data<T>();
  if (x.is_contiguous()) {
    for (int64_t i = 0; i < x.numel(); ++i) dst[i] = fn(src[i]);
  } else {
    for (int64_t i = 0; i < x.numel(); ++i) dst[i] = fn(src[x.ElementOffset(i)]);
  }
  return absl::OkStatus();
}

template <typename T>
T GeluErf(T x) {
  return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
}
template <typename T>
T GeluTanh(T x) {
  return T(0.5) * x * (T(1) + std::tanh(T(0.79788456080286535588) * (x + T(0.044715) * x * x * x)));
}
template <typename T>
T Silu(T x) {
  const T sig = x >= T(0) ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
  return x * sig;
}

template <typename T>
absl::Status RunGelu(const void*, KernelContext& ctx, Inputs in, Outputs out) {
  return RunActivation<T>(ctx, in, out, "Gelu", &GeluErf<T>);
}
template <typename T>
absl::Status RunGeluTanh(const void*, KernelContext& ctx, Inputs in, Outputs out) {
  return RunActivation<T>(ctx, in, out, "GeluTanh", &GeluTanh<T>);
}
template <typename T>
absl::Status RunSilu(const void*, KernelContext& ctx, Inputs in, Outputs out) {
  return RunActivation<T>(ctx, in, out, "Silu", &Silu<T>);
}

void AddActivation(KernelRegistry& r, const char* op, FunctionKernel::RunFn f32,
                   FunctionKernel::RunFn f64) {
  r.Register(
      {"dynvm", op, Device::kCPU, "reference", kReferencePriority,
       [op, f32, f64](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
         if (spec.inputs.size() != 1 || spec.outputs.size() != 1) {
           return absl::InvalidArgumentError(absl::StrCat(op, " takes 1 input and has 1 output"));
         }
         const uint8_t d = spec.inputs[0].dtype;
         if (d == static_cast<uint8_t>(DType::kF32)) {
           return std::make_unique<FunctionKernel>(absl::StrCat(op, ".f32.ref"), f32, nullptr);
         }
         if (d == static_cast<uint8_t>(DType::kF64)) {
           return std::make_unique<FunctionKernel>(absl::StrCat(op, ".f64.ref"), f64, nullptr);
         }
         return absl::UnimplementedError(absl::StrCat(op, ": x must be f32 or f64"));
       }});
}

// ---- RMSNorm ----

// y = x / sqrt(mean(x^2 over axes [axis, rank)) + epsilon) * scale, f32, any layout; scale has
// one value per normalized element (any shape of that many elements, read in row-major order).
// Sums in double.
class RmsNormKernel final : public Kernel {
 public:
  RmsNormKernel(int64_t axis, float epsilon) : axis_(axis), epsilon_(epsilon) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (in.size() != 2 || in[0] == nullptr || in[1] == nullptr || out.size() != 1 ||
        out[0] == nullptr) {
      return absl::InvalidArgumentError("RMSNorm takes (x, scale) and has one output");
    }
    const Tensor& x = *in[0];
    const Tensor& scale = *in[1];
    const int rank = x.rank();
    if (axis_ < -rank || axis_ >= rank || rank == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("RMSNorm: axis ", axis_, " is out of range for ", x.DebugString()));
    }
    const int axis = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
    int64_t rows = 1, count = 1;
    for (int d = 0; d < rank; ++d) (d < axis ? rows : count) *= x.dim(d);
    if (x.dtype() != DType::kF32 || scale.dtype() != DType::kF32 || scale.numel() != count) {
      return absl::InvalidArgumentError(
          absl::StrCat("RMSNorm: x must be f32 and scale f32 with one value per normalized "
                       "element (",
                       count, "), got ", x.DebugString(), " and ", scale.DebugString()));
    }
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "RMSNorm"));
    const float* xs = x.data<float>();
    const float* ss = scale.data<float>();
    float* y = out[0]->data<float>();  // contiguous: PrepareOutput allocates row-major
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t j = 0; j < count; ++j) {
        const double v = xs[x.ElementOffset(r * count + j)];
        sum += v * v;
      }
      const double inv = 1.0 / std::sqrt(sum / static_cast<double>(count) + epsilon_);
      for (int64_t j = 0; j < count; ++j) {
        y[r * count + j] = static_cast<float>(xs[x.ElementOffset(r * count + j)] * inv *
                                              ss[scale.ElementOffset(j)]);
      }
    }
    return absl::OkStatus();
  }
  std::string name() const override { return "rmsnorm.f32.ref"; }

 private:
  int64_t axis_;
  float epsilon_;
};

}  // namespace

void RegisterDynvmKernels(KernelRegistry& r) {
  r.Register({"dynvm", "RMSNorm", Device::kCPU, "reference", kReferencePriority,
              [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                if (spec.inputs.size() != 2 || spec.outputs.size() != 1) {
                  return absl::InvalidArgumentError("RMSNorm takes 2 inputs and has 1 output");
                }
                if (spec.inputs[0].dtype != static_cast<uint8_t>(DType::kF32)) {
                  return absl::UnimplementedError("RMSNorm: x must be f32");
                }
                DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", -1));
                DYNVM_ASSIGN_OR_RETURN(float epsilon, spec.GetFloat("epsilon", 1e-5f));
                return std::make_unique<RmsNormKernel>(axis, epsilon);
              }});
  AddActivation(r, "Gelu", &RunGelu<float>, &RunGelu<double>);
  AddActivation(r, "GeluTanh", &RunGeluTanh<float>, &RunGeluTanh<double>);
  AddActivation(r, "Silu", &RunSilu<float>, &RunSilu<double>);
  r.Register({"dynvm", "Sample", Device::kCPU, "reference", kReferencePriority,
              [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                if (spec.inputs.size() != 4 || spec.outputs.size() != 1) {
                  return absl::InvalidArgumentError("Sample takes 4 inputs and has 1 output");
                }
                const uint8_t d = spec.inputs[0].dtype;
                if (d != static_cast<uint8_t>(DType::kF32) &&
                    d != static_cast<uint8_t>(DType::kF64)) {
                  return absl::UnimplementedError("Sample: logits must be f32 or f64");
                }
                return std::make_unique<FunctionKernel>("sample.f32.ref", &RunSample, nullptr);
              }});
}

}  // namespace dynvm::reference
