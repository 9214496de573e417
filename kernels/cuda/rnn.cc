// ONNX LSTM on the device: forward, layout 0, the default activations (sigmoid, tanh, tanh), no
// clip, no peepholes: what PyTorch's nn.LSTM exports and the decode loops run. One cuBLAS GEMM
// computes X * W^T for every time step at once; then each step is one GEMM (H * R^T, added in
// place) and one fused gate kernel (index.cu). Other configurations are declined at load
// (Unimplemented), so the compiler keeps them on the CPU.
#include "kernels/reference/rnn.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/common.h"
#include "kernels/cuda/matmul.h"

namespace dynvm::cuda {
namespace {

absl::Status CheckDims(const Tensor* t, absl::string_view name,
                       std::initializer_list<int64_t> want) {
  if (t == nullptr) return absl::OkStatus();
  if (t->dims() != absl::Span<const int64_t>(want.begin(), want.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("LSTM: ", name, " is ", t->ShapeString(), ", expected ",
                     DimsString(absl::Span<const int64_t>(want.begin(), want.size()))));
  }
  return absl::OkStatus();
}

const Tensor* Port(Inputs in, size_t i) { return i < in.size() ? in[i] : nullptr; }

absl::Status RunLstm(const int64_t& hidden_attr, CudaContext& cc, KernelContext& ctx, Inputs in,
                     Outputs out) {
  const Tensor* x = Port(in, 0);
  const Tensor* w = Port(in, 1);
  const Tensor* r = Port(in, 2);
  const Tensor* b = Port(in, 3);
  const Tensor* seq_lens = Port(in, 4);
  const Tensor* h0 = Port(in, 5);
  const Tensor* c0 = Port(in, 6);
  if (x == nullptr || w == nullptr || r == nullptr) {
    return absl::InvalidArgumentError("LSTM needs X, W and R");
  }
  if (Port(in, 7) != nullptr) {
    return absl::UnimplementedError("LSTM (cuda): peepholes are not supported");
  }
  if (x->rank() != 3 || w->rank() != 3 || r->rank() != 3) {
    return absl::InvalidArgumentError("LSTM: X, W and R must be 3-D");
  }
  const int64_t steps = x->dim(0), batch = x->dim(1), input = x->dim(2);
  const int64_t hidden = hidden_attr > 0 ? hidden_attr : r->dim(2);
  DYNVM_RETURN_IF_ERROR(CheckDims(w, "W", {1, 4 * hidden, input}));
  DYNVM_RETURN_IF_ERROR(CheckDims(r, "R", {1, 4 * hidden, hidden}));
  DYNVM_RETURN_IF_ERROR(CheckDims(b, "B", {1, 8 * hidden}));
  DYNVM_RETURN_IF_ERROR(CheckDims(h0, "initial_h", {1, batch, hidden}));
  DYNVM_RETURN_IF_ERROR(CheckDims(c0, "initial_c", {1, batch, hidden}));
  if (seq_lens != nullptr) {
    DYNVM_ASSIGN_OR_RETURN(Tensor lens, ToHost(cc, *seq_lens));
    if (lens.rank() != 1 || lens.dim(0) != batch || lens.dtype() != DType::kI32) {
      return absl::InvalidArgumentError(
          absl::StrCat("LSTM: sequence_lens must be i32[", batch, "], got ", lens.DebugString()));
    }
    for (int64_t i = 0; i < batch; ++i) {
      if (lens.data<int32_t>()[i * lens.stride(0)] != steps) {
        return absl::UnimplementedError(
            "LSTM (cuda): sequence_lens shorter than the sequence are not supported");
      }
    }
  }
  Tensor* y = out.size() > 0 ? out[0] : nullptr;
  Tensor* y_h = out.size() > 1 ? out[1] : nullptr;
  Tensor* y_c = out.size() > 2 ? out[2] : nullptr;
  const int64_t y_dims[4] = {steps, 1, batch, hidden};
  const int64_t s_dims[3] = {1, batch, hidden};
  if (y != nullptr) {
    DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, y, DType::kF32, y_dims, "LSTM"));
  }
  for (Tensor* t : {y_h, y_c}) {
    if (t == nullptr) continue;
    DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, t, DType::kF32, s_dims, "LSTM"));
  }
  const int64_t state = batch * hidden;
  const int64_t gate_floats = steps * batch * 4 * hidden;
  // Workspace: [gates for every step | h | c], each 256-byte aligned.
  auto align = [](int64_t floats) { return (floats * 4 + 255) / 256 * 256; };
  const int64_t ws_bytes = align(gate_floats) + 2 * align(state);
  DYNVM_ASSIGN_OR_RETURN(
      void* ws, ctx.DeviceWorkspace(static_cast<size_t>(std::max<int64_t>(ws_bytes, 256))));
  auto* base = static_cast<uint8_t*>(ws);
  float* gates = reinterpret_cast<float*>(base);
  float* h = reinterpret_cast<float*>(base + align(gate_floats));
  float* c = reinterpret_cast<float*>(base + align(gate_floats) + align(state));
  const cudaStream_t stream = cc.stream();

  // Initial state (zeros when absent).
  for (auto [src, dst] : {std::pair<const Tensor*, float*>{h0, h}, {c0, c}}) {
    if (state == 0) break;
    if (src == nullptr) {
      DYNVM_RETURN_IF_ERROR(
          LaunchStatus(cudaMemsetAsync(dst, 0, state * 4, stream), "LSTM", "cudaMemsetAsync"));
      continue;
    }
    DYNVM_ASSIGN_OR_RETURN(Tensor view,
                           Tensor::View(Storage::Wrap(Storage::Kind::kExternal, dst, state * 4,
                                                      Device::kCUDA, nullptr),
                                        0, DType::kF32, s_dims));
    DYNVM_RETURN_IF_ERROR(DeviceCopy(cc, *src, view));
  }
  if (state > 0 && steps > 0) {
    StorageRef keep_x, keep_w, keep_r, keep_b;
    DYNVM_ASSIGN_OR_RETURN(const void* px, ContiguousData(cc, *x, &keep_x));
    absl::StatusOr<const void*> pw = ContiguousData(cc, *w, &keep_w);
    if (!pw.ok()) return pw.status();
    absl::StatusOr<const void*> pr = ContiguousData(cc, *r, &keep_r);
    if (!pr.ok()) return pr.status();
    const float* bias = nullptr;
    if (b != nullptr) {
      absl::StatusOr<const void*> pb = ContiguousData(cc, *b, &keep_b);
      if (!pb.ok()) return pb.status();
      bias = static_cast<const float*>(*pb);
    }
    // gates[t*B + b, :] = X[t, b, :] * W^T for every step (W [4H, I] read as W^T [I, 4H]).
    if (input == 0) {
      DYNVM_RETURN_IF_ERROR(LaunchStatus(cudaMemsetAsync(gates, 0, gate_floats * 4, stream), "LSTM",
                                         "cudaMemsetAsync"));
    } else
      DYNVM_RETURN_IF_ERROR(Gemm(cc, {static_cast<const float*>(px), input, 1},
                                 {static_cast<const float*>(*pw), 1, input}, gates, steps * batch,
                                 4 * hidden, input, 1.0f, 0.0f, Walk<3>{}, "LSTM"));
    for (int64_t t = 0; t < steps; ++t) {
      float* g = gates + t * batch * 4 * hidden;
      // g += H * R^T (R [4H, H] read as R^T [H, 4H]).
      DYNVM_RETURN_IF_ERROR(Gemm(cc, {h, hidden, 1}, {static_cast<const float*>(*pr), 1, hidden}, g,
                                 batch, 4 * hidden, hidden, 1.0f, 1.0f, Walk<3>{}, "LSTM"));
      float* y_t = y != nullptr ? y->data<float>() + t * state : nullptr;
      DYNVM_RETURN_IF_ERROR(LaunchStatus(LstmGates(g, bias, c, h, c, y_t, batch, hidden, stream),
                                         "LSTM", "LstmGates"));
    }
  }
  if (state > 0) {
    for (auto [t, src] : {std::pair<Tensor*, float*>{y_h, h}, {y_c, c}}) {
      if (t == nullptr) continue;
      DYNVM_RETURN_IF_ERROR(LaunchStatus(
          cudaMemcpyAsync(t->raw_data(), src, state * 4, cudaMemcpyDeviceToDevice, stream), "LSTM",
          "cudaMemcpyAsync"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterRnnKernels(Registrations& r) {
  Add(r, "LSTM", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() < 3 || spec.inputs.size() > 8 || spec.outputs.size() > 3) {
      return absl::InvalidArgumentError("LSTM takes 3 to 8 inputs and up to 3 outputs");
    }
    for (size_t i : {0, 1, 2, 3, 5, 6}) {
      if (i >= spec.inputs.size()) continue;
      DYNVM_RETURN_IF_ERROR(RequireDType(spec, spec.inputs[i], {DType::kF32}));
    }
    if (spec.inputs.size() > 7) {
      return absl::UnimplementedError("LSTM (cuda): peepholes are not supported");
    }
    DYNVM_ASSIGN_OR_RETURN(reference::RnnAttrs a,
                           reference::ParseRnnAttrs(spec, reference::RnnCell::kLstm));
    const reference::RnnGateConfig& cfg = a.config[0];
    using Kind = reference::RnnActivation::Kind;
    if (a.direction != reference::RnnDirection::kForward || a.layout != 0 ||
        cfg.f.kind != Kind::kSigmoid || cfg.g.kind != Kind::kTanh || cfg.h.kind != Kind::kTanh ||
        std::isfinite(cfg.clip) || cfg.input_forget) {
      return absl::UnimplementedError(
          "LSTM (cuda): only forward, layout 0, default activations, no clip, no input_forget");
    }
    return MakeKernel<int64_t>(KernelName("LSTM", DType::kF32, "cublas"), "LSTM", &RunLstm,
                               a.hidden_size, /*host_inputs=*/0b10000);
  });
}

}  // namespace dynvm::cuda
