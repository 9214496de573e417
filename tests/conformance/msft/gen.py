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
    np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.bool_): TensorProto.BOOL,
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


def nbits_case(r, name, a_shape, k, n, bits, block, zp=None, bias=False, b_input=False,
               accuracy_level=None, negative_scales=False, a_scale=1.0):
    """zp: None (absent), "packed" (u8) or "float"."""
    blocks = (k + block - 1) // block
    q = r.integers(0, 1 << bits, (n, blocks * block))
    q[:, k:] = 0
    b = pack(q.reshape(n, blocks, block), bits)  # [N, blocks, blob]
    scales = r.uniform(0.01, 0.2, (n, blocks)).astype(np.float32).reshape(-1)
    if negative_scales:  # ORT's MatMul4BitsQuantizer writes max-magnitude / -8
        scales = -scales
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
    inputs = {"a": (f32(r, *a_shape, lo=-1, hi=1) * np.float32(a_scale)).astype(np.float32)}
    if b_input:
        inputs["b"] = b
        order = ["a", "b"] + list(consts)
    else:
        consts = dict({"b": b}, **consts)
        order = ["a"] + list(consts)
    attrs = {"K": k, "N": n, "bits": bits, "block_size": block}
    if accuracy_level is not None:
        attrs["accuracy_level"] = accuracy_level
    return node_case(name, "MatMulNBits", inputs, consts, attrs=attrs, tol=1e-4, order=order)


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
    # accuracy_level 4: ORT quantizes A to int8 per block (CompInt8); a value of A quantized one
    # step away from ORT's moves the output by about 1e-2, far beyond the tolerance. Level 1 is
    # ORT's f32 path, as 0.
    for block in (16, 32, 64, 128, 256):
        for k in (block * 3, block * 2 + 16 if block > 16 else 40):
            for zp in (None, "packed"):
                for rows in (1, 5, 13):  # 13: the blocked GEMM (q4gemv_int8.inc)
                    name = f"MatMulNBits_acc4_bs{block}_K{k}_zp{zp or 'none'}_M{rows}"
                    yield nbits_case(r, name, (rows, k), k, 7, 4, block, zp, accuracy_level=4)
    for rows, k, n in ((1, 1408, 16), (128, 512, 24), (1, 512, 1024), (2, 4096, 8)):
        yield nbits_case(r, f"MatMulNBits_acc4_M{rows}_K{k}_N{n}", (rows, k), k, n, 4, 32, None,
                         accuracy_level=4)
    yield nbits_case(r, "MatMulNBits_acc4_negative_scales", (3, 512), 512, 24, 4, 32, None,
                     accuracy_level=4, negative_scales=True)
    yield nbits_case(r, "MatMulNBits_acc4_large_a", (3, 512), 512, 24, 4, 32, None,
                     accuracy_level=4, a_scale=30.0)
    yield nbits_case(r, "MatMulNBits_acc4_bias_3d", (2, 3, 128), 128, 6, 4, 32, "packed",
                     bias=True, accuracy_level=4)
    yield nbits_case(r, "MatMulNBits_acc1", (3, 64), 64, 5, 4, 32, None, accuracy_level=1)


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


def gqa_case(r, name, b, s, n, nkv, h, totals, past=None, packed=False, rotary=None,
             attrs=None, bias=None, sink=False, pos_ids=False, outputs=("y0", "y1", "y2"),
             total=None, refused=None, q_hidden=None, dtype=np.float32, tol=1e-4):
    """GroupQueryAttention: batch b, new tokens s, heads n / nkv of size h; totals: each
    sequence's total length (seqlens_k = totals - 1); past: the past buffer's length P (None:
    no past inputs); rotary: None or {"half": rotary_dim / 2, "interleaved": 0|1}; bias: None or
    the attention_bias's leading dims (b or 1, n or 1)."""
    total = max(totals) if total is None else total
    q_hidden = q_hidden or (n + 2 * nkv if packed else n) * h
    inputs = {"query": f32(r, b, s, q_hidden, lo=-1, hi=1)}
    consts = {}
    if packed:
        consts.update(key=None, value=None)
    else:
        inputs["key"] = f32(r, b, s, nkv * h, lo=-1, hi=1)
        inputs["value"] = f32(r, b, s, nkv * h, lo=-1, hi=1)
    if past is not None:
        inputs["past_key"] = f32(r, b, nkv, past, h, lo=-1, hi=1)
        inputs["past_value"] = f32(r, b, nkv, past, h, lo=-1, hi=1)
    else:
        consts.update(past_key=None, past_value=None)
    inputs["seqlens_k"] = np.array(totals, np.int32) - 1
    inputs["total_sequence_length"] = np.array(total, np.int32)
    a = {"num_heads": n, "kv_num_heads": nkv}
    a.update(attrs or {})
    extra = {}
    if rotary is not None:
        a["do_rotary"] = 1
        a["rotary_interleaved"] = rotary.get("interleaved", 0)
        extra["cos_cache"] = f32(r, total + 4, rotary["half"], lo=-1, hi=1)
        extra["sin_cache"] = f32(r, total + 4, rotary["half"], lo=-1, hi=1)
    if pos_ids:
        extra["position_ids"] = r.integers(0, total, (b, s)).astype(np.int64)
    if bias is not None:
        extra["attention_bias"] = f32(r, bias[0], bias[1], s, max(total, past or 0), lo=-2, hi=2)
    if sink:
        extra["head_sink"] = f32(r, n, lo=-1, hi=1)
    names = ["cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink"]
    last = max([i for i, k in enumerate(names) if k in extra], default=-1)
    for k in names[:last + 1]:
        if k in extra:
            inputs[k] = extra[k]
        else:
            consts[k] = None
    order = ["query", "key", "value", "past_key", "past_value", "seqlens_k",
             "total_sequence_length"] + names[:last + 1]
    order = [k for k in order if k in inputs or k in consts]
    for d in (inputs, consts):  # f16 (or another float type): every float operand
        for k, v in d.items():
            if v is not None and v.dtype == np.float32:
                d[k] = v.astype(dtype)
    return node_case(f"GroupQueryAttention_{name}", "GroupQueryAttention", inputs, consts,
                     attrs=a, outputs=outputs, tol=tol, order=order, refused=refused)


def gqa_cases():
    r = rng()
    # Prompts (no past): batch, sequence, heads / KV heads, head size.
    for b, s, n, nkv, h in [(1, 5, 4, 2, 8), (2, 3, 4, 4, 16), (2, 6, 6, 2, 8), (1, 1, 2, 1, 32),
                            (3, 4, 8, 1, 8)]:
        tag = f"prompt_b{b}_s{s}_n{n}_kv{nkv}_h{h}"
        yield gqa_case(r, tag, b, s, n, nkv, h, [s] * b)
        yield gqa_case(r, tag + "_packed", b, s, n, nkv, h, [s] * b, packed=True)
        yield gqa_case(r, tag + "_output_only", b, s, n, nkv, h, [s] * b, outputs=("y0",))
    # A padded prompt batch: shorter sequences than S (right padding).
    yield gqa_case(r, "prompt_padded", 2, 5, 4, 2, 8, [5, 3])
    # Decoding one token with a past (P = the past length; 0 too), several KV heads.
    for b, n, nkv, h, past in [(1, 4, 2, 8, 3), (2, 4, 1, 16, 5), (2, 2, 2, 8, 1),
                               (1, 8, 4, 8, 7)]:
        tag = f"decode_b{b}_n{n}_kv{nkv}_h{h}_past{past}"
        yield gqa_case(r, tag, b, 1, n, nkv, h, [past + 1] * b, past=past)
        yield gqa_case(r, tag + "_packed", b, 1, n, nkv, h, [past + 1] * b, past=past,
                       packed=True)
    yield gqa_case(r, "prompt_past0", 2, 4, 4, 2, 8, [4, 4], past=0)
    # Sequences of different lengths in one batch (seqlens_k per sequence).
    yield gqa_case(r, "decode_ragged", 3, 1, 4, 2, 8, [6, 3, 5], past=5)
    # A shared past/present buffer of the maximum length (P > total).
    yield gqa_case(r, "decode_buffer_longer", 2, 1, 4, 2, 8, [4, 6], past=10)
    yield gqa_case(r, "prompt_buffer_longer", 1, 4, 4, 2, 8, [4], past=8)
    # A prompt continued after a past (batch 1, S > 1, S != total).
    yield gqa_case(r, "subsequent_prompt", 1, 3, 4, 2, 8, [7], past=4)
    yield gqa_case(r, "subsequent_prompt_buffer", 1, 2, 4, 1, 16, [5], past=9)
    # Attributes.
    for lw in (1, 2, 3):
        yield gqa_case(r, f"prompt_local_window{lw}", 1, 6, 4, 2, 8, [6],
                       attrs={"local_window_size": lw})
        yield gqa_case(r, f"decode_local_window{lw}", 2, 1, 4, 2, 8, [6, 4], past=5,
                       attrs={"local_window_size": lw})
    for scale in (0.5, 0.0625):
        yield gqa_case(r, f"scale{scale}", 2, 3, 4, 2, 8, [3, 3], attrs={"scale": scale})
    for cap in (1.0, 5.0):
        yield gqa_case(r, f"softcap{cap}", 2, 4, 4, 2, 8, [4, 4], attrs={"softcap": cap,
                                                                         "scale": 0.9})
    yield gqa_case(r, "smooth_softmax", 1, 4, 4, 2, 8, [4], attrs={"smooth_softmax": 1})
    yield gqa_case(r, "head_sink", 2, 3, 4, 2, 8, [3, 3], sink=True)
    for lead in [(1, 1), (2, 4), (1, 4), (2, 1)]:
        yield gqa_case(r, f"attention_bias_{lead[0]}x{lead[1]}", 2, 3, 4, 2, 8, [3, 3],
                       bias=lead)
    yield gqa_case(r, "attention_bias_decode", 2, 1, 4, 2, 8, [5, 3], past=4, bias=(2, 4))
    # Rotary inside: halves or interleaved, the full head or a part of it, prompt and decode.
    for inter in (0, 1):
        for h, half in [(16, 8), (32, 8), (32, 16)]:
            rot = {"half": half, "interleaved": inter}
            tag = f"rotary_h{h}_half{half}_inter{inter}"
            yield gqa_case(r, tag + "_prompt", 2, 3, 4, 2, h, [3, 3], rotary=rot)
            yield gqa_case(r, tag + "_decode", 2, 1, 4, 2, h, [5, 3], past=4, rotary=rot)
        rot = {"half": 8, "interleaved": inter}
        yield gqa_case(r, f"rotary_packed_inter{inter}", 2, 3, 4, 2, 16, [3, 3], rotary=rot,
                       packed=True)
        yield gqa_case(r, f"rotary_subsequent_inter{inter}", 1, 2, 4, 2, 16, [6], past=4,
                       rotary=rot)
        yield gqa_case(r, f"rotary_padded_inter{inter}", 2, 4, 2, 1, 16, [4, 2], rotary=rot)
    yield gqa_case(r, "rotary_local_window_softcap", 1, 5, 4, 2, 16, [5],
                   rotary={"half": 8}, attrs={"local_window_size": 2, "softcap": 2.0})
    # f16 (ONNX Runtime's CPU kernel takes it; dynvm computes in f32 and rounds the outputs).
    f16 = {"dtype": np.float16, "tol": 2e-3}
    yield gqa_case(r, "f16_prompt", 2, 3, 4, 2, 8, [3, 3], **f16)
    yield gqa_case(r, "f16_decode", 2, 1, 4, 2, 8, [5, 3], past=4, **f16)
    yield gqa_case(r, "f16_packed", 1, 4, 4, 2, 8, [4], packed=True, **f16)
    yield gqa_case(r, "f16_rotary_bias", 2, 3, 4, 2, 16, [3, 3], rotary={"half": 8},
                   bias=(1, 4), **f16)


def gqa_refusal_cases():
    r = rng()
    yield gqa_case(r, "refused_hidden_not_multiple", 1, 2, 3, 1, 8, [2], q_hidden=20,
                   refused="is not a positive multiple of num_heads")
    yield gqa_case(r, "refused_heads_not_multiple", 1, 2, 4, 3, 8, [2],
                   refused="must be a positive multiple of kv_num_heads")
    yield gqa_case(r, "refused_output_qk", 1, 2, 4, 2, 8, [2],
                   outputs=("y0", "y1", "y2", "y3"), refused="the output_qk output")
    yield gqa_case(r, "refused_qk_output_attr", 1, 2, 4, 2, 8, [2], attrs={"qk_output": 1},
                   refused="qk_output")
    c = gqa_case(r, "refused_float64", 1, 2, 4, 2, 8, [2])
    m = onnx.load_from_string(c.model)
    for vi in m.graph.input:
        if vi.name in ("query", "key", "value"):
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    c.model = m.SerializeToString()
    c.refused = "query of dtype f64 is not supported"
    for k in ("query", "key", "value"):
        c.inputs[k] = c.inputs[k].astype(np.float64)
    yield c
    c = gqa_case(r, "refused_query_rank", 1, 2, 4, 2, 8, [2],
                 refused="query must be 3-D")
    m = onnx.load_from_string(c.model)
    q = c.inputs["query"].reshape(1, 2, 4, 8)
    c.inputs["query"] = q
    m.graph.input[0].CopyFrom(helper.make_tensor_value_info("query", TensorProto.FLOAT, q.shape))
    c.model = m.SerializeToString()
    yield c


def mha_case(r, name, b, s, l, n, h, hv=None, past=None, bias=False, mask=None, attn_bias=None,
             attrs=None, bnsh=False, outputs=("y0",), refused=None, q_shape=None,
             const_bias=False):
    """MultiHeadAttention: batch b, query length s, key/value length l, n heads of size h (Q, K)
    and hv (V); past: the past length P (None: no past inputs); mask: None, "len" ([B] valid
    lengths), "2d" ([B, T]) or "3d" ([B, S, T]); attn_bias: None or its leading dims; bnsh:
    key and value as [B, N, L, H]."""
    hv = hv or h
    t = (past or 0) + l
    inputs = {"query": f32(r, *(q_shape or (b, s, n * h)), lo=-1, hi=1)}
    if bnsh:
        inputs["key"] = f32(r, b, n, l, h, lo=-1, hi=1)
        inputs["value"] = f32(r, b, n, l, hv, lo=-1, hi=1)
    else:
        inputs["key"] = f32(r, b, l, n * h, lo=-1, hi=1)
        inputs["value"] = f32(r, b, l, n * hv, lo=-1, hi=1)
    opt = {}
    if bias:
        opt["bias"] = f32(r, n * (2 * h + hv), lo=-0.5, hi=0.5)
    if mask == "len":
        opt["key_padding_mask"] = r.integers(1, t + 1, b).astype(np.int32)
    elif mask == "2d":
        m = (r.uniform(0, 1, (b, t)) < 0.7).astype(np.int32)
        m[:, 0] = 1
        opt["key_padding_mask"] = m
    elif mask == "3d":
        m = (r.uniform(0, 1, (b, s, t)) < 0.7).astype(np.int32)
        m[..., 0] = 1
        opt["key_padding_mask"] = m
    if attn_bias is not None:
        opt["attention_bias"] = f32(r, attn_bias[0], attn_bias[1], s, t, lo=-2, hi=2)
    if past is not None:
        opt["past_key"] = f32(r, b, n, past, h, lo=-1, hi=1)
        opt["past_value"] = f32(r, b, n, past, hv, lo=-1, hi=1)
    names = ["bias", "key_padding_mask", "attention_bias", "past_key", "past_value"]
    last = max([i for i, k in enumerate(names) if k in opt], default=-1)
    consts = {}
    for k in names[:last + 1]:
        if k in opt and not (k == "bias" and const_bias):
            inputs[k] = opt[k]
        else:
            consts[k] = opt.get(k)
    a = {"num_heads": n}
    a.update(attrs or {})
    order = ["query", "key", "value"] + names[:last + 1]
    return node_case(f"MultiHeadAttention_{name}", "MultiHeadAttention", inputs, consts,
                     attrs=a, outputs=outputs, tol=1e-4, order=order, refused=refused)


def mha_cases():
    r = rng()
    for b, s, l, n, h, hv in [(1, 3, 3, 2, 8, 8), (2, 4, 4, 4, 4, 4), (2, 2, 5, 2, 8, 4),
                              (1, 1, 6, 3, 16, 16), (3, 3, 2, 1, 8, 12)]:
        tag = f"b{b}_s{s}_l{l}_n{n}_h{h}_hv{hv}"
        yield mha_case(r, tag, b, s, l, n, h, hv)
        yield mha_case(r, tag + "_bias", b, s, l, n, h, hv, bias=True)
        yield mha_case(r, tag + "_const_bias", b, s, l, n, h, hv, bias=True, const_bias=True)
        if hv == h:  # ORT takes 4-D key and value of one shape only
            yield mha_case(r, tag + "_bnsh_kv", b, s, l, n, h, hv, bnsh=True)
        for mask in ("len", "2d", "3d"):
            yield mha_case(r, f"{tag}_mask_{mask}", b, s, l, n, h, hv, mask=mask)
    for lead in [(1, 1), (2, 1), (1, 2), (2, 2)]:
        yield mha_case(r, f"attention_bias_{lead[0]}x{lead[1]}", 2, 3, 4, 2, 8,
                       attn_bias=lead)
    yield mha_case(r, "attention_bias_and_mask", 2, 3, 4, 2, 8, attn_bias=(2, 2), mask="2d",
                   bias=True)
    for past in (0, 2, 5):
        tag = f"past{past}"
        outs = ("y0", "y1", "y2")
        yield mha_case(r, tag, 2, 1, 1, 2, 8, past=past, outputs=outs)
        yield mha_case(r, tag + "_prompt", 1, 3, 3, 2, 8, past=past, outputs=outs)
        yield mha_case(r, tag + "_bias", 2, 2, 2, 2, 8, past=past, bias=True, outputs=outs)
        yield mha_case(r, tag + "_mask", 2, 2, 2, 2, 8, past=past, mask="2d", outputs=outs)
        yield mha_case(r, tag + "_unidirectional", 1, 3, 3, 2, 8, past=past,
                       attrs={"unidirectional": 1}, outputs=outs)
        yield mha_case(r, tag + "_output_only", 2, 1, 1, 2, 8, past=past)
    yield mha_case(r, "present_without_past", 2, 3, 3, 2, 8, outputs=("y0", "y1", "y2"))
    yield mha_case(r, "unidirectional", 2, 4, 4, 2, 8, attrs={"unidirectional": 1})
    yield mha_case(r, "unidirectional_mask", 2, 4, 4, 2, 8, attrs={"unidirectional": 1},
                   mask="2d")
    yield mha_case(r, "unidirectional_3d_mask", 2, 4, 4, 2, 8, attrs={"unidirectional": 1},
                   mask="3d")
    for scale in (0.5, 0.1):
        yield mha_case(r, f"scale{scale}", 2, 3, 3, 2, 8, attrs={"scale": scale})
    yield mha_case(r, "mask_filter_value", 2, 3, 4, 2, 8, mask="2d",
                   attrs={"mask_filter_value": -30.0})
    yield mha_case(r, "mask_filter_value_len", 2, 3, 4, 2, 8, mask="len",
                   attrs={"mask_filter_value": -5.0})
    # Refused: packed QKV, bad shapes.
    yield mha_case(r, "refused_packed_qkv", 1, 2, 2, 2, 8, q_shape=(1, 2, 2, 3, 8),
                   refused="packed QKV (a 5-D query) is not supported")
    yield mha_case(r, "refused_hidden_not_multiple", 1, 2, 2, 3, 4, q_shape=(1, 2, 10),
                   refused="is not a positive multiple of num_heads")


def msft_attention_case(r, name, b, s, din, n, h, hv=None, past=None, mask=None,
                        attn_bias=None, attrs=None, outputs=("y0",), refused=None,
                        weights_input=False):
    """Attention (com.microsoft): input [b, s, din] times weights [din, n h + n h + n hv] plus
    bias; past: the past length P (None: no past input); mask: None, "len", "len2" ([2B]: end
    and start), "2d" ([B, T]) or "3d" ([B, S, T])."""
    hv = hv or h
    t = (past or 0) + s
    inputs = {"input": f32(r, b, s, din, lo=-1, hi=1)}
    cols = n * (2 * h + hv)
    w = f32(r, din, cols, lo=-0.5, hi=0.5)
    consts = {"bias": f32(r, cols, lo=-0.2, hi=0.2)}
    if weights_input:
        inputs["weights"] = w
    else:
        consts = dict({"weights": w}, **consts)
    opt = {}
    if mask == "len":
        opt["mask_index"] = r.integers(1, t + 1, b).astype(np.int32)
    elif mask == "len2":
        end = r.integers(1, t + 1, b)
        start = np.array([r.integers(0, e) for e in end])
        opt["mask_index"] = np.concatenate([end, start]).astype(np.int32)
    elif mask == "2d":
        m = (r.uniform(0, 1, (b, t)) < 0.7).astype(np.int32)
        m[:, 0] = 1
        opt["mask_index"] = m
    elif mask == "3d":
        m = (r.uniform(0, 1, (b, s, t)) < 0.7).astype(np.int32)
        m[..., 0] = 1
        opt["mask_index"] = m
    if past is not None:
        opt["past"] = f32(r, 2, b, n, past, h, lo=-1, hi=1)
    if attn_bias is not None:
        opt["attention_bias"] = f32(r, attn_bias[0], attn_bias[1], s, t, lo=-2, hi=2)
    names = ["mask_index", "past", "attention_bias"]
    last = max([i for i, k in enumerate(names) if k in opt], default=-1)
    for k in names[:last + 1]:
        if k in opt:
            inputs[k] = opt[k]
        else:
            consts[k] = None
    a = {"num_heads": n}
    if hv != h:
        a["qkv_hidden_sizes"] = [n * h, n * h, n * hv]
    a.update(attrs or {})
    order = ["input", "weights", "bias"] + names[:last + 1]
    return node_case(f"Attention_{name}", "Attention", inputs, consts, attrs=a,
                     outputs=outputs, tol=1e-4, order=order, refused=refused)


def msft_attention_cases():
    r = rng()
    for b, s, din, n, h, hv in [(1, 3, 8, 2, 4, 4), (2, 4, 16, 4, 4, 4), (2, 2, 12, 2, 8, 4),
                                (3, 1, 6, 1, 8, 8)]:
        tag = f"b{b}_s{s}_din{din}_n{n}_h{h}_hv{hv}"
        yield msft_attention_case(r, tag, b, s, din, n, h, hv)
        for mask in ("len", "len2", "2d", "3d"):
            yield msft_attention_case(r, f"{tag}_mask_{mask}", b, s, din, n, h, hv, mask=mask)
        yield msft_attention_case(r, f"{tag}_unidirectional", b, s, din, n, h, hv,
                                  attrs={"unidirectional": 1})
    yield msft_attention_case(r, "weights_input", 2, 3, 8, 2, 4, weights_input=True)
    for past in (0, 2, 5):
        outs = ("y0", "y1")
        yield msft_attention_case(r, f"past{past}", 2, 1, 8, 2, 4, past=past, outputs=outs)
        yield msft_attention_case(r, f"past{past}_prompt", 1, 3, 8, 2, 4, past=past,
                                  outputs=outs)
        yield msft_attention_case(r, f"past{past}_unidirectional", 2, 3, 8, 2, 4, past=past,
                                  attrs={"unidirectional": 1}, outputs=outs)
        yield msft_attention_case(r, f"past{past}_mask_2d", 2, 2, 8, 2, 4, past=past,
                                  mask="2d", outputs=outs)
        yield msft_attention_case(r, f"past{past}_mask_len", 2, 1, 8, 2, 4, past=past,
                                  mask="len", outputs=outs)
    yield msft_attention_case(r, "present_without_past", 2, 3, 8, 2, 4, outputs=("y0", "y1"))
    for lead in [(1, 1), (2, 2), (1, 2)]:
        yield msft_attention_case(r, f"attention_bias_{lead[0]}x{lead[1]}", 2, 3, 8, 2, 4,
                                  attn_bias=lead)
    yield msft_attention_case(r, "attention_bias_mask_unidirectional", 2, 3, 8, 2, 4,
                              attn_bias=(2, 2), mask="2d", attrs={"unidirectional": 1})
    for scale in (0.5, 0.2):
        yield msft_attention_case(r, f"scale{scale}", 2, 3, 8, 2, 4, attrs={"scale": scale})
    yield msft_attention_case(r, "mask_filter_value", 2, 3, 8, 2, 4, mask="2d",
                              attrs={"mask_filter_value": -20.0})
    yield msft_attention_case(r, "refused_past_without_present", 2, 1, 8, 2, 4, past=2,
                              refused="a past needs the present output")
    yield msft_attention_case(r, "refused_do_rotary", 1, 2, 8, 2, 4, attrs={"do_rotary": 1},
                              refused="do_rotary is not supported")
    yield msft_attention_case(r, "refused_heads_not_dividing", 1, 2, 9, 3, 3,
                              attrs={"qkv_hidden_sizes": [9, 9, 8]},
                              refused="multiples of num_heads")


def embed_ln_case(r, name, b, s, h, vocab=20, positions=16, segments=2, segment=True,
                  mask=False, pos_ids=None, outputs=("y0", "y1"), eps=1e-12, ids=None):
    """EmbedLayerNormalization over input_ids [b, s] with tables of `vocab`, `positions` and
    `segments` rows of width h; pos_ids: None, "full" ([B, S]) or "broadcast" ([1, S])."""
    inputs = {"input_ids": ids if ids is not None
              else r.integers(0, vocab, (b, s)).astype(np.int32)}
    consts = {}
    if segment:
        inputs["segment_ids"] = r.integers(0, segments, (b, s)).astype(np.int32)
    else:
        consts["segment_ids"] = None
    consts["word_embedding"] = f32(r, vocab, h, lo=-1, hi=1)
    consts["position_embedding"] = f32(r, positions, h, lo=-1, hi=1)
    consts["segment_embedding"] = f32(r, segments, h, lo=-1, hi=1) if segment else None
    consts["gamma"] = f32(r, h, lo=0.5, hi=1.5)
    consts["beta"] = f32(r, h, lo=-0.5, hi=0.5)
    order = ["input_ids", "segment_ids", "word_embedding", "position_embedding",
             "segment_embedding", "gamma", "beta"]
    if mask or pos_ids:
        order.append("mask")
        if mask:
            m = (r.uniform(0, 1, (b, s)) < 0.7).astype(np.int32)
            inputs["mask"] = m
        else:
            consts["mask"] = None
    if pos_ids:
        order.append("position_ids")
        shape = (b, s) if pos_ids == "full" else (1, s)
        inputs["position_ids"] = r.integers(0, positions, shape).astype(np.int32)
    return node_case(f"EmbedLayerNormalization_{name}", "EmbedLayerNormalization", inputs, consts,
                     attrs={"epsilon": eps}, outputs=outputs, tol=1e-4, order=order)


def embed_ln_cases():
    r = rng()
    for b, s, h in [(1, 4, 8), (2, 3, 16), (3, 7, 32)]:
        tag = f"b{b}_s{s}_h{h}"
        yield embed_ln_case(r, tag, b, s, h)
        yield embed_ln_case(r, tag + "_mask", b, s, h, mask=True)
        yield embed_ln_case(r, tag + "_no_segment", b, s, h, segment=False)
        yield embed_ln_case(r, tag + "_sum", b, s, h, outputs=("y0", "y1", "y2"))
    yield embed_ln_case(r, "position_ids", 2, 4, 8, pos_ids="full")
    yield embed_ln_case(r, "position_ids_broadcast", 2, 4, 8, pos_ids="broadcast", mask=True)
    yield embed_ln_case(r, "eps1e-5", 2, 3, 8, eps=1e-5)


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
          quant_matmul_cases, refusal_cases, gqa_cases, gqa_refusal_cases, mha_cases,
          msft_attention_cases, embed_ln_cases]


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
