// Public API. A VirtualMachine runs the functions of one Executable.
//
// Ownership: a VM holds a reference to its Executable (the executable outlives every VM made
// from it). Output tensors returned by GetOutput own their storage: they stay valid after the
// next Run, after the VM is destroyed, and may be fed back as inputs without a copy.
//
// Devices: a program that allocates storage or runs kernels on the CUDA device gets a device
// context (a stream, a cuBLAS handle and a device pool) on the first such instruction; a VM
// that never uses the device never touches the CUDA runtime. Every run waits for its device
// work before it returns (docs/cuda.md).
//
// Thread safety: thread-compatible. One VM is used by one thread at a time; create one VM per
// thread (creation is cheap: registers and a memory pool, no weights). The only method that
// may be called from another thread while Run is in progress is CancellationToken::Cancel on
// the token passed in RunOptions.
#ifndef DYNVM_VM_VIRTUAL_MACHINE_H_
#define DYNVM_VM_VIRTUAL_MACHINE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "allocator/allocator.h"
#include "kernels/tensor.h"
#include "vm/executable.h"

namespace dynvm {

class Profiler;
class VmAccess;  // vm/vm_impl.h: the interpreter's and the test hooks' access to the VM's state

// Names a function for the VM's methods: by name ("" = the default entry, "main"), looked up at
// each call, or by a FunctionHandle that Executable::ResolveFunction looked up once. Implicit
// from either, so callers pass a string or a handle. Non-owning, like absl::string_view: only
// for parameters.
class FunctionRef {
 public:
  FunctionRef() = default;
  FunctionRef(absl::string_view name) : name_(name) {}            // NOLINT: implicit by design
  FunctionRef(const char* name) : name_(name) {}                  // NOLINT
  FunctionRef(const std::string& name) : name_(name) {}           // NOLINT
  FunctionRef(const FunctionHandle& handle) : handle_(handle) {}  // NOLINT

  bool is_handle() const { return handle_.valid(); }
  absl::string_view name() const { return name_; }
  const FunctionHandle& handle() const { return handle_; }

 private:
  absl::string_view name_;
  FunctionHandle handle_;
};

// Cancels runs from any thread. A run checks the token at every loop back edge and call.
// Thread safety: thread-safe (Cancel, Reset and cancelled may be called from any thread).
class CancellationToken {
 public:
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  void Reset() { cancelled_.store(false, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> cancelled_{false};
};

// Options structs (VmOptions, RunOptions) are plain values: thread-compatible.
// The default limits of every interface (VmOptions, vm-run, Python).
inline constexpr int64_t kDefaultMaxLoopIterations = 10'000'000;
inline constexpr int64_t kDefaultMemoryLimit = int64_t{4} << 30;  // 4 GiB

struct VmOptions {
  // Intra-op threads each kernel may use: 1 to MaxThreads() (kernels/thread_pool.h, the
  // process-wide cap); anything else is InvalidArgument at Create. 1 starts no worker thread.
  int num_threads = 1;
  // With num_threads > 1: true, the process-wide pool of num_threads threads, shared with every
  // VM that asks for the same count (a kernel that finds it busy runs on its VM's thread, so
  // VMs never oversubscribe the cores); false, a pool of this VM's own.
  bool shared_thread_pool = true;
  // Safe by default, as vm-run (docs/trust.md): a run may execute at most this many loop
  // iterations (over all its loops) and hold at most this many bytes of pool memory; past
  // either it stops with ResourceExhausted. 0 removes a limit.
  int64_t max_loop_iterations = kDefaultMaxLoopIterations;
  int max_call_depth = 200;
  int64_t memory_limit = kDefaultMemoryLimit;  // bytes of pool memory; 0 = unlimited
  int64_t reservation = 0;                     // pool bytes reserved up front (see PoolAllocator)
  // After each run the pool returns to the system the cached memory beyond twice the largest
  // peak of the last `trim_window` runs (a VM that once ran a large batch does not keep its
  // memory for good; a steady workload is left alone). 0: never automatically (Trim() still
  // returns everything cached).
  int trim_window = 16;
  int64_t device_memory_limit = 0;  // bytes of the CUDA device pool; 0 = unlimited
};

// Receives tensors from the `emit` instruction while a run is in progress (streaming tokens).
// The tensor is valid only during the call; copy what you keep. A non-OK status stops the run
// with that status.
using EmitCallback = std::function<absl::Status(int stream, const Tensor& value)>;

// Calls into the system allocator (the VM's pool and, when used, its device pool) during the
// last run: in all, and in the steady state of its loops: for each outermost loop of the
// entry function's frame that finished its first iteration, from the end of that iteration
// (its first back edge) to the loop's exit. The first iteration of each loop (a prefill loop's,
// then the decode loop's) and the outputs made after the loops do not count. A run without
// such a loop has no steady state: system_allocs_after_first_iteration is 0 and
// first_iteration_ended false.
struct RunMemoryStats {
  int64_t system_allocs = 0;
  int64_t system_allocs_after_first_iteration = 0;
  bool first_iteration_ended = false;
};

struct RunOptions {
  std::string function;  // "" = the default entry ("main")
  // When valid, the function to run, resolved once (Executable::ResolveFunction); `function`
  // is then ignored.
  FunctionHandle handle;
  absl::Time deadline = absl::InfiniteFuture();
  const CancellationToken* cancel = nullptr;
  EmitCallback on_emit;
  // Called where the run checks for cancellation and its deadline (every 256 loop iterations,
  // at each call, and at the start): a non-OK status stops the run with that status. For a host
  // whose own interrupts (Python's signal handlers) must run while a run is in progress. Runs
  // on the calling thread; must be cheap when nothing happened.
  std::function<absl::Status()> poll;
  // When set, the run records spans, kernel times and memory into it (vm/profiler.h,
  // docs/profiling.md) and executes the profiling variant of the interpreter; when null (the
  // default) the interpreter contains no profiling code. Not owned; must outlive the run.
  Profiler* profiler = nullptr;
};

// An input or output that is not a plain tensor: an ONNX sequence (a list of tensors, which
// may differ in shape) or optional (empty, or holding a tensor or a sequence). Plain tensors
// can be passed this way too (kind kTensor).
struct ObjectValue {
  ObjectKind kind = ObjectKind::kTensor;       // kTensor, kSequence or kOptional
  ObjectKind elem_kind = ObjectKind::kTensor;  // kOptional: what it holds (kTensor or kSequence)
  bool has_value = true;                       // kOptional: false when empty
  Tensor tensor;                               // kTensor, or an optional holding a tensor
  std::vector<Tensor> sequence;                // kSequence, or an optional holding a sequence

  static ObjectValue OfTensor(Tensor t);
  static ObjectValue OfSequence(std::vector<Tensor> items);
  static ObjectValue EmptyOptional(ObjectKind elem_kind);
  // An optional holding `v` (a tensor or a sequence).
  static ObjectValue Some(ObjectValue v);
  std::string DebugString() const;
};

class VirtualMachine {
 public:
  static absl::StatusOr<std::unique_ptr<VirtualMachine>> Create(
      std::shared_ptr<const Executable> executable, const VmOptions& options = {});
  ~VirtualMachine();
  VirtualMachine(const VirtualMachine&) = delete;
  VirtualMachine& operator=(const VirtualMachine&) = delete;

  const Executable& executable() const { return *exe_; }

  // Names of the real inputs and of the outputs of `function` ("" = default entry). Weights
  // are constants of the executable, never inputs.
  absl::StatusOr<std::vector<std::string>> input_names(FunctionRef function = {}) const;
  absl::StatusOr<std::vector<std::string>> output_names(FunctionRef function = {}) const;

  // Binds an input by name or index, copying its data into the VM's pool. The dtype must match
  // the signature; the rank and fixed dims are checked at Run.
  absl::Status SetInput(absl::string_view name, const Tensor& value, FunctionRef function = {});
  absl::Status SetInput(int index, const Tensor& value, FunctionRef function = {});
  // Binds the caller's tensor without a copy. The VM only reads it; the tensor's storage is
  // kept alive by the binding until it is replaced or the VM is destroyed. REQUIRES nothing of
  // alignment beyond the dtype's natural alignment, which is checked (InvalidArgument
  // otherwise). The caller must not write the data while a run may read it.
  //
  // Lifetime: the VM keeps a reference to `value`'s storage (a tensor over memory the caller
  // owns keeps it alive through the storage's release callback), so the data must stay valid
  // until the input is rebound or the VM is destroyed. Nothing is allocated for an input
  // before it is bound, and an input bound without a copy is never copied by the VM.
  // Misaligned data is an error, never a silent copy.
  absl::Status SetInputZeroCopy(absl::string_view name, const Tensor& value,
                                FunctionRef function = {});
  // Binds an input of any kind (a sequence or optional input needs this form), copying each
  // tensor. The kind (and an optional's content kind) and the dtype must match the
  // signature; element ranks and fixed dims are checked at Run.
  absl::Status SetInputValue(absl::string_view name, const ObjectValue& value,
                             FunctionRef function = {});
  absl::Status SetInputValue(int index, const ObjectValue& value, FunctionRef function = {});

  // Binds a caller-owned buffer to output `name` of `function`: after every successful Run the
  // output is in the buffer, and GetOutput returns a tensor over it. When the program makes
  // that output with a plain top-level allocation of a shape known before its kernel runs
  // (FunctionEntry::output_allocs; the usual case), the kernel writes straight into the
  // buffer; otherwise the value is copied into it once at return (last_run_output_copies()
  // counts those). REQUIRES: on the CPU, contiguous, aligned to its dtype, of the output's
  // dtype and declared fixed dims (checked here: InvalidArgument); at Run its dims must equal
  // the output's (InvalidArgument otherwise, and the run fails); it must not overlap an input
  // or another output buffer, and the caller must not touch it while a run is in progress.
  // The binding keeps the buffer's storage alive until it is rebound or cleared (an undefined
  // `buffer`) or the VM is destroyed. Each run overwrites it: a GetOutput tensor from an earlier
  // run views the same memory.
  absl::Status SetOutputBuffer(absl::string_view name, const Tensor& buffer,
                               FunctionRef function = {});
  // Outputs of the last run that were copied into their bound buffer instead of being
  // written there in place.
  int last_run_output_copies() const;

  // Runs a function with the bound inputs. On error the VM stays usable, and the function has
  // no outputs (GetOutputs: FailedPrecondition) until it next runs successfully; outputs of
  // earlier runs that the caller already holds stay valid.
  absl::Status Run(const RunOptions& options = {});

  absl::StatusOr<Tensor> GetOutput(absl::string_view name, FunctionRef function = {}) const;
  absl::StatusOr<Tensor> GetOutput(int index, FunctionRef function = {}) const;
  // The outputs of the last run of `function`, in signature order, if that run succeeded.
  // GetOutput and GetOutputs return tensors: InvalidArgument for a sequence or optional output
  // (use GetOutputValue).
  absl::StatusOr<std::vector<Tensor>> GetOutputs(FunctionRef function = {}) const;
  // An output of any kind (ParamInfo::kind in executable().function(i).outputs says which).
  absl::StatusOr<ObjectValue> GetOutputValue(absl::string_view name,
                                             FunctionRef function = {}) const;
  absl::StatusOr<ObjectValue> GetOutputValue(int index, FunctionRef function = {}) const;

  // Pool statistics (bytes in use, peak, calls into the system allocator).
  AllocatorStats memory_stats() const;
  // The CUDA device pool's statistics (all zero until the VM first uses the device).
  AllocatorStats device_memory_stats() const;
  // `t` on the host: itself when it is there; for a tensor on this VM's device (an output of a
  // program that leaves it there), a copy in host memory (a sync point).
  absl::StatusOr<Tensor> ToHost(const Tensor& t) const;
  // Loop iterations executed by the last run.
  int64_t last_run_iterations() const { return last_iterations_; }
  // System allocator calls of the last run (complete or not).
  RunMemoryStats last_run_memory() const;
  // Returns cached pool memory to the system; bound inputs and outputs stay.
  void Trim();
  // Changes the intra-op thread count (between runs); InvalidArgument as at Create.
  absl::Status set_num_threads(int n);

 private:
  friend class VmAccess;
  class Impl;
  VirtualMachine() = default;
  // The index of `function` in the executable: its handle's (checked to be this executable's),
  // or its name's.
  absl::StatusOr<int> Resolve(const FunctionRef& function) const;
  std::shared_ptr<const Executable> exe_;
  std::unique_ptr<Impl> impl_;
  int64_t last_iterations_ = 0;
};

}  // namespace dynvm

#endif  // DYNVM_VM_VIRTUAL_MACHINE_H_
