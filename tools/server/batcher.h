// Dynamic batching for dynvm-server (config.json "dynamic_batching"): infer requests on a model
// whose inputs and outputs all share a symbolic first dim (its batch) wait up to
// max_queue_delay_us to be concatenated along it, up to max_batch_size rows, run as one, and
// each gets its own rows of every output back (a view of the batch's output: one copy of each
// request's inputs into the batch, none out; a batch of one request runs on its own tensors).
// Only requests whose other dims agree are run together. Opt-in: it is right only when rows do
// not interact (docs/serving.md).
//
// Thread safety: thread-safe. One worker thread per instance forms and runs batches.
#ifndef DYNVM_TOOLS_SERVER_BATCHER_H_
#define DYNVM_TOOLS_SERVER_BATCHER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/tensor.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::server {

struct BatchingConfig {
  int64_t max_batch_size = 0;  // rows; 0 = no dynamic batching
  int64_t max_queue_delay_us = 500;
  // A batch that is not full is run once no request has arrived for this long (or once its
  // first request has waited max_queue_delay_us). Default: max_queue_delay_us / 8.
  int64_t max_arrival_gap_us = 62;
};

// OK when every input and output of `fn` is a tensor (not a string) whose first dim is the
// same symbol; FailedPrecondition naming the one that is not.
absl::Status CheckBatchable(const FunctionInfo& fn);

class Batcher {
 public:
  // Runs a batch: binds `inputs` (signature order) on a VM, runs it, returns every output.
  // `rows` is the batch size (for metrics).
  using RunFn = std::function<absl::StatusOr<std::vector<Tensor>>(const std::vector<Tensor>& inputs,
                                                                  absl::Time deadline)>;
  Batcher(BatchingConfig config, int workers, int max_queue, RunFn run);
  ~Batcher();

  struct Result {
    std::vector<Tensor> outputs;  // every output, this request's rows
    double queue_s = 0, compute_s = 0;
    int64_t batch_rows = 0;       // rows of the batch it ran in
    bool first_in_batch = false;  // one request per batch reports the batch (metrics)
  };
  // Queues one request (`inputs` in signature order, each with the batch as its first dim) and
  // waits for its rows. Unavailable (queue full) when max_queue requests wait.
  absl::StatusOr<Result> Submit(std::vector<Tensor> inputs, absl::Time deadline);

 private:
  struct Pending;
  void Work();
  // Takes the requests of the next batch (with the queue lock held).
  std::vector<std::shared_ptr<Pending>> TakeBatch(std::unique_lock<std::mutex>& lock);
  void RunBatch(const std::vector<std::shared_ptr<Pending>>& batch);
  static absl::StatusOr<std::vector<Tensor>> Gather(
      const std::vector<std::shared_ptr<Pending>>& batch, int64_t rows);

  BatchingConfig config_;
  int max_queue_;
  RunFn run_;
  std::mutex mu_;
  // Workers waiting for a first request (the queue empty) wait on `arrival_cv_`, which every
  // arrival signals; workers holding a batch open wait on `full_cv_`, signalled only when the
  // queue holds a full batch: an arrival that does not fill it need not wake them (each wakes
  // at its own timer, the arrival gap or the delay, and looks again).
  std::condition_variable arrival_cv_, full_cv_;
  std::deque<std::shared_ptr<Pending>> queue_;
  int64_t queued_rows_ = 0;  // rows in `queue_`
  bool stopping_ = false;
  absl::Time last_arrival_ = absl::InfinitePast();
  int idle_workers_ = 0;   // workers in TakeBatch (not running a batch)
  int empty_waiters_ = 0;  // workers waiting on `arrival_cv_`
  std::vector<std::thread> workers_;
};

}  // namespace dynvm::server

#endif  // DYNVM_TOOLS_SERVER_BATCHER_H_
