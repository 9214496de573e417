// The microkernels' dispatch table: one function pointer per microkernel, set for the active
// level (isa.h) on first use and by SetIsaForTesting. Internal to kernels/cpu/*.cc: callers use
// the plain functions of each microkernel's header, which call through this table.
//
// Each file's Fill<Name>(isa, d) sets its entries to the best implementation at or below `isa`
// (its portable one at least), so adding a microkernel is: an entry here, its implementations
// and Fill line in its file, and the public function calling through Table().
#ifndef DYNVM_KERNELS_CPU_DISPATCH_H_
#define DYNVM_KERNELS_CPU_DISPATCH_H_

#include <cstdint>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/q4gemv.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/u8s8_gemm.h"
#include "kernels/cpu/winograd.h"

namespace dynvm::cpu::internal {

struct Dispatch {
  // rows.h
  void (*softmax_rows)(int64_t rows, int64_t n, const float* x, float* y);
  void (*log_softmax_rows)(int64_t rows, int64_t n, const float* x, float* y);
  void (*layer_norm_rows)(int64_t rows, int64_t n, const float* x, const float* scale,
                          const float* bias, float epsilon, float* y);
  void (*rms_norm_rows)(int64_t rows, int64_t n, const float* x, const float* scale, float epsilon,
                        float* y);
  // elementwise.h
  void (*binary_rows)(BinaryOp op, int64_t rows, int64_t n, const float* a, const float* b,
                      int64_t b_row_stride, float* y);
  void (*binary_strided_row)(BinaryOp op, int64_t n, const float* a, int64_t a_step, const float* b,
                             int64_t b_step, float* y);
  void (*where_blocks)(int64_t blocks, int64_t n, const uint8_t* cond, int64_t cond_step,
                       const float* x, int64_t x_step, const float* y, int64_t y_step, float* out);
  void (*unary)(UnaryOp op, float alpha, int64_t n, const float* x, float* y);
  void (*add_to)(int64_t n, const float* x, float* y);
  void (*fill_where)(int64_t n, const bool* m, bool when, float fill, float* y);
  bool (*any_nan)(int64_t n, const uint32_t* bits);
  bool (*any_abs_at_least)(int64_t n, const int32_t* v, int32_t limit);
  void (*max_over_taps)(int64_t c, const float* x, const int64_t* taps, int64_t n_taps, float* y);
  // activation.h
  void (*erf)(int64_t n, const float* x, float* y);
  void (*gelu_erf)(int64_t n, const float* x, float* y);
  void (*gelu_tanh)(int64_t n, const float* x, float* y);
  void (*silu)(int64_t n, const float* x, float* y);
  void (*bias_activation_rows)(Activation act, int64_t rows, int64_t n, const float* bias, float* y,
                               int64_t ldy);
  void (*lstm_gates)(int64_t batch, int64_t hidden, const float* gates, float* c, float* h);
  // gemv.h
  void (*gemv)(char trans, int64_t n, int64_t k, float alpha, const float* x, const float* b,
               int64_t ldb, float beta, float* y);
  // reduce.h
  void (*reduce_rows)(ReduceOp op, int64_t rows, int64_t n, const float* x, float* y);
  void (*reduce_columns)(ReduceOp op, int64_t outer, int64_t reduce, int64_t inner, const float* x,
                         float* y);
  // quantize.h
  void (*quantize_u8)(int64_t n, const float* x, float s, float z, uint8_t* y);
  void (*quantize_i8)(int64_t n, const float* x, float s, float z, int8_t* y);
  void (*dequantize_u8)(int64_t n, const uint8_t* x, float s, float z, float* y);
  void (*dequantize_i8)(int64_t n, const int8_t* x, float s, float z, float* y);
  void (*requantize_u8)(int64_t n, const int32_t* acc, const double* scale, double z, uint8_t* y);
  void (*requantize_i8)(int64_t n, const int32_t* acc, const double* scale, double z, int8_t* y);
  void (*requantize_u8_uniform)(int64_t n, const int32_t* acc, double add, double s, double z,
                                uint8_t* y);
  void (*requantize_i8_uniform)(int64_t n, const int32_t* acc, double add, double s, double z,
                                int8_t* y);
  void (*shift_u8_to_s8)(int64_t n, const uint8_t* x, int8_t* y);
  void (*min_max)(int64_t n, const float* x, float* lo, float* hi);
  void (*scale_acc_row)(int64_t n, const int32_t* acc, const int32_t* col, const int32_t* zc,
                        int32_t rs, const float* scale, const float* bias, float* y);
  void (*dequantize_rows_i8)(int64_t k, const int8_t* q, int64_t ldw, const float* scale,
                             int64_t r0, int64_t r1, float* dst);
  void (*dequantize_rows_bf16)(int64_t k, const uint16_t* w, int64_t ldw, int64_t r0, int64_t r1,
                               float* dst);
  void (*qlinear_add_u8)(int64_t n, const uint8_t* a, const uint8_t* b, float ra, float rb, float k,
                         uint8_t* c);
  void (*qlinear_add_i8)(int64_t n, const int8_t* a, const int8_t* b, float ra, float rb, float k,
                         int8_t* c);
  void (*lookup_bytes)(int64_t n, const uint8_t* x, const uint8_t* table, uint8_t* y);
  // qgemv.h
  void (*qgemv_i8)(int64_t rows, int64_t k, const float* x, int64_t ldx, const int8_t* q,
                   int64_t ldw, const float* scale, int64_t r0, int64_t r1, float beta, float* y,
                   int64_t ldy);
  void (*qgemv_bf16)(int64_t rows, int64_t k, const float* x, int64_t ldx, const uint16_t* w,
                     int64_t ldw, int64_t r0, int64_t r1, float beta, float* y, int64_t ldy);
  bool qgemv_i8_rounds;
  bool qgemv_bf16_splits;
  const char* qgemv_i8_path;
  const char* qgemv_bf16_path;
  // q4gemv.h
  void (*qgemv_q4)(int64_t rows, const float* x, int64_t ldx, const Q4Weights& w, const float* bias,
                   int64_t r0, int64_t r1, float* y, int64_t ldy);
  void (*dequantize_rows_q4)(const Q4Weights& w, int64_t r0, int64_t r1, float* dst);
  void (*dequantize_q4_panels)(const Q4Weights& w, int64_t n, int64_t p0, int64_t p1, int64_t i0,
                               int64_t i1, float* dst);
  const char* qgemv_q4_path;
  void (*qgemv_q4_int8)(int64_t rows, const uint8_t* xq, const Q4Weights& w, const float* bias,
                        int64_t r0, int64_t r1, float* y, int64_t ldy);
  const char* qgemv_q4_int8_path;
  // One activation block [i0, i1) of row x quantized (q4gemv_int8.cc's QuantizeActivationsQ8).
  void (*quantize_q8_block)(const float* x, int64_t i0, int64_t i1, int8_t* q, float* scale,
                            int32_t* sum);
  // igemm.h
  void (*igemm_pack_b)(int64_t k, int64_t n, const int8_t* b, int64_t ldb, int32_t b_zp, int64_t p0,
                       int64_t p1, int16_t* packed);
  void (*igemm_compute)(int64_t k, int64_t n, const int16_t* packed_a, const int16_t* packed_b,
                        int64_t i0, int64_t i1, int64_t p0, int64_t p1, int32_t* c, int64_t ldc);
  void (*igemv)(int64_t k, const int16_t* packed_a, const int8_t* b, int64_t ldb, int32_t b_zp,
                int64_t j0, int64_t j1, int32_t* c);
  const char* igemm_path;
  // u8s8_gemm.h
  void (*u8s8_gemm)(int64_t k, int64_t n, const uint8_t* a, int64_t lda, const int8_t* packed_b,
                    int64_t i0, int64_t i1, int64_t p0, int64_t p1, int32_t* c, int64_t ldc);
  void (*u8s8_gemm_scaled)(int64_t k, int64_t n, const uint8_t* a, int64_t lda,
                           const int8_t* packed_b, int64_t i0, int64_t i1, int64_t p0, int64_t p1,
                           const U8S8Scale& e);
  bool u8s8_gemm_fast;
  // packed_gemm.h: C (= or +=) packed A x the panels of one column block, one depth block.
  void (*packed_gemm_column_block)(int64_t rows, int64_t depth, const float* a, const float* b,
                                   int64_t panel_stride, float* c, int64_t ldc, int64_t cols,
                                   bool accumulate);
  // packed_gemm.h: y[0, cols) = x x `panels` consecutive panels (cols in (16 (panels - 1),
  // 16 panels]).
  void (*packed_gemm_gemv)(int64_t k, const float* x, const float* b, int64_t panels, int64_t cols,
                           float* y);
  // depthwise.h
  void (*depthwise_conv1d_row)(int64_t n, const float* xp, const float* w, int64_t taps,
                               int64_t dilation, float bias, float* y);
  // attention.h
  void (*softcap)(int64_t n, float cap, const float* x, float* y);
  void (*rotary)(int64_t half, bool interleaved, const float* cos, const float* sin, const float* x,
                 float* y);
  void (*rotate_half)(int64_t half, const float* cos, const float* sin, const float* x, float* y);
  void (*group_scores)(int64_t heads, int64_t n, int64_t d, float alpha, const float* q,
                       int64_t ldq, const float* k, int64_t ldk, float* s, int64_t lds);
  void (*group_weighted_sum)(int64_t heads, int64_t n, int64_t dv, const float* p, int64_t ldp,
                             const float* v, int64_t ldv, float* y, int64_t ldy);
  // glu.h
  void (*silu_mul)(int64_t n, const float* gate, const float* up, float* y);
  // winograd.h
  void (*winograd_run_blocks)(const winograd::Shape& s, const float* x, const float* packed,
                              const winograd::PostOps& post, float* y, int64_t b0, int64_t b1,
                              float* ws);
  // resize.h
  void (*resize_accumulate)(int64_t n, int k, const double* w, const double* g, double wb,
                            double wa, double* acc);
};

// The table for the active level.
const Dispatch& Table();
// Refills it for `isa` (SetIsaForTesting).
void Refill(Isa isa);

// Each file's entries.
void FillRows(Isa isa, Dispatch* d);
void FillElementwise(Isa isa, Dispatch* d);
void FillActivation(Isa isa, Dispatch* d);
void FillGemv(Isa isa, Dispatch* d);
void FillReduce(Isa isa, Dispatch* d);
void FillQuantize(Isa isa, Dispatch* d);
void FillQGemv(Isa isa, Dispatch* d);
void FillQ4Gemv(Isa isa, Dispatch* d);
void FillQ4GemvInt8(Isa isa, Dispatch* d);
void FillIGemm(Isa isa, Dispatch* d);
void FillU8S8Gemm(Isa isa, Dispatch* d);
void FillPackedGemm(Isa isa, Dispatch* d);
void FillDepthwise(Isa isa, Dispatch* d);
void FillWinograd(Isa isa, Dispatch* d);
void FillAttention(Isa isa, Dispatch* d);
void FillGlu(Isa isa, Dispatch* d);
void FillResize(Isa isa, Dispatch* d);

}  // namespace dynvm::cpu::internal

#endif  // DYNVM_KERNELS_CPU_DISPATCH_H_
