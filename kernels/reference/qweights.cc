// Reference kernels of dynvm's weight-only quantized ops (domain "dynvm"; made by
// vm-compile --quantize-weights, compiler/quantize_weights.h; docs/kernels.md, "Weight-only
// quantization"). They dequantize the weights to f32 and compute in double (QMatMul) or run the
// f32 reference recurrence (QLSTM, QGRU, QRNN): the oracles of the fast kernels.
//
//   QMatMul(A f32 [..., K], W i8|bf16 [N, K], scale f32 [N] (int8 only)) -> f32 [..., N]
//       y = A * dequant(W)^T, dequant(W)[j, i] = scale[j] * W[j, i] (int8) or W[j, i] (bf16)
//   QLSTM / QGRU / QRNN(the ONNX op's inputs with W, R i8|bf16, padded to 8 inputs,
//       W_scale f32 [dirs, gates*H], R_scale f32 [dirs, gates*H] (int8 only)) -> the ONNX op's
//       outputs; attributes as the ONNX op.
#include "kernels/reference/qweights.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "common/status_macros.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"
#include "kernels/registry.h"

namespace dynvm::reference {

absl::Status CheckQuantizedWeight(const Tensor& w, const Tensor* scale, int rank,
                                  absl::string_view op) {
  if (w.dtype() != DType::kI8 && w.dtype() != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": weights must be i8 or bf16, got ", DTypeName(w.dtype())));
  }
  if (w.rank() != rank || !w.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": weights must be a contiguous ", rank,
                                                   "-D tensor, got ", w.DebugString()));
  }
  const bool i8 = w.dtype() == DType::kI8;
  if (i8 != (scale != nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": int8 weights take a scale and bf16 weights none"));
  }
  if (scale == nullptr) return absl::OkStatus();
  const absl::Span<const int64_t> want = w.dims().first(static_cast<size_t>(rank - 1));
  if (scale->dtype() != DType::kF32 || scale->dims() != want || !scale->is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": the scale must be contiguous f32 with the weights' leading dims, got ",
                     scale->DebugString(), " for weights ", w.DebugString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> DequantizeWeight(const Tensor& w, const Tensor* scale) {
  DYNVM_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(DType::kF32, w.dims()));
  const int64_t cols = w.dim(w.rank() - 1);
  const int64_t n = w.numel();
  float* d = out.data<float>();
  if (w.dtype() == DType::kI8) {
    const int8_t* q = w.data<int8_t>();
    const float* s = scale->data<float>();
    for (int64_t i = 0; i < n; ++i) d[i] = s[i / cols] * static_cast<float>(q[i]);
  } else {
    const BFloat16* b = w.data<BFloat16>();
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(b[i]);
  }
  return out;
}

namespace {

absl::Status RunQMatMul(const void*, KernelContext& ctx, absl::Span<const Tensor* const> in,
                        absl::Span<Tensor* const> out) {
  if (in.size() < 2 || in[0] == nullptr || in[1] == nullptr || out.size() != 1) {
    return absl::InvalidArgumentError("QMatMul takes (A, W, scale?) and has one output");
  }
  const Tensor& a = *in[0];
  const Tensor& w = *in[1];
  const Tensor* scale = in.size() > 2 ? in[2] : nullptr;
  DYNVM_RETURN_IF_ERROR(CheckQuantizedWeight(w, scale, 2, "QMatMul"));
  if (a.dtype() != DType::kF32 || a.rank() < 1 || a.dim(a.rank() - 1) != w.dim(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("QMatMul: A must be f32 [..., ", w.dim(1), "], got ", a.DebugString()));
  }
  const int64_t n = w.dim(0), k = w.dim(1);
  Dims dims(a.dims().begin(), a.dims().end());
  dims.back() = n;
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, dims, "QMatMul"));
  DYNVM_ASSIGN_OR_RETURN(Tensor wf, DequantizeWeight(w, scale));
  const float* pw = wf.data<float>();
  const float* pa = a.data<float>();
  float* py = out[0]->data<float>();
  const absl::Span<const int64_t> rows = a.dims().first(a.rank() - 1);
  const absl::Span<const int64_t> row_strides = a.strides().first(a.rank() - 1);
  const int64_t sk = a.stride(a.rank() - 1);
  ForEachOffset<1>(rows, {row_strides}, [&](int64_t off) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < k; ++i) {
        acc += static_cast<double>(pa[off + i * sk]) * static_cast<double>(pw[j * k + i]);
      }
      py[j] = static_cast<float>(acc);
    }
    py += n;
  });
  return absl::OkStatus();
}

// The f32 reference recurrence over dequantized W and R.
class QRecurrentKernel final : public Kernel {
 public:
  QRecurrentKernel(std::string name, std::string op, std::unique_ptr<Kernel> f32)
      : name_(std::move(name)), op_(std::move(op)), f32_(std::move(f32)) {}
  std::string name() const override { return name_; }

  absl::Status Run(KernelContext& ctx, absl::Span<const Tensor* const> in,
                   absl::Span<Tensor* const> out) const override {
    auto input = [&](size_t i) -> const Tensor* { return i < in.size() ? in[i] : nullptr; };
    if (input(1) == nullptr || input(2) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(op_, ": W and R are required"));
    }
    DYNVM_RETURN_IF_ERROR(CheckQuantizedWeight(*input(1), input(8), 3, op_ + " W"));
    DYNVM_RETURN_IF_ERROR(CheckQuantizedWeight(*input(2), input(9), 3, op_ + " R"));
    DYNVM_ASSIGN_OR_RETURN(Tensor w, DequantizeWeight(*input(1), input(8)));
    DYNVM_ASSIGN_OR_RETURN(Tensor r, DequantizeWeight(*input(2), input(9)));
    std::vector<const Tensor*> args;
    const size_t max_inputs = op_ == "QLSTM" ? 8 : 6;
    for (size_t i = 0; i < std::min(in.size(), max_inputs); ++i) args.push_back(in[i]);
    args[1] = &w;
    args[2] = &r;
    while (!args.empty() && args.back() == nullptr) args.pop_back();
    for (size_t i = max_inputs; i < std::min<size_t>(in.size(), 8); ++i) {
      if (in[i] != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(op_, ": input ", i, " must be absent"));
      }
    }
    return f32_->Run(ctx, args, out);
  }

 private:
  std::string name_;
  std::string op_;
  std::unique_ptr<Kernel> f32_;
};

}  // namespace

KernelSpec F32RecurrentSpec(const KernelSpec& spec) {
  KernelSpec f = spec;
  f.domain = "";
  f.op = spec.op.substr(1);                          // QLSTM -> LSTM
  const size_t max_inputs = f.op == "LSTM" ? 8 : 6;  // scales and padding dropped
  if (f.inputs.size() > max_inputs) f.inputs.resize(max_inputs);
  for (size_t i : {1, 2}) {
    if (i < f.inputs.size()) f.inputs[i].dtype = static_cast<uint8_t>(DType::kF32);
  }
  return f;
}

void RegisterQuantizedWeightKernels(KernelRegistry& r) {
  r.Register({"dynvm", "QMatMul", Device::kCPU, "reference", kReferencePriority,
              [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                if (spec.inputs.size() < 2 || spec.inputs.size() > 3 || spec.outputs.size() != 1) {
                  return absl::InvalidArgumentError(
                      "QMatMul takes (A, W, scale?) and has 1 output");
                }
                return std::make_unique<FunctionKernel>("qmatmul.f32.ref", &RunQMatMul, nullptr);
              }});
  for (const char* op : {"QLSTM", "QGRU", "QRNN"}) {
    r.Register({"dynvm", op, Device::kCPU, "reference", kReferencePriority,
                [op](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                  if (spec.inputs.size() > 10) {
                    return absl::InvalidArgumentError(absl::StrCat(op, " takes at most 10 inputs"));
                  }
                  KernelSpec f = F32RecurrentSpec(spec);
                  f.backend = "reference";
                  DYNVM_ASSIGN_OR_RETURN(
                      std::unique_ptr<Kernel> f32,
                      KernelRegistry::Global().Create(f, BackendPolicy{{"reference"}}));
                  return std::make_unique<QRecurrentKernel>(
                      absl::StrCat(absl::AsciiStrToLower(op), ".f32.ref"), op, std::move(f32));
                }});
  }
}

}  // namespace dynvm::reference
