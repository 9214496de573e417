// Feeds arbitrary bytes to ParseNpy. Whatever parses must survive an encode/parse round trip
// unchanged; anything else must be a clean error.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/strings.h"
#include "tools/npy/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<dynvm::Tensor> t = dynvm::npy::ParseNpy(absl::MakeConstSpan(data, size));
  if (!t.ok()) return 0;
  absl::StatusOr<std::string> encoded = dynvm::npy::EncodeNpy(*t);
  if (!encoded.ok()) __builtin_trap();
  absl::StatusOr<dynvm::Tensor> back = dynvm::npy::ParseNpy(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(encoded->data()), encoded->size()));
  if (!back.ok() || back->dtype() != t->dtype() || back->dims() != t->dims() ||
      back->nbytes() != t->nbytes()) {
    __builtin_trap();
  }
  if (t->dtype() == dynvm::DType::kString) {  // elements are pointers: compare the strings
    for (int64_t i = 0; i < t->numel(); ++i) {
      if (dynvm::StringAt(*back, i) != dynvm::StringAt(*t, i)) __builtin_trap();
    }
    return 0;
  }
  if (t->nbytes() > 0 && std::memcmp(back->raw_data(), t->raw_data(), t->nbytes()) != 0) {
    __builtin_trap();
  }
  return 0;
}
