// Public API. Memory for tensors: the Allocator interface (one per device) and statistics.
//
// Thread safety: every Allocator implementation is thread-safe. A storage allocated from an
// allocator may be released on any thread (a caller may drop an output tensor anywhere).
#ifndef DYNVM_ALLOCATOR_ALLOCATOR_H_
#define DYNVM_ALLOCATOR_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/types.h"

namespace dynvm {

inline constexpr size_t kTensorAlignment = 64;

absl::string_view DeviceName(Device d);

struct AllocatorStats {
  int64_t bytes_in_use = 0;  // handed out to callers and not yet returned
  int64_t peak_bytes_in_use = 0;
  int64_t bytes_reserved = 0;  // obtained from the system (in use + cached + reservation)
  int64_t system_allocs = 0;   // calls into the system allocator (malloc, cudaMalloc)
  int64_t system_frees = 0;
  int64_t allocs = 0;         // calls to Allocate
  int64_t pool_hits = 0;      // allocations served from a free list or the reservation
  int64_t failed_allocs = 0;  // refused: memory limit or injected fault
};

class Allocator {
 public:
  virtual ~Allocator() = default;

  // Returns `bytes` bytes aligned to kTensorAlignment, or ResourceExhausted (memory limit,
  // system out of memory, or an injected fault). `bytes` may be 0 (a unique non-null pointer).
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  // REQUIRES: `p` came from Allocate on this allocator with the same `bytes`.
  virtual void Deallocate(void* p, size_t bytes) = 0;

  virtual Device device() const = 0;
  virtual AllocatorStats stats() const = 0;

  // Returns cached free memory to the system; memory in use is never taken back. A no-op for
  // an allocator that caches nothing. REQUIRES for a device pool: no queued device work still
  // reads a freed block (the caller synchronizes first).
  virtual void Trim() {}

  // Fault injection for tests: the `n`-th Allocate call from now (1-based) fails with
  // ResourceExhausted. 0 disables. Only that one call fails.
  virtual void FailNthAllocation(int64_t n) = 0;
};

}  // namespace dynvm

#endif  // DYNVM_ALLOCATOR_ALLOCATOR_H_
