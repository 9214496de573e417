// An exact integer GEMM that needs no VNNI (docs/kernels.md, "Quantized operators"): the
// fallback of MatMulInteger, QLinearMatMul and the im2col ConvInteger/QLinearConv on CPUs
// where oneDNN's u8 x s8 GEMM may saturate (no avx512_core_vnni, no avx2_vnni).
//
//   c[i * ldc + j] = sum_p (a[i][p] - a_zp) * (b[p][j] - b_zp)      (s32)
//
// a is u8 or s8 [M, K], b s8 [K, N], both row-major; the zero points are per tensor. Both
// operands are packed first, less their zero points, as s16 (|value| <= 255): a row-major with
// K rounded up to even, b in panels of 16 columns holding K pairs interleaved, so that one
// vpmaddwd (s16 x s16, adjacent products summed into s32) takes two K steps of 8 columns, each
// exact. The result is bit-identical to the reference kernels' for K < kIGemmMaxK (no s32 sum
// can overflow), on every level (isa.h): portable, AVX2 (4 rows x 16 columns of s32 sums in
// registers, VPMADDWD) and AVX-512 (the GEMV 32 columns wide; VNNI's VPDPWSSD where the CPU has
// it). Internal to the kernels library (kernels/dnnl/quant.cc runs it).
#ifndef DYNVM_KERNELS_CPU_IGEMM_H_
#define DYNVM_KERNELS_CPU_IGEMM_H_

#include <cstddef>
#include <cstdint>

namespace dynvm::cpu {

// |(a - a_zp)(b - b_zp)| <= 255 * 255 per term: K below this keeps every s32 sum exact.
inline constexpr int64_t kIGemmMaxK = (int64_t{1} << 31) / (255 * 255);

// Columns per packed b panel (the micro-kernel's width).
inline constexpr int64_t kIGemmPanel = 16;

// Which implementation runs at the active level: "avx512_vnni", "avx512", "avx2" or "portable".
const char* IGemmPath();

// Bytes of the packed operands.
size_t IGemmPackedABytes(int64_t m, int64_t k);
size_t IGemmPackedBBytes(int64_t k, int64_t n);
// Number of b panels (ceil(n / kIGemmPanel)): the unit IGemmCompute's column ranges count in.
inline int64_t IGemmPanels(int64_t n) { return (n + kIGemmPanel - 1) / kIGemmPanel; }

// Packs rows [i0, i1) of a (u8 when a_u8, else s8; row i at a + i * lda) less a_zp into
// `packed` (IGemmPackedABytes(m, k) bytes, 2-byte aligned).
void IGemmPackA(int64_t k, const void* a, bool a_u8, int64_t lda, int32_t a_zp, int64_t i0,
                int64_t i1, int16_t* packed);
// Packs panels [p0, p1) of b (s8 [K, N], row p at b + p * ldb) less b_zp into `packed`
// (IGemmPackedBBytes(k, n) bytes, 2-byte aligned); columns past n hold 0. The layout is the same
// on every level.
void IGemmPackB(int64_t k, int64_t n, const int8_t* b, int64_t ldb, int32_t b_zp, int64_t p0,
                int64_t p1, int16_t* packed);

// c rows [i0, i1) x the columns of panels [p0, p1) (clipped to n) from the packed operands of an
// [m, k] x [k, n] product. Requires k < kIGemmMaxK.
void IGemmCompute(int64_t k, int64_t n, const int16_t* packed_a, const int16_t* packed_b,
                  int64_t i0, int64_t i1, int64_t p0, int64_t p1, int32_t* c, int64_t ldc);

// The one-row product (M = 1) straight from b, no packing: c[j] = sum_p packed_a[p] *
// (b[p * ldb + j] - b_zp) for j in [j0, j1), packed_a one row packed by IGemmPackA. The vector
// levels widen two rows of b at a time and interleave them in registers for VPMADDWD.
void IGemv(int64_t k, const int16_t* packed_a, const int8_t* b, int64_t ldb, int32_t b_zp,
           int64_t j0, int64_t j1, int32_t* c);

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_IGEMM_H_
