#!/usr/bin/python3
"""A conformer block (issue 32), exported from PyTorch here, dynvm (vm-run) against ONNX Runtime
(onnxruntime-node), side by side at several sizes.

The block is the standard one (Gulati et al. 2020, as torchaudio and ESPnet write it):
  x = x + 0.5 * FFN(x)      FFN: LayerNorm, Linear(d, 4d), Swish, Linear(4d, d)
  x = x + MHSA(LayerNorm(x))    (torch.nn.MultiheadAttention, 4 heads)
  x = x + Conv(x)           Conv: LayerNorm, transpose to [B, C, T], pointwise Conv1d(d, 2d), GLU,
                            depthwise Conv1d(d, d, k, groups=d), BatchNorm1d, Swish,
                            pointwise Conv1d(d, d), transpose back
  x = x + 0.5 * FFN(x)
  y = LayerNorm(x)
on x of shape [batch, time, d_model]; BatchNorm has non-trivial running statistics (eval mode).

Each case is exported with torch.onnx (opset 17) under --out, compiled once, checked against ORT
on the same seeded input (max |dynvm - ORT| / max |ORT| <= --tol), then timed with dynvm and ORT
alternating (--rounds, each --repeat timed runs after a warm-up; the best round kept) at each
thread count. Prints dynvm/ORT as ORT time over dynvm time (>1: dynvm is faster) and the CPU.

  /usr/bin/python3 tools/bench/conformer_bench.py --build build/release \\
      --node-modules /work/ort/node_modules [--cases d144_t100_b1,...] [--threads 1,2] [--profile]
"""
import argparse
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mobile_cnn_bench as mcb  # noqa: E402

# name: (d_model, time, batch, depthwise kernel, repeat at 1 thread)
CASES = {
    'd144_t100_b1_k31': (144, 100, 1, 31, 40),
    'd144_t400_b1_k31': (144, 400, 1, 31, 10),
    'd144_t100_b4_k15': (144, 100, 4, 15, 10),
    'd256_t100_b1_k31': (256, 100, 1, 31, 20),
    'd256_t400_b1_k15': (256, 400, 1, 15, 5),
    'd256_t400_b4_k31': (256, 400, 4, 31, 2),
}


def export(path, d, k, heads=4):
    import torch
    from torch import nn

    class FFN(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)

        def forward(self, x):
            return self.fc2(nn.functional.silu(self.fc1(self.norm(x))))

    class ConvModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.pw1 = nn.Conv1d(d, 2 * d, 1)
            self.dw = nn.Conv1d(d, d, k, padding=k // 2, groups=d)
            self.bn = nn.BatchNorm1d(d)
            self.pw2 = nn.Conv1d(d, d, 1)

        def forward(self, x):
            y = self.norm(x).transpose(1, 2)
            y = nn.functional.glu(self.pw1(y), dim=1)
            y = nn.functional.silu(self.bn(self.dw(y)))
            return self.pw2(y).transpose(1, 2)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ff1 = FFN()
            self.ff2 = FFN()
            self.att_norm = nn.LayerNorm(d)
            self.att = nn.MultiheadAttention(d, heads, batch_first=True)
            self.conv = ConvModule()
            self.norm = nn.LayerNorm(d)

        def forward(self, x):
            x = x + 0.5 * self.ff1(x)
            a = self.att_norm(x)
            x = x + self.att(a, a, a, need_weights=False)[0]
            x = x + self.conv(x)
            x = x + 0.5 * self.ff2(x)
            return self.norm(x)

    torch.manual_seed(0)
    m = Block().eval()
    with torch.no_grad():
        m.conv.bn.running_mean.uniform_(-0.5, 0.5)
        m.conv.bn.running_var.uniform_(0.5, 2.0)
        m.conv.bn.weight.uniform_(0.5, 1.5)
        m.conv.bn.bias.uniform_(-0.5, 0.5)
    x = torch.zeros(1, 50, d)
    torch.onnx.export(m, (x,), path, input_names=['x'], output_names=['y'], opset_version=17,
                      dynamic_axes={'x': {0: 'batch', 1: 'time'}, 'y': {0: 'batch', 1: 'time'}})


def cpu_name():
    try:
        for line in subprocess.run(['lscpu'], capture_output=True, text=True).stdout.splitlines():
            if line.startswith('Model name:'):
                return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return 'unknown'


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--build', default='build/release')
    p.add_argument('--node-modules', required=True)
    p.add_argument('--out', default='build/bench/conformer')
    p.add_argument('--cases', default=','.join(CASES))
    p.add_argument('--threads', default='1,2')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--stat', choices=['median', 'min'], default='median')
    p.add_argument('--tol', type=float, default=1e-4)
    p.add_argument('--profile', action='store_true')
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print(f'# CPU: {cpu_name()}, {os.cpu_count()} CPUs', flush=True)
    rows = []
    for case in args.cases.split(','):
        d, t, b, k, repeat = CASES[case]
        onnx_path = os.path.join(args.out, f'conformer_d{d}_k{k}.onnx')
        if not os.path.exists(onnx_path):
            export(onnx_path, d, k)
        rows.append(mcb.prepare_case(args, case, onnx_path, 'x', [b, t, d], 1.0, repeat))
    mcb.time_cases(args, rows)


if __name__ == '__main__':
    main()
