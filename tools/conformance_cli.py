#!/usr/bin/python3
"""The CLI-contract conformance harness: ONNX's node test cases through the plain tools.

For each case folder (model.onnx, test_data_set_N/{input,output}_K.pb) it runs

    vm-compile model.onnx -o model.dvm
    vm-run model.dvm --input NAME=input_K.npy ... --output-dir OUT

and compares OUT/NAME.npy with the stored outputs the way the project's runner does
(tests/conformance/conformance.h): dtype and shape equal, |got - want| <= 1e-7 + 1e-3 |want|
for floating point (NaN matches NaN), integers, bools and strings exactly; a sequence output is
OUT/NAME_K.npy per element, an optional's content as its kind (empty: no file). A case whose
model holds a random operator (Bernoulli, Random*, Dropout with a training_mode input) and
whose outputs do not match by value passes on dtype, shape and the runner's statistical check
(values in {0, 1} when the stored draw is, means within five standard errors) and is listed
apart. A case with a sequence or
optional input is counted as skipped (vm-run binds tensors only) and does not pass.

Run with Debian's /usr/bin/python3 (python3-onnx, python3-numpy):

    /usr/bin/python3 tools/conformance_cli.py [--bin build/dev/tools] [--data DIR] [--filter TEXT]
                                              [--list-failures]

Prints one line per failed case with --list-failures, the random cases, and the totals:
`node: P passed / F failed / S skipped of N`.
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

RANDOM_OPS = {"Bernoulli", "RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike"}


def has_random_op(graph):
    for node in graph.node:
        if node.op_type in RANDOM_OPS:
            return True
        if node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]:
            return True  # draws a mask when training_mode is true
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH and has_random_op(attr.g):
                return True
            if attr.type == onnx.AttributeProto.GRAPHS and any(has_random_op(g) for g in attr.graphs):
                return True
    return False


def read_pb(path, kind):
    data = open(path, "rb").read()
    if kind == "optional":  # (content kind, value): None when empty
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        if opt.HasField("tensor_value"):
            return "tensor", to_numpy(opt.tensor_value)
        if opt.HasField("sequence_value"):
            return "sequence", [to_numpy(t) for t in opt.sequence_value.tensor_values]
        return "empty", None
    if kind == "sequence":
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return [to_numpy(t) for t in seq.tensor_values]
    tensor = onnx.TensorProto()
    tensor.ParseFromString(data)
    return to_numpy(tensor)


def to_numpy(tensor):
    a = numpy_helper.to_array(tensor)
    if tensor.data_type == onnx.TensorProto.STRING:
        a = np.array([x.decode("utf-8") if isinstance(x, bytes) else x for x in a.flat],
                     dtype=str).reshape(a.shape)
    if tensor.data_type == onnx.TensorProto.BFLOAT16:  # stored and written as uint16 bits
        a = a.view(np.uint16) if a.dtype != np.uint16 else a
    return a


def value_kind(value_info):
    which = value_info.type.WhichOneof("value")
    if which == "tensor_type":
        return "tensor"
    if which == "sequence_type":
        return "sequence"
    if which == "optional_type":
        return "optional"
    return which or "tensor"


def compare_values(got, want):
    if got.dtype != want.dtype:
        if not (got.dtype.kind == "U" and want.dtype.kind == "U"):
            return f"dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "fc":
        g = got.astype(np.float64)
        w = want.astype(np.float64)
        both_nan = np.isnan(g) & np.isnan(w)
        same_inf = np.isinf(w) & (g == w)
        with np.errstate(invalid="ignore"):
            ok = both_nan | same_inf | (np.abs(g - w) <= 1e-7 + 1e-3 * np.abs(w))
        if not ok.all():
            i = int(np.argmin(ok.reshape(-1)))
            return f"element {i}: got {g.reshape(-1)[i]}, expected {w.reshape(-1)[i]}"
        return None
    if not np.array_equal(got, want):
        return "values differ"
    return None


def compare_random(got, want):
    g = got.astype(np.float64).reshape(-1)
    w = want.astype(np.float64).reshape(-1)
    if g.size == 0:
        return None
    if not np.isfinite(g).all():
        return "a random output is not finite"
    if np.isin(w, [0.0, 1.0]).all() and not np.isin(g, [0.0, 1.0]).all():
        return "a Bernoulli draw holds values other than 0 and 1"
    bound = 5 * np.sqrt((g.var() + w.var()) / g.size)
    if abs(g.mean() - w.mean()) > bound:
        return f"random output mean {g.mean()}, expected {w.mean()} within {bound}"
    return None


def run_case(case_dir, bindir, work):
    """Returns (outcome, message, random): outcome is passed, failed or skipped."""
    model = onnx.load(os.path.join(case_dir, "model.onnx"))
    random = has_random_op(model.graph)
    inits = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in inits]
    outputs = list(model.graph.output)
    if any(value_kind(v) != "tensor" for v in inputs):
        return "skipped", "a non-tensor input", random
    dvm = os.path.join(work, "model.dvm")
    r = subprocess.run([os.path.join(bindir, "vm-compile"), os.path.join(case_dir, "model.onnx"),
                        "-o", dvm], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return "failed", "vm-compile: " + (r.stderr.strip().splitlines() or ["?"])[-1], random
    judged_random = False
    sets = sorted(glob.glob(os.path.join(case_dir, "test_data_set_*")))
    if not sets:
        return "skipped", "no test data", random
    for s in sets:
        args = [os.path.join(bindir, "vm-run"), dvm]
        for k, v in enumerate(inputs):
            pb = os.path.join(s, f"input_{k}.pb")
            if not os.path.exists(pb):
                return "failed", f"{os.path.basename(s)}: missing input_{k}.pb", random
            npy = os.path.join(work, f"in_{k}.npy")
            np.save(npy, read_pb(pb, "tensor"), allow_pickle=False)
            args += ["--input", f"{v.name}={npy}"]
        out_dir = os.path.join(work, "out_" + os.path.basename(s))
        os.makedirs(out_dir, exist_ok=True)
        args += ["--output-dir", out_dir]
        r = subprocess.run(args, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            return "failed", "vm-run: " + (r.stderr.strip().splitlines() or ["?"])[-1], random
        for k, v in enumerate(outputs):
            kind = value_kind(v)
            want = read_pb(os.path.join(s, f"output_{k}.pb"), kind)
            if kind == "optional":
                kind, want = want
                if kind == "empty":
                    if glob.glob(os.path.join(out_dir, f"{v.name}*.npy")):
                        return "failed", f"output {v.name}: expected an empty optional", random
                    continue
            if kind == "sequence":
                got = []
                while os.path.exists(os.path.join(out_dir, f"{v.name}_{len(got)}.npy")):
                    got.append(np.load(os.path.join(out_dir, f"{v.name}_{len(got)}.npy")))
                if len(got) != len(want):
                    return "failed", f"output {v.name}: {len(got)} elements, expected {len(want)}", random
                pairs = list(zip(got, want))
            else:
                path = os.path.join(out_dir, f"{v.name}.npy")
                if not os.path.exists(path):
                    return "failed", f"output {v.name}: not written", random
                pairs = [(np.load(path), want)]
            for got, want_t in pairs:
                msg = compare_values(got, want_t)
                if msg and random and got.dtype == want_t.dtype and got.shape == want_t.shape:
                    msg = compare_random(got, want_t)  # a draw: judged statistically
                    judged_random = True
                if msg:
                    return "failed", f"{os.path.basename(s)} output {v.name}: {msg}", random
    return "passed", "", judged_random


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default="build/dev/tools", help="folder of vm-compile and vm-run")
    parser.add_argument("--data", default="/usr/share/libonnx-testdata/data/node")
    parser.add_argument("--filter", default="", help="only cases whose name contains TEXT")
    parser.add_argument("--list-failures", action="store_true")
    args = parser.parse_args()
    cases = sorted(d for d in glob.glob(os.path.join(args.data, "test_*")) if os.path.isdir(d))
    cases = [c for c in cases if args.filter in os.path.basename(c)]
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    random_passed = []
    for case in cases:
        name = os.path.basename(case)
        with tempfile.TemporaryDirectory(prefix="dynvm-cli-") as work:
            try:
                outcome, msg, random = run_case(case, args.bin, work)
            except subprocess.TimeoutExpired:
                outcome, msg, random = "failed", "timed out", False
            except Exception as e:  # a case the harness cannot read is a failure, not a crash
                outcome, msg, random = "failed", f"harness: {type(e).__name__}: {e}", False
        counts[outcome] += 1
        if outcome == "passed" and random:
            random_passed.append(name)
        if outcome != "passed" and args.list_failures:
            print(f"{outcome.upper()} node/{name}: {msg}")
    if random_passed:
        print(f"of those passed, {len(random_passed)} random case(s) judged by dtype, shape and a "
              "statistical check (not values):")
        for name in random_passed:
            print(f"  RANDOM node/{name}")
    print(f"node: {counts['passed']} passed / {counts['failed']} failed / "
          f"{counts['skipped']} skipped of {len(cases)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
