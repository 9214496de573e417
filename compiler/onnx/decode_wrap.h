// vm-compile --decode (docs/llm.md): wraps an Optimum/GenAI-layout *step model* into one in-VM
// decode loop, before the import.
//
// The step model: inputs input_ids [batch, S] (i64), attention_mask [batch, P + S] (i64 or i32),
// position_ids [batch, S] (i64, optional) and past_key_values.{i}.key / .value
// [batch, kv_heads, P, head_dim] (f32, kv_heads and head_dim known) for i = 0 .. L-1; outputs
// logits [batch, S, vocab] and present.{i}.key / .value [batch, kv_heads, P + S, head_dim].
// Anything else is refused naming the missing or unexpected input or output.
//
// The wrapped model's graph:
//   inputs   prompt [batch, prompt_len] i64, max_new_tokens [] i64, temperature [] f32
//            (<= 0: greedy), top_k [] i64 (0: off), top_p [] f32 (1: off),
//            repetition_penalty [] f32 (1: off), seed [] i64, stop_token [] i64 (-1: never
//            stop early)
//   output   tokens [batch, steps] i64 (steps <= max_new_tokens; fewer when every row has
//            produced stop_token)
// The prompt step runs once before the loop (a copy of the step's nodes, its values renamed
// "decode_prefill/...": the prompt, positions 0 .. prompt_len - 1, an all-ones mask, an empty
// cache); its last position's logits give token 0 (emitted only when max_new_tokens > 0). Then
// one Loop of max_new_tokens - 1 iterations whose body is the step graph itself (its nodes moved
// in, once: the weights stay initializers of the outer graph shared by both copies) runs the
// previous token at position P of a cache of P, with an all-ones mask of P + 1; each iteration
// samples one token per row (dynvm::Sample: temperature, top-k, top-p, the repetition penalty
// over the prompt and the tokens so far, seed, the token's index as the step; docs/sampling.md),
// emits it (dynvm::Emit, stream 0) and appends it to tokens. The body's cache inputs carry the
// step's own names, so each layer's Concat(past, new) appends onto a carried value: the memory plan
// gives it a growable storage allocated once (at prompt_len + max_new_tokens - 1 when both are
// bounded) and appends in place. A stop_token other than -1 outside [0, vocab) fails the run at the
// node "decode_stop_token_check" before the prompt step is used.
#ifndef DYNVM_COMPILER_ONNX_DECODE_WRAP_H_
#define DYNVM_COMPILER_ONNX_DECODE_WRAP_H_

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"

namespace dynvm::compiler::onnx {

// Rewrites `model` (a step model, checked structurally already) in place into the decode model
// above. InvalidArgument naming what does not fit the step signature.
absl::Status WrapStepModelForDecode(::onnx::ModelProto* model);

}  // namespace dynvm::compiler::onnx

#endif  // DYNVM_COMPILER_ONNX_DECODE_WRAP_H_
