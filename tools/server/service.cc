#include "tools/server/service.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "prometheus/text_serializer.h"
#include "tools/vocab.h"

namespace dynvm::server {
namespace {

// A one-element tensor of `p`'s dtype and rank holding `v` (a generate parameter).
absl::StatusOr<Tensor> ScalarFor(const ParamInfo& p, double v) {
  const int rank = p.has_shape ? static_cast<int>(p.shape.size()) : 0;
  for (int d = 0; d < rank; ++d) {
    if (p.shape[d].value > 1)
      return absl::InvalidArgumentError(
          absl::StrCat("input '", p.name, "' is not a scalar; it cannot be a parameter"));
  }
  std::vector<int64_t> dims(static_cast<size_t>(rank), 1);
  DYNVM_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(p.dtype, dims));
  const bool integral = std::floor(v) == v && std::abs(v) < 9.2e18;
  switch (p.dtype) {
    case DType::kF32:
      *t.data<float>() = static_cast<float>(v);
      return t;
    case DType::kF64:
      *t.data<double>() = v;
      return t;
    case DType::kI64:
    case DType::kI32:
      if (!integral)
        return absl::InvalidArgumentError(
            absl::StrCat("parameter '", p.name, "' must be an integer"));
      if (p.dtype == DType::kI64) *t.data<int64_t>() = static_cast<int64_t>(v);
      if (p.dtype == DType::kI32) {
        if (std::abs(v) > 2147483647.0)
          return absl::InvalidArgumentError(
              absl::StrCat("parameter '", p.name, "' is out of range"));
        *t.data<int32_t>() = static_cast<int32_t>(v);
      }
      return t;
    case DType::kBool:
      *t.data<bool>() = v != 0;
      return t;
    default:
      return absl::InvalidArgumentError(absl::StrCat("input '", p.name, "' of dtype ",
                                                     DTypeName(p.dtype), " cannot be a parameter"));
  }
}

absl::Status RunOnVm(VirtualMachine& vm, const ModelVersion& model, const CallContext& call,
                     EmitCallback on_emit) {
  CancellationToken token;
  RunOptions run;
  run.handle = model.handle();
  run.deadline = call.deadline;
  run.on_emit = std::move(on_emit);
  if (call.cancelled) {
    run.poll = [&call]() -> absl::Status {
      if (call.cancelled()) return absl::CancelledError("the client went away");
      return absl::OkStatus();
    };
  }
  run.cancel = &token;
  return vm.Run(run);
}

// The sampling filters `vm-compile --decode` adds (top_k, top_p, repetition_penalty) default to
// their "off" values when neither the request nor config.json gives them, as in Hugging Face's
// generate.
std::optional<double> SamplingFilterOff(absl::string_view name) {
  if (name == "top_k") return 0.0;
  if (name == "top_p" || name == "repetition_penalty") return 1.0;
  return std::nullopt;
}

}  // namespace

Service::Service(std::shared_ptr<Repository> repo, FILE* access_log)
    : repo_(std::move(repo)),
      access_log_(access_log),
      registry_(std::make_shared<prometheus::Registry>()) {
  requests_ = &prometheus::BuildCounter()
                   .Name("dynvm_requests_total")
                   .Help("Requests answered, by model, protocol and status code")
                   .Register(*registry_);
  tokens_ = &prometheus::BuildCounter()
                 .Name("dynvm_generated_tokens_total")
                 .Help("Tokens streamed by generate and generate_stream (rate = tokens/s)")
                 .Register(*registry_);
  latency_ = &prometheus::BuildHistogram()
                  .Name("dynvm_request_seconds")
                  .Help(
                      "Time per request, by phase: queue (waiting for an instance), compute "
                      "(the VM run) and total (end to end)")
                  .Register(*registry_);
  batch_ = &prometheus::BuildHistogram()
                .Name("dynvm_batch_size")
                .Help("First dimension of the inputs of each run")
                .Register(*registry_);
  busy_ = &prometheus::BuildGauge()
               .Name("dynvm_instances_busy")
               .Help("Instances (VMs) running a request")
               .Register(*registry_);
  queued_ = &prometheus::BuildGauge()
                 .Name("dynvm_queue_length")
                 .Help("Requests waiting for an instance")
                 .Register(*registry_);
}

CallContext Service::Context(const ModelVersion& model, int64_t timeout_ms,
                             std::function<bool()> cancelled) const {
  const int64_t ms =
      timeout_ms > 0 ? std::min(timeout_ms, model.config().timeout_ms) : model.config().timeout_ms;
  return {absl::Now() + absl::Milliseconds(ms), [this, c = std::move(cancelled)] {
            return drain_expired.load(std::memory_order_relaxed) || (c && c());
          }};
}

absl::StatusOr<std::vector<NamedTensor>> Service::Infer(ModelVersion& model,
                                                        const std::vector<NamedTensor>& inputs,
                                                        const std::vector<std::string>& requested,
                                                        const CallContext& call, Timing* timing) {
  const FunctionInfo& fn = model.function();
  DYNVM_RETURN_IF_ERROR(CheckSignature(fn, inputs, model.config().limits));
  std::vector<int> out_index;
  if (requested.empty()) {
    for (size_t i = 0; i < fn.outputs.size(); ++i) out_index.push_back(static_cast<int>(i));
  }
  for (const std::string& name : requested) {
    int index = -1;
    for (size_t i = 0; i < fn.outputs.size(); ++i) {
      if (fn.outputs[i].name == name) index = static_cast<int>(i);
    }
    if (index < 0) {
      std::vector<std::string> names;
      for (const ParamInfo& p : fn.outputs) names.push_back(p.name);
      return absl::InvalidArgumentError(
          absl::StrCat("unknown output '", name.substr(0, 64),
                       "'; the model's outputs are: ", absl::StrJoin(names, ", ")));
    }
    out_index.push_back(index);
  }
  if (model.batcher() != nullptr) return InferBatched(model, inputs, out_index, call, timing);
  const absl::Time start = absl::Now();
  DYNVM_ASSIGN_OR_RETURN(Lease lease, model.Acquire(call.deadline, call.cancelled));
  const absl::Time acquired = absl::Now();
  timing->queue = absl::ToDoubleSeconds(acquired - start);
  VirtualMachine& vm = lease.vm();
  for (const NamedTensor& in : inputs) {
    DYNVM_RETURN_IF_ERROR(in.tensor.dtype() == DType::kString
                              ? vm.SetInput(in.name, in.tensor, model.handle())
                              : vm.SetInputZeroCopy(in.name, in.tensor, model.handle()));
  }
  if (!inputs.empty() && inputs[0].tensor.rank() > 0)
    Phases(model.name()).batch->Observe(static_cast<double>(inputs[0].tensor.dim(0)));
  absl::Status run = RunOnVm(vm, model, call, nullptr);
  timing->compute = absl::ToDoubleSeconds(absl::Now() - acquired);
  DYNVM_RETURN_IF_ERROR(run);
  std::vector<NamedTensor> outputs;
  for (int i : out_index) {
    DYNVM_ASSIGN_OR_RETURN(Tensor t, vm.GetOutput(i, model.handle()));
    DYNVM_ASSIGN_OR_RETURN(t, vm.ToHost(t));
    if (!t.is_contiguous())
      return absl::InternalError(
          absl::StrCat("output '", fn.outputs[i].name, "' is not contiguous"));
    outputs.push_back({fn.outputs[i].name, std::move(t)});
  }
  return outputs;
}

absl::StatusOr<std::vector<NamedTensor>> Service::InferBatched(
    ModelVersion& model, const std::vector<NamedTensor>& inputs, const std::vector<int>& out_index,
    const CallContext& call, Timing* timing) {
  const FunctionInfo& fn = model.function();
  std::vector<Tensor> ordered(fn.inputs.size());
  for (const NamedTensor& in : inputs) {
    for (size_t k = 0; k < fn.inputs.size(); ++k) {
      if (fn.inputs[k].name == in.name) ordered[k] = in.tensor;
    }
  }
  DYNVM_ASSIGN_OR_RETURN(Batcher::Result r,
                         model.batcher()->Submit(std::move(ordered), call.deadline));
  timing->queue = r.queue_s;
  timing->compute = r.compute_s;
  if (r.first_in_batch) Phases(model.name()).batch->Observe(static_cast<double>(r.batch_rows));
  std::vector<NamedTensor> outputs;
  for (int i : out_index)
    outputs.push_back({fn.outputs[i].name, r.outputs[static_cast<size_t>(i)]});
  return outputs;
}

absl::StatusOr<std::vector<NamedTensor>> Service::GenerateInputs(const ModelVersion& model,
                                                                 const GenerateRequest& request) {
  const FunctionInfo& fn = model.function();
  const ModelConfig& config = model.config();
  std::vector<NamedTensor> inputs;
  std::vector<int64_t> ids;
  if (!model.vocab().empty()) {
    DYNVM_ASSIGN_OR_RETURN(ids, cli::EncodeText(request.text_input, model.vocab(), "text_input"));
  } else {
    for (absl::string_view piece : absl::StrSplit(request.text_input, ' ', absl::SkipEmpty())) {
      int64_t id;
      if (!absl::SimpleAtoi(piece, &id))
        return absl::InvalidArgumentError(
            "this model has no vocabulary: text_input must be token ids separated by spaces");
      ids.push_back(id);
    }
    if (ids.empty()) return absl::InvalidArgumentError("text_input is empty");
  }
  DYNVM_ASSIGN_OR_RETURN(
      Tensor prompt,
      Tensor::FromVector<int64_t>(DType::kI64, {1, static_cast<int64_t>(ids.size())}, ids));
  inputs.push_back({config.prompt_input, std::move(prompt)});
  for (const ParamInfo& p : fn.inputs) {
    if (p.name == config.prompt_input) continue;
    auto given = request.parameters.find(p.name);
    double v;
    if (given != request.parameters.end()) {
      v = given->second;
    } else if (auto d = config.generate_defaults.find(p.name);
               d != config.generate_defaults.end()) {
      v = d->second;
    } else if (auto off = SamplingFilterOff(p.name); off.has_value()) {
      v = *off;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("parameters.", p.name, " is required (the model has no default for it)"));
    }
    if (p.name == "max_new_tokens" && (v < 0 || v > config.max_new_tokens_limit))
      return absl::InvalidArgumentError(
          absl::StrCat("max_new_tokens must be in [0, ", config.max_new_tokens_limit, "]"));
    DYNVM_ASSIGN_OR_RETURN(Tensor t, ScalarFor(p, v));
    inputs.push_back({p.name, std::move(t)});
  }
  for (const auto& [name, value] : request.parameters) {
    bool known = name == "timeout_ms";
    for (const ParamInfo& p : fn.inputs) known = known || p.name == name;
    if (!known)
      return absl::InvalidArgumentError(
          absl::StrCat("unknown parameter '", name.substr(0, 64), "' (not an input of the model)"));
  }
  DYNVM_RETURN_IF_ERROR(CheckSignature(fn, inputs, config.limits));
  return inputs;
}

absl::Status Service::Generate(ModelVersion& model, Lease& lease,
                               const std::vector<NamedTensor>& inputs, const CallContext& call,
                               const TextSink& sink, Timing* timing) {
  const absl::Time acquired = absl::Now();
  VirtualMachine& vm = lease.vm();
  for (const NamedTensor& in : inputs) {
    DYNVM_RETURN_IF_ERROR(in.tensor.dtype() == DType::kString
                              ? vm.SetInput(in.name, in.tensor, model.handle())
                              : vm.SetInputZeroCopy(in.name, in.tensor, model.handle()));
  }
  const std::vector<uint32_t>& vocab = model.vocab();
  auto on_emit = [&](int stream, const Tensor& t) -> absl::Status {
    if (stream != 0 || t.numel() == 0 || (t.dtype() != DType::kI64 && t.dtype() != DType::kI32))
      return absl::OkStatus();
    const int64_t id = t.dtype() == DType::kI64 ? *t.data<int64_t>() : *t.data<int32_t>();
    std::string piece;
    if (vocab.empty()) {
      piece = absl::StrCat(id, " ");
    } else if (id < 0 || id >= static_cast<int64_t>(vocab.size())) {
      return absl::OutOfRangeError(
          absl::StrCat("streamed token ", id, " is outside the vocabulary"));
    } else {
      piece = cli::Utf8(vocab[static_cast<size_t>(id)]);
    }
    ++timing->tokens;
    return sink(piece);
  };
  absl::Status run = RunOnVm(vm, model, call, on_emit);
  timing->compute = absl::ToDoubleSeconds(absl::Now() - acquired);
  tokens_->Add({{"model", model.name()}}).Increment(static_cast<double>(timing->tokens));
  return run;
}

prometheus::Counter& Service::RequestCounter(const std::string& model, absl::string_view protocol,
                                             int code) {
  const std::string key = absl::StrCat(model, "\t", protocol, "\t", code);
  std::lock_guard<std::mutex> lock(metrics_mu_);
  prometheus::Counter*& c = request_counters_[key];
  if (c == nullptr) {
    c = &requests_->Add(
        {{"model", model}, {"protocol", std::string(protocol)}, {"code", absl::StrCat(code)}});
  }
  return *c;
}

Service::PhaseHistograms Service::Phases(const std::string& model) {
  std::lock_guard<std::mutex> lock(metrics_mu_);
  auto [it, added] = phases_.try_emplace(model);
  if (added) {
    const prometheus::Histogram::BucketBoundaries buckets = {
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
        0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
    it->second.queue = &latency_->Add({{"model", model}, {"phase", "queue"}}, buckets);
    it->second.compute = &latency_->Add({{"model", model}, {"phase", "compute"}}, buckets);
    it->second.total = &latency_->Add({{"model", model}, {"phase", "total"}}, buckets);
    it->second.batch = &batch_->Add(
        {{"model", model}}, prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64});
  }
  return it->second;  // a copy: flat_hash_map moves its values when it grows
}

void Service::Record(absl::string_view protocol, absl::string_view method, absl::string_view target,
                     absl::string_view model, int code, int64_t bytes, absl::Duration total,
                     const Timing& timing) {
  const std::string m = model.empty() ? "-" : std::string(model);
  RequestCounter(m, protocol, code).Increment();
  if (!model.empty()) {
    const PhaseHistograms h = Phases(m);
    h.queue->Observe(timing.queue);
    h.compute->Observe(timing.compute);
    h.total->Observe(absl::ToDoubleSeconds(total));
  }
  if (access_log_ == nullptr) return;
  std::string target_shown;
  for (char c : target.substr(0, 200)) target_shown += (c > ' ' && c < 127) ? c : '?';
  const std::string line = absl::StrFormat(
      "%s %s %s %s %d %d %.3fms queue=%.3fms compute=%.3fms tokens=%d\n",
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), protocol, method,
      target_shown, code, bytes, absl::ToDoubleMilliseconds(total), timing.queue * 1e3,
      timing.compute * 1e3, timing.tokens);
  std::lock_guard<std::mutex> lock(log_mu_);
  std::fputs(line.c_str(), access_log_);
  std::fflush(access_log_);
}

std::string Service::MetricsText() {
  for (const Repository::IndexEntry& e : repo_->Index()) {
    if (e.state != "READY") continue;
    absl::StatusOr<std::shared_ptr<ModelVersion>> m = repo_->Find(e.name, e.version);
    if (!m.ok()) continue;
    busy_->Add({{"model", e.name}, {"version", e.version}}).Set((*m)->busy());
    queued_->Add({{"model", e.name}, {"version", e.version}}).Set((*m)->queued());
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

int HttpCode(const absl::Status& s) {
  if (IsQueueFull(s)) return 503;
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 413;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnimplemented:
      return 501;
    default:
      return 500;
  }
}

}  // namespace dynvm::server
