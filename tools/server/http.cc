#include "tools/server/http.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace dynvm::server {
namespace {

using Json = nlohmann::json;
constexpr char kJson[] = "application/json";
// (?:/versions/V)? after the model name, as the protocol's routes have it.
constexpr char kModel[] = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";

// Binary outputs of at least this many bytes together are written from their tensors' memory
// (a write of their own after the header's); smaller ones are copied after the header into one
// write, which costs less than a second system call.
constexpr int64_t kTailFromBytes = int64_t{128} << 10;

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// One request's bookkeeping: answers it and records it (metrics and access log) once.
class Exchange {
 public:
  Exchange(Service& service, const httplib::Request& req, httplib::Response& res)
      : service_(service), req_(req), res_(res), start_(absl::Now()) {}
  ~Exchange() {
    if (!detached_) Finish();
  }
  void Finish() {
    service_.Record("http", req_.method, req_.path, model_, res_.status,
                    bytes_ >= 0 ? bytes_ : static_cast<int64_t>(res_.body.size()),
                    absl::Now() - start_, timing_);
  }
  void Fail(const absl::Status& s) {
    res_.status = HttpCode(s);
    if (res_.status == 503) res_.set_header("Retry-After", "1");
    res_.set_content(ErrorJson(s.message()), kJson);
  }
  void Ok(std::string body, const char* type = kJson) {
    res_.status = 200;
    res_.body = std::move(body);  // set_content would copy it
    res_.set_header("Content-Type", type);
  }
  // A binary response whose large outputs are written to the socket from their tensors'
  // memory after the header (no copy into a body).
  void OkWithTail(RestResponse r) {
    res_.status = 200;
    auto held = std::make_shared<RestResponse>(std::move(r));
    bytes_ = static_cast<int64_t>(held->body.size()) + held->tail_bytes;
    res_.set_content_provider(
        static_cast<size_t>(bytes_), "application/octet-stream",
        [held](size_t offset, size_t, httplib::DataSink& sink) {
          // The pieces in order: the header, then each output's bytes.
          size_t at = 0;
          auto piece = [&](const char* data, size_t n) {
            if (offset < at + n) {
              const size_t skip = offset > at ? offset - at : 0;
              if (!sink.write(data + skip, n - skip)) return false;
              offset = at + n;
            }
            at += n;
            return true;
          };
          if (!piece(held->body.data(), held->body.size())) return false;
          for (const Tensor& t : held->tail) {
            if (!piece(static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.nbytes())))
              return false;
          }
          return true;
        });
  }
  // The model named by the route (and its version), or the error answered.
  std::shared_ptr<ModelVersion> FindModel() {
    const std::string name = req_.matches.size() > 1 ? req_.matches[1].str() : "";
    const std::string version = req_.matches.size() > 2 ? req_.matches[2].str() : "";
    absl::StatusOr<std::shared_ptr<ModelVersion>> m = service_.repository().Find(name, version);
    if (!m.ok()) {
      Fail(m.status());
      return nullptr;
    }
    model_ = name;
    return *m;
  }
  Timing& timing() { return timing_; }
  // The streaming response records itself when the stream ends.
  void Detach() { detached_ = true; }
  const std::string& model() const { return model_; }
  absl::Time start() const { return start_; }

 private:
  Service& service_;
  const httplib::Request& req_;
  httplib::Response& res_;
  absl::Time start_;
  std::string model_;
  Timing timing_;
  int64_t bytes_ = -1;  // the response's size when it is not res_.body's
  bool detached_ = false;
};

Json TensorMetadata(const ParamInfo& p) {
  Json shape = Json::array();
  if (p.has_shape) {
    for (const DimInfo& d : p.shape) shape.push_back(d.value >= 0 ? d.value : -1);
  }
  return {{"name", p.name}, {"datatype", KServeDType(p.dtype)}, {"shape", shape}};
}

Json ModelMetadata(Service& service, const ModelVersion& m) {
  Json inputs = Json::array(), outputs = Json::array();
  for (const ParamInfo& p : m.function().inputs) inputs.push_back(TensorMetadata(p));
  for (const ParamInfo& p : m.function().outputs) outputs.push_back(TensorMetadata(p));
  return {{"name", m.name()},
          {"versions", service.repository().Versions(m.name())},
          {"platform", m.platform()},
          {"inputs", inputs},
          {"outputs", outputs}};
}

// `body`: the request's body, read by the route (binary inputs are viewed in it in place).
void HandleInfer(Service& service, const httplib::Request& req, httplib::Response& res,
                 const std::shared_ptr<const std::string>& body) {
  Exchange ex(service, req, res);
  std::shared_ptr<ModelVersion> m = ex.FindModel();
  if (m == nullptr) return;
  int64_t header_length = -1;
  if (req.has_header("Inference-Header-Content-Length") &&
      !absl::SimpleAtoi(req.get_header_value("Inference-Header-Content-Length"), &header_length)) {
    return ex.Fail(absl::InvalidArgumentError("Inference-Header-Content-Length is not a number"));
  }
  absl::StatusOr<InferRequest> parsed =
      ParseRestInfer(*body, header_length, m->config().limits, body);
  if (!parsed.ok()) return ex.Fail(parsed.status());
  std::vector<std::string> names;
  for (const RequestedOutput& o : parsed->outputs) names.push_back(o.name);
  absl::StatusOr<std::vector<NamedTensor>> outputs = service.Infer(
      *m, parsed->inputs, names, service.Context(*m, parsed->timeout_ms, nullptr), &ex.timing());
  if (!outputs.ok()) return ex.Fail(outputs.status());
  std::vector<bool> binary;
  for (size_t i = 0; i < outputs->size(); ++i) {
    binary.push_back(parsed->outputs.empty() ? parsed->binary_outputs : parsed->outputs[i].binary);
  }
  RestResponse r =
      EncodeRestInfer(m->name(), m->version(), parsed->id, *outputs, binary, kTailFromBytes);
  if (r.header_length >= 0) {
    res.set_header("Inference-Header-Content-Length", absl::StrCat(r.header_length));
    if (!r.tail.empty()) return ex.OkWithTail(std::move(r));
    return ex.Ok(std::move(r.body), "application/octet-stream");
  }
  ex.Ok(std::move(r.body));
}

// {"text_input": ..., "parameters": {...}} -> GenerateRequest.
absl::StatusOr<GenerateRequest> ParseGenerate(const std::string& body, const Limits& limits) {
  if (static_cast<int64_t>(body.size()) > limits.max_body_bytes)
    return absl::ResourceExhaustedError(absl::StrCat(
        "request body of ", body.size(), " bytes is over the limit of ", limits.max_body_bytes));
  DYNVM_ASSIGN_OR_RETURN(Json j, ParseJson(body, "the request"));
  GenerateRequest g;
  auto text = j.is_object() ? j.find("text_input") : j.end();
  if (!j.is_object() || text == j.end() || !text->is_string())
    return absl::InvalidArgumentError("the request needs a string \"text_input\"");
  g.text_input = text->get<std::string>();
  if (static_cast<int64_t>(g.text_input.size()) > limits.max_string_bytes)
    return absl::ResourceExhaustedError(absl::StrCat("text_input of ", g.text_input.size(),
                                                     " bytes is over the limit of ",
                                                     limits.max_string_bytes));
  auto params = j.find("parameters");
  if (params == j.end()) return g;
  if (!params->is_object()) return absl::InvalidArgumentError("\"parameters\" must be an object");
  for (auto it = params->begin(); it != params->end(); ++it) {
    double v;
    if (it->is_number()) {
      v = it->get<double>();
    } else if (it->is_boolean()) {
      v = it->get<bool>() ? 1 : 0;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("parameters.", it.key().substr(0, 64), " must be a number"));
    }
    if (it.key() == "timeout_ms") {
      g.timeout_ms = v > 0 ? static_cast<int64_t>(v) : 0;
    } else {
      g.parameters[it.key()] = v;
    }
  }
  return g;
}

Json TextEvent(const ModelVersion& m, const std::string& text) {
  return {{"model_name", m.name()}, {"model_version", m.version()}, {"text_output", text}};
}

void HandleGenerate(Service& service, const httplib::Request& req, httplib::Response& res,
                    bool stream) {
  auto ex = std::make_shared<Exchange>(service, req, res);
  std::shared_ptr<ModelVersion> m = ex->FindModel();
  if (m == nullptr) return;
  absl::StatusOr<GenerateRequest> g = ParseGenerate(req.body, m->config().limits);
  if (!g.ok()) return ex->Fail(g.status());
  absl::StatusOr<std::vector<NamedTensor>> inputs = service.GenerateInputs(*m, *g);
  if (!inputs.ok()) return ex->Fail(inputs.status());
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  CallContext call = service.Context(*m, g->timeout_ms, [cancelled] { return cancelled->load(); });
  const absl::Time queued = absl::Now();
  absl::StatusOr<Lease> lease = m->Acquire(call.deadline, nullptr);
  ex->timing().queue = absl::ToDoubleSeconds(absl::Now() - queued);
  if (!lease.ok()) return ex->Fail(lease.status());
  if (!stream) {
    std::string text;
    absl::Status s = service.Generate(
        *m, *lease, *inputs, call,
        [&text](const std::string& piece) {
          text += piece;
          return absl::OkStatus();
        },
        &ex->timing());
    if (!s.ok()) return ex->Fail(s);
    return ex->Ok(Dump(TextEvent(*m, text)));
  }
  // The stream: the run happens in the content provider, after the 200 and the headers.
  ex->Detach();
  auto held = std::make_shared<Lease>(*std::move(lease));
  auto in = std::make_shared<std::vector<NamedTensor>>(*std::move(inputs));
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  const std::string method = req.method, path = req.path;
  res.set_chunked_content_provider(
      "text/event-stream", [&service, m, held, in, call, cancelled, method, path,
                            start = ex->start()](size_t, httplib::DataSink& sink) mutable {
        Timing timing;
        int64_t bytes = 0;
        auto write = [&](const Json& event) {
          const std::string line = absl::StrCat("data: ", Dump(event), "\n\n");
          bytes += static_cast<int64_t>(line.size());
          if (!sink.write(line.data(), line.size())) cancelled->store(true);
          return !cancelled->load();
        };
        absl::Status s = service.Generate(
            *m, *held, *in, call,
            [&](const std::string& piece) {
              if (!write(TextEvent(*m, piece))) return absl::CancelledError("the client went away");
              return absl::OkStatus();
            },
            &timing);
        held.reset();
        if (!s.ok() && !cancelled->load()) write(Json{{"error", std::string(s.message())}});
        if (!cancelled->load()) sink.done();
        service.Record("http", method, path, m->name(), s.ok() ? 200 : HttpCode(s), bytes,
                       absl::Now() - start, timing);
        return !cancelled->load();
      });
}

void HandleRepository(Service& service, const httplib::Request& req, httplib::Response& res) {
  Exchange ex(service, req, res);
  const std::string name = req.matches[1].str(), action = req.matches[2].str();
  absl::Status s =
      action == "load" ? service.repository().Load(name) : service.repository().Unload(name);
  if (!s.ok()) return ex.Fail(s);
  ex.Ok("{}");
}

// Reads a request's body into a buffer of its announced length (one allocation; httplib's own
// body grows by appends); httplib refuses a body over the server's limit (413) while reading.
absl::StatusOr<std::shared_ptr<const std::string>> ReadBody(const httplib::Request& req,
                                                            httplib::Response& res,
                                                            const httplib::ContentReader& read,
                                                            int64_t max_body_bytes) {
  auto body = std::make_shared<std::string>();
  int64_t length = 0;
  if (absl::SimpleAtoi(req.get_header_value("Content-Length"), &length) && length > 0)
    body->reserve(static_cast<size_t>(std::min(length, max_body_bytes)));
  const bool read_all = read([&](const char* data, size_t n) {
    body->append(data, n);
    return true;
  });
  if (read_all) return body;
  if (res.status == 413)
    return absl::ResourceExhaustedError(
        absl::StrCat("request body is over the server's limit of ", max_body_bytes, " bytes"));
  return absl::InvalidArgumentError("cannot read the request body");
}

void Routes(Service& service, httplib::Server& svr, int64_t max_body_bytes) {
  svr.Get("/v2/health/live", [&](const httplib::Request& req, httplib::Response& res) {
    Exchange ex(service, req, res);
    ex.Ok(Dump({{"live", true}}));
  });
  svr.Get("/v2/health/ready", [&](const httplib::Request& req, httplib::Response& res) {
    Exchange ex(service, req, res);
    if (service.draining) return ex.Fail(absl::UnavailableError("the server is shutting down"));
    ex.Ok(Dump({{"ready", true}}));
  });
  svr.Get("/v2", [&](const httplib::Request& req, httplib::Response& res) {
    Exchange ex(service, req, res);
    ex.Ok(
        Dump({{"name", kServerName},
              {"version", kServerVersion},
              {"extensions", {"binary_tensor_data", "model_repository", "generate", "metrics"}}}));
  });
  svr.Get(kModel, [&](const httplib::Request& req, httplib::Response& res) {
    Exchange ex(service, req, res);
    if (std::shared_ptr<ModelVersion> m = ex.FindModel()) ex.Ok(Dump(ModelMetadata(service, *m)));
  });
  svr.Get(std::string(kModel) + "/ready", [&](const httplib::Request& req, httplib::Response& res) {
    Exchange ex(service, req, res);
    if (std::shared_ptr<ModelVersion> m = ex.FindModel())
      ex.Ok(Dump({{"name", m->name()}, {"ready", true}}));
  });
  svr.Post(std::string(kModel) + "/infer",
           [&service, max_body_bytes](const httplib::Request& req, httplib::Response& res,
                                      const httplib::ContentReader& read) {
             absl::StatusOr<std::shared_ptr<const std::string>> body =
                 ReadBody(req, res, read, max_body_bytes);
             if (!body.ok()) return Exchange(service, req, res).Fail(body.status());
             HandleInfer(service, req, res, *body);
           });
  svr.Post(std::string(kModel) + "/generate",
           [&](const httplib::Request& req, httplib::Response& res) {
             HandleGenerate(service, req, res, false);
           });
  svr.Post(std::string(kModel) + "/generate_stream",
           [&](const httplib::Request& req, httplib::Response& res) {
             HandleGenerate(service, req, res, true);
           });
  auto index = [&](const httplib::Request& req, httplib::Response& res) {
    Exchange ex(service, req, res);
    Json out = Json::array();
    for (const Repository::IndexEntry& e : service.repository().Index()) {
      Json j = {{"name", e.name}, {"state", e.state}};
      if (!e.version.empty()) j["version"] = e.version;
      if (!e.reason.empty()) j["reason"] = e.reason;
      out.push_back(j);
    }
    ex.Ok(Dump(out));
  };
  svr.Get("/v2/repository/index", index);
  svr.Post("/v2/repository/index", index);
  svr.Post(R"(/v2/repository/models/([^/]+)/(load|unload))",
           [&](const httplib::Request& req, httplib::Response& res) {
             HandleRepository(service, req, res);
           });
  svr.Get("/metrics", [&](const httplib::Request& req, httplib::Response& res) {
    res.set_content(service.MetricsText(), "text/plain; version=0.0.4");
    (void)req;
  });
  svr.set_error_handler([&](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message =
        res.status == 404 ? absl::StrCat("no route for ", req.method, " ", req.path.substr(0, 200))
        : res.status == 413 ? "request body over the server's --max-body-bytes"
                            : absl::StrCat("HTTP ", res.status);
    res.set_content(ErrorJson(message), kJson);
    if (res.status != 404 && res.status != 413) return;
    Timing none;
    service.Record("http", req.method, req.path, "", res.status, 0, absl::ZeroDuration(), none);
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpFrontend>> HttpFrontend::Start(Service& service,
                                                                  const std::string& host, int port,
                                                                  int threads,
                                                                  int64_t max_body_bytes) {
  std::unique_ptr<HttpFrontend> f(new HttpFrontend());
  f->server_ = std::make_unique<httplib::Server>();
  httplib::Server& svr = *f->server_;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr.set_payload_max_length(static_cast<size_t>(max_body_bytes));
  svr.set_keep_alive_timeout(5);
  svr.set_keep_alive_max_count(1000);  // httplib closes a connection after 5 requests by default
  svr.set_tcp_nodelay(true);           // no Nagle delay between a response's header and body writes
  Routes(service, svr, max_body_bytes);
  if (port == 0) {
    f->port_ = svr.bind_to_any_port(host);
    if (f->port_ <= 0) return absl::UnavailableError(absl::StrCat("cannot bind HTTP on ", host));
  } else {
    if (!svr.bind_to_port(host, port))
      return absl::UnavailableError(absl::StrCat("cannot bind HTTP on ", host, ":", port));
    f->port_ = port;
  }
  f->thread_ = std::thread([&svr] { svr.listen_after_bind(); });
  return f;
}

void HttpFrontend::Stop() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

HttpFrontend::~HttpFrontend() { Stop(); }

}  // namespace dynvm::server
