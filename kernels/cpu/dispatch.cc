#include "kernels/cpu/dispatch.h"

namespace dynvm::cpu::internal {
namespace {

Dispatch Make(Isa isa) {
  Dispatch d{};
  FillRows(isa, &d);
  FillElementwise(isa, &d);
  FillActivation(isa, &d);
  FillGemv(isa, &d);
  FillReduce(isa, &d);
  FillQuantize(isa, &d);
  FillQGemv(isa, &d);
  FillQ4Gemv(isa, &d);
  FillQ4GemvInt8(isa, &d);
  FillIGemm(isa, &d);
  FillU8S8Gemm(isa, &d);
  FillPackedGemm(isa, &d);
  FillDepthwise(isa, &d);
  FillWinograd(isa, &d);
  FillAttention(isa, &d);
  FillGlu(isa, &d);
  FillResize(isa, &d);
  return d;
}

// Filled on first use (a function-local static: no static-initialization order to depend on).
Dispatch& Mutable() {
  static Dispatch d = Make(ActiveIsa());
  return d;
}

}  // namespace

const Dispatch& Table() { return Mutable(); }

void Refill(Isa isa) { Mutable() = Make(isa); }

}  // namespace dynvm::cpu::internal
