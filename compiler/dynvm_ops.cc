// Shape functions of dynvm's own ops (domain "dynvm"); their kernels are in
// kernels/reference/dynvm_ops.cc. They register exactly as a user's custom op would.
//
//   Sample(logits [B, V], temperature [], seed [], step []) -> tokens [B] i64
//   FusedConv(X, W, B?, sum?) -> Y  Conv + residual + activation (compiler/conv_fusion.h)
//   Emit(x, stream=0)  hands x to the host's stream callback (the `emit` instruction); no
//                      outputs; never removed as dead code.
//   Gelu(x), GeluTanh(x), Silu(x) -> same type as x: fused activations the pattern rewrites
//                      make (compiler/rewrite/activations.cc).
#include "compiler/conv_fusion.h"
#include "compiler/op_registry.h"
#include "compiler/quantize_weights.h"

namespace dynvm::compiler {

void RegisterDynvmShapeFunctions(OpRegistry& r) {
  r.Register(OpSchema{"dynvm", "Sample",
                      [](InferContext& c) -> absl::Status {
                        const std::vector<Dim>* logits = c.input_shape(0);
                        if (c.num_inputs() != 4)
                          return c.Error("Sample takes (logits, temperature, seed, step)");
                        if (logits == nullptr) {
                          c.SetOutputDynamic(0, DType::kI64, 1);
                          return absl::OkStatus();
                        }
                        if (logits->size() != 2) return c.Error("logits must be [batch, vocab]");
                        c.SetOutput(0, DType::kI64, {(*logits)[0]});
                        return absl::OkStatus();
                      },
                      /*pure=*/false});
  r.Register(OpSchema{"dynvm", "Emit",
                      [](InferContext& c) -> absl::Status {
                        if (c.num_inputs() != 1 || c.num_outputs() != 0)
                          return c.Error("Emit takes one input and has no outputs");
                        return absl::OkStatus();
                      },
                      /*pure=*/false});
  for (const char* op : {"Gelu", "GeluTanh", "Silu"}) {
    r.Register(OpSchema{"dynvm", op, [](InferContext& c) -> absl::Status {
                          if (c.num_inputs() != 1 || c.num_outputs() != 1 || !c.has_input(0))
                            return c.Error("takes one input and has one output");
                          const std::vector<Dim>* x = c.input_shape(0);
                          if (x == nullptr) {
                            c.SetOutputUnknown(0, c.input_dtype(0));
                          } else {
                            c.SetOutput(0, c.input_dtype(0), *x);
                          }
                          return absl::OkStatus();
                        }});
  }
  // Conv with fused BatchNormalization, residual Add and activation (compiler/conv_fusion.h).
  r.Register(OpSchema{"dynvm", "FusedConv", InferConvShape});
  // QMatMul, QLSTM, QGRU, QRNN: weight-only quantized forms (compiler/quantize_weights.h).
  RegisterQuantizedWeightShapeFunctions(r);
}

}  // namespace dynvm::compiler
