// dynvm's f32 GEMM on prepacked weights (packed_gemm.h). The vector code is AVX2 + FMA through
// explicit intrinsics in functions compiled for that target (internal linkage); callers use it
// only where Supported().
#include "kernels/dnnl/packed_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace dynvm::onednn::packed_gemm {
namespace {

#define DYNVM_AVX2 __attribute__((target("avx2,fma")))

constexpr int kRows = 6;  // rows per micro-kernel tile

// Lanes [0, n) of a mask vector set (n in 0..8, clamped).
DYNVM_AVX2 inline __m256i LaneMask(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(n, 0, 8))), idx);
}

// C[R rows, cols] (= or +=) A[R rows, depth] x panel [depth][16], A packed as [depth][6] (the
// tile's rows interleaved: one stream of broadcasts, whatever A's row stride). cols 16: plain
// stores; fewer (the last panel of a ragged N): masked loads and stores of C only.
template <int R>
DYNVM_AVX2 void Micro(int64_t depth, const float* a, const float* b, float* c, int64_t ldc,
                      int64_t cols, bool accumulate) {
  static_assert(R >= 1 && R <= kRows);
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t p = 0; p < depth; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b + p * kPanel);
    const __m256 b1 = _mm256_loadu_ps(b + p * kPanel + 8);
    const float* ap = a + p * kRows;
#define DYNVM_ROW(r)                               \
  if constexpr (R > r) {                           \
    const __m256 av = _mm256_broadcast_ss(ap + r); \
    c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);    \
    c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);    \
  }
    DYNVM_ROW(0)
    DYNVM_ROW(1)
    DYNVM_ROW(2)
    DYNVM_ROW(3)
    DYNVM_ROW(4)
    DYNVM_ROW(5)
#undef DYNVM_ROW
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

// Packs rows [0, rows) x columns [q0, q0 + depth) of A (row stride lda) as tiles of 6 rows,
// each [depth][6] (rows past `rows` zero), tile t at t * 6 * depth.
void PackA(int64_t rows, int64_t depth, const float* a, int64_t lda, float* out) {
  for (int64_t t = 0; t * kRows < rows; ++t) {
    float* tile = out + t * kRows * depth;
    const int64_t r_end = std::min<int64_t>(kRows, rows - t * kRows);
    for (int64_t r = 0; r < kRows; ++r) {
      if (r >= r_end) {
        for (int64_t p = 0; p < depth; ++p) tile[p * kRows + r] = 0.0f;
        continue;
      }
      const float* src = a + (t * kRows + r) * lda;
      for (int64_t p = 0; p < depth; ++p) tile[p * kRows + r] = src[p];
    }
  }
}

// Rows [0, rows) of packed A (PackA) x one panel over one depth block.
DYNVM_AVX2 void PanelRows(int64_t rows, int64_t depth, const float* a, const float* b, float* c,
                          int64_t ldc, int64_t cols, bool accumulate) {
  int64_t i = 0;
  for (; i + kRows <= rows; i += kRows) {
    Micro<6>(depth, a + i * depth, b, c + i * ldc, ldc, cols, accumulate);
  }
  const float* at = a + i * depth;
  float* ct = c + i * ldc;
  switch (rows - i) {
    case 5:
      return Micro<5>(depth, at, b, ct, ldc, cols, accumulate);
    case 4:
      return Micro<4>(depth, at, b, ct, ldc, cols, accumulate);
    case 3:
      return Micro<3>(depth, at, b, ct, ldc, cols, accumulate);
    case 2:
      return Micro<2>(depth, at, b, ct, ldc, cols, accumulate);
    case 1:
      return Micro<1>(depth, at, b, ct, ldc, cols, accumulate);
    default:
      return;
  }
}

}  // namespace

bool Supported() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         !__builtin_cpu_supports("avx512f");
  return ok;
}

bool Enabled() {
  static const bool on = [] {
    const char* env = std::getenv("DYNVM_DNNL_PACKED_GEMM");
    return Supported() && (env == nullptr || std::strcmp(env, "0") != 0);
  }();
  return on;
}

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

void Multiply(int64_t i0, int64_t i1, int64_t n, int64_t k, const float* a, int64_t lda,
              const float* packed, float* c, int64_t ldc,
              absl::FunctionRef<void(int64_t, int64_t, int64_t, int64_t)> epilogue) {
  // Row blocks of equal size (multiples of the tile's 6 rows, at most kRowBlock): each block
  // reads all of packed B once, so no short last block. A row block is packed once, over all
  // of K, at its first column block ([depth block][tiles][depth][6]).
  const int64_t blocks = (i1 - i0 + kRowBlock - 1) / kRowBlock;
  const int64_t block_rows = ((i1 - i0 + blocks - 1) / blocks + kRows - 1) / kRows * kRows;
  thread_local std::vector<float> a_packed;
  a_packed.resize(static_cast<size_t>(block_rows * k));
  for (int64_t r0 = i0; r0 < i1; r0 += block_rows) {
    const int64_t r1 = std::min(i1, r0 + block_rows), rows = r1 - r0;
    const int64_t tiles_rows = (rows + kRows - 1) / kRows * kRows;
    for (int64_t q0 = 0; q0 < k; q0 += kDepth) {
      PackA(rows, std::min(kDepth, k - q0), a + r0 * lda + q0, lda,
            a_packed.data() + tiles_rows * q0);
    }
    for (int64_t j0 = 0; j0 < n; j0 += kColBlock) {
      const int64_t j1 = std::min(n, j0 + kColBlock);
      for (int64_t q0 = 0; q0 < k; q0 += kDepth) {
        const int64_t depth = std::min(kDepth, k - q0);
        const float* ab = a_packed.data() + tiles_rows * q0;
        for (int64_t j = j0; j < j1; j += kPanel) {
          PanelRows(rows, depth, ab, packed + j * k + q0 * kPanel, c + r0 * ldc + j, ldc,
                    std::min(kPanel, n - j), q0 > 0);
        }
      }
      epilogue(r0, rows, j0, j1 - j0);
    }
  }
}

}  // namespace dynvm::onednn::packed_gemm
