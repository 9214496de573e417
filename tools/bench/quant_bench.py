#!/usr/bin/env python3
"""Weight-only quantization decode benchmark (docs/kernels.md, "Weight-only quantization").

The comparison benchmark's LSTM LM and GPT decode models (export_bench_models.py: in-graph
greedy loops, 128 new tokens; its gpt recomputes the whole prefix every step) and the GPTs with
a KV cache (export_gpt_kv.py: gpt_kv, the same tiny shape, and gpt_kv_256, d 256 / 4 layers,
whose weights do not fit in L2; one token per step) compiled three ways with vm-compile (f32;
--quantize-weights int8; --quantize-weights bf16, default --quantize-min-bytes) and timed by
vm-decode-bench at 1 thread (--threads N: N intra-op threads; where the cores are busy the
extra threads wait for one, so under load only the 1-thread ratios mean anything).
Interleaved: each of --rounds rounds times every model in every dtype once (--repeat decodes,
median), so that load from other processes hits all dtypes alike. Prints each round's tokens/s,
then per model and dtype the median over rounds of (tokens/s) / (f32 tokens/s of the same round).
The load average is printed at the start and the end.

  python3 tools/bench/quant_bench.py [--build build/dev] [--models build/bench/models]
                                     [--rounds 7] [--repeat 5] [--threads 1]

Needs the exported models (/usr/bin/python3 tools/bench/export_bench_models.py --out MODELS and
/usr/bin/python3 tools/bench/export_gpt_kv.py --out MODELS) and vm-compile, vm-decode-bench built in --build.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

DTYPES = [("f32", []), ("int8", ["--quantize-weights", "int8"]),
          ("bf16", ["--quantize-weights", "bf16"])]
MODELS = ["lstm", "gpt", "gpt_kv", "gpt_kv_256"]
PROMPT = "3,14,15,9"
NEW_TOKENS = 128


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def load_tokens(path):
    """PyTorch's greedy tokens (an int64 .npy, read without NumPy)."""
    with open(path, "rb") as f:
        data = f.read()
    header_len = int.from_bytes(data[8:10], "little")
    header = data[10:10 + header_len].decode("latin1")
    if "'<i8'" not in header or "True" in header:
        raise SystemExit(f"{path}: expected a C-ordered int64 array")
    body = data[10 + header_len:]
    return [int.from_bytes(body[i:i + 8], "little", signed=True) for i in range(0, len(body), 8)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build/dev")
    p.add_argument("--models", default="build/bench/models")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    compile_bin = os.path.join(args.build, "tools", "vm-compile")
    bench_bin = os.path.join(args.build, "tools", "bench", "vm-decode-bench")
    print(f"load average at start: {loadavg()}")
    dvms = {}
    for model in MODELS:
        onnx = os.path.join(args.models, model, "loop.onnx")
        for name, flags in DTYPES:
            dvm = os.path.join(args.models, model, f"loop.{name}.dvm")
            out = subprocess.run([compile_bin, onnx, "-o", dvm, "--report"] + flags,
                                 check=True, capture_output=True, text=True).stdout
            quantized = [l for l in out.splitlines() if l.startswith("quantize ")]
            print(f"{model} {name}: {os.path.getsize(dvm)} bytes, {len(quantized)} weights "
                  f"considered")
            for line in quantized:
                print(f"  {line}")
            dvms[(model, name)] = dvm
    ratios = {(m, d): [] for m in MODELS for d, _ in DTYPES}
    tokens = {}
    for r in range(args.rounds):
        tps = {}
        for model in MODELS:
            for name, _ in DTYPES:
                out = subprocess.run(
                    [bench_bin, "--loop", dvms[(model, name)], "--prompt", PROMPT,
                     "--max-new-tokens", str(NEW_TOKENS), "--threads", str(args.threads), "--repeat",
                     str(args.repeat), "--json"], check=True, capture_output=True, text=True).stdout
                rec = json.loads(out.splitlines()[0])
                ms = statistics.median(rec["ms"])
                tps[(model, name)] = len(rec["tokens"]) / (ms / 1000.0)
                tokens[(model, name)] = rec["tokens"]
                if name == "f32" and rec["tokens"] != load_tokens(
                        os.path.join(args.models, model, "output_tokens.npy")):
                    raise SystemExit(f"{model} f32: tokens differ from PyTorch's")
        print(f"round {r}: " + "  ".join(f"{m}/{d} {tps[(m, d)]:.0f} tok/s" for m in MODELS
                                        for d, _ in DTYPES))
        for model in MODELS:
            for name, _ in DTYPES:
                ratios[(model, name)].append(tps[(model, name)] / tps[(model, "f32")])
    print(f"load average at end: {loadavg()}")
    for model in MODELS:
        for name, _ in DTYPES[1:]:
            same = sum(a == b for a, b in zip(tokens[(model, name)], tokens[(model, "f32")]))
            v = ratios[(model, name)]
            print(f"{model} {name}/f32 tokens/s: median {statistics.median(v):.2f}x "
                  f"(min {min(v):.2f}x, max {max(v):.2f}x over {len(v)} rounds); "
                  f"greedy tokens equal to f32: {same}/{len(tokens[(model, 'f32')])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
