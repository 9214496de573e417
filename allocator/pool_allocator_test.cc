#include "allocator/pool_allocator.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "allocator/storage.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dynvm {
namespace {

using ::testing::HasSubstr;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

bool IsAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kTensorAlignment == 0; }

// Allocates or fails the test; keeps test bodies short.
void* MustAllocate(PoolAllocator& a, size_t bytes) {
  absl::StatusOr<void*> p = a.Allocate(bytes);
  EXPECT_TRUE(p.ok()) << "Allocate(" << bytes << "): " << p.status();
  return p.ok() ? *p : nullptr;
}

TEST(PoolAllocatorClassSizeTest, SmallClassesStepBy64Bytes) {
  EXPECT_EQ(PoolAllocator::ClassSize(0), 64u);
  EXPECT_EQ(PoolAllocator::ClassSize(1), 64u);
  EXPECT_EQ(PoolAllocator::ClassSize(64), 64u);
  EXPECT_EQ(PoolAllocator::ClassSize(65), 128u);
  EXPECT_EQ(PoolAllocator::ClassSize(1000), 1024u);
  EXPECT_EQ(PoolAllocator::ClassSize(4095), 4096u);
  EXPECT_EQ(PoolAllocator::ClassSize(4096), 4096u);
}

TEST(PoolAllocatorClassSizeTest, LargeClassesStepByQuarterPowersOfTwo) {
  EXPECT_EQ(PoolAllocator::ClassSize(4097), 5 * kKiB);
  EXPECT_EQ(PoolAllocator::ClassSize(5 * kKiB), 5 * kKiB);
  EXPECT_EQ(PoolAllocator::ClassSize(5 * kKiB + 1), 6 * kKiB);
  EXPECT_EQ(PoolAllocator::ClassSize(7 * kKiB + 1), 8 * kKiB);
  EXPECT_EQ(PoolAllocator::ClassSize(8 * kKiB), 8 * kKiB);
  EXPECT_EQ(PoolAllocator::ClassSize(8 * kKiB + 1), 10 * kKiB);
  EXPECT_EQ(PoolAllocator::ClassSize(12 * kKiB + 1), 14 * kKiB);
  EXPECT_EQ(PoolAllocator::ClassSize(14 * kKiB + 1), 16 * kKiB);
  EXPECT_EQ(PoolAllocator::ClassSize(kMiB + 1), kMiB + kMiB / 4);
  EXPECT_EQ(PoolAllocator::ClassSize(3 * kMiB), 3 * kMiB);
  EXPECT_EQ(PoolAllocator::ClassSize(PoolAllocator::kMaxClassBytes), PoolAllocator::kMaxClassBytes);
}

TEST(PoolAllocatorClassSizeTest, HugeRequestsRoundToAlignmentOnly) {
  const size_t huge = PoolAllocator::kMaxClassBytes + 1;
  EXPECT_EQ(PoolAllocator::ClassSize(huge), PoolAllocator::kMaxClassBytes + 64);
  EXPECT_EQ(PoolAllocator::ClassSize(PoolAllocator::kMaxRequestBytes),
            PoolAllocator::kMaxRequestBytes);
  EXPECT_EQ(PoolAllocator::ClassSize(PoolAllocator::kMaxRequestBytes + 1), 0u);
  EXPECT_EQ(PoolAllocator::ClassSize(std::numeric_limits<size_t>::max()), 0u);
}

TEST(PoolAllocatorClassSizeTest, ClassesCoverEverySizeWithBoundedWaste) {
  size_t previous = 0;
  for (size_t bytes = 0; bytes <= 300 * kKiB; bytes += (bytes < 20 * kKiB ? 1 : 61)) {
    const size_t c = PoolAllocator::ClassSize(bytes);
    ASSERT_GE(c, bytes);
    ASSERT_GE(c, previous) << "classes must be monotonic at " << bytes;
    ASSERT_EQ(c % kTensorAlignment, 0u) << bytes;
    ASSERT_EQ(PoolAllocator::ClassSize(c), c) << "a class size is its own class: " << c;
    if (bytes > 4096) {
      ASSERT_LT(c, bytes + bytes / 4) << "waste must stay under 25% at " << bytes;
    }
    previous = c;
  }
}

TEST(PoolAllocatorTest, EveryBlockIsAligned) {
  PoolAllocator a;
  std::vector<std::pair<void*, size_t>> blocks;
  for (size_t bytes : {0ul, 1ul, 7ul, 63ul, 64ul, 65ul, 100ul, 1000ul, 4095ul, 4097ul, 9999ul,
                       100000ul, 3 * kMiB + 5}) {
    void* p = MustAllocate(a, bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(IsAligned(p)) << bytes;
    std::memset(p, 0xAB, bytes);  // the whole request is writable
    blocks.emplace_back(p, bytes);
  }
  for (auto [p, bytes] : blocks) a.Deallocate(p, bytes);
  // Reused blocks are aligned too.
  for (auto [p, bytes] : blocks) {
    void* q = MustAllocate(a, bytes);
    EXPECT_TRUE(IsAligned(q)) << bytes;
    a.Deallocate(q, bytes);
  }
  EXPECT_EQ(a.stats().bytes_in_use, 0);
}

TEST(PoolAllocatorTest, FreedBlockIsReusedWithoutSystemCall) {
  PoolAllocator a;
  void* p = MustAllocate(a, 1000);
  a.Deallocate(p, 1000);
  void* q = MustAllocate(a, 1000);
  EXPECT_EQ(q, p);
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.system_allocs, 1);
  EXPECT_EQ(s.system_frees, 0);
  EXPECT_EQ(s.allocs, 2);
  EXPECT_EQ(s.pool_hits, 1);
  a.Deallocate(q, 1000);
}

TEST(PoolAllocatorTest, FreeListServesAnySizeOfTheClass) {
  PoolAllocator a;
  void* p = MustAllocate(a, 4097);  // class 5 KiB
  a.Deallocate(p, 4097);
  void* q = MustAllocate(a, 5 * kKiB);
  EXPECT_EQ(q, p);
  a.Deallocate(q, 5 * kKiB);
  void* r = MustAllocate(a, 4600);
  EXPECT_EQ(r, p);
  a.Deallocate(r, 4600);

  void* small = MustAllocate(a, 65);  // class 128
  a.Deallocate(small, 65);
  void* small2 = MustAllocate(a, 128);
  EXPECT_EQ(small2, small);
  a.Deallocate(small2, 128);

  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.system_allocs, 2);
  EXPECT_EQ(s.pool_hits, 3);
}

TEST(PoolAllocatorTest, DifferentClassesDoNotShareBlocks) {
  PoolAllocator a;
  void* p = MustAllocate(a, 64);
  a.Deallocate(p, 64);
  void* q = MustAllocate(a, 65);
  EXPECT_EQ(a.stats().system_allocs, 2);
  EXPECT_EQ(a.stats().pool_hits, 0);
  a.Deallocate(q, 65);
}

TEST(PoolAllocatorTest, BytesInUseCountsClassBytesAndPeakIsTracked) {
  PoolAllocator a;
  void* x = MustAllocate(a, 1000);  // 1024
  void* y = MustAllocate(a, 2000);  // 2048
  EXPECT_EQ(a.stats().bytes_in_use, 3072);
  a.Deallocate(x, 1000);
  void* z = MustAllocate(a, 1);  // 64
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 2048 + 64);
  EXPECT_EQ(s.peak_bytes_in_use, 3072);
  EXPECT_EQ(s.bytes_reserved, 1024 + 2048 + 64);  // the 1024 block is cached
  a.Deallocate(y, 2000);
  a.Deallocate(z, 1);
  s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.peak_bytes_in_use, 3072);
}

TEST(PoolAllocatorTest, ZeroByteRequestsGetDistinctAlignedBlocks) {
  PoolAllocator a;
  void* p = MustAllocate(a, 0);
  void* q = MustAllocate(a, 0);
  ASSERT_NE(p, nullptr);
  ASSERT_NE(q, nullptr);
  EXPECT_NE(p, q);
  EXPECT_TRUE(IsAligned(p));
  EXPECT_TRUE(IsAligned(q));
  EXPECT_EQ(a.stats().bytes_in_use, 128);
  a.Deallocate(p, 0);
  a.Deallocate(q, 0);
  EXPECT_EQ(a.stats().bytes_in_use, 0);
}

TEST(PoolAllocatorTest, TrimReleasesCachedBlocks) {
  PoolAllocator a;
  std::vector<std::pair<void*, size_t>> blocks;
  for (size_t bytes : {64ul, 100ul, 5000ul, 70000ul, kMiB}) {
    blocks.emplace_back(MustAllocate(a, bytes), bytes);
  }
  void* kept = MustAllocate(a, 300);
  for (auto [p, bytes] : blocks) a.Deallocate(p, bytes);
  const int64_t reserved_before = a.stats().bytes_reserved;
  a.Trim();
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.bytes_reserved, 320);  // only the block in use
  EXPECT_LT(s.bytes_reserved, reserved_before);
  EXPECT_EQ(s.system_frees, 5);
  EXPECT_EQ(s.bytes_in_use, 320);
  // After a trim the system is asked again.
  void* p = MustAllocate(a, 100);
  EXPECT_EQ(a.stats().system_allocs, 7);
  a.Deallocate(p, 100);
  a.Deallocate(kept, 300);
  a.Trim();
  s = a.stats();
  EXPECT_EQ(s.bytes_reserved, 0);
  EXPECT_EQ(s.system_allocs, s.system_frees);
}

TEST(PoolAllocatorTest, HugeRequestsBypassTheCache) {
  PoolAllocator a;
  const size_t huge = PoolAllocator::kMaxClassBytes + 1;
  void* p = MustAllocate(a, huge);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(IsAligned(p));
  static_cast<uint8_t*>(p)[huge - 1] = 1;
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.bytes_in_use, static_cast<int64_t>(PoolAllocator::ClassSize(huge)));
  EXPECT_EQ(s.bytes_reserved, s.bytes_in_use);
  a.Deallocate(p, huge);
  s = a.stats();
  EXPECT_EQ(s.system_frees, 1);
  EXPECT_EQ(s.bytes_reserved, 0);
  EXPECT_EQ(s.bytes_in_use, 0);
}

TEST(PoolAllocatorTest, HugeRequestsCountAgainstTheLimit) {
  PoolAllocator a(PoolAllocator::Options{.memory_limit = 64 * kMiB});
  absl::StatusOr<void*> p = a.Allocate(PoolAllocator::kMaxClassBytes + 1);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a.stats().system_allocs, 0);
}

TEST(PoolAllocatorTest, AbsurdRequestsFailCleanly) {
  PoolAllocator a;
  for (size_t bytes : {std::numeric_limits<size_t>::max(), PoolAllocator::kMaxRequestBytes + 1}) {
    absl::StatusOr<void*> p = a.Allocate(bytes);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(p.status().message(), HasSubstr(absl::StrCat(bytes)));
  }
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.failed_allocs, 2);
  EXPECT_EQ(s.system_allocs, 0);
  EXPECT_EQ(s.bytes_reserved, 0);
}

TEST(PoolAllocatorTest, MemoryLimitRefusesAndAllocatorStaysUsable) {
  PoolAllocator a(PoolAllocator::Options{.memory_limit = 10000});
  void* x = MustAllocate(a, 4096);
  void* y = MustAllocate(a, 4096);
  absl::StatusOr<void*> z = a.Allocate(4033);
  ASSERT_FALSE(z.ok());
  EXPECT_EQ(z.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(z.status().message(), HasSubstr("4033 bytes"));
  EXPECT_THAT(z.status().message(), HasSubstr("memory limit of 10000 bytes"));
  AllocatorStats s = a.stats();
  EXPECT_EQ(PoolAllocator::ClassSize(4033), 4096u);
  EXPECT_EQ(s.failed_allocs, 1);
  EXPECT_EQ(s.bytes_reserved, 8192);
  EXPECT_EQ(s.bytes_in_use, 8192);

  // Still usable: a returned block serves the next request, and small ones still fit.
  a.Deallocate(y, 4096);
  void* w = MustAllocate(a, 4033);
  EXPECT_EQ(w, y);
  EXPECT_EQ(a.stats().system_allocs, 2);
  void* v = MustAllocate(a, 1000);
  EXPECT_NE(v, nullptr);
  s = a.stats();
  EXPECT_LE(s.bytes_reserved, 10000);
  a.Deallocate(x, 4096);
  a.Deallocate(w, 4033);
  a.Deallocate(v, 1000);
  EXPECT_EQ(a.stats().bytes_in_use, 0);
}

TEST(PoolAllocatorTest, MemoryLimitReleasesCachedBlocksFirst) {
  PoolAllocator a(PoolAllocator::Options{.memory_limit = 8192});
  void* big = MustAllocate(a, 8192);
  a.Deallocate(big, 8192);  // cached: bytes_reserved stays 8192
  EXPECT_EQ(a.stats().bytes_reserved, 8192);
  void* p = MustAllocate(a, 4096);  // fits only once the cached block is released
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.system_frees, 1);
  EXPECT_EQ(s.bytes_reserved, 4096);
  EXPECT_EQ(s.failed_allocs, 0);
  a.Deallocate(p, 4096);
}

TEST(PoolAllocatorTest, HopelessRequestKeepsTheCache) {
  PoolAllocator a(PoolAllocator::Options{.memory_limit = 8192});
  void* x = MustAllocate(a, 4096);
  void* y = MustAllocate(a, 4096);
  a.Deallocate(y, 4096);                // 4096 cached, 4096 in use
  EXPECT_FALSE(a.Allocate(8192).ok());  // would need 8192 free even after releasing the cache
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.system_frees, 0);
  EXPECT_EQ(s.bytes_reserved, 8192);
  void* z = MustAllocate(a, 4096);
  EXPECT_EQ(z, y);  // the cached block survived the failure
  a.Deallocate(x, 4096);
  a.Deallocate(z, 4096);
}

TEST(PoolAllocatorTest, LoweringTheLimitReleasesCachedBlocks) {
  PoolAllocator a;
  void* x = MustAllocate(a, 4096);
  void* y = MustAllocate(a, 4096);
  void* z = MustAllocate(a, 4096);
  a.Deallocate(y, 4096);
  a.Deallocate(z, 4096);
  a.SetMemoryLimit(6000);
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.bytes_reserved, 4096);
  EXPECT_EQ(s.system_frees, 2);
  EXPECT_FALSE(a.Allocate(4096).ok());
  a.SetMemoryLimit(0);  // unlimited again
  void* w = MustAllocate(a, 4096);
  a.Deallocate(w, 4096);
  a.Deallocate(x, 4096);
}

TEST(PoolAllocatorTest, BlocksReturnedWhileOverALoweredLimitAreNotCached) {
  PoolAllocator a;
  void* x = MustAllocate(a, 4096);
  void* y = MustAllocate(a, 4096);
  a.SetMemoryLimit(4096);  // both in use: nothing to release yet
  EXPECT_EQ(a.stats().bytes_reserved, 8192);
  a.Deallocate(x, 4096);
  EXPECT_EQ(a.stats().bytes_reserved, 4096);
  a.Deallocate(y, 4096);  // back under the limit: cached
  EXPECT_EQ(a.stats().bytes_reserved, 4096);
  EXPECT_EQ(a.stats().system_frees, 1);
}

TEST(PoolAllocatorTest, ReservationIsCarvedBeforeAskingTheSystem) {
  PoolAllocator a(PoolAllocator::Options{.reservation = static_cast<int64_t>(kMiB)});
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.system_allocs, 1);
  EXPECT_EQ(s.bytes_reserved, static_cast<int64_t>(kMiB));
  EXPECT_EQ(s.bytes_in_use, 0);

  // 100 blocks of mixed classes, 8 KiB at most each: well inside the reservation.
  std::vector<std::pair<uint8_t*, size_t>> blocks;
  for (int i = 0; i < 100; ++i) {
    const size_t bytes = 1 + static_cast<size_t>(i) * 79;
    auto* p = static_cast<uint8_t*>(MustAllocate(a, bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(IsAligned(p));
    std::memset(p, i, bytes);
    blocks.emplace_back(p, bytes);
  }
  s = a.stats();
  EXPECT_EQ(s.system_allocs, 1);
  EXPECT_EQ(s.pool_hits, 100);
  EXPECT_EQ(s.bytes_reserved, static_cast<int64_t>(kMiB));

  // Carved blocks are disjoint and lie inside one span of at most the reservation's size.
  std::vector<std::pair<uint8_t*, size_t>> sorted = blocks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i) {
    EXPECT_LE(sorted[i - 1].first + PoolAllocator::ClassSize(sorted[i - 1].second),
              sorted[i].first);
  }
  EXPECT_LE(
      sorted.back().first + PoolAllocator::ClassSize(sorted.back().second) - sorted.front().first,
      static_cast<ptrdiff_t>(kMiB));
  for (size_t i = 0; i < blocks.size(); ++i) {  // no block overwrote another
    EXPECT_EQ(blocks[i].first[0], static_cast<uint8_t>(i));
    EXPECT_EQ(blocks[i].first[blocks[i].second - 1], static_cast<uint8_t>(i));
  }

  for (auto [p, bytes] : blocks) a.Deallocate(p, bytes);
  // Trim keeps the reservation and its blocks (none of them may reach free()).
  a.Trim();
  s = a.stats();
  EXPECT_EQ(s.system_frees, 0);
  EXPECT_EQ(s.bytes_reserved, static_cast<int64_t>(kMiB));
  // Freed reservation blocks are reused.
  void* again = MustAllocate(a, blocks[10].second);
  EXPECT_EQ(again, blocks[10].first);
  a.Deallocate(again, blocks[10].second);
  EXPECT_EQ(a.stats().system_allocs, 1);
}

TEST(PoolAllocatorTest, SystemIsAskedOnlyOnceTheReservationIsUsedUp) {
  PoolAllocator a(PoolAllocator::Options{.reservation = 64 * kKiB});
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(MustAllocate(a, 4 * kKiB));
  EXPECT_EQ(a.stats().system_allocs, 1);
  void* extra = MustAllocate(a, 64);  // the reservation is exactly used up
  EXPECT_EQ(a.stats().system_allocs, 2);
  a.Deallocate(extra, 64);
  for (void* p : blocks) a.Deallocate(p, 4 * kKiB);
  a.Trim();
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.system_frees, 1);  // only the system block
  EXPECT_EQ(s.bytes_reserved, static_cast<int64_t>(64 * kKiB));
}

TEST(PoolAllocatorTest, ReserveIsMadeOnce) {
  PoolAllocator a;
  EXPECT_TRUE(a.Reserve(0).ok());
  EXPECT_EQ(a.stats().system_allocs, 0);
  EXPECT_TRUE(a.Reserve(100).ok());  // rounds up to 128
  EXPECT_EQ(a.stats().bytes_reserved, 128);
  EXPECT_TRUE(a.Reserve(kMiB).ok());  // no-op
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.system_allocs, 1);
  EXPECT_EQ(s.bytes_reserved, 128);
  void* p = MustAllocate(a, 100);
  void* q = MustAllocate(a, 100);  // the reservation holds only one 128-byte block
  s = a.stats();
  EXPECT_EQ(s.system_allocs, 2);
  EXPECT_EQ(s.pool_hits, 1);
  a.Deallocate(p, 100);
  a.Deallocate(q, 100);
}

TEST(PoolAllocatorTest, ReservationCountsAgainstTheLimit) {
  PoolAllocator a(PoolAllocator::Options{.memory_limit = 64 * kKiB});
  absl::Status status = a.Reserve(128 * kKiB);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("65536"));
  EXPECT_EQ(a.stats().system_allocs, 0);

  ASSERT_TRUE(a.Reserve(48 * kKiB).ok());
  void* p = MustAllocate(a, 48 * kKiB);      // all of the reservation
  EXPECT_FALSE(a.Allocate(32 * kKiB).ok());  // 48 + 32 > 64 KiB
  void* q = MustAllocate(a, 16 * kKiB);
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.bytes_reserved, static_cast<int64_t>(64 * kKiB));
  EXPECT_EQ(s.failed_allocs, 1);
  a.Deallocate(p, 48 * kKiB);
  a.Deallocate(q, 16 * kKiB);
}

TEST(PoolAllocatorTest, ReservationOverTheLimitIsSkippedAtConstruction) {
  PoolAllocator a(PoolAllocator::Options{.memory_limit = 4096, .reservation = 8192});
  EXPECT_EQ(a.stats().bytes_reserved, 0);
  void* p = MustAllocate(a, 4096);  // the allocator works without a reservation
  a.Deallocate(p, 4096);
}

TEST(PoolAllocatorTest, FaultInjectionFailsExactlyTheNthCall) {
  PoolAllocator a;
  a.FailNthAllocation(3);
  std::vector<void*> ok;
  for (int i = 1; i <= 6; ++i) {
    absl::StatusOr<void*> p = a.Allocate(100);
    if (i == 3) {
      ASSERT_FALSE(p.ok());
      EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
      EXPECT_THAT(p.status().message(), HasSubstr("injected allocation failure"));
    } else {
      ASSERT_TRUE(p.ok()) << "call " << i << ": " << p.status();
      ok.push_back(*p);
    }
  }
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.allocs, 6);
  EXPECT_EQ(s.failed_allocs, 1);
  EXPECT_EQ(s.bytes_in_use, 5 * 128);

  a.FailNthAllocation(1);  // the very next call
  EXPECT_FALSE(a.Allocate(100).ok());
  void* next = MustAllocate(a, 100);  // only that one call failed
  a.Deallocate(next, 100);
  s = a.stats();
  EXPECT_EQ(s.allocs, 8);
  EXPECT_EQ(s.failed_allocs, 2);
  for (void* p : ok) a.Deallocate(p, 100);
}

TEST(PoolAllocatorTest, FaultInjectionCanBeDisabled) {
  PoolAllocator a;
  a.FailNthAllocation(2);
  a.FailNthAllocation(0);
  for (int i = 0; i < 5; ++i) {
    void* p = MustAllocate(a, 64);
    a.Deallocate(p, 64);
  }
  EXPECT_EQ(a.stats().failed_allocs, 0);
}

TEST(PoolAllocatorTest, SteadyStateMakesNoSystemCalls) {
  PoolAllocator a;
  const size_t sizes[] = {100, 4000, 4100, 70000, 1 << 20, 0};
  int64_t system_allocs_after_first = -1;
  std::vector<void*> blocks(std::size(sizes));
  for (int iter = 0; iter < 10000; ++iter) {
    for (size_t i = 0; i < std::size(sizes); ++i) {
      blocks[i] = MustAllocate(a, sizes[i]);
      ASSERT_NE(blocks[i], nullptr);
    }
    // Free in an order that varies with the iteration.
    for (size_t k = 0; k < std::size(sizes); ++k) {
      const size_t i = (k + iter) % std::size(sizes);
      a.Deallocate(blocks[i], sizes[i]);
    }
    if (iter == 0) system_allocs_after_first = a.stats().system_allocs;
  }
  const AllocatorStats s = a.stats();
  EXPECT_EQ(system_allocs_after_first, static_cast<int64_t>(std::size(sizes)));
  EXPECT_EQ(s.system_allocs, system_allocs_after_first);
  EXPECT_EQ(s.system_frees, 0);
  EXPECT_EQ(s.pool_hits, s.allocs - system_allocs_after_first);
  EXPECT_EQ(s.bytes_in_use, 0);
}

TEST(PoolAllocatorTest, SteadyStateWithReservationMakesNoSystemCallsAtAll) {
  PoolAllocator a(PoolAllocator::Options{.reservation = static_cast<int64_t>(2 * kMiB)});
  const size_t sizes[] = {100, 4000, 70000, 1 << 20};
  for (int iter = 0; iter < 10000; ++iter) {
    void* blocks[std::size(sizes)];
    for (size_t i = 0; i < std::size(sizes); ++i) blocks[i] = MustAllocate(a, sizes[i]);
    for (size_t i = 0; i < std::size(sizes); ++i) a.Deallocate(blocks[i], sizes[i]);
  }
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.system_allocs, 1);  // the reservation itself
  EXPECT_EQ(s.pool_hits, s.allocs);
}

void Churn(PoolAllocator& a, int thread_index, int iterations) {
  const size_t sizes[] = {1, 64, 200, 1000, 4096, 5000, 20000, 100000};
  constexpr int kLive = 8;
  std::pair<uint8_t*, size_t> live[kLive] = {};
  uint32_t rng = 12345u + static_cast<uint32_t>(thread_index) * 7919u;
  const auto tag = static_cast<uint8_t>(thread_index + 1);
  for (int i = 0; i < iterations; ++i) {
    rng = rng * 1664525u + 1013904223u;
    auto& [p, bytes] = live[(rng >> 8) % kLive];
    if (p != nullptr) {
      // Another thread scribbling on this block would show here.
      ASSERT_EQ(p[0], tag);
      ASSERT_EQ(p[bytes - 1], tag);
      a.Deallocate(p, bytes);
      p = nullptr;
    } else {
      bytes = sizes[(rng >> 16) % std::size(sizes)];
      absl::StatusOr<void*> block = a.Allocate(bytes);
      ASSERT_TRUE(block.ok()) << block.status();
      ASSERT_TRUE(IsAligned(*block));
      p = static_cast<uint8_t*>(*block);
      p[0] = tag;
      p[bytes - 1] = tag;
    }
  }
  for (auto [p, bytes] : live) {
    if (p != nullptr) a.Deallocate(p, bytes);
  }
}

TEST(PoolAllocatorTest, ConcurrentAllocAndFreeKeepStatsConsistent) {
  for (int64_t reservation : {int64_t{0}, int64_t{256 * 1024}}) {
    SCOPED_TRACE(absl::StrCat("reservation ", reservation));
    PoolAllocator a(PoolAllocator::Options{.reservation = reservation});
    constexpr int kThreads = 4;
    constexpr int kIterations = 20000;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back(Churn, std::ref(a), t, kIterations);
    for (std::thread& t : threads) t.join();
    AllocatorStats s = a.stats();
    EXPECT_EQ(s.bytes_in_use, 0);
    EXPECT_EQ(s.failed_allocs, 0);
    EXPECT_GT(s.allocs, 0);
    EXPECT_GT(s.pool_hits, 0);
    EXPECT_EQ(s.allocs, s.pool_hits + s.system_allocs - (reservation > 0 ? 1 : 0));
    EXPECT_GT(s.peak_bytes_in_use, 0);
    EXPECT_LE(s.peak_bytes_in_use, s.bytes_reserved);
    a.Trim();
    s = a.stats();
    EXPECT_EQ(s.bytes_reserved, reservation);
    EXPECT_EQ(s.system_frees, s.system_allocs - (reservation > 0 ? 1 : 0));
  }
}

TEST(PoolAllocatorTest, BlocksMayBeFreedOnAnotherThread) {
  PoolAllocator a;
  void* p = MustAllocate(a, 3000);
  std::thread([&] { a.Deallocate(p, 3000); }).join();
  EXPECT_EQ(a.stats().bytes_in_use, 0);
  EXPECT_EQ(MustAllocate(a, 3000), p);
  a.Deallocate(p, 3000);
}

TEST(PoolAllocatorTest, StorageAllocateUsesThePool) {
  PoolAllocator a;
  {
    absl::StatusOr<StorageRef> s = Storage::Allocate(a, 100);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(IsAligned((*s)->data()));
    EXPECT_EQ((*s)->size(), 100u);
    EXPECT_TRUE((*s)->writable());
    std::memset((*s)->data(), 7, 100);
    EXPECT_GT(a.stats().bytes_in_use, 100);  // the header shares the block
  }
  EXPECT_EQ(a.stats().bytes_in_use, 0);
  {
    absl::StatusOr<StorageRef> s = Storage::Allocate(a, 90);  // same class
    ASSERT_TRUE(s.ok()) << s.status();
  }
  AllocatorStats st = a.stats();
  EXPECT_EQ(st.system_allocs, 1);
  EXPECT_EQ(st.pool_hits, 1);

  a.FailNthAllocation(1);
  absl::StatusOr<StorageRef> failed = Storage::Allocate(a, 100);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(PoolAllocatorTest, StorageKeepsASharedAllocatorAlive) {
  auto a = std::make_shared<PoolAllocator>(
      PoolAllocator::Options{.reservation = static_cast<int64_t>(64 * kKiB)});
  absl::StatusOr<StorageRef> s = Storage::Allocate(*a, 1000, a);
  ASSERT_TRUE(s.ok()) << s.status();
  std::weak_ptr<PoolAllocator> weak = a;
  a.reset();
  EXPECT_FALSE(weak.expired());
  StorageRef copy = *s;
  s->Reset();
  EXPECT_FALSE(weak.expired());
  copy.Reset();  // the last reference returns the block, then destroys the allocator
  EXPECT_TRUE(weak.expired());
}

}  // namespace
}  // namespace dynvm
