#include "tools/server/batcher.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace dynvm::server {
namespace {

// A request of `rows` rows of one f32 column holding `value`.
Tensor Rows(int64_t rows, float value) {
  absl::StatusOr<Tensor> t = Tensor::Empty(DType::kF32, {rows, 1});
  EXPECT_TRUE(t.ok());
  std::fill(t->data<float>(), t->data<float>() + rows, value);
  return *t;
}

// Runs a batch by adding 1 to every row, recording the batch sizes.
struct Recorder {
  std::mutex mu;
  std::vector<int64_t> batches;
  Batcher::RunFn Fn() {
    return [this](const std::vector<Tensor>& inputs,
                  absl::Time) -> absl::StatusOr<std::vector<Tensor>> {
      const Tensor& in = inputs[0];
      {
        std::lock_guard<std::mutex> lock(mu);
        batches.push_back(in.dim(0));
      }
      Tensor out = Rows(in.dim(0), 0);
      for (int64_t i = 0; i < in.dim(0); ++i) out.data<float>()[i] = in.data<float>()[i] + 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a run takes a while
      return std::vector<Tensor>{out};
    };
  }
};

// Submits `n` one-row requests at once (request i holds i) and checks each gets its own row.
void SubmitAtOnce(Batcher& batcher, int n) {
  std::barrier start(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      absl::StatusOr<Batcher::Result> r =
          batcher.Submit({Rows(1, static_cast<float>(i))}, absl::Now() + absl::Seconds(60));
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->outputs.size(), 1u);
      EXPECT_EQ(r->outputs[0].dim(0), 1);
      EXPECT_EQ(r->outputs[0].data<float>()[0], static_cast<float>(i) + 1);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(BatcherTest, RunsOnceRequestsStopArrivingNotAfterTheWholeDelay) {
  Recorder recorder;
  // A delay of 30 s that a batch of 8 one-row requests never fills (max 16): the batch must run
  // once no request has come for the arrival gap (200 ms), long before the delay.
  Batcher batcher(
      {.max_batch_size = 16, .max_queue_delay_us = 30'000'000, .max_arrival_gap_us = 200'000},
      /*workers=*/1, /*max_queue=*/64, recorder.Fn());
  const absl::Time start = absl::Now();
  SubmitAtOnce(batcher, 8);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  int64_t rows = 0;
  for (int64_t b : recorder.batches) rows += b;
  EXPECT_EQ(rows, 8);
  EXPECT_LT(recorder.batches.size(), 8u);  // batched, not one by one
}

TEST(BatcherTest, SharesTheRowsReadyAmongIdleWorkers) {
  Recorder recorder;
  Batcher batcher(
      {.max_batch_size = 16, .max_queue_delay_us = 30'000'000, .max_arrival_gap_us = 500'000},
      /*workers=*/2, /*max_queue=*/64, recorder.Fn());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // both workers wait
  SubmitAtOnce(batcher, 8);
  ASSERT_EQ(recorder.batches.size(), 2u);
  // Both workers were idle: each takes its half rather than one taking all 8.
  EXPECT_EQ(recorder.batches[0], 4);
  EXPECT_EQ(recorder.batches[1], 4);
}

TEST(BatcherTest, AFullBatchRunsAtOnce) {
  Recorder recorder;
  Batcher batcher(
      {.max_batch_size = 4, .max_queue_delay_us = 30'000'000, .max_arrival_gap_us = 30'000'000},
      /*workers=*/1, /*max_queue=*/64, recorder.Fn());
  const absl::Time start = absl::Now();
  SubmitAtOnce(batcher, 8);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_EQ(recorder.batches.size(), 2u);
  EXPECT_EQ(recorder.batches[0], 4);
  EXPECT_EQ(recorder.batches[1], 4);
}

}  // namespace
}  // namespace dynvm::server
