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

template <typename T, typename C>
absl::Status RunTyped(const RnnAttrs& a, KernelContext& ctx, absl::Span<const Tensor* const> in,
                      absl::Span<Tensor* const> out) {
  const RnnCell cell = a.cell;
  const char* op = CellName(cell);
  const bool lstm = cell == RnnCell::kLstm;
  auto input = [&](size_t i) -> const Tensor* { return i < in.size() ? in[i] : nullptr; };
  auto output = [&](size_t i) -> Tensor* { return i < out.size() ? out[i] : nullptr; };
  const Tensor* x = input(0);
  const Tensor* w = input(1);
  const Tensor* r = input(2);
  if (x == nullptr || w == nullptr || r == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": X, W and R are required"));
  }
  const Tensor* b = input(3);
  const Tensor* seq_lens = input(4);
  const Tensor* h0 = input(5);
  const Tensor* c0 = lstm ? input(6) : nullptr;
  const Tensor* p = lstm ? input(7) : nullptr;

  // ---- shapes ----
  if (x->rank() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": X must be 3-D, got ", x->DebugString()));
  }
  const bool batch_major = a.layout == 1;
  const int64_t seq = x->dim(batch_major ? 1 : 0);
  const int64_t batch = x->dim(batch_major ? 0 : 1);
  const int64_t input_size = x->dim(2);
  const int64_t nd = a.num_directions;
  int64_t hidden = a.hidden_size;
  if (hidden == 0) {
    if (r->rank() != 3 || r->dim(2) <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": hidden_size is not given and R ",
                                                     r->DebugString(), " does not tell it"));
    }
    hidden = r->dim(2);
  }
  const int64_t gates = GatesPerDirection(cell);
  int64_t gh = 0;  // gate rows of W and R
  int64_t gh2 = 0;
  if (MulOverflows(gates, hidden, &gh) || MulOverflows(gh, 2, &gh2)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": hidden_size ", hidden, " is too large"));
  }
  DYNVM_RETURN_IF_ERROR(CheckShape(op, "W", *w, {nd, gh, input_size}));
  DYNVM_RETURN_IF_ERROR(CheckShape(op, "R", *r, {nd, gh, hidden}));
  if (b != nullptr) {
    DYNVM_RETURN_IF_ERROR(CheckShape(op, "B", *b, {nd, gh2}));
  }
  const Dims state_dims = batch_major ? Dims{batch, nd, hidden} : Dims{nd, batch, hidden};
  if (h0 != nullptr) {
    DYNVM_RETURN_IF_ERROR(CheckShape(op, "initial_h", *h0, state_dims));
  }
  if (c0 != nullptr) {
    DYNVM_RETURN_IF_ERROR(CheckShape(op, "initial_c", *c0, state_dims));
  }
  if (p != nullptr) {
    DYNVM_RETURN_IF_ERROR(CheckShape(op, "P", *p, {nd, 3 * hidden}));
  }
  // Decode-size batches need no heap allocation.
  absl::InlinedVector<int64_t, 16> lens;
  if (seq_lens != nullptr) {
    DYNVM_RETURN_IF_ERROR(CheckShape(op, "sequence_lens", *seq_lens, {batch}));
    DYNVM_ASSIGN_OR_RETURN(Dims v, ReadInts(*seq_lens, op, "sequence_lens"));
    lens.assign(v.begin(), v.end());
    for (int64_t len : lens) {
      if (len < 0 || len > seq) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": sequence_lens value ", len,
                                                       " is outside [0, ", seq, "] (seq_length)"));
      }
    }
  } else {
    lens.assign(static_cast<size_t>(batch), seq);
  }
  const int64_t max_len = lens.empty() ? 0 : *std::max_element(lens.begin(), lens.end());

  // ---- outputs ----
  const DType dtype = x->dtype();
  Tensor* y = output(0);
  Tensor* y_h = output(1);
  Tensor* y_c = lstm ? output(2) : nullptr;
  if (y != nullptr) {
    const Dims y_dims = batch_major ? Dims{batch, seq, nd, hidden} : Dims{seq, nd, batch, hidden};
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, y, dtype, y_dims, op));
  }
  if (y_h != nullptr) {
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, y_h, dtype, state_dims, op));
  }
  if (y_c != nullptr) {
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, y_c, dtype, state_dims, op));
  }

  // ---- workspace ----
  constexpr bool kSameType = std::is_same_v<T, C>;
  const bool pack_w = !kSameType || !InnerRowMajor(*w);
  const bool pack_r = !kSameType || !InnerRowMajor(*r);
  int64_t batch_gh = 0;
  int64_t batch_in = 0;
  int64_t batch_h = 0;
  int64_t w_size = 0;
  int64_t r_size = 0;
  if (MulOverflows(batch, gh, &batch_gh) || MulOverflows(batch, input_size, &batch_in) ||
      MulOverflows(batch, hidden, &batch_h) || MulOverflows(gh, input_size, &w_size) ||
      MulOverflows(gh, hidden, &r_size)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": sizes overflow"));
  }
  WorkspacePlan plan;
  const int64_t w_at = plan.Add(pack_w ? w_size : 0);
  const int64_t r_at = plan.Add(pack_r ? r_size : 0);
  const int64_t bias_at = plan.Add(gh2);
  const int64_t p_at = plan.Add(p != nullptr ? 3 * hidden : 0);
  const int64_t x_at = plan.Add(batch_in);
  const int64_t h_at = plan.Add(batch_h);
  const int64_t c_at = plan.Add(lstm ? batch_h : 0);
  const int64_t gates_at = plan.Add(batch_gh);
  const int64_t hr_at = plan.Add(cell == RnnCell::kGru ? batch_gh : 0);
  const int64_t rh_at = plan.Add(cell == RnnCell::kGru ? batch_h : 0);
  int64_t bytes = 0;
  if (plan.overflow() || MulOverflows(std::max<int64_t>(plan.total(), 1), sizeof(C), &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": workspace size overflows"));
  }
  DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(static_cast<size_t>(bytes)));
  C* const base = static_cast<C*>(ws);
  C* const bias = base + bias_at;
  C* const peep = p != nullptr ? base + p_at : nullptr;
  C* const x_step = base + x_at;
  C* const h = base + h_at;
  C* const c = base + c_at;
  C* const gate_buf = base + gates_at;
  C* const hr = base + hr_at;
  C* const rh = base + rh_at;

  const T* const x_data = x->data<T>();
  const int64_t x_seq_stride = x->stride(batch_major ? 1 : 0);
  const int64_t x_batch_stride = x->stride(batch_major ? 0 : 1);
  const int64_t x_inner_stride = x->stride(2);
  T* const y_data = y != nullptr ? y->data<T>() : nullptr;
  // Element offset of row (t, d, b) of Y, and of row (d, b) of the state tensors.
  auto y_offset = [&](int64_t t, int64_t d, int64_t bi) {
    return (batch_major ? ((bi * seq + t) * nd + d) : ((t * nd + d) * batch + bi)) * hidden;
  };
  auto state_offset = [&](int64_t d, int64_t bi) {
    return (batch_major ? bi * nd + d : d * batch + bi) * hidden;
  };
  // Loads row (d, b) of initial_h / initial_c (or zeros) into dst.
  auto load_state = [&](const Tensor* t, int64_t d, C* dst) {
    for (int64_t bi = 0; bi < batch; ++bi) {
      C* row = dst + bi * hidden;
      if (t == nullptr) {
        std::fill(row, row + hidden, C(0));
        continue;
      }
      const T* src = t->data<T>() + (batch_major ? bi * t->stride(0) + d * t->stride(1)
                                                 : d * t->stride(0) + bi * t->stride(1));
      for (int64_t j = 0; j < hidden; ++j) row[j] = ToCompute<C>(src[j * t->stride(2)]);
    }
  };
  // Matrix d of W or R: in place when possible, else packed into buf.
  auto weight_matrix = [&](const Tensor& t, bool pack, int64_t d, C* buf) -> const C* {
    if constexpr (kSameType) {
      if (!pack) return t.data<C>() + d * t.stride(0);
    }
    PackSlice<T>(t, d, buf);
    return buf;
  };
  auto store_row = [&](T* dst, const C* src) {
    for (int64_t j = 0; j < hidden; ++j) dst[j] = FromCompute<T>(src[j]);
  };

  for (int64_t d = 0; d < nd; ++d) {
    const RnnGateConfig& cfg = a.config[d];
    const bool reverse = a.direction == RnnDirection::kReverse || d == 1;
    const C* wd = weight_matrix(*w, pack_w, d, base + w_at);
    const C* rd = weight_matrix(*r, pack_r, d, base + r_at);
    if (b != nullptr) {
      PackSlice<T>(*b, d, bias);
    } else {
      std::fill(bias, bias + gh2, C(0));
    }
    if (p != nullptr) PackSlice<T>(*p, d, peep);
    load_state(h0, d, h);
    if (lstm) load_state(c0, d, c);

    for (int64_t step = 0; step < max_len; ++step) {
      // Row b reads X at time index t_b: step forward, or counted back from its own end.
      auto time_of = [&](int64_t bi) { return reverse ? lens[bi] - 1 - step : step; };
      ForEachActiveRun(lens, step, [&](int64_t b0, int64_t n) {
        for (int64_t bi = b0; bi < b0 + n; ++bi) {
          const T* src = x_data + time_of(bi) * x_seq_stride + bi * x_batch_stride;
          C* dst = x_step + bi * input_size;
          for (int64_t k = 0; k < input_size; ++k) dst[k] = ToCompute<C>(src[k * x_inner_stride]);
        }
        const C* xs = x_step + b0 * input_size;
        C* hs = h + b0 * hidden;
        C* gs = gate_buf + b0 * gh;
        switch (cell) {
          case RnnCell::kLstm:
            LstmStep<C>(cfg, n, input_size, hidden, xs, hs, c + b0 * hidden, wd, rd, bias, peep, hs,
                        c + b0 * hidden, gs);
            break;
          case RnnCell::kGru: {
            C* hrs = hr + b0 * gh;
            RnnGemm<C>(n, gh, input_size, xs, input_size, wd, input_size, bias, false, gs, gh);
            const int64_t r_rows = cfg.linear_before_reset ? gh : 2 * hidden;
            RnnGemm<C>(n, r_rows, hidden, hs, hidden, rd, hidden, bias + gh, false, hrs, gh);
            GruResetUpdateGates<C>(cfg, n, hidden, gs, hrs, hs, rh + b0 * hidden);
            if (!cfg.linear_before_reset) {
              RnnGemm<C>(n, hidden, hidden, rh + b0 * hidden, hidden, rd + 2 * hidden * hidden,
                         hidden, bias + gh + 2 * hidden, false, hrs + 2 * hidden, gh);
            }
            GruHiddenGate<C>(cfg, n, hidden, gs, hrs, hs, hs);
            break;
          }
          case RnnCell::kRnn:
            RnnGemm<C>(n, gh, input_size, xs, input_size, wd, input_size, bias, false, gs, gh);
            RnnGemm<C>(n, gh, hidden, hs, hidden, rd, hidden, bias + gh, true, gs, gh);
            RnnGate<C>(cfg, n, hidden, gs, hs);
            break;
        }
        if (y_data != nullptr) {
          for (int64_t bi = b0; bi < b0 + n; ++bi) {
            store_row(y_data + y_offset(time_of(bi), d, bi), h + bi * hidden);
          }
        }
      });
    }

    // Rows past each sequence's end are zero; the final states are those of the last valid
    // step, zero for an empty sequence.
    if (y_data != nullptr) {
      for (int64_t bi = 0; bi < batch; ++bi) {
        for (int64_t t = lens[bi]; t < seq; ++t) {
          T* row = y_data + y_offset(t, d, bi);
          std::fill(row, row + hidden, FromCompute<T>(C(0)));
        }
      }
    }
    auto store_final = [&](const C* state, Tensor* tensor) {
      if (tensor == nullptr) return;
      for (int64_t bi = 0; bi < batch; ++bi) {
        T* row = tensor->data<T>() + state_offset(d, bi);
        if (lens[bi] == 0) {
          std::fill(row, row + hidden, FromCompute<T>(C(0)));
        } else {
          store_row(row, state + bi * hidden);
        }
      }
    };
    store_final(h, y_h);
    store_final(c, y_c);
  }
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
