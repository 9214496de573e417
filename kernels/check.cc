#include "kernels/check.h"

#include "absl/strings/str_cat.h"

namespace dynvm {

absl::Status CheckArity(const KernelSpec& spec, size_t min_in, size_t max_in, size_t min_out,
                        size_t max_out) {
  if (spec.inputs.size() < min_in || spec.inputs.size() > max_in || spec.outputs.size() < min_out ||
      spec.outputs.size() > max_out) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.op, ": expected ", min_in, "..", max_in, " inputs and ", min_out, "..",
                     max_out, " outputs, got ", spec.inputs.size(), " and ", spec.outputs.size()));
  }
  return absl::OkStatus();
}

absl::Status CheckPresent(absl::Span<const Tensor* const> in, size_t n,
                          absl::Span<Tensor* const> out, absl::string_view op) {
  for (size_t i = 0; i < n; ++i) {
    if (i >= in.size() || in[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": input ", i, " is missing"));
    }
  }
  if (out.empty() || out[0] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": output 0 is missing"));
  }
  return absl::OkStatus();
}

}  // namespace dynvm
