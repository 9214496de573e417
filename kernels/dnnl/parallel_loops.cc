#include "kernels/dnnl/parallel_loops.h"

#include <algorithm>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/rows.h"

namespace dynvm::onednn {

void ParallelGemv(const KernelContext& ctx, char trans, int64_t n, int64_t k, float alpha,
                  const float* x, const float* b, int64_t ldb, float beta, float* y) {
  if (ctx.num_threads() == 1 || n * k < kMinParallelGemv) {
    cpu::Gemv(trans, n, k, alpha, x, b, ldb, beta, y);
    return;
  }
  // 'T': whole rows of the weight, 16 at a time (64 bytes of y); 'N': 64 columns (the loop's
  // vector block).
  const int64_t grain = trans == 'T' ? 16 : 64;
  ctx.ParallelFor(n, grain, [&](int64_t j0, int64_t j1) {
    const float* bj = trans == 'T' ? b + j0 * ldb : b + j0;
    cpu::Gemv(trans, j1 - j0, k, alpha, x, bj, ldb, beta, y + j0);
  });
}

namespace {

// Rows per range: at least kMinParallelRows / threads elements' worth, so that a range's work
// outweighs a fork/join.
int64_t RowGrain(const KernelContext& ctx, int64_t rows, int64_t n) {
  if (ctx.num_threads() == 1 || rows < 2 || rows * n < kMinParallelRows) return rows;
  return std::max<int64_t>(1, kMinParallelRows / (2 * std::max<int64_t>(n, 1)));
}

}  // namespace

void ParallelSoftmaxRows(const KernelContext& ctx, int64_t rows, int64_t n, const float* x,
                         float* y) {
  ctx.ParallelFor(rows, RowGrain(ctx, rows, n), [&](int64_t r0, int64_t r1) {
    cpu::SoftmaxRows(r1 - r0, n, x + r0 * n, y + r0 * n);
  });
}

void ParallelLogSoftmaxRows(const KernelContext& ctx, int64_t rows, int64_t n, const float* x,
                            float* y) {
  ctx.ParallelFor(rows, RowGrain(ctx, rows, n), [&](int64_t r0, int64_t r1) {
    cpu::LogSoftmaxRows(r1 - r0, n, x + r0 * n, y + r0 * n);
  });
}

void ParallelLayerNormRows(const KernelContext& ctx, int64_t rows, int64_t n, const float* x,
                           const float* scale, const float* bias, float epsilon, float* y) {
  ctx.ParallelFor(rows, RowGrain(ctx, rows, n), [&](int64_t r0, int64_t r1) {
    cpu::LayerNormRows(r1 - r0, n, x + r0 * n, scale, bias, epsilon, y + r0 * n);
  });
}

void ParallelRmsNormRows(const KernelContext& ctx, int64_t rows, int64_t n, const float* x,
                         const float* scale, float epsilon, float* y) {
  ctx.ParallelFor(rows, RowGrain(ctx, rows, n), [&](int64_t r0, int64_t r1) {
    cpu::RmsNormRows(r1 - r0, n, x + r0 * n, scale, epsilon, y + r0 * n);
  });
}

void ParallelElements(const KernelContext& ctx, int64_t n,
                      absl::FunctionRef<void(int64_t, int64_t)> fn, int64_t min_elements) {
  if (ctx.num_threads() == 1 || n < min_elements) {
    fn(0, n);
    return;
  }
  // Whole 16-float blocks (a cache line), at least min_elements / 2 per range.
  const int64_t grain = std::max<int64_t>(16, (min_elements / 2 + 15) / 16 * 16);
  ctx.ParallelFor(n, grain, fn);
}

void ParallelBinaryRows(const KernelContext& ctx, cpu::BinaryOp op, int64_t rows, int64_t n,
                        const float* a, const float* b, int64_t b_row_stride, float* y) {
  if (ctx.num_threads() == 1 || rows * n < kMinParallelElements ||
      (b_row_stride > 0 && b_row_stride != n)) {
    cpu::BinaryRows(op, rows, n, a, b, b_row_stride, y);
    return;
  }
  if (b_row_stride == 0 && rows > 1) {  // b is one row: whole rows per range
    const int64_t grain =
        std::max<int64_t>(1, kMinParallelElements / (2 * std::max<int64_t>(n, 1)));
    ctx.ParallelFor(rows, grain, [&](int64_t r0, int64_t r1) {
      cpu::BinaryRows(op, r1 - r0, n, a + r0 * n, b, 0, y + r0 * n);
    });
    return;
  }
  // b has every element (b_row_stride n: rows of one array) or is one scalar.
  ParallelElements(ctx, rows * n, [&](int64_t e0, int64_t e1) {
    if (b_row_stride < 0) {
      cpu::BinaryRows(op, 1, e1 - e0, a + e0, b, -1, y + e0);
    } else {
      cpu::BinaryRows(op, 1, e1 - e0, a + e0, b + e0, e1 - e0, y + e0);
    }
  });
}

void ParallelBinaryRowScalars(const KernelContext& ctx, cpu::BinaryOp op, int64_t rows, int64_t n,
                              const float* a, const float* b, float* y) {
  if (n <= 0) return;
  ParallelElements(ctx, rows * n, [&](int64_t e0, int64_t e1) {
    // The rows [e0, e1) touches, each cut to the range: a scalar loop per piece.
    for (int64_t e = e0; e < e1;) {
      const int64_t r = e / n;
      const int64_t end = std::min(e1, (r + 1) * n);
      cpu::BinaryRows(op, 1, end - e, a + e, b + r, -1, y + e);
      e = end;
    }
  });
}

}  // namespace dynvm::onednn
