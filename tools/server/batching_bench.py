#!/usr/bin/python3
"""Dynamic batching on a transformer encoder (issue 35): throughput and latency of batch-1
requests from 16 concurrent clients, with and without config.json's dynamic_batching, on one
dynvm-server (the same instance count for both), alternating rounds.

The model is tools/bench/encoder_bench.py's classifier (nn.TransformerEncoder, 2 layers,
d_model 128, key-padding mask, mean pool, 10 classes), exported by PyTorch with a symbolic
batch at sequence length 64. Every answer of the batched model is checked against PyTorch's
output for its own request (1e-3).

  /usr/bin/python3 tools/server/batching_bench.py [--server build/release/tools/server/dynvm-server]
      [--clients 16] [--seconds 5] [--rounds 2] [--max-batch 16] [--delay-us 1000]
"""
import argparse
import http.client
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
import encoder_bench  # noqa: E402  (the classifier and its inputs)

SEQ = 64  # --seq


def export(repo, max_batch, delay_us, instances):
    torch.manual_seed(0)
    model = encoder_bench.Classifier().eval()
    tokens, pad = encoder_bench.inputs_for(2, SEQ, 1)
    for name, batching in (("encoder", None), ("encoder_batched", (max_batch, delay_us))):
        os.makedirs(os.path.join(repo, name, "1"))
        torch.onnx.export(model, (tokens, pad), os.path.join(repo, name, "1", "model.onnx"),
                          opset_version=17, input_names=["tokens", "pad"], output_names=["y"],
                          dynamic_axes={"tokens": {0: "batch"}, "pad": {0: "batch"}, "y": {0: "batch"}})
        config = {"bounds": {"batch": 64}, "instances": instances, "max_queue": 256}
        if batching:
            config["dynamic_batching"] = {"max_batch_size": batching[0], "max_queue_delay_us": batching[1]}
        with open(os.path.join(repo, name, "config.json"), "w") as f:
            json.dump(config, f)
    return model


def request(seed):
    """A batch-1 request (binary REST body) and PyTorch's inputs for it."""
    tokens, pad = encoder_bench.inputs_for(1, SEQ, seed)
    t = tokens.numpy().astype("<i8").tobytes()
    p = pad.numpy().astype(np.uint8).tobytes()
    header = json.dumps({"inputs": [
        {"name": "tokens", "datatype": "INT64", "shape": [1, SEQ], "parameters": {"binary_data_size": len(t)}},
        {"name": "pad", "datatype": "BOOL", "shape": [1, SEQ], "parameters": {"binary_data_size": len(p)}}],
        "parameters": {"binary_data_output": True}}).encode()
    return header + t + p, len(header), (tokens, pad)


def load(port, model, clients, seconds, requests):
    lat, errors, stop = [], [], time.time() + seconds
    lock = threading.Lock()

    def client(c):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine, i = [], 0
        while time.time() < stop:
            body, head, _ = requests[(c + i) % len(requests)]
            i += 1
            t0 = time.perf_counter()
            conn.request("POST", f"/v2/models/{model}/infer", body=body,
                         headers={"Inference-Header-Content-Length": str(head)})
            r = conn.getresponse()
            data = r.read()
            mine.append(time.perf_counter() - t0)
            if r.status != 200:
                with lock:
                    errors.append(data[:200])
        conn.close()
        with lock:
            lat.extend(mine)
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - start
    lat.sort()
    return {"rps": len(lat) / wall, "p50_ms": lat[len(lat) // 2] * 1e3,
            "p99_ms": lat[int(len(lat) * 0.99)] * 1e3, "n": len(lat), "errors": len(errors)}


def check(port, model, requests, torch_model):
    worst = 0.0
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for body, head, (tokens, pad) in requests:
        conn.request("POST", f"/v2/models/{model}/infer", body=body,
                     headers={"Inference-Header-Content-Length": str(head)})
        r = conn.getresponse()
        data = r.read()
        n = int(r.getheader("Inference-Header-Content-Length"))
        got = np.frombuffer(data[n:], np.float32)
        with torch.no_grad():
            want = torch_model(tokens, pad).numpy().ravel()
        worst = max(worst, float(np.max(np.abs(got - want))))
    conn.close()
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default=os.path.join(ROOT, "build/release/tools/server/dynvm-server"))
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--delay-us", type=int, default=1000)
    ap.add_argument("--instances", type=int, default=os.cpu_count())
    ap.add_argument("--seq", type=int, default=SEQ)
    args = ap.parse_args()
    globals()["SEQ"] = args.seq
    repo = tempfile.mkdtemp(prefix="dynvm-batching-")
    torch_model = export(repo, args.max_batch, args.delay_us, args.instances)
    proc = subprocess.Popen([args.server, "--model-repository", repo, "--http-port", "0",
                             "--grpc-port", "0", "--access-log", "off"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(re.search(r"http=[^ ]*:(\d+)", proc.stdout.readline()).group(1))
        requests = [request(seed) for seed in range(64)]
        err = check(port, "encoder_batched", requests[:16], torch_model)
        print(f"encoder (seq {SEQ}, batch-1 requests), {args.clients} clients, {args.instances} instances; "
              f"batched outputs vs PyTorch: max |diff| {err:.2e}")
        if err > 1e-3:
            sys.exit("batched outputs differ from PyTorch's")
        load(port, "encoder", args.clients, 1, requests)  # warm up both
        load(port, "encoder_batched", args.clients, 1, requests)
        results = {"encoder": [], "encoder_batched": []}
        for r in range(args.rounds):
            for model in results:
                res = load(port, model, args.clients, args.seconds, requests)
                results[model].append(res)
                print(f"round {r + 1} {model:16s} {res['rps']:8.1f} req/s  p50 {res['p50_ms']:7.2f} ms  "
                      f"p99 {res['p99_ms']:7.2f} ms  ({res['n']} requests, {res['errors']} errors)")
        base = statistics.median(x["rps"] for x in results["encoder"])
        batched = statistics.median(x["rps"] for x in results["encoder_batched"])
        print(f"median throughput: no batching {base:.1f} req/s, dynamic batching {batched:.1f} req/s: "
              f"{batched / base:.2f}x (max_batch_size {args.max_batch}, max_queue_delay_us {args.delay_us})")
        metrics = urlget(port, "/metrics")
        m = re.search(r'dynvm_batch_size_sum\{model="encoder_batched"\} (\S+)', metrics)
        c = re.search(r'dynvm_batch_size_count\{model="encoder_batched"\} (\S+)', metrics)
        if m and c:
            print(f"mean batch: {float(m.group(1)) / float(c.group(1)):.1f} rows")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def urlget(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", path)
    data = conn.getresponse().read().decode()
    conn.close()
    return data


if __name__ == "__main__":
    main()
