"""The opset 18-23 conformance cases: one small model per operator version and form.

Every operator version ONNX added in opsets 18 to 23 that dynvm imports gets models built with
onnx.helper (Debian's python3-onnx 1.12 builds them: it needs no schema to write a node), with
its attributes, element types, ranks and broadcasting varied. `cases()` yields them; the ctest
(../generated_suite.py) runs each in ONNX Runtime 1.30 (the oracle) and in dynvm and compares, and
checks that the versions dynvm refuses are refused naming the operator.

    /usr/bin/python3 tests/conformance/opset18/gen.py --list          # the case names
    /usr/bin/python3 tests/conformance/opset18/gen.py --out DIR       # DIR/NAME/model.onnx + inputs

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

NP_TO_ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int16): TensorProto.INT16, np.dtype(np.uint16): TensorProto.UINT16,
    np.dtype(np.uint32): TensorProto.UINT32, np.dtype(np.uint64): TensorProto.UINT64,
    np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(object): TensorProto.STRING,
}


class Case:
    """`expected` ({output name: ndarray}) replaces ONNX Runtime as the oracle where its node
    binding cannot carry the values (string tensors): Python's own string operations."""

    def __init__(self, name, opset, model, inputs, tol=1e-5, refused=None, expected=None):
        self.name, self.opset, self.model, self.inputs = name, opset, model, inputs
        self.tol, self.refused, self.expected = tol, refused, expected


def model_of(nodes, inputs, outputs, opset, initializers=(), out_types=None):
    """A model of `nodes`; `inputs` {name: ndarray} are graph inputs, `initializers` too but
    constant. Outputs are declared without type where out_types does not give one (dynvm and
    ONNX Runtime infer them)."""
    g_in = [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype], a.shape)
            for n, a in inputs.items()]
    g_out = []
    for o in outputs:
        t = (out_types or {}).get(o)
        g_out.append(helper.make_tensor_value_info(o, t, None) if t is not None
                     else onnx.ValueInfoProto(name=o))
    inits = [numpy_helper.from_array(a, n) for n, a in dict(initializers).items()]
    graph = helper.make_graph(nodes, "g", g_in, g_out, initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="dynvm-opset18-gen")
    m.ir_version = 8 if opset < 21 else 10
    return m.SerializeToString()


def single(name, op, opset, inputs, attrs=None, consts=None, n_out=1, tol=1e-5, refused=None,
           order=None):
    """One node of `op`: graph inputs `inputs`, constant inputs `consts` (both {name: array};
    an entry of value None is an absent optional input), in `order` (default: inputs, then
    consts)."""
    inputs = dict(inputs)
    consts = dict(consts or {})
    names = order or (list(inputs) + list(consts))
    node_in = ["" if (n in consts and consts[n] is None) else n for n in names]
    while node_in and node_in[-1] == "":
        node_in.pop()
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, node_in, outs, **(attrs or {}))
    inits = {n: a for n, a in consts.items() if a is not None}
    return Case(name, opset, model_of([node], inputs, outs, opset, inits), inputs, tol, refused)


def rng():
    return np.random.default_rng(SEED)


def f32(*shape, lo=-3.0, hi=3.0, r=None):
    return (r or rng()).uniform(lo, hi, shape).astype(np.float32)


def ints(dtype, *shape, lo=-50, hi=50, r=None):
    return (r or rng()).integers(lo, hi, shape).astype(dtype)


def i64(*vals):
    return np.array(vals, np.int64)


REDUCE = ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ReduceSum"]


def reduce_cases():
    r = rng()
    for op in REDUCE:
        positive = op == "ReduceLogSum"
        x = f32(3, 4, 5, lo=0.1 if positive else -2.0, hi=2.0, r=r)
        if op == "ReduceProd":
            x = f32(3, 4, 5, lo=0.5, hi=1.5, r=r)
        tol = 1e-5
        forms = [
            ("axes1_keep", {"keepdims": 1}, i64(1)),
            ("axes_neg_nokeep", {"keepdims": 0}, i64(-1, 0)),
            ("all_nokeep", {"keepdims": 0}, None),
            ("all_keep", {}, None),
            ("empty_noop", {"noop_with_empty_axes": 1}, np.zeros((0,), np.int64)),
        ]
        for tag, attrs, axes in forms:
            yield single(f"{op}_18_{tag}", op, 18, {"x": x}, attrs, {"axes": axes}, tol=tol)
        # axes computed at run time: a graph input
        yield single(f"{op}_18_axes_input", op, 18, {"x": x, "axes": i64(2)}, {"keepdims": 1},
                     tol=tol)
        if op in ("ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd", "ReduceSumSquare",
                  "ReduceL1"):
            xi = ints(np.int64, 2, 3, 4, lo=-5, hi=6, r=r)
            yield single(f"{op}_18_i64", op, 18, {"x": xi}, {"keepdims": 0}, {"axes": i64(1, 2)})
            xi32 = ints(np.int32, 2, 3, 4, lo=-5, hi=6, r=r)
            yield single(f"{op}_18_i32", op, 18, {"x": xi32}, {}, {"axes": i64(0)})
    for op in ("ReduceMax", "ReduceMin"):
        x = f32(2, 3, 4, r=r)
        yield single(f"{op}_20_f32", op, 20, {"x": x}, {"keepdims": 0}, {"axes": i64(-2)})
        b = r.integers(0, 2, (2, 3, 4)).astype(np.bool_)
        yield single(f"{op}_20_bool", op, 20, {"x": b}, {"keepdims": 1}, {"axes": i64(2)})
        yield single(f"{op}_20_bool_all", op, 20, {"x": b}, {"keepdims": 0})


def split_cases():
    r = rng()
    x = f32(2, 7, 3, r=r)
    yield single("Split_18_num_outputs_uneven", "Split", 18, {"x": x},
                 {"axis": 1, "num_outputs": 3}, n_out=3)
    yield single("Split_18_num_outputs_4", "Split", 18, {"x": x},
                 {"axis": 1, "num_outputs": 4}, n_out=4)
    xe = ints(np.int64, 6, 4, r=r)
    yield single("Split_18_num_outputs_even", "Split", 18, {"x": xe},
                 {"axis": 0, "num_outputs": 2}, n_out=2)
    yield single("Split_18_num_outputs_neg_axis", "Split", 18, {"x": x},
                 {"axis": -2, "num_outputs": 3}, n_out=3)
    yield single("Split_18_split_input", "Split", 18, {"x": x}, {"axis": 1},
                 {"split": i64(2, 5)}, n_out=2)


def pad_cases():
    r = rng()
    x = f32(2, 3, 4, 5, r=r)
    yield single("Pad_18_axes_constant", "Pad", 18, {"x": x}, {"mode": "constant"},
                 {"pads": i64(1, 2, 0, 3), "value": np.array(1.5, np.float32),
                  "axes": i64(1, 3)})
    yield single("Pad_18_axes_negative", "Pad", 18, {"x": x}, {},
                 {"pads": i64(2, 1), "value": None, "axes": i64(-2)})
    yield single("Pad_18_axes_reflect", "Pad", 18, {"x": x}, {"mode": "reflect"},
                 {"pads": i64(2, 1, 1, 2), "value": None, "axes": i64(2, 3)})
    yield single("Pad_18_axes_edge", "Pad", 18, {"x": x}, {"mode": "edge"},
                 {"pads": i64(1, 0, 0, 3), "value": None, "axes": i64(0, -1)})
    yield single("Pad_18_no_axes", "Pad", 18, {"x": x}, {},
                 {"pads": i64(0, 1, 0, 1, 1, 0, 1, 0)})
    xi = ints(np.int64, 3, 4, r=r)
    yield single("Pad_19_wrap", "Pad", 19, {"x": xi}, {"mode": "wrap"},
                 {"pads": i64(1, 2, 2, 1)})
    yield single("Pad_19_wrap_axes", "Pad", 19, {"x": x}, {"mode": "wrap"},
                 {"pads": i64(3, 2), "value": None, "axes": i64(3)})
    yield single("Pad_21_constant_i32", "Pad", 21, {"x": ints(np.int32, 2, 3, r=r)}, {},
                 {"pads": i64(1, 1, 1, 1), "value": np.array(7, np.int32)})
    yield single("Pad_23_reflect", "Pad", 23, {"x": x}, {"mode": "reflect"},
                 {"pads": i64(0, 0, 1, 1, 0, 0, 1, 1)})


def resize_cases():
    r = rng()
    x = f32(1, 2, 4, 6, r=r)
    none = np.zeros((0,), np.float32)
    yield single("Resize_18_axes_scales_linear", "Resize", 18, {"x": x},
                 {"mode": "linear", "axes": [2, 3]},
                 {"roi": None, "scales": np.array([2.0, 0.5], np.float32)}, tol=1e-5)
    yield single("Resize_18_axes_sizes_nearest", "Resize", 18, {"x": x},
                 {"mode": "nearest", "axes": [3]},
                 {"roi": None, "scales": None, "sizes": i64(9)})
    yield single("Resize_18_axes_negative_cubic", "Resize", 18, {"x": x},
                 {"mode": "cubic", "axes": [-1, -2]},
                 {"roi": None, "scales": np.array([1.5, 2.0], np.float32)}, tol=1e-4)
    for policy in ("not_larger", "not_smaller", "stretch"):
        yield single(f"Resize_18_keep_aspect_{policy}", "Resize", 18, {"x": x},
                     {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": policy},
                     {"roi": None, "scales": None, "sizes": i64(7, 8)})
    yield single("Resize_18_full_sizes", "Resize", 18, {"x": x}, {"mode": "linear"},
                 {"roi": None, "scales": None, "sizes": i64(1, 2, 8, 3)})
    for mode in ("linear", "nearest", "cubic"):
        yield single(f"Resize_19_half_pixel_symmetric_{mode}", "Resize", 19, {"x": x},
                     {"mode": mode, "coordinate_transformation_mode": "half_pixel_symmetric"},
                     {"roi": None, "scales": np.array([1, 1, 1.7, 0.6], np.float32)}, tol=1e-4)
    yield single("Resize_19_half_pixel_symmetric_sizes", "Resize", 19, {"x": x},
                 {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"},
                 {"roi": None, "scales": None, "sizes": i64(1, 2, 7, 4)})
    yield single("Resize_18_antialias", "Resize", 18, {"x": x},
                 {"mode": "linear", "antialias": 1},
                 {"roi": None, "scales": np.array([1, 1, 0.5, 0.5], np.float32)},
                 refused="antialias")
    del none


def scatter_cases():
    r = rng()
    for red in ("max", "min"):
        data = f32(4, 5, r=r)
        idx = np.array([[0, 1, 3], [1, 1, 0], [3, 2, 2]], np.int64)
        upd = f32(3, 3, r=r)
        yield single(f"ScatterElements_18_{red}_axis1", "ScatterElements", 18,
                     {"data": data, "updates": upd}, {"axis": 1, "reduction": red},
                     {"indices": idx}, order=["data", "indices", "updates"])
        di = ints(np.int64, 4, 5, r=r)
        ui = ints(np.int64, 3, 3, r=r)
        yield single(f"ScatterElements_18_{red}_i64_axis0", "ScatterElements", 18,
                     {"data": di, "updates": ui}, {"axis": 0, "reduction": red},
                     {"indices": np.array([[0, 1, 3], [1, 1, 0], [0, 2, 2]], np.int64)},
                     order=["data", "indices", "updates"])
        d3 = f32(4, 3, 2, r=r)
        ind = np.array([[1], [3], [1]], np.int64)
        u3 = f32(3, 3, 2, r=r)
        yield single(f"ScatterND_18_{red}", "ScatterND", 18, {"data": d3, "updates": u3},
                     {"reduction": red}, {"indices": ind}, order=["data", "indices", "updates"])
        ind2 = np.array([[0, 1], [2, 2], [0, 1]], np.int64)
        u2 = ints(np.int32, 3, 2, r=r)
        yield single(f"ScatterND_18_{red}_i32_partial", "ScatterND", 18,
                     {"data": ints(np.int32, 4, 3, 2, r=r), "updates": u2}, {"reduction": red},
                     {"indices": ind2}, order=["data", "indices", "updates"])


def bitwise_cases():
    r = rng()
    for dt in (np.int32, np.int64, np.uint8, np.int8, np.uint16):
        lo, hi = (0, 250) if np.dtype(dt).kind == "u" else (-100, 100)
        a = ints(dt, 3, 4, lo=lo, hi=hi, r=r)
        b = ints(dt, 4, lo=lo, hi=hi, r=r)
        for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
            yield single(f"{op}_18_{np.dtype(dt).name}_bcast", op, 18, {"a": a, "b": b})
        yield single(f"BitwiseNot_18_{np.dtype(dt).name}", "BitwiseNot", 18, {"x": a})
    a = ints(np.int64, 2, 1, 3, r=r)
    b = ints(np.int64, 1, 4, 1, r=r)
    yield single("BitwiseAnd_18_i64_bcast_both", "BitwiseAnd", 18, {"a": a, "b": b})


def activation_cases():
    r = rng()
    x = f32(3, 4, lo=-6, hi=6, r=r)
    yield single("Mish_18_f32", "Mish", 18, {"x": x})
    yield single("Mish_18_f64", "Mish", 18, {"x": x.astype(np.float64)})
    yield single("Mish_22_f32", "Mish", 22, {"x": f32(2, 3, 4, r=r)})
    for approx in ("none", "tanh"):
        yield single(f"Gelu_20_{approx}", "Gelu", 20, {"x": x}, {"approximate": approx})
    yield single("Gelu_20_default_3d", "Gelu", 20, {"x": f32(2, 3, 4, lo=-5, hi=5, r=r)})
    for op, attrs in (("Elu", {"alpha": 0.7}), ("Selu", {}), ("Softplus", {}),
                      ("Softsign", {}), ("HardSigmoid", {"alpha": 0.3}), ("HardSwish", {}),
                      ("ThresholdedRelu", {"alpha": 0.5}), ("Sin", {}), ("Cos", {}),
                      ("Atan", {}), ("Round", {}), ("Sinh", {})):
        yield single(f"{op}_22", op, 22, {"x": x}, attrs)
    y = np.array([1.0, -np.inf, np.inf, np.nan, 0.0, -2.5], np.float32)
    yield single("IsInf_20_f32", "IsInf", 20, {"x": y})
    yield single("IsInf_20_positive_f64", "IsInf", 20, {"x": y.astype(np.float64)},
                 {"detect_negative": 0})
    yield single("IsInf_20_negative", "IsInf", 20, {"x": y}, {"detect_positive": 0})
    yield single("IsNaN_20_f32", "IsNaN", 20, {"x": y})
    yield single("IsNaN_20_f64", "IsNaN", 20, {"x": y.astype(np.float64)})


def pool_cases():
    r = rng()
    x = f32(1, 2, 7, 8, r=r)
    yield single("AveragePool_19_dilations", "AveragePool", 19, {"x": x},
                 {"kernel_shape": [2, 2], "dilations": [2, 2]})
    yield single("AveragePool_19_dilations_pads_strides", "AveragePool", 19, {"x": x},
                 {"kernel_shape": [3, 2], "dilations": [2, 1], "pads": [1, 1, 1, 0],
                  "strides": [2, 1]})
    yield single("AveragePool_19_dilations_count_include_pad", "AveragePool", 19, {"x": x},
                 {"kernel_shape": [2, 3], "dilations": [1, 2], "pads": [1, 1, 1, 1],
                  "count_include_pad": 1})
    yield single("AveragePool_19_dilations_ceil", "AveragePool", 19, {"x": x},
                 {"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [2, 2],
                  "ceil_mode": 1})
    yield single("AveragePool_22_1d", "AveragePool", 22, {"x": f32(2, 3, 9, r=r)},
                 {"kernel_shape": [3], "strides": [2]})
    yield single("MaxPool_22_dilations", "MaxPool", 22, {"x": x},
                 {"kernel_shape": [2, 2], "dilations": [2, 1]})
    yield single("GlobalAveragePool_22", "GlobalAveragePool", 22, {"x": x})
    yield single("LpPool_18_p2", "LpPool", 18, {"x": x}, {"kernel_shape": [2, 3]}, tol=1e-5)
    yield single("LpPool_18_p1_ceil_strides_pads", "LpPool", 18, {"x": x},
                 {"kernel_shape": [3, 2], "p": 1, "strides": [2, 2], "pads": [1, 0, 1, 1],
                  "ceil_mode": 1}, tol=1e-5)
    yield single("LpPool_18_p3_dilations", "LpPool", 18, {"x": x},
                 {"kernel_shape": [2, 2], "p": 3, "dilations": [2, 2]}, tol=1e-5)
    yield single("LpPool_22_1d_same_upper", "LpPool", 22, {"x": f32(2, 3, 9, r=r)},
                 {"kernel_shape": [3], "auto_pad": "SAME_UPPER"}, tol=1e-5)
    yield single("LpPool_11", "LpPool", 11, {"x": x}, {"kernel_shape": [2, 2], "strides": [2, 2]},
                 tol=1e-5)
    yield single("GlobalLpPool_21_p3", "GlobalLpPool", 21, {"x": x}, {"p": 3}, tol=1e-5)
    yield single("GlobalLpPool_2", "GlobalLpPool", 17, {"x": x}, tol=1e-5)
    yield single("GlobalMaxPool_22", "GlobalMaxPool", 22, {"x": x})
    w = f32(3, 2, 3, 3, r=r)
    yield single("Conv_22", "Conv", 22, {"x": x}, {"pads": [1, 1, 1, 1]}, {"w": w},
                 tol=1e-5)
    yield single("ConvTranspose_22", "ConvTranspose", 22, {"x": x}, {"strides": [2, 2]},
                 {"w": f32(2, 3, 2, 2, r=r)})
    yield single("InstanceNormalization_22", "InstanceNormalization", 22, {"x": x}, {},
                 {"s": f32(2, r=r), "b": f32(2, r=r)}, tol=1e-4)


def cast_cases():
    r = rng()
    x = f32(3, 4, lo=-100, hi=100, r=r)
    for opset in (19, 21, 23):
        yield single(f"Cast_{opset}_f32_to_i32", "Cast", opset, {"x": x},
                     {"to": TensorProto.INT32})
        yield single(f"Cast_{opset}_i64_to_f64", "Cast", opset,
                     {"x": ints(np.int64, 5, r=r)}, {"to": TensorProto.DOUBLE})
        yield single(f"CastLike_{opset}_f32_like_f16", "CastLike", opset,
                     {"x": x, "like": np.zeros((1,), np.float16)})
    yield single("Cast_19_saturate_f32_to_f16", "Cast", 19, {"x": x},
                 {"to": TensorProto.FLOAT16, "saturate": 1})
    yield single("Cast_19_to_float8", "Cast", 19, {"x": x}, {"to": 17},
                 refused="FLOAT8E4M3FN")
    yield single("Equal_19_i64_bcast", "Equal", 19,
                 {"a": ints(np.int64, 3, 4, lo=0, hi=3, r=r),
                  "b": ints(np.int64, 4, lo=0, hi=3, r=r)})
    yield single("Equal_19_f32", "Equal", 19, {"a": x, "b": x[:, :1]})


def misc_cases():
    r = rng()
    for opset in (20, 21, 23):
        yield single(f"ConstantOfShape_{opset}_f32", "ConstantOfShape", opset, {},
                     {"value": numpy_helper.from_array(np.array([2.5], np.float32))},
                     {"shape": i64(2, 3)})
    yield single("ConstantOfShape_20_i64_input", "ConstantOfShape", 20,
                 {"shape": i64(3, 1, 2)},
                 {"value": numpy_helper.from_array(np.array([-7], np.int64))})
    x = f32(2, 3, 4, r=r)
    for opset in (19, 21, 23):
        yield single(f"Identity_{opset}", "Identity", opset, {"x": x})
        yield single(f"Reshape_{opset}", "Reshape", opset, {"x": x}, {}, {"s": i64(4, -1)})
        yield single(f"Shape_{opset}_start_end", "Shape", opset, {"x": x},
                     {"start": 1, "end": 3})
        yield single(f"Size_{opset}", "Size", opset, {"x": x})
    for opset in (21, 23):
        yield single(f"Flatten_{opset}", "Flatten", opset, {"x": x}, {"axis": 2})
        yield single(f"Squeeze_{opset}", "Squeeze", opset, {"x": x[:, :1]}, {},
                     {"axes": i64(1)})
        yield single(f"Unsqueeze_{opset}", "Unsqueeze", opset, {"x": x}, {},
                     {"axes": i64(0, -1)})
        yield single(f"Transpose_{opset}", "Transpose", opset, {"x": x}, {"perm": [2, 0, 1]})
        c = helper.make_node("Constant", [], ["c"],
                             value=numpy_helper.from_array(np.arange(4, dtype=np.float32)))
        add = helper.make_node("Add", ["x", "c"], ["y0"])
        yield Case(f"Constant_{opset}", opset, model_of([c, add], {"x": x}, ["y0"], opset),
                   {"x": x})
        yield control_flow_case(opset, x)
    yield single("QuantizeLinear_19_u8", "QuantizeLinear", 19, {"x": x}, {},
                 {"s": np.array(0.05, np.float32), "z": np.array(128, np.uint8)})
    yield single("QuantizeLinear_21_i8_axis", "QuantizeLinear", 21, {"x": x}, {"axis": 1},
                 {"s": np.array([0.02, 0.05, 0.1], np.float32),
                  "z": np.array([0, 3, -2], np.int8)})
    yield single("QuantizeLinear_21_block", "QuantizeLinear", 21, {"x": x},
                 {"axis": 2, "block_size": 2},
                 {"s": f32(2, 3, 2, lo=0.01, hi=0.1, r=r), "z": None}, refused="block_size")
    yield single("DequantizeLinear_19_u8", "DequantizeLinear", 19,
                 {"x": ints(np.uint8, 2, 3, lo=0, hi=255, r=r)}, {},
                 {"s": np.array(0.5, np.float32), "z": np.array(100, np.uint8)})
    yield single("DequantizeLinear_23_i8_axis", "DequantizeLinear", 23,
                 {"x": ints(np.int8, 2, 3, r=r)}, {"axis": 1},
                 {"s": np.array([0.1, 0.2, 0.3], np.float32)})
    g = f32(1, 3, 4, 2, lo=-1.1, hi=1.1, r=r)
    img = f32(1, 2, 5, 6, r=r)
    for mode in ("linear", "nearest", "cubic"):
        yield single(f"GridSample_20_{mode}", "GridSample", 20, {"x": img, "g": g},
                     {"mode": mode, "padding_mode": "border"}, tol=1e-4)
    yield single("GridSample_22_linear_align", "GridSample", 22, {"x": img, "g": g},
                 {"mode": "linear", "align_corners": 1}, tol=1e-4)
    sig = f32(2, 8, 1, r=r)
    yield single("DFT_20_default_axis", "DFT", 20, {"x": sig}, {}, tol=1e-4)
    yield single("DFT_20_axis_input_inverse", "DFT", 20, {"x": f32(2, 6, 3, 2, r=r)},
                 {"inverse": 1}, {"n": None, "axis": np.array(1, np.int64)}, tol=1e-4)
    yield single("DFT_20_onesided_length", "DFT", 20, {"x": f32(3, 10, 1, r=r)},
                 {"onesided": 1}, {"n": np.array(8, np.int64), "axis": np.array(-2, np.int64)},
                 tol=1e-4)
    yield single("DFT_20_length_input", "DFT", 20, {"x": sig, "n": np.array(5, np.int64)},
                 tol=1e-4)
    yield single("DFT_20_axis_computed", "DFT", 20,
                 {"x": sig, "axis": np.array(1, np.int64)}, {}, {"n": None},
                 order=["x", "n", "axis"], refused="axis must be a constant")


def control_flow_case(opset, x):
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    cond = helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0)
    pos = helper.make_node("Greater", ["m", "zero"], ["c"])
    if_node = helper.make_node("If", ["c"], ["y0"], then_branch=then_g, else_branch=else_g)
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, None)])
    loop = helper.make_node("Loop", ["trip", "", "y0"], ["y1"], body=body)
    inits = {"zero": np.array(0.0, np.float32), "trip": np.array(3, np.int64)}
    m = model_of([cond, pos, if_node, loop], {"x": x}, ["y0", "y1"], opset, inits)
    return Case(f"If_Loop_{opset}", opset, m, {"x": x})


def group_norm_cases():
    r = rng()
    x = f32(2, 6, 3, 4, r=r)
    yield single("GroupNormalization_18_3groups", "GroupNormalization", 18, {"x": x},
                 {"num_groups": 3, "epsilon": 1e-3},
                 {"scale": f32(3, r=r), "bias": f32(3, r=r)}, tol=1e-4)
    yield single("GroupNormalization_21_2groups", "GroupNormalization", 21, {"x": x},
                 {"num_groups": 2}, {"scale": f32(6, r=r), "bias": f32(6, r=r)}, tol=1e-4)
    yield single("GroupNormalization_21_6groups_3d", "GroupNormalization", 21,
                 {"x": f32(2, 6, 5, r=r)}, {"num_groups": 6, "epsilon": 1e-2},
                 {"scale": f32(6, r=r), "bias": f32(6, r=r)}, tol=1e-4)


def opset20_23_cases():
    r = rng()
    x = f32(2, 3, 8, r=r)
    yield single("RMSNormalization_23_last", "RMSNormalization", 23, {"x": x}, {},
                 {"scale": f32(8, r=r)}, tol=1e-4)
    yield single("RMSNormalization_23_axis1_eps", "RMSNormalization", 23, {"x": x},
                 {"axis": 1, "epsilon": 1e-2}, {"scale": f32(3, 8, r=r)}, tol=1e-4)
    yield single("RMSNormalization_23_scale_bcast", "RMSNormalization", 23, {"x": x},
                 {"axis": -2}, {"scale": f32(1, 8, r=r)}, tol=1e-4)
    b, h, s, d = 2, 3, 4, 8
    pos = np.array([[0, 1, 2, 3], [5, 2, 7, 1]], np.int64)
    cos = np.cos(f32(10, d // 2, lo=0, hi=6, r=r)).astype(np.float32)
    sin = np.sin(f32(10, d // 2, lo=0, hi=6, r=r)).astype(np.float32)
    x4 = f32(b, h, s, d, r=r)
    for inter in (0, 1):
        yield single(f"RotaryEmbedding_23_4d_interleaved{inter}", "RotaryEmbedding", 23,
                     {"x": x4}, {"interleaved": inter}, {"cos": cos, "sin": sin, "pos": pos},
                     tol=1e-5)
    yield single("RotaryEmbedding_23_3d_heads_partial", "RotaryEmbedding", 23,
                 {"x": f32(b, s, h * d, r=r), "pos": pos},
                 {"num_heads": h, "rotary_embedding_dim": 4},
                 {"cos": cos[:, :2].copy(), "sin": sin[:, :2].copy()},
                 order=["x", "cos", "sin", "pos"], tol=1e-5)
    yield single("RotaryEmbedding_23_no_position_ids", "RotaryEmbedding", 23,
                 {"x": x4, "cos": cos[pos][:, :, :], "sin": sin[pos][:, :, :]}, {},
                 tol=1e-5)
    theta2 = f32(2, 2, 3, lo=-1, hi=1, r=r)
    for ac in (0, 1):
        yield single(f"AffineGrid_20_2d_align{ac}", "AffineGrid", 20, {"theta": theta2},
                     {"align_corners": ac}, {"size": i64(2, 3, 4, 5)})
        yield single(f"AffineGrid_20_3d_align{ac}", "AffineGrid", 20,
                     {"theta": f32(1, 3, 4, lo=-1, hi=1, r=r)}, {"align_corners": ac},
                     {"size": i64(1, 2, 3, 4, 2)})
    img = f32(2, 5, 6, r=r)
    yield single("CenterCropPad_18_crop_and_pad", "CenterCropPad", 18, {"x": img}, {},
                 {"shape": i64(2, 3, 9)})
    yield single("CenterCropPad_18_axes_odd", "CenterCropPad", 18, {"x": img},
                 {"axes": [1, 2]}, {"shape": i64(2, 3)})
    yield single("CenterCropPad_18_negative_axis_pad", "CenterCropPad", 18,
                 {"x": ints(np.int64, 3, 4, r=r)}, {"axes": [-1]}, {"shape": i64(7)})
    yield single("CenterCropPad_18_shape_input", "CenterCropPad", 18,
                 {"x": img, "shape": i64(4, 1)}, {"axes": [2, 1]})
    yield single("AffineGrid_20_size_input", "AffineGrid", 20,
                 {"theta": theta2, "size": i64(2, 1, 1, 3)})


def strs(rows):
    return np.array(rows, dtype=object)


def python_split(values, delimiter, maxsplit):
    """StringSplit's outputs as Python's str.split computes them."""
    parts = [v.split(delimiter or None, maxsplit) for v in values.flat]
    most = max((len(p) for p in parts), default=0)
    y = np.array([p + [""] * (most - len(p)) for p in parts], dtype=object)
    y = y.reshape(values.shape + (most,))
    z = np.array([len(p) for p in parts], np.int64).reshape(values.shape)
    return {"y0": y, "y1": z}


def string_cases():
    x = strs([["a", "bc"], ["", "d\u00e9f"]])
    y = strs(["_1", "2"])
    c = single("StringConcat_20_bcast", "StringConcat", 20, {"x": x, "y": y})
    c.expected = {"y0": strs([[a + b for a, b in zip(row, y)] for row in x])}
    yield c
    a, b = strs([["x", "y"], ["", "z"]]), strs(["x", ""])
    c = single("Equal_19_strings_bcast", "Equal", 19, {"a": a, "b": b})
    c.expected = {"y0": np.array([[p == q for p, q in zip(row, b)] for row in a])}
    yield c
    c = single("StringConcat_20_scalar", "StringConcat", 20, {"x": x, "y": strs("!")})
    c.expected = {"y0": strs([[a + "!" for a in row] for row in x])}
    yield c
    forms = [
        ("delimiter", strs(["a,b,,c", "", "x,"]), {"delimiter": ","}, ",", -1),
        ("delimiter_long", strs([["ab--cd--", "--"]]), {"delimiter": "--"}, "--", -1),
        ("whitespace", strs(["  hello  world ", "one", "   ", "a\tb\nc"]), {}, "", -1),
        ("maxsplit", strs(["a-b-c", "d", "-e-"]), {"delimiter": "-", "maxsplit": 1}, "-", 1),
        ("whitespace_maxsplit", strs([" a b  c ", "x  y"]), {"maxsplit": 1}, "", 1),
    ]
    for tag, values, attrs, delimiter, maxsplit in forms:
        c = single(f"StringSplit_20_{tag}", "StringSplit", 20, {"x": values}, attrs, n_out=2)
        c.expected = python_split(values, delimiter, maxsplit)
        yield c


def optional_cases():
    x = f32(2, 3)
    yield single("OptionalGetElement_18_tensor", "OptionalGetElement", 18, {"x": x})
    has = helper.make_node("OptionalHasElement", ["x"], ["h"])
    cast = helper.make_node("Cast", ["h"], ["y0"], to=TensorProto.INT64)
    yield Case("OptionalHasElement_18_tensor", 18, model_of([has, cast], {"x": x}, ["y0"], 18),
               {"x": x})
    none = helper.make_node("OptionalHasElement", [""], ["h"])
    add = helper.make_node("Add", ["x", "x"], ["y1"])
    yield Case("OptionalHasElement_18_absent", 18,
               model_of([none, cast, add], {"x": x}, ["y0", "y1"], 18), {"x": x})


def attention_case(r, name, b, qn, kvn, sq, skv, h, hv=None, rank=4, past=None, mask=None,
                   attrs=None, n_out=1, refused=None, dtype=np.float32, tol=1e-4):
    """Attention 23: batch b, q/kv heads, q/kv sequence lengths, head sizes h (Q, K) and hv (V);
    past: the past length P (None: no past inputs); mask: None, ("bool" | "float", shape) with
    the shape's -1 standing for P + skv. The bool masks keep key 0 for every query (no row is
    fully masked)."""
    hv = hv or h
    t = (past or 0) + skv
    if rank == 4:
        shapes = [(b, qn, sq, h), (b, kvn, skv, h), (b, kvn, skv, hv)]
    else:
        shapes = [(b, sq, qn * h), (b, skv, kvn * h), (b, skv, kvn * hv)]
    inputs = {n: f32(*sh, lo=-1, hi=1, r=r) for n, sh in zip("qkv", shapes)}
    consts = {}
    if mask is not None:
        kind, shape = mask
        shape = tuple(t if d == -1 else d for d in shape)
        if kind == "bool":
            m = r.uniform(0, 1, shape) < 0.7
            m[..., 0] = True
        else:
            m = f32(*shape, lo=-2, hi=2, r=r)
        inputs["attn_mask"] = m
    elif past is not None:
        consts["attn_mask"] = None
    if past is not None:
        inputs["past_key"] = f32(b, kvn, past, h, lo=-1, hi=1, r=r)
        inputs["past_value"] = f32(b, kvn, past, hv, lo=-1, hi=1, r=r)
    for k, v in inputs.items():  # f16 (or another float type): every float operand
        if v.dtype == np.float32:
            inputs[k] = v.astype(dtype)
    a = dict(attrs or {})
    if rank == 3:
        a.setdefault("q_num_heads", qn)
        a.setdefault("kv_num_heads", kvn)
    order = [n for n in ["q", "k", "v", "attn_mask", "past_key", "past_value"]
             if n in inputs or n in consts]
    return single(f"Attention_23_{name}", "Attention", 23, inputs, a, consts, n_out=n_out,
                  tol=tol, refused=refused, order=order)


def attention_cases():
    r = np.random.default_rng(SEED + 23)
    for b, qn, kvn, sq, skv, h, hv in [(1, 2, 2, 3, 3, 8, 8), (2, 4, 2, 3, 5, 8, 4),
                                      (2, 4, 1, 1, 6, 16, 16), (1, 3, 3, 4, 2, 4, 6),
                                      (3, 6, 3, 2, 2, 8, 8)]:
        tag = f"b{b}_q{qn}_kv{kvn}_sq{sq}_skv{skv}_h{h}_hv{hv}"
        for rank in (4, 3):
            yield attention_case(r, f"{tag}_{rank}d", b, qn, kvn, sq, skv, h, hv, rank=rank)
        yield attention_case(r, f"{tag}_causal", b, qn, kvn, sq, skv, h, hv,
                             attrs={"is_causal": 1})
        yield attention_case(r, f"{tag}_bool_mask", b, qn, kvn, sq, skv, h, hv,
                             mask=("bool", (sq, -1)))
        yield attention_case(r, f"{tag}_float_mask_3d", b, qn, kvn, sq, skv, h, hv, rank=3,
                             mask=("float", (b, 1, sq, -1)))
    # Masks of every broadcast form.
    for kind in ("bool", "float"):
        for shape in [(3, -1), (1, 3, -1), (2, 1, 3, -1), (2, 4, 3, -1), (1, 4, 3, -1)]:
            tag = f"{kind}_mask_{'x'.join('T' if d == -1 else str(d) for d in shape)}"
            yield attention_case(r, tag, 2, 4, 2, 3, 5, 8, mask=(kind, shape))
    # Past and present (past length 0 too), with and without the causal mask and a mask.
    for past in (0, 1, 4):
        for rank in (4, 3):
            tag = f"past{past}_{rank}d"
            yield attention_case(r, tag, 2, 4, 2, 1, 1, 8, past=past, rank=rank, n_out=3)
            yield attention_case(r, tag + "_prompt", 1, 2, 2, 3, 3, 8, past=past, rank=rank,
                                 n_out=3)
            yield attention_case(r, tag + "_causal", 1, 2, 1, 3, 3, 8, past=past, rank=rank,
                                 attrs={"is_causal": 1}, n_out=3)
            yield attention_case(r, tag + "_bool_mask", 2, 2, 2, 2, 2, 8, past=past, rank=rank,
                                 mask=("bool", (2, 1, 2, -1)), n_out=3)
        yield attention_case(r, f"refused_past{past}_present_key_only", 1, 2, 2, 1, 1, 8,
                             past=past, n_out=2, refused="a past needs the present_key and")
    # Attributes.
    for scale in (0.5, 2.0):
        yield attention_case(r, f"scale{scale}", 2, 2, 2, 3, 4, 8, attrs={"scale": scale})
    for cap in (1.0, 4.0):
        yield attention_case(r, f"softcap{cap}", 2, 2, 2, 3, 4, 8,
                             attrs={"softcap": cap, "scale": 1.5})
        yield attention_case(r, f"softcap{cap}_float_mask", 2, 2, 2, 3, 4, 8,
                             attrs={"softcap": cap}, mask=("float", (3, -1)))
        yield attention_case(r, f"softcap{cap}_causal", 1, 2, 2, 4, 4, 8,
                             attrs={"softcap": cap, "is_causal": 1})
    yield attention_case(r, "causal_bool_mask", 2, 4, 2, 4, 4, 8, attrs={"is_causal": 1},
                         mask=("bool", (2, 1, 4, -1)))
    yield attention_case(r, "causal_float_mask", 2, 4, 2, 4, 4, 8, attrs={"is_causal": 1},
                         mask=("float", (4, -1)))
    yield attention_case(r, "causal_longer_kv", 1, 2, 2, 2, 5, 8, attrs={"is_causal": 1})
    yield attention_case(r, "causal_one_query_past", 1, 2, 2, 1, 2, 8, past=3,
                         attrs={"is_causal": 1}, n_out=3)
    yield attention_case(r, "causal_two_queries_past", 1, 2, 2, 2, 2, 8, past=3,
                         attrs={"is_causal": 1}, n_out=3)
    yield attention_case(r, "softmax_precision", 1, 2, 2, 3, 3, 8,
                         attrs={"softmax_precision": 1})
    # Refused: the qk_matmul_output output, f16, bad shapes.
    # The qk_matmul_output output at each of its four stages.
    for mode in (0, 1, 2, 3):
        yield attention_case(r, f"qk_matmul_output_mode{mode}", 2, 2, 2, 3, 4, 8, n_out=4,
                             attrs={"qk_matmul_output_mode": mode, "softcap": 3.0},
                             mask=("float", (3, -1)))
        yield attention_case(r, f"qk_matmul_output_mode{mode}_3d_causal_past", 1, 4, 2, 2, 2,
                             8, rank=3, past=2, n_out=4,
                             attrs={"qk_matmul_output_mode": mode, "is_causal": 1})
    yield attention_case(r, "qk_matmul_output_default_mode", 1, 2, 2, 3, 3, 8, n_out=4)
    yield attention_case(r, "refused_qk_matmul_output_mode4", 1, 2, 2, 3, 3, 8, n_out=4,
                         attrs={"qk_matmul_output_mode": 4},
                         refused="qk_matmul_output_mode 4 is not supported")
    yield attention_case(r, "refused_float64", 1, 2, 2, 3, 3, 8, dtype=np.float64,
                         refused="Q of dtype f64 is not supported")
    # f16 (ONNX Runtime's CPU kernel takes it; dynvm computes in f32 and rounds the outputs).
    f16 = {"dtype": np.float16, "tol": 2e-3}
    yield attention_case(r, "f16_4d", 2, 4, 2, 3, 5, 8, **f16)
    yield attention_case(r, "f16_3d_float_mask", 2, 2, 2, 3, 4, 8, rank=3,
                         mask=("float", (3, -1)), **f16)
    yield attention_case(r, "f16_bool_mask_causal", 1, 2, 2, 4, 4, 8, attrs={"is_causal": 1},
                         mask=("bool", (4, -1)), **f16)
    yield attention_case(r, "f16_past", 2, 2, 1, 1, 1, 8, past=3, n_out=3, **f16)
    yield attention_case(r, "refused_3d_without_heads", 1, 2, 2, 3, 3, 8, rank=3,
                         attrs={"q_num_heads": 0, "kv_num_heads": 0},
                         refused="3-D inputs need q_num_heads")
    yield attention_case(r, "refused_3d_heads_not_dividing", 1, 3, 3, 2, 2, 4, rank=3,
                         attrs={"q_num_heads": 5, "kv_num_heads": 5},
                         refused="is not a positive multiple of its heads")


def refusal_cases():
    x = f32(2, 3)
    yield single("opset_24", "Relu", 24, {"x": x}, refused="opset 24 is not supported")
    yield single("unknown_op_18", "NoSuchOp", 18, {"x": x}, refused="operator NoSuchOp")
    yield single("Col2Im_18", "Col2Im", 18, {"x": f32(1, 4, 4)}, {},
                 {"image_shape": i64(3, 3), "block_shape": i64(2, 2)},
                 refused="operator Col2Im version 18 is not supported")


GROUPS = [reduce_cases, split_cases, pad_cases, resize_cases, scatter_cases, bitwise_cases,
          activation_cases, pool_cases, cast_cases, misc_cases, group_norm_cases, opset20_23_cases,
          string_cases, optional_cases, attention_cases, refusal_cases]


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
            print(c.name, c.opset, "refused: " + c.refused if c.refused else "")
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
