"""Replays every saved differential case (tests/differential/regressions/*/): ctest's
difftest_regressions.

A case is a folder: model.onnx, input_<name>.npy, expected_<name>.npy, case.json. case.json
says where the expected values come from (onnxruntime, or the spec: numpy, PyTorch, ONNX's
reference implementation, where ONNX Runtime departs from it), each output's tolerance
(compare.py), and the case's status:

  fixed      a dynvm bug the fuzzer found, fixed: dynvm must give the expected outputs;
  spec       a known difference where ONNX Runtime departs from the spec: dynvm must give
             the spec's answer (the expected outputs);
  error      dynvm must refuse the model with an error matching `error` (a documented
             limitation or a reading of the spec that refuses it); with `error_configs`,
             only those configurations must (the error is a dead node's, which the
             optimizer removes), and the others must run;
  open       a dynvm bug listed in docs/differential.md, not fixed yet: replayed and
             reported (XFAIL while it still fails, XPASS once it passes: then make it
             "fixed"), never a failure.

Every case runs in dynvm optimized and with --no-optimize, at 1 and 2 threads, in a child
process (a crash is a failure, not the runner's end). `checked` in case.json limits the
comparison to some outputs (where the spec leaves the others undefined); a case without
expected outputs (dynvm disagreeing with itself) requires the configurations to agree.

    /usr/bin/python3 replay.py [--python-path build/release/python] [CASE ...]
"""
import argparse
import glob
import json
import os
import sys

try:
    import numpy as np
    import onnx  # noqa: F401 - compare and workers need it through the cases
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e} (install python3-onnx and python3-numpy)")
    sys.exit(77)

import compare  # noqa: E402
import workers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = [(1, 1), (1, 2), (0, 1), (0, 2)]
NAMES = {(1, 1): "optimized", (1, 2): "optimized, 2 threads", (0, 1): "--no-optimize",
         (0, 2): "--no-optimize, 2 threads"}


def load_case(path):
    with open(os.path.join(path, "case.json")) as f:
        case = json.load(f)
    inputs = {os.path.basename(p)[len("input_"):-len(".npy")]: np.load(p)
              for p in sorted(glob.glob(os.path.join(path, "input_*.npy")))}
    expected = {os.path.basename(p)[len("expected_"):-len(".npy")]: np.load(p)
                for p in sorted(glob.glob(os.path.join(path, "expected_*.npy")))}
    return case, inputs, expected


def check(worker, path):
    """(ok, message) for one case: ok False only for a failure (open cases never fail)."""
    case, inputs, expected = load_case(path)
    status = case.get("status", "fixed")
    tol = {k: compare.OutInfo.from_json(v) for k, v in case.get("tolerance", {}).items()}
    checked = case.get("checked") or sorted(expected)
    try:
        results = worker.run(os.path.join(path, "model.onnx"), inputs, CONFIGS, 60.0)
    except workers.WorkerFailure as e:
        results = [("error", f"{e.kind}: {e}")] * len(CONFIGS)
    problems = []
    for config, (kind, value) in zip(CONFIGS, results):
        where = NAMES[config]
        if status == "error" and where not in case.get("error_configs", NAMES.values()):
            if kind != "ok":
                problems.append(f"{where}: {value}")
            continue
        if status == "error":
            if kind == "ok":
                problems.append(f"{where}: ran, but must fail with /{case['error']}/")
            elif case["error"] not in value:
                problems.append(f"{where}: failed with '{value}', not /{case['error']}/")
            continue
        if kind != "ok":
            problems.append(f"{where}: {value}")
            continue
        if not expected:  # no oracle saved: dynvm's configurations must agree
            base = next((r for r in results if r[0] == "ok"), None)
            d = compare.diff_outputs(value, base[1], tol) if base else None
            if d:
                problems.append(f"{where} vs {NAMES[CONFIGS[results.index(base)]]}: {d}")
            continue
        for name in checked:
            if name not in value:
                problems.append(f"{where}: no output '{name}' (outputs {sorted(value)})")
                continue
            d = compare.diff(value[name], expected[name], tol.get(name, compare.OutInfo()))
            if d:
                problems.append(f"{where}: output '{name}': {d}")
    label = os.path.basename(path)
    if status == "open":
        if problems:
            return True, f"XFAIL {label} (open: {case.get('bug', '')}): {problems[0]}"
        return True, f"XPASS {label}: passes now; make its status 'fixed' (docs/differential.md)"
    if problems:
        return False, f"FAIL {label} ({status}): " + "; ".join(problems[:3])
    return True, f"ok   {label} ({status})"


def main(argv=None):
    repo = os.path.abspath(os.path.join(HERE, "..", ".."))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python-path", default=os.path.join(repo, "build", "release", "python"))
    ap.add_argument("cases", nargs="*", help="case folders (default: every saved case)")
    args = ap.parse_args(argv)
    if not os.path.isdir(os.path.join(args.python_path, "dynvm")):
        print(f"SKIPPED: no dynvm package in {args.python_path}")
        return 77
    cases = args.cases or sorted(p for p in glob.glob(os.path.join(HERE, "regressions", "*"))
                                 if os.path.isfile(os.path.join(p, "case.json")))
    if not cases:
        print("no saved cases")
        return 1
    worker = workers.DynvmWorker(args.python_path)
    failed = 0
    counts = {}
    try:
        for path in cases:
            ok, msg = check(worker, path)
            print(msg, flush=True)
            failed += 0 if ok else 1
            counts[msg.split()[0]] = counts.get(msg.split()[0], 0) + 1
    finally:
        worker.close()
    print(f"{len(cases)} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
