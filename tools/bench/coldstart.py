#!/usr/bin/python3
"""Cold-start benchmark (docs/cuda.md, "Cold start"): the wall time and peak resident memory of
one whole `vm-run` process (exec to exit) running a small model on the CPU, for each build given.

The model is a 20-layer MLP (64 wide, batch 1, Gemm + Relu, written with the onnx helper and
random weights), compiled by each build's own vm-compile. Each build's vm-run runs it --runs
times, the builds interleaved run by run so that machine noise falls on all of them alike. Wall
time is measured around the process (started through /usr/bin/time, which adds its own ~1 ms),
peak RSS is /usr/bin/time's %M (the process's maximum resident set). Files stay
in the page cache: "cold" is a fresh process, not a cold disk. Also lists the CUDA libraries
`ldd` shows for each build's tools (there should be none).

  /usr/bin/python3 tools/bench/coldstart.py --build cuda=build/cuda --build cpu=build/dev \\
      [--runs 30] [--out docs/results/cuda-coldstart-DATE.txt]

Goal (issue 21): at most 30 ms wall and 40 MB peak RSS per run, in every build.
"""
import argparse
import datetime
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LAYERS = 20
WIDTH = 64
GOAL_MS = 30.0
GOAL_MB = 40.0
TOOLS = ("vm-run", "vm-compile", "vm-as", "vm-dis")


def cpu_description():
    """The CPU's model name, its logical CPUs and its widest x86 vector extensions (lscpu's
    words, from /proc/cpuinfo)."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    name = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile") if f in flags]
    return f"{name}, {os.cpu_count()} logical CPUs, {' '.join(isa) or 'no AVX2'}"


def write_mlp(path):
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "x"
    for i in range(LAYERS):
        w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        b = (rng.standard_normal(WIDTH) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [f"g{i}"]))
        out = "y" if i == LAYERS - 1 else f"h{i}"
        nodes.append(helper.make_node("Relu", [f"g{i}"], [out]))
        prev = out
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)


def run_once(argv, rss_file):
    # Through /usr/bin/time: a child forked from this Python process would count Python's own
    # pages in its peak RSS (exec keeps the old image's high-water mark); time's are ~2 MB.
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file] + argv,
                          stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(argv)} (exit {done.returncode})")
    with open(rss_file) as f:
        kb = int(f.read().split()[-1])
    return wall * 1e3, kb / 1024.0, cpu * 1e3  # ms, MiB, ms


def cuda_libraries(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    libs = [line.split()[0] for line in out.splitlines()
            if any(k in line for k in ("libcuda", "libcublas", "libcudart", "libnv"))]
    return ", ".join(libs) if libs else "none"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", action="append", required=True, help="LABEL=BUILD_DIR")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", help="also write the report here")
    args = ap.parse_args()
    builds = [b.split("=", 1) for b in args.build]
    tmp = tempfile.mkdtemp(prefix="dynvm_coldstart_")
    onnx_path = os.path.join(tmp, "mlp.onnx")
    write_mlp(onnx_path)
    x = os.path.join(tmp, "x.npy")
    np.save(x, np.random.default_rng(1).standard_normal((1, WIDTH)).astype(np.float32))
    commands = {}
    for label, d in builds:
        dvm = os.path.join(tmp, f"mlp_{label}.dvm")
        subprocess.run([os.path.join(d, "tools", "vm-compile"), onnx_path, "-o", dvm], check=True,
                       stdout=subprocess.DEVNULL)
        commands[label] = [os.path.abspath(os.path.join(d, "tools", "vm-run")), dvm, "-i",
                           f"x={x}"]
    rss_file = os.path.join(tmp, "rss")
    for argv in commands.values():
        run_once(argv, rss_file)  # page cache warm, as for every later run
    walls = {label: [] for label, _ in builds}
    rss = {label: [] for label, _ in builds}
    cpus = {label: [] for label, _ in builds}
    load_start = os.getloadavg()[0]
    for _ in range(args.runs):
        for label, _ in builds:
            w, r, c = run_once(commands[label], rss_file)
            walls[label].append(w)
            rss[label].append(r)
            cpus[label].append(c)
    load_end = os.getloadavg()[0]

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = [
        f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"machine: {cpu_description()}",
        f"commit: {commit}",
        "command: /usr/bin/python3 tools/bench/coldstart.py " + " ".join(sys.argv[1:]),
        f"model: {LAYERS}-layer MLP, {WIDTH} wide, batch 1 (Gemm + Relu), compiled by each build's "
        "vm-compile; one vm-run process per run, builds interleaved",
        f"runs per build: {args.runs}; goal: <= {GOAL_MS:.0f} ms wall and <= {GOAL_MB:.0f} MB peak RSS",
        f"load average (1 min) at start / end: {load_start:.1f} / {load_end:.1f} on {os.cpu_count()} "
        "cores: wall times include waiting for a core; CPU ms (user + system, of vm-run and of "
        "/usr/bin/time) do not",
        "",
        f"{'build':<14} {'wall ms: median':>16} {'min':>7} {'max':>7} {'CPU ms: median':>15} "
        f"{'peak RSS MB: median':>20} {'max':>7}  goal (median wall, median RSS)",
    ]
    for label, _ in builds:
        wm, rm = statistics.median(walls[label]), statistics.median(rss[label])
        ok = wm <= GOAL_MS and rm <= GOAL_MB
        lines.append(f"{label:<14} {wm:16.1f} {min(walls[label]):7.1f} {max(walls[label]):7.1f} "
                     f"{statistics.median(cpus[label]):15.1f} {rm:20.1f} {max(rss[label]):7.1f}  "
                     f"{'met' if ok else 'MISSED'}")
    lines.append("")
    lines.append("CUDA libraries in ldd of the tools:")
    for label, d in builds:
        for tool in TOOLS:
            path = os.path.join(d, "tools", tool)
            if os.path.exists(path):
                lines.append(f"  {label:<12} {tool:<11} {cuda_libraries(path)}")
    lines.append("")
    lines.append("raw wall ms / CPU ms / peak RSS MB per run:")
    for label, _ in builds:
        lines.append(f"  {label}: " + " ".join(f"{w:.1f}/{c:.1f}/{r:.1f}" for w, c, r in
                                              zip(walls[label], cpus[label], rss[label])))
    report = "\n".join(lines) + "\n"
    sys.stdout.write(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)


if __name__ == "__main__":
    main()
