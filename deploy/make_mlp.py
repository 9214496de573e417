#!/usr/bin/env python3
"""Writes deploy/model-repository/mlp/1/model.onnx: a small MLP (x: f32[batch, 4] -> Gemm 4x16,
Relu, Gemm 16x3, Softmax -> probs: f32[batch, 3]) with fixed, seeded weights. The file is
checked in (about 500 bytes); this script says how it was made.

    /usr/bin/python3 deploy/make_mlp.py [OUT.onnx]
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "deploy/model-repository/mlp/1/model.onnx"
    rng = np.random.default_rng(7)
    w1 = rng.standard_normal((4, 16)).astype(np.float32)
    b1 = rng.standard_normal(16).astype(np.float32) * 0.1
    w2 = rng.standard_normal((16, 3)).astype(np.float32)
    b2 = np.zeros(3, np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, out)


if __name__ == "__main__":
    main()
