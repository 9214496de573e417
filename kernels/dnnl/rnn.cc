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
//
// Tuning notes (moved here from docs/kernels.md with the code's move to kernels/cpu/; the
// figures are those of the records named):
//
// LSTM/GRU/RNN. One GEMM computes X·Wᵀ + bias for every time step (M = seq·batch); each step adds
// H·Rᵀ (a GEMV at batch 1: the GEMV loop above) and runs the gate function: for the default LSTM
// one vectorized pass (cpu::LstmGates, per level, branch-free exp), otherwise the
// reference gate functions (kernels/reference/rnn.h), so every activation, clip, input_forget,
// peephole, direction and layout is served. oneDNN's LSTM primitive was measured against it and not
// kept: it is no faster on a decode step and needs W and R repacked into its gate order (i, f, c,
// o) and layout per VM instance (or a packed constant from the compiler).
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
  if (m == 1 && choice::UseGemv(n, k, threads)) {
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
  if (!choice::UseQGemv(m, n, k, w.dtype == DType::kI8) && w.dequantized != nullptr) {
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

// The operands, geometry and layouts of one run of the kernel below.
struct RecurrentRun {
  const Tensor *x, *w, *r, *b, *lens, *h0, *c0, *p, *w_scale, *r_scale;
  bool lstm, gru, batch_major;
  int64_t seq, batch, input_size, nd, hidden, gh;
  char w_trans = 'T', r_trans = 'T';
  int64_t ldw, ldr;  // quantized weights are contiguous
  int64_t sxt, sxb, lda_step;
  // X's rows in (time, batch) order: one matrix with row stride x_row when uniformly spaced (-1
  // otherwise: one GEMM per step, rows sxb apart).
  int64_t x_row = -1;
};

// The run's scratch (floats, from the site's workspace): bias [2 * gh], peephole [3H], xw
// [seq * batch * gh], h and c [batch * H], hr [batch * gh] and rh [batch * H] (GRU); quantized
// weights used for more rows than choice::UseQGemv takes: W and/or R dequantized ([gh, I],
// [gh, H]).
struct RecurrentBuffers {
  float *bias, *peep, *xw, *h, *c, *hr, *rh, *wq, *rq;
  int64_t rows;  // seq * batch
  bool dequantize_w, dequantize_r;
};

// The outputs (each may be absent).
struct RecurrentOutputs {
  Tensor *y, *y_h, *y_c;
};

class RecurrentKernel final : public DnnlKernel {
 public:
  RecurrentKernel(std::string name, RnnAttrs attrs, bool quantized)
      : DnnlKernel(std::move(name)), a_(attrs), quantized_(quantized) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    RecurrentRun run;
    if (!Plan(in, &run)) return RunFallback(ctx, in, out);  // reports errors, serves the rest
    auto output = [&](size_t i) -> Tensor* { return i < out.size() ? out[i] : nullptr; };
    RecurrentOutputs o{output(0), output(1), run.lstm ? output(2) : nullptr};
    DYNVM_RETURN_IF_ERROR(PrepareOutputs(ctx, run, o));
    RecurrentBuffers buf;
    if (!Sizes(run, &buf)) return RunFallback(ctx, in, out);  // reports the size
    DYNVM_RETURN_IF_ERROR(Carve(ctx, run, &buf));
    for (int64_t d = 0; d < run.nd; ++d) {
      DYNVM_RETURN_IF_ERROR(RunDirection(ctx, run, buf, o, d));
    }
    return absl::OkStatus();
  }

 private:
  // Fills *run; false when the reference kernel serves the run (an error it reports, a shape or
  // layout this kernel does not take).
  bool Plan(Inputs in, RecurrentRun* run) const {
    auto input = [&](size_t i) -> const Tensor* { return i < in.size() ? in[i] : nullptr; };
    RecurrentRun& s = *run;
    s.lstm = a_.cell == RnnCell::kLstm;
    s.gru = a_.cell == RnnCell::kGru;
    s.x = input(0);
    s.w = input(1);
    s.r = input(2);
    s.b = input(3);
    s.lens = input(4);
    s.h0 = input(5);
    s.c0 = s.lstm ? input(6) : nullptr;
    s.p = s.lstm ? input(7) : nullptr;
    s.w_scale = quantized_ ? input(8) : nullptr;
    s.r_scale = quantized_ ? input(9) : nullptr;
    if (s.x == nullptr || s.w == nullptr || s.r == nullptr || s.x->rank() != 3 ||
        s.w->rank() != 3 || s.r->rank() != 3) {
      return false;
    }
    for (const Tensor* t : {s.x, s.b, s.h0, s.c0, s.p}) {
      if (t != nullptr && t->dtype() != DType::kF32) return false;
    }
    if (quantized_ ? !reference::CheckQuantizedWeight(*s.w, s.w_scale, 3, "W").ok() ||
                         !reference::CheckQuantizedWeight(*s.r, s.r_scale, 3, "R").ok() ||
                         s.w->dtype() != s.r->dtype()
                   : s.w->dtype() != DType::kF32 || s.r->dtype() != DType::kF32) {
      return false;
    }
    return PlanGeometry(run);
  }

  bool PlanGeometry(RecurrentRun* run) const {
    RecurrentRun& s = *run;
    s.batch_major = a_.layout == 1;
    s.seq = s.x->dim(s.batch_major ? 1 : 0);
    s.batch = s.x->dim(s.batch_major ? 0 : 1);
    s.input_size = s.x->dim(2);
    s.nd = a_.num_directions;
    s.hidden = a_.hidden_size > 0 ? a_.hidden_size : s.r->dim(2);
    const int64_t gates = s.lstm ? 4 : s.gru ? 3 : 1;
    // Sizes the reference kernel checks with overflow guards; it also serves empty dims.
    constexpr int64_t kLimit = int64_t{1} << 31;
    if (s.seq <= 0 || s.batch <= 0 || s.input_size <= 0 || s.hidden <= 0 || s.seq > kLimit ||
        s.batch > kLimit || s.input_size > kLimit || s.hidden > kLimit / 8) {
      return false;
    }
    s.gh = gates * s.hidden;
    auto dims_are = [](const Tensor* t, std::initializer_list<int64_t> want) {
      return t == nullptr || t->dims() == absl::MakeConstSpan(want.begin(), want.size());
    };
    const int64_t s0 = s.batch_major ? s.batch : s.nd, s1 = s.batch_major ? s.nd : s.batch;
    if (!dims_are(s.w, {s.nd, s.gh, s.input_size}) || !dims_are(s.r, {s.nd, s.gh, s.hidden}) ||
        !dims_are(s.b, {s.nd, 2 * s.gh}) || !dims_are(s.h0, {s0, s1, s.hidden}) ||
        !dims_are(s.c0, {s0, s1, s.hidden}) || !dims_are(s.p, {s.nd, 3 * s.hidden})) {
      return false;  // the reference kernel reports the mismatch
    }
    if (s.lens != nullptr && !FullLengths(*s.lens, s.batch, s.seq)) return false;
    s.ldw = s.input_size;
    s.ldr = s.hidden;
    if ((!quantized_ &&
         (!WeightOperand(*s.w, &s.w_trans, &s.ldw) || !WeightOperand(*s.r, &s.r_trans, &s.ldr))) ||
        (s.x->stride(2) != 1 && s.input_size > 1)) {
      return false;
    }
    s.sxt = s.x->stride(s.batch_major ? 1 : 0);
    s.sxb = s.x->stride(s.batch_major ? 0 : 1);
    if (s.batch > 1 && s.sxb < s.input_size) return false;
    s.lda_step = s.batch == 1 ? s.input_size : s.sxb;
    if (s.seq * s.batch == 1) {
      s.x_row = s.input_size;
    } else if (s.batch == 1) {
      s.x_row = s.sxt >= s.input_size ? s.sxt : -1;
    } else if (s.seq == 1 || s.sxt == s.batch * s.sxb) {
      s.x_row = s.sxb;
    }
    return true;
  }

  absl::Status PrepareOutputs(KernelContext& ctx, const RecurrentRun& s,
                              const RecurrentOutputs& o) const {
    const char* op = s.lstm ? "LSTM" : s.gru ? "GRU" : "RNN";
    if (o.y != nullptr) {
      const int64_t y_dims[4] = {s.batch_major ? s.batch : s.seq, s.batch_major ? s.seq : s.nd,
                                 s.batch_major ? s.nd : s.batch, s.hidden};
      DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, o.y, DType::kF32, y_dims, op));
    }
    const int64_t state_dims[3] = {s.batch_major ? s.batch : s.nd, s.batch_major ? s.nd : s.batch,
                                   s.hidden};
    for (Tensor* t : {o.y_h, o.y_c}) {
      if (t != nullptr) {
        DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, t, DType::kF32, state_dims, op));
      }
    }
    return absl::OkStatus();
  }

  // The scratch's size in floats (buf->rows, ->dequantize_*); false when it overflows.
  bool Sizes(const RecurrentRun& s, RecurrentBuffers* buf) const {
    const int64_t bh = s.batch * s.hidden;
    int64_t xw_floats = 0, total = 0;
    if (__builtin_mul_overflow(s.seq, s.batch, &buf->rows) ||
        __builtin_mul_overflow(buf->rows, s.gh, &xw_floats) ||
        __builtin_add_overflow(xw_floats,
                               2 * s.gh + 3 * s.hidden + 2 * bh + (s.gru ? s.batch * s.gh + bh : 0),
                               &total) ||
        total > (int64_t{1} << 60)) {
      return false;
    }
    const bool int8 = s.w->dtype() == DType::kI8;
    buf->dequantize_w = quantized_ && !choice::UseQGemv(buf->rows, s.gh, s.input_size, int8);
    buf->dequantize_r = quantized_ && !choice::UseQGemv(s.batch, s.gh, s.hidden, int8);
    const int64_t wq = buf->dequantize_w ? s.gh * s.input_size : 0;
    const int64_t rq = buf->dequantize_r ? s.gh * s.hidden : 0;
    return !__builtin_add_overflow(total, wq + rq, &total) && total <= (int64_t{1} << 60);
  }

  absl::Status Carve(KernelContext& ctx, const RecurrentRun& s, RecurrentBuffers* buf) const {
    const int64_t bh = s.batch * s.hidden;
    const int64_t wq = buf->dequantize_w ? s.gh * s.input_size : 0;
    const int64_t rq = buf->dequantize_r ? s.gh * s.hidden : 0;
    const int64_t total = 2 * s.gh + 3 * s.hidden + buf->rows * s.gh + 2 * bh +
                          (s.gru ? s.batch * s.gh + bh : 0) + wq + rq;
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(static_cast<size_t>(total) * sizeof(float)));
    buf->bias = static_cast<float*>(ws);
    buf->peep = buf->bias + 2 * s.gh;
    buf->xw = buf->peep + 3 * s.hidden;
    buf->h = buf->xw + buf->rows * s.gh;
    buf->c = buf->h + bh;
    buf->hr = buf->c + bh;
    buf->rh = buf->hr + s.batch * s.gh;
    buf->wq = buf->c + bh + (s.gru ? s.batch * s.gh + bh : 0);
    buf->rq = buf->wq + wq;
    return absl::OkStatus();
  }

  // Direction d's weights as GEMM operands (quantized ones dequantized where the GEMM takes
  // f32).
  void DirectionWeights(const RecurrentRun& s, const RecurrentBuffers& buf, int64_t d,
                        WeightRef* wd, WeightRef* rd) const {
    const Tensor* t[2] = {s.w, s.r};
    WeightRef* ref[2] = {wd, rd};
    for (int i = 0; i < 2; ++i) {
      ref[i]->dtype = t[i]->dtype();
      ref[i]->data = static_cast<const char*>(t[i]->raw_data()) +
                     d * t[i]->stride(0) * DTypeSize(t[i]->dtype());
      ref[i]->trans = i == 0 ? s.w_trans : s.r_trans;
      ref[i]->ld = i == 0 ? s.ldw : s.ldr;
    }
    if (s.w_scale != nullptr) {
      wd->scale = s.w_scale->data<float>() + d * s.gh;
      rd->scale = s.r_scale->data<float>() + d * s.gh;
    }
    if (buf.dequantize_w) {
      DequantizeRows(*wd, s.input_size, s.gh, buf.wq);
      wd->dequantized = buf.wq;
    }
    if (buf.dequantize_r) {
      DequantizeRows(*rd, s.hidden, s.gh, buf.rq);
      rd->dequantized = buf.rq;
    }
  }

  absl::Status RunDirection(const KernelContext& ctx, const RecurrentRun& s,
                            const RecurrentBuffers& buf, const RecurrentOutputs& o,
                            int64_t d) const {
    const RnnGateConfig& cfg = a_.config[d];
    const bool reverse = a_.direction == RnnDirection::kReverse || d == 1;
    WeightRef wd, rd;
    DirectionWeights(s, buf, d, &wd, &rd);
    if (s.b != nullptr) {
      LoadRow(*s.b, d, buf.bias);
    } else {
      std::fill(buf.bias, buf.bias + 2 * s.gh, 0.0f);
    }
    // The input projection's bias: Wb + Rb, except for GRU's h block (Rbh is applied inside the
    // reset gate), where only Wb; GRU keeps Rb for the recurrent part.
    if (!s.gru) AddInto(buf.bias, buf.bias + s.gh, s.gh);
    if (s.p != nullptr) LoadRow(*s.p, d, buf.peep);
    LoadState(s.h0, d, s.batch, s.hidden, s.batch_major, buf.h);
    if (s.lstm) LoadState(s.c0, d, s.batch, s.hidden, s.batch_major, buf.c);
    // xw = X * W^T + bias, all steps.
    for (int64_t i = 0; i < buf.rows; ++i) {
      std::memmove(buf.xw + i * s.gh, buf.bias, s.gh * sizeof(float));
    }
    const float* px = s.x->data<float>();
    if (s.x_row >= 0) {
      DYNVM_RETURN_IF_ERROR(
          WeightGemm(ctx, wd, buf.rows, s.gh, s.input_size, px, s.x_row, 1.0f, buf.xw, s.gh));
    } else {
      for (int64_t t = 0; t < s.seq; ++t) {
        DYNVM_RETURN_IF_ERROR(WeightGemm(ctx, wd, s.batch, s.gh, s.input_size, px + t * s.sxt,
                                         s.lda_step, 1.0f, buf.xw + t * s.batch * s.gh, s.gh));
      }
    }
    for (int64_t step = 0; step < s.seq; ++step) {
      const int64_t t = reverse ? s.seq - 1 - step : step;
      DYNVM_RETURN_IF_ERROR(Step(ctx, cfg, s, rd, buf, buf.xw + t * s.batch * s.gh));
      if (o.y != nullptr) {
        float* py = o.y->data<float>();
        for (int64_t bi = 0; bi < s.batch; ++bi) {
          const int64_t row =
              s.batch_major ? (bi * s.seq + t) * s.nd + d : (t * s.nd + d) * s.batch + bi;
          std::memmove(py + row * s.hidden, buf.h + bi * s.hidden, s.hidden * sizeof(float));
        }
      }
    }
    StoreState(buf.h, d, s.batch, s.hidden, s.nd, s.batch_major, o.y_h);
    if (s.lstm) StoreState(buf.c, d, s.batch, s.hidden, s.nd, s.batch_major, o.y_c);
    return absl::OkStatus();
  }

  // One step: the gates g (holding X * W^T + bias for this step) get H * R^T, then the cell.
  absl::Status Step(const KernelContext& ctx, const RnnGateConfig& cfg, const RecurrentRun& s,
                    const WeightRef& rd, const RecurrentBuffers& buf, float* g) const {
    const int64_t batch = s.batch, hidden = s.hidden, gh = s.gh;
    switch (a_.cell) {
      case RnnCell::kLstm:
        DYNVM_RETURN_IF_ERROR(WeightGemm(ctx, rd, batch, gh, hidden, buf.h, hidden, 1.0f, g, gh));
        if (s.p == nullptr && IsDefaultLstm(cfg)) {
          cpu::LstmGates(batch, hidden, g, buf.c, buf.h);
        } else {
          reference::LstmGates<float>(cfg, batch, hidden, g, s.p != nullptr ? buf.peep : nullptr,
                                      buf.c, buf.h, buf.c);
        }
        return absl::OkStatus();
      case RnnCell::kGru: {
        const int64_t r_rows = cfg.linear_before_reset ? gh : 2 * hidden;
        for (int64_t i = 0; i < batch; ++i) {
          std::memmove(buf.hr + i * gh, buf.bias + gh, gh * sizeof(float));
        }
        DYNVM_RETURN_IF_ERROR(
            WeightGemm(ctx, rd, batch, r_rows, hidden, buf.h, hidden, 1.0f, buf.hr, gh));
        reference::GruResetUpdateGates<float>(cfg, batch, hidden, g, buf.hr, buf.h, buf.rh);
        if (!cfg.linear_before_reset) {
          // Rows 2H.. of R: the hidden gate's recurrent weights.
          const WeightRef rdh = rd.From(2 * hidden);
          DYNVM_RETURN_IF_ERROR(WeightGemm(ctx, rdh, batch, hidden, hidden, buf.rh, hidden, 1.0f,
                                           buf.hr + 2 * hidden, gh));
        }
        reference::GruHiddenGate<float>(cfg, batch, hidden, g, buf.hr, buf.h, buf.h);
        return absl::OkStatus();
      }
      case RnnCell::kRnn:
        DYNVM_RETURN_IF_ERROR(WeightGemm(ctx, rd, batch, gh, hidden, buf.h, hidden, 1.0f, g, gh));
        reference::RnnGate<float>(cfg, batch, hidden, g, buf.h);
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }

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
