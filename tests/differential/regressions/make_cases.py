"""Writes the hand-made regression cases of tests/differential/regressions/ (replay.py).

The fuzzer saves what it finds there itself (tools/difftest --out; the reduced model, its
inputs and ONNX Runtime's outputs). The cases here pin, on a minimal model each, the bugs the
fuzzer found and the known differences from ONNX Runtime (docs/differential.md), with the
expected values computed independently of both engines: numpy, PyTorch, or ONNX's reference
implementation of the operator. Rerun after changing a case:

    /usr/bin/python3 tests/differential/regressions/make_cases.py
"""
import json
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


def model(nodes, inputs, outputs, opset, inits=()):
    g = h.make_graph(nodes, "case", inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="dynvm-case")
    m.ir_version = 8
    return m


def vi(name, t, dims):
    return h.make_tensor_value_info(name, t, dims)


def const(name, arr):
    return h.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr)))


def write(name, m, inputs, expected, status, about, expected_from, tolerance=None, **extra):
    path = os.path.join(HERE, name)
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)
    onnx.save(m, os.path.join(path, "model.onnx"))
    for k, v in inputs.items():
        np.save(os.path.join(path, f"input_{k}.npy"), v)
    for k, v in expected.items():
        np.save(os.path.join(path, f"expected_{k}.npy"), v)
    case = {"status": status, "about": about, "expected_from": expected_from,
            "tolerance": tolerance or {}}
    case.update(extra)
    with open(os.path.join(path, "case.json"), "w") as f:
        json.dump(case, f, indent=1, sort_keys=True)


def fixed_bugs():
    # Mul(Size(x), Sign(Size(x))): the shape function of Sign handed Size's content on.
    write("sign-of-a-size",
          model([h.make_node("Size", ["x"], ["s"]), h.make_node("Sign", ["s"], ["t"]),
                 h.make_node("Mul", ["s", "t"], ["y"])],
                [vi("x", T.UINT8, [1, "n"])], [vi("y", T.INT64, None)], 10),
          {"x": np.zeros((1, 2), np.uint8)}, {"y": np.array(2, np.int64)}, "fixed",
          "Size(x) * Sign(Size(x)) compiled as Size(x)^2 (fda7585, compiler_ops_shape_util_test)",
          "numpy")
    write("nonzero-of-a-scalar",
          model([h.make_node("NonZero", ["x"], ["y"])], [vi("x", T.FLOAT, [])],
                [vi("y", T.INT64, None)], 13),
          {"x": np.array(2.5, np.float32)}, {"y": np.zeros((1, 1), np.int64)}, "fixed",
          "NonZero of a scalar: [1, n] as numpy (8144dea, compiler_ops_tensor_test)", "numpy")
    x = np.array([[-425]], np.int64)
    write("slice-backwards-from-before-the-start",
          model([const("st", [-3]), const("en", [INT64_MIN]), const("ax", [0]),
                 const("sp", [-2]), h.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
                [vi("x", T.INT64, [1, 1])], [vi("y", T.INT64, None)], 14),
          {"x": x}, {"y": x[0:1]}, "fixed",
          "Slice start -3 of one row stepping backwards takes row 0 (spec: start clamped to "
          "[0, n-1]) (ed593d1, compiler_ops_tensor_test)", "the spec's clamping")
    write("div-of-a-size-by-a-negative",
          model([h.make_node("Size", ["x"], ["s"]), const("d", np.array(-2, np.int64)),
                 h.make_node("Div", ["s", "d"], ["y"])],
                [vi("x", T.FLOAT, ["n", 3])], [vi("y", T.INT64, None)], 13),
          {"x": np.zeros((1, 3), np.float32)}, {"y": np.array(-1, np.int64)}, "fixed",
          "integer Div truncates: 3 / -2 = -1, not floor's -2 (db354d8, "
          "compiler_ops_elementwise_test)", "C's truncation")
    xg = np.array([[[[1, 2, 4], [-1, 3, 0.5]]]], np.float32)
    grid = np.array([[[[-1.7, 0.3], [1.4, -1.2], [0.2, 2.5], [-3.1, -2.2]]]], np.float32)
    # torch.nn.functional.grid_sample(x, grid, "bicubic", "border", align_corners=False),
    # torch 1.13, float64.
    torch_border = np.array([[[[-0.6479999999999992, 4.165375000000001, 2.7434999999999996,
                                1.0]]]], np.float32)
    write("gridsample-bicubic-border",
          model([h.make_node("GridSample", ["x", "g"], ["y"], mode="bicubic",
                             padding_mode="border")],
                [vi("x", T.FLOAT, [1, 1, 2, 3]), vi("g", T.FLOAT, [1, 1, 4, 2])],
                [vi("y", T.FLOAT, None)], 16),
          {"x": xg, "g": grid}, {"y": torch_border}, "fixed",
          "bicubic GridSample pads each tap, not the coordinate (5f5e6d4, kernels_vision_test)",
          "pytorch", {"y": {"depth": 4}})
    write("broadcast-of-one-and-zero",
          model([h.make_node("Add", ["a", "b"], ["y"])],
                [vi("a", T.FLOAT, ["p"]), vi("b", T.FLOAT, ["q"])], [vi("y", T.FLOAT, None)], 13),
          {"a": np.ones(1, np.float32), "b": np.ones(0, np.float32)},
          {"y": np.ones(0, np.float32)}, "fixed",
          "two symbols 1 and 0 broadcast to 0, not max = 1 (compiler_op_registry_test)", "numpy")


def fixed_open_bugs():
    """Bugs first saved as open cases, fixed since."""
    xn = np.array([1.0, -2.0], np.float32)
    write("two-outputs-computing-the-same-value",
          model([h.make_node("Neg", ["x"], ["a"]), h.make_node("Neg", ["x"], ["b"])],
                [vi("x", T.FLOAT, [2])], [vi("a", T.FLOAT, None), vi("b", T.FLOAT, None)], 13),
          {"x": xn}, {"a": -xn, "b": -xn}, "fixed",
          "optimized, CSE merged the two Negs and output 'b' came out as 'a_1' (compiler_test "
          "OutputsMergedByTheOptimizerKeepTheirNames)", "numpy")
    ga = np.array([[0.5, -1.0, 2.0, 0.25, 1.5], [-0.75, 3.0, 1.0, -2.0, 0.5]], np.float32)
    gb = np.array([[1.0, 0.5, -1.5, 2.0, 0.0], [0.25, -0.5, 1.0, 1.5, -1.0],
                   [2.0, 1.0, 0.5, -0.25, 3.0]], np.float32)
    gc = np.array([1.0, -2.0, 3.5], np.float32)
    write("gemm-alpha-with-a-bias-row",
          model([h.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.5, transB=1)],
                [vi("a", T.FLOAT, [2, 5]), vi("b", T.FLOAT, [3, 5]), vi("c", T.FLOAT, [3])],
                [vi("y", T.FLOAT, None)], 13),
          {"a": ga, "b": gb, "c": gc},
          {"y": (0.5 * ga.astype(np.float64) @ gb.T.astype(np.float64) + gc).astype(np.float32)},
          "fixed", "the oneDNN Gemm (kernels/dnnl/matmul.cc) scaled C by alpha when C is one "
          "row it passed as the primitive's bias: alpha (A B + C) (kernels_dnnl_test "
          "GemmScalesOnlyTheProductByAlpha)", "numpy", {"y": {"depth": 2}})


def spec_differences():
    xe = np.zeros((1, 2, 1, 0), np.int64)
    write("argmin-of-an-empty-tensor",
          model([h.make_node("ArgMin", ["x"], ["y"], axis=-3, keepdims=1)],
                [vi("x", T.INT64, [1, 2, 1, 0])], [vi("y", T.INT64, None)], 10),
          {"x": xe}, {"y": np.zeros((1, 1, 1, 0), np.int64)}, "spec",
          "ONNX Runtime keeps the reduced axis of an empty input: [1, 2, 1, 0]", "onnx shape "
          "inference (the reduced axis becomes 1)")
    write("reducesum-of-an-empty-tensor-negative-axes",
          model([h.make_node("ReduceSum", ["x"], ["y"], axes=[0, -2], keepdims=0)],
                [vi("x", T.FLOAT, [0, 1, 1])], [vi("y", T.FLOAT, None)], 12),
          {"x": np.zeros((0, 1, 1), np.float32)}, {"y": np.zeros(1, np.float32)}, "spec",
          "ONNX Runtime gives [1, 1] for axes [0, -2] without keepdims", "numpy (sum over "
          "nothing is 0)")
    xs = np.array([[-425]], np.int32)
    write("slice-int64-max-end-stepping-backwards",
          model([const("st", [-2, -3]), const("en", [1, INT64_MAX]), const("ax", [-2, -1]),
                 const("sp", [1, -2]), h.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
                [vi("x", T.INT32, [1, 1])], [vi("y", T.INT32, None)], 13),
          {"x": xs}, {"y": np.zeros((1, 0), np.int32)}, "spec",
          "an end of INT64_MAX stepping backwards clamps to n - 1 = 0: nothing; ONNX Runtime "
          "takes one element", "the spec's clamping")
    xm = np.array([[[[2.5]], [[-1.0]], [[4.0]]]], np.float32)  # one element per channel
    write("mvn-of-a-constant-slice",
          model([h.make_node("MeanVarianceNormalization", ["x"], ["y"])],
                [vi("x", T.FLOAT, [1, 3, 1, 1])], [vi("y", T.FLOAT, None)], 13),
          {"x": xm}, {"y": np.zeros((1, 3, 1, 1), np.float32)}, "spec",
          "(x - mean) / (sqrt(var) + 1e-9) is 0 for a constant slice (the spec's function "
          "body); ONNX Runtime leaves the epsilon out: NaN", "the spec's function body")
    write("reducemean-of-nothing",
          model([h.make_node("ReduceMean", ["x"], ["y"])], [vi("x", T.FLOAT, [0, 1])],
                [vi("y", T.FLOAT, None)], 8),
          {"x": np.zeros((0, 1), np.float32)}, {"y": np.full((1, 1), np.nan, np.float32)},
          "spec", "a mean over nothing is 0 / 0 = NaN (numpy, ONNX's reference "
          "implementation); ONNX Runtime gives 0", "numpy")
    write("dynamicquantizelinear-of-zeros",
          model([h.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
                [vi("x", T.FLOAT, [3])], [vi("y", T.UINT8, None), vi("s", T.FLOAT, None),
                                          vi("z", T.UINT8, None)], 11),
          {"x": np.zeros(3, np.float32)}, {"s": np.array(0, np.float32)}, "spec",
          "scale = (max(0, x) - min(0, x)) / 255 = 0 by the spec's formula; ONNX Runtime "
          "gives 1 (y and the zero point divide by it: undefined, not compared)",
          "the spec's formula", checked=["s"])
    xd = np.array([3.26437751608172, -0.3, 2.0], np.float64)
    write("shrink-of-float64",
          model([h.make_node("Shrink", ["x"], ["y"], bias=0.47635418176651, lambd=0.5)],
                [vi("x", T.DOUBLE, [3])], [vi("y", T.DOUBLE, None)], 13),
          {"x": xd},
          {"y": np.where(xd > 0.5, xd - np.float64(np.float32(0.47635418176651)),
                         np.where(xd < -0.5, xd + np.float64(np.float32(0.47635418176651)),
                                  0.0))},
          "spec", "float64 Shrink in float64; ONNX Runtime rounds through float32",
          "numpy (the attribute is a float32)")
    n = np.arange(6)
    black = 0.42 - 0.5 * np.cos(2 * np.pi * n / 5) + 0.08 * np.cos(4 * np.pi * n / 5)
    write("blackmanwindow-float64",
          model([const("n", np.array(6, np.int64)),
                 h.make_node("BlackmanWindow", ["n"], ["y"], output_datatype=11, periodic=0)],
                [], [vi("y", T.DOUBLE, None)], 17),
          {}, {"y": black}, "spec", "a float64 window in float64; ONNX Runtime computes it "
          "in float32 (1.5e-8 where the window is 0)", "numpy, the spec's formula",
          {"y": {"depth": 2}})
    # Resize, pytorch_half_pixel, an output of length 1 (floor(3 x 0.5)): the operator's text
    # maps its coordinate to 0 ("length_resized > 1 ? ... : 0"), and so does ONNX Runtime;
    # ONNX's reference implementation takes -0.5 where scale x input is 1 and the half-pixel
    # formula otherwise (here 0.5: the second element), which onnx/onnx#4275 reports as a
    # contradiction of the text. No conformance data tells them apart (their width-1 cases are
    # linear, where -0.5 and 0 give the same value). dynvm follows the text (seed 7 graphs
    # 8083, 8911, 11847, 13328, 25545: cubic, where the two differ).
    xr = np.array([1.8604169, 0.6999027, -1.3202994], np.float32)
    write("resize-pytorch-half-pixel-to-one",
          model([const("roi", np.zeros(0, np.float32)), const("sc", np.array([0.5], np.float32)),
                 h.make_node("Resize", ["x", "roi", "sc"], ["y"], mode="nearest",
                             coordinate_transformation_mode="pytorch_half_pixel",
                             nearest_mode="round_prefer_ceil")],
                [vi("x", T.FLOAT, [3])], [vi("y", T.FLOAT, None)], 11),
          {"x": xr}, {"y": xr[:1]}, "fixed",
          "an output of length 1 takes the input's coordinate 0, as the operator's text says "
          "and ONNX Runtime does (ONNX's reference implementation takes the half-pixel "
          "coordinate 0.5 here: onnx/onnx#4275)", "the Resize operator's text")
    # MatMul with an empty batch dim against a 1-D operand: numpy's answer.
    a = np.zeros((6, 0, 1, 2), np.float32)
    b = np.array([-1.625, 3.125], np.float32)
    write("matmul-empty-batch",
          model([h.make_node("MatMul", ["a", "b"], ["y"])],
                [vi("a", T.FLOAT, [6, 0, 1, 2]), vi("b", T.FLOAT, [2])],
                [vi("y", T.FLOAT, None)], 12),
          {"a": a, "b": b}, {"y": np.matmul(a, b)}, "spec",
          "ONNX Runtime refuses it ('left operand cannot broadcast on dim 1')", "numpy")
    # MaxUnpool: the indices address the inferred unpooled shape, zero-padded to output_shape
    # (ONNX's own test data, test_maxunpool_export_with_output_shape); ONNX Runtime and PyTorch
    # read them in output_shape.
    xu = np.array([[[[5, 6], [7, 8]]]], np.float32)
    iu = np.array([[[[5, 7], [13, 15]]]], np.int64)
    yu = np.zeros((1, 1, 5, 5), np.float32)
    yu[0, 0, 1, 1], yu[0, 0, 1, 3], yu[0, 0, 3, 1], yu[0, 0, 3, 3] = 5, 6, 7, 8
    write("maxunpool-with-output-shape",
          model([const("s", np.array([1, 1, 5, 5], np.int64)),
                 h.make_node("MaxUnpool", ["x", "i", "s"], ["y"], kernel_shape=[2, 2],
                             strides=[2, 2])],
                [vi("x", T.FLOAT, [1, 1, 2, 2]), vi("i", T.INT64, [1, 1, 2, 2])],
                [vi("y", T.FLOAT, None)], 11),
          {"x": xu, "i": iu}, {"y": yu}, "spec",
          "the indices address the inferred 4x4 shape, padded to 5x5 (ONNX's node test data); "
          "ONNX Runtime and PyTorch address output_shape", "ONNX's test data "
          "(test_maxunpool_export_with_output_shape)")


def open_bugs():
    """dynvm bugs the fuzzer found that are not fixed (docs/differential.md, "Open bugs"):
    replayed as XFAIL until they pass."""
    body = h.make_graph([h.make_node("Identity", ["cin"], ["cout"]),
                         h.make_node("Identity", ["c"], ["cn"])], "body",
                        [vi("i", T.INT64, []), vi("cin", T.BOOL, []), vi("c", T.INT64, None)],
                        [vi("cout", T.BOOL, None), vi("cn", T.INT64, None)])
    write("loop-trip-count-also-carried",
          model([const("m", np.array(3, np.int64)),
                 h.make_node("Loop", ["m", "", "m"], ["y"], body=body)], [],
                [vi("y", T.INT64, None)], 13),
          {}, {"y": np.array(3, np.int64)}, "fixed",
          "a Loop whose trip count (a constant) is also a carried initial value failed to "
          "compile ('value %0 (i64[]) has no register here': the constant was not loaded, read "
          "only for its content) (compiler_test CarriedValuesKeepTheDataOfWhatTheyStartAs)",
          "numpy")
    then_b = h.make_graph([const("z", np.array(0.0, np.float32)),
                           h.make_node("Greater", ["v", "z"], ["t"])], "then", [],
                          [vi("t", T.BOOL, None)])
    else_b = h.make_graph([h.make_node("Identity", ["c"], ["e"])], "else", [],
                          [vi("e", T.BOOL, None)])
    write("if-of-branch-ranks-returning-an-input",
          model([h.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)],
                [vi("c", T.BOOL, []), vi("v", T.FLOAT, [1])], [vi("y", T.BOOL, None)], 14),
          {"c": np.array(False), "v": np.array([1.5], np.float32)}, {"y": np.array(False)},
          "fixed", "InternalError 'an output of unknown shape is not pool-owned': an If whose "
          "branches differ in rank returns a branch value that is a function input (now copied "
          "by an Identity kernel with a dynamic output; compiler_test "
          "OutputOfUnknownRankThatIsAnInputIsCopied)", "numpy")
    write("split-to-sequence-of-an-empty-tensor",
          model([h.make_node("SplitToSequence", ["x"], ["s"], axis=1, keepdims=1),
                 h.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
                [vi("x", T.BOOL, [0, 3])], [vi("y", T.BOOL, None)], 13),
          {"x": np.zeros((0, 3), bool)}, {"y": np.zeros((0, 1), bool)}, "fixed",
          "OutOfRangeError 'view offset 1 outside a storage of 0 bytes': SplitToSequence of an "
          "empty tensor along a nonempty axis (onnx_sequence_test "
          "SplitToSequenceOfAnEmptyTensorGivesEmptyPieces)", "numpy (three [0, 1] pieces)")


def if_result_carried():
    c = np.arange(25, dtype=np.int64).reshape(5, 5) - 12
    then_b = h.make_graph([h.make_node("Identity", ["c"], ["t"])], "then", [],
                          [vi("t", T.INT64, None)])
    else_b = h.make_graph([h.make_node("Abs", ["c"], ["e"])], "else", [],
                          [vi("e", T.INT64, None)])
    body = h.make_graph([h.make_node("Identity", ["cin"], ["cout"]),
                         h.make_node("Gather", ["big", "it"], ["g"], axis=2),
                         h.make_node("Identity", ["s"], ["so"])], "body",
                        [vi("it", T.INT64, []), vi("cin", T.BOOL, []), vi("s", T.INT64, None)],
                        [vi("cout", T.BOOL, None), vi("so", T.INT64, None),
                         vi("g", T.FLOAT, None)])
    big = np.ones((1, 5, 3), np.float32)
    write("if-result-carried-by-a-loop",
          model([const("m", np.array(3, np.int64)),
                 h.make_node("If", ["cond"], ["i"], then_branch=then_b, else_branch=else_b),
                 h.make_node("Loop", ["m", "", "i"], ["sf", "gs"], body=body)],
                [vi("cond", T.BOOL, []), vi("c", T.INT64, [5, 5]), vi("big", T.FLOAT, [1, 5, 3])],
                [vi("sf", T.INT64, None), vi("gs", T.FLOAT, None)], 11),
          {"cond": np.array(False), "c": c, "big": big},
          {"sf": np.abs(c), "gs": np.moveaxis(big, 2, 0)[:, :, :, None].reshape(3, 1, 5)},
          "fixed", "an If result made in a branch (Abs) is a Loop's carried initial value; the "
          "body's Gather wrote over its storage and the loop returned the bits of 1.0f "
          "(4575657222473777152), optimized and not (compiler_test "
          "RegionResultsCarriedThroughALoopKeepTheirValues)", "numpy")


def loop_result_carried():
    c = np.arange(25, dtype=np.int64).reshape(5, 5) - 12

    def body(name, op):
        nodes = [h.make_node("Identity", ["cin"], ["cout"]), h.make_node(op, ["s"], ["so"])]
        outs = [vi("cout", T.BOOL, None), vi("so", T.INT64, None)]
        if op == "Identity":
            nodes.append(h.make_node("Gather", ["big", "it"], ["g"], axis=2))
            outs.append(vi("g", T.FLOAT, None))
        return h.make_graph(nodes, name, [vi("it", T.INT64, []), vi("cin", T.BOOL, []),
                                          vi("s", T.INT64, None)], outs)
    big = np.ones((1, 5, 3), np.float32)
    write("loop-result-carried-through-a-loop",
          model([const("m", np.array(3, np.int64)),
                 h.make_node("Loop", ["m", "", "c"], ["l1"], body=body("b1", "Abs")),
                 h.make_node("Loop", ["m", "", "l1"], ["sf", "gs"], body=body("b2", "Identity"))],
                [vi("c", T.INT64, [5, 5]), vi("big", T.FLOAT, [1, 5, 3])],
                [vi("sf", T.INT64, None), vi("gs", T.FLOAT, None)], 11),
          {"c": c, "big": big},
          {"sf": np.abs(c), "gs": np.moveaxis(big, 2, 0)[:, :, :, None].reshape(3, 1, 5)},
          "fixed", "a Loop's result is the next Loop's carried initial value, passed through "
          "unchanged while the body writes a Gather: the bits of 1.0f came out, optimized and "
          "not (compiler_test RegionResultsCarriedThroughALoopKeepTheirValues)", "numpy")


def limitations():
    write("concatfromsequence-of-unknown-rank",
          model([h.make_node("SplitToSequence", ["x"], ["s"], axis=0),
                 h.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
                [h.make_tensor_value_info("x", T.FLOAT, None)], [vi("y", T.FLOAT, None)], 13),
          {"x": np.ones((2, 3), np.float32)}, {}, "error",
          "ConcatFromSequence needs the elements' rank at compile time (docs/onnx.md); an "
          "input without a declared shape has none", "", error="UnimplementedError")
    names = ["x", "s", "b", "m", "v"]
    write("batchnorm-scale-of-another-length",
          model([h.make_node("BatchNormalization", names, ["y"])],
                [vi("x", T.FLOAT, [1, 3, 2])] + [vi(n, T.FLOAT, [2 if n == "s" else 3])
                                                 for n in names[1:]],
                [vi("y", T.FLOAT, None)], 15),
          dict({"x": np.ones((1, 3, 2), np.float32), "s": np.ones(2, np.float32)},
               **{n: np.ones(3, np.float32) for n in names[2:]}), {}, "error",
          "a BatchNormalization scale of 2 values for 3 channels is refused at compile time, "
          "naming the node (ONNX Runtime: 'Invalid input scale'; compiler_test "
          "BatchNormParametersOfAnotherLengthThanTheChannelsAreRefused)", None,
          error="scale holds 2 values, but X has 3 channels")


if __name__ == "__main__":
    fixed_bugs()
    fixed_open_bugs()
    spec_differences()
    open_bugs()
    if_result_carried()
    loop_result_carried()
    limitations()
    print("cases written to", HERE, file=sys.stderr)
