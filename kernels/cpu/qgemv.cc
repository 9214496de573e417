// Weight-only quantized GEMV / small-M products (qgemv.h). Tuning notes:
//
// AVX-512 and portable: each weight element is widened to f32 in registers (int8: sign-extend
// and convert; bf16: shift into the upper half) and multiplied into f32 accumulators; int8 rows
// are scaled once after the sum. Four output rows run side by side (four independent FMA
// chains); the activation rows stay in L1. With one activation row (the decode GEMV) AVX-512
// runs sixteen output rows side by side and sums them with one transpose-and-add tree. Where
// the weights sit in L1/L2 (a tiny GPT's 16-64 KB products) the widening (a sign-extension on
// the shuffle port and a conversion per 16 weights) costs more than loading f32 from cache, so
// quantized weights pay only where a step reads weights larger than L2.
//
// AVX2+FMA: widening costs two or three instructions per 8 weights, more than the weights'
// bytes save once they are in cache, so neither type widens to f32. int8: each activation row
// is rounded once per call to int16 (qgemv.h's bound) and 16 weights at a time are
// sign-extended to int16 and multiplied into int32 pair sums (VPMADDWD: 16 multiply-adds in
// about three instructions; one per cycle is its ceiling, the same 16 multiply-adds per cycle
// as two FMAs). bf16: 16 weights are one 256-bit load of 8 32-bit pairs; the odd element of a
// pair is an f32 once the lower half is masked off, the even one once shifted up, and each
// activation row is split once per call into even and odd columns, so no weight is shuffled or
// widened. Eight output rows share each activation load (four with two activation rows, two
// with three or four), summed by one transpose-and-add tree, and each block prefetches the
// weight rows two blocks ahead (a decode step's rows come from L3 and are too short for the
// hardware prefetcher's streams to start). On the AVX2 EPYC the LSTM step's five weights took
// 105 us in f32, 46 us in int8 and 59 us in bf16 from L3
// (docs/results/qgemv-gemv-benchmark-2026-11-28.txt; now cpu_qgemv_benchmark).
//
// AVX-512 VNNI, int8: the AVX2 scheme at twice the width with the add fused: activations
// rounded to int16 as on AVX2, 32 weights per VPMOVSXBW, one VPDPWSSD per weight vector and
// activation row. On the Zen 4 EPYC (cpu_qgemv_benchmark, medians of 7, G multiply-adds/s) the
// LSTM step's weights from L3 ran 45 / 62 / 63 (1 / 2 / 4 rows) against 24 / 28 / 37 widened at
// the AVX-512 level and 42 / 44 / 40 on the AVX2 kernel (which beats widening on that CPU).
// AVX-512 BF16: each activation is split once per call into two bf16 halves (hi + lo, qgemv.h's
// bound) and 32 weights are one load, two VDPBF16PS (hi and lo) per activation row, no
// widening: 37 / 51 at 2 / 4 rows against 25 / 37 widened; one row stays widened (the split
// measured slower there: 16 against 18 in an earlier run). All levels' figures, from L3 and L2:
// docs/results/zen4-qgemv-levels-2026-11-29.txt.
// One activation row (the decode GEMV) at the VNNI level with K >= kVnniStreamColumns (1024)
// reads the weights from memory, and there the 16-row block (16 streams of one row each,
// prefetched two blocks ahead into L1, the 2048-column chunks outermost) streamed them at 14-16
// GB/s, 41-56% of the triad, on the 1.6 GB model's products at 1 thread: RowVnni reads the rows
// one after another (one sequential stream; the chunks inside the row, int32 lanes per chunk
// added in f32), four int32 chains, and prefetches 4 KiB ahead along that stream into L2
// (_MM_HINT_T1; into L1 the same distance ran 14-22 GB/s, 8-16 KiB ahead was slower still):
// 22-32 GB/s, 72-113% of the triad, 1.4-2.2x faster a call (cpu_q4gemv_benchmark,
// docs/results/int8-gemv-s7-2026-11-29.txt, A/B against the former kernel). Shorter rows (an
// LSTM step's, from L2/L3) keep the 16-row block: one reduction per row cost 45 -> 30 G
// multiply-adds/s there. Several activation rows are unchanged.
//
// Chosen by the dispatch table (isa.h): explicit intrinsics (the widening does not
// auto-vectorize).
#include "kernels/cpu/qgemv.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/target.h"

// GCC 12 warns about the undefined first operand its own masked-intrinsic headers pass.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace dynvm::cpu {
namespace {

inline float Bf16ToF32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline float Widen(int8_t v) { return static_cast<float>(v); }
inline float Widen(uint16_t v) { return Bf16ToF32(v); }

template <typename W>
void QGemvScalar(int64_t rows, int64_t k, const float* x, int64_t ldx, const W* w, int64_t ldw,
                 const float* scale, int64_t r0, int64_t r1, float beta, float* y, int64_t ldy) {
  for (int64_t j = r0; j < r1; ++j) {
    const W* wj = w + j * ldw;
    for (int64_t m = 0; m < rows; ++m) {
      const float* xm = x + m * ldx;
      float acc = 0.0f;
      for (int64_t i = 0; i < k; ++i) acc += xm[i] * Widen(wj[i]);
      if (scale != nullptr) acc *= scale[j];
      float& out = y[m * ldy + j];
      out = beta == 0.0f ? acc : beta * out + acc;
    }
  }
}

void QGemvI8Portable(int64_t rows, int64_t k, const float* x, int64_t ldx, const int8_t* w,
                     int64_t ldw, const float* scale, int64_t r0, int64_t r1, float beta, float* y,
                     int64_t ldy) {
  QGemvScalar(rows, k, x, ldx, w, ldw, scale, r0, r1, beta, y, ldy);
}

void QGemvBf16Portable(int64_t rows, int64_t k, const float* x, int64_t ldx, const uint16_t* w,
                       int64_t ldw, int64_t r0, int64_t r1, float beta, float* y, int64_t ldy) {
  QGemvScalar(rows, k, x, ldx, w, ldw, nullptr, r0, r1, beta, y, ldy);
}

#if DYNVM_CPU_X86

// ---- AVX-512 ----

DYNVM_AVX512 inline __m512 Load16(const int8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
DYNVM_AVX512 inline __m512 Load16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
DYNVM_AVX512 inline __m512 MaskLoad16(__mmask16 mk, const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mk, p)));
}
DYNVM_AVX512 inline __m512 MaskLoad16(__mmask16 mk, const uint16_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, p)), 16));
}

// kR output rows from j times kM activation rows: each weight vector is widened once and
// used for every activation row.
template <int kR, int kM, typename W>
DYNVM_AVX512 void BlockAvx512(int64_t k, const float* x, int64_t ldx, const W* w, int64_t ldw,
                              const float* scale, int64_t j, float beta, float* y, int64_t ldy) {
  const int64_t k16 = k & ~int64_t{15};
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - k16)) - 1u);
  __m512 acc[kM][kR];
  for (int m = 0; m < kM; ++m) {
    for (int r = 0; r < kR; ++r) acc[m][r] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < k16; i += 16) {
    __m512 wv[kR];
    for (int r = 0; r < kR; ++r) wv[r] = Load16(w + (j + r) * ldw + i);
    for (int m = 0; m < kM; ++m) {
      const __m512 xv = _mm512_loadu_ps(x + m * ldx + i);
      for (int r = 0; r < kR; ++r) acc[m][r] = _mm512_fmadd_ps(xv, wv[r], acc[m][r]);
    }
  }
  if (tail != 0) {
    __m512 wv[kR];
    for (int r = 0; r < kR; ++r) wv[r] = MaskLoad16(tail, w + (j + r) * ldw + k16);
    for (int m = 0; m < kM; ++m) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, x + m * ldx + k16);
      for (int r = 0; r < kR; ++r) acc[m][r] = _mm512_fmadd_ps(xv, wv[r], acc[m][r]);
    }
  }
  for (int m = 0; m < kM; ++m) {
    for (int r = 0; r < kR; ++r) {
      float s = _mm512_reduce_add_ps(acc[m][r]);
      if (scale != nullptr) s *= scale[j + r];
      float& out = y[m * ldy + j + r];
      out = beta == 0.0f ? s : beta * out + s;
    }
  }
}

// kR output rows from j, all activation rows (four at a time).
template <int kR, typename W>
DYNVM_AVX512 void RowsAvx512(int64_t rows, int64_t k, const float* x, int64_t ldx, const W* w,
                             int64_t ldw, const float* scale, int64_t j, float beta, float* y,
                             int64_t ldy) {
  int64_t m = 0;
  for (; m + 4 <= rows; m += 4) {
    BlockAvx512<kR, 4>(k, x + m * ldx, ldx, w, ldw, scale, j, beta, y + m * ldy, ldy);
  }
  switch (rows - m) {
    case 3:
      return BlockAvx512<kR, 3>(k, x + m * ldx, ldx, w, ldw, scale, j, beta, y + m * ldy, ldy);
    case 2:
      return BlockAvx512<kR, 2>(k, x + m * ldx, ldx, w, ldw, scale, j, beta, y + m * ldy, ldy);
    case 1:
      return BlockAvx512<kR, 1>(k, x + m * ldx, ldx, w, ldw, scale, j, beta, y + m * ldy, ldy);
    default:
      return;
  }
}

// Sums each of the 16 vectors a[0..15] into lane r of the result (a transpose-and-add tree:
// 15 adds for 16 rows instead of 16 full horizontal reductions).
DYNVM_AVX512 inline __m512 Sum16x16(const __m512* a) {
  __m512 x[8], v[4], z[2];
  for (int p = 0; p < 8; ++p) {  // per 128-bit lane: [a0 0+2, a1 0+2, a0 1+3, a1 1+3]
    x[p] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * p], a[2 * p + 1]),
                         _mm512_unpackhi_ps(a[2 * p], a[2 * p + 1]));
  }
  for (int p = 0; p < 4; ++p) {  // per 128-bit lane: a[4p..4p+3]'s quarter sums
    v[p] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * p], x[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(x[2 * p], x[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  for (int p = 0; p < 2; ++p) {  // 128-bit lanes: v[2p] halves, v[2p+1] halves
    z[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  return _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// One activation row (the decode GEMV), 16 output rows from j: 16 independent FMA chains (short
// K is not latency-bound) and one reduction tree for all 16 sums.
template <typename W>
DYNVM_AVX512 void Block16Avx512(int64_t k, const float* x, const W* w, int64_t ldw,
                                const float* scale, int64_t j, float beta, float* y) {
  const int64_t k16 = k & ~int64_t{15};
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - k16)) - 1u);
  __m512 acc[16];
  for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
  const W* wj = w + j * ldw;
  for (int64_t i = 0; i < k16; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    for (int r = 0; r < 16; ++r) acc[r] = _mm512_fmadd_ps(xv, Load16(wj + r * ldw + i), acc[r]);
  }
  if (tail != 0) {
    const __m512 xv = _mm512_maskz_loadu_ps(tail, x + k16);
    for (int r = 0; r < 16; ++r) {
      acc[r] = _mm512_fmadd_ps(xv, MaskLoad16(tail, wj + r * ldw + k16), acc[r]);
    }
  }
  __m512 s = Sum16x16(acc);
  if (scale != nullptr) s = _mm512_mul_ps(s, _mm512_loadu_ps(scale + j));
  if (beta != 0.0f) s = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(y + j), s);
  _mm512_storeu_ps(y + j, s);
}

template <typename W>
DYNVM_AVX512 void QGemvAvx512(int64_t rows, int64_t k, const float* x, int64_t ldx, const W* w,
                              int64_t ldw, const float* scale, int64_t r0, int64_t r1, float beta,
                              float* y, int64_t ldy) {
  int64_t j = r0;
  if (rows == 1) {
    for (; j + 16 <= r1; j += 16) Block16Avx512(k, x, w, ldw, scale, j, beta, y);
  }
  for (; j + 4 <= r1; j += 4) RowsAvx512<4>(rows, k, x, ldx, w, ldw, scale, j, beta, y, ldy);
  for (; j < r1; ++j) RowsAvx512<1>(rows, k, x, ldx, w, ldw, scale, j, beta, y, ldy);
}

// ---- AVX2 ----

DYNVM_AVX2 inline __m256 Load8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
[[maybe_unused]] DYNVM_AVX2 inline __m256 Load8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

DYNVM_AVX2 inline float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

template <int kR, typename W>
DYNVM_AVX2 void BlockAvx2(int64_t rows, int64_t k, const float* x, int64_t ldx, const W* w,
                          int64_t ldw, const float* scale, int64_t j, float beta, float* y,
                          int64_t ldy) {
  const int64_t k8 = k & ~int64_t{7};
  for (int64_t m = 0; m < rows; ++m) {
    const float* xm = x + m * ldx;
    __m256 acc[kR];
    for (int r = 0; r < kR; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < k8; i += 8) {
      const __m256 xv = _mm256_loadu_ps(xm + i);
      for (int r = 0; r < kR; ++r) {
        acc[r] = _mm256_fmadd_ps(xv, Load8(w + (j + r) * ldw + i), acc[r]);
      }
    }
    for (int r = 0; r < kR; ++r) {
      float s = Sum8(acc[r]);
      const W* wr = w + (j + r) * ldw;
      for (int64_t i = k8; i < k; ++i) s += xm[i] * Widen(wr[i]);
      if (scale != nullptr) s *= scale[j + r];
      float& out = y[m * ldy + j + r];
      out = beta == 0.0f ? s : beta * out + s;
    }
  }
}

// kR output rows from j widened to f32, every activation row: the int8 path for activation
// rows that cannot be rounded to int16 (NaN, infinity, or a largest magnitude below 2^-100).
template <typename W>
DYNVM_AVX2 void QGemvAvx2Widen(int64_t rows, int64_t k, const float* x, int64_t ldx, const W* w,
                               int64_t ldw, const float* scale, int64_t r0, int64_t r1, float beta,
                               float* y, int64_t ldy) {
  int64_t j = r0;
  for (; j + 4 <= r1; j += 4) BlockAvx2<4>(rows, k, x, ldx, w, ldw, scale, j, beta, y, ldy);
  for (; j < r1; ++j) BlockAvx2<1>(rows, k, x, ldx, w, ldw, scale, j, beta, y, ldy);
}

// Lane r of the result: the sum of a[r]'s lanes (a transpose-and-add tree).
DYNVM_AVX2 inline __m256 Sum8x8(const __m256* a) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Row blocks ahead whose weights a block prefetches (the rows of a decode step's weights run
// through L3, and each row is too short for the hardware prefetcher's streams to start).
#ifndef DYNVM_QGEMV_AHEAD
#define DYNVM_QGEMV_AHEAD 2
#endif
inline constexpr int64_t kAheadBlocks = DYNVM_QGEMV_AHEAD;

// Output rows per block for kM activation rows (kR * kM <= 8 accumulators, one Sum8x8).
constexpr int RowsPerBlock(int m) { return m == 1 ? 8 : m == 2 ? 4 : 2; }

// The kR x kM sums in `sums` (row-major [kM][kR]) times `mul[m] * scale[j + r]` (scale may be
// null) into y: y = b * y + s, y not read when b is 0.
template <int kR, int kM>
DYNVM_AVX2 void StoreBlock(const float* sums, const float* mul, const float* scale, int64_t j,
                           float b, float* y, int64_t ldy) {
  if constexpr (kR == 8 && kM == 1) {
    __m256 s = _mm256_mul_ps(_mm256_loadu_ps(sums), _mm256_set1_ps(mul[0]));
    if (scale != nullptr) s = _mm256_mul_ps(s, _mm256_loadu_ps(scale + j));
    if (b != 0.0f) s = _mm256_fmadd_ps(_mm256_set1_ps(b), _mm256_loadu_ps(y + j), s);
    _mm256_storeu_ps(y + j, s);
  } else {
    for (int m = 0; m < kM; ++m) {
      for (int r = 0; r < kR; ++r) {
        float s = sums[m * kR + r] * mul[m];
        if (scale != nullptr) s *= scale[j + r];
        float& out = y[m * ldy + j + r];
        out = b == 0.0f ? s : b * out + s;
      }
    }
  }
}

// ---- AVX2, int8: int8 weights times int16 activations ----
//
// Each activation row is rounded once per call to int16 at scale max|x| / 32767 (round to
// nearest: |x - scale * q| <= scale / 2); 16 weights at a time are sign-extended to int16 and
// multiplied into int32 pair sums (vpmaddwd), the activation vector shared by kR output rows.
// A pair sum is at most 2 * 128 * 32767 < 2^23, and a lane adds one per 16 columns, so a lane
// over kI16Chunk = 2048 columns (128 pair sums, < 2^30) cannot overflow int32: the lanes are
// converted to f32 before they are summed, and longer rows are summed 2048 columns at a time.
inline constexpr int64_t kI16Chunk = 2048;
constexpr float kI16Max = kQGemvI16Max;

// The largest |x[i]| of x[0, n), or NaN when x holds NaN or infinity.
DYNVM_AVX2 float MaxAbs(const float* x, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 vmax = _mm256_setzero_ps(), finite = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    vmax = _mm256_max_ps(vmax, _mm256_and_ps(v, abs_mask));
    finite = _mm256_add_ps(finite, _mm256_mul_ps(v, _mm256_setzero_ps()));  // NaN if not finite
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float m = 0.0f, f = 0.0f;
  for (float v : lanes) m = v > m ? v : m;
  _mm256_store_ps(lanes, finite);
  for (float v : lanes) f += v;
  for (; i < n; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    m = a > m ? a : m;
    f += x[i] * 0.0f;
  }
  return f == 0.0f ? m : f;
}

// round(x[i] * inv) into q[0, n), zeros up to the next multiple of 16.
DYNVM_AVX2 void RoundI16(const float* x, int64_t n, float inv, int16_t* q) {
  const __m256 vinv = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
    const __m256i hi = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), vinv));
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), p);
  }
  for (; i < n; ++i) q[i] = static_cast<int16_t>(_mm_cvtss_si32(_mm_set_ss(x[i] * inv)));
  for (; (i & 15) != 0; ++i) q[i] = 0;
}

// 16 int8 weights from p sign-extended to int16; `valid` < 16 reads only that many (the rest 0).
DYNVM_AVX2 inline __m256i LoadI8x16(const int8_t* p, int64_t valid) {
  if (valid >= 16)
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  alignas(16) int8_t t[16] = {};
  std::memcpy(t, p, static_cast<size_t>(valid));
  return _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

// kR output rows from j times kM int16 activation rows (xq, row stride kp, kc columns valid and
// zero padding to kp, a multiple of 16): int32 sums, then times xs[m] * scale[j + r].
template <int kR, int kM>
DYNVM_AVX2 void BlockI8(int64_t kc, const int16_t* xq, int64_t kp, const float* xs, const int8_t* w,
                        int64_t ldw, const float* scale, int64_t j, float b, float* y,
                        int64_t ldy) {
  __m256i acc[8];
  for (__m256i& a : acc) a = _mm256_setzero_si256();
  const int8_t* wj = w + j * ldw;
  auto step = [&](int64_t i, int64_t valid) DYNVM_AVX2 {
    for (int r = 0; r < kR; ++r) {
      const __m256i wv = LoadI8x16(wj + r * ldw + i, valid);
      for (int m = 0; m < kM; ++m) {
        const __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(xq + m * kp + i));
        acc[m * kR + r] = _mm256_add_epi32(acc[m * kR + r], _mm256_madd_epi16(wv, xv));
      }
    }
  };
  const int64_t k16 = kc & ~int64_t{15};
  const int8_t* ahead = wj + kAheadBlocks * kR * ldw;
  int64_t i = 0;
  for (; i + 64 <= k16; i += 64) {  // one cache line per row: prefetch the rows ahead's line
    for (int r = 0; r < kR; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(ahead + r * ldw + i), _MM_HINT_T0);
    step(i, 16);
    step(i + 16, 16);
    step(i + 32, 16);
    step(i + 48, 16);
  }
  if (i < k16) {
    for (int r = 0; r < kR; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(ahead + r * ldw + i), _MM_HINT_T0);
  }
  for (; i < k16; i += 16) step(i, 16);
  if (k16 < kc) step(k16, kc - k16);
  __m256 accf[8];  // each lane's sum fits int32, the sum of 8 lanes may not: add in f32
  for (int a = 0; a < 8; ++a) accf[a] = _mm256_cvtepi32_ps(acc[a]);
  alignas(32) float sums[8];
  _mm256_store_ps(sums, Sum8x8(accf));
  StoreBlock<kR, kM>(sums, xs, scale, j, b, y, ldy);
}

template <int kM>
DYNVM_AVX2 void RowsI8(int64_t kc, const int16_t* xq, int64_t kp, const float* xs, const int8_t* w,
                       int64_t ldw, const float* scale, int64_t r0, int64_t r1, float b, float* y,
                       int64_t ldy) {
  constexpr int kR = RowsPerBlock(kM);
  int64_t j = r0;
  for (; j + kR <= r1; j += kR) BlockI8<kR, kM>(kc, xq, kp, xs, w, ldw, scale, j, b, y, ldy);
  for (; j < r1; ++j) BlockI8<1, kM>(kc, xq, kp, xs, w, ldw, scale, j, b, y, ldy);
}

DYNVM_AVX2 void QGemvI8Avx2(int64_t rows, int64_t k, const float* x, int64_t ldx, const int8_t* w,
                            int64_t ldw, const float* scale, int64_t r0, int64_t r1, float beta,
                            float* y, int64_t ldy) {
  if (k <= 0) return QGemvScalar(rows, k, x, ldx, w, ldw, scale, r0, r1, beta, y, ldy);
  alignas(32) int16_t xq[4 * kI16Chunk];
  for (int64_t m0 = 0; m0 < rows; m0 += 4) {
    const int mg = static_cast<int>(std::min<int64_t>(4, rows - m0));
    const float* xm = x + m0 * ldx;
    float* ym = y + m0 * ldy;
    float inv[4], xs[4];
    bool ok = true;
    for (int m = 0; m < mg; ++m) {
      const float a = MaxAbs(xm + m * ldx, k);
      ok = ok && (a == 0.0f || (a >= 0x1p-100f && a <= 3.0e38f));  // not NaN, finite
      inv[m] = a == 0.0f ? 0.0f : kI16Max / a;
      xs[m] = a / kI16Max;
    }
    if (!ok) {
      QGemvAvx2Widen(mg, k, xm, ldx, w, ldw, scale, r0, r1, beta, ym, ldy);
      continue;
    }
    for (int64_t c0 = 0; c0 < k; c0 += kI16Chunk) {
      const int64_t kc = std::min(kI16Chunk, k - c0), kp = (kc + 15) & ~int64_t{15};
      for (int m = 0; m < mg; ++m) RoundI16(xm + m * ldx + c0, kc, inv[m], xq + m * kp);
      const float b = c0 == 0 ? beta : 1.0f;  // later chunks add to the first's sums
      const int8_t* wc = w + c0;
      switch (mg) {
        case 1:
          RowsI8<1>(kc, xq, kp, xs, wc, ldw, scale, r0, r1, b, ym, ldy);
          break;
        case 2:
          RowsI8<2>(kc, xq, kp, xs, wc, ldw, scale, r0, r1, b, ym, ldy);
          break;
        case 3:
          RowsI8<3>(kc, xq, kp, xs, wc, ldw, scale, r0, r1, b, ym, ldy);
          break;
        default:
          RowsI8<4>(kc, xq, kp, xs, wc, ldw, scale, r0, r1, b, ym, ldy);
          break;
      }
    }
  }
}

// ---- AVX2, bf16 ----
//
// 16 bf16 weights are one 256-bit load of 8 pairs: a pair's upper half is the odd element as
// an f32 once the lower half is masked off, its lower half the even element once shifted up.
// The activation rows are split once per call into even and odd columns (per 16 columns: the 8
// even, then the 8 odd), so no weight is shuffled.
inline constexpr int64_t kBf16Chunk = 1024;

// x[0, n) as even/odd halves of each 16 columns into e, zeros up to the next multiple of 16.
DYNVM_AVX2 void SplitEvenOdd(const float* x, int64_t n, float* e) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), c = _mm256_loadu_ps(x + i + 8);
    const __m256 even = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 odd = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(3, 1, 3, 1));
    _mm256_storeu_ps(e + i, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), 0xD8)));
    _mm256_storeu_ps(e + i + 8,
                     _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), 0xD8)));
  }
  if (i < n) {
    float t[16] = {};
    for (int64_t c = i; c < n; ++c) t[c - i] = x[c];
    for (int c = 0; c < 8; ++c) {
      e[i + c] = t[2 * c];
      e[i + 8 + c] = t[2 * c + 1];
    }
  }
}

// 16 bf16 weights from p as 8 pairs; `valid` < 16 reads only that many (the rest 0).
DYNVM_AVX2 inline __m256i LoadBf16x16(const uint16_t* p, int64_t valid) {
  if (valid >= 16) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  alignas(32) uint16_t t[16] = {};
  std::memcpy(t, p, static_cast<size_t>(valid) * sizeof(uint16_t));
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(t));
}

template <int kR, int kM>
DYNVM_AVX2 void BlockBf16(int64_t kc, const float* xe, int64_t kp, const uint16_t* w, int64_t ldw,
                          int64_t j, float b, float* y, int64_t ldy) {
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m256 acc[8];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  const uint16_t* wj = w + j * ldw;
  auto step = [&](int64_t i, int64_t valid) DYNVM_AVX2 {
    for (int r = 0; r < kR; ++r) {
      const __m256i v = LoadBf16x16(wj + r * ldw + i, valid);
      const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask));
      for (int m = 0; m < kM; ++m) {
        __m256& a = acc[m * kR + r];
        a = _mm256_fmadd_ps(even, _mm256_load_ps(xe + m * kp + i), a);
        a = _mm256_fmadd_ps(odd, _mm256_load_ps(xe + m * kp + i + 8), a);
      }
    }
  };
  const int64_t k16 = kc & ~int64_t{15};
  const uint16_t* ahead = wj + kAheadBlocks * kR * ldw;
  int64_t i = 0;
  for (; i + 32 <= k16; i += 32) {  // one cache line per row: prefetch the rows ahead's line
    for (int r = 0; r < kR; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(ahead + r * ldw + i), _MM_HINT_T0);
    step(i, 16);
    step(i + 16, 16);
  }
  if (i < k16) {
    for (int r = 0; r < kR; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(ahead + r * ldw + i), _MM_HINT_T0);
    step(i, 16);
  }
  if (k16 < kc) step(k16, kc - k16);
  alignas(32) float sums[8];
  _mm256_store_ps(sums, Sum8x8(acc));
  const float one[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  StoreBlock<kR, kM>(sums, one, nullptr, j, b, y, ldy);
}

template <int kM>
DYNVM_AVX2 void RowsBf16(int64_t kc, const float* xe, int64_t kp, const uint16_t* w, int64_t ldw,
                         int64_t r0, int64_t r1, float b, float* y, int64_t ldy) {
  constexpr int kR = RowsPerBlock(kM);
  int64_t j = r0;
  for (; j + kR <= r1; j += kR) BlockBf16<kR, kM>(kc, xe, kp, w, ldw, j, b, y, ldy);
  for (; j < r1; ++j) BlockBf16<1, kM>(kc, xe, kp, w, ldw, j, b, y, ldy);
}

DYNVM_AVX2 void QGemvBf16Avx2(int64_t rows, int64_t k, const float* x, int64_t ldx,
                              const uint16_t* w, int64_t ldw, int64_t r0, int64_t r1, float beta,
                              float* y, int64_t ldy) {
  if (k <= 0) return QGemvScalar(rows, k, x, ldx, w, ldw, nullptr, r0, r1, beta, y, ldy);
  alignas(32) float xe[4 * kBf16Chunk];
  for (int64_t m0 = 0; m0 < rows; m0 += 4) {
    const int mg = static_cast<int>(std::min<int64_t>(4, rows - m0));
    const float* xm = x + m0 * ldx;
    float* ym = y + m0 * ldy;
    for (int64_t c0 = 0; c0 < k; c0 += kBf16Chunk) {
      const int64_t kc = std::min(kBf16Chunk, k - c0), kp = (kc + 15) & ~int64_t{15};
      for (int m = 0; m < mg; ++m) SplitEvenOdd(xm + m * ldx + c0, kc, xe + m * kp);
      const float b = c0 == 0 ? beta : 1.0f;
      const uint16_t* wc = w + c0;
      switch (mg) {
        case 1:
          RowsBf16<1>(kc, xe, kp, wc, ldw, r0, r1, b, ym, ldy);
          break;
        case 2:
          RowsBf16<2>(kc, xe, kp, wc, ldw, r0, r1, b, ym, ldy);
          break;
        case 3:
          RowsBf16<3>(kc, xe, kp, wc, ldw, r0, r1, b, ym, ldy);
          break;
        default:
          RowsBf16<4>(kc, xe, kp, wc, ldw, r0, r1, b, ym, ldy);
          break;
      }
    }
  }
}

// ---- AVX-512 VNNI, int8: int16 activations times int8 weights (VPDPWSSD) ----
//
// The AVX2 int8 scheme at 32 columns per step with the multiply-add fused: each activation row
// rounded once per call to int16 (RoundI16, the AVX2 rounding: the same bound), 32 weights per
// step sign-extended to int16 (one VPMOVSXBW), one VPDPWSSD per weight vector and activation row
// into int32 lanes. A lane adds one pair sum (< 2^23) per 32 columns, so kI16Chunk (2048)
// columns keep it below 2^29; lanes are converted to f32 before they are summed (RowVnni: per
// chunk, summed in f32 across the row's chunks; a pass there rounds up to kVnniPassColumns
// activation columns, all of a decode row's K up to 16384). Which kernel computes a row depends
// on K and the activation rows only, so the thread split never changes it.

// 32 int8 weights from p sign-extended to int16; `valid` < 32 reads only that many (the rest 0).
DYNVM_AVX512_VNNI DYNVM_ALWAYS_INLINE __m512i LoadI8x32(const int8_t* p, int64_t valid) {
  if (valid >= 32) {
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  const __mmask32 m = static_cast<__mmask32>((uint64_t{1} << valid) - 1);
  return _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, p));
}

// Output rows per block for kM activation rows (kR * kM <= 16 accumulators, one Sum16x16).
constexpr int VnniRowsPerBlock(int m) { return m == 1 ? 16 : m == 2 ? 8 : 4; }

#ifndef DYNVM_QGEMV_VNNI_AHEAD
#define DYNVM_QGEMV_VNNI_AHEAD 4096
#endif
// Bytes ahead of its loads, along the weight rows in memory order, that the one-activation-row
// VNNI kernel prefetches.
inline constexpr int64_t kVnniAheadBytes = DYNVM_QGEMV_VNNI_AHEAD;
// Columns from which one activation row runs RowVnni (weights read from memory: a model's
// 2048-5632-column rows); shorter rows (an LSTM step's 128-256, from L2/L3, where one reduction
// per row costs more than the stream saves) keep 16-row blocks. A function of K alone, so the
// thread split never changes which kernel computes a row.
inline constexpr int64_t kVnniStreamColumns = 1024;

// int16 activation columns RowVnni rounds per pass (32 KB; the blocks take kI16Chunk per pass).
inline constexpr int64_t kVnniPassColumns = 16384;

// kR output rows from j times kM int16 activation rows (xq, row stride kp, kc columns valid and
// zero padding to kp, a multiple of 32): int32 sums, then times xs[m] * scale[j + r].
template <int kR, int kM>
DYNVM_AVX512_VNNI void BlockVnni(int64_t kc, const int16_t* xq, int64_t kp, const float* xs,
                                 const int8_t* w, int64_t ldw, const float* scale, int64_t j,
                                 float b, float* y, int64_t ldy) {
  static_assert(kR * kM <= 16);
  __m512i acc[16];
  for (__m512i& a : acc) a = _mm512_setzero_si512();
  const int8_t* wj = w + j * ldw;
  auto step = [&](int64_t i, int64_t valid) DYNVM_AVX512_VNNI {
    for (int r = 0; r < kR; ++r) {
      const __m512i wv = LoadI8x32(wj + r * ldw + i, valid);
      for (int m = 0; m < kM; ++m) {
        const __m512i xv = _mm512_loadu_si512(xq + m * kp + i);
        acc[m * kR + r] = _mm512_dpwssd_epi32(acc[m * kR + r], wv, xv);
      }
    }
  };
  const int64_t k32 = kc & ~int64_t{31};
  const int8_t* ahead = wj + kAheadBlocks * kR * ldw;
  int64_t i = 0;
  for (; i + 64 <= k32; i += 64) {  // one cache line per row: prefetch the rows ahead's line
    for (int r = 0; r < kR; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(ahead + r * ldw + i), _MM_HINT_T0);
    step(i, 32);
    step(i + 32, 32);
  }
  if (i < k32) {
    for (int r = 0; r < kR; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(ahead + r * ldw + i), _MM_HINT_T0);
    step(i, 32);
  }
  if (k32 < kc) step(k32, kc - k32);
  __m512 f[16];
  for (int a = 0; a < 16; ++a) f[a] = _mm512_cvtepi32_ps(acc[a]);  // the unused ones are 0
  alignas(64) float sums[16];
  _mm512_store_ps(sums, Sum16x16(f));
  if constexpr (kR == 16 && kM == 1) {
    __m512 s = _mm512_mul_ps(_mm512_load_ps(sums), _mm512_set1_ps(xs[0]));
    if (scale != nullptr) s = _mm512_mul_ps(s, _mm512_loadu_ps(scale + j));
    if (b != 0.0f) s = _mm512_fmadd_ps(_mm512_set1_ps(b), _mm512_loadu_ps(y + j), s);
    _mm512_storeu_ps(y + j, s);
  } else {
    for (int m = 0; m < kM; ++m) {
      for (int r = 0; r < kR; ++r) {
        float s = sums[m * kR + r] * xs[m];
        if (scale != nullptr) s *= scale[j + r];
        float& out = y[m * ldy + j + r];
        out = b == 0.0f ? s : b * out + s;
      }
    }
  }
}

// One activation row (the decode GEMV), output row j: the rows are read one after another, one
// sequential stream, with four int32 chains per row and a software prefetch kVnniAheadBytes
// ahead along that stream (the hardware prefetcher stops at 4 KiB pages).
// (ar, ac): kVnniAheadBytes as rows and columns of kc (divided once per call, not per row).
DYNVM_AVX512_VNNI void RowVnni(int64_t kc, const int16_t* xq, float xs, const int8_t* w,
                               int64_t ldw, const float* scale, int64_t j, int64_t ar, int64_t ac,
                               float b, float* y) {
  const int8_t* wj = w + j * ldw;
  int64_t pr = ar, pc = ac;  // the prefetch: row j + pr, column pc
  auto prefetch = [&]() DYNVM_AVX512_VNNI {
    _mm_prefetch(reinterpret_cast<const char*>(wj + pr * ldw + pc), _MM_HINT_T1);
    pc += 64;
    if (pc >= kc) pc = 0, ++pr;
  };
  auto dot = [&](__m512i a, int64_t i, int64_t valid) DYNVM_AVX512_VNNI {
    return _mm512_dpwssd_epi32(a, LoadI8x32(wj + i, valid), _mm512_load_si512(xq + i));
  };
  __m512 f = _mm512_setzero_ps();
  for (int64_t c0 = 0; c0 < kc; c0 += kI16Chunk) {  // int32 lanes over each chunk (exact)
    const int64_t ce = std::min(kc, c0 + kI16Chunk), e32 = c0 + ((ce - c0) & ~int64_t{31});
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = c0;
    for (; i + 128 <= e32; i += 128) {
      prefetch();
      prefetch();
      a0 = dot(a0, i, 32);
      a1 = dot(a1, i + 32, 32);
      a2 = dot(a2, i + 64, 32);
      a3 = dot(a3, i + 96, 32);
    }
    for (; i < e32; i += 32) {
      if ((i & 63) == 0) prefetch();
      a0 = dot(a0, i, 32);
    }
    if (e32 < ce) a1 = dot(a1, e32, ce - e32);
    const __m512i s = _mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3));
    f = _mm512_add_ps(f, _mm512_cvtepi32_ps(s));
  }
  float s = _mm512_reduce_add_ps(f) * xs;
  if (scale != nullptr) s *= scale[j];
  y[j] = b == 0.0f ? s : b * y[j] + s;
}

template <int kM>
DYNVM_AVX512_VNNI void RowsVnni(int64_t kc, const int16_t* xq, int64_t kp, const float* xs,
                                const int8_t* w, int64_t ldw, const float* scale, int64_t r0,
                                int64_t r1, float b, float* y, int64_t ldy, bool stream) {
  if (kM == 1 && stream) {
    const int64_t ar = kVnniAheadBytes / kc, ac = kVnniAheadBytes % kc;
    for (int64_t j = r0; j < r1; ++j) RowVnni(kc, xq, xs[0], w, ldw, scale, j, ar, ac, b, y);
  } else {
    constexpr int kR = VnniRowsPerBlock(kM);
    int64_t j = r0;
    for (; j + kR <= r1; j += kR) BlockVnni<kR, kM>(kc, xq, kp, xs, w, ldw, scale, j, b, y, ldy);
    for (; j < r1; ++j) BlockVnni<1, kM>(kc, xq, kp, xs, w, ldw, scale, j, b, y, ldy);
  }
}

// The group's activation rows (mg of them) rounded to int16: their largest magnitudes in xs,
// their reciprocal steps in inv; false when a row cannot be rounded (NaN, infinity, tiny).
DYNVM_AVX512_VNNI bool Int16Steps(int mg, int64_t k, const float* xm, int64_t ldx, float* inv,
                                  float* xs) {
  bool ok = true;
  for (int m = 0; m < mg; ++m) {
    const float a = MaxAbs(xm + m * ldx, k);
    ok = ok && (a == 0.0f || (a >= 0x1p-100f && a <= 3.0e38f));  // not NaN, finite
    inv[m] = a == 0.0f ? 0.0f : kI16Max / a;
    xs[m] = a / kI16Max;
  }
  return ok;
}

DYNVM_AVX512_VNNI void QGemvI8Vnni(int64_t rows, int64_t k, const float* x, int64_t ldx,
                                   const int8_t* w, int64_t ldw, const float* scale, int64_t r0,
                                   int64_t r1, float beta, float* y, int64_t ldy) {
  if (k <= 0) return QGemvScalar(rows, k, x, ldx, w, ldw, scale, r0, r1, beta, y, ldy);
  alignas(64) int16_t xq[kVnniPassColumns];
  for (int64_t m0 = 0; m0 < rows; m0 += 4) {
    const int mg = static_cast<int>(std::min<int64_t>(4, rows - m0));
    const float* xm = x + m0 * ldx;
    float* ym = y + m0 * ldy;
    float inv[4], xs[4];
    if (!Int16Steps(mg, k, xm, ldx, inv, xs)) {  // the AVX-512 widening kernel
      QGemvAvx512(mg, k, xm, ldx, w, ldw, scale, r0, r1, beta, ym, ldy);
      continue;
    }
    // Whole kI16Chunk column chunks per pass: each block reads its rows' pass in one sweep.
    const bool stream = mg == 1 && k >= kVnniStreamColumns;  // RowVnni: passes of 16384
    const int64_t pass = stream ? kVnniPassColumns : kI16Chunk;
    for (int64_t c0 = 0; c0 < k; c0 += pass) {
      const int64_t kc = std::min(pass, k - c0), kp = (kc + 31) & ~int64_t{31};
      for (int m = 0; m < mg; ++m) {
        int16_t* q = xq + m * kp;
        RoundI16(xm + m * ldx + c0, kc, inv[m], q);  // zeros to the next multiple of 16
        for (int64_t p = (kc + 15) & ~int64_t{15}; p < kp; ++p) q[p] = 0;
      }
      const float b = c0 == 0 ? beta : 1.0f;  // later passes add to the first's sums
      const int8_t* wc = w + c0;
      switch (mg) {
        case 1:
          RowsVnni<1>(kc, xq, kp, xs, wc, ldw, scale, r0, r1, b, ym, ldy, stream);
          break;
        case 2:
          RowsVnni<2>(kc, xq, kp, xs, wc, ldw, scale, r0, r1, b, ym, ldy, stream);
          break;
        case 3:
          RowsVnni<3>(kc, xq, kp, xs, wc, ldw, scale, r0, r1, b, ym, ldy, stream);
          break;
        default:
          RowsVnni<4>(kc, xq, kp, xs, wc, ldw, scale, r0, r1, b, ym, ldy, stream);
          break;
      }
    }
  }
}

// ---- AVX-512 BF16: bf16 activations (split in two) times bf16 weights (VDPBF16PS) ----
//
// Each activation is split once per call into hi = bf16(x) and lo = bf16(x - hi) (both round
// to nearest even; x - hi is exact), so x - hi - lo is within 2^-16 |x|. 32 weights are one
// load, and two VDPBF16PS (hi, then lo) per weight vector and activation row add their products
// into f32 lanes (each bf16 x bf16 product is exact in f32; VDPBF16PS flushes denormal inputs and
// results to zero).

// The bf16 (round to nearest even) of a finite f32 whose magnitude is below 3.3e38.
inline uint16_t RoundToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// x[0, n) as hi and lo halves, zeros up to the next multiple of 32.
void SplitBf16(const float* x, int64_t n, int64_t padded, uint16_t* hi, uint16_t* lo) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = RoundToBf16(x[i]);
    hi[i] = h;
    lo[i] = RoundToBf16(x[i] - Bf16ToF32(h));
  }
  for (int64_t i = n; i < padded; ++i) hi[i] = lo[i] = 0;
}

template <int kR, int kM>
DYNVM_AVX512_BF16 void BlockBf16Dot(int64_t kc, const uint16_t* xh, const uint16_t* xl, int64_t kp,
                                    const uint16_t* w, int64_t ldw, int64_t j, float b, float* y,
                                    int64_t ldy) {
  static_assert(kR * kM <= 16);
  __m512 acc[16];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  const uint16_t* wj = w + j * ldw;
  auto step = [&](int64_t i, int64_t valid) DYNVM_AVX512_BF16 {
    const __mmask32 mask =
        valid >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << valid) - 1);
    for (int r = 0; r < kR; ++r) {
      const __m512bh wv = valid >= 32 ? (__m512bh)_mm512_loadu_si512(wj + r * ldw + i)
                                      : (__m512bh)_mm512_maskz_loadu_epi16(mask, wj + r * ldw + i);
      for (int m = 0; m < kM; ++m) {
        __m512& a = acc[m * kR + r];
        a = _mm512_dpbf16_ps(a, wv, (__m512bh)_mm512_loadu_si512(xh + m * kp + i));
        a = _mm512_dpbf16_ps(a, wv, (__m512bh)_mm512_loadu_si512(xl + m * kp + i));
      }
    }
  };
  const int64_t k32 = kc & ~int64_t{31};
  const uint16_t* ahead = wj + kAheadBlocks * kR * ldw;
  for (int64_t i = 0; i < k32; i += 32) {  // one cache line (32 bf16) per row and step
    for (int r = 0; r < kR; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(ahead + r * ldw + i), _MM_HINT_T0);
    step(i, 32);
  }
  if (k32 < kc) step(k32, kc - k32);
  alignas(64) float sums[16];
  _mm512_store_ps(sums, Sum16x16(acc));
  for (int m = 0; m < kM; ++m) {
    for (int r = 0; r < kR; ++r) {
      const float s = sums[m * kR + r];
      float& out = y[m * ldy + j + r];
      out = b == 0.0f ? s : b * out + s;
    }
  }
}

template <int kM>
DYNVM_AVX512_BF16 void RowsBf16Dot(int64_t kc, const uint16_t* xh, const uint16_t* xl, int64_t kp,
                                   const uint16_t* w, int64_t ldw, int64_t r0, int64_t r1, float b,
                                   float* y, int64_t ldy) {
  constexpr int kR = VnniRowsPerBlock(kM);
  int64_t j = r0;
  for (; j + kR <= r1; j += kR) BlockBf16Dot<kR, kM>(kc, xh, xl, kp, w, ldw, j, b, y, ldy);
  for (; j < r1; ++j) BlockBf16Dot<1, kM>(kc, xh, xl, kp, w, ldw, j, b, y, ldy);
}

DYNVM_AVX512_BF16 void QGemvBf16Dot(int64_t rows, int64_t k, const float* x, int64_t ldx,
                                    const uint16_t* w, int64_t ldw, int64_t r0, int64_t r1,
                                    float beta, float* y, int64_t ldy) {
  if (k <= 0) return QGemvScalar(rows, k, x, ldx, w, ldw, nullptr, r0, r1, beta, y, ldy);
  alignas(64) uint16_t xh[4 * kBf16Chunk], xl[4 * kBf16Chunk];
  for (int64_t m0 = 0; m0 < rows; m0 += 4) {
    const int mg = static_cast<int>(std::min<int64_t>(4, rows - m0));
    const float* xm = x + m0 * ldx;
    float* ym = y + m0 * ldy;
    bool ok = true;
    for (int m = 0; m < mg; ++m) {
      const float a = MaxAbs(xm + m * ldx, k);
      ok = ok && a <= 3.0e38f;  // not NaN, finite, and its bf16 halves too
    }
    if (!ok) {  // NaN or infinity propagate as in f32: the AVX-512 widening kernel
      QGemvAvx512<uint16_t>(mg, k, xm, ldx, w, ldw, nullptr, r0, r1, beta, ym, ldy);
      continue;
    }
    for (int64_t c0 = 0; c0 < k; c0 += kBf16Chunk) {
      const int64_t kc = std::min(kBf16Chunk, k - c0), kp = (kc + 31) & ~int64_t{31};
      for (int m = 0; m < mg; ++m) SplitBf16(xm + m * ldx + c0, kc, kp, xh + m * kp, xl + m * kp);
      const float b = c0 == 0 ? beta : 1.0f;
      const uint16_t* wc = w + c0;
      switch (mg) {
        case 1:
          RowsBf16Dot<1>(kc, xh, xl, kp, wc, ldw, r0, r1, b, ym, ldy);
          break;
        case 2:
          RowsBf16Dot<2>(kc, xh, xl, kp, wc, ldw, r0, r1, b, ym, ldy);
          break;
        case 3:
          RowsBf16Dot<3>(kc, xh, xl, kp, wc, ldw, r0, r1, b, ym, ldy);
          break;
        default:
          RowsBf16Dot<4>(kc, xh, xl, kp, wc, ldw, r0, r1, b, ym, ldy);
          break;
      }
    }
  }
}

// ---- The levels' entry points ----

// Empty products: nothing to compute (and k <= 0 writes beta * y through the scalar path).
#define DYNVM_QGEMV_EMPTY(rows, r0, r1) \
  if ((rows) <= 0 || (r1) <= (r0)) return

DYNVM_AVX2 void QGemvI8Avx2Entry(int64_t rows, int64_t k, const float* x, int64_t ldx,
                                 const int8_t* w, int64_t ldw, const float* scale, int64_t r0,
                                 int64_t r1, float beta, float* y, int64_t ldy) {
  DYNVM_QGEMV_EMPTY(rows, r0, r1);
  QGemvI8Avx2(rows, k, x, ldx, w, ldw, scale, r0, r1, beta, y, ldy);
}

DYNVM_AVX2 void QGemvBf16Avx2Entry(int64_t rows, int64_t k, const float* x, int64_t ldx,
                                   const uint16_t* w, int64_t ldw, int64_t r0, int64_t r1,
                                   float beta, float* y, int64_t ldy) {
  DYNVM_QGEMV_EMPTY(rows, r0, r1);
  QGemvBf16Avx2(rows, k, x, ldx, w, ldw, r0, r1, beta, y, ldy);
}

DYNVM_AVX512 void QGemvI8Avx512Entry(int64_t rows, int64_t k, const float* x, int64_t ldx,
                                     const int8_t* w, int64_t ldw, const float* scale, int64_t r0,
                                     int64_t r1, float beta, float* y, int64_t ldy) {
  DYNVM_QGEMV_EMPTY(rows, r0, r1);
  QGemvAvx512(rows, k, x, ldx, w, ldw, scale, r0, r1, beta, y, ldy);
}

DYNVM_AVX512 void QGemvBf16Avx512Entry(int64_t rows, int64_t k, const float* x, int64_t ldx,
                                       const uint16_t* w, int64_t ldw, int64_t r0, int64_t r1,
                                       float beta, float* y, int64_t ldy) {
  DYNVM_QGEMV_EMPTY(rows, r0, r1);
  QGemvAvx512<uint16_t>(rows, k, x, ldx, w, ldw, nullptr, r0, r1, beta, y, ldy);
}

DYNVM_AVX512_VNNI void QGemvI8VnniEntry(int64_t rows, int64_t k, const float* x, int64_t ldx,
                                        const int8_t* w, int64_t ldw, const float* scale,
                                        int64_t r0, int64_t r1, float beta, float* y, int64_t ldy) {
  DYNVM_QGEMV_EMPTY(rows, r0, r1);
  QGemvI8Vnni(rows, k, x, ldx, w, ldw, scale, r0, r1, beta, y, ldy);
}

// One activation row runs the widening kernel: there the two VDPBF16PS per weight vector
// (with no second row to share its load) are slower than widening it (cpu_qgemv_benchmark on
// the Zen 4 EPYC: 16-19 against 18-25 G multiply-adds/s; 2 rows 34-41 against 28-33, 4 rows
// 47-53 against 31-41).
DYNVM_AVX512_BF16 void QGemvBf16DotEntry(int64_t rows, int64_t k, const float* x, int64_t ldx,
                                         const uint16_t* w, int64_t ldw, int64_t r0, int64_t r1,
                                         float beta, float* y, int64_t ldy) {
  DYNVM_QGEMV_EMPTY(rows, r0, r1);
  if (rows == 1)
    return QGemvAvx512<uint16_t>(rows, k, x, ldx, w, ldw, nullptr, r0, r1, beta, y, ldy);
  QGemvBf16Dot(rows, k, x, ldx, w, ldw, r0, r1, beta, y, ldy);
}

#endif  // DYNVM_CPU_X86

void QGemvI8PortableEntry(int64_t rows, int64_t k, const float* x, int64_t ldx, const int8_t* w,
                          int64_t ldw, const float* scale, int64_t r0, int64_t r1, float beta,
                          float* y, int64_t ldy) {
  DYNVM_QGEMV_EMPTY(rows, r0, r1);
  QGemvI8Portable(rows, k, x, ldx, w, ldw, scale, r0, r1, beta, y, ldy);
}

void QGemvBf16PortableEntry(int64_t rows, int64_t k, const float* x, int64_t ldx, const uint16_t* w,
                            int64_t ldw, int64_t r0, int64_t r1, float beta, float* y,
                            int64_t ldy) {
  DYNVM_QGEMV_EMPTY(rows, r0, r1);
  QGemvBf16Portable(rows, k, x, ldx, w, ldw, r0, r1, beta, y, ldy);
}

#undef DYNVM_QGEMV_EMPTY

}  // namespace

namespace internal {

void FillQGemv(Isa isa, Dispatch* d) {
  d->qgemv_i8 = &QGemvI8PortableEntry;
  d->qgemv_bf16 = &QGemvBf16PortableEntry;
  d->qgemv_i8_path = "portable";
  d->qgemv_bf16_path = "portable";
  d->qgemv_i8_rounds = false;
  d->qgemv_bf16_splits = false;
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) {
    d->qgemv_i8 = &QGemvI8Avx2Entry;
    d->qgemv_bf16 = &QGemvBf16Avx2Entry;
    d->qgemv_i8_path = "avx2";
    d->qgemv_bf16_path = "avx2";
    d->qgemv_i8_rounds = true;
  }
  if (isa >= Isa::kAvx512) {
    d->qgemv_i8 = &QGemvI8Avx512Entry;
    d->qgemv_bf16 = &QGemvBf16Avx512Entry;
    d->qgemv_i8_path = "avx512";
    d->qgemv_bf16_path = "avx512";
    d->qgemv_i8_rounds = false;
  }
  if (isa >= Isa::kAvx512Vnni) {
    d->qgemv_i8 = &QGemvI8VnniEntry;
    d->qgemv_i8_path = "avx512_vnni";
    d->qgemv_i8_rounds = true;
    if (HasAvx512Bf16()) {
      d->qgemv_bf16 = &QGemvBf16DotEntry;
      d->qgemv_bf16_path = "avx512_bf16";
      d->qgemv_bf16_splits = true;
    }
  }
#endif
}

}  // namespace internal

void QGemvI8(int64_t rows, int64_t k, const float* x, int64_t ldx, const int8_t* q, int64_t ldw,
             const float* scale, int64_t r0, int64_t r1, float beta, float* y, int64_t ldy) {
  internal::Table().qgemv_i8(rows, k, x, ldx, q, ldw, scale, r0, r1, beta, y, ldy);
}

void QGemvBf16(int64_t rows, int64_t k, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
               int64_t r0, int64_t r1, float beta, float* y, int64_t ldy) {
  internal::Table().qgemv_bf16(rows, k, x, ldx, w, ldw, r0, r1, beta, y, ldy);
}

bool QGemvI8RoundsActivations() { return internal::Table().qgemv_i8_rounds; }
bool QGemvBf16SplitsActivations() { return internal::Table().qgemv_bf16_splits; }
const char* QGemvI8Path() { return internal::Table().qgemv_i8_path; }
const char* QGemvBf16Path() { return internal::Table().qgemv_bf16_path; }

}  // namespace dynvm::cpu
