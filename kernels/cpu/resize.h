// Resize's weighted row sum (kernels/dnnl/resize.cc), at each instruction-set level with the
// reference kernel's arithmetic: every product and sum rounded on its own (this file is compiled
// with -ffp-contract=off, so no level fuses a multiply and an add), in double.
#ifndef DYNVM_KERNELS_CPU_RESIZE_H_
#define DYNVM_KERNELS_CPU_RESIZE_H_

#include <cstdint>

namespace dynvm::cpu {

// acc[o] += t_0 + ... + t_{k-1} (added one by one, in order) for o in [0, n), where
// t_j = (w[j * n + o] * wb) * wa * g[j * n + o] when that weight product is not 0, else +0.0
// (which leaves a sum that started at +0.0 as skipping the term does). k is 1, 2 or 4.
void ResizeAccumulate(int64_t n, int k, const double* w, const double* g, double wb, double wa,
                      double* acc);

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_RESIZE_H_
