#include "tools/server/grpc.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
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

// ModelInfer is a raw callback method: the call runs inline on the gRPC thread that read it (no
// handoff to a synchronous handler thread; it cost ~50 us of CPU a call), and its messages are
// parsed here, so a malformed one is INVALID_ARGUMENT with a message. The other methods stay
// synchronous.
using InferenceServiceBase =
    GRPCInferenceService::WithRawCallbackMethod_ModelInfer<GRPCInferenceService::Service>;

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

  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* raw_request,
                                       grpc::ByteBuffer* raw_response) override {
    const absl::Time start = absl::Now();
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    inference::ModelInferRequest request;
    grpc::ByteBuffer in = *raw_request;  // shares the slices
    if (!grpc::SerializationTraits<inference::ModelInferRequest>::Deserialize(&in, &request).ok()) {
      const absl::Status s = absl::InvalidArgumentError("malformed ModelInferRequest protobuf");
      service_.Record("grpc", "ModelInfer", "", "", HttpLikeCode(s), 0, absl::Now() - start, {});
      reactor->Finish(Error(context, s));
      return reactor;
    }
    inference::ModelInferResponse response;
    Timing timing;
    absl::Status s = Infer(context, request, &response, &timing);
    service_.Record("grpc", "ModelInfer", request.model_name(), Label(request.model_name()),
                    HttpLikeCode(s), static_cast<int64_t>(response.ByteSizeLong()),
                    absl::Now() - start, timing);
    if (s.ok()) {
      bool own_buffer = false;
      grpc::Status w = grpc::SerializationTraits<inference::ModelInferResponse>::Serialize(
          response, raw_response, &own_buffer);
      reactor->Finish(w);
      return reactor;
    }
    reactor->Finish(Error(context, s));
    return reactor;
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

  absl::Status Infer(grpc::ServerContextBase* context, const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response, Timing* timing) {
    absl::StatusOr<std::shared_ptr<ModelVersion>> m =
        service_.repository().Find(request.model_name(), request.model_version());
    if (!m.ok()) return m.status();
    absl::StatusOr<GrpcInputs> in = DecodeGrpcInfer(request, (*m)->config().limits);
    if (!in.ok()) return in.status();
    absl::StatusOr<std::vector<NamedTensor>> outputs = service_.Infer(
        **m, in->inputs, in->outputs,
        service_.Context(**m, in->timeout_ms, [context] { return context->IsCancelled(); }),
        timing);
    if (!outputs.ok()) return outputs.status();
    response->set_model_name((*m)->name());
    response->set_model_version((*m)->version());
    response->set_id(request.id());
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
      absl::Status s = Infer(context, request, r.mutable_infer_response(), timing);
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

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcFrontend>> GrpcFrontend::Start(Service& service,
                                                                  const std::string& host, int port,
                                                                  int64_t max_message_bytes) {
  std::unique_ptr<GrpcFrontend> f(new GrpcFrontend());
  f->service_ = std::make_unique<InferenceService>(service);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(host, ":", port), grpc::InsecureServerCredentials(),
                           &f->port_);
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<int64_t>(max_message_bytes, INT32_MAX)));
  builder.SetMaxSendMessageSize(INT32_MAX);
  builder.RegisterService(f->service_.get());
  f->server_ = builder.BuildAndStart();
  if (f->server_ == nullptr || f->port_ == 0)
    return absl::UnavailableError(absl::StrCat("cannot listen for gRPC on ", host, ":", port));
  return f;
}

void GrpcFrontend::Stop(absl::Duration drain) {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(drain));
  server_->Wait();
  server_.reset();
}

GrpcFrontend::~GrpcFrontend() { Stop(absl::Seconds(5)); }

}  // namespace dynvm::server
