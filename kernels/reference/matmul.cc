// Reference kernels for MatMul (numpy semantics: 1-D promotion, batch broadcasting) and Gemm.
//
// Products accumulate in float for f32/f16/bf16, in double for f64 and in wrapping 64-bit
// arithmetic for integers, over k in increasing order. The loop order is i-k-j: the inner loop
// streams a row of B into a row of accumulators. A is read through its strides; a B whose rows
// are not contiguous (a transposed B, as in Gemm with transB) is first packed into the
// workspace. dynvm::MatMul (compiler/rewrite/matmul_transpose.cc) is MatMul on views of its
// operands through the permutations a_perm and b_perm: the same loops, reading the strides; with
// b_packed_n its B is the packed GEMM's panels (compiler/pack_weights.h), read by index.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/reference/common.h"
#include "kernels/reference/permute.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename T>
using Acc =
    std::conditional_t<std::is_same_v<T, double>, double,
                       std::conditional_t<kIsHalf<T> || std::is_same_v<T, float>, float, uint64_t>>;

template <typename T>
Acc<T> Load(T x) {
  if constexpr (std::is_signed_v<T> && std::is_integral_v<T>) {
    return static_cast<uint64_t>(static_cast<int64_t>(x));  // sign-extend, then wrap
  } else {
    return static_cast<Acc<T>>(x);
  }
}

// Dispatches the dtypes matrix products support (all numeric but bool).
template <typename Fn>
absl::Status DispatchMatmul(DType dtype, absl::string_view op, Fn&& fn) {
  if (dtype == DType::kBool) {
    return absl::UnimplementedError(absl::StrCat(op, ": dtype bool not supported"));
  }
  return DispatchNumeric(dtype, op, [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (std::is_same_v<T, bool>) {
      return absl::InternalError("unreachable");
    } else {
      return fn(tag);
    }
  });
}

// One M x K by K x N product, A with element strides, B with contiguous rows ldb apart, in
// i-k-j order; calls store(i, acc) with the N accumulators of row i.
// REQUIRES: acc has room for N values.
template <typename T, typename Store>
void MatMulRows(const T* a, int64_t sam, int64_t sak, const T* b, int64_t ldb, int64_t m, int64_t n,
                int64_t k, Acc<T>* acc, Store&& store) {
  using A = Acc<T>;
  for (int64_t i = 0; i < m; ++i) {
    const T* arow = a + i * sam;
    std::fill(acc, acc + n, A(0));
    for (int64_t p = 0; p < k; ++p) {
      const A aip = Load(arow[p * sak]);
      const T* brow = b + p * ldb;
      for (int64_t j = 0; j < n; ++j) acc[j] += aip * Load(brow[j]);
    }
    store(i, static_cast<const A*>(acc));
  }
}

// Workspace for one product: N accumulators, then (when B must be packed) a K x N copy of B.
template <typename T>
struct Scratch {
  Acc<T>* acc;
  T* packed;
};

bool NeedsPacking(int64_t sbn, int64_t n) { return sbn != 1 && n > 1; }

template <typename T>
absl::StatusOr<Scratch<T>> GetScratch(KernelContext& ctx, int64_t k, int64_t n, bool pack) {
  const size_t acc_bytes = (static_cast<size_t>(n) * sizeof(Acc<T>) + 63) / 64 * 64;
  const size_t pack_bytes = pack ? static_cast<size_t>(k) * static_cast<size_t>(n) * sizeof(T) : 0;
  DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(std::max<size_t>(acc_bytes + pack_bytes, 1)));
  return Scratch<T>{static_cast<Acc<T>*>(ws),
                    reinterpret_cast<T*>(static_cast<uint8_t*>(ws) + acc_bytes)};
}

// B (K x N with element strides sbk, sbn) as rows that are contiguous: B itself, or B copied
// into `packed` (a transposed B). Sets *ldb to the distance between rows.
template <typename T>
const T* RowMajorB(const T* b, int64_t sbk, int64_t sbn, int64_t k, int64_t n, T* packed,
                   int64_t* ldb) {
  if (!NeedsPacking(sbn, n)) {
    *ldb = sbk;
    return b;
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t p = 0; p < k; ++p) packed[p * n + j] = b[p * sbk + j * sbn];
  }
  *ldb = n;
  return packed;
}

// ---- MatMul ----

absl::Status RunMatMul(const void*, KernelContext& ctx, Inputs in, Outputs out) {
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, "MatMul"));
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  if (a.dtype() != b.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul: operands ", a.DebugString(), " and ",
                                                   b.DebugString(), " differ in dtype"));
  }
  if (a.rank() == 0 || b.rank() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul: operands must have rank >= 1, got ",
                                                   a.DebugString(), " and ", b.DebugString()));
  }
  // A 1-D A is a row [1, K]; a 1-D B is a column [K, 1]; the added dim is dropped afterwards.
  const int ra = a.rank(), rb = b.rank();
  const int64_t m = ra == 1 ? 1 : a.dim(ra - 2);
  const int64_t k = a.dim(ra - 1);
  const int64_t kb = rb == 1 ? b.dim(0) : b.dim(rb - 2);
  const int64_t n = rb == 1 ? 1 : b.dim(rb - 1);
  const int64_t sam = ra == 1 ? 0 : a.stride(ra - 2), sak = a.stride(ra - 1);
  const int64_t sbk = rb == 1 ? b.stride(0) : b.stride(rb - 2),
                sbn = rb == 1 ? 0 : b.stride(rb - 1);
  if (k != kb) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul: inner dimensions of ", a.ShapeString(),
                                                   " and ", b.ShapeString(), " differ"));
  }
  const absl::Span<const int64_t> batch_a = a.dims().first(ra >= 2 ? ra - 2 : 0);
  const absl::Span<const int64_t> batch_b = b.dims().first(rb >= 2 ? rb - 2 : 0);
  absl::StatusOr<Dims> batch = BroadcastShapes(batch_a, batch_b);
  if (!batch.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul: batch dimensions of ", a.ShapeString(),
                                                   " and ", b.ShapeString(), " do not broadcast"));
  }
  Dims out_dims = *batch;
  if (ra > 1) out_dims.push_back(m);
  if (rb > 1) out_dims.push_back(n);
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], a.dtype(), out_dims, "MatMul"));
  Tensor& y = *out[0];
  if (y.numel() == 0) return absl::OkStatus();

  // Batch strides of each operand (0 where it broadcasts), right-aligned to the batch dims.
  const size_t nb = batch->size();
  Dims bsa(nb, 0), bsb(nb, 0);
  for (size_t i = 0; i < batch_a.size(); ++i) {
    if (batch_a[i] != 1) bsa[nb - batch_a.size() + i] = a.stride(static_cast<int>(i));
  }
  for (size_t i = 0; i < batch_b.size(); ++i) {
    if (batch_b[i] != 1) bsb[nb - batch_b.size() + i] = b.stride(static_cast<int>(i));
  }
  return DispatchMatmul(a.dtype(), "MatMul", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    DYNVM_ASSIGN_OR_RETURN(Scratch<T> scratch, GetScratch<T>(ctx, k, n, NeedsPacking(sbn, n)));
    T* py = y.data<T>();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    ForEachOffset<2>(*batch, {absl::MakeConstSpan(bsa), absl::MakeConstSpan(bsb)},
                     [&](int64_t oa, int64_t ob) {
                       int64_t ldb;
                       const T* rb = RowMajorB(pb + ob, sbk, sbn, k, n, scratch.packed, &ldb);
                       MatMulRows<T>(pa + oa, sam, sak, rb, ldb, m, n, k, scratch.acc,
                                     [&](int64_t i, const Acc<T>* row) {
                                       T* yrow = py + i * n;
                                       for (int64_t j = 0; j < n; ++j) {
                                         yrow[j] = static_cast<T>(row[j]);
                                       }
                                     });
                       py += m * n;
                     });
    return absl::OkStatus();
  });
}

// ---- dynvm::MatMul: MatMul(Transpose(A, a_perm), Transpose(B, b_perm)) ----

struct PermutedMatMulAttrs {
  std::vector<int64_t> a_perm, b_perm;  // empty: identity
  int64_t packed_n = -1;                // b_packed_n: B is panels of 16 columns (below)
};

constexpr int64_t kPanel = 16;

// A x B with B [K, N] stored as panels [ceil(N / 16), K, 16] (b_packed_n = N; B[k, j] at
// [j / 16, k, j % 16], zeros past N; kernels/cpu/packed_gemm.h): each output summed over k in
// order from element (j / 16, k, j % 16), read by index, in f32 like MatMul above. A's leading
// dims are the rows.
absl::Status RunPackedMatMul(const Tensor& a, const Tensor& b, int64_t n, KernelContext& ctx,
                             Tensor* y) {
  if (a.dtype() != DType::kF32 || b.dtype() != DType::kF32) {
    return absl::UnimplementedError(absl::StrCat("MatMul: a packed B (b_packed_n) takes f32, got ",
                                                 a.DebugString(), " and ", b.DebugString()));
  }
  const int64_t k = a.rank() == 0 ? 0 : a.dim(a.rank() - 1);
  if (a.rank() == 0 || b.rank() != 3 || b.dim(0) != (n + kPanel - 1) / kPanel || b.dim(1) != k ||
      b.dim(2) != kPanel) {
    return absl::InvalidArgumentError(
        absl::StrCat("MatMul: A ", a.ShapeString(), " and a packed B of N = ", n, " must be [..., ",
                     "K] and [", (n + kPanel - 1) / kPanel, ", K, 16], got B ", b.ShapeString()));
  }
  Dims out_dims(a.dims().begin(), a.dims().end() - 1);
  out_dims.push_back(n);
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, y, DType::kF32, out_dims, "MatMul"));
  const absl::Span<const int64_t> rows_dims = a.dims().first(a.rank() - 1);
  const Dims rows_strides(a.strides().begin(), a.strides().end() - 1);
  const int64_t sak = a.stride(a.rank() - 1), sb0 = b.stride(0), sb1 = b.stride(1),
                sb2 = b.stride(2);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* py = y->data<float>();
  ForEachOffset<1>(rows_dims, {absl::MakeConstSpan(rows_strides)}, [&](int64_t oa) {
    for (int64_t j = 0; j < n; ++j) {
      const float* col = pb + (j / kPanel) * sb0 + (j % kPanel) * sb2;
      float acc = 0.0f;
      for (int64_t q = 0; q < k; ++q) acc += pa[oa + q * sak] * col[q * sb1];
      *py++ = acc;
    }
  });
  return absl::OkStatus();
}

// Runs the MatMul above on views of A and B through the permuted strides (no copy).
absl::Status RunPermutedMatMul(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& p = *static_cast<const PermutedMatMulAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, "MatMul"));
  DYNVM_ASSIGN_OR_RETURN(Tensor a, PermutedView(*in[0], p.a_perm, "MatMul", "a_perm"));
  if (p.packed_n >= 0) return RunPackedMatMul(a, *in[1], p.packed_n, ctx, out[0]);
  DYNVM_ASSIGN_OR_RETURN(Tensor b, PermutedView(*in[1], p.b_perm, "MatMul", "b_perm"));
  const Tensor* views[2] = {&a, &b};
  return RunMatMul(nullptr, ctx, views, out);
}

// ---- Gemm ----

// True when v is an integer that int64 holds.
bool IsIntegral(float v) { return std::abs(v) < 9.0e18f && v == std::trunc(v); }

struct GemmAttrs {
  float alpha = 1.0f;
  float beta = 1.0f;
  bool trans_a = false;
  bool trans_b = false;
};

absl::Status RunGemm(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& g = *static_cast<const GemmAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, "Gemm"));
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  const Tensor* c = in.size() > 2 ? in[2] : nullptr;
  if (a.rank() != 2 || b.rank() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: A and B must be 2-D, got ", a.DebugString(), " and ", b.DebugString()));
  }
  if (a.dtype() != b.dtype() || (c != nullptr && c->dtype() != a.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: operands ", a.DebugString(), ", ",
                                                   b.DebugString(), " differ in dtype"));
  }
  // Transposition only swaps strides.
  const int64_t m = a.dim(g.trans_a ? 1 : 0), k = a.dim(g.trans_a ? 0 : 1);
  const int64_t sam = a.stride(g.trans_a ? 1 : 0), sak = a.stride(g.trans_a ? 0 : 1);
  const int64_t kb = b.dim(g.trans_b ? 1 : 0), n = b.dim(g.trans_b ? 0 : 1);
  const int64_t sbk = b.stride(g.trans_b ? 1 : 0), sbn = b.stride(g.trans_b ? 0 : 1);
  if (k != kb) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: inner dimensions differ: A ", a.ShapeString(), " (transA=", g.trans_a,
                     ") and B ", b.ShapeString(), " (transB=", g.trans_b, ")"));
  }
  const int64_t mn[2] = {m, n};
  Dims sc(2, 0);
  if (c != nullptr) {
    absl::StatusOr<Dims> bc = BroadcastShapes(c->dims(), mn);
    if (c->rank() > 2 || !bc.ok() || absl::MakeConstSpan(*bc) != absl::MakeConstSpan(mn)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm: C ", c->ShapeString(), " does not broadcast to ", DimsString(mn)));
    }
    sc = BroadcastStrides(*c, mn);
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], a.dtype(), mn, "Gemm"));
  Tensor& y = *out[0];
  if (y.numel() == 0) return absl::OkStatus();
  const bool use_c = c != nullptr && g.beta != 0;
  return DispatchMatmul(a.dtype(), "Gemm", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = Acc<T>;
    A alpha, beta;
    if constexpr (std::is_integral_v<T>) {
      if (!IsIntegral(g.alpha) || !IsIntegral(g.beta)) {
        return absl::UnimplementedError(
            "Gemm: integer Gemm needs integral alpha and beta in the reference kernel");
      }
      alpha = static_cast<uint64_t>(static_cast<int64_t>(g.alpha));
      beta = static_cast<uint64_t>(static_cast<int64_t>(g.beta));
    } else {
      alpha = static_cast<A>(g.alpha);
      beta = static_cast<A>(g.beta);
    }
    DYNVM_ASSIGN_OR_RETURN(Scratch<T> scratch, GetScratch<T>(ctx, k, n, NeedsPacking(sbn, n)));
    T* py = y.data<T>();
    const T* pc = use_c ? c->data<T>() : nullptr;
    int64_t ldb;
    const T* rb = RowMajorB(b.data<T>(), sbk, sbn, k, n, scratch.packed, &ldb);
    MatMulRows<T>(a.data<T>(), sam, sak, rb, ldb, m, n, k, scratch.acc,
                  [&](int64_t i, const A* row) {
                    T* yrow = py + i * n;
                    if (pc == nullptr) {
                      for (int64_t j = 0; j < n; ++j) yrow[j] = static_cast<T>(alpha * row[j]);
                    } else {
                      const T* crow = pc + i * sc[0];
                      for (int64_t j = 0; j < n; ++j) {
                        yrow[j] = static_cast<T>(alpha * row[j] + beta * Load(crow[j * sc[1]]));
                      }
                    }
                  });
    return absl::OkStatus();
  });
}

// ---- registration ----

absl::Status CheckSpec(const KernelSpec& spec, size_t min_in, size_t max_in) {
  if (spec.inputs.size() < min_in || spec.inputs.size() > max_in || spec.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(spec.op, ": expected ", min_in, "..", max_in,
                                                   " inputs and 1 output, got ", spec.inputs.size(),
                                                   " and ", spec.outputs.size()));
  }
  for (const PortSpec& p : spec.inputs) {
    if (p.dtype == static_cast<uint8_t>(DType::kBool) ||
        p.dtype == static_cast<uint8_t>(DType::kString)) {
      return absl::UnimplementedError(absl::StrCat(
          spec.op, ": dtype ", DTypeName(static_cast<DType>(p.dtype)), " not supported"));
    }
  }
  return absl::OkStatus();
}

void Add(KernelRegistry& r, const char* op, KernelFactory factory) {
  r.Register(KernelRegistration{"", op, Device::kCPU, "reference", kReferencePriority,
                                std::move(factory)});
}

}  // namespace

void RegisterMatmulKernels(KernelRegistry& r) {
  r.Register(KernelRegistration{
      "dynvm", "MatMul", Device::kCPU, "reference", kReferencePriority,
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_RETURN_IF_ERROR(CheckSpec(spec, 2, 2));
        PermutedMatMulAttrs p;
        DYNVM_ASSIGN_OR_RETURN(p.a_perm, spec.GetInts("a_perm"));
        DYNVM_ASSIGN_OR_RETURN(p.b_perm, spec.GetInts("b_perm"));
        DYNVM_ASSIGN_OR_RETURN(p.packed_n, spec.GetInt("b_packed_n", -1));
        if (p.packed_n >= 0 && !p.b_perm.empty()) {
          return absl::InvalidArgumentError("MatMul: b_perm with a packed B (b_packed_n)");
        }
        return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), &RunPermutedMatMul,
                                                std::make_shared<const PermutedMatMulAttrs>(p));
      }});
  Add(r, "MatMul", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    DYNVM_RETURN_IF_ERROR(CheckSpec(spec, 2, 2));
    return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), &RunMatMul, nullptr);
  });
  Add(r, "Gemm", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    DYNVM_RETURN_IF_ERROR(CheckSpec(spec, 2, 3));
    GemmAttrs g;
    DYNVM_ASSIGN_OR_RETURN(float alpha, spec.GetFloat("alpha", 1.0f));
    absl::StatusOr<float> beta = spec.GetFloat("beta", 1.0f);
    if (!beta.ok()) return beta.status();
    absl::StatusOr<int64_t> ta = spec.GetInt("transA", 0);
    if (!ta.ok()) return ta.status();
    absl::StatusOr<int64_t> tb = spec.GetInt("transB", 0);
    if (!tb.ok()) return tb.status();
    if ((*ta != 0 && *ta != 1) || (*tb != 0 && *tb != 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm: transA and transB must be 0 or 1, got ", *ta, " and ", *tb));
    }
    g.alpha = alpha;
    g.beta = *beta;
    g.trans_a = *ta == 1;
    g.trans_b = *tb == 1;
    return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), &RunGemm,
                                            std::make_shared<const GemmAttrs>(g));
  });
}

}  // namespace dynvm::reference
