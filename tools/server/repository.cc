#include "tools/server/repository.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"
#include "kernels/thread_pool.h"
#include "nlohmann/json.hpp"
#include "tools/vocab.h"

namespace dynvm::server {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

absl::Status ReadInt(const Json& j, const char* key, int64_t lo, int64_t hi, int64_t* out,
                     absl::string_view what) {
  auto it = j.find(key);
  if (it == j.end()) return absl::OkStatus();
  if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": \"", key, "\" must be an integer in [", lo, ", ", hi, "]"));
  }
  *out = it->get<int64_t>();
  return absl::OkStatus();
}

absl::Status ReadLimits(const Json& j, Limits* limits, absl::string_view what) {
  if (!j.is_object())
    return absl::InvalidArgumentError(absl::StrCat(what, ": \"limits\" must be an object"));
  constexpr int64_t kMax = int64_t{1} << 40;
  DYNVM_RETURN_IF_ERROR(ReadInt(j, "max_body_bytes", 1, kMax, &limits->max_body_bytes, what));
  DYNVM_RETURN_IF_ERROR(ReadInt(j, "max_elements", 1, kMax, &limits->max_elements, what));
  DYNVM_RETURN_IF_ERROR(ReadInt(j, "max_string_bytes", 0, kMax, &limits->max_string_bytes, what));
  DYNVM_RETURN_IF_ERROR(ReadInt(j, "max_tensors", 1, 4096, &limits->max_tensors, what));
  DYNVM_RETURN_IF_ERROR(ReadInt(j, "max_batch", 1, kMax, &limits->max_batch, what));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

absl::StatusOr<std::shared_ptr<const Executable>> LoadExecutable(const std::string& dir,
                                                                 const ModelConfig& config,
                                                                 std::string* platform) {
  const std::string dvm = dir + "/model.dvm", onnx = dir + "/model.onnx";
  std::error_code ec;
  if (fs::is_regular_file(dvm, ec)) {
    *platform = "dynvm_dvm";
    return Executable::Load(dvm);
  }
  if (!fs::is_regular_file(onnx, ec))
    return absl::NotFoundError(absl::StrCat(dir, " has neither model.dvm nor model.onnx"));
  *platform = "onnx";
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<compiler::Module> module,
                         compiler::onnx::ImportOnnxFile(onnx));
  compiler::CompileOptions options;
  options.bounds = config.bounds;
  options.producer = "dynvm-server";
  DYNVM_ASSIGN_OR_RETURN(compiler::CompileResult result, compiler::Compile(*module, options));
  return Executable::LoadFromBytes(absl::string_view(result.bytes));
}

}  // namespace

bool IsQueueFull(const absl::Status& s) {
  return absl::IsUnavailable(s) && s.GetPayload(kQueueFullPayload).has_value();
}

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json, absl::string_view what) {
  DYNVM_ASSIGN_OR_RETURN(Json j, ParseJson(json, what));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, " must be an object"));
  ModelConfig c;
  int64_t v = c.instances;
  DYNVM_RETURN_IF_ERROR(ReadInt(j, "instances", 0, 1024, &v, what));
  c.instances = static_cast<int>(v);
  v = c.threads_per_instance;
  DYNVM_RETURN_IF_ERROR(ReadInt(j, "threads_per_instance", 1, 1024, &v, what));
  c.threads_per_instance = static_cast<int>(v);
  v = c.max_queue;
  DYNVM_RETURN_IF_ERROR(ReadInt(j, "max_queue", 0, 1 << 20, &v, what));
  c.max_queue = static_cast<int>(v);
  DYNVM_RETURN_IF_ERROR(ReadInt(j, "timeout_ms", 1, int64_t{1} << 40, &c.timeout_ms, what));
  DYNVM_RETURN_IF_ERROR(
      ReadInt(j, "max_new_tokens_limit", 1, int64_t{1} << 30, &c.max_new_tokens_limit, what));
  for (const char* key : {"function", "vocab", "prompt_input"}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    if (!it->is_string())
      return absl::InvalidArgumentError(absl::StrCat(what, ": \"", key, "\" must be a string"));
    std::string s = it->get<std::string>();
    if (std::string(key) == "function") c.function = s;
    if (std::string(key) == "vocab") c.vocab = s;
    if (std::string(key) == "prompt_input") c.prompt_input = s;
  }
  if (auto it = j.find("bounds"); it != j.end()) {
    if (!it->is_object())
      return absl::InvalidArgumentError(absl::StrCat(what, ": \"bounds\" must be an object"));
    for (auto b = it->begin(); b != it->end(); ++b) {
      if (!b->is_number_integer() || b->get<int64_t>() < 0)
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": bound '", b.key(), "' must be a non-negative integer"));
      c.bounds.emplace_back(b.key(), b->get<int64_t>());
    }
  }
  if (auto it = j.find("defaults"); it != j.end()) {
    if (!it->is_object())
      return absl::InvalidArgumentError(absl::StrCat(what, ": \"defaults\" must be an object"));
    for (auto d = it->begin(); d != it->end(); ++d) {
      if (!d->is_number())
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": default '", d.key(), "' must be a number"));
      c.generate_defaults[d.key()] = d->get<double>();
    }
  }
  if (auto it = j.find("limits"); it != j.end())
    DYNVM_RETURN_IF_ERROR(ReadLimits(*it, &c.limits, what));
  if (auto it = j.find("dynamic_batching"); it != j.end()) {
    if (!it->is_object())
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": \"dynamic_batching\" must be an object"));
    DYNVM_RETURN_IF_ERROR(
        ReadInt(*it, "max_batch_size", 1, 1 << 20, &c.batching.max_batch_size, what));
    DYNVM_RETURN_IF_ERROR(
        ReadInt(*it, "max_queue_delay_us", 0, 10'000'000, &c.batching.max_queue_delay_us, what));
    c.batching.max_arrival_gap_us = c.batching.max_queue_delay_us / 8;
    DYNVM_RETURN_IF_ERROR(
        ReadInt(*it, "max_arrival_gap_us", 0, 10'000'000, &c.batching.max_arrival_gap_us, what));
    if (c.batching.max_batch_size == 0)
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": dynamic_batching needs max_batch_size"));
  }
  return c;
}

Lease::~Lease() {
  if (owner_ != nullptr && vm_ != nullptr) owner_->Release(std::move(vm_));
}

absl::StatusOr<std::shared_ptr<ModelVersion>> ModelVersion::Load(const std::string& model_dir,
                                                                 const std::string& name,
                                                                 const std::string& version,
                                                                 const ModelConfig& config) {
  auto m = std::make_shared<ModelVersion>();
  m->name_ = name;
  m->version_ = version;
  m->config_ = config;
  const std::string dir = model_dir + "/" + version;
  DYNVM_ASSIGN_OR_RETURN(m->exe_, LoadExecutable(dir, config, &m->platform_));
  DYNVM_ASSIGN_OR_RETURN(m->handle_, m->exe_->ResolveFunction(config.function));
  DYNVM_ASSIGN_OR_RETURN(int index, m->exe_->FindFunction(config.function));
  m->function_ = &m->exe_->function(index);
  if (!config.vocab.empty()) {
    const fs::path p(config.vocab);
    if (p.is_absolute() || config.vocab.find("..") != std::string::npos)
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": \"vocab\" must be a file name inside the model's folder, got ", config.vocab));
    DYNVM_ASSIGN_OR_RETURN(m->vocab_, cli::ReadVocab(model_dir + "/" + config.vocab));
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = std::min(config.threads_per_instance, MaxThreads());
  m->instances_ = config.instances > 0 ? config.instances : std::max(1, cores / threads);
  VmOptions options;
  options.num_threads = threads;
  for (int i = 0; i < m->instances_; ++i) {
    DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<VirtualMachine> vm,
                           VirtualMachine::Create(m->exe_, options));
    m->free_.push_back(std::move(vm));
  }
  if (config.batching.max_batch_size > 0) {
    DYNVM_RETURN_IF_ERROR(CheckBatchable(*m->function_), name, "/config.json");
    ModelVersion* model = m.get();
    m->batcher_ = std::make_unique<Batcher>(
        config.batching, m->instances_, config.max_queue,
        [model](const std::vector<Tensor>& inputs,
                absl::Time deadline) -> absl::StatusOr<std::vector<Tensor>> {
          DYNVM_ASSIGN_OR_RETURN(Lease lease, model->Acquire(deadline, nullptr));
          VirtualMachine& vm = lease.vm();
          for (size_t k = 0; k < inputs.size(); ++k) {
            DYNVM_RETURN_IF_ERROR(
                vm.SetInputZeroCopy(model->function().inputs[k].name, inputs[k], model->handle()));
          }
          RunOptions run;
          run.handle = model->handle();
          run.deadline = deadline;
          DYNVM_RETURN_IF_ERROR(vm.Run(run));
          return vm.GetOutputs(model->handle());
        });
  }
  return m;
}

absl::StatusOr<Lease> ModelVersion::Acquire(absl::Time deadline,
                                            const std::function<bool()>& cancelled) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!free_.empty() && waiters_.empty()) {
    std::unique_ptr<VirtualMachine> vm = std::move(free_.back());
    free_.pop_back();
    return Lease(this, std::move(vm));
  }
  if (static_cast<int>(waiters_.size()) >= config_.max_queue) {
    absl::Status s = absl::UnavailableError(
        absl::StrCat("model '", name_, "' is busy: ", waiters_.size(),
                     " requests already wait for its ", instances_, " instance(s); retry later"));
    s.SetPayload(kQueueFullPayload, absl::Cord("1"));
    return s;
  }
  Waiter me;
  waiters_.push_back(&me);
  while (me.vm == nullptr) {
    const absl::Time now = absl::Now();
    const bool late = now >= deadline, gone = !late && cancelled && cancelled();
    if (late || gone) {  // not served yet (me.vm is null under the lock): leave the queue
      waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &me));
      if (late) {
        return absl::DeadlineExceededError(
            absl::StrCat("timed out waiting for an instance of model '", name_, "'"));
      }
      return absl::CancelledError("the client went away while the request waited");
    }
    const absl::Time until = std::min(deadline, now + absl::Milliseconds(20));
    me.cv.wait_for(lock, absl::ToChronoNanoseconds(until - now));
  }
  return Lease(this, std::move(me.vm));
}

void ModelVersion::Release(std::unique_ptr<VirtualMachine> vm) {
  std::lock_guard<std::mutex> lock(mu_);
  if (waiters_.empty()) {
    free_.push_back(std::move(vm));
    return;
  }
  Waiter* oldest = waiters_.front();
  waiters_.pop_front();
  oldest->vm = std::move(vm);
  oldest->cv.notify_one();  // under the lock: `oldest` lives on its thread's stack until it wakes
}

int ModelVersion::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return instances_ - static_cast<int>(free_.size());
}

int ModelVersion::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(waiters_.size());
}

absl::Status Repository::LoadAll() {
  std::error_code ec;
  fs::directory_iterator it(dir_, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot read the model repository ", dir_));
  std::vector<std::string> names, failed;
  for (const fs::directory_entry& e : it) {
    if (e.is_directory(ec) && CheckName(e.path().filename().string(), "model").ok())
      names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (absl::Status s = Load(name); !s.ok())
      failed.push_back(absl::StrCat(name, ": ", s.message()));
  }
  if (!failed.empty()) return absl::InvalidArgumentError(absl::StrJoin(failed, "; "));
  return absl::OkStatus();
}

absl::Status Repository::Load(const std::string& name) {
  DYNVM_RETURN_IF_ERROR(CheckName(name, "model"));
  const std::string model_dir = dir_ + "/" + name;
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec))
    return absl::NotFoundError(absl::StrCat("no model '", name, "' in the repository"));
  auto fail = [&](absl::Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    failures_[name] = std::string(s.message());
    return s;
  };
  ModelConfig config;
  if (fs::is_regular_file(model_dir + "/config.json", ec)) {
    absl::StatusOr<std::string> text = ReadFile(model_dir + "/config.json");
    if (!text.ok()) return fail(text.status());
    absl::StatusOr<ModelConfig> c = ParseModelConfig(*text, name + "/config.json");
    if (!c.ok()) return fail(c.status());
    config = *c;
  }
  std::map<int64_t, std::shared_ptr<ModelVersion>> versions;
  for (const fs::directory_entry& e : fs::directory_iterator(model_dir, ec)) {
    int64_t v;
    const std::string vname = e.path().filename().string();
    if (!e.is_directory(ec) || !absl::SimpleAtoi(vname, &v) || v < 0 || absl::StrCat(v) != vname)
      continue;
    absl::StatusOr<std::shared_ptr<ModelVersion>> m =
        ModelVersion::Load(model_dir, name, vname, config);
    if (!m.ok())
      return fail(absl::Status(m.status().code(),
                               absl::StrCat("version ", vname, ": ", m.status().message())));
    versions[v] = *std::move(m);
  }
  if (versions.empty())
    return fail(
        absl::NotFoundError(absl::StrCat("model '", name, "' has no numbered version folder")));
  std::lock_guard<std::mutex> lock(mu_);
  models_[name] = std::move(versions);
  failures_.erase(name);
  return absl::OkStatus();
}

absl::Status Repository::Unload(const std::string& name) {
  DYNVM_RETURN_IF_ERROR(CheckName(name, "model"));
  std::lock_guard<std::mutex> lock(mu_);
  if (models_.erase(name) == 0)
    return absl::NotFoundError(absl::StrCat("model '", name, "' is not loaded"));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ModelVersion>> Repository::Find(const std::string& name,
                                                               const std::string& version) const {
  DYNVM_RETURN_IF_ERROR(CheckName(name, "model"));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end() || it->second.empty())
    return absl::NotFoundError(absl::StrCat("model '", name, "' is not loaded"));
  if (version.empty()) return it->second.rbegin()->second;
  int64_t v;
  if (!absl::SimpleAtoi(version, &v))
    return absl::InvalidArgumentError(
        absl::StrCat("version '", version.substr(0, 32), "' is not a number"));
  auto vit = it->second.find(v);
  if (vit == it->second.end())
    return absl::NotFoundError(absl::StrCat("model '", name, "' has no version ", v, " loaded"));
  return vit->second;
}

std::vector<std::string> Repository::Versions(const std::string& name) const {
  std::vector<std::string> out;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end()) return out;
  for (const auto& [v, m] : it->second) out.push_back(m->version());
  return out;
}

std::vector<Repository::IndexEntry> Repository::Index() const {
  std::vector<IndexEntry> out;
  std::error_code ec;
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    if (e.is_directory(ec) && CheckName(e.path().filename().string(), "model").ok())
      names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& name : names) {
    auto it = models_.find(name);
    if (it != models_.end()) {
      for (const auto& [v, m] : it->second) out.push_back({name, m->version(), "READY", ""});
      continue;
    }
    auto f = failures_.find(name);
    out.push_back({name, "", "UNAVAILABLE", f == failures_.end() ? "unloaded" : f->second});
  }
  return out;
}

}  // namespace dynvm::server
