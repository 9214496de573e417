// dynvm-server: serves a model repository over the Open Inference Protocol (KServe v2), REST
// and gRPC (docs/serving.md).
//
//   dynvm-server --model-repository DIR [--host 127.0.0.1] [--http-port 8000]
//                [--grpc-port 8001] [--http-threads 64] [--grpc-threads CORES]
//                [--grpc-poller poll|epoll1|default] [--max-body-bytes 64m]
//                [--drain-timeout-s 30] [--access-log -|FILE|off] [--spin-us 100]
//
// Port 0 picks a free port; the ports in use are printed on one line once both listen
// ("dynvm-server: listening http=H:P grpc=H:P grpc_poller=E"). SIGTERM or SIGINT: the server stops
// accepting (ready answers 503 / false), finishes what was accepted within --drain-timeout-s, and
// exits 0.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tools/cli.h"
#include "tools/server/grpc.h"
#include "tools/server/http.h"
#include "tools/server/repository.h"
#include "tools/server/service.h"

namespace {

constexpr char kProgram[] = "dynvm-server";
// --spin-us's default (docs/serving.md, "Measurements").
constexpr int64_t kDefaultSpinUs = 100;

int Main(int argc, char** argv) {
  std::string repo_dir, host = "127.0.0.1", access_log = "-", grpc_poller = "poll";
  int64_t http_port = 8000, grpc_port = 8001, http_threads = 64, drain_s = 30;
  int64_t grpc_threads = std::max(2u, std::thread::hardware_concurrency());
  int64_t max_body = int64_t{64} << 20;
  int64_t spin_us = kDefaultSpinUs;
  dynvm::cli::FlagParser flags(kProgram,
                               "--model-repository DIR [--host H] [--http-port N] [--grpc-port N]");
  flags.AddString("--model-repository", &repo_dir,
                  "DIR: DIR/<model>/<version>/model.onnx or model.dvm, optional config.json");
  flags.AddString("--host", &host, "address to listen on (default 127.0.0.1; 0.0.0.0 for all)");
  flags.AddInt("--http-port", &http_port, "REST port (default 8000; 0 = a free port)");
  flags.AddInt("--grpc-port", &grpc_port, "gRPC port (default 8001; 0 = a free port)");
  flags.AddInt("--http-threads", &http_threads, "threads serving HTTP connections (default 64)");
  flags.AddInt("--grpc-threads", &grpc_threads,
               "threads serving gRPC ModelInfer, each with its own completion queue (default: the "
               "cores, at least 2)");
  flags.AddString("--grpc-poller", &grpc_poller,
                  "gRPC's polling engine: poll (the default: each serving thread polls its own "
                  "queue, so the thread that reads a call serves it), epoll1 (one poller for "
                  "every queue, which hands each call to its queue's thread; for thousands of "
                  "connections), default (gRPC's choice, epoll1, or GRPC_POLL_STRATEGY)");
  flags.AddInt("--max-body-bytes", &max_body, "largest request body (default 64m)", true);
  flags.AddInt("--drain-timeout-s", &drain_s, "on SIGTERM, seconds to finish accepted requests");
  flags.AddString("--access-log", &access_log, "- (stderr, default), a FILE, or off");
  flags.AddInt("--spin-us", &spin_us,
               absl::StrCat("microseconds a serving thread that just served a request looks for "
                            "the next one without blocking before it blocks (0: never; at most "
                            "half the cores spin at once; default ",
                            kDefaultSpinUs, ")"));
  // Debian's abseil is built without NDEBUG, so every absl::Mutex (gRPC's locks are ones)
  // would keep a global lock-order graph for deadlock detection on each lock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (absl::Status s = flags.Parse(argc, argv); !s.ok())
    return dynvm::cli::ReportError(kProgram, s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (repo_dir.empty()) return dynvm::cli::ReportError(kProgram, "missing --model-repository DIR");
  if (!flags.positional().empty())
    return dynvm::cli::ReportError(kProgram, "unexpected positional arguments (try --help)");
  for (int64_t port : {http_port, grpc_port}) {
    if (port < 0 || port > 65535)
      return dynvm::cli::ReportError(kProgram, absl::StrCat("port ", port, " is out of range"));
  }
  if (http_threads < 1 || http_threads > 4096 || grpc_threads < 1 || grpc_threads > 4096 ||
      drain_s < 0 || max_body < 1 || spin_us < 0 || spin_us > 1000000)
    return dynvm::cli::ReportError(kProgram,
                                   "--http-threads, --grpc-threads, --drain-timeout-s, "
                                   "--max-body-bytes or --spin-us out of range");
  if (grpc_poller != "default" && grpc_poller != "poll" && grpc_poller != "epoll1")
    return dynvm::cli::ReportError(
        kProgram, absl::StrCat("--grpc-poller ", grpc_poller, ": not default, poll or epoll1"));
  // gRPC reads its polling engine from the environment when it first starts (in
  // GrpcFrontend::Start below; nothing before it uses gRPC). docs/serving.md ("Measurements")
  // says why poll is the default.
  if (grpc_poller != "default") setenv("GRPC_POLL_STRATEGY", grpc_poller.c_str(), 1);
  FILE* log = nullptr;
  if (access_log == "-") {
    log = stderr;
  } else if (access_log != "off") {
    log = std::fopen(access_log.c_str(), "a");
    if (log == nullptr)
      return dynvm::cli::ReportError(kProgram,
                                     absl::StrCat("cannot open --access-log ", access_log));
  }

  // SIGTERM and SIGINT are taken by sigwait below: block them in every thread started after this.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto repo = std::make_shared<dynvm::server::Repository>(repo_dir);
  if (absl::Status s = repo->LoadAll(); !s.ok()) {
    // Models that load are served; the others are listed in the repository index.
    std::fprintf(stderr, "%s: warning: %s\n", kProgram, std::string(s.message()).c_str());
  }
  dynvm::server::Service service(repo, log);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  dynvm::server::SpinPolicy spin(spin_us, cores / 2);
  absl::StatusOr<std::unique_ptr<dynvm::server::HttpFrontend>> http =
      dynvm::server::HttpFrontend::Start(service, host, static_cast<int>(http_port),
                                         static_cast<int>(http_threads), max_body, spin);
  if (!http.ok()) return dynvm::cli::ReportError(kProgram, http.status());
  absl::StatusOr<std::unique_ptr<dynvm::server::GrpcFrontend>> grpc =
      dynvm::server::GrpcFrontend::Start(service, host, static_cast<int>(grpc_port), max_body,
                                         static_cast<int>(grpc_threads), spin);
  if (!grpc.ok()) return dynvm::cli::ReportError(kProgram, grpc.status());
  // The polling engine gRPC was asked for (GRPC_POLL_STRATEGY from the caller's environment
  // under --grpc-poller default, "default" when unset): tests and operators read it here.
  const char* engine = std::getenv("GRPC_POLL_STRATEGY");
  std::printf("%s: listening http=%s:%d grpc=%s:%d grpc_poller=%s\n", kProgram, host.c_str(),
              (*http)->port(), host.c_str(), (*grpc)->port(),
              engine != nullptr && *engine != '\0' ? engine : "default");
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  std::printf("%s: signal %d: draining (up to %llds)\n", kProgram, sig,
              static_cast<long long>(drain_s));
  std::fflush(stdout);
  service.draining = true;
  // Past the drain timeout, runs still in progress (long streams) are cancelled.
  const absl::Time drain_end = absl::Now() + absl::Seconds(drain_s);
  std::mutex mu;
  std::condition_variable cv;
  bool stopped = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, absl::ToChronoNanoseconds(drain_end - absl::Now()),
                     [&] { return stopped; })) {
      service.drain_expired = true;
    }
  });
  (*grpc)->Stop(drain_end - absl::Now());
  (*http)->Stop();
  {
    std::lock_guard<std::mutex> lock(mu);
    stopped = true;
  }
  cv.notify_all();
  watchdog.join();
  std::printf("%s: stopped\n", kProgram);
  std::fflush(stdout);
  if (log != nullptr && log != stderr) std::fclose(log);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
