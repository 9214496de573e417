// The argument checks every backend's kernels share: a spec's port counts at create time and
// the presence of a run's operands. Internal to the kernels library.
#ifndef DYNVM_KERNELS_CHECK_H_
#define DYNVM_KERNELS_CHECK_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/kernel.h"
#include "kernels/tensor.h"

namespace dynvm {

// At create time: InvalidArgument naming the op unless `spec` has min_in..max_in inputs and
// min_out..max_out outputs.
absl::Status CheckArity(const KernelSpec& spec, size_t min_in, size_t max_in, size_t min_out,
                        size_t max_out);

// At run time: InvalidArgument naming `op` unless the first n inputs and output 0 are present
// (a kernel whose optional ports may be absent checks the rest itself).
absl::Status CheckPresent(absl::Span<const Tensor* const> in, size_t n,
                          absl::Span<Tensor* const> out, absl::string_view op);

}  // namespace dynvm

#endif  // DYNVM_KERNELS_CHECK_H_
