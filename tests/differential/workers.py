"""The two engines the fuzzer compares, each in a worker process of its own.

`OrtWorker` drives ONNX Runtime (onnxruntime-node) through one persistent `node` process
(ort_worker.js); `DynvmWorker` runs dynvm's Python package in a child Python process
(dynvm_worker.py). Both speak the same framing over pipes: a 4-byte little-endian length, a
JSON header, then `header["payload"]` bytes of raw tensor data. A request that does not answer
within its timeout, or a worker that dies, is reported as a `WorkerFailure` ("hang" or
"crash") and the worker is restarted: a crash or a hang is a verdict, never the fuzzer's end.
"""
import json
import os
import select
import signal
import struct
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# numpy dtype <-> the type names ONNX Runtime's JavaScript API uses.
ORT_TYPES = {
    np.dtype(np.float32): "float32", np.dtype(np.float64): "float64",
    np.dtype(np.float16): "float16", np.dtype(np.int8): "int8", np.dtype(np.uint8): "uint8",
    np.dtype(np.int16): "int16", np.dtype(np.uint16): "uint16", np.dtype(np.int32): "int32",
    np.dtype(np.uint32): "uint32", np.dtype(np.int64): "int64", np.dtype(np.uint64): "uint64",
    np.dtype(np.bool_): "bool",
}
NP_TYPES = {v: k for k, v in ORT_TYPES.items()}


class WorkerFailure(Exception):
    """A worker crashed (`kind` "crash") or did not answer in time ("hang")."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def pack_arrays(arrays, start=0):
    """[(name, ndarray)] -> (specs, chunks) with offsets from `start`."""
    specs, chunks, offset = [], [], start
    for name, a in arrays:
        a = np.asarray(a)
        data = a.tobytes(order="C")  # ascontiguousarray would make a scalar 1-D
        specs.append({"name": name, "type": ORT_TYPES[a.dtype], "dims": list(a.shape),
                      "offset": offset, "length": len(data)})
        chunks.append(data)
        offset += len(data)
    return specs, chunks, offset


def unpack_arrays(specs, payload):
    out = []
    for s in specs:
        raw = payload[s["offset"]:s["offset"] + s["length"]]
        a = np.frombuffer(raw, dtype=NP_TYPES[s["type"]]).copy().reshape(s["dims"])
        out.append((s["name"], a))
    return out


def frame(header, chunks):
    js = json.dumps(header).encode()
    return struct.pack("<I", len(js)) + js + b"".join(chunks)


class _Process:
    """A child speaking the framing; restarted after a crash or a hang."""

    def __init__(self, argv, env=None):
        self.argv = argv
        self.env = env
        self.proc = None
        self.pending_error = None

    def _start(self):
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=self.env,
                                     start_new_session=True)

    def stop(self):
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
            self.proc = None

    def _read_exact(self, n, deadline):
        fd = self.proc.stdout.fileno()
        buf = bytearray()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerFailure("hang", "no answer in time")
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
            if not chunk:
                code = self.proc.poll()
                if code is None:
                    code = self.proc.wait(timeout=5)
                raise WorkerFailure("crash", f"worker exited ({_describe(code)})")
            buf += chunk
        return bytes(buf)

    def send(self, header, chunks):
        """Writes one request; recv() reads its reply (the two may overlap other work)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            self.proc.stdin.write(frame(header, chunks))
            self.proc.stdin.flush()
            self.pending_error = None
        except BrokenPipeError:
            code = self.proc.wait(timeout=5)
            self.proc = None
            self.pending_error = WorkerFailure("crash", f"worker exited ({_describe(code)})")

    def recv(self, timeout):
        if self.pending_error is not None:
            e, self.pending_error = self.pending_error, None
            raise e
        try:
            deadline = time.monotonic() + timeout
            (hlen,) = struct.unpack("<I", self._read_exact(4, deadline))
            reply = json.loads(self._read_exact(hlen, deadline))
            payload = self._read_exact(reply.get("payload", 0), deadline)
            return reply, payload
        except WorkerFailure:
            self.stop()
            raise

    def request(self, header, chunks, timeout):
        self.send(header, chunks)
        return self.recv(timeout)


def _describe(code):
    if code is not None and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"


def find_ort(explicit=None):
    """The node_modules folder holding onnxruntime-node, or None.

    Looked for in `explicit`, $DYNVM_ORT_DIR (a folder holding node_modules) and the cache
    ${XDG_CACHE_HOME:-~/.cache}/dynvm/ort, where install_ort() puts it.
    """
    cands = []
    if explicit:
        cands.append(explicit)
    if os.environ.get("DYNVM_ORT_DIR"):
        cands.append(os.environ["DYNVM_ORT_DIR"])
    cands.append(ort_cache_dir())
    for c in cands:
        for nm in (os.path.join(c, "node_modules"), c):
            if os.path.isfile(os.path.join(nm, "onnxruntime-node", "package.json")):
                return os.path.abspath(nm)
    return None


def ort_cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dynvm", "ort")


def install_ort(version="1.30.0", timeout=120):
    """npm install --ignore-scripts onnxruntime-node into the cache; its node_modules or None."""
    d = ort_cache_dir()
    try:
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "package.json"), "w") as f:
            json.dump({"name": "dynvm-difftest-ort", "private": True,
                       "dependencies": {"onnxruntime-node": version}}, f)
        subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund",
                        "--loglevel=error"], cwd=d, timeout=timeout, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return find_ort(d)


class OrtWorker:
    """ONNX Runtime in one persistent node process."""

    def __init__(self, node_modules, threads=1):
        self.threads = threads
        self.proc = _Process(["node", os.path.join(HERE, "ort_worker.js"), node_modules])

    def send(self, model_bytes, inputs):
        specs, chunks, end = pack_arrays(inputs.items(), start=len(model_bytes))
        header = {"threads": self.threads, "model": [0, len(model_bytes)], "inputs": specs,
                  "payload": end}
        self.proc.send(header, [model_bytes] + chunks)

    def recv(self, timeout=60.0):
        """{name: ndarray} of the outputs, or raises OrtError / WorkerFailure."""
        reply, payload = self.proc.recv(timeout)
        if not reply["ok"]:
            raise OrtError(reply["error"])
        return dict(unpack_arrays(reply["outputs"], payload))

    def run(self, model_bytes, inputs, timeout=60.0):
        self.send(model_bytes, inputs)
        return self.recv(timeout)

    def close(self):
        self.proc.stop()


class OrtError(Exception):
    """ONNX Runtime refused the model or failed to run it."""


class DynvmWorker:
    """dynvm's Python package in a child process (dynvm_worker.py)."""

    def __init__(self, pythonpath):
        env = dict(os.environ)
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = _Process([sys.executable, os.path.join(HERE, "dynvm_worker.py")], env=env)

    def send(self, model_path, inputs, configs, timeout=60.0):
        """Runs the model under each (optimize, threads) config; recv() gets the results."""
        specs, chunks, end = pack_arrays(inputs.items())
        header = {"model_path": model_path, "inputs": specs, "payload": end,
                  "configs": [list(c) for c in configs], "timeout": timeout}
        self.deadline = timeout * len(configs) + 10.0
        self.proc.send(header, chunks)

    def recv(self):
        """One entry per config: ("ok", {name: ndarray}) or ("error", message).

        Raises WorkerFailure when the process crashed or hung."""
        reply, payload = self.proc.recv(self.deadline)
        results = []
        for r in reply["results"]:
            if r["ok"]:
                results.append(("ok", dict(unpack_arrays(r["outputs"], payload))))
            else:
                results.append(("error", r["error"]))
        return results

    def run(self, model_path, inputs, configs, timeout=60.0):
        self.send(model_path, inputs, configs, timeout)
        return self.recv()

    def close(self):
        self.proc.stop()
