// Linear (de)quantization microkernels, computing exactly what the reference kernels do
// (kernels/reference/misc.cc, quant.cc): every level gives the same bits. Portable, AVX2+FMA
// and AVX-512 implementations of the same loops (isa.h). One thread.
#ifndef DYNVM_KERNELS_CPU_QUANTIZE_H_
#define DYNVM_KERNELS_CPU_QUANTIZE_H_

#include <cstdint>

namespace dynvm::cpu {

// y[i] = saturate(round_half_even(x[i] / s) + z) (the division in f32, as ONNX's reference).
void QuantizeU8(int64_t n, const float* x, float s, float z, uint8_t* y);
void QuantizeI8(int64_t n, const float* x, float s, float z, int8_t* y);
// y[i] = (x[i] - z) * s (exact before its one rounding to f32).
void DequantizeU8(int64_t n, const uint8_t* x, float s, float z, float* y);
void DequantizeI8(int64_t n, const int8_t* x, float s, float z, float* y);

// One output row of QLinearMatMul: y[j] = saturate(round_half_even(acc[j] * scale[j]) + z), in
// double.
void RequantizeU8(int64_t n, const int32_t* acc, const double* scale, double z, uint8_t* y);
void RequantizeI8(int64_t n, const int32_t* acc, const double* scale, double z, int8_t* y);
// One output channel: y[j] = saturate(round_half_even((acc[j] + add) * s) + z), in double.
void RequantizeU8Uniform(int64_t n, const int32_t* acc, double add, double s, double z, uint8_t* y);
void RequantizeI8Uniform(int64_t n, const int32_t* acc, double add, double s, double z, int8_t* y);

// QLinearAdd of equal-shape operands (kernels/reference/qeltwise.cc has the definition, ONNX
// Runtime's MLAS arithmetic): c[i] = saturate(round_half_even(fma(a[i], ra, fma(b[i], rb, k)))).
void QLinearAddU8(int64_t n, const uint8_t* a, const uint8_t* b, float ra, float rb, float k,
                  uint8_t* c);
void QLinearAddI8(int64_t n, const int8_t* a, const int8_t* b, float ra, float rb, float k,
                  int8_t* c);

// y[i] = table[x[i]] over bytes (x[i] read as unsigned: an s8 value's two's-complement byte):
// an elementwise function of an 8-bit tensor through its 256 results.
void LookupBytes(int64_t n, const uint8_t* x, const uint8_t* table, uint8_t* y);

// y[i] = x[i] - 128 (a u8 operand as s8, its zero point moved with it).
void ShiftU8ToS8(int64_t n, const uint8_t* x, int8_t* y);

// The smallest and largest of x[0..n) (n >= 1; a NaN may be dropped or kept).
void MinMax(int64_t n, const float* x, float* lo, float* hi);
// One output row of an integer product scaled to f32 (DynamicQuantizeMatMul,
// MatMulIntegerToFloat): y[j] = f32(acc[j] + col[j] - zc[j] * rs) * scale[j] (+ bias[j]), the
// s32 arithmetic wrapping to the exact sum it stands for; col, zc and bias may be null (no such
// term). The product and the sum are rounded apart, as Mul then Add compute them.
void ScaleAccRow(int64_t n, const int32_t* acc, const int32_t* col, const int32_t* zc, int32_t rs,
                 const float* scale, const float* bias, float* y);
// Rows [r0, r1) of a weight-only quantized W into dst (row j at dst + (j - r0) * k): int8 rows
// (row j at q + j * ldw) times scale[j], or bf16 bit patterns widened to f32.
void DequantizeRowsI8(int64_t k, const int8_t* q, int64_t ldw, const float* scale, int64_t r0,
                      int64_t r1, float* dst);
void DequantizeRowsBf16(int64_t k, const uint16_t* w, int64_t ldw, int64_t r0, int64_t r1,
                        float* dst);

}  // namespace dynvm::cpu

#endif  // DYNVM_KERNELS_CPU_QUANTIZE_H_
