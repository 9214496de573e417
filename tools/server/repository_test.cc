// ModelVersion's pool of instances (tools/server/repository.h): a VM goes to the request that
// has waited longest, and a request that stops waiting leaves the queue.
#include "tools/server/repository.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace dynvm::server {
namespace {

std::shared_ptr<ModelVersion> LoadMlp(int instances) {
  ModelConfig config;
  config.instances = instances;
  absl::StatusOr<std::shared_ptr<ModelVersion>> model =
      ModelVersion::Load("deploy/model-repository/mlp", "mlp", "1", config);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

void WaitUntilQueued(const ModelVersion& model, int n) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (model.queued() < n && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(model.queued(), n);
}

// One instance, held; eight requests queue in a known order. Each, once served, hands the VM
// back and at once asks again, as a closed-loop client does: the VM must go to the next of the
// queue, not back to the request that just returned it, so the first eight grants follow the
// queue's order (a pool that lets a late request take a returned VM serves one client over and
// over while the others starve: seconds of p99 latency under load).
TEST(ModelVersionTest, AReturnedInstanceGoesToTheOldestWaiter) {
  std::shared_ptr<ModelVersion> model = LoadMlp(1);
  ASSERT_NE(model, nullptr);
  std::optional<absl::StatusOr<Lease>> held = model->Acquire(absl::Now() + absl::Seconds(60), {});
  ASSERT_TRUE(held->ok()) << held->status();
  constexpr int kWaiters = 8;
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < 2; ++round) {
        absl::StatusOr<Lease> lease = model->Acquire(absl::Now() + absl::Seconds(60), {});
        ASSERT_TRUE(lease.ok()) << lease.status();
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
      }  // the lease goes back here, and the next round asks again at once
    });
    WaitUntilQueued(*model, i + 1);
  }
  held.reset();
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(order.size(), 2u * kWaiters);
  EXPECT_EQ(std::vector<int>(order.begin(), order.begin() + kWaiters),
            (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(model->queued(), 0);
  EXPECT_EQ(model->busy(), 0);
}

// A request that times out or whose client goes away leaves the queue: the next waiter gets
// the instance, and the queue's count comes back to 0.
TEST(ModelVersionTest, RequestsThatStopWaitingLeaveTheQueue) {
  std::shared_ptr<ModelVersion> model = LoadMlp(1);
  ASSERT_NE(model, nullptr);
  std::optional<absl::StatusOr<Lease>> held = model->Acquire(absl::Now() + absl::Seconds(60), {});
  ASSERT_TRUE(held->ok());
  absl::StatusOr<Lease> late = model->Acquire(absl::Now() + absl::Milliseconds(30), {});
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
  EXPECT_EQ(model->queued(), 0);
  std::atomic<bool> gone = false;
  std::thread cancelled([&] {
    absl::StatusOr<Lease> r =
        model->Acquire(absl::Now() + absl::Seconds(60), [&] { return gone.load(); });
    EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  });
  WaitUntilQueued(*model, 1);
  std::thread served([&] {
    absl::StatusOr<Lease> r = model->Acquire(absl::Now() + absl::Seconds(60), {});
    EXPECT_TRUE(r.ok()) << r.status();
  });
  WaitUntilQueued(*model, 2);
  gone = true;
  cancelled.join();
  EXPECT_EQ(model->queued(), 1);
  held.reset();  // to the request still waiting
  served.join();
  EXPECT_EQ(model->queued(), 0);
  EXPECT_EQ(model->busy(), 0);
}

}  // namespace
}  // namespace dynvm::server
