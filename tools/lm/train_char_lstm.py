#!/usr/bin/python3
"""Trains the demo's character-level LSTM language model on the King James Bible.

The text comes from Debian's bible-kjv package (`bible -f Gen1:1-Rev22:21`, public domain);
verse references are stripped, one verse per line, and '\\n' doubles as the end token.
Writes tools/lm/charlm.pt (weights) and tools/lm/vocab.txt (one Unicode code point per line;
token id = line number). Export with export_charlm.py.

Run with Debian's python (python3-torch): /usr/bin/python3 tools/lm/train_char_lstm.py
"""
import argparse
import os
import re
import subprocess
import time

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))


class CharLM(nn.Module):
    def __init__(self, vocab, emb=64, hidden=256, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, layers)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x, state=None):  # x: [T, B]
        y, state = self.lstm(self.embed(x), state)
        return self.out(y), state


def load_text():
    raw = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True).stdout
    lines = [re.sub(r"^\S+\d+:\d+ ", "", l) for l in raw.splitlines()]
    return "\n".join(l for l in lines if l) + "\n"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--minutes", type=float, default=20)
    p.add_argument("--steps", type=int, default=100000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--resume", action="store_true", help="continue from tools/lm/charlm.pt")
    p.add_argument("--lr", type=float, default=2e-3)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    text = load_text()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    print(f"{len(text)} characters, vocabulary {len(chars)}")
    model = CharLM(len(chars))
    if args.resume:
        model.load_state_dict(torch.load(os.path.join(HERE, "charlm.pt")))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    start = time.time()
    step = 0
    while step < args.steps and time.time() - start < args.minutes * 60:
        offs = torch.randint(0, len(data) - args.seq - 1, (args.batch,))
        x = torch.stack([data[o:o + args.seq] for o in offs]).t()
        y = torch.stack([data[o + 1:o + args.seq + 1] for o in offs]).t()
        logits, _ = model(x)
        loss = loss_fn(logits.reshape(-1, len(chars)), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f} ({time.time() - start:.0f}s)", flush=True)
    torch.save(model.state_dict(), os.path.join(HERE, "charlm.pt"))
    with open(os.path.join(HERE, "vocab.txt"), "w") as f:
        for c in chars:
            f.write(f"{ord(c)}\n")
    # A greedy sample to eyeball the quality.
    model.eval()
    with torch.no_grad():
        prompt = "And God said"
        x = torch.tensor([[index[c]] for c in prompt])
        logits, state = model(x)
        out = prompt
        tok = logits[-1, 0].argmax()
        for _ in range(200):
            out += chars[tok]
            logits, state = model(tok.view(1, 1), state)
            tok = logits[-1, 0].argmax()
    print(out)


if __name__ == "__main__":
    main()
