#!/usr/bin/python3
"""Exports small PyTorch decoders to ONNX, each with its greedy decode loop scripted
(torch.jit.script) so that the whole generation runs inside the graph as an ONNX Loop, and
writes reference outputs computed by PyTorch for the tests (tools/models/models_test.cc).

  lstm_scatter  a character LSTM LM; tokens written by indexed assignment (tokens[:, i] = tok),
                which exports as ScatterND on a loop-carried tensor
  lstm_cat      the same LM collecting tokens with torch.cat: a tensor that grows every
                iteration (a loop-carried Concat)
  lstm_list     the same LM appending each token to a Python list, concatenated at the end:
                exports as SequenceConstruct / SequenceInsert on a loop-carried sequence and
                ConcatFromSequence
  gpt           a tiny GPT decoder (causal self-attention, LayerNorm, GELU MLP), greedy, its
                ids growing every iteration and the whole prefix recomputed each step
  gpt_kv        the same trained GPT with a KV cache (tools/bench/export_gpt_kv.py's
                KvGptDecode): the prompt once, then one token per step, each layer's past keys
                and values carried through the loop as one tensor growing along its axis 4

Each model folder holds model.onnx and case<k>/ with input_<name>.npy and output_<name>.npy.
The models are trained for a few hundred steps on a short text (so the decode is not one
repeated token) with fixed seeds; every greedy step's top-1/top-2 logit gap is checked to be
large enough that float rounding cannot flip it.

Needs Debian's python3-torch and python3-onnx: /usr/bin/python3 tools/models/export_decoders.py
[NAME ...] (only the named models; all by default).
"""
import math
import os
import sys
from typing import List, Tuple

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OPSET = 17
MIN_MARGIN = 1e-2

TEXT = (
    "a small model reads a small text. the loop runs inside the graph, one token at a time, "
    "and the virtual machine keeps the state in place. greedy decoding picks the largest "
    "logit, appends the token and goes on until the budget is spent. "
)
VOCAB = sorted(set(TEXT))
STOI = {c: i for i, c in enumerate(VOCAB)}


def encode(s):
    return [STOI[c] for c in s]


class LstmLM(nn.Module):
    def __init__(self, vocab: int, emb: int = 32, hidden: int = 64):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, num_layers=1, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x):
        y, _ = self.lstm(self.embed(x))
        return self.out(y)


class LstmScatterDecode(nn.Module):
    """Greedy decode; tokens by indexed assignment into a preallocated tensor."""

    def __init__(self, lm: LstmLM):
        super().__init__()
        self.embed = lm.embed
        self.lstm = lm.lstm
        self.out = lm.out

    def forward(self, prompt: torch.Tensor, max_new_tokens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        y, (h, c) = self.lstm(self.embed(prompt))
        logits = self.out(y[:, -1])
        n = int(max_new_tokens)
        tokens = torch.zeros(prompt.size(0), n, dtype=torch.long)
        for i in range(n):
            tok = logits.argmax(-1)
            tokens[:, i] = tok
            y, (h, c) = self.lstm(self.embed(tok.unsqueeze(1)), (h, c))
            logits = self.out(y[:, -1])
        return tokens, logits


class LstmCatDecode(nn.Module):
    """Greedy decode; tokens collected with torch.cat (grows every iteration)."""

    def __init__(self, lm: LstmLM):
        super().__init__()
        self.embed = lm.embed
        self.lstm = lm.lstm
        self.out = lm.out

    def forward(self, prompt: torch.Tensor, max_new_tokens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        y, (h, c) = self.lstm(self.embed(prompt))
        logits = self.out(y[:, -1])
        tokens = prompt[:, :0]
        for i in range(int(max_new_tokens)):
            tok = logits.argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, tok], 1)
            y, (h, c) = self.lstm(self.embed(tok), (h, c))
            logits = self.out(y[:, -1])
        return tokens, logits


class LstmListDecode(nn.Module):
    """Greedy decode; tokens appended to a list (an ONNX sequence), concatenated at the end.
    The list starts with an empty [batch, 0] slice so that zero steps concatenate too."""

    def __init__(self, lm: LstmLM):
        super().__init__()
        self.embed = lm.embed
        self.lstm = lm.lstm
        self.out = lm.out

    def forward(self, prompt: torch.Tensor, max_new_tokens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        y, (h, c) = self.lstm(self.embed(prompt))
        logits = self.out(y[:, -1])
        toks: List[torch.Tensor] = [prompt[:, :0]]
        for i in range(int(max_new_tokens)):
            tok = logits.argmax(-1, keepdim=True)
            toks.append(tok)
            y, (h, c) = self.lstm(self.embed(tok), (h, c))
            logits = self.out(y[:, -1])
        return torch.cat(toks, 1), logits


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        # A Python float: math.sqrt of a scripted int would export as Sqrt on int64.
        self.scale = 1.0 / math.sqrt(d // heads)
        self.ln1 = nn.LayerNorm(d)
        # Separate projections: a scripted .split() would export as SplitToSequence (a sequence).
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.size(0), x.size(1), x.size(2)
        hd = d // self.heads
        h = self.ln1(x)
        q = self.q(h).reshape(b, t, self.heads, hd).transpose(1, 2)
        k = self.k(h).reshape(b, t, self.heads, hd).transpose(1, 2)
        v = self.v(h).reshape(b, t, self.heads, hd).transpose(1, 2)
        att = torch.matmul(q, k.transpose(2, 3)) * self.scale
        mask = torch.triu(torch.ones(t, t), diagonal=1) > 0.5
        att = att.masked_fill(mask, float("-inf"))
        y = torch.matmul(torch.softmax(att, dim=-1), v)
        y = y.transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGpt(nn.Module):
    def __init__(self, vocab: int, d: int = 32, heads: int = 2, layers: int = 2, block: int = 64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(block, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.size(1)
        x = self.tok(ids) + self.pos(torch.arange(t).unsqueeze(0))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


class GptDecode(nn.Module):
    """Greedy decode; the ids grow by one token per iteration, the prefix recomputed."""

    def __init__(self, gpt: TinyGpt):
        super().__init__()
        self.gpt = gpt

    def forward(self, prompt: torch.Tensor, max_new_tokens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        ids = prompt
        logits = self.gpt(ids)[:, -1]
        for i in range(int(max_new_tokens)):
            nxt = logits.argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], 1)
            logits = self.gpt(ids)[:, -1]
        return ids, logits


sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench"))
from export_gpt_kv import KvGptDecode  # noqa: E402


class GptKvDecode(KvGptDecode):
    """GptDecode's outputs (ids, last logits) from the KV-cache decode."""

    def forward(self, prompt: torch.Tensor, max_new_tokens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        logits, cache = self.run(prompt, 0, torch.zeros(len(self.blocks), 1), True)
        ids = prompt
        for i in range(int(max_new_tokens)):
            nxt = logits.argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], 1)
            logits, cache = self.run(nxt, cache.size(4), cache, False)
        return ids, logits


def train(model, steps, seq_len, lr, seed):
    torch.manual_seed(seed)
    data = torch.tensor(encode(TEXT * 4))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - seq_len - 1, (16,))
        x = torch.stack([data[s:s + seq_len] for s in starts])
        y = torch.stack([data[s + 1:s + seq_len + 1] for s in starts])
        loss = F.cross_entropy(model(x).reshape(-1, len(VOCAB)), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss)


def check_margins(step_logits):
    for lg in step_logits:
        top = torch.topk(lg, 2, dim=-1).values
        gap = float((top[..., 0] - top[..., 1]).min())
        if gap < MIN_MARGIN:
            raise SystemExit(f"a greedy step has a top-1/top-2 gap of {gap}: pick another seed")


def eager_margins_lstm(lm, prompt, n):
    with torch.no_grad():
        y, (h, c) = lm.lstm(lm.embed(prompt))
        logits = lm.out(y[:, -1])
        seen = [logits]
        for _ in range(n):
            tok = logits.argmax(-1, keepdim=True)
            y, (h, c) = lm.lstm(lm.embed(tok), (h, c))
            logits = lm.out(y[:, -1])
            seen.append(logits)
    check_margins(seen[:-1])


def eager_margins_gpt(gpt, prompt, n):
    with torch.no_grad():
        ids = prompt
        seen = []
        for _ in range(n):
            logits = gpt(ids)[:, -1]
            seen.append(logits)
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
    check_margins(seen)


def export(name, module, cases):
    folder = os.path.join(HERE, name)
    os.makedirs(folder, exist_ok=True)
    scripted = torch.jit.script(module)
    prompt, n = cases[0]
    path = os.path.join(folder, "model.onnx")
    torch.onnx.export(
        scripted, (prompt, n), path, opset_version=OPSET,
        input_names=["prompt", "max_new_tokens"], output_names=["tokens", "logits"],
        dynamic_axes={"prompt": {0: "batch", 1: "prompt_len"}})
    onnx.checker.check_model(onnx.load(path))
    for k, (prompt, n) in enumerate(cases):
        case = os.path.join(folder, f"case{k}")
        os.makedirs(case, exist_ok=True)
        with torch.no_grad():
            tokens, logits = scripted(prompt, n)
        np.save(os.path.join(case, "input_prompt.npy"), prompt.numpy().astype(np.int64))
        np.save(os.path.join(case, "input_max_new_tokens.npy"), np.array(int(n), dtype=np.int64))
        np.save(os.path.join(case, "output_tokens.npy"), tokens.numpy().astype(np.int64))
        np.save(os.path.join(case, "output_logits.npy"), logits.numpy().astype(np.float32))
        text = "".join(VOCAB[i] for i in tokens[0].tolist())
        print(f"{name} case{k}: prompt {prompt.tolist()} n={int(n)} -> {text!r}")
    print(f"{name}: {os.path.getsize(path)} bytes")


def main():
    torch.set_num_threads(1)
    prompts = [torch.tensor([encode("the loop")]), torch.tensor([encode("a small"), encode("greedy ")]),
               torch.tensor([encode("g")]),
               torch.tensor([encode("the tex"), encode("a graph"), encode("one tok")])]
    lengths = [torch.tensor(24), torch.tensor(12), torch.tensor(0), torch.tensor(16)]

    only = set(sys.argv[1:])
    wanted = lambda name: not only or name in only
    cases = list(zip(prompts, lengths))
    if wanted("lstm_scatter") or wanted("lstm_cat") or wanted("lstm_list"):
        lm = LstmLM(len(VOCAB))
        print("lstm loss", train(lm, steps=600, seq_len=32, lr=1e-2, seed=1))
        for p, n in zip(prompts, lengths):
            eager_margins_lstm(lm, p, int(n))
        for name, decode in (("lstm_scatter", LstmScatterDecode), ("lstm_cat", LstmCatDecode),
                             ("lstm_list", LstmListDecode)):
            if wanted(name):
                export(name, decode(lm), cases)
    if not wanted("gpt") and not wanted("gpt_kv"):
        return

    gpt = TinyGpt(len(VOCAB))
    print("gpt loss", train(gpt, steps=600, seq_len=32, lr=3e-3, seed=2))
    for p, n in zip(prompts, lengths):
        eager_margins_gpt(gpt, p, int(n))
    if wanted("gpt"):
        export("gpt", GptDecode(gpt), cases)
    if wanted("gpt_kv"):
        kv = GptKvDecode(gpt).eval()
        with torch.no_grad():
            for p, n in cases:  # the KV-cache decode computes what the prefix recompute does
                a, b = GptDecode(gpt)(p, n), kv(p, n)
                if not torch.equal(a[0], b[0]) or not torch.allclose(a[1], b[1], atol=1e-5):
                    raise SystemExit("gpt_kv: the KV-cache decode differs from the recompute")
        export("gpt_kv", kv, cases)


if __name__ == "__main__":
    main()
