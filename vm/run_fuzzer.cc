// Feeds arbitrary bytes to the loader and, when they load, runs every entry function under
// tight limits, its inputs bound to small pseudo-random tensors (vm/fuzzing.h; seeded by
// the bytes, so an input always replays the same way). Loading and running may fail; neither may
// crash: the verifier's promise is that whatever it accepts, the interpreter runs without bounds
// checks of its own, so a crash here is a verifier gap or an interpreter bug.
//
// As in vm/verifier_fuzzer.cc, bit 0 of the stored checksum (byte 64) picks whether the
// checksum is recomputed over the mutated bytes before loading (1) or not (0), so that
// mutations behind the checksum reach the verifier and the interpreter (vm/fuzzing.h).
//
// Seed corpus: vm/fuzz_corpus/seeds/ (shared with vm_verifier_fuzzer) and vm/fuzz_corpus/run/
// (see tests/hostile_executable_test.cc to regenerate).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "vm/executable.h"
#include "vm/fuzzing.h"
#include "vm/virtual_machine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string file = dynvm::fuzzing::FileFromFuzzInput(data, size);
  absl::StatusOr<std::shared_ptr<const dynvm::Executable>> exe =
      dynvm::Executable::LoadFromBytes(file);
  if (!exe.ok()) return 0;
  dynvm::VmOptions options;
  options.max_loop_iterations = 10000;
  options.max_call_depth = 32;
  options.memory_limit = int64_t{64} << 20;
  absl::StatusOr<std::unique_ptr<dynvm::VirtualMachine>> vm =
      dynvm::VirtualMachine::Create(*exe, options);
  if (!vm.ok()) return 0;
  for (int f = 0; f < (*exe)->num_functions(); ++f) {
    const dynvm::FunctionInfo& info = (*exe)->function(f);
    if (!info.is_entry) continue;
    dynvm::fuzzing::BindSmallInputs(**vm, info, dynvm::fuzzing::SeedOf(data, size) + f);
    dynvm::RunOptions run;
    run.function = info.name;
    // Bounds the work of a run whose iterations are each expensive (big copies, kernels).
    run.deadline = absl::Now() + absl::Seconds(2);
    absl::Status s = (*vm)->Run(run);
    if (s.ok() && !(*vm)->GetOutputs(info.name).ok()) __builtin_trap();
  }
  return 0;
}
