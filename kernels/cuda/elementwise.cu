// Elementwise kernels: binary ops with broadcasting, unary ops, Where and Cast. Every kernel is
// a grid-stride loop over a strided walk, so broadcast and strided operands need no copies.
// Integer arithmetic wraps (computed in unsigned), as in the reference kernels.
#include <cmath>

#include "kernels/cuda/device_util.cuh"

namespace dynvm::cuda {
namespace {

template <typename T, typename U>
__device__ __forceinline__ T Wrap(U a) {
  return static_cast<T>(a);
}

template <typename T>
struct Arith {
  BinaryOp op;
  __device__ __forceinline__ T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      switch (op) {
        case BinaryOp::kAdd:
          return Wrap<T>(static_cast<U>(a) + static_cast<U>(b));
        case BinaryOp::kSub:
          return Wrap<T>(static_cast<U>(a) - static_cast<U>(b));
        case BinaryOp::kMul:
          return Wrap<T>(static_cast<U>(a) * static_cast<U>(b));
        case BinaryOp::kMax:
          return a < b ? b : a;
        case BinaryOp::kMin:
          return b < a ? b : a;
        default:
          return T(0);
      }
    } else {
      switch (op) {
        case BinaryOp::kAdd:
          return a + b;
        case BinaryOp::kSub:
          return a - b;
        case BinaryOp::kMul:
          return a * b;
        case BinaryOp::kDiv:
          return a / b;
        case BinaryOp::kPow:
          return powf(a, b);
        case BinaryOp::kMax:
          return isnan(a) ? a : (isnan(b) ? b : (a < b ? b : a));
        case BinaryOp::kMin:
          return isnan(a) ? a : (isnan(b) ? b : (b < a ? b : a));
        default:
          return T(0);
      }
    }
  }
};

template <typename T>
struct Compare {
  BinaryOp op;
  __device__ __forceinline__ uint8_t operator()(T a, T b) const {
    switch (op) {
      case BinaryOp::kEqual:
        return a == b;
      case BinaryOp::kLess:
        return a < b;
      case BinaryOp::kGreater:
        return a > b;
      case BinaryOp::kLessOrEqual:
        return a <= b;
      case BinaryOp::kGreaterOrEqual:
        return a >= b;
      default:
        return 0;
    }
  }
};

struct Logic {
  BinaryOp op;
  __device__ __forceinline__ uint8_t operator()(uint8_t a, uint8_t b) const {
    const bool x = a != 0, y = b != 0;
    switch (op) {
      case BinaryOp::kEqual:
        return x == y;
      case BinaryOp::kAnd:
        return x && y;
      case BinaryOp::kOr:
        return x || y;
      case BinaryOp::kXor:
        return x != y;
      default:
        return 0;
    }
  }
};

template <typename In, typename Out, typename Fn>
__global__ void BinaryKernel(Out* out, const In* a, const In* b, Walk<3> walk, int64_t n, Fn fn) {
  DYNVM_GRID_STRIDE_LOOP(i, n) {
    int64_t off[3];
    Offsets(walk, i, off);
    out[off[0]] = fn(a[off[1]], b[off[2]]);
  }
}

template <typename In, typename Out, typename Fn>
cudaError_t LaunchBinary(void* out, const void* a, const void* b, const Walk<3>& walk, int64_t n,
                         cudaStream_t stream, Fn fn) {
  BinaryKernel<In, Out, Fn><<<GridFor(n), kThreads, 0, stream>>>(
      static_cast<Out*>(out), static_cast<const In*>(a), static_cast<const In*>(b), walk, n, fn);
  return cudaGetLastError();
}

bool IsCompare(BinaryOp op) {
  return op == BinaryOp::kEqual || op == BinaryOp::kLess || op == BinaryOp::kGreater ||
         op == BinaryOp::kLessOrEqual || op == BinaryOp::kGreaterOrEqual;
}

template <typename T>
cudaError_t NumericBinary(BinaryOp op, void* out, const void* a, const void* b, const Walk<3>& walk,
                          int64_t n, cudaStream_t stream) {
  if (IsCompare(op)) return LaunchBinary<T, uint8_t>(out, a, b, walk, n, stream, Compare<T>{op});
  switch (op) {
    case BinaryOp::kAdd:
    case BinaryOp::kSub:
    case BinaryOp::kMul:
    case BinaryOp::kMax:
    case BinaryOp::kMin:
      break;
    case BinaryOp::kDiv:
    case BinaryOp::kPow:
      if (std::is_integral_v<T>) return cudaErrorInvalidValue;
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return LaunchBinary<T, T>(out, a, b, walk, n, stream, Arith<T>{op});
}

template <typename T>
struct UnaryFn {
  UnaryOp op;
  __device__ __forceinline__ T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      switch (op) {
        case UnaryOp::kNeg:
          return static_cast<T>(U(0) - static_cast<U>(x));
        case UnaryOp::kAbs:
          return x < T(0) ? static_cast<T>(U(0) - static_cast<U>(x)) : x;
        case UnaryOp::kRelu:
          return x < T(0) ? T(0) : x;
        default:
          return T(0);
      }
    } else {
      switch (op) {
        case UnaryOp::kNeg:
          return -x;
        case UnaryOp::kAbs:
          return fabsf(x);
        case UnaryOp::kExp:
          return expf(x);
        case UnaryOp::kLog:
          return logf(x);
        case UnaryOp::kSqrt:
          return sqrtf(x);
        case UnaryOp::kTanh:
          return tanhf(x);
        case UnaryOp::kSigmoid:  // overflow-free, as the reference
          return x >= 0.0f ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
        case UnaryOp::kRelu:
          return isnan(x) ? x : (x < 0.0f ? 0.0f : x);
        case UnaryOp::kErf:
          return erff(x);
        case UnaryOp::kReciprocal:
          return 1.0f / x;
        case UnaryOp::kFloor:
          return floorf(x);
        case UnaryOp::kCeil:
          return ceilf(x);
        case UnaryOp::kSin:
          return sinf(x);
        case UnaryOp::kCos:
          return cosf(x);
        default:
          return 0.0f;
      }
    }
  }
};

struct NotFn {
  __device__ __forceinline__ uint8_t operator()(uint8_t x) const { return x == 0; }
};

template <typename T, typename Fn>
__global__ void UnaryKernel(T* out, const T* x, Walk<2> walk, int64_t n, Fn fn) {
  DYNVM_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    Offsets(walk, i, off);
    out[off[0]] = fn(x[off[1]]);
  }
}

template <typename T, typename Fn>
cudaError_t LaunchUnary(void* out, const void* x, const Walk<2>& walk, int64_t n,
                        cudaStream_t stream, Fn fn) {
  UnaryKernel<T, Fn><<<GridFor(n), kThreads, 0, stream>>>(static_cast<T*>(out),
                                                          static_cast<const T*>(x), walk, n, fn);
  return cudaGetLastError();
}

template <typename T>
__global__ void WhereKernel(T* out, const uint8_t* cond, const T* a, const T* b, Walk<4> walk,
                            int64_t n) {
  DYNVM_GRID_STRIDE_LOOP(i, n) {
    int64_t off[4];
    Offsets(walk, i, off);
    out[off[0]] = cond[off[1]] != 0 ? a[off[2]] : b[off[3]];
  }
}

// As the reference kernels: float to integer truncates toward zero and saturates (NaN to 0);
// integer to integer wraps; anything to bool is != 0; a bool byte other than 0/1 reads as 1.
template <typename To, typename From>
__device__ __forceinline__ To Convert(From v) {
  if constexpr (std::is_same_v<From, uint8_t>) {  // bool
    return static_cast<To>(v != 0);
  } else if constexpr (std::is_same_v<To, uint8_t>) {
    return v != From(0);
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    static_assert(std::is_same_v<To, int32_t> || std::is_same_v<To, int64_t>);
    constexpr int kDigits = std::is_same_v<To, int32_t> ? 31 : 63;
    constexpr To kMax = static_cast<To>((uint64_t{1} << kDigits) - 1);
    constexpr To kLowest = static_cast<To>(-kMax - 1);
    if (isnan(v)) return To(0);
    const double d = static_cast<double>(v);
    if (d >= ldexp(1.0, kDigits)) return kMax;
    if (d <= static_cast<double>(kLowest) - 1.0) return kLowest;
    return static_cast<To>(d);
  } else {
    return static_cast<To>(v);
  }
}

template <typename To, typename From>
__global__ void CastKernel(To* out, const From* x, Walk<2> walk, int64_t n) {
  DYNVM_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    Offsets(walk, i, off);
    out[off[0]] = Convert<To>(x[off[1]]);
  }
}

template <typename Fn>
cudaError_t ByType(ScalarType t, Fn&& fn) {
  switch (t) {
    case ScalarType::kF32:
      return fn(static_cast<float*>(nullptr));
    case ScalarType::kI32:
      return fn(static_cast<int32_t*>(nullptr));
    case ScalarType::kI64:
      return fn(static_cast<int64_t*>(nullptr));
    case ScalarType::kBool:
      return fn(static_cast<uint8_t*>(nullptr));
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t Binary(BinaryOp op, ScalarType type, void* out, const void* a, const void* b,
                   const Walk<3>& walk, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  switch (type) {
    case ScalarType::kF32:
      return NumericBinary<float>(op, out, a, b, walk, n, stream);
    case ScalarType::kI32:
      return NumericBinary<int32_t>(op, out, a, b, walk, n, stream);
    case ScalarType::kI64:
      return NumericBinary<int64_t>(op, out, a, b, walk, n, stream);
    case ScalarType::kBool:
      if (op != BinaryOp::kEqual && op != BinaryOp::kAnd && op != BinaryOp::kOr &&
          op != BinaryOp::kXor) {
        return cudaErrorInvalidValue;
      }
      return LaunchBinary<uint8_t, uint8_t>(out, a, b, walk, n, stream, Logic{op});
  }
  return cudaErrorInvalidValue;
}

cudaError_t Unary(UnaryOp op, ScalarType type, void* out, const void* x, const Walk<2>& walk,
                  int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  switch (type) {
    case ScalarType::kF32:
      if (op == UnaryOp::kNot) return cudaErrorInvalidValue;
      return LaunchUnary<float>(out, x, walk, n, stream, UnaryFn<float>{op});
    case ScalarType::kI32:
    case ScalarType::kI64:
      if (op != UnaryOp::kNeg && op != UnaryOp::kAbs && op != UnaryOp::kRelu) {
        return cudaErrorInvalidValue;
      }
      return type == ScalarType::kI32
                 ? LaunchUnary<int32_t>(out, x, walk, n, stream, UnaryFn<int32_t>{op})
                 : LaunchUnary<int64_t>(out, x, walk, n, stream, UnaryFn<int64_t>{op});
    case ScalarType::kBool:
      if (op != UnaryOp::kNot) return cudaErrorInvalidValue;
      return LaunchUnary<uint8_t>(out, x, walk, n, stream, NotFn{});
  }
  return cudaErrorInvalidValue;
}

cudaError_t Where(void* out, const uint8_t* cond, const void* a, const void* b, int element_size,
                  const Walk<4>& walk, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  auto launch = [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    WhereKernel<T><<<GridFor(n), kThreads, 0, stream>>>(
        static_cast<T*>(out), cond, static_cast<const T*>(a), static_cast<const T*>(b), walk, n);
    return cudaGetLastError();
  };
  switch (element_size) {
    case 1:
      return launch(static_cast<uint8_t*>(nullptr));
    case 2:
      return launch(static_cast<uint16_t*>(nullptr));
    case 4:
      return launch(static_cast<uint32_t*>(nullptr));
    case 8:
      return launch(static_cast<uint64_t*>(nullptr));
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t Cast(void* out, ScalarType to, const void* x, ScalarType from, const Walk<2>& walk,
                 int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return ByType(to, [&](auto* to_tag) {
    using To = std::remove_pointer_t<decltype(to_tag)>;
    return ByType(from, [&](auto* from_tag) {
      using From = std::remove_pointer_t<decltype(from_tag)>;
      CastKernel<To, From><<<GridFor(n), kThreads, 0, stream>>>(
          static_cast<To*>(out), static_cast<const From*>(x), walk, n);
      return cudaGetLastError();
    });
  });
}

}  // namespace dynvm::cuda
