#!/usr/bin/python3
"""An STFT + log-mel front end over 1-30 s of 16 kHz audio: dynvm against ONNX Runtime.

The model (ONNX opset 17, built here with onnx.helper) takes signal [1, samples] of any length:
Reshape to [1, samples, 1] -> STFT (frame 512, hop 160, periodic Hann window from HannWindow,
onesided) -> power (re^2 + im^2) -> MatMul with MelWeightMatrix(80 bins, 512, 16000 Hz,
0-8000 Hz) -> Log(x + 1e-6): [1, frames, 80]. Both runtimes load the same .onnx (dynvm through
vm-compile), run one warm-up, then --repeat timed runs of each length at one thread; the
median of each and the ratio dynvm / ORT are printed, one line per length. The outputs are
checked against each other first (max |diff| printed).

    /usr/bin/python3 tools/bench/stft_mel_bench.py --build build/dev \\
        --node-modules build/bench/node_modules [--seconds 1,5,10,30] [--repeat 10]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

RATE = 16000


def build_model(path):
    i64 = lambda name, v: helper.make_tensor(name, TensorProto.INT64, [], [v])
    f32 = lambda name, v: helper.make_tensor(name, TensorProto.FLOAT, [], [v])
    nodes = [
        helper.make_node("Constant", [], ["shape3"], value=helper.make_tensor(
            "s", TensorProto.INT64, [3], [1, -1, 1])),
        helper.make_node("Reshape", ["signal", "shape3"], ["sig3"]),
        helper.make_node("Constant", [], ["flen"], value=i64("flen", 512)),
        helper.make_node("Constant", [], ["hop"], value=i64("hop", 160)),
        helper.make_node("HannWindow", ["flen"], ["window"]),
        helper.make_node("STFT", ["sig3", "hop", "window"], ["spec"]),
        helper.make_node("Mul", ["spec", "spec"], ["sq"]),
        helper.make_node("Constant", [], ["last"], value=helper.make_tensor(
            "a", TensorProto.INT64, [1], [-1])),
        helper.make_node("ReduceSum", ["sq", "last"], ["power"], keepdims=0),
        helper.make_node("Constant", [], ["mels"], value=i64("mels", 80)),
        helper.make_node("Constant", [], ["rate"], value=i64("rate", RATE)),
        helper.make_node("Constant", [], ["lo"], value=f32("lo", 0.0)),
        helper.make_node("Constant", [], ["hi"], value=f32("hi", 8000.0)),
        helper.make_node("MelWeightMatrix", ["mels", "flen", "rate", "lo", "hi"], ["melw"]),
        helper.make_node("MatMul", ["power", "melw"], ["mel"]),
        helper.make_node("Constant", [], ["eps"], value=f32("eps", 1e-6)),
        helper.make_node("Add", ["mel", "eps"], ["mel_eps"]),
        helper.make_node("Log", ["mel_eps"], ["logmel"]),
    ]
    graph = helper.make_graph(
        nodes, "stft_mel",
        [helper.make_tensor_value_info("signal", TensorProto.FLOAT, [1, "samples"])],
        [helper.make_tensor_value_info("logmel", TensorProto.FLOAT, [1, "frames", 80])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build/dev")
    p.add_argument("--node-modules", default="build/bench/node_modules")
    p.add_argument("--seconds", default="1,5,10,30")
    p.add_argument("--repeat", type=int, default=10)
    a = p.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.TemporaryDirectory(prefix="stft-mel-") as work:
        model = os.path.join(work, "stft_mel.onnx")
        build_model(model)
        dvm = os.path.join(work, "stft_mel.dvm")
        subprocess.run([os.path.join(a.build, "tools", "vm-compile"), model, "-o", dvm],
                       check=True, capture_output=True)
        print(f"{'seconds':>8} {'frames':>7} {'dynvm_ms':>10} {'ort_ms':>10} {'ratio':>7} "
              f"{'max_abs_diff':>13}")
        for sec in [float(s) for s in a.seconds.split(",")]:
            rng = np.random.default_rng(int(sec * 1000))
            x = (0.1 * rng.standard_normal((1, int(sec * RATE)))).astype(np.float32)
            npy = os.path.join(work, "x.npy")
            np.save(npy, x)
            out_dir = os.path.join(work, "out")
            r = subprocess.run([os.path.join(a.build, "tools", "vm-run"), dvm, "--input",
                                f"signal={npy}", "--output-dir", out_dir, "--repeat",
                                str(a.repeat)], check=True, capture_output=True, text=True)
            m = re.search(r"median_ms[ =:]+([0-9.]+)", r.stdout + r.stderr)
            if not m:
                sys.exit(f"no median_ms in vm-run's output: {r.stdout} {r.stderr}")
            dyn_ms = float(m.group(1))
            got = np.load(os.path.join(out_dir, "logmel.npy"))
            inputs = os.path.join(work, "in.json")
            with open(inputs, "w") as f:
                json.dump({"signal": {"type": "float32", "dims": list(x.shape),
                                      "data": x.reshape(-1).tolist()}}, f)
            ort_out = os.path.join(work, "ort_out.json")
            r = subprocess.run(["node", os.path.join(root, "tools", "bench", "ort_forward.js"),
                                "--node-modules", a.node_modules, "--model", model, "--inputs",
                                inputs, "--repeat", str(a.repeat), "--output", ort_out],
                               check=True, capture_output=True, text=True)
            ort_ms = json.loads(r.stdout.strip().splitlines()[-1])["ms"]
            want = np.array(json.load(open(ort_out))["data"], dtype=np.float32).reshape(got.shape)
            diff = float(np.max(np.abs(got - want))) if got.size else 0.0
            print(f"{sec:8.1f} {got.shape[1]:7d} {dyn_ms:10.3f} {ort_ms:10.3f} "
                  f"{dyn_ms / ort_ms:7.2f} {diff:13.3g}", flush=True)


if __name__ == "__main__":
    main()
