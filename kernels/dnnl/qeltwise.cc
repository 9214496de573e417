// com.microsoft::QLinearAdd and dynvm::Requantize on vector loops over the VM's threads
// (kernels/reference/qeltwise.cc has the definitions and the reference kernels). QLinearAdd
// runs cpu::QLinearAdd{U8,I8} (ONNX Runtime's MLAS arithmetic, the reference's bits) on operands
// of one shape; Requantize computes its 256 results with DequantizeLinear's and QuantizeLinear's
// own microkernels (cpu::Dequantize*, cpu::Quantize*; Relu between them), so it gives the
// unfused program's bits, then looks each element up (cpu::LookupBytes: AVX-512 VBMI byte
// permutes where the CPU has them). Both are elementwise over contiguous data, so a channels-last
// tensor (compiler/conv_fusion.h) runs unchanged. Everything else (broadcasts, strided tensors,
// parameters that are not one value, or bad ones, whose errors the reference reports) runs
// the reference kernel.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/quantize.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/quant_common.h"
#include "kernels/quant_params.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::onednn {
namespace {

// Elements per range of the split over the VM's threads (a few microseconds of work).
inline constexpr int64_t kGrain = int64_t{1} << 15;

bool Is8Bit(DType d) { return d == DType::kU8 || d == DType::kI8; }

const Tensor* At(Inputs in, size_t i) { return i < in.size() ? in[i] : nullptr; }

// A usable per-tensor f32 scale.
bool ScaleOk(const Tensor* t) {
  return t != nullptr && t->dtype() == DType::kF32 && t->numel() == 1 &&
         CheckQuantScale(*t, "scale").ok();
}

// A usable per-tensor zero point of type `q`, or none.
bool ZeroPointOk(const Tensor* t, DType q) {
  return t == nullptr || (t->dtype() == q && t->numel() == 1 && CheckZeroPoint(*t, q, "zp").ok());
}

int32_t ZeroPointOf(const Tensor* t) { return static_cast<int32_t>(QuantParamAt(t, 0)); }

class QLinearAddKernel final : public DnnlKernel {
 public:
  using DnnlKernel::DnnlKernel;

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    const Tensor* a = At(in, 0);
    const Tensor* b = At(in, 3);
    if (a == nullptr || b == nullptr || !Is8Bit(a->dtype()) || b->dtype() != a->dtype() ||
        a->dims() != b->dims() || !a->is_contiguous() || !b->is_contiguous() ||
        !ScaleOk(At(in, 1)) || !ScaleOk(At(in, 4)) || !ScaleOk(At(in, 6)) ||
        !ZeroPointOk(At(in, 2), a->dtype()) || !ZeroPointOk(At(in, 5), a->dtype()) ||
        !ZeroPointOk(At(in, 7), a->dtype()) ||
        (out[0]->defined() && out[0]->dtype() != a->dtype())) {
      return RunFallback(ctx, in, out);
    }
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], a->dtype(), a->dims(), "QLinearAdd"));
    if (!out[0]->is_contiguous()) return RunFallback(ctx, in, out);
    float ra, rb, k;
    reference::QLinearAddParams(
        static_cast<float>(QuantParamAt(At(in, 1), 0)), ZeroPointOf(At(in, 2)),
        static_cast<float>(QuantParamAt(At(in, 4), 0)), ZeroPointOf(At(in, 5)),
        static_cast<float>(QuantParamAt(At(in, 6), 0)), ZeroPointOf(At(in, 7)), &ra, &rb, &k);
    const bool u8 = a->dtype() == DType::kU8;
    const auto* pa = static_cast<const char*>(a->raw_data());
    const auto* pb = static_cast<const char*>(b->raw_data());
    auto* pc = static_cast<char*>(out[0]->raw_data());
    ctx.ParallelFor(a->numel(), kGrain, [&](int64_t i0, int64_t i1) {
      if (u8) {
        cpu::QLinearAddU8(i1 - i0, reinterpret_cast<const uint8_t*>(pa) + i0,
                          reinterpret_cast<const uint8_t*>(pb) + i0, ra, rb, k,
                          reinterpret_cast<uint8_t*>(pc) + i0);
      } else {
        cpu::QLinearAddI8(i1 - i0, reinterpret_cast<const int8_t*>(pa) + i0,
                          reinterpret_cast<const int8_t*>(pb) + i0, ra, rb, k,
                          reinterpret_cast<int8_t*>(pc) + i0);
      }
    });
    return absl::OkStatus();
  }
};

class RequantizeKernel final : public DnnlKernel {
 public:
  RequantizeKernel(std::string name, bool relu) : DnnlKernel(std::move(name)), relu_(relu) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    const Tensor* x = At(in, 0);
    const Tensor* yz = At(in, 4);
    if (x == nullptr || yz == nullptr || !Is8Bit(x->dtype()) || !Is8Bit(yz->dtype()) ||
        !x->is_contiguous() || !ScaleOk(At(in, 1)) || !ScaleOk(At(in, 3)) || At(in, 2) == nullptr ||
        !ZeroPointOk(At(in, 2), x->dtype()) || !ZeroPointOk(yz, yz->dtype()) ||
        (out[0]->defined() && out[0]->dtype() != yz->dtype())) {
      return RunFallback(ctx, in, out);
    }
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], yz->dtype(), x->dims(), "Requantize"));
    if (!out[0]->is_contiguous()) return RunFallback(ctx, in, out);
    const float xs = static_cast<float>(QuantParamAt(At(in, 1), 0));
    const float xzf = static_cast<float>(QuantParamAt(At(in, 2), 0));
    const float ys = static_cast<float>(QuantParamAt(At(in, 3), 0));
    const float yzf = static_cast<float>(QuantParamAt(yz, 0));
    // The 256 results, by DequantizeLinear's and QuantizeLinear's own microkernels (the
    // unfused program's arithmetic), indexed by x's byte; then one lookup per element.
    alignas(64) uint8_t bytes[256], table[256];
    alignas(64) float f[256];
    for (int i = 0; i < 256; ++i) bytes[i] = static_cast<uint8_t>(i);
    if (x->dtype() == DType::kU8) {
      cpu::DequantizeU8(256, bytes, xs, xzf, f);
    } else {
      cpu::DequantizeI8(256, reinterpret_cast<const int8_t*>(bytes), xs, xzf, f);
    }
    if (relu_) {
      for (float& v : f) v = std::max(v, 0.0f);
    }
    if (yz->dtype() == DType::kU8) {
      cpu::QuantizeU8(256, f, ys, yzf, table);
    } else {
      cpu::QuantizeI8(256, f, ys, yzf, reinterpret_cast<int8_t*>(table));
    }
    const auto* px = static_cast<const uint8_t*>(x->raw_data());
    auto* py = static_cast<uint8_t*>(out[0]->raw_data());
    ctx.ParallelFor(x->numel(), kGrain, [&](int64_t i0, int64_t i1) {
      cpu::LookupBytes(i1 - i0, px + i0, table, py + i0);
    });
    return absl::OkStatus();
  }

 private:
  bool relu_;
};

}  // namespace

void RegisterQuantEltwiseKernels(KernelRegistry& r) {
  r.Register(
      KernelRegistration{"com.microsoft", "QLinearAdd", Device::kCPU, kBackend, kDnnlPriority,
                         [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                           DYNVM_RETURN_IF_ERROR(CheckArity(spec, 7, 8, 1, 1));
                           return std::make_unique<QLinearAddKernel>(KernelName(spec));
                         }});
  r.Register(
      KernelRegistration{"dynvm", "Requantize", Device::kCPU, kBackend, kDnnlPriority,
                         [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                           DYNVM_RETURN_IF_ERROR(CheckArity(spec, 5, 5, 1, 1));
                           DYNVM_ASSIGN_OR_RETURN(int64_t relu, spec.GetInt("relu", 0));
                           return std::make_unique<RequantizeKernel>(KernelName(spec), relu != 0);
                         }});
}

}  // namespace dynvm::onednn
