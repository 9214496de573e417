#!/usr/bin/python3
"""LLM decode benchmark (docs/llm.md): dynvm's in-VM decode loop (vm-compile --decode of a step
model) against onnxruntime-node driving the same step model with a host loop
(ort_host_loop.js), greedy, side by side in one run, interleaved round by round.

For each --size it exports the step model with random weights (export_step.py, into --work;
never committed) and its 4-bit MatMulNBits forms (accuracy_level 0, "int4": f32 activations;
accuracy_level 4, "int4a4": int8 activations, ORT's CompInt8), compiles dynvm's executables (f32;
int8 via --quantize-weights int8; int4 and int4a4 from the MatMulNBits models), and per round
runs, each in its own process, the --runs rows (default: dynvm f32, ORT f32, dynvm int8, dynvm
int4a4, ORT int4a4). Figures: time to first token (the
prompt step plus the first token: dynvm's first emit), decode tokens/s over the later tokens,
peak RSS of the process, and the weight bytes a token reads (the executable's weights less the
embedding table, which a token gathers one row of) times tokens/s over the bandwidth of a
STREAM-like triad measured in the same run (cpu_q4gemv_benchmark). Tokens are checked: dynvm f32
against PyTorch and ORT f32, dynvm int4 / int4a4 against ORT on the same MatMulNBits model (all
greedy). --prompt takes a list (128,512): each length is its own table.

    PYTHONPATH=build/release/python /usr/bin/python3 tools/bench/llm/bench.py \\
        --build build/release --ort-dir /work/ort/node_modules --sizes 100mb --threads 1,2

--runs picks the rows (e.g. "dynvm f32,ort f32"); --baseline-build DIR adds a row "base f32"
run by another build's vm-compile and Python module (a before/after comparison in the same
interleaved rounds); --baseline-quant Q makes it "base Q" (int8, int4 or int4a4: that form's
executable compiled by the other build). A row "mapped Q" (e.g. "mapped int4a4") runs dynvm's Q executable with its
constants in the file mapping (dynvm.load(constant_pages="mapped")) instead of the default
(auto: a copy in 2 MB pages for files of 64 MiB or more, docs/llm.md "s10"); --constant-pages
sets the "dynvm" rows' choice. The triad's arrays are in 2 MB pages (cpu_q4gemv_benchmark).
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_TOKENS = {}  # spec file -> PyTorch's greedy tokens

DYNVM_RUN = r"""
import json, os, sys, time, numpy as np, dynvm
pages = os.environ.get("DYNVM_CONSTANT_PAGES")  # set by bench.py for "mapped" rows
t_load = time.perf_counter()
exe = dynvm.load(sys.argv[1], **({"constant_pages": pages} if pages else {}))
load_ms = (time.perf_counter() - t_load) * 1e3
spec = json.load(open(sys.argv[2]))
vm = dynvm.VirtualMachine(exe, threads=int(sys.argv[3]))
feeds = dict(prompt=np.array(spec["prompt"], np.int64), temperature=np.array(0, np.float32),
             top_k=np.array(0), top_p=np.array(1, np.float32),
             repetition_penalty=np.array(1, np.float32), seed=np.array(0), stop_token=np.array(-1))
feeds = {k: v for k, v in feeds.items() if k in {i.name for i in exe.inputs}}  # older builds
vm.run(max_new_tokens=np.array(2), **feeds)  # warm-up: first-run setup, as ORT's warm-up round
times = []
t0 = time.perf_counter()
out = vm.run(max_new_tokens=np.array(spec["new_tokens"]), **feeds,
             on_emit=lambda s, v: times.append(time.perf_counter()))
first = (times[0] - t0) * 1e3
steps = [(b - a) * 1e3 for a, b in zip(times, times[1:])]
print(json.dumps({"tokens": out["tokens"].tolist(), "first_ms": first, "step_ms": steps,
                  "load_ms": load_ms}))
"""


def run_child(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr}")
    return r.stdout, r.stderr


def timed_child(cmd, env=None):
    """The child's last JSON line and its peak RSS (MB)."""
    with open(os.devnull, "w") as null:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=null, text=True, env=env)
        out = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
        err = ""
    if status != 0:
        raise RuntimeError(f"{' '.join(cmd)} (status {status}): {err[-2000:]}")
    return json.loads(out.strip().splitlines()[-1]), usage.ru_maxrss / 1024.0


def triad(build, threads):
    out, _ = run_child([os.path.join(build, "kernels", "cpu_q4gemv_benchmark"), "--n", "16",
                        "--k", "32", "--rounds", "3", "--threads", str(threads), "--mb", "256"])
    found = re.findall(r"threads (\d+): triad ([\d.]+) GB/s", out)
    return float([gbs for t, gbs in found if int(t) == threads][0])


def pytorch_tokens(work, size, info, prompt, new_tokens):
    """PyTorch's greedy tokens from the exported weights (llama_step's host loop)."""
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
    import llama
    import llama_step
    lm = llama.Llama(vocab=info["vocab"], d=info["width"], layers=info["layers"],
                     heads=info["heads"], kv_heads=info["kv_heads"], head_dim=info["head_dim"],
                     ffn=info["ffn"], repeat="expand", max_pos=1024).eval()
    lm.load_state_dict(torch.load(os.path.join(work, f"{size}.pt")))
    tokens, _ = llama_step.greedy(llama_step.LlamaStep(lm), torch.tensor(prompt), new_tokens)
    return tokens.tolist()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--ort-dir", default="/work/ort/node_modules")
    ap.add_argument("--work", default="build/llm")
    ap.add_argument("--sizes", default="100mb")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--prompt", default="128", help="prompt lengths, comma-separated")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", default="dynvm f32,ort f32,dynvm int8,dynvm int4a4,ort int4a4",
                    help="the rows to run, comma-separated")
    ap.add_argument("--constant-pages", default="",
                    help="auto, mapped or huge: dynvm.load's constant_pages for the 'dynvm' rows "
                         "(default: the library's, auto)")
    ap.add_argument("--baseline-build", default="",
                    help="another build (its tools/vm-compile and python/): adds a row 'base f32' "
                         "for a before/after comparison in the same interleaved rounds")
    ap.add_argument("--baseline-quant", default="f32", choices=["f32", "int8", "int4", "int4a4"],
                    help="the form the baseline row runs ('base f32' by default)")
    a = ap.parse_args()
    run_keys = [r.strip() for r in a.runs.split(",") if r.strip()]
    if a.baseline_build:
        run_keys.insert(0, f"base {a.baseline_quant}")
        base_env = dict(os.environ)
        base_env["PYTHONPATH"] = (os.path.join(a.baseline_build, "python") + os.pathsep +
                                  base_env.get("PYTHONPATH", ""))
    os.makedirs(a.work, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(a.build, "python") + os.pathsep + env.get("PYTHONPATH", "")
    if a.constant_pages:
        env["DYNVM_CONSTANT_PAGES"] = a.constant_pages
    vm_compile = os.path.join(a.build, "tools", "vm-compile")
    print(f"# {' '.join(sys.argv)}")
    print(f"# machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"load {os.getloadavg()}")
    for size in a.sizes.split(","):
        info_path = os.path.join(a.work, f"{size}.json")
        if not os.path.exists(info_path):
            subprocess.run(["/usr/bin/python3", os.path.join(HERE, "export_step.py"), "--size", size,
                            "--out", a.work], check=True, capture_output=True)
        info = json.load(open(info_path))
        f32 = os.path.join(a.work, f"{size}.onnx")
        int4 = os.path.join(a.work, f"{size}.int4.onnx")
        int4a4 = os.path.join(a.work, f"{size}.int4a4.onnx")
        onnx_of = {"f32": f32, "int4": int4, "int4a4": int4a4}
        needed = {key.split()[1] for key in run_keys}
        dvms = {}
        for name, src, extra in (("f32", f32, []), ("int8", f32, ["--quantize-weights", "int8"]),
                                 ("int4", int4, []), ("int4a4", int4a4, []),
                                 base_source(a.baseline_quant, onnx_of)):
            base = name.startswith("base-")
            if (base and not a.baseline_build) or (
                    not base and name not in needed and name != "f32"):
                continue
            compiler = (os.path.join(a.baseline_build, "tools", "vm-compile")
                        if base else vm_compile)
            dvms[name] = os.path.join(a.work, f"{size}.{name}.dvm")
            if not os.path.exists(dvms[name]):
                subprocess.run([compiler, src, "-o", dvms[name], "--decode"] + extra, check=True)
        for prompt in [int(p) for p in a.prompt.split(",")]:
            run_size(a, size, info, prompt, run_keys, dvms, onnx_of, env,
                     base_env if a.baseline_build else None)


def base_source(form, onnx_of):
    """The baseline row's executable: its name, source model and vm-compile flags."""
    if form == "int8":
        return ("base-int8", onnx_of["f32"], ["--quantize-weights", "int8"])
    return (f"base-{form}", onnx_of[form], [])


def run_size(a, size, info, prompt, run_keys, dvms, onnx_of, env, base_env):
    """One size at one prompt length: the rounds at each thread count, and their table."""
    rng = np.random.default_rng(1)
    spec = {"prompt": rng.integers(0, info["vocab"], (1, prompt)).tolist(),
            "new_tokens": a.new_tokens, "layers": info["layers"],
            "kv_heads": info["kv_heads"], "head_dim": info["head_dim"]}
    spec_path = os.path.join(a.work, f"{size}.p{prompt}.spec.json")
    json.dump(spec, open(spec_path, "w"))
    embed = info["vocab"] * info["width"] * 4
    for threads in [int(t) for t in a.threads.split(",")]:
        rows = {k: [] for k in run_keys}
        bw = []
        for _ in range(a.rounds):
            bw.append(triad(a.build, threads))
            for key in rows:
                who, q = key.split()
                if who == "base":
                    cmd = ["/usr/bin/python3", "-c", DYNVM_RUN, dvms[f"base-{q}"], spec_path,
                           str(threads)]
                    rows[key].append(timed_child(cmd, base_env))
                    continue
                if who == "mapped":
                    cmd = ["/usr/bin/python3", "-c", DYNVM_RUN, dvms[q], spec_path, str(threads)]
                    rows[key].append(timed_child(cmd, dict(env, DYNVM_CONSTANT_PAGES="mapped")))
                    continue
                if who == "dynvm":
                    cmd = ["/usr/bin/python3", "-c", DYNVM_RUN, dvms[q], spec_path, str(threads)]
                else:
                    cmd = ["node", os.path.join(HERE, "ort_host_loop.js"), "--node-modules",
                           a.ort_dir, "--model", onnx_of[q], "--spec", spec_path,
                           "--threads", str(threads), "--rounds", "2"]  # the first: warm-up
                rows[key].append(timed_child(cmd, env))
        tokens = {k: v[0][0]["tokens"] for k, v in rows.items()}

        def same(a, b):  # "n/a" where a row was not run; else equal, or the first that differs
            if a not in tokens or (b != "pytorch" and b not in tokens):
                return "n/a"
            want = torch_tokens if b == "pytorch" else tokens[b]
            if tokens[a] == want:
                return True
            first = next(i for i, (x, y) in enumerate(zip(tokens[a][0], want[0])) if x != y)
            return f"False (equal for the first {first})"
        # In a child: this process's peak RSS would be inherited by the timed children's
        # (Linux keeps a process's high-water RSS across fork and exec).
        if spec_path not in TORCH_TOKENS:  # once per size and prompt (threads do not matter)
            TORCH_TOKENS[spec_path] = json.loads(run_child(
                ["/usr/bin/python3", os.path.abspath(__file__), "--pytorch-tokens", a.work, size,
                 spec_path])[0].strip().splitlines()[-1])
        torch_tokens = TORCH_TOKENS[spec_path]
        bandwidth = float(np.median(bw))
        print(f"\n## {size}: {info['weight_bytes'] / 1e6:.0f} MB f32 weights, prompt {prompt}, "
              f"{a.new_tokens} new tokens, threads {threads}, {a.rounds} rounds; triad "
              f"{bandwidth:.1f} GB/s (median)")
        int8 = "n/a"
        if "dynvm int8" in tokens and "dynvm f32" in tokens:
            int8 = sum(x == y for x, y in zip(tokens["dynvm int8"][0], tokens["dynvm f32"][0]))
        print(f"tokens: dynvm f32 == pytorch: {same('dynvm f32', 'pytorch')}; "
              f"dynvm f32 == ort f32: {same('dynvm f32', 'ort f32')}; "
              f"dynvm int4 == ort int4: {same('dynvm int4', 'ort int4')}; "
              f"dynvm int4a4 == ort int4a4: {same('dynvm int4a4', 'ort int4a4')}; "
              f"dynvm int8 == dynvm f32 for {int8}/{a.new_tokens}")
        if a.baseline_build:
            base = f"base {a.baseline_quant}"
            want = {"f32": "pytorch", "int8": "dynvm int8"}.get(a.baseline_quant,
                                                                 f"ort {a.baseline_quant}")
            print(f"tokens: {base} == {want}: {same(base, want)}")
        print(f"{'run':<14} {'TTFT ms':>9} {'tok/s':>8} {'RSS MB':>8} {'GB/token':>9} {'of triad':>9}"
              f" {'load ms':>8}")
        for key, runs in rows.items():
            first = float(np.median([r[0]["first_ms"] for r in runs]))
            tps = float(np.median([1e3 * len(r[0]["step_ms"]) / sum(r[0]["step_ms"]) for r in runs]))
            rss = float(np.median([r[1] for r in runs]))
            q = key.split()[1]
            if key.startswith("base"):
                q = f"base-{q}"
            wbytes = os.path.getsize(dvms[q]) - embed if not key.startswith("ort") else \
                os.path.getsize(onnx_of[q]) - embed
            gb = wbytes / 1e9
            loads = [r[0]["load_ms"] for r in runs if "load_ms" in r[0]]
            load = f"{float(np.median(loads)):>8.0f}" if loads else f"{'-':>8}"
            print(f"{key:<14} {first:>9.1f} {tps:>8.2f} {rss:>8.0f} {gb:>9.3f} "
                  f"{100 * gb * tps / bandwidth:>8.0f}% {load}")
        print("raw: " + json.dumps({k: [{"first_ms": r[0]["first_ms"], "tok_s": 1e3 * len(r[0]["step_ms"]) / sum(r[0]["step_ms"]), "rss_mb": r[1]} for r in v] for k, v in rows.items()}))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--pytorch-tokens":
        work, size, spec_file = sys.argv[2:]
        spec = json.load(open(spec_file))
        info = json.load(open(os.path.join(work, f"{size}.json")))
        print(json.dumps(pytorch_tokens(work, size, info, spec["prompt"], spec["new_tokens"])))
    else:
        main()
