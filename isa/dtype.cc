#include "isa/dtype.h"

#include "absl/strings/string_view.h"

namespace dynvm {

std::optional<DType> ParseDType(absl::string_view name) {
#define DYNVM_DTYPE_PARSE(e, v, n, s) \
  if (name == n) return DType::e;
  DYNVM_DTYPES(DYNVM_DTYPE_PARSE)
#undef DYNVM_DTYPE_PARSE
  return std::nullopt;
}

}  // namespace dynvm
