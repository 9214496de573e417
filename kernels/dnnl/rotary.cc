// dynvm::RotateHalf on the oneDNN backend (kernels/reference/dynvm_ops.cc has the definition):
// one cpu::RotateHalf per row of the output's last axis, x, cos and sin read at their broadcast
// strides (the row's offset into each), rows split over the VM's pool. Needs unit stride along
// the last axis of all three (a table of D values per position, as exports make them); anything
// else runs the reference kernel, which also reports bad shapes. dynvm::SwiGlu (silu(gate) * up)
// too: cpu::SiluMul in ranges over the pool. com.microsoft RotaryEmbedding and ONNX
// RotaryEmbedding 23 (f32, contiguous): cpu::Rotary (halves or interleaved pairs, a partial
// rotary_embedding_dim: the rest of each head copied) per head row at its cache row (position_ids
// [B, S], ORT's one-value offset, or ONNX's per-token caches without position_ids), rows over the
// pool; anything else (other dtypes, strides, bad shapes or positions) is the reference kernel's.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/glu.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

using reference::Dims;

// Rows per range on the pool: about 16K values each.
constexpr int64_t kValuesPerRange = 16384;

class RotateHalfKernel final : public DnnlKernel {
 public:
  using DnnlKernel::DnnlKernel;

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (in.size() != 3 || in[0] == nullptr || in[1] == nullptr || in[2] == nullptr ||
        out.size() != 1 || out[0] == nullptr) {
      return RunFallback(ctx, in, out);
    }
    const Tensor& x = *in[0];
    const Tensor& c = *in[1];
    const Tensor& s = *in[2];
    const int rank = x.rank();
    if (rank == 0 || x.dtype() != DType::kF32 || c.dtype() != DType::kF32 ||
        s.dtype() != DType::kF32 || x.dim(rank - 1) % 2 != 0) {
      return RunFallback(ctx, in, out);  // reports the error, if any
    }
    absl::StatusOr<Dims> xc = reference::BroadcastShapes(x.dims(), c.dims());
    absl::StatusOr<Dims> od = xc.ok() ? reference::BroadcastShapes(*xc, s.dims()) : xc;
    if (!od.ok()) return RunFallback(ctx, in, out);  // reports the error
    const int orank = static_cast<int>(od->size());
    const int64_t d = (*od)[orank - 1];
    if (d != x.dim(rank - 1)) return RunFallback(ctx, in, out);
    const Dims xs = reference::BroadcastStrides(x, *od);
    const Dims cs = reference::BroadcastStrides(c, *od);
    const Dims ss = reference::BroadcastStrides(s, *od);
    if (d > 1 && (xs[orank - 1] != 1 || cs[orank - 1] != 1 || ss[orank - 1] != 1)) {
      return RunFallback(ctx, in, out);
    }
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, *od, "RotateHalf"));
    int64_t rows = d == 0 ? 0 : 1;
    for (int a = 0; a < orank - 1; ++a) rows *= (*od)[a];
    if (rows == 0) return absl::OkStatus();
    const float* xp = x.data<float>();
    const float* cp = c.data<float>();
    const float* sp = s.data<float>();
    float* y = out[0]->data<float>();
    const int64_t grain = std::max<int64_t>(1, kValuesPerRange / d);
    ctx.ParallelFor(rows, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        int64_t rem = r, xo = 0, co = 0, so = 0;
        for (int a = orank - 2; a >= 0; --a) {
          const int64_t i = rem % (*od)[a];
          rem /= (*od)[a];
          xo += i * xs[a];
          co += i * cs[a];
          so += i * ss[a];
        }
        cpu::RotateHalf(d / 2, cp + co, sp + so, xp + xo, y + r * d);
      }
    });
    return absl::OkStatus();
  }
};

// dynvm::SwiGlu: cpu::SiluMul over contiguous gate and up of one shape, split over the pool;
// a broadcast or a strided operand runs the reference kernel.
class SwiGluKernel final : public DnnlKernel {
 public:
  using DnnlKernel::DnnlKernel;

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (in.size() != 2 || in[0] == nullptr || in[1] == nullptr || out.size() != 1 ||
        out[0] == nullptr) {
      return RunFallback(ctx, in, out);
    }
    const Tensor& g = *in[0];
    const Tensor& u = *in[1];
    if (g.dtype() != DType::kF32 || u.dtype() != DType::kF32 || !g.is_contiguous() ||
        !u.is_contiguous() || g.dims() != u.dims()) {
      return RunFallback(ctx, in, out);
    }
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, g.dims(), "SwiGlu"));
    const float* gp = g.data<float>();
    const float* up = u.data<float>();
    float* y = out[0]->data<float>();
    ctx.ParallelFor(g.numel(), kValuesPerRange, [&](int64_t i0, int64_t i1) {
      cpu::SiluMul(i1 - i0, gp + i0, up + i0, y + i0);
    });
    return absl::OkStatus();
  }
};

// ---- RotaryEmbedding: com.microsoft and ONNX 23 ----

// One call resolved: X [B, S, N H] (heads_first false) or [B, N, S, H], the first 2 half features
// of each head rotating by the cos/sin cache row of its (batch, position), the rest copied.
struct RopeCall {
  int64_t batch = 0, heads = 0, seq = 0, head = 0, half = 0;
  bool heads_first = true;
  // The cache row's offset in cos and sin of (batch, position) i = b S + s: position_ids[i]
  // (`ps`), one offset ps[0] + s (`offset`) or i itself (no `ps`), times `stride`. Computed per
  // row rather than kept, so a call allocates nothing.
  const int64_t* ps = nullptr;
  bool offset = false;
  int64_t stride = 0;
  int64_t Row(int64_t i) const {
    return (ps == nullptr ? i : offset ? ps[0] + i % seq : ps[i]) * stride;
  }
};

bool Dense(const Tensor* t, DType dtype) {
  return t != nullptr && t->dtype() == dtype && t->is_contiguous();
}

// The cache rows of position_ids [B, S] (or, `offset`, one value: the position of s = 0) into
// caches of `positions` rows `stride` apart; false when one is outside them.
bool PositionRows(const Tensor& pos, bool offset, int64_t positions, int64_t stride, RopeCall& c) {
  const int64_t* ps = pos.data<int64_t>();
  for (int64_t i = 0; i < c.batch * c.seq; ++i) {
    const int64_t p = offset ? ps[0] + i % c.seq : ps[i];
    if (p < 0 || p >= positions) return false;
  }
  c.ps = ps;
  c.offset = offset;
  c.stride = stride;
  return true;
}

// com.microsoft RotaryEmbedding(input, position_ids, cos_cache, sin_cache): the reference
// kernel's geometry (kernels/reference/msft.cc). nullopt: not the loop's case.
std::optional<RopeCall> MsftRope(Inputs in, int64_t num_heads, int64_t rotary_dim) {
  if (in.size() != 4 || !Dense(in[0], DType::kF32) || !Dense(in[1], DType::kI64) ||
      !Dense(in[2], DType::kF32) || !Dense(in[3], DType::kF32)) {
    return std::nullopt;
  }
  const Tensor& x = *in[0];
  const Tensor& pos = *in[1];
  const Tensor& cos = *in[2];
  if (cos.rank() != 2 || in[3]->dims() != cos.dims() || (x.rank() != 3 && x.rank() != 4) ||
      x.numel() == 0) {
    return std::nullopt;
  }
  RopeCall c;
  c.heads_first = x.rank() == 4;
  c.batch = x.dim(0);
  c.seq = c.heads_first ? x.dim(2) : x.dim(1);
  c.head = x.dim(x.rank() - 1);
  c.heads = c.heads_first ? x.dim(1) : 1;
  if (!c.heads_first) {
    c.head = num_heads > 0 ? x.dim(2) / num_heads : cos.dim(1) * 2;
    c.heads = c.head > 0 ? x.dim(2) / c.head : 0;
  }
  const int64_t rot = rotary_dim > 0 ? rotary_dim : cos.dim(1) * 2;
  c.half = rot / 2;
  const int64_t width = c.heads_first ? c.heads * c.head : x.dim(2);
  if (c.head <= 0 || c.heads * c.head != width || rot > c.head || c.half != cos.dim(1) ||
      rot % 2 != 0) {
    return std::nullopt;
  }
  const bool offset = pos.numel() == 1;
  if (!offset && !(pos.rank() == 2 && pos.dim(0) == c.batch && pos.dim(1) == c.seq)) {
    return std::nullopt;
  }
  if (!PositionRows(pos, offset, cos.dim(0), c.half, c)) return std::nullopt;
  return c;
}

// ONNX RotaryEmbedding 23(X, cos_cache, sin_cache, position_ids?): the reference kernel's
// geometry (kernels/reference/nn.cc). nullopt: not the loop's case.
std::optional<RopeCall> OnnxRope(Inputs in, int64_t num_heads, int64_t rotary_dim) {
  const Tensor* pos = in.size() > 3 ? in[3] : nullptr;
  if (in.size() < 3 || !Dense(in[0], DType::kF32) || !Dense(in[1], DType::kF32) ||
      !Dense(in[2], DType::kF32) || in[1]->dims() != in[2]->dims() ||
      (pos != nullptr && !Dense(pos, DType::kI64)) || in[0]->numel() == 0) {
    return std::nullopt;
  }
  const Tensor& x = *in[0];
  const Tensor& cos = *in[1];
  RopeCall c;
  if (x.rank() == 4) {
    c.batch = x.dim(0), c.heads = x.dim(1), c.seq = x.dim(2), c.head = x.dim(3);
  } else if (x.rank() == 3 && num_heads > 0 && x.dim(2) % num_heads == 0) {
    c.batch = x.dim(0), c.heads = num_heads, c.seq = x.dim(1), c.head = x.dim(2) / num_heads;
    c.heads_first = false;
  } else {
    return std::nullopt;
  }
  const int64_t rot = rotary_dim == 0 ? c.head : rotary_dim;
  if (rot % 2 != 0 || rot > c.head) return std::nullopt;
  c.half = rot / 2;
  if (pos == nullptr) {
    if (cos.rank() != 3 || cos.dim(0) != c.batch || cos.dim(1) != c.seq || cos.dim(2) < c.half) {
      return std::nullopt;
    }
    c.stride = cos.dim(2);  // row b S + s of [B, S, >= half]
    return c;
  }
  if (cos.rank() != 2 || cos.dim(1) < c.half || pos->rank() != 2 || pos->dim(0) != c.batch ||
      pos->dim(1) != c.seq) {
    return std::nullopt;
  }
  if (!PositionRows(*pos, false, cos.dim(0), cos.dim(1), c)) return std::nullopt;
  return c;
}

// cpu::Rotary per head row (the rest of the head copied), rows split over the VM's pool. Inputs
// the loop does not take (strided, other dtypes, bad shapes or positions) run the reference
// kernel, which reports the bad ones.
class RotaryEmbeddingKernel final : public DnnlKernel {
 public:
  RotaryEmbeddingKernel(std::string name, bool onnx, bool interleaved, int64_t num_heads,
                        int64_t rotary_dim)
      : DnnlKernel(std::move(name)),
        onnx_(onnx),
        interleaved_(interleaved),
        num_heads_(num_heads),
        rotary_dim_(rotary_dim) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (out.size() != 1 || out[0] == nullptr) return RunFallback(ctx, in, out);
    std::optional<RopeCall> c =
        onnx_ ? OnnxRope(in, num_heads_, rotary_dim_) : MsftRope(in, num_heads_, rotary_dim_);
    if (!c) return RunFallback(ctx, in, out);
    const Tensor& x = *in[0];
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], DType::kF32, x.dims(), "RotaryEmbedding"));
    const float* xs = x.data<float>();
    const float* cos = in[onnx_ ? 1 : 2]->data<float>();
    const float* sin = in[onnx_ ? 2 : 3]->data<float>();
    float* y = out[0]->data<float>();
    const int64_t units = c->batch * c->heads * c->seq, head = c->head, rot = 2 * c->half;
    const int64_t grain = std::max<int64_t>(1, kValuesPerRange / head);
    ctx.ParallelFor(units, grain, [&](int64_t u0, int64_t u1) {
      for (int64_t u = u0; u < u1; ++u) {
        // u = (b N + n) S + s (heads first) or (b S + s) N + n: the (b, s) of its cache row.
        const int64_t bs =
            c->heads_first ? u / (c->heads * c->seq) * c->seq + u % c->seq : u / c->heads;
        const int64_t row = c->Row(bs), off = u * head;
        cpu::Rotary(c->half, interleaved_, cos + row, sin + row, xs + off, y + off);
        if (rot < head) std::memcpy(y + off + rot, xs + off + rot, (head - rot) * sizeof(float));
      }
    });
    return absl::OkStatus();
  }

 private:
  bool onnx_, interleaved_;
  int64_t num_heads_, rotary_dim_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateRotaryEmbedding(const KernelSpec& spec, bool onnx) {
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
  DYNVM_ASSIGN_OR_RETURN(int64_t interleaved, spec.GetInt("interleaved", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t num_heads, spec.GetInt("num_heads", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t rotary_dim, spec.GetInt("rotary_embedding_dim", 0));
  return std::make_unique<RotaryEmbeddingKernel>(KernelName(spec), onnx, interleaved != 0,
                                                 num_heads, rotary_dim);
}

}  // namespace

void RegisterRotaryKernels(KernelRegistry& r) {
  r.Register(
      KernelRegistration{"dynvm", "SwiGlu", Device::kCPU, kBackend, kDnnlPriority,
                         [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                           DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1}));
                           return std::make_unique<SwiGluKernel>(KernelName(spec));
                         }});
  r.Register(
      KernelRegistration{"dynvm", "RotateHalf", Device::kCPU, kBackend, kDnnlPriority,
                         [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                           DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1, 2}));
                           return std::make_unique<RotateHalfKernel>(KernelName(spec));
                         }});
  for (bool onnx : {false, true}) {
    r.Register(KernelRegistration{
        onnx ? "" : "com.microsoft", "RotaryEmbedding", Device::kCPU, kBackend, kDnnlPriority,
        [onnx](const KernelSpec& spec) { return CreateRotaryEmbedding(spec, onnx); }});
  }
}

}  // namespace dynvm::onednn
