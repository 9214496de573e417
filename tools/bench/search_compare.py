#!/usr/bin/python3
"""Side-by-side beam search: dynvm against ONNX Runtime (onnxruntime-node) on the same export,
the whole search in one Run() (the Loop in the graph), 1 thread.

  /usr/bin/python3 tools/bench/search_compare.py [--build build/release] [--rounds 5]
      [--repeat 20] [--steps 32] [--hidden 256]

Models: tools/models/beam17/model.onnx (the checked-in tiny LM: embedding 16, hidden 32) and a
larger one exported here (tools/models/export_search.py --bench: embedding 64, hidden HIDDEN,
into build/bench/search), each at batch 1 and 2, 4 beams, --steps new tokens. Every round runs
each runtime once, interleaved (a fresh process: one warm-up run, --repeat timed runs, its
median and its fastest run); a runtime's time is the median over rounds (and the fastest run of
all, less disturbed by other processes on a loaded machine). The best beam's tokens of both runtimes
must be equal (exit status 1 otherwise). Needs vm-compile and vm-run in --build, and
onnxruntime-node in build/bench/node_modules (tools/bench/compare.sh installs it).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROMPTS = {1: [[19, 11, 8, 0, 15, 18, 18, 19]],
           2: [[19, 11, 8, 0, 15, 18, 18, 19], [3, 0, 17, 16, 3, 15, 15, 0]]}


def run_dynvm(build, dvm, prompt_npy, steps, repeat, out_dir):
    out = subprocess.run([os.path.join(build, "tools", "vm-run"), dvm, "-i", f"prompt={prompt_npy}",
                          "--set", f"max_new_tokens={steps}", "--threads", "1", "--repeat",
                          str(repeat), "-o", out_dir], check=True, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("median_ms="):
            median, least = (float(w.split("=")[1]) for w in line.split()[:2])
            return median, least
    raise SystemExit(f"vm-run printed no median: {out.stdout}{out.stderr}")


def run_ort(node_modules, model, prompt, steps, repeat):
    out = subprocess.run(["node", os.path.join(HERE, "ort_search.js"), "--node-modules", node_modules,
                          "--model", model, "--threads", "1", "--repeat", str(repeat), "--prompt",
                          ";".join(",".join(map(str, r)) for r in prompt), "--max-new-tokens",
                          str(steps)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--node-modules", default=os.path.join(ROOT, "build", "bench", "node_modules"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=256)
    a = ap.parse_args()
    bench = os.path.join(ROOT, "build", "bench", "search")
    big = os.path.join(bench, f"beam17_h{a.hidden}.onnx")
    if not os.path.exists(big):
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "models", "export_search.py"),
                        "--bench", bench, str(a.hidden)], check=True, capture_output=True)
    models = [("tiny-h32", os.path.join(ROOT, "tools", "models", "beam17", "model.onnx")),
              (f"lm-h{a.hidden}", big)]
    print(f"beam search, 4 beams, {a.steps} new tokens, 1 thread; {a.rounds} rounds x "
          f"{a.repeat} runs; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for label, model in models:
            dvm = os.path.join(tmp, label + ".dvm")
            subprocess.run([os.path.join(a.build, "tools", "vm-compile"), model, "-o", dvm],
                           check=True, capture_output=True)
            for batch, prompt in PROMPTS.items():
                npy = os.path.join(tmp, f"prompt{batch}.npy")
                np.save(npy, np.array(prompt, dtype=np.int64))
                times = {"dynvm": [], "ort": []}
                mins = {"dynvm": [], "ort": []}
                for r in range(a.rounds):
                    median, least = run_dynvm(a.build, dvm, npy, a.steps, a.repeat, tmp)
                    times["dynvm"].append(median)
                    mins["dynvm"].append(least)
                    o = run_ort(a.node_modules, model, prompt, a.steps, a.repeat)
                    times["ort"].append(o["median_ms"])
                    mins["ort"].append(o["min_ms"])
                    mine = np.load(os.path.join(tmp, "best.npy")).reshape(-1).tolist()
                    if mine != o["best"]:
                        print(f"  {label} batch {batch}: tokens differ: dynvm {mine} ort {o['best']}")
                        ok = False
                    print(f"  {label} batch {batch} round {r}: dynvm {times['dynvm'][-1]:.4f} ms, "
                          f"ort {times['ort'][-1]:.4f} ms")
                d, t = statistics.median(times["dynvm"]), statistics.median(times["ort"])
                dm, tm = min(mins["dynvm"]), min(mins["ort"])
                print(f"{label} batch {batch}: median dynvm {d:.4f} ms, onnxruntime {t:.4f} ms, "
                      f"ORT/dynvm {t / d:.2f}x; fastest run dynvm {dm:.4f} ms, onnxruntime "
                      f"{tm:.4f} ms, ORT/dynvm {tm / dm:.2f}x (tokens equal: {ok})")
    print(f"after: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
