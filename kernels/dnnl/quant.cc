// Fast paths of ONNX's quantization operators on the oneDNN CPU backend (docs/kernels.md,
// "Quantized operators"); the reference kernels (kernels/reference/misc.cc, quant.cc) are their
// oracle and serve every run these do not take.
//
// QuantizeLinear (f32 -> u8/i8) and DequantizeLinear (u8/i8 -> f32): microkernels
// (kernels/cpu/quantize.h), per tensor or per axis, over contiguous tensors.
// They compute exactly what the reference does: x / scale divided in f32, rounded half to even,
// plus the zero point, saturated; (x - zp) * scale is exact before its one rounding to f32.
//
// MatMulInteger and QLinearMatMul: an integer GEMM (u8 or s8 a, s8 b, s32 accumulation, the
// zero points taken out exactly) for a contiguous [..., M, K] a (its batch folded into M) times a
// contiguous 2-D [K, N] b, with per-tensor zero points (or per-channel ones holding one repeated
// value, as symmetric weights' zeros do). A u8 b is shifted to s8 in the workspace, its zero
// point with it. M = 1 runs kernels/cpu/igemm.h's GEMV (b streamed once, no packing; oneDNN's
// integer GEMM packs b on every call, slower than f32 sgemm there), on any CPU. M >= 2 runs
// oneDNN's integer GEMM (dnnl_gemm_u8s8s32 / _s8s8s32, the zero points as its A and B offsets) on
// CPUs with VNNI (avx512_core_vnni, avx2_vnni), and the VNNI-free GEMM of igemm.h (s16 x s16
// vpmaddwd on operands packed less their zero points, on the pool) elsewhere: without VNNI oneDNN's
// u8 x s8 kernels may saturate in 16-bit intermediates. QLinearMatMul then requantizes each s32 row
// with a vector loop (b_scale per tensor or per column) in double, as the reference does, so
// results are identical.
//
// ConvInteger and QLinearConv (CreateIm2ColConv, the fallback of qconv.cc's int8 convolution
// primitive, and all it serves on a CPU without VNNI): 1-D or 2-D, any group, explicit, VALID
// or SAME pads, s8 w; per batch item and group, im2col into s8 columns (a u8 x shifted by 128,
// padding holding the zero point), then the same integer GEMM (oneDNN's with VNNI, igemm.h's
// without, w packed once per run). Exact at every magnitude and takes non-zero weight zero
// points, but slower than oneDNN's f32 convolution (columns built and packed on every call).
//
// K is capped so that no s32 sum can overflow (the reference wraps). Anything else (per-row or
// differing per-column zero points, broadcast batches, 3-D convolutions, u8 conv weights) runs
// the reference.
//
// Every run checks the scales and zero points (kernels/quant_params.h) before using them; a bad
// one goes to the reference kernel, whose error names it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/igemm.h"
#include "kernels/cpu/quantize.h"
#include "kernels/dnnl/choice.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/quant_common.h"
#include "kernels/quant_params.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

// n values from x at stride `stride` into y, a u8 x shifted by 128 to s8 (x ^ 0x80).
inline void CopyRowU8(int64_t n, const uint8_t* x, int64_t stride, int8_t* y) {
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int8_t>(x[i] ^ 0x80);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int8_t>(x[i * stride] ^ 0x80);
  }
}

inline void CopyRowS8(int64_t n, const int8_t* x, int64_t stride, int8_t* y) {
  if (stride == 1) {
    std::copy(x, x + n, y);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i * stride];
  }
}

// A zero point of type `t` holding one value (a scalar, or a per-channel vector of one
// repeated value: the zeros of a symmetric per-channel weight).
bool UniformZeroPoint(const Tensor& z, DType t) {
  if (z.dtype() != t || z.rank() > 1 || z.numel() < 1 || !z.is_contiguous()) return false;
  for (int64_t i = 1; i < z.numel(); ++i) {
    if (QuantParamAt(&z, i) != QuantParamAt(&z, 0)) return false;
  }
  return true;
}

// |(a - za)(b - zb)| <= 255 * 255 per term: K below this keeps every s32 sum exact.
inline constexpr int64_t kMaxExactK = cpu::kIGemmMaxK;

// c [m, n] (row stride ldc) = (a - za) x (b - zb) on the VNNI-free GEMM (igemm.h): a u8 or s8
// [m, k] (row stride lda), b s8 [k, n] (row stride n). pa holds IGemmPackedABytes(m, k) bytes
// (a packed there first when pack_a, else already packed: a and za are then unused), pb
// IGemmPackedBBytes(k, n). On the pool when the product is big enough: b's panels split among
// the threads, or a's rows when there are few panels.
void IntGemm(const KernelContext& ctx, int64_t m, int64_t k, int64_t n, const void* a, bool a_u8,
             int64_t lda, int32_t za, bool pack_a, int16_t* pa, const int8_t* b, int32_t zb,
             int16_t* pb, int32_t* c, int64_t ldc) {
  const int64_t panels = cpu::IGemmPanels(n);
  const int threads = ThreadsFor(ctx.num_threads(), m * n * k);
  if (threads == 1) {
    if (pack_a) cpu::IGemmPackA(k, a, a_u8, lda, za, 0, m, pa);
    cpu::IGemmPackB(k, n, b, n, zb, 0, panels, pb);
    cpu::IGemmCompute(k, n, pa, pb, 0, m, 0, panels, c, ldc);
    return;
  }
  if (pack_a) {
    ctx.ParallelFor(
        m, 4, [&](int64_t i0, int64_t i1) { cpu::IGemmPackA(k, a, a_u8, lda, za, i0, i1, pa); });
  }
  ctx.ParallelFor(panels, 1,
                  [&](int64_t p0, int64_t p1) { cpu::IGemmPackB(k, n, b, n, zb, p0, p1, pb); });
  if (panels >= 2 * threads || m < 8 * threads) {
    ctx.ParallelFor(panels, 1, [&](int64_t p0, int64_t p1) {
      cpu::IGemmCompute(k, n, pa, pb, 0, m, p0, p1, c, ldc);
    });
  } else {
    ctx.ParallelFor(m, 4, [&](int64_t i0, int64_t i1) {
      cpu::IGemmCompute(k, n, pa, pb, i0, i1, 0, panels, c, ldc);
    });
  }
}

// ---- QuantizeLinear / DequantizeLinear ----

class QuantKernel final : public DnnlKernel {
 public:
  QuantKernel(std::string name, bool quantize, int64_t axis)
      : DnnlKernel(std::move(name)), quantize_(quantize), axis_(axis) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(
        CheckPresent(in, 2, out, quantize_ ? "QuantizeLinear" : "DequantizeLinear"));
    const Tensor& x = *in[0];
    const Tensor& scale = *in[1];
    const Tensor* zp = in.size() > 2 ? in[2] : nullptr;
    // The shapes and dtypes the loops take; anything else (and every bad parameter, whose
    // error the reference kernel reports) runs the reference.
    const DType q = quantize_ ? (zp != nullptr ? zp->dtype() : DType::kU8) : x.dtype();
    const bool types_ok = quantize_ ? x.dtype() == DType::kF32 && Is8Bit(q)
                                    : Is8Bit(x.dtype()) && (zp == nullptr || zp->dtype() == q);
    if (!types_ok || scale.dtype() != DType::kF32 || scale.rank() > 1 || !x.is_contiguous() ||
        !scale.is_contiguous() ||
        (zp != nullptr && (!zp->is_contiguous() || zp->numel() != scale.numel())) ||
        (out[0]->defined() && out[0]->dtype() != (quantize_ ? q : DType::kF32)) ||
        !CheckQuantScale(scale, "scale").ok()) {
      return RunFallback(ctx, in, out);
    }
    int64_t outer = 1, channels = 1, inner = x.numel();
    if (scale.numel() != 1) {
      const int64_t axis = axis_ < 0 ? axis_ + x.rank() : axis_;
      if (axis < 0 || axis >= x.rank() || x.dim(static_cast<int>(axis)) != scale.numel()) {
        return RunFallback(ctx, in, out);
      }
      channels = scale.numel();
      inner = 1;
      for (int d = static_cast<int>(axis) + 1; d < x.rank(); ++d) inner *= x.dim(d);
      outer = channels * inner == 0 ? 0 : x.numel() / (channels * inner);
    }
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], quantize_ ? q : DType::kF32,
                                                   x.dims(), "QuantizeLinear"));
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t off = (o * channels + c) * inner;
        const float s = QuantParamAt(&scale, c), z = QuantParamAt(zp, c);
        if (!quantize_) {
          float* y = out[0]->data<float>() + off;
          if (q == DType::kU8) {
            cpu::DequantizeU8(inner, x.data<uint8_t>() + off, s, z, y);
          } else {
            cpu::DequantizeI8(inner, x.data<int8_t>() + off, s, z, y);
          }
        } else if (q == DType::kU8) {
          cpu::QuantizeU8(inner, x.data<float>() + off, s, z, out[0]->data<uint8_t>() + off);
        } else {
          cpu::QuantizeI8(inner, x.data<float>() + off, s, z, out[0]->data<int8_t>() + off);
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  bool quantize_;
  int64_t axis_;
};

// ---- MatMulInteger / QLinearMatMul ----

class IntMatMulKernel final : public DnnlKernel {
 public:
  IntMatMulKernel(std::string name, bool qlinear)
      : DnnlKernel(std::move(name)), qlinear_(qlinear) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    const char* op = qlinear_ ? "QLinearMatMul" : "MatMulInteger";
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, qlinear_ ? 8 : 2, out, op));
    auto at = [&](size_t i) -> const Tensor* { return i < in.size() ? in[i] : nullptr; };
    const Tensor& a = *in[0];
    const Tensor& b = *in[qlinear_ ? 3 : 1];
    const Tensor* za = at(2);
    const Tensor* zb = at(qlinear_ ? 5 : 3);
    if (!Usable(a, b, za, zb) || (qlinear_ && !UsableScales(in, b.dim(1)))) {
      return RunFallback(ctx, in, out);
    }
    const int64_t k = a.dim(a.rank() - 1), n = b.dim(1), m = a.numel() / k;
    reference::Dims dims(a.dims().begin(), a.dims().end());
    dims.back() = n;
    const DType out_dtype = qlinear_ ? in[7]->dtype() : DType::kI32;
    if (out[0]->defined() && out[0]->dtype() != out_dtype) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], out_dtype, dims, op));
    // Workspace: QLinearMatMul's n requantization factors; at M = 1, a less its zero point
    // (s16, in room for k s32); QLinearMatMul's s32 product; a u8 b shifted to s8.
    const bool shift_b = b.dtype() == DType::kU8;
    const size_t scale_bytes = qlinear_ ? static_cast<size_t>(n) * sizeof(double) : 0;
    const size_t a32_bytes = m == 1 ? static_cast<size_t>(k) * sizeof(int32_t) : 0;
    const size_t acc_bytes = qlinear_ ? static_cast<size_t>(m * n) * sizeof(int32_t) : 0;
    const size_t b_bytes = shift_b ? static_cast<size_t>(k * n) : 0;
    // Without VNNI (M >= 2): the packed operands of IntGemm, 2-byte aligned.
    const bool igemm = m > 1 && choice::UseIGemm(m, n, k);
    const size_t head = (scale_bytes + a32_bytes + acc_bytes + b_bytes + 1) & ~size_t{1};
    const size_t pack_bytes =
        igemm ? cpu::IGemmPackedABytes(m, k) + cpu::IGemmPackedBBytes(k, n) : 0;
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(std::max<size_t>(head + pack_bytes, 1)));
    uint8_t* base = static_cast<uint8_t*>(ws);
    double* scale = reinterpret_cast<double*>(base);
    int32_t* a32 = reinterpret_cast<int32_t*>(base + scale_bytes);
    int32_t* acc = qlinear_ ? reinterpret_cast<int32_t*>(base + scale_bytes + a32_bytes)
                            : out[0]->data<int32_t>();
    const int8_t* bs8 = b.data<int8_t>();
    int bo = static_cast<int>(QuantParamAt(zb, 0));
    if (shift_b) {  // (b - zb) = ((b - 128) - (zb - 128)): both fit s8
      int8_t* shifted = reinterpret_cast<int8_t*>(base + scale_bytes + a32_bytes + acc_bytes);
      cpu::ShiftU8ToS8(k * n, b.data<uint8_t>(), shifted);
      bs8 = shifted;
      bo -= 128;
    }
    if (m == 1) {  // a less its zero point as s16 (a32 has room), then b streamed once
      int16_t* pa = reinterpret_cast<int16_t*>(a32);
      cpu::IGemmPackA(k, a.raw_data(), a.dtype() == DType::kU8, k,
                      static_cast<int32_t>(QuantParamAt(za, 0)), 0, 1, pa);
      const int64_t grain = ThreadsFor(ctx.num_threads(), n * k) == 1 ? n : 64;
      ctx.ParallelFor(n, grain,
                      [&](int64_t j0, int64_t j1) { cpu::IGemv(k, pa, bs8, n, bo, j0, j1, acc); });
    } else if (igemm) {
      int16_t* pa = reinterpret_cast<int16_t*>(base + head);
      int16_t* pb = reinterpret_cast<int16_t*>(base + head + cpu::IGemmPackedABytes(m, k));
      IntGemm(ctx, m, k, n, a.raw_data(), a.dtype() == DType::kU8, k,
              static_cast<int32_t>(QuantParamAt(za, 0)), true, pa, bs8, bo, pb, acc, n);
    } else {
      SetThreads(ThreadsFor(ctx.num_threads(), m * n * k));
      const int32_t co = 0;
      const dnnl_status_t st =
          a.dtype() == DType::kU8
              ? dnnl_gemm_u8s8s32('N', 'N', 'F', m, n, k, 1.0f, a.data<uint8_t>(), k,
                                  static_cast<uint8_t>(QuantParamAt(za, 0)), bs8, n,
                                  static_cast<int8_t>(bo), 0.0f, acc, n, &co)
              : dnnl_gemm_s8s8s32('N', 'N', 'F', m, n, k, 1.0f, a.data<int8_t>(), k,
                                  static_cast<int8_t>(QuantParamAt(za, 0)), bs8, n,
                                  static_cast<int8_t>(bo), 0.0f, acc, n, &co);
      DYNVM_RETURN_IF_ERROR(FromDnnl(st, op));
    }
    if (qlinear_) Requantize(in, m, n, acc, scale, *out[0]);
    return absl::OkStatus();
  }

 private:
  // a [..., M, K] and b [K, N] u8/s8, contiguous, with per-tensor zero points of their types.
  static bool Usable(const Tensor& a, const Tensor& b, const Tensor* za, const Tensor* zb) {
    if (!Is8Bit(a.dtype()) || !Is8Bit(b.dtype()) || a.rank() < 2 || b.rank() != 2 ||
        !a.is_contiguous() || !b.is_contiguous() || a.numel() == 0 || b.numel() == 0) {
      return false;
    }
    const int64_t k = a.dim(a.rank() - 1);
    if (k != b.dim(0) || k >= kMaxExactK) return false;
    for (auto [z, t] : {std::pair{za, a.dtype()}, std::pair{zb, b.dtype()}}) {
      if (z != nullptr && !UniformZeroPoint(*z, t)) return false;
    }
    return true;
  }

  // f32 scales: a_scale and y_scale per tensor, b_scale per tensor or per column; all valid.
  static bool UsableScales(Inputs in, int64_t n) {
    const Tensor &as = *in[1], &bs = *in[4], &ys = *in[6], &yz = *in[7];
    for (const Tensor* s : {&as, &bs, &ys}) {
      if (s->dtype() != DType::kF32 || s->rank() > 1 || !s->is_contiguous() ||
          !CheckQuantScale(*s, "scale").ok()) {
        return false;
      }
    }
    return as.numel() == 1 && ys.numel() == 1 && (bs.numel() == 1 || bs.numel() == n) &&
           yz.numel() == 1 && yz.rank() <= 1 && Is8Bit(yz.dtype());
  }

  // y = saturate(round_half_even(acc * a_scale * b_scale / y_scale) + y_zp), row by row;
  // `scale` has room for n factors.
  static void Requantize(Inputs in, int64_t m, int64_t n, const int32_t* acc, double* scale,
                         Tensor& y) {
    const double as = QuantParamAt(in[1], 0), ys = QuantParamAt(in[6], 0),
                 yz = QuantParamAt(in[7], 0);
    for (int64_t j = 0; j < n; ++j) scale[j] = as * QuantParamAt(in[4], j) / ys;
    for (int64_t i = 0; i < m; ++i) {
      if (y.dtype() == DType::kU8) {
        cpu::RequantizeU8(n, acc + i * n, scale, yz, y.data<uint8_t>() + i * n);
      } else {
        cpu::RequantizeI8(n, acc + i * n, scale, yz, y.data<int8_t>() + i * n);
      }
    }
  }

  bool qlinear_;
};

// ---- ConvInteger / QLinearConv ----

// 1-D or 2-D, any group, explicit, VALID or SAME pads, s8 w with a per-tensor zero point (or one
// repeated value), u8/s8 x: per batch item and group, im2col into s8 columns (a u8 x shifted by
// 128, padding holding the zero point so it contributes nothing), then the group's W rows
// [M/G, C/G*KH*KW] x columns on the integer GEMM (oneDNN's with VNNI, IntGemm's without), and
// QLinearConv's requantization per output channel (bias added first), in double as the
// reference does.
struct ConvAttrs {
  std::vector<int64_t> kernel, strides, pads, dilations;
  std::string auto_pad;
  int64_t group = 1;
};

class IntConvKernel final : public DnnlKernel {
 public:
  IntConvKernel(std::string name, bool qlinear, ConvAttrs a)
      : DnnlKernel(std::move(name)), qlinear_(qlinear), a_(std::move(a)) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    const char* op = qlinear_ ? "QLinearConv" : "ConvInteger";
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, qlinear_ ? 8 : 2, out, op));
    auto at = [&](size_t i) -> const Tensor* { return i < in.size() ? in[i] : nullptr; };
    const Tensor& x = *in[0];
    const Tensor& w = *in[qlinear_ ? 3 : 1];
    const Tensor* xz = at(2);
    const Tensor* wz = at(qlinear_ ? 5 : 3);
    const Tensor* bias = qlinear_ ? at(8) : nullptr;
    Geometry g;
    if (!Usable(x, w, xz, wz, bias, &g) || (qlinear_ && !UsableScales(in, g.m))) {
      return RunFallback(ctx, in, out);
    }
    const DType out_dtype = qlinear_ ? in[7]->dtype() : DType::kI32;
    if (out[0]->defined() && out[0]->dtype() != out_dtype) return RunFallback(ctx, in, out);
    std::vector<int64_t> dims = {g.n, g.m, g.oh, g.ow};
    if (x.rank() == 3) dims.erase(dims.begin() + 2);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], out_dtype, dims, op));
    const int64_t k = g.k(), p = g.oh * g.ow;
    const size_t scale_bytes = qlinear_ ? static_cast<size_t>(g.m) * sizeof(double) : 0;
    const size_t acc_bytes = qlinear_ ? static_cast<size_t>(g.m * p) * sizeof(int32_t) : 0;
    // Without VNNI: IntGemm's packed operands after the columns (2-byte aligned): all of w,
    // packed once per run, then one group's columns.
    const bool igemm = choice::UseIGemm(g.m, p, k);
    const size_t head = (scale_bytes + acc_bytes + static_cast<size_t>(k * p) + 1) & ~size_t{1};
    const size_t pa_bytes = igemm ? cpu::IGemmPackedABytes(g.m, k) : 0;
    const size_t pb_bytes = igemm ? cpu::IGemmPackedBBytes(k, p) : 0;
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(head + pa_bytes + pb_bytes));
    uint8_t* base = static_cast<uint8_t*>(ws);
    Buffers buf{reinterpret_cast<double*>(base), reinterpret_cast<int32_t*>(base + scale_bytes),
                reinterpret_cast<int8_t*>(base + scale_bytes + acc_bytes), nullptr, nullptr};
    if (igemm) {
      buf.pa = reinterpret_cast<int16_t*>(base + head);
      buf.pb = reinterpret_cast<int16_t*>(base + head + pa_bytes);
      const int32_t zw = static_cast<int32_t>(QuantParamAt(wz, 0));
      PackWeights(ctx, g.m, k, w.data<int8_t>(), zw, buf.pa);
    }
    if (qlinear_) {
      const double xs = QuantParamAt(in[1], 0), ys = QuantParamAt(in[6], 0);
      for (int64_t oc = 0; oc < g.m; ++oc) buf.scale[oc] = xs * QuantParamAt(in[4], oc) / ys;
    }
    SetThreads(ThreadsFor(ctx.num_threads(), g.m * p * k));
    for (int64_t b = 0; b < g.n; ++b) {
      DYNVM_RETURN_IF_ERROR(RunItem(ctx, in, b, g, igemm, buf, *out[0]));
    }
    return absl::OkStatus();
  }

 private:
  struct Geometry {
    int64_t n, c, h, w, m, kh, kw, oh, ow, sh, sw, dh, dw, pt, pl, grp;
    int64_t cg() const { return c / grp; }
    int64_t mg() const { return m / grp; }
    int64_t k() const { return cg() * kh * kw; }  // one group's GEMM depth
  };

  // The run's workspace: QLinearConv's per-channel factors and s32 sums, the columns, and
  // without VNNI the packed w and the packed columns.
  struct Buffers {
    double* scale;
    int32_t* acc;
    int8_t* col;
    int16_t* pa;
    int16_t* pb;
  };

  // Packs w [m, k] less its zero point (IntGemm's a operand), on the pool when big.
  static void PackWeights(const KernelContext& ctx, int64_t m, int64_t k, const int8_t* w,
                          int32_t zw, int16_t* pa) {
    ctx.ParallelFor(
        m, std::max<int64_t>(4, (1 << 16) / std::max<int64_t>(k, 1)),
        [&](int64_t i0, int64_t i1) { cpu::IGemmPackA(k, w, false, k, zw, i0, i1, pa); });
  }

  // Batch item b: every group's product, then QLinearConv's requantization.
  absl::Status RunItem(const KernelContext& ctx, Inputs in, int64_t b, const Geometry& g,
                       bool igemm, const Buffers& buf, Tensor& y) const {
    const Tensor& x = *in[0];
    const Tensor& w = *in[qlinear_ ? 3 : 1];
    const Tensor* wz = in.size() > (qlinear_ ? 5u : 3u) ? in[qlinear_ ? 5 : 3] : nullptr;
    const bool u8 = x.dtype() == DType::kU8;
    const int zx = static_cast<int>(QuantParamAt(in.size() > 2 ? in[2] : nullptr, 0));
    const int bo = u8 ? zx - 128 : zx;
    const int64_t k = g.k(), p = g.oh * g.ow, mg = g.mg();
    int32_t* c = qlinear_ ? buf.acc : y.data<int32_t>() + b * g.m * p;
    for (int64_t gi = 0; gi < g.grp; ++gi) {
      Im2Col(x, b, gi * g.cg(), g, u8, static_cast<int8_t>(bo), buf.col);
      int32_t* cgi = c + gi * mg * p;
      if (igemm) {
        IntGemm(ctx, mg, k, p, nullptr, false, k, 0, false, buf.pa + gi * mg * ((k + 1) & ~1),
                buf.col, bo, buf.pb, cgi, p);
        continue;
      }
      const int32_t co = 0;
      const dnnl_status_t st =
          dnnl_gemm_s8s8s32('N', 'N', 'F', mg, p, k, 1.0f, w.data<int8_t>() + gi * mg * k, k,
                            static_cast<int8_t>(QuantParamAt(wz, 0)), buf.col, p,
                            static_cast<int8_t>(bo), 0.0f, cgi, p, &co);
      DYNVM_RETURN_IF_ERROR(FromDnnl(st, qlinear_ ? "QLinearConv" : "ConvInteger"));
    }
    if (!qlinear_) return absl::OkStatus();
    const Tensor* bias = in.size() > 8 ? in[8] : nullptr;
    const double yz = QuantParamAt(in[7], 0);
    for (int64_t oc = 0; oc < g.m; ++oc) {
      const double bv = bias != nullptr ? bias->data<int32_t>()[oc] : 0;
      const int32_t* row = buf.acc + oc * p;
      const int64_t off = (b * g.m + oc) * p;
      if (y.dtype() == DType::kU8) {
        cpu::RequantizeU8Uniform(p, row, bv, buf.scale[oc], yz, y.data<uint8_t>() + off);
      } else {
        cpu::RequantizeI8Uniform(p, row, bv, buf.scale[oc], yz, y.data<int8_t>() + off);
      }
    }
    return absl::OkStatus();
  }

  bool Usable(const Tensor& x, const Tensor& w, const Tensor* xz, const Tensor* wz,
              const Tensor* bias, Geometry* g) const {
    const int r = x.rank();
    if (!Is8Bit(x.dtype()) || w.dtype() != DType::kI8 || (r != 3 && r != 4) || w.rank() != r ||
        !x.is_contiguous() || !w.is_contiguous() || a_.group < 1) {
      return false;
    }
    if ((xz != nullptr && !UniformZeroPoint(*xz, x.dtype())) ||
        (wz != nullptr && !UniformZeroPoint(*wz, w.dtype()))) {
      return false;
    }
    if (bias != nullptr && (bias->dtype() != DType::kI32 || bias->rank() != 1 ||
                            bias->dim(0) != w.dim(0) || !bias->is_contiguous())) {
      return false;
    }
    // A 1-D convolution is a 2-D one of height 1.
    const bool one_d = r == 3;
    *g = Geometry{};
    g->n = x.dim(0);
    g->c = x.dim(1);
    g->h = one_d ? 1 : x.dim(2);
    g->w = x.dim(r - 1);
    g->m = w.dim(0);
    g->kh = one_d ? 1 : w.dim(2);
    g->kw = w.dim(r - 1);
    g->grp = a_.group;
    if (g->n == 0 || g->m == 0 || g->c == 0 || g->c % g->grp != 0 || g->m % g->grp != 0 ||
        w.dim(1) != g->cg() || g->k() >= kMaxExactK) {
      return false;
    }
    return SpatialUsable(one_d, g);
  }

  // Strides, dilations and pads (explicit, VALID or SAME) of a 2-D (or, one_d, 1-D) geometry.
  bool SpatialUsable(bool one_d, Geometry* g) const {
    const size_t k = one_d ? 1 : 2;
    auto sized = [k](const std::vector<int64_t>& v, size_t want) {
      return v.empty() || v.size() == want;
    };
    if (!sized(a_.kernel, k) || !sized(a_.strides, k) || !sized(a_.dilations, k) ||
        !sized(a_.pads, 2 * k)) {
      return false;
    }
    if (!a_.kernel.empty() && (a_.kernel.back() != g->kw || (!one_d && a_.kernel[0] != g->kh))) {
      return false;
    }
    const bool same = a_.auto_pad == "SAME_UPPER" || a_.auto_pad == "SAME_LOWER";
    if (!same && a_.auto_pad != "VALID" && a_.auto_pad != "NOTSET" && !a_.auto_pad.empty()) {
      return false;
    }
    // Axis i of the attributes (0: height, absent in 1-D; 1: width).
    int64_t in[2] = {g->h, g->w}, kd[2] = {g->kh, g->kw}, st[2] = {1, 1}, dl[2] = {1, 1},
            lo[2] = {0, 0}, out[2] = {1, 1};
    for (int i = one_d ? 1 : 0; i < 2; ++i) {
      const size_t u = one_d ? 0 : static_cast<size_t>(i);
      st[i] = a_.strides.empty() ? 1 : a_.strides[u];
      dl[i] = a_.dilations.empty() ? 1 : a_.dilations[u];
      if (st[i] < 1 || dl[i] < 1 || in[i] < 1 || kd[i] < 1) return false;
      const int64_t ext = (kd[i] - 1) * dl[i] + 1;
      int64_t hi = 0;
      if (same) {
        const int64_t o = (in[i] + st[i] - 1) / st[i];
        const int64_t total = std::max<int64_t>(0, (o - 1) * st[i] + ext - in[i]);
        lo[i] = a_.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        hi = total - lo[i];
      } else if (a_.auto_pad != "VALID" && !a_.pads.empty()) {
        lo[i] = a_.pads[u];
        hi = a_.pads[u + k];
      }
      if (lo[i] < 0 || hi < 0 || in[i] + lo[i] + hi - ext < 0) return false;
      out[i] = (in[i] + lo[i] + hi - ext) / st[i] + 1;
    }
    g->sh = st[0];
    g->sw = st[1];
    g->dh = dl[0];
    g->dw = dl[1];
    g->pt = lo[0];
    g->pl = lo[1];
    g->oh = out[0];
    g->ow = out[1];
    return true;
  }

  static bool UsableScales(Inputs in, int64_t m) {
    const Tensor &xs = *in[1], &ws = *in[4], &ys = *in[6], &yz = *in[7];
    for (const Tensor* s : {&xs, &ws, &ys}) {
      if (s->dtype() != DType::kF32 || s->rank() > 1 || !s->is_contiguous() ||
          !CheckQuantScale(*s, "scale").ok()) {
        return false;
      }
    }
    return xs.numel() == 1 && ys.numel() == 1 && (ws.numel() == 1 || ws.numel() == m) &&
           yz.numel() == 1 && yz.rank() <= 1 && Is8Bit(yz.dtype());
  }

  // Columns [C/G*KH*KW, OH*OW] of batch b's channels [c0, c0 + C/G) as s8 (u8 x shifted by
  // 128); padding holds `pad`. Each output row's in-bounds span is found once, then copied.
  static void Im2Col(const Tensor& x, int64_t b, int64_t c0, const Geometry& g, bool u8, int8_t pad,
                     int8_t* col) {
    const int64_t p = g.oh * g.ow;
    for (int64_t ci = 0; ci < g.cg(); ++ci) {
      const int64_t plane = (b * g.c + c0 + ci) * g.h * g.w;
      for (int64_t ki = 0; ki < g.kh; ++ki) {
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          int8_t* dst = col + ((ci * g.kh + ki) * g.kw + kj) * p;
          // ox in [lo, hi) reads ix = ox * sw - pl + kj * dw inside [0, w).
          const int64_t shift = kj * g.dw - g.pl;
          const int64_t lo = std::min(g.ow, shift >= 0 ? 0 : (-shift + g.sw - 1) / g.sw);
          const int64_t hi =
              std::max(lo, std::min(g.ow, g.w - shift <= 0 ? 0 : (g.w - shift - 1) / g.sw + 1));
          for (int64_t oy = 0; oy < g.oh; ++oy) {
            const int64_t iy = oy * g.sh - g.pt + ki * g.dh;
            int8_t* row = dst + oy * g.ow;
            if (iy < 0 || iy >= g.h) {
              std::fill(row, row + g.ow, pad);
              continue;
            }
            std::fill(row, row + lo, pad);
            std::fill(row + hi, row + g.ow, pad);
            const int64_t src = plane + iy * g.w + shift;
            if (u8) {
              CopyRowU8(hi - lo, x.data<uint8_t>() + src + lo * g.sw, g.sw, row + lo);
            } else {
              CopyRowS8(hi - lo, x.data<int8_t>() + src + lo * g.sw, g.sw, row + lo);
            }
          }
        }
      }
    }
  }

  bool qlinear_;
  ConvAttrs a_;
};

void Add(KernelRegistry& r, const char* op, KernelFactory f) {
  r.Register(KernelRegistration{"", op, Device::kCPU, kBackend, kDnnlPriority, std::move(f)});
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateIm2ColConv(const KernelSpec& spec, bool qlinear) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, qlinear ? 8 : 2, qlinear ? 9 : 4, 1, 1));
  ConvAttrs a;
  DYNVM_ASSIGN_OR_RETURN(a.kernel, spec.GetInts("kernel_shape"));
  DYNVM_ASSIGN_OR_RETURN(a.strides, spec.GetInts("strides"));
  DYNVM_ASSIGN_OR_RETURN(a.pads, spec.GetInts("pads"));
  DYNVM_ASSIGN_OR_RETURN(a.dilations, spec.GetInts("dilations"));
  DYNVM_ASSIGN_OR_RETURN(a.auto_pad, spec.GetString("auto_pad", "NOTSET"));
  DYNVM_ASSIGN_OR_RETURN(a.group, spec.GetInt("group", 1));
  return std::make_unique<IntConvKernel>(KernelName(spec, "im2col"), qlinear, std::move(a));
}

void RegisterQuantKernels(KernelRegistry& r) {
  // The im2col convolution: after qconv.cc's int8 convolution primitive in the chain.
  for (bool qlinear : {false, true}) {
    r.Register(KernelRegistration{
        "", qlinear ? "QLinearConv" : "ConvInteger", Device::kCPU, kBackend, kDnnlSecondPriority,
        [qlinear](const KernelSpec& spec) { return CreateIm2ColConv(spec, qlinear); }});
  }
  for (bool quantize : {true, false}) {
    Add(r, quantize ? "QuantizeLinear" : "DequantizeLinear",
        [quantize](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
          DYNVM_RETURN_IF_ERROR(CheckArity(spec, 2, 3, 1, 1));
          DYNVM_ASSIGN_OR_RETURN(int64_t axis, spec.GetInt("axis", 1));
          return std::make_unique<QuantKernel>(KernelName(spec), quantize, axis);
        });
  }
  for (bool qlinear : {false, true}) {
    Add(r, qlinear ? "QLinearMatMul" : "MatMulInteger",
        [qlinear](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
          DYNVM_RETURN_IF_ERROR(CheckArity(spec, qlinear ? 8 : 2, qlinear ? 8 : 4, 1, 1));
          return std::make_unique<IntMatMulKernel>(KernelName(spec), qlinear);
        });
  }
}

}  // namespace dynvm::onednn
