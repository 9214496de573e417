"""dynvm (vm-run) and ONNX Runtime (onnxruntime-node, ort_forward.js) on the same ONNX file and
seeded input, for the benchmarks of exported forms (dynquant_ffn_bench.py, qdq_cnn_bench.py):
compile once, check dynvm's output against ORT's, then time both alternately at each thread
count and print dynvm/ORT (ORT time over dynvm time: > 1 means dynvm is faster).

How a round is timed (the same rules for both runtimes; add_timing_args adds the flags):
  - Each round is one process (vm-run, or node running ort_forward.js): a warm-up run, then
    `repeat` timed runs, the median kept. The repeat count is set once per case so that a round
    times about --round-ms of dynvm's 1-thread runs (calibrated with a short vm-run; at least 5
    runs), and both runtimes use it. Rounds shorter than that (5-7 runs, 10 ms) were decided by
    where the OS put the process's second thread in its first milliseconds.
  - Rounds are outermost: round 1 of every case and thread count, then round 2, ...; each
    case's best round is kept. A burst of other work then costs one round of a case, not all.
  - A round is checked for other work on the machine: before it starts, the harness waits (at
    most --quiet-wait-s) for 30 ms in which the machine was idle (/proc/stat); after it, the
    CPU time the machine spent (/proc/stat) beyond the round's own process (getrusage of the
    children)
    and the time tasks waited for a CPU (/proc/pressure/cpu, "some") must each be below
    --quiet-slack-s plus --quiet-frac of the round's wall time. A round that is not is run
    again (at most --retries times; the best of the tries is kept and the case is marked `*`).
    Why: on the 2-CPU development machine one other runnable task (another session's build:
    `nice` does not lower it across sessions, autogroup scheduling is on) leaves three threads
    for two CPUs, and a 2-thread round then shares one CPU between its own two threads (the
    2-thread time equals the 1-thread time) or with the other task. Measured 2026-11-29: the
    dynamic-quant FFN rounds whose 2-thread time equalled their 1-thread time had both threads on
    one CPU, with the machine's other CPU busy; ORT's rounds did the same under the same load
    (docs/zoo.md). Neither runtime is handicapped: each is timed alone, by the same rules.
"""
import glob
import json
import os
import resource
import subprocess
import sys
import time

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


def add_timing_args(p):
    """The round flags time_cases reads (see the module's docstring)."""
    p.add_argument('--round-ms', type=float, default=60,
                   help="timed dynvm milliseconds per round at 1 thread (sets the repeat count)")
    p.add_argument('--retries', type=int, default=3,
                   help='times a round disturbed by other work is run again')
    p.add_argument('--quiet-wait-s', type=float, default=2.0,
                   help='longest wait for an idle machine before a round')
    p.add_argument('--quiet-slack-s', type=float, default=0.03,
                   help='other CPU time (and CPU wait) a round tolerates, plus --quiet-frac')
    p.add_argument('--quiet-frac', type=float, default=0.05,
                   help="... of the round's wall time")
    p.add_argument('--log-rounds', action='store_true',
                   help="print every try: its time, the other work's CPU time and the CPU wait")


def _busy_s():
    """CPU seconds the machine has spent outside idle and iowait (/proc/stat)."""
    with open('/proc/stat') as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf('SC_CLK_TCK')


def _pressure_s():
    """Seconds during which some task waited for a CPU (/proc/pressure/cpu), or 0 without PSI."""
    try:
        with open('/proc/pressure/cpu') as f:
            return int(f.readline().split('total=')[1]) / 1e6
    except (OSError, IndexError, ValueError):
        return 0.0


def _own_cpu_s():
    """CPU seconds of this process and its finished children."""
    c, s = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    return c.ru_utime + c.ru_stime + s.ru_utime + s.ru_stime


def _wait_quiet(args):
    """Waits (at most --quiet-wait-s) for 30 ms in which the machine spent at most 10 ms of CPU
    time (/proc/stat counts in 10 ms ticks): no other work running."""
    deadline = time.monotonic() + args.quiet_wait_s
    while time.monotonic() < deadline:
        b0, c0 = _busy_s(), _own_cpu_s()
        time.sleep(0.03)
        if (_busy_s() - b0) - (_own_cpu_s() - c0) <= 0.0101:
            return


def _timed_round(args, run, what):
    """run() -> ms, retried while other work disturbed it; returns (best ms, whether every try
    was disturbed)."""
    best = float('inf')
    for attempt in range(args.retries + 1):
        _wait_quiet(args)
        b0, p0, c0, t0 = _busy_s(), _pressure_s(), _own_cpu_s(), time.monotonic()
        ms = run()
        b1, p1, c1, t1 = _busy_s(), _pressure_s(), _own_cpu_s(), time.monotonic()
        best = min(best, ms)
        allowed = args.quiet_slack_s + args.quiet_frac * (t1 - t0)
        other, wait = (b1 - b0) - (c1 - c0), p1 - p0
        quiet = other <= allowed and wait <= allowed
        if args.log_rounds:
            print(f'#   {what} try {attempt + 1}: {ms:.3f} ms; other work {other:.3f} s, CPU wait '
                  f'{wait:.3f} s in {t1 - t0:.3f} s{"" if quiet else " (disturbed)"}', flush=True)
        if quiet:
            return ms, False
    return best, True


def _repeat(args, dvm, name, npy, macs):
    """Timed runs per round: about --round-ms of dynvm's 1-thread runs (at least 5)."""
    if args.repeat:
        return args.repeat
    if not getattr(args, 'round_ms', 0):
        return max(5, min(200, int(4e9 / (16 * macs))))
    ms = run_dynvm(args, dvm, name, npy, 1, 3)
    return max(5, min(5000, int(round(args.round_ms / max(ms, 1e-3)))))


def time_cases(args, rows):
    """rows: prepare()'s tuples plus the case's multiply-adds (used only without --round-ms).
    Times each case at each of --threads, rounds outermost, each round checked for other work
    (the module's docstring); prints one line per case and thread count (the best round of
    each runtime; `*`: some round was disturbed on every try), then the minimum and geometric
    mean of dynvm/ORT per thread count."""
    thread_counts = [int(t) for t in args.threads.split(',')]
    repeats = [_repeat(args, dvm, name, npy, macs) for _, _, name, dvm, npy, _, macs in rows]
    print('# timed runs per round: ' + ', '.join(f'{row[0]} {n}' for row, n in zip(rows, repeats)),
          flush=True)
    best, noisy = {}, {}
    for r in range(args.rounds):
        for (case, onnx_path, name, dvm, npy, feeds, _), repeat in zip(rows, repeats):
            for threads in thread_counts:
                key = (case, threads)
                what = f'round {r + 1} {case} {threads}'
                d, d_bad = _timed_round(
                    args, lambda: run_dynvm(args, dvm, name, npy, threads, repeat), what + ' dynvm')
                o, o_bad = _timed_round(
                    args, lambda: run_ort(args, onnx_path, feeds, threads, repeat), what + ' ORT')
                bd, bo = best.get(key, (float('inf'), float('inf')))
                best[key] = (min(bd, d), min(bo, o))
                noisy[key] = noisy.get(key, False) or d_bad or o_bad
        print(f'# round {r + 1} of {args.rounds} done, load average {loadavg()}', flush=True)
    print('case threads dynvm_ms ort_ms dynvm/ORT', flush=True)
    ratios = {}
    for (case, *_), repeat in zip(rows, repeats):
        for threads in thread_counts:
            d, o = best[(case, threads)]
            ratios.setdefault(threads, []).append(o / d)
            mark = ' *' if noisy[(case, threads)] else ''
            print(f'{case} {threads} {d:.3f} {o:.3f} {o / d:.2f}x{mark}', flush=True)
    for threads, r in ratios.items():
        print(f'# {threads} thread(s): dynvm/ORT min {min(r):.2f}x, geometric mean '
              f'{float(np.exp(np.mean(np.log(r)))):.2f}x over {len(r)} cases')
    marked = sum(noisy.values())
    print(f'# {marked} of {len(noisy)} lines marked * (a round disturbed by other work on every '
          f'try); load average at end: {loadavg()}')
