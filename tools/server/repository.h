// The model repository of dynvm-server: DIR/<model>/<version>/model.onnx or model.dvm (+ its
// .dvw), with an optional DIR/<model>/config.json (docs/serving.md). Each version is compiled
// (or mapped) once into one shared Executable, served by a pool of VMs ("instances") behind a
// bounded queue.
//
// Thread safety: Repository and ModelVersion are thread-safe. A request holds a
// shared_ptr<ModelVersion>: loading a new version or unloading a model never drops a request in
// flight on the old one.
#ifndef DYNVM_TOOLS_SERVER_REPOSITORY_H_
#define DYNVM_TOOLS_SERVER_REPOSITORY_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/server/batcher.h"
#include "tools/server/codec.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::server {

// config.json of a model (every field optional).
struct ModelConfig {
  std::vector<std::pair<std::string, int64_t>> bounds;  // "bounds": {"batch": 1, ...} (ONNX)
  int instances = 0;             // "instances": VMs; 0 = cores / threads_per_instance
  int threads_per_instance = 1;  // "threads_per_instance": intra-op threads of each VM
  int max_queue = 64;            // "max_queue": requests waiting for an instance
  int64_t timeout_ms = 60000;    // "timeout_ms": default (and maximum) per-request deadline
  std::string function;          // "function": the entry to serve ("" = main)
  std::string vocab;             // "vocab": token id -> code point file, relative to the model
  // "generate": the generate extension's binding (docs/serving.md).
  std::string prompt_input = "prompt";              // "prompt_input"
  std::map<std::string, double> generate_defaults;  // "defaults": {"temperature": 0, ...}
  int64_t max_new_tokens_limit = 4096;              // "max_new_tokens_limit"
  Limits limits;                                    // "limits": {"max_body_bytes": ...}
  // "dynamic_batching": {"max_batch_size": N, "max_queue_delay_us": U} (batcher.h)
  BatchingConfig batching;
};

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json, absl::string_view what);

// Queue full: Unavailable carrying this payload (503 + Retry-After / RESOURCE_EXHAUSTED).
inline constexpr char kQueueFullPayload[] = "dynvm.queue_full";
bool IsQueueFull(const absl::Status& s);

class ModelVersion;

// A VM borrowed from a model's pool; returned to it on destruction.
class Lease {
 public:
  Lease() = default;
  Lease(ModelVersion* owner, std::unique_ptr<VirtualMachine> vm)
      : owner_(owner), vm_(std::move(vm)) {}
  Lease(Lease&&) = default;
  Lease& operator=(Lease&&) = default;
  ~Lease();
  VirtualMachine& vm() { return *vm_; }

 private:
  ModelVersion* owner_ = nullptr;
  std::unique_ptr<VirtualMachine> vm_;
};

class ModelVersion {
 public:
  static absl::StatusOr<std::shared_ptr<ModelVersion>> Load(const std::string& model_dir,
                                                            const std::string& name,
                                                            const std::string& version,
                                                            const ModelConfig& config);

  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const ModelConfig& config() const { return config_; }
  const FunctionInfo& function() const { return *function_; }
  const FunctionHandle& handle() const { return handle_; }
  const std::vector<uint32_t>& vocab() const { return vocab_; }
  const std::string& platform() const { return platform_; }
  int instances() const { return instances_; }
  // The dynamic batcher, when config.json asks for one (null otherwise).
  Batcher* batcher() const { return batcher_.get(); }

  // Waits (bounded by the queue and `deadline`) for a free VM, first come first served: a VM
  // returned while requests wait goes to the one that has waited longest, never to a request
  // that came later (a closed-loop client asking again at once queues behind the others).
  // Unavailable with kQueueFullPayload when max_queue requests already wait; DeadlineExceeded
  // past `deadline`; Cancelled when `cancelled` says so (checked every 20 ms).
  absl::StatusOr<Lease> Acquire(absl::Time deadline, const std::function<bool()>& cancelled);
  int busy() const;
  int queued() const;

 private:
  friend class Lease;
  void Release(std::unique_ptr<VirtualMachine> vm);

  std::string name_, version_, platform_;
  ModelConfig config_;
  std::shared_ptr<const Executable> exe_;
  const FunctionInfo* function_ = nullptr;
  FunctionHandle handle_;
  std::vector<uint32_t> vocab_;
  int instances_ = 0;
  // A request waiting for a VM: Release moves one into `vm` and wakes it.
  struct Waiter {
    std::condition_variable cv;
    std::unique_ptr<VirtualMachine> vm;
  };
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<VirtualMachine>> free_;
  std::deque<Waiter*> waiters_;       // oldest first
  std::unique_ptr<Batcher> batcher_;  // last: its workers stop before the pool goes
};

class Repository {
 public:
  explicit Repository(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }

  // Loads every model folder of the repository; the error lists the models that failed (the
  // others stay loaded).
  absl::Status LoadAll();
  // Loads (or reloads) every version of model `name`; NotFound when DIR/name is not a folder.
  absl::Status Load(const std::string& name);
  absl::Status Unload(const std::string& name);

  // The version `version` of model `name` ("" = the highest version); NotFound naming what is
  // missing.
  absl::StatusOr<std::shared_ptr<ModelVersion>> Find(const std::string& name,
                                                     const std::string& version) const;
  // The loaded versions of `name`, ascending.
  std::vector<std::string> Versions(const std::string& name) const;

  struct IndexEntry {
    std::string name, version, state, reason;
  };
  // Every model folder in the repository and every loaded version.
  std::vector<IndexEntry> Index() const;

 private:
  std::string dir_;
  mutable std::mutex mu_;
  // name -> version number -> model
  std::map<std::string, std::map<int64_t, std::shared_ptr<ModelVersion>>> models_;
  std::map<std::string, std::string> failures_;  // name -> why its last load failed
};

}  // namespace dynvm::server

#endif  // DYNVM_TOOLS_SERVER_REPOSITORY_H_
