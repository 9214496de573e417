// RoiAlign (f32 X [N, C, H, W], rois [R, 4], batch_indices [R]), for the oneDNN backend: the
// reference kernel's arithmetic (kernels/reference/vision.cc: bins of sampling_ratio^2 bilinear
// samples, or ceil(roi size / bins) of them when it is 0; half_pixel or output_half_pixel; avg or
// max) organised for speed. Per call X is transposed to channels-last in the workspace; per region
// of interest the sample positions are computed once, separably (a row table over the output
// rows' samples and a column table over the output columns'), their validity, corner indices and
// bilinear weights shared by every channel; each sample then adds (avg) or takes the largest of
// (max) its four weighted corners as contiguous rows of C values, and the bins are written in
// the output's [C, out_h, out_w] order. Regions are split over the VM's threads. The reference
// computes in double: the results differ in the last bits of f32.
//
// It is the RoI pooling of torchvision's two-stage detectors (Faster/Mask/Keypoint R-CNN's
// MultiScaleRoIAlign: one RoiAlign per FPN level): fasterrcnn_mobilenet_v3_large_320_fpn's
// [1, 256, 10, 10] x 150 regions x 7 x 7 bins x 2 x 2 samples took 71-181 ms a call on the
// reference kernel (double copies of X and of the output, a bounds test per corner), half of
// the model's time (docs/torchvision.md).
//
// Fallbacks to the reference kernel (which reports the errors): other dtypes, non-contiguous
// operands, shapes other than the above, a batch index outside [0, N), boxes that are not finite,
// and sample tables of more than kMaxSamples positions along an axis (huge boxes with
// sampling_ratio 0).
#include "kernels/reference/roi_align.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

constexpr int64_t kMaxSamples = int64_t{1} << 16;

using reference::RoiAlignAttrs;

// One sample position along an axis: whether it lies within [-1, size], its two neighbours'
// indices and their weights (low: 1 - l, high: l), as the reference kernel's RoiSample.
struct Tap {
  bool valid = false;
  int64_t lo = 0, hi = 0;
  double w_lo = 0, w_hi = 0;
};

Tap MakeTap(double v, int64_t size) {
  Tap t;
  if (v < -1.0 || v > static_cast<double>(size)) return t;
  t.valid = true;
  v = std::max(v, 0.0);
  t.lo = static_cast<int64_t>(v);
  if (t.lo >= size - 1) {
    t.lo = t.hi = size - 1;
    v = static_cast<double>(t.lo);
  } else {
    t.hi = t.lo + 1;
  }
  const double l = v - static_cast<double>(t.lo);
  t.w_lo = 1 - l;
  t.w_hi = l;
  return t;
}

// A region's sample geometry along one axis: `bins` bins of `per_bin` samples from `start`.
void FillTaps(double start, double bin, int64_t bins, int64_t per_bin, int64_t size,
              std::vector<Tap>* taps) {
  taps->resize(static_cast<size_t>(bins * per_bin));
  for (int64_t b = 0; b < bins; ++b) {
    for (int64_t i = 0; i < per_bin; ++i) {
      const double v = start + static_cast<double>(b) * bin +
                       (static_cast<double>(i) + 0.5) * bin / static_cast<double>(per_bin);
      (*taps)[b * per_bin + i] = MakeTap(v, size);
    }
  }
}

class RoiAlignKernel final : public DnnlKernel {
 public:
  RoiAlignKernel(std::string name, RoiAlignAttrs a) : DnnlKernel(std::move(name)), a_(a) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 3, out, "RoiAlign"));
    const Tensor& x = *in[0];
    const Tensor& rois = *in[1];
    const Tensor& batch = *in[2];
    if (x.dtype() != DType::kF32 || rois.dtype() != DType::kF32 ||
        (batch.dtype() != DType::kI64 && batch.dtype() != DType::kI32) || x.rank() != 4 ||
        rois.rank() != 2 || rois.dim(1) != 4 || batch.rank() != 1 || batch.dim(0) != rois.dim(0) ||
        !x.is_contiguous() || !rois.is_contiguous() || !batch.is_contiguous() || x.numel() == 0) {
      return RunFallback(ctx, in, out);
    }
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), r = rois.dim(0);
    const float* boxes = rois.data<float>();
    for (int64_t k = 0; k < r; ++k) {
      const int64_t b = BatchIndex(batch, k);
      if (b < 0 || b >= n) return RunFallback(ctx, in, out);
      for (int i = 0; i < 4; ++i) {
        if (!std::isfinite(boxes[k * 4 + i])) return RunFallback(ctx, in, out);
      }
      int64_t gh = 0, gw = 0;
      Geometry(boxes + k * 4, nullptr, nullptr, nullptr, nullptr, &gh, &gw);
      if (gh > kMaxSamples || gw > kMaxSamples) return RunFallback(ctx, in, out);
    }
    const reference::Dims dims = {r, c, a_.out_h, a_.out_w};
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, dims, "RoiAlign"));
    if (r == 0 || c == 0) return absl::OkStatus();
    const int64_t bins = a_.out_h * a_.out_w;
    const int tasks = ctx.ParallelTasks(r, 1);
    // Channels-last X, then per task an accumulator of bins x C floats.
    const size_t xt_bytes = Align(static_cast<size_t>(n * h * w * c) * sizeof(float));
    const size_t acc_bytes = Align(static_cast<size_t>(bins * c) * sizeof(float));
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(xt_bytes + acc_bytes * tasks + 64));
    char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws) + 63) & ~uintptr_t{63});
    float* xt = reinterpret_cast<float*>(base);
    const float* px = x.data<float>();
    const int64_t plane = h * w;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* src = px + (i * c + ch) * plane;
        float* dst = xt + i * plane * c + ch;
        for (int64_t p = 0; p < plane; ++p) dst[p * c] = src[p];
      }
    }
    float* py = out[0]->data<float>();
    ctx.ParallelForDynamic(r, 1, [&](int slot, int64_t k0, int64_t k1) {
      float* acc = reinterpret_cast<float*>(base + xt_bytes + acc_bytes * slot);
      std::vector<Tap> ys, xs;
      for (int64_t k = k0; k < k1; ++k) {
        const float* image = xt + BatchIndex(batch, k) * plane * c;
        Region(boxes + k * 4, image, h, w, c, &ys, &xs, acc);
        float* yk = py + k * c * bins;
        for (int64_t b = 0; b < bins; ++b) {
          for (int64_t ch = 0; ch < c; ++ch) yk[ch * bins + b] = acc[b * c + ch];
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  static size_t Align(size_t bytes) { return (bytes + 63) & ~size_t{63}; }

  // ceil(v) samples, at most kMaxSamples + 1 (a region past that falls back).
  static int64_t Samples(double v) {
    const double n = std::ceil(v);
    return n > static_cast<double>(kMaxSamples) ? kMaxSamples + 1 : static_cast<int64_t>(n);
  }

  static int64_t BatchIndex(const Tensor& batch, int64_t k) {
    return batch.dtype() == DType::kI64 ? batch.data<int64_t>()[k]
                                        : static_cast<int64_t>(batch.data<int32_t>()[k]);
  }

  // The reference kernel's region geometry: start (x0, y0), bin size (bw, bh) and samples per
  // bin (gw, gh; at most 0 when the region is empty). Null outputs are not written.
  void Geometry(const float* box, double* x0, double* y0, double* bw, double* bh, int64_t* gh,
                int64_t* gw) const {
    const double offset = a_.half_pixel ? 0.5 : 0.0;
    const double sx = static_cast<double>(box[0]) * a_.spatial_scale - offset;
    const double sy = static_cast<double>(box[1]) * a_.spatial_scale - offset;
    double rw = static_cast<double>(box[2]) * a_.spatial_scale - offset - sx;
    double rh = static_cast<double>(box[3]) * a_.spatial_scale - offset - sy;
    if (!a_.half_pixel) {
      rw = std::max(rw, 1.0);
      rh = std::max(rh, 1.0);
    }
    if (x0 != nullptr) *x0 = sx;
    if (y0 != nullptr) *y0 = sy;
    if (bw != nullptr) *bw = rw / static_cast<double>(a_.out_w);
    if (bh != nullptr) *bh = rh / static_cast<double>(a_.out_h);
    *gh = a_.sampling_ratio > 0 ? a_.sampling_ratio : Samples(rh / static_cast<double>(a_.out_h));
    *gw = a_.sampling_ratio > 0 ? a_.sampling_ratio : Samples(rw / static_cast<double>(a_.out_w));
  }

  // One region into acc [bins, C]: each bin's average (or maximum) over its samples.
  void Region(const float* box, const float* image, int64_t h, int64_t w, int64_t c,
              std::vector<Tap>* ys, std::vector<Tap>* xs, float* acc) const {
    double x0 = 0, y0 = 0, bw = 0, bh = 0;
    int64_t gh = 0, gw = 0;
    Geometry(box, &x0, &y0, &bw, &bh, &gh, &gw);
    const int64_t bins = a_.out_h * a_.out_w;
    if (gh <= 0 || gw <= 0) {  // no sample: the reference's empty sum (0 over a count of 1)
      std::fill(acc, acc + bins * c, 0.0f);
      return;
    }
    FillTaps(y0, bh, a_.out_h, gh, h, ys);
    FillTaps(x0, bw, a_.out_w, gw, w, xs);
    const float scale = static_cast<float>(1.0 / static_cast<double>(gh * gw));
    for (int64_t ph = 0; ph < a_.out_h; ++ph) {
      for (int64_t pw = 0; pw < a_.out_w; ++pw) {
        float* v = acc + (ph * a_.out_w + pw) * c;
        std::fill(v, v + c, a_.max_mode ? -std::numeric_limits<float>::infinity() : 0.0f);
        for (int64_t iy = 0; iy < gh; ++iy) {
          const Tap& ty = (*ys)[ph * gh + iy];
          for (int64_t ix = 0; ix < gw; ++ix) {
            const Tap& tx = (*xs)[pw * gw + ix];
            if (!ty.valid || !tx.valid) {
              if (a_.max_mode) {  // the sample's terms are 0
                for (int64_t ch = 0; ch < c; ++ch) v[ch] = std::max(v[ch], 0.0f);
              }
              continue;
            }
            const float* p00 = image + (ty.lo * w + tx.lo) * c;
            const float* p01 = image + (ty.lo * w + tx.hi) * c;
            const float* p10 = image + (ty.hi * w + tx.lo) * c;
            const float* p11 = image + (ty.hi * w + tx.hi) * c;
            const auto w00 = static_cast<float>(ty.w_lo * tx.w_lo);
            const auto w01 = static_cast<float>(ty.w_lo * tx.w_hi);
            const auto w10 = static_cast<float>(ty.w_hi * tx.w_lo);
            const auto w11 = static_cast<float>(ty.w_hi * tx.w_hi);
            if (a_.max_mode) {
              for (int64_t ch = 0; ch < c; ++ch) {
                v[ch] =
                    std::max({v[ch], w00 * p00[ch], w01 * p01[ch], w10 * p10[ch], w11 * p11[ch]});
              }
            } else {
              for (int64_t ch = 0; ch < c; ++ch) {
                v[ch] += w00 * p00[ch] + w01 * p01[ch] + w10 * p10[ch] + w11 * p11[ch];
              }
            }
          }
        }
        if (!a_.max_mode) {
          for (int64_t ch = 0; ch < c; ++ch) v[ch] *= scale;
        }
      }
    }
  }

  RoiAlignAttrs a_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateRoiAlign(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 3, 3, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1}));
  // Attributes the reference kernel refuses: it reports them (with its message).
  absl::StatusOr<RoiAlignAttrs> a = reference::ReadRoiAlignAttrs(spec);
  if (!a.ok()) return absl::UnimplementedError("RoiAlign: attributes the reference kernel reports");
  return std::make_unique<RoiAlignKernel>(KernelName(spec), *a);
}

}  // namespace

void RegisterRoiAlignKernels(KernelRegistry& r) {
  r.Register(
      KernelRegistration{"", "RoiAlign", Device::kCPU, kBackend, kDnnlPriority, &CreateRoiAlign});
}

}  // namespace dynvm::onednn
