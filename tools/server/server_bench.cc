// server-bench: what dynvm-server adds to a run (issue 35's "server overhead" and "first
// token"), measured side by side in one process against a running server.
//
//   server-bench --model-repository DIR --model M --http-port P --grpc-port P [--rounds N]
//                [--modes rest-json,rest-binary,grpc,rest-json-b,rest-binary-b,grpc-b]
//                [--http-port-b P] [--grpc-port-b P]
//                [--generate LM --prompt TEXT] [--throughput N [--throughput-via grpc|rest-binary]]
//
// Each round times, one after the other (interleaved, so a busy neighbour affects every mode
// alike): the in-process run (SetInput, Run, GetOutput on a VM of the same executable, compiled
// here from DIR/M/1/model.onnx), REST JSON, REST binary and gRPC raw on the server, each over
// one kept-alive connection (with --http-port-b and --grpc-port-b, the same against a second
// server too, call by call alternating with the first's: an A/B of two builds or flags). The model
// is compiled with the bounds of DIR/M/config.json; its symbolic dims are 1, f32 inputs are filled
// with 0.5, integer ones with 0, bool ones false. Printed: p50/p90/p99 per mode and each mode's p50
// minus the in-process p50.
//
// With --generate LM: the first token of LM's decode loop in process (Run until the first
// `emit`) against the first Server-Sent Event of generate_stream on a fresh connection.
//
// With --throughput N: runs per second of N in-process VMs on N threads against N gRPC clients
// (a connection each) of the server (which should have N instances), 3 alternating rounds of 3 s;
// then the CPU time per call of the in-process runs, of this client's gRPC calls and (--server-pid)
// of the server, which tells what the server itself costs when client and server share the cores.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "tools/cli.h"
#include "tools/server/codec.h"
#include "tools/server/grpc_predict_v2.grpc.pb.h"
#include "tools/server/repository.h"
#include "tools/server/service.h"
#include "vm/virtual_machine.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kProgram[] = "server-bench";

double Micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

struct Stats {
  std::vector<double> us;
  double client_cpu_s = 0;  // this process's CPU time over the timed calls
  double Pct(double p) {
    std::sort(us.begin(), us.end());
    return us.empty() ? 0 : us[std::min(us.size() - 1, static_cast<size_t>(p * us.size()))];
  }
};

absl::StatusOr<std::shared_ptr<const dynvm::Executable>> Compile(
    const std::string& path, const std::vector<std::pair<std::string, int64_t>>& bounds) {
  absl::StatusOr<std::unique_ptr<dynvm::compiler::Module>> m =
      dynvm::compiler::onnx::ImportOnnxFile(path);
  if (!m.ok()) return m.status();
  dynvm::compiler::CompileOptions options;
  options.bounds = bounds;
  absl::StatusOr<dynvm::compiler::CompileResult> r = dynvm::compiler::Compile(**m, options);
  if (!r.ok()) return r.status();
  return dynvm::Executable::LoadFromBytes(absl::string_view(r->bytes));
}

// The bounds in DIR/M/config.json (the server compiles with them); none when it has none.
absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> ConfigBounds(const std::string& dir) {
  std::ifstream f(dir + "/config.json");
  if (!f) return std::vector<std::pair<std::string, int64_t>>{};
  std::stringstream text;
  text << f.rdbuf();
  absl::StatusOr<dynvm::server::ModelConfig> c =
      dynvm::server::ParseModelConfig(text.str(), "config.json");
  if (!c.ok()) return c.status();
  return c->bounds;
}

// One request for every mode: each input of the model's signature, its symbolic dims 1, f32
// inputs filled with 0.5, integer ones with 0 and bool ones with false.
struct BenchRequest {
  std::vector<dynvm::server::NamedTensor> inputs;  // the in-process run's
  inference::ModelInferRequest grpc;               // raw_input_contents
  std::string binary_head, raw;                    // REST binary: the JSON header, the bytes
  nlohmann::json json;                             // REST JSON
};

absl::StatusOr<BenchRequest> MakeRequest(const dynvm::FunctionInfo& fn, const std::string& model) {
  BenchRequest r;
  r.grpc.set_model_name(model);
  nlohmann::json header = {{"inputs", nlohmann::json::array()},
                           {"parameters", {{"binary_data_output", true}}}};
  r.json = {{"inputs", nlohmann::json::array()}};
  for (const dynvm::ParamInfo& p : fn.inputs) {
    const bool f32 = p.dtype == dynvm::DType::kF32;
    if (!f32 && !dynvm::IsInteger(p.dtype) && p.dtype != dynvm::DType::kBool)
      return absl::InvalidArgumentError(
          absl::StrCat("input '", p.name, "': only f32, integer and bool inputs are supported"));
    std::vector<int64_t> dims;
    for (const dynvm::DimInfo& d : p.shape) dims.push_back(d.value >= 0 ? d.value : 1);
    absl::StatusOr<dynvm::Tensor> t = dynvm::Tensor::Empty(p.dtype, dims);
    if (!t.ok()) return t.status();
    const int64_t n = t->numel();
    if (f32) {
      std::fill(t->data<float>(), t->data<float>() + n, 0.5f);
    } else if (n > 0) {
      std::memset(t->data<uint8_t>(), 0, static_cast<size_t>(n * dynvm::DTypeSize(p.dtype)));
    }
    std::string bytes;
    dynvm::server::AppendRaw(*t, &bytes);
    const std::string dtype = dynvm::server::KServeDType(p.dtype);
    header["inputs"].push_back({{"name", p.name},
                                {"datatype", dtype},
                                {"shape", dims},
                                {"parameters", {{"binary_data_size", bytes.size()}}}});
    nlohmann::json data = f32 ? nlohmann::json(std::vector<float>(n, 0.5f))
                          : p.dtype == dynvm::DType::kBool
                              ? nlohmann::json(std::vector<bool>(n, false))
                              : nlohmann::json(std::vector<int64_t>(n, 0));
    r.json["inputs"].push_back(
        {{"name", p.name}, {"datatype", dtype}, {"shape", dims}, {"data", std::move(data)}});
    r.raw += bytes;
    auto* gi = r.grpc.add_inputs();
    gi->set_name(p.name);
    gi->set_datatype(dtype);
    for (int64_t d : dims) gi->add_shape(d);
    r.grpc.add_raw_input_contents(std::move(bytes));
    r.inputs.push_back({p.name, *std::move(t)});
  }
  r.binary_head = header.dump();
  return r;
}

// A connected TCP socket to 127.0.0.1:port (-1 on failure).
int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// An HTTP/1.1 keep-alive client on a raw socket: the request's bytes are built once, and each
// call is one write and the reads of one response (status line, headers, Content-Length body).
// It allocates nothing per call once its buffer has grown, so the client's own cost is little
// more than the system calls.
class RawHttpClient {
 public:
  RawHttpClient(int port, std::string request) : port_(port), request_(std::move(request)) {}
  RawHttpClient(const RawHttpClient&) = delete;
  RawHttpClient& operator=(const RawHttpClient&) = delete;
  ~RawHttpClient() {
    if (fd_ >= 0) close(fd_);
  }

  // Sends the request and reads the whole response; true when it is a 200. A kept-alive
  // connection the server has closed (it closes one after max requests) is opened again once.
  bool Call() {
    const bool reused = fd_ >= 0;
    if (fd_ < 0 && (fd_ = Connect(port_)) < 0) return false;
    if (!WriteAll(request_.data(), request_.size())) return Fail() || (reused && Call());
    size_t have = 0, head_end = std::string::npos;
    while (head_end == std::string::npos) {
      if (!ReadSome(&have)) return Fail() || (reused && have == 0 && Call());
      head_end = absl::string_view(buf_.data(), have).find("\r\n\r\n");
    }
    const absl::string_view head(buf_.data(), head_end);
    const bool ok = absl::StartsWith(head, "HTTP/1.1 200");
    size_t length = 0;
    const size_t at = FindHeader(head, "content-length:");
    if (at == std::string::npos) return Fail();
    size_t end = at;
    while (end < head.size() && head[end] != '\r') ++end;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(head.substr(at, end - at)), &length))
      return Fail();
    const size_t total = head_end + 4 + length;
    while (have < total) {
      if (!ReadSome(&have)) return Fail();
    }
    last_body_bytes_ = length;
    return ok;
  }
  size_t last_body_bytes() const { return last_body_bytes_; }

 private:
  static size_t FindHeader(absl::string_view head, absl::string_view name) {
    for (size_t i = 0; i + name.size() <= head.size(); ++i) {
      if ((i == 0 || head[i - 1] == '\n') &&
          absl::EqualsIgnoreCase(head.substr(i, name.size()), name))
        return i + name.size();
    }
    return std::string::npos;
  }
  bool WriteAll(const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = send(fd_, p, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  bool ReadSome(size_t* have) {
    if (buf_.size() - *have < 65536) buf_.resize(*have + 65536);
    const ssize_t r = read(fd_, buf_.data() + *have, buf_.size() - *have);
    if (r <= 0) return false;
    *have += static_cast<size_t>(r);
    return true;
  }
  bool Fail() {
    close(fd_);
    fd_ = -1;
    return false;
  }

  int port_;
  int fd_ = -1;
  std::string request_;
  std::vector<char> buf_ = std::vector<char>(65536);
  size_t last_body_bytes_ = 0;
};

// The bytes of a POST with `body` and extra header lines (each ending in \r\n).
std::string HttpPost(const std::string& path, const std::string& headers, const std::string& body) {
  return absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n", headers,
                      "Content-Length: ", body.size(), "\r\n\r\n", body);
}

// A gRPC ModelInfer client on the generic (byte-buffer) stub and its own completion queue: the
// request is serialized once, and each call is an async unary call whose completion this
// thread takes from the queue, so the call runs on the calling thread with no thread of the
// client library in between. The response is parsed on the first call (checked for raw
// contents) and afterwards only its size is checked.
class GrpcRawClient {
 public:
  GrpcRawClient(int port, const inference::ModelInferRequest& request) {
    grpc::ChannelArguments args;
    // One connection per client, as separate clients would have (channels to one target
    // otherwise share a subchannel, so one HTTP/2 connection).
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    // The client's own cost counts (it shares the cores with the server), so its channel has
    // no filter a bench does not need: no retries (their filter copies each call's messages)
    // and the minimal stack (no client deadline, message-size or census filters).
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
    args.SetInt(GRPC_ARG_MINIMAL_STACK, 1);
    stub_ = std::make_unique<grpc::GenericStub>(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), args));
    bool own = false;
    (void)grpc::SerializationTraits<inference::ModelInferRequest>::Serialize(request, &request_,
                                                                             &own);
  }
  ~GrpcRawClient() {
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }
  bool Call() {
    grpc::ClientContext ctx;
    grpc::ByteBuffer response;
    grpc::Status status;
    auto call =
        stub_->PrepareUnaryCall(&ctx, "/inference.GRPCInferenceService/ModelInfer", request_, &cq_);
    call->StartCall();
    call->Finish(&response, &status, this);
    void* tag = nullptr;
    bool ok = false;
    if (!cq_.Next(&tag, &ok) || !ok || tag != this || !status.ok()) return false;
    if (response_bytes_ == 0) {
      inference::ModelInferResponse parsed;
      if (!grpc::SerializationTraits<inference::ModelInferResponse>::Deserialize(&response, &parsed)
               .ok() ||
          parsed.raw_output_contents_size() == 0)
        return false;
      response_bytes_ = static_cast<size_t>(parsed.ByteSizeLong());
      return true;
    }
    return response.Length() == response_bytes_;
  }

 private:
  std::unique_ptr<grpc::GenericStub> stub_;
  grpc::CompletionQueue cq_;
  grpc::ByteBuffer request_;
  size_t response_bytes_ = 0;
};

// Time to the first "data: " of a generate_stream on a fresh connection (closed after it).
double FirstEvent(int port, const std::string& model, const std::string& body) {
  const std::string req = absl::StrCat(
      "POST /v2/models/", model,
      "/generate_stream HTTP/1.1\r\nHost: x\r\nContent-Length: ", body.size(), "\r\n\r\n", body);
  const Clock::time_point start = Clock::now();
  int fd = Connect(port);
  if (fd < 0) return -1;
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return -1;
  }
  std::string got;
  char buf[4096];
  double us = -1;
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
    if (got.find("data: ") != std::string::npos) {
      us = Micros(start, Clock::now());
      break;
    }
  }
  close(fd);
  return us;
}

struct Options {
  std::string repo, model, lm, prompt = "And it came to pass";
  std::string modes;  // --modes: comma-separated server modes to time (all when empty)
  std::string throughput_via = "grpc";  // --throughput-via: grpc or rest-binary
  int64_t http_port = 8000, grpc_port = 8001, http_port_b = 0, grpc_port_b = 0, rounds = 2000;
  int64_t threads = 0;     // --throughput: threads (0 = no throughput run)
  int64_t server_pid = 0;  // --server-pid: the server's CPU time per call is printed too
  double seconds = 3;
  // --load: closed-loop REST binary load (Load below).
  std::string load_models, load_body;
  int64_t load_clients = 0, load_header_length = -1, load_rounds = 3;
};

// The first token of `o.lm` in process (a VM of the model as the server loads it, run until the
// first emit) against generate_stream's first event, interleaved.
int FirstToken(const Options& o) {
  const std::string dir = absl::StrCat(o.repo, "/", o.lm);
  dynvm::server::ModelConfig config;
  std::ifstream f(dir + "/config.json");
  std::stringstream text;
  text << f.rdbuf();
  if (f) {
    auto c = dynvm::server::ParseModelConfig(text.str(), "config.json");
    if (!c.ok()) return dynvm::cli::ReportError(kProgram, c.status());
    config = *c;
  }
  config.instances = 1;
  auto model = dynvm::server::ModelVersion::Load(dir, o.lm, "1", config);
  if (!model.ok()) return dynvm::cli::ReportError(kProgram, model.status());
  dynvm::server::Service service(std::make_shared<dynvm::server::Repository>(o.repo), nullptr);
  dynvm::server::GenerateRequest g;
  g.text_input = o.prompt;
  g.parameters = {{"max_new_tokens", 200}, {"temperature", 0.7}, {"seed", 1}};
  auto inputs = service.GenerateInputs(**model, g);
  if (!inputs.ok()) return dynvm::cli::ReportError(kProgram, inputs.status());
  const std::string body =
      absl::StrCat(R"({"text_input": ")", o.prompt, R"(", "parameters": {"max_new_tokens": 200, )",
                   R"("temperature": 0.7, "seed": 1}})");
  Stats local, remote;
  const int64_t rounds = std::max<int64_t>(20, o.rounds / 10);
  for (int64_t r = 0; r < rounds + 5; ++r) {
    const Clock::time_point a = Clock::now();
    double first = -1;
    {
      auto lease = (*model)->Acquire(absl::InfiniteFuture(), nullptr);
      if (!lease.ok()) return dynvm::cli::ReportError(kProgram, lease.status());
      dynvm::server::Timing timing;
      (void)service.Generate(
          **model, *lease, *inputs, {},
          [&](const std::string&) {
            first = Micros(a, Clock::now());
            return absl::CancelledError("first token");
          },
          &timing);
    }
    const double served = FirstEvent(static_cast<int>(o.http_port), o.lm, body);
    if (first < 0 || served < 0) return dynvm::cli::ReportError(kProgram, "no first token");
    if (r >= 5) {
      local.us.push_back(first);
      remote.us.push_back(served);
    }
  }
  std::printf("%s first token: %lld rounds, interleaved (microseconds)\n", o.lm.c_str(),
              static_cast<long long>(rounds));
  std::printf("%-24s %9s %9s %9s %14s\n", "mode", "p50", "p90", "p99", "p50 overhead");
  const double base = local.Pct(0.5);
  std::printf("%-24s %9.1f %9.1f %9.1f %14.1f\n", "in-process first emit", base, local.Pct(0.9),
              local.Pct(0.99), 0.0);
  std::printf("%-24s %9.1f %9.1f %9.1f %14.1f\n", "generate_stream 1st event", remote.Pct(0.5),
              remote.Pct(0.9), remote.Pct(0.99), remote.Pct(0.5) - base);
  return 0;
}

// CPU seconds (user + system) this process has used.
double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// CPU seconds (user + system, every thread) process `pid` has used; -1 when unreadable.
double ProcessCpuSeconds(int64_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (pid <= 0 || !std::getline(f, line)) return -1;
  const size_t paren = line.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return -1;
  std::vector<std::string> fields = absl::StrSplit(line.substr(paren + 2), ' ');
  double utime, stime;  // fields 14 and 15 of stat, 12 and 13 after the name
  if (fields.size() < 13 || !absl::SimpleAtod(fields[11], &utime) ||
      !absl::SimpleAtod(fields[12], &stime))
    return -1;
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Runs `body(thread)` on `threads` threads until `seconds` pass; returns the calls per second.
// `calls_out`, when given, receives the number of calls.
double CallsPerSecond(int threads, double seconds, const std::function<bool(int)>& body,
                      int64_t* calls_out = nullptr) {
  std::atomic<int64_t> calls{0};
  std::atomic<bool> failed{false};
  const Clock::time_point stop = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(seconds));
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      while (Clock::now() < stop && !failed) {
        if (!body(t)) failed = true;
        ++calls;
      }
    });
  }
  for (std::thread& t : pool) t.join();
  if (failed) return -1;
  if (calls_out != nullptr) *calls_out = calls;
  return static_cast<double>(calls) / std::chrono::duration<double>(Clock::now() - start).count();
}

// --throughput: `threads` in-process VMs on threads against as many gRPC clients of the server
// (raw contents), alternating rounds; the server should have as many instances.
int Throughput(const Options& o) {
  const std::string dir = absl::StrCat(o.repo, "/", o.model);
  auto bounds = ConfigBounds(dir);
  if (!bounds.ok()) return dynvm::cli::ReportError(kProgram, bounds.status());
  auto exe = Compile(dir + "/1/model.onnx", *bounds);
  if (!exe.ok()) return dynvm::cli::ReportError(kProgram, exe.status());
  const dynvm::FunctionInfo& fn = (*exe)->function(*(*exe)->FindFunction(""));
  const int n = static_cast<int>(o.threads);
  std::vector<std::unique_ptr<dynvm::VirtualMachine>> vms;
  for (int t = 0; t < n; ++t) {
    auto vm = dynvm::VirtualMachine::Create(*exe);
    if (!vm.ok()) return dynvm::cli::ReportError(kProgram, vm.status());
    vms.push_back(*std::move(vm));
  }
  absl::StatusOr<BenchRequest> req = MakeRequest(fn, o.model);
  if (!req.ok()) return dynvm::cli::ReportError(kProgram, req.status());
  const std::vector<dynvm::server::NamedTensor>& inputs = req->inputs;
  const inference::ModelInferRequest& greq = req->grpc;
  const bool rest = o.throughput_via == "rest-binary";
  if (!rest && o.throughput_via != "grpc")
    return dynvm::cli::ReportError(kProgram, "--throughput-via is grpc or rest-binary");
  const std::string request =
      HttpPost(absl::StrCat("/v2/models/", o.model, "/infer"),
               absl::StrCat("Content-Type: application/octet-stream\r\n",
                            "Inference-Header-Content-Length: ", req->binary_head.size(), "\r\n"),
               req->binary_head + req->raw);
  std::vector<std::unique_ptr<GrpcRawClient>> clients;
  std::vector<std::unique_ptr<RawHttpClient>> http_clients;
  for (int t = 0; t < n; ++t) {
    if (rest) {
      http_clients.push_back(
          std::make_unique<RawHttpClient>(static_cast<int>(o.http_port), request));
    } else {
      clients.push_back(std::make_unique<GrpcRawClient>(static_cast<int>(o.grpc_port), greq));
    }
  }
  auto local = [&](int t) {
    for (const auto& in : inputs) {
      if (!vms[t]->SetInput(in.name, in.tensor).ok()) return false;
    }
    return vms[t]->Run().ok() && vms[t]->GetOutputs().ok();
  };
  auto remote = [&](int t) { return rest ? http_clients[t]->Call() : clients[t]->Call(); };
  std::vector<double> a, b;
  std::printf("%s throughput: %d in-process VMs on threads vs %d %s clients (runs/s)\n",
              o.model.c_str(), n, n, rest ? "REST binary" : "gRPC raw");
  // CPU microseconds per call: in-process runs, this client's gRPC calls, the server's side.
  std::vector<double> cpu_local, cpu_client, cpu_server, client_share;
  const double cores = static_cast<double>(std::max(1u, std::thread::hardware_concurrency()));
  for (int r = 0; r < 3; ++r) {
    int64_t calls = 0;
    double c0 = SelfCpuSeconds();
    a.push_back(CallsPerSecond(n, o.seconds, local, &calls));
    cpu_local.push_back(1e6 * (SelfCpuSeconds() - c0) / std::max<int64_t>(calls, 1));
    c0 = SelfCpuSeconds();
    const double s0 = ProcessCpuSeconds(o.server_pid);
    b.push_back(CallsPerSecond(n, o.seconds, remote, &calls));
    cpu_client.push_back(1e6 * (SelfCpuSeconds() - c0) / std::max<int64_t>(calls, 1));
    client_share.push_back((SelfCpuSeconds() - c0) / (o.seconds * cores));
    cpu_server.push_back(1e6 * (ProcessCpuSeconds(o.server_pid) - s0) /
                         std::max<int64_t>(calls, 1));
    if (a.back() < 0 || b.back() < 0) return dynvm::cli::ReportError(kProgram, "a run failed");
    std::printf("round %d: in-process %.1f, server %.1f (%.0f%%)\n", r + 1, a.back(), b.back(),
                100 * b.back() / a.back());
  }
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::printf("median: in-process %.1f, server %.1f: %.0f%%\n", a[1], b[1], 100 * b[1] / a[1]);
  for (auto* v : {&cpu_local, &cpu_client, &cpu_server, &client_share})
    std::sort(v->begin(), v->end());
  std::printf("the load generator's share of the %.0f cores while the server ran: %.0f%%\n", cores,
              100 * client_share[1]);
  std::printf("CPU per call (median us): in-process run %.1f, client %.1f", cpu_local[1],
              cpu_client[1]);
  if (o.server_pid > 0 && cpu_server[1] >= 0) {
    std::printf(", server %.1f\n", cpu_server[1]);
    std::printf("server CPU efficiency (in-process run / server CPU per call): %.0f%%\n",
                100 * cpu_local[1] / cpu_server[1]);
  } else {
    std::printf("\n");
  }
  return 0;
}

// --load-clients N: N clients (threads, a kept-alive raw-socket connection each) post the same
// binary REST infer body (--load-body FILE, --load-header-length) as fast as answers come, to
// each model of --load-models in turn for --seconds, --load-rounds rounds (alternating
// models). Prints requests/s, p50 and p99 latency and errors per round, the median requests/s
// per model and their ratio to the first model's, and this load generator's share of the
// cores.
int Load(const Options& o) {
  std::ifstream f(o.load_body, std::ios::binary);
  std::stringstream text;
  text << f.rdbuf();
  if (!f) return dynvm::cli::ReportError(kProgram, absl::StrCat("cannot read ", o.load_body));
  const std::string body = text.str();
  const std::vector<std::string> models = absl::StrSplit(o.load_models, ',', absl::SkipEmpty());
  if (models.empty() || o.load_header_length < 0)
    return dynvm::cli::ReportError(kProgram, "--load-models and --load-header-length are needed");
  const int n = static_cast<int>(o.load_clients);
  const double cores = static_cast<double>(std::max(1u, std::thread::hardware_concurrency()));
  std::map<std::string, std::vector<double>> rates;
  std::vector<double> shares;
  std::printf("closed-loop REST binary load: %d clients, %.0f s per round\n", n, o.seconds);
  for (int64_t round = 0; round < o.load_rounds; ++round) {
    for (const std::string& model : models) {
      const std::string request = HttpPost(
          absl::StrCat("/v2/models/", model, "/infer"),
          absl::StrCat(
              "Content-Type: application/octet-stream\r\nInference-Header-Content-Length: ",
              o.load_header_length, "\r\n"),
          body);
      std::vector<std::unique_ptr<RawHttpClient>> clients;
      for (int t = 0; t < n; ++t)
        clients.push_back(std::make_unique<RawHttpClient>(static_cast<int>(o.http_port), request));
      std::vector<Stats> lat(static_cast<size_t>(n));
      std::atomic<int64_t> errors{0};
      const double c0 = SelfCpuSeconds();
      int64_t calls = 0;
      const double rate = CallsPerSecond(
          n, o.seconds,
          [&](int t) {
            const Clock::time_point a = Clock::now();
            if (!clients[t]->Call()) ++errors;
            lat[t].us.push_back(Micros(a, Clock::now()));
            return true;
          },
          &calls);
      shares.push_back((SelfCpuSeconds() - c0) / (o.seconds * cores));
      Stats all;
      for (Stats& s : lat) all.us.insert(all.us.end(), s.us.begin(), s.us.end());
      rates[model].push_back(rate);
      std::printf(
          "round %lld %-20s %9.1f req/s  p50 %8.2f ms  p99 %8.2f ms  (%lld requests, %lld "
          "errors)\n",
          static_cast<long long>(round + 1), model.c_str(), rate, all.Pct(0.5) / 1e3,
          all.Pct(0.99) / 1e3, static_cast<long long>(calls),
          static_cast<long long>(errors.load()));
      if (errors > 0) return dynvm::cli::ReportError(kProgram, absl::StrCat(model, ": errors"));
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double base = median(rates[models[0]]);
  for (const std::string& model : models) {
    std::printf("median %-20s %9.1f req/s: %.2fx %s\n", model.c_str(), median(rates[model]),
                median(rates[model]) / base, models[0].c_str());
  }
  std::printf("the load generator's share of the %.0f cores: %.0f%% (median over rounds)\n", cores,
              100 * median(shares));
  return 0;
}

int Main(int argc, char** argv) {
  Options o;
  dynvm::cli::FlagParser flags(kProgram, "--model-repository DIR --model M [--generate LM]");
  flags.AddString("--model-repository", &o.repo, "the server's repository");
  flags.AddString("--model", &o.model, "the model to time (version 1, f32 inputs)");
  flags.AddString("--generate", &o.lm, "a model with a vocabulary: time its first token too");
  flags.AddString("--prompt", &o.prompt, "the prompt for --generate");
  flags.AddInt("--http-port", &o.http_port, "the server's REST port");
  flags.AddInt("--grpc-port", &o.grpc_port, "the server's gRPC port");
  flags.AddInt("--http-port-b", &o.http_port_b,
               "a second server's REST port: modes rest-json-b and rest-binary-b time the REST "
               "calls against it too, interleaved with the first's");
  flags.AddInt("--grpc-port-b", &o.grpc_port_b,
               "a second server's gRPC port: mode grpc-b times the gRPC calls against it too, "
               "interleaved with the first's (an A/B of two server builds or flags)");
  flags.AddInt("--server-pid", &o.server_pid,
               "with --throughput: the server's process id, to print its CPU time per call");
  flags.AddInt("--rounds", &o.rounds, "rounds (each times every mode once)");
  flags.AddString(
      "--modes", &o.modes,
      "server modes to time, comma-separated (rest-json, rest-binary, grpc, rest-json-b, "
      "rest-binary-b, grpc-b; default all)");
  flags.AddInt("--throughput", &o.threads,
               "N: also N in-process VMs on threads against N gRPC clients (runs/s)");
  flags.AddString("--throughput-via", &o.throughput_via,
                  "with --throughput: the clients' protocol, grpc (default) or rest-binary");
  flags.AddInt("--load-clients", &o.load_clients,
               "N: closed-loop REST binary load from N clients on --load-models instead");
  flags.AddString("--load-models", &o.load_models, "with --load-clients: models, comma-separated");
  flags.AddString("--load-body", &o.load_body,
                  "with --load-clients: a file holding the binary infer body to post");
  flags.AddInt("--load-header-length", &o.load_header_length,
               "with --load-clients: the body's JSON header length");
  flags.AddInt("--load-rounds", &o.load_rounds, "with --load-clients: rounds (default 3)");
  int64_t seconds = 3;
  flags.AddInt("--seconds", &seconds, "seconds per throughput or load round (default 3)");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok())
    return dynvm::cli::ReportError(kProgram, s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  o.seconds = static_cast<double>(std::max<int64_t>(1, seconds));
  if (o.load_clients > 0) return Load(o);
  std::map<std::string, Stats> stats;
  if (!o.model.empty()) {
    const std::string dir = absl::StrCat(o.repo, "/", o.model);
    auto bounds = ConfigBounds(dir);
    if (!bounds.ok()) return dynvm::cli::ReportError(kProgram, bounds.status());
    auto exe = Compile(dir + "/1/model.onnx", *bounds);
    if (!exe.ok()) return dynvm::cli::ReportError(kProgram, exe.status());
    auto vm = dynvm::VirtualMachine::Create(*exe);
    if (!vm.ok()) return dynvm::cli::ReportError(kProgram, vm.status());
    const dynvm::FunctionInfo& fn = (*exe)->function(*(*exe)->FindFunction(""));
    absl::StatusOr<BenchRequest> req = MakeRequest(fn, o.model);
    if (!req.ok()) return dynvm::cli::ReportError(kProgram, req.status());
    const std::vector<dynvm::server::NamedTensor>& inputs = req->inputs;
    const inference::ModelInferRequest& greq = req->grpc;
    const std::string& head = req->binary_head;
    const std::string binary_body = head + req->raw, json_body = req->json.dump();
    const std::string path = absl::StrCat("/v2/models/", o.model, "/infer");
    const std::string json_request =
        HttpPost(path, "Content-Type: application/json\r\n", json_body);
    const std::string binary_request =
        HttpPost(path,
                 absl::StrCat("Content-Type: application/octet-stream\r\n",
                              "Inference-Header-Content-Length: ", head.size(), "\r\n"),
                 binary_body);
    RawHttpClient rest_json(static_cast<int>(o.http_port), json_request);
    RawHttpClient rest_binary(static_cast<int>(o.http_port), binary_request);
    // --http-port-b: the same REST calls to a second server.
    RawHttpClient rest_json_b(static_cast<int>(o.http_port_b), json_request);
    RawHttpClient rest_binary_b(static_cast<int>(o.http_port_b), binary_request);
    GrpcRawClient grpc_raw(static_cast<int>(o.grpc_port), greq);
    // --grpc-port-b: the same calls to a second server (an A/B of two builds or flags).
    std::unique_ptr<GrpcRawClient> grpc_raw_b;
    if (o.grpc_port_b > 0)
      grpc_raw_b = std::make_unique<GrpcRawClient>(static_cast<int>(o.grpc_port_b), greq);
    std::vector<std::pair<std::string, std::function<bool()>>> modes = {
        {"in-process Run",
         [&] {
           for (const auto& in : inputs) {
             if (!(*vm)->SetInput(in.name, in.tensor).ok()) return false;
           }
           return (*vm)->Run().ok() && (*vm)->GetOutputs().ok();
         }},
        {"REST JSON", [&] { return rest_json.Call(); }},
        {"REST JSON B", [&] { return rest_json_b.Call(); }},
        {"REST binary", [&] { return rest_binary.Call(); }},
        {"REST binary B", [&] { return rest_binary_b.Call(); }},
        {"gRPC raw", [&] { return grpc_raw.Call(); }},
        {"gRPC raw B", [&] { return grpc_raw_b->Call(); }},
    };
    std::erase_if(modes, [&](const auto& m) {
      return (o.grpc_port_b <= 0 && m.first == "gRPC raw B") ||
             (o.http_port_b <= 0 && (m.first == "REST JSON B" || m.first == "REST binary B"));
    });
    if (!o.modes.empty()) {
      const std::vector<std::string> keep = absl::StrSplit(o.modes, ',');
      const std::map<std::string, std::string> names = {{"rest-json", "REST JSON"},
                                                        {"rest-binary", "REST binary"},
                                                        {"grpc", "gRPC raw"},
                                                        {"rest-json-b", "REST JSON B"},
                                                        {"rest-binary-b", "REST binary B"},
                                                        {"grpc-b", "gRPC raw B"}};
      std::vector<std::string> wanted;
      for (const std::string& k : keep) {
        auto it = names.find(k);
        if (it == names.end())
          return dynvm::cli::ReportError(kProgram, absl::StrCat("unknown mode '", k, "'"));
        wanted.push_back(it->second);
      }
      std::erase_if(modes, [&](const auto& m) {
        return m.first != "in-process Run" &&
               std::find(wanted.begin(), wanted.end(), m.first) == wanted.end();
      });
    }
    for (int64_t r = 0; r < o.rounds + 50; ++r) {
      for (auto& [name, fn_call] : modes) {
        const double c0 = SelfCpuSeconds();
        const Clock::time_point a = Clock::now();
        if (!fn_call()) return dynvm::cli::ReportError(kProgram, absl::StrCat(name, " failed"));
        const Clock::time_point b = Clock::now();
        if (r >= 50) {  // 50 warm-up rounds
          stats[name].us.push_back(Micros(a, b));
          stats[name].client_cpu_s += SelfCpuSeconds() - c0;
        }
      }
    }
    const double base = stats["in-process Run"].Pct(0.5);
    std::printf("%s: %lld rounds, interleaved (microseconds)\n", o.model.c_str(),
                static_cast<long long>(o.rounds));
    // The client's CPU per call: for a server mode, what the load generator itself costs on
    // the cores it shares with the server (for the in-process run, the run itself).
    std::printf("%-16s %9s %9s %9s %14s %16s\n", "mode", "p50", "p90", "p99", "p50 overhead",
                "client CPU/call");
    for (auto& [name, unused] : modes) {
      Stats& s = stats[name];
      std::printf("%-16s %9.1f %9.1f %9.1f %14.1f %16.1f\n", name.c_str(), s.Pct(0.5), s.Pct(0.9),
                  s.Pct(0.99), s.Pct(0.5) - base,
                  1e6 * s.client_cpu_s / static_cast<double>(std::max<size_t>(s.us.size(), 1)));
    }
  }
  if (!o.lm.empty()) {
    if (int rc = FirstToken(o); rc != 0) return rc;
  }
  if (o.threads > 0 && !o.model.empty()) return Throughput(o);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
