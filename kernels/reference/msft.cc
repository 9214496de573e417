// Kernels of ONNX Runtime's contrib operators (domain "com.microsoft"; SimplifiedLayerNormalization
// in the default domain, where ORT defines it). f32; sums in double. The definitions are in
// compiler/ops/msft.cc; ORT's contrib-operator documentation is the specification.
//
//   FastGelu(X, bias?) = GeluTanh(X + bias); BiasGelu(A, B) = GeluErf(A + B);
//   QuickGelu(X) = X sigmoid(alpha X). The bias has X's last dim (any shape of that many
//   elements).
//   SimplifiedLayerNormalization(X, scale) -> Y, inv_std_var?: RMS over [axis, rank).
//   Skip(Simplified)LayerNormalization(X, skip, gamma, [beta,] bias?) -> Y, -, -, sum?:
//   sum = X + skip + bias (skip broadcast over X's leading dims), normalized over the last axis
//   (LayerNorm: (sum - mean) inv_std gamma + beta; Simplified: sum inv_rms gamma).
//   FusedMatMul(A, B) = alpha MatMul(A or A^T, B or B^T), transposes of the last two axes.
//   MatMulNBits(A, B, scales, zero_points?, -, bias?): W[n, k] = (q[n, k] - zp[n, k / bs]) *
//   scales[n, k / bs], q the bits-wide values of B [N, k_blocks, blob_size] packed low bits
//   first; zp packed the same way per row (ceil(k_blocks * bits / 8) bytes) or f32, 2^(bits-1)
//   when absent; Y = A W^T + bias.
//   RotaryEmbedding(X, position_ids, cos_cache, sin_cache): RoPE of each head (below).
//   EmbedLayerNormalization: LayerNorm of word + position + segment embeddings (below).
//   MatMulIntegerToFloat, DynamicQuantizeMatMul: an integer product scaled to f32 (below).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;
constexpr char kMsft[] = "com.microsoft";

bool Present(Inputs in, size_t i) { return i < in.size() && in[i] != nullptr; }

// The elements of `t` (f32) in row-major order.
std::vector<float> Floats(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = p[t.ElementOffset(i)];
  return v;
}

absl::Status NeedF32(const Tensor& t, absl::string_view op, absl::string_view what) {
  if (t.dtype() != DType::kF32) {
    return absl::UnimplementedError(
        absl::StrCat(op, ": ", what, " must be f32, got ", t.DebugString()));
  }
  return absl::OkStatus();
}

// ---- FastGelu, BiasGelu, QuickGelu ----

enum class Act { kFastGelu, kBiasGelu, kQuickGelu };

class BiasActivationKernel final : public Kernel {
 public:
  BiasActivationKernel(std::string op, Act act, float alpha)
      : op_(std::move(op)), act_(act), alpha_(alpha) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (!Present(in, 0) || out.size() != 1 || out[0] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(op_, " takes X and has one output"));
    }
    const Tensor& x = *in[0];
    DYNVM_RETURN_IF_ERROR(NeedF32(x, op_, "X"));
    std::vector<float> bias;
    const int64_t last = x.rank() == 0 ? 1 : x.dim(x.rank() - 1);
    if (Present(in, 1)) {
      DYNVM_RETURN_IF_ERROR(NeedF32(*in[1], op_, "the bias"));
      if (in[1]->numel() != last) {
        return absl::InvalidArgumentError(absl::StrCat(op_, ": the bias ", in[1]->DebugString(),
                                                       " must have X's last dim (", last, ")"));
      }
      bias = Floats(*in[1]);
    }
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, x.dims(), op_));
    const float* xs = x.data<float>();
    float* y = out[0]->data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      double v = xs[x.ElementOffset(i)];
      if (!bias.empty()) v += bias[i % last];
      y[i] = static_cast<float>(Apply(v));
    }
    return absl::OkStatus();
  }
  std::string name() const override { return absl::StrCat(op_, ".f32.ref"); }

 private:
  double Apply(double v) const {
    switch (act_) {
      case Act::kFastGelu:
        return 0.5 * v * (1.0 + std::tanh(0.79788456080286535588 * (v + 0.044715 * v * v * v)));
      case Act::kBiasGelu:
        return 0.5 * v * (1.0 + std::erf(v * 0.70710678118654752440));
      case Act::kQuickGelu:
        return v / (1.0 + std::exp(-alpha_ * v));
    }
    return v;
  }

  std::string op_;
  Act act_;
  double alpha_;
};

// ---- SimplifiedLayerNormalization, SkipLayerNormalization, SkipSimplifiedLayerNormalization ----

// Normalizes `rows` rows of `count` values of `s` in place: LayerNorm (simplified: RMS) with
// gamma and beta (may be empty); the inverse standard deviation of each row into `inv` (may be
// null).
void NormalizeRows(std::vector<double>& s, int64_t rows, int64_t count, bool simplified,
                   double epsilon, const std::vector<float>& gamma, const std::vector<float>& beta,
                   float* inv) {
  for (int64_t r = 0; r < rows; ++r) {
    double* row = s.data() + r * count;
    double mean = 0, square = 0;
    for (int64_t j = 0; j < count; ++j) {
      mean += row[j];
      square += row[j] * row[j];
    }
    mean /= static_cast<double>(count);
    square /= static_cast<double>(count);
    const double var = simplified ? square : std::max(square - mean * mean, 0.0);
    const double inv_std = 1.0 / std::sqrt(var + epsilon);
    if (inv != nullptr) inv[r] = static_cast<float>(inv_std);
    for (int64_t j = 0; j < count; ++j) {
      double v = (simplified ? row[j] : row[j] - mean) * inv_std * gamma[j];
      if (!beta.empty()) v += beta[j];
      row[j] = v;
    }
  }
}

// A parameter of `count` f32 values (absent: empty when optional).
absl::StatusOr<std::vector<float>> Param(Inputs in, size_t i, int64_t count, absl::string_view op,
                                         absl::string_view what) {
  if (!Present(in, i)) return std::vector<float>();
  DYNVM_RETURN_IF_ERROR(NeedF32(*in[i], op, what));
  if (in[i]->numel() != count) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", what, " ", in[i]->DebugString(), " must have ", count, " elements"));
  }
  return Floats(*in[i]);
}

class SimplifiedLayerNormKernel final : public Kernel {
 public:
  SimplifiedLayerNormKernel(int64_t axis, float epsilon) : axis_(axis), epsilon_(epsilon) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    constexpr char kOp[] = "SimplifiedLayerNormalization";
    if (!Present(in, 0) || !Present(in, 1) || out.empty() || out[0] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, " takes (X, scale)"));
    }
    const Tensor& x = *in[0];
    DYNVM_RETURN_IF_ERROR(NeedF32(x, kOp, "X"));
    DYNVM_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_, x.rank(), kOp));
    int64_t rows = 1, count = 1;
    for (int d = 0; d < x.rank(); ++d) (d < axis ? rows : count) *= x.dim(d);
    DYNVM_ASSIGN_OR_RETURN(std::vector<float> scale, Param(in, 1, count, kOp, "scale"));
    std::vector<float> xs = Floats(x);
    std::vector<double> s(xs.begin(), xs.end());
    float* inv = nullptr;
    if (out.size() > 1 && out[1] != nullptr) {
      Dims stat(x.dims().begin(), x.dims().end());
      for (int d = axis; d < x.rank(); ++d) stat[d] = 1;
      DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[1], DType::kF32, stat, kOp));
      inv = out[1]->data<float>();
    }
    NormalizeRows(s, rows, count, /*simplified=*/true, epsilon_, scale, {}, inv);
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, x.dims(), kOp));
    float* y = out[0]->data<float>();
    for (size_t i = 0; i < s.size(); ++i) y[i] = static_cast<float>(s[i]);
    return absl::OkStatus();
  }
  std::string name() const override { return "simplified_layer_norm.f32.ref"; }

 private:
  int64_t axis_;
  float epsilon_;
};

// skip's shape, leading 1s aside, must be X's trailing dims: it repeats over X's leading dims.
absl::Status CheckSkip(const Tensor& x, const Tensor& skip, absl::string_view op) {
  int lead = 0;
  while (lead < skip.rank() && skip.dim(lead) == 1) ++lead;
  const int kept = skip.rank() - lead;
  bool ok = kept <= x.rank();
  for (int d = 1; ok && d <= kept; ++d) ok = skip.dim(skip.rank() - d) == x.dim(x.rank() - d);
  if (!ok || skip.numel() == 0 || x.dim(x.rank() - 1) == 0 ||
      skip.numel() % x.dim(x.rank() - 1) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": skip ", skip.DebugString(),
                                                   " does not broadcast to X ", x.DebugString()));
  }
  return absl::OkStatus();
}

class SkipLayerNormKernel final : public Kernel {
 public:
  SkipLayerNormKernel(std::string op, bool simplified, float epsilon)
      : op_(std::move(op)), simplified_(simplified), epsilon_(epsilon) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    if (!Present(in, 0) || !Present(in, 1) || !Present(in, 2) || out.empty() || out[0] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(op_, " takes (input, skip, gamma, ...)"));
    }
    if ((out.size() > 1 && out[1] != nullptr) || (out.size() > 2 && out[2] != nullptr)) {
      return absl::UnimplementedError(
          absl::StrCat(op_, ": the mean and inv_std_var outputs are not supported"));
    }
    const Tensor& x = *in[0];
    const Tensor& skip = *in[1];
    DYNVM_RETURN_IF_ERROR(NeedF32(x, op_, "input"));
    DYNVM_RETURN_IF_ERROR(NeedF32(skip, op_, "skip"));
    if (x.rank() < 1) return absl::InvalidArgumentError(absl::StrCat(op_, ": input is a scalar"));
    DYNVM_RETURN_IF_ERROR(CheckSkip(x, skip, op_));
    const int64_t count = x.dim(x.rank() - 1), rows = count == 0 ? 0 : x.numel() / count;
    DYNVM_ASSIGN_OR_RETURN(std::vector<float> gamma, Param(in, 2, count, op_, "gamma"));
    const size_t beta_at = simplified_ ? 99 : 3, bias_at = simplified_ ? 3 : 4;
    DYNVM_ASSIGN_OR_RETURN(std::vector<float> beta, Param(in, beta_at, count, op_, "beta"));
    DYNVM_ASSIGN_OR_RETURN(std::vector<float> bias, Param(in, bias_at, count, op_, "bias"));
    const std::vector<float> xs = Floats(x), ss = Floats(skip);
    std::vector<double> s(xs.size());
    for (size_t i = 0; i < s.size(); ++i) {
      // ORT adds in f32: the sum output is exactly its value.
      float v = xs[i] + ss[i % ss.size()];
      if (!bias.empty()) v += bias[i % count];
      s[i] = v;
    }
    if (out.size() > 3 && out[3] != nullptr) {
      DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[3], DType::kF32, x.dims(), op_));
      float* sum = out[3]->data<float>();
      for (size_t i = 0; i < s.size(); ++i) sum[i] = static_cast<float>(s[i]);
    }
    NormalizeRows(s, rows, count, simplified_, epsilon_, gamma, beta, nullptr);
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, x.dims(), op_));
    float* y = out[0]->data<float>();
    for (size_t i = 0; i < s.size(); ++i) y[i] = static_cast<float>(s[i]);
    return absl::OkStatus();
  }
  std::string name() const override { return absl::StrCat(op_, ".f32.ref"); }

 private:
  std::string op_;
  bool simplified_;
  float epsilon_;
};

// EmbedLayerNormalization(input_ids, segment_ids?, word_embedding, position_embedding,
// segment_embedding?, gamma, beta, mask?, position_ids?) -> output, mask_index?, embedding_sum?:
// sum = word[id] + position[pos] + segment[seg] (pos: position_ids [B, S] or [1, S], else the
// token's index in its sequence), output = LayerNorm(sum) gamma + beta over the hidden axis;
// mask_index[b] = the count of 1s in mask[b] (0 without a mask). Ids i32; an id outside its
// table is an error.
class EmbedLayerNormKernel final : public Kernel {
 public:
  explicit EmbedLayerNormKernel(float epsilon) : epsilon_(epsilon) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    constexpr char kOp[] = "EmbedLayerNormalization";
    for (size_t i : {0, 2, 3, 5, 6}) {
      if (!Present(in, i)) {
        return absl::InvalidArgumentError(absl::StrCat(
            kOp, ": input_ids, word_embedding, position_embedding, gamma and beta are required"));
      }
    }
    if (Present(in, 1) != Present(in, 4)) {
      return absl::InvalidArgumentError(absl::StrCat(
          kOp, ": segment_ids and segment_embedding must both be present or both absent"));
    }
    const Tensor& ids = *in[0];
    const Tensor& word = *in[2];
    if (ids.rank() != 2 || ids.dtype() != DType::kI32) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": input_ids must be i32 [batch, sequence], got ", ids.DebugString()));
    }
    const int64_t b = ids.dim(0), s = ids.dim(1);
    if (word.rank() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": word_embedding must be 2-D, got ", word.DebugString()));
    }
    const int64_t h = word.dim(1);
    const Tensor* tables[] = {&word, in[3], Present(in, 4) ? in[4] : nullptr};
    for (const Tensor* t : tables) {
      if (t == nullptr) continue;
      DYNVM_RETURN_IF_ERROR(NeedF32(*t, kOp, "an embedding table"));
      if (t->rank() != 2 || t->dim(1) != h) {
        return absl::InvalidArgumentError(absl::StrCat(
            kOp, ": the embedding tables must be [rows, ", h, "], got ", t->DebugString()));
      }
    }
    DYNVM_ASSIGN_OR_RETURN(std::vector<float> gamma, Param(in, 5, h, kOp, "gamma"));
    DYNVM_ASSIGN_OR_RETURN(std::vector<float> beta, Param(in, 6, h, kOp, "beta"));
    DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> wid, IdsOf(in, 0, b * s, kOp, "input_ids"));
    std::vector<int64_t> sid(static_cast<size_t>(b * s), 0), pid(static_cast<size_t>(b * s));
    if (Present(in, 1)) {
      DYNVM_ASSIGN_OR_RETURN(sid, IdsOf(in, 1, b * s, kOp, "segment_ids"));
    }
    for (int64_t i = 0; i < b * s; ++i) pid[i] = i % s;
    if (Present(in, 8)) {
      const bool broadcast = in[8]->rank() == 2 && in[8]->dim(0) == 1;
      DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> p,
                             IdsOf(in, 8, broadcast ? s : b * s, kOp, "position_ids"));
      for (int64_t i = 0; i < b * s; ++i) pid[i] = p[broadcast ? i % s : i];
    }
    const std::vector<float> wv = Floats(word), pv = Floats(*in[3]);
    const std::vector<float> sv = Present(in, 4) ? Floats(*in[4]) : std::vector<float>();
    std::vector<double> sum(static_cast<size_t>(b * s * h));
    for (int64_t i = 0; i < b * s; ++i) {
      if (wid[i] < 0 || wid[i] >= word.dim(0) || pid[i] < 0 || pid[i] >= in[3]->dim(0) ||
          (Present(in, 4) && (sid[i] < 0 || sid[i] >= in[4]->dim(0)))) {
        return absl::InvalidArgumentError(
            absl::StrCat(kOp, ": token ", i, " has an id outside its embedding table (word ",
                         wid[i], ", position ", pid[i], ", segment ", sid[i], ")"));
      }
      for (int64_t e = 0; e < h; ++e) {
        double v = static_cast<double>(wv[wid[i] * h + e]) + pv[pid[i] * h + e];
        if (!sv.empty()) v += sv[sid[i] * h + e];
        sum[i * h + e] = v;
      }
    }
    const Dims od = {b, s, h};
    if (out.size() > 2 && out[2] != nullptr) {
      DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[2], DType::kF32, od, kOp));
      float* p = out[2]->data<float>();
      for (size_t i = 0; i < sum.size(); ++i) p[i] = static_cast<float>(sum[i]);
    }
    NormalizeRows(sum, b * s, h, /*simplified=*/false, epsilon_, gamma, beta, nullptr);
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, od, kOp));
    float* y = out[0]->data<float>();
    for (size_t i = 0; i < sum.size(); ++i) y[i] = static_cast<float>(sum[i]);
    if (out.size() > 1 && out[1] != nullptr) {
      DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[1], DType::kI32, {b}, kOp));
      std::vector<int64_t> mask(static_cast<size_t>(b * s), 0);
      if (Present(in, 7)) {
        DYNVM_ASSIGN_OR_RETURN(mask, IdsOf(in, 7, b * s, kOp, "mask"));
      }
      int32_t* mi = out[1]->data<int32_t>();
      for (int64_t r = 0; r < b; ++r) {
        mi[r] = static_cast<int32_t>(
            std::count(mask.begin() + r * s, mask.begin() + (r + 1) * s, int64_t{1}));
      }
    }
    return absl::OkStatus();
  }
  std::string name() const override { return "embed_layer_norm.f32.ref"; }

 private:
  // The `count` i32 values of input i.
  static absl::StatusOr<std::vector<int64_t>> IdsOf(Inputs in, size_t i, int64_t count,
                                                    absl::string_view op, absl::string_view what) {
    const Tensor& t = *in[i];
    if (t.dtype() != DType::kI32 || t.numel() != count) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " must be i32 of ", count,
                                                     " values, got ", t.DebugString()));
    }
    std::vector<int64_t> v(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k) v[k] = t.data<int32_t>()[t.ElementOffset(k)];
    return v;
  }

  float epsilon_;
};

// ---- FusedMatMul, MatMulNBits ----

// Y[b, m, n] = alpha sum_k A[b, m, k] B[b, k, n] over the broadcast batch `batch` of A's and B's
// batch dims; `a` and `b` are row-major [..., M, K] and [..., K, N] (already transposed).
absl::Status BatchedMatMul(KernelContext& ctx, Tensor* out, const std::vector<float>& a,
                           const Dims& ad, const std::vector<float>& b, const Dims& bd,
                           double alpha, absl::string_view op) {
  const int ar = static_cast<int>(ad.size()), br = static_cast<int>(bd.size());
  const int64_t m = ad[ar - 2], k = ad[ar - 1], n = bd[br - 1];
  if (bd[br - 2] != k) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": inner dims differ (", k, " and ", bd[br - 2], ")"));
  }
  const Dims ab(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2);
  DYNVM_ASSIGN_OR_RETURN(Dims batch, BroadcastShapes(ab, bb));
  Dims od = batch;
  od.push_back(m);
  od.push_back(n);
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out, DType::kF32, od, op));
  float* y = out->data<float>();
  int64_t batches = 1;
  for (int64_t d : batch) batches *= d;
  const int rank = static_cast<int>(batch.size());
  for (int64_t bi = 0; bi < batches; ++bi) {
    // The batch index's offsets into A and B (right-aligned broadcast).
    int64_t rem = bi, a_off = 0, b_off = 0, a_mul = 1, b_mul = 1;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      const int da = d - (rank - static_cast<int>(ab.size()));
      const int db = d - (rank - static_cast<int>(bb.size()));
      if (da >= 0) {
        a_off += (ab[da] == 1 ? 0 : idx) * a_mul;
        a_mul *= ab[da];
      }
      if (db >= 0) {
        b_off += (bb[db] == 1 ? 0 : idx) * b_mul;
        b_mul *= bb[db];
      }
    }
    const float* pa = a.data() + a_off * m * k;
    const float* pb = b.data() + b_off * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t q = 0; q < k; ++q) acc += static_cast<double>(pa[i * k + q]) * pb[q * n + j];
        y[(bi * m + i) * n + j] = static_cast<float>(alpha * acc);
      }
    }
  }
  return absl::OkStatus();
}

// The values of `t` with its last two axes swapped (in place of the data and the dims).
void TransposeLast2(std::vector<float>& v, Dims& d) {
  const int r = static_cast<int>(d.size());
  const int64_t rows = d[r - 2], cols = d[r - 1],
                mats = rows * cols == 0 ? 0 : v.size() / (rows * cols);
  std::vector<float> t(v.size());
  for (int64_t b = 0; b < mats; ++b) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j)
        t[b * rows * cols + j * rows + i] = v[b * rows * cols + i * cols + j];
    }
  }
  v = std::move(t);
  std::swap(d[r - 2], d[r - 1]);
}

class FusedMatMulKernel final : public Kernel {
 public:
  FusedMatMulKernel(float alpha, bool ta, bool tb) : alpha_(alpha), ta_(ta), tb_(tb) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    constexpr char kOp[] = "FusedMatMul";
    if (!Present(in, 0) || !Present(in, 1) || out.size() != 1 || out[0] == nullptr) {
      return absl::InvalidArgumentError("FusedMatMul takes (A, B) and has one output");
    }
    DYNVM_RETURN_IF_ERROR(NeedF32(*in[0], kOp, "A"));
    DYNVM_RETURN_IF_ERROR(NeedF32(*in[1], kOp, "B"));
    if (in[0]->rank() < 2 || in[1]->rank() < 2) {
      return absl::InvalidArgumentError("FusedMatMul: A and B must have rank >= 2");
    }
    std::vector<float> a = Floats(*in[0]), b = Floats(*in[1]);
    Dims ad(in[0]->dims().begin(), in[0]->dims().end());
    Dims bd(in[1]->dims().begin(), in[1]->dims().end());
    if (ta_) TransposeLast2(a, ad);
    if (tb_) TransposeLast2(b, bd);
    return BatchedMatMul(ctx, out[0], a, ad, b, bd, alpha_, kOp);
  }
  std::string name() const override { return "fused_matmul.f32.ref"; }

 private:
  double alpha_;
  bool ta_, tb_;
};

class MatMulNBitsKernel final : public Kernel {
 public:
  // int8_activations: ONNX Runtime's accuracy_level 4 (its CompInt8), for 4 bits with integer
  // zero points: each row of A quantized per block to int8 (s = amax / 127, round-half-even(a *
  // (127 / amax)) in f32), each block's product an exact integer scaled by s * scale.
  MatMulNBitsKernel(int64_t k, int64_t n, int bits, int64_t block, bool int8_activations)
      : k_(k), n_(n), bits_(bits), block_(block), int8_activations_(int8_activations) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    constexpr char kOp[] = "MatMulNBits";
    if (!Present(in, 0) || !Present(in, 1) || !Present(in, 2) || out.size() != 1 ||
        out[0] == nullptr) {
      return absl::InvalidArgumentError("MatMulNBits takes (A, B, scales, ...), one output");
    }
    const Tensor& a = *in[0];
    DYNVM_RETURN_IF_ERROR(NeedF32(a, kOp, "A"));
    if (a.rank() < 1 || a.dim(a.rank() - 1) != k_) {
      return absl::InvalidArgumentError(
          absl::StrCat("MatMulNBits: A ", a.DebugString(), " must be [..., K = ", k_, "]"));
    }
    const bool int8 = int8_activations_ && !(Present(in, 3) && in[3]->dtype() == DType::kF32);
    std::vector<int> centered;  // v - zp, for int8 activations
    DYNVM_ASSIGN_OR_RETURN(std::vector<float> w, Dequantize(in, int8 ? &centered : nullptr));
    DYNVM_ASSIGN_OR_RETURN(std::vector<float> bias, Param(in, 5, n_, kOp, "bias"));
    Dims od(a.dims().begin(), a.dims().end());
    od.back() = n_;
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, od, kOp));
    const std::vector<float> as = Floats(a);
    float* y = out[0]->data<float>();
    const int64_t rows = k_ == 0 ? 0 : a.numel() / k_;
    if (int8) {
      DYNVM_ASSIGN_OR_RETURN(std::vector<float> scales, Param(in, 2, n_ * Blocks(), kOp, "scales"));
      Int8Product(as, rows, centered, scales, bias, y);
      return absl::OkStatus();
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n_; ++j) {
        double acc = bias.empty() ? 0.0 : bias[j];
        for (int64_t q = 0; q < k_; ++q) acc += static_cast<double>(as[r * k_ + q]) * w[j * k_ + q];
        y[r * n_ + j] = static_cast<float>(acc);
      }
    }
    return absl::OkStatus();
  }
  std::string name() const override { return absl::StrCat("matmul_nbits", bits_, ".f32.ref"); }

 private:
  int64_t Blocks() const { return (k_ + block_ - 1) / block_; }

  // y = bias + sum_b (s[r, b] scale[j, b]) sum_{i in b} q[r, i] centered[j, i], in double.
  void Int8Product(const std::vector<float>& as, int64_t rows, const std::vector<int>& centered,
                   const std::vector<float>& scales, const std::vector<float>& bias,
                   float* y) const {
    const int64_t blocks = Blocks();
    std::vector<int> q(static_cast<size_t>(k_));
    std::vector<float> sa(static_cast<size_t>(blocks));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t i0 = b * block_, i1 = std::min(k_, i0 + block_);
        float amax = 0.0f;
        bool finite = true;
        for (int64_t i = i0; i < i1; ++i) {
          finite = finite && std::isfinite(as[r * k_ + i]);
          amax = std::max(amax, std::fabs(as[r * k_ + i]));
        }
        sa[b] = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
        const float inverse = finite && amax != 0.0f ? 127.0f / amax : 0.0f;
        for (int64_t i = i0; i < i1; ++i) {
          q[i] = static_cast<int>(std::nearbyint(as[r * k_ + i] * inverse));
        }
      }
      for (int64_t j = 0; j < n_; ++j) {
        double acc = bias.empty() ? 0.0 : bias[j];
        for (int64_t b = 0; b < blocks; ++b) {
          int64_t d = 0;
          for (int64_t i = b * block_; i < std::min(k_, (b + 1) * block_); ++i) {
            d += static_cast<int64_t>(q[i]) * centered[j * k_ + i];
          }
          acc += static_cast<double>(sa[b]) * scales[j * blocks + b] * static_cast<double>(d);
        }
        y[r * n_ + j] = static_cast<float>(acc);
      }
    }
  }

  // W [N, K] row-major from B, scales and zero_points; `centered`, when given, gets the integers
  // v - zp (integer zero points only).
  absl::StatusOr<std::vector<float>> Dequantize(Inputs in, std::vector<int>* centered) const {
    constexpr char kOp[] = "MatMulNBits";
    const int64_t blocks = (k_ + block_ - 1) / block_, blob = block_ * bits_ / 8;
    const Tensor& b = *in[1];
    if (b.dtype() != DType::kU8 || b.numel() != n_ * blocks * blob) {
      return absl::InvalidArgumentError(absl::StrCat("MatMulNBits: B ", b.DebugString(),
                                                     " must be u8 [N, k_blocks, blob_size] = [", n_,
                                                     ", ", blocks, ", ", blob, "]"));
    }
    DYNVM_ASSIGN_OR_RETURN(std::vector<float> scales, Param(in, 2, n_ * blocks, kOp, "scales"));
    const int per_byte = 8 / bits_, mask = (1 << bits_) - 1;
    const int64_t zp_row = (blocks + per_byte - 1) / per_byte;
    std::vector<float> zp(static_cast<size_t>(n_ * blocks), static_cast<float>(1 << (bits_ - 1)));
    if (Present(in, 3) && in[3]->dtype() == DType::kF32) {
      DYNVM_ASSIGN_OR_RETURN(zp, Param(in, 3, n_ * blocks, kOp, "zero_points"));
    } else if (Present(in, 3)) {
      const Tensor& z = *in[3];
      if (z.dtype() != DType::kU8 || z.numel() != n_ * zp_row) {
        return absl::InvalidArgumentError(
            absl::StrCat("MatMulNBits: zero_points ", z.DebugString(), " must be u8 with ",
                         n_ * zp_row, " elements (or f32 with ", n_ * blocks, ")"));
      }
      const uint8_t* zs = z.data<uint8_t>();
      for (int64_t j = 0; j < n_; ++j) {
        for (int64_t q = 0; q < blocks; ++q) {
          const uint8_t byte = zs[z.ElementOffset(j * zp_row + q / per_byte)];
          zp[j * blocks + q] = static_cast<float>(byte >> (bits_ * (q % per_byte)) & mask);
        }
      }
    }
    const uint8_t* bs = b.data<uint8_t>();
    std::vector<float> w(static_cast<size_t>(n_ * k_));
    if (centered != nullptr) centered->assign(static_cast<size_t>(n_ * k_), 0);
    for (int64_t j = 0; j < n_; ++j) {
      for (int64_t q = 0; q < k_; ++q) {
        const int64_t blk = q / block_, e = q % block_;
        const uint8_t byte = bs[b.ElementOffset((j * blocks + blk) * blob + e / per_byte)];
        const int v = byte >> (bits_ * (e % per_byte)) & mask;
        w[j * k_ + q] = (static_cast<float>(v) - zp[j * blocks + blk]) * scales[j * blocks + blk];
        if (centered != nullptr) {
          (*centered)[j * k_ + q] = v - static_cast<int>(zp[j * blocks + blk]);
        }
      }
    }
    return w;
  }

  int64_t k_, n_;
  int bits_;
  int64_t block_;
  bool int8_activations_;
};

// ---- RotaryEmbedding ----

// X [B, S, hidden] (heads of head_size = hidden / num_heads, or 2 cos.dim(1) without num_heads)
// or [B, N, S, head_size]; position_ids [B, S], or [1]: the offset of position 0. The first
// rotary_dim elements of each head rotate in halves (x[i], x[i + rotary_dim / 2]) or in pairs
// (x[2i], x[2i + 1]) by the angle of the position's cos and sin; the rest is copied.
class RotaryEmbeddingKernel final : public Kernel {
 public:
  RotaryEmbeddingKernel(bool interleaved, int64_t num_heads, int64_t rotary_dim)
      : interleaved_(interleaved), num_heads_(num_heads), rotary_dim_(rotary_dim) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    constexpr char kOp[] = "RotaryEmbedding";
    if (in.size() != 4 || !Present(in, 0) || !Present(in, 1) || !Present(in, 2) ||
        !Present(in, 3) || out.size() != 1 || out[0] == nullptr) {
      return absl::InvalidArgumentError(
          "RotaryEmbedding takes (input, position_ids, cos_cache, sin_cache), one output");
    }
    const Tensor& x = *in[0];
    const Tensor& pos = *in[1];
    DYNVM_RETURN_IF_ERROR(NeedF32(x, kOp, "input"));
    DYNVM_RETURN_IF_ERROR(NeedF32(*in[2], kOp, "cos_cache"));
    DYNVM_RETURN_IF_ERROR(NeedF32(*in[3], kOp, "sin_cache"));
    const Tensor& cos = *in[2];
    if (cos.rank() != 2 || in[3]->dims() != cos.dims() || pos.dtype() != DType::kI64 ||
        (x.rank() != 3 && x.rank() != 4)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RotaryEmbedding: input must be 3-D or 4-D, position_ids i64, and cos_cache and "
          "sin_cache 2-D of one shape; got ",
          x.DebugString(), ", ", pos.DebugString(), ", ", cos.DebugString()));
    }
    const int64_t batch = x.dim(0), seq = x.rank() == 3 ? x.dim(1) : x.dim(2);
    int64_t head = x.dim(x.rank() - 1), heads = x.rank() == 4 ? x.dim(1) : 1;
    if (x.rank() == 3) {
      head = num_heads_ > 0 ? x.dim(2) / num_heads_ : cos.dim(1) * 2;
      heads = head > 0 ? x.dim(2) / head : 0;
    }
    const int64_t rot = rotary_dim_ > 0 ? rotary_dim_ : cos.dim(1) * 2, half = rot / 2;
    const int64_t width = x.rank() == 3 ? x.dim(2) : heads * head;
    if (head <= 0 || heads * head != width || rot > head || half != cos.dim(1) || rot % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RotaryEmbedding: the head size (", head, ") and rotary dim (", rot,
          ") do not fit input ", x.DebugString(), " and cos_cache ", cos.DebugString()));
    }
    if (!(pos.numel() == 1 || (pos.rank() == 2 && pos.dim(0) == batch && pos.dim(1) == seq))) {
      return absl::InvalidArgumentError(absl::StrCat("RotaryEmbedding: position_ids ",
                                                     pos.DebugString(), " must be [1] or [B, S]"));
    }
    // X copied to the site's workspace (the output may share its memory), the caches read in
    // place: a decode step's call allocates nothing.
    DYNVM_ASSIGN_OR_RETURN(
        void* ws,
        ctx.Workspace(static_cast<size_t>(std::max<int64_t>(x.numel(), 1)) * sizeof(float)));
    auto* xs = static_cast<float*>(ws);
    for (int64_t i = 0; i < x.numel(); ++i) xs[i] = x.data<float>()[x.ElementOffset(i)];
    const Tensor& sin = *in[3];
    auto cs = [&](int64_t i) { return cos.data<float>()[cos.ElementOffset(i)]; };
    auto ss = [&](int64_t i) { return sin.data<float>()[sin.ElementOffset(i)]; };
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, x.dims(), kOp));
    float* y = out[0]->data<float>();
    std::copy_n(xs, x.numel(), y);
    const int64_t* ps = pos.data<int64_t>();
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t s = 0; s < seq; ++s) {
        const int64_t p =
            pos.numel() == 1 ? ps[pos.ElementOffset(0)] + s : ps[pos.ElementOffset(b * seq + s)];
        if (p < 0 || p >= cos.dim(0)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "RotaryEmbedding: position ", p, " is outside cos_cache ", cos.DebugString()));
        }
        for (int64_t n = 0; n < heads; ++n) {
          // [B, S, N, H] or [B, N, S, H].
          const int64_t base = x.rank() == 3 ? ((b * seq + s) * heads + n) * head
                                             : ((b * heads + n) * seq + s) * head;
          for (int64_t i = 0; i < half; ++i) {
            const int64_t i1 = interleaved_ ? 2 * i : i, i2 = interleaved_ ? 2 * i + 1 : i + half;
            const double c = cs(p * half + i), sn = ss(p * half + i);
            const double x1 = xs[base + i1], x2 = xs[base + i2];
            y[base + i1] = static_cast<float>(x1 * c - x2 * sn);
            y[base + i2] = static_cast<float>(x2 * c + x1 * sn);
          }
        }
      }
    }
    return absl::OkStatus();
  }
  std::string name() const override { return "rotary_embedding.f32.ref"; }

 private:
  bool interleaved_;
  int64_t num_heads_, rotary_dim_;
};

// ---- MatMulIntegerToFloat, DynamicQuantizeMatMul ----

// An integer tensor (u8 or i8) as doubles, row-major; nullopt for another dtype.
std::optional<std::vector<double>> Ints8(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kU8) {
    for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.data<uint8_t>()[t.ElementOffset(i)];
  } else if (t.dtype() == DType::kI8) {
    for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.data<int8_t>()[t.ElementOffset(i)];
  } else {
    return std::nullopt;
  }
  return v;
}

// A f32 scale of one value or `n` values (per column); errors name `what`.
absl::StatusOr<std::vector<float>> ScaleOf(const Tensor* t, int64_t n, absl::string_view op,
                                           absl::string_view what) {
  if (t == nullptr) return std::vector<float>{1.0f};
  DYNVM_RETURN_IF_ERROR(NeedF32(*t, op, what));
  if (t->numel() != 1 && t->numel() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", what, " ", t->DebugString(), " must have 1 or ", n, " elements"));
  }
  return Floats(*t);
}

// Y = (A - a_zp) (B - b_zp) a_scale b_scale + bias; A [..., M, K] (integers, or f32 quantized
// here to u8 per tensor as DynamicQuantizeLinear does), B [K, N] u8 or i8; the zero points of
// B and its scale per tensor or per column.
class QuantMatMulToFloatKernel final : public Kernel {
 public:
  explicit QuantMatMulToFloatKernel(std::string op) : op_(std::move(op)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    const bool dynamic = op_ == "DynamicQuantizeMatMul";
    // Inputs: A, B, a_scale, b_scale, a_zp, b_zp, bias; or A, B, b_scale, b_zp, bias.
    const size_t b_scale_at = dynamic ? 2 : 3, b_zp_at = dynamic ? 3 : 5, bias_at = dynamic ? 4 : 6;
    if (!Present(in, 0) || !Present(in, 1) || !Present(in, b_scale_at) || out.size() != 1 ||
        out[0] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(op_, ": missing inputs"));
    }
    const Tensor& a = *in[0];
    const Tensor& b = *in[1];
    std::optional<std::vector<double>> bq = Ints8(b);
    if (a.rank() < 1 || b.rank() != 2 || a.dim(a.rank() - 1) != b.dim(0) || !bq) {
      return absl::InvalidArgumentError(absl::StrCat(op_, ": A ", a.DebugString(),
                                                     " must be [..., K] and B ", b.DebugString(),
                                                     " u8 or i8 [K, N]"));
    }
    const int64_t k = b.dim(0), n = b.dim(1), rows = k == 0 ? 0 : a.numel() / k;
    std::vector<double> aq;
    float a_scale = 1.0f;
    if (dynamic) {
      DYNVM_RETURN_IF_ERROR(NeedF32(a, op_, "A"));
      aq = QuantizeU8(Floats(a), &a_scale);
    } else {
      std::optional<std::vector<double>> ai = Ints8(a);
      if (!ai) return absl::InvalidArgumentError(absl::StrCat(op_, ": A must be u8 or i8"));
      aq = std::move(*ai);
      DYNVM_ASSIGN_OR_RETURN(std::vector<float> as, ScaleOf(in[2], 1, op_, "a_scale"));
      a_scale = as[0];
      if (Present(in, 4)) {
        std::optional<std::vector<double>> zp = Ints8(*in[4]);
        if (!zp || zp->size() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(op_, ": a_zero_point must be one value"));
        }
        for (double& v : aq) v -= (*zp)[0];
      }
    }
    DYNVM_ASSIGN_OR_RETURN(std::vector<float> bs, ScaleOf(in[b_scale_at], n, op_, "b_scale"));
    if (Present(in, b_zp_at)) {
      std::optional<std::vector<double>> zp = Ints8(*in[b_zp_at]);
      if (!zp || (zp->size() != 1 && static_cast<int64_t>(zp->size()) != n)) {
        return absl::InvalidArgumentError(
            absl::StrCat(op_, ": b_zero_point must be u8 or i8 of 1 or N values"));
      }
      for (int64_t q = 0; q < k * n; ++q) (*bq)[q] -= (*zp)[zp->size() == 1 ? 0 : q % n];
    }
    DYNVM_ASSIGN_OR_RETURN(std::vector<float> bias, Param(in, bias_at, n, op_, "bias"));
    Dims od(a.dims().begin(), a.dims().end());
    od.back() = n;
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, od, op_));
    float* y = out[0]->data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;  // exact: integers
        for (int64_t q = 0; q < k; ++q) acc += aq[r * k + q] * (*bq)[q * n + j];
        float v = static_cast<float>(acc) * (a_scale * bs[bs.size() == 1 ? 0 : j]);
        if (!bias.empty()) v += bias[j];
        y[r * n + j] = v;
      }
    }
    return absl::OkStatus();
  }
  std::string name() const override { return absl::StrCat(op_, ".f32.ref"); }

 private:
  // x quantized to u8 per tensor (DynamicQuantizeLinear's parameters), less the zero point.
  static std::vector<double> QuantizeU8(const std::vector<float>& x, float* scale) {
    float lo = 0, hi = 0;
    for (float v : x) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    *scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    const float zp = std::nearbyint(std::clamp(-lo / *scale, 0.0f, 255.0f));
    std::vector<double> q(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      q[i] = std::clamp(std::nearbyint(x[i] / *scale) + zp, 0.0f, 255.0f) - zp;
    }
    return q;
  }

  std::string op_;
};

bool InputIsF32(const KernelSpec& spec, size_t i) {
  return i < spec.inputs.size() && spec.inputs[i].dtype == static_cast<uint8_t>(DType::kF32);
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeActivation(const KernelSpec& spec, Act act) {
  if (!InputIsF32(spec, 0)) return absl::UnimplementedError(spec.op + ": X must be f32");
  DYNVM_ASSIGN_OR_RETURN(float alpha, spec.GetFloat("alpha", 1.702f));
  return std::make_unique<BiasActivationKernel>(spec.op, act, alpha);
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeSkipLayerNorm(const KernelSpec& spec, bool simplified) {
  if (!InputIsF32(spec, 0)) return absl::UnimplementedError(spec.op + ": input must be f32");
  DYNVM_ASSIGN_OR_RETURN(float epsilon, spec.GetFloat("epsilon", 1e-12f));
  return std::make_unique<SkipLayerNormKernel>(spec.op, simplified, epsilon);
}

}  // namespace

void RegisterMsftKernels(KernelRegistry& r) {
  auto add = [&r](const char* domain, const char* op, KernelFactory factory) {
    r.Register({domain, op, Device::kCPU, "reference", kReferencePriority, std::move(factory)});
  };
  add(kMsft, "FastGelu", [](const KernelSpec& s) { return MakeActivation(s, Act::kFastGelu); });
  add(kMsft, "BiasGelu", [](const KernelSpec& s) { return MakeActivation(s, Act::kBiasGelu); });
  add(kMsft, "QuickGelu", [](const KernelSpec& s) { return MakeActivation(s, Act::kQuickGelu); });
  add(kMsft, "SkipLayerNormalization",
      [](const KernelSpec& s) { return MakeSkipLayerNorm(s, false); });
  add(kMsft, "SkipSimplifiedLayerNormalization",
      [](const KernelSpec& s) { return MakeSkipLayerNorm(s, true); });
  add("", "SimplifiedLayerNormalization",
      [](const KernelSpec& s) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        if (!InputIsF32(s, 0)) return absl::UnimplementedError(s.op + ": X must be f32");
        DYNVM_ASSIGN_OR_RETURN(int64_t axis, s.GetInt("axis", -1));
        DYNVM_ASSIGN_OR_RETURN(float epsilon, s.GetFloat("epsilon", 1e-5f));
        return std::make_unique<SimplifiedLayerNormKernel>(axis, epsilon);
      });
  add(kMsft, "EmbedLayerNormalization",
      [](const KernelSpec& s) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        DYNVM_ASSIGN_OR_RETURN(float epsilon, s.GetFloat("epsilon", 1e-12f));
        return std::make_unique<EmbedLayerNormKernel>(epsilon);
      });
  add(kMsft, "FusedMatMul", [](const KernelSpec& s) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (!InputIsF32(s, 0)) return absl::UnimplementedError("FusedMatMul: A must be f32");
    DYNVM_ASSIGN_OR_RETURN(float alpha, s.GetFloat("alpha", 1.0f));
    DYNVM_ASSIGN_OR_RETURN(int64_t ta, s.GetInt("transA", 0));
    DYNVM_ASSIGN_OR_RETURN(int64_t tb, s.GetInt("transB", 0));
    return std::make_unique<FusedMatMulKernel>(alpha, ta != 0, tb != 0);
  });
  add(kMsft, "RotaryEmbedding", [](const KernelSpec& s) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (!InputIsF32(s, 0)) return absl::UnimplementedError("RotaryEmbedding: input must be f32");
    DYNVM_ASSIGN_OR_RETURN(int64_t interleaved, s.GetInt("interleaved", 0));
    DYNVM_ASSIGN_OR_RETURN(int64_t num_heads, s.GetInt("num_heads", 0));
    DYNVM_ASSIGN_OR_RETURN(int64_t rotary_dim, s.GetInt("rotary_embedding_dim", 0));
    return std::make_unique<RotaryEmbeddingKernel>(interleaved != 0, num_heads, rotary_dim);
  });
  for (const char* op : {"MatMulIntegerToFloat", "DynamicQuantizeMatMul"}) {
    add(kMsft, op, [](const KernelSpec& s) -> absl::StatusOr<std::unique_ptr<Kernel>> {
      return std::make_unique<QuantMatMulToFloatKernel>(s.op);
    });
  }
  add(kMsft, "MatMulNBits", [](const KernelSpec& s) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (!InputIsF32(s, 0)) return absl::UnimplementedError("MatMulNBits: A must be f32");
    DYNVM_ASSIGN_OR_RETURN(int64_t k, s.GetInt("K", -1));
    DYNVM_ASSIGN_OR_RETURN(int64_t n, s.GetInt("N", -1));
    DYNVM_ASSIGN_OR_RETURN(int64_t bits, s.GetInt("bits", 4));
    DYNVM_ASSIGN_OR_RETURN(int64_t block, s.GetInt("block_size", -1));
    DYNVM_ASSIGN_OR_RETURN(int64_t accuracy, s.GetInt("accuracy_level", 0));
    if (k <= 0 || n <= 0 || (bits != 4 && bits != 8) || block < 16 || (block & (block - 1))) {
      return absl::UnimplementedError(absl::StrCat("MatMulNBits: K ", k, ", N ", n, ", bits ", bits,
                                                   ", block_size ", block, " not supported"));
    }
    return std::make_unique<MatMulNBitsKernel>(k, n, static_cast<int>(bits), block,
                                               bits == 4 && accuracy == 4);
  });
}

}  // namespace dynvm::reference
