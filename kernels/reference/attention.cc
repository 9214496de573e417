// The reference kernel of dynvm::Attention (kernels/reference/attention.h has its definition).
#include "kernels/reference/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

constexpr const char* kOp = "Attention";

// `perm` is empty (identity) or a permutation of [0, rank): a hostile executable's repeated
// axis would make the strides reach outside the tensor.
absl::Status CheckPermutation(const std::vector<int64_t>& perm, int rank, const char* what) {
  if (perm.empty()) return absl::OkStatus();
  uint64_t seen = 0;  // no allocation: this runs every decode step (rank <= kMaxRank < 64)
  bool ok = static_cast<int>(perm.size()) == rank && rank < 64;
  for (size_t i = 0; ok && i < perm.size(); ++i) {
    ok = perm[i] >= 0 && perm[i] < rank && (seen >> perm[i] & 1) == 0;
    if (ok) seen |= uint64_t{1} << perm[i];
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(kOp, ": the permutation of ", what, " [",
                                                 absl::StrJoin(perm, ","),
                                                 "] is not a permutation of the ", rank, " axes"));
}

// Logical dims and strides of Transpose(t, perm) (identity when perm is empty).
absl::Status Permute(const Tensor& t, const std::vector<int64_t>& perm, const char* what,
                     Dims& dims, Dims& strides) {
  const int r = t.rank();
  dims.assign(r, 0);
  strides.assign(r, 0);
  DYNVM_RETURN_IF_ERROR(CheckPermutation(perm, r, what));
  for (int i = 0; i < r; ++i) {
    const int64_t p = perm.empty() ? i : perm[i];
    dims[i] = t.dim(static_cast<int>(p));
    strides[i] = t.stride(static_cast<int>(p));
  }
  return absl::OkStatus();
}

std::string DimsString(const Dims& d) { return absl::StrCat("[", absl::StrJoin(d, ","), "]"); }

absl::Status RunAttention(const void* attrs, KernelContext& ctx, absl::Span<const Tensor* const> in,
                          absl::Span<Tensor* const> out) {
  const auto& a = *static_cast<const AttentionAttrs*>(attrs);
  DYNVM_ASSIGN_OR_RETURN(AttentionGeometry g, PrepareAttention(a, ctx, in, out));
  // The row of scores, from the site's workspace: at least a fixed 4 KiB, so a decode whose
  // prefix grows allocates nothing after its first step (below 1024 keys).
  const size_t floats = std::max<size_t>(1024, static_cast<size_t>(g.lk));
  DYNVM_ASSIGN_OR_RETURN(void* row, ctx.Workspace(floats * sizeof(float)));
  AttentionUnitsReference(a, g, 0, g.units, static_cast<float*>(row));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AttentionAttrs> GetAttentionAttrs(const KernelSpec& spec) {
  AttentionAttrs a;
  DYNVM_ASSIGN_OR_RETURN(a.q_perm, spec.GetInts("q_perm"));
  DYNVM_ASSIGN_OR_RETURN(a.k_perm, spec.GetInts("k_perm"));
  DYNVM_ASSIGN_OR_RETURN(a.v_perm, spec.GetInts("v_perm"));
  DYNVM_ASSIGN_OR_RETURN(a.out_perm, spec.GetInts("out_perm"));
  DYNVM_ASSIGN_OR_RETURN(a.scale, spec.GetFloat("scale", 1.0f));
  DYNVM_ASSIGN_OR_RETURN(int64_t mode, spec.GetInt("mask_mode", 0));
  DYNVM_ASSIGN_OR_RETURN(a.fill, spec.GetFloat("fill", 0.0f));
  if (mode < 0 || mode > 3) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": mask_mode must be 0..3, got ", mode));
  }
  a.mask_mode = static_cast<int>(mode);
  const size_t want = mode == 0 ? 3 : 4;
  if (spec.inputs.size() != want || spec.outputs.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": mask_mode ", mode, " takes ", want, " inputs and one output"));
  }
  return a;
}

absl::StatusOr<AttentionGeometry> PrepareAttention(const AttentionAttrs& a, KernelContext& ctx,
                                                   absl::Span<const Tensor* const> in,
                                                   absl::Span<Tensor* const> out) {
  const size_t want = a.mask_mode == 0 ? 3 : 4;
  if (in.size() != want || out.size() != 1 || out[0] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": expected ", want, " inputs"));
  }
  for (size_t i = 0; i < want; ++i) {
    if (in[i] == nullptr) return absl::InvalidArgumentError(absl::StrCat(kOp, ": missing input"));
  }
  const Tensor &q = *in[0], &k = *in[1], &v = *in[2];
  for (const Tensor* t : {&q, &k, &v}) {
    if (t->dtype() != DType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": Q, K and V must be f32, got ", t->DebugString()));
    }
  }
  AttentionGeometry g;
  g.rank = q.rank();
  const int r = g.rank;
  if (r < 2 || k.rank() != r || v.rank() != r) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": Q ", q.DebugString(), ", K ",
                                                   k.DebugString(), " and V ", v.DebugString(),
                                                   " must have one rank, at least 2"));
  }
  Dims qd, kd, vd;
  DYNVM_RETURN_IF_ERROR(Permute(q, a.q_perm, "Q", qd, g.qs));
  DYNVM_RETURN_IF_ERROR(Permute(k, a.k_perm, "K", kd, g.ks));
  DYNVM_RETURN_IF_ERROR(Permute(v, a.v_perm, "V", vd, g.vs));
  g.lq = qd[r - 2];
  g.d = qd[r - 1];
  g.lk = kd[r - 1];
  g.dv = vd[r - 1];
  bool ok = kd[r - 2] == g.d && vd[r - 2] == g.lk;
  for (int i = 0; i < r - 2; ++i) {
    ok &= (qd[i] == kd[i] || kd[i] == 1) && (qd[i] == vd[i] || vd[i] == 1);
    // A leading dim of 1 in K' or V' is read by every index of Q's (grouped-query attention:
    // [batch, kv heads, 1, ...] against [batch, kv heads, group, ...]).
    if (kd[i] == 1) g.ks[i] = 0;
    if (vd[i] == 1) g.vs[i] = 0;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": Q' ", DimsString(qd), ", K' ", DimsString(kd), " and V' ", DimsString(vd),
        " (after their permutations) must be [..., Lq, D], [..., D, Lk] and [..., Lk, Dv] with "
        "the same leading dims (or 1 in K' and V')"));
  }
  g.lead.assign(qd.begin(), qd.end() - 2);
  for (int64_t d : g.lead) g.units *= d;
  // R [..., Lq, Dv] is written as Y = Transpose(R, out_perm), contiguous.
  Dims rd(qd.begin(), qd.end() - 1);
  rd.push_back(g.dv);
  DYNVM_RETURN_IF_ERROR(CheckPermutation(a.out_perm, r, "the output"));
  Dims yd(r);
  for (int i = 0; i < r; ++i) yd[i] = rd[a.out_perm.empty() ? i : a.out_perm[i]];
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, yd, kOp));
  g.rs.assign(r, 0);
  for (int i = 0; i < r; ++i) g.rs[a.out_perm.empty() ? i : a.out_perm[i]] = out[0]->stride(i);
  // The mask broadcasts to S [..., Lq, Lk] without changing it.
  g.ms.assign(r, 0);
  if (a.mask_mode != 0) {
    const Tensor& m = *in[3];
    const DType want_dtype = a.mask_mode == 1 ? DType::kF32 : DType::kBool;
    Dims sd(qd.begin(), qd.end() - 1);
    sd.push_back(g.lk);
    bool fits = m.dtype() == want_dtype && m.rank() <= r;
    for (int i = 0; fits && i < m.rank(); ++i) {
      const int axis = r - m.rank() + i;
      fits = m.dim(i) == 1 || m.dim(i) == sd[axis];
      if (m.dim(i) != 1) g.ms[axis] = m.stride(i);
    }
    if (!fits) {
      return absl::InvalidArgumentError(absl::StrCat(
          kOp, ": the mask ", m.DebugString(), " must be ", DTypeName(want_dtype),
          " and broadcast to the scores ", DimsString(sd), " without changing their shape"));
    }
    g.mask = m.raw_data();
  }
  g.q = q.data<float>();
  g.k = k.data<float>();
  g.v = v.data<float>();
  g.out = out[0]->data<float>();
  return g;
}

int64_t UnitOffset(const AttentionGeometry& g, const Dims& strides, int64_t u) {
  int64_t off = 0;
  for (int i = g.rank - 3; i >= 0; --i) {
    off += (u % g.lead[i]) * strides[i];
    u /= g.lead[i];
  }
  return off;
}

void AttentionUnitsReference(const AttentionAttrs& a, const AttentionGeometry& g, int64_t u0,
                             int64_t u1, float* row) {
  const int r = g.rank;
  const size_t mask_elem = a.mask_mode == 1 ? sizeof(float) : sizeof(bool);
  for (int64_t u = u0; u < u1; ++u) {
    const float* q = g.q + UnitOffset(g, g.qs, u);
    const float* k = g.k + UnitOffset(g, g.ks, u);
    const float* v = g.v + UnitOffset(g, g.vs, u);
    float* y = g.out + UnitOffset(g, g.rs, u);
    const void* m = g.mask == nullptr
                        ? nullptr
                        : static_cast<const char*>(g.mask) + UnitOffset(g, g.ms, u) * mask_elem;
    for (int64_t i = 0; i < g.lq; ++i) {
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < g.lk; ++j) {
        float s = 0;
        for (int64_t c = 0; c < g.d; ++c) {
          s += q[i * g.qs[r - 2] + c * g.qs[r - 1]] * k[c * g.ks[r - 2] + j * g.ks[r - 1]];
        }
        s = MaskScore(a, g, m, i, j, s * a.scale);
        row[j] = s;
        max = std::max(max, s);
      }
      float sum = 0;
      for (int64_t j = 0; j < g.lk; ++j) {
        row[j] = std::exp(row[j] - max);
        sum += row[j];
      }
      for (int64_t c = 0; c < g.dv; ++c) {
        float acc = 0;
        for (int64_t j = 0; j < g.lk; ++j) acc += row[j] * v[j * g.vs[r - 2] + c * g.vs[r - 1]];
        y[i * g.rs[r - 2] + c * g.rs[r - 1]] = acc / sum;
      }
    }
  }
}

void RegisterAttentionKernel(KernelRegistry& r) {
  r.Register({"dynvm", "Attention", Device::kCPU, "reference", kReferencePriority,
              [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                DYNVM_ASSIGN_OR_RETURN(AttentionAttrs a, GetAttentionAttrs(spec));
                for (size_t i = 0; i < 3; ++i) {
                  if (spec.inputs[i].dtype != static_cast<uint8_t>(DType::kF32)) {
                    return absl::UnimplementedError("Attention: Q, K and V must be f32");
                  }
                }
                return std::make_unique<FunctionKernel>(
                    "attention.f32.ref", &RunAttention,
                    std::make_shared<const AttentionAttrs>(std::move(a)));
              }});
}

}  // namespace dynvm::reference
