#include "kernels/cuda/common.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "allocator/cuda_status.h"
#include "common/status_macros.h"

namespace dynvm::cuda {

absl::StatusOr<CudaContext*> GetContext(KernelContext& ctx, absl::string_view op) {
  DeviceContext* d = ctx.device_context();
  if (d == nullptr || d->device() != Device::kCUDA) {
    return absl::FailedPreconditionError(
        absl::StrCat(op, ": a CUDA kernel ran without a CUDA device context"));
  }
  return static_cast<CudaContext*>(d);
}

absl::Status CheckOnDevice(Inputs in, Outputs out, absl::string_view op, uint32_t host_inputs) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (i < 32 && (host_inputs >> i) & 1) continue;
    if (in[i] != nullptr && in[i]->defined() && in[i]->device() != Device::kCUDA) {
      return absl::FailedPreconditionError(
          absl::StrCat(op, ": input ", i, " is on the ", DeviceName(in[i]->device()),
                       "; a CUDA kernel reads device tensors (copy it to the device first)"));
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] != nullptr && out[i]->defined() && out[i]->device() != Device::kCUDA) {
      return absl::FailedPreconditionError(absl::StrCat(op, ": output ", i, " is on the ",
                                                        DeviceName(out[i]->device()),
                                                        "; a CUDA kernel writes device tensors"));
    }
  }
  return absl::OkStatus();
}

absl::Status PrepareOutput(CudaContext& cc, Tensor* out, DType dtype,
                           absl::Span<const int64_t> dims, absl::string_view op) {
  if (out->defined()) {
    if (out->dtype() != dtype || out->dims() != dims) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": output planned as ", out->DebugString(),
                                                     " but the inputs give ", DTypeName(dtype),
                                                     DimsString(dims)));
    }
    if (!out->is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": output view is not contiguous"));
    }
    return absl::OkStatus();
  }
  DYNVM_ASSIGN_OR_RETURN(Tensor t,
                         Tensor::Allocate(cc.allocator(), dtype, dims, cc.allocator_ref()));
  *out = std::move(t);
  return absl::OkStatus();
}

absl::InlinedVector<int64_t, Tensor::kMaxRank> BroadcastStrides(
    const Tensor& t, absl::Span<const int64_t> out_dims) {
  const size_t rank = out_dims.size();
  const size_t lead = rank - static_cast<size_t>(t.rank());
  absl::InlinedVector<int64_t, Tensor::kMaxRank> s(rank, 0);
  for (size_t i = lead; i < rank; ++i) {
    const int d = static_cast<int>(i - lead);
    s[i] = t.dim(d) == 1 ? 0 : t.stride(d);
  }
  return s;
}

absl::Status DeviceCopy(CudaContext& cc, const Tensor& src, Tensor& dst) {
  if (src.numel() == 0) return absl::OkStatus();
  const Walk<2> walk = MakeWalk<2>(dst.dims(), {dst.strides(), src.strides()});
  return LaunchStatus(StridedCopy(dst.raw_data(), src.raw_data(), DTypeSize(src.dtype()), walk,
                                  src.numel(), cc.stream()),
                      "copy", "StridedCopy");
}

absl::StatusOr<const void*> ContiguousData(CudaContext& cc, const Tensor& t, StorageRef* keep) {
  if (t.is_contiguous()) return static_cast<const void*>(t.raw_data());
  DYNVM_ASSIGN_OR_RETURN(StorageRef st, cc.Temp(static_cast<size_t>(t.nbytes())));
  DYNVM_ASSIGN_OR_RETURN(Tensor packed, Tensor::View(st, 0, t.dtype(), t.dims()));
  DYNVM_RETURN_IF_ERROR(DeviceCopy(cc, t, packed));
  *keep = std::move(st);
  return static_cast<const void*>(keep->get()->data());
}

absl::StatusOr<Tensor> ToHost(CudaContext& cc, const Tensor& t) {
  if (t.device() == Device::kCPU) return t;
  DYNVM_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty(t.dtype(), t.dims()));
  DYNVM_RETURN_IF_ERROR(cc.Copy(t, host));
  return host;
}

std::optional<ScalarType> ScalarTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ScalarType::kF32;
    case DType::kI32:
      return ScalarType::kI32;
    case DType::kI64:
      return ScalarType::kI64;
    case DType::kBool:
      return ScalarType::kBool;
    default:
      return std::nullopt;
  }
}

absl::Status LaunchStatus(cudaError_t error, absl::string_view op, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  const absl::Status s = CudaStatus(error, what);
  return absl::Status(s.code(), absl::StrCat(op, " (cuda): ", s.message()));
}

std::string KernelName(absl::string_view op, DType dtype, absl::string_view variant) {
  std::string name = absl::StrCat(absl::AsciiStrToLower(op), ".", DTypeName(dtype), ".cuda");
  if (!variant.empty()) absl::StrAppend(&name, ".", variant);
  return name;
}

void Add(Registrations& r, const char* op, KernelFactory factory, const char* domain) {
  r.push_back({domain, op, Device::kCUDA, kBackend, kCudaPriority, std::move(factory)});
}

absl::Status RequireDType(const KernelSpec& spec, const PortSpec& port,
                          std::initializer_list<DType> allowed) {
  if (port.optional && port.dtype == kAnyDType) return absl::OkStatus();  // an absent port
  for (DType d : allowed) {
    if (port.dtype == static_cast<uint8_t>(d)) return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat(spec.DebugName(), " (cuda): dtype ",
                   port.dtype == kAnyDType ? std::string("any")
                                           : std::string(DTypeName(static_cast<DType>(port.dtype))),
                   " is not supported"));
}

}  // namespace dynvm::cuda
