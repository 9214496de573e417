// oneDNN Resize (opset 11 and later) through the resampling primitive, f32, plain layout, over
// the spatial dims of a [N, C, D...] tensor (1 to 3 of them), with the conv family's per-site
// primitive cache (conv.h).
//
// oneDNN maps an output coordinate o to the input coordinate (o + 0.5) / F - 0.5 with F the
// output/input size ratio; linear takes the two neighbours around it, clamped to the input,
// and nearest rounds it. That is ONNX's arithmetic only in these cases, which this kernel
// takes; every other run goes to the reference kernel (which also reports every shape error):
// - linear with coordinate_transformation_mode half_pixel, or pytorch_half_pixel where no
//   spatial output dim is 1, when every spatial ratio out/in equals the ONNX scale exactly
//   (given `sizes`, or `scales` whose product with the input size is whole), N and C kept,
//   and the input finite (oneDNN weights a neighbour by 0 where the reference skips it, so a
//   NaN or infinity there would differ);
// - nearest upsampling by whole factors k (out = k * in, scale exactly k), N and C kept, with
//   half_pixel or pytorch_half_pixel and a round_prefer_* nearest_mode, asymmetric with floor,
//   or tf_half_pixel_for_nn with floor: for whole k all of them pick input o / k (rounded
//   down), and so does oneDNN, whose coordinate is never a tie there.
// Cubic, align_corners, tf_crop_and_resize, antialias and `axes` are the reference kernel's (at
// create). Nearest upsampling by whole factors of a dense input runs dynvm's copy loop
// (NearestWholeFactors) instead of the primitive.
//
// Tuning notes (moved here from docs/kernels.md with the code's move to kernels/cpu/; the
// figures are those of the records named):
//
// Resize (kernels/dnnl/resize.cc, test kernels_dnnl_resize_test): oneDNN's resampling maps output
// coordinate o to (o + 0.5) / F - 0.5 with F = out / in, which is ONNX's arithmetic only in some
// cases, so the kernel takes exactly those and leaves the rest to the reference kernel: linear with
// half_pixel (or pytorch_half_pixel with no spatial output of size 1) when each spatial ratio
// out/in equals the ONNX scale exactly (given sizes, or scales whose product with the input size is
// whole) and the input is finite; nearest upsampling by whole factors with
// half_pixel/pytorch_half_pixel + round_prefer_*, asymmetric + floor or tf_half_pixel_for_nn +
// floor (for a whole factor k all of these pick input o / k). N and C must keep their size; 1-3
// spatial dims; f32. Cubic, align_corners, tf_crop_and_resize, antialias, axes and opset 10 are
// refused at create (reference kernel); the other cases fall back per run (counted in
// fallback_runs()). The common CNN upsamplers (nearest x2, bilinear with align_corners=False, as
// torch exports them) are all taken.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/dnnl/conv_common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/parallel_loops.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {
namespace {

using dt = dnnl::memory::data_type;
using reference::Dims;

struct ResizeAttrs {
  bool linear = false;
  bool pytorch_half_pixel = false;
};

// The output dims of a Resize run and whether oneDNN computes it as ONNX does (see above).
// False: leave the run to the reference kernel (which also reports bad scales or sizes).
bool ResizePlan(const ResizeAttrs& a, const Tensor& x, const Tensor* scales_t,
                const Tensor* sizes_t, Dims* out_dims) {
  const int r = x.rank();
  if (r < 3 || r > 5 || x.dtype() != DType::kF32 || x.numel() == 0) return false;
  if (scales_t != nullptr && scales_t->numel() == 0) scales_t = nullptr;
  if (sizes_t != nullptr && sizes_t->numel() == 0) sizes_t = nullptr;
  if ((scales_t == nullptr) == (sizes_t == nullptr)) return false;
  out_dims->assign(r, 0);
  std::vector<double> scales(r, 1.0);
  if (sizes_t != nullptr) {
    if (sizes_t->numel() != r) return false;
    absl::StatusOr<Dims> sizes = reference::ReadInts(*sizes_t, "Resize", "sizes");
    if (!sizes.ok()) return false;
    for (int i = 0; i < r; ++i) {
      if ((*sizes)[i] < 1) return false;
      (*out_dims)[i] = (*sizes)[i];
      scales[i] = static_cast<double>((*sizes)[i]) / static_cast<double>(x.dim(i));
    }
  } else {
    if (scales_t->numel() != r || scales_t->dtype() != DType::kF32) return false;
    for (int i = 0; i < r; ++i) {
      const float s = scales_t->data<float>()[scales_t->ElementOffset(i)];
      if (!(s > 0) || s > 1e6f) return false;
      const double product = static_cast<double>(x.dim(i)) * static_cast<double>(s);
      if (product != std::floor(product) || product < 1) return false;  // ratio != scale
      (*out_dims)[i] = static_cast<int64_t>(product);
      scales[i] = s;
    }
  }
  if ((*out_dims)[0] != x.dim(0) || (*out_dims)[1] != x.dim(1)) return false;
  for (int i = 2; i < r; ++i) {
    const int64_t in = x.dim(i), out = (*out_dims)[i];
    if (a.linear) {
      if (a.pytorch_half_pixel && out == 1) return false;
    } else if (out % in != 0 || scales[i] != static_cast<double>(out / in)) {
      return false;
    }
  }
  return true;
}

class ResizeKernel final : public DnnlKernel {
 public:
  ResizeKernel(std::string name, ResizeAttrs attrs) : DnnlKernel(std::move(name)), attrs_(attrs) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "Resize"));
    const Tensor& x = *in[0];
    const Tensor* scales = in.size() > 2 ? in[2] : nullptr;
    const Tensor* sizes = in.size() > 3 ? in[3] : nullptr;
    Dims out_dims;
    if (!ResizePlan(attrs_, x, scales, sizes, &out_dims) || (attrs_.linear && HasNonFinite(x))) {
      return RunFallback(ctx, in, out);
    }
    int64_t out_elements = 1;
    for (int64_t d : out_dims) out_elements *= d;
    if (!attrs_.linear && x.is_contiguous()) {
      DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, out_dims, "Resize"));
      NearestWholeFactors(ctx, x, out_dims, out[0]->data<float>());
      return absl::OkStatus();
    }
    SetThreads(ThreadsFor(ctx.num_threads(), out_elements));
    ShapeKey key;
    key.Add(&x);
    for (int64_t d : out_dims) key.Add(d);
    key.Add(ctx.num_threads());
    SiteCache* st = SiteState<SiteCache>(ctx);
    bool fresh = false;
    Entry* e = st->Lookup(key, &fresh);
    if (fresh) {
      DYNVM_RETURN_IF_ERROR(BindEntry(e, "resampling", [&](const dnnl::engine& engine) {
        const dnnl::memory::desc src = TensorDesc(x);
        const dnnl::memory::desc dst = DenseDesc(dt::f32, out_dims);
        const dnnl::algorithm alg = attrs_.linear ? dnnl::algorithm::resampling_linear
                                                  : dnnl::algorithm::resampling_nearest;
        dnnl::resampling_forward::desc d(dnnl::prop_kind::forward_inference, alg, src, dst);
        dnnl::resampling_forward::primitive_desc pd(d, UserScratchpadAttr(), engine);
        if (pd.dst_desc() != dst) throw dnnl::error(dnnl_unimplemented, "layout");
        e->main.Bind(pd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
      }));
    }
    if (e->use_fallback) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, out_dims, "Resize"));
    return ExecuteBound(ctx, e->main, {x.raw_data(), out[0]->raw_data()});
  }

 private:
  // Nearest upsampling by whole factors (ResizePlan: N and C kept, out = k * in on each spatial
  // axis) of a dense input: each input row's elements repeated k_w times into its first output
  // row, that row copied to the next k_h - 1, those rows to the next k_d - 1 depth slices. A
  // plain copy loop: oneDNN 2.6's resampling on the plain layout (simple_resampling) took 6-23 ms
  // to upsample PaddleOCR's [1, 96, 60, 92] FPN level on the shared machine. Planes (and depth
  // slices) split over the VM's pool.
  static void NearestWholeFactors(const KernelContext& ctx, const Tensor& x, const Dims& out_dims,
                                  float* y) {
    const int r = x.rank();
    int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
    for (int i = 2; i < r; ++i) {
      in[3 - r + i] = x.dim(i);
      out[3 - r + i] = out_dims[i];
    }
    const int64_t kd = out[0] / in[0], kh = out[1] / in[1], kw = out[2] / in[2];
    const int64_t slices = x.dim(0) * x.dim(1) * in[0];  // (plane, input depth) pairs
    const float* px = x.data<float>();
    const size_t row_bytes = static_cast<size_t>(out[2]) * sizeof(float);
    auto run = [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        const int64_t plane = s / in[0], id = s % in[0];
        float* ys = y + (plane * out[0] + id * kd) * out[1] * out[2];
        const float* xs = px + s * in[1] * in[2];
        for (int64_t ih = 0; ih < in[1]; ++ih) {
          float* o = ys + ih * kh * out[2];
          const float* xr = xs + ih * in[2];
          if (kw == 1) {
            std::memcpy(o, xr, row_bytes);
          } else {
            for (int64_t iw = 0; iw < in[2]; ++iw) {
              for (int64_t a = 0; a < kw; ++a) o[iw * kw + a] = xr[iw];
            }
          }
          for (int64_t a = 1; a < kh; ++a) std::memcpy(o + a * out[2], o, row_bytes);
        }
        for (int64_t b = 1; b < kd; ++b) {
          std::memcpy(ys + b * out[1] * out[2], ys, row_bytes * static_cast<size_t>(out[1]));
        }
      }
    };
    const int64_t total = slices * out[1] * out[2] * kd;
    if (ctx.num_threads() == 1 || total < kMinParallelElements) {
      run(0, slices);
    } else {
      ctx.ParallelFor(slices, 1, run);
    }
  }

  ResizeAttrs attrs_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateResize(const KernelSpec& spec) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 1, 4, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0}));
  if (spec.Find("opset10") != nullptr || spec.Find("axes") != nullptr) {
    return absl::UnimplementedError("Resize: opset 10 and `axes` are the reference kernel's");
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t antialias, spec.GetInt("antialias", 0));
  DYNVM_ASSIGN_OR_RETURN(std::string policy, spec.GetString("keep_aspect_ratio_policy", "stretch"));
  DYNVM_ASSIGN_OR_RETURN(std::string mode, spec.GetString("mode", "nearest"));
  DYNVM_ASSIGN_OR_RETURN(std::string transform,
                         spec.GetString("coordinate_transformation_mode", "half_pixel"));
  DYNVM_ASSIGN_OR_RETURN(std::string nearest, spec.GetString("nearest_mode", "round_prefer_floor"));
  ResizeAttrs a;
  a.linear = mode == "linear";
  a.pytorch_half_pixel = transform == "pytorch_half_pixel";
  const bool half_pixel = transform == "half_pixel" || a.pytorch_half_pixel;
  bool taken = false;
  if (antialias == 0 && policy == "stretch") {
    if (a.linear) {
      taken = half_pixel;
    } else if (mode == "nearest") {
      const bool round = nearest == "round_prefer_floor" || nearest == "round_prefer_ceil";
      taken = (half_pixel && round) ||
              ((transform == "asymmetric" || transform == "tf_half_pixel_for_nn") &&
               nearest == "floor");
    }
  }
  if (!taken) {
    return absl::UnimplementedError(absl::StrCat("Resize: mode ", mode, " with ", transform, " (",
                                                 nearest, ") is the reference kernel's"));
  }
  return std::make_unique<ResizeKernel>(KernelName(spec), a);
}

}  // namespace

void RegisterResizeKernels(KernelRegistry& r) {
  r.Register(
      KernelRegistration{"", "Resize", Device::kCPU, kBackend, kDnnlPriority, &CreateResize});
}

}  // namespace dynvm::onednn
