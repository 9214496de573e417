// DYNVM_CLONES: compile a vector loop for AVX-512, AVX2 (+FMA) and a baseline, picked by the CPU at
// load (GCC/Clang target_clones). Under ThreadSanitizer the clones' ifunc resolvers would be
// instrumented and run during relocation, before the sanitizer's runtime starts (a crash at
// load), so a TSan build compiles one version. Every file with cloned loops uses this header.
//
// Only on functions with internal linkage (an anonymous namespace): clang 14 compiles a cloned
// function with external linkage as one version, its first clone (AVX-512), under the plain
// name, which is an illegal instruction on a CPU without AVX-512 (the sanitizer builds on an
// AVX2 machine found it). Export a plain function that calls the cloned one.
#ifndef DYNVM_KERNELS_DNNL_CLONES_H_
#define DYNVM_KERNELS_DNNL_CLONES_H_

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DYNVM_NO_CLONES 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(DYNVM_NO_CLONES)
#define DYNVM_CLONES
#elif defined(__clang__)
#define DYNVM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
// GCC: the AVX2 clone as x86-64-v3 (AVX2 with FMA): a plain "avx2" clone has no FMA, so every
// a * b + c of a polynomial (exp, erf, tanh) was a multiply and an add. GCC 12's resolver ranks
// x86-64-v3 above avx2 and below avx512f. (clang 14's resolver never picks an x86-64-v3 clone,
// so clang keeps "avx2".)
#define DYNVM_CLONES __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
#endif

#endif  // DYNVM_KERNELS_DNNL_CLONES_H_
