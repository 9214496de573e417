// Views of a tensor through a permutation of its axes: how dynvm::MatMul's kernels
// (kernels/reference/matmul.cc, kernels/dnnl/matmul.cc) read a folded Transpose.
#ifndef DYNVM_KERNELS_REFERENCE_PERMUTE_H_
#define DYNVM_KERNELS_REFERENCE_PERMUTE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/tensor.h"

namespace dynvm::reference {

// The view Transpose(t, perm): t's storage with dims and strides permuted (t when perm is
// empty). InvalidArgument naming "<op>: <what>" when perm is not a permutation of t's axes.
absl::StatusOr<Tensor> PermutedView(const Tensor& t, absl::Span<const int64_t> perm,
                                    absl::string_view op, absl::string_view what);

}  // namespace dynvm::reference

#endif  // DYNVM_KERNELS_REFERENCE_PERMUTE_H_
