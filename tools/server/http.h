// The REST front end of dynvm-server (KServe v2 over HTTP/1.1, cpp-httplib): health, server
// and model metadata, infer (JSON and the binary tensor data extension), the generate
// extension (generate, generate_stream as Server-Sent Events), the repository extension and
// /metrics. Routes and codes: docs/serving.md.
#ifndef DYNVM_TOOLS_SERVER_HTTP_H_
#define DYNVM_TOOLS_SERVER_HTTP_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "tools/server/service.h"
#include "tools/server/spin.h"

namespace httplib {
class Server;
}

namespace dynvm::server {

class HttpFrontend {
 public:
  // Binds host:port (0 = any free port); `threads` serve connections, one each at a time:
  // the thread that reads a request runs it. Between requests a thread spins by `spin`
  // (not owned; outlives the frontend) before it blocks.
  static absl::StatusOr<std::unique_ptr<HttpFrontend>> Start(Service& service,
                                                             const std::string& host, int port,
                                                             int threads, int64_t max_body_bytes,
                                                             SpinPolicy& spin);
  ~HttpFrontend();
  int port() const { return port_; }
  // Stops accepting; returns when the requests being served have been answered.
  void Stop();

 private:
  HttpFrontend() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace dynvm::server

#endif  // DYNVM_TOOLS_SERVER_HTTP_H_
