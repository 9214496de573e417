// 4-bit block-quantized products with int8 activations: ONNX Runtime's accuracy_level 4
// (q4gemv.h). Layout and tuning notes:
//
// A quantized activation row is, per 64 columns c (the padding of the last block and of the
// last 64 zero), 32 bytes of its even columns 64c + 2t then 32 bytes of its odd columns 64c + 2t
// + 1 (t < 32): the order in which 32 bytes of 4-bit weights (64 consecutive values of a row,
// element 2t in the low nibble of byte t) hold them, so the weights are never shuffled: the low
// nibbles (AND 15) multiply the even half and the high nibbles the odd half. After the values
// come the row's block scales (f32) and each block's sum of its int8 values (int32), which turns
// the zero point into one correction per block: sum_i q (w4 - zp) = sum_i q w4 - zp sum_i q.
//
// Blocks of 32 hold between the values and those, per 8 blocks, the blocks' scales and sums in
// the lane order of the GEMV's reduction ([b0 b2 b4 b6 b1 b3 b5 b7], below).
//
// Few rows (a decode step, up to kGemmMinRows - 1): one weight row at a time, every activation row
// over it while it is in L1, and the row two ahead prefetched (a row of a few KB is too short for
// the hardware prefetcher to ramp up; four rows side by side, four streams, ran at half the rate).
// AVX-512 VNNI: VPDPBUSD (u8 weights times s8 activations, four products per int32 lane) on
// 256-bit vectors (Zen 4 runs 512-bit VNNI at half rate), the nibbles split by AND 15 and a shift
// by 4 then AND 15: a 32-byte step is a load, three splitting instructions and two VPDPBUSD. AVX2:
// VPMADDUBSW of the two nibble halves (pairs of products in int16: at most 2 15 127, no
// saturation), added in int16 and widened by VPMADDWD. The per-block work is batched over eight
// blocks: blocks of 32 take four 32-byte steps into four independent int32 vectors (step i's lanes
// 0-3 are block 2i, 4-7 block 2i + 1), two rounds of VPHADDD make one lane per block, and the
// zero-point corrections, the conversion, the product of the two scales and the FMA run once per
// eight blocks; blocks of 64 and more sum each block's steps in two chains (one VPDPBUSD chain per
// nibble half) and reduce eight blocks the same way (rows of fewer than eight such blocks run one
// block at a time: the eight-block reduction made them 2x slower). Before (one block pair scaled
// per step: a convert, a multiply, an FMA and the spread scales' loads per 32 bytes; a block's
// steps in one chain of dependent VPDPBUSD) and after, N = K = 4096, 1 thread, Zen 4, weights
// from memory (docs/results/int4-gemm-gemv-s6-2026-11-29.txt): blocks of 32 23.1 -> 23.9 GB/s,
// with zero points 22.1 -> 27.5, blocks of 128 21.7 -> 23.0; with the weights in L2 (N 256, K
// 2048) blocks of 32 31.7 -> 39.9 GB/s. A pure read of the same bytes runs at 30-32 GB/s
// (cpu_q4gemv_benchmark's "read b32"): the GEMV is within 75-85% of it.
//
// Many rows (a prompt, kGemmMinRows and more): the blocked GEMM of q4gemv_int8.inc. Panels of 24
// weight rows (16 on AVX2) are unpacked once per call into L2 as bytes 0..15 in the activations'
// position order, four positions of one column per int32 lane (an 8 x 4 int32 transpose per 16
// weight bytes of eight rows), and a tile of 4 activation rows x 24 columns (2 x 16 on AVX2) of
// int32 accumulators runs over it: per group of four positions, 3 weight vectors, one broadcast
// per row and 12 VPDPBUSD; per block one zero-point correction, conversion and FMA per
// accumulator. M 128, K 512, N 1408, 1 thread: blocks of 32 1755 -> 612 us (53 -> 151 G
// multiply-adds/s), blocks of 128 1414 -> 518 us; the row kernel before it ran four activation
// rows per weight-row load and scaled every block pair per activation row. From 12 rows on it wins
// (M 8: 124 against 90 us, M 16: 150 against 179 at that shape).
//
// Quantizing the activations is 1/N of the multiply-adds but was not 1/N of the time: the scalar
// loop called nearbyintf through the PLT per value, 8.9 us a K 2048 row and 23.9 us at K 5632,
// about 5% of a 1.6 GB int4 decode step (some 56 products a token) and 63 ms of its 128-token
// prompt. From AVX2 on it runs 16 values at a time (VCVTPS2DQ rounds half to even, as nearbyint
// does under the default rounding mode): 0.79 and 2.13 us, the same bytes (q4gemv_test). The 1.6 GB
// model at 1 thread, alternating builds: 93-95 -> 105-109 tokens/s (docs/results/
// llm-s6b-1600mb-2026-11-29.txt).
//
// Tried on the decode GEMV and left out (nothing beyond the noise, or worse): a prefetch distance
// of 1, 4 or 8 rows (1 and 8: 5-15% slower), PREFETCHT1 (10-15% slower) or PREFETCHNTA (the
// same) instead of PREFETCHT0, no software prefetch (30% slower), GF2P8AFFINEQB (GFNI) taking the
// high nibbles in one instruction instead of a shift and an AND (in L2: 36.6-36.8 against 36.3-37.1
// GB/s), and one load of each weight vector instead of the two the compiler folds into its AND
// and shift. The symmetric GEMV looking 15% slower than the one with zero points in
// cpu_q4gemv_benchmark was the copies' memory, not the code: the two loops differ only in the
// correction (a shift against the zero-point unpack and a multiply), and an unused zero-point
// allocation in the symmetric copies swapped which one was faster. s9 (docs/results/
// int4-gemv-s9-2026-11-30.txt): two or four weight rows per iteration sharing each activation
// load (no gain in L2, half the rate from memory: interleaved row streams), the high nibble as
// AND 0xF0 with no shift (no gain), and each VPHADDD as two VSHUFPS and a VPADDD (+6% in L2;
// from memory 3-6% faster at N 5632 x K 2048, 15-22% slower at N 2048 x K 5632). In L2 the
// reduction's VPHADDD and the nibble split are what cost: without them (wrong answers) the loop
// ran 13% and 9% faster. s10 (docs/results/int4-gemv-s10-2026-11-30.txt): a compile-time layout
// with rows 2p and 2p + 1 in one byte's two nibbles, int32 lanes spanning 8 or 16 blocks (no
// horizontal adds; the high row's block integer is (dot(byte) - dot(low nibble)) >> 4), in L2
// 1.26x at blocks of 32 and 2.5x at 128, but from memory at blocks of 32 0.75-1.19x (1 thread)
// and 0.91-1.26x (2 threads, the host's bandwidth shared): not adopted.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/q4gemv.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu {
namespace {

// One quantized activation row: values, then (blocks of 32) per 8 blocks their scales and sums
// in the lane order of the kernel's reduction of four 32-byte steps ([b0 b2 b4 b6 b1 b3 b5 b7]:
// the kernel loads them as they are), then the block scales and sums.
struct Layout {
  int64_t blocks, q_bytes, spread_bytes, row_bytes;
  explicit Layout(const Q4Weights& w)
      : blocks(w.blocks()),
        q_bytes((blocks * w.block + 63) / 64 * 64),
        spread_bytes(w.block == 32 ? (blocks + 7) / 8 * 64 : 0),
        row_bytes((q_bytes + spread_bytes + 8 * blocks + 63) / 64 * 64) {}
  // Group g of eight blocks: 8 scales, then 8 sums.
  const float* SpreadScales(const uint8_t* row, int64_t g) const {
    return reinterpret_cast<const float*>(row + q_bytes + 64 * g);
  }
  const int32_t* SpreadSums(const uint8_t* row, int64_t g) const {
    return reinterpret_cast<const int32_t*>(row + q_bytes + 64 * g + 32);
  }
  static const int8_t* Q(const uint8_t* row) { return reinterpret_cast<const int8_t*>(row); }
  const float* Scales(const uint8_t* row) const {
    return reinterpret_cast<const float*>(row + q_bytes + spread_bytes);
  }
  const int32_t* Sums(const uint8_t* row) const {
    return reinterpret_cast<const int32_t*>(row + q_bytes + spread_bytes + 4 * blocks);
  }
};

// Where column i of a row is in its values.
inline int64_t Pos(int64_t i) { return (i & ~int64_t{63}) + (i & 1) * 32 + ((i & 63) >> 1); }

// From this many activation rows the blocked GEMM runs (q4gemv_int8.inc).
constexpr int64_t kGemmMinRows = 12;

// Where block b's positions start in an activation row (blocks of 16 and 32 hold their even
// columns there and their odd columns 32 positions on).
inline int64_t BlockBase(int64_t block, int64_t b) {
  return block >= 64 ? b * block : 64 * (b * block / 64) + (b * block % 64) / 2;
}

inline int ZeroPointOf(const Q4Weights& w, int64_t j, int64_t b) {
  if (w.zero_points == nullptr) return 8;
  const uint8_t byte = w.zero_points[j * ((w.blocks() + 1) / 2) + b / 2];
  return (b % 2 == 0) ? (byte & 15) : (byte >> 4);
}

void QGemvQ4Int8Portable(int64_t rows, const uint8_t* xq, const Q4Weights& w, const float* bias,
                         int64_t r0, int64_t r1, float* y, int64_t ldy) {
  const Layout layout(w);
  const int64_t blocks = layout.blocks, blob = w.block / 2;
  for (int64_t m = 0; m < rows; ++m) {
    const uint8_t* xrow = xq + m * layout.row_bytes;
    const int8_t* q = Layout::Q(xrow);
    const float* sa = layout.Scales(xrow);
    for (int64_t j = r0; j < r1; ++j) {
      const uint8_t* row = w.packed + j * blocks * blob;
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const int zp = ZeroPointOf(w, j, b);
        const int64_t i0 = b * w.block, i1 = std::min(w.k, i0 + w.block);
        int32_t d = 0;
        for (int64_t i = i0; i < i1; ++i) {
          const uint8_t byte = row[i / 2];
          const int v = (i % 2 == 0) ? (byte & 15) : (byte >> 4);
          d += q[Pos(i)] * (v - zp);
        }
        acc += (sa[b] * w.scales[j * blocks + b]) * static_cast<float>(d);
      }
      y[m * ldy + j] = acc + (bias != nullptr ? bias[j] : 0.0f);
    }
  }
}

// ORT's quantizer (its QuantizeARow_CompInt8) on block [i0, i1) of x: the block's largest
// magnitude amax, scale amax / 127, values round-half-even(x * (127 / amax)) at their positions
// in q (Pos), their sum. A block holding NaN or infinity gets a NaN scale and zero values (q is
// zero on entry).
void QuantizeQ8BlockPortable(const float* x, int64_t i0, int64_t i1, int8_t* q, float* scale,
                             int32_t* sum) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t i = i0; i < i1; ++i) {
    const float a = std::fabs(x[i]);
    finite = finite && a <= std::numeric_limits<float>::max();
    amax = a > amax ? a : amax;
  }
  *sum = 0;
  if (!finite) {
    *scale = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  *scale = amax / 127.0f;
  const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
  int32_t total = 0;
  for (int64_t i = i0; i < i1; ++i) {
    const int v = static_cast<int>(std::nearbyint(x[i] * inverse));
    q[Pos(i)] = static_cast<int8_t>(v);
    total += v;
  }
  *sum = total;
}

#if DYNVM_CPU_X86

// The same on AVX2, 16 values at a time (blocks of 16 and more start at multiples of 16; a
// partial last block's remainder runs the portable loop's steps): VCVTPS2DQ rounds half to even
// under the default rounding mode, as nearbyint does; the 16 bytes are split into their 8 even
// and 8 odd columns, which Pos puts 32 bytes apart. Values are at most 127 in magnitude (x *
// (127 / amax) rounds to at most 127), so the saturating packs are exact.
DYNVM_AVX2 void QuantizeQ8BlockAvx2(const float* x, int64_t i0, int64_t i1, int8_t* q, float* scale,
                                    int32_t* sum) {
  const int64_t whole = i0 + (i1 - i0) / 16 * 16;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 big = _mm256_set1_ps(std::numeric_limits<float>::max());
  __m256 vmax = _mm256_setzero_ps();
  __m256 ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int64_t i = i0; i < whole; i += 8) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
    ok = _mm256_and_ps(ok, _mm256_cmp_ps(a, big, _CMP_LE_OQ));  // false for NaN and infinity
    vmax = _mm256_max_ps(vmax, a);
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  float amax = _mm_cvtss_f32(m4);
  bool finite = _mm256_movemask_ps(ok) == 0xff;
  for (int64_t i = whole; i < i1; ++i) {
    const float a = std::fabs(x[i]);
    finite = finite && a <= std::numeric_limits<float>::max();
    amax = a > amax ? a : amax;
  }
  *sum = 0;
  if (!finite) {
    *scale = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  *scale = amax / 127.0f;
  const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
  const __m256 inv = _mm256_set1_ps(inverse);
  const __m128i split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  __m256i vsum = _mm256_setzero_si256();
  for (int64_t i = i0; i < whole; i += 16) {
    const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), inv));
    vsum = _mm256_add_epi32(vsum, _mm256_add_epi32(a, b));
    const __m128i a16 = _mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    const __m128i b16 = _mm_packs_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
    const __m128i v = _mm_shuffle_epi8(_mm_packs_epi16(a16, b16), split);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + Pos(i)), v);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + Pos(i + 1)), _mm_unpackhi_epi64(v, v));
  }
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(vsum), _mm256_extracti128_si256(vsum, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
  int32_t total = _mm_cvtsi128_si32(s4);
  for (int64_t i = whole; i < i1; ++i) {
    const int v = static_cast<int>(std::nearbyint(x[i] * inverse));
    q[Pos(i)] = static_cast<int8_t>(v);
    total += v;
  }
  *sum = total;
}

DYNVM_AVX2 inline float HSumAvx2(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
DYNVM_AVX512_VNNI inline float HSumVnni(__m256 v) { return HSumAvx2(v); }

// The dot steps: Split(v, a, b) takes 32 weight bytes apart into their low (a) and high (b)
// nibbles, times kScale, once for all activation rows; Pair(acc, a, b, xlo, xhi) adds a * xlo +
// b * xhi into int32 lanes; Finish(acc) divides by kScale (exact).
struct DotAvx2 {
  static constexpr int kScale = 1;
  static DYNVM_AVX2 DYNVM_ALWAYS_INLINE void Split(__m256i v, __m256i& a, __m256i& b) {
    const __m256i low = _mm256_set1_epi8(15);
    a = _mm256_and_si256(v, low);
    b = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
  }
  static DYNVM_AVX2 DYNVM_ALWAYS_INLINE __m256i Pair(__m256i acc, __m256i a, __m256i b, __m256i xlo,
                                                     __m256i xhi) {
    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(a, xlo), _mm256_maddubs_epi16(b, xhi));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  }
  static DYNVM_AVX2 DYNVM_ALWAYS_INLINE void PairApart(__m256i& acc, __m256i& /*acc2*/, __m256i a,
                                                       __m256i b, __m256i xlo, __m256i xhi) {
    acc = Pair(acc, a, b, xlo, xhi);
  }
  static DYNVM_AVX2 DYNVM_ALWAYS_INLINE __m256i Finish(__m256i acc) { return acc; }
  // The GEMM (q4gemv_int8.inc): 2 x 16 accumulators (16 registers), int16 dot steps.
  static constexpr int kGemmRows = 2, kGemmVectors = 2;
  static constexpr bool kGemmInt16 = true;
  static DYNVM_AVX2 DYNVM_ALWAYS_INLINE __m256i GemmStep(__m256i acc, __m256i w, __m256i x) {
    return _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, x));
  }
  static DYNVM_AVX2 DYNVM_ALWAYS_INLINE __m256i GemmWiden(__m256i acc, __m256i t) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(t, _mm256_set1_epi16(1)));
  }
};

// VPDPBUSD on the two nibbles (AND 15 and, shifted right by 4, AND 15): four products per int32
// lane and step, no widening.
struct DotVnni {
  static constexpr int kScale = 1;
  static DYNVM_AVX512_VNNI DYNVM_ALWAYS_INLINE void Split(__m256i v, __m256i& a, __m256i& b) {
    const __m256i low = _mm256_set1_epi8(15);
    a = _mm256_and_si256(v, low);
    b = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
  }
  static DYNVM_AVX512_VNNI DYNVM_ALWAYS_INLINE __m256i Pair(__m256i acc, __m256i a, __m256i b,
                                                            __m256i xlo, __m256i xhi) {
    return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(acc, a, xlo), b, xhi);
  }
  // Pair into two accumulators (two dependency chains).
  static DYNVM_AVX512_VNNI DYNVM_ALWAYS_INLINE void PairApart(__m256i& acc, __m256i& acc2,
                                                              __m256i a, __m256i b, __m256i xlo,
                                                              __m256i xhi) {
    acc = _mm256_dpbusd_epi32(acc, a, xlo);
    acc2 = _mm256_dpbusd_epi32(acc2, b, xhi);
  }
  static DYNVM_AVX512_VNNI DYNVM_ALWAYS_INLINE __m256i Finish(__m256i acc) { return acc; }
  // The GEMM: 4 x 24 accumulators (32 registers with AVX-512VL), VPDPBUSD into int32 directly.
  static constexpr int kGemmRows = 4, kGemmVectors = 3;
  static constexpr bool kGemmInt16 = false;
  static DYNVM_AVX512_VNNI DYNVM_ALWAYS_INLINE __m256i GemmWiden(__m256i acc, __m256i t) {
    return _mm256_add_epi32(acc, t);  // not used: VPDPBUSD adds into int32 directly
  }
  static DYNVM_AVX512_VNNI DYNVM_ALWAYS_INLINE __m256i GemmStep(__m256i acc, __m256i w, __m256i x) {
    return _mm256_dpbusd_epi32(acc, w, x);
  }
};

#define Q4I8_TARGET DYNVM_AVX2
#define Q4I8_NAME(x) x##Avx2
#define Q4I8_DOT DotAvx2
#include "kernels/cpu/q4gemv_int8.inc"  // NOLINT(build/include)
#undef Q4I8_TARGET
#undef Q4I8_NAME
#undef Q4I8_DOT

#define Q4I8_TARGET DYNVM_AVX512_VNNI
#define Q4I8_NAME(x) x##Vnni
#define Q4I8_DOT DotVnni
#include "kernels/cpu/q4gemv_int8.inc"  // NOLINT(build/include)
#undef Q4I8_TARGET
#undef Q4I8_NAME
#undef Q4I8_DOT

#endif  // DYNVM_CPU_X86

}  // namespace

namespace internal {

void FillQ4GemvInt8(Isa isa, Dispatch* d) {
  d->qgemv_q4_int8 = &QGemvQ4Int8Portable;
  d->qgemv_q4_int8_path = "portable";
  d->quantize_q8_block = &QuantizeQ8BlockPortable;
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) {
    d->quantize_q8_block = &QuantizeQ8BlockAvx2;
    d->qgemv_q4_int8 = &QGemvQ4Int8Avx2;
    d->qgemv_q4_int8_path = "avx2";
  }
  if (isa >= Isa::kAvx512Vnni) {
    d->qgemv_q4_int8 = &QGemvQ4Int8Vnni;
    d->qgemv_q4_int8_path = "avx512_vnni";
  }
#else
  (void)isa;
#endif
}

}  // namespace internal

int64_t Q8ActivationRowBytes(const Q4Weights& w) { return Layout(w).row_bytes; }

// Each block by the level's quantizer (QuantizeQ8BlockPortable: ORT's QuantizeARow_CompInt8),
// then (blocks of 32) the spread copies of the scales and sums.
void QuantizeActivationsQ8(int64_t rows, const float* x, int64_t ldx, const Q4Weights& w,
                           uint8_t* dst) {
  const Layout layout(w);
  const auto quantize = internal::Table().quantize_q8_block;
  for (int64_t m = 0; m < rows; ++m) {
    uint8_t* row = dst + m * layout.row_bytes;
    std::memset(row, 0, static_cast<size_t>(layout.row_bytes));
    auto* q = reinterpret_cast<int8_t*>(row);
    auto* sa = const_cast<float*>(layout.Scales(row));
    auto* sums = const_cast<int32_t*>(layout.Sums(row));
    const float* xr = x + m * ldx;
    for (int64_t b = 0; b < layout.blocks; ++b) {
      quantize(xr, b * w.block, std::min(w.k, (b + 1) * w.block), q, sa + b, sums + b);
    }
    if (layout.spread_bytes == 0) continue;
    for (int64_t b = 0; b < layout.blocks; ++b) {  // blocks of 32: the lanes of 8 blocks
      const int64_t lane = (b % 8) / 2 + (b % 2) * 4;
      const_cast<float*>(layout.SpreadScales(row, b / 8))[lane] = sa[b];
      const_cast<int32_t*>(layout.SpreadSums(row, b / 8))[lane] = sums[b];
    }
  }
}

void QGemvQ4Int8(int64_t rows, const uint8_t* xq, const Q4Weights& w, const float* bias, int64_t r0,
                 int64_t r1, float* y, int64_t ldy) {
  if (rows <= 0 || r1 <= r0) return;
  internal::Table().qgemv_q4_int8(rows, xq, w, bias, r0, r1, y, ldy);
}

const char* QGemvQ4Int8Path() { return internal::Table().qgemv_q4_int8_path; }

}  // namespace dynvm::cpu
