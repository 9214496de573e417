"""NarrowSelectedRows on torch.onnx.export output (ctest: narrow_rows_export_test).

A BERT-like classifier (tools/bench/encoder_bench.py's Bert): an nn.TransformerEncoder of 2
layers (batch_first, key-padding mask, GELU) and a pooler that reads the first position,
h[:, 0]. Exported at opsets 14 and 17, at batch 1 and 2, with d_model, heads and sequence length
drawn from a seed printed at the start (DYNVM_NARROW_SEED sets it). For each export:

- vm-compile --report's narrow_rows counts at least the nodes from the last attention on that
  compute rows (the attention, its out-projection Gemm and the Reshapes or Transposes between,
  the residual Adds, LayerNorms and feed-forward Linears: at batch B > 1 the Gemm's [L*B, E]
  rows hold position i as a block of B rows), and the same model pooling the mean of all
  positions narrows nothing;
- the last dynvm::Attention and out-projection Gemm compute one position: their outputs (from
  vm-dis) have 1/seq of the elements of the mean-pooling model's;
- the same model keeping position 1 or -1 narrows as many nodes;
- the outputs equal those of the --no-optimize program within 1e-4 (and PyTorch's).

Exits 77 (a ctest skip) when PyTorch is missing.

    /usr/bin/python3 narrow_rows_export_test.py --vm-compile PATH --vm-run PATH --vm-dis PATH
"""
import argparse
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import warnings

try:
    import numpy as np
    import torch
    import torch.nn as nn
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e} (install python3-torch: tools/install-deps.sh test)")
    sys.exit(77)

warnings.filterwarnings("ignore")

# Row-wise nodes after the last attention: 2 residual Adds, 2 LayerNorms, 2 feed-forward
# Linears (GELU fused); and the attention, the Reshape merging its heads, the out-projection
# Gemm and the Reshape splitting its rows and the batch-first swap back (a Reshape at batch 1,
# a Transpose above).
AFTER_ATTENTION = 6
FROM_ATTENTION = AFTER_ATTENTION + 5


class Encoder(nn.Module):
    def __init__(self, d, heads, pool, position=0):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, activation="gelu",
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.pool = nn.Linear(d, d)
        self.mode = pool
        self.position = position

    def forward(self, x, pad):
        h = self.encoder(x, src_key_padding_mask=pad)
        p = h.mean(1) if self.mode == "mean" else h[:, self.position]
        return torch.tanh(self.pool(p))


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def export(d, heads, batch, seq, opset, pool, out_dir, seed, position):
    torch.manual_seed(seed)
    model = Encoder(d, heads, pool, position).eval()
    x = torch.randn(batch, seq, d)
    pad = torch.zeros(batch, seq, dtype=torch.bool)
    for b in range(batch):  # some padding at the end, never the first position
        pad[b, seq - 1 - b % max(seq - 1, 1):] = True
    with torch.no_grad():
        want = model(x, pad).numpy()
    path = os.path.join(out_dir, f"{pool}.onnx")
    # With grad enabled: torch's fused inference path has no ONNX export.
    torch.onnx.export(model, (x, pad), path, opset_version=opset, input_names=["x", "pad"],
                      output_names=["y"])
    np.save(os.path.join(out_dir, "input_x.npy"), x.numpy())
    np.save(os.path.join(out_dir, "input_pad.npy"), pad.numpy())
    return path, want


def compile_and_run(args, d, model, extra):
    dvm = model[:-5] + ("_plain" if extra else "") + ".dvm"
    report = run([args.vm_compile, model, "-o", dvm, "--report"] + extra)
    out_dir = dvm[:-4] + "_out"
    os.makedirs(out_dir, exist_ok=True)
    run([args.vm_run, dvm, "--output-dir", out_dir,
         "--input", f"x={os.path.join(d, 'input_x.npy')}",
         "--input", f"pad={os.path.join(d, 'input_pad.npy')}"])
    m = re.search(r"^narrow_rows: (\d+)$", report, re.M)
    return np.load(os.path.join(out_dir, "y.npy")), (int(m.group(1)) if m else None), dvm


def last_output_elements(args, dvm, op):
    """Elements of the output of the last `op` node of a self-attention block (by its .loc
    line: its kind and ONNX name) in vm-dis's listing."""
    lines = run([args.vm_dis, dvm]).splitlines()
    locs = [i for i, line in enumerate(lines)
            if re.match(rf'\s*\.loc "{re.escape(op)} \'[^\']*self_attn/', line)]
    if not locs:
        return None
    for line in lines[locs[-1] + 1:]:
        m = re.match(r"\s*alloc_tensor %o\d+, %o\d+, \d+, f32, \[([\d, ]+)\]", line)
        if m:
            return math.prod(int(v) for v in m.group(1).split(","))
        if ".loc" in line:
            break
    return None


def check(args, opset, batch, rng):
    heads = rng.choice([1, 2, 4])
    d = heads * rng.choice([4, 8])
    seq = rng.randrange(3, 12)
    label = f"opset {opset} batch {batch} d_model {d} heads {heads} seq {seq}"
    position = rng.choice([1, -1])  # of the "row" pooler
    failures, counts, elements = [], {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for pool in ("first", "mean", "row"):
            model, want = export(d, heads, batch, seq, opset, pool, tmp, rng.randrange(1 << 30),
                                 position if pool == "row" else 0)
            opt, counts[pool], dvm = compile_and_run(args, tmp, model, [])
            plain, _, _ = compile_and_run(args, tmp, model, ["--no-optimize"])
            elements[pool] = [last_output_elements(args, dvm, op)
                              for op in ("dynvm::Attention", "Gemm")]
            for name, ref in (("--no-optimize", plain), ("PyTorch", want)):
                if opt.shape != ref.shape or not np.allclose(opt, ref, rtol=1e-4, atol=1e-4):
                    err = np.max(np.abs(opt - ref)) if opt.shape == ref.shape else ref.shape
                    failures.append(f"{pool}: output differs from {name}'s: {err}")
    least = FROM_ATTENTION
    if counts["first"] is None or counts["first"] < least:
        failures.append(f"narrow_rows {counts['first']} with h[:, 0], want at least {least}")
    if counts["row"] != counts["first"]:
        failures.append(f"narrow_rows {counts['row']} with h[:, {position}], {counts['first']} "
                        "with h[:, 0]")
    if counts["mean"] != 0:
        failures.append(f"narrow_rows {counts['mean']} with the mean, want 0")
    for i, op in enumerate(("dynvm::Attention", "Gemm")):
        first, mean = elements["first"][i], elements["mean"][i]
        if first is None or mean is None or first * seq != mean:
            failures.append(f"last {op}: {first} elements with h[:, 0], {mean} with the "
                            f"mean: not one position of {seq}")
    print(f"{label}: narrow_rows {counts}")
    return [f"{label}: {f}" for f in failures]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vm-compile", required=True)
    parser.add_argument("--vm-run", required=True)
    parser.add_argument("--vm-dis", required=True)
    args = parser.parse_args()
    seed = int(os.environ.get("DYNVM_NARROW_SEED", time.time_ns() % 1000000))
    print(f"seed {seed} (DYNVM_NARROW_SEED={seed} repeats this run)")
    rng = random.Random(seed)
    failures = []
    for opset in (14, 17):
        for batch in (1, 2):
            failures += check(args, opset, batch, rng)
    for f in failures:
        print("FAIL", f)
    print(f"4 encoders checked, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
