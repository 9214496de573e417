// Public API. The kernel registry: (domain, op, device) -> ranked backends, each with a factory.
// dynvm's own kernels (reference, oneDNN, CUDA) and a user's custom kernels register the same
// way; the compiler side of a custom op (its shape function) registers in compiler/op_registry.h.
//
// Thread safety: thread-safe. Registrations made after an executable loaded do not affect it.
#ifndef DYNVM_KERNELS_REGISTRY_H_
#define DYNVM_KERNELS_REGISTRY_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/kernel.h"

namespace dynvm {

// Returns the kernel, or UnimplementedError when this backend does not support the spec (a
// dtype, an attribute value): the registry then tries the next backend. Any other error means
// the spec itself is invalid and loading fails with it.
using KernelFactory = std::function<absl::StatusOr<std::unique_ptr<Kernel>>(const KernelSpec&)>;

struct KernelRegistration {
  std::string domain;  // "" = ONNX default domain
  std::string op;
  Device device = Device::kCPU;
  std::string backend;  // "reference", "dnnl", "cuda", or a user's name
  int priority = 0;     // higher is tried first
  KernelFactory factory;
  // The factory handles string ports (docs/strings.md). A spec with a string port is given only
  // to such factories, so a kernel written for numbers never sees StringRef elements.
  bool takes_strings = false;
};

// Which backends a load may use. Empty = all.
struct BackendPolicy {
  std::vector<std::string> allowed;
  bool Allows(absl::string_view backend) const;
};

class KernelRegistry {
 public:
  // The process-wide registry, holding every built-in kernel of this build.
  static KernelRegistry& Global();

  void Register(KernelRegistration registration);

  // The highest-priority allowed backend whose factory accepts `spec` (a spec naming a backend
  // is given only that one). NotFound when no backend has the op; the last Unimplemented
  // error, naming the op, when none accepts it. A kernel that falls back for runs it cannot
  // serve (kernels/fallback_kernel.h) gets, as its fallback, the kernel of the next backend in
  // priority order that the policy allows and whose factory accepts `spec` (whatever backend
  // the spec names), made the same way; none when the policy allows no backend after it. When
  // every allowed backend after it refuses the spec, it counts as refusing too (it takes only
  // what its fallback takes). A fallback factory's errors other than Unimplemented are
  // Create's.
  absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelSpec& spec,
                                                 const BackendPolicy& policy = {}) const;
  bool HasOp(absl::string_view domain, absl::string_view op, Device device) const;
  // The (domain, op) pairs with a kernel of `backend` (of any backend when empty) for `device`,
  // sorted.
  std::vector<std::pair<std::string, std::string>> Ops(Device device,
                                                       absl::string_view backend = "") const;

  // The global registry holds the CUDA kernels only once the CUDA module is loaded
  // (allocator/cuda_module.h): Create and HasOp for a kCUDA spec load it on first use, and so
  // does this. OK for the CPU, for a registry other than Global() (which loads nothing), and
  // once the module is loaded; the module's error otherwise (Unimplemented in a build without
  // CUDA, Unavailable when the module is missing or unusable), the same on every call. Custom
  // kernels registered for kCUDA work either way.
  absl::Status LoadDeviceKernels(Device device) const;

 private:
  // Sets a FallbackKernel's fallback from `rest` (the registrations after its own).
  static absl::Status AttachFallback(Kernel& kernel, absl::Span<const KernelRegistration> rest,
                                     const KernelSpec& spec, const BackendPolicy& policy);

  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::vector<KernelRegistration>> by_key_ ABSL_GUARDED_BY(mu_);
  bool loads_device_modules_ = false;  // Global() only
  mutable std::once_flag cuda_once_;
  mutable absl::Status cuda_status_;  // written once, under cuda_once_
};

// Registers the built-in CPU kernels of each backend (called once by Global(); the CUDA
// kernels come from the CUDA module, see LoadDeviceKernels).
void RegisterReferenceKernels(KernelRegistry& registry);
void RegisterDnnlKernels(KernelRegistry& registry);  // a no-op without oneDNN

}  // namespace dynvm

#endif  // DYNVM_KERNELS_REGISTRY_H_
