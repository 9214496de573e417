"""Threads: one Executable shared by 8 threads, timeout, cancel from another thread, a VM used
by two threads at once, the GIL released during a run, streaming."""

import threading
import time

import numpy as np
import pytest

import dynvm
from conftest import ROOT, charlm_case, long_charlm_inputs


def test_eight_threads_share_one_executable():
    exe = dynvm.compile(str(ROOT / "tools/models/gpt/model.onnx"))
    cases = []
    for i in range(4):
        d = ROOT / f"tools/models/gpt/case{i}"
        inputs = {k: np.load(d / f"input_{k}.npy") for k in ("prompt", "max_new_tokens")}
        cases.append((inputs, np.load(d / "output_tokens.npy")))
    errors, results = [], [None] * 8
    start = threading.Barrier(8)

    def worker(t):
        try:
            vm = dynvm.VirtualMachine(exe, threads=1 + t % 2)  # intra-op threads too
            start.wait()
            got = []
            for r in range(6):
                inputs, _ = cases[(t + r) % 4]
                got.append(vm.run(inputs)["tokens"])
            results[t] = got
        except BaseException as e:  # noqa: B902
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for t in range(8):
        for r in range(6):
            np.testing.assert_array_equal(results[t][r], cases[(t + r) % 4][1])


def start_long_run(vm):
    """Starts a 4096-step run on another thread; returns (thread, outcome) once it has emitted
    its first token, i.e. while it is surely in progress."""
    emitted = threading.Event()
    outcome = {}

    def on_emit(stream, value):
        emitted.set()

    def work():
        try:
            outcome["outputs"] = vm.run(long_charlm_inputs(), on_emit=on_emit)
        except BaseException as e:  # noqa: B902
            outcome["error"] = e
        emitted.set()

    thread = threading.Thread(target=work)
    thread.start()
    assert emitted.wait(60)
    return thread, outcome


def test_cancel_from_another_thread_and_the_vm_runs_again(charlm_exe):
    vm = dynvm.VirtualMachine(charlm_exe)
    thread, outcome = start_long_run(vm)
    assert vm.running
    # The same VM from a second thread: refused, the running call is not disturbed.
    with pytest.raises(dynvm.FailedPreconditionError, match="running on another thread"):
        vm.run(long_charlm_inputs())
    vm.cancel()
    thread.join()
    assert isinstance(outcome.get("error"), dynvm.CancelledError), outcome
    assert "cancelled" in str(outcome["error"])
    inputs, want = charlm_case("greedy_b1")
    np.testing.assert_array_equal(vm.run(inputs)["tokens"], want)


def test_timeout_raises_timeout_error_and_the_vm_runs_again(charlm_exe):
    vm = dynvm.VirtualMachine(charlm_exe)
    with pytest.raises(dynvm.DeadlineExceededError, match="run passed its deadline") as info:
        vm.run(long_charlm_inputs(), timeout=0.0)  # passed before the first instruction
    assert isinstance(info.value, TimeoutError)
    # Passed in the decode loop (the first token's callback outlasts the deadline): the
    # message names the function, pc and node.
    # (The VM checks the deadline every 256 loop iterations.)
    slept = []

    def sleep_once(stream, value):
        if not slept:
            slept.append(time.sleep(0.1))

    with pytest.raises(TimeoutError, match=r"function 'main' pc \d+ .*: run passed its deadline"):
        vm.run(long_charlm_inputs(), timeout=0.05, on_emit=sleep_once)
    inputs, want = charlm_case("greedy_b1")
    np.testing.assert_array_equal(vm.run(inputs, timeout=600)["tokens"], want)


def test_the_gil_is_released_while_running(charlm_exe):
    # While the run holds no GIL, this thread keeps running Python and sees it in progress.
    vm = dynvm.VirtualMachine(charlm_exe)
    seen_running = False
    outcome = {}
    def work():
        try:
            vm.run(long_charlm_inputs())
        except dynvm.CancelledError as e:
            outcome["error"] = e

    thread = threading.Thread(target=work)
    thread.start()
    while thread.is_alive():
        if vm.running:
            seen_running = True
            break
    vm.cancel()
    thread.join()
    assert seen_running


def test_stream_yields_the_tokens_as_the_final_output(charlm_exe):
    inputs, want = charlm_case("greedy_b3")  # batch 3: one [3] tensor per step
    vm = dynvm.VirtualMachine(charlm_exe)
    stream = vm.stream(inputs)
    values = []
    for s, value in stream:
        assert s == 0 and value.dtype == np.int64 and value.shape == (3,)
        values.append(value)
    np.testing.assert_array_equal(np.stack(values, axis=1), want)
    np.testing.assert_array_equal(stream.outputs["tokens"], want)
    # Keywords, and a stream closed early: the run stops and the VM runs again.
    with vm.stream(**long_charlm_inputs()) as early:
        first = [v for _, v in zip(range(5), early)]
    assert len(first) == 5 and not vm.running
    np.testing.assert_array_equal(vm.run(inputs)["tokens"], want)
    # An error of the run is raised by the iteration.
    with pytest.raises(TimeoutError):
        list(vm.stream(long_charlm_inputs(), timeout=0))


def test_on_emit_exceptions_propagate(charlm_exe):
    inputs, want = charlm_case("greedy_b1")
    vm = dynvm.VirtualMachine(charlm_exe)
    calls = []

    def on_emit(stream, value):
        calls.append(value.copy())
        if len(calls) == 3:
            raise RuntimeError("enough")

    with pytest.raises(RuntimeError, match="enough"):
        vm.run(inputs, on_emit=on_emit)
    np.testing.assert_array_equal(np.concatenate(calls), want[0, :3])
    np.testing.assert_array_equal(vm.run(inputs)["tokens"], want)
