#!/usr/bin/python3
"""QDQ Gemm benchmark (docs/kernels.md, "Quantized operators"): the qdq_gemm rewrite against
the same model with the rule disabled (DequantizeLinear, f32 Gemm, QuantizeLinear).

The model, as ONNX Runtime's quantizer writes a Linear layer:
  QuantizeLinear(Gemm(DequantizeLinear(x u8 [M, K]), DequantizeLinear(w i8 [N, K], per output
  channel), bias f32 [N], transB = 1), y_scale, y_zero_point)
written for each M, compiled twice by vm-compile (default; --disable-rewrite qdq_gemm) and
timed by vm-run --repeat at 1 thread. Interleaved: every round times every size both ways.
Prints per round the median ms, then per size the median over rounds of unfused / fused (how
many times faster the fused program runs), with the range. Outputs are checked equal within
one quantization step.

  /usr/bin/python3 tools/bench/qdq_gemm_bench.py [--build build/dev] [--out build/bench/qdq]
                                                 [--rounds 9] [--repeat 20] [--k 1024] [--n 1024]
"""
import argparse
import os
import statistics
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = [1, 16, 64]


def model(m, k, n, rng):
    w = rng.integers(-127, 128, size=(n, k), dtype=np.int8)
    ws = (0.001 * (1 + rng.random(n))).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(ws, "ws"),
             numpy_helper.from_array(np.zeros(n, np.int8), "wz"),
             numpy_helper.from_array(bias, "bias"),
             numpy_helper.from_array(np.array(0.02, np.float32), "xs"),
             numpy_helper.from_array(np.array(128, np.uint8), "xz"),
             numpy_helper.from_array(np.array(0.25, np.float32), "ys"),
             numpy_helper.from_array(np.array(128, np.uint8), "yz")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("Gemm", ["xf", "wf", "bias"], ["yf"], transB=1),
             helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    g = helper.make_graph(nodes, "qdq_gemm",
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [m, n])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build/dev")
    p.add_argument("--out", default="build/bench/qdq")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--k", type=int, default=1024)
    p.add_argument("--n", type=int, default=1024)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    compile_bin = os.path.join(args.build, "tools", "vm-compile")
    run_bin = os.path.join(args.build, "tools", "vm-run")
    with open("/proc/loadavg") as f:
        print("load average at start: " + " ".join(f.read().split()[:3]))
    rng = np.random.default_rng(19)
    dvms = {}
    for m in MS:
        path = os.path.join(args.out, f"gemm_m{m}.onnx")
        onnx.save(model(m, args.k, args.n, rng), path)
        np.save(os.path.join(args.out, f"x_m{m}.npy"),
                rng.integers(0, 256, size=(m, args.k), dtype=np.uint8))
        for name, flags in [("fused", []), ("unfused", ["--disable-rewrite", "qdq_gemm"])]:
            dvm = os.path.join(args.out, f"gemm_m{m}.{name}.dvm")
            report = run([compile_bin, path, "-o", dvm, "--report"] + flags)
            kernels = sorted({l.split(":")[1].split("->")[0].strip() for l in report.splitlines()
                              if l.startswith("kernel ")})
            print(f"M {m} {name}: kernels {', '.join(kernels)}")
            dvms[(m, name)] = dvm
        outs = {}
        for name in ("fused", "unfused"):
            od = os.path.join(args.out, f"out_m{m}_{name}")
            run([run_bin, dvms[(m, name)], "--input", f"x={args.out}/x_m{m}.npy", "-o", od])
            outs[name] = np.load(os.path.join(od, "y.npy")).astype(np.int32)
        diff = np.abs(outs["fused"] - outs["unfused"])
        print(f"M {m}: outputs differ by at most {diff.max()} ({(diff > 0).mean() * 100:.2f}% "
              f"of elements differ)")
        if diff.max() > 1:
            raise SystemExit("fused and unfused differ by more than one quantization step")
    ratios = {m: [] for m in MS}
    for r in range(args.rounds):
        line = []
        for m in MS:
            ms = {}
            for name in ("fused", "unfused"):
                out = run([run_bin, dvms[(m, name)], "--input", f"x={args.out}/x_m{m}.npy",
                           "--repeat", str(args.repeat), "--threads", "1"])
                ms[name] = float(out.split("median_ms=")[1].split()[0])
            ratios[m].append(ms["unfused"] / ms["fused"])
            line.append(f"M {m}: fused {ms['fused']:.3f} ms unfused {ms['unfused']:.3f} ms")
        print(f"round {r}: " + "; ".join(line))
    with open("/proc/loadavg") as f:
        print("load average at end: " + " ".join(f.read().split()[:3]))
    for m in MS:
        v = ratios[m]
        print(f"M {m} K {args.k} N {args.n}: fused runs {statistics.median(v):.2f}x the unfused "
              f"speed (min {min(v):.2f}x, max {max(v):.2f}x over {len(v)} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
