#include "tools/server/batcher.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tools/server/repository.h"

namespace dynvm::server {

struct Batcher::Pending {
  std::vector<Tensor> inputs;
  int64_t rows = 0;
  absl::Time deadline, enqueued;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool abandoned = false;  // its caller stopped waiting (deadline)
  absl::Status status;
  Result result;
};

namespace {

// Whether two requests can share a batch: the same dims past the first, input by input.
bool SameRowShape(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].rank() != b[i].rank()) return false;
    for (int d = 1; d < a[i].rank(); ++d) {
      if (a[i].dim(d) != b[i].dim(d)) return false;
    }
  }
  return true;
}

// Rows [begin, begin + rows) of a contiguous tensor: a view of its storage, which it keeps
// alive (each request of a batch holds its rows of the batch's outputs, no copy).
absl::StatusOr<Tensor> RowsView(const Tensor& t, int64_t begin, int64_t rows) {
  if (begin == 0 && rows == t.dim(0)) return t;
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  const int64_t row_bytes = dims[0] == 0 ? 0 : t.nbytes() / dims[0];
  dims[0] = rows;
  return Tensor::View(t.storage(), t.byte_offset() + begin * row_bytes, t.dtype(), dims);
}

}  // namespace

// Every input of the batch's requests concatenated along the batch (contiguous row-major: one
// copy of each request's rows).
absl::StatusOr<std::vector<Tensor>> Batcher::Gather(
    const std::vector<std::shared_ptr<Pending>>& batch, int64_t rows) {
  std::vector<Tensor> inputs;
  for (size_t k = 0; k < batch[0]->inputs.size(); ++k) {
    std::vector<int64_t> dims(batch[0]->inputs[k].dims().begin(), batch[0]->inputs[k].dims().end());
    dims[0] = rows;
    DYNVM_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(batch[0]->inputs[k].dtype(), dims));
    auto* dst = static_cast<uint8_t*>(t.raw_data());
    for (const auto& p : batch) {
      const Tensor& in = p->inputs[k];
      const size_t n = static_cast<size_t>(in.nbytes());
      if (!in.is_contiguous())
        return absl::InvalidArgumentError("dynamic_batching: an input is not contiguous");
      if (n > 0) std::memcpy(dst, in.raw_data(), n);
      dst += n;
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

absl::Status CheckBatchable(const FunctionInfo& fn) {
  std::string symbol;
  for (const auto* params : {&fn.inputs, &fn.outputs}) {
    for (const ParamInfo& p : *params) {
      if (p.kind != ObjectKind::kTensor || p.dtype == DType::kString || !p.has_shape ||
          p.shape.empty() || p.shape[0].value >= 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "dynamic_batching needs every input and output to be a numeric tensor with a "
            "symbolic first dim; '",
            p.name, "' is not"));
      }
      if (symbol.empty()) symbol = p.shape[0].symbol;
      if (p.shape[0].symbol != symbol)
        return absl::FailedPreconditionError(absl::StrCat("dynamic_batching: '", p.name,
                                                          "' has first dim '", p.shape[0].symbol,
                                                          "', not the batch '", symbol, "'"));
    }
  }
  return absl::OkStatus();
}

Batcher::Batcher(BatchingConfig config, int workers, int max_queue, RunFn run)
    : config_(config), max_queue_(max_queue), run_(std::move(run)) {
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { Work(); });
}

Batcher::~Batcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  arrival_cv_.notify_all();
  full_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

absl::StatusOr<Batcher::Result> Batcher::Submit(std::vector<Tensor> inputs, absl::Time deadline) {
  auto p = std::make_shared<Pending>();
  p->rows = inputs.empty() || inputs[0].rank() == 0 ? 0 : inputs[0].dim(0);
  if (p->rows > config_.max_batch_size)
    return absl::ResourceExhaustedError(
        absl::StrCat("batch ", p->rows, " is over max_batch_size ", config_.max_batch_size));
  p->inputs = std::move(inputs);
  p->deadline = deadline;
  p->enqueued = absl::Now();
  bool wake_empty = false, wake_full = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int>(queue_.size()) >= max_queue_) {
      absl::Status s =
          absl::UnavailableError(absl::StrCat("the model is busy: ", queue_.size(),
                                              " requests already wait to be batched; retry later"));
      s.SetPayload(kQueueFullPayload, absl::Cord("1"));
      return s;
    }
    queue_.push_back(p);
    queued_rows_ += p->rows;
    last_arrival_ = p->enqueued;
    wake_empty = empty_waiters_ > 0;
    wake_full = queued_rows_ >= config_.max_batch_size;
  }
  if (wake_empty) arrival_cv_.notify_one();
  if (wake_full) full_cv_.notify_all();
  std::unique_lock<std::mutex> lock(p->mu);
  while (!p->done) {
    const absl::Duration left = std::min(deadline - absl::Now(), absl::Seconds(10));
    if (p->cv.wait_for(lock, absl::ToChronoNanoseconds(left)) == std::cv_status::timeout &&
        !p->done && absl::Now() >= deadline) {
      p->abandoned = true;
      return absl::DeadlineExceededError("timed out waiting for a batch to run");
    }
  }
  if (!p->status.ok()) return p->status;
  return std::move(p->result);
}

std::vector<std::shared_ptr<Batcher::Pending>> Batcher::TakeBatch(
    std::unique_lock<std::mutex>& lock) {
  // Wait for the first request, then while requests keep coming (one within the arrival gap of
  // the last) until the batch is full or the first has waited its delay. Waiting longer than
  // the arrival gap would only hold the requests queued (and an instance idle) when no more
  // are coming, e.g. when every client already waits on a queued or running request.
  ++idle_workers_;
  ++empty_waiters_;
  arrival_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
  --empty_waiters_;
  if (queue_.empty()) {
    --idle_workers_;
    return {};
  }
  const absl::Time until =
      queue_.front()->enqueued + absl::Microseconds(config_.max_queue_delay_us);
  const absl::Duration gap = absl::Microseconds(config_.max_arrival_gap_us);
  auto rows_ready = [this] {
    int64_t rows = 0;
    for (const auto& p : queue_) {
      if (SameRowShape(p->inputs, queue_.front()->inputs)) rows += p->rows;
    }
    return rows;
  };
  while (!stopping_ && !queue_.empty() && rows_ready() < config_.max_batch_size) {
    const absl::Time now = absl::Now();
    const absl::Time stop = std::min(until, last_arrival_ + gap);
    if (now >= stop) break;
    full_cv_.wait_for(lock, absl::ToChronoNanoseconds(stop - now));
  }
  std::vector<std::shared_ptr<Pending>> batch;
  if (queue_.empty()) {
    --idle_workers_;
    return batch;
  }
  // The rows ready are shared among the idle workers: one worker taking them all would leave
  // the other instances idle while it runs (the queue refills only as its answers go out).
  const int64_t idle = std::max(1, idle_workers_);
  const int64_t limit =
      std::min(config_.max_batch_size, std::max<int64_t>(1, (rows_ready() + idle - 1) / idle));
  const std::vector<Tensor> first_inputs = queue_.front()->inputs;  // the front leaves the queue
  int64_t rows = 0;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (SameRowShape((*it)->inputs, first_inputs) &&
        (batch.empty() || rows + (*it)->rows <= limit)) {
      rows += (*it)->rows;
      batch.push_back(*it);
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  queued_rows_ -= rows;
  --idle_workers_;
  if (!queue_.empty()) {  // what is left is another idle worker's
    arrival_cv_.notify_one();
    if (queued_rows_ >= config_.max_batch_size) full_cv_.notify_one();
  }
  return batch;
}

void Batcher::Work() {
  while (true) {
    std::vector<std::shared_ptr<Pending>> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      batch = TakeBatch(lock);
      if (batch.empty() && stopping_) return;
    }
    if (!batch.empty()) RunBatch(batch);
  }
}

void Batcher::RunBatch(const std::vector<std::shared_ptr<Pending>>& batch) {
  const absl::Time start = absl::Now();
  absl::Time deadline = absl::InfinitePast();
  int64_t rows = 0;
  for (const auto& p : batch) {
    deadline = std::max(deadline, p->deadline);
    rows += p->rows;
  }
  // A batch of one request runs on that request's tensors; a larger one on its inputs gathered
  // along the batch (one copy of each request's rows).
  absl::StatusOr<std::vector<Tensor>> inputs =
      batch.size() == 1 ? batch[0]->inputs : Gather(batch, rows);
  absl::StatusOr<std::vector<Tensor>> outputs =
      inputs.ok() ? run_(*inputs, deadline) : inputs.status();
  const double compute = absl::ToDoubleSeconds(absl::Now() - start);
  if (outputs.ok()) {
    for (const Tensor& o : *outputs) {
      if (o.rank() == 0 || o.dim(0) != rows || !o.is_contiguous())
        outputs = absl::InternalError(
            absl::StrCat("dynamic_batching: an output's first dim is not the batch (", rows, ")"));
    }
  }
  int64_t begin = 0;
  for (const auto& p : batch) {
    Result r;
    r.queue_s = absl::ToDoubleSeconds(start - p->enqueued);
    r.compute_s = compute;
    r.batch_rows = rows;
    r.first_in_batch = p == batch.front();
    absl::Status s = outputs.status();
    if (s.ok()) {
      for (const Tensor& o : *outputs) {
        absl::StatusOr<Tensor> mine = RowsView(o, begin, p->rows);  // no copy
        if (!mine.ok()) {
          s = mine.status();
          break;
        }
        r.outputs.push_back(*std::move(mine));
      }
    }
    begin += p->rows;
    std::lock_guard<std::mutex> lock(p->mu);
    p->status = std::move(s);
    p->result = std::move(r);
    p->done = true;
    p->cv.notify_one();
  }
}

}  // namespace dynvm::server
