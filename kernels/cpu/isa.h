// dynvm's CPU microkernels (kernels/cpu/, README.md there): the instruction-set levels they are
// written for, and which one runs. Internal to the kernels library.
//
// Every microkernel has a portable implementation (plain C++, compiled for the build's baseline
// x86-64 or any other target) and, where it pays, one per x86 level below. The level is chosen
// once, on first use, from cpuid and DYNVM_CPU_ISA, and every microkernel then runs its best
// implementation at or below it (kernels/cpu/dispatch.h: one table of function pointers).
//
// Levels, each including the ones before it:
//   portable     the build's baseline (SSE2 on x86-64)
//   avx2         AVX2 + FMA
//   avx512       AVX-512 F, BW, VL and DQ
//   avx512_vnni  AVX-512 VNNI (the int8 kernels' VPDPWSSD); the bf16 kernels' VDPBF16PS also
//                needs AVX512_BF16 (HasAvx512Bf16), which a CPU at this level may lack
// AMX is not used (no machine to test it on).
//
// DYNVM_CPU_ISA=portable|avx2|avx512|avx512_vnni lowers the level (for A/B runs and tests); a
// level above what the CPU has is clamped to it, and an unknown value is ignored with a warning
// on stderr. The choice between a microkernel and a oneDNN primitive, made per shape, reads
// ActiveIsa() (kernels/dnnl/choice.h).
#ifndef DYNVM_KERNELS_CPU_ISA_H_
#define DYNVM_KERNELS_CPU_ISA_H_

#include <optional>
#include <string_view>
#include <vector>

namespace dynvm::cpu {

enum class Isa : int { kPortable = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vnni = 3 };

// "portable", "avx2", "avx512", "avx512_vnni".
const char* IsaName(Isa isa);
std::optional<Isa> ParseIsa(std::string_view name);

// The highest level this CPU runs (cpuid; the OS must save the AVX/AVX-512 state). Fixed for
// the process.
Isa DetectedIsa();
// Whether the CPU has AVX512_BF16 (VDPBF16PS) besides DetectedIsa() >= kAvx512Vnni.
bool HasAvx512Bf16();
// Whether the CPU is AMD's: an implementation may tune for it (the same arithmetic either way).
bool IsAmd();

// The level the microkernels run at: DetectedIsa(), lowered by DYNVM_CPU_ISA. Read once (or set
// by SetIsaForTesting).
Isa ActiveIsa();

// Every level this CPU runs, lowest first (portable is always there).
std::vector<Isa> SupportedIsas();
bool IsaSupported(Isa isa);

// For tests and A/B runs in one process: sets the active level and refills the dispatch table.
// REQUIRES: IsaSupported(isa); no microkernel running on any thread (the table is written
// without a lock). Returns the level before.
Isa SetIsaForTesting(Isa isa);

// Sets a level for a scope (a test running every implementation the CPU has).
class ScopedIsaForTesting {
 public:
  explicit ScopedIsaForTesting(Isa isa) : before_(SetIsaForTesting(isa)) {}
  ~ScopedIsaForTesting() { SetIsaForTesting(before_); }
  ScopedIsaForTesting(const ScopedIsaForTesting&) = delete;
  ScopedIsaForTesting& operator=(const ScopedIsaForTesting&) = delete;

 private:
  Isa before_;
};

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_ISA_H_
