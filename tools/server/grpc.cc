#include "tools/server/grpc.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpc/support/time.h"
#include "grpcpp/grpcpp.h"
#include "kernels/strings.h"
#include "tools/server/grpc_codec.h"
#include "tools/server/grpc_predict_v2.grpc.pb.h"

namespace dynvm::server {
namespace {

using inference::GRPCInferenceService;
using ServerCore = ::dynvm::server::Service;  // inside the class, Service is gRPC's

grpc::StatusCode GrpcCode(const absl::Status& s) {
  if (IsQueueFull(s)) return grpc::StatusCode::RESOURCE_EXHAUSTED;
  return static_cast<grpc::StatusCode>(static_cast<int>(s.code()));  // the same numbering
}

int HttpLikeCode(const absl::Status& s) { return s.ok() ? 200 : HttpCode(s); }

// ModelInfer is an asynchronous raw method served from completion queues (GrpcFrontend): the
// thread that takes a call from its queue decodes it, runs it and starts the response, so a
// request is not handed between threads. Its messages are parsed here, so a malformed one is
// INVALID_ARGUMENT with a message. The other methods are synchronous.
using InferenceServiceBase =
    GRPCInferenceService::WithRawMethod_ModelInfer<GRPCInferenceService::Service>;

class InferenceService final : public InferenceServiceBase {
 public:
  explicit InferenceService(ServerCore& service) : service_(service) {}

  grpc::Status ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*,
                          inference::ServerLiveResponse* response) override {
    response->set_live(true);
    return grpc::Status::OK;
  }
  grpc::Status ServerReady(grpc::ServerContext*, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse* response) override {
    response->set_ready(!service_.draining);
    return grpc::Status::OK;
  }
  grpc::Status ModelReady(grpc::ServerContext*, const inference::ModelReadyRequest* request,
                          inference::ModelReadyResponse* response) override {
    absl::StatusOr<std::shared_ptr<ModelVersion>> m =
        service_.repository().Find(request->name(), request->version());
    if (!m.ok() && !absl::IsNotFound(m.status())) return Error(nullptr, m.status());
    response->set_ready(m.ok());
    return grpc::Status::OK;
  }
  grpc::Status ServerMetadata(grpc::ServerContext*, const inference::ServerMetadataRequest*,
                              inference::ServerMetadataResponse* response) override {
    response->set_name(kServerName);
    response->set_version(kServerVersion);
    for (const char* e : {"binary_tensor_data", "model_repository", "generate", "metrics"})
      response->add_extensions(e);
    return grpc::Status::OK;
  }
  grpc::Status ModelMetadata(grpc::ServerContext*, const inference::ModelMetadataRequest* request,
                             inference::ModelMetadataResponse* response) override {
    absl::StatusOr<std::shared_ptr<ModelVersion>> m =
        service_.repository().Find(request->name(), request->version());
    if (!m.ok()) return Error(nullptr, m.status());
    response->set_name((*m)->name());
    for (const std::string& v : service_.repository().Versions((*m)->name()))
      response->add_versions(v);
    response->set_platform((*m)->platform());
    auto fill = [](const ParamInfo& p, inference::ModelMetadataResponse::TensorMetadata* t) {
      t->set_name(p.name);
      t->set_datatype(KServeDType(p.dtype));
      if (p.has_shape) {
        for (const DimInfo& d : p.shape) t->add_shape(d.value >= 0 ? d.value : -1);
      }
    };
    for (const ParamInfo& p : (*m)->function().inputs) fill(p, response->add_inputs());
    for (const ParamInfo& p : (*m)->function().outputs) fill(p, response->add_outputs());
    return grpc::Status::OK;
  }

  // One ModelInfer call: decodes `raw_request`, runs it and fills `raw_response`; the status to
  // finish the call with. `cancelled` says whether the client went away.
  grpc::Status HandleInfer(grpc::ServerContextBase* context, grpc::ByteBuffer* raw_request,
                           const std::function<bool()>& cancelled, grpc::ByteBuffer* raw_response) {
    const absl::Time start = absl::Now();
    // Shared, so that inputs viewed in place (raw_input_contents) keep it alive.
    auto request = std::make_shared<inference::ModelInferRequest>();
    if (!grpc::SerializationTraits<inference::ModelInferRequest>::Deserialize(raw_request,
                                                                              request.get())
             .ok()) {
      const absl::Status s = absl::InvalidArgumentError("malformed ModelInferRequest protobuf");
      service_.Record("grpc", "ModelInfer", "", "", HttpLikeCode(s), 0, absl::Now() - start, {});
      return Error(context, s);
    }
    inference::ModelInferResponse response;
    std::vector<NamedTensor> raw_outputs;
    Timing timing;
    absl::Status s = Infer(*request, request, cancelled, &response, &raw_outputs, &timing);
    if (s.ok()) *raw_response = SerializeWithRawOutputs(response, raw_outputs);
    service_.Record("grpc", "ModelInfer", request->model_name(), Label(request->model_name()),
                    HttpLikeCode(s), s.ok() ? static_cast<int64_t>(raw_response->Length()) : 0,
                    absl::Now() - start, timing);
    return s.ok() ? grpc::Status::OK : Error(context, s);
  }

  grpc::Status ModelStreamInfer(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<inference::ModelStreamInferResponse, inference::ModelInferRequest>*
          stream) override {
    inference::ModelInferRequest request;
    while (stream->Read(&request)) {
      const absl::Time start = absl::Now();
      Timing timing;
      absl::Status s = StreamOne(context, request, stream, &timing);
      service_.Record("grpc", "ModelStreamInfer", request.model_name(), Label(request.model_name()),
                      HttpLikeCode(s), 0, absl::Now() - start, timing);
      if (!s.ok()) {
        if (context->IsCancelled()) return grpc::Status::CANCELLED;
        inference::ModelStreamInferResponse error;
        error.set_error_message(std::string(s.message()));
        if (!stream->Write(error)) return grpc::Status::CANCELLED;
      }
    }
    return grpc::Status::OK;
  }

 private:
  // The metrics label of a request's model: its name when it is loaded, "" otherwise (a
  // client must not create metric series at will).
  std::string Label(const std::string& model) const {
    return service_.repository().Find(model, "").ok() ? model : "";
  }

  static grpc::Status Error(grpc::ServerContextBase* context, const absl::Status& s) {
    if (context != nullptr && IsQueueFull(s)) context->AddTrailingMetadata("retry-after", "1");
    return grpc::Status(GrpcCode(s), std::string(s.message()));
  }

  // Runs `request`. Raw outputs are left in `raw_outputs` for SerializeWithRawOutputs (sent
  // from the tensors' memory); typed ones are in `response`. Without `raw_outputs`, raw
  // outputs are copied into `response` too.
  // `owner`, when given, keeps `request` alive for inputs viewed in place.
  absl::Status Infer(const inference::ModelInferRequest& request, std::shared_ptr<const void> owner,
                     const std::function<bool()>& cancelled,
                     inference::ModelInferResponse* response, std::vector<NamedTensor>* raw_outputs,
                     Timing* timing) {
    absl::StatusOr<std::shared_ptr<ModelVersion>> m =
        service_.repository().Find(request.model_name(), request.model_version());
    if (!m.ok()) return m.status();
    absl::StatusOr<GrpcInputs> in =
        DecodeGrpcInfer(request, (*m)->config().limits, std::move(owner));
    if (!in.ok()) return in.status();
    absl::StatusOr<std::vector<NamedTensor>> outputs = service_.Infer(
        **m, in->inputs, in->outputs, service_.Context(**m, in->timeout_ms, cancelled), timing);
    if (!outputs.ok()) return outputs.status();
    response->set_model_name((*m)->name());
    response->set_model_version((*m)->version());
    response->set_id(request.id());
    if (in->raw && raw_outputs != nullptr) {
      EncodeGrpcOutputs(*outputs, /*raw=*/true, response, /*with_raw_contents=*/false);
      *raw_outputs = *std::move(outputs);
      return absl::OkStatus();
    }
    EncodeGrpcOutputs(*outputs, in->raw, response);
    return absl::OkStatus();
  }

  // A generate request (an input "text_input" of BYTES) streams one response per token;
  // anything else is one inference.
  absl::Status StreamOne(grpc::ServerContext* context, const inference::ModelInferRequest& request,
                         grpc::ServerReaderWriter<inference::ModelStreamInferResponse,
                                                  inference::ModelInferRequest>* stream,
                         Timing* timing) {
    absl::StatusOr<std::shared_ptr<ModelVersion>> m =
        service_.repository().Find(request.model_name(), request.model_version());
    if (!m.ok()) return m.status();
    const bool generate = request.inputs_size() == 1 && request.inputs(0).name() == "text_input";
    if (!generate) {
      inference::ModelStreamInferResponse r;
      absl::Status s = Infer(
          request, nullptr, [context] { return context->IsCancelled(); },
          r.mutable_infer_response(), nullptr, timing);
      if (s.ok() && !stream->Write(r)) return absl::CancelledError("the client went away");
      return s;
    }
    absl::StatusOr<GrpcInputs> in = DecodeGrpcInfer(request, (*m)->config().limits);
    if (!in.ok()) return in.status();
    const Tensor& text = in->inputs[0].tensor;
    if (text.dtype() != DType::kString || text.numel() != 1)
      return absl::InvalidArgumentError("text_input must be one BYTES element");
    GenerateRequest g;
    g.text_input = std::string(StringAt(text, 0));
    g.timeout_ms = in->timeout_ms;
    for (const auto& [key, p] : request.parameters()) {
      if (key == "timeout_ms") continue;
      switch (p.parameter_choice_case()) {
        case inference::InferParameter::kInt64Param:
          g.parameters[key] = static_cast<double>(p.int64_param());
          break;
        case inference::InferParameter::kDoubleParam:
          g.parameters[key] = p.double_param();
          break;
        case inference::InferParameter::kBoolParam:
          g.parameters[key] = p.bool_param() ? 1 : 0;
          break;
        case inference::InferParameter::kUint64Param:
          g.parameters[key] = static_cast<double>(p.uint64_param());
          break;
        default:
          return absl::InvalidArgumentError(
              absl::StrCat("parameter '", key.substr(0, 64), "' must be a number"));
      }
    }
    ModelVersion& model = **m;
    absl::StatusOr<std::vector<NamedTensor>> inputs = service_.GenerateInputs(model, g);
    if (!inputs.ok()) return inputs.status();
    CallContext call =
        service_.Context(model, g.timeout_ms, [context] { return context->IsCancelled(); });
    const absl::Time queued = absl::Now();
    absl::StatusOr<Lease> lease = model.Acquire(call.deadline, call.cancelled);
    timing->queue = absl::ToDoubleSeconds(absl::Now() - queued);
    if (!lease.ok()) return lease.status();
    return service_.Generate(
        model, *lease, *inputs, call,
        [&](const std::string& piece) -> absl::Status {
          inference::ModelStreamInferResponse r;
          auto* out = r.mutable_infer_response();
          out->set_model_name(model.name());
          out->set_model_version(model.version());
          out->set_id(request.id());
          auto* t = out->add_outputs();
          t->set_name("text_output");
          t->set_datatype("BYTES");
          t->add_shape(1);
          t->mutable_contents()->add_bytes_contents(piece);
          if (!stream->Write(r)) return absl::CancelledError("the client went away");
          return absl::OkStatus();
        },
        timing);
  }

  ServerCore& service_;
};

// One ModelInfer call taken from a completion queue, and the events it gets there: its
// arrival, the end of its response (Finish) and its end as gRPC sees it (AsyncNotifyWhenDone:
// delivered once the call has started, telling whether it was cancelled). All three come to
// the queue of the thread that took the call; the later of the two end events deletes it.
struct AsyncCall {
  enum Kind { kArrived, kFinished, kDone };
  struct Tag {
    AsyncCall* call;
    Kind kind;
  };
  grpc::ServerContext ctx;
  grpc::ByteBuffer request;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder{&ctx};
  Tag arrived{this, kArrived}, finished{this, kFinished}, done{this, kDone};
  bool finish_seen = false, done_seen = false, cancelled = false;
};

// A serving thread's own completion queue, with one ModelInfer call requested at a time: the
// thread that takes a call decodes it, runs it and starts its response (no handoff to another
// thread), and only then requests the next, so a call never waits behind a busy thread while
// another is idle. While a run lasts over a millisecond, its cancellation check takes the
// queue's pending events without blocking: that is how a client that went away is seen (its
// call's done event), with no other thread involved.
//
// Between events the thread spins (SpinPolicy: non-blocking looks at the queue, which poll the
// connections for the next call) before it blocks in Next.
class InferWorker {
 public:
  InferWorker(InferenceService& service, std::unique_ptr<grpc::ServerCompletionQueue> cq,
              SpinPolicy& spin)
      : service_(service), cq_(std::move(cq)), spin_(spin) {}

  // Shuts the queue down; no call is requested on it after this (a request on a shut-down
  // queue is a gRPC assertion: a SIGTERM right after start could come before this worker's
  // thread made its first request).
  void ShutdownQueue() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    cq_->Shutdown();
  }

  // Serves calls until the queue is shut down and drained.
  void Run() {
    Request();
    void* tag = nullptr;
    bool ok = false;
    for (;;) {
      grpc::CompletionQueue::NextStatus status = grpc::CompletionQueue::TIMEOUT;
      spin_.Spin([&] {
        status = cq_->AsyncNext(&tag, &ok, Immediately());
        return status != grpc::CompletionQueue::TIMEOUT;
      });
      if (status == grpc::CompletionQueue::TIMEOUT)
        status = cq_->Next(&tag, &ok) ? grpc::CompletionQueue::GOT_EVENT
                                      : grpc::CompletionQueue::SHUTDOWN;
      if (status == grpc::CompletionQueue::SHUTDOWN) return;
      Event(static_cast<AsyncCall::Tag*>(tag), ok);
    }
  }

 private:
  // A deadline already past: AsyncNext polls once without blocking. (A deadline of "now"
  // would be rounded up to gRPC's next millisecond and could block until then.)
  static gpr_timespec Immediately() { return gpr_inf_past(GPR_CLOCK_MONOTONIC); }

  void Request() {
    std::lock_guard<std::mutex> lock(mu_);  // uncontended but at shutdown
    if (closed_) return;
    auto* call = new AsyncCall();
    call->ctx.AsyncNotifyWhenDone(&call->done);
    service_.RequestModelInfer(&call->ctx, &call->request, &call->responder, cq_.get(), cq_.get(),
                               &call->arrived);
  }

  void Event(AsyncCall::Tag* tag, bool ok) {
    AsyncCall* call = tag->call;
    switch (tag->kind) {
      case AsyncCall::kArrived:
        if (!ok) {  // the server is shutting down: the call never started, no other event comes
          delete call;
          return;
        }
        Serve(call);
        return;
      case AsyncCall::kFinished:
        call->finish_seen = true;
        break;
      case AsyncCall::kDone:
        call->done_seen = true;
        call->cancelled = call->ctx.IsCancelled();
        break;
    }
    if (call->finish_seen && call->done_seen) delete call;
  }

  void Serve(AsyncCall* call) {
    absl::Time polled = absl::Now();
    auto cancelled = [&]() -> bool {
      if (call->cancelled) return true;
      const absl::Time now = absl::Now();
      if (now - polled < absl::Milliseconds(1)) return false;
      polled = now;
      void* tag = nullptr;
      bool ok = false;
      // Only this call's done event and earlier calls' end events can be pending here: no
      // other call is requested while this one runs.
      while (cq_->AsyncNext(&tag, &ok, Immediately()) == grpc::CompletionQueue::GOT_EVENT) {
        Event(static_cast<AsyncCall::Tag*>(tag), ok);
      }
      return call->cancelled;
    };
    grpc::ByteBuffer response;
    const grpc::Status status =
        service_.HandleInfer(&call->ctx, &call->request, cancelled, &response);
    Request();
    if (status.ok()) {
      call->responder.Finish(response, status, &call->finished);
    } else {
      call->responder.FinishWithError(status, &call->finished);
    }
  }

  InferenceService& service_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  SpinPolicy& spin_;
  std::mutex mu_;        // orders Request() against ShutdownQueue()
  bool closed_ = false;  // guarded by mu_
};

}  // namespace

struct GrpcFrontend::Workers {
  std::vector<std::unique_ptr<InferWorker>> list;
};

absl::StatusOr<std::unique_ptr<GrpcFrontend>> GrpcFrontend::Start(Service& service,
                                                                  const std::string& host, int port,
                                                                  int64_t max_message_bytes,
                                                                  int infer_threads,
                                                                  SpinPolicy& spin) {
  std::unique_ptr<GrpcFrontend> f(new GrpcFrontend());
  auto inference = std::make_unique<InferenceService>(service);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(host, ":", port), grpc::InsecureServerCredentials(),
                           &f->port_);
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<int64_t>(max_message_bytes, INT32_MAX)));
  builder.SetMaxSendMessageSize(INT32_MAX);
  builder.RegisterService(inference.get());
  auto workers = std::make_unique<Workers>();
  for (int i = 0; i < std::max(1, infer_threads); ++i) {
    workers->list.push_back(
        std::make_unique<InferWorker>(*inference, builder.AddCompletionQueue(), spin));
  }
  f->server_ = builder.BuildAndStart();
  if (f->server_ == nullptr || f->port_ == 0)
    return absl::UnavailableError(absl::StrCat("cannot listen for gRPC on ", host, ":", port));
  f->service_ = std::move(inference);
  for (std::unique_ptr<InferWorker>& w : workers->list) {
    InferWorker* worker = w.get();
    f->threads_.emplace_back([worker] { worker->Run(); });
  }
  f->workers_ = std::move(workers);
  return f;
}

void GrpcFrontend::Stop(absl::Duration drain) {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(drain));
  server_->Wait();
  // No call is left; a worker that still requests one (its thread had not started, or a call
  // cancelled at the deadline ends now) finds its queue closed.
  for (std::unique_ptr<InferWorker>& w : workers_->list) w->ShutdownQueue();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  server_.reset();
}

GrpcFrontend::~GrpcFrontend() { Stop(absl::Seconds(5)); }

}  // namespace dynvm::server
