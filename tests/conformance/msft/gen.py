"""The com.microsoft conformance cases: ONNX Runtime's contrib operators dynvm imports.

One small model per operator form, built with onnx.helper (Debian's python3-onnx 1.12 writes
them; it needs no schema), with shapes, attributes, optional inputs and outputs, and
broadcasting varied. `cases()` yields them; the ctest (../generated_suite.py) runs each in ONNX Runtime
1.30 (the oracle) and in dynvm and compares, and checks that what dynvm refuses is refused with
a message naming it.

    /usr/bin/python3 tests/conformance/msft/gen.py --list          # the case names
    /usr/bin/python3 tests/conformance/msft/gen.py --out DIR       # DIR/NAME/model.onnx + inputs

A case: name, opset, the model's bytes, its inputs ({name: ndarray}), the float tolerance, and
`refused` (a substring of the message dynvm must refuse it with; None: it must run and match).
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 20261129
MS = "com.microsoft"
OPSET = 17  # of the default domain

NP_TO_ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int32): TensorProto.INT32,
}


class Case:
    def __init__(self, name, opset, model, inputs, tol=1e-5, refused=None, expected=None):
        self.name, self.opset, self.model, self.inputs = name, opset, model, inputs
        self.tol, self.refused, self.expected = tol, refused, expected


def node_case(name, op, inputs, consts=None, attrs=None, outputs=("y0",), domain=MS, tol=1e-5,
              refused=None, order=None):
    """One node of `op` in `domain`: graph inputs `inputs`, constant inputs `consts` (both
    {name: array}; a value None is an absent optional input), in `order` (default: inputs, then
    consts). `outputs`: the node's outputs, "" for an absent one; the others are graph
    outputs."""
    inputs = dict(inputs)
    consts = dict(consts or {})
    names = order or (list(inputs) + list(consts))
    node_in = ["" if (n in consts and consts[n] is None) else n for n in names]
    while node_in and node_in[-1] == "":
        node_in.pop()
    node = helper.make_node(op, node_in, list(outputs), domain=domain, **(attrs or {}))
    g_in = [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype], a.shape)
            for n, a in inputs.items()]
    g_out = [onnx.ValueInfoProto(name=o) for o in outputs if o]
    inits = [numpy_helper.from_array(a, n) for n, a in consts.items() if a is not None]
    graph = helper.make_graph([node], "g", g_in, g_out, initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                helper.make_opsetid(MS, 1)],
                          producer_name="dynvm-msft-gen")
    m.ir_version = 8
    return Case(name, 1, m.SerializeToString(), inputs, tol, refused)


def rng():
    return np.random.default_rng(SEED)


def f32(r, *shape, lo=-3.0, hi=3.0):
    return r.uniform(lo, hi, shape).astype(np.float32)


def gelu_cases():
    r = rng()
    for shape in [(2, 3, 8), (5, 16), (7,)]:
        tag = "x".join(map(str, shape))
        x = f32(r, *shape)
        bias = f32(r, shape[-1], lo=-1, hi=1)
        yield node_case(f"FastGelu_{tag}", "FastGelu", {"x": x})
        yield node_case(f"FastGelu_bias_{tag}", "FastGelu", {"x": x, "bias": bias})
        yield node_case(f"FastGelu_bias_const_{tag}", "FastGelu", {"x": x}, {"bias": bias})
        yield node_case(f"BiasGelu_{tag}", "BiasGelu", {"x": x, "bias": bias})
        yield node_case(f"Gelu_{tag}", "Gelu", {"x": x})
        yield node_case(f"QuickGelu_{tag}", "QuickGelu", {"x": x})
        for alpha in (1.0, 0.5, -1.25):
            yield node_case(f"QuickGelu_alpha{alpha}_{tag}", "QuickGelu", {"x": x},
                            attrs={"alpha": alpha})
    big = f32(r, 4, 32, lo=-12, hi=12)
    yield node_case("FastGelu_wide_range", "FastGelu", {"x": big})
    yield node_case("Gelu_wide_range", "Gelu", {"x": big})
    yield node_case("QuickGelu_wide_range", "QuickGelu", {"x": big})


def norm_cases():
    r = rng()
    for shape, axis in [((2, 3, 16), -1), ((4, 32), -1), ((2, 3, 8), 1), ((2, 5, 4), -2),
                        ((3, 64), 1)]:
        tag = f"{'x'.join(map(str, shape))}_axis{axis}"
        x = f32(r, *shape)
        ax = axis % len(shape)
        scale = f32(r, *shape[ax:], lo=0.5, hi=1.5)
        for eps in (1e-5, 1e-6):
            yield node_case(f"SimplifiedLayerNormalization_{tag}_eps{eps}",
                            "SimplifiedLayerNormalization", {"x": x}, {"scale": scale},
                            attrs={"axis": axis, "epsilon": eps}, domain="")
        yield node_case(f"SimplifiedLayerNormalization_{tag}_inv_std",
                        "SimplifiedLayerNormalization", {"x": x, "scale": scale},
                        attrs={"axis": axis}, outputs=("y0", "y1"), domain="")
    for shape in [(2, 3, 16), (1, 5, 32), (4, 8)]:
        tag = "x".join(map(str, shape))
        h = shape[-1]
        x, skip = f32(r, *shape), f32(r, *shape)
        gamma, beta, bias = f32(r, h, lo=0.5, hi=1.5), f32(r, h, lo=-1, hi=1), f32(r, h)
        skips = [("", skip)]
        if len(shape) == 3:
            skips += [("_skip2d", f32(r, *shape[1:])), ("_skip1sh", f32(r, 1, *shape[1:]))]
        for stag, s in skips:
            base = {"x": x, "skip": s}
            for eps in (1e-12, 1e-5):
                yield node_case(f"SkipLayerNormalization_{tag}{stag}_eps{eps}",
                                "SkipLayerNormalization", base, {"gamma": gamma},
                                attrs={"epsilon": eps}, tol=2e-5)
            yield node_case(f"SkipLayerNormalization_{tag}{stag}_beta_bias_sum",
                            "SkipLayerNormalization", base,
                            {"gamma": gamma, "beta": beta, "bias": bias},
                            outputs=("y0", "", "", "y3"), tol=2e-5)
            yield node_case(f"SkipLayerNormalization_{tag}{stag}_bias_only_sum",
                            "SkipLayerNormalization", base,
                            {"gamma": gamma, "beta": None, "bias": bias},
                            outputs=("y0", "", "", "y3"), tol=2e-5)
            yield node_case(f"SkipLayerNormalization_{tag}{stag}_beta",
                            "SkipLayerNormalization", base, {"gamma": gamma, "beta": beta},
                            tol=2e-5)
            yield node_case(f"SkipSimplifiedLayerNormalization_{tag}{stag}",
                            "SkipSimplifiedLayerNormalization", base, {"gamma": gamma},
                            attrs={"epsilon": 1e-6}, tol=2e-5)
            yield node_case(f"SkipSimplifiedLayerNormalization_{tag}{stag}_bias_sum",
                            "SkipSimplifiedLayerNormalization", base,
                            {"gamma": gamma, "bias": bias}, outputs=("y0", "", "", "y3"),
                            tol=2e-5)
            yield node_case(f"SkipSimplifiedLayerNormalization_{tag}{stag}_sum",
                            "SkipSimplifiedLayerNormalization", dict(base, gamma=gamma),
                            outputs=("y0", "", "", "y3"), tol=2e-5)


def fused_matmul_cases():
    r = rng()
    forms = [((3, 5), (5, 4)), ((2, 3, 5), (2, 5, 4)), ((2, 1, 3, 6), (3, 6, 2)),
             ((4, 3, 8), (8, 7)), ((7, 9), (3, 9, 2))]
    for a_shape, b_shape in forms:
        for ta in (0, 1):
            for tb in (0, 1):
                sa = list(a_shape)
                sb = list(b_shape)
                if ta:
                    sa[-1], sa[-2] = sa[-2], sa[-1]
                if tb:
                    sb[-1], sb[-2] = sb[-2], sb[-1]
                a, b = f32(r, *sa), f32(r, *sb)
                tag = f"{'x'.join(map(str, sa))}_{'x'.join(map(str, sb))}_tA{ta}_tB{tb}"
                for alpha in (1.0, 0.125):
                    yield node_case(f"FusedMatMul_{tag}_alpha{alpha}", "FusedMatMul",
                                    {"a": a, "b": b},
                                    attrs={"transA": ta, "transB": tb, "alpha": alpha}, tol=1e-4)
    a, b = f32(r, 3, 5), f32(r, 5, 4)
    yield node_case("FusedMatMul_defaults_const_b", "FusedMatMul", {"a": a}, {"b": b}, tol=1e-4)


def pack(values, bits):
    """uint8 bytes of `values` (last axis, each < 2^bits), low bits first; the last axis
    padded with zeros to whole bytes."""
    per = 8 // bits
    v = values.astype(np.uint8)
    pad = (-v.shape[-1]) % per
    if pad:
        v = np.concatenate([v, np.zeros(v.shape[:-1] + (pad,), np.uint8)], axis=-1)
    v = v.reshape(v.shape[:-1] + (-1, per))
    out = np.zeros(v.shape[:-1], np.uint8)
    for i in range(per):
        out |= (v[..., i] << (bits * i)).astype(np.uint8)
    return out


def nbits_case(r, name, a_shape, k, n, bits, block, zp=None, bias=False, b_input=False):
    """zp: None (absent), "packed" (u8) or "float"."""
    blocks = (k + block - 1) // block
    q = r.integers(0, 1 << bits, (n, blocks * block))
    q[:, k:] = 0
    b = pack(q.reshape(n, blocks, block), bits)  # [N, blocks, blob]
    scales = r.uniform(0.01, 0.2, (n, blocks)).astype(np.float32).reshape(-1)
    consts = {"scales": scales}
    if zp == "packed":
        consts["zero_points"] = pack(r.integers(0, 1 << bits, (n, blocks)), bits).reshape(-1)
    elif zp == "float":
        consts["zero_points"] = r.uniform(0, (1 << bits) - 1, n * blocks).astype(np.float32)
    else:
        consts["zero_points"] = None
    if bias:
        consts["g_idx"] = None
        consts["bias"] = f32(r, n)
    inputs = {"a": f32(r, *a_shape, lo=-1, hi=1)}
    if b_input:
        inputs["b"] = b
        order = ["a", "b"] + list(consts)
    else:
        consts = dict({"b": b}, **consts)
        order = ["a"] + list(consts)
    return node_case(name, "MatMulNBits", inputs, consts,
                     attrs={"K": k, "N": n, "bits": bits, "block_size": block}, tol=1e-4,
                     order=order)


def nbits_cases():
    r = rng()
    for bits in (4, 8):
        for block in (16, 32, 64, 128, 256):
            for k in (block * 2, block + 16 if block > 16 else 40):
                for zp in (None, "packed"):
                    name = f"MatMulNBits_b{bits}_bs{block}_K{k}_zp{zp or 'none'}"
                    yield nbits_case(r, name, (3, k), k, 5, bits, block, zp)
        yield nbits_case(r, f"MatMulNBits_b{bits}_batch3d", (2, 3, 64), 64, 6, bits, 32, "packed")
        yield nbits_case(r, f"MatMulNBits_b{bits}_vector", (48,), 48, 4, bits, 16, "packed")
        yield nbits_case(r, f"MatMulNBits_b{bits}_odd_blocks", (2, 80), 80, 3, bits, 16, "packed")
        yield nbits_case(r, f"MatMulNBits_b{bits}_bias", (2, 3, 64), 64, 6, bits, 32, "packed",
                         bias=True)
        yield nbits_case(r, f"MatMulNBits_b{bits}_b_input", (4, 32), 32, 5, bits, 16, None,
                         b_input=True)
    yield nbits_case(r, "MatMulNBits_b4_float_zp", (3, 64), 64, 5, 4, 32, "float")


def rotary_cases():
    r = rng()
    forms = [((2, 3, 16), {}, (2, 3), 16), ((2, 3, 16), {"interleaved": 1}, (2, 3), 16),
             ((1, 5, 24), {"num_heads": 3}, (1, 5), 8), ((2, 4, 3, 8), {}, (2, 3), 8),
             ((2, 4, 3, 8), {"interleaved": 1}, (1,), 8), ((1, 2, 6, 16), {}, (1,), 16),
             ((2, 3, 32), {"num_heads": 2, "rotary_embedding_dim": 8}, (2, 3), 16),
             ((2, 3, 32), {"num_heads": 2, "rotary_embedding_dim": 8, "interleaved": 1}, (1,),
              16),
             ((2, 2, 3, 16), {"num_heads": 2, "rotary_embedding_dim": 8}, (2, 3), 16)]
    for shape, attrs, pos_shape, head in forms:
        rot = attrs.get("rotary_embedding_dim", 0) or head
        cos = f32(r, 12, rot // 2, lo=-1, hi=1)
        sin = f32(r, 12, rot // 2, lo=-1, hi=1)
        pos = r.integers(0, 6, pos_shape).astype(np.int64)
        tag = "_".join(["x".join(map(str, shape))] + [f"{k}{v}" for k, v in attrs.items()] +
                       ["pos" + "x".join(map(str, pos_shape))])
        yield node_case(f"RotaryEmbedding_{tag}", "RotaryEmbedding",
                        {"x": f32(r, *shape), "pos": pos}, {"cos": cos, "sin": sin}, attrs=attrs)


def qint(r, dtype, *shape):
    lo, hi = (0, 256) if dtype == np.uint8 else (-128, 128)
    return r.integers(lo, hi, shape).astype(dtype)


def quant_matmul_cases():
    r = rng()
    for ta, tb in [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)]:
        for a_shape, n in [((3, 8), 5), ((2, 3, 16), 4), ((1, 4, 2, 32), 6)]:
            k = a_shape[-1]
            tag = f"{np.dtype(ta).name}_{np.dtype(tb).name}_{'x'.join(map(str, a_shape))}_N{n}"
            a, b = qint(r, ta, *a_shape), qint(r, tb, k, n)
            a_scale = np.array(0.02, np.float32)
            for per_col in (False, True):
                b_scale = (r.uniform(0.001, 0.05, n) if per_col else
                           np.array(0.03)).astype(np.float32)
                b_zp = qint(r, tb, n) if per_col else qint(r, tb, 1).reshape(())
                ctag = f"{tag}_{'percol' if per_col else 'pertensor'}"
                yield node_case(f"MatMulIntegerToFloat_{ctag}", "MatMulIntegerToFloat",
                                {"a": a}, {"b": b, "a_scale": a_scale, "b_scale": b_scale},
                                tol=1e-5)
                yield node_case(f"MatMulIntegerToFloat_{ctag}_zps_bias", "MatMulIntegerToFloat",
                                {"a": a}, {"b": b, "a_scale": a_scale, "b_scale": b_scale,
                                           "a_zp": qint(r, ta, 1).reshape(()), "b_zp": b_zp,
                                           "bias": f32(r, n)}, tol=1e-5)
                yield node_case(f"MatMulIntegerToFloat_{ctag}_bzp_only", "MatMulIntegerToFloat",
                                {"a": a}, {"b": b, "a_scale": a_scale, "b_scale": b_scale,
                                           "a_zp": None, "b_zp": b_zp}, tol=1e-5)
    for tb in (np.uint8, np.int8):
        for a_shape, n in [((3, 8), 5), ((2, 3, 16), 4)]:
            k = a_shape[-1]
            b = qint(r, tb, k, n)
            tag = f"{np.dtype(tb).name}_{'x'.join(map(str, a_shape))}"
            for per_col in (False, True):
                b_scale = (r.uniform(0.001, 0.05, n) if per_col else
                           np.array(0.03)).astype(np.float32)
                b_zp = qint(r, tb, n) if per_col else qint(r, tb, 1).reshape(())
                ctag = f"{tag}_{'percol' if per_col else 'pertensor'}"
                a = f32(r, *a_shape, lo=-2, hi=1.5)
                yield node_case(f"DynamicQuantizeMatMul_{ctag}", "DynamicQuantizeMatMul",
                                {"a": a}, {"b": b, "b_scale": b_scale}, tol=1e-4)
                yield node_case(f"DynamicQuantizeMatMul_{ctag}_zp_bias", "DynamicQuantizeMatMul",
                                {"a": a}, {"b": b, "b_scale": b_scale, "b_zp": b_zp,
                                           "bias": f32(r, n)}, tol=1e-4)


def refusal_cases():
    r = rng()
    x = f32(r, 2, 3, 8)
    yield node_case("unknown_msft_op", "NoSuchContribOp", {"x": x},
                    refused="operator NoSuchContribOp of domain com.microsoft")
    yield node_case("SkipLayerNormalization_mean_output", "SkipLayerNormalization",
                    {"x": x, "skip": x}, {"gamma": f32(r, 8)}, outputs=("y0", "y1"),
                    refused="the mean and inv_std_var outputs are not supported")
    yield node_case("FusedMatMul_transBatchA", "FusedMatMul", {"a": x, "b": f32(r, 2, 8, 3)},
                    attrs={"transBatchA": 1},
                    refused="transBatchA and transBatchB are not supported")
    yield node_case("MatMulNBits_bits2", "MatMulNBits",
                    {"a": f32(r, 2, 32)},
                    {"b": np.zeros((4, 2, 4), np.uint8), "scales": np.ones(8, np.float32)},
                    attrs={"K": 32, "N": 4, "bits": 2, "block_size": 16},
                    refused="bits 2 is not supported")
    yield node_case("RotaryEmbedding_packed_batching", "RotaryEmbedding",
                    {"x": x, "pos": np.zeros((2, 3), np.int64)},
                    {"cos": f32(r, 4, 4), "sin": f32(r, 4, 4)}, attrs={"is_packed_batching": 1},
                    refused="is_packed_batching and scale other than 1 are not supported")


GROUPS = [gelu_cases, norm_cases, fused_matmul_cases, nbits_cases, rotary_cases,
          quant_matmul_cases, refusal_cases]


def cases():
    for group in GROUPS:
        yield from group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--out", help="write DIR/NAME/model.onnx and DIR/NAME/input_*.npy")
    args = ap.parse_args()
    for c in cases():
        if args.list:
            print(c.name, "refused: " + c.refused if c.refused else "")
        if args.out:
            d = os.path.join(args.out, c.name)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "model.onnx"), "wb") as f:
                f.write(c.model)
            for k, (n, a) in enumerate(c.inputs.items()):
                np.save(os.path.join(d, f"input_{k}_{n}.npy"), a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
