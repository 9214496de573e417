// RoiAlign's attributes, read and checked once for the reference kernel (vision.cc) and the
// oneDNN backend's kernel (kernels/dnnl/roi_align.cc), so both accept exactly the same nodes.
#ifndef DYNVM_KERNELS_REFERENCE_ROI_ALIGN_H_
#define DYNVM_KERNELS_REFERENCE_ROI_ALIGN_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace dynvm::reference {

struct RoiAlignAttrs {
  bool max_mode = false;   // mode "max" (else "avg")
  bool half_pixel = true;  // coordinate_transformation_mode "half_pixel" (else "output_half_pixel")
  int64_t out_h = 1, out_w = 1, sampling_ratio = 0;
  float spatial_scale = 1.0f;
};

// The node's attributes, or InvalidArgument naming the one that is wrong (an unknown mode or
// coordinate transformation, output sizes outside [1, 2^20], a negative sampling_ratio).
absl::StatusOr<RoiAlignAttrs> ReadRoiAlignAttrs(const KernelSpec& spec);

}  // namespace dynvm::reference

#endif  // DYNVM_KERNELS_REFERENCE_ROI_ALIGN_H_
