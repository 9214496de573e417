#include "kernels/reference/permute.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dynvm::reference {

absl::StatusOr<Tensor> PermutedView(const Tensor& t, absl::Span<const int64_t> perm,
                                    absl::string_view op, absl::string_view what) {
  if (perm.empty()) return t;
  const int r = t.rank();
  bool ok = static_cast<int>(perm.size()) == r;
  uint32_t seen = 0;  // r <= Tensor::kMaxRank
  int64_t dims[Tensor::kMaxRank], strides[Tensor::kMaxRank];
  for (int i = 0; ok && i < r; ++i) {
    const int64_t p = perm[static_cast<size_t>(i)];
    ok = p >= 0 && p < r && (seen >> p & 1) == 0;
    if (!ok) break;
    seen |= uint32_t{1} << p;
    dims[i] = t.dim(static_cast<int>(p));
    strides[i] = t.stride(static_cast<int>(p));
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " [", absl::StrJoin(perm, ","),
                                                   "] is not a permutation of the ", r, " axes of ",
                                                   t.DebugString()));
  }
  Tensor v = t;
  v.SetView(absl::MakeConstSpan(dims, static_cast<size_t>(r)),
            absl::MakeConstSpan(strides, static_cast<size_t>(r)));
  return v;
}

}  // namespace dynvm::reference
