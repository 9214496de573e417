// Reference recurrent cells (ONNX LSTM, GRU, RNN): attribute parsing, the GEMM of one time step,
// the fused per-step gate math, and one LSTM step on plain arrays for decode loops. The GEMM and
// the gate functions are separate so a faster backend can run its own matmul and reuse the gates.
// Internal.
//
// Layouts: all arrays are contiguous and row-major. Gate blocks are in ONNX order: LSTM i, o, f, c;
// GRU z, r, h. The gate functions are instantiated for float and double.
#ifndef DYNVM_KERNELS_REFERENCE_RNN_H_
#define DYNVM_KERNELS_REFERENCE_RNN_H_

#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace dynvm::reference {

enum class RnnCell : uint8_t { kRnn, kGru, kLstm };
enum class RnnDirection : uint8_t { kForward, kReverse, kBidirectional };

// One ONNX recurrent activation function with its alpha and beta.
struct RnnActivation {
  enum class Kind : uint8_t {
    kRelu,
    kTanh,
    kSigmoid,
    kAffine,
    kLeakyRelu,
    kThresholdedRelu,
    kScaledTanh,
    kHardSigmoid,
    kElu,
    kSoftsign,
    kSoftplus,
  };
  Kind kind = Kind::kTanh;
  float alpha = 0;
  float beta = 0;
};

// x[i] = act(x[i]) for i in [0, n).
template <typename C>
void ApplyRnnActivation(const RnnActivation& act, C* x, int64_t n);

// The options of one direction of a cell.
struct RnnGateConfig {
  RnnActivation f{RnnActivation::Kind::kSigmoid};  // LSTM, GRU gates; RNN's only activation
  RnnActivation g{RnnActivation::Kind::kTanh};     // LSTM cell input, GRU hidden gate
  RnnActivation h{RnnActivation::Kind::kTanh};     // LSTM output
  // Bounds every gate pre-activation to [-clip, clip]; +inf = no clip.
  float clip = std::numeric_limits<float>::infinity();
  bool input_forget = false;         // LSTM: f = 1 - i
  bool linear_before_reset = false;  // GRU
};

// A cell's validated attributes (from a KernelSpec).
struct RnnAttrs {
  RnnCell cell = RnnCell::kLstm;
  RnnDirection direction = RnnDirection::kForward;
  int num_directions = 1;
  int64_t hidden_size = 0;  // 0 = not given: taken from R's last dim
  int layout = 0;           // 0: X [seq, batch, input]; 1: X [batch, seq, input]
  RnnGateConfig config[2];  // per direction
};

// Reads and validates hidden_size, direction, activations, activation_alpha, activation_beta,
// clip, input_forget, linear_before_reset and layout. activation_alpha and activation_beta are
// consumed in activation order, one value per activation taking that parameter (as ONNX Runtime
// does); a missing value takes the ONNX operator's default (LeakyRelu 0.01, ThresholdedRelu 1,
// HardSigmoid 0.2/0.5, Elu 1, Affine 1/0, ScaledTanh 1/1); surplus values are ignored.
// Activation names match case-insensitively. A forward or reverse RNN given two activations uses
// the first (the schema's default is ["Tanh", "Tanh"]); a bidirectional cell given one
// direction's activations uses them for both.
absl::StatusOr<RnnAttrs> ParseRnnAttrs(const KernelSpec& spec, RnnCell cell);

// out[m, n] = bias[n] (0 when bias is null) + (accumulate ? out[m, n] : 0)
//             + sum_k a[m * lda + k] * b[n * ldb + k]
// i.e. out = a * b^T: the GEMM of a step (x * W^T, h * R^T), with weights in ONNX's [rows, k].
template <typename C>
void RnnGemm(int64_t m, int64_t n, int64_t k, const C* a, int64_t lda, const C* b, int64_t ldb,
             const C* bias, bool accumulate, C* out, int64_t ldo);

// LSTM gates for `batch` rows. gates [batch, 4H] holds X*W^T + H*R^T + Wb + Rb (without
// peepholes) and is clobbered. peephole [3H] (i, o, f) or null. Writes
//   c_out = f * c_prev + i * g(c~),  h_out = o * h(c_out).
// c_out may alias c_prev; h_out may alias the previous hidden state (not read here).
template <typename C>
void LstmGates(const RnnGateConfig& cfg, int64_t batch, int64_t hidden, C* gates, const C* peephole,
               const C* c_prev, C* h_out, C* c_out);

// GRU, first half: in xw [batch, 3H] (X*W^T + Wb) turns the z and r blocks into the gates
// z = f(xw_z + hr_z), r = f(xw_r + hr_r), where hr [batch, 3H] holds H*R^T + Rb (its z and r
// blocks are read). Without linear_before_reset also writes rh [batch, H] = r * h_prev: the
// caller then computes the h block of hr as rh * Rh^T + Rbh before GruHiddenGate.
template <typename C>
void GruResetUpdateGates(const RnnGateConfig& cfg, int64_t batch, int64_t hidden, C* xw,
                         const C* hr, const C* h_prev, C* rh);
// GRU, second half: h~ = g(xw_h + hr_h) (linear_before_reset: g(xw_h + r * hr_h)), then
// h_out = (1 - z) * h~ + z * h_prev. The h block of xw is clobbered; h_out may alias h_prev.
template <typename C>
void GruHiddenGate(const RnnGateConfig& cfg, int64_t batch, int64_t hidden, C* xw, const C* hr,
                   const C* h_prev, C* h_out);

// RNN: h_out = f(gates) with gates [batch, H] = X*W^T + H*R^T + Wb + Rb (clobbered).
template <typename C>
void RnnGate(const RnnGateConfig& cfg, int64_t batch, int64_t hidden, C* gates, C* h_out);

// Floats of scratch LstmStep needs.
inline int64_t LstmStepScratchSize(int64_t batch, int64_t hidden) { return batch * 4 * hidden; }

// One LSTM time step on contiguous data:
//   x [batch, input_size], h and c [batch, hidden], W [4*hidden, input_size],
//   R [4*hidden, hidden], bias [8*hidden] (Wb then Rb) or null, peephole [3*hidden] or null;
//   scratch: LstmStepScratchSize(batch, hidden) elements.
// Writes h_out and c_out [batch, hidden], which may alias h and c. Allocates nothing.
template <typename C>
void LstmStep(const RnnGateConfig& cfg, int64_t batch, int64_t input_size, int64_t hidden,
              const C* x, const C* h, const C* c, const C* w, const C* r, const C* bias,
              const C* peephole, C* h_out, C* c_out, C* scratch);

// The decode-loop form: f32, ONNX's default activations (sigmoid, tanh, tanh), no clip, no
// peepholes.
inline void LstmStepF32(int64_t batch, int64_t input_size, int64_t hidden, const float* x,
                        const float* h, const float* c, const float* w, const float* r,
                        const float* bias, float* h_out, float* c_out, float* scratch) {
  LstmStep<float>(RnnGateConfig{}, batch, input_size, hidden, x, h, c, w, r, bias, nullptr, h_out,
                  c_out, scratch);
}

}  // namespace dynvm::reference

#endif  // DYNVM_KERNELS_REFERENCE_RNN_H_
