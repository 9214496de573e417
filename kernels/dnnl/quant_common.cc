#include "kernels/dnnl/quant_common.h"

#include <algorithm>
#include <cmath>

#include "kernels/dnnl/clones.h"
#include "oneapi/dnnl/dnnl.h"

namespace dynvm::onednn {

bool Is8Bit(DType d) { return d == DType::kU8 || d == DType::kI8; }

double QuantParamAt(const Tensor* t, int64_t i) {
  if (t == nullptr) return 0;
  const int64_t k = t->numel() == 1 ? 0 : i;
  switch (t->dtype()) {
    case DType::kF32:
      return t->data<float>()[k];
    case DType::kU8:
      return t->data<uint8_t>()[k];
    case DType::kI8:
      return t->data<int8_t>()[k];
    default:
      return 0;
  }
}

bool HasInt8Vnni() {
  static const bool vnni = [] {
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core_vnni) == dnnl_cpu_isa_avx512_core_vnni ||
           (isa & dnnl_cpu_isa_avx2_vnni) == dnnl_cpu_isa_avx2_vnni;
  }();
  return vnni;
}

namespace {

// Cloned loops are internal (clones.h).
DYNVM_CLONES void RequantizeU8Loop(int64_t n, const int32_t* acc, double add, double s, double z,
                                   uint8_t* y) {
  for (int64_t j = 0; j < n; ++j) {
    const double r = std::nearbyint((static_cast<double>(acc[j]) + add) * s) + z;
    y[j] = static_cast<uint8_t>(std::max(0.0, std::min(255.0, r)));
  }
}

DYNVM_CLONES void RequantizeI8Loop(int64_t n, const int32_t* acc, double add, double s, double z,
                                   int8_t* y) {
  for (int64_t j = 0; j < n; ++j) {
    const double r = std::nearbyint((static_cast<double>(acc[j]) + add) * s) + z;
    y[j] = static_cast<int8_t>(std::max(-128.0, std::min(127.0, r)));
  }
}

}  // namespace

void RequantizeU8Uniform(int64_t n, const int32_t* acc, double add, double s, double z,
                         uint8_t* y) {
  RequantizeU8Loop(n, acc, add, s, z, y);
}

void RequantizeI8Uniform(int64_t n, const int32_t* acc, double add, double s, double z, int8_t* y) {
  RequantizeI8Loop(n, acc, add, s, z, y);
}

}  // namespace dynvm::onednn
