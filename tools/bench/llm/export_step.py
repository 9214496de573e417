#!/usr/bin/python3
"""Exports the LLM benchmark's Llama-style step models (tools/models/llama_step.py: RMSNorm,
rotary, SwiGLU, grouped-query attention as plain MatMul/Softmax; Optimum's step layout) with
random weights, at bench time (never committed), and their 4-bit form for ONNX Runtime:

  SIZE.onnx        the f32 step model
  SIZE.int4.onnx   the same with every MatMul weight of >= 16 KB as com.microsoft MatMulNBits
                   (bits 4, blocks of --block, symmetric: ORT's MatMul4BitsQuantizer's scale
                   m / -8 of the block's largest-magnitude element; what vm-compile
                   --quantize-weights int4 writes too), accuracy_level 0 (f32 activations)
  SIZE.int4a4.onnx the same at accuracy_level 4 (activations quantized to int8 per block: ORT's
                   CompInt8, and vm-compile --quantize-weights int4's default)
  SIZE.json        the shapes and the weight bytes

    /usr/bin/python3 tools/bench/llm/export_step.py --size 100mb --out build/llm
"""
import argparse
import json
import os
import sys

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
import llama  # noqa: E402
import llama_step  # noqa: E402

# name: vocab, width, layers, heads, kv_heads, head_dim, ffn (f32 weight bytes in the name)
SIZES = {
    "tiny": (256, 64, 2, 4, 2, 16, 128),
    "100mb": (8192, 512, 6, 8, 2, 64, 1408),
    "400mb": (8192, 1024, 8, 16, 4, 64, 2816),
    "1600mb": (16384, 2048, 7, 32, 8, 64, 5632),
}


def quantize_block(v, block):
    """4-bit symmetric blocks of the rows of v [N, K]: packed [N, blocks, block / 2], scales."""
    n, k = v.shape
    blocks = (k + block - 1) // block
    padded = np.zeros((n, blocks * block), np.float32)
    padded[:, :k] = v
    b = padded.reshape(n, blocks, block)
    idx = np.abs(b).argmax(-1)
    m = np.take_along_axis(b, idx[..., None], -1)[..., 0]
    scale = (m / -8.0).astype(np.float32)
    inv = np.where(scale != 0, 1.0 / np.where(scale != 0, scale, 1), 0).astype(np.float32)
    q = np.clip(np.rint(b * inv[..., None]) + 8, 0, 15).astype(np.uint8)
    q[:, -1, k - (blocks - 1) * block:] = 8  # the last block's padding dequantizes to 0
    packed = q[..., 0::2] | (q[..., 1::2] << 4)
    return packed, scale.reshape(-1)


def to_int4(model, block, min_bytes=16384):
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    dropped = set()
    for node in g.node:
        if node.op_type != "MatMul" or node.input[1] not in inits:
            continue
        w = numpy_helper.to_array(inits[node.input[1]])
        if w.ndim != 2 or w.nbytes < min_bytes:
            continue
        k, n = w.shape
        packed, scales = quantize_block(w.T.astype(np.float32), block)
        base = node.input[1]
        g.initializer.extend([numpy_helper.from_array(packed, base + ".q4"),
                              numpy_helper.from_array(scales, base + ".scales")])
        dropped.add(base)
        node.op_type, node.domain = "MatMulNBits", "com.microsoft"
        node.input[:] = [node.input[0], base + ".q4", base + ".scales"]
        node.attribute.extend([helper.make_attribute("K", k), helper.make_attribute("N", n),
                               helper.make_attribute("bits", 4),
                               helper.make_attribute("block_size", block)])
    keep = [t for t in g.initializer if t.name not in dropped]
    del g.initializer[:]
    g.initializer.extend(keep)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def with_accuracy_level(model, level):
    """The MatMulNBits nodes' accuracy_level set to `level` (in place)."""
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            kept = [a for a in node.attribute if a.name != "accuracy_level"]
            del node.attribute[:]
            node.attribute.extend(kept + [helper.make_attribute("accuracy_level", level)])
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--out", required=True)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    vocab, width, layers, heads, kv_heads, head_dim, ffn = SIZES[a.size]
    torch.manual_seed(a.seed)
    lm = llama.Llama(vocab=vocab, d=width, layers=layers, heads=heads, kv_heads=kv_heads,
                     head_dim=head_dim, ffn=ffn, repeat="expand", max_pos=1024).eval()
    with torch.no_grad():  # weights of a trained model's scale: logits of a few units
        for p in lm.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.5 / np.sqrt(p.shape[1]))
    step = llama_step.LlamaStep(lm)
    path = os.path.join(a.out, f"{a.size}.onnx")
    llama_step.export(step, path)
    weight_bytes = sum(p.numel() * 4 for p in lm.parameters())
    m = onnx.load(path)
    to_int4(m, a.block)
    onnx.save(m, os.path.join(a.out, f"{a.size}.int4.onnx"))
    onnx.save(with_accuracy_level(m, 4), os.path.join(a.out, f"{a.size}.int4a4.onnx"))
    torch.save(lm.state_dict(), os.path.join(a.out, f"{a.size}.pt"))
    info = dict(size=a.size, vocab=vocab, width=width, layers=layers, heads=heads,
                kv_heads=kv_heads, head_dim=head_dim, ffn=ffn, weight_bytes=weight_bytes,
                block=a.block, seed=a.seed)
    with open(os.path.join(a.out, f"{a.size}.json"), "w") as f:
        json.dump(info, f)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
