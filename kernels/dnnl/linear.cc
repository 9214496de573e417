// dynvm::Linear (definition in kernels/reference/linear.h): Y = act(X W + B), a linear layer
// with its bias and activation in one kernel.
//
// The product is dnnl_sgemm with W read in place (row-major [K, N], or [N, K] transposed by
// the call: the layout the exporter wrote, so no weight moves); bias and activation are then
// applied to each range of rows in one pass while it is still in cache (cpu::BiasActivationRows),
// instead of an Add and an activation kernel each reading and writing Y. M = 1 (a decode step)
// runs the GEMV microkernel (cpu::Gemv) like MatMul. At more than one thread, products of at least
// kMinParallelGemm multiply-adds split M's rows (N's columns when M is short, and the batch-1
// GEMV's columns) over the VM's pool, each range one single-threaded sgemm plus its epilogue.
// A strided X is packed into the site's workspace; a W or B oneDNN cannot address (not
// unit-stride along its rows) runs the reference kernel.
//
// A Linear whose W the compiler stored as the packed GEMM's panels (b_packed_n = N, the weight's
// only stored copy: compiler/transpose_weights.h) runs dynvm's packed GEMM
// (kernels/cpu/packed_gemm.h) at every row count: one row the GEMV on the panels
// (packed_gemm::MultiplyVector), more rows packed_gemm::Multiply with the bias and activation on
// each block of Y while it is in cache. Another Linear with a constant W (attribute
// constant_weights = 1, set by the compiler for a weight of the executable's constant segment),
// with or without an activation, runs the packed GEMM where choice.h's measured rule takes the
// rows: W is packed once, on first use, into a copy shared by every VM that runs the kernel.
// At more than one thread the packed GEMM splits by ranges of panels (columns) when every thread
// gets two or more, else by rows in multiples of 24. DYNVM_DNNL_PACKED_GEMM=0 turns the run-time
// copy off (A/B); vm-compile --disable-rewrite pack_weights the panels.
//
// Tuning notes (moved here from docs/kernels.md with the code's move to kernels/cpu/; the
// figures are those of the records named):
//
// - The packed GEMM (kernels/cpu/packed_gemm.{h,cc}) replaced dnnl_sgemm for constant weights
//   in two steps. s8 (AVX2-only EPYC, tools/bench/linear_packed_ab.py,
//   results/avx2-linear-packed-ab-2026-11-28.txt): Linears with an activation, the weight packed
//   at first run into a kernel-held copy; the BERT-like model's [128, 256] x [256, 1024] GELU
//   layer 1861 -> 1031 us (1.81x: with dnnl_sgemm the epilogue read a 512 KiB Y back from L3
//   after the whole product), the model at 1x128 1.24x, at batch 8 x 64 1.01-1.05x; Linears
//   without an activation then measured 0.84-1.42x dnnl_sgemm (no consistent gain) and kept it.
//   s9 (Zen 4 EPYC, docs/kernels.md "Microkernel or oneDNN", the transformer shapes of
//   torchvision's ViT, Swin and ConvNeXt, 1 to 3136 rows, 1 and 2 threads, AVX-512 and AVX2,
//   weights cold): with the AVX-512 two-panel kernel (12 rows x 32 columns), the 1-23-row tails
//   computed exactly, software prefetch of the panels for products of few rows and K in blocks
//   of 1024 up to 192 rows, the packed GEMM runs with or without an activation (a product of 17
//   rows x 768 x 2304: 1.6-3x dnnl_sgemm, which repacks W on every call), so the compiler stores
//   a Linear's constant weight as the panels (one copy) and the run-time copy is the fallback for
//   weights it leaves plain. Tried for dynvm::Attention's per-unit products too (K and V packed
//   once per unit): 0.75-0.94x dnnl_sgemm there (blocks of 32 queries against 64-128 keys:
//   packing the block's rows costs more than the call overhead it saves), so attention keeps
//   dnnl_sgemm. kernels_dnnl_packed_gemm_test checks the Linear on panels and on the run-time
//   copy against a double-precision sum and the reference kernel (row tails, batch dims, ragged
//   panels, K across blocks, with and without bias and activation, one row, 1 and 2 threads,
//   every level). An operand no form addresses (a broadcast view) is packed into the site's
//   workspace.
// - s10 (large row counts; docs/kernels.md "The packed GEMM"): A copied by rows instead of a
//   scalar transpose, the next row block's A prefetched by the micro-kernels, and at more than
//   one thread a split by rows when every thread gets a whole row block (SplitRows): at 512-6272
//   rows 0.92-1.07x dnnl_sgemm at 1 thread (was 0.73-1.14x at 1024 and 3136),
//   results/packed-gemm-large-m-s10-2026-11-30.txt.
#include "kernels/reference/linear.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "common/status_macros.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/dnnl/choice.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/dnnl/parallel_loops.h"

namespace dynvm::onednn {
namespace {

using reference::LinearAct;
using reference::LinearAttrs;

// The epilogue's activation as the microkernel's.
cpu::Activation CpuActivation(LinearAct act) {
  switch (act) {
    case LinearAct::kNone:
      return cpu::Activation::kNone;
    case LinearAct::kRelu:
      return cpu::Activation::kRelu;
    case LinearAct::kTanh:
      return cpu::Activation::kTanh;
    case LinearAct::kSigmoid:
      return cpu::Activation::kSigmoid;
    case LinearAct::kGelu:
      return cpu::Activation::kGelu;
    case LinearAct::kGeluTanh:
      return cpu::Activation::kGeluTanh;
    case LinearAct::kSilu:
      return cpu::Activation::kSilu;
  }
  return cpu::Activation::kNone;
}

// Y[r, j] = act(Y[r, j] + bias[j]) over `rows` rows of n at row stride ldy (bias may be null).
void BiasActivation(LinearAct act, int64_t rows, int64_t n, const float* bias, float* y,
                    int64_t ldy) {
  cpu::BiasActivationRows(CpuActivation(act), rows, n, bias, y, ldy);
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
      cpu::Gemv(trans_w, cols, k, 1.0f, x + i0 * k, wj, ldw, 0.0f, yij);
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
// K's block on the packed path (packed_gemm::Multiply's depth), by the product's rows: up to one
// row block (kRowBlock: each panel read once whatever the depth) kDeepDepth, fewer passes of the
// block sums through Y; more rows kDepth, a panel's block in L1 for every row block (on the Zen 4
// EPYC, 1 thread, [3136, 768] x [768, 3072] with AVX2: 0.84x dnnl_sgemm at kDeepDepth, 0.97x at
// kDepth; at 17 rows kDeepDepth 1.3x kDepth). One depth per row count: an output's summation
// order does not depend on the thread count.
int64_t PackedDepth(int64_t m) {
  return m <= cpu::packed_gemm::kRowBlock ? cpu::packed_gemm::kDeepDepth : cpu::packed_gemm::kDepth;
}
constexpr int64_t kColGrain = 16;

// Packed copies of constant weights, keyed by the weight's address and geometry (the constant
// segment outlives the kernel and never changes). Shared by every VM running the kernel.
class PackedWeights {
 public:
  // The packed W, packing it on first use; nullptr when the cache holds kMaxBytes already (the
  // caller runs dnnl_sgemm) or the allocation fails.
  const float* Get(char trans, int64_t k, int64_t n, const float* w, int64_t ldw) const {
    const Key key{w, trans, k, n, ldw};
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = packed_.find(key); it != packed_.end()) return it->second.get();
    const size_t bytes = static_cast<size_t>(cpu::packed_gemm::PackedFloats(k, n)) * sizeof(float);
    if (bytes_ + bytes > kMaxBytes) return nullptr;
    std::unique_ptr<float, Free> p(
        static_cast<float*>(std::aligned_alloc(64, (bytes + 63) & ~size_t{63})));
    if (p == nullptr) return nullptr;
    cpu::packed_gemm::Pack(trans, k, n, w, ldw, p.get());
    bytes_ += bytes;
    return packed_.emplace(key, std::move(p)).first->second.get();
  }

 private:
  static constexpr size_t kMaxBytes = size_t{4} << 30;
  struct Key {
    const float* w;
    char trans;
    int64_t k, n, ldw;
    bool operator==(const Key& o) const {
      return w == o.w && trans == o.trans && k == o.k && n == o.n && ldw == o.ldw;
    }
    template <typename H>
    friend H AbslHashValue(H h, const Key& key) {
      return H::combine(std::move(h), key.w, key.trans, key.k, key.n, key.ldw);
    }
  };
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  mutable std::mutex mu_;
  mutable absl::flat_hash_map<Key, std::unique_ptr<float, Free>> packed_ ABSL_GUARDED_BY(mu_);
  mutable size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Rows [i0, i1) x panels [p0, p1) of the product on packed W, the epilogue on each block. One
// row: the GEMV on the panels (packed_gemm::MultiplyVector), then the epilogue on its columns.
void RunPacked(const Product& p, const float* packed, int64_t i0, int64_t i1, int64_t p0,
               int64_t p1) {
  using cpu::packed_gemm::kPanel;
  const int64_t j0 = p0 * kPanel, cols = std::min(p.n, p1 * kPanel) - j0;
  if (cols <= 0 || i0 >= i1) return;
  const float* bias = p.bias == nullptr ? nullptr : p.bias + j0;
  if (p.m == 1) {
    cpu::packed_gemm::MultiplyVector(p0, p1, p.n, p.k, p.x, packed, p.y);
    BiasActivation(p.act, 1, cols, bias, p.y + j0, p.n);
    return;
  }
  cpu::packed_gemm::Multiply(
      i0, i1, cols, p.k, p.x, p.k, packed + j0 * p.k, p.y + j0, p.n,
      [&](int64_t r0, int64_t rows, int64_t c0, int64_t n) {
        BiasActivation(p.act, rows, n, bias == nullptr ? nullptr : bias + c0,
                       p.y + r0 * p.n + j0 + c0, p.n);
      },
      PackedDepth(p.m));
}

class LinearKernel final : public DnnlKernel {
 public:
  LinearKernel(std::string name, LinearAttrs attrs, bool constant_weights)
      : DnnlKernel(std::move(name)), attrs_(attrs), constant_weights_(constant_weights) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, "Linear"));
    const Tensor& x = *in[0];
    const Tensor& w = *in[1];
    const Tensor* b = in.size() > 2 ? in[2] : nullptr;
    const bool panels = attrs_.packed_n >= 0;  // W is the packed GEMM's panels (b_packed_n)
    if (b != nullptr && !b->is_contiguous()) return RunFallback(ctx, in, out);
    if (panels ? !w.is_contiguous() : w.rank() != 2 || (w.stride(1) != 1 && w.dim(1) != 1)) {
      return RunFallback(ctx, in, out);  // checks the shapes too
    }
    DYNVM_ASSIGN_OR_RETURN(reference::LinearGeometry g,
                           reference::PrepareLinear(attrs_, ctx, in, out));
    Tensor& y = *out[0];
    if (y.numel() == 0) return absl::OkStatus();
    const int64_t ldw = panels || w.dim(0) == 1 ? std::max<int64_t>(w.dim(1), 1) : w.stride(0);
    if (!panels && ldw < std::max<int64_t>(w.dim(1), 1)) return RunFallback(ctx, in, out);
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
    if (panels) {  // the weight's only stored form: the packed GEMM at every row count
      ComputePacked(ctx, p, w.data<float>());
      return absl::OkStatus();
    }
    if (constant_weights_ && choice::UsePackedGemm(p.m, p.n, p.k)) {
      if (const float* packed = packed_.Get(p.trans_w, p.k, p.n, p.w, p.ldw)) {
        ComputePacked(ctx, p, packed);
        return absl::OkStatus();
      }
    }
    return Compute(ctx, p);
  }

 private:
  // Split over the pool by rows when every thread gets a whole row block or more
  // (packed_gemm::kRowBlock): each thread packs only its rows, and reads all of packed W once
  // per row block as one thread would (cpu::packed_gemm::SplitRows). Fewer rows: by ranges of
  // panels (columns) when each thread gets two panels or more: each thread then reads only its
  // share of packed W (with rows split every thread would read all of it, twice the weight
  // traffic of a product of few rows, whose time is that read) and packs all of X (M K copies
  // against M K N / threads multiply-adds). Fewer panels: rows split in multiples of the
  // AVX-512 micro-kernel's 24.
  static void ComputePacked(const KernelContext& ctx, const Product& p, const float* packed) {
    using cpu::packed_gemm::kPanel;
    const int threads = ctx.num_threads();
    const int64_t panels = (p.n + kPanel - 1) / kPanel;
    const bool split = threads > 1 && (p.m == 1 ? p.n * p.k >= kMinParallelGemv
                                                : p.m * p.n * p.k >= kMinParallelGemm);
    if (!split) {
      RunPacked(p, packed, 0, p.m, 0, panels);
      return;
    }
    if (p.m == 1 || (!cpu::packed_gemm::SplitRows(p.m, threads) && panels >= 2 * threads)) {
      ctx.ParallelFor(panels, (panels + threads - 1) / threads,
                      [&](int64_t p0, int64_t p1) { RunPacked(p, packed, 0, p.m, p0, p1); });
      return;
    }
    const int64_t grain = std::max<int64_t>(24, (p.m / threads + 23) / 24 * 24);
    ctx.ParallelFor(p.m, grain,
                    [&](int64_t i0, int64_t i1) { RunPacked(p, packed, i0, i1, 0, panels); });
  }

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
    if (p.m == 1 && !choice::UseGemv(p.n, p.k, 1)) {
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
  bool constant_weights_;
  PackedWeights packed_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateLinear(const KernelSpec& spec) {
  DYNVM_ASSIGN_OR_RETURN(LinearAttrs attrs, reference::GetLinearAttrs(spec));
  DYNVM_ASSIGN_OR_RETURN(const int64_t constant_weights, spec.GetInt("constant_weights", 0));
  return std::make_unique<LinearKernel>(KernelName(spec, attrs.packed_n >= 0 ? "packed" : "sgemm"),
                                        attrs, constant_weights == 1);
}

}  // namespace

void RegisterLinearKernels(KernelRegistry& r) {
  r.Register(
      KernelRegistration{"dynvm", "Linear", Device::kCPU, kBackend, kDnnlPriority, &CreateLinear});
}

}  // namespace dynvm::onednn
