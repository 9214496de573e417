#!/usr/bin/python3
"""CNN inference: dynvm (vm-run) against ONNX Runtime (onnxruntime-node), side by side.

torchvision resnet18 and mobilenet_v2 with seeded random weights and BatchNorm statistics,
exported with BatchNormalization kept in the graph (TrainingMode.PRESERVE on an eval model),
at each batch and image size, one fixed-shape ONNX file per case. Each case runs dynvm and ORT
alternately (--rounds times, each --repeat timed runs after a warm-up; the best round's median
is kept) at each thread count, and prints dynvm/ORT as ORT time over dynvm time (>1: dynvm is
faster). dynvm's outputs are checked against PyTorch's first.

  /usr/bin/python3 tools/bench/conv_bench.py --build build/dev --node-modules DIR \
      [--models resnet18,mobilenet_v2] [--batches 1,8] [--sizes 64,224] [--threads 1,2]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from seeded import lcg  # noqa: E402


def make_model(name):
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.1, 0.1)
    return m.eval()


def export(model, path, dims):
    x = torch.zeros(dims)
    torch.onnx.export(model, x, path, input_names=['x'], output_names=['y'], opset_version=13,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)


def run_dynvm(args, dvm, npy, threads, repeat):
    """The median (or with --stat min, the fastest) of `repeat` timed runs, in ms."""
    out = subprocess.run([os.path.join(args.build, 'tools', 'vm-run'), dvm, '--input', 'x=' + npy,
                          '--repeat', str(repeat), '--threads', str(threads)],
                         check=True, capture_output=True, text=True).stdout
    field = 1 if getattr(args, 'stat', 'median') == 'min' else 0
    for line in out.splitlines():
        if line.startswith('median_ms='):
            return float(line.split()[field].split('=')[1])
    raise RuntimeError('vm-run printed no time: ' + out)


def run_ort(args, onnx_path, dims, threads, repeat):
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(['node', os.path.join(here, 'ort_cnn.js'), '--node-modules',
                          args.node_modules, '--model', onnx_path, '--input', 'x', '--dims',
                          ','.join(map(str, dims)), '--threads', str(threads), '--repeat',
                          str(repeat)], check=True, capture_output=True, text=True).stdout
    key = 'min_ms' if getattr(args, 'stat', 'median') == 'min' else 'median_ms'
    return json.loads(out.strip().splitlines()[-1])[key]


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--build', default='build/dev')
    p.add_argument('--node-modules', required=True)
    p.add_argument('--out', default='build/bench/cnn')
    p.add_argument('--models', default='resnet18,mobilenet_v2')
    p.add_argument('--batches', default='1,8')
    p.add_argument('--sizes', default='64,224')
    p.add_argument('--threads', default='1,2')
    p.add_argument('--rounds', type=int, default=3)
    # min: each round keeps its fastest run instead of its median (both sides), for a loaded
    # machine.
    p.add_argument('--stat', choices=['median', 'min'], default='median')
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print('case threads dynvm_ms ort_ms dynvm/ORT')
    for name in args.models.split(','):
        model = make_model(name)
        for size in map(int, args.sizes.split(',')):
            for batch in map(int, args.batches.split(',')):
                dims = [batch, 3, size, size]
                tag = f'{name}_b{batch}_{size}'
                onnx_path = os.path.join(args.out, tag + '.onnx')
                dvm = os.path.join(args.out, tag + '.dvm')
                npy = os.path.join(args.out, tag + '.npy')
                if not os.path.exists(onnx_path):
                    export(model, onnx_path, dims)
                subprocess.run([os.path.join(args.build, 'tools', 'vm-compile'), onnx_path, '-o',
                                dvm], check=True, capture_output=True)
                x = lcg(int(np.prod(dims))).reshape(dims)
                np.save(npy, x)
                # Correctness: dynvm against PyTorch.
                odir = os.path.join(args.out, tag + '_out')
                subprocess.run([os.path.join(args.build, 'tools', 'vm-run'), dvm, '--input',
                                'x=' + npy, '--output-dir', odir], check=True,
                               capture_output=True)
                with torch.no_grad():
                    want = model(torch.from_numpy(x)).numpy()
                got = np.load(os.path.join(odir, 'y.npy'))
                err = float(np.max(np.abs(got - want)) / max(1e-6, float(np.max(np.abs(want)))))
                print(f'# {tag}: max |dynvm - torch| / max |torch| = {err:.2e}', flush=True)
                if err > 1e-3:
                    print(f'conv_bench: {tag} differs from PyTorch', file=sys.stderr)
                    sys.exit(1)
                repeat = max(3, int(40 * (64 * 64) / (size * size) / batch) + 3)
                for threads in map(int, args.threads.split(',')):
                    best_d, best_o = float('inf'), float('inf')
                    for _ in range(args.rounds):
                        best_d = min(best_d, run_dynvm(args, dvm, npy, threads, repeat))
                        best_o = min(best_o, run_ort(args, onnx_path, dims, threads, repeat))
                    print(f'{tag} {threads} {best_d:.2f} {best_o:.2f} {best_o / best_d:.2f}x',
                          flush=True)


if __name__ == '__main__':
    main()
