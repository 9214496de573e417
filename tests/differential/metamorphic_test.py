"""Metamorphic tests on the project's models (ctest: metamorphic_test, label differential).

Each model runs on its checked-in inputs and must keep its answer under transformations that
do not change the function it computes:

  batch      a batch of B = 3 rows equals 3 runs of one row (models with a batch dim, along
             it; not the sampling decoders, whose draws depend on a row's index by design);
  threads    2 intra-op threads equal 1;
  loop, if   the whole graph wrapped as the body of a Loop of one iteration (its outputs
             scan outputs, squeezed after), or as both branches of an If whose condition is
             an input (true at run time), equals the model;
  optimize   --no-optimize equals optimized;
  weights    the constants apart in a .dvw file (vm-compile --weights-out) equal them inside.

Tolerances. Integers (tokens, indices, beams) must be equal. Weights apart must be bit for bit
equal: the same program and kernels read the same bytes from another file. Floats elsewhere:
|a - b| <= 2^-16 (d + 1) (|b| + max |b|) (compare.py) with d = 32 for these models (the
deepest is a 2-layer decoder run for up to 16 steps: a few dozen products and softmaxes on a
path); the changes of summation order (a batch or a thread split changes a GEMM's blocking,
--no-optimize runs unfused ops) move results by a few ulps of the largest element per step.

Models: tools/models/*/ (the exported decoders and decoding searches, case0), tools/lm's
char LM (greedy), and, when torch is installed, a small CNN and a small transformer encoder
exported at test time (batch dim dynamic). Skipped (exit 77) without python3-onnx or the dynvm
package.

    PYTHONPATH=build/release/python /usr/bin/python3 tests/differential/metamorphic_test.py
"""
import argparse
import copy
import glob
import os
import sys
import tempfile

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import compare  # noqa: E402

DEPTH = 32
BATCH = 3
# Models whose rows are not independent by design: dynvm::Sample draws from a Philox stream
# indexed by the element, so a row in a batch draws other numbers than alone (docs/sampling.md).
SAMPLED = {"topk_sample14": "dynvm::Sample's draws depend on the row's index in the batch",
           "topk_sample17": "dynvm::Sample's draws depend on the row's index in the batch"}


def load_inputs(folder, prefix="input_"):
    return {os.path.basename(p)[len(prefix):-4]: np.load(p)
            for p in sorted(glob.glob(os.path.join(folder, prefix + "*.npy")))}


def models():
    """(name, model path, inputs, batched input names)."""
    out = []
    for d in sorted(glob.glob(os.path.join(REPO, "tools", "models", "*"))):
        path = os.path.join(d, "model.onnx")
        case = os.path.join(d, "case0")
        if os.path.isfile(path) and os.path.isdir(case):
            out.append((os.path.basename(d), path, load_inputs(case)))
    lm = os.path.join(REPO, "tools", "lm")
    inputs = {k[len("greedy_b1_"):]: np.load(os.path.join(lm, "testdata", k + ".npy"))
              for k in ("greedy_b1_prompt", "greedy_b1_max_new_tokens",
                        "greedy_b1_temperature", "greedy_b1_seed", "greedy_b1_stop_token")}
    out.append(("charlm", os.path.join(lm, "charlm.onnx"), inputs))
    return out


def batch_inputs(model):
    """{input name: the axis of its symbolic dim "batch"}."""
    axes = {}
    for v in model.graph.input:
        for i, d in enumerate(v.type.tensor_type.shape.dim):
            if d.dim_param == "batch":
                axes[v.name] = i
    return axes


def compile_run(dynvm, path, inputs, optimize=True, threads=1, weights=None, tmp=None):
    if weights:
        exe = dynvm.compile(path, optimize=optimize, weights=os.path.basename(weights))
        dvm = os.path.join(tmp, "model.dvm")
        exe.save(dvm)
        exe = dynvm.load(dvm)
    else:
        exe = dynvm.compile(path, optimize=optimize)
    vm = dynvm.VirtualMachine(exe, threads=threads)
    return {k: np.array(v) for k, v in vm.run(dict(inputs)).items()}


def same(got, want, exact=False):
    """None or the first difference: ints and (with exact) floats bit for bit."""
    if sorted(got) != sorted(want):
        return f"outputs {sorted(got)} != {sorted(want)}"
    for k in sorted(want):
        g, w = got[k], want[k]
        if exact:
            if g.dtype != w.dtype or g.shape != w.shape or g.tobytes() != w.tobytes():
                return f"'{k}' differs in its bits"
            continue
        d = compare.diff(g, w, compare.OutInfo(depth=DEPTH))
        if d:
            return f"'{k}': {d}"
    return None


def _rename_all(graph, keep, suffix):
    """Renames every value of graph (subgraphs included) not in keep, with suffix."""
    def r(name):
        return name if (not name or name in keep) else name + suffix

    def walk(g):
        for v in list(g.input) + list(g.output) + list(g.value_info):
            v.name = r(v.name)
        for n in g.node:
            n.input[:] = [r(x) for x in n.input]
            n.output[:] = [r(x) for x in n.output]
            if n.name:
                n.name += suffix
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
    walk(graph)


def wrap(model, kind, ranks):
    """The model's graph as the body of a one-iteration Loop or both branches of an If."""
    m = copy.deepcopy(model)
    g = m.graph
    keep = {v.name for v in g.input} | {t.name for t in g.initializer}
    outs = [o for o in g.output]
    opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))

    def body(suffix):
        b = helper.make_graph(copy.deepcopy(list(g.node)), "body" + suffix, [], [])
        for o in outs:
            elem = o.type.tensor_type.elem_type
            b.output.append(helper.make_tensor_value_info(o.name, elem, [None] * ranks[o.name]))
        _rename_all(b, keep, suffix)
        return b

    new_nodes = []
    if kind == "if":
        # The condition is an input (true at run time): a constant would be decided at
        # compile time and the If inlined.
        g.input.append(helper.make_tensor_value_info("wrap_cond", TensorProto.BOOL, []))
        new_nodes.append(helper.make_node("If", ["wrap_cond"], [o.name for o in outs],
                                          then_branch=body("_t"), else_branch=body("_e")))
    else:
        b = body("_l")
        b.input.extend([helper.make_tensor_value_info("wrap_i", TensorProto.INT64, []),
                        helper.make_tensor_value_info("wrap_c", TensorProto.BOOL, [])])
        b.node.append(helper.make_node("Identity", ["wrap_c"], ["wrap_c_out"]))
        b.output.insert(0, helper.make_tensor_value_info("wrap_c_out", TensorProto.BOOL, []))
        new_nodes.append(helper.make_node("Constant", [], ["wrap_m"],
                                          value=numpy_helper.from_array(np.array(1, np.int64))))
        scanned = [o.name + "_scanned" for o in outs]
        new_nodes.append(helper.make_node("Loop", ["wrap_m", ""], scanned, body=b))
        for o, s in zip(outs, scanned):
            if opset >= 13:
                new_nodes.append(helper.make_node(
                    "Constant", [], [s + "_axes"],
                    value=numpy_helper.from_array(np.array([0], np.int64))))
                new_nodes.append(helper.make_node("Squeeze", [s, s + "_axes"], [o.name]))
            else:
                new_nodes.append(helper.make_node("Squeeze", [s], [o.name], axes=[0]))
    del g.node[:]
    g.node.extend(new_nodes)
    del g.value_info[:]
    return m


def check_model(dynvm, name, path, inputs, tmp, log):
    failures = []
    model = onnx.load(path)
    base = compile_run(dynvm, path, inputs)
    ranks = {k: v.ndim for k, v in base.items()}

    def expect(what, got, exact=False):
        d = same(got, base, exact)
        log(f"  {name:16s} {what:10s} {'ok' if d is None else 'FAIL: ' + d}")
        if d:
            failures.append(f"{name} {what}: {d}")

    expect("threads", compile_run(dynvm, path, inputs, threads=2))
    expect("optimize", compile_run(dynvm, path, inputs, optimize=False))
    expect("weights", compile_run(dynvm, path, inputs, weights=os.path.join(tmp, "model.dvw"),
                                  tmp=tmp), exact=True)
    for kind in ("loop", "if"):
        wpath = os.path.join(tmp, f"{kind}.onnx")
        onnx.save(wrap(model, kind, ranks), wpath)
        feeds = dict(inputs, wrap_cond=np.array(True)) if kind == "if" else inputs
        try:
            got = compile_run(dynvm, wpath, feeds)
        except Exception as e:  # noqa: BLE001 - a refusal is a failure of the relation
            got = {"error": np.array(str(e))}
        expect(kind, got)
    batched = batch_inputs(model)
    if name in SAMPLED:
        log(f"  {name:16s} {'batch':10s} not a relation: {SAMPLED[name]}")
    elif batched and all(inputs[k].shape[a] == 1 for k, a in batched.items()):
        rows = []
        for r in range(BATCH):
            # Row r: the case's row with its values rolled along another axis (other valid
            # tokens, uniforms or features; row 0 is the case itself).
            row = {}
            for k, v in inputs.items():
                other = [i for i in range(v.ndim) if i != batched.get(k)]
                row[k] = np.roll(v, r, axis=other[0]) if k in batched and other else v
            rows.append(row)
        big = {k: (np.concatenate([row[k] for row in rows], batched[k]) if k in batched else v)
               for k, v in inputs.items()}
        whole = compile_run(dynvm, path, big)
        problems = []
        for r, row in enumerate(rows):
            one = compile_run(dynvm, path, row)
            for k, v in one.items():
                w = whole[k]
                ax = next((i for i in range(min(w.ndim, v.ndim))
                           if w.shape[i] == BATCH and v.shape[i] == 1), None)
                part = np.take(w, [r], axis=ax) if ax is not None else w
                d = same({k: part}, {k: v})
                if d:
                    problems.append(f"row {r}: {d}")
        log(f"  {name:16s} {'batch':10s} {'ok' if not problems else 'FAIL: ' + problems[0]}")
        failures += [f"{name} batch: {p}" for p in problems[:1]]
    return failures


def exported_models(tmp):
    """A small CNN and a small transformer encoder exported with torch (if installed)."""
    try:
        import torch
        import torch.nn as nn
    except ImportError:
        return []
    torch.manual_seed(0)
    out = []
    cnn = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, stride=2), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5)).eval()
    x = torch.randn(1, 3, 16, 16)
    path = os.path.join(tmp, "cnn.onnx")
    torch.onnx.export(cnn, (x,), path, input_names=["images"], output_names=["logits"],
                      dynamic_axes={"images": {0: "batch"}}, opset_version=13)
    out.append(("cnn", path, {"images": x.numpy()}))
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0), 2).eval()
    s = torch.randn(6, 1, 32)
    path = os.path.join(tmp, "encoder.onnx")
    torch.onnx.export(enc, (s,), path, input_names=["seq"], output_names=["hidden"],
                      dynamic_axes={"seq": {1: "batch"}}, opset_version=14)
    out.append(("encoder", path, {"seq": s.numpy()}))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated model names")
    args = ap.parse_args(argv)
    try:
        import dynvm
    except ImportError as e:
        print(f"SKIPPED: the dynvm package: {e} (PYTHONPATH=build/release/python)")
        return 77
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        all_models = models() + exported_models(tmp)
        for name, path, inputs in all_models:
            if args.only and name not in args.only.split(","):
                continue
            sub = os.path.join(tmp, name)
            os.makedirs(sub, exist_ok=True)
            failures += check_model(dynvm, name, path, inputs, sub, print)
    print(f"{len(all_models)} models; {len(failures)} relation(s) broken")
    for f in failures:
        print("FAILED", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
