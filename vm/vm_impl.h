// Internal state of a VirtualMachine and the interpreter entry point. Not part of the API.
#ifndef DYNVM_VM_VM_IMPL_H_
#define DYNVM_VM_VM_IMPL_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "allocator/pool_allocator.h"
#include "kernels/device_context.h"
#include "kernels/kernel.h"
#include "kernels/tensor.h"
#include "vm/executable.h"
#include "vm/executable_impl.h"
#include "vm/profiler.h"
#include "vm/virtual_machine.h"

namespace dynvm {

union Scalar {
  int64_t i;
  double f;
};

struct Sequence {
  std::vector<Tensor> items;
};

// One object register. Its kind is fixed by the function's declarations (checked by the
// verifier), so no tag is needed: a tensor register uses `t`, a storage register `st`, a
// sequence register `seq`, an optional uses `has` plus `t` or `seq`.
struct Object {
  Tensor t;
  StorageRef st;
  std::shared_ptr<Sequence> seq;
  bool has = false;
  void Clear() {
    if (t.defined()) t = Tensor();
    st.Reset();
    seq.reset();
    has = false;
  }
};

struct Frame {
  std::vector<Scalar> s;
  std::vector<Object> o;
};

// Where a `ret` puts its results: registers of the caller's frame, or the VM's outputs.
struct ReturnTarget {
  Frame* frame = nullptr;              // null: the entry function's outputs
  absl::Span<const uint32_t> objects;  // the caller's result registers (call's lists)
  absl::Span<const uint32_t> scalars;
  std::vector<Object>* outputs = nullptr;
};

class VirtualMachine::Impl {
 public:
  Impl(std::shared_ptr<const Executable> exe, const VmOptions& options);

  absl::Status Init();
  absl::Status RunFunction(int function, const RunOptions& options, int64_t* iterations);

  // The interpreter (interpreter.cc, compiled once per dispatch variant), without and with
  // profiling (ExecuteProfiled records into `profiler`, which must be set).
  absl::Status Execute(int function, int depth, const ReturnTarget& ret);
  absl::Status ExecuteProfiled(int function, int depth, const ReturnTarget& ret);

  std::shared_ptr<const Executable> executable;
  const Executable::Rep* exe;  // executable's internals (vm/executable_impl.h)
  VmOptions options;
  std::shared_ptr<PoolAllocator> pool;
  // The CUDA device's context (stream, cuBLAS handle, device pool), made by the first
  // instruction that needs the device; null until then, so CPU-only runs never touch CUDA.
  std::unique_ptr<DeviceContext> cuda;
  StorageRef device_constants;        // this executable's constants on the device (shared)
  std::vector<Tensor> device_in_buf;  // device views of constant inputs of a device invoke
  StorageRef const_storage;
  std::vector<Tensor> constants;            // one read-only view per constant
  std::vector<std::vector<Object>> inputs;  // per function; `bound` per input below
  std::vector<std::vector<bool>> inputs_bound;
  std::vector<std::vector<Object>> outputs;  // per function, from the last good run
  std::vector<bool> outputs_valid;
  // Caller buffers bound to outputs (SetOutputBuffer), per function; empty when none.
  std::vector<std::vector<Tensor>> output_buffers;
  const std::vector<Tensor>* run_output_buffers = nullptr;  // the running entry's, or null
  int last_output_copies = 0;
  std::vector<std::unique_ptr<Frame>> frames;           // by call depth; reused across calls
  std::vector<std::vector<KernelContext::Site>> sites;  // per function, per invoke site
  KernelContext ctx{nullptr, 1};
  std::shared_ptr<ThreadPool> thread_pool;  // null with one thread
  absl::Status SetThreads(int n);
  std::vector<const Tensor*> in_buf;
  std::vector<Tensor*> out_buf;
  std::vector<Object> tmp_objects;  // pmove scratch

  // Per-run state.
  int64_t iterations_left = 0;
  int64_t iterations_done = 0;
  absl::Time deadline = absl::InfiniteFuture();
  const CancellationToken* cancel = nullptr;
  const std::function<absl::Status()>* poll = nullptr;
  const EmitCallback* on_emit = nullptr;
  int max_depth_used = 0;
  Profiler* profiler = nullptr;  // RunOptions::profiler of the run in progress
  // Records the pools' bytes in use (when changed). REQUIRES: profiler.
  void SampleMemory() {
    profiler->Memory(pool->stats().bytes_in_use, false);
    if (cuda != nullptr) profiler->Memory(cuda->allocator().stats().bytes_in_use, true);
  }
  // System allocations of both pools so far (a lock per pool: only at run boundaries, and at
  // the first back edge and the exit of each outermost loop of the entry function's frame).
  int64_t SystemAllocs() const;
  // Loop steady-state accounting (RunMemoryStats), for the entry function's frame only.
  int loop_nesting = 0;  // loops of the entry frame being run
  int64_t run_start_allocs = 0;
  int64_t first_iteration_allocs = -1;  // at the outermost loop's first back edge; -1 before
  // The pool's peak bytes in use in each of the last VmOptions::trim_window runs.
  std::vector<int64_t> recent_peaks;
  int64_t runs_seen = 0;
  // After a run: cached pool memory beyond twice the largest recent peak goes back to the
  // system (VmOptions::trim_window).
  void TrimToRecentPeaks();
  int64_t steady_state_allocs = 0;  // summed over the outermost loops that have exited
  bool any_first_iteration = false;
  // At the exit of a loop of the entry frame (its last back edge fell through, or a break).
  void ExitLoop() {
    if (--loop_nesting == 0 && first_iteration_allocs >= 0) {
      steady_state_allocs += SystemAllocs() - first_iteration_allocs;
      any_first_iteration = true;
    }
  }
  RunMemoryStats last_run_memory;

  Frame& FrameAt(int depth, const Executable::FunctionEntry& f);
  // The context of `device` (kCUDA), created on first use; the build's or machine's error
  // (docs/cuda.md) when there is none. REQUIRES: device != kCPU.
  absl::StatusOr<DeviceContext*> DeviceFor(Device device);
  // Before a kernel runs, inputs in in_buf[0..n) on another device than the kernel's are
  // replaced by copies on its device (device_in_buf): a constant by the same view of the
  // executable's device copy of the constant segment, anything else by a copy from the pool
  // of the kernel's device (a sync point when it is the host). Inputs a device kernel reads on
  // the host stay there. Sets moved_inputs when it replaced any.
  absl::Status PrepareDeviceInvoke(const Executable::KernelEntry& k, uint32_t n);
  // For a host kernel also checks that no preallocated output in out_buf[0..n_out) is on a
  // device (a host kernel cannot write there).
  absl::Status PrepareHostInvoke(uint32_t n, uint32_t n_out);
  // A pool copy of a caller's input (a string tensor's with its own bytes).
  absl::StatusOr<Tensor> CopyInput(const Tensor& t);
  bool moved_inputs = false;
  // The buffer bound to the output that the alloc_tensor at `pc` of the entry function makes,
  // or null. REQUIRES: run_output_buffers != nullptr.
  const Tensor* OutputBufferAt(const Executable::FunctionEntry& f, uint32_t pc) const;
  // At the entry function's ret: puts each output that has a bound buffer into it (a copy
  // unless the program wrote it in place) and returns the buffer as the output.
  absl::Status FillOutputBuffers(const FunctionInfo& info, std::vector<Object>& outputs);
  absl::Status Annotate(const absl::Status& s, int function, uint32_t pc) const;
  // A run's InvalidArgument error with the entry's inputs of free shape and their shapes.
  absl::Status WithFreeInputShapes(const absl::Status& s, int function) const;
  absl::Status CheckInterrupts() const;
  // Loop iterations a run may execute (VmOptions::max_loop_iterations; 0: no limit).
  int64_t IterationBudget() const {
    return options.max_loop_iterations > 0 ? options.max_loop_iterations
                                           : std::numeric_limits<int64_t>::max();
  }
};

// The VM's internal state, for the interpreter's helpers and the test hooks (vm/vm_testing.h).
class VmAccess {
 public:
  static VirtualMachine::Impl& impl(VirtualMachine& vm) { return *vm.impl_; }
};

}  // namespace dynvm

#endif  // DYNVM_VM_VM_IMPL_H_
