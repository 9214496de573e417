// Host-side helpers shared by the CUDA kernels: the context of a call, device checks, output
// preparation, walks over strided operands, contiguous staging, and error conversion. Internal.
#ifndef DYNVM_KERNELS_CUDA_COMMON_H_
#define DYNVM_KERNELS_CUDA_COMMON_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/launch.h"
#include "kernels/kernel.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"

namespace dynvm::cuda {

inline constexpr int kCudaPriority = 10;
inline constexpr const char* kBackend = "cuda";

// The CUDA kernels' registrations, which the module hands to the process's registry
// (allocator/cuda_module.h): the module never calls into the registry itself.
using Registrations = std::vector<KernelRegistration>;

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;

// The VM's CUDA context; FailedPrecondition naming `op` when the call has none.
absl::StatusOr<CudaContext*> GetContext(KernelContext& ctx, absl::string_view op);

// Every present input and every preallocated output is on the CUDA device (FailedPrecondition
// naming the port otherwise), except inputs in `host_inputs` (bit i: input i may be on either
// device: a scalar parameter the kernel reads on the host). Constants reach CUDA kernels as
// device views (the VM swaps them).
absl::Status CheckOnDevice(Inputs in, Outputs out, absl::string_view op, uint32_t host_inputs = 0);

// reference::PrepareOutput on the device: a preallocated output must have exactly `dims` and be
// contiguous; a dynamic one is allocated from the device pool.
absl::Status PrepareOutput(CudaContext& cc, Tensor* out, DType dtype,
                           absl::Span<const int64_t> dims, absl::string_view op);

// The data of `t` as a contiguous device buffer: t's own when it is contiguous, otherwise a
// copy in a pool temporary that `keep` holds.
absl::StatusOr<const void*> ContiguousData(CudaContext& cc, const Tensor& t, StorageRef* keep);

// A walk over `dims` with each operand's strides (a broadcast operand has stride 0 on its
// broadcast dims), with dims merged wherever every operand allows it. Rank at most kMaxDims.
template <int N>
Walk<N> MakeWalk(absl::Span<const int64_t> dims,
                 const std::array<absl::Span<const int64_t>, N>& strides);

// The strides of `t` read as if broadcast to `out_dims` (right-aligned, 0 on broadcast dims).
absl::InlinedVector<int64_t, Tensor::kMaxRank> BroadcastStrides(const Tensor& t,
                                                                absl::Span<const int64_t> out_dims);

// dst := src on the device (any strides, same dims and dtype).
absl::Status DeviceCopy(CudaContext& cc, const Tensor& src, Tensor& dst);

// `t` on the host: itself when it is there, else a copy (a sync point). For the few small
// inputs kernels read on the host: scalar parameters, shapes.
absl::StatusOr<Tensor> ToHost(CudaContext& cc, const Tensor& t);

// The kernel element type for `dtype` (f32, i32, i64, bool); nullopt for the others.
std::optional<ScalarType> ScalarTypeOf(DType dtype);

// OK for cudaSuccess; otherwise an error naming `op` and the failed launch.
absl::Status LaunchStatus(cudaError_t error, absl::string_view op, const char* what);

// "op.dtype.cuda[.variant]".
std::string KernelName(absl::string_view op, DType dtype, absl::string_view variant = "");

// A kernel implemented by a function with typed attributes.
template <typename Attrs>
class CudaKernel final : public Kernel {
 public:
  using RunFn = absl::Status (*)(const Attrs& attrs, CudaContext& cc, KernelContext& ctx, Inputs in,
                                 Outputs out);
  CudaKernel(std::string name, std::string op, RunFn run, Attrs attrs, uint32_t host_inputs)
      : name_(std::move(name)),
        op_(std::move(op)),
        run_(run),
        attrs_(std::move(attrs)),
        host_inputs_(host_inputs) {}
  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    absl::StatusOr<CudaContext*> cc = GetContext(ctx, op_);
    if (!cc.ok()) return cc.status();
    DYNVM_RETURN_IF_ERROR(CheckOnDevice(in, out, op_, host_inputs_));
    return run_(attrs_, **cc, ctx, in, out);
  }
  std::string name() const override { return name_; }
  bool ReadsInputOnHost(int i) const override {
    return i >= 0 && i < 32 && ((host_inputs_ >> i) & 1) != 0;
  }

 private:
  std::string name_;
  std::string op_;
  RunFn run_;
  Attrs attrs_;
  uint32_t host_inputs_;
};

template <typename Attrs>
std::unique_ptr<Kernel> MakeKernel(std::string name, std::string op,
                                   typename CudaKernel<Attrs>::RunFn run, Attrs attrs,
                                   uint32_t host_inputs = 0) {
  return std::make_unique<CudaKernel<Attrs>>(std::move(name), std::move(op), run, std::move(attrs),
                                             host_inputs);
}

// Registers a CUDA kernel for `op` (domain "" unless given).
void Add(Registrations& r, const char* op, KernelFactory factory, const char* domain = "");

// Port helpers for factories: Unimplemented unless the port's dtype is one of `allowed` (an
// absent optional port, of no dtype, passes).
absl::Status RequireDType(const KernelSpec& spec, const PortSpec& port,
                          std::initializer_list<DType> allowed);

// Every CUDA kernel (register.cc).
void RegisterCudaKernels(Registrations& r);
// The CUDA device's availability, memory and status conversion (module.cc).
absl::Status DeviceAvailable();
absl::StatusOr<void*> DeviceMalloc(size_t bytes);  // cudaMalloc
void DeviceFree(void* p);                          // cudaFree, errors dropped

// Family registrations (one per .cc file).
void RegisterMatmulKernels(Registrations& r);       // matmul.cc: MatMul, Gemm
void RegisterElementwiseKernels(Registrations& r);  // elementwise.cc
void RegisterReduceKernels(Registrations& r);       // reduce.cc: Softmax, LayerNorm, ArgMax
void RegisterDataKernels(Registrations& r);         // data.cc: Gather, Concat, Transpose, ...
void RegisterRnnKernels(Registrations& r);          // rnn.cc: LSTM
void RegisterSampleKernels(Registrations& r);       // data.cc: dynvm::Sample

// ---- implementation ----

template <int N>
Walk<N> MakeWalk(absl::Span<const int64_t> dims,
                 const std::array<absl::Span<const int64_t>, N>& strides) {
  Walk<N> w;
  // Drop size-1 dims (their strides never matter), then merge neighbours that are contiguous
  // with each other in every operand.
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    if (w.rank > 0) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k) {
        if (w.strides[k][w.rank - 1] != strides[k][d] * dims[d]) mergeable = false;
      }
      if (mergeable) {
        w.dims[w.rank - 1] *= dims[d];
        for (int k = 0; k < N; ++k) w.strides[k][w.rank - 1] = strides[k][d];
        continue;
      }
    }
    w.dims[w.rank] = dims[d];
    for (int k = 0; k < N; ++k) w.strides[k][w.rank] = strides[k][d];
    ++w.rank;
  }
  return w;
}

}  // namespace dynvm::cuda

#endif  // DYNVM_KERNELS_CUDA_COMMON_H_
