// The exact integer GEMM (igemm.h). Implementations (explicit intrinsics: VPMADDWD, or VNNI's
// VPDPWSSD, on the packed s16 operands): portable, AVX2, AVX-512, AVX-512 VNNI; every one gives
// the exact sums. Tuning notes: at M = 1 oneDNN's integer GEMM packs b on every call, which made
// it slower than f32 sgemm there, so the GEMV streams b once, two rows at a time widened to s16
// and interleaved in registers. On the AVX2 EPYC (no VNNI) QLinearMatMul on this kernel ran
// 12x (M = 1), 1.6-2.2x (M = 16) and 1.6-2.9x (M = 64) the speed of the f32 MatMul
// (docs/results/int8avx2-quant-benchmark-2026-11-28.txt): VPMADDWD does 16 products per
// instruction, as many as an f32 FMA, so without VNNI an int8 product gains memory, not
// arithmetic.
#include "kernels/cpu/igemm.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu {
namespace {

inline int64_t EvenK(int64_t k) { return (k + 1) & ~int64_t{1}; }

// ---- scalar ----

void ComputeScalar(int64_t k, int64_t n, const int16_t* pa, const int16_t* pb, int64_t i0,
                   int64_t i1, int64_t p0, int64_t p1, int32_t* c, int64_t ldc) {
  const int64_t kp = EvenK(k), pairs = kp / 2;
  for (int64_t p = p0; p < p1; ++p) {
    const int16_t* panel = pb + p * kp * kIGemmPanel;
    const int64_t j0 = p * kIGemmPanel, cols = std::min(kIGemmPanel, n - j0);
    for (int64_t i = i0; i < i1; ++i) {
      const int16_t* row = pa + i * kp;
      for (int64_t jj = 0; jj < cols; ++jj) {
        int32_t s = 0;
        for (int64_t q = 0; q < pairs; ++q) {
          const int16_t* bq = panel + q * 2 * kIGemmPanel + 2 * jj;
          s += int32_t{row[2 * q]} * bq[0] + int32_t{row[2 * q + 1]} * bq[1];
        }
        c[i * ldc + j0 + jj] = s;
      }
    }
  }
}

void GemvScalar(int64_t k, const int16_t* pa, const int8_t* b, int64_t ldb, int32_t zb, int64_t j0,
                int64_t j1, int32_t* c) {
  for (int64_t j = j0; j < j1; ++j) c[j] = 0;
  for (int64_t p = 0; p < k; ++p) {
    const int32_t ap = pa[p];
    const int8_t* row = b + p * ldb;
    for (int64_t j = j0; j < j1; ++j) c[j] += ap * (int32_t{row[j]} - zb);
  }
}

template <typename T>
void PackRows(int64_t k, const T* a, int64_t lda, int32_t zp, int64_t i0, int64_t i1,
              int16_t* packed) {
  const int64_t kp = EvenK(k);
  for (int64_t i = i0; i < i1; ++i) {
    const T* src = a + i * lda;
    int16_t* dst = packed + i * kp;
    for (int64_t p = 0; p < k; ++p) dst[p] = static_cast<int16_t>(int32_t{src[p]} - zp);
    if (kp != k) dst[k] = 0;
  }
}

// Panel p of b in the pairs layout (rows past k and columns past n hold 0), one value at a time.
void PackPanelScalar(int64_t k, int64_t n, const int8_t* b, int64_t ldb, int32_t b_zp, int64_t p,
                     int16_t* panel) {
  const int64_t kp = EvenK(k);
  const int64_t j0 = p * kIGemmPanel, cols = std::min(kIGemmPanel, n - j0);
  for (int64_t r = 0; r < kp; ++r) {
    // Row r lands at the even (r even) or odd slot of each column's pair.
    int16_t* dst = panel + (r / 2) * 2 * kIGemmPanel + (r & 1);
    if (r >= k) {
      for (int64_t jj = 0; jj < kIGemmPanel; ++jj) dst[2 * jj] = 0;
      continue;
    }
    const int8_t* src = b + r * ldb + j0;
    for (int64_t jj = 0; jj < cols; ++jj) {
      dst[2 * jj] = static_cast<int16_t>(int32_t{src[jj]} - b_zp);
    }
    for (int64_t jj = cols; jj < kIGemmPanel; ++jj) dst[2 * jj] = 0;
  }
}

void PackBPortable(int64_t k, int64_t n, const int8_t* b, int64_t ldb, int32_t b_zp, int64_t p0,
                   int64_t p1, int16_t* packed) {
  const int64_t kp = EvenK(k);
  for (int64_t p = p0; p < p1; ++p) {
    PackPanelScalar(k, n, b, ldb, b_zp, p, packed + p * kp * kIGemmPanel);
  }
}

#if DYNVM_CPU_X86

// ---- AVX2 ----

// kR rows from i x one panel: kR x 16 s32 sums in 2 * kR registers; each K pair costs two
// panel loads, kR broadcasts and 2 * kR vpmaddwd + vpaddd.
template <int kR>
DYNVM_AVX2 void BlockAvx2(int64_t pairs, const int16_t* pa, int64_t kp, const int16_t* panel,
                          int64_t cols, int32_t* c, int64_t ldc) {
  __m256i acc[kR][2];
  for (int r = 0; r < kR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  for (int64_t q = 0; q < pairs; ++q) {
    const __m256i b0 =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + q * 2 * kIGemmPanel));
    const __m256i b1 =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + q * 2 * kIGemmPanel + 16));
    for (int r = 0; r < kR; ++r) {
      int32_t pair;
      std::memcpy(&pair, pa + r * kp + 2 * q, sizeof(pair));
      const __m256i av = _mm256_set1_epi32(pair);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(av, b0));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(av, b1));
    }
  }
  for (int r = 0; r < kR; ++r) {
    int32_t* dst = c + r * ldc;
    if (cols == kIGemmPanel) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), acc[r][0]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 8), acc[r][1]);
    } else {
      alignas(32) int32_t tmp[kIGemmPanel];
      _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), acc[r][0]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(tmp + 8), acc[r][1]);
      std::memcpy(dst, tmp, static_cast<size_t>(cols) * sizeof(int32_t));
    }
  }
}

DYNVM_AVX2 void ComputeAvx2(int64_t k, int64_t n, const int16_t* pa, const int16_t* pb, int64_t i0,
                            int64_t i1, int64_t p0, int64_t p1, int32_t* c, int64_t ldc) {
  const int64_t kp = EvenK(k), pairs = kp / 2;
  for (int64_t p = p0; p < p1; ++p) {
    const int16_t* panel = pb + p * kp * kIGemmPanel;
    const int64_t j0 = p * kIGemmPanel, cols = std::min(kIGemmPanel, n - j0);
    int64_t i = i0;
    for (; i + 4 <= i1; i += 4)
      BlockAvx2<4>(pairs, pa + i * kp, kp, panel, cols, c + i * ldc + j0, ldc);
    switch (i1 - i) {
      case 3:
        BlockAvx2<3>(pairs, pa + i * kp, kp, panel, cols, c + i * ldc + j0, ldc);
        break;
      case 2:
        BlockAvx2<2>(pairs, pa + i * kp, kp, panel, cols, c + i * ldc + j0, ldc);
        break;
      case 1:
        BlockAvx2<1>(pairs, pa + i * kp, kp, panel, cols, c + i * ldc + j0, ldc);
        break;
      default:
        break;
    }
  }
}

DYNVM_AVX2 inline __m256i WidenRowAvx2(int64_t k, const int8_t* b, int64_t ldb, int64_t j0,
                                       int64_t r, __m256i zp) {
  if (r >= k) return _mm256_setzero_si256();
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + r * ldb + j0));
  return _mm256_sub_epi16(_mm256_cvtepi8_epi16(v), zp);
}

// Full panel p of b (rows past k read as 0): two rows' 16 s8 values widened to s16, less the
// zero point, and interleaved into the pairs layout.
DYNVM_AVX2 void PackPanelAvx2(int64_t k, const int8_t* b, int64_t ldb, int32_t b_zp, int64_t j0,
                              int16_t* panel) {
  const __m256i zp = _mm256_set1_epi16(static_cast<int16_t>(b_zp));
  for (int64_t q = 0; q < (k + 1) / 2; ++q) {
    const __m256i x0 = WidenRowAvx2(k, b, ldb, j0, 2 * q, zp);
    const __m256i x1 = WidenRowAvx2(k, b, ldb, j0, 2 * q + 1, zp);
    const __m256i lo = _mm256_unpacklo_epi16(x0, x1), hi = _mm256_unpackhi_epi16(x0, x1);
    __m256i* dst = reinterpret_cast<__m256i*>(panel + q * 2 * kIGemmPanel);
    _mm256_storeu_si256(dst, _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256(dst + 1, _mm256_permute2x128_si256(lo, hi, 0x31));
  }
}

// kB blocks of 16 columns from j of the one-row product: rows 2q and 2q + 1 of b widened to
// s16 (less zb) and interleaved in registers (unpacklo/hi: columns {0-3, 8-11} and {4-7, 12-15}
// of each block), summed against the pair (pa[2q], pa[2q + 1]); put back in order at the end.
template <int kB>
DYNVM_AVX2 void GemvBlockAvx2(int64_t k, const int16_t* pa, const int8_t* b, int64_t ldb,
                              int32_t zb, int64_t j, int32_t* c) {
  const __m256i zp = _mm256_set1_epi16(static_cast<int16_t>(zb));
  __m256i lo[kB], hi[kB];
  for (int u = 0; u < kB; ++u) lo[u] = hi[u] = _mm256_setzero_si256();
  for (int64_t q = 0; q < (k + 1) / 2; ++q) {
    int32_t pair;
    std::memcpy(&pair, pa + 2 * q, sizeof(pair));
    const __m256i av = _mm256_set1_epi32(pair);
    for (int u = 0; u < kB; ++u) {
      const __m256i x0 = WidenRowAvx2(k, b, ldb, j + 16 * u, 2 * q, zp);
      const __m256i x1 = WidenRowAvx2(k, b, ldb, j + 16 * u, 2 * q + 1, zp);
      lo[u] = _mm256_add_epi32(lo[u], _mm256_madd_epi16(_mm256_unpacklo_epi16(x0, x1), av));
      hi[u] = _mm256_add_epi32(hi[u], _mm256_madd_epi16(_mm256_unpackhi_epi16(x0, x1), av));
    }
  }
  for (int u = 0; u < kB; ++u) {
    __m256i* dst = reinterpret_cast<__m256i*>(c + j + 16 * u);
    _mm256_storeu_si256(dst, _mm256_permute2x128_si256(lo[u], hi[u], 0x20));
    _mm256_storeu_si256(dst + 1, _mm256_permute2x128_si256(lo[u], hi[u], 0x31));
  }
}

DYNVM_AVX2 void GemvAvx2(int64_t k, const int16_t* pa, const int8_t* b, int64_t ldb, int32_t zb,
                         int64_t j0, int64_t j1, int32_t* c) {
  int64_t j = j0;
  for (; j + 64 <= j1; j += 64) GemvBlockAvx2<4>(k, pa, b, ldb, zb, j, c);
  for (; j + 16 <= j1; j += 16) GemvBlockAvx2<1>(k, pa, b, ldb, zb, j, c);
  GemvScalar(k, pa, b, ldb, zb, j, j1, c);
}

DYNVM_AVX2 void PackBAvx2(int64_t k, int64_t n, const int8_t* b, int64_t ldb, int32_t b_zp,
                          int64_t p0, int64_t p1, int16_t* packed) {
  const int64_t kp = EvenK(k);
  for (int64_t p = p0; p < p1; ++p) {
    int16_t* panel = packed + p * kp * kIGemmPanel;
    if (n - p * kIGemmPanel >= kIGemmPanel) {
      PackPanelAvx2(k, b, ldb, b_zp, p * kIGemmPanel, panel);
    } else {
      PackPanelScalar(k, n, b, ldb, b_zp, p, panel);
    }
  }
}

// ---- AVX-512 and AVX-512 VNNI ----

#define DYNVM_IGEMM_ATTR DYNVM_AVX512
#define DYNVM_IGEMM_NAME(x) x##Avx512
#define DYNVM_IGEMM_MADD(acc, a, b) _mm512_add_epi32(acc, _mm512_madd_epi16(a, b))
#include "kernels/cpu/igemm_avx512.inc"  // NOLINT(build/include)
#undef DYNVM_IGEMM_ATTR
#undef DYNVM_IGEMM_NAME
#undef DYNVM_IGEMM_MADD

#define DYNVM_IGEMM_ATTR DYNVM_AVX512_VNNI
#define DYNVM_IGEMM_NAME(x) x##Vnni
#define DYNVM_IGEMM_MADD(acc, a, b) _mm512_dpwssd_epi32(acc, a, b)
#include "kernels/cpu/igemm_avx512.inc"  // NOLINT(build/include)
#undef DYNVM_IGEMM_ATTR
#undef DYNVM_IGEMM_NAME
#undef DYNVM_IGEMM_MADD

#endif  // DYNVM_CPU_X86

}  // namespace

namespace internal {

void FillIGemm(Isa isa, Dispatch* d) {
  d->igemm_pack_b = &PackBPortable;
  d->igemm_compute = &ComputeScalar;
  d->igemv = &GemvScalar;
  d->igemm_path = "portable";
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) {
    d->igemm_pack_b = &PackBAvx2;
    d->igemm_compute = &ComputeAvx2;
    d->igemv = &GemvAvx2;
    d->igemm_path = "avx2";
  }
  if (isa >= Isa::kAvx512) {
    d->igemm_compute = &ComputeAvx512;
    d->igemv = &GemvAvx512;
    d->igemm_path = "avx512";
  }
  if (isa >= Isa::kAvx512Vnni) {
    d->igemm_compute = &ComputeVnni;
    d->igemv = &GemvVnni;
    d->igemm_path = "avx512_vnni";
  }
#endif
}

}  // namespace internal

const char* IGemmPath() { return internal::Table().igemm_path; }

size_t IGemmPackedABytes(int64_t m, int64_t k) {
  return static_cast<size_t>(m * EvenK(k)) * sizeof(int16_t);
}

size_t IGemmPackedBBytes(int64_t k, int64_t n) {
  return static_cast<size_t>(IGemmPanels(n) * kIGemmPanel * EvenK(k)) * sizeof(int16_t);
}

void IGemmPackA(int64_t k, const void* a, bool a_u8, int64_t lda, int32_t a_zp, int64_t i0,
                int64_t i1, int16_t* packed) {
  if (a_u8) {
    PackRows(k, static_cast<const uint8_t*>(a), lda, a_zp, i0, i1, packed);
  } else {
    PackRows(k, static_cast<const int8_t*>(a), lda, a_zp, i0, i1, packed);
  }
}

void IGemmPackB(int64_t k, int64_t n, const int8_t* b, int64_t ldb, int32_t b_zp, int64_t p0,
                int64_t p1, int16_t* packed) {
  internal::Table().igemm_pack_b(k, n, b, ldb, b_zp, p0, p1, packed);
}

void IGemmCompute(int64_t k, int64_t n, const int16_t* packed_a, const int16_t* packed_b,
                  int64_t i0, int64_t i1, int64_t p0, int64_t p1, int32_t* c, int64_t ldc) {
  if (i1 <= i0 || p1 <= p0) return;
  internal::Table().igemm_compute(k, n, packed_a, packed_b, i0, i1, p0, p1, c, ldc);
}

void IGemv(int64_t k, const int16_t* packed_a, const int8_t* b, int64_t ldb, int32_t b_zp,
           int64_t j0, int64_t j1, int32_t* c) {
  if (j1 <= j0) return;
  internal::Table().igemv(k, packed_a, b, ldb, b_zp, j0, j1, c);
}

}  // namespace dynvm::cpu
