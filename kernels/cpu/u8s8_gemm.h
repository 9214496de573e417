// An exact u8 x s8 integer GEMM on packed constant weights (docs/kernels.md, "Quantized
// operators"): the product of DynamicQuantizeMatMul (kernels/dnnl/quant.cc) when its B is a
// constant of the executable, packed once.
//
//   c[i * ldc + j] = sum_p a[i][p] * b[p][j]          (s32; no zero points: the caller's epilogue
//                                                      takes them out with the row and column sums)
//
// a u8 [M, K] row-major; b s8 [K, N] (or u8, shifted to s8 by 128 while packing), packed in
// panels of 16 columns, each panel in groups of 4 K rows: 64 bytes [column 0's 4 values, column
// 1's, ...], K rounded up to 4 and N to 16 with zeros. That is the operand of AVX-512 VNNI's
// VPDPBUSD (four u8 x s8 products summed into each s32 lane, with no intermediate saturation,
// unlike VPMADDUBSW): the avx512_vnni level keeps up to 6 rows x 4 panels of sums in registers.
// The other levels run a scalar loop over the same layout (exact, slow: callers take the
// unpacked GEMMs there, U8S8GemmFast() says which). Every sum is exact for K < kU8S8MaxK.
#ifndef DYNVM_KERNELS_CPU_U8S8_GEMM_H_
#define DYNVM_KERNELS_CPU_U8S8_GEMM_H_

#include <cstddef>
#include <cstdint>

namespace dynvm::cpu {

// |a * b| <= 255 * 128 per term.
inline constexpr int64_t kU8S8MaxK = (int64_t{1} << 31) / (255 * 128);
inline constexpr int64_t kU8S8Panel = 16;

inline int64_t U8S8Panels(int64_t n) { return (n + kU8S8Panel - 1) / kU8S8Panel; }
// K rounded up to a multiple of 4: the row stride (and zero padding) U8S8Gemm's a needs.
inline int64_t U8S8PaddedK(int64_t k) { return (k + 3) / 4 * 4; }
// Bytes of packed b.
size_t U8S8PackedBBytes(int64_t k, int64_t n);

// Packs b ([K, N], row p at b + p * ldb; u8 when b_u8, stored less 128) into `packed`
// (U8S8PackedBBytes) and writes col_sums[j] = sum_p packed b[p][j] for j < n.
void U8S8PackB(int64_t k, int64_t n, const void* b, bool b_u8, int64_t ldb, int8_t* packed,
               int32_t* col_sums);

// Whether the active level has the vector implementation (avx512_vnni).
bool U8S8GemmFast();

// c rows [i0, i1) x the columns of panels [p0, p1) (clipped to n) of a [m, k] (row i at
// a + i * lda) times packed b. Each row of a is read in groups of 4 bytes: lda >= U8S8PaddedK(k)
// and the bytes from k to U8S8PaddedK(k) must be zeros. Requires k < kU8S8MaxK.
void U8S8Gemm(int64_t k, int64_t n, const uint8_t* a, int64_t lda, const int8_t* packed_b,
              int64_t i0, int64_t i1, int64_t p0, int64_t p1, int32_t* c, int64_t ldc);

// The epilogue U8S8GemmScaled applies to each sum instead of storing it: with v the s32 sum
// plus col[j] less zc[j] * rs[i] (each term skipped where its pointer is null; s32 arithmetic
// wrapping as ScaleAccRow's),
//   y[i * ldy + j] = f32(v) * scale[j]             (rounded to f32)
//   y[i * ldy + j] += bias[j]                      (rounded again; no fused multiply-add)
// the bits of U8S8Gemm followed by ScaleAccRow (quantize.h) on each row, without writing the
// s32 sums to memory and reading them back.
struct U8S8Scale {
  const int32_t* col = nullptr;  // [n]
  const int32_t* zc = nullptr;   // [n], with rs
  const int32_t* rs = nullptr;   // [m]
  const float* scale = nullptr;  // [n], required
  const float* bias = nullptr;   // [n]
  float* y = nullptr;
  int64_t ldy = 0;
};

// U8S8Gemm's rows [i0, i1) x panels [p0, p1), each sum through `e` into e.y.
void U8S8GemmScaled(int64_t k, int64_t n, const uint8_t* a, int64_t lda, const int8_t* packed_b,
                    int64_t i0, int64_t i1, int64_t p0, int64_t p1, const U8S8Scale& e);

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_U8S8_GEMM_H_
