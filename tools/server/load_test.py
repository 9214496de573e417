#!/usr/bin/env python3
"""dynvm-server under load (issue 35's load tests), loopback only:

  - 32 concurrent clients x 200 requests on the MLP (REST JSON, keep-alive), 0 errors, every
    answer equal to the numpy reference;
  - 32 concurrent clients x 200 generate_stream requests on the char LM (8 tokens each), 0
    errors, every stream's text equal to the one a single client gets for the same seed;
  - memory stays flat: the server's resident set after 10,000 more MLP requests is within
    8 MiB of what it was after the first load (no per-request growth).
  - SIGTERM under load loses no accepted request: with 16 clients sending, every request the
    server answered (its access log) reached its client as a 200, and it exits 0.

    DYNVM_SERVER=... /usr/bin/python3 tools/server/load_test.py [--clients 32] [--requests 200]
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = os.environ.get("DYNVM_SERVER", os.path.join(ROOT, "build/release/tools/dynvm-server"))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def mlp_reference(x):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(os.path.join(ROOT, "deploy/model-repository/mlp/1/model.onnx"))
    w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    z = np.maximum(x @ w["w1"] + w["b1"], 0) @ w["w2"] + w["b2"]
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def run_clients(n_clients, n_requests, work):
    """Runs work(conn, client, i) n_requests times on each of n_clients threads (one keep-alive
    connection each); returns the errors and the wall time."""
    errors, lock = [], threading.Lock()

    def client(c):
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
        for i in range(n_requests):
            try:
                problem = work(conn, c, i)
            except Exception as e:  # a dropped connection is an error too
                problem = repr(e)
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
            if problem:
                with lock:
                    errors.append(problem)
        conn.close()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(n_clients)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors, time.time() - start


def post(conn, path, body):
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, r.read()


def sigterm_under_load(xs, clients=16):
    """SIGTERM while 16 clients send MLP requests, a fresh connection each: every request the
    server accepted (its access log has a line for each request it answered, written before
    the answer is sent) reached its client as a 200, and the server exits 0. A client stops at
    its first refused or reset connection (a request the server never read)."""
    log = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"dynvm-load-access-{os.getpid()}.log")
    proc = subprocess.Popen([SERVER, "--model-repository", os.path.join(ROOT, "deploy/model-repository"),
                             "--http-port", "0", "--grpc-port", "0", "--access-log", log],
                            stdout=subprocess.PIPE, text=True)
    port = int(re.search(r"http=[^ ]*:(\d+)", proc.stdout.readline()).group(1))
    received, bad, lock = [0], [], threading.Lock()
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4],
                                   "data": xs[0].ravel().tolist()}]})

    def client():
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("POST", "/v2/models/mlp/infer", body=body, headers={"Connection": "close"})
                r = conn.getresponse()
                r.read()
                conn.close()
            except (ConnectionError, http.client.RemoteDisconnected, OSError):
                return
            with lock:
                if r.status == 200:
                    received[0] += 1
                else:
                    bad.append(r.status)
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    proc.send_signal(subprocess.signal.SIGTERM)
    code = proc.wait(timeout=60)
    for t in threads:
        t.join()
    proc.stdout.close()
    with open(log) as f:
        answered = sum(1 for line in f if " POST /v2/models/mlp/infer 200 " in line)
    os.remove(log)
    ok = code == 0 and not bad and answered == received[0] and received[0] > 0
    print(f"SIGTERM under load: {answered} requests answered by the server, {received[0]} received "
          f"by clients, other statuses {bad[:5]}, exit {code}: {'ok' if ok else 'FAILED'}")
    return ok


def main():
    global PORT
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--memory-requests", type=int, default=10000)
    args = ap.parse_args()
    proc = subprocess.Popen([SERVER, "--model-repository", os.path.join(ROOT, "deploy/model-repository"),
                             "--http-port", "0", "--grpc-port", "0", "--access-log", "off"],
                            stdout=subprocess.PIPE, text=True)
    failed = False
    try:
        PORT = int(re.search(r"http=[^ ]*:(\d+)", proc.stdout.readline()).group(1))
        rng = np.random.default_rng(3)
        xs = rng.standard_normal((args.clients, 2, 4)).astype(np.float32)
        refs = [mlp_reference(x) for x in xs]

        def mlp(conn, c, i):
            status, data = post(conn, "/v2/models/mlp/infer", {
                "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "data": xs[c].ravel().tolist()}]})
            if status != 200:
                return f"mlp: {status} {data[:200]!r}"
            got = np.array(json.loads(data)["outputs"][0]["data"], np.float32).reshape(2, 3)
            if not np.allclose(got, refs[c], rtol=1e-5, atol=1e-6):
                return f"mlp: client {c} got {got}, want {refs[c]}"
            return None

        errors, wall = run_clients(args.clients, args.requests, mlp)
        n = args.clients * args.requests
        print(f"mlp infer: {args.clients} clients x {args.requests} requests: {len(errors)} errors, "
              f"{wall:.2f} s, {n / wall:.0f} requests/s")
        failed |= bool(errors)
        for e in errors[:5]:
            print("  " + e)

        def stream_text(conn, seed):
            conn.request("POST", "/v2/models/charlm/generate_stream", body=json.dumps(
                {"text_input": "And", "parameters": {"max_new_tokens": 8, "seed": seed}}))
            r = conn.getresponse()
            body = r.read().decode()
            if r.status != 200:
                return None, f"generate_stream: {r.status} {body[:200]}"
            events = [json.loads(line[6:]) for line in body.split("\n") if line.startswith("data: ")]
            return "".join(e.get("text_output", "") for e in events), None

        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
        want = [stream_text(conn, s)[0] for s in range(args.clients)]
        conn.close()

        def gen(conn, c, i):
            text, problem = stream_text(conn, c)
            if problem:
                return problem
            return None if text == want[c] else f"generate_stream: client {c}: {text!r} != {want[c]!r}"

        errors, wall = run_clients(args.clients, args.requests, gen)
        print(f"generate_stream: {args.clients} clients x {args.requests} streams of 8 tokens: "
              f"{len(errors)} errors, {wall:.2f} s, {n / wall:.0f} streams/s")
        failed |= bool(errors)
        for e in errors[:5]:
            print("  ", e)

        before = rss_kib(proc.pid)
        per = max(1, args.memory_requests // args.clients)
        errors, wall = run_clients(args.clients, per, mlp)
        after = rss_kib(proc.pid)
        print(f"memory: {args.clients * per} more requests: RSS {before} KiB -> {after} KiB "
              f"({after - before:+d} KiB), {len(errors)} errors")
        failed |= bool(errors) or after - before > 8 * 1024
    finally:
        proc.terminate()
        code = proc.wait(timeout=60)
        proc.stdout.close()
    failed |= code != 0
    failed |= not sigterm_under_load(xs)
    print("load_test:", "FAILED" if failed else "passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
