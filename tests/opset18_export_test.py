"""A PyTorch export at opset 18 compiles and matches PyTorch (ctest: opset18_export_test).

A small module (Conv + BatchNorm + ReLU, a mean over the spatial dims, an MLP with GELU,
LayerNorm, Softmax, a max over a dim, Split) is exported with torch.onnx.export at
opset_version=18, then compiled by vm-compile and run by vm-run at batch 1 and 3 (the batch
dim dynamic); every output must be within 1e-4 of PyTorch's. Debian's PyTorch 1.13 exports up
to opset 17: there the model is exported at 17 and brought to 18 the way PyTorch 2.x writes it
(onnx 1.12's version converter knows no opset 18): the Reduce* nodes whose axes are an
attribute (ReduceMean, ReduceMax, ...) take them as a constant input instead, the one change of
opset 18 such a model meets, and the opset import becomes 18. The test checks the model really
is opset 18 with axes inputs before compiling it. Exits 77 (a ctest skip) without PyTorch or
python3-onnx.

    /usr/bin/python3 opset18_export_test.py --vm-compile PATH --vm-run PATH
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    import torch
    from onnx import helper, numpy_helper
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e} (install python3-torch and python3-onnx: tools/install-deps.sh test)")
    sys.exit(77)

# The reductions whose axes became an input in opset 18 (ReduceSum's did in 13).
REDUCE_18 = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
             "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc1 = torch.nn.Linear(8, 32)
        self.fc2 = torch.nn.Linear(32, 12)
        self.ln = torch.nn.LayerNorm(12)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        pooled = h.mean(dim=(2, 3))                     # ReduceMean over axes
        peak = h.amax(dim=1)                            # ReduceMax
        z = self.ln(self.fc2(torch.nn.functional.gelu(self.fc1(pooled))))
        a, b = torch.split(z, [5, 7], dim=1)
        return torch.softmax(a, dim=-1), torch.log_softmax(b, dim=1), peak


def upgrade_to_18(model):
    """An opset-17 export in opset 18's form (see the module docstring)."""
    g = model.graph
    moved = 0
    for node in g.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in REDUCE_18:
            continue
        axes = [a for a in node.attribute if a.name == "axes"]
        if not axes:
            continue
        name = f"{node.name or node.op_type}_axes_{moved}"
        g.initializer.append(numpy_helper.from_array(np.array(axes[0].ints, np.int64), name))
        node.attribute.remove(axes[0])
        node.input.append(name)
        moved += 1
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = 18
    return moved


def export(net, path):
    x = torch.randn(2, 3, 6, 5)
    kwargs = dict(input_names=["x"], output_names=["p", "q", "peak"],
                  dynamic_axes={"x": {0: "batch"}, "p": {0: "batch"}, "q": {0: "batch"},
                                "peak": {0: "batch"}}, do_constant_folding=True)
    try:
        torch.onnx.export(net, (x,), path, opset_version=18, **kwargs)
        return "exported at opset 18"
    except (ValueError, RuntimeError, torch.onnx.errors.OnnxExporterError):
        pass  # PyTorch before 2.0: 17 at most
    torch.onnx.export(net, (x,), path, opset_version=17, **kwargs)
    model = onnx.load(path)
    moved = upgrade_to_18(model)
    onnx.save(model, path)
    return f"exported at opset 17 (PyTorch {torch.__version__}), {moved} Reduce axes moved to inputs"


def check_opset18(path):
    model = onnx.load(path)
    opset = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    assert opset == [18], opset
    reduces = [n for n in model.graph.node if n.op_type in REDUCE_18]
    assert reduces, "the export has no Reduce node of opset 18's form"
    for n in reduces:
        assert len(n.input) == 2 and not any(a.name == "axes" for a in n.attribute), n


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vm-compile", required=True)
    ap.add_argument("--vm-run", required=True)
    args = ap.parse_args()
    torch.manual_seed(18)
    net = Net()
    with torch.no_grad():  # a trained-looking BatchNorm: running statistics away from 0 and 1
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 2.0)
    net.eval()
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "net18.onnx")
        how = export(net, path)
        check_opset18(path)
        for optimize in (True, False):
            dvm = os.path.join(d, f"net18_{optimize}.dvm")
            run([args.vm_compile, path, "-o", dvm] + ([] if optimize else ["--no-optimize"]))
            for batch in (1, 3):
                x = torch.randn(batch, 3, 6, 5)
                np.save(os.path.join(d, "x.npy"), x.numpy())
                out = os.path.join(d, f"out_{optimize}_{batch}")
                run([args.vm_run, dvm, "--input", f"x={os.path.join(d, 'x.npy')}",
                     "--output-dir", out])
                with torch.no_grad():
                    want = [t.numpy() for t in net(x)]
                for name, w in zip(("p", "q", "peak"), want):
                    got = np.load(os.path.join(out, f"{name}.npy"))
                    err = float(np.max(np.abs(got - w))) if got.shape == w.shape else None
                    ok = err is not None and err <= 1e-4
                    failures += not ok
                    print(f"{'ok  ' if ok else 'FAIL'} optimize={optimize} batch={batch} {name} "
                          f"{list(got.shape)} max|diff| {err}")
    print(f"opset 18 export ({how}): {'all outputs match PyTorch' if not failures else f'{failures} outputs differ'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
