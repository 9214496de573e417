// Public API. The kernel interface: what a kernel sees of its kernel-table entry (KernelSpec),
// what it gets when it runs (KernelContext), and the Kernel itself.
//
// Lifecycle (docs/kernels.md):
//   create  -- once per kernel-table entry when an executable loads: the factory validates
//              attributes and dtypes and returns an immutable Kernel shared by every VM;
//   run     -- per invoke: destination-passing; inputs are read, preallocated outputs written.
//              Shape-dependent preparation (a bound oneDNN primitive, a workspace size) is cached
//              in the per-invoke-site KernelState, which lives in the VirtualMachine.
#ifndef DYNVM_KERNELS_KERNEL_H_
#define DYNVM_KERNELS_KERNEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "allocator/allocator.h"
#include "common/dtype.h"
#include "common/types.h"
#include "kernels/attr_value.h"
#include "kernels/tensor.h"
#include "kernels/thread_pool.h"

namespace dynvm {

// One operand slot of a kernel-table entry.
struct PortSpec {
  ObjectKind kind = ObjectKind::kTensor;
  uint8_t dtype = kAnyDType;  // a DType value, or kAnyDType
  bool optional = false;      // may be absent (nullptr at run time)
  bool dynamic = false;       // outputs: the kernel allocates it (ctx.AllocateOutput)
  DType dtype_or(DType d) const { return dtype == kAnyDType ? d : static_cast<DType>(dtype); }
};

// Everything a factory may look at. Immutable once built.
struct KernelSpec {
  std::string op;
  std::string domain;  // "" = ONNX default domain
  Device device = Device::kCPU;
  std::vector<PortSpec> inputs;
  std::vector<PortSpec> outputs;
  std::map<std::string, AttrValue, std::less<>> attrs;
  std::string backend;  // "" = any

  const AttrValue* Find(absl::string_view name) const;
  // Typed getters: the default when absent; InvalidArgument when present with another type.
  absl::StatusOr<int64_t> GetInt(absl::string_view name, int64_t def) const;
  absl::StatusOr<float> GetFloat(absl::string_view name, float def) const;
  absl::StatusOr<std::string> GetString(absl::string_view name, std::string def) const;
  absl::StatusOr<std::vector<int64_t>> GetInts(absl::string_view name,
                                               std::vector<int64_t> def = {}) const;
  absl::StatusOr<std::vector<float>> GetFloats(absl::string_view name,
                                               std::vector<float> def = {}) const;
  absl::StatusOr<std::vector<std::string>> GetStrings(absl::string_view name,
                                                      std::vector<std::string> def = {}) const;
  // DType of input/output i when the entry fixes it.
  DType input_dtype(size_t i) const { return static_cast<DType>(inputs[i].dtype); }
  DType output_dtype(size_t i) const { return static_cast<DType>(outputs[i].dtype); }
  std::string DebugName() const;  // "domain::op"
};

// Per-invoke-site state a kernel keeps between runs (a bound primitive, a cached shape).
// Owned by the VirtualMachine; never shared between threads.
class KernelState {
 public:
  virtual ~KernelState() = default;
};

// Per-VM state of a device backend: for CUDA, a stream, library handles and the device pool
// (kernels/cuda/cuda_context.h). Created on first use of the device by the VM that owns it
// (kernels/device_context.h); used by one thread at a time, like the VM.
class DeviceContext {
 public:
  virtual ~DeviceContext() = default;
  virtual Device device() const = 0;
  // The device's memory pool (dynamic outputs, workspace, device storages of the VM), and its
  // owner: tensors that may outlive the context hold it.
  virtual Allocator& allocator() = 0;
  virtual const std::shared_ptr<Allocator>& allocator_ref() const = 0;
  // dst := src, between the host and this device in either direction or within the device.
  // REQUIRES: the same dtype and dims, dst writable (the caller checks). Any strides.
  // Returns once src may be changed and, when dst is on the host, dst holds the data.
  virtual absl::Status Copy(const Tensor& src, Tensor& dst) = 0;
  // `bytes` bytes between host memory and device memory; synchronous (a sync point).
  virtual absl::Status CopyToHost(void* host_dst, const void* device_src, size_t bytes) = 0;
  virtual absl::Status CopyFromHost(void* device_dst, const void* host_src, size_t bytes) = 0;
  // Blocks until every operation queued on this context is done; returns the first
  // asynchronous error (a kernel fault) if there was one.
  virtual absl::Status Synchronize() = 0;
  // A read-only (Storage::Kind::kConstant) copy of `bytes` host bytes on this device, in memory
  // that belongs to no pool and outlives this context (an executable's constant segment).
  virtual absl::StatusOr<StorageRef> UploadConstant(const void* host, size_t bytes) = 0;
};

class KernelContext {
 public:
  // A context with its own single invoke site: for running a kernel outside a VM (tests,
  // constant folding). The VM points it at each site in turn with set_site.
  explicit KernelContext(Allocator* allocator, int num_threads = 1)
      : allocator_(allocator), num_threads_(num_threads) {}
  KernelContext(const KernelContext&) = delete;
  KernelContext& operator=(const KernelContext&) = delete;

  int num_threads() const { return num_threads_; }
  // Runs fn(begin, end) over disjoint ranges covering [0, n), each (but the last) a multiple of
  // `grain` long, on up to num_threads() threads (this one included), and returns when all are
  // done (kernels/thread_pool.h, docs/threads.md). The same n and grain give the same ranges to
  // the same threads every call. fn must not call ParallelFor. Below `grain`, with one thread,
  // or while a VM sharing the pool runs a job, fn(0, n) runs here.
  void ParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> fn) const;
  // The number of ranges ParallelFor(n, grain, ...) uses (1: it runs fn(0, n) here).
  int ParallelTasks(int64_t n, int64_t grain) const;
  // A dynamic split (claim-next): [0, n) in chunks of `chunk` elements (the last one shorter),
  // each taken by whichever thread is free next (one atomic counter), so a thread whose core is
  // busy (another process) holds up only the chunk it is on while the others take the rest.
  // fn(slot, begin, end) runs once per chunk; `slot` is in [0, ParallelTasks(n, chunk)), and two
  // chunks that run at the same time have different slots (index per-slot scratch by it). Which
  // slot and thread run a chunk varies from call to call: a chunk's result must not depend on
  // them. For coarse, uneven or few units (images, row blocks of a convolution); ParallelFor's
  // static ranges keep a GEMV's rows on the same core from call to call. With one thread or one
  // chunk every chunk runs here, in order, with slot 0. fn must not call ParallelFor.
  void ParallelForDynamic(int64_t n, int64_t chunk,
                          absl::FunctionRef<void(int, int64_t, int64_t)> fn) const;
  // Before work that runs on other threads (oneDNN's OpenMP team): parks spinning workers.
  void ParkWorkers() const {
    if (thread_pool_ != nullptr) thread_pool_->Park();
  }
  // The pool ParallelFor uses; when null and num_threads() > 1, the process-wide shared pool
  // of num_threads() threads. Not owned.
  void set_thread_pool(ThreadPool* pool) { thread_pool_ = pool; }
  // Where ParallelFor logs its ranges' threads and times (a profiled run: vm/profiler.h), or
  // nullptr (the default: nothing is logged, no clock is read). Not owned.
  void set_parallel_log(ParallelLog* log) { parallel_log_ = log; }
  // The pool of the VM running the kernel (workspace, dynamic outputs).
  Allocator& allocator() const { return *allocator_; }

  // A fresh contiguous tensor for a dynamic output, from the VM's pool.
  absl::StatusOr<Tensor> AllocateOutput(DType dtype, absl::Span<const int64_t> dims) const {
    return Tensor::Allocate(*allocator_, dtype, dims, allocator_keep_alive_);
  }
  // The pool's owner, for outputs made outside AllocateOutput (string tensors, kernels/strings.h).
  const std::shared_ptr<Allocator>& allocator_keep_alive() const { return allocator_keep_alive_; }
  // Scratch memory for this invoke site, valid until the next Workspace call at this site or
  // the end of the invoke. Up to 1 MiB it is reused across invokes and runs (it grows, never
  // shrinks, until the VM is trimmed); a larger one goes back to the VM's pool when the invoke
  // returns (vm/interpreter.cc, kMaxKeptWorkspaceBytes). Blocks are at least a page (4 KiB) and
  // at least double when they grow, so a site whose shapes grow every iteration does not
  // reallocate every iteration.
  absl::StatusOr<void*> Workspace(size_t bytes);

  // The device backend's per-VM context (nullptr when the VM has not used a device, or for a
  // context outside a VM that was given none). Kernels of a device backend check it.
  DeviceContext* device_context() const { return device_context_; }
  void set_device_context(DeviceContext* d) { device_context_ = d; }
  // Like Workspace, on the device of device_context(), from its pool.
  // FailedPrecondition when there is no device context.
  absl::StatusOr<void*> DeviceWorkspace(size_t bytes);

  // This invoke site's state slot.
  std::unique_ptr<KernelState>& state() { return site()->state; }
  template <typename T>
  T* state_as() {
    return static_cast<T*>(site()->state.get());
  }

  // Per-invoke-site data, owned by the VM.
  struct Site {
    std::unique_ptr<KernelState> state;
    StorageRef workspace;
    StorageRef device_workspace;
  };
  void set_site(Site* site) { site_ = site; }
  // The VM's run this context serves (a count the VM advances at each Run; 0 outside a VM). A
  // site's choices that adapt to the shapes it has seen (dnnl's primitive-or-loop after
  // kMaxPrimitiveBinds shapes) count from the start of each run, so that a run's results depend
  // on its inputs only, never on earlier runs (docs/determinism.md).
  int64_t run_id() const { return run_id_; }
  void BeginRun() { ++run_id_; }
  void set_num_threads(int n) {
    num_threads_ = n;
    if (thread_pool_ != nullptr && thread_pool_->num_threads() != n) thread_pool_ = nullptr;
  }
  // `keep_alive` owns `a`: each dynamic output holds it, so an output that escapes the VM (a
  // function output) keeps the pool alive until it is dropped.
  void set_allocator(Allocator* a, std::shared_ptr<Allocator> keep_alive = nullptr) {
    allocator_ = a;
    allocator_keep_alive_ = std::move(keep_alive);
  }

 private:
  Site* site() { return site_ != nullptr ? site_ : &own_site_; }

  Allocator* allocator_;
  std::shared_ptr<Allocator> allocator_keep_alive_;
  DeviceContext* device_context_ = nullptr;
  int num_threads_;
  mutable ThreadPool* thread_pool_ = nullptr;
  ParallelLog* parallel_log_ = nullptr;
  Site* site_ = nullptr;
  Site own_site_;
  int64_t run_id_ = 0;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // REQUIRES: input and output dtypes match the spec this kernel was created for (the
  // verifier guarantees it); shapes are checked here and mismatches return InvalidArgument.
  // Absent optional inputs and outputs are nullptr. Preallocated outputs have their final
  // shapes; dynamic outputs are empty tensors the kernel replaces.
  virtual absl::Status Run(KernelContext& ctx, absl::Span<const Tensor* const> inputs,
                           absl::Span<Tensor* const> outputs) const = 0;
  // "op.dtype.backend[.variant]", e.g. "matmul.f32.dnnl.runtime_m". Shown by reports and the
  // profiler.
  virtual std::string name() const = 0;
  // For a device kernel: whether input `i` is read on the host (a shape, a scalar parameter),
  // so the VM passes a host tensor there as it is instead of copying it to the device.
  virtual bool ReadsInputOnHost(int i) const { return false; }
};

}  // namespace dynvm

#endif  // DYNVM_KERNELS_KERNEL_H_
