// Public API. A pooled CPU allocator: size classes, free lists, reuse of freed blocks, an
// optional reservation made once, a memory limit, Trim(), statistics and fault injection.
//
// Size classes: requests round up to a class; up to 4 KiB classes step by 64 bytes, above that
// by a quarter of the power of two (4, 5, 6, 7 KiB, 8, 10, 12, 14 KiB, ...), so internal
// waste stays under 25% while a class fits every size between its neighbours. A freed block
// goes to its class's free list and is handed out again for any request of that class: a
// decode loop that allocates the same shapes every step calls the system only in its first
// step.
//
// Memory limit: bytes_reserved (in use + cached + reservation) may not exceed the limit. When
// an allocation would exceed it, cached blocks are released first; if it still would, the
// allocation fails with ResourceExhausted naming the request and the limit. Never a crash.
//
// Thread safety: thread-safe (one std::mutex; allocation is off the hot path by design).
#ifndef DYNVM_ALLOCATOR_POOL_ALLOCATOR_H_
#define DYNVM_ALLOCATOR_POOL_ALLOCATOR_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "allocator/allocator.h"

namespace dynvm {

class PoolAllocator final : public Allocator {
 public:
  struct Options {
    int64_t memory_limit = 0;  // bytes; 0 = unlimited
    // Bytes obtained from the system once, up front (or at the first Reserve call), and carved
    // into blocks before the system is asked again: a plan's worst case, so steady state makes
    // no system calls at all.
    int64_t reservation = 0;
  };

  PoolAllocator();
  explicit PoolAllocator(Options options);
  ~PoolAllocator() override;  // REQUIRES: every block has been returned.

  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Deallocate(void* p, size_t bytes) override;
  Device device() const override { return Device::kCPU; }
  AllocatorStats stats() const override;
  void FailNthAllocation(int64_t n) override;

  // Makes a reservation of `bytes` now if none exists yet (a no-op otherwise). Counts against
  // the memory limit.
  absl::Status Reserve(int64_t bytes);
  void SetMemoryLimit(int64_t bytes);
  // Returns every cached free block to the system (the reservation stays).
  void Trim();

  // The class size a request of `bytes` is served with (exposed for tests).
  static size_t ClassSize(size_t bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynvm

#endif  // DYNVM_ALLOCATOR_POOL_ALLOCATOR_H_
