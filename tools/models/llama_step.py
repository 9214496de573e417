"""tools/models/llama.py's decoder as an Optimum-layout *step model*: one call runs S new tokens
against a KV cache of P past positions, the signature ONNX Runtime's host loops (Optimum, GenAI)
drive and `vm-compile --decode` wraps into one in-VM decode loop (docs/llm.md):

  inputs   input_ids [batch, S] i64, attention_mask [batch, P + S] i64 (1: attend),
           position_ids [batch, S] i64, past_key_values.{i}.key / .value [batch, kv_heads, P, head_dim]
  outputs  logits [batch, S, vocab], present.{i}.key / .value [batch, kv_heads, P + S, head_dim]

Attention is plain MatMul / Softmax with K and V repeated by expand + reshape (what torch 1.13
exports; no fused attention op). `greedy` is the PyTorch host loop the tests compare against: the
prompt in one step, then one token per step.
"""
import math
from typing import List

import torch
import torch.nn as nn

import llama


class LlamaStep(nn.Module):
    def __init__(self, lm: llama.Llama):
        super().__init__()
        self.lm = lm

    def attention(self, attn, x, cos, sin, mask, past_k, past_v):
        b, t, _ = x.shape
        q = attn.q(x).view(b, t, attn.heads, attn.head_dim).transpose(1, 2)
        k = attn.k(x).view(b, t, attn.kv_heads, attn.head_dim).transpose(1, 2)
        v = attn.v(x).view(b, t, attn.kv_heads, attn.head_dim).transpose(1, 2)
        q = q * cos + llama.rotate_half(q) * sin
        k = k * cos + llama.rotate_half(k) * sin
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        s = q @ attn.expand_kv(k).transpose(-2, -1) / math.sqrt(attn.head_dim)
        s = s.masked_fill(~mask, float("-inf"))
        y = torch.softmax(s, dim=-1) @ attn.expand_kv(v)
        return attn.o(y.transpose(1, 2).reshape(b, t, attn.heads * attn.head_dim)), k, v

    def forward(self, input_ids, attention_mask, position_ids, *past):
        t = input_ids.shape[1]
        total = attention_mask.shape[1]
        causal = torch.ones(t, total, dtype=torch.bool).tril(total - t)
        mask = causal[None, None, :, :] & (attention_mask[:, None, None, :] != 0)
        cos = self.lm.cos[position_ids].unsqueeze(1)  # [b, 1, t, head_dim]
        sin = self.lm.sin[position_ids].unsqueeze(1)
        x = self.lm.embed(input_ids)
        presents: List[torch.Tensor] = []
        for i, layer in enumerate(self.lm.layers):
            a, k, v = self.attention(layer.attn, layer.n1(x), cos, sin, mask, past[2 * i],
                                     past[2 * i + 1])
            x = x + a
            h = layer.n2(x)
            x = x + layer.down(torch.nn.functional.silu(layer.gate(h)) * layer.up(h))
            presents += [k, v]
        return (self.lm.head(self.lm.norm(x)),) + tuple(presents)


def names(layers):
    past = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    present = [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    return past, present


def export(step: LlamaStep, path: str, opset: int = 17):
    lm = step.lm
    layers = len(lm.layers)
    past_names, present_names = names(layers)
    b, p, s = 2, 3, 2
    ids = torch.randint(0, lm.head.out_features, (b, s))
    mask = torch.ones(b, p + s, dtype=torch.int64)
    pos = torch.arange(p, p + s).unsqueeze(0).expand(b, s).contiguous()
    past = tuple(torch.randn(b, lm.kv_heads, p, lm.head_dim) for _ in range(2 * layers))
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
           "position_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    for n in past_names:
        dyn[n] = {0: "batch", 2: "past"}
    for n in present_names:
        dyn[n] = {0: "batch", 2: "total"}
    with torch.no_grad():
        torch.onnx.export(step, (ids, mask, pos) + past, path, opset_version=opset,
                          input_names=["input_ids", "attention_mask", "position_ids"] + past_names,
                          output_names=["logits"] + present_names, dynamic_axes=dyn)


@torch.no_grad()
def greedy(step: LlamaStep, prompt: torch.Tensor, new_tokens: int, pick=None):
    """Tokens [batch, new_tokens] and each step's last logits, the host loop way. `pick(logits,
    i)` chooses step i's tokens [batch] from its logits [batch, vocab] (default: argmax)."""
    lm = step.lm
    b, p = prompt.shape
    past = [torch.zeros(b, lm.kv_heads, 0, lm.head_dim) for _ in range(2 * len(lm.layers))]
    ids, total, out, history = prompt, p, [], []
    pos = torch.arange(p).unsqueeze(0).expand(b, p)
    for _ in range(new_tokens):
        res = step(ids, torch.ones(b, total, dtype=torch.int64), pos, *past)
        logits, past = res[0][:, -1], list(res[1:])
        tok = logits.argmax(-1) if pick is None else torch.as_tensor(pick(logits.numpy(), len(out)))
        out.append(tok)
        history.append(logits)
        ids = tok.unsqueeze(1)
        pos = torch.full((b, 1), total, dtype=torch.int64)
        total += 1
    return torch.stack(out, 1), torch.stack(history, 1)


def write_test_case(out_dir: str):
    """A tiny GQA step model (2 layers, random weights, 64 tokens, width 32: about 150 KB) and
    its PyTorch greedy case for tests/decode_alloc_test.cc: out_dir/model.onnx and
    case0/input_prompt.npy [1, 8], input_max_new_tokens.npy (40), output_tokens.npy [1, 40].
    Prompts whose top-2 logit gap falls below 1e-3 at some step are redrawn."""
    import os

    import numpy as np
    torch.manual_seed(34)
    lm = llama.Llama(vocab=64, d=32, layers=2, heads=4, kv_heads=2, head_dim=8, ffn=64,
                     repeat="expand").eval()
    step = LlamaStep(lm)
    os.makedirs(os.path.join(out_dir, "case0"), exist_ok=True)
    export(step, os.path.join(out_dir, "model.onnx"))
    rng = np.random.default_rng(34)
    for _ in range(50):
        prompt = torch.as_tensor(rng.integers(0, 64, (1, 8)))
        tokens, history = greedy(step, prompt, 40)
        top = np.sort(history.numpy(), -1)
        if float((top[..., -1] - top[..., -2]).min()) >= 1e-3:
            break
    else:
        raise RuntimeError("no prompt with a top-2 logit gap of 1e-3")
    np.save(os.path.join(out_dir, "case0", "input_prompt.npy"), prompt.numpy().astype(np.int64))
    np.save(os.path.join(out_dir, "case0", "input_max_new_tokens.npy"), np.array(40, np.int64))
    np.save(os.path.join(out_dir, "case0", "output_tokens.npy"), tokens.numpy().astype(np.int64))


if __name__ == "__main__":
    import sys
    if len(sys.argv) != 3 or sys.argv[1] != "--write-test-case":
        sys.exit("usage: llama_step.py --write-test-case OUT_DIR (tests/data/llama_step)")
    write_test_case(sys.argv[2])
