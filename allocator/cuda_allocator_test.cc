// The device pool (allocator/cuda_allocator.h). Its bookkeeping is tested with host memory
// standing in for the device, so it runs on every machine; the real-device cases
// (CudaAllocatorDeviceTest, a ctest entry of their own) skip with a message when no CUDA device
// is available (or the build has no CUDA support), and ctest reports them as skipped.
#include "allocator/cuda_allocator.h"

#include <cstdlib>
#include <set>
#include <vector>

#include "allocator/pool_allocator.h"
#include "allocator/storage.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dynvm {
namespace {

using ::testing::HasSubstr;

// Host memory as the "device", counting live blocks.
struct FakeDevice {
  std::set<void*> live;
  CudaAllocator::SystemMemory Memory() {
    return {[this](size_t bytes) -> absl::StatusOr<void*> {
              void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
              if (p == nullptr) return absl::ResourceExhaustedError("fake device full");
              live.insert(p);
              return p;
            },
            [this](void* p) {
              live.erase(p);
              std::free(p);
            }};
  }
};

TEST(CudaAllocatorPoolTest, FreedBlocksAreReusedByClass) {
  FakeDevice dev;
  CudaAllocator a({.system = dev.Memory()});
  absl::StatusOr<void*> p = a.Allocate(1000);
  ASSERT_TRUE(p.ok()) << p.status();
  a.Deallocate(*p, 1000);
  absl::StatusOr<void*> q = a.Allocate(1010);  // the same 1024-byte class
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, *p);
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.system_allocs, 1);
  EXPECT_EQ(s.pool_hits, 1);
  EXPECT_EQ(s.allocs, 2);
  EXPECT_EQ(s.bytes_in_use, static_cast<int64_t>(PoolAllocator::ClassSize(1010)));
  a.Deallocate(*q, 1010);
  EXPECT_EQ(a.stats().bytes_in_use, 0);
  EXPECT_EQ(a.stats().bytes_reserved, 1024);
  a.Trim();
  EXPECT_EQ(a.stats().bytes_reserved, 0);
  EXPECT_TRUE(dev.live.empty());
}

TEST(CudaAllocatorPoolTest, DecodeLoopMakesNoSystemCallsAfterTheFirstStep) {
  FakeDevice dev;
  CudaAllocator a({.system = dev.Memory()});
  for (int step = 0; step < 100; ++step) {
    std::vector<std::pair<void*, size_t>> blocks;
    for (size_t bytes : {256u, 4096u, 100000u, 64u}) {
      absl::StatusOr<void*> p = a.Allocate(bytes);
      ASSERT_TRUE(p.ok());
      blocks.emplace_back(*p, bytes);
    }
    for (auto [p, bytes] : blocks) a.Deallocate(p, bytes);
  }
  EXPECT_EQ(a.stats().system_allocs, 4);
  EXPECT_EQ(a.stats().pool_hits, 396);
}

TEST(CudaAllocatorPoolTest, MemoryLimitReleasesCachedBlocksThenRefuses) {
  FakeDevice dev;
  CudaAllocator a({.memory_limit = 8192, .system = dev.Memory()});
  absl::StatusOr<void*> p = a.Allocate(4096);
  ASSERT_TRUE(p.ok());
  a.Deallocate(*p, 4096);                      // cached
  absl::StatusOr<void*> q = a.Allocate(8192);  // fits only once the cached block goes back
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(a.stats().system_frees, 1);
  absl::StatusOr<void*> r = a.Allocate(64);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(r.status()));
  EXPECT_THAT(r.status().message(), HasSubstr("device memory limit of 8192 bytes"));
  EXPECT_EQ(a.stats().failed_allocs, 1);
  a.Deallocate(*q, 8192);
  absl::StatusOr<void*> s = a.Allocate(64);  // still usable
  ASSERT_TRUE(s.ok());
  a.Deallocate(*s, 64);
}

TEST(CudaAllocatorPoolTest, InjectedFailureFailsOnlyTheNthCall) {
  FakeDevice dev;
  CudaAllocator a({.system = dev.Memory()});
  a.FailNthAllocation(2);
  absl::StatusOr<void*> p = a.Allocate(64);
  ASSERT_TRUE(p.ok());
  absl::StatusOr<void*> q = a.Allocate(64);
  ASSERT_FALSE(q.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(q.status()));
  absl::StatusOr<void*> r = a.Allocate(64);
  ASSERT_TRUE(r.ok());
  a.Deallocate(*p, 64);
  a.Deallocate(*r, 64);
  EXPECT_EQ(a.stats().failed_allocs, 1);
}

TEST(CudaAllocatorPoolTest, SystemOutOfMemoryIsRetriedAfterEmptyingTheCache) {
  int calls = 0;
  std::set<void*> live;
  CudaAllocator::SystemMemory memory{[&](size_t bytes) -> absl::StatusOr<void*> {
                                       // A "device" with room for one block at a time.
                                       ++calls;
                                       if (!live.empty())
                                         return absl::ResourceExhaustedError("fake device full");
                                       void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
                                       live.insert(p);
                                       return p;
                                     },
                                     [&](void* p) {
                                       live.erase(p);
                                       std::free(p);
                                     }};
  CudaAllocator a({.system = memory});
  absl::StatusOr<void*> p = a.Allocate(64);
  ASSERT_TRUE(p.ok());
  a.Deallocate(*p, 64);
  absl::StatusOr<void*> q = a.Allocate(100000);  // needs the cached block returned first
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(calls, 3);
  a.Deallocate(*q, 100000);
  EXPECT_EQ(a.stats().failed_allocs, 0);
}

TEST(CudaAllocatorPoolTest, HugeBlocksGoStraightBackToTheSystem) {
  FakeDevice dev;
  CudaAllocator a({.system = dev.Memory()});
  const size_t huge = PoolAllocator::kMaxClassBytes + 64;
  absl::StatusOr<void*> p = a.Allocate(huge);
  ASSERT_TRUE(p.ok()) << p.status();
  a.Deallocate(*p, huge);
  EXPECT_EQ(a.stats().system_frees, 1);
  EXPECT_EQ(a.stats().bytes_reserved, 0);
}

TEST(CudaAllocatorPoolTest, StoragesKeepTheirHeaderOnTheHost) {
  FakeDevice dev;
  auto a = std::make_shared<CudaAllocator>(CudaAllocator::Options{.system = dev.Memory()});
  absl::StatusOr<StorageRef> st = Storage::Allocate(*a, 100, a);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ((*st)->device(), Device::kCUDA);
  EXPECT_EQ((*st)->size(), 100u);
  EXPECT_TRUE(dev.live.contains((*st)->data()));  // the data pointer is the block itself
  st->Reset();
  EXPECT_EQ(a->stats().bytes_in_use, 0);
}

// ---- the real device (or the clean error when there is none) ----

// Run with CUDA_VISIBLE_DEVICES= (ctest does), so it runs on GPU machines too.
TEST(CudaAllocatorNoDeviceTest, AllocationFailsCleanly) {
  const absl::Status available = CudaDeviceAvailable();
  if (available.ok()) GTEST_SKIP() << "a CUDA device is visible; run with CUDA_VISIBLE_DEVICES=";
  if (CudaBuildEnabled()) {
    EXPECT_TRUE(absl::IsUnavailable(available)) << available;
    EXPECT_THAT(available.message(), HasSubstr("no CUDA device available"));
  } else {
    EXPECT_TRUE(absl::IsUnimplemented(available)) << available;
    EXPECT_THAT(available.message(), HasSubstr("this build has no CUDA device support"));
  }
  CudaAllocator a;
  absl::StatusOr<void*> p = a.Allocate(64);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), available.code());
  EXPECT_EQ(a.stats().failed_allocs, 1);
  EXPECT_EQ(a.stats().bytes_reserved, 0);
}

TEST(CudaAllocatorDeviceTest, AllocatesAndReusesDeviceMemory) {
  if (absl::Status s = CudaDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  CudaAllocator a;
  absl::StatusOr<void*> p = a.Allocate(1 << 20);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % kTensorAlignment, 0u);
  a.Deallocate(*p, 1 << 20);
  absl::StatusOr<void*> q = a.Allocate(1 << 20);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, *p);
  a.Deallocate(*q, 1 << 20);
  EXPECT_EQ(a.stats().system_allocs, 1);
  a.Trim();
  EXPECT_EQ(a.stats().system_frees, 1);
}

TEST(CudaAllocatorDeviceTest, OutOfDeviceMemoryIsResourceExhausted) {
  if (absl::Status s = CudaDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  CudaAllocator a;
  absl::StatusOr<void*> p = a.Allocate(size_t{1} << 50);  // a petabyte
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(p.status())) << p.status();
  absl::StatusOr<void*> q = a.Allocate(64);  // the allocator (and the device) stay usable
  ASSERT_TRUE(q.ok()) << q.status();
  a.Deallocate(*q, 64);
}

}  // namespace
}  // namespace dynvm
