#!/usr/bin/python3
"""Writes the model repository server-bench runs against (docs/serving.md, "Measurements"):
  oneop     Relu on f32[1,16]: what the server adds to the smallest run
  gemm      Gemm f32[64,256] x [256,256] + Relu (about 90 us a run on one core)
  gemm_big  Gemm f32[128,512] x [512,512] + Relu (about 0.75 ms)
  charlm    a link to deploy/model-repository/charlm (the first-token measurement)
  encoder_s32, encoder_s128 (with --encoder; needs PyTorch) tools/bench/encoder_bench.py's
            classifier (the model of batching_bench.py) at sequence 32 and 128, symbolic batch:
            token ids (INT64) and a padding mask (BOOL) in, 10 logits out
  bert_s8, bert_s128 (with --bert; needs PyTorch) the same classifier with BERT-base's encoder
            (d_model 768, 12 heads, 12 layers, ff 3072: 85 M parameters, 340 MB)
each with 2 instances.

    /usr/bin/python3 tools/server/make_bench_repo.py DIR [--encoder] [--bert]
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def save(repo, name, nodes, x_shape, y_shape, inits=()):
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], list(inits))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              os.path.join(repo, name, "1", "model.onnx"))
    with open(os.path.join(repo, name, "config.json"), "w") as f:
        json.dump({"instances": 2}, f)


def save_encoders(repo, prefix="encoder", seqs=(32, 128), dims=None):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
    import encoder_bench
    torch.manual_seed(0)
    model = encoder_bench.Classifier(**(dims or {})).eval()
    if dims:  # each layer its own weights (encoder_bench.distinct_layers)
        encoder_bench.distinct_layers(model)
    for seq in seqs:
        name = f"{prefix}_s{seq}"
        os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
        tokens, pad = encoder_bench.inputs_for(2, seq, 1)
        torch.onnx.export(model, (tokens, pad), os.path.join(repo, name, "1", "model.onnx"), opset_version=17,
                          input_names=["tokens", "pad"], output_names=["y"],
                          dynamic_axes={"tokens": {0: "batch"}, "pad": {0: "batch"}, "y": {0: "batch"}})
        with open(os.path.join(repo, name, "config.json"), "w") as f:
            json.dump({"instances": 2, "bounds": {"batch": 64}}, f)


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):  # --help, or no DIR: not a directory name
        print(__doc__)
        sys.exit(0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2)
    repo = sys.argv[1]
    rng = np.random.default_rng(0)
    save(repo, "oneop", [helper.make_node("Relu", ["x"], ["y"])], [1, 16], [1, 16])
    for name, m, k in (("gemm", 64, 256), ("gemm_big", 128, 512)):
        w = numpy_helper.from_array(rng.standard_normal((k, k)).astype(np.float32), "w")
        save(repo, name, [helper.make_node("Gemm", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
             [m, k], [m, k], [w])
    link = os.path.join(repo, "charlm")
    if not os.path.exists(link):
        os.symlink(os.path.join(ROOT, "deploy/model-repository/charlm"), link)
    if "--encoder" in sys.argv[2:]:
        save_encoders(repo)
    if "--bert" in sys.argv[2:]:
        save_encoders(repo, "bert", (8, 128), {"d": 768, "heads": 12, "layers": 12, "ff": 3072})


if __name__ == "__main__":
    main()
