#include "kernels/cpu/isa.h"

#include <cstdio>
#include <cstdlib>

#include "kernels/cpu/dispatch.h"

namespace dynvm::cpu {
namespace {

struct Features {
  Isa level = Isa::kPortable;
  bool bf16 = false;
  bool amd = false;
};

Features Detect() {
  Features f;
#if defined(__x86_64__)
  // libgcc's (or compiler-rt's) cpuid reading, which also checks that the OS saves the AVX and
  // AVX-512 register state (XGETBV). Plain function calls: no ifunc resolver (those run before
  // a sanitizer's runtime starts; see kernels/cpu/README.md).
  __builtin_cpu_init();
  f.amd = __builtin_cpu_is("amd");
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return f;
  f.level = Isa::kAvx2;
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))) {
    return f;
  }
  f.level = Isa::kAvx512;
  if (!__builtin_cpu_supports("avx512vnni")) return f;
  f.level = Isa::kAvx512Vnni;
  f.bf16 = __builtin_cpu_supports("avx512bf16");
#endif
  return f;
}

const Features& CpuFeatures() {
  static const Features f = Detect();
  return f;
}

Isa FromEnvironment() {
  const Isa detected = DetectedIsa();
  const char* env = std::getenv("DYNVM_CPU_ISA");
  if (env == nullptr || *env == '\0') return detected;
  const std::optional<Isa> want = ParseIsa(env);
  if (!want.has_value()) {
    std::fprintf(stderr,
                 "dynvm: ignoring DYNVM_CPU_ISA=%s (portable, avx2, avx512 or avx512_vnni); "
                 "running %s\n",
                 env, IsaName(detected));
    return detected;
  }
  return *want < detected ? *want : detected;
}

// The active level: written once on first use, and by SetIsaForTesting.
Isa& Active() {
  static Isa isa = FromEnvironment();
  return isa;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return "portable";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Vnni:
      return "avx512_vnni";
  }
  return "?";
}

std::optional<Isa> ParseIsa(std::string_view name) {
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    if (name == IsaName(isa)) return isa;
  }
  return std::nullopt;
}

Isa DetectedIsa() { return CpuFeatures().level; }

bool HasAvx512Bf16() { return CpuFeatures().bf16; }

bool IsAmd() { return CpuFeatures().amd; }

Isa ActiveIsa() { return Active(); }

bool IsaSupported(Isa isa) { return isa <= DetectedIsa(); }

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> out;
  for (int i = 0; i <= static_cast<int>(DetectedIsa()); ++i) out.push_back(static_cast<Isa>(i));
  return out;
}

Isa SetIsaForTesting(Isa isa) {
  const Isa before = Active();
  Active() = IsaSupported(isa) ? isa : DetectedIsa();
  internal::Refill(Active());
  return before;
}

}  // namespace dynvm::cpu
