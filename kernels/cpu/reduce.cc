// Reduction microkernels (reduce.h). Tuning notes: GCC's AVX2 code of the generic loops is
// scalar, so AVX2 has explicit versions with the generic loops' lanes and order (two 8-lane
// registers hold the 16 lanes; max_ps(acc, v) is acc > v ? acc : v, min_ps likewise; the sum of
// squares fused as the FMA levels contract it). dnnl_benchmark's BM_ReduceLastAxis on
// [512, 128] on the AVX2 EPYC: ReduceSum 1.5 -> 12-14 G elements/s, ReduceMax (with the NaN
// scan before it) 0.6 -> 2.8-3.4, the reference kernel 0.8-1.3; BM_ReduceMiddleAxis (a mean over
// axis 1 of [8, 64, 128], eight columns at a time in a register) 49 -> 7.8 us.
#include "kernels/cpu/reduce.h"

#include <cmath>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu {
namespace {

constexpr int kLanes = 16;

DYNVM_ALWAYS_INLINE float Init(ReduceOp op) {
  return op == ReduceOp::kMax ? -INFINITY : op == ReduceOp::kMin ? INFINITY : 0.0f;
}

DYNVM_ALWAYS_INLINE void ReduceRowsBody(ReduceOp op, int64_t rows, int64_t n, const float* x,
                                        float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * n;
    float acc[kLanes];
    const float init = Init(op);
    for (float& a : acc) a = init;
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const float v = row[j + l];
        switch (op) {
          case ReduceOp::kSum:
            acc[l] += v;
            break;
          case ReduceOp::kSumSquare:
            acc[l] += v * v;
            break;
          case ReduceOp::kMax:
            acc[l] = acc[l] > v ? acc[l] : v;
            break;
          case ReduceOp::kMin:
            acc[l] = acc[l] < v ? acc[l] : v;
            break;
        }
      }
    }
    float total = init;
    for (int l = 0; l < kLanes; ++l) {
      if (op == ReduceOp::kMax) {
        total = total > acc[l] ? total : acc[l];
      } else if (op == ReduceOp::kMin) {
        total = total < acc[l] ? total : acc[l];
      } else {
        total += acc[l];
      }
    }
    for (; j < n; ++j) {
      const float v = row[j];
      if (op == ReduceOp::kMax) {
        total = total > v ? total : v;
      } else if (op == ReduceOp::kMin) {
        total = total < v ? total : v;
      } else {
        total += op == ReduceOp::kSumSquare ? v * v : v;
      }
    }
    y[r] = total;
  }
}

DYNVM_ALWAYS_INLINE void ReduceColumnsBody(ReduceOp op, int64_t outer, int64_t reduce,
                                           int64_t inner, const float* x, float* y) {
  const float init = Init(op);
  for (int64_t o = 0; o < outer; ++o) {
    float* yo = y + o * inner;
    for (int64_t i = 0; i < inner; ++i) yo[i] = init;
    for (int64_t j = 0; j < reduce; ++j) {
      const float* xj = x + (o * reduce + j) * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const float v = xj[i];
        switch (op) {
          case ReduceOp::kSum:
            yo[i] += v;
            break;
          case ReduceOp::kSumSquare:
            yo[i] += v * v;
            break;
          case ReduceOp::kMax:
            yo[i] = yo[i] > v ? yo[i] : v;
            break;
          case ReduceOp::kMin:
            yo[i] = yo[i] < v ? yo[i] : v;
            break;
        }
      }
    }
  }
}

void ReduceRowsPortable(ReduceOp op, int64_t rows, int64_t n, const float* x, float* y) {
  ReduceRowsBody(op, rows, n, x, y);
}
void ReduceColumnsPortable(ReduceOp op, int64_t outer, int64_t reduce, int64_t inner,
                           const float* x, float* y) {
  ReduceColumnsBody(op, outer, reduce, inner, x, y);
}

#if DYNVM_CPU_X86

// ---- AVX2 ----

template <ReduceOp op>
DYNVM_AVX2 DYNVM_ALWAYS_INLINE __m256 Step(__m256 acc, __m256 v) {
  if constexpr (op == ReduceOp::kSum) return _mm256_add_ps(acc, v);
  if constexpr (op == ReduceOp::kSumSquare) return _mm256_fmadd_ps(v, v, acc);
  if constexpr (op == ReduceOp::kMax) return _mm256_max_ps(acc, v);
  return _mm256_min_ps(acc, v);
}

template <ReduceOp op>
DYNVM_AVX2 void ReduceRowsAvx2(int64_t rows, int64_t n, const float* x, float* y) {
  const float init = Init(op);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * n;
    __m256 lo = _mm256_set1_ps(init), hi = lo;
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes) {
      lo = Step<op>(lo, _mm256_loadu_ps(row + j));
      hi = Step<op>(hi, _mm256_loadu_ps(row + j + 8));
    }
    alignas(32) float acc[kLanes];
    _mm256_store_ps(acc, lo);
    _mm256_store_ps(acc + 8, hi);
    float total = init;
    for (int l = 0; l < kLanes; ++l) {
      if constexpr (op == ReduceOp::kMax) {
        total = total > acc[l] ? total : acc[l];
      } else if constexpr (op == ReduceOp::kMin) {
        total = total < acc[l] ? total : acc[l];
      } else {
        total += acc[l];
      }
    }
    for (; j < n; ++j) {
      const float v = row[j];
      if constexpr (op == ReduceOp::kMax) {
        total = total > v ? total : v;
      } else if constexpr (op == ReduceOp::kMin) {
        total = total < v ? total : v;
      } else {
        total += op == ReduceOp::kSumSquare ? v * v : v;
      }
    }
    y[r] = total;
  }
}

// Eight inner columns at a time held in a register across the reduced axis.
template <ReduceOp op>
DYNVM_AVX2 void ReduceColumnsAvx2(int64_t outer, int64_t reduce, int64_t inner, const float* x,
                                  float* y) {
  const float init = Init(op);
  for (int64_t o = 0; o < outer; ++o) {
    const float* xo = x + o * reduce * inner;
    float* yo = y + o * inner;
    int64_t i = 0;
    for (; i + 8 <= inner; i += 8) {
      __m256 acc = _mm256_set1_ps(init);
      for (int64_t j = 0; j < reduce; ++j) acc = Step<op>(acc, _mm256_loadu_ps(xo + j * inner + i));
      _mm256_storeu_ps(yo + i, acc);
    }
    for (; i < inner; ++i) {
      float acc = init;
      for (int64_t j = 0; j < reduce; ++j) {
        const float v = xo[j * inner + i];
        if constexpr (op == ReduceOp::kSum) {
          acc += v;
        } else if constexpr (op == ReduceOp::kSumSquare) {
          acc += v * v;
        } else if constexpr (op == ReduceOp::kMax) {
          acc = acc > v ? acc : v;
        } else {
          acc = acc < v ? acc : v;
        }
      }
      yo[i] = acc;
    }
  }
}

DYNVM_AVX2 void ReduceRowsAvx2(ReduceOp op, int64_t rows, int64_t n, const float* x, float* y) {
  switch (op) {
    case ReduceOp::kSum:
      return ReduceRowsAvx2<ReduceOp::kSum>(rows, n, x, y);
    case ReduceOp::kSumSquare:
      return ReduceRowsAvx2<ReduceOp::kSumSquare>(rows, n, x, y);
    case ReduceOp::kMax:
      return ReduceRowsAvx2<ReduceOp::kMax>(rows, n, x, y);
    case ReduceOp::kMin:
      return ReduceRowsAvx2<ReduceOp::kMin>(rows, n, x, y);
  }
}

DYNVM_AVX2 void ReduceColumnsAvx2(ReduceOp op, int64_t outer, int64_t reduce, int64_t inner,
                                  const float* x, float* y) {
  switch (op) {
    case ReduceOp::kSum:
      return ReduceColumnsAvx2<ReduceOp::kSum>(outer, reduce, inner, x, y);
    case ReduceOp::kSumSquare:
      return ReduceColumnsAvx2<ReduceOp::kSumSquare>(outer, reduce, inner, x, y);
    case ReduceOp::kMax:
      return ReduceColumnsAvx2<ReduceOp::kMax>(outer, reduce, inner, x, y);
    case ReduceOp::kMin:
      return ReduceColumnsAvx2<ReduceOp::kMin>(outer, reduce, inner, x, y);
  }
}

// ---- AVX-512: the generic bodies ----

DYNVM_AVX512_LOOPS void ReduceRowsAvx512(ReduceOp op, int64_t rows, int64_t n, const float* x,
                                         float* y) {
  ReduceRowsBody(op, rows, n, x, y);
}
DYNVM_AVX512_LOOPS void ReduceColumnsAvx512(ReduceOp op, int64_t outer, int64_t reduce,
                                            int64_t inner, const float* x, float* y) {
  ReduceColumnsBody(op, outer, reduce, inner, x, y);
}

#endif  // DYNVM_CPU_X86

}  // namespace

namespace internal {

void FillReduce(Isa isa, Dispatch* d) {
  d->reduce_rows = &ReduceRowsPortable;
  d->reduce_columns = &ReduceColumnsPortable;
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) {
    d->reduce_rows = &ReduceRowsAvx2;
    d->reduce_columns = &ReduceColumnsAvx2;
  }
  if (isa >= Isa::kAvx512) {
    d->reduce_rows = &ReduceRowsAvx512;
    d->reduce_columns = &ReduceColumnsAvx512;
  }
#endif
}

}  // namespace internal

void ReduceRows(ReduceOp op, int64_t rows, int64_t n, const float* x, float* y) {
  internal::Table().reduce_rows(op, rows, n, x, y);
}

void ReduceColumns(ReduceOp op, int64_t outer, int64_t reduce, int64_t inner, const float* x,
                   float* y) {
  internal::Table().reduce_columns(op, outer, reduce, inner, x, y);
}

}  // namespace dynvm::cpu
