#!/usr/bin/env python3
"""Makes the figures of docs/profiling.md: runs the commands its sections show and prints
their raw output and the tables the document quotes. Record a run with

    bash tools/bench/record.sh claims-profiling -- python3 tools/bench/profiling_tables.py

(docs/results/claims-profiling-DATE.txt). Needs a build (--build, default build/release: vm-run,
vm-compile, vm/vm_benchmark) and, for the benchmark models, the models tools/bench/compare.sh
exports into build/bench/models (that table is left out when they are missing).

1. "The summary": vm-run --profile-summary on the demo's char-LM, as the document shows it.
2. "What the decode profiles show": per decode step of the char-LM and tools/models/gpt, the
   kernels per step, the step's mean time and the median time outside kernels (profiled).
3. The benchmark models: run time without the profiler (--repeat 50, median) against the
   kernel time of a profiled run, twice each.
4. "Cost": vm_benchmark's BM_EmptyInvoke and BM_EmptyInvokeProfiled.
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd):
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    out = p.stdout + p.stderr
    print(out, flush=True)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}")
    return out


def profile(out):
    """(total run ms, kernel ms, runs, {loop: row}, kernel calls) from a --profile-summary."""
    m = re.search(r"profile: (\d+) runs?, ([0-9.]+) ms; inside kernels ([0-9.]+) ms", out)
    loops = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 9 and re.match(r"^\w+@\d+$", f[0]):
            loops[f[0]] = {"entries": int(f[1]), "iterations": int(f[2]), "iter_us": float(f[3]),
                           "kernels_us": float(f[4]), "outside_us": float(f[5]),
                           "median_us": float(f[7])}
    calls = 0
    for line in out.splitlines():
        f = line.split()
        if len(f) == 6 and f[5].endswith("%") and f[2].isdigit():
            calls += int(f[2])
    return int(m.group(1)), float(m.group(2)), float(m.group(3)), loops, calls


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    args = p.parse_args()
    tools = os.path.join(args.build, "tools")
    work = os.path.join(args.build, "profiling")
    os.makedirs(work, exist_ok=True)
    charlm = os.path.join(work, "charlm.dvm")
    run([f"{tools}/vm-compile", "tools/lm/charlm.onnx", "-o", charlm, "--bound", "batch=1",
         "--bound", "max_new_tokens=4096", "--bound", "prompt_len=1024"])
    gpt = os.path.join(work, "gpt.dvm")
    run([f"{tools}/vm-compile", "tools/models/gpt/model.onnx", "-o", gpt])

    print("## 1. The summary\n")
    lm_out = run([f"{tools}/vm-run", charlm, "--vocab", "tools/lm/vocab.txt", "--text",
                  "prompt=And it came to pass", "--set", "max_new_tokens=400", "--set",
                  "temperature=0.7", "--set", "seed=1", "--set", "stop_token=-1", "--repeat", "5",
                  "--profile-summary"])

    print("## 2. Decode steps, profiled\n")
    case = "tools/models/gpt/case0/"
    gpt_out = run([f"{tools}/vm-run", gpt, "-i", f"prompt={case}input_prompt.npy", "-i",
                   f"max_new_tokens={case}input_max_new_tokens.npy", "--repeat", "5",
                   "--profile-summary"])
    rows = ["| model | kernels per step | step | outside kernels (median) | share |",
            "| --- | --- | --- | --- | --- |"]
    for name, out in (("`tools/lm/charlm.onnx`, 400 characters", lm_out),
                      ("`tools/models/gpt`, case0", gpt_out)):
        runs, _, _, loops, calls = profile(out)
        # The decode loop: the loop with the most iterations.
        loop = max(loops.values(), key=lambda r: r["iterations"])
        per_step = calls / max(1, sum(r["iterations"] for r in loops.values()))
        rows.append(f"| {name} | {per_step:.0f} | {loop['iter_us']:.0f} us | "
                    f"{loop['median_us']:.1f} us | {100 * loop['median_us'] / loop['iter_us']:.1f}% |")
    print("\n".join(rows) + "\n")

    print("## 3. Benchmark models: unprofiled run time against profiled kernel time\n")
    models = os.path.join(ROOT, "build", "bench", "models")
    if not os.path.isdir(models):
        print("(build/bench/models is missing: run tools/bench/compare.sh first; table left out)\n")
    else:
        rows = ["| model | run (median of 50) | kernels (profiled) | outside kernels |",
                "| --- | --- | --- | --- |"]
        for label, folder, extra in (
                ("LSTM LM loop (`build/bench/models/lstm/loop.dvm`)", "lstm", None),
                ("tiny GPT loop, unbounded (`build/bench/models/gpt/loop.dvm`)", "gpt", None),
                ("tiny GPT loop, `--bound prompt_len=4 --bound max_new_tokens=128`", "gpt",
                 ["--bound", "batch=1", "--bound", "prompt_len=4", "--bound",
                  "max_new_tokens=128"])):
            d = os.path.join(models, folder)
            exe = os.path.join(d, "loop.dvm")
            if extra:
                exe = os.path.join(work, "gpt_bounded.dvm")
                run([f"{tools}/vm-compile", os.path.join(d, "loop.onnx"), "-o", exe] + extra)
            inputs = []
            for f in sorted(os.listdir(d)):
                if f.startswith("input_") and f.endswith(".npy"):
                    inputs += ["-i", f"{f[6:-4]}={os.path.join(d, f)}"]
            runs_ms, kernels_ms = [], []
            for _ in range(2):
                out = run([f"{tools}/vm-run", exe] + inputs + ["--repeat", "50"])
                runs_ms.append(float(re.search(r"median_ms=([0-9.]+)", out).group(1)))
                out = run([f"{tools}/vm-run", exe] + inputs + ["--repeat", "10",
                                                               "--profile-summary"])
                n, _, k, _, _ = profile(out)
                kernels_ms.append(k / n)
            share = [100 * (r - k) / r for r, k in zip(runs_ms, kernels_ms)]
            rows.append(f"| {label} | {min(runs_ms):.2f}-{max(runs_ms):.2f} ms | "
                        f"{min(kernels_ms):.2f}-{max(kernels_ms):.2f} ms | "
                        f"{min(share):.1f}-{max(share):.1f}% |")
        print("\n".join(rows) + "\n")

    print("## 4. Cost of the recording\n")
    bench = os.path.join(args.build, "vm", "vm_benchmark")
    run([bench, "--benchmark_filter=BM_EmptyInvoke", "--benchmark_min_time=0.2"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
