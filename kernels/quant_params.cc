#include "kernels/quant_params.h"

#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/half.h"

namespace dynvm {
namespace {

// Element i of a tensor of an integer or floating-point dtype, as double; nullopt-like NaN for
// dtypes that hold no numbers (bool, string).
double ElementAsDouble(const Tensor& t, int64_t i) {
  const int64_t off = t.ElementOffset(i);
  switch (t.dtype()) {
    case DType::kF32:
      return t.data<float>()[off];
    case DType::kF64:
      return t.data<double>()[off];
    case DType::kF16:
      return static_cast<float>(t.data<Half>()[off]);
    case DType::kBF16:
      return static_cast<float>(t.data<BFloat16>()[off]);
    case DType::kU8:
      return t.data<uint8_t>()[off];
    case DType::kI8:
      return t.data<int8_t>()[off];
    case DType::kU16:
      return t.data<uint16_t>()[off];
    case DType::kI16:
      return t.data<int16_t>()[off];
    case DType::kI32:
      return t.data<int32_t>()[off];
    case DType::kU32:
      return t.data<uint32_t>()[off];
    case DType::kI64:
      return static_cast<double>(t.data<int64_t>()[off]);
    case DType::kU64:
      return static_cast<double>(t.data<uint64_t>()[off]);
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
}

}  // namespace

std::pair<double, double> QuantRange(DType d) {
  switch (d) {
    case DType::kU8:
      return {0, 255};
    case DType::kI8:
      return {-128, 127};
    case DType::kU16:
      return {0, 65535};
    case DType::kI16:
      return {-32768, 32767};
    case DType::kI32:
      return {static_cast<double>(std::numeric_limits<int32_t>::min()),
              static_cast<double>(std::numeric_limits<int32_t>::max())};
    default:
      return {-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  }
}

absl::Status CheckQuantScale(const Tensor& scale, absl::string_view what) {
  if (!IsFloat(scale.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be floating point, not ", DTypeName(scale.dtype())));
  }
  if (scale.dtype() == DType::kF32 && scale.is_contiguous()) {
    // The common case in one branch-free pass (a per-column scale is checked on every call of
    // a quantized kernel); the loop below names the first bad element.
    const float* v = scale.data<float>();
    bool ok = true;
    for (int64_t i = 0; i < scale.numel(); ++i) {
      ok &= v[i] > 0 && v[i] <= std::numeric_limits<float>::max();
    }
    if (ok) return absl::OkStatus();
  }
  for (int64_t i = 0; i < scale.numel(); ++i) {
    const double s = ElementAsDouble(scale, i);
    if (!std::isfinite(s) || !(s > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " must be finite and positive; element ", i, " is ", s));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckZeroPoint(const Tensor& zp, DType quant, absl::string_view what) {
  if (IsFloat(zp.dtype()) || zp.dtype() == DType::kBool || zp.dtype() == DType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be an integer tensor, not ", DTypeName(zp.dtype())));
  }
  const auto [lo, hi] = QuantRange(quant);
  for (int64_t i = 0; i < zp.numel(); ++i) {
    const double z = ElementAsDouble(zp, i);
    if (z < lo || z > hi) {
      return absl::InvalidArgumentError(absl::StrCat(what, " element ", i, " is ", z,
                                                     ", outside the range of ", DTypeName(quant),
                                                     " [", lo, ", ", hi, "]"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckQuantLength(int64_t numel, int64_t channels, absl::string_view what) {
  if (numel == 1 || numel == channels) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " has ", numel,
                                                 " values; expected 1 (per tensor) or ", channels,
                                                 " (one per channel)"));
}

}  // namespace dynvm
