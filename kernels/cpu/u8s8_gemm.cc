// The u8 x s8 GEMM on packed b (u8s8_gemm.h): a scalar loop on every level, VPDPBUSD tiles of
// up to 6 rows x 4 panels (64 columns) at avx512_vnni.
#include "kernels/cpu/u8s8_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu {
namespace {

constexpr int64_t kGroup = 4;                         // K rows per VPDPBUSD
constexpr int64_t kGroupBytes = kGroup * kU8S8Panel;  // 64

inline int64_t Groups(int64_t k) { return (k + kGroup - 1) / kGroup; }

void GemmScalar(int64_t k, int64_t n, const uint8_t* a, int64_t lda, const int8_t* packed_b,
                int64_t i0, int64_t i1, int64_t p0, int64_t p1, int32_t* c, int64_t ldc) {
  const int64_t groups = Groups(k);
  for (int64_t i = i0; i < i1; ++i) {
    const uint8_t* ar = a + i * lda;
    for (int64_t p = p0; p < p1; ++p) {
      const int8_t* panel = packed_b + p * groups * kGroupBytes;
      const int64_t cols = std::min(kU8S8Panel, n - p * kU8S8Panel);
      for (int64_t j = 0; j < cols; ++j) {
        int32_t sum = 0;
        for (int64_t q = 0; q < k; ++q) {
          sum += static_cast<int32_t>(ar[q]) *
                 panel[(q / kGroup) * kGroupBytes + j * kGroup + q % kGroup];
        }
        c[i * ldc + p * kU8S8Panel + j] = sum;
      }
    }
  }
}

// The scaled GEMM on any level: each row's sums into a scratch row, then ScaleAccRow.
void GemmScaledScalar(int64_t k, int64_t n, const uint8_t* a, int64_t lda, const int8_t* packed_b,
                      int64_t i0, int64_t i1, int64_t p0, int64_t p1, const U8S8Scale& e) {
  const int64_t j0 = p0 * kU8S8Panel, j1 = std::min(n, p1 * kU8S8Panel);
  if (j0 >= j1) return;
  std::vector<int32_t> row(static_cast<size_t>(n));
  for (int64_t i = i0; i < i1; ++i) {
    GemmScalar(k, n, a, lda, packed_b, i, i + 1, p0, p1, row.data() - i * n, n);
    ScaleAccRow(j1 - j0, row.data() + j0, e.col != nullptr ? e.col + j0 : nullptr,
                e.zc != nullptr ? e.zc + j0 : nullptr, e.zc != nullptr ? e.rs[i] : 0, e.scale + j0,
                e.bias != nullptr ? e.bias + j0 : nullptr, e.y + i * e.ldy + j0);
  }
}

#if DYNVM_CPU_X86

// c += the four u8 x s8 products of each lane of a (u8) and b (s8), summed (VPDPBUSD). Inline
// assembly rather than the intrinsic: with the intrinsic GCC 12 copies each loop-carried
// accumulator through another register (and the stack, at 6 x 4) on every step.
DYNVM_AVX512_VNNI DYNVM_ALWAYS_INLINE void DotU8S8(__m512i& c, __m512i a, __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(c) : "v"(a), "v"(b));
}

// GCC 12's AVX-512 headers make an undefined vector for the unused source of their masked
// builtins, which -W(maybe-)uninitialized reports at every use (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// acc (one row's s32 sums of columns j.., `mask` of them) through the epilogue into y (see
// U8S8Scale): v = acc + col - zc * rs wrapping, f32(v) * scale, + bias, each op rounded alone
// (the _round_ intrinsics: never contracted into a fused multiply-add).
DYNVM_AVX512_VNNI DYNVM_ALWAYS_INLINE void ScaleStore(__m512i acc, const U8S8Scale& e, int64_t row,
                                                      int64_t j, __mmask16 mask) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  if (e.col != nullptr) acc = _mm512_add_epi32(acc, _mm512_maskz_loadu_epi32(mask, e.col + j));
  if (e.zc != nullptr) {
    const __m512i zc = _mm512_maskz_loadu_epi32(mask, e.zc + j);
    acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(zc, _mm512_set1_epi32(e.rs[row])));
  }
  __m512 y = _mm512_mul_round_ps(_mm512_cvtepi32_ps(acc), _mm512_maskz_loadu_ps(mask, e.scale + j),
                                 kRound);
  if (e.bias != nullptr)
    y = _mm512_add_round_ps(y, _mm512_maskz_loadu_ps(mask, e.bias + j), kRound);
  _mm512_mask_storeu_ps(e.y + row * e.ldy + j, mask, y);
}

// R rows x P panels from row i and panel p. Per group of 4 K rows: P 64-byte blocks of b, then
// each row's 4 bytes of a broadcast in turn: R * P sums, P blocks and one broadcast live (29 of
// the 32 registers at 6 x 4). With kScaled the sums go through e, not into c.
template <int R, int P, bool kScaled = false>
DYNVM_AVX512_VNNI void Tile(int64_t k, int64_t n, const uint8_t* a, int64_t lda,
                            const int8_t* packed_b, int64_t i, int64_t p, int32_t* c, int64_t ldc,
                            const U8S8Scale* e = nullptr) {
  const int64_t groups = Groups(k);
  const int64_t panel_stride = groups * kGroupBytes;
  __m512i acc[R][P];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) acc[r][q] = _mm512_setzero_si512();
  }
  const int8_t* b = packed_b + p * panel_stride;
  const uint8_t* a0 = a + i * lda;
  for (int64_t g = 0; g < groups; ++g) {
    __m512i bv[P];
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) bv[q] = _mm512_loadu_si512(b + q * panel_stride + g * kGroupBytes);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      int32_t v;
      std::memcpy(&v, a0 + r * lda + g * kGroup, sizeof(v));
      const __m512i av = _mm512_set1_epi32(v);
#pragma GCC unroll 4
      for (int q = 0; q < P; ++q) DotU8S8(acc[r][q], av, bv[q]);
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < P; ++q) {
    const int64_t j = (p + q) * kU8S8Panel;
    const int64_t cols = std::min(kU8S8Panel, n - j);
    const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      if constexpr (kScaled) {
        ScaleStore(acc[r][q], *e, i + r, j, mask);
      } else {
        _mm512_mask_storeu_epi32(c + (i + r) * ldc + j, mask, acc[r][q]);
      }
    }
  }
}

template <int R, bool kScaled>
DYNVM_AVX512_VNNI void Row(int64_t k, int64_t n, const uint8_t* a, int64_t lda,
                           const int8_t* packed_b, int64_t i, int64_t p, int64_t panels, int32_t* c,
                           int64_t ldc, const U8S8Scale* e) {
  switch (panels) {
    case 1:
      return Tile<R, 1, kScaled>(k, n, a, lda, packed_b, i, p, c, ldc, e);
    case 2:
      return Tile<R, 2, kScaled>(k, n, a, lda, packed_b, i, p, c, ldc, e);
    case 3:
      return Tile<R, 3, kScaled>(k, n, a, lda, packed_b, i, p, c, ldc, e);
    default:
      return Tile<R, 4, kScaled>(k, n, a, lda, packed_b, i, p, c, ldc, e);
  }
}

// Panel blocks of 4 outside (each block's packed b stays in L2 over the rows), row blocks of 6
// inside.
template <bool kScaled>
DYNVM_AVX512_VNNI void GemmVnniImpl(int64_t k, int64_t n, const uint8_t* a, int64_t lda,
                                    const int8_t* packed_b, int64_t i0, int64_t i1, int64_t p0,
                                    int64_t p1, int32_t* c, int64_t ldc, const U8S8Scale* e) {
  constexpr int64_t kRows = 6, kPanels = 4;
  for (int64_t p = p0; p < p1; p += kPanels) {
    const int64_t np = std::min(kPanels, p1 - p);
    for (int64_t i = i0; i < i1; i += kRows) {
      switch (std::min(kRows, i1 - i)) {
        case 1:
          Row<1, kScaled>(k, n, a, lda, packed_b, i, p, np, c, ldc, e);
          break;
        case 2:
          Row<2, kScaled>(k, n, a, lda, packed_b, i, p, np, c, ldc, e);
          break;
        case 3:
          Row<3, kScaled>(k, n, a, lda, packed_b, i, p, np, c, ldc, e);
          break;
        case 4:
          Row<4, kScaled>(k, n, a, lda, packed_b, i, p, np, c, ldc, e);
          break;
        case 5:
          Row<5, kScaled>(k, n, a, lda, packed_b, i, p, np, c, ldc, e);
          break;
        default:
          Row<6, kScaled>(k, n, a, lda, packed_b, i, p, np, c, ldc, e);
      }
    }
  }
}

DYNVM_AVX512_VNNI void GemmVnni(int64_t k, int64_t n, const uint8_t* a, int64_t lda,
                                const int8_t* packed_b, int64_t i0, int64_t i1, int64_t p0,
                                int64_t p1, int32_t* c, int64_t ldc) {
  GemmVnniImpl<false>(k, n, a, lda, packed_b, i0, i1, p0, p1, c, ldc, nullptr);
}

DYNVM_AVX512_VNNI void GemmScaledVnni(int64_t k, int64_t n, const uint8_t* a, int64_t lda,
                                      const int8_t* packed_b, int64_t i0, int64_t i1, int64_t p0,
                                      int64_t p1, const U8S8Scale& e) {
  GemmVnniImpl<true>(k, n, a, lda, packed_b, i0, i1, p0, p1, nullptr, 0, &e);
}

#pragma GCC diagnostic pop

#endif  // DYNVM_CPU_X86

}  // namespace

namespace internal {

void FillU8S8Gemm(Isa isa, Dispatch* d) {
  d->u8s8_gemm = &GemmScalar;
  d->u8s8_gemm_scaled = &GemmScaledScalar;
  d->u8s8_gemm_fast = false;
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx512Vnni) {
    d->u8s8_gemm = &GemmVnni;
    d->u8s8_gemm_scaled = &GemmScaledVnni;
    d->u8s8_gemm_fast = true;
  }
#endif
}

}  // namespace internal

size_t U8S8PackedBBytes(int64_t k, int64_t n) {
  return static_cast<size_t>(U8S8Panels(n) * Groups(k) * kGroupBytes);
}

void U8S8PackB(int64_t k, int64_t n, const void* b, bool b_u8, int64_t ldb, int8_t* packed,
               int32_t* col_sums) {
  const int64_t groups = Groups(k);
  std::memset(packed, 0, U8S8PackedBBytes(k, n));
  std::fill(col_sums, col_sums + n, 0);
  for (int64_t q = 0; q < k; ++q) {
    for (int64_t j = 0; j < n; ++j) {
      const int32_t v =
          b_u8 ? static_cast<int32_t>(static_cast<const uint8_t*>(b)[q * ldb + j]) - 128
               : static_cast<const int8_t*>(b)[q * ldb + j];
      const int64_t p = j / kU8S8Panel;
      packed[(p * groups + q / kGroup) * kGroupBytes + (j % kU8S8Panel) * kGroup + q % kGroup] =
          static_cast<int8_t>(v);
      col_sums[j] += v;
    }
  }
}

bool U8S8GemmFast() { return internal::Table().u8s8_gemm_fast; }

void U8S8Gemm(int64_t k, int64_t n, const uint8_t* a, int64_t lda, const int8_t* packed_b,
              int64_t i0, int64_t i1, int64_t p0, int64_t p1, int32_t* c, int64_t ldc) {
  internal::Table().u8s8_gemm(k, n, a, lda, packed_b, i0, i1, p0, p1, c, ldc);
}

void U8S8GemmScaled(int64_t k, int64_t n, const uint8_t* a, int64_t lda, const int8_t* packed_b,
                    int64_t i0, int64_t i1, int64_t p0, int64_t p1, const U8S8Scale& e) {
  internal::Table().u8s8_gemm_scaled(k, n, a, lda, packed_b, i0, i1, p0, p1, e);
}

}  // namespace dynvm::cpu
