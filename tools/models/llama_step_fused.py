"""tools/models/llama.py's decoder as a *step model* whose attention is one fused node per layer,
the forms published step models use, built directly from the weights with onnx.helper (no
tracing): the same random weights as llama_step.py's exported model, so `llama_step.greedy`
(PyTorch's host loop) is the oracle of every variant.

  gqa_rotary   ONNX Runtime GenAI's model builder: com.microsoft GroupQueryAttention with packed
               QKV and do_rotary=1 (cos/sin caches), seqlens_k = ReduceSum(attention_mask) - 1
               as int32 and total_sequence_length = the mask's width, computed in the graph; an
               int32 attention_mask and no position_ids input
  gqa          GroupQueryAttention with separate q/k/v, rotary outside it (com.microsoft
               RotaryEmbedding at position_ids); an int64 mask
  mha          com.microsoft MultiHeadAttention with past_key/past_value -> present_key/
               present_value (unidirectional, key_padding_mask from the mask), rotary by
               RotaryEmbedding; MultiHeadAttention has one head count, so K and V are projected
               to every query head (the KV-head weights repeated: the same function)
  attention23  ONNX opset 23 Attention with past_key/past_value -> present_key/present_value,
               a bool attn_mask [B, 1, S, P + S] built in the graph (causal and padding, as
               PyTorch's exporter writes it), rotary by ONNX RotaryEmbedding 23

The step signature (docs/llm.md): input_ids [batch, S] i64, attention_mask [batch, P + S],
position_ids [batch, S] i64 (not gqa_rotary), past_key_values.{i}.key/value
[batch, cache_heads, P, head_dim]; outputs logits [batch, S, vocab], present.{i}.key/value.
RMSNorm and SwiGLU are plain ONNX ops.

    /usr/bin/python3 tools/models/llama_step_fused.py VARIANT OUT.onnx   (the test's model)
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VARIANTS = ("gqa_rotary", "gqa", "mha", "attention23")


class _Graph:
    def __init__(self, opset):
        self.opset = opset
        self.nodes, self.inits, self.n = [], [], 0

    def w(self, name, array):
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def ints(self, values):
        self.n += 1
        return self.w(f"c{self.n}", np.array(values, np.int64))

    def op(self, op, inputs, domain="", outputs=None, **attrs):
        self.n += 1
        outs = outputs or [f"{op.lower()}_{self.n}"]
        self.nodes.append(helper.make_node(op, inputs, outs, name=f"{op}_{self.n}",
                                           domain=domain, **attrs))
        return outs[0] if len(outs) == 1 else outs

    def rms(self, x, weight, eps):
        sq = self.op("Mul", [x, x])
        if self.opset >= 18:
            mean = self.op("ReduceMean", [sq, self.ints([-1])], keepdims=1)
        else:
            mean = self.op("ReduceMean", [sq], axes=[-1], keepdims=1)
        eps_c = self.w(f"eps{self.n}", np.array(eps, np.float32))
        inv = self.op("Reciprocal", [self.op("Sqrt", [self.op("Add", [mean, eps_c])])])
        return self.op("Mul", [self.op("Mul", [x, inv]), weight])

    def matmul(self, x, linear, name, repeat=1, heads=0):
        """x @ linear.weight.T; with repeat > 1 each output head (rows of heads x head_dim)
        repeated `repeat` times in place (the KV heads of a group, for MultiHeadAttention)."""
        wt = linear.weight.detach().numpy()
        if repeat > 1:
            hd = wt.shape[0] // heads
            wt = np.repeat(wt.reshape(heads, hd, -1), repeat, axis=0).reshape(-1, wt.shape[1])
        return self.op("MatMul", [x, self.w(name, wt.T.astype(np.float32))])


def build(lm, variant, opset=None):
    """The ModelProto of `variant` (VARIANTS) for the llama.Llama `lm` (eval mode)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant} (one of {', '.join(VARIANTS)})")
    attn0 = lm.layers[0].attn
    heads, kv_heads, hd = attn0.heads, attn0.kv_heads, attn0.head_dim
    vocab, d = lm.head.out_features, lm.embed.embedding_dim
    cache_heads = heads if variant == "mha" else kv_heads
    rep = heads // kv_heads if variant == "mha" else 1
    opset = opset or (23 if variant == "attention23" else 17)
    g = _Graph(opset)
    mask_type = TensorProto.INT32 if variant == "gqa_rotary" else TensorProto.INT64
    half = hd // 2
    cos = g.w("cos_cache", lm.cos[:, :half].numpy().astype(np.float32))
    sin = g.w("sin_cache", lm.sin[:, :half].numpy().astype(np.float32))
    x = g.op("Gather", [g.w("embed", lm.embed.weight.detach().numpy()), "input_ids"])
    # Shared per step: GroupQueryAttention's lengths, MultiHeadAttention's padding mask,
    # Attention 23's bool mask.
    if variant.startswith("gqa"):
        mask64 = g.op("Cast", ["attention_mask"], to=TensorProto.INT64)
        total_keys = g.op("ReduceSum", [mask64, g.ints([1])], keepdims=0)
        seqlens = g.op("Cast", [g.op("Sub", [total_keys, g.ints(1)])], to=TensorProto.INT32)
        width = g.op("Gather", [g.op("Shape", ["attention_mask"]), g.ints(1)], axis=0)
        total = g.op("Cast", [width], to=TensorProto.INT32)
    elif variant == "mha":
        kpm = g.op("Cast", ["attention_mask"], to=TensorProto.INT32)
    else:
        ids_shape = g.op("Shape", ["input_ids"])
        s_len = g.op("Gather", [ids_shape, g.ints(1)], axis=0)
        t_len = g.op("Gather", [g.op("Shape", ["attention_mask"]), g.ints(1)], axis=0)
        rows = g.op("Unsqueeze", [g.op("Add", [g.op("Range", [g.ints(0), s_len, g.ints(1)]),
                                               g.op("Sub", [t_len, s_len])]), g.ints([1])])
        cols = g.op("Unsqueeze", [g.op("Range", [g.ints(0), t_len, g.ints(1)]), g.ints([0])])
        causal = g.op("Not", [g.op("Greater", [cols, rows])])  # [S, T]: key j <= P + i
        pad = g.op("Unsqueeze", [g.op("Cast", ["attention_mask"], to=TensorProto.BOOL),
                                 g.ints([1, 2])])  # [B, 1, 1, T]
        attn_mask = g.op("And", [pad, causal])  # [B, 1, S, T]
    past_names, present_names = [], []
    for i, layer in enumerate(lm.layers):
        a = layer.attn
        past_k, past_v = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        pres_k, pres_v = f"present.{i}.key", f"present.{i}.value"
        past_names += [past_k, past_v]
        present_names += [pres_k, pres_v]
        h = g.rms(x, g.w(f"l{i}.n1", layer.n1.weight.detach().numpy()), layer.n1.eps)
        out = f"l{i}.attn"
        if variant == "gqa_rotary":
            wqkv = np.concatenate([a.q.weight.detach().numpy(), a.k.weight.detach().numpy(),
                                   a.v.weight.detach().numpy()], 0)
            qkv = g.op("MatMul", [h, g.w(f"l{i}.wqkv", wqkv.T.astype(np.float32))])
            g.op("GroupQueryAttention", [qkv, "", "", past_k, past_v, seqlens, total, cos, sin],
                 domain="com.microsoft", outputs=[out, pres_k, pres_v], num_heads=heads,
                 kv_num_heads=kv_heads, do_rotary=1, rotary_interleaved=0)
        else:
            q = g.matmul(h, a.q, f"l{i}.wq")
            k = g.matmul(h, a.k, f"l{i}.wk", rep, kv_heads)
            v = g.matmul(h, a.v, f"l{i}.wv", rep, kv_heads)
            if variant == "attention23":
                q = g.op("RotaryEmbedding", [q, cos, sin, "position_ids"], num_heads=heads)
                k = g.op("RotaryEmbedding", [k, cos, sin, "position_ids"], num_heads=kv_heads)
                g.op("Attention", [q, k, v, attn_mask, past_k, past_v],
                     outputs=[out, pres_k, pres_v], q_num_heads=heads, kv_num_heads=kv_heads)
            else:
                q = g.op("RotaryEmbedding", [q, "position_ids", cos, sin], domain="com.microsoft",
                         num_heads=heads)
                k = g.op("RotaryEmbedding", [k, "position_ids", cos, sin], domain="com.microsoft",
                         num_heads=cache_heads)
                if variant == "gqa":
                    g.op("GroupQueryAttention", [q, k, v, past_k, past_v, seqlens, total],
                         domain="com.microsoft", outputs=[out, pres_k, pres_v], num_heads=heads,
                         kv_num_heads=kv_heads)
                else:
                    g.op("MultiHeadAttention", [q, k, v, "", kpm, "", past_k, past_v],
                         domain="com.microsoft", outputs=[out, pres_k, pres_v], num_heads=heads,
                         unidirectional=1)
        x = g.op("Add", [x, g.matmul(out, a.o, f"l{i}.wo")])
        h = g.rms(x, g.w(f"l{i}.n2", layer.n2.weight.detach().numpy()), layer.n2.eps)
        gate = g.matmul(h, layer.gate, f"l{i}.gate")
        silu = g.op("Mul", [gate, g.op("Sigmoid", [gate])])
        x = g.op("Add", [x, g.matmul(g.op("Mul", [silu, g.matmul(h, layer.up, f"l{i}.up")]),
                                     layer.down, f"l{i}.down")])
    h = g.rms(x, g.w("norm", lm.norm.weight.detach().numpy()), lm.norm.eps)
    g.matmul(h, lm.head, "head")
    g.nodes[-1].output[0] = "logits"
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    inputs = [helper.make_tensor_value_info("input_ids", i64, ["batch", "seq"]),
              helper.make_tensor_value_info("attention_mask", mask_type, ["batch", "total"])]
    if variant != "gqa_rotary":
        inputs.append(helper.make_tensor_value_info("position_ids", i64, ["batch", "seq"]))
    inputs += [helper.make_tensor_value_info(n, f, ["batch", cache_heads, "past", hd])
               for n in past_names]
    outputs = [helper.make_tensor_value_info("logits", f, ["batch", "seq", vocab])]
    outputs += [helper.make_tensor_value_info(n, f, ["batch", cache_heads, "total", hd])
                for n in present_names]
    graph = helper.make_graph(g.nodes, f"llama_step_{variant}", inputs, outputs, g.inits)
    imports = [helper.make_opsetid("", opset)]
    if variant != "attention23":
        imports.append(helper.make_opsetid("com.microsoft", 1))
    model = helper.make_model(graph, opset_imports=imports, producer_name="llama_step_fused")
    model.ir_version = 10 if opset >= 23 else 8
    if opset <= onnx.defs.onnx_opset_version():  # Debian's onnx 1.12 knows opsets to 17
        onnx.checker.check_model(model)
    return model


def cache_heads(lm, variant):
    return lm.layers[0].attn.heads if variant == "mha" else lm.kv_heads


if __name__ == "__main__":
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch

    import llama
    if len(sys.argv) != 3 or sys.argv[1] not in VARIANTS:
        sys.exit(f"usage: llama_step_fused.py {{{','.join(VARIANTS)}}} OUT.onnx")
    torch.manual_seed(34)
    m = llama.Llama(vocab=64, d=32, layers=2, heads=4, kv_heads=2, head_dim=8, ffn=64,
                    repeat="expand").eval()
    onnx.save(build(m, sys.argv[1]), sys.argv[2])
