// Interpreter overhead, measured on programs written in dynvm assembly:
//   BM_ScalarInstruction  a loop whose body is kBodySize scalar instructions; one item is one
//                         executed instruction (the body plus the endloop);
//   BM_EmptyInvoke        a loop invoking a kernel that does nothing (op "Empty", domain
//                         "bench", registered here); one item is one invoke (plus its endloop);
//   BM_EmptyInvokeProfiled  the same with a Profiler (RunOptions::profiler): what recording
//                         costs per invoke and iteration (three clock reads, two spans, two
//                         memory samples);
//   BM_EmptyRun           Run() of a function that returns at once; one item is one Run.
// ns per item = 1e9 / items_per_second.
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "isa/assembler.h"
#include "kernels/kernel.h"
#include "kernels/registry.h"
#include "vm/executable.h"
#include "vm/profiler.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

constexpr int kBodySize = 16;
constexpr int kTrips = 1 << 20;

class EmptyKernel final : public Kernel {
 public:
  absl::Status Run(KernelContext& ctx, absl::Span<const Tensor* const> inputs,
                   absl::Span<Tensor* const> outputs) const override {
    return absl::OkStatus();
  }
  std::string name() const override { return "empty.f32.bench"; }
};

void RegisterBenchKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    KernelRegistration r;
    r.domain = "bench";
    r.op = "Empty";
    r.backend = "bench";
    r.factory = [](const KernelSpec&) -> absl::StatusOr<std::unique_ptr<Kernel>> {
      return std::make_unique<EmptyKernel>();
    };
    KernelRegistry::Global().Register(std::move(r));
  });
}

std::unique_ptr<VirtualMachine> Build(benchmark::State& state, absl::string_view text) {
  RegisterBenchKernels();
  absl::StatusOr<std::string> bytes = isa::AssembleToBytes(text);
  if (!bytes.ok()) {
    state.SkipWithError(std::string(bytes.status().message()).c_str());
    return nullptr;
  }
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(*bytes);
  if (!exe.ok()) {
    state.SkipWithError(std::string(exe.status().message()).c_str());
    return nullptr;
  }
  VmOptions options;
  options.max_loop_iterations = int64_t{1} << 60;
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe, options);
  if (!vm.ok()) {
    state.SkipWithError(std::string(vm.status().message()).c_str());
    return nullptr;
  }
  return *std::move(vm);
}

void RunLoop(benchmark::State& state, VirtualMachine& vm, int64_t items_per_run,
             Profiler* profiler = nullptr) {
  RunOptions options;
  options.profiler = profiler;
  for (auto _ : state) {
    if (profiler != nullptr) profiler->Clear();  // keeps its buffers' capacity
    absl::Status s = vm.Run(options);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
  state.SetItemsProcessed(state.iterations() * items_per_run);
}

void BM_ScalarInstruction(benchmark::State& state) {
  // A dependency chain through the three-operand integer ops, as shape arithmetic does.
  static constexpr const char* kBody[kBodySize] = {
      "add_i %s4, %s4, %s1", "mul_i %s5, %s4, %s2",  "sub_i %s6, %s5, %s3", "max_i %s7, %s6, %s1",
      "min_i %s5, %s7, %s4", "addimm_i %s6, %s5, 7", "add_i %s7, %s6, %s0", "neg_i %s5, %s7",
      "sub_i %s4, %s4, %s1", "mul_i %s6, %s5, %s5",  "add_i %s7, %s7, %s6", "max_i %s5, %s7, %s3",
      "min_i %s6, %s5, %s2", "addimm_i %s4, %s4, 1", "add_i %s7, %s4, %s6", "sub_i %s5, %s7, %s0",
  };
  std::string text = absl::StrCat(
      ".function main\n  .sregs i64 i64 i64 i64 i64 i64 i64 i64\n  .entry\n"
      "  const_i %s1, 1\n  const_i %s2, 3\n  const_i %s3, 5\n  const_i %s4, 0\n"
      "  loop %s0, ",
      kTrips, "\n");
  for (const char* line : kBody) absl::StrAppend(&text, "    ", line, "\n");
  absl::StrAppend(&text, "  endloop\n  ret (), ()\n.end\n");
  std::unique_ptr<VirtualMachine> vm = Build(state, text);
  if (vm == nullptr) return;
  RunLoop(state, *vm, int64_t{kTrips} * (kBodySize + 1));
}
BENCHMARK(BM_ScalarInstruction)->Unit(benchmark::kMillisecond);

void EmptyInvoke(benchmark::State& state, Profiler* profiler) {
  const std::string text = absl::StrCat(R"(
.kernel "Empty" domain="bench" in(f32) out(f32)
.function main
  .sregs i64
  .oregs storage tensor:f32 tensor:f32
  .entry
  alloc_storage %o0, 32, cpu
  alloc_tensor %o1, %o0, 0, f32, [4]
  alloc_tensor %o2, %o0, 16, f32, [4]
  loop %s0, )",
                                        kTrips, R"(
    invoke k0, #0, (%o1), (%o2)
  endloop
  ret (), ()
.end
)");
  std::unique_ptr<VirtualMachine> vm = Build(state, text);
  if (vm == nullptr) return;
  RunLoop(state, *vm, kTrips, profiler);
}

void BM_EmptyInvoke(benchmark::State& state) { EmptyInvoke(state, nullptr); }
BENCHMARK(BM_EmptyInvoke)->Unit(benchmark::kMillisecond);

void BM_EmptyInvokeProfiled(benchmark::State& state) {
  Profiler profiler;
  EmptyInvoke(state, &profiler);
}
BENCHMARK(BM_EmptyInvokeProfiled)->Unit(benchmark::kMillisecond);

void BM_EmptyRun(benchmark::State& state) {
  std::unique_ptr<VirtualMachine> vm =
      Build(state, ".function main\n  .entry\n  ret (), ()\n.end\n");
  if (vm == nullptr) return;
  RunLoop(state, *vm, 1);
}
BENCHMARK(BM_EmptyRun);

}  // namespace
}  // namespace dynvm

BENCHMARK_MAIN();
