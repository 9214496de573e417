// charlm-quality: what weight-only quantization (vm-compile --quantize-weights) costs the demo's
// character LSTM (tools/lm/charlm.onnx) in quality.
//
//   charlm-quality --text FILE [--model tools/lm/charlm.onnx] [--vocab tools/lm/vocab.txt]
//                  [--prompt "And God said"] [--greedy-chars 400] [--check]
//
// Bits per character: the model's LSTM layers and output layer (its own weights, taken from
// the ONNX file) score FILE teacher-forced, one character after another from a zero state;
// bpc = mean over positions t of -log2 p(text[t+1] | text[..t]). Compiled in f32, int8 and bf16
// (every MatMul/Gemm/LSTM weight of at least the default 16384 bytes). Greedy agreement: the
// model's own generation loop (temperature 0) from --prompt for --greedy-chars characters in
// int8 and bf16, compared with f32 position by position. --check exits 1 unless the int8 bpc is
// within 2% of f32's and the bf16 bpc within 0.5%. Every error is one line on stderr and a nonzero
// exit status.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"
#include "tools/cli.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

constexpr absl::string_view kProgram = "charlm-quality";
constexpr const char* kWeights[] = {"embedding", "W0", "R0",    "B0",   "W1",
                                    "R1",        "B1", "out_w", "out_b"};

// Code point -> token id (vocab.txt: one code point per line, id = line number).
absl::StatusOr<std::map<uint32_t, int64_t>> LoadVocab(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read the vocabulary ", path));
  std::map<uint32_t, int64_t> vocab;
  std::string line;
  for (int64_t id = 0; std::getline(f, line); ++id) {
    uint32_t cp;
    if (!absl::SimpleAtoi(line, &cp)) {
      return absl::InvalidArgumentError(absl::StrCat(path, " line ", id + 1, ": not a number"));
    }
    vocab[cp] = id;
  }
  return vocab;
}

// The text's characters (UTF-8) as token ids.
absl::StatusOr<std::vector<int64_t>> Encode(const std::string& text,
                                            const std::map<uint32_t, int64_t>& vocab) {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = text[i];
    const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i + len > text.size()) return absl::InvalidArgumentError("the text is not UTF-8");
    uint32_t cp = len == 1 ? c : c & (0x3F >> (len - 1));
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (text[i + k] & 0x3F);
    auto it = vocab.find(cp);
    if (it == vocab.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("character U+", absl::Hex(cp), " at byte ", i, " is not in the vocabulary"));
    }
    ids.push_back(it->second);
    i += len;
  }
  return ids;
}

absl::StatusOr<std::shared_ptr<const Executable>> CompileModule(compiler::Module& m, DType q) {
  compiler::CompileOptions o;
  o.quantize_weights = q;
  DYNVM_ASSIGN_OR_RETURN(compiler::CompileResult r, compiler::Compile(m, o));
  return Executable::LoadFromBytes(r.bytes);
}

// The scoring model: tokens [T] -> logits [T, vocab], over charlm.onnx's weights.
absl::StatusOr<std::unique_ptr<compiler::Module>> ScoringModel(const std::string& onnx) {
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<compiler::Module> src,
                         compiler::onnx::ImportOnnxFile(onnx));
  std::map<std::string, Tensor> w;
  for (int i = 0; i < src->num_values(); ++i) {
    const compiler::Value* v = src->value(i);
    if (v->constant.has_value() && !v->name.empty()) w[v->name] = *v->constant;
  }
  for (const char* name : kWeights) {
    if (!w.count(name)) return absl::NotFoundError(absl::StrCat(onnx, " has no weight ", name));
  }
  const int64_t hidden = w["R0"].dim(2);
  auto m = std::make_unique<compiler::Module>();
  compiler::GraphBuilder b(m->AddFunction("main"));
  using compiler::AttrInt;
  auto c = [&](const char* name) { return b.Constant(w[name], name, /*is_weight=*/true); };
  compiler::Value* tokens = b.Input("tokens", DType::kI64, {"T"});
  compiler::Value* x = b.Op("Gather", {c("embedding"), tokens});
  x = b.Op("Reshape", {x, b.VectorI64({-1, 1, w["embedding"].dim(1)})});
  for (int l = 0; l < 2; ++l) {
    const std::string s = absl::StrCat(l);
    std::vector<compiler::Value*> y =
        b.Ops("LSTM", {x, c(("W" + s).c_str()), c(("R" + s).c_str()), c(("B" + s).c_str())},
              {{"hidden_size", AttrInt(hidden)}}, 1);
    x = b.Op("Reshape", {y[0], b.VectorI64({-1, 1, hidden})});
  }
  x = b.Op("Reshape", {x, b.VectorI64({-1, hidden})});
  b.Output("logits", b.Op("Gemm", {x, c("out_w"), c("out_b")}, {{"transB", AttrInt(1)}}));
  return m;
}

absl::StatusOr<double> BitsPerChar(const std::string& onnx, const std::vector<int64_t>& ids,
                                   DType q) {
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<compiler::Module> m, ScoringModel(onnx));
  DYNVM_ASSIGN_OR_RETURN(std::shared_ptr<const Executable> exe, CompileModule(*m, q));
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<VirtualMachine> vm, VirtualMachine::Create(exe));
  const int64_t n = static_cast<int64_t>(ids.size());
  DYNVM_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<int64_t>(DType::kI64, {n}, ids));
  DYNVM_RETURN_IF_ERROR(vm->SetInput("tokens", t));
  DYNVM_RETURN_IF_ERROR(vm->Run());
  DYNVM_ASSIGN_OR_RETURN(Tensor logits, vm->GetOutput("logits"));
  const int64_t v = logits.dim(1);
  double bits = 0;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const float* row = logits.data<float>() + i * v;
    double mx = row[0], sum = 0;
    for (int64_t j = 1; j < v; ++j) mx = std::max<double>(mx, row[j]);
    for (int64_t j = 0; j < v; ++j) sum += std::exp(row[j] - mx);
    bits += (std::log(sum) - (row[ids[i + 1]] - mx)) / std::log(2.0);
  }
  return bits / static_cast<double>(n - 1);
}

absl::StatusOr<std::vector<int64_t>> Greedy(const std::string& onnx,
                                            const std::vector<int64_t>& prompt, int64_t chars,
                                            DType q) {
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<compiler::Module> m, compiler::onnx::ImportOnnxFile(onnx));
  DYNVM_ASSIGN_OR_RETURN(std::shared_ptr<const Executable> exe, CompileModule(*m, q));
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<VirtualMachine> vm, VirtualMachine::Create(exe));
  const int64_t n = static_cast<int64_t>(prompt.size());
  DYNVM_ASSIGN_OR_RETURN(Tensor p, Tensor::FromVector<int64_t>(DType::kI64, {1, n}, prompt));
  DYNVM_RETURN_IF_ERROR(vm->SetInput("prompt", p));
  DYNVM_RETURN_IF_ERROR(vm->SetInput("max_new_tokens", Tensor::ScalarI64(chars)));
  DYNVM_RETURN_IF_ERROR(vm->SetInput("temperature", Tensor::Scalar(0.0f)));
  DYNVM_RETURN_IF_ERROR(vm->SetInput("seed", Tensor::ScalarI64(0)));
  DYNVM_RETURN_IF_ERROR(vm->SetInput("stop_token", Tensor::ScalarI64(-1)));
  DYNVM_RETURN_IF_ERROR(vm->Run());
  DYNVM_ASSIGN_OR_RETURN(Tensor tokens, vm->GetOutput("tokens"));
  const int64_t* d = tokens.data<int64_t>();
  return std::vector<int64_t>(d, d + tokens.numel());
}

struct Flags {
  std::string text, model = "tools/lm/charlm.onnx", vocab = "tools/lm/vocab.txt";
  std::string prompt = "And God said";
  int64_t greedy_chars = 400;
  bool check = false;
};

absl::StatusOr<bool> Report(const Flags& f) {
  DYNVM_ASSIGN_OR_RETURN(auto vocab, LoadVocab(f.vocab));
  std::ifstream in(f.text, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", f.text));
  std::stringstream ss;
  ss << in.rdbuf();
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> ids, Encode(ss.str(), vocab));
  if (ids.size() < 2) return absl::InvalidArgumentError("the text needs two characters or more");
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> prompt, Encode(f.prompt, vocab));
  std::printf("text %s: %zu characters; prompt \"%s\", %lld greedy characters\n", f.text.c_str(),
              ids.size(), f.prompt.c_str(), static_cast<long long>(f.greedy_chars));
  DYNVM_ASSIGN_OR_RETURN(double base, BitsPerChar(f.model, ids, DType::kF32));
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> base_text,
                         Greedy(f.model, prompt, f.greedy_chars, DType::kF32));
  std::printf("f32   bpc %.5f\n", base);
  bool ok = true;
  for (DType q : {DType::kI8, DType::kBF16}) {
    DYNVM_ASSIGN_OR_RETURN(double bpc, BitsPerChar(f.model, ids, q));
    DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> text, Greedy(f.model, prompt, f.greedy_chars, q));
    int64_t same = 0, first = -1;
    for (size_t i = 0; i < base_text.size(); ++i) {
      const bool eq = i < text.size() && text[i] == base_text[i];
      same += eq;
      if (!eq && first < 0) first = static_cast<int64_t>(i);
    }
    const double rel = (bpc - base) / base;
    const double bound = q == DType::kI8 ? 0.02 : 0.005;
    ok &= std::fabs(rel) <= bound;
    std::printf(
        "%-5s bpc %.5f (%+.3f%% vs f32, bound %.1f%%); greedy %lld/%zu characters equal to "
        "f32, first difference %s\n",
        q == DType::kI8 ? "int8" : "bf16", bpc, 100 * rel, 100 * bound,
        static_cast<long long>(same), base_text.size(),
        first < 0 ? "none" : absl::StrCat("at ", first).c_str());
  }
  return ok;
}

int Main(int argc, char** argv) {
  Flags f;
  cli::FlagParser flags(std::string(kProgram),
                        "--text FILE [--model M.onnx] [--vocab V.txt] [--prompt TEXT] "
                        "[--greedy-chars N] [--check]");
  flags.AddString("--text", &f.text, "the text to score (UTF-8)");
  flags.AddString("--model", &f.model, "the char LM (default tools/lm/charlm.onnx)");
  flags.AddString("--vocab", &f.vocab, "its vocabulary (default tools/lm/vocab.txt)");
  flags.AddString("--prompt", &f.prompt, "the greedy decode's prompt");
  flags.AddInt("--greedy-chars", &f.greedy_chars, "characters to generate greedily");
  flags.AddSwitch("--check", &f.check, "exit 1 unless int8 is within 2% and bf16 within 0.5%");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return cli::ReportError(kProgram, s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (f.text.empty()) return cli::ReportError(kProgram, "missing --text FILE");
  absl::StatusOr<bool> ok = Report(f);
  if (!ok.ok()) return cli::ReportError(kProgram, ok.status());
  if (f.check && !*ok) {
    std::fprintf(stderr, "%s: a bits-per-character bound does not hold\n", kProgram.data());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace dynvm

int main(int argc, char** argv) { return dynvm::Main(argc, argv); }
