// Elementwise microkernels (elementwise.h): loops the compiler vectorizes, one body per op
// instantiated for each level (target.h).
#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu {
namespace {

// bs >= 0: b's rows are bs apart; bs < 0: b is one scalar.
template <BinaryOp kOp>
DYNVM_ALWAYS_INLINE float Apply(float a, float b) {
  if constexpr (kOp == BinaryOp::kAdd) return a + b;
  if constexpr (kOp == BinaryOp::kSub) return a - b;
  if constexpr (kOp == BinaryOp::kMul) return a * b;
  return a / b;
}

template <BinaryOp kOp>
DYNVM_ALWAYS_INLINE void BinaryBody(int64_t rows, int64_t n, const float* a, const float* b,
                                    int64_t bs, float* y) {
  if (bs < 0) {
    const float s = b[0];
    DYNVM_IVDEP
    for (int64_t j = 0; j < rows * n; ++j) y[j] = Apply<kOp>(a[j], s);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* ar = a + r * n;
    const float* br = b + r * bs;
    float* yr = y + r * n;
    DYNVM_IVDEP
    for (int64_t j = 0; j < n; ++j) yr[j] = Apply<kOp>(ar[j], br[j]);
  }
}

DYNVM_ALWAYS_INLINE void BinaryRowsBody(BinaryOp op, int64_t rows, int64_t n, const float* a,
                                        const float* b, int64_t bs, float* y) {
  switch (op) {
    case BinaryOp::kAdd:
      return BinaryBody<BinaryOp::kAdd>(rows, n, a, b, bs, y);
    case BinaryOp::kSub:
      return BinaryBody<BinaryOp::kSub>(rows, n, a, b, bs, y);
    case BinaryOp::kMul:
      return BinaryBody<BinaryOp::kMul>(rows, n, a, b, bs, y);
    case BinaryOp::kDiv:
      return BinaryBody<BinaryOp::kDiv>(rows, n, a, b, bs, y);
  }
}

// y[j] = a[j * sa] op b[j * sb], j < n: vector loops where sa and sb are 0 or 1 (both 0: one
// value computed once), a scalar loop at other steps.
template <BinaryOp kOp>
DYNVM_ALWAYS_INLINE void StridedRowBody(int64_t n, const float* a, int64_t sa, const float* b,
                                        int64_t sb, float* y) {
  if (sa == 1 && sb == 1) {
    DYNVM_IVDEP
    for (int64_t j = 0; j < n; ++j) y[j] = Apply<kOp>(a[j], b[j]);
  } else if (sa == 1 && sb == 0) {
    const float s = b[0];
    DYNVM_IVDEP
    for (int64_t j = 0; j < n; ++j) y[j] = Apply<kOp>(a[j], s);
  } else if (sa == 0 && sb == 1) {
    const float s = a[0];
    DYNVM_IVDEP
    for (int64_t j = 0; j < n; ++j) y[j] = Apply<kOp>(s, b[j]);
  } else if (sa == 0 && sb == 0) {
    const float v = Apply<kOp>(a[0], b[0]);
    DYNVM_IVDEP
    for (int64_t j = 0; j < n; ++j) y[j] = v;
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] = Apply<kOp>(a[j * sa], b[j * sb]);
  }
}

DYNVM_ALWAYS_INLINE void BinaryStridedRowBody(BinaryOp op, int64_t n, const float* a, int64_t sa,
                                              const float* b, int64_t sb, float* y) {
  switch (op) {
    case BinaryOp::kAdd:
      return StridedRowBody<BinaryOp::kAdd>(n, a, sa, b, sb, y);
    case BinaryOp::kSub:
      return StridedRowBody<BinaryOp::kSub>(n, a, sa, b, sb, y);
    case BinaryOp::kMul:
      return StridedRowBody<BinaryOp::kMul>(n, a, sa, b, sb, y);
    case BinaryOp::kDiv:
      return StridedRowBody<BinaryOp::kDiv>(n, a, sa, b, sb, y);
  }
}

// x_scalar / y_scalar: x or y is one value.
template <bool kXScalar, bool kYScalar>
DYNVM_ALWAYS_INLINE void WhereBody(int64_t n, const uint8_t* c, const float* x, const float* y,
                                   float* out) {
  DYNVM_IVDEP
  for (int64_t j = 0; j < n; ++j) {
    // Both loaded unconditionally: a select the compiler can vectorize.
    const float xv = kXScalar ? x[0] : x[j], yv = kYScalar ? y[0] : y[j];
    out[j] = c[j] != 0 ? xv : yv;
  }
}

DYNVM_ALWAYS_INLINE void WhereBlocksBody(int64_t blocks, int64_t n, const uint8_t* cond,
                                         int64_t cond_step, const float* x, int64_t x_step,
                                         const float* y, int64_t y_step, float* out) {
  const bool xs = x_step < 0, ys = y_step < 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* c = cond + b * cond_step;
    const float* xb = xs ? x : x + b * x_step;
    const float* yb = ys ? y : y + b * y_step;
    float* o = out + b * n;
    if (!xs && !ys) {
      WhereBody<false, false>(n, c, xb, yb, o);
    } else if (xs && !ys) {
      WhereBody<true, false>(n, c, xb, yb, o);
    } else if (!xs) {
      WhereBody<false, true>(n, c, xb, yb, o);
    } else {
      WhereBody<true, true>(n, c, xb, yb, o);
    }
  }
}

DYNVM_ALWAYS_INLINE void UnaryBody(UnaryOp op, float alpha, int64_t n, const float* x, float* y) {
  switch (op) {
    case UnaryOp::kRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
      break;
    case UnaryOp::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? alpha * x[i] : x[i];
      break;
    case UnaryOp::kAbs:
      for (int64_t i = 0; i < n; ++i) y[i] = std::fabs(x[i]);
      break;
    case UnaryOp::kNeg:
      for (int64_t i = 0; i < n; ++i) y[i] = -x[i];
      break;
    case UnaryOp::kSqrt:
      for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]);
      break;
  }
}

DYNVM_ALWAYS_INLINE void AddToBody(int64_t n, const float* x, float* y) {
  for (int64_t j = 0; j < n; ++j) y[j] += x[j];
}

DYNVM_ALWAYS_INLINE void FillWhereBody(int64_t n, const bool* m, bool when, float fill, float* y) {
  for (int64_t j = 0; j < n; ++j) y[j] = m[j] == when ? fill : y[j];
}

DYNVM_ALWAYS_INLINE bool AnyNaNBody(int64_t n, const uint32_t* p) {
  uint32_t any = 0;
  for (int64_t i = 0; i < n; ++i) any |= (p[i] & 0x7fffffffu) > 0x7f800000u ? 1u : 0u;
  return any != 0;
}

DYNVM_ALWAYS_INLINE bool AnyAbsAtLeastBody(int64_t n, const int32_t* v, int32_t limit) {
  uint32_t m = 0;  // unsigned: |INT32_MIN| is 2^31
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(v[i]);
    const uint32_t a = v[i] < 0 ? 0u - u : u;
    m = std::max(m, a);
  }
  return m >= static_cast<uint32_t>(limit);
}

DYNVM_ALWAYS_INLINE void MaxOverTapsBody(int64_t c, const float* x, const int64_t* taps,
                                         int64_t n_taps, float* y) {
  const float* first = x + taps[0];
  for (int64_t j = 0; j < c; ++j) y[j] = first[j];
  for (int64_t t = 1; t < n_taps; ++t) {
    const float* p = x + taps[t];
    DYNVM_IVDEP
    for (int64_t j = 0; j < c; ++j) {
      const float v = p[j], m = y[j];
      y[j] = (v > m || v != v) ? v : m;
    }
  }
}

// One function per level for each body (ATTR: the level's target attribute, or nothing).
#define DYNVM_ELEMENTWISE_LEVEL(ATTR, SUFFIX)                                                      \
  ATTR void BinaryRows##SUFFIX(BinaryOp op, int64_t rows, int64_t n, const float* a,               \
                               const float* b, int64_t bs, float* y) {                             \
    BinaryRowsBody(op, rows, n, a, b, bs, y);                                                      \
  }                                                                                                \
  ATTR void BinaryStridedRow##SUFFIX(BinaryOp op, int64_t n, const float* a, int64_t sa,           \
                                     const float* b, int64_t sb, float* y) {                       \
    BinaryStridedRowBody(op, n, a, sa, b, sb, y);                                                  \
  }                                                                                                \
  ATTR void WhereBlocks##SUFFIX(int64_t blocks, int64_t n, const uint8_t* cond, int64_t cond_step, \
                                const float* x, int64_t x_step, const float* y, int64_t y_step,    \
                                float* out) {                                                      \
    WhereBlocksBody(blocks, n, cond, cond_step, x, x_step, y, y_step, out);                        \
  }                                                                                                \
  ATTR void Unary##SUFFIX(UnaryOp op, float alpha, int64_t n, const float* x, float* y) {          \
    UnaryBody(op, alpha, n, x, y);                                                                 \
  }                                                                                                \
  ATTR void AddTo##SUFFIX(int64_t n, const float* x, float* y) { AddToBody(n, x, y); }             \
  ATTR void FillWhere##SUFFIX(int64_t n, const bool* m, bool when, float fill, float* y) {         \
    FillWhereBody(n, m, when, fill, y);                                                            \
  }                                                                                                \
  ATTR bool AnyNaN##SUFFIX(int64_t n, const uint32_t* p) { return AnyNaNBody(n, p); }              \
  ATTR bool AnyAbsAtLeast##SUFFIX(int64_t n, const int32_t* v, int32_t limit) {                    \
    return AnyAbsAtLeastBody(n, v, limit);                                                         \
  }                                                                                                \
  ATTR void MaxOverTaps##SUFFIX(int64_t c, const float* x, const int64_t* taps, int64_t n_taps,    \
                                float* y) {                                                        \
    MaxOverTapsBody(c, x, taps, n_taps, y);                                                        \
  }

DYNVM_ELEMENTWISE_LEVEL(, Portable)
#if DYNVM_CPU_X86
DYNVM_ELEMENTWISE_LEVEL(DYNVM_AVX2_LOOPS, Avx2)
DYNVM_ELEMENTWISE_LEVEL(DYNVM_AVX512_LOOPS, Avx512)
#endif
#undef DYNVM_ELEMENTWISE_LEVEL

#define DYNVM_ELEMENTWISE_FILL(SUFFIX)               \
  d->binary_rows = &BinaryRows##SUFFIX;              \
  d->binary_strided_row = &BinaryStridedRow##SUFFIX; \
  d->where_blocks = &WhereBlocks##SUFFIX;            \
  d->unary = &Unary##SUFFIX;                         \
  d->add_to = &AddTo##SUFFIX;                        \
  d->fill_where = &FillWhere##SUFFIX;                \
  d->any_nan = &AnyNaN##SUFFIX;                      \
  d->any_abs_at_least = &AnyAbsAtLeast##SUFFIX;      \
  d->max_over_taps = &MaxOverTaps##SUFFIX;

}  // namespace

namespace internal {

void FillElementwise(Isa isa, Dispatch* d) {
  DYNVM_ELEMENTWISE_FILL(Portable)
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) {
    DYNVM_ELEMENTWISE_FILL(Avx2)
  }
  if (isa >= Isa::kAvx512) {
    DYNVM_ELEMENTWISE_FILL(Avx512)
  }
#endif
}

}  // namespace internal

void BinaryRows(BinaryOp op, int64_t rows, int64_t n, const float* a, const float* b,
                int64_t b_row_stride, float* y) {
  internal::Table().binary_rows(op, rows, n, a, b, b_row_stride, y);
}

void BinaryStrided(BinaryOp op, int rank, const int64_t* dims, const float* a,
                   const int64_t* a_strides, const float* b, const int64_t* b_strides,
                   int64_t begin, int64_t end, float* y) {
  if (begin >= end || rank < 1 || rank > 8) return;
  const int last = rank - 1;
  const int64_t n = dims[last];
  if (n <= 0) return;
  // The multi-index of `begin`, and a's and b's offsets there.
  int64_t index[8] = {};
  int64_t oa = 0, ob = 0;
  for (int64_t rest = begin, d = last; d >= 0; --d) {
    index[d] = rest % dims[d];
    rest /= dims[d];
    oa += index[d] * a_strides[d];
    ob += index[d] * b_strides[d];
  }
  const auto row = internal::Table().binary_strided_row;
  for (int64_t e = begin; e < end;) {
    const int64_t count = std::min(end - e, n - index[last]);
    row(op, count, a + oa, a_strides[last], b + ob, b_strides[last], y + e);
    e += count;
    // Past the piece; at a row's end the indices carry (the last wraps to 0).
    oa += count * a_strides[last];
    ob += count * b_strides[last];
    index[last] += count;
    for (int d = last; d > 0 && index[d] == dims[d]; --d) {
      oa -= dims[d] * a_strides[d];
      ob -= dims[d] * b_strides[d];
      index[d] = 0;
      ++index[d - 1];
      oa += a_strides[d - 1];
      ob += b_strides[d - 1];
    }
  }
}

void WhereBlocks(int64_t blocks, int64_t n, const uint8_t* cond, int64_t cond_step, const float* x,
                 int64_t x_step, const float* y, int64_t y_step, float* out) {
  internal::Table().where_blocks(blocks, n, cond, cond_step, x, x_step, y, y_step, out);
}

void Unary(UnaryOp op, float alpha, int64_t n, const float* x, float* y) {
  internal::Table().unary(op, alpha, n, x, y);
}

void AddTo(int64_t n, const float* x, float* y) { internal::Table().add_to(n, x, y); }

void FillWhere(int64_t n, const bool* m, bool when, float fill, float* y) {
  internal::Table().fill_where(n, m, when, fill, y);
}

bool AnyNaN(int64_t n, const uint32_t* bits) { return internal::Table().any_nan(n, bits); }

bool AnyAbsAtLeast(int64_t n, const int32_t* v, int32_t limit) {
  return internal::Table().any_abs_at_least(n, v, limit);
}

void MaxOverTaps(int64_t c, const float* x, const int64_t* taps, int64_t n_taps, float* y) {
  internal::Table().max_over_taps(c, x, taps, n_taps, y);
}

}  // namespace dynvm::cpu
