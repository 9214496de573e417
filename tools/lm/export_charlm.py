#!/usr/bin/python3
"""Exports the trained character LSTM (tools/lm/charlm.pt) to ONNX with the whole generation
loop inside the graph, and writes PyTorch reference outputs for the tests.

The graph (opset 17, plus dynvm's own ops Sample and Emit in domain "dynvm"):

  inputs   prompt [batch, prompt_len] i64, max_new_tokens [] i64, temperature [] f32,
           seed [] i64, stop_token [] i64 (-1: never stop early)
  output   tokens [batch, generated] i64

  state := zeros; for each prompt token: embed, LSTM layer 1, LSTM layer 2 (no output layer)
  logits := output layer of the last state
  loop up to max_new_tokens while some row has not produced stop_token:
      tok := dynvm.Sample(logits, temperature, seed, step)     (temperature 0: argmax)
      dynvm.Emit(tok)                                          (streams the token to the host)
      tokens := Concat(tokens, tok)                            (grows in place)
      state := LSTM(LSTM(embed(tok)));  logits := output layer

Run with Debian's python: /usr/bin/python3 tools/lm/export_charlm.py
"""
import os
import sys

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from train_char_lstm import CharLM  # noqa: E402

OPSET = 17


def philox4x32(ctr, key):
    m0, m1, w0, w1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
    mask = 0xFFFFFFFF
    for r in range(10):
        if r:
            key = [(key[0] + w0) & mask, (key[1] + w1) & mask]
        p0, p1 = m0 * ctr[0], m1 * ctr[2]
        ctr = [((p1 >> 32) ^ ctr[1] ^ key[0]) & mask, p1 & mask, ((p0 >> 32) ^ ctr[3] ^ key[1]) & mask, p0 & mask]
    return ctr


def philox_uniform(seed, step, row):
    x = philox4x32([step & 0xFFFFFFFF, step >> 32, row & 0xFFFFFFFF, row >> 32], [seed & 0xFFFFFFFF, seed >> 32])
    return (((x[0] << 32) | x[1]) >> 11) * (1.0 / 9007199254740992.0)


def sample_rows(logits, temperature, seed, step):
    out = []
    for r, row in enumerate(logits.astype(np.float64)):
        best = int(np.argmax(row))
        if temperature <= 0:
            out.append(best)
            continue
        p = np.exp((row - row[best]) / temperature)
        u = philox_uniform(seed, step, r) * p.sum()
        out.append(int(np.searchsorted(np.cumsum(p), u, side="right")))
    return np.array(out, dtype=np.int64)


def onnx_lstm_weights(lstm, layer, hidden):
    """PyTorch gate order (i, f, g, o) to ONNX (i, o, f, c)."""
    def reorder(w):
        i, f, g, o = np.split(w, 4, axis=0)
        return np.concatenate([i, o, f, g], axis=0)
    w = reorder(getattr(lstm, f"weight_ih_l{layer}").detach().numpy())
    r = reorder(getattr(lstm, f"weight_hh_l{layer}").detach().numpy())
    b = np.concatenate([reorder(getattr(lstm, f"bias_ih_l{layer}").detach().numpy()),
                        reorder(getattr(lstm, f"bias_hh_l{layer}").detach().numpy())])
    return w[None].astype(np.float32), r[None].astype(np.float32), b[None].astype(np.float32)


def build_graph(model, vocab):
    hidden = model.lstm.hidden_size
    layers = model.lstm.num_layers
    inits = [numpy_helper.from_array(model.embed.weight.detach().numpy().astype(np.float32), "embedding"),
             numpy_helper.from_array(model.out.weight.detach().numpy().astype(np.float32), "out_w"),
             numpy_helper.from_array(model.out.bias.detach().numpy().astype(np.float32), "out_b")]
    for l in range(layers):
        w, r, b = onnx_lstm_weights(model.lstm, l, hidden)
        inits += [numpy_helper.from_array(w, f"W{l}"), numpy_helper.from_array(r, f"R{l}"),
                  numpy_helper.from_array(b, f"B{l}")]
    const = lambda name, arr: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(arr)))

    def step_nodes(prefix, tok, states_in, states_out):
        """embed(tok [B]) -> LSTM layers; states are (h, c) per layer, each [1, B, H]."""
        nodes = [helper.make_node("Gather", ["embedding", tok], [f"{prefix}emb"]),
                 helper.make_node("Unsqueeze", [f"{prefix}emb", "axis0"], [f"{prefix}x0"])]
        x = f"{prefix}x0"
        for l in range(layers):
            h, c = states_in[2 * l], states_in[2 * l + 1]
            ho, co = states_out[2 * l], states_out[2 * l + 1]
            nodes.append(helper.make_node("LSTM", [x, f"W{l}", f"R{l}", f"B{l}", "", h, c], ["", ho, co],
                                          hidden_size=hidden))
            x = ho  # Y_h [1, B, H] is the next layer's X for a one-step sequence
        return nodes, x

    def logits_nodes(prefix, h_top, out):
        return [helper.make_node("Squeeze", [h_top, "axis0"], [f"{prefix}htop"]),
                helper.make_node("Gemm", [f"{prefix}htop", "out_w", "out_b"], [out], transB=1)]

    state_names = [f"{k}{l}" for l in range(layers) for k in ("h", "c")]
    nodes = [const("axis0", [0]), const("axis1", [1]), const("zero_i", np.array([0], dtype=np.int64)),
             const("hidden_dim", np.array([hidden], dtype=np.int64)), const("one_dim", np.array([1], dtype=np.int64)),
             helper.make_node("Shape", ["prompt"], ["prompt_shape"]),
             helper.make_node("Gather", ["prompt_shape", "zero_i"], ["batch1"]),
             helper.make_node("Gather", ["prompt_shape", "one_dim"], ["prompt_len1"]),
             helper.make_node("Squeeze", ["prompt_len1", "axis0"], ["prompt_len"]),
             helper.make_node("Concat", ["one_dim", "batch1", "hidden_dim"], ["state_shape"], axis=0),
             helper.make_node("ConstantOfShape", ["state_shape"], ["zeros"],
                              value=numpy_helper.from_array(np.array([0], dtype=np.float32))),
             helper.make_node("Concat", ["batch1", "zero_i"], ["empty_shape"], axis=0),
             helper.make_node("ConstantOfShape", ["empty_shape"], ["tokens0"],
                              value=numpy_helper.from_array(np.array([0], dtype=np.int64)))]

    # Prompt loop: consume every prompt token, no output layer.
    body_in = [helper.make_tensor_value_info("p_i", TensorProto.INT64, []),
               helper.make_tensor_value_info("p_cond", TensorProto.BOOL, [])]
    body_in += [helper.make_tensor_value_info(f"p_{s}", TensorProto.FLOAT, None) for s in state_names]
    step, _ = step_nodes("p_", "p_tok", [f"p_{s}" for s in state_names], [f"p_{s}_out" for s in state_names])
    body = helper.make_graph(
        [helper.make_node("Gather", ["prompt", "p_i"], ["p_tok"], axis=1),
         helper.make_node("Identity", ["p_cond"], ["p_cond_out"])] + step,
        "prompt_body", body_in,
        [helper.make_tensor_value_info("p_cond_out", TensorProto.BOOL, [])] +
        [helper.make_tensor_value_info(f"p_{s}_out", TensorProto.FLOAT, None) for s in state_names])
    nodes.append(helper.make_node("Loop", ["prompt_len", ""] + ["zeros"] * len(state_names),
                                  [f"{s}_p" for s in state_names], body=body))
    nodes += logits_nodes("l0_", f"h{layers - 1}_p", "logits0")

    # Generation loop.
    g_states = [f"g_{s}" for s in state_names]
    body_in = [helper.make_tensor_value_info("g_i", TensorProto.INT64, []),
               helper.make_tensor_value_info("g_cond", TensorProto.BOOL, [])]
    body_in += [helper.make_tensor_value_info(s, TensorProto.FLOAT, None) for s in g_states]
    body_in += [helper.make_tensor_value_info("g_logits", TensorProto.FLOAT, None),
                helper.make_tensor_value_info("g_tokens", TensorProto.INT64, None)]
    step, h_top = step_nodes("g_", "g_tok", g_states, [f"{s}_out" for s in g_states])
    gen_nodes = [
        helper.make_node("Sample", ["g_logits", "temperature", "seed", "g_i"], ["g_tok"], domain="dynvm"),
        helper.make_node("Emit", ["g_tok"], [], domain="dynvm", stream=0),
        helper.make_node("Unsqueeze", ["g_tok", "axis1"], ["g_tok_col"]),
        helper.make_node("Concat", ["g_tokens", "g_tok_col"], ["g_tokens_out"], axis=1),
        helper.make_node("Equal", ["g_tok", "stop_token"], ["g_is_stop"]),
        helper.make_node("Not", ["g_is_stop"], ["g_not_stop"]),
        helper.make_node("Cast", ["g_not_stop"], ["g_not_stop_i"], to=TensorProto.INT64),
        helper.make_node("ReduceMax", ["g_not_stop_i"], ["g_any_i"], keepdims=0),
        helper.make_node("Cast", ["g_any_i"], ["g_cond_out"], to=TensorProto.BOOL),
    ] + step + logits_nodes("g_", h_top, "g_logits_out")
    body = helper.make_graph(
        gen_nodes, "generate_body", body_in,
        [helper.make_tensor_value_info("g_cond_out", TensorProto.BOOL, [])] +
        [helper.make_tensor_value_info(f"{s}_out", TensorProto.FLOAT, None) for s in g_states] +
        [helper.make_tensor_value_info("g_logits_out", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("g_tokens_out", TensorProto.INT64, None)])
    nodes.append(helper.make_node("Constant", [], ["true"], value=numpy_helper.from_array(np.array(True))))
    nodes.append(helper.make_node("Loop", ["max_new_tokens", "true"] + [f"{s}_p" for s in state_names] +
                                  ["logits0", "tokens0"],
                                  [f"{s}_final" for s in state_names] + ["logits_final", "tokens"], body=body))
    graph = helper.make_graph(
        nodes, "charlm_generate",
        [helper.make_tensor_value_info("prompt", TensorProto.INT64, ["batch", "prompt_len"]),
         helper.make_tensor_value_info("max_new_tokens", TensorProto.INT64, []),
         helper.make_tensor_value_info("temperature", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("seed", TensorProto.INT64, []),
         helper.make_tensor_value_info("stop_token", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch", "generated"])],
        initializer=inits)
    model_proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                          helper.make_opsetid("dynvm", 1)],
                                    producer_name="dynvm tools/lm/export_charlm.py")
    model_proto.ir_version = 8
    return model_proto


def reference_generate(model, prompt, max_new, temperature, seed, stop):
    """The same decode in PyTorch (the oracle for greedy; sampling uses the same Philox)."""
    with torch.no_grad():
        x = torch.tensor(prompt, dtype=torch.long).t()  # [T, B]
        logits, state = model(x)
        logits = logits[-1].numpy()
        out = []
        for step in range(max_new):
            tok = sample_rows(logits, temperature, seed, step)
            out.append(tok)
            if stop >= 0 and np.all(tok == stop):
                break
            l, state = model(torch.tensor(tok, dtype=torch.long)[None], state)
            logits = l[-1].numpy()
        return np.stack(out, axis=1)


def main():
    chars = [chr(int(l)) for l in open(os.path.join(HERE, "vocab.txt"))]
    index = {c: i for i, c in enumerate(chars)}
    model = CharLM(len(chars))
    model.load_state_dict(torch.load(os.path.join(HERE, "charlm.pt")))
    model.eval()
    proto = build_graph(model, len(chars))
    onnx.checker.check_model(proto)
    onnx.save(proto, os.path.join(HERE, "charlm.onnx"))
    # Reference outputs for tests: greedy at batch 1 and 3, a sampled run, early stop.
    data = os.path.join(HERE, "testdata")
    os.makedirs(data, exist_ok=True)
    enc = lambda s: [index[c] for c in s]
    cases = {
        "greedy_b1": ([enc("And God said")], 64, 0.0, 0, -1),
        "greedy_b3": ([enc("In the begin"), enc("And the LORD"), enc("Blessed are ")], 48, 0.0, 0, -1),
        "sampled_b2": ([enc("Jesus wept. "), enc("Thou shalt n")], 48, 0.8, 1234, -1),
        "stop_b1": ([enc("And he said")], 400, 0.8, 5, index["\n"]),
    }
    for name, (prompt, n, t, seed, stop) in cases.items():
        prompt = np.array(prompt, dtype=np.int64)
        toks = reference_generate(model, prompt, n, t, seed, stop)
        np.save(os.path.join(data, f"{name}_prompt.npy"), prompt)
        np.save(os.path.join(data, f"{name}_max_new_tokens.npy"), np.array(n, dtype=np.int64))
        np.save(os.path.join(data, f"{name}_temperature.npy"), np.array(t, dtype=np.float32))
        np.save(os.path.join(data, f"{name}_seed.npy"), np.array(seed, dtype=np.int64))
        np.save(os.path.join(data, f"{name}_stop_token.npy"), np.array(stop, dtype=np.int64))
        np.save(os.path.join(data, f"{name}_tokens.npy"), toks)
        print(name, repr("".join(chars[t] for t in toks[0])))
    print("wrote", os.path.join(HERE, "charlm.onnx"), os.path.getsize(os.path.join(HERE, "charlm.onnx")), "bytes")


if __name__ == "__main__":
    main()
