#include "allocator/heap_allocator.h"

#include <cstdlib>
#include <string>

namespace dynvm {

HeapAllocator& HeapAllocator::Get() {
  static auto* instance = new HeapAllocator();
  return *instance;
}

absl::StatusOr<void*> HeapAllocator::Allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.allocs;
  if (fail_countdown_ > 0 && --fail_countdown_ == 0) {
    ++stats_.failed_allocs;
    return absl::ResourceExhaustedError("injected allocation failure (heap)");
  }
  const size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  void* p = std::aligned_alloc(kTensorAlignment, rounded == 0 ? kTensorAlignment : rounded);
  if (p == nullptr) {
    ++stats_.failed_allocs;
    return absl::ResourceExhaustedError("out of memory allocating " + std::to_string(bytes) +
                                        " bytes");
  }
  ++stats_.system_allocs;
  stats_.bytes_in_use += static_cast<int64_t>(bytes);
  stats_.bytes_reserved += static_cast<int64_t>(bytes);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return p;
}

void HeapAllocator::Deallocate(void* p, size_t bytes) {
  std::free(p);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.system_frees;
  stats_.bytes_in_use -= static_cast<int64_t>(bytes);
  stats_.bytes_reserved -= static_cast<int64_t>(bytes);
}

AllocatorStats HeapAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void HeapAllocator::FailNthAllocation(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_countdown_ = n;
}

}  // namespace dynvm
