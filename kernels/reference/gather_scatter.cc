// Reference kernels that read or write tensors at indices taken from tensor data: Gather,
// GatherElements, GatherND, ScatterND, ScatterElements (and its opset-9 name Scatter), OneHot,
// NonZero. Every index read from data is checked before it is used.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/status_macros.h"
#include "kernels/reference/data_movement.h"

namespace dynvm::reference {
namespace {

using InSpan = absl::Span<const Tensor* const>;
using OutSpan = absl::Span<Tensor* const>;

uint8_t* ElementPtr(const Tensor& t, int64_t offset) {
  return static_cast<uint8_t*>(t.raw_data()) + offset * DTypeSize(t.dtype());
}

// Reads index tensor `t` and maps each value into [0, dim).
absl::StatusOr<absl::Span<int64_t>> ReadCheckedIndices(KernelContext& ctx, const Tensor& t,
                                                       int64_t dim, absl::string_view op) {
  DYNVM_ASSIGN_OR_RETURN(absl::Span<int64_t> idx, ReadIndexTensor(ctx, t, op, "indices"));
  for (int64_t& i : idx) {
    DYNVM_ASSIGN_OR_RETURN(int64_t c, CheckIndex(i, dim, op));
    i = c;
  }
  return idx;
}

// ---- Gather ----

// Gather from contiguous x (not strings): out is [outer, n, inner] for outer = the dims before
// `ax`, n = the indices and inner = the dims after it; each (o, j) is one contiguous row of
// inner elements, x[o, idx[j], :], copied whole. Any rank, axis and index shape take this path
// (an embedding lookup is outer = 1). Rows are read where the indices say, so the row a few
// ahead is prefetched while one is copied: a lookup into a table that is not in cache waits on
// memory latency otherwise. With more than one thread and at least kMinParallelCopyBytes of
// output, the rows split over the VM's pool; each writes its own part of the output.
void GatherRows(KernelContext& ctx, const Tensor& x, int ax, absl::Span<const int64_t> idx,
                Tensor* out) {
  const int64_t n = static_cast<int64_t>(idx.size());
  const int64_t dim = x.dim(ax);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < ax; ++d) outer *= x.dim(d);
  for (int d = ax + 1; d < x.rank(); ++d) inner *= x.dim(d);
  const size_t row_bytes = static_cast<size_t>(inner * DTypeSize(x.dtype()));
  const uint8_t* src = static_cast<const uint8_t*>(x.raw_data());
  uint8_t* dst = static_cast<uint8_t*>(out->raw_data());
  const int64_t rows = outer * n;
  if (rows == 0 || row_bytes == 0) return;
  auto src_row = [&](int64_t r) {
    return src + (r / n * dim + idx[r % n]) * static_cast<int64_t>(row_bytes);
  };
  constexpr int64_t kAhead = 4;
  constexpr size_t kLine = 64;
  auto copy = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (r + kAhead < r1) {
        const uint8_t* next = src_row(r + kAhead);
        for (size_t b = 0; b < row_bytes; b += kLine) __builtin_prefetch(next + b);
      }
      std::memcpy(dst + r * static_cast<int64_t>(row_bytes), src_row(r), row_bytes);
    }
  };
  if (ctx.num_threads() > 1 && rows >= 2 &&
      rows * static_cast<int64_t>(row_bytes) >= kMinParallelCopyBytes) {
    ctx.ParallelFor(rows, 1, copy);
  } else {
    copy(0, rows);
  }
}

struct AxisAttrs {
  int64_t axis = 0;
};

absl::Status RunGather(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 2, out, 1, "Gather");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  const Tensor& ind = *in[1];
  DYNVM_ASSIGN_OR_RETURN(int ax,
                         NormalizeAxis(static_cast<const AxisAttrs*>(a)->axis, x.rank(), "Gather"));
  const int rank = x.rank();
  if (rank - 1 + ind.rank() > Tensor::kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat("Gather: output rank of ", x.DebugString(),
                                                   " and indices ", ind.DebugString(), " exceeds ",
                                                   Tensor::kMaxRank));
  }
  DYNVM_ASSIGN_OR_RETURN(absl::Span<int64_t> idx,
                         ReadCheckedIndices(ctx, ind, x.dim(ax), "Gather"));
  Dims dims(x.dims().begin(), x.dims().begin() + ax);
  dims.insert(dims.end(), ind.dims().begin(), ind.dims().end());
  dims.insert(dims.end(), x.dims().begin() + ax + 1, x.dims().end());
  s = PrepareDataOutput(ctx, out[0], x.dtype(), dims, "Gather");
  if (!s.ok()) return s;
  const int64_t n = static_cast<int64_t>(idx.size());
  const int64_t esize = DTypeSize(x.dtype());
  if (x.is_contiguous() && x.dtype() != DType::kString) {
    GatherRows(ctx, x, ax, idx, out[0]);
    return absl::OkStatus();
  }
  // A strided view: out[o..., j, i...] = x[o..., idx[j], i...], per index j the block of x
  // minus the axis, copied by CopyStrided.
  int64_t out_strides[Tensor::kMaxRank];
  ContiguousStrides(dims, out_strides);
  Dims block_dims, src_strides, dst_strides;
  for (int d = 0; d < rank; ++d) {
    if (d == ax) continue;
    block_dims.push_back(x.dim(d));
    src_strides.push_back(x.stride(d));
    dst_strides.push_back(out_strides[d < ax ? d : d - 1 + ind.rank()]);
  }
  int64_t inner = 1;
  for (int d = ax + 1; d < rank; ++d) inner *= x.dim(d);
  auto copy = [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      CopyStrided(esize, block_dims, ElementPtr(x, idx[j] * x.stride(ax)), src_strides,
                  ElementPtr(*out[0], j * inner), dst_strides);
    }
  };
  if (ctx.num_threads() > 1 && n >= 2 && x.dtype() != DType::kString &&
      out[0]->numel() * esize >= kMinParallelCopyBytes) {
    ctx.ParallelFor(n, 1, copy);
  } else {
    copy(0, n);
  }
  return absl::OkStatus();
}

// ---- GatherElements ----

absl::Status RunGatherElements(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 2, out, 1, "GatherElements");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  const Tensor& ind = *in[1];
  DYNVM_ASSIGN_OR_RETURN(
      int ax, NormalizeAxis(static_cast<const AxisAttrs*>(a)->axis, x.rank(), "GatherElements"));
  bool fits = ind.rank() == x.rank();
  for (int d = 0; fits && d < x.rank(); ++d) fits = d == ax || ind.dim(d) <= x.dim(d);
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat("GatherElements: indices ", ind.DebugString(),
                                                   " do not fit data ", x.DebugString(),
                                                   " on axis ", ax));
  }
  DYNVM_ASSIGN_OR_RETURN(absl::Span<int64_t> idx,
                         ReadCheckedIndices(ctx, ind, x.dim(ax), "GatherElements"));
  s = PrepareDataOutput(ctx, out[0], x.dtype(), ind.dims(), "GatherElements");
  if (!s.ok()) return s;
  // The data offset of each output position with the axis coordinate left out.
  Dims base_strides(x.strides().begin(), x.strides().end());
  base_strides[ax] = 0;
  const std::array<absl::Span<const int64_t>, 1> strides = {base_strides};
  const int64_t axis_stride = x.stride(ax);
  return DispatchBySize(x.dtype(), "GatherElements", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* src = x.data<T>();
    T* dst = out[0]->data<T>();
    const int64_t* i = idx.data();
    ForEachOffset<1>(ind.dims(), strides,
                     [&](int64_t base) { *dst++ = src[base + *i++ * axis_stride]; });
    return absl::OkStatus();
  });
}

// ---- GatherND ----

struct GatherNDAttrs {
  int64_t batch_dims = 0;
};

absl::Status RunGatherND(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 2, out, 1, "GatherND");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  const Tensor& ind = *in[1];
  const int64_t b = static_cast<const GatherNDAttrs*>(a)->batch_dims;
  const int r = x.rank();
  const int q = ind.rank();
  const int64_t m = q >= 1 ? ind.dim(q - 1) : 0;
  bool valid = r >= 1 && q >= 1 && b < std::min(q, r) && m >= 1 && m <= r - b;
  for (int d = 0; valid && d < b; ++d) valid = ind.dim(d) == x.dim(d);
  if (!valid) {
    return absl::InvalidArgumentError(absl::StrCat("GatherND: indices ", ind.DebugString(),
                                                   " do not fit data ", x.DebugString(),
                                                   " with batch_dims ", b));
  }
  if (q - 1 + r - b - m > Tensor::kMaxRank) {
    return absl::InvalidArgumentError("GatherND: output rank is too large");
  }
  DYNVM_ASSIGN_OR_RETURN(absl::Span<const int64_t> idx,
                         IndexValues(ctx, ind, "GatherND", "indices"));
  const int slab_start = static_cast<int>(b + m);
  Dims dims(ind.dims().begin(), ind.dims().end() - 1);
  dims.insert(dims.end(), x.dims().begin() + slab_start, x.dims().end());
  s = PrepareDataOutput(ctx, out[0], x.dtype(), dims, "GatherND");
  if (!s.ok()) return s;
  const absl::Span<const int64_t> slab_dims = x.dims().subspan(slab_start);
  const absl::Span<const int64_t> slab_strides = x.strides().subspan(slab_start);
  int64_t slab_size = 1;
  for (int64_t d : slab_dims) slab_size *= d;
  int64_t per_batch = 1;  // index tuples per batch
  for (int d = static_cast<int>(b); d < q - 1; ++d) per_batch *= ind.dim(d);
  const int64_t tuples = static_cast<int64_t>(idx.size()) / m;
  const int64_t esize = DTypeSize(x.dtype());
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t offset = 0;
    int64_t batch = t / per_batch;
    for (int d = static_cast<int>(b) - 1; d >= 0; --d) {
      offset += (batch % x.dim(d)) * x.stride(d);
      batch /= x.dim(d);
    }
    for (int64_t k = 0; k < m; ++k) {
      const int d = static_cast<int>(b + k);
      DYNVM_ASSIGN_OR_RETURN(int64_t i, CheckIndex((idx)[t * m + k], x.dim(d), "GatherND"));
      offset += i * x.stride(d);
    }
    CopyToContiguous(esize, slab_dims, ElementPtr(x, offset), slab_strides,
                     ElementPtr(*out[0], t * slab_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateGatherND(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, 2, 2);
  if (!s.ok()) return s;
  DYNVM_ASSIGN_OR_RETURN(int64_t b, spec.GetInt("batch_dims", 0));
  if (b < 0) return absl::InvalidArgumentError("GatherND: batch_dims is negative");
  return MakeKernel(spec, RunGatherND, GatherNDAttrs{b});
}

// ---- Scatter reductions ----

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

absl::StatusOr<Reduction> ReadReduction(const KernelSpec& spec) {
  DYNVM_ASSIGN_OR_RETURN(std::string r, spec.GetString("reduction", "none"));
  if (r == "none") return Reduction::kNone;
  if (r == "add") return Reduction::kAdd;
  if (r == "mul") return Reduction::kMul;
  if (r == "max") return Reduction::kMax;
  if (r == "min") return Reduction::kMin;
  return absl::InvalidArgumentError(absl::StrCat(spec.op, ": unknown reduction '", r, "'"));
}

// a (the output) combined with b (an update). Integers wrap around; float max/min propagate NaN.
template <typename T>
T Combine(Reduction r, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return (r == Reduction::kAdd || r == Reduction::kMax) ? (a || b) : (a && b);
  } else if constexpr (std::is_integral_v<T>) {
    switch (r) {
      case Reduction::kAdd:
        return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
      case Reduction::kMul:
        return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
      case Reduction::kMax:
        return std::max(a, b);
      case Reduction::kMin:
        return std::min(a, b);
      case Reduction::kNone:
        return b;
    }
    return b;
  } else {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const C x = static_cast<C>(a);
    const C y = static_cast<C>(b);
    C z = y;
    switch (r) {
      case Reduction::kAdd:
        z = x + y;
        break;
      case Reduction::kMul:
        z = x * y;
        break;
      case Reduction::kMax:
        z = std::isnan(x) || std::isnan(y) ? x + y : std::max(x, y);
        break;
      case Reduction::kMin:
        z = std::isnan(x) || std::isnan(y) ? x + y : std::min(x, y);
        break;
      case Reduction::kNone:
        break;
    }
    return T(z);
  }
}

struct ScatterAttrs {
  int64_t axis = 0;
  Reduction reduction = Reduction::kNone;
};

// ---- ScatterND ----

absl::Status RunScatterND(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  const auto& attrs = *static_cast<const ScatterAttrs*>(a);
  absl::Status s = CheckPorts(in, 3, out, 1, "ScatterND");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  const Tensor& ind = *in[1];
  const Tensor& upd = *in[2];
  const int r = x.rank();
  const int q = ind.rank();
  const int64_t m = q >= 1 ? ind.dim(q - 1) : 0;
  // updates must be indices.shape[:-1] ++ data.shape[m:].
  bool valid = r >= 1 && q >= 1 && m >= 1 && m <= r && upd.dtype() == x.dtype() &&
               upd.rank() == q - 1 + r - m;
  for (int d = 0; valid && d < q - 1; ++d) valid = upd.dim(d) == ind.dim(d);
  for (int d = static_cast<int>(m); valid && d < r; ++d) valid = upd.dim(q - 1 + d - m) == x.dim(d);
  if (!valid) {
    return absl::InvalidArgumentError(absl::StrCat("ScatterND: data ", x.DebugString(),
                                                   ", indices ", ind.DebugString(), " and updates ",
                                                   upd.DebugString(), " do not fit"));
  }
  DYNVM_ASSIGN_OR_RETURN(absl::Span<const int64_t> idx,
                         IndexValues(ctx, ind, "ScatterND", "indices"));
  s = EmitReshaped(ctx, x, x.dims(), out[0], "ScatterND");
  if (!s.ok()) return s;
  int64_t out_strides[Tensor::kMaxRank];
  ContiguousStrides(x.dims(), out_strides);
  const absl::Span<const int64_t> slab_dims = x.dims().subspan(m);
  const absl::Span<const int64_t> slab_out_strides(out_strides + m, slab_dims.size());
  const absl::Span<const int64_t> slab_upd_strides = upd.strides().subspan(q - 1);
  const int64_t tuples = static_cast<int64_t>(idx.size()) / m;
  const int64_t esize = DTypeSize(x.dtype());
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t dst = 0;
    for (int64_t k = 0; k < m; ++k) {
      DYNVM_ASSIGN_OR_RETURN(int64_t i,
                             CheckIndex((idx)[t * m + k], x.dim(static_cast<int>(k)), "ScatterND"));
      dst += i * out_strides[k];
    }
    int64_t src = 0;  // the update slab of tuple t
    int64_t rest = t;
    for (int d = q - 2; d >= 0; --d) {
      src += (rest % upd.dim(d)) * upd.stride(d);
      rest /= upd.dim(d);
    }
    if (attrs.reduction == Reduction::kNone) {
      CopyStrided(esize, slab_dims, ElementPtr(upd, src), slab_upd_strides,
                  ElementPtr(*out[0], dst), slab_out_strides);
      continue;
    }
    s = DispatchNumeric(x.dtype(), "ScatterND", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      const T* u = upd.data<T>() + src;
      T* o = out[0]->data<T>() + dst;
      const std::array<absl::Span<const int64_t>, 2> strides = {slab_upd_strides, slab_out_strides};
      ForEachOffset<2>(slab_dims, strides, [&](int64_t uo, int64_t oo) {
        o[oo] = Combine(attrs.reduction, o[oo], u[uo]);
      });
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// ---- ScatterElements ----

absl::Status RunScatterElements(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  const auto& attrs = *static_cast<const ScatterAttrs*>(a);
  absl::Status s = CheckPorts(in, 3, out, 1, "ScatterElements");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  const Tensor& ind = *in[1];
  const Tensor& upd = *in[2];
  DYNVM_ASSIGN_OR_RETURN(int ax, NormalizeAxis(attrs.axis, x.rank(), "ScatterElements"));
  bool valid = ind.rank() == x.rank() && upd.dims() == ind.dims() && upd.dtype() == x.dtype();
  for (int d = 0; valid && d < x.rank(); ++d) valid = d == ax || ind.dim(d) <= x.dim(d);
  if (!valid) {
    return absl::InvalidArgumentError(absl::StrCat("ScatterElements: data ", x.DebugString(),
                                                   ", indices ", ind.DebugString(), " and updates ",
                                                   upd.DebugString(), " do not fit on axis ", ax));
  }
  DYNVM_ASSIGN_OR_RETURN(absl::Span<int64_t> idx,
                         ReadCheckedIndices(ctx, ind, x.dim(ax), "ScatterElements"));
  s = EmitReshaped(ctx, x, x.dims(), out[0], "ScatterElements");
  if (!s.ok()) return s;
  int64_t out_strides[Tensor::kMaxRank];
  ContiguousStrides(x.dims(), out_strides);
  const int64_t axis_stride = out_strides[ax];
  out_strides[ax] = 0;
  const std::array<absl::Span<const int64_t>, 2> strides = {
      upd.strides(), absl::MakeConstSpan(out_strides, static_cast<size_t>(x.rank()))};
  auto scatter = [&](auto* tag, auto combine) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* u = upd.data<T>();
    T* o = out[0]->data<T>();
    const int64_t* i = idx.data();
    ForEachOffset<2>(ind.dims(), strides, [&](int64_t uo, int64_t base) {
      T& dst = o[base + *i++ * axis_stride];
      dst = combine(dst, u[uo]);
    });
    return absl::OkStatus();
  };
  if (attrs.reduction == Reduction::kNone) {
    return DispatchBySize(x.dtype(), "ScatterElements", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      return scatter(tag, [](T, T u) { return u; });
    });
  }
  return DispatchNumeric(x.dtype(), "ScatterElements", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const Reduction r = attrs.reduction;
    return scatter(tag, [r](T o, T u) { return Combine(r, o, u); });
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateScatter(const KernelSpec& spec,
                                                      FunctionKernel::RunFn run) {
  absl::Status s = CheckSpec(spec, 3, 3, {0, 2});
  if (!s.ok()) return s;
  ScatterAttrs attrs;
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", 0));
  attrs.axis = axis;
  DYNVM_ASSIGN_OR_RETURN(Reduction r, ReadReduction(spec));
  attrs.reduction = r;
  if (attrs.reduction != Reduction::kNone &&
      spec.inputs[0].dtype == static_cast<uint8_t>(DType::kBool)) {
    return absl::UnimplementedError(absl::StrCat(spec.op, ": no reduction on bool"));
  }
  return MakeKernel(spec, run, attrs);
}

// ---- OneHot ----

absl::Status RunOneHot(const void* a, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 3, out, 1, "OneHot");
  if (!s.ok()) return s;
  const Tensor& ind = *in[0];
  const Tensor& values = *in[2];
  DYNVM_ASSIGN_OR_RETURN(int64_t depth, ReadIntScalar(*in[1], "OneHot", "depth"));
  if (depth < 0) {
    return absl::InvalidArgumentError(absl::StrCat("OneHot: depth ", depth, " is negative"));
  }
  if (values.numel() != 2 || values.rank() > 1 || values.device() != Device::kCPU) {
    return absl::InvalidArgumentError(
        absl::StrCat("OneHot: values must be [off_value, on_value], got ", values.DebugString()));
  }
  const int out_rank = ind.rank() + 1;
  if (out_rank > Tensor::kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("OneHot: output rank ", out_rank, " exceeds ", Tensor::kMaxRank));
  }
  DYNVM_ASSIGN_OR_RETURN(int ax,
                         NormalizeAxis(static_cast<const AxisAttrs*>(a)->axis, out_rank, "OneHot"));
  Dims dims(ind.dims().begin(), ind.dims().end());
  dims.insert(dims.begin() + ax, depth);
  s = PrepareDataOutput(ctx, out[0], values.dtype(), dims, "OneHot");
  if (!s.ok()) return s;
  // The class index of each input position, or -1 when it is outside [-depth, depth).
  std::vector<int64_t> cls;
  cls.reserve(static_cast<size_t>(ind.numel()));
  const std::array<absl::Span<const int64_t>, 1> ind_strides = {ind.strides()};
  s = DispatchNumeric(ind.dtype(), "OneHot", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* p = ind.data<T>();
    ForEachOffset<1>(ind.dims(), ind_strides, [&](int64_t o) {
      const ScalarValue v = ScalarValue::From(p[o]);
      int64_t c = -1;
      if (v.kind == ScalarValue::Kind::kSigned) {
        c = v.i;
      } else if (v.kind == ScalarValue::Kind::kUnsigned) {
        c = v.u < static_cast<uint64_t>(depth) ? static_cast<int64_t>(v.u) : -1;
      } else if (v.f > -9.2e18 && v.f < 9.2e18) {  // false for NaN
        c = static_cast<int64_t>(v.f);
      } else {
        c = std::numeric_limits<int64_t>::min();
      }
      if (c < 0 && c >= -depth) c += depth;
      cls.push_back(c >= 0 && c < depth ? c : -1);
    });
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  int64_t inner = 1;  // input elements per step of the inserted axis
  for (int d = ax; d < ind.rank(); ++d) inner *= ind.dim(d);
  const int64_t value_stride = values.rank() == 1 ? values.stride(0) : 0;
  return DispatchBySize(values.dtype(), "OneHot", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T off = values.data<T>()[0];
    const T on = values.data<T>()[value_stride];
    T* o = out[0]->data<T>();
    std::fill_n(o, out[0]->numel(), off);
    for (size_t p = 0; p < cls.size(); ++p) {
      if (cls[p] < 0) continue;
      const int64_t outer = static_cast<int64_t>(p) / inner;
      const int64_t in_pos = static_cast<int64_t>(p) % inner;
      o[(outer * depth + cls[p]) * inner + in_pos] = on;
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateOneHot(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, 3, 3, {0, 1, 2});
  if (!s.ok()) return s;
  if (spec.inputs[0].dtype == static_cast<uint8_t>(DType::kBool) ||
      spec.inputs[1].dtype == static_cast<uint8_t>(DType::kBool)) {
    return absl::UnimplementedError("OneHot: bool indices or depth are not supported");
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", -1));
  return MakeKernel(spec, RunOneHot, AxisAttrs{axis});
}

// ---- NonZero ----

template <typename T>
bool IsNonZero(const T* p) {
  if constexpr (std::is_same_v<T, bool>) {
    return *reinterpret_cast<const uint8_t*>(p) != 0;  // any nonzero byte, without a bool load
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(*p) != 0.0f;
  } else {
    return *p != T{0};
  }
}

absl::Status RunNonZero(const void*, KernelContext& ctx, InSpan in, OutSpan out) {
  absl::Status s = CheckPorts(in, 1, out, 1, "NonZero");
  if (!s.ok()) return s;
  const Tensor& x = *in[0];
  const std::array<absl::Span<const int64_t>, 1> strides = {x.strides()};
  return DispatchNumeric(x.dtype(), "NonZero", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* p = x.data<T>();
    int64_t count = 0;
    ForEachOffset<1>(x.dims(), strides, [&](int64_t o) { count += IsNonZero(p + o) ? 1 : 0; });
    // A scalar reads as a 1-element vector, as in onnxruntime and numpy.
    const int rank = std::max(x.rank(), 1);
    const int64_t dims[2] = {rank, count};
    absl::Status st = PrepareDataOutput(ctx, out[0], DType::kI64, dims, "NonZero");
    if (!st.ok()) return st;
    int64_t* o = out[0]->data<int64_t>();
    int64_t coord[Tensor::kMaxRank] = {};
    int64_t k = 0;
    ForEachOffset<1>(x.dims(), strides, [&](int64_t off) {
      if (IsNonZero(p + off)) {
        for (int d = 0; d < x.rank(); ++d) o[d * count + k] = coord[d];
        if (x.rank() == 0) o[k] = 0;
        ++k;
      }
      for (int d = x.rank() - 1; d >= 0; --d) {  // next row-major coordinate
        if (++coord[d] < x.dim(d)) break;
        coord[d] = 0;
      }
    });
    return absl::OkStatus();
  });
}

template <FunctionKernel::RunFn kRun>
absl::StatusOr<std::unique_ptr<Kernel>> CreateWithAxis(const KernelSpec& spec) {
  absl::Status s = CheckSpec(spec, 2, 2);
  if (!s.ok()) return s;
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", 0));
  return MakeKernel(spec, kRun, AxisAttrs{axis});
}

}  // namespace

void RegisterGatherScatterKernels(KernelRegistry& r) {
  AddReferenceKernel(r, "", "Gather", CreateWithAxis<RunGather>);
  AddReferenceKernel(r, "", "GatherElements", CreateWithAxis<RunGatherElements>);
  AddReferenceKernel(r, "", "GatherND", CreateGatherND);
  AddReferenceKernel(r, "", "ScatterND",
                     [](const KernelSpec& spec) { return CreateScatter(spec, RunScatterND); });
  AddReferenceKernel(r, "", "ScatterElements", [](const KernelSpec& spec) {
    return CreateScatter(spec, RunScatterElements);
  });
  AddReferenceKernel(r, "", "Scatter", [](const KernelSpec& spec) {
    return CreateScatter(spec, RunScatterElements);
  });
  AddReferenceKernel(r, "", "OneHot", CreateOneHot);
  AddReferenceKernel(r, "", "NonZero",
                     [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                       absl::Status s = CheckSpec(spec, 1, 1);
                       if (!s.ok()) return s;
                       return MakeKernel(spec, RunNonZero, AxisAttrs{});  // no attributes
                     });
}

}  // namespace dynvm::reference
