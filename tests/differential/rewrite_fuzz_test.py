"""Every pattern rewrite (compiler/rewrite/rules.cc, docs/compiler.md "Pattern rewrites")
fuzzed with generated matches and near misses (ctest: rewrite_fuzz_test, label differential).

For each rule, seeded random instances of the pattern it fuses (random shapes, constants,
operand orders and opsets) and of near misses (another axis, a second consumer of an
intermediate, a different constant, a non-constant operand ...) are compiled with
`vm-compile --report`; the report must show the rule fired on every match and never on a near
miss. Each instance then runs optimized, with `--disable-rewrite RULE` and with
`--no-optimize`, and (when onnxruntime-node is installed) in ONNX Runtime: all must agree
within compare.py's tolerance at depth 8 (a fused kernel sums in another order than the ops it
replaces: LayerNorm's mean and variance in one pass, attention's softmax in blocks), integers
(the quantized rules) within one quantization step (docs/compiler.md: the fused products are
requantized from an exact integer sum).

The rules are read from the report of vm-compile itself: a rule without a generator here
fails the test, so a new rule cannot go unfuzzed.

    /usr/bin/python3 tests/differential/rewrite_fuzz_test.py --vm-compile PATH
        [--python-path build/release/python] [--seed S] [--instances N]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import compare  # noqa: E402
import workers  # noqa: E402

F = T.FLOAT
TOL = compare.OutInfo(depth=8, quant=1)


class Case:
    """One model: a match (the rule must fire) or a near miss (it must not)."""

    def __init__(self, nodes, inputs, outputs, opset, feeds, match, note, inits=()):
        self.nodes = nodes
        self.inputs = inputs
        self.outputs = outputs
        self.opset = opset
        self.feeds = feeds
        self.match = match
        self.note = note
        self.inits = list(inits)

    def model(self):
        g = h.make_graph(self.nodes, "rewrite", self.inputs, self.outputs,
                         initializer=self.inits)
        m = h.make_model(g, opset_imports=[h.make_opsetid("", self.opset),
                                           h.make_opsetid("com.microsoft", 1)])
        m.ir_version = 8 if self.opset < 21 else 10
        return m


def c(name, arr):
    return h.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr)))


def vi(name, dims, t=F):
    return h.make_tensor_value_info(name, t, dims)


def rnd(rng, *shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


# -- generators: fn(rng, match) -> Case --------------------------------------------------------

def pow_const(rng, match):
    shape = tuple(int(d) for d in rng.integers(1, 5, rng.integers(1, 4)))
    e = float(rng.choice([1, 2, 3, -1]))
    x = rnd(rng, *shape, lo=0.25, hi=2.0)
    note = f"Pow(x{list(shape)}, {e})"
    nodes = [c("e", np.array(e, np.float32)), h.make_node("Pow", ["x", "e"], ["y"])]
    if not match:
        kind = rng.choice(["exponent", "rank"])
        if kind == "exponent":
            nodes[0] = c("e", np.array(rng.choice([4.0, 2.5, -2.0, 0.5, -0.5]), np.float32))
            note = "another exponent"
        else:
            nodes[0] = c("e", np.full((1,) * (len(shape) + 1), e, np.float32))
            note = "an exponent of higher rank"
    return Case(nodes, [vi("x", list(shape))], [vi("y", None)], int(rng.choice([13, 15, 17])),
                {"x": x}, match, note)


def _norm_axes(rng, rank):
    k = int(rng.integers(1, rank + 1))
    return list(range(rank - k, rank))


def layer_norm(rng, match):
    shape = [int(d) for d in rng.integers(1, 5, rng.integers(2, 4))]
    axes = _norm_axes(rng, len(shape))
    sq = rng.choice(["Mul", "Pow"])
    nodes = [h.make_node("ReduceMean", ["x"], ["m"], axes=axes, keepdims=1),
             h.make_node("Sub", ["x", "m"], ["d"])]
    if sq == "Mul":
        nodes.append(h.make_node("Mul", ["d", "d"], ["dd"]))
    else:
        nodes += [c("two", np.array(2.0, np.float32)), h.make_node("Pow", ["d", "two"], ["dd"])]
    nodes += [h.make_node("ReduceMean", ["dd"], ["v"], axes=axes, keepdims=1),
              c("eps", np.array(rng.choice([1e-5, 1e-6, 1e-3]), np.float32)),
              h.make_node("Add", ["v", "eps"] if rng.random() < 0.5 else ["eps", "v"], ["ve"]),
              h.make_node("Sqrt", ["ve"], ["s"]), h.make_node("Div", ["d", "s"], ["y"])]
    outs = [vi("y", None)]
    note = f"LayerNorm of {shape} over {axes} ({sq})"
    if not match:
        kind = rng.choice(["axes", "second", "eps"] if len(shape) > 1 else ["second", "eps"])
        if kind == "axes":
            nodes[0] = h.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=1)
            note = "the mean over another axis"
        elif kind == "second":
            outs.append(vi("d", None))
            note = "the centered value read elsewhere"
        else:
            nodes = [n for n in nodes if n.output[0] != "eps"]
            return Case(nodes, [vi("x", shape), vi("eps", [])], outs, 13,
                        {"x": rnd(rng, *shape), "eps": np.array(1e-5, np.float32)}, match,
                        "eps not a constant")
    return Case(nodes, [vi("x", shape)], outs, int(rng.choice([11, 13, 17])),
                {"x": rnd(rng, *shape)}, match, note)


def _layer_norm_node(rng, shape, with_bias):
    axis = -1
    n = shape[-1]
    nodes = [c("s", rnd(rng, n)), h.make_node("LayerNormalization",
                                              ["x", "s"] + (["b"] if with_bias else []),
                                              ["ln"], axis=axis)]
    if with_bias:
        nodes.insert(0, c("b", rnd(rng, n)))
    return nodes


def layer_norm_scale(rng, match, op="Mul"):
    shape = [int(d) for d in rng.integers(2, 5, rng.integers(2, 4))]
    nodes = _layer_norm_node(rng, shape, rng.random() < 0.5)
    gshape = [shape[-1]] if match else [shape[0]] + [1] * (len(shape) - 1)
    nodes += [c("g", rnd(rng, *gshape)),
              h.make_node(op, ["ln", "g"] if rng.random() < 0.5 else ["g", "ln"], ["y"])]
    return Case(nodes, [vi("x", shape)], [vi("y", None)], 17, {"x": rnd(rng, *shape)}, match,
                f"{op}(LayerNorm, g{gshape})" + ("" if match else ": g varies along axis 0"))


def layer_norm_bias(rng, match):
    return layer_norm_scale(rng, match, "Add")


def rms_norm(rng, match, scale=False):
    shape = [int(d) for d in rng.integers(2 if scale else 1, 5, rng.integers(2, 4))]
    axes = _norm_axes(rng, len(shape))
    nodes = [h.make_node("Mul", ["x", "x"], ["xx"]),
             h.make_node("ReduceMean", ["xx"], ["ms"], axes=axes, keepdims=1),
             c("eps", np.array(1e-6, np.float32)), h.make_node("Add", ["ms", "eps"], ["me"]),
             h.make_node("Sqrt", ["me"], ["den"])]
    form = rng.choice(["div", "recip"])
    if form == "div":
        nodes.append(h.make_node("Div", ["x", "den"], ["n"]))
    else:
        nodes += [h.make_node("Reciprocal", ["den"], ["r"]), h.make_node("Mul", ["x", "r"], ["n"])]
    outs = [vi("y", None)]
    note = f"RMSNorm of {shape} over {axes} ({form})"
    if scale:
        # A match: g of exactly the normalized sizes; a miss: g varying along axis 0.
        gshape = shape[axes[0]:] if match else [shape[0]] + [1] * (len(shape) - 1)
        nodes += [c("g", rnd(rng, *gshape)), h.make_node("Mul", ["n", "g"], ["y"])]
        note += f" * g{gshape}"
    else:
        nodes.append(h.make_node("Identity", ["n"], ["y"]))
        if not match:
            if rng.random() < 0.5 and len(shape) > 1:
                nodes[1] = h.make_node("ReduceMean", ["xx"], ["ms"], axes=[0], keepdims=1)
                note = "the mean square over another axis"
            else:
                outs.append(vi("ms", None))
                note = "the mean square read elsewhere"
    return Case(nodes, [vi("x", shape)], outs, int(rng.choice([13, 17])),
                {"x": rnd(rng, *shape)}, match, note)


def rotate_half(rng, match):
    # x [B, H, S, D] with D even; tables [S, D], [B, 1, S, D] or [2, 1, S, D] over x of batch 1
    # (they broadcast x); either Add and Mul order.
    b, heads, s = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 6))
    half = int(rng.choice([1, 2, 3, 5, 8, 16]))
    d = 2 * half
    tdims = [[s, d], [b, 1, s, d], [2, 1, s, d]][int(rng.integers(0, 3))]
    if tdims[0] == 2:
        b = 1
    lo_end, hi_start, hi_end = half, half, int(rng.choice([d, 2 ** 62]))
    neg, first, axis = "hi", "lo", -1
    note = f"rotate_half of [{b}, {heads}, {s}, {d}], tables {tdims}"
    outs = [vi("y", None)]
    if not match:
        miss = rng.choice(["sign_first", "other_axis", "shared"])
        if miss == "sign_first":  # Concat(Neg(x[:h]), x[h:])
            neg, first = "lo", "hi"
            note = "the Neg on the first half"
        elif miss == "other_axis":  # x [B, H, D, D]: the halves of the sequence axis
            s, axis = d, -2
            tdims = [s, d]
            note = f"rotate_half along axis -2 of [{b}, {heads}, {d}, {d}]"
        else:
            outs.append(vi("rot", None))
            note = "rotate_half read elsewhere"
    nodes = [c("z", np.array([0], np.int64)), c("h1", np.array([lo_end], np.int64)),
             c("h2", np.array([hi_start], np.int64)), c("e", np.array([hi_end], np.int64)),
             c("ax", np.array([axis], np.int64)),
             h.make_node("Slice", ["x", "z", "h1", "ax"], ["lo"]),
             h.make_node("Slice", ["x", "h2", "e", "ax"], ["hi"]),
             h.make_node("Neg", [neg], ["n"]),
             h.make_node("Concat", ["n", first], ["rot"], axis=axis)]
    if rng.random() < 0.5:
        nodes += [h.make_node("Mul", ["x", "cos"], ["a"]), h.make_node("Mul", ["rot", "sin"], ["b"]),
                  h.make_node("Add", ["a", "b"], ["y"])]
    else:
        nodes += [h.make_node("Mul", ["sin", "rot"], ["b"]), h.make_node("Mul", ["cos", "x"], ["a"]),
                  h.make_node("Add", ["b", "a"], ["y"])]
    shape = [b, heads, s, d]
    return Case(nodes, [vi("x", shape), vi("cos", tdims), vi("sin", tdims)], outs,
                int(rng.choice([13, 17])),
                {"x": rnd(rng, *shape), "cos": rnd(rng, *tdims), "sin": rnd(rng, *tdims)}, match,
                note)


def rms_norm_scale(rng, match):
    return rms_norm(rng, match, scale=True)


def gelu(rng, match):
    shape = [int(d) for d in rng.integers(1, 6, rng.integers(1, 4))]
    k = 1.41421356 if match else 1.5
    form = rng.choice(["div", "mul"])
    inner = [c("k", np.array(k if form == "div" else 1.0 / k, np.float32)),
             h.make_node("Div" if form == "div" else "Mul", ["x", "k"], ["xs"])]
    nodes = inner + [h.make_node("Erf", ["xs"], ["e"]), c("one", np.array(1.0, np.float32)),
                     h.make_node("Add", ["e", "one"], ["a"]), c("half", np.array(0.5, np.float32))]
    order = rng.choice(["xa_h", "xh_a", "x_ah"])
    if order == "xa_h":
        nodes += [h.make_node("Mul", ["x", "a"], ["t"]), h.make_node("Mul", ["t", "half"], ["y"])]
    elif order == "xh_a":
        nodes += [h.make_node("Mul", ["x", "half"], ["t"]), h.make_node("Mul", ["t", "a"], ["y"])]
    else:
        nodes += [h.make_node("Mul", ["a", "half"], ["t"]), h.make_node("Mul", ["x", "t"], ["y"])]
    return Case(nodes, [vi("x", shape)], [vi("y", None)], int(rng.choice([11, 13, 17])),
                {"x": rnd(rng, *shape, lo=-4, hi=4)}, match,
                f"erf GELU ({form}, {order})" + ("" if match else ": x / 1.5"))


def gelu_tanh(rng, match):
    shape = [int(d) for d in rng.integers(1, 6, rng.integers(1, 4))]
    k3 = 0.044715 if match else 0.05
    nodes = [h.make_node("Mul", ["x", "x"], ["x2"]), h.make_node("Mul", ["x2", "x"], ["x3"]),
             c("k3", np.array(k3, np.float32)), h.make_node("Mul", ["x3", "k3"], ["t3"]),
             h.make_node("Add", ["x", "t3"], ["u"]), c("k", np.array(0.7978846, np.float32)),
             h.make_node("Mul", ["u", "k"], ["v"]), h.make_node("Tanh", ["v"], ["th"]),
             c("one", np.array(1.0, np.float32)), h.make_node("Add", ["th", "one"], ["a"]),
             c("half", np.array(0.5, np.float32)), h.make_node("Mul", ["x", "half"], ["xh"]),
             h.make_node("Mul", ["xh", "a"], ["y"])]
    return Case(nodes, [vi("x", shape)], [vi("y", None)], 13,
                {"x": rnd(rng, *shape, lo=-4, hi=4)}, match,
                "tanh GELU" + ("" if match else ": 0.05 x^3"))


def silu(rng, match):
    shape = [int(d) for d in rng.integers(1, 6, rng.integers(1, 4))]
    nodes = [h.make_node("Sigmoid", ["x" if match else "z"], ["s"]),
             h.make_node("Mul", ["x", "s"] if rng.random() < 0.5 else ["s", "x"], ["y"])]
    ins = [vi("x", shape)] + ([] if match else [vi("z", shape)])
    feeds = {"x": rnd(rng, *shape)}
    if not match:
        feeds["z"] = rnd(rng, *shape)
    return Case(nodes, ins, [vi("y", None)], 13, feeds, match,
                "x * sigmoid(x)" if match else "x * sigmoid(z)")


def swiglu(rng, match):
    # silu(g) * u, the silu as Mul(g, Sigmoid(g)) (either order); a miss: the silu also an
    # output.
    shape = [int(d) for d in rng.integers(1, 6, rng.integers(1, 4))]
    ushape = shape if rng.random() < 0.5 else shape[-1:]
    nodes = [h.make_node("Sigmoid", ["g"], ["s"]),
             h.make_node("Mul", ["g", "s"] if rng.random() < 0.5 else ["s", "g"], ["silu"]),
             h.make_node("Mul", ["silu", "u"] if rng.random() < 0.5 else ["u", "silu"], ["y"])]
    outs = [vi("y", None)] + ([] if match else [vi("silu", None)])
    return Case(nodes, [vi("g", shape), vi("u", ushape)], outs, 13,
                {"g": rnd(rng, *shape, lo=-6, hi=6), "u": rnd(rng, *ushape)}, match,
                f"silu(g{shape}) * u{ushape}" + ("" if match else ", the silu read elsewhere"))


def hard_swish(rng, match):
    shape = [int(d) for d in rng.integers(1, 6, rng.integers(1, 4))]
    alpha = 1.0 / 6 if match else 0.2
    nodes = [h.make_node("HardSigmoid", ["x"], ["s"], alpha=alpha, beta=0.5),
             h.make_node("Mul", ["x", "s"], ["y"])]
    return Case(nodes, [vi("x", shape)], [vi("y", None)], int(rng.choice([11, 13])),
                {"x": rnd(rng, *shape, lo=-5, hi=5)}, match, f"x * hardsigmoid(x, {alpha:.3f})")


def _relu6_x_plus_3(rng, match, opset):
    """Clip(Add(x, 3), 0, 6) (bounds as inputs from opset 11, attributes before); a near miss
    changes one constant. Returns (nodes, the constant changed or "")."""
    miss = "" if match else str(rng.choice(["add", "lo", "hi"]))
    add, lo, hi = (2.0 if miss == "add" else 3.0), (-1.0 if miss == "lo" else 0.0), \
        (5.0 if miss == "hi" else 6.0)
    operands = ["x", "three"] if rng.random() < 0.5 else ["three", "x"]
    nodes = [c("three", np.array(add, np.float32)), h.make_node("Add", operands, ["p"])]
    if opset >= 11:
        nodes += [c("lo", np.array(lo, np.float32)), c("hi", np.array(hi, np.float32)),
                  h.make_node("Clip", ["p", "lo", "hi"], ["r"])]
    else:
        nodes += [h.make_node("Clip", ["p"], ["r"], min=lo, max=hi)]
    return nodes, miss


def _sixth(rng, v, out, miss):
    """v / 6 as Div(v, 6) or Mul(v, 1/6); 5 for a near miss on the divisor."""
    d = 5.0 if miss == "div" else 6.0
    if rng.random() < 0.5:
        return [c("six", np.array(d, np.float32)), h.make_node("Div", [v, "six"], [out])]
    return [c("sixth", np.array(1.0 / d, np.float32)),
            h.make_node("Mul", [v, "sixth"] if rng.random() < 0.5 else ["sixth", v], [out])]


def hard_swish_written(rng, match):
    shape = [int(d) for d in rng.integers(1, 6, rng.integers(1, 4))]
    opset = int(rng.choice([9, 11, 13]))
    nodes, miss = _relu6_x_plus_3(rng, match, opset)
    if not match and rng.random() < 0.3:
        miss = "div"
        nodes, _ = _relu6_x_plus_3(rng, True, opset)
    # Paddle2ONNX's (x * R) / 6 or (x * R) * (1/6). (torch's x * (R / 6) is
    # hard_sigmoid_written's, then hard_swish's.)
    nodes += [h.make_node("Mul", ["x", "r"] if rng.random() < 0.5 else ["r", "x"], ["t"])]
    nodes += _sixth(rng, "t", "y", miss)
    form = "(x * R) / 6"
    return Case(nodes, [vi("x", shape)], [vi("y", None)], opset,
                {"x": rnd(rng, *shape, lo=-5, hi=5)}, match,
                f"{form}, opset {opset}" + ("" if match else f": {miss} changed"))


def hard_sigmoid_written(rng, match):
    shape = [int(d) for d in rng.integers(1, 6, rng.integers(1, 4))]
    opset = int(rng.choice([9, 11, 13]))
    nodes, miss = _relu6_x_plus_3(rng, match, opset)
    if not match and rng.random() < 0.3:
        miss = "div"
        nodes, _ = _relu6_x_plus_3(rng, True, opset)
    nodes += _sixth(rng, "r", "y", miss)
    return Case(nodes, [vi("x", shape)], [vi("y", None)], opset,
                {"x": rnd(rng, *shape, lo=-5, hi=5)}, match,
                f"R / 6, opset {opset}" + ("" if match else f": {miss} changed"))


def _moving_perm(rng, r):
    """A permutation that moves an axis (an identity is transpose_identity's)."""
    while True:
        p = rng.permutation(r).tolist()
        if p != list(range(r)):
            return p


def transpose_chain(rng, match):
    r = int(rng.integers(2, 5))
    shape = [int(d) for d in rng.integers(2, 5, r)]  # no unit axis (transpose_unit_axes')
    p, q = _moving_perm(rng, r), _moving_perm(rng, r)
    nodes = [h.make_node("Transpose", ["x"], ["t"], perm=p),
             h.make_node("Transpose", ["t"], ["y"], perm=q)]
    outs = [vi("y", None)] + ([] if match else [vi("t", None)])
    return Case(nodes, [vi("x", shape)], outs, 13, {"x": rnd(rng, *shape)}, match,
                f"Transpose {p} then {q}" + ("" if match else ", the inner one read elsewhere"))


def transpose_identity(rng, match):
    r = int(rng.integers(2, 5))
    shape = [int(d) for d in rng.integers(2, 5, r)]
    attrs = {"perm": list(range(r))} if match else {}
    return Case([h.make_node("Transpose", ["x"], ["y"], **attrs)], [vi("x", shape)],
                [vi("y", None)], 13, {"x": rnd(rng, *shape)}, match,
                "identity perm" if match else "no perm (reverses)")


def pad_identity(rng, match):
    r = int(rng.integers(1, 5))
    shape = [int(d) for d in rng.integers(2, 5, r)]  # ORT's reflect needs 2 and pads below dim
    mode = str(rng.choice(["constant", "reflect", "edge"]))
    pads = [0] * (2 * r)
    if not match:
        pads[int(rng.integers(0, 2 * r))] = 1
    nodes = [c("p", np.array(pads, np.int64)),
             h.make_node("Pad", ["x", "p"], ["t"], mode=mode), h.make_node("Relu", ["t"], ["y"])]
    return Case(nodes, [vi("x", shape)], [vi("y", None)], 13, {"x": rnd(rng, *shape)}, match,
                f"{mode} pads {pads}")


def transpose_unit_axes(rng, match):
    l, e = int(rng.integers(2, 6)), int(rng.integers(2, 6))
    shape = [1, l, e] if match else [2, l, e]
    return Case([h.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
                 h.make_node("Relu", ["t"], ["y"])], [vi("x", shape)], [vi("y", None)], 13,
                {"x": rnd(rng, *shape)}, match, f"swap of {shape[:2]}")


def reshape_chain(rng, match):
    shape = [2, 3, 4]
    s1 = [6, 4]
    s2 = [4, 6] if match or rng.random() < 0.5 else [0, 6]
    nodes = [c("s1", np.array(s1, np.int64)), c("s2", np.array(s2, np.int64)),
             h.make_node("Reshape", ["x", "s1"], ["r"]), h.make_node("Reshape", ["r", "s2"], ["y"])]
    outs = [vi("y", None)]
    note = f"Reshape to {s1} then {s2}"
    if not match and s2[0] != 0:
        outs.append(vi("r", None))
        note += ", the inner one read elsewhere"
    if s2[0] == 0:  # copies the inner result's dim 0: 6 x 6 != 24
        nodes[1] = c("s2", np.array([0, 4], np.int64))
        note = "a 0 (copy) in the outer shape"
    return Case(nodes, [vi("x", shape)], outs, 13, {"x": rnd(rng, *shape)}, match, note)


def attention(rng, match, transposed_out=False):
    b, hh, lq, lk, d = (int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(1, 5)),
                        int(rng.integers(1, 5)), int(rng.integers(2, 6)))
    scale = float(1 / np.sqrt(d))
    nodes = [h.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             h.make_node("MatMul", ["q", "kt"], ["s"]), c("sc", np.array(scale, np.float32)),
             h.make_node("Mul", ["s", "sc"], ["ss"]),
             h.make_node("Softmax", ["ss"], ["p"], axis=-1 if match else -2),
             h.make_node("MatMul", ["p", "v"], ["o"])]
    if transposed_out:
        nodes.append(h.make_node("Transpose", ["o"], ["y"], perm=[0, 2, 1, 3]))
    else:
        nodes.append(h.make_node("Identity", ["o"], ["y"]))
    feeds = {"q": rnd(rng, b, hh, lq, d), "k": rnd(rng, b, hh, lk, d), "v": rnd(rng, b, hh, lk, d)}
    return Case(nodes, [vi("q", list(feeds["q"].shape)), vi("k", list(feeds["k"].shape)),
                        vi("v", list(feeds["v"].shape))], [vi("y", None)], 13, feeds, match,
                "attention" + (" + output transpose" if transposed_out else "") +
                ("" if match else ", softmax over the queries"))


def attention_kv_repeat(rng, match):
    """Grouped-query attention with K and V [b, kvh, lk, d] repeated to the query heads by
    Unsqueeze + Expand + Reshape (Llama's export), no mask or an additive [lq, lk] one; near
    miss: a per-head mask [b, heads, lq, lk] (the repeat stays)."""
    b, kvh, g = int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(2, 4))
    lq, lk, d = int(rng.integers(1, 5)), int(rng.integers(1, 5)), int(rng.integers(2, 6))
    heads = kvh * g
    nodes = []
    for x in ("k", "v"):
        nodes += [c(f"{x}_ax", np.array([2], np.int64)),
                  h.make_node("Unsqueeze", [x, f"{x}_ax"], [f"{x}_u"]),
                  c(f"{x}_es", np.array([b, kvh, g, lk, d], np.int64)),
                  h.make_node("Expand", [f"{x}_u", f"{x}_es"], [f"{x}_e"]),
                  c(f"{x}_rs", np.array([b, heads, lk, d], np.int64)),
                  h.make_node("Reshape", [f"{x}_e", f"{x}_rs"], [f"{x}_r"])]
    nodes += [h.make_node("Transpose", ["k_r"], ["kt"], perm=[0, 1, 3, 2]),
              h.make_node("MatMul", ["q", "kt"], ["s"]),
              c("sc", np.array(1 / np.sqrt(d), np.float32)), h.make_node("Mul", ["s", "sc"], ["ss"])]
    feeds = {"q": rnd(rng, b, heads, lq, d), "k": rnd(rng, b, kvh, lk, d),
             "v": rnd(rng, b, kvh, lk, d)}
    masked = rng.integers(0, 2) == 1 or not match
    if masked:
        feeds["m"] = rnd(rng, *((lq, lk) if match else (b, heads, lq, lk)), lo=-3.0, hi=0.0)
        nodes.append(h.make_node("Add", ["ss", "m"], ["sm"]))
    nodes += [h.make_node("Softmax", ["sm" if masked else "ss"], ["p"], axis=-1),
              h.make_node("MatMul", ["p", "v_r"], ["y"])]
    return Case(nodes, [vi(n, list(a.shape)) for n, a in feeds.items()], [vi("y", None)], 13, feeds,
                match, f"grouped-query attention, {kvh} kv heads x {g}" +
                (", a mask" if masked and match else "") + ("" if match else ", a per-head mask"))


def shape_of_kv_repeat(rng, match):
    """Shape of K [b, kvh, t, d] (t symbolic, so the shape is not folded) repeated g times per
    head by Unsqueeze + Expand + Reshape with shapes computed from Shape(k); near miss: g = 1."""
    b, kvh, t, d = (int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(1, 5)),
                    int(rng.integers(2, 5)))
    g = int(rng.integers(2, 4)) if match else 1
    nodes = [h.make_node("Shape", ["k"], ["ks"]),
             c("s0", np.array([0], np.int64)), c("s2", np.array([2], np.int64)),
             c("s1", np.array([1], np.int64)), c("s4", np.array([4], np.int64)),
             h.make_node("Slice", ["ks", "s0", "s2"], ["lead"]),
             h.make_node("Slice", ["ks", "s2", "s4"], ["tail"]),
             h.make_node("Slice", ["ks", "s0", "s1"], ["bat"]),
             c("gg", np.array([g], np.int64)), c("hh", np.array([kvh * g], np.int64)),
             h.make_node("Concat", ["lead", "gg", "tail"], ["es"], axis=0),
             h.make_node("Concat", ["bat", "hh", "tail"], ["rs"], axis=0),
             c("ax", np.array([2], np.int64)),
             h.make_node("Unsqueeze", ["k", "ax"], ["u"]),
             h.make_node("Expand", ["u", "es"], ["e"]),
             h.make_node("Reshape", ["e", "rs"], ["r"]),
             h.make_node("Shape", ["r"], ["y"])]
    feeds = {"k": rnd(rng, b, kvh, t, d)}
    return Case(nodes, [vi("k", [b, kvh, "t", d])], [vi("y", None, T.INT64)], 13, feeds, match,
                f"Shape of {kvh} kv heads repeated x {g}")


def attention_transpose(rng, match):
    case = attention(rng, True, transposed_out=True)
    if not match:  # the Attention read elsewhere
        case.outputs.append(vi("o", None))
        case.note += ", the attention also an output"
    case.match = match
    return case


def onnx_attention(rng, match):
    """ONNX's Attention 23, 3-D or 4-D, no mask, a bool or a float one, or is_causal without
    one, 4-D grouped heads; near misses: is_causal with a mask, softcap, 3-D grouped heads, a
    past (with its present outputs)."""
    b, n, sq, sk, d, dv = (int(rng.integers(1, 3)), 2, int(rng.integers(1, 5)),
                           int(rng.integers(1, 5)), int(rng.integers(2, 6)),
                           int(rng.integers(2, 6)))
    rank = int(rng.choice([3, 4]))
    miss = None if match else str(rng.choice(["is_causal", "softcap", "grouped", "past"]))
    if miss == "grouped":
        rank = 3  # 3-D grouped heads stay on the reference kernel; 4-D ones fuse
    kvn = 1 if miss == "grouped" or (match and rank == 4 and rng.random() < 0.5) else n
    if rank == 4:
        shapes = {"q": [b, n, sq, d], "k": [b, kvn, sk, d], "v": [b, kvn, sk, dv]}
    else:
        shapes = {"q": [b, sq, n * d], "k": [b, sk, kvn * d], "v": [b, sk, kvn * dv]}
    feeds = {k: rnd(rng, *shp) for k, shp in shapes.items()}
    mask = int(rng.integers(0, 3))
    if miss == "is_causal":
        mask = int(rng.integers(1, 3))  # is_causal fuses only without a mask
    causal = match and mask == 0 and rng.random() < 0.5
    ins = ["q", "k", "v"]
    if mask == 1:
        m = rng.random((sq, sk)) < 0.7
        m[:, 0] = True
        feeds["m"] = m
    elif mask == 2:
        feeds["m"] = rnd(rng, b, 1, sq, sk)
    if mask:
        ins.append("m")
    attrs = {"scale": float(rng.uniform(0.2, 1.0))}
    if rank == 3:
        attrs.update(q_num_heads=n, kv_num_heads=kvn)
    outs = ["y"]
    if miss == "is_causal" or causal:
        attrs["is_causal"] = 1
    if miss == "softcap":
        attrs["softcap"] = 2.0
    if miss == "past":
        feeds["pk"] = rnd(rng, b, kvn, 2, d)
        feeds["pv"] = rnd(rng, b, kvn, 2, dv)
        if mask:  # the mask covers the past keys too
            feeds["m"] = (np.concatenate([np.ones((sq, 2), bool), feeds["m"]], 1) if mask == 1
                          else rnd(rng, b, 1, sq, sk + 2))
        else:
            ins.append("")
        ins += ["pk", "pv"]
        outs += ["present_key", "present_value"]
    node = h.make_node("Attention", ins, outs, **attrs)
    types = {k: (T.BOOL if v.dtype == np.bool_ else F) for k, v in feeds.items()}
    inputs = [vi(k, list(v.shape), types[k]) for k, v in feeds.items()]
    return Case([node], inputs, [vi(o, None) for o in outs], 23, feeds, match,
                f"Attention {rank}-D, mask {['none', 'bool', 'float'][mask]}" +
                (", causal" if causal else "") + (", grouped" if match and kvn < n else "") +
                (f", {miss}" if miss else ""))


def msft_multi_head_attention(rng, match):
    """com.microsoft MultiHeadAttention, 3-D, with or without a constant bias; near misses: a
    key_padding_mask, unidirectional, a bias that is an input."""
    b, n, s, l, d, dv = (int(rng.integers(1, 3)), int(rng.integers(1, 3)),
                         int(rng.integers(1, 5)), int(rng.integers(1, 5)), int(rng.integers(2, 5)),
                         int(rng.integers(2, 5)))
    feeds = {"q": rnd(rng, b, s, n * d), "k": rnd(rng, b, l, n * d), "v": rnd(rng, b, l, n * dv)}
    miss = None if match else str(rng.choice(["mask", "unidirectional", "bias_input"]))
    ins, nodes, inits = ["q", "k", "v"], [], []
    bias = rnd(rng, n * (2 * d + dv), lo=-0.5, hi=0.5)
    if miss == "bias_input":
        feeds["bias"] = bias
        ins.append("bias")
    elif rng.random() < 0.5 or miss == "mask":
        inits.append(numpy_helper.from_array(bias, "bias"))
        ins.append("bias")
    if miss == "mask":
        feeds["m"] = rng.integers(1, l + 1, b).astype(np.int32)
        ins.append("m")
    attrs = {"num_heads": n}
    if miss == "unidirectional":
        attrs["unidirectional"] = 1
    nodes.append(h.make_node("MultiHeadAttention", ins, ["y"], domain="com.microsoft", **attrs))
    inputs = [vi(k, list(v.shape), T.INT32 if v.dtype == np.int32 else F)
              for k, v in feeds.items()]
    return Case(nodes, inputs, [vi("y", None)], 17, feeds, match,
                "MultiHeadAttention" + (", a constant bias" if "bias" in ins and
                                        miss != "bias_input" else "") +
                (f", {miss}" if miss else ""), inits=inits)


def _dq(name, q, scale, zp, axis=None):
    attrs = {"axis": axis} if axis is not None else {}
    return [c(name + "_q", q), c(name + "_s", scale), c(name + "_z", zp),
            h.make_node("DequantizeLinear", [name + "_q", name + "_s", name + "_z"],
                        [name + "_f"], **attrs)]


def qdq_matmul(rng, match, op="MatMul"):
    # Two input channels at least: one is per tensor, and a near miss must not be.
    m, k, n = int(rng.integers(1, 5)), int(rng.integers(2, 6)), int(rng.integers(1, 5))
    xq = rng.integers(0, 255, (m, k)).astype(np.uint8)
    nodes = [c("xs", np.array(0.05, np.float32)), c("xz", np.array(128, np.uint8)),
             h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["x_f"])]
    per_channel = rng.random() < 0.5
    trans_b = op == "Gemm" and rng.random() < 0.5
    wshape = (n, k) if trans_b else (k, n)
    wq = rng.integers(-100, 100, wshape).astype(np.int8)
    if match:
        ch, axis = (n, 0 if trans_b else 1) if per_channel else (None, None)
    else:
        ch, axis = (k, 1 if trans_b else 0)  # per input channel: a near miss
    scale = rng.uniform(0.01, 0.05, ch).astype(np.float32) if ch else np.array(0.02, np.float32)
    zp = np.zeros(ch, np.int8) if ch else np.array(0, np.int8)
    nodes += _dq("w", wq, scale, zp, axis)
    if op == "MatMul":
        nodes.append(h.make_node("MatMul", ["x_f", "w_f"], ["p"]))
    elif op == "Gemm":
        nodes.append(h.make_node("Gemm", ["x_f", "w_f"], ["p"], transB=int(trans_b)))
    nodes += [c("ys", np.array(0.1, np.float32)), c("yz", np.array(128, np.uint8)),
              h.make_node("QuantizeLinear", ["p", "ys", "yz"], ["y"])]
    return Case(nodes, [vi("xq", [m, k], T.UINT8)], [vi("y", None, T.UINT8)], 13, {"xq": xq},
                match, f"QDQ {op} {m}x{k}x{n}" + (" per channel" if per_channel and match else "")
                + ("" if match else ", w per input channel"))


def qdq_gemm(rng, match):
    return qdq_matmul(rng, match, "Gemm")


def qdq_conv(rng, match):
    cin, cout, hw = int(rng.integers(2, 4)), int(rng.integers(1, 4)), int(rng.integers(3, 6))
    xq = rng.integers(0, 255, (1, cin, hw, hw)).astype(np.uint8)
    nodes = [c("xs", np.array(0.05, np.float32)), c("xz", np.array(128, np.uint8)),
             h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["x_f"])]
    wq = rng.integers(-100, 100, (cout, cin, 3, 3)).astype(np.int8)
    if match:
        nodes += _dq("w", wq, rng.uniform(0.01, 0.05, cout).astype(np.float32),
                     np.zeros(cout, np.int8), 0)
    else:  # per input channel (axis 1)
        nodes += _dq("w", wq, rng.uniform(0.01, 0.05, cin).astype(np.float32),
                     np.zeros(cin, np.int8), 1)
    nodes += [h.make_node("Conv", ["x_f", "w_f"], ["p"], pads=[1, 1, 1, 1]),
              c("ys", np.array(0.2, np.float32)), c("yz", np.array(128, np.uint8)),
              h.make_node("QuantizeLinear", ["p", "ys", "yz"], ["y"])]
    return Case(nodes, [vi("xq", list(xq.shape), T.UINT8)], [vi("y", None, T.UINT8)], 13,
                {"xq": xq}, match, "QDQ Conv" + ("" if match else ", w per input channel"))


def _qtype(i8):
    return (np.int8, T.INT8, -128, 127) if i8 else (np.uint8, T.UINT8, 0, 255)


def qdq_add(rng, match):
    """A residual Add between quantized tensors (u8 or s8, per-tensor parameters); near misses:
    B broadcast ([1, C, 1, 1]), C quantized per channel (C >= 2: one channel is per tensor)."""
    n, ch, hw = int(rng.integers(1, 3)), int(rng.integers(2, 5)), int(rng.integers(1, 6))
    i8 = rng.random() < 0.4
    dt, tt, lo, hi = _qtype(i8)
    miss = None if match else str(rng.choice(["broadcast", "per_channel"]))
    bshape = (1, ch, 1, 1) if miss == "broadcast" else (n, ch, hw, hw)
    feeds = {"aq": rng.integers(lo, hi + 1, (n, ch, hw, hw)).astype(dt),
             "bq": rng.integers(lo, hi + 1, bshape).astype(dt)}
    nodes = [c("as", np.array(rng.uniform(0.01, 0.1), np.float32)),
             c("az", np.array(rng.integers(lo, hi + 1), dt)),
             c("bs", np.array(rng.uniform(0.01, 0.1), np.float32)),
             c("bz", np.array(rng.integers(lo, hi + 1), dt)),
             h.make_node("DequantizeLinear", ["aq", "as", "az"], ["a_f"]),
             h.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["b_f"]),
             h.make_node("Add", ["a_f", "b_f"], ["s"])]
    if miss == "per_channel":
        nodes += [c("cs", rng.uniform(0.02, 0.2, ch).astype(np.float32)),
                  c("cz", rng.integers(lo, hi + 1, ch).astype(dt)),
                  h.make_node("QuantizeLinear", ["s", "cs", "cz"], ["y"], axis=1)]
    else:
        nodes += [c("cs", np.array(rng.uniform(0.02, 0.2), np.float32)),
                  c("cz", np.array(rng.integers(lo, hi + 1), dt)),
                  h.make_node("QuantizeLinear", ["s", "cs", "cz"], ["y"])]
    inputs = [vi("aq", list(feeds["aq"].shape), tt), vi("bq", list(bshape), tt)]
    return Case(nodes, inputs, [vi("y", None, tt)], 13, feeds, match,
                f"QDQ Add {'s8' if i8 else 'u8'} [{n},{ch},{hw},{hw}]" +
                (f", {miss}" if miss else ""))


def qdq_requantize(rng, match, relu=False):
    """DequantizeLinear -> [Relu ->] QuantizeLinear (u8 or s8 in and out, per tensor); near
    miss: the output quantized per channel (C >= 2: one channel is per tensor)."""
    n, ch, hw = int(rng.integers(1, 3)), int(rng.integers(2, 5)), int(rng.integers(1, 6))
    dt, tt, lo, hi = _qtype(rng.random() < 0.4)
    yt, ytt, ylo, yhi = _qtype(rng.random() < 0.4)
    feeds = {"xq": rng.integers(lo, hi + 1, (n, ch, hw, hw)).astype(dt)}
    nodes = [c("xs", np.array(rng.uniform(0.01, 0.1), np.float32)),
             c("xz", np.array(rng.integers(lo, hi + 1), dt)),
             h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["x_f"])]
    src = "x_f"
    if relu:
        nodes.append(h.make_node("Relu", ["x_f"], ["r"]))
        src = "r"
    if match:
        nodes += [c("ys", np.array(rng.uniform(0.01, 0.1), np.float32)),
                  c("yz", np.array(rng.integers(ylo, yhi + 1), yt)),
                  h.make_node("QuantizeLinear", [src, "ys", "yz"], ["y"])]
    else:
        nodes += [c("ys", rng.uniform(0.01, 0.1, ch).astype(np.float32)),
                  c("yz", rng.integers(ylo, yhi + 1, ch).astype(yt)),
                  h.make_node("QuantizeLinear", [src, "ys", "yz"], ["y"], axis=1)]
    return Case(nodes, [vi("xq", list(feeds["xq"].shape), tt)], [vi("y", None, ytt)], 13, feeds,
                match, f"QDQ {'Relu ' if relu else ''}requantize" +
                ("" if match else ", y per channel"))


def qdq_requantize_relu(rng, match):
    return qdq_requantize(rng, match, relu=True)


def dynquant_matmul(rng, match, bias=False):
    """A MatMul as ORT's quantize_dynamic writes it: DynamicQuantizeLinear(x), MatMulInteger,
    Cast, Mul by Mul(x_scale, w_scale)[, Add bias]; s8 or u8 weights, per tensor or column."""
    b, l, k, n = (int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 9)),
                  int(rng.integers(1, 7)))
    u8 = rng.random() < 0.5
    per_column = rng.random() < 0.5
    cols = n if per_column else None
    wq = (rng.integers(0, 256, (k, n)).astype(np.uint8) if u8
          else rng.integers(-127, 128, (k, n)).astype(np.int8))
    wz = (rng.integers(0, 256, cols).astype(np.uint8) if u8
          else np.zeros(cols if cols else (), np.int8))
    ws = (rng.uniform(0.001, 0.02, cols) if cols else np.array(0.01)).astype(np.float32)
    nodes = [h.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             c("wq", wq), c("wz", wz), c("ws", ws)]
    # The near miss of dynquant_matmul: a constant a_zero_point, not the quantization's.
    azp = "xz" if match or bias else "other_z"
    if azp == "other_z":
        nodes.append(c("other_z", np.array(3, np.uint8)))
    nodes += [h.make_node("MatMulInteger", ["xq", "wq", azp, "wz"], ["acc"]),
              h.make_node("Cast", ["acc"], ["accf"], to=F),
              h.make_node("Mul", ["xs", "ws"] if rng.random() < 0.5 else ["ws", "xs"], ["sc"]),
              h.make_node("Mul", ["accf", "sc"] if rng.random() < 0.5 else ["sc", "accf"],
                          ["mm"])]
    note = f"[{b},{l},{k}] x {'u8' if u8 else 's8'} [{k},{n}]" + (" per column" if cols else "")
    if bias:  # near miss of dynquant_matmul_bias: a bias [1, n]
        nodes.append(c("bias", rnd(rng, n) if match else rnd(rng, 1, n)))
        nodes.append(h.make_node("Add", ["mm", "bias"], ["y"]))
        note += " + bias" + ("" if match else " [1, n]")
    else:
        nodes.append(h.make_node("Identity", ["mm"], ["y"]))
        note += "" if match else ", a_zero_point not the quantization's"
    return Case(nodes, [vi("x", [b, l, k])], [vi("y", None)], 13, {"x": rnd(rng, b, l, k)},
                match, note)


def dynquant_matmul_bias(rng, match):
    return dynquant_matmul(rng, match, bias=True)


def matmul_bias(rng, match, act=None):
    b, l, k, n = (int(rng.integers(1, 4)), int(rng.integers(2, 5)), int(rng.integers(1, 6)),
                  int(rng.integers(1, 6)))
    nodes = [c("w", rnd(rng, k, n)), h.make_node("MatMul", ["x", "w"], ["mm"])]
    if match:
        nodes.append(c("b", rnd(rng, n)))
        note = f"[{b},{l},{k}] @ [{k},{n}] + b[{n}]"
    else:
        nodes.append(c("b", rnd(rng, l, 1)))
        note = f"a bias [{l}, 1] varying along another axis"
    nodes.append(h.make_node("Add", ["mm", "b"] if rng.random() < 0.5 else ["b", "mm"], ["lin"]))
    outs = [vi("y", None)]
    if act:
        nodes.append(h.make_node(act, ["lin"], ["y"]))
        note += f", then {act}"
    else:
        nodes.append(h.make_node("Identity", ["lin"], ["y"]))
    return Case(nodes, [vi("x", [b, l, k])], outs, 13, {"x": rnd(rng, b, l, k)}, match, note)


def linear_activation(rng, match):
    case = matmul_bias(rng, True, act=str(rng.choice(["Relu", "Tanh", "Sigmoid"])))
    if not match:  # the Linear also an output: read elsewhere
        case.outputs.append(vi("lin", None))
        case.note += ", the Linear read elsewhere"
    case.match = match
    return case


def gemm_activation(rng, match):
    m, k, n = int(rng.integers(1, 5)), int(rng.integers(1, 6)), int(rng.integers(1, 5))
    act = str(rng.choice(["Relu", "Tanh", "Sigmoid"]))
    attrs = {"transB": 1}
    note = f"{act}(Gemm {m}x{k}x{n})"
    if not match:
        # (alpha != 1 with C is a near miss too, pinned by regressions/gemm-alpha-with-a-
        # bias-row: beta stands for it here)
        if rng.random() < 0.5:
            attrs["beta"] = 0.5
            note += ", beta 0.5"
        else:
            attrs["transA"] = 1
            note += ", transA"
    ashape = [k, m] if attrs.get("transA") else [m, k]
    nodes = [c("w", rnd(rng, n, k)), c("cc", rnd(rng, n)),
             h.make_node("Gemm", ["a", "w", "cc"], ["g"], **attrs), h.make_node(act, ["g"], ["y"])]
    return Case(nodes, [vi("a", ashape)], [vi("y", None)], 13, {"a": rnd(rng, *ashape)}, match,
                note)


def matmul_transpose(rng, match):
    # No unit dims: a Transpose of a unit axis is transpose_unit_axes' (a Reshape).
    bdim, m, k, n = (int(rng.integers(2, 3)), int(rng.integers(2, 5)), int(rng.integers(2, 5)),
                     int(rng.integers(2, 5)))
    nodes = [h.make_node("Transpose", ["a"], ["at"], perm=[0, 2, 1]),
             h.make_node("MatMul", ["at", "b"], ["y"])]
    outs = [vi("y", None)] + ([] if match else [vi("at", None)])
    return Case(nodes, [vi("a", [bdim, k, m]), vi("b", [bdim, k, n])], outs, 13,
                {"a": rnd(rng, bdim, k, m), "b": rnd(rng, bdim, k, n)}, match,
                "MatMul(Transpose(a), b)" + ("" if match else ", the Transpose read elsewhere"))


def linear_transpose(rng, match):
    l, k, n = int(rng.integers(2, 5)), int(rng.integers(2, 6)), int(rng.integers(2, 6))
    nodes = [h.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             h.make_node("MatMul", ["x", "wt"], ["mm"]), c("b", rnd(rng, n)),
             h.make_node("Add", ["mm", "b"], ["y"])]
    outs = [vi("y", None)] + ([] if match else [vi("wt", None)])
    return Case(nodes, [vi("x", [2, l, k]), vi("w", [n, k])], outs, 13,
                {"x": rnd(rng, 2, l, k), "w": rnd(rng, n, k)}, match,
                "x @ w.T + b, w an input" + ("" if match else ", w.T read elsewhere"))


GENERATORS = {
    "pow_const": pow_const, "layer_norm": layer_norm, "layer_norm_scale": layer_norm_scale,
    "layer_norm_bias": layer_norm_bias, "rms_norm": rms_norm, "rms_norm_scale": rms_norm_scale,
    "rotate_half": rotate_half, "gelu": gelu, "gelu_tanh": gelu_tanh, "silu": silu, "swiglu": swiglu,
    "hard_swish": hard_swish,
    "hard_swish_written": hard_swish_written, "hard_sigmoid_written": hard_sigmoid_written,
    "transpose_chain": transpose_chain, "transpose_identity": transpose_identity,
    "transpose_unit_axes": transpose_unit_axes, "reshape_chain": reshape_chain,
    "pad_identity": pad_identity,
    "attention": attention, "attention_transpose": attention_transpose,
    "attention_kv_repeat": attention_kv_repeat, "shape_of_kv_repeat": shape_of_kv_repeat,
    "onnx_attention": onnx_attention, "msft_multi_head_attention": msft_multi_head_attention,
    "qdq_matmul": qdq_matmul, "qdq_gemm": qdq_gemm, "qdq_conv": qdq_conv,
    "qdq_add": qdq_add, "qdq_requantize": qdq_requantize,
    "qdq_requantize_relu": qdq_requantize_relu,
    "dynquant_matmul": dynquant_matmul, "dynquant_matmul_bias": dynquant_matmul_bias,
    "matmul_bias": matmul_bias, "gemm_activation": gemm_activation,
    "linear_activation": linear_activation, "matmul_transpose": matmul_transpose,
    "linear_transpose": linear_transpose,
}


def compile_report(vm_compile, model_path, out, extra=()):
    r = subprocess.run([vm_compile, model_path, "-o", out, "--report"] + list(extra),
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"vm-compile {' '.join(extra)}: {r.stderr.strip()}")
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^rewrite (\w+): (\d+)$", r.stdout, re.M)}


def run_dvm(dynvm, path, feeds):
    vm = dynvm.VirtualMachine(dynvm.load(path))
    return {k: np.array(v) for k, v in vm.run(dict(feeds)).items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vm-compile", default=os.path.join(REPO, "build", "release", "tools",
                                                        "vm-compile"))
    ap.add_argument("--python-path", default=os.path.join(REPO, "build", "release", "python"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--instances", type=int, default=6, help="matches and near misses per rule")
    ap.add_argument("--ort-dir", default="")
    args = ap.parse_args(argv)
    sys.path.insert(0, args.python_path)
    try:
        import dynvm
    except ImportError as e:
        print(f"SKIPPED: the dynvm package: {e}")
        return 77
    ort_modules = workers.find_ort(args.ort_dir)
    ort = workers.OrtWorker(ort_modules) if ort_modules else None
    print(f"rewrite fuzz: seed {args.seed}, {args.instances} matches and near misses per rule, "
          f"ONNX Runtime {'at ' + ort_modules if ort else 'not installed: not compared'}")
    failures, counted = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe.onnx")
        onnx.save(silu(np.random.default_rng(0), True).model(), probe)
        rules = sorted(compile_report(args.vm_compile, probe, os.path.join(tmp, "p.dvm")))
        missing = [r for r in rules if r not in GENERATORS]
        if missing:
            failures.append(f"rules without a generator here: {missing}")
        for rule in rules:
            if rule not in GENERATORS:
                continue
            fired = missed = 0
            for i in range(2 * args.instances):
                match = i % 2 == 0
                rng = np.random.default_rng([args.seed, rules.index(rule), i])
                case = GENERATORS[rule](rng, match)
                path = os.path.join(tmp, "m.onnx")
                onnx.save(case.model(), path)
                what = f"{rule} {'match' if match else 'near miss'} #{i // 2} ({case.note})"
                counted += 1
                try:
                    dvms = {k: os.path.join(tmp, f"{k}.dvm") for k in ("opt", "off", "none")}
                    report = compile_report(args.vm_compile, path, dvms["opt"])
                    compile_report(args.vm_compile, path, dvms["off"], ["--disable-rewrite", rule])
                    compile_report(args.vm_compile, path, dvms["none"], ["--no-optimize"])
                    n = report.get(rule, 0)
                    if match and n == 0:
                        failures.append(f"{what}: did not fire")
                    if not match and n != 0:
                        failures.append(f"{what}: fired {n} times")
                    fired += n > 0
                    missed += n == 0
                    outs = {k: run_dvm(dynvm, p, case.feeds) for k, p in dvms.items()}
                    for k in ("off", "none"):
                        d = compare.diff_outputs(outs["opt"], outs[k],
                                                 {o: TOL for o in outs["opt"]})
                        if d:
                            failures.append(f"{what}: optimized vs {k}: {d}")
                    if ort:
                        want = ort.run(case.model().SerializeToString(), case.feeds)
                        d = compare.diff_outputs(outs["opt"], want, {o: TOL for o in want})
                        if d:
                            failures.append(f"{what}: optimized vs ONNX Runtime: {d}")
                except (RuntimeError, workers.OrtError, workers.WorkerFailure,
                        subprocess.SubprocessError, Exception) as e:  # noqa: BLE001
                    failures.append(f"{what}: {type(e).__name__}: {e}")
            print(f"  {rule:22s} fired on {fired}, not on {missed}")
    if ort:
        ort.close()
    print(f"{len(rules)} rules, {counted} models; {len(failures)} failure(s)")
    for f in failures:
        print("FAILED", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
