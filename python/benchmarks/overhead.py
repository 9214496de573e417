#!/usr/bin/env python3
"""The overhead of dynvm.VirtualMachine.run over the C++ Run, for a one-op model.

    PYTHONPATH=build/release/python /usr/bin/python3 python/benchmarks/overhead.py [--out FILE]

The model is ONNX's test_add (one Add of two float32 [3, 4, 5] tensors; libonnx-testdata).
Both sides do the same work per call, in one process, alternating: the C++ side
(VirtualMachine._time_cpp_runs: a C++ loop of SetInputZeroCopy for both inputs, Run, GetOutput)
and the Python side (vm.run(x=x, y=y): binding the ndarrays without a copy, releasing the GIL
around Run, and returning the output as an ndarray). The overhead is the difference of the
medians over the rounds, in microseconds per call, both in wall time and in the calling
thread's CPU time (on a loaded machine the wall time includes waiting for a core; the CPU time
is the work the call costs).
"""

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

import dynvm

MODEL = "/usr/share/libonnx-testdata/data/node/test_add/model.onnx"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=20000, help="calls per round and side")
    parser.add_argument("--out", help="also write the report to this file")
    args = parser.parse_args()

    exe = dynvm.compile(MODEL)
    vm = dynvm.VirtualMachine(exe)
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    y = np.ones((3, 4, 5), np.float32)
    np.testing.assert_array_equal(vm.run(x=x, y=y)["sum"], x + y)
    assert vm.last_run_stats.inputs_copied == 0

    cpp, py, cpp_cpu, py_cpu = [], [], [], []
    for _ in range(1000):  # warm up
        vm.run(x=x, y=y)
    vm._time_cpp_runs({"x": x, "y": y}, 1000)
    lines = []
    for r in range(args.rounds):
        c, c_cpu = (t * 1e6 for t in vm._time_cpp_runs({"x": x, "y": y}, args.runs))
        start, start_cpu = time.perf_counter(), time.thread_time()
        for _ in range(args.runs):
            vm.run(x=x, y=y)
        p_cpu = (time.thread_time() - start_cpu) / args.runs * 1e6
        p = (time.perf_counter() - start) / args.runs * 1e6
        cpp.append(c)
        py.append(p)
        cpp_cpu.append(c_cpu)
        py_cpu.append(p_cpu)
        lines.append(f"round {r}: wall: C++ Run {c:.3f} us/call, vm.run {p:.3f} us/call, "
                     f"overhead {p - c:.3f} us;  thread CPU: C++ Run {c_cpu:.3f}, vm.run "
                     f"{p_cpu:.3f}, overhead {p_cpu - c_cpu:.3f} us")
    c, p = statistics.median(cpp), statistics.median(py)
    c_cpu, p_cpu = statistics.median(cpp_cpu), statistics.median(py_cpu)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    report = "\n".join([
        f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"machine: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}; "
        f"load average {os.getloadavg()[0]:.1f}",
        f"commit: {commit}",
        f"python: {sys.executable} {platform.python_version()}, numpy {np.__version__}",
        "command: python/benchmarks/overhead.py " + " ".join(sys.argv[1:]),
        f"model: {MODEL} (Add, float32 [3,4,5] x2 -> [3,4,5])",
        f"{args.rounds} rounds of {args.runs} calls per side, alternating",
        *lines,
        f"median wall time:  C++ Run {c:.3f} us/call, vm.run {p:.3f} us/call, "
        f"overhead {p - c:.3f} us/call",
        f"median thread CPU: C++ Run {c_cpu:.3f} us/call, vm.run {p_cpu:.3f} us/call, "
        f"overhead {p_cpu - c_cpu:.3f} us/call",
    ])
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
