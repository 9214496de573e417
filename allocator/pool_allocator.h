// Public API. A pooled CPU allocator: size classes, free lists, reuse of freed blocks, an
// optional reservation made once, a memory limit, Trim(), statistics and fault injection.
//
// Size classes: requests round up to a class; up to 4 KiB classes step by 64 bytes, above that
// by a quarter of the power of two (4, 5, 6, 7 KiB, 8, 10, 12, 14 KiB, ...), so internal
// waste stays under 25% while a class fits every size between its neighbours. A freed block
// goes to its class's free list and is handed out again for any request of that class: a
// decode loop that allocates the same shapes every step calls the system only in its first
// step. A request of 0 bytes is served from the 64-byte class (a unique non-null pointer).
//
// Huge requests (above kMaxClassBytes, 256 MiB) bypass the classes: they are rounded up to
// kTensorAlignment only, come straight from the system and go straight back to it when freed
// (filling such a tensor costs far more than the system call). They still count in the
// statistics and against the memory limit.
//
// Reservation: Options::reservation or Reserve() obtains one block from the system once. It is
// carved front to back (a bump pointer, every block kTensorAlignment-aligned) into blocks of
// the classes requested, and only once it is used up is the system asked again. Blocks carved
// from it keep their class forever: freed, they go to their class's free list; Trim() and the
// memory limit never return them (nor the reservation) to the system; only the destructor does.
//
// Statistics: bytes_in_use counts class bytes (what a request occupies, not what it asked for),
// so bytes_in_use + cached bytes + unused reservation == bytes_reserved. pool_hits counts
// allocations served from a free list or the reservation; system_allocs/system_frees count
// calls to std::aligned_alloc/std::free (the reservation is one system allocation).
//
// Memory limit: bytes_reserved (in use + cached + reservation) may not exceed the limit. When
// an allocation would exceed it, cached blocks are released (largest classes first, only as
// many as needed); if even releasing every cached block would not make room, nothing is
// released and the allocation fails with ResourceExhausted naming the request and the limit.
// A failed allocation leaves the allocator fully usable. Never a crash.
//
// Thread safety: thread-safe (one std::mutex; allocation is off the hot path by design). A
// block may be deallocated on any thread.
#ifndef DYNVM_ALLOCATOR_POOL_ALLOCATOR_H_
#define DYNVM_ALLOCATOR_POOL_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/allocator.h"

namespace dynvm {

class PoolAllocator final : public Allocator {
 public:
  // The largest class; larger requests go straight to the system.
  static constexpr size_t kMaxClassBytes = size_t{256} << 20;
  // Larger requests fail with ResourceExhausted without asking the system.
  static constexpr size_t kMaxRequestBytes = size_t{1} << 60;

  struct Options {
    int64_t memory_limit = 0;  // bytes; 0 (or negative) = unlimited
    // Bytes obtained from the system once, up front (or at the first Reserve call), and carved
    // into blocks before the system is asked again: a plan's worst case, so steady state makes
    // no system calls at all. If it cannot be made (over memory_limit, or the system is out of
    // memory) the allocator starts without one; call Reserve() to see the error.
    int64_t reservation = 0;
  };

  PoolAllocator();
  explicit PoolAllocator(Options options);
  // Returns every cached block and the reservation to the system.
  // REQUIRES: every block has been returned (blocks still in use are not freed).
  ~PoolAllocator() override;

  PoolAllocator(const PoolAllocator&) = delete;
  PoolAllocator& operator=(const PoolAllocator&) = delete;

  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Deallocate(void* p, size_t bytes) override;
  Device device() const override { return Device::kCPU; }
  AllocatorStats stats() const override;
  void FailNthAllocation(int64_t n) override;

  // Makes a reservation of `bytes` (rounded up to kTensorAlignment) now if none exists yet (a
  // no-op returning OK otherwise, or for bytes <= 0). Counts against the memory limit;
  // ResourceExhausted if it does not fit or the system is out of memory.
  absl::Status Reserve(int64_t bytes);
  // 0 (or negative) = unlimited. Lowering the limit below bytes_reserved releases cached blocks
  // as far as that helps; blocks in use are never taken back, later allocations just fail
  // until enough is returned.
  void SetMemoryLimit(int64_t bytes);
  // Returns every cached free block to the system (the reservation and blocks carved from it
  // stay).
  void Trim() override;
  // Returns cached system blocks, largest classes first, until bytes_reserved is at most
  // `bytes` or nothing cached is left. Returns the bytes released.
  int64_t TrimTo(int64_t bytes);
  // The most bytes in use since the last call (or since creation), then starts a new window
  // at the bytes in use now: the peak of one run, for a trim policy (VirtualMachine).
  int64_t TakeWindowPeak();

  // The class size a request of `bytes` is served with (exposed for tests): the block size
  // that bytes_in_use counts. Returns 0 for bytes > kMaxRequestBytes.
  static size_t ClassSize(size_t bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynvm

#endif  // DYNVM_ALLOCATOR_POOL_ALLOCATOR_H_
