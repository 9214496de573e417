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
// A Linear with an activation, a constant W (attribute constant_weights = 1, set by the
// compiler for a weight of the executable's constant segment) runs dynvm's packed GEMM
// (kernels/cpu/packed_gemm.h) where choice.h's measured rule takes the shape: W is packed once,
// on first use, into a copy shared by every VM that runs the kernel, and the bias and activation
// run on each block of Y while it is in cache. Without an activation dnnl_sgemm stays.
// DYNVM_DNNL_PACKED_GEMM=0 turns the packed GEMM off (A/B).
//
// Tuning notes (moved here from docs/kernels.md with the code's move to kernels/cpu/; the
// figures are those of the records named):
//
// - The packed GEMM (kernels/cpu/packed_gemm.{h,cc}): a dynvm::Linear with an activation, a
//   constant W (the compiler sets constant_weights = 1 on every Linear whose weight is a constant
//   of the executable, after the last folding) and the rows choice::UsePackedGemm takes runs
//   dynvm's own GEMM: at least 8 rows of X at the avx2 level (the notes below, measured on an
//   AVX2-only EPYC), 16 to 128 rows at avx512 (a micro-kernel of up to 24x16 there; oneDNN's
//   AVX-512 GEMM is faster at 8 rows and as fast past 128: docs/kernels.md, "Microkernel or
//   oneDNN", measured on a Zen 4 EPYC). W is packed
//   once, at its first run, into panels of 16 columns ([N/16][K][16], zeros past N), a copy shared
//   by every VM and thread that runs the kernel (a cache keyed by the weight's address and
//   geometry, at most 4 GiB; past that the Linear runs dnnl_sgemm). The copies are host memory of
//   the kernel, outside the VMs' pools (as the conv weights' packed copies are), as large as the
//   weights they copy; the original weights stay in the constant segment. X is packed per block of
//   rows (tiles of 6 rows interleaved, [K][6]; a per-thread buffer of up to 192 x K floats that
//   grows to the largest K seen and stays); a 6x16 AVX2 micro-kernel (12 accumulators, two panel
//   loads and six broadcasts per step) runs over blocks of at most 192 rows (equal blocks: each
//   reads all of packed W once), 128 columns and 256 of K, and the bias and activation run on each
//   rows x 128-column block of Y right after its last K block, while it is in L1/L2. With
//   dnnl_sgemm the epilogue read Y back after the whole product: a [128, 1024] GELU layer's Y is
//   512 KiB, past L2, so that pass went to L3 and took about 40% of the layer. At more than one
//   thread the rows split over the pool in multiples of 6. Linears without an activation keep
//   dnnl_sgemm: with the packed GEMM too, the no-activation layers of the encoders' graphs (QKV,
//   the second FFN product) took 0.84-1.42x dnnl_sgemm's time, no consistent gain (three
//   interleaved runs, 1 thread), and a bias alone is a cheap pass. DYNVM_DNNL_PACKED_GEMM=0 turns
//   it off (packed_gemm::Enabled(), for A/B). Measured with tools/bench/linear_packed_ab.py (1
//   thread, interleaved off/on, fastest of 5 rounds;
//   [results/avx2-linear-packed-ab-2026-11-28.txt](results/avx2-linear-packed-ab-2026-11-28.txt)):
//   the BERT-like model's [128, 256] x [256, 1024] GELU layer 1861 -> 1031 us (1.81x), the model at
//   1x128 1.24x, the classifier at 1x128 1.16x; at batch 8 x 64 (M = 512) 1.01-1.05x. Tried for
//   dynvm::Attention's per-unit products too (K and V packed once per unit): 0.75-0.94x dnnl_sgemm
//   there (blocks of 32 queries against 64-128 keys: packing the block's rows costs more than the
//   call overhead it saves), so attention keeps dnnl_sgemm. kernels_dnnl_packed_gemm_test checks
//   the product against a double-precision sum within the FMA rounding bound (row tails, ragged
//   panels, K across blocks, row sub-ranges, both weight layouts, the epilogue seeing each element
//   once after its last K block) and the Linear against the reference kernel at 1 and 2 threads,
//   one kernel object running two weights in turn. Weights are read in place in their plain layout,
//   row-major or transposed through strides; an operand no form addresses (a broadcast view) is
//   packed into the site's workspace.
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

// Rows [i0, i1) of the product on packed W, the epilogue on each block.
void RunPacked(const Product& p, const float* packed, int64_t i0, int64_t i1) {
  cpu::packed_gemm::Multiply(i0, i1, p.n, p.k, p.x, p.k, packed, p.y, p.n,
                             [&](int64_t r0, int64_t rows, int64_t j0, int64_t cols) {
                               BiasActivation(p.act, rows, cols,
                                              p.bias == nullptr ? nullptr : p.bias + j0,
                                              p.y + r0 * p.n + j0, p.n);
                             });
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
    if (w.rank() != 2 || (w.stride(1) != 1 && w.dim(1) != 1) ||
        (b != nullptr && !b->is_contiguous())) {
      return RunFallback(ctx, in, out);  // checks the shapes too
    }
    DYNVM_ASSIGN_OR_RETURN(reference::LinearGeometry g,
                           reference::PrepareLinear(attrs_, ctx, in, out));
    Tensor& y = *out[0];
    if (y.numel() == 0) return absl::OkStatus();
    const int64_t ldw = w.dim(0) == 1 ? std::max<int64_t>(w.dim(1), 1) : w.stride(0);
    if (ldw < std::max<int64_t>(w.dim(1), 1)) return RunFallback(ctx, in, out);
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
    if (constant_weights_ && p.act != LinearAct::kNone && choice::UsePackedGemm(p.m, p.n, p.k)) {
      if (const float* packed = packed_.Get(p.trans_w, p.k, p.n, p.w, p.ldw)) {
        ComputePacked(ctx, p, packed);
        return absl::OkStatus();
      }
    }
    return Compute(ctx, p);
  }

 private:
  // Rows split over the pool in multiples of the micro-kernel's 6 (each range reads all of
  // packed W: the row blocks of one range reuse it from L2).
  static void ComputePacked(const KernelContext& ctx, const Product& p, const float* packed) {
    const int threads = ctx.num_threads();
    if (threads == 1 || p.m * p.n * p.k < kMinParallelGemm || p.m < 12) {
      RunPacked(p, packed, 0, p.m);
      return;
    }
    const int64_t grain = std::max<int64_t>(6, (p.m / threads + 5) / 6 * 6);
    ctx.ParallelFor(p.m, grain, [&](int64_t i0, int64_t i1) { RunPacked(p, packed, i0, i1); });
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
  return std::make_unique<LinearKernel>(KernelName(spec, "sgemm"), attrs, constant_weights == 1);
}

}  // namespace

void RegisterLinearKernels(KernelRegistry& r) {
  r.Register(
      KernelRegistration{"dynvm", "Linear", Device::kCPU, kBackend, kDnnlPriority, &CreateLinear});
}

}  // namespace dynvm::onednn
