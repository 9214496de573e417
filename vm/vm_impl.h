// Internal state of a VirtualMachine and the interpreter entry point. Not part of the API.
#ifndef DYNVM_VM_VM_IMPL_H_
#define DYNVM_VM_VM_IMPL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "allocator/pool_allocator.h"
#include "kernels/kernel.h"
#include "kernels/tensor.h"
#include "vm/executable.h"
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
  Frame* frame = nullptr;            // null: the entry function's outputs
  const uint32_t* objects = nullptr;  // a list: count then registers
  const uint32_t* scalars = nullptr;
  std::vector<Tensor>* outputs = nullptr;
};

class VirtualMachine::Impl {
 public:
  Impl(std::shared_ptr<const Executable> exe, const VmOptions& options);

  absl::Status Init();
  absl::Status RunFunction(int function, const RunOptions& options, int64_t* iterations);

  // The interpreter (interpreter.cc, compiled once per dispatch variant).
  absl::Status Execute(int function, int depth, const ReturnTarget& ret);

  std::shared_ptr<const Executable> exe;
  VmOptions options;
  std::shared_ptr<PoolAllocator> pool;
  StorageRef const_storage;
  std::vector<Tensor> constants;                   // one read-only view per constant
  std::vector<std::vector<Tensor>> inputs;         // per function
  std::vector<std::vector<Tensor>> outputs;        // per function, from the last good run
  std::vector<bool> outputs_valid;
  std::vector<std::unique_ptr<Frame>> frames;      // by call depth; reused across calls
  std::vector<std::vector<KernelContext::Site>> sites;  // per function, per invoke site
  KernelContext ctx{nullptr, 1};
  std::vector<const Tensor*> in_buf;
  std::vector<Tensor*> out_buf;
  std::vector<Object> tmp_objects;  // pmove scratch

  // Per-run state.
  int64_t iterations_left = 0;
  int64_t iterations_done = 0;
  absl::Time deadline = absl::InfiniteFuture();
  const CancellationToken* cancel = nullptr;
  const EmitCallback* on_emit = nullptr;
  int max_depth_used = 0;

  Frame& FrameAt(int depth, const Executable::FunctionEntry& f);
  absl::Status Annotate(const absl::Status& s, int function, uint32_t pc) const;
  absl::Status CheckInterrupts() const;
};

}  // namespace dynvm

#endif  // DYNVM_VM_VM_IMPL_H_
