// The gRPC front end of dynvm-server: inference.GRPCInferenceService (grpc_predict_v2.proto):
// ServerLive/Ready, ModelReady, ServerMetadata, ModelMetadata, ModelInfer (raw and typed
// contents) and ModelStreamInfer (generated tokens, one response each).
#ifndef DYNVM_TOOLS_SERVER_GRPC_H_
#define DYNVM_TOOLS_SERVER_GRPC_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/server/service.h"
#include "tools/server/spin.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace dynvm::server {

class GrpcFrontend {
 public:
  // Listens on host:port (0 = any free port). ModelInfer is served by `infer_threads` threads,
  // each with its own completion queue, spinning by `spin` (not owned; outlives the frontend)
  // between calls; the other methods by gRPC's synchronous threads.
  static absl::StatusOr<std::unique_ptr<GrpcFrontend>> Start(Service& service,
                                                             const std::string& host, int port,
                                                             int64_t max_message_bytes,
                                                             int infer_threads, SpinPolicy& spin);
  ~GrpcFrontend();
  int port() const { return port_; }
  // Stops accepting; waits up to `drain` for the calls in progress, then cancels them.
  void Stop(absl::Duration drain);

 private:
  GrpcFrontend() = default;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  struct Workers;  // the ModelInfer workers (grpc.cc), one per thread
  std::unique_ptr<Workers> workers_;
  std::vector<std::thread> threads_;
  int port_ = 0;
};

}  // namespace dynvm::server

#endif  // DYNVM_TOOLS_SERVER_GRPC_H_
