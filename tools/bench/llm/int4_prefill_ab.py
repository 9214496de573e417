"""The 4-bit prompt product alone (docs/llm.md, s11): one com.microsoft MatMulNBits node (bits 4,
blocks of 32, symmetric, accuracy_level 0: f32 activations; the 1.6 GB step model's products by
default) on a [rows, K] activation, run by vm-run --repeat of this build and, with --baseline-build,
of another build (before/after), and by ONNX Runtime (ort_forward.js), side by side, rounds
interleaved; prints each one's median over rounds of its per-round median, and the ratios.

    /usr/bin/python3 tools/bench/llm/int4_prefill_ab.py --build build/release \
        --baseline-build /work/main/build/release --ort-dir /work/ort/node_modules \
        --rows 128 --threads 1,2 [--isa avx2]

--isa sets DYNVM_CPU_ISA for dynvm's runs (docs/kernels.md: forcing a level).
"""
import argparse
import json
import os
import re
import subprocess
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
# (K, N) of the 1.6 GB step model (export_step.py): q/o, k/v, gate/up, down.
SHAPES = [(2048, 2048), (2048, 512), (2048, 5632), (5632, 2048)]


def model(k, n, block, path, rng):
    """A MatMulNBits [rows, K] x [K, N] with random 4-bit weights and scales."""
    blocks = (k + block - 1) // block
    packed = rng.integers(0, 256, (n, blocks, block // 2), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.05, (n * blocks,)).astype(np.float32)
    node = helper.make_node("MatMulNBits", ["x", "w", "s"], ["y"], domain="com.microsoft", K=k,
                            N=n, bits=4, block_size=block, accuracy_level=0)
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", n])],
                          [numpy_helper.from_array(packed, "w"), numpy_helper.from_array(scales, "s")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                  helper.make_opsetid("com.microsoft", 1)]), path)


def vm_ms(build, dvm, x_npy, threads, repeat, env):
    out = subprocess.run([os.path.join(build, "tools", "vm-run"), dvm, "--input", f"x={x_npy}",
                          "--repeat", str(repeat), "--threads", str(threads)],
                         check=True, capture_output=True, text=True, env=env).stdout
    return float(re.search(r"median_ms[ =:]+([0-9.]+)", out).group(1))


def ort_ms(ort_dir, onnx_path, inputs, threads, repeat):
    out = subprocess.run(["node", os.path.join(HERE, "..", "ort_forward.js"), "--node-modules",
                          ort_dir, "--model", onnx_path, "--inputs", inputs, "--threads",
                          str(threads), "--repeat", str(repeat)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--baseline-build", default="")
    ap.add_argument("--ort-dir", default="")
    ap.add_argument("--rows", default="128")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--isa", default="", help="DYNVM_CPU_ISA for dynvm's runs")
    ap.add_argument("--shapes", default="", help="K:N,... (default: the 1.6 GB model's)")
    a = ap.parse_args()
    shapes = ([tuple(int(v) for v in s.split(":")) for s in a.shapes.split(",")] if a.shapes
              else SHAPES)
    env = dict(os.environ)
    if a.isa:
        env["DYNVM_CPU_ISA"] = a.isa
    builds = {"dynvm": a.build}
    if a.baseline_build:
        builds["base"] = a.baseline_build
    rng = np.random.default_rng(0)
    tmp = tempfile.mkdtemp()
    print(f"# isa {a.isa or 'native'}, block {a.block}, {a.rounds} rounds of vm-run --repeat "
          f"{a.repeat} / ort_forward.js --repeat {a.repeat}")
    for k, n in shapes:
        path = os.path.join(tmp, f"nbits_{k}_{n}.onnx")
        model(k, n, a.block, path, rng)
        dvms = {}
        for who, build in builds.items():
            dvms[who] = path.replace(".onnx", f".{who}.dvm")
            subprocess.run([os.path.join(build, "tools", "vm-compile"), path, "-o", dvms[who]],
                           check=True, capture_output=True)
        for rows in [int(r) for r in a.rows.split(",")]:
            x = rng.uniform(-1, 1, (rows, k)).astype(np.float32)
            x_npy = os.path.join(tmp, f"x_{rows}_{k}.npy")
            np.save(x_npy, x)
            inputs = os.path.join(tmp, f"x_{rows}_{k}.json")
            json.dump({"x": {"type": "float32", "dims": [rows, k], "data": x.ravel().tolist()}},
                      open(inputs, "w"))
            for threads in [int(t) for t in a.threads.split(",")]:
                ms = {who: [] for who in list(builds) + (["ort"] if a.ort_dir else [])}
                for _ in range(a.rounds):
                    for who in ms:
                        if who == "ort":
                            ms[who].append(ort_ms(a.ort_dir, path, inputs, threads, a.repeat))
                        else:
                            ms[who].append(vm_ms(builds[who], dvms[who], x_npy, threads, a.repeat,
                                                 env))
                med = {who: float(np.median(v)) for who, v in ms.items()}
                line = f"K {k:>5} N {n:>5} rows {rows:>4} threads {threads}: " + "  ".join(
                    f"{who} {v:8.2f} ms" for who, v in med.items())
                if "ort" in med:
                    line += f"  dynvm/ort {med['dynvm'] / med['ort']:.2f}"
                if "base" in med:
                    line += f"  dynvm/base {med['dynvm'] / med['base']:.2f}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
