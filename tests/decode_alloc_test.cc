// The steady state of a decode loop makes no calls into the system allocator: the exported
// decoders (tools/models/*: a greedy decode loop inside the ONNX graph, the LSTM's tokens kept
// by concatenation, in a sequence or by ScatterND; the GPT compiled with bounds, so that its
// growing shapes are planned at their maximum; a Llama-style step model, tests/data/llama_step,
// compiled with --decode and bounds, whose KV cache is appended in place, its tokens checked
// against PyTorch's, greedy and sampled with top-k, top-p and a repetition penalty; the same
// weights with one fused attention node per layer, tests/data/llama_step_fused: GroupQueryAttention
// with rotary inside or outside it, MultiHeadAttention and Attention 23, greedy) run with the
// reference kernels and with the kernels this build prefers (oneDNN where built) at one intra-op
// thread, and a run of 40 new tokens calls malloc exactly as often as a run of 10, after a run of
// each length has warmed the VM's pools and the sites' bound kernels. One exception, which
// README.md states: the GPT under oneDNN, whose primitives for each new shape malloc inside oneDNN
// (asserted nonzero below, so the README is updated when that changes). malloc and friends are
// interposed below to count (operator new reaches them too); not built with sanitizers, which own
// malloc.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"
#include "gtest/gtest.h"
#include "tools/npy/npy.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}

namespace {
std::atomic<int64_t> g_calls{0};
std::atomic<bool> g_counting{false};
void* volatile g_sink = nullptr;
inline void Count() {
  if (g_counting.load(std::memory_order_relaxed)) g_calls.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* malloc(size_t n) {
  Count();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  Count();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  Count();
  return __libc_realloc(p, n);
}
void free(void* p) { __libc_free(p); }
void* memalign(size_t a, size_t n) {
  Count();
  return __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) {
  Count();
  return __libc_memalign(a, n);
}
int posix_memalign(void** p, size_t a, size_t n) {
  Count();
  *p = __libc_memalign(a, n);
  return *p != nullptr ? 0 : 12;  // ENOMEM
}
}

namespace dynvm {
namespace {

namespace fs = std::filesystem;

// max_new_tokens with the dtype and shape of the checked-in case's.
Tensor TokensLike(const Tensor& like, int64_t n) {
  Tensor t = *Tensor::Empty(like.dtype(), like.dims());
  if (like.dtype() == DType::kI32) {
    t.data<int32_t>()[0] = static_cast<int32_t>(n);
  } else {
    t.data<int64_t>()[0] = n;
  }
  return t;
}

// The GPT's shapes grow every step, and so does the step model's KV cache: bounds plan them at
// their maximum (docs/compiler.md, docs/llm.md).
compiler::CompileOptions OptionsFor(const std::string& name) {
  compiler::CompileOptions o;
  if (name == "gpt" || absl::StartsWith(name, "llama_step")) {
    o.bounds = {{"batch", 1}, {"prompt_len", 8}, {"max_new_tokens", 40}};
  }
  return o;
}

// The models' folders; llama_step is an Optimum-layout step model (tools/models/llama_step.py
// --write-test-case) compiled as vm-compile --decode does, its case0 tokens PyTorch's greedy
// host loop's; llama_step_sampled is the same model sampled with temperature, top-k, top-p and
// a repetition penalty (dynvm::Sample's scratch is the site's workspace). llama_step_fused_V is
// the same weights with one fused attention node per layer (tools/models/llama_step_fused.py V,
// V one of gqa_rotary, gqa, mha, attention23: tests/data/llama_step_fused/V.onnx), whose greedy
// tokens are the same case0's.
bool IsStep(const std::string& name) { return absl::StartsWith(name, "llama_step"); }
constexpr absl::string_view kFused = "llama_step_fused_";
fs::path DirOf(const std::string& name) {
  return IsStep(name) ? fs::path("tests/data/llama_step") : fs::path("tools/models") / name;
}
fs::path ModelOf(const std::string& name) {
  if (absl::StartsWith(name, kFused)) {
    return fs::path("tests/data/llama_step_fused") /
           absl::StrCat(name.substr(kFused.size()), ".onnx");
  }
  return DirOf(name) / "model.onnx";
}

// System allocator calls of 30 more decode steps of model `name` loaded with `backends`.
int64_t ExtraCalls(const std::string& name, const BackendPolicy& backends) {
  const fs::path dir = DirOf(name);
  compiler::onnx::ImportOptions import;
  import.decode = IsStep(name);
  absl::StatusOr<std::unique_ptr<compiler::Module>> module =
      compiler::onnx::ImportOnnxFile(ModelOf(name).string(), import);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return -1;
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(**module, OptionsFor(name));
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return -1;
  LoadOptions options;
  options.backends = backends;
  absl::StatusOr<std::shared_ptr<const Executable>> exe =
      Executable::LoadFromBytes(compiled->bytes, options);
  EXPECT_TRUE(exe.ok()) << exe.status();
  if (!exe.ok()) return -1;
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  EXPECT_TRUE(vm.ok()) << vm.status();
  if (!vm.ok()) return -1;
  absl::StatusOr<Tensor> prompt = npy::LoadNpy((dir / "case0" / "input_prompt.npy").string());
  absl::StatusOr<Tensor> like = npy::LoadNpy((dir / "case0" / "input_max_new_tokens.npy").string());
  EXPECT_TRUE(prompt.ok() && like.ok());
  if (!prompt.ok() || !like.ok()) return -1;
  EXPECT_TRUE((*vm)->SetInput("prompt", *prompt).ok());
  const bool sampled = name == "llama_step_sampled";
  if (import.decode) {  // greedy or sampled, no stop token
    EXPECT_TRUE((*vm)->SetInput("temperature", Tensor::Scalar(sampled ? 0.9f : 0.0f)).ok());
    EXPECT_TRUE((*vm)->SetInput("top_k", Tensor::ScalarI64(sampled ? 20 : 0)).ok());
    EXPECT_TRUE((*vm)->SetInput("top_p", Tensor::Scalar(sampled ? 0.9f : 1.0f)).ok());
    EXPECT_TRUE((*vm)->SetInput("repetition_penalty", Tensor::Scalar(sampled ? 1.3f : 1.0f)).ok());
    EXPECT_TRUE((*vm)->SetInput("seed", Tensor::ScalarI64(0)).ok());
    EXPECT_TRUE((*vm)->SetInput("stop_token", Tensor::ScalarI64(-1)).ok());
  }

  // Calls into the system allocator during one Run generating n tokens.
  auto calls = [&](int64_t n) -> int64_t {
    EXPECT_TRUE((*vm)->SetInput("max_new_tokens", TokensLike(*like, n)).ok());
    g_calls = 0;
    g_counting = true;
    const absl::Status s = (*vm)->Run();
    g_counting = false;
    EXPECT_TRUE(s.ok()) << s;
    return g_calls.load();
  };
  // Warm-up runs of both lengths fill the pools (the outputs' sizes differ with the length)
  // and bind every site; then the only difference between the runs is 30 decode steps.
  // (Two of each: a run's outputs stay alive until the next run replaces them, so the pool
  // holds two output blocks of each length.)
  for (int64_t n : {40, 40, 10, 10}) calls(n);
  const int64_t short_run = calls(10);
  const int64_t long_run = calls(40);
  // The step models' 40 tokens are PyTorch's (the in-place cache must not change an answer).
  if (import.decode && !sampled) {
    absl::StatusOr<Tensor> want = npy::LoadNpy((dir / "case0" / "output_tokens.npy").string());
    absl::StatusOr<Tensor> got = (*vm)->GetOutput("tokens");
    EXPECT_TRUE(want.ok() && got.ok());
    if (want.ok() && got.ok()) {
      const std::vector<int64_t> got_dims(got->dims().begin(), got->dims().end());
      const std::vector<int64_t> want_dims(want->dims().begin(), want->dims().end());
      EXPECT_EQ(got_dims, want_dims);
      for (int64_t i = 0; i < want->numel() && got_dims == want_dims; ++i) {
        EXPECT_EQ(got->data<int64_t>()[i], want->data<int64_t>()[i]) << "token " << i;
      }
    }
  }
  return long_run - short_run;
}

class DecodeAllocTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeAllocTest, DecodeStepsMakeNoSystemAllocatorCalls) {
  ASSERT_TRUE(fs::exists(ModelOf(GetParam())));
  // lstm_list keeps its tokens in an ONNX sequence, whose array of tensors doubles when full:
  // from 10 to 40 tokens it grows twice (16 to 32 to 64 entries), a logarithmic number of
  // reallocations and none per step. Every other decoder: none at all.
  const int64_t allowed = GetParam() == "lstm_list" ? 2 : 0;
  const int64_t reference = ExtraCalls(GetParam(), BackendPolicy{{"reference"}});
  std::printf("%s, reference kernels: 30 more decode steps, %lld more system allocator calls\n",
              GetParam().c_str(), static_cast<long long>(reference));
  EXPECT_LE(reference, allowed);
  const int64_t preferred = ExtraCalls(GetParam(), BackendPolicy{});
  std::printf("%s, preferred kernels: 30 more decode steps, %lld more system allocator calls\n",
              GetParam().c_str(), static_cast<long long>(preferred));
  // The README scopes its claim by this: the GPT's shapes change every step, and oneDNN
  // creates a primitive for each shape it has not seen, which mallocs inside oneDNN. The VM's
  // own pool makes no system allocation after the first iteration (decode_memory_test). The
  // LSTMs' shapes are fixed, so their oneDNN primitives are made once. If the GPT's count
  // drops to 0, the README's carve-out is out of date: this fails so that it is updated.
#if defined(DYNVM_WITH_DNNL)
  if (GetParam() == "gpt") {
    EXPECT_GT(preferred, 0) << "oneDNN no longer allocates per GPT step: update README.md";
    return;
  }
#endif
  EXPECT_LE(preferred, allowed);
}

// A decode step's products on weights stored as panels of 16 columns (dynvm::MatMul with
// b_packed_n, compiler/transpose_weights.h; the models above are below the rule's size): after
// a prompt-sized run and a one-row run, 30 more one-row runs call malloc exactly as often as 10,
// with the reference and the preferred kernels, at 1 and 2 threads.
TEST(DecodeAllocPanelsTest, OneRowProductsOnPanelsMakeNoSystemAllocatorCalls) {
  constexpr int64_t kK = 256;
  compiler::Module m;
  compiler::GraphBuilder b(m.AddFunction("main"));
  compiler::Value* x = b.Input("x", DType::kF32, {compiler::DimSpec("rows"), kK});
  Tensor w = *Tensor::Empty(DType::kF32, {kK, kK});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = static_cast<float>(i % 7) - 3.0f;
  compiler::Value* h = b.Op("MatMul", {x, b.Constant(w, "w", true)});
  b.Output("y", b.Op("MatMul", {h, b.Constant(w, "w2", true)}));
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(m, {});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_GE(compiled->packed_weights, 1);
  Tensor one = *Tensor::Empty(DType::kF32, {1, kK}), many = *Tensor::Empty(DType::kF32, {64, kK});
  for (Tensor* t : {&one, &many}) {
    for (int64_t i = 0; i < t->numel(); ++i)
      t->data<float>()[i] = 0.01f * static_cast<float>(i % 5);
  }
  for (const BackendPolicy& backends : {BackendPolicy{{"reference"}}, BackendPolicy{}}) {
    for (const int threads : {1, 2}) {
      LoadOptions options;
      options.backends = backends;
      absl::StatusOr<std::shared_ptr<const Executable>> exe =
          Executable::LoadFromBytes(compiled->bytes, options);
      ASSERT_TRUE(exe.ok()) << exe.status();
      VmOptions vo;
      vo.num_threads = threads;
      absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe, vo);
      ASSERT_TRUE(vm.ok()) << vm.status();
      auto calls = [&](const Tensor& in, int runs) -> int64_t {
        g_calls = 0;
        g_counting = true;
        for (int r = 0; r < runs; ++r) {
          EXPECT_TRUE((*vm)->SetInput("x", in).ok());
          EXPECT_TRUE((*vm)->Run().ok());
        }
        g_counting = false;
        return g_calls.load();
      };
      calls(many, 2);
      calls(one, 2);
      const int64_t short_run = calls(one, 10), long_run = calls(one, 40);
      EXPECT_EQ(long_run, short_run) << "threads " << threads;
    }
  }
}

// The counter is live: a run that allocates per step is seen (the counting is not vacuous).
TEST(DecodeAllocCounterTest, CountsAllocationsMadeDuringARun) {
  g_calls = 0;
  g_counting = true;
  for (int i = 0; i < 5; ++i) {
    g_sink = new std::vector<int>(100);  // through a volatile: the pairs cannot be elided
    delete static_cast<std::vector<int>*>(g_sink);
    g_sink = std::malloc(32);
    std::free(g_sink);
  }
  g_counting = false;
  EXPECT_GE(g_calls.load(), 10);
}

INSTANTIATE_TEST_SUITE_P(Decoders, DecodeAllocTest,
                         ::testing::Values("lstm_cat", "lstm_list", "lstm_scatter", "gpt",
                                           "llama_step", "llama_step_sampled",
                                           "llama_step_fused_gqa_rotary", "llama_step_fused_gqa",
                                           "llama_step_fused_mha", "llama_step_fused_attention23"));

}  // namespace
}  // namespace dynvm
