// The reference kernel of dynvm::FusedConv (made by compiler/conv_fusion.cc): ONNX Conv (the
// reference Conv kernel, in double), then an optional residual `sum` (fourth input, exactly the
// output's shape) added, then an optional "activation" (Relu, LeakyRelu with
// activation_alpha, Clip with activation_alpha = min and activation_beta = max, Sigmoid,
// HardSwish, SiLU = x * sigmoid(x), Tanh, Affine = activation_alpha * x + activation_beta), then
// an optional "activation2" (same names, "activation2_alpha", "activation2_beta"), each step
// rounded to f32 as the unfused ops would.
// NaN stays NaN through every activation. f32 only.
//
// A depthwise stage (inputs 4 and 5, dw_W [M, 1, 3, 3] and dw_B [M]; compiler/conv_fusion.h):
// the result above (no residual) is then the input of a 3x3 depthwise conv, pad 1 all round,
// stride "dw_stride", plus dw_B, then "dw_activation" (same names as "activation"), computed
// here directly in double and rounded to f32 before its activation.
//
// Layout flags (set by the compiler's layout pass, compiler/conv_fusion.h): "channels_last_in",
// "channels_last_sum" and "channels_last_out" say that X, the residual or Y hold the nCx16c layout
// (channels in blocks of 16, C a multiple of 16) under their logical dims; this kernel converts
// them.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/reference/common.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

enum class Act : uint8_t {
  kNone,
  kRelu,
  kLeakyRelu,
  kClip,
  kSigmoid,
  kHardSwish,
  kSiLU,
  kTanh,
  kAffine
};

float Apply(Act act, float x, float alpha, float beta) {
  switch (act) {
    case Act::kNone:
      return x;
    case Act::kRelu:
      return x < 0 ? 0.0f : x;
    case Act::kLeakyRelu:
      return x < 0 ? alpha * x : x;
    case Act::kClip:
      return x < alpha ? alpha : (x > beta ? beta : x);
    case Act::kSigmoid:
      return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
    case Act::kHardSwish: {
      const double v = static_cast<double>(x) / 6.0 + 0.5;
      return static_cast<float>(x * (v < 0 ? 0.0 : (v > 1 ? 1.0 : v)));
    }
    case Act::kSiLU: {
      const float s = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
      return x * s;
    }
    case Act::kTanh:
      return static_cast<float>(std::tanh(static_cast<double>(x)));
    case Act::kAffine:  // Mul, then Add, each rounded
      return static_cast<float>(alpha * x) + beta;
  }
  return x;
}

// The element offset of plain (row-major) element `i` of a [N, C, S...] tensor in channels-last.
int64_t BlockedOffset(int64_t i, int64_t c, int64_t s) {
  const int64_t n = i / (c * s), ch = (i / s) % c, sp = i % s;
  return (n * s + sp) * c + ch;
}

struct Blocked {
  bool in = false, sum = false, out = false;
};

struct Depthwise {
  bool present = false;
  Act act = Act::kNone;
  float alpha = 0, beta = 0;
  int64_t stride = 1;
};

// y = act(depthwise 3x3 conv of x (plain [N, M, H, W]), pad 1, `stride`, + bias), plain.
absl::Status RunDepthwise(KernelContext& ctx, const Depthwise& dw, const Tensor& x, const Tensor* w,
                          const Tensor* b, Tensor* y) {
  const int64_t n = x.dim(0), m = x.dim(1), h = x.dim(2), wd = x.dim(3), s = dw.stride;
  if (w == nullptr || b == nullptr || w->dtype() != DType::kF32 || b->dtype() != DType::kF32 ||
      w->rank() != 4 || w->dim(0) != m || w->dim(1) != 1 || w->dim(2) != 3 || w->dim(3) != 3 ||
      b->rank() != 1 || b->dim(0) != m) {
    return absl::InvalidArgumentError(
        "FusedConv: the depthwise weights must be [M, 1, 3, 3] and its bias [M]");
  }
  const int64_t oh = (h - 1) / s + 1, ow = (wd - 1) / s + 1;
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, y, DType::kF32, {n, m, oh, ow}, "FusedConv"));
  const float* px = x.data<float>();
  float* py = y->data<float>();
  for (int64_t i = 0; i < n * m; ++i) {
    const int64_t ch = i % m;
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        double acc = b->data<float>()[b->ElementOffset(ch)];
        for (int64_t ky = 0; ky < 3; ++ky) {
          const int64_t iy = oy * s - 1 + ky;
          for (int64_t kx = 0; kx < 3; ++kx) {
            const int64_t ix = ox * s - 1 + kx;
            if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
            acc += static_cast<double>(px[(i * h + iy) * wd + ix]) *
                   w->data<float>()[w->ElementOffset((ch * 3 + ky) * 3 + kx)];
          }
        }
        py[(i * oh + oy) * ow + ox] = Apply(dw.act, static_cast<float>(acc), dw.alpha, dw.beta);
      }
    }
  }
  return absl::OkStatus();
}

class FusedConvKernel final : public Kernel {
 public:
  struct Post {
    Act act = Act::kNone;
    float alpha = 0, beta = 0;
  };

  FusedConvKernel(std::unique_ptr<Kernel> conv, Post first, Post second, Blocked blocked,
                  Depthwise dw)
      : conv_(std::move(conv)), first_(first), second_(second), blocked_(blocked), dw_(dw) {}
  std::string name() const override { return "fusedconv.f32.ref"; }

  absl::Status Run(KernelContext& ctx, absl::Span<const Tensor* const> in,
                   absl::Span<Tensor* const> out) const override {
    const Tensor* sum = in.size() > 3 ? in[3] : nullptr;
    std::vector<const Tensor*> conv_in(in.begin(), in.begin() + std::min<size_t>(in.size(), 3));
    Tensor plain_x;
    if (blocked_.in && in[0] != nullptr) {
      const Tensor& x = *in[0];
      if (x.dtype() != DType::kF32 || x.rank() < 3 || !x.is_contiguous()) {
        return absl::InvalidArgumentError("FusedConv: a channels-last X must be f32 [N, C, ...]");
      }
      DYNVM_ASSIGN_OR_RETURN(plain_x, Tensor::Empty(DType::kF32, x.dims()));
      const int64_t c = x.dim(1), sp = x.numel() / std::max<int64_t>(1, x.dim(0) * c);
      for (int64_t i = 0; i < x.numel(); ++i) {
        plain_x.data<float>()[i] = x.data<float>()[BlockedOffset(i, c, sp)];
      }
      conv_in[0] = &plain_x;
    }
    Tensor mid;
    Tensor* const mid_out[] = {&mid};
    DYNVM_RETURN_IF_ERROR(conv_->Run(ctx, conv_in, dw_.present ? mid_out : out));
    if (dw_.present) {
      if (sum != nullptr || mid.rank() != 4) {
        return absl::InvalidArgumentError(
            "FusedConv: a depthwise stage takes a 2D conv and no residual");
      }
      ApplyPosts(mid.data<float>(), mid.numel());
      DYNVM_RETURN_IF_ERROR(RunDepthwise(ctx, dw_, mid, in[4], in[5], out[0]));
      return ToChannelsLast(out[0]);
    }
    Tensor& y = *out[0];
    if (y.dtype() != DType::kF32) return absl::UnimplementedError("FusedConv: f32 only");
    float* py = y.data<float>();
    const int64_t n = y.numel();
    const int64_t yc = y.rank() >= 2 ? y.dim(1) : 1;
    const int64_t ys = yc == 0 || y.dim(0) == 0 ? 0 : n / (y.dim(0) * yc);
    if ((blocked_.out || blocked_.sum) && y.rank() < 3) {
      return absl::InvalidArgumentError("FusedConv: a channels-last Y must be [N, C, ...]");
    }
    if (sum != nullptr) {
      if (sum->dtype() != DType::kF32 || sum->dims() != y.dims()) {
        return absl::InvalidArgumentError(absl::StrCat("FusedConv: the residual ",
                                                       sum->DebugString(), " must be the output's ",
                                                       y.DebugString()));
      }
      const float* ps = sum->data<float>();
      if (blocked_.sum && !sum->is_contiguous()) {
        return absl::InvalidArgumentError("FusedConv: a channels-last residual must be contiguous");
      }
      if (blocked_.sum) {
        for (int64_t i = 0; i < n; ++i) py[i] += ps[BlockedOffset(i, yc, ys)];
      } else {
        for (int64_t i = 0; i < n; ++i) py[i] += ps[sum->ElementOffset(i)];
      }
    }
    ApplyPosts(py, n);
    return ToChannelsLast(&y);
  }

 private:
  void ApplyPosts(float* p, int64_t n) const {
    for (const Post& post : {first_, second_}) {
      if (post.act == Act::kNone) continue;
      for (int64_t i = 0; i < n; ++i) p[i] = Apply(post.act, p[i], post.alpha, post.beta);
    }
  }

  // Rewrites the plain f32 `y` channels-last in place when "channels_last_out" says so.
  absl::Status ToChannelsLast(Tensor* y) const {
    if (!blocked_.out) return absl::OkStatus();
    if (y->rank() < 3) {
      return absl::InvalidArgumentError("FusedConv: a channels-last Y must be [N, C, ...]");
    }
    float* py = y->data<float>();
    const int64_t n = y->numel(), yc = y->dim(1);
    const int64_t ys = yc == 0 || y->dim(0) == 0 ? 0 : n / (y->dim(0) * yc);
    const std::vector<float> plain(py, py + n);
    for (int64_t i = 0; i < n; ++i) py[BlockedOffset(i, yc, ys)] = plain[i];
    return absl::OkStatus();
  }

  std::unique_ptr<Kernel> conv_;
  Post first_, second_;
  Blocked blocked_;
  Depthwise dw_;
};

absl::StatusOr<Act> ParseAct(const std::string& name) {
  Act act = Act::kNone;
  if (name == "Relu") {
    act = Act::kRelu;
  } else if (name == "LeakyRelu") {
    act = Act::kLeakyRelu;
  } else if (name == "Clip") {
    act = Act::kClip;
  } else if (name == "Sigmoid") {
    act = Act::kSigmoid;
  } else if (name == "HardSwish") {
    act = Act::kHardSwish;
  } else if (name == "SiLU") {
    act = Act::kSiLU;
  } else if (name == "Tanh") {
    act = Act::kTanh;
  } else if (name == "Affine") {
    act = Act::kAffine;
  } else if (!name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("FusedConv: unknown activation '", name, "'"));
  }
  return act;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateFusedConv(const KernelSpec& spec) {
  if (spec.inputs.size() < 2 || spec.inputs.size() > 6 || spec.inputs.size() == 5 ||
      spec.outputs.size() != 1) {
    return absl::InvalidArgumentError("FusedConv takes 2..4 or 6 inputs and has 1 output");
  }
  if (spec.inputs[0].dtype != static_cast<uint8_t>(DType::kF32)) {
    return absl::UnimplementedError("FusedConv: f32 only");
  }
  DYNVM_ASSIGN_OR_RETURN(std::string name, spec.GetString("activation", ""));
  DYNVM_ASSIGN_OR_RETURN(float alpha, spec.GetFloat("activation_alpha", 0.0f));
  DYNVM_ASSIGN_OR_RETURN(float beta, spec.GetFloat("activation_beta", 0.0f));
  DYNVM_ASSIGN_OR_RETURN(Act act, ParseAct(name));
  FusedConvKernel::Post second;
  DYNVM_ASSIGN_OR_RETURN(std::string name2, spec.GetString("activation2", ""));
  DYNVM_ASSIGN_OR_RETURN(second.act, ParseAct(name2));
  DYNVM_ASSIGN_OR_RETURN(second.alpha, spec.GetFloat("activation2_alpha", 0.0f));
  DYNVM_ASSIGN_OR_RETURN(second.beta, spec.GetFloat("activation2_beta", 0.0f));
  Depthwise dw;
  if (spec.inputs.size() == 6) {
    dw.present = true;
    DYNVM_ASSIGN_OR_RETURN(std::string dw_name, spec.GetString("dw_activation", ""));
    DYNVM_ASSIGN_OR_RETURN(dw.act, ParseAct(dw_name));
    DYNVM_ASSIGN_OR_RETURN(dw.alpha, spec.GetFloat("dw_activation_alpha", 0.0f));
    DYNVM_ASSIGN_OR_RETURN(dw.beta, spec.GetFloat("dw_activation_beta", 0.0f));
    DYNVM_ASSIGN_OR_RETURN(dw.stride, spec.GetInt("dw_stride", 1));
    if (dw.stride != 1 && dw.stride != 2) {
      return absl::InvalidArgumentError("FusedConv: dw_stride must be 1 or 2");
    }
  }
  Blocked blocked;
  DYNVM_ASSIGN_OR_RETURN(int64_t bi, spec.GetInt("channels_last_in", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t bs, spec.GetInt("channels_last_sum", 0));
  DYNVM_ASSIGN_OR_RETURN(int64_t bo, spec.GetInt("channels_last_out", 0));
  blocked = {bi != 0, bs != 0, bo != 0};
  KernelSpec conv = spec;
  conv.op = "Conv";
  conv.domain = "";
  conv.inputs.resize(std::min<size_t>(spec.inputs.size(), 3));
  for (const char* a : {"activation", "activation_alpha", "activation_beta", "constant_weights",
                        "channels_last_in", "channels_last_sum", "channels_last_out", "dw_stride",
                        "dw_activation", "dw_activation_alpha", "dw_activation_beta", "activation2",
                        "activation2_alpha", "activation2_beta"}) {
    conv.attrs.erase(a);
  }
  conv.backend = "reference";
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> k,
                         KernelRegistry::Global().Create(conv, BackendPolicy{{"reference"}}));
  return std::make_unique<FusedConvKernel>(std::move(k), FusedConvKernel::Post{act, alpha, beta},
                                           second, blocked, dw);
}

}  // namespace

void RegisterFusedConvKernels(KernelRegistry& r) {
  r.Register(
      {"dynvm", "FusedConv", Device::kCPU, "reference", kReferencePriority, &CreateFusedConv});
}

}  // namespace dynvm::reference
