// Shared machinery of the oneDNN CPU backend (docs/kernels.md, "oneDNN backend"): the one
// place where oneDNN errors become absl::Status, the CPU engine, memory descriptors of strided
// tensors, per-invoke-site primitive binding with a user scratchpad, and the base of the oneDNN
// kernels, which hand what oneDNN cannot do at run time to the registry's next backend (the
// reference kernel). Internal.
//
// Error translation: the oneDNN C++ API throws dnnl::error. Every call into it is made inside
// Guard(), which catches and converts; no exception leaves this backend. Execution uses the C
// API (dnnl_primitive_execute), which returns a status.
//
// Threads: oneDNN's CPU runtime in Debian's build is OpenMP. SetThreads() sets the calling
// thread's OpenMP thread count (the VM's intra-op budget, ctx.num_threads()) before a kernel
// runs; primitives bake the thread count in when they are created, so it is part of every
// site's shape key.
#ifndef DYNVM_KERNELS_DNNL_COMMON_H_
#define DYNVM_KERNELS_DNNL_COMMON_H_

#include <atomic>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/fallback_kernel.h"
#include "kernels/kernel.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace dynvm::onednn {

inline constexpr int kDnnlPriority = 10;
// A second oneDNN-backend kernel for an op (the im2col integer convolution), after the first in
// the registry's chain: the first one's fallback, with the reference kernel after it.
inline constexpr int kDnnlSecondPriority = 5;
inline constexpr const char* kBackend = "dnnl";

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;

// A oneDNN status as an absl::Status: out of memory is ResourceExhausted; a shape or
// attribute oneDNN does not implement (unimplemented, invalid arguments) is Unimplemented, so
// callers fall back to the next backend; anything else is Internal.
absl::Status FromDnnl(dnnl_status_t status, absl::string_view what);

// Runs `fn` (returning absl::Status) and turns any exception it throws into a Status.
template <typename Fn>
absl::Status Guard(absl::string_view what, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    return FromDnnl(e.status, absl::StrCat(what, ": ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of memory"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(what, ": unknown exception"));
  }
}

// The process-wide CPU engine (created on first use, never destroyed).
absl::StatusOr<const dnnl::engine*> CpuEngine();

// Sets the calling thread's OpenMP thread count; cheap when unchanged.
void SetThreads(int n);

// How a product C[M, N] = A[M, K] B[K, N] split across `threads` ranges of one single-threaded
// sgemm each is cut: true for ranges of N's columns, false for ranges of M's rows. Each range's
// sgemm packs the operand it reads whole (B for a row range, A for a column range), so the cut
// goes along the larger of M and N (the smaller operand is the one packed twice); M with fewer
// than two row grains per thread is cut by columns, N with fewer than two column grains by rows.
bool SplitByColumns(int64_t m, int64_t n, int threads, int64_t row_grain, int64_t col_grain);

// Work below this (multiply-adds of a GEMM, elements of an elementwise op) runs on one thread
// whatever the thread budget: an OpenMP fork and join costs microseconds on an idle machine,
// and on a busy one waits for the other thread to be scheduled (a time slice, milliseconds),
// far more than the work (~100 us on one core at this size). A decode step's GEMVs and a short
// prompt's projections are below it: measured on the 2-core development machine under load, a
// single 2-thread GEMM per LSTM decode (a 4-token prompt, 1M multiply-adds) halved its tokens/s
// (docs/benchmarks.md).
inline constexpr int64_t kMinParallelWork = int64_t{1} << 22;

// The thread count for `work`: 1 below kMinParallelWork, else the context's budget.
inline int ThreadsFor(int budget, int64_t work) { return work < kMinParallelWork ? 1 : budget; }

// MatMul / Gemm products (M >= 2, or batched) of at least this many multiply-adds, at more than
// one thread, run on the VM's pool (ctx.ParallelFor), not oneDNN's OpenMP: M's rows (or N's
// columns when M is short, or the batch's items) split into one range per thread, each range
// one dnnl_sgemm on its own thread with OpenMP count 1, so only one thread system is ever
// active. Provisional (docs/threads.md): a product this size takes several us on one core
// against the pool's 0.2 us fork/join.
inline constexpr int64_t kMinParallelGemm = int64_t{1} << 17;

// The oneDNN data type of a dtype, or nullopt.
std::optional<dnnl::memory::data_type> DnnlType(DType dtype);

// A plain memory descriptor for dims/strides in elements. Rank 0 becomes [1]. Strides of
// size-1 dims are normalized (they never address anything), so equal views give equal
// descriptors. REQUIRES: no dim is 0; rank <= Tensor::kMaxRank.
dnnl::memory::desc PlainDesc(dnnl::memory::data_type type, absl::Span<const int64_t> dims,
                             absl::Span<const int64_t> strides);
dnnl::memory::desc TensorDesc(const Tensor& t);
// t's descriptor right-aligned to `rank` dims (leading dims of size 1). REQUIRES: rank >=
// t.rank().
dnnl::memory::desc AlignedDesc(const Tensor& t, int rank);
// Contiguous row-major descriptor.
dnnl::memory::desc DenseDesc(dnnl::memory::data_type type, absl::Span<const int64_t> dims);

// True when dims [from, to) of `t` are one run of memory with stride *stride (the innermost
// dim's stride); *size is their product. An empty range is size 1, stride 1.
bool Collapsible(const Tensor& t, int from, int to, int64_t* size, int64_t* stride);

// The shapes a site's bound primitive was made for: dims and strides of each operand plus a
// few extra values (thread count, attributes read at run time). Fixed capacity: building and
// comparing one allocates nothing.
class ShapeKey {
 public:
  void Add(const Tensor* t);
  void Add(int64_t v);
  void AddFloat(float v);
  bool operator==(const ShapeKey& other) const;
  bool operator!=(const ShapeKey& other) const { return !(*this == other); }

 private:
  static constexpr int kCapacity = 96;
  int64_t v_[kCapacity];
  int n_ = 0;
  bool overflow_ = false;  // an overflowed key never matches: the site rebuilds each run
};

// One oneDNN primitive bound for a site: the primitive, a memory object per execution
// argument (its data handle set at each run) and the size of its user scratchpad.
class BoundPrimitive {
 public:
  struct Arg {
    int id;  // DNNL_ARG_*
    dnnl::memory::desc desc;
  };

  // Creates the primitive of `pd` (made with scratchpad_mode::user). REQUIRES: inside Guard.
  void Bind(const dnnl::primitive_desc_base& pd, std::initializer_list<Arg> args);
  bool bound() const { return static_cast<bool>(primitive_); }
  size_t scratchpad_bytes() const { return scratchpad_bytes_; }

  // Runs it on `data` (one pointer per Bind argument, in order) with `scratchpad` holding
  // scratchpad_bytes(). Synchronous.
  absl::Status Execute(std::initializer_list<const void*> data, void* scratchpad) const;

  // Another handle on the same primitive with its own argument memories. Execute sets the
  // memories' data handles, so one handle runs on one thread at a time; handles of one primitive
  // run concurrently (each with its own scratchpad).
  BoundPrimitive Share() const;

 private:
  dnnl::primitive primitive_;
  std::vector<dnnl::memory> memories_;  // the arguments, then the scratchpad
  std::vector<dnnl_exec_arg_t> args_;
  size_t scratchpad_bytes_ = 0;
};

// Whether an f32 tensor holds a NaN / a NaN or an infinity. One vectorized pass over
// contiguous data. Some oneDNN 2.6 kernels drop NaN (relu, exp, clip, max/min, reductions to
// max/min) or resolve an infinity differently (softmax over a row holding +inf) where the
// reference kernels follow IEEE; those kernels check their inputs and let the reference
// kernel serve the rare run that has such values.
bool HasNaN(const Tensor& t);
bool HasNonFinite(const Tensor& t);

// A site whose shapes keep changing (a decoder's sequence growing every step) binds primitives
// for its first kMaxPrimitiveBinds shapes of each run; after that, shapes of at most
// kChurnMaxElements elements run the reference kernel (MatMul: dnnl_sgemm) until the run ends:
// binding a primitive (tens of microseconds) costs more than the loop at those sizes. Larger
// shapes still bind.
inline constexpr int kMaxPrimitiveBinds = 4;
inline constexpr int64_t kChurnMaxElements = int64_t{1} << 16;

// The shapes a site has seen in the current run (KernelContext::run_id). The first call of a
// run counts as a new shape whatever the site ran before, so the count, and the choice between
// a primitive and the loop made from it (whose results differ in the last bits), is a function
// of the run's inputs alone: the same input gives the same bits after any history
// (docs/determinism.md). Counting over the site's lifetime made the fifth shape a VM ever saw
// switch it to the loop for good, and an earlier input then gave other bits.
class ShapeCount {
 public:
  // Counts this call (a new shape unless `same_key`: the site's previous call in this run had
  // the same key); true while the run has seen at most kMaxPrimitiveBinds shapes.
  bool Allows(const KernelContext& ctx, bool same_key) {
    if (run_ != ctx.run_id()) {
      run_ = ctx.run_id();
      count_ = 0;
      same_key = false;
    }
    if (!same_key) ++count_;
    return count_ <= kMaxPrimitiveBinds;
  }
  int count() const { return count_; }

 private:
  int64_t run_ = -1;
  int count_ = 0;
};

// The state of a site served by one primitive.
struct PrimitiveState : KernelState {
  ShapeKey key;
  bool valid = false;
  bool use_fallback = false;  // oneDNN has no primitive for this site's shapes, or churn (below)
  bool churned = false;       // use_fallback because of kMaxPrimitiveBinds
  ShapeCount shapes;          // shapes this site has seen in the current run
  BoundPrimitive prim;
};

// Calls bind(engine) (which binds st->prim) unless the site's key and choice match, inside
// Guard. A descriptor oneDNN does not implement, or a small shape at a site that has seen too
// many in this run (ShapeCount), sends the site to the reference kernel (st->use_fallback).
// `elements`: the size of the work (the output's elements).
template <typename Bind>
absl::Status Rebind(const KernelContext& ctx, PrimitiveState* st, const ShapeKey& key,
                    int64_t elements, absl::string_view what, Bind&& bind) {
  const bool same_key = st->valid && st->key == key;
  const bool churn = !st->shapes.Allows(ctx, same_key) && elements <= kChurnMaxElements;
  if (same_key && churn == st->churned) return absl::OkStatus();
  st->valid = false;
  st->churned = churn;
  if (churn) {
    st->use_fallback = true;
    st->key = key;
    st->valid = true;
    return absl::OkStatus();
  }
  absl::StatusOr<const dnnl::engine*> engine = CpuEngine();
  if (!engine.ok()) return engine.status();
  absl::Status s = Guard(what, [&] {
    bind(**engine);
    return absl::OkStatus();
  });
  if (!s.ok() && !absl::IsUnimplemented(s)) return s;
  st->use_fallback = !s.ok();
  st->key = key;
  st->valid = true;
  return absl::OkStatus();
}

// Before oneDNN work on an OpenMP team (a primitive, dnnl_gemm_*): the VM pool's workers, spinning
// after the previous split kernel, park instead of competing with the team for the cores.
void ParkPoolForOpenMp(const KernelContext& ctx);

// Runs a bound primitive with its scratchpad taken from the site's workspace.
absl::Status ExecuteBound(KernelContext& ctx, const BoundPrimitive& prim,
                          std::initializer_list<const void*> data);

// The entries of oneDNN's process-wide primitive cache unless the environment says otherwise
// (common.cc, PrimitiveCacheCapacity): 128 bounded an encoder's host making a VM per call over
// 2,000 shapes at 170 MB of RSS for 10,000 calls (1024, oneDNN's default, reached 600 MB by
// 2,000 and kept growing); 0 disables the cache (every VM re-creates what it binds).
inline constexpr int kDefaultPrimitiveCacheCapacity = 128;
// The capacity CpuEngine() sets: DYNVM_DNNL_PRIMITIVE_CACHE_CAPACITY, else the default; -1
// when ONEDNN_PRIMITIVE_CACHE_CAPACITY is set (oneDNN applies it itself).
int PrimitiveCacheCapacity();

// Below this many elements a binary op (Add, Mul, ...) runs the reference loop: a primitive
// execute (~0.6 us) costs more than the loop there (dnnl_benchmark.cc, BM_Add). Unary ops with
// transcendental functions, Softmax and LayerNormalization win at every size (BM_Tanh,
// BM_Softmax, BM_LayerNorm) and have no threshold.
inline constexpr int64_t kMinBinaryElements = 4096;

// Primitive attributes every oneDNN kernel uses: the scratchpad comes from the VM's pool.
dnnl::primitive_attr UserScratchpadAttr();

// "op.dtype.dnnl[.variant]", e.g. "matmul.f32.dnnl.sgemm+brgemm".
std::string KernelName(const KernelSpec& spec, absl::string_view variant = "");

// The implementation of the quantized-weight microkernel a kernel of `spec` runs (its weight,
// input 1, is i8 or bf16): cpu::QGemvI8Path() or QGemvBf16Path(), for the kernel's name.
const char* QuantizedWeightPath(const KernelSpec& spec);

// Base of the oneDNN kernels: the name, and the fallback (the registry's next backend for the
// spec: the reference kernel) that serves a run oneDNN cannot do (a layout or broadcast it lacks,
// an empty dim). Such runs are counted (fallback_runs()), so tests and tools see how often the
// fallback stood in.
class DnnlKernel : public FallbackKernel {
 public:
  using FallbackKernel::FallbackKernel;
};

// The site's state of type T, created on first use.
template <typename T>
T* SiteState(KernelContext& ctx) {
  std::unique_ptr<KernelState>& s = ctx.state();
  if (s == nullptr) s = std::make_unique<T>();
  return static_cast<T*>(s.get());
}

// Create-time checks shared by the factories (and kernels/check.h's).
// Unimplemented unless every concrete data port of `spec` listed in `ports` is f32.
absl::Status RequireF32(const KernelSpec& spec, std::initializer_list<size_t> input_ports);

}  // namespace dynvm::onednn

#endif  // DYNVM_KERNELS_DNNL_COMMON_H_
