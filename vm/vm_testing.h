// Internal: test hooks into a VirtualMachine. Not part of the API and not installed.
#ifndef DYNVM_VM_VM_TESTING_H_
#define DYNVM_VM_VM_TESTING_H_

#include <cstdint>

#include "vm/virtual_machine.h"

namespace dynvm::testing {

// Fault injection: the n-th allocation from `vm`'s pool from now fails (0 disables).
void FailNthAllocation(VirtualMachine& vm, int64_t n);

}  // namespace dynvm::testing

#endif  // DYNVM_VM_VM_TESTING_H_
