// Moved to common/types.h (the allocator needs Device, below the ISA). This forwarding header
// keeps code written against the old path building; include common/types.h.
#ifndef DYNVM_ISA_DEVICE_H_
#define DYNVM_ISA_DEVICE_H_

#include "common/types.h"

#endif  // DYNVM_ISA_DEVICE_H_
