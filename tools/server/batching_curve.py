#!/usr/bin/python3
"""What dynamic batching can give at most, in process (issue 35): for the transformer encoder
classifier that batching_bench.py serves (tools/bench/encoder_bench.py's, symbolic batch), the
throughput of batched calls of B rows against batch-1 calls, on the machine's 2 cores, each side
in its two fair configurations:

  unbatched  1x2: one VM at batch 1 with 2 intra-op threads (requests/s = 1 / t)
             2x1: two VMs (two vm-run processes at once) at batch 1 with 1 thread each
                  (requests/s = 2 / t, t each one's median)
  batched    1x2: one VM at batch B with 2 threads (B / t)
             2x1: two VMs at batch B with 1 thread each (2 B / t)

and the ratio of the best batched to the best unbatched configuration. vm-run --repeat R times
each (median of the runs after a warm-up); two processes started together overlap for nearly
all their runs. With --profile, one VM's --profile-summary at batch 1 and at batch B (1 thread)
for the --profile-seq lengths: where the time of a batched call goes.

  /usr/bin/python3 tools/server/batching_curve.py [--build build/release] [--seqs 8,16,32,64,128]
      [--batches 4,8,16] [--repeat 30] [--profile] [--profile-seq 16,128]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
import encoder_bench  # noqa: E402  (the classifier and its inputs)


def export(work, seq, build):
    torch.manual_seed(0)
    model = encoder_bench.Classifier().eval()
    tokens, pad = encoder_bench.inputs_for(2, seq, 1)
    onnx_path = os.path.join(work, f"enc{seq}.onnx")
    torch.onnx.export(model, (tokens, pad), onnx_path, opset_version=17,
                      input_names=["tokens", "pad"], output_names=["y"],
                      dynamic_axes={"tokens": {0: "batch"}, "pad": {0: "batch"}, "y": {0: "batch"}})
    dvm = os.path.join(work, f"enc{seq}.dvm")
    subprocess.run([os.path.join(build, "tools/vm-compile"), onnx_path, "-o", dvm, "--bound",
                    "batch=64"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return dvm


def inputs(work, seq, batch):
    tokens, pad = encoder_bench.inputs_for(batch, seq, 1)
    t = os.path.join(work, f"t{seq}_{batch}.npy")
    p = os.path.join(work, f"p{seq}_{batch}.npy")
    np.save(t, tokens.numpy())
    np.save(p, pad.numpy())
    return ["-i", "tokens=" + t, "-i", "pad=" + p]


def vm_run(build, dvm, args, threads, repeat, procs, extra=()):
    cmd = [os.path.join(build, "tools/vm-run"), dvm, *args, "--repeat", str(repeat), "--threads",
           str(threads), *extra]
    ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    outs = [p.communicate()[0] for p in ps]
    if any(p.returncode for p in ps):
        sys.exit(f"vm-run failed: {' '.join(cmd)}")
    ms = [float(re.search(r"median_ms=([0-9.]+)", o).group(1)) for o in outs]
    return max(ms), outs[0]


def summary(out, top=12):
    """The profile summary's heaviest rows."""
    lines = out.splitlines()
    start = next((i for i, l in enumerate(lines) if "kernel" in l and "total" in l), None)
    if start is None:
        return out
    return "\n".join(lines[start:start + top + 1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build/release"))
    ap.add_argument("--seqs", default="8,16,32,64,128")
    ap.add_argument("--batches", default="4,8,16")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--profile-seq", default="16,128")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="dynvm-batching-curve-")
    batches = [int(b) for b in args.batches.split(",")]
    print("seq  B   unbatched req/s (1x2, 2x1)   batched req/s (1x2, 2x1)   best/best   "
          "batched call / B singles (1 thread)")
    for seq in [int(s) for s in args.seqs.split(",")]:
        dvm = export(work, seq, args.build)
        one = inputs(work, seq, 1)
        t1, _ = vm_run(args.build, dvm, one, 1, args.repeat * 4, 1)
        u12, _ = vm_run(args.build, dvm, one, 2, args.repeat * 4, 1)
        u21, _ = vm_run(args.build, dvm, one, 1, args.repeat * 4, 2)
        unb = {"1x2": 1e3 / u12, "2x1": 2e3 / u21}
        ubest = max(unb, key=unb.get)
        for b in batches:
            many = inputs(work, seq, b)
            tb, _ = vm_run(args.build, dvm, many, 1, args.repeat, 1)
            b12, _ = vm_run(args.build, dvm, many, 2, args.repeat, 1)
            b21, _ = vm_run(args.build, dvm, many, 1, args.repeat, 2)
            bat = {"1x2": b * 1e3 / b12, "2x1": 2 * b * 1e3 / b21}
            bbest = max(bat, key=bat.get)
            print(f"{seq:<4} {b:<3} {unb['1x2']:8.0f} {unb['2x1']:8.0f} ({ubest})"
                  f"         {bat['1x2']:8.0f} {bat['2x1']:8.0f} ({bbest})"
                  f"       {bat[bbest] / unb[ubest]:.2f}x       {tb / (b * t1):.2f}x"
                  f" ({t1:.3f} ms, {tb:.3f} ms)", flush=True)
        if args.profile and str(seq) in args.profile_seq.split(","):
            for b in (1, batches[-1]):
                _, out = vm_run(args.build, dvm, inputs(work, seq, b), 1, args.repeat, 1,
                                ["--profile-summary"])
                print(f"--- seq {seq} batch {b}, 1 thread, --profile-summary:\n{summary(out)}",
                      flush=True)


if __name__ == "__main__":
    main()
