// 4-bit block-quantized GEMV / small-M products (q4gemv.h). Tuning notes:
//
// A decode step reads each weight once, so the kernel is written to stream the 4-bit rows with
// as few instructions per weight as f32 arithmetic allows (ONNX Runtime's accuracy_level 0: f32
// multiply-adds over the dequantized weights, no narrowing of the activations). The weights are
// never shuffled: a block's bytes are widened to 32-bit lanes (VPMOVZXBD from memory), the low
// nibbles are the block's even columns and the high nibbles (shift right 4) its odd ones, and
// each activation row is split once per call into even and odd columns per 2 * lanes columns (a
// per-thread scratch of K floats per row, zero padded to whole blocks, so the padding of the last
// block multiplies zeros). Four output rows run side by side and share each activation load; the
// four rows' weights (4 K / 2 bytes) stay in L1 while the activation rows run over them, so the
// weights are read once from memory whatever the row count.
//
// AVX2 (8 lanes, 16 weights per step): AND 15 and shift, subtract the zero point in int32 (q - zp
// is exact), convert, FMA into the block's partial sum, scaled into the row's sum once per block.
// AVX-512 (16 lanes, 32 weights per step, blocks of 32 and more): VPERMPS reads only the low four
// bits of each index, so a 16-entry table of the row's block, (v - zp) * scale for v = 0..15,
// maps the widened bytes straight to the low nibbles' weights and, shifted right by 4, to the
// high nibbles': six instructions per 32 weights and row (widen, shift, two permutes, two FMAs
// into even and odd accumulators), no conversion, no per-block scaling, and the weights are
// ORT's dequantized values exactly. Two alternatives measured the same within noise on the Zen 4
// EPYC (N = K = 4096, block 32, 1 thread: 1.08-1.10 ms per call): the AVX2 scheme at 16 lanes
// (nine instructions) and the nibbles ORed into 2^23's mantissa (VPTERNLOGD) minus 2^23 + zp
// (seven). At about 16 G weights/s per core the kernel is bound by the widening load and the
// permutes on the shuffle ports, not by memory: docs/kernels.md, "4-bit weights", has the figures
// (docs/results/int4-gemv-2026-11-29.txt). Portable: scalar, the AVX2 arithmetic.
#include "kernels/cpu/q4gemv.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/target.h"

// GCC 12 warns about the undefined first operand its own masked-intrinsic headers pass.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace dynvm::cpu {
namespace {

// Zero point of row j's block b.
inline int ZeroPoint(const Q4Weights& w, int64_t j, int64_t b) {
  if (w.zero_points == nullptr) return 8;
  const int64_t per_row = (w.blocks() + 1) / 2;
  const uint8_t byte = w.zero_points[j * per_row + b / 2];
  return (b % 2 == 0) ? (byte & 15) : (byte >> 4);
}

inline int Nibble(const uint8_t* block, int64_t e) {
  const uint8_t byte = block[e / 2];
  return (e % 2 == 0) ? (byte & 15) : (byte >> 4);
}

// A per-thread scratch of n floats, grown once and kept (no allocation per call after the first
// at a size).
float* Scratch(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// Activation rows split per chunk of 2 * lanes columns into [x0 x2 ... x(2 lanes - 2), x1 x3 ...
// x(2 lanes - 1)] (the order of a chunk's low then high nibbles once widened), zero from k to
// `padded`, row m at xs + m * padded; the odd columns times odd_scale (a power of two).
void SplitActivations(int64_t rows, const float* x, int64_t ldx, int64_t k, int64_t padded,
                      int64_t lanes, float* xs, float odd_scale = 1.0f) {
  const int64_t chunk = 2 * lanes;
  for (int64_t m = 0; m < rows; ++m) {
    const float* xr = x + m * ldx;
    float* out = xs + m * padded;
    for (int64_t c = 0; c < padded; c += chunk) {
      for (int64_t i = 0; i < lanes; ++i) {
        const int64_t e = c + 2 * i, o = e + 1;
        out[c + i] = e < k ? xr[e] : 0.0f;
        out[c + lanes + i] = o < k ? xr[o] * odd_scale : 0.0f;
      }
    }
  }
}

void QGemvQ4Portable(int64_t rows, const float* x, int64_t ldx, const Q4Weights& w,
                     const float* bias, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  const int64_t blocks = w.blocks(), blob = w.block / 2;
  for (int64_t m = 0; m < rows; ++m) {
    const float* xr = x + m * ldx;
    for (int64_t j = r0; j < r1; ++j) {
      const uint8_t* row = w.packed + j * blocks * blob;
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const int zp = ZeroPoint(w, j, b);
        const int64_t i0 = b * w.block, i1 = std::min(w.k, i0 + w.block);
        float part = 0.0f;
        for (int64_t i = i0; i < i1; ++i) {
          part += xr[i] * static_cast<float>(Nibble(row + b * blob, i - i0) - zp);
        }
        acc += part * w.scales[j * blocks + b];
      }
      y[m * ldy + j] = acc + (bias != nullptr ? bias[j] : 0.0f);
    }
  }
}

void DequantizeRowsQ4Portable(const Q4Weights& w, int64_t r0, int64_t r1, float* dst) {
  const int64_t blocks = w.blocks(), blob = w.block / 2;
  for (int64_t j = r0; j < r1; ++j) {
    const uint8_t* row = w.packed + j * blocks * blob;
    float* out = dst + (j - r0) * w.k;
    for (int64_t b = 0; b < blocks; ++b) {
      const int zp = ZeroPoint(w, j, b);
      const float s = w.scales[j * blocks + b];
      const int64_t i0 = b * w.block, i1 = std::min(w.k, i0 + w.block);
      for (int64_t i = i0; i < i1; ++i) {
        out[i] = static_cast<float>(Nibble(row + b * blob, i - i0) - zp) * s;
      }
    }
  }
}

// The 16 rows of panel p0 + t that exist: rows [16 (p0 + t), min(n, 16 (p0 + t + 1))).
inline int64_t PanelRows(int64_t n, int64_t panel) {
  return std::clamp<int64_t>(n - panel * 16, 0, 16);
}

void DequantizeQ4ToPanelsPortable(const Q4Weights& w, int64_t n, int64_t p0, int64_t p1, int64_t i0,
                                  int64_t i1, float* dst) {
  const int64_t blocks = w.blocks(), blob = w.block / 2;
  for (int64_t p = p0; p < p1; ++p, dst += 16 * (i1 - i0)) {
    const int64_t valid = PanelRows(n, p);
    for (int64_t c = 0; c < 16; ++c) {
      const int64_t j = p * 16 + c;
      for (int64_t i = i0; i < i1; ++i) {
        float v = 0.0f;
        if (c < valid) {
          const int64_t b = i / w.block;
          const int zp = ZeroPoint(w, j, b);
          const uint8_t* blk = w.packed + (j * blocks + b) * blob;
          v = static_cast<float>(Nibble(blk, i - b * w.block) - zp) * w.scales[j * blocks + b];
        }
        dst[(i - i0) * 16 + c] = v;
      }
    }
  }
}

#if DYNVM_CPU_X86

DYNVM_AVX2 inline float HSum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Output rows j .. j + R - 1 of one split activation row xs (8-lane chunks).
template <int R>
DYNVM_AVX2 inline void RowsAvx2(const float* xs, const Q4Weights& w, int64_t j, const float* bias,
                                float* y) {
  const int64_t blocks = w.blocks(), blob = w.block / 2;
  const __m256i low = _mm256_set1_epi32(15);
  const uint8_t* p[R];
  __m256 acc[R];
  for (int r = 0; r < R; ++r) {
    p[r] = w.packed + (j + r) * blocks * blob;
    acc[r] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    __m256 part[R];
    __m256i zp[R];
    for (int r = 0; r < R; ++r) {
      part[r] = _mm256_setzero_ps();
      zp[r] = _mm256_set1_epi32(ZeroPoint(w, j + r, b));
    }
    const float* xb = xs + b * w.block;
    for (int64_t c = 0; c < w.block; c += 16) {
      const __m256 xe = _mm256_loadu_ps(xb + c), xo = _mm256_loadu_ps(xb + c + 8);
      for (int r = 0; r < R; ++r) {
        const __m256i v = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p[r] + b * blob + c / 2)));
        const __m256i lo = _mm256_sub_epi32(_mm256_and_si256(v, low), zp[r]);
        const __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(v, 4), zp[r]);
        part[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), xe, part[r]);
        part[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), xo, part[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_fmadd_ps(part[r], _mm256_set1_ps(w.scales[(j + r) * blocks + b]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[j + r] = HSum256(acc[r]) + (bias != nullptr ? bias[j + r] : 0.0f);
}

// Rows [r0, r1) in groups of four (the activation rows over each group while its weights are in
// L1), then one at a time.
DYNVM_AVX2 void RunRowsAvx2(int64_t rows, const float* xs, int64_t padded, const Q4Weights& w,
                            const float* bias, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  int64_t j = r0;
  for (; j + 4 <= r1; j += 4) {
    for (int64_t m = 0; m < rows; ++m) RowsAvx2<4>(xs + m * padded, w, j, bias, y + m * ldy);
  }
  for (; j < r1; ++j) {
    for (int64_t m = 0; m < rows; ++m) RowsAvx2<1>(xs + m * padded, w, j, bias, y + m * ldy);
  }
}

DYNVM_AVX2 void QGemvQ4Avx2(int64_t rows, const float* x, int64_t ldx, const Q4Weights& w,
                            const float* bias, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  const int64_t padded = w.blocks() * w.block;
  float* xs = Scratch(static_cast<size_t>(rows * padded));
  SplitActivations(rows, x, ldx, w.k, padded, 8, xs);
  RunRowsAvx2(rows, xs, padded, w, bias, r0, r1, y, ldy);
}

// Rows [r0, r1) dequantized in natural order: 16 weights per step as in RowsAvx2 ((q - zp)
// converted, times the block's scale), the even and odd halves interleaved back (unpack, then
// swap 128-bit lanes).
DYNVM_AVX2 void DequantizeRowsQ4Avx2(const Q4Weights& w, int64_t r0, int64_t r1, float* dst) {
  const int64_t blocks = w.blocks(), blob = w.block / 2;
  const __m256i low = _mm256_set1_epi32(15);
  for (int64_t j = r0; j < r1; ++j) {
    const uint8_t* row = w.packed + j * blocks * blob;
    float* out = dst + (j - r0) * w.k;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t i0 = b * w.block;
      if (i0 + w.block > w.k) {  // the last, partial block
        const int zp = ZeroPoint(w, j, b);
        const float s = w.scales[j * blocks + b];
        for (int64_t i = i0; i < w.k; ++i) {
          out[i] = static_cast<float>(Nibble(row + b * blob, i - i0) - zp) * s;
        }
        continue;
      }
      const __m256i zp = _mm256_set1_epi32(ZeroPoint(w, j, b));
      const __m256 s = _mm256_set1_ps(w.scales[j * blocks + b]);
      for (int64_t c = 0; c < w.block; c += 16) {
        const __m256i v = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + b * blob + c / 2)));
        const __m256 lo =
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(v, low), zp)), s);
        const __m256 hi =
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(v, 4), zp)), s);
        const __m256 a = _mm256_unpacklo_ps(lo, hi), bb = _mm256_unpackhi_ps(lo, hi);
        _mm256_storeu_ps(out + i0 + c, _mm256_permute2f128_ps(a, bb, 0x20));
        _mm256_storeu_ps(out + i0 + c + 8, _mm256_permute2f128_ps(a, bb, 0x31));
      }
    }
  }
}

DYNVM_AVX512 inline float HSum512(__m512 v) { return _mm512_reduce_add_ps(v); }

// RowsAvx2 on 16 lanes, 16 bytes (32 weights) per step, the block a multiple of 32, with the
// dequantization a table lookup: per row and block a 16-entry table holds (v - zp) * scale for
// v = 0..15 (ONNX Runtime's dequantized weights, exactly), and VPERMPS, which reads only the low
// four bits of each index, maps the widened bytes to their low nibbles' weights and, shifted right
// by 4, to their high nibbles'. Six instructions per 32 weights and row (load-widen, shift, two
// permutes, two FMAs), no conversion, no per-block scaling.
template <int R, bool kZeroPoints>
DYNVM_AVX512 inline void RowsAvx512(const float* xs, const Q4Weights& w, int64_t j,
                                    const float* bias, float* y) {
  const int64_t blocks = w.blocks(), blob = w.block / 2, zp_row = (blocks + 1) / 2;
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const uint8_t* p[R];
  __m512 even[R], odd[R];
  for (int r = 0; r < R; ++r) {
    p[r] = w.packed + (j + r) * blocks * blob;
    even[r] = _mm512_setzero_ps();
    odd[r] = _mm512_setzero_ps();
  }
  __m512 centered[R];  // v - zp for v = 0..15
  for (int r = 0; r < R; ++r) centered[r] = _mm512_sub_ps(iota, _mm512_set1_ps(8.0f));
  for (int64_t b = 0; b < blocks; ++b) {
    __m512 table[R];
    for (int r = 0; r < R; ++r) {
      if constexpr (kZeroPoints) {
        const uint8_t byte = w.zero_points[(j + r) * zp_row + b / 2];
        const int z = (b % 2 == 0) ? (byte & 15) : (byte >> 4);
        centered[r] = _mm512_sub_ps(iota, _mm512_set1_ps(static_cast<float>(z)));
      }
      table[r] = _mm512_mul_ps(centered[r], _mm512_set1_ps(w.scales[(j + r) * blocks + b]));
    }
    const float* xb = xs + b * w.block;
    for (int64_t c = 0; c < w.block; c += 32) {
      const __m512 xe = _mm512_loadu_ps(xb + c), xo = _mm512_loadu_ps(xb + c + 16);
      for (int r = 0; r < R; ++r) {
        const __m512i v = _mm512_cvtepu8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[r] + b * blob + c / 2)));
        even[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(v, table[r]), xe, even[r]);
        odd[r] =
            _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table[r]), xo, odd[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    y[j + r] = HSum512(_mm512_add_ps(even[r], odd[r])) + (bias != nullptr ? bias[j + r] : 0.0f);
  }
}

template <bool kZeroPoints>
DYNVM_AVX512 void RunRowsAvx512(int64_t rows, const float* xs, int64_t padded, const Q4Weights& w,
                                const float* bias, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  int64_t j = r0;
  for (; j + 4 <= r1; j += 4) {
    for (int64_t m = 0; m < rows; ++m) {
      RowsAvx512<4, kZeroPoints>(xs + m * padded, w, j, bias, y + m * ldy);
    }
  }
  for (; j < r1; ++j) {
    for (int64_t m = 0; m < rows; ++m) {
      RowsAvx512<1, kZeroPoints>(xs + m * padded, w, j, bias, y + m * ldy);
    }
  }
}

DYNVM_AVX512 void QGemvQ4Avx512(int64_t rows, const float* x, int64_t ldx, const Q4Weights& w,
                                const float* bias, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  const int64_t padded = w.blocks() * w.block;
  float* xs = Scratch(static_cast<size_t>(rows * padded));
  if (w.block % 32 != 0) {
    SplitActivations(rows, x, ldx, w.k, padded, 8, xs);
    RunRowsAvx2(rows, xs, padded, w, bias, r0, r1, y, ldy);
    return;
  }
  SplitActivations(rows, x, ldx, w.k, padded, 16, xs);
  if (w.zero_points != nullptr) {
    RunRowsAvx512<true>(rows, xs, padded, w, bias, r0, r1, y, ldy);
  } else {
    RunRowsAvx512<false>(rows, xs, padded, w, bias, r0, r1, y, ldy);
  }
}

// The AVX-512 dequantization: RowsAvx512's table lookup, the even and odd halves interleaved back
// by two VPERMT2PS; blocks of 16 run the AVX2 loop.
DYNVM_AVX512 void DequantizeRowsQ4Avx512(const Q4Weights& w, int64_t r0, int64_t r1, float* dst) {
  if (w.block % 32 != 0) {
    DequantizeRowsQ4Avx2(w, r0, r1, dst);
    return;
  }
  const int64_t blocks = w.blocks(), blob = w.block / 2;
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int64_t j = r0; j < r1; ++j) {
    const uint8_t* row = w.packed + j * blocks * blob;
    float* out = dst + (j - r0) * w.k;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t i0 = b * w.block;
      const int zp = ZeroPoint(w, j, b);
      const float s = w.scales[j * blocks + b];
      if (i0 + w.block > w.k) {  // the last, partial block
        for (int64_t i = i0; i < w.k; ++i) {
          out[i] = static_cast<float>(Nibble(row + b * blob, i - i0) - zp) * s;
        }
        continue;
      }
      const __m512 table = _mm512_mul_ps(
          _mm512_sub_ps(iota, _mm512_set1_ps(static_cast<float>(zp))), _mm512_set1_ps(s));
      for (int64_t c = 0; c < w.block; c += 32) {
        const __m512i v = _mm512_cvtepu8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * blob + c / 2)));
        const __m512 lo = _mm512_permutexvar_ps(v, table);
        const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
        _mm512_storeu_ps(out + i0 + c, _mm512_permutex2var_ps(lo, first, hi));
        _mm512_storeu_ps(out + i0 + c + 16, _mm512_permutex2var_ps(lo, second, hi));
      }
    }
  }
}

// ---- the panels of W^T (DequantizeQ4ToPanels) ----

// One block's scales and zero points for the 16 rows of a panel (rows past `valid`: 0 and 0, so
// that their zero bytes give +0).
struct PanelBlock {
  alignas(64) float s[16];
  alignas(64) int32_t zp[16];
};

inline void LoadPanelBlock(const Q4Weights& w, int64_t j0, int64_t valid, int64_t b,
                           PanelBlock* pb) {
  const int64_t blocks = w.blocks(), per_row = (blocks + 1) / 2;
  for (int64_t r = 0; r < 16; ++r) {
    pb->s[r] = r < valid ? w.scales[(j0 + r) * blocks + b] : 0.0f;
    pb->zp[r] = r < valid ? 8 : 0;
  }
  if (w.zero_points == nullptr) return;
  const uint8_t* zp = w.zero_points + j0 * per_row + b / 2;
  const int shift = b % 2 == 0 ? 0 : 4;
  for (int64_t r = 0; r < valid; ++r) pb->zp[r] = (zp[r * per_row] >> shift) & 15;
}

// v[c]'s byte r = v[r]'s byte c (16 x 16 bytes): four rounds of interleaving row i with row
// i + 8.
DYNVM_AVX2 DYNVM_ALWAYS_INLINE void TransposeBytes16(__m128i* v) {
#pragma GCC unroll 4
  for (int round = 0; round < 4; ++round) {
    __m128i o[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      o[2 * i] = _mm_unpacklo_epi8(v[i], v[i + 8]);
      o[2 * i + 1] = _mm_unpackhi_epi8(v[i], v[i + 8]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) v[i] = o[i];
  }
}

// Panel p's 16 rows over K's [i0, i1) (i0 a multiple of 32), 16 bytes (32 of K) at a time: the
// rows' bytes transposed, so that byte i of the group is one 16-byte vector over the rows (its low
// nibbles step 2 (o + i) of K, its high nibbles the next), handed to emit(column vector, step
// from i0, block's PanelBlock, whether the high step is below i1). Blocks of 16 change block half
// way through a group; a last group of 8 bytes (an odd number of blocks of 16) loads 8 bytes a
// row.
template <typename Emit>
DYNVM_AVX2 DYNVM_ALWAYS_INLINE void PanelGroups(const Q4Weights& w, int64_t n, int64_t p,
                                                int64_t i0, int64_t i1, Emit emit) {
  const int64_t blob = w.block / 2, row_bytes = w.blocks() * blob;
  const int64_t j0 = p * 16, valid = PanelRows(n, p);
  PanelBlock pb;
  int64_t current = -1;
  alignas(64) __m128i v[16];
  for (int64_t o = i0 / 2; 2 * o < i1; o += 16) {
    const int64_t bytes = std::min<int64_t>(16, row_bytes - o);
    for (int64_t r = 0; r < 16; ++r) {
      if (r >= valid) {
        v[r] = _mm_setzero_si128();
        continue;
      }
      const auto* src = reinterpret_cast<const __m128i*>(w.packed + (j0 + r) * row_bytes + o);
      v[r] = bytes == 16 ? _mm_loadu_si128(src) : _mm_loadl_epi64(src);
    }
    TransposeBytes16(v);
    const int64_t end = std::min(bytes, (i1 + 1) / 2 - o);
    if (end == 16 && blob >= 16) {  // a whole group in one block: the steps unrolled
      if (o / blob != current) {
        current = o / blob;
        LoadPanelBlock(w, j0, valid, current, &pb);
      }
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) emit(v[i], 2 * (o + i) - i0, pb, 2 * (o + i) + 1 < i1);
      continue;
    }
    for (int64_t i = 0; i < end; ++i) {
      const int64_t b = (o + i) / blob;
      if (b != current) {
        LoadPanelBlock(w, j0, valid, b, &pb);
        current = b;
      }
      emit(v[i], 2 * (o + i) - i0, pb, 2 * (o + i) + 1 < i1);
    }
  }
}

DYNVM_AVX2 void DequantizeQ4ToPanelsAvx2(const Q4Weights& w, int64_t n, int64_t p0, int64_t p1,
                                         int64_t i0, int64_t i1, float* dst) {
  const __m128i low = _mm_set1_epi8(15);
  for (int64_t p = p0; p < p1; ++p, dst += 16 * (i1 - i0)) {
    float* out = dst;
    PanelGroups(
        w, n, p, i0, i1, [&](__m128i t, int64_t i, const PanelBlock& pb, bool high) DYNVM_AVX2 {
          const __m256i z0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pb.zp));
          const __m256i z1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pb.zp + 8));
          const __m256 s0 = _mm256_load_ps(pb.s), s1 = _mm256_load_ps(pb.s + 8);
          auto put = [&](__m128i q, float* at) DYNVM_AVX2 {
            const __m256i a = _mm256_cvtepu8_epi32(q),
                          b = _mm256_cvtepu8_epi32(_mm_srli_si128(q, 8));
            _mm256_storeu_ps(at, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(a, z0)), s0));
            _mm256_storeu_ps(at + 8,
                             _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(b, z1)), s1));
          };
          put(_mm_and_si128(t, low), out + i * 16);
          if (high) put(_mm_and_si128(_mm_srli_epi16(t, 4), low), out + (i + 1) * 16);
        });
  }
}

DYNVM_AVX512 void DequantizeQ4ToPanelsAvx512(const Q4Weights& w, int64_t n, int64_t p0, int64_t p1,
                                             int64_t i0, int64_t i1, float* dst) {
  const __m128i low = _mm_set1_epi8(15);
  for (int64_t p = p0; p < p1; ++p, dst += 16 * (i1 - i0)) {
    float* out = dst;
    PanelGroups(
        w, n, p, i0, i1, [&](__m128i t, int64_t i, const PanelBlock& pb, bool high) DYNVM_AVX512 {
          const __m512i z = _mm512_load_si512(pb.zp);
          const __m512 s = _mm512_load_ps(pb.s);
          auto put = [&](__m128i q, float* at) DYNVM_AVX512 {
            _mm512_storeu_ps(
                at,
                _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(q), z)), s));
          };
          put(_mm_and_si128(t, low), out + i * 16);
          if (high) put(_mm_and_si128(_mm_srli_epi16(t, 4), low), out + (i + 1) * 16);
        });
  }
}

#endif  // DYNVM_CPU_X86

}  // namespace

namespace internal {

void FillQ4Gemv(Isa isa, Dispatch* d) {
  d->qgemv_q4 = &QGemvQ4Portable;
  d->dequantize_rows_q4 = &DequantizeRowsQ4Portable;
  d->dequantize_q4_panels = &DequantizeQ4ToPanelsPortable;
  d->qgemv_q4_path = "portable";
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) {
    d->qgemv_q4 = &QGemvQ4Avx2;
    d->dequantize_rows_q4 = &DequantizeRowsQ4Avx2;
    d->dequantize_q4_panels = &DequantizeQ4ToPanelsAvx2;
    d->qgemv_q4_path = "avx2";
  }
  if (isa >= Isa::kAvx512) {
    d->qgemv_q4 = &QGemvQ4Avx512;
    d->dequantize_rows_q4 = &DequantizeRowsQ4Avx512;
    d->dequantize_q4_panels = &DequantizeQ4ToPanelsAvx512;
    d->qgemv_q4_path = "avx512";
  }
#else
  (void)isa;
#endif
}

}  // namespace internal

void QGemvQ4(int64_t rows, const float* x, int64_t ldx, const Q4Weights& w, const float* bias,
             int64_t r0, int64_t r1, float* y, int64_t ldy) {
  if (rows <= 0 || r1 <= r0) return;
  internal::Table().qgemv_q4(rows, x, ldx, w, bias, r0, r1, y, ldy);
}

void DequantizeRowsQ4(const Q4Weights& w, int64_t r0, int64_t r1, float* dst) {
  if (r1 > r0) internal::Table().dequantize_rows_q4(w, r0, r1, dst);
}

void DequantizeQ4ToPanels(const Q4Weights& w, int64_t n, int64_t p0, int64_t p1, int64_t i0,
                          int64_t i1, float* dst) {
  if (p1 > p0 && i1 > i0) internal::Table().dequantize_q4_panels(w, n, p0, p1, i0, i1, dst);
}

const char* QGemvQ4Path() { return internal::Table().qgemv_q4_path; }

}  // namespace dynvm::cpu
