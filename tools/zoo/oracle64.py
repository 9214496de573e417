#!/usr/bin/env python3
"""A float64 evaluation of a zoo model's graph (PyTorch), to judge both engines against the truth
when dynvm and ONNX Runtime differ beyond F32_TOL (docs/zoo.md: how M-LSD's tolerance was set).

    PYTHONPATH=build/release/python /usr/bin/python3 tools/zoo/oracle64.py MODEL [--case 0]

MODEL is a zoo model's name (manifest.py; fetched into the cache first). The model's case is
made as zoo.py makes it (same seed), run by ONNX Runtime (onnxruntime-node), by dynvm and by
this evaluator in float64, and for each output it prints the largest |error| of each engine
against float64, its mean, and how many elements each puts past the model's tolerance. The
evaluator covers the operators of the tf2onnx CNNs it was written for (Conv, Clip, Relu,
Sigmoid, Add/Sub/Mul, Concat, Split, Slice, Pad, MaxPool, Resize linear half_pixel, Reshape,
Transpose, Shape, ConstantOfShape, Equal, Cast) and says which operator it lacks otherwise.
"""
import argparse
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fetch  # noqa: E402
import manifest  # noqa: E402
import zoo  # noqa: E402  (puts tests/differential, with workers.py, on the path)
import workers  # noqa: E402


def torch_pads(pads):
    """ONNX pads [b1, b2, ..., e1, e2, ...] as F.pad's (last axis first, begin then end)."""
    k = len(pads) // 2
    out = []
    for d in reversed(range(k)):
        out += [pads[d], pads[d + k]]
    return out


def _slice(x, starts, ends, axes, steps):
    idx = [slice(None)] * x.dim()
    for s, e, a, t in zip(starts, ends, axes, steps):
        d = x.shape[a]
        s = max(0, min(d, s + d if s < 0 else s))
        e = max(0, min(d, e + d if e < 0 else e))
        idx[a] = slice(s, e, t)
    return x[tuple(idx)]


def run_node(n, x):
    """The outputs of node `n` on inputs `x` (float64 tensors, int64 for shapes)."""
    a = {at.name: helper.get_attribute_value(at) for at in n.attribute}
    op = n.op_type
    if op == "Conv":
        y = F.pad(x[0], torch_pads(a.get("pads", [0] * 4)))
        return [F.conv2d(y, x[1], x[2] if len(x) > 2 else None, stride=a.get("strides", [1, 1]),
                         dilation=a.get("dilations", [1, 1]), groups=a.get("group", 1))]
    if op in ("Relu", "Sigmoid"):
        return [torch.relu(x[0]) if op == "Relu" else torch.sigmoid(x[0])]
    if op == "Clip":
        lo = x[1] if len(x) > 1 and x[1] is not None else a.get("min", -np.inf)
        hi = x[2] if len(x) > 2 and x[2] is not None else a.get("max", np.inf)
        return [torch.clamp(x[0], float(lo), float(hi))]
    if op in ("Add", "Sub", "Mul"):
        return [{"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul}[op](x[0], x[1])]
    if op == "Equal":
        return [x[0] == x[1]]
    if op == "Cast":
        return [x[0].to(torch.float64 if a["to"] == onnx.TensorProto.FLOAT else torch.int64)]
    if op == "Transpose":
        return [x[0].permute(*a["perm"])]
    if op == "Reshape":
        shape = [x[0].shape[i] if v == 0 else v for i, v in enumerate(x[1].tolist())]
        return [x[0].reshape(shape)]
    if op == "Concat":
        return [torch.cat(x, dim=a["axis"])]
    if op == "Split":
        return list(torch.split(x[0], a["split"], dim=a.get("axis", 0)))
    if op == "Shape":
        return [torch.tensor(list(x[0].shape), dtype=torch.int64)]
    if op == "ConstantOfShape":
        v = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
        dtype = torch.float64 if v.dtype.kind == "f" else torch.int64
        return [torch.full([int(s) for s in x[0]], float(v.flat[0]), dtype=dtype)]
    if op == "Slice":
        k = len(x[1])
        axes = x[3].tolist() if len(x) > 3 else list(range(k))
        steps = x[4].tolist() if len(x) > 4 else [1] * k
        return [_slice(x[0], x[1].tolist(), x[2].tolist(), axes, steps)]
    if op == "Pad" and a.get("mode", b"constant") == b"constant":
        value = float(x[2]) if len(x) > 2 and x[2] is not None else 0.0
        return [F.pad(x[0], torch_pads(x[1].tolist()), value=value)]
    if op == "MaxPool":
        y = F.pad(x[0], torch_pads(a.get("pads", [0] * 4)), value=-np.inf)
        return [F.max_pool2d(y, a["kernel_shape"], a.get("strides", a["kernel_shape"]))]
    if (op == "Resize" and a.get("mode") == b"linear" and
            a.get("coordinate_transformation_mode") == b"half_pixel" and len(x) > 3):
        size = [int(s) for s in x[3].tolist()[2:]]
        return [F.interpolate(x[0], size=size, mode="bilinear", align_corners=False)]
    raise NotImplementedError(f"oracle64 has no {op} (node {n.name}) with attributes {a}")


def evaluate(model, feeds):
    """{output name: float64 array} of `model` (an onnx.ModelProto) on `feeds`."""
    env = {}
    for init in model.graph.initializer:
        v = numpy_helper.to_array(init)
        env[init.name] = torch.from_numpy(v.astype(np.float64) if v.dtype.kind == "f" else v.copy())
    for name, v in feeds.items():
        env[name] = torch.from_numpy(v.astype(np.float64) if v.dtype.kind == "f" else v.copy())
    for n in model.graph.node:
        for out, v in zip(n.output, run_node(n, [env[i] if i else None for i in n.input])):
            env[out] = v
    return {o.name: env[o.name].numpy() for o in model.graph.output}


def report(name, truth, engines, tol):
    """One line per output and engine: its error against float64."""
    atol, rtol = tol[:2]
    for out, t in truth.items():
        t = t.astype(np.float64)
        scale = float(np.abs(t).max()) if len(tol) > 2 and tol[2] == "range" else 1.0
        print(f"{name} {out}: max |float64| {np.abs(t).max():.4g}")
        for engine, got in engines.items():
            err = np.abs(np.asarray(got[out], np.float64) - t)
            past = int((err > atol * scale + rtol * np.abs(t)).sum())
            print(f"  {engine:<6} max |error| {err.max():.3e}, mean {err.mean():.2e}, "
                  f"{past} of {err.size} past tolerance {tol}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a zoo model's name (manifest.py)")
    ap.add_argument("--case", type=int, default=0)
    ap.add_argument("--cache", default=fetch.cache_dir())
    args = ap.parse_args()
    import dynvm
    m = manifest.model(args.model)
    path = fetch.fetch_all(args.cache, log=lambda s: print(s, file=sys.stderr))[m["name"]]
    model = onnx.load(path)
    exe = dynvm.compile(path)
    names = [i.name for i in exe.inputs]
    feeds = zoo.make_feeds(m["cases"][args.case], names,
                           np.random.default_rng(zoo.seed_of(m["name"], args.case)))
    ort = zoo.Ort(workers.find_ort(""))
    try:
        engines = {"ort": ort.run(ort.open(path, 1, False), feeds),
                   "dynvm": dynvm.VirtualMachine(exe, threads=1).run(dict(feeds))}
    finally:
        ort.close()
    report(f"{m['name']} case {args.case} ({zoo.describe_case(m['cases'][args.case])})",
           evaluate(model, feeds), engines, m["tol"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
