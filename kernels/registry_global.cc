// KernelRegistry::Global(), apart from registry.cc so that code which only registers kernels
// (the CUDA module links the registry's types) does not pull in every built-in kernel.
#include "kernels/registry.h"

namespace dynvm {

KernelRegistry& KernelRegistry::Global() {
  static KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    RegisterReferenceKernels(*r);
    RegisterDnnlKernels(*r);
    r->loads_device_modules_ = true;  // the CUDA kernels: on first use (LoadDeviceKernels)
    return r;
  }();
  return *registry;
}

}  // namespace dynvm
