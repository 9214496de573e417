// Kernels of dynvm's own ops (domain "dynvm"), registered exactly like a user's custom ops.
//
//   Sample(logits [B, V] f32/f64, temperature [] f32, seed [] i64, step [] i64
//          [, top_k [] i64, top_p [] f32, repetition_penalty [] f32, tokens [B, n] i64...])
//     -> [B] i64 (docs/sampling.md). The logits of the tokens in `tokens` get the repetition
//     penalty (Hugging Face's: positive ones divided, negative ones multiplied, once per
//     distinct token; a -1 is padding, skipped). temperature <= 0: argmax (NaN counts as the
//     largest value; ties pick the lowest index). Otherwise p = softmax(logits / temperature),
//     restricted to the tokens whose logit is at least the top_k-th largest (top_k > 0) and then to
//     the smallest most-probable set of mass >= top_p (top_p < 1), and the token is the smallest k
//     with sum(p[0..k]) > u sum(p), u = PhiloxUniform(seed, step, row)
//     (kernels/reference/philox.h).
//   Gelu(x) = x/2 (1 + erf(x/sqrt 2)); GeluTanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
//   Silu(x) = x sigmoid(x). f32 or f64, any layout; the fused activations of
//   compiler/rewrite/activations.cc.
//   RMSNorm(x, scale) = x / sqrt(mean(x^2 over [axis, rank)) + epsilon) * scale, f32
//   (compiler/rewrite/rms_norm.cc).
//   RotateHalf(x, cos, sin) = x cos + rotate_half(x) sin over the last axis, f32
//   (compiler/rewrite/rotary.cc).
//   SwiGlu(gate, up) = silu(gate) up, broadcast, f32 (compiler/rewrite/swiglu.cc).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
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

// The settings of one Sample call (docs/sampling.md).
struct SampleSettings {
  double temperature = 0;
  int64_t top_k = 0;   // 0: no top-k filter
  double top_p = 1;    // 1: no top-p filter
  double penalty = 1;  // 1: no repetition penalty
  uint64_t seed = 0, step = 0;
  absl::Span<const Tensor* const> seen;  // [batch, n] token ids the penalty applies to
};

// The scratch of one row: `x` vocab doubles (the row's logits, then their weights), `order`
// vocab indices, `marks` vocab bytes. From the site's workspace: a decode step allocates nothing.
struct SampleScratch {
  double* x;
  int32_t* order;
  uint8_t* marks;
};

// Hugging Face's repetition penalty, once per distinct token of row `r` of the seen tensors:
// a positive logit is divided by the penalty, a negative one multiplied.
absl::Status ApplyPenalty(const SampleSettings& s, int64_t r, int64_t vocab, SampleScratch& w) {
  std::memset(w.marks, 0, static_cast<size_t>(vocab));
  for (size_t i = 0; i < s.seen.size(); ++i) {
    const Tensor& t = *s.seen[i];
    for (int64_t j = 0; j < t.dim(1); ++j) {
      const int64_t at = r * t.stride(0) + j * t.stride(1);
      const int64_t token =
          t.dtype() == DType::kI64 ? t.data<int64_t>()[at] : t.data<int32_t>()[at];
      if (token == -1) continue;  // padding (a prompt's shorter rows: docs/llm.md)
      if (token < 0 || token >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("Sample: token ", token,
                         " of the tokens the repetition_penalty applies "
                         "to (input ",
                         7 + i, ", row ", r, ") is outside [0, ", vocab, ")"));
      }
      if (w.marks[token] != 0) continue;
      w.marks[token] = 1;
      double& v = w.x[token];
      v = v < 0 ? v * s.penalty : v / s.penalty;
    }
  }
  return absl::OkStatus();
}

// Keeps the tokens whose logit is at least the k-th largest (ties with it kept, as Hugging
// Face's TopKLogitsWarper does): the others' weights become 0.
void KeepTopK(int64_t k, int64_t vocab, SampleScratch& w) {
  for (int64_t i = 0; i < vocab; ++i) w.order[i] = static_cast<int32_t>(i);
  const double* x = w.x;
  std::nth_element(w.order, w.order + (k - 1), w.order + vocab,
                   [x](int32_t a, int32_t b) { return x[a] > x[b]; });
  const double kth = x[w.order[k - 1]];
  for (int64_t i = 0; i < vocab; ++i) {
    if (w.x[i] < kth) w.x[i] = -std::numeric_limits<double>::infinity();
  }
}

// Keeps the smallest set of the most probable tokens whose mass reaches top_p of the total
// (ties in probability taken in index order): the others' weights `p` become 0. Sorts only as
// far as needed, in chunks that double.
void KeepTopP(double top_p, int64_t vocab, double* p, int32_t* order) {
  double total = 0;
  int64_t n = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (p[i] > 0) order[n++] = static_cast<int32_t>(i);
    total += p[i];
  }
  auto before = [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
  const double want = top_p * total;
  double mass = 0;
  int64_t kept = n;
  for (int64_t lo = 0, chunk = 64; lo < n && kept == n; lo += chunk, chunk *= 2) {
    const int64_t hi = std::min(n, lo + chunk);
    std::partial_sort(order + lo, order + hi, order + n, before);
    for (int64_t i = lo; i < hi; ++i) {
      mass += p[order[i]];
      if (mass >= want) {
        kept = i + 1;
        break;
      }
    }
  }
  for (int64_t i = kept; i < n; ++i) p[order[i]] = 0;
}

// One row: penalty, greedy or temperature, top-k, top-p, then the inverse-CDF draw in index
// order over what is kept.
template <typename T>
absl::StatusOr<int64_t> SampleRow(const T* row, int64_t cs, int64_t r, int64_t vocab,
                                  const SampleSettings& s, SampleScratch& w) {
  if (s.temperature <= 0 && s.penalty == 1) {
    // Greedy without a penalty (a decode loop's default): the arg max read once from the row, not
    // from a copy in doubles (widening is exact and monotonic: the same token).
    int64_t best = 0;
    T top = row[0];  // row[best], kept in a register: no load that waits on the last compare
    for (int64_t k = 1; k < vocab; ++k) {
      const T x = row[k * cs];
      if (Greater(x, top)) {
        best = k;
        top = x;
      }
    }
    return best;
  }
  double* x = w.x;
  for (int64_t k = 0; k < vocab; ++k) x[k] = static_cast<double>(row[k * cs]);
  if (s.penalty != 1) DYNVM_RETURN_IF_ERROR(ApplyPenalty(s, r, vocab, w));
  int64_t best = 0;
  for (int64_t k = 1; k < vocab; ++k) {
    if (Greater(x[k], x[best])) best = k;
  }
  // Greedy (also the only sane answer when the row's maximum is NaN or +inf).
  if (s.temperature <= 0 || std::isnan(x[best]) || std::isinf(x[best])) return best;
  if (s.top_k > 0 && s.top_k < vocab) KeepTopK(s.top_k, vocab, w);
  const double max = x[best];
  double total = 0;
  for (int64_t k = 0; k < vocab; ++k) {
    const double v = std::exp((x[k] - max) / s.temperature);
    x[k] = std::isnan(v) ? 0.0 : v;
    total += x[k];
  }
  if (s.top_p < 1) {
    KeepTopP(s.top_p, vocab, x, w.order);
    total = 0;
    for (int64_t k = 0; k < vocab; ++k) total += x[k];
  }
  const double u = PhiloxUniform(s.seed, s.step, static_cast<uint64_t>(r)) * total;
  double acc = 0;
  for (int64_t k = 0; k < vocab; ++k) {
    acc += x[k];
    if (acc > u) return k;
  }
  return best;
}

// Reads and checks the optional settings (inputs 4-6) and the seen tensors (7...).
absl::Status ReadSettings(absl::Span<const Tensor* const> in, int64_t batch, SampleSettings& s) {
  if (in.size() == 4) return absl::OkStatus();
  for (size_t i = 4; i < in.size(); ++i) {
    if (in[i] == nullptr) return absl::InvalidArgumentError("Sample: input missing");
  }
  DYNVM_ASSIGN_OR_RETURN(s.top_k, ReadScalarInt(*in[4], "top_k"));
  DYNVM_ASSIGN_OR_RETURN(s.top_p, ReadScalarDouble(*in[5], "top_p"));
  DYNVM_ASSIGN_OR_RETURN(s.penalty, ReadScalarDouble(*in[6], "repetition_penalty"));
  if (s.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Sample: top_k must be >= 0 (0: no top-k filter), got ", s.top_k));
  }
  if (!(s.top_p > 0 && s.top_p <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Sample: top_p must be in (0, 1] (1: no top-p filter), got ", s.top_p));
  }
  if (!(s.penalty > 0) || std::isinf(s.penalty)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Sample: repetition_penalty must be a finite number > 0 (1: none), got ", s.penalty));
  }
  s.seen = in.subspan(7);
  for (size_t i = 0; i < s.seen.size(); ++i) {
    const Tensor& t = *s.seen[i];
    if (t.rank() != 2 || t.dim(0) != batch ||
        (t.dtype() != DType::kI64 && t.dtype() != DType::kI32)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Sample: input ", 7 + i,
                       " (tokens the repetition_penalty applies to) must "
                       "be i64 or i32 [batch, n] with batch ",
                       batch, ", got ", t.DebugString()));
    }
  }
  return absl::OkStatus();
}

absl::Status RunSample(const void*, KernelContext& ctx, absl::Span<const Tensor* const> in,
                       absl::Span<Tensor* const> out) {
  if ((in.size() != 4 && in.size() < 7) || out.size() != 1 || !in[0] || !in[1] || !in[2] ||
      !in[3] || !out[0]) {
    return absl::InvalidArgumentError(
        "Sample takes (logits, temperature, seed, step[, top_k, top_p, repetition_penalty, "
        "tokens...]) and has one output");
  }
  const Tensor& logits = *in[0];
  if (logits.rank() != 2 || logits.dim(1) == 0 ||
      logits.dim(1) > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Sample: logits must be [batch, vocab] with vocab > 0, got ", logits.DebugString()));
  }
  SampleSettings s;
  DYNVM_ASSIGN_OR_RETURN(s.temperature, ReadScalarDouble(*in[1], "temperature"));
  DYNVM_ASSIGN_OR_RETURN(int64_t seed, ReadScalarInt(*in[2], "seed"));
  DYNVM_ASSIGN_OR_RETURN(int64_t step, ReadScalarInt(*in[3], "step"));
  s.seed = static_cast<uint64_t>(seed);
  s.step = static_cast<uint64_t>(step);
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  DYNVM_RETURN_IF_ERROR(ReadSettings(in, rows, s));
  const int64_t dims[1] = {rows};
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kI64, dims, "Sample"));
  int64_t* o = out[0]->data<int64_t>();
  const size_t v = static_cast<size_t>(vocab);
  DYNVM_ASSIGN_OR_RETURN(void* scratch, ctx.Workspace(v * (sizeof(double) + sizeof(int32_t) + 1)));
  SampleScratch w{static_cast<double*>(scratch),
                  reinterpret_cast<int32_t*>(static_cast<char*>(scratch) + v * sizeof(double)),
                  reinterpret_cast<uint8_t*>(static_cast<char*>(scratch) +
                                             v * (sizeof(double) + sizeof(int32_t)))};
  for (int64_t r = 0; r < rows; ++r) {
    absl::StatusOr<int64_t> pick = logits.dtype() == DType::kF32
                                       ? SampleRow(logits.data<float>() + r * logits.stride(0),
                                                   logits.stride(1), r, vocab, s, w)
                                       : SampleRow(logits.data<double>() + r * logits.stride(0),
                                                   logits.stride(1), r, vocab, s, w);
    if (!pick.ok()) return pick.status();
    o[r] = *pick;
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

// ---- ChannelMul ----

// y = x * g: x [N, C, spatial...] (rank 3 to 5), g [N or 1, C, 1...] of x's rank, f32: a
// squeeze-excitation gate (compiler/conv_fusion.h). channels_last_in / _out: x / y hold the
// channels-last layout (NHWC bytes under the logical dims; x must then be dense). The oracle:
// one loop over logical indices.
class ChannelMulKernel final : public Kernel {
 public:
  ChannelMulKernel(bool in_cl, bool out_cl) : in_cl_(in_cl), out_cl_(out_cl) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (in.size() != 2 || in[0] == nullptr || in[1] == nullptr || out.size() != 1 ||
        out[0] == nullptr) {
      return absl::InvalidArgumentError("ChannelMul takes (x, g) and has one output");
    }
    const Tensor& x = *in[0];
    const Tensor& g = *in[1];
    bool ok = x.dtype() == DType::kF32 && g.dtype() == DType::kF32 && x.rank() >= 3 &&
              x.rank() <= 5 && g.rank() == x.rank() && (g.dim(0) == 1 || g.dim(0) == x.dim(0)) &&
              g.dim(1) == x.dim(1) && (!in_cl_ || x.is_contiguous());
    for (int d = 2; ok && d < g.rank(); ++d) ok = g.dim(d) == 1;
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ChannelMul: x must be f32 [N, C, spatial...] (dense when channels-last) and g f32 "
          "[N or 1, C, 1...] of its rank, got ",
          x.DebugString(), " and ", g.DebugString()));
    }
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "ChannelMul"));
    const int64_t n = x.dim(0), c = x.dim(1), sp = x.numel() / std::max<int64_t>(n * c, 1);
    const float* xs = x.data<float>();
    const float* gs = g.data<float>();
    float* y = out[0]->data<float>();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < c; ++j) {
        const float gate = gs[g.ElementOffset((g.dim(0) == 1 ? 0 : i) * c + j)];
        for (int64_t s = 0; s < sp; ++s) {
          const int64_t plain = (i * c + j) * sp + s, cl = (i * sp + s) * c + j;
          const float v = in_cl_ ? xs[cl] : xs[x.ElementOffset(plain)];
          y[out_cl_ ? cl : plain] = v * gate;
        }
      }
    }
    return absl::OkStatus();
  }
  std::string name() const override { return "channelmul.f32.ref"; }

 private:
  bool in_cl_, out_cl_;
};

// ---- ChannelPad ----

// y = x with `before` zero channels in front and `after` behind: x [N, C, spatial...] (rank 3
// to 5), f32, y [N, before + C + after, spatial...] (a Concat of x and zeros along the channels,
// compiler/conv_fusion.h). channels_last_in / _out: x / y hold the channels-last layout (NHWC
// bytes under the logical dims; x must then be dense). Copies only: every value of x lands
// unchanged (NaN, infinities and -0 included).
class ChannelPadKernel final : public Kernel {
 public:
  ChannelPadKernel(int64_t before, int64_t after, bool in_cl, bool out_cl)
      : before_(before), after_(after), in_cl_(in_cl), out_cl_(out_cl) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (in.size() != 1 || in[0] == nullptr || out.size() != 1 || out[0] == nullptr) {
      return absl::InvalidArgumentError("ChannelPad takes (x) and has one output");
    }
    const Tensor& x = *in[0];
    if (x.dtype() != DType::kF32 || x.rank() < 3 || x.rank() > 5 ||
        (in_cl_ && !x.is_contiguous())) {
      return absl::InvalidArgumentError(
          absl::StrCat("ChannelPad: x must be f32 [N, C, spatial...] of rank 3 to 5 (dense "
                       "when channels-last), got ",
                       x.DebugString()));
    }
    std::vector<int64_t> dims(x.dims().begin(), x.dims().end());
    const int64_t n = dims[0], c = dims[1];
    dims[1] = before_ + c + after_;
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, dims, "ChannelPad"));
    const int64_t co = dims[1];
    int64_t sp = 1;  // pixels per channel (from the dims: x may hold no channel)
    for (size_t d = 2; d < dims.size(); ++d) sp *= dims[d];
    const float* xs = x.data<float>();
    float* y = out[0]->data<float>();
    const bool dense = x.is_contiguous();
    // x's value (image i, channel j, pixel s).
    auto at = [&](int64_t i, int64_t j, int64_t s) {
      return in_cl_ ? xs[(i * sp + s) * c + j]
                    : xs[dense ? (i * c + j) * sp + s : x.ElementOffset((i * c + j) * sp + s)];
    };
    for (int64_t i = 0; i < n; ++i) {
      if (out_cl_) {
        for (int64_t s = 0; s < sp; ++s) {
          float* row = y + (i * sp + s) * co;
          std::fill(row, row + before_, 0.0f);
          if (in_cl_) {
            std::copy_n(xs + (i * sp + s) * c, c, row + before_);
          } else {
            for (int64_t j = 0; j < c; ++j) row[before_ + j] = at(i, j, s);
          }
          std::fill(row + before_ + c, row + co, 0.0f);
        }
        continue;
      }
      float* image = y + i * co * sp;
      std::fill(image, image + before_ * sp, 0.0f);
      for (int64_t j = 0; j < c; ++j) {
        float* plane = image + (before_ + j) * sp;
        if (!in_cl_ && dense) {
          std::copy_n(xs + (i * c + j) * sp, sp, plane);
        } else {
          for (int64_t s = 0; s < sp; ++s) plane[s] = at(i, j, s);
        }
      }
      std::fill(image + (before_ + c) * sp, image + co * sp, 0.0f);
    }
    return absl::OkStatus();
  }
  std::string name() const override { return "channelpad.f32.ref"; }

 private:
  int64_t before_, after_;
  bool in_cl_, out_cl_;
};

// ---- RotateHalf ----

// y = x * cos + rotate_half(x) * sin over the last axis (D even), x, cos and sin broadcast
// together (numpy) to y's shape, x's last axis not broadcast: y[i] = x[i] cos[i] -
// x[i + D/2] sin[i] and y[i + D/2] = x[i + D/2] cos[i + D/2] + x[i] sin[i + D/2]. f32, any layout;
// each value in double, rounded once.
class RotateHalfKernel final : public Kernel {
 public:
  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (in.size() != 3 || in[0] == nullptr || in[1] == nullptr || in[2] == nullptr ||
        out.size() != 1 || out[0] == nullptr) {
      return absl::InvalidArgumentError("RotateHalf takes (x, cos, sin) and has one output");
    }
    const Tensor& x = *in[0];
    const Tensor& c = *in[1];
    const Tensor& s = *in[2];
    if (x.dtype() != DType::kF32 || c.dtype() != DType::kF32 || s.dtype() != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("RotateHalf: x, cos and sin must be f32, got ",
                                                     x.DebugString(), ", ", c.DebugString(), ", ",
                                                     s.DebugString()));
    }
    absl::StatusOr<Dims> xc = BroadcastShapes(x.dims(), c.dims());
    absl::StatusOr<Dims> od = xc.ok() ? BroadcastShapes(*xc, s.dims()) : xc;
    if (!od.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("RotateHalf: ", od.status().message()));
    }
    const int rank = static_cast<int>(od->size());
    if (x.rank() == 0 || x.dim(x.rank() - 1) % 2 != 0 || (*od)[rank - 1] != x.dim(x.rank() - 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RotateHalf: x's last dim must be even and not broadcast by cos and sin, got ",
          x.DebugString(), ", ", c.DebugString(), ", ", s.DebugString()));
    }
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, *od, "RotateHalf"));
    const Dims xs = BroadcastStrides(x, *od), cs = BroadcastStrides(c, *od),
               ss = BroadcastStrides(s, *od);
    const int64_t d = (*od)[rank - 1], half = d / 2;
    int64_t rows = 1;
    for (int a = 0; a < rank - 1; ++a) rows *= (*od)[a];
    if (d == 0) rows = 0;
    const float* xp = x.data<float>();
    const float* cp = c.data<float>();
    const float* sp = s.data<float>();
    float* y = out[0]->data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      int64_t rem = r, xo = 0, co = 0, so = 0;
      for (int a = rank - 2; a >= 0; --a) {
        const int64_t i = rem % (*od)[a];
        rem /= (*od)[a];
        xo += i * xs[a];
        co += i * cs[a];
        so += i * ss[a];
      }
      const int64_t xl = xs[rank - 1], cl = cs[rank - 1], sl = ss[rank - 1];
      for (int64_t i = 0; i < d; ++i) {
        const double xi = xp[xo + i * xl];
        const double partner = i < half ? -static_cast<double>(xp[xo + (i + half) * xl])
                                        : static_cast<double>(xp[xo + (i - half) * xl]);
        y[r * d + i] = static_cast<float>(xi * cp[co + i * cl] + partner * sp[so + i * sl]);
      }
    }
    return absl::OkStatus();
  }
  std::string name() const override { return "rotate_half.f32.ref"; }
};

// ---- SwiGlu ----

// y = gate sigmoid(gate) up, gate and up broadcast together (numpy). f32, any layout; each
// value in double, rounded once.
class SwiGluKernel final : public Kernel {
 public:
  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (in.size() != 2 || in[0] == nullptr || in[1] == nullptr || out.size() != 1 ||
        out[0] == nullptr) {
      return absl::InvalidArgumentError("SwiGlu takes (gate, up) and has one output");
    }
    const Tensor& g = *in[0];
    const Tensor& u = *in[1];
    if (g.dtype() != DType::kF32 || u.dtype() != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("SwiGlu: gate and up must be f32, got ",
                                                     g.DebugString(), ", ", u.DebugString()));
    }
    absl::StatusOr<Dims> od = BroadcastShapes(g.dims(), u.dims());
    if (!od.ok())
      return absl::InvalidArgumentError(absl::StrCat("SwiGlu: ", od.status().message()));
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, *od, "SwiGlu"));
    const Dims gs = BroadcastStrides(g, *od), us = BroadcastStrides(u, *od);
    const std::array<absl::Span<const int64_t>, 2> strides = {gs, us};
    const float* gp = g.data<float>();
    const float* up = u.data<float>();
    float* y = out[0]->data<float>();
    int64_t i = 0;
    ForEachOffset<2>(*od, strides, [&](int64_t go, int64_t uo) {
      const double a = gp[go];
      y[i++] = static_cast<float>(a / (1.0 + std::exp(-a)) * up[uo]);
    });
    return absl::OkStatus();
  }
  std::string name() const override { return "swiglu.f32.ref"; }
};

}  // namespace

void RegisterDynvmKernels(KernelRegistry& r) {
  r.Register({"dynvm", "SwiGlu", Device::kCPU, "reference", kReferencePriority,
              [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                if (spec.inputs.size() != 2 || spec.outputs.size() != 1) {
                  return absl::InvalidArgumentError("SwiGlu takes 2 inputs and has 1 output");
                }
                if (spec.inputs[0].dtype != static_cast<uint8_t>(DType::kF32)) {
                  return absl::UnimplementedError("SwiGlu: gate must be f32");
                }
                return std::make_unique<SwiGluKernel>();
              }});
  r.Register({"dynvm", "RotateHalf", Device::kCPU, "reference", kReferencePriority,
              [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                if (spec.inputs.size() != 3 || spec.outputs.size() != 1) {
                  return absl::InvalidArgumentError("RotateHalf takes 3 inputs and has 1 output");
                }
                if (spec.inputs[0].dtype != static_cast<uint8_t>(DType::kF32)) {
                  return absl::UnimplementedError("RotateHalf: x must be f32");
                }
                return std::make_unique<RotateHalfKernel>();
              }});
  r.Register({"dynvm", "ChannelMul", Device::kCPU, "reference", kReferencePriority,
              [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                if (spec.inputs.size() != 2 || spec.outputs.size() != 1) {
                  return absl::InvalidArgumentError("ChannelMul takes 2 inputs and has 1 output");
                }
                DYNVM_ASSIGN_OR_RETURN(int64_t in_cl, spec.GetInt("channels_last_in", 0));
                DYNVM_ASSIGN_OR_RETURN(int64_t out_cl, spec.GetInt("channels_last_out", 0));
                return std::make_unique<ChannelMulKernel>(in_cl != 0, out_cl != 0);
              }});
  r.Register({"dynvm", "ChannelPad", Device::kCPU, "reference", kReferencePriority,
              [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                if (spec.inputs.size() != 1 || spec.outputs.size() != 1) {
                  return absl::InvalidArgumentError("ChannelPad takes 1 input and has 1 output");
                }
                DYNVM_ASSIGN_OR_RETURN(int64_t before, spec.GetInt("before", 0));
                DYNVM_ASSIGN_OR_RETURN(int64_t after, spec.GetInt("after", 0));
                if (before < 0 || after < 0) {
                  return absl::InvalidArgumentError("ChannelPad: before and after must be >= 0");
                }
                DYNVM_ASSIGN_OR_RETURN(int64_t in_cl, spec.GetInt("channels_last_in", 0));
                DYNVM_ASSIGN_OR_RETURN(int64_t out_cl, spec.GetInt("channels_last_out", 0));
                return std::make_unique<ChannelPadKernel>(before, after, in_cl != 0, out_cl != 0);
              }});
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
  r.Register(
      {"dynvm", "Sample", Device::kCPU, "reference", kReferencePriority,
       [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
         if ((spec.inputs.size() != 4 && spec.inputs.size() < 7) || spec.outputs.size() != 1) {
           return absl::InvalidArgumentError(
               "Sample takes 4 inputs, or 7 and more, and has 1 output");
         }
         const uint8_t d = spec.inputs[0].dtype;
         if (d != static_cast<uint8_t>(DType::kF32) && d != static_cast<uint8_t>(DType::kF64)) {
           return absl::UnimplementedError("Sample: logits must be f32 or f64");
         }
         return std::make_unique<FunctionKernel>("sample.f32.ref", &RunSample, nullptr);
       }});
}

}  // namespace dynvm::reference
