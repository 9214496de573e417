#!/usr/bin/python3
"""Dynamic batching on a transformer encoder (issue 35): throughput and latency of batch-1
requests from 16 concurrent clients, with and without config.json's dynamic_batching, on one
dynvm-server (each with its own instances and intra-op threads, by default the same), alternating
rounds.

The model is tools/bench/encoder_bench.py's classifier (nn.TransformerEncoder, 2 layers,
d_model 128, key-padding mask, mean pool, 10 classes; --dims 768,12,12,3072 makes its encoder
BERT-base's size), exported by PyTorch with a symbolic batch at sequence length 64 (--seq). First --clients requests are sent to the batched model
all at once (so that they batch): each answer must equal the unbatched model's within 1e-5
(how many are byte-identical is printed: the kernels' sums may run in another order at another
batch) and PyTorch's output for its own request within 1e-3. The load comes from server-bench --load-clients
(C++ clients on raw sockets, so the clients take little of the cores they share with the
server). First, what batching can give at most: the model's run in process (vm-run) at batch 1
and at batch --max-batch, per row.

  /usr/bin/python3 tools/server/batching_bench.py [--build build/release] [--clients 16]
      [--seconds 5] [--rounds 3] [--max-batch 16] [--delay-us 1000] [--seq 64]
      [--instances N] [--threads T] [--batched-instances N] [--batched-threads T] [--gap-us G]
      [--skip-in-process] [--dims D,HEADS,LAYERS,FF]
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
import encoder_bench  # noqa: E402  (the classifier and its inputs)

SEQ = 64  # --seq


def export(repo, args):
    """Both models' repository entries: `encoder` (no batching) and `encoder_batched`, each with
    its own instances and threads per instance."""
    torch.manual_seed(0)
    d, heads, layers, ff = args.dims
    model = encoder_bench.Classifier(d=d, heads=heads, layers=layers, ff=ff).eval()
    if args.dims != [128, 4, 2, 512]:  # not the default classifier: each layer its own weights
        encoder_bench.distinct_layers(model)
    tokens, pad = encoder_bench.inputs_for(2, SEQ, 1)
    for name, batching, instances, threads in (
            ("encoder", False, args.instances, args.threads),
            ("encoder_batched", True, args.batched_instances or args.instances,
             args.batched_threads or args.threads)):
        os.makedirs(os.path.join(repo, name, "1"))
        torch.onnx.export(model, (tokens, pad), os.path.join(repo, name, "1", "model.onnx"),
                          opset_version=17, input_names=["tokens", "pad"], output_names=["y"],
                          dynamic_axes={"tokens": {0: "batch"}, "pad": {0: "batch"}, "y": {0: "batch"}})
        config = {"bounds": {"batch": 64}, "instances": instances, "threads_per_instance": threads,
                  "max_queue": 256}
        if batching:
            config["dynamic_batching"] = {"max_batch_size": args.max_batch,
                                          "max_queue_delay_us": args.delay_us}
            if args.gap_us is not None:
                config["dynamic_batching"]["max_arrival_gap_us"] = args.gap_us
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


def in_process(build, onnx_path, max_batch, repeat):
    """vm-run's median time of one run at batch 1 and at batch max_batch (ms)."""
    work = tempfile.mkdtemp(prefix="dynvm-batching-vm-")
    dvm = os.path.join(work, "model.dvm")
    subprocess.run([os.path.join(build, "tools/vm-compile"), onnx_path, "-o", dvm, "--bound",
                    f"batch={max(64, max_batch)}"], check=True, stdout=subprocess.DEVNULL)
    times = {}
    for b in (1, max_batch):
        tokens, pad = encoder_bench.inputs_for(b, SEQ, 1)
        np.save(os.path.join(work, "tokens.npy"), tokens.numpy())
        np.save(os.path.join(work, "pad.npy"), pad.numpy())
        out = subprocess.run([os.path.join(build, "tools/vm-run"), dvm, "-i",
                              "tokens=" + os.path.join(work, "tokens.npy"), "-i",
                              "pad=" + os.path.join(work, "pad.npy"), "--repeat", str(repeat)],
                             check=True, capture_output=True, text=True).stdout
        times[b] = float(re.search(r"median_ms=([0-9.]+)", out).group(1))
    return times


def infer(port, model, body, head):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", f"/v2/models/{model}/infer", body=body,
                 headers={"Inference-Header-Content-Length": str(head)})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    if r.status != 200:
        sys.exit(f"{model}: HTTP {r.status}: {data[:200]}")
    return data[int(r.getheader("Inference-Header-Content-Length")):]


def check(port, requests, torch_model):
    """Sends `requests` to encoder_batched all at once (so that they batch) and one by one to
    encoder. Returns the largest difference of a batched answer from PyTorch's output for its
    request and from the unbatched model's answer, and how many were byte-identical to it."""
    with concurrent.futures.ThreadPoolExecutor(len(requests)) as pool:
        batched = list(pool.map(lambda r: infer(port, "encoder_batched", r[0], r[1]), requests))
    worst, apart, same = 0.0, 0.0, 0
    for (body, head, (tokens, pad)), got in zip(requests, batched):
        alone = infer(port, "encoder", body, head)
        same += got == alone
        got = np.frombuffer(got, np.float32)
        apart = max(apart, float(np.max(np.abs(got - np.frombuffer(alone, np.float32)))))
        with torch.no_grad():
            want = torch_model(tokens, pad).numpy().ravel()
        worst = max(worst, float(np.max(np.abs(got - want))))
    return worst, apart, same


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build/release"))
    ap.add_argument("--server", help="the dynvm-server binary (default: the build's)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--delay-us", type=int, default=1000)
    ap.add_argument("--instances", type=int, default=os.cpu_count(),
                    help="instances of the model without batching (and of the batched one by default)")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per instance")
    ap.add_argument("--batched-instances", type=int, help="instances of the batched model")
    ap.add_argument("--batched-threads", type=int, help="intra-op threads per batched instance")
    ap.add_argument("--gap-us", type=int, help="max_arrival_gap_us (default: the server's)")
    ap.add_argument("--seq", type=int, default=SEQ)
    ap.add_argument("--skip-in-process", action="store_true", help="skip the vm-run timing")
    ap.add_argument("--repeat", type=int, default=30, help="vm-run --repeat of the in-process timing")
    ap.add_argument("--dims", default="128,4,2,512",
                    help="the classifier's d_model,heads,layers,ff (768,12,12,3072: BERT-base's "
                         "encoder, 85 M parameters)")
    args = ap.parse_args()
    args.dims = [int(v) for v in args.dims.split(",")]
    globals()["SEQ"] = args.seq
    repo = tempfile.mkdtemp(prefix="dynvm-batching-")
    torch_model = export(repo, args)
    b = args.max_batch
    if not args.skip_in_process:
        t = in_process(args.build, os.path.join(repo, "encoder", "1", "model.onnx"), b, args.repeat)
        print(f"in process (vm-run, 1 thread): batch 1 {t[1]:.3f} ms, batch {b} {t[b]:.3f} ms = "
              f"{t[b] / b:.3f} ms a row: one batched call of {b} costs {t[b] / (b * t[1]):.2f}x "
              f"{b} batch-1 calls (batching can give at most {b * t[1] / t[b]:.2f}x)")
    server = args.server or os.path.join(args.build, "tools/dynvm-server")
    proc = subprocess.Popen([server, "--model-repository", repo, "--http-port", "0",
                             "--grpc-port", "0", "--access-log", "off"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(re.search(r"http=[^ ]*:(\d+)", proc.stdout.readline()).group(1))
        requests = [request(seed) for seed in range(64)]
        err, apart, same = check(port, requests[:args.clients], torch_model)
        print(f"encoder (d_model,heads,layers,ff {args.dims}, seq {SEQ}, batch-1 requests), "
              f"{args.clients} clients; encoder: "
              f"{args.instances} instances x {args.threads} threads, encoder_batched: "
              f"{args.batched_instances or args.instances} instances x "
              f"{args.batched_threads or args.threads} threads")
        print(f"{args.clients} concurrent batched answers: max |diff| {err:.2e} from PyTorch, "
              f"{apart:.2e} from the unbatched model's ({same} byte-identical)")
        if err > 1e-3 or apart > 1e-5:
            sys.exit("batched outputs differ from PyTorch's or from the unbatched model's")
        body_path = os.path.join(repo, "request.bin")
        with open(body_path, "wb") as f:
            f.write(requests[0][0])
        bench = [os.path.join(args.build, "tools/server/server-bench"), "--http-port", str(port),
                 "--load-clients", str(args.clients), "--load-models", "encoder,encoder_batched",
                 "--load-body", body_path, "--load-header-length", str(requests[0][1])]
        subprocess.run(bench + ["--seconds", "1", "--load-rounds", "1"], check=True,
                       stdout=subprocess.DEVNULL)  # warm up both
        subprocess.run(bench + ["--seconds", str(args.seconds), "--load-rounds", str(args.rounds)],
                       check=True)
        gap = "" if args.gap_us is None else f", max_arrival_gap_us {args.gap_us}"
        print(f"(max_batch_size {args.max_batch}, max_queue_delay_us {args.delay_us}{gap})")
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
