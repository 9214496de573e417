#!/usr/bin/python3
"""Side-by-side greedy decode throughput: dynvm, ONNX Runtime and TorchScript on the same
models and inputs (run through tools/bench/compare.sh, which builds and installs what this
needs; docs/benchmarks.md).

Cases (build/bench/models, made by export_bench_models.py):
  lstm-loop  LSTM LM decode, 128 tokens, the loop in the graph (dynvm .dvm, ORT Loop, TorchScript loop)
  lstm-step  the same LSTM as a single-step model, driven by a host loop (C++, JavaScript, Python)
  gpt-loop   tiny GPT decode, 128 tokens, prefix recomputed every step
  gru-loop   small GRU decode that stops at an end token after 17 tokens

For each thread count (1, then 2) and case, every runtime runs once per round, interleaved
(dynvm, ORT, TorchScript with the environment as given, TorchScript with OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE unset), each run a fresh process doing one warm-up decode and --repeat timed
decodes. A runtime's time is the median over rounds of its per-round median. Every runtime's
tokens must equal PyTorch's, and every case must meet the ratio bar (exit status 1 otherwise;
tools/bench/compare_test.py checks both). The ratio bar (issue 11): with 1 thread dynvm >= 1.3x
ONNX Runtime and >= 1.5x TorchScript (the faster of its two environments); with 2 threads
dynvm >= 1x both.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CASES = [
    # name, model folder, mode
    ("lstm-loop", "lstm", "loop"),
    ("lstm-step", "lstm", "step"),
    ("gpt-loop", "gpt", "loop"),
    ("gru-loop", "gru", "loop"),
]
RUNTIMES = ["dynvm", "ort", "torch", "torch-noblas", "dynvm-base"]  # dynvm-base: --baseline-build
BAR = {1: {"ort": 1.3, "torch": 1.5}, 2: {"ort": 1.0, "torch": 1.0}}


def load_case(folder):
    import numpy as np

    def scalar(name, default=None):
        path = os.path.join(folder, f"input_{name}.npy")
        return int(np.load(path)) if os.path.exists(path) else default
    prompt = np.load(os.path.join(folder, "input_prompt.npy"))[0].tolist()
    want = np.load(os.path.join(folder, "output_tokens.npy"))[0].tolist()
    return {
        "prompt": ",".join(str(t) for t in prompt),
        "max_new_tokens": scalar("max_new_tokens"),
        "stop_token": scalar("stop_token", -1),
        "want": want,
    }


def state_dims(step_onnx):
    import onnx
    model = onnx.load(step_onnx, load_external_data=False)
    for i in model.graph.input:
        if i.name == "h":
            return ",".join(str(d.dim_value) for d in i.type.tensor_type.shape.dim)
    raise SystemExit(f"{step_onnx} has no input h")


def command(runtime, case, args, threads, mode, folder):
    common = ["--prompt", case["prompt"], "--max-new-tokens", str(case["max_new_tokens"]),
              "--stop-token", str(case["stop_token"]), "--threads", str(threads),
              "--repeat", str(args.repeat)]
    env = dict(os.environ)
    if runtime in ("dynvm", "dynvm-base"):
        build = args.build if runtime == "dynvm" else args.baseline_build
        exe = os.path.join(build, "tools", "bench", "vm-decode-bench")
        return [exe, f"--{mode}", os.path.join(folder, f"{mode}.dvm"), "--json"] + common, env
    extra = ["--state-dims", case["state_dims"]] if mode == "step" else []
    if runtime == "ort":
        return (["node", os.path.join(HERE, "ort_bench.js"), "--node-modules", args.node_modules,
                 "--model", os.path.join(folder, f"{mode}.onnx"), "--mode", mode] + common + extra,
                env)
    if runtime == "torch-noblas":
        env.pop("OPENBLAS_CORETYPE", None)
        env.pop("OPENBLAS_L2_SIZE", None)
    return ([sys.executable, os.path.join(HERE, "torch_bench.py"),
             "--model", os.path.join(folder, f"{mode}.pt"), "--mode", mode] + common + extra, env)


def run_once(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr.strip()}")
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"no JSON line from: {' '.join(cmd)}\n{p.stdout}")


def machine():
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"{model}, {os.cpu_count()} logical CPUs, load average "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
            f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    p.add_argument("--models", default=os.path.join(ROOT, "build", "bench", "models"))
    p.add_argument("--node-modules", default=os.path.join(ROOT, "build", "bench", "node_modules"))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--cases", default=",".join(c[0] for c in CASES))
    p.add_argument("--runtimes", default=",".join(RUNTIMES[:4]))
    p.add_argument("--baseline-build", default="",
                   help="another build (the main branch's) whose vm-decode-bench runs as the "
                        "runtime dynvm-base, interleaved (A/B of dynvm itself)")
    args = p.parse_args(argv)
    wanted_cases = args.cases.split(",")
    runtimes = args.runtimes.split(",")
    for r in runtimes:
        if r not in RUNTIMES:
            raise SystemExit(f"unknown runtime {r}; known: {', '.join(RUNTIMES)}")
    if args.baseline_build and "dynvm-base" not in runtimes:
        runtimes.append("dynvm-base")
    if "dynvm-base" in runtimes and not args.baseline_build:
        raise SystemExit("the runtime dynvm-base needs --baseline-build")
    print(f"machine: {machine()}")
    print(f"rounds {args.rounds} x {args.repeat} timed decodes per runtime; median of round medians")
    token_errors = []
    misses = []
    for threads in [int(t) for t in args.threads.split(",")]:
        print(f"\n== {threads} thread{'s' if threads > 1 else ''} ==")
        header = f"{'case':10} {'tokens':>6}" + "".join(f" {r + ' tok/s':>18}" for r in runtimes)
        if "dynvm" in runtimes:
            header += f" {'dynvm/ort':>10} {'dynvm/torch':>12}  bar"
        print(header)
        for name, model, mode in CASES:
            if name not in wanted_cases:
                continue
            folder = os.path.join(args.models, model)
            case = load_case(folder)
            if mode == "step":
                case["state_dims"] = state_dims(os.path.join(folder, "step.onnx"))
            medians = {r: [] for r in runtimes}
            for _ in range(args.rounds):
                for r in runtimes:
                    cmd, env = command(r, case, args, threads, mode, folder)
                    out = run_once(cmd, env)
                    if out["tokens"] != case["want"]:
                        token_errors.append(f"{name} {r} threads={threads}: {out['tokens'][:16]}... "
                                            f"!= PyTorch {case['want'][:16]}...")
                    medians[r].append(statistics.median(out["ms"]))
            n = len(case["want"])
            tps = {r: n * 1000.0 / statistics.median(m) for r, m in medians.items()}
            row = f"{name:10} {n:>6}" + "".join(f" {tps[r]:>18.0f}" for r in runtimes)
            if "dynvm" in runtimes:
                vs_ort = tps["dynvm"] / tps["ort"] if "ort" in tps else float("nan")
                torch_best = max([tps[r] for r in ("torch", "torch-noblas") if r in tps] or [float("nan")])
                vs_torch = tps["dynvm"] / torch_best
                ok = vs_ort >= BAR[threads]["ort"] and vs_torch >= BAR[threads]["torch"] \
                    if threads in BAR else True
                row += f" {vs_ort:>10.2f} {vs_torch:>12.2f}  {'ok' if ok else 'MISS'}"
                if not ok:
                    misses.append(f"{name} threads={threads}: dynvm/ort {vs_ort:.2f}, "
                                  f"dynvm/torch {vs_torch:.2f}")
            if "dynvm-base" in tps and "dynvm" in tps:
                row += f"  dynvm/base {tps['dynvm'] / tps['dynvm-base']:.3f}"
            print(row, flush=True)
    print(f"\nafter: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if token_errors:
        print("\nTOKENS DIFFER:\n  " + "\n  ".join(token_errors))
        return 1
    print("tokens: every runtime gave PyTorch's tokens")
    if misses:
        print("below the bar (1 thread: 1.3x ORT, 1.5x TorchScript; 2 threads: 1x):\n  " +
              "\n  ".join(misses))
        return 1
    print("every case meets the bar")
    return 0


if __name__ == "__main__":
    sys.exit(main())
