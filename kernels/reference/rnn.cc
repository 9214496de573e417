// Reference LSTM, GRU and RNN (ONNX opsets 7 and 14 forms; opset 14 added `layout`).
//
// A run handles one direction at a time. Per time step it gathers the x rows of the batch (which
// come from different time indices when a reverse direction meets sequences of different
// lengths), runs the step GEMMs (x * W^T, h * R^T), then the fused gate function; rows whose
// sequence has ended are skipped, so their state stays at their last valid step. Inputs of any
// strides and of f16/bf16 are converted into contiguous compute-type (float or double) buffers
// in the invoke site's workspace; f32/f64 weights with row-major inner dims are used in place.
#include "kernels/reference/rnn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

using Kind = RnnActivation::Kind;

int GatesPerDirection(RnnCell cell) {
  switch (cell) {
    case RnnCell::kRnn:
      return 1;
    case RnnCell::kGru:
      return 3;
    case RnnCell::kLstm:
      return 4;
  }
  return 0;
}

int ActivationsPerDirection(RnnCell cell) {
  switch (cell) {
    case RnnCell::kRnn:
      return 1;
    case RnnCell::kGru:
      return 2;
    case RnnCell::kLstm:
      return 3;
  }
  return 0;
}

const char* CellName(RnnCell cell) {
  switch (cell) {
    case RnnCell::kRnn:
      return "RNN";
    case RnnCell::kGru:
      return "GRU";
    case RnnCell::kLstm:
      return "LSTM";
  }
  return "?";
}

struct ActivationInfo {
  absl::string_view name;
  Kind kind;
  bool uses_alpha;
  bool uses_beta;
  float default_alpha;
  float default_beta;
};

// Defaults are those of the ONNX operators of the same name (Affine and ScaledTanh were
// experimental operators: Affine 1/0; ScaledTanh 1/1, i.e. plain tanh).
constexpr ActivationInfo kActivations[] = {
    {"Relu", Kind::kRelu, false, false, 0.0f, 0.0f},
    {"Tanh", Kind::kTanh, false, false, 0.0f, 0.0f},
    {"Sigmoid", Kind::kSigmoid, false, false, 0.0f, 0.0f},
    {"Affine", Kind::kAffine, true, true, 1.0f, 0.0f},
    {"LeakyRelu", Kind::kLeakyRelu, true, false, 0.01f, 0.0f},
    {"ThresholdedRelu", Kind::kThresholdedRelu, true, false, 1.0f, 0.0f},
    {"ScaledTanh", Kind::kScaledTanh, true, true, 1.0f, 1.0f},
    {"HardSigmoid", Kind::kHardSigmoid, true, true, 0.2f, 0.5f},
    {"Elu", Kind::kElu, true, false, 1.0f, 0.0f},
    {"Softsign", Kind::kSoftsign, false, false, 0.0f, 0.0f},
    {"Softplus", Kind::kSoftplus, false, false, 0.0f, 0.0f},
};

// Parses `names` in order, consuming alphas and betas as documented in rnn.h.
absl::StatusOr<std::vector<RnnActivation>> ParseActivations(const char* op,
                                                            const std::vector<std::string>& names,
                                                            const std::vector<float>& alphas,
                                                            const std::vector<float>& betas) {
  std::vector<RnnActivation> acts;
  size_t next_alpha = 0;
  size_t next_beta = 0;
  for (const std::string& name : names) {
    const ActivationInfo* info = nullptr;
    for (const ActivationInfo& a : kActivations) {
      if (absl::EqualsIgnoreCase(a.name, name)) info = &a;
    }
    if (info == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": unknown activation '", name, "'"));
    }
    RnnActivation act;
    act.kind = info->kind;
    if (info->uses_alpha) {
      act.alpha = next_alpha < alphas.size() ? alphas[next_alpha++] : info->default_alpha;
    }
    if (info->uses_beta) {
      act.beta = next_beta < betas.size() ? betas[next_beta++] : info->default_beta;
    }
    acts.push_back(act);
  }
  return acts;
}

template <typename C>
inline C Sigmoid(C v) {
  if (v >= 0) return C(1) / (C(1) + std::exp(-v));
  const C e = std::exp(v);
  return e / (C(1) + e);
}

// x[i] = clamp(x[i], -clip, clip); keeps NaN. clip = +inf: nothing to do.
template <typename C>
inline void Clip(C* x, int64_t n, float clip) {
  if (std::isinf(clip)) return;
  const C hi = static_cast<C>(clip);
  for (int64_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], -hi), hi);
}

// x[i] += p[i] * c[i] (a peephole term) when p is not null.
template <typename C>
inline void AddPeephole(C* x, const C* p, const C* c, int64_t n) {
  if (p == nullptr) return;
  for (int64_t i = 0; i < n; ++i) x[i] += p[i] * c[i];
}

// ---- element conversion between storage type T and compute type C ----

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename C, typename T>
inline C ToCompute(T v) {
  if constexpr (kIsHalf<T>) {
    return static_cast<C>(static_cast<float>(v));
  } else {
    return static_cast<C>(v);
  }
}

template <typename T, typename C>
inline T FromCompute(C v) {
  if constexpr (kIsHalf<T>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// Copies t[index0] (a [rows, cols] matrix of the rank-3 tensor t, or the row t[index0] of a
// rank-2 t) into dst, contiguous.
template <typename T, typename C>
void PackSlice(const Tensor& t, int64_t index0, C* dst) {
  const T* src = t.data<T>() + index0 * t.stride(0);
  if (t.rank() == 2) {
    for (int64_t j = 0; j < t.dim(1); ++j) dst[j] = ToCompute<C>(src[j * t.stride(1)]);
    return;
  }
  const int64_t rows = t.dim(1);
  const int64_t cols = t.dim(2);
  for (int64_t i = 0; i < rows; ++i) {
    const T* row = src + i * t.stride(1);
    C* out = dst + i * cols;
    if (t.stride(2) == 1) {
      for (int64_t j = 0; j < cols; ++j) out[j] = ToCompute<C>(row[j]);
    } else {
      for (int64_t j = 0; j < cols; ++j) out[j] = ToCompute<C>(row[j * t.stride(2)]);
    }
  }
}

// Whether the inner two dims of a rank-3 tensor are row-major (so t[i] is a plain matrix).
bool InnerRowMajor(const Tensor& t) {
  return (t.dim(2) <= 1 || t.stride(2) == 1) && (t.dim(1) <= 1 || t.stride(1) == t.dim(2));
}

absl::Status CheckShape(const char* op, const char* what, const Tensor& t,
                        absl::Span<const int64_t> want) {
  if (t.dims() == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " must have shape ",
                                                 DimsString(want), ", got ", t.DebugString()));
}

// Accumulates element counts of workspace buffers with overflow checks.
class WorkspacePlan {
 public:
  // Returns the offset (in elements) of a new buffer of n elements.
  int64_t Add(int64_t n) {
    const int64_t at = total_;
    if (__builtin_add_overflow(total_, n, &total_)) overflow_ = true;
    return at;
  }
  bool overflow() const { return overflow_; }
  int64_t total() const { return total_; }

 private:
  int64_t total_ = 0;
  bool overflow_ = false;
};

bool MulOverflows(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

// Calls fn(first_row, rows) for each maximal run of consecutive batch rows whose sequence is
// longer than `step`.
template <typename Fn>
void ForEachActiveRun(absl::Span<const int64_t> lens, int64_t step, Fn&& fn) {
  const int64_t batch = static_cast<int64_t>(lens.size());
  int64_t b = 0;
  while (b < batch) {
    if (lens[b] <= step) {
      ++b;
      continue;
    }
    const int64_t first = b;
    while (b < batch && lens[b] > step) ++b;
    fn(first, b - first);
  }
}

// The operands and geometry of one recurrent run, checked.
struct RnnRun {
  const char* op;
  const Tensor *x, *w, *r, *b, *h0, *c0, *p;
  bool lstm, batch_major;
  int64_t seq, batch, input_size, nd, hidden, gh, gh2;
  Dims state_dims;
  // Decode-size batches need no heap allocation.
  absl::InlinedVector<int64_t, 16> lens;
  int64_t max_len;
};

// Checks the operands' shapes and sequence_lens, and fills *run.
absl::Status CheckRun(const RnnAttrs& a, absl::Span<const Tensor* const> in, RnnRun* run) {
  const RnnCell cell = a.cell;
  const char* op = CellName(cell);
  const bool lstm = cell == RnnCell::kLstm;
  auto input = [&](size_t i) -> const Tensor* { return i < in.size() ? in[i] : nullptr; };
  RnnRun& s = *run;
  s.op = op;
  s.lstm = lstm;
  s.x = input(0);
  s.w = input(1);
  s.r = input(2);
  if (s.x == nullptr || s.w == nullptr || s.r == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": X, W and R are required"));
  }
  s.b = input(3);
  const Tensor* seq_lens = input(4);
  s.h0 = input(5);
  s.c0 = lstm ? input(6) : nullptr;
  s.p = lstm ? input(7) : nullptr;
  if (s.x->rank() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": X must be 3-D, got ", s.x->DebugString()));
  }
  s.batch_major = a.layout == 1;
  s.seq = s.x->dim(s.batch_major ? 1 : 0);
  s.batch = s.x->dim(s.batch_major ? 0 : 1);
  s.input_size = s.x->dim(2);
  s.nd = a.num_directions;
  s.hidden = a.hidden_size;
  if (s.hidden == 0) {
    if (s.r->rank() != 3 || s.r->dim(2) <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": hidden_size is not given and R ",
                                                     s.r->DebugString(), " does not tell it"));
    }
    s.hidden = s.r->dim(2);
  }
  if (MulOverflows(GatesPerDirection(cell), s.hidden, &s.gh) || MulOverflows(s.gh, 2, &s.gh2)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": hidden_size ", s.hidden, " is too large"));
  }
  DYNVM_RETURN_IF_ERROR(CheckShape(op, "W", *s.w, {s.nd, s.gh, s.input_size}));
  DYNVM_RETURN_IF_ERROR(CheckShape(op, "R", *s.r, {s.nd, s.gh, s.hidden}));
  if (s.b != nullptr) DYNVM_RETURN_IF_ERROR(CheckShape(op, "B", *s.b, {s.nd, s.gh2}));
  s.state_dims = s.batch_major ? Dims{s.batch, s.nd, s.hidden} : Dims{s.nd, s.batch, s.hidden};
  if (s.h0 != nullptr) DYNVM_RETURN_IF_ERROR(CheckShape(op, "initial_h", *s.h0, s.state_dims));
  if (s.c0 != nullptr) DYNVM_RETURN_IF_ERROR(CheckShape(op, "initial_c", *s.c0, s.state_dims));
  if (s.p != nullptr) DYNVM_RETURN_IF_ERROR(CheckShape(op, "P", *s.p, {s.nd, 3 * s.hidden}));
  if (seq_lens != nullptr) {
    DYNVM_RETURN_IF_ERROR(CheckShape(op, "sequence_lens", *seq_lens, {s.batch}));
    DYNVM_ASSIGN_OR_RETURN(Dims v, ReadInts(*seq_lens, op, "sequence_lens"));
    s.lens.assign(v.begin(), v.end());
    for (int64_t len : s.lens) {
      if (len < 0 || len > s.seq) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": sequence_lens value ", len, " is outside [0, ", s.seq, "] (seq_length)"));
      }
    }
  } else {
    s.lens.assign(static_cast<size_t>(s.batch), s.seq);
  }
  s.max_len = s.lens.empty() ? 0 : *std::max_element(s.lens.begin(), s.lens.end());
  return absl::OkStatus();
}

// The run's outputs (each may be absent), prepared with their shapes.
struct RnnOutputs {
  Tensor *y, *y_h, *y_c;
};

absl::StatusOr<RnnOutputs> PrepareOutputs(const RnnRun& s, KernelContext& ctx,
                                          absl::Span<Tensor* const> out) {
  auto output = [&](size_t i) -> Tensor* { return i < out.size() ? out[i] : nullptr; };
  RnnOutputs o{output(0), output(1), s.lstm ? output(2) : nullptr};
  const DType dtype = s.x->dtype();
  if (o.y != nullptr) {
    const Dims y_dims =
        s.batch_major ? Dims{s.batch, s.seq, s.nd, s.hidden} : Dims{s.seq, s.nd, s.batch, s.hidden};
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, o.y, dtype, y_dims, s.op));
  }
  for (Tensor* t : {o.y_h, o.y_c}) {
    if (t != nullptr) DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, t, dtype, s.state_dims, s.op));
  }
  return o;
}

// The run's scratch, in compute type C, carved from the site's workspace.
template <typename C>
struct RnnBuffers {
  C* w;  // packed W and R of one direction (when not read in place)
  C* r;
  C *bias, *peep, *x_step, *h, *c, *gates, *hr, *rh;
  bool pack_w, pack_r;
};

template <typename T, typename C>
absl::StatusOr<RnnBuffers<C>> CarveBuffers(const RnnRun& s, RnnCell cell, KernelContext& ctx) {
  constexpr bool kSameType = std::is_same_v<T, C>;
  RnnBuffers<C> buf;
  buf.pack_w = !kSameType || !InnerRowMajor(*s.w);
  buf.pack_r = !kSameType || !InnerRowMajor(*s.r);
  int64_t batch_gh = 0, batch_in = 0, batch_h = 0, w_size = 0, r_size = 0;
  if (MulOverflows(s.batch, s.gh, &batch_gh) || MulOverflows(s.batch, s.input_size, &batch_in) ||
      MulOverflows(s.batch, s.hidden, &batch_h) || MulOverflows(s.gh, s.input_size, &w_size) ||
      MulOverflows(s.gh, s.hidden, &r_size)) {
    return absl::InvalidArgumentError(absl::StrCat(s.op, ": sizes overflow"));
  }
  const bool gru = cell == RnnCell::kGru;
  WorkspacePlan plan;
  const int64_t w_at = plan.Add(buf.pack_w ? w_size : 0);
  const int64_t r_at = plan.Add(buf.pack_r ? r_size : 0);
  const int64_t bias_at = plan.Add(s.gh2);
  const int64_t p_at = plan.Add(s.p != nullptr ? 3 * s.hidden : 0);
  const int64_t x_at = plan.Add(batch_in);
  const int64_t h_at = plan.Add(batch_h);
  const int64_t c_at = plan.Add(s.lstm ? batch_h : 0);
  const int64_t gates_at = plan.Add(batch_gh);
  const int64_t hr_at = plan.Add(gru ? batch_gh : 0);
  const int64_t rh_at = plan.Add(gru ? batch_h : 0);
  int64_t bytes = 0;
  if (plan.overflow() || MulOverflows(std::max<int64_t>(plan.total(), 1), sizeof(C), &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(s.op, ": workspace size overflows"));
  }
  DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(static_cast<size_t>(bytes)));
  C* const base = static_cast<C*>(ws);
  buf.w = base + w_at;
  buf.r = base + r_at;
  buf.bias = base + bias_at;
  buf.peep = s.p != nullptr ? base + p_at : nullptr;
  buf.x_step = base + x_at;
  buf.h = base + h_at;
  buf.c = base + c_at;
  buf.gates = base + gates_at;
  buf.hr = base + hr_at;
  buf.rh = base + rh_at;
  return buf;
}

// Element offset of row (t, d, b) of Y, and of row (d, b) of the state tensors.
int64_t YOffset(const RnnRun& s, int64_t t, int64_t d, int64_t bi) {
  return (s.batch_major ? ((bi * s.seq + t) * s.nd + d) : ((t * s.nd + d) * s.batch + bi)) *
         s.hidden;
}
int64_t StateOffset(const RnnRun& s, int64_t d, int64_t bi) {
  return (s.batch_major ? bi * s.nd + d : d * s.batch + bi) * s.hidden;
}

// Loads row (d, b) of initial_h / initial_c (or zeros) into dst.
template <typename T, typename C>
void LoadState(const RnnRun& s, const Tensor* t, int64_t d, C* dst) {
  for (int64_t bi = 0; bi < s.batch; ++bi) {
    C* row = dst + bi * s.hidden;
    if (t == nullptr) {
      std::fill(row, row + s.hidden, C(0));
      continue;
    }
    const T* src = t->data<T>() + (s.batch_major ? bi * t->stride(0) + d * t->stride(1)
                                                 : d * t->stride(0) + bi * t->stride(1));
    for (int64_t j = 0; j < s.hidden; ++j) row[j] = ToCompute<C>(src[j * t->stride(2)]);
  }
}

// One step of rows [b0, b0 + n) of one direction: the gates from x_step and h, then h (and c).
template <typename C>
void CellStep(RnnCell cell, const RnnGateConfig& cfg, const RnnRun& s, const C* wd, const C* rd,
              const RnnBuffers<C>& buf, int64_t b0, int64_t n) {
  const int64_t in = s.input_size, hid = s.hidden, gh = s.gh;
  const C* xs = buf.x_step + b0 * in;
  C* hs = buf.h + b0 * hid;
  C* gs = buf.gates + b0 * gh;
  switch (cell) {
    case RnnCell::kLstm:
      LstmStep<C>(cfg, n, in, hid, xs, hs, buf.c + b0 * hid, wd, rd, buf.bias, buf.peep, hs,
                  buf.c + b0 * hid, gs);
      break;
    case RnnCell::kGru: {
      C* hrs = buf.hr + b0 * gh;
      C* rhs = buf.rh + b0 * hid;
      RnnGemm<C>(n, gh, in, xs, in, wd, in, buf.bias, false, gs, gh);
      const int64_t r_rows = cfg.linear_before_reset ? gh : 2 * hid;
      RnnGemm<C>(n, r_rows, hid, hs, hid, rd, hid, buf.bias + gh, false, hrs, gh);
      GruResetUpdateGates<C>(cfg, n, hid, gs, hrs, hs, rhs);
      if (!cfg.linear_before_reset) {
        RnnGemm<C>(n, hid, hid, rhs, hid, rd + 2 * hid * hid, hid, buf.bias + gh + 2 * hid, false,
                   hrs + 2 * hid, gh);
      }
      GruHiddenGate<C>(cfg, n, hid, gs, hrs, hs, hs);
      break;
    }
    case RnnCell::kRnn:
      RnnGemm<C>(n, gh, in, xs, in, wd, in, buf.bias, false, gs, gh);
      RnnGemm<C>(n, gh, hid, hs, hid, rd, hid, buf.bias + gh, true, gs, gh);
      RnnGate<C>(cfg, n, hid, gs, hs);
      break;
  }
}

// Direction d: every step, then the rows past each sequence's end and the final states.
template <typename T, typename C>
void RunDirection(const RnnAttrs& a, const RnnRun& s, const RnnOutputs& o, const RnnBuffers<C>& buf,
                  int64_t d) {
  constexpr bool kSameType = std::is_same_v<T, C>;
  const RnnGateConfig& cfg = a.config[d];
  const bool reverse = a.direction == RnnDirection::kReverse || d == 1;
  // Matrix d of W or R: in place when possible, else packed into the buffer.
  auto weight_matrix = [&](const Tensor& t, bool pack, C* packed) -> const C* {
    if constexpr (kSameType) {
      if (!pack) return t.data<C>() + d * t.stride(0);
    }
    PackSlice<T>(t, d, packed);
    return packed;
  };
  const C* wd = weight_matrix(*s.w, buf.pack_w, buf.w);
  const C* rd = weight_matrix(*s.r, buf.pack_r, buf.r);
  if (s.b != nullptr) {
    PackSlice<T>(*s.b, d, buf.bias);
  } else {
    std::fill(buf.bias, buf.bias + s.gh2, C(0));
  }
  if (s.p != nullptr) PackSlice<T>(*s.p, d, buf.peep);
  LoadState<T>(s, s.h0, d, buf.h);
  if (s.lstm) LoadState<T>(s, s.c0, d, buf.c);
  auto store_row = [&](T* dst, const C* src) {
    for (int64_t j = 0; j < s.hidden; ++j) dst[j] = FromCompute<T>(src[j]);
  };
  const T* const x_data = s.x->data<T>();
  const int64_t x_seq_stride = s.x->stride(s.batch_major ? 1 : 0);
  const int64_t x_batch_stride = s.x->stride(s.batch_major ? 0 : 1);
  const int64_t x_inner_stride = s.x->stride(2);
  T* const y_data = o.y != nullptr ? o.y->data<T>() : nullptr;
  for (int64_t step = 0; step < s.max_len; ++step) {
    // Row b reads X at time index t_b: step forward, or counted back from its own end.
    auto time_of = [&](int64_t bi) { return reverse ? s.lens[bi] - 1 - step : step; };
    ForEachActiveRun(s.lens, step, [&](int64_t b0, int64_t n) {
      for (int64_t bi = b0; bi < b0 + n; ++bi) {
        const T* src = x_data + time_of(bi) * x_seq_stride + bi * x_batch_stride;
        C* dst = buf.x_step + bi * s.input_size;
        for (int64_t k = 0; k < s.input_size; ++k) dst[k] = ToCompute<C>(src[k * x_inner_stride]);
      }
      CellStep<C>(a.cell, cfg, s, wd, rd, buf, b0, n);
      if (y_data != nullptr) {
        for (int64_t bi = b0; bi < b0 + n; ++bi) {
          store_row(y_data + YOffset(s, time_of(bi), d, bi), buf.h + bi * s.hidden);
        }
      }
    });
  }
  // Rows past each sequence's end are zero; the final states are those of the last valid step,
  // zero for an empty sequence.
  if (y_data != nullptr) {
    for (int64_t bi = 0; bi < s.batch; ++bi) {
      for (int64_t t = s.lens[bi]; t < s.seq; ++t) {
        T* row = y_data + YOffset(s, t, d, bi);
        std::fill(row, row + s.hidden, FromCompute<T>(C(0)));
      }
    }
  }
  auto store_final = [&](const C* state, Tensor* tensor) {
    if (tensor == nullptr) return;
    for (int64_t bi = 0; bi < s.batch; ++bi) {
      T* row = tensor->data<T>() + StateOffset(s, d, bi);
      if (s.lens[bi] == 0) {
        std::fill(row, row + s.hidden, FromCompute<T>(C(0)));
      } else {
        store_row(row, state + bi * s.hidden);
      }
    }
  };
  store_final(buf.h, o.y_h);
  store_final(buf.c, o.y_c);
}

template <typename T, typename C>
absl::Status RunTyped(const RnnAttrs& a, KernelContext& ctx, absl::Span<const Tensor* const> in,
                      absl::Span<Tensor* const> out) {
  RnnRun s;
  DYNVM_RETURN_IF_ERROR(CheckRun(a, in, &s));
  DYNVM_ASSIGN_OR_RETURN(RnnOutputs o, PrepareOutputs(s, ctx, out));
  DYNVM_ASSIGN_OR_RETURN(RnnBuffers<C> buf, (CarveBuffers<T, C>(s, a.cell, ctx)));
  for (int64_t d = 0; d < s.nd; ++d) RunDirection<T, C>(a, s, o, buf, d);
  return absl::OkStatus();
}

absl::Status RunRecurrent(const void* attrs, KernelContext& ctx, absl::Span<const Tensor* const> in,
                          absl::Span<Tensor* const> out) {
  const RnnAttrs& a = *static_cast<const RnnAttrs*>(attrs);
  if (in.empty() || in[0] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(CellName(a.cell), ": X is required"));
  }
  switch (in[0]->dtype()) {
    case DType::kF32:
      return RunTyped<float, float>(a, ctx, in, out);
    case DType::kF64:
      return RunTyped<double, double>(a, ctx, in, out);
    case DType::kF16:
      return RunTyped<Half, float>(a, ctx, in, out);
    case DType::kBF16:
      return RunTyped<BFloat16, float>(a, ctx, in, out);
    default:
      return absl::UnimplementedError(
          absl::StrCat(CellName(a.cell), ": dtype ", DTypeName(in[0]->dtype()), " not supported"));
  }
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateRecurrent(const KernelSpec& spec, RnnCell cell) {
  const char* op = CellName(cell);
  const size_t max_inputs = cell == RnnCell::kLstm ? 8 : 6;
  const size_t max_outputs = cell == RnnCell::kLstm ? 3 : 2;
  if (spec.inputs.size() < 3 || spec.inputs.size() > max_inputs) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": takes 3 to ", max_inputs, " inputs, got ", spec.inputs.size()));
  }
  if (spec.outputs.size() > max_outputs) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": has at most ", max_outputs, " outputs, got ", spec.outputs.size()));
  }
  if (spec.inputs[0].dtype == kAnyDType) {
    return absl::UnimplementedError(absl::StrCat(op, ": X needs a concrete dtype"));
  }
  const DType t = spec.input_dtype(0);
  if (!IsFloat(t)) {
    return absl::UnimplementedError(absl::StrCat(op, ": dtype ", DTypeName(t), " not supported"));
  }
  for (size_t i = 1; i < spec.inputs.size(); ++i) {
    const uint8_t dt = spec.inputs[i].dtype;
    if (dt == kAnyDType) continue;
    if (i == 4) {
      if (dt != static_cast<uint8_t>(DType::kI32) && dt != static_cast<uint8_t>(DType::kI64)) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": sequence_lens must be i32 or i64, got ", DTypeName(spec.input_dtype(i))));
      }
    } else if (dt != static_cast<uint8_t>(t)) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": input ", i, " is ", DTypeName(spec.input_dtype(i)), " but X is ", DTypeName(t)));
    }
  }
  for (size_t i = 0; i < spec.outputs.size(); ++i) {
    const uint8_t dt = spec.outputs[i].dtype;
    if (dt != kAnyDType && dt != static_cast<uint8_t>(t)) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": output ", i, " is ", DTypeName(spec.output_dtype(i)), " but X is ", DTypeName(t)));
    }
  }
  DYNVM_ASSIGN_OR_RETURN(RnnAttrs attrs, ParseRnnAttrs(spec, cell));
  return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), &RunRecurrent,
                                          std::make_shared<const RnnAttrs>(std::move(attrs)));
}

}  // namespace

// ---- public functions (rnn.h) ----

absl::StatusOr<RnnAttrs> ParseRnnAttrs(const KernelSpec& spec, RnnCell cell) {
  const char* op = CellName(cell);
  RnnAttrs a;
  a.cell = cell;

  DYNVM_ASSIGN_OR_RETURN(const int64_t hidden, spec.GetInt("hidden_size", 0));
  // Bounded so that 8 * hidden_size (LSTM's B) and friends never overflow.
  constexpr int64_t kMaxHidden = std::numeric_limits<int64_t>::max() / 16;
  if (spec.Find("hidden_size") != nullptr && (hidden <= 0 || hidden > kMaxHidden)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": hidden_size must be positive, got ", hidden));
  }
  a.hidden_size = hidden;

  DYNVM_ASSIGN_OR_RETURN(const std::string direction, spec.GetString("direction", "forward"));
  if (direction == "forward") {
    a.direction = RnnDirection::kForward;
  } else if (direction == "reverse") {
    a.direction = RnnDirection::kReverse;
  } else if (direction == "bidirectional") {
    a.direction = RnnDirection::kBidirectional;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": direction must be forward, reverse or bidirectional, got '", direction, "'"));
  }
  a.num_directions = a.direction == RnnDirection::kBidirectional ? 2 : 1;

  const absl::StatusOr<int64_t> layout = spec.GetInt("layout", 0);
  if (!layout.ok()) return layout.status();
  if (*layout != 0 && *layout != 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": layout must be 0 or 1, got ", *layout));
  }
  a.layout = static_cast<int>(*layout);

  RnnGateConfig cfg;
  if (spec.Find("clip") != nullptr) {
    const absl::StatusOr<float> clip = spec.GetFloat("clip", 0);
    if (!clip.ok()) return clip.status();
    if (!(*clip > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": clip must be positive, got ", *clip));
    }
    cfg.clip = *clip;
  }
  if (cell == RnnCell::kLstm) {
    const absl::StatusOr<int64_t> input_forget = spec.GetInt("input_forget", 0);
    if (!input_forget.ok()) return input_forget.status();
    if (*input_forget != 0 && *input_forget != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": input_forget must be 0 or 1, got ", *input_forget));
    }
    cfg.input_forget = *input_forget == 1;
  }
  if (cell == RnnCell::kGru) {
    const absl::StatusOr<int64_t> lbr = spec.GetInt("linear_before_reset", 0);
    if (!lbr.ok()) return lbr.status();
    cfg.linear_before_reset = *lbr != 0;
  }

  const int per_dir = ActivationsPerDirection(cell);
  const int nd = a.num_directions;
  absl::StatusOr<std::vector<std::string>> names = spec.GetStrings("activations");
  if (!names.ok()) return names.status();
  if (names->empty()) {
    static const char* const kDefaults[] = {"Sigmoid", "Tanh", "Tanh"};
    if (cell == RnnCell::kRnn) {
      names->push_back("Tanh");
    } else {
      names->assign(kDefaults, kDefaults + per_dir);
    }
  } else if (cell == RnnCell::kRnn && nd == 1 && names->size() == 2) {
    names->resize(1);  // RNN's schema default lists ["Tanh", "Tanh"]
  }
  const size_t count = names->size();
  if (count != static_cast<size_t>(per_dir * nd) && count != static_cast<size_t>(per_dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": expects ", per_dir * nd, " activations for direction '", direction,
                     "', got ", count, " (", absl::StrJoin(*names, ", "), ")"));
  }
  const absl::StatusOr<std::vector<float>> alphas = spec.GetFloats("activation_alpha");
  if (!alphas.ok()) return alphas.status();
  const absl::StatusOr<std::vector<float>> betas = spec.GetFloats("activation_beta");
  if (!betas.ok()) return betas.status();
  absl::StatusOr<std::vector<RnnActivation>> acts = ParseActivations(op, *names, *alphas, *betas);
  if (!acts.ok()) return acts.status();
  for (int d = 0; d < nd; ++d) {
    // One direction's list given for a bidirectional cell serves both directions.
    const size_t first = count == static_cast<size_t>(per_dir) ? 0 : d * per_dir;
    RnnGateConfig& dc = a.config[d];
    dc = cfg;
    dc.f = (*acts)[first];
    if (per_dir > 1) dc.g = (*acts)[first + 1];
    if (per_dir > 2) dc.h = (*acts)[first + 2];
  }
  return a;
}

template <typename C>
void ApplyRnnActivation(const RnnActivation& act, C* x, int64_t n) {
  const C alpha = static_cast<C>(act.alpha);
  const C beta = static_cast<C>(act.beta);
  switch (act.kind) {
    case Kind::kRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] < 0 ? C(0) : x[i];
      break;
    case Kind::kTanh:
      for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
      break;
    case Kind::kSigmoid:
      for (int64_t i = 0; i < n; ++i) x[i] = Sigmoid(x[i]);
      break;
    case Kind::kAffine:
      for (int64_t i = 0; i < n; ++i) x[i] = alpha * x[i] + beta;
      break;
    case Kind::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] < 0 ? alpha * x[i] : x[i];
      break;
    case Kind::kThresholdedRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] > alpha ? x[i] : C(0);
      break;
    case Kind::kScaledTanh:
      for (int64_t i = 0; i < n; ++i) x[i] = alpha * std::tanh(beta * x[i]);
      break;
    case Kind::kHardSigmoid:
      for (int64_t i = 0; i < n; ++i) {
        x[i] = std::min(std::max(alpha * x[i] + beta, C(0)), C(1));
      }
      break;
    case Kind::kElu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] < 0 ? alpha * std::expm1(x[i]) : x[i];
      break;
    case Kind::kSoftsign:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (C(1) + std::abs(x[i]));
      break;
    case Kind::kSoftplus:
      for (int64_t i = 0; i < n; ++i) {
        const C v = x[i];
        x[i] = v > 0 ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v));
      }
      break;
  }
}

template <typename C>
void RnnGemm(int64_t m, int64_t n, int64_t k, const C* a, int64_t lda, const C* b, int64_t ldb,
             const C* bias, bool accumulate, C* out, int64_t ldo) {
  for (int64_t i = 0; i < m; ++i) {
    const C* ai = a + i * lda;
    C* oi = out + i * ldo;
    for (int64_t j = 0; j < n; ++j) {
      const C* bj = b + j * ldb;
      C acc = 0;
      for (int64_t kk = 0; kk < k; ++kk) acc += ai[kk] * bj[kk];
      C start = bias != nullptr ? bias[j] : C(0);
      if (accumulate) start += oi[j];
      oi[j] = start + acc;
    }
  }
}

template <typename C>
void LstmGates(const RnnGateConfig& cfg, int64_t batch, int64_t hidden, C* gates, const C* peephole,
               const C* c_prev, C* h_out, C* c_out) {
  const int64_t H = hidden;
  const C* p_i = peephole;
  const C* p_o = peephole != nullptr ? peephole + H : nullptr;
  const C* p_f = peephole != nullptr ? peephole + 2 * H : nullptr;
  for (int64_t b = 0; b < batch; ++b) {
    C* gi = gates + b * 4 * H;
    C* go = gi + H;
    C* gf = gi + 2 * H;
    C* gc = gi + 3 * H;
    const C* cp = c_prev + b * H;
    C* co = c_out + b * H;
    C* ho = h_out + b * H;
    AddPeephole(gi, p_i, cp, H);
    Clip(gi, H, cfg.clip);
    ApplyRnnActivation(cfg.f, gi, H);
    if (cfg.input_forget) {
      for (int64_t j = 0; j < H; ++j) gf[j] = C(1) - gi[j];
    } else {
      AddPeephole(gf, p_f, cp, H);
      Clip(gf, H, cfg.clip);
      ApplyRnnActivation(cfg.f, gf, H);
    }
    Clip(gc, H, cfg.clip);
    ApplyRnnActivation(cfg.g, gc, H);
    for (int64_t j = 0; j < H; ++j) co[j] = gf[j] * cp[j] + gi[j] * gc[j];
    AddPeephole(go, p_o, co, H);
    Clip(go, H, cfg.clip);
    ApplyRnnActivation(cfg.f, go, H);
    // h(C_t) goes through gc, which is free now; c_out must stay unchanged.
    std::copy(co, co + H, gc);
    ApplyRnnActivation(cfg.h, gc, H);
    for (int64_t j = 0; j < H; ++j) ho[j] = go[j] * gc[j];
  }
}

template <typename C>
void GruResetUpdateGates(const RnnGateConfig& cfg, int64_t batch, int64_t hidden, C* xw,
                         const C* hr, const C* h_prev, C* rh) {
  const int64_t H = hidden;
  for (int64_t b = 0; b < batch; ++b) {
    C* zr = xw + b * 3 * H;
    const C* hzr = hr + b * 3 * H;
    for (int64_t j = 0; j < 2 * H; ++j) zr[j] += hzr[j];
    Clip(zr, 2 * H, cfg.clip);
    ApplyRnnActivation(cfg.f, zr, 2 * H);
    if (!cfg.linear_before_reset) {
      const C* r = zr + H;
      const C* hp = h_prev + b * H;
      C* out = rh + b * H;
      for (int64_t j = 0; j < H; ++j) out[j] = r[j] * hp[j];
    }
  }
}

template <typename C>
void GruHiddenGate(const RnnGateConfig& cfg, int64_t batch, int64_t hidden, C* xw, const C* hr,
                   const C* h_prev, C* h_out) {
  const int64_t H = hidden;
  for (int64_t b = 0; b < batch; ++b) {
    const C* z = xw + b * 3 * H;
    const C* r = z + H;
    C* hh = xw + b * 3 * H + 2 * H;
    const C* rec = hr + b * 3 * H + 2 * H;
    if (cfg.linear_before_reset) {
      for (int64_t j = 0; j < H; ++j) hh[j] += r[j] * rec[j];
    } else {
      for (int64_t j = 0; j < H; ++j) hh[j] += rec[j];
    }
    Clip(hh, H, cfg.clip);
    ApplyRnnActivation(cfg.g, hh, H);
    const C* hp = h_prev + b * H;
    C* ho = h_out + b * H;
    for (int64_t j = 0; j < H; ++j) ho[j] = (C(1) - z[j]) * hh[j] + z[j] * hp[j];
  }
}

template <typename C>
void RnnGate(const RnnGateConfig& cfg, int64_t batch, int64_t hidden, C* gates, C* h_out) {
  const int64_t n = batch * hidden;
  Clip(gates, n, cfg.clip);
  ApplyRnnActivation(cfg.f, gates, n);
  std::copy(gates, gates + n, h_out);
}

template <typename C>
void LstmStep(const RnnGateConfig& cfg, int64_t batch, int64_t input_size, int64_t hidden,
              const C* x, const C* h, const C* c, const C* w, const C* r, const C* bias,
              const C* peephole, C* h_out, C* c_out, C* scratch) {
  const int64_t gh = 4 * hidden;
  RnnGemm<C>(batch, gh, input_size, x, input_size, w, input_size, bias, false, scratch, gh);
  RnnGemm<C>(batch, gh, hidden, h, hidden, r, hidden, bias != nullptr ? bias + gh : nullptr, true,
             scratch, gh);
  LstmGates<C>(cfg, batch, hidden, scratch, peephole, c, h_out, c_out);
}

#define DYNVM_RNN_INSTANTIATE(C)                                                                 \
  template void ApplyRnnActivation<C>(const RnnActivation&, C*, int64_t);                        \
  template void RnnGemm<C>(int64_t, int64_t, int64_t, const C*, int64_t, const C*, int64_t,      \
                           const C*, bool, C*, int64_t);                                         \
  template void LstmGates<C>(const RnnGateConfig&, int64_t, int64_t, C*, const C*, const C*, C*, \
                             C*);                                                                \
  template void GruResetUpdateGates<C>(const RnnGateConfig&, int64_t, int64_t, C*, const C*,     \
                                       const C*, C*);                                            \
  template void GruHiddenGate<C>(const RnnGateConfig&, int64_t, int64_t, C*, const C*, const C*, \
                                 C*);                                                            \
  template void RnnGate<C>(const RnnGateConfig&, int64_t, int64_t, C*, C*);                      \
  template void LstmStep<C>(const RnnGateConfig&, int64_t, int64_t, int64_t, const C*, const C*, \
                            const C*, const C*, const C*, const C*, const C*, C*, C*, C*);
DYNVM_RNN_INSTANTIATE(float)
DYNVM_RNN_INSTANTIATE(double)
#undef DYNVM_RNN_INSTANTIATE

void RegisterRnnKernels(KernelRegistry& r) {
  const std::pair<const char*, RnnCell> kOps[] = {
      {"LSTM", RnnCell::kLstm}, {"GRU", RnnCell::kGru}, {"RNN", RnnCell::kRnn}};
  for (const auto& [name, cell] : kOps) {
    const RnnCell c = cell;
    r.Register(
        KernelRegistration{"", name, Device::kCPU, "reference", kReferencePriority,
                           [c](const KernelSpec& spec) { return CreateRecurrent(spec, c); }});
  }
}

}  // namespace dynvm::reference
