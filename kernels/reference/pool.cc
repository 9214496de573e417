// Reference kernels for pooling: MaxPool (with its optional Indices output), AveragePool,
// GlobalMaxPool and GlobalAveragePool, LpPool and GlobalLpPool, over any number of spatial dims.
//
// Input [N, C, D1..Dk]. Per spatial dim: kernel k, stride s, dilation d, pads (begin, end)
// or auto_pad. Output size: NOTSET: (D + pb + pe - ((k-1)*d + 1)) / s + 1, rounded down, or up
// with ceil_mode (a window that would start in the end padding is dropped); VALID: no pads;
// SAME_UPPER / SAME_LOWER: ceil(D / s), the padding split evenly, the odd one at the end
// (UPPER) or the beginning (LOWER). MaxPool takes the maximum of the window's elements inside
// the input (NaN is larger than every number); its Indices are flat row-major indices into the
// input (storage_order 1: the spatial dims column-major). AveragePool divides the sum by the
// number of elements inside the input, or with count_include_pad by the number inside the
// padded input. LpPool: (sum of |x|^p over the window's elements inside the input)^(1/p). Sums
// accumulate in double.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;

enum class PoolKind : uint8_t { kMax, kAverage, kLp };

struct PoolAttrs {
  std::string op;
  PoolKind kind = PoolKind::kMax;
  bool global = false;
  std::vector<int64_t> kernel, strides, pads, dilations;
  std::string auto_pad = "NOTSET";
  bool ceil_mode = false;
  bool count_include_pad = false;
  bool column_major = false;  // storage_order of the Indices
  double p = 2;               // LpPool's norm
  // The input / output hold the channels-last layout under their logical dims (set by the
  // compiler's layout pass between convolutions, compiler/conv_fusion.h).
  bool channels_last_in = false, channels_last_out = false;
};

// Strides that read a contiguous channels-last [N, C, S...] buffer as [N, C, S...].
std::vector<int64_t> ChannelsLastStrides(absl::Span<const int64_t> dims) {
  const int k = static_cast<int>(dims.size()) - 2;
  std::vector<int64_t> st(dims.size());
  int64_t s = dims[1];
  for (int i = k - 1; i >= 0; --i) {
    st[i + 2] = s;
    s *= dims[i + 2];
  }
  st[1] = 1;
  st[0] = s;
  return st;
}

struct Geometry {
  std::vector<int64_t> in, out, kernel, stride, dilation, pad_begin, pad_end;
};

absl::StatusOr<Geometry> Plan(const PoolAttrs& a, const Tensor& x) {
  const int k = x.rank() - 2;
  Geometry g;
  for (int i = 0; i < k; ++i) g.in.push_back(x.dim(i + 2));
  if (a.global) {
    g.kernel = g.in;
  } else {
    g.kernel = a.kernel;
  }
  if (static_cast<int>(g.kernel.size()) != k) {
    return absl::InvalidArgumentError(absl::StrCat(a.op, ": kernel_shape has ", g.kernel.size(),
                                                   " dims for an input of rank ", x.rank()));
  }
  auto per_dim = [&](const std::vector<int64_t>& v,
                     const char* name) -> absl::StatusOr<std::vector<int64_t>> {
    if (v.empty()) return std::vector<int64_t>(k, 1);
    if (static_cast<int>(v.size()) != k) {
      return absl::InvalidArgumentError(
          absl::StrCat(a.op, ": ", name, " has ", v.size(), " values for ", k, " spatial dims"));
    }
    for (int64_t e : v) {
      if (e < 1)
        return absl::InvalidArgumentError(absl::StrCat(a.op, ": ", name, " must be positive"));
    }
    return v;
  };
  absl::StatusOr<std::vector<int64_t>> s =
      per_dim(a.global ? std::vector<int64_t>{} : a.strides, "strides");
  if (!s.ok()) return s.status();
  g.stride = *s;
  absl::StatusOr<std::vector<int64_t>> d =
      per_dim(a.global ? std::vector<int64_t>{} : a.dilations, "dilations");
  if (!d.ok()) return d.status();
  g.dilation = *d;
  for (int64_t e : g.kernel) {
    if (e < 1)
      return absl::InvalidArgumentError(absl::StrCat(a.op, ": kernel_shape must be positive"));
  }
  g.pad_begin.assign(k, 0);
  g.pad_end.assign(k, 0);
  if (!a.global && a.auto_pad == "NOTSET" && !a.pads.empty()) {
    if (static_cast<int>(a.pads.size()) != 2 * k) {
      return absl::InvalidArgumentError(
          absl::StrCat(a.op, ": pads has ", a.pads.size(), " values for ", k, " spatial dims"));
    }
    for (int i = 0; i < k; ++i) {
      g.pad_begin[i] = a.pads[i];
      g.pad_end[i] = a.pads[k + i];
      if (g.pad_begin[i] < 0 || g.pad_end[i] < 0)
        return absl::InvalidArgumentError(absl::StrCat(a.op, ": negative pads"));
    }
  }
  for (int i = 0; i < k; ++i) {
    const int64_t span = (g.kernel[i] - 1) * g.dilation[i] + 1;
    int64_t o;
    if (!a.global && (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER")) {
      o = (g.in[i] + g.stride[i] - 1) / g.stride[i];
      const int64_t total = std::max<int64_t>(0, (o - 1) * g.stride[i] + span - g.in[i]);
      g.pad_begin[i] = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.pad_end[i] = total - g.pad_begin[i];
    } else {
      const int64_t room = g.in[i] + g.pad_begin[i] + g.pad_end[i] - span;
      if (room < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(a.op, ": the window (", span, ") is larger than the padded input (",
                         g.in[i] + g.pad_begin[i] + g.pad_end[i], ")"));
      }
      o = (a.ceil_mode ? (room + g.stride[i] - 1) / g.stride[i] : room / g.stride[i]) + 1;
      // A window must start inside the input or its begin padding.
      if (a.ceil_mode && (o - 1) * g.stride[i] >= g.in[i] + g.pad_begin[i]) --o;
    }
    g.out.push_back(o);
  }
  return g;
}

template <typename T>
double AsDouble(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(v);
  } else {
    return static_cast<double>(v);
  }
}

absl::Status RunPoolPlain(const PoolAttrs& a, KernelContext& ctx, const Tensor& x, Outputs out);

absl::Status RunPool(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const PoolAttrs*>(attrs);
  if (in.empty() || in[0] == nullptr || out.empty() || out[0] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(a.op, ": missing input or output"));
  }
  const Tensor* x = in[0];
  Tensor view;
  if (a.channels_last_in) {
    if (x->rank() < 3 || !x->is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(a.op,
                                                     ": a channels-last input must be "
                                                     "[N, C, D1, ...] and contiguous"));
    }
    const std::vector<int64_t> st = ChannelsLastStrides(x->dims());
    DYNVM_ASSIGN_OR_RETURN(Tensor v,
                           Tensor::View(x->storage(), x->byte_offset(), x->dtype(), x->dims(), st));
    view = std::move(v);
    x = &view;
  }
  DYNVM_RETURN_IF_ERROR(RunPoolPlain(a, ctx, *x, out));
  if (a.channels_last_out) {
    Tensor& y = *out[0];
    if (y.dtype() != DType::kF32)
      return absl::UnimplementedError(absl::StrCat(a.op, ": channels-last output is f32 only"));
    const std::vector<float> plain(y.data<float>(), y.data<float>() + y.numel());
    const std::vector<int64_t> st = ChannelsLastStrides(y.dims());
    const int64_t c = y.dim(1), sp = y.numel() / std::max<int64_t>(1, y.dim(0) * c);
    for (int64_t i = 0; i < y.numel(); ++i) {
      const int64_t n = i / (c * sp), ch = (i / sp) % c, s = i % sp;
      y.data<float>()[n * st[0] + ch + s * c] = plain[i];
    }
  }
  return absl::OkStatus();
}

absl::Status RunPoolPlain(const PoolAttrs& a, KernelContext& ctx, const Tensor& x, Outputs out) {
  if (x.rank() < 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(a.op, ": input must be [N, C, D1, ...], got ", x.DebugString()));
  }
  DYNVM_ASSIGN_OR_RETURN(Geometry g, Plan(a, x));
  const int k = x.rank() - 2;
  std::vector<int64_t> out_dims = {x.dim(0), x.dim(1)};
  out_dims.insert(out_dims.end(), g.out.begin(), g.out.end());
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), out_dims, a.op));
  Tensor* indices = out.size() > 1 ? out[1] : nullptr;
  if (indices != nullptr) {
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, indices, DType::kI64, out_dims, a.op));
  }
  const int64_t planes = x.dim(0) * x.dim(1);
  int64_t in_plane = 1, out_plane = 1;
  for (int i = 0; i < k; ++i) {
    in_plane *= g.in[i];
    out_plane *= g.out[i];
  }
  std::vector<int64_t> in_strides(k);  // element strides of x's spatial dims
  for (int i = 0; i < k; ++i) in_strides[i] = x.stride(i + 2);
  int64_t window = 1;
  for (int i = 0; i < k; ++i) window *= g.kernel[i];
  return DispatchNumeric(x.dtype(), a.op, [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    constexpr bool kFloat =
        std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
    if constexpr (std::is_same_v<T, bool>) {
      return absl::UnimplementedError(absl::StrCat(a.op, ": dtype bool not supported"));
    } else {
      if (a.kind != PoolKind::kMax && !kFloat) {
        return absl::UnimplementedError(
            absl::StrCat(a.op, ": dtype ", DTypeName(x.dtype()), " not supported"));
      }
      const T* px = x.data<T>();
      T* py = out[0]->data<T>();
      int64_t* pi = indices != nullptr ? indices->data<int64_t>() : nullptr;
      std::vector<int64_t> o(k), w(k), pos(k);
      for (int64_t p = 0; p < planes; ++p) {
        const int64_t n = p / x.dim(1), c = p % x.dim(1);
        const int64_t base = n * x.stride(0) + c * x.stride(1);
        for (int64_t oi = 0; oi < out_plane; ++oi) {
          for (int64_t r = oi, i = k - 1; i >= 0; --i) {
            o[i] = r % g.out[i];
            r /= g.out[i];
          }
          bool found = false;
          T best{};
          int64_t best_index = 0;
          double sum = 0;
          int64_t inside = 0, padded = 0;
          for (int64_t wi = 0; wi < window; ++wi) {
            for (int64_t r = wi, i = k - 1; i >= 0; --i) {
              w[i] = r % g.kernel[i];
              r /= g.kernel[i];
            }
            bool in_input = true, in_padded = true;
            int64_t offset = base;
            for (int i = 0; i < k; ++i) {
              pos[i] = o[i] * g.stride[i] - g.pad_begin[i] + w[i] * g.dilation[i];
              if (pos[i] < 0 || pos[i] >= g.in[i]) in_input = false;
              if (pos[i] < -g.pad_begin[i] || pos[i] >= g.in[i] + g.pad_end[i]) in_padded = false;
              offset += pos[i] * in_strides[i];
            }
            if (in_padded) ++padded;
            if (!in_input) continue;
            ++inside;
            const T v = px[offset];
            if (a.kind != PoolKind::kMax) {
              sum += a.kind == PoolKind::kLp ? std::pow(std::abs(AsDouble(v)), a.p) : AsDouble(v);
              continue;
            }
            const double dv = AsDouble(v), db = AsDouble(best);
            if (!found || (std::isnan(dv) && !std::isnan(db)) || dv > db) {
              found = true;
              best = v;
              int64_t flat = 0;
              if (a.column_major) {
                for (int i = k - 1; i >= 0; --i) flat = flat * g.in[i] + pos[i];
              } else {
                for (int i = 0; i < k; ++i) flat = flat * g.in[i] + pos[i];
              }
              best_index = p * in_plane + flat;
            }
          }
          if (a.kind != PoolKind::kMax) {
            const int64_t count = a.count_include_pad ? padded : inside;
            const double v = a.kind == PoolKind::kLp ? std::pow(sum, 1 / a.p)
                             : count > 0             ? sum / static_cast<double>(count)
                                                     : std::numeric_limits<double>::quiet_NaN();
            if constexpr (std::is_same_v<T, double>) {
              py[p * out_plane + oi] = v;
            } else if constexpr (kFloat) {
              py[p * out_plane + oi] = static_cast<T>(static_cast<float>(v));
            }
          } else {
            py[p * out_plane + oi] = found ? best : T{};
            if (pi != nullptr) pi[p * out_plane + oi] = best_index;
          }
        }
      }
      return absl::OkStatus();
    }
  });
}

void AddPool(KernelRegistry& r, const char* op, PoolKind kind, bool global) {
  r.Register(KernelRegistration{
      "", op, Device::kCPU, "reference", kReferencePriority,
      [op, kind, global](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        const size_t max_out = kind == PoolKind::kMax && !global ? 2 : 1;
        if (spec.inputs.size() != 1 || spec.outputs.empty() || spec.outputs.size() > max_out) {
          return absl::InvalidArgumentError(
              absl::StrCat(op, ": expected 1 input and 1..", max_out, " outputs"));
        }
        const uint8_t dt = spec.inputs[0].dtype;
        if (dt != kAnyDType &&
            (static_cast<DType>(dt) == DType::kBool || static_cast<DType>(dt) == DType::kString ||
             (kind != PoolKind::kMax && !IsFloat(static_cast<DType>(dt))))) {
          return absl::UnimplementedError(
              absl::StrCat(op, ": dtype ", DTypeName(static_cast<DType>(dt)), " not supported"));
        }
        PoolAttrs a;
        a.op = op;
        a.kind = kind;
        if (kind == PoolKind::kLp) {
          DYNVM_ASSIGN_OR_RETURN(int64_t p, spec.GetInt("p", 2));
          if (p < 1) return absl::InvalidArgumentError(absl::StrCat(op, ": p must be positive"));
          a.p = static_cast<double>(p);
        }
        a.global = global;
        for (auto [name, field] :
             {std::pair<const char*, bool*>{"channels_last_in", &a.channels_last_in},
              {"channels_last_out", &a.channels_last_out}}) {
          DYNVM_ASSIGN_OR_RETURN(int64_t e, spec.GetInt(name, 0));
          *field = e != 0;
        }
        if (!global) {
          DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> v, spec.GetInts("kernel_shape"));
          if (v.empty())
            return absl::InvalidArgumentError(absl::StrCat(op, ": kernel_shape is required"));
          a.kernel = v;
          for (auto [name, field] :
               {std::pair<const char*, std::vector<int64_t>*>{"strides", &a.strides},
                {"pads", &a.pads},
                {"dilations", &a.dilations}}) {
            DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> e, spec.GetInts(name));
            *field = e;
          }
          DYNVM_ASSIGN_OR_RETURN(std::string ap, spec.GetString("auto_pad", "NOTSET"));
          a.auto_pad = ap.empty() ? "NOTSET" : ap;
          if (a.auto_pad != "NOTSET" && a.auto_pad != "VALID" && a.auto_pad != "SAME_UPPER" &&
              a.auto_pad != "SAME_LOWER") {
            return absl::InvalidArgumentError(
                absl::StrCat(op, ": unknown auto_pad '", a.auto_pad, "'"));
          }
          for (auto [name, field] : {std::pair<const char*, bool*>{"ceil_mode", &a.ceil_mode},
                                     {"count_include_pad", &a.count_include_pad},
                                     {"storage_order", &a.column_major}}) {
            absl::StatusOr<int64_t> e = spec.GetInt(name, 0);
            if (!e.ok()) return e.status();
            if (*e != 0 && *e != 1)
              return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " must be 0 or 1"));
            *field = *e == 1;
          }
        }
        return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), &RunPool,
                                                std::make_shared<const PoolAttrs>(std::move(a)));
      }});
}

}  // namespace

void RegisterPoolKernels(KernelRegistry& r) {
  AddPool(r, "MaxPool", PoolKind::kMax, /*global=*/false);
  AddPool(r, "AveragePool", PoolKind::kAverage, /*global=*/false);
  AddPool(r, "GlobalMaxPool", PoolKind::kMax, /*global=*/true);
  AddPool(r, "GlobalAveragePool", PoolKind::kAverage, /*global=*/true);
  AddPool(r, "LpPool", PoolKind::kLp, /*global=*/false);
  AddPool(r, "GlobalLpPool", PoolKind::kLp, /*global=*/true);
}

}  // namespace dynvm::reference
