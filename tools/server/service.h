// What the HTTP and gRPC front ends of dynvm-server share: running an inference or a
// generation on a model's pool, the Prometheus metrics, the access log and the mapping of a
// status to HTTP codes.
//
// Thread safety: Service is thread-safe.
#ifndef DYNVM_TOOLS_SERVER_SERVICE_H_
#define DYNVM_TOOLS_SERVER_SERVICE_H_

#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "tools/server/codec.h"
#include "tools/server/repository.h"

namespace dynvm::server {

inline constexpr char kServerName[] = "dynvm-server";
inline constexpr char kServerVersion[] = "0.1.0";

// Where a request spent its time (seconds).
struct Timing {
  double queue = 0, compute = 0;
  int64_t tokens = 0;
};

// A request's deadline and how to tell that its client went away.
struct CallContext {
  absl::Time deadline = absl::InfiniteFuture();
  std::function<bool()> cancelled;  // may be empty
};

// The generate extension's request: the prompt and its parameters (max_new_tokens,
// temperature, seed, stop_token, or any scalar input of the model by name).
struct GenerateRequest {
  std::string text_input;
  std::map<std::string, double> parameters;
  int64_t timeout_ms = 0;
};

// Receives each piece of generated text (one token's) as `emit` produces it; a non-OK status
// stops the run (the client went away).
using TextSink = std::function<absl::Status(const std::string& piece)>;

class Service {
 public:
  Service(std::shared_ptr<Repository> repo, FILE* access_log);

  Repository& repository() { return *repo_; }

  // The deadline of a request asking `timeout_ms` (0: the model's default; capped by it).
  // Past the drain timeout after SIGTERM (drain_expired), every call counts as cancelled.
  CallContext Context(const ModelVersion& model, int64_t timeout_ms,
                      std::function<bool()> cancelled) const;

  // Validates `inputs` against the signature, runs them on an instance and returns the
  // outputs named in `requested` (all when empty), in that order.
  absl::StatusOr<std::vector<NamedTensor>> Infer(ModelVersion& model,
                                                 const std::vector<NamedTensor>& inputs,
                                                 const std::vector<std::string>& requested,
                                                 const CallContext& call, Timing* timing);

  // The inputs of a generation: the prompt (through the model's vocabulary; without one,
  // token ids separated by spaces) and each other input from the request's parameters or the
  // model's defaults, checked against the signature.
  absl::StatusOr<std::vector<NamedTensor>> GenerateInputs(const ModelVersion& model,
                                                          const GenerateRequest& request);
  // Runs the model's in-VM decode loop on `lease`'s VM; every token the program emits goes to
  // `sink` as text (through the vocabulary; its decimal id and a space without one).
  absl::Status Generate(ModelVersion& model, Lease& lease, const std::vector<NamedTensor>& inputs,
                        const CallContext& call, const TextSink& sink, Timing* timing);

  // Counts a finished request in the metrics and writes its access-log line.
  void Record(absl::string_view protocol, absl::string_view method, absl::string_view target,
              absl::string_view model, int code, int64_t bytes, absl::Duration total,
              const Timing& timing);

  // The Prometheus text exposition of every metric.
  std::string MetricsText();

  std::atomic<bool> draining{false};       // SIGTERM: ready says no
  std::atomic<bool> drain_expired{false};  // the drain timeout passed: runs in progress stop

 private:
  // Infer through the model's dynamic batcher: this request's rows of each output.
  absl::StatusOr<std::vector<NamedTensor>> InferBatched(ModelVersion& model,
                                                        const std::vector<NamedTensor>& inputs,
                                                        const std::vector<int>& out_index,
                                                        const CallContext& call, Timing* timing);

  // The histograms of one model's request phases, and of its batch sizes.
  struct PhaseHistograms {
    prometheus::Histogram *queue, *compute, *total, *batch;
  };
  // The metrics Record updates, found once per label set (Family::Add builds and hashes a label
  // map under the family's lock each call). Families never remove a metric, so the pointers
  // stay valid; the label sets are bounded as the metrics' are (loaded models only).
  prometheus::Counter& RequestCounter(const std::string& model, absl::string_view protocol,
                                      int code);
  PhaseHistograms Phases(const std::string& model);

  std::shared_ptr<Repository> repo_;
  FILE* access_log_;
  std::mutex metrics_mu_;
  absl::flat_hash_map<std::string, prometheus::Counter*> request_counters_;
  absl::flat_hash_map<std::string, PhaseHistograms> phases_;
  std::mutex log_mu_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* tokens_;
  prometheus::Family<prometheus::Histogram>* latency_;
  prometheus::Family<prometheus::Histogram>* batch_;
  prometheus::Family<prometheus::Gauge>* busy_;
  prometheus::Family<prometheus::Gauge>* queued_;
};

// HTTP status for an error status: 400 bad input, 404 not found, 413 past a limit, 503 queue
// full or draining, 504 deadline, 499 cancelled, 500 otherwise.
int HttpCode(const absl::Status& s);

}  // namespace dynvm::server

#endif  // DYNVM_TOOLS_SERVER_SERVICE_H_
