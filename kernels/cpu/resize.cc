#include "kernels/cpu/resize.h"

#include <cstdint>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu {
namespace {

template <int K>
DYNVM_ALWAYS_INLINE void AccumulateTaps(int64_t n, const double* w, const double* g, double wb,
                                        double wa, double* acc) {
  DYNVM_IVDEP
  for (int64_t o = 0; o < n; ++o) {
    double s = acc[o];
    for (int j = 0; j < K; ++j) {
      const double wt = (w[j * n + o] * wb) * wa;
      const double term = wt * g[j * n + o];
      s += wt != 0 ? term : 0.0;
    }
    acc[o] = s;
  }
}

DYNVM_ALWAYS_INLINE void ResizeAccumulateBody(int64_t n, int k, const double* w, const double* g,
                                              double wb, double wa, double* acc) {
  switch (k) {
    case 1:
      AccumulateTaps<1>(n, w, g, wb, wa, acc);
      return;
    case 2:
      AccumulateTaps<2>(n, w, g, wb, wa, acc);
      return;
    default:
      AccumulateTaps<4>(n, w, g, wb, wa, acc);
      return;
  }
}

#define DYNVM_RESIZE_LEVEL(ATTR, SUFFIX)                                                 \
  ATTR void ResizeAccumulate##SUFFIX(int64_t n, int k, const double* w, const double* g, \
                                     double wb, double wa, double* acc) {                \
    ResizeAccumulateBody(n, k, w, g, wb, wa, acc);                                       \
  }

DYNVM_RESIZE_LEVEL(, Portable)
#if DYNVM_CPU_X86
DYNVM_RESIZE_LEVEL(DYNVM_AVX2_LOOPS, Avx2)
DYNVM_RESIZE_LEVEL(DYNVM_AVX512_LOOPS, Avx512)
#endif
#undef DYNVM_RESIZE_LEVEL

}  // namespace

namespace internal {

void FillResize(Isa isa, Dispatch* d) {
  d->resize_accumulate = &ResizeAccumulatePortable;
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) d->resize_accumulate = &ResizeAccumulateAvx2;
  if (isa >= Isa::kAvx512) d->resize_accumulate = &ResizeAccumulateAvx512;
#endif
}

}  // namespace internal

void ResizeAccumulate(int64_t n, int k, const double* w, const double* g, double wb, double wa,
                      double* acc) {
  internal::Table().resize_accumulate(n, k, w, g, wb, wa, acc);
}

}  // namespace dynvm::cpu
