#include "kernels/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "allocator/cuda_module.h"

namespace dynvm {
namespace {

std::string Key(absl::string_view domain, absl::string_view op, Device device) {
  return absl::StrCat(domain, "\x1f", op, "\x1f", static_cast<int>(device));
}

}  // namespace

bool BackendPolicy::Allows(absl::string_view backend) const {
  return allowed.empty() || std::find(allowed.begin(), allowed.end(), backend) != allowed.end();
}

void KernelRegistry::Register(KernelRegistration registration) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& list = by_key_[Key(registration.domain, registration.op, registration.device)];
  // Highest priority first; among equals, in registration order (after the others).
  const auto at = std::upper_bound(
      list.begin(), list.end(), registration.priority,
      [](int priority, const KernelRegistration& r) { return priority > r.priority; });
  list.insert(at, std::move(registration));
}

absl::Status KernelRegistry::LoadDeviceKernels(Device device) const {
  if (!loads_device_modules_ || device != Device::kCUDA) return absl::OkStatus();
  std::call_once(cuda_once_, [this] {
    absl::StatusOr<const CudaModule*> module = LoadCudaModule();
    if (!module.ok()) {
      cuda_status_ = module.status();
      return;
    }
    std::vector<KernelRegistration> registrations;
    (*module)->api->kernel_registrations(&registrations);
    // Loading completes the registry (it holds every kernel of this build): not a change a
    // caller made, so it is done on behalf of const lookups.
    auto* self = const_cast<KernelRegistry*>(this);
    for (KernelRegistration& r : registrations) self->Register(std::move(r));
  });
  return cuda_status_;
}

bool KernelRegistry::HasOp(absl::string_view domain, absl::string_view op, Device device) const {
  LoadDeviceKernels(device).IgnoreError();  // a failed load leaves only custom kernels
  std::lock_guard<std::mutex> lock(mu_);
  return by_key_.contains(Key(domain, op, device));
}

std::vector<std::pair<std::string, std::string>> KernelRegistry::Ops(
    Device device, absl::string_view backend) const {
  LoadDeviceKernels(device).IgnoreError();
  std::vector<std::pair<std::string, std::string>> ops;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, list] : by_key_) {
    for (const KernelRegistration& r : list) {
      if (r.device != device || (!backend.empty() && r.backend != backend)) continue;
      ops.emplace_back(r.domain, r.op);
      break;
    }
  }
  std::sort(ops.begin(), ops.end());
  return ops;
}

absl::StatusOr<std::unique_ptr<Kernel>> KernelRegistry::Create(const KernelSpec& spec,
                                                               const BackendPolicy& policy) const {
  const absl::Status loaded = LoadDeviceKernels(spec.device);
  std::vector<KernelRegistration> candidates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_key_.find(Key(spec.domain, spec.op, spec.device));
    if (it == by_key_.end()) {
      const std::string what =
          absl::StrCat("no kernel for op ", spec.DebugName(), " on ", DeviceName(spec.device));
      if (!loaded.ok())
        return absl::Status(loaded.code(), absl::StrCat(what, ": ", loaded.message()));
      return absl::NotFoundError(what);
    }
    candidates = it->second;
  }
  absl::Status last = absl::UnimplementedError(absl::StrCat(
      "no allowed backend for op ", spec.DebugName(), " on ", DeviceName(spec.device)));
  bool has_strings = false;
  for (const auto* ports : {&spec.inputs, &spec.outputs}) {
    for (const PortSpec& p : *ports) has_strings |= p.dtype == static_cast<uint8_t>(DType::kString);
  }
  if (has_strings) {
    last = absl::UnimplementedError(
        absl::StrCat("op ", spec.DebugName(), " does not take string tensors"));
  }
  for (const KernelRegistration& r : candidates) {
    if (!spec.backend.empty() && r.backend != spec.backend) continue;
    if (has_strings && !r.takes_strings) continue;
    if (!policy.Allows(r.backend)) continue;
    absl::StatusOr<std::unique_ptr<Kernel>> k = r.factory(spec);
    if (k.ok()) return k;
    if (!absl::IsUnimplemented(k.status())) return k.status();
    // A string kernel refusing a spec without strings keeps the numeric kernel's reason.
    if (has_strings || !r.takes_strings) last = k.status();
  }
  return last;
}

#if !defined(DYNVM_WITH_DNNL)
void RegisterDnnlKernels(KernelRegistry&) {}
#endif

}  // namespace dynvm
