"""A prompt-sized product on a weight stored as panels against the transposed weight (docs/llm.md,
s7): one ONNX MatMul [rows, K] x W [K, N] compiled twice, by default (W as panels of 16 columns,
packed_gemm::Multiply) and with --disable-rewrite pack_weights (W as [N, K], oneDNN's
transposed-B brgemm at one thread, dnnl_sgemm per range of the pool at two), the two VMs run
alternately; best of 7 per shape.

    /usr/bin/python3 tools/bench/llm/panel_matmul_ab.py --build build/release --rows 128,512 \
        --threads 1
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# (K, N) of the llama exports' products (tools/bench/llm/export_step.py): 400 MB and 1.6 GB
# q/o, gate/up, down; 100 MB gate/up and down.
SHAPES = [(1024, 1024), (1024, 2816), (2816, 1024), (512, 1408), (1408, 512), (2048, 5632),
          (5632, 2048)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--rows", default="128,512")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.build, "python"))
    import dynvm  # noqa: E402
    vm_compile = os.path.join(a.build, "tools", "vm-compile")
    rng = np.random.default_rng(0)
    tmp = tempfile.mkdtemp()
    for k, n in SHAPES:
        w = rng.standard_normal((k, n)).astype(np.float32)
        g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", n])],
                              [numpy_helper.from_array(w, "w")])
        path = os.path.join(tmp, f"m_{k}_{n}.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
        vms = {}
        for tag, extra in (("panels", []), ("transposed", ["--disable-rewrite", "pack_weights"])):
            out = path.replace(".onnx", f".{tag}.dvm")
            subprocess.run([vm_compile, path, "-o", out] + extra, check=True, capture_output=True)
            vms[tag] = dynvm.VirtualMachine(dynvm.load(out), threads=a.threads)
        for rows in [int(r) for r in a.rows.split(",")]:
            x = rng.standard_normal((rows, k)).astype(np.float32)
            best = {t: 1e9 for t in vms}
            for _ in range(7):
                for t, vm in vms.items():
                    t0 = time.perf_counter()
                    vm.run(x=x)
                    best[t] = min(best[t], time.perf_counter() - t0)
            print(f"K {k} N {n} rows {rows} threads {a.threads}: panels {best['panels'] * 1e3:.2f} "
                  f"ms transposed {best['transposed'] * 1e3:.2f} ms  panels/transposed "
                  f"{best['panels'] / best['transposed']:.2f}", flush=True)


if __name__ == "__main__":
    main()
