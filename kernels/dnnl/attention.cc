// dynvm::Attention on the oneDNN backend (kernels/reference/attention.h has the definition):
// per (batch, head) unit, S = scale * Q K^T by dnnl_sgemm (or the GEMV loop for one query: a
// decode step), the mask and the softmax by vector loops in place, and S V by dnnl_sgemm (GEMV)
// written straight into the output at its strides. Q, K and V are read where they are (their
// head-split transposes are strides); only S [Lq, Lk] is scratch. Needs unit stride along D
// and Dv (the layouts torch's exports give); anything else runs the reference kernel.
// Units are independent: a thread pool can split [0, units).
#include "kernels/reference/attention.h"

#include <algorithm>

#include "common/status_macros.h"
#include "kernels/dnnl/clones.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/vector_loops.h"

namespace dynvm::onednn {
namespace {

using reference::AttentionAttrs;
using reference::AttentionGeometry;

DYNVM_CLONES void AddRow(int64_t n, const float* m, float* s) {
  for (int64_t j = 0; j < n; ++j) s[j] += m[j];
}

DYNVM_CLONES void FillRow(int64_t n, const bool* m, bool when, float fill, float* s) {
  for (int64_t j = 0; j < n; ++j) s[j] = m[j] == when ? fill : s[j];
}

// Masks row i of unit mask block `m` into s[lk].
void MaskRow(const AttentionAttrs& a, const AttentionGeometry& g, const void* m, int64_t i,
             float* s) {
  const int r = g.rank;
  const int64_t js = g.ms[r - 1];
  if (js == 1) {
    const int64_t off = i * g.ms[r - 2];
    if (a.mask_mode == 1) {
      AddRow(g.lk, static_cast<const float*>(m) + off, s);
    } else {
      FillRow(g.lk, static_cast<const bool*>(m) + off, a.mask_mode == 2, a.fill, s);
    }
    return;
  }
  for (int64_t j = 0; j < g.lk; ++j) s[j] = reference::MaskScore(a, g, m, i, j, s[j]);
}

// The unit-stride layout the fast path takes, with its leading dimensions.
struct Layout {
  int64_t ldq, ldk, ldv, ldo;
};

bool FastLayout(const AttentionGeometry& g, Layout& l) {
  const int r = g.rank;
  if (g.d == 0 || g.lk == 0 || g.dv == 0 || g.lq == 0) return false;
  if ((g.d > 1 && (g.qs[r - 1] != 1 || g.ks[r - 2] != 1)) ||
      (g.dv > 1 && (g.vs[r - 1] != 1 || g.rs[r - 1] != 1))) {
    return false;
  }
  l.ldq = g.lq > 1 ? g.qs[r - 2] : g.d;
  l.ldk = g.lk > 1 ? g.ks[r - 1] : g.d;
  l.ldv = g.lk > 1 ? g.vs[r - 2] : g.dv;
  l.ldo = g.lq > 1 ? g.rs[r - 2] : g.dv;
  return l.ldq >= g.d && l.ldk >= g.d && l.ldv >= g.dv && l.ldo >= g.dv;
}

absl::Status RunUnits(const AttentionAttrs& a, const AttentionGeometry& g, const Layout& l,
                      int64_t u0, int64_t u1, float* s) {
  const size_t mask_elem = a.mask_mode == 1 ? sizeof(float) : sizeof(bool);
  for (int64_t u = u0; u < u1; ++u) {
    const float* q = g.q + reference::UnitOffset(g, g.qs, u);
    const float* k = g.k + reference::UnitOffset(g, g.ks, u);
    const float* v = g.v + reference::UnitOffset(g, g.vs, u);
    float* y = g.out + reference::UnitOffset(g, g.rs, u);
    if (g.lq == 1) {  // one query (a decode step): GEMV loops
      Gemv('T', g.lk, g.d, a.scale, q, k, l.ldk, 0.0f, s);
    } else {
      const dnnl_status_t st =
          dnnl_sgemm('N', 'T', g.lq, g.lk, g.d, a.scale, q, l.ldq, k, l.ldk, 0.0f, s, g.lk);
      DYNVM_RETURN_IF_ERROR(FromDnnl(st, "dnnl_sgemm"));
    }
    if (g.mask != nullptr) {
      const void* m =
          static_cast<const char*>(g.mask) + reference::UnitOffset(g, g.ms, u) * mask_elem;
      for (int64_t i = 0; i < g.lq; ++i) MaskRow(a, g, m, i, s + i * g.lk);
    }
    SoftmaxRows(g.lq, g.lk, s, s);
    if (g.lq == 1) {
      Gemv('N', g.dv, g.lk, 1.0f, s, v, l.ldv, 0.0f, y);
    } else {
      const dnnl_status_t st =
          dnnl_sgemm('N', 'N', g.lq, g.dv, g.lk, 1.0f, s, g.lk, v, l.ldv, 0.0f, y, l.ldo);
      DYNVM_RETURN_IF_ERROR(FromDnnl(st, "dnnl_sgemm"));
    }
  }
  return absl::OkStatus();
}

class AttentionKernel final : public DnnlKernel {
 public:
  AttentionKernel(std::string name, std::unique_ptr<Kernel> reference, AttentionAttrs a)
      : DnnlKernel(std::move(name), std::move(reference)), a_(std::move(a)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_ASSIGN_OR_RETURN(AttentionGeometry g, reference::PrepareAttention(a_, ctx, in, out));
    Layout l;
    const bool fast = FastLayout(g, l);
    // The scores, from the site's workspace (no allocation per decode step).
    const int64_t rows = fast ? g.lq : 1;
    DYNVM_ASSIGN_OR_RETURN(void* s,
                           ctx.Workspace(static_cast<size_t>(rows * g.lk) * sizeof(float)));
    if (!fast) {
      reference::AttentionUnitsReference(a_, g, 0, g.units, static_cast<float*>(s));
      return absl::OkStatus();
    }
    return RunUnits(a_, g, l, 0, g.units, static_cast<float*>(s));
  }

 private:
  AttentionAttrs a_;
};

}  // namespace

void RegisterAttentionKernels(KernelRegistry& r) {
  r.Register(KernelRegistration{
      "dynvm", "Attention", Device::kCPU, kBackend, kDnnlPriority,
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_ASSIGN_OR_RETURN(AttentionAttrs a, reference::GetAttentionAttrs(spec));
        DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1, 2}));
        DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> ref, CreateReference(spec));
        return std::make_unique<AttentionKernel>(KernelName(spec), std::move(ref), std::move(a));
      }});
}

}  // namespace dynvm::onednn
