// Public API. The pooled CUDA device allocator, and whether this process can use a CUDA device.
//
// CudaAllocator keeps the CPU pool's contract (allocator/pool_allocator.h): the same size
// classes (PoolAllocator::ClassSize), free lists that hand a freed block out again for any
// request of its class, huge requests (above PoolAllocator::kMaxClassBytes) straight to and
// from the system, a memory limit that releases cached blocks before it refuses, Trim(), the
// same statistics and FailNthAllocation. Device memory cannot hold free-list links, so the
// bookkeeping lives on the host. There is no up-front reservation.
//
// Memory comes from cudaMalloc and goes back with cudaFree on the current device (ordinal 0
// unless the caller set another; CUDA_VISIBLE_DEVICES picks the GPU), both called through the
// CUDA module (allocator/cuda_module.h), which this library loads on the first allocation. A block
// returned to the pool may still be read by work queued on a stream: reuse is safe as long as every
// user of the pool queues its work on one stream (one VM, one stream), which is how the VM uses it.
//
// Nothing here touches CUDA until the first allocation: constructing a CudaAllocator, or
// linking this library, never loads the CUDA module or initializes the CUDA runtime.
//
// Thread safety: thread-safe (one std::mutex). A block may be deallocated on any thread.
#ifndef DYNVM_ALLOCATOR_CUDA_ALLOCATOR_H_
#define DYNVM_ALLOCATOR_CUDA_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/allocator.h"

namespace dynvm {

// True when this build has CUDA support (DYNVM_WITH_CUDA: the CUDA module is built with it).
bool CudaBuildEnabled();

// OK when a CUDA device can be used in this process. Otherwise:
//   Unimplemented  "this build has no CUDA device support" (a build without DYNVM_WITH_CUDA);
//   Unavailable    "the CUDA module libdynvm_cuda.so was not found ..." / "could not be
//                  loaded ..." / "has ABI version ..." (allocator/cuda_module.h), or
//                  "no CUDA device available: <reason>" (no GPU, no driver, CUDA_VISIBLE_DEVICES
//                  empty: any error from cudaGetDeviceCount counts as no device).
// The first call loads the CUDA module and asks the CUDA runtime once; later calls return the
// cached answer.
absl::Status CudaDeviceAvailable();

class CudaAllocator final : public Allocator {
 public:
  // How the pool obtains memory from the system. Empty functions mean cudaMalloc/cudaFree;
  // tests substitute host memory to exercise the pool without a GPU.
  struct SystemMemory {
    std::function<absl::StatusOr<void*>(size_t bytes)> allocate;
    std::function<void(void* p)> free;
  };

  struct Options {
    int64_t memory_limit = 0;  // bytes; 0 (or negative) = unlimited
    SystemMemory system;
  };

  CudaAllocator();
  explicit CudaAllocator(Options options);
  // Returns every cached block to the system.
  // REQUIRES: every block has been returned (blocks still in use are not freed).
  ~CudaAllocator() override;

  CudaAllocator(const CudaAllocator&) = delete;
  CudaAllocator& operator=(const CudaAllocator&) = delete;

  // Device memory, aligned to at least kTensorAlignment (cudaMalloc aligns to 256 bytes).
  // ResourceExhausted on the memory limit, device out of memory or an injected fault;
  // Unavailable/Unimplemented (from CudaDeviceAvailable) when there is no device to ask.
  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Deallocate(void* p, size_t bytes) override;
  Device device() const override { return Device::kCUDA; }
  AllocatorStats stats() const override;
  void FailNthAllocation(int64_t n) override;

  // As PoolAllocator::SetMemoryLimit and PoolAllocator::Trim.
  void SetMemoryLimit(int64_t bytes);
  void Trim() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynvm

#endif  // DYNVM_ALLOCATOR_CUDA_ALLOCATOR_H_
