#!/usr/bin/python3
"""A CRNN (conv stack, BiLSTM, greedy CTC decode in the graph) over text-line widths: dynvm
(vm-run) against ONNX Runtime (onnxruntime-node), side by side. One ONNX export with a dynamic
width, compiled once; each width runs dynvm and ORT alternately (--rounds, best median kept).

  /usr/bin/python3 tools/bench/crnn_bench.py --build build/dev --node-modules DIR \
      [--widths 100,200,300,400] [--threads 1,2] [--stat median|min]
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conv_bench  # noqa: E402


class Crnn(torch.nn.Module):
    def __init__(self, classes=40, hidden=128):
        super().__init__()
        c = torch.nn
        self.convs = c.Sequential(
            c.Conv2d(1, 32, 3, padding=1), c.BatchNorm2d(32), c.ReLU(), c.MaxPool2d(2),
            c.Conv2d(32, 64, 3, padding=1), c.BatchNorm2d(64), c.ReLU(), c.MaxPool2d(2),
            c.Conv2d(64, 128, 3, padding=1), c.BatchNorm2d(128), c.ReLU(),
            c.MaxPool2d((2, 1)),
            c.Conv2d(128, 128, 3, padding=1), c.BatchNorm2d(128), c.ReLU(),
            c.MaxPool2d((4, 1)))
        self.lstm = c.LSTM(128, hidden, bidirectional=True)
        self.fc = c.Linear(2 * hidden, classes)

    def forward(self, x):  # x [1, 1, 32, W]
        f = self.convs(x)  # [1, 128, 1, W/4]
        f = f.squeeze(2).permute(2, 0, 1)  # [T, 1, 128]
        y, _ = self.lstm(f)
        tokens = self.fc(y).argmax(-1).squeeze(1)  # [T]
        prev = torch.cat([torch.full((1,), -1, dtype=tokens.dtype), tokens[:-1]])
        keep = (tokens != 0) & (tokens != prev)  # greedy CTC: drop blanks and repeats
        return tokens[keep]


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--build', default='build/dev')
    p.add_argument('--node-modules', required=True)
    p.add_argument('--out', default='build/bench/crnn')
    p.add_argument('--widths', default='100,200,300,400')
    p.add_argument('--threads', default='1,2')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--repeat', type=int, default=20)
    # min: each round keeps its fastest run instead of its median (both sides), for a machine
    # loaded by other work, where medians include time descheduled.
    p.add_argument('--stat', choices=['median', 'min'], default='median')
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    model = Crnn().eval()
    onnx_path = os.path.join(args.out, 'crnn.onnx')
    dvm = os.path.join(args.out, 'crnn.dvm')
    torch.onnx.export(model, torch.zeros(1, 1, 32, 100), onnx_path, input_names=['x'],
                      output_names=['y'], opset_version=13, dynamic_axes={'x': {3: 'width'}},
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    subprocess.run([os.path.join(args.build, 'tools', 'vm-compile'), onnx_path, '-o', dvm],
                   check=True, capture_output=True)
    print('case threads dynvm_ms ort_ms dynvm/ORT')
    for width in map(int, args.widths.split(',')):
        dims = [1, 1, 32, width]
        npy = os.path.join(args.out, f'x{width}.npy')
        x = conv_bench.lcg(int(np.prod(dims))).reshape(dims)
        np.save(npy, x)
        odir = os.path.join(args.out, f'out{width}')
        subprocess.run([os.path.join(args.build, 'tools', 'vm-run'), dvm, '--input', 'x=' + npy,
                        '--output-dir', odir], check=True, capture_output=True)
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        got = np.load(os.path.join(odir, 'y.npy'))
        print(f'# crnn_w{width}: dynvm decodes {got.size} tokens, PyTorch {want.size}, '
              f'equal: {got.shape == want.shape and bool((got == want).all())}', flush=True)
        for threads in map(int, args.threads.split(',')):
            best_d, best_o = float('inf'), float('inf')
            for _ in range(args.rounds):
                best_d = min(best_d, conv_bench.run_dynvm(args, dvm, npy, threads, args.repeat))
                best_o = min(best_o, conv_bench.run_ort(args, onnx_path, dims, threads,
                                                        args.repeat))
            print(f'crnn_w{width} {threads} {best_d:.2f} {best_o:.2f} {best_o / best_d:.2f}x',
                  flush=True)


if __name__ == '__main__':
    main()
