#include "tools/server/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
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

// Connections waiting to be accepted (the kernel caps it at net.core.somaxconn).
constexpr int kListenBacklog = 1024;

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

int Millis(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

// One kept-alive HTTP connection as cpp-httplib's Stream, served by the thread that accepted it
// from the listener (ServingServer below):
// - reads are buffered (httplib reads a request's head a byte at a time) and try the socket
//   before polling it, so a request already there costs one recv;
// - the first write of each response (its status line and headers) is held and sent with the
//   next write (the body) in one sendmsg, or at the end of the request, or before a read has to
//   wait (a "100 Continue" must reach the client before its body comes);
// - PeerClosed() tells whether the client closed its side, for a run to stop when its client
//   went away.
class Connection final : public httplib::Stream {
 public:
  Connection(int fd, int read_timeout_ms, int write_timeout_ms, SpinPolicy& spin)
      : fd_(fd),
        read_timeout_ms_(read_timeout_ms),
        write_timeout_ms_(write_timeout_ms),
        spin_(spin) {}

  bool is_readable() const override { return begin_ < end_ || Poll(POLLIN, read_timeout_ms_) > 0; }
  bool is_writable() const override { return Poll(POLLOUT, write_timeout_ms_) > 0; }

  ssize_t read(char* ptr, size_t size) override {
    if (begin_ < end_) {
      const size_t n = std::min(size, end_ - begin_);
      std::memcpy(ptr, buffer_ + begin_, n);
      begin_ += n;
      return static_cast<ssize_t>(n);
    }
    // Large reads (a body) go to the caller's memory; small ones fill the buffer.
    const bool direct = size >= sizeof(buffer_);
    char* to = direct ? ptr : buffer_;
    const size_t want = direct ? size : sizeof(buffer_);
    ssize_t n = recv(fd_, to, want, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // The rest of a request (a client may send its head and body apart): spin, then block.
      if (!Flush()) return -1;
      if (!spin_.Spin([&] { return Poll(POLLIN, 0) != 0; }) && Poll(POLLIN, read_timeout_ms_) <= 0)
        return -1;
      n = recv(fd_, to, want, MSG_DONTWAIT);
    }
    if (n <= 0 || direct) return n;
    begin_ = 0;
    end_ = static_cast<size_t>(n);
    return read(ptr, size);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (hold_next_ && size <= kHoldBytes) {
      hold_next_ = false;
      held_.assign(ptr, size);
      return static_cast<ssize_t>(size);
    }
    hold_next_ = false;
    return SendAll(ptr, size) ? static_cast<ssize_t>(size) : -1;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(getsockname, ip, port);
  }
  int socket() const override { return fd_; }

  // Called before each request: its response's first write is held.
  void StartRequest() { hold_next_ = true; }
  // Sends what is held; false when the connection failed.
  bool Flush() {
    hold_next_ = false;
    return held_.empty() || SendAll(nullptr, 0);
  }
  // Whether the next request's first bytes are here (already read, or waiting in the socket);
  // true too when the socket has an error or the client closed it (the read then says so).
  bool RequestReady() const { return begin_ < end_ || Poll(POLLIN, 0) != 0; }
  // Blocks until the next request comes (true), or until `stop_fd` is readable or
  // `timeout_ms` passed (false).
  bool WaitForRequest(int stop_fd, int timeout_ms) const {
    if (begin_ < end_) return true;
    pollfd fds[2] = {{fd_, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int n;
    do {
      n = poll(fds, 2, timeout_ms);
    } while (n < 0 && errno == EINTR);
    return n > 0 && fds[1].revents == 0 && fds[0].revents != 0;
  }
  // Whether the client has closed the connection (or it failed): a cheap non-blocking check.
  bool PeerClosed() const {
    pollfd p = {fd_, POLLRDHUP, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

 private:
  static constexpr size_t kHoldBytes = 16 << 10;

  int Poll(int16_t events, int timeout_ms) const {
    pollfd p = {fd_, events, 0};
    int n;
    do {
      n = poll(&p, 1, timeout_ms);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  // Sends the held bytes, then `size` bytes at `ptr`, all of them (one sendmsg when the socket
  // takes them).
  bool SendAll(const char* ptr, size_t size) {
    size_t held_sent = 0;
    while (held_sent < held_.size() || size > 0) {
      iovec iov[2];
      int count = 0;
      if (held_sent < held_.size())
        iov[count++] = {held_.data() + held_sent, held_.size() - held_sent};
      if (size > 0) iov[count++] = {const_cast<char*>(ptr), size};
      msghdr msg = {};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(count);
      const ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if ((errno == EAGAIN || errno == EWOULDBLOCK) && Poll(POLLOUT, write_timeout_ms_) > 0)
          continue;
        held_.clear();
        return false;
      }
      size_t sent = static_cast<size_t>(n);
      const size_t from_held = std::min(sent, held_.size() - held_sent);
      held_sent += from_held;
      sent -= from_held;
      ptr += sent;
      size -= sent;
    }
    held_.clear();
    return true;
  }

  void Address(int (*get)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage addr = {};
    socklen_t len = sizeof(addr);
    ip.clear();
    port = 0;
    if (get(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return;
    char text[INET6_ADDRSTRLEN] = {};
    if (addr.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
      inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
      port = ntohs(a->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
      inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
      port = ntohs(a->sin6_port);
    }
    ip = text;
  }

  const int fd_;
  const int read_timeout_ms_, write_timeout_ms_;
  SpinPolicy& spin_;
  char buffer_[4096];
  size_t begin_ = 0, end_ = 0;  // the unread bytes of buffer_
  bool hold_next_ = false;
  std::string held_;
};

// The connection the calling thread serves (null outside a request): a handler's runs stop
// when its client goes away.
thread_local Connection* current_connection = nullptr;

// Sends the held head of the current connection's response now (a stream's, before a run that
// may take long to its first event).
void SendHeadNow() {
  if (current_connection != nullptr) current_connection->Flush();
}

// A cancellation check for a run serving the current connection: true once its client closed
// the connection. Looks at the socket at most once a millisecond (the VM calls it at every
// call and every 256 loop iterations).
std::function<bool()> ClientGone() {
  const Connection* c = current_connection;
  if (c == nullptr) return nullptr;
  return [c, last = absl::Now()]() mutable {
    const absl::Time now = absl::Now();
    if (now - last < absl::Milliseconds(1)) return false;
    last = now;
    return c->PeerClosed();
  };
}

// cpp-httplib's server with its own connection loop (httplib 0.11's waits for the next
// request on a kept-alive connection in 10 ms polls with 1 ms sleeps between them, and cannot
// spin): between requests the serving thread spins (SpinPolicy) and then blocks in one poll
// until the next request, the keep-alive timeout, or Stop.
class ServingServer final : public httplib::Server {
 public:
  explicit ServingServer(SpinPolicy& spin) : spin_(spin), stop_fd_(eventfd(0, EFD_CLOEXEC)) {}
  ~ServingServer() override {
    if (stop_fd_ >= 0) close(stop_fd_);
  }
  bool valid() const { return stop_fd_ >= 0; }
  // Listens again with a longer queue of pending connections: the packaged (compiled)
  // cpp-httplib 0.11 listens with a backlog of 5, and a burst of clients opening connections at
  // once overflows it (connections then wait for SYN retries, or are reset). After a bind.
  bool SetBacklog(int backlog) { return ::listen(svr_sock_, backlog) == 0; }
  // Wakes every connection waiting for a request (they close), then stops the listener.
  void Stop() {
    const uint64_t one = 1;
    if (::write(stop_fd_, &one, sizeof(one)) < 0) {
      // An eventfd write fails only past its counter's limit: it is readable already.
    }
    stop();
  }

 private:
  bool process_and_close_socket(int sock) override {
    Connection conn(sock, Millis(read_timeout_sec_, read_timeout_usec_),
                    Millis(write_timeout_sec_, write_timeout_usec_), spin_);
    const int keep_alive_ms = static_cast<int>(keep_alive_timeout_sec_ * 1000);
    bool ok = true;
    for (size_t left = keep_alive_max_count_; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
      if (!spin_.Spin([&] { return conn.RequestReady(); }) &&
          !conn.WaitForRequest(stop_fd_, keep_alive_ms))
        break;
      bool closed = false;
      conn.StartRequest();
      current_connection = &conn;
      ok = process_request(conn, left == 1, closed, nullptr);
      current_connection = nullptr;
      ok = conn.Flush() && ok;
      if (!ok || closed) break;
    }
    shutdown(sock, SHUT_RDWR);
    close(sock);
    return ok;
  }

  SpinPolicy& spin_;
  const int stop_fd_;
};

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
  absl::StatusOr<std::vector<NamedTensor>> outputs =
      service.Infer(*m, parsed->inputs, names,
                    service.Context(*m, parsed->timeout_ms, ClientGone()), &ex.timing());
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
  // Cancelled when a stream's next event cannot be written, or when the client closed the
  // connection (before the first token, or a plain generate's client).
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  CallContext call = service.Context(*m, g->timeout_ms, [cancelled, gone = ClientGone()] {
    return cancelled->load() || (gone && gone());
  });
  const absl::Time queued = absl::Now();
  absl::StatusOr<Lease> lease = m->Acquire(call.deadline, call.cancelled);
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
        SendHeadNow();
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
                                                                  int64_t max_body_bytes,
                                                                  SpinPolicy& spin) {
  std::unique_ptr<HttpFrontend> f(new HttpFrontend());
  auto server = std::make_unique<ServingServer>(spin);
  if (!server->valid()) return absl::InternalError("cannot create an eventfd for the HTTP server");
  ServingServer& svr = *server;
  f->server_ = std::move(server);
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
  if (!svr.SetBacklog(kListenBacklog))
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", host));
  f->thread_ = std::thread([&svr] { svr.listen_after_bind(); });
  return f;
}

void HttpFrontend::Stop() {
  if (server_ != nullptr) static_cast<ServingServer*>(server_.get())->Stop();
  if (thread_.joinable()) thread_.join();
}

HttpFrontend::~HttpFrontend() { Stop(); }

}  // namespace dynvm::server
