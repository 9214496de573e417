// Products with 4-bit block-quantized weights: the layout of ONNX Runtime's com.microsoft
// MatMulNBits (bits = 4; docs/onnx.md, "The com.microsoft domain"), which vm-compile
// --quantize-weights int4 also writes (compiler/quantize_weights.h).
//
// W is [N, K]: row j holds ceil(K / block) blocks of `block` 4-bit values, block / 2 bytes each,
// element 2i of a block in the low nibble of byte i and element 2i + 1 in its high nibble (the
// last block padded). Each block has an f32 scale and a zero point, 4-bit values packed two per
// byte the same way (ceil(blocks / 2) bytes per row), or 8 when there are none:
//   w[j, i] = (q[j, i] - zp[j, i / block]) * scale[j, i / block].
//
// The arithmetic is ONNX Runtime's for accuracy_level 0 (its default: f32 activations times the
// weights in f32, no narrowing of the activations). AVX-512 multiplies x by the dequantized
// weights (q - zp) * scale rounded to f32, ORT's own; AVX2 and portable sum each block over the
// exact integers q - zp and scale the block's sum, y[m, j] = bias[j] + sum_b scale[j, b] *
// sum_{i in b} x[m, i] (q[j, i] - zp[j, b]). The sums' order differs between levels and from ONNX
// Runtime's (it dequantizes and runs an f32 GEMM): results agree to f32 rounding, within
// 2 K 2^-24 sum_i |x[m, i] w[j, i]| of the exact product (q4gemv_test.cc), not bit for bit.
//
// Implementations (isa.h): portable (scalar), AVX2 (8 lanes: 8 bytes widened to 32-bit lanes, the
// low and high nibbles against the activations split into even and odd columns once per call),
// AVX-512 (16 bytes widened; a 16-entry table of the block's dequantized weights per row, looked
// up by VPERMPS; blocks of 16 run the AVX2 loop). q4gemv.cc has the tuning notes.
#ifndef DYNVM_KERNELS_CPU_Q4GEMV_H_
#define DYNVM_KERNELS_CPU_Q4GEMV_H_

#include <cstdint>

namespace dynvm::cpu {

struct Q4Weights {
  int64_t k = 0;                         // columns (K)
  int64_t block = 0;                     // values per block: a power of two, 16 to 256
  const uint8_t* packed = nullptr;       // [N, blocks, block / 2]
  const float* scales = nullptr;         // [N, blocks]
  const uint8_t* zero_points = nullptr;  // [N, ceil(blocks / 2)], or null: 8 everywhere
  int64_t blocks() const { return (k + block - 1) / block; }
};

// y[m * ldy + j] = (bias ? bias[j] : 0) + sum_i x[m * ldx + i] w[j, i] for m < rows and
// r0 <= j < r1; each weight row of the range is read once from memory (the rows of x stay in
// cache). Any row count; callers run it up to kQuantSmallRows (qgemv.h) and dequantize beyond.
// Uses a per-thread scratch of rows * blocks * block floats (grown once, kept).
void QGemvQ4(int64_t rows, const float* x, int64_t ldx, const Q4Weights& w, const float* bias,
             int64_t r0, int64_t r1, float* y, int64_t ldy);

// dst[(j - r0) * k + i] = w[j, i] for r0 <= j < r1: (q - zp) * scale rounded once to f32, the
// same bits at every level (AVX2 and AVX-512 interleave the nibbles back in registers).
void DequantizeRowsQ4(const Q4Weights& w, int64_t r0, int64_t r1, float* dst);

// The transposed weight W^T [K, N] in packed_gemm.h's panels, for the prompt's GEMM, over K's
// [i0, i1) (i0 a multiple of 32; a depth block of the GEMM): panels [p0, p1) (panel p holds, for
// each i in [i0, i1), the 16 values w[16 p + c, i], c < 16, zeros for rows 16 p + c >= n) at dst,
// panel p0 first, 16 (i1 - i0) floats each. Each value (q - zp) * scale rounded once to f32: the
// same bits as DequantizeRowsQ4, at every level (AVX2 and AVX-512 transpose 16 rows' bytes in
// registers, 32 of K at a time, and widen each nibble column).
void DequantizeQ4ToPanels(const Q4Weights& w, int64_t n, int64_t p0, int64_t p1, int64_t i0,
                          int64_t i1, float* dst);

// Which implementation QGemvQ4 runs at the active level: "avx512", "avx2" or "portable".
const char* QGemvQ4Path();

// ONNX Runtime's accuracy_level 4 (its CompInt8): each activation row is quantized to int8 per
// block of w.block columns, s = amax / 127 and q = round-half-even(x * (127 / amax)) (both
// quotients rounded to f32 once, 0 where amax is 0), and every block's product is an exact
// integer, y[m, j] = bias[j] + sum_b (s[m, b] * scale[j, b]) * sum_{i in b} q[m, i] (w4[j, i] -
// zp[j, b]). The integer sums are the same at every level and as ORT's; only the f32 sum over
// blocks differs in order: within 2 (blocks + 10) 2^-24 sum_b |s scale| (sum_i |q w4| + zp |sum_i
// q|) of the exact sum of the block terms (the kernels sum q w4 and the zero point's correction
// apart, as ORT does; q4gemv_test.cc). A NaN or infinity in a block makes the outputs NaN (ORT's
// are unspecified there). Implementations: portable (scalar), AVX2 (VPMADDUBSW
// on the nibbles, 64 weights per step), AVX-512 VNNI (VPDPBUSD on 256-bit vectors). Up to 11 rows
// run one weight row at a time (blocks of 16: the portable loop); 12 and more a blocked GEMM over
// weight panels unpacked once per call (every block size). q4gemv_int8.cc has the layout and
// tuning notes.
//
// The bytes one quantized activation row takes (a multiple of 64).
int64_t Q8ActivationRowBytes(const Q4Weights& w);
// Quantizes rows of x (row m at x + m * ldx) into dst, rows * Q8ActivationRowBytes(w) bytes.
void QuantizeActivationsQ8(int64_t rows, const float* x, int64_t ldx, const Q4Weights& w,
                           uint8_t* dst);
// y[m * ldy + j] for m < rows and r0 <= j < r1 from the rows QuantizeActivationsQ8 wrote, each
// weight row read once (the activation rows stay in cache): pass a prompt's rows in one call.
// Uses a per-thread scratch for the GEMM's weight panel (about K * 24 bytes; grown once, kept).
void QGemvQ4Int8(int64_t rows, const uint8_t* xq, const Q4Weights& w, const float* bias, int64_t r0,
                 int64_t r1, float* y, int64_t ldy);
// "avx512_vnni", "avx2" or "portable".
const char* QGemvQ4Int8Path();

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_Q4GEMV_H_
