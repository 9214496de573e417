// Moved to common/half.h (the assembler needs the conversions too, below the kernels). This
// forwarding header keeps code written against the old path building; include common/half.h.
#ifndef DYNVM_KERNELS_HALF_H_
#define DYNVM_KERNELS_HALF_H_

#include "common/half.h"

#endif  // DYNVM_KERNELS_HALF_H_
