#!/usr/bin/python3
"""Quantized convolution benchmark (docs/kernels.md, "Quantized operators"): QLinearConv on
oneDNN's int8 convolution primitive against the f32 Conv it replaces, and against the im2col
path QLinearConv took before (kernels/dnnl/quant.cc, still the path of a non-zero weight zero
point), at ResNet-like layer shapes, batch 1.

For each shape three one-node models are written and compiled by vm-compile:
  f32     Conv(x f32, w f32, bias f32)
  int8    QLinearConv(x u8 (zero point 128), w i8 per output channel (zero point 0), bias i32)
  im2col  the same QLinearConv with a weight zero point of 1 (oneDNN has none: im2col runs it)
and timed by vm-run --repeat at 1 thread, interleaved: every round times every shape all three
ways. Prints per round the median ms, then per shape the median over rounds of f32 / int8 and
im2col / int8 (how many times faster int8 runs), with the range. The int8 output is checked
against the f32 convolution of the dequantized inputs, requantized (within one step); the
im2col model computes with w - 1 (its zero point), so it is timed only.

  /usr/bin/python3 tools/bench/qconv_bench.py [--build build/dev] [--out build/bench/qconv]
                                              [--rounds 7] [--repeat 10]
"""
import argparse
import os
import statistics
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# name: (C, H=W, M, kernel, stride, pad)
SHAPES = {
    "c64_56_k3": (64, 56, 64, 3, 1, 1),
    "c128_28_k3": (128, 28, 128, 3, 1, 1),
    "c256_14_k3": (256, 14, 256, 3, 1, 1),
    "c512_7_k3": (512, 7, 512, 3, 1, 1),
    "c128_56_k3_s2": (128, 56, 128, 3, 2, 1),
    "c1024_14_k1": (1024, 14, 256, 1, 1, 0),
}
XS, XZ, YS, YZ = 0.02, 128, 0.05, 128


def weights(c, m, k, rng):
    """Per-output-channel symmetric int8 weights as a quantizer writes them."""
    wf = rng.standard_normal((m, c, k, k)).astype(np.float32) * 0.05
    ws = (np.abs(wf).reshape(m, -1).max(axis=1) / 127).astype(np.float32)
    wq = np.clip(np.rint(wf / ws[:, None, None, None]), -127, 127).astype(np.int8)
    return wq, ws


def models(shape, rng):
    c, hw, m, k, s, p = shape
    wq, ws = weights(c, m, k, rng)
    bq = rng.integers(-2000, 2000, size=m).astype(np.int32)
    wf = wq.astype(np.float32) * ws[:, None, None, None]
    bf = (bq * (XS * ws)).astype(np.float32)
    attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)
    out = []
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    g = helper.make_graph([conv], "f32",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(wf, "w"), numpy_helper.from_array(bf, "b")])
    out.append(("f32", helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])))
    for name, wz in (("int8", 0), ("im2col", 1)):
        inits = [numpy_helper.from_array(np.array(XS, np.float32), "xs"),
                 numpy_helper.from_array(np.array(XZ, np.uint8), "xz"),
                 numpy_helper.from_array(wq, "w"), numpy_helper.from_array(ws, "ws"),
                 numpy_helper.from_array(np.full(m, wz, np.int8), "wz"),
                 numpy_helper.from_array(np.array(YS, np.float32), "ys"),
                 numpy_helper.from_array(np.array(YZ, np.uint8), "yz"),
                 numpy_helper.from_array(bq, "b")]
        node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                                ["y"], **attrs)
        g = helper.make_graph([node], name,
                              [helper.make_tensor_value_info("x", TensorProto.UINT8,
                                                             [1, c, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
        out.append((name, helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])))
    return out


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build/dev")
    p.add_argument("--out", default="build/bench/qconv")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--repeat", type=int, default=10)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    compile_bin = os.path.join(args.build, "tools", "vm-compile")
    run_bin = os.path.join(args.build, "tools", "vm-run")
    with open("/proc/loadavg") as f:
        print("load average at start: " + " ".join(f.read().split()[:3]))
    rng = np.random.default_rng(17)
    dvms, inputs = {}, {}
    for sname, shape in SHAPES.items():
        c, hw = shape[0], shape[1]
        xq = rng.integers(0, 256, size=(1, c, hw, hw), dtype=np.uint8)
        inputs[(sname, "int8")] = os.path.join(args.out, f"{sname}_xq.npy")
        inputs[(sname, "im2col")] = inputs[(sname, "int8")]
        inputs[(sname, "f32")] = os.path.join(args.out, f"{sname}_xf.npy")
        np.save(inputs[(sname, "int8")], xq)
        np.save(inputs[(sname, "f32")], ((xq.astype(np.float32) - XZ) * XS).astype(np.float32))
        outs = {}
        for name, model in models(shape, rng):
            path = os.path.join(args.out, f"{sname}.{name}.onnx")
            onnx.save(model, path)
            dvm = os.path.join(args.out, f"{sname}.{name}.dvm")
            report = run([compile_bin, path, "-o", dvm, "--report"])
            kernels = sorted({l.split(":")[1].split("->")[0].strip() for l in report.splitlines()
                              if l.startswith("kernel ")})
            print(f"{sname} {name}: kernels {', '.join(kernels)}")
            dvms[(sname, name)] = dvm
            od = os.path.join(args.out, f"out_{sname}_{name}")
            run([run_bin, dvm, "--input", f"x={inputs[(sname, name)]}", "-o", od])
            outs[name] = np.load(os.path.join(od, "y.npy"))
        want = np.clip(np.rint(outs["f32"].astype(np.float64) / YS) + YZ, 0, 255)
        diff = np.abs(outs["int8"].astype(np.float64) - want)
        print(f"{sname} int8: differs from the requantized f32 conv by at most "
              f"{diff.max():.0f} ({(diff > 0).mean() * 100:.2f}% of elements differ)")
        if diff.max() > 1:
            raise SystemExit(f"{sname} int8: more than one quantization step off")
    ratios = {s: {"f32": [], "im2col": []} for s in SHAPES}
    for r in range(args.rounds):
        line = []
        for sname in SHAPES:
            ms = {}
            for name in ("f32", "int8", "im2col"):
                out = run([run_bin, dvms[(sname, name)], "--input",
                           f"x={inputs[(sname, name)]}", "--repeat", str(args.repeat),
                           "--threads", "1"])
                ms[name] = float(out.split("median_ms=")[1].split()[0])
            ratios[sname]["f32"].append(ms["f32"] / ms["int8"])
            ratios[sname]["im2col"].append(ms["im2col"] / ms["int8"])
            line.append(f"{sname}: f32 {ms['f32']:.3f} int8 {ms['int8']:.3f} "
                        f"im2col {ms['im2col']:.3f} ms")
        print(f"round {r}: " + "; ".join(line))
    with open("/proc/loadavg") as f:
        print("load average at end: " + " ".join(f.read().split()[:3]))
    for sname in SHAPES:
        for base in ("f32", "im2col"):
            v = ratios[sname][base]
            print(f"{sname}: int8 runs {statistics.median(v):.2f}x the {base} speed "
                  f"(min {min(v):.2f}x, max {max(v):.2f}x over {len(v)} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
