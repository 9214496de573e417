"""The dynvm side of the differential fuzzer: a child process that compiles and runs models.

Reads framed requests on stdin (workers.py): a model path, input tensors and a list of
(optimize, threads) configurations; compiles the model once per optimize setting with
dynvm.compile and runs it on a fresh VirtualMachine per configuration, with a run timeout and
a memory limit; answers with each configuration's outputs or its error message. A crash or a
hang here kills only this process (the parent restarts it).
"""
import json
import struct
import sys

import numpy as np

import dynvm
import workers

MEMORY_LIMIT = 2 << 30


def _read_exact(f, n):
    data = f.read(n)
    if len(data) != n:
        sys.exit(0)
    return data


def serve():
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        (hlen,) = struct.unpack("<I", _read_exact(stdin, 4))
        header = json.loads(_read_exact(stdin, hlen))
        payload = _read_exact(stdin, header["payload"])
        inputs = dict(workers.unpack_arrays(header["inputs"], payload))
        results, arrays = [], []
        exes = {}
        for optimize, threads in header["configs"]:
            try:
                if optimize not in exes:
                    try:
                        exes[optimize] = dynvm.compile(header["model_path"],
                                                       optimize=bool(optimize))
                    except Exception as e:  # noqa: BLE001 - the compile error is the verdict
                        exes[optimize] = e
                if isinstance(exes[optimize], Exception):
                    raise exes[optimize]
                vm = dynvm.VirtualMachine(exes[optimize], threads=threads,
                                          memory_limit=MEMORY_LIMIT)
                out = vm.run(dict(inputs), timeout=header["timeout"])
                names = []
                for name, value in out.items():
                    if not isinstance(value, np.ndarray):
                        raise TypeError(f"output {name} is not a tensor")
                    names.append(name)
                    arrays.append((f"{len(results)}/{name}", value))
                results.append({"ok": True, "names": names})
            except Exception as e:  # noqa: BLE001 - every error is a verdict to report
                results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
        specs, chunks, end = workers.pack_arrays(arrays)
        by_config = {}
        for s in specs:
            idx, _, name = s["name"].partition("/")
            s = dict(s, name=name)
            by_config.setdefault(int(idx), []).append(s)
        for i, r in enumerate(results):
            if r["ok"]:
                r["outputs"] = by_config.get(i, [])
        stdout.write(workers.frame({"payload": end, "results": results}, chunks))
        stdout.flush()


if __name__ == "__main__":
    serve()
