"""A/B of the attention operators' in-place KV cache in `vm-compile --decode` (docs/llm.md): a
Llama-style step model whose attention is one fused node per layer (tools/models/
llama_step_fused.py: GroupQueryAttention in GenAI's layout, MultiHeadAttention or Attention 23
with past/present), compiled twice, with the present extended in place over the loop-carried
past (the default) and with `--disable-rewrite attention_present_in_place` (the kernel writes a
fresh present every token, copying the past), run in interleaved rounds by `vm-run --repeat`
(median of each round's runs; the medians of the rounds are printed). Also prints the past's
bytes each token copies without the rule at the longest cache. Random weights; greedy tokens of
both builds compared (they must be equal).

    PYTHONPATH=build/release/python /usr/bin/python3 tools/bench/llm/present_in_place_ab.py \\
        --vm-compile build/release/tools/vm-compile --vm-run build/release/tools/vm-run \\
        --variant gqa_rotary --prompt 1024 --new 64 --rounds 5
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "models"))
import llama  # noqa: E402
import llama_step_fused  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vm-compile", required=True)
    ap.add_argument("--vm-run", required=True)
    ap.add_argument("--variant", default="gqa_rotary", choices=llama_step_fused.VARIANTS)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.manual_seed(0)
    hd = args.width // args.heads
    lm = llama.Llama(vocab=1000, d=args.width, layers=args.layers, heads=args.heads,
                     kv_heads=args.kv_heads, head_dim=hd, ffn=2 * args.width, repeat="expand",
                     max_pos=args.prompt + args.new + 1).eval()
    heads = llama_step_fused.cache_heads(lm, args.variant)
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "step.onnx")
        onnx.save(llama_step_fused.build(lm, args.variant), model)
        dvms = {"in_place": os.path.join(tmp, "a.dvm"), "copied": os.path.join(tmp, "b.dvm")}
        subprocess.run([args.vm_compile, model, "-o", dvms["in_place"], "--decode"], check=True,
                       capture_output=True)
        subprocess.run([args.vm_compile, model, "-o", dvms["copied"], "--decode",
                        "--disable-rewrite", "attention_present_in_place"], check=True,
                       capture_output=True)
        prompt = np.random.default_rng(0).integers(0, 1000, (1, args.prompt)).astype(np.int64)
        np.save(os.path.join(tmp, "p.npy"), prompt)
        sets = ["max_new_tokens=%d" % args.new, "temperature=0", "top_k=0", "top_p=1",
                "repetition_penalty=1", "seed=0", "stop_token=-1"]
        flags = ["-i", "prompt=" + os.path.join(tmp, "p.npy"), "--threads", str(args.threads)]
        for s in sets:
            flags += ["--set", s]
        times = {k: [] for k in dvms}
        tokens = {}
        for r in range(args.rounds):
            for name, dvm in (dvms.items() if r % 2 == 0 else reversed(dvms.items())):
                out = os.path.join(tmp, "out-" + name)
                res = subprocess.run([args.vm_run, dvm] + flags + ["--repeat", str(args.repeat),
                                                                   "--output-dir", out],
                                     check=True, capture_output=True, text=True)
                times[name].append(float(re.search(r"median_ms=([0-9.]+)", res.stdout).group(1)))
                tokens[name] = np.load(os.path.join(out, "tokens.npy"))
    total = args.prompt + args.new - 1
    copied = 2 * args.layers * heads * total * hd * 4
    print(f"variant {args.variant}: {args.layers} layers, width {args.width}, {args.heads} heads, "
          f"{heads} cache heads of {hd}, prompt {args.prompt}, {args.new} new tokens, "
          f"{args.threads} thread(s), {args.rounds} rounds of vm-run --repeat {args.repeat}")
    print(f"past copied per token without the rule, at the last token: {copied / 1e6:.2f} MB")
    for name in dvms:
        med = statistics.median(times[name])
        print(f"{name:9s} median {med:8.2f} ms  ({args.new / med * 1e3:6.1f} tokens/s incl. "
              f"prompt)  rounds {', '.join(f'{t:.2f}' for t in times[name])}")
    print(f"copied / in_place: {statistics.median(times['copied']) / statistics.median(times['in_place']):.3f}x")
    same = (tokens["in_place"] == tokens["copied"]).all()
    print(f"tokens equal: {bool(same)}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
