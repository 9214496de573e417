// dynvm's f32 GEMM on prepacked weights (packed_gemm.h). Tuning notes:
// - Why: dnnl_sgemm packs B again on every call, and a Linear's epilogue after it reads C back
//   from L3 when C outgrows L2 (a [128, 1024] GELU layer's Y is 512 KiB: that pass took about
//   40% of the layer). Here B is packed once and the epilogue runs on each rows x 128-column
//   block right after its last K block, while it is in L1/L2.
// - AVX2: a 6x16 micro-kernel (12 accumulators, two panel loads and six broadcasts per step)
//   over blocks of at most 192 rows (equal blocks: each reads all of packed B once), 128 columns
//   and 256 of K. On the AVX2 EPYC (tools/bench/linear_packed_ab.py, 1 thread,
//   docs/results/avx2-linear-packed-ab-2026-11-28.txt) the BERT-like model's [128, 256] x
//   [256, 1024] GELU layer went 1861 -> 1031 us (1.81x), the model at 1x128 1.24x, the
//   classifier at 1x128 1.16x; at batch 8 x 64 (M = 512) 1.01-1.05x. Linears without an
//   activation measured 0.84-1.42x dnnl_sgemm's time there (no consistent gain): a bias alone is
//   a cheap pass. Tried for dynvm::Attention's per-unit products too (K and V packed once per
//   unit): 0.75-0.94x dnnl_sgemm (packing a block's rows costs more than the call overhead it
//   saves).
// - AVX-512 (s9, Zen 4 EPYC, dnnl_choice_benchmark BM_Linear, weights cold): two panels (32
//   columns) by up to two row tiles (12 rows, 24 accumulators), one broadcast of A for two FMAs;
//   a last single panel by up to four tiles (24 rows). The kernels are instantiated for every row
//   count (1-12, 1-24), so a tail computes only its rows (the tiles' padding rows were computed
//   before: 8 rows cost 12 rows' FMAs). Products of at most kPrefetchRows rows prefetch each
//   panel kAheadB steps ahead (the hardware prefetcher stops at 4 KiB pages; such a product's
//   time is the weights' stream). Against the one-panel 24x16 kernel with 6-row tiles, a
//   [17, 768] x [768, 2304] product went 1.19 -> 0.74 ms (1 thread), [64, ...] 2.83 -> 2.42,
//   [256, ...] 10.3 -> 8.8. The same packed layouts as AVX2, and each element the same FMA chain
//   in K order, so the same bits. Where it runs: kernels/dnnl/choice.h and docs/kernels.md.
// - Portable: plain loops, for tests (the rule sends a CPU without AVX2 to dnnl_sgemm).
#include "kernels/cpu/packed_gemm.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu::packed_gemm {
namespace {

constexpr int kRows = 6;  // rows per AVX2 micro-kernel tile

// Packed A: a row block's rows, copied (not transposed) in segments of kSegment of K: segment s
// of a block of `rows` rows at s * rows * kStride, its row r at r * kStride. The micro-kernels
// broadcast A[r][p] from a + r * kStride + p (a compile-time displacement per row, one pointer
// for all of them). kStride = kSegment + 16: rows 1088 bytes apart fall in different L1 sets (a
// plain A with rows a multiple of 4 KiB apart, K 1024 or 3072, would put a tile's rows in one
// set). A segment per row is one memcpy: the former [depth][6] tiles were a scalar transpose
// that took a third of a [3136, 384] x [384, 96] product's time.
constexpr int64_t kSegment = 256;
constexpr int64_t kStride = kSegment + 16;

constexpr int64_t kPackAhead = 4;          // rows PackA prefetches ahead
constexpr int64_t kSpanBytes = 512 << 10;  // C of a column span (Multiply)

int64_t Segments(int64_t depth) { return (depth + kSegment - 1) / kSegment; }

// The rows of A that the next row block will pack, for the micro-kernels to prefetch one line a
// step while they compute this block (PackA then reads them from the caches, not from memory: a
// [3136, 384] x [384, 96] product spent a sixth of its time in PackA's reads). Set by Multiply
// per row block; empty for the last.
struct NextA {
  const char* next = nullptr;
  const char* end = nullptr;
  int64_t lines = 0, steps = 1;  // the rate: `lines` over the block's `steps` (an estimate)
};
thread_local NextA next_a;

// The lines a micro-kernel call of `depth` steps prefetches (at most one a step): their start
// and count, taken off next_a.
struct Prefetch {
  const char* at;
  int64_t lines;
};
inline Prefetch TakePrefetch(int64_t depth) {
  NextA& n = next_a;
  const int64_t lines =
      n.next < n.end
          ? std::min({depth, (n.end - n.next + 63) / 64, (depth * n.lines + n.steps - 1) / n.steps})
          : 0;
  const Prefetch p{n.next, lines};
  n.next += lines * 64;
  return p;
}
// Packs rows [0, rows) x columns [0, depth) of A (row stride lda) as above.
void PackA(int64_t rows, int64_t depth, const float* a, int64_t lda, float* out) {
  for (int64_t s = 0; s < depth; s += kSegment) {
    const size_t bytes = static_cast<size_t>(std::min(kSegment, depth - s)) * sizeof(float);
    float* seg = out + (s / kSegment) * rows * kStride;
    for (int64_t r = 0; r < rows; ++r) {
#if DYNVM_CPU_X86
      if (r + kPackAhead < rows) {
        const char* ahead = reinterpret_cast<const char*>(a + (r + kPackAhead) * lda + s);
        for (size_t l = 0; l < bytes; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
      }
#endif
      std::memcpy(seg + r * kStride, a + r * lda + s, bytes);
    }
  }
}

// ---- portable ----

// C[rows, cols] (= or +=) A[rows, depth] (PackA, segments seg floats apart) x panel
// [depth][16], all rows.
void PanelRowsPortable(int64_t rows, int64_t depth, const float* a, int64_t seg, const float* b,
                       float* c, int64_t ldc, int64_t cols, bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    float acc[kPanel] = {};
    for (int64_t p = 0; p < depth; ++p) {
      const float av = a[(p / kSegment) * seg + r * kStride + p % kSegment];
      for (int64_t j = 0; j < kPanel; ++j) acc[j] += av * b[p * kPanel + j];
    }
    float* cr = c + r * ldc;
    for (int64_t j = 0; j < cols; ++j) cr[j] = accumulate ? cr[j] + acc[j] : acc[j];
  }
}

// The GEMV on packed panels: eight accumulator chains over K (step q into chain q mod 8), added
// pairwise at the end: ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)).
constexpr int kChains = 8;
constexpr int64_t kAhead = 64;  // steps of 16 floats the AVX-512 GEMV prefetches ahead
// The GEMM's micro-kernels of at most kPrefetchRows rows (a product of few rows: the weights'
// stream is its time) prefetch each panel kAheadB steps (of 64 bytes) ahead.
constexpr int64_t kAheadB = 32;
constexpr int kPrefetchRows = 12;

void PanelGemvPortable(int64_t k, const float* x, const float* b, int64_t panels, int64_t cols,
                       float* y) {
  for (int64_t p = 0; p < panels; ++p, b += k * kPanel) {
    float acc[kChains][kPanel] = {};
    for (int64_t q = 0; q < k; ++q) {
      for (int64_t j = 0; j < kPanel; ++j) acc[q % kChains][j] += x[q] * b[q * kPanel + j];
    }
    const int64_t width = std::min(kPanel, cols - p * kPanel);
    for (int64_t j = 0; j < width; ++j) {
      y[p * kPanel + j] = ((acc[0][j] + acc[1][j]) + (acc[2][j] + acc[3][j])) +
                          ((acc[4][j] + acc[5][j]) + (acc[6][j] + acc[7][j]));
    }
  }
}

#if DYNVM_CPU_X86

// ---- AVX2 ----

// Lanes [0, n) of a mask vector set (n in 0..8, clamped).
DYNVM_AVX2 DYNVM_ALWAYS_INLINE __m256i LaneMask(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(n, 0, 8))), idx);
}

// C[R rows, cols] (= or +=) A[R rows, depth] x panel [depth][16], A as PackA wrote it (row r at
// a + r * kStride, segments of kSegment steps seg floats apart). cols 16: plain stores; fewer
// (the last panel of a ragged N): masked loads and stores of C only. The accumulators are named
// variables (GCC kept an array of them on the stack, a store per FMA).
template <int R>
DYNVM_AVX2 void MicroAvx2(int64_t depth, const float* a, int64_t seg, const float* b, float* c,
                          int64_t ldc, int64_t cols, bool accumulate, Prefetch pf) {
  static_assert(R >= 1 && R <= kRows);
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t q = 0; q < depth; q += kSegment, a += seg, b += kSegment * kPanel) {
    const int64_t steps = std::min(kSegment, depth - q);
    for (int64_t p = 0; p < steps; ++p) {
      if (q + p < pf.lines) _mm_prefetch(pf.at + (q + p) * 64, _MM_HINT_T0);
      const __m256 b0 = _mm256_loadu_ps(b + p * kPanel);
      const __m256 b1 = _mm256_loadu_ps(b + p * kPanel + 8);
      const float* ap = a + p;
#define DYNVM_ROW(r)                                         \
  if constexpr (R > r) {                                     \
    const __m256 av = _mm256_broadcast_ss(ap + r * kStride); \
    c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);              \
    c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);              \
  }
      DYNVM_ROW(0)
      DYNVM_ROW(1)
      DYNVM_ROW(2)
      DYNVM_ROW(3)
      DYNVM_ROW(4)
      DYNVM_ROW(5)
#undef DYNVM_ROW
    }
  }
  const bool full = cols == kPanel;
  const __m256i m0 = LaneMask(cols), m1 = LaneMask(cols - 8);
#define DYNVM_STORE(r)                                                    \
  if constexpr (R > r) {                                                  \
    float* cr = c + r * ldc;                                              \
    if (full) {                                                           \
      if (accumulate) {                                                   \
        c##r##0 = _mm256_add_ps(c##r##0, _mm256_loadu_ps(cr));            \
        c##r##1 = _mm256_add_ps(c##r##1, _mm256_loadu_ps(cr + 8));        \
      }                                                                   \
      _mm256_storeu_ps(cr, c##r##0);                                      \
      _mm256_storeu_ps(cr + 8, c##r##1);                                  \
    } else {                                                              \
      if (accumulate) {                                                   \
        c##r##0 = _mm256_add_ps(c##r##0, _mm256_maskload_ps(cr, m0));     \
        c##r##1 = _mm256_add_ps(c##r##1, _mm256_maskload_ps(cr + 8, m1)); \
      }                                                                   \
      _mm256_maskstore_ps(cr, m0, c##r##0);                               \
      _mm256_maskstore_ps(cr + 8, m1, c##r##1);                           \
    }                                                                     \
  }
  DYNVM_STORE(0)
  DYNVM_STORE(1)
  DYNVM_STORE(2)
  DYNVM_STORE(3)
  DYNVM_STORE(4)
  DYNVM_STORE(5)
#undef DYNVM_STORE
}

// Rows [0, rows) of packed A (PackA) x one panel over one depth block.
DYNVM_AVX2 void PanelRowsAvx2(int64_t rows, int64_t depth, const float* a, int64_t seg,
                              const float* b, float* c, int64_t ldc, int64_t cols,
                              bool accumulate) {
  int64_t i = 0;
  for (; i + kRows <= rows; i += kRows) {
    MicroAvx2<6>(depth, a + i * kStride, seg, b, c + i * ldc, ldc, cols, accumulate,
                 TakePrefetch(depth));
  }
  const float* at = a + i * kStride;
  float* ct = c + i * ldc;
  const Prefetch pf = TakePrefetch(depth);
  switch (rows - i) {
    case 5:
      return MicroAvx2<5>(depth, at, seg, b, ct, ldc, cols, accumulate, pf);
    case 4:
      return MicroAvx2<4>(depth, at, seg, b, ct, ldc, cols, accumulate, pf);
    case 3:
      return MicroAvx2<3>(depth, at, seg, b, ct, ldc, cols, accumulate, pf);
    case 2:
      return MicroAvx2<2>(depth, at, seg, b, ct, ldc, cols, accumulate, pf);
    case 1:
      return MicroAvx2<1>(depth, at, seg, b, ct, ldc, cols, accumulate, pf);
    default:
      return;
  }
}

// The GEMV: as PanelGemvAvx512 with four chains (step q into chain q mod 4, added as
// (0 + 1) + (2 + 3)), each 16-float step two 8-lane halves: eight accumulators, the x broadcast
// and the loads fit the 16 registers.
DYNVM_AVX2 void PanelGemvAvx2(int64_t k, const float* x, const float* b, int64_t panels,
                              int64_t cols, float* y) {
  for (int64_t p = 0; p < panels; ++p, b += k * kPanel) {
    __m256 l0 = _mm256_setzero_ps(), h0 = l0, l1 = l0, h1 = l0, l2 = l0, h2 = l0, l3 = l0, h3 = l0;
    int64_t q = 0;
#define DYNVM_STEP(c, at)                                     \
  do {                                                        \
    const __m256 xv = _mm256_broadcast_ss(x + (at));          \
    const float* r = b + (at)*kPanel;                         \
    l##c = _mm256_fmadd_ps(_mm256_loadu_ps(r), xv, l##c);     \
    h##c = _mm256_fmadd_ps(_mm256_loadu_ps(r + 8), xv, h##c); \
  } while (0)
    for (; q + 4 <= k; q += 4) {
      DYNVM_STEP(0, q);
      DYNVM_STEP(1, q + 1);
      DYNVM_STEP(2, q + 2);
      DYNVM_STEP(3, q + 3);
    }
    if (q < k) DYNVM_STEP(0, q);
    if (q + 1 < k) DYNVM_STEP(1, q + 1);
    if (q + 2 < k) DYNVM_STEP(2, q + 2);
#undef DYNVM_STEP
    const __m256 lo = _mm256_add_ps(_mm256_add_ps(l0, l1), _mm256_add_ps(l2, l3));
    const __m256 hi = _mm256_add_ps(_mm256_add_ps(h0, h1), _mm256_add_ps(h2, h3));
    const int64_t width = std::min(kPanel, cols - p * kPanel);
    float* yp = y + p * kPanel;
    if (width == kPanel) {
      _mm256_storeu_ps(yp, lo);
      _mm256_storeu_ps(yp + 8, hi);
    } else {
      _mm256_maskstore_ps(yp, LaneMask(width), lo);
      _mm256_maskstore_ps(yp + 8, LaneMask(width - 8), hi);
    }
  }
}

// ---- AVX-512 ----

// GCC 12's AVX-512 headers make an undefined vector for the unused source of their masked
// builtins, which -Wmaybe-uninitialized reports at every use (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// R rows (up to 24; A as PackA wrote it) x one panel: C[R, cols] (= or +=) over one depth
// block. Only the R rows' FMAs run (17 rows cost 17 FMAs a step, not 18, and 8 rows 8, not 12).
template <int R>
DYNVM_AVX512 void MicroAvx512(int64_t depth, const float* a, int64_t seg, const float* b, float* c,
                              int64_t ldc, int64_t cols, bool accumulate, Prefetch pf) {
  static_assert(R >= 1 && R <= 4 * kRows);
  __m512 acc[R];
#pragma GCC unroll 24
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t q = 0; q < depth; q += kSegment, a += seg, b += kSegment * kPanel) {
    const int64_t steps = std::min(kSegment, depth - q);
    for (int64_t p = 0; p < steps; ++p) {
      if constexpr (R <= kPrefetchRows) {
        _mm_prefetch(reinterpret_cast<const char*>(b + (p + kAheadB) * kPanel), _MM_HINT_T0);
      }
      if (q + p < pf.lines) _mm_prefetch(pf.at + (q + p) * 64, _MM_HINT_T0);
      const __m512 bv = _mm512_loadu_ps(b + p * kPanel);
#pragma GCC unroll 24
      for (int r = 0; r < R; ++r) {
        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * kStride + p]), bv, acc[r]);
      }
    }
  }
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1u);
#pragma GCC unroll 24
  for (int i = 0; i < R; ++i) {
    float* cr = c + i * ldc;
    __m512 v = acc[i];
    if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, cr));
    _mm512_mask_storeu_ps(cr, mask, v);
  }
}

// R rows (up to two 6-row tiles) x two full panels (32 columns, the second at b + stride): two
// accumulators per row, one broadcast of A for two FMAs (half the broadcasts of the one-panel
// kernel per multiply-add). Each element is the same FMA chain in K order as MicroAvx512's.
template <int R>
DYNVM_AVX512 void MicroPairAvx512(int64_t depth, const float* a, int64_t seg, const float* b,
                                  int64_t stride, float* c, int64_t ldc, bool accumulate,
                                  Prefetch pf) {
  static_assert(R >= 1 && R <= 2 * kRows);
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  for (int64_t q = 0; q < depth; q += kSegment, a += seg, b += kSegment * kPanel) {
    const int64_t steps = std::min(kSegment, depth - q);
    const float* b1 = b + stride;
    for (int64_t p = 0; p < steps; ++p) {
      if constexpr (R <= kPrefetchRows) {
        _mm_prefetch(reinterpret_cast<const char*>(b + (p + kAheadB) * kPanel), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b1 + (p + kAheadB) * kPanel), _MM_HINT_T0);
      }
      if (q + p < pf.lines) _mm_prefetch(pf.at + (q + p) * 64, _MM_HINT_T0);
      const __m512 bv0 = _mm512_loadu_ps(b + p * kPanel);
      const __m512 bv1 = _mm512_loadu_ps(b1 + p * kPanel);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        const __m512 av = _mm512_set1_ps(a[r * kStride + p]);
        acc0[r] = _mm512_fmadd_ps(av, bv0, acc0[r]);
        acc1[r] = _mm512_fmadd_ps(av, bv1, acc1[r]);
      }
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
    float* cr = c + i * ldc;
    __m512 v0 = acc0[i], v1 = acc1[i];
    if (accumulate) {
      v0 = _mm512_add_ps(v0, _mm512_loadu_ps(cr));
      v1 = _mm512_add_ps(v1, _mm512_loadu_ps(cr + kPanel));
    }
    _mm512_storeu_ps(cr, v0);
    _mm512_storeu_ps(cr + kPanel, v1);
  }
}

using MicroPairFn = void (*)(int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t,
                             bool, Prefetch);

template <size_t... I>
constexpr std::array<MicroPairFn, sizeof...(I)> MicroPairTable(std::index_sequence<I...>) {
  return {&MicroPairAvx512<static_cast<int>(I) + 1>...};
}

// Rows [0, rows) x two full panels over one depth block: 12-row passes, then the rows left.
DYNVM_AVX512 void PanelPairRowsAvx512(int64_t rows, int64_t depth, const float* a, int64_t seg,
                                      const float* b, int64_t stride, float* c, int64_t ldc,
                                      bool accumulate) {
  static constexpr std::array<MicroPairFn, 2 * kRows> kMicro =
      MicroPairTable(std::make_index_sequence<2 * kRows>());
  int64_t i = 0;
  for (; i + 2 * kRows <= rows; i += 2 * kRows) {
    MicroPairAvx512<2 * kRows>(depth, a + i * kStride, seg, b, stride, c + i * ldc, ldc, accumulate,
                               TakePrefetch(depth));
  }
  if (i < rows) {
    kMicro[rows - i - 1](depth, a + i * kStride, seg, b, stride, c + i * ldc, ldc, accumulate,
                         TakePrefetch(depth));
  }
}

using MicroFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, int64_t,
                         bool, Prefetch);

template <size_t... I>
constexpr std::array<MicroFn, sizeof...(I)> MicroTable(std::index_sequence<I...>) {
  return {&MicroAvx512<static_cast<int>(I) + 1>...};
}

// Rows [0, rows) of packed A (PackA) x one panel over one depth block: 24-row passes, then one
// pass of the 1-23 rows left.
DYNVM_AVX512 void PanelRowsAvx512(int64_t rows, int64_t depth, const float* a, int64_t seg,
                                  const float* b, float* c, int64_t ldc, int64_t cols,
                                  bool accumulate) {
  static constexpr std::array<MicroFn, 4 * kRows> kMicro =
      MicroTable(std::make_index_sequence<4 * kRows>());
  int64_t i = 0;
  for (; i + 4 * kRows <= rows; i += 4 * kRows) {
    MicroAvx512<4 * kRows>(depth, a + i * kStride, seg, b, c + i * ldc, ldc, cols, accumulate,
                           TakePrefetch(depth));
  }
  if (i < rows) {
    kMicro[rows - i - 1](depth, a + i * kStride, seg, b, c + i * ldc, ldc, cols, accumulate,
                         TakePrefetch(depth));
  }
}

// The GEMV: one panel at a time (one sequential stream of 64-byte steps), eight steps per
// iteration into eight accumulators, x[q] broadcast into each FMA. Each iteration prefetches the
// eight lines kAhead steps (4 KiB) ahead, within the call's panels: the hardware prefetcher
// stops at 4 KiB pages, and on the Zen 4 EPYC the prefetch moved the GEMV from 0.86-0.95x to
// 0.90-0.97x of a pure read of the same bytes (cpu_q4gemv_benchmark, 1 thread, noisy).
// The prefetch is non-temporal: a decode step reads each weight once per token, and with the T0
// hint those bytes (the whole model a token) displaced everything else the step keeps in the
// caches: the activations and the interpreter's state, which the small kernels and the VM
// between the products then read from memory. With NTA more of them stays (docs/llm.md, s12:
// the time outside the products of a 1.6 GB step 0.9-1.1 -> 0.78-0.9 ms at 2 threads, 1.2-1.3
// -> 1.0 at 1 thread, the products no slower); the KV cache still comes from memory.
DYNVM_AVX512 void PanelGemvAvx512(int64_t k, const float* x, const float* b, int64_t panels,
                                  int64_t cols, float* y) {
  const int64_t steps = panels * k;  // of 16 floats, over all the call's panels
  for (int64_t p = 0; p < panels; ++p, b += k * kPanel) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    int64_t q = 0;
    for (; q + kChains <= k; q += kChains) {
      const float* r = b + q * kPanel;
      if (p * k + q + kAhead + kChains <= steps) {
#pragma GCC unroll 8
        for (int l = 0; l < kChains; ++l) {
          _mm_prefetch(reinterpret_cast<const char*>(r + (kAhead + l) * kPanel), _MM_HINT_NTA);
        }
      }
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(r), _mm512_set1_ps(x[q]), a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(r + 16), _mm512_set1_ps(x[q + 1]), a1);
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(r + 32), _mm512_set1_ps(x[q + 2]), a2);
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(r + 48), _mm512_set1_ps(x[q + 3]), a3);
      a4 = _mm512_fmadd_ps(_mm512_loadu_ps(r + 64), _mm512_set1_ps(x[q + 4]), a4);
      a5 = _mm512_fmadd_ps(_mm512_loadu_ps(r + 80), _mm512_set1_ps(x[q + 5]), a5);
      a6 = _mm512_fmadd_ps(_mm512_loadu_ps(r + 96), _mm512_set1_ps(x[q + 6]), a6);
      a7 = _mm512_fmadd_ps(_mm512_loadu_ps(r + 112), _mm512_set1_ps(x[q + 7]), a7);
    }
    __m512* tail[kChains] = {&a0, &a1, &a2, &a3, &a4, &a5, &a6, &a7};
    for (int c = 0; q < k; ++q, ++c) {
      *tail[c] = _mm512_fmadd_ps(_mm512_loadu_ps(b + q * kPanel), _mm512_set1_ps(x[q]), *tail[c]);
    }
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                     _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    const int64_t width = std::min(kPanel, cols - p * kPanel);
    _mm512_mask_storeu_ps(y + p * kPanel, static_cast<__mmask16>((1u << width) - 1u), sum);
  }
}

#pragma GCC diagnostic pop

#endif  // DYNVM_CPU_X86

// The panels of one column block (cols <= kColBlock, panel p of it at b + p * panel_stride)
// for rows [0, rows) over one depth block.
// A's segments are rows * kStride floats apart (PackA of the block's rows).
template <void (*kPanelRows)(int64_t, int64_t, const float*, int64_t, const float*, float*, int64_t,
                             int64_t, bool)>
void ColumnBlock(int64_t rows, int64_t depth, const float* a, const float* b, int64_t panel_stride,
                 float* c, int64_t ldc, int64_t cols, bool accumulate) {
  for (int64_t j = 0; j < cols; j += kPanel) {
    kPanelRows(rows, depth, a, rows * kStride, b + (j / kPanel) * panel_stride, c + j, ldc,
               std::min(kPanel, cols - j), accumulate);
  }
}

#if DYNVM_CPU_X86
// AVX-512: pairs of full panels on the two-panel kernel, a last single or ragged panel on the
// one-panel kernel.
DYNVM_AVX512 void ColumnBlockAvx512(int64_t rows, int64_t depth, const float* a, const float* b,
                                    int64_t panel_stride, float* c, int64_t ldc, int64_t cols,
                                    bool accumulate) {
  const int64_t seg = rows * kStride;
  int64_t j = 0;
  for (; j + 2 * kPanel <= cols; j += 2 * kPanel) {
    PanelPairRowsAvx512(rows, depth, a, seg, b + (j / kPanel) * panel_stride, panel_stride, c + j,
                        ldc, accumulate);
  }
  for (; j < cols; j += kPanel) {
    PanelRowsAvx512(rows, depth, a, seg, b + (j / kPanel) * panel_stride, c + j, ldc,
                    std::min(kPanel, cols - j), accumulate);
  }
}
#endif

}  // namespace

int64_t PackedFloats(int64_t k, int64_t n) { return (n + kPanel - 1) / kPanel * kPanel * k; }

void Pack(char trans, int64_t k, int64_t n, const float* w, int64_t ldw, float* packed) {
  const int64_t panels = (n + kPanel - 1) / kPanel;
  for (int64_t p = 0; p < panels; ++p) {
    float* out = packed + p * kPanel * k;
    const int64_t j0 = p * kPanel, cols = std::min(kPanel, n - j0);
    if (trans == 'N') {
      for (int64_t q = 0; q < k; ++q) {
        float* row = out + q * kPanel;
        std::memcpy(row, w + q * ldw + j0, static_cast<size_t>(cols) * sizeof(float));
        std::fill(row + cols, row + kPanel, 0.0f);
      }
    } else {
      for (int64_t q = 0; q < k; ++q) {
        float* row = out + q * kPanel;
        for (int64_t j = 0; j < cols; ++j) row[j] = w[(j0 + j) * ldw + q];
        std::fill(row + cols, row + kPanel, 0.0f);
      }
    }
  }
}

namespace {

// Row blocks of equal size (multiples of 6 rows, at most kRowBlock): each block reads all of
// packed B once, so no short last block.
int64_t BlockRows(int64_t rows) {
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  return ((rows + blocks - 1) / blocks + kRows - 1) / kRows * kRows;
}

// Packs rows [0, rows) of A over all of K, by depth block ([depth block][segment][rows][kStride]:
// a depth block's Segments(depth_block) segments of rows * kStride floats), into out.
void PackRowBlock(int64_t rows, int64_t k, const float* a, int64_t lda, int64_t depth_block,
                  float* out) {
  const int64_t block_floats = Segments(depth_block) * kStride;
  for (int64_t q0 = 0; q0 < k; q0 += depth_block) {
    PackA(rows, std::min(depth_block, k - q0), a + q0, lda,
          out + rows * block_floats * (q0 / depth_block));
  }
}

// C[rows, n] (row r0 of the product at c) = a row block packed by PackRowBlock x packed B's
// columns [0, n), epilogue(r0, rows, col0 + j, cols) on each block; see Multiply.
void RowBlockProduct(int64_t r0, int64_t rows, int64_t n, int64_t k, const float* a_packed,
                     const float* packed, float* c, int64_t ldc, int64_t col0,
                     absl::FunctionRef<void(int64_t, int64_t, int64_t, int64_t)> epilogue,
                     int64_t depth_block) {
  const auto column_block = internal::Table().packed_gemm_column_block;
  const int64_t block_floats = Segments(depth_block) * kStride;
  // Columns in spans of whole column blocks whose C (rows x span) fits kSpanBytes: within a
  // span the depth blocks are outermost, so each depth block of packed A is read from L2 by
  // every column block of the span, and the span's C stays in L2 across the depth blocks.
  const int64_t span = std::max<int64_t>(
      kColBlock, kSpanBytes / (rows * static_cast<int64_t>(sizeof(float))) / kColBlock * kColBlock);
  for (int64_t s0 = 0; s0 < n; s0 += span) {
    const int64_t s1 = std::min(n, s0 + span);
    for (int64_t q0 = 0; q0 < k; q0 += depth_block) {
      const int64_t depth = std::min(depth_block, k - q0);
      const float* aq = a_packed + rows * block_floats * (q0 / depth_block);
      for (int64_t j0 = s0; j0 < s1; j0 += kColBlock) {
        const int64_t j1 = std::min(s1, j0 + kColBlock);
        column_block(rows, depth, aq, packed + j0 * k + q0 * kPanel, k * kPanel, c + j0, ldc,
                     j1 - j0, q0 > 0);
        if (q0 + depth == k) epilogue(r0, rows, col0 + j0, j1 - j0);
      }
    }
  }
}

}  // namespace

void Multiply(int64_t i0, int64_t i1, int64_t n, int64_t k, const float* a, int64_t lda,
              const float* packed, float* c, int64_t ldc,
              absl::FunctionRef<void(int64_t, int64_t, int64_t, int64_t)> epilogue,
              int64_t depth_block) {
  // A row block is packed once, over all of K, before its first column block.
  const int64_t block_rows = BlockRows(i1 - i0);
  const int64_t depth_blocks = (k + depth_block - 1) / depth_block;
  const int64_t block_floats = Segments(depth_block) * kStride;  // per row
  thread_local std::vector<float> a_packed;
  a_packed.resize(static_cast<size_t>(block_rows * block_floats * depth_blocks));
  for (int64_t r0 = i0; r0 < i1; r0 += block_rows) {
    const int64_t r1 = std::min(i1, r0 + block_rows), rows = r1 - r0;
    next_a = {};
    if (r1 < i1) {  // the next block's rows [r1, r2), at the rate that has them by mid-block
      const int64_t r2 = std::min(i1, r1 + block_rows);
      next_a.next = reinterpret_cast<const char*>(a + r1 * lda);
      next_a.end = reinterpret_cast<const char*>(a + (r2 - 1) * lda + k);
      next_a.lines = (next_a.end - next_a.next + 63) / 64;
      // Half the block's micro-kernel steps with AVX-512's 12-row x 32-column tiles.
      next_a.steps = std::max<int64_t>(1, rows * n * k / (2 * (2 * kRows) * (2 * kPanel)));
    }
    PackRowBlock(rows, k, a + r0 * lda, lda, depth_block, a_packed.data());
    RowBlockProduct(r0, rows, n, k, a_packed.data(), packed, c + r0 * ldc, ldc, 0, epilogue,
                    depth_block);
  }
}

void MultiplyStreamed(int64_t i0, int64_t i1, int64_t n, int64_t k, const float* a, int64_t lda,
                      int64_t chunk,
                      absl::FunctionRef<const float*(int64_t, int64_t, int64_t, int64_t)> produce,
                      float* c, int64_t ldc,
                      absl::FunctionRef<void(int64_t, int64_t, int64_t, int64_t)> epilogue,
                      int64_t depth_block) {
  const auto column_block = internal::Table().packed_gemm_column_block;
  const int64_t block_rows = BlockRows(i1 - i0);
  const int64_t block_floats = Segments(depth_block) * kStride;
  const int64_t row_floats = block_floats * ((k + depth_block - 1) / depth_block);
  thread_local std::vector<float> a_packed;
  a_packed.resize(static_cast<size_t>((i1 - i0) * row_floats));
  next_a = {};  // A is packed before the products: nothing to prefetch
  for (int64_t r0 = i0; r0 < i1; r0 += block_rows) {
    const int64_t rows = std::min(i1, r0 + block_rows) - r0;
    PackRowBlock(rows, k, a + r0 * lda, lda, depth_block, a_packed.data() + (r0 - i0) * row_floats);
  }
  chunk = std::max(kPanel, chunk / kPanel * kPanel);
  // Depth blocks outermost: A's depth block stays in L2 across the chunks, each chunk's panels
  // (chunk x depth) are produced into L2 and read by every row block, C passes through once per
  // depth block, as Multiply's sums do.
  for (int64_t q0 = 0; q0 < k; q0 += depth_block) {
    const int64_t depth = std::min(depth_block, k - q0);
    for (int64_t j0 = 0; j0 < n; j0 += chunk) {
      const int64_t j1 = std::min(n, j0 + chunk);
      const float* b = produce(j0, j1, q0, q0 + depth);
      for (int64_t r0 = i0; r0 < i1; r0 += block_rows) {
        const int64_t rows = std::min(i1, r0 + block_rows) - r0;
        const float* aq =
            a_packed.data() + (r0 - i0) * row_floats + rows * block_floats * (q0 / depth_block);
        for (int64_t c0 = j0; c0 < j1; c0 += kColBlock) {
          const int64_t c1 = std::min(j1, c0 + kColBlock);
          column_block(rows, depth, aq, b + (c0 - j0) * depth, depth * kPanel, c + r0 * ldc + c0,
                       ldc, c1 - c0, q0 > 0);
          if (q0 + depth == k) epilogue(r0, rows, c0, c1 - c0);
        }
      }
    }
  }
}

void MultiplyVector(int64_t p0, int64_t p1, int64_t n, int64_t k, const float* x,
                    const float* packed, float* y) {
  p1 = std::min(p1, (n + kPanel - 1) / kPanel);
  if (p0 >= p1) return;
  if (k == 0) {
    std::fill(y + p0 * kPanel, y + std::min(n, p1 * kPanel), 0.0f);
    return;
  }
  internal::Table().packed_gemm_gemv(k, x, packed + p0 * kPanel * k, p1 - p0,
                                     std::min(n, p1 * kPanel) - p0 * kPanel, y + p0 * kPanel);
}

}  // namespace dynvm::cpu::packed_gemm

namespace dynvm::cpu::internal {

void FillPackedGemm(Isa isa, Dispatch* d) {
  using packed_gemm::ColumnBlock;
  d->packed_gemm_column_block = &ColumnBlock<&packed_gemm::PanelRowsPortable>;
  d->packed_gemm_gemv = &packed_gemm::PanelGemvPortable;
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) {
    d->packed_gemm_column_block = &ColumnBlock<&packed_gemm::PanelRowsAvx2>;
    d->packed_gemm_gemv = &packed_gemm::PanelGemvAvx2;
  }
  if (isa >= Isa::kAvx512) {
    d->packed_gemm_column_block = &packed_gemm::ColumnBlockAvx512;
    d->packed_gemm_gemv = &packed_gemm::PanelGemvAvx512;
  }
#endif
}

}  // namespace dynvm::cpu::internal
