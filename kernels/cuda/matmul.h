// The cuBLAS GEMM shared by MatMul, Gemm and LSTM. Internal.
#ifndef DYNVM_KERNELS_CUDA_MATMUL_H_
#define DYNVM_KERNELS_CUDA_MATMUL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/launch.h"
#include "kernels/tensor.h"

namespace dynvm::cuda {

// A [rows, cols] f32 matrix on the device with element strides.
struct GemmOperand {
  const float* data;
  int64_t row_stride;
  int64_t col_stride;
};

// c = alpha * a * b + beta * c for every batch: a [m, k], b [k, n], c [m, n] row-major
// contiguous per matrix. `batch` walks the batch dims with strides (0: C, 1: A, 2: B); rank 0
// means one product. REQUIRES: a and b have a layout cuBLAS reads (PrepareOperand).
absl::Status Gemm(CudaContext& cc, const GemmOperand& a, const GemmOperand& b, float* c, int64_t m,
                  int64_t n, int64_t k, float alpha, float beta, const Walk<3>& batch,
                  absl::string_view op);

// `t` as an operand whose matrices are [rows, cols] with the given strides: as it is when cuBLAS
// can read that layout, otherwise packed row-major into a temporary (held by `keep`) whose
// view, with its own batch strides, is stored in `packed_view`.
absl::StatusOr<GemmOperand> PrepareOperand(CudaContext& cc, const Tensor& t, int64_t rows,
                                           int64_t cols, int64_t row_stride, int64_t col_stride,
                                           StorageRef* keep, Tensor* packed_view);

}  // namespace dynvm::cuda

#endif  // DYNVM_KERNELS_CUDA_MATMUL_H_
