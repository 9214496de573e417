"""The differential fuzzer's driver: generate, run in dynvm and ONNX Runtime, compare, reduce.

    tools/difftest --seed S --seconds N [--out DIR] [--graphs G] [--no-ort] ...

Graph i of seed S (gen.py) is written at each of its opsets; each model runs in dynvm
optimized and with --no-optimize, at 1 and 2 threads (a child process: dynvm_worker.py), and
in ONNX Runtime (onnxruntime-node in one persistent node process: ort_worker.js), and the
outputs are compared (compare.py). A mismatch is reduced (reduce.py) and, with --out, saved
as a regression case. The last line is

    graphs: G, operators: K, control-flow graphs: C, mismatches: M

Verdicts per model: ok; rejected (both engines refuse it, or ONNX Runtime refuses what dynvm
refuses too); no-oracle (ONNX Runtime has no kernel for a type: dynvm's configurations are
compared with each other only); explained (a difference docs/differential.md lists); and the
mismatches: crash, hang, dynvm-error (ONNX Runtime ran it), ort-error (dynvm ran what ONNX
Runtime refused), value (a different dtype, shape or value), config (dynvm disagrees with
itself across optimization or threads).
"""
import argparse
import collections
import os
import sys
import tempfile
import time

SKIP = 77  # ctest's SKIP_RETURN_CODE: a skip must show as skipped, never as passed

try:
    import numpy as np  # noqa: F401
    import onnx  # noqa: F401
except ImportError as e:  # pragma: no cover - Debian's python3-onnx and numpy are missing
    print(f"SKIPPED: {e} (install python3-onnx and python3-numpy)")
    sys.exit(SKIP)

import compare  # noqa: E402
import gen  # noqa: E402
import graph as graphmod  # noqa: E402
import known  # noqa: E402
import opdefs  # noqa: E402
import workers  # noqa: E402

CONFIGS = [(1, 1), (1, 2), (0, 1), (0, 2)]  # (optimize, threads)
CONFIG_NAMES = {(1, 1): "optimized, 1 thread", (1, 2): "optimized, 2 threads",
                (0, 1): "--no-optimize, 1 thread", (0, 2): "--no-optimize, 2 threads"}
MISMATCH_KINDS = ("crash", "hang", "dynvm-error", "ort-error", "value", "config")
RUN_TIMEOUT = 20.0


class Verdict:
    def __init__(self, kind, detail="", ort_outputs=None):
        self.kind = kind
        self.detail = detail
        self.ort_outputs = ort_outputs

    @property
    def mismatch(self):
        return self.kind in MISMATCH_KINDS

    def __repr__(self):
        return f"{self.kind}: {self.detail}" if self.detail else self.kind


def infos_of(g):
    return {v.name: compare.OutInfo.of(v) for v, _ in g.outputs}


class Engines:
    """The dynvm worker and, unless disabled, the ONNX Runtime worker."""

    def __init__(self, pythonpath, ort_modules):
        self.dynvm = workers.DynvmWorker(pythonpath)
        self.ort = workers.OrtWorker(ort_modules) if ort_modules else None
        self.tmp = tempfile.mkdtemp(prefix="difftest-")
        self.n = 0

    def close(self):
        self.dynvm.close()
        if self.ort:
            self.ort.close()

    def check(self, model, inputs, infos, use_ort=True):
        """The verdict for one model (an onnx.ModelProto) on `inputs`."""
        data = model.SerializeToString()
        self.n += 1
        path = os.path.join(self.tmp, f"m{self.n % 4}.onnx")
        with open(path, "wb") as f:
            f.write(data)
        ort_on = use_ort and self.ort is not None
        if ort_on:
            self.ort.send(data, inputs)
        self.dynvm.send(path, inputs, CONFIGS, RUN_TIMEOUT)
        dyn_failure = None
        try:
            dyn = self.dynvm.recv()
        except workers.WorkerFailure as e:
            dyn, dyn_failure = None, e
        ort_out, ort_err = None, None
        if ort_on:
            try:
                ort_out = self.ort.recv(RUN_TIMEOUT * 3)
            except workers.OrtError as e:
                ort_err = str(e)
            except workers.WorkerFailure as e:
                ort_err = f"ONNX Runtime {e.kind}: {e}"
        return judge(model, inputs, dyn, dyn_failure, ort_on, ort_out, ort_err, infos)


def judge(model, inputs, dyn, dyn_failure, ort_on, ort_out, ort_err, infos):
    if dyn_failure is not None:
        return Verdict(dyn_failure.kind, str(dyn_failure))
    oks = [(c, r[1]) for c, r in zip(CONFIGS, dyn) if r[0] == "ok"]
    errs = [(c, r[1]) for c, r in zip(CONFIGS, dyn) if r[0] == "error"]
    # dynvm against itself: every configuration agrees (all run, or all refuse at compile).
    if oks and errs:
        c, e = errs[0]
        reason = known.explain_dynvm_error(e, model)
        if reason:
            return Verdict("explained", reason)
        return Verdict("config", f"{CONFIG_NAMES[c]} failed: {e}; "
                       f"{CONFIG_NAMES[oks[0][0]]} ran")
    if oks:
        base_c, base = oks[0]
        for c, out in oks[1:]:
            d = compare.diff_outputs(out, base, infos)
            if d:
                return Verdict("config", f"{CONFIG_NAMES[c]} vs {CONFIG_NAMES[base_c]}: {d}")
    return _against_ort(model, inputs, oks, errs, ort_on, ort_out, ort_err, infos)


def _against_ort(model, inputs, oks, errs, ort_on, ort_out, ort_err, infos):
    if not ort_on:
        return Verdict("ok" if oks else "rejected", errs[0][1] if errs else "")
    if ort_err is not None:
        if known.ort_has_no_kernel(ort_err):
            return Verdict("no-oracle" if oks else "rejected", ort_err)
        if not oks:
            return Verdict("rejected", f"both: {ort_err} | {errs[0][1]}")
        reason = known.explain_ort_error(ort_err, model)
        if reason:
            return Verdict("explained", reason)
        return Verdict("ort-error", f"ONNX Runtime: {ort_err}")
    if not oks:
        reason = known.explain_dynvm_error(errs[0][1], model)
        if reason:
            return Verdict("explained", reason, ort_out)
        return Verdict("dynvm-error", errs[0][1], ort_out)
    got = oks[0][1]
    d = compare.diff_outputs(got, ort_out, infos, shape_only_random=True)
    if d:
        reasons = set()
        for name in sorted(ort_out):
            info = infos.get(name, compare.OutInfo())
            if name in got and compare.diff(got[name], ort_out[name], info,
                                            shape_only=info.random):
                reason = known.explain_value(model, inputs, name, got[name], ort_out[name],
                                             info.shape)
                if not reason:
                    return Verdict("value", d, ort_out)
                reasons.add(reason)
        if reasons and set(got) == set(ort_out):
            return Verdict("explained", "; ".join(sorted(reasons)), ort_out)
        return Verdict("value", d, ort_out)
    return Verdict("ok", "", ort_out)


SEVERITY = ["ok", "explained", "no-oracle", "rejected"] + list(MISMATCH_KINDS)


class Stats:
    def __init__(self, table_ops):
        self.table_ops = table_ops
        self.graphs = 0
        self.models = 0
        self.control_flow = 0
        self.verdicts = collections.Counter()
        self.model_verdicts = collections.Counter()
        self.ops = collections.Counter()
        self.explained = collections.Counter()
        self.mismatches = []

    def line(self):
        return (f"graphs: {self.graphs}, operators: {len(self.ops)}, control-flow graphs: "
                f"{self.control_flow}, mismatches: {len(self.mismatches)}")


def run_graph(engines, gg, stats, use_ort, log):
    """Checks one generated graph at each of its opsets; returns the worst verdict."""
    infos = infos_of(gg.graph)
    worst = None
    for opset in gg.opsets:
        model = graphmod.to_model(gg.graph, opset)
        v = engines.check(model, gg.inputs, infos, use_ort)
        stats.models += 1
        stats.model_verdicts[v.kind] += 1
        if v.kind == "explained":
            stats.explained[v.detail] += 1
        if v.kind not in ("rejected",):
            for dom, t in graphmod.op_types(model):
                if dom == "" and t in stats.table_ops:
                    stats.ops[t] += 1
        if v.mismatch:
            log(f"MISMATCH seed {gg.seed} graph {gg.index} opset {opset}: {v}")
        if worst is None or SEVERITY.index(v.kind) > SEVERITY.index(worst[1].kind):
            worst = (opset, v)
    return worst


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.abspath(os.path.join(here, "..", ".."))
    ap = argparse.ArgumentParser(prog="difftest", description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=60.0, help="time budget")
    ap.add_argument("--graphs", type=int, default=0, help="stop after this many graphs")
    ap.add_argument("--start", type=int, default=0, help="first graph index")
    ap.add_argument("--index", default=None,
                    help="check only these graphs (comma-separated indices)")
    ap.add_argument("--out", default="", help="save reduced mismatches here")
    ap.add_argument("--repo", default=repo)
    ap.add_argument("--python-path", default=os.path.join(repo, "build", "release", "python"),
                    help="the folder holding the built dynvm package")
    ap.add_argument("--ort-dir", default="", help="a node_modules holding onnxruntime-node")
    ap.add_argument("--install-ort", action="store_true",
                    help="npm install onnxruntime-node into the cache when it is missing")
    ap.add_argument("--no-ort", action="store_true", help="dynvm's configurations only")
    ap.add_argument("--require-ort", action="store_true",
                    help="exit 77 (skipped) when ONNX Runtime cannot be had")
    ap.add_argument("--no-reduce", action="store_true")
    ap.add_argument("--max-ops", type=int, default=8)
    ap.add_argument("--verbose", "-v", action="store_true")
    args = ap.parse_args(argv)

    if not os.path.isdir(os.path.join(args.python_path, "dynvm")):
        print(f"SKIPPED: no dynvm package in {args.python_path} (build with DYNVM_PYTHON)")
        return SKIP
    ort_modules = None
    if not args.no_ort:
        ort_modules = workers.find_ort(args.ort_dir)
        if ort_modules is None and args.install_ort:
            ort_modules = workers.install_ort()
        if ort_modules is None:
            msg = "onnxruntime-node not found (DYNVM_ORT_DIR, --ort-dir, or the cache " \
                  f"{workers.ort_cache_dir()})"
            if args.require_ort:
                print(f"SKIPPED: {msg}: the comparison with ONNX Runtime did not run")
                return SKIP
            print(f"note: {msg}: comparing dynvm's configurations only")
    defs = opdefs.onnx_ops(args.repo)
    stats = Stats(set(defs))
    engines = Engines(args.python_path, ort_modules)
    use_ort = ort_modules is not None
    print(f"difftest: seed {args.seed}, budget {args.seconds:g} s, ONNX Runtime "
          f"{'at ' + ort_modules if use_ort else 'not used'}", flush=True)

    def log(msg):
        print(msg, flush=True)

    t0 = time.monotonic()
    indices = [int(x) for x in reversed(args.index.split(","))] if args.index else None
    i = args.start
    try:
        while True:
            if indices is not None:
                if not indices:
                    break
                i = indices.pop()
            elif (args.graphs and stats.graphs >= args.graphs) or \
                    time.monotonic() - t0 >= args.seconds:
                break
            gg = gen.generate(args.seed, i, defs, args.max_ops)
            stats.graphs += 1
            if gg.control_flow:
                stats.control_flow += 1
            opset, v = run_graph(engines, gg, stats, use_ort, log)
            stats.verdicts[v.kind] += 1
            if args.verbose:
                log(f"graph {i} opsets {gg.opsets}: {v}")
            if v.mismatch:
                stats.mismatches.append((gg, opset, v))
                if args.out and not args.no_reduce:
                    import reduce
                    path = reduce.reduce_and_save(engines, gg, opset, v, args.out, use_ort,
                                                  log)
                    log(f"  reduced case saved: {path}")
            i += 1
    finally:
        engines.close()
    took = time.monotonic() - t0
    if stats.explained:
        print("explained (docs/differential.md): " + ", ".join(
            f"{k} {n}" for k, n in sorted(stats.explained.items())))
    print(f"models: {stats.models} ({', '.join(f'{k} {n}' for k, n in sorted(stats.model_verdicts.items()))})")
    print(f"time: {took:.0f} s ({stats.graphs / max(took, 1e-9):.1f} graphs/s)")
    missing = sorted(stats.table_ops - set(stats.ops))
    print(f"operators not covered ({len(missing)}): {' '.join(missing)}")
    print(stats.line(), flush=True)
    return 1 if stats.mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
