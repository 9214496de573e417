#include "kernels/dnnl/choice.h"

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/qgemv.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/quant_common.h"

namespace dynvm::onednn::choice {
namespace {

// An A/B switch: false when the variable holds "0".
bool EnvOn(const char* name) {
  const char* env = std::getenv(name);
  return env == nullptr || std::strcmp(env, "0") != 0;
}

std::optional<bool>& Forced(Rule rule) {
  static std::optional<bool> forced[6];
  return forced[static_cast<int>(rule)];
}

}  // namespace

void ForceForTesting(Rule rule, std::optional<bool> use) { Forced(rule) = use; }

// The measurements (docs/kernels.md, "Microkernel or oneDNN"): dnnl_choice_benchmark on the Zen 4
// EPYC, oneDNN at its own AVX-512 level (docs/results/zen4-choice-avx512-2026-11-29.txt,
// zen4-choice-avx512-gemv-qgemv-2026-11-29.txt) and with ONEDNN_MAX_CPU_ISA=AVX2 and the
// microkernels at avx2 (zen4-choice-avx2-2026-11-29.txt).

// cpu::Gemv ran 1.04-1.57x dnnl_sgemm from 256^2 to 2896^2 (8.4M multiply-adds) on every level;
// at 4096^2 (16.8M, from memory) 0.89x with AVX2 and 1.1-1.27x with AVX-512.
bool UseGemv(int64_t n, int64_t k, int threads) {
  if (const std::optional<bool>& f = Forced(Rule::kGemv)) return *f;
  return threads > 1 || n * k < (int64_t{1} << 24);
}

// A Linear [m, k] x [k, n] with constant weights, with or without an activation (s9, the
// transformer shapes k x n = 768 x 2304, 768 x 3072, 3072 x 768, 384 x 1536, 1536 x 384, 96 x 384,
// 192 x 768, 384 x 96 and s8's 256 x 1024, 1024 x 256, 512 x 512; weights cold; 1 and 2 threads;
// docs/results/linear-packed-choice-s9-2026-11-30.txt): the packed GEMM ran 1.1-3x dnnl_sgemm
// (which repacks W on every call) from 8 to 128 rows and about even at 197-256 with AVX-512 (an
// exploratory AVX2 run: 1.04-1.49x up to 256 rows); at 1024 and 3136 rows dnnl_sgemm's AVX-512
// GEMM was 0-20% faster. One row runs the GEMV on the panels (0.8-1.9x cpu::Gemv's dot form).
bool UsePackedGemm(int64_t m, int64_t n, int64_t k) {
  static const bool on = EnvOn("DYNVM_DNNL_PACKED_GEMM");
  const cpu::Isa isa = cpu::ActiveIsa();
  if (const std::optional<bool>& f = Forced(Rule::kPackedGemm)) {
    return *f && isa >= cpu::Isa::kAvx2;
  }
  if (!on || isa < cpu::Isa::kAvx2) return false;
  return m <= 256;
}

// dynvm's Winograd ran 1.5-2.5x oneDNN's AVX2 direct convolution on the CRNN's and resnet18's
// 3x3 convs; with AVX-512 0.67-1.04x oneDNN's own Winograd where that serves (Relu, 96 pixels or
// more), and 1.5-2x oneDNN where it does not (Clip, which its Winograd lacks; 4x4 images).
bool UseOwnWinograd(bool onednn_winograd_serves) {
  static const bool on = EnvOn("DYNVM_DNNL_OWN_WINOGRAD");
  if (cpu::ActiveIsa() < cpu::Isa::kAvx2) return false;
  if (const std::optional<bool>& f = Forced(Rule::kOwnWinograd)) return *f;
  return on && !onednn_winograd_serves;
}

// The direct kernel against dequantize + dnnl_sgemm, n = k = 256 and 1024, m = 1 to 128: where
// it narrows the activations (int8 with VNNI, bf16 with AVX512_BF16) 1.08-8x at every m; else
// 1.2-5x up to 8 rows, and for the 1024 x 1024 weights (the per-call dequantization costs n k)
// 1.1-3.3x up to 32 rows (0.84-1.45x at 64 and 128), for 256 x 256 0.7-1.4x past 8.
bool UseQGemv(int64_t m, int64_t n, int64_t k, bool int8) {
  if (const std::optional<bool>& f = Forced(Rule::kQGemv)) return *f;
  if (m <= cpu::kQuantSmallRows) return true;
  const cpu::Isa isa = cpu::ActiveIsa();
  const bool narrows = isa >= cpu::Isa::kAvx512Vnni && (int8 || cpu::HasAvx512Bf16());
  if (narrows) return m <= 128;
  return n * k >= (int64_t{1} << 20) && m <= 32;
}

// oneDNN's integer GEMM with VNNI ran 1.6-4.7x dynvm's (which is at its best 0.5x with VNNI's
// VPDPWSSD), so dynvm's runs only where oneDNN's is not exact.
bool UseIGemm(int64_t m, int64_t n, int64_t k) {
  if (const std::optional<bool>& f = Forced(Rule::kIGemm)) return *f || !HasInt8Vnni();
  return !HasInt8Vnni();
}

// The strided loop against oneDNN 2.6's binary primitive (BM_StridedBinary, an Add of 200K-460K
// elements, real time; docs/results/broadcast-add-choice-s10-2026-11-30.txt): oneDNN jits a
// dense pair, a scalar, one value per channel, an operand repeated over leading axes, but serves
// a middle axis of 1 (a shifted-window mask [1, nW, 1, L, L] over heads) by its reference
// binary, 11 ms where the loop takes 13-14 us; where it jits, the loop at one thread is as fast
// or faster (1.02-1.37x at AVX-512 and with AVX2 forced). At two threads the loop splits over
// the pool like every other elementwise loop (kMinParallelElements, docs/threads.md).
bool UseStridedBinary(bool a_full) {
  if (!a_full) return true;  // oneDNN broadcasts its second operand only
  if (const std::optional<bool>& f = Forced(Rule::kStridedBinary)) return *f;
  return true;
}

}  // namespace dynvm::onednn::choice
