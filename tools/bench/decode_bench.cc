// vm-decode-bench: times greedy decoding with dynvm, the loop in the VM (a decode model) and/or
// a C++ host loop over a single-step model (tools/bench/decode.h), and checks that both give
// the same tokens.
//
//   vm-decode-bench [--loop LOOP.dvm] [--step STEP.dvm] --prompt 3,14,15,9
//                   --max-new-tokens N [--stop-token T] [--threads N] [--repeat N] [--json]
//
// Each mode runs once to warm up, then N timed decodes. Prints per mode the tokens generated,
// the median time of a decode and per token, and tokens/s; with --json, one JSON object per
// mode ({"mode", "tokens", "ms"}: every timed decode) for tools/bench/compare.py. Exits 1 when
// the two modes' tokens differ. Every error is one line on stderr and a nonzero exit status.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "kernels/thread_pool.h"
#include "tools/bench/decode.h"
#include "tools/cli.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::bench {
namespace {

constexpr absl::string_view kProgram = "vm-decode-bench";

struct Result {
  std::vector<int64_t> tokens;
  std::vector<double> ms;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

template <typename F>
absl::StatusOr<Result> Time(int64_t repeat, F decode) {
  Result r;
  absl::StatusOr<std::vector<int64_t>> tokens = decode();  // warm-up
  if (!tokens.ok()) return tokens.status();
  r.tokens = *std::move(tokens);
  for (int64_t i = 0; i < repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    tokens = decode();
    const auto stop = std::chrono::steady_clock::now();
    if (!tokens.ok()) return tokens.status();
    if (*tokens != r.tokens) return absl::InternalError("a repeated decode gave other tokens");
    r.ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  return r;
}

absl::StatusOr<std::unique_ptr<VirtualMachine>> Open(const std::string& path, int64_t threads) {
  DYNVM_ASSIGN_OR_RETURN(std::shared_ptr<const Executable> exe, Executable::Load(path));
  VmOptions options;
  options.num_threads = static_cast<int>(threads);
  return VirtualMachine::Create(exe, options);
}

void Print(const char* mode, const Result& r, bool json) {
  if (json) {
    std::printf("{\"mode\": \"%s\", \"tokens\": [%s], \"ms\": [%s]}\n", mode,
                absl::StrJoin(r.tokens, ", ").c_str(),
                absl::StrJoin(r.ms, ", ", [](std::string* out, double v) {
                  char buf[32];
                  std::snprintf(buf, sizeof(buf), "%.4f", v);
                  absl::StrAppend(out, buf);
                }).c_str());
    return;
  }
  const double median = Median(r.ms);
  const double n = static_cast<double>(std::max<size_t>(r.tokens.size(), 1));
  std::printf("%-5s tokens=%zu median_ms=%.4f us_per_token=%.2f tokens_per_s=%.0f\n", mode,
              r.tokens.size(), median, 1000.0 * median / n, n * 1000.0 / median);
}

int Main(int argc, char** argv) {
  std::string loop_path, step_path, prompt_text;
  int64_t max_new_tokens = -1, stop_token = -1, threads = 1, repeat = 20;
  bool json = false;
  cli::FlagParser flags(std::string(kProgram),
                        "[--loop LOOP.dvm] [--step STEP.dvm] --prompt IDS --max-new-tokens N "
                        "[--stop-token T] [--threads N] [--repeat N] [--json]");
  flags.AddString("--loop", &loop_path, "a decode model with the loop in the graph");
  flags.AddString("--step", &step_path,
                  "a single-step model (token, h, c) -> (next, h_out, c_out)");
  flags.AddString("--prompt", &prompt_text, "comma-separated prompt token ids (batch 1)");
  flags.AddInt("--max-new-tokens", &max_new_tokens, "tokens to generate at most");
  flags.AddInt("--stop-token", &stop_token, "end token (default -1: none)");
  flags.AddInt("--threads", &threads, "intra-op threads (default 1)");
  flags.AddInt("--repeat", &repeat, "timed decodes per mode after one warm-up (default 20)");
  flags.AddSwitch("--json", &json, "one JSON object per mode");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return cli::ReportError(kProgram, s);
  if (loop_path.empty() && step_path.empty())
    return cli::ReportError(kProgram, "give --loop and/or --step");
  if (max_new_tokens < 1) return cli::ReportError(kProgram, "--max-new-tokens must be at least 1");
  if (repeat < 1) return cli::ReportError(kProgram, "--repeat must be at least 1");
  if (absl::Status s = ValidateThreadCount(threads, "--threads"); !s.ok())
    return cli::ReportError(kProgram, s);
  DecodeRequest request;
  request.max_new_tokens = max_new_tokens;
  request.stop_token = stop_token;
  for (absl::string_view part : absl::StrSplit(prompt_text, ',', absl::SkipWhitespace())) {
    int64_t id;
    if (!cli::ParseInt64(part, false, &id).ok() || id < 0) {
      return cli::ReportError(kProgram, absl::StrCat("--prompt: bad token id '", part, "'"));
    }
    request.prompt.push_back(id);
  }
  if (request.prompt.empty()) return cli::ReportError(kProgram, "--prompt is empty");

  std::vector<Result> results;
  if (!loop_path.empty()) {
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = Open(loop_path, threads);
    if (!vm.ok()) return cli::ReportError(kProgram, vm.status());
    if (absl::Status s = BindLoopInputs(**vm, request); !s.ok())
      return cli::ReportError(kProgram, s);
    absl::StatusOr<Result> r = Time(repeat, [&] { return RunLoop(**vm); });
    if (!r.ok()) return cli::ReportError(kProgram, r.status());
    Print("loop", *r, json);
    results.push_back(*std::move(r));
  }
  if (!step_path.empty()) {
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = Open(step_path, threads);
    if (!vm.ok()) return cli::ReportError(kProgram, vm.status());
    absl::StatusOr<HostLoopDecoder> decoder = HostLoopDecoder::Create(vm->get());
    if (!decoder.ok()) return cli::ReportError(kProgram, decoder.status());
    absl::StatusOr<Result> r = Time(repeat, [&] { return decoder->Decode(request); });
    if (!r.ok()) return cli::ReportError(kProgram, r.status());
    Print("step", *r, json);
    results.push_back(*std::move(r));
  }
  if (results.size() == 2 && results[0].tokens != results[1].tokens) {
    std::fprintf(stderr, "%s: the loop and the host loop gave different tokens\n", kProgram.data());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace dynvm::bench

int main(int argc, char** argv) { return dynvm::bench::Main(argc, argv); }
