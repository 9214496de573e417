// Greedy decoding two ways, for benchmarks and the host-glue comparison (docs/benchmarks.md):
//
//   DecodeInVm      a decode model with the loop in the graph: inputs prompt [1, P] i64,
//                   max_new_tokens [] i64 and, when the model has one, stop_token [] i64;
//                   output tokens [1, n] i64. One VM call.
//   HostLoopDecoder a single-step model (token [1, 1] i64, h, c) -> (next [1, 1] i64, h_out,
//                   c_out), driven by a C++ loop: the prompt is fed one token at a time, then
//                   each step's next token is fed back with the state outputs (bound without a
//                   copy). One VM call per token.
//
// Both return the generated tokens; for the same LSTM they are the same tokens.
#ifndef DYNVM_TOOLS_BENCH_DECODE_H_
#define DYNVM_TOOLS_BENCH_DECODE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"
#include "vm/virtual_machine.h"

namespace dynvm::bench {

struct DecodeRequest {
  std::vector<int64_t> prompt;  // batch 1
  int64_t max_new_tokens = 0;
  int64_t stop_token = -1;  // < 0: no end token (a model with a stop_token input gets -1)
};

// Binds the request to a loop model's inputs (once; the tensors are reused by every run).
absl::Status BindLoopInputs(VirtualMachine& vm, const DecodeRequest& request);
// Runs a loop model whose inputs are bound and returns its tokens.
absl::StatusOr<std::vector<int64_t>> RunLoop(VirtualMachine& vm);
// BindLoopInputs then RunLoop.
absl::StatusOr<std::vector<int64_t>> DecodeInVm(VirtualMachine& vm, const DecodeRequest& request);

class HostLoopDecoder {
 public:
  // Checks the step model's signature (token, h, c -> next, h_out, c_out; h and c with fixed
  // dims) and makes the zero initial state.
  static absl::StatusOr<HostLoopDecoder> Create(VirtualMachine* vm);

  // Greedy tokens: prompt.size() + max_new_tokens - 1 steps (the last token generated needs no
  // step of its own); stops after emitting stop_token when it is >= 0.
  absl::StatusOr<std::vector<int64_t>> Decode(const DecodeRequest& request);

 private:
  HostLoopDecoder(VirtualMachine* vm, Tensor zero_h, Tensor zero_c)
      : vm_(vm), zero_h_(std::move(zero_h)), zero_c_(std::move(zero_c)) {}
  // One step on `token` with the state bound; returns the next token.
  absl::StatusOr<int64_t> Step(int64_t token);

  VirtualMachine* vm_;
  Tensor zero_h_, zero_c_;
  Tensor token_;  // [1, 1] i64, owned here and bound without a copy
};

}  // namespace dynvm::bench

#endif  // DYNVM_TOOLS_BENCH_DECODE_H_
