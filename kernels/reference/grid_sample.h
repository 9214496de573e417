// GridSample's attributes and the reflection and cubic helpers of its coordinate arithmetic,
// shared by the reference kernel (vision.cc, the oracle) and the oneDNN backend's kernel
// (kernels/dnnl/grid_sample.cc), so that both accept the same nodes and compute the same taps.
#ifndef DYNVM_KERNELS_REFERENCE_GRID_SAMPLE_H_
#define DYNVM_KERNELS_REFERENCE_GRID_SAMPLE_H_

#include <cmath>
#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace dynvm::reference {

enum class GsMode : uint8_t { kBilinear, kNearest, kBicubic };
enum class GsPad : uint8_t { kZeros, kBorder, kReflection };

struct GridAttrs {
  GsMode mode = GsMode::kBilinear;
  GsPad pad = GsPad::kZeros;
  bool align_corners = false;
};

// The node's attributes (and its input and output counts), or InvalidArgument as the reference
// kernel's factory reports it.
absl::StatusOr<GridAttrs> ReadGridSampleAttrs(const KernelSpec& spec);

// v mirrored into [lo, hi] at its borders (lo when the range is empty). v finite.
double GridReflect(double v, double lo, double hi);

// True when the sample at pixel coordinate (x, y) is NaN whatever the image holds: a NaN
// coordinate, or an infinite one under reflection padding (its mirror image is undefined; an
// infinite coordinate is clamped by border padding and outside the image under zeros padding).
inline bool GridSampleIsNaN(GsPad pad, double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return true;
  return pad == GsPad::kReflection && (std::isinf(x) || std::isinf(y));
}

// The bicubic weights (A = -0.75) of the 4 taps around a coordinate at distance t from the
// second one.
void GridCubicCoeffs(double t, double c[4]);

}  // namespace dynvm::reference

#endif  // DYNVM_KERNELS_REFERENCE_GRID_SAMPLE_H_
