#!/usr/bin/python3
"""Transformer encoders, dynvm vs ONNX Runtime side by side (docs/benchmarks.md, "Encoders").

Exports with torch.onnx.export (Debian's python3-torch) at opsets 14 and 17:
  classifier  nn.TransformerEncoder classifier: token embedding, 2 layers (d_model 128, 4 heads,
              ff 512, ReLU), key-padding mask, mean pool, linear head (10 classes)
  bert        BERT-like: token + position embeddings and LayerNorm, 4 layers (d 256, 4 heads,
              ff 1024, GELU), key-padding mask, first-token pooler with tanh
at batch 1 x seq 128 and batch 8 x seq 64 (random weights, fixed seeds; a quarter of each
sequence but the first is padding), compiles each with vm-compile, checks that dynvm's output
equals PyTorch's (1e-3), then times one forward pass: per round, vm-run --repeat R and
tools/bench/ort_forward.js --repeat R (onnxruntime-node, all graph optimizations), alternating,
ROUNDS rounds; prints the median of the per-round medians and dynvm's speedup (ORT time /
dynvm time).

  /usr/bin/python3 tools/bench/encoder_bench.py --build build/release \
      --node-modules build/bench/node_modules [--threads 1,2] [--rounds 3] [--repeat 20]
      [--models classifier,bert] [--opsets 14,17] [--shapes 1x128,8x64]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np
import torch
import torch.nn as nn

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 1000


class Classifier(nn.Module):
    def __init__(self, d=128, heads=4, layers=2, ff=512, classes=10):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens, pad):
        h = self.encoder(self.embed(tokens), src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).float()
        return self.head((h * keep).sum(1) / keep.sum(1))


def distinct_layers(model):
    """Draws every matrix of `model` afresh (Xavier-uniform), in place: nn.TransformerEncoder
    deep-copies one layer, and PyTorch's ONNX export stores equal initializers once, so without
    this an exported L-layer encoder reads one layer's weights L times (a 12-layer BERT-base-sized
    classifier would hold 31 MB of weights, not 340)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
    return model


class Bert(nn.Module):
    def __init__(self, d=256, heads=4, layers=4, ff=1024, max_len=512):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Embedding(max_len, d)
        self.ln = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu",
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pool = nn.Linear(d, d)

    def forward(self, tokens, pad):
        pos = torch.arange(tokens.shape[1]).unsqueeze(0)
        h = self.ln(self.tok(tokens) + self.pos(pos))
        h = self.encoder(h, src_key_padding_mask=pad)
        return torch.tanh(self.pool(h[:, 0]))


MODELS = {"classifier": Classifier, "bert": Bert}


def inputs_for(batch, seq, seed):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (batch, seq), generator=g)
    pad = torch.zeros(batch, seq, dtype=torch.bool)
    for b in range(batch):  # a quarter of each sequence (never the first token) is padding
        n = seq // 4 if b % 2 == 0 else seq // 8
        pad[b, seq - n:] = True
    return tokens, pad


def export(name, opset, batch, seq, out_dir):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    tokens, pad = inputs_for(batch, seq, 1)
    path = os.path.join(out_dir, f"{name}_op{opset}_{batch}x{seq}.onnx")
    with torch.no_grad():
        want = model(tokens, pad).numpy()
    # With grad enabled: torch's fused inference path (_transformer_encoder_layer_fwd) has no
    # ONNX export.
    torch.onnx.export(model, (tokens, pad), path, opset_version=opset,
                      input_names=["tokens", "pad"], output_names=["y"])
    base = path[:-5]
    np.save(base + "_tokens.npy", tokens.numpy())
    np.save(base + "_pad.npy", pad.numpy())
    np.save(base + "_want.npy", want)
    with open(base + "_inputs.json", "w") as f:
        json.dump({"tokens": {"type": "int64", "dims": list(tokens.shape),
                              "data": tokens.flatten().tolist()},
                   "pad": {"type": "bool", "dims": list(pad.shape),
                           "data": pad.flatten().int().tolist()}}, f)
    return base


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {p.stderr.strip()}")
    return p.stdout


def dynvm_ms(args, base, threads):
    out = run([os.path.join(args.build, "tools", "vm-run"), base + ".dvm", "--input",
               f"tokens={base}_tokens.npy", "--input", f"pad={base}_pad.npy", "--threads",
               str(threads), "--repeat", str(args.repeat)])
    return float(out.split("median_ms=")[1].split()[0])


def ort_ms(args, base, threads):
    out = run(["node", os.path.join(HERE, "ort_forward.js"), "--node-modules", args.node_modules,
               "--model", base + ".onnx", "--inputs", base + "_inputs.json", "--threads",
               str(threads), "--repeat", str(args.repeat)])
    return json.loads(out)["ms"]


def check_output(args, base):
    out_dir = base + "_out"
    os.makedirs(out_dir, exist_ok=True)
    run([os.path.join(args.build, "tools", "vm-run"), base + ".dvm", "--input",
         f"tokens={base}_tokens.npy", "--input", f"pad={base}_pad.npy", "--output-dir", out_dir])
    got, want = np.load(os.path.join(out_dir, "y.npy")), np.load(base + "_want.npy")
    err = float(np.max(np.abs(got - want)))
    if err > 1e-3:
        sys.exit(f"{base}: dynvm's output differs from PyTorch's by {err}")
    return err


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build/release")
    p.add_argument("--node-modules", default="build/bench/node_modules")
    p.add_argument("--out", default="build/bench/encoders")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--models", default="classifier,bert")
    p.add_argument("--opsets", default="14,17")
    p.add_argument("--shapes", default="1x128,8x64")
    p.add_argument("--compile-flags", default="", help="extra vm-compile flags (comma separated)")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE).stdout.strip()
    print(f"# encoder_bench {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} commit "
          f"{commit} machine {platform.machine()} {os.cpu_count()} cpus load "
          f"{os.getloadavg()[0]:.2f}")
    print(f"# command: {' '.join(sys.argv)}")
    print(f"{'model':<11} {'opset':>5} {'shape':>6} {'thr':>3} {'dynvm_ms':>9} {'ort_ms':>9} "
          f"{'speedup':>7}  max_err")
    for name in args.models.split(","):
        for opset in map(int, args.opsets.split(",")):
            for shape in args.shapes.split(","):
                batch, seq = map(int, shape.split("x"))
                base = export(name, opset, batch, seq, args.out)
                flags = [f for f in args.compile_flags.split(",") if f]
                run([os.path.join(args.build, "tools", "vm-compile"), base + ".onnx", "-o",
                     base + ".dvm"] + flags)
                err = check_output(args, base)
                for threads in map(int, args.threads.split(",")):
                    d, o = [], []
                    for _ in range(args.rounds):
                        d.append(dynvm_ms(args, base, threads))
                        o.append(ort_ms(args, base, threads))
                    dm, om = statistics.median(d), statistics.median(o)
                    print(f"{name:<11} {opset:>5} {shape:>6} {threads:>3} {dm:>9.3f} {om:>9.3f} "
                          f"{om / dm:>6.2f}x  {err:.1e}", flush=True)
    print(f"# load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
