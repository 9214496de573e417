#!/usr/bin/python3
"""Resident memory of a long-running host over many calls with random shapes (docs/trust.md,
"Memory that stays flat").

Exports a transformer encoder (nn.TransformerEncoder: 2 layers, d_model 128, 4 heads, batch
and sequence dynamic) and runs it N times on random shapes (batch 1-8, sequence 1-256) in two
ways: a fresh VirtualMachine per call, and one VirtualMachine for every call. It prints the
process's RSS every N/20 calls and checks that after the warm-up (the first fifth of the calls)
RSS stays within 10%: max / min <= 1.10. Exits 1 when it does not.

    PYTHONPATH=build/release/python /usr/bin/python3 tools/bench/memory_flat.py [--calls 10000]
"""
import argparse
import os
import sys
import tempfile

import numpy as np


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def export_encoder(path):
    import torch
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(128, 4, 256, batch_first=True, dropout=0.0)
    model = torch.nn.TransformerEncoder(layer, 2).eval()
    torch.onnx.export(model, torch.randn(2, 16, 128), path, opset_version=14,
                      input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch", 1: "seq"}})


def curve(dynvm, exe, mode, calls, seed):
    rng = np.random.default_rng(seed)
    vm = dynvm.VirtualMachine(exe)
    points = []
    for i in range(calls):
        b, s = int(rng.integers(1, 9)), int(rng.integers(1, 257))
        x = rng.standard_normal((b, s, 128)).astype(np.float32)
        (dynvm.VirtualMachine(exe) if mode == "fresh" else vm).run(x=x)
        if (i + 1) % max(calls // 20, 1) == 0:
            points.append((i + 1, rss_mib()))
    return points


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--modes", default="fresh,one")
    args = ap.parse_args()
    import dynvm
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "encoder.onnx")
        export_encoder(path)
        exe = dynvm.compile(path)
        for mode in args.modes.split(","):
            points = curve(dynvm, exe, mode, args.calls, seed=1)
            after = [r for n, r in points if n > args.calls // 5]
            ratio = max(after) / min(after)
            print(f"{mode}: VM {'per call' if mode == 'fresh' else 'for every call'}, "
                  f"{args.calls} calls; RSS MiB every {args.calls // 20} calls:")
            print("  " + " ".join(f"{r:.0f}" for _, r in points))
            print(f"  after the warm-up ({args.calls // 5} calls): {min(after):.0f}-{max(after):.0f}"
                  f" MiB, max/min {ratio:.3f} ({'within' if ratio <= 1.10 else 'OVER'} 10%)")
            ok &= ratio <= 1.10
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
