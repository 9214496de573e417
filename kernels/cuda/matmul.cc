// MatMul and Gemm (f32) through cuBLAS. Row-major tensors meet column-major cuBLAS through the
// usual identity: a row-major C = A * B is the column-major C^T = B^T * A^T, so each call passes
// B before A. An operand whose last two dims are row-major or column-major with a leading
// dimension (a transposed weight, a slice of a KV cache) is passed as it is, with the matching
// transpose flag; any other layout is packed first. Batches with uniform strides (broadcast
// operands have stride 0) are one strided-batched call; others loop over the outer batch dims.
// GEMMs run in full FP32 (the handle's math mode is CUBLAS_DEFAULT_MATH: no TF32).
#include "kernels/cuda/matmul.h"

#include <climits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "allocator/cuda_status.h"
#include "common/status_macros.h"
#include "kernels/cuda/common.h"
#include "kernels/cuda/cublas_status.h"

namespace dynvm::cuda {
namespace {

using Dims = absl::InlinedVector<int64_t, Tensor::kMaxRank>;

struct Layout {
  bool row_major;
  int64_t ld;
};

// How cuBLAS can read a [rows, cols] matrix with element strides (sr, sc), or nullopt.
std::optional<Layout> Classify(int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  if ((sc == 1 || cols == 1) && (rows == 1 || sr >= std::max<int64_t>(1, cols))) {
    return Layout{true, rows == 1 ? std::max<int64_t>(1, cols) : sr};
  }
  if ((sr == 1 || rows == 1) && (cols == 1 || sc >= std::max<int64_t>(1, rows))) {
    return Layout{false, cols == 1 ? std::max<int64_t>(1, rows) : sc};
  }
  return std::nullopt;
}

bool FitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

}  // namespace

absl::Status Gemm(CudaContext& cc, const GemmOperand& a, const GemmOperand& b, float* c, int64_t m,
                  int64_t n, int64_t k, float alpha, float beta, const Walk<3>& batch,
                  absl::string_view op) {
  std::optional<Layout> la = Classify(m, k, a.row_stride, a.col_stride);
  std::optional<Layout> lb = Classify(k, n, b.row_stride, b.col_stride);
  if (!la || !lb) return absl::InternalError(absl::StrCat(op, ": operand layout not packed"));
  if (!FitsInt(m) || !FitsInt(n) || !FitsInt(k) || !FitsInt(la->ld) || !FitsInt(lb->ld)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": a [", m, ",", k, "] x [", k, ",", n,
                                                   "] product is too large for cuBLAS"));
  }
  DYNVM_ASSIGN_OR_RETURN(cublasHandle_t handle, cc.cublas());
  // Column-major: C^T (n x m) = op(B^T) (n x k) * op(A^T) (k x m).
  const cublasOperation_t op_b = lb->row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t op_a = la->row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  const int64_t c_matrix = m * n;
  // The innermost batch dim goes to cuBLAS; the outer ones are looped here.
  const int r = batch.rank;
  const int64_t count = r == 0 ? 1 : batch.dims[r - 1];
  const int64_t sc = r == 0 ? c_matrix : batch.strides[0][r - 1];
  const int64_t sa = r == 0 ? 0 : batch.strides[1][r - 1];
  const int64_t sb = r == 0 ? 0 : batch.strides[2][r - 1];
  if (!FitsInt(count)) return absl::InvalidArgumentError(absl::StrCat(op, ": too many batches"));
  int64_t outer = 1;
  for (int d = 0; d + 1 < r; ++d) outer *= batch.dims[d];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rest = o, off_c = 0, off_a = 0, off_b = 0;
    for (int d = r - 2; d >= 0; --d) {
      const int64_t idx = rest % batch.dims[d];
      rest /= batch.dims[d];
      off_c += idx * batch.strides[0][d];
      off_a += idx * batch.strides[1][d];
      off_b += idx * batch.strides[2][d];
    }
    const float* pa = a.data + off_a;
    const float* pb = b.data + off_b;
    float* pc = c + off_c;
    if (count == 1) {
      DYNVM_CUBLAS_RETURN_IF_ERROR(cublasSgemm(
          handle, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha,
          pb, static_cast<int>(lb->ld), pa, static_cast<int>(la->ld), &beta, pc,
          static_cast<int>(std::max<int64_t>(1, n))));
    } else {
      DYNVM_CUBLAS_RETURN_IF_ERROR(cublasSgemmStridedBatched(
          handle, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha,
          pb, static_cast<int>(lb->ld), sb, pa, static_cast<int>(la->ld), sa, &beta, pc,
          static_cast<int>(std::max<int64_t>(1, n)), sc, static_cast<int>(count)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<GemmOperand> PrepareOperand(CudaContext& cc, const Tensor& t, int64_t rows,
                                           int64_t cols, int64_t row_stride, int64_t col_stride,
                                           StorageRef* keep, Tensor* packed_view) {
  if (Classify(rows, cols, row_stride, col_stride)) {
    return GemmOperand{t.data<float>(), row_stride, col_stride};
  }
  // Pack the whole tensor row-major; the caller re-derives batch strides from packed_view.
  DYNVM_ASSIGN_OR_RETURN(const void* data, ContiguousData(cc, t, keep));
  DYNVM_ASSIGN_OR_RETURN(Tensor v, Tensor::View(*keep, 0, t.dtype(), t.dims()));
  *packed_view = std::move(v);
  return GemmOperand{static_cast<const float*>(data), cols, 1};
}

namespace {

// ---- MatMul ----

absl::Status RunMatMul(const int&, CudaContext& cc, KernelContext&, Inputs in, Outputs out) {
  if (in.size() != 2 || in[0] == nullptr || in[1] == nullptr || out.size() != 1 || !out[0]) {
    return absl::InvalidArgumentError("MatMul takes two inputs and has one output");
  }
  Tensor a = *in[0], b = *in[1];
  if (a.rank() == 0 || b.rank() == 0) {
    return absl::InvalidArgumentError("MatMul: operands must have rank >= 1");
  }
  // 1-D operands: A [K] is [1, K]; B [K] is [K, 1]; the added dim is dropped from the output.
  const bool a_vec = a.rank() == 1, b_vec = b.rank() == 1;
  if (a_vec) {
    const int64_t dims[2] = {1, a.dim(0)}, strides[2] = {0, a.stride(0)};
    a.SetView(dims, strides);
  }
  if (b_vec) {
    const int64_t dims[2] = {b.dim(0), 1}, strides[2] = {b.stride(0), 0};
    b.SetView(dims, strides);
  }
  const int64_t m = a.dim(a.rank() - 2), k = a.dim(a.rank() - 1);
  const int64_t n = b.dim(b.rank() - 1);
  if (b.dim(b.rank() - 2) != k) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul: shapes ", in[0]->ShapeString(), " and ",
                                                   in[1]->ShapeString(), " do not match"));
  }
  Dims batch;
  const int ab = a.rank() - 2, bb = b.rank() - 2;
  const int nb = std::max(ab, bb);
  for (int i = 0; i < nb; ++i) {
    const int64_t da = i < nb - ab ? 1 : a.dim(i - (nb - ab));
    const int64_t db = i < nb - bb ? 1 : b.dim(i - (nb - bb));
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat("MatMul: batch dims of ", in[0]->ShapeString(),
                                                     " and ", in[1]->ShapeString(),
                                                     " do not broadcast"));
    }
    batch.push_back(da == 1 ? db : da);
  }
  Dims out_dims = batch;
  if (!a_vec) out_dims.push_back(m);
  if (!b_vec) out_dims.push_back(n);
  DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, out[0], DType::kF32, out_dims, "MatMul"));
  Tensor& y = *out[0];
  if (y.numel() == 0) return absl::OkStatus();
  if (k == 0) {
    return LaunchStatus(
        cudaMemsetAsync(y.raw_data(), 0, static_cast<size_t>(y.nbytes()), cc.stream()), "MatMul",
        "cudaMemsetAsync");
  }
  StorageRef keep_a, keep_b;
  Tensor packed_a, packed_b;
  DYNVM_ASSIGN_OR_RETURN(GemmOperand ga,
                         PrepareOperand(cc, a, m, k, a.stride(a.rank() - 2), a.stride(a.rank() - 1),
                                        &keep_a, &packed_a));
  DYNVM_ASSIGN_OR_RETURN(GemmOperand gb,
                         PrepareOperand(cc, b, k, n, b.stride(b.rank() - 2), b.stride(b.rank() - 1),
                                        &keep_b, &packed_b));
  const Tensor& va = packed_a.defined() ? packed_a : a;
  const Tensor& vb = packed_b.defined() ? packed_b : b;
  // Batch strides: C contiguous; A and B broadcast (stride 0 where their dim is 1 or absent).
  Dims sc(nb), sa(nb, 0), sb(nb, 0);
  int64_t s = m * n;
  for (int i = nb - 1; i >= 0; --i) {
    sc[i] = s;
    s *= batch[i];
  }
  for (int i = 0; i < nb; ++i) {
    if (i >= nb - ab && va.dim(i - (nb - ab)) != 1) sa[i] = va.stride(i - (nb - ab));
    if (i >= nb - bb && vb.dim(i - (nb - bb)) != 1) sb[i] = vb.stride(i - (nb - bb));
  }
  const Walk<3> walk = MakeWalk<3>(batch, {sc, sa, sb});
  return Gemm(cc, ga, gb, y.data<float>(), m, n, k, 1.0f, 0.0f, walk, "MatMul");
}

// ---- Gemm ----

struct GemmAttrs {
  float alpha = 1;
  float beta = 1;
  bool trans_a = false;
  bool trans_b = false;
};

absl::Status RunGemm(const GemmAttrs& ga, CudaContext& cc, KernelContext&, Inputs in, Outputs out) {
  if (in.size() < 2 || in[0] == nullptr || in[1] == nullptr || out.size() != 1 || !out[0]) {
    return absl::InvalidArgumentError("Gemm takes A, B and an optional C, and has one output");
  }
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  const Tensor* c = in.size() > 2 ? in[2] : nullptr;
  if (a.rank() != 2 || b.rank() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: A and B must be 2-D, got ", a.ShapeString(), " and ", b.ShapeString()));
  }
  // op(A) [m, k] and op(B) [k, n] as strided views.
  const int64_t m = ga.trans_a ? a.dim(1) : a.dim(0), k = ga.trans_a ? a.dim(0) : a.dim(1);
  const int64_t n = ga.trans_b ? b.dim(0) : b.dim(1);
  if ((ga.trans_b ? b.dim(1) : b.dim(0)) != k) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: shapes ", a.ShapeString(), " and ", b.ShapeString(),
                     " do not match (transA=", ga.trans_a, ", transB=", ga.trans_b, ")"));
  }
  const int64_t mn[2] = {m, n};
  if (c != nullptr) {
    bool ok = c->rank() <= 2;
    for (int i = 0; ok && i < c->rank(); ++i) {
      const int64_t want = mn[2 - c->rank() + i];
      ok = c->dim(i) == want || c->dim(i) == 1;
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm: C ", c->ShapeString(), " does not broadcast to [", m, ",", n, "]"));
    }
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, out[0], DType::kF32, mn, "Gemm"));
  Tensor& y = *out[0];
  if (y.numel() == 0) return absl::OkStatus();
  float beta = 0;
  if (c != nullptr && ga.beta != 0) {
    Tensor cb = *c;
    const auto strides = BroadcastStrides(*c, mn);
    cb.SetView(mn, strides);
    DYNVM_RETURN_IF_ERROR(DeviceCopy(cc, cb, y));
    beta = ga.beta;
  }
  if (k == 0) {  // an empty product: y = beta * C (or 0)
    if (beta == 0) {
      return LaunchStatus(
          cudaMemsetAsync(y.raw_data(), 0, static_cast<size_t>(y.nbytes()), cc.stream()), "Gemm",
          "cudaMemsetAsync");
    }
    if (beta == 1) return absl::OkStatus();
    if (!FitsInt(y.numel())) return absl::InvalidArgumentError("Gemm: output too large");
    DYNVM_ASSIGN_OR_RETURN(cublasHandle_t handle, cc.cublas());
    DYNVM_CUBLAS_RETURN_IF_ERROR(
        cublasSscal(handle, static_cast<int>(y.numel()), &beta, y.data<float>(), 1));
    return absl::OkStatus();
  }
  Tensor va = a, vb = b;
  if (ga.trans_a) {
    const int64_t d[2] = {m, k}, s[2] = {a.stride(1), a.stride(0)};
    va.SetView(d, s);
  }
  if (ga.trans_b) {
    const int64_t d[2] = {k, n}, s[2] = {b.stride(1), b.stride(0)};
    vb.SetView(d, s);
  }
  StorageRef keep_a, keep_b;
  Tensor packed_a, packed_b;
  DYNVM_ASSIGN_OR_RETURN(
      GemmOperand oa, PrepareOperand(cc, va, m, k, va.stride(0), va.stride(1), &keep_a, &packed_a));
  DYNVM_ASSIGN_OR_RETURN(
      GemmOperand ob, PrepareOperand(cc, vb, k, n, vb.stride(0), vb.stride(1), &keep_b, &packed_b));
  return Gemm(cc, oa, ob, y.data<float>(), m, n, k, ga.alpha, beta, Walk<3>{}, "Gemm");
}

}  // namespace

void RegisterMatmulKernels(Registrations& r) {
  Add(r, "MatMul", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() != 2 || spec.outputs.size() != 1) {
      return absl::InvalidArgumentError("MatMul takes 2 inputs and has 1 output");
    }
    for (const PortSpec& p : spec.inputs) {
      DYNVM_RETURN_IF_ERROR(RequireDType(spec, p, {DType::kF32}));
    }
    return MakeKernel<int>(KernelName("MatMul", DType::kF32, "cublas"), "MatMul", &RunMatMul, 0);
  });
  Add(r, "Gemm", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() < 2 || spec.inputs.size() > 3 || spec.outputs.size() != 1) {
      return absl::InvalidArgumentError("Gemm takes 2 or 3 inputs and has 1 output");
    }
    for (const PortSpec& p : spec.inputs) {
      DYNVM_RETURN_IF_ERROR(RequireDType(spec, p, {DType::kF32}));
    }
    GemmAttrs a;
    absl::StatusOr<float> alpha = spec.GetFloat("alpha", 1.0f);
    absl::StatusOr<float> beta = spec.GetFloat("beta", 1.0f);
    absl::StatusOr<int64_t> ta = spec.GetInt("transA", 0);
    absl::StatusOr<int64_t> tb = spec.GetInt("transB", 0);
    if (!alpha.ok()) return alpha.status();
    if (!beta.ok()) return beta.status();
    if (!ta.ok()) return ta.status();
    if (!tb.ok()) return tb.status();
    a.alpha = *alpha;
    a.beta = *beta;
    a.trans_a = *ta != 0;
    a.trans_b = *tb != 0;
    return MakeKernel<GemmAttrs>(KernelName("Gemm", DType::kF32, "cublas"), "Gemm", &RunGemm, a);
  });
}

}  // namespace dynvm::cuda
