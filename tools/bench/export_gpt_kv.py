#!/usr/bin/python3
"""Exports GPT decoders with a KV cache (the realistic decoder) for tools/bench/quant_bench.py.

export_bench_models.py's gpt recomputes its whole prefix every step (no KV cache), so its
products have up to prompt + 128 rows. Here the prompt runs once (prefill, M = prompt length)
and then every greedy step feeds one token (M = 1): each layer's past keys and values are one
loop-carried tensor [layers, 2, batch, heads, T, head_dim] that grows by one position per
step (Concat on axis 4). Same Block/TinyGpt modules as export_bench_models.py (its weights
are reused, not rewritten), exported with torch.jit.script to one ONNX Loop.

  gpt_kv      the bench's tiny GPT shape (vocab 256, d 64, 4 heads, 2 layers): weights of
              16-64 KB per product, cache-resident, so per-step fixed costs dominate
  gpt_kv_256  vocab 1024, d 256, 4 heads, 4 layers (13.6 MB of f32 product weights, more than L2):
              the weight-streaming GEMVs that weight-only quantization is for

  /usr/bin/python3 tools/bench/export_gpt_kv.py [--out build/bench/models]

Writes MODEL/loop.onnx, loop.pt, input_*.npy and PyTorch's greedy tokens (output_tokens.npy);
every greedy step's top-1/top-2 logit gap is at least MIN_MARGIN (checked).
"""
import argparse
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_bench_models as ebm  # noqa: E402


class KvBlock(nn.Module):
    """Block's math on the new positions only, attending to the cached past keys/values."""

    def __init__(self, blk: ebm.Block):
        super().__init__()
        self.heads = blk.heads
        self.scale = blk.scale
        self.ln1, self.q, self.k, self.v, self.proj = blk.ln1, blk.q, blk.k, blk.v, blk.proj
        self.ln2, self.fc1, self.fc2 = blk.ln2, blk.fc1, blk.fc2

    def forward(self, x: torch.Tensor, past: torch.Tensor, causal: bool):
        # x [b, t, d]; past [2, b, heads, T, hd] (T = 0 is never passed: see KvGptDecode).
        b, t, d = x.size(0), x.size(1), x.size(2)
        hd = d // self.heads
        h = self.ln1(x)
        q = self.q(h).reshape(b, t, self.heads, hd).transpose(1, 2)
        k = self.k(h).reshape(b, t, self.heads, hd).transpose(1, 2)
        v = self.v(h).reshape(b, t, self.heads, hd).transpose(1, 2)
        if not causal:
            k = torch.cat([past[0], k], 2)
            v = torch.cat([past[1], v], 2)
        att = torch.matmul(q, k.transpose(2, 3)) * self.scale
        if causal:
            mask = torch.triu(torch.ones(t, t), diagonal=1) > 0.5
            att = att.masked_fill(mask, float("-inf"))
        y = torch.matmul(torch.softmax(att, dim=-1), v)
        y = y.transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(ebm.F.gelu(self.fc1(self.ln2(x)))), torch.stack([k, v])


class KvGptDecode(nn.Module):
    """Greedy decode: prefill over the prompt, then one token per step with the KV cache."""

    def __init__(self, gpt: ebm.TinyGpt):
        super().__init__()
        self.tok, self.pos, self.ln, self.head = gpt.tok, gpt.pos, gpt.ln, gpt.head
        self.blocks = nn.ModuleList([KvBlock(b) for b in gpt.blocks])

    def run(self, ids: torch.Tensor, start: int, cache: torch.Tensor, causal: bool):
        t = ids.size(1)
        x = self.tok(ids) + self.pos(torch.arange(start, start + t).unsqueeze(0))
        new_cache = torch.zeros(0)
        i = 0
        for blk in self.blocks:
            x, kv = blk(x, cache[i], causal)
            new_cache = kv.unsqueeze(0) if i == 0 else torch.cat([new_cache, kv.unsqueeze(0)], 0)
            i += 1
        return self.head(self.ln(x[:, -1])), new_cache

    def forward(self, prompt: torch.Tensor, max_new_tokens: torch.Tensor) -> torch.Tensor:
        n = int(max_new_tokens)
        # Prefill: causal attention over the prompt; the cache argument is not read.
        logits, cache = self.run(prompt, 0, torch.zeros(len(self.blocks), 1), True)
        tokens = torch.zeros(prompt.size(0), n, dtype=torch.long)
        for i in range(n):
            nxt = logits.argmax(-1, keepdim=True)
            tokens[:, i] = nxt[:, 0]
            logits, cache = self.run(nxt, cache.size(4), cache, False)
        return tokens


def eager(gpt, prompt, n):
    """Greedy tokens and every step's logits, recomputing the prefix (the cache-free oracle)."""
    with torch.no_grad():
        ids, seen = prompt, []
        for _ in range(n):
            logits = gpt(ids)[:, -1]
            seen.append(logits)
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
    return ids[0, prompt.size(1):].tolist(), seen


def make(folder, vocab, d, heads, layers, head_gain, prompt, n, *, seed):
    torch.manual_seed(seed)
    gpt = ebm.TinyGpt(vocab, d, heads, layers, prompt.size(1) + n + 1).eval()
    with torch.no_grad():
        gpt.head.weight.mul_(head_gain)
    toks, seen = eager(gpt, prompt, n)
    gap = ebm.check_margins(seen, folder)
    os.makedirs(folder, exist_ok=True)
    decode = KvGptDecode(gpt).eval()
    nmax = torch.tensor(n)
    with torch.no_grad():
        got = torch.jit.script(decode)(prompt, nmax)[0].tolist()
        if got != toks:
            raise SystemExit(f"{folder}: the KV-cache decode differs from the prefix recompute")
        ebm.export_onnx(decode, (prompt, nmax), os.path.join(folder, "loop.onnx"),
                        ["prompt", "max_new_tokens"], ["tokens"])
        torch.jit.script(decode).save(os.path.join(folder, "loop.pt"))
    ebm.save_case(folder, {"prompt": prompt.numpy(), "max_new_tokens": ebm.np.array(n, "int64")},
                  toks)
    print(f"{os.path.basename(folder)} -> {folder}: {len(toks)} tokens, min gap {gap:.4f}, "
          f"first {toks[:12]}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(ebm.ROOT, "build", "bench", "models"))
    args = p.parse_args()
    torch.set_num_threads(1)
    prompt = torch.tensor([[3, 14, 15, 9]], dtype=torch.long)
    ebm.with_seed(make, os.path.join(args.out, "gpt_kv"), 256, 64, 4, 2, 8.0, prompt, 128,
                  seed=2)
    ebm.with_seed(make, os.path.join(args.out, "gpt_kv_256"), 1024, 256, 4, 4, 8.0, prompt,
                  128, seed=2)


if __name__ == "__main__":
    main()
