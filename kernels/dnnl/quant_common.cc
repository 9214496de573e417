#include "kernels/dnnl/quant_common.h"

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

}  // namespace dynvm::onednn
