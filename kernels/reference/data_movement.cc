#include "kernels/reference/data_movement.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/status_macros.h"

namespace dynvm::reference {
namespace {

// The copy loop over a coalesced view: n >= 1 dims, outermost first.
template <typename T>
void CopyLoop(int n, const int64_t* dims, const T* src, const int64_t* ss, T* dst,
              const int64_t* ds) {
  const int inner = n - 1;
  const int64_t len = dims[inner];
  const int64_t si = ss[inner];
  const int64_t di = ds[inner];
  int64_t idx[kMaxViewRank] = {};
  int64_t so = 0;
  int64_t doff = 0;
  while (true) {
    if (si == 1 && di == 1) {
      std::memmove(dst + doff, src + so, static_cast<size_t>(len) * sizeof(T));
    } else if (si == 0 && di == 1) {
      std::fill_n(dst + doff, len, src[so]);
    } else {
      for (int64_t i = 0; i < len; ++i) dst[doff + i * di] = src[so + i * si];
    }
    int d = inner - 1;
    for (; d >= 0; --d) {
      so += ss[d];
      doff += ds[d];
      if (++idx[d] < dims[d]) break;
      so -= ss[d] * dims[d];
      doff -= ds[d] * dims[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// Elements of a size without a matching integer type (not used by the numeric dtypes).
void CopyLoopBytes(int64_t esize, int n, const int64_t* dims, const uint8_t* src, const int64_t* ss,
                   uint8_t* dst, const int64_t* ds) {
  int64_t idx[kMaxViewRank] = {};
  int64_t so = 0;
  int64_t doff = 0;
  while (true) {
    std::memmove(dst + doff * esize, src + so * esize, static_cast<size_t>(esize));
    int d = n - 1;
    for (; d >= 0; --d) {
      so += ss[d];
      doff += ds[d];
      if (++idx[d] < dims[d]) break;
      so -= ss[d] * dims[d];
      doff -= ds[d] * dims[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace

void CopyStrided(int64_t esize, absl::Span<const int64_t> dims, const void* src,
                 absl::Span<const int64_t> src_strides, void* dst,
                 absl::Span<const int64_t> dst_strides) {
  for (int64_t d : dims) {
    if (d == 0) return;
  }
  // Coalesce, innermost first: drop size-1 dims; fold a dim into the one inside it when both
  // strides continue that dim's run.
  int64_t cd[kMaxViewRank], cs[kMaxViewRank], cds[kMaxViewRank];
  int n = 0;
  for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
    if (dims[i] == 1) continue;
    if (n > 0 && src_strides[i] == cs[n - 1] * cd[n - 1] &&
        dst_strides[i] == cds[n - 1] * cd[n - 1]) {
      cd[n - 1] *= dims[i];
      continue;
    }
    cd[n] = dims[i];
    cs[n] = src_strides[i];
    cds[n] = dst_strides[i];
    ++n;
  }
  if (n == 0) {
    std::memmove(dst, src, static_cast<size_t>(esize));
    return;
  }
  std::reverse(cd, cd + n);
  std::reverse(cs, cs + n);
  std::reverse(cds, cds + n);
  switch (esize) {
    case 1:
      CopyLoop(n, cd, static_cast<const uint8_t*>(src), cs, static_cast<uint8_t*>(dst), cds);
      return;
    case 2:
      CopyLoop(n, cd, static_cast<const uint16_t*>(src), cs, static_cast<uint16_t*>(dst), cds);
      return;
    case 4:
      CopyLoop(n, cd, static_cast<const uint32_t*>(src), cs, static_cast<uint32_t*>(dst), cds);
      return;
    case 8:
      CopyLoop(n, cd, static_cast<const uint64_t*>(src), cs, static_cast<uint64_t*>(dst), cds);
      return;
    default:
      CopyLoopBytes(esize, n, cd, static_cast<const uint8_t*>(src), cs, static_cast<uint8_t*>(dst),
                    cds);
  }
}

void CopyToContiguous(int64_t esize, absl::Span<const int64_t> dims, const void* src,
                      absl::Span<const int64_t> src_strides, void* dst) {
  // An empty view copies nothing; its other dims may be too large for contiguous strides.
  for (int64_t d : dims) {
    if (d == 0) return;
  }
  int64_t dst_strides[kMaxViewRank];
  ContiguousStrides(dims, dst_strides);
  CopyStrided(esize, dims, src, src_strides, dst, absl::MakeConstSpan(dst_strides, dims.size()));
}

void CopyToContiguous(const Tensor& src, void* dst) {
  const int64_t esize = DTypeSize(src.dtype());
  if (src.is_contiguous()) {
    if (src.numel() > 0) {
      std::memmove(dst, src.raw_data(), static_cast<size_t>(src.numel() * esize));
    }
    return;
  }
  CopyToContiguous(esize, src.dims(), src.raw_data(), src.strides(), dst);
}

absl::Status PrepareDataOutput(KernelContext& ctx, Tensor* out, DType dtype,
                               absl::Span<const int64_t> dims, absl::string_view op) {
  if (dims.size() > Tensor::kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": output rank ", dims.size(), " exceeds ", Tensor::kMaxRank));
  }
  int64_t span = 1;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(span, std::max<int64_t>(d, 1), &span)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": output shape ", DimsString(dims), " is negative or too large"));
    }
  }
  return PrepareOutput(ctx, out, dtype, dims, op);
}

absl::Status EmitView(KernelContext& ctx, const Tensor& x, int64_t offset,
                      absl::Span<const int64_t> view_dims, absl::Span<const int64_t> view_strides,
                      absl::Span<const int64_t> out_dims, Tensor* out, absl::string_view op) {
  absl::Status s = PrepareDataOutput(ctx, out, x.dtype(), out_dims, op);
  if (!s.ok()) return s;
  const int64_t esize = DTypeSize(x.dtype());
  const uint8_t* src = static_cast<const uint8_t*>(x.raw_data()) + offset * esize;
  // With more than one thread, a large copy splits its outermost dim over the VM's pool: each
  // thread copies the rows it (or the kernel before, split the same way) made, from its own
  // cache. One thread: one call.
  const int64_t bytes = out->numel() * esize;
  if (ctx.num_threads() > 1 && bytes >= kMinParallelCopyBytes && !view_dims.empty() &&
      view_dims[0] >= 2 && x.dtype() != DType::kString) {
    const int64_t rows = view_dims[0];
    const int64_t row_bytes = bytes / rows;
    int64_t dims[kMaxViewRank];
    std::copy(view_dims.begin(), view_dims.end(), dims);
    ctx.ParallelFor(rows, 1, [&](int64_t r0, int64_t r1) {
      int64_t part[kMaxViewRank];
      std::copy(dims, dims + view_dims.size(), part);
      part[0] = r1 - r0;
      CopyToContiguous(esize, absl::MakeConstSpan(part, view_dims.size()),
                       src + r0 * view_strides[0] * esize, view_strides,
                       static_cast<uint8_t*>(out->raw_data()) + r0 * row_bytes);
    });
    return absl::OkStatus();
  }
  CopyToContiguous(esize, view_dims, src, view_strides, out->raw_data());
  return absl::OkStatus();
}

absl::Status EmitReshaped(KernelContext& ctx, const Tensor& x, absl::Span<const int64_t> out_dims,
                          Tensor* out, absl::string_view op) {
  absl::Status s = PrepareDataOutput(ctx, out, x.dtype(), out_dims, op);
  if (!s.ok()) return s;
  CopyToContiguous(x, out->raw_data());
  return absl::OkStatus();
}

absl::Status CheckPorts(absl::Span<const Tensor* const> in, size_t n_in,
                        absl::Span<Tensor* const> out, size_t n_out, absl::string_view op) {
  if (in.size() < n_in || out.size() < n_out) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": expects ", n_in, " inputs and ", n_out,
                                                   " outputs, got ", in.size(), " and ",
                                                   out.size()));
  }
  for (size_t i = 0; i < n_in; ++i) {
    if (in[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": required input ", i, " is absent"));
    }
  }
  for (size_t i = 0; i < n_out; ++i) {
    if (out[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": required output ", i, " is absent"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSpec(const KernelSpec& spec, size_t min_in, size_t max_in,
                       std::initializer_list<size_t> data_ports) {
  if (spec.inputs.size() < min_in || spec.inputs.size() > max_in) {
    return absl::InvalidArgumentError(absl::StrCat(spec.DebugName(), ": expects ", min_in, "..",
                                                   max_in, " inputs, got ", spec.inputs.size()));
  }
  if (spec.outputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(spec.DebugName(), ": expects an output"));
  }
  for (size_t p : data_ports) {
    if (p < spec.inputs.size() && spec.inputs[p].dtype == static_cast<uint8_t>(DType::kString)) {
      return absl::UnimplementedError(
          absl::StrCat(spec.DebugName(), ": string tensors are not supported"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<int64_t>> ReadIndexTensor(KernelContext& ctx, const Tensor& t,
                                                    absl::string_view op, absl::string_view what) {
  if (t.dtype() != DType::kI64 && t.dtype() != DType::kI32) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", what, " must be i32 or i64, got ", DTypeName(t.dtype())));
  }
  if (t.device() != Device::kCPU) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " must be on the CPU"));
  }
  const size_t n = static_cast<size_t>(t.numel());
  if (n == 0) return absl::Span<int64_t>();
  DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(n * sizeof(int64_t)));
  int64_t* v = static_cast<int64_t*>(ws);
  int64_t* next = v;
  const std::array<absl::Span<const int64_t>, 1> strides = {t.strides()};
  if (t.dtype() == DType::kI64) {
    const int64_t* p = t.data<int64_t>();
    ForEachOffset<1>(t.dims(), strides, [&](int64_t o) { *next++ = p[o]; });
  } else {
    const int32_t* p = t.data<int32_t>();
    ForEachOffset<1>(t.dims(), strides, [&](int64_t o) { *next++ = p[o]; });
  }
  return absl::Span<int64_t>(v, n);
}

absl::StatusOr<absl::Span<const int64_t>> IndexValues(KernelContext& ctx, const Tensor& t,
                                                      absl::string_view op,
                                                      absl::string_view what) {
  if (t.dtype() == DType::kI64 && t.device() == Device::kCPU && t.is_contiguous()) {
    return absl::Span<const int64_t>(t.data<int64_t>(), static_cast<size_t>(t.numel()));
  }
  DYNVM_ASSIGN_OR_RETURN(absl::Span<int64_t> v, ReadIndexTensor(ctx, t, op, what));
  return absl::Span<const int64_t>(v);
}

absl::StatusOr<AxisList> NormalizeAxes(absl::Span<const int64_t> axes, int rank,
                                       absl::string_view op) {
  AxisList out;
  for (int64_t a : axes) {
    DYNVM_ASSIGN_OR_RETURN(int n, NormalizeAxis(a, rank, op));
    if (std::find(out.begin(), out.end(), n) != out.end()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": axis ", a, " is repeated"));
    }
    out.push_back(n);
  }
  return out;
}

absl::StatusOr<int64_t> ReadIntScalar(const Tensor& t, absl::string_view op,
                                      absl::string_view what) {
  if (t.numel() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", what, " must have one element, got ", t.DebugString()));
  }
  if (t.device() != Device::kCPU) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " must be on the CPU"));
  }
  int64_t result = 0;
  absl::Status s = DispatchNumeric(t.dtype(), op, [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    const ScalarValue v = ScalarValue::From(*t.data<T>());
    if (v.kind == ScalarValue::Kind::kFloat) {
      if (!(v.f >= -9.2233720368547758e18 && v.f < 9.2233720368547758e18)) {
        return absl::InvalidArgumentError(
            absl::StrCat(op, ": ", what, " ", v.f, " is not a representable integer"));
      }
      result = static_cast<int64_t>(v.f);
    } else if (v.kind == ScalarValue::Kind::kUnsigned) {
      if (v.u > static_cast<uint64_t>(INT64_MAX)) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " ", v.u, " is too large"));
      }
      result = static_cast<int64_t>(v.u);
    } else {
      result = v.i;
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return result;
}

void AddReferenceKernel(KernelRegistry& r, absl::string_view domain, absl::string_view op,
                        KernelFactory factory) {
  KernelRegistration reg;
  reg.domain = std::string(domain);
  reg.op = std::string(op);
  reg.device = Device::kCPU;
  reg.backend = "reference";
  reg.priority = kReferencePriority;
  reg.factory = std::move(factory);
  r.Register(std::move(reg));
}

}  // namespace dynvm::reference
