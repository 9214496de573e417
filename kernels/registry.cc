#include "kernels/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "allocator/cuda_module.h"
#include "common/status_macros.h"
#include "kernels/fallback_kernel.h"

namespace dynvm {
namespace {

std::string Key(absl::string_view domain, absl::string_view op, Device device) {
  return absl::StrCat(domain, "\x1f", op, "\x1f", static_cast<int>(device));
}

bool HasStrings(const KernelSpec& spec) {
  for (const auto* ports : {&spec.inputs, &spec.outputs}) {
    for (const PortSpec& p : *ports) {
      if (p.dtype == static_cast<uint8_t>(DType::kString)) return true;
    }
  }
  return false;
}

}  // namespace

absl::Status KernelRegistry::AttachFallback(Kernel& kernel,
                                            absl::Span<const KernelRegistration> rest,
                                            const KernelSpec& spec, const BackendPolicy& policy) {
  auto* fallback_kernel = dynamic_cast<FallbackKernel*>(&kernel);
  if (fallback_kernel == nullptr) return absl::OkStatus();
  const bool has_strings = HasStrings(spec);
  absl::Status refused;  // the last Unimplemented of an allowed backend
  for (size_t i = 0; i < rest.size(); ++i) {
    const KernelRegistration& r = rest[i];
    // Any allowed backend after this one, whatever backend the spec names: a spec naming one
    // picks the kernel that serves it, not the one that serves what that kernel cannot.
    if ((has_strings && !r.takes_strings) || !policy.Allows(r.backend)) continue;
    absl::StatusOr<std::unique_ptr<Kernel>> k = r.factory(spec);
    if (!k.ok()) {
      if (!absl::IsUnimplemented(k.status())) return k.status();  // the spec is invalid
      refused = k.status();
      continue;
    }
    absl::Status attached = AttachFallback(**k, rest.subspan(i + 1), spec, policy);
    if (absl::IsUnimplemented(attached)) {
      refused = attached;
      continue;
    }
    DYNVM_RETURN_IF_ERROR(attached);
    fallback_kernel->fallback_ = *std::move(k);
    return absl::OkStatus();
  }
  // Every allowed backend after this one refused the spec: this kernel takes only what they
  // take (its factory may leave attributes it never reads to them), so it refuses too. None
  // allowed: no fallback, and a run that needs one fails (RunFallback).
  return refused;
}

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
  const bool has_strings = HasStrings(spec);
  if (has_strings) {
    last = absl::UnimplementedError(
        absl::StrCat("op ", spec.DebugName(), " does not take string tensors"));
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    const KernelRegistration& r = candidates[i];
    if (!spec.backend.empty() && r.backend != spec.backend) continue;
    if (has_strings && !r.takes_strings) continue;
    if (!policy.Allows(r.backend)) continue;
    absl::StatusOr<std::unique_ptr<Kernel>> k = r.factory(spec);
    if (k.ok()) {
      absl::Status attached =
          AttachFallback(**k, absl::MakeConstSpan(candidates).subspan(i + 1), spec, policy);
      if (attached.ok()) return k;
      if (!absl::IsUnimplemented(attached)) return attached;
      k = attached;  // the backends after it refuse the spec: so does it
    }
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
