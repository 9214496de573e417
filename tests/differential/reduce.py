"""Reduces a mismatching model to a small one that still mismatches the same way, and saves
it as a regression case.

Delta debugging over the top-level nodes first (ddmin): a candidate keeps a subset of the
nodes; the values it reads that a dropped node made become graph inputs fed with the values
the original model computed there (from ONNX Runtime, or dynvm's unoptimized program where ONNX
Runtime has no answer), and every value a kept node makes that no kept node reads becomes an
output. A candidate is kept when its verdict has the original's kind (and, for errors, the
same message once names and numbers are blotted out). Then over shapes: each input's dims are
cut to 1, then to half, while the mismatch stays.

A saved case is a folder: model.onnx, input_<name>.npy, expected_<name>.npy (ONNX Runtime's
answer, or the spec's when a known difference says ORT is wrong), case.json (the verdict, the
seed, graph and opset it came from, each output's tolerance) and model.txt (graph.describe).
tests/differential/replay.py replays every case in tests/differential/regressions/.
"""
import copy
import json
import os
import re
import time

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

import compare
import graph as graphmod
import workers

MAX_CHECKS = 400
MAX_SECONDS = 180.0


def signature(verdict):
    """What must stay the same for a candidate to count as the same mismatch: the kind, the
    error's text once names and numbers are blotted out, and for values whether a shape, a
    dtype or elements differ."""
    text = verdict.detail if verdict.kind in ("dynvm-error", "ort-error", "crash", "hang",
                                              "config") else ""
    if verdict.kind == "value":
        text = re.sub(r"^output '[^']*': ", "", verdict.detail).split(" ")[0]
    text = re.sub(r"/tmp/\S+", "", text)
    text = re.sub(r"'[^']*'", "''", text)
    text = re.sub(r"[%\w]*\d+", "N", text)
    return verdict.kind, text[:60]


def free_names(node):
    """Names a node reads from its scope, its subgraphs' outer reads included."""
    names = [i for i in node.input if i]
    for a in node.attribute:
        gs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
        for g in gs:
            defined = {v.name for v in g.input} | {t.name for t in g.initializer}
            for n in g.node:
                for i in free_names(n):
                    if i not in defined:
                        names.append(i)
                defined.update(o for o in n.output if o)
            names += [o.name for o in g.output if o.name not in defined]
    return names


def value_types(model):
    """name -> TypeProto for every value ONNX's shape inference can type."""
    types = {}
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - inference is a help, not a requirement
        inferred = model
    for v in list(inferred.graph.value_info) + list(inferred.graph.input) + \
            list(inferred.graph.output):
        types[v.name] = v.type
    return types


class Reducer:
    def __init__(self, engines, model, inputs, infos, verdict, use_ort, log):
        self.engines = engines
        self.model = model
        self.inputs = dict(inputs)
        self.infos = infos
        self.want = signature(verdict)
        self.use_ort = use_ort
        self.log = log
        self.checks = 0
        self.t0 = time.monotonic()
        self.nodes = list(model.graph.node)
        self.inits = {t.name: t for t in model.graph.initializer}
        self.orig_inputs = {v.name: v for v in model.graph.input}
        self.orig_outputs = [o.name for o in model.graph.output]
        self.values = self._intermediates()

    def _intermediates(self):
        """Every top-level value the model computes, from ONNX Runtime or dynvm."""
        types = value_types(self.model)
        m = copy.deepcopy(self.model)
        have = {o.name for o in m.graph.output}
        for n in self.nodes:
            for o in n.output:
                if o and o not in have and o in types and types[o].HasField("tensor_type"):
                    m.graph.output.append(helper.make_value_info(o, types[o]))
                    have.add(o)
        data = m.SerializeToString()
        if self.use_ort and self.engines.ort is not None:
            try:
                return self.engines.ort.run(data, self.inputs, 60.0)
            except (workers.OrtError, workers.WorkerFailure):
                pass
        path = os.path.join(self.engines.tmp, "intermediates.onnx")
        with open(path, "wb") as f:
            f.write(data)
        try:
            r = self.engines.dynvm.run(path, self.inputs, [(0, 1)], 30.0)
            if r[0][0] == "ok":
                return r[0][1]
        except workers.WorkerFailure:
            pass
        return {}

    def build(self, keep, shapes=None):
        """The model of the kept nodes, and its inputs; None when a value is missing."""
        kept = [self.nodes[i] for i in sorted(keep)]
        made = set()
        for n in kept:
            made.update(o for o in n.output if o)
        g = helper.make_graph([], self.model.graph.name, [], [])
        inputs, seen = {}, set()
        for n in kept:
            for name in free_names(n):
                if name in made or name in seen:
                    continue
                seen.add(name)
                if name in self.inits:
                    g.initializer.append(self.inits[name])
                elif name in self.orig_inputs or name in self.values:
                    arr = self.inputs[name] if name in self.orig_inputs else self.values[name]
                    if shapes and name in shapes:
                        arr = shapes[name]
                    inputs[name] = arr
                    g.input.append(self._declare(name, arr))
                else:
                    return None, None
            g.node.append(n)
        read = set()
        for n in kept:
            read.update(free_names(n))
        for n in kept:
            for o in n.output:
                if o and (o not in read or o in self.orig_outputs) and n.op_type != "Constant":
                    t = self.values.get(o)
                    if t is None and o not in self.orig_outputs:
                        continue
                    elem = graphmod.ONNX_DTYPE[t.dtype] if t is not None else \
                        self._out_type(o)
                    if elem is None:
                        continue
                    g.output.append(helper.make_tensor_value_info(o, elem, None))
        if not g.output:
            return None, None
        m = helper.make_model(g, opset_imports=self.model.opset_import,
                              producer_name="dynvm-difftest-reduced")
        m.ir_version = self.model.ir_version
        return m, inputs

    def _declare(self, name, arr):
        """An input's declaration: the original one (symbolic and unknown dims kept, fixed
        dims updated to the data's), or the data's shape for a value fed from a cut."""
        elem = graphmod.ONNX_DTYPE[arr.dtype]
        orig = self.orig_inputs.get(name)
        if orig is None or not orig.type.tensor_type.HasField("shape"):
            return helper.make_tensor_value_info(name, elem, list(arr.shape) if orig is None
                                                 else None)
        dims = []
        for d, size in zip(orig.type.tensor_type.shape.dim, arr.shape):
            dims.append(d.dim_param if d.HasField("dim_param") else
                        (int(size) if d.HasField("dim_value") else None))
        return helper.make_tensor_value_info(name, elem, dims)

    def _out_type(self, name):
        for o in self.model.graph.output:
            if o.name == name:
                return o.type.tensor_type.elem_type
        return None

    def interesting(self, model, inputs):
        if model is None or self.exhausted():
            return False
        self.checks += 1
        infos = {o.name: self.infos.get(o.name, compare.OutInfo(depth=8))
                 for o in model.graph.output}
        v = self.engines.check(model, inputs, infos, self.use_ort)
        return signature(v) == self.want

    def exhausted(self):
        return self.checks >= MAX_CHECKS or time.monotonic() - self.t0 > MAX_SECONDS

    def ddmin(self):
        keep = list(range(len(self.nodes)))
        n = 2
        while len(keep) >= 2 and not self.exhausted():
            chunk = max(len(keep) // n, 1)
            parts = [keep[i:i + chunk] for i in range(0, len(keep), chunk)]
            reduced = False
            for p in parts:  # try each complement
                cand = [k for k in keep if k not in p]
                if cand and self.interesting(*self.build(cand)):
                    keep, n, reduced = cand, max(n - 1, 2), True
                    break
            if not reduced:
                if n >= len(keep):
                    break
                n = min(n * 2, len(keep))
        # One more pass: drop single nodes.
        for k in list(keep):
            cand = [x for x in keep if x != k]
            if cand and self.interesting(*self.build(cand)):
                keep = cand
        return keep

    def shrink(self, keep):
        model, inputs = self.build(keep)
        shapes = {}
        for name in sorted(inputs):
            arr = inputs[name]
            for axis in range(arr.ndim):
                for size in (1, arr.shape[axis] // 2):
                    if size < 1 or size >= arr.shape[axis]:
                        continue
                    cand = dict(shapes)
                    cand[name] = np.take(arr, np.arange(size), axis=axis)
                    if self.interesting(*self.build(keep, cand)):
                        shapes = cand
                        arr = cand[name]
                        break
        return self.build(keep, shapes)


def _subgraphs(g):
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield a.g
                yield from _subgraphs(a.g)


def _drop_dead(g):
    """Removes nodes of subgraph g (recursively) whose outputs nothing reads."""
    changed = True
    while changed:
        changed = False
        read = {o.name for o in g.output}
        for n in g.node:
            read.update(free_names(n))
        for i in range(len(g.node) - 1, -1, -1):
            n = g.node[i]
            if not any(o in read for o in n.output if o):
                del g.node[i]
                changed = True
                break


def simplify_bodies(r, model, inputs):
    """Inside If/Loop/Scan bodies, replaces nodes by an Identity of one of their inputs (and
    drops what that leaves unread) while the mismatch stays."""
    progress = True
    while progress and not r.exhausted():
        progress = False
        for g in list(_subgraphs(model.graph)):
            for i in range(len(g.node)):
                n = g.node[i]
                if n.op_type in ("Identity", "Constant") or len(n.output) != 1:
                    continue
                for src in [x for x in n.input if x]:
                    cand = copy.deepcopy(model)
                    cg = next(x for j, x in enumerate(_subgraphs(cand.graph))
                              if j == list(_subgraphs(model.graph)).index(g))
                    cn = cg.node[i]
                    repl = helper.make_node("Identity", [src], list(cn.output))
                    cg.node[i].CopyFrom(repl)
                    _drop_dead(cg)
                    if r.interesting(cand, inputs):
                        model, progress = cand, True
                        break
                if progress:
                    break
            if progress:
                break
    return model


def reduce_and_save(engines, gg, opset, verdict, out_dir, use_ort, log):
    """Reduces graph `gg` at `opset` and saves the case under out_dir; returns its path."""
    model = graphmod.to_model(gg.graph, opset)
    infos = {name: compare.OutInfo.of(v) for name, v in gg.values.items()}
    for info in infos.values():
        info.shape = None  # shapes change as the reducer cuts inputs
    r = Reducer(engines, model, gg.inputs, infos, verdict, use_ort, log)
    keep = r.ddmin()
    small, inputs = r.shrink(keep)
    if small is None:
        small, inputs = model, gg.inputs
    small = simplify_bodies(r, small, inputs)
    final = engines.check(small, inputs, infos, use_ort)
    name = f"s{gg.seed}-g{gg.index}-o{opset}-{verdict.kind}"
    return save_case(os.path.join(out_dir, name), small, inputs, final,
                     {"seed": gg.seed, "graph": gg.index, "opset": opset,
                      "original": str(verdict), "checks": r.checks,
                      "nodes": [len(model.graph.node), len(small.graph.node)]}, infos)


def save_case(path, model, inputs, verdict, meta, infos):
    os.makedirs(path, exist_ok=True)
    onnx.save(model, os.path.join(path, "model.onnx"))
    for name, arr in inputs.items():
        np.save(os.path.join(path, f"input_{name}.npy"), arr)
    expected_from = None
    if verdict.ort_outputs is not None:
        expected_from = "onnxruntime"
        for name, arr in verdict.ort_outputs.items():
            np.save(os.path.join(path, f"expected_{name}.npy"), arr)
    case = dict(meta)
    case.update({"verdict": verdict.kind, "detail": verdict.detail,
                 "expected_from": expected_from, "status": "open",
                 "tolerance": {o.name: infos.get(o.name, compare.OutInfo(depth=8)).to_json()
                               for o in model.graph.output}})
    with open(os.path.join(path, "case.json"), "w") as f:
        json.dump(case, f, indent=1, sort_keys=True)
    with open(os.path.join(path, "model.txt"), "w") as f:
        f.write(graphmod.describe(model) + "\n")
    return path
