"""A family of exported detectors with torchvision's batched_nms and a top-k cut in a scripted
loop over the images (ctest: detector_export_test).

The detector: a Conv head over an image batch, then per image (a scripted Python loop, exported
as a Loop with sequences): boxes and class scores from the feature map, a score threshold
(boolean-mask indexing: NonZero + GatherND), torchvision.ops.batched_nms (an If between the
per-class Loop over Unique labels and the coordinate-offset trick, around NonMaxSuppression with
max_output_boxes_per_class = INT64_MAX and torch's unbind as SplitToSequence with a scalar split
and keepdims 0), a top-k cut, and the detections concatenated over the images.

It varies the number of images, the candidates (feature-map size and score threshold: none
kept, some, all), the classes, the IoU threshold, the top-k cap, and the NMS path (more than
4000 box coordinates take batched_nms's per-class loop). Each export runs in dynvm optimized
and with --no-optimize, and in ONNX Runtime when onnxruntime-node is installed (--ort-dir, or
the cache ctest's ort_fetch fills),
on several inputs; every output must equal PyTorch's: the counts, labels and image indices
exactly, boxes and scores within 1e-5 (relative and absolute: the
coordinates reach 50). Two bugs made dynvm return no detections, silently,
where PyTorch and ONNX Runtime found 3 to 48 (docs/differential.md). Exits 77 (a ctest skip)
without PyTorch and torchvision.

    /usr/bin/python3 detector_export_test.py --vm-compile PATH --vm-run PATH [--ort-dir DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torchvision  # noqa: F401
    from torchvision.ops import batched_nms
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e} (install python3-torch and python3-torchvision: tools/install-deps.sh test)")
    sys.exit(77)


class Detector(torch.nn.Module):
    def __init__(self, classes, topk, iou, score_thresh):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4 + classes, 3, padding=1)
        self.topk, self.iou, self.score_thresh = topk, iou, score_thresh

    def forward(self, images):
        feats = self.conv(images)
        out_boxes, out_scores, out_labels, out_images = [], [], [], []
        for i in range(feats.shape[0]):
            f = feats[i].flatten(1).transpose(0, 1)
            xy = f[:, :2] * 10.0
            wh = f[:, 2:4].abs() * 5.0 + 1.0
            boxes = torch.cat([xy, xy + wh], dim=1)
            scores, labels = torch.sigmoid(f[:, 4:]).max(dim=1)
            keep = scores > self.score_thresh
            boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
            k = batched_nms(boxes, scores, labels, self.iou)[: self.topk]
            out_boxes.append(boxes[k])
            out_scores.append(scores[k])
            out_labels.append(labels[k])
            out_images.append(torch.full_like(labels[k], i))
        return (torch.cat(out_boxes), torch.cat(out_scores), torch.cat(out_labels),
                torch.cat(out_images))


class SingleImageDetector(Detector):
    """The same head for one image, without the loop over images."""

    def forward(self, images):
        f = self.conv(images)[0].flatten(1).transpose(0, 1)
        xy = f[:, :2] * 10.0
        wh = f[:, 2:4].abs() * 5.0 + 1.0
        boxes = torch.cat([xy, xy + wh], dim=1)
        scores, labels = torch.sigmoid(f[:, 4:]).max(dim=1)
        keep = scores > self.score_thresh
        boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
        k = batched_nms(boxes, scores, labels, self.iou)[: self.topk]
        return boxes[k], scores[k], labels[k], torch.zeros_like(labels[k])


# (name, images, height, width, classes, topk, iou, score threshold); images 0: one image,
# no loop (SingleImageDetector)
CASES = [
    ("no_loop", 0, 8, 8, 3, 48, 0.5, 0.2),
    ("two_images", 2, 8, 8, 3, 10, 0.5, 0.3),
    ("one_image_one_class", 1, 6, 6, 1, 5, 0.5, 0.3),
    ("three_images_many_classes", 3, 8, 6, 5, 100, 0.3, 0.2),
    ("tight_iou_top1", 2, 8, 8, 3, 1, 0.7, 0.3),
    ("none_kept", 2, 8, 8, 3, 10, 0.5, 1.0),
    ("all_kept", 2, 4, 4, 2, 100, 0.5, 0.0),
    ("per_class_loop", 1, 40, 40, 4, 50, 0.5, 0.0),  # 1600 boxes: > 4000 coordinates
]
OUTPUTS = ["boxes", "scores", "labels", "image"]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


ORT_SCRIPT = r"""
const ort = require(process.argv[2]);
const fs = require('fs');
(async () => {
  const [model, x, dims, outDir] = process.argv.slice(3);
  const buf = fs.readFileSync(x);
  const data = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
  const sess = await ort.InferenceSession.create(model, {intraOpNumThreads: 1});
  const out = await sess.run({images: new ort.Tensor('float32', data, JSON.parse(dims))});
  for (const [k, v] of Object.entries(out)) {
    fs.writeFileSync(`${outDir}/${k}.json`, JSON.stringify(
        {dims: v.dims, data: Array.from(v.data, e => Number(e))}));
  }
})().catch(e => { console.error(e.message); process.exit(1); });
"""


def ort_outputs(ort_module, model, x, tmp):
    xfile = os.path.join(tmp, "x.bin")
    x.astype(np.float32).tofile(xfile)
    script = os.path.join(tmp, "ort.js")
    with open(script, "w") as f:
        f.write(ORT_SCRIPT)
    run(["node", script, ort_module, model, xfile, str(list(x.shape)), tmp])
    outs = {}
    import json
    for name in OUTPUTS:
        with open(os.path.join(tmp, f"{name}.json")) as f:
            d = json.load(f)
        outs[name] = np.array(d["data"]).reshape(d["dims"])
    return outs


def compare(name, got, want, where):
    failures = []
    for out in OUTPUTS:
        g, w = got[out], want[out]
        if g.shape != w.shape:
            failures.append(f"{where} {out}: shape {g.shape}, PyTorch {w.shape}")
        elif out in ("labels", "image"):
            if not np.array_equal(g.astype(np.int64), w.astype(np.int64)):
                failures.append(f"{where} {out}: {g.tolist()} != PyTorch {w.tolist()}")
        elif not np.allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-5, atol=1e-5):
            failures.append(f"{where} {out}: differs by {np.abs(g - w).max()}")
    return failures


def check_export(args, name, model, onnx_path, n, h, w, ort_module, tmp, detections):
    """Runs one export on three inputs in dynvm (optimized, --no-optimize) and ONNX Runtime."""
    failures = []
    dvms = {}
    for variant, flags in (("optimized", []), ("no-optimize", ["--no-optimize"])):
        dvms[variant] = os.path.join(tmp, f"{name}-{variant}.dvm")
        run([args.vm_compile, onnx_path, "-o", dvms[variant]] + flags)
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, 3, h, w, generator=g) * 2
        with torch.no_grad():
            want = {k: v.numpy() for k, v in zip(OUTPUTS, model(x))}
        detections.append(want["boxes"].shape[0])
        xfile = os.path.join(tmp, "x.npy")
        np.save(xfile, x.numpy())
        for variant, dvm in dvms.items():
            out_dir = os.path.join(tmp, f"out-{name}-{variant}-{seed}")
            run([args.vm_run, dvm, "-i", f"images={xfile}", "--output-dir", out_dir])
            got = {k: np.load(os.path.join(out_dir, f"{k}.npy")) for k in OUTPUTS}
            failures += compare(name, got, want, f"{name} seed {seed} dynvm {variant}")
        if ort_module:
            got = ort_outputs(ort_module, onnx_path, x.numpy(), tmp)
            failures += compare(name, got, want, f"{name} seed {seed} ONNX Runtime")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vm-compile", required=True)
    ap.add_argument("--vm-run", required=True)
    ap.add_argument("--ort-dir", default=os.environ.get("DYNVM_ORT_DIR", ""),
                    help="a folder whose node_modules holds onnxruntime-node (optional)")
    args = ap.parse_args()
    ort_module = ""
    # --ort-dir (or DYNVM_ORT_DIR), else the cache ctest's ort_fetch fills (tests/differential).
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "dynvm", "ort")
    for folder in ([args.ort_dir] if args.ort_dir else []) + [cache]:
        candidate = os.path.join(os.path.abspath(folder), "node_modules", "onnxruntime-node")
        if os.path.isdir(candidate):
            ort_module = candidate
            break
    failures = []
    detections = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, n, h, w, classes, topk, iou, thresh in CASES:
            torch.manual_seed(sum(map(ord, name)))
            model = (Detector if n > 0 else SingleImageDetector)(classes, topk, iou, thresh).eval()
            n = max(n, 1)
            onnx_path = os.path.join(tmp, f"{name}.onnx")
            torch.onnx.export(torch.jit.script(model), (torch.randn(n, 3, h, w),), onnx_path,
                              opset_version=14, input_names=["images"], output_names=OUTPUTS,
                              dynamic_axes={"images": {0: "n", 2: "h", 3: "w"}})
            try:
                failures += check_export(args, name, model, onnx_path, n, h, w, ort_module, tmp,
                                         detections)
            except RuntimeError as e:
                failures.append(f"{name}: {e}")
            print(f"{name}: {n} images {h}x{w}, {classes} classes, top {topk}, iou {iou}, "
                  f"threshold {thresh}: detections {detections[-3:]}")
    print(f"{len(CASES)} exports x 3 inputs; detections per input from {min(detections)} to "
          f"{max(detections)}; ONNX Runtime {'compared' if ort_module else 'not installed'}")
    if min(detections) != 0 or max(detections) < 40:
        failures.append("the family must include inputs with no detection and with 40 or more")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
