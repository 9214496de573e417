#!/usr/bin/python3
"""A/B of dynvm's packed GEMM (kernels/cpu/packed_gemm.h: dynvm::Linear with an activation)
against dnnl_sgemm, in the graphs of compiled encoder models: DYNVM_DNNL_PACKED_GEMM=0 (off) and unset (on) alternate for
ROUNDS rounds of `vm-run --repeat R --profile`; prints per model the median run time of each
side's fastest round, and per Linear and Attention (by operand shapes; Attention for context) the median kernel time of each
side's fastest round with off/on (above 1: the packed GEMM is faster).

  /usr/bin/python3 tools/bench/linear_packed_ab.py --build build/release \
      --models build/bench/encoders [--rounds 5] [--repeat 20] [--threads 1] NAME...

NAME is a model compiled by tools/bench/encoder_bench.py (NAME.dvm with NAME_tokens.npy and
NAME_pad.npy beside it), e.g. bert_op17_1x128.
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import tempfile


def run(args, name, packed, trace):
    base = os.path.join(args.models, name)
    env = dict(os.environ)
    if packed:
        env.pop("DYNVM_DNNL_PACKED_GEMM", None)
    else:
        env["DYNVM_DNNL_PACKED_GEMM"] = "0"
    out = subprocess.run(
        [os.path.join(args.build, "tools", "vm-run"), base + ".dvm", "--input",
         f"tokens={base}_tokens.npy", "--input", f"pad={base}_pad.npy", "--threads",
         str(args.threads), "--repeat", str(args.repeat), "--profile", trace],
        env=env, capture_output=True, text=True, check=True).stdout
    with open(trace) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    linears = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("name") in ("Linear", "Attention"):
            linears[e["name"] + " " + e["args"]["shapes"].split(" -> ")[0]].append(e["dur"])
    return (float(out.split("median_ms=")[1].split()[0]),
            {k: statistics.median(v) for k, v in linears.items()})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build/release")
    p.add_argument("--models", default="build/bench/encoders")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("names", nargs="+")
    args = p.parse_args()
    print(f"# rounds {args.rounds}, repeat {args.repeat}, threads {args.threads}, "
          f"load {os.getloadavg()[0]:.2f}; sides alternate off (DYNVM_DNNL_PACKED_GEMM=0), on")
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        for name in args.names:
            best = {False: None, True: None}
            for _ in range(args.rounds):
                for packed in (False, True):
                    ms, kernels = run(args, name, packed, trace)
                    if best[packed] is None or ms < best[packed][0]:
                        best[packed] = (ms, kernels)
            off, on = best[False], best[True]
            print(f"{name}: run off {off[0]:.3f} ms  on {on[0]:.3f} ms  off/on {off[0] / on[0]:.2f}")
            for shape in off[1]:
                a, b = off[1][shape], on[1].get(shape, float("nan"))
                print(f"  {shape}: off {a:.0f} us  on {b:.0f} us  off/on {a / b:.2f}")


if __name__ == "__main__":
    main()
