#include "kernels/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dynvm {
namespace {

std::string Key(absl::string_view domain, absl::string_view op, Device device) {
  return absl::StrCat(domain, "\x1f", op, "\x1f", static_cast<int>(device));
}

}  // namespace

bool BackendPolicy::Allows(absl::string_view backend) const {
  return allowed.empty() || std::find(allowed.begin(), allowed.end(), backend) != allowed.end();
}

KernelRegistry& KernelRegistry::Global() {
  static KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    RegisterReferenceKernels(*r);
    RegisterDnnlKernels(*r);
    RegisterCudaKernels(*r);
    return r;
  }();
  return *registry;
}

void KernelRegistry::Register(KernelRegistration registration) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& list = by_key_[Key(registration.domain, registration.op, registration.device)];
  list.push_back(std::move(registration));
  std::stable_sort(list.begin(), list.end(),
                   [](const auto& a, const auto& b) { return a.priority > b.priority; });
}

bool KernelRegistry::HasOp(absl::string_view domain, absl::string_view op, Device device) const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_key_.contains(Key(domain, op, device));
}

absl::StatusOr<std::unique_ptr<Kernel>> KernelRegistry::Create(const KernelSpec& spec,
                                                               const BackendPolicy& policy) const {
  std::vector<KernelRegistration> candidates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_key_.find(Key(spec.domain, spec.op, spec.device));
    if (it == by_key_.end()) {
      return absl::NotFoundError(
          absl::StrCat("no kernel for op ", spec.DebugName(), " on ", DeviceName(spec.device)));
    }
    candidates = it->second;
  }
  absl::Status last = absl::UnimplementedError(absl::StrCat(
      "no allowed backend for op ", spec.DebugName(), " on ", DeviceName(spec.device)));
  for (const KernelRegistration& r : candidates) {
    if (!spec.backend.empty() && r.backend != spec.backend) continue;
    if (!policy.Allows(r.backend)) continue;
    absl::StatusOr<std::unique_ptr<Kernel>> k = r.factory(spec);
    if (k.ok()) return k;
    if (!absl::IsUnimplemented(k.status())) return k.status();
    last = k.status();
  }
  return last;
}

#if !defined(DYNVM_WITH_DNNL)
void RegisterDnnlKernels(KernelRegistry&) {}
#endif
#if !defined(DYNVM_WITH_CUDA)
void RegisterCudaKernels(KernelRegistry&) {}
#endif

}  // namespace dynvm
