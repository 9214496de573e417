#!/usr/bin/env python3
"""compare.py's verdict (ctest compare_bar_test): exit status 0 only when every runtime gave
PyTorch's tokens and every case met the ratio bar; 1 when a case misses the bar or tokens
differ. The runtimes are replaced by fakes that report chosen times, so no model, PyTorch or
ONNX Runtime is needed."""
import contextlib
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

WANT = [5, 6, 7, 8]


def run(ms_per_runtime, tokens_of=None, threads="1"):
    """Runs compare.main with each runtime taking ms_per_runtime[runtime] per decode."""
    compare.load_case = lambda folder: {"prompt": "1", "max_new_tokens": 4, "stop_token": -1,
                                        "want": WANT}
    compare.state_dims = lambda path: "2,1,8"

    def fake_run_once(cmd, env):
        runtime = cmd[0]
        return {"tokens": (tokens_of or {}).get(runtime, WANT), "ms": [ms_per_runtime[runtime]]}

    def fake_command(runtime, case, args, threads, mode, folder):
        return [runtime], {}

    compare.run_once = fake_run_once
    compare.command = fake_command
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = compare.main(["--threads", threads, "--rounds", "1", "--repeat", "1",
                           "--models", "/nonexistent"])
    return rc, out.getvalue()


def check(name, got, want, out):
    if got != want:
        print(f"FAIL {name}: exit status {got}, want {want}\n{out}")
        return 1
    print(f"ok   {name}: exit status {got}")
    return 0


def main():
    failures = 0
    # dynvm 1.4x ORT and 1.6x TorchScript (its faster environment): the 1-thread bar is met.
    fast = {"dynvm": 10.0, "ort": 14.0, "torch": 100.0, "torch-noblas": 16.0}
    rc, out = run(fast)
    failures += check("bar met", rc, 0, out)
    failures += check("bar met prints it", int("every case meets the bar" in out), 1, out)
    # 1.2x ORT: below the 1.3x bar.
    rc, out = run({"dynvm": 10.0, "ort": 12.0, "torch": 100.0, "torch-noblas": 16.0})
    failures += check("ORT ratio below the bar", rc, 1, out)
    # 1.4x TorchScript: below the 1.5x bar (the faster TorchScript environment counts).
    rc, out = run({"dynvm": 10.0, "ort": 14.0, "torch": 14.0, "torch-noblas": 100.0})
    failures += check("TorchScript ratio below the bar", rc, 1, out)
    # 2 threads: 0.9x ORT misses the 1x bar, which 1 thread's numbers would have met.
    rc, out = run({"dynvm": 10.0, "ort": 9.0, "torch": 100.0, "torch-noblas": 100.0}, threads="2")
    failures += check("2 threads below 1x", rc, 1, out)
    # Fast enough, but ONNX Runtime's tokens differ from PyTorch's.
    rc, out = run(fast, tokens_of={"ort": [5, 6, 7, 9]})
    failures += check("tokens differ", rc, 1, out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
