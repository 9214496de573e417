// A kernel that hands the runs it cannot serve (a layout, an empty dim, a size or a value its
// backend does not handle) to the next backend in the registry's priority chain: when
// KernelRegistry::Create makes a FallbackKernel, it also makes the kernel of the next backend
// the policy allows that accepts the same spec (usually the reference kernel) and gives it to
// this one (docs/kernels.md, "Fallback"). A FallbackKernel's factory may leave attributes it
// never reads to that fallback: when every allowed backend after it refuses the spec, Create
// counts it as refusing too. Internal to the kernels library.
//
// Thread safety: immutable once Create returns (the fallback is set before); Run may be called
// from many threads at once, like any kernel.
#ifndef DYNVM_KERNELS_FALLBACK_KERNEL_H_
#define DYNVM_KERNELS_FALLBACK_KERNEL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/kernel.h"

namespace dynvm {

class KernelRegistry;

class FallbackKernel : public Kernel {
 public:
  explicit FallbackKernel(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }

  // The next allowed backend's kernel for this kernel's spec, or null when the backend policy
  // allowed none after this one (then a run that needs it fails, see RunFallback).
  const Kernel* fallback() const { return fallback_.get(); }
  // Runs (over every VM sharing this kernel) served by the fallback.
  int64_t fallback_runs() const { return fallback_runs_.load(std::memory_order_relaxed); }

 protected:
  // Runs the fallback kernel on this run, at the same invoke site (it may use the site's
  // workspace, not its state: ctx.state() is this kernel's), and counts it. FailedPrecondition
  // naming this kernel when it has no fallback.
  absl::Status RunFallback(KernelContext& ctx, absl::Span<const Tensor* const> in,
                           absl::Span<Tensor* const> out) const;

 private:
  friend class KernelRegistry;  // sets the fallback once, in Create

  std::string name_;
  std::unique_ptr<Kernel> fallback_;
  mutable std::atomic<int64_t> fallback_runs_{0};
};

}  // namespace dynvm

#endif  // DYNVM_KERNELS_FALLBACK_KERNEL_H_
