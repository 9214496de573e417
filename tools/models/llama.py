"""A Llama-style decoder in PyTorch (RMSNorm, rotary embeddings with rotate-half, SwiGLU,
grouped-query attention with K/V repeated by repeat_interleave or by expand + reshape, a KV
cache), with its decode loop scripted so that torch.onnx.export writes the whole generation as
one ONNX Loop: the prompt in one step, then one token per iteration, each layer's keys and values
carried through the loop in one tensor [layers, 2, batch, kv_heads, length, head_dim] that grows
along its axis 4.

Used by tests/llama_export_test.py (random weights, several shapes) and the LLM benchmarks.
The greedy decode returns the tokens and each step's logits; the sampled one draws each token
from softmax(logits / temperature) with pre-drawn uniforms (an input), so its tokens are exact.
"""
import math
from typing import List

import torch
import torch.nn as nn


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d) + 0.1 * torch.randn(d))

    def forward(self, x):
        v = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(v + self.eps))


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, d: int, heads: int, kv_heads: int, head_dim: int, repeat: str):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.repeat = heads, kv_heads, head_dim, repeat
        self.q = nn.Linear(d, heads * head_dim, bias=False)
        self.k = nn.Linear(d, kv_heads * head_dim, bias=False)
        self.v = nn.Linear(d, kv_heads * head_dim, bias=False)
        self.o = nn.Linear(heads * head_dim, d, bias=False)

    def expand_kv(self, x):
        n_rep = self.heads // self.kv_heads
        b, h, t, hd = x.shape
        if self.repeat == "repeat_interleave":
            return torch.repeat_interleave(x, n_rep, dim=1).reshape(b, h * n_rep, t, hd)
        return x[:, :, None, :, :].expand(b, h, n_rep, t, hd).reshape(b, h * n_rep, t, hd)

    def forward(self, x, cos, sin, past_k, past_v):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        kk = self.expand_kv(k)
        vv = self.expand_kv(v)
        s = q @ kk.transpose(-2, -1) / math.sqrt(self.head_dim)
        total = kk.shape[2]
        mask = torch.ones(t, total, dtype=torch.bool).tril(total - t)
        s = s.masked_fill(~mask, float("-inf"))
        y = torch.softmax(s, dim=-1) @ vv
        return self.o(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)), k, v


class Layer(nn.Module):
    def __init__(self, d, heads, kv_heads, head_dim, ffn, repeat):
        super().__init__()
        self.n1 = RMSNorm(d)
        self.attn = Attention(d, heads, kv_heads, head_dim, repeat)
        self.n2 = RMSNorm(d)
        self.gate = nn.Linear(d, ffn, bias=False)
        self.up = nn.Linear(d, ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin, past_k, past_v):
        a, k, v = self.attn(self.n1(x), cos, sin, past_k, past_v)
        x = x + a
        h = self.n2(x)
        x = x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))
        return x, k, v


class Llama(nn.Module):
    def __init__(self, vocab=64, d=32, layers=2, heads=4, kv_heads=2, head_dim=8, ffn=64,
                 repeat="repeat_interleave", max_pos=256):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(
            [Layer(d, heads, kv_heads, head_dim, ffn, repeat) for _ in range(layers)])
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.kv_heads, self.head_dim = kv_heads, head_dim
        inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        f = torch.outer(torch.arange(max_pos).float(), inv)
        emb = torch.cat([f, f], dim=-1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())

    def step(self, ids, start: int, cache):
        # cache: [layers, 2, batch, kv_heads, past, head_dim]
        t = ids.shape[1]
        cos = self.cos[start:start + t]
        sin = self.sin[start:start + t]
        x = self.embed(ids)
        ks: List[torch.Tensor] = []
        i = 0
        for layer in self.layers:
            x, k, v = layer(x, cos, sin, cache[i, 0], cache[i, 1])
            ks.append(torch.stack([k, v]))
            i += 1
        return self.head(self.norm(x))[:, -1], torch.stack(ks)


class GreedyDecode(nn.Module):
    def __init__(self, lm: Llama):
        super().__init__()
        self.lm = lm

    def forward(self, prompt: torch.Tensor, max_new_tokens: torch.Tensor):
        b = prompt.shape[0]
        past = torch.zeros(len(self.lm.layers), 2, b, self.lm.kv_heads, 0, self.lm.head_dim)
        logits, past = self.lm.step(prompt, 0, past)
        tok = logits.argmax(-1, keepdim=True)
        tokens = tok
        history = logits.unsqueeze(1)
        pos = prompt.shape[1]
        for _ in range(int(max_new_tokens) - 1):
            logits, past = self.lm.step(tok, pos, past)
            tok = logits.argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, tok], dim=1)
            history = torch.cat([history, logits.unsqueeze(1)], dim=1)
            pos += 1
        return tokens, history


class SampledDecode(nn.Module):
    """Inverse-CDF sampling: token = the number of CDF entries below u[:, step]."""

    def __init__(self, lm: Llama, temperature: float = 0.8):
        super().__init__()
        self.lm = lm
        self.temperature = temperature

    def draw(self, logits, u):
        cdf = torch.softmax(logits / self.temperature, dim=-1).cumsum(-1)
        tok = (cdf < u.unsqueeze(-1)).sum(-1, keepdim=True)
        return torch.clamp(tok, max=logits.shape[-1] - 1), cdf

    def forward(self, prompt: torch.Tensor, uniforms: torch.Tensor):
        b = prompt.shape[0]
        past = torch.zeros(len(self.lm.layers), 2, b, self.lm.kv_heads, 0, self.lm.head_dim)
        logits, past = self.lm.step(prompt, 0, past)
        tok, cdf = self.draw(logits, uniforms[:, 0])
        tokens = tok
        cdfs = cdf.unsqueeze(1)
        pos = prompt.shape[1]
        for i in range(1, uniforms.shape[1]):
            logits, past = self.lm.step(tok, pos, past)
            tok, cdf = self.draw(logits, uniforms[:, i])
            tokens = torch.cat([tokens, tok], dim=1)
            cdfs = torch.cat([cdfs, cdf.unsqueeze(1)], dim=1)
            pos += 1
        return tokens, cdfs
