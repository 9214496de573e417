// Reference kernels for the loss operators: NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss (ONNX opsets 12 and 13).
//
// Input [N, C, d1..dk] (k >= 0), target [N, d1..dk] (i32 or i64), optional weight [C]. Each
// element's loss is -input[n, target, d...] * weight[target] (weight 1 when absent); an element
// whose target is ignore_index contributes 0 and weight 0 (its target is never used as an
// index). reduction "none" keeps the loss per element, "sum" adds it up, "mean" divides the sum
// by the total weight of the elements not ignored (by their count without weights; by N*D when
// nothing can be ignored). SoftmaxCrossEntropyLoss does the same on LogSoftmax(scores, axis 1),
// which its optional second output returns. Sums accumulate in double.
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;

enum class Reduction : uint8_t { kNone, kSum, kMean };

struct LossAttrs {
  std::string op;
  bool softmax = false;  // SoftmaxCrossEntropyLoss: LogSoftmax over axis 1 first
  Reduction reduction = Reduction::kMean;
  std::optional<int64_t> ignore_index;
};

template <typename T>
double Get(const Tensor& t, int64_t linear) {
  if constexpr (std::is_same_v<T, Half>) {
    return Half::ToFloat(t.data<uint16_t>()[t.ElementOffset(linear)]);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BitsToFloat(static_cast<uint32_t>(t.data<uint16_t>()[t.ElementOffset(linear)]) << 16);
  } else {
    return static_cast<double>(t.data<T>()[t.ElementOffset(linear)]);
  }
}

template <typename T>
void Put(Tensor& t, int64_t linear, double v) {
  if constexpr (std::is_same_v<T, Half>) {
    t.data<uint16_t>()[linear] = Half::FromFloat(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    t.data<uint16_t>()[linear] = BFloat16::FromFloat(static_cast<float>(v));
  } else {
    t.data<T>()[linear] = static_cast<T>(v);
  }
}

absl::Status RunLoss(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const LossAttrs*>(attrs);
  if (in.size() < 2 || in[0] == nullptr || in[1] == nullptr || out.empty() || out[0] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(a.op, ": missing input or output"));
  }
  const Tensor& x = *in[0];
  const Tensor& target = *in[1];
  const Tensor* weight = in.size() > 2 ? in[2] : nullptr;
  if (x.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(a.op, ": input must be [N, C, ...], got ", x.DebugString()));
  }
  const int64_t n = x.dim(0), c = x.dim(1);
  bool target_ok = target.rank() == x.rank() - 1 && target.dim(0) == n;
  for (int i = 2; target_ok && i < x.rank(); ++i) target_ok = target.dim(i - 1) == x.dim(i);
  if (!target_ok) {
    return absl::InvalidArgumentError(absl::StrCat(a.op, ": target ", target.DebugString(),
                                                   " does not match input ", x.DebugString()));
  }
  if (target.dtype() != DType::kI64 && target.dtype() != DType::kI32) {
    return absl::InvalidArgumentError(absl::StrCat(a.op, ": target must be i32 or i64"));
  }
  if (weight != nullptr &&
      (weight->rank() != 1 || weight->dim(0) != c || weight->dtype() != x.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        a.op, ": weight must be [", c, "] of the input's type, got ", weight->DebugString()));
  }
  const int64_t d = c == 0 ? 0 : x.numel() / (n * c);  // elements per (n, class)
  std::vector<int64_t> labels(static_cast<size_t>(target.numel()));
  for (int64_t i = 0; i < target.numel(); ++i) {
    labels[i] = target.dtype() == DType::kI64 ? target.data<int64_t>()[target.ElementOffset(i)]
                                              : target.data<int32_t>()[target.ElementOffset(i)];
    const bool ignored = a.ignore_index && labels[i] == *a.ignore_index;
    if (!ignored && (labels[i] < 0 || labels[i] >= c)) {
      return absl::InvalidArgumentError(
          absl::StrCat(a.op, ": target ", labels[i], " is out of range [0, ", c, ")"));
    }
  }
  std::vector<int64_t> loss_dims(target.dims().begin(), target.dims().end());
  if (a.reduction != Reduction::kNone) loss_dims.clear();
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), loss_dims, a.op));
  Tensor* log_prob = out.size() > 1 ? out[1] : nullptr;
  if (log_prob != nullptr) {
    if (!a.softmax) return absl::InvalidArgumentError(absl::StrCat(a.op, ": one output"));
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, log_prob, x.dtype(), x.dims(), a.op));
  }
  return DispatchNumeric(x.dtype(), a.op, [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!(std::is_floating_point_v<T> || std::is_same_v<T, Half> ||
                    std::is_same_v<T, BFloat16>)) {
      return absl::UnimplementedError(
          absl::StrCat(a.op, ": dtype ", DTypeName(x.dtype()), " not supported"));
    } else {
      // The (log-)probabilities, [N, C, D] row-major.
      std::vector<double> v(static_cast<size_t>(n * c * d));
      for (int64_t i = 0; i < n * c * d; ++i) v[i] = Get<T>(x, i);
      if (a.softmax) {
        for (int64_t b = 0; b < n; ++b) {
          for (int64_t k = 0; k < d; ++k) {
            double mx = -std::numeric_limits<double>::infinity();
            for (int64_t j = 0; j < c; ++j) mx = std::max(mx, v[(b * c + j) * d + k]);
            double sum = 0;
            for (int64_t j = 0; j < c; ++j) sum += std::exp(v[(b * c + j) * d + k] - mx);
            const double lse = mx + std::log(sum);
            for (int64_t j = 0; j < c; ++j) v[(b * c + j) * d + k] -= lse;
          }
        }
        if (log_prob != nullptr) {
          for (int64_t i = 0; i < n * c * d; ++i) Put<T>(*log_prob, i, v[i]);
        }
      }
      double total = 0, total_weight = 0;
      std::vector<double> losses(static_cast<size_t>(n * d));
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t k = 0; k < d; ++k) {
          const int64_t label = labels[b * d + k];
          if (a.ignore_index && label == *a.ignore_index) {
            losses[b * d + k] = 0;
            continue;
          }
          const double w = weight != nullptr ? Get<T>(*weight, label) : 1.0;
          const double l = -v[(b * c + label) * d + k] * w;
          losses[b * d + k] = l;
          total += l;
          total_weight += w;
        }
      }
      switch (a.reduction) {
        case Reduction::kNone:
          for (int64_t i = 0; i < n * d; ++i) Put<T>(*out[0], i, losses[i]);
          break;
        case Reduction::kSum:
          Put<T>(*out[0], 0, total);
          break;
        case Reduction::kMean: {
          const double denom =
              weight != nullptr || a.ignore_index ? total_weight : static_cast<double>(n * d);
          Put<T>(*out[0], 0, total / denom);
          break;
        }
      }
      return absl::OkStatus();
    }
  });
}

void AddLoss(KernelRegistry& r, const char* op, bool softmax) {
  r.Register(KernelRegistration{
      "", op, Device::kCPU, "reference", kReferencePriority,
      [op, softmax](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        if (spec.inputs.size() < 2 || spec.inputs.size() > 3 || spec.outputs.empty() ||
            spec.outputs.size() > (softmax ? 2u : 1u)) {
          return absl::InvalidArgumentError(
              absl::StrCat(op, ": expected 2..3 inputs and ", softmax ? "1..2" : "1", " outputs"));
        }
        const uint8_t dt = spec.inputs[0].dtype;
        if (dt != kAnyDType && !IsFloat(static_cast<DType>(dt))) {
          return absl::UnimplementedError(
              absl::StrCat(op, ": dtype ", DTypeName(static_cast<DType>(dt)), " not supported"));
        }
        LossAttrs a;
        a.op = op;
        a.softmax = softmax;
        DYNVM_ASSIGN_OR_RETURN(std::string reduction, spec.GetString("reduction", "mean"));
        if (reduction == "none") {
          a.reduction = Reduction::kNone;
        } else if (reduction == "sum") {
          a.reduction = Reduction::kSum;
        } else if (reduction == "mean") {
          a.reduction = Reduction::kMean;
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat(op, ": unknown reduction '", reduction, "'"));
        }
        if (spec.Find("ignore_index") != nullptr) {
          DYNVM_ASSIGN_OR_RETURN(int64_t ii, spec.GetInt("ignore_index", 0));
          a.ignore_index = ii;
        }
        return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), &RunLoss,
                                                std::make_shared<const LossAttrs>(std::move(a)));
      }});
}

}  // namespace

void RegisterLossKernels(KernelRegistry& r) {
  AddLoss(r, "NegativeLogLikelihoodLoss", /*softmax=*/false);
  AddLoss(r, "SoftmaxCrossEntropyLoss", /*softmax=*/true);
}

}  // namespace dynvm::reference
