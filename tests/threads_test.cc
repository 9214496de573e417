// Intra-op threads through the VM (docs/threads.md): thread counts checked at creation against
// the process-wide cap, no worker threads for VMs of one thread, shared and per-VM pools, and
// cancellation and deadlines stopping a run while the pool's workers are busy.
#include <dirent.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/synchronization/barrier.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "kernels/thread_pool.h"
#include "tests/vm_fixture.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

using ::dynvm::testing::LoadAssembly;
using ::testing::HasSubstr;

constexpr int64_t kK = 384, kN = 512;  // 196K multiply-adds a step: split across the pool

// y = x * w, `trips` times (a decode loop's GEMV).
constexpr absl::string_view kGemvLoop = R"(
.kernel "MatMul" in(f32, f32) out(f32)

.function main
  .params 3 0
  .sregs i64 i64
  .oregs tensor:i64 tensor:f32 tensor:f32 storage tensor:f32
  .oresults tensor:f32
  .input trips []
  .input x [1, 384]
  .input w [384, 512]
  .output y [1, 512]
  read_i %s0, %o0, 0
  alloc_storage %o3, 2048, cpu
  alloc_tensor %o4, %o3, 0, f32, [1, 512]
  loop %s1, %s0
    invoke k0, #0, (%o1, %o2), (%o4)
  endloop
  ret (%o4), ()
.end
)";

int ProcessThreads() {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

class ThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cap_ = MaxThreads();
    ASSERT_TRUE(SetMaxThreads(std::max(cap_, 2)).ok());  // 2-thread VMs on a 1-CPU machine too
    exe_ = LoadAssembly(kGemvLoop);
    ASSERT_NE(exe_, nullptr);
    x_ = *Tensor::Empty(DType::kF32, {1, kK});
    w_ = *Tensor::Empty(DType::kF32, {kK, kN});
    for (int64_t i = 0; i < kK; ++i) x_.data<float>()[i] = 0.01f * static_cast<float>(i % 13 - 6);
    for (int64_t i = 0; i < kK * kN; ++i)
      w_.data<float>()[i] = 0.02f * static_cast<float>(i % 29 - 14);
  }
  void TearDown() override { ASSERT_TRUE(SetMaxThreads(cap_).ok()); }

  void Bind(VirtualMachine& vm, int64_t trips) {
    ASSERT_TRUE(vm.SetInput("trips", testing::I64({}, {trips})).ok());
    ASSERT_TRUE(vm.SetInputZeroCopy("x", x_).ok());
    ASSERT_TRUE(vm.SetInputZeroCopy("w", w_).ok());
  }
  // y against a double loop.
  void ExpectProduct(VirtualMachine& vm) {
    absl::StatusOr<Tensor> y = vm.GetOutput("y");
    ASSERT_TRUE(y.ok()) << y.status();
    for (int64_t j = 0; j < kN; ++j) {
      double want = 0;
      for (int64_t i = 0; i < kK; ++i)
        want += double{x_.data<float>()[i]} * w_.data<float>()[i * kN + j];
      ASSERT_NEAR(y->data<float>()[j], want, 1e-4 * (1 + std::abs(want))) << j;
    }
  }
  std::unique_ptr<VirtualMachine> Vm(int threads, bool shared = true) {
    VmOptions o;
    o.num_threads = threads;
    o.shared_thread_pool = shared;
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe_, o);
    EXPECT_TRUE(vm.ok()) << vm.status();
    return vm.ok() ? std::move(*vm) : nullptr;
  }

  int cap_ = 1;
  std::shared_ptr<const Executable> exe_;
  Tensor x_, w_;
};

TEST_F(ThreadsTest, BadThreadCountsAreInvalidArgumentAtCreation) {
  const int cap = MaxThreads();
  for (int bad : {0, -1, -1000, cap + 1, 1 << 30}) {
    VmOptions o;
    o.num_threads = bad;
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe_, o);
    ASSERT_FALSE(vm.ok()) << bad;
    EXPECT_EQ(vm.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(vm.status().message(), HasSubstr("num_threads must be in [1, "));
    EXPECT_THAT(vm.status().message(), HasSubstr(absl::StrCat("got ", bad)));
  }
  // set_num_threads likewise, and the VM stays usable with its old count.
  std::unique_ptr<VirtualMachine> vm = Vm(2);
  ASSERT_NE(vm, nullptr);
  EXPECT_EQ(vm->set_num_threads(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(vm->set_num_threads(cap + 1).code(), absl::StatusCode::kInvalidArgument);
  Bind(*vm, 2);
  ASSERT_TRUE(vm->Run().ok());
  ExpectProduct(*vm);
  ASSERT_TRUE(vm->set_num_threads(1).ok());
  ASSERT_TRUE(vm->Run().ok());
  ExpectProduct(*vm);
}

TEST_F(ThreadsTest, TwoThreadsComputeTheProduct) {
  for (bool shared : {true, false}) {
    std::unique_ptr<VirtualMachine> vm = Vm(2, shared);
    ASSERT_NE(vm, nullptr);
    Bind(*vm, 5);
    ASSERT_TRUE(vm->Run().ok());
    ExpectProduct(*vm);
  }
}

// N VMs running on N threads with one intra-op thread each start no worker thread.
TEST_F(ThreadsTest, OneThreadVmsSpawnNoWorkers) {
  constexpr int kVms = 4;
  const int workers = LiveWorkerThreads();
  const int threads = ProcessThreads();
  absl::Barrier* ran = new absl::Barrier(kVms + 1);
  absl::Barrier* counted = new absl::Barrier(kVms + 1);
  std::vector<std::thread> callers;
  std::atomic<int> ok{0};
  for (int i = 0; i < kVms; ++i) {
    callers.emplace_back([&] {
      std::unique_ptr<VirtualMachine> vm = Vm(1);
      if (vm != nullptr) {
        Bind(*vm, 3);
        if (vm->Run().ok()) ok.fetch_add(1);
      }
      if (ran->Block()) delete ran;
      if (counted->Block()) delete counted;  // the VM lives until the count is taken
    });
  }
  if (ran->Block()) delete ran;
  // The callers only (fewer when a thread of an earlier test was still being reaped at the
  // first count).
  EXPECT_LE(ProcessThreads(), threads + kVms);
  EXPECT_EQ(LiveWorkerThreads(), workers);
  if (counted->Block()) delete counted;
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(ok.load(), kVms);
}

// VMs of 2 threads share one worker by default; with their own pools, one each, joined when
// the VM goes.
TEST_F(ThreadsTest, SharedAndOwnPools) {
  const int workers = LiveWorkerThreads();
  {
    std::vector<std::unique_ptr<VirtualMachine>> vms;
    for (int i = 0; i < 3; ++i) vms.push_back(Vm(2));
    EXPECT_LE(LiveWorkerThreads(), workers + 1);
  }
  const int shared_workers = LiveWorkerThreads();  // the shared pool stays for the process
  EXPECT_LE(shared_workers, workers + 1);
  {
    std::vector<std::unique_ptr<VirtualMachine>> vms;
    for (int i = 0; i < 3; ++i) vms.push_back(Vm(2, /*shared=*/false));
    EXPECT_EQ(LiveWorkerThreads(), shared_workers + 3);
    // Three VMs at once on the shared pool: each job runs whole, on the pool or its caller.
    std::vector<std::thread> callers;
    std::vector<std::unique_ptr<VirtualMachine>> shared;
    for (int i = 0; i < 3; ++i) shared.push_back(Vm(2));
    for (int i = 0; i < 3; ++i) {
      callers.emplace_back([&, i] {
        Bind(*shared[i], 20);
        ASSERT_TRUE(shared[i]->Run().ok());
        ExpectProduct(*shared[i]);
      });
    }
    for (std::thread& t : callers) t.join();
  }
  EXPECT_EQ(LiveWorkerThreads(), shared_workers);
}

// Cancellation and deadlines stop a run of parallel kernels (the VM checks between kernels;
// each kernel joins its workers before it returns), and the VM runs correctly afterwards.
TEST_F(ThreadsTest, CancelAndDeadlineWhileWorkersAreBusy) {
  for (bool shared : {true, false}) {
    std::unique_ptr<VirtualMachine> vm = Vm(2, shared);
    ASSERT_NE(vm, nullptr);
    Bind(*vm, int64_t{1} << 39);  // days
    CancellationToken token;
    RunOptions run;
    run.cancel = &token;
    std::thread canceller([&token] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      token.Cancel();
    });
    absl::Status s = vm->Run(run);
    canceller.join();
    EXPECT_TRUE(absl::IsCancelled(s)) << s;
    token.Reset();
    RunOptions timed;
    timed.deadline = absl::Now() + absl::Milliseconds(30);
    s = vm->Run(timed);
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    Bind(*vm, 2);
    ASSERT_TRUE(vm->Run(run).ok());
    ExpectProduct(*vm);
  }
}

}  // namespace
}  // namespace dynvm
