// Helpers of the signal, vision and random reference kernels (signal.cc, vision.cc,
// random.cc): presence checks and whole-tensor reads and writes as double. Internal.
#ifndef DYNVM_KERNELS_REFERENCE_SIGNAL_COMMON_H_
#define DYNVM_KERNELS_REFERENCE_SIGNAL_COMMON_H_

#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/reference/common.h"

namespace dynvm::reference {

// The first `n_in` inputs and the first output are present.
inline absl::Status NeedIo(absl::Span<const Tensor* const> in, size_t n_in,
                           absl::Span<Tensor* const> out, absl::string_view op) {
  if (in.size() < n_in || out.empty() || out[0] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": missing input or output"));
  }
  for (size_t i = 0; i < n_in; ++i) {
    if (in[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": input ", i, " is missing"));
    }
  }
  return absl::OkStatus();
}

// Every element of a numeric tensor (any layout) as double, in row-major order.
inline std::vector<double> ReadDoubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  (void)DispatchNumeric(t.dtype(), "read", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* p = t.data<T>();
    const bool dense = t.is_contiguous();
    for (int64_t i = 0; i < t.numel(); ++i) {
      const T x = p[dense ? i : t.ElementOffset(i)];
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        v[i] = static_cast<float>(x);
      } else {
        v[i] = static_cast<double>(x);
      }
    }
    return absl::OkStatus();
  });
  return v;
}

// Stores v into a contiguous tensor of as many elements (converted to its dtype).
inline void WriteDoubles(Tensor& t, const std::vector<double>& v) {
  (void)DispatchNumeric(t.dtype(), "write", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        p[i] = T(static_cast<float>(v[i]));
      } else {
        p[i] = static_cast<T>(v[i]);
      }
    }
    return absl::OkStatus();
  });
}

// The values of an i32 or i64 index tensor of any shape.
inline absl::StatusOr<std::vector<int64_t>> ReadIndexValues(const Tensor& t, absl::string_view op) {
  if (t.dtype() != DType::kI64 && t.dtype() != DType::kI32) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": indices must be int32 or int64, got ", DTypeName(t.dtype())));
  }
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t off = t.ElementOffset(i);
    v[i] = t.dtype() == DType::kI64 ? t.data<int64_t>()[off] : t.data<int32_t>()[off];
  }
  return v;
}

// Training-mode Dropout (random.cc): mask m = (u >= ratio) with u drawn from Philox as the
// random operators draw it (seeded when `seed` is set), y = x * m / (1 - ratio); `mask` (may be
// null) receives m in `mask_dtype`. REQUIRES: 0 < ratio < 1.
absl::Status TrainingDropout(KernelContext& ctx, const Tensor& x, double ratio,
                             std::optional<int64_t> seed, Tensor* y, Tensor* mask,
                             DType mask_dtype);

}  // namespace dynvm::reference

#endif  // DYNVM_KERNELS_REFERENCE_SIGNAL_COMMON_H_
