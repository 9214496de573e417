// Reference kernels for elementwise ops: unary math and activations; binary arithmetic,
// comparison and logic with numpy broadcasting; variadic Max/Min/Sum/Mean; Where, Clip, PRelu;
// Cast/CastLike, Identity and inference-mode Dropout.
//
// Arithmetic runs in float for f16/bf16 and in the element type otherwise. Integer arithmetic
// wraps (two's complement) instead of overflowing; integer division or modulo by zero is an
// InvalidArgument error, never a trap.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"
#include "kernels/reference/signal_common.h"

namespace dynvm::reference {
namespace {

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;

// ---- element types ----

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <typename T>
inline constexpr bool kIsFloat = kIsHalf<T> || std::is_floating_point_v<T>;
template <typename T>
inline constexpr bool kIsInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;
// The type arithmetic runs in.
template <typename T>
using Compute = std::conditional_t<kIsHalf<T>, float, T>;
// The unsigned type integer arithmetic wraps in (at least `unsigned`, so that small types do
// not promote to a signed int that could overflow). REQUIRES: T is an integer type.
template <typename T>
using Wrap = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

// Dtype classes an op accepts.
enum : unsigned {
  kFloats = 1,
  kSigned = 2,
  kUnsigned = 4,
  kBool = 8,
  kInts = kSigned | kUnsigned,
  kSignedNumeric = kFloats | kSigned,
  kNumeric = kFloats | kInts,
  kAll = kNumeric | kBool,
};

template <typename T>
constexpr unsigned ClassOf() {
  if constexpr (std::is_same_v<T, bool>) {
    return kBool;
  } else if constexpr (kIsFloat<T>) {
    return kFloats;
  } else if constexpr (std::is_signed_v<T>) {
    return kSigned;
  } else {
    return kUnsigned;
  }
}

unsigned ClassOf(DType d) {
  if (d == DType::kBool) return kBool;
  if (IsFloat(d)) return kFloats;
  if (IsSignedInt(d)) return kSigned;
  if (IsUnsignedInt(d)) return kUnsigned;
  return 0;
}

absl::Status Unsupported(absl::string_view op, DType dtype) {
  return absl::UnimplementedError(absl::StrCat(op, ": dtype ", DTypeName(dtype), " not supported"));
}

// DispatchNumeric restricted to the dtype classes in kSet (the others are not instantiated).
template <unsigned kSet, typename Fn>
absl::Status Dispatch(DType dtype, absl::string_view op, Fn&& fn) {
  return DispatchNumeric(dtype, op, [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr ((ClassOf<T>() & kSet) != 0) {
      return fn(tag);
    } else {
      return Unsupported(op, dtype);
    }
  });
}

// Converts between element types with defined results for every value: float -> integer
// truncates toward zero and saturates (NaN -> 0); integer -> integer wraps; x -> bool is x != 0.
template <typename T>
T SaturatingFromDouble(double v) {
  if (std::isnan(v)) return T(0);
  constexpr T kLowest = std::numeric_limits<T>::lowest();
  constexpr T kMax = std::numeric_limits<T>::max();
  // 2^digits is exactly representable and is the first value above kMax.
  static const double kUpper = std::ldexp(1.0, std::numeric_limits<T>::digits);
  if (v >= kUpper) return kMax;
  if (v <= static_cast<double>(kLowest) - 1.0) return kLowest;
  return static_cast<T>(v);
}

template <typename To, typename From>
To Convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (kIsHalf<From>) {
    return Convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (kIsHalf<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_floating_point_v<To>) {
    return static_cast<To>(v);
  } else if constexpr (std::is_floating_point_v<From>) {
    return SaturatingFromDouble<To>(static_cast<double>(v));
  } else {
    return static_cast<To>(v);
  }
}

// ---- iteration ----

// Reads element i. A bool tensor may hold bytes other than 0 and 1 (hostile data): they read as
// byte != 0, never as an invalid bool.
template <typename T>
T Get(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, bool>) {
    return reinterpret_cast<const uint8_t*>(p)[i] != 0;
  } else {
    return p[i];
  }
}

// y[i] = fn(x[i]) over any strides; y is contiguous with x's dims.
template <typename TI, typename TO, typename Fn>
void Map1(const Tensor& x, Tensor& y, Fn&& fn) {
  const TI* px = x.data<TI>();
  TO* py = y.data<TO>();
  if (x.is_contiguous()) {
    for (int64_t i = 0, n = x.numel(); i < n; ++i) py[i] = fn(Get(px, i));
    return;
  }
  int64_t o = 0;
  ForEachOffset<1>(x.dims(), {x.strides()}, [&](int64_t i) { py[o++] = fn(Get(px, i)); });
}

// y = fn(a, b) with a and b broadcast to y's dims (y contiguous).
template <typename TA, typename TB, typename TO, typename Fn>
void Map2(const Tensor& a, const Tensor& b, Tensor& y, Fn&& fn) {
  const TA* pa = a.data<TA>();
  const TB* pb = b.data<TB>();
  TO* py = y.data<TO>();
  const int64_t n = y.numel();
  // A contiguous operand with as many elements as y has y's layout (broadcasting only adds
  // dims of size 1).
  const bool a_full = a.is_contiguous() && a.numel() == n;
  const bool b_full = b.is_contiguous() && b.numel() == n;
  if (a_full && b_full) {
    for (int64_t i = 0; i < n; ++i) py[i] = fn(Get(pa, i), Get(pb, i));
    return;
  }
  if (a_full && b.numel() == 1) {
    const TB vb = Get(pb, 0);
    for (int64_t i = 0; i < n; ++i) py[i] = fn(Get(pa, i), vb);
    return;
  }
  if (b_full && a.numel() == 1) {
    const TA va = Get(pa, 0);
    for (int64_t i = 0; i < n; ++i) py[i] = fn(va, Get(pb, i));
    return;
  }
  const Dims sa = BroadcastStrides(a, y.dims());
  const Dims sb = BroadcastStrides(b, y.dims());
  int64_t o = 0;
  ForEachOffset<2>(y.dims(), {absl::MakeConstSpan(sa), absl::MakeConstSpan(sb)},
                   [&](int64_t ia, int64_t ib) { py[o++] = fn(Get(pa, ia), Get(pb, ib)); });
}

// Copies x into the contiguous y of the same dims and dtype (any element type, by size).
absl::Status CopyTensor(const Tensor& x, Tensor& y, absl::string_view op) {
  if (x.raw_data() == y.raw_data() && x.is_contiguous()) return absl::OkStatus();
  if (x.is_contiguous()) {
    if (x.numel() > 0) std::memmove(y.raw_data(), x.raw_data(), x.nbytes());
    return absl::OkStatus();
  }
  auto copy = [&](auto* tag) {
    using U = std::remove_pointer_t<decltype(tag)>;
    Map1<U, U>(x, y, [](U v) { return v; });
    return absl::OkStatus();
  };
  switch (DTypeSize(x.dtype())) {
    case 1:
      return copy(static_cast<uint8_t*>(nullptr));
    case 2:
      return copy(static_cast<uint16_t*>(nullptr));
    case 4:
      return copy(static_cast<uint32_t*>(nullptr));
    case 8:
      return copy(static_cast<uint64_t*>(nullptr));
    default:
      return Unsupported(op, x.dtype());
  }
}

// ---- validation ----

// A concrete port dtype must be in `set`; kAnyDType is checked at run time.
absl::Status CheckPort(const KernelSpec& spec, const PortSpec& port, unsigned set) {
  if (port.dtype == kAnyDType) return absl::OkStatus();
  if (!IsValidDType(port.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(spec.op, ": invalid dtype ", port.dtype));
  }
  const DType d = static_cast<DType>(port.dtype);
  if ((ClassOf(d) & set) == 0) return Unsupported(spec.op, d);
  return absl::OkStatus();
}

// Ports i and j, when both concrete, must have the same dtype.
absl::Status CheckSame(const KernelSpec& spec, size_t i, size_t j) {
  const uint8_t a = spec.inputs[i].dtype, b = spec.inputs[j].dtype;
  if (a != kAnyDType && b != kAnyDType && a != b) {
    return absl::InvalidArgumentError(absl::StrCat(
        spec.op, ": inputs ", i, " and ", j, " differ in dtype (", DTypeName(static_cast<DType>(a)),
        " vs ", DTypeName(static_cast<DType>(b)), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Dims> Broadcast(absl::Span<const absl::Span<const int64_t>> shapes,
                               absl::string_view op) {
  absl::StatusOr<Dims> d = BroadcastShapes(shapes);
  if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", d.status().message()));
  return d;
}

// Reads the single element of a tensor of element type T (a scalar input such as Clip's min).
template <typename T>
absl::StatusOr<T> ReadScalar(const Tensor& t, absl::string_view op, absl::string_view what) {
  if (t.numel() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", what, " must have one element, got ", t.DebugString()));
  }
  return Get(t.data<T>(), 0);
}

// ---- integer helpers ----

template <typename C>
C Plus(C a, C b) {
  if constexpr (kIsInt<C>) {
    return static_cast<C>(static_cast<Wrap<C>>(a) + static_cast<Wrap<C>>(b));
  } else {
    return a + b;
  }
}
template <typename C>
C Minus(C a, C b) {
  if constexpr (kIsInt<C>) {
    return static_cast<C>(static_cast<Wrap<C>>(a) - static_cast<Wrap<C>>(b));
  } else {
    return a - b;
  }
}
template <typename C>
C Times(C a, C b) {
  if constexpr (kIsInt<C>) {
    return static_cast<C>(static_cast<Wrap<C>>(a) * static_cast<Wrap<C>>(b));
  } else {
    return a * b;
  }
}
template <typename C>
C Negate(C a) {
  if constexpr (kIsInt<C>) {
    return static_cast<C>(Wrap<C>(0) - static_cast<Wrap<C>>(a));
  } else {
    return -a;
  }
}

// True when any element of b is zero (integer divisors are checked before dividing).
template <typename T>
bool HasZero(const Tensor& b) {
  const T* p = b.data<T>();
  bool zero = false;
  ForEachOffset<1>(b.dims(), {b.strides()}, [&](int64_t i) { zero |= (p[i] == T(0)); });
  return zero;
}

// ---- binary ops: `C operator()(C a, C b)` in the compute type ----

struct OpTraits {
  static constexpr bool kBoolOut = false;     // the output is bool (comparisons)
  static constexpr bool kIntDivisor = false;  // integer zero divisors are an error
};

struct AddOp : OpTraits {
  static constexpr const char* kName = "Add";
  static constexpr unsigned kTypes = kNumeric;
  template <typename C>
  C operator()(C a, C b) const {
    return Plus(a, b);
  }
};
struct SubOp : OpTraits {
  static constexpr const char* kName = "Sub";
  static constexpr unsigned kTypes = kNumeric;
  template <typename C>
  C operator()(C a, C b) const {
    return Minus(a, b);
  }
};
struct MulOp : OpTraits {
  static constexpr const char* kName = "Mul";
  static constexpr unsigned kTypes = kNumeric;
  template <typename C>
  C operator()(C a, C b) const {
    return Times(a, b);
  }
};
struct DivOp : OpTraits {
  static constexpr const char* kName = "Div";
  static constexpr unsigned kTypes = kNumeric;
  static constexpr bool kIntDivisor = true;
  // Integers truncate toward zero (C semantics); lowest / -1 wraps to lowest.
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (kIsInt<C> && std::is_signed_v<C>) {
      if (b == C(-1)) return Negate(a);
    }
    return a / b;
  }
};
struct ModOp : OpTraits {
  static constexpr const char* kName = "Mod";
  static constexpr unsigned kTypes = kNumeric;
  static constexpr bool kIntDivisor = true;
  bool fmod = false;  // true: sign of the dividend (C fmod); false: sign of the divisor (Python)
  template <typename C>
  C operator()(C a, C b) const {
    C r;
    if constexpr (kIsInt<C>) {
      if constexpr (std::is_signed_v<C>) {
        if (b == C(-1)) return C(0);  // lowest % -1 would trap
      }
      r = static_cast<C>(a % b);
    } else {
      r = std::fmod(a, b);
    }
    if constexpr (std::is_signed_v<C> || kIsFloat<C>) {
      if (!fmod && r != C(0) && ((r < C(0)) != (b < C(0)))) r = static_cast<C>(r + b);
    }
    return r;
  }
};

template <typename C>
C MaxOf(C a, C b) {
  if constexpr (kIsFloat<C>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return a < b ? b : a;
}
template <typename C>
C MinOf(C a, C b) {
  if constexpr (kIsFloat<C>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return b < a ? b : a;
}

struct CompareTraits : OpTraits {
  static constexpr bool kBoolOut = true;
  static constexpr unsigned kTypes = kNumeric;
};
struct EqualOp : CompareTraits {
  static constexpr const char* kName = "Equal";
  static constexpr unsigned kTypes = kAll;
  template <typename C>
  bool operator()(C a, C b) const {
    return a == b;
  }
};
struct GreaterOp : CompareTraits {
  static constexpr const char* kName = "Greater";
  template <typename C>
  bool operator()(C a, C b) const {
    return a > b;
  }
};
struct LessOp : CompareTraits {
  static constexpr const char* kName = "Less";
  template <typename C>
  bool operator()(C a, C b) const {
    return a < b;
  }
};
struct GreaterOrEqualOp : CompareTraits {
  static constexpr const char* kName = "GreaterOrEqual";
  template <typename C>
  bool operator()(C a, C b) const {
    return a >= b;
  }
};
struct LessOrEqualOp : CompareTraits {
  static constexpr const char* kName = "LessOrEqual";
  template <typename C>
  bool operator()(C a, C b) const {
    return a <= b;
  }
};
struct AndOp : CompareTraits {
  static constexpr const char* kName = "And";
  static constexpr unsigned kTypes = kBool;
  bool operator()(bool a, bool b) const { return a && b; }
};
struct OrOp : CompareTraits {
  static constexpr const char* kName = "Or";
  static constexpr unsigned kTypes = kBool;
  bool operator()(bool a, bool b) const { return a || b; }
};
struct XorOp : CompareTraits {
  static constexpr const char* kName = "Xor";
  static constexpr unsigned kTypes = kBool;
  bool operator()(bool a, bool b) const { return a != b; }
};
struct BitShiftOp : OpTraits {
  static constexpr const char* kName = "BitShift";
  static constexpr unsigned kTypes = kUnsigned;
  bool left = true;
  // Shifting by the bit width or more gives 0 (a plain C++ shift would be undefined).
  template <typename C>
  C operator()(C a, C b) const {
    if (b >= static_cast<C>(sizeof(C) * 8)) return C(0);
    const Wrap<C> w = static_cast<Wrap<C>>(a);
    return static_cast<C>(left ? (w << b) : (w >> b));
  }
};
// Opset 18's bitwise operators on integers (a sign-extended compute type truncates back to the
// same bits).
struct BitwiseAndOp : OpTraits {
  static constexpr const char* kName = "BitwiseAnd";
  static constexpr unsigned kTypes = kInts;
  template <typename C>
  C operator()(C a, C b) const {
    return static_cast<C>(a & b);
  }
};
struct BitwiseOrOp : OpTraits {
  static constexpr const char* kName = "BitwiseOr";
  static constexpr unsigned kTypes = kInts;
  template <typename C>
  C operator()(C a, C b) const {
    return static_cast<C>(a | b);
  }
};
struct BitwiseXorOp : OpTraits {
  static constexpr const char* kName = "BitwiseXor";
  static constexpr unsigned kTypes = kInts;
  template <typename C>
  C operator()(C a, C b) const {
    return static_cast<C>(a ^ b);
  }
};
struct PReluOp : OpTraits {
  static constexpr const char* kName = "PRelu";
  static constexpr unsigned kTypes = kNumeric;
  template <typename C>
  C operator()(C x, C slope) const {
    return x < C(0) ? Times(slope, x) : x;
  }
};

template <typename Op>
absl::Status RunBinary(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const Op& op = *static_cast<const Op*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, Op::kName));
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  if (a.dtype() != b.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(Op::kName, ": operands ", a.DebugString(),
                                                   " and ", b.DebugString(), " differ in dtype"));
  }
  absl::StatusOr<Dims> dims = Broadcast({a.dims(), b.dims()}, Op::kName);
  if (!dims.ok()) return dims.status();
  if constexpr (std::is_same_v<Op, PReluOp>) {
    if (absl::MakeConstSpan(*dims) != a.dims()) {  // the slope broadcasts to X, not the reverse
      return absl::InvalidArgumentError(absl::StrCat("PRelu: slope ", b.ShapeString(),
                                                     " does not broadcast to X ", a.ShapeString()));
    }
  }
  return Dispatch<Op::kTypes>(a.dtype(), Op::kName, [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    using C = Compute<T>;
    using TO = std::conditional_t<Op::kBoolOut, bool, T>;
    if constexpr (Op::kIntDivisor && kIsInt<T>) {
      if (HasZero<T>(b)) {
        return absl::InvalidArgumentError(absl::StrCat(Op::kName, ": integer division by zero"));
      }
    }
    DYNVM_RETURN_IF_ERROR(
        PrepareOutput(ctx, out[0], Op::kBoolOut ? DType::kBool : a.dtype(), *dims, Op::kName));
    Map2<T, T, TO>(a, b, *out[0], [&op](T x, T y) {
      return static_cast<TO>(op(static_cast<C>(x), static_cast<C>(y)));
    });
    return absl::OkStatus();
  });
}

// Pow: the base's dtype is the output's; the exponent may have any numeric dtype.
template <typename C>
C IntPow(C base, int64_t exp_signed, uint64_t exp_unsigned, bool negative) {
  if (negative) {  // |base| > 1 gives a fraction that truncates to 0
    if (base == C(1)) return C(1);
    if constexpr (std::is_signed_v<C>) {
      if (base == C(-1)) return (exp_signed & 1) ? C(-1) : C(1);
    }
    return C(0);
  }
  Wrap<C> result = 1, b = static_cast<Wrap<C>>(base);
  for (uint64_t e = exp_unsigned; e != 0; e >>= 1) {
    if (e & 1) result *= b;
    b *= b;
  }
  return static_cast<C>(result);
}

template <typename T, typename E>
T PowValue(T x, E e) {
  if constexpr (kIsInt<T> && kIsInt<E>) {
    const bool negative = std::is_signed_v<E> && e < E(0);
    return IntPow<T>(x, static_cast<int64_t>(e), static_cast<uint64_t>(e), negative);
  } else {
    const double r = std::pow(static_cast<double>(static_cast<Compute<T>>(x)),
                              static_cast<double>(static_cast<Compute<E>>(e)));
    return Convert<T>(r);
  }
}

struct NoAttrs {};

absl::Status RunPow(const void*, KernelContext& ctx, Inputs in, Outputs out) {
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, "Pow"));
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  absl::StatusOr<Dims> dims = Broadcast({a.dims(), b.dims()}, "Pow");
  if (!dims.ok()) return dims.status();
  return Dispatch<kNumeric>(a.dtype(), "Pow", [&](auto* base_tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(base_tag)>;
    return Dispatch<kNumeric>(b.dtype(), "Pow", [&](auto* exp_tag) -> absl::Status {
      using E = std::remove_pointer_t<decltype(exp_tag)>;
      DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], a.dtype(), *dims, "Pow"));
      Map2<T, E, T>(a, b, *out[0], [](T x, E e) { return PowValue(x, e); });
      return absl::OkStatus();
    });
  });
}

// ---- variadic ops: Max, Min, Sum, Mean ----

enum class Variadic { kMax, kMin, kSum, kMean };

struct VariadicAttrs {
  Variadic kind;
  const char* name;
};

// The accumulator: the compute type for floats, 64 bits (wrapping) for integers.
template <typename T>
using VariadicAcc = std::conditional_t<kIsFloat<T>, Compute<T>,
                                       std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;

absl::Status RunVariadic(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& va = *static_cast<const VariadicAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, in.size(), out, va.name));
  if (in.empty()) return absl::InvalidArgumentError(absl::StrCat(va.name, ": no inputs"));
  std::vector<absl::Span<const int64_t>> shapes;
  for (const Tensor* t : in) {
    if (t->dtype() != in[0]->dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(va.name, ": inputs differ in dtype (",
                                                     in[0]->DebugString(), " vs ", t->DebugString(),
                                                     ")"));
    }
    shapes.push_back(t->dims());
  }
  DYNVM_ASSIGN_OR_RETURN(Dims dims, Broadcast(shapes, va.name));
  return Dispatch<kNumeric>(in[0]->dtype(), va.name, [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = VariadicAcc<T>;
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], in[0]->dtype(), dims, va.name));
    Tensor& y = *out[0];
    const int64_t n = y.numel();
    if (n == 0) return absl::OkStatus();
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(static_cast<size_t>(n) * sizeof(A)));
    A* acc = static_cast<A*>(ws);
    for (size_t k = 0; k < in.size(); ++k) {
      const Tensor& x = *in[k];
      const T* px = x.data<T>();
      const Dims sx = BroadcastStrides(x, y.dims());
      int64_t o = 0;
      ForEachOffset<1>(y.dims(), {absl::MakeConstSpan(sx)}, [&](int64_t i) {
        const A v = static_cast<A>(static_cast<Compute<T>>(px[i]));
        A& r = acc[o++];
        if (k == 0) {
          r = v;
        } else {
          switch (va.kind) {
            case Variadic::kMax:
              r = MaxOf(r, v);
              break;
            case Variadic::kMin:
              r = MinOf(r, v);
              break;
            default:
              r = Plus(r, v);
              break;
          }
        }
      });
    }
    T* py = y.data<T>();
    const A count = static_cast<A>(in.size());
    for (int64_t i = 0; i < n; ++i) {
      py[i] = static_cast<T>(va.kind == Variadic::kMean ? acc[i] / count : acc[i]);
    }
    return absl::OkStatus();
  });
}

// ---- unary ops: `C operator()(C x)` in the compute type ----

struct FloatUnary : OpTraits {
  static constexpr unsigned kTypes = kFloats;
};

#define ELEM_FLOAT_UNARY(Name, expr)            \
  struct Name##Op : FloatUnary {                \
    static constexpr const char* kName = #Name; \
    template <typename C>                       \
    C operator()(C x) const {                   \
      return expr;                              \
    }                                           \
  };
ELEM_FLOAT_UNARY(Sqrt, std::sqrt(x))
ELEM_FLOAT_UNARY(Exp, std::exp(x))
ELEM_FLOAT_UNARY(Log, std::log(x))
ELEM_FLOAT_UNARY(Erf, std::erf(x))
ELEM_FLOAT_UNARY(Tanh, std::tanh(x))
ELEM_FLOAT_UNARY(Sin, std::sin(x))
ELEM_FLOAT_UNARY(Cos, std::cos(x))
ELEM_FLOAT_UNARY(Tan, std::tan(x))
ELEM_FLOAT_UNARY(Asin, std::asin(x))
ELEM_FLOAT_UNARY(Acos, std::acos(x))
ELEM_FLOAT_UNARY(Atan, std::atan(x))
ELEM_FLOAT_UNARY(Sinh, std::sinh(x))
ELEM_FLOAT_UNARY(Cosh, std::cosh(x))
ELEM_FLOAT_UNARY(Asinh, std::asinh(x))
ELEM_FLOAT_UNARY(Acosh, std::acosh(x))
ELEM_FLOAT_UNARY(Atanh, std::atanh(x))
ELEM_FLOAT_UNARY(Floor, std::floor(x))
ELEM_FLOAT_UNARY(Ceil, std::ceil(x))
ELEM_FLOAT_UNARY(Reciprocal, C(1) / x)
ELEM_FLOAT_UNARY(Softsign, x / (C(1) + std::abs(x)))
ELEM_FLOAT_UNARY(HardSwish, (x * std::max(C(0), std::min(C(1), x / C(6) + C(0.5)))))
// Overflow-free forms.
ELEM_FLOAT_UNARY(Sigmoid,
                 x >= C(0) ? C(1) / (C(1) + std::exp(-x)) : std::exp(x) / (C(1) + std::exp(x)))
ELEM_FLOAT_UNARY(Softplus, x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)))
// Opset 18: x tanh(softplus(x)).
ELEM_FLOAT_UNARY(Mish,
                 x* std::tanh(x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x))))
#undef ELEM_FLOAT_UNARY

struct RoundOp : FloatUnary {  // half to even, independent of the FP rounding mode
  static constexpr const char* kName = "Round";
  template <typename C>
  C operator()(C x) const {
    const C r = std::round(x);  // half away from zero
    if (std::abs(x - std::trunc(x)) == C(0.5)) return C(2) * std::round(x / C(2));
    return r;
  }
};
struct NegOp : OpTraits {
  static constexpr const char* kName = "Neg";
  static constexpr unsigned kTypes = kSignedNumeric;
  template <typename C>
  C operator()(C x) const {
    return Negate(x);
  }
};
struct AbsOp : OpTraits {
  static constexpr const char* kName = "Abs";
  static constexpr unsigned kTypes = kNumeric;
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) {
      return x;
    } else if constexpr (kIsInt<C>) {
      return x < C(0) ? Negate(x) : x;
    } else {
      return std::abs(x);
    }
  }
};
struct SignOp : OpTraits {
  static constexpr const char* kName = "Sign";
  static constexpr unsigned kTypes = kNumeric;
  template <typename C>
  C operator()(C x) const {
    if (x > C(0)) return C(1);
    if constexpr (!std::is_unsigned_v<C>) {
      if (x < C(0)) return C(-1);
    }
    return x == C(0) ? C(0) : x;  // NaN stays NaN
  }
};
struct ReluOp : OpTraits {
  static constexpr const char* kName = "Relu";
  static constexpr unsigned kTypes = kSignedNumeric;
  template <typename C>
  C operator()(C x) const {
    return x < C(0) ? C(0) : x;
  }  // NaN stays
};
struct NotOp : OpTraits {
  static constexpr const char* kName = "Not";
  static constexpr unsigned kTypes = kBool;
  bool operator()(bool x) const { return !x; }
};
struct BitwiseNotOp : OpTraits {
  static constexpr const char* kName = "BitwiseNot";
  static constexpr unsigned kTypes = kInts;
  template <typename C>
  C operator()(C x) const {
    return static_cast<C>(~x);
  }
};
struct IsNaNOp : FloatUnary {
  static constexpr const char* kName = "IsNaN";
  static constexpr bool kBoolOut = true;
  template <typename C>
  bool operator()(C x) const {
    return std::isnan(x);
  }
};
struct IsInfOp : FloatUnary {
  static constexpr const char* kName = "IsInf";
  static constexpr bool kBoolOut = true;
  bool negative = true, positive = true;
  template <typename C>
  bool operator()(C x) const {
    return std::isinf(x) && (x > C(0) ? positive : negative);
  }
};
struct LeakyReluOp : FloatUnary {
  static constexpr const char* kName = "LeakyRelu";
  float alpha = 0.01f;
  template <typename C>
  C operator()(C x) const {
    return x < C(0) ? C(alpha) * x : x;
  }
};
struct EluOp : FloatUnary {
  static constexpr const char* kName = "Elu";
  float alpha = 1.0f;
  template <typename C>
  C operator()(C x) const {
    return x < C(0) ? C(alpha) * std::expm1(x) : x;
  }
};
struct SeluOp : FloatUnary {
  static constexpr const char* kName = "Selu";
  float alpha = 1.67326319217681884765625f, gamma = 1.05070102214813232421875f;
  template <typename C>
  C operator()(C x) const {
    return x > C(0) ? C(gamma) * x : C(gamma) * (C(alpha) * std::exp(x) - C(alpha));
  }
};
struct CeluOp : FloatUnary {
  static constexpr const char* kName = "Celu";
  float alpha = 1.0f;
  template <typename C>
  C operator()(C x) const {
    if (std::isnan(x)) return x;
    return std::max(C(0), x) + std::min(C(0), C(alpha) * std::expm1(x / C(alpha)));
  }
};
struct HardSigmoidOp : FloatUnary {
  static constexpr const char* kName = "HardSigmoid";
  float alpha = 0.2f, beta = 0.5f;
  template <typename C>
  C operator()(C x) const {
    if (std::isnan(x)) return x;
    return std::max(C(0), std::min(C(1), C(alpha) * x + C(beta)));
  }
};
struct ThresholdedReluOp : FloatUnary {
  static constexpr const char* kName = "ThresholdedRelu";
  float alpha = 1.0f;
  template <typename C>
  C operator()(C x) const {
    return x > C(alpha) ? x : C(0);
  }
};

template <typename Op>
absl::Status RunUnary(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const Op& op = *static_cast<const Op*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, Op::kName));
  const Tensor& x = *in[0];
  return Dispatch<Op::kTypes>(x.dtype(), Op::kName, [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    using TO = std::conditional_t<Op::kBoolOut, bool, T>;
    DYNVM_RETURN_IF_ERROR(
        PrepareOutput(ctx, out[0], Op::kBoolOut ? DType::kBool : x.dtype(), x.dims(), Op::kName));
    Map1<T, TO>(x, *out[0], [&op](T v) { return static_cast<TO>(op(static_cast<Compute<T>>(v))); });
    return absl::OkStatus();
  });
}

// ---- Clip, Where ----

struct ClipAttrs {
  std::optional<float> min, max;  // opset < 11 attributes
};

absl::Status RunClip(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& ca = *static_cast<const ClipAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "Clip"));
  const Tensor& x = *in[0];
  return Dispatch<kNumeric>(x.dtype(), "Clip", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    using C = Compute<T>;
    C lo = std::numeric_limits<C>::lowest(), hi = std::numeric_limits<C>::max();
    if constexpr (kIsFloat<T>) {
      lo = -std::numeric_limits<C>::infinity();
      hi = std::numeric_limits<C>::infinity();
    }
    if (ca.min) lo = static_cast<C>(Convert<T>(*ca.min));
    if (ca.max) hi = static_cast<C>(Convert<T>(*ca.max));
    for (int k = 1; k <= 2; ++k) {
      if (in.size() <= static_cast<size_t>(k) || in[k] == nullptr) continue;
      if (in[k]->dtype() != x.dtype()) {
        return absl::InvalidArgumentError(absl::StrCat("Clip: bound ", in[k]->DebugString(),
                                                       " differs in dtype from ", x.DebugString()));
      }
      absl::StatusOr<T> v = ReadScalar<T>(*in[k], "Clip", k == 1 ? "min" : "max");
      if (!v.ok()) return v.status();
      (k == 1 ? lo : hi) = static_cast<C>(*v);
    }
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), x.dims(), "Clip"));
    // min > max gives max everywhere, as ONNX specifies; NaN stays NaN.
    Map1<T, T>(x, *out[0], [lo, hi](T v) {
      C c = static_cast<C>(v);
      if (c < lo) c = lo;
      if (c > hi) c = hi;
      return static_cast<T>(c);
    });
    return absl::OkStatus();
  });
}

absl::Status RunWhere(const void*, KernelContext& ctx, Inputs in, Outputs out) {
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 3, out, "Where"));
  const Tensor& c = *in[0];
  const Tensor& a = *in[1];
  const Tensor& b = *in[2];
  if (c.dtype() != DType::kBool || a.dtype() != b.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("Where: bad operand dtypes ", c.DebugString(),
                                                   ", ", a.DebugString(), ", ", b.DebugString()));
  }
  absl::StatusOr<Dims> dims = Broadcast({c.dims(), a.dims(), b.dims()}, "Where");
  if (!dims.ok()) return dims.status();
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], a.dtype(), *dims, "Where"));
  Tensor& y = *out[0];
  const Dims sc = BroadcastStrides(c, y.dims());
  const Dims sa = BroadcastStrides(a, y.dims());
  const Dims sb = BroadcastStrides(b, y.dims());
  return Dispatch<kAll>(a.dtype(), "Where", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    const bool* pc = c.data<bool>();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* py = y.data<T>();
    int64_t o = 0;
    ForEachOffset<3>(y.dims(),
                     {absl::MakeConstSpan(sc), absl::MakeConstSpan(sa), absl::MakeConstSpan(sb)},
                     [&](int64_t ic, int64_t ia, int64_t ib) {
                       py[o++] = Get(pc, ic) ? Get(pa, ia) : Get(pb, ib);
                     });
    return absl::OkStatus();
  });
}

// ---- Cast, CastLike, Identity, Dropout ----

// ONNX TensorProto.DataType -> DType, for the types dynvm has.
std::optional<DType> FromOnnxDataType(int64_t t) {
  constexpr std::optional<DType> kNone = std::nullopt;
  static constexpr std::optional<DType> kByOnnx[] = {
      kNone,       DType::kF32, DType::kU8, DType::kI8,   DType::kU16, DType::kI16,
      DType::kI32, DType::kI64, kNone,      DType::kBool, DType::kF16, DType::kF64,
      DType::kU32, DType::kU64, kNone,      kNone,        DType::kBF16};  // 8: string
  if (t < 0 || t >= static_cast<int64_t>(std::size(kByOnnx))) return std::nullopt;
  return kByOnnx[t];
}

struct CastAttrs {
  const char* name;
  bool like;                // CastLike
  std::optional<DType> to;  // unset: CastLike takes it from input 1 at run time
};

absl::Status CastTensor(const Tensor& x, Tensor& y, absl::string_view op) {
  return DispatchNumeric(x.dtype(), op, [&](auto* from_tag) {
    using From = std::remove_pointer_t<decltype(from_tag)>;
    return DispatchNumeric(y.dtype(), op, [&](auto* to_tag) {
      using To = std::remove_pointer_t<decltype(to_tag)>;
      Map1<From, To>(x, y, [](From v) { return Convert<To>(v); });
      return absl::OkStatus();
    });
  });
}

absl::Status RunCast(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& ca = *static_cast<const CastAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, ca.like ? 2 : 1, out, ca.name));
  const DType to = ca.to ? *ca.to : in[1]->dtype();
  if ((ClassOf(to) & kAll) == 0) return Unsupported(ca.name, to);
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], to, in[0]->dims(), ca.name));
  if (in[0]->dtype() == to) return CopyTensor(*in[0], *out[0], ca.name);
  return CastTensor(*in[0], *out[0], ca.name);
}

absl::Status RunIdentity(const void*, KernelContext& ctx, Inputs in, Outputs out) {
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "Identity"));
  const Tensor& x = *in[0];
  if ((ClassOf(x.dtype()) & kAll) == 0) return Unsupported("Identity", x.dtype());
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), x.dims(), "Identity"));
  return CopyTensor(x, *out[0], "Identity");
}

struct DropoutAttrs {
  float ratio = 0.5f;               // opset < 12 attribute
  DType mask_dtype = DType::kBool;  // bool from opset 10, T before
  std::optional<int64_t> seed;      // training mode: random.cc's TrainingDropout
};

absl::Status RunDropout(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& da = *static_cast<const DropoutAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "Dropout"));
  const Tensor& x = *in[0];
  if (in.size() > 2 && in[2] != nullptr) {
    if (in[2]->dtype() != DType::kBool) {
      return absl::InvalidArgumentError("Dropout: training_mode must be bool");
    }
    DYNVM_ASSIGN_OR_RETURN(bool training, ReadScalar<bool>(*in[2], "Dropout", "training_mode"));
    double ratio = da.ratio;
    if (training && in.size() > 1 && in[1] != nullptr) {
      DYNVM_RETURN_IF_ERROR(Dispatch<kFloats>(in[1]->dtype(), "Dropout", [&](auto* tag) {
        using R = std::remove_pointer_t<decltype(tag)>;
        DYNVM_ASSIGN_OR_RETURN(R r, ReadScalar<R>(*in[1], "Dropout", "ratio"));
        ratio = static_cast<double>(static_cast<Compute<R>>(r));
        return absl::OkStatus();
      }));
    }
    if (training && ratio != 0) {
      return TrainingDropout(ctx, x, ratio, da.seed, out[0], out.size() > 1 ? out[1] : nullptr,
                             da.mask_dtype);
    }
  }
  if ((ClassOf(x.dtype()) & kAll) == 0) return Unsupported("Dropout", x.dtype());
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], x.dtype(), x.dims(), "Dropout"));
  DYNVM_RETURN_IF_ERROR(CopyTensor(x, *out[0], "Dropout"));
  if (out.size() < 2 || out[1] == nullptr) return absl::OkStatus();
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[1], da.mask_dtype, x.dims(), "Dropout"));
  Tensor& mask = *out[1];
  return Dispatch<kAll>(mask.dtype(), "Dropout", [&](auto* tag) {
    using M = std::remove_pointer_t<decltype(tag)>;
    const M one = Convert<M>(true);
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data<M>()[i] = one;
    return absl::OkStatus();
  });
}

// ---- registration ----

template <typename A>
std::unique_ptr<Kernel> MakeKernel(const KernelSpec& spec, FunctionKernel::RunFn run, A attrs) {
  return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), run,
                                          std::make_shared<const A>(std::move(attrs)));
}

void Add(KernelRegistry& r, const char* op, KernelFactory factory) {
  r.Register(KernelRegistration{"", op, Device::kCPU, "reference", kReferencePriority,
                                std::move(factory)});
}

// Unary ops configured by `configure(spec, op)` (attributes).
template <typename Op, typename Configure>
void AddUnary(KernelRegistry& r, Configure configure) {
  Add(r, Op::kName, [configure](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 1, 1, 1));
    DYNVM_RETURN_IF_ERROR(CheckPort(spec, spec.inputs[0], Op::kTypes));
    Op op;
    DYNVM_RETURN_IF_ERROR(configure(spec, op));
    return MakeKernel(spec, &RunUnary<Op>, std::move(op));
  });
}
template <typename Op>
void AddUnary(KernelRegistry& r) {
  AddUnary<Op>(r, [](const KernelSpec&, Op&) { return absl::OkStatus(); });
}

// Reads float attribute `name` into *field (keeping its default when absent).
absl::Status ReadFloat(const KernelSpec& spec, absl::string_view name, float* field) {
  DYNVM_ASSIGN_OR_RETURN(float v, spec.GetFloat(name, *field));
  *field = v;
  return absl::OkStatus();
}

template <typename Op, typename Configure>
void AddBinary(KernelRegistry& r, Configure configure) {
  Add(r, Op::kName, [configure](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    DYNVM_RETURN_IF_ERROR(CheckArity(spec, 2, 2, 1, 1));
    DYNVM_RETURN_IF_ERROR(CheckPort(spec, spec.inputs[0], Op::kTypes));
    DYNVM_RETURN_IF_ERROR(CheckSame(spec, 0, 1));
    Op op;
    DYNVM_RETURN_IF_ERROR(configure(spec, op));
    return MakeKernel(spec, &RunBinary<Op>, std::move(op));
  });
}
template <typename Op>
void AddBinary(KernelRegistry& r) {
  AddBinary<Op>(r, [](const KernelSpec&, Op&) { return absl::OkStatus(); });
}

void AddVariadic(KernelRegistry& r, const char* name, Variadic kind) {
  Add(r, name, [name, kind](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, std::numeric_limits<size_t>::max(), 1, 1));
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      DYNVM_RETURN_IF_ERROR(CheckPort(spec, spec.inputs[i], kNumeric));
      DYNVM_RETURN_IF_ERROR(CheckSame(spec, 0, i));
    }
    return MakeKernel(spec, &RunVariadic, VariadicAttrs{kind, name});
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeCast(const KernelSpec& spec, bool like) {
  const char* name = like ? "CastLike" : "Cast";
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, like ? 2 : 1, like ? 2 : 1, 1, 1));
  DYNVM_RETURN_IF_ERROR(CheckPort(spec, spec.inputs[0], kAll));
  CastAttrs attrs{name, like, std::nullopt};
  if (spec.outputs[0].dtype != kAnyDType) {
    attrs.to = spec.output_dtype(0);  // authoritative
  } else if (like && spec.inputs[1].dtype != kAnyDType) {
    attrs.to = spec.input_dtype(1);
  } else if (!like) {
    if (spec.Find("to") == nullptr) {
      return absl::InvalidArgumentError("Cast: attribute 'to' is required");
    }
    absl::StatusOr<int64_t> to = spec.GetInt("to", 0);
    if (!to.ok()) return to.status();
    attrs.to = FromOnnxDataType(*to);
    if (!attrs.to)
      return absl::UnimplementedError(absl::StrCat("Cast: to=", *to, " not supported"));
  }
  if (attrs.to)
    DYNVM_RETURN_IF_ERROR(
        CheckPort(spec, PortSpec{.dtype = static_cast<uint8_t>(*attrs.to)}, kAll));
  return MakeKernel(spec, &RunCast, attrs);
}

// Opset 18's bitwise operators.
void AddBitwise(KernelRegistry& r) {
  AddBinary<BitwiseAndOp>(r);
  AddBinary<BitwiseOrOp>(r);
  AddBinary<BitwiseXorOp>(r);
  AddUnary<BitwiseNotOp>(r);
}

}  // namespace

void RegisterElementwiseKernels(KernelRegistry& r) {
  AddBinary<AddOp>(r);
  AddBinary<SubOp>(r);
  AddBinary<MulOp>(r);
  AddBinary<DivOp>(r);
  AddBinary<ModOp>(r, [](const KernelSpec& spec, ModOp& op) -> absl::Status {
    DYNVM_ASSIGN_OR_RETURN(int64_t fmod, spec.GetInt("fmod", 0));
    if (fmod != 0 && fmod != 1) {
      return absl::InvalidArgumentError(absl::StrCat("Mod: fmod must be 0 or 1, got ", fmod));
    }
    op.fmod = fmod == 1;
    return absl::OkStatus();
  });
  AddBinary<EqualOp>(r);
  AddBinary<GreaterOp>(r);
  AddBinary<LessOp>(r);
  AddBinary<GreaterOrEqualOp>(r);
  AddBinary<LessOrEqualOp>(r);
  AddBinary<AndOp>(r);
  AddBitwise(r);
  AddBinary<OrOp>(r);
  AddBinary<XorOp>(r);
  AddBinary<BitShiftOp>(r, [](const KernelSpec& spec, BitShiftOp& op) -> absl::Status {
    DYNVM_ASSIGN_OR_RETURN(std::string dir, spec.GetString("direction", ""));
    if (dir != "LEFT" && dir != "RIGHT") {
      return absl::InvalidArgumentError(
          absl::StrCat("BitShift: direction must be LEFT or RIGHT, got '", dir, "'"));
    }
    op.left = dir == "LEFT";
    return absl::OkStatus();
  });
  AddBinary<PReluOp>(r);
  Add(r, "Pow", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    DYNVM_RETURN_IF_ERROR(CheckArity(spec, 2, 2, 1, 1));
    DYNVM_RETURN_IF_ERROR(CheckPort(spec, spec.inputs[0], kNumeric));
    DYNVM_RETURN_IF_ERROR(CheckPort(spec, spec.inputs[1], kNumeric));
    return MakeKernel(spec, &RunPow, NoAttrs{});
  });
  AddVariadic(r, "Max", Variadic::kMax);
  AddVariadic(r, "Min", Variadic::kMin);
  AddVariadic(r, "Sum", Variadic::kSum);
  AddVariadic(r, "Mean", Variadic::kMean);

  AddUnary<SqrtOp>(r);
  AddUnary<ExpOp>(r);
  AddUnary<LogOp>(r);
  AddUnary<ErfOp>(r);
  AddUnary<TanhOp>(r);
  AddUnary<SinOp>(r);
  AddUnary<CosOp>(r);
  AddUnary<TanOp>(r);
  AddUnary<AsinOp>(r);
  AddUnary<AcosOp>(r);
  AddUnary<AtanOp>(r);
  AddUnary<SinhOp>(r);
  AddUnary<CoshOp>(r);
  AddUnary<AsinhOp>(r);
  AddUnary<AcoshOp>(r);
  AddUnary<AtanhOp>(r);
  AddUnary<SigmoidOp>(r);
  AddUnary<SoftplusOp>(r);
  AddUnary<SoftsignOp>(r);
  AddUnary<MishOp>(r);
  AddUnary<FloorOp>(r);
  AddUnary<CeilOp>(r);
  AddUnary<RoundOp>(r);
  AddUnary<ReciprocalOp>(r);
  AddUnary<HardSwishOp>(r);
  AddUnary<NegOp>(r);
  AddUnary<AbsOp>(r);
  AddUnary<SignOp>(r);
  AddUnary<ReluOp>(r);
  AddUnary<NotOp>(r);
  AddUnary<IsNaNOp>(r);
  AddUnary<IsInfOp>(r, [](const KernelSpec& spec, IsInfOp& op) -> absl::Status {
    DYNVM_ASSIGN_OR_RETURN(int64_t neg, spec.GetInt("detect_negative", 1));
    DYNVM_ASSIGN_OR_RETURN(int64_t pos, spec.GetInt("detect_positive", 1));
    op.negative = neg != 0;
    op.positive = pos != 0;
    return absl::OkStatus();
  });
  AddUnary<LeakyReluOp>(r, [](const KernelSpec& spec, LeakyReluOp& op) {
    return ReadFloat(spec, "alpha", &op.alpha);
  });
  AddUnary<EluOp>(
      r, [](const KernelSpec& spec, EluOp& op) { return ReadFloat(spec, "alpha", &op.alpha); });
  AddUnary<SeluOp>(r, [](const KernelSpec& spec, SeluOp& op) {
    DYNVM_RETURN_IF_ERROR(ReadFloat(spec, "alpha", &op.alpha));
    return ReadFloat(spec, "gamma", &op.gamma);
  });
  AddUnary<CeluOp>(r, [](const KernelSpec& spec, CeluOp& op) -> absl::Status {
    DYNVM_RETURN_IF_ERROR(ReadFloat(spec, "alpha", &op.alpha));
    if (op.alpha == 0) return absl::InvalidArgumentError("Celu: alpha must not be 0");
    return absl::OkStatus();
  });
  AddUnary<HardSigmoidOp>(r, [](const KernelSpec& spec, HardSigmoidOp& op) {
    DYNVM_RETURN_IF_ERROR(ReadFloat(spec, "alpha", &op.alpha));
    return ReadFloat(spec, "beta", &op.beta);
  });
  AddUnary<ThresholdedReluOp>(r, [](const KernelSpec& spec, ThresholdedReluOp& op) {
    return ReadFloat(spec, "alpha", &op.alpha);
  });

  Add(r, "Clip", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 3, 1, 1));
    DYNVM_RETURN_IF_ERROR(CheckPort(spec, spec.inputs[0], kNumeric));
    for (size_t i = 1; i < spec.inputs.size(); ++i) {
      DYNVM_RETURN_IF_ERROR(CheckSame(spec, 0, i));
    }
    ClipAttrs attrs;
    for (const char* name : {"min", "max"}) {
      if (spec.Find(name) == nullptr) continue;
      DYNVM_ASSIGN_OR_RETURN(float v, spec.GetFloat(name, 0));
      (name[1] == 'i' ? attrs.min : attrs.max) = v;
    }
    return MakeKernel(spec, &RunClip, attrs);
  });
  Add(r, "Where", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    DYNVM_RETURN_IF_ERROR(CheckArity(spec, 3, 3, 1, 1));
    DYNVM_RETURN_IF_ERROR(CheckPort(spec, spec.inputs[0], kBool));
    DYNVM_RETURN_IF_ERROR(CheckPort(spec, spec.inputs[1], kAll));
    DYNVM_RETURN_IF_ERROR(CheckSame(spec, 1, 2));
    return MakeKernel(spec, &RunWhere, NoAttrs{});
  });
  Add(r, "Cast", [](const KernelSpec& spec) { return MakeCast(spec, /*like=*/false); });
  Add(r, "CastLike", [](const KernelSpec& spec) { return MakeCast(spec, /*like=*/true); });
  Add(r, "Identity", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 1, 1, 1));
    DYNVM_RETURN_IF_ERROR(CheckPort(spec, spec.inputs[0], kAll));
    return MakeKernel(spec, &RunIdentity, NoAttrs{});
  });
  Add(r, "Dropout", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 3, 1, 2));
    DYNVM_RETURN_IF_ERROR(CheckPort(spec, spec.inputs[0], kAll));
    DropoutAttrs attrs;
    DYNVM_RETURN_IF_ERROR(ReadFloat(spec, "ratio", &attrs.ratio));
    if (attrs.ratio < 0 || attrs.ratio >= 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("Dropout: ratio must be in [0, 1), got ", attrs.ratio));
    }
    if (spec.Find("seed") != nullptr) {
      DYNVM_ASSIGN_OR_RETURN(attrs.seed, spec.GetInt("seed", 0));
    }
    if (spec.outputs.size() > 1 && spec.outputs[1].dtype != kAnyDType) {
      attrs.mask_dtype = spec.output_dtype(1);
      DYNVM_RETURN_IF_ERROR(CheckPort(spec, spec.outputs[1], kAll));
    }
    return MakeKernel(spec, &RunDropout, attrs);
  });
}

}  // namespace dynvm::reference
