#include "allocator/cuda_allocator.h"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "allocator/cuda_module.h"
#include "allocator/pool_allocator.h"
#include "common/status_macros.h"

namespace dynvm {

bool CudaBuildEnabled() {
#if defined(DYNVM_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

absl::Status CudaDeviceAvailable() {
  DYNVM_ASSIGN_OR_RETURN(const CudaModule* module, LoadCudaModule());
  return module->api->device_available();
}

struct CudaAllocator::Impl {
  std::mutex mu;
  AllocatorStats stats ABSL_GUARDED_BY(mu);
  int64_t memory_limit ABSL_GUARDED_BY(mu) = 0;
  int64_t fail_countdown ABSL_GUARDED_BY(mu) = 0;
  SystemMemory system;
  // Cached blocks by class size, largest class first (the order the limit releases them in).
  std::map<size_t, std::vector<void*>, std::greater<>> free ABSL_GUARDED_BY(mu);
  int64_t cached_bytes ABSL_GUARDED_BY(mu) = 0;

  bool Limited() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return memory_limit > 0; }

  absl::StatusOr<void*> SystemAllocateOnce(size_t size) {
    if (system.allocate) return system.allocate(size);
    // The module's cudaMalloc (loaded here at the latest: a first device allocation).
    DYNVM_ASSIGN_OR_RETURN(const CudaModule* module, LoadCudaModule());
    DYNVM_RETURN_IF_ERROR(module->api->device_available());
    return module->api->allocate(size);
  }

  void SystemFree(void* p, size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (system.free) {
      system.free(p);
    } else if (absl::StatusOr<const CudaModule*> module = LoadCudaModule(); module.ok()) {
      (*module)->api->deallocate(p);  // the module loaded when the block was allocated
    }
    ++stats.system_frees;
    stats.bytes_reserved -= static_cast<int64_t>(size);
  }

  // Returns cached blocks to the system, largest classes first, until at least `target` bytes
  // are released or the cache is empty. Returns the bytes released.
  int64_t ReleaseCached(int64_t target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    int64_t released = 0;
    for (auto it = free.begin(); it != free.end() && released < target;) {
      const size_t size = it->first;
      std::vector<void*>& list = it->second;
      while (!list.empty() && released < target) {
        SystemFree(list.back(), size);
        list.pop_back();
        cached_bytes -= static_cast<int64_t>(size);
        released += static_cast<int64_t>(size);
      }
      it = list.empty() ? free.erase(it) : std::next(it);
    }
    return released;
  }

  bool MakeRoom(size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (!Limited()) return true;
    const int64_t excess = stats.bytes_reserved + static_cast<int64_t>(size) - memory_limit;
    if (excess <= 0) return true;
    if (excess > cached_bytes) return false;
    ReleaseCached(excess);
    return true;
  }

  // The system allocation, retried once after emptying the cache when the device is full.
  absl::StatusOr<void*> SystemAllocate(size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    absl::StatusOr<void*> p = SystemAllocateOnce(size);
    if (!p.ok() && absl::IsResourceExhausted(p.status()) && cached_bytes > 0) {
      ReleaseCached(std::numeric_limits<int64_t>::max());
      p = SystemAllocateOnce(size);
    }
    if (p.ok()) {
      ++stats.system_allocs;
      stats.bytes_reserved += static_cast<int64_t>(size);
    }
    return p;
  }

  absl::StatusOr<void*> Allocate(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ++stats.allocs;
    if (fail_countdown > 0 && --fail_countdown == 0) {
      ++stats.failed_allocs;
      return absl::ResourceExhaustedError("injected allocation failure");
    }
    if (bytes > PoolAllocator::kMaxRequestBytes) {
      ++stats.failed_allocs;
      return absl::ResourceExhaustedError(absl::StrCat("CudaAllocator: a request of ", bytes,
                                                       " bytes exceeds the maximum of ",
                                                       PoolAllocator::kMaxRequestBytes, " bytes"));
    }
    const size_t size = PoolAllocator::ClassSize(bytes);
    void* p = nullptr;
    if (size <= PoolAllocator::kMaxClassBytes) {
      auto it = free.find(size);
      if (it != free.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        cached_bytes -= static_cast<int64_t>(size);
        ++stats.pool_hits;
      }
    }
    if (p == nullptr) {
      if (!MakeRoom(size)) {
        ++stats.failed_allocs;
        return absl::ResourceExhaustedError(absl::StrCat(
            "CudaAllocator: allocating ", bytes, " bytes (a ", size,
            "-byte block) would exceed the device memory limit of ", memory_limit, " bytes (",
            stats.bytes_reserved, " bytes reserved, ", stats.bytes_in_use, " in use)"));
      }
      absl::StatusOr<void*> sys = SystemAllocate(size);
      if (!sys.ok()) {
        ++stats.failed_allocs;
        if (absl::IsResourceExhausted(sys.status())) {
          return absl::ResourceExhaustedError(
              absl::StrCat("CudaAllocator: the device is out of memory allocating ", bytes,
                           " bytes (", sys.status().message(), ")"));
        }
        return sys.status();
      }
      p = *sys;
    }
    stats.bytes_in_use += static_cast<int64_t>(size);
    stats.peak_bytes_in_use = std::max(stats.peak_bytes_in_use, stats.bytes_in_use);
    return p;
  }

  void Deallocate(void* p, size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const size_t size = PoolAllocator::ClassSize(bytes);
    stats.bytes_in_use -= static_cast<int64_t>(size);
    const bool over_limit = Limited() && stats.bytes_reserved > memory_limit;
    if (size > PoolAllocator::kMaxClassBytes || over_limit) {
      SystemFree(p, size);
      return;
    }
    free[size].push_back(p);
    cached_bytes += static_cast<int64_t>(size);
  }
};

CudaAllocator::CudaAllocator() : CudaAllocator(Options{}) {}

CudaAllocator::CudaAllocator(Options options) : impl_(std::make_unique<Impl>()) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->memory_limit = options.memory_limit;
  impl_->system = std::move(options.system);
}

CudaAllocator::~CudaAllocator() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->ReleaseCached(std::numeric_limits<int64_t>::max());
}

absl::StatusOr<void*> CudaAllocator::Allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->Allocate(bytes);
}

void CudaAllocator::Deallocate(void* p, size_t bytes) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->Deallocate(p, bytes);
}

AllocatorStats CudaAllocator::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

void CudaAllocator::FailNthAllocation(int64_t n) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->fail_countdown = std::max<int64_t>(n, 0);
}

void CudaAllocator::SetMemoryLimit(int64_t bytes) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->memory_limit = bytes;
  if (impl_->Limited() && impl_->stats.bytes_reserved > bytes) {
    impl_->ReleaseCached(impl_->stats.bytes_reserved - bytes);
  }
}

void CudaAllocator::Trim() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->ReleaseCached(std::numeric_limits<int64_t>::max());
}

}  // namespace dynvm
