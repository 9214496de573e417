#!/usr/bin/python3
"""Writes mlp.onnx, the model the install consumer compiles: y = Relu(x @ W + b), x: [batch, 4].

Run with Debian's python3 (python3-onnx); prints the outputs main.cc checks for its input.
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

W = np.array([[1, -2, 0.5], [0, 1, 2], [3, 0, -1], [-1, 1, 1]], dtype=np.float32)
b = np.array([0.5, -1, 0.25], dtype=np.float32)
nodes = [helper.make_node('MatMul', ['x', 'W'], ['h']),
         helper.make_node('Add', ['h', 'b'], ['z']),
         helper.make_node('Relu', ['z'], ['y'])]
graph = helper.make_graph(
    nodes, 'consumer', [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['batch', 4])],
    [helper.make_tensor_value_info('y', TensorProto.FLOAT, ['batch', 3])],
    [numpy_helper.from_array(W, 'W'), numpy_helper.from_array(b, 'b')])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)],
                          producer_name='dynvm tests/install_consumer')
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, 'mlp.onnx')
x = np.array([[1, 2, 3, 4], [-1, 0.5, 0, 2]], dtype=np.float32)
print(np.maximum(x @ W + b, 0).tolist())  # [[6.5, 3.0, 5.75], [0.0, 3.5, 2.75]]
