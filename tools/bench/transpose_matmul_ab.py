#!/usr/bin/python3
"""Transposes before a MatMul, folded into strides (matmul_transpose, linear_transpose) or not:
the same export compiled with the rules and with --disable-rewrite, run alternately.

Exports (torch.onnx.export, opset 14, fixed seeds):
  x_wt      F.linear(x, w) with w an input: x [8, 128, 512], w [512, 512]
  qkt       q @ k.transpose(-1, -2), no softmax: [8, 4, 128, 64]
  mha_w     nn.MultiheadAttention(256, 4, batch_first) with need_weights=True (attention is
            refused, the head Transposes of Q and K fold): x [8, 128, 256]
and, with --encoders DIR, the batch-1 encoder exports encoder_bench.py left in DIR
(*_1x128.onnx with their _tokens.npy and _pad.npy: transpose_unit_axes makes their batch-first
swaps views); checks that both programs give the same outputs, then per round runs vm-run
--repeat R on each (alternating) and prints the medians of the per-round medians and off/on
(>1: the rules help). "fired" counts matmul_transpose, linear_transpose, transpose_unit_axes.

  /usr/bin/python3 tools/bench/transpose_matmul_ab.py --build build/release [--rounds 5]
      [--repeat 20] [--threads 1] [--encoders build/bench/encoders]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch
import torch.nn as nn

warnings.filterwarnings("ignore")
OFF = ["--disable-rewrite", "matmul_transpose", "--disable-rewrite", "linear_transpose",
       "--disable-rewrite", "transpose_unit_axes"]
RULES = ("matmul_transpose", "linear_transpose", "transpose_unit_axes")


class Fn(nn.Module):
    def __init__(self, fn, mod=None):
        super().__init__()
        self.fn, self.mod = fn, mod

    def forward(self, *xs):
        return self.fn(self.mod, *xs)


def cases():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(256, 4, batch_first=True).eval()
    x = torch.randn(8, 128, 256)
    yield "x_wt", Fn(lambda m, t, w: nn.functional.linear(t, w)), [torch.randn(8, 128, 512),
                                                                    torch.randn(512, 512)]
    yield "qkt", Fn(lambda m, q, k: q @ k.transpose(-1, -2)), [torch.randn(8, 4, 128, 64),
                                                               torch.randn(8, 4, 128, 64)]
    yield "mha_w", Fn(lambda m, t: m(t, t, t, need_weights=True), mha), [x]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {p.stderr.strip()}")
    return p.stdout


def ab(args, name, onnx, feeds, d):
    """Compiles onnx with and without the rules into d, checks, times; prints one line."""
    tools = os.path.join(args.build, "tools")
    report = run([f"{tools}/vm-compile", onnx, "-o", f"{d}/on.dvm", "--report"])
    fired = sum(int(line.split(": ")[1]) for line in report.splitlines()
                if line.startswith(tuple(f"rewrite {r}:" for r in RULES)))
    run([f"{tools}/vm-compile", onnx, "-o", f"{d}/off.dvm"] + OFF)
    for v in ("on", "off"):
        os.makedirs(f"{d}/{v}", exist_ok=True)
        run([f"{tools}/vm-run", f"{d}/{v}.dvm", "--output-dir", f"{d}/{v}"] + feeds)
    for f in sorted(os.listdir(f"{d}/on")):
        a, b = np.load(f"{d}/on/{f}"), np.load(f"{d}/off/{f}")
        if not np.allclose(a, b, rtol=1e-4, atol=1e-4):
            sys.exit(f"{name}: {f} differs: {np.max(np.abs(a - b))}")
    ms = {"on": [], "off": []}
    for _ in range(args.rounds):
        for v in ("on", "off"):
            out = run([f"{tools}/vm-run", f"{d}/{v}.dvm", "--threads", str(args.threads),
                       "--repeat", str(args.repeat)] + feeds)
            ms[v].append(float(out.split("median_ms=")[1].split()[0]))
    on, off = statistics.median(ms["on"]), statistics.median(ms["off"])
    print(f"{name:<24} {fired:>5} {on:>8.3f} {off:>8.3f} {off / on:>6.2f}x", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--encoders", default="")
    args = ap.parse_args()
    print(f"# load {os.getloadavg()[0]:.2f}")
    print(f"{'case':<24} {'fired':>5} {'on_ms':>8} {'off_ms':>8} {'speedup':>7}")
    for name, module, inputs in cases():
        with tempfile.TemporaryDirectory() as d:
            names = [f"x{i}" for i in range(len(inputs))]
            # With grad enabled: MultiheadAttention's fused inference path has no export.
            torch.onnx.export(module, tuple(inputs), f"{d}/m.onnx", opset_version=14,
                              input_names=names)
            feeds = []
            for n, t in zip(names, inputs):
                np.save(f"{d}/{n}.npy", t.numpy())
                feeds += ["--input", f"{n}={d}/{n}.npy"]
            ab(args, name, f"{d}/m.onnx", feeds, d)
    if args.encoders:
        for f in sorted(os.listdir(args.encoders)):
            if not f.endswith("_1x128.onnx"):
                continue
            base = os.path.join(args.encoders, f[:-5])
            feeds = ["--input", f"tokens={base}_tokens.npy", "--input", f"pad={base}_pad.npy"]
            with tempfile.TemporaryDirectory() as d:
                ab(args, f[:-5], base + ".onnx", feeds, d)
    print(f"# load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
