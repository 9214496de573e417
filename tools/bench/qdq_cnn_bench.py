#!/usr/bin/python3
"""A statically quantized CNN in ONNX Runtime's QDQ format (issue 32): dynvm (vm-run) against
ONNX Runtime (onnxruntime-node), interleaved, at 1 and 2 threads, batch 1 and 8, two
resolutions.

Built with onnx.helper as `onnxruntime.quantization.quantize_static(..., quant_format=QDQ,
per_channel=True)` writes a model (u8 activations, s8 weights; ORT's Python package is not
installed here):
  - every activation tensor quantized and dequantized in place: QuantizeLinear(t, scale,
    zero_point u8) -> DequantizeLinear, the input included;
  - Conv weights s8 per output channel: DequantizeLinear(W_quantized, W_scale [M],
    W_zero_point zeros [M], axis 0); Conv biases s32: DequantizeLinear(B_quantized,
    x_scale * W_scale [M], zeros [M], axis 0);
  - the Relu after a Conv removed (ORT's QDQRemovableActivation: the output's zero point 0 with
    u8 saturation is the Relu), kept after the residual Add (DQ -> Relu -> Q);
  - MaxPool and GlobalAveragePool between DQ and Q; a Gemm head with per-channel weights.
Layers: a 3x3 stride-2 stem, two inverted-residual blocks (1x1 expand, depthwise 3x3, 1x1
project, Add residual), a stride-2 depthwise block, MaxPool, a 3x3 conv, GlobalAveragePool,
Flatten, Gemm to 100 classes. Quantization parameters come from a seeded f32 run of the same
network in numpy (calibration by min/max, as quantize_static's MinMax calibrator).

Each case is compiled once and its output (the logits, quantized and dequantized) compared
with ORT's: at most one quantization step of the logits apart (both runtimes compute the same
integer sums and requantize them in f32 as MLAS does, but a value within f32's rounding of a tie
may still round the other way in an intermediate layer, and the step carries forward); the
number of differing outputs is printed. Then dynvm and ORT run alternately (--rounds, rounds
outermost, best round kept; a round disturbed by other work on the machine is run again, by the
same rules for both runtimes: side_by_side.py's docstring). Prints dynvm/ORT (> 1: dynvm is
faster) with the CPU's model name.

  /usr/bin/python3 tools/bench/qdq_cnn_bench.py --build build/release \\
      --node-modules /work/ort/node_modules [--batches 1,8] [--sizes 112,224] [--threads 1,2]
      [--rounds 3] [--export-only DIR]
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
from seeded import lcg  # noqa: E402


def conv_f32(x, w, b, stride, pad, group):
    """NCHW convolution in numpy (calibration only)."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    y = np.zeros((n, m, oh, ow), np.float32)
    mg = m // group
    for g in range(group):
        xs = xp[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
                y[:, g * mg:(g + 1) * mg] += np.einsum('nchw,mc->nmhw', patch,
                                                       w[g * mg:(g + 1) * mg, :, i, j])
    return y + b[None, :, None, None]


def qparams(t):
    """u8 scale and zero point of a calibrated tensor (MinMax, range including 0)."""
    lo, hi = min(0.0, float(t.min())), max(0.0, float(t.max()))
    scale = np.float32((hi - lo) / 255 if hi > lo else 1.0)
    return scale, np.uint8(np.clip(np.rint(-lo / scale), 0, 255))


class Net:
    """The QDQ graph, built alongside a numpy f32 forward pass that calibrates it."""

    def __init__(self, rng):
        self.rng, self.nodes, self.inits, self.count = rng, [], [], 0

    def name(self, base):
        self.count += 1
        return f'{base}_{self.count}'

    def const(self, value, base):
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(value, n))
        return n

    def qdq(self, t, v):
        """QuantizeLinear -> DequantizeLinear of tensor t (value v); returns the DQ output."""
        s, z = qparams(v)
        sn, zn = self.const(np.array(s), t + '_scale'), self.const(np.array(z), t + '_zero_point')
        q, dq = t + '_QuantizeLinear_Output', t + '_DequantizeLinear_Output'
        self.nodes += [helper.make_node('QuantizeLinear', [t, sn, zn], [q], t + '_QuantizeLinear'),
                       helper.make_node('DequantizeLinear', [q, sn, zn], [dq],
                                        t + '_DequantizeLinear')]
        self.scale_of = getattr(self, 'scale_of', {})
        self.scale_of[dq] = s
        qv = (np.clip(np.rint(v / s) + z, 0, 255) - z) * s
        return dq, qv.astype(np.float32)

    def conv(self, x, xv, m, k, stride=1, group=1, relu=True):
        """Conv (+ the Relu its output quantization absorbs) on DQ'd x; returns the DQ output."""
        c = xv.shape[1]
        w = (self.rng.standard_normal((m, c // group, k, k)) *
             np.sqrt(2.0 / (c // group * k * k))).astype(np.float32)
        b = (0.05 * self.rng.standard_normal(m)).astype(np.float32)
        ws = (np.abs(w).reshape(m, -1).max(axis=1) / 127).astype(np.float32)
        wq = np.clip(np.rint(w / ws[:, None, None, None]), -127, 127).astype(np.int8)
        bs = (self.scale_of[x] * ws).astype(np.float32)
        bq = np.rint(b / bs).astype(np.int32)
        wn = self.const(wq, 'conv_weight_quantized')
        wdq = wn + '_DequantizeLinear_Output'
        bn = self.const(bq, 'conv_bias_quantized')
        bdq = bn + '_DequantizeLinear_Output'
        self.nodes += [
            helper.make_node('DequantizeLinear',
                             [wn, self.const(ws, 'w_scale'), self.const(np.zeros(m, np.int8), 'w_zp')],
                             [wdq], axis=0),
            helper.make_node('DequantizeLinear',
                             [bn, self.const(bs, 'b_scale'),
                              self.const(np.zeros(m, np.int32), 'b_zp')], [bdq], axis=0)]
        out = self.name('conv_out')
        pad = k // 2
        self.nodes.append(helper.make_node('Conv', [x, wdq, bdq], [out], kernel_shape=[k, k],
                                           strides=[stride, stride], pads=[pad] * 4, group=group))
        yv = conv_f32(xv, wq.astype(np.float32) * ws[:, None, None, None],
                      bq.astype(np.float32) * bs, stride, pad, group)
        if relu:  # removed by ORT's quantizer: the u8 output with zero point 0 saturates at 0
            yv = np.maximum(yv, 0)
        return self.qdq(out, yv)

    def op(self, op, inputs, value, **attrs):
        out = self.name(op.lower() + '_out')
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return self.qdq(out, value)

    def inverted_residual(self, x, xv, expand, stride=1):
        c = xv.shape[1]
        h, hv = self.conv(x, xv, c * expand, 1)
        h, hv = self.conv(h, hv, c * expand, 3, stride=stride, group=c * expand)
        if stride != 1:
            return self.conv(h, hv, 2 * c, 1, relu=False)
        h, hv = self.conv(h, hv, c, 1, relu=False)
        s, sv = self.op('Add', [x, h], xv + hv)
        return self.op('Relu', [s], np.maximum(sv, 0))


def model(batch, size, seed=3):
    net = Net(np.random.default_rng(seed))
    xv = (lcg(batch * 3 * size * size)).reshape(batch, 3, size, size)
    x, v = net.qdq('input', xv)
    h, v = net.conv(x, v, 16, 3, stride=2)
    h, v = net.inverted_residual(h, v, 4)
    h, v = net.inverted_residual(h, v, 4)
    h, v = net.inverted_residual(h, v, 4, stride=2)
    n, c, hh, ww = v.shape
    h, v = net.op('MaxPool', [h], v.reshape(n, c, hh // 2, 2, ww // 2, 2).max(axis=(3, 5)),
                  kernel_shape=[2, 2], strides=[2, 2])
    h, v = net.conv(h, v, 64, 3)
    h, v = net.op('GlobalAveragePool', [h], v.mean(axis=(2, 3), keepdims=True))
    flat = net.name('flatten_out')
    net.nodes.append(helper.make_node('Flatten', [h], [flat]))
    net.scale_of[flat] = net.scale_of[h]
    classes = 100
    w = (0.1 * net.rng.standard_normal((classes, 64))).astype(np.float32)
    ws = (np.abs(w).max(axis=1) / 127).astype(np.float32)
    wq = np.clip(np.rint(w / ws[:, None]), -127, 127).astype(np.int8)
    bs = (net.scale_of[flat] * ws).astype(np.float32)
    bq = np.rint(0.1 * net.rng.standard_normal(classes) / bs).astype(np.int32)
    wn, bn = net.const(wq, 'fc_weight_quantized'), net.const(bq, 'fc_bias_quantized')
    net.nodes += [
        helper.make_node('DequantizeLinear', [wn, net.const(ws, 'fc_w_scale'),
                                              net.const(np.zeros(classes, np.int8), 'fc_w_zp')],
                         ['fc_w'], axis=0),
        helper.make_node('DequantizeLinear', [bn, net.const(bs, 'fc_b_scale'),
                                              net.const(np.zeros(classes, np.int32), 'fc_b_zp')],
                         ['fc_b'], axis=0),
        helper.make_node('Gemm', [flat, 'fc_w', 'fc_b'], ['logits'], transB=1)]
    logits = v.reshape(n, -1) @ (wq.astype(np.float32) * ws[:, None]).T + bq * bs
    out, _ = net.qdq('logits', logits)
    net.nodes.append(helper.make_node('Identity', [out], ['y']))
    g = helper.make_graph(
        net.nodes, f'qdq_cnn_b{batch}_{size}',
        [helper.make_tensor_value_info('input', TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, [batch, classes])], net.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)],
                          producer_name='onnx.quantize', producer_version='0.1.0')
    onnx.checker.check_model(m)
    return m


def logits_step(path):
    """The quantization step (scale) of the model's output, the logits' QuantizeLinear."""
    m = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == 'QuantizeLinear' and n.input[0] == 'logits':
            return float(inits[n.input[1]])
    sys.exit(f'{path}: no QuantizeLinear of the logits')


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--build', default='build/release')
    p.add_argument('--node-modules', default='/work/ort/node_modules')
    p.add_argument('--out', default='build/bench/qdq_cnn')
    p.add_argument('--batches', default='1,8')
    p.add_argument('--sizes', default='112,224')
    p.add_argument('--threads', default='1,2')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--repeat', type=int, default=0,
                   help='timed runs per round (0: set by --round-ms)')
    add_timing_args(p)
    p.add_argument('--stat', choices=['median', 'min'], default='median')
    p.add_argument('--profile', action='store_true')
    p.add_argument('--export-only', metavar='DIR', help='write the .onnx files there and stop')
    args = p.parse_args()
    out_dir = args.export_only or args.out
    os.makedirs(out_dir, exist_ok=True)
    cases = []
    for batch in map(int, args.batches.split(',')):
        for size in map(int, args.sizes.split(',')):
            case = f'qdq_cnn_b{batch}_{size}'
            path = os.path.join(out_dir, case + '.onnx')
            onnx.save(model(batch, size), path)
            # About 30 M multiply-adds per 112x112 image.
            cases.append((case, path, [batch, 3, size, size], 30e6 * batch * (size / 112) ** 2))
    if args.export_only:
        print(f'wrote {len(cases)} models under {out_dir}')
        return 0
    print(f'# CPU: {cpu_name()}; load average at start: {loadavg()}', flush=True)
    rows = [prepare(args, c, path, 'input', dims, 1.0, step=logits_step(path)) + (macs,)
            for c, path, dims, macs in cases]
    time_cases(args, rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
