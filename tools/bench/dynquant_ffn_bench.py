#!/usr/bin/python3
"""A transformer FFN (and an encoder layer's Q/K/V projections) in the form ONNX Runtime's
`onnxruntime.quantization.quantize_dynamic` writes (issue 32): dynvm (vm-run) against ONNX
Runtime (onnxruntime-node), interleaved, at 1 and 2 threads.

ORT's Python package is not installed here, so the models are built with onnx.helper, node for
node as quantize_dynamic (onnxruntime/python/tools/quantization/operators/matmul.py,
MatMulInteger) writes each f32 MatMul whose B is an initializer:

  x_quantized, x_scale, x_zero_point = DynamicQuantizeLinear(x)    # one per activation, shared
                                                                   # by every MatMul reading x
  y_output_quantized = MatMulInteger(x_quantized, W_quantized, x_zero_point, W_zero_point)
  y_output_quantized_cast_output = Cast(y_output_quantized, to=FLOAT)
  y_quant_scales_mul:0 = Mul(x_scale, W_scale)
  y = Mul(y_output_quantized_cast_output, y_quant_scales_mul:0)
  ... the original Add(y, bias) stays f32 ...

W_quantized [K, N]: s8 symmetric (weight_type QInt8, the default: zero point 0, scale
max|w| / 127) or u8 asymmetric (QUInt8: scale (max(0, max w) - min(0, min w)) / 255, zero
point round(-min / scale)); per tensor, or per column with per_channel=True (axis 1, scale and
zero point [N]).

Models (--models):
  ffn   x [1, T, D] -> MatMul(W1 [D, 4D]) + b1 -> Relu -> MatMul(W2 [4D, D]) + b2 -> + x
  qkv   x [1, T, D] -> three MatMul(W [D, D]) + b sharing one DynamicQuantizeLinear, -> q + k + v
Variants (--variants): s8 (per tensor), s8pc (per channel), u8, u8pc.

Each case is compiled once and its output compared with ORT's (max |dynvm - ORT| / max |ORT|,
--tol); then dynvm and ORT run alternately (--rounds, rounds outermost, each round one process
timing --repeat runs after a warm-up, by default about --round-ms of dynvm's 1-thread runs; the
best round kept) at each thread count. A round disturbed by other work on the machine (CPU time
outside the round's process, or tasks waiting for a CPU) is run again, by the same rules for both
runtimes (side_by_side.py's docstring: on a 2-CPU machine one other runnable task put a round's
two threads on one CPU). Prints dynvm/ORT as ORT time over dynvm time (> 1: dynvm is faster),
with the CPU's model name and the load average.

  /usr/bin/python3 tools/bench/dynquant_ffn_bench.py --build build/release \\
      --node-modules /work/ort/node_modules [--tokens 1,32,128,512] [--dims 256,512,1024] \\
      [--models ffn,qkv] [--variants s8,s8pc,u8,u8pc] [--threads 1,2] [--rounds 3]
      [--export-only DIR]
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from side_by_side import (add_timing_args, cpu_name, loadavg, prepare,  # noqa: E402
                          time_cases)

VARIANTS = ('s8', 's8pc', 'u8', 'u8pc')


def quantize_weight(w, variant):
    """W [K, N] f32 -> (W_quantized, scale, zero point) as quantize_dynamic writes them."""
    per_column = variant.endswith('pc')
    lo = w.min(axis=0) if per_column else np.array(w.min())
    hi = w.max(axis=0) if per_column else np.array(w.max())
    if variant.startswith('s8'):
        scale = (np.maximum(np.abs(lo), np.abs(hi)) / 127).astype(np.float32)
        zp = np.zeros(scale.shape, np.int8)
        q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    else:
        lo, hi = np.minimum(lo, 0), np.maximum(hi, 0)
        scale = ((hi - lo) / 255).astype(np.float32)
        zp = np.clip(np.rint(-lo / scale), 0, 255).astype(np.uint8)
        q = np.clip(np.rint(w / scale) + zp, 0, 255).astype(np.uint8)
    return q, scale, zp


class Builder:
    """Nodes and initializers of one quantize_dynamic export."""

    def __init__(self, rng, variant):
        self.rng, self.variant = rng, variant
        self.nodes, self.inits, self.quantized = [], [], {}

    def dynamic_quantize(self, x):
        """DynamicQuantizeLinear of x, once per tensor (quantize_dynamic shares it)."""
        if x not in self.quantized:
            names = [x + '_quantized', x + '_scale', x + '_zero_point']
            self.nodes.append(helper.make_node('DynamicQuantizeLinear', [x], names,
                                               x + '_QuantizeLinear'))
            self.quantized[x] = names
        return self.quantized[x]

    def matmul(self, name, x, k, n, bias=True):
        """MatMul(x, W [k, n]) (+ bias) as quantize_dynamic writes it; returns the output."""
        w = (self.rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        q, scale, zp = quantize_weight(w, self.variant)
        wn = name + '.weight'
        self.inits += [numpy_helper.from_array(q, wn + '_quantized'),
                       numpy_helper.from_array(scale, wn + '_scale'),
                       numpy_helper.from_array(zp, wn + '_zero_point')]
        xq, xs, xz = self.dynamic_quantize(x)
        out = name + '_out'
        mm = name + '_MatMul_quant'
        self.nodes += [
            helper.make_node('MatMulInteger', [xq, wn + '_quantized', xz, wn + '_zero_point'],
                             [out + '_output_quantized'], mm),
            helper.make_node('Cast', [out + '_output_quantized'],
                             [out + '_output_quantized_cast_output'],
                             out + '_output_quantized_cast', to=TensorProto.FLOAT),
            helper.make_node('Mul', [xs, wn + '_scale'], [mm + '_scales_mul:0'],
                             mm + '_scales_mul'),
            helper.make_node('Mul', [out + '_output_quantized_cast_output',
                                     mm + '_scales_mul:0'], [out], mm + '_output_scale_mul')]
        if not bias:
            return out
        b = (0.1 * self.rng.standard_normal(n)).astype(np.float32)
        self.inits.append(numpy_helper.from_array(b, name + '.bias'))
        self.nodes.append(helper.make_node('Add', [out, name + '.bias'], [name + '_biased'],
                                           name + '_Add'))
        return name + '_biased'


def model(kind, tokens, d, variant, seed=5):
    b = Builder(np.random.default_rng(seed), variant)
    if kind == 'ffn':
        h = b.matmul('fc1', 'x', d, 4 * d)
        b.nodes.append(helper.make_node('Relu', [h], ['fc1_relu'], 'Relu'))
        o = b.matmul('fc2', 'fc1_relu', 4 * d, d)
        b.nodes.append(helper.make_node('Add', [o, 'x'], ['y'], 'residual'))
    elif kind == 'qkv':
        q, k, v = (b.matmul(p, 'x', d, d) for p in ('q_proj', 'k_proj', 'v_proj'))
        b.nodes += [helper.make_node('Add', [q, k], ['qk'], 'add_qk'),
                    helper.make_node('Add', ['qk', v], ['y'], 'add_v')]
    else:
        raise ValueError(kind)
    g = helper.make_graph(b.nodes, f'{kind}_{variant}',
                          [helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, tokens, d])],
                          [helper.make_tensor_value_info('y', TensorProto.FLOAT, [1, tokens, d])],
                          b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)],
                          producer_name='onnx.quantize', producer_version='0.1.0')
    onnx.checker.check_model(m)
    return m


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--build', default='build/release')
    p.add_argument('--node-modules', default='/work/ort/node_modules')
    p.add_argument('--out', default='build/bench/dynquant_ffn')
    p.add_argument('--models', default='ffn,qkv')
    p.add_argument('--variants', default=','.join(VARIANTS))
    p.add_argument('--tokens', default='1,32,128,512')
    p.add_argument('--dims', default='256,512,1024')
    p.add_argument('--threads', default='1,2')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--repeat', type=int, default=0,
                   help='timed runs per round (0: set by --round-ms)')
    add_timing_args(p)
    p.add_argument('--stat', choices=['median', 'min'], default='median')
    p.add_argument('--tol', type=float, default=1e-4)
    p.add_argument('--profile', action='store_true')
    p.add_argument('--export-only', metavar='DIR', help='write the .onnx files there and stop')
    args = p.parse_args()
    out_dir = args.export_only or args.out
    os.makedirs(out_dir, exist_ok=True)
    cases = []
    for kind in args.models.split(','):
        for variant in args.variants.split(','):
            for d in map(int, args.dims.split(',')):
                for t in map(int, args.tokens.split(',')):
                    case = f'{kind}_{variant}_t{t}_d{d}'
                    path = os.path.join(out_dir, case + '.onnx')
                    onnx.save(model(kind, t, d, variant), path)
                    cases.append((case, path, [1, t, d], t * d * d))
    if args.export_only:
        print(f'wrote {len(cases)} models under {out_dir}')
        return 0
    print(f'# CPU: {cpu_name()}; load average at start: {loadavg()}', flush=True)
    rows = [prepare(args, c, path, 'x', dims, 2.0) + (macs,) for c, path, dims, macs in cases]
    time_cases(args, rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
