#!/usr/bin/python3
"""Per-node A/B of one compiled model under two environments (e.g. DYNVM_DNNL_FUSED_DW=0 / unset).

Runs `vm-run --profile` on the model once per side (--repeat runs each, alternating sides for
--rounds rounds) and prints, per FusedConv node in execution order, the fastest time of each side,
B/A's ratio A/B (>1: B is faster) and the node's shapes; then the totals.

  /usr/bin/python3 tools/bench/trace_ab.py --build build/release --model M.dvm --input x=X.npy \\
      --a DYNVM_DNNL_FUSED_DW=0 --b '' [--op FusedConv] [--repeat 3] [--rounds 2]
"""
import argparse
import json
import os
import subprocess
import tempfile


def trace(args, env_assign):
    env = dict(os.environ)
    for kv in filter(None, env_assign.split(',')):
        k, v = kv.split('=', 1)
        env[k] = v
    with tempfile.NamedTemporaryFile(suffix='.json') as f:
        subprocess.run([os.path.join(args.build, 'tools', 'vm-run'), args.model, '--input',
                        args.input, '--repeat', str(args.repeat), '--threads', '1', '--profile',
                        f.name], check=True, capture_output=True, env=env)
        d = json.load(open(f.name))
    ev = d['traceEvents'] if isinstance(d, dict) else d
    nodes = sorted((e for e in ev if e.get('ph') == 'X' and e['name'] == args.op),
                   key=lambda e: e['ts'])
    n = len(nodes) // args.repeat
    return ([min(nodes[i + k * n]['dur'] for k in range(args.repeat)) / 1000 for i in range(n)],
            [nodes[i].get('args', {}).get('shapes', '') for i in range(n)])


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--build', default='build/release')
    p.add_argument('--model', required=True)
    p.add_argument('--input', required=True)
    p.add_argument('--a', default='')
    p.add_argument('--b', default='')
    p.add_argument('--op', default='FusedConv')
    p.add_argument('--repeat', type=int, default=3)
    p.add_argument('--rounds', type=int, default=2)
    args = p.parse_args()
    best_a = best_b = None
    shapes = []
    for _ in range(args.rounds):
        a, shapes = trace(args, args.a)
        b, _ = trace(args, args.b)
        best_a = a if best_a is None else [min(x, y) for x, y in zip(best_a, a)]
        best_b = b if best_b is None else [min(x, y) for x, y in zip(best_b, b)]
    print(f'A: {args.a or "(default)"}  B: {args.b or "(default)"}  ms, fastest of '
          f'{args.rounds} x {args.repeat} runs, 1 thread')
    print('node a_ms b_ms a/b shapes')
    for i, (x, y) in enumerate(zip(best_a, best_b)):
        print(f'{i} {x:.3f} {y:.3f} {x / y:.2f}x {shapes[i]}')
    print(f'total {sum(best_a):.3f} {sum(best_b):.3f} {sum(best_a) / sum(best_b):.2f}x')


if __name__ == '__main__':
    main()
