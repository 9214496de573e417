#include "tools/server/batcher.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tools/server/repository.h"

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

TEST(BatcherTest, AnArrivalThatFillsTheBatchEndsTheWait) {
  Recorder recorder;
  // The worker holds the batch open (30 s delay and gap) while one-row requests arrive 50 ms
  // apart; the fourth fills it (max 4), and that arrival must run it at once.
  Batcher batcher(
      {.max_batch_size = 4, .max_queue_delay_us = 30'000'000, .max_arrival_gap_us = 30'000'000},
      /*workers=*/1, /*max_queue=*/64, recorder.Fn());
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<Batcher::Result> r =
          batcher.Submit({Rows(1, static_cast<float>(i))}, absl::Now() + absl::Seconds(60));
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->outputs[0].data<float>()[0], static_cast<float>(i) + 1);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_EQ(recorder.batches.size(), 1u);
  EXPECT_EQ(recorder.batches[0], 4);
}

TEST(BatcherTest, ABatchOfOneRunsOnTheRequestsOwnTensors) {
  // No copy in or out: the run sees the request's input storage and the request gets the run's
  // output tensor.
  const void* seen = nullptr;
  Tensor produced;
  Batcher batcher(
      {.max_batch_size = 8, .max_queue_delay_us = 0, .max_arrival_gap_us = 0},
      /*workers=*/1, /*max_queue=*/64,
      [&](const std::vector<Tensor>& inputs, absl::Time) -> absl::StatusOr<std::vector<Tensor>> {
        seen = inputs[0].raw_data();
        produced = Rows(inputs[0].dim(0), 7);
        return std::vector<Tensor>{produced};
      });
  Tensor in = Rows(1, 3);
  absl::StatusOr<Batcher::Result> r = batcher.Submit({in}, absl::Now() + absl::Seconds(60));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(seen, in.raw_data());
  ASSERT_EQ(r->outputs.size(), 1u);
  EXPECT_EQ(r->outputs[0].raw_data(), produced.raw_data());
  EXPECT_EQ(r->outputs[0].data<float>()[0], 7);
  EXPECT_EQ(r->batch_rows, 1);
}

TEST(BatcherTest, RequestsOfSeveralRowsGetTheirRowsOfTheBatchOutput) {
  // Requests of 1 to 3 rows, row j of request i holding 10 i + j; the run doubles every value
  // and returns a second output of two columns (value, -value). Each request must get exactly
  // its rows of both, as views of the batch's outputs (no copy).
  std::mutex mu;
  std::vector<const void*> outputs_made;
  Batcher batcher(
      {.max_batch_size = 64, .max_queue_delay_us = 200'000, .max_arrival_gap_us = 100'000},
      /*workers=*/2, /*max_queue=*/64,
      [&](const std::vector<Tensor>& inputs, absl::Time) -> absl::StatusOr<std::vector<Tensor>> {
        const int64_t n = inputs[0].dim(0);
        Tensor a = Rows(n, 0);
        absl::StatusOr<Tensor> b = Tensor::Empty(DType::kF32, {n, 2});
        if (!b.ok()) return b.status();
        for (int64_t i = 0; i < n; ++i) {
          a.data<float>()[i] = 2 * inputs[0].data<float>()[i];
          b->data<float>()[2 * i] = inputs[0].data<float>()[i];
          b->data<float>()[2 * i + 1] = -inputs[0].data<float>()[i];
        }
        std::lock_guard<std::mutex> lock(mu);
        outputs_made.push_back(a.storage().get());
        return std::vector<Tensor>{a, *b};
      });
  constexpr int kRequests = 24;
  std::barrier start(kRequests);
  std::vector<std::thread> threads;
  std::vector<const void*> storages(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      const int64_t rows = 1 + i % 3;
      Tensor in = Rows(rows, 0);
      for (int64_t j = 0; j < rows; ++j) in.data<float>()[j] = static_cast<float>(10 * i + j);
      start.arrive_and_wait();
      absl::StatusOr<Batcher::Result> r = batcher.Submit({in}, absl::Now() + absl::Seconds(60));
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->outputs.size(), 2u);
      ASSERT_EQ(r->outputs[0].dim(0), rows);
      ASSERT_EQ(r->outputs[1].dim(0), rows);
      ASSERT_EQ(r->outputs[1].dim(1), 2);
      for (int64_t j = 0; j < rows; ++j) {
        const float v = static_cast<float>(10 * i + j);
        EXPECT_EQ(r->outputs[0].data<float>()[j], 2 * v);
        EXPECT_EQ(r->outputs[1].data<float>()[2 * j], v);
        EXPECT_EQ(r->outputs[1].data<float>()[2 * j + 1], -v);
      }
      storages[i] = r->outputs[0].storage().get();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const void* s : storages) {
    EXPECT_NE(std::find(outputs_made.begin(), outputs_made.end(), s), outputs_made.end());
  }
  EXPECT_LT(outputs_made.size(), static_cast<size_t>(kRequests));  // batched
}

// The deploy repository's MLP (Gemm, Relu, Gemm, Softmax over a symbolic batch) served with
// dynamic batching, requests of `min_rows` to `min_rows + 3` rows from concurrent callers: each
// request's rows must equal an unbatched run of that request alone on the model's own VM,
// within `tolerance` (relative; 0: byte for byte).
void ExpectBatchedRowsEqualUnbatchedRuns(int64_t min_rows, float tolerance) {
  ModelConfig config;
  config.bounds = {{"batch", 1024}};
  config.instances = 2;
  config.batching = {
      .max_batch_size = 64, .max_queue_delay_us = 200'000, .max_arrival_gap_us = 50'000};
  absl::StatusOr<std::shared_ptr<ModelVersion>> model =
      ModelVersion::Load("deploy/model-repository/mlp", "mlp", "1", config);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_NE((*model)->batcher(), nullptr);
  constexpr int kRequests = 40;
  std::vector<Tensor> requests;
  for (int i = 0; i < kRequests; ++i) {
    const int64_t rows = min_rows + i % 4;
    absl::StatusOr<Tensor> x = Tensor::Empty(DType::kF32, {rows, 4});
    ASSERT_TRUE(x.ok());
    for (int64_t k = 0; k < rows * 4; ++k)
      x->data<float>()[k] = static_cast<float>((i * 37 + k * 11) % 23) / 7.0f - 1.5f;
    requests.push_back(*x);
  }
  std::vector<Tensor> want;  // each request alone on a VM of the pool
  for (const Tensor& x : requests) {
    absl::StatusOr<Lease> lease = (*model)->Acquire(absl::Now() + absl::Seconds(60), nullptr);
    ASSERT_TRUE(lease.ok()) << lease.status();
    ASSERT_TRUE(lease->vm().SetInput("x", x, (*model)->handle()).ok());
    RunOptions run;
    run.handle = (*model)->handle();
    ASSERT_TRUE(lease->vm().Run(run).ok());
    absl::StatusOr<Tensor> y = lease->vm().GetOutput(0, (*model)->handle());
    ASSERT_TRUE(y.ok()) << y.status();
    absl::StatusOr<Tensor> copy = Tensor::Empty(y->dtype(), y->dims());
    ASSERT_TRUE(copy.ok());
    std::memcpy(copy->raw_data(), y->raw_data(), static_cast<size_t>(y->nbytes()));
    want.push_back(*copy);
  }
  std::barrier start(kRequests);
  std::vector<std::thread> threads;
  std::vector<int64_t> batch_rows(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      absl::StatusOr<Batcher::Result> r =
          (*model)->batcher()->Submit({requests[i]}, absl::Now() + absl::Seconds(60));
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->outputs.size(), 1u);
      const Tensor& got = r->outputs[0];
      ASSERT_EQ(got.dims(), want[i].dims());
      for (int64_t k = 0; k < got.numel(); ++k) {
        const float a = got.data<float>()[k], b = want[i].data<float>()[k];
        if (tolerance == 0) {
          EXPECT_EQ(std::memcmp(&a, &b, sizeof(float)), 0)
              << "request " << i << " element " << k << ": " << a << " vs " << b;
        } else {
          EXPECT_LE(std::abs(a - b), tolerance * std::abs(b))
              << "request " << i << " element " << k << ": " << a << " vs " << b;
        }
      }
      batch_rows[i] = r->batch_rows;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GT(*std::max_element(batch_rows.begin(), batch_rows.end()), min_rows + 3);  // batched
}

TEST(BatcherTest, BatchedRowsEqualUnbatchedRunsOfTheModelExactly) {
  // Requests of 2 to 5 rows: the products run on the same GEMM kernel batched or not, and a
  // row's result does not depend on the rows beside it.
  ExpectBatchedRowsEqualUnbatchedRuns(/*min_rows=*/2, /*tolerance=*/0);
}

TEST(BatcherTest, OneRowRequestsBatchedDifferOnlyInRounding) {
  // A one-row request alone runs its products as GEMVs (kernels/dnnl/linear.cc, M = 1), which
  // sum in another order than the GEMM its batch runs: the same values up to float rounding
  // (docs/serving.md says so), not byte for byte. The output is a softmax, whose relative error
  // is the absolute error of the logits: a few f32 ulps of the logits' partial sums, not of each
  // probability (1.03e-6 seen on a 1.8e-6 probability with clang's build). 1e-5 (~80 ulps) still
  // fails any row mixed up or dropped, whose error is of order 1.
  ExpectBatchedRowsEqualUnbatchedRuns(/*min_rows=*/1, /*tolerance=*/1e-5f);
}

}  // namespace
}  // namespace dynvm::server
