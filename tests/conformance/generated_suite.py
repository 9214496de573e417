"""The generated conformance suites (tests/conformance/opset18: the operator versions of opsets
18-23; tests/conformance/msft: ONNX Runtime's com.microsoft operators): every case of a suite's
gen.py in ONNX Runtime 1.30 and in dynvm.

Each case (gen.py: a model written with onnx.helper, its inputs, a tolerance) runs in ONNX
Runtime (onnxruntime-node, driven by tests/differential/workers.py) and in dynvm (with and without
optimization); outputs must agree: the same dtype and shape, integers and bools exactly, floats
within the case's tolerance (|got - want| <= tol * (1 + |want|), NaN equals NaN). A case marked
`refused` must be refused by dynvm with a message holding that text (and is not run in ONNX
Runtime). Cases that carry their own expected values (strings, which onnxruntime-node's binding
here cannot carry, compared with Python's own string operations) are not run in ONNX Runtime.
Exit 0 when every case passes, 1 otherwise, and 77 (ctest's SKIP_RETURN_CODE: a skip, never a
pass) when python3-onnx, the dynvm package or ONNX Runtime cannot be had.

    PYTHONPATH=build/release/python /usr/bin/python3 tests/conformance/generated_suite.py opset18
    PYTHONPATH=build/release/python /usr/bin/python3 tests/conformance/generated_suite.py msft
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77
SUITES = {"opset18": "opset 18-23 conformance", "msft": "com.microsoft conformance"}
if len(sys.argv) < 2 or sys.argv[1] not in SUITES:
    print(f"usage: generated_suite.py {{{'|'.join(SUITES)}}} [--filter S] [--ort-dir D] [-v]")
    sys.exit(2)
SUITE = sys.argv.pop(1)

try:
    import numpy as np
    sys.path.insert(0, os.path.join(HERE, "..", "differential"))
    import workers  # noqa: E402
    # Before tests/differential, which has a gen.py of its own.
    sys.path.insert(0, os.path.join(HERE, SUITE))
    import gen  # noqa: E402  (needs python3-onnx)
except ImportError as e:
    print(f"SKIPPED: {e}")
    sys.exit(SKIP)


def compare(want, got, tol):
    """None when `got` matches `want`, else what differs."""
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if want.dtype.kind in "fc":
        w = want.astype(np.float64)
        g = got.astype(np.float64)
        nan = np.isnan(w)
        if not np.array_equal(nan, np.isnan(g)):
            return "NaN at different places"
        same_inf = (w == g) | nan
        err = np.where(same_inf, 0.0, np.abs(g - w) / (1.0 + np.abs(np.where(nan, 0, w))))
        worst = float(np.max(err)) if err.size else 0.0
        return None if worst <= tol else f"max relative error {worst:.3g} > {tol:g}"
    if want.dtype == object:  # strings
        same = [str(w) == str(g) for w, g in zip(want.flat, got.flat)]
        return None if all(same) else f"strings differ at {same.count(False)} of {want.size}"
    if not np.array_equal(want, got):
        return f"values differ at {int(np.sum(want != got))} of {want.size} elements"
    return None


def run_dynvm(dynvm, case, optimize):
    exe = dynvm.compile(case.model, optimize=optimize)
    vm = dynvm.VirtualMachine(exe, threads=1)
    return vm.run(dict(case.inputs))


def check_case(dynvm, ort, case):
    """("pass" | "refused" | "fail", detail)."""
    if case.refused is not None:
        try:
            run_dynvm(dynvm, case, True)
        except Exception as e:  # dynvm's errors: the message is what is checked
            msg = str(e)
            if case.refused in msg:
                return "refused", msg.splitlines()[0][:200]
            return "fail", f"refused, but without '{case.refused}': {msg[:300]}"
        return "fail", f"ran; it should be refused ('{case.refused}')"
    try:
        want = case.expected if case.expected is not None else ort.run(case.model,
                                                                       dict(case.inputs))
    except (workers.OrtError, workers.WorkerFailure) as e:
        return "fail", f"ONNX Runtime refused the case (a generator bug): {str(e)[:300]}"
    for optimize in (True, False):
        try:
            got = run_dynvm(dynvm, case, optimize)
        except Exception as e:
            return "fail", f"dynvm (optimize={optimize}): {str(e)[:400]}"
        for name, w in want.items():
            if name not in got:
                return "fail", f"output {name} missing"
            why = compare(np.asarray(w), np.asarray(got[name]), case.tol)
            if why:
                return "fail", f"output {name} (optimize={optimize}): {why}"
    return "pass", ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ort-dir", default="", help="a node_modules holding onnxruntime-node")
    ap.add_argument("--filter", default="", help="only cases whose name contains this")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    try:
        import dynvm
    except ImportError as e:
        print(f"SKIPPED: the dynvm package is not importable ({e}); set PYTHONPATH")
        return SKIP
    node_modules = workers.find_ort(args.ort_dir or None)
    if node_modules is None:
        print("SKIPPED: ONNX Runtime (onnxruntime-node) not found: set DYNVM_ORT_DIR or install "
              "it into " + workers.ort_cache_dir())
        return SKIP
    try:
        ort = workers.OrtWorker(node_modules)
    except (OSError, workers.WorkerFailure) as e:
        print(f"SKIPPED: cannot start ONNX Runtime: {e}")
        return SKIP
    counts = {"pass": 0, "refused": 0, "fail": 0}
    failures = []
    try:
        for case in gen.cases():
            if args.filter and args.filter not in case.name:
                continue
            outcome, detail = check_case(dynvm, ort, case)
            counts[outcome] += 1
            if outcome == "fail":
                opset = getattr(case, "opset", None)
                failures.append(f"FAIL {case.name}" + (f" (opset {opset})" if opset else "") +
                                f": {detail}")
            elif args.verbose:
                print(f"{outcome.upper()} {case.name} {detail}")
    finally:
        ort.close()
    for f in failures:
        print(f)
    total = sum(counts.values())
    print(f"{SUITES[SUITE]}: {counts['pass']} passed, {counts['refused']} refused as "
          f"expected, {counts['fail']} failed, of {total} cases (ONNX Runtime 1.30 the oracle)")
    return 0 if counts["fail"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
