#!/usr/bin/env python3
"""dynvm-server against independent clients: Python's http.client (REST and Server-Sent
Events) and Debian's grpcio with messages generated at test time (protoc --python_out) from the
project's grpc_predict_v2.proto and a stub written here. Loopback only, free ports.

Oracles: vm-run on the same inputs (outputs byte-identical), numpy (the MLP), the inputs
themselves (identity per dtype), and vm-run's streamed text for the char LM (the demo's).

    DYNVM_SERVER=... DYNVM_VM_RUN=... DYNVM_VM_COMPILE=... /usr/bin/python3 tools/server/server_test.py

Exits 77 (skipped) when grpcio or protobuf cannot be imported.
"""
import glob
import http.client
import importlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import numpy as np

try:
    import grpc
    import google.protobuf  # noqa: F401
except ImportError as e:
    print(f"skipped: {e} (install python3-grpcio python3-protobuf)")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = os.environ.get("DYNVM_SERVER", os.path.join(ROOT, "build/release/tools/dynvm-server"))
VM_RUN = os.environ.get("DYNVM_VM_RUN", os.path.join(ROOT, "build/release/tools/vm-run"))
VM_COMPILE = os.environ.get("DYNVM_VM_COMPILE", os.path.join(ROOT, "build/release/tools/vm-compile"))

DTYPES = {  # KServe name: (numpy dtype, ONNX type name)
    "BOOL": (np.bool_, "BOOL"), "UINT8": (np.uint8, "UINT8"), "UINT16": (np.uint16, "UINT16"),
    "UINT32": (np.uint32, "UINT32"), "UINT64": (np.uint64, "UINT64"), "INT8": (np.int8, "INT8"),
    "INT16": (np.int16, "INT16"), "INT32": (np.int32, "INT32"), "INT64": (np.int64, "INT64"),
    "FP16": (np.float16, "FLOAT16"), "BF16": (np.uint16, "BFLOAT16"), "FP32": (np.float32, "FLOAT"),
    "FP64": (np.float64, "DOUBLE"), "BYTES": (object, "STRING"),
}


def make_dtype_model(path):
    """One Identity per dtype: in_<D>[n_<D>] -> out_<D>."""
    import onnx
    from onnx import helper, TensorProto
    nodes, ins, outs = [], [], []
    for name, (_, onnx_type) in DTYPES.items():
        t = getattr(TensorProto, onnx_type)
        nodes.append(helper.make_node("Identity", ["in_" + name], ["out_" + name]))
        ins.append(helper.make_tensor_value_info("in_" + name, t, ["n_" + name]))
        outs.append(helper.make_tensor_value_info("out_" + name, t, ["n_" + name]))
    model = helper.make_model(helper.make_graph(nodes, "dtypes", ins, outs),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)


def make_wide_model(path):
    """y = Relu(x) and z = -x on x: f32[n, 1024] (n rows of 4 KiB each, for large outputs)."""
    import onnx
    from onnx import helper, TensorProto
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["z"])], "wide",
        [helper.make_tensor_value_info("x", f, ["n", 1024])],
        [helper.make_tensor_value_info("y", f, ["n", 1024]), helper.make_tensor_value_info("z", f, ["n", 1024])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def make_step_model(path, vocab=16, heads=2, head=4):
    """A tiny step model in the Optimum layout (input_ids, attention_mask, past_key_values.0.key/value
    in; logits, present.0.key/value out) whose logits read the whole cache, for `vm-compile
    --decode` behind generate."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(7)
    width = heads * head
    emb = numpy_helper.from_array(rng.standard_normal((vocab, width)).astype(np.float32), "emb")
    out = numpy_helper.from_array(rng.standard_normal((width, vocab)).astype(np.float32), "out")
    split = numpy_helper.from_array(np.array([0, 0, heads, head], np.int64), "split")
    flat = numpy_helper.from_array(np.array([0, 1, width], np.int64), "flat")
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["h"]),
        helper.make_node("Reshape", ["h", "split"], ["h4"]),
        helper.make_node("Transpose", ["h4"], ["kv"], perm=[0, 2, 1, 3]),
        helper.make_node("Concat", ["past_key_values.0.key", "kv"], ["present.0.key"], axis=2),
        helper.make_node("Concat", ["past_key_values.0.value", "kv"], ["present.0.value"], axis=2),
        helper.make_node("ReduceMean", ["present.0.value"], ["ctx"], axes=[2], keepdims=0),
        helper.make_node("Reshape", ["ctx", "flat"], ["ctx3"]),
        helper.make_node("Add", ["h", "ctx3"], ["mix"]),
        helper.make_node("MatMul", ["mix", "out"], ["logits"]),
    ]
    f, i = TensorProto.FLOAT, TensorProto.INT64
    cache = ["b", heads, "p", head]
    graph = helper.make_graph(
        nodes, "step",
        [helper.make_tensor_value_info("input_ids", i, ["b", "s"]),
         helper.make_tensor_value_info("attention_mask", i, ["b", "t"]),
         helper.make_tensor_value_info("past_key_values.0.key", f, cache),
         helper.make_tensor_value_info("past_key_values.0.value", f, cache)],
        [helper.make_tensor_value_info("logits", f, ["b", "s", vocab]),
         helper.make_tensor_value_info("present.0.key", f, ["b", heads, "t", head]),
         helper.make_tensor_value_info("present.0.value", f, ["b", heads, "t", head])],
        [emb, out, split, flat])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def sample(name, n=5):
    """Values of dtype `name` that exercise its range."""
    if name == "BOOL":
        return np.array([True, False, True, True, False][:n])
    if name == "BYTES":
        return np.array(["", "a", "héllo", "x" * 40, "\u00e9\u4e2d"][:n], dtype=object)
    if name in ("FP16", "FP32", "FP64"):
        return np.array([0.0, -1.5, 3.25, 1e-3, 65504.0 if name == "FP16" else 1e30][:n],
                        dtype=DTYPES[name][0])
    if name == "BF16":
        return np.array([0x3F80, 0xBFC0, 0x4049, 0x0000, 0x7F7F][:n], dtype=np.uint16)
    info = np.iinfo(DTYPES[name][0])
    return np.array([info.min, info.max, 0, 1, info.max // 3][:n], dtype=DTYPES[name][0])


def raw_bytes(name, values):
    if name == "BYTES":
        return b"".join(struct.pack("<I", len(s.encode())) + s.encode() for s in values)
    return values.astype(values.dtype.newbyteorder("<")).tobytes()


def json_values(name, values):
    if name == "BYTES":
        return list(values)
    if name == "BF16":  # as floats: bf16 -> f32 is exact
        return [float(np.frombuffer(struct.pack("<I", int(v) << 16), np.float32)[0]) for v in values]
    return values.tolist()


class Server:
    """A dynvm-server on free ports; the log lines it prints are kept."""

    def __init__(self, repo, drain_s=20, extra=(), env=None):
        self.proc = subprocess.Popen(
            [SERVER, "--model-repository", repo, "--http-port", "0", "--grpc-port", "0",
             "--max-body-bytes", "4m", "--drain-timeout-s", str(drain_s), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if "listening" not in line:
            raise RuntimeError(f"server did not start: {line!r} {self.proc.stderr.read()}")
        parts = dict(p.split("=", 1) for p in line.split()[2:])
        self.http_port = int(parts["http"].rsplit(":", 1)[1])
        self.grpc_port = int(parts["grpc"].rsplit(":", 1)[1])
        self.grpc_poller = parts.get("grpc_poller")
        self.log = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def request(self, method, path, body=None, headers=None, timeout=60):
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, dict(r.getheaders()), data

    def json(self, method, path, body=None):
        status, _, data = self.request(method, path, body)
        return status, json.loads(data)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


class Grpc:
    """A client for inference.GRPCInferenceService from messages protoc generates now."""

    def __init__(self, port, tmp):
        subprocess.run(["protoc", f"-I{os.path.join(ROOT, 'tools/server')}", f"--python_out={tmp}",
                        "grpc_predict_v2.proto"], check=True)
        sys.path.insert(0, tmp)
        pb = importlib.import_module("grpc_predict_v2_pb2")  # generated just above
        self.pb = pb
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        names = {"ServerLive": "ServerLive", "ServerReady": "ServerReady", "ModelReady": "ModelReady",
                 "ServerMetadata": "ServerMetadata", "ModelMetadata": "ModelMetadata",
                 "ModelInfer": "ModelInfer"}
        for method, msg in names.items():
            req = getattr(pb, msg + "Request") if msg != "ModelInfer" else pb.ModelInferRequest
            resp = getattr(pb, msg + "Response") if msg != "ModelInfer" else pb.ModelInferResponse
            setattr(self, method, self.channel.unary_unary(
                f"/inference.GRPCInferenceService/{method}",
                request_serializer=req.SerializeToString, response_deserializer=resp.FromString))
        self.ModelStreamInfer = self.channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelStreamInferResponse.FromString)
        self.raw_infer = self.channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=lambda b: b, response_deserializer=pb.ModelInferResponse.FromString)


def voluntary_switches(pid):
    """The voluntary context switches (blocking waits) of all the threads of process `pid`."""
    n = 0
    for status in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            with open(status) as f:
                n += sum(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
        except FileNotFoundError:  # a thread that just ended
            pass
    return n


def vm_run(model_dvm, inputs, out_dir, extra=()):
    """Runs vm-run on .npy inputs; returns {output: ndarray}."""
    os.makedirs(out_dir, exist_ok=True)
    args = [VM_RUN, model_dvm, "--output-dir", out_dir, *extra]
    for name, value in inputs.items():
        path = os.path.join(out_dir, f"in_{name}.npy")
        np.save(path, value)
        args += ["--input", f"{name}={path}"]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    return {f[:-4]: np.load(os.path.join(out_dir, f)) for f in os.listdir(out_dir)
            if f.endswith(".npy") and not f.startswith("in_")}


TMP = tempfile.mkdtemp(prefix="dynvm-server-test-")
S = None
G = None


def link(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    os.symlink(os.path.abspath(src), dst)


def setUpModule():
    global S, G
    repo = os.path.join(TMP, "repo")
    dep = os.path.join(ROOT, "deploy/model-repository")
    for name in ("mlp", "charlm"):
        link(os.path.join(dep, name), os.path.join(repo, name))
    link(os.path.join(ROOT, "tools/models/lstm_cat/model.onnx"), os.path.join(repo, "lstm_cat/1/model.onnx"))
    link(os.path.join(ROOT, "tools/models/gru_stop/loop.onnx"), os.path.join(repo, "gru_stop/1/model.onnx"))
    os.makedirs(os.path.join(repo, "dtypes/1"))
    make_dtype_model(os.path.join(repo, "dtypes/1/model.onnx"))
    with open(os.path.join(repo, "dtypes/config.json"), "w") as f:
        json.dump({"limits": {"max_elements": 1000, "max_string_bytes": 64}}, f)
    os.makedirs(os.path.join(repo, "wide/1"))
    make_wide_model(os.path.join(repo, "wide/1/model.onnx"))
    # The MLP again, precompiled (model.dvm) and as version 2 of its own name.
    os.makedirs(os.path.join(repo, "mlp_dvm/2"))
    subprocess.run([VM_COMPILE, os.path.join(dep, "mlp/1/model.onnx"), "-o",
                    os.path.join(repo, "mlp_dvm/2/model.dvm")], check=True, stdout=subprocess.DEVNULL)
    # The MLP with dynamic batching (up to 16 rows, 2 ms), and a model that cannot batch.
    link(os.path.join(dep, "mlp/1/model.onnx"), os.path.join(repo, "mlp_batched/1/model.onnx"))
    with open(os.path.join(repo, "mlp_batched/config.json"), "w") as f:
        json.dump({"bounds": {"batch": 64}, "instances": 2,
                   "dynamic_batching": {"max_batch_size": 16, "max_queue_delay_us": 2000}}, f)
    link(os.path.join(repo, "dtypes/1/model.onnx"), os.path.join(repo, "dtypes_batched/1/model.onnx"))
    with open(os.path.join(repo, "dtypes_batched/config.json"), "w") as f:
        json.dump({"dynamic_batching": {"max_batch_size": 4}}, f)
    # The char LM with one instance and no queue: busy means 503.
    link(os.path.join(dep, "charlm/1/model.onnx"), os.path.join(repo, "charlm_one/1/model.onnx"))
    link(os.path.join(dep, "charlm/vocab.txt"), os.path.join(repo, "charlm_one/vocab.txt"))
    with open(os.path.join(dep, "charlm/config.json")) as f:
        config = json.load(f)
    # Long generations (100,000 tokens: seconds) hold its instance for the pool tests.
    config.update({"instances": 1, "max_queue": 0, "max_new_tokens_limit": 200000})
    config["bounds"]["max_new_tokens"] = 200000
    with open(os.path.join(repo, "charlm_one/config.json"), "w") as f:
        json.dump(config, f)
    # A step model wrapped by `vm-compile --decode`: generate leaves its sampling filters off.
    os.makedirs(os.path.join(repo, "stepdec/1"))
    make_step_model(os.path.join(TMP, "step.onnx"))
    subprocess.run([VM_COMPILE, os.path.join(TMP, "step.onnx"), "-o", os.path.join(repo, "stepdec/1/model.dvm"),
                    "--decode"], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(repo, "stepdec/config.json"), "w") as f:
        json.dump({"prompt_input": "prompt"}, f)
    # A model folder that does not load: listed as UNAVAILABLE with its reason.
    os.makedirs(os.path.join(repo, "broken/1"))
    with open(os.path.join(repo, "broken/1/model.onnx"), "wb") as f:
        f.write(b"not an onnx model")
    S = Server(repo)
    G = Grpc(S.grpc_port, TMP)
    # vm-compile the models the comparisons run with vm-run.
    for name, src, bounds in (("mlp", "deploy/model-repository/mlp/1/model.onnx", ["batch=1024"]),
                              ("lstm_cat", "tools/models/lstm_cat/model.onnx", []),
                              ("charlm", "tools/lm/charlm.onnx",
                               ["batch=1", "max_new_tokens=4096", "prompt_len=1024"])):
        args = [VM_COMPILE, os.path.join(ROOT, src), "-o", os.path.join(TMP, name + ".dvm")]
        for b in bounds:
            args += ["--bound", b]
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def tearDownModule():
    if S is not None:
        S.close()
    shutil.rmtree(TMP, ignore_errors=True)


def mlp_reference(x):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(os.path.join(ROOT, "deploy/model-repository/mlp/1/model.onnx"))
    w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    h = np.maximum(x @ w["w1"] + w["b1"], 0)
    z = h @ w["w2"] + w["b2"]
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def binary_request(inputs, binary_outputs=True):
    """A REST body with the binary tensor data extension; returns (body, headers)."""
    header = {"inputs": [], "parameters": {"binary_data_output": binary_outputs}}
    raw = b""
    for name, (dtype, values) in inputs.items():
        data = raw_bytes(dtype, values)
        header["inputs"].append({"name": name, "datatype": dtype, "shape": list(values.shape),
                                 "parameters": {"binary_data_size": len(data)}})
        raw += data
    head = json.dumps(header).encode()
    return head + raw, {"Inference-Header-Content-Length": str(len(head)),
                        "Content-Type": "application/octet-stream"}


def split_binary_response(headers, data):
    """{name: (meta, raw bytes)} of a binary response."""
    n = int(headers["Inference-Header-Content-Length"])
    meta = json.loads(data[:n])
    out, pos = {}, n
    for o in meta["outputs"]:
        size = o["parameters"]["binary_data_size"]
        out[o["name"]] = (o, data[pos:pos + size])
        pos += size
    assert pos == len(data), (pos, len(data))
    return out


class Health(unittest.TestCase):
    def test_rest(self):
        self.assertEqual(S.json("GET", "/v2/health/live"), (200, {"live": True}))
        self.assertEqual(S.json("GET", "/v2/health/ready"), (200, {"ready": True}))
        status, meta = S.json("GET", "/v2")
        self.assertEqual(status, 200)
        self.assertEqual(meta["name"], "dynvm-server")
        self.assertIn("binary_tensor_data", meta["extensions"])
        status, meta = S.json("GET", "/v2/models/mlp")
        self.assertEqual(meta["inputs"], [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}])
        self.assertEqual(meta["outputs"], [{"name": "probs", "datatype": "FP32", "shape": [-1, 3]}])
        self.assertEqual(meta["versions"], ["1"])
        self.assertEqual(S.json("GET", "/v2/models/mlp_dvm/versions/2")[1]["platform"], "dynvm_dvm")
        self.assertEqual(S.request("GET", "/v2/models/mlp/ready")[0], 200)
        self.assertEqual(S.request("GET", "/v2/models/mlp/versions/1/ready")[0], 200)
        self.assertEqual(S.request("GET", "/v2/models/mlp/versions/7/ready")[0], 404)
        self.assertEqual(S.request("GET", "/v2/models/nosuch/ready")[0], 404)

    def test_grpc(self):
        pb = G.pb
        self.assertTrue(G.ServerLive(pb.ServerLiveRequest()).live)
        self.assertTrue(G.ServerReady(pb.ServerReadyRequest()).ready)
        self.assertTrue(G.ModelReady(pb.ModelReadyRequest(name="mlp")).ready)
        self.assertFalse(G.ModelReady(pb.ModelReadyRequest(name="nosuch")).ready)
        meta = G.ServerMetadata(pb.ServerMetadataRequest())
        self.assertEqual(meta.name, "dynvm-server")
        meta = G.ModelMetadata(pb.ModelMetadataRequest(name="mlp"))
        self.assertEqual((meta.inputs[0].name, meta.inputs[0].datatype, list(meta.inputs[0].shape)),
                         ("x", "FP32", [-1, 4]))
        with self.assertRaises(grpc.RpcError) as e:
            G.ModelMetadata(pb.ModelMetadataRequest(name="nosuch"))
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)


class Infer(unittest.TestCase):
    X = np.array([[1, 2, 3, 4], [0, 0, 0, 0], [-1, 0.5, 2, -3]], np.float32)

    def test_json_against_numpy(self):
        status, r = S.json("POST", "/v2/models/mlp/infer", {
            "id": "r1", "inputs": [{"name": "x", "datatype": "FP32", "shape": [3, 4],
                                    "data": self.X.tolist()}]})
        self.assertEqual(status, 200, r)
        self.assertEqual(r["id"], "r1")
        out = r["outputs"][0]
        self.assertEqual((out["name"], out["datatype"], out["shape"]), ("probs", "FP32", [3, 3]))
        np.testing.assert_allclose(np.array(out["data"]).reshape(3, 3), mlp_reference(self.X),
                                   rtol=1e-5, atol=1e-6)

    def test_binary_identical_to_vm_run(self):
        ref = vm_run(os.path.join(TMP, "mlp.dvm"), {"x": self.X}, os.path.join(TMP, "mlp-out"))
        for model in ("mlp", "mlp_dvm"):
            body, headers = binary_request({"x": ("FP32", self.X)})
            status, h, data = S.request("POST", f"/v2/models/{model}/infer", body, headers)
            self.assertEqual(status, 200, data[:200])
            out = split_binary_response(h, data)
            self.assertEqual(out["probs"][1], ref["probs"].tobytes())
            # The JSON form of the same request gives the same floats.
            status, r = S.json("POST", f"/v2/models/{model}/infer", {
                "inputs": [{"name": "x", "datatype": "FP32", "shape": [3, 4], "data": self.X.ravel().tolist()}]})
            self.assertEqual(np.array(r["outputs"][0]["data"], np.float32).tobytes(), ref["probs"].tobytes())

    def test_large_binary_outputs(self):
        # Binary outputs of 128 KiB or more together are written from the tensors' memory after
        # the header (http.cc); smaller ones are copied after it. Both forms, with the outputs
        # asked in either order and one alone, against numpy, over one kept-alive connection.
        rng = np.random.default_rng(3)
        conn = http.client.HTTPConnection("127.0.0.1", S.http_port, timeout=60)
        for rows in (1, 3, 8, 40):  # 4 KiB a row and output
            x = rng.standard_normal((rows, 1024)).astype(np.float32)
            want = {"y": np.maximum(x, 0), "z": -x}
            for names in (None, ["z", "y"], ["z"]):
                body, headers = binary_request({"x": ("FP32", x)})
                if names is not None:
                    head_len = int(headers["Inference-Header-Content-Length"])
                    header = json.loads(body[:head_len])
                    header["outputs"] = [{"name": n, "parameters": {"binary_data": True}} for n in names]
                    head = json.dumps(header).encode()
                    body = head + body[head_len:]
                    headers["Inference-Header-Content-Length"] = str(len(head))
                conn.request("POST", "/v2/models/wide/infer", body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
                self.assertEqual(r.status, 200, data[:200])
                self.assertEqual(int(r.getheader("Content-Length")), len(data))
                out = split_binary_response(dict(r.getheaders()), data)
                self.assertEqual(list(out), names or ["y", "z"])
                for name, (meta, raw) in out.items():
                    self.assertEqual(meta["shape"], [rows, 1024])
                    self.assertEqual(raw, want[name].tobytes(), (rows, names, name))
        conn.close()

    def test_decoder_identical_to_vm_run(self):
        case = os.path.join(ROOT, "tools/models/lstm_cat/case0")
        prompt = np.load(os.path.join(case, "input_prompt.npy"))
        steps = np.load(os.path.join(case, "input_max_new_tokens.npy"))
        ref = vm_run(os.path.join(TMP, "lstm_cat.dvm"), {"prompt": prompt, "max_new_tokens": steps},
                     os.path.join(TMP, "lstm-out"))
        body, headers = binary_request({"prompt": ("INT64", prompt), "max_new_tokens": ("INT64", steps)})
        status, h, data = S.request("POST", "/v2/models/lstm_cat/infer", body, headers)
        self.assertEqual(status, 200, data[:300])
        out = split_binary_response(h, data)
        for name in ("tokens", "logits"):
            self.assertEqual(out[name][1], ref[name].tobytes(), name)
            self.assertEqual(out[name][0]["shape"], list(ref[name].shape))
        # And PyTorch's tokens, checked in with the model.
        self.assertEqual(out["tokens"][1], np.load(os.path.join(case, "output_tokens.npy")).tobytes())
        # gRPC, raw contents: the same bytes.
        pb = G.pb
        req = pb.ModelInferRequest(model_name="lstm_cat")
        for name, v in (("prompt", prompt), ("max_new_tokens", steps)):
            req.inputs.add(name=name, datatype="INT64", shape=list(v.shape))
            req.raw_input_contents.append(v.tobytes())
        req.outputs.add(name="tokens")
        r = G.ModelInfer(req)
        self.assertEqual([o.name for o in r.outputs], ["tokens"])
        self.assertEqual(r.raw_output_contents[0], ref["tokens"].tobytes())

    def test_grpc_typed_and_raw(self):
        ref = vm_run(os.path.join(TMP, "mlp.dvm"), {"x": self.X}, os.path.join(TMP, "mlp-out2"))
        pb = G.pb
        req = pb.ModelInferRequest(model_name="mlp", id="g1")
        t = req.inputs.add(name="x", datatype="FP32", shape=[3, 4])
        t.contents.fp32_contents.extend(self.X.ravel().tolist())
        r = G.ModelInfer(req)
        self.assertEqual(r.id, "g1")
        self.assertEqual(np.array(r.outputs[0].contents.fp32_contents, np.float32).tobytes(),
                         ref["probs"].tobytes())
        req = pb.ModelInferRequest(model_name="mlp")
        req.inputs.add(name="x", datatype="FP32", shape=[3, 4])
        req.raw_input_contents.append(self.X.tobytes())
        r = G.ModelInfer(req)
        self.assertEqual(r.raw_output_contents[0], ref["probs"].tobytes())
        self.assertEqual(list(r.outputs[0].shape), [3, 3])


class DTypes(unittest.TestCase):
    def check(self, name, got):
        want = sample(name)
        if name == "BYTES":
            self.assertEqual(list(got), list(want))
        else:
            self.assertEqual(np.array(list(got), dtype=want.dtype).tobytes(), want.tobytes(), name)

    def test_rest_json_and_binary(self):
        for name in DTYPES:
            values = sample(name)
            status, r = S.json("POST", "/v2/models/dtypes/infer", {
                "inputs": [{"name": "in_" + k, "datatype": k, "shape": [5 if k == name else 0],
                            "data": json_values(k, sample(k)) if k == name else []} for k in DTYPES],
                "outputs": [{"name": "out_" + name}]})
            self.assertEqual(status, 200, (name, r))
            out = r["outputs"][0]
            self.assertEqual((out["datatype"], out["shape"]), (name, [5]))
            if name == "BF16":
                got = [struct.unpack("<I", struct.pack("<f", v))[0] >> 16 for v in out["data"]]
                self.check(name, np.array(got, np.uint16))
            else:
                self.check(name, np.array(out["data"], dtype=DTYPES[name][0]))
            inputs = {"in_" + k: (k, sample(k) if k == name else sample(k)[:0]) for k in DTYPES}
            body, headers = binary_request(inputs)
            status, h, data = S.request("POST", "/v2/models/dtypes/infer", body, headers)
            self.assertEqual(status, 200, (name, data[:300]))
            meta, raw = split_binary_response(h, data)["out_" + name]
            self.assertEqual(raw, raw_bytes(name, values), name)

    def test_grpc_raw_and_typed(self):
        pb = G.pb
        field = {"BOOL": "bool_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
                 "UINT32": "uint_contents", "UINT64": "uint64_contents", "INT8": "int_contents",
                 "INT16": "int_contents", "INT32": "int_contents", "INT64": "int64_contents",
                 "FP16": "fp32_contents", "FP32": "fp32_contents", "FP64": "fp64_contents",
                 "BYTES": "bytes_contents"}
        for name in DTYPES:
            raw_req = pb.ModelInferRequest(model_name="dtypes")
            for k in DTYPES:
                v = sample(k) if k == name else sample(k)[:0]
                raw_req.inputs.add(name="in_" + k, datatype=k, shape=[len(v)])
                raw_req.raw_input_contents.append(raw_bytes(k, v))
            raw_req.outputs.add(name="out_" + name)
            r = G.ModelInfer(raw_req)
            self.assertEqual(r.raw_output_contents[0], raw_bytes(name, sample(name)), name)
            if name not in field:
                continue
            typed = pb.ModelInferRequest(model_name="dtypes")
            for k in DTYPES:
                v = sample(k) if k == name else sample(k)[:0]
                t = typed.inputs.add(name="in_" + k, datatype=k, shape=[len(v)])
                if k in field and len(v):
                    vals = [s.encode() for s in v] if k == "BYTES" else v.tolist()
                    getattr(t.contents, field[k]).extend(vals)
            typed.outputs.add(name="out_" + name)
            r = G.ModelInfer(typed)
            got = getattr(r.outputs[0].contents, field[name])
            if name == "BYTES":
                got = [b.decode() for b in got]
            self.check(name, got)


class Errors(unittest.TestCase):
    def expect(self, status, body, code, words, path="/v2/models/mlp/infer", headers=None):
        got, _, data = S.request("POST", path, body, headers)
        self.assertEqual(got, code, data[:300])
        message = json.loads(data)["error"]
        for w in words:
            self.assertIn(w, message)

    def x(self, shape, data, dtype="FP32", name="x"):
        return {"inputs": [{"name": name, "datatype": dtype, "shape": shape, "data": data}]}

    def test_rest_bad_input(self):
        self.expect(None, "{not json", 400, ["malformed JSON"])
        self.expect(None, "[]", 400, ["object"])
        self.expect(None, {"inputs": []}, 400, ["missing input", "x"])
        self.expect(None, self.x([1, 4], [1, 2, 3, 4], name="y"), 400, ["unknown input 'y'", "x"])
        self.expect(None, self.x([1, 4], [1, 2, 3, 4], dtype="INT32"), 400, ["must be FP32", "INT32"])
        self.expect(None, self.x([4], [1, 2, 3, 4]), 400, ["rank 2"])
        self.expect(None, self.x([1, 5], [1, 2, 3, 4, 5]), 400, ["dim 1 must be 4"])
        self.expect(None, self.x([1, 4], [1, 2, 3]), 400, ["holds 4 elements", "3"])
        self.expect(None, self.x([1, 4], [1, 2, "a", 4]), 400, ["element 2", "number"])
        self.expect(None, self.x([1, 4], [1, 2, 3, 4], dtype="FP8"), 400, ["unknown datatype 'FP8'"])
        self.expect(None, self.x([-1, 4], []), 400, ["negative dim"])
        self.expect(None, self.x([1025, 4], [0] * 4100), 413, ["batch 1025", "limit of 1024"])
        header = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                                         "parameters": {"binary_data_size": 16}}]}).encode()
        self.expect(None, header + b"\0" * 8, 400, ["runs past the end"],
                    headers={"Inference-Header-Content-Length": str(len(header))})
        self.expect(None, header + b"\0" * 16, 400, ["Inference-Header-Content-Length"],
                    headers={"Inference-Header-Content-Length": str(len(header) + 100)})
        self.expect(None, header + b"\0" * 20, 400, ["not claimed"],
                    headers={"Inference-Header-Content-Length": str(len(header))})

    def test_limits(self):
        # The dtypes model allows 1000 elements and strings of 64 bytes.
        inputs = [{"name": "in_" + k, "datatype": k, "shape": [0], "data": []} for k in DTYPES]
        inputs[0] = {"name": "in_BOOL", "datatype": "BOOL", "shape": [1001], "data": [True] * 1001}
        self.expect(None, {"inputs": inputs}, 413, ["shape [1001]", "limit of 1000 elements"], "/v2/models/dtypes/infer")
        inputs[0] = {"name": "in_BOOL", "datatype": "BOOL", "shape": [0], "data": []}
        inputs[-1] = {"name": "in_BYTES", "datatype": "BYTES", "shape": [1], "data": ["x" * 65]}
        self.expect(None, {"inputs": inputs}, 413, ["65 bytes", "limit of 64"], "/v2/models/dtypes/infer")
        status, _, _ = S.request("POST", "/v2/models/mlp/infer", b"{" + b" " * (5 << 20) + b"}")
        self.assertEqual(status, 413)

    def test_names(self):
        for path, code in (("/v2/models/..%2F..%2Fetc%2Fpasswd/ready", 404),
                           ("/v2/models/../ready", 400), ("/v2/models/.hidden/ready", 400),
                           ("/v2/models/a%00b/ready", 400), ("/v2/models/mlp/versions/x/ready", 400)):
            status, _, data = S.request("GET", path)
            self.assertEqual(status, code, (path, data))
            self.assertIn("error", json.loads(data))
        status, _, data = S.request("POST", "/v2/repository/models/..%2Fmlp/load")
        self.assertIn(status, (400, 404))
        status, _, data = S.request("POST", "/v2/repository/models/.hidden/load")
        self.assertEqual(status, 400)
        self.assertIn("not a valid name", json.loads(data)["error"])

    def test_grpc_bad_input(self):
        pb = G.pb
        cases = [
            (pb.ModelInferRequest(model_name="nosuch"), grpc.StatusCode.NOT_FOUND, "not loaded"),
            (pb.ModelInferRequest(model_name="../etc"), grpc.StatusCode.INVALID_ARGUMENT, "not a valid name"),
            (pb.ModelInferRequest(model_name="mlp"), grpc.StatusCode.INVALID_ARGUMENT, "missing input"),
        ]
        req = pb.ModelInferRequest(model_name="mlp")
        req.inputs.add(name="x", datatype="FP32", shape=[1, 4])
        req.raw_input_contents.append(b"\0" * 12)
        cases.append((req, grpc.StatusCode.INVALID_ARGUMENT, "needs 16 bytes, got 12"))
        req = pb.ModelInferRequest(model_name="mlp")
        req.inputs.add(name="x", datatype="FP32", shape=[1, 4]).contents.int_contents.extend([1, 2, 3, 4])
        cases.append((req, grpc.StatusCode.INVALID_ARGUMENT, "contents have 0"))
        req = pb.ModelInferRequest(model_name="mlp")
        req.inputs.add(name="x", datatype="FP32", shape=[1 << 20, 1 << 20])
        cases.append((req, grpc.StatusCode.RESOURCE_EXHAUSTED, "over the limit"))
        for req, code, words in cases:
            with self.assertRaises(grpc.RpcError) as e:
                G.ModelInfer(req)
            self.assertEqual(e.exception.code(), code, e.exception.details())
            self.assertIn(words, e.exception.details())
        with self.assertRaises(grpc.RpcError) as e:
            G.raw_infer(b"\xff\xff\xff\xff garbage")
        self.assertIn(e.exception.code(), (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT))
        self.assertTrue(G.ServerLive(pb.ServerLiveRequest()).live)  # still up
        # Unknown names never become metric labels (a client cannot add series at will).
        text = S.request("GET", "/metrics")[2].decode()
        self.assertNotIn('model="nosuch"', text)
        self.assertNotIn('model="../etc"', text)


DEMO = ("And it came to pass", 120, 0.7, 1)


def demo_text(prompt, length, temperature, seed):
    """The demo's generated text (vm-run --vocab streams it after the prompt)."""
    out = subprocess.run(
        [VM_RUN, os.path.join(TMP, "charlm.dvm"), "--vocab", os.path.join(ROOT, "tools/lm/vocab.txt"),
         "--text", f"prompt={prompt}", "--set", f"max_new_tokens={length}",
         "--set", f"temperature={temperature}", "--set", f"seed={seed}", "--set", "stop_token=-1",
         "--output-dir", os.path.join(TMP, "demo-out")], check=True, capture_output=True)
    text = out.stdout.decode()
    text = text[:text.index("tokens i64")]
    assert text.endswith("\n"), text  # vm-run ends the stream with a newline
    return text[:-1]


def sse_events(model, body, timeout=120, on_first=None):
    """The events of a generate_stream; `on_first` runs once the first event arrived."""
    conn = http.client.HTTPConnection("127.0.0.1", S.http_port, timeout=timeout)
    conn.request("POST", f"/v2/models/{model}/generate_stream", body=json.dumps(body))
    r = conn.getresponse()
    assert r.status == 200, (r.status, r.read())
    assert r.getheader("Content-Type").startswith("text/event-stream")
    events = []
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"data: "):
            events.append(json.loads(line[6:]))
            if len(events) == 1 and on_first is not None:
                on_first()
    conn.close()
    return events


class Generate(unittest.TestCase):
    def test_stream_equals_demo(self):
        prompt, length, temperature, seed = DEMO
        want = demo_text(*DEMO)
        self.assertGreater(len(want), 50)
        body = {"text_input": prompt, "parameters": {"max_new_tokens": length,
                                                      "temperature": temperature, "seed": seed}}
        events = sse_events("charlm", body)
        self.assertEqual(len(events), length)
        self.assertTrue(all(e["model_name"] == "charlm" for e in events))
        self.assertEqual("".join(e["text_output"] for e in events), want)
        status, r = S.json("POST", "/v2/models/charlm/generate", body)
        self.assertEqual((status, r["text_output"]), (200, want))
        pb = G.pb
        req = pb.ModelInferRequest(model_name="charlm")
        req.inputs.add(name="text_input", datatype="BYTES", shape=[1]).contents.bytes_contents.append(
            prompt.encode())
        req.parameters["max_new_tokens"].int64_param = length
        req.parameters["temperature"].double_param = temperature
        req.parameters["seed"].int64_param = seed
        pieces = [r.infer_response.outputs[0].contents.bytes_contents[0].decode()
                  for r in G.ModelStreamInfer(iter([req]))]
        self.assertEqual("".join(pieces), want)

    def test_decode_step_model_filters_default_off(self):
        # top_k/top_p/repetition_penalty are inputs of a --decode executable; generate's request
        # leaves them out, and the server binds 0/1/1: the tokens equal vm-run's with those values.
        inputs = {"prompt": np.array([[3, 1, 4]], np.int64), "max_new_tokens": np.array(12, np.int64),
                  "temperature": np.array(0.9, np.float32), "seed": np.array(5, np.int64),
                  "stop_token": np.array(-1, np.int64), "top_k": np.array(0, np.int64),
                  "top_p": np.array(1.0, np.float32), "repetition_penalty": np.array(1.0, np.float32)}
        want = vm_run(os.path.join(TMP, "repo/stepdec/1/model.dvm"), inputs,
                      os.path.join(TMP, "stepdec-out"))["tokens"]
        self.assertEqual(want.shape, (1, 12))
        body = {"text_input": "3 1 4", "parameters": {"max_new_tokens": 12, "temperature": 0.9,
                                                       "seed": 5, "stop_token": -1}}
        got = " ".join(e["text_output"].strip() for e in sse_events("stepdec", body)).split()
        self.assertEqual([int(t) for t in got], want[0].tolist())
        # Given explicitly, a filter is the request's: top_k=1 is greedy.
        inputs.update(top_k=np.array(1, np.int64))
        greedy = vm_run(os.path.join(TMP, "repo/stepdec/1/model.dvm"), inputs,
                        os.path.join(TMP, "stepdec-out-k1"))["tokens"]
        body["parameters"]["top_k"] = 1
        got = " ".join(e["text_output"].strip() for e in sse_events("stepdec", body)).split()
        self.assertEqual([int(t) for t in got], greedy[0].tolist())

    def test_greedy_and_stop(self):
        want = demo_text("In the beginning", 40, 0, 5)
        body = {"text_input": "In the beginning", "parameters": {"max_new_tokens": 40, "temperature": 0}}
        self.assertEqual("".join(e["text_output"] for e in sse_events("charlm", body)), want)

    def test_errors(self):
        for body, words in (({"text_input": "\u4e2d"}, "not in the vocabulary"),
                            ({"text_input": ""}, "empty"),
                            ({"prompt": "x"}, "text_input"),
                            ({"text_input": "a", "parameters": {"max_new_tokens": 1e9}}, "max_new_tokens"),
                            ({"text_input": "a", "parameters": {"seed": 1.5}}, "integer"),
                            ({"text_input": "a", "parameters": {"bogus": 1}}, "unknown parameter")):
            for route in ("generate", "generate_stream"):
                status, _, data = S.request("POST", f"/v2/models/charlm/{route}", body)
                self.assertEqual(status, 400, (body, data))
                self.assertIn(words, json.loads(data)["error"])

    def test_timeout(self):
        body = {"text_input": "And", "parameters": {"max_new_tokens": 4000, "timeout_ms": 1}}
        status, _, data = S.request("POST", "/v2/models/charlm/generate", body)
        self.assertEqual(status, 504, data)


class Pool(unittest.TestCase):
    LONG = {"text_input": "And", "parameters": {"max_new_tokens": 100000, "temperature": 0.5}}

    def test_full_queue_then_disconnect_frees_instance(self):
        # A client holds charlm_one's only instance with a long stream, then goes away.
        sock = socket.create_connection(("127.0.0.1", S.http_port))
        body = json.dumps(self.LONG).encode()
        sock.sendall(b"POST /v2/models/charlm_one/generate_stream HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: " +
                     str(len(body)).encode() + b"\r\n\r\n" + body)
        first = sock.recv(4096)
        self.assertIn(b"200", first.split(b"\r\n")[0])
        status, headers, data = S.request("POST", "/v2/models/charlm_one/generate",
                                          {"text_input": "A", "parameters": {"max_new_tokens": 1}})
        self.assertEqual(status, 503, data)
        self.assertEqual(headers.get("Retry-After"), "1")
        self.assertIn("busy", json.loads(data)["error"])
        sock.close()
        deadline = time.time() + 3  # the 100,000-token run alone takes longer
        while True:
            status, _, data = S.request("POST", "/v2/models/charlm_one/generate",
                                        {"text_input": "A", "parameters": {"max_new_tokens": 1}})
            if status == 200 or time.time() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(status, 200, "the instance was not freed after the client went away")

    def test_grpc_full_queue(self):
        call = G.ModelStreamInfer(iter([self._grpc_generate(100000)]))
        next(call)  # the stream holds the instance
        with self.assertRaises(grpc.RpcError) as e:
            G.ModelInfer(self._grpc_lm_infer())
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn(("retry-after", "1"), tuple(e.exception.trailing_metadata()))
        call.cancel()
        deadline = time.time() + 3  # the 100,000-token run alone takes longer
        while time.time() < deadline:
            try:
                G.ModelInfer(self._grpc_lm_infer())
                break
            except grpc.RpcError:
                time.sleep(0.05)
        else:
            self.fail("the instance was not freed after the gRPC client cancelled")

    def test_grpc_unary_cancel_frees_instance(self):
        # A unary ModelInfer that would run 100,000 decode steps on charlm_one's only instance,
        # cancelled by its client: the run stops (the completion-queue thread sees the call's
        # done event) and the instance serves the next request.
        future = G.ModelInfer.future(self._grpc_lm_infer(100000))
        time.sleep(0.3)
        with self.assertRaises(grpc.RpcError) as e:
            G.ModelInfer(self._grpc_lm_infer())
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        future.cancel()
        deadline = time.time() + 3  # the 100,000-token run alone takes longer
        while time.time() < deadline:
            try:
                r = G.ModelInfer(self._grpc_lm_infer())
                break
            except grpc.RpcError:
                time.sleep(0.05)
        else:
            self.fail("the instance was not freed after the unary gRPC call was cancelled")
        self.assertGreater(len(r.outputs), 0)
        text = S.request("GET", "/metrics")[2].decode()
        self.assertRegex(text, r'dynvm_requests_total\{code="499",model="charlm_one",protocol="grpc"\} [1-9]')

    def test_rest_infer_disconnect_cancels_run(self):
        # A REST infer that would run 100,000 decode steps (seconds) on charlm_one's only
        # instance, whose client sends it and closes the connection: the run stops (the server
        # sees the closed socket where the VM checks for cancellation), the instance serves the
        # next request soon, and /metrics counts the request as cancelled (499).
        def cancelled():
            text = S.request("GET", "/metrics")[2].decode()
            m = re.search(r'dynvm_requests_total\{code="499",model="charlm_one",protocol="http"\} (\S+)', text)
            return float(m.group(1)) if m else 0.0
        before = cancelled()
        body = json.dumps({"inputs": self._rest_lm_inputs(100000)}).encode()
        sock = socket.create_connection(("127.0.0.1", S.http_port))
        sock.sendall(b"POST /v2/models/charlm_one/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: " +
                     str(len(body)).encode() + b"\r\n\r\n" + body)
        time.sleep(0.3)
        self._assert_unanswered(sock)
        status, _, data = S.request("POST", "/v2/models/charlm_one/infer",
                                    {"inputs": self._rest_lm_inputs(1)})
        self.assertEqual(status, 503, data)  # the long run holds the instance
        start = time.time()
        sock.close()
        deadline = start + 3  # the 100,000-token run alone takes longer
        while True:
            status, _, data = S.request("POST", "/v2/models/charlm_one/infer",
                                        {"inputs": self._rest_lm_inputs(1)})
            if status == 200 or time.time() > deadline:
                break
            time.sleep(0.02)
        self.assertEqual(status, 200, "the instance was not freed after the REST client went away")
        print(f"REST infer: instance free {time.time() - start:.3f} s after its client closed",
              file=sys.stderr)
        self.assertTrue(json.loads(data)["outputs"])
        self.assertEqual(cancelled(), before + 1)

    def test_rest_generate_disconnect_cancels_run(self):
        # The same for a plain (not streamed) generate: nothing is written until it ends, so
        # only the closed socket tells that its client went away.
        sock = socket.create_connection(("127.0.0.1", S.http_port))
        body = json.dumps(self.LONG).encode()
        sock.sendall(b"POST /v2/models/charlm_one/generate HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: " +
                     str(len(body)).encode() + b"\r\n\r\n" + body)
        time.sleep(0.3)
        self._assert_unanswered(sock)
        one = {"text_input": "A", "parameters": {"max_new_tokens": 1}}
        self.assertEqual(S.request("POST", "/v2/models/charlm_one/generate", one)[0], 503)
        sock.close()
        deadline = time.time() + 3
        while True:
            status, _, data = S.request("POST", "/v2/models/charlm_one/generate", one)
            if status == 200 or time.time() > deadline:
                break
            time.sleep(0.02)
        self.assertEqual(status, 200, "the instance was not freed after the client went away")

    def _assert_unanswered(self, sock):
        # The request runs: no answer yet (not a 503 because the instance was busy).
        sock.setblocking(False)
        with self.assertRaises(BlockingIOError):
            sock.recv(1)
        sock.setblocking(True)

    def _rest_lm_inputs(self, n):
        return [{"name": "prompt", "datatype": "INT64", "shape": [1, 2], "data": [3, 4]},
                {"name": "max_new_tokens", "datatype": "INT64", "shape": [], "data": [n]},
                {"name": "temperature", "datatype": "FP32", "shape": [], "data": [0]},
                {"name": "seed", "datatype": "INT64", "shape": [], "data": [1]},
                {"name": "stop_token", "datatype": "INT64", "shape": [], "data": [-1]}]

    def _grpc_generate(self, n):
        pb = G.pb
        req = pb.ModelInferRequest(model_name="charlm_one")
        req.inputs.add(name="text_input", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"And")
        req.parameters["max_new_tokens"].int64_param = n
        return req

    def _grpc_lm_infer(self, n=1):
        pb = G.pb
        req = pb.ModelInferRequest(model_name="charlm_one")
        for name, dtype, value in (("prompt", "INT64", np.array([[3, 4]], np.int64)),
                                   ("max_new_tokens", "INT64", np.array(n, np.int64)),
                                   ("temperature", "FP32", np.array(0, np.float32)),
                                   ("seed", "INT64", np.array(1, np.int64)),
                                   ("stop_token", "INT64", np.array(-1, np.int64))):
            req.inputs.add(name=name, datatype=dtype, shape=list(value.shape))
            req.raw_input_contents.append(value.tobytes())
        return req

    def test_concurrent_clients(self):
        errors = []
        x = Infer.X

        def client():
            for _ in range(20):
                status, r = S.json("POST", "/v2/models/mlp/infer", {
                    "inputs": [{"name": "x", "datatype": "FP32", "shape": [3, 4], "data": x.tolist()}]})
                if status != 200:
                    errors.append((status, r))
        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])


class Repository(unittest.TestCase):
    def test_index_unload_load(self):
        status, index = S.json("GET", "/v2/repository/index")
        self.assertEqual(status, 200)
        states = {e["name"]: e["state"] for e in index}
        self.assertEqual(states["mlp"], "READY")
        self.assertEqual(states["broken"], "UNAVAILABLE")
        self.assertTrue([e for e in index if e["name"] == "broken"][0]["reason"])
        self.assertEqual(S.request("POST", "/v2/repository/models/mlp_dvm/unload")[0], 200)
        self.assertEqual(S.request("GET", "/v2/models/mlp_dvm/ready")[0], 404)
        self.assertEqual(S.request("POST", "/v2/repository/models/mlp_dvm/unload")[0], 404)
        self.assertEqual(S.request("POST", "/v2/repository/models/mlp_dvm/load")[0], 200)
        self.assertEqual(S.request("GET", "/v2/models/mlp_dvm/ready")[0], 200)
        self.assertEqual(S.request("POST", "/v2/repository/models/nosuch/load")[0], 404)
        status, _, data = S.request("POST", "/v2/repository/models/broken/load")
        self.assertEqual(status, 400, data)

    def test_reload_keeps_requests_in_flight(self):
        reload = {}

        def on_first():
            reload["status"] = S.request("POST", "/v2/repository/models/charlm_one/load")[0]
        events = sse_events("charlm_one", {"text_input": "And", "parameters": {"max_new_tokens": 5000}},
                            on_first=on_first)
        self.assertEqual(reload["status"], 200)
        self.assertEqual(len(events), 5000)
        self.assertEqual(S.request("GET", "/v2/models/charlm_one/ready")[0], 200)


class Batching(unittest.TestCase):
    def test_concurrent_requests_get_their_own_rows(self):
        rng = np.random.default_rng(11)
        errors = []
        rows = sum(1 + (c + i) % 3 for c in range(16) for i in range(10))

        def client(c):
            conn = http.client.HTTPConnection("127.0.0.1", S.http_port, timeout=60)
            for i in range(10):
                x = rng.standard_normal((1 + (c + i) % 3, 4)).astype(np.float32)
                conn.request("POST", "/v2/models/mlp_batched/infer", body=json.dumps({
                    "inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape),
                                "data": x.ravel().tolist()}]}))
                r = conn.getresponse()
                data = json.loads(r.read())
                if r.status != 200:
                    errors.append(data)
                    continue
                out = data["outputs"][0]
                got = np.array(out["data"], np.float32).reshape(out["shape"])
                if got.shape != (x.shape[0], 3) or not np.allclose(got, mlp_reference(x), rtol=1e-5, atol=1e-6):
                    errors.append(f"client {c} request {i}: rows not its own")
            conn.close()
        threads = [threading.Thread(target=client, args=(c,)) for c in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        text = S.request("GET", "/metrics")[2].decode()
        count = float(re.search(r'dynvm_batch_size_count\{model="mlp_batched"\} (\S+)', text).group(1))
        single = float(re.search(r'dynvm_batch_size_bucket\{model="mlp_batched",le="1"\} (\S+)', text).group(1))
        total = float(re.search(r'dynvm_batch_size_sum\{model="mlp_batched"\} (\S+)', text).group(1))
        self.assertEqual(total, rows)  # every row of the 160 requests ran once
        self.assertLess(count, 160)  # in fewer batches than requests
        self.assertLess(single, count)  # some batches held more than one row

    def test_unbatchable_model_refused(self):
        index = S.json("GET", "/v2/repository/index")[1]
        entry = [e for e in index if e["name"] == "dtypes_batched"][0]
        self.assertEqual(entry["state"], "UNAVAILABLE")
        self.assertIn("dynamic_batching", entry["reason"])


class Metrics(unittest.TestCase):
    def test_metrics(self):
        S.json("POST", "/v2/models/mlp/infer", {
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]})
        status, _, data = S.request("GET", "/metrics")
        text = data.decode()
        self.assertEqual(status, 200)
        self.assertRegex(text, r'dynvm_requests_total\{code="200",model="mlp",protocol="http"\} [1-9]')
        self.assertIn('dynvm_request_seconds_bucket{model="mlp",phase="compute"', text)
        self.assertIn('dynvm_instances_busy{model="mlp",version="1"}', text)
        self.assertRegex(text, r'dynvm_requests_total\{code="404"')
        self.assertTrue(any("POST /v2/models/mlp/infer 200" in line for line in S.log))


class GrpcPoller(unittest.TestCase):
    def test_default_poller_is_poll(self):
        # The default engine is poll: each serving thread polls its own completion queue, so the
        # thread that reads a gRPC call serves it (docs/serving.md, "Measurements", says why;
        # server-bench measures what it saves). The server names the engine it asked gRPC for;
        # --grpc-poller epoll1 and default name theirs. The blocking waits a sequential call
        # costs the server are printed for the record, not asserted: they depend on what else
        # the machine runs (ctest's other tests: 1.0 alone, 2.5 beside them), and performance
        # is the benchmarks' to measure.
        self.assertEqual(S.grpc_poller, "poll")
        env = dict(os.environ)
        env.pop("GRPC_POLL_STRATEGY", None)
        for flag, want in (("epoll1", "epoll1"), ("default", "default")):
            other = Server(os.path.join(TMP, "repo"), extra=("--grpc-poller", flag), env=env)
            try:
                self.assertEqual(other.grpc_poller, want)
                self.assertEqual(other.stop(), 0)
            finally:
                other.close()

    def test_sigterm_right_after_start_exits_0(self):
        # A SIGTERM as soon as the server listens, before its gRPC threads have requested their
        # first call: the server stops at once and exits 0 (it aborted in gRPC, a request on a
        # queue already shut down, in about half the tries with epoll1 under ASan).
        env = dict(os.environ)
        env.pop("GRPC_POLL_STRATEGY", None)
        for flag in ("poll", "epoll1"):
            for _ in range(4):
                other = Server(os.path.join(TMP, "repo"), extra=("--grpc-poller", flag), env=env)
                try:
                    self.assertEqual(other.stop(), 0, "".join(other.log))
                finally:
                    other.close()

    def test_blocking_waits_per_call_are_printed(self):
        # The server's blocking waits (voluntary context switches of all its threads) per
        # sequential call of each protocol, after 50 to warm up, printed: with poll about 1 a
        # call on an idle machine without spinning (--spin-us 0: the serving thread's next
        # poll), with epoll1 about 3 (its poller wakes the queue's thread); more when other work
        # shares the cores; about 0 when the serving thread's spin (--spin-us) takes the next
        # call before it blocks.
        def switches():
            return voluntary_switches(S.proc.pid)

        req = G.pb.ModelInferRequest(model_name="mlp")
        req.inputs.add(name="x", datatype="FP32", shape=[3, 4])
        req.raw_input_contents.append(Infer.X.tobytes())
        # REST: each request in one send on a kept-alive socket (http.client may send the
        # headers and the body apart, which wakes the server twice).
        body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [3, 4],
                                       "data": Infer.X.ravel().tolist()}]}).encode()
        request = (b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                   % len(body)) + body
        sock = socket.create_connection(("127.0.0.1", S.http_port), timeout=60)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = sock.makefile("rb")

        def rest():
            sock.sendall(request)
            status = reader.readline()
            length = 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reader.read(length)
            self.assertIn(b" 200 ", status)

        for name, call in (("gRPC", lambda: G.ModelInfer(req)), ("REST", rest)):
            for _ in range(50):
                call()
            # The fewest over 5 batches of 60 calls: a neighbour's load adds waits to some
            # batches (lock holders preempted), not to every one.
            per_call = []
            for _ in range(5):
                before = switches()
                for _ in range(60):
                    call()
                per_call.append((switches() - before) / 60)
            print(f"{name} ({S.grpc_poller}): {min(per_call):.2f} blocking waits a call, "
                  f"batches {per_call}", file=sys.stderr)
        self.assertGreater(switches(), 0)  # the count is read from this server's threads
        reader.close()
        sock.close()

    def test_epoll1_serves_concurrent_calls(self):
        # --grpc-poller epoll1 (one poller for every serving thread's queue): 4 client threads
        # x 25 raw ModelInfer calls on 2 serving threads, every answer equal to vm-run's.
        X = Infer.X
        ref = vm_run(os.path.join(TMP, "mlp.dvm"), {"x": X}, os.path.join(TMP, "mlp-out-epoll1"))
        other = Server(os.path.join(TMP, "repo"), extra=("--grpc-poller", "epoll1", "--grpc-threads", "2"))
        try:
            g = Grpc(other.grpc_port, TMP)
            req = g.pb.ModelInferRequest(model_name="mlp")
            req.inputs.add(name="x", datatype="FP32", shape=[3, 4])
            req.raw_input_contents.append(X.tobytes())
            answers = []

            def client():
                for _ in range(25):
                    answers.append(g.ModelInfer(req).raw_output_contents[0])
            threads = [threading.Thread(target=client) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(answers, [ref["probs"].tobytes()] * 100)
            g.channel.close()
            self.assertEqual(other.stop(), 0)
        finally:
            other.close()

    def test_unknown_poller_is_an_error(self):
        r = subprocess.run([SERVER, "--model-repository", os.path.join(TMP, "repo"), "--grpc-poller", "epollex"],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--grpc-poller epollex: not default, poll or epoll1", r.stderr)


class Spin(unittest.TestCase):
    def test_spin_is_bounded_and_idle_server_burns_nothing(self):
        # A server whose serving threads spin up to 200 ms after each request (--spin-us):
        # sequential REST and gRPC calls each find their thread spinning, so the server blocks
        # (voluntary context switches, all threads) well under once a call (about 1 a call
        # without spinning); once the window has passed the threads block: over the next 2 s,
        # with a REST connection kept alive and a gRPC channel open, the server takes no CPU.
        def cpu_s(pid):
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        other = Server(os.path.join(TMP, "repo"), extra=("--spin-us", "200000"))
        try:
            g = Grpc(other.grpc_port, TMP)
            req = g.pb.ModelInferRequest(model_name="mlp")
            req.inputs.add(name="x", datatype="FP32", shape=[3, 4])
            req.raw_input_contents.append(Infer.X.tobytes())
            body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [3, 4],
                                           "data": Infer.X.ravel().tolist()}]})
            conn = http.client.HTTPConnection("127.0.0.1", other.http_port, timeout=60)

            def rest():
                conn.request("POST", "/v2/models/mlp/infer", body=body)
                r = conn.getresponse()
                self.assertEqual(r.status, 200, r.read())
                r.read()
            for name, call in (("gRPC", lambda: g.ModelInfer(req)), ("REST", rest)):
                for _ in range(20):
                    call()
                before = voluntary_switches(other.proc.pid)
                for _ in range(100):
                    call()
                per_call = (voluntary_switches(other.proc.pid) - before) / 100
                print(f"--spin-us 200000, {name}: {per_call:.2f} blocking waits a call", file=sys.stderr)
                self.assertLess(per_call, 0.5)
            after_calls = cpu_s(other.proc.pid)
            time.sleep(0.5)
            c0 = cpu_s(other.proc.pid)
            time.sleep(2)
            idle = cpu_s(other.proc.pid) - c0
            print(f"--spin-us 200000: {c0 - after_calls:.2f} s of CPU in the 0.5 s after the calls, "
                  f"{idle:.2f} s in the 2 s after that", file=sys.stderr)
            self.assertLessEqual(idle, 0.02)  # an idle server burns nothing
            conn.close()
            g.channel.close()
            self.assertEqual(other.stop(), 0)
        finally:
            other.close()

    def test_spin_flag_range(self):
        r = subprocess.run([SERVER, "--model-repository", os.path.join(TMP, "repo"), "--spin-us", "-1"],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--spin-us out of range", r.stderr)


class ZShutdown(unittest.TestCase):  # last: stops the server
    def test_drain_timeout_cancels_long_streams(self):
        # A second server with a 1 s drain: a 100,000-token stream (seconds) is cut at the
        # drain timeout and the server still exits 0, soon.
        other = Server(os.path.join(TMP, "repo"), drain_s=1)
        conn = http.client.HTTPConnection("127.0.0.1", other.http_port, timeout=60)
        conn.request("POST", "/v2/models/charlm_one/generate_stream",
                     body=json.dumps(Pool.LONG))
        r = conn.getresponse()
        self.assertEqual(r.status, 200)
        r.readline()
        start = time.time()
        other.proc.send_signal(signal.SIGTERM)
        self.assertEqual(other.proc.wait(timeout=30), 0)
        self.assertLess(time.time() - start, 3)  # the stream alone runs for seconds more
        events = r.read().decode().count("data: ")
        self.assertLess(events, 100000)
        conn.close()
        other.close()

    def test_sigterm_drains(self):
        def on_first():
            S.proc.send_signal(signal.SIGTERM)
        # 2000 tokens: a fraction of a second here, seconds under sanitizers; well inside the
        # 20 s drain timeout either way.
        events = sse_events("charlm_one", {"text_input": "And", "parameters": {"max_new_tokens": 2000}},
                            on_first=on_first)
        self.assertEqual(len(events), 2000)  # accepted before SIGTERM: finished
        self.assertEqual(S.proc.wait(timeout=60), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
