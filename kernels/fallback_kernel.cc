#include "kernels/fallback_kernel.h"

#include "absl/strings/str_cat.h"

namespace dynvm {

absl::Status FallbackKernel::RunFallback(KernelContext& ctx, absl::Span<const Tensor* const> in,
                                         absl::Span<Tensor* const> out) const {
  if (fallback_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_,
                     ": this run needs the next backend's kernel (a shape, layout or "
                     "value this backend does not serve), and the backend policy allowed "
                     "none after this one"));
  }
  fallback_runs_.fetch_add(1, std::memory_order_relaxed);
  return fallback_->Run(ctx, in, out);
}

}  // namespace dynvm
