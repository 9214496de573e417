// dynvm::Linear (definition in kernels/reference/linear.h): Y = act(X W + B), a linear layer
// with its bias and activation in one kernel.
//
// The product is dnnl_sgemm with W read in place (row-major [K, N], or [N, K] transposed by
// the call: the layout the exporter wrote, so no weight moves); bias and activation are then
// applied to each range of rows in one pass while it is still in cache (BiasActivation), instead
// of an Add and an activation kernel each reading and writing Y. M = 1 (a decode step) runs the
// GEMV loop (vector_loops.h) like MatMul. At more than one thread, products of at least
// kMinParallelGemm multiply-adds split M's rows (N's columns when M is short, and the batch-1
// GEMV's columns) over the VM's pool, each range one single-threaded sgemm plus its epilogue.
// A strided X is packed into the site's workspace; a W or B oneDNN cannot address (not
// unit-stride along its rows) runs the reference kernel.
#include "kernels/reference/linear.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "common/status_macros.h"
#include "kernels/dnnl/clones.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/fast_math.h"
#include "kernels/dnnl/vector_loops.h"

namespace dynvm::onednn {
namespace {

using reference::LinearAct;
using reference::LinearAttrs;

DYNVM_CLONES void AddBias(int64_t n, const float* b, float* y) {
  for (int64_t j = 0; j < n; ++j) y[j] += b[j];
}

DYNVM_CLONES void ReluRow(int64_t n, float* y) {
  for (int64_t j = 0; j < n; ++j) y[j] = y[j] > 0.0f ? y[j] : (y[j] != y[j] ? y[j] : 0.0f);
}

DYNVM_CLONES void TanhRow(int64_t n, float* y) {
  for (int64_t j = 0; j < n; ++j) {
    const float v = y[j];
    const float r = FastTanh(v);
    y[j] = v != v ? v : r;
  }
}

DYNVM_CLONES void SigmoidRow(int64_t n, float* y) {
  for (int64_t j = 0; j < n; ++j) {
    const float v = y[j];
    const float r = FastSigmoid(v);
    y[j] = v != v ? v : r;
  }
}

DYNVM_CLONES void SiluRow(int64_t n, float* y) {
  for (int64_t j = 0; j < n; ++j) {
    const float v = y[j];
    const float r = v * FastSigmoid(v);
    y[j] = v != v ? v : r;
  }
}

DYNVM_CLONES void GeluTanhRow(int64_t n, float* y) {
  for (int64_t j = 0; j < n; ++j) {
    const float v = y[j];
    const float t = FastTanh(0.7978845608028654f * (v + 0.044715f * v * v * v));
    const float r = 0.5f * v * (1.0f + t);
    y[j] = v != v ? v : r;
  }
}

void GeluRow(int64_t n, float* y) { GeluErfArray(n, y, y); }

// Y[r, j] = act(Y[r, j] + bias[j]) over `rows` rows of n at row stride ldy (bias may be null).
void BiasActivation(LinearAct act, int64_t rows, int64_t n, const float* bias, float* y,
                    int64_t ldy) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * ldy;
    if (bias != nullptr) AddBias(n, bias, row);
    switch (act) {
      case LinearAct::kNone:
        break;
      case LinearAct::kRelu:
        ReluRow(n, row);
        break;
      case LinearAct::kTanh:
        TanhRow(n, row);
        break;
      case LinearAct::kSigmoid:
        SigmoidRow(n, row);
        break;
      case LinearAct::kGelu:
        GeluRow(n, row);
        break;
      case LinearAct::kGeluTanh:
        GeluTanhRow(n, row);
        break;
      case LinearAct::kSilu:
        SiluRow(n, row);
        break;
    }
  }
}

// The product of rows [i0, i1) and columns [j0, j1) on this thread only, then its epilogue.
struct Product {
  LinearAct act;
  int64_t m, n, k;
  const float* x;  // [m, k] row-major
  char trans_w;    // 'N': w is [k, n]; 'T': w is [n, k]
  const float* w;
  int64_t ldw;
  const float* bias;  // null: none
  float* y;           // [m, n]

  dnnl_status_t Run(int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    const int64_t rows = i1 - i0, cols = j1 - j0;
    const float* wj = trans_w == 'N' ? w + j0 : w + j0 * ldw;
    float* yij = y + i0 * n + j0;
    if (rows == 1) {
      Gemv(trans_w, cols, k, 1.0f, x + i0 * k, wj, ldw, 0.0f, yij);
    } else {
      const dnnl_status_t s =
          dnnl_sgemm('N', trans_w, rows, cols, k, 1.0f, x + i0 * k, k, wj, ldw, 0.0f, yij, n);
      if (s != dnnl_success) return s;
    }
    BiasActivation(act, rows, cols, bias == nullptr ? nullptr : bias + j0, yij, n);
    return dnnl_success;
  }
};

constexpr int64_t kRowGrain = 8;
constexpr int64_t kColGrain = 16;

class LinearKernel final : public DnnlKernel {
 public:
  LinearKernel(std::string name, std::unique_ptr<Kernel> reference, LinearAttrs attrs)
      : DnnlKernel(std::move(name), std::move(reference)), attrs_(attrs) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, "Linear"));
    const Tensor& x = *in[0];
    const Tensor& w = *in[1];
    const Tensor* b = in.size() > 2 ? in[2] : nullptr;
    if (w.rank() != 2 || (w.stride(1) != 1 && w.dim(1) != 1) ||
        (b != nullptr && !b->is_contiguous())) {
      return RunReference(ctx, in, out);  // checks the shapes too
    }
    DYNVM_ASSIGN_OR_RETURN(reference::LinearGeometry g,
                           reference::PrepareLinear(attrs_, ctx, in, out));
    Tensor& y = *out[0];
    if (y.numel() == 0) return absl::OkStatus();
    const int64_t ldw = w.dim(0) == 1 ? std::max<int64_t>(w.dim(1), 1) : w.stride(0);
    if (ldw < std::max<int64_t>(w.dim(1), 1)) return RunReference(ctx, in, out);
    Product p{attrs_.act,
              g.m,
              g.n,
              g.k,
              x.data<float>(),
              attrs_.trans_b ? 'T' : 'N',
              w.data<float>(),
              ldw,
              b == nullptr ? nullptr : b->data<float>(),
              y.data<float>()};
    if (g.k == 0) {
      std::memset(p.y, 0, static_cast<size_t>(y.nbytes()));
      BiasActivation(p.act, g.m, g.n, p.bias, p.y, g.n);
      return absl::OkStatus();
    }
    if (!x.is_contiguous()) {  // a strided view: packed (the ordinary X is contiguous)
      DYNVM_ASSIGN_OR_RETURN(void* ws,
                             ctx.Workspace(static_cast<size_t>(x.numel()) * sizeof(float)));
      float* packed = static_cast<float*>(ws);
      const float* src = x.data<float>();
      for (int64_t i = 0; i < x.numel(); ++i) packed[i] = src[x.ElementOffset(i)];
      p.x = packed;
    }
    return Compute(ctx, p);
  }

 private:
  static absl::Status Compute(const KernelContext& ctx, const Product& p) {
    const int threads = ctx.num_threads();
    const int64_t work = p.m * p.n * p.k;
    if (threads > 1 && (p.m == 1 ? p.n * p.k >= kMinParallelGemv : work >= kMinParallelGemm)) {
      SetThreads(1);
      std::atomic<int> failed{dnnl_success};
      if (p.m > 1 && !SplitByColumns(p.m, p.n, threads, kRowGrain, kColGrain)) {
        ctx.ParallelFor(p.m, kRowGrain, [&](int64_t i0, int64_t i1) {
          SetThreads(1);
          const dnnl_status_t s = p.Run(i0, i1, 0, p.n);
          if (s != dnnl_success) failed.store(s, std::memory_order_relaxed);
        });
      } else {
        ctx.ParallelFor(p.n, p.m == 1 && p.trans_w == 'N' ? 64 : kColGrain,
                        [&](int64_t j0, int64_t j1) {
                          SetThreads(1);
                          const dnnl_status_t s = p.Run(0, p.m, j0, j1);
                          if (s != dnnl_success) failed.store(s, std::memory_order_relaxed);
                        });
      }
      return FromDnnl(static_cast<dnnl_status_t>(failed.load()), "dnnl_sgemm");
    }
    SetThreads(ThreadsFor(threads, work));
    if (p.m == 1 && p.n * p.k >= kMinParallelWork) {
      // A large decode-step product: oneDNN's GEMV, as MatMul runs it.
      DYNVM_RETURN_IF_ERROR(FromDnnl(
          dnnl_sgemm('N', p.trans_w, 1, p.n, p.k, 1.0f, p.x, p.k, p.w, p.ldw, 0.0f, p.y, p.n),
          "dnnl_sgemm"));
      BiasActivation(p.act, 1, p.n, p.bias, p.y, p.n);
      return absl::OkStatus();
    }
    return FromDnnl(p.Run(0, p.m, 0, p.n), "dnnl_sgemm");
  }

  LinearAttrs attrs_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateLinear(const KernelSpec& spec) {
  DYNVM_ASSIGN_OR_RETURN(LinearAttrs attrs, reference::GetLinearAttrs(spec));
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> ref, CreateReference(spec));
  return std::make_unique<LinearKernel>(KernelName(spec, "sgemm"), std::move(ref), attrs);
}

}  // namespace

void RegisterLinearKernels(KernelRegistry& r) {
  r.Register(
      KernelRegistration{"dynvm", "Linear", Device::kCPU, kBackend, kDnnlPriority, &CreateLinear});
}

}  // namespace dynvm::onednn
