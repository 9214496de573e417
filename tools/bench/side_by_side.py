"""dynvm (vm-run) and ONNX Runtime (onnxruntime-node, ort_forward.js) on the same ONNX file and
seeded input, for the benchmarks of exported forms (dynquant_ffn_bench.py, qdq_cnn_bench.py):
compile once, check dynvm's output against ORT's, then time both alternately at each thread
count and print dynvm/ORT (ORT time over dynvm time: > 1 means dynvm is faster)."""
import glob
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mobile_cnn_bench import run_dynvm, run_ort  # noqa: E402
from seeded import lcg  # noqa: E402


def cpu_name():
    with open('/proc/cpuinfo') as f:
        for line in f:
            if line.startswith('model name'):
                return line.split(':', 1)[1].strip()
    return 'unknown'


def loadavg():
    with open('/proc/loadavg') as f:
        return ' '.join(f.read().split()[:3])


def prepare(args, case, onnx_path, name, dims, scale, step=None):
    """Compiles one case, writes its seeded input (lcg * scale) and checks dynvm's first output
    against ORT's (max |dynvm - ORT| / max |ORT| within args.tol; with `step`, the output's
    quantization step, max |dynvm - ORT| within one step instead). Returns (case, onnx_path,
    name, dvm, npy, feeds)."""
    dvm, npy, feeds = (os.path.join(args.out, case + ext) for ext in ('.dvm', '.npy', '.json'))
    subprocess.run([os.path.join(args.build, 'tools', 'vm-compile'), onnx_path, '-o', dvm],
                   check=True, capture_output=True)
    x = (lcg(int(np.prod(dims))) * scale).reshape(dims)
    np.save(npy, x)
    with open(feeds, 'w') as f:
        json.dump({name: {'type': 'float32', 'dims': dims, 'data': x.ravel().tolist()}}, f)
    odir = os.path.join(args.out, case + '_out')
    for old in glob.glob(os.path.join(odir, '*.npy')):
        os.remove(old)
    subprocess.run([os.path.join(args.build, 'tools', 'vm-run'), dvm, '--input', f'{name}={npy}',
                    '--output-dir', odir], check=True, capture_output=True)
    ort_out = os.path.join(args.out, case + '_ort.json')
    run_ort(args, onnx_path, feeds, 1, 1, ort_out)
    with open(ort_out) as f:
        o = json.load(f)
    want = np.array(o['data'], dtype=np.float64).reshape(o['dims'])
    got = [np.load(g) for g in sorted(glob.glob(os.path.join(odir, '*.npy')))]
    got = [g for g in got if list(g.shape) == list(want.shape)]
    if not got:
        sys.exit(f'{case}: no dynvm output of shape {want.shape}')
    diff = np.abs(got[0] - want)
    err = float(np.max(diff) / max(1e-6, float(np.max(np.abs(want)))))
    if step is None:
        print(f'# {case} {name} {dims}: max |dynvm - ORT| / max |ORT| = {err:.2e}', flush=True)
        if err > args.tol:
            sys.exit(f'{case} differs from ONNX Runtime')
    else:
        steps = float(np.max(diff)) / step
        print(f'# {case} {name} {dims}: max |dynvm - ORT| = {steps:.3f} quantization steps of the '
              f'output ({int(np.sum(diff > step / 2))} of {diff.size} outputs differ; '
              f'{err:.2e} of max |ORT|)', flush=True)
        if steps > 1.001:  # one step: a rounding tie decided the other way
            sys.exit(f'{case} differs from ONNX Runtime by more than one quantization step')
    if args.profile:
        out = subprocess.run([os.path.join(args.build, 'tools', 'vm-run'), dvm, '--input',
                              f'{name}={npy}', '--repeat', '10', '--threads', '1',
                              '--profile-summary'], check=True, capture_output=True, text=True)
        print(f'# profile {case}, 1 thread\n' + out.stdout + out.stderr, flush=True)
    return case, onnx_path, name, dvm, npy, feeds


def time_cases(args, rows):
    """rows: prepare()'s tuples plus the case's multiply-adds (sets the repeat count unless
    args.repeat). Prints one line per case and thread count, then the minimum and geometric
    mean of dynvm/ORT per thread count."""
    print('case threads dynvm_ms ort_ms dynvm/ORT', flush=True)
    ratios = {}
    for case, onnx_path, name, dvm, npy, feeds, macs in rows:
        repeat = args.repeat or max(5, min(200, int(4e9 / (16 * macs))))
        for threads in map(int, args.threads.split(',')):
            best_d, best_o = float('inf'), float('inf')
            for _ in range(args.rounds):
                best_d = min(best_d, run_dynvm(args, dvm, name, npy, threads, repeat))
                best_o = min(best_o, run_ort(args, onnx_path, feeds, threads, repeat))
            ratios.setdefault(threads, []).append(best_o / best_d)
            print(f'{case} {threads} {best_d:.3f} {best_o:.3f} {best_o / best_d:.2f}x', flush=True)
    for threads, r in ratios.items():
        print(f'# {threads} thread(s): dynvm/ORT min {min(r):.2f}x, geometric mean '
              f'{float(np.exp(np.mean(np.log(r)))):.2f}x over {len(r)} cases')
    print(f'# load average at end: {loadavg()}')
