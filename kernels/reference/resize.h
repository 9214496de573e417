// Resize's attributes, output geometry and per-coordinate taps, shared by the reference kernel
// (resize.cc, the oracle) and the oneDNN backend's kernel (kernels/dnnl/resize.cc), so that both
// accept the same nodes and weigh the same neighbours with the same doubles.
#ifndef DYNVM_KERNELS_REFERENCE_RESIZE_H_
#define DYNVM_KERNELS_REFERENCE_RESIZE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/kernel.h"

namespace dynvm::reference {

enum class ResizeMode : uint8_t { kNearest, kLinear, kCubic };

struct ResizeAttrs {
  ResizeMode mode = ResizeMode::kNearest;
  std::string transform = "half_pixel";
  std::string nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0;
  // Opset 18: the dims `scales`/`sizes`/`roi` are for (empty: every dim), and how `sizes` keeps
  // the aspect ratio: 0 stretch, 1 not_larger, 2 not_smaller.
  std::vector<int64_t> axes;
  int keep_aspect = 0;
};

// The node's attributes (and its input and output counts), or the error the reference kernel's
// factory reports: an unknown mode, transform, nearest_mode or keep_aspect_ratio_policy
// (InvalidArgument), opset 10 or antialias (Unimplemented).
absl::StatusOr<ResizeAttrs> ReadResizeAttrs(const KernelSpec& spec);

// One run's output dims, the scale of every dim and the roi (2 * rank values: starts, then
// ends), from the inputs X, roi, scales and sizes (absent or empty ones as ONNX allows).
struct ResizeGeometry {
  std::vector<int64_t> out_dims;
  std::vector<double> scales, roi;
};
absl::StatusOr<ResizeGeometry> PlanResize(const ResizeAttrs& a, absl::Span<const Tensor* const> in);

// The neighbours of output coordinate x of a dim resized from `in` to `out` (`scale` and the
// dim's roi from PlanResize): `count` (2 for nearest and linear, 4 for cubic) input indices,
// clamped to [0, in), and their weights (nearest: one of them 1, the other 0; exclude_outside
// zeroes and renormalizes); `outside` when tf_crop_and_resize maps x outside the input (the
// output is extrapolation_value). REQUIRES: in > 0.
struct ResizeTap {
  int64_t index[4] = {};
  double weight[4] = {};
  int count = 0;
  bool outside = false;
};
ResizeTap ResizeTapAt(const ResizeAttrs& a, int64_t in, int64_t out, double scale, double roi_start,
                      double roi_end, int64_t x);

}  // namespace dynvm::reference

#endif  // DYNVM_KERNELS_REFERENCE_RESIZE_H_
