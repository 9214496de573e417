// How a microkernel implementation is compiled for an instruction-set level (kernels/cpu/isa.h).
// Internal to kernels/cpu/*.cc.
//
// One scheme: each implementation is a plain function with __attribute__((target(...))) for its
// level (no target_clones, no ifunc: those resolvers run during relocation, before a
// sanitizer's runtime is up, which crashed ThreadSanitizer builds at load), and the dispatch
// table (dispatch.h) holds a pointer to the best one for the active level, filled once.
//
// A loop the compiler vectorizes is written once, as an always-inline body without a target,
// and instantiated in one function per level: the body is inlined into each before the
// vectorizer runs, so each level gets its own vector code. The body's helpers must be inline
// too (a non-inlined helper is compiled for the baseline, which is correct but slow). Loops the
// compiler does not vectorize well on a level (reductions and selects over 16-lane GCC vectors
// on AVX2, integer widening) are written with intrinsics in a function for that level.
#ifndef DYNVM_KERNELS_CPU_TARGET_H_
#define DYNVM_KERNELS_CPU_TARGET_H_

#if defined(__x86_64__)
#define DYNVM_CPU_X86 1
#include <immintrin.h>
// AVX2 with FMA (x86-64-v3's arithmetic): a plain "avx2" target has no FMA, and each a * b + c
// of a polynomial would be a multiply and an add.
#define DYNVM_AVX2 __attribute__((target("avx2,fma")))
#define DYNVM_AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq")))
#define DYNVM_AVX512_VNNI \
  __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#define DYNVM_AVX512_BF16 \
  __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16")))
// The generic loops' levels: exactly the targets the loops had as target_clones before
// kernels/cpu/ (GCC: x86-64-v3, AVX2 with FMA; AVX-512F), so that each level compiles them to the
// same code, and results, as before: the vectorizer's epilogues (the tails) depend on the ISA
// flags, and AVX-512 VL/BW change them. (clang's AVX2 clone had no FMA; it gets AVX2 + FMA.)
#if defined(__clang__)
#define DYNVM_AVX2_LOOPS __attribute__((target("avx2,fma")))
#else
#define DYNVM_AVX2_LOOPS __attribute__((target("arch=x86-64-v3")))
#endif
#define DYNVM_AVX512_LOOPS __attribute__((target("avx512f")))
#else
#define DYNVM_CPU_X86 0
#endif

#define DYNVM_ALWAYS_INLINE inline __attribute__((always_inline))

// Outputs of the elementwise loops are either separate arrays or exactly their inputs (an
// in-place op: the same index read then written). The compiler's run-time overlap check would
// send the in-place case to the scalar loop; ivdep states that no iteration depends on another.
#if defined(__clang__)
#define DYNVM_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#else
#define DYNVM_IVDEP _Pragma("GCC ivdep")
#endif

#endif  // DYNVM_KERNELS_CPU_TARGET_H_
