// dynvm's f32 GEMM on prepacked weights: C = A B with B packed once (a constant weight) into
// panels of 16 columns, a register-blocked micro-kernel, and a caller's epilogue (bias,
// activation) run on each block of C while it is in cache. Implementations (isa.h): portable,
// AVX2+FMA (6 rows x 16 columns), AVX-512 (12 rows x 32 columns: two panels; a last single panel
// up to 24 rows x 16; tails of 1-23 rows computed exactly); AVX2 and AVX-512 give the same bits
// (each element one FMA chain in K order). Where it runs instead of dnnl_sgemm: the compiler's
// panels (b_packed_n, compiler/transpose_weights.h) and kernels/dnnl/choice.h's measured rule;
// packed_gemm.cc has the tuning notes.
//
// Layout of packed B: panel p (columns [16p, 16p + 16)) holds, for each k in [0, K), 16 floats
// (zeros past N); panels are contiguous, so panel p starts at 16 K p floats. Any alignment
// (64 bytes keeps each step's 16 floats in one cache line).
// A is copied per block of rows, row by row in segments of 256 of K (a row stride of 272 floats:
// no transpose, and a tile's rows in different L1 sets), into a per-thread buffer that grows to
// the largest block seen and stays; the micro-kernels broadcast each row's element in turn, and
// while they compute a row block they prefetch the next block's rows of A (one line a step, at
// the rate that has them in cache by mid-block), so the copy does not wait on memory.
// Blocking: rows in equal blocks of at most kRowBlock; columns in spans whose C (rows x span)
// fits 512 KiB, within a span K in blocks of `depth` outermost and columns in blocks of kColBlock
// (A's rows x depth block read from L2 by every column block, the span's C in L2 across the K
// blocks, one panel pair's depth x 32 streamed through L1). Sums over K blocks go through C; the
// epilogue runs on each rows x kColBlock block right after its last K block, while it is in L2.
#ifndef DYNVM_KERNELS_CPU_PACKED_GEMM_H_
#define DYNVM_KERNELS_CPU_PACKED_GEMM_H_

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace dynvm::cpu::packed_gemm {

inline constexpr int64_t kPanel = 16;
inline constexpr int64_t kRowBlock = 192;  // 32 micro-kernel row tiles
inline constexpr int64_t kColBlock = 128;  // 8 panels
inline constexpr int64_t kDepth = 256;

// Whether a product of m rows at `threads` threads splits by rows (each thread a whole row block
// or more: it packs only its rows, and reads the panels once per row block as one thread would)
// rather than by ranges of panels (each thread packs all of A, reads its share of the panels).
inline bool SplitRows(int64_t m, int threads) { return m >= threads * kRowBlock; }

// Floats of packed B for K x N.
int64_t PackedFloats(int64_t k, int64_t n);

// Packs B [K, N]: `trans` 'N' reads w[k * ldw + n], 'T' reads w[n * ldw + k] (a [N, K] weight).
void Pack(char trans, int64_t k, int64_t n, const float* w, int64_t ldw, float* packed);

// Rows [i0, i1) of C [., N] (row stride ldc) = A (row stride lda, K columns) x packed B, each
// block then passed to epilogue(row0, rows, col0, cols). Touches only those rows: disjoint row
// ranges may run on different threads at once. `depth`: K's block (kDepth, or kDeepDepth for a
// product with no epilogue: fewer passes of the block sums through C, on the Zen 4 EPYC 0.98-1.05x
// oneDNN's transposed-B brgemm at 128 and 512 rows against 1.01-1.09x with kDepth; the sums are
// rounded in another order, so a caller keeps to one depth).
inline constexpr int64_t kDeepDepth = 1024;
void Multiply(int64_t i0, int64_t i1, int64_t n, int64_t k, const float* a, int64_t lda,
              const float* packed, float* c, int64_t ldc,
              absl::FunctionRef<void(int64_t, int64_t, int64_t, int64_t)> epilogue,
              int64_t depth = kDepth);

// Multiply for a B that exists only piece by piece (the 4-bit weights of MatMulNBits dequantized
// into panels, kernels/dnnl/matmul_nbits.cc): rows [i0, i1) of A are packed once; then for each
// depth block [q0, q1) of K (outermost) and each chunk of `chunk` columns [j0, j1) (a multiple
// of 16; the last shorter), produce(j0, j1, q0, q1) returns those columns' panels over K's
// [q0, q1) (16 (q1 - q0) floats a panel, the chunk's first panel first), which every row block
// multiplies before the next piece is produced: the piece and A's depth block stay in L2. C,
// epilogue and depth as Multiply's (columns counted from 0 of this call); the same bits as
// Multiply on the whole packed B at the same depth.
void MultiplyStreamed(int64_t i0, int64_t i1, int64_t n, int64_t k, const float* a, int64_t lda,
                      int64_t chunk,
                      absl::FunctionRef<const float*(int64_t, int64_t, int64_t, int64_t)> produce,
                      float* c, int64_t ldc,
                      absl::FunctionRef<void(int64_t, int64_t, int64_t, int64_t)> epilogue,
                      int64_t depth = kDepth);

// The GEMV on the same packed B (a product of one row: a decode step): y[j] = sum_k x[k] B[k, j]
// for the columns of panels [p0, p1) (j < n; y is indexed by the column, y[16 p0] first). Each
// panel is one sequential stream of 16 K floats, x[k] broadcast into each step's FMA, the steps
// spread over accumulator chains (each output summed in a fixed order per level: AVX-512 and
// portable eight chains over K mod 8, AVX2 four, added pairwise; the levels differ in the last
// bits, and from Multiply's single chain). Touches only those columns: disjoint panel ranges may
// run on different threads at once. The caller's epilogue (bias, activation) runs on y afterwards,
// while it is in L1.
void MultiplyVector(int64_t p0, int64_t p1, int64_t n, int64_t k, const float* x,
                    const float* packed, float* y);

}  // namespace dynvm::cpu::packed_gemm

#endif  // DYNVM_KERNELS_CPU_PACKED_GEMM_H_
