#!/usr/bin/python3
"""torchvision's architectures through dynvm, against ONNX Runtime (docs/torchvision.md).

Every torchvision 0.14 architecture that builds without downloading weights (weights=None,
random init at a fixed seed, every BatchNorm's statistics and affine re-drawn to non-trivial
values so that folding them is tested, then eval()) is exported with torch.onnx.export (opset
17 with BatchNormalization kept in the graph, for dynvm to fold; a subset also at opset 13 as
PyTorch folds it by default), the batch dynamic (and H/W where the model allows), compiled by
dynvm (the Python module) and run on 2-3 inputs of different batch and size, each compared with
ONNX Runtime 1.30 (onnxruntime-node, graph optimizations off: its kernels are the oracle).
Detectors are checked to find detections (not none) on a photo-like input and to find exactly
ONNX Runtime's (count, labels; boxes and scores within tolerance). Each model runs in a child
process (a crash is a verdict, not the end). Then dynvm and ORT (all optimizations) are timed
at 1 thread, interleaved, on the first input.

    /usr/bin/python3 tools/models/torchvision_zoo.py [--models a,b] [--families f,g]
        [--build build/release] [--no-bench] [--out results.txt] [--list]

Prints one row per model and opset: model, export ok, dynvm compile ok, max |error| and max
|error| / max |ORT| over every output and input, ms per run dynvm and ORT at 1 thread and
their ratio (ORT / dynvm: above 1 is dynvm faster). Exit 1 when a model fails, 77 when ORT or
torchvision is missing.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SKIP = 77

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def spec(name, family, sizes, *, kind="image", dyn_hw=True, opsets=(17,), tol=(1e-4, 1e-3),
         kwargs=None, note="", bench=True):
    """One model: torchvision constructor `name` of `family`; `sizes` the inputs compared
    (classification and segmentation [N, H, W]; video [N, T, H, W]; detection [H, W] of one
    image; flow [N, H, W] of an image pair); tol (atol relative to max |ORT|, rtol)."""
    return dict(name=name, family=family, sizes=sizes, kind=kind, dyn_hw=dyn_hw, opsets=opsets,
                tol=tol, kwargs=kwargs or {}, note=note, bench=bench)


S = [(1, 64, 64), (2, 96, 80), (3, 64, 64)]       # small images: conv nets
S224 = [(1, 224, 224), (2, 224, 224)]
MODELS = [
    # Classification.
    spec("resnet18", "classification", S, opsets=(17, 13)),
    spec("resnet50", "classification", S),
    spec("resnext50_32x4d", "classification", S),
    spec("wide_resnet50_2", "classification", S),
    spec("mobilenet_v2", "classification", S, opsets=(17, 13)),
    spec("mobilenet_v3_large", "classification", S, opsets=(17, 11)),
    spec("mobilenet_v3_small", "classification", S),
    spec("efficientnet_b0", "classification", S, opsets=(17, 13)),
    spec("efficientnet_v2_s", "classification", S),
    spec("shufflenet_v2_x1_0", "classification", S, opsets=(17, 11)),
    spec("squeezenet1_0", "classification", S),
    spec("squeezenet1_1", "classification", S),
    spec("mnasnet1_0", "classification", S),
    spec("regnet_x_400mf", "classification", S),
    spec("regnet_y_400mf", "classification", S, opsets=(17, 13)),
    spec("densenet121", "classification", S),
    spec("googlenet", "classification", S),
    spec("inception_v3", "classification", [(1, 96, 96), (2, 128, 112), (3, 96, 96)]),
    spec("convnext_tiny", "classification", S, opsets=(17, 13)),
    spec("alexnet", "classification", [(1, 224, 224), (2, 224, 224)], dyn_hw=False),
    spec("vgg11_bn", "classification", [(1, 224, 224), (2, 224, 224)], dyn_hw=False),
    spec("vit_b_16", "classification", [(1, 64, 64), (2, 64, 64), (3, 64, 64)], dyn_hw=False,
         kwargs={"image_size": 64}, opsets=(17, 13)),
    spec("swin_t", "classification", [(1, 64, 64), (2, 64, 64)], dyn_hw=False),
    spec("swin_v2_t", "classification", [(1, 64, 64), (2, 64, 64)], dyn_hw=False),
    spec("maxvit_t", "classification", [(1, 224, 224), (2, 224, 224)], dyn_hw=False),
    # Segmentation.
    spec("lraspp_mobilenet_v3_large", "segmentation", [(1, 96, 96), (2, 128, 96)],
         kwargs={"num_classes": 5}),
    spec("deeplabv3_mobilenet_v3_large", "segmentation", [(1, 96, 96), (2, 128, 96)],
         kwargs={"num_classes": 5, "aux_loss": False}),
    spec("fcn_resnet50", "segmentation", [(1, 96, 96), (2, 128, 96)],
         kwargs={"num_classes": 5, "aux_loss": False}),
    # Detection: one image [3, H, W], H and W dynamic.
    spec("ssdlite320_mobilenet_v3_large", "detection", [(320, 320), (240, 320)],
         kwargs={"num_classes": 5}),
    spec("ssd300_vgg16", "detection", [(300, 300), (240, 320)], kwargs={"num_classes": 5}),
    spec("fasterrcnn_mobilenet_v3_large_320_fpn", "detection", [(320, 320), (240, 320)],
         kwargs={"num_classes": 5}),
    spec("retinanet_resnet50_fpn", "detection", [(256, 256), (192, 256)],
         kwargs={"num_classes": 5, "min_size": 256, "max_size": 256}),
    spec("fcos_resnet50_fpn", "detection", [(256, 256), (192, 256)],
         kwargs={"num_classes": 5, "min_size": 256, "max_size": 256}),
    spec("keypointrcnn_resnet50_fpn", "detection", [(256, 256), (192, 256)],
         kwargs={"num_classes": 5, "min_size": 256, "max_size": 256}),
    spec("maskrcnn_resnet50_fpn", "detection", [(256, 256), (192, 256)],
         kwargs={"num_classes": 5, "min_size": 256, "max_size": 256}),
    # Video: [N, 3, T, H, W].
    spec("r3d_18", "video", [(1, 4, 56, 56), (2, 8, 64, 48)], kind="video"),
    spec("mc3_18", "video", [(1, 4, 56, 56), (2, 8, 64, 48)], kind="video"),
    spec("r2plus1d_18", "video", [(1, 4, 56, 56), (2, 8, 64, 48)], kind="video"),
    spec("s3d", "video", [(1, 16, 224, 224)], kind="video", dyn_hw=False),
    spec("mvit_v2_s", "video", [(1, 16, 224, 224)], kind="video", dyn_hw=False),
    # Optical flow: two images [N, 3, H, W].
    spec("raft_small", "optical_flow", [(1, 128, 128), (2, 128, 160)], kind="flow",
         kwargs={}),
]


# ---------------------------------------------------------------------------------------------
# Models and inputs.

def reinit_norms(model, torch):
    """Every BatchNorm (and torchvision's FrozenBatchNorm2d) gets non-trivial statistics and
    affine parameters, drawn from the seeded generator: a fold that drops one of them shows."""
    from torchvision.ops.misc import FrozenBatchNorm2d
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, (torch.nn.modules.batchnorm._BatchNorm, FrozenBatchNorm2d)):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
                if mod.weight is not None:
                    mod.weight.uniform_(0.5, 1.5)
                    mod.bias.uniform_(-0.2, 0.2)


def spread_scores(m, model, torch):
    """A detector at random init scores every class near 1/classes (softmax heads) or near its
    prior (sigmoid heads): ties everywhere, and nothing above the score thresholds; scaled up
    blindly, softmax saturates to 1.0 (ties again). The score layers' biases are zeroed and their
    weights scaled so that their logits on a photo-like input have a standard deviation of 2
    (measured with a forward hook): scores spread, as a trained detector's do, and the order of
    the detections is not decided by a rounding."""
    import torchvision.models.detection as det
    from torchvision.models.detection.ssd import SSD
    heads = []
    if isinstance(model, det.FasterRCNN):  # and KeypointRCNN, MaskRCNN
        heads.append(model.rpn.head.cls_logits)
        heads.append(model.roi_heads.box_predictor.cls_score)
    if isinstance(model, (det.RetinaNet, det.FCOS)):
        heads.append(model.head.classification_head.cls_logits)
    if isinstance(model, det.FCOS):
        heads.append(model.head.regression_head.bbox_ctrness)
    if isinstance(model, SSD):
        heads.extend(mod for mod in model.head.classification_head.modules()
                     if isinstance(mod, torch.nn.Conv2d))
    with torch.no_grad():
        if isinstance(model, det.FasterRCNN):
            # Box deltas of a random regression layer are large: exp(dh) clamped, boxes a
            # fraction of a pixel high, whose RoiAlign features turn on the last bits. Small
            # deltas: boxes near their anchors and proposals, as a trained detector's are.
            for layer in (model.rpn.head.bbox_pred, model.roi_heads.box_predictor.bbox_pred):
                layer.weight.mul_(0.05)
                layer.bias.zero_()
    spread = {}

    def hook(mod, inputs, output):
        spread.setdefault(mod, []).append(output.detach().flatten())
    with torch.no_grad():
        for h in heads:
            if h.bias is not None:
                h.bias.zero_()
        handles = [h.register_forward_hook(hook) for h in heads]
        model.eval()
        model([torch.from_numpy(make_inputs(m, m["sizes"][0], 7)["images"])])
        for handle in handles:
            handle.remove()
        for h in heads:
            std = float(torch.cat(spread[h]).std()) if h in spread else 0.0
            if std > 0:
                h.weight.mul_(2.0 / std)


def reinit_zero_weights(model, torch):
    """Layers torchvision initializes to zero (ViT's classifier head): drawn instead, so that an
    output is not zero whatever the network before it computes (a check that cannot fail)."""
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, (torch.nn.Linear, torch.nn.modules.conv._ConvNd)):
                if not mod.weight.any():
                    mod.weight.normal_(0.0, 0.05)
                    if mod.bias is not None:
                        mod.bias.uniform_(-0.1, 0.1)


def patch_raft_for_export(torch):
    """torchvision 0.14's RAFT divides the correlation volume by torch.sqrt(torch.tensor(C)),
    an int64 tensor that eager PyTorch promotes to float but PyTorch 1.13's exporter writes as
    Sqrt of int64, a model no runtime loads (ONNX Runtime refuses it too): the same division
    in float."""
    from torchvision.models.optical_flow import raft

    def corr_volume(self, fmap1, fmap2):
        batch_size, num_channels, h, w = fmap1.shape
        fmap1 = fmap1.view(batch_size, num_channels, h * w)
        fmap2 = fmap2.view(batch_size, num_channels, h * w)
        corr = torch.matmul(fmap1.transpose(1, 2), fmap2)
        corr = corr.view(batch_size, h, w, 1, h, w)
        return corr / float(num_channels) ** 0.5
    raft.CorrBlock._compute_corr_volume = corr_volume


def build(m, torch, torchvision):
    torch.manual_seed(0)
    fam = m["family"]
    mod = {"classification": torchvision.models,
           "segmentation": torchvision.models.segmentation,
           "detection": torchvision.models.detection,
           "video": torchvision.models.video,
           "optical_flow": torchvision.models.optical_flow}[fam]
    kwargs = dict(m["kwargs"])
    if fam in ("segmentation", "detection"):
        kwargs.setdefault("weights_backbone", None)
    if fam == "optical_flow":
        patch_raft_for_export(torch)
    model = getattr(mod, m["name"])(weights=None, **kwargs)
    reinit_norms(model, torch)
    reinit_zero_weights(model, torch)
    if fam == "detection":
        spread_scores(m, model, torch)
        if hasattr(model, "roi_heads"):
            model.roi_heads.score_thresh = 0.05
    model.eval()
    if fam == "segmentation":
        class Seg(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                return self.inner(x)["out"]
        return Seg(model).eval()
    if fam == "optical_flow":
        class Flow(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, a, b):
                return self.inner(a, b, num_flow_updates=4)[-1]
        return Flow(model).eval()
    return model


def smooth_image(rng, c, h, w):
    """A photo-like image in [0, 1]: a few soft blobs of colour over a gradient, some edges
    (rectangles) and sensor noise."""
    import numpy as np
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    img = np.empty((c, h, w))
    for ch in range(c):
        img[ch] = 0.3 + 0.3 * (xx * rng.random() + yy * rng.random())
    for _ in range(6):
        cy, cx, r = rng.random(), rng.random(), 0.05 + 0.2 * rng.random()
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
        img += blob[None] * (rng.random((c, 1, 1)) - 0.4)
    for _ in range(4):
        y0, x0 = int(rng.integers(0, h - 8)), int(rng.integers(0, w - 8))
        y1, x1 = y0 + int(rng.integers(4, h // 2)), x0 + int(rng.integers(4, w // 2))
        img[:, y0:y1, x0:x1] = rng.random((c, 1, 1))
    for ch in range(c):  # texture: a detector's features vary from box to box
        fy, fx = 4 + 20 * rng.random(2)
        img[ch] += 0.08 * np.sin(2 * np.pi * (fy * yy * yy + fx * xx) + 6 * rng.random())
    img += 0.02 * rng.standard_normal(img.shape)
    return np.clip(img, 0, 1)


def make_inputs(m, size, seed):
    """{input name: array} for one input size."""
    import numpy as np
    rng = np.random.default_rng(seed)
    mean = np.array(IMAGENET_MEAN).reshape(3, 1, 1)
    std = np.array(IMAGENET_STD).reshape(3, 1, 1)
    kind = m["kind"] if m["family"] != "detection" else "detection"
    if kind == "detection":
        h, w = size
        return {"images": smooth_image(rng, 3, h, w).astype(np.float32)}
    if kind == "video":
        n, t, h, w = size
        base = np.stack([smooth_image(rng, 3, h, w) for _ in range(n)])  # [N, 3, H, W]
        frames = [np.roll(base, shift=2 * i, axis=3) for i in range(t)]  # a panning camera
        x = (np.stack(frames, axis=2) - mean[:, None]) / std[:, None]
        return {"x": x.astype(np.float32)}
    n, h, w = size
    a = np.stack([(smooth_image(rng, 3, h, w) - mean) / std for _ in range(n)])
    if kind == "flow":
        b = np.roll(a, shift=(3, 5), axis=(2, 3)) + 0.01 * rng.standard_normal(a.shape)
        return {"a": a.astype(np.float32), "b": b.astype(np.float32)}
    return {"x": a.astype(np.float32)}


def export(m, model, path, opset, torch):
    """torch.onnx.export at `opset`: dynamic batch (and H/W where the model allows). Opset 17
    keeps BatchNormalization in the graph (TrainingMode.PRESERVE on an eval model) so that
    dynvm folds it; the other opset is PyTorch's default export (BN folded into Conv)."""
    fam = m["family"]
    feeds = make_inputs(m, m["sizes"][0], 0)
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    names = list(feeds)
    training = (torch.onnx.TrainingMode.PRESERVE if opset >= 17
                else torch.onnx.TrainingMode.EVAL)
    if fam == "detection":
        # The order of the detector's output dict.
        outs = (["boxes", "scores", "labels"] if m["name"].split("_")[0] in
                ("ssdlite320", "ssd300", "retinanet", "fcos") else ["boxes", "labels", "scores"])
        if "keypoint" in m["name"]:
            outs += ["keypoints", "keypoints_scores"]
        if "mask" in m["name"]:
            outs += ["masks"]
        dyn = {"images": {1: "h", 2: "w"}}
        dyn.update({o: {0: "detections"} for o in outs})
        torch.onnx.export(model, ([args[0]],), path, opset_version=opset, input_names=names,
                          output_names=outs, dynamic_axes=dyn, training=training)
        return
    dyn = {}
    for name in names:
        axes = {0: "n"}
        if m["kind"] == "video":
            axes[2] = "t"
            if m["dyn_hw"]:
                axes.update({3: "h", 4: "w"})
        elif m["dyn_hw"]:
            axes.update({2: "h", 3: "w"})
        dyn[name] = axes
    dyn["y"] = {0: "n"}
    if fam in ("segmentation", "optical_flow") and m["dyn_hw"]:
        dyn["y"].update({2: "h", 3: "w"})
    torch.onnx.export(model, args, path, opset_version=opset, input_names=names,
                      output_names=["y"], dynamic_axes=dyn, training=training)


# ---------------------------------------------------------------------------------------------
# One model in a child process: export, compile, compare, time. Prints one JSON line.

def compare(got, want, tol):
    """(max |error|, max |error| / max |ORT|, problem or None) over ORT's outputs by name."""
    import numpy as np
    atol_rel, rtol = tol
    worst_abs, worst_rel = 0.0, 0.0
    for name, w in want.items():
        if name not in got:
            return worst_abs, worst_rel, f"output {name} missing"
        g = np.asarray(got[name])
        if g.shape != w.shape:
            return worst_abs, worst_rel, f"output {name}: shape {g.shape}, ORT {w.shape}"
        if g.size == 0:
            continue
        if w.dtype.kind != "f":
            if not np.array_equal(g, w):
                return worst_abs, worst_rel, f"output {name}: values differ"
            continue
        if not np.isfinite(g).all() or not np.isfinite(w).all():
            if not np.array_equal(np.isnan(g), np.isnan(w)):
                return worst_abs, worst_rel, f"output {name}: NaN where ORT has none or reverse"
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        scale = max(float(np.nanmax(np.abs(w64))), 1e-6)
        err = np.nan_to_num(np.abs(g64 - w64))
        worst_abs = max(worst_abs, float(err.max()))
        worst_rel = max(worst_rel, float(err.max()) / scale)
        bad = err > atol_rel * scale + rtol * np.abs(w64)
        if bad.any():
            i = np.unravel_index(int(np.argmax(err - rtol * np.abs(w64))), g.shape)
            return worst_abs, worst_rel, (f"output {name}{list(i)}: {g[i]:.6g}, ORT {w[i]:.6g} "
                                          f"(max |ORT| {scale:.3g})")
    return worst_abs, worst_rel, None


def match_detections(got, want, tol=(1e-4, 1e-3)):
    """dynvm's detections reordered to ORT's order: two detectors rank boxes by score, and
    boxes whose scores differ by a rounding may come out in either order. Row i of ORT's is
    matched to an unused row of dynvm's of the same label, a score within the comparison's
    tolerance (`tol`: atol relative to the largest score, rtol) and the nearest box; the values
    are compared after (compare()). (reordered outputs, problem or None). Counts must agree."""
    import numpy as np
    n, m = want["scores"].shape[0], got["scores"].shape[0]
    if n != m:
        return got, f"{m} detections, ORT {n}"
    top = float(np.abs(want["scores"]).max()) if n else 0.0
    used = np.zeros(n, bool)
    perm = []
    for i in range(n):
        s = float(want["scores"][i])
        ok = (~used & (got["labels"] == want["labels"][i]) &
              (np.abs(got["scores"] - s) <= tol[0] * top + tol[1] * abs(s)))
        if not ok.any():
            return got, f"ORT's detection {i} (label {want['labels'][i]}, score {s:.7g}) has no match"
        err = np.abs(got["boxes"] - want["boxes"][i]).max(axis=1)
        err[~ok] = np.inf
        j = int(np.argmin(err))
        used[j] = True
        perm.append(j)
    return {k: (v[perm] if v.ndim and v.shape[0] == n else v) for k, v in got.items()}, None


def ort_self_check(m, workers, proc, sid_opt, feeds, want):
    """Where dynvm's detections differ from ORT's: whether ORT with its graph optimizations
    (fused kernels, another summation order) differs from ORT without them too. A detector
    whose ranking or NMS turns on scores equal to a rounding gives a different answer for any
    change of summation order; that is told apart from a dynvm defect this way."""
    reply, payload = ort_ask(workers, proc, {"op": "run", "id": sid_opt}, feeds.items())
    other = dict(workers.unpack_arrays(reply["outputs"], payload))
    other, problem = match_detections(other, want, m["tol"])
    if problem is None:
        _, _, problem = compare(other, want, m["tol"])
    if problem is None:
        return " [ORT optimized agrees with ORT: dynvm alone differs]"
    return f" [ORT optimized differs from ORT too: {problem}]"


def ort_process(nm):
    sys.path.insert(0, os.path.join(ROOT, "tests", "differential"))
    import workers
    return workers, workers._Process(["node", os.path.join(ROOT, "tools", "zoo", "ort_zoo.js"),
                                      nm])


def ort_ask(workers, proc, header, arrays=(), timeout=900.0):
    specs, chunks, end = workers.pack_arrays(list(arrays))
    reply, payload = proc.request(dict(header, inputs=specs, payload=end), chunks, timeout)
    if not reply["ok"]:
        raise RuntimeError(f"ONNX Runtime: {reply['error']}")
    return reply, payload


def time_dynvm(vm, feeds, repeat):
    ms = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        vm.run(dict(feeds))
        ms.append((time.perf_counter() - t0) * 1e3)
    return ms


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def bench(vm, workers, proc, sid, feeds, rounds, target_ms):
    """(dynvm ms, ORT ms): medians, the best round of `rounds` interleaved ones."""
    probe = min(time_dynvm(vm, feeds, 2))
    repeat = max(3, min(50, int(target_ms / max(probe, 1e-3))))
    best_d, best_o = float("inf"), float("inf")
    for _ in range(rounds):
        ms = ort_ask(workers, proc, {"op": "bench", "id": sid, "repeat": repeat, "warmup": 1},
                     feeds.items())[0]["ms"]
        best_o = min(best_o, median(ms))
        best_d = min(best_d, median(time_dynvm(vm, feeds, repeat)))
    return best_d, best_o


def run_one(args):
    import torch
    import torchvision
    sys.path.insert(0, os.path.join(os.path.abspath(args.build), "python"))
    import dynvm
    torch.set_num_threads(1)
    m = next(x for x in MODELS if x["name"] == args.one)
    opset = args.opset
    row = {"model": m["name"], "family": m["family"], "opset": opset, "export": False,
           "compile": False, "abs": None, "rel": None, "problems": [], "detections": []}
    workers, proc = ort_process(args.ort)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{m['name']}-{opset}.onnx")
        t0 = time.monotonic()
        try:
            model = build(m, torch, torchvision)
            export(m, model, path, opset, torch)
            row["export"] = True
        except Exception as e:  # noqa: BLE001 - the exporter's failure is the verdict
            row["problems"].append(f"export: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            print(json.dumps(row))
            return 0
        row["export_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        try:
            exe = dynvm.compile(path)
            row["compile"] = True
        except dynvm.Error as e:
            row["problems"].append(f"compile: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        row["compile_s"] = time.monotonic() - t0
        try:
            sid = ort_ask(workers, proc, {"op": "open", "model": path,
                                          "threads": args.threads,
                                          "optimize": False})[0]["id"]
            sid_opt = ort_ask(workers, proc, {"op": "open", "model": path,
                                              "threads": args.threads,
                                              "optimize": True})[0]["id"]
        except (RuntimeError, workers.WorkerFailure) as e:
            row["problems"].append(f"ORT refused: {str(e)[:200]}")
            print(json.dumps(row))
            return 0
        if not row["compile"]:
            print(json.dumps(row))
            return 0
        vm = dynvm.VirtualMachine(exe, threads=args.threads)
        worst_abs, worst_rel = 0.0, 0.0
        for i, size in enumerate(m["sizes"]):
            feeds = make_inputs(m, size, 1000 + i)
            try:
                reply, payload = ort_ask(workers, proc, {"op": "run", "id": sid},
                                         feeds.items())
            except (RuntimeError, workers.WorkerFailure) as e:
                row["problems"].append(f"run {size}: ORT failed: {str(e).splitlines()[0][:200]}")
                continue
            want = dict(workers.unpack_arrays(reply["outputs"], payload))
            try:
                got = vm.run(dict(feeds))
            except dynvm.Error as e:
                row["problems"].append(f"run {size}: {type(e).__name__}: "
                                       f"{str(e).splitlines()[0][:300]}")
                continue
            if m["family"] == "detection":
                row["detections"].append([int(got["boxes"].shape[0]),
                                          int(want["boxes"].shape[0])])
                if want["boxes"].shape[0] == 0:
                    row["problems"].append(f"run {size}: ORT finds no detection")
                got, problem = match_detections(got, want, m["tol"])
                if problem is None:
                    a, r, problem = compare(got, want, m["tol"])
                    worst_abs, worst_rel = max(worst_abs, a), max(worst_rel, r)
                if problem:
                    verdict = ort_self_check(m, workers, proc, sid_opt, feeds, want)
                    row["problems"].append(f"run {size}: {problem}{verdict}")
                continue
            a, r, problem = compare(got, want, m["tol"])
            worst_abs, worst_rel = max(worst_abs, a), max(worst_rel, r)
            if problem:
                row["problems"].append(f"run {size}: {problem}")
        row["abs"], row["rel"] = worst_abs, worst_rel
        if args.bench and m["bench"]:
            feeds = make_inputs(m, m["sizes"][0], 1000)
            try:
                row["dynvm_ms"], row["ort_ms"] = bench(vm, workers, proc, sid_opt, feeds,
                                                       args.rounds, args.target_ms)
            except (dynvm.Error, RuntimeError) as e:
                row["problems"].append(f"bench: {str(e)[:200]}")
    proc.stop()
    print(json.dumps(row))
    return 0


# ---------------------------------------------------------------------------------------------
# The driver: one child per model and opset, then the table.

UNSTABLE = "[ORT optimized differs from ORT too"


def failed(r):
    """A row fails on any problem but a detector's answer that ORT's two modes disagree on
    too (reported as unstable: tie-sensitive at f32 rounding, nobody's answer is wrong)."""
    return any(UNSTABLE not in p for p in r["problems"])


def fmt_row(r):
    def f(x, spec):
        return "-" if x is None else format(x, spec)
    ratio = (r["ort_ms"] / r["dynvm_ms"]) if r.get("dynvm_ms") else None
    det = ""
    if r.get("detections"):
        det = " det " + ",".join(f"{a}/{b}" for a, b in r["detections"])
    status = "FAIL" if failed(r) else ("unstable" if r["problems"] else "ok")
    return (f"{r['model'] + ' @' + str(r['opset']):<42} {'yes' if r['export'] else 'NO':>6} "
            f"{'yes' if r['compile'] else 'NO':>7} {f(r['abs'], '.2e'):>9} {f(r['rel'], '.2e'):>9} "
            f"{f(r.get('dynvm_ms'), '.1f'):>9} {f(r.get('ort_ms'), '.1f'):>9} "
            f"{(f(ratio, '.2f') + 'x') if ratio else '-':>7} {status}{det}")


HEADER = (f"{'model @opset':<42} {'export':>6} {'compile':>7} {'max_abs':>9} {'max_rel':>9} "
          f"{'dynvm_ms':>9} {'ort_ms':>9} {'ORT/dvm':>7} status")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="")
    ap.add_argument("--families", default="")
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--ort-dir", default="")
    ap.add_argument("--no-bench", dest="bench", action="store_false")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--target-ms", type=float, default=1500.0)
    ap.add_argument("--threads", type=int, default=1,
                    help="threads of dynvm's VM and ORT's session alike (default 1)")
    ap.add_argument("--opsets", default="", help="only these opsets (default: each model's)")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--out", default="")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--opset", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ort", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.list:
        for m in MODELS:
            print(f"{m['name']:<40} {m['family']:<15} opsets {m['opsets']} sizes {m['sizes']}")
        return 0
    if args.one:
        return run_one(args)
    sys.path.insert(0, os.path.join(os.path.abspath(args.build), "python"))
    import importlib.util
    missing = [p for p in ("numpy", "torch", "torchvision", "dynvm")
               if importlib.util.find_spec(p) is None]
    if missing:
        print(f"SKIPPED: no module {', '.join(missing)} (python3-torch, python3-torchvision; "
              f"the dynvm module under --build)")
        return SKIP
    sys.path.insert(0, os.path.join(ROOT, "tests", "differential"))
    import workers
    nm = workers.find_ort(args.ort_dir or None)
    if nm is None:
        print("SKIPPED: ONNX Runtime (onnxruntime-node) not found: set DYNVM_ORT_DIR")
        return SKIP
    models = MODELS
    if args.models:
        names = args.models.split(",")
        unknown = set(names) - {m["name"] for m in MODELS}
        if unknown:
            print(f"unknown models: {sorted(unknown)}")
            return 2
        models = [m for m in MODELS if m["name"] in names]
    if args.families:
        models = [m for m in models if m["family"] in args.families.split(",")]
    only = {int(o) for o in args.opsets.split(",")} if args.opsets else None
    rows = []
    out = open(args.out, "w") if args.out else None

    def emit(line):
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()
    emit(HEADER)
    for m in models:
        for opset in m["opsets"]:
            if only and opset not in only:
                continue
            cmd = [sys.executable, os.path.abspath(__file__), "--one", m["name"], "--opset",
                   str(opset), "--ort", nm, "--build", args.build, "--rounds", str(args.rounds),
                   "--target-ms", str(args.target_ms), "--threads", str(args.threads)] + (
                       [] if args.bench else ["--no-bench"])
            t0 = time.monotonic()
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
                if p.returncode != 0 or not lines:
                    tail = (p.stderr.strip().splitlines() or ["?"])[-1][:300]
                    row = {"model": m["name"], "opset": opset, "export": None, "compile": None,
                           "abs": None, "rel": None,
                           "problems": [f"child exited {p.returncode}: {tail}"]}
                else:
                    row = json.loads(lines[-1])
            except subprocess.TimeoutExpired:
                row = {"model": m["name"], "opset": opset, "export": None, "compile": None,
                       "abs": None, "rel": None, "problems": [f"timeout {args.timeout} s"]}
            row["wall_s"] = time.monotonic() - t0
            rows.append(row)
            emit(fmt_row(row) + f"  ({row['wall_s']:.0f} s)")
            for prob in row["problems"]:
                emit(f"    {prob}")
    n_fail = sum(1 for r in rows if failed(r))
    n_unstable = sum(1 for r in rows if r["problems"] and not failed(r))
    emit(f"torchvision_zoo: {len(rows)} exports, {len(rows) - n_fail - n_unstable} ok, "
         f"{n_unstable} unstable (ORT's own two modes disagree), {n_fail} failed")
    if out:
        out.close()
    return 1 if n_fail else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        sys.exit(2)
