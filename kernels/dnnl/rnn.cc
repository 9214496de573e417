// oneDNN LSTM, GRU and RNN (f32): GEMMs by dnnl_sgemm plus one fused elementwise pass per
// gate step ("lstm.f32.dnnl.gemm").
//
// Why not oneDNN's RNN primitive: it wants its weights in its own gate order (i, f, c, o, not
// ONNX's i, o, f, c) and layout, so using it means repacking W and R for every VM instance (or
// a compile-time packed layout the compiler does not store yet); its execute also allocates an
// argument map per call. Measured on a decode step (hidden 256, batch 1; dnnl_benchmark.cc,
// BM_LstmStep_*), GEMMs plus fused gates are faster than the primitive even with its weights
// prepacked. The plain ONNX weights are read in place.
//
// Per direction: one GEMM computes X * W^T + bias for all time steps at once (M = seq * batch);
// each step then adds H * R^T (a GEMV at batch 1) and runs the gate function. The gates are
// the reference functions (kernels/reference/rnn.h) for any activation, clip or input_forget;
// the default LSTM configuration uses a vectorized fused gate loop.
//
// The reference kernel serves what this kernel does not: non-f32 dtypes (at create),
// sequence_lens shorter than the sequence, empty dims and odd weight strides (at run time).
#include "kernels/reference/rnn.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/qgemv.h"
#include "kernels/cpu/quantize.h"
#include "kernels/dnnl/choice.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/parallel_loops.h"
#include "kernels/reference/common.h"
#include "kernels/reference/qweights.h"

namespace dynvm::onednn {
namespace {

using reference::RnnAttrs;
using reference::RnnCell;
using reference::RnnDirection;
using reference::RnnGateConfig;

bool IsDefaultLstm(const RnnGateConfig& c) {
  using Kind = reference::RnnActivation::Kind;
  return c.f.kind == Kind::kSigmoid && c.g.kind == Kind::kTanh && c.h.kind == Kind::kTanh &&
         std::isinf(c.clip) && !c.input_forget;
}

// Each GEMM picks its own thread count (ThreadsFor): a sequence's input projection may use the
// budget through oneDNN's OpenMP while the per-step gate GEMVs (batch 1) run the GEMV loop split
// by gate rows across the VM's pool (ParallelGemv: each worker keeps its rows of R every step).
absl::Status Gemm(const KernelContext& ctx, char tb, int64_t m, int64_t n, int64_t k,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc) {
  const int threads = ctx.num_threads();
  if (m == 1 && (n * k < kMinParallelWork || threads > 1)) {
    ParallelGemv(ctx, tb, n, k, 1.0f, a, b, ldb, beta, c);
    return absl::OkStatus();
  }
  SetThreads(ThreadsFor(threads, m * n * k));
  return FromDnnl(dnnl_sgemm('N', tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc), "dnnl_sgemm");
}

// One direction's weight matrix [rows, cols] read as B = W^T: f32 (read in place as a GEMM
// operand) or weight-only quantized (dynvm::QLSTM/QGRU/QRNN: contiguous int8 rows with one
// scale each, or bf16 rows), read by the cpu::QGemv microkernels; for more rows than
// choice::UseQGemv takes, the caller dequantizes it once into `dequantized` and the f32 GEMM runs.
struct WeightRef {
  DType dtype = DType::kF32;
  const void* data = nullptr;  // the direction's first row
  const float* scale = nullptr;
  char trans = 'T';
  int64_t ld = 0;
  const float* dequantized = nullptr;

  // The matrix from row `first` on.
  WeightRef From(int64_t first) const {
    WeightRef w = *this;
    const int64_t step = trans == 'T' ? ld : 1;
    w.data = static_cast<const char*>(data) + first * step * DTypeSize(dtype);
    if (scale != nullptr) w.scale = scale + first;
    if (dequantized != nullptr) w.dequantized = dequantized + first * ld;
    return w;
  }
};

// c = a * W^T + beta * c with a [m, k] (row stride lda), W [n, k].
absl::Status WeightGemm(const KernelContext& ctx, const WeightRef& w, int64_t m, int64_t n,
                        int64_t k, const float* a, int64_t lda, float beta, float* c, int64_t ldc) {
  if (w.dtype == DType::kF32) {
    return Gemm(ctx, w.trans, m, n, k, a, lda, static_cast<const float*>(w.data), w.ld, beta, c,
                ldc);
  }
  if (!choice::UseQGemv(m, n, k) && w.dequantized != nullptr) {
    return Gemm(ctx, 'T', m, n, k, a, lda, w.dequantized, w.ld, beta, c, ldc);
  }
  for (int64_t r = 0; r < m; r += cpu::kQuantSmallRows) {  // rows beyond: weights re-read
    const int64_t rows = std::min(cpu::kQuantSmallRows, m - r);
    // Weight rows [j0, j1): split across the VM's pool as ParallelGemv splits f32 weights (each
    // worker keeps its rows step to step), 16 rows at a time.
    auto gemv = [&](int64_t j0, int64_t j1) {
      if (w.dtype == DType::kI8) {
        cpu::QGemvI8(rows, k, a + r * lda, lda, static_cast<const int8_t*>(w.data), w.ld, w.scale,
                     j0, j1, beta, c + r * ldc, ldc);
      } else {
        cpu::QGemvBf16(rows, k, a + r * lda, lda, static_cast<const uint16_t*>(w.data), w.ld, j0,
                       j1, beta, c + r * ldc, ldc);
      }
    };
    if (ctx.num_threads() > 1 && rows * n * k >= kMinParallelGemv) {
      ctx.ParallelFor(n, 16, gemv);
    } else {
      gemv(0, n);
    }
  }
  return absl::OkStatus();
}

// A weight matrix t[d] ([rows, cols]) read as op(B) = t[d]^T for a GEMM: 'T' over row-major
// rows, or 'N' over a column-major matrix. False when neither addresses it.
bool WeightOperand(const Tensor& t, char* trans, int64_t* ld) {
  const int64_t rows = t.dim(1), cols = t.dim(2);
  const int64_t sr = t.stride(1), sc = t.stride(2);
  if ((sc == 1 || cols == 1) && (rows == 1 || sr >= std::max<int64_t>(cols, 1))) {
    *trans = 'T';
    *ld = rows == 1 ? std::max<int64_t>(cols, 1) : sr;
    return true;
  }
  if ((sr == 1 || rows == 1) && (cols == 1 || sc >= rows)) {
    *trans = 'N';
    *ld = cols == 1 ? rows : sc;
    return true;
  }
  return false;
}

// Copies row `index` of a rank-2 tensor (B, P) into dst.
void LoadRow(const Tensor& t, int64_t index, float* dst) {
  const float* src = t.data<float>() + index * t.stride(0);
  const int64_t n = t.dim(1), s = t.stride(1);
  if (s == 1) {  // a decode step reloads its bias every call: copy, not a strided loop
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  for (int64_t j = 0; j < n; ++j) dst[j] = src[j * s];
}

// dst[j] += src[j] (disjoint ranges: vectorized).
void AddInto(float* __restrict dst, const float* __restrict src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] += src[j];
}

class RecurrentKernel final : public DnnlKernel {
 public:
  RecurrentKernel(std::string name, RnnAttrs attrs, bool quantized)
      : DnnlKernel(std::move(name)), a_(attrs), quantized_(quantized) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    auto input = [&](size_t i) -> const Tensor* { return i < in.size() ? in[i] : nullptr; };
    auto output = [&](size_t i) -> Tensor* { return i < out.size() ? out[i] : nullptr; };
    const bool lstm = a_.cell == RnnCell::kLstm;
    const Tensor* x = input(0);
    const Tensor* w = input(1);
    const Tensor* r = input(2);
    const Tensor* b = input(3);
    const Tensor* lens = input(4);
    const Tensor* h0 = input(5);
    const Tensor* c0 = lstm ? input(6) : nullptr;
    const Tensor* p = lstm ? input(7) : nullptr;
    if (x == nullptr || w == nullptr || r == nullptr || x->rank() != 3 || w->rank() != 3 ||
        r->rank() != 3) {
      return RunFallback(ctx, in, out);
    }
    for (const Tensor* t : {x, b, h0, c0, p}) {
      if (t != nullptr && t->dtype() != DType::kF32) return RunFallback(ctx, in, out);
    }
    const Tensor* w_scale = quantized_ ? input(8) : nullptr;
    const Tensor* r_scale = quantized_ ? input(9) : nullptr;
    if (quantized_ ? !reference::CheckQuantizedWeight(*w, w_scale, 3, "W").ok() ||
                         !reference::CheckQuantizedWeight(*r, r_scale, 3, "R").ok() ||
                         w->dtype() != r->dtype()
                   : w->dtype() != DType::kF32 || r->dtype() != DType::kF32) {
      return RunFallback(ctx, in, out);  // reports the error
    }
    const bool batch_major = a_.layout == 1;
    const int64_t seq = x->dim(batch_major ? 1 : 0);
    const int64_t batch = x->dim(batch_major ? 0 : 1);
    const int64_t input_size = x->dim(2);
    const int64_t nd = a_.num_directions;
    const int64_t hidden = a_.hidden_size > 0 ? a_.hidden_size : r->dim(2);
    const int64_t gates = lstm ? 4 : a_.cell == RnnCell::kGru ? 3 : 1;
    // Sizes the reference kernel checks with overflow guards; it also serves empty dims.
    constexpr int64_t kLimit = int64_t{1} << 31;
    if (seq <= 0 || batch <= 0 || input_size <= 0 || hidden <= 0 || seq > kLimit ||
        batch > kLimit || input_size > kLimit || hidden > kLimit / 8) {
      return RunFallback(ctx, in, out);
    }
    const int64_t gh = gates * hidden;
    auto dims_are = [](const Tensor* t, std::initializer_list<int64_t> want) {
      return t == nullptr || t->dims() == absl::MakeConstSpan(want.begin(), want.size());
    };
    const int64_t s0 = batch_major ? batch : nd, s1 = batch_major ? nd : batch;
    if (!dims_are(w, {nd, gh, input_size}) || !dims_are(r, {nd, gh, hidden}) ||
        !dims_are(b, {nd, 2 * gh}) || !dims_are(h0, {s0, s1, hidden}) ||
        !dims_are(c0, {s0, s1, hidden}) || !dims_are(p, {nd, 3 * hidden})) {
      return RunFallback(ctx, in, out);  // reports the mismatch
    }
    if (lens != nullptr && !FullLengths(*lens, batch, seq)) return RunFallback(ctx, in, out);
    char w_trans = 'T', r_trans = 'T';
    int64_t ldw = input_size, ldr = hidden;  // quantized weights are contiguous
    if ((!quantized_ &&
         (!WeightOperand(*w, &w_trans, &ldw) || !WeightOperand(*r, &r_trans, &ldr))) ||
        (x->stride(2) != 1 && input_size > 1)) {
      return RunFallback(ctx, in, out);
    }
    // X's rows in (time, batch) order: one matrix with row stride x_row when uniformly
    // spaced (-1 otherwise: one GEMM per step, rows sxb apart).
    const int64_t sxt = x->stride(batch_major ? 1 : 0), sxb = x->stride(batch_major ? 0 : 1);
    if (batch > 1 && sxb < input_size) return RunFallback(ctx, in, out);
    const int64_t lda_step = batch == 1 ? input_size : sxb;
    int64_t x_row = -1;
    if (seq * batch == 1) {
      x_row = input_size;
    } else if (batch == 1) {
      x_row = sxt >= input_size ? sxt : -1;
    } else if (seq == 1 || sxt == batch * sxb) {
      x_row = sxb;
    }

    Tensor* y = output(0);
    Tensor* y_h = output(1);
    Tensor* y_c = lstm ? output(2) : nullptr;
    const char* op = lstm ? "LSTM" : a_.cell == RnnCell::kGru ? "GRU" : "RNN";
    if (y != nullptr) {
      const int64_t y_dims[4] = {batch_major ? batch : seq, batch_major ? seq : nd,
                                 batch_major ? nd : batch, hidden};
      DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, y, DType::kF32, y_dims, op));
    }
    const int64_t state_dims[3] = {s0, s1, hidden};
    if (y_h != nullptr) {
      DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, y_h, DType::kF32, state_dims, op));
    }
    if (y_c != nullptr) {
      DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, y_c, DType::kF32, state_dims, op));
    }

    // Workspace (floats): bias [2 * gh], peephole [3H], xw [seq * batch * gh], h and c
    // [batch * H], hr [batch * gh] and rh [batch * H] (GRU); quantized weights used for more
    // rows than choice::UseQGemv takes: W and/or R dequantized ([gh, I], [gh, H]).
    const int64_t bh = batch * hidden;
    const bool gru = a_.cell == RnnCell::kGru;
    int64_t rows = 0, xw_floats = 0, total = 0;
    if (__builtin_mul_overflow(seq, batch, &rows) || __builtin_mul_overflow(rows, gh, &xw_floats) ||
        __builtin_add_overflow(
            xw_floats, 2 * gh + 3 * hidden + 2 * bh + (gru ? batch * gh + bh : 0), &total) ||
        total > (int64_t{1} << 60)) {
      return RunFallback(ctx, in, out);  // reports the size
    }
    const int64_t wq_floats =
        quantized_ && !choice::UseQGemv(rows, gh, input_size) ? gh * input_size : 0;
    const int64_t rq_floats = quantized_ && !choice::UseQGemv(batch, gh, hidden) ? gh * hidden : 0;
    if (__builtin_add_overflow(total, wq_floats + rq_floats, &total) ||
        total > (int64_t{1} << 60)) {
      return RunFallback(ctx, in, out);
    }
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(static_cast<size_t>(total) * sizeof(float)));
    float* bias = static_cast<float*>(ws);
    float* peep = bias + 2 * gh;
    float* xw = peep + 3 * hidden;
    float* h = xw + rows * gh;
    float* c = h + bh;
    float* hr = c + bh;
    float* rh = hr + batch * gh;
    float* wq = c + bh + (gru ? batch * gh + bh : 0);
    float* rq = wq + wq_floats;

    const float* px = x->data<float>();
    for (int64_t d = 0; d < nd; ++d) {
      const RnnGateConfig& cfg = a_.config[d];
      const bool reverse = a_.direction == RnnDirection::kReverse || d == 1;
      WeightRef wd, rd;
      wd.dtype = w->dtype();
      wd.data = static_cast<const char*>(w->raw_data()) + d * w->stride(0) * DTypeSize(w->dtype());
      wd.trans = w_trans;
      wd.ld = ldw;
      rd.dtype = r->dtype();
      rd.data = static_cast<const char*>(r->raw_data()) + d * r->stride(0) * DTypeSize(r->dtype());
      rd.trans = r_trans;
      rd.ld = ldr;
      if (w_scale != nullptr) {
        wd.scale = w_scale->data<float>() + d * gh;
        rd.scale = r_scale->data<float>() + d * gh;
      }
      if (wq_floats > 0) {
        DequantizeRows(wd, input_size, gh, wq);
        wd.dequantized = wq;
      }
      if (rq_floats > 0) {
        DequantizeRows(rd, hidden, gh, rq);
        rd.dequantized = rq;
      }
      if (b != nullptr) {
        LoadRow(*b, d, bias);
      } else {
        std::fill(bias, bias + 2 * gh, 0.0f);
      }
      // The input projection's bias: Wb + Rb, except for GRU's h block (Rbh is applied
      // inside the reset gate), where only Wb; GRU keeps Rb for the recurrent part.
      float* xbias = bias;
      if (!gru) {
        AddInto(xbias, bias + gh, gh);
      }
      if (p != nullptr) LoadRow(*p, d, peep);
      LoadState(h0, d, batch, hidden, batch_major, h);
      if (lstm) LoadState(c0, d, batch, hidden, batch_major, c);

      // xw = X * W^T + bias, all steps.
      for (int64_t i = 0; i < rows; ++i) std::memmove(xw + i * gh, xbias, gh * sizeof(float));
      if (x_row >= 0) {
        DYNVM_RETURN_IF_ERROR(WeightGemm(ctx, wd, rows, gh, input_size, px, x_row, 1.0f, xw, gh));
      } else {
        for (int64_t t = 0; t < seq; ++t) {
          DYNVM_RETURN_IF_ERROR(WeightGemm(ctx, wd, batch, gh, input_size, px + t * sxt, lda_step,
                                           1.0f, xw + t * batch * gh, gh));
        }
      }

      for (int64_t step = 0; step < seq; ++step) {
        const int64_t t = reverse ? seq - 1 - step : step;
        float* g = xw + t * batch * gh;
        switch (a_.cell) {
          case RnnCell::kLstm:
            DYNVM_RETURN_IF_ERROR(WeightGemm(ctx, rd, batch, gh, hidden, h, hidden, 1.0f, g, gh));
            if (p == nullptr && IsDefaultLstm(cfg)) {
              cpu::LstmGates(batch, hidden, g, c, h);
            } else {
              reference::LstmGates<float>(cfg, batch, hidden, g, p != nullptr ? peep : nullptr, c,
                                          h, c);
            }
            break;
          case RnnCell::kGru: {
            const int64_t r_rows = cfg.linear_before_reset ? gh : 2 * hidden;
            for (int64_t i = 0; i < batch; ++i) {
              std::memmove(hr + i * gh, bias + gh, gh * sizeof(float));
            }
            DYNVM_RETURN_IF_ERROR(
                WeightGemm(ctx, rd, batch, r_rows, hidden, h, hidden, 1.0f, hr, gh));
            reference::GruResetUpdateGates<float>(cfg, batch, hidden, g, hr, h, rh);
            if (!cfg.linear_before_reset) {
              // Rows 2H.. of R: the hidden gate's recurrent weights.
              const WeightRef rdh = rd.From(2 * hidden);
              DYNVM_RETURN_IF_ERROR(WeightGemm(ctx, rdh, batch, hidden, hidden, rh, hidden, 1.0f,
                                               hr + 2 * hidden, gh));
            }
            reference::GruHiddenGate<float>(cfg, batch, hidden, g, hr, h, h);
            break;
          }
          case RnnCell::kRnn:
            DYNVM_RETURN_IF_ERROR(WeightGemm(ctx, rd, batch, gh, hidden, h, hidden, 1.0f, g, gh));
            reference::RnnGate<float>(cfg, batch, hidden, g, h);
            break;
        }
        if (y != nullptr) {
          float* py = y->data<float>();
          for (int64_t bi = 0; bi < batch; ++bi) {
            const int64_t row = batch_major ? (bi * seq + t) * nd + d : (t * nd + d) * batch + bi;
            std::memmove(py + row * hidden, h + bi * hidden, hidden * sizeof(float));
          }
        }
      }
      StoreState(h, d, batch, hidden, nd, batch_major, y_h);
      if (lstm) StoreState(c, d, batch, hidden, nd, batch_major, y_c);
    }
    return absl::OkStatus();
  }

 private:
  // True when sequence_lens is a [batch] integer tensor whose values all equal seq.
  static bool FullLengths(const Tensor& lens, int64_t batch, int64_t seq) {
    if (lens.rank() != 1 || lens.dim(0) != batch) return false;
    for (int64_t i = 0; i < batch; ++i) {
      int64_t v;
      if (lens.dtype() == DType::kI32) {
        v = lens.data<int32_t>()[i * lens.stride(0)];
      } else if (lens.dtype() == DType::kI64) {
        v = lens.data<int64_t>()[i * lens.stride(0)];
      } else {
        return false;
      }
      if (v != seq) return false;
    }
    return true;
  }

  // Rows (d, b) of initial_h / initial_c into dst [batch, H], zeros when absent.
  static void LoadState(const Tensor* t, int64_t d, int64_t batch, int64_t hidden, bool batch_major,
                        float* dst) {
    if (t == nullptr) {
      std::fill(dst, dst + batch * hidden, 0.0f);
      return;
    }
    for (int64_t bi = 0; bi < batch; ++bi) {
      const float* src = t->data<float>() + (batch_major ? bi * t->stride(0) + d * t->stride(1)
                                                         : d * t->stride(0) + bi * t->stride(1));
      float* row = dst + bi * hidden;
      const int64_t s = t->stride(2);
      for (int64_t j = 0; j < hidden; ++j) row[j] = src[j * s];
    }
  }

  static void StoreState(const float* state, int64_t d, int64_t batch, int64_t hidden, int64_t nd,
                         bool batch_major, Tensor* t) {
    if (t == nullptr) return;
    float* base = t->data<float>();
    for (int64_t bi = 0; bi < batch; ++bi) {
      const int64_t row = batch_major ? bi * nd + d : d * batch + bi;
      std::memmove(base + row * hidden, state + bi * hidden, hidden * sizeof(float));
    }
  }

  // W's rows [0, n) of `cols` each, dequantized into dst.
  static void DequantizeRows(const WeightRef& w, int64_t cols, int64_t n, float* dst) {
    if (w.dtype == DType::kI8) {
      cpu::DequantizeRowsI8(cols, static_cast<const int8_t*>(w.data), w.ld, w.scale, 0, n, dst);
    } else {
      cpu::DequantizeRowsBf16(cols, static_cast<const uint16_t*>(w.data), w.ld, 0, n, dst);
    }
  }

  RnnAttrs a_;
  bool quantized_;  // dynvm::QLSTM/QGRU/QRNN
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateRecurrent(const KernelSpec& spec, RnnCell cell) {
  // The fallback's factory (the reference kernel, which the registry makes next) validates arity,
  // dtypes and attributes: its errors are the spec's.
  const bool quantized = spec.domain == "dynvm";
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    if (i == 4) continue;                           // sequence_lens: an integer tensor
    if (quantized && (i == 1 || i == 2)) continue;  // i8 or bf16
    const uint8_t d = spec.inputs[i].dtype;
    if (d != kAnyDType && d != static_cast<uint8_t>(DType::kF32)) {
      return absl::UnimplementedError(absl::StrCat(spec.op, ": the oneDNN kernel takes f32 only"));
    }
  }
  if (spec.inputs.empty() || spec.inputs[0].dtype != static_cast<uint8_t>(DType::kF32)) {
    return absl::UnimplementedError(absl::StrCat(spec.op, ": the oneDNN kernel takes f32 only"));
  }
  DYNVM_ASSIGN_OR_RETURN(RnnAttrs attrs, reference::ParseRnnAttrs(spec, cell));
  return std::make_unique<RecurrentKernel>(
      KernelName(spec, quantized ? absl::StrCat("gemm.", QuantizedWeightPath(spec)) : "gemm"),
      attrs, quantized);
}

}  // namespace

void RegisterRnnKernels(KernelRegistry& r) {
  const std::pair<const char*, RnnCell> kOps[] = {
      {"LSTM", RnnCell::kLstm}, {"GRU", RnnCell::kGru}, {"RNN", RnnCell::kRnn}};
  for (const auto& [name, cell] : kOps) {
    const RnnCell c = cell;
    r.Register(
        KernelRegistration{"", name, Device::kCPU, kBackend, kDnnlPriority,
                           [c](const KernelSpec& spec) { return CreateRecurrent(spec, c); }});
    // The weight-only quantized form (vm-compile --quantize-weights).
    r.Register(
        KernelRegistration{"dynvm", absl::StrCat("Q", name), Device::kCPU, kBackend, kDnnlPriority,
                           [c](const KernelSpec& spec) { return CreateRecurrent(spec, c); }});
  }
}

}  // namespace dynvm::onednn
