// Public API. The process heap as an Allocator: every call goes to the system. For host-side
// tensors (inputs the caller builds, tests); VMs use a PoolAllocator.
//
// Thread safety: thread-safe.
#ifndef DYNVM_ALLOCATOR_HEAP_ALLOCATOR_H_
#define DYNVM_ALLOCATOR_HEAP_ALLOCATOR_H_

#include <mutex>

#include "absl/base/thread_annotations.h"
#include "allocator/allocator.h"

namespace dynvm {

class HeapAllocator final : public Allocator {
 public:
  // The process-wide instance (never destroyed).
  static HeapAllocator& Get();

  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Deallocate(void* p, size_t bytes) override;
  Device device() const override { return Device::kCPU; }
  AllocatorStats stats() const override;
  void FailNthAllocation(int64_t n) override;

 private:
  mutable std::mutex mu_;
  AllocatorStats stats_ ABSL_GUARDED_BY(mu_);
  int64_t fail_countdown_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dynvm

#endif  // DYNVM_ALLOCATOR_HEAP_ALLOCATOR_H_
