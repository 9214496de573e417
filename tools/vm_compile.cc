// vm-compile: compiles an ONNX model into a .dvm executable.
//
//   vm-compile MODEL.onnx -o OUT.dvm [--bound NAME=N ...] [--report] [--no-optimize]
//              [--disable-rewrite NAME ...] [--strip-debug] [--onnx-check] [--device cpu|cuda]
//              [--weights-out W.dvw]
//              [--compress] [--quantize-weights int8|bf16|int4] [--quantize-min-bytes N]
//              [--quantize-block 16|32|64|128|256] [--quantize-zero-points]
//              [--quantize-accuracy-level 0|1|2|3|4] [--decode]
//
// --decode takes a step model (input_ids, attention_mask, position_ids?,
// past_key_values.{i}.key/value -> logits, present.{i}.key/value: Optimum's and ONNX Runtime
// GenAI's layout) and compiles one in-VM decode loop around it: prompt [batch, prompt_len],
// max_new_tokens, temperature, top_k, top_p, repetition_penalty, seed, stop_token -> tokens
// [batch, steps], each token emitted as it is produced (compiler/onnx/decode_wrap.h,
// docs/llm.md).
//
// --quantize-weights stores the weights of MatMul, Gemm, LSTM, GRU and RNN of at least
// --quantize-min-bytes bytes (as f32; default 16384) as per-output-channel symmetric int8 with
// f32 scales, or as bf16 (docs/kernels.md, "Weight-only quantization"); --report then lists each
// weight with its bytes before and after and its largest per-channel scale, and each weight
// left in f32 with the reason (int8 scales spanning more than 2^16, NaN or infinity). int4
// stores MatMul and Gemm weights as ONNX Runtime's MatMulNBits: 4-bit blocks of
// --quantize-block values along K (default 32) with an f32 scale each, symmetric or with a 4-bit
// zero point per block (--quantize-zero-points), and accuracy_level --quantize-accuracy-level
// (default 4: activations quantized to int8 per block, ONNX Runtime's CompInt8 and GenAI's CPU
// choice; 0: f32 activations); LSTM/GRU/RNN weights stay f32 then.
//
// --weights-out writes the constants to a separate weights file W.dvw, which OUT.dvm refers to
// by file name, content hash and size; the loader looks for it beside OUT.dvm (or where
// LoadOptions / vm-run --weights say). --compress stores the constant segment (in OUT.dvm, or
// in W.dvw) zstd-compressed; it is decompressed once per process at load. Both print the
// sizes written.
//
// --device cuda compiles for the CUDA device (docs/cuda.md): the kernels that have a CUDA
// kernel run there, with their values in device memory; a build without CUDA refuses it.
// --bound gives an upper bound to a symbolic dim (a `dim_param` of the model, e.g. batch=8)
// or to a one-element integer input that a loop reads as its trip count (max_new_tokens=64):
// values sized by bounded symbols, including dims a loop grows by a fixed step per iteration,
// are planned at their maximum in the arena, and a run that exceeds a bound fails naming the
// symbol. --report prints the memory plan, how often each pattern-rewrite rule fired
// (`rewrite NAME: N`, docs/compiler.md) and the kernel chosen for each kernel-table entry.
// --no-optimize turns every optimization off, rewrites included; --disable-rewrite NAME turns
// one rule off (an unknown name is an error listing the rules). Every error is one line on stderr
// and a nonzero exit status; an unsupported operator, attribute or type names the node.
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"
#include "schema/mapped_file.h"
#include "tools/cli.h"

namespace dynvm {
namespace {

constexpr absl::string_view kProgram = "vm-compile";

absl::StatusOr<std::pair<std::string, int64_t>> ParseBound(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--bound expects NAME=N, got '", spec, "'"));
  }
  int64_t n = 0;
  if (absl::Status s = cli::ParseInt64(spec.substr(eq + 1), /*allow_suffix=*/true, &n); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--bound ", spec, ": ", s.message()));
  }
  if (n < 0)
    return absl::InvalidArgumentError(absl::StrCat("--bound ", spec, ": a bound must be >= 0"));
  return std::make_pair(spec.substr(0, eq), n);
}

// --quantize-weights, --quantize-min-bytes, --quantize-block and --quantize-zero-points into the
// options.
absl::Status ParseQuantize(const std::string& dtype, const std::string& min_bytes,
                           const std::string& block, bool zero_points, const std::string& accuracy,
                           compiler::CompileOptions* options) {
  if (dtype == "int8") {
    options->quantize_weights = DType::kI8;
  } else if (dtype == "bf16") {
    options->quantize_weights = DType::kBF16;
  } else if (dtype == "int4") {
    options->quantize_weights = DType::kU8;
  } else if (!dtype.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--quantize-weights must be int8, bf16 or int4, got '", dtype, "'"));
  }
  if ((!block.empty() || zero_points || !accuracy.empty()) && dtype != "int4") {
    return absl::InvalidArgumentError(
        "--quantize-block, --quantize-zero-points and --quantize-accuracy-level need "
        "--quantize-weights int4");
  }
  if (!accuracy.empty() &&
      (!absl::SimpleAtoi(accuracy, &options->quantize_accuracy_level) ||
       options->quantize_accuracy_level < 0 || options->quantize_accuracy_level > 4)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--quantize-accuracy-level must be 0, 1, 2, 3 or 4, got '", accuracy, "'"));
  }
  options->quantize_zero_points = zero_points;
  if (!block.empty() && (!absl::SimpleAtoi(block, &options->quantize_block) ||
                         options->quantize_block < 16 || options->quantize_block > 256 ||
                         (options->quantize_block & (options->quantize_block - 1)) != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--quantize-block must be a power of two from 16 to 256, got '", block, "'"));
  }
  if (min_bytes.empty()) return absl::OkStatus();
  if (!absl::SimpleAtoi(min_bytes, &options->quantize_min_bytes) ||
      options->quantize_min_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--quantize-min-bytes must be a non-negative integer, got '", min_bytes, "'"));
  }
  if (dtype.empty()) {
    return absl::InvalidArgumentError("--quantize-min-bytes needs --quantize-weights");
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  std::string output;
  std::vector<std::string> bounds;
  bool report = false, no_optimize = false, strip_debug = false, onnx_check = false,
       dump_ir = false;
  cli::FlagParser flags(
      std::string(kProgram),
      "MODEL.onnx -o OUT.dvm [--bound NAME=N ...] [--report] [--no-optimize] [--strip-debug]\n"
      "                  [--onnx-check]");
  flags.AddString("--output,-o", &output, "the .dvm file to write");
  flags.AddRepeated("--bound", &bounds,
                    "NAME=N: an upper bound of the symbolic dim NAME (repeatable)");
  flags.AddSwitch("--report", &report, "print the memory plan and the kernels chosen");
  flags.AddSwitch("--no-optimize", &no_optimize,
                  "no constant folding, CSE, hoisting, dead-code removal or rewrites");
  std::vector<std::string> disabled_rewrites;
  flags.AddRepeated("--disable-rewrite", &disabled_rewrites,
                    "NAME: do not apply the pattern-rewrite rule NAME (repeatable)");
  flags.AddSwitch("--strip-debug", &strip_debug, "leave out source locations (node names)");
  flags.AddSwitch("--onnx-check", &onnx_check, "also run libonnx's model checker");
  flags.AddSwitch("--dump-ir", &dump_ir,
                  "print the IR (types and shapes) to stderr after compiling, or where it failed");
  std::string device = "cpu";
  flags.AddString("--device", &device, "cpu (default) or cuda: the device to compile for");
  std::string weights_out;
  flags.AddString("--weights-out", &weights_out,
                  "W.dvw: write the constants to this weights file (found beside OUT.dvm)");
  bool compress = false;
  flags.AddSwitch("--compress", &compress, "store the constants zstd-compressed");
  bool decode = false;
  flags.AddSwitch("--decode", &decode,
                  "wrap an Optimum/GenAI step model into one in-VM decode loop (docs/llm.md)");
  std::string quantize, quantize_min_bytes, quantize_block, quantize_accuracy;
  bool quantize_zero_points = false;
  flags.AddString("--quantize-weights", &quantize,
                  "int8|bf16|int4: store MatMul/Gemm(/LSTM/GRU/RNN) weights quantized");
  flags.AddString("--quantize-min-bytes", &quantize_min_bytes,
                  "N: quantize weights of at least N bytes (as f32; default 16384)");
  flags.AddString("--quantize-block", &quantize_block,
                  "N: int4 values per block (16, 32, 64, 128 or 256; default 32)");
  flags.AddSwitch("--quantize-zero-points", &quantize_zero_points,
                  "int4: a zero point per block (default: symmetric)");
  flags.AddString("--quantize-accuracy-level", &quantize_accuracy,
                  "N: int4 MatMulNBits accuracy_level (4, default: int8 activations; 0: f32)");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return cli::ReportError(kProgram, s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    std::fputs("\nCompiles an ONNX model (opsets 7 to 23) into a dynvm executable.\n", stdout);
    return 0;
  }
  if (flags.positional().size() != 1) {
    return cli::ReportError(kProgram,
                            absl::StrCat("expected one model, got ", flags.positional().size(),
                                         " positional arguments (try vm-compile --help)"));
  }
  if (output.empty()) return cli::ReportError(kProgram, "missing -o OUT.dvm");
  // The output must not be the model (or the weights file) it is compiled from.
  for (const std::string& target : {output, weights_out}) {
    std::error_code ec;
    if (!target.empty() && std::filesystem::equivalent(target, flags.positional()[0], ec)) {
      return cli::ReportError(kProgram,
                              absl::StrCat("'", target, "' is the model ", flags.positional()[0],
                                           " itself; write the executable elsewhere"));
    }
  }
  compiler::CompileOptions options;
  for (const std::string& b : bounds) {
    absl::StatusOr<std::pair<std::string, int64_t>> parsed = ParseBound(b);
    if (!parsed.ok()) return cli::ReportError(kProgram, parsed.status());
    options.bounds.push_back(*parsed);
  }
  options.optimize = !no_optimize;
  options.disabled_rewrites = disabled_rewrites;
  options.strip_debug = strip_debug;
  options.producer = "vm-compile";
  options.compress = compress;
  if (absl::Status s = ParseQuantize(quantize, quantize_min_bytes, quantize_block,
                                     quantize_zero_points, quantize_accuracy, &options);
      !s.ok()) {
    return cli::ReportError(kProgram, s);
  }
  if (!weights_out.empty()) {
    options.weights_file_name = std::filesystem::path(weights_out).filename().string();
    if (options.weights_file_name.empty() || options.weights_file_name == "." ||
        options.weights_file_name == "..") {
      return cli::ReportError(
          kProgram, absl::StrCat("--weights-out needs a file name, got '", weights_out, "'"));
    }
  }
  if (device == "cuda") {
    options.device = Device::kCUDA;
  } else if (device != "cpu") {
    return cli::ReportError(kProgram,
                            absl::StrCat("--device must be cpu or cuda, got '", device, "'"));
  }
  compiler::onnx::ImportOptions import;
  import.onnx_checker = onnx_check;
  import.decode = decode;
  absl::StatusOr<std::unique_ptr<compiler::Module>> module =
      compiler::onnx::ImportOnnxFile(flags.positional()[0], import);
  if (!module.ok()) return cli::ReportError(kProgram, module.status());
  absl::StatusOr<compiler::CompileResult> result = compiler::Compile(**module, options);
  if (dump_ir) std::fputs((*module)->Dump().c_str(), stderr);
  if (!result.ok()) {
    return cli::ReportError(
        kProgram, absl::Status(result.status().code(), absl::StrCat(flags.positional()[0], ": ",
                                                                    result.status().message())));
  }
  if (absl::Status s = schema::WriteStringToFile(output, result->bytes); !s.ok()) {
    return cli::ReportError(kProgram, s);
  }
  if (!weights_out.empty()) {
    if (absl::Status s = schema::WriteStringToFile(weights_out, result->weights); !s.ok()) {
      return cli::ReportError(kProgram, s);
    }
  }
  for (const std::string& w : result->warnings) {
    std::fprintf(stderr, "%s: warning: %s\n", std::string(kProgram).c_str(), w.c_str());
  }
  if (report) std::fputs(result->ReportText().c_str(), stdout);
  std::printf("wrote %s (%zu bytes)\n", output.c_str(), result->bytes.size());
  if (!weights_out.empty())
    std::printf("wrote %s (%zu bytes)\n", weights_out.c_str(), result->weights.size());
  if (!weights_out.empty() && std::filesystem::path(weights_out).parent_path() !=
                                  std::filesystem::path(output).parent_path()) {
    std::printf("note: %s is not beside %s: load with vm-run --weights %s\n", weights_out.c_str(),
                output.c_str(), weights_out.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace dynvm

int main(int argc, char** argv) { return dynvm::Main(argc, argv); }
