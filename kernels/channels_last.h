// Channels-last 8-bit activations (compiler/conv_fusion.h's quantized layout pass): QLinearConv
// chains pass u8/s8 tensors [N, C, spatial...] stored as [N, spatial..., C] (NWC / NHWC /
// NDHWC), the layout oneDNN's int8 convolutions read and write, flagged "channels_last_in" (x)
// and "channels_last_out" (y) on the node. The dims stay the logical ones. Kernels that compute
// in the plain layout convert with these.
#ifndef DYNVM_KERNELS_CHANNELS_LAST_H_
#define DYNVM_KERNELS_CHANNELS_LAST_H_

#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/tensor.h"

namespace dynvm {

// Copies a dense 8-bit [N, C, spatial...] tensor's channels-last data into plain order in `y`
// (to_last: plain data into channels-last order). `y`: contiguous, x's dtype and dims.
inline absl::Status PermuteChannels8(const Tensor& x, bool to_last, Tensor& y) {
  if (x.rank() < 3 || DTypeSize(x.dtype()) != 1 || !x.is_contiguous() || !y.is_contiguous() ||
      y.dtype() != x.dtype() || y.dims() != x.dims()) {
    return absl::InvalidArgumentError(
        absl::StrCat("channels-last layout: wants contiguous 8-bit tensors of rank 3 or more, "
                     "alike, got ",
                     x.DebugString(), " to ", y.DebugString()));
  }
  const int64_t n = x.dim(0), c = x.dim(1);
  const int64_t s = n * c == 0 ? 0 : x.numel() / (n * c);
  const auto* src = static_cast<const uint8_t*>(x.raw_data());
  auto* dst = static_cast<uint8_t*>(y.raw_data());
  for (int64_t b = 0; b < n; ++b) {
    const uint8_t* in = src + b * c * s;
    uint8_t* out = dst + b * c * s;
    for (int64_t i = 0; i < s; ++i) {
      for (int64_t j = 0; j < c; ++j) {
        if (to_last) {
          out[i * c + j] = in[j * s + i];
        } else {
          out[j * s + i] = in[i * c + j];
        }
      }
    }
  }
  return absl::OkStatus();
}

// The same into a fresh heap tensor.
inline absl::StatusOr<Tensor> PermuteChannels8(const Tensor& x, bool to_last) {
  absl::StatusOr<Tensor> y = Tensor::Empty(x.dtype(), x.dims());
  if (!y.ok()) return y.status();
  absl::Status s = PermuteChannels8(x, to_last, *y);
  if (!s.ok()) return s;
  return y;
}

}  // namespace dynvm

#endif  // DYNVM_KERNELS_CHANNELS_LAST_H_
