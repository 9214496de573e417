// Reference kernels for reductions and normalizations: ReduceSum/Mean/Max/Min/Prod/L1/L2/
// LogSum/LogSumExp/SumSquare, ArgMax/ArgMin, TopK, Softmax/LogSoftmax/Hardmax,
// LayerNormalization and CumSum.
//
// Floating-point reductions accumulate in double and round once at the end; integer sums and
// products wrap in 64 bits. Orderings (ArgMax, ArgMin, TopK, Hardmax) use a total order in
// which NaN is larger than every number and equal to itself; ties go to the lower index unless
// select_last_index asks otherwise.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <typename T>
inline constexpr bool kIsFloat = kIsHalf<T> || std::is_floating_point_v<T>;
// The type values are compared in (float for f16/bf16).
template <typename T>
using Compute = std::conditional_t<kIsHalf<T>, float, T>;

// Dispatches numeric dtypes (no bool); with kFloatOnly, floating-point dtypes only.
template <bool kFloatOnly, typename Fn>
absl::Status Dispatch(DType dtype, absl::string_view op, Fn&& fn) {
  return DispatchNumeric(dtype, op, [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (std::is_same_v<T, bool> || (kFloatOnly && !kIsFloat<T>)) {
      return absl::UnimplementedError(
          absl::StrCat(op, ": dtype ", DTypeName(dtype), " not supported"));
    } else {
      return fn(tag);
    }
  });
}

// Create-time dtype check of a concrete port.
absl::Status CheckDType(const KernelSpec& spec, const PortSpec& port, bool float_only) {
  if (port.dtype == kAnyDType) return absl::OkStatus();
  const DType d = static_cast<DType>(port.dtype);
  if (d == DType::kBool || d == DType::kString || !IsValidDType(port.dtype) ||
      (float_only && !IsFloat(d))) {
    return absl::UnimplementedError(absl::StrCat(
        spec.op, ": dtype ", IsValidDType(port.dtype) ? DTypeName(d) : "?", " not supported"));
  }
  return absl::OkStatus();
}

// Strict "a < b" in the total order where NaN is above every number (and equal to NaN).
template <typename C>
bool TotalLess(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

// Which axes of a tensor an op reduces (no heap allocation).
using AxisMask = absl::InlinedVector<bool, Tensor::kMaxRank>;

// The entries of `v` at positions where mask[i] == want.
Dims Select(absl::Span<const int64_t> v, const AxisMask& mask, bool want) {
  Dims r;
  for (size_t i = 0; i < v.size(); ++i) {
    if (mask[i] == want) r.push_back(v[i]);
  }
  return r;
}

Dims ContiguousOf(absl::Span<const int64_t> dims) {
  Dims s(dims.size());
  ContiguousStrides(dims, s.data());
  return s;
}

// A tensor viewed as (kept positions) x (reduced positions): the dims and element strides of
// each part, for the input and for an output of the input's shape (when there is one).
struct Split {
  Dims kept_dims, kept_x, kept_y;
  Dims red_dims, red_x, red_y;
};

Split SplitBy(const Tensor& x, const AxisMask& reduced) {
  const Dims y = ContiguousOf(x.dims());
  return Split{Select(x.dims(), reduced, false),   Select(x.strides(), reduced, false),
               Select(y, reduced, false),          Select(x.dims(), reduced, true),
               Select(x.strides(), reduced, true), Select(y, reduced, true)};
}

int64_t Product(absl::Span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // bounded by the input's element count
  return n;
}

// ---- ReduceX ----

enum class Reduce { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

struct ReduceAttrs {
  const char* name;
  Reduce kind;
  bool keepdims = true;
  bool noop_with_empty_axes = false;
  std::vector<int64_t> axes;  // the attribute form (opset < 13 or < 18)
};

// How one reduction accumulates element type T: floats in double; integer sums and products in
// wrapping 64-bit; Max/Min in T; L2/LogSum/LogSumExp of integers in double.
template <Reduce K, typename T>
struct Reducer {
  static constexpr bool kInDouble = kIsFloat<T> || K == Reduce::kL2 || K == Reduce::kLogSum;
  static constexpr bool kInT = !kInDouble && (K == Reduce::kMax || K == Reduce::kMin);
  using A = std::conditional_t<kInDouble, double, std::conditional_t<kInT, T, uint64_t>>;

  static A Init() {
    if constexpr (K == Reduce::kProd) {
      return A(1);
    } else if constexpr (K == Reduce::kMax) {
      if constexpr (kInDouble) {
        return -std::numeric_limits<double>::infinity();
      } else {
        return std::numeric_limits<T>::lowest();
      }
    } else if constexpr (K == Reduce::kMin) {
      if constexpr (kInDouble) {
        return std::numeric_limits<double>::infinity();
      } else {
        return std::numeric_limits<T>::max();
      }
    } else {
      return A(0);
    }
  }
  static A Load(T x) {
    if constexpr (kInDouble) {
      return static_cast<double>(static_cast<Compute<T>>(x));
    } else if constexpr (kInT) {
      return x;
    } else {  // sign-extend, then wrap
      using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
      return static_cast<uint64_t>(static_cast<Wide>(x));
    }
  }
  static void Add(A& acc, T x) {
    const A v = Load(x);
    if constexpr (K == Reduce::kMax) {
      if constexpr (kInDouble) {
        if (std::isnan(acc)) return;
        if (std::isnan(v) || v > acc) acc = v;
      } else if (v > acc) {
        acc = v;
      }
    } else if constexpr (K == Reduce::kMin) {
      if constexpr (kInDouble) {
        if (std::isnan(acc)) return;
        if (std::isnan(v) || v < acc) acc = v;
      } else if (v < acc) {
        acc = v;
      }
    } else if constexpr (K == Reduce::kProd) {
      acc *= v;
    } else if constexpr (K == Reduce::kL1) {
      if constexpr (kInDouble) {
        acc += std::abs(v);
      } else if constexpr (std::is_signed_v<T>) {
        acc += x < T(0) ? uint64_t{0} - v : v;
      } else {
        acc += v;
      }
    } else if constexpr (K == Reduce::kL2 || K == Reduce::kSumSquare) {
      acc += v * v;
    } else {
      acc += v;  // Sum, Mean, LogSum
    }
  }
  static T Finish(A acc, int64_t count) {
    if constexpr (kInDouble) {
      double r = acc;
      if constexpr (K == Reduce::kMean) r = acc / static_cast<double>(count);  // 0/0 = NaN
      if constexpr (K == Reduce::kL2) r = std::sqrt(acc);
      if constexpr (K == Reduce::kLogSum) r = std::log(acc);
      return FromDouble(r);
    } else if constexpr (K == Reduce::kMean) {
      if (count == 0) return T(0);
      if constexpr (std::is_signed_v<T>) {
        return static_cast<T>(static_cast<int64_t>(acc) / count);
      } else {
        return static_cast<T>(acc / static_cast<uint64_t>(count));
      }
    } else {
      return static_cast<T>(acc);
    }
  }
  // double -> T; integers truncate and saturate (NaN -> 0).
  static T FromDouble(double r) {
    if constexpr (kIsFloat<T>) {
      return static_cast<T>(static_cast<Compute<T>>(r));
    } else {
      if (std::isnan(r)) return T(0);
      if (r >= std::ldexp(1.0, std::numeric_limits<T>::digits)) {
        return std::numeric_limits<T>::max();
      }
      if (r <= static_cast<double>(std::numeric_limits<T>::lowest()) - 1.0) {
        return std::numeric_limits<T>::lowest();
      }
      return static_cast<T>(r);
    }
  }
};

template <Reduce K, typename T>
void ReduceLoop(const Tensor& x, const Split& s, T* out) {
  using R = Reducer<K, T>;
  const T* px = x.data<T>();
  const int64_t count = Product(s.red_dims);
  int64_t o = 0;
  ForEachOffset<1>(s.kept_dims, {absl::MakeConstSpan(s.kept_x)}, [&](int64_t base) {
    const T* p = px + base;
    if constexpr (K == Reduce::kLogSumExp) {
      // log(sum(exp(x))) = m + log(sum(exp(x - m))) with m the maximum, in double.
      double m = -std::numeric_limits<double>::infinity();
      bool nan = false;
      ForEachOffset<1>(s.red_dims, {absl::MakeConstSpan(s.red_x)}, [&](int64_t i) {
        const double v = static_cast<double>(static_cast<Compute<T>>(p[i]));
        nan |= std::isnan(v);
        m = std::max(m, v);
      });
      double r = nan ? std::numeric_limits<double>::quiet_NaN() : m;  // m = +-inf stays
      if (!nan && std::isfinite(m)) {
        double sum = 0;
        ForEachOffset<1>(s.red_dims, {absl::MakeConstSpan(s.red_x)}, [&](int64_t i) {
          sum += std::exp(static_cast<double>(static_cast<Compute<T>>(p[i])) - m);
        });
        r = m + std::log(sum);
      }
      out[o++] = Reducer<Reduce::kMax, T>::FromDouble(r);
    } else {
      typename R::A acc = R::Init();
      ForEachOffset<1>(s.red_dims, {absl::MakeConstSpan(s.red_x)},
                       [&](int64_t i) { R::Add(acc, p[i]); });
      out[o++] = R::Finish(acc, count);
    }
  });
}

template <typename T>
void ReduceDispatchKind(Reduce kind, const Tensor& x, const Split& s, T* out) {
  switch (kind) {
    case Reduce::kSum:
      return ReduceLoop<Reduce::kSum, T>(x, s, out);
    case Reduce::kMean:
      return ReduceLoop<Reduce::kMean, T>(x, s, out);
    case Reduce::kMax:
      return ReduceLoop<Reduce::kMax, T>(x, s, out);
    case Reduce::kMin:
      return ReduceLoop<Reduce::kMin, T>(x, s, out);
    case Reduce::kProd:
      return ReduceLoop<Reduce::kProd, T>(x, s, out);
    case Reduce::kL1:
      return ReduceLoop<Reduce::kL1, T>(x, s, out);
    case Reduce::kL2:
      return ReduceLoop<Reduce::kL2, T>(x, s, out);
    case Reduce::kLogSum:
      return ReduceLoop<Reduce::kLogSum, T>(x, s, out);
    case Reduce::kLogSumExp:
      return ReduceLoop<Reduce::kLogSumExp, T>(x, s, out);
    case Reduce::kSumSquare:
      return ReduceLoop<Reduce::kSumSquare, T>(x, s, out);
  }
}

// The reduced-axis mask from `axes`; empty axes reduce everything unless `noop` (then nothing
// is reduced and each element is reduced alone, e.g. ReduceSumSquare squares it).
absl::StatusOr<AxisMask> AxesMask(absl::Span<const int64_t> axes, int rank, bool noop,
                                  absl::string_view op) {
  AxisMask mask(rank, axes.empty() && !noop);
  for (int64_t a : axes) {
    DYNVM_ASSIGN_OR_RETURN(int axis, NormalizeAxis(a, rank, op));
    if (mask[axis]) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": axis ", a, " is repeated"));
    }
    mask[axis] = true;
  }
  return mask;
}

absl::Status RunReduce(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& ra = *static_cast<const ReduceAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, ra.name));
  const Tensor& x = *in[0];
  Dims axes(ra.axes.begin(), ra.axes.end());
  if (in.size() > 1 && in[1] != nullptr) {
    DYNVM_ASSIGN_OR_RETURN(Dims v, ReadInts(*in[1], ra.name, "axes"));
    axes = std::move(v);
  }
  DYNVM_ASSIGN_OR_RETURN(AxisMask mask, AxesMask(axes, x.rank(), ra.noop_with_empty_axes, ra.name));
  Dims out_dims;
  for (int d = 0; d < x.rank(); ++d) {
    if (!(mask)[d]) {
      out_dims.push_back(x.dim(d));
    } else if (ra.keepdims) {
      out_dims.push_back(1);
    }
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), out_dims, ra.name));
  const Split s = SplitBy(x, mask);
  if (x.dtype() == DType::kBool && (ra.kind == Reduce::kMax || ra.kind == Reduce::kMin)) {
    // ReduceMax and ReduceMin of bool (opset 20; the kernel takes no other): any and all, over
    // the 0/1 bytes (an empty min's 255 becomes true).
    ReduceDispatchKind<uint8_t>(ra.kind, x, s, out[0]->data<uint8_t>());
    uint8_t* y = out[0]->data<uint8_t>();
    for (int64_t i = 0; i < out[0]->numel(); ++i) y[i] = y[i] != 0;
    return absl::OkStatus();
  }
  return Dispatch<false>(x.dtype(), ra.name, [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    ReduceDispatchKind<T>(ra.kind, x, s, out[0]->data<T>());
    return absl::OkStatus();
  });
}

// ---- ArgMax, ArgMin ----

struct ArgAttrs {
  const char* name;
  bool max;
  int64_t axis = 0;
  bool keepdims = true;
  bool select_last = false;
};

absl::Status RunArg(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& aa = *static_cast<const ArgAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, aa.name));
  const Tensor& x = *in[0];
  DYNVM_ASSIGN_OR_RETURN(int axis, NormalizeAxis(aa.axis, x.rank(), aa.name));
  AxisMask mask(x.rank(), false);
  mask[axis] = true;
  Dims out_dims;
  for (int d = 0; d < x.rank(); ++d) {
    if (d != axis)
      out_dims.push_back(x.dim(d));
    else if (aa.keepdims)
      out_dims.push_back(1);
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kI64, out_dims, aa.name));
  const int64_t n = x.dim(axis);
  if (n == 0 && out[0]->numel() > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(aa.name, ": cannot reduce the empty axis ", aa.axis, " of ", x.DebugString()));
  }
  const Split s = SplitBy(x, mask);
  const int64_t stride = x.stride(axis);
  int64_t* py = out[0]->data<int64_t>();
  return Dispatch<false>(x.dtype(), aa.name, [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    using C = Compute<T>;
    const T* px = x.data<T>();
    int64_t o = 0;
    ForEachOffset<1>(s.kept_dims, {absl::MakeConstSpan(s.kept_x)}, [&](int64_t base) {
      const T* p = px + base;
      C best = static_cast<C>(p[0]);
      int64_t best_i = 0;
      for (int64_t i = 1; i < n; ++i) {
        const C v = static_cast<C>(p[i * stride]);
        // v beats best: strictly better, or equal when the last index is wanted.
        const bool better = aa.max ? TotalLess(best, v) : TotalLess(v, best);
        const bool worse = aa.max ? TotalLess(v, best) : TotalLess(best, v);
        if (better || (aa.select_last && !worse)) {
          best = v;
          best_i = i;
        }
      }
      py[o++] = best_i;
    });
    return absl::OkStatus();
  });
}

// ---- TopK ----

struct TopKAttrs {
  int64_t axis = -1;
  bool largest = true;
  std::optional<int64_t> k;  // opset < 10 attribute
};

absl::Status RunTopK(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& ta = *static_cast<const TopKAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "TopK"));
  if (out.size() < 2 || out[1] == nullptr) {
    return absl::InvalidArgumentError("TopK: output 1 (Indices) is missing");
  }
  const Tensor& x = *in[0];
  int64_t k;
  if (in.size() > 1 && in[1] != nullptr) {
    DYNVM_ASSIGN_OR_RETURN(Dims kv, ReadInts(*in[1], "TopK", "K"));
    if (kv.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("TopK: K must have one element, got ", in[1]->DebugString()));
    }
    k = (kv)[0];
  } else if (ta.k) {
    k = *ta.k;
  } else {
    return absl::InvalidArgumentError("TopK: K is missing");
  }
  DYNVM_ASSIGN_OR_RETURN(int axis, NormalizeAxis(ta.axis, x.rank(), "TopK"));
  const int64_t n = x.dim(axis);
  if (k < 0 || k > n) {
    return absl::InvalidArgumentError(absl::StrCat("TopK: K = ", k, " is out of range for axis ",
                                                   ta.axis, " of ", x.DebugString()));
  }
  Dims out_dims(x.dims().begin(), x.dims().end());
  out_dims[axis] = k;
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), out_dims, "TopK"));
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[1], DType::kI64, out_dims, "TopK"));
  if (out[0]->numel() == 0) return absl::OkStatus();
  AxisMask mask(x.rank(), false);
  mask[axis] = true;
  Split s = SplitBy(x, mask);
  s.kept_y = Select(ContiguousOf(out_dims), mask, false);
  const int64_t out_stride = ContiguousOf(out_dims)[axis];
  const int64_t stride = x.stride(axis);
  return Dispatch<false>(x.dtype(), "TopK", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    using C = Compute<T>;
    struct Entry {
      C v;
      int64_t i;
    };
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(static_cast<size_t>(n) * sizeof(Entry)));
    Entry* buf = static_cast<Entry*>(ws);
    // Strict total orders on (value, index): ties go to the lower index.
    auto before = [largest = ta.largest](const Entry& a, const Entry& b) {
      if (largest ? TotalLess(b.v, a.v) : TotalLess(a.v, b.v)) return true;
      if (largest ? TotalLess(a.v, b.v) : TotalLess(b.v, a.v)) return false;
      return a.i < b.i;
    };
    const T* px = x.data<T>();
    T* values = out[0]->data<T>();
    int64_t* indices = out[1]->data<int64_t>();
    ForEachOffset<2>(s.kept_dims, {absl::MakeConstSpan(s.kept_x), absl::MakeConstSpan(s.kept_y)},
                     [&](int64_t base, int64_t obase) {
                       const T* p = px + base;
                       for (int64_t i = 0; i < n; ++i) {
                         buf[i] = Entry{static_cast<C>(p[i * stride]), i};
                       }
                       std::partial_sort(buf, buf + k, buf + n, before);
                       for (int64_t j = 0; j < k; ++j) {
                         values[obase + j * out_stride] = p[buf[j].i * stride];
                         indices[obase + j * out_stride] = buf[j].i;
                       }
                     });
    return absl::OkStatus();
  });
}

// ---- Softmax, LogSoftmax, Hardmax ----

enum class Softmax { kSoftmax, kLogSoftmax, kHardmax };

struct SoftmaxAttrs {
  const char* name;
  Softmax kind;
  int64_t axis = -1;
  bool legacy_2d = false;  // opset < 13: coerce to 2-D at axis, normalize over [axis, rank)
};

absl::Status RunSoftmax(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& sa = *static_cast<const SoftmaxAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, sa.name));
  const Tensor& x = *in[0];
  DYNVM_ASSIGN_OR_RETURN(int axis, NormalizeAxis(sa.axis, x.rank(), sa.name));
  AxisMask mask(x.rank(), false);
  for (int d = axis; d < (sa.legacy_2d ? x.rank() : axis + 1); ++d) mask[d] = true;
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), x.dims(), sa.name));
  const Split s = SplitBy(x, mask);
  const std::array<absl::Span<const int64_t>, 2> red = {absl::MakeConstSpan(s.red_x),
                                                        absl::MakeConstSpan(s.red_y)};
  return Dispatch<true>(x.dtype(), sa.name, [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    using C = Compute<T>;
    const T* px = x.data<T>();
    T* py = out[0]->data<T>();
    auto load = [](T v) { return static_cast<double>(static_cast<C>(v)); };
    auto store = [](double v) { return static_cast<T>(static_cast<C>(v)); };
    ForEachOffset<2>(s.kept_dims, {absl::MakeConstSpan(s.kept_x), absl::MakeConstSpan(s.kept_y)},
                     [&](int64_t xb, int64_t yb) {
                       const T* p = px + xb;
                       T* q = py + yb;
                       if (sa.kind == Softmax::kHardmax) {
                         C best = 0;
                         int64_t best_y = -1;
                         ForEachOffset<2>(s.red_dims, red, [&](int64_t i, int64_t j) {
                           const C v = static_cast<C>(p[i]);
                           if (best_y < 0 || TotalLess(best, v)) {
                             best = v;
                             best_y = j;
                           }
                           q[j] = T(C(0));
                         });
                         if (best_y >= 0) q[best_y] = T(C(1));
                         return;
                       }
                       double m = -std::numeric_limits<double>::infinity();
                       ForEachOffset<2>(s.red_dims, red,
                                        [&](int64_t i, int64_t) { m = std::max(m, load(p[i])); });
                       double sum = 0;
                       ForEachOffset<2>(s.red_dims, red, [&](int64_t i, int64_t) {
                         sum += std::exp(load(p[i]) - m);
                       });
                       if (sa.kind == Softmax::kSoftmax) {
                         ForEachOffset<2>(s.red_dims, red, [&](int64_t i, int64_t j) {
                           q[j] = store(std::exp(load(p[i]) - m) / sum);
                         });
                       } else {
                         const double log_sum = std::log(sum);
                         ForEachOffset<2>(s.red_dims, red, [&](int64_t i, int64_t j) {
                           q[j] = store(load(p[i]) - m - log_sum);
                         });
                       }
                     });
    return absl::OkStatus();
  });
}

// ---- LayerNormalization ----

struct LayerNormAttrs {
  int64_t axis = -1;
  float epsilon = 1e-5f;
  DType stat_dtype[2] = {DType::kF32, DType::kF32};  // Mean, InvStdDev (ports or stash_type)
};

template <typename U>
void StoreStat(Tensor* t, int64_t i, double v) {
  if (t != nullptr) t->data<U>()[i] = static_cast<U>(static_cast<Compute<U>>(v));
}

absl::Status RunLayerNorm(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& la = *static_cast<const LayerNormAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "LayerNormalization"));
  const Tensor& x = *in[0];
  const Tensor* scale = in.size() > 1 ? in[1] : nullptr;
  const Tensor* bias = in.size() > 2 ? in[2] : nullptr;
  DYNVM_ASSIGN_OR_RETURN(int axis, NormalizeAxis(la.axis, x.rank(), "LayerNormalization"));
  // Scale and B broadcast to X (unidirectionally) and share its dtype.
  Dims s_strides(x.rank(), 0), b_strides(x.rank(), 0);
  for (const Tensor* t : {scale, bias}) {
    if (t == nullptr) continue;
    absl::StatusOr<Dims> d = BroadcastShapes(t->dims(), x.dims());
    if (t->dtype() != x.dtype() || !d.ok() || absl::MakeConstSpan(*d) != x.dims()) {
      return absl::InvalidArgumentError(
          absl::StrCat("LayerNormalization: ", t == scale ? "Scale " : "B ", t->DebugString(),
                       " does not broadcast to X ", x.DebugString()));
    }
    (t == scale ? s_strides : b_strides) = BroadcastStrides(*t, x.dims());
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), x.dims(), "LayerNormalization"));
  Dims stat_dims(x.dims().begin(), x.dims().end());
  for (int d = axis; d < x.rank(); ++d) stat_dims[d] = 1;
  Tensor* stats[2] = {out.size() > 1 ? out[1] : nullptr, out.size() > 2 ? out[2] : nullptr};
  for (int i = 0; i < 2; ++i) {
    if (stats[i] == nullptr) continue;
    DYNVM_RETURN_IF_ERROR(
        PrepareOutput(ctx, stats[i], la.stat_dtype[i], stat_dims, "LayerNormalization"));
  }
  AxisMask mask(x.rank(), false);
  for (int d = axis; d < x.rank(); ++d) mask[d] = true;
  const Split s = SplitBy(x, mask);
  const Dims ks = Select(s_strides, mask, false), rs = Select(s_strides, mask, true);
  const Dims kb = Select(b_strides, mask, false), rb = Select(b_strides, mask, true);
  const int64_t count = Product(s.red_dims);
  const DType stat_dtype = la.stat_dtype[0];
  return Dispatch<true>(x.dtype(), "LayerNormalization", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    using C = Compute<T>;
    return Dispatch<true>(stat_dtype, "LayerNormalization", [&](auto* utag) -> absl::Status {
      using U = std::remove_pointer_t<decltype(utag)>;
      const T* px = x.data<T>();
      const T* ps = scale ? scale->data<T>() : nullptr;
      const T* pb = bias ? bias->data<T>() : nullptr;
      T* py = out[0]->data<T>();
      auto load = [](T v) { return static_cast<double>(static_cast<C>(v)); };
      int64_t o = 0;
      ForEachOffset<4>(
          s.kept_dims,
          {absl::MakeConstSpan(s.kept_x), absl::MakeConstSpan(s.kept_y), absl::MakeConstSpan(ks),
           absl::MakeConstSpan(kb)},
          [&](int64_t xb, int64_t yb, int64_t sb, int64_t bb) {
            const std::array<absl::Span<const int64_t>, 4> red = {
                absl::MakeConstSpan(s.red_x), absl::MakeConstSpan(s.red_y), absl::MakeConstSpan(rs),
                absl::MakeConstSpan(rb)};
            double sum = 0;
            ForEachOffset<4>(s.red_dims, red, [&](int64_t i, int64_t, int64_t, int64_t) {
              sum += load(px[xb + i]);
            });
            const double mean = sum / static_cast<double>(count);
            double sq = 0;
            ForEachOffset<4>(s.red_dims, red, [&](int64_t i, int64_t, int64_t, int64_t) {
              const double d = load(px[xb + i]) - mean;
              sq += d * d;
            });
            const double inv = 1.0 / std::sqrt(sq / static_cast<double>(count) + la.epsilon);
            ForEachOffset<4>(s.red_dims, red, [&](int64_t i, int64_t j, int64_t si, int64_t bi) {
              double v = (load(px[xb + i]) - mean) * inv;
              if (ps != nullptr) v *= load(ps[sb + si]);
              if (pb != nullptr) v += load(pb[bb + bi]);
              py[yb + j] = static_cast<T>(static_cast<C>(v));
            });
            StoreStat<U>(stats[0], o, mean);
            StoreStat<U>(stats[1], o, inv);
            ++o;
          });
      return absl::OkStatus();
    });
  });
}

// ---- CumSum ----

struct CumSumAttrs {
  bool exclusive = false;
  bool reverse = false;
};

absl::Status RunCumSum(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& ca = *static_cast<const CumSumAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, "CumSum"));
  const Tensor& x = *in[0];
  DYNVM_ASSIGN_OR_RETURN(Dims av, ReadInts(*in[1], "CumSum", "axis"));
  if (av.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CumSum: axis must have one element, got ", in[1]->DebugString()));
  }
  DYNVM_ASSIGN_OR_RETURN(int axis, NormalizeAxis((av)[0], x.rank(), "CumSum"));
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), x.dims(), "CumSum"));
  AxisMask mask(x.rank(), false);
  mask[axis] = true;
  const Split s = SplitBy(x, mask);
  const int64_t n = x.dim(axis);
  const int64_t sx = x.stride(axis), sy = s.red_y[0];
  return Dispatch<false>(x.dtype(), "CumSum", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    using R = Reducer<Reduce::kSum, T>;  // double for floats, wrapping 64-bit for integers
    const T* px = x.data<T>();
    T* py = out[0]->data<T>();
    ForEachOffset<2>(s.kept_dims, {absl::MakeConstSpan(s.kept_x), absl::MakeConstSpan(s.kept_y)},
                     [&](int64_t xb, int64_t yb) {
                       typename R::A acc = R::Init();
                       for (int64_t t = 0; t < n; ++t) {
                         const int64_t i = ca.reverse ? n - 1 - t : t;
                         const T v = px[xb + i * sx];  // read first: y may alias x
                         if (ca.exclusive) py[yb + i * sy] = R::Finish(acc, 1);
                         R::Add(acc, v);
                         if (!ca.exclusive) py[yb + i * sy] = R::Finish(acc, 1);
                       }
                     });
    return absl::OkStatus();
  });
}

// ---- registration ----

void Add(KernelRegistry& r, const char* op, KernelFactory factory) {
  r.Register(KernelRegistration{"", op, Device::kCPU, "reference", kReferencePriority,
                                std::move(factory)});
}

template <typename A>
std::unique_ptr<Kernel> MakeKernel(const KernelSpec& spec, FunctionKernel::RunFn run, A attrs) {
  return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), run,
                                          std::make_shared<const A>(std::move(attrs)));
}

// Reads an int attribute that must be 0 or 1.
absl::StatusOr<bool> GetFlag(const KernelSpec& spec, absl::string_view name, bool def) {
  DYNVM_ASSIGN_OR_RETURN(int64_t v, spec.GetInt(name, def ? 1 : 0));
  if (v != 0 && v != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.op, ": attribute ", name, " must be 0 or 1, got ", v));
  }
  return v == 1;
}

void AddReduce(KernelRegistry& r, const char* name, Reduce kind) {
  Add(r, name, [name, kind](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 2, 1, 1));
    const bool bool_min_max = (kind == Reduce::kMax || kind == Reduce::kMin) &&
                              spec.inputs[0].dtype == static_cast<uint8_t>(DType::kBool);
    if (!bool_min_max)
      DYNVM_RETURN_IF_ERROR(CheckDType(spec, spec.inputs[0], /*float_only=*/false));
    ReduceAttrs a{name, kind};
    DYNVM_ASSIGN_OR_RETURN(a.keepdims, GetFlag(spec, "keepdims", true));
    DYNVM_ASSIGN_OR_RETURN(a.noop_with_empty_axes, GetFlag(spec, "noop_with_empty_axes", false));
    DYNVM_ASSIGN_OR_RETURN(a.axes, spec.GetInts("axes"));
    return MakeKernel(spec, &RunReduce, std::move(a));
  });
}

void AddArg(KernelRegistry& r, const char* name, bool max) {
  Add(r, name, [name, max](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 1, 1, 1));
    DYNVM_RETURN_IF_ERROR(CheckDType(spec, spec.inputs[0], /*float_only=*/false));
    ArgAttrs a{name, max};
    DYNVM_ASSIGN_OR_RETURN(a.axis, spec.GetInt("axis", 0));
    DYNVM_ASSIGN_OR_RETURN(a.keepdims, GetFlag(spec, "keepdims", true));
    DYNVM_ASSIGN_OR_RETURN(a.select_last, GetFlag(spec, "select_last_index", false));
    return MakeKernel(spec, &RunArg, a);
  });
}

void AddSoftmax(KernelRegistry& r, const char* name, Softmax kind) {
  Add(r, name, [name, kind](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 1, 1, 1));
    DYNVM_RETURN_IF_ERROR(CheckDType(spec, spec.inputs[0], /*float_only=*/true));
    SoftmaxAttrs a{name, kind};
    DYNVM_ASSIGN_OR_RETURN(a.legacy_2d, GetFlag(spec, "legacy_2d", false));
    DYNVM_ASSIGN_OR_RETURN(a.axis, spec.GetInt("axis", a.legacy_2d ? 1 : -1));
    return MakeKernel(spec, &RunSoftmax, a);
  });
}

}  // namespace

void RegisterReduceKernels(KernelRegistry& r) {
  AddReduce(r, "ReduceSum", Reduce::kSum);
  AddReduce(r, "ReduceMean", Reduce::kMean);
  AddReduce(r, "ReduceMax", Reduce::kMax);
  AddReduce(r, "ReduceMin", Reduce::kMin);
  AddReduce(r, "ReduceProd", Reduce::kProd);
  AddReduce(r, "ReduceL1", Reduce::kL1);
  AddReduce(r, "ReduceL2", Reduce::kL2);
  AddReduce(r, "ReduceLogSum", Reduce::kLogSum);
  AddReduce(r, "ReduceLogSumExp", Reduce::kLogSumExp);
  AddReduce(r, "ReduceSumSquare", Reduce::kSumSquare);
  AddArg(r, "ArgMax", /*max=*/true);
  AddArg(r, "ArgMin", /*max=*/false);
  AddSoftmax(r, "Softmax", Softmax::kSoftmax);
  AddSoftmax(r, "LogSoftmax", Softmax::kLogSoftmax);
  AddSoftmax(r, "Hardmax", Softmax::kHardmax);

  Add(r, "TopK", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.empty() || spec.inputs.size() > 2 || spec.outputs.size() != 2) {
      return absl::InvalidArgumentError("TopK: expected 1..2 inputs and 2 outputs");
    }
    DYNVM_RETURN_IF_ERROR(CheckDType(spec, spec.inputs[0], /*float_only=*/false));
    TopKAttrs a;
    DYNVM_ASSIGN_OR_RETURN(a.axis, spec.GetInt("axis", -1));
    DYNVM_ASSIGN_OR_RETURN(a.largest, GetFlag(spec, "largest", true));
    bool sorted;  // unsorted output may be in any order: sorted output is one of them
    DYNVM_ASSIGN_OR_RETURN(sorted, GetFlag(spec, "sorted", true));
    (void)sorted;
    if (spec.Find("k") != nullptr) {
      int64_t k;
      DYNVM_ASSIGN_OR_RETURN(k, spec.GetInt("k", 0));
      a.k = k;
    }
    return MakeKernel(spec, &RunTopK, a);
  });
  Add(r, "LayerNormalization",
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 3, 1, 3));
        DYNVM_RETURN_IF_ERROR(CheckDType(spec, spec.inputs[0], /*float_only=*/true));
        LayerNormAttrs a;
        DYNVM_ASSIGN_OR_RETURN(a.axis, spec.GetInt("axis", -1));
        DYNVM_ASSIGN_OR_RETURN(a.epsilon, spec.GetFloat("epsilon", 1e-5f));
        int64_t stash;
        DYNVM_ASSIGN_OR_RETURN(stash, spec.GetInt("stash_type", 1));
        DType stash_dtype;
        switch (stash) {
          case 1:
            stash_dtype = DType::kF32;
            break;
          case 10:
            stash_dtype = DType::kF16;
            break;
          case 11:
            stash_dtype = DType::kF64;
            break;
          case 16:
            stash_dtype = DType::kBF16;
            break;
          default:
            return absl::UnimplementedError(
                absl::StrCat("LayerNormalization: stash_type ", stash, " not supported"));
        }
        a.stat_dtype[0] = a.stat_dtype[1] = stash_dtype;
        for (size_t i = 1; i < spec.outputs.size(); ++i) {
          DYNVM_RETURN_IF_ERROR(CheckDType(spec, spec.outputs[i], /*float_only=*/true));
          a.stat_dtype[i - 1] = spec.outputs[i].dtype_or(stash_dtype);
        }
        if (spec.outputs.size() == 2) a.stat_dtype[1] = a.stat_dtype[0];
        if (a.stat_dtype[0] != a.stat_dtype[1]) {
          return absl::UnimplementedError(
              "LayerNormalization: Mean and InvStdDev with different dtypes");
        }
        return MakeKernel(spec, &RunLayerNorm, a);
      });
  Add(r, "CumSum", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    DYNVM_RETURN_IF_ERROR(CheckArity(spec, 2, 2, 1, 1));
    DYNVM_RETURN_IF_ERROR(CheckDType(spec, spec.inputs[0], /*float_only=*/false));
    CumSumAttrs a;
    DYNVM_ASSIGN_OR_RETURN(a.exclusive, GetFlag(spec, "exclusive", false));
    DYNVM_ASSIGN_OR_RETURN(a.reverse, GetFlag(spec, "reverse", false));
    return MakeKernel(spec, &RunCumSum, a);
  });
}

}  // namespace dynvm::reference
