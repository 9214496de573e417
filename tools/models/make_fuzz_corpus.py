#!/usr/bin/python3
"""Writes the seed corpus of the ONNX importer fuzzer (compiler/onnx/fuzz_corpus/): tiny models
that reach the importer's main paths (initializers, Constant nodes, dim_param symbols, If, Loop
reading outer values, Scan, LSTM, shape arithmetic, attribute and tensor forms).

  /usr/bin/python3 tools/models/make_fuzz_corpus.py

Files named regress_*.onnx in that folder are inputs the fuzzer once crashed on, kept by hand.
"""
import os

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "compiler", "onnx", "fuzz_corpus")
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def save(name, graph, opset=13):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="dynvm")
    with open(os.path.join(OUT, name + ".onnx"), "wb") as f:
        f.write(model.SerializeToString())


def main():
    os.makedirs(OUT, exist_ok=True)
    save("add_bias", helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["y"])], "g", [vi("x", F, ["batch", 3])], [vi("y", F, ["batch", 3])],
        [numpy_helper.from_array(np.arange(3, dtype=np.float32), "b")]))
    save("constant_reshape", helper.make_graph(
        [helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([3, -1], np.int64))),
         helper.make_node("Reshape", ["x", "s"], ["r"]),
         helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0])],
        "g", [vi("x", F, [6])], [vi("y", F, None)]))
    save("shape_arith", helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
         helper.make_node("Range", ["zero", "n", "one"], ["r"]),
         helper.make_node("Unsqueeze", ["r", "zero1"], ["u"]),
         helper.make_node("Expand", ["u", "s2"], ["y"])],
        "g", [vi("x", I64, ["n", 2])], [vi("y", I64, None)],
        [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(1, np.int64), "one"),
         numpy_helper.from_array(np.array([1], np.int64), "zero1"),
         numpy_helper.from_array(np.array([1, 1], np.int64), "s2")]))
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [vi("t", F, [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", F, [2])])
    save("if", helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "g",
        [vi("c", B, []), vi("x", F, [2])], [vi("y", F, [2])]))
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Add", ["acc", "x"], ["acc_out"]),
         helper.make_node("Unsqueeze", ["i", "axes"], ["i1"]),
         helper.make_node("Cast", ["i1"], ["scan"], to=F)],
        "body", [vi("i", I64, []), vi("cond", B, []), vi("acc", F, [2])],
        [vi("cond_out", B, []), vi("acc_out", F, [2]), vi("scan", F, [1])],
        [numpy_helper.from_array(np.array([0], np.int64), "axes")])
    save("loop", helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["y", "ys"], body=body)], "g",
        [vi("n", I64, []), vi("x", F, [2])], [vi("y", F, [2]), vi("ys", F, None)]))
    scan_body = helper.make_graph(
        [helper.make_node("Add", ["s", "xt"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["o"])],
        "body", [vi("s", F, [2]), vi("xt", F, [2])], [vi("s_out", F, [2]), vi("o", F, [2])])
    save("scan", helper.make_graph(
        [helper.make_node("Scan", ["init", "xs"], ["y", "z"], body=scan_body, num_scan_inputs=1,
                          scan_input_directions=[1], scan_output_axes=[1])],
        "g", [vi("init", F, [2]), vi("xs", F, ["t", 2])], [vi("y", F, [2]), vi("z", F, None)]), opset=11)
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((1, 8, 3)).astype(np.float32), "W")
    r = numpy_helper.from_array(rng.standard_normal((1, 8, 2)).astype(np.float32), "R")
    save("lstm", helper.make_graph(
        [helper.make_node("LSTM", ["x", "W", "R"], ["y", "h"], hidden_size=2, direction="forward", clip=3.0)], "g",
        [vi("x", F, ["seq", 1, 3])], [vi("y", F, None), vi("h", F, None)], [w, r]), opset=14)
    save("softmax_old", helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], axis=1), helper.make_node("ArgMax", ["y"], ["a"], axis=1)], "g",
        [vi("x", F, [2, 2, 2])], [vi("a", I64, None)]), opset=11)
    save("slice_concat", helper.make_graph(
        [helper.make_node("Slice", ["x", "st", "en"], ["s"]),
         helper.make_node("Concat", ["s", "x"], ["c"], axis=0),
         helper.make_node("TopK", ["c", "k"], ["v", "i"]),
         helper.make_node("Where", ["m", "v", "v"], ["y"])],
        "g", [vi("x", F, [4]), vi("m", B, [2])], [vi("y", F, None), vi("i", I64, None)],
        [numpy_helper.from_array(np.array([1], np.int64), "st"), numpy_helper.from_array(np.array([3], np.int64), "en"),
         numpy_helper.from_array(np.array([2], np.int64), "k")]))
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Sample", ["logits", "t", "seed", "step"], ["tok"], domain="dynvm"),
         helper.make_node("Emit", ["tok"], [], domain="dynvm", stream=1)],
        "g", [vi("logits", F, [1, 5]), vi("t", F, []), vi("seed", I64, []), vi("step", I64, [])],
        [vi("tok", I64, [1])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("dynvm", 1)], producer_name="dynvm")
    with open(os.path.join(OUT, "dynvm_ops.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    ext = helper.make_tensor("w", F, [3], [1, 2, 3])
    ext.ClearField("float_data")
    ext.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "../outside.bin"), ("offset", "0"), ("length", "12")):
        e = ext.external_data.add()
        e.key, e.value = k, v
    save("external", helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g", [vi("x", F, [3])], [vi("y", F, [3])], [ext]))
    S = TensorProto.STRING  # docs/strings.md: a string input, a string initializer, string ops
    save("strings", helper.make_graph(
        [helper.make_node("StringNormalizer", ["x"], ["n"], case_change_action="LOWER", stopwords=["the"]),
         helper.make_node("Equal", ["n", "w"], ["e"]),
         helper.make_node("Cast", ["e"], ["y"], to=S)],
        "g", [vi("x", S, ["n"])], [vi("y", S, None)],
        [helper.make_tensor("w", S, [1], [b"caf\xc3\xa9"])]))
    for name in sorted(os.listdir(OUT)):
        print(name, os.path.getsize(os.path.join(OUT, name)))


if __name__ == "__main__":
    main()
