"""torchvision architectures exported at test time, compiled by vm-compile and run by vm-run,
against ONNX Runtime (ctest: torchvision_export_test).

A fast subset of tools/models/torchvision_zoo.py (docs/torchvision.md), one model per family
and per set of operators: ResNet-18 at opset 17 (Conv, BatchNormalization kept in the graph for
dynvm to fold, residual Add, MaxPool, GlobalAveragePool, Gemm), MobileNetV3-small at opset 11
(HardSwish, HardSigmoid, squeeze-excitation, opset 11's attribute forms), ShuffleNetV2 at 11
(channel shuffle: Reshape/Transpose, Split), EfficientNet-B0 at 13 (SiLU, BN folded by
PyTorch), a ViT-B/16 at a 32x32 image (attention: MatMul, Softmax, LayerNormalization, erf
GELU), LR-ASPP (bilinear Resize to the input's size), R(2+1)D-18 (Conv3D on a clip) and RAFT
small (GridSample, a correlation volume, four refinement steps) and SSDlite (a detector: TopK per
class, batched NonMaxSuppression, box decoding; its score layers calibrated so that scores
spread, there must be detections, and they must be ONNX Runtime's: the count and labels exactly,
boxes and scores within the tolerance, boxes of equal scores in either order), each with random
weights at a
fixed seed and re-drawn BatchNorm statistics, the batch (and H/W where the model allows)
dynamic, run on two or three inputs of different batch and size. Every output must match ONNX
Runtime 1.30 (graph optimizations off) within 1e-4 of the output's largest magnitude plus
1e-3 relative. The models are exported here, never committed.

Exits 77 (a ctest skip) without PyTorch, torchvision or ONNX Runtime (onnxruntime-node).

    /usr/bin/python3 torchvision_export_test.py --vm-compile PATH --vm-run PATH [--ort-dir DIR]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tools", "models"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "differential"))

try:
    import numpy as np
    import torch
    import torchvision
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e} (install python3-torch and python3-torchvision: tools/install-deps.sh test)")
    sys.exit(77)

import torchvision_zoo as zoo  # noqa: E402
import workers  # noqa: E402

# (model, opset, sizes, constructor arguments): sizes as in torchvision_zoo.spec.
CASES = [
    ("resnet18", 17, [(1, 64, 64), (2, 96, 80)], None),
    ("mobilenet_v3_small", 11, [(1, 64, 64), (3, 72, 64)], None),
    ("shufflenet_v2_x1_0", 11, [(1, 64, 64), (2, 96, 64)], None),
    ("efficientnet_b0", 13, [(2, 64, 64), (1, 96, 96)], None),
    ("vit_b_16", 17, [(1, 32, 32), (3, 32, 32)], {"image_size": 32}),
    ("lraspp_mobilenet_v3_large", 17, [(1, 64, 64), (2, 96, 64)], None),
    ("ssdlite320_mobilenet_v3_large", 17, [(320, 320), (256, 320)], None),
    ("r2plus1d_18", 17, [(1, 4, 32, 32), (2, 2, 40, 32)], None),
    # 128 and more: at 64 the correlation pyramid's coarsest level is 1x1, where torchvision's
    # coordinate normalization divides by W - 1 = 0 (an infinite grid: PyTorch and dynvm give
    # NaN, ONNX Runtime the one pixel).
    ("raft_small", 17, [(1, 128, 128), (2, 128, 144)], None),
]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}"[-2000:])
    return r.stdout


def check_case(args, ort, name, opset, sizes, kwargs, tmp):
    """Failures of one export: compile, then each input in dynvm and ORT."""
    m = dict(next(x for x in zoo.MODELS if x["name"] == name))
    m["sizes"] = sizes
    if kwargs is not None:
        m["kwargs"] = kwargs
    path = os.path.join(tmp, f"{name}-{opset}.onnx")
    zoo.export(m, zoo.build(m, torch, torchvision), path, opset, torch)
    dvm = os.path.join(tmp, f"{name}-{opset}.dvm")
    run([args.vm_compile, path, "-o", dvm])
    sid = zoo.ort_ask(workers, ort, {"op": "open", "model": path, "threads": 1,
                                     "optimize": False})[0]["id"]
    failures, worst = [], 0.0
    for i, size in enumerate(sizes):
        feeds = zoo.make_inputs(m, size, 1000 + i)
        reply, payload = zoo.ort_ask(workers, ort, {"op": "run", "id": sid}, feeds.items())
        want = dict(workers.unpack_arrays(reply["outputs"], payload))
        cmd = [args.vm_run, dvm, "--output-dir", os.path.join(tmp, f"out-{name}-{i}")]
        for k, v in feeds.items():
            np.save(os.path.join(tmp, f"{k}.npy"), v)
            cmd += ["--input", f"{k}={os.path.join(tmp, k + '.npy')}"]
        run(cmd)
        got = {k: np.load(os.path.join(tmp, f"out-{name}-{i}", f"{k}.npy")) for k in want}
        if not all(w.size and np.abs(w).max() > 1e-6 for w in want.values()):
            failures.append(f"{name} {size}: an ORT output is empty or all zeros (for a "
                            f"detector: no detection; a check that cannot fail)")
            continue
        problem = None
        if m["family"] == "detection":  # boxes of equal scores may come in either order
            got, problem = zoo.match_detections(got, want, m["tol"])
        rel = 0.0
        if problem is None:
            _, rel, problem = zoo.compare(got, want, m["tol"])
        worst = max(worst, rel)
        if problem:
            failures.append(f"{name} @{opset} {size}: {problem}")
    zoo.ort_ask(workers, ort, {"op": "close", "id": sid})
    return failures, worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vm-compile", required=True)
    ap.add_argument("--vm-run", required=True)
    ap.add_argument("--ort-dir", default="")
    args = ap.parse_args()
    nm = workers.find_ort(args.ort_dir or None)
    if nm is None or shutil.which("node") is None:
        print("SKIP: ONNX Runtime (onnxruntime-node) not found: set DYNVM_ORT_DIR")
        return 77
    torch.set_num_threads(1)
    ort = workers._Process(["node", os.path.join(ROOT, "tools", "zoo", "ort_zoo.js"), nm])
    failures = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, opset, sizes, kwargs in CASES:
                t0 = time.monotonic()
                try:
                    f, worst = check_case(args, ort, name, opset, sizes, kwargs, tmp)
                except (RuntimeError, workers.WorkerFailure) as e:
                    f, worst = [f"{name} @{opset}: {e}"], float("nan")
                failures += f
                print(f"{name} @{opset}: {'FAIL' if f else 'ok'}, max |error| / max |ORT| "
                      f"{worst:.2e} ({time.monotonic() - t0:.1f} s)", flush=True)
    finally:
        ort.stop()
    for f in failures:
        print("FAIL:", f)
    print(f"{len(CASES)} torchvision exports, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
