#include "allocator/pool_allocator.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"

namespace dynvm {
namespace {

// Classes 0..63 step by 64 bytes up to 4 KiB; each power of two above that (4 KiB..256 MiB)
// adds four classes.
constexpr size_t kSmallStep = kTensorAlignment;
constexpr size_t kSmallMax = 4096;
constexpr int kLog2SmallMax = 12;
constexpr int kNumSmallClasses = static_cast<int>(kSmallMax / kSmallStep);
constexpr int kClassesPerOctave = 4;
constexpr int kNumClasses =
    kNumSmallClasses +
    kClassesPerOctave * (std::bit_width(PoolAllocator::kMaxClassBytes) - 1 - kLog2SmallMax);
static_assert(kNumClasses == 128);

constexpr size_t RoundUp(size_t x, size_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

// For kSmallMax < bytes <= kMaxClassBytes: the power of two just below `bytes` (exclusive
// when `bytes` is itself a power of two), i.e. the octave (2^k, 2^(k+1)] holding `bytes`.
constexpr int OctaveLog2(size_t bytes) { return std::bit_width(bytes - 1) - 1; }

// REQUIRES: `class_bytes` is a class size <= kMaxClassBytes.
constexpr int ClassIndex(size_t class_bytes) {
  if (class_bytes <= kSmallMax) return static_cast<int>(class_bytes / kSmallStep) - 1;
  const int k = OctaveLog2(class_bytes);
  const size_t step = size_t{1} << (k - 2);
  const size_t j = (class_bytes - (size_t{1} << k)) / step;  // 1..4
  return kNumSmallClasses + (k - kLog2SmallMax) * kClassesPerOctave + static_cast<int>(j) - 1;
}

constexpr size_t ClassBytesAt(int index) {
  if (index < kNumSmallClasses) return static_cast<size_t>(index + 1) * kSmallStep;
  const int k = kLog2SmallMax + (index - kNumSmallClasses) / kClassesPerOctave;
  const size_t j = static_cast<size_t>((index - kNumSmallClasses) % kClassesPerOctave) + 1;
  return (size_t{1} << k) + j * (size_t{1} << (k - 2));
}

static_assert(ClassIndex(64) == 0 && ClassIndex(4096) == 63 && ClassIndex(5 << 10) == 64);
static_assert(ClassIndex(PoolAllocator::kMaxClassBytes) == kNumClasses - 1);
static_assert(ClassBytesAt(kNumClasses - 1) == PoolAllocator::kMaxClassBytes);
static_assert(ClassBytesAt(ClassIndex(14 << 10)) == (14 << 10));

// A cached block's first bytes link it into its class's free list (every block is >= 64 bytes
// and 64-byte aligned, so the link always fits).
struct FreeBlock {
  FreeBlock* next;
};

}  // namespace

struct PoolAllocator::Impl {
  std::mutex mu;
  AllocatorStats stats ABSL_GUARDED_BY(mu);
  int64_t memory_limit ABSL_GUARDED_BY(mu) = 0;
  int64_t fail_countdown ABSL_GUARDED_BY(mu) = 0;
  // One free list per class, split by origin: Trim() and the memory limit release only
  // system blocks; reservation blocks must never reach std::free.
  std::array<FreeBlock*, kNumClasses> free_system ABSL_GUARDED_BY(mu) = {};
  std::array<FreeBlock*, kNumClasses> free_reserved ABSL_GUARDED_BY(mu) = {};
  int64_t cached_system_bytes ABSL_GUARDED_BY(mu) = 0;
  int64_t window_peak ABSL_GUARDED_BY(mu) = 0;  // TakeWindowPeak's
  uint8_t* reservation ABSL_GUARDED_BY(mu) = nullptr;
  size_t reservation_bytes ABSL_GUARDED_BY(mu) = 0;
  size_t reservation_used ABSL_GUARDED_BY(mu) = 0;  // the bump pointer's offset

  bool Limited() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return memory_limit > 0; }

  bool InReservation(const void* p) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const auto* b = static_cast<const uint8_t*>(p);
    return reservation != nullptr && b >= reservation && b < reservation + reservation_bytes;
  }

  // Pops a cached block of class `index`, preferring reservation blocks (they cannot be
  // trimmed, so keeping system blocks cached gives Trim() something to return).
  void* PopFree(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    for (FreeBlock** head : {&free_reserved[index], &free_system[index]}) {
      if (FreeBlock* b = *head; b != nullptr) {
        *head = b->next;
        if (head == &free_system[index]) {
          cached_system_bytes -= static_cast<int64_t>(ClassBytesAt(index));
        }
        b->~FreeBlock();
        return b;
      }
    }
    return nullptr;
  }

  void PushFree(void* p, int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const bool reserved = InReservation(p);
    FreeBlock*& head = reserved ? free_reserved[index] : free_system[index];
    head = new (p) FreeBlock{head};
    if (!reserved) cached_system_bytes += static_cast<int64_t>(ClassBytesAt(index));
  }

  void* Carve(size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (reservation == nullptr || reservation_bytes - reservation_used < size) return nullptr;
    void* p = reservation + reservation_used;
    reservation_used += size;  // sizes are multiples of kTensorAlignment: alignment holds
    return p;
  }

  void SystemFree(void* p, size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::free(p);
    ++stats.system_frees;
    stats.bytes_reserved -= static_cast<int64_t>(size);
  }

  // Returns cached system blocks to the system, largest classes first, until at least
  // `target` bytes are released or the cache is empty. Returns the bytes released.
  int64_t ReleaseCached(int64_t target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    int64_t released = 0;
    for (int i = kNumClasses - 1; i >= 0 && released < target; --i) {
      const size_t size = ClassBytesAt(i);
      while (free_system[i] != nullptr && released < target) {
        FreeBlock* b = free_system[i];
        free_system[i] = b->next;
        b->~FreeBlock();
        SystemFree(b, size);
        cached_system_bytes -= static_cast<int64_t>(size);
        released += static_cast<int64_t>(size);
      }
    }
    return released;
  }

  // Makes bytes_reserved + `size` fit the limit by releasing cached blocks if that suffices;
  // releases nothing and returns false otherwise.
  bool MakeRoom(size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (!Limited()) return true;
    const int64_t excess = stats.bytes_reserved + static_cast<int64_t>(size) - memory_limit;
    if (excess <= 0) return true;
    if (excess > cached_system_bytes) return false;
    ReleaseCached(excess);
    return true;
  }

  // std::aligned_alloc, retried once after emptying the cache if the system refuses.
  void* SystemAllocate(size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    void* p = std::aligned_alloc(kTensorAlignment, size);
    if (p == nullptr && cached_system_bytes > 0) {
      ReleaseCached(std::numeric_limits<int64_t>::max());
      p = std::aligned_alloc(kTensorAlignment, size);
    }
    if (p != nullptr) {
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
    if (bytes > kMaxRequestBytes) {
      ++stats.failed_allocs;
      return absl::ResourceExhaustedError(absl::StrCat("PoolAllocator: a request of ", bytes,
                                                       " bytes exceeds the maximum of ",
                                                       kMaxRequestBytes, " bytes"));
    }
    const size_t size = ClassSize(bytes);
    void* p = nullptr;
    if (size <= kMaxClassBytes) {
      p = PopFree(ClassIndex(size));
      if (p == nullptr) p = Carve(size);
      if (p != nullptr) ++stats.pool_hits;
    }
    if (p == nullptr) {
      if (!MakeRoom(size)) {
        ++stats.failed_allocs;
        return absl::ResourceExhaustedError(absl::StrCat(
            "PoolAllocator: allocating ", bytes, " bytes (a ", size,
            "-byte block) would exceed the memory limit of ", memory_limit, " bytes (",
            stats.bytes_reserved, " bytes reserved, ", stats.bytes_in_use, " in use)"));
      }
      p = SystemAllocate(size);
      if (p == nullptr) {
        ++stats.failed_allocs;
        return absl::ResourceExhaustedError(absl::StrCat(
            "PoolAllocator: the system is out of memory allocating ", bytes, " bytes"));
      }
    }
    stats.bytes_in_use += static_cast<int64_t>(size);
    stats.peak_bytes_in_use = std::max(stats.peak_bytes_in_use, stats.bytes_in_use);
    window_peak = std::max(window_peak, stats.bytes_in_use);
    return p;
  }

  void Deallocate(void* p, size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const size_t size = ClassSize(bytes);
    assert(size != 0 && reinterpret_cast<uintptr_t>(p) % kTensorAlignment == 0);
    stats.bytes_in_use -= static_cast<int64_t>(size);
    const bool over_limit = Limited() && stats.bytes_reserved > memory_limit;
    if (size > kMaxClassBytes || (over_limit && !InReservation(p))) {
      // Huge blocks are never cached; nor is anything while a lowered limit is exceeded.
      SystemFree(p, size);
      return;
    }
    PushFree(p, ClassIndex(size));
  }

  absl::Status Reserve(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (bytes <= 0 || reservation != nullptr) return absl::OkStatus();
    if (static_cast<uint64_t>(bytes) > kMaxRequestBytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("PoolAllocator: a reservation of ", bytes, " bytes is too large"));
    }
    const size_t size = RoundUp(static_cast<size_t>(bytes), kTensorAlignment);
    if (!MakeRoom(size)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "PoolAllocator: reserving ", bytes, " bytes would exceed the memory limit of ",
          memory_limit, " bytes (", stats.bytes_reserved, " bytes reserved)"));
    }
    void* p = SystemAllocate(size);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("PoolAllocator: the system is out of memory reserving ", bytes, " bytes"));
    }
    reservation = static_cast<uint8_t*>(p);
    reservation_bytes = size;
    reservation_used = 0;
    return absl::OkStatus();
  }
};

size_t PoolAllocator::ClassSize(size_t bytes) {
  if (bytes > kMaxRequestBytes) return 0;
  if (bytes <= kSmallMax) return bytes == 0 ? kSmallStep : RoundUp(bytes, kSmallStep);
  if (bytes > kMaxClassBytes) return RoundUp(bytes, kTensorAlignment);
  return RoundUp(bytes, size_t{1} << (OctaveLog2(bytes) - 2));
}

PoolAllocator::PoolAllocator() : PoolAllocator(Options{}) {}

PoolAllocator::PoolAllocator(Options options) : impl_(std::make_unique<Impl>()) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->memory_limit = options.memory_limit;
  // A failed reservation is not fatal: the allocator works without one (see Options).
  impl_->Reserve(options.reservation).IgnoreError();
}

PoolAllocator::~PoolAllocator() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->ReleaseCached(std::numeric_limits<int64_t>::max());
  if (impl_->reservation != nullptr) {
    impl_->SystemFree(impl_->reservation, impl_->reservation_bytes);
    impl_->reservation = nullptr;
  }
}

absl::StatusOr<void*> PoolAllocator::Allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->Allocate(bytes);
}

void PoolAllocator::Deallocate(void* p, size_t bytes) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->Deallocate(p, bytes);
}

AllocatorStats PoolAllocator::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

void PoolAllocator::FailNthAllocation(int64_t n) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->fail_countdown = std::max<int64_t>(n, 0);
}

absl::Status PoolAllocator::Reserve(int64_t bytes) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->Reserve(bytes);
}

void PoolAllocator::SetMemoryLimit(int64_t bytes) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->memory_limit = bytes;
  if (impl_->Limited() && impl_->stats.bytes_reserved > bytes) {
    impl_->ReleaseCached(impl_->stats.bytes_reserved - bytes);
  }
}

void PoolAllocator::Trim() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->ReleaseCached(std::numeric_limits<int64_t>::max());
}

int64_t PoolAllocator::TrimTo(int64_t bytes) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const int64_t excess = impl_->stats.bytes_reserved - std::max<int64_t>(bytes, 0);
  return excess > 0 ? impl_->ReleaseCached(excess) : 0;
}

int64_t PoolAllocator::TakeWindowPeak() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const int64_t peak = std::max(impl_->window_peak, impl_->stats.bytes_in_use);
  impl_->window_peak = impl_->stats.bytes_in_use;
  return peak;
}

}  // namespace dynvm
